//! ECHO.RETRY, ECHO.PROMOTE and ECHO.DELAY against a real valkey-server.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::thread;
use std::time::Duration;

use common::*;

fn retry(con: &mut Connection, key: &str, job: &[u8], policy: &str, attempts: u64) -> i64 {
    redis::cmd("ECHO.RETRY")
        .arg(key)
        .arg(job)
        .arg(policy)
        .arg(attempts)
        .query(con)
        .expect("ECHO.RETRY")
}

fn promote(con: &mut Connection, schedule: &str, pending: &str, limit: Option<u64>) -> i64 {
    let mut cmd = redis::cmd("ECHO.PROMOTE");
    cmd.arg(schedule).arg(pending);
    if let Some(n) = limit {
        cmd.arg("LIMIT").arg(n);
    }
    cmd.query(con).expect("ECHO.PROMOTE")
}

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
    let modules: Value = redis::cmd("MODULE").arg("LIST").query(&mut con).unwrap();
    assert!(format!("{modules:?}").contains("echomq"), "{modules:?}");

    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("ECHO.RETRY")
        .arg("sched")
        .arg("job")
        .arg("fixed:1")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["sched"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("ECHO.PROMOTE")
        .arg("sched")
        .arg("pend")
        .arg("LIMIT")
        .arg(5)
        .query(&mut con)
        .unwrap();
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
        let score: i64 = redis::cmd("ZSCORE")
            .arg("s")
            .arg("job")
            .query(&mut con)
            .unwrap();
        assert_eq!(score, fire_at, "the reply is the score written");
    }
    // each retry replaced the score: one member
    let card: i64 = redis::cmd("ZCARD").arg("s").query(&mut con).unwrap();
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
    let score: i64 = redis::cmd("ZSCORE")
        .arg("s")
        .arg(job)
        .query(&mut con)
        .unwrap();
    assert_eq!(score, fire_at);
    assert_eq!(promote(&mut con, "s", "p", None), 1);
    let popped: Vec<u8> = redis::cmd("RPOP").arg("p").query(&mut con).unwrap();
    assert_eq!(popped, job);
}

#[test]
fn retry_on_a_wrong_type_writes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("LPUSH")
        .arg("list")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("hash")
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let before = digest(&mut con);
    for key in ["str", "list", "hash"] {
        let err = error_of(
            &mut con,
            &[b"ECHO.RETRY", key.as_bytes(), b"job", b"fixed:1", b"1"],
        );
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
        let got: i64 = redis::cmd("ECHO.DELAY")
            .arg(policy)
            .arg(attempts)
            .query(&mut con)
            .unwrap();
        assert_eq!(got, want, "{policy} {attempts}");
    }
    assert_eq!(digest(&mut con), before);
    let keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
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
        pipe.cmd("ECHO.RETRY")
            .arg(key)
            .arg(format!("job-{i}"))
            .arg(policy)
            .arg(3);
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
    let _: () = redis::cmd("ZADD")
        .arg("s")
        .arg(now - 3000)
        .arg("c")
        .arg(now - 5000)
        .arg("a")
        .arg(now - 4000)
        .arg("b")
        .arg(now + 1_000_000)
        .arg("future")
        .arg(now + 2_000_000)
        .arg("later")
        .query(&mut con)
        .unwrap();
    assert_eq!(promote(&mut con, "s", "p", None), 3);
    let pending: Vec<String> = redis::cmd("LRANGE")
        .arg("p")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(pending, ["c", "b", "a"], "earliest-due at the right end");
    let left: Vec<String> = redis::cmd("ZRANGE")
        .arg("s")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(left, ["future", "later"]);
    assert_eq!(promote(&mut con, "s", "p", None), 0);
    let first: String = redis::cmd("RPOP").arg("p").query(&mut con).unwrap();
    assert_eq!(first, "a", "first due, first out");
}

#[test]
fn promote_ties_follow_the_sorted_set_order() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("ZADD")
        .arg("s")
        .arg(1)
        .arg("m3")
        .arg(1)
        .arg("m1")
        .arg(1)
        .arg("m2")
        .query(&mut con)
        .unwrap();
    assert_eq!(promote(&mut con, "s", "p", None), 3);
    let order: Vec<String> = redis::cmd("RPOP").arg("p").arg(3).query(&mut con).unwrap();
    assert_eq!(order, ["m1", "m2", "m3"]);
}

#[test]
fn promote_honours_limit_and_the_default_of_1000() {
    let server = Server::start();
    let mut con = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..1500 {
        pipe.cmd("ZADD")
            .arg("s")
            .arg(i)
            .arg(format!("m{i:04}"))
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    assert_eq!(promote(&mut con, "s", "p", Some(3)), 3);
    let three: Vec<String> = redis::cmd("LRANGE")
        .arg("p")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(three, ["m0002", "m0001", "m0000"]);
    assert_eq!(promote(&mut con, "s", "p", None), 1000);
    assert_eq!(promote(&mut con, "s", "p", None), 497);
    let len: i64 = redis::cmd("LLEN").arg("p").query(&mut con).unwrap();
    assert_eq!(len, 1500);
    // the list holds each member once, in fire-time order from the right
    let all: Vec<String> = redis::cmd("LRANGE")
        .arg("p")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    let want: Vec<String> = (0..1500).rev().map(|i| format!("m{i:04}")).collect();
    assert_eq!(all, want);
    // a huge LIMIT is fine
    let _: () = redis::cmd("ZADD")
        .arg("s")
        .arg(1)
        .arg("x")
        .query(&mut con)
        .unwrap();
    assert_eq!(promote(&mut con, "s", "p", Some(9223372036854775807)), 1);
}

#[test]
fn promote_puts_new_work_behind_older_pending_work_and_deletes_an_emptied_schedule() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("LPUSH")
        .arg("p")
        .arg("old")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg("s")
        .arg(1)
        .arg("a")
        .arg(2)
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(promote(&mut con, "s", "p", None), 2);
    let exists: i64 = redis::cmd("EXISTS").arg("s").query(&mut con).unwrap();
    assert_eq!(exists, 0, "an emptied schedule disappears");
    let order: Vec<String> = redis::cmd("RPOP").arg("p").arg(3).query(&mut con).unwrap();
    assert_eq!(order, ["old", "a", "b"]);
    // a missing schedule promotes nothing and creates nothing
    assert_eq!(promote(&mut con, "s", "p", None), 0);
    let keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(keys, 0);
}

#[test]
fn promote_refuses_wrong_types_before_moving_anything() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("ZADD")
        .arg("s")
        .arg(1)
        .arg("due")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg("future")
        .arg(9e15)
        .arg("x")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SADD")
        .arg("set")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("LPUSH")
        .arg("list")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let before = digest(&mut con);
    for (schedule, pending) in [
        ("str", "p"), // schedule not a zset
        ("list", "p"),
        ("s", "str"), // pending not a list, with due work
        ("s", "set"),
        ("future", "str"),  // nothing due
        ("missing", "str"), // schedule missing
    ] {
        let err = error_of(
            &mut con,
            &[b"ECHO.PROMOTE", schedule.as_bytes(), pending.as_bytes()],
        );
        assert!(err.starts_with("WRONGTYPE"), "{schedule} {pending}: {err}");
    }
    let err = error_of(&mut con, &[b"ECHO.PROMOTE", b"s", b"s"]);
    assert!(err.starts_with("ERR"), "{err}");
    assert_eq!(digest(&mut con), before, "nothing moved");
}

#[test]
fn promote_wakes_a_client_blocked_on_pending() {
    let server = Server::start();
    let mut con = server.conn();
    let mut waiter = server.conn();
    let blocked = thread::spawn(move || -> Option<(String, String)> {
        redis::cmd("BRPOP")
            .arg("p")
            .arg(30)
            .query(&mut waiter)
            .unwrap()
    });
    wait_blocked_clients(&mut con, 1);
    let _: () = redis::cmd("ZADD")
        .arg("s")
        .arg(1)
        .arg("first")
        .arg(2)
        .arg("second")
        .query(&mut con)
        .unwrap();
    assert_eq!(promote(&mut con, "s", "p", None), 2);
    let got = blocked.join().unwrap();
    assert_eq!(got, Some(("p".to_string(), "first".to_string())));
    let left: Vec<String> = redis::cmd("LRANGE")
        .arg("p")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(left, ["second"]);
}

#[test]
fn promote_invalidates_watch_only_when_it_writes() {
    let server = Server::start();
    let mut con = server.conn();
    let mut other = server.conn();
    for watched in ["s", "p"] {
        // nothing due: no write, the transaction goes through
        let _: () = redis::cmd("ZADD")
            .arg("s")
            .arg(9e15)
            .arg("future")
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("WATCH").arg(watched).query(&mut con).unwrap();
        assert_eq!(promote(&mut other, "s", "p", None), 0);
        let r: Option<Vec<String>> = redis::pipe().atomic().cmd("PING").query(&mut con).unwrap();
        assert!(
            r.is_some(),
            "{watched}: a promote that moved nothing must not fail WATCH"
        );

        // something due: WATCH on either key fails
        let _: () = redis::cmd("ZADD")
            .arg("s")
            .arg(1)
            .arg("due")
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("WATCH").arg(watched).query(&mut con).unwrap();
        assert_eq!(promote(&mut other, "s", "p", None), 1);
        let r: Option<Vec<String>> = redis::pipe().atomic().cmd("PING").query(&mut con).unwrap();
        assert!(r.is_none(), "{watched}: WATCH must be invalidated");
    }
    // ECHO.RETRY invalidates WATCH on the schedule too
    let _: () = redis::cmd("WATCH").arg("s").query(&mut con).unwrap();
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
    assert_eq!(promote(&mut con, "q:s", "q:p", None), 100);
    let mut got = Vec::new();
    while let Some(job) = redis::cmd("RPOP")
        .arg("q:p")
        .query::<Option<String>>(&mut con)
        .unwrap()
    {
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
    let info: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("ECHO.RETRY")
        .arg("ECHO.PROMOTE")
        .arg("ECHO.DELAY")
        .arg("ECHO.SPREAD")
        .query(&mut con)
        .unwrap();
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
    assert_eq!(arities, [5, -3, 3, 5]);
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
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    let queued: String = redis::cmd("ECHO.RETRY")
        .arg("s")
        .arg("ok")
        .arg("fixed:1")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(queued, "QUEUED");
    let err = error_of(&mut con, &[b"ECHO.RETRY", b"s", b"job"]);
    assert!(err.starts_with("ERR wrong number of arguments"), "{err}");
    let err = error_of(&mut con, &[b"EXEC"]);
    assert!(err.starts_with("EXECABORT"), "{err}");
    let keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(keys, 0);
}
