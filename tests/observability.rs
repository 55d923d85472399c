//! The herd made visible: ECHO.SPREAD's buckets, and the `INFO echomq`
//! counters, against a real valkey-server.

mod common;

use common::*;

fn spread(con: &mut Connection, key: &str, start_ms: i64, end_ms: i64, buckets: u64) -> Vec<i64> {
    q!(con, "ECHO.SPREAD", key, start_ms, end_ms, buckets)
}

/// ZADD with scores given as the text the server parses (fractions, `-inf`).
fn zadd(con: &mut Connection, key: &str, members: &[(&str, &str)]) {
    let _: i64 = q!(con, "ZADD", key, members);
}

/// The contract's bucket `i`: `[start + floor(i*W/b), start + floor((i+1)*W/b))`,
/// computed here independently of the module, in i128.
fn model_bounds(start: i64, end: i64, buckets: u64) -> Vec<(i128, i128)> {
    let w = i128::from(end) - i128::from(start);
    let b = i128::from(buckets);
    let edge = |k: i128| i128::from(start) + (k * w).div_euclid(b);
    (0..b).map(|i| (edge(i), edge(i + 1))).collect()
}

#[test]
fn uneven_split_places_edges_start_inclusive_end_exclusive() {
    let server = Server::start();
    let mut con = server.conn();
    // [0,10) in 3 buckets is [0,3), [3,6), [6,10).
    assert_eq!(model_bounds(0, 10, 3), [(0, 3), (3, 6), (6, 10)]);
    zadd(
        &mut con,
        "s",
        &[
            ("-1", "before"), // below start: nowhere
            ("-0.001", "just-before"),
            ("0", "b0-start"), // start is inclusive
            ("2", "b0-2"),
            ("2.999", "b0-last"), // just under the edge at 3
            ("3", "b1-start"),    // the edge belongs to the bucket it starts
            ("5.999", "b1-last"),
            ("6", "b2-start"),
            ("7", "b2-7"),
            ("9", "b2-9"),
            ("9.999", "b2-last"),
            ("10", "at-end"), // end is exclusive
            ("11", "after"),
        ],
    );
    assert_eq!(spread(&mut con, "s", 0, 10, 3), [3, 2, 4]);
    // One bucket is the whole window; as many buckets as milliseconds is one each.
    assert_eq!(spread(&mut con, "s", 0, 10, 1), [9]);
    assert_eq!(
        spread(&mut con, "s", 0, 10, 10),
        [1, 0, 2, 1, 0, 1, 1, 1, 0, 2]
    );
    // Moving the window by one moves the edges with it.
    assert_eq!(spread(&mut con, "s", 1, 11, 3), [3, 2, 4]);
    assert_eq!(model_bounds(1, 11, 3), [(1, 4), (4, 7), (7, 11)]);
}

#[test]
fn every_integer_score_lands_in_the_bucket_the_formula_gives() {
    let server = Server::start();
    let mut con = server.conn();
    // One member per integer score from -300 to 500: each bucket must then
    // count exactly its width, hi - lo (0 for an empty bucket when W < b).
    let mut pipe = redis::pipe();
    for s in -300..=500 {
        pipe.add_command(cmd!("ZADD", "s", s, format!("m{s}")))
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    for (start, end, buckets) in [
        (0, 10, 3),
        (0, 2, 5), // more buckets than milliseconds: [0,0) [0,0) [0,1) [1,1) [1,2)
        (0, 1, 1),
        (0, 1, 7),
        (-10, 10, 3),
        (-7, -1, 4),
        (-300, 301, 4),
        (-250, 250, 7),
        (3, 100, 9),
        (-101, 99, 13),
        (0, 401, 4),
        (0, 401, 10),
        (17, 18, 10_000),
    ] {
        let want: Vec<i64> = model_bounds(start, end, buckets)
            .into_iter()
            .map(|(lo, hi)| (hi - lo) as i64)
            .collect();
        assert_eq!(
            spread(&mut con, "s", start, end, buckets),
            want,
            "[{start},{end}) in {buckets}"
        );
    }
    assert_eq!(spread(&mut con, "s", 0, 2, 5), [0, 0, 1, 0, 1]);
}

#[test]
fn negative_and_extreme_bounds() {
    let server = Server::start();
    let mut con = server.conn();
    zadd(
        &mut con,
        "s",
        &[
            ("-inf", "minus-inf"),
            ("-11", "a"),
            ("-10", "b"), // first edge of [-10,10) in 4: [-10,-5) [-5,0) [0,5) [5,10)
            ("-5.0001", "c"),
            ("-5", "d"),
            ("-2", "e"),
            ("-1.5", "f"),
            ("-1", "g"),
            ("-0.5", "h"),
            ("0", "i"),
            ("9.9", "j"),
            ("10", "k"),
            ("+inf", "plus-inf"),
        ],
    );
    assert_eq!(spread(&mut con, "s", -10, 10, 4), [2, 5, 1, 1]);
    assert_eq!(spread(&mut con, "s", -11, -10, 1), [1]);
    // Entirely negative windows.
    assert_eq!(spread(&mut con, "s", -6, -1, 5), [1, 1, 0, 0, 2]);

    // The whole signed 64-bit range: every finite member, neither infinity.
    let (min, max) = (i64::MIN, i64::MAX);
    assert_eq!(spread(&mut con, "s", min, max, 1), [11]);
    // In 2 buckets the middle edge is MIN + floor((2^64 - 1) / 2) = -1:
    // [MIN, -1) and [-1, MAX).
    assert_eq!(model_bounds(min, max, 2)[0].1, -1);
    assert_eq!(spread(&mut con, "s", min, max, 2), [6, 5]);
    // The most buckets over the widest window still replies, and adds up.
    let wide = spread(&mut con, "s", min, max, 10_000);
    assert_eq!(wide.len(), 10_000);
    assert_eq!(wide.iter().sum::<i64>(), 11);
}

#[test]
fn edges_past_2_pow_53_follow_the_integer_formula() {
    // Past 2^53 not every integer is a double: 2^53 + 1 is not, and a score
    // of exactly 2^53 must fall in [2^53, 2^53 + 1), not in the next bucket.
    let server = Server::start();
    let mut con = server.conn();
    let two53: i64 = 1 << 53;
    zadd(
        &mut con,
        "s",
        &[
            ("9007199254740992", "at-2^53"),
            ("9007199254740994", "at-2^53+2"),
            ("9223372036854775807", "at-2^63"), // stored as the double 2^63
        ],
    );
    assert_eq!(spread(&mut con, "s", two53, two53 + 2, 2), [1, 0]);
    assert_eq!(spread(&mut con, "s", two53, two53 + 3, 3), [1, 0, 1]);
    assert_eq!(spread(&mut con, "s", two53 + 1, two53 + 3, 2), [0, 1]);
    // 2^63 is above every i64: never inside a window, even the widest.
    assert_eq!(spread(&mut con, "s", i64::MAX - 1, i64::MAX, 1), [0]);
    assert_eq!(spread(&mut con, "s", 0, i64::MAX, 1), [2]);
}

#[test]
fn a_missing_key_is_all_zeros() {
    let server = Server::start();
    let mut con = server.conn();
    assert_eq!(spread(&mut con, "missing", 0, 100, 7), [0; 7]);
    assert_eq!(spread(&mut con, "missing", -5, 5, 1), [0]);
    let many = spread(&mut con, "missing", 0, 1_000_000, 10_000);
    assert_eq!(many, vec![0; 10_000]);
    let keys: i64 = q!(&mut con, "DBSIZE");
    assert_eq!(keys, 0, "a read creates nothing");
}

#[test]
fn wrong_types_and_malformed_arguments_are_refused() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "SET", "str", "x");
    let _: () = q!(&mut con, "LPUSH", "list", "x");
    let _: () = q!(&mut con, "SADD", "set", "x");
    let _: () = q!(&mut con, "HSET", "hash", "f", "v");
    zadd(&mut con, "z", &[("1", "m")]);
    let before = digest(&mut con);

    for key in ["str", "list", "set", "hash"] {
        let err = err!(&mut con, "ECHO.SPREAD", key, "0", "10", "2");
        assert!(err.starts_with("WRONGTYPE"), "{key}: {err}");
    }

    // (start, end, buckets, what the error must name)
    let bad: &[(&str, &str, &str, &str)] = &[
        ("0", "10", "0", "buckets"),
        ("0", "10", "10001", "buckets"),
        ("0", "10", "-1", "buckets"),
        ("0", "10", "1.5", "buckets"),
        ("0", "10", "01", "buckets"),
        ("0", "10", "", "buckets"),
        ("0", "10", "x", "buckets"),
        ("0", "10", "18446744073709551617", "buckets"),
        ("5", "5", "1", "greater"),
        ("6", "5", "1", "greater"),
        ("-1", "-2", "3", "greater"),
        ("1.5", "10", "1", "start_ms"),
        ("1e3", "10000", "1", "start_ms"),
        ("abc", "10", "1", "start_ms"),
        (" 1", "10", "1", "start_ms"),
        ("+1", "10", "1", "start_ms"),
        ("-0", "10", "1", "start_ms"),
        ("", "10", "1", "start_ms"),
        ("-9223372036854775809", "10", "1", "start_ms"),
        ("0", "10.0", "1", "end_ms"),
        ("0", "inf", "1", "end_ms"),
        ("0", "(10", "1", "end_ms"),
        ("0", "9223372036854775808", "1", "end_ms"),
    ];
    for &(start, end, buckets, names) in bad {
        for key in ["z", "missing", "str"] {
            let err = err!(&mut con, "ECHO.SPREAD", key, start, end, buckets);
            assert!(
                err.starts_with("ERR") && err.contains(names),
                "{key} [{start:?},{end:?}) in {buckets:?}: {err}"
            );
        }
    }

    // Wrong arity: the standard arity error.
    for args in [
        &[&b"ECHO.SPREAD"[..]][..],
        &[b"ECHO.SPREAD", b"z"],
        &[b"ECHO.SPREAD", b"z", b"0", b"10"],
        &[b"ECHO.SPREAD", b"z", b"0", b"10", b"2", b"extra"],
    ] {
        let err = error_of(&mut con, args);
        assert_eq!(
            err.to_lowercase(),
            "err wrong number of arguments for 'echo.spread' command",
            "{:?}",
            show(args)
        );
    }
    assert_eq!(digest(&mut con), before, "nothing written");
    let pong: String = q!(&mut con, "PING");
    assert_eq!(pong, "PONG");
}

/// Fails a cohort of `n` jobs at attempt 3 inside one MULTI/EXEC, as one outage
/// would, and returns the transaction's frozen `now` (TIME, in ms) and the
/// fire times the retries replied.
fn cohort(con: &mut Connection, key: &str, policy: &str, n: usize) -> (i64, Vec<i64>) {
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("TIME");
    for i in 0..n {
        pipe.add_command(cmd!("ECHO.RETRY", key, format!("job-{i}"), policy, 3));
    }
    let (time, fire): ((i64, i64), Vec<i64>) = {
        let replies: Vec<Value> = pipe.query(con).expect("MULTI cohort");
        let time: (i64, i64) = redis::from_redis_value(replies[0].clone()).unwrap();
        let fire: Vec<i64> = replies[1..]
            .iter()
            .map(|v| redis::from_redis_value(v.clone()).unwrap())
            .collect();
        (time, fire)
    };
    (time.0 * 1000 + time.1 / 1000, fire)
}

#[test]
fn a_cohort_is_one_bucket_without_jitter_and_flat_with_it() {
    let server = Server::start();
    let mut con = server.conn();

    // exponential:100:10000 at attempt 3 is 400 ms for every job: one instant.
    let (now, fire) = cohort(&mut con, "plain", "exponential:100:10000", 100);
    assert!(fire.iter().all(|&t| t == now + 400), "{now}: {fire:?}");
    assert_eq!(spread(&mut con, "plain", now, now + 401, 4), [0, 0, 0, 100]);
    assert_eq!(spread(&mut con, "plain", now + 400, now + 401, 1), [100]);
    assert_eq!(spread(&mut con, "plain", now, now + 400, 4), [0, 0, 0, 0]);
    let per_ms = spread(&mut con, "plain", now, now + 401, 401);
    assert_eq!(per_ms[400], 100);
    assert!(per_ms[..400].iter().all(|&c| c == 0));

    // Wrapped in jitter: uniform in now..=now+400, so [now, now+401) in 4
    // buckets holds about 25 each. P(any bucket < 5 or > 50) is below 1e-6.
    let (now, fire) = cohort(&mut con, "jittered", "jitter:exponential:100:10000", 100);
    assert!(
        fire.iter().all(|&t| (now..=now + 400).contains(&t)),
        "{now}: {fire:?}"
    );
    let counts = spread(&mut con, "jittered", now, now + 401, 4);
    assert_eq!(counts.iter().sum::<i64>(), 100, "{counts:?}");
    assert!(
        counts.iter().all(|&c| (5..=50).contains(&c)),
        "not a flat spread: {counts:?}"
    );
    // The module's buckets agree with the fire times the retries replied.
    let mut mine = [0i64; 4];
    for &t in &fire {
        let i = model_bounds(now, now + 401, 4)
            .iter()
            .position(|&(lo, hi)| lo <= i128::from(t) && i128::from(t) < hi)
            .unwrap();
        mine[i] += 1;
    }
    assert_eq!(counts, mine);
    // Finer buckets: nowhere near the herd's 100 in one.
    let fine = spread(&mut con, "jittered", now, now + 401, 10);
    assert_eq!(fine.iter().sum::<i64>(), 100);
    assert!(*fine.iter().max().unwrap() <= 30, "{fine:?}");
}

/// The five counters of `INFO echomq`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counters {
    retries: u64,
    retries_jittered: u64,
    promote_calls: u64,
    promoted: u64,
    dead_lettered: u64,
    errors: u64,
}

fn counters(con: &mut Connection) -> Counters {
    let info: String = q!(con, "INFO", "echomq");
    assert!(info.contains("# echomq"), "{info}");
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("no {name} in {info}"))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    Counters {
        retries: field("echomq_retries"),
        retries_jittered: field("echomq_retries_jittered"),
        promote_calls: field("echomq_promote_calls"),
        promoted: field("echomq_promoted"),
        dead_lettered: field("echomq_dead_lettered"),
        errors: field("echomq_errors"),
    }
}

/// `ECHO.PROMOTE` with `args`: the reply as the server sent it.
fn promote_reply(con: &mut Connection, args: &[&str]) -> Value {
    q!(con, "ECHO.PROMOTE", args)
}

#[test]
fn info_counters_move_exactly_with_the_work_done() {
    // No 5 s wait before the replica's full sync (used at the end).
    let server = Server::start_with(Options::default().arg("repl-diskless-sync-delay", "0"));
    let mut con = server.conn();
    let mut want = Counters::default();
    assert_eq!(counters(&mut con), want, "a fresh server counts nothing");

    // Retries: 3 plain, 2 jittered, one reschedule of a job already there.
    // Only `soon` holds a job due now; the others are far in the future.
    retry(&mut con, "s", "j1", "fixed:100000", 1);
    retry(&mut con, "s", "j2", "exponential:100000:10000000", 7);
    retry(&mut con, "soon", "j3", "fixed:0", 1);
    want.retries += 3;
    assert_eq!(counters(&mut con), want);
    retry(&mut con, "js", "j4", "jitter:fixed:100000", 1);
    retry(&mut con, "js", "j5", "JITTER:jitter:exponential:1:2", 2);
    retry(&mut con, "s", "j1", "jitter:fixed:100000", 2);
    want.retries += 3;
    want.retries_jittered += 3;
    assert_eq!(counters(&mut con), want);
    // A cohort inside MULTI/EXEC: 10 retries, 4 of them jittered.
    let mut pipe = redis::pipe();
    pipe.atomic();
    for i in 0..10 {
        let policy = if i % 3 == 0 {
            "jitter:exponential:100:10000"
        } else {
            "exponential:100:10000"
        };
        let retry = cmd!("ECHO.RETRY", "cohort", format!("c{i}"), policy, 3);
        pipe.add_command(retry).ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    want.retries += 10;
    want.retries_jittered += 4;
    assert_eq!(counters(&mut con), want);

    // Options: a kept score and XX's -2 count as retries (equal jitter as
    // jittered); a dead-lettered job counts as dead-lettered only.
    let fire = retry(&mut con, "s", "j1", "fixed:1", 1);
    let kept: i64 = q!(
        &mut con,
        "ECHO.RETRY",
        "s",
        "j1",
        "equal-jitter:fixed:5",
        1,
        "NX"
    );
    assert_eq!(kept, fire);
    let absent: i64 = q!(&mut con, "ECHO.RETRY", "s", "nope", "fixed:5", 1, "XX");
    assert_eq!(absent, -2);
    want.retries += 3;
    want.retries_jittered += 1;
    assert_eq!(counters(&mut con), want);
    for attempts in 1..=3 {
        let _: i64 = q!(
            &mut con,
            "ECHO.RETRY",
            "doomed",
            "j",
            "jitter:fixed:9",
            attempts,
            "MAXATTEMPTS",
            3,
            "DEAD",
            "dead"
        );
    }
    want.retries += 2;
    want.retries_jittered += 2;
    want.dead_lettered += 1;
    assert_eq!(counters(&mut con), want);

    // Successful reads count nothing.
    let _: () = q!(&mut con, "ECHO.DELAY", "fixed:5", "1");
    let _: () = q!(&mut con, "ECHO.DELAY", "jitter:fixed:5", "1");
    let _: () = q!(&mut con, "ECHO.SPREAD", "s", "0", "10", "2");
    let _: () = q!(&mut con, "ECHO.SPREAD", "missing", "0", "10", "2");
    assert_eq!(counters(&mut con), want);

    // Promotes: calls that move nothing count as calls, and move 0.
    zadd(&mut con, "far", &[("9000000000000000", "f")]);
    assert_eq!(promote_reply(&mut con, &["missing", "p"]), Value::Int(0));
    assert_eq!(promote_reply(&mut con, &["far", "p"]), Value::Int(0));
    want.promote_calls += 2;
    assert_eq!(counters(&mut con), want);
    zadd(
        &mut con,
        "due",
        &[
            ("1", "d1"),
            ("2", "d2"),
            ("3", "d3"),
            ("4", "d4"),
            ("5", "d5"),
        ],
    );
    assert_eq!(
        promote_reply(&mut con, &["due", "p", "LIMIT", "2"]),
        Value::Int(2)
    );
    assert_eq!(promote_reply(&mut con, &["due", "p"]), Value::Int(3));
    assert_eq!(promote_reply(&mut con, &["due", "p"]), Value::Int(0));
    assert_eq!(promote_reply(&mut con, &["soon", "p"]), Value::Int(1));
    want.promote_calls += 4;
    want.promoted += 6;
    assert_eq!(counters(&mut con), want);

    // Errors the module answers: each counts once and nothing else moves.
    let _: () = q!(&mut con, "SET", "str", "x");
    let refused: &[&[&str]] = &[
        &["ECHO.RETRY", "s", "j", "nope:1", "1"],
        &["ECHO.RETRY", "s", "j", "exponential:100:50", "1"],
        &["ECHO.RETRY", "s", "j", "jitter:fixed:-1", "1"],
        &["ECHO.RETRY", "s", "j", "fixed:1", "0"],
        &["ECHO.RETRY", "str", "j", "fixed:1", "1"],
        &["ECHO.RETRY", "str", "j", "jitter:fixed:1", "1"],
        &["ECHO.RETRY", "s", "j", "fixed:1", "1", "extra"],
        &["ECHO.RETRY", "s", "j", "fixed:1", "1", "NX", "XX"],
        &[
            "ECHO.RETRY",
            "s",
            "j",
            "fixed:1",
            "9",
            "MAXATTEMPTS",
            "3",
            "DEAD",
            "str",
        ],
        &["ECHO.PROMOTE", "str", "p"],
        &["ECHO.PROMOTE", "due", "str"],
        &["ECHO.PROMOTE", "s", "s"],
        &["ECHO.PROMOTE", "s", "p", "LIMIT", "0"],
        &["ECHO.PROMOTE", "s", "p", "COUNT", "1"],
        &["ECHO.DELAY", "fixed:x", "1"],
        &["ECHO.DELAY", "fixed:1", "-1"],
        &["ECHO.SPREAD", "s", "0", "10", "0"],
        &["ECHO.SPREAD", "s", "10", "10", "1"],
        &["ECHO.SPREAD", "str", "0", "10", "1"],
    ];
    for (n, args) in refused.iter().enumerate() {
        let e = err!(&mut con, args[0], &args[1..]);
        assert!(e.starts_with("ERR") || e.starts_with("WRONGTYPE"), "{e}");
        want.errors += 1;
        assert_eq!(counters(&mut con), want, "after #{n} {args:?}: {e}");
    }

    // Wrong arity: the module declares each command's arity, so the server
    // answers the standard arity error before the module runs: not counted.
    let arity: &[&[&str]] = &[
        &["ECHO.RETRY", "s", "j", "fixed:1"],
        &["ECHO.PROMOTE", "s"],
        &["ECHO.DELAY", "fixed:1"],
        &["ECHO.SPREAD", "s", "0", "10"],
    ];
    for args in arity {
        let e = err!(&mut con, args[0], &args[1..]);
        assert_eq!(
            e.to_lowercase(),
            format!(
                "err wrong number of arguments for '{}' command",
                args[0].to_lowercase()
            )
        );
        assert_eq!(counters(&mut con), want, "{args:?}");
    }

    // Inside MULTI/EXEC each command counts for what it did.
    let replies: Vec<redis::RedisResult<Value>> = redis::pipe()
        .atomic()
        .ignore_errors()
        .add_command(cmd!("ECHO.RETRY", "s", "m1", "jitter:fixed:100000", 1))
        .add_command(cmd!("ECHO.RETRY", "s", "m2", "bogus", 1))
        .add_command(cmd!("ECHO.PROMOTE", "due", "p"))
        .query(&mut con)
        .expect("EXEC");
    assert_eq!(replies.len(), 3, "{replies:?}");
    assert!(replies[0].is_ok() && replies[1].is_err(), "{replies:?}");
    assert_eq!(replies[2].as_ref().ok(), Some(&Value::Int(0)));
    want.retries += 1;
    want.retries_jittered += 1;
    want.errors += 1;
    want.promote_calls += 1;
    assert_eq!(counters(&mut con), want);

    // Refusals the server makes before the module runs are not seen.
    let e = err!(&mut con, "ECHO.NOPE", "x");
    assert!(e.starts_with("ERR unknown command"), "{e}");
    let rules = ["limited", "on", "nopass", "+@all", "-echo.retry"];
    let _: () = q!(&mut con, "ACL", "SETUSER", &rules);
    let mut limited = server.conn();
    let _: () = q!(&mut limited, "AUTH", "limited", "x");
    let e = err!(&mut limited, "ECHO.RETRY", "s", "j", "fixed:1", "1");
    assert!(e.starts_with("NOPERM"), "{e}");
    assert_eq!(counters(&mut con), want);
    // At maxmemory, RETRY (deny-oom) is refused by the server; PROMOTE still runs.
    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory", "1");
    let e = err!(&mut con, "ECHO.RETRY", "s", "j", "fixed:1", "1");
    assert!(e.starts_with("OOM"), "{e}");
    assert_eq!(promote_reply(&mut con, &["due", "p"]), Value::Int(0));
    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory", "0");
    want.promote_calls += 1;
    assert_eq!(counters(&mut con), want);

    // A replica counts only what runs on it: it receives the effects (ZADD,
    // ZREM, LPUSH), not the commands, and refuses writes before the module runs.
    let replica = start_replica(&server, Options::default());
    let mut rcon = replica.conn();
    retry(&mut con, "s", "r1", "jitter:fixed:1000", 1);
    zadd(&mut con, "due", &[("1", "r2")]);
    assert_eq!(promote_reply(&mut con, &["due", "p"]), Value::Int(1));
    want.retries += 1;
    want.retries_jittered += 1;
    want.promote_calls += 1;
    want.promoted += 1;
    wait_replica_synced(&mut con, &mut rcon);
    let e = err!(&mut rcon, "ECHO.RETRY", "s", "j", "fixed:1", "1");
    assert!(e.starts_with("READONLY"), "{e}");
    assert_eq!(counters(&mut rcon), Counters::default());
    assert_eq!(counters(&mut con), want);

    // The totals, spelled out.
    assert_eq!(
        want,
        Counters {
            retries: 23,
            retries_jittered: 12,
            promote_calls: 9,
            promoted: 7,
            dead_lettered: 1,
            errors: 20,
        }
    );
    // The server's own error statistics saw the same module errors.
    let stats: String = q!(&mut con, "INFO", "errorstats");
    let count = |code: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("errorstat_{code}:count=")))
            .map_or(0, |n| n.trim().parse().unwrap())
    };
    // ERR also counts the unknown command and the server's arity refusals;
    // the other codes are the server's refusals.
    assert_eq!(
        count("ERR") + count("WRONGTYPE"),
        want.errors + 1 + arity.len() as u64,
        "{stats}"
    );
}

#[test]
fn counters_start_from_zero_after_a_module_reload() {
    let server = Server::start_with(Options::default().arg("enable-module-command", "yes"));
    let mut con = server.conn();
    retry(&mut con, "s", "j", "jitter:fixed:1000000", 1);
    let _: i64 = q!(&mut con, "ECHO.DELAY", "jitter:fixed:5", 1);
    assert_eq!(counters(&mut con).retries, 1);
    let _: () = q!(&mut con, "MODULE", "UNLOAD", "echomq");
    let _: () = q!(
        &mut con,
        "MODULE",
        "LOAD",
        module_path().display().to_string()
    );
    assert_eq!(
        counters(&mut con),
        Counters::default(),
        "since the module loaded"
    );
    retry(&mut con, "s", "k", "fixed:1", 1);
    assert_eq!(counters(&mut con).retries, 1);
}
