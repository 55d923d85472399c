//! ECHO.PROMOTE into a stream: entries `job <member>` in fire-time order,
//! with the server's own IDs, blocked readers woken, the `xadd` events, and
//! the very IDs replicated.

mod common;

use std::time::Duration;

use common::*;

fn id_parts(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').expect("ms-seq");
    (ms.parse().unwrap(), seq.parse().unwrap())
}

/// A scalar reply as text.
fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

fn stream_field(con: &mut Connection, key: &str, field: &str) -> String {
    let info: Vec<Value> = q!(con, "XINFO", "STREAM", key);
    info.chunks(2)
        .find(|pair| text(&pair[0]) == field)
        .map(|pair| text(&pair[1]))
        .unwrap_or_else(|| panic!("no {field} in XINFO STREAM {key}"))
}

#[test]
fn promote_appends_due_jobs_to_a_stream_in_fire_time_order() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "XGROUP", "CREATE", "p", "workers", "0", "MKSTREAM");
    // ties at 3 follow the sorted set's own order (lexicographic)
    let _: () = q!(&mut con, "ZADD", "s", 5, "e", 1, "a", 3, "c2", 3, "c1", 2, "b", 9e15, "later");
    let t0 = server_time_ms(&mut con);
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", "s", "p", "LIMIT", 4);
    assert_eq!(moved, 4);
    assert_eq!(promote(&mut con, "s", "p"), 1);
    let t1 = server_time_ms(&mut con);
    let got = entries(&mut con, "p");
    let jobs: Vec<&str> = got.iter().map(|(_, j)| j.as_str()).collect();
    assert_eq!(jobs, ["a", "b", "c1", "c2", "e"]);
    let ids: Vec<(u64, u64)> = got.iter().map(|(id, _)| id_parts(id)).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "IDs increase: {ids:?}");
    for &(ms, _) in &ids {
        assert!((t0 as u64..=t1 as u64).contains(&ms), "{t0} {ms} {t1}");
    }
    let remaining: Vec<String> = q!(&mut con, "ZRANGE", "s", 0, -1);
    assert_eq!(remaining, ["later"]);
    assert_eq!(stream_field(&mut con, "p", "last-generated-id"), got[4].0);
    // INFO counters exactly as for a list
    assert_eq!(info_field(&mut con, "echomq", "echomq_promote_calls"), "2");
    assert_eq!(info_field(&mut con, "echomq", "echomq_promoted"), "5");
    // a consumer group delivers them in that order
    let read: Value = q!(
        &mut con,
        "XREADGROUP",
        "GROUP",
        "workers",
        "me",
        "COUNT",
        10,
        "STREAMS",
        "p",
        ">"
    );
    let text = format!("{read:?}");
    let pos = |job: &str| {
        text.find(&format!("\"{job}\""))
            .unwrap_or_else(|| panic!("{job} in {text}"))
    };
    assert!(
        pos("a") < pos("b") && pos("b") < pos("c1") && pos("c2") < pos("e"),
        "{text}"
    );
}

#[test]
fn a_client_blocked_in_xreadgroup_wakes() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "XGROUP", "CREATE", "p", "workers", "0", "MKSTREAM");
    let _: () = q!(&mut con, "ZADD", "s", 1, "job-1");
    let url = server.url();
    let reader = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let read: Value = q!(
            &mut con,
            "XREADGROUP",
            "GROUP",
            "workers",
            "c",
            "BLOCK",
            10_000,
            "STREAMS",
            "p",
            ">"
        );
        read
    });
    wait_blocked_clients(&mut con, 1);
    assert_eq!(promote(&mut con, "s", "p"), 1);
    let read = reader.join().unwrap();
    assert!(format!("{read:?}").contains("job-1"), "{read:?}");
    // delivered to the woken reader, and pending until it acknowledges
    let pending: Vec<Value> = q!(&mut con, "XPENDING", "p", "workers");
    assert_eq!(text(&pending[0]), "1", "{pending:?}");
}

#[test]
fn stream_promote_sends_the_events_of_zrem_then_xadd() {
    let server = Server::start();
    let mut setup = server.conn();
    for prefix in ["n:", "m:"] {
        let _: () = q!(&mut setup, "XADD", format!("{prefix}p"), "*", "job", "old");
    }
    let native = events(&server, "n:", |con| {
        let _: () = q!(con, "ZADD", "n:s", 1, "a", 2, "b");
        let _: () = q!(con, "ZREM", "n:s", "a", "b");
        let _: String = q!(con, "XADD", "n:p", "*", "job", "a");
        let _: String = q!(con, "XADD", "n:p", "*", "job", "b");
    });
    let module = events(&server, "m:", |con| {
        let _: () = q!(con, "ZADD", "m:s", 1, "a", 2, "b");
        assert_eq!(promote(con, "m:s", "m:p"), 2);
    });
    assert!(native.iter().any(|e| e.ends_with("xadd")), "{native:?}");
    assert_eq!(module, native);
}

#[test]
fn other_pending_types_are_refused_with_nothing_moved() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "ZADD", "s", 1, "a");
    for (key, make) in [
        ("str", cmd!("SET", "str", "x")),
        ("hash", cmd!("HSET", "hash", "f", "v")),
        ("set", cmd!("SADD", "set", "x")),
        ("zset", cmd!("ZADD", "zset", 1, "x")),
    ] {
        let _: () = make.query(&mut con).unwrap();
        let before = digest(&mut con);
        let e = refused(try_promote(&mut con, "s", key), key);
        assert!(e.starts_with("WRONGTYPE"), "{key}: {e}");
        assert_eq!(digest(&mut con), before, "{key}");
    }
    // a list and a missing key behave as before
    assert_eq!(promote(&mut con, "s", "fresh"), 1);
    let kind: String = q!(&mut con, "TYPE", "fresh");
    assert_eq!(kind, "list");
}

#[test]
fn a_stream_out_of_ids_keeps_what_it_took_and_refuses_the_rest() {
    let server = Server::start();
    let mut con = server.conn();
    let top = "18446744073709551615-18446744073709551615";
    let _: () = q!(&mut con, "XADD", "full", top, "job", "x");
    let _: () = q!(&mut con, "ZADD", "s", 1, "a", 2, "b");
    let e = refused(
        try_promote(&mut con, "s", "full"),
        "promote into a full stream",
    );
    assert_eq!(
        e,
        "ERR The stream has exhausted the last possible ID, unable to add more items"
    );
    let remaining: Vec<String> = q!(&mut con, "ZRANGE", "s", 0, -1);
    assert_eq!(remaining, ["a", "b"], "nothing lost");
    assert_eq!(entries(&mut con, "full").len(), 1, "nothing duplicated");
}

/// Promotes into a stream from plain calls, MULTI/EXEC and Lua.
fn stream_workload(con: &mut Connection) {
    let _: () = q!(con, "XGROUP", "CREATE", "{q}:p", "workers", "0", "MKSTREAM");
    for round in 0..30 {
        let mut pipe = redis::pipe();
        for i in 0..20 {
            let job = format!("job-{round}-{i}");
            pipe.add_command(cmd!("ECHO.RETRY", "{q}:s", job, "jitter:fixed:3", 1))
                .ignore();
        }
        let _: () = pipe.query(con).unwrap();
        std::thread::sleep(Duration::from_millis(4));
        match round % 3 {
            0 => {
                promote(con, "{q}:s", "{q}:p");
            }
            1 => {
                let _: () = redis::pipe()
                    .atomic()
                    .add_command(cmd!("ECHO.PROMOTE", "{q}:s", "{q}:p", "LIMIT", 7))
                    .ignore()
                    .add_command(cmd!("ECHO.PROMOTE", "{q}:s", "{q}:p"))
                    .ignore()
                    .query(con)
                    .unwrap();
            }
            _ => {
                let script =
                    "return redis.call('ECHO.PROMOTE', KEYS[1], KEYS[2], 'LIMIT', ARGV[1])";
                let _: i64 = q!(con, "EVAL", script, 2, "{q}:s", "{q}:p", 5);
            }
        }
    }
}

#[test]
fn a_replica_without_the_module_and_aof_replay_hold_the_same_entries_and_ids() {
    let (_primary, _replica, mut p, mut r) = primary_and_replica(Options::without_module());
    stream_workload(&mut p);
    wait_replica_synced(&mut p, &mut r);
    let got = entries(&mut p, "{q}:p");
    assert!(got.len() > 100, "{} entries", got.len());
    assert_eq!(entries(&mut r, "{q}:p"), got);
    for field in ["last-generated-id", "entries-added"] {
        assert_eq!(
            stream_field(&mut r, "{q}:p", field),
            stream_field(&mut p, "{q}:p", field),
            "{field}"
        );
    }
    assert_eq!(digest(&mut p), digest(&mut r));

    // AOF: replayed with and without the module, the same data
    let dir = TempDir::new("stream-aof");
    let aof = Options::aof_replay();
    let mut server = Server::start_in(aof.clone(), &dir.0);
    let mut con = server.conn();
    stream_workload(&mut con);
    let want = digest(&mut con);
    let want_last = stream_field(&mut con, "{q}:p", "last-generated-id");
    server.shutdown();
    for with_module in [true, false] {
        let mut options = aof.clone();
        options.load_module = with_module;
        let mut server = Server::start_in(options, &dir.0);
        let mut con = server.conn();
        assert_eq!(digest(&mut con), want, "module loaded: {with_module}");
        assert_eq!(
            stream_field(&mut con, "{q}:p", "last-generated-id"),
            want_last
        );
        server.shutdown();
    }
}

#[test]
fn the_timer_promotes_into_a_stream_and_a_module_less_replica_matches() {
    let primary = Server::start_with(Options::default().arg("echomq.auto-promote", "{t}:s {t}:p"));
    let replica = start_replica(&primary, Options::without_module());
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let _: () = q!(&mut p, "XGROUP", "CREATE", "{t}:p", "workers", "0", "MKSTREAM");
    let mut pipe = redis::pipe();
    for i in 0..100 {
        pipe.add_command(cmd!(
            "ECHO.RETRY",
            "{t}:s",
            format!("job-{i}"),
            "jitter:fixed:200",
            1
        ))
        .ignore();
    }
    let _: () = pipe.query(&mut p).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left: i64 = q!(&mut p, "ZCARD", "{t}:s");
        if left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} jobs never promoted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let got = entries(&mut p, "{t}:p");
    assert_eq!(got.len(), 100);
    assert_eq!(info_field(&mut p, "echomq", "echomq_auto_promoted"), "100");
    assert_eq!(info_field(&mut p, "echomq", "echomq_promoted"), "0");
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(entries(&mut r, "{t}:p"), got);
    assert_eq!(
        stream_field(&mut r, "{t}:p", "last-generated-id"),
        stream_field(&mut p, "{t}:p", "last-generated-id")
    );
    assert_eq!(digest(&mut p), digest(&mut r));
}
