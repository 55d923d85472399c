//! A worker whose jobs are URLs: each run makes an HTTP/1.1 GET (plain
//! `http://`, with nothing but tokio). A 2xx answer is a success; a 429 or
//! 503 with `Retry-After: <seconds>` holds the whole queue that long
//! (`JobError::RetryAfter`); anything else is a failure the server retries by
//! the backoff policy. Ctrl-C or SIGTERM closes the worker gracefully.
//!
//! ```text
//! cargo run --release -p echomq-client --example worker -- \
//!     [--url redis://127.0.0.1:6379/] [--queue fetch] [--concurrency 10]
//! ```

use std::time::Duration;

use echomq_client::{Job, JobError, Queue, Worker, WorkerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut url = "redis://127.0.0.1:6379/".to_string();
    let mut queue = "fetch".to_string();
    let mut options = WorkerOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--url" => url = value,
            "--queue" => queue = value,
            "--concurrency" => options.concurrency = value.parse()?,
            _ => return Err(format!("unknown option {arg}").into()),
        }
    }
    let queue = Queue::new(redis::Client::open(url)?, queue).await?;
    let worker = Worker::new(queue, fetch, options);
    let handle = worker.handle();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        eprintln!("closing: waiting for the running jobs");
        handle.close();
    });
    worker.run().await?;
    Ok(())
}

async fn fetch(job: Job) -> Result<(), JobError> {
    let target = std::str::from_utf8(&job.payload)?;
    let rest = target
        .strip_prefix("http://")
        .ok_or_else(|| JobError::msg(format!("not an http:// URL: {target}")))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let address = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let exchange = async {
        let mut stream = TcpStream::connect(&address).await?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nUser-Agent: echomq-worker\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        // The status line and headers are all we need.
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(head)
    };
    let head = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| JobError::msg(format!("{target}: no answer within 10 s")))??;
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| JobError::msg(format!("{target}: not an HTTP answer")))?;
    let retry_after = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if name.trim().eq_ignore_ascii_case("retry-after") {
            value.trim().parse::<u64>().ok()
        } else {
            None
        }
    });
    match (status, retry_after) {
        (200..=299, _) => {
            println!(
                "{} (attempt {}): {target} answered {status}",
                job.id, job.attempt
            );
            Ok(())
        }
        (429 | 503, Some(seconds)) => Err(JobError::RetryAfter(seconds * 1000)),
        _ => Err(JobError::msg(format!("{target} answered {status}"))),
    }
}
