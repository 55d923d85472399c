//! echomq-web: a live view of echomq queues for the people who run them.
//!
//! ```text
//! echomq-web --url redis://127.0.0.1:6379/ --listen 127.0.0.1:8080 \
//!     --queue orders [--queue NAME ...] [--window-ms 60000] [--buckets 60]
//! ```
//!
//! `GET /` is the page, `GET /api/queues` the JSON it polls, `GET /metrics`
//! the same snapshot for Prometheus.

mod metrics;
mod render;
mod snapshot;

use std::io::Write;
use std::net::SocketAddr;
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

const USAGE: &str = "usage: echomq-web [--url redis://HOST:PORT/] [--listen ADDR] \
--queue NAME [--queue NAME ...] [--window-ms MS] [--buckets N]

  --url URL        the Valkey server (default redis://127.0.0.1:6379/)
  --listen ADDR    where to serve HTTP (default 127.0.0.1:8080; port 0 picks a free one)
  --queue NAME     a queue with keys {NAME}:schedule, {NAME}:pending, {NAME}:dead;
                   repeatable. Queues in the server's echomq.auto-promote config are
                   shown too, so with that config no --queue is needed.
  --window-ms MS   the spread covers [now, now + MS) (default 60000)
  --buckets N      in N buckets, 1..=10000 (default 60)";

/// The page waits this long for the server before it shows an error: a scrape
/// is three round trips, so anything longer means the server is gone or stuck.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, PartialEq)]
struct Config {
    url: String,
    listen: String,
    queues: Vec<String>,
    window_ms: i64,
    buckets: u32,
}

fn parse_args(args: &[String]) -> Result<Config, String> {
    let mut cfg = Config {
        url: "redis://127.0.0.1:6379/".into(),
        listen: "127.0.0.1:8080".into(),
        queues: Vec::new(),
        window_ms: 60_000,
        buckets: 60,
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
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(cfg)
}

struct App {
    cfg: Config,
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
        Err(format!("{}: {result}", self.cfg.url))
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

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/queues", get(api_queues))
        .route("/metrics", get(metrics))
        .with_state(app)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return;
    }
    let cfg = match parse_args(&args) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("echomq-web: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let client = match redis::Client::open(cfg.url.as_str()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("echomq-web: --url {}: {e}", cfg.url);
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
    let _ = writeln!(
        std::io::stdout(),
        "echomq-web: listening on http://{}/ for {} (queues: {}{})",
        addr.map_or(cfg.listen.clone(), |a| a.to_string()),
        cfg.url,
        names.join(", "),
        if cfg.queues.is_empty() {
            "those of echomq.auto-promote"
        } else {
            " and those of echomq.auto-promote"
        }
    );
    let app = Arc::new(App {
        cfg,
        client,
        con: Mutex::new(None),
    });
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if let Err(e) = axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await
    {
        eprintln!("echomq-web: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn command_line() {
        let cfg = parse_args(&args(&[
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
        ]))
        .unwrap();
        assert_eq!(cfg.url, "redis://h:1/");
        assert_eq!(cfg.listen, "0.0.0.0:9");
        assert_eq!(cfg.queues, ["a", "b"]);
        assert_eq!((cfg.window_ms, cfg.buckets), (5000, 10));
        let d = parse_args(&[]).unwrap();
        assert_eq!((d.window_ms, d.buckets, d.queues.len()), (60_000, 60, 0));
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
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
