//! What the web tests share: echomq-web started on a free port and asked
//! over HTTP, queues built with known counts, a server started again on a
//! stopped one's port, a headless Chromium page, and the Prometheus checkers.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{sleep, JoinHandle};
use std::time::Duration;

use serde_json::{json, Value as Json};

use crate::common::*;
use crate::node;

/// The release build of echomq-web. `make test` builds the workspace first;
/// building here as well covers `cargo test -p echomq-web` and a stale binary.
/// The same `--workspace` build as make's: with `-p echomq-web` alone cargo
/// resolves shared crates' features differently and recompiles them all.
pub fn web_binary() -> &'static Path {
    static WEB: OnceLock<PathBuf> = OnceLock::new();
    WEB.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args(["build", "--release", "--quiet", "--workspace"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo");
        assert!(
            out.status.success(),
            "cargo build --workspace failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = node::target_dir().join("release/echomq-web");
        assert!(path.exists(), "{} is missing", path.display());
        path
    })
}

/// A running echomq-web on a free port, killed (by pid) on drop. Its
/// stdout (after the first line) and stderr are read as it writes them, kept
/// for [`Web::stop`].
pub struct Web {
    pub child: Child,
    pub base: String,
    output: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

/// Copies everything `from` writes into `to`, until it closes.
fn collect_into(mut from: impl Read + Send + 'static, to: &Arc<Mutex<String>>) -> JoinHandle<()> {
    let to = to.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            to.lock().unwrap_or_else(|e| e.into_inner()).push_str(&text);
        }
    })
}

impl Web {
    pub fn start(url: &str, args: &[&str]) -> Web {
        Web::launch(&[&["--url", url][..], args].concat(), &[])
    }

    /// Started with `args` (which may have no `--url`) and the environment
    /// variables `env` set.
    pub fn launch(args: &[&str], env: &[(&str, &str)]) -> Web {
        let mut child = Command::new(web_binary())
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start echomq-web");
        let output = Arc::new(Mutex::new(String::new()));
        let mut readers = vec![collect_into(child.stderr.take().expect("stderr"), &output)];
        // Port 0: the server picks a free port and prints where it listens.
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let read = stdout.read_line(&mut line);
        output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_str(&line);
        readers.push(collect_into(stdout, &output));
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .map(|u| u.trim_end_matches('/').to_string());
        let mut web = Web {
            child,
            base: String::new(),
            output,
            readers,
        };
        match base.filter(|_| read.is_ok()) {
            Some(base) => web.base = base,
            None => panic!("echomq-web did not start: {}", web.stop()),
        }
        web
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it (by pid) and returns all it wrote to stdout and stderr.
    pub fn stop(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        self.output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// GET `path`: the status, the response headers (names in lower case)
    /// and the body.
    pub fn get_with_headers(&self, path: &str) -> (u16, Vec<(String, String)>, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(15)))
            .build()
            .into();
        let mut resp = agent
            .get(format!("{}{path}", self.base))
            .call()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_lowercase(),
                    v.to_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let body = resp.body_mut().read_to_string().expect("body");
        (status, headers, body)
    }

    /// GET `path`: the status and the body. The agent's own timeout bounds a
    /// request that would hang; the API must answer well within it.
    pub fn get(&self, path: &str) -> (u16, String) {
        let (status, _, body) = self.get_typed(path);
        (status, body)
    }

    /// GET `path`: the status, the Content-Type and the body.
    pub fn get_typed(&self, path: &str) -> (u16, String, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(15)))
            .build()
            .into();
        let mut resp = agent
            .get(format!("{}{path}", self.base))
            .call()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = resp.body_mut().read_to_string().expect("body");
        (status, content_type, body)
    }

    pub fn api(&self) -> (u16, Json) {
        let (status, body) = self.get("/api/queues");
        let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        (status, json)
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The `INFO echomq` counters as the API should give them: numbers.
pub fn info_json(con: &mut Connection) -> Json {
    let text: String = q!(con, "INFO", "echomq");
    let map: serde_json::Map<String, Json> = text
        .lines()
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| {
            (
                k.to_string(),
                json!(v.parse::<i64>().expect("integer field")),
            )
        })
        .collect();
    assert!(map.contains_key("echomq_retries"), "{text}");
    Json::Object(map)
}

/// ECHO.SPREAD's buckets, computed here from the scores themselves.
pub fn buckets_of(scores: &[i64], start: i64, end: i64, n: i64) -> Vec<i64> {
    let w = end - start;
    (0..n)
        .map(|i| {
            let (lo, hi) = (start + i * w / n, start + (i + 1) * w / n);
            scores.iter().filter(|&&s| lo <= s && s < hi).count() as i64
        })
        .collect()
}

pub fn scores(con: &mut Connection, key: &str) -> Vec<i64> {
    let pairs: Vec<(String, i64)> = q!(con, "ZRANGE", key, 0, -1, "WITHSCORES");
    pairs.into_iter().map(|(_, s)| s).collect()
}

/// Jobs with known counts on `{q}`, offsets relative to the server's time:
/// a herd (one cohort, no jitter, one instant), a jittered cohort, two
/// retries beyond the window, due jobs, pending jobs and dead-lettered jobs.
pub struct Built {
    pub herd: usize,
    pub jittered: usize,
    pub beyond: usize,
    pub due: usize,
    pub pending: usize,
    pub dead: usize,
}

pub fn build_queue(con: &mut Connection, q: &str) -> Built {
    let (s, p, d) = (
        format!("{{{q}}}:schedule"),
        format!("{{{q}}}:pending"),
        format!("{{{q}}}:dead"),
    );
    let b = Built {
        herd: 12,
        jittered: 40,
        beyond: 2,
        due: 5,
        pending: 7,
        dead: 4,
    };
    // The herd: one MULTI, one `now`, so every fire time is the same ms.
    let mut herd = redis::pipe();
    herd.atomic();
    for i in 0..b.herd {
        herd.cmd("ECHO.RETRY")
            .arg(&s)
            .arg(format!("herd-{i}"))
            .arg("fixed:40000")
            .arg(3);
    }
    let fired: Vec<i64> = herd.query(con).expect("herd");
    assert!(fired.windows(2).all(|w| w[0] == w[1]), "{fired:?}");
    // Full jitter over 0..=40000 ms, kept at >= 15 s away so that no job
    // becomes due while the page is being read.
    let mut i = 0;
    let mut kept = 0;
    while kept < b.jittered {
        let job = format!("jit-{i}");
        let at = retry(con, &s, &job, "jitter:fixed:40000", 2);
        if at - server_time_ms(con) >= 15_000 {
            kept += 1;
        } else {
            let _: i64 = q!(con, "ZREM", &s, &job);
        }
        i += 1;
    }
    for i in 0..b.beyond {
        retry(con, &s, format!("later-{i}"), "fixed:600000", 1);
    }
    // Due: fired already, not yet promoted (one at exactly its command's now).
    retry(con, &s, "due-now", "fixed:0", 1);
    let now = server_time_ms(con);
    for i in 1..b.due {
        let _: i64 = q!(con, "ZADD", &s, now - 1000 * i as i64, format!("due-{i}"));
    }
    let jobs: Vec<String> = (0..b.pending).map(|i| format!("p-{i}")).collect();
    let _: i64 = q!(con, "LPUSH", &p, &jobs);
    // Dead-lettered jobs, as ECHO.RETRY ... MAXATTEMPTS n DEAD leaves them:
    // each in the dead set at the time it died.
    for i in 0..b.dead {
        let _: i64 = q!(con, "ZADD", &d, now - 5000 - i as i64, format!("dead-{i}"));
    }
    b
}

/// A server started again on a port a stopped one used, so that echomq-web,
/// still pointed at that port, finds it back.
pub fn restarted_on(port: u16) -> Server {
    Server::start_on_port(Options::default(), port)
}

/// One headless Chromium page, driven through web/tests/node/browser.mjs; the
/// browser (and node) are killed by pid on drop.
pub struct Browser {
    pub child: Child,
    pub stdin: ChildStdin,
    pub stdout: BufReader<ChildStdout>,
    _profile: TempDir,
}

impl Browser {
    pub fn start(test: &str) -> Option<Browser> {
        let dir = node::or_skip(test, node::node_dir())?;
        let chromium = node::or_skip(test, node::chromium())?;
        let profile = TempDir::new("chromium-profile");
        let mut child = Command::new(node::node())
            .arg(dir.join("browser.mjs"))
            .arg(&chromium)
            .arg(&profile.0)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start node browser.mjs");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut b = Browser {
            child,
            stdin,
            stdout,
            _profile: profile,
        };
        match b.reply() {
            Ok(v) => node::announce(&format!("{test}: {} at {}", v, chromium.display())),
            Err(e) => {
                let why = format!("{} did not start: {e}", chromium.display());
                node::or_skip::<()>(test, Err(why))?;
            }
        }
        Some(b)
    }

    pub fn reply(&mut self) -> Result<Json, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(n) if n > 0 => {}
            _ => return Err("the browser driver exited".into()),
        }
        let v: Json = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        if v["ok"] == json!(true) {
            Ok(v["value"].clone())
        } else {
            Err(v["error"].as_str().unwrap_or("?").to_string())
        }
    }

    pub fn call(&mut self, req: Json) -> Json {
        writeln!(self.stdin, "{req}").expect("write to the browser driver");
        self.reply()
            .unwrap_or_else(|e| panic!("{}: {e}", req["op"]))
    }

    pub fn open(&mut self, url: &str) {
        self.call(json!({"op": "open", "url": url}));
    }

    /// The value of `js` once it is truthy in the page.
    pub fn wait(&mut self, js: &str, what: &str) -> Json {
        writeln!(
            self.stdin,
            "{}",
            json!({"op": "wait", "js": js, "timeout_ms": 15000})
        )
        .expect("write to the browser driver");
        match self.reply() {
            Ok(v) => v,
            Err(e) => {
                let status = self.call(
                    json!({"op": "eval", "js": "document.getElementById('status').textContent"}),
                );
                panic!("{what}: {e}; the page's status: {status}")
            }
        }
    }

    pub fn screenshot(&mut self, path: &Path) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("screenshot directory");
        }
        self.call(json!({"op": "screenshot", "path": path}));
        let png = std::fs::read(path).expect("screenshot written");
        assert!(
            png.starts_with(b"\x89PNG"),
            "{} is not a PNG",
            path.display()
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the page shows for one queue, read from the rendered DOM.
pub const CARD_JS: &str = r#"(() => {
  const c = document.querySelector(`section.queue[data-queue="${QUEUE}"]`);
  if (!c) return null;
  const num = (f) => c.querySelector(`[data-field="${f}"] b`).textContent.replace(/[^0-9]/g, "");
  const path = c.querySelector("svg.spread path");
  const box = path.getBBox();
  return { scheduled: +num("scheduled"), due: +num("due"), pending: +num("pending"),
           in_flight: +num("in_flight"), dead: +num("dead"),
           spread: c.querySelector("svg.spread").dataset.spread.split(",").map(Number),
           bars: (path.getAttribute("d").match(/M/g) || []).length,
           full_bars: (path.getAttribute("d").match(/V0\.00/g) || []).length,
           drawn: { width: box.width, height: box.height },
           cards: document.querySelectorAll("section.queue").length,
           status: document.getElementById("status").dataset.state };
})()"#;

pub fn card_js(queue: &str) -> String {
    CARD_JS.replace("${QUEUE}", queue)
}

/// A stream queue in the workers' layout: the group `workers` (and a second
/// group, `audit`) made first, `entries` jobs added, `workers` reading
/// `delivered` of them without acknowledging, `audit` reading `audited`, and
/// `done` of the workers' entries acknowledged and deleted (step 3 of the
/// protocol). Returns (XLEN, the pending entries of both groups).
pub fn stream_queue(
    con: &mut Connection,
    q: &str,
    entries: usize,
    delivered: usize,
    audited: usize,
    done: usize,
) -> (i64, i64) {
    let p = format!("{{{q}}}:pending");
    for group in ["workers", "audit"] {
        let _: () = q!(con, "XGROUP", "CREATE", &p, group, "0", "MKSTREAM");
    }
    for i in 0..entries {
        let _: String = q!(con, "XADD", &p, "*", "job", format!("{q}-{i}"));
    }
    let read = |con: &mut Connection, group: &str, n: usize| -> Vec<String> {
        if n == 0 {
            return Vec::new();
        }
        let v: redis::Value = q!(
            con,
            "XREADGROUP",
            "GROUP",
            group,
            "c1",
            "COUNT",
            n,
            "STREAMS",
            &p,
            ">"
        );
        // [[key, [[id, [field, value]], ...]]]: the IDs.
        let redis::Value::Array(streams) = v else {
            panic!("XREADGROUP: {v:?}")
        };
        let redis::Value::Array(kv) = &streams[0] else {
            panic!("XREADGROUP: {streams:?}")
        };
        let redis::Value::Array(items) = &kv[1] else {
            panic!("XREADGROUP: {kv:?}")
        };
        items
            .iter()
            .map(|e| match e {
                redis::Value::Array(e) => match &e[0] {
                    redis::Value::BulkString(id) => String::from_utf8_lossy(id).into_owned(),
                    other => panic!("id {other:?}"),
                },
                other => panic!("entry {other:?}"),
            })
            .collect()
    };
    let ids = read(con, "workers", delivered);
    assert_eq!(ids.len(), delivered);
    assert_eq!(read(con, "audit", audited).len(), audited);
    for id in ids.iter().take(done) {
        let mut tx = redis::pipe();
        tx.atomic()
            .cmd("XACK")
            .arg(&p)
            .arg("workers")
            .arg(id)
            .cmd("XDEL")
            .arg(&p)
            .arg(id);
        let _: (i64, i64) = tx.query(con).expect("XACK, XDEL");
    }
    stream_queue_pending(con, &p)
}

/// XLEN of the stream `p` and the pending entries of its groups `workers`
/// and `audit`, from XPENDING's summary (its first element, the count).
pub fn stream_queue_pending(con: &mut Connection, p: &str) -> (i64, i64) {
    let len: i64 = q!(con, "XLEN", p);
    let mut n = 0;
    for group in ["workers", "audit"] {
        let summary: Vec<redis::Value> = q!(con, "XPENDING", p, group);
        match summary.first() {
            Some(redis::Value::Int(count)) => n += count,
            other => panic!("XPENDING {p} {group}: {other:?}"),
        }
    }
    (len, n)
}

/// Prometheus's `promtool` (Debian's `prometheus` package, which
/// scripts/setup.sh installs in CI and with ECHOMQ_WITH_PROMTOOL=1), or
/// `ECHOMQ_PROMTOOL`.
pub fn promtool() -> Result<PathBuf, String> {
    let tool = std::env::var_os("ECHOMQ_PROMTOOL")
        .map_or_else(|| PathBuf::from("promtool"), PathBuf::from);
    match Command::new(&tool).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(tool),
        _ => Err(format!(
            "{} is not installed (apt-get install prometheus, or ECHOMQ_WITH_PROMTOOL=1 make setup)",
            tool.display()
        )),
    }
}

/// `promtool check metrics` on `text`: its verdict, lint included, must be clean.
pub fn promtool_check(tool: &Path, text: &str) {
    let mut child = Command::new(tool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {:?} {said}\n{text}",
        out.status
    );
}

/// A Python with `prometheus_client` (the client's own text parser): a venv
/// under target/ with the pinned version installed, made once.
pub fn prom_python() -> Result<&'static Path, String> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PY.get_or_init(|| {
        let imports = |py: &Path| {
            Command::new(py)
                .args(["-c", "import prometheus_client.parser"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let venv = node::target_dir().join("prom-venv");
        python_venv(
            Path::new("python3"),
            &venv,
            "prometheus-client==0.26.0",
            imports,
        )
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(String::clone)
}

/// The samples of an exposition as prometheus_client's parser reads them:
/// (family type, sample name, labels, value).
pub fn parse_exposition(python: &Path, text: &str) -> Vec<(String, String, Json, f64)> {
    const SCRIPT: &str = "import json, sys\n\
        from prometheus_client.parser import text_string_to_metric_families\n\
        out = [[f.type, s.name, s.labels, s.value]\n\
               for f in text_string_to_metric_families(sys.stdin.read()) for s in f.samples]\n\
        print(json.dumps(out))\n";
    let mut child = Command::new(python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to python");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "prometheus_client could not parse:\n{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: Vec<(String, String, Json, f64)> =
        serde_json::from_slice(&out.stdout).expect("the parser's JSON");
    samples
}

/// The `release` of /api/queues for a queue neither limited nor held.
pub fn unlimited() -> Json {
    json!({"limited": false, "rate_per_second": null, "rate_in_force_per_second": null,
           "adaptive": null, "burst": null, "available": null, "held_until_ms": 0,
           "held_for_ms": 0, "held_back": 0, "released": null, "failures": null})
}

/// The `groups` of a queue with none, on a server with groups.
pub fn no_groups() -> Json {
    json!({"count": 0, "truncated": false, "largest": [], "limited_count": 0, "limited": []})
}

/// The `repeats` of a queue with no recurring definition, on a server with
/// ECHO.REPEATS.
pub fn no_repeats() -> Json {
    json!({"count": 0, "unarmed": 0, "next": []})
}

/// Four queues under release limits, each with due members (none falls due
/// or leaves while a test reads them: nothing promotes, and no limit
/// refills within minutes where it matters):
/// - `lim`: `100/s 10`, 50 due and 3 in ten minutes: the limit lets its
///   full burst of 10 leave, 40 are held back (the later 3 by ECHO.SCHEDULE,
///   which is not a failure);
/// - `ada`: `adaptive:10/h 5`, 8 due of which one ECHO.PROMOTE released
///   the burst of 5, then one failure (an ECHO.RETRY naming it) in that
///   window, so the rate in force is halved to 5/h; 3 due held back;
/// - `held`: no limit, held for ten minutes by ECHO.HOLD, 4 due held back;
/// - `free`: no limit, no hold, 2 due.
pub struct LimitedQueues {
    pub held_until_ms: i64,
}

pub const LIMITED: [&str; 4] = ["lim", "ada", "held", "free"];

pub fn limited_queues(con: &mut Connection) -> LimitedQueues {
    let _: () = q!(
        con,
        "CONFIG",
        "SET",
        "echomq.release-limits",
        "{lim}:schedule 100/s 10 {ada}:schedule adaptive:10/h 5"
    );
    // Short windows, so the failure's window closes soon after it.
    let _: () = q!(con, "CONFIG", "SET", "echomq.adaptive-window-ms", 10);
    let now = server_time_ms(con);
    let due = |con: &mut Connection, q: &str, n: i64| {
        for i in 0..n {
            let _: i64 = q!(
                con,
                "ZADD",
                format!("{{{q}}}:schedule"),
                now - 1000 - i,
                format!("{q}-due-{i}")
            );
        }
    };
    due(con, "lim", 50);
    // Later runs that are not failures (ECHO.SCHEDULE, not ECHO.RETRY).
    for i in 0..3 {
        let _: i64 = q!(
            con,
            "ECHO.SCHEDULE",
            "{lim}:schedule",
            format!("lim-later-{i}"),
            600_000
        );
    }
    due(con, "ada", 8);
    assert_eq!(promote(con, "{ada}:schedule", "{ada}:pending"), 5);
    retry(con, "{ada}:schedule", "ada-failed", "fixed:600000", 1);
    due(con, "held", 4);
    let held_until_ms: i64 = q!(con, "ECHO.HOLD", "{held}:schedule", 600_000);
    assert!(held_until_ms > now, "{held_until_ms}");
    due(con, "free", 2);
    // The failure's window closes (ECHO.LIMITS rolls it): one decrease,
    // after which only empty windows follow and the rate stays.
    sleep(Duration::from_millis(50));
    let ada = limits_of(con, "{ada}:schedule");
    assert_eq!(
        ada["rate-in-force"],
        Some(5.0 * 1000.0 / 3_600_000.0),
        "{ada:?}"
    );
    assert_eq!(info_field(con, "echomq", "echomq_adaptive_decreases"), "1");
    LimitedQueues { held_until_ms }
}

/// ECHO.LIMITS of `schedule` as read over RESP2 (a flat field/value array,
/// the doubles as bulk strings): each field's number, None for nil.
pub fn limits_of(
    con: &mut Connection,
    schedule: &str,
) -> std::collections::BTreeMap<String, Option<f64>> {
    let reply: Vec<redis::Value> = q!(con, "ECHO.LIMITS", schedule);
    assert_eq!(reply.len(), 16, "{reply:?}");
    reply
        .chunks_exact(2)
        .map(|p| {
            let name = match &p[0] {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                redis::Value::SimpleString(s) => s.clone(),
                other => panic!("ECHO.LIMITS field {other:?}"),
            };
            let value = match &p[1] {
                redis::Value::Nil => None,
                redis::Value::Int(i) => Some(*i as f64),
                redis::Value::BulkString(b) => Some(
                    String::from_utf8_lossy(b)
                        .parse::<f64>()
                        .unwrap_or_else(|e| panic!("{name}: {e}")),
                ),
                other => panic!("ECHO.LIMITS {name}: {other:?}"),
            };
            (name, value)
        })
        .collect()
}
