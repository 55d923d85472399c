//! Release limits against real servers: `echomq.release-limits` (GCRA per
//! schedule, fixed and adaptive), `ECHO.HOLD`, `ECHO.SCHEDULE` and
//! `ECHO.LIMITS`, through a client's ECHO.PROMOTE and through the
//! auto-promote timer alike. Release times are read from the server's own
//! clock (`TIME` in the same MULTI as the promote or the count), so the
//! bounds checked are exact, not timings.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use redis::Value;

use common::*;

const S: &str = "{r}:schedule";
const P: &str = "{r}:pending";
/// Where `S`'s limit keeps its state. It outlives a removed entry until it
/// expires, so a round that wants a fresh limit deletes it.
const STATE: &str = "{r}:schedule:echomq-limit";

fn set_limits(con: &mut Connection, value: &str) {
    let _: () = q!(con, "CONFIG", "SET", "echomq.release-limits", value);
}

fn stat(con: &mut Connection, field: &str) -> u64 {
    info_field(con, "echomq", &format!("echomq_{field}"))
        .parse()
        .expect("an INFO echomq counter")
}

/// `n` members due already, `job-000000` earliest, one ms apart.
fn fill_due(con: &mut Connection, schedule: &str, n: usize) {
    let now_ms = server_time_ms(con);
    let mut fill = redis::pipe();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(schedule);
        for &i in chunk {
            zadd.arg(now_ms - n as i64 - 10 + i as i64)
                .arg(format!("job-{i:06}"));
        }
        fill.add_command(zadd).ignore();
    }
    let _: () = fill.query(con).expect("fill");
}

/// `ECHO.LIMITS` as a map of its fields (RESP2: field, value, ...).
fn limits(con: &mut Connection, schedule: &str) -> Vec<(String, Value)> {
    let flat: Vec<Value> = q!(con, "ECHO.LIMITS", schedule);
    flat.chunks(2)
        .map(|kv| {
            let name: String = redis::from_redis_value(kv[0].clone()).expect("a field name");
            (name, kv[1].clone())
        })
        .collect()
}

fn limit_field(con: &mut Connection, schedule: &str, field: &str) -> Option<f64> {
    limits(con, schedule)
        .into_iter()
        .find(|(name, _)| name == field)
        .and_then(|(_, v)| match v {
            Value::Nil => None,
            Value::Int(n) => Some(n as f64),
            other => redis::from_redis_value::<String>(other)
                .ok()
                .and_then(|s| s.parse().ok()),
        })
}

/// (server ms, members released so far), one sample per call.
type Samples = Vec<(i64, u64)>;

/// Runs `ECHO.PROMOTE` in a loop for `run`, between two `TIME`s in one
/// MULTI. Samples at the first TIME, and the latest server time each call's
/// releases may have happened at, for the bound: the next call's first TIME
/// (the server runs it after this call ended), the last call's second TIME
/// plus 1 ms. Not this call's second TIME: on Valkey both TIMEs are the MULTI's
/// frozen command time, and the wall clock the limit reads passes it by as
/// long as the server is kept off the CPU mid-MULTI (more than a
/// millisecond on a loaded machine).
fn promote_loop(con: &mut Connection, run: Duration, pause: Duration) -> (Samples, Vec<i64>) {
    let mut samples = Vec::new();
    let mut after = Vec::new();
    let mut total = 0u64;
    let until = Instant::now() + run;
    while Instant::now() < until {
        let (time, moved, time_after): ((String, String), u64, (String, String)) = redis::pipe()
            .atomic()
            .cmd("TIME")
            .cmd("ECHO.PROMOTE")
            .arg(S)
            .arg(P)
            .arg("LIMIT")
            .arg(100_000)
            .cmd("TIME")
            .query(con)
            .expect("TIME, ECHO.PROMOTE and TIME");
        total += moved;
        samples.push((ms_of(&time), total));
        after.push(ms_of(&time_after) + 1);
        sleep(pause);
    }
    let ends = (0..samples.len())
        .map(|j| samples.get(j + 1).map_or(after[j], |next| next.0))
        .collect();
    (samples, ends)
}

fn ms_of((secs, micros): &(String, String)) -> i64 {
    secs.parse::<i64>().unwrap() * 1000 + micros.parse::<i64>().unwrap() / 1000
}

/// Samples `LLEN pending` with `TIME` in one MULTI for `run`.
fn count_loop(con: &mut Connection, run: Duration, pause: Duration) -> Samples {
    let mut samples = Vec::new();
    let until = Instant::now() + run;
    while Instant::now() < until {
        let (time, len): ((String, String), u64) = redis::pipe()
            .atomic()
            .cmd("TIME")
            .cmd("LLEN")
            .arg(P)
            .query(con)
            .expect("TIME and LLEN");
        samples.push((ms_of(&time), len));
        sleep(pause);
    }
    samples
}

/// Every pair of samples: what was released between them is at most
/// `burst + floor(D * n / period_ms)` for `D` ms between them. Releases
/// between two samples happened at server times within them; `ends[j]`, when
/// given (a promote loop), is the latest time sample `j`'s own releases may
/// have happened.
fn assert_bound(
    samples: &Samples,
    ends: Option<&[i64]>,
    burst: u64,
    n: u64,
    period_ms: u64,
    what: &str,
) {
    for (i, &(a_ms, a)) in samples.iter().enumerate() {
        for (j, &(b_ms, b)) in samples.iter().enumerate().skip(i) {
            let b_ms = ends.map_or(b_ms, |ends| ends[j]);
            let span = u64::try_from(b_ms - a_ms).unwrap();
            // A promote loop's first sample made its own releases at its
            // own time, so they count in the window; a count sample (the
            // timer's) holds what was released before it, outside.
            let own = if i == 0 && ends.is_some() { a } else { 0 };
            let released = b - a + own;
            let bound = burst + span * n / period_ms;
            assert!(
                released <= bound,
                "{what}: {released} released in {span} ms ({a_ms}..={b_ms}), bound {bound}"
            );
        }
    }
}

/// At steady demand the releases keep pace: over the run, the rate's worth
/// (less one for the edges). Only a pause of the asking client longer than
/// the burst lasts loses anything (the bucket is full; that is the limit
/// working, not drift), so such pauses, on a loaded machine, are allowed for.
/// With `ends` (a promote loop's), the last release may be counted at its
/// end time, which the limit's clock can reach past the frozen `TIME`.
fn assert_pace(
    samples: &Samples,
    ends: Option<&[i64]>,
    burst: u64,
    n: u64,
    period_ms: u64,
    what: &str,
) {
    let (first_ms, _) = samples[0];
    let (last_ms, total) = *samples.last().unwrap();
    let span = u64::try_from(last_ms - first_ms).unwrap();
    let ideal = burst + span * n / period_ms;
    let end_ms = ends.and_then(|e| e.last().copied()).unwrap_or(last_ms);
    let most = burst + u64::try_from(end_ms - first_ms).unwrap() * n / period_ms;
    let paused: u64 = samples
        .windows(2)
        .map(|w| {
            let gap_ms = u64::try_from(w[1].0 - w[0].0).unwrap();
            (gap_ms * n).div_ceil(period_ms).saturating_sub(burst - 1)
        })
        .sum();
    assert!(
        total + 1 + paused >= ideal && total <= most,
        "{what}: {total} released in {span} ms, ideal {ideal} (at most {most}), lost to pauses at most {paused}"
    );
}

/// 100/s burst 10 over 5 s, and 3/s burst 2 over 10 s, through a client's
/// ECHO.PROMOTE loop: every window within the bound, the total at the rate.
#[test]
fn a_client_promote_loop_releases_exactly_at_the_limit() {
    let server = Server::start();
    let mut con = server.conn();
    for (limit, burst, n, run_s) in [("100/s 10", 10, 100, 5), ("3/s 2", 2, 3, 10)] {
        let _: () = q!(&mut con, "DEL", S, P, STATE);
        fill_due(&mut con, S, 2000);
        set_limits(&mut con, &format!("{S} {limit}"));
        let (samples, ends) = promote_loop(
            &mut con,
            Duration::from_secs(run_s),
            Duration::from_millis(2),
        );
        assert_bound(&samples, Some(&ends), burst, n, 1000, limit);
        assert_pace(&samples, Some(&ends), burst, n, 1000, limit);
        let len: u64 = q!(&mut con, "LLEN", P);
        assert_eq!(
            len,
            samples.last().unwrap().1,
            "every release is in pending"
        );
        set_limits(&mut con, "");
    }
}

/// The same limits through the auto-promote timer.
#[test]
fn the_timer_releases_exactly_at_the_limit() {
    let server = Server::start();
    let mut con = server.conn();
    for (limit, burst, n, run_s) in [("100/s 10", 10, 100, 5), ("3/s 2", 2, 3, 10)] {
        let _: () = q!(&mut con, "DEL", S, P, STATE);
        fill_due(&mut con, S, 2000);
        set_limits(&mut con, &format!("{S} {limit}"));
        let _: () = q!(
            &mut con,
            "CONFIG",
            "SET",
            "echomq.auto-promote",
            format!("{S} {P}")
        );
        let samples = count_loop(
            &mut con,
            Duration::from_secs(run_s),
            Duration::from_millis(5),
        );
        let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", "");
        assert_bound(&samples, None, burst, n, 1000, limit);
        // At steady demand the timer keeps the rate: from half a second in
        // to the end, the releases are the rate's worth, less one tick at
        // each end (a tick comes every interval, 10 ms).
        let (first_ms, _) = samples[0];
        let (mid_ms, mid) = *samples
            .iter()
            .find(|s| s.0 >= first_ms + 500)
            .expect("a sample half a second in");
        let (last_ms, total) = *samples.last().unwrap();
        let steady = u64::try_from(last_ms - mid_ms).unwrap() * n / 1000;
        // A server stalled longer than the burst lasts (a loaded machine)
        // loses releases by design; the samples' own TIMEs show such stalls.
        let paused: u64 = samples
            .windows(2)
            .filter(|w| w[0].0 >= mid_ms)
            .map(|w| {
                let gap_ms = u64::try_from(w[1].0 - w[0].0).unwrap();
                (gap_ms * n).div_ceil(1000).saturating_sub(burst - 1)
            })
            .sum();
        assert!(
            total - mid + 2 + paused >= steady,
            "{limit}: {} in the last {} ms, the rate's worth {steady}, lost to stalls at most {paused}",
            total - mid,
            last_ms - mid_ms
        );
        set_limits(&mut con, "");
    }
}

/// 20,000 jobs through the timer, the limit changed at random 50 times
/// mid-run: they reach pending in fire-time order, each once, into a list
/// and into a stream.
#[test]
fn held_members_leave_in_fire_time_order_through_50_limit_changes() {
    let server = Server::start();
    let mut con = server.conn();
    let n = 20_000;
    for stream in [false, true] {
        let _: () = q!(&mut con, "DEL", S, P, STATE);
        if stream {
            let _: () = q!(&mut con, "XGROUP", "CREATE", P, "workers", "0", "MKSTREAM");
        }
        fill_due(&mut con, S, n);
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        set_limits(&mut con, &format!("{S} 20000/s 100"));
        let _: () = q!(
            &mut con,
            "CONFIG",
            "SET",
            "echomq.auto-promote",
            format!("{S} {P}")
        );
        for _ in 0..50 {
            let rate = 5_000 + next() % 30_000;
            let burst = 1 + next() % 500;
            let adaptive = if next() % 4 == 0 { "adaptive:" } else { "" };
            set_limits(&mut con, &format!("{S} {adaptive}{rate}/s {burst}"));
            sleep(Duration::from_millis(10 + next() % 20));
        }
        set_limits(&mut con, "");
        wait_until("the schedule drained", Duration::from_secs(30), || {
            let left: u64 = q!(&mut con, "ZCARD", S);
            (left == 0).then_some(()).ok_or(format!("{left} left"))
        });
        let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", "");
        let got: Vec<String> = if stream {
            let entries: Vec<(String, Vec<(String, String)>)> = q!(&mut con, "XRANGE", P, "-", "+");
            entries
                .into_iter()
                .map(|(_, mut f)| f.remove(0).1)
                .collect()
        } else {
            let mut all: Vec<String> = q!(&mut con, "LRANGE", P, 0, -1);
            all.reverse();
            all
        };
        let want: Vec<String> = (0..n).map(|i| format!("job-{i:06}")).collect();
        assert_eq!(got.len(), n, "stream {stream}: each job once");
        assert!(got == want, "stream {stream}: not in fire-time order");
    }
    assert!(stat(&mut con, "release_limited") > 0);
}

/// Re-setting an identical value grants no fresh burst; a changed rate
/// applies from the next release; removing the entry releases at full speed
/// at once; malformed values are refused with the old one kept.
#[test]
fn config_changes_keep_state_and_bad_values_are_refused() {
    let server = Server::start();
    let mut con = server.conn();
    fill_due(&mut con, S, 5000);
    set_limits(&mut con, &format!("{S} 1/h 50"));
    assert_eq!(promote(&mut con, S, P), 50, "the burst");
    assert_eq!(promote(&mut con, S, P), 0);
    set_limits(&mut con, &format!("{S} 1/h 50"));
    assert_eq!(
        promote(&mut con, S, P),
        0,
        "the same value again: no fresh burst"
    );
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.release-limits",
        format!("  {S}\t1/h  50 ")
    );
    assert_eq!(
        promote(&mut con, S, P),
        0,
        "the same words, spaced otherwise"
    );
    // The bucket is empty (50 intervals of 1/h ahead); at 1000000/s burst
    // 1000 those 50 are 50 us, and 950 more may leave at once.
    set_limits(&mut con, &format!("{S} 1000000/s 1000"));
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P, "LIMIT", 5000);
    assert!(
        (950..=1000).contains(&moved),
        "the new rate applies: {moved}"
    );
    set_limits(&mut con, &format!("{S} 1/h 1"));
    let _ = promote(&mut con, S, P);
    assert_eq!(promote(&mut con, S, P), 0);
    set_limits(&mut con, "");
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P, "LIMIT", 1000);
    assert_eq!(moved, 1000, "no entry: full speed at once");

    let good = format!("{S} 10/s 5");
    set_limits(&mut con, &good);
    let bad = [
        ("s", "1 words"),
        ("s 1/s", "2 words"),
        ("s 1/s 1 t", "4 words"),
        ("s 1/s 1 t 1/s", "5 words"),
        ("s 0/s 1", "rate '0/s'"),
        ("s 1/d 1", "rate '1/d'"),
        ("s 01/s 1", "rate '01/s'"),
        ("s 1.5/s 1", "rate '1.5/s'"),
        ("s -1/s 1", "rate '-1/s'"),
        ("s +1/s 1", "rate '+1/s'"),
        ("s 1000001/s 1", "rate '1000001/s'"),
        ("s 1/ 1", "rate '1/'"),
        ("s /s 1", "rate '/s'"),
        ("s 1/sec 1", "rate '1/sec'"),
        ("s 1 1", "rate '1'"),
        ("s adaptive: 1", "rate 'adaptive:'"),
        ("s adaptive:adaptive:1/s 1", "rate 'adaptive:adaptive:1/s'"),
        ("s adaptive 1", "rate 'adaptive'"),
        ("s adaptive:0/s 1", "rate 'adaptive:0/s'"),
        ("s 1/s 0", "burst '0'"),
        ("s 1/s -1", "burst '-1'"),
        ("s 1/s 1000001", "burst '1000001'"),
        (
            "s 1/s 99999999999999999999999",
            "burst '99999999999999999999999'",
        ),
        ("s 1/s 01", "burst '01'"),
        ("s 1/s 1.0", "burst '1.0'"),
        ("s 1/s 1e3", "burst '1e3'"),
        ("s 1/s 1 s 2/s 2", "schedule 's' is named twice"),
        ("a 1/s 1 b 2/s x", "burst 'x'"),
    ];
    assert!(bad.len() >= 25);
    for (value, why) in bad {
        let e = err!(&mut con, "CONFIG", "SET", "echomq.release-limits", value);
        assert!(e.starts_with("ERR") && e.contains(why), "{value:?}: {e}");
        let kv: Vec<String> = q!(&mut con, "CONFIG", "GET", "echomq.release-limits");
        assert_eq!(kv[1], good, "{value:?} kept the old value");
    }
    // A refused value among several configs keeps every old value.
    let e = err!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.adaptive-window-ms",
        500,
        "echomq.release-limits",
        "s 1/s"
    );
    assert!(e.starts_with("ERR"), "{e}");
    let kv: Vec<String> = q!(&mut con, "CONFIG", "GET", "echomq.adaptive-window-ms");
    assert_eq!(kv[1], "200");
    for (name, value) in [
        ("echomq.adaptive-window-ms", "9"),
        ("echomq.adaptive-window-ms", "60001"),
        ("echomq.adaptive-failure-percent", "0"),
        ("echomq.adaptive-failure-percent", "101"),
    ] {
        let e = err!(&mut con, "CONFIG", "SET", name, value);
        assert!(e.starts_with("ERR"), "{name} {value}: {e}");
    }
}

/// A hold releases nothing, through a client's promote or the timer, until
/// its end by the server's clock; a longer hold is kept, 0 lifts it.
#[test]
fn a_hold_stops_every_release_until_it_ends() {
    let server = Server::start();
    let mut con = server.conn();
    fill_due(&mut con, S, 1000);
    // Any schedule can be held, limited or not.
    let until: i64 = q!(&mut con, "ECHO.HOLD", S, 400);
    let kept: i64 = q!(&mut con, "ECHO.HOLD", S, 100);
    assert_eq!(kept, until, "a longer hold is kept");
    let longer: i64 = q!(&mut con, "ECHO.HOLD", S, 450);
    assert!(longer > until);
    let (samples, ends) = promote_loop(
        &mut con,
        Duration::from_millis(700),
        Duration::from_millis(2),
    );
    // A promote ran between its sample's two TIMEs: one that ended before
    // the hold's end released nothing; the first that released ran after it.
    for (&(_, total), &end_ms) in samples.iter().zip(&ends) {
        if end_ms < longer {
            assert_eq!(total, 0, "released by {end_ms}, before {longer}");
        }
    }
    let first = samples
        .iter()
        .zip(&ends)
        .find(|(s, _)| s.1 > 0)
        .expect("released after the hold");
    assert!(*first.1 >= longer);
    assert_eq!(limit_field(&mut con, S, "held-until-ms"), Some(0.0));
    // 0 lifts a hold at once.
    fill_due(&mut con, S, 10);
    let _: i64 = q!(&mut con, "ECHO.HOLD", S, 60_000);
    assert_eq!(promote(&mut con, S, P), 0);
    let lifted: i64 = q!(&mut con, "ECHO.HOLD", S, 0);
    assert_eq!(lifted, 0);
    assert!(promote(&mut con, S, P) > 0);

    // Through the timer, the server's clock sampled with the count.
    let _: () = q!(&mut con, "DEL", S, P);
    fill_due(&mut con, S, 1000);
    let until: i64 = q!(&mut con, "ECHO.HOLD", S, 300);
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        format!("{S} {P}")
    );
    let samples = count_loop(
        &mut con,
        Duration::from_millis(700),
        Duration::from_millis(2),
    );
    for &(at_ms, len) in &samples {
        if at_ms < until {
            assert_eq!(len, 0, "the timer released at {at_ms} before {until}");
        }
    }
    let first = samples
        .iter()
        .find(|s| s.1 > 0)
        .expect("released after the hold");
    assert!(first.0 >= until);
    assert!(stat(&mut con, "release_limited") > 0);
}

#[test]
fn hold_and_limits_on_a_replica_and_their_errors() {
    let (_primary, _replica, mut p, mut r) = primary_and_replica(Options::default());
    let e = err!(&mut r, "ECHO.HOLD", S, 100);
    assert!(e.starts_with("READONLY"), "{e}");
    // ECHO.LIMITS reads on a replica (its own, empty, state).
    assert_eq!(limit_field(&mut r, S, "held-until-ms"), Some(0.0));
    for (args, want) in [
        (vec!["ECHO.HOLD", S], "ERR wrong number of arguments"),
        (vec!["ECHO.HOLD", S, "1", "2"], "ERR syntax error"),
        (vec!["ECHO.HOLD", S, "1", "GROUP"], "ERR syntax error"),
        (
            vec!["ECHO.HOLD", S, "-1"],
            "ERR ms is not an integer or out of range (0..=86400000)",
        ),
        (
            vec!["ECHO.HOLD", S, "86400001"],
            "ERR ms is not an integer or out of range",
        ),
        (vec!["ECHO.HOLD", S, "1.5"], "ERR ms is not an integer"),
        (vec!["ECHO.LIMITS"], "ERR wrong number of arguments"),
        (vec!["ECHO.LIMITS", S, "x"], "ERR wrong number of arguments"),
    ] {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let e = error_from(&mut p, &cmd);
        assert!(e.starts_with(want), "{args:?}: {e}");
    }
}

/// ECHO.SCHEDULE writes and replicates what the equivalent ECHO.RETRY
/// writes, counts apart, and is never a failure for an adaptive limit.
#[test]
fn schedule_is_a_retry_that_is_not_a_failure() {
    let (_primary, _replica, mut p, mut r) = primary_and_replica(Options::without_module());
    // Same reply and score as ECHO.RETRY fixed:<d> 1, options included.
    let at: i64 = q!(&mut p, "ECHO.SCHEDULE", S, "a", 60_000);
    let now = server_time_ms(&mut p);
    assert!((now + 59_000..=now + 60_000).contains(&at), "{at} {now}");
    let kept: i64 = q!(&mut p, "ECHO.SCHEDULE", S, "a", 1, "GT");
    assert_eq!(kept, at, "GT keeps the later score");
    let missing: i64 = q!(&mut p, "ECHO.SCHEDULE", S, "b", 1, "XX");
    assert_eq!(missing, -2);
    let zero: i64 = q!(&mut p, "ECHO.SCHEDULE", S, "c", 0, "NX");
    assert!(zero <= server_time_ms(&mut p));
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(
        digest(&mut p),
        digest(&mut r),
        "a module-less replica follows"
    );
    assert_eq!(stat(&mut p, "scheduled"), 4);
    assert_eq!(stat(&mut p, "retries"), 0);
    for (args, want) in [
        (vec![S, "a"], "ERR wrong number of arguments"),
        (
            vec![S, "a", "-1"],
            "ERR delay_ms is not an integer or out of range (0..=10000000000000)",
        ),
        (
            vec![S, "a", "10000000000001"],
            "ERR delay_ms is not an integer",
        ),
        (
            vec![S, "a", "1", "MAXATTEMPTS", "1", "DEAD", "{r}:d"],
            "ERR syntax error",
        ),
        (vec![S, "a", "1", "NX", "XX"], "ERR syntax error: XX and NX"),
        (vec![S, "a", "1", "BOGUS"], "ERR syntax error"),
        (vec!["{r}:str", "a", "1"], "WRONGTYPE"),
    ] {
        let _: () = q!(&mut p, "SET", "{r}:str", "x");
        let before = digest(&mut p);
        let mut cmd = redis::cmd("ECHO.SCHEDULE");
        for a in &args {
            cmd.arg(*a);
        }
        let e = error_from(&mut p, &cmd);
        assert!(e.starts_with(want), "{args:?}: {e}");
        assert_eq!(digest(&mut p), before, "{args:?} wrote");
    }

    // The same keyspace events as the equivalent ECHO.RETRY, options and all.
    let events_server = Server::start();
    let calls = |con: &mut Connection, prefix: &str, schedule: bool| {
        let key = format!("{prefix}:s");
        for (job, delay, option) in [
            ("a", 1000, None),
            ("a", 5000, Some("GT")),
            ("b", 0, Some("XX")),
        ] {
            let mut cmd = if schedule {
                cmd!("ECHO.SCHEDULE", &key, job, delay)
            } else {
                cmd!("ECHO.RETRY", &key, job, format!("fixed:{delay}"), 1)
            };
            if let Some(option) = option {
                cmd.arg(option);
            }
            let _: i64 = cmd.query(con).expect("a scheduled job");
        }
    };
    let scheduled = events(&events_server, "{e1}", |con| calls(con, "{e1}", true));
    let retried = events(&events_server, "{e2}", |con| calls(con, "{e2}", false));
    assert_eq!(scheduled.len(), retried.len(), "{scheduled:?} {retried:?}");
    assert_eq!(
        scheduled
            .iter()
            .map(|e| e.replace("{e1}", ""))
            .collect::<Vec<_>>(),
        retried
            .iter()
            .map(|e| e.replace("{e2}", ""))
            .collect::<Vec<_>>()
    );

    // Not a failure: 200 ECHO.SCHEDULE calls against an adaptive limit that
    // released 10 change nothing; 200 ECHO.RETRY calls halve it.
    let server = Server::start();
    let mut con = server.conn();
    set_limits(&mut con, &format!("{S} adaptive:1000/s 10"));
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.adaptive-window-ms", 10);
    fill_due(&mut con, S, 10);
    assert_eq!(promote(&mut con, S, P), 10);
    for i in 0..200 {
        let _: i64 = q!(&mut con, "ECHO.SCHEDULE", S, format!("s-{i}"), 600_000);
    }
    sleep(Duration::from_millis(20));
    assert_eq!(limit_field(&mut con, S, "failures"), Some(0.0));
    assert_eq!(limit_field(&mut con, S, "rate-in-force"), Some(1000.0));
    assert_eq!(stat(&mut con, "adaptive_decreases"), 0);
    for i in 0..200 {
        let _: i64 = q!(
            &mut con,
            "ECHO.RETRY",
            S,
            format!("r-{i}"),
            "fixed:600000",
            1
        );
    }
    sleep(Duration::from_millis(20));
    assert_eq!(limit_field(&mut con, S, "failures"), Some(200.0));
    assert!(limit_field(&mut con, S, "rate-in-force").unwrap() < 1000.0);
    // ECHO.LIMITS shows the window's effect; the next release books it.
    assert_eq!(promote(&mut con, S, P), 0);
    assert!(stat(&mut con, "adaptive_decreases") >= 1);
}

/// A dependency that serves `capacity` calls a second (a token bucket of
/// one second), answering "overloaded" beyond that.
struct Dependency {
    capacity: AtomicU64,
    state: Mutex<(Instant, f64)>,
}

impl Dependency {
    fn call(&self) -> bool {
        let capacity = self.capacity.load(Ordering::Relaxed) as f64;
        let mut state = self.state.lock().unwrap();
        let now = Instant::now();
        let tokens =
            (state.1 + now.duration_since(state.0).as_secs_f64() * capacity).min(capacity / 20.0);
        *state = (now, tokens);
        if tokens >= 1.0 {
            state.1 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// adaptive:4000/s against a dependency that serves 2000/s, then 200/s,
/// then 2000/s again: the rate in force falls below 400/s within 2 s of the
/// drop and climbs above 1500/s within 10 s of the recovery.
#[test]
fn an_adaptive_limit_follows_the_dependency_down_and_back_up() {
    let server = Server::start();
    let mut con = server.conn();
    fill_due(&mut con, S, 200_000);
    set_limits(&mut con, &format!("{S} adaptive:4000/s 100"));
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        format!("{S} {P}")
    );
    let dependency = Arc::new(Dependency {
        capacity: AtomicU64::new(2000),
        state: Mutex::new((Instant::now(), 0.0)),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let mut con = server.conn();
            let dependency = Arc::clone(&dependency);
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let popped: Option<(String, String)> = q!(&mut con, "BRPOP", P, 0.1);
                    let Some((_, job)) = popped else { continue };
                    if !dependency.call() {
                        let _: i64 = q!(&mut con, "ECHO.RETRY", S, &job, "jitter:fixed:2000", 1);
                    }
                }
            })
        })
        .collect();
    let rate = |con: &mut Connection| limit_field(con, S, "rate-in-force").expect("limited");
    let mut seen: HashMap<&str, Vec<f64>> = HashMap::new();
    sleep(Duration::from_secs(3));
    dependency.capacity.store(200, Ordering::Relaxed);
    let drop = Instant::now();
    let mut fell = None;
    while drop.elapsed() < Duration::from_secs(4) {
        let r = rate(&mut con);
        seen.entry("down").or_default().push(r);
        if r < 400.0 && fell.is_none() {
            fell = Some(drop.elapsed());
        }
        sleep(Duration::from_millis(50));
    }
    dependency.capacity.store(2000, Ordering::Relaxed);
    let recovery = Instant::now();
    let mut rose = None;
    while recovery.elapsed() < Duration::from_secs(12) && rose.is_none() {
        let r = rate(&mut con);
        seen.entry("up").or_default().push(r);
        if r > 1500.0 {
            rose = Some(recovery.elapsed());
        }
        sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().expect("a worker");
    }
    let fell = fell.unwrap_or_else(|| panic!("never below 400/s: {:?}", seen["down"]));
    assert!(
        fell <= Duration::from_secs(2),
        "fell after {fell:?}: {:?}",
        seen["down"]
    );
    let rose = rose.unwrap_or_else(|| panic!("never above 1500/s: {:?}", seen["up"]));
    assert!(rose <= Duration::from_secs(10), "rose after {rose:?}");
    assert!(stat(&mut con, "adaptive_decreases") > 0);
}

/// After a limited, held and adaptive run, a module-less replica and the
/// AOF replayed without the module hold what the primary holds.
#[test]
fn limits_and_holds_replicate_only_what_moved() {
    let dir = TempDir::new("release-aof");
    let mut primary = Server::start_in(Options::aof_replay(), &dir.0);
    let replica = start_replica(&primary, Options::without_module());
    let mut p = primary.conn();
    let mut r = replica.conn();
    fill_due(&mut p, S, 3000);
    set_limits(
        &mut p,
        &format!("{S} 2000/s 20 {{r}}:other adaptive:500/s 5"),
    );
    let _: () = q!(
        &mut p,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        format!("{S} {P}")
    );
    sleep(Duration::from_millis(300));
    let _: i64 = q!(&mut p, "ECHO.HOLD", S, 200);
    for i in 0..100 {
        let _: i64 = q!(
            &mut p,
            "ECHO.RETRY",
            S,
            format!("job-{i:06}"),
            "jitter:fixed:100",
            2
        );
    }
    sleep(Duration::from_millis(600));
    let _: () = q!(&mut p, "CONFIG", "SET", "echomq.auto-promote", "");
    // The limit's state key expires once its bucket is full again (10 ms at
    // 2000/s burst 20); the digests are compared after that, as a replayed
    // AOF may load it expired.
    wait_until("the state key expired", Duration::from_secs(5), || {
        let exists: i64 = q!(&mut p, "EXISTS", STATE);
        (exists == 0)
            .then_some(())
            .ok_or(format!("EXISTS {exists}"))
    });
    wait_replica_synced(&mut p, &mut r);
    let want = digest(&mut p);
    assert_eq!(digest(&mut r), want, "the module-less replica");
    let moved: u64 = q!(&mut p, "LLEN", P);
    assert!(moved > 0 && moved < 3000, "limited, not drained: {moved}");
    primary.shutdown();
    let mut bare = Options::aof_replay();
    bare.load_module = false;
    let again = Server::start_in(bare, &dir.0);
    let mut a = again.conn();
    assert_eq!(digest(&mut a), want, "the AOF replayed without the module");
}

/// A limit's state is a key beside its schedule, written with the release
/// that changed it: a replica holds the primary's, so the replica promoted
/// by a failover goes on from the rate in force and the arrival time (no
/// reset of an adaptive rate to its ceiling, no fresh burst). Each database
/// has its own state, and a state key of another type refuses the release
/// before anything moves.
#[test]
fn a_limits_state_is_a_key_a_promoted_replica_goes_on_from() {
    let (primary, _replica, mut p, mut r) = primary_and_replica(Options::default());
    let limits = format!("{S} adaptive:1000/s 50 {{w}}:s 10/s 5");
    for con in [&mut p, &mut r] {
        set_limits(con, &limits);
        let _: () = q!(con, "CONFIG", "SET", "echomq.adaptive-window-ms", 50);
    }
    fill_due(&mut p, S, 2000);
    // A herd: the burst leaves, then two failing windows halve the rate.
    assert_eq!(promote(&mut p, S, P), 50);
    for round in 0..2 {
        sleep(Duration::from_millis(60));
        for i in 0..20 {
            let _: i64 = q!(
                &mut p,
                "ECHO.RETRY",
                S,
                format!("f-{round}-{i}"),
                "fixed:600000",
                1
            );
        }
        promote(&mut p, S, P);
    }
    sleep(Duration::from_millis(60));
    promote(&mut p, S, P);
    let rate = limit_field(&mut p, S, "rate-in-force").unwrap();
    assert!(rate < 1000.0, "the failures lowered the rate: {rate}");
    let state: String = q!(&mut p, "GET", STATE);
    assert!(state.starts_with("1 adaptive 1000 1000 50 "), "{state}");
    let kept_until: i64 = q!(&mut p, "PEXPIRETIME", STATE);
    let now_ms = server_time_ms(&mut p);
    assert!(
        kept_until > now_ms + 500_000,
        "a lowered rate is kept for minutes: {kept_until} at {now_ms}"
    );
    wait_replica_synced(&mut p, &mut r);
    let on_replica: String = q!(&mut r, "GET", STATE);
    assert_eq!(on_replica, state, "replicated as written");
    assert_eq!(limit_field(&mut r, S, "rate-in-force"), Some(rate));

    let _: () = q!(&mut r, "REPLICAOF", "NO", "ONE");
    let new_rate = limit_field(&mut r, S, "rate-in-force").unwrap();
    let old_available = limit_field(&mut p, S, "available").unwrap();
    let new_available = limit_field(&mut r, S, "available").unwrap();
    println!("rate in force {rate}/s, after the switch {new_rate}/s; available {old_available} on the old primary, {new_available} on the new one");
    assert_eq!(new_rate, rate, "the new primary's rate in force");
    assert!(new_available < 50.0, "no fresh burst: {new_available}");
    assert!(
        (new_available - old_available).abs() <= 1.0,
        "the same bucket: {new_available} vs {old_available}"
    );
    let moved = promote(&mut r, S, P);
    assert!(
        moved as f64 <= new_available + 1.0,
        "{moved} after {new_available}"
    );

    // Database 1 has a limit of its own: a full burst, though 0 spent its.
    let mut one = primary.conn();
    let _: () = q!(&mut one, "SELECT", 1);
    fill_due(&mut one, S, 100);
    assert_eq!(promote(&mut one, S, P), 50);
    let in_one: String = q!(&mut one, "GET", STATE);
    assert!(in_one.starts_with("1 adaptive 1000 1000 50 "), "{in_one}");
    let in_zero: String = q!(&mut p, "GET", STATE);
    assert_ne!(in_one, in_zero);

    // A state key of another type: WRONGTYPE, nothing moved.
    let _: () = q!(&mut p, "RPUSH", "{w}:s:echomq-limit", "x");
    let _: () = q!(&mut p, "ZADD", "{w}:s", 0, "a");
    let e = err!(&mut p, "ECHO.PROMOTE", "{w}:s", "{w}:p");
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let left: i64 = q!(&mut p, "ZCARD", "{w}:s");
    let pending: i64 = q!(&mut p, "EXISTS", "{w}:p");
    assert_eq!((left, pending), (1, 0));
}

/// A hold is a key beside its schedule, in its slot, expiring when the
/// hold ends: no table to fill, a replica holds it as the primary does, and
/// a refusal writes nothing.
#[test]
fn a_hold_is_a_key_beside_its_schedule() {
    let (_primary, _replica, mut p, mut r) = primary_and_replica(Options::default());
    let until: i64 = q!(&mut p, "ECHO.HOLD", S, 60_000);
    let hold_key = format!("{S}:echomq-hold");
    let stored: String = q!(&mut p, "GET", &hold_key);
    assert_eq!(stored, until.to_string());
    let expires_at: i64 = q!(&mut p, "PEXPIRETIME", &hold_key);
    assert_eq!(expires_at, until, "the key ends with the hold");
    // A name without a hash tag becomes the tag of its hold key.
    let _: i64 = q!(&mut p, "ECHO.HOLD", "plain", 60_000);
    let kind: String = q!(&mut p, "TYPE", "{plain}:echomq-hold");
    assert_eq!(kind, "string");
    // A longer hold in force is kept, and writes nothing.
    let kept: i64 = q!(&mut p, "ECHO.HOLD", S, 1000);
    assert_eq!(kept, until);
    // More schedules than the former table of 10,000 held, each a key.
    let mut pipe = redis::pipe();
    for i in 0..10_001 {
        pipe.cmd("ECHO.HOLD")
            .arg(format!("{{h{i}}}:schedule"))
            .arg(60_000)
            .ignore();
    }
    let _: () = pipe.query(&mut p).expect("10,001 holds");
    let one_more: i64 = q!(&mut p, "ECHO.HOLD", "one-more", 100);
    assert!(one_more > 0);
    // The replica holds the same keys, so it would hold the queue as well
    // after a failover.
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
    assert_eq!(
        limit_field(&mut r, S, "held-until-ms"),
        Some(until as f64),
        "ECHO.LIMITS on the replica reads the hold"
    );
    // A hold key of another type refuses the hold and is left as it was.
    let _: () = q!(&mut p, "RPUSH", "{w}:s:echomq-hold", "x");
    let e = err!(&mut p, "ECHO.HOLD", "{w}:s", 100);
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let len: i64 = q!(&mut p, "LLEN", "{w}:s:echomq-hold");
    assert_eq!(len, 1);
    assert_eq!(limit_field(&mut p, "{w}:s", "held-until-ms"), Some(0.0));
    // 0 lifts: the key goes.
    let lifted: i64 = q!(&mut p, "ECHO.HOLD", S, 0);
    assert_eq!(lifted, 0);
    let exists: i64 = q!(&mut p, "EXISTS", &hold_key);
    assert_eq!(exists, 0);
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
}

/// Over maxmemory a hold still works for a queue that has jobs (it frees
/// the dependency, not memory), and extending or lifting one always works;
/// a new hold of a schedule that does not exist is refused, so a client
/// cannot make keys without bound then.
#[test]
fn over_maxmemory_a_hold_works_for_queues_that_exist() {
    let server = Server::start();
    let mut con = server.conn();
    fill_due(&mut con, S, 10);
    let _: i64 = q!(&mut con, "ECHO.HOLD", "{x}:held", 60_000);
    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory", "1");
    let e = err!(&mut con, "SET", "k", "v");
    assert!(e.starts_with("OOM"), "the server is over maxmemory: {e}");
    let held: i64 = q!(&mut con, "ECHO.HOLD", S, 60_000);
    assert!(held > 0, "a queue with jobs is held");
    let longer: i64 = q!(&mut con, "ECHO.HOLD", "{x}:held", 120_000);
    assert!(longer > 0, "a hold in force grows");
    let e = err!(&mut con, "ECHO.HOLD", "{nothing}:here", 60_000);
    assert_eq!(e, "OOM command not allowed when used memory > 'maxmemory'.");
    let exists: i64 = q!(&mut con, "EXISTS", "{nothing}:here:echomq-hold");
    assert_eq!(exists, 0);
    let lifted: i64 = q!(&mut con, "ECHO.HOLD", "{x}:held", 0);
    assert_eq!(lifted, 0);
    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory", "0");
}

/// A release whose `pending` is named as its own limit's state key: the
/// jobs pushed there stay a list and nothing is lost, whether the state key
/// was missing (the push creates the list, which the booking then leaves
/// alone) or the key already is that list (`WRONGTYPE`, nothing written).
#[test]
fn a_pending_named_as_the_state_key_keeps_its_jobs() {
    let server = Server::start();
    let mut con = server.conn();
    // A slow refill: the state must be kept (written) after the release.
    set_limits(&mut con, &format!("{S} 1/h 10"));
    fill_due(&mut con, S, 10);
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, STATE, "LIMIT", 4);
    assert_eq!(moved, 4);
    let kind: String = q!(&mut con, "TYPE", STATE);
    assert_eq!(kind, "list");
    let jobs: Vec<String> = q!(&mut con, "LRANGE", STATE, 0, -1);
    assert_eq!(
        jobs,
        ["job-000003", "job-000002", "job-000001", "job-000000"]
    );
    let ttl: i64 = q!(&mut con, "PTTL", STATE);
    assert_eq!(ttl, -1, "no expiry on the jobs");
    let refused = redis::cmd("ECHO.PROMOTE")
        .arg(S)
        .arg(STATE)
        .query::<i64>(&mut con)
        .expect_err("the state key is a list");
    assert!(refused.to_string().contains("WRONGTYPE"), "{refused}");
    let left: i64 = q!(&mut con, "ZCARD", S);
    assert_eq!(left, 6, "nothing moved by the refused call");
    let jobs_after: i64 = q!(&mut con, "LLEN", STATE);
    assert_eq!(jobs_after, 4);
}
