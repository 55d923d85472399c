//! The protocol behaviours the example workers' tests (tests/examples.rs,
//! retired with them) checked that the libraries' own tests do not: the
//! three libraries' crossworkers sharing one queue with planned failures,
//! retries under a jittered policy and dead-lettering, each job taken
//! exactly its planned attempts; the same with the server promoting the
//! retries (echomq.auto-promote) and no worker calling ECHO.PROMOTE;
//! workers SIGKILLed three times mid-job and replaced, losing nothing and
//! running again only what was in flight; entries added before the group
//! existed; delayed adds counted as scheduled, not retried; and the list
//! layout (examples/list_worker.rs).

mod support;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::thread::{sleep, JoinHandle};
use std::time::{Duration, Instant};

use echomq_testkit::inspect::echomq_stat;
use echomq_testkit::{self as common, cargo_example, info_field, node, q, Options, Server};
use redis::{Connection, Value};
use support::*;

const FAIL_FIRST: u64 = 2;
/// With FAIL_FIRST = 2, a third of the jobs fail twice: their second failure
/// is their last, and the server moves them to the dead set.
const MAX_ATTEMPTS: u64 = 2;
const POLICY: &str = "jitter:exponential:50:2000";

fn failures(i: usize) -> u64 {
    i as u64 % (FAIL_FIRST + 1)
}

/// Whether job `i` fails its last allowed attempt: the server dead-letters it.
fn dies(i: usize) -> bool {
    failures(i) >= MAX_ATTEMPTS
}

/// The attempts job `i` is planned to take.
fn planned(i: usize) -> u64 {
    (failures(i) + 1).min(MAX_ATTEMPTS)
}

fn job(i: usize) -> String {
    format!("job-{i}")
}

/// The crossworkers of a test: Rust always, Python and Node.js when present
/// (SKIPPED outside CI when not, a failure in CI).
fn langs(test: &str) -> Vec<Lang> {
    let mut langs = vec![Rust];
    if node::or_skip(&format!("{test} (its Python worker)"), python()).is_some() {
        langs.push(Python);
    }
    if node::or_skip(&format!("{test} (its Node.js worker)"), node_ready()).is_some() {
        langs.push(Node);
    }
    rust_crossworker();
    langs
}

/// A `crossworker work` whose every stdout line is kept (`--log-takes`
/// prints one per take), also those of a process killed mid-run.
struct Running {
    lang: Lang,
    child: Child,
    lines: Option<JoinHandle<Vec<String>>>,
}

impl Running {
    fn start(lang: Lang, args: &[&str]) -> Running {
        let (child, stdout) = spawn_work(lang, args);
        let lines = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect()
        });
        Running {
            lang,
            child,
            lines: Some(lines),
        }
    }

    /// Its stdout, after it exited.
    fn output(&mut self) -> Vec<String> {
        self.lines
            .take()
            .map(|t| t.join().expect("the stdout reader"))
            .unwrap_or_default()
    }

    fn terminate(&self) {
        let pid = self.child.id().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid}");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits for every worker to exit 0 (killing them all, by pid, as soon as
/// one fails, or after two minutes); returns their stdout lines.
fn wait_all(mut workers: Vec<Running>) -> Vec<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut statuses = vec![None; workers.len()];
    while statuses.iter().any(Option::is_none) {
        for (w, status) in workers.iter_mut().zip(statuses.iter_mut()) {
            if status.is_none() {
                *status = w.child.try_wait().expect("try_wait");
            }
        }
        let failed = statuses.iter().flatten().any(|s| !s.success());
        if failed || Instant::now() > deadline {
            for w in workers.iter_mut() {
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
            break;
        }
        sleep(Duration::from_millis(20));
    }
    let outs: Vec<Vec<String>> = workers.iter_mut().map(Running::output).collect();
    for ((w, status), out) in workers.iter().zip(&statuses).zip(&outs) {
        assert!(
            status.is_some_and(|s| s.success()),
            "the {:?} worker failed or did not finish within two minutes: {status:?}; \
             its last lines: {:?}",
            w.lang,
            &out[out.len().saturating_sub(5)..]
        );
    }
    outs
}

/// `took <entry> <job> <attempt>` lines, as job → attempts taken (sorted).
fn takes<'a>(lines: impl IntoIterator<Item = &'a String>) -> BTreeMap<String, Vec<u64>> {
    let mut takes: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["took", _entry, id, attempt] = words[..] {
            takes
                .entry(id.to_string())
                .or_default()
                .push(attempt.parse().expect("an attempt number"));
        }
    }
    for attempts in takes.values_mut() {
        attempts.sort_unstable();
    }
    takes
}

/// Adds `job-0` .. `job-(n-1)` from the Rust crossworker.
fn add_jobs(url: &str, queue: &str, n: usize) {
    added_from(Rust, url, queue, n, "job-");
}

/// The dead set as the Rust crossworker reads it: id → (attempts, error).
fn dead_jobs(url: &str, queue: &str) -> BTreeMap<String, (u64, String)> {
    let out = run_to_end(Rust, &["dead", "--url", url, "--queue", queue]);
    out.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            (
                v["id"].as_str().expect("id").to_string(),
                (
                    v["attempts"].as_u64().expect("attempts"),
                    v["error"].as_str().unwrap_or("").to_string(),
                ),
            )
        })
        .collect()
}

/// Nothing of the queue left: no entry in the stream or its group, nothing
/// scheduled, no job's payload, attempts or error (a dead job's are in
/// the dead set's records, removed by `purge`, which this does not call).
fn assert_drained(con: &mut Connection, queue: &str) {
    let key = |suffix: &str| format!("{{{queue}}}:{suffix}");
    let len: i64 = q!(con, "XLEN", key("pending"));
    assert_eq!(len, 0, "entries left in {}", key("pending"));
    let summary: Vec<Value> = q!(con, "XPENDING", key("pending"), "workers");
    assert_eq!(summary.first(), Some(&Value::Int(0)), "unacknowledged");
    let scheduled: i64 = q!(con, "ZCARD", key("schedule"));
    assert_eq!(scheduled, 0, "work left scheduled");
}

/// `calls=` of `cmdstat_<command>` in INFO commandstats (0 when never
/// called), compared in lower case (a module command is written as
/// registered).
fn command_calls(con: &mut Connection, command: &str) -> u64 {
    let stats: String = q!(con, "INFO", "commandstats");
    let prefix = format!("cmdstat_{}:calls=", command.to_lowercase());
    stats
        .to_lowercase()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |rest| {
            rest.split(',').next().unwrap().parse().expect("calls")
        })
}

/// Waits until the group of `queue` has `n` consumers (each library worker
/// joins with its first read).
fn wait_consumers(con: &mut Connection, queue: &str, n: usize) {
    let pending = format!("{{{queue}}}:pending");
    common::wait_until("the workers' consumers", Duration::from_secs(30), || {
        let consumers: redis::RedisResult<Vec<Value>> =
            echomq_testkit::cmd!("XINFO", "CONSUMERS", &pending, "workers").query(con);
        match consumers {
            Ok(c) if c.len() >= n => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

/// The arguments of a worker of the planned-failure tests.
fn plan_args<'a>(url: &'a str, queue: &'a str, done: &'a str, jobs: &'a str) -> Vec<&'a str> {
    vec![
        "--url",
        url,
        "--queue",
        queue,
        "--done",
        done,
        "--jobs",
        jobs,
        "--fail-first",
        "2",
        "--backoff",
        POLICY,
        "--max-attempts",
        "2",
        "--concurrency",
        "3",
        "--log-takes",
        "--deadline-secs",
        "100",
    ]
}

/// Two Rust workers and one of each other language present share `queue`
/// on `server`; `n` jobs are added once every worker's consumer has joined
/// (the stream hands the first entries to the waiting readers in turn, so
/// each worker gets work). Every job is done exactly once or dead after
/// exactly MAX_ATTEMPTS failures, each taken exactly its planned attempts
/// (1, 2, ...), every worker took part, nothing is left; the module counts
/// every scheduled retry (jittered) and its promotion in `promoted_field`
/// (`echomq_promoted`, a worker's ECHO.PROMOTE, or `echomq_auto_promoted`,
/// the server's timer; the other stays 0), and the dead-letterings.
fn share_with_planned_failures(test: &str, server: &Server, queue: &str, promoted_field: &str) {
    let n = 300;
    let mut workers_langs = vec![Rust];
    workers_langs.extend(langs(test));
    let (url, mut con) = (server.url(), server.conn());
    let done = format!("{{{queue}}}:done");
    let jobs = n.to_string();
    let args = plan_args(&url, queue, &done, &jobs);
    let workers: Vec<Running> = workers_langs
        .iter()
        .map(|&lang| Running::start(lang, &args))
        .collect();
    wait_consumers(&mut con, queue, workers.len());
    add_jobs(&url, queue, n);
    let outs = wait_all(workers);

    for (lang, out) in workers_langs.iter().zip(&outs) {
        assert!(
            !takes(out).is_empty(),
            "the {lang:?} worker took nothing: the queue was not shared"
        );
    }
    let taken = takes(outs.iter().flatten());
    for i in 0..n {
        let want: Vec<u64> = (1..=planned(i)).collect();
        assert_eq!(
            taken.get(&job(i)),
            Some(&want),
            "{}: attempts taken",
            job(i)
        );
    }
    assert_eq!(taken.len(), n, "only the added jobs were taken");
    let done_counts: BTreeMap<String, u64> = q!(&mut con, "HGETALL", &done);
    let want_done: BTreeMap<String, u64> =
        (0..n).filter(|&i| !dies(i)).map(|i| (job(i), 1)).collect();
    assert_eq!(done_counts, want_done, "each job done exactly once");
    let dead = dead_jobs(&url, queue);
    let want_dead: BTreeMap<String, (u64, String)> = (0..n)
        .filter(|&i| dies(i))
        .map(|i| (job(i), (MAX_ATTEMPTS, "planned failure".to_string())))
        .collect();
    assert!(!want_dead.is_empty() && !want_done.is_empty());
    assert_eq!(dead, want_dead, "the dead set");
    assert_drained(&mut con, queue);

    // Each failure but a last one was one jittered retry scheduled and
    // promoted once; each last failure one dead-lettering.
    let retries: u64 = (0..n).map(|i| failures(i).min(MAX_ATTEMPTS - 1)).sum();
    let other_field = if promoted_field == "echomq_promoted" {
        "echomq_auto_promoted"
    } else {
        "echomq_promoted"
    };
    assert_counters(
        &mut con,
        &[
            ("echomq_retries", retries),
            ("echomq_retries_jittered", retries),
            (promoted_field, retries),
            (other_field, 0),
            ("echomq_dead_lettered", want_dead.len() as u64),
            ("echomq_errors", 0),
        ],
    );
}

#[test]
fn workers_of_each_language_share_a_queue_each_job_done_once_or_dead() {
    let test = "workers_of_each_language_share_a_queue_each_job_done_once_or_dead";
    share_with_planned_failures(test, &Server::start(), "mixed", "echomq_promoted");
}

/// With the queue in `echomq.auto-promote`, each library's worker sees it
/// (ECHO.QUEUES) and promotes nothing itself: no ECHO.PROMOTE is called, and
/// the server's timer promotes every retry.
#[test]
fn workers_leave_promotion_to_the_server_when_it_promotes_the_queue() {
    let test = "workers_leave_promotion_to_the_server_when_it_promotes_the_queue";
    let server = Server::start_with(
        Options::default().arg("echomq.auto-promote", "{auto}:schedule {auto}:pending"),
    );
    let mut con = server.conn();
    share_with_planned_failures(test, &server, "auto", "echomq_auto_promoted");
    assert_eq!(
        command_calls(&mut con, "echo.promote"),
        0,
        "a worker called ECHO.PROMOTE"
    );
}

/// Jobs in the stream before the workers' group exists (added, then the
/// group destroyed, as a producer that writes the stream alone would leave
/// them): each library's worker creates the group at `0`, not `$`, and takes
/// them, each its planned attempts, none skipped.
#[test]
fn each_worker_takes_the_jobs_added_before_its_group_existed() {
    let test = "each_worker_takes_the_jobs_added_before_its_group_existed";
    let server = Server::start();
    let (url, mut con) = (server.url(), server.conn());
    for lang in langs(test) {
        let queue = format!("early-{lang:?}").to_lowercase();
        let pending = format!("{{{queue}}}:pending");
        add_jobs(&url, &queue, 6);
        let _: redis::RedisResult<i64> =
            echomq_testkit::cmd!("XGROUP", "DESTROY", &pending, "workers").query(&mut con);
        let groups: Vec<Value> = q!(&mut con, "XINFO", "GROUPS", &pending);
        assert!(groups.is_empty(), "{lang:?}: a group before the worker");
        let done = format!("{{{queue}}}:done");
        let worker = Running::start(lang, &plan_args(&url, &queue, &done, "6"));
        let outs = wait_all(vec![worker]);
        let taken = takes(&outs[0]);
        for i in 0..6 {
            let want: Vec<u64> = (1..=planned(i)).collect();
            assert_eq!(taken.get(&job(i)), Some(&want), "{lang:?}: {}", job(i));
        }
        let done_counts: BTreeMap<String, u64> = q!(&mut con, "HGETALL", &done);
        let want: BTreeMap<String, u64> =
            (0..6).filter(|&i| !dies(i)).map(|i| (job(i), 1)).collect();
        assert_eq!(done_counts, want, "{lang:?}");
        let dead: BTreeSet<String> = dead_jobs(&url, &queue).into_keys().collect();
        assert_eq!(
            dead,
            (0..6).filter(|&i| dies(i)).map(job).collect(),
            "{lang:?}"
        );
        assert_drained(&mut con, &queue);
    }
}

/// The jobs the consumer of the worker process `pid` holds unacknowledged
/// (its consumer is named `<host>-<pid>-<hex>` in every library).
fn jobs_held(con: &mut Connection, queue: &str, pid: u32) -> HashSet<String> {
    let pending = format!("{{{queue}}}:pending");
    let consumers: Vec<Vec<Value>> = q!(con, "XINFO", "CONSUMERS", &pending, "workers");
    let mut held = HashSet::new();
    for fields in consumers {
        let name = match fields.get(1) {
            Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            other => panic!("XINFO CONSUMERS: {other:?}"),
        };
        if !name.contains(&format!("-{pid}-")) {
            continue;
        }
        let rows: Vec<(String, String, u64, u64)> =
            q!(con, "XPENDING", &pending, "workers", "-", "+", 1000, &name);
        for (id, ..) in rows {
            let entries: Vec<(String, Vec<String>)> = q!(con, "XRANGE", &pending, &id, &id);
            for (_, fields) in entries {
                if let [field, job] = &fields[..] {
                    assert_eq!(field, "job");
                    held.insert(job.clone());
                }
            }
        }
    }
    held
}

/// Three workers (one of each language present, Rust for the rest) share a
/// queue of jobs with planned failures; three times, one that holds jobs is
/// SIGKILLed and replaced while the others run on. Every job ends done or
/// dead as planned (a killed run writes no outcome, so it uses up no
/// attempt), never both, nothing is left; a job is taken again at an
/// attempt, or counted done twice, only if it was in flight at a kill.
#[test]
fn workers_killed_mid_job_lose_nothing() {
    let test = "workers_killed_mid_job_lose_nothing";
    let mut pool = langs(test);
    while pool.len() < 3 {
        pool.push(Rust);
    }
    let server = Server::start();
    let (url, mut con) = (server.url(), server.conn());
    let (queue, n) = ("crash", 240);
    let done = format!("{{{queue}}}:done");
    // Jobs take 30 ms, so a kill usually finds some in flight (and the queue
    // lasts through three kills and restarts); a 400 ms
    // lease lets the survivors take them over quickly; the poison bound is
    // out of the way (three kills cannot deliver one entry ten times). No
    // --jobs: a job counted done by a worker killed before its
    // acknowledgement is still to run again when the count is complete, so
    // the test stops the workers once the queue is drained.
    let args = [
        "--url",
        &url,
        "--queue",
        queue,
        "--done",
        &done,
        "--fail-first",
        "2",
        "--backoff",
        POLICY,
        "--max-attempts",
        "2",
        "--sleep-ms",
        "30",
        "--lease-ms",
        "400",
        "--max-deliveries",
        "10",
        "--concurrency",
        "2",
        "--log-takes",
    ];
    let mut live: Vec<Running> = pool.iter().map(|&l| Running::start(l, &args)).collect();
    add_jobs(&url, queue, n);
    let mut lines: Vec<String> = Vec::new();
    let mut in_flight = HashSet::new();
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while kills < 3 {
        assert!(Instant::now() < deadline, "no worker held a job to kill");
        sleep(Duration::from_millis(150));
        let victim = kills % live.len();
        let pid = live[victim].child.id();
        if jobs_held(&mut con, queue, pid).is_empty() {
            continue;
        }
        live[victim].child.kill().expect("SIGKILL");
        let _ = live[victim].child.wait();
        // Its pending entries are frozen now: exactly what it had in flight.
        let held = jobs_held(&mut con, queue, pid);
        eprintln!(
            "{test}: killed the {:?} worker holding {} job(s)",
            live[victim].lang,
            held.len()
        );
        in_flight.extend(held);
        kills += 1;
        lines.extend(live[victim].output());
        let lang = live[victim].lang;
        live[victim] = Running::start(lang, &args);
    }
    assert!(!in_flight.is_empty(), "no kill found a job in flight");
    common::wait_until("every job done or dead", Duration::from_secs(90), || {
        let done: i64 = q!(&mut con, "HLEN", &done);
        let dead: i64 = q!(&mut con, "ZCARD", format!("{{{queue}}}:dead"));
        let len: i64 = q!(&mut con, "XLEN", format!("{{{queue}}}:pending"));
        let scheduled: i64 = q!(&mut con, "ZCARD", format!("{{{queue}}}:schedule"));
        (done + dead == n as i64 && len == 0 && scheduled == 0)
            .then_some(())
            .ok_or(format!("{done} done, {dead} dead, {len} in the stream"))
    });
    for w in &live {
        w.terminate();
    }
    lines.extend(wait_all(live).into_iter().flatten());

    let done_counts: BTreeMap<String, u64> = q!(&mut con, "HGETALL", &done);
    let dead = dead_jobs(&url, queue);
    let taken = takes(&lines);
    let mut again = 0;
    for i in 0..n {
        let j = job(i);
        assert_eq!(
            dead.contains_key(&j),
            dies(i),
            "{j}: dead as planned (taken {:?})",
            taken.get(&j)
        );
        assert_eq!(
            done_counts.contains_key(&j),
            !dies(i),
            "{j}: done as planned"
        );
        let attempts = taken.get(&j).cloned().unwrap_or_default();
        let mut distinct = attempts.clone();
        distinct.dedup();
        let want: Vec<u64> = (1..=planned(i)).collect();
        assert_eq!(distinct, want, "{j}: the attempts taken");
        let twice = attempts.len() > want.len() || done_counts.get(&j).is_some_and(|&c| c > 1);
        if twice {
            assert!(
                in_flight.contains(&j),
                "{j} ran again (takes {attempts:?}, done {:?}) but was in flight at no kill",
                done_counts.get(&j)
            );
            again += 1;
        }
    }
    assert_eq!(done_counts.len() + dead.len(), n, "only the added jobs");
    assert_drained(&mut con, queue);
    assert_eq!(info_field(&mut con, "echomq", "echomq_errors"), "0");
    eprintln!(
        "{test}: {} in flight at a kill, {again} ran again",
        in_flight.len()
    );
}

/// The list layout (examples/list_worker.rs): two list workers, three
/// consumers each, on `{listed}:pending` as a list; every job done exactly
/// once or dead after exactly its planned attempts, nothing left in the
/// list, its taken list or the schedule; the module counts every jittered
/// retry, its promotion into the list and each dead-lettering.
#[test]
fn the_list_layout_does_every_job_once_or_dead() {
    let list_worker = cargo_example("list_worker");
    let (queue, n) = ("listed", 200);
    let server = Server::start();
    let mut con = server.conn();
    let key = |suffix: &str| format!("{{{queue}}}:{suffix}");
    let jobs: Vec<String> = (0..n).map(job).collect();
    let _: i64 = q!(&mut con, "LPUSH", key("pending"), &jobs);
    let url = server.url();
    let jobs_arg = n.to_string();
    let args = [
        "--url",
        &url,
        "--queue",
        queue,
        "--jobs",
        &jobs_arg,
        "--consumers",
        "3",
        "--fail-first",
        "2",
        "--policy",
        POLICY,
        "--max-attempts",
        "2",
    ];
    let children: Vec<Child> = (0..2)
        .map(|_| {
            std::process::Command::new(&list_worker)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("start the list worker")
        })
        .collect();
    for mut child in children {
        let status = child.wait().expect("wait for the list worker");
        assert!(status.success(), "list worker: {status}");
    }
    let kind: String = q!(&mut con, "TYPE", key("pending"));
    assert_ne!(kind, "stream");
    let done: BTreeMap<String, u64> = q!(&mut con, "HGETALL", key("done"));
    let want_done: BTreeMap<String, u64> =
        (0..n).filter(|&i| !dies(i)).map(|i| (job(i), 1)).collect();
    assert_eq!(done, want_done, "each job done exactly once");
    let dead: BTreeSet<String> = q!(&mut con, "ZRANGE", key("dead"), 0, -1);
    assert_eq!(dead, (0..n).filter(|&i| dies(i)).map(job).collect());
    let attempts: BTreeMap<String, u64> = q!(&mut con, "HGETALL", key("attempts"));
    let want: BTreeMap<String, u64> = (0..n).map(|i| (job(i), planned(i))).collect();
    assert_eq!(attempts, want, "attempts");
    for list in ["pending", "taken"] {
        let left: i64 = q!(&mut con, "LLEN", key(list));
        assert_eq!(left, 0, "left in {}", key(list));
    }
    let scheduled: i64 = q!(&mut con, "ZCARD", key("schedule"));
    assert_eq!(scheduled, 0, "left scheduled");
    let retries: u64 = (0..n).map(|i| failures(i).min(MAX_ATTEMPTS - 1)).sum();
    assert_counters(
        &mut con,
        &[
            ("echomq_retries", retries),
            ("echomq_retries_jittered", retries),
            ("echomq_promoted", retries),
            ("echomq_dead_lettered", dead.len() as u64),
            ("echomq_errors", 0),
        ],
    );
}

/// Jobs added with a delay by each library (`add --delay-ms`) wait in the
/// schedule (all of them there before any is taken) and are run once each,
/// at their first attempt: the module counts them as scheduled and
/// promoted, never as retries, and no library sends ECHO.RETRY or a plain
/// ZADD for them.
#[test]
fn delayed_jobs_of_each_library_are_scheduled_not_retried() {
    let test = "delayed_jobs_of_each_library_are_scheduled_not_retried";
    let server = Server::start();
    let (url, mut con) = (server.url(), server.conn());
    let producers = langs(test);
    let queue = "later";
    for lang in &producers {
        let prefix = format!("{lang:?}-").to_lowercase();
        let out = run_to_end(
            *lang,
            &[
                "add",
                "--url",
                &url,
                "--queue",
                queue,
                "--count",
                "5",
                "--id-prefix",
                &prefix,
                "--delay-ms",
                "1500",
            ],
        );
        assert_eq!(out.lines().count(), 5, "{lang:?}: {out}");
    }
    let n = 5 * producers.len();
    let scheduled: usize = q!(&mut con, "ZCARD", format!("{{{queue}}}:schedule"));
    assert_eq!(scheduled, n, "every delayed job waits in the schedule");
    let done = format!("{{{queue}}}:done");
    let jobs = n.to_string();
    let mut args = vec!["--url", &url, "--queue", queue, "--done", &done];
    args.extend(["--jobs", &jobs, "--log-takes", "--deadline-secs", "60"]);
    let outs = wait_all(vec![Running::start(Rust, &args)]);
    let taken = takes(&outs[0]);
    assert_eq!(taken.len(), n, "{taken:?}");
    assert!(taken.values().all(|a| a == &[1]), "{taken:?}");
    let done_counts: BTreeMap<String, u64> = q!(&mut con, "HGETALL", &done);
    assert_eq!(done_counts.len(), n, "{done_counts:?}");
    assert!(done_counts.values().all(|&c| c == 1), "{done_counts:?}");
    assert_drained(&mut con, queue);
    assert_counters(
        &mut con,
        &[
            ("echomq_scheduled", n as u64),
            ("echomq_promoted", n as u64),
            ("echomq_retries", 0),
            ("echomq_errors", 0),
        ],
    );
    assert_eq!(command_calls(&mut con, "echo.retry"), 0, "ECHO.RETRY calls");
    assert_eq!(command_calls(&mut con, "zadd"), 0, "ZADD calls");
}

/// Each `INFO echomq` counter of `want` at its value.
fn assert_counters(con: &mut Connection, want: &[(&str, u64)]) {
    for &(field, value) in want {
        assert_eq!(echomq_stat(con, field), value, "{field}");
    }
}
