//! ECHO.RETRY, ECHO.PROMOTE and ECHO.DELAY against a real valkey-server.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::thread;
use std::time::Duration;

use common::*;

#[test]
fn module_loads_from_valkey_conf_and_declares_its_keys() {
    // The project's own valkey.conf, as `make run` uses it, with a free port.
    let root = env!("CARGO_MANIFEST_DIR");
    let conf = std::fs::read_to_string(format!("{root}/valkey.conf")).unwrap();
    assert!(conf
        .lines()
        .any(|l| l.trim() == "loadmodule ./target/release/libechomq.so"));
    let mut options = Options::without_module();
    options.config = Some(format!("{root}/valkey.conf").into());
    options.cwd = Some(root.into());
    let server = Server::start_with(options);
    let mut con = server.conn();
    assert!(echomq_loaded(&mut con), "{:?}", module_names(&mut con));

    let retry = ["ECHO.RETRY", "sched", "job", "fixed:1", "1"];
    let keys: Vec<String> = q!(&mut con, "COMMAND", "GETKEYS", &retry);
    assert_eq!(keys, ["sched"]);
    let promote = ["ECHO.PROMOTE", "sched", "pend", "LIMIT", "5"];
    let keys: Vec<String> = q!(&mut con, "COMMAND", "GETKEYS", &promote);
    assert_eq!(keys, ["sched", "pend"]);
}

#[test]
fn retry_replies_the_score_it_wrote_from_the_server_clock() {
    let server = Server::start();
    let mut con = server.conn();
    for (policy, attempts, delay_ms) in [
        ("fixed:1000", 1, 1000),
        ("fixed:0", 5, 0),
        ("exponential:100:10000", 1, 100),
        ("exponential:100:10000", 3, 400),
        ("EXPONENTIAL:100:10000", 64, 10_000),
        ("exponential:100:10000", 9223372036854775807, 10_000),
        ("fixed:10000000000000", 1, 10_000_000_000_000),
    ] {
        let before = server_time_ms(&mut con);
        let fire_at = retry(&mut con, "s", b"job", policy, attempts);
        let after = server_time_ms(&mut con);
        assert!(
            before + delay_ms <= fire_at && fire_at <= after + delay_ms,
            "{policy} {attempts}: {before} + {delay_ms} <= {fire_at} <= {after} + {delay_ms}"
        );
        let score: i64 = q!(&mut con, "ZSCORE", "s", "job");
        assert_eq!(score, fire_at, "the reply is the score written");
    }
    // each retry replaced the score: one member
    let card: i64 = q!(&mut con, "ZCARD", "s");
    assert_eq!(card, 1);
}

#[test]
fn jittered_retry_stays_in_its_window() {
    let server = Server::start();
    let mut con = server.conn();
    for i in 0..200 {
        let before = server_time_ms(&mut con);
        let fire_at = retry(
            &mut con,
            "s",
            format!("j{i}").as_bytes(),
            "jitter:exponential:100:10000",
            3,
        );
        let after = server_time_ms(&mut con);
        assert!(
            before <= fire_at && fire_at <= after + 400,
            "{before} <= {fire_at} <= {after}+400"
        );
    }
}

#[test]
fn binary_job_names_round_trip() {
    let server = Server::start();
    let mut con = server.conn();
    let job: &[u8] = b"\x00\xff\r\nj\x00b \"quoted\"";
    let fire_at = retry(&mut con, "s", job, "fixed:0", 1);
    let score: i64 = q!(&mut con, "ZSCORE", "s", job);
    assert_eq!(score, fire_at);
    assert_eq!(promote(&mut con, "s", "p"), 1);
    let popped: Vec<u8> = q!(&mut con, "RPOP", "p");
    assert_eq!(popped, job);
}

#[test]
fn retry_on_a_wrong_type_writes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "SET", "str", "x");
    let _: () = q!(&mut con, "LPUSH", "list", "x");
    let _: () = q!(&mut con, "HSET", "hash", "f", "v");
    let before = digest(&mut con);
    for key in ["str", "list", "hash"] {
        let err = err!(&mut con, "ECHO.RETRY", key, "job", "fixed:1", "1");
        assert!(err.starts_with("WRONGTYPE"), "{key}: {err}");
    }
    assert_eq!(digest(&mut con), before);
}

#[test]
fn delay_computes_without_writing() {
    let server = Server::start();
    let mut con = server.conn();
    let before = digest(&mut con);
    for (policy, attempts, want) in [
        ("fixed:1000", 1, 1000),
        ("exponential:100:10000", 3, 400),
        ("exponential:100:10000", 65, 10_000),
        ("exponential:100:10000", 1000, 10_000),
        ("jitter:fixed:0", 1, 0),
    ] {
        let got: i64 = q!(&mut con, "ECHO.DELAY", policy, attempts);
        assert_eq!(got, want, "{policy} {attempts}");
    }
    assert_eq!(digest(&mut con), before);
    let keys: i64 = q!(&mut con, "DBSIZE");
    assert_eq!(keys, 0);
}

/// Draws `n` delays for `policy` in one pipeline.
fn draws(con: &mut Connection, policy: &str, n: usize) -> Vec<i64> {
    let mut pipe = redis::pipe();
    for _ in 0..n {
        pipe.cmd("ECHO.DELAY").arg(policy).arg(1);
    }
    pipe.query(con).expect("ECHO.DELAY pipeline")
}

/// Pearson's chi-square statistic of `counts` against a uniform expectation.
fn chi_square(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

#[test]
fn jitter_is_uniform_over_the_closed_range() {
    let server = Server::start();
    let mut con = server.conn();

    // Small d: every value of 0..=d, both ends included, about equally often.
    // Chi-square with 3 degrees of freedom: 27.9 is the p = 10^-5 critical value.
    let mut counts = [0u64; 4];
    for v in draws(&mut con, "jitter:fixed:3", 20_000) {
        assert!((0..=3).contains(&v), "{v}");
        counts[v as usize] += 1;
    }
    assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
    assert!(chi_square(&counts) < 27.9, "not uniform: {counts:?}");

    // Larger d: 100 values, 99 degrees of freedom; 170 is past p = 10^-6.
    let mut counts = vec![0u64; 100];
    for v in draws(&mut con, "jitter:fixed:99", 50_000) {
        assert!((0..=99).contains(&v), "{v}");
        counts[v as usize] += 1;
    }
    assert!(counts[0] > 0 && counts[99] > 0);
    assert!(chi_square(&counts) < 170.0, "not uniform: {counts:?}");

    // d = 1: both values. A large d: the draw spans the range (10 equal bins).
    let ones = draws(&mut con, "jitter:fixed:1", 2000);
    assert!(ones.contains(&0) && ones.contains(&1));
    let big = 10_000_000_000_000i64;
    let mut bins = [0u64; 10];
    for v in draws(&mut con, "jitter:fixed:10000000000000", 10_000) {
        assert!((0..=big).contains(&v));
        bins[((v as i128 * 10) / (big as i128 + 1)) as usize] += 1;
    }
    // 9 degrees of freedom: 37.7 is the p = 10^-5 critical value.
    assert!(chi_square(&bins) < 37.7, "{bins:?}");

    // Nested jitter: jitter:jitter:fixed:d is not uniform; its mean is d/4.
    let nested = draws(&mut con, "jitter:jitter:fixed:1000", 20_000);
    let mean = nested.iter().sum::<i64>() as f64 / nested.len() as f64;
    assert!((mean - 250.0).abs() < 15.0, "mean {mean}");
}

#[test]
fn two_servers_draw_different_sequences() {
    let a = Server::start();
    let b = Server::start();
    let seq_a = draws(&mut a.conn(), "jitter:fixed:1000000000", 20);
    let seq_b = draws(&mut b.conn(), "jitter:fixed:1000000000", 20);
    assert_ne!(
        seq_a, seq_b,
        "each server process must seed its own generator"
    );
}

/// Retries a 50-job cohort inside one MULTI/EXEC, as one outage would.
fn cohort_fire_times(con: &mut Connection, key: &str, policy: &str) -> Vec<i64> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for i in 0..50 {
        pipe.add_command(cmd!("ECHO.RETRY", key, format!("job-{i}"), policy, 3));
    }
    pipe.query(con).expect("MULTI cohort")
}

#[test]
fn a_cohort_spreads_with_jitter_and_stays_together_without() {
    let server = Server::start();
    let mut con = server.conn();
    let plain = cohort_fire_times(&mut con, "plain", "exponential:100:10000");
    let plain_distinct: HashSet<i64> = plain.iter().copied().collect();
    if is_valkey(&mut con) {
        assert_eq!(
            plain_distinct.len(),
            1,
            "one now per transaction: {plain:?}"
        );
    } else {
        // Redis 7.0 has no cached-time API: the wall clock may tick once.
        assert!(plain_distinct.len() <= 2, "{plain:?}");
    }

    let jittered = cohort_fire_times(&mut con, "jittered", "jitter:exponential:100:10000");
    let distinct: HashSet<i64> = jittered.iter().copied().collect();
    // 50 draws from 401 values: about 47 distinct; fewer than 35 is a broken draw.
    assert!(
        distinct.len() >= 35,
        "{} distinct: {jittered:?}",
        distinct.len()
    );
    let now = *plain_distinct.iter().next().unwrap() - 400;
    assert!(jittered.iter().all(|&t| t >= now - 1000 && t <= now + 1400));
}

#[test]
fn promote_moves_only_due_members_earliest_first() {
    let server = Server::start();
    let mut con = server.conn();
    let now = server_time_ms(&mut con);
    let due = [(now - 3000, "c"), (now - 5000, "a"), (now - 4000, "b")];
    let not_due = [(now + 1_000_000, "future"), (now + 2_000_000, "later")];
    let _: () = q!(&mut con, "ZADD", "s", &due, &not_due);
    assert_eq!(promote(&mut con, "s", "p"), 3);
    let pending: Vec<String> = q!(&mut con, "LRANGE", "p", 0, -1);
    assert_eq!(pending, ["c", "b", "a"], "earliest-due at the right end");
    let left: Vec<String> = q!(&mut con, "ZRANGE", "s", 0, -1);
    assert_eq!(left, ["future", "later"]);
    assert_eq!(promote(&mut con, "s", "p"), 0);
    let first: String = q!(&mut con, "RPOP", "p");
    assert_eq!(first, "a", "first due, first out");
}

#[test]
fn promote_ties_follow_the_sorted_set_order() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "ZADD", "s", 1, "m3", 1, "m1", 1, "m2");
    assert_eq!(promote(&mut con, "s", "p"), 3);
    let order: Vec<String> = q!(&mut con, "RPOP", "p", 3);
    assert_eq!(order, ["m1", "m2", "m3"]);
}

#[test]
fn promote_honours_limit_and_the_default_of_1000() {
    let server = Server::start();
    let mut con = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..1500 {
        pipe.add_command(cmd!("ZADD", "s", i, format!("m{i:04}")))
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", "s", "p", "LIMIT", 3);
    assert_eq!(moved, 3);
    let three: Vec<String> = q!(&mut con, "LRANGE", "p", 0, -1);
    assert_eq!(three, ["m0002", "m0001", "m0000"]);
    assert_eq!(promote(&mut con, "s", "p"), 1000);
    assert_eq!(promote(&mut con, "s", "p"), 497);
    let len: i64 = q!(&mut con, "LLEN", "p");
    assert_eq!(len, 1500);
    // the list holds each member once, in fire-time order from the right
    let all: Vec<String> = q!(&mut con, "LRANGE", "p", 0, -1);
    let want: Vec<String> = (0..1500).rev().map(|i| format!("m{i:04}")).collect();
    assert_eq!(all, want);
    // a huge LIMIT is fine
    let _: () = q!(&mut con, "ZADD", "s", 1, "x");
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", "s", "p", "LIMIT", i64::MAX);
    assert_eq!(moved, 1);
}

#[test]
fn promote_puts_new_work_behind_older_pending_work_and_deletes_an_emptied_schedule() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "LPUSH", "p", "old");
    let _: () = q!(&mut con, "ZADD", "s", 1, "a", 2, "b");
    assert_eq!(promote(&mut con, "s", "p"), 2);
    let exists: i64 = q!(&mut con, "EXISTS", "s");
    assert_eq!(exists, 0, "an emptied schedule disappears");
    let order: Vec<String> = q!(&mut con, "RPOP", "p", 3);
    assert_eq!(order, ["old", "a", "b"]);
    // a missing schedule promotes nothing and creates nothing
    assert_eq!(promote(&mut con, "s", "p"), 0);
    let keys: i64 = q!(&mut con, "DBSIZE");
    assert_eq!(keys, 0);
}

#[test]
fn promote_refuses_wrong_types_before_moving_anything() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "ZADD", "s", 1, "due");
    let _: () = q!(&mut con, "ZADD", "future", 9e15, "x");
    let _: () = q!(&mut con, "SET", "str", "x");
    let _: () = q!(&mut con, "SADD", "set", "x");
    let _: () = q!(&mut con, "LPUSH", "list", "x");
    let before = digest(&mut con);
    for (schedule, pending) in [
        ("str", "p"), // schedule not a zset
        ("list", "p"),
        ("s", "str"), // pending not a list, with due work
        ("s", "set"),
        ("future", "str"),  // nothing due
        ("missing", "str"), // schedule missing
    ] {
        let err = err!(&mut con, "ECHO.PROMOTE", schedule, pending);
        assert!(err.starts_with("WRONGTYPE"), "{schedule} {pending}: {err}");
    }
    let err = err!(&mut con, "ECHO.PROMOTE", "s", "s");
    assert!(err.starts_with("ERR"), "{err}");
    assert_eq!(digest(&mut con), before, "nothing moved");
}

#[test]
fn promote_wakes_a_client_blocked_on_pending() {
    let server = Server::start();
    let mut con = server.conn();
    let mut waiter = server.conn();
    let blocked =
        thread::spawn(move || -> Option<(String, String)> { q!(&mut waiter, "BRPOP", "p", 30) });
    wait_blocked_clients(&mut con, 1);
    let _: () = q!(&mut con, "ZADD", "s", 1, "first", 2, "second");
    assert_eq!(promote(&mut con, "s", "p"), 2);
    let got = blocked.join().unwrap();
    assert_eq!(got, Some(("p".to_string(), "first".to_string())));
    let left: Vec<String> = q!(&mut con, "LRANGE", "p", 0, -1);
    assert_eq!(left, ["second"]);
}

#[test]
fn promote_invalidates_watch_only_when_it_writes() {
    let server = Server::start();
    let mut con = server.conn();
    let mut other = server.conn();
    for watched in ["s", "p"] {
        // nothing due: no write, the transaction goes through
        let _: () = q!(&mut con, "ZADD", "s", 9e15, "future");
        let _: () = q!(&mut con, "WATCH", watched);
        assert_eq!(promote(&mut other, "s", "p"), 0);
        let r: Option<Vec<String>> = redis::pipe().atomic().cmd("PING").query(&mut con).unwrap();
        assert!(
            r.is_some(),
            "{watched}: a promote that moved nothing must not fail WATCH"
        );

        // something due: WATCH on either key fails
        let _: () = q!(&mut con, "ZADD", "s", 1, "due");
        let _: () = q!(&mut con, "WATCH", watched);
        assert_eq!(promote(&mut other, "s", "p"), 1);
        let r: Option<Vec<String>> = redis::pipe().atomic().cmd("PING").query(&mut con).unwrap();
        assert!(r.is_none(), "{watched}: WATCH must be invalidated");
    }
    // ECHO.RETRY invalidates WATCH on the schedule too
    let _: () = q!(&mut con, "WATCH", "s");
    retry(&mut other, "s", b"j", "fixed:5", 1);
    let r: Option<Vec<String>> = redis::pipe().atomic().cmd("PING").query(&mut con).unwrap();
    assert!(r.is_none());
}

#[test]
fn retry_then_promote_then_consume_end_to_end() {
    let server = Server::start();
    let mut con = server.conn();
    let mut fire: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for i in 0..100 {
        let job = format!("job-{i}");
        let t = retry(&mut con, "q:s", job.as_bytes(), "jitter:fixed:200", 1);
        fire.entry(t).or_default().push(job);
    }
    thread::sleep(Duration::from_millis(250));
    assert_eq!(promote(&mut con, "q:s", "q:p"), 100);
    let mut got: Vec<String> = Vec::new();
    while let Some(job) = q!(&mut con, "RPOP", "q:p") {
        got.push(job);
    }
    // consumed in fire-time order (ties in member order)
    let want: Vec<String> = fire
        .into_values()
        .flat_map(|mut jobs| {
            jobs.sort();
            jobs
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn the_server_checks_arity_and_knows_each_key_spec() {
    let server = Server::start();
    let mut con = server.conn();
    let names = [
        "ECHO.RETRY",
        "ECHO.PROMOTE",
        "ECHO.DELAY",
        "ECHO.SPREAD",
        "ECHO.QUEUES",
        "ECHO.SCHEDULE",
        "ECHO.HOLD",
        "ECHO.LIMITS",
        "ECHO.ADD",
        "ECHO.GROUPLIMIT",
        "ECHO.GROUPS",
    ];
    let info: Value = q!(&mut con, "COMMAND", "INFO", &names);
    let Value::Array(commands) = info else {
        panic!("{info:?}")
    };
    let arities: Vec<i64> = commands
        .iter()
        .map(|c| match c {
            Value::Array(fields) => match fields[1] {
                Value::Int(arity) => arity,
                _ => panic!("{c:?}"),
            },
            _ => panic!("{c:?}"),
        })
        .collect();
    assert_eq!(arities, [-5, -3, 3, 5, 1, -4, -3, 2, -4, -4, -2]);
    // Every command has its docs, and the keyed ones name their schedule.
    for name in names {
        let docs: Value = q!(&mut con, "COMMAND", "DOCS", name);
        let text = format!("{docs:?}");
        assert!(text.contains("summary"), "{name}: {text}");
    }
    for call in [
        vec!["ECHO.SCHEDULE", "{s}:schedule", "j", "1", "NX"],
        vec!["ECHO.HOLD", "{s}:schedule", "100"],
        vec!["ECHO.HOLD", "{s}:schedule", "100", "GROUP", "g"],
        vec!["ECHO.LIMITS", "{s}:schedule"],
        vec!["ECHO.GROUPLIMIT", "{s}:schedule", "g", "10/s", "2"],
        vec!["ECHO.GROUPLIMIT", "{s}:schedule", "g", "DEFAULT"],
        vec!["ECHO.GROUPS", "{s}:schedule", "COUNT", "5"],
    ] {
        let keys: Vec<String> = q!(&mut con, "COMMAND", "GETKEYS", &call);
        assert_eq!(keys, ["{s}:schedule"], "{call:?}");
    }
    // ECHO.ADD names both keys, whatever its options.
    for call in [
        vec!["ECHO.ADD", "{s}:schedule", "{s}:pending", "j"],
        vec![
            "ECHO.ADD",
            "{s}:schedule",
            "{s}:pending",
            "j",
            "DELAY",
            "5",
            "NX",
        ],
    ] {
        let keys: Vec<String> = q!(&mut con, "COMMAND", "GETKEYS", &call);
        assert_eq!(keys, ["{s}:schedule", "{s}:pending"], "{call:?}");
    }
    // write deny-oom fast, like the LPUSH, XADD or ZADD it makes
    let add_info: Value = q!(&mut con, "COMMAND", "INFO", "ECHO.ADD");
    let add_flags = format!("{add_info:?}").to_lowercase();
    for flag in ["\"write\"", "\"denyoom\"", "\"fast\""] {
        assert!(add_flags.contains(flag), "{flag} missing from {add_flags}");
    }
    let text = format!("{commands:?}").to_lowercase();
    // promote: the schedule is read, written and deleted from; pending inserted into
    for flag in [
        "\"rw\"",
        "\"access\"",
        "\"delete\"",
        "\"insert\"",
        "\"update\"",
        "\"ro\"",
    ] {
        assert!(text.contains(flag), "{flag} missing from {text}");
    }

    // A wrong argument count inside MULTI is refused when queued, as for a
    // native command, and the whole transaction is discarded.
    let _: () = q!(&mut con, "MULTI");
    let queued: String = q!(&mut con, "ECHO.RETRY", "s", "ok", "fixed:1", 1);
    assert_eq!(queued, "QUEUED");
    let err = err!(&mut con, "ECHO.RETRY", "s", "job");
    assert!(err.starts_with("ERR wrong number of arguments"), "{err}");
    let err = err!(&mut con, "EXEC");
    assert!(err.starts_with("EXECABORT"), "{err}");
    let keys: i64 = q!(&mut con, "DBSIZE");
    assert_eq!(keys, 0);
}

#[test]
fn acl_categories_let_users_allow_and_deny_by_category() {
    let server = Server::start();
    let mut con = server.conn();
    if !is_valkey(&mut con) {
        eprintln!(
            "SKIPPED acl categories: Redis 7.0 has no API to set a module command's categories"
        );
        return;
    }
    let _: () = q!(
        &mut con,
        "ACL",
        "SETUSER",
        "no-writes",
        "on",
        "nopass",
        "+@all",
        "-@write",
        "~*"
    );
    let _: () = q!(&mut con, "ACL", "SETUSER", "writer", "on", "nopass", "+@write", "~*");
    let _: () = q!(&mut con, "ACL", "SETUSER", "reader", "on", "nopass", "+@read", "~*");
    let dry = |con: &mut Connection, user: &str, args: &[&str]| -> String {
        q!(con, "ACL", "DRYRUN", user, args)
    };
    let retry_args = ["ECHO.RETRY", "s", "j", "fixed:1", "1"];
    let promote_args = ["ECHO.PROMOTE", "s", "p"];
    let spread_args = ["ECHO.SPREAD", "s", "0", "1", "1"];
    assert!(dry(&mut con, "no-writes", &retry_args).contains("no permissions"));
    assert!(dry(&mut con, "no-writes", &promote_args).contains("no permissions"));
    assert_eq!(dry(&mut con, "no-writes", &spread_args), "OK");
    assert_eq!(dry(&mut con, "writer", &retry_args), "OK");
    assert_eq!(dry(&mut con, "writer", &promote_args), "OK");
    assert!(dry(&mut con, "reader", &retry_args).contains("no permissions"));
    assert_eq!(dry(&mut con, "reader", &spread_args), "OK");
    let schedule_args = ["ECHO.SCHEDULE", "s", "j", "1"];
    let hold_args = ["ECHO.HOLD", "s", "100"];
    let limits_args = ["ECHO.LIMITS", "s"];
    let queues_args = ["ECHO.QUEUES"];
    let add_args = ["ECHO.ADD", "s", "p", "j", "DELAY", "5"];
    let grouplimit_args = ["ECHO.GROUPLIMIT", "{s}:s", "g", "10/s", "1"];
    let groups_args = ["ECHO.GROUPS", "{s}:s"];
    for args in [&schedule_args[..], &hold_args, &add_args, &grouplimit_args] {
        assert!(
            dry(&mut con, "no-writes", args).contains("no permissions"),
            "{args:?}"
        );
        assert_eq!(dry(&mut con, "writer", args), "OK", "{args:?}");
        assert!(
            dry(&mut con, "reader", args).contains("no permissions"),
            "{args:?}"
        );
    }
    for args in [&limits_args[..], &queues_args, &groups_args] {
        assert_eq!(dry(&mut con, "no-writes", args), "OK", "{args:?}");
        assert_eq!(dry(&mut con, "reader", args), "OK", "{args:?}");
    }
    // ECHO.ADD writes a sorted set, a list or a stream: each category
    // grants it, and denying any of them denies it.
    for category in ["sortedset", "list", "stream"] {
        let allowed = format!("only-{category}");
        let denied = format!("no-{category}");
        let _: () = q!(
            &mut con,
            "ACL",
            "SETUSER",
            &allowed,
            "on",
            "nopass",
            format!("+@{category}"),
            "~*"
        );
        let _: () = q!(
            &mut con,
            "ACL",
            "SETUSER",
            &denied,
            "on",
            "nopass",
            "+@all",
            format!("-@{category}"),
            "~*"
        );
        assert_eq!(dry(&mut con, &allowed, &add_args), "OK", "{allowed}");
        assert!(
            dry(&mut con, &denied, &add_args).contains("no permissions"),
            "{denied}"
        );
    }
}
