//! The example workers (examples/worker.rs, examples/worker.py and
//! examples/worker.mjs) against a real server: N seeded jobs, some failing
//! their first attempts and retried with a jittered policy, some failing
//! until the server dead-letters them; every one done exactly once or dead,
//! never both.

mod common;
mod node;

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::python::python;
use common::*;

const FAIL_FIRST: u64 = 2;
/// With FAIL_FIRST = 2, a third of the jobs fail twice: their second failure
/// is their last, and the server moves them to the dead set.
const MAX_ATTEMPTS: u64 = 2;
const POLICY: &str = "jitter:exponential:50:2000";

/// Says so on the real stderr: libtest captures only the print macros.
fn announce(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The arguments both workers take.
fn worker_args(server: &Server, queue: &str, jobs: usize, name: &str) -> Vec<String> {
    [
        "--url",
        &server.url(),
        "--queue",
        queue,
        "--jobs",
        &jobs.to_string(),
        "--fail-first",
        &FAIL_FIRST.to_string(),
        "--policy",
        POLICY,
        "--max-attempts",
        &MAX_ATTEMPTS.to_string(),
        "--consumers",
        "3",
        "--deadline-secs",
        "90",
        "--name",
        name,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A worker program.
#[derive(Clone, Copy)]
enum Lang {
    Rust,
    Python(&'static Path),
    /// The directory worker.mjs runs from (its packages installed there).
    Node(&'static Path),
}

/// The command that runs a worker program, before its arguments.
fn worker_command(lang: Lang) -> Command {
    match lang {
        Lang::Rust => Command::new(rust_worker()),
        Lang::Python(python) => {
            let mut cmd = Command::new(python);
            cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/worker.py"))
                .env("PYTHONUNBUFFERED", "1");
            cmd
        }
        Lang::Node(dir) => {
            let mut cmd = Command::new(node::node());
            cmd.arg(dir.join("worker.mjs")).current_dir(dir);
            cmd
        }
    }
}

/// Starts a worker with the common arguments and `extra` ones.
fn spawn(
    lang: Lang,
    server: &Server,
    queue: &str,
    jobs: usize,
    name: &str,
    extra: &[&str],
) -> (String, Child) {
    let child = worker_command(lang)
        .args(worker_args(server, queue, jobs, name))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start worker {name}: {e}"));
    (name.to_string(), child)
}

fn spawn_rust(server: &Server, queue: &str, jobs: usize, name: &str) -> (String, Child) {
    spawn(Lang::Rust, server, queue, jobs, name, &[])
}

fn spawn_node(
    node_dir: &'static Path,
    server: &Server,
    queue: &str,
    jobs: usize,
    name: &str,
) -> (String, Child) {
    spawn(Lang::Node(node_dir), server, queue, jobs, name, &[])
}

fn spawn_python(
    python: &'static Path,
    server: &Server,
    queue: &str,
    jobs: usize,
    name: &str,
) -> (String, Child) {
    spawn(Lang::Python(python), server, queue, jobs, name, &[])
}

/// Waits for every worker and asserts each exited 0; kills them all (by pid)
/// as soon as one fails, or after two minutes. Returns their stdout.
fn wait_all(mut workers: Vec<(String, Child)>) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut statuses = vec![None; workers.len()];
    while statuses.iter().any(Option::is_none) {
        for (i, (_, child)) in workers.iter_mut().enumerate() {
            if statuses[i].is_none() {
                statuses[i] = child.try_wait().expect("try_wait");
            }
        }
        let failed = statuses.iter().flatten().any(|s| !s.success());
        if failed || Instant::now() > deadline {
            for (_, child) in workers.iter_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
            break;
        }
        sleep(Duration::from_millis(20));
    }
    let mut report = String::new();
    let mut outs = Vec::new();
    for ((name, child), status) in workers.iter_mut().zip(&statuses) {
        let mut out = String::new();
        let mut err = String::new();
        let _ = child.stdout.take().unwrap().read_to_string(&mut out);
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        println!("{name}: {} {}", out.trim(), err.trim());
        report.push_str(&format!(
            "{name}: {status:?}\nstdout: {out}\nstderr: {err}\n"
        ));
        outs.push(out);
    }
    assert!(
        statuses.iter().all(|s| s.is_some_and(|s| s.success())),
        "a worker failed or did not finish within two minutes:\n{report}"
    );
    outs
}

/// Seeds `job-0` .. `job-(n-1)` the way the workers' default layout takes
/// them: the consumer group first (the protocol's step 1), then one stream
/// entry `job <name>` each.
fn seed(con: &mut Connection, queue: &str, n: usize) {
    let pending = format!("{{{queue}}}:pending");
    let created: RedisResult<()> =
        cmd!("XGROUP", "CREATE", &pending, "workers", "0", "MKSTREAM").query(con);
    // Workers started first create the group themselves.
    if let Err(e) = created {
        assert_eq!(e.code(), Some("BUSYGROUP"), "{e}");
    }
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.add_command(cmd!("XADD", &pending, "*", "job", format!("job-{i}")))
            .ignore();
    }
    let _: () = pipe.query(con).unwrap();
}

/// Seeds the list layout: `job-0` .. `job-(n-1)` pushed onto a list.
fn seed_list(con: &mut Connection, queue: &str, n: usize) {
    let jobs: Vec<String> = (0..n).map(|i| format!("job-{i}")).collect();
    let _: i64 = q!(con, "LPUSH", format!("{{{queue}}}:pending"), &jobs);
}

/// Waits until the group `workers` of `queue`'s stream has `n` consumers.
fn wait_consumers(con: &mut Connection, queue: &str, n: usize) {
    let pending = format!("{{{queue}}}:pending");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let consumers: RedisResult<Vec<Value>> =
            cmd!("XINFO", "CONSUMERS", &pending, "workers").query(con);
        if consumers.is_ok_and(|c| c.len() >= n) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the workers' consumers did not join"
        );
        sleep(Duration::from_millis(20));
    }
}

/// Nothing left in `pending`: an empty list, or a stream whose entries were
/// all acknowledged and deleted.
fn assert_pending_drained(con: &mut Connection, queue: &str) {
    let pending = format!("{{{queue}}}:pending");
    let kind: String = q!(con, "TYPE", &pending);
    let left: i64 = match kind.as_str() {
        "stream" => {
            let summary: Vec<Value> = q!(con, "XPENDING", &pending, "workers");
            assert_eq!(
                summary.first(),
                Some(&Value::Int(0)),
                "unacknowledged: {summary:?}"
            );
            q!(con, "XLEN", &pending)
        }
        "list" | "none" => q!(con, "LLEN", &pending),
        other => panic!("{pending} is a {other}"),
    };
    assert_eq!(left, 0, "work left in {pending}");
}

fn failures(i: usize) -> u64 {
    i as u64 % (FAIL_FIRST + 1)
}

/// Whether job `i` fails its last allowed attempt: the server dead-letters it.
fn dies(i: usize) -> bool {
    failures(i) >= MAX_ATTEMPTS
}

/// Every seeded job done exactly once, or dead (after exactly MAX_ATTEMPTS
/// failures) and never done, each after exactly its planned attempts, with
/// nothing left queued; the module's counters agree.
fn check_exactly_once(con: &mut Connection, queue: &str, n: usize) -> BTreeMap<String, u64> {
    check_exactly_once_promoted_by(con, queue, n, "echomq_promoted")
}

/// `check_exactly_once`, with the counter that must show every promotion:
/// `echomq_promoted` (a client's ECHO.PROMOTE) or `echomq_auto_promoted`
/// (the server's timer); the other must stay 0.
fn check_exactly_once_promoted_by(
    con: &mut Connection,
    queue: &str,
    n: usize,
    promoted_field: &str,
) -> BTreeMap<String, u64> {
    let by = check_queue_exactly_once(con, queue, n);
    // Each failure but a last one was one jittered ECHO.RETRY that scheduled,
    // promoted once; each last failure one dead-lettering ECHO.RETRY.
    let retries: u64 = (0..n).map(|i| failures(i).min(MAX_ATTEMPTS - 1)).sum();
    let dead = (0..n).filter(|&i| dies(i)).count() as u64;
    let other_field = if promoted_field == "echomq_promoted" {
        "echomq_auto_promoted"
    } else {
        "echomq_promoted"
    };
    for (field, want) in [
        ("echomq_retries", retries),
        ("echomq_retries_jittered", retries),
        (promoted_field, retries),
        (other_field, 0),
        ("echomq_dead_lettered", dead),
        ("echomq_errors", 0),
    ] {
        assert_eq!(
            info_field(con, "echomq", field),
            want.to_string(),
            "{field}"
        );
    }
    by
}

/// The queue's keys after its workers: every seeded job done exactly once,
/// or dead (after exactly MAX_ATTEMPTS failures) and never done, each after
/// exactly its planned attempts, with nothing left queued; who did what.
fn check_queue_exactly_once(con: &mut Connection, queue: &str, n: usize) -> BTreeMap<String, u64> {
    let key = |suffix: &str| format!("{{{queue}}}:{suffix}");
    let done: Vec<String> = q!(con, "SMEMBERS", key("done"));
    let dead: Vec<String> = q!(con, "ZRANGE", key("dead"), 0, -1);
    let job = |i: usize| format!("job-{i}");
    let want_done: HashSet<String> = (0..n).filter(|&i| !dies(i)).map(job).collect();
    let want_dead: HashSet<String> = (0..n).filter(|&i| dies(i)).map(job).collect();
    assert!(!want_dead.is_empty() && !want_done.is_empty());
    let got_done: HashSet<String> = done.iter().cloned().collect();
    let got_dead: HashSet<String> = dead.iter().cloned().collect();
    assert_eq!(got_done, want_done, "done");
    assert_eq!(got_dead, want_dead, "dead");

    let attempts: BTreeMap<String, u64> = q!(con, "HGETALL", key("attempts"));
    for i in 0..n {
        let want = (failures(i) + 1).min(MAX_ATTEMPTS);
        assert_eq!(
            attempts.get(&job(i)).copied(),
            Some(want),
            "{}: attempts",
            job(i)
        );
    }
    assert_pending_drained(con, queue);
    let scheduled: i64 = q!(con, "ZCARD", key("schedule"));
    assert_eq!(scheduled, 0, "work left scheduled");

    // done is a set: a job done twice would show only in the completions
    let by: BTreeMap<String, u64> = q!(con, "HGETALL", key("done-by"));
    assert_eq!(
        by.values().sum::<u64>(),
        want_done.len() as u64,
        "a job was done twice: {by:?}"
    );
    by
}

/// Seeds `n` jobs on `queue`, runs the workers `spawn` starts against a fresh
/// server, and checks every job was done exactly once; returns who did what.
fn run_workers(
    queue: &str,
    n: usize,
    spawn: impl FnOnce(&Server) -> Vec<(String, Child)>,
) -> BTreeMap<String, u64> {
    let server = Server::start();
    let mut con = server.conn();
    seed(&mut con, queue, n);
    wait_all(spawn(&server));
    check_exactly_once(&mut con, queue, n)
}

/// The python3 for the workers, or None after saying why `test` is skipped.
fn python_or_skip(test: &str) -> Option<&'static Path> {
    node::or_skip(test, python().map_err(str::to_string))
}

#[test]
fn rust_workers_do_every_job_exactly_once() {
    let (queue, n) = ("orders", 300);
    let by = run_workers(queue, n, |server| {
        vec![
            spawn_rust(server, queue, n, "rust-a"),
            spawn_rust(server, queue, n, "rust-b"),
        ]
    });
    println!("completions by worker: {by:?}");
}

#[test]
fn python_workers_do_every_job_exactly_once() {
    let Some(python) = python_or_skip("python_workers_do_every_job_exactly_once") else {
        return;
    };
    let (queue, n) = ("orders", 300);
    let by = run_workers(queue, n, |server| {
        vec![
            spawn_python(python, server, queue, n, "python-a"),
            spawn_python(python, server, queue, n, "python-b"),
        ]
    });
    println!(
        "python: {}; completions by worker: {by:?}",
        python.display()
    );
}

#[test]
fn rust_and_python_workers_share_one_queue() {
    let Some(python) = python_or_skip("rust_and_python_workers_share_one_queue") else {
        return;
    };
    let (queue, n) = ("mixed", 400);
    let by = run_workers(queue, n, |server| {
        vec![
            spawn_python(python, server, queue, n, "python"),
            spawn_rust(server, queue, n, "rust"),
        ]
    });
    println!("completions by worker: {by:?}");
}

/// The standalone use from the workers' doc comments: `--seed`, then done
/// once every job is done or dead.
fn seeds_and_stops_on_its_own(lang: Lang, queue: &str, name: &str) {
    let server = Server::start();
    let mut con = server.conn();
    let (_, child) = spawn(lang, &server, queue, 50, name, &["--seed"]);
    let out = child.wait_with_output().expect("wait for the worker");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // 50 jobs: 16 of them (i % 3 == 2) fail their last attempt
    let want = format!("34/50 done and 16 dead on queue '{queue}'");
    assert!(stdout.contains(&want), "{stdout}");
    let by = check_exactly_once(&mut con, queue, 50);
    assert_eq!(by.get(name), Some(&34), "{by:?}");
}

/// A newcomer's path: a list where the stream belongs is explained, with
/// what to run; `--fresh --seed` then starts the queue afresh, and running
/// the same command again does all the work again (without `--fresh` the
/// second run would find every job done and stop at once).
fn starts_a_queue_afresh(lang: Lang, queue: &str, name: &str) {
    let server = Server::start();
    let mut con = server.conn();
    let pending = format!("{{{queue}}}:pending");
    // What a promotion into a missing pending leaves: a list.
    let _: i64 = q!(&mut con, "LPUSH", &pending, "stray");
    let (_, child) = spawn(lang, &server, queue, 50, name, &["--seed"]);
    let out = child.wait_with_output().expect("wait for the worker");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for must in [
        format!("{pending} is a list, not a stream"),
        "--fresh".to_string(),
        format!("DEL {pending}"),
    ] {
        assert!(stderr.contains(&must), "no '{must}' in: {stderr}");
    }
    assert!(!stderr.contains("\nWRONGTYPE"), "{stderr}");
    let kind: String = q!(&mut con, "TYPE", &pending);
    assert_eq!(kind, "list", "the worker left the list as it was");

    for run in 1..=2 {
        let (_, child) = spawn(lang, &server, queue, 50, name, &["--fresh", "--seed"]);
        let out = child.wait_with_output().expect("wait for the worker");
        assert!(
            out.status.success(),
            "run {run}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        // 50 jobs: 17 (i % 3 == 1) fail once and are retried; 16 (i % 3 ==
        // 2) fail once, are retried, and fail their last attempt
        let want = "completed 34 here, retried 33 here, dead-lettered 16 here";
        assert!(stdout.contains(want), "run {run}: {stdout}");
        assert!(
            stdout.contains("34/50 done and 16 dead"),
            "run {run}: {stdout}"
        );
        // Only this run's work in the keys: attempts, done-by and all.
        let by = check_queue_exactly_once(&mut con, queue, 50);
        assert_eq!(by, BTreeMap::from([(name.to_string(), 34)]), "run {run}");
    }
}

#[test]
fn the_rust_worker_starts_a_queue_afresh() {
    starts_a_queue_afresh(Lang::Rust, "fresh", "rust-fresh");
}

#[test]
fn the_python_worker_starts_a_queue_afresh() {
    let Some(python) = python_or_skip("the_python_worker_starts_a_queue_afresh") else {
        return;
    };
    starts_a_queue_afresh(Lang::Python(python), "fresh-py", "python-fresh");
}

#[test]
fn the_node_worker_starts_a_queue_afresh() {
    let test = "the_node_worker_starts_a_queue_afresh";
    let Some(dir) = node::or_skip(test, node::node_dir()) else {
        return;
    };
    starts_a_queue_afresh(Lang::Node(dir), "fresh-node", "node-fresh");
}

/// Every option the workers share, which each one's --help must list.
const OPTIONS: [&str; 23] = [
    "--url",
    "--reconnect-secs",
    "--queue",
    "--fresh",
    "--seed",
    "--layout",
    "--group",
    "--lease-ms",
    "--max-deliveries",
    "--jobs",
    "--fail-first",
    "--policy",
    "--max-attempts",
    "--work-ms",
    "--overload-every",
    "--retry-after-ms",
    "--seed-delay-ms",
    "--crash-on",
    "--consumers",
    "--deadline-secs",
    "--name",
    "--no-promoter",
    "--log-takes",
];

#[test]
fn every_worker_lists_its_options_with_help() {
    let test = "every_worker_lists_its_options_with_help";
    let mut langs = vec![("rust", Lang::Rust)];
    if let Some(python) = python_or_skip(test) {
        langs.push(("python", Lang::Python(python)));
    }
    if let Some(dir) = node::or_skip(test, node::node_dir()) {
        langs.push(("node", Lang::Node(dir)));
    }
    for (name, lang) in langs {
        let out = worker_command(lang)
            .arg("--help")
            .stdin(Stdio::null())
            .output()
            .expect("run the worker");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name} --help: {out:?}");
        for option in OPTIONS {
            assert!(
                help.lines().any(|l| l.trim_start().starts_with(option)),
                "{name} --help does not list {option}:\n{help}"
            );
        }
        // The bound on reconnecting, and the several addresses, are told.
        assert!(help.contains("URL[,URL...]"), "{name}:\n{help}");
        assert!(help.contains("default 30"), "{name}:\n{help}");
    }
}

#[test]
fn the_rust_worker_seeds_and_stops_on_its_own() {
    seeds_and_stops_on_its_own(Lang::Rust, "solo", "solo");
}

/// `--no-promoter` (and ECHOMQ_NO_PROMOTER=1 for Python): no worker calls
/// ECHO.PROMOTE; the server, configured for the queue, promotes every retry.
#[test]
fn workers_without_a_promoter_rely_on_the_servers_auto_promotion() {
    let (queue, n) = ("auto", 300);
    let server = Server::start_with(
        Options::default().arg("echomq.auto-promote", "{auto}:schedule {auto}:pending"),
    );
    let mut con = server.conn();
    seed(&mut con, queue, n);
    let mut rust_args = worker_args(&server, queue, n, "rust-no-promoter");
    rust_args.push("--no-promoter".into());
    let rust = Command::new(rust_worker())
        .args(&rust_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the rust worker");
    let mut workers = vec![("rust-no-promoter".to_string(), rust)];
    if let Some(python) = python_or_skip("the Python half of workers_without_a_promoter") {
        let child = Command::new(python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/worker.py"))
            .args(worker_args(&server, queue, n, "python-no-promoter"))
            .env("PYTHONUNBUFFERED", "1")
            .env("ECHOMQ_NO_PROMOTER", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the python worker");
        workers.push(("python-no-promoter".to_string(), child));
    }
    wait_all(workers);
    let by = check_exactly_once_promoted_by(&mut con, queue, n, "echomq_auto_promoted");
    let stats: String = q!(&mut con, "INFO", "commandstats");
    assert!(
        !stats.to_lowercase().contains("cmdstat_echo.promote"),
        "a worker called ECHO.PROMOTE: {stats}"
    );
    println!("completions by worker: {by:?}");
}

#[test]
fn the_python_worker_seeds_and_stops_on_its_own() {
    let Some(python) = python_or_skip("the_python_worker_seeds_and_stops_on_its_own") else {
        return;
    };
    seeds_and_stops_on_its_own(Lang::Python(python), "solo-py", "python-solo");
}

#[test]
fn the_node_worker_seeds_and_stops_on_its_own() {
    let test = "the_node_worker_seeds_and_stops_on_its_own";
    let Some(dir) = node::or_skip(test, node::node_dir()) else {
        return;
    };
    seeds_and_stops_on_its_own(Lang::Node(dir), "solo-node", "node-solo");
}

#[test]
fn rust_python_and_node_workers_share_one_queue() {
    let test = "rust_python_and_node_workers_share_one_queue";
    let Some(dir) = node::or_skip(test, node::node_dir()) else {
        return;
    };
    // Python is optional here as in the tests above; Node is what this adds.
    let python = python()
        .map_err(|why| announce(&format!("{test}: without Python: {why}")))
        .ok();
    let server = Server::start();
    let mut con = server.conn();
    let (queue, n) = ("polyglot", 450);
    let mut workers = vec![
        spawn_node(dir, &server, queue, n, "node"),
        spawn_rust(&server, queue, n, "rust"),
    ];
    if let Some(python) = python {
        workers.push(spawn_python(python, &server, queue, n, "python"));
    }
    // Seeded only once every consumer (3 per worker) has joined the group:
    // the stream hands the first jobs to the waiting readers in turn, so
    // each worker gets work however fast the others drain the queue.
    wait_consumers(&mut con, queue, 3 * workers.len());
    seed(&mut con, queue, n);
    wait_all(workers);
    let by = check_exactly_once(&mut con, queue, n);
    // Each worker took part: the shared queue really was shared.
    for name in ["node", "rust"].into_iter().chain(python.map(|_| "python")) {
        assert!(
            by.get(name).is_some_and(|&c| c > 0),
            "{name} completed nothing: {by:?}"
        );
    }
    println!("completions by worker: {by:?}");
}

#[test]
fn the_list_layout_still_works_for_rust_and_python_workers() {
    let (queue, n) = ("listed", 200);
    let server = Server::start();
    let mut con = server.conn();
    seed_list(&mut con, queue, n);
    let list = ["--layout", "list"];
    let mut workers = vec![spawn(Lang::Rust, &server, queue, n, "rust-list", &list)];
    if let Some(python) = python_or_skip("the Python half of the list layout test") {
        workers.push(spawn(
            Lang::Python(python),
            &server,
            queue,
            n,
            "python-list",
            &list,
        ));
    }
    wait_all(workers);
    let kind: String = q!(&mut con, "TYPE", format!("{{{queue}}}:pending"));
    assert_ne!(kind, "stream");
    check_exactly_once(&mut con, queue, n);
}

/// The jobs the consumers of `worker` (named `<worker>-<i>`) hold
/// unacknowledged: the group's pending entries, by job name.
fn jobs_held(con: &mut Connection, queue: &str, worker: &str) -> HashSet<String> {
    let pending = format!("{{{queue}}}:pending");
    let consumers: Vec<Vec<Value>> = q!(con, "XINFO", "CONSUMERS", &pending, "workers");
    let mut held = HashSet::new();
    for fields in consumers {
        let name = match fields.get(1) {
            Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            other => panic!("XINFO CONSUMERS: {other:?}"),
        };
        if !name.starts_with(&format!("{worker}-")) {
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

/// After workers were killed: every job done exactly once or dead, never
/// both, nothing left behind, and a job taken more often than planned only
/// if it was in flight at a kill. (Such a job's killed run used up an
/// attempt without failing it, so its outcome may differ from the plan; every
/// other job's is exactly as planned.)
fn check_after_kills(con: &mut Connection, queue: &str, n: usize, in_flight: &HashSet<String>) {
    let key = |suffix: &str| format!("{{{queue}}}:{suffix}");
    let job = |i: usize| format!("job-{i}");
    let done: HashSet<String> = q!(con, "SMEMBERS", key("done"));
    let dead: HashSet<String> = q!(con, "ZRANGE", key("dead"), 0, -1);
    assert!(
        done.is_disjoint(&dead),
        "done and dead: {:?}",
        done.intersection(&dead)
    );
    for i in 0..n {
        let j = job(i);
        assert!(done.contains(&j) || dead.contains(&j), "{j} lost");
        if !in_flight.contains(&j) {
            let attempts: Option<u64> = q!(con, "HGET", key("attempts"), &j);
            assert_eq!(
                dead.contains(&j),
                dies(i),
                "{j}: done or dead as planned (taken {attempts:?} times; in flight at kills: {in_flight:?})"
            );
        }
    }
    assert_eq!(done.len() + dead.len(), n, "only the seeded jobs");
    assert_pending_drained(con, queue);
    let scheduled: i64 = q!(con, "ZCARD", key("schedule"));
    assert_eq!(scheduled, 0, "work left scheduled");
    let by: BTreeMap<String, u64> = q!(con, "HGETALL", key("done-by"));
    assert_eq!(
        by.values().sum::<u64>(),
        done.len() as u64,
        "a job was completed twice: {by:?}"
    );
    let attempts: BTreeMap<String, u64> = q!(con, "HGETALL", key("attempts"));
    let mut reruns = Vec::new();
    for i in 0..n {
        let planned = (failures(i) + 1).min(MAX_ATTEMPTS);
        let taken = attempts.get(&job(i)).copied().unwrap_or(0);
        assert!(
            taken >= planned,
            "{}: taken {taken} < planned {planned}",
            job(i)
        );
        if taken > planned {
            assert!(
                in_flight.contains(&job(i)),
                "{} ran again ({taken} takes, {planned} planned) but was in flight at no kill: {in_flight:?}",
                job(i)
            );
            reruns.push(job(i));
        }
    }
    assert_eq!(info_field(con, "echomq", "echomq_errors"), "0");
    println!(
        "in flight at a kill: {}; taken again: {}",
        in_flight.len(),
        reruns.len()
    );
}

/// Workers in `langs` share a stream queue; three times, one that holds jobs
/// (XPENDING) is SIGKILLed and replaced, while the others keep running.
fn killed_workers_lose_nothing(test: &str, langs: &[Lang]) {
    let (queue, n) = ("crash", 240);
    let server = Server::start();
    let mut con = server.conn();
    seed(&mut con, queue, n);
    // Jobs take 15 ms, so a kill usually finds some in flight; a 400 ms
    // lease lets the survivors take them over quickly; the poison bound is
    // out of the way (three kills cannot deliver one entry ten times).
    let extra = [
        "--work-ms",
        "15",
        "--lease-ms",
        "400",
        "--max-deliveries",
        "10",
        "--consumers",
        "2",
    ];
    let mut live: Vec<(Lang, String, Child)> = langs
        .iter()
        .enumerate()
        .map(|(i, &lang)| {
            let (name, child) = spawn(lang, &server, queue, n, &format!("{test}-w{i}"), &extra);
            (lang, name, child)
        })
        .collect();
    let mut in_flight = HashSet::new();
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while kills < 3 {
        assert!(Instant::now() < deadline, "no worker held a job to kill");
        sleep(Duration::from_millis(150));
        let victim = kills % live.len();
        let (lang, name, child) = &mut live[victim];
        if jobs_held(&mut con, queue, name).is_empty() {
            continue;
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        // Its pending entries are frozen now: exactly the jobs it had in flight.
        let held = jobs_held(&mut con, queue, name);
        announce(&format!(
            "{test}: killed {name} holding {} job(s)",
            held.len()
        ));
        in_flight.extend(held);
        kills += 1;
        let lang = *lang;
        let replacement = format!("{test}-r{kills}");
        let (name, child) = spawn(lang, &server, queue, n, &replacement, &extra);
        live[victim] = (lang, name, child);
    }
    assert!(!in_flight.is_empty(), "no kill found a job in flight");
    wait_all(
        live.into_iter()
            .map(|(_, name, child)| (name, child))
            .collect(),
    );
    check_after_kills(&mut con, queue, n, &in_flight);
}

#[test]
fn rust_workers_killed_mid_job_lose_nothing() {
    killed_workers_lose_nothing("rust-kill", &[Lang::Rust, Lang::Rust, Lang::Rust]);
}

#[test]
fn rust_python_and_node_workers_killed_mid_job_lose_nothing() {
    let test = "rust_python_and_node_workers_killed_mid_job_lose_nothing";
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let Some(node_dir) = node::or_skip(test, node::node_dir()) else {
        return;
    };
    killed_workers_lose_nothing(
        "mixed-kill",
        &[Lang::Rust, Lang::Python(python), Lang::Node(node_dir)],
    );
}

#[test]
fn a_job_that_kills_its_workers_ends_dead_and_the_rest_complete() {
    let (queue, n, poison) = ("poison", 60, "job-7");
    let server = Server::start();
    let mut con = server.conn();
    seed(&mut con, queue, n);
    let extra = [
        "--crash-on",
        poison,
        "--max-deliveries",
        "2",
        "--lease-ms",
        "300",
        // one consumer per process: a crash takes no other claimed entry
        // with it
        "--consumers",
        "1",
    ];
    let test = "a_job_that_kills_its_workers_ends_dead_and_the_rest_complete";
    let mut langs = vec![Lang::Rust];
    if let Some(python) = python_or_skip(test) {
        langs.push(Lang::Python(python));
    }
    if let Some(dir) = node::or_skip(test, node::node_dir()) {
        langs.push(Lang::Node(dir));
    }
    let mut live: Vec<(Lang, String, Child)> = Vec::new();
    for (i, &lang) in langs.iter().enumerate() {
        let (name, child) = spawn(lang, &server, queue, n, &format!("poison-w{i}"), &extra);
        live.push((lang, name, child));
    }
    // A worker that takes the poison job aborts; start another in its place.
    let mut crashes = 0;
    let mut finished = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !live.is_empty() {
        assert!(Instant::now() < deadline, "workers did not finish");
        let mut i = 0;
        while i < live.len() {
            match live[i].2.try_wait().expect("try_wait") {
                None => i += 1,
                Some(status) if status.success() => {
                    let (_, name, child) = live.remove(i);
                    finished.push((name, child));
                }
                Some(status) => {
                    crashes += 1;
                    assert!(crashes <= 4, "too many crashes: the poison job loops");
                    let lang = live[i].0;
                    announce(&format!("poison: {} exited with {status}", live[i].1));
                    let (name, child) = spawn(
                        lang,
                        &server,
                        queue,
                        n,
                        &format!("poison-r{crashes}"),
                        &extra,
                    );
                    live[i] = (lang, name, child);
                }
            }
        }
        sleep(Duration::from_millis(20));
    }
    wait_all(finished);
    // delivered once and taken over once, each time killing its worker; the
    // third delivery is over the bound of 2 and is failed unrun: dead
    assert_eq!(crashes, 2, "crashes");
    let key = |suffix: &str| format!("{{{queue}}}:{suffix}");
    let dead: HashSet<String> = q!(&mut con, "ZRANGE", key("dead"), 0, -1);
    let done: HashSet<String> = q!(&mut con, "SMEMBERS", key("done"));
    assert!(dead.contains(poison) && !done.contains(poison));
    let job = |i: usize| format!("job-{i}");
    let want_done: HashSet<String> = (0..n)
        .filter(|&i| !dies(i))
        .map(job)
        .filter(|j| j != poison)
        .collect();
    let mut want_dead: HashSet<String> = (0..n).filter(|&i| dies(i)).map(job).collect();
    want_dead.insert(poison.into());
    assert_eq!(done, want_done);
    assert_eq!(dead, want_dead);
    assert_pending_drained(&mut con, queue);
}

/// The workers of a test: Rust always, Python and Node.js when present
/// (SKIPPED outside CI when not, a failure in CI).
fn all_langs(test: &str) -> Vec<(Lang, &'static str)> {
    let mut langs = vec![(Lang::Rust, "rust")];
    if let Some(python) = python_or_skip(&format!("{test} (its Python worker)")) {
        langs.push((Lang::Python(python), "python"));
    }
    if let Some(dir) = node::or_skip(&format!("{test} (its Node.js worker)"), node::node_dir()) {
        langs.push((Lang::Node(dir), "node"));
    }
    langs
}

/// The protocol's step 1 creates the group at `0`: entries a producer added
/// to the stream before any worker (and so before the group) existed are
/// delivered and done, not skipped.
#[test]
fn each_worker_takes_the_entries_added_before_its_group_existed() {
    let test = "each_worker_takes_the_entries_added_before_its_group_existed";
    let server = Server::start();
    let mut con = server.conn();
    for (lang, name) in all_langs(test) {
        let queue = format!("early-{name}");
        let pending = format!("{{{queue}}}:pending");
        for i in 0..6 {
            let _: String = q!(&mut con, "XADD", &pending, "*", "job", format!("job-{i}"));
        }
        let groups: Vec<Value> = q!(&mut con, "XINFO", "GROUPS", &pending);
        assert!(groups.is_empty(), "{name}: a group before the worker");
        let (_, child) = spawn(lang, &server, &queue, 6, name, &[]);
        wait_all(vec![(name.to_string(), child)]);
        let by = check_queue_exactly_once(&mut con, &queue, 6);
        assert_eq!(by, BTreeMap::from([(name.to_string(), 4)]), "{name}");
    }
}

/// `(field, value)` pairs of a RESP2 flat reply (ECHO.LIMITS, HGETALL).
fn fields(reply: &[Value]) -> BTreeMap<String, Value> {
    reply
        .chunks(2)
        .map(|kv| match &kv[0] {
            Value::BulkString(b) => (String::from_utf8_lossy(b).into_owned(), kv[1].clone()),
            Value::SimpleString(s) => (s.clone(), kv[1].clone()),
            other => panic!("field name {other:?}"),
        })
        .collect()
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

/// `calls=` of `cmdstat_<command>` in INFO commandstats (0 when never
/// called); the server writes a module command's name as registered
/// (`cmdstat_ECHO.HOLD`), so the names are compared in lower case.
fn command_calls(con: &mut Connection, command: &str) -> u64 {
    let stats: String = q!(con, "INFO", "commandstats");
    let stats = stats.to_lowercase();
    let prefix = format!("cmdstat_{}:calls=", command.to_lowercase());
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |rest| {
            rest.split(',').next().unwrap().parse().expect("calls")
        })
}

/// What the test saw of the queue in one atomic step while a worker ran.
struct Sample {
    now_ms: i64,
    held_until_ms: i64,
    scheduled: i64,
    promoted: u64,
}

fn sample(con: &mut Connection, queue: &str) -> Sample {
    let schedule = format!("{{{queue}}}:schedule");
    let ((secs, micros), limits, scheduled, info): ((i64, i64), Vec<Value>, i64, String) =
        redis::pipe()
            .atomic()
            .cmd("TIME")
            .cmd("ECHO.LIMITS")
            .arg(&schedule)
            .cmd("ZCARD")
            .arg(&schedule)
            .cmd("INFO")
            .arg("echomq")
            .query(con)
            .expect("sample");
    Sample {
        now_ms: secs * 1000 + micros / 1000,
        held_until_ms: int(&fields(&limits)["held-until-ms"]),
        scheduled,
        promoted: field_of(&info, "echomq_promoted").parse().unwrap(),
    }
}

/// `--overload-every 2 --retry-after-ms 1500 --fail-first 1`: `job-<odd>`
/// fails its first attempt as planned, its second answers "overloaded,
/// retry after 1500 ms", and its third succeeds; `job-<even>` succeeds at
/// once. Each overloaded answer is one ECHO.HOLD before the usual failure,
/// and while the hold is in force nothing leaves the schedule (no promotion
/// counted, the schedule never shrinks) although its retries are due
/// (`fixed:0`) and the worker's promoter keeps calling ECHO.PROMOTE; after
/// it, every job is done exactly once.
fn holds_the_schedule_when_overloaded(lang: Lang, name: &str) {
    let (queue, n) = (format!("held-{name}"), 6);
    let server = Server::start();
    let mut con = server.conn();
    let extra = [
        "--seed",
        "--fail-first",
        "1",
        "--policy",
        "fixed:0",
        "--max-attempts",
        "4",
        "--overload-every",
        "2",
        "--retry-after-ms",
        "1500",
    ];
    let (_, mut child) = spawn(lang, &server, &queue, n, name, &extra);
    // Pairs of samples inside one hold: the later one must show nothing
    // released since the earlier one.
    let mut held_pairs = 0;
    let mut last: Option<Sample> = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("try_wait").is_none() && Instant::now() < deadline {
        let now = sample(&mut con, &queue);
        if let Some(before) = &last {
            let same_hold =
                before.held_until_ms == now.held_until_ms && now.now_ms < now.held_until_ms;
            if same_hold && before.now_ms < before.held_until_ms {
                assert_eq!(
                    now.promoted, before.promoted,
                    "promoted while held until {}",
                    now.held_until_ms
                );
                assert!(
                    now.scheduled >= before.scheduled,
                    "the schedule shrank while held: {} -> {}",
                    before.scheduled,
                    now.scheduled
                );
                if before.scheduled > 0 {
                    held_pairs += 1;
                }
            }
        }
        last = Some(now);
        sleep(Duration::from_millis(20));
    }
    let outs = wait_all(vec![(name.to_string(), child)]);
    assert!(
        held_pairs > 0,
        "never saw a due retry held in the schedule ({name})"
    );
    let odd = (0..n).filter(|i| i % 2 == 1).count() as u64;
    assert_eq!(command_calls(&mut con, "echo.hold"), odd, "ECHO.HOLD calls");
    assert!(
        outs[0].contains(&format!("held {odd} here")),
        "the summary counts the holds: {}",
        outs[0]
    );
    // Every job done exactly once, after exactly its planned attempts.
    let key = |suffix: &str| format!("{{{queue}}}:{suffix}");
    let done: HashSet<String> = q!(&mut con, "SMEMBERS", key("done"));
    let want: HashSet<String> = (0..n).map(|i| format!("job-{i}")).collect();
    assert_eq!(done, want, "done");
    let dead: i64 = q!(&mut con, "ZCARD", key("dead"));
    assert_eq!(dead, 0, "dead");
    let attempts: BTreeMap<String, u64> = q!(&mut con, "HGETALL", key("attempts"));
    for i in 0..n {
        let want = if i % 2 == 1 { 3 } else { 1 };
        assert_eq!(attempts.get(&format!("job-{i}")), Some(&want), "job-{i}");
    }
    let by: BTreeMap<String, u64> = q!(&mut con, "HGETALL", key("done-by"));
    assert_eq!(by, BTreeMap::from([(name.to_string(), n as u64)]));
    assert_pending_drained(&mut con, &queue);
    let scheduled: i64 = q!(&mut con, "ZCARD", key("schedule"));
    assert_eq!(scheduled, 0);
    for (field, want) in [
        ("echomq_retries", (2 * odd).to_string()),
        ("echomq_promoted", (2 * odd).to_string()),
        ("echomq_scheduled", "0".to_string()),
        ("echomq_dead_lettered", "0".to_string()),
        ("echomq_errors", "0".to_string()),
    ] {
        assert_eq!(info_field(&mut con, "echomq", field), want, "{field}");
    }
    let limited: u64 = info_field(&mut con, "echomq", "echomq_release_limited")
        .parse()
        .unwrap();
    assert!(limited > 0, "no promote was held back");
    println!(
        "{name}: {held_pairs} pairs of samples inside a hold; {}",
        outs[0].trim()
    );
}

#[test]
fn the_rust_worker_holds_the_schedule_when_its_dependency_is_overloaded() {
    holds_the_schedule_when_overloaded(Lang::Rust, "rust");
}

#[test]
fn the_python_worker_holds_the_schedule_when_its_dependency_is_overloaded() {
    let test = "the_python_worker_holds_the_schedule_when_its_dependency_is_overloaded";
    let Some(python) = python_or_skip(test) else {
        return;
    };
    holds_the_schedule_when_overloaded(Lang::Python(python), "python");
}

#[test]
fn the_node_worker_holds_the_schedule_when_its_dependency_is_overloaded() {
    let test = "the_node_worker_holds_the_schedule_when_its_dependency_is_overloaded";
    let Some(dir) = node::or_skip(test, node::node_dir()) else {
        return;
    };
    holds_the_schedule_when_overloaded(Lang::Node(dir), "node");
}

/// `--seed --seed-delay-ms 1500`: the jobs' first runs are scheduled with
/// ECHO.SCHEDULE (the worker prints the fire times it replied); no job is
/// taken before the earliest of them by the server's clock, every job is
/// done once, and the module counts them as scheduled, not as retries.
fn seeds_with_a_delay(lang: Lang, name: &str) {
    let (queue, n) = (format!("later-{name}"), 5);
    let server = Server::start();
    let mut con = server.conn();
    let extra = ["--seed", "--seed-delay-ms", "1500", "--fail-first", "0"];
    let (_, mut child) = spawn(lang, &server, &queue, n, name, &extra);
    let (attempts_key, schedule) = (
        format!("{{{queue}}}:attempts"),
        format!("{{{queue}}}:schedule"),
    );
    // (server ms, jobs taken so far, jobs scheduled) in one atomic step each
    let mut samples: Vec<(i64, usize, i64)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("try_wait").is_none() && Instant::now() < deadline {
        let ((secs, micros), taken, scheduled): ((i64, i64), Vec<String>, i64) = redis::pipe()
            .atomic()
            .cmd("TIME")
            .cmd("HKEYS")
            .arg(&attempts_key)
            .cmd("ZCARD")
            .arg(&schedule)
            .query(&mut con)
            .expect("sample");
        samples.push((secs * 1000 + micros / 1000, taken.len(), scheduled));
        sleep(Duration::from_millis(20));
    }
    let outs = wait_all(vec![(name.to_string(), child)]);
    // "scheduled job-0 .. job-4 with ECHO.SCHEDULE, due at A .. B (server ms)"
    let line = outs[0]
        .lines()
        .find(|l| l.contains("with ECHO.SCHEDULE, due at "))
        .unwrap_or_else(|| panic!("no fire times printed: {}", outs[0]));
    let due: Vec<i64> = line
        .split("due at ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [first_due, last_due] = due[..] else {
        panic!("{line}")
    };
    assert!(first_due <= last_due, "{line}");
    for &(now_ms, taken, _) in &samples {
        if taken > 0 {
            assert!(
                now_ms >= first_due,
                "{taken} job(s) taken at {now_ms}, before the first fire time {first_due}"
            );
        }
    }
    assert!(
        samples
            .iter()
            .any(|&(now_ms, taken, scheduled)| now_ms < first_due
                && taken == 0
                && scheduled == n as i64),
        "never saw the jobs waiting in the schedule: {samples:?}"
    );
    let done: HashSet<String> = q!(&mut con, "SMEMBERS", format!("{{{queue}}}:done"));
    assert_eq!(done.len(), n, "{done:?}");
    let attempts: BTreeMap<String, u64> = q!(&mut con, "HGETALL", &attempts_key);
    assert!(attempts.values().all(|&a| a == 1), "{attempts:?}");
    assert_pending_drained(&mut con, &queue);
    for (field, want) in [
        ("echomq_scheduled", n as u64),
        ("echomq_retries", 0),
        ("echomq_promoted", n as u64),
        ("echomq_errors", 0),
    ] {
        assert_eq!(
            info_field(&mut con, "echomq", field),
            want.to_string(),
            "{field}"
        );
    }
    assert_eq!(command_calls(&mut con, "echo.retry"), 0, "ECHO.RETRY calls");
    assert_eq!(command_calls(&mut con, "zadd"), 0, "ZADD calls");
}

#[test]
fn the_rust_worker_seeds_with_a_delay_through_echo_schedule() {
    seeds_with_a_delay(Lang::Rust, "rust");
}

#[test]
fn the_python_worker_seeds_with_a_delay_through_echo_schedule() {
    let test = "the_python_worker_seeds_with_a_delay_through_echo_schedule";
    let Some(python) = python_or_skip(test) else {
        return;
    };
    seeds_with_a_delay(Lang::Python(python), "python");
}

#[test]
fn the_node_worker_seeds_with_a_delay_through_echo_schedule() {
    let test = "the_node_worker_seeds_with_a_delay_through_echo_schedule";
    let Some(dir) = node::or_skip(test, node::node_dir()) else {
        return;
    };
    seeds_with_a_delay(Lang::Node(dir), "node");
}
