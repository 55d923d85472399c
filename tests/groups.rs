//! Groups: `GROUP group` on ECHO.ADD, ECHO.SCHEDULE and ECHO.RETRY puts a
//! member in its group's own sorted set beside the schedule, and every
//! release (ECHO.PROMOTE and the timer alike) takes due members round-robin
//! across the groups, one per group per round, from where the last release
//! stopped; `echomq.group-limits` gives each group its own limit under the
//! queue's. Order and bounds are read from what reached pending (a stream's
//! entry IDs carry the release's ms), never from the test's own clock.

mod common;

use std::collections::BTreeMap;
use std::thread::sleep;
use std::time::Duration;

use common::*;
use redis::Value;

const S: &str = "{g}:schedule";
const P: &str = "{g}:pending";

fn add(con: &mut Connection, job: &str, group: Option<&str>) -> i64 {
    let mut cmd = redis::cmd("ECHO.ADD");
    cmd.arg(S).arg(P).arg(job);
    if let Some(group) = group {
        cmd.arg("GROUP").arg(group);
    }
    cmd.query(con)
        .unwrap_or_else(|e| panic!("ECHO.ADD {job}: {e}"))
}

fn config_set(con: &mut Connection, name: &str, value: &str) {
    let _: () = q!(con, "CONFIG", "SET", name, value);
}

/// `per_group` jobs `<g>-<i>` of each of `groups` groups `g00`.., by one
/// pipeline of ECHO.ADD.
fn add_to_groups(con: &mut Connection, groups: usize, per_group: usize) {
    let mut pipe = redis::pipe();
    for g in 0..groups {
        for i in 0..per_group {
            pipe.cmd("ECHO.ADD")
                .arg(S)
                .arg(P)
                .arg(format!("g{g:02}-{i:03}"))
                .arg("GROUP")
                .arg(format!("g{g:02}"))
                .ignore();
        }
    }
    let _: () = pipe.query(con).expect("adds");
}

fn promote_n(con: &mut Connection, n: i64) -> i64 {
    q!(con, "ECHO.PROMOTE", S, P, "LIMIT", n)
}

/// Pending's list, first released first.
fn released(con: &mut Connection) -> Vec<String> {
    let mut list: Vec<String> = q!(con, "LRANGE", P, 0, -1);
    list.reverse();
    list
}

fn keys(con: &mut Connection) -> Vec<String> {
    let mut keys: Vec<String> = q!(con, "KEYS", "*");
    keys.sort();
    keys
}

fn stat(con: &mut Connection, field: &str) -> u64 {
    info_field(con, "echomq", &format!("echomq_{field}"))
        .parse()
        .unwrap_or_else(|e| panic!("echomq_{field}: {e}"))
}

/// Five jobs of A, one each of B and C, two ungrouped: releases of 4, 2
/// and the rest take one member per group per round, in name order (the
/// ungrouped members first), going on from the group the last release
/// stopped at; every group's key, the index, the ring and the cursor are
/// gone once the groups are empty. A module-less replica and the AOF
/// replayed without the module hold what the primary holds, at every step.
#[test]
fn a_release_takes_one_member_per_group_per_round_and_leaves_no_key() {
    let dir = TempDir::new("groups-aof");
    let mut primary = Server::start_in(Options::aof_replay(), &dir.0);
    let replica = start_replica(&primary, Options::without_module());
    let mut p = primary.conn();
    let mut r = replica.conn();
    // A hold makes even the ungrouped runs wait in the schedule.
    let _: i64 = q!(&mut p, "ECHO.HOLD", S, 60_000);
    for i in 1..=5 {
        add(&mut p, &format!("a-{i}"), Some("A"));
    }
    add(&mut p, "c-1", Some("C"));
    add(&mut p, "b-1", Some("B"));
    add(&mut p, "u-1", None);
    add(&mut p, "u-2", None);
    let _: i64 = q!(&mut p, "ECHO.HOLD", S, 0);
    sleep(Duration::from_millis(2));
    assert_eq!(
        keys(&mut p),
        [
            "{g}:schedule",
            "{g}:schedule:echomq-g:A",
            "{g}:schedule:echomq-g:B",
            "{g}:schedule:echomq-g:C",
            "{g}:schedule:echomq-gidx",
            "{g}:schedule:echomq-gnames"
        ]
    );
    assert_eq!(promote_n(&mut p, 4), 4);
    assert_eq!(released(&mut p), ["u-1", "a-1", "b-1", "c-1"]);
    let cursor: String = q!(&mut p, "GET", "{g}:schedule:echomq-gcur");
    assert_eq!(cursor, "C");
    // The rotation goes on after C: the ungrouped, then A.
    assert_eq!(promote_n(&mut p, 2), 2);
    assert_eq!(released(&mut p)[4..], ["u-2", "a-2"]);
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(digest(&mut r), digest(&mut p), "mid-rotation");
    assert_eq!(promote_n(&mut p, 100), 3);
    assert_eq!(released(&mut p)[6..], ["a-3", "a-4", "a-5"]);
    assert_eq!(keys(&mut p), ["{g}:pending"], "no key left");
    assert_eq!(stat(&mut p, "group_releases"), 9);
    wait_replica_synced(&mut p, &mut r);
    let want = digest(&mut p);
    assert_eq!(digest(&mut r), want, "the module-less replica");
    primary.shutdown();
    let mut bare = Options::aof_replay();
    bare.load_module = false;
    let again = Server::start_in(bare, &dir.0);
    let mut a = again.conn();
    assert_eq!(digest(&mut a), want, "the AOF replayed without the module");
}

/// ECHO.SCHEDULE and ECHO.RETRY with GROUP write the group's set as they
/// write the schedule (conditions, dead-lettering, replies), and keep the
/// group in the time index at its earliest fire time.
#[test]
fn schedule_and_retry_write_the_groups_set() {
    let server = Server::start();
    let mut con = server.conn();
    let group_key = "{g}:schedule:echomq-g:t1";
    let fire: i64 = q!(&mut con, "ECHO.SCHEDULE", S, "j", 60_000, "GROUP", "t1");
    let in_group: Option<i64> = q!(&mut con, "ZSCORE", group_key, "j");
    assert_eq!(in_group, Some(fire));
    let in_schedule: Option<i64> = q!(&mut con, "ZSCORE", S, "j");
    assert_eq!(in_schedule, None);
    let indexed: Option<i64> = q!(&mut con, "ZSCORE", "{g}:schedule:echomq-gidx", "t1");
    assert_eq!(indexed, Some(fire));
    // GT keeps the later time; the index keeps the earliest it saw.
    let kept: i64 = q!(&mut con, "ECHO.SCHEDULE", S, "j", 1000, "GT", "GROUP", "t1");
    assert_eq!(kept, fire);
    let sooner: i64 = q!(
        &mut con,
        "ECHO.RETRY",
        S,
        "k",
        "fixed:1000",
        1,
        "GROUP",
        "t1"
    );
    let indexed: Option<i64> = q!(&mut con, "ZSCORE", "{g}:schedule:echomq-gidx", "t1");
    assert_eq!(indexed, Some(sooner));
    let missing: i64 = q!(
        &mut con,
        "ECHO.RETRY",
        S,
        "x",
        "fixed:1",
        1,
        "XX",
        "GROUP",
        "t2"
    );
    assert_eq!(missing, -2);
    let exists: i64 = q!(&mut con, "EXISTS", "{g}:schedule:echomq-g:t2");
    assert_eq!(exists, 0, "XX made no key");
    // Dead-lettering takes the member out of its group; an emptied group
    // leaves the index.
    for job in ["k", "j"] {
        let died: i64 = q!(
            &mut con,
            "ECHO.RETRY",
            S,
            job,
            "fixed:1",
            3,
            "MAXATTEMPTS",
            3,
            "DEAD",
            "{g}:dead",
            "GROUP",
            "t1"
        );
        assert_eq!(died, -1, "{job}");
    }
    assert_eq!(keys(&mut con), ["{g}:dead"]);
    // NX on ECHO.ADD looks in the group.
    let fire: i64 = q!(&mut con, "ECHO.ADD", S, P, "n", "DELAY", 60_000, "GROUP", "t3");
    assert!(fire > 1);
    let again: i64 = q!(&mut con, "ECHO.ADD", S, P, "n", "GROUP", "t3", "NX");
    assert_eq!(again, 0);
}

/// Types are checked before anything is written: a group's set, the index
/// or the ring of another type refuses the write or the release; the
/// config takes fixed rates only.
#[test]
fn wrong_types_and_configs_are_refused_and_nothing_is_written() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "SET", "{g}:schedule:echomq-g:bad", "x");
    let e = err!(&mut con, "ECHO.ADD", S, P, "j", "GROUP", "bad");
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(keys(&mut con), ["{g}:schedule:echomq-g:bad"]);
    add(&mut con, "j", Some("good"));
    let _: () = q!(&mut con, "SET", "{g}:schedule:echomq-gring", "x");
    let e = err!(&mut con, "ECHO.PROMOTE", S, P);
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let e = err!(&mut con, "ECHO.ADD", S, P, "k", "GROUP", "good");
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let left: i64 = q!(&mut con, "ZCARD", "{g}:schedule:echomq-g:good");
    assert_eq!(left, 1);
    let pending: i64 = q!(&mut con, "EXISTS", P);
    assert_eq!(pending, 0);

    for bad in [
        format!("{S} adaptive:10/s 2"),
        format!("{S} 10/s"),
        format!("{S} 10/x 2"),
        format!("{S} 10/s 0"),
        format!("{S} 10/s 2 {S} 5/s 1"),
    ] {
        let e = err!(&mut con, "CONFIG", "SET", "echomq.group-limits", &bad);
        assert!(e.starts_with("ERR CONFIG SET failed"), "{bad}: {e}");
    }
    let value: Vec<String> = q!(&mut con, "CONFIG", "GET", "echomq.group-limits");
    assert_eq!(value, ["echomq.group-limits", ""]);
    let good = format!("{S} 10/s 2");
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.group-limits", &good);
    let value: Vec<String> = q!(&mut con, "CONFIG", "GET", "echomq.group-limits");
    assert_eq!(value, ["echomq.group-limits", good.as_str()]);
    // Listed: even a run due now, without GROUP, waits in the schedule.
    let _: () = q!(&mut con, "DEL", "{g}:schedule:echomq-gring");
    let fire: i64 = q!(&mut con, "ECHO.ADD", "{g}:schedule", "{g}:p2", "u");
    assert!(fire > 1, "scheduled, not pushed: {fire}");
}

/// `ms` of a stream entry ID.
fn id_ms(id: &str) -> i64 {
    id.split('-').next().unwrap().parse().unwrap()
}

fn stream_queue(con: &mut Connection) {
    let _: () = q!(con, "XGROUP", "CREATE", P, "workers", "0", "MKSTREAM");
}

/// A scale of a test's own: `var` when set (a full-size run by hand), else
/// `default` (what `make test` runs).
fn scale(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Group A's 20,000 jobs (`ECHOMQ_GROUPS_BACKLOG`), then ten groups' 100
/// each, under a queue limit of 2000/s through the timer: every job of the
/// ten reaches pending within 2 s of its add (in arrival order it would
/// wait behind A's 10 s), A goes on at what the ten leave, each group in
/// its own order, nothing lost or twice.
#[test]
fn one_groups_backlog_does_not_delay_the_others() {
    let backlog = scale("ECHOMQ_GROUPS_BACKLOG", 20_000);
    let server = Server::start();
    let mut con = server.conn();
    stream_queue(&mut con);
    config_set(
        &mut con,
        "echomq.release-limits",
        &format!("{S} 2000/s 100"),
    );
    let mut pipe = redis::pipe();
    for i in 0..backlog {
        pipe.cmd("ECHO.ADD")
            .arg(S)
            .arg(P)
            .arg(format!("A-{i:06}"))
            .arg("GROUP")
            .arg("A")
            .ignore();
    }
    let _: () = pipe.query(&mut con).expect("A's adds");
    config_set(&mut con, "echomq.auto-promote", &format!("{S} {P}"));
    sleep(Duration::from_millis(500));
    let mut added_ms = BTreeMap::new();
    for g in 0..10 {
        for i in 0..100 {
            let job = format!("G{g}-{i:03}");
            let fire = add(&mut con, &job, Some(&format!("G{g}")));
            added_ms.insert(job, fire);
        }
    }
    wait_until("the ten groups released", Duration::from_secs(20), || {
        let len: usize = q!(&mut con, "XLEN", P);
        (len >= 4000).then_some(()).ok_or(format!("{len} released"))
    });
    config_set(&mut con, "echomq.auto-promote", "");
    let entries = entries(&mut con, P);
    let mut seen = BTreeMap::new();
    let mut last_of_group: BTreeMap<String, String> = BTreeMap::new();
    let mut slowest_ms = 0;
    for (id, job) in &entries {
        assert!(
            seen.insert(job.clone(), id.clone()).is_none(),
            "{job} twice"
        );
        let group = job.split('-').next().unwrap().to_string();
        if let Some(before) = last_of_group.insert(group.clone(), job.clone()) {
            assert!(before < *job, "{group} out of order: {before} then {job}");
        }
        if let Some(&added) = added_ms.get(job) {
            slowest_ms = slowest_ms.max(id_ms(id) - added);
        }
    }
    let ten_done = added_ms.keys().all(|job| seen.contains_key(job));
    println!(
        "{} released, the ten groups' slowest job {slowest_ms} ms after its add",
        entries.len()
    );
    assert!(ten_done, "a job of the ten groups is still waiting");
    assert!(slowest_ms <= 2000, "{slowest_ms} ms");
    let left: i64 = q!(&mut con, "ZCARD", "{g}:schedule:echomq-g:A");
    assert_eq!(
        left as usize + seen.keys().filter(|j| j.starts_with("A-")).count(),
        backlog
    );
}

/// 50 groups at 10/s burst 2 each, through the timer and a client's promote
/// loop at once, for 5 s (`ECHOMQ_GROUPS_RUN_S`), under a queue limit of 1000/s (the group limits bind) and
/// of 300/s (the queue's binds): in every window each group released at
/// most `burst + floor(T * rate)` (T counted with the 25 ms by which an
/// entry's ID may lag its release), near its share, the sum within the cap.
#[test]
fn group_limits_bound_every_group_and_the_queue_caps_the_sum() {
    const SLACK_MS: i64 = 25;
    let run_s = scale("ECHOMQ_GROUPS_RUN_S", 5);
    for (cap, per_group_per_s) in [(1000, 10.0), (300, 6.0)] {
        let server = Server::start();
        let mut con = server.conn();
        stream_queue(&mut con);
        config_set(&mut con, "echomq.group-limits", &format!("{S} 10/s 2"));
        config_set(
            &mut con,
            "echomq.release-limits",
            &format!("{S} {cap}/s 20"),
        );
        // More than a group can release in the run, so each keeps a backlog.
        add_to_groups(&mut con, 50, 20 * run_s + 20);
        config_set(&mut con, "echomq.auto-promote", &format!("{S} {P}"));
        let mut client = server.conn();
        let run = std::time::Instant::now() + Duration::from_secs(run_s as u64);
        while std::time::Instant::now() < run {
            let _: i64 = q!(&mut client, "ECHO.PROMOTE", S, P, "LIMIT", 7);
            sleep(Duration::from_millis(3));
        }
        config_set(&mut con, "echomq.auto-promote", "");
        let entries = entries(&mut con, P);
        let mut by_group: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (id, job) in &entries {
            by_group
                .entry(job[..3].to_string())
                .or_default()
                .push(id_ms(id));
        }
        let (first, last) = (id_ms(&entries[0].0), id_ms(&entries[entries.len() - 1].0));
        let span_s = (last - first) as f64 / 1000.0;
        for (group, times) in &by_group {
            for (i, &a) in times.iter().enumerate() {
                for (k, &b) in times[i..].iter().enumerate() {
                    let (count, bound) = (k as i64 + 1, 2 + (b - a + SLACK_MS) * 10 / 1000);
                    assert!(count <= bound, "{group}: {count} in [{a}, {b}]");
                }
            }
            let rate = times.len() as f64 / span_s;
            assert!(
                (rate - per_group_per_s).abs() <= per_group_per_s * 0.35,
                "cap {cap}: {group} at {rate:.1}/s, its share {per_group_per_s}/s"
            );
        }
        let all: Vec<i64> = entries.iter().map(|(id, _)| id_ms(id)).collect();
        for (i, &a) in all.iter().enumerate().step_by(97) {
            let within = all[i..].iter().take_while(|&&b| b <= a + 1000).count() as i64;
            assert!(
                within <= 20 + (1000 + SLACK_MS) * cap / 1000,
                "cap {cap}: {within} in a second"
            );
        }
        println!(
            "cap {cap}/s: {} released over {span_s:.1} s by {} groups; group_limited {}",
            entries.len(),
            by_group.len(),
            stat(&mut con, "group_limited")
        );
        assert_eq!(by_group.len(), 50);
    }
}

/// 10,000 groups with one due member each, drained by the timer: every
/// member released once, and nothing left but pending (no group key, no
/// index, ring or cursor); the memory the groups took is given back.
#[test]
fn ten_thousand_groups_drain_and_leave_no_key() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "ECHO.HOLD", S, 60_000);
    let used =
        |con: &mut Connection| -> i64 { info_field(con, "memory", "used_memory").parse().unwrap() };
    let before = used(&mut con);
    let mut pipe = redis::pipe();
    for g in 0..10_000 {
        pipe.cmd("ECHO.ADD")
            .arg(S)
            .arg(P)
            .arg(format!("job-{g:05}"))
            .arg("GROUP")
            .arg(format!("tenant-{g:05}"))
            .ignore();
    }
    let _: () = pipe.query(&mut con).expect("adds");
    let dbsize: i64 = q!(&mut con, "DBSIZE");
    assert_eq!(
        dbsize, 10_003,
        "a key per group, the index, the directory and the hold"
    );
    let per_group = (used(&mut con) - before) / 10_000;
    println!("about {per_group} bytes per group of one member");
    let _: i64 = q!(&mut con, "ECHO.HOLD", S, 0);
    config_set(&mut con, "echomq.auto-promote", &format!("{S} {P}"));
    wait_until("drained", Duration::from_secs(30), || {
        let len: i64 = q!(&mut con, "LLEN", P);
        (len == 10_000)
            .then_some(())
            .ok_or(format!("{len} released"))
    });
    config_set(&mut con, "echomq.auto-promote", "");
    assert_eq!(keys(&mut con), [P]);
    let mut all = released(&mut con);
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 10_000, "each once");
}

/// Grouped, group-limited and queue-limited releases through the timer and
/// a client at once: a module-less replica and the AOF replayed without the
/// module hold what the primary holds (compared once the buckets' keys have
/// expired, as a replayed AOF may load them expired).
#[test]
fn limited_groups_replicate_only_what_was_done() {
    let dir = TempDir::new("groups-limited-aof");
    let mut primary = Server::start_in(Options::aof_replay(), &dir.0);
    let replica = start_replica(&primary, Options::without_module());
    let mut p = primary.conn();
    let mut r = replica.conn();
    stream_queue(&mut p);
    config_set(&mut p, "echomq.group-limits", &format!("{S} 50/s 5"));
    config_set(&mut p, "echomq.release-limits", &format!("{S} 400/s 20"));
    add_to_groups(&mut p, 20, 30);
    let mut pipe = redis::pipe();
    for i in 0..30 {
        pipe.cmd("ECHO.ADD")
            .arg(S)
            .arg(P)
            .arg(format!("u-{i:02}"))
            .ignore();
    }
    let _: () = pipe.query(&mut p).expect("adds");
    config_set(&mut p, "echomq.auto-promote", &format!("{S} {P}"));
    for _ in 0..50 {
        let _: i64 = q!(&mut p, "ECHO.PROMOTE", S, P, "LIMIT", 3);
        sleep(Duration::from_millis(10));
    }
    config_set(&mut p, "echomq.auto-promote", "");
    let released: usize = q!(&mut p, "XLEN", P);
    assert!(
        released > 100 && released < 630,
        "limited, not drained: {released}"
    );
    // Reading a key deletes it once expired (and replicates the DEL):
    // KEYS only hides it.
    let mut buckets: Vec<String> = (0..20)
        .map(|g| format!("{S}:echomq-gtat:g{g:02}"))
        .collect();
    buckets.push(format!("{S}:echomq-gtat:"));
    buckets.push(format!("{S}:echomq-limit"));
    wait_until("the buckets' keys expired", Duration::from_secs(10), || {
        let left: i64 = q!(&mut p, "EXISTS", &buckets);
        let hidden: Vec<String> = q!(&mut p, "KEYS", "*echomq-gtat*");
        (left == 0 && hidden.is_empty())
            .then_some(())
            .ok_or(format!("{left} left {hidden:?}"))
    });
    wait_replica_synced(&mut p, &mut r);
    let want = digest(&mut p);
    assert_eq!(digest(&mut r), want, "the module-less replica");
    primary.shutdown();
    let mut bare = Options::aof_replay();
    bare.load_module = false;
    let again = Server::start_in(bare, &dir.0);
    let mut a = again.conn();
    assert_eq!(digest(&mut a), want, "the AOF replayed without the module");
}

/// `echomq.group-limits` of `S` alone: `rate burst`.
fn set_group_limits(con: &mut Connection, rate_burst: &str) {
    config_set(con, "echomq.group-limits", &format!("{S} {rate_burst}"));
}

/// The fields of an ECHO.GROUPS entry, in order.
const GROUP_FIELDS: [&str; 8] = [
    "group",
    "members",
    "due",
    "limit-rate",
    "limit-burst",
    "available",
    "waiting-until-ms",
    "held-until-ms",
];

/// One ECHO.GROUPS entry, RESP2's flat field/value array as a map.
type Entry = BTreeMap<String, Value>;

fn int(entry: &Entry, field: &str) -> Option<i64> {
    match entry.get(field) {
        Some(Value::Int(n)) => Some(*n),
        Some(Value::Nil) => None,
        other => panic!("{field}: {other:?}"),
    }
}

/// A double: RESP2 sends it as a bulk string.
fn double(entry: &Entry, field: &str) -> Option<f64> {
    match entry.get(field) {
        Some(Value::Nil) => None,
        Some(value) => {
            let text: String = redis::from_redis_value(value.clone()).expect("a double");
            Some(text.parse().expect("a double"))
        }
        None => panic!("{field} missing"),
    }
}

fn name_of(entry: &Entry) -> String {
    redis::from_redis_value(entry["group"].clone()).expect("a group name")
}

/// One page of `ECHO.GROUPS schedule CURSOR cursor COUNT count`.
fn groups_page(
    con: &mut Connection,
    schedule: &str,
    cursor: &str,
    count: u64,
) -> (String, Vec<Entry>) {
    let (next, raw): (String, Vec<Vec<Value>>) = q!(
        con,
        "ECHO.GROUPS",
        schedule,
        "CURSOR",
        cursor,
        "COUNT",
        count
    );
    let entries = raw
        .into_iter()
        .map(|flat| {
            let fields: Vec<String> = flat
                .chunks(2)
                .map(|kv| redis::from_redis_value(kv[0].clone()).expect("a field name"))
                .collect();
            assert_eq!(fields, GROUP_FIELDS);
            flat.chunks(2)
                .map(|kv| {
                    let name: String = redis::from_redis_value(kv[0].clone()).unwrap();
                    (name, kv[1].clone())
                })
                .collect()
        })
        .collect();
    (next, entries)
}

/// Every group by name, walked to the end with `count` per page; `between`
/// runs after each page. Panics on a name shown twice.
fn all_groups(
    con: &mut Connection,
    schedule: &str,
    count: u64,
    mut between: impl FnMut(&mut Connection, usize),
) -> (BTreeMap<String, Entry>, usize) {
    let (mut cursor, mut pages) = ("0".to_string(), 0);
    let mut seen = BTreeMap::new();
    loop {
        let (next, entries) = groups_page(con, schedule, &cursor, count);
        pages += 1;
        assert!(entries.len() as u64 <= count, "{} > {count}", entries.len());
        for entry in entries {
            let name = name_of(&entry);
            assert!(seen.insert(name.clone(), entry).is_none(), "{name} twice");
        }
        if next == "0" {
            return (seen, pages);
        }
        cursor = next;
        between(con, pages);
    }
}

/// `ECHO.ADD schedule P job DELAY delay_ms GROUP group` for each
/// `(job, delay_ms, group)`, in one pipeline.
fn fill(
    con: &mut Connection,
    schedule: &str,
    adds: impl IntoIterator<Item = (String, i64, String)>,
) {
    let mut pipe = redis::pipe();
    for (job, delay_ms, group) in adds {
        pipe.cmd("ECHO.ADD")
            .arg(schedule)
            .arg(P)
            .arg(job)
            .arg("DELAY")
            .arg(delay_ms)
            .arg("GROUP")
            .arg(group)
            .ignore();
    }
    let _: () = pipe.query(con).expect("adds");
}

fn add_in(con: &mut Connection, schedule: &str, job: &str, delay_ms: i64, group: &str) {
    let _: i64 = q!(con, "ECHO.ADD", schedule, P, job, "DELAY", delay_ms, "GROUP", group);
}

/// 2,500 groups (each with 1 to 3 members, every fifth with one due) and
/// two ungrouped members, paged 100 at a time: each group once, the
/// ungrouped first (the empty name), with its counts; then again while
/// groups are added and emptied between pages: every group that has members
/// throughout is shown exactly once, and none twice.
#[test]
fn groups_pages_through_every_group_exactly_once() {
    let server = Server::start();
    let mut con = server.conn();
    let mut want = BTreeMap::new();
    let mut adds = Vec::new();
    for i in 0..2500 {
        let group = format!("g{i:04}");
        let members = 1 + i % 3;
        for m in 0..members {
            let delay = if m == 0 && i % 5 == 0 { 0 } else { 3_600_000 };
            adds.push((format!("{group}-{m}"), delay, group.clone()));
        }
        want.insert(group, (members as i64, i64::from(i % 5 == 0)));
    }
    fill(&mut con, S, adds);
    for job in ["u-1", "u-2"] {
        let _: i64 = q!(&mut con, "ECHO.SCHEDULE", S, job, 3_600_000);
    }
    let (first, entries) = groups_page(&mut con, S, "0", 3);
    assert_eq!(entries.len(), 3);
    assert_eq!(name_of(&entries[0]), "", "the ungrouped first");
    assert_eq!(int(&entries[0], "members"), Some(2));
    assert_eq!(int(&entries[0], "due"), Some(0));
    assert_eq!(name_of(&entries[1]), "g0000");
    assert_eq!(first, format!("x{}", hex("g0001")));
    let (seen, pages) = all_groups(&mut con, S, 100, |_, _| {});
    assert_eq!(pages, 26, "2,501 groups 100 a page");
    assert_eq!(seen.len(), 2501);
    for (group, (members, due)) in &want {
        let entry = &seen[group];
        assert_eq!(int(entry, "members"), Some(*members), "{group}");
        assert_eq!(int(entry, "due"), Some(*due), "{group}");
        assert_eq!(int(entry, "limit-burst"), None, "{group}: not limited");
        assert_eq!(int(entry, "available"), None, "{group}");
        assert_eq!(int(entry, "held-until-ms"), Some(0), "{group}");
        let waiting = int(entry, "waiting-until-ms").unwrap();
        assert!(waiting > 1, "{group} waits in the index: {waiting}");
    }
    // A cursor is good for COUNT 1 from the ungrouped on.
    let (next, entries) = groups_page(&mut con, S, "0", 1);
    assert_eq!((next.as_str(), entries.len()), ("x", 1));
    let (_, entries) = groups_page(&mut con, S, "x", 1);
    assert_eq!(name_of(&entries[0]), "g0000");

    // Changes between pages: new groups before and after the cursor, and
    // due groups emptied by promotes.
    const S2: &str = "{g}:s2";
    let later = (0..2500).map(|i| (format!("k{i}"), 3_600_000, format!("g{i:04}")));
    let due = (0..600).map(|i| (format!("t{i}"), 0, format!("g{:04}-tmp", i * 4)));
    fill(&mut con, S2, later.chain(due));
    let (seen, pages) = all_groups(&mut con, S2, 100, |con, page| {
        for k in 0..10 {
            add_in(
                con,
                S2,
                &format!("n{page}-{k}"),
                3_600_000,
                &format!("a-new-{page}-{k}"),
            );
            add_in(
                con,
                S2,
                &format!("m{page}-{k}"),
                3_600_000,
                &format!("g{:04}-new", page * 100 + k * 7),
            );
        }
        let moved: i64 = q!(con, "ECHO.PROMOTE", S2, P, "LIMIT", 40);
        assert!(moved > 0 || page > 15, "page {page}: {moved}");
    });
    for i in 0..2500 {
        let group = format!("g{i:04}");
        let entry = seen
            .get(&group)
            .unwrap_or_else(|| panic!("{group} missing"));
        assert_eq!(int(entry, "members"), Some(1), "{group}");
    }
    assert!(pages >= 25, "{pages} pages");
    for (name, entry) in &seen {
        assert!(int(entry, "members").unwrap() >= 1, "{name} shown empty");
    }
}

fn hex(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Groups A and C at the config's 10/s burst 2, B overridden to 1/s burst
/// 1: over a second and a half of promotes B releases what its override
/// allows, A and C what theirs do; `DEFAULT` gives B the config's limit
/// again; the override is a plain string key, replicated to a module-less
/// replica as SET and DEL (equal digests).
#[test]
fn a_group_limit_override_binds_and_default_restores_the_config() {
    let (_primary, _replica, mut p, mut r) = primary_and_replica(Options::without_module());
    set_group_limits(&mut p, "10/s 2");
    // An override of a group with no members is configuration: allowed.
    let ok: String = q!(&mut p, "ECHO.GROUPLIMIT", S, "B", "1/s", "1");
    assert_eq!(ok, "OK");
    let text: String = q!(&mut p, "GET", "{g}:schedule:echomq-glim:B");
    assert_eq!(text, "1 1 1000 1");
    let ttl: i64 = q!(&mut p, "PTTL", "{g}:schedule:echomq-glim:B");
    assert_eq!(ttl, -1, "configuration does not expire");
    let adds = ["A", "B", "C"]
        .into_iter()
        .flat_map(|g| (0..100).map(move |i| (format!("{g}-{i:03}"), 0, g.to_string())));
    fill(&mut p, S, adds);
    let (_, entries) = groups_page(&mut p, S, "0", 10);
    let by_name: BTreeMap<String, Entry> = entries.into_iter().map(|e| (name_of(&e), e)).collect();
    assert_eq!(int(&by_name["B"], "limit-burst"), Some(1));
    assert_eq!(double(&by_name["B"], "limit-rate"), Some(1.0));
    assert_eq!(int(&by_name["B"], "available"), Some(1));
    assert_eq!(int(&by_name["A"], "limit-burst"), Some(2));
    assert_eq!(double(&by_name["A"], "limit-rate"), Some(10.0));
    assert_eq!(int(&by_name["A"], "due"), Some(100));
    let counts = |p: &mut Connection| -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for job in released(p) {
            *counts.entry(job[..1].to_string()).or_default() += 1;
        }
        counts
    };
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        let _: i64 = q!(&mut p, "ECHO.PROMOTE", S, P);
        sleep(Duration::from_millis(5));
    }
    let elapsed_ms = started.elapsed().as_millis() as usize;
    let before = counts(&mut p);
    println!("in {elapsed_ms} ms under the override: {before:?}");
    assert!(before["B"] <= 1 + (elapsed_ms + 50) / 1000, "B: {before:?}");
    assert!(before["B"] >= 1, "B: {before:?}");
    for group in ["A", "C"] {
        assert!(
            before[group] <= 2 + (elapsed_ms + 50) / 100,
            "{group}: {before:?}"
        );
        assert!(
            before[group] >= 2 + elapsed_ms / 100 - 3,
            "{group}: {before:?}"
        );
    }
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(digest(&mut r), digest(&mut p), "under the override");
    let _: String = q!(&mut p, "ECHO.GROUPLIMIT", S, "B", "default");
    let exists: i64 = q!(&mut p, "EXISTS", "{g}:schedule:echomq-glim:B");
    assert_eq!(exists, 0);
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(1000) {
        let _: i64 = q!(&mut p, "ECHO.PROMOTE", S, P);
        sleep(Duration::from_millis(5));
    }
    let after = counts(&mut p);
    let b_since = after["B"] - before["B"];
    let a_since = after["A"] - before["A"];
    println!("in the next second, the config's limit again: B {b_since}, A {a_since}");
    assert!((7..=13).contains(&b_since), "B at 10/s: {b_since}");
    assert!(b_since + 3 >= a_since, "B as A: {b_since}, {a_since}");
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(digest(&mut r), digest(&mut p), "after DEFAULT");
}

/// `ECHO.HOLD schedule ms GROUP A`: nothing of A leaves before the hold's
/// end while B is released meanwhile, then A leaves at once; ECHO.GROUPS
/// shows the hold; `ms = 0` lifts a hold at once; a module-less replica
/// holds the same keys.
#[test]
fn a_group_hold_stops_that_group_only_and_ends_on_time() {
    let (_primary, _replica, mut p, mut r) = primary_and_replica(Options::without_module());
    stream_queue(&mut p);
    for i in 0..20 {
        add(&mut p, &format!("A-{i:02}"), Some("A"));
        add(&mut p, &format!("B-{i:02}"), Some("B"));
    }
    let now = server_time_ms(&mut p);
    let until: i64 = q!(&mut p, "ECHO.HOLD", S, 400, "GROUP", "A");
    assert!(
        until >= now + 400 && until <= now + 450,
        "{until} from {now}"
    );
    // A shorter hold keeps the longer one.
    let kept: i64 = q!(&mut p, "ECHO.HOLD", S, 10, "GROUP", "A");
    assert_eq!(kept, until);
    let (_, entries) = groups_page(&mut p, S, "0", 10);
    assert_eq!(name_of(&entries[0]), "A");
    assert_eq!(int(&entries[0], "held-until-ms"), Some(until));
    assert_eq!(int(&entries[1], "held-until-ms"), Some(0));
    // The queue is not held: ECHO.LIMITS says so.
    let moved: i64 = q!(&mut p, "ECHO.PROMOTE", S, P, "LIMIT", 5);
    assert_eq!(moved, 5);
    let moved: i64 = q!(&mut p, "ECHO.PROMOTE", S, P);
    assert_eq!(moved, 15, "B's rest");
    let (_, entries) = groups_page(&mut p, S, "0", 10);
    assert_eq!(entries.len(), 1);
    assert_eq!(
        int(&entries[0], "waiting-until-ms"),
        Some(until),
        "A waits for its hold"
    );
    assert_eq!(int(&entries[0], "due"), Some(20));
    while server_time_ms(&mut p) < until {
        let moved: i64 = q!(&mut p, "ECHO.PROMOTE", S, P);
        assert_eq!(moved, 0, "A is held");
        sleep(Duration::from_millis(10));
    }
    let mut moved = 0;
    while moved == 0 {
        moved = q!(&mut p, "ECHO.PROMOTE", S, P);
    }
    assert_eq!(moved, 20, "A leaves when its hold ends");
    let entries = common::entries(&mut p, P);
    assert!(entries[..20].iter().all(|(_, job)| job.starts_with('B')));
    let first_a = id_ms(&entries[20].0);
    assert!(
        first_a >= until && first_a <= until + 100,
        "{first_a} for {until}"
    );
    // A hold lifted with 0 releases at once.
    add(&mut p, "A-late", Some("A"));
    let held: i64 = q!(&mut p, "ECHO.HOLD", S, 60_000, "GROUP", "A");
    assert!(held > until);
    assert_eq!(promote_n(&mut p, 100), 0);
    let lifted: i64 = q!(&mut p, "ECHO.HOLD", S, 0, "GROUP", "A");
    assert_eq!(lifted, 0);
    assert_eq!(promote_n(&mut p, 100), 1);
    // A hold of a group with no members yet: allowed, it binds when they come.
    let _: i64 = q!(&mut p, "ECHO.HOLD", S, 60_000, "GROUP", "later");
    add(&mut p, "L-1", Some("later"));
    assert_eq!(promote_n(&mut p, 100), 0);
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(digest(&mut r), digest(&mut p));
    let _: i64 = q!(&mut p, "ECHO.HOLD", S, 0, "GROUP", "later");
    assert_eq!(promote_n(&mut p, 100), 1);
    assert_eq!(keys(&mut p), [P], "no key left");
}

/// Keys of a group of another type refuse the new commands before they
/// write anything; an override key holding what ECHO.GROUPLIMIT never
/// writes is no override.
#[test]
fn the_group_commands_check_types_before_writing() {
    let server = Server::start();
    let mut con = server.conn();
    add(&mut con, "j", Some("A"));
    let _: () = q!(&mut con, "ZADD", "{g}:schedule:echomq-glim:A", 1, "x");
    let _: () = q!(&mut con, "ZADD", "{g}:schedule:echomq-ghold:A", 1, "x");
    let before = digest(&mut con);
    for call in [
        vec!["ECHO.GROUPLIMIT", S, "A", "1/s", "1"],
        vec!["ECHO.GROUPLIMIT", S, "A", "DEFAULT"],
        vec!["ECHO.HOLD", S, "100", "GROUP", "A"],
        vec!["ECHO.HOLD", S, "0", "GROUP", "A"],
    ] {
        let e = err!(&mut con, call[0], &call[1..]);
        assert!(e.starts_with("WRONGTYPE"), "{call:?}: {e}");
        assert_eq!(digest(&mut con), before, "{call:?} wrote");
    }
    let _: () = q!(
        &mut con,
        "DEL",
        "{g}:schedule:echomq-glim:A",
        "{g}:schedule:echomq-ghold:A"
    );
    let _: () = q!(&mut con, "SET", "{g}:schedule:echomq-gnames", "x");
    let before = digest(&mut con);
    for call in [
        vec!["ECHO.GROUPLIMIT", S, "A", "1/s", "1"],
        vec!["ECHO.HOLD", S, "100", "GROUP", "A"],
        vec!["ECHO.GROUPS", S],
        vec!["ECHO.ADD", S, P, "k", "GROUP", "B"],
        vec!["ECHO.PROMOTE", S, P],
    ] {
        let e = err!(&mut con, call[0], &call[1..]);
        assert!(e.starts_with("WRONGTYPE"), "{call:?}: {e}");
        assert_eq!(digest(&mut con), before, "{call:?} wrote");
    }
    // The directory deleted by hand: the next write to a group puts it back.
    let _: () = q!(&mut con, "DEL", "{g}:schedule:echomq-gnames");
    add(&mut con, "j2", Some("A"));
    set_group_limits(&mut con, "10/s 2");
    let _: () = q!(&mut con, "SET", "{g}:schedule:echomq-glim:A", "junk");
    let (_, entries) = groups_page(&mut con, S, "0", 10);
    assert_eq!(int(&entries[0], "limit-burst"), Some(2), "the config's");
}

/// RESP3: each group is a map, its fields in order, a double a double.
#[test]
fn groups_are_maps_in_resp3() {
    let server = Server::start();
    let mut con = server.conn();
    set_group_limits(&mut con, "4/s 3");
    add_in(&mut con, S, "j", 60_000, "A");
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
    let mut resp3 = client.get_connection().unwrap();
    let reply: Value = q!(&mut resp3, "ECHO.GROUPS", S);
    let Value::Array(parts) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(parts[0], Value::BulkString(b"0".to_vec()));
    let Value::Array(groups) = &parts[1] else {
        panic!("{parts:?}")
    };
    let Value::Map(fields) = &groups[0] else {
        panic!("{groups:?}")
    };
    let names: Vec<String> = fields
        .iter()
        .map(|(k, _)| redis::from_redis_value(k.clone()).unwrap())
        .collect();
    assert_eq!(names, GROUP_FIELDS);
    assert_eq!(fields[0].1, Value::BulkString(b"A".to_vec()));
    assert_eq!(fields[3].1, Value::Double(4.0));
    assert_eq!(fields[5].1, Value::Int(3));
}
