//! Adds jobs: each payload is a URL for the `worker` example to fetch.
//!
//! ```text
//! cargo run --release -p echomq-client --example producer -- \
//!     [--url redis://127.0.0.1:6379/] [--queue fetch] [--count 10] [--delay-ms 0] \
//!     http://127.0.0.1:8000/
//! ```

use echomq_client::{AddOptions, Queue};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut url = "redis://127.0.0.1:6379/".to_string();
    let mut queue = "fetch".to_string();
    let mut count = 10u64;
    let mut delay_ms = 0u64;
    let mut targets = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--url" => url = value()?,
            "--queue" => queue = value()?,
            "--count" => count = value()?.parse()?,
            "--delay-ms" => delay_ms = value()?.parse()?,
            _ => targets.push(arg),
        }
    }
    if targets.is_empty() {
        return Err("give at least one http:// URL to fetch".into());
    }
    let queue = Queue::new(redis::Client::open(url)?, queue).await?;
    let jobs = (0..count).map(|i| {
        let target = &targets[i as usize % targets.len()];
        (
            target.clone(),
            AddOptions {
                id: None,
                delay_ms,
                group: None,
            },
        )
    });
    let ids = queue.add_many_with(jobs).await?;
    println!("added {} jobs to {}", ids.len(), queue.name());
    println!("{:?}", queue.counts().await?);
    Ok(())
}
