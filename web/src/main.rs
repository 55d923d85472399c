//! echomq-web: a live view of echomq queues for the people who run them.
//!
//! ```text
//! ECHOMQ_WEB_URL=redis://user:password@127.0.0.1:6379/ echomq-web \
//!     --listen 127.0.0.1:8080 --queue orders [--queue NAME ...] \
//!     [--window-ms 60000] [--buckets 60] [--ca-file ca.pem]
//! ```
//!
//! `GET /` is the page (with `/page.js` and `/page.css`), `GET /api/queues`
//! the JSON it polls, `GET /metrics` the same snapshot for Prometheus.

mod metrics;
mod redact;
mod render;
mod serve;
mod snapshot;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use serde_json::json;
use tokio::sync::Mutex;

use redact::Redactor;

const USAGE: &str = "usage: echomq-web [--url redis://HOST:PORT/] [--listen ADDR] \
--queue NAME [--queue NAME ...] [--window-ms MS] [--buckets N] [--ca-file PATH] \
[--header-timeout-ms MS] [--idle-timeout-ms MS] [--write-timeout-ms MS] [--max-connections N]

  --url URL        the Valkey server (default redis://127.0.0.1:6379/), or the
                   environment variable ECHOMQ_WEB_URL. A password in --url is
                   visible to other local users (ps, /proc): put a URL with a
                   password in ECHOMQ_WEB_URL instead. rediss://HOST:PORT/ for TLS.
                   The URL is shown with its password as ***.
  --ca-file PATH   with rediss://: the PEM file of the CA(s) that signed the
                   server's certificate, instead of the system's roots; or the
                   environment variable ECHOMQ_WEB_CA_FILE
  --listen ADDR    where to serve HTTP (default 127.0.0.1:8080; port 0 picks a free one)
  --queue NAME     a queue with keys {NAME}:schedule, {NAME}:pending, {NAME}:dead;
                   repeatable. Queues in the server's echomq.auto-promote config are
                   shown too, so with that config no --queue is needed.
  --window-ms MS   the spread covers [now, now + MS) (default 60000)
  --buckets N      in N buckets, 1..=10000 (default 60)
  --header-timeout-ms MS
                   a connection that has not sent a request's headers within MS
                   (from its start, or from the last response) is closed
                   (default 10000)
  --idle-timeout-ms MS
                   a connection whose client sends nothing for MS while none
                   of its requests is running is closed (default 5000)
  --write-timeout-ms MS
                   a connection whose client does not take what a response
                   queued within MS of the socket refusing more is closed
                   (default 10000)
  --max-connections N
                   at most N HTTP connections open at once; more wait to be
                   accepted, and while one waits, the open connection that has
                   waited longest (at least 250 ms) on its own client, idle or
                   not reading its responses, is closed to make room
                   (default 256)";

/// The page waits this long for the server before it shows an error: a scrape
/// is three round trips, so anything longer means the server is gone or stuck.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, PartialEq)]
struct Config {
    url: String,
    ca_file: Option<PathBuf>,
    listen: String,
    queues: Vec<String>,
    window_ms: i64,
    buckets: u32,
    limits: serve::Limits,
}

/// The options, from `args` and then, for those not given there, from the
/// environment (`env` reads one variable).
fn parse_args(args: &[String], env: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
    let mut cfg = Config {
        url: env("ECHOMQ_WEB_URL").unwrap_or_else(|| "redis://127.0.0.1:6379/".into()),
        ca_file: env("ECHOMQ_WEB_CA_FILE").map(PathBuf::from),
        listen: "127.0.0.1:8080".into(),
        queues: Vec::new(),
        window_ms: 60_000,
        buckets: 60,
        limits: serve::Limits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_connections: 256,
        },
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--url" => cfg.url = value()?,
            "--ca-file" => cfg.ca_file = Some(PathBuf::from(value()?)),
            "--listen" => cfg.listen = value()?,
            "--queue" => {
                let name = value()?;
                if name.is_empty() {
                    return Err("--queue: empty name".into());
                }
                if !cfg.queues.contains(&name) {
                    cfg.queues.push(name);
                }
            }
            "--window-ms" => {
                let v = value()?;
                // ECHO.SPREAD takes any end > start; 10^13 ms is the module's own bound.
                cfg.window_ms = v
                    .parse()
                    .ok()
                    .filter(|ms| (1..=10_000_000_000_000).contains(ms))
                    .ok_or(format!("--window-ms: '{v}' is not in 1..=10000000000000"))?;
            }
            "--buckets" => {
                let v = value()?;
                cfg.buckets = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=10_000).contains(n))
                    .ok_or(format!("--buckets: '{v}' is not in 1..=10000"))?;
            }
            "--header-timeout-ms" => cfg.limits.header_timeout = millis(flag, &value()?)?,
            "--idle-timeout-ms" => cfg.limits.idle_timeout = millis(flag, &value()?)?,
            "--write-timeout-ms" => cfg.limits.write_timeout = millis(flag, &value()?)?,
            "--max-connections" => {
                let v = value()?;
                cfg.limits.max_connections =
                    v.parse()
                        .ok()
                        .filter(|n| (1..=100_000).contains(n))
                        .ok_or(format!("--max-connections: '{v}' is not in 1..=100000"))?;
            }
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(cfg)
}

/// A timeout flag's value: milliseconds in 1..=3600000.
fn millis(flag: &str, v: &str) -> Result<Duration, String> {
    v.parse()
        .ok()
        .filter(|ms| (1..=3_600_000).contains(ms))
        .map(Duration::from_millis)
        .ok_or(format!("{flag}: '{v}' is not in 1..=3600000"))
}

/// The client for `cfg.url`, with the CA file's certificates as the only
/// roots when one is given.
fn client(cfg: &Config) -> Result<redis::Client, String> {
    let Some(path) = &cfg.ca_file else {
        return redis::Client::open(cfg.url.as_str()).map_err(|e| e.to_string());
    };
    let pem = std::fs::read(path).map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
    use rustls::pki_types::pem::PemObject;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "--ca-file {}: no PEM certificate in the file",
            path.display()
        ));
    }
    if !cfg.url.starts_with("rediss://") {
        return Err("--ca-file needs a rediss:// URL".into());
    }
    let tls = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    };
    redis::Client::build_with_tls(cfg.url.as_str(), tls).map_err(|e| e.to_string())
}

struct App {
    cfg: Config,
    /// Masks the URL's password in every text echomq-web shows.
    redactor: Redactor,
    client: redis::Client,
    /// One multiplexed connection shared by all requests; dropped after a
    /// failed scrape so the next one reconnects (the server may be back).
    con: Mutex<Option<MultiplexedConnection>>,
}

impl App {
    async fn connection(&self) -> Result<MultiplexedConnection, redis::RedisError> {
        let mut slot = self.con.lock().await;
        if let Some(con) = slot.as_ref() {
            return Ok(con.clone());
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let con = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        *slot = Some(con.clone());
        Ok(con)
    }

    async fn forget_connection(&self) {
        *self.con.lock().await = None;
    }

    async fn snapshot(&self, with_spread: bool) -> Result<snapshot::Snapshot, String> {
        let scrape = async {
            let mut con = self.connection().await?;
            snapshot::collect(
                &mut con,
                &self.cfg.queues,
                self.cfg.window_ms,
                self.cfg.buckets,
                with_spread,
            )
            .await
        };
        let result = match tokio::time::timeout(SCRAPE_TIMEOUT, scrape).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no reply within {SCRAPE_TIMEOUT:?}"),
        };
        self.forget_connection().await;
        // Scrubbed whole: a client error may quote the URL or the password.
        Err(self
            .redactor
            .scrub(&format!("{}: {result}", self.redactor.shown())))
    }
}

async fn api_queues(State(app): State<Arc<App>>) -> Response {
    let no_store = [(header::CACHE_CONTROL, "no-store")];
    match app.snapshot(true).await {
        Ok(s) => (StatusCode::OK, no_store, Json(render::queues_json(&s))).into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            no_store,
            Json(json!({ "error": e })),
        )
            .into_response(),
    }
}

/// Always 200: a failed scrape is `echomq_up 0`, which is what an alert on
/// the server's absence looks for (a non-200 would only say echomq-web failed).
async fn metrics(State(app): State<Arc<App>>) -> Response {
    // Without the spreads: they are not exported, and they are nearly all of
    // a scrape's server time.
    let snapshot = app.snapshot(false).await.ok();
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, metrics::CONTENT_TYPE),
            (header::CACHE_CONTROL, "no-store"),
        ],
        metrics::exposition(snapshot.as_ref()),
    )
        .into_response()
}

async fn page() -> Html<&'static str> {
    Html(include_str!("page.html"))
}

async fn page_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("page.js"),
    )
        .into_response()
}

async fn page_css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("page.css"),
    )
        .into_response()
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/page.js", get(page_js))
        .route("/page.css", get(page_css))
        .route("/api/queues", get(api_queues))
        .route("/metrics", get(metrics))
        .with_state(app)
        // On every response, the fallback's 404 included.
        .layer(axum::middleware::map_response(serve::hygiene))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return;
    }
    let cfg = match parse_args(&args, |name| std::env::var(name).ok()) {
        Ok(cfg) => cfg,
        Err(e) => {
            // An argument may be the URL itself (e.g. `--url` given twice).
            let e = args.iter().fold(e, |e, a| Redactor::new(a).scrub(&e));
            eprintln!("echomq-web: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let redactor = Redactor::new(&cfg.url);
    // redis enables rustls without choosing its cryptography: ring, the one
    // provider compiled in (see Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = match client(&cfg) {
        Ok(c) => c,
        Err(e) => {
            // The URL may not have parsed: then what is user and what is
            // password is a guess, and the whole userinfo is masked.
            eprintln!(
                "echomq-web: {}: {}",
                redactor.without_userinfo(),
                redactor.scrub(&e)
            );
            std::process::exit(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(&cfg.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("echomq-web: cannot listen on {}: {e}", cfg.listen);
            std::process::exit(1);
        }
    };
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    // Tests and scripts read the bound address from this line (with port 0),
    // so it stays one line: a queue name's control characters are escaped.
    // Written without println!, which would panic if the reader has gone.
    let names: Vec<String> = cfg
        .queues
        .iter()
        .map(|q| q.escape_default().to_string())
        .collect();
    let line = format!(
        "echomq-web: listening on http://{}/ for {} (queues: {}{})",
        addr.map_or(cfg.listen.clone(), |a| a.to_string()),
        redactor.shown(),
        names.join(", "),
        if cfg.queues.is_empty() {
            "those of echomq.auto-promote"
        } else {
            " and those of echomq.auto-promote"
        }
    );
    let _ = writeln!(std::io::stdout(), "{}", redactor.scrub(&line));
    let limits = cfg.limits;
    let app = Arc::new(App {
        cfg,
        redactor,
        client,
        con: Mutex::new(None),
    });
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    serve::serve(listener, router(app), limits, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn command_line() {
        let cfg = parse_args(
            &args(&[
                "--url",
                "redis://h:1/",
                "--listen",
                "0.0.0.0:9",
                "--queue",
                "a",
                "--queue",
                "b",
                "--queue",
                "a",
                "--window-ms",
                "5000",
                "--buckets",
                "10",
                "--header-timeout-ms",
                "250",
                "--idle-timeout-ms",
                "150",
                "--write-timeout-ms",
                "350",
                "--max-connections",
                "8",
                "--ca-file",
                "/x/ca.pem",
            ]),
            no_env,
        )
        .unwrap();
        assert_eq!(cfg.url, "redis://h:1/");
        assert_eq!(cfg.listen, "0.0.0.0:9");
        assert_eq!(cfg.queues, ["a", "b"]);
        assert_eq!((cfg.window_ms, cfg.buckets), (5000, 10));
        assert_eq!(
            cfg.limits,
            serve::Limits {
                header_timeout: Duration::from_millis(250),
                idle_timeout: Duration::from_millis(150),
                write_timeout: Duration::from_millis(350),
                max_connections: 8
            }
        );
        assert_eq!(cfg.ca_file, Some(PathBuf::from("/x/ca.pem")));
        let d = parse_args(&[], no_env).unwrap();
        assert_eq!((d.window_ms, d.buckets, d.queues.len()), (60_000, 60, 0));
        assert_eq!(d.url, "redis://127.0.0.1:6379/");
        assert_eq!(d.ca_file, None);
        assert_eq!(d.limits.header_timeout, Duration::from_secs(10));
        assert_eq!(d.limits.idle_timeout, Duration::from_secs(5));
        assert_eq!(d.limits.write_timeout, Duration::from_secs(10));
        assert_eq!(d.limits.max_connections, 256);
    }

    #[test]
    fn url_and_ca_file_from_the_environment_unless_given() {
        let env = |name: &str| match name {
            "ECHOMQ_WEB_URL" => Some("redis://u:pw@h:1/".to_string()),
            "ECHOMQ_WEB_CA_FILE" => Some("/e/ca.pem".to_string()),
            _ => None,
        };
        let cfg = parse_args(&[], env).unwrap();
        assert_eq!(cfg.url, "redis://u:pw@h:1/");
        assert_eq!(cfg.ca_file, Some(PathBuf::from("/e/ca.pem")));
        let cfg = parse_args(&args(&["--url", "redis://x/", "--ca-file", "c"]), env).unwrap();
        assert_eq!(cfg.url, "redis://x/");
        assert_eq!(cfg.ca_file, Some(PathBuf::from("c")));
    }

    #[test]
    fn bad_command_lines_are_refused() {
        for bad in [
            &["--queue"][..],
            &["--queue", ""],
            &["--buckets", "0"],
            &["--buckets", "10001"],
            &["--window-ms", "0"],
            &["--window-ms", "-5"],
            &["--window-ms", "x"],
            &["--bogus"],
            &["--header-timeout-ms", "0"],
            &["--idle-timeout-ms", "0"],
            &["--write-timeout-ms", "3600001"],
            &["--write-timeout-ms"],
            &["--max-connections", "0"],
            &["--max-connections", "x"],
            &["--ca-file"],
        ] {
            assert!(parse_args(&args(bad), no_env).is_err(), "{bad:?}");
        }
    }
}
