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
//!     --queue orders --jobs 100 --fresh --seed
//! ```
//!
//! A dependency that answers "overloaded, retry after N ms" (simulated with
//! `--overload-every K --retry-after-ms N`) is answered with
//! `ECHO.HOLD {NAME}:schedule N` before the job is failed as usual: one
//! worker's hold stops the release of due jobs to every worker. `--seed
//! --seed-delay-ms D` gives each seeded job a delayed first run with
//! `ECHO.SCHEDULE`, as a producer would.
//!
//! Options: `--help` prints them (the `HELP` text below), each also read
//! from an environment variable.
//!
//! Through a failover: `--url` takes several addresses, comma-separated. A
//! command refused because the server is no longer the primary (`READONLY`,
//! `UNBLOCKED`, `MASTERDOWN`), is loading (`LOADING`), or cannot be reached
//! is retried after a short backoff (20 ms doubling to 1 s) on whichever
//! address reports itself primary (`ROLE`; a replica's `ROLE` names its
//! primary, which is tried too); a cluster's `MOVED` is followed to the
//! slot's new owner, `ASK`, `TRYAGAIN` and `CLUSTERDOWN` retried. The worker
//! gives up (exits 1) only after `--reconnect-secs` without a successful
//! command. A job's outcome refused by the old primary is written on the new
//! one, unless its entry is no longer this consumer's to settle there: when
//! only the reply was lost and the write went through, or when another
//! consumer took the entry over meanwhile (and settles it). So a job runs
//! again only if it was in flight at the failover, and no completion is
//! counted twice.
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
/// How long the promoter pauses when a job is due yet stayed in the schedule:
/// a hold (ECHO.HOLD) or a release limit kept it there, and asking again at
/// once would only spin.
const PROMOTER_HELD: Duration = Duration::from_millis(10);
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

const HELP: &str = "\
A job worker on echomq (examples/worker.rs): consumers take jobs from
{NAME}:pending, fail some of them as planned, retry those with ECHO.RETRY,
and one promoter moves due retries back with ECHO.PROMOTE.

Options (each also read from the environment variable in brackets):
  --url URL[,URL...]   [ECHOMQ_URL] default redis://127.0.0.1:6379/; several
                       addresses, comma-separated: the worker uses whichever
                       reports itself primary (ROLE) and moves to the new one
                       after a failover; in a cluster it follows MOVED
  --reconnect-secs S   [ECHOMQ_RECONNECT_SECS] default 30: retry commands
                       refused by a failover (READONLY, UNBLOCKED, MOVED,
                       LOADING, ...) or a lost connection, with a short
                       backoff, for at most S seconds without a successful
                       command, then give up (exit 1); 0: give up at once
  --queue NAME         [ECHOMQ_QUEUE] default jobs; keys {NAME}:pending,
                       {NAME}:schedule, {NAME}:attempts, {NAME}:done (a set),
                       {NAME}:done-by, {NAME}:dead
  --fresh              [ECHOMQ_FRESH=1] first delete those six keys: start the
                       queue afresh (what a second --seed run needs)
  --seed               add job-0 .. job-(N-1) to {NAME}:pending first
  --seed-delay-ms D    [ECHOMQ_SEED_DELAY_MS] default 0: with --seed, schedule
                       each job's first run D ms ahead instead, with
                       ECHO.SCHEDULE {NAME}:schedule <job> D (the promoter, or
                       the server's own promotion, moves it when due)
  --layout L           [ECHOMQ_LAYOUT] stream (default) or list
  --group NAME         [ECHOMQ_GROUP] default workers: the consumer group
  --lease-ms MS        [ECHOMQ_LEASE_MS] default 30000: take over entries idle
                       that long (choose it above the longest job)
  --max-deliveries K   [ECHOMQ_MAX_DELIVERIES] default 3: fail, unrun, an entry
                       taken over after K deliveries
  --jobs N             [ECHOMQ_JOBS] default 100: stop once N distinct jobs are
                       done or dead
  --fail-first K       [ECHOMQ_FAIL_FIRST] default 2: job-<i> fails its first
                       i % (K + 1) attempts, then succeeds
  --policy P           [ECHOMQ_POLICY] default jitter:exponential:50:2000
  --max-attempts M     [ECHOMQ_MAX_ATTEMPTS] default 5: a job's M-th failure
                       sends it to {NAME}:dead instead of scheduling it again
  --work-ms MS         [ECHOMQ_WORK_MS] default 0: simulated work per job
  --overload-every K   [ECHOMQ_OVERLOAD_EVERY] default 0 (never): a job's run
                       whose attempt number is a multiple of K answers
                       \"overloaded, retry after --retry-after-ms\" (before the
                       planned failures): the worker holds the schedule with
                       ECHO.HOLD {NAME}:schedule <ms>, so no worker gets more
                       jobs until then, and fails the job as usual
  --retry-after-ms MS  [ECHOMQ_RETRY_AFTER_MS] default 1000: the wait an
                       overloaded answer asks for
  --crash-on JOB       [ECHOMQ_CRASH_ON] the process aborts when it takes that job
  --consumers C        [ECHOMQ_CONSUMERS] default 4 threads, consumers <name>-<i>
  --deadline-secs S    [ECHOMQ_DEADLINE_SECS] default 60: give up (exit 2)
  --name NAME          [ECHOMQ_WORKER_NAME] default rust-<pid>
  --no-promoter        [ECHOMQ_NO_PROMOTER=1] run no promoter and rely on the
                       server promoting the queue itself; the server must list
                       the pair in echomq.auto-promote (e.g. CONFIG SET
                       echomq.auto-promote \"{NAME}:schedule {NAME}:pending\")
  --log-takes          [ECHOMQ_LOG_TAKES=1] print \"took <entry-id> <job>\" on
                       stdout for each stream entry a consumer receives
                       (XREADGROUP or an XAUTOCLAIM takeover)
  -h, --help           this text

Exit status: 0 when every job is done or dead, 2 at the deadline, 1 on an error.
";

#[derive(Clone)]
struct Config {
    urls: Vec<String>,
    reconnect: Duration,
    fresh: bool,
    queue: String,
    layout: Layout,
    group: String,
    lease: Duration,
    max_deliveries: u64,
    jobs: u64,
    seed: bool,
    seed_delay_ms: u64,
    promoter: bool,
    fail_first: u64,
    policy: String,
    max_attempts: u64,
    work: Duration,
    overload_every: u64,
    retry_after_ms: u64,
    crash_on: Option<String>,
    consumers: usize,
    deadline: Duration,
    name: String,
    log_takes: bool,
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
        "--reconnect-secs",
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
        "--overload-every",
        "--retry-after-ms",
        "--seed-delay-ms",
        "--crash-on",
        "--consumers",
        "--deadline-secs",
        "--name",
    ];
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--seed" | "--no-promoter" | "--fresh" | "--log-takes" => i += 1,
            flag if known.contains(&flag) => i += 2,
            "-h" | "--help" => {
                print!("{HELP}");
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
    let urls: Vec<String> = value("--url", "ECHOMQ_URL", "redis://127.0.0.1:6379/")
        .split(',')
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
        .collect();
    if urls.is_empty() {
        return Err("--url: no address".into());
    }
    let flag = |flag: &str, env: &str| {
        args.iter().any(|a| a == flag) || std::env::var(env).is_ok_and(|v| v == "1")
    };
    Ok(Config {
        urls,
        reconnect: Duration::from_secs(number("--reconnect-secs", "ECHOMQ_RECONNECT_SECS", "30")?),
        fresh: flag("--fresh", "ECHOMQ_FRESH"),
        queue: value("--queue", "ECHOMQ_QUEUE", "jobs"),
        layout,
        group: value("--group", "ECHOMQ_GROUP", "workers"),
        lease: Duration::from_millis(number("--lease-ms", "ECHOMQ_LEASE_MS", "30000")?.max(1)),
        max_deliveries: number("--max-deliveries", "ECHOMQ_MAX_DELIVERIES", "3")?.max(1),
        jobs: number("--jobs", "ECHOMQ_JOBS", "100")?,
        seed: args.iter().any(|a| a == "--seed"),
        seed_delay_ms: number("--seed-delay-ms", "ECHOMQ_SEED_DELAY_MS", "0")?,
        promoter: !flag("--no-promoter", "ECHOMQ_NO_PROMOTER"),
        fail_first: number("--fail-first", "ECHOMQ_FAIL_FIRST", "2")?,
        policy: value("--policy", "ECHOMQ_POLICY", "jitter:exponential:50:2000"),
        max_attempts: number("--max-attempts", "ECHOMQ_MAX_ATTEMPTS", "5")?.max(1),
        work: Duration::from_millis(number("--work-ms", "ECHOMQ_WORK_MS", "0")?),
        overload_every: number("--overload-every", "ECHOMQ_OVERLOAD_EVERY", "0")?,
        retry_after_ms: number("--retry-after-ms", "ECHOMQ_RETRY_AFTER_MS", "1000")?,
        crash_on: (!crash_on.is_empty()).then_some(crash_on),
        consumers: number("--consumers", "ECHOMQ_CONSUMERS", "4")?.max(1) as usize,
        deadline: Duration::from_secs(number("--deadline-secs", "ECHOMQ_DEADLINE_SECS", "60")?),
        name: value(
            "--name",
            "ECHOMQ_WORKER_NAME",
            &format!("rust-{}", std::process::id()),
        ),
        log_takes: flag("--log-takes", "ECHOMQ_LOG_TAKES"),
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
    held: AtomicU64,
    taken_over: AtomicU64,
}

/// What a job's run came to.
enum Outcome {
    Done,
    Failed,
    /// The dependency answered "overloaded, retry after this many ms".
    Overloaded(u64),
}

/// Runs `job` for its `attempt`-th take: aborts the process on the
/// `--crash-on` job, works `--work-ms`, then answers overloaded (every
/// `--overload-every`-th attempt), or succeeds or fails as planned.
fn work(cfg: &Config, job: &str, attempt: u64) -> Outcome {
    if cfg.crash_on.as_deref() == Some(job) {
        eprintln!("worker {}: {job} kills its worker: aborting", cfg.name);
        std::process::abort();
    }
    if !cfg.work.is_zero() {
        thread::sleep(cfg.work);
    }
    if cfg.overload_every > 0 && attempt.is_multiple_of(cfg.overload_every) {
        Outcome::Overloaded(cfg.retry_after_ms)
    } else if attempt <= failures(job, cfg.fail_first) {
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

/// `ECHO.HOLD schedule ms`: nothing leaves the schedule, for any worker,
/// before the server's now + `ms` (a longer hold in force is kept).
fn hold(link: &mut Link, keys: &Keys, shared: &Shared, ms: u64) -> Result<()> {
    let _until: i64 = link.call(|con, _| {
        redis::cmd("ECHO.HOLD")
            .arg(&keys.schedule)
            .arg(ms)
            .query(con)
    })?;
    shared.held.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn count_retry(shared: &Shared, fire_at_ms: i64) {
    let counter = if fire_at_ms == -1 {
        &shared.dead
    } else {
        &shared.retried
    };
    counter.fetch_add(1, Ordering::Relaxed);
}
/// What to do about a failed command.
enum Trouble {
    /// A cluster moved the slot: go to this `host:port`.
    Moved(String),
    /// The server is not (or no longer) the primary, is loading, is in the
    /// middle of a failover or resharding, or cannot be reached: back off and
    /// try again on whichever address is the primary now.
    Failover,
    /// Anything else: a real error.
    Fatal,
}

fn trouble(e: &redis::RedisError) -> Trouble {
    if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
        return Trouble::Failover;
    }
    // A server error, or the errors a MULTI/EXEC was aborted for.
    let errors = e.clone().into_server_errors().unwrap_or_default();
    for (_, error) in errors.iter() {
        match error.code() {
            "MOVED" => {
                if let Some(addr) = error.details().and_then(|d| d.split_whitespace().nth(1)) {
                    return Trouble::Moved(addr.to_string());
                }
            }
            "READONLY" | "UNBLOCKED" | "LOADING" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN"
            | "ASK" => return Trouble::Failover,
            _ => {}
        }
    }
    Trouble::Fatal
}

/// Runs `pipe`'s commands in one MULTI/EXEC and gives EXEC's replies, all of
/// them (`ignore()` is not honoured). By hand because redis-rs's own atomic
/// `query` turns an error reply to EXEC into "Invalid response when parsing
/// multi response" and drops its code: a cluster answers the EXEC of a
/// transaction whose slot is moving with `ASK`, `MOVED` or `TRYAGAIN`, which
/// means it ran nothing and may be sent again, and `trouble` must see that.
fn transact(pipe: &redis::Pipeline, con: &mut redis::Connection) -> redis::RedisResult<Vec<Value>> {
    use redis::ConnectionLike;
    let mut multi = redis::pipe();
    multi.atomic();
    for command in pipe.cmd_iter() {
        multi.add_command(command.clone());
    }
    // MULTI's reply and each QUEUED skipped (a refused one fails the call
    // with its code), then EXEC's.
    let mut replies = con.req_packed_commands(&multi.get_packed_pipeline(), pipe.len() + 1, 1)?;
    match replies.pop() {
        Some(Value::Array(items)) => Ok(items),
        Some(Value::ServerError(e)) => Err(e.into()),
        // nil: a WATCH failed (none is used here); anything else is not EXEC's
        other => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "EXEC did not reply with its commands' replies",
            format!("{other:?}"),
        ))),
    }
}

/// `url` with its `host:port` replaced by `addr` (scheme, credentials and
/// database kept).
fn url_with_addr(url: &str, addr: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let creds = authority
        .rsplit_once('@')
        .map(|(c, _)| format!("{c}@"))
        .unwrap_or_default();
    format!("{scheme}://{creds}{addr}{path}")
}

/// The `host:port` of a URL.
fn addr_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority.rsplit_once('@').map_or(authority, |(_, a)| a)
}

const BACKOFF_FIRST: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One connection to the queue's primary that outlives failovers: `call`
/// runs a command and, when the server refuses it for a failover or the
/// connection is lost, finds the primary again and reruns it, for at most
/// `--reconnect-secs` without a success.
struct Link {
    who: String,
    seeds: Vec<String>,
    current: String,
    con: Option<redis::Connection>,
    patience: Duration,
}

impl Link {
    fn new(cfg: &Config, who: &str) -> Link {
        Link {
            who: who.to_string(),
            seeds: cfg.urls.clone(),
            current: cfg.urls[0].clone(),
            con: None,
            patience: cfg.reconnect,
        }
    }

    fn open(url: &str) -> redis::RedisResult<redis::Connection> {
        let con = redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(2))?;
        // A command may wait out a failover's pause; a dead peer must not hang us.
        con.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(con)
    }

    /// Runs `op`, retrying it through a failover. `op` receives how many
    /// times it failed already: after a lost connection it may have run.
    fn call<T>(
        &mut self,
        mut op: impl FnMut(&mut redis::Connection, u32) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut outage: Option<Instant> = None;
        let mut backoff = BACKOFF_FIRST;
        let mut tries = 0;
        loop {
            let result = match self.con.as_mut() {
                Some(con) => op(con, tries),
                None => match Link::open(&self.current) {
                    Ok(con) => op(self.con.insert(con), tries),
                    Err(e) => Err(e),
                },
            };
            let e = match result {
                Ok(v) => {
                    if tries > 0 {
                        eprintln!("worker {}: going on with {}", self.who, self.current);
                    }
                    return Ok(v);
                }
                Err(e) => e,
            };
            let what = trouble(&e);
            if let Trouble::Fatal = what {
                return Err(e.into());
            }
            let since = *outage.get_or_insert_with(Instant::now);
            if since.elapsed() >= self.patience {
                return Err(format!(
                    "no primary for {:?} (--reconnect-secs) on {}: {e}",
                    self.patience,
                    self.seeds.join(",")
                )
                .into());
            }
            if tries == 0 {
                eprintln!("worker {}: {e} (on {}): retrying", self.who, self.current);
            }
            self.con = None;
            tries += 1;
            match what {
                Trouble::Moved(addr) => self.current = url_with_addr(&self.current, &addr),
                _ => {
                    thread::sleep(backoff);
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    self.find_primary();
                }
            }
        }
    }

    /// Points `current` at the first address whose ROLE is master: the
    /// current one, the primary a replica names, then the seeds. When none
    /// says so, keeps the current one (a cluster replica redirects with MOVED).
    fn find_primary(&mut self) {
        let mut candidates = vec![self.current.clone()];
        candidates.extend(self.seeds.iter().cloned());
        let mut i = 0;
        while i < candidates.len() && i < 16 {
            let url = candidates[i].clone();
            i += 1;
            let Ok(mut con) = Link::open(&url) else {
                continue;
            };
            let Ok(role) = redis::cmd("ROLE").query::<Vec<Value>>(&mut con) else {
                continue;
            };
            match role.first().and_then(text).as_deref() {
                Some("master") => {
                    self.current = url;
                    self.con = Some(con);
                    return;
                }
                Some("slave") => {
                    if let (Some(host), Some(port)) =
                        (role.get(1).and_then(text), role.get(2).and_then(text))
                    {
                        let primary = url_with_addr(&url, &format!("{host}:{port}"));
                        if !candidates.iter().any(|c| addr_of(c) == addr_of(&primary)) {
                            candidates.insert(i, primary);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// The list layout: takes jobs with BRPOP until told to stop. A job popped
/// here exists only in this process until its outcome is written.
fn consume_list(cfg: &Config, keys: &Keys, shared: &Shared, who: &str) -> Result<()> {
    let mut link = Link::new(cfg, who);
    while !shared.stop.load(Ordering::Relaxed) {
        // The pop blocks in the server; the timeout lets the loop see `stop`.
        let popped: Option<(String, String)> = link.call(|con, _| {
            redis::cmd("BRPOP")
                .arg(&keys.pending)
                .arg(BLOCK_MS as f64 / 1000.0)
                .query(con)
        })?;
        let Some((_, job)) = popped else { continue };
        let attempt: u64 = link.call(|con, _| {
            redis::cmd("HINCRBY")
                .arg(&keys.attempts)
                .arg(&job)
                .arg(1)
                .query(con)
        })?;
        let outcome = work(cfg, &job, attempt);
        if let Outcome::Overloaded(ms) = outcome {
            hold(&mut link, keys, shared, ms)?;
        }
        match outcome {
            Outcome::Failed | Outcome::Overloaded(_) => {
                let fire_at_ms: i64 =
                    link.call(|con, _| retry_cmd(cfg, keys, &job, attempt).query(con))?;
                count_retry(shared, fire_at_ms);
            }
            Outcome::Done => {
                let mut pipe = redis::pipe();
                pipe.cmd("SADD").arg(&keys.done).arg(&job);
                pipe.cmd("HINCRBY").arg(&keys.done_by).arg(&cfg.name).arg(1);
                link.call(|con, _| transact(&pipe, con))?;
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
    link: Link,
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
            // A read whose reply a failover lost leaves its entry delivered
            // to this consumer: the lease brings it back (take_over).
            let (cfg, keys, consumer) = (self.cfg, self.keys, &self.consumer);
            let read: Value = self.link.call(|con, _| {
                redis::cmd("XREADGROUP")
                    .arg("GROUP")
                    .arg(&cfg.group)
                    .arg(consumer)
                    .arg("COUNT")
                    .arg(BATCH)
                    .arg("BLOCK")
                    .arg(BLOCK_MS)
                    .arg("STREAMS")
                    .arg(&keys.pending)
                    .arg(">")
                    .query(con)
            })?;
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
            let (cfg, keys, consumer) = (self.cfg, self.keys, &self.consumer);
            let reply: Value = self.link.call(|con, _| {
                redis::cmd("XAUTOCLAIM")
                    .arg(&keys.pending)
                    .arg(&cfg.group)
                    .arg(consumer)
                    .arg(cfg.lease.as_millis() as u64)
                    .arg(&cursor)
                    .arg("COUNT")
                    .arg(BATCH)
                    .query(con)
            })?;
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
        let (cfg, keys, consumer) = (self.cfg, self.keys, self.consumer.clone());
        if let (true, Some(job)) = (cfg.log_takes, &job) {
            println!("took {id} {job}"); // one line, flushed (stdout is line-buffered)
        }
        let Some(job) = job else {
            // Its data is gone: nothing to run, only to acknowledge.
            let _: () = self.link.call(|con, _| {
                redis::cmd("XACK")
                    .arg(&keys.pending)
                    .arg(&cfg.group)
                    .arg(id)
                    .query(con)
            })?;
            return Ok(());
        };
        let attempt: u64 = self.link.call(|con, _| {
            redis::cmd("HINCRBY")
                .arg(&keys.attempts)
                .arg(&job)
                .arg(1)
                .query(con)
        })?;
        // The poison bound: an entry delivered too often is failed unrun.
        let outcome = if taken_over && self.deliveries(id)?.0 > cfg.max_deliveries {
            Outcome::Failed
        } else {
            work(cfg, &job, attempt)
        };
        if let Outcome::Overloaded(ms) = outcome {
            // Held first, so the retry below is not released before the wait.
            hold(&mut self.link, keys, self.shared, ms)?;
        }
        let mut pipe = redis::pipe();
        match outcome {
            Outcome::Failed | Outcome::Overloaded(_) => {
                pipe.add_command(retry_cmd(cfg, keys, &job, attempt));
            }
            Outcome::Done => {
                pipe.cmd("SADD").arg(&keys.done).arg(&job);
                pipe.cmd("HINCRBY").arg(&keys.done_by).arg(&cfg.name).arg(1);
            }
        }
        // The outcome and the acknowledgement are one step: the job is never
        // both scheduled and pending, nor neither.
        pipe.cmd("XACK").arg(&keys.pending).arg(&cfg.group).arg(id);
        pipe.cmd("XDEL").arg(&keys.pending).arg(id);
        // After a failure (a failover refused the step, or the connection
        // went away with it), the step is written only while the entry is
        // still this consumer's: acknowledged means the step went through
        // before the reply was lost; another owner took it over and settles it.
        let written: Option<Vec<Value>> = self.link.call(|con, tries| {
            if tries > 0 && pending_owner(con, cfg, keys, id)?.as_deref() != Some(&consumer) {
                return Ok(None);
            }
            transact(&pipe, con).map(Some)
        })?;
        let Some(replies) = written else {
            eprintln!(
                "worker {}: {job} ({id}) was settled elsewhere meanwhile: its outcome here is dropped",
                cfg.name
            );
            return Ok(());
        };
        match outcome {
            Outcome::Failed | Outcome::Overloaded(_) => {
                // ECHO.RETRY's reply comes first
                let fire_at_ms: i64 =
                    redis::from_redis_value(replies.into_iter().next().unwrap_or(Value::Nil))?;
                count_retry(self.shared, fire_at_ms);
            }
            Outcome::Done => {
                self.shared.completed.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// How many times the group has delivered entry `id` (XPENDING), and to whom.
    fn deliveries(&mut self, id: &str) -> Result<(u64, Option<String>)> {
        let (cfg, keys) = (self.cfg, self.keys);
        let reply: Vec<(String, String, u64, u64)> =
            self.link.call(|con, _| pending_entry(con, cfg, keys, id))?;
        Ok(reply
            .first()
            .map_or((0, None), |entry| (entry.3, Some(entry.1.clone()))))
    }
}

/// `XPENDING pending group id id 1`: the entry's row, if it is pending.
fn pending_entry(
    con: &mut redis::Connection,
    cfg: &Config,
    keys: &Keys,
    id: &str,
) -> redis::RedisResult<Vec<(String, String, u64, u64)>> {
    redis::cmd("XPENDING")
        .arg(&keys.pending)
        .arg(&cfg.group)
        .arg(id)
        .arg(id)
        .arg(1)
        .query(con)
}

/// The consumer that holds entry `id` delivered and unacknowledged, if any.
fn pending_owner(
    con: &mut redis::Connection,
    cfg: &Config,
    keys: &Keys,
    id: &str,
) -> redis::RedisResult<Option<String>> {
    Ok(pending_entry(con, cfg, keys, id)?
        .into_iter()
        .next()
        .map(|row| row.1))
}

/// Moves due retries to pending, then sleeps until the next one is due by
/// the server's clock (at most PROMOTER_CAP, so new retries are seen), or
/// PROMOTER_HELD when a due job stayed (held or limited).
fn promote(cfg: &Config, keys: &Keys, shared: &Shared) -> Result<()> {
    const LIMIT: i64 = 1000;
    let mut link = Link::new(cfg, &format!("{}-promoter", cfg.name));
    while !shared.stop.load(Ordering::Relaxed) {
        let moved: i64 = link.call(|con, _| {
            redis::cmd("ECHO.PROMOTE")
                .arg(&keys.schedule)
                .arg(&keys.pending)
                .arg("LIMIT")
                .arg(LIMIT)
                .query(con)
        })?;
        if moved == LIMIT {
            continue; // more may be due already
        }
        let (next, (secs, micros)): (Vec<(String, f64)>, (i64, i64)) = link.call(|con, _| {
            redis::pipe()
                .cmd("ZRANGE")
                .arg(&keys.schedule)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES")
                .cmd("TIME")
                .query(con)
        })?;
        let now_ms = secs * 1000 + micros / 1000;
        let wait = match next.first() {
            Some((_, fire_at_ms)) if (*fire_at_ms as i64) <= now_ms => PROMOTER_HELD,
            Some((_, fire_at_ms)) => {
                Duration::from_millis((*fire_at_ms as i64 - now_ms) as u64).min(PROMOTER_CAP)
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
/// exists already is fine. A list where the stream belongs is explained.
fn create_group(link: &mut Link, cfg: &Config, keys: &Keys) -> Result<()> {
    let created: Result<()> = link.call(|con, _| {
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&keys.pending)
            .arg(&cfg.group)
            // At 0, not $: entries a producer added before the group existed
            // are delivered too.
            .arg("0")
            .arg("MKSTREAM")
            .query(con);
        match created {
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => other,
        }
    });
    let Err(e) = created else { return Ok(()) };
    let wrong_type = e
        .downcast_ref::<redis::RedisError>()
        .is_some_and(|e| e.code() == Some("WRONGTYPE"));
    if !wrong_type {
        return Err(e);
    }
    let kind: String = link.call(|con, _| redis::cmd("TYPE").arg(&keys.pending).query(con))?;
    Err(wrong_layout(&keys.pending, &kind).into())
}

/// Why a stream worker cannot use `pending`, and what to run.
fn wrong_layout(pending: &str, kind: &str) -> String {
    format!(
        "{pending} is a {kind}, not a stream (XGROUP CREATE: WRONGTYPE): the stream workers \
         need a stream with the group; a list is left by --layout list workers, or by a \
         promotion (ECHO.PROMOTE or echomq.auto-promote) into {pending} before any stream \
         worker created it. Run the worker with --fresh to start the queue afresh (it \
         deletes the queue's keys), or DEL {pending} to drop only what it holds"
    )
}

/// Ok(true) when every job is done or dead, Ok(false) at the deadline.
fn run() -> Result<bool> {
    let cfg = config()?;
    let keys = Keys::new(&cfg.queue);
    let mut link = Link::new(&cfg, &cfg.name);
    if cfg.fresh {
        let _: () = link.call(|con, _| {
            redis::cmd("DEL")
                .arg(&keys.pending)
                .arg(&keys.schedule)
                .arg(&keys.attempts)
                .arg(&keys.done)
                .arg(&keys.done_by)
                .arg(&keys.dead)
                .query(con)
        })?;
    }
    if cfg.layout == Layout::Stream {
        create_group(&mut link, &cfg, &keys)?;
    }
    if cfg.seed && cfg.jobs > 0 && cfg.seed_delay_ms > 0 {
        // A delayed first run: ECHO.SCHEDULE (not a failure, not a retry),
        // all or nothing, so a retry after a refusal cannot seed twice.
        let mut pipe = redis::pipe();
        for i in 0..cfg.jobs {
            pipe.cmd("ECHO.SCHEDULE")
                .arg(&keys.schedule)
                .arg(format!("job-{i}"))
                .arg(cfg.seed_delay_ms);
        }
        let fire_at: Vec<i64> =
            redis::from_redis_value(Value::Array(link.call(|con, _| transact(&pipe, con))?))?;
        println!(
            "worker {}: scheduled job-0 .. job-{} with ECHO.SCHEDULE, due at {} .. {} (server ms)",
            cfg.name,
            cfg.jobs - 1,
            fire_at.iter().min().unwrap_or(&0),
            fire_at.iter().max().unwrap_or(&0)
        );
    } else if cfg.seed && cfg.jobs > 0 {
        let mut pipe = redis::pipe();
        match cfg.layout {
            Layout::Stream => {
                for i in 0..cfg.jobs {
                    pipe.cmd("XADD")
                        .arg(&keys.pending)
                        .arg("*")
                        .arg("job")
                        .arg(format!("job-{i}"));
                }
            }
            Layout::List => {
                let jobs: Vec<String> = (0..cfg.jobs).map(|i| format!("job-{i}")).collect();
                pipe.cmd("LPUSH").arg(&keys.pending).arg(jobs);
            }
        }
        // All or nothing, so a retry after a refusal cannot seed twice.
        link.call(|con, _| transact(&pipe, con))?;
    }

    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        completed: AtomicU64::new(0),
        retried: AtomicU64::new(0),
        dead: AtomicU64::new(0),
        held: AtomicU64::new(0),
        taken_over: AtomicU64::new(0),
    });
    let mut threads = Vec::new();
    for i in 0..cfg.consumers {
        let (cfg, keys, shared) = (cfg.clone(), keys.clone(), shared.clone());
        threads.push(thread::spawn(move || {
            let consumer = format!("{}-{i}", cfg.name);
            match cfg.layout {
                Layout::List => consume_list(&cfg, &keys, &shared, &consumer),
                Layout::Stream => StreamConsumer {
                    link: Link::new(&cfg, &consumer),
                    consumer,
                    cfg: &cfg,
                    keys: &keys,
                    shared: &shared,
                }
                .run(),
            }
        }));
    }
    if cfg.promoter {
        let (cfg, keys, shared) = (cfg.clone(), keys.clone(), shared.clone());
        threads.push(thread::spawn(move || promote(&cfg, &keys, &shared)));
    }

    // Every worker sharing the queue stops once each job is done or dead.
    let started = Instant::now();
    let mut all_done = false;
    let mut failed = None;
    while started.elapsed() < cfg.deadline {
        let (done, dead) = match finished(&mut link, &keys) {
            Ok(counts) => counts,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
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
    if let Some(e) = failed {
        return Err(e);
    }
    let (done, dead) = finished(&mut link, &keys)?;
    println!(
        "worker {}: completed {} here, retried {} here, dead-lettered {} here, held {} here, \
         took over {} here; {done}/{} done and {dead} dead on queue '{}' after {:.2}s",
        cfg.name,
        shared.completed.load(Ordering::Relaxed),
        shared.retried.load(Ordering::Relaxed),
        shared.dead.load(Ordering::Relaxed),
        shared.held.load(Ordering::Relaxed),
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
fn finished(link: &mut Link, keys: &Keys) -> Result<(u64, u64)> {
    link.call(|con, _| {
        redis::pipe()
            .cmd("SCARD")
            .arg(&keys.done)
            .cmd("ZCARD")
            .arg(&keys.dead)
            .query(con)
    })
}
