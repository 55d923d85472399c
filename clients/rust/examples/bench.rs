//! The echomq Rust worker, driven for the `clients` section of `make bench`
//! (scripts/bench/clients.py says how the section measures):
//!
//! ```text
//! bench --url redis://127.0.0.1:PORT/ --queue NAME --jobs N [--concurrency 50] [--fail-once]
//! ```
//!
//! It speaks the benchmark drivers' line protocol on stdin and stdout (the
//! same in every driver): prints `{"event":"ready"}` once connected; on the
//! line `add`, adds N jobs with one `add_many` (payload `{"i":<i>}`) and
//! prints `{"event":"added",...}`; on the line `work`, runs one worker
//! (concurrency `--concurrency`, an empty handler; with `--fail-once` the
//! first run of every job fails, retried under backoff `fixed:0` with
//! `max_attempts` 2) and prints `{"event":"done",...}` when every job has
//! succeeded and the queue is seen empty; then closes the worker and exits 0.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use echomq_client::{Job, JobError, Queue, Worker, WorkerOptions};
use tokio::sync::Notify;

const USAGE: &str = "usage: bench --url URL --queue NAME --jobs N [--concurrency N] [--fail-once]";

#[derive(Default)]
struct State {
    seen: Mutex<HashSet<String>>,
    succeeded: AtomicU64,
    failed: AtomicU64,
    runs: AtomicU64,
    first: OnceLock<Instant>,
    done: Notify,
}

#[tokio::main]
async fn main() -> ExitCode {
    match bench().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Waits for `word` on stdin (blocking: nothing else runs meanwhile).
fn expect(word: &str) -> Result<(), String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    if line.trim() == word {
        Ok(())
    } else {
        Err(format!("expected {word:?} on stdin, got {line:?}"))
    }
}

async fn bench() -> Result<(), String> {
    let mut options = HashMap::new();
    let mut fail_once = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--fail-once" {
            fail_once = true;
            continue;
        }
        let (Some(name), Some(value)) = (flag.strip_prefix("--"), it.next()) else {
            return Err(format!("expected --option value, got {flag:?}\n{USAGE}"));
        };
        options.insert(name.to_string(), value);
    }
    let get = |name: &str| {
        options
            .get(name)
            .cloned()
            .ok_or_else(|| format!("--{name} is required\n{USAGE}"))
    };
    let n: u64 = get("jobs")?.parse().map_err(|_| "--jobs: a number")?;
    let concurrency: usize = options
        .get("concurrency")
        .map_or(Ok(50), |v| v.parse())
        .map_err(|_| "--concurrency: a number")?;
    let client = redis::Client::open(get("url")?).map_err(|e| e.to_string())?;
    let queue = Queue::new(client, get("queue")?)
        .await
        .map_err(|e| e.to_string())?;
    say(r#"{"event":"ready"}"#);

    expect("add")?;
    let payloads: Vec<String> = (0..n).map(|i| format!("{{\"i\":{i}}}")).collect();
    let t0 = Instant::now();
    queue.add_many(&payloads).await.map_err(|e| e.to_string())?;
    say(&format!(
        r#"{{"event":"added","jobs":{n},"seconds":{}}}"#,
        t0.elapsed().as_secs_f64()
    ));

    expect("work")?;
    let state = Arc::new(State::default());
    let t0 = Instant::now();
    let s = state.clone();
    let worker = Worker::new(
        queue.clone(),
        move |job: Job| {
            let s = s.clone();
            async move {
                s.runs.fetch_add(1, Ordering::Relaxed);
                if fail_once && s.seen.lock().expect("not poisoned").insert(job.id) {
                    s.failed.fetch_add(1, Ordering::Relaxed);
                    return Err(JobError::msg("fails once"));
                }
                let _ = s.first.set(Instant::now());
                if s.succeeded.fetch_add(1, Ordering::Relaxed) + 1 == n {
                    s.done.notify_one();
                }
                Ok(())
            }
        },
        WorkerOptions {
            concurrency,
            backoff: "fixed:0".into(),
            max_attempts: 2,
            ..WorkerOptions::default()
        },
    );
    let handle = worker.handle();
    // The last handler has returned; its outcome is written once the queue
    // holds nothing. Polled beside the running worker, which sends it.
    let watch = async {
        state.done.notified().await;
        loop {
            let c = queue.counts().await.map_err(|e| e.to_string())?;
            if c.scheduled + c.due + c.pending + c.in_flight + c.dead == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let last = Instant::now();
        let first = state.first.get().copied().unwrap_or(last);
        say(&format!(
            r#"{{"event":"done","jobs":{n},"succeeded":{},"failed":{},"runs":{},"seconds":{},"first_to_last":{}}}"#,
            state.succeeded.load(Ordering::Relaxed),
            state.failed.load(Ordering::Relaxed),
            state.runs.load(Ordering::Relaxed),
            (last - t0).as_secs_f64(),
            (last - first).as_secs_f64()
        ));
        handle.close();
        Ok::<(), String>(())
    };
    let run = worker.run();
    tokio::pin!(run, watch);
    tokio::select! {
        ran = &mut run => {
            return Err(match ran {
                Ok(()) => "the worker stopped before the last job".into(),
                Err(e) => e.to_string(),
            });
        }
        watched = &mut watch => watched?,
    }
    run.await.map_err(|e| e.to_string())
}
