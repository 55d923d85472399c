//! Recurring jobs: ECHO.REPEAT arms one occurrence, `<id>@<nominal_ms>`,
//! and every release of it (ECHO.PROMOTE, the timer) arms the next in the
//! same step, so exactly one is scheduled at any time; a stretch missed
//! while the queue was held runs once; the same definition again changes
//! nothing; definitions and occurrences are ordinary keys, replicated as
//! their concrete writes.

mod common;

use std::collections::BTreeMap;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;

const S: &str = "{r}:schedule";
const P: &str = "{r}:pending";
const JOBS: &str = "{r}:jobs";
const DEFS: &str = "{r}:schedule:echomq-repeats";
/// One definition as an application declares it at every start.
const REPORT: &[&str] = &[
    "report",
    "every:60000",
    "JITTER",
    "5000",
    "PAYLOAD",
    JOBS,
    "hello",
];

fn repeat(con: &mut Connection, args: &[&str]) -> i64 {
    let mut cmd = redis::cmd("ECHO.REPEAT");
    cmd.arg(S);
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(con)
        .unwrap_or_else(|e| panic!("ECHO.REPEAT {args:?}: {e}"))
}

fn members(con: &mut Connection) -> BTreeMap<String, i64> {
    let pairs: Vec<(String, i64)> = q!(con, "ZRANGE", S, 0, -1, "WITHSCORES");
    pairs.into_iter().collect()
}

fn now_ms(con: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = q!(con, "TIME");
    s * 1000 + us / 1000
}

/// The nominal time of an occurrence's name.
fn nominal(member: &str) -> i64 {
    member.rsplit_once('@').unwrap().1.parse().unwrap()
}

/// The occurrences of `id` in a list of job names.
fn occurrences_of<'a>(names: &'a [String], id: &str) -> Vec<&'a String> {
    names
        .iter()
        .filter(|n| n.rsplit_once('@').is_some_and(|(i, _)| i == id))
        .collect()
}

fn repeats(con: &mut Connection) -> Vec<BTreeMap<String, redis::Value>> {
    let listed: Vec<Vec<redis::Value>> = q!(con, "ECHO.REPEATS", S);
    listed
        .into_iter()
        .map(|flat| {
            flat.chunks(2)
                .map(|kv| {
                    let key: String = redis::from_redis_value(kv[0].clone()).unwrap();
                    (key, kv[1].clone())
                })
                .collect()
        })
        .collect()
}

fn int(v: &redis::Value) -> Option<i64> {
    redis::from_redis_value(v.clone()).ok()
}

#[test]
fn a_definition_arms_one_occurrence_and_the_same_one_again_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    let before = now_ms(&mut con);
    let fire = repeat(&mut con, REPORT);
    let after = now_ms(&mut con);
    let armed = members(&mut con);
    assert_eq!(armed.len(), 1, "{armed:?}");
    let (name, score) = armed.iter().next().unwrap();
    let n = nominal(name);
    assert!(name.starts_with("report@"), "{name}");
    assert!(
        n > before + 59_000 && n <= after + 60_000,
        "first one interval on"
    );
    assert_eq!(*score, fire);
    assert!((n..=n + 5000).contains(&fire), "jitter within 0..=5000");
    let payload: String = q!(&mut con, "HGET", JOBS, name);
    assert_eq!(payload, "hello");

    // Declared again by another instance: nothing written, same answer.
    let digest_before = digest(&mut con);
    for _ in 0..3 {
        let again = repeat(&mut con, REPORT);
        assert_eq!(again, fire);
    }
    assert_eq!(digest(&mut con), digest_before, "the same definition wrote");

    // ECHO.REPEATS shows it.
    let listed = repeats(&mut con);
    assert_eq!(listed.len(), 1);
    let d = &listed[0];
    let text = |k: &str| -> String { redis::from_redis_value(d[k].clone()).unwrap() };
    assert_eq!(text("id"), "report");
    assert_eq!(text("spec"), "every:60000");
    assert_eq!(text("tz"), "UTC");
    assert_eq!(int(&d["jitter-ms"]), Some(5000));
    assert_eq!(int(&d["next-ms"]), Some(n));
    assert_eq!(int(&d["fire-at-ms"]), Some(fire));
    assert_eq!(d["from-ms"], redis::Value::Nil);
    assert_eq!(text("payload-key"), JOBS);

    // A different definition replaces it: the old occurrence and its
    // payload go, one new occurrence is armed.
    repeat(
        &mut con,
        &["report", "cron:0 * * * *", "TZ", "europe/berlin"],
    );
    let armed = members(&mut con);
    assert_eq!(armed.len(), 1, "{armed:?}");
    let new_name = armed.keys().next().unwrap();
    assert_ne!(new_name, name);
    assert_eq!(nominal(new_name) % 3_600_000, 0, "on the hour");
    let gone: Option<String> = q!(&mut con, "HGET", JOBS, name);
    assert_eq!(gone, None, "the replaced occurrence's payload");
    assert_eq!(
        redis::from_redis_value::<String>(repeats(&mut con)[0]["tz"].clone()).unwrap(),
        "Europe/Berlin"
    );

    // ECHO.UNREPEAT removes both; a second time finds nothing.
    let removed: i64 = q!(&mut con, "ECHO.UNREPEAT", S, "report");
    assert_eq!(removed, 1);
    let removed: i64 = q!(&mut con, "ECHO.UNREPEAT", S, "report");
    assert_eq!(removed, 0);
    let keys: Vec<String> = q!(&mut con, "KEYS", "*");
    assert!(keys.is_empty(), "{keys:?}");
    assert!(repeats(&mut con).is_empty());
}

#[test]
fn each_release_arms_the_next_and_a_retried_occurrence_arms_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    let from = now_ms(&mut con) - 10_500;
    let from_s = from.to_string();
    // FROM in the past: the first occurrence is the first still to come.
    repeat(
        &mut con,
        &["tick", "every:1000", "FROM", &from_s, "PAYLOAD", JOBS, "p"],
    );
    let first = members(&mut con).into_keys().next().unwrap();
    assert_eq!((nominal(&first) - from) % 1000, 0, "on the anchor's grid");
    let mut released = Vec::new();
    for _ in 0..3 {
        let due = *members(&mut con).values().next().unwrap();
        while now_ms(&mut con) < due {
            sleep(Duration::from_millis(20));
        }
        let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
        assert_eq!(moved, 1);
        let pending: Vec<String> = q!(&mut con, "LRANGE", P, 0, -1);
        released.push(pending[0].clone());
        let armed = members(&mut con);
        assert_eq!(armed.len(), 1, "exactly one armed: {armed:?}");
        let next = armed.keys().next().unwrap();
        assert_eq!(nominal(next), nominal(&pending[0]) + 1000);
        let payload: String = q!(&mut con, "HGET", JOBS, next);
        assert_eq!(payload, "p");
    }
    // A worker's retry puts an older occurrence back: released again, it
    // is a job like any other and arms nothing.
    let armed_before = members(&mut con);
    let _: i64 = q!(&mut con, "ZADD", S, 0, &released[0]);
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
    assert_eq!(moved, 1);
    assert_eq!(members(&mut con), armed_before, "the retry armed something");
    // A member that only looks like an occurrence arms nothing either.
    let _: i64 = q!(&mut con, "ZADD", S, 0, "user@example.com", 0, "ghost@123");
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
    assert_eq!(moved, 2);
    assert_eq!(members(&mut con), armed_before);
}

#[test]
fn an_occurrence_released_into_a_stream_is_an_entry_and_arms_the_next() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "XGROUP", "CREATE", P, "workers", "0", "MKSTREAM");
    let from = (now_ms(&mut con) - 2500).to_string();
    repeat(&mut con, &["s", "every:1000", "FROM", &from]);
    let first = members(&mut con).into_keys().next().unwrap();
    sleep(Duration::from_millis(600));
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
    assert_eq!(moved, 1);
    let entries: Vec<(String, Vec<(String, String)>)> = q!(&mut con, "XRANGE", P, "-", "+");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].1, [("job".to_string(), first.clone())]);
    let armed = members(&mut con);
    assert_eq!(armed.len(), 1);
    assert_eq!(
        nominal(armed.keys().next().unwrap()),
        nominal(&first) + 1000
    );
}

#[test]
fn the_timer_and_racing_promoters_release_every_occurrence_exactly_once() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        format!("{S} {P}")
    );
    let run = Duration::from_secs(
        std::env::var("ECHOMQ_REPEAT_RUN_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(6),
    );
    let start = now_ms(&mut con);
    repeat(&mut con, &["sec", "every:1000"]);
    let deadline = Instant::now() + run;
    let promoters: Vec<_> = (0..2)
        .map(|_| {
            let mut c = server.conn();
            std::thread::spawn(move || {
                while Instant::now() < deadline {
                    let _: i64 = q!(&mut c, "ECHO.PROMOTE", S, P);
                }
            })
        })
        .collect();
    for p in promoters {
        p.join().unwrap();
    }
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", "");
    let end = now_ms(&mut con);
    let pending: Vec<String> = q!(&mut con, "LRANGE", P, 0, -1);
    let mut nominals: Vec<i64> = occurrences_of(&pending, "sec")
        .into_iter()
        .map(|n| nominal(n))
        .collect();
    nominals.sort();
    let unique: std::collections::BTreeSet<i64> = nominals.iter().copied().collect();
    assert_eq!(unique.len(), nominals.len(), "released twice: {nominals:?}");
    // Every nominal second from the first to the last, none skipped.
    let span = run.as_millis() as i64 / 1000;
    assert!(nominals.len() as i64 >= span - 1, "{nominals:?}");
    for pair in nominals.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "skipped: {nominals:?}");
    }
    assert!(nominals[0] >= start + 1000, "{start} {nominals:?}");
    assert!(*nominals.last().unwrap() <= end);
    let armed = members(&mut con);
    assert_eq!(armed.len(), 1, "{armed:?}");
    eprintln!("{} occurrences, one each second", nominals.len());
}

#[test]
fn a_held_stretch_runs_once_and_the_schedule_goes_on() {
    let server = Server::start();
    let mut con = server.conn();
    repeat(&mut con, &["sec", "every:1000"]);
    let _: i64 = q!(&mut con, "ECHO.HOLD", S, 3500);
    sleep(Duration::from_millis(3700));
    let now = now_ms(&mut con);
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
    assert_eq!(moved, 1, "one run for the missed stretch");
    let armed = members(&mut con);
    assert_eq!(armed.len(), 1);
    let next = nominal(armed.keys().next().unwrap());
    assert!(next > now && next <= now + 1000, "the first still to come");
    // Nothing more is due until it.
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
    assert_eq!(moved, 0);
}

#[test]
fn until_ends_a_definition_after_its_last_occurrence_and_from_starts_it() {
    let server = Server::start();
    let mut con = server.conn();
    let now = now_ms(&mut con);
    let (from, until) = ((now + 300).to_string(), (now + 1300).to_string());
    let fire = repeat(
        &mut con,
        &["two", "every:1000", "FROM", &from, "UNTIL", &until],
    );
    assert_eq!(fire, now + 300, "FROM still to come is the first");
    let mut ran = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && ran.len() < 3 {
        let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
        if moved > 0 {
            let got: Vec<String> = q!(&mut con, "LRANGE", P, 0, -1);
            ran = got;
        }
        sleep(Duration::from_millis(20));
    }
    assert_eq!(ran.len(), 2, "FROM and FROM+1000 only: {ran:?}");
    assert!(members(&mut con).is_empty());
    assert!(repeats(&mut con).is_empty(), "removed after its last");
    let defs: i64 = q!(&mut con, "EXISTS", DEFS);
    assert_eq!(defs, 0);
}

#[test]
fn the_calendars_herd_is_one_bucket_without_jitter_and_a_flat_spread_with_it() {
    let server = Server::start();
    let mut con = server.conn();
    // Both herds must arm the same hour: near its end, wait it out.
    let hour_ms = 3_600_000;
    let into_hour_ms = now_ms(&mut con) % hour_ms;
    if into_hour_ms > hour_ms - 30_000 {
        sleep(Duration::from_millis((hour_ms - into_hour_ms + 100) as u64));
    }
    let next_hour = (now_ms(&mut con) / hour_ms + 1) * hour_ms;
    for (schedule, jitter) in [("{h0}:s", "0"), ("{h1}:s", "300000")] {
        let mut pipe = redis::pipe();
        for i in 0..10_000 {
            pipe.cmd("ECHO.REPEAT")
                .arg(schedule)
                .arg(format!("tenant-{i}"))
                .arg("cron:0 * * * *")
                .arg("JITTER")
                .arg(jitter)
                .ignore();
        }
        let _: () = pipe.query(&mut con).unwrap();
    }
    // JITTER 300000 draws in 0..=300000: the range takes its last ms too.
    let spread = |con: &mut Connection, schedule: &str| -> Vec<i64> {
        q!(
            con,
            "ECHO.SPREAD",
            schedule,
            next_hour,
            next_hour + 300_001,
            300
        )
    };
    let plain = spread(&mut con, "{h0}:s");
    assert_eq!(plain[0], 10_000, "one bucket");
    assert_eq!(plain.iter().sum::<i64>(), 10_000);
    let jittered = spread(&mut con, "{h1}:s");
    assert_eq!(
        jittered.iter().sum::<i64>(),
        10_000,
        "all within five minutes"
    );
    let mean = 10_000.0 / 300.0;
    let largest = *jittered.iter().max().unwrap();
    assert!(
        (largest as f64) <= 3.0 * mean,
        "largest 1-s bucket {largest}, mean {mean:.1}"
    );
    eprintln!("jittered: largest 1-s bucket {largest}, mean {mean:.1}");
}

#[test]
fn occurrences_pass_the_limit_the_hold_and_the_groups_of_their_schedule() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.release-limits",
        format!("{S} 1/h 1")
    );
    // A grouped schedule: another group's member beside the occurrence.
    let _: i64 = q!(&mut con, "ECHO.SCHEDULE", S, "g-job", 0, "GROUP", "tenant");
    let from = (now_ms(&mut con) - 5000).to_string();
    repeat(&mut con, &["sec", "every:1000", "FROM", &from]);
    sleep(Duration::from_millis(1100));
    // The limit lets one member leave an hour: the fair release takes one.
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
    assert_eq!(moved, 1);
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
    assert_eq!(moved, 0, "the limit holds the rest");
    let pending: Vec<String> = q!(&mut con, "LRANGE", P, 0, -1);
    let armed: Vec<String> = members(&mut con).into_keys().collect();
    let sec_scheduled = occurrences_of(&armed, "sec").len();
    let sec_released = occurrences_of(&pending, "sec").len();
    assert_eq!(
        sec_scheduled, 1,
        "one armed occurrence: {armed:?} {pending:?}"
    );
    assert!(sec_released <= 1);
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.release-limits", "");
    // A hold keeps the occurrence; lifting it releases it and arms the next.
    let _: i64 = q!(&mut con, "ECHO.HOLD", S, 60_000);
    sleep(Duration::from_millis(1100));
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
    assert_eq!(moved, 0, "held");
    let _: i64 = q!(&mut con, "ECHO.HOLD", S, 0);
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", S, P);
    assert!(moved >= 1);
    let pending: Vec<String> = q!(&mut con, "LRANGE", P, 0, -1);
    assert!(pending.iter().any(|j| j == "g-job"), "{pending:?}");
    let armed: Vec<String> = members(&mut con).into_keys().collect();
    assert_eq!(occurrences_of(&armed, "sec").len(), 1, "{armed:?}");
    let all_runs = occurrences_of(&pending, "sec");
    let unique: std::collections::BTreeSet<&&String> = all_runs.iter().collect();
    assert_eq!(unique.len(), all_runs.len(), "twice: {pending:?}");
}

/// Recurring, limited and grouped queues side by side, released by the
/// timer: a replica without the module and the AOF replayed without it end
/// identical to the primary.
#[test]
fn a_replica_and_an_aof_replay_without_the_module_hold_the_same_recurring_state() {
    let (_primary, replica, mut p, mut r) = primary_and_replica(Options::without_module());
    let _: () = q!(
        &mut p,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        format!("{S} {P} {{l}}:s {{l}}:p")
    );
    let _: () = q!(
        &mut p,
        "CONFIG",
        "SET",
        "echomq.release-limits",
        "{l}:s 5/s 2"
    );
    repeat(
        &mut p,
        &["a", "every:1000", "JITTER", "500", "PAYLOAD", JOBS, "x"],
    );
    repeat(&mut p, &["b", "cron:* * * * *", "TZ", "America/New_York"]);
    let _: i64 = q!(
        &mut p,
        "ECHO.REPEAT",
        "{l}:s",
        "c",
        "every:1000",
        "JITTER",
        "1000"
    );
    for i in 0..20 {
        let _: i64 = q!(
            &mut p,
            "ECHO.SCHEDULE",
            "{l}:s",
            format!("j{i}"),
            0,
            "GROUP",
            format!("g{}", i % 3)
        );
    }
    sleep(Duration::from_millis(3500));
    let _: i64 = q!(&mut p, "ECHO.UNREPEAT", S, "b");
    let _: () = q!(&mut p, "CONFIG", "SET", "echomq.auto-promote", "");
    wait_replica_synced(&mut p, &mut r);
    let runs: Vec<String> = q!(&mut p, "LRANGE", P, 0, -1);
    assert!(occurrences_of(&runs, "a").len() >= 2, "{runs:?}");
    // Expiring state keys are compared once gone (EXISTS deletes an expired
    // key and replicates the DEL).
    sleep(Duration::from_millis(1200));
    let keys: Vec<String> = q!(&mut p, "KEYS", "*");
    for key in keys {
        let _: i64 = q!(&mut p, "EXISTS", key);
    }
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r), "{}", replica.log());
    let stats: String = q!(&mut r, "INFO", "commandstats");
    assert!(stats.contains("cmdstat_hset:"), "{stats}");
    assert!(!stats.to_lowercase().contains("cmdstat_echo."), "{stats}");

    // The AOF replayed by a server without the module.
    let dir = TempDir::new("repeat-aof");
    let aof = Options::aof_replay();
    let mut server = Server::start_in(aof.clone(), &dir.0);
    let mut con = server.conn();
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        format!("{S} {P}")
    );
    repeat(&mut con, &["a", "every:1000", "PAYLOAD", JOBS, "x"]);
    sleep(Duration::from_millis(2300));
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", "");
    let want = digest(&mut con);
    server.shutdown();
    let mut bare = aof;
    bare.load_module = false;
    let server = Server::start_in(bare, &dir.0);
    assert_eq!(
        digest(&mut server.conn()),
        want,
        "replayed without the module"
    );
}

/// A restart from the AOF: the definition and its armed occurrence are
/// back; the stretch the server was down runs once, then one a second.
#[test]
fn a_restart_from_the_aof_runs_the_missed_stretch_once() {
    let dir = TempDir::new("repeat-restart");
    let aof = Options::aof_replay();
    let mut server = Server::start_in(aof.clone(), &dir.0);
    let mut con = server.conn();
    let pairs = format!("{S} {P}");
    repeat(&mut con, &["sec", "every:1000"]);
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", &pairs);
    sleep(Duration::from_millis(1500));
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", "");
    server.shutdown();
    sleep(Duration::from_millis(3000));
    let server = Server::start_in(aof, &dir.0);
    let mut con = server.conn();
    let restarted = now_ms(&mut con);
    let before: Vec<String> = q!(&mut con, "LRANGE", P, 0, -1);
    assert_eq!(repeats(&mut con).len(), 1, "the definition came back");
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", &pairs);
    sleep(Duration::from_millis(2500));
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", "");
    let after: Vec<String> = q!(&mut con, "LRANGE", P, 0, -1);
    let new: Vec<i64> = after[..after.len() - before.len()]
        .iter()
        .map(|n| nominal(n))
        .rev()
        .collect();
    // One run for the whole gap (its nominal time before the restart),
    // then one each second after it.
    let in_gap = new.iter().filter(|&&n| n <= restarted).count();
    assert_eq!(
        in_gap, 1,
        "the gap ran once: {new:?} (restart at {restarted})"
    );
    for pair in new.windows(2).skip(1) {
        assert_eq!(pair[1] - pair[0], 1000, "{new:?}");
    }
    assert!(new.len() >= 3, "{new:?}");
}
