//! echomq-web: a live view of echomq queues for the people who run them.
//!
//! ```text
//! ECHOMQ_WEB_URL=redis://user:password@127.0.0.1:6379/ echomq-web \
//!     --listen 127.0.0.1:8080 --queue orders [--queue NAME ...] \
//!     [--sharded mail=6 ...] [--window-ms 60000] [--buckets 60] [--ca-file ca.pem]
//! ```
//!
//! `GET /` is the page (with `/page.js` and `/page.css`), `GET /api/queues`
//! the JSON it polls, `GET /metrics` the same snapshot for Prometheus.

mod cluster;
mod metrics;
mod redact;
mod render;
mod serve;
mod shards;
mod snapshot;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use serde_json::json;
use tokio::sync::Mutex;

use redact::Redactor;

const USAGE: &str = "usage: echomq-web [--url redis://HOST:PORT/] [--listen ADDR] \
--queue NAME [--queue NAME ...] [--sharded NAME=N ...] [--window-ms MS] [--buckets N] [--ca-file PATH] \
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
  --sharded NAME=N a sharded queue of N shards, 1..=1024, as the client
                   libraries lay it out (tags NAME, NAME#1, ..): shown as one
                   queue, its shards' figures summed, each shard on request;
                   repeatable. Its shards' tags found in echomq.auto-promote
                   are shown within it, not as queues of their own.
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
/// On a cluster, each step with one node (a connection and a round trip) is
/// bounded by this, so one stuck node costs a scrape at most this per step.
const NODE_TIMEOUT: Duration = Duration::from_millis(1500);
/// On a cluster, the slot map is read again when it is this old (and at the
/// next scrape after a node did not answer, at once after a MOVED or ASK).
const SLOT_MAP_MAX_AGE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq)]
struct Config {
    url: String,
    ca_file: Option<PathBuf>,
    listen: String,
    queues: Vec<String>,
    /// `--sharded NAME=N`: each sharded queue and its shard count.
    sharded: Vec<(String, u32)>,
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
        sharded: Vec::new(),
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
            "--sharded" => {
                let (name, n) = sharded(&value()?)?;
                match cfg.sharded.iter().find(|(q, _)| *q == name) {
                    Some((_, m)) if *m != n => {
                        return Err(format!(
                            "--sharded: '{name}' given with {m} and with {n} shards"
                        ))
                    }
                    Some(_) => {}
                    None => cfg.sharded.push((name, n)),
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
    // Shown once: as one queue or as the shards' sum, not both.
    if let Some((name, _)) = cfg.sharded.iter().find(|(n, _)| cfg.queues.contains(n)) {
        return Err(format!(
            "'{name}' is given both as --queue and as --sharded: name it once"
        ));
    }
    Ok(cfg)
}

/// A `--sharded` value, `NAME=N`: the name is everything before the last
/// `=` (a queue name may hold one), N in 1..=max_shards as the libraries
/// check it.
fn sharded(v: &str) -> Result<(String, u32), String> {
    let Some((name, n)) = v.rsplit_once('=') else {
        return Err(format!(
            "--sharded: '{v}' is not NAME=N (e.g. --sharded mail=6)"
        ));
    };
    if name.is_empty() {
        return Err(format!("--sharded: '{v}' has an empty name"));
    }
    let max = cluster::MAX_SHARDS;
    let n = n
        .parse()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or(format!(
            "--sharded: the shard count '{n}' of '{name}' is not in 1..={max}"
        ))?;
    Ok((name.to_string(), n))
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
    /// Whether the server at `--url` runs in cluster mode: None until a
    /// connection asks `INFO cluster`, and again after a failed scrape.
    mode: Mutex<Option<Mode>>,
    /// On a cluster: the slot map and a connection to each primary.
    view: Mutex<View>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Single,
    Cluster,
}

#[derive(Default)]
struct View {
    /// The map and when it was read.
    map: Option<(Arc<cluster::SlotMap>, Instant)>,
    /// Read the map again at the next scrape.
    stale: bool,
    /// By `host:port`.
    cons: HashMap<String, MultiplexedConnection>,
}

fn connection_config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
}

/// A failure to reach the server, as opposed to an error reply.
fn is_unreachable(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}

/// `f` bounded by [`NODE_TIMEOUT`], its error as text.
async fn bounded<T>(
    f: impl std::future::Future<Output = Result<T, redis::RedisError>>,
) -> Result<T, String> {
    match tokio::time::timeout(NODE_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no reply within {NODE_TIMEOUT:?}")),
    }
}

impl App {
    async fn connection(&self) -> Result<MultiplexedConnection, redis::RedisError> {
        let mut slot = self.con.lock().await;
        if let Some(con) = slot.as_ref() {
            return Ok(con.clone());
        }
        let con = self
            .client
            .get_multiplexed_async_connection_with_config(&connection_config())
            .await?;
        *slot = Some(con.clone());
        Ok(con)
    }

    async fn forget_connection(&self) {
        *self.con.lock().await = None;
    }

    async fn snapshot(self: &Arc<Self>, with_spread: bool) -> Result<snapshot::Snapshot, String> {
        let known = *self.mode.lock().await;
        if known == Some(Mode::Cluster) {
            return self.cluster_snapshot(with_spread).await;
        }
        let scrape = async {
            let mut con = self.connection().await?;
            if known.is_none() {
                // Once per connection: a server that refuses INFO cluster
                // (an error reply) is taken as a single server.
                let mode = match redis::cmd("INFO")
                    .arg("cluster")
                    .query_async::<Value>(&mut con)
                    .await
                {
                    Ok(v) if cluster::cluster_enabled(&cluster::text(&v).unwrap_or_default()) => {
                        Mode::Cluster
                    }
                    Ok(_) => Mode::Single,
                    Err(e) if is_unreachable(&e) => return Err(e),
                    Err(_) => Mode::Single,
                };
                *self.mode.lock().await = Some(mode);
                if mode == Mode::Cluster {
                    return Ok(None);
                }
            }
            snapshot::collect(
                &mut con,
                &self.cfg.queues,
                &self.cfg.sharded,
                self.cfg.window_ms,
                self.cfg.buckets,
                with_spread,
            )
            .await
            .map(Some)
        };
        let result = match tokio::time::timeout(SCRAPE_TIMEOUT, scrape).await {
            Ok(Ok(Some(s))) => return Ok(s),
            Ok(Ok(None)) => return self.cluster_snapshot(with_spread).await,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no reply within {SCRAPE_TIMEOUT:?}"),
        };
        self.forget_connection().await;
        *self.mode.lock().await = None;
        // Scrubbed whole: a client error may quote the URL or the password.
        Err(self
            .redactor
            .scrub(&format!("{}: {result}", self.redactor.shown())))
    }
}

/// On a cluster: the slot map from the primaries, each queue read on the
/// primary serving its slot, ECHO.QUEUES and INFO from every primary.
impl App {
    /// The errors of a scrape, scrubbed of the URL's password.
    fn scrubbed(&self, e: &str) -> String {
        self.redactor
            .scrub(&format!("{}: {e}", self.redactor.shown()))
    }

    /// A connection to the primary at `addr` (`host:port`), with the URL's
    /// user, password and TLS.
    async fn node_connection(&self, addr: &str) -> Result<MultiplexedConnection, String> {
        if let Some(con) = self.view.lock().await.cons.get(addr) {
            return Ok(con.clone());
        }
        let cfg = Config {
            url: cluster::url_for(&self.cfg.url, addr),
            ..self.cfg.clone()
        };
        let client = client(&cfg)?;
        let con =
            bounded(client.get_multiplexed_async_connection_with_config(&connection_config()))
                .await?;
        self.view
            .lock()
            .await
            .cons
            .insert(addr.to_string(), con.clone());
        Ok(con)
    }

    /// After a node did not answer: a new connection, and a new slot map,
    /// next time.
    async fn forget_node(&self, addr: &str) {
        let mut view = self.view.lock().await;
        view.cons.remove(addr);
        view.stale = true;
    }

    /// The slot map, read again (CLUSTER SLOTS of the `--url` server, or of
    /// a primary of the last map when that one does not answer) when there
    /// is none, it is stale or old, or `force`; true when read now.
    async fn slot_map(&self, force: bool) -> Result<(Arc<cluster::SlotMap>, bool), String> {
        let known: Vec<String> = {
            let view = self.view.lock().await;
            match &view.map {
                Some((map, at)) if !force && !view.stale && at.elapsed() < SLOT_MAP_MAX_AGE => {
                    return Ok((map.clone(), false))
                }
                Some((map, _)) => map.primaries.clone(),
                None => Vec::new(),
            }
        };
        let seed_host = cluster::host_of(&self.cfg.url);
        let mut errors: Vec<String> = Vec::new();
        // The --url server first, then the primaries it last named.
        let mut candidates: Vec<Option<String>> = vec![None];
        candidates.extend(known.into_iter().map(Some));
        for addr in candidates {
            let reply = match &addr {
                None => {
                    bounded(async {
                        let mut con = self.connection().await?;
                        redis::cmd("CLUSTER")
                            .arg("SLOTS")
                            .query_async::<Value>(&mut con)
                            .await
                    })
                    .await
                }
                Some(a) => match self.node_connection(a).await {
                    Ok(mut con) => {
                        bounded(
                            redis::cmd("CLUSTER")
                                .arg("SLOTS")
                                .query_async::<Value>(&mut con),
                        )
                        .await
                    }
                    Err(e) => Err(e),
                },
            };
            let shown = addr.clone().unwrap_or_else(|| "--url".into());
            match reply.and_then(|v| cluster::SlotMap::from_cluster_slots(&v, &seed_host)) {
                Ok(map) => {
                    let map = Arc::new(map);
                    let mut view = self.view.lock().await;
                    view.map = Some((map.clone(), Instant::now()));
                    view.stale = false;
                    // Connections to nodes no longer primaries are closed.
                    view.cons.retain(|a, _| map.primaries.contains(a));
                    return Ok((map, true));
                }
                Err(e) => {
                    match &addr {
                        None => self.forget_connection().await,
                        Some(a) => self.forget_node(a).await,
                    }
                    errors.push(format!("CLUSTER SLOTS of {shown}: {e}"));
                }
            }
        }
        Err(errors.join("; "))
    }

    async fn cluster_snapshot(
        self: &Arc<Self>,
        with_spread: bool,
    ) -> Result<snapshot::Snapshot, String> {
        for attempt in 0..2 {
            let (map, refreshed) = match self.slot_map(attempt > 0).await {
                Ok(m) => m,
                Err(e) => {
                    *self.mode.lock().await = None;
                    return Err(self.scrubbed(&e));
                }
            };
            let mut s = match self.scrape_cluster(&map, with_spread).await {
                Ok(s) => s,
                Err(e) => {
                    // No primary answered: ask the --url server again
                    // whether it is a cluster next time.
                    *self.mode.lock().await = None;
                    self.view.lock().await.stale = true;
                    return Err(self.scrubbed(&e));
                }
            };
            s.round_trips += u32::from(refreshed);
            let moved = s.queues.iter().any(|q| {
                q.counts.as_ref().is_err_and(|e| cluster::is_redirect(e))
                    || q.shards
                        .iter()
                        .any(|sh| sh.counts.as_ref().is_err_and(|e| cluster::is_redirect(e)))
            });
            if moved && attempt == 0 {
                continue;
            }
            for q in &mut s.queues {
                if let Err(e) = &mut q.counts {
                    *e = self.redactor.scrub(e);
                }
                for sh in &mut q.shards {
                    if let Err(e) = &mut sh.counts {
                        *e = self.redactor.scrub(e);
                    }
                }
            }
            for n in &mut s.nodes {
                if let Some(e) = &mut n.error {
                    *e = self.redactor.scrub(e);
                }
            }
            return Ok(s);
        }
        unreachable!("the second attempt returns")
    }

    /// One scrape of every primary of `map`, in parallel: TIME, ECHO.QUEUES
    /// and INFO memory, then INFO echomq and the queues each one serves.
    /// Err only when no primary answered.
    async fn scrape_cluster(
        self: &Arc<Self>,
        map: &cluster::SlotMap,
        with_spread: bool,
    ) -> Result<snapshot::Snapshot, String> {
        let primaries = &map.primaries;
        let firsts: Vec<_> = primaries
            .iter()
            .map(|addr| {
                let (app, addr) = (self.clone(), addr.clone());
                tokio::spawn(async move {
                    let mut con = app.node_connection(&addr).await?;
                    bounded(snapshot::first(&mut con)).await
                })
            })
            .collect();
        let mut first: Vec<Result<snapshot::First, String>> = Vec::new();
        for task in firsts {
            first.push(task.await.unwrap_or_else(|e| Err(e.to_string())));
        }
        let Some(now_ms) = first.iter().flatten().map(|f| f.now_ms).next() else {
            let why: Vec<String> = primaries
                .iter()
                .zip(&first)
                .filter_map(|(a, f)| f.as_ref().err().map(|e| format!("{a}: {e}")))
                .collect();
            for a in primaries {
                self.forget_node(a).await;
            }
            return Err(format!("no primary answered ({})", why.join("; ")));
        };
        let from_servers: Vec<String> = first
            .iter()
            .flatten()
            .flat_map(|f| f.queues.iter().cloned())
            .collect();
        let shown = shards::layout(&self.cfg.queues, &self.cfg.sharded, &from_servers);
        // Each shard is a queue of its own slot: read on its owner, in the
        // same per-node pipelines as the single queues.
        let names = shards::tags(&shown);
        let owners = map.assign(&names);
        let window = snapshot::window_at(now_ms, self.cfg.window_ms, self.cfg.buckets);
        let reads: Vec<_> = primaries
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let mine: Vec<String> = names
                    .iter()
                    .zip(&owners)
                    .filter(|(_, o)| **o == Ok(i))
                    .map(|(n, _)| n.clone())
                    .collect();
                let answered = first[i].is_ok();
                let (app, addr) = (self.clone(), addr.clone());
                tokio::spawn(async move {
                    if !answered {
                        return None;
                    }
                    let read = async {
                        let mut con = app.node_connection(&addr).await?;
                        bounded(snapshot::read_queues(
                            &mut con,
                            mine,
                            now_ms,
                            &window,
                            with_spread,
                        ))
                        .await
                    };
                    Some(read.await)
                })
            })
            .collect();
        let mut read: Vec<Result<snapshot::Read, String>> = Vec::new();
        for (i, task) in reads.into_iter().enumerate() {
            let r = match task.await {
                Ok(Some(r)) => r,
                Ok(None) => Err(first[i].clone().err().unwrap_or_default()),
                Err(e) => Err(e.to_string()),
            };
            read.push(r);
        }
        let mut nodes = Vec::new();
        let mut round_trips = 0;
        for (i, addr) in primaries.iter().enumerate() {
            let error = read[i].as_ref().err().cloned();
            if error.is_some() {
                self.forget_node(addr).await;
            } else {
                round_trips += 1;
            }
            if let Ok(r) = &read[i] {
                round_trips += r.round_trips;
            }
            nodes.push(snapshot::NodeStatus {
                addr: addr.clone(),
                queues: owners.iter().filter(|o| **o == Ok(i)).count(),
                error,
            });
        }
        if nodes.iter().all(|n| n.error.is_some()) {
            let why: Vec<String> = nodes
                .iter()
                .map(|n| format!("{}: {}", n.addr, n.error.as_deref().unwrap_or("")))
                .collect();
            return Err(format!("no primary answered ({})", why.join("; ")));
        }
        // Each node's queues come back in the order asked.
        let mut per_node: Vec<std::vec::IntoIter<snapshot::QueueStats>> = read
            .iter_mut()
            .map(|r| match r {
                Ok(r) => std::mem::take(&mut r.queues).into_iter(),
                Err(_) => Vec::new().into_iter(),
            })
            .collect();
        let reads = names
            .into_iter()
            .zip(&owners)
            .map(|(name, owner)| match owner {
                Ok(i) => match &read[*i] {
                    Ok(_) => per_node[*i].next().unwrap_or_else(|| {
                        snapshot::QueueStats::single(name, Err("missing reply".into()))
                    }),
                    Err(e) => snapshot::QueueStats::single(
                        name,
                        Err(format!("primary {}: {e}", primaries[*i])),
                    ),
                },
                Err(slot) => snapshot::QueueStats::single(
                    name,
                    Err(format!("no primary serves slot {slot}")),
                ),
            })
            .collect();
        let read_on = owners
            .iter()
            .map(|o| o.as_ref().ok().map(|i| primaries[*i].clone()))
            .collect();
        let queues = shards::group(&shown, reads, read_on);
        let infos: Vec<Vec<(String, snapshot::Number)>> =
            read.iter().flatten().map(|r| r.info.clone()).collect();
        let policies: Vec<String> = first
            .iter()
            .zip(&read)
            .filter(|(_, r)| r.is_ok())
            .filter_map(|(f, _)| f.as_ref().ok().map(|f| f.maxmemory_policy.clone()))
            .collect();
        Ok(snapshot::Snapshot {
            now_ms,
            window,
            queues,
            info: cluster::merge_info(&infos),
            maxmemory_policy: cluster::merge_policy(&policies),
            round_trips,
            nodes,
        })
    }
}

/// Whether a query string asks for each shard's figures: `shards=1`.
fn wants_shards(query: Option<&str>) -> bool {
    query
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair == "shards=1" || pair == "shards=true")
}

async fn api_queues(State(app): State<Arc<App>>, uri: axum::http::Uri) -> Response {
    let no_store = [(header::CACHE_CONTROL, "no-store")];
    let per_shard = wants_shards(uri.query());
    match app.snapshot(true).await {
        Ok(s) => (
            StatusCode::OK,
            no_store,
            Json(render::queues_json(&s, per_shard)),
        )
            .into_response(),
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
        .chain(
            cfg.sharded
                .iter()
                .map(|(q, n)| format!("{} ({n} shards)", q.escape_default())),
        )
        .collect();
    let line = format!(
        "echomq-web: listening on http://{}/ for {} (queues: {}{})",
        addr.map_or(cfg.listen.clone(), |a| a.to_string()),
        redactor.shown(),
        names.join(", "),
        if names.is_empty() {
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
        mode: Mutex::new(None),
        view: Mutex::new(View::default()),
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

    #[test]
    fn sharded_queues_are_named_with_their_shard_count() {
        let cfg = parse_args(
            &args(&[
                "--sharded",
                "mail=6",
                "--queue",
                "a",
                "--sharded",
                "k=v=1",
                "--sharded",
                "mail=6",
                "--sharded",
                "big=1024",
            ]),
            no_env,
        )
        .unwrap();
        // The last `=` splits: a queue name may hold one.
        assert_eq!(
            cfg.sharded,
            [
                ("mail".to_string(), 6),
                ("k=v".to_string(), 1),
                ("big".to_string(), 1024)
            ]
        );
        assert_eq!(cfg.queues, ["a"]);
        for (bad, says) in [
            (&["--sharded"][..], "--sharded needs a value"),
            (&["--sharded", "mail"], "is not NAME=N"),
            (&["--sharded", "=3"], "empty name"),
            (&["--sharded", "mail=0"], "not in 1..=1024"),
            (&["--sharded", "mail=1025"], "not in 1..=1024"),
            (&["--sharded", "mail=-1"], "not in 1..=1024"),
            (&["--sharded", "mail=six"], "not in 1..=1024"),
            (&["--sharded", "mail="], "not in 1..=1024"),
            (
                &["--sharded", "mail=2", "--sharded", "mail=3"],
                "with 2 and with 3",
            ),
            (
                &["--queue", "mail", "--sharded", "mail=2"],
                "both as --queue and as --sharded",
            ),
        ] {
            let e = parse_args(&args(bad), no_env).expect_err(says);
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn only_shards_1_asks_for_the_shards() {
        assert!(wants_shards(Some("shards=1")));
        assert!(wants_shards(Some("x=2&shards=true")));
        assert!(!wants_shards(Some("shards=0")));
        assert!(!wants_shards(Some("noshards=1")));
        assert!(!wants_shards(None));
    }
}
