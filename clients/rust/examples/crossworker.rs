//! The cross-language test program (the same command line as the Python and
//! Node.js ones):
//!
//! ```text
//! crossworker work --url URL --queue NAME [--done KEY] [--fail MSG] [--sleep-ms MS]
//!                  [--concurrency N] [--lease-ms MS] [--max-attempts N] [--backoff POLICY]
//!                  [--max-deliveries N] [--shutdown-timeout-ms MS] [--started KEY] [--crash]
//!                  [--cluster] [--fail-first K] [--overload-every K] [--retry-after-ms MS]
//!                  [--crash-on ID] [--hold-group-on ID] [--log-takes] [--log-starts KEY]
//!                  [--jobs N] [--deadline-secs S] [--ran KEY] [--shards N]
//! crossworker add --url URL --queue NAME --count N [--id-prefix P] [--delay-ms D] [--group G]
//!                 [--cluster] [--shards N]
//! crossworker dead --url URL --queue NAME [--cluster] [--shards N]
//! crossworker requeue --url URL --queue NAME --id ID [--cluster] [--shards N]
//! crossworker purge --url URL --queue NAME [--older-than-ms MS] [--cluster] [--shards N]
//! crossworker repeat --url URL --queue NAME --id ID --spec SPEC --payload TEXT [--jitter-ms MS]
//!                    [--tz ZONE] [--from-ms MS] [--until-ms MS] [--cluster] [--shards N]
//! crossworker repeats --url URL --queue NAME [--cluster] [--shards N]
//! crossworker unrepeat --url URL --queue NAME --id ID [--cluster] [--shards N]
//! ```
//!
//! Every command takes `--shards N` (default 1, 1..=1024): the queue is a
//! sharded queue of N shards (docs/clients.md, Sharded queues), as the
//! producers and workers of every language open it with the same N.
//!
//! `work` runs a worker until SIGTERM (then closes it gracefully and exits
//! 0) and prints `ready` once the group exists; `add` prints the ids it
//! added; `dead` prints each dead job as a JSON object per line; `requeue`
//! prints `true` when the job was dead and is pending again (else `false`);
//! `purge` prints how many dead jobs it removed; `repeat` prints the fire time
//! of the armed occurrence, `repeats` one JSON object a line (id, spec,
//! jitter_ms, tz, from_ms, until_ms, next_ms, fire_at_ms), `unrepeat` `true`
//! or `false`.
//!
//! `--cluster`: `--url` is one seed node, or several comma-separated, of a
//! Valkey Cluster, and the queue (with the handler's own writes) goes
//! through `redis::cluster::ClusterClient`.
//!
//! What `work` does in a run, in this order: `--log-takes` prints `took
//! <entry-id> <job-id> <attempt>`; `--started` pushes the id; `--ran` pushes
//! `<job-id> <payload as hex>`; `--log-starts
//! KEY` adds `job <id> attempt <n> entry <entry-id>` to the stream KEY (the
//! new entry's id is the server's clock at the start); `--crash` (every
//! job) or `--crash-on ID` (that job) kills the process with SIGKILL;
//! `--sleep-ms`; `--hold-group-on ID` fails that job's first attempt with
//! `JobError::retry_after(--retry-after-ms, its group)`, holding the job's
//! own group; `--overload-every K` fails a run whose attempt is a multiple
//! of K with `RetryAfter(--retry-after-ms, default 1000)`; `--fail-first K`
//! fails a job whose id ends in digits i its first `i % (K+1)` attempts with
//! "planned failure"; `--fail MSG` fails every run; else `--done` counts the
//! success with `HINCRBY`. `--jobs N` (with `--done`) closes the worker once
//! `HLEN <done> + ZCARD {NAME}:dead` (every shard's dead set) reaches N; `--deadline-secs S` exits 2
//! if it is still running S seconds after start. Every exit of `work` that
//! is not a crash prints `summary {"runs":R,"max_concurrent":C}` last.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq_client::{
    AddOptions, Job, JobError, Queue, QueueConnection, RepeatOptions, Worker, WorkerOptions,
};

const USAGE: &str = "usage: crossworker work|add|dead|requeue|purge|repeat|repeats|unrepeat --url URL --queue NAME [--shards N] [options]";

/// The options that take no value.
const FLAGS: [&str; 3] = ["crash", "cluster", "log-takes"];

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let mut options = HashMap::new();
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        if let Some(name) = flag.strip_prefix("--").filter(|n| FLAGS.contains(n)) {
            options.insert(name.to_string(), String::new());
            continue;
        }
        let (Some(name), Some(value)) = (flag.strip_prefix("--"), it.next()) else {
            eprintln!("crossworker: expected --option value, got {flag:?}\n{USAGE}");
            return ExitCode::from(2);
        };
        options.insert(name.to_string(), value.clone());
    }
    let result = match command.as_str() {
        "work" => return work(&options).await,
        "add" => add(&options).await,
        "dead" => dead(&options).await,
        "requeue" => requeue(&options).await,
        "purge" => purge(&options).await,
        "repeat" => repeat(&options).await,
        "repeats" => repeats(&options).await,
        "unrepeat" => unrepeat(&options).await,
        _ => Err(format!("unknown command {command:?}\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crossworker: {e}");
            ExitCode::FAILURE
        }
    }
}

fn required<'a>(options: &'a HashMap<String, String>, name: &str) -> Result<&'a str, String> {
    options
        .get(name)
        .map(String::as_str)
        .ok_or_else(|| format!("--{name} is required"))
}

fn number(options: &HashMap<String, String>, name: &str, default: u64) -> Result<u64, String> {
    match options.get(name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("--{name} must be a non-negative integer, got {v:?}")),
    }
}

/// The queue of `--url`, `--queue`, `--cluster` and `--shards`.
async fn open(options: &HashMap<String, String>) -> Result<Queue, String> {
    let url = required(options, "url")?;
    let name = required(options, "queue")?;
    let shards = number(options, "shards", 1)?;
    let queue = if options.contains_key("cluster") {
        let seeds: Vec<&str> = url.split(',').filter(|s| !s.is_empty()).collect();
        let client = redis::cluster::ClusterClient::new(seeds).map_err(|e| e.to_string())?;
        Queue::on_cluster(client, name).await
    } else {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        Queue::new(client, name).await
    };
    queue
        .and_then(|q| q.with_shards(usize::try_from(shards).unwrap_or(usize::MAX)))
        .map_err(|e| e.to_string())
}

/// Runs started and the most handlers running at once, for the summary.
#[derive(Default)]
struct Stats {
    runs: AtomicU64,
    running: AtomicU64,
    max_concurrent: AtomicU64,
}

impl Stats {
    fn summary(&self) -> String {
        format!(
            "summary {{\"runs\":{},\"max_concurrent\":{}}}",
            self.runs.load(Ordering::SeqCst),
            self.max_concurrent.load(Ordering::SeqCst)
        )
    }
}

/// One run counted as running until it drops (whichever way the handler
/// returns).
struct Running(Arc<Stats>);

impl Running {
    fn new(stats: &Arc<Stats>) -> Running {
        stats.runs.fetch_add(1, Ordering::SeqCst);
        let now = stats.running.fetch_add(1, Ordering::SeqCst) + 1;
        stats.max_concurrent.fetch_max(now, Ordering::SeqCst);
        Running(stats.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A line on stdout, flushed at once (the tests read it while the worker
/// runs). A closed stdout (a test that read only `ready`) is not an error of
/// the worker's, so a failed write is dropped.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// `work`'s exit: the summary on every way out that is not a crash.
async fn work(options: &HashMap<String, String>) -> ExitCode {
    let stats = Arc::new(Stats::default());
    let code = match run_worker(options, &stats).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("crossworker: {e}");
            ExitCode::FAILURE
        }
    };
    say(&stats.summary());
    code
}

/// The trailing decimal digits of a job id, modulo `m` (digit by digit, so
/// a long run of digits does not overflow); `None` without trailing digits.
fn trailing_digits_mod(id: &str, m: u64) -> Option<u64> {
    let digits = id.len() - id.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    Some(
        id[id.len() - digits..]
            .bytes()
            .fold(0u64, |r, d| (r * 10 + u64::from(d - b'0')) % m),
    )
}

/// A refusal that a failover or a slot move explains, or a broken
/// connection: sending the same write again may succeed. (MOVED and ASK
/// never get here: the cluster client follows them itself.)
fn transient(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || matches!(
            e.code(),
            Some("READONLY" | "LOADING" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN")
        )
}

/// The handler's own write, sent again for up to 30 s while it meets a
/// failover (50 ms between tries, doubling to 1 s): a failover must not turn
/// into a job failure. A resent HINCRBY whose first try got through counts
/// twice, which the tests read as a job run twice: at least once, as ever.
async fn retried(conn: &QueueConnection, cmd: redis::Cmd) -> redis::RedisResult<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut pause = Duration::from_millis(50);
    loop {
        let mut conn = conn.clone();
        match cmd.query_async::<()>(&mut conn).await {
            Err(e) if transient(&e) && Instant::now() + pause < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            result => return result,
        }
    }
}

async fn run_worker(
    options: &HashMap<String, String>,
    stats: &Arc<Stats>,
) -> Result<ExitCode, String> {
    let started_at = Instant::now();
    let deadline_secs = number(options, "deadline-secs", 0)?;
    let jobs = match options.get("jobs") {
        Some(_) => Some(number(options, "jobs", 0)?),
        None => None,
    };
    let done = options.get("done").cloned();
    if jobs.is_some() && done.is_none() {
        return Err("--jobs needs --done KEY".into());
    }
    let queue = open(options).await?;
    let defaults = WorkerOptions::default();
    let worker_options = WorkerOptions {
        concurrency: number(options, "concurrency", defaults.concurrency as u64)? as usize,
        backoff: options.get("backoff").cloned().unwrap_or(defaults.backoff),
        max_attempts: number(options, "max-attempts", defaults.max_attempts)?,
        lease_ms: number(options, "lease-ms", defaults.lease_ms)?,
        max_deliveries: number(options, "max-deliveries", defaults.max_deliveries)?,
        shutdown_timeout_ms: number(options, "shutdown-timeout-ms", defaults.shutdown_timeout_ms)?,
    };
    let started = options.get("started").cloned();
    let ran = options.get("ran").cloned();
    let fail = options.get("fail").cloned();
    let sleep_ms = number(options, "sleep-ms", 0)?;
    let crash = options.contains_key("crash");
    let crash_on = options.get("crash-on").cloned();
    let log_takes = options.contains_key("log-takes");
    let log_starts = options.get("log-starts").cloned();
    let hold_group_on = options.get("hold-group-on").cloned();
    let fail_first = match options.get("fail-first") {
        Some(_) => Some(number(options, "fail-first", 0)?),
        None => None,
    };
    // 0 would be "every multiple of 0": read as off.
    let overload_every = number(options, "overload-every", 0)?;
    let retry_after_ms = number(options, "retry-after-ms", 1000)?;
    let conn = queue.connection();
    let handler = {
        let (done, stats, conn) = (done.clone(), stats.clone(), conn.clone());
        move |job: Job| {
            let (started, ran, done, fail, crash_on, conn) = (
                started.clone(),
                ran.clone(),
                done.clone(),
                fail.clone(),
                crash_on.clone(),
                conn.clone(),
            );
            let (log_starts, hold_group_on) = (log_starts.clone(), hold_group_on.clone());
            let running = Running::new(&stats);
            async move {
                let _running = running;
                if log_takes {
                    say(&format!("took {} {} {}", job.entry_id, job.id, job.attempt));
                }
                if let Some(key) = started {
                    let mut cmd = redis::cmd("RPUSH");
                    cmd.arg(key).arg(&job.id);
                    retried(&conn, cmd).await?;
                }
                if let Some(key) = ran {
                    let hex: String = job.payload.iter().map(|b| format!("{b:02x}")).collect();
                    let mut cmd = redis::cmd("RPUSH");
                    cmd.arg(key).arg(format!("{} {hex}", job.id));
                    retried(&conn, cmd).await?;
                }
                if let Some(key) = log_starts {
                    let mut cmd = redis::cmd("XADD");
                    cmd.arg(key).arg("*").arg("job").arg(&job.id);
                    cmd.arg("attempt")
                        .arg(job.attempt)
                        .arg("entry")
                        .arg(&job.entry_id);
                    retried(&conn, cmd).await?;
                }
                if crash || crash_on.as_deref() == Some(job.id.as_str()) {
                    // A job that kills whatever runs it: this process dies as under SIGKILL.
                    let pid = std::process::id().to_string();
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &pid])
                        .status();
                    std::process::abort();
                }
                // Not `sleep(0)`: tokio's timer rounds a deadline up to its
                // next millisecond tick, so a zero sleep would wait up to 1 ms
                // in every run.
                if sleep_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
                }
                if hold_group_on.as_deref() == Some(job.id.as_str()) && job.attempt == 1 {
                    return Err(JobError::retry_after(retry_after_ms, job.group.clone()));
                }
                if overload_every > 0 && job.attempt.is_multiple_of(overload_every) {
                    return Err(JobError::RetryAfter(retry_after_ms));
                }
                if let Some(k) = fail_first {
                    if trailing_digits_mod(&job.id, k + 1).is_some_and(|n| job.attempt <= n) {
                        return Err(JobError::msg("planned failure"));
                    }
                }
                if let Some(message) = fail {
                    return Err(JobError::msg(message));
                }
                if let Some(key) = done {
                    let mut cmd = redis::cmd("HINCRBY");
                    cmd.arg(key).arg(&job.id).arg(1);
                    retried(&conn, cmd).await?;
                }
                Ok(())
            }
        }
    };
    queue.ensure_group().await.map_err(|e| e.to_string())?;
    let dead_keys: Vec<String> = queue
        .shards()
        .iter()
        .map(|tag| format!("{{{tag}}}:dead"))
        .collect();
    let worker = Worker::new(queue, handler, worker_options);
    let handle = worker.handle();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let on_signal = handle.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        on_signal.close();
    });
    if let (Some(n), Some(done)) = (jobs, done) {
        let (on_count, conn) = (handle.clone(), conn.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if finished(&conn, &done, &dead_keys).await >= n {
                    on_count.close();
                    return;
                }
            }
        });
    }
    say("ready");
    let deadline = async {
        if deadline_secs == 0 {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep_until((started_at + Duration::from_secs(deadline_secs)).into()).await;
    };
    ran_until(worker.run(), deadline).await
}

/// The worker's run, or exit 2 when the deadline comes first.
async fn ran_until(
    run: impl Future<Output = redis::RedisResult<()>>,
    deadline: impl Future<Output = ()>,
) -> Result<ExitCode, String> {
    tokio::select! {
        result = run => result.map(|()| ExitCode::SUCCESS).map_err(|e| e.to_string()),
        () = deadline => {
            eprintln!("crossworker: still running at --deadline-secs");
            Ok(ExitCode::from(2))
        }
    }
}

/// `HLEN <done>` plus `ZCARD` of each shard's dead set; 0 while a failover
/// refuses them (the next poll asks again).
async fn finished(conn: &QueueConnection, done: &str, dead: &[String]) -> u64 {
    let mut conn = conn.clone();
    // One command each, not a pipeline: the keys may hash to different slots.
    let Ok(mut sum) = redis::cmd("HLEN")
        .arg(done)
        .query_async::<u64>(&mut conn)
        .await
    else {
        return 0;
    };
    for key in dead {
        match redis::cmd("ZCARD")
            .arg(key)
            .query_async::<u64>(&mut conn)
            .await
        {
            Ok(n) => sum += n,
            Err(_) => return 0,
        }
    }
    sum
}

async fn add(options: &HashMap<String, String>) -> Result<(), String> {
    let queue = open(options).await?;
    let count = number(options, "count", 0)?;
    let prefix = options.get("id-prefix");
    let delay_ms = number(options, "delay-ms", 0)?;
    let jobs = (0..count).map(|i| {
        (
            format!("payload-{i}"),
            AddOptions {
                id: prefix.map(|p| format!("{p}{i}")),
                delay_ms,
                group: options.get("group").cloned(),
            },
        )
    });
    let ids = queue.add_many_with(jobs).await.map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    for id in ids {
        writeln!(out, "{id}").map_err(|e| e.to_string())?;
    }
    out.flush().map_err(|e| e.to_string())
}

async fn dead(options: &HashMap<String, String>) -> Result<(), String> {
    let queue = open(options).await?;
    let mut out = std::io::stdout().lock();
    let mut offset = 0;
    loop {
        let page = queue.dead(offset, 500).await.map_err(|e| e.to_string())?;
        if page.is_empty() {
            break;
        }
        offset += page.len() as u64;
        for job in page {
            // A missing error or payload is JSON null, as in the Python and
            // Node.js crossworkers.
            let hex = match &job.payload {
                Some(payload) => {
                    let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
                    format!("\"{hex}\"")
                }
                None => "null".into(),
            };
            let error = job.error.as_deref().map_or("null".into(), json_string);
            writeln!(
                out,
                "{{\"id\": {}, \"died_at_ms\": {}, \"attempts\": {}, \"error\": {error}, \"payload_hex\": {hex}}}",
                json_string(&job.id),
                job.died_at_ms,
                job.attempts,
            )
            .map_err(|e| e.to_string())?;
        }
    }
    out.flush().map_err(|e| e.to_string())
}

async fn requeue(options: &HashMap<String, String>) -> Result<(), String> {
    let queue = open(options).await?;
    let moved = queue
        .requeue(required(options, "id")?)
        .await
        .map_err(|e| e.to_string())?;
    println!("{moved}");
    Ok(())
}

async fn purge(options: &HashMap<String, String>) -> Result<(), String> {
    let queue = open(options).await?;
    let older_than_ms = number(options, "older-than-ms", 0)?;
    let removed = queue
        .purge_dead(older_than_ms)
        .await
        .map_err(|e| e.to_string())?;
    println!("{removed}");
    Ok(())
}

/// A signed integer option (Unix ms may be negative), or `None`.
fn signed(options: &HashMap<String, String>, name: &str) -> Result<Option<i64>, String> {
    options
        .get(name)
        .map(|v| {
            v.parse()
                .map_err(|_| format!("--{name} must be an integer, got {v:?}"))
        })
        .transpose()
}

/// Prints the fire time of the armed occurrence.
async fn repeat(options: &HashMap<String, String>) -> Result<(), String> {
    let queue = open(options).await?;
    let repeat_options = RepeatOptions {
        jitter_ms: number(options, "jitter-ms", 0)?,
        tz: options.get("tz").cloned(),
        from_ms: signed(options, "from-ms")?,
        until_ms: signed(options, "until-ms")?,
    };
    let fire = queue
        .repeat(
            required(options, "id")?,
            required(options, "spec")?,
            required(options, "payload")?,
            repeat_options,
        )
        .await
        .map_err(|e| e.to_string())?;
    println!("{fire}");
    Ok(())
}

/// Prints each definition as a JSON object a line.
async fn repeats(options: &HashMap<String, String>) -> Result<(), String> {
    let queue = open(options).await?;
    let opt = |v: Option<i64>| v.map_or("null".to_string(), |v| v.to_string());
    let mut out = std::io::stdout().lock();
    for r in queue.repeats().await.map_err(|e| e.to_string())? {
        writeln!(
            out,
            "{{\"id\": {}, \"spec\": {}, \"jitter_ms\": {}, \"tz\": {}, \"from_ms\": {}, \"until_ms\": {}, \"next_ms\": {}, \"fire_at_ms\": {}}}",
            json_string(&r.id),
            json_string(&r.spec),
            r.jitter_ms,
            json_string(&r.tz),
            opt(r.from_ms),
            opt(r.until_ms),
            r.next_ms,
            opt(r.fire_at_ms),
        )
        .map_err(|e| e.to_string())?;
    }
    out.flush().map_err(|e| e.to_string())
}

/// Prints `true` when the definition existed, else `false`.
async fn unrepeat(options: &HashMap<String, String>) -> Result<(), String> {
    let queue = open(options).await?;
    let removed = queue
        .unrepeat(required(options, "id")?)
        .await
        .map_err(|e| e.to_string())?;
    println!("{removed}");
    Ok(())
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
