//! A job worker on echomq, in Rust with redis-rs. Consumers take jobs from
//! `{NAME}:pending`, fail some of them (deterministically), retry those with
//! `ECHO.RETRY` under a jittered policy, and one promoter moves due retries
//! back with `ECHO.PROMOTE`. The server decides when a job has failed for the
//! last time: the same `ECHO.RETRY` call moves it to the dead set instead
//! (`MAXATTEMPTS n DEAD dead`), so the worker never counts attempts to decide
//! when to give up. With `--no-promoter` the server promotes instead
//! (`echomq.auto-promote`).
//!
//! Two layouts of `{NAME}:pending`:
//! - `stream` (the default): a stream read through the consumer group
//!   `--group`. A taken job stays in the group's pending entries until the
//!   worker acknowledges it, in the same MULTI/EXEC as its outcome (done, or
//!   `ECHO.RETRY`). A worker that dies mid-job loses nothing: every consumer
//!   takes over, with XAUTOCLAIM, entries idle longer than `--lease-ms`, and
//!   an entry delivered more than `--max-deliveries` times is failed without
//!   being run again, so a job that kills its workers ends in the dead set.
//!   Delivery is at least once: a job whose worker died after the work but
//!   before the acknowledgement runs again.
//! - `list`: a list taken with BRPOP. Simpler, but a job popped by a worker
//!   that then dies is lost.
//!
//! ```text
//! cargo run --release --example worker -- --url redis://127.0.0.1:6379/ \
//!     --queue orders --jobs 100 --seed
//! ```
//!
//! Options (each also read from the environment variable in brackets):
//! - `--url URL` [ECHOMQ_URL], default `redis://127.0.0.1:6379/`
//! - `--queue NAME` [ECHOMQ_QUEUE], default `jobs`. Keys, hash-tagged so a
//!   cluster keeps one queue in one slot: `{NAME}:pending` (stream or list),
//!   `{NAME}:schedule` (sorted set of retries by fire time), `{NAME}:attempts`
//!   (hash: job -> times taken), `{NAME}:done` (set of completed jobs),
//!   `{NAME}:done-by` (hash: worker name -> jobs it completed), `{NAME}:dead`
//!   (sorted set of jobs that failed their last attempt, by time of death).
//! - `--layout stream|list` [ECHOMQ_LAYOUT], default `stream`.
//! - `--group NAME` [ECHOMQ_GROUP], default `workers`: the consumer group.
//! - `--lease-ms MS` [ECHOMQ_LEASE_MS], default 30000: entries idle that long
//!   are taken over (choose it above the longest job).
//! - `--max-deliveries K` [ECHOMQ_MAX_DELIVERIES], default 3: an entry taken
//!   over after K deliveries is failed instead of run.
//! - `--jobs N` [ECHOMQ_JOBS], default 100: stop once N distinct jobs are
//!   done or dead.
//! - `--seed`: first add `job-0` .. `job-(N-1)` to `{NAME}:pending`.
//! - `--fail-first K` [ECHOMQ_FAIL_FIRST], default 2: `job-<i>` fails its first
//!   `i % (K + 1)` attempts, then succeeds (other names never fail).
//! - `--policy P` [ECHOMQ_POLICY], default `jitter:exponential:50:2000`.
//! - `--max-attempts M` [ECHOMQ_MAX_ATTEMPTS], default 5: a job's M-th failure
//!   sends it to `{NAME}:dead` instead of scheduling it again.
//! - `--work-ms MS` [ECHOMQ_WORK_MS], default 0: simulated work per job.
//! - `--crash-on JOB` [ECHOMQ_CRASH_ON]: the process aborts at once when it
//!   takes that job (a job that kills its worker, for tests and demos).
//! - `--consumers C` [ECHOMQ_CONSUMERS], default 4 threads, each its own
//!   consumer `<name>-<i>` in the group.
//! - `--deadline-secs S` [ECHOMQ_DEADLINE_SECS], default 60: give up (exit 2).
//! - `--name NAME` [ECHOMQ_WORKER_NAME], default `rust-<pid>`.
//! - `--no-promoter` [ECHOMQ_NO_PROMOTER=1]: run no promoter thread and rely
//!   on the server promoting the queue itself; the server must list the pair
//!   in `echomq.auto-promote` (e.g. `CONFIG SET echomq.auto-promote
//!   "{NAME}:schedule {NAME}:pending"`), else retries stay scheduled forever.
//!
//! Any number of workers, in any language, may share one queue.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The promoter sleeps at most this long: a retry scheduled while it sleeps
/// is picked up within this much of its fire time.
const PROMOTER_CAP: Duration = Duration::from_millis(50);
/// Entries read or taken over per call: one. An entry's idle time, which
/// the lease is measured against, runs from its delivery; entries waiting in
/// a worker's own batch would age there and be taken over from a live
/// worker, and a claimed batch would share the fate of a job that kills its
/// worker.
const BATCH: usize = 1;
/// How long one blocking read waits, so the loop sees `stop`.
const BLOCK_MS: u64 = 200;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Stream,
    List,
}

#[derive(Clone)]
struct Config {
    url: String,
    queue: String,
    layout: Layout,
    group: String,
    lease: Duration,
    max_deliveries: u64,
    jobs: u64,
    seed: bool,
    promoter: bool,
    fail_first: u64,
    policy: String,
    max_attempts: u64,
    work: Duration,
    crash_on: Option<String>,
    consumers: usize,
    deadline: Duration,
    name: String,
}

#[derive(Clone)]
struct Keys {
    pending: String,
    schedule: String,
    attempts: String,
    done: String,
    done_by: String,
    dead: String,
}

impl Keys {
    fn new(queue: &str) -> Keys {
        let key = |suffix: &str| format!("{{{queue}}}:{suffix}");
        Keys {
            pending: key("pending"),
            schedule: key("schedule"),
            attempts: key("attempts"),
            done: key("done"),
            done_by: key("done-by"),
            dead: key("dead"),
        }
    }
}

fn config() -> Result<Config> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str, env: &str, default: &str| -> String {
        // The last occurrence wins, as with Python's argparse.
        args.iter()
            .rposition(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
            .or_else(|| std::env::var(env).ok())
            .unwrap_or_else(|| default.to_string())
    };
    let number = |flag: &str, env: &str, default: &str| -> Result<u64> {
        let v = value(flag, env, default);
        v.parse()
            .map_err(|_| format!("{flag}: '{v}' is not a number").into())
    };
    let known = [
        "--url",
        "--queue",
        "--layout",
        "--group",
        "--lease-ms",
        "--max-deliveries",
        "--jobs",
        "--fail-first",
        "--policy",
        "--max-attempts",
        "--work-ms",
        "--crash-on",
        "--consumers",
        "--deadline-secs",
        "--name",
    ];
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--seed" | "--no-promoter" => i += 1,
            flag if known.contains(&flag) => i += 2,
            "-h" | "--help" => {
                println!("see the comment at the top of examples/worker.rs");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}'").into()),
        }
    }
    let layout = match value("--layout", "ECHOMQ_LAYOUT", "stream").as_str() {
        "stream" => Layout::Stream,
        "list" => Layout::List,
        other => return Err(format!("--layout: '{other}' is neither stream nor list").into()),
    };
    let crash_on = value("--crash-on", "ECHOMQ_CRASH_ON", "");
    Ok(Config {
        url: value("--url", "ECHOMQ_URL", "redis://127.0.0.1:6379/"),
        queue: value("--queue", "ECHOMQ_QUEUE", "jobs"),
        layout,
        group: value("--group", "ECHOMQ_GROUP", "workers"),
        lease: Duration::from_millis(number("--lease-ms", "ECHOMQ_LEASE_MS", "30000")?.max(1)),
        max_deliveries: number("--max-deliveries", "ECHOMQ_MAX_DELIVERIES", "3")?.max(1),
        jobs: number("--jobs", "ECHOMQ_JOBS", "100")?,
        seed: args.iter().any(|a| a == "--seed"),
        promoter: !(args.iter().any(|a| a == "--no-promoter")
            || std::env::var("ECHOMQ_NO_PROMOTER").is_ok_and(|v| v == "1")),
        fail_first: number("--fail-first", "ECHOMQ_FAIL_FIRST", "2")?,
        policy: value("--policy", "ECHOMQ_POLICY", "jitter:exponential:50:2000"),
        max_attempts: number("--max-attempts", "ECHOMQ_MAX_ATTEMPTS", "5")?.max(1),
        work: Duration::from_millis(number("--work-ms", "ECHOMQ_WORK_MS", "0")?),
        crash_on: (!crash_on.is_empty()).then_some(crash_on),
        consumers: number("--consumers", "ECHOMQ_CONSUMERS", "4")?.max(1) as usize,
        deadline: Duration::from_secs(number("--deadline-secs", "ECHOMQ_DEADLINE_SECS", "60")?),
        name: value(
            "--name",
            "ECHOMQ_WORKER_NAME",
            &format!("rust-{}", std::process::id()),
        ),
    })
}

/// How many attempts `job` fails before it succeeds: `i % (K + 1)` for
/// `job-<i>`, so the outcome is the same in every run and every language.
fn failures(job: &str, fail_first: u64) -> u64 {
    job.strip_prefix("job-")
        .and_then(|i| i.parse::<u64>().ok())
        .map_or(0, |i| i % (fail_first + 1))
}

struct Shared {
    stop: AtomicBool,
    completed: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    taken_over: AtomicU64,
}

/// What a job's run came to.
enum Outcome {
    Done,
    Failed,
}

/// Runs `job` for its `attempt`-th take: aborts the process on the
/// `--crash-on` job, works `--work-ms`, then succeeds or fails as planned.
fn work(cfg: &Config, job: &str, attempt: u64) -> Outcome {
    if cfg.crash_on.as_deref() == Some(job) {
        eprintln!("worker {}: {job} kills its worker: aborting", cfg.name);
        std::process::abort();
    }
    if !cfg.work.is_zero() {
        thread::sleep(cfg.work);
    }
    if attempt <= failures(job, cfg.fail_first) {
        Outcome::Failed
    } else {
        Outcome::Done
    }
}

/// `ECHO.RETRY schedule job policy attempt MAXATTEMPTS m DEAD dead`: the
/// server draws the jittered delay and schedules the job in one step (the
/// reply is the fire time) or, at the last attempt, moves it to the dead set
/// (the reply is -1).
fn retry_cmd(cfg: &Config, keys: &Keys, job: &str, attempt: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("ECHO.RETRY");
    cmd.arg(&keys.schedule)
        .arg(job)
        .arg(&cfg.policy)
        .arg(attempt)
        .arg("MAXATTEMPTS")
        .arg(cfg.max_attempts)
        .arg("DEAD")
        .arg(&keys.dead);
    cmd
}

fn count_retry(shared: &Shared, fire_at_ms: i64) {
    let counter = if fire_at_ms == -1 {
        &shared.dead
    } else {
        &shared.retried
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The list layout: takes jobs with BRPOP until told to stop. A job popped
/// here exists only in this process until its outcome is written.
fn consume_list(cfg: &Config, keys: &Keys, shared: &Shared) -> Result<()> {
    let mut con = redis::Client::open(cfg.url.as_str())?.get_connection()?;
    while !shared.stop.load(Ordering::Relaxed) {
        // The pop blocks in the server; the timeout lets the loop see `stop`.
        let popped: Option<(String, String)> = redis::cmd("BRPOP")
            .arg(&keys.pending)
            .arg(BLOCK_MS as f64 / 1000.0)
            .query(&mut con)?;
        let Some((_, job)) = popped else { continue };
        let attempt: u64 = redis::cmd("HINCRBY")
            .arg(&keys.attempts)
            .arg(&job)
            .arg(1)
            .query(&mut con)?;
        match work(cfg, &job, attempt) {
            Outcome::Failed => {
                let fire_at_ms: i64 = retry_cmd(cfg, keys, &job, attempt).query(&mut con)?;
                count_retry(shared, fire_at_ms);
            }
            Outcome::Done => {
                let _: () = redis::pipe()
                    .atomic()
                    .cmd("SADD")
                    .arg(&keys.done)
                    .arg(&job)
                    .ignore()
                    .cmd("HINCRBY")
                    .arg(&keys.done_by)
                    .arg(&cfg.name)
                    .arg(1)
                    .ignore()
                    .query(&mut con)?;
                shared.completed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// `(id, job)` of each entry in a stream reply's entry array; entries whose
/// data is gone (deleted meanwhile) have no job.
fn entries(value: &Value) -> Vec<(String, Option<String>)> {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|entry| match entry {
            Value::Array(parts) => {
                let id = text(parts.first()?)?;
                let job = match parts.get(1) {
                    Some(Value::Array(fields)) => fields
                        .chunks(2)
                        .find(|kv| text(&kv[0]).as_deref() == Some("job"))
                        .and_then(|kv| kv.get(1).and_then(text)),
                    _ => None,
                };
                Some((id, job))
            }
            _ => None,
        })
        .collect()
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// One consumer of the stream layout (the protocol's steps 2 to 6).
struct StreamConsumer<'a> {
    cfg: &'a Config,
    keys: &'a Keys,
    shared: &'a Shared,
    consumer: String,
    con: redis::Connection,
}

impl StreamConsumer<'_> {
    fn run(&mut self) -> Result<()> {
        // Take over at once what a dead worker left, then at least once per lease.
        let mut next_claim = Instant::now();
        while !self.shared.stop.load(Ordering::Relaxed) {
            if Instant::now() >= next_claim {
                self.take_over()?;
                next_claim = Instant::now() + self.cfg.lease / 2;
            }
            let read: Value = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(&self.cfg.group)
                .arg(&self.consumer)
                .arg("COUNT")
                .arg(BATCH)
                .arg("BLOCK")
                .arg(BLOCK_MS)
                .arg("STREAMS")
                .arg(&self.keys.pending)
                .arg(">")
                .query(&mut self.con)?;
            // [[key, [entries]]], or nil when the block timed out
            let Value::Array(streams) = read else {
                continue;
            };
            for stream in &streams {
                if let Value::Array(parts) = stream {
                    if let Some(list) = parts.get(1) {
                        for (id, job) in entries(list) {
                            self.run_entry(&id, job, false)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// XAUTOCLAIM: entries idle longer than the lease change owner to this
    /// consumer atomically, so two consumers never take over the same one.
    fn take_over(&mut self) -> Result<()> {
        let mut cursor = "0-0".to_string();
        loop {
            let reply: Value = redis::cmd("XAUTOCLAIM")
                .arg(&self.keys.pending)
                .arg(&self.cfg.group)
                .arg(&self.consumer)
                .arg(self.cfg.lease.as_millis() as u64)
                .arg(&cursor)
                .arg("COUNT")
                .arg(BATCH)
                .query(&mut self.con)?;
            let Value::Array(parts) = reply else {
                return Ok(());
            };
            let claimed = parts.get(1).map(entries).unwrap_or_default();
            for (id, job) in claimed {
                self.shared.taken_over.fetch_add(1, Ordering::Relaxed);
                self.run_entry(&id, job, true)?;
            }
            cursor = parts.first().and_then(text).unwrap_or_default();
            if cursor == "0-0" || cursor.is_empty() || self.shared.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
        }
    }

    fn run_entry(&mut self, id: &str, job: Option<String>, taken_over: bool) -> Result<()> {
        let Some(job) = job else {
            // Its data is gone: nothing to run, only to acknowledge.
            let _: () = redis::cmd("XACK")
                .arg(&self.keys.pending)
                .arg(&self.cfg.group)
                .arg(id)
                .query(&mut self.con)?;
            return Ok(());
        };
        let attempt: u64 = redis::cmd("HINCRBY")
            .arg(&self.keys.attempts)
            .arg(&job)
            .arg(1)
            .query(&mut self.con)?;
        // The poison bound: an entry delivered too often is failed unrun.
        let outcome = if taken_over && self.deliveries(id)? > self.cfg.max_deliveries {
            Outcome::Failed
        } else {
            work(self.cfg, &job, attempt)
        };
        let mut pipe = redis::pipe();
        pipe.atomic();
        match outcome {
            Outcome::Failed => {
                pipe.add_command(retry_cmd(self.cfg, self.keys, &job, attempt));
            }
            Outcome::Done => {
                pipe.cmd("SADD").arg(&self.keys.done).arg(&job).ignore();
                pipe.cmd("HINCRBY")
                    .arg(&self.keys.done_by)
                    .arg(&self.cfg.name)
                    .arg(1)
                    .ignore();
            }
        }
        // The outcome and the acknowledgement are one step: the job is never
        // both scheduled and pending, nor neither.
        pipe.cmd("XACK")
            .arg(&self.keys.pending)
            .arg(&self.cfg.group)
            .arg(id)
            .ignore();
        pipe.cmd("XDEL").arg(&self.keys.pending).arg(id).ignore();
        match outcome {
            Outcome::Failed => {
                let (fire_at_ms,): (i64,) = pipe.query(&mut self.con)?;
                count_retry(self.shared, fire_at_ms);
            }
            Outcome::Done => {
                let _: () = pipe.query(&mut self.con)?;
                self.shared.completed.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// How many times the group has delivered entry `id` (XPENDING).
    fn deliveries(&mut self, id: &str) -> Result<u64> {
        let reply: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(&self.keys.pending)
            .arg(&self.cfg.group)
            .arg(id)
            .arg(id)
            .arg(1)
            .query(&mut self.con)?;
        Ok(reply.first().map_or(0, |entry| entry.3))
    }
}

/// Moves due retries to pending, then sleeps until the next one is due by
/// the server's clock (at most PROMOTER_CAP, so new retries are seen).
fn promote(cfg: &Config, keys: &Keys, shared: &Shared) -> Result<()> {
    const LIMIT: i64 = 1000;
    let mut con = redis::Client::open(cfg.url.as_str())?.get_connection()?;
    while !shared.stop.load(Ordering::Relaxed) {
        let moved: i64 = redis::cmd("ECHO.PROMOTE")
            .arg(&keys.schedule)
            .arg(&keys.pending)
            .arg("LIMIT")
            .arg(LIMIT)
            .query(&mut con)?;
        if moved == LIMIT {
            continue; // more may be due already
        }
        let (next, (secs, micros)): (Vec<(String, f64)>, (i64, i64)) = redis::pipe()
            .cmd("ZRANGE")
            .arg(&keys.schedule)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .cmd("TIME")
            .query(&mut con)?;
        let now_ms = secs * 1000 + micros / 1000;
        let wait = match next.first() {
            Some((_, fire_at_ms)) => {
                let ms = (*fire_at_ms as i64 - now_ms).max(0) as u64;
                Duration::from_millis(ms).min(PROMOTER_CAP)
            }
            None => PROMOTER_CAP,
        };
        thread::sleep(wait);
    }
    Ok(())
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(2),
        Err(e) => {
            eprintln!("worker: {e}");
            std::process::exit(1);
        }
    }
}

/// Creates the stream and its group (the protocol's step 1); a group that
/// exists already is fine.
fn create_group(con: &mut redis::Connection, cfg: &Config, keys: &Keys) -> Result<()> {
    let created: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&keys.pending)
        .arg(&cfg.group)
        .arg("$")
        .arg("MKSTREAM")
        .query(con);
    match created {
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        other => Ok(other?),
    }
}

/// Ok(true) when every job is done or dead, Ok(false) at the deadline.
fn run() -> Result<bool> {
    let cfg = config()?;
    let keys = Keys::new(&cfg.queue);
    let mut con = redis::Client::open(cfg.url.as_str())?.get_connection()?;
    if cfg.layout == Layout::Stream {
        create_group(&mut con, &cfg, &keys)?;
    }
    if cfg.seed && cfg.jobs > 0 {
        let mut pipe = redis::pipe();
        match cfg.layout {
            Layout::Stream => {
                for i in 0..cfg.jobs {
                    pipe.cmd("XADD")
                        .arg(&keys.pending)
                        .arg("*")
                        .arg("job")
                        .arg(format!("job-{i}"))
                        .ignore();
                }
            }
            Layout::List => {
                let jobs: Vec<String> = (0..cfg.jobs).map(|i| format!("job-{i}")).collect();
                pipe.cmd("LPUSH").arg(&keys.pending).arg(jobs).ignore();
            }
        }
        let _: () = pipe.query(&mut con)?;
    }

    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        completed: AtomicU64::new(0),
        retried: AtomicU64::new(0),
        dead: AtomicU64::new(0),
        taken_over: AtomicU64::new(0),
    });
    let mut threads = Vec::new();
    for i in 0..cfg.consumers {
        let (cfg, keys, shared) = (cfg.clone(), keys.clone(), shared.clone());
        threads.push(thread::spawn(move || match cfg.layout {
            Layout::List => consume_list(&cfg, &keys, &shared),
            Layout::Stream => StreamConsumer {
                consumer: format!("{}-{i}", cfg.name),
                con: redis::Client::open(cfg.url.as_str())?.get_connection()?,
                cfg: &cfg,
                keys: &keys,
                shared: &shared,
            }
            .run(),
        }));
    }
    if cfg.promoter {
        let (cfg, keys, shared) = (cfg.clone(), keys.clone(), shared.clone());
        threads.push(thread::spawn(move || promote(&cfg, &keys, &shared)));
    }

    // Every worker sharing the queue stops once each job is done or dead.
    let started = Instant::now();
    let mut all_done = false;
    while started.elapsed() < cfg.deadline {
        let (done, dead) = finished(&mut con, &keys)?;
        if done + dead >= cfg.jobs {
            all_done = true;
            break;
        }
        if threads.iter().any(|t| t.is_finished()) {
            break; // a thread failed: report it below
        }
        thread::sleep(Duration::from_millis(20));
    }
    shared.stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().map_err(|_| "a worker thread panicked")??;
    }
    let (done, dead) = finished(&mut con, &keys)?;
    println!(
        "worker {}: completed {} here, retried {} here, dead-lettered {} here, took over {} here; \
         {done}/{} done and {dead} dead on queue '{}' after {:.2}s",
        cfg.name,
        shared.completed.load(Ordering::Relaxed),
        shared.retried.load(Ordering::Relaxed),
        shared.dead.load(Ordering::Relaxed),
        shared.taken_over.load(Ordering::Relaxed),
        cfg.jobs,
        cfg.queue,
        started.elapsed().as_secs_f64()
    );
    if !all_done {
        eprintln!(
            "worker {}: deadline of {:?} reached with {done}/{} done and {dead} dead",
            cfg.name, cfg.deadline, cfg.jobs
        );
    }
    Ok(all_done)
}

/// How many distinct jobs are done and how many dead, in one round trip.
fn finished(con: &mut redis::Connection, keys: &Keys) -> Result<(u64, u64)> {
    Ok(redis::pipe()
        .cmd("SCARD")
        .arg(&keys.done)
        .cmd("ZCARD")
        .arg(&keys.dead)
        .query(con)?)
}
