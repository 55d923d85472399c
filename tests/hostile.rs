//! Hostile key names and config values: a name may hold `%` conversions,
//! NUL, control bytes, invalid UTF-8, or be 64 KB long. Every path that logs
//! one must leave the server up and write one printable line that names it
//! recognisably (escaped). Against real servers; also run on Redis 7.0.

mod common;

use std::time::Duration;

use common::*;

/// The hostile parts of names, with what each looks like in the log.
fn hostile() -> Vec<(Vec<u8>, String)> {
    let long = vec![b'L'; 65_536];
    vec![
        (b"%s%s%n".to_vec(), "%s%s%n".into()),
        (b"%p%99999999d".to_vec(), "%p%99999999d".into()),
        (b"nul\0byte".to_vec(), "nul\\x00byte".into()),
        (
            b"ctl\x01\x1b[31m\x7f".to_vec(),
            "ctl\\x01\\x1b[31m\\x7f".into(),
        ),
        (b"bad\xff\xfeutf8".to_vec(), "bad\\xff\\xfeutf8".into()),
        // Cut in the log, with its length said.
        (long, "L".repeat(150)),
    ]
}

fn stat(con: &mut Connection, field: &str) -> u64 {
    info_field(con, "echomq", &format!("echomq_{field}"))
        .parse()
        .expect("an INFO echomq counter")
}

/// The server's log as bytes (it must stay valid UTF-8: checked here).
fn log_text(server: &Server) -> String {
    let bytes = std::fs::read(server.dir.join(format!("server-{}.log", server.port)))
        .expect("the server's log");
    String::from_utf8(bytes).expect("the log holds only valid UTF-8: names are escaped")
}

/// The log lines that mention `needle`.
fn lines_with(server: &Server, needle: &str) -> Vec<String> {
    log_text(server)
        .lines()
        .filter(|l| l.contains(needle))
        .map(String::from)
        .collect()
}

fn name(tag: &str, hostile: &[u8], suffix: &str) -> Vec<u8> {
    let mut name = format!("{{{tag}}}").into_bytes();
    name.extend_from_slice(hostile);
    name.extend_from_slice(suffix.as_bytes());
    name
}

fn config_value(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut value = Vec::new();
    for (schedule, pending) in pairs {
        value.extend_from_slice(schedule);
        value.push(b' ');
        value.extend_from_slice(pending);
        value.push(b' ');
    }
    value
}

/// Waits until the timer has counted `n` auto-promote errors.
fn wait_errors(con: &mut Connection, n: u64) {
    wait_until(
        "the timer counts the failing pairs",
        Duration::from_secs(20),
        || {
            let errors = stat(con, "auto_promote_errors");
            (errors >= n)
                .then_some(())
                .ok_or(format!("{errors} errors"))
        },
    );
}

/// Makes one failing pair per hostile name, `{<tag><i>}<name>:s` and
/// `...:p`, with `spoil` (which also puts one due job in the schedule),
/// configures them all, and checks: the server stays up, each pair is
/// logged once, escaped and bounded, with `reason`, and nothing moved.
fn failing_pairs_are_logged_escaped(
    tag: &str,
    reason: &str,
    spoil: impl Fn(&mut Connection, &[u8], &[u8]),
) -> Server {
    let server = Server::start();
    let mut con = server.conn();
    let names = hostile();
    let mut pairs = Vec::new();
    for (i, (part, _)) in names.iter().enumerate() {
        let schedule = name(&format!("{tag}{i}"), part, ":s");
        let pending = name(&format!("{tag}{i}"), part, ":p");
        let _: () = q!(&mut con, "ZADD", &schedule, 1, "job");
        spoil(&mut con, &schedule, &pending);
        pairs.push((schedule, pending));
    }
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        config_value(&pairs)
    );
    wait_errors(&mut con, names.len() as u64);
    let pong: String = q!(&mut con, "PING");
    assert_eq!(pong, "PONG");
    for (i, (_, shown)) in names.iter().enumerate() {
        let lines = lines_with(&server, &format!("'{{{tag}{i}}}{shown}"));
        assert_eq!(lines.len(), 1, "pair {i} ({shown}) logged once:\n{lines:?}");
        assert!(lines[0].len() < 1024, "one bounded line: {}", lines[0]);
        assert!(lines[0].contains(reason), "{}", lines[0]);
    }
    for (schedule, _) in &pairs {
        let card: i64 = q!(&mut con, "ZCARD", schedule);
        assert_eq!(card, 1, "nothing moved");
    }
    server
}

#[test]
fn wrong_typed_pairs_with_hostile_names_are_logged_escaped() {
    let server = failing_pairs_are_logged_escaped("w", "WRONGTYPE", |con, _, pending| {
        let _: () = q!(con, "SET", pending, "not a list");
    });
    // {w5} + 64 KB + :s (or :p), cut, each with its length.
    let long = lines_with(&server, "...(65542 bytes)");
    assert_eq!(long.len(), 1, "{long:?}");
    assert_eq!(
        long[0].matches("...(65542 bytes)").count(),
        2,
        "{}",
        long[0]
    );
}

#[test]
fn a_stream_out_of_ids_under_a_hostile_name_is_logged_escaped() {
    let server = failing_pairs_are_logged_escaped(
        "x",
        "exhausted the last possible ID",
        |con, _, pending| {
            let _: String = q!(
                con,
                "XADD",
                pending,
                "18446744073709551615-18446744073709551615",
                "job",
                "last"
            );
        },
    );
    let mut con = server.conn();
    for (i, (part, _)) in hostile().iter().enumerate() {
        let len: i64 = q!(&mut con, "XLEN", name(&format!("x{i}"), part, ":p"));
        assert_eq!(len, 1, "nothing appended");
    }
}

#[test]
fn a_hostile_config_refused_at_load_leaves_the_server_up_and_is_logged_escaped() {
    let server = Server::start_with(Options::without_module().arg("enable-module-command", "yes"));
    let mut con = server.conn();
    let module = module_path();
    let module = module.to_str().expect("a UTF-8 path");
    // An odd number of names, each hostile; a newline and a tab are
    // separators, so they reach the log only inside the whole value.
    for (i, (part, shown)) in hostile().iter().enumerate() {
        let mut value = name(&format!("c{i}"), part, ":s\n");
        value.extend_from_slice(b"\t");
        let e = err!(
            &mut con,
            "MODULE",
            "LOADEX",
            module,
            "CONFIG",
            "echomq.auto-promote",
            &value
        );
        assert!(e.starts_with("ERR"), "{e}");
        let pong: String = q!(&mut con, "PING");
        assert_eq!(pong, "PONG");
        let lines = lines_with(&server, &format!("'{{c{i}}}{shown}"));
        assert_eq!(
            lines.len(),
            1,
            "value {i} ({shown}) logged once:\n{lines:?}"
        );
        assert!(lines[0].contains("refused at load"), "{}", lines[0]);
        if part.len() < 100 {
            assert!(lines[0].contains(":s\\n\\t'"), "{}", lines[0]);
        }
    }
    let modules = module_names(&mut con);
    assert!(
        !modules.iter().any(|m| m == "echomq"),
        "no half-loaded module: {modules:?}"
    );
    // And a good value still loads.
    let _: () = q!(
        &mut con,
        "MODULE",
        "LOADEX",
        module,
        "CONFIG",
        "echomq.auto-promote",
        "{ok}:s {ok}:p"
    );
    let pairs: Vec<Vec<String>> = q!(&mut con, "ECHO.QUEUES");
    assert_eq!(pairs, [["{ok}:s", "{ok}:p"]]);
}

/// Hostile names and bytes in every argument of every command: the server
/// answers each (a reply or an error whose text is printable ASCII), stays
/// up, and writes nothing on an error.
#[test]
fn hostile_bytes_in_every_argument_get_a_printable_answer() {
    let server = Server::start();
    let mut con = server.conn();
    let mut values: Vec<Vec<u8>> = hostile().into_iter().map(|(b, _)| b).collect();
    values.push("\u{100}\u{200}".as_bytes().to_vec());
    values.push(b"line\r\nbreak".to_vec());
    let now = server_time_ms(&mut con);
    let _: () = q!(&mut con, "ZADD", "{h}:s", now - 1, "due");
    for v in &values {
        let mut calls: Vec<Vec<Vec<u8>>> = Vec::new();
        let w = |words: &[&[u8]]| words.iter().map(|w| w.to_vec()).collect::<Vec<_>>();
        calls.push(w(&[b"ECHO.RETRY", v, b"job", b"fixed:10", b"1"]));
        calls.push(w(&[b"ECHO.RETRY", b"{h}:s", v, b"fixed:10000", b"1"]));
        calls.push(w(&[b"ECHO.RETRY", b"{h}:s", b"job", v, b"1"]));
        calls.push(w(&[b"ECHO.RETRY", b"{h}:s", b"job", b"fixed:1", v]));
        calls.push(w(&[b"ECHO.RETRY", b"{h}:s", b"job", b"fixed:1", b"1", v]));
        calls.push(w(&[
            b"ECHO.RETRY",
            b"{h}:s",
            b"job",
            b"fixed:1",
            b"1",
            b"MAXATTEMPTS",
            v,
            b"DEAD",
            b"{h}:d",
        ]));
        calls.push(w(&[
            b"ECHO.RETRY",
            b"{h}:s",
            b"job",
            b"fixed:1",
            b"1",
            b"MAXATTEMPTS",
            b"5",
            b"DEAD",
            v,
        ]));
        calls.push(w(&[b"ECHO.PROMOTE", v, b"{h}:p"]));
        calls.push(w(&[b"ECHO.PROMOTE", b"{h}:s", v]));
        calls.push(w(&[b"ECHO.PROMOTE", b"{h}:s", b"{h}:p", b"LIMIT", v]));
        calls.push(w(&[b"ECHO.PROMOTE", b"{h}:s", b"{h}:p", v, b"1"]));
        calls.push(w(&[b"ECHO.DELAY", v, b"1"]));
        calls.push(w(&[b"ECHO.DELAY", b"fixed:1", v]));
        calls.push(w(&[b"ECHO.SPREAD", v, b"0", b"10", b"2"]));
        calls.push(w(&[b"ECHO.SPREAD", b"{h}:s", v, b"10", b"2"]));
        calls.push(w(&[b"ECHO.SPREAD", b"{h}:s", b"0", v, b"2"]));
        calls.push(w(&[b"ECHO.SPREAD", b"{h}:s", b"0", b"10", v]));
        calls.push(w(&[b"ECHO.QUEUES", v]));
        calls.push(w(&[b"ECHO.ADD", v, b"{h}:p", b"job"]));
        calls.push(w(&[b"ECHO.ADD", b"{h}:s", v, b"job"]));
        calls.push(w(&[b"ECHO.ADD", b"{h}:s", b"{h}:p", v]));
        calls.push(w(&[b"ECHO.ADD", b"{h}:s", b"{h}:p", b"job", v]));
        calls.push(w(&[b"ECHO.ADD", b"{h}:s", b"{h}:p", b"job", b"DELAY", v]));
        calls.push(w(&[b"ECHO.ADD", b"{h}:s", b"{h}:p", b"job", b"GROUP", v]));
        calls.push(w(&[
            b"ECHO.ADD",
            b"{h}:s",
            b"{h}:p",
            v,
            b"DELAY",
            b"10",
            b"NX",
        ]));
        calls.push(w(&[b"CONFIG", b"SET", b"echomq.auto-promote", v]));
        calls.push(w(&[b"CONFIG", b"SET", b"echomq.auto-promote-limit", v]));
        calls.push(w(&[
            b"CONFIG",
            b"SET",
            b"echomq.auto-promote-interval-ms",
            v,
        ]));
        for call in calls {
            let before = digest(&mut con);
            let mut command = redis::cmd(std::str::from_utf8(&call[0]).unwrap());
            for word in &call[1..] {
                command.arg(word);
            }
            let result: redis::RedisResult<redis::Value> = command.query(&mut con);
            let shown = show(&call.iter().map(Vec::as_slice).collect::<Vec<_>>());
            if let Err(e) = result {
                let text = error_text(&e);
                assert!(
                    text.bytes().all(|b| b == b' ' || b.is_ascii_graphic()),
                    "{shown:?}: {text:?}"
                );
                assert_eq!(digest(&mut con), before, "{shown:?} wrote on an error");
            }
            let pong: String = q!(&mut con, "PING");
            assert_eq!(pong, "PONG", "{shown:?}");
        }
        let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", "");
    }
}

/// In a cluster a pair whose keys hash to different slots is refused by
/// every primary's timer, logged escaped, and no node goes down.
#[test]
fn a_cross_slot_pair_with_hostile_names_is_logged_escaped_on_every_primary() {
    if !is_valkey(&mut Server::start().conn()) {
        eprintln!("the cross-slot pair is checked on the Valkey test cluster only");
        return;
    }
    let cluster = common::cluster::Cluster::start();
    let names = hostile();
    let mut value = Vec::new();
    for (i, (part, _)) in names.iter().enumerate() {
        value.extend_from_slice(&name(&format!("s{i}"), part, ":s "));
        value.extend_from_slice(&name(&format!("p{i}"), part, ":p "));
    }
    for node in &cluster.nodes {
        let _: () = q!(
            &mut node.conn(),
            "CONFIG",
            "SET",
            "echomq.auto-promote",
            &value
        );
    }
    for i in cluster.primaries() {
        let mut con = cluster.conn(i);
        wait_errors(&mut con, names.len() as u64);
    }
    for (n, node) in cluster.nodes.iter().enumerate() {
        assert!(node.is_up(), "node {n} went down");
        let pong: String = q!(&mut node.conn(), "PING");
        assert_eq!(pong, "PONG");
    }
    for i in cluster.primaries() {
        let log = cluster.nodes[i].log();
        for (k, (_, shown)) in names.iter().enumerate() {
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.contains(&format!("'{{s{k}}}{shown}")))
                .collect();
            assert_eq!(
                lines.len(),
                1,
                "primary {i}, pair {k} ({shown}):\n{lines:?}"
            );
            assert!(lines[0].contains("CROSSSLOT"), "{}", lines[0]);
        }
    }
}

fn used_memory(con: &mut Connection) -> i64 {
    info_field(con, "memory", "used_memory")
        .parse()
        .expect("used_memory")
}

/// What the module keeps is freed at MODULE UNLOAD (the server's allocator
/// would otherwise count it for good), holds stay (they are keys), and a
/// refused config value is freed with its reply.
#[test]
fn unload_frees_the_tables_and_a_refused_value_is_not_kept() {
    let server = Server::start_with(Options::default().arg("enable-module-command", "yes"));
    let mut con = server.conn();
    let name = |i: usize| format!("{{q{i}}}:{}", "n".repeat(1000));
    // One cycle first, so what the server allocates once (its module and
    // command tables, the config dictionaries) is in the baseline.
    let cycle = |con: &mut Connection, round: usize| {
        let limits: Vec<String> = (0..10_000)
            .map(|i| format!("{} 10/s 10", name(i)))
            .collect();
        let _: () = q!(
            con,
            "CONFIG",
            "SET",
            "echomq.release-limits",
            limits.join(" ")
        );
        let mut pipe = redis::pipe();
        for i in 0..10_000 {
            pipe.cmd("ECHO.HOLD").arg(name(i)).arg(60_000).ignore();
        }
        let _: () = pipe.query(con).expect("holds");
        let _: () = q!(con, "MODULE", "UNLOAD", "echomq");
        let _: () = q!(con, "MODULE", "LOAD", module_path().display().to_string());
        // Holds are keys: they outlive the module's load, and are lifted by hand.
        let held: i64 = q!(con, "EXISTS", format!("{}:echomq-hold", name(round)));
        assert_eq!(held, 1, "a hold is kept across a reload");
        let mut pipe = redis::pipe();
        for i in 0..10_000 {
            pipe.cmd("ECHO.HOLD").arg(name(i)).arg(0).ignore();
        }
        let _: () = pipe.query(con).expect("lifts");
    };
    // The server shrinks its key tables, emptied of the holds, in its cron:
    // each reading waits for that.
    let settled = |con: &mut Connection, what: &str, below: i64| {
        wait_until(what, Duration::from_secs(30), || {
            let used = used_memory(con);
            (used < below)
                .then_some(())
                .ok_or(format!("used_memory {used}"))
        });
    };
    cycle(&mut con, 0);
    std::thread::sleep(Duration::from_secs(1));
    let before = used_memory(&mut con);
    for round in 1..=5 {
        cycle(&mut con, round);
    }
    settled(&mut con, "five unload cycles freed", before + (1 << 20));

    // A refused 40 MB value, sent on a connection closed after it (its query
    // buffer goes with it).
    let before = used_memory(&mut con);
    {
        let mut big = server.conn();
        let value = format!("{} 10/s", "x".repeat(40 << 20));
        let e = err!(&mut big, "CONFIG", "SET", "echomq.release-limits", &value);
        assert!(e.contains("echomq.release-limits"), "{e}");
    }
    settled(&mut con, "the refused value freed", before + (1 << 20));
}
