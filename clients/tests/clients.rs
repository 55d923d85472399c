//! The three client libraries on one queue: a job added in one language is
//! run by a worker in another, the dead set one writes reads the same from
//! all three, and three workers in three languages share a queue of 10,000
//! jobs with each job done once. Each library's own suite (pytest,
//! `node --test`, `cargo test -p echomq-client`) covers the rest; here the
//! libraries meet through their `crossworker` programs, whose command line is
//! the same in every language.
//!
//! Outside CI a missing python3 (with venv) or Node.js makes a test say
//! SKIPPED with the reason; in CI it fails, since scripts/setup.sh installs them.

mod support;

use echomq_testkit as common;
use echomq_testkit::node;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::inspect::{acl_line, acl_log, echomq_stat};
use common::{run, wait_until, Server};
use node::or_skip;
use redis::{cmd, Connection};
use support::*;

/// `HGETALL key` as id → count.
fn done_counts(con: &mut Connection, key: &str) -> BTreeMap<String, i64> {
    run(con, cmd("HGETALL").arg(key))
}

fn wait_done(con: &mut Connection, key: &str, n: usize, within: Duration) {
    wait_until(&format!("{n} jobs done in {key}"), within, || {
        let len: usize = run(con, cmd("HLEN").arg(key));
        (len >= n).then_some(()).ok_or(format!("{len} done"))
    });
}

/// Nothing of the queue left but what a test wrote itself.
fn assert_queue_empty(con: &mut Connection, queue: &str) {
    for suffix in ["schedule", "dead", "jobs", "attempts", "errors"] {
        let exists: i64 = run(con, cmd("EXISTS").arg(format!("{{{queue}}}:{suffix}")));
        assert_eq!(exists, 0, "{{{queue}}}:{suffix} still exists");
    }
    let len: i64 = run(con, cmd("XLEN").arg(format!("{{{queue}}}:pending")));
    assert_eq!(len, 0, "entries left in {{{queue}}}:pending");
}

/// `count` jobs added with generated ids (one transaction per 1,000): their ids.
fn added_generated(lang: Lang, url: &str, queue: &str, count: usize) -> Vec<String> {
    let n = count.to_string();
    let args = ["add", "--url", url, "--queue", queue, "--count", &n];
    let ids: Vec<String> = run_to_end(lang, &args)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), count, "{lang:?}: ids added");
    ids
}

/// A job added in one language is run by a worker of the next.
#[test]
fn a_job_added_in_one_language_runs_in_another() {
    let Some((_server, url, mut con)) =
        three_languages("a_job_added_in_one_language_runs_in_another")
    else {
        return;
    };
    for (producer, consumer) in [(Python, Node), (Node, Rust), (Rust, Python)] {
        let queue = format!("x-{producer:?}-{consumer:?}").to_lowercase();
        let done = format!("{{{queue}}}:done");
        let worker = Worker::start(
            consumer,
            &["--url", &url, "--queue", &queue, "--done", &done],
        );
        let prefix = format!("{producer:?}-").to_lowercase();
        let ids = added_from(producer, &url, &queue, 20, &prefix);
        let want: BTreeSet<String> = (0..20).map(|i| format!("{prefix}{i}")).collect();
        assert_eq!(
            ids.iter().cloned().collect::<BTreeSet<_>>(),
            want,
            "ids printed by add"
        );
        wait_done(&mut con, &done, 20, Duration::from_secs(30));
        worker.stop();
        let counts = done_counts(&mut con, &done);
        assert_eq!(
            counts.keys().cloned().collect::<BTreeSet<_>>(),
            want,
            "{producer:?} → {consumer:?}"
        );
        assert!(
            counts.values().all(|&n| n == 1),
            "a job ran twice: {counts:?}"
        );
        assert_queue_empty(&mut con, &queue);
    }
}

/// One dead record as every crossworker prints it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Dead {
    id: String,
    died_at_ms: i64,
    attempts: i64,
    error: Option<String>,
    payload_hex: Option<String>,
}

fn dead_from(lang: Lang, url: &str, queue: &str) -> Vec<Dead> {
    run_to_end(lang, &["dead", "--url", url, "--queue", queue])
        .lines()
        .map(|line| {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{lang:?}: {e}: {line}"));
            Dead {
                id: v["id"].as_str().expect("id").to_string(),
                died_at_ms: v["died_at_ms"].as_i64().expect("died_at_ms"),
                attempts: v["attempts"].as_i64().expect("attempts"),
                error: v["error"].as_str().map(str::to_string),
                payload_hex: v["payload_hex"].as_str().map(str::to_string),
            }
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Jobs added from Rust and failed for good by a Python worker read the same
/// in the dead set from all three languages.
#[test]
fn the_dead_set_one_language_writes_the_others_read() {
    let Some((_server, url, mut con)) =
        three_languages("the_dead_set_one_language_writes_the_others_read")
    else {
        return;
    };
    let queue = "x-dead";
    added_from(Rust, &url, queue, 5, "rs-");
    let worker = Worker::start(
        Python,
        &[
            "--url",
            &url,
            "--queue",
            queue,
            "--fail",
            "boom from python",
            "--max-attempts",
            "2",
            "--backoff",
            "fixed:0",
        ],
    );
    // Retries at fixed:0 are due at once: the worker promotes them itself
    // (the pair is not in echomq.auto-promote).
    wait_until("5 dead", Duration::from_secs(30), || {
        let n: i64 = run(&mut con, cmd("ZCARD").arg("{x-dead}:dead"));
        (n == 5).then_some(()).ok_or(format!("{n} dead"))
    });
    worker.stop();
    let from_python = dead_from(Python, &url, queue);
    assert_eq!(from_python.len(), 5, "{from_python:?}");
    let ids: BTreeSet<&str> = from_python.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        ids,
        (0..5)
            .map(|i| format!("rs-{i}"))
            .collect::<BTreeSet<_>>()
            .iter()
            .map(String::as_str)
            .collect()
    );
    for record in &from_python {
        assert_eq!(record.attempts, 2, "{record:?}");
        assert_eq!(record.error.as_deref(), Some("boom from python"));
        assert!(record.died_at_ms > 0);
    }
    let mut payloads: Vec<String> = from_python
        .iter()
        .map(|d| d.payload_hex.clone().expect("a payload"))
        .collect();
    payloads.sort();
    let mut want: Vec<String> = (0..5)
        .map(|i| hex(format!("payload-{i}").as_bytes()))
        .collect();
    want.sort();
    assert_eq!(payloads, want);
    assert_eq!(
        dead_from(Node, &url, queue),
        from_python,
        "Node reads another dead set"
    );
    assert_eq!(
        dead_from(Rust, &url, queue),
        from_python,
        "Rust reads another dead set"
    );
}

/// A worker per language on `queue`, each counting its successes in its
/// own `{queue}:done-<lang>` hash, with `extra` options.
fn start_counting_workers(url: &str, queue: &str, extra: &[&str]) -> Vec<(Lang, String, Worker)> {
    [Python, Node, Rust]
        .into_iter()
        .map(|lang| {
            let done = format!("{{{queue}}}:done-{lang:?}").to_lowercase();
            let base = ["--url", url, "--queue", queue, "--done", &done];
            let worker = Worker::start(lang, &[&base[..], extra].concat());
            (lang, done, worker)
        })
        .collect()
}

/// Waits until the workers' done hashes hold `total` jobs between them.
fn wait_all_done(con: &mut Connection, workers: &[(Lang, String, Worker)], total: usize) {
    wait_until("every job done", Duration::from_secs(180), || {
        let mut n = 0;
        for (_, done, _) in workers {
            let len: usize = run(con, cmd("HLEN").arg(done));
            n += len;
        }
        (n >= total).then_some(()).ok_or(format!("{n} done"))
    });
}

/// Stops the workers; every job each did, with the languages that did it
/// (checked: each worker did some, none did a job twice).
fn stop_and_tally(
    con: &mut Connection,
    workers: Vec<(Lang, String, Worker)>,
) -> BTreeMap<String, Vec<Lang>> {
    let mut seen: BTreeMap<String, Vec<Lang>> = BTreeMap::new();
    for (lang, done, worker) in workers {
        worker.stop();
        let counts = done_counts(con, &done);
        assert!(!counts.is_empty(), "the {lang:?} worker did no job");
        for (id, n) in counts {
            assert_eq!(n, 1, "{id} ran {n} times in {lang:?}");
            seen.entry(id).or_default().push(lang);
        }
    }
    seen
}

/// 10,000 jobs, one worker per language at once: every job done exactly once,
/// every worker did some, nothing left behind.
#[test]
fn three_languages_share_ten_thousand_jobs_each_done_once() {
    let Some((_server, url, mut con)) =
        three_languages("three_languages_share_ten_thousand_jobs_each_done_once")
    else {
        return;
    };
    let queue = "x-shared";
    let workers = start_counting_workers(&url, queue, &["--concurrency", "20"]);
    let ids = added_from(Node, &url, queue, 10_000, "");
    assert_eq!(ids.len(), 10_000);
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), 10_000, "generated ids collide");
    wait_all_done(&mut con, &workers, 10_000);
    let seen = stop_and_tally(&mut con, workers);
    let twice: Vec<_> = seen.iter().filter(|(_, langs)| langs.len() > 1).collect();
    assert!(twice.is_empty(), "jobs run by two workers: {twice:?}");
    assert_eq!(
        seen.keys().collect::<BTreeSet<_>>(),
        unique,
        "the jobs done are the jobs added"
    );
    assert_queue_empty(&mut con, queue);
}

/// A job that kills every worker that runs it (the crossworker's `--crash`
/// SIGKILLs its own process) is taken over after each death until its
/// delivery count passes `max_deliveries`; then the next worker fails it
/// unrun and, at `max_attempts` 1, it is dead with the reason. In each
/// language, restarting the worker as a supervisor would.
#[test]
fn a_job_that_kills_every_worker_ends_in_the_dead_set() {
    let Some((_server, url, mut con)) =
        three_languages("a_job_that_kills_every_worker_ends_in_the_dead_set")
    else {
        return;
    };
    for lang in [Python, Node, Rust] {
        let queue = format!("poison-{lang:?}").to_lowercase();
        let dead_key = format!("{{{queue}}}:dead");
        let started = format!("{{{queue}}}:started");
        added_from(lang, &url, &queue, 1, "p-");
        let mut starts = 0;
        loop {
            starts += 1;
            assert!(
                starts <= 6,
                "{lang:?}: still not dead after {starts} worker starts"
            );
            let args = [
                "--url",
                &url,
                "--queue",
                &queue,
                "--crash",
                "--started",
                &started,
                "--lease-ms",
                "300",
                "--max-deliveries",
                "2",
                "--max-attempts",
                "1",
            ];
            let mut worker = Worker::start(lang, &args);
            let deadline = Instant::now() + Duration::from_secs(20);
            let outcome = loop {
                if let Some(status) = worker.child.try_wait().expect("wait") {
                    break Err(status);
                }
                let dead: i64 = run(&mut con, cmd("ZCARD").arg(&dead_key));
                if dead == 1 {
                    break Ok(());
                }
                assert!(
                    Instant::now() < deadline,
                    "{lang:?}: the worker neither died nor dead-lettered"
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            match outcome {
                Ok(()) => {
                    worker.stop();
                    break;
                }
                Err(status) => assert!(!status.success(), "{lang:?} worker exited {status}"),
            }
        }
        // Two runs (deliveries 1 and 2), each fatal; the third delivery is not run.
        let runs: i64 = run(&mut con, cmd("LLEN").arg(&started));
        assert_eq!((runs, starts), (2, 3), "{lang:?}: runs and worker starts");
        let records = dead_from(lang, &url, &queue);
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].id, "p-0");
        assert_eq!(records[0].attempts, 1);
        assert_eq!(
            records[0].error.as_deref(),
            Some("delivered 3 times without an outcome")
        );
        assert_eq!(records[0].payload_hex, Some(hex(b"payload-0")));
    }
}

/// A worker killed mid-job (SIGKILL) in one language: its jobs are taken
/// over after the lease by a worker of another language and each done once;
/// none is lost.
#[test]
fn a_killed_workers_jobs_are_done_by_another_language() {
    let Some((_server, url, mut con)) =
        three_languages("a_killed_workers_jobs_are_done_by_another_language")
    else {
        return;
    };
    for (victim, heir) in [(Python, Rust), (Rust, Node), (Node, Python)] {
        let queue = format!("kill-{victim:?}-{heir:?}").to_lowercase();
        let started = format!("{{{queue}}}:started");
        let done = format!("{{{queue}}}:done");
        let lease = ["--lease-ms", "500"];
        let mut args = vec!["--url", &url, "--queue", &queue, "--started", &started];
        args.extend(["--sleep-ms", "60000", "--concurrency", "3"]);
        args.extend(lease);
        let mut doomed = Worker::start(victim, &args);
        added_from(victim, &url, &queue, 3, "k-");
        wait_until("three jobs running", Duration::from_secs(20), || {
            let n: i64 = run(&mut con, cmd("LLEN").arg(&started));
            (n == 3).then_some(()).ok_or(format!("{n} running"))
        });
        doomed.child.kill().expect("SIGKILL");
        doomed.child.wait().expect("reap");
        let mut args = vec!["--url", &url, "--queue", &queue, "--done", &done];
        args.extend(lease);
        let heir_worker = Worker::start(heir, &args);
        wait_done(&mut con, &done, 3, Duration::from_secs(30));
        heir_worker.stop();
        let counts = done_counts(&mut con, &done);
        let want: BTreeSet<String> = (0..3).map(|i| format!("k-{i}")).collect();
        assert_eq!(
            counts.keys().cloned().collect::<BTreeSet<_>>(),
            want,
            "{victim:?} → {heir:?}"
        );
        assert!(counts.values().all(|&n| n == 1), "{counts:?}");
        assert_queue_empty(&mut con, &queue);
    }
}

/// The scripts of `protocol/` (file name, SHA1), the one copy every library
/// embeds.
fn protocol_scripts() -> Vec<(String, String)> {
    let dir = source("protocol");
    let mut scripts: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a protocol/ entry").path())
        .filter(|path| path.extension().is_some_and(|x| x == "lua"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a protocol script");
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, redis::Script::new(&text).get_hash().to_string())
        })
        .collect();
    scripts.sort();
    scripts
}

/// The entries of `pending` delivered and not yet acknowledged.
fn in_flight(con: &mut Connection, pending: &str) -> usize {
    let entries: Vec<redis::Value> = run(
        con,
        cmd("XPENDING")
            .arg(pending)
            .arg("workers")
            .arg("-")
            .arg("+")
            .arg(100),
    );
    entries.len()
}

/// Each library runs the scripts of `protocol/` byte for byte, and no other
/// script: after `SCRIPT FLUSH`, a library driven through every script of
/// the protocol (adds with given ids, a hand-back on close, failures to
/// dead, a requeue, a success, a purge) leaves the server's script cache
/// holding exactly the SHA1s of the six files. A library that ran a copy
/// differing by one byte would leave another SHA1 there.
#[test]
fn every_library_runs_exactly_the_protocol_scripts() {
    let Some((_server, url, mut con)) =
        three_languages("every_library_runs_exactly_the_protocol_scripts")
    else {
        return;
    };
    let scripts = protocol_scripts();
    let names: Vec<&str> = scripts.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "add_with_id.lua",
            "fail.lua",
            "hand_back.lua",
            "purge_dead.lua",
            "requeue.lua",
            "succeed.lua"
        ],
        "the protocol's scripts"
    );
    for lang in [Python, Node, Rust] {
        let _: () = run(&mut con, cmd("SCRIPT").arg("FLUSH"));
        let queue = format!("protocol-{lang:?}").to_lowercase();
        let (schedule, pending, dead, done) = (
            format!("{{{queue}}}:schedule"),
            format!("{{{queue}}}:pending"),
            format!("{{{queue}}}:dead"),
            format!("{{{queue}}}:done"),
        );
        let base = ["--url", url.as_str(), "--queue", queue.as_str()];
        // add_with_id.lua
        added_from(lang, &url, &queue, 2, "p-");
        // hand_back.lua: the queue held, a worker takes both entries and
        // waits; closed, it hands them back.
        let _: i64 = run(&mut con, cmd("ECHO.HOLD").arg(&schedule).arg(60_000));
        let worker = Worker::start(lang, &base);
        wait_until("both entries taken", Duration::from_secs(20), || {
            let n = in_flight(&mut con, &pending);
            (n == 2).then_some(()).ok_or(format!("{n} taken"))
        });
        worker.stop();
        assert_eq!(in_flight(&mut con, &pending), 0, "{lang:?}: handed back");
        let len: usize = run(&mut con, cmd("XLEN").arg(&pending));
        assert_eq!(len, 2, "{lang:?}: both entries back in pending");
        let _: i64 = run(&mut con, cmd("ECHO.HOLD").arg(&schedule).arg(0));
        // fail.lua: both fail their only attempt and are dead.
        let worker = Worker::start(
            lang,
            &[&base[..], &["--fail", "boom", "--max-attempts", "1"]].concat(),
        );
        wait_until("2 dead", Duration::from_secs(30), || {
            let n: i64 = run(&mut con, cmd("ZCARD").arg(&dead));
            (n == 2).then_some(()).ok_or(format!("{n} dead"))
        });
        worker.stop();
        // requeue.lua, then succeed.lua
        let requeued = run_to_end(lang, &[&["requeue"][..], &base, &["--id", "p-0"]].concat());
        assert_eq!(requeued.trim(), "true", "{lang:?}: requeued");
        let worker = Worker::start(lang, &[&base[..], &["--done", done.as_str()]].concat());
        wait_done(&mut con, &done, 1, Duration::from_secs(30));
        worker.stop();
        // purge_dead.lua
        let purged = run_to_end(lang, &[&["purge"][..], &base[..]].concat());
        assert_eq!(purged.trim(), "1", "{lang:?}: purged");
        let shas: Vec<&str> = scripts.iter().map(|(_, sha)| sha.as_str()).collect();
        let exists: Vec<i64> = run(&mut con, cmd("SCRIPT").arg("EXISTS").arg(&shas));
        for ((name, _), cached) in scripts.iter().zip(&exists) {
            assert_eq!(
                *cached, 1,
                "{lang:?} did not run protocol/{name} as the file holds it"
            );
        }
        let cached: usize = common::info_field(&mut con, "memory", "number_of_cached_scripts")
            .parse()
            .expect("number_of_cached_scripts");
        assert_eq!(
            cached,
            scripts.len(),
            "{lang:?} ran a script text that is not one of protocol/'s"
        );
    }
}

/// Each crossworker's concurrency in the tests below: at most three times
/// this many jobs are in flight when their server goes away.
const PATIENT_CONCURRENCY: usize = 4;

/// A Python, a Node.js and a Rust worker on `queue`, each counting its jobs
/// in its own `{queue}:done-<lang>` hash, patient enough for a restart or
/// a failover: short jobs, a 2 s lease, 50 attempts 50 ms apart.
fn patient_workers(url: &str, queue: &str) -> Vec<(Lang, String, Worker)> {
    [Python, Node, Rust]
        .into_iter()
        .map(|lang| {
            let done = format!("{{{queue}}}:done-{lang:?}").to_lowercase();
            let args = [
                "--url",
                url,
                "--queue",
                queue,
                "--done",
                &done,
                "--concurrency",
                &PATIENT_CONCURRENCY.to_string(),
                "--sleep-ms",
                "5",
                "--lease-ms",
                "2000",
                "--max-attempts",
                "50",
                "--backoff",
                "fixed:50",
            ];
            let w = Worker::start(lang, &args);
            (lang, done, w)
        })
        .collect()
}

/// How many distinct jobs each of `workers` has done.
fn done_per_worker(con: &mut Connection, workers: &[(Lang, String, Worker)]) -> Vec<usize> {
    workers
        .iter()
        .map(|(_, done, _)| run::<usize>(con, cmd("HLEN").arg(done)))
        .collect()
}

/// How many distinct jobs `workers` have done between them. Not the sum of
/// their counts: a job run again by another worker after a failover is in
/// two workers' hashes, and the sum would reach the total while some job
/// is still not done.
fn distinct_done(con: &mut Connection, workers: &[(Lang, String, Worker)]) -> usize {
    let mut ids = BTreeSet::new();
    for (_, done, _) in workers {
        let keys: Vec<String> = run(con, cmd("HKEYS").arg(done));
        ids.extend(keys);
    }
    ids.len()
}

/// The jobs done (`seen`: id → runs, over every worker) are exactly `want`,
/// none ran more than twice, and no more ran twice than were in flight at
/// `event`; none is dead and nothing of the queue is left.
fn assert_done_with_reruns_only_in_flight(
    con: &mut Connection,
    queue: &str,
    seen: &BTreeMap<String, i64>,
    want: BTreeSet<&String>,
    event: &str,
) {
    assert_eq!(
        seen.keys().collect::<BTreeSet<_>>(),
        want,
        "the jobs done are the jobs added"
    );
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    println!("run twice: {twice:?}");
    // A job in flight runs once more after the switch; and its count may
    // rise once more again, since the crossworkers send their `--done`
    // HINCRBY again after a connection lost with it on the wire (it may
    // have been applied): at most 3 for a job in flight, 1 for the others.
    assert!(
        twice.len() <= 3 * PATIENT_CONCURRENCY && twice.iter().all(|(_, &n)| n <= 3),
        "more reruns than jobs in flight at {event}: {twice:?}"
    );
    let dead: i64 = run(con, cmd("ZCARD").arg(format!("{{{queue}}}:dead")));
    assert_eq!(dead, 0);
    assert_queue_empty(con, queue);
}

/// A worker of each library through a restart of its server: the server
/// shuts down cleanly mid-run (every worker's connections close) and comes
/// back on the same port, replaying its AOF slowly enough that the workers
/// are refused with `LOADING` for a while. Each worker goes on by itself and
/// runs jobs after the restart; every job is done, none dead, nothing left
/// behind; a job runs twice only if it was in flight at the shutdown (at
/// most the workers' total concurrency).
#[test]
fn each_library_goes_on_through_a_restart_and_loading() {
    let test = "each_library_goes_on_through_a_restart_and_loading";
    let Some(()) = or_skip(test, python().map(|_| ())) else {
        return;
    };
    let Some(()) = or_skip(test, node_ready()) else {
        return;
    };
    rust_crossworker();
    // Every write reaches the AOF before its reply, so the restart loses
    // nothing; the replay of each command waits 150 µs (key-load-delay),
    // a second or more of LOADING for this queue's AOF, with clients
    // answered every 1,024 bytes read.
    let durable = common::Options::aof_replay();
    let mut server = Server::start_with(durable.clone());
    let (url, mut con) = (server.url(), server.conn());
    let queue = "x-restart";
    const JOBS: usize = 2_000;
    let workers = patient_workers(&url, queue);
    let ids = added_from(Rust, &url, queue, JOBS, "r-");
    assert_eq!(ids.len(), JOBS);
    let total_done =
        |con: &mut Connection| -> usize { done_per_worker(con, &workers).iter().sum() };
    wait_until("a fifth of the jobs done", Duration::from_secs(60), || {
        let n = total_done(&mut con);
        (n >= JOBS / 5).then_some(()).ok_or(format!("{n} done"))
    });
    let before = done_per_worker(&mut con, &workers);
    let saw_loading = server.restart(
        durable
            .arg("key-load-delay", "150")
            .arg("loading-process-events-interval-bytes", "1024"),
    );
    assert!(saw_loading, "the restarted server was never seen LOADING");
    let mut con = server.conn();
    let left = JOBS - before.iter().sum::<usize>().min(JOBS);
    println!("restart with {left} of {JOBS} jobs not yet done");
    assert!(left > 0, "the queue was done before the restart");
    wait_until("every job done", Duration::from_secs(120), || {
        let n = distinct_done(&mut con, &workers);
        (n >= JOBS).then_some(()).ok_or(format!("{n} done"))
    });

    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    for ((lang, done, worker), before) in workers.into_iter().zip(before) {
        worker.stop();
        let counts = done_counts(&mut con, &done);
        assert!(
            counts.len() > before,
            "the {lang:?} worker ran nothing after the restart ({before} before)"
        );
        for (id, n) in counts {
            *seen.entry(id).or_default() += n;
        }
    }
    let want: BTreeSet<&String> = ids.iter().collect();
    assert_done_with_reruns_only_in_flight(&mut con, queue, &seen, want, "the restart");
}

/// `count=<n>` of `errorstat_<code>` in `INFO errorstats` (0 when absent).
fn error_count(con: &mut Connection, code: &str) -> u64 {
    let stats: String = run(con, cmd("INFO").arg("errorstats"));
    common::field_of(&stats, &format!("errorstat_{code}"))
        .split(',')
        .find_map(|kv| kv.strip_prefix("count="))
        .map_or(0, |n| n.parse().expect("a count"))
}

/// A standalone failover seen through a primary endpoint, as on a managed
/// service whose endpoint (a DNS name) moves to the new primary: each
/// library's worker connects to the endpoint (a proxy here); mid-run the
/// primary's writes are paused, its replica catches up and is promoted, the
/// endpoint is pointed to it and the old primary is made its replica. The
/// connections opened before still reach the old primary, which now refuses
/// writes (`READONLY`) and unblocks the blocked reads (`UNBLOCKED`): each
/// worker must drop them and reconnect through the endpoint. Every job is
/// done, none dead, nothing left behind on the new primary; a job runs twice
/// only if it was in flight at the failover. Then the way back while the
/// queue is idle, where the workers' blocked reads meet `UNBLOCKED`.
#[test]
fn each_library_goes_on_through_a_failover_behind_an_endpoint() {
    let test = "each_library_goes_on_through_a_failover_behind_an_endpoint";
    let Some(()) = or_skip(test, python().map(|_| ())) else {
        return;
    };
    let Some(()) = or_skip(test, node_ready()) else {
        return;
    };
    rust_crossworker();
    let (old, new, mut old_con, mut new_con) =
        common::primary_and_replica(common::Options::default());
    let endpoint = common::proxy::Endpoint::start(old.port);
    let url = endpoint.url();
    let queue = "x-failover";
    const JOBS: usize = 2_000;
    let workers = patient_workers(&url, queue);
    let ids = added_from(Rust, &url, queue, JOBS, "f-");
    assert_eq!(ids.len(), JOBS);
    let done_on = |con: &mut Connection| done_per_worker(con, &workers);
    wait_until("a fifth of the jobs done", Duration::from_secs(60), || {
        let n: usize = done_on(&mut old_con).iter().sum();
        (n >= JOBS / 5).then_some(()).ok_or(format!("{n} done"))
    });

    // The failover, as a managed service makes it.
    let _: () = run(
        &mut old_con,
        cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE"),
    );
    // (WAIT is paused too: the offsets say when the replica has it all.)
    wait_until("the replica caught up", Duration::from_secs(30), || {
        let p = common::info_field(&mut old_con, "replication", "master_repl_offset");
        let r = common::info_field(&mut new_con, "replication", "master_repl_offset");
        (p == r && !p.is_empty())
            .then_some(())
            .ok_or(format!("primary {p}, replica {r}"))
    });
    let before = done_on(&mut old_con);
    let errors_before =
        error_count(&mut old_con, "READONLY") + error_count(&mut old_con, "UNBLOCKED");
    let _: () = run(&mut new_con, cmd("REPLICAOF").arg("NO").arg("ONE"));
    endpoint.point_to(new.port);
    let _: () = run(
        &mut old_con,
        cmd("REPLICAOF").arg("127.0.0.1").arg(new.port),
    );
    let _: () = run(&mut old_con, cmd("CLIENT").arg("UNPAUSE"));
    let left = JOBS - before.iter().sum::<usize>().min(JOBS);
    println!("failover with {left} of {JOBS} jobs not yet done");
    assert!(left > 0, "the queue was done before the failover");

    wait_until("every job done", Duration::from_secs(120), || {
        let n = distinct_done(&mut new_con, &workers);
        (n >= JOBS).then_some(()).ok_or(format!("{n} done"))
    });
    let readonly = error_count(&mut old_con, "READONLY");
    let unblocked = error_count(&mut old_con, "UNBLOCKED");
    println!("the old primary answered READONLY {readonly} and UNBLOCKED {unblocked} times (before the failover: {errors_before})");
    assert!(
        readonly + unblocked > errors_before,
        "no worker met READONLY or UNBLOCKED on the old primary"
    );
    let after = done_on(&mut new_con);
    for ((lang, _, _), (before, after)) in workers.iter().zip(before.iter().zip(&after)) {
        assert!(
            after > before,
            "the {lang:?} worker ran nothing after the failover ({before} before)"
        );
    }

    // And back, on an idle queue: the workers wait in blocked reads, which
    // the demoted server ends with UNBLOCKED (Valkey 8.0 then closes the
    // connection, so a command pipelined behind the read meets a closed
    // connection). No pause: nothing is written.
    common::wait_replica_synced(&mut new_con, &mut old_con);
    let unblocked_before = error_count(&mut new_con, "UNBLOCKED");
    let _: () = run(&mut old_con, cmd("REPLICAOF").arg("NO").arg("ONE"));
    endpoint.point_to(old.port);
    let _: () = run(
        &mut new_con,
        cmd("REPLICAOF").arg("127.0.0.1").arg(old.port),
    );
    const MORE: usize = 300;
    let more = added_from(Rust, &url, queue, MORE, "g-");
    assert_eq!(more.len(), MORE);
    wait_until(
        "every job done after the way back",
        Duration::from_secs(120),
        || {
            let n = distinct_done(&mut old_con, &workers);
            (n >= JOBS + MORE).then_some(()).ok_or(format!("{n} done"))
        },
    );
    let unblocked = error_count(&mut new_con, "UNBLOCKED") - unblocked_before;
    println!("the server demoted on the way back answered UNBLOCKED {unblocked} times");
    assert!(unblocked > 0, "no blocked read met UNBLOCKED");

    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    for (_, done, worker) in workers {
        worker.stop();
        for (id, n) in done_counts(&mut old_con, &done) {
            *seen.entry(id).or_default() += n;
        }
    }
    let want: BTreeSet<&String> = ids.iter().chain(&more).collect();
    assert_done_with_reruns_only_in_flight(&mut old_con, queue, &seen, want, "the failover");
    println!("the endpoint accepted {} connections", endpoint.accepted());
}

/// Every library's `add` goes through `ECHO.ADD`, so the release limit
/// governs first runs as it does retries. On a queue with no limit an add is
/// the plain write into the stream (counted in `echomq_added_direct`); on a
/// limited queue every add, with a generated id (a transaction) or a given
/// one (the script), goes into the schedule (counted in `echomq_scheduled`)
/// and a worker's promotions release them within the limit: in every
/// stretch of `t` ms at most `burst + floor(t * rate)` entries, each job
/// once. In both cases the add itself made the stream and the workers'
/// group (a missing `pending` would have become a list).
#[test]
fn every_librarys_add_passes_the_release_limit() {
    let Some((_server, url, mut con)) =
        three_languages("every_librarys_add_passes_the_release_limit")
    else {
        return;
    };
    const RATE_PER_S: u64 = 100;
    const BURST: u64 = 10;
    let (generated, given) = (150, 50);
    let langs = [Python, Node, Rust];
    let limited = |lang: Lang| format!("limited-{lang:?}").to_lowercase();
    let limits: Vec<String> = langs
        .iter()
        .map(|&lang| format!("{{{}}}:schedule {RATE_PER_S}/s {BURST}", limited(lang)))
        .collect();
    let _: () = run(
        &mut con,
        cmd("CONFIG")
            .arg("SET")
            .arg("echomq.release-limits")
            .arg(limits.join(" ")),
    );
    for lang in langs {
        let free = format!("free-{lang:?}").to_lowercase();
        let direct = echomq_stat(&mut con, "echomq_added_direct");
        added_generated(lang, &url, &free, generated);
        added_from(lang, &url, &free, given, "g-");
        let total = generated + given;
        assert_eq!(
            echomq_stat(&mut con, "echomq_added_direct") - direct,
            total as u64,
            "{lang:?}: every add on a free queue is an ECHO.ADD into pending"
        );
        let len: usize = run(&mut con, cmd("XLEN").arg(format!("{{{free}}}:pending")));
        assert_eq!(len, total, "{lang:?}: the free queue's adds are in pending");

        let queue = limited(lang);
        let pending = format!("{{{queue}}}:pending");
        let scheduled = echomq_stat(&mut con, "echomq_scheduled");
        added_generated(lang, &url, &queue, generated);
        added_from(lang, &url, &queue, given, "g-");
        assert_eq!(
            echomq_stat(&mut con, "echomq_scheduled") - scheduled,
            total as u64,
            "{lang:?}: every add on a limited queue went into its schedule"
        );
        let len: usize = run(&mut con, cmd("XLEN").arg(&pending));
        assert_eq!(
            len, 0,
            "{lang:?}: nothing straight into a limited queue's pending"
        );
        for key in [&pending, &format!("{{{free}}}:pending")] {
            let groups: Vec<redis::Value> = run(&mut con, cmd("XINFO").arg("GROUPS").arg(key));
            assert_eq!(
                groups.len(),
                1,
                "{lang:?}: the add made {key} a stream with its group"
            );
        }

        let done = format!("{{{queue}}}:done");
        let jobs = total.to_string();
        let out = run_to_end(
            lang,
            &[
                "work",
                "--url",
                &url,
                "--queue",
                &queue,
                "--done",
                &done,
                "--jobs",
                &jobs,
                "--deadline-secs",
                "60",
                "--log-takes",
            ],
        );
        let (takes, _) = parse_work(lang, &out);
        let counts = done_counts(&mut con, &done);
        assert_eq!(counts.len(), total, "{lang:?}: every job done");
        assert!(
            counts.values().all(|&n| n == 1),
            "{lang:?}: each job once: {counts:?}"
        );
        assert_eq!(takes.len(), total, "{lang:?}: each job taken once");
        let mut released: Vec<i64> = takes.iter().map(|t| t.entry_ms).collect();
        released.sort_unstable();
        // The entry ids' clock can read up to 1 ms past the limiter's.
        for t_ms in [0u64, 100, 500, 1000] {
            let bound = BURST + (t_ms + 1) * RATE_PER_S / 1000;
            let most = released
                .iter()
                .enumerate()
                .map(|(i, &from)| {
                    released[i..]
                        .iter()
                        .take_while(|&&at| at <= from + t_ms as i64)
                        .count() as u64
                })
                .max()
                .unwrap_or(0);
            assert!(
                most <= bound,
                "{lang:?}: {most} released within {t_ms} ms, the limit allows {bound}"
            );
        }
    }
}

/// Every library, producer and worker, runs as the least-privilege user of
/// docs/security.md (plus `~{*}:done +hincrby`, the crossworker handler's
/// own counting): adds with new and given ids, runs, failures to dead, a
/// `RetryAfter` hold, the dead set read, a requeue, a purge and a recurring
/// job declared, listed and ended, with the default user off and not one
/// refusal in `ACL LOG`.
#[test]
fn each_library_runs_as_the_documented_acl_user() {
    let Some((server, _, mut admin)) =
        three_languages("each_library_runs_as_the_documented_acl_user")
    else {
        return;
    };
    let mut words = acl_line("echomq-app", "app-pw");
    words.extend(["~{*}:done".to_string(), "+hincrby".to_string()]);
    let _: () = run(&mut admin, cmd(&words[0]).arg(&words[1..]));
    let _: () = run(
        &mut admin,
        cmd("ACL").arg("SETUSER").arg("default").arg("off"),
    );
    let url = format!("redis://echomq-app:app-pw@127.0.0.1:{}/", server.port);
    let _: () = run(&mut admin, cmd("ACL").arg("LOG").arg("RESET"));
    // Node first: its scripts meet NOSCRIPT and are sent with EVAL.
    for lang in [Node, Python, Rust] {
        let queue = format!("acl-{lang:?}").to_lowercase();
        let (done, dead) = (format!("{{{queue}}}:done"), format!("{{{queue}}}:dead"));
        let base = ["--url", url.as_str(), "--queue", queue.as_str()];
        // Given ids first: the add script makes the stream (TYPE, XGROUP).
        let mut ids = added_from(lang, &url, &queue, 10, "j-");
        ids.extend(added_generated(lang, &url, &queue, 10));
        // A job whose id ends in an odd number fails its one attempt
        // (--fail-first 1) and is dead; the others are done.
        let odd = |id: &String| {
            let digits = id.len() - id.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            id[id.len() - digits..]
                .parse::<u64>()
                .is_ok_and(|i| i % 2 == 1)
        };
        let planned_dead = ids.iter().filter(|id| odd(id)).count();
        run_to_end(
            lang,
            &[
                &["work"][..],
                &base,
                &[
                    "--done",
                    &done,
                    "--jobs",
                    "20",
                    "--fail-first",
                    "1",
                    "--max-attempts",
                    "1",
                ],
                &["--deadline-secs", "60"],
            ]
            .concat(),
        );
        let (n_done, n_dead): (usize, usize) = (
            run(&mut admin, cmd("HLEN").arg(&done)),
            run(&mut admin, cmd("ZCARD").arg(&dead)),
        );
        assert_eq!(
            (n_done, n_dead),
            (20 - planned_dead, planned_dead),
            "{lang:?}: done and dead"
        );
        assert_eq!(
            dead_from(lang, &url, &queue).len(),
            planned_dead,
            "{lang:?}: the dead set read"
        );
        // A requeued job answers "retry after" on its one attempt: the
        // worker holds the queue (ECHO.HOLD), and the job is dead again.
        let requeued = run_to_end(lang, &[&["requeue"][..], &base, &["--id", "j-1"]].concat());
        assert_eq!(requeued.trim(), "true", "{lang:?}: requeued");
        run_to_end(
            lang,
            &[
                &["work"][..],
                &base,
                &["--done", &done, "--jobs", "20", "--overload-every", "1"],
                &[
                    "--retry-after-ms",
                    "50",
                    "--max-attempts",
                    "1",
                    "--deadline-secs",
                    "60",
                ],
            ]
            .concat(),
        );
        let n_dead: usize = run(&mut admin, cmd("ZCARD").arg(&dead));
        assert_eq!(
            n_dead, planned_dead,
            "{lang:?}: the requeued job dead again"
        );
        let purged = run_to_end(lang, &[&["purge"][..], &base].concat());
        assert_eq!(purged.trim(), planned_dead.to_string(), "{lang:?}: purged");
        // A recurring job declared, listed and ended.
        let declare = ["--id", "tick", "--spec", "every:60000", "--payload", "p"];
        let fire = run_to_end(lang, &[&["repeat"][..], &base, &declare].concat());
        let listed = run_to_end(lang, &[&["repeats"][..], &base].concat());
        assert!(
            listed.contains(&format!("\"fire_at_ms\": {}", fire.trim()))
                || listed.contains(&format!("\"fire_at_ms\":{}", fire.trim())),
            "{lang:?}: {listed}"
        );
        let ended = run_to_end(
            lang,
            &[&["unrepeat"][..], &base, &["--id", "tick"]].concat(),
        );
        assert_eq!(ended.trim(), "true", "{lang:?}: unrepeated");
        assert_eq!(acl_log(&mut admin), [], "{lang:?}: refused by the ACL");
    }
}

/// `count` jobs of the job group `group` (not the consumer group) added by
/// `lang`'s crossworker with the ids `<prefix>0` ..: a child still running.
fn spawn_grouped_add(
    lang: Lang,
    url: &str,
    queue: &str,
    count: usize,
    prefix: &str,
    group: &str,
) -> std::process::Child {
    let n = count.to_string();
    let mut args = add_args(url, queue, &n, prefix);
    args.extend(["--group", group]);
    crossworker(lang, &args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{lang:?} crossworker add: {e}"))
}

/// Groups across the languages: one job group of 3,000 jobs added first (in
/// Python), then 5 groups of 20 each (in Node.js and Rust), on a queue
/// released by the server's timer at 500/s once all are added: every job of
/// the small groups starts before at most 200 of the big group's (in FIFO
/// order they would wait behind all 3,000), with workers of all three
/// languages, each job done exactly once.
#[test]
fn small_groups_are_not_stuck_behind_a_big_one() {
    let Some((_server, url, mut con)) =
        three_languages("small_groups_are_not_stuck_behind_a_big_one")
    else {
        return;
    };
    let queue = "x-fair";
    let (big, small, per_small) = (3_000, 5, 20);
    for (name, value) in [
        (
            "echomq.release-limits",
            format!("{{{queue}}}:schedule 500/s 50"),
        ),
        (
            "echomq.auto-promote",
            format!("{{{queue}}}:schedule {{{queue}}}:pending"),
        ),
    ] {
        let _: () = run(&mut con, cmd("CONFIG").arg("SET").arg(name).arg(value));
    }
    // Held while the groups are added, so the order the jobs start in is the
    // fair release's alone, not how long a loaded machine takes to start
    // the adding processes (at 500/s a slow start let 1,133 big-group jobs
    // go first once).
    let schedule = format!("{{{queue}}}:schedule");
    let _: i64 = run(&mut con, cmd("ECHO.HOLD").arg(&schedule).arg(600_000));
    let started = format!("{{{queue}}}:started");
    let workers =
        start_counting_workers(&url, queue, &["--started", &started, "--concurrency", "10"]);
    let mut adding = spawn_grouped_add(Python, &url, queue, big, "big-", "big");
    assert!(
        adding.wait().expect("wait").success(),
        "the big group added"
    );
    let adds: Vec<_> = (1..=small)
        .map(|g| {
            let lang = if g % 2 == 0 { Node } else { Rust };
            let (prefix, group) = (format!("s{g}-"), format!("s{g}"));
            spawn_grouped_add(lang, &url, queue, per_small, &prefix, &group)
        })
        .collect();
    for mut add in adds {
        assert!(add.wait().expect("wait").success(), "a small group added");
    }
    let _: i64 = run(&mut con, cmd("ECHO.HOLD").arg(&schedule).arg(0));
    let total = big + small * per_small;
    wait_all_done(&mut con, &workers, total);
    let seen = stop_and_tally(&mut con, workers);
    let want: BTreeSet<String> = (0..big)
        .map(|i| format!("big-{i}"))
        .chain((1..=small).flat_map(|g| (0..per_small).map(move |i| format!("s{g}-{i}"))))
        .collect();
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        want,
        "the jobs done are the jobs added"
    );
    assert!(
        seen.values().all(|langs| langs.len() == 1),
        "a job run by two workers"
    );
    let order: Vec<String> = run(&mut con, cmd("LRANGE").arg(&started).arg(0).arg(-1));
    assert_eq!(order.len(), total, "each job started once");
    let last_small = order
        .iter()
        .rposition(|id| !id.starts_with("big-"))
        .expect("small jobs ran");
    let big_before = order[..last_small]
        .iter()
        .filter(|id| id.starts_with("big-"))
        .count();
    eprintln!("big-group jobs started before the last small-group job: {big_before} of {big}");
    // One round of the release takes one job of each group: the small groups
    // are done after 20 rounds, so about 20 big-group jobs go first, plus
    // what the 30 workers' slots reorder.
    assert!(
        big_before <= 200,
        "{big_before} of the big group's jobs started before the last small group's job"
    );
    let keys: Vec<String> = run(&mut con, cmd("KEYS").arg(format!("{{{queue}}}:schedule*")));
    assert_eq!(keys, Vec::<String>::new(), "no group key left");
    assert_queue_empty(&mut con, queue);
}

/// One run's start, as `--log-starts` wrote it: the start's and the pending
/// entry's server ms (the entry's: when the release put the run in pending).
#[derive(Debug)]
struct Start {
    lang: Lang,
    at_ms: i64,
    entry_ms: i64,
    job: String,
    attempt: u64,
}

/// The ms part of a stream entry id.
fn id_ms(id: &str) -> i64 {
    let ms = id.split('-').next().and_then(|ms| ms.parse().ok());
    ms.unwrap_or_else(|| panic!("not a stream entry id: {id:?}"))
}

/// Every start `lang`'s worker logged in the stream `key`.
fn starts_in(con: &mut Connection, lang: Lang, key: &str) -> Vec<Start> {
    let entries: Vec<(String, BTreeMap<String, String>)> =
        run(con, cmd("XRANGE").arg(key).arg("-").arg("+"));
    entries
        .into_iter()
        .map(|(id, f)| Start {
            lang,
            at_ms: id_ms(&id),
            entry_ms: id_ms(&f["entry"]),
            job: f["job"].clone(),
            attempt: f["attempt"].parse().expect("attempt"),
        })
        .collect()
}

/// A worker of `holder`'s language answers the first job of group A with
/// `RetryAfter(2000)` holding its own group (Python `RetryAfter(ms,
/// group=job.group)`, Node.js `new RetryAfter(ms, { group: job.group })`,
/// Rust `JobError::retry_after(ms, job.group)`), with workers of the other
/// two languages running: by the server's clock, as each handler logged it,
/// no job of A is released or starts in any language before the hold's end,
/// jobs of B are released and start during it, and after it every job of A
/// runs, each once, the one that asked for the hold on its second attempt.
///
/// A hold stops a group's release, not what was released before it, so
/// group A is kept to one job until the hold is in force by a limit of 1/h
/// burst 1 (`ECHO.GROUPLIMIT`), lifted once the hold's key exists; from then
/// on only the hold keeps A back. B is limited to 20/s, so its 100 jobs leave
/// over 5 s, across the hold. The queue is released by the workers' own
/// promotes (it is not in `echomq.auto-promote`), so each language's release
/// meets the hold. The holder starts alone and takes A's first job; it
/// sleeps 1.5 s in every run, so the other two are started while it holds
/// the job, and must be ready before the hold ends.
fn a_group_hold_stops_that_group_in_every_language(holder: Lang, test: &str) {
    let Some((_server, url, mut con)) = three_languages(test) else {
        return;
    };
    let queue = format!("x-ghold-{holder:?}").to_lowercase();
    let schedule = format!("{{{queue}}}:schedule");
    let (a_jobs, b_jobs, hold_ms) = (30, 100, 2000_i64);
    for (group, limit) in [("A", "1/h"), ("B", "20/s")] {
        let _: () = run(
            &mut con,
            cmd("ECHO.GROUPLIMIT")
                .arg(&schedule)
                .arg(group)
                .arg(limit)
                .arg(1),
        );
    }
    let others: Vec<Lang> = [Python, Node, Rust]
        .into_iter()
        .filter(|&l| l != holder)
        .collect();
    let adds = [
        (
            others[0],
            "A",
            spawn_grouped_add(others[0], &url, &queue, a_jobs, "a-", "A"),
        ),
        (
            others[1],
            "B",
            spawn_grouped_add(others[1], &url, &queue, b_jobs, "b-", "B"),
        ),
    ];
    for (lang, group, mut add) in adds {
        assert!(
            add.wait().expect("wait").success(),
            "{lang:?} added {group}"
        );
    }
    let keys = |lang: Lang| {
        let l = format!("{lang:?}").to_lowercase();
        (
            format!("{{{queue}}}:done-{l}"),
            format!("{{{queue}}}:starts-{l}"),
        )
    };
    let worker = |lang: Lang, extra: &[&str]| {
        let (done, starts) = keys(lang);
        let mut args = vec![
            "--url",
            &url,
            "--queue",
            &queue,
            "--done",
            &done,
            "--log-starts",
            &starts,
            "--backoff",
            "fixed:100",
        ];
        args.extend_from_slice(extra);
        spawn_work(lang, &args)
    };
    let ready = |lang: Lang, (child, stdout): (std::process::Child, std::process::ChildStdout)| {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
            .expect("read the worker's first line");
        assert_eq!(line.trim(), "ready", "{lang:?} worker did not start");
        (lang, keys(lang).0, Worker { lang, child })
    };
    let hold = hold_ms.to_string();
    let holding = worker(
        holder,
        &[
            "--hold-group-on",
            "a-0",
            "--retry-after-ms",
            &hold,
            "--sleep-ms",
            "1500",
        ],
    );
    let mut workers = vec![ready(holder, holding)];
    let holder_starts = keys(holder).1;
    wait_until("the holder started a-0", Duration::from_secs(20), || {
        let jobs: Vec<String> = starts_in(&mut con, holder, &holder_starts)
            .into_iter()
            .map(|s| s.job)
            .collect();
        jobs.contains(&"a-0".to_string())
            .then_some(())
            .ok_or(format!("started {jobs:?}"))
    });
    let spawned: Vec<_> = others.iter().map(|&l| (l, worker(l, &[]))).collect();
    workers.extend(spawned.into_iter().map(|(l, w)| ready(l, w)));
    let hold_key = format!("{schedule}:echomq-ghold:A");
    let mut until = 0_i64;
    wait_until("group A held", Duration::from_secs(20), || {
        let value: Option<i64> = run(&mut con, cmd("GET").arg(&hold_key));
        until = value.ok_or("no hold yet")?;
        Ok(())
    });
    let _: () = run(
        &mut con,
        cmd("ECHO.GROUPLIMIT")
            .arg(&schedule)
            .arg("A")
            .arg("DEFAULT"),
    );
    let (now_s, now_us): (i64, i64) = run(&mut con, &cmd("TIME"));
    let now_ms = now_s * 1000 + now_us / 1000;
    assert!(
        now_ms < until,
        "the other workers were ready only {} ms after the hold ended: the scenario did not happen",
        now_ms - until
    );
    wait_all_done(&mut con, &workers, a_jobs + b_jobs);
    let mut starts = Vec::new();
    for &lang in &[Python, Node, Rust] {
        starts.extend(starts_in(&mut con, lang, &keys(lang).1));
    }
    let seen = stop_and_tally(&mut con, workers);
    let held_from = until - hold_ms;
    let first: Vec<&Start> = starts
        .iter()
        .filter(|s| s.job == "a-0" && s.attempt == 1)
        .collect();
    assert!(
        first.len() == 1 && first[0].lang == holder && first[0].at_ms < until,
        "a-0's first run, by the holder, before the hold's end: {first:?}"
    );
    for s in starts.iter().filter(|s| s.job.starts_with("a-")) {
        if s.job == "a-0" && s.attempt == 1 {
            continue;
        }
        assert!(
            s.entry_ms >= until && s.at_ms >= until,
            "{s:?}: a job of the held group released or started {} ms before the hold's end ({until})",
            until - s.at_ms.min(s.entry_ms)
        );
    }
    let retries: Vec<&Start> = starts
        .iter()
        .filter(|s| s.job == "a-0" && s.attempt == 2)
        .collect();
    assert_eq!(retries.len(), 1, "a-0 retried once: {retries:?}");
    let b_in_hold: Vec<&Start> = starts
        .iter()
        .filter(|s| s.job.starts_with("b-"))
        .filter(|s| s.entry_ms >= held_from && s.at_ms < until)
        .collect();
    let by_lang = |lang: Lang| b_in_hold.iter().filter(|s| s.lang == lang).count();
    eprintln!(
        "{holder:?} held A until {until}; the others ready and A's limit lifted {} ms before its end; B released and started during the hold: {} (Python {}, Node {}, Rust {})",
        until - now_ms,
        b_in_hold.len(),
        by_lang(Python),
        by_lang(Node),
        by_lang(Rust)
    );
    assert!(
        !b_in_hold.is_empty(),
        "no job of B was released and started during A's hold"
    );
    let want: BTreeSet<String> = (0..a_jobs)
        .map(|i| format!("a-{i}"))
        .chain((0..b_jobs).map(|i| format!("b-{i}")))
        .collect();
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        want,
        "the jobs done are the jobs added"
    );
    assert!(
        seen.values().all(|langs| langs.len() == 1),
        "a job done by two workers"
    );
    let mut runs: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &starts {
        *runs.entry(s.job.as_str()).or_default() += 1;
    }
    for (job, n) in &runs {
        let want = if *job == "a-0" { 2 } else { 1 };
        assert_eq!(*n, want, "{job} started {n} times");
    }
    assert_eq!(runs.len(), want.len(), "every job started");
    let _: () = run(
        &mut con,
        cmd("ECHO.GROUPLIMIT")
            .arg(&schedule)
            .arg("B")
            .arg("DEFAULT"),
    );
    // An emptied group's bucket stays until it no longer matters (docs/groups.md):
    // A's, at 1/h, for up to an hour; B's, at 20/s, is gone.
    let bucket = format!("{schedule}:echomq-gtat:A");
    let keys: Vec<String> = run(&mut con, cmd("KEYS").arg(format!("{schedule}*")));
    assert_eq!(
        keys,
        std::slice::from_ref(&bucket),
        "no group key left but A's bucket"
    );
    let ttl: i64 = run(&mut con, cmd("PTTL").arg(&bucket));
    assert!(
        (1..=3_600_000).contains(&ttl),
        "A's bucket expires within the hour: PTTL {ttl}"
    );
    assert_queue_empty(&mut con, &queue);
}

#[test]
fn a_group_hold_from_python_stops_that_group_in_every_language() {
    a_group_hold_stops_that_group_in_every_language(
        Python,
        "a_group_hold_from_python_stops_that_group_in_every_language",
    );
}

#[test]
fn a_group_hold_from_node_stops_that_group_in_every_language() {
    a_group_hold_stops_that_group_in_every_language(
        Node,
        "a_group_hold_from_node_stops_that_group_in_every_language",
    );
}

#[test]
fn a_group_hold_from_rust_stops_that_group_in_every_language() {
    a_group_hold_stops_that_group_in_every_language(
        Rust,
        "a_group_hold_from_rust_stops_that_group_in_every_language",
    );
}
