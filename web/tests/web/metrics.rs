//! /metrics read by Prometheus's own `promtool check metrics` and by the
//! parser of the Python client `prometheus_client`, against the API's numbers.

use crate::common::*;
use crate::harness::*;
use crate::node;
use serde_json::json;

#[test]
fn metrics_parse_cleanly_and_equal_the_api_for_list_and_stream_queues() {
    let test = "metrics_parse_cleanly_and_equal_the_api_for_list_and_stream_queues";
    let Some(tool) = node::or_skip(test, promtool()) else {
        return;
    };
    let Some(python) = node::or_skip(test, prom_python()) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    // A name with every character a label value must escape.
    let weird = "we\"ird\\q\nx";
    let web = Web::start(
        &server.url(),
        &[
            "--queue", "orders", "--queue", "s", "--queue", weird, "--queue", "bad",
        ],
    );
    // A list queue with due, pending, dead and future jobs (none falls due
    // during the check: build_queue keeps them >= 15 s away), and a stream
    // queue with jobs in flight.
    let b = build_queue(&mut con, "orders");
    let (s_len, s_in_flight) = stream_queue(&mut con, "s", 9, 5, 3, 2);
    let _: i64 = q!(
        &mut con,
        "LPUSH",
        format!("{{{weird}}}:pending"),
        "w1",
        "w2"
    );
    let _: i64 = q!(&mut con, "ZADD", format!("{{{weird}}}:dead"), 1, "d");
    let _: () = q!(&mut con, "SET", "{bad}:schedule", "not a zset");
    // Some counters that are not zero, and an unsafe policy for the gauge.
    promote(&mut con, "{none}:schedule", "{none}:pending");
    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru");

    let (status, content_type, text) = web.get_typed("/metrics");
    assert_eq!(status, 200, "{text}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    // The same moment: nothing changes between the two reads (no job falls
    // due, nothing is written, reading changes no counter).
    let (status, api) = web.api();
    assert_eq!(status, 200, "{api}");
    promtool_check(&tool, &text);
    let samples = parse_exposition(python, &text);

    let find = |name: &str, queue: Option<&str>| -> Option<(String, f64)> {
        samples
            .iter()
            .find(|(_, n, labels, _)| {
                n == name && queue.is_none_or(|q| labels["queue"].as_str() == Some(q))
            })
            .map(|(t, _, _, v)| (t.clone(), *v))
    };
    assert_eq!(find("echomq_up", None), Some(("gauge".into(), 1.0)));
    let mut queue_samples = 0;
    for q in api["queues"].as_array().expect("queues") {
        let name = q["name"].as_str().expect("name");
        for field in ["scheduled", "due", "pending", "in_flight", "dead"] {
            let got = find(&format!("echomq_queue_{field}"), Some(name));
            if q.get("error").is_some() {
                assert_eq!(got, None, "{name}: a queue in error has no samples");
                continue;
            }
            let want = q[field].as_f64().expect("number");
            assert_eq!(got, Some(("gauge".into(), want)), "{name} {field}");
            queue_samples += 1;
        }
    }
    assert_eq!(queue_samples, 3 * 5, "{text}");
    // The numbers themselves, not only their agreement.
    let scheduled = (b.herd + b.jittered + b.beyond + b.due) as f64;
    let v = |n: &str, q: &str| find(n, Some(q)).map(|(_, v)| v);
    assert_eq!(v("echomq_queue_scheduled", "orders"), Some(scheduled));
    assert_eq!(v("echomq_queue_due", "orders"), Some(b.due as f64));
    assert_eq!(v("echomq_queue_pending", "orders"), Some(b.pending as f64));
    assert_eq!(v("echomq_queue_dead", "orders"), Some(b.dead as f64));
    assert_eq!(v("echomq_queue_pending", "s"), Some(s_len as f64));
    assert_eq!(v("echomq_queue_in_flight", "s"), Some(s_in_flight as f64));
    assert_eq!((s_len, s_in_flight), (7, 3 + 3));
    // The weird name came back through the parser as it was.
    assert_eq!(v("echomq_queue_pending", weird), Some(2.0));
    assert_eq!(v("echomq_queue_dead", weird), Some(1.0));

    // Every INFO echomq field: counters as <field>_total, the two gauges as themselves.
    let info = api["info"].as_object().expect("info");
    assert_eq!(info.len(), 17, "{info:?}");
    for (field, value) in info {
        let want = value.as_f64().expect("number");
        let got = match field.as_str() {
            "echomq_eviction_policy_safe" => (find(field, None), "gauge"),
            // In seconds, Prometheus's base unit: 0 here, as no timer ran.
            "echomq_auto_promote_lag_ms_max" => {
                (find("echomq_auto_promote_lag_seconds_max", None), "gauge")
            }
            _ => (find(&format!("{field}_total"), None), "counter"),
        };
        assert_eq!(got.0, Some((got.1.to_string(), want)), "{field}");
    }
    assert_eq!(
        find("echomq_eviction_policy_safe", None),
        Some(("gauge".into(), 0.0))
    );
    assert_eq!(
        find("echomq_promote_calls_total", None),
        Some(("counter".into(), 1.0))
    );
    // The groups of each readable queue: none here.
    for q in ["orders", "s", weird] {
        for name in ["echomq_groups", "echomq_groups_limited"] {
            assert_eq!(
                find(name, Some(q)),
                Some(("gauge".into(), 0.0)),
                "{q} {name}"
            );
        }
    }
    assert_eq!(find("echomq_groups", Some("bad")), None);
    // The recurring definitions of each readable queue: none here.
    for q in ["orders", "s", weird] {
        assert_eq!(
            find("echomq_repeats", Some(q)),
            Some(("gauge".into(), 0.0)),
            "{q}"
        );
    }
    assert_eq!(find("echomq_repeats", Some("bad")), None);
    // Nothing else: 1 + 15 queue samples + 3 * 2 group gauges + 3
    // recurring gauges + 17 INFO fields (no queue is limited or held, so no
    // release series).
    assert_eq!(samples.len(), 1 + 15 + 6 + 3 + 17, "{samples:?}");
    assert!(!text.contains("echomq_release_rate"), "{text}");
}

#[test]
fn metrics_say_echomq_up_0_with_status_200_without_the_server() {
    let mut server = Server::start();
    let web = Web::start(&server.url(), &["--queue", "q"]);
    let mut con = server.conn();
    let _: i64 = q!(&mut con, "ZADD", "{q}:schedule", 1, "j");
    let _: () = q!(&mut con, "CONFIG", "RESETSTAT");
    let (status, text) = web.get("/metrics");
    assert_eq!(status, 200);
    assert!(text.lines().any(|l| l == "echomq_up 1"), "{text}");
    assert!(
        text.lines()
            .any(|l| l == r#"echomq_queue_due{queue="q"} 1"#),
        "{text}"
    );
    // /metrics exports no histogram, so it asks for none: the spreads are
    // nearly all of a scrape's server time.
    let stats: String = q!(&mut con, "INFO", "commandstats");
    let stats = stats.to_lowercase();
    assert!(!stats.contains("cmdstat_echo.spread"), "{stats}");
    web.api();
    let again: String = q!(&mut con, "INFO", "commandstats");
    assert!(
        again.to_lowercase().contains("cmdstat_echo.spread"),
        "{again}"
    );
    assert!(stats.contains("cmdstat_zcount"), "{stats}");
    server.stop();
    for _ in 0..2 {
        // The dropped connection, then a refused one: both are echomq_up 0.
        let (status, text) = web.get("/metrics");
        assert_eq!(status, 200, "{text}");
        assert!(text.lines().any(|l| l == "echomq_up 0"), "{text}");
        assert!(!text.contains("echomq_queue_"), "{text}");
        if let Ok(tool) = promtool() {
            promtool_check(&tool, &text);
        }
    }
}

#[test]
fn release_metrics_equal_echo_limits_and_pass_promtool() {
    let test = "release_metrics_equal_echo_limits_and_pass_promtool";
    let Some(tool) = node::or_skip(test, promtool()) else {
        return;
    };
    let Some(python) = node::or_skip(test, prom_python()) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    let mut args = Vec::new();
    for q in LIMITED {
        args.extend(["--queue", q]);
    }
    let web = Web::start(&server.url(), &args);
    let built = limited_queues(&mut con);
    let (status, content_type, text) = web.get_typed("/metrics");
    assert_eq!(status, 200, "{text}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    promtool_check(&tool, &text);
    let samples = parse_exposition(python, &text);
    let find = |name: &str, queue: Option<&str>| -> Option<(String, f64)> {
        samples
            .iter()
            .find(|(_, n, labels, _)| {
                n == name && queue.is_none_or(|q| labels["queue"].as_str() == Some(q))
            })
            .map(|(t, _, _, v)| (t.clone(), *v))
    };
    // Each series equals ECHO.LIMITS of the queue's schedule, read now.
    let series = [
        (
            "echomq_release_rate_per_second",
            "gauge",
            "rate-in-force",
            1.0,
        ),
        (
            "echomq_release_rate_ceiling_per_second",
            "gauge",
            "rate",
            1.0,
        ),
        (
            "echomq_release_held_until_seconds",
            "gauge",
            "held-until-ms",
            1000.0,
        ),
        ("echomq_release_released_total", "counter", "released", 1.0),
        ("echomq_release_failures_total", "counter", "failures", 1.0),
    ];
    let mut release_samples = 0;
    for q in LIMITED {
        let limits = limits_of(&mut con, &format!("{{{q}}}:schedule"));
        let limited = limits["rate"].is_some();
        let held = limits["held-until-ms"] != Some(0.0);
        for (name, kind, field, divisor) in series {
            let got = find(name, Some(q));
            let want = limits[field]
                .filter(|_| limited || held)
                // Divided, as echomq-web divides: `* 0.001` can differ from
                // `/ 1000.0` in the last bit.
                .map(|v| (kind.to_string(), v / divisor));
            assert_eq!(got, want, "{q} {name}\n{text}");
            release_samples += usize::from(got.is_some());
        }
    }
    // lim and ada: all five; held: its hold alone; free: nothing.
    assert_eq!(release_samples, 5 + 5 + 1, "{text}");
    // The numbers themselves, not only their agreement.
    let v = |n: &str, q: &str| find(n, Some(q)).map(|(_, v)| v);
    assert_eq!(v("echomq_release_rate_per_second", "lim"), Some(100.0));
    assert_eq!(
        v("echomq_release_rate_per_second", "ada"),
        Some(5.0 * 1000.0 / 3_600_000.0)
    );
    assert_eq!(
        v("echomq_release_rate_ceiling_per_second", "ada"),
        Some(10.0 * 1000.0 / 3_600_000.0)
    );
    assert_eq!(v("echomq_release_released_total", "ada"), Some(5.0));
    assert_eq!(v("echomq_release_failures_total", "ada"), Some(1.0));
    assert_eq!(v("echomq_release_held_until_seconds", "lim"), Some(0.0));
    assert_eq!(
        v("echomq_release_held_until_seconds", "held"),
        Some(built.held_until_ms as f64 / 1000.0)
    );
    assert_eq!(v("echomq_release_rate_per_second", "held"), None);
    assert!(!text.contains(r#"echomq_release_held_until_seconds{queue="free"}"#));
    // The new INFO fields, as counters like the others.
    for (name, want) in [
        ("echomq_scheduled_total", 3.0),
        ("echomq_release_limited_total", 1.0),
        ("echomq_adaptive_decreases_total", 1.0),
    ] {
        assert_eq!(find(name, None), Some(("counter".into(), want)), "{name}");
    }
    let (_, api) = web.api();
    assert_eq!(api["info"]["echomq_adaptive_decreases"], json!(1));
}
