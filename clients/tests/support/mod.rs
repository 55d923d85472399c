//! What the cross-language test binaries share: the three libraries'
//! crossworker programs (one command line in every language), built or
//! installed once per test process, and a running worker stopped by pid.

// Each test binary uses a part of it.
#![allow(dead_code)]

use echomq_testkit as common;
use echomq_testkit::node;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{cargo_example, python_venv, target_dir, Server};
use node::or_skip;
use redis::Connection;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lang {
    Python,
    Node,
    Rust,
}

pub use Lang::{Node, Python, Rust};

pub fn source(path: &str) -> PathBuf {
    common::workspace_root().join(path)
}

/// Exits 0 when `echomq` imports and its installed `.py` files and protocol
/// files (`protocol/*.lua`, `*.json`, package data) are the ones in the
/// directory given as its argument.
pub const SAME_AS_CHECKOUT: &str = "import echomq, filecmp, os, sys
src, dst = sys.argv[1], os.path.dirname(echomq.__file__)
names = [n for n in os.listdir(src) if n.endswith('.py')]
names += [os.path.join('protocol', n) for n in os.listdir(os.path.join(src, 'protocol')) if n.endswith(('.lua', '.json'))]
same = lambda n: os.path.isfile(os.path.join(dst, n)) and filecmp.cmp(os.path.join(src, n), os.path.join(dst, n), shallow=False)
sys.exit(0 if all(same(n) for n in names) else 1)";

/// The venv's python with this checkout's `clients/python` installed, or why not.
pub fn python() -> Result<PathBuf, String> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let system =
                PathBuf::from(std::env::var("ECHOMQ_PYTHON").unwrap_or_else(|_| "python3".into()));
            // The installed package must be this checkout's: a venv kept
            // from an older checkout would test an older library.
            let sources = source("clients/python/src/echomq");
            let imports = |python: &Path| {
                Command::new(python)
                    .args(["-c", SAME_AS_CHECKOUT])
                    .arg(&sources)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            let package = source("clients/python");
            python_venv(
                &system,
                &target_dir().join("pyenv-clients"),
                package.to_str().expect("a UTF-8 checkout path"),
                imports,
            )
        })
        .clone()
}

/// clients/node with its dependencies installed (`npm ci`, once), or why not.
pub fn node_ready() -> Result<(), String> {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    READY
        .get_or_init(|| {
            node::node_is_recent()?;
            let dir = source("clients/node");
            if !dir.join("node_modules/iovalkey").exists() {
                node::npm_ci(&dir)?;
            }
            Ok(())
        })
        .clone()
}

/// The release build of echomq-client's crossworker example (built here too,
/// for a `cargo test --test clients` that built no examples).
pub fn rust_crossworker() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| cargo_example("crossworker")).clone()
}

/// A server for a test of all three languages, its URL and a connection;
/// None (SKIPPED) when a language is missing.
pub fn three_languages(test: &str) -> Option<(Server, String, Connection)> {
    or_skip(test, python().map(|_| ()))?;
    or_skip(test, node_ready())?;
    rust_crossworker();
    let server = Server::start();
    let url = server.url();
    let con = server.conn();
    Some((server, url, con))
}

/// The crossworker of `lang` with `args`.
pub fn crossworker(lang: Lang, args: &[&str]) -> Command {
    let mut command = match lang {
        Python => {
            let mut c = Command::new(python().expect("python checked by ready()"));
            c.arg(source("clients/python/tests/crossworker.py"));
            c
        }
        Node => {
            let mut c = Command::new(node::node());
            c.arg(source("clients/node/test/crossworker.mjs"));
            c
        }
        Rust => Command::new(rust_crossworker()),
    };
    command.args(args).stdin(Stdio::null());
    command
}

/// Runs a crossworker to completion; its stdout, or a panic with its stderr.
pub fn run_to_end(lang: Lang, args: &[&str]) -> String {
    let out = crossworker(lang, args)
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("{lang:?} crossworker: {e}"));
    assert!(
        out.status.success(),
        "{lang:?} crossworker {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// A running `crossworker work`; stopped with SIGTERM (and checked to exit 0)
/// by `stop`, killed when dropped.
pub struct Worker {
    pub lang: Lang,
    pub child: Child,
}

/// `crossworker work <args>` of `lang`, its stdout piped (its stderr the
/// test's), and that stdout.
pub fn spawn_work(lang: Lang, args: &[&str]) -> (Child, ChildStdout) {
    let mut full = vec!["work"];
    full.extend_from_slice(args);
    let mut child = crossworker(lang, &full)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{lang:?} crossworker: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    (child, stdout)
}

/// `count` jobs added by `lang`'s crossworker with the ids `<prefix>0` ..:
/// the ids it printed.
pub fn added_from(lang: Lang, url: &str, queue: &str, count: usize, prefix: &str) -> Vec<String> {
    let n = count.to_string();
    let ids: Vec<String> = run_to_end(lang, &add_args(url, queue, &n, prefix))
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), count, "{lang:?}: ids added");
    ids
}

/// The arguments of `crossworker add` for `count` jobs with the ids
/// `<prefix>0` ..
pub fn add_args<'a>(url: &'a str, queue: &'a str, count: &'a str, prefix: &'a str) -> Vec<&'a str> {
    vec![
        "add",
        "--url",
        url,
        "--queue",
        queue,
        "--count",
        count,
        "--id-prefix",
        prefix,
    ]
}

impl Worker {
    pub fn start(lang: Lang, args: &[&str]) -> Worker {
        let (child, stdout) = spawn_work(lang, args);
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the worker's first line");
        assert_eq!(line.trim(), "ready", "{lang:?} worker did not start");
        Worker { lang, child }
    }

    /// SIGTERM; the worker must exit 0 within 20 s.
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "{:?} worker exited {status}", self.lang);
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{:?} worker still running 20 s after SIGTERM",
                self.lang
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One `took` line: the entry's id (its ms part is when the server released
/// the run into the stream), the job and the attempt.
#[derive(Debug)]
pub struct Take {
    pub entry_ms: i64,
    pub job: String,
    pub attempt: u64,
}

#[derive(Debug, Default)]
pub struct Summary {
    pub runs: u64,
    pub max_concurrent: u64,
}

/// The `took` lines and the `summary` line of a `work --log-takes` run's
/// stdout (one took line a run, checked).
pub fn parse_work(lang: Lang, out: &str) -> (Vec<Take>, Summary) {
    let mut takes = Vec::new();
    let mut summary = None;
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("took ") {
            let parts: Vec<&str> = rest.split(' ').collect();
            let [entry, job, attempt] = parts[..] else {
                panic!("{lang:?}: {line:?}");
            };
            let ms = entry.split('-').next().and_then(|ms| ms.parse().ok());
            takes.push(Take {
                entry_ms: ms.unwrap_or_else(|| panic!("{lang:?}: entry id in {line:?}")),
                job: job.to_string(),
                attempt: attempt.parse().expect("attempt"),
            });
        } else if let Some(json) = line.strip_prefix("summary ") {
            let v: serde_json::Value = serde_json::from_str(json).expect("summary JSON");
            summary = Some(Summary {
                runs: v["runs"].as_u64().expect("runs"),
                max_concurrent: v["max_concurrent"].as_u64().expect("max_concurrent"),
            });
        }
    }
    let summary = summary.unwrap_or_else(|| panic!("{lang:?}: no summary line in {out:?}"));
    assert_eq!(
        summary.runs,
        takes.len() as u64,
        "{lang:?}: one took line a run"
    );
    (takes, summary)
}
