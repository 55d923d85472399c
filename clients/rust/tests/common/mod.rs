//! A real server for each test: `valkey-server` (or `$ECHOMQ_SERVER`) with
//! the echomq module on a free 127.0.0.1 port, stopped by pid when the
//! handle drops. Nothing is mocked.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The module: `$ECHOMQ_MODULE`, else the workspace's release build.
pub fn module_path() -> PathBuf {
    let path = std::env::var_os("ECHOMQ_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/libechomq.so")
        });
    assert!(
        path.exists(),
        "the echomq module {} is missing: run make build (or set ECHOMQ_MODULE)",
        path.display()
    );
    path
}

fn server_binary() -> String {
    std::env::var("ECHOMQ_SERVER").unwrap_or_else(|_| "valkey-server".into())
}

fn free_port() -> u16 {
    // The kernel picks a free port; another process may take it before the
    // server binds it, so `start` retries.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

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

pub struct Server {
    pub port: u16,
    child: Child,
    dir: PathBuf,
    extra: Vec<String>,
}

/// Starts the server on `port`; its log when it does not answer PING.
fn spawn(port: u16, dir: &Path, extra: &[&str]) -> Result<Child, String> {
    let log = dir.join(format!("server-{port}.log"));
    let mut child = Command::new(server_binary())
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .arg("--loadmodule")
        .arg(module_path())
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", server_binary()));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break; // exited: the port was taken, or a bad argument
        }
        if ping(port) {
            return Ok(child);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        sleep(Duration::from_millis(20));
    }
    Err(std::fs::read_to_string(&log).unwrap_or_default())
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// With extra `--name value` arguments, e.g. `["--echomq.auto-promote", "..."]`.
    pub fn start_with(extra: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "echomq-client-rs-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            match spawn(port, &dir, extra) {
                Ok(child) => {
                    return Server {
                        port,
                        child,
                        dir,
                        extra: extra.iter().map(|a| a.to_string()).collect(),
                    }
                }
                Err(log) => last_log = log,
            }
        }
        panic!("the server did not start; its last log:\n{last_log}");
    }

    /// Stops the server and starts a new one (empty) on the same port.
    pub fn restart(&mut self) {
        self.stop();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let mut last_log = String::new();
        for _ in 0..50 {
            match spawn(self.port, &self.dir, &extra) {
                Ok(child) => {
                    self.child = child;
                    return;
                }
                Err(log) => last_log = log,
            }
            sleep(Duration::from_millis(100));
        }
        panic!("the server did not start again; its last log:\n{last_log}");
    }

    /// SIGTERM by pid, then wait; SIGKILL only if it will not stop.
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    /// A plain synchronous connection, for the test's own checks.
    pub fn sync(&self) -> redis::Connection {
        self.client().get_connection().expect("connect")
    }
}

fn ping(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
        return false;
    };
    redis::cmd("PING").query::<String>(&mut conn).is_ok()
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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
