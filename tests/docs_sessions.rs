//! The sessions of the README, docs/getting-started.md and
//! docs/recurring.md, run as they are written, so the docs cannot drift from what the server and the libraries
//! do. docs/development.md ("The sessions in the docs are tests") states the
//! convention for the docs' writers; in short:
//!
//! - a line `<!-- session -->` before a ```` ```text ```` block: each line
//!   `127.0.0.1:<port>> COMMAND` is typed into `valkey-cli` (`--no-raw`, one
//!   process per line, so quoting is valkey-cli's own) and its output must be
//!   the lines below it, up to the next prompt;
//! - `<!-- run -->` before a ```` ```sh ```` block: each line runs in one
//!   bash kept for the whole page (so `cd`, `export` and a venv's `activate`
//!   carry over), and must succeed;
//! - `<!-- file: NAME -->` before a code block: the block is written to
//!   NAME in bash's current directory;
//! - `<!-- output -->` before a ```` ```text ```` block whose first line is
//!   `$ COMMAND`: the command runs there and its stdout must be the rest.
//!
//! Masked on both sides, with no mark in the doc: 13-digit numbers (Unix
//! times in ms: fire times, a hold's end, the time part of stream and job
//! ids), the 16 hex digits after a job id's `-`, the reply of
//! `ECHO.DELAY` under a jittered policy (a fresh draw), and valkey-cli's
//! `(3.51s)` after a slow reply. A reply line `...` ends the comparison of
//! that reply; `KEYS` replies compare as sets.
//!
//! Each page runs on one fresh server, in order. The programs of
//! getting-started are changed in one way only: they connect to this test's
//! server instead of 127.0.0.1:6379. Their directories (`~/echomq-hello`)
//! are a temporary directory outside the checkout; the Rust step's build
//! goes to target/docs-sessions, so only the first run compiles its
//! dependencies. Outside CI a missing python3 venv, Node.js or npm makes the
//! language steps (and the session that needs them) say SKIPPED.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{target_dir, Server, TempDir};

fn source(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// One marked block of a page, with the line (1-based) of its marker.
#[derive(Debug, Clone, PartialEq)]
enum Block {
    Session(Vec<Exchange>),
    Run(Vec<String>),
    File { name: String, text: String },
    Output { command: String, lines: Vec<String> },
}

/// One command of a session and the reply the doc shows for it.
#[derive(Debug, Clone, PartialEq)]
struct Exchange {
    line: usize,
    command: String,
    reply: Vec<String>,
}

/// The marked blocks of `doc`, in order. A marker must be followed by a
/// fenced block; unmarked blocks are prose.
fn blocks(doc: &str) -> Vec<(usize, Block)> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let marker = lines[i].trim();
        let kind = match marker {
            "<!-- session -->" | "<!-- run -->" | "<!-- output -->" => marker.to_string(),
            m if m.starts_with("<!-- file: ") && m.ends_with(" -->") => marker.to_string(),
            _ => {
                i += 1;
                continue;
            }
        };
        let at = i + 1;
        assert!(
            lines.get(i + 1).is_some_and(|l| l.starts_with("```")),
            "line {at}: {kind} is not followed by a fenced block"
        );
        let start = i + 2;
        let end = (start..lines.len())
            .find(|&j| lines[j].trim_end() == "```")
            .unwrap_or_else(|| panic!("line {at}: the block after {kind} is not closed"));
        let body: Vec<String> = lines[start..end].iter().map(|l| l.to_string()).collect();
        let block = match kind.as_str() {
            "<!-- session -->" => Block::Session(exchanges(start + 1, &body)),
            "<!-- run -->" => Block::Run(body),
            "<!-- output -->" => {
                let command = body
                    .first()
                    .and_then(|l| l.strip_prefix("$ "))
                    .unwrap_or_else(|| panic!("line {at}: an output block starts with `$ `"))
                    .to_string();
                Block::Output {
                    command,
                    lines: body[1..].to_vec(),
                }
            }
            file => Block::File {
                name: file["<!-- file: ".len()..file.len() - " -->".len()].to_string(),
                text: body.join("\n") + "\n",
            },
        };
        out.push((at, block));
        i = end + 1;
    }
    out
}

/// `127.0.0.1:6379> CMD` gives `CMD`.
fn prompt(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("127.0.0.1:")?;
    let (port, command) = rest.split_once("> ")?;
    port.bytes().all(|b| b.is_ascii_digit()).then_some(command)
}

fn exchanges(first_line: usize, body: &[String]) -> Vec<Exchange> {
    let mut out: Vec<Exchange> = Vec::new();
    for (n, line) in body.iter().enumerate() {
        match (prompt(line), out.last_mut()) {
            (Some(command), _) => out.push(Exchange {
                line: first_line + n,
                command: command.to_string(),
                reply: vec![],
            }),
            (None, Some(last)) => last.reply.push(line.clone()),
            (None, None) => panic!(
                "line {}: a session starts with a prompt, not {line:?}",
                first_line + n
            ),
        }
    }
    out
}

/// Every maximal run of exactly 13 digits becomes `<ms>`, and 16 hex
/// digits right after `<ms>-` become `<hex>`.
fn mask_times(line: &str) -> String {
    let b = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_digit()) {
            let end = (i..b.len())
                .find(|&j| !b[j].is_ascii_digit())
                .unwrap_or(b.len());
            if end - i == 13 {
                out.push_str("<ms>");
                let hex = end + 1..end + 17;
                let is_hex = |j: usize| b.get(j).is_some_and(|c| c.is_ascii_hexdigit());
                if b.get(end) == Some(&b'-') && hex.clone().all(is_hex) && !is_hex(hex.end) {
                    out.push_str("-<hex>");
                    i = hex.end;
                } else {
                    i = end;
                }
            } else {
                out.push_str(&line[i..end]);
                i = end;
            }
            continue;
        }
        let ch = line[i..].chars().next().expect("a char");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// valkey-cli's own line after a reply that took 0.5 s or more, `(3.51s)`:
/// a measure of the wait, not the server's reply.
fn elapsed(line: &str) -> bool {
    line.strip_prefix('(')
        .and_then(|l| l.strip_suffix("s)"))
        .and_then(|n| n.split_once('.'))
        .is_some_and(|(whole, frac)| {
            !whole.is_empty()
                && frac.len() == 2
                && whole
                    .bytes()
                    .chain(frac.bytes())
                    .all(|b| b.is_ascii_digit())
        })
}

/// A reply as compared: masked, cut at a `...` line, sorted for KEYS.
fn comparable(command: &str, reply: &[String], cut_at: Option<usize>) -> Vec<String> {
    let words: Vec<String> = command
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    let draw = words.first().map(String::as_str) == Some("echo.delay")
        && words.get(1).is_some_and(|p| p.contains("jitter:"));
    let mut lines: Vec<String> = reply
        .iter()
        .take(cut_at.unwrap_or(usize::MAX))
        .map(|l| {
            if draw && l.starts_with("(integer) ") {
                "(integer) <draw>".to_string()
            } else if elapsed(l) {
                "(<elapsed>)".to_string()
            } else {
                mask_times(l)
            }
        })
        .collect();
    if words.first().map(String::as_str) == Some("keys") {
        lines = lines
            .iter()
            .map(|l| l.split_once(") ").map_or(l.clone(), |(_, v)| v.to_string()))
            .collect();
        lines.sort();
    }
    lines
}

/// None when `got` is the reply the doc shows, else what differs.
fn differs(command: &str, shown: &[String], got: &[String]) -> Option<String> {
    let cut = shown.iter().position(|l| l.trim() == "...");
    let want = comparable(command, shown, cut);
    let have = comparable(command, got, cut);
    (want != have).then(|| {
        format!(
            "the doc shows:\n  {}\nthe server replied:\n  {}",
            shown.join("\n  "),
            got.join("\n  ")
        )
    })
}

/// `command` typed into valkey-cli against `port`: its output lines.
fn cli(port: u16, command: &str) -> Vec<String> {
    let binary = std::env::var("ECHOMQ_CLI").unwrap_or_else(|_| "valkey-cli".into());
    let mut child = Command::new(&binary)
        .args(["--no-raw", "-h", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{command}").expect("write the command");
    drop(stdin);
    let out = child.wait_with_output().expect("valkey-cli");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text.lines().map(str::to_string).collect()
}

fn run_session(page: &str, port: u16, exchanges: &[Exchange]) {
    for x in exchanges {
        let got = cli(port, &x.command);
        if let Some(why) = differs(&x.command, &x.reply, &got) {
            panic!("{page}:{}: `{}`: {why}", x.line, x.command);
        }
    }
}

/// The bash a page's steps run in, kept for the whole page, from the
/// checkout; `~/echomq-hello` is under `home`.
struct Shell {
    child: Child,
    stdin: ChildStdin,
    dir: TempDir,
    home: PathBuf,
    port: u16,
    seq: u32,
}

impl Shell {
    fn start(port: u16) -> Shell {
        let dir = TempDir::new("docs-shell");
        let home = dir.0.join("home");
        std::fs::create_dir_all(&home).expect("home");
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            // The Rust step's build, kept between runs of this test.
            .env("CARGO_TARGET_DIR", target_dir().join("docs-sessions"))
            .env("NO_COLOR", "1")
            .env("npm_config_update_notifier", "false")
            .env("npm_config_fund", "false")
            .env("npm_config_audit", "false")
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start bash");
        let stdin = child.stdin.take().expect("stdin");
        Shell {
            child,
            stdin,
            dir,
            home,
            port,
            seq: 0,
        }
    }

    /// The doc's text as this machine runs it: the directories under a
    /// temporary home, the server on this test's port.
    fn localize(&self, text: &str) -> String {
        let port = self.port.to_string();
        text.replace(
            "~/echomq-hello",
            &format!("{}/echomq-hello", self.home.display()),
        )
        .replace("valkey.Valkey()", &format!("valkey.Valkey(port={port})"))
        .replace("new Redis()", &format!("new Redis({port})"))
        .replace("127.0.0.1:6379", &format!("127.0.0.1:{port}"))
    }

    /// Runs one line; its exit status, stdout and stderr.
    fn line(&mut self, line: &str, within: Duration) -> (i32, String, String) {
        self.seq += 1;
        let base = self.dir.0.join(format!("step{}", self.seq));
        let (out, err, rc) = (
            base.with_extension("out"),
            base.with_extension("err"),
            base.with_extension("rc"),
        );
        let tmp = base.with_extension("rc-tmp");
        writeln!(
            self.stdin,
            "{{ {}\n}} > '{}' 2> '{}' < /dev/null; echo $? > '{}'; mv '{}' '{}'",
            self.localize(line),
            out.display(),
            err.display(),
            tmp.display(),
            tmp.display(),
            rc.display()
        )
        .expect("write to bash");
        self.stdin.flush().expect("flush");
        let deadline = Instant::now() + within;
        while !rc.exists() {
            assert!(
                Instant::now() < deadline,
                "`{line}` did not end within {within:?}"
            );
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("bash exited ({status}) at `{line}`");
            }
            sleep(Duration::from_millis(20));
        }
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let status = read(&rc).trim().parse().unwrap_or(-1);
        (status, read(&out), read(&err))
    }

    fn write(&mut self, name: &str, text: &str) {
        // Written by bash, in its current directory.
        let staged = self.dir.0.join(format!("file{}", self.seq));
        std::fs::write(&staged, self.localize(text)).expect("stage the file");
        let (status, _, err) = self.line(
            &format!("cp '{}' '{name}'", staged.display()),
            Duration::from_secs(10),
        );
        assert_eq!(status, 0, "cannot write {name}: {err}");
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "exit");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why the language steps cannot run here, if they cannot.
fn missing_tools() -> Option<String> {
    let ok = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok("python3", &["-c", "import venv, ensurepip"]) {
        return Some("python3 with venv is not installed".into());
    }
    if !ok(
        "node",
        &[
            "-e",
            "process.exit(+process.versions.node.split('.')[0] >= 18 ? 0 : 1)",
        ],
    ) {
        return Some("Node.js 18 or later is not installed".into());
    }
    if !ok("npm", &["--version"]) {
        return Some("npm is not installed".into());
    }
    None
}

/// Runs every marked block of `page` in order, on one fresh server.
fn run_page(page: &str, with_steps: bool) {
    let doc = std::fs::read_to_string(source(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
    let server = Server::start();
    let mut shell = with_steps.then(|| Shell::start(server.port));
    for (at, block) in blocks(&doc) {
        let Some(shell) = shell.as_mut() else {
            if let Block::Session(x) = &block {
                run_session(page, server.port, x);
            }
            continue;
        };
        match &block {
            Block::Session(x) => run_session(page, server.port, x),
            Block::Run(lines) => {
                for line in lines.iter().filter(|l| !l.trim().is_empty()) {
                    let (status, _, err) = shell.line(line, Duration::from_secs(600));
                    assert_eq!(status, 0, "{page}:{at}: `{line}` failed:\n{err}");
                }
            }
            Block::File { name, text } => shell.write(name, text),
            Block::Output { command, lines } => {
                let (status, out, err) = shell.line(command, Duration::from_secs(900));
                assert_eq!(status, 0, "{page}:{at}: `{command}` failed:\n{out}\n{err}");
                let got: Vec<String> = out.lines().map(str::to_string).collect();
                if let Some(why) = differs(command, lines, &got) {
                    panic!("{page}:{at}: `{command}`: {why}\n(stderr: {err})");
                }
            }
        }
    }
}

#[test]
fn the_readme_sessions_reply_as_shown() {
    let doc = std::fs::read_to_string(source("README.md")).expect("README.md");
    let sessions = blocks(&doc)
        .iter()
        .filter(|(_, b)| matches!(b, Block::Session(_)))
        .count();
    assert!(sessions >= 2, "the README has {sessions} sessions marked");
    run_page("README.md", false);
}

#[test]
fn the_recurring_jobs_sessions_reply_as_shown() {
    let doc = std::fs::read_to_string(source("docs/recurring.md")).expect("docs/recurring.md");
    let sessions = blocks(&doc)
        .iter()
        .filter(|(_, b)| matches!(b, Block::Session(_)))
        .count();
    assert!(
        sessions >= 4,
        "docs/recurring.md has {sessions} sessions marked"
    );
    run_page("docs/recurring.md", false);
}

#[test]
fn getting_started_runs_as_written() {
    let doc = std::fs::read_to_string(source("docs/getting-started.md")).expect("getting-started");
    let kinds = blocks(&doc);
    let count = |f: fn(&Block) -> bool| kinds.iter().filter(|(_, b)| f(b)).count();
    assert_eq!(
        count(|b| matches!(b, Block::File { .. })),
        3,
        "a program per language"
    );
    assert_eq!(
        count(|b| matches!(b, Block::Output { .. })),
        3,
        "a run per language"
    );
    assert!(count(|b| matches!(b, Block::Session(_))) >= 1);
    let tools = missing_tools().map_or(Ok(()), Err);
    if common::node::or_skip("getting_started_runs_as_written", tools).is_some() {
        run_page("docs/getting-started.md", true);
    }
}

#[test]
fn a_reply_that_differs_is_found() {
    let doc = "text\n<!-- session -->\n```text\n\
               127.0.0.1:6379> ECHO.DELAY jitter:fixed:100 1\n(integer) 37\n\
               127.0.0.1:6390> ZRANGE s 0 -1 WITHSCORES\n1) \"job:7\"\n2) \"1796122951373\"\n\
               127.0.0.1:6379> XINFO GROUPS s\n 1) \"name\"\n ...\n\
               127.0.0.1:6379> KEYS *\n1) \"b\"\n2) \"a\"\n```\n";
    let found = blocks(doc);
    let [(2, Block::Session(x))] = found.as_slice() else {
        panic!("one session: {found:?}");
    };
    assert_eq!(x.len(), 4);
    assert_eq!(x[1].line, 6);
    let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // A draw and a time differ from the doc's and still match.
    assert_eq!(
        differs(&x[0].command, &x[0].reply, &lines(&["(integer) 99"])),
        None
    );
    assert!(differs(&x[0].command, &x[0].reply, &lines(&["(error) ERR"])).is_some());
    let zrange = lines(&["1) \"job:7\"", "2) \"1796999999999\""]);
    assert_eq!(differs(&x[1].command, &x[1].reply, &zrange), None);
    // Any other changed reply is a failure, and so is a missing line.
    let other = lines(&["1) \"job:8\"", "2) \"1796999999999\""]);
    assert!(differs(&x[1].command, &x[1].reply, &other).is_some());
    assert!(differs(&x[1].command, &x[1].reply, &zrange[..1]).is_some());
    // `...` ends the comparison; KEYS is a set.
    let groups = lines(&[" 1) \"name\"", " 2) \"workers\""]);
    assert_eq!(differs(&x[2].command, &x[2].reply, &groups), None);
    let keys = lines(&["1) \"a\"", "2) \"b\""]);
    assert_eq!(differs(&x[3].command, &x[3].reply, &keys), None);
    // valkey-cli's measure of a slow reply is not compared; a reply that
    // only looks like one is.
    assert!(elapsed("(3.51s)") && elapsed("(12.00s)"));
    assert!(!elapsed("(3.5s)") && !elapsed("(x.51s)") && !elapsed("(.51s)") && !elapsed("3.51s"));
    let slept = lines(&["OK", "(3.51s)"]);
    assert_eq!(
        differs("DEBUG SLEEP 3.5", &slept, &lines(&["OK", "(3.97s)"])),
        None
    );
    assert!(differs("DEBUG SLEEP 3.5", &slept, &lines(&["OK"])).is_some());
    // Ids: 13 digits, then 16 hex digits; other numbers stay as they are.
    assert_eq!(
        mask_times("1796130972996-09f9ba4c21196d46 2 nobody 1796120618388-0 400 12345678901234"),
        "<ms>-<hex> 2 nobody <ms>-0 400 12345678901234"
    );
}
