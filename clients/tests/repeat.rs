//! Recurring jobs across the three libraries (issue 28): one definition
//! `every:1000`, declared the same from Python, Node.js and Rust, worked by
//! a worker of each language while two client promoters (`ECHO.PROMOTE` in a
//! loop) and the server's timer (`echomq.auto-promote`) race to release it.
//! Every nominal second of the run has exactly one occurrence run, with the
//! definition's payload: none skipped while the server runs, none run twice.
//! Then the same across a restart from the AOF with the server down for
//! 3 s: the stretch missed while it was down runs once (one occurrence, the
//! one armed when it stopped), then the schedule goes on.
//!
//! `ECHOMQ_REPEAT_RUN_S` sets how long the first run lasts (20 s by default;
//! 60 by hand), and the restart test runs a quarter of it (at least 3 s)
//! before the outage and as long after.
//!
//! Outside CI a missing python3 (with venv) or Node.js makes a test say
//! SKIPPED with the reason; in CI it fails.

mod support;

use echomq_testkit as common;
use echomq_testkit::node;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{sleep, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{run, wait_until, Options, Server};
use node::or_skip;
use redis::{cmd, Connection, Value};
use support::*;

/// The payload every occurrence must run with: bytes no text layer keeps
/// as they are by accident.
const PAYLOAD: &str = "report:{\"tenant\": 7, \"é\": true}";

fn run_seconds() -> u64 {
    std::env::var("ECHOMQ_REPEAT_RUN_S")
        .ok()
        .map(|s| s.parse().expect("ECHOMQ_REPEAT_RUN_S: a number of seconds"))
        .unwrap_or(20)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The server's clock, Unix ms.
fn server_ms(con: &mut Connection) -> i64 {
    let (secs, micros): (i64, i64) = run(con, &cmd("TIME"));
    secs * 1000 + micros / 1000
}

/// This machine's clock, Unix ms: the server's too (same host).
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// Sleeps until the server's clock reads `at_ms` (asked again after each
/// nap, so a server restarted meanwhile is no matter).
fn sleep_until(url: &str, at_ms: i64) {
    loop {
        let left = at_ms - wall_ms();
        if left <= 0 {
            let con = redis::Client::open(url).and_then(|c| c.get_connection());
            if let Ok(mut con) = con {
                if server_ms(&mut con) >= at_ms {
                    return;
                }
            }
        }
        sleep(Duration::from_millis(left.clamp(10, 200) as u64));
    }
}

/// Two client promoters: threads sending `ECHO.PROMOTE` in a loop on their
/// own connections (a few ms apart, not in step), through refused
/// connections while the server is down.
struct Promoters {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<(u64, u64)>>,
}

impl Promoters {
    fn start(url: &str, queue: &str) -> Promoters {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = [3u64, 7]
            .into_iter()
            .map(|pause_ms| {
                let (stop, url) = (stop.clone(), url.to_string());
                let (schedule, pending) = (
                    format!("{{{queue}}}:schedule"),
                    format!("{{{queue}}}:pending"),
                );
                std::thread::spawn(move || {
                    let (mut calls, mut moved) = (0u64, 0u64);
                    let mut con: Option<Connection> = None;
                    while !stop.load(Ordering::Relaxed) {
                        if con.is_none() {
                            con = redis::Client::open(url.as_str())
                                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                                .ok();
                        }
                        if let Some(c) = con.as_mut() {
                            let reply: redis::RedisResult<u64> = cmd("ECHO.PROMOTE")
                                .arg(&schedule)
                                .arg(&pending)
                                .arg("LIMIT")
                                .arg(1000)
                                .query(c);
                            match reply {
                                Ok(n) => {
                                    calls += 1;
                                    moved += n;
                                }
                                // Down, or loading its AOF: a new connection later.
                                Err(_) => con = None,
                            }
                        }
                        sleep(Duration::from_millis(pause_ms));
                    }
                    (calls, moved)
                })
            })
            .collect();
        Promoters { stop, threads }
    }

    /// Stops them; each one's (calls, members moved).
    fn stop(self) -> Vec<(u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|t| t.join().expect("a promoter panicked"))
            .collect()
    }
}

/// A worker of each language on `queue`, each pushing `<id> <payload hex>`
/// to `{queue}:ran-<lang>` as a run starts.
fn start_workers(url: &str, queue: &str, extra: &[&str]) -> Vec<(Lang, String, Worker)> {
    [Python, Node, Rust]
        .into_iter()
        .map(|lang| {
            let ran = format!("{{{queue}}}:ran-{lang:?}").to_lowercase();
            let base = ["--url", url, "--queue", queue, "--ran", &ran];
            let worker = Worker::start(lang, &[&base[..], extra].concat());
            (lang, ran, worker)
        })
        .collect()
}

/// `repeat` through `lang`'s crossworker: the fire time it printed.
fn repeat_from(lang: Lang, url: &str, queue: &str, id: &str, spec: &str, more: &[&str]) -> i64 {
    let base = [
        "repeat",
        "--url",
        url,
        "--queue",
        queue,
        "--id",
        id,
        "--spec",
        spec,
        "--payload",
        PAYLOAD,
    ];
    let out = run_to_end(lang, &[&base[..], more].concat());
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{lang:?} repeat printed {out:?}"))
}

/// `repeats` through `lang`'s crossworker, as JSON values.
fn repeats_from(lang: Lang, url: &str, queue: &str) -> Vec<serde_json::Value> {
    run_to_end(lang, &["repeats", "--url", url, "--queue", queue])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{lang:?}: {e}: {line}")))
        .collect()
}

/// `ECHO.REPEATS` and `ECHO.UNREPEAT` of `id` in one transaction: the
/// nominal time of the occurrence armed when the definition ended (it never
/// runs), so every occurrence before it was released.
fn end_definition(con: &mut Connection, queue: &str, id: &str) -> i64 {
    let schedule = format!("{{{queue}}}:schedule");
    let (listed, removed): (Vec<Value>, i64) = redis::pipe()
        .atomic()
        .cmd("ECHO.REPEATS")
        .arg(&schedule)
        .cmd("ECHO.UNREPEAT")
        .arg(&schedule)
        .arg(id)
        .query(con)
        .expect("REPEATS and UNREPEAT");
    assert_eq!(removed, 1, "the definition was still there");
    let [Value::Array(fields)] = &listed[..] else {
        panic!("one definition: {listed:?}");
    };
    let at = fields
        .iter()
        .position(|f| matches!(f, Value::BulkString(b) if b == b"next-ms"))
        .expect("next-ms");
    redis::from_redis_value(fields[at + 1].clone()).expect("next-ms an integer")
}

/// Waits until every released occurrence has its outcome: nothing in the
/// stream, nothing delivered and unacknowledged.
fn wait_drained(con: &mut Connection, queue: &str) {
    let pending = format!("{{{queue}}}:pending");
    wait_until(
        "every released occurrence done",
        Duration::from_secs(60),
        || {
            let len: u64 = run(con, cmd("XLEN").arg(&pending));
            (len == 0)
                .then_some(())
                .ok_or(format!("{len} entries left"))
        },
    );
}

/// Stops the workers; the nominal times each ran (checked: with the
/// payload, of the definition `id`), and how many each language ran.
fn stop_and_collect(
    con: &mut Connection,
    workers: Vec<(Lang, String, Worker)>,
    id: &str,
) -> (Vec<i64>, BTreeMap<Lang, usize>) {
    let mut nominals = Vec::new();
    let mut by_lang = BTreeMap::new();
    for (lang, ran, worker) in workers {
        worker.stop();
        let lines: Vec<String> = run(con, cmd("LRANGE").arg(&ran).arg(0).arg(-1));
        by_lang.insert(lang, lines.len());
        for line in lines {
            let (job, payload) = line.split_once(' ').expect("<id> <payload hex>");
            assert_eq!(
                payload,
                hex(PAYLOAD.as_bytes()),
                "{lang:?} ran {job} with another payload"
            );
            let (definition, ms) = job.rsplit_once('@').expect("an occurrence's id");
            assert_eq!(definition, id, "{lang:?} ran {job}");
            nominals.push(ms.parse::<i64>().expect("nominal ms"));
        }
    }
    nominals.sort_unstable();
    (nominals, by_lang)
}

/// `nominals` (sorted) hold each value once.
fn assert_each_once(nominals: &[i64]) {
    let twice: Vec<_> = nominals.windows(2).filter(|w| w[0] == w[1]).collect();
    assert!(twice.is_empty(), "occurrences run twice: {twice:?}");
}

/// The three languages declare the same definitions the same: an
/// `every:` hour with jitter and a zone (the server's reply to the second and
/// third declaration is the first one's fire time: a replacement would be
/// armed again from its own call, with a fresh draw), listed the same by all
/// three.
fn declared_alike(url: &str, queue: &str) {
    let more = ["--jitter-ms", "600000", "--tz", "Europe/Berlin"];
    let fires: Vec<i64> = [Python, Node, Rust]
        .into_iter()
        .map(|lang| repeat_from(lang, url, queue, "hourly", "every:3600000", &more))
        .collect();
    assert_eq!(fires[1..], [fires[0], fires[0]], "Python, Node, Rust");
    let listed = repeats_from(Python, url, queue);
    for lang in [Node, Rust] {
        assert_eq!(
            repeats_from(lang, url, queue),
            listed,
            "{lang:?} lists as Python"
        );
    }
    let hourly = listed
        .iter()
        .find(|r| r["id"] == "hourly")
        .expect("hourly listed");
    assert_eq!(hourly["fire_at_ms"], fires[0]);
    assert_eq!(
        (&hourly["jitter_ms"], &hourly["tz"]),
        (
            &serde_json::json!(600000),
            &serde_json::json!("Europe/Berlin")
        )
    );
    let out = run_to_end(
        Rust,
        &["unrepeat", "--url", url, "--queue", queue, "--id", "hourly"],
    );
    assert_eq!(out.trim(), "true");
}

/// What the test needs from each language: the venv, node_modules, the
/// Rust crossworker; `None` (SKIPPED) when one is missing.
fn languages_ready(test: &str) -> Option<()> {
    or_skip(test, python().map(|_| ()))?;
    or_skip(test, node_ready())?;
    rust_crossworker();
    Some(())
}

/// The queue's pair for `echomq.auto-promote`.
fn timer_pair(queue: &str) -> String {
    format!("{{{queue}}}:schedule {{{queue}}}:pending")
}

#[test]
fn each_nominal_second_runs_once_across_three_languages_two_promoters_and_the_timer() {
    let test = "each_nominal_second_runs_once_across_three_languages_two_promoters_and_the_timer";
    if languages_ready(test).is_none() {
        return;
    }
    let queue = "x-repeat";
    let server =
        Server::start_with(Options::default().arg("echomq.auto-promote", &timer_pair(queue)));
    let url = server.url();
    let mut con = server.conn();
    declared_alike(&url, queue);
    // One run at a time per worker, each 2.5 s long: an occurrence is
    // released (and the next armed) while the one before still runs, and no
    // two workers keep up with one a second (2 per 2.5 s), so all three
    // take occurrences: with short runs, one worker whose blocking read
    // times out in step with the releases could take none.
    let workers = start_workers(&url, queue, &["--concurrency", "1", "--sleep-ms", "2500"]);
    let promoters = Promoters::start(&url, queue);
    // The first occurrence once everything races: from FROM, 2 s ahead.
    let from = server_ms(&mut con) + 2000;
    let from_arg = from.to_string();
    let first = repeat_from(
        Python,
        &url,
        queue,
        "tick",
        "every:1000",
        &["--from-ms", &from_arg],
    );
    assert_eq!(first, from, "no jitter: the first fire time is FROM");
    // The same from the other two: nothing changes (the armed occurrence's
    // fire time, the first one's or, released meanwhile, a later one's).
    for lang in [Node, Rust] {
        let again = repeat_from(
            lang,
            &url,
            queue,
            "tick",
            "every:1000",
            &["--from-ms", &from_arg],
        );
        assert!(
            again >= first && (again - first) % 1000 == 0,
            "{lang:?}: {again} after {first}"
        );
    }
    let seconds = run_seconds() as i64;
    sleep_until(&url, first + seconds * 1000);
    let end = end_definition(&mut con, queue, "tick");
    wait_drained(&mut con, queue);
    let raced = promoters.stop();
    let (nominals, by_lang) = stop_and_collect(&mut con, workers, "tick");
    eprintln!(
        "{} occurrences in {seconds} s; run by {by_lang:?}; the promoters' (calls, moved): {raced:?}",
        nominals.len()
    );
    assert_each_once(&nominals);
    // Every nominal second from the first to the one armed at the end, and
    // no other.
    let want: Vec<i64> = (first..end).step_by(1000).collect();
    assert_eq!(nominals, want, "the nominal seconds run");
    // A floor that only an idle run misses: the run is `seconds` long.
    assert!(
        nominals.len() as i64 >= seconds / 2,
        "{} occurrences in {seconds} s",
        nominals.len()
    );
    assert!(
        raced.iter().all(|&(calls, _)| calls > 0),
        "both promoters ran: {raced:?}"
    );
    assert!(
        by_lang.values().all(|&n| n > 0),
        "every language ran occurrences: {by_lang:?}"
    );
    let left: Vec<String> = run(&mut con, cmd("KEYS").arg(format!("{{{queue}}}:schedule*")));
    assert_eq!(
        left,
        Vec::<String>::new(),
        "no occurrence or definition left"
    );
}

#[test]
fn a_restart_from_the_aof_runs_the_missed_stretch_once() {
    let test = "a_restart_from_the_aof_runs_the_missed_stretch_once";
    if languages_ready(test).is_none() {
        return;
    }
    let queue = "x-repeat-restart";
    let options = Options::aof_replay().arg("echomq.auto-promote", &timer_pair(queue));
    let mut server = Server::start_with(options.clone());
    let url = server.url();
    let mut con = server.conn();
    // A lease shorter than the default: an entry delivered as the server
    // went down, whose reply was lost, is taken over within the test; long
    // enough that a run whose success waits out the outage (sent again until
    // it is written) is not taken over and run again.
    let workers = start_workers(&url, queue, &["--concurrency", "2", "--lease-ms", "10000"]);
    let promoters = Promoters::start(&url, queue);
    let from = server_ms(&mut con) + 2000;
    let first = repeat_from(
        Python,
        &url,
        queue,
        "tick",
        "every:1000",
        &["--from-ms", &from.to_string()],
    );
    assert_eq!(first, from);
    let leg = (run_seconds() as i64 / 4).max(3);
    sleep_until(&url, first + leg * 1000);
    drop(con);
    server.shutdown();
    // Every release before the outage came before this.
    let down_ms = wall_ms();
    sleep(Duration::from_secs(3));
    // Every release after the outage comes after this.
    let up_ms = wall_ms();
    server.restart(options);
    let mut con = server.conn();
    sleep_until(&url, up_ms + leg * 1000);
    let end = end_definition(&mut con, queue, "tick");
    wait_drained(&mut con, queue);
    let raced = promoters.stop();
    let (nominals, by_lang) = stop_and_collect(&mut con, workers, "tick");
    eprintln!(
        "{} occurrences, {leg} s on each side of a 3 s outage; run by {by_lang:?}; the promoters' (calls, moved): {raced:?}",
        nominals.len()
    );
    assert_each_once(&nominals);
    // One step, the outage, larger than the interval; every other one the
    // interval.
    let jumps: Vec<(i64, i64)> = nominals
        .windows(2)
        .filter(|w| w[1] - w[0] != 1000)
        .map(|w| (w[0], w[1]))
        .collect();
    let [(armed, after)] = jumps[..] else {
        panic!("one gap, at the outage: {jumps:?} in {nominals:?}");
    };
    // The last occurrence before the gap was the one armed when the server
    // stopped (at most one interval after its last release), run once after
    // the restart: the missed stretch runs once. The next was armed after
    // the restart, the first still to come: the nominal seconds between,
    // two at least over a 3 s outage, never run.
    assert!(
        armed <= down_ms + 1000,
        "{armed} armed before the outage ({down_ms})"
    );
    assert!(after > up_ms, "{after} armed after the restart ({up_ms})");
    assert_eq!(nominals[0], first, "from the first");
    assert_eq!(
        *nominals.last().unwrap(),
        end - 1000,
        "to the one before the end"
    );
    assert!(
        nominals.iter().any(|&n| n > armed) && nominals.iter().any(|&n| n < armed),
        "occurrences on both sides of the outage: {nominals:?}"
    );
    let left: Vec<String> = run(&mut con, cmd("KEYS").arg(format!("{{{queue}}}:schedule*")));
    assert_eq!(
        left,
        Vec::<String>::new(),
        "no occurrence or definition left"
    );
}
