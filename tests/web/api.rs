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
             "in_flight": 0, "dead": b.dead, "spread": spread},
            {"name": "idle", "scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0, "spread": vec![0; 60]},
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
    let back = Restarted::on(port);
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
            {"name": "s", "scheduled": 0, "due": 0, "pending": 5, "in_flight": 5, "dead": 1, "spread": zeros},
            {"name": "l", "scheduled": 0, "due": 0, "pending": 3, "in_flight": 0, "dead": 0, "spread": zeros},
            {"name": "e", "scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0, "spread": zeros},
            {"name": "m", "scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0, "spread": zeros},
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
