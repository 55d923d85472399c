//! /api/queues: its JSON checked exactly against queues built with known
//! counts, list and stream `pending`, the options, the auto-promoted queues,
//! and an outage answered with an error and recovered from.

use crate::common::*;
use crate::harness::*;
use serde_json::json;

#[test]
fn api_reports_known_counts_exactly() {
    let server = Server::start();
    let mut con = server.conn();
    // Started first: the queue's jobs must not become due while it starts.
    let web = Web::start(
        &server.url(),
        &["--queue", "orders", "--queue", "idle", "--queue", "broken"],
    );
    let b = build_queue(&mut con, "orders");
    // An empty queue, and one whose schedule is not a sorted set.
    let _: () = q!(&mut con, "SET", "{broken}:schedule", "not a zset");
    // INFO is the pipeline's first command: it sees no error of this scrape.
    let info = info_json(&mut con);
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");

    let now = got["now_ms"].as_i64().expect("now_ms");
    let server_now = server_time_ms(&mut con);
    assert!(
        now <= server_now && now > server_now - 10_000,
        "now_ms {now} vs {server_now}"
    );
    let all = scores(&mut con, "{orders}:schedule");
    let scheduled = b.herd + b.jittered + b.beyond + b.due;
    assert_eq!(all.len(), scheduled);
    let due = all.iter().filter(|&&s| s <= now).count();
    assert_eq!(due, b.due, "only the due jobs are due: {all:?} at {now}");
    let spread = buckets_of(&all, now, now + 60_000, 60);
    assert_eq!(spread.iter().sum::<i64>(), (b.herd + b.jittered) as i64);
    assert!(
        spread.iter().any(|&v| v >= b.herd as i64),
        "the herd is in one bucket: {spread:?}"
    );

    let want = json!({
        "now_ms": now,
        "window": {"start_ms": now, "end_ms": now + 60_000, "ms": 60_000, "buckets": 60},
        "queues": [
            {"name": "orders", "scheduled": scheduled, "due": b.due, "pending": b.pending,
             "in_flight": 0, "dead": b.dead, "spread": spread, "release": unlimited(), "groups": no_groups(), "repeats": no_repeats()},
            {"name": "idle", "scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0, "spread": vec![0; 60],
             "release": unlimited(), "groups": no_groups(), "repeats": no_repeats()},
            {"name": "broken", "error": "WRONGTYPE Operation against a key holding the wrong kind of value"},
        ],
        "info": info,
        "maxmemory_policy": "noeviction",
        "eviction_policy_safe": true,
        "round_trips": 3,
    });
    assert_eq!(got, want);
    // Reading the view wrote nothing and moved nothing.
    assert_eq!(scores(&mut con, "{orders}:schedule"), all);
    assert_eq!(info_field(&mut con, "echomq", "echomq_promoted"), "0");
}

#[test]
fn window_and_buckets_follow_the_options() {
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(
        &server.url(),
        &["--queue", "w", "--window-ms", "5000", "--buckets", "4"],
    );
    let fire = retry(&mut con, "{w}:schedule", "a", "fixed:2500", 1);
    retry(&mut con, "{w}:schedule", "b", "fixed:9000", 1);
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let now = got["now_ms"].as_i64().expect("now_ms");
    assert_eq!(
        got["window"],
        json!({"start_ms": now, "end_ms": now + 5000, "ms": 5000, "buckets": 4})
    );
    // "a" at fire, in bucket (fire - now) / 1250; "b" is beyond the 5 s window.
    let mut want = vec![0; 4];
    want[((fire - now) / 1250) as usize] = 1;
    assert_eq!(got["queues"][0]["spread"], json!(want), "{got}");
    assert_eq!(got["queues"][0]["scheduled"], json!(2));
}

#[test]
fn without_the_server_the_api_answers_an_error_then_recovers() {
    let mut server = Server::start();
    let port = server.port;
    let web = Web::start(&server.url(), &["--queue", "q"]);
    assert_eq!(web.api().0, 200);
    server.stop();
    for _ in 0..2 {
        // The first request meets the dropped connection, the next a refused one.
        let (status, got) = web.api();
        assert_eq!(status, 503, "{got}");
        let err = got["error"].as_str().expect("error text");
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    }
    let back = restarted_on(port);
    let mut con = back.conn();
    let _: i64 = q!(&mut con, "LPUSH", "{q}:pending", "j");
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["queues"][0]["pending"], json!(1));
}

#[test]
fn queues_of_the_auto_promote_config_are_shown() {
    // The queues of the module's `echomq.auto-promote` config join those of
    // --queue.
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        "{mail}:schedule {mail}:pending {orders}:schedule {orders}:pending"
    );
    let _: i64 = q!(&mut con, "LPUSH", "{mail}:pending", "m1", "m2");
    let web = Web::start(&server.url(), &["--queue", "orders", "--queue", "extra"]);
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let names: Vec<&str> = got["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(|q| q["name"].as_str())
        .collect();
    assert_eq!(names, ["orders", "extra", "mail"]);
    assert_eq!(got["queues"][2]["pending"], json!(2));
    assert!(
        got["info"].get("echomq_auto_promote_ticks").is_some(),
        "{got}"
    );
}

#[test]
fn api_counts_stream_and_list_pending_with_in_flight() {
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(
        &server.url(),
        &[
            "--queue", "s", "--queue", "l", "--queue", "e", "--queue", "m", "--queue", "bad",
        ],
    );
    // 6 entries; workers took 4 and finished 1 (acked and deleted), audit took 2.
    let (len, in_flight) = stream_queue(&mut con, "s", 6, 4, 2, 1);
    assert_eq!((len, in_flight), (5, 3 + 2));
    let _: i64 = q!(&mut con, "LPUSH", "{l}:pending", "a", "b", "c");
    // A stream with its group and nothing in it yet; a missing key; a string.
    let _: () = q!(
        &mut con,
        "XGROUP",
        "CREATE",
        "{e}:pending",
        "workers",
        "$",
        "MKSTREAM"
    );
    let _: () = q!(&mut con, "SET", "{bad}:pending", "not a queue");
    let _: i64 = q!(&mut con, "ZADD", "{s}:dead", 1, "d");
    let errors_before = info_field(&mut con, "stats", "total_error_replies");
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let zeros = vec![0; 60];
    assert_eq!(
        got["queues"],
        json!([
            {"name": "s", "scheduled": 0, "due": 0, "pending": 5, "in_flight": 5, "dead": 1, "spread": zeros, "release": unlimited(), "groups": no_groups(), "repeats": no_repeats()},
            {"name": "l", "scheduled": 0, "due": 0, "pending": 3, "in_flight": 0, "dead": 0, "spread": zeros, "release": unlimited(), "groups": no_groups(), "repeats": no_repeats()},
            {"name": "e", "scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0, "spread": zeros, "release": unlimited(), "groups": no_groups(), "repeats": no_repeats()},
            {"name": "m", "scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0, "spread": zeros, "release": unlimited(), "groups": no_groups(), "repeats": no_repeats()},
            {"name": "bad", "error": "WRONGTYPE Operation against a key holding the wrong kind of value"},
        ]),
        "{got}"
    );
    // Whatever the number of queues: TIME and configs, counts and TYPEs, lengths.
    assert_eq!(got["round_trips"], json!(3));
    // Reading a stream's groups acknowledges nothing and claims nothing.
    assert_eq!(
        stream_queue_pending(&mut con, "{s}:pending"),
        (5, 5),
        "unchanged by the scrape"
    );
    // Each `pending` is read as its TYPE says, so the scrape sends no command
    // that fails (a failure would show in the server's error stats), not
    // even for the misconfigured queue.
    let errors = info_field(&mut con, "stats", "total_error_replies");
    assert_eq!(
        errors, errors_before,
        "the scrape sent no command that failed"
    );
}

#[test]
fn api_reports_release_limits_and_holds_exactly() {
    let server = Server::start();
    let mut con = server.conn();
    let mut args = Vec::new();
    for q in LIMITED {
        args.extend(["--queue", q]);
    }
    let web = Web::start(&server.url(), &args);
    let built = limited_queues(&mut con);
    let errors_before = info_field(&mut con, "stats", "total_error_replies");
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let now = got["now_ms"].as_i64().expect("now_ms");
    let zeros = vec![0; 60];
    let ceiling = 10.0 * 1000.0 / 3_600_000.0;
    let halved = 5.0 * 1000.0 / 3_600_000.0;
    assert_eq!(
        got["queues"],
        json!([
            {"name": "lim", "scheduled": 53, "due": 50, "pending": 0, "in_flight": 0, "dead": 0,
             "spread": zeros,
             "release": {"limited": true, "rate_per_second": 100.0, "rate_in_force_per_second": 100.0,
                         "adaptive": false, "burst": 10, "available": 10, "held_until_ms": 0,
                         "held_for_ms": 0, "held_back": 40, "released": 0, "failures": 0}, "groups": no_groups(), "repeats": no_repeats()},
            {"name": "ada", "scheduled": 4, "due": 3, "pending": 5, "in_flight": 0, "dead": 0,
             "spread": zeros,
             "release": {"limited": true, "rate_per_second": ceiling, "rate_in_force_per_second": halved,
                         "adaptive": true, "burst": 5, "available": 0, "held_until_ms": 0,
                         "held_for_ms": 0, "held_back": 3, "released": 5, "failures": 1}, "groups": no_groups(), "repeats": no_repeats()},
            {"name": "held", "scheduled": 4, "due": 4, "pending": 0, "in_flight": 0, "dead": 0,
             "spread": zeros,
             "release": {"limited": false, "rate_per_second": null, "rate_in_force_per_second": null,
                         "adaptive": null, "burst": null, "available": null,
                         "held_until_ms": built.held_until_ms,
                         "held_for_ms": built.held_until_ms - now, "held_back": 4,
                         "released": null, "failures": null}, "groups": no_groups(), "repeats": no_repeats()},
            {"name": "free", "scheduled": 2, "due": 2, "pending": 0, "in_flight": 0, "dead": 0,
             "spread": zeros, "release": unlimited(), "groups": no_groups(), "repeats": no_repeats()},
        ]),
        "{got}"
    );
    assert!(
        (1..=600_000).contains(&(built.held_until_ms - now)),
        "held for {} ms",
        built.held_until_ms - now
    );
    // The same as ECHO.LIMITS says, field by field.
    for (i, q) in LIMITED.iter().enumerate() {
        let want = limits_of(&mut con, &format!("{{{q}}}:schedule"));
        let r = &got["queues"][i]["release"];
        for (field, key) in [
            ("rate", "rate_per_second"),
            ("rate-in-force", "rate_in_force_per_second"),
            ("burst", "burst"),
            ("available", "available"),
            ("held-until-ms", "held_until_ms"),
            ("released", "released"),
            ("failures", "failures"),
        ] {
            assert_eq!(r[key].as_f64(), want[field], "{q} {field}");
        }
        assert_eq!(
            r["adaptive"].as_bool(),
            want["adaptive"].map(|a| a != 0.0),
            "{q}"
        );
    }
    // One more command per queue, in the same pipeline: still three round
    // trips, and no command failed.
    assert_eq!(got["round_trips"], json!(3));
    assert_eq!(
        info_field(&mut con, "stats", "total_error_replies"),
        errors_before
    );
    assert_eq!(
        (
            got["info"]["echomq_scheduled"].clone(),
            got["info"]["echomq_release_limited"].clone(),
            got["info"]["echomq_adaptive_decreases"].clone()
        ),
        (json!(3), json!(1), json!(1)),
        "{}",
        got["info"]
    );
    // Reading the limits released nothing.
    assert_eq!(info_field(&mut con, "echomq", "echomq_promoted"), "5");
}

#[test]
fn a_user_not_allowed_echo_limits_still_sees_the_counts() {
    // What echomq-web shows when ECHO.LIMITS is refused: the counts, and the
    // refusal where the limits would be (an older module without the
    // command shows no limits at all: `release` null, see the unit tests).
    let server = Server::start();
    let mut admin = server.conn();
    let _: () = q!(
        &mut admin,
        "ACL",
        "SETUSER",
        "nolimits",
        "on",
        ">pw",
        "~*",
        "+@all",
        "-echo.limits"
    );
    let _: i64 = q!(&mut admin, "LPUSH", "{q}:pending", "a", "b");
    let web = Web::start(
        &format!("redis://nolimits:pw@127.0.0.1:{}/", server.port),
        &["--queue", "q"],
    );
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let q = &got["queues"][0];
    assert_eq!(q["pending"], json!(2), "{q}");
    assert_eq!(
        q["release"],
        json!({"error": "NOPERM User nolimits has no permissions to run the 'ECHO.LIMITS' command"}),
        "{q}"
    );
}
