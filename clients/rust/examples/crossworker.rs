//! The cross-language test program (the same command line as the Python and
//! Node.js ones):
//!
//! ```text
//! crossworker work --url URL --queue NAME [--done KEY] [--fail MSG] [--sleep-ms MS]
//!                  [--concurrency N] [--lease-ms MS] [--max-attempts N] [--backoff POLICY]
//!                  [--max-deliveries N] [--shutdown-timeout-ms MS] [--started KEY] [--crash]
//! crossworker add --url URL --queue NAME --count N [--id-prefix P] [--delay-ms D]
//! crossworker dead --url URL --queue NAME
//! crossworker requeue --url URL --queue NAME --id ID
//! crossworker purge --url URL --queue NAME [--older-than-ms MS]
//! ```
//!
//! `work` runs a worker until SIGTERM (then closes it gracefully and exits
//! 0) and prints `ready` once the group exists; `add` prints the ids it
//! added; `dead` prints each dead job as a JSON object per line; `requeue`
//! prints `true` when the job was dead and is pending again (else `false`);
//! `purge` prints how many dead jobs it removed.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use echomq_client::{AddOptions, Job, JobError, Queue, Worker, WorkerOptions};

const USAGE: &str =
    "usage: crossworker work|add|dead|requeue|purge --url URL --queue NAME [options]";

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
        if flag == "--crash" {
            options.insert("crash".to_string(), String::new());
            continue;
        }
        let (Some(name), Some(value)) = (flag.strip_prefix("--"), it.next()) else {
            eprintln!("crossworker: expected --option value, got {flag:?}\n{USAGE}");
            return ExitCode::from(2);
        };
        options.insert(name.to_string(), value.clone());
    }
    let result = match command.as_str() {
        "work" => work(&options).await,
        "add" => add(&options).await,
        "dead" => dead(&options).await,
        "requeue" => requeue(&options).await,
        "purge" => purge(&options).await,
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

async fn open(options: &HashMap<String, String>) -> Result<Queue, String> {
    let client = redis::Client::open(required(options, "url")?).map_err(|e| e.to_string())?;
    Queue::new(client, required(options, "queue")?)
        .await
        .map_err(|e| e.to_string())
}

async fn work(options: &HashMap<String, String>) -> Result<(), String> {
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
    let done = options.get("done").cloned();
    let fail = options.get("fail").cloned();
    let sleep_ms = number(options, "sleep-ms", 0)?;
    let crash = options.contains_key("crash");
    let conn = queue.connection();
    let handler = move |job: Job| {
        let (started, done, fail, mut conn) =
            (started.clone(), done.clone(), fail.clone(), conn.clone());
        async move {
            if let Some(key) = started {
                redis::cmd("RPUSH")
                    .arg(key)
                    .arg(&job.id)
                    .query_async::<()>(&mut conn)
                    .await?;
            }
            if crash {
                // A job that kills whatever runs it: this process dies as under SIGKILL.
                let pid = std::process::id().to_string();
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid])
                    .status();
                std::process::abort();
            }
            tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
            if let Some(message) = fail {
                return Err(JobError::msg(message));
            }
            if let Some(key) = done {
                redis::cmd("HINCRBY")
                    .arg(key)
                    .arg(&job.id)
                    .arg(1)
                    .query_async::<()>(&mut conn)
                    .await?;
            }
            Ok(())
        }
    };
    queue.ensure_group().await.map_err(|e| e.to_string())?;
    let worker = Worker::new(queue, handler, worker_options);
    let handle = worker.handle();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        handle.close();
    });
    let mut stdout = std::io::stdout();
    writeln!(stdout, "ready")
        .and_then(|()| stdout.flush())
        .map_err(|e| e.to_string())?;
    worker.run().await.map_err(|e| e.to_string())
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
