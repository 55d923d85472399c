//! The recurring definitions of a queue (ECHO.REPEAT): their count, the
//! unarmed ones and the ten to fire first, with their next fire time, in the
//! JSON, on the page and as one gauge per queue in /metrics (no series per
//! definition); nothing from a server without ECHO.REPEATS; and on a
//! cluster, each queue's definitions read on the primary serving it.

use crate::common::cluster::Cluster;
use crate::common::*;
use crate::harness::*;
use crate::node;
use serde_json::{json, Value as Json};

/// One definition as ECHO.REPEATS gives it over RESP2 (a flat array), as
/// the JSON should show it.
fn listed(con: &mut Connection, schedule: &str) -> Vec<Json> {
    let v: redis::Value = q!(con, "ECHO.REPEATS", schedule);
    let redis::Value::Array(entries) = v else {
        panic!("ECHO.REPEATS: {v:?}");
    };
    entries
        .iter()
        .map(|e| {
            let redis::Value::Array(kv) = e else {
                panic!("an entry: {e:?}");
            };
            let mut out = serde_json::Map::new();
            for p in kv.chunks_exact(2) {
                let key = match &p[0] {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(b).replace('-', "_"),
                    other => panic!("a field name: {other:?}"),
                };
                let value = match &p[1] {
                    redis::Value::Nil => Json::Null,
                    redis::Value::Int(i) => json!(i),
                    redis::Value::BulkString(b) => json!(String::from_utf8_lossy(b)),
                    other => panic!("{key}: {other:?}"),
                };
                out.insert(key, value);
            }
            Json::Object(out)
        })
        .collect()
}

/// The `repeats` the API should give for `defs` (ECHO.REPEATS's entries)
/// at `now`: the count, the unarmed, and the unarmed then the soonest to
/// fire, ten of them, each with its `fire_in_ms`.
fn expected(mut defs: Vec<Json>, now: i64) -> Json {
    let count = defs.len();
    let unarmed = defs.iter().filter(|d| d["fire_at_ms"].is_null()).count();
    defs.sort_by_key(|d| {
        let fire = d["fire_at_ms"].as_i64();
        (
            fire.is_some(),
            fire.unwrap_or_else(|| d["next_ms"].as_i64().unwrap_or(0)),
            d["id"].as_str().unwrap_or_default().to_string(),
        )
    });
    defs.truncate(10);
    for d in &mut defs {
        let fire_in = d["fire_at_ms"].as_i64().map(|at| at - now);
        let payload_key = d["payload_key"].clone();
        let obj = d.as_object_mut().expect("an object");
        // In the JSON's order: fire_in_ms after fire_at_ms, payload_key last.
        obj.remove("payload_key");
        obj.insert("fire_in_ms".into(), json!(fire_in));
        obj.insert("payload_key".into(), payload_key);
    }
    json!({"count": count, "unarmed": unarmed, "next": defs})
}

/// `{cal}`: 15 definitions, one of them unarmed (its occurrence removed by
/// hand), of every kind: a jittered hourly cron in a zone with a payload,
/// a nightly cron with UNTIL, twelve `every:` of 2..=13 minutes, and the
/// unarmed `every:30000`. Their count.
fn calendar(con: &mut Connection) -> usize {
    let s = "{cal}:schedule";
    let now = server_time_ms(con);
    let _: i64 = q!(
        con,
        "ECHO.REPEAT",
        s,
        "hourly",
        "cron:0 * * * *",
        "JITTER",
        300_000,
        "TZ",
        "europe/berlin",
        "PAYLOAD",
        "{cal}:jobs",
        r#"{"report":"hourly"}"#
    );
    let _: i64 = q!(
        con,
        "ECHO.REPEAT",
        s,
        "nightly",
        "cron:30 2 * * *",
        "TZ",
        "America/New_York",
        "UNTIL",
        now + 400 * 86_400_000
    );
    for i in 0..12 {
        let _: i64 = q!(
            con,
            "ECHO.REPEAT",
            s,
            format!("every-{i:02}"),
            format!("every:{}", (i + 2) * 60_000)
        );
    }
    // Armed, then its member removed by hand: nothing fires for it.
    let _: i64 = q!(con, "ECHO.REPEAT", s, "gone", "every:30000");
    let gone = listed(con, s)
        .into_iter()
        .find(|d| d["id"] == json!("gone"))
        .expect("gone listed");
    let member = format!("gone@{}", gone["next_ms"]);
    let removed: i64 = q!(con, "ZREM", s, &member);
    assert_eq!(removed, 1, "{member}");
    15
}

/// The listed definition `id`; the listing's order is by fire time, which
/// for the crons depends on the hour the test runs in.
fn by_id<'a>(next: &'a [Json], id: &str) -> &'a Json {
    next.iter()
        .find(|d| d["id"] == json!(id))
        .unwrap_or_else(|| panic!("{id} not among {next:?}"))
}

#[test]
fn api_lists_the_recurring_definitions_of_a_queue_with_their_next_fire_time() {
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(&server.url(), &["--queue", "cal", "--queue", "plain"]);
    let count = calendar(&mut con);
    let _: i64 = q!(&mut con, "LPUSH", "{plain}:pending", "a");
    let errors_before = info_field(&mut con, "stats", "total_error_replies");
    let defs = listed(&mut con, "{cal}:schedule");
    assert_eq!(defs.len(), count);
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let now = got["now_ms"].as_i64().expect("now_ms");
    let cal = &got["queues"][0];
    assert_eq!(cal["repeats"], expected(defs, now), "{got}");
    // What the API says of the figures themselves: the unarmed one first,
    // then (by id: the hourly and nightly crons fire before it near their
    // hour) the two-minute one; the zone in the database's spelling; each
    // armed occurrence a member of the schedule, fired in the future.
    let next = cal["repeats"]["next"].as_array().expect("next");
    assert_eq!(next[0]["id"], json!("gone"), "{cal}");
    assert_eq!(next[0]["fire_in_ms"], Json::Null, "{cal}");
    let two_minutes = by_id(next, "every-00");
    let fire_in = two_minutes["fire_in_ms"].as_i64().expect("fire_in_ms");
    assert!(fire_in > 100_000 && fire_in <= 120_000, "{fire_in}");
    assert_eq!(cal["repeats"]["unarmed"], json!(1));
    assert_eq!(cal["scheduled"], json!(count - 1), "{cal}");
    let hourly = listed(&mut con, "{cal}:schedule")
        .into_iter()
        .find(|d| d["id"] == json!("hourly"))
        .expect("hourly");
    assert_eq!(hourly["tz"], json!("Europe/Berlin"));
    assert_eq!(hourly["payload_key"], json!("{cal}:jobs"));
    let (nominal, fire) = (
        hourly["next_ms"].as_i64().expect("next_ms"),
        hourly["fire_at_ms"].as_i64().expect("fire_at_ms"),
    );
    assert_eq!(nominal % 3_600_000, 0, "{hourly}");
    assert!((nominal..=nominal + 300_000).contains(&fire), "{hourly}");
    // A queue without definitions shows none; the scrape is still three
    // round trips and sends nothing that fails.
    assert_eq!(got["queues"][1]["repeats"], no_repeats(), "{got}");
    assert_eq!(got["round_trips"], json!(3));
    assert_eq!(
        info_field(&mut con, "stats", "total_error_replies"),
        errors_before
    );
}

#[test]
fn metrics_count_recurring_definitions_per_queue_with_no_series_per_definition() {
    let test = "metrics_count_recurring_definitions_per_queue_with_no_series_per_definition";
    let Some(tool) = node::or_skip(test, promtool()) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(&server.url(), &["--queue", "cal", "--queue", "plain"]);
    let count = calendar(&mut con);
    let (status, text) = web.get("/metrics");
    assert_eq!(status, 200, "{text}");
    promtool_check(&tool, &text);
    let lines: Vec<&str> = text.lines().collect();
    for want in [
        format!(r#"echomq_repeats{{queue="cal"}} {count}"#),
        r#"echomq_repeats{queue="plain"} 0"#.to_string(),
        "# TYPE echomq_repeats gauge".to_string(),
    ] {
        assert!(lines.contains(&want.as_str()), "{want}\n{text}");
    }
    // No series names a definition.
    for l in lines.iter().filter(|l| !l.starts_with('#')) {
        assert!(!l.contains("every-") && !l.contains("hourly"), "{l}");
    }
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("echomq_repeats"))
            .count(),
        2,
        "{text}"
    );
}

#[test]
fn a_server_without_echo_repeats_shows_none() {
    // No module at all: ECHO.REPEATS (and ECHO.LIMITS, ECHO.GROUPS) are
    // unknown commands, as ECHO.REPEATS is to a module from before it.
    let server = Server::start_with(Options::without_module());
    let mut con = server.conn();
    let _: i64 = q!(&mut con, "LPUSH", "{q}:pending", "a", "b");
    let web = Web::start(&server.url(), &["--queue", "q"]);
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let q = &got["queues"][0];
    assert_eq!(q["pending"], json!(2), "{q}");
    assert_eq!(
        (&q["repeats"], &q["groups"], &q["release"]),
        (&Json::Null, &Json::Null, &Json::Null),
        "{q}"
    );
    let (status, text) = web.get("/metrics");
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("echomq_repeats"), "{text}");
    assert!(
        text.lines()
            .any(|l| l == r#"echomq_queue_pending{queue="q"} 2"#),
        "{text}"
    );
}

#[test]
fn the_page_lists_the_recurring_definitions_in_chromium() {
    let test = "the_page_lists_the_recurring_definitions_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(&server.url(), &["--queue", "cal", "--queue", "plain"]);
    let count = calendar(&mut con);
    let _: i64 = q!(&mut con, "LPUSH", "{plain}:pending", "a");
    browser.open(&format!("{}/", web.base));
    const REPEATS_JS: &str = r#"(() => {
      const out = {};
      for (const c of document.querySelectorAll("section.queue")) {
        const r = c.querySelector(".repeats");
        const summary = r.querySelector('[data-repeats="summary"]');
        out[c.dataset.queue] = {
          shown: !r.hidden && r.getBoundingClientRect().height > 0,
          summary: summary ? summary.textContent : null,
          next: [...r.querySelectorAll('[data-repeats="next"] li')]
            .map(li => ({ id: li.dataset.repeat, text: li.textContent,
                          unarmed: li.classList.contains("unarmed"), title: li.title })) };
      }
      return out.cal && out.cal.shown && out.plain && out;
    })()"#;
    let got = browser.wait(REPEATS_JS, "the recurring definitions of cal");
    let cal = &got["cal"];
    assert_eq!(
        cal["summary"],
        json!(format!(
            "{count} recurring · 1 not armed (the 10 to fire first listed)"
        )),
        "{got}"
    );
    let next = cal["next"].as_array().expect("next");
    assert_eq!(next.len(), 10, "{got}");
    assert_eq!(next[0]["id"], json!("gone"), "{got}");
    assert_eq!(next[0]["unarmed"], json!(true), "{got}");
    assert_eq!(
        next[0]["text"],
        json!("gone every:30000 not armed"),
        "{got}"
    );
    // The two-minute one (by id: a cron fires before it near its hour):
    // fires within two minutes, in minutes or seconds.
    let two_minutes = by_id(next, "every-00");
    let text = two_minutes["text"].as_str().unwrap_or_default();
    assert!(
        ["1 min", "2 min"]
            .iter()
            .any(|m| text == format!("every-00 every:120000 in {m}")),
        "{text}"
    );
    let title = two_minutes["title"].as_str().unwrap_or_default();
    assert!(
        title.contains("every:120000 in UTC") && title.contains("fires at "),
        "{title}"
    );
    // A queue without definitions shows none.
    assert_eq!(got["plain"]["shown"], json!(false), "{got}");
    browser.screenshot(&node::target_dir().join("web/echomq-web-repeats.png"));
}

#[test]
fn on_a_cluster_each_queues_definitions_are_read_on_its_primary() {
    let cluster = Cluster::start();
    let primaries = cluster.primaries();
    let (seed, a, b) = (primaries[0], primaries[1], primaries[2]);
    // One queue served by a, one by b; the --url is the seed's, which
    // serves neither.
    let name_on = |owner: usize| {
        (0..)
            .map(|i| format!("r{i}"))
            .find(|n| cluster.owner(cluster.keyslot(&format!("{{{n}}}:schedule"))) == owner)
            .expect("a name")
    };
    let (qa, qb) = (name_on(a), name_on(b));
    for (q, owner, n) in [(&qa, a, 3), (&qb, b, 5)] {
        let mut con = cluster.conn(owner);
        for i in 0..n {
            let _: i64 = q!(
                &mut con,
                "ECHO.REPEAT",
                format!("{{{q}}}:schedule"),
                format!("{q}-{i}"),
                "cron:*/5 * * * *",
                "JITTER",
                60_000
            );
        }
        // The definitions hash is in the schedule's slot.
        let hash = format!("{{{q}}}:schedule:echomq-repeats");
        let len: i64 = q!(&mut con, "HLEN", &hash);
        assert_eq!(len, n);
    }
    let web = Web::start(
        &cluster.nodes[seed].url(),
        &["--queue", &qa, "--queue", &qb],
    );
    let (status, api) = web.api();
    assert_eq!(status, 200, "{api}");
    let now = api["now_ms"].as_i64().expect("now_ms");
    for (q, owner) in [(&qa, a), (&qb, b)] {
        let defs = listed(&mut cluster.conn(owner), &format!("{{{q}}}:schedule"));
        let got = api["queues"]
            .as_array()
            .expect("queues")
            .iter()
            .find(|x| x["name"] == json!(q))
            .unwrap_or_else(|| panic!("no {q}: {api}"));
        assert_eq!(got["repeats"], expected(defs, now), "{q}: {api}");
    }
    let (status, text) = web.get("/metrics");
    assert_eq!(status, 200, "{text}");
    for (q, n) in [(&qa, 3), (&qb, 5)] {
        let want = format!(r#"echomq_repeats{{queue="{q}"}} {n}"#);
        assert!(text.lines().any(|l| l == want), "{want}\n{text}");
    }
}
