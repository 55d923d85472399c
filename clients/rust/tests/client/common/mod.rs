//! A real server for each test (echomq-testkit's): `valkey-server` (or
//! `$ECHOMQ_SERVER`) with the echomq module on a free 127.0.0.1 port,
//! stopped by pid when the handle drops. Nothing is mocked. And the helpers
//! the client's suites share.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// echomq-testkit's server: `Server::start()`, `start_with(Options)`,
/// `client()`, `conn()`, `restart(Options)`.
#[allow(unused_imports)]
pub use echomq_testkit::{Options, Server};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique queue name for one test.
pub fn queue_name(tag: &str) -> String {
    format!(
        "{tag}-{}-{}-{:08x}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        rand::random::<u32>()
    )
}

/// Polls `check` every 20 ms until it holds, failing the test after
/// `timeout` with `what`.
pub fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(20));
    }
}

/// The server's clock, Unix ms.
pub fn server_ms(conn: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn).expect("TIME");
    secs * 1000 + micros / 1000
}

/// How long a test waits for what should happen well before.
pub const LONG: Duration = Duration::from_secs(30);

/// The server's clock, Unix ms, for async tests.
pub async fn server_ms_async(conn: &mut echomq_client::QueueConnection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    secs * 1000 + micros / 1000
}

/// Starts `worker` on its own task; `stop` closes it and checks `run` ended well.
pub fn start_worker(
    worker: echomq_client::Worker,
) -> (
    echomq_client::WorkerHandle,
    tokio::task::JoinHandle<redis::RedisResult<()>>,
) {
    let handle = worker.handle();
    (handle, tokio::spawn(worker.run()))
}

pub async fn stop(
    handle: echomq_client::WorkerHandle,
    task: tokio::task::JoinHandle<redis::RedisResult<()>>,
) {
    handle.close();
    tokio::time::timeout(LONG, task)
        .await
        .expect("run returns after close")
        .expect("run did not panic")
        .expect("run ended without error");
}

/// `wait_until` for async tests: polls `check` every 20 ms.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many times the server ran `command` (INFO commandstats; a module's
/// command by the name it registered, upper case).
pub async fn calls(conn: &mut echomq_client::QueueConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let head = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&head))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// ECHO.LIMITS' held-until-ms of a schedule (0: not held).
pub async fn held_until(conn: &mut echomq_client::QueueConnection, schedule: &str) -> i64 {
    let flat: Vec<redis::Value> = redis::cmd("ECHO.LIMITS")
        .arg(schedule)
        .query_async(conn)
        .await
        .unwrap();
    let at = flat
        .iter()
        .position(|v| matches!(v, redis::Value::BulkString(b) if b == b"held-until-ms"))
        .unwrap();
    redis::from_redis_value(flat[at + 1].clone()).unwrap()
}
