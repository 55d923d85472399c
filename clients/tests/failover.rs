//! The three client libraries' workers (the crossworker programs of Rust,
//! Python and Node.js, support/mod.rs) through failovers and slot moves:
//! one worker of each language shares a queue that the server promotes by
//! itself (`echomq.auto-promote`), and mid-run the queue's primary hands
//! over, as a cluster's `CLUSTER FAILOVER` (plain, and `FORCE`), as a
//! standalone pair's `REPLICAOF` swap behind a movable primary endpoint,
//! and as a slot migration (legacy, and Valkey 9's atomic one), of plain
//! and release-limited queues. The libraries retry what the switch refuses
//! (`UNBLOCKED`, `READONLY`, `MOVED`, `ASK`, a closed connection) on the new
//! primary and finish the queue.
//!
//! The libraries deliver at least once: every job is done (counted in the
//! `--done` hash), none dead, nothing left pending, scheduled or
//! unacknowledged; a job is run, or counted done, more often than planned
//! only if it was in flight (delivered, not acknowledged) at the switch.
//! Each job's runs come from the workers' `took <entry> <job> <attempt>`
//! lines: `job-<odd>` fails its first attempt and is retried 30 ms later,
//! so it runs twice (attempts 1, 2), `job-<even>` once.
//!
//! A worker is done when the queue is: the test waits until it is drained
//! on its last owner, then stops every worker with SIGTERM, each of which
//! must still be running then (it did not give up) and exit 0.
//!
//! Outside CI a missing Python or Node.js says SKIPPED for that worker and
//! the test runs with the others; in CI (`CI=true`) it fails.

mod support;

use echomq_testkit as common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::{self, sleep, JoinHandle};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::inspect::{echomq_stat, limits_from, limits_of};
use common::node::or_skip;
use common::proxy::Endpoint;
use common::{
    cmd, info_field, q, server_time_ms, start_replica, versions, wait_replica_synced, wait_until,
    Connection, Options, Server, Value,
};
use support::*;

/// Jobs in the queue of the short runs: `job-<i>`, due 10 ms apart.
const N: usize = 240;

/// How the workers of a test run their jobs: `sleep_ms` a job, `concurrency`
/// handlers each, entries taken over after `lease_ms`.
#[derive(Clone, Copy)]
struct Plan {
    sleep_ms: u64,
    concurrency: u32,
    lease_ms: u64,
    /// `--fail-first`: `job-<i>` fails its first `i % (fail_first + 1)` attempts.
    fail_first: u64,
    /// `--shards`: the queue's shards (1: a queue of one hash tag).
    shards: usize,
}

/// The plan of the short runs: a 3 s lease, well above a 20 ms job, so no
/// live worker's entry is taken over.
const PLAN: Plan = Plan {
    sleep_ms: 20,
    concurrency: 2,
    lease_ms: 3000,
    fail_first: 1,
    shards: 1,
};

/// Where a worker connects: a cluster through a seed node (`--cluster`), or
/// one server (a node's own slots only, or a primary endpoint).
#[derive(Clone, Copy)]
enum At<'a> {
    Cluster(&'a str),
    Plain(&'a str),
}

/// The workers of a test: Rust always, Python and Node.js when present
/// (SKIPPED outside CI when not, a failure in CI). Each is built or
/// installed here, before any clock of the test starts.
fn langs(test: &str) -> Vec<Lang> {
    let mut langs = vec![Rust];
    rust_crossworker();
    if or_skip(&format!("{test} (its Python worker)"), python().map(|_| ())).is_some() {
        langs.push(Python);
    }
    if or_skip(&format!("{test} (its Node.js worker)"), node_ready()).is_some() {
        langs.push(Node);
    }
    langs
}

/// Reads `from` to its end on a thread of its own (a pipe left unread would
/// stop a worker that logs its takes once the pipe is full).
fn drain(mut from: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        let _ = from.read_to_string(&mut text);
        text
    })
}

/// A running `crossworker work`, its stdout and stderr read while it runs;
/// killed by pid and reaped on drop.
struct Working {
    name: String,
    child: Option<Child>,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
}

/// What a worker printed: its takes (in the order it took them), the rest
/// of its stdout, its stderr, and how it exited.
struct Output {
    name: String,
    takes: Vec<Take>,
    out: String,
    err: String,
    status: Option<ExitStatus>,
}

/// One `took` line.
#[derive(Clone, Debug)]
struct Take {
    entry: (i64, u64),
    job: String,
    attempt: u64,
}

/// `<ms>-<seq>` as numbers, ordered as the stream orders them.
fn entry_id(id: &str) -> (i64, u64) {
    let (ms, seq) = id
        .split_once('-')
        .unwrap_or_else(|| panic!("entry ID {id}"));
    (ms.parse().expect("ms"), seq.parse().expect("seq"))
}

impl Working {
    /// A worker of `queue` at `at`: `job-<odd>` fails its first attempt and
    /// is retried 30 ms later (`fixed:30`), 3 attempts and 3 deliveries at
    /// most, every take logged, successes counted in `{queue}:done`.
    fn start(lang: Lang, at: At, queue: &str, name: &str, plan: Plan) -> Working {
        let (url, cluster) = match at {
            At::Cluster(url) => (url, true),
            At::Plain(url) => (url, false),
        };
        let done = key(queue, "done");
        let (sleep_ms, concurrency, lease, fail_first, shards) = (
            plan.sleep_ms.to_string(),
            plan.concurrency.to_string(),
            plan.lease_ms.to_string(),
            plan.fail_first.to_string(),
            plan.shards.to_string(),
        );
        let mut args = vec![
            "work",
            "--url",
            url,
            "--queue",
            queue,
            "--done",
            &done,
            "--log-takes",
            "--fail-first",
            &fail_first,
            "--backoff",
            "fixed:30",
            "--max-attempts",
            "3",
            "--max-deliveries",
            "3",
            "--sleep-ms",
            &sleep_ms,
            "--concurrency",
            &concurrency,
            "--lease-ms",
            &lease,
            // a guard only: the test stops the workers well before
            "--deadline-secs",
            "300",
        ];
        if cluster {
            args.push("--cluster");
        }
        if plan.shards > 1 {
            args.extend(["--shards", &shards]);
        }
        let mut child = crossworker(lang, &args)
            .env("PYTHONUNBUFFERED", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start worker {name}: {e}"));
        let out = child.stdout.take().map(drain);
        let err = child.stderr.take().map(drain);
        Working {
            name: name.to_string(),
            child: Some(child),
            out,
            err,
        }
    }

    /// Each language's worker at `at`, named by its language and `tag`.
    fn all(langs: &[Lang], at: At, queue: &str, tag: &str, plan: Plan) -> Vec<Working> {
        langs
            .iter()
            .map(|&lang| {
                let name = format!("{lang:?}{tag}").to_lowercase();
                Working::start(lang, at, queue, &name, plan)
            })
            .collect()
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().expect("try_wait"))
    }

    /// Sends `signal` (`TERM`, `KILL`) and waits up to 30 s for the exit;
    /// then its output.
    fn end(&mut self, signal: &str) -> Output {
        let mut child = self.child.take().expect("a running worker");
        let mut status = child.try_wait().expect("try_wait");
        if status.is_none() {
            let pid = child.id().to_string();
            let _ = Command::new("kill")
                .args([&format!("-{signal}"), &pid])
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while status.is_none() && Instant::now() < deadline {
                sleep(Duration::from_millis(20));
                status = child.try_wait().expect("try_wait");
            }
            if status.is_none() {
                let _ = child.kill();
            }
        }
        let _ = child.wait();
        let out = self
            .out
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let err = self
            .err
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let mut takes = Vec::new();
        let mut rest = Vec::new();
        for line in out.lines() {
            let Some(take) = line.strip_prefix("took ") else {
                rest.push(line);
                continue;
            };
            let parts: Vec<&str> = take.split(' ').collect();
            let [entry, job, attempt] = parts[..] else {
                panic!("{}: {line:?}", self.name);
            };
            takes.push(Take {
                entry: entry_id(entry),
                job: job.to_string(),
                attempt: attempt.parse().expect("attempt"),
            });
        }
        Output {
            name: self.name.clone(),
            takes,
            out: rest.join("\n"),
            err,
            status,
        }
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Output {
    fn report(&self) -> String {
        format!(
            "{} ({:?}, {} takes):\nstdout: {}\nstderr: {}\n",
            self.name,
            self.status,
            self.takes.len(),
            self.out.trim(),
            self.err.trim()
        )
    }
}

fn key(queue: &str, suffix: &str) -> String {
    format!("{{{queue}}}:{suffix}")
}

/// Whether `queue` on `con` is done with: `n` jobs counted done, no job
/// left (`{queue}:jobs` holds the payload of every job not done), nothing
/// scheduled, in the stream or unacknowledged.
fn drained(con: &mut Connection, queue: &str, n: usize) -> Result<(), String> {
    sharded_drained(con, &[queue.to_string()], &key(queue, "done"), n, 0)
}

/// Waits (3 minutes at most) until the queue is drained on `con`, the
/// workers all still running, then stops each with SIGTERM: each must exit
/// 0. Returns their outputs; panics with all of them when a worker exited
/// early or failed, or the queue was not done in time.
fn finish(workers: &mut [Working], con: &mut Connection, queue: &str, n: usize) -> Vec<Output> {
    finish_when(workers, Duration::from_secs(180), || drained(con, queue, n))
}

/// [`finish`] with its own test of done (`done_with`, an error saying what
/// is left) and time limit.
fn finish_when(
    workers: &mut [Working],
    within: Duration,
    mut done_with: impl FnMut() -> Result<(), String>,
) -> Vec<Output> {
    let deadline = Instant::now() + within;
    let mut why = String::new();
    loop {
        if let Some(w) = workers
            .iter_mut()
            .find_map(|w| w.exited().map(|_| w.name.clone()))
        {
            why = format!("{w} exited before the queue was done ({why})");
            break;
        }
        match done_with() {
            Ok(()) => {
                why.clear();
                break;
            }
            Err(e) => why = e,
        }
        if Instant::now() > deadline {
            why = format!("the queue was not done within {within:?}: {why}");
            break;
        }
        sleep(Duration::from_millis(50));
    }
    let outputs: Vec<Output> = workers.iter_mut().map(|w| w.end("TERM")).collect();
    let mut report = String::new();
    for o in &outputs {
        println!("{}", o.report());
        report.push_str(&o.report());
    }
    assert!(why.is_empty(), "{why}\n{report}");
    for o in &outputs {
        assert!(
            o.status.is_some_and(|s| s.success()),
            "{} did not exit 0 on SIGTERM:\n{report}",
            o.name
        );
        assert!(
            o.out.contains("summary "),
            "{}: no summary\n{report}",
            o.name
        );
    }
    outputs
}

/// Every worker went on on the new primary: it took an entry released
/// there after the switch (the entry's ID is the server's ms of its
/// release; the switch is `after_ms` by the new primary's clock).
fn assert_all_went_on(outputs: &[Output], after_ms: i64) {
    for o in outputs {
        let after = o.takes.iter().filter(|t| t.entry.0 >= after_ms).count();
        assert!(
            after > 0,
            "{} took nothing released after the switch ({after_ms}):\n{}",
            o.name,
            o.report()
        );
    }
}

fn all_takes(outputs: &[Output]) -> Vec<Take> {
    outputs.iter().flat_map(|o| o.takes.clone()).collect()
}

/// `CONFIG SET name value` on every node, as a deployment would.
fn set_everywhere(cluster: &Cluster, name: &str, value: &str) {
    for node in cluster.nodes.iter().filter(|n| n.is_up()) {
        let _: () = q!(&mut node.conn(), "CONFIG", "SET", name, value);
    }
}

/// The queue's pair in `echomq.auto-promote` on every node, and the group
/// on the owner.
fn promoted_queue(cluster: &Cluster, queue: &str, owner: usize) {
    let pair = format!("{} {}", key(queue, "schedule"), key(queue, "pending"));
    set_everywhere(cluster, "echomq.auto-promote", &pair);
    create_group(&mut cluster.conn(owner), queue);
}

fn create_group(con: &mut Connection, queue: &str) {
    let _: () = q!(
        con,
        "XGROUP",
        "CREATE",
        key(queue, "pending"),
        "workers",
        "0",
        "MKSTREAM"
    );
}

/// The owner of `slot`, another primary and the third one.
fn three_primaries(cluster: &Cluster, slot: u16) -> (usize, usize, usize) {
    let a = cluster.owner(slot);
    let primaries = cluster.primaries();
    let b = *primaries.iter().find(|&&i| i != a).unwrap();
    let third = *primaries.iter().find(|&&i| i != a && i != b).unwrap();
    (a, b, third)
}

/// Waits until the group `workers` of `queue`'s stream has `n` consumers
/// (each library's worker is one, once it reads).
fn wait_consumers(con: &mut Connection, queue: &str, n: usize) {
    let pending = key(queue, "pending");
    wait_until(
        "the workers' consumers joined",
        Duration::from_secs(60),
        || {
            let consumers: Vec<Value> = cmd!("XINFO", "CONSUMERS", &pending, "workers")
                .query(con)
                .map_err(|e| e.to_string())?;
            (consumers.len() >= n)
                .then_some(())
                .ok_or(format!("{} of {n}", consumers.len()))
        },
    );
}

/// `job-<i>` added for each delay of `delays_ms` (ms from now by the
/// server's clock), as a library adds a delayed job: its payload into
/// `{queue}:jobs` and `ECHO.SCHEDULE`, all in one MULTI/EXEC.
fn add_jobs(con: &mut Connection, queue: &str, delays_ms: &[i64]) {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for (i, delay) in delays_ms.iter().enumerate() {
        pipe.cmd("HSET")
            .arg(key(queue, "jobs"))
            .arg(format!("job-{i}"))
            .arg(format!("payload-{i}"))
            .ignore();
        pipe.cmd("ECHO.SCHEDULE")
            .arg(key(queue, "schedule"))
            .arg(format!("job-{i}"))
            .arg(*delay);
    }
    let fire_at: Vec<i64> = pipe.query(con).expect("HSET, ECHO.SCHEDULE");
    assert_eq!(fire_at.len(), delays_ms.len());
    assert_eq!(echomq_stat(con, "echomq_scheduled"), delays_ms.len() as u64);
}

/// `n` jobs due `apart_ms` apart from now.
fn schedule_n_apart(con: &mut Connection, queue: &str, n: usize, apart_ms: i64) {
    let delays: Vec<i64> = (0..n as i64).map(|i| i * apart_ms).collect();
    add_jobs(con, queue, &delays);
}

fn done_count(con: &mut Connection, queue: &str) -> Result<u64, String> {
    cmd!("HLEN", key(queue, "done"))
        .query(con)
        .map_err(|e| e.to_string())
}

/// Waits until `at_least` jobs are done: the switch falls mid-run.
fn wait_done(con: &mut Connection, queue: &str, at_least: u64) {
    wait_until("the workers got going", Duration::from_secs(60), || {
        let done = done_count(con, queue)?;
        (done >= at_least)
            .then_some(())
            .ok_or(format!("{done} done"))
    });
}

/// The entries delivered and not acknowledged in `queue`'s stream on `con`:
/// entry ID -> job.
fn in_flight_entries(con: &mut Connection, queue: &str) -> BTreeMap<String, String> {
    let pending = key(queue, "pending");
    let rows: Vec<(String, String, u64, u64)> =
        q!(con, "XPENDING", &pending, "workers", "-", "+", 10_000);
    let mut entries = BTreeMap::new();
    for (id, ..) in rows {
        let found: Vec<(String, Vec<String>)> = q!(con, "XRANGE", &pending, &id, &id);
        for (_, fields) in found {
            if let [field, job] = &fields[..] {
                assert_eq!(field, "job");
                entries.insert(id.clone(), job.clone());
            }
        }
    }
    entries
}

/// The jobs delivered and not acknowledged in `queue`'s stream on `con`.
fn in_flight_on(con: &mut Connection, queue: &str) -> HashSet<String> {
    in_flight_entries(con, queue).into_values().collect()
}

/// Stops `con`'s server taking writes (CLIENT PAUSE WRITE, reads still
/// served) and returns the jobs in flight there. Nothing is delivered or
/// acknowledged on it after this.
fn pause_and_read_in_flight(con: &mut Connection, queue: &str) -> HashSet<String> {
    pause_and_read_in_flight_of(con, &[queue])
}

/// [`pause_and_read_in_flight`] of several queues (the shards a node owns).
fn pause_and_read_in_flight_of(con: &mut Connection, queues: &[&str]) -> HashSet<String> {
    let _: () = q!(con, "CLIENT", "PAUSE", 20_000, "WRITE");
    queues.iter().flat_map(|q| in_flight_on(con, q)).collect()
}

fn role(con: &mut Connection) -> Result<String, String> {
    let role: Vec<Value> = cmd!("ROLE").query(con).map_err(|e| e.to_string())?;
    match role.first() {
        Some(Value::BulkString(r)) => Ok(String::from_utf8_lossy(r).into_owned()),
        other => Err(format!("ROLE {other:?}")),
    }
}

/// Waits until the server of `con` reports itself primary (ROLE).
fn wait_primary(con: &mut Connection, what: &str) {
    wait_until(what, Duration::from_secs(30), || {
        match role(con)?.as_str() {
            "master" => Ok(()),
            other => Err(other.to_string()),
        }
    });
}

/// The end state on the queue's last owner, after `finish`: every job done,
/// none dead, nothing left of the queue but its empty stream and group; each
/// job run exactly as planned (`job-<odd>` attempts 1 and 2, `job-<even>`
/// attempt 1) and counted done once, or, only if it was in flight at a
/// switch, run more often (a takeover, a resent step) and counted done more
/// than once (at least once). Returns the jobs run again.
fn check_jobs(
    con: &mut Connection,
    queue: &str,
    n: usize,
    in_flight: &HashSet<String>,
    takes: &[Take],
) -> Vec<String> {
    let job = |i: usize| format!("job-{i}");
    let done: BTreeMap<String, u64> = q!(con, "HGETALL", key(queue, "done"));
    let want: BTreeSet<String> = (0..n).map(job).collect();
    let got: BTreeSet<String> = done.keys().cloned().collect();
    let lost: Vec<&String> = want.difference(&got).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert_eq!(got, want, "only the queue's jobs done");
    let dead: Vec<String> = q!(con, "ZRANGE", key(queue, "dead"), 0, -1);
    assert!(dead.is_empty(), "dead: {dead:?}");
    let summary: Vec<Value> = q!(con, "XPENDING", key(queue, "pending"), "workers");
    assert_eq!(
        summary.first(),
        Some(&Value::Int(0)),
        "unacknowledged: {summary:?}"
    );
    let len: i64 = q!(con, "XLEN", key(queue, "pending"));
    assert_eq!(len, 0, "entries left in the stream");
    for suffix in ["schedule", "jobs", "attempts", "errors"] {
        let exists: i64 = q!(con, "EXISTS", key(queue, suffix));
        assert_eq!(exists, 0, "{} left", key(queue, suffix));
    }
    let mut runs: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for t in takes {
        assert!(want.contains(&t.job), "not a job of the test: {t:?}");
        runs.entry(t.job.as_str()).or_default().push(t.attempt);
    }
    let mut reruns = Vec::new();
    for i in 0..n {
        let planned = 1 + (i as u64 % 2);
        let name = job(i);
        // sorted: the takes come worker by worker, not in time order
        let mut attempts = runs.get(name.as_str()).cloned().unwrap_or_default();
        attempts.sort();
        let times = done[&name];
        if in_flight.contains(&name) {
            assert!(
                attempts.len() as u64 >= planned,
                "{name}: runs {attempts:?}, {planned} planned"
            );
            if attempts.len() as u64 > planned || times > 1 {
                reruns.push(name);
            }
        } else {
            let want: Vec<u64> = (1..=planned).collect();
            assert_eq!(
                attempts, want,
                "{name}'s runs: it was not in flight at the switch ({in_flight:?})"
            );
            assert_eq!(
                times, 1,
                "{name} done {times} times: it was not in flight at the switch ({in_flight:?})"
            );
        }
    }
    let more: BTreeMap<&String, &u64> = done.iter().filter(|(_, t)| **t > 1).collect();
    println!(
        "in flight at the switch: {in_flight:?}; run again: {reruns:?}; done more than once: \
         {more:?}"
    );
    reruns
}

fn assert_no_promote_errors(cluster: &Cluster) {
    for i in 0..cluster.nodes.len() {
        let errors = echomq_stat(&mut cluster.conn(i), "echomq_auto_promote_errors");
        assert_eq!(errors, 0, "node {}", cluster.port(i));
    }
}

#[test]
fn workers_in_three_languages_go_on_through_a_cluster_failover() {
    let test = "workers_in_three_languages_go_on_through_a_cluster_failover";
    let langs = langs(test);
    let queue = "fo";
    let cluster = Cluster::start();
    let slot = cluster.keyslot(&key(queue, "schedule"));
    let a = cluster.owner(slot);
    let r = cluster.replica_of(a);
    let mut on_a = cluster.conn(a);
    let mut on_r = cluster.conn(r);
    promoted_queue(&cluster, queue, a);

    // Each worker knows only the old owner: after the failover its cluster
    // client learns the new one from the cluster (MOVED, a refreshed map).
    let seed = cluster.nodes[a].url();
    let mut workers = Working::all(&langs, At::Cluster(&seed), queue, "", PLAN);
    wait_consumers(&mut on_a, queue, workers.len());
    schedule_n_apart(&mut on_a, queue, N, 10);
    wait_done(&mut on_a, queue, 40);

    let in_flight = pause_and_read_in_flight(&mut on_a, queue);
    let done_before = done_count(&mut on_a, queue).unwrap();
    // The replica takes over once it has everything A wrote (A is paused).
    let _: () = q!(&mut on_r, "CLUSTER", "FAILOVER");
    wait_primary(&mut on_r, "the replica took over");
    let _: () = q!(&mut on_a, "CLIENT", "UNPAUSE");
    let switched = server_time_ms(&mut on_r);
    println!(
        "failover with {done_before} of {N} done, {} in flight",
        in_flight.len()
    );
    assert!(
        done_before < N as u64,
        "the queue was done before the failover"
    );

    let outputs = finish(&mut workers, &mut on_r, queue, N);
    assert_all_went_on(&outputs, switched);
    cluster.wait_stable(Duration::from_secs(30));
    assert_eq!(cluster.owner(slot), r, "the slot is the new primary's");
    check_jobs(&mut on_r, queue, N, &in_flight, &all_takes(&outputs));
    // The new primary promoted the rest, by its own timer.
    assert!(echomq_stat(&mut on_r, "echomq_auto_promoted") > 0);
    assert_no_promote_errors(&cluster);
}

/// A standalone primary and its replica behind a movable primary endpoint
/// (testkit's proxy, as a managed service's DNS name): the workers know only
/// the endpoint. The swap an operator makes: writes paused on the old
/// primary, the replica caught up and promoted, the endpoint moved to it,
/// the old primary made its replica. The connections the workers opened
/// before still reach the old primary, now refusing (`READONLY`,
/// `UNBLOCKED`): each library replaces them through the endpoint.
#[test]
fn workers_in_three_languages_go_on_through_a_replicaof_swap() {
    let test = "workers_in_three_languages_go_on_through_a_replicaof_swap";
    let langs = langs(test);
    let queue = "swap";
    let pair = format!("{} {}", key(queue, "schedule"), key(queue, "pending"));
    let options = Options::default()
        .arg("echomq.auto-promote", &pair)
        .arg("repl-diskless-sync-delay", "0");
    let old = Server::start_with(options.clone());
    let new = start_replica(&old, options);
    let (mut on_old, mut on_new) = (old.conn(), new.conn());
    create_group(&mut on_old, queue);
    let endpoint = Endpoint::start(old.port);

    let url = endpoint.url();
    let mut workers = Working::all(&langs, At::Plain(&url), queue, "", PLAN);
    wait_consumers(&mut on_old, queue, workers.len());
    schedule_n_apart(&mut on_old, queue, N, 10);
    wait_done(&mut on_old, queue, 40);

    let in_flight = pause_and_read_in_flight(&mut on_old, queue);
    let done_before = done_count(&mut on_old, queue).unwrap();
    wait_until("the replica caught up", Duration::from_secs(30), || {
        let p = info_field(&mut on_old, "replication", "master_repl_offset");
        let r = info_field(&mut on_new, "replication", "master_repl_offset");
        (p == r)
            .then_some(())
            .ok_or(format!("primary {p}, replica {r}"))
    });
    let _: () = q!(&mut on_new, "REPLICAOF", "NO", "ONE");
    endpoint.point_to(new.port);
    let accepted = endpoint.accepted();
    let _: () = q!(&mut on_old, "REPLICAOF", "127.0.0.1", new.port);
    let _: () = q!(&mut on_old, "CLIENT", "UNPAUSE");
    let switched = server_time_ms(&mut on_new);
    println!(
        "swap with {done_before} of {N} done, {} in flight",
        in_flight.len()
    );
    assert!(done_before < N as u64, "the queue was done before the swap");

    let outputs = finish(&mut workers, &mut on_new, queue, N);
    assert_all_went_on(&outputs, switched);
    assert!(
        endpoint.accepted() >= accepted + workers.len(),
        "the workers did not reconnect through the endpoint: {accepted} connections before \
         the swap, {} after",
        endpoint.accepted()
    );
    check_jobs(&mut on_new, queue, N, &in_flight, &all_takes(&outputs));
    assert!(info_field(&mut on_new, "echomq", "echomq_auto_promoted") != "0");
    assert_eq!(info_field(&mut on_new, "echomq", "echomq_errors"), "0");
    // The old primary follows the new one and ends with the same data.
    wait_until("the old primary synced", Duration::from_secs(30), || {
        let link = info_field(&mut on_old, "replication", "master_link_status");
        (link == "up").then_some(()).ok_or(link)
    });
    wait_replica_synced(&mut on_new, &mut on_old);
    let digest = |con: &mut Connection| -> String { q!(con, "DEBUG", "DIGEST") };
    assert_eq!(digest(&mut on_old), digest(&mut on_new));
}

/// The release limit of the limited queues below: 200 a second, bursts of 20.
const RATE: i64 = 200;
const BURST: i64 = 20;

/// The same `echomq.auto-promote` pair and `echomq.release-limits` on every
/// node, the stream and its group on the owner.
fn limited_queue(cluster: &Cluster, queue: &str, owner: usize) {
    limited_queue_at(cluster, queue, owner, RATE, BURST);
}

/// `limited_queue` with a limit of `rate` a second, bursts of `burst`.
fn limited_queue_at(cluster: &Cluster, queue: &str, owner: usize, rate: i64, burst: i64) {
    let schedule = key(queue, "schedule");
    let limit = format!("{schedule} {rate}/s {burst}");
    set_everywhere(cluster, "echomq.release-limits", &limit);
    promoted_queue(cluster, queue, owner);
}

/// The new owner's entry, read right after the switch: it goes on from the
/// limit's state key, which came with the slot (at 200/s a spent burst
/// refills in 100 ms, so a switch that took longer finds it full again):
/// the same burst, no hold, never more than a burst available.
/// (tests/cluster.rs holds a slowly refilling limit through a failover, a
/// forced one and a migration, and sees no fresh burst.)
fn assert_within_one_burst(limits: &BTreeMap<String, i64>, who: &str) {
    assert_eq!(limits.get("burst"), Some(&BURST), "{who}: {limits:?}");
    assert_eq!(limits.get("held-until-ms"), Some(&0), "{who}: {limits:?}");
    let available = limits["available"];
    assert!(
        (0..=BURST).contains(&available),
        "{who} may release more than a burst: {limits:?}"
    );
}

/// At the end: `released` on a primary counts every member its limit let out
/// of the schedule since its own entry was set, which, with only this queue
/// promoted there, is every auto-promotion it made.
fn assert_released_all_it_promoted(con: &mut Connection, queue: &str, who: &str) {
    let released = limits_of(con, &key(queue, "schedule"))["released"];
    let promoted = echomq_stat(con, "echomq_auto_promoted");
    assert_eq!(
        released as u64, promoted,
        "{who}: released vs auto-promoted"
    );
}

/// A LIMITED queue (`echomq.release-limits` "{q}:schedule 200/s 20" and the
/// auto-promote pair on every node) under a Rust, a Python and a Node.js
/// worker, through a CLUSTER FAILOVER of the slot's owner. The jobs fall due
/// at 500 a second, over twice the rate, so the old owner works through a
/// backlog its limit holds back. The replica releases nothing until it
/// takes over; then it goes on from the limit's state key, replicated, and
/// every job is done, as without a limit.
#[test]
fn workers_in_three_languages_go_on_through_a_cluster_failover_of_a_limited_queue() {
    let test = "workers_in_three_languages_go_on_through_a_cluster_failover_of_a_limited_queue";
    let langs = langs(test);
    let queue = "lfo";
    let schedule = key(queue, "schedule");
    let cluster = Cluster::start();
    let slot = cluster.keyslot(&schedule);
    let a = cluster.owner(slot);
    let r = cluster.replica_of(a);
    let mut on_a = cluster.conn(a);
    let mut on_r = cluster.conn(r);
    limited_queue(&cluster, queue, a);
    // The replica serves reads of its slots once told READONLY: its own
    // entry, full, nothing released.
    let _: () = q!(&mut on_r, "READONLY");
    let before = limits_of(&mut on_r, &schedule);
    assert_eq!(before.get("available"), Some(&BURST), "{before:?}");
    assert_eq!(before.get("released"), Some(&0), "{before:?}");

    let seed = cluster.nodes[a].url();
    let mut workers = Working::all(&langs, At::Cluster(&seed), queue, "", PLAN);
    wait_consumers(&mut on_a, queue, workers.len());
    schedule_n_apart(&mut on_a, queue, N, 2);
    wait_done(&mut on_a, queue, 40);

    let in_flight = pause_and_read_in_flight(&mut on_a, queue);
    let done_before = done_count(&mut on_a, queue).unwrap();
    let old_owner = limits_of(&mut on_a, &schedule);
    let _: () = q!(&mut on_r, "CLUSTER", "FAILOVER");
    wait_primary(&mut on_r, "the replica took over");
    let new_owner = limits_of(&mut on_r, &schedule);
    let _: () = q!(&mut on_a, "CLIENT", "UNPAUSE");
    let switched = server_time_ms(&mut on_r);
    println!(
        "failover with {done_before} of {N} done, {} in flight; ECHO.LIMITS on the old owner \
         at the pause: {old_owner:?}; on the new one right after: {new_owner:?}",
        in_flight.len()
    );
    assert!(
        done_before < N as u64,
        "the queue was done before the failover"
    );
    assert_within_one_burst(&new_owner, "the new owner");

    let outputs = finish(&mut workers, &mut on_r, queue, N);
    assert_all_went_on(&outputs, switched);
    cluster.wait_stable(Duration::from_secs(30));
    assert_eq!(cluster.owner(slot), r, "the slot is the new primary's");
    check_jobs(&mut on_r, queue, N, &in_flight, &all_takes(&outputs));
    // The old owner's limit held back part of the backlog; each primary
    // released, under its own entry, exactly what its timer promoted.
    assert!(echomq_stat(&mut on_a, "echomq_release_limited") > 0);
    assert!(echomq_stat(&mut on_r, "echomq_auto_promoted") > 0);
    assert_released_all_it_promoted(&mut on_r, queue, "the new owner");
    assert_no_promote_errors(&cluster);
}

/// The same limited queue and workers, its slot migrated mid-run to another
/// primary (IMPORTING/MIGRATING, one MIGRATE of every key of the slot,
/// SETSLOT NODE everywhere). The workers know only the old owner: their
/// cluster clients follow ASK while the slot moves and MOVED after. The new
/// owner's entry, read while it imports the slot (ASKING), is full and has
/// released nothing (the state key has not come yet); right after the
/// switch it goes on from the state key that came with the slot; every job
/// is done.
#[test]
fn workers_in_three_languages_go_on_through_a_slot_migration_of_a_limited_queue() {
    let test = "workers_in_three_languages_go_on_through_a_slot_migration_of_a_limited_queue";
    let langs = langs(test);
    let queue = "lmig";
    let schedule = key(queue, "schedule");
    let cluster = Cluster::start();
    let slot = cluster.keyslot(&schedule);
    let (a, b, third) = three_primaries(&cluster, slot);
    let (a_id, b_id) = (cluster.id(a), cluster.id(b));
    let mut on_a = cluster.conn(a);
    let mut on_b = cluster.conn(b);
    limited_queue(&cluster, queue, a);

    let seed = cluster.nodes[a].url();
    let mut workers = Working::all(&langs, At::Cluster(&seed), queue, "", PLAN);
    wait_consumers(&mut on_a, queue, workers.len());
    schedule_n_apart(&mut on_a, queue, N, 2);
    wait_done(&mut on_a, queue, 40);

    let setslot = |con: &mut Connection, args: &[&str]| {
        let _: () = q!(con, "CLUSTER", "SETSLOT", slot, args);
    };
    setslot(&mut on_b, &["IMPORTING", &a_id]);
    setslot(&mut on_a, &["MIGRATING", &b_id]);
    // B, importing, answers for the slot after ASKING: its own entry, full,
    // nothing released (a primary promotes no slot it imports).
    let (_, reply): ((), Vec<Value>) = redis::pipe()
        .cmd("ASKING")
        .cmd("ECHO.LIMITS")
        .arg(&schedule)
        .query(&mut on_b)
        .expect("ASKING ECHO.LIMITS on B");
    let importing = limits_from(&reply);
    assert_eq!(importing.get("available"), Some(&BURST), "{importing:?}");
    assert_eq!(importing.get("released"), Some(&0), "{importing:?}");

    // In flight at the move: delivered and not acknowledged on A before the
    // MIGRATE, or still so on B right after it (delivered in between).
    let mut in_flight = in_flight_on(&mut on_a, queue);
    let done_before = done_count(&mut on_a, queue).unwrap();
    let old_owner = limits_of(&mut on_a, &schedule);
    let keys: Vec<String> = q!(&mut on_a, "CLUSTER", "GETKEYSINSLOT", slot, 100);
    let reply: String = q!(
        &mut on_a,
        "MIGRATE",
        "127.0.0.1",
        cluster.port(b),
        "",
        0,
        10_000,
        "KEYS",
        &keys
    );
    assert_eq!(reply, "OK");
    setslot(&mut on_b, &["NODE", &b_id]);
    let new_owner = limits_of(&mut on_b, &schedule);
    let switched = server_time_ms(&mut on_b);
    in_flight.extend(in_flight_on(&mut on_b, queue));
    setslot(&mut on_a, &["NODE", &b_id]);
    setslot(&mut cluster.conn(third), &["NODE", &b_id]);
    println!(
        "migration with {done_before} of {N} done, {} in flight; ECHO.LIMITS on the old owner \
         before the MIGRATE: {old_owner:?}; on the new one right after: {new_owner:?}",
        in_flight.len()
    );
    assert!(done_before < N as u64, "the queue was done before the move");
    assert_within_one_burst(&new_owner, "the new owner");
    wait_until("the slot is B's", Duration::from_secs(30), || {
        cluster.check_stable()?;
        (cluster.owner(slot) == b)
            .then_some(())
            .ok_or("not yet".to_string())
    });

    let outputs = finish(&mut workers, &mut on_b, queue, N);
    assert_all_went_on(&outputs, switched);
    check_jobs(&mut on_b, queue, N, &in_flight, &all_takes(&outputs));
    let left_on_a: i64 = q!(&mut on_a, "CLUSTER", "COUNTKEYSINSLOT", slot);
    assert_eq!(left_on_a, 0);
    assert!(echomq_stat(&mut on_a, "echomq_release_limited") > 0);
    assert!(echomq_stat(&mut on_b, "echomq_auto_promoted") > 0);
    assert_released_all_it_promoted(&mut on_b, queue, "the new owner");
    assert_no_promote_errors(&cluster);
}

/// The jobs of the long runs below: `job-0` .. `job-2999`, due 1 ms apart
/// (1,000 a second, twice the limit, so the limit holds a backlog), each
/// `job-<odd>` retried once: 4,500 releases.
const LONG_N: usize = 3000;
/// Their release limit: 500 a second, bursts of 50 (about 9 s of releases).
const LONG_RATE: i64 = 500;
const LONG_BURST: i64 = 50;
/// A stream entry's ID carries the server's command-time snapshot, taken
/// when the event-loop iteration that runs the promotion timer began, while
/// the hold is checked against the wall clock when the tick runs: an entry
/// released at or after a hold's end can carry an ID up to one iteration
/// (a few ms, more on a loaded machine) earlier. Its start is exact: an
/// entry released before the ECHO.HOLD carries at most the hold's start ms.
const HOLD_END_SLACK_MS: i64 = 25;

/// How a long run moves its queue's slot.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Move {
    /// `CLUSTER MIGRATESLOTS SLOTSRANGE s s NODE <next primary>` (Valkey 9).
    Atomic,
    /// `CLUSTER SETSLOT IMPORTING/MIGRATING`, `MIGRATE` of every key of the
    /// slot, `SETSLOT NODE` on every primary, to the next primary.
    Legacy,
    /// `CLUSTER FAILOVER [FORCE]` by the owner's replica, with the owner's
    /// writes paused first (CLIENT PAUSE WRITE), for FORCE the replica
    /// caught up with it by offset, and the pause kept until the old owner
    /// has turned replica. FORCE neither waits for the primary's offset nor
    /// makes the primary pause itself: without the pause, what the primary
    /// wrote after the replica's last offset would be lost, and so would
    /// what it took, believing itself primary still, between the election
    /// and learning of it; with it, nothing is lost.
    Failover { force: bool },
}

/// An `ECHO.HOLD` of `ms` the test set: nothing released in
/// `(until - ms, until)`.
#[derive(Clone, Copy, Debug)]
struct Held {
    ms: i64,
    until: i64,
}

fn hold_on(con: &mut Connection, schedule: &str, ms: i64) -> Held {
    let until: i64 = q!(con, "ECHO.HOLD", schedule, ms);
    assert!(until > 0, "ECHO.HOLD {schedule} {ms}: {until}");
    Held { ms, until }
}

/// What the workers' takes show of the releases: every job released (its
/// first release is its lowest entry ID: retries and takeovers come later),
/// the first releases in fire-time order, each job released as planned
/// (`job-<odd>` twice; a job run again after a move, once or twice), and no
/// entry released inside a hold. Returns how many entries were released.
fn check_takes(takes: &[Take], n: usize, holds: &[Held], reruns: &[String]) -> usize {
    let mut job_of: BTreeMap<(i64, u64), String> = BTreeMap::new();
    for t in takes {
        let before = job_of.insert(t.entry, t.job.clone());
        assert!(
            before.as_deref().is_none_or(|b| b == t.job),
            "entry {:?} taken as {} and as {before:?}",
            t.entry,
            t.job
        );
    }
    let index = |job: &str| -> usize {
        job.strip_prefix("job-")
            .and_then(|i| i.parse().ok())
            .unwrap_or_else(|| panic!("not a job of the test: {job}"))
    };
    let mut releases: BTreeMap<usize, Vec<(i64, u64)>> = BTreeMap::new();
    for (id, job) in &job_of {
        releases.entry(index(job)).or_default().push(*id);
    }
    let missing: Vec<usize> = (0..n).filter(|i| !releases.contains_key(i)).collect();
    assert!(missing.is_empty(), "never taken: {missing:?}");
    assert_eq!(releases.len(), n, "only the test's jobs");
    for (&i, ids) in &releases {
        let planned = 1 + i % 2;
        let job = format!("job-{i}");
        if reruns.contains(&job) {
            assert!(ids.len() <= planned, "{job} released {ids:?}");
        } else {
            assert_eq!(ids.len(), planned, "{job} released {ids:?}");
        }
    }
    // First releases in entry-ID order: the jobs in the order they fell due.
    let mut firsts: Vec<((i64, u64), usize)> =
        releases.iter().map(|(&i, ids)| (ids[0], i)).collect();
    firsts.sort();
    for pair in firsts.windows(2) {
        let ((a_id, a), (b_id, b)) = (pair[0], pair[1]);
        assert!(
            a < b,
            "release order broken: job-{a} first released as {a_id:?}, before job-{b} \
             first released as {b_id:?}"
        );
    }
    for h in holds {
        let start = h.until - h.ms;
        let inside: Vec<(&(i64, u64), &String)> = job_of
            .iter()
            .filter(|((ms, _), _)| start < *ms && *ms < h.until - HOLD_END_SLACK_MS)
            .collect();
        let last_before = job_of.range(..(start + 1, 0)).next_back().map(|(id, _)| id);
        let first_after = job_of.range((start + 1, 0)..).next().map(|(id, _)| id);
        println!(
            "hold of {} ms until {}: last entry before {last_before:?}, first after its \
             start {first_after:?}",
            h.ms, h.until
        );
        assert!(
            inside.is_empty(),
            "released inside the hold {h:?}: {inside:?}"
        );
    }
    println!(
        "{} takes of {} entries; {} jobs, first released in order",
        takes.len(),
        job_of.len(),
        releases.len()
    );
    job_of.len()
}

/// The long run: a limited queue (`LONG_RATE`/s, bursts of `LONG_BURST`,
/// the auto-promote pair on every node) under a Rust, a Python and a Node.js
/// worker that know only the first owner, `LONG_N` jobs, an `ECHO.HOLD` of
/// 300 ms on the owner early on and one of 2.5 s right before the first move
/// (its hold key moves with the slot), and the slot moved by each of `moves`
/// in turn, spread over the run: migrations go to the next primary each
/// time (A to B, B to C, C back to A, so both directions and back),
/// failovers to the owner's replica. Then: the workers all went on after
/// the last move and exit 0 on SIGTERM once the queue is done; every job
/// done, none dead, nothing left; a job run or done more often than planned
/// only if it was in flight at a move, and with `exact` none at all; every
/// release exactly once (the promotions of all nodes add up to the entries
/// taken), in fire-time order, none inside a hold; the new owner showing the
/// hold after the first move; no promotion errors.
fn long_run_through(test: &str, queue: &str, cluster: &Cluster, moves: &[Move], exact: bool) {
    let run = Instant::now();
    let langs = langs(test);
    let schedule = key(queue, "schedule");
    let slot = cluster.keyslot(&schedule);
    let a = cluster.owner(slot);
    let primaries = cluster.primaries();
    let at = primaries.iter().position(|&p| p == a).unwrap();
    let cycle: Vec<usize> = (0..primaries.len())
        .map(|k| primaries[(at + k) % primaries.len()])
        .collect();
    limited_queue_at(cluster, queue, a, LONG_RATE, LONG_BURST);
    let plan = Plan {
        sleep_ms: 2,
        ..PLAN
    };
    let seed = cluster.nodes[a].url();
    let mut workers = Working::all(&langs, At::Cluster(&seed), queue, "", plan);
    let mut owner = a;
    let mut on_owner = cluster.conn(a);
    wait_consumers(&mut on_owner, queue, workers.len());
    schedule_n_apart(&mut on_owner, queue, LONG_N, 1);

    let mut holds = Vec::new();
    wait_done(&mut on_owner, queue, 200);
    holds.push(hold_on(&mut on_owner, &schedule, 300));
    let mut in_flight = HashSet::new();
    let mut migrations = 0;
    let mut switched = 0;
    for (i, &how) in moves.iter().enumerate() {
        wait_done(
            &mut on_owner,
            queue,
            (LONG_N * (i + 1) / (moves.len() + 2)) as u64,
        );
        let held = (i == 0).then(|| hold_on(&mut on_owner, &schedule, 2500));
        holds.extend(held);
        let done_before = done_count(&mut on_owner, queue).unwrap();
        let started = Instant::now();
        let (to, moved) = match how {
            Move::Atomic | Move::Legacy => {
                migrations += 1;
                let to = cycle[migrations % cycle.len()];
                let moved = if how == Move::Atomic {
                    atomic_move(cluster, slot, queue, owner, to)
                } else {
                    legacy_move(cluster, slot, queue, owner, to)
                };
                (to, moved)
            }
            Move::Failover { force } => {
                let r = cluster.replica_of(owner);
                (r, failover_move(cluster, &[queue], owner, r, force))
            }
        };
        wait_until("the slot is the target's", Duration::from_secs(60), || {
            cluster.check_stable()?;
            (cluster.owner(slot) == to)
                .then_some(())
                .ok_or("not yet".to_string())
        });
        let took = started.elapsed();
        let from = owner;
        owner = to;
        on_owner = cluster.conn(to);
        switched = server_time_ms(&mut on_owner);
        let limits = limits_of(&mut on_owner, &schedule);
        println!(
            "{test}: move {i} {how:?} {} -> {} with {done_before} of {LONG_N} done, settled \
             in {took:?}; {} in flight: {moved:?}; ECHO.LIMITS on the new owner: {limits:?}",
            cluster.port(from),
            cluster.port(to),
            moved.len()
        );
        assert!(
            done_before < LONG_N as u64,
            "the queue was done before move {i}"
        );
        if let Some(h) = held {
            assert_eq!(
                limits.get("held-until-ms"),
                Some(&h.until),
                "the new owner does not show the hold set before the move ({h:?}, the move \
                 settled in {took:?}): {limits:?}"
            );
        }
        in_flight.extend(moved);
    }

    let outputs = finish(&mut workers, &mut on_owner, queue, LONG_N);
    assert_all_went_on(&outputs, switched);
    cluster.wait_stable(Duration::from_secs(30));
    assert_eq!(cluster.owner(slot), owner, "the slot is the last target's");
    let takes = all_takes(&outputs);
    let reruns = check_jobs(&mut on_owner, queue, LONG_N, &in_flight, &takes);
    if exact {
        assert!(reruns.is_empty(), "run again after a move: {reruns:?}");
    }
    let entries = check_takes(&takes, LONG_N, &holds, &reruns);
    let (mut promoted, mut limited) = (0, 0);
    for i in 0..cluster.nodes.len() {
        let mut con = cluster.conn(i);
        promoted += echomq_stat(&mut con, "echomq_auto_promoted");
        limited += echomq_stat(&mut con, "echomq_release_limited");
    }
    assert_no_promote_errors(cluster);
    assert_eq!(
        promoted, entries as u64,
        "promotions on all nodes vs entries taken: a release made twice, or one not taken"
    );
    assert!(limited > 0, "the limit held nothing back");
    println!(
        "{test}: {entries} releases, holds {holds:?}, in flight at the moves {}, run again \
         {reruns:?}; {:?} in all",
        in_flight.len(),
        run.elapsed()
    );
}

/// `CLUSTER MIGRATESLOTS` of `slot` from `from` to `to`; returns the jobs in
/// flight on `from` right before it (the handover itself is atomic: what a
/// worker acknowledges on `from` up to the switch comes along).
fn atomic_move(
    cluster: &Cluster,
    slot: u16,
    queue: &str,
    from: usize,
    to: usize,
) -> HashSet<String> {
    let mut on_from = cluster.conn(from);
    let in_flight = in_flight_on(&mut on_from, queue);
    cluster.start_atomic_migration(slot, from, to);
    in_flight
}

/// The legacy migration of `slot` from `from` to `to` (IMPORTING, MIGRATING,
/// one MIGRATE of every key of the slot, SETSLOT NODE on every primary);
/// returns the jobs in flight on `from` before the MIGRATE or on `to` right
/// after it.
fn legacy_move(
    cluster: &Cluster,
    slot: u16,
    queue: &str,
    from: usize,
    to: usize,
) -> HashSet<String> {
    let (from_id, to_id) = (cluster.id(from), cluster.id(to));
    let (mut on_from, mut on_to) = (cluster.conn(from), cluster.conn(to));
    let setslot = |con: &mut Connection, args: &[&str]| {
        let _: () = q!(con, "CLUSTER", "SETSLOT", slot, args);
    };
    setslot(&mut on_to, &["IMPORTING", &from_id]);
    setslot(&mut on_from, &["MIGRATING", &to_id]);
    let mut in_flight = in_flight_on(&mut on_from, queue);
    let keys: Vec<String> = q!(&mut on_from, "CLUSTER", "GETKEYSINSLOT", slot, 1000);
    let reply: String = q!(
        &mut on_from,
        "MIGRATE",
        "127.0.0.1",
        cluster.port(to),
        "",
        0,
        10_000,
        "KEYS",
        &keys
    );
    assert_eq!(reply, "OK");
    setslot(&mut on_to, &["NODE", &to_id]);
    in_flight.extend(in_flight_on(&mut on_to, queue));
    setslot(&mut on_from, &["NODE", &to_id]);
    for p in cluster.primaries() {
        if p != from && p != to {
            setslot(&mut cluster.conn(p), &["NODE", &to_id]);
        }
    }
    let left: i64 = q!(&mut on_from, "CLUSTER", "COUNTKEYSINSLOT", slot);
    assert_eq!(left, 0, "keys left on the old owner");
    in_flight
}

/// `CLUSTER FAILOVER [FORCE]` of `primary` by its replica `r`, with the
/// primary's writes paused first; returns the jobs in flight at the pause.
fn failover_move(
    cluster: &Cluster,
    queues: &[&str],
    primary: usize,
    r: usize,
    force: bool,
) -> HashSet<String> {
    let (mut on_p, mut on_r) = (cluster.conn(primary), cluster.conn(r));
    let in_flight = pause_and_read_in_flight_of(&mut on_p, queues);
    if force {
        // FORCE elects the replica without asking the primary for its
        // offset: it must have everything first.
        wait_until("the replica caught up", Duration::from_secs(30), || {
            let p = info_field(&mut on_p, "replication", "master_repl_offset");
            let o = info_field(&mut on_r, "replication", "master_repl_offset");
            (p == o)
                .then_some(())
                .ok_or(format!("primary {p}, replica {o}"))
        });
        let _: () = q!(&mut on_r, "CLUSTER", "FAILOVER", "FORCE");
    } else {
        let _: () = q!(&mut on_r, "CLUSTER", "FAILOVER");
    }
    wait_primary(&mut on_r, "the replica took over");
    // Paused until it knows it is a replica now: unpaused before, the old
    // primary would take writes for a moment, as a primary still, that its
    // resync with the new one then throws away. (A plain CLUSTER FAILOVER
    // pauses it by itself until then; FORCE does not.)
    wait_until(
        "the old primary turned replica",
        Duration::from_secs(30),
        || match role(&mut on_p)?.as_str() {
            "slave" => Ok(()),
            other => Err(other.to_string()),
        },
    );
    let _: () = q!(&mut on_p, "CLIENT", "UNPAUSE");
    in_flight
}

/// Must-show 1 of issue 24: Valkey 9's atomic slot migration of a live,
/// limited, held, auto-promoted queue under workers of the three languages,
/// A to B, B to C and C back to A. Every node declares
/// `handle-atomic-slot-migration`. The handover is atomic: an entry
/// delivered and not acknowledged at the switch stays the same consumer's
/// on the target, whose outcome the worker writes there after MOVED, so no
/// job is run again (asserted: `exact`). Runs on the server under test
/// when it is Valkey 9+, else on a cached Valkey 9 (scripts/valkey-matrix.sh);
/// with none, SKIPPED outside CI and a failure in CI.
#[test]
fn workers_in_three_languages_go_on_through_atomic_slot_migrations_there_and_back() {
    let test = "workers_in_three_languages_go_on_through_atomic_slot_migrations_there_and_back";
    let Some((server, cli)) = versions::valkey_at_least_or_skip(9, test) else {
        return;
    };
    let cluster = Cluster::start_on(&server, &cli);
    for i in 0..cluster.nodes.len() {
        let modules: String = q!(&mut cluster.conn(i), "INFO", "modules");
        let line = modules
            .lines()
            .find(|l| l.starts_with("module:name=echomq,"))
            .unwrap_or_else(|| panic!("no echomq in INFO modules: {modules}"));
        assert!(
            line.contains("handle-atomic-slot-migration"),
            "node {}: {line}",
            cluster.port(i)
        );
    }
    let moves = [Move::Atomic; 3];
    long_run_through(test, "asm", &cluster, &moves, true);
}

/// Must-show 2 of issue 24, the migration half: the same long run with a
/// legacy migration (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE),
/// A to B, B to C, C back to A, on every version. A job in flight at a
/// move may be run again (a worker's step refused mid-move and its entry
/// taken over after the lease), never lost.
#[test]
fn workers_in_three_languages_go_on_through_legacy_slot_migrations_there_and_back() {
    let test = "workers_in_three_languages_go_on_through_legacy_slot_migrations_there_and_back";
    let cluster = Cluster::start();
    let moves = [Move::Legacy; 3];
    long_run_through(test, "legacy", &cluster, &moves, false);
}

/// Must-show 2 of issue 24, the failover half: the same long run through a
/// CLUSTER FAILOVER of the queue's primary and a CLUSTER FAILOVER FORCE
/// back, each with the old primary's writes paused first (and, for FORCE,
/// the replica caught up by offset), on every version: nothing written is
/// lost, a job in flight at the pause may be run again.
#[test]
fn workers_in_three_languages_go_on_through_a_cluster_failover_and_a_forced_one_back() {
    let test = "workers_in_three_languages_go_on_through_a_cluster_failover_and_a_forced_one_back";
    let cluster = Cluster::start();
    let moves = [
        Move::Failover { force: false },
        Move::Failover { force: true },
    ];
    long_run_through(test, "forced", &cluster, &moves, false);
}

/// A queue promoted by its owner (the same `echomq.auto-promote` on every
/// node) is resharded to another primary while workers of the three
/// languages on plain connections to the owner, not cluster clients, work
/// through a backlog (60 ms jobs, 3 handlers each), as a deployment without
/// a cluster client would. One MIGRATE takes every key of the slot to B
/// (atomic on A: a worker sees all of the queue on A or none of it); from
/// then on A redirects everything they send (ASK, then MOVED), which a
/// plain connection cannot follow: they are killed (SIGKILL) as workers
/// that lost their queue, typically holding entries delivered but not
/// acknowledged. MIGRATE carries the stream with its group and those
/// entries to B, where fresh workers, on plain connections to B, take every
/// one of them over after the lease (XAUTOCLAIM) and finish the queue with
/// B's timer promoting. The old and the new workers never run at the same
/// time: a job not in flight at the move runs exactly as planned and is
/// done once; A promoted until the move, B after it, nobody else ever.
#[test]
fn workers_on_plain_connections_lose_a_resharded_queue_and_fresh_ones_finish_it() {
    let test = "workers_on_plain_connections_lose_a_resharded_queue_and_fresh_ones_finish_it";
    let langs = langs(test);
    let queue = "sq";
    let schedule = key(queue, "schedule");
    let cluster = Cluster::start();
    let slot = cluster.keyslot(&schedule);
    let (a, b, third) = three_primaries(&cluster, slot);
    let (a_id, b_id) = (cluster.id(a), cluster.id(b));
    let mut on_a = cluster.conn(a);
    let mut on_b = cluster.conn(b);
    promoted_queue(&cluster, queue, a);
    let plan = Plan {
        sleep_ms: 60,
        concurrency: 3,
        // well above the longest job, so a live worker's entry is never
        // taken over, on a loaded machine too
        lease_ms: 2000,
        ..PLAN
    };

    // 20 jobs due at once, then one every 12 ms over 2.4 s: with the
    // retries of half of them, more than the workers' handlers can do at
    // 60 ms a job, so they work through a backlog, and the move falls in
    // the middle of it, with jobs still scheduled.
    let n = 220;
    let delays: Vec<i64> = (0..n as i64).map(|i| (i - 20).max(0) * 12).collect();
    add_jobs(&mut on_a, queue, &delays);
    let url_a = cluster.nodes[a].url();
    let mut old = Working::all(&langs, At::Plain(&url_a), queue, "-on-a", plan);
    wait_done(&mut on_a, queue, 60);

    let setslot = |con: &mut Connection, args: &[&str]| {
        let _: () = q!(con, "CLUSTER", "SETSLOT", slot, args);
    };
    setslot(&mut on_b, &["IMPORTING", &a_id]);
    setslot(&mut on_a, &["MIGRATING", &b_id]);
    let keys: Vec<String> = q!(&mut on_a, "CLUSTER", "GETKEYSINSLOT", slot, 100);
    for must in ["schedule", "pending", "done", "jobs"] {
        let must = key(queue, must);
        assert!(keys.contains(&must), "{must} not in {keys:?}");
    }
    let reply: String = q!(
        &mut on_a,
        "MIGRATE",
        "127.0.0.1",
        cluster.port(b),
        "",
        0,
        10_000,
        "KEYS",
        &keys
    );
    assert_eq!(reply, "OK");
    let left_on_a: i64 = q!(&mut on_a, "CLUSTER", "COUNTKEYSINSLOT", slot);
    assert_eq!(left_on_a, 0);
    // What they held, delivered but not acknowledged, came along; nothing
    // of the slot is theirs to change any more (A redirects them, and they
    // send no ASKING).
    setslot(&mut on_b, &["NODE", &b_id]);
    let orphaned = in_flight_entries(&mut on_b, queue);
    setslot(&mut on_a, &["NODE", &b_id]);
    setslot(&mut cluster.conn(third), &["NODE", &b_id]);
    wait_until("the slot is B's", Duration::from_secs(30), || {
        cluster.check_stable()?;
        (cluster.owner(slot) == b)
            .then_some(())
            .ok_or("not yet".to_string())
    });
    let old_outputs: Vec<Output> = old.iter_mut().map(|w| w.end("KILL")).collect();
    for o in &old_outputs {
        println!("{}", o.report());
        assert!(!o.takes.is_empty(), "{} took nothing on A", o.name);
    }
    println!(
        "{} entries delivered on A and not acknowledged came to B: {orphaned:?}",
        orphaned.len()
    );
    // Every worker's handlers working 60 ms a job through a backlog: all
    // idle at the move would be a one-in-millions event.
    assert!(!orphaned.is_empty(), "no entry was in flight at the move");

    // Fresh workers on the new owner finish the queue.
    let url_b = cluster.nodes[b].url();
    let mut new = Working::all(&langs, At::Plain(&url_b), queue, "-on-b", plan);
    let new_outputs = finish(&mut new, &mut on_b, queue, n);
    let new_takes = all_takes(&new_outputs);
    for (entry, job) in &orphaned {
        assert!(
            new_takes.iter().any(|t| t.entry == entry_id(entry)),
            "orphaned entry {entry} ({job}) not taken over on B"
        );
    }
    assert!(!new_takes.is_empty(), "nothing done on B");
    let in_flight: HashSet<String> = orphaned.into_values().collect();
    let takes: Vec<Take> = all_takes(&old_outputs)
        .into_iter()
        .chain(new_takes)
        .collect();
    check_jobs(&mut on_b, queue, n, &in_flight, &takes);
    let left_on_a: i64 = q!(&mut on_a, "CLUSTER", "COUNTKEYSINSLOT", slot);
    assert_eq!(left_on_a, 0);
    // A promoted until the move, B after it, nobody else ever.
    assert!(echomq_stat(&mut on_a, "echomq_auto_promoted") > 20);
    assert!(echomq_stat(&mut on_b, "echomq_auto_promoted") > 0);
    for i in (0..cluster.nodes.len()).filter(|&i| i != a && i != b) {
        let moved = echomq_stat(&mut cluster.conn(i), "echomq_auto_promoted");
        assert_eq!(moved, 0, "node {}", cluster.port(i));
    }
    assert_no_promote_errors(&cluster);
}

/// The jobs of the sharded run: `ECHOMQ_SHARDED_JOBS`, else 30,000.
fn sharded_jobs() -> usize {
    std::env::var("ECHOMQ_SHARDED_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000)
}

/// A queue name whose six shards lie two on each primary, so both moves
/// below leave shards of the queue on nodes they do not touch.
fn spread_queue(cluster: &Cluster, shards: usize) -> String {
    let primaries = cluster.primaries();
    (0..100)
        .map(|i| format!("sharded-{i}"))
        .find(|name| {
            let tags = echomq_client::shard_tags(name, shards);
            primaries.iter().all(|&p| {
                tags.iter()
                    .filter(|t| cluster.owner(echomq_client::key_slot(t.as_bytes())) == p)
                    .count()
                    == shards / primaries.len()
            })
        })
        .expect("a name with its shards spread evenly")
}

/// The shards of `tags` whose slot `node` owns.
fn shards_on<'a>(cluster: &Cluster, tags: &'a [String], node: usize) -> Vec<&'a str> {
    tags.iter()
        .filter(|t| cluster.owner(echomq_client::key_slot(t.as_bytes())) == node)
        .map(String::as_str)
        .collect()
}

/// Must-show 2 of issue 26: one queue over six shards (two on each primary
/// of a 3-primary, 3-replica cluster), `ECHOMQ_SHARDED_JOBS` jobs (30,000)
/// added half by Python and half by Node.js (Rust when one is missing),
/// worked by a worker of each language opened on the sharded queue, with a
/// `CLUSTER FAILOVER` of one primary (two shards) a third of the way in and
/// a slot migration of a shard on another primary two thirds in (Valkey 9's
/// atomic one on a 9.x server, else the legacy one). `<p>-<i>` fails its
/// first `i % 4` attempts of at most 3: a quarter of the jobs never fail, a
/// quarter fail once, a quarter twice, and a quarter die on their third.
/// Then: every job done exactly once or dead as its failures say, none lost,
/// each run as planned; a job run or done more often only if it was in
/// flight at a switch (counted and reported); every worker alive at the end,
/// each having taken work after the last switch, and exiting 0 on SIGTERM.
#[test]
fn a_sharded_queue_in_three_languages_goes_on_through_a_failover_and_a_migration() {
    let test = "a_sharded_queue_in_three_languages_goes_on_through_a_failover_and_a_migration";
    const SHARDS: usize = 6;
    let langs = langs(test);
    let n = sharded_jobs() / 2 * 2;
    let server = common::server_binary();
    let atomic = versions::valkey_version_of(&server).is_some_and(|(major, ..)| major >= 9);
    let cluster = Cluster::start();
    let queue = spread_queue(&cluster, SHARDS);
    let tags = echomq_client::shard_tags(&queue, SHARDS);
    let pairs: Vec<String> = tags
        .iter()
        .map(|t| format!("{} {}", key(t, "schedule"), key(t, "pending")))
        .collect();
    set_everywhere(&cluster, "echomq.auto-promote", &pairs.join(" "));
    let seed = cluster.nodes[cluster.primaries()[0]].url();
    let plan = Plan {
        sleep_ms: 0,
        concurrency: 8,
        fail_first: 3,
        shards: SHARDS,
        ..PLAN
    };
    let started = Instant::now();
    let mut workers = Working::all(&langs, At::Cluster(&seed), &queue, "", plan);
    let mut con = cluster.client();

    // Two languages add, each half of the jobs, at once.
    let producers: Vec<Lang> = [Python, Node]
        .into_iter()
        .filter(|l| langs.contains(l))
        .chain([Rust, Rust])
        .take(2)
        .collect();
    let prefixes = ["p-", "n-"];
    let adding: Vec<JoinHandle<Vec<String>>> = producers
        .iter()
        .zip(prefixes)
        .map(|(&lang, prefix)| {
            let (seed, queue) = (seed.clone(), queue.clone());
            let count = (n / 2).to_string();
            thread::spawn(move || {
                let mut args = add_args(&seed, &queue, &count, prefix);
                args.extend(["--cluster", "--shards", "6"]);
                run_to_end(lang, &args)
                    .lines()
                    .map(str::to_string)
                    .collect()
            })
        })
        .collect();
    let mut ids = Vec::new();
    for handle in adding {
        ids.extend(handle.join().expect("a producer"));
    }
    assert_eq!(ids.len(), n, "ids added");
    let added_s = started.elapsed();
    let index = |id: &str| -> u64 { id[2..].parse().expect("<p>-<i>") };
    // Runs planned: i % 4 failures, of 3 attempts at most.
    let attempts_of = |id: &str| (index(id) % 4 + 1).min(3);
    let dies = |id: &str| index(id) % 4 == 3;
    let want_dead: BTreeSet<&str> = ids.iter().map(String::as_str).filter(|i| dies(i)).collect();
    let want_done = n - want_dead.len();
    let done_key = key(&queue, "done");
    let done_now = |con: &mut redis::cluster::ClusterConnection| -> u64 {
        cmd!("HLEN", &done_key).query(con).unwrap_or(0)
    };
    let mut in_flight = HashSet::new();

    // A third of the way in: the failover of the primary of two shards.
    wait_until("a third done", Duration::from_secs(120), || {
        let done = done_now(&mut con);
        (done >= want_done as u64 / 3)
            .then_some(())
            .ok_or(format!("{done} done"))
    });
    let failed_over = cluster.owner(echomq_client::key_slot(tags[1].as_bytes()));
    let replica = cluster.replica_of(failed_over);
    let moved = shards_on(&cluster, &tags, failed_over);
    in_flight.extend(failover_move(&cluster, &moved, failed_over, replica, false));
    cluster.wait_stable(Duration::from_secs(60));
    println!(
        "{test}: failover of {} ({moved:?}) to {} with {} done",
        cluster.port(failed_over),
        cluster.port(replica),
        done_now(&mut con)
    );

    // Two thirds in: a shard of another primary migrates to a third one.
    wait_until("two thirds done", Duration::from_secs(120), || {
        let done = done_now(&mut con);
        (done >= want_done as u64 * 2 / 3)
            .then_some(())
            .ok_or(format!("{done} done"))
    });
    let shard = tags
        .iter()
        .find(|t| cluster.owner(echomq_client::key_slot(t.as_bytes())) != replica)
        .expect("a shard on another primary");
    let slot = echomq_client::key_slot(shard.as_bytes());
    let from = cluster.owner(slot);
    let to = *cluster
        .primaries()
        .iter()
        .find(|&&p| p != from && p != replica)
        .expect("a third primary");
    let done_before = done_now(&mut con);
    in_flight.extend(if atomic {
        atomic_move(&cluster, slot, shard, from, to)
    } else {
        legacy_move(&cluster, slot, shard, from, to)
    });
    wait_until("the slot is the target's", Duration::from_secs(60), || {
        cluster.check_stable()?;
        (cluster.owner(slot) == to)
            .then_some(())
            .ok_or("not yet".to_string())
    });
    let switched = server_time_ms(&mut cluster.conn(to));
    println!(
        "{test}: {} migration of {shard} (slot {slot}) {} -> {} with {done_before} done",
        if atomic { "atomic" } else { "legacy" },
        cluster.port(from),
        cluster.port(to)
    );
    assert!(
        done_before < want_done as u64,
        "the queue was done before the migration"
    );

    // The whole queue done with: every shard on its owner.
    let dead_n = want_dead.len();
    let outputs = finish_when(&mut workers, Duration::from_secs(240), || {
        sharded_drained(&mut con, &tags, &done_key, want_done, dead_n)
    });
    assert_all_went_on(&outputs, switched);

    // Each job: done once, or dead, as planned.
    let done: BTreeMap<String, u64> = q!(&mut con, "HGETALL", &done_key);
    let mut dead = BTreeSet::new();
    for t in &tags {
        let ids: Vec<String> = q!(&mut con, "ZRANGE", key(t, "dead"), 0, -1);
        dead.extend(ids);
    }
    let want_dead: BTreeSet<String> = want_dead.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        dead, want_dead,
        "the dead set: the jobs that failed 3 times"
    );
    let lost: Vec<&String> = ids
        .iter()
        .filter(|i| !done.contains_key(*i) && !dead.contains(*i))
        .collect();
    assert!(lost.is_empty(), "lost: {} {lost:?}", lost.len());
    assert_eq!(done.len(), want_done, "done: only the jobs that do not die");
    let mut runs: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for o in &outputs {
        for t in &o.takes {
            runs.entry(t.job.as_str()).or_default().push(t.attempt);
        }
    }
    let mut reruns = Vec::new();
    for id in &ids {
        let mut attempts = runs.get(id.as_str()).cloned().unwrap_or_default();
        attempts.sort();
        let planned: Vec<u64> = (1..=attempts_of(id)).collect();
        let times = done.get(id).copied().unwrap_or(0);
        if attempts == planned && times <= 1 {
            continue;
        }
        assert!(
            in_flight.contains(id),
            "{id}: runs {attempts:?}, planned {planned:?}, done {times} times, and it was \
             not in flight at a switch"
        );
        assert!(attempts.len() >= planned.len(), "{id}: runs {attempts:?}");
        reruns.push(id.clone());
    }
    let per_worker: Vec<(String, usize)> = outputs
        .iter()
        .map(|o| (o.name.clone(), o.takes.len()))
        .collect();
    println!(
        "{test}: {n} jobs over {SHARDS} shards added in {added_s:?} by {producers:?}; \
         {want_done} done, {} dead; {} in flight at the switches, {} run again ({reruns:?}); \
         takes per worker {per_worker:?}; {:?} in all",
        dead.len(),
        in_flight.len(),
        reruns.len(),
        started.elapsed()
    );
}

/// Whether every shard of the queue (`tags`, one for a queue of one tag)
/// is done with: `done` jobs counted, `dead` dead, no other payload left,
/// nothing scheduled, in a stream or unacknowledged.
fn sharded_drained(
    con: &mut impl redis::ConnectionLike,
    tags: &[String],
    done_key: &str,
    done: usize,
    dead: usize,
) -> Result<(), String> {
    fn ask(con: &mut impl redis::ConnectionLike, c: redis::Cmd) -> Result<i64, String> {
        c.query(con).map_err(|e| e.to_string())
    }
    let counted = ask(con, cmd!("HLEN", done_key))?;
    let (mut jobs, mut dead_now, mut scheduled, mut len, mut unacked) = (0, 0, 0, 0, 0);
    for t in tags {
        jobs += ask(con, cmd!("HLEN", key(t, "jobs")))?;
        dead_now += ask(con, cmd!("ZCARD", key(t, "dead")))?;
        scheduled += ask(con, cmd!("ZCARD", key(t, "schedule")))?;
        len += ask(con, cmd!("XLEN", key(t, "pending")))?;
        let summary: Vec<Value> = cmd!("XPENDING", key(t, "pending"), "workers")
            .query(con)
            .map_err(|e| e.to_string())?;
        unacked += match summary.first() {
            Some(Value::Int(k)) => *k,
            other => return Err(format!("XPENDING {other:?}")),
        };
    }
    (counted == done as i64
        && dead_now == dead as i64
        && jobs == dead as i64
        && scheduled == 0
        && len == 0
        && unacked == 0)
        .then_some(())
        .ok_or(format!(
            "{counted} of {done} done, {dead_now} of {dead} dead, {jobs} payloads, \
             {scheduled} scheduled, {len} in the streams, {unacked} unacknowledged"
        ))
}
