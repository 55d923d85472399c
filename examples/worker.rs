//! A job worker on echomq, in Rust with redis-rs: consumers take jobs from a
//! pending list with a blocking pop, fail some of them (deterministically),
//! retry those with `ECHO.RETRY` under a jittered policy, and one promoter
//! moves due retries back to the pending list with `ECHO.PROMOTE`. The server
//! decides when a job has failed for the last time: the same `ECHO.RETRY`
//! call moves it to the dead set instead (`MAXATTEMPTS n DEAD dead`), so the
//! worker never counts attempts to decide when to give up. With `--no-promoter`
//! the server promotes instead (`echomq.auto-promote`).
//!
//! ```text
//! cargo run --release --example worker -- --url redis://127.0.0.1:6379/ \
//!     --queue orders --jobs 100 --seed
//! ```
//!
//! Options (each also read from the environment variable in brackets):
//! - `--url URL` [ECHOMQ_URL], default `redis://127.0.0.1:6379/`
//! - `--queue NAME` [ECHOMQ_QUEUE], default `jobs`. Keys, hash-tagged so a
//!   cluster keeps one queue in one slot: `{NAME}:pending` (list),
//!   `{NAME}:schedule` (sorted set of retries by fire time), `{NAME}:attempts`
//!   (hash: job -> attempts made), `{NAME}:done` (list of completed jobs),
//!   `{NAME}:done-by` (hash: worker name -> jobs it completed), `{NAME}:dead`
//!   (sorted set of jobs that failed their last attempt, by time of death).
//! - `--jobs N` [ECHOMQ_JOBS], default 100: stop once N jobs are done or dead.
//! - `--seed`: first push `job-0` .. `job-(N-1)` onto the pending list.
//! - `--fail-first K` [ECHOMQ_FAIL_FIRST], default 2: `job-<i>` fails its first
//!   `i % (K + 1)` attempts, then succeeds (other names never fail).
//! - `--policy P` [ECHOMQ_POLICY], default `jitter:exponential:50:2000`.
//! - `--max-attempts M` [ECHOMQ_MAX_ATTEMPTS], default 5: a job's M-th failure
//!   sends it to `{NAME}:dead` instead of scheduling it again.
//! - `--consumers C` [ECHOMQ_CONSUMERS], default 4 threads.
//! - `--deadline-secs S` [ECHOMQ_DEADLINE_SECS], default 60: give up (exit 2).
//! - `--name NAME` [ECHOMQ_WORKER_NAME], default `rust-<pid>`.
//! - `--no-promoter` [ECHOMQ_NO_PROMOTER=1]: run no promoter thread and rely
//!   on the server promoting the queue itself; the server must list the pair
//!   in `echomq.auto-promote` (e.g. `CONFIG SET echomq.auto-promote
//!   "{NAME}:schedule {NAME}:pending"`), else retries stay scheduled forever.
//!
//! Any number of workers, in any language, may share one queue. A job popped
//! by BRPOP belongs to that consumer alone; a worker killed mid-job loses that
//! job (use BLMOVE into a per-worker processing list to recover such jobs).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The promoter sleeps at most this long: a retry scheduled while it sleeps
/// is picked up within this much of its fire time.
const PROMOTER_CAP: Duration = Duration::from_millis(50);

#[derive(Clone)]
struct Config {
    url: String,
    queue: String,
    jobs: u64,
    seed: bool,
    fail_first: u64,
    policy: String,
    max_attempts: u64,
    consumers: usize,
    deadline: Duration,
    name: String,
    promoter: bool,
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
        args.iter()
            .position(|a| a == flag)
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
        "--jobs",
        "--fail-first",
        "--policy",
        "--max-attempts",
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
    Ok(Config {
        url: value("--url", "ECHOMQ_URL", "redis://127.0.0.1:6379/"),
        queue: value("--queue", "ECHOMQ_QUEUE", "jobs"),
        jobs: number("--jobs", "ECHOMQ_JOBS", "100")?,
        seed: args.iter().any(|a| a == "--seed"),
        promoter: !(args.iter().any(|a| a == "--no-promoter")
            || std::env::var("ECHOMQ_NO_PROMOTER").is_ok_and(|v| v == "1")),
        fail_first: number("--fail-first", "ECHOMQ_FAIL_FIRST", "2")?,
        policy: value("--policy", "ECHOMQ_POLICY", "jitter:exponential:50:2000"),
        max_attempts: number("--max-attempts", "ECHOMQ_MAX_ATTEMPTS", "5")?.max(1),
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
}

/// Takes jobs until told to stop. Each job is taken by exactly one consumer.
fn consume(cfg: &Config, keys: &Keys, shared: &Shared) -> Result<()> {
    let mut con = redis::Client::open(cfg.url.as_str())?.get_connection()?;
    while !shared.stop.load(Ordering::Relaxed) {
        // A short timeout so the loop sees `stop`; the pop itself blocks in the server.
        let popped: Option<(String, String)> = redis::cmd("BRPOP")
            .arg(&keys.pending)
            .arg(0.2)
            .query(&mut con)?;
        let Some((_, job)) = popped else { continue };
        let attempt: u64 = redis::cmd("HINCRBY")
            .arg(&keys.attempts)
            .arg(&job)
            .arg(1)
            .query(&mut con)?;
        if attempt <= failures(&job, cfg.fail_first) {
            // The job failed: the server draws its jittered delay and
            // schedules it in one step (the reply is the fire time), or, at
            // the last attempt, moves it to the dead set (the reply is -1).
            let fire_at_ms: i64 = redis::cmd("ECHO.RETRY")
                .arg(&keys.schedule)
                .arg(&job)
                .arg(&cfg.policy)
                .arg(attempt)
                .arg("MAXATTEMPTS")
                .arg(cfg.max_attempts)
                .arg("DEAD")
                .arg(&keys.dead)
                .query(&mut con)?;
            let counter = if fire_at_ms == -1 {
                &shared.dead
            } else {
                &shared.retried
            };
            counter.fetch_add(1, Ordering::Relaxed);
        } else {
            let _: () = redis::pipe()
                .atomic()
                .cmd("RPUSH")
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
    Ok(())
}

/// Moves due retries to the pending list, then sleeps until the next one is
/// due by the server's clock (at most PROMOTER_CAP, so new retries are seen).
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

/// Ok(true) when every job is done, Ok(false) at the deadline.
fn run() -> Result<bool> {
    let cfg = config()?;
    let keys = Keys::new(&cfg.queue);
    let mut con = redis::Client::open(cfg.url.as_str())?.get_connection()?;
    if cfg.seed {
        let mut cmd = redis::cmd("LPUSH");
        cmd.arg(&keys.pending);
        for i in 0..cfg.jobs {
            cmd.arg(format!("job-{i}"));
        }
        if cfg.jobs > 0 {
            let _: i64 = cmd.query(&mut con)?;
        }
    }

    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        completed: AtomicU64::new(0),
        retried: AtomicU64::new(0),
        dead: AtomicU64::new(0),
    });
    let mut threads = Vec::new();
    for _ in 0..cfg.consumers {
        let (cfg, keys, shared) = (cfg.clone(), keys.clone(), shared.clone());
        threads.push(thread::spawn(move || consume(&cfg, &keys, &shared)));
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
        "worker {}: completed {} here, retried {} here, dead-lettered {} here; \
         {done}/{} done and {dead} dead on queue '{}' after {:.2}s",
        cfg.name,
        shared.completed.load(Ordering::Relaxed),
        shared.retried.load(Ordering::Relaxed),
        shared.dead.load(Ordering::Relaxed),
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

/// How many jobs are done and how many dead, read in one round trip.
fn finished(con: &mut redis::Connection, keys: &Keys) -> Result<(u64, u64)> {
    Ok(redis::pipe()
        .cmd("LLEN")
        .arg(&keys.done)
        .cmd("ZCARD")
        .arg(&keys.dead)
        .query(con)?)
}
