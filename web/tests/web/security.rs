//! echomq-web's security: the URL's password in no response, page, metric
//! or output line; `rediss://` with a CA file against a server that accepts
//! only TLS; docs/security.md's ACL user of echomq-web, with the default user
//! off, reading a queue end to end; and the HTTP
//! side's headers, header-read timeout and connection bound.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::Duration;

use serde_json::json;

use crate::common::inspect::{acl_line, acl_log};
use crate::common::*;
use crate::harness::*;
use crate::node;

const PASSWORD: &str = "s3cretpw";

/// The policy echomq-web sends with every response.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn the_password_is_in_no_response_page_metric_or_output() {
    let mut server = Server::start();
    let port = server.port;
    let mut con = server.conn();
    let _: () = q!(
        &mut con,
        "ACL",
        "SETUSER",
        "alice",
        "on",
        format!(">{PASSWORD}"),
        "~*",
        "&*",
        "+@all"
    );
    let _: i64 = q!(&mut con, "LPUSH", "{q}:pending", "a", "b");
    let url = format!("redis://alice:{PASSWORD}@127.0.0.1:{port}/");
    let shown = format!("redis://alice:***@127.0.0.1:{port}/");
    // The URL from the environment, from --url, and with a wrong password.
    let mut from_env = Web::launch(&["--queue", "q"], &[("ECHOMQ_WEB_URL", &url)]);
    let mut from_arg = Web::start(&url, &["--queue", "q"]);
    let mut refused = Web::start(
        &format!("redis://alice:wr0ngpw@127.0.0.1:{port}/"),
        &["--queue", "q"],
    );

    // ECHOMQ_WEB_URL works, and keeps the password off the command line.
    let (status, got) = from_env.api();
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["queues"][0]["pending"], json!(2), "{got}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", from_env.pid())).expect("cmdline");
    assert!(!String::from_utf8_lossy(&cmdline).contains(PASSWORD));

    let mut seen: Vec<String> = Vec::new();
    for web in [&from_env, &from_arg] {
        for path in ["/", "/page.js", "/page.css", "/api/queues", "/metrics"] {
            let (status, headers, body) = web.get_with_headers(path);
            assert_eq!(status, 200, "{path}: {body}");
            seen.push(format!("{path}: {headers:?} {body}"));
        }
    }
    let (status, body) = refused.get("/api/queues");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.to_lowercase().contains("authentication failed"),
        "{body}"
    );
    assert!(
        body.contains("redis://alice:***@127.0.0.1:"),
        "the URL is shown masked: {body}"
    );
    seen.push(body);

    server.stop();
    // The dropped connection, then a refused one.
    for _ in 0..2 {
        for web in [&from_env, &from_arg] {
            let (status, body) = web.get("/api/queues");
            assert_eq!(status, 503, "{body}");
            assert!(body.contains(&shown), "{body}");
            seen.push(body);
            let (status, body) = web.get("/metrics");
            assert_eq!(status, 200, "{body}");
            assert!(body.contains("echomq_up 0"), "{body}");
            seen.push(body);
        }
    }
    let outputs = [from_env.stop(), from_arg.stop(), refused.stop()];
    assert!(
        outputs[0].contains(&format!(" for {shown} ")),
        "the start-up line names the server, masked: {}",
        outputs[0]
    );
    // A URL the client refuses at start: the refusal is masked too.
    let out = Command::new(web_binary())
        .args(["--queue", "q", "--listen", "127.0.0.1:0"])
        .env(
            "ECHOMQ_WEB_URL",
            format!("redis://alice:{PASSWORD}@127.0.0.1:notaport/"),
        )
        .output()
        .expect("run echomq-web");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let refusal = String::from_utf8_lossy(&out.stderr).into_owned();
    // A URL that does not parse is shown without its userinfo.
    assert!(
        refusal.contains("redis://***@127.0.0.1:notaport/"),
        "{refusal}"
    );
    assert!(!refusal.contains("alice"), "{refusal}");
    for text in seen.iter().chain(&outputs).chain([&refusal]) {
        assert!(!text.contains(PASSWORD), "the password shown: {text}");
        assert!(!text.contains("wr0ngpw"), "the password shown: {text}");
    }
}

/// Passwords that hold what ends an authority or a userinfo, each made of
/// pieces found nowhere else (`Hk4`, `Lm8`, ...), so that any 4 characters of
/// one in echomq-web's output can only have come from the password.
fn hostile_passwords() -> Vec<String> {
    let long: String = (0..40).map(|i| format!("Zq{i:02}x")).collect();
    assert_eq!(long.len(), 200);
    let mut all: Vec<String> = [
        "Hk4#Lm8",
        "Pq/Rs7Tu",
        "Vw?Xy=9Ab",
        "Cd@Ef@Gh",
        "Ij%Kl%zzMn",
        "Op Qr St",
        "1234#5678",
        "Uv:Wx#/?@ %Yz",
        "Ba#Dc@Fe/Hg?Ji Lk%4",
        "#Nm8/",
        "Po@?#",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    all.push(long.clone());
    all.push(format!("#{long}/?@ %"));
    all
}

/// What echomq-web wrote to stdout and stderr when started with `args` and
/// `env`: its refusal if it stops, or what it wrote in its first 2 s if it
/// starts (killed by pid then).
fn output_of(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut child = Command::new(web_binary())
        .args(["--listen", "127.0.0.1:0", "--queue", "q"])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start echomq-web");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let stdout = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let stderr = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(2) {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        sleep(Duration::from_millis(20));
    }
    let out = stdout.join().expect("stdout");
    let err = stderr.join().expect("stderr");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&err)
    )
}

#[test]
fn hostile_passwords_are_in_no_output_line() {
    let server = Server::start();
    let port = server.port;
    // Each start waits up to 2 s for echomq-web's first output: all of them
    // at once, not one after another (26 starts, about 30 s in turn).
    let starts: Vec<_> = hostile_passwords()
        .into_iter()
        .flat_map(|password| {
            let url = format!("redis://default:{password}@127.0.0.1:{port}/");
            [
                ("--url", password.clone(), url.clone()),
                ("ECHOMQ_WEB_URL", password, url),
            ]
        })
        .map(|(how, password, url)| {
            std::thread::spawn(move || {
                let text = if how == "--url" {
                    output_of(&["--url", &url], &[])
                } else {
                    output_of(&[], &[("ECHOMQ_WEB_URL", &url)])
                };
                (how, password, url, text)
            })
        })
        .collect();
    for start in starts {
        let (how, password, url, text) = start.join().expect("a start");
        // What the output may hold of the password: what the rest of the URL
        // holds too.
        let rest = url.replacen(&password, "", 1);
        let chars: Vec<char> = password.chars().collect();
        assert!(!text.is_empty(), "{how} {url}: no output at all");
        assert!(
            !text.contains(&password),
            "{how} {url}: the password shown: {text}"
        );
        for piece in chars.windows(4) {
            let piece: String = piece.iter().collect();
            assert!(
                rest.contains(&piece) || !text.contains(&piece),
                "{how} {url}: '{piece}' of the password shown: {text}"
            );
        }
    }
}

/// openssl, which makes the test's CA and certificates.
fn openssl() -> Result<PathBuf, String> {
    match Command::new("openssl").arg("version").output() {
        Ok(o) if o.status.success() => Ok(PathBuf::from("openssl")),
        _ => Err("openssl is not installed (apt-get install openssl)".into()),
    }
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// In `dir`: ca.pem (a CA), server.pem and server.key (signed by it, for
/// IP 127.0.0.1), and other-ca.pem (a CA that signed nothing here).
fn make_pki(openssl: &Path, dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for (name, cn) in [("ca", "echomq test CA"), ("other-ca", "another CA")] {
        run_ok(
            Command::new(openssl)
                .current_dir(dir)
                .args(["req", "-x509"])
                .args(ec)
                .args(["-keyout", &format!("{name}.key"), "-out"])
                .arg(format!("{name}.pem"))
                .args(["-days", "2", "-subj", &format!("/CN={cn}")]),
        );
    }
    run_ok(
        Command::new(openssl)
            .current_dir(dir)
            .arg("req")
            .args(ec)
            .args(["-keyout", "server.key", "-out", "server.csr"])
            .args(["-subj", "/CN=127.0.0.1"]),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .expect("write server.ext");
    run_ok(
        Command::new(openssl)
            .current_dir(dir)
            .args(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem"])
            .args(["-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem"])
            .args(["-days", "2", "-extfile", "server.ext"]),
    );
}

/// A server with the module that accepts TLS only, with a password, killed
/// by pid on drop.
struct TlsServer {
    server: Server,
    port: u16,
    pki: PathBuf,
}

impl TlsServer {
    fn start(pki: &Path) -> TlsServer {
        let file = |name: &str| pki.join(name).to_str().expect("a UTF-8 path").to_string();
        let options = Options {
            tls_only: true,
            ..Options::default()
        }
        .arg("tls-cert-file", &file("server.pem"))
        .arg("tls-key-file", &file("server.key"))
        .arg("tls-ca-cert-file", &file("ca.pem"))
        .arg("tls-auth-clients", "no")
        .arg("requirepass", PASSWORD);
        let server = Server::start_with(options);
        let mut server = TlsServer {
            port: server.port,
            server,
            pki: pki.to_path_buf(),
        };
        wait_until(
            "the TLS server answers PING",
            Duration::from_secs(20),
            || {
                if !server.server.alive() {
                    panic!("the TLS server exited:\n{}", server.server.log());
                }
                match server.try_cli(&["PING"]) {
                    Ok(pong) if pong == "PONG" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        );
        server
    }

    /// valkey-cli over TLS, trusting the test CA: its output, trimmed.
    fn try_cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("valkey-cli")
            .args(["--tls", "--cacert"])
            .arg(self.pki.join("ca.pem"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["--no-auth-warning", "-a", PASSWORD])
            .args(args)
            .output()
            .map_err(|e| format!("valkey-cli: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !text.starts_with("ERR") {
            Ok(text)
        } else {
            Err(format!("{text} {}", String::from_utf8_lossy(&out.stderr)))
        }
    }

    fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .unwrap_or_else(|e| panic!("valkey-cli {args:?}: {e}"))
    }
}

#[test]
fn rediss_with_a_ca_file_and_a_clean_error_with_the_wrong_ca() {
    let test = "rediss_with_a_ca_file_and_a_clean_error_with_the_wrong_ca";
    let Some(openssl) = node::or_skip(test, openssl()) else {
        return;
    };
    let pki = TempDir::new("pki");
    make_pki(&openssl, &pki.0);
    let server = TlsServer::start(&pki.0);
    assert_eq!(server.cli(&["LPUSH", "{t}:pending", "a", "b", "c"]), "3");
    assert_eq!(server.cli(&["ZADD", "{t}:dead", "1", "d"]), "1");
    let url = format!("rediss://:{PASSWORD}@127.0.0.1:{}/", server.port);
    let shown = format!("rediss://:***@127.0.0.1:{}/", server.port);
    let ca = pki.0.join("ca.pem");
    let ca = ca.to_str().expect("a UTF-8 path");

    // The CA file from the environment, and from --ca-file.
    let from_env = Web::launch(
        &["--queue", "t"],
        &[("ECHOMQ_WEB_URL", &url), ("ECHOMQ_WEB_CA_FILE", ca)],
    );
    let from_arg = Web::start(&url, &["--queue", "t", "--ca-file", ca]);
    for web in [&from_env, &from_arg] {
        let (status, got) = web.api();
        assert_eq!(status, 200, "{got}");
        assert_eq!(
            got["queues"][0],
            json!({"name": "t", "scheduled": 0, "due": 0, "pending": 3, "in_flight": 0,
                   "dead": 1, "spread": vec![0; 60], "release": unlimited(), "groups": no_groups(), "repeats": no_repeats()})
        );
        assert!(got["info"].get("echomq_retries").is_some(), "{got}");
        assert_eq!(got["maxmemory_policy"], json!("noeviction"));
    }

    // Another CA: the server's certificate does not verify.
    let other = pki.0.join("other-ca.pem");
    let mut wrong = Web::start(
        &url,
        &["--queue", "t", "--ca-file", other.to_str().expect("UTF-8")],
    );
    for _ in 0..2 {
        let (status, got) = wrong.api();
        assert_eq!(status, 503, "{got}");
        let err = got["error"].as_str().expect("error text");
        assert!(err.starts_with(&shown), "{err}");
        assert!(err.to_lowercase().contains("certificate"), "{err}");
        assert!(!err.contains(PASSWORD), "{err}");
    }
    assert!(
        matches!(wrong.child.try_wait(), Ok(None)),
        "echomq-web is still running"
    );
    let out = wrong.stop();
    assert!(!out.contains("panicked"), "{out}");
    assert!(!out.contains(PASSWORD), "{out}");

    // A CA file with no certificate in it stops echomq-web at start.
    let empty = pki.0.join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").expect("write");
    let out = Command::new(web_binary())
        .args(["--listen", "127.0.0.1:0", "--queue", "t", "--ca-file"])
        .arg(&empty)
        .env("ECHOMQ_WEB_URL", &url)
        .output()
        .expect("run echomq-web");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no PEM certificate"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "{stderr}");
}

#[test]
fn a_least_privilege_user_runs_the_web_view() {
    let server = Server::start();
    let port = server.port;
    let mut admin = server.conn();
    let words = acl_line("echomq-web", "web-pw");
    let _: () = run(&mut admin, redis::cmd(&words[0]).arg(&words[1..]));
    // The admin connection stays authenticated; new ones must log in.
    let _: () = q!(&mut admin, "ACL", "SETUSER", "default", "off");
    let mut anonymous = server.conn();
    let e = err!(&mut anonymous, "PING");
    assert!(e.starts_with("NOAUTH"), "{e}");
    let _: () = q!(
        &mut admin,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        "{mail}:schedule {mail}:pending"
    );
    let _: i64 = q!(&mut admin, "LPUSH", "{mail}:pending", "m1");
    let _: () = q!(&mut admin, "ACL", "LOG", "RESET");

    // The queue as workers leave it (the libraries' own least-privilege
    // user is tested in clients/tests/clients.rs): 10 jobs dead-lettered by
    // ECHO.RETRY, 5 entries in the stream.
    let dead = 10;
    for i in 0..dead {
        let job = format!("job-{i}");
        let reply: i64 = q!(
            &mut admin,
            "ECHO.RETRY",
            "{orders}:schedule",
            &job,
            "fixed:20",
            2,
            "MAXATTEMPTS",
            2,
            "DEAD",
            "{orders}:dead"
        );
        assert_eq!(reply, -1, "{job} dead-lettered");
    }
    for i in 0..5 {
        let _: String = q!(
            &mut admin,
            "XADD",
            "{orders}:pending",
            "*",
            "job",
            format!("ok-{i}")
        );
    }

    // echomq-web, as echomq-web: the same numbers as the admin reads, and
    // the release limit of a queue (ECHO.LIMITS, allowed by the line).
    let _: () = q!(
        &mut admin,
        "CONFIG",
        "SET",
        "echomq.release-limits",
        "{orders}:schedule 100/s 10"
    );
    let web = Web::launch(
        &["--queue", "orders"],
        &[(
            "ECHOMQ_WEB_URL",
            &format!("redis://echomq-web:web-pw@127.0.0.1:{port}/"),
        )],
    );
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let scheduled: i64 = q!(&mut admin, "ZCARD", "{orders}:schedule");
    let pending: i64 = q!(&mut admin, "XLEN", "{orders}:pending");
    let dead_set: i64 = q!(&mut admin, "ZCARD", "{orders}:dead");
    assert_eq!((scheduled, dead_set), (0, dead as i64));
    let zeros = vec![0; 60];
    assert_eq!(
        got["queues"],
        json!([
            {"name": "orders", "scheduled": 0, "due": 0, "pending": pending, "in_flight": 0,
             "dead": dead, "spread": zeros,
             "release": {"limited": true, "rate_per_second": 100.0, "rate_in_force_per_second": 100.0,
                         "adaptive": false, "burst": 10, "available": 10, "held_until_ms": 0,
                         "held_for_ms": 0, "held_back": 0, "released": 0, "failures": 0}, "groups": no_groups(), "repeats": no_repeats()},
            {"name": "mail", "scheduled": 0, "due": 0, "pending": 1, "in_flight": 0,
             "dead": 0, "spread": zeros, "release": unlimited(), "groups": no_groups(), "repeats": no_repeats()},
        ]),
        "{got}"
    );
    assert_eq!(got["maxmemory_policy"], json!("noeviction"));
    assert_eq!(got["round_trips"], json!(3));
    assert_eq!(
        got["info"]["echomq_dead_lettered"],
        json!(dead),
        "{}",
        got["info"]
    );
    let (status, metrics) = web.get("/metrics");
    assert_eq!(status, 200);
    assert!(metrics.lines().any(|l| l == "echomq_up 1"), "{metrics}");

    // The web user reads and nothing more.
    let mut viewer = redis::Client::open(format!("redis://echomq-web:web-pw@127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .expect("connect as echomq-web");
    let e = err!(&mut viewer, "ZADD", "{orders}:schedule", 1, "x");
    assert!(e.starts_with("NOPERM"), "{e}");
    let e = err!(&mut viewer, "CONFIG", "GET", "requirepass");
    assert!(e.starts_with("NOPERM"), "{e}");
    // Exactly those two refusals: the scrapes needed nothing the line does
    // not allow.
    let mut log = acl_log(&mut admin);
    log.sort();
    assert_eq!(
        log,
        [
            ("echomq-web".to_string(), "config|get".to_string()),
            ("echomq-web".to_string(), "zadd".to_string()),
        ],
        "ACL LOG"
    );
}

#[test]
fn every_response_says_nosniff_and_carries_the_content_security_policy() {
    let server = Server::start();
    let web = Web::start(&server.url(), &["--queue", "q"]);
    for (path, status, content_type) in [
        ("/", 200, "text/html"),
        ("/page.js", 200, "text/javascript"),
        ("/page.css", 200, "text/css"),
        ("/api/queues", 200, "application/json"),
        ("/metrics", 200, "text/plain; version=0.0.4"),
        ("/no-such-page", 404, ""),
    ] {
        let (got, headers, body) = web.get_with_headers(path);
        assert_eq!(got, status, "{path}: {body}");
        assert_eq!(
            header(&headers, "x-content-type-options"),
            Some("nosniff"),
            "{path}: {headers:?}"
        );
        assert_eq!(
            header(&headers, "content-security-policy"),
            Some(CSP),
            "{path}"
        );
        assert_eq!(header(&headers, "referrer-policy"), Some("no-referrer"));
        let ct = header(&headers, "content-type").unwrap_or_default();
        assert!(ct.starts_with(content_type), "{path}: {ct}");
    }
    // Nothing inline for the policy to refuse: the script and the style are
    // their own files, and no element has a style or an event attribute.
    let (_, page) = web.get("/");
    assert!(
        page.contains(r#"<script src="page.js"></script>"#),
        "{page}"
    );
    assert!(page.contains(r#"<link rel="stylesheet" href="page.css">"#));
    assert_eq!(page.matches("<script").count(), 1, "{page}");
    assert!(!page.contains("<style"), "{page}");
    assert!(!page.contains(" style="), "{page}");
    let attrs = page
        .split(|c: char| c.is_whitespace())
        .filter(|w| w.starts_with("on") && w.contains('='))
        .count();
    assert_eq!(attrs, 0, "event handler attributes: {page}");
}

#[test]
fn the_page_runs_under_its_policy_in_chromium() {
    let test = "the_page_runs_under_its_policy_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    let _: i64 = q!(&mut con, "LPUSH", "{q}:pending", "a");
    let web = Web::start(&server.url(), &["--queue", "q"]);
    browser.open(&format!("{}/", web.base));
    let card = browser.wait(
        &format!(
            "(() => {{ const v = {}; return v && v.status === 'live' && v; }})()",
            card_js("q")
        ),
        "the q card, live",
    );
    assert_eq!(card["pending"], json!(1));
    // The browser enforces the policy: an inline script does not run, an
    // inline style does not apply (a script of its own would be refused).
    let refused = browser.call(json!({"op": "eval", "js": "(() => { \
        const s = document.createElement('script'); s.textContent = 'window.inlineRan = true'; \
        document.body.appendChild(s); \
        const d = document.createElement('div'); d.setAttribute('style', 'width: 123px'); \
        document.body.appendChild(d); \
        return { inline_script: window.inlineRan === true, \
                 inline_style: d.getBoundingClientRect().width === 123 }; })()"}));
    assert_eq!(
        refused,
        json!({"inline_script": false, "inline_style": false})
    );
}

/// A TCP connection to echomq-web's HTTP port.
fn connect(web: &Web) -> TcpStream {
    let s = TcpStream::connect(web.base.trim_start_matches("http://")).expect("connect");
    // Only so that a server that never closes fails the test instead of hanging it.
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("read timeout");
    s
}

/// Reads until the server closes the connection: what it sent, or the
/// error (a read timeout: it did not close).
fn until_closed(s: &mut TcpStream) -> Result<String, String> {
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => Ok(String::from_utf8_lossy(&got).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(String::new()),
        Err(e) => Err(format!("not closed: {e}")),
    }
}

#[test]
fn a_connection_that_never_finishes_its_headers_is_closed() {
    let server = Server::start();
    let web = Web::start(
        &server.url(),
        &["--queue", "q", "--header-timeout-ms", "300"],
    );
    let mut half = connect(&web);
    half.write_all(b"GET /api/queues HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
        .expect("write half a request");
    let mut silent = connect(&web);
    let got = until_closed(&mut half).expect("half a request");
    assert!(!got.contains(" 200 "), "{got}");
    let got = until_closed(&mut silent).expect("no request at all");
    assert_eq!(got, "");
    // A whole request is still answered.
    assert_eq!(web.api().0, 200);
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/<pid>/fd")
        .count()
}

#[test]
fn idle_connections_beyond_the_bound_wait_and_the_server_keeps_answering() {
    let server = Server::start();
    let bound = 4;
    let web = Web::start(
        &server.url(),
        &[
            "--queue",
            "q",
            "--max-connections",
            &bound.to_string(),
            "--header-timeout-ms",
            "400",
        ],
    );
    // Its connection to the server is open, and no HTTP connection.
    assert_eq!(web.api().0, 200);
    let pid = web.pid();
    let before = open_fds(pid);
    // Ten times the bound: the kernel queues those not accepted.
    let mut idle: Vec<TcpStream> = (0..10 * bound).map(|_| connect(&web)).collect();
    let mut most = 0;
    for _ in 0..20 {
        most = most.max(open_fds(pid));
        sleep(Duration::from_millis(25));
    }
    assert!(
        most <= before + bound,
        "{most} descriptors open, {before} before {} idle connections",
        idle.len()
    );
    // Still answering: idle connections time out and free their places.
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let after = open_fds(pid);
    assert!(after <= before + bound, "{after} open, {before} before");
    // And each idle connection was accepted in its turn and closed.
    for s in &mut idle {
        assert_eq!(until_closed(s).as_deref(), Ok(""));
    }
}

/// A connection to echomq-web's HTTP port that asks for `/page.js` 300 times
/// at once and reads none of it, with a receive buffer as small as the
/// kernel allows: the server's writes stall after a few responses.
fn slow_reader(web: &Web) -> TcpStream {
    let addr: std::net::SocketAddr = web
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.set_recv_buffer_size(1024).expect("SO_RCVBUF");
    socket.connect(&addr.into()).expect("connect");
    let mut s: TcpStream = socket.into();
    s.set_write_timeout(Some(Duration::from_secs(5)))
        .expect("write timeout");
    let pipeline = "GET /page.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(300);
    // A server that closes it early (as it may) is no failure here.
    let _ = s.write_all(pipeline.as_bytes());
    s
}

/// GET /api/queues on a new connection: how long the answer took.
fn timed_api(web: &Web) -> Duration {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let started = std::time::Instant::now();
    let mut resp = agent
        .get(format!("{}/api/queues", web.base))
        .call()
        .unwrap_or_else(|e| panic!("GET /api/queues with slow readers connected: {e}"));
    let body = resp.body_mut().read_to_string().expect("body");
    let took = started.elapsed();
    assert_eq!(resp.status().as_u16(), 200, "{body}");
    took
}

#[test]
fn slow_readers_on_every_connection_slot_leave_room_for_a_fresh_client() {
    let server = Server::start();
    // The default bound: 256 connections.
    let web = Web::start(&server.url(), &["--queue", "q"]);
    assert_eq!(web.api().0, 200);
    let slow: Vec<TcpStream> = (0..256).map(|_| slow_reader(&web)).collect();
    // Long enough for every one to be accepted and its writes to stall.
    sleep(Duration::from_secs(2));
    for i in 0..3 {
        let took = timed_api(&web);
        eprintln!(
            "fresh GET /api/queues {i} with {} slow readers connected: {took:?}",
            slow.len()
        );
        // Blocked behind the slow readers, it would wait for a slot to be
        // freed by the 10-s write timeout (8 s after the sleep above); the
        // bound leaves the rest to a loaded machine's scheduling.
        assert!(
            took < Duration::from_secs(5),
            "a fresh client waited {took:?} behind {} slow readers",
            slow.len()
        );
    }
    drop(slow);
}

#[test]
fn a_reader_that_stops_reading_is_closed_after_the_write_timeout() {
    let server = Server::start();
    let web = Web::start(
        &server.url(),
        &["--queue", "q", "--write-timeout-ms", "300"],
    );
    let (status, one) = web.get("/page.js");
    assert_eq!(status, 200);
    let mut s = slow_reader(&web);
    sleep(Duration::from_secs(2));
    // Closed after a few of the 300 responses: what was sent before the
    // writes stalled, then the end.
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let mut got = Vec::new();
    let read = s.read_to_end(&mut got);
    assert!(
        read.is_ok()
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "not closed: {read:?} after {} bytes",
        got.len()
    );
    assert!(
        got.len() < 300 * one.len(),
        "all {} bytes of 300 responses written to a reader that stopped reading",
        got.len()
    );
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let server = Server::start();
    let web = Web::start(
        &server.url(),
        &[
            "--queue",
            "q",
            "--idle-timeout-ms",
            "300",
            "--header-timeout-ms",
            "60000",
        ],
    );
    let mut s = connect(&web);
    s.write_all(b"GET /page.css HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("request");
    let started = std::time::Instant::now();
    let got = until_closed(&mut s).expect("an idle connection");
    assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "idle for {took:?} with a 300 ms idle timeout"
    );
}
