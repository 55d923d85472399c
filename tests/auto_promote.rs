//! Promotion inside the server: the `echomq.auto-promote*`
//! configs and the timer, against real servers. No test here calls
//! ECHO.PROMOTE. Timing bounds are deliberately loose (a shared 2-core
//! machine); `make bench` measures the latencies.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, sleep};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;

const SCHEDULE: &str = "{q}:schedule";
const PENDING: &str = "{q}:pending";

fn stat(con: &mut Connection, field: &str) -> u64 {
    let value = info_field(con, "echomq", &format!("echomq_{field}"));
    value
        .parse()
        .unwrap_or_else(|_| panic!("INFO echomq has no echomq_{field}: {value:?}"))
}

fn configure(con: &mut Connection, pairs: &str) {
    let _: () = q!(con, "CONFIG", "SET", "echomq.auto-promote", pairs);
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A server promoting `{q}:schedule` into `{q}:pending` from its start.
fn auto_server(extra: Options) -> Server {
    Server::start_with(extra.arg("echomq.auto-promote", &format!("{SCHEDULE} {PENDING}")))
}

/// Retries `jobs` in one MULTI (one `now` on Valkey, one atomic step on
/// both servers, so the timer never sees half of them): the fire times.
fn retry_all(con: &mut Connection, schedule: &str, jobs: &[String], policy: &str) -> Vec<i64> {
    let mut multi = redis::pipe();
    multi.atomic();
    for job in jobs {
        multi.add_command(cmd!("ECHO.RETRY", schedule, job, policy, 1));
    }
    multi.query(con).expect("MULTI of retries")
}

/// Pops `n` jobs with BRPOP on its own connection: (job, wall ms at receipt).
fn consume(server: &Server, key: &str, n: usize) -> thread::JoinHandle<Vec<(String, i64)>> {
    let mut con = server.conn();
    let key = key.to_string();
    thread::spawn(move || {
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            let popped: Option<(String, String)> = q!(&mut con, "BRPOP", &key, 30);
            let (_, job) = popped.expect("BRPOP timed out: the timer stopped promoting");
            got.push((job, wall_ms()));
        }
        got
    })
}

fn assert_pong(con: &mut Connection) {
    let pong: String = q!(con, "PING");
    assert_eq!(pong, "PONG");
}

fn no_promote_calls(con: &mut Connection) {
    let stats: String = q!(con, "INFO", "commandstats");
    assert!(
        !stats.to_lowercase().contains("cmdstat_echo.promote"),
        "a client called ECHO.PROMOTE: {stats}"
    );
    assert_eq!(stat(con, "promote_calls"), 0);
    assert_eq!(stat(con, "promoted"), 0);
}

/// Jittered jobs reach pending with no client promoting, in
/// fire-time order from the right, blocked consumers woken, counters exact.
#[test]
fn jittered_jobs_reach_pending_without_a_poller_in_fire_time_order() {
    let server = auto_server(Options::default());
    let mut con = server.conn();
    let consumer = consume(&server, PENDING, 200);
    wait_blocked_clients(&mut con, 1);

    let jobs: Vec<String> = (0..200).map(|i| format!("job-{i:03}")).collect();
    let fires = retry_all(&mut con, SCHEDULE, &jobs, "jitter:fixed:1000");
    let mut expected: Vec<(i64, &String)> = fires.iter().copied().zip(&jobs).collect();
    // The set's own order: by score, ties by member bytes.
    expected.sort();
    let spread: BTreeSet<i64> = fires.iter().copied().collect();
    assert!(spread.len() > 100, "the jitter spread the cohort");

    let got = consumer.join().expect("consumer");
    let order: Vec<&String> = got.iter().map(|(job, _)| job).collect();
    let want: Vec<&String> = expected.iter().map(|&(_, job)| job).collect();
    assert_eq!(order, want, "consumed in fire-time order");
    for ((job, at_ms), (fire_ms, _)) in got.iter().zip(&expected) {
        assert!(
            at_ms >= fire_ms,
            "{job} popped at {at_ms} before its fire time {fire_ms}"
        );
    }

    let exists: i64 = q!(&mut con, "EXISTS", SCHEDULE, PENDING);
    assert_eq!(exists, 0, "both keys emptied");
    no_promote_calls(&mut con);
    assert_eq!(stat(&mut con, "auto_promoted"), 200);
    assert_eq!(stat(&mut con, "auto_promote_errors"), 0);
    assert!(stat(&mut con, "auto_promote_ticks") > 10);
    let lag_ms_max = stat(&mut con, "auto_promote_lag_ms_max");
    assert!(lag_ms_max < 1000, "lag_ms_max {lag_ms_max}");
}

/// Fire time to BRPOP stays near the interval on an otherwise idle server
/// (loosely here; BENCHMARKS.md has the distribution).
#[test]
fn fire_time_to_brpop_lag_stays_near_the_interval() {
    let server = auto_server(Options::default());
    let mut con = server.conn();
    let kv: Vec<String> = q!(&mut con, "CONFIG", "GET", "echomq.auto-promote-interval-ms");
    let interval_ms: i64 = kv[1].parse().expect("an integer");
    assert_eq!(interval_ms, 10, "the default interval");
    let consumer = consume(&server, PENDING, 150);
    wait_blocked_clients(&mut con, 1);
    let jobs: Vec<String> = (0..150).map(|i| format!("lag-{i}")).collect();
    let mut fires = retry_all(&mut con, SCHEDULE, &jobs, "jitter:fixed:1500");
    fires.sort();
    let got = consumer.join().expect("consumer");
    let mut lags_ms: Vec<i64> = got
        .iter()
        .zip(&fires)
        .map(|((_, at_ms), fire_ms)| at_ms - fire_ms)
        .collect();
    lags_ms.sort();
    let median_ms = lags_ms[lags_ms.len() / 2];
    eprintln!(
        "lag ms: min {} median {median_ms} p90 {} max {}",
        lags_ms[0],
        lags_ms[lags_ms.len() * 9 / 10],
        lags_ms[lags_ms.len() - 1]
    );
    assert!(lags_ms[0] >= 0, "a job was popped before its fire time");
    // The contract is interval + 2 ms on an idle server; a shared machine
    // gets a loose bound here.
    assert!(median_ms <= interval_ms + 40, "median lag {median_ms} ms");
}

/// The timer's writes look like ZREM + LPUSH to everyone: keyspace events,
/// WATCH invalidation.
#[test]
fn the_timer_sends_the_events_and_touches_the_keys_a_promote_would() {
    let server = auto_server(Options::default().arg("notify-keyspace-events", "KEA"));
    let mut con = server.conn();
    let mut sub_con = server.conn();
    let mut pubsub = sub_con.as_pubsub();
    pubsub
        .psubscribe("__keyspace@0__:{q}:*")
        .expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");

    let mut watcher = server.conn();
    let _: () = q!(&mut watcher, "WATCH", PENDING);
    retry(&mut con, SCHEDULE, "job", "fixed:100", 1);
    let mut events = Vec::new();
    while events.len() < 4 {
        let msg = pubsub.get_message().expect("keyspace event");
        let key = msg.get_channel_name().trim_start_matches("__keyspace@0__:");
        let event: String = msg.get_payload().expect("payload");
        events.push(format!("{key} {event}"));
    }
    assert_eq!(
        events,
        [
            "{q}:schedule zadd",
            "{q}:schedule zrem",
            "{q}:schedule del",
            "{q}:pending lpush"
        ]
    );
    let exec: Option<Vec<String>> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("x")
        .arg(1)
        .query(&mut watcher)
        .expect("EXEC");
    assert_eq!(exec, None, "WATCH on pending failed the transaction");
}

/// A replica without the module and one with the module and the
/// same config end with the primary's digest; the second never moves a job.
#[test]
fn replicas_with_and_without_the_module_end_with_the_primarys_digest() {
    let primary = auto_server(Options::default());
    let config = format!("{SCHEDULE} {PENDING}");
    let bare = start_replica(&primary, Options::without_module());
    let with_module = start_replica(
        &primary,
        Options::default().arg("echomq.auto-promote", &config),
    );
    let mut p = primary.conn();
    let mut r_bare = bare.conn();
    let mut r_module = with_module.conn();

    let jobs: Vec<String> = (0..300).map(|i| format!("job-{i}")).collect();
    for chunk in jobs.chunks(30) {
        retry_all(&mut p, SCHEDULE, chunk, "jitter:fixed:300");
        retry(
            &mut p,
            SCHEDULE,
            format!("far-{}", chunk[0]),
            "fixed:3600000",
            1,
        );
        sleep(Duration::from_millis(20));
    }
    wait_until("all due jobs promoted", Duration::from_secs(20), || {
        let len: i64 = q!(&mut p, "LLEN", PENDING);
        (len == 300).then_some(()).ok_or(format!("{len} pending"))
    });
    let _: String = q!(&mut p, "RPOP", PENDING);
    wait_replica_synced(&mut p, &mut r_bare);
    wait_replica_synced(&mut p, &mut r_module);
    let want = digest(&mut p);
    assert_eq!(digest(&mut r_bare), want, "replica without the module");
    assert_eq!(digest(&mut r_module), want, "replica with the module");

    assert_eq!(stat(&mut p, "auto_promoted"), 300);
    assert_eq!(
        stat(&mut r_module, "auto_promoted"),
        0,
        "the replica moved jobs"
    );
    assert_eq!(stat(&mut r_module, "auto_promote_ticks"), 0);
    for r in [&mut r_bare, &mut r_module] {
        let stats: String = q!(r, "INFO", "commandstats");
        assert!(stats.contains("cmdstat_zrem:"), "{stats}");
        assert!(stats.contains("cmdstat_lpush:"), "{stats}");
        assert!(
            stats.contains("cmdstat_multi:"),
            "one MULTI/EXEC per move: {stats}"
        );
        assert!(!stats.to_lowercase().contains("cmdstat_echo."), "{stats}");
    }
    let config_on_replica: Vec<String> = q!(&mut r_module, "CONFIG", "GET", "echomq.auto-promote");
    assert_eq!(config_on_replica[1], config);
}

/// The AOF a promoting primary writes replays to the same
/// data with and without the module.
#[test]
fn aof_replay_with_and_without_the_module_reproduces_the_primary() {
    let dir = TempDir::new("auto-aof");
    let aof = Options::aof_replay();
    let with_config = aof
        .clone()
        .arg("echomq.auto-promote", &format!("{SCHEDULE} {PENDING}"));
    let mut server = Server::start_in(with_config.clone(), &dir.0);
    let mut con = server.conn();
    let jobs: Vec<String> = (0..200).map(|i| format!("job-{i}")).collect();
    for chunk in jobs.chunks(40) {
        retry_all(&mut con, SCHEDULE, chunk, "jitter:fixed:200");
        sleep(Duration::from_millis(30));
    }
    retry(&mut con, SCHEDULE, "far", "fixed:3600000", 1);
    wait_until("all due jobs promoted", Duration::from_secs(20), || {
        let len: i64 = q!(&mut con, "LLEN", PENDING);
        (len == 200).then_some(()).ok_or(format!("{len} pending"))
    });
    let want = digest(&mut con);
    server.shutdown();

    let mut aof_text = Vec::new();
    for entry in std::fs::read_dir(dir.0.join("appendonlydir")).unwrap() {
        aof_text.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    let aof_text = String::from_utf8_lossy(&aof_text).to_lowercase();
    for word in ["multi", "zrem", "lpush", "exec"] {
        assert!(aof_text.contains(word), "the AOF has no {word}");
    }
    assert!(!aof_text.contains("echo.promote"));

    for (what, options) in [
        ("with the module and the config", with_config),
        ("without the module", {
            let mut bare = aof.clone();
            bare.load_module = false;
            bare
        }),
    ] {
        let mut server = Server::start_in(options, &dir.0);
        assert_eq!(digest(&mut server.conn()), want, "replayed {what}");
        server.shutdown();
    }
}

/// Nothing moves while writes are paused (a replica attached, as
/// in a failover); everything due moves after.
#[test]
fn nothing_moves_while_writes_are_paused_and_all_moves_after() {
    let primary = auto_server(Options::default());
    let replica = start_replica(&primary, Options::without_module());
    let mut con = primary.conn();
    let jobs: Vec<String> = (0..50).map(|i| format!("job-{i}")).collect();
    // One fixed delay, no jitter: a jittered delay near 0 can fall due
    // before the PAUSE arrives, and that move is no fault.
    retry_all(&mut con, SCHEDULE, &jobs, "fixed:300");
    let _: () = q!(&mut con, "CLIENT", "PAUSE", 1500, "WRITE");
    let paused_at = Instant::now();
    let at_pause: (i64, i64) = (
        q!(&mut con, "ZCARD", SCHEDULE),
        q!(&mut con, "LLEN", PENDING),
    );
    assert!(
        at_pause.0 > 0,
        "every job moved before the pause: nothing to check"
    );
    sleep(Duration::from_millis(900));
    let card: i64 = q!(&mut con, "ZCARD", SCHEDULE);
    let len: i64 = q!(&mut con, "LLEN", PENDING);
    assert!(
        paused_at.elapsed() < Duration::from_millis(1400),
        "the check ran too late to mean anything"
    );
    assert_eq!((card, len), at_pause, "moved during the pause");
    wait_until(
        "all promoted after the pause",
        Duration::from_secs(10),
        || {
            let len: i64 = q!(&mut con, "LLEN", PENDING);
            (len == 50).then_some(()).ok_or(format!("{len} pending"))
        },
    );
    assert_pong(&mut con);
    let mut r = replica.conn();
    wait_replica_synced(&mut con, &mut r);
    assert_eq!(digest(&mut r), digest(&mut con));

    // CLIENT PAUSE ALL too.
    retry(&mut con, SCHEDULE, "late", "fixed:100", 1);
    let _: () = q!(&mut con, "CLIENT", "PAUSE", 1000, "ALL");
    sleep(Duration::from_millis(1300));
    let mut fresh = primary.conn();
    wait_until("promoted after PAUSE ALL", Duration::from_secs(10), || {
        let len: i64 = q!(&mut fresh, "LLEN", PENDING);
        (len == 51).then_some(()).ok_or(format!("{len} pending"))
    });
}

/// The pause of a FAILOVER (writes paused until
/// the replica caught up) while jobs keep falling due. Nothing crashes, the
/// old primary stops and the new one, with the same config, takes over;
/// every job ends in pending once and both servers hold the same data.
#[test]
fn a_failover_hands_promotion_to_the_new_primary() {
    let config = format!("{SCHEDULE} {PENDING}");
    let primary = auto_server(Options::default());
    let replica = start_replica(
        &primary,
        Options::default().arg("echomq.auto-promote", &config),
    );
    let mut p = primary.conn();
    let mut r = replica.conn();
    let now_ms = server_time_ms(&mut p);
    // 300 jobs, one due every 10 ms: promotion is under way during the failover.
    let mut zadd = redis::cmd("ZADD");
    zadd.arg(SCHEDULE);
    for i in 0..300i64 {
        zadd.arg(now_ms + i * 10).arg(format!("job-{i:03}"));
    }
    let _: i64 = run(&mut p, &zadd);
    wait_until("the primary promotes", Duration::from_secs(10), || {
        let len: i64 = q!(&mut p, "LLEN", PENDING);
        (len >= 20).then_some(()).ok_or(format!("{len} pending"))
    });
    let _: () = q!(&mut p, "FAILOVER");
    wait_until("the replica took over", Duration::from_secs(20), || {
        let role = info_field(&mut r, "replication", "role");
        (role == "master").then_some(()).ok_or(role)
    });
    wait_until(
        "the new primary promoted the rest",
        Duration::from_secs(20),
        || {
            let card: i64 = q!(&mut r, "ZCARD", SCHEDULE);
            (card == 0).then_some(()).ok_or(format!("{card} left"))
        },
    );
    let got: Vec<String> = q!(&mut r, "LRANGE", PENDING, 0, -1);
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!((got.len(), unique.len()), (300, 300), "lost or duplicated");
    assert!(
        stat(&mut r, "auto_promoted") > 0,
        "the new primary moved none"
    );
    let moved_by_old = stat(&mut p, "auto_promoted");
    assert!(moved_by_old >= 20);
    assert_eq!(
        moved_by_old + stat(&mut r, "auto_promoted"),
        300,
        "each job moved once, by one of the two"
    );
    assert_pong(&mut p);
    assert_eq!(info_field(&mut p, "replication", "role"), "slave");
    wait_replica_synced(&mut r, &mut p);
    assert_eq!(digest(&mut p), digest(&mut r));
}

/// CONFIG SET refusals keep the old value.
#[test]
fn config_set_refuses_bad_values_and_keeps_the_old_one() {
    let server = Server::start();
    let mut con = server.conn();
    let all: Vec<String> = q!(&mut con, "CONFIG", "GET", "echomq.*");
    let mut all: Vec<(String, String)> = all
        .chunks(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect();
    all.sort();
    let defaults = [
        ("echomq.adaptive-failure-percent", "10"),
        ("echomq.adaptive-window-ms", "200"),
        ("echomq.auto-promote", ""),
        ("echomq.auto-promote-interval-ms", "10"),
        ("echomq.auto-promote-limit", "1000"),
        ("echomq.group-limits", ""),
        ("echomq.release-limits", ""),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    assert_eq!(all, defaults);

    configure(&mut con, "a:s a:p");
    let get = |con: &mut Connection, name: &str| -> String {
        let kv: Vec<String> = q!(con, "CONFIG", "GET", name);
        kv[1].clone()
    };
    for (bad, why) in [
        ("a:s", "odd number"),
        ("a:s a:p b:s", "odd number"),
        ("x x", "different keys"),
        ("a:s a:p a:s b:p", "named twice"),
    ] {
        let e = err!(&mut con, "CONFIG", "SET", "echomq.auto-promote", bad);
        assert!(e.starts_with("ERR"), "{e}");
        assert!(e.contains(why), "{bad:?}: {e}");
        assert_eq!(get(&mut con, "echomq.auto-promote"), "a:s a:p");
    }
    for (name, bad) in [
        ("echomq.auto-promote-interval-ms", "0"),
        ("echomq.auto-promote-interval-ms", "60001"),
        ("echomq.auto-promote-interval-ms", "ten"),
        ("echomq.auto-promote-limit", "0"),
        ("echomq.auto-promote-limit", "1000001"),
        ("echomq.auto-promote-limit", "-5"),
    ] {
        let before = get(&mut con, name);
        let e = err!(&mut con, "CONFIG", "SET", name, bad);
        assert!(e.starts_with("ERR"), "{e}");
        assert_eq!(get(&mut con, name), before, "{name} {bad}");
    }
    // A refused value in a multi-config CONFIG SET keeps every old value.
    let e = err!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote-limit",
        "7",
        "echomq.auto-promote",
        "y y"
    );
    assert!(e.starts_with("ERR"), "{e}");
    assert_eq!(get(&mut con, "echomq.auto-promote-limit"), "1000");
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote-interval-ms",
        60000,
        "echomq.auto-promote-limit",
        1000000
    );
    assert_eq!(get(&mut con, "echomq.auto-promote-interval-ms"), "60000");
    assert_eq!(get(&mut con, "echomq.auto-promote-limit"), "1000000");
}

/// An empty config stops every move; the limit is per pair and
/// per tick.
#[test]
fn an_empty_config_stops_all_moves() {
    let server = auto_server(Options::default());
    let mut con = server.conn();
    retry(&mut con, SCHEDULE, "first", "fixed:0", 1);
    wait_until("first promoted", Duration::from_secs(10), || {
        let len: i64 = q!(&mut con, "LLEN", PENDING);
        (len == 1).then_some(()).ok_or(format!("{len} pending"))
    });
    configure(&mut con, "");
    let ticks = stat(&mut con, "auto_promote_ticks");
    retry(&mut con, SCHEDULE, "second", "fixed:0", 1);
    sleep(Duration::from_millis(300));
    let card: i64 = q!(&mut con, "ZCARD", SCHEDULE);
    assert_eq!(card, 1, "moved with an empty config");
    assert_eq!(stat(&mut con, "auto_promote_ticks"), ticks, "ticks went on");
    // Set again, it serves again.
    configure(&mut con, &format!("{SCHEDULE} {PENDING}"));
    wait_until("second promoted", Duration::from_secs(10), || {
        let len: i64 = q!(&mut con, "LLEN", PENDING);
        (len == 2).then_some(()).ok_or(format!("{len} pending"))
    });
}

/// A wrong-typed pair is skipped, counted and logged at most
/// once a minute; the other pairs keep being served.
#[test]
fn a_wrong_typed_pair_is_skipped_counted_logged_once_and_others_still_served() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "SET", "{bad}:schedule", "a string");
    let _: () = q!(&mut con, "ZADD", "{bad2}:schedule", 1, "stuck");
    let _: () = q!(&mut con, "SET", "{bad2}:pending", "a string");
    configure(
        &mut con,
        &format!("{{bad}}:schedule {{bad}}:pending {{bad2}}:schedule {{bad2}}:pending {SCHEDULE} {PENDING}"),
    );
    for i in 0..5 {
        retry(&mut con, SCHEDULE, format!("job-{i}"), "fixed:0", 1);
        sleep(Duration::from_millis(100));
    }
    wait_until("the good pair served", Duration::from_secs(10), || {
        let len: i64 = q!(&mut con, "LLEN", PENDING);
        (len == 5).then_some(()).ok_or(format!("{len} pending"))
    });
    sleep(Duration::from_millis(500));
    let errors = stat(&mut con, "auto_promote_errors");
    assert!(
        errors >= 10,
        "errors counted once per pair and tick: {errors}"
    );
    // Nothing moved out of, or into, a wrong-typed pair.
    let stuck: i64 = q!(&mut con, "ZCARD", "{bad2}:schedule");
    assert_eq!(stuck, 1);
    let bad: String = q!(&mut con, "GET", "{bad2}:pending");
    assert_eq!(bad, "a string");
    let log = server.log();
    for pair in [
        "'{bad}:schedule' '{bad}:pending'",
        "'{bad2}:schedule' '{bad2}:pending'",
    ] {
        let lines = log.lines().filter(|l| l.contains(pair)).count();
        assert_eq!(lines, 1, "{pair} logged {lines} times:\n{log}");
    }
    assert!(log.contains("WRONGTYPE"), "{log}");
    assert_eq!(stat(&mut con, "auto_promoted"), 5);
    assert_eq!(stat(&mut con, "errors"), 0, "not a command error");
}

/// Schedules `n` jobs (a multiple of 1000) all due already: one per ms up
/// to the server's now, in ZADDs of 1000.
fn fill_due(con: &mut Connection, n: usize) {
    let now_ms = server_time_ms(con);
    let mut fill = redis::pipe();
    for chunk in 0..n / 1000 {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(SCHEDULE);
        for i in chunk * 1000..(chunk + 1) * 1000 {
            zadd.arg(now_ms - n as i64 + i as i64)
                .arg(format!("job-{i:06}"));
        }
        fill.add_command(zadd).ignore();
    }
    let _: () = fill.query(con).expect("fill");
}

/// A backlog of 100k due jobs drains in chained full-batch
/// ticks (the 200 ms interval would take 20 s), while another client's PING
/// is answered between them.
#[test]
fn a_100k_backlog_drains_at_full_speed_while_ping_stays_fast() {
    const N: usize = 100_000;
    let server = Server::start();
    let mut con = server.conn();
    fill_due(&mut con, N);
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote-interval-ms",
        200,
        "echomq.auto-promote-limit",
        1000
    );

    let stop = Arc::new(AtomicBool::new(false));
    let pinger = {
        let stop = Arc::clone(&stop);
        let mut con = server.conn();
        thread::spawn(move || {
            let mut worst = Duration::ZERO;
            let mut rtts = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let _: String = q!(&mut con, "PING");
                let rtt = sent.elapsed();
                worst = worst.max(rtt);
                rtts.push(rtt);
                sleep(Duration::from_micros(200));
            }
            rtts.sort();
            (
                worst,
                rtts.get(rtts.len() / 2).copied().unwrap_or_default(),
                rtts.len(),
            )
        })
    };
    sleep(Duration::from_millis(50));
    let started = Instant::now();
    configure(&mut con, &format!("{SCHEDULE} {PENDING}"));
    wait_until("drained", Duration::from_secs(30), || {
        let card: i64 = q!(&mut con, "ZCARD", SCHEDULE);
        (card == 0).then_some(()).ok_or(format!("{card} left"))
    });
    let drained_in = started.elapsed();
    sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let (worst_ping, median_ping, pings) = pinger.join().expect("pinger");
    eprintln!(
        "100k drained in {drained_in:?}; PING median {median_ping:?}, worst {worst_ping:?} over {pings}"
    );
    let len: i64 = q!(&mut con, "LLEN", PENDING);
    assert_eq!(len, N as i64);
    let first: String = q!(&mut con, "LINDEX", PENDING, -1);
    assert_eq!(first, "job-000000", "the earliest at the right end");
    assert_eq!(stat(&mut con, "auto_promoted"), N as u64);
    assert!(stat(&mut con, "auto_promote_ticks") >= 100);
    // At interval 200 ms, 100 ticks would take 20 s without chaining.
    assert!(
        drained_in < Duration::from_secs(5),
        "drained in {drained_in:?}"
    );
    assert!(pings > 50, "PING ran during the drain ({pings})");
    assert!(
        worst_ping < Duration::from_millis(100),
        "a PING waited {worst_ping:?}"
    );
}

/// SIGKILL mid-drain with appendfsync always; the restarted
/// server has every job exactly once and finishes the drain.
#[test]
fn sigkill_mid_drain_with_appendfsync_always_loses_and_duplicates_nothing() {
    const N: usize = 30_000;
    let dir = TempDir::new("auto-kill");
    let options = Options::default()
        .arg("appendonly", "yes")
        .arg("appendfsync", "always")
        .arg("echomq.auto-promote-limit", "50");
    let mut server = Server::start_in(options.clone(), &dir.0);
    let mut con = server.conn();
    fill_due(&mut con, N);
    configure(&mut con, &format!("{SCHEDULE} {PENDING}"));
    wait_until("the drain started", Duration::from_secs(20), || {
        let len: i64 = q!(&mut con, "LLEN", PENDING);
        (len >= 2000).then_some(()).ok_or(format!("{len} pending"))
    });
    server.stop(); // SIGKILL, by pid
    let restarted = Server::start_in(
        options.arg("echomq.auto-promote", &format!("{SCHEDULE} {PENDING}")),
        &dir.0,
    );
    let mut con = restarted.conn();
    let at_restart: i64 = q!(&mut con, "LLEN", PENDING);
    wait_until("drained after the restart", Duration::from_secs(60), || {
        let card: i64 = q!(&mut con, "ZCARD", SCHEDULE);
        (card == 0).then_some(()).ok_or(format!("{card} left"))
    });
    let pending: Vec<String> = q!(&mut con, "LRANGE", PENDING, 0, -1);
    let unique: BTreeSet<&String> = pending.iter().collect();
    eprintln!("{at_restart} of {N} pending at the restart");
    assert!(at_restart < N as i64, "killed after the drain: no test");
    assert_eq!(pending.len(), N, "lost or duplicated jobs");
    assert_eq!(unique.len(), N, "duplicated jobs");
    // Still first due, first out across the crash.
    let mut sorted = pending.clone();
    sorted.sort();
    sorted.reverse();
    assert_eq!(pending, sorted);
}

/// MODULE UNLOAD is refused while the timer is armed and the
/// server keeps promoting; with the config emptied it succeeds, the server
/// stays healthy, and a later MODULE LOAD promotes again once configured.
#[test]
fn module_unload_needs_an_empty_config_and_a_reload_promotes_again() {
    let server = auto_server(Options::default().arg("enable-module-command", "yes"));
    let mut con = server.conn();
    let e = err!(&mut con, "MODULE", "UNLOAD", "echomq");
    assert!(e.contains("timer"), "{e}");
    retry(&mut con, SCHEDULE, "after-refusal", "fixed:0", 1);
    wait_until("still promoting", Duration::from_secs(10), || {
        let len: i64 = q!(&mut con, "LLEN", PENDING);
        (len == 1).then_some(()).ok_or(format!("{len} pending"))
    });

    configure(&mut con, "");
    let _: () = q!(&mut con, "MODULE", "UNLOAD", "echomq");
    assert_pong(&mut con);
    let modules = module_names(&mut con);
    assert!(!modules.iter().any(|m| m == "echomq"), "{modules:?}");
    let configs: Vec<String> = q!(&mut con, "CONFIG", "GET", "echomq.*");
    assert!(configs.is_empty(), "{configs:?}");
    let _: () = q!(&mut con, "ZADD", SCHEDULE, 1, "while-unloaded");
    sleep(Duration::from_millis(100));
    let card: i64 = q!(&mut con, "ZCARD", SCHEDULE);
    assert_eq!(card, 1, "no timer after the unload");

    let path = module_path();
    let _: () = q!(&mut con, "MODULE", "LOAD", path.to_str().unwrap());
    assert_eq!(stat(&mut con, "auto_promoted"), 0, "counters start afresh");
    configure(&mut con, &format!("{SCHEDULE} {PENDING}"));
    wait_until(
        "promoting after the reload",
        Duration::from_secs(10),
        || {
            let len: i64 = q!(&mut con, "LLEN", PENDING);
            (len == 2).then_some(()).ok_or(format!("{len} pending"))
        },
    );
    let e = err!(&mut con, "MODULE", "UNLOAD", "echomq");
    assert!(e.contains("timer"), "{e}");
    configure(&mut con, "");
    let _: () = q!(&mut con, "MODULE", "UNLOAD", "echomq");
    assert_pong(&mut con);
}

/// The configs from a config file after `loadmodule`; a bad one there stops
/// the server from starting, as a bad native setting does.
#[test]
fn the_configs_are_read_from_the_config_file() {
    let dir = TempDir::new("auto-conf");
    let conf = dir.0.join("echomq.conf");
    let module = module_path();
    let text = format!(
        "loadmodule {}\n\
         echomq.auto-promote \"{SCHEDULE} {PENDING}\"\n\
         echomq.auto-promote-interval-ms 25\n",
        module.display()
    );
    std::fs::write(&conf, text).unwrap();
    let server = Server::start_in(
        Options {
            load_module: false,
            config: Some(conf.clone()),
            ..Options::default()
        },
        &dir.0,
    );
    let mut con = server.conn();
    let kv: Vec<String> = q!(&mut con, "CONFIG", "GET", "echomq.auto-promote-interval-ms");
    assert_eq!(kv[1], "25");
    retry(&mut con, SCHEDULE, "job", "fixed:0", 1);
    wait_until("promoted", Duration::from_secs(10), || {
        let len: i64 = q!(&mut con, "LLEN", PENDING);
        (len == 1).then_some(()).ok_or(format!("{len} pending"))
    });

    std::fs::write(
        &conf,
        format!(
            "loadmodule {}\nechomq.auto-promote \"a a\"\n",
            module.display()
        ),
    )
    .unwrap();
    // No port: nothing to connect to; the process must exit by itself.
    let mut child = std::process::Command::new(server_binary())
        .arg(&conf)
        .args(["--port", "0", "--save", "", "--daemonize", "no"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run the server");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        sleep(Duration::from_millis(20));
    };
    assert!(
        status.is_some_and(|s| !s.success()),
        "started with a refused config: {status:?}"
    );
}

/// ECHO.QUEUES lists the configured pairs, binary-safe and in order, for a
/// user who may run it and nothing else (no CONFIG).
#[test]
fn echo_queues_lists_the_pairs_to_a_user_without_config() {
    let server = Server::start();
    let mut con = server.conn();
    let none: Vec<Vec<Vec<u8>>> = q!(&mut con, "ECHO.QUEUES");
    assert!(none.is_empty(), "{none:?}");
    configure(&mut con, "{b}:s {b}:p {50%sale}:s {50%sale}:p");
    let pairs: Vec<Vec<String>> = q!(&mut con, "ECHO.QUEUES");
    assert_eq!(
        pairs,
        [["{b}:s", "{b}:p"], ["{50%sale}:s", "{50%sale}:p"]].map(|p| p.map(String::from).to_vec())
    );
    // A refused CONFIG SET leaves the list as it was.
    let _ = err!(&mut con, "CONFIG", "SET", "echomq.auto-promote", "x x");
    let again: Vec<Vec<String>> = q!(&mut con, "ECHO.QUEUES");
    assert_eq!(again, pairs);
    let e = err!(&mut con, "ECHO.QUEUES", "extra");
    assert!(e.contains("wrong number of arguments"), "{e}");
    if is_valkey(&mut con) {
        let _: () = q!(
            &mut con,
            "ACL",
            "SETUSER",
            "viewer",
            "on",
            ">pw",
            "-@all",
            "+echo.queues"
        );
        let mut viewer = server.conn();
        let _: () = q!(&mut viewer, "AUTH", "viewer", "pw");
        let seen: Vec<Vec<String>> = q!(&mut viewer, "ECHO.QUEUES");
        assert_eq!(seen, pairs);
        let e = err!(&mut viewer, "CONFIG", "GET", "echomq.auto-promote");
        assert!(e.starts_with("NOPERM"), "{e}");
    }
    configure(&mut con, "");
    let off: Vec<Vec<String>> = q!(&mut con, "ECHO.QUEUES");
    assert!(off.is_empty());
}

/// Whatever the limit, one pair's move in a tick stops after about 2 ms of
/// work and the next tick follows at once: a 200k backlog at the largest
/// limit drains over many ticks, in fire-time order, and each tick's work
/// is reported to the latency monitor.
#[test]
fn a_huge_limit_drains_in_budgeted_ticks_that_the_latency_monitor_sees() {
    let server = Server::start_with(Options::default().arg("latency-monitor-threshold", "1"));
    let mut con = server.conn();
    let n = 200_000;
    fill_due(&mut con, n);
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote-limit",
        1_000_000,
        "echomq.auto-promote-interval-ms",
        60_000
    );
    let ticks_before = stat(&mut con, "auto_promote_ticks");
    configure(&mut con, &format!("{SCHEDULE} {PENDING}"));
    wait_until("the backlog drained", Duration::from_secs(60), || {
        let len: usize = q!(&mut con, "LLEN", PENDING);
        (len == n).then_some(()).ok_or(format!("{len} pending"))
    });
    // With a 60 s interval, every tick after the first followed at once
    // because the one before ran out of its budget. Moving 200k members is
    // tens of milliseconds of work, so 2 ms ticks are many more than 10.
    let ticks = stat(&mut con, "auto_promote_ticks") - ticks_before;
    assert!(ticks >= 10, "{n} members moved in {ticks} ticks");
    assert_eq!(stat(&mut con, "auto_promoted"), n as u64);
    // Batches keep fire-time order: the list read from the right is sorted.
    let all: Vec<String> = q!(&mut con, "LRANGE", PENDING, 0, -1);
    let mut expected: Vec<String> = (0..n).map(|i| format!("job-{i:06}")).collect();
    expected.reverse();
    assert!(all == expected, "pending is not in fire-time order");
    let event = latency_latest(&mut con, "echomq-auto-promote")
        .unwrap_or_else(|| panic!("no echomq-auto-promote event in LATENCY LATEST"));
    // The max: the last tick may have had little left.
    assert!(
        event.max_ms >= 2,
        "a budgeted tick works at least 2 ms: {event:?}"
    );
    let history: Vec<(i64, i64)> = q!(&mut con, "LATENCY", "HISTORY", "echomq-auto-promote");
    assert!(!history.is_empty());
}

/// One callback serves pairs until its time budget is spent, not one pair
/// each: with 1000 pairs (the event loop gives a timer at most one pass a
/// millisecond, so a callback per pair made a tick last a second) the ticks
/// keep coming every interval or so, and a job due in the last pair moves.
#[test]
fn a_thousand_pairs_are_served_in_a_few_callbacks_per_tick() {
    let server = Server::start();
    let mut con = server.conn();
    let pairs: Vec<String> = (0..1000)
        .map(|i| format!("{{p{i}}}:schedule {{p{i}}}:pending"))
        .collect();
    configure(&mut con, &pairs.join(" "));
    sleep(Duration::from_millis(200));
    let before = stat(&mut con, "auto_promote_ticks");
    sleep(Duration::from_secs(1));
    let ticks = stat(&mut con, "auto_promote_ticks") - before;
    assert!(ticks >= 10, "{ticks} ticks in a second over 1000 pairs");
    retry(&mut con, "{p999}:schedule", "last", "fixed:0", 1);
    wait_until("the last pair's job moved", Duration::from_secs(5), || {
        let len: i64 = q!(&mut con, "LLEN", "{p999}:pending");
        (len == 1).then_some(()).ok_or(format!("{len} pending"))
    });
}

/// The lag gauge counts from when a member became due while its pair was
/// listed: a member written as "due now" with a score of 0 long before does
/// not set it to its age since 1970.
#[test]
fn a_member_due_before_its_pair_was_listed_adds_no_age_to_the_lag() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "ZADD", SCHEDULE, 0, "zero", 1, "one");
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        format!("{SCHEDULE} {PENDING}")
    );
    wait_until("both moved", Duration::from_secs(30), || {
        let moved: i64 = q!(&mut con, "LLEN", PENDING);
        (moved == 2).then_some(()).ok_or(format!("{moved} moved"))
    });
    let lag_ms_max = stat(&mut con, "auto_promote_lag_ms_max");
    // Well under an hour, whatever the machine's speed; 56 years before.
    assert!(lag_ms_max < 3_600_000, "lag_ms_max {lag_ms_max}");
    assert_eq!(stat(&mut con, "auto_promoted"), 2);
}
