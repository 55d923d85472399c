//! Real servers for the workspace's tests: each test starts its own
//! `valkey-server` on a free 127.0.0.1 port, in its own directory, and stops
//! it (by pid) when the handle drops. Nothing is mocked. Used by the module's
//! tests (tests/), echomq-web's (web/tests), echomq-client's
//! (clients/rust/tests) and the cross-language client tests (clients/tests).
//!
//! - [`Server`]: one server, with or without the module ([`Options`]);
//!   replicas ([`start_replica`]) and clusters ([`cluster`]) are built on it;
//! - [`proxy`]: a movable TCP endpoint, as a managed service's primary
//!   endpoint is;
//! - [`versions`]: a Valkey of at least a given major version, the one under
//!   test or one `scripts/valkey-matrix.sh` cached;
//! - [`node`] and [`python_venv`]: Node.js and Python for the tests that run
//!   workers in those languages, SKIPPED outside CI when missing.
//!
//! The environment: `ECHOMQ_MODULE` (the module), `ECHOMQ_SERVER` (the
//! server binary), `ECHOMQ_CLI` (the cli, for `--cluster create`).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Builds a command from its words: `cmd!("ZADD", "s", 1, "a")` is
/// `redis::cmd("ZADD").arg("s").arg(1).arg("a")`. A slice word adds each item.
#[macro_export]
macro_rules! cmd {
    ($name:expr $(, $arg:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut cmd = $crate::redis::cmd($name);
        $(cmd.arg($arg);)*
        cmd
    }};
}

/// Runs a command given by its words and returns the reply as the type the
/// caller names: `let n: i64 = q!(&mut con, "ZCARD", "s");`. An error reply
/// panics with the command's words and the error.
#[macro_export]
macro_rules! q {
    ($con:expr, $($word:expr),+ $(,)?) => {
        $crate::run($con, &$crate::cmd!($($word),+))
    };
}

/// Runs a command given by its words that must fail, and returns the error as
/// the server wrote it: `let e = err!(&mut con, "ECHO.DELAY", "bogus", 1);`.
#[macro_export]
macro_rules! err {
    ($con:expr, $($word:expr),+ $(,)?) => {
        $crate::error_from($con, &$crate::cmd!($($word),+))
    };
}

/// The redis crate the macros name, whatever the user calls it.
#[doc(hidden)]
pub use redis;

pub mod cluster;
pub mod inspect;
pub mod node;
pub mod proxy;
pub mod versions;

pub use redis::{Cmd, Connection, ConnectionLike, FromRedisValue, RedisResult, Value};

/// The workspace's root directory (the module's package).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ lies in the workspace root")
}

/// The module under test: `ECHOMQ_MODULE`, or the release build.
pub fn module_path() -> PathBuf {
    let path = std::env::var_os("ECHOMQ_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/release/libechomq.so"));
    assert!(
        path.exists(),
        "{} is missing: build it first (`make test` does)",
        path.display()
    );
    path
}

/// The server binary: `ECHOMQ_SERVER`, or `valkey-server`.
pub fn server_binary() -> String {
    std::env::var("ECHOMQ_SERVER").unwrap_or_else(|_| "valkey-server".into())
}

/// The command-line client: `ECHOMQ_CLI`, or `valkey-cli`.
pub fn cli_binary() -> String {
    std::env::var("ECHOMQ_CLI").unwrap_or_else(|_| "valkey-cli".into())
}

/// A port free now: the kernel's choice for port 0, released for the server.
/// Another process may take it in between: `Server::start` retries.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "echomq-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How to start a server.
#[derive(Clone)]
pub struct Options {
    pub binary: String,
    pub load_module: bool,
    /// A config file, passed first as the server requires.
    pub config: Option<PathBuf>,
    /// The server's working directory (relative paths in a config resolve here).
    pub cwd: Option<PathBuf>,
    /// A cluster node ([`cluster::Node`]): cluster mode with a short node
    /// timeout, on a port whose bus port is free too.
    pub cluster: bool,
    /// TLS only, on the server's port (`--port 0 --tls-port <port>`); the
    /// certificates are the caller's `args`. Ready once the port accepts
    /// TCP connections: the caller checks what it needs over TLS.
    pub tls_only: bool,
    pub args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            binary: server_binary(),
            load_module: true,
            config: None,
            cwd: None,
            cluster: false,
            tls_only: false,
            args: Vec::new(),
        }
    }
}

impl Options {
    pub fn without_module() -> Self {
        Options {
            load_module: false,
            ..Options::default()
        }
    }

    /// Every write in a plain-text AOF, fsynced before the reply: what the
    /// replay tests reload, with and without the module.
    pub fn aof_replay() -> Self {
        Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always")
            .arg("aof-use-rdb-preamble", "no")
    }

    /// A node of a [`cluster::Cluster`] running `binary`.
    pub fn cluster_node(binary: &str) -> Self {
        Options {
            binary: binary.to_string(),
            cluster: true,
            ..Options::default()
        }
    }

    pub fn arg(mut self, name: &str, value: &str) -> Self {
        self.args.push(format!("--{name}"));
        self.args.push(value.to_string());
        self
    }

    /// A port to try: any free one, or for a cluster node one whose bus port
    /// is free as well.
    fn pick_port(&self) -> u16 {
        if self.cluster {
            cluster::free_cluster_port()
        } else {
            free_port()
        }
    }
}

/// Starts `options.binary` on `port` in `dir`, its log `server-<port>.log`
/// there.
fn spawn(options: &Options, dir: &Path, port: u16) -> Child {
    let log = dir.join(format!("server-{port}.log"));
    let mut cmd = Command::new(&options.binary);
    if let Some(config) = &options.config {
        cmd.arg(config);
    }
    if let Some(cwd) = &options.cwd {
        cmd.current_dir(cwd);
    }
    if options.tls_only {
        cmd.args(["--port", "0", "--tls-port"]);
    } else {
        cmd.arg("--port");
    }
    cmd.arg(port.to_string())
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--enable-debug-command", "yes"])
        .args(["--daemonize", "no"])
        .arg("--logfile")
        .arg(&log);
    // `dir` changes the working directory before modules load, which
    // would break a config's relative `loadmodule` path.
    if options.config.is_none() {
        cmd.arg("--dir").arg(dir);
    }
    if options.load_module {
        cmd.arg("--loadmodule").arg(module_path());
    }
    if options.cluster {
        // One config file per port: an attempt that lost its port to
        // another process leaves no node id for the next attempt to load.
        cmd.args(["--cluster-enabled", "yes"])
            .arg("--cluster-config-file")
            .arg(dir.join(format!("nodes-{port}.conf")))
            .args([
                "--cluster-node-timeout",
                &cluster::NODE_TIMEOUT_MS.to_string(),
            ])
            // A replica's first sync starts at once instead of after 5 s.
            .args(["--repl-diskless-sync-delay", "0"]);
    }
    cmd.args(&options.args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd.spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", options.binary))
}

/// A running server, killed and reaped on drop.
pub struct Server {
    pub port: u16,
    child: Option<Child>,
    pub dir: PathBuf,
    _own_dir: Option<TempDir>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(Options::default())
    }

    pub fn start_with(options: Options) -> Server {
        let dir = TempDir::new(if options.cluster {
            "cluster-node"
        } else {
            "server"
        });
        let path = dir.0.clone();
        let mut server = Server::start_in(options, &path);
        server._own_dir = Some(dir);
        server
    }

    /// Starts a server whose working directory (RDB, AOF) is `dir`, which the
    /// caller keeps, so a later server can start from the same files.
    pub fn start_in(options: Options, dir: &Path) -> Server {
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = options.pick_port();
            let mut server = Server {
                port,
                child: Some(spawn(&options, dir, port)),
                dir: dir.to_path_buf(),
                _own_dir: None,
            };
            if server.wait_ready(Duration::from_secs(20), options.tls_only) {
                return server;
            }
            // Most likely another process took the port (or its bus port).
            last_log = server.log();
            server.stop();
        }
        panic!("server did not start; last log:\n{last_log}");
    }

    /// A server on `port`, which a stopped one used, in a directory of its
    /// own: what a client still pointed at that port finds back.
    pub fn start_on_port(options: Options, port: u16) -> Server {
        let dir = TempDir::new("restarted");
        let mut server = Server {
            port,
            child: Some(spawn(&options, &dir.0, port)),
            dir: dir.0.clone(),
            _own_dir: Some(dir),
        };
        if !server.wait_ready(Duration::from_secs(20), options.tls_only) {
            panic!(
                "the server did not come back on {port}; its log:\n{}",
                server.log()
            );
        }
        server
    }

    /// Shuts the server down cleanly and starts it again with `options` on
    /// the same port and directory, so its clients see their connections
    /// close and then, while it reloads its files, `LOADING`. Returns once it
    /// answers PING; whether a PING sent during the reload was refused with
    /// `LOADING`.
    pub fn restart(&mut self, options: Options) -> bool {
        self.shutdown();
        self.child = Some(spawn(&options, &self.dir, self.port));
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut saw_loading = false;
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("the restarted server exited {status}:\n{}", self.log());
            }
            if let Ok(mut con) = self.try_conn() {
                match redis::cmd("PING").query::<String>(&mut con) {
                    Ok(_) => return saw_loading,
                    Err(e) => saw_loading |= e.code() == Some("LOADING"),
                }
            }
            sleep(Duration::from_millis(10));
        }
        panic!("the restarted server did not answer:\n{}", self.log());
    }

    fn wait_ready(&mut self, within: Duration, tls_only: bool) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
            }
            if tls_only {
                let addr = ([127, 0, 0, 1], self.port).into();
                if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
                    return true;
                }
            } else if let Ok(mut con) = self.try_conn() {
                // LOADING replies with an error; ready means PONG.
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return true;
                }
            }
            sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A client for the server's URL.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    fn try_conn(&self) -> redis::RedisResult<Connection> {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(2))
    }

    pub fn conn(&self) -> Connection {
        let con = self.try_conn().expect("connect");
        con.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        con
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Whether the server was started and not stopped since (it may have
    /// exited on its own: see [`Server::alive`]).
    pub fn started(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the process (SIGKILL, by pid) and reaps it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Asks the server to shut down cleanly (flushing its AOF) and reaps it.
    pub fn shutdown(&mut self) {
        if let Ok(mut con) = self.try_conn() {
            let _: RedisResult<Value> = cmd!("SHUTDOWN", "NOSAVE").query(&mut con);
        }
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("server-{}.log", self.port)))
            .unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `cmd` and returns its reply; panics naming the command on an error.
pub fn run<T: FromRedisValue>(con: &mut impl ConnectionLike, cmd: &Cmd) -> T {
    cmd.query(con)
        .unwrap_or_else(|e| panic!("{:?}: {}", words_of(cmd), error_text(&e)))
}

/// Runs `cmd`, which must fail, and returns the error text.
pub fn error_from(con: &mut impl ConnectionLike, cmd: &Cmd) -> String {
    refused(cmd.query::<Value>(con), &format!("{:?}", words_of(cmd)))
}

/// Runs a command, given as raw words, expected to fail and returns the error text.
pub fn error_of(con: &mut Connection, args: &[&[u8]]) -> String {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("utf8 command"));
    for a in &args[1..] {
        cmd.arg(*a);
    }
    error_from(con, &cmd)
}

/// The error a call was expected to give, as the server wrote it.
pub fn refused<T: std::fmt::Debug>(result: RedisResult<T>, what: &str) -> String {
    match result {
        Ok(v) => panic!("{what}: expected an error, got {v:?}"),
        Err(e) => error_text(&e),
    }
}

/// An error reply as the server wrote it: `CODE detail`.
pub fn error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// A command's words, each cut to 60 bytes, for a failure message.
fn words_of(cmd: &Cmd) -> Vec<String> {
    let words: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|arg| match arg {
            redis::Arg::Simple(word) => Some(word),
            _ => None,
        })
        .collect();
    show(&words)
}

pub fn show(args: &[&[u8]]) -> Vec<String> {
    args.iter()
        .map(|a| String::from_utf8_lossy(&a[..a.len().min(60)]).into_owned())
        .collect()
}

/// `ECHO.RETRY schedule job policy attempts`: the fire time it wrote.
pub fn try_retry(
    con: &mut impl ConnectionLike,
    schedule: &str,
    job: impl AsRef<[u8]>,
    policy: &str,
    attempts: u64,
) -> RedisResult<i64> {
    cmd!("ECHO.RETRY", schedule, job.as_ref(), policy, attempts).query(con)
}

/// `try_retry`, which must succeed.
pub fn retry(
    con: &mut impl ConnectionLike,
    schedule: &str,
    job: impl AsRef<[u8]>,
    policy: &str,
    attempts: u64,
) -> i64 {
    try_retry(con, schedule, job, policy, attempts)
        .unwrap_or_else(|e| panic!("ECHO.RETRY {schedule}: {}", error_text(&e)))
}

/// `ECHO.PROMOTE schedule pending`: how many jobs it moved.
pub fn try_promote(
    con: &mut impl ConnectionLike,
    schedule: &str,
    pending: &str,
) -> RedisResult<i64> {
    cmd!("ECHO.PROMOTE", schedule, pending).query(con)
}

/// `try_promote`, which must succeed.
pub fn promote(con: &mut impl ConnectionLike, schedule: &str, pending: &str) -> i64 {
    try_promote(con, schedule, pending)
        .unwrap_or_else(|e| panic!("ECHO.PROMOTE {schedule} {pending}: {}", error_text(&e)))
}

/// `(id, job)` of every entry of a stream, oldest first; each entry must be
/// `job <member>`, the one shape echomq writes.
pub fn entries(con: &mut Connection, key: &str) -> Vec<(String, String)> {
    let raw: Vec<(String, Vec<String>)> = q!(con, "XRANGE", key, "-", "+");
    raw.into_iter()
        .map(|(id, fields)| {
            assert_eq!(fields.len(), 2, "{id}: {fields:?}");
            assert_eq!(fields[0], "job", "{id}: {fields:?}");
            (id, fields[1].clone())
        })
        .collect()
}

/// The server's TIME in Unix milliseconds.
pub fn server_time_ms(con: &mut Connection) -> i64 {
    let (secs, micros): (i64, i64) = q!(con, "TIME");
    secs * 1000 + micros / 1000
}

/// Waits until `replica` has processed everything `primary` sent.
pub fn wait_replica_synced(primary: &mut Connection, replica: &mut Connection) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n: i64 = q!(primary, "WAIT", 1, 10_000);
        let p = info_field(primary, "replication", "master_repl_offset");
        let r = info_field(replica, "replication", "master_repl_offset");
        if n >= 1 && p == r && !p.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replica did not catch up (primary {p}, replica {r})"
        );
        sleep(Duration::from_millis(50));
    }
}

/// Starts a replica of `primary` and waits until the initial sync is done.
pub fn start_replica(primary: &Server, options: Options) -> Server {
    let replica =
        Server::start_with(options.arg("replicaof", &format!("127.0.0.1 {}", primary.port)));
    let mut con = replica.conn();
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field(&mut con, "replication", "master_link_status") != "up" {
        assert!(Instant::now() < deadline, "replica did not connect");
        sleep(Duration::from_millis(20));
    }
    replica
}

/// A primary, a synced replica of it started with `replica_options`, and a
/// connection to each: `(primary, replica, p, r)`.
pub fn primary_and_replica(replica_options: Options) -> (Server, Server, Connection, Connection) {
    let primary = Server::start();
    let replica = start_replica(&primary, replica_options);
    let p = primary.conn();
    let r = replica.conn();
    (primary, replica, p, r)
}

/// One `field:value` line of `INFO section`.
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> String {
    try_info_field(con, section, field).unwrap_or_else(|e| panic!("INFO {section}: {e}"))
}

/// `info_field`, or the error INFO gave.
pub fn try_info_field(con: &mut Connection, section: &str, field: &str) -> RedisResult<String> {
    let info: String = cmd!("INFO", section).query(con)?;
    Ok(field_of(&info, field))
}

/// The value of a `field:value` line of an INFO-style text, or "".
pub fn field_of(text: &str, field: &str) -> String {
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// The target directory this test binary was built into (target/<profile>/deps/..).
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return workspace_root().join(dir);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Builds the workspace's example `name` (release) and returns its path.
/// `cargo test --workspace` builds every example already; building here as
/// well covers a `cargo test --test <suite>` that does not, and a stale
/// binary. The build is `--workspace` like `cargo test`'s: with `-p` cargo
/// resolves the shared crates' features differently and recompiles redis,
/// tokio and the client (about a minute), twice per `make test` (once here,
/// once for the next workspace build).
pub fn cargo_example(name: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "--workspace",
            "--example",
            name,
        ])
        .current_dir(workspace_root())
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build --workspace --example {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = target_dir().join("release/examples").join(name);
    assert!(path.exists(), "{} is missing", path.display());
    path
}

/// Polls `check` until it passes; panics with its last complaint after `within`.
pub fn wait_until(what: &str, within: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(()) => return,
            Err(why) if Instant::now() >= deadline => panic!("{what}: {why}"),
            Err(_) => sleep(Duration::from_millis(20)),
        }
    }
}

/// A venv at `venv` made by `system` (a python3), with `package` installed
/// by pip, or the reason it could not be made. `imports` says whether an
/// interpreter has what the caller needs; it is asked again after the
/// install.
pub fn python_venv(
    system: &Path,
    venv: &Path,
    package: &str,
    imports: impl Fn(&Path) -> bool,
) -> Result<PathBuf, String> {
    let python = venv.join("bin/python");
    if python.exists() && imports(&python) {
        return Ok(python);
    }
    let out = Command::new(system)
        .args(["-m", "venv", "--clear"])
        .arg(venv)
        .output()
        .map_err(|e| format!("{} -m venv: {e}", system.display()))?;
    if !out.status.success() {
        return Err(format!(
            "python3 -m venv failed (is python3-venv installed?): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let out = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--timeout", "30", "--retries", "1", package])
        .output()
        .map_err(|e| format!("pip: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        return Err(format!(
            "`pip install {package}` into {} failed: {}",
            venv.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    if imports(&python) {
        Ok(python)
    } else {
        Err(format!("{package} installed but not importable"))
    }
}
