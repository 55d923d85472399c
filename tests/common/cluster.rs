//! A real Valkey Cluster for the tests: three primaries with one replica
//! each, every node loading the module, on 127.0.0.1; the topology as the
//! nodes see it (slot owners, replicas) and the helpers the cluster tests
//! share. Every process is killed by pid when its handle drops, also when a
//! test panics.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::*;

/// Short, so that an automatic failover happens within a few seconds.
pub const NODE_TIMEOUT_MS: u32 = 2000;
pub const SLOTS: u32 = 16384;

/// The command-line client: `ECHOMQ_CLI`, or `valkey-cli`.
pub fn cli_binary() -> String {
    std::env::var("ECHOMQ_CLI").unwrap_or_else(|_| "valkey-cli".into())
}

/// A port `p` such that `p` and its cluster bus port `p + 10000` are both free
/// now. The candidates lie below the kernel's ephemeral range (32768..), so
/// outgoing connections and the other tests' servers (port 0) do not take
/// them; each process starts at its own offset and walks forward.
pub fn free_cluster_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const BASE: u32 = 15000;
    const SPAN: u32 = 7000; // 15000..22000, bus ports 25000..32000
    let start = std::process::id().wrapping_mul(131) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (BASE + (start + n) % SPAN) as u16;
        let client = TcpListener::bind(("127.0.0.1", port));
        let bus = TcpListener::bind(("127.0.0.1", port + 10000));
        if client.is_ok() && bus.is_ok() {
            return port;
        }
    }
    panic!(
        "no free port pair (p, p + 10000) in {BASE}..{}",
        BASE + SPAN
    );
}

/// One cluster node: a `valkey-server` with the module, killed and reaped on drop.
pub struct Node {
    pub port: u16,
    pub child: Option<Child>,
    pub dir: TempDir,
}

impl Node {
    pub fn start() -> Node {
        Node::start_on(&server_binary())
    }

    /// A node running `server` (a `valkey-server` binary) instead of
    /// `ECHOMQ_SERVER`'s.
    pub fn start_on(server: &str) -> Node {
        let dir = TempDir::new("cluster-node");
        let log = dir.0.join("valkey.log");
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_cluster_port();
            let _ = std::fs::remove_file(dir.0.join("nodes.conf"));
            let mut child = Command::new(server)
                .arg("--port")
                .arg(port.to_string())
                .args(["--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(&dir.0)
                .arg("--logfile")
                .arg(&log)
                .arg("--loadmodule")
                .arg(module_path())
                .args(["--cluster-enabled", "yes"])
                .arg("--cluster-config-file")
                .arg(dir.0.join("nodes.conf"))
                .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
                .args(["--appendonly", "no"])
                .args(["--save", ""])
                .args(["--enable-debug-command", "yes"])
                // A replica's first sync starts at once instead of after 5 s.
                .args(["--repl-diskless-sync-delay", "0"])
                .args(["--daemonize", "no"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {server}: {e}"));
            if wait_ready(&mut child, port, Duration::from_secs(20)) {
                return Node {
                    port,
                    child: Some(child),
                    dir,
                };
            }
            // Most likely another process took the port or its bus port.
            let _ = child.kill();
            let _ = child.wait();
            last_log = std::fs::read_to_string(&log).unwrap_or_default();
        }
        panic!("cluster node did not start; last log:\n{last_log}");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn try_conn(&self) -> redis::RedisResult<Connection> {
        let con =
            redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(con)
    }

    pub fn conn(&self) -> Connection {
        self.try_conn()
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.addr()))
    }

    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL by pid, then reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("valkey.log")).unwrap_or_default()
    }
}

/// Waits until the server answers PING; false when it exits or times out.
pub fn wait_ready(child: &mut Child, port: u16, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let url = format!("redis://127.0.0.1:{port}/");
    while Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return false;
        }
        let pong = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
            .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
        if pong.is_ok() {
            return true;
        }
        sleep(Duration::from_millis(20));
    }
    false
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
pub struct Entry {
    pub id: String,
    pub port: u16,
    pub flags: Vec<String>,
    /// The primary's id, for a replica.
    pub primary: Option<String>,
    pub slots: Vec<(u16, u16)>,
}

impl Entry {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

pub fn parse_cluster_nodes(text: &str) -> Vec<Entry> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields.len() >= 8, "CLUSTER NODES line: {line}");
            // 127.0.0.1:30001@40001[,hostname]
            let addr = fields[1].split('@').next().unwrap_or("");
            let port = addr.rsplit(':').next().unwrap_or("").parse().unwrap_or(0);
            let slots = fields[8..]
                .iter()
                // `[slot->-id]` / `[slot-<-id]`: a migration in progress
                .filter(|s| !s.starts_with('['))
                .map(|s| match s.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => (s.parse().unwrap(), s.parse().unwrap()),
                })
                .collect();
            Entry {
                id: fields[0].to_string(),
                port,
                flags: fields[2].split(',').map(str::to_string).collect(),
                primary: (fields[3] != "-").then(|| fields[3].to_string()),
                slots,
            }
        })
        .collect()
}

pub fn cluster_nodes(con: &mut Connection) -> redis::RedisResult<Vec<Entry>> {
    let text: String = cmd!("CLUSTER", "NODES").query(con)?;
    Ok(parse_cluster_nodes(&text))
}

/// Three primaries, one replica each.
pub struct Cluster {
    pub nodes: Vec<Node>,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_on(&server_binary(), &cli_binary())
    }

    /// The same cluster on the binaries given (`server`, and `cli` for
    /// `--cluster create`) instead of `ECHOMQ_SERVER`'s and `ECHOMQ_CLI`'s:
    /// what a test needing another version uses, without touching the
    /// environment the tests running beside it read.
    pub fn start_on(server: &str, cli: &str) -> Cluster {
        let nodes: Vec<Node> = (0..6).map(|_| Node::start_on(server)).collect();
        let cluster = Cluster { nodes };
        let out = Command::new(cli)
            .args(["--cluster", "create"])
            .args(cluster.nodes.iter().map(Node::addr))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run valkey-cli --cluster create");
        assert!(
            out.status.success(),
            "valkey-cli --cluster create failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_stable(Duration::from_secs(60));
        // Three primaries, each with exactly one linked replica.
        let entries = cluster_nodes(&mut cluster.nodes[0].conn()).unwrap();
        let primaries: Vec<&Entry> = entries.iter().filter(|e| e.has_flag("master")).collect();
        assert_eq!(primaries.len(), 3, "{entries:?}");
        for p in &primaries {
            let replicas = entries
                .iter()
                .filter(|e| e.primary.as_deref() == Some(p.id.as_str()))
                .count();
            assert_eq!(replicas, 1, "replicas of {}: {entries:?}", p.port);
        }
        cluster
    }

    /// Waits until every live node reports `cluster_state:ok`, all of them
    /// agree on which primary serves which slots (all 16384 covered), every
    /// replica's link to its primary is up, and every primary that has a
    /// replica sees it connected.
    pub fn wait_stable(&self, within: Duration) {
        wait_until("cluster did not settle", within, || self.check_stable());
    }

    pub fn check_stable(&self) -> Result<(), String> {
        let mut agreed: Option<Vec<(u16, u16, u16)>> = None;
        for node in self.nodes.iter().filter(|n| n.is_up()) {
            let mut con = node.try_conn().map_err(|e| e.to_string())?;
            let state = cluster_state(&mut con)?;
            if state != "ok" {
                return Err(format!("{}: cluster_state:{state}", node.port));
            }
            let entries = cluster_nodes(&mut con).map_err(|e| e.to_string())?;
            let mut map: Vec<(u16, u16, u16)> = entries
                .iter()
                .filter(|e| e.has_flag("master") && !e.has_flag("fail"))
                .flat_map(|e| e.slots.iter().map(move |&(a, b)| (a, b, e.port)))
                .collect();
            map.sort();
            let covered: u32 = map.iter().map(|&(a, b, _)| u32::from(b - a) + 1).sum();
            if covered != SLOTS {
                return Err(format!("{} sees {covered} slots served", node.port));
            }
            match &agreed {
                None => agreed = Some(map),
                Some(first) if *first != map => {
                    return Err(format!("{} disagrees on slot owners", node.port))
                }
                Some(_) => {}
            }
            let me = entries
                .iter()
                .find(|e| e.has_flag("myself"))
                .ok_or("no myself entry")?;
            if me.has_flag("slave") {
                let link = try_info_field(&mut con, "replication", "master_link_status")
                    .map_err(|e| e.to_string())?;
                if link != "up" {
                    return Err(format!("replica {}: master_link_status:{link}", node.port));
                }
            } else {
                let live_replicas = entries
                    .iter()
                    .filter(|e| e.primary.as_deref() == Some(me.id.as_str()))
                    .filter(|e| self.port_is_up(e.port))
                    .count();
                let connected = try_info_field(&mut con, "replication", "connected_slaves")
                    .map_err(|e| e.to_string())?;
                if connected != live_replicas.to_string() {
                    return Err(format!(
                        "primary {}: connected_slaves:{connected}, expected {live_replicas}",
                        node.port
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn port_is_up(&self, port: u16) -> bool {
        self.nodes.iter().any(|n| n.port == port && n.is_up())
    }

    pub fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// The topology as a live node sees it.
    pub fn entries(&self) -> Vec<Entry> {
        let node = self.nodes.iter().find(|n| n.is_up()).expect("a live node");
        cluster_nodes(&mut node.conn()).expect("CLUSTER NODES")
    }

    pub fn conn(&self, i: usize) -> Connection {
        self.nodes[i].conn()
    }

    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    pub fn id(&self, i: usize) -> String {
        q!(&mut self.conn(i), "CLUSTER", "MYID")
    }

    /// Indexes of the live primaries that serve slots.
    pub fn primaries(&self) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .entries()
            .iter()
            .filter(|e| e.has_flag("master") && !e.has_flag("fail") && !e.slots.is_empty())
            .map(|e| self.index_of_port(e.port))
            .collect();
        out.sort();
        out
    }

    /// The index of the primary serving `slot`.
    pub fn owner(&self, slot: u16) -> usize {
        let entries = self.entries();
        let owner = entries
            .iter()
            .filter(|e| e.has_flag("master") && !e.has_flag("fail"))
            .find(|e| e.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .unwrap_or_else(|| panic!("nobody serves slot {slot}: {entries:?}"));
        self.index_of_port(owner.port)
    }

    /// The index of the replica of primary `i`.
    pub fn replica_of(&self, i: usize) -> usize {
        let id = self.id(i);
        let entries = self.entries();
        let replica = entries
            .iter()
            .find(|e| e.primary.as_deref() == Some(id.as_str()) && self.port_is_up(e.port))
            .unwrap_or_else(|| panic!("no replica of {}: {entries:?}", self.port(i)));
        self.index_of_port(replica.port)
    }

    pub fn keyslot(&self, key: &str) -> u16 {
        let node = self.nodes.iter().find(|n| n.is_up()).expect("a live node");
        q!(&mut node.conn(), "CLUSTER", "KEYSLOT", key)
    }

    /// A cluster client seeded with every live node.
    pub fn client(&self) -> redis::cluster::ClusterConnection {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.is_up())
            .map(Node::url)
            .collect();
        redis::cluster::ClusterClient::new(urls)
            .and_then(|client| client.get_connection())
            .expect("cluster connection")
    }

    /// The logs of every node, for a failure message.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let log = n.log();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- node {} ---\n{}", n.port, tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `cluster_state` from `CLUSTER INFO`.
pub fn cluster_state(con: &mut Connection) -> Result<String, String> {
    let info: String = cmd!("CLUSTER", "INFO")
        .query(con)
        .map_err(|e| e.to_string())?;
    Ok(field_of(&info, "cluster_state"))
}

/// `ZRANGE key 0 -1 WITHSCORES`: member -> score exactly as the server prints it.
pub fn schedule_of(con: &mut Connection, key: &str) -> BTreeMap<String, String> {
    schedule_in_order(con, key).into_iter().collect()
}

/// `ZRANGE key 0 -1 WITHSCORES` in the set's order.
pub fn schedule_in_order(con: &mut Connection, key: &str) -> Vec<(String, String)> {
    q!(con, "ZRANGE", key, 0, -1, "WITHSCORES")
}

pub fn list_of(con: &mut Connection, key: &str) -> Vec<String> {
    q!(con, "LRANGE", key, 0, -1)
}

pub fn wait_replicas(con: &mut Connection, timeout_ms: u64) -> redis::RedisResult<i64> {
    cmd!("WAIT", 1, timeout_ms).query(con)
}

pub fn echomq_stat(con: &mut Connection, field: &str) -> u64 {
    info_field(con, "echomq", field)
        .parse()
        .unwrap_or_else(|_| panic!("INFO echomq has no {field}"))
}

/// The error (a redirect) a node answers `ECHO.RETRY schedule x fixed:0 1` with.
pub fn retry_refused(con: &mut Connection, schedule: &str) -> String {
    err!(con, "ECHO.RETRY", schedule, "x", "fixed:0", 1)
}

/// One job through the queue on `con`: retried due now (the reply is the
/// score written), promoted on its own, and popped.
pub fn one_job_through(con: &mut Connection, schedule: &str, pending: &str, job: &str) {
    let fire = retry(con, schedule, job, "fixed:0", 1);
    let score: i64 = q!(con, "ZSCORE", schedule, job);
    assert_eq!(score, fire);
    assert_eq!(promote(con, schedule, pending), 1);
    let popped: String = q!(con, "RPOP", pending);
    assert_eq!(popped, job);
}

/// Sets `echomq.auto-promote` on every live node, as a deployment would.
pub fn configure_everywhere(cluster: &Cluster, pairs: &str) {
    for node in cluster.nodes.iter().filter(|n| n.is_up()) {
        let _: () = q!(
            &mut node.conn(),
            "CONFIG",
            "SET",
            "echomq.auto-promote",
            pairs
        );
    }
}

/// Sets `echomq.release-limits` on every live node, as a deployment would
/// (each primary keeps its own state for the schedules it owns).
pub fn limit_everywhere(cluster: &Cluster, limits: &str) {
    for node in cluster.nodes.iter().filter(|n| n.is_up()) {
        let _: () = q!(
            &mut node.conn(),
            "CONFIG",
            "SET",
            "echomq.release-limits",
            limits
        );
    }
}

/// `ECHO.LIMITS schedule` on `con` (RESP2: a flat field, value array) as
/// field -> integer; nil (a schedule not listed) is absent, and the rates
/// are left out (they are doubles).
pub fn limits_of(con: &mut Connection, schedule: &str) -> BTreeMap<String, i64> {
    let reply: Vec<Value> = q!(con, "ECHO.LIMITS", schedule);
    limits_from(&reply)
}

/// The integer fields of an `ECHO.LIMITS` reply (RESP2).
pub fn limits_from(reply: &[Value]) -> BTreeMap<String, i64> {
    reply
        .chunks(2)
        .filter_map(|kv| {
            let name = match &kv[0] {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                other => panic!("ECHO.LIMITS field name {other:?}"),
            };
            match kv.get(1) {
                Some(Value::Int(n)) => Some((name, *n)),
                _ => None,
            }
        })
        .collect()
}
