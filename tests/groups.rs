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
            "{g}:schedule:echomq-gidx"
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
    let died: i64 = q!(
        &mut con,
        "ECHO.RETRY",
        S,
        "k",
        "fixed:1",
        3,
        "MAXATTEMPTS",
        3,
        "DEAD",
        "{g}:dead",
        "GROUP",
        "t1"
    );
    assert_eq!(died, -1);
    let died: i64 = q!(
        &mut con,
        "ECHO.RETRY",
        S,
        "j",
        "fixed:1",
        3,
        "MAXATTEMPTS",
        3,
        "DEAD",
        "{g}:dead",
        "GROUP",
        "t1"
    );
    assert_eq!(died, -1);
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

/// Group A's 20,000 jobs, then ten groups' 100 each, under a queue limit
/// of 2000/s through the timer: every job of the ten reaches pending within
/// 2 s of its add (in arrival order it would wait behind A's 10 s), A goes
/// on at what the ten leave, each group in its own order, nothing lost or
/// twice.
#[test]
fn one_groups_backlog_does_not_delay_the_others() {
    let server = Server::start();
    let mut con = server.conn();
    stream_queue(&mut con);
    config_set(
        &mut con,
        "echomq.release-limits",
        &format!("{S} 2000/s 100"),
    );
    let mut pipe = redis::pipe();
    for i in 0..20_000 {
        pipe.cmd("ECHO.ADD")
            .arg(S)
            .arg(P)
            .arg(format!("A-{i:05}"))
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
        20_000
    );
}

/// 50 groups at 10/s burst 2 each, through the timer and a client's promote
/// loop at once, under a queue limit of 1000/s (the group limits bind) and
/// of 300/s (the queue's binds): in every window each group released at
/// most `burst + floor(T * rate)` (T counted with the 25 ms by which an
/// entry's ID may lag its release), near its share, the sum within the cap.
#[test]
fn group_limits_bound_every_group_and_the_queue_caps_the_sum() {
    const SLACK_MS: i64 = 25;
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
        add_to_groups(&mut con, 50, 100);
        config_set(&mut con, "echomq.auto-promote", &format!("{S} {P}"));
        let mut client = server.conn();
        let run = std::time::Instant::now() + Duration::from_secs(5);
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
    assert_eq!(dbsize, 10_002, "a key per group, the index and the hold");
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
