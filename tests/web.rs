//! echomq-web against a real valkey-server with the module: the JSON of
//! /api/queues checked exactly against queues built with known counts, and
//! the page in headless Chromium (Debian's chromium-headless-shell, driven by
//! playwright-core from target/node): the numbers and the drawn histogram in
//! the rendered DOM, a screenshot, an outage shown and recovered from, and the
//! eviction warning; and /metrics read by Prometheus's own `promtool check
//! metrics` and by the parser of the Python client `prometheus_client`.

mod common;
mod node;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value as Json};

/// The release build of echomq-web. `make test` builds the workspace first;
/// building here as well covers `cargo test --test web` and a stale binary.
/// The same `--workspace` build as make's: with `-p echomq-web` alone cargo
/// resolves shared crates' features differently and recompiles them all.
fn web_binary() -> &'static Path {
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
            "cargo build -p echomq-web failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = node::target_dir().join("release/echomq-web");
        assert!(path.exists(), "{} is missing", path.display());
        path
    })
}

/// A running echomq-web on a free port, killed (by pid) on drop.
struct Web {
    child: Child,
    base: String,
}

impl Web {
    fn start(url: &str, args: &[&str]) -> Web {
        let mut child = Command::new(web_binary())
            .args(["--url", url, "--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start echomq-web");
        // Port 0: the server picks a free port and prints where it listens.
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .map(|u| u.trim_end_matches('/').to_string());
        let Some(base) = base.filter(|_| read.is_ok()) else {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
            panic!("echomq-web did not start: {line:?} {err}");
        };
        Web { child, base }
    }

    /// GET `path`: the status and the body. The agent's own timeout bounds a
    /// request that would hang; the API must answer well within it.
    fn get(&self, path: &str) -> (u16, String) {
        let (status, _, body) = self.get_typed(path);
        (status, body)
    }

    /// GET `path`: the status, the Content-Type and the body.
    fn get_typed(&self, path: &str) -> (u16, String, String) {
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

    fn api(&self) -> (u16, Json) {
        let (status, body) = self.get("/api/queues");
        let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        (status, json)
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `INFO echomq` counters as the API should give them: numbers.
fn info_json(con: &mut Connection) -> Json {
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
fn buckets_of(scores: &[i64], start: i64, end: i64, n: i64) -> Vec<i64> {
    let w = end - start;
    (0..n)
        .map(|i| {
            let (lo, hi) = (start + i * w / n, start + (i + 1) * w / n);
            scores.iter().filter(|&&s| lo <= s && s < hi).count() as i64
        })
        .collect()
}

fn scores(con: &mut Connection, key: &str) -> Vec<i64> {
    let pairs: Vec<(String, i64)> = q!(con, "ZRANGE", key, 0, -1, "WITHSCORES");
    pairs.into_iter().map(|(_, s)| s).collect()
}

/// Jobs with known counts on `{q}`, offsets relative to the server's time:
/// a herd (one cohort, no jitter, one instant), a jittered cohort, two
/// retries beyond the window, due jobs, pending jobs and dead-lettered jobs.
struct Built {
    herd: usize,
    jittered: usize,
    beyond: usize,
    due: usize,
    pending: usize,
    dead: usize,
}

fn build_queue(con: &mut Connection, q: &str) -> Built {
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

#[test]
fn api_reports_known_counts_exactly() {
    let server = Server::start();
    let mut con = server.conn();
    // Started first: the queue's jobs must not become due while it starts.
    let web = Web::start(
        &server.url(),
        &["--queue", "orders", "--queue", "idle", "--queue", "broken"],
    );
    let b = build_queue(&mut con, "orders");
    // An empty queue, and one whose schedule is not a sorted set.
    let _: () = q!(&mut con, "SET", "{broken}:schedule", "not a zset");
    // INFO is the pipeline's first command: it sees no error of this scrape.
    let info = info_json(&mut con);
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");

    let now = got["now_ms"].as_i64().expect("now_ms");
    let server_now = server_time_ms(&mut con);
    assert!(
        now <= server_now && now > server_now - 10_000,
        "now_ms {now} vs {server_now}"
    );
    let all = scores(&mut con, "{orders}:schedule");
    let scheduled = b.herd + b.jittered + b.beyond + b.due;
    assert_eq!(all.len(), scheduled);
    let due = all.iter().filter(|&&s| s <= now).count();
    assert_eq!(due, b.due, "only the due jobs are due: {all:?} at {now}");
    let spread = buckets_of(&all, now, now + 60_000, 60);
    assert_eq!(spread.iter().sum::<i64>(), (b.herd + b.jittered) as i64);
    assert!(
        spread.iter().any(|&v| v >= b.herd as i64),
        "the herd is in one bucket: {spread:?}"
    );

    let want = json!({
        "now_ms": now,
        "window": {"start_ms": now, "end_ms": now + 60_000, "ms": 60_000, "buckets": 60},
        "queues": [
            {"name": "orders", "scheduled": scheduled, "due": b.due, "pending": b.pending,
             "in_flight": 0, "dead": b.dead, "spread": spread},
            {"name": "idle", "scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0, "spread": vec![0; 60]},
            {"name": "broken", "error": "WRONGTYPE Operation against a key holding the wrong kind of value"},
        ],
        "info": info,
        "maxmemory_policy": "noeviction",
        "eviction_policy_safe": true,
        "round_trips": 3,
    });
    assert_eq!(got, want);
    // Reading the view wrote nothing and moved nothing.
    assert_eq!(scores(&mut con, "{orders}:schedule"), all);
    assert_eq!(info_field(&mut con, "echomq", "echomq_promoted"), "0");
}

#[test]
fn window_and_buckets_follow_the_options() {
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(
        &server.url(),
        &["--queue", "w", "--window-ms", "5000", "--buckets", "4"],
    );
    let fire = retry(&mut con, "{w}:schedule", "a", "fixed:2500", 1);
    retry(&mut con, "{w}:schedule", "b", "fixed:9000", 1);
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let now = got["now_ms"].as_i64().expect("now_ms");
    assert_eq!(
        got["window"],
        json!({"start_ms": now, "end_ms": now + 5000, "ms": 5000, "buckets": 4})
    );
    // "a" at fire, in bucket (fire - now) / 1250; "b" is beyond the 5 s window.
    let mut want = vec![0; 4];
    want[((fire - now) / 1250) as usize] = 1;
    assert_eq!(got["queues"][0]["spread"], json!(want), "{got}");
    assert_eq!(got["queues"][0]["scheduled"], json!(2));
}

#[test]
fn without_the_server_the_api_answers_an_error_then_recovers() {
    let mut server = Server::start();
    let port = server.port;
    let web = Web::start(&server.url(), &["--queue", "q"]);
    assert_eq!(web.api().0, 200);
    server.stop();
    for _ in 0..2 {
        // The first request meets the dropped connection, the next a refused one.
        let (status, got) = web.api();
        assert_eq!(status, 503, "{got}");
        let err = got["error"].as_str().expect("error text");
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    }
    let back = Restarted::on(port);
    let mut con = back.conn();
    let _: i64 = q!(&mut con, "LPUSH", "{q}:pending", "j");
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["queues"][0]["pending"], json!(1));
}

#[test]
fn queues_of_the_auto_promote_config_are_shown() {
    // The queues of the module's `echomq.auto-promote` config join those of
    // --queue.
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        "{mail}:schedule {mail}:pending {orders}:schedule {orders}:pending"
    );
    let _: i64 = q!(&mut con, "LPUSH", "{mail}:pending", "m1", "m2");
    let web = Web::start(&server.url(), &["--queue", "orders", "--queue", "extra"]);
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let names: Vec<&str> = got["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(|q| q["name"].as_str())
        .collect();
    assert_eq!(names, ["orders", "extra", "mail"]);
    assert_eq!(got["queues"][2]["pending"], json!(2));
    assert!(
        got["info"].get("echomq_auto_promote_ticks").is_some(),
        "{got}"
    );
}

/// A server started again on a port a stopped one used, so that echomq-web,
/// still pointed at that port, finds it back.
struct Restarted {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl Restarted {
    fn on(port: u16) -> Restarted {
        let dir = TempDir::new("restarted");
        let child = Command::new(server_binary())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir.0)
            .arg("--loadmodule")
            .arg(module_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("restart the server");
        let r = Restarted {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                .is_ok();
            if ok {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not come back on {port}"
            );
            sleep(Duration::from_millis(20));
        }
    }

    fn conn(&self) -> Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .and_then(|c| c.get_connection())
            .expect("connect")
    }
}

impl Drop for Restarted {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One headless Chromium page, driven through tests/node/browser.mjs; the
/// browser (and node) are killed by pid on drop.
struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _profile: TempDir,
}

impl Browser {
    fn start(test: &str) -> Option<Browser> {
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

    fn reply(&mut self) -> Result<Json, String> {
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

    fn call(&mut self, req: Json) -> Json {
        writeln!(self.stdin, "{req}").expect("write to the browser driver");
        self.reply()
            .unwrap_or_else(|e| panic!("{}: {e}", req["op"]))
    }

    fn open(&mut self, url: &str) {
        self.call(json!({"op": "open", "url": url}));
    }

    /// The value of `js` once it is truthy in the page.
    fn wait(&mut self, js: &str, what: &str) -> Json {
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

    fn screenshot(&mut self, path: &Path) {
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
const CARD_JS: &str = r#"(() => {
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

fn card_js(queue: &str) -> String {
    CARD_JS.replace("${QUEUE}", queue)
}

#[test]
fn the_page_draws_counts_and_the_spread_in_chromium() {
    let test = "the_page_draws_counts_and_the_spread_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    // Hundreds of queues: the page must still show each of them.
    let many: Vec<String> = (0..300).map(|i| format!("q{i:03}")).collect();
    let mut args = vec!["--queue", "orders"];
    for name in &many {
        args.extend(["--queue", name.as_str()]);
    }
    for name in many.iter().take(3) {
        let _: i64 = q!(&mut con, "LPUSH", format!("{{{name}}}:pending"), "x");
    }
    // Started before the queue is built: its jobs must not become due while it starts.
    let web = Web::start(&server.url(), &args);
    let b = build_queue(&mut con, "orders");
    browser.open(&format!("{}/", web.base));
    let got = browser.wait(
        &format!(
            "(() => {{ const v = {}; return v && v.scheduled > 0 && v; }})()",
            card_js("orders")
        ),
        "the orders card",
    );
    let num = |f: &str| got[f].as_u64().unwrap_or_else(|| panic!("{f}: {got}")) as usize;
    assert_eq!(
        num("scheduled"),
        b.herd + b.jittered + b.beyond + b.due,
        "{got}"
    );
    assert_eq!(num("due"), b.due, "{got}");
    assert_eq!(num("pending"), b.pending, "{got}");
    assert_eq!(num("dead"), b.dead, "{got}");
    assert_eq!(num("cards"), 301, "{got}");
    assert_eq!(got["status"], json!("live"));
    // The histogram: 60 buckets holding the herd and the jittered cohort,
    // one bar per non-empty bucket, the herd's bucket at full height.
    let spread: Vec<i64> = serde_json::from_value(got["spread"].clone()).expect("spread");
    assert_eq!(spread.len(), 60);
    assert_eq!(
        spread.iter().sum::<i64>(),
        (b.herd + b.jittered) as i64,
        "{spread:?}"
    );
    let non_empty = spread.iter().filter(|&&v| v > 0).count();
    assert_eq!(num("bars"), non_empty, "{got}");
    assert!(non_empty >= 2, "{spread:?}");
    let peak = *spread.iter().max().unwrap_or(&0);
    assert!(peak >= b.herd as i64, "{spread:?}");
    assert_eq!(
        num("full_bars"),
        spread.iter().filter(|&&v| v == peak).count(),
        "{got}"
    );
    assert!(
        got["drawn"]["width"].as_f64() > Some(1.0) && got["drawn"]["height"].as_f64() > Some(50.0),
        "nothing drawn: {got}"
    );
    // And a queue of the hundreds, with what its list holds.
    let q0 = browser.wait(&card_js("q000"), "the q000 card");
    assert_eq!(q0["pending"], json!(1), "{q0}");
    assert_eq!(q0["bars"], json!(0), "{q0}");

    browser.screenshot(&node::target_dir().join("web/echomq-web.png"));

    // Among hundreds, the queues with work: "hide idle queues" keeps only those.
    let shown = browser.call(json!({"op": "eval", "js": "(() => { \
        document.getElementById('busy').click(); \
        return { names: [...document.querySelectorAll('section.queue')].filter(e => !e.hidden).map(e => e.dataset.queue), \
                 text: document.getElementById('shown').textContent }; })()"}));
    assert_eq!(
        shown,
        json!({"names": ["orders", "q000", "q001", "q002"], "text": "4 of 301 shown"})
    );
}

#[test]
fn the_page_shows_an_outage_and_recovers_in_chromium() {
    let test = "the_page_shows_an_outage_and_recovers_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let mut server = Server::start();
    let port = server.port;
    let mut con = server.conn();
    let _: i64 = q!(&mut con, "LPUSH", "{q}:pending", "a", "b");
    let web = Web::start(&server.url(), &["--queue", "q"]);
    browser.open(&format!("{}/", web.base));
    let live = browser.wait(&card_js("q"), "the q card");
    assert_eq!(
        (live["status"].clone(), live["pending"].clone()),
        (json!("live"), json!(2))
    );

    server.stop();
    let down = browser.wait(
        "(() => { const s = document.getElementById('status'); \
          return s.dataset.state === 'error' && s.textContent; })()",
        "an error on the page",
    );
    let text = down.as_str().unwrap_or_default();
    assert!(text.contains("Cannot read the server"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("Retrying"), "{text}");
    // The last numbers stay, dimmed, while it retries.
    let stale = browser.call(json!({"op": "eval",
        "js": "document.getElementById('main').classList.contains('stale')"}));
    assert_eq!(stale, json!(true));
    browser.screenshot(&node::target_dir().join("web/echomq-web-outage.png"));

    let back = Restarted::on(port);
    let mut con = back.conn();
    let _: i64 = q!(&mut con, "LPUSH", "{q}:pending", "c", "d", "e");
    let again = browser.wait(
        &format!("(() => {{ const v = {}; return v && v.status === 'live' && v.pending === 3 && v; }})()", card_js("q")),
        "the page live again with the new server's numbers",
    );
    assert_eq!(again["pending"], json!(3));
    let stale = browser.call(json!({"op": "eval",
        "js": "document.getElementById('main').classList.contains('stale')"}));
    assert_eq!(stale, json!(false));
}

/// A stream queue in the workers' layout: the group `workers` (and a second
/// group, `audit`) made first, `entries` jobs added, `workers` reading
/// `delivered` of them without acknowledging, `audit` reading `audited`, and
/// `done` of the workers' entries acknowledged and deleted (step 3 of the
/// protocol). Returns (XLEN, the pending entries of both groups).
fn stream_queue(
    con: &mut Connection,
    q: &str,
    entries: usize,
    delivered: usize,
    audited: usize,
    done: usize,
) -> (i64, i64) {
    let p = format!("{{{q}}}:pending");
    for group in ["workers", "audit"] {
        let _: () = q!(con, "XGROUP", "CREATE", &p, group, "$", "MKSTREAM");
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

#[test]
fn api_counts_stream_and_list_pending_with_in_flight() {
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(
        &server.url(),
        &[
            "--queue", "s", "--queue", "l", "--queue", "e", "--queue", "m", "--queue", "bad",
        ],
    );
    // 6 entries; workers took 4 and finished 1 (acked and deleted), audit took 2.
    let (len, in_flight) = stream_queue(&mut con, "s", 6, 4, 2, 1);
    assert_eq!((len, in_flight), (5, 3 + 2));
    let _: i64 = q!(&mut con, "LPUSH", "{l}:pending", "a", "b", "c");
    // A stream with its group and nothing in it yet; a missing key; a string.
    let _: () = q!(
        &mut con,
        "XGROUP",
        "CREATE",
        "{e}:pending",
        "workers",
        "$",
        "MKSTREAM"
    );
    let _: () = q!(&mut con, "SET", "{bad}:pending", "not a queue");
    let _: i64 = q!(&mut con, "ZADD", "{s}:dead", 1, "d");
    let errors_before = info_field(&mut con, "stats", "total_error_replies");
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let zeros = vec![0; 60];
    assert_eq!(
        got["queues"],
        json!([
            {"name": "s", "scheduled": 0, "due": 0, "pending": 5, "in_flight": 5, "dead": 1, "spread": zeros},
            {"name": "l", "scheduled": 0, "due": 0, "pending": 3, "in_flight": 0, "dead": 0, "spread": zeros},
            {"name": "e", "scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0, "spread": zeros},
            {"name": "m", "scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0, "spread": zeros},
            {"name": "bad", "error": "WRONGTYPE Operation against a key holding the wrong kind of value"},
        ]),
        "{got}"
    );
    // Whatever the number of queues: TIME and configs, counts and TYPEs, lengths.
    assert_eq!(got["round_trips"], json!(3));
    // Reading a stream's groups acknowledges nothing and claims nothing.
    assert_eq!(
        stream_queue_pending(&mut con, "{s}:pending"),
        (5, 5),
        "unchanged by the scrape"
    );
    // Each `pending` is read as its TYPE says, so the scrape sends no command
    // that fails (a failure would show in the server's error stats), not
    // even for the misconfigured queue.
    let errors = info_field(&mut con, "stats", "total_error_replies");
    assert_eq!(
        errors, errors_before,
        "the scrape sent no command that failed"
    );
}

/// XLEN of the stream `p` and the pending entries of its groups `workers`
/// and `audit`, from XPENDING's summary (its first element, the count).
fn stream_queue_pending(con: &mut Connection, p: &str) -> (i64, i64) {
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
fn promtool() -> Result<PathBuf, String> {
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
fn promtool_check(tool: &Path, text: &str) {
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
fn prom_python() -> Result<&'static Path, String> {
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
fn parse_exposition(python: &Path, text: &str) -> Vec<(String, String, Json, f64)> {
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

#[test]
fn metrics_parse_cleanly_and_equal_the_api_for_list_and_stream_queues() {
    let test = "metrics_parse_cleanly_and_equal_the_api_for_list_and_stream_queues";
    let Some(tool) = node::or_skip(test, promtool()) else {
        return;
    };
    let Some(python) = node::or_skip(test, prom_python()) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    // A name with every character a label value must escape.
    let weird = "we\"ird\\q\nx";
    let web = Web::start(
        &server.url(),
        &[
            "--queue", "orders", "--queue", "s", "--queue", weird, "--queue", "bad",
        ],
    );
    // A list queue with due, pending, dead and future jobs (none falls due
    // during the check: build_queue keeps them >= 15 s away), and a stream
    // queue with jobs in flight.
    let b = build_queue(&mut con, "orders");
    let (s_len, s_in_flight) = stream_queue(&mut con, "s", 9, 5, 3, 2);
    let _: i64 = q!(
        &mut con,
        "LPUSH",
        format!("{{{weird}}}:pending"),
        "w1",
        "w2"
    );
    let _: i64 = q!(&mut con, "ZADD", format!("{{{weird}}}:dead"), 1, "d");
    let _: () = q!(&mut con, "SET", "{bad}:schedule", "not a zset");
    // Some counters that are not zero, and an unsafe policy for the gauge.
    promote(&mut con, "{none}:schedule", "{none}:pending");
    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru");

    let (status, content_type, text) = web.get_typed("/metrics");
    assert_eq!(status, 200, "{text}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    // The same moment: nothing changes between the two reads (no job falls
    // due, nothing is written, reading changes no counter).
    let (status, api) = web.api();
    assert_eq!(status, 200, "{api}");
    promtool_check(&tool, &text);
    let samples = parse_exposition(python, &text);

    let find = |name: &str, queue: Option<&str>| -> Option<(String, f64)> {
        samples
            .iter()
            .find(|(_, n, labels, _)| {
                n == name && queue.is_none_or(|q| labels["queue"].as_str() == Some(q))
            })
            .map(|(t, _, _, v)| (t.clone(), *v))
    };
    assert_eq!(find("echomq_up", None), Some(("gauge".into(), 1.0)));
    let mut queue_samples = 0;
    for q in api["queues"].as_array().expect("queues") {
        let name = q["name"].as_str().expect("name");
        for field in ["scheduled", "due", "pending", "in_flight", "dead"] {
            let got = find(&format!("echomq_queue_{field}"), Some(name));
            if q.get("error").is_some() {
                assert_eq!(got, None, "{name}: a queue in error has no samples");
                continue;
            }
            let want = q[field].as_f64().expect("number");
            assert_eq!(got, Some(("gauge".into(), want)), "{name} {field}");
            queue_samples += 1;
        }
    }
    assert_eq!(queue_samples, 3 * 5, "{text}");
    // The numbers themselves, not only their agreement.
    let scheduled = (b.herd + b.jittered + b.beyond + b.due) as f64;
    let v = |n: &str, q: &str| find(n, Some(q)).map(|(_, v)| v);
    assert_eq!(v("echomq_queue_scheduled", "orders"), Some(scheduled));
    assert_eq!(v("echomq_queue_due", "orders"), Some(b.due as f64));
    assert_eq!(v("echomq_queue_pending", "orders"), Some(b.pending as f64));
    assert_eq!(v("echomq_queue_dead", "orders"), Some(b.dead as f64));
    assert_eq!(v("echomq_queue_pending", "s"), Some(s_len as f64));
    assert_eq!(v("echomq_queue_in_flight", "s"), Some(s_in_flight as f64));
    assert_eq!((s_len, s_in_flight), (7, 3 + 3));
    // The weird name came back through the parser as it was.
    assert_eq!(v("echomq_queue_pending", weird), Some(2.0));
    assert_eq!(v("echomq_queue_dead", weird), Some(1.0));

    // Every INFO echomq field: counters as <field>_total, the two gauges as themselves.
    let info = api["info"].as_object().expect("info");
    assert_eq!(info.len(), 11, "{info:?}");
    for (field, value) in info {
        let want = value.as_f64().expect("number");
        let got = match field.as_str() {
            "echomq_eviction_policy_safe" => (find(field, None), "gauge"),
            // In seconds, Prometheus's base unit: 0 here, as no timer ran.
            "echomq_auto_promote_lag_ms_max" => {
                (find("echomq_auto_promote_lag_seconds_max", None), "gauge")
            }
            _ => (find(&format!("{field}_total"), None), "counter"),
        };
        assert_eq!(got.0, Some((got.1.to_string(), want)), "{field}");
    }
    assert_eq!(
        find("echomq_eviction_policy_safe", None),
        Some(("gauge".into(), 0.0))
    );
    assert_eq!(
        find("echomq_promote_calls_total", None),
        Some(("counter".into(), 1.0))
    );
    // Nothing else: 1 + 15 queue samples + 11 INFO fields.
    assert_eq!(samples.len(), 1 + 15 + 11, "{samples:?}");
}

#[test]
fn metrics_say_echomq_up_0_with_status_200_without_the_server() {
    let mut server = Server::start();
    let web = Web::start(&server.url(), &["--queue", "q"]);
    let mut con = server.conn();
    let _: i64 = q!(&mut con, "ZADD", "{q}:schedule", 1, "j");
    let _: () = q!(&mut con, "CONFIG", "RESETSTAT");
    let (status, text) = web.get("/metrics");
    assert_eq!(status, 200);
    assert!(text.lines().any(|l| l == "echomq_up 1"), "{text}");
    assert!(
        text.lines()
            .any(|l| l == r#"echomq_queue_due{queue="q"} 1"#),
        "{text}"
    );
    // /metrics exports no histogram, so it asks for none: the spreads are
    // nearly all of a scrape's server time.
    let stats: String = q!(&mut con, "INFO", "commandstats");
    let stats = stats.to_lowercase();
    assert!(!stats.contains("cmdstat_echo.spread"), "{stats}");
    web.api();
    let again: String = q!(&mut con, "INFO", "commandstats");
    assert!(
        again.to_lowercase().contains("cmdstat_echo.spread"),
        "{again}"
    );
    assert!(stats.contains("cmdstat_zcount"), "{stats}");
    server.stop();
    for _ in 0..2 {
        // The dropped connection, then a refused one: both are echomq_up 0.
        let (status, text) = web.get("/metrics");
        assert_eq!(status, 200, "{text}");
        assert!(text.lines().any(|l| l == "echomq_up 0"), "{text}");
        assert!(!text.contains("echomq_queue_"), "{text}");
        if let Ok(tool) = promtool() {
            promtool_check(&tool, &text);
        }
    }
}

#[test]
fn the_page_warns_while_the_eviction_policy_is_unsafe_in_chromium() {
    let test = "the_page_warns_while_the_eviction_policy_is_unsafe_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    let (_, in_flight) = stream_queue(&mut con, "s", 4, 3, 0, 0);
    let web = Web::start(&server.url(), &["--queue", "s"]);
    browser.open(&format!("{}/", web.base));
    const WARNING: &str = "(() => { const w = document.getElementById('eviction'); \
        return { shown: !w.hidden && w.getBoundingClientRect().height > 0, text: w.textContent, \
                 status: document.getElementById('status').dataset.state }; })()";
    // Safe (noeviction, the default): the stream card, and no warning.
    let card = browser.wait(
        &format!(
            "(() => {{ const v = {}; return v && v.status === 'live' && v; }})()",
            card_js("s")
        ),
        "the s card",
    );
    assert_eq!(
        (card["pending"].clone(), card["in_flight"].clone()),
        (json!(4), json!(in_flight))
    );
    assert_eq!(in_flight, 3);
    let w = browser.call(json!({"op": "eval", "js": WARNING}));
    assert_eq!(w["shown"], json!(false), "{w}");

    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru");
    let w = browser.wait(
        &format!("(() => {{ const w = {WARNING}; return w.shown && w; }})()"),
        "the eviction warning",
    );
    let text = w["text"].as_str().unwrap_or_default();
    assert!(text.contains("allkeys-lru"), "{text}");
    assert!(text.contains("noeviction"), "{text}");
    assert!(text.contains("evict"), "{text}");
    browser.screenshot(&node::target_dir().join("web/echomq-web-eviction.png"));

    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", "noeviction");
    let w = browser.wait(
        &format!(
            "(() => {{ const w = {WARNING}; return !w.shown && w.status === 'live' && w; }})()"
        ),
        "the warning gone after noeviction",
    );
    assert_eq!(w["text"], json!(""), "{w}");
}
