//! A real Valkey Cluster for the tests: three primaries with one replica
//! each, every node loading the module, on 127.0.0.1, and the topology as
//! the nodes see it (slot owners, replicas). Every process is killed by pid
//! when its handle drops, also when a test panics.

use std::net::TcpListener;
use std::ops::{Deref, DerefMut};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::{
    cli_binary, field_of, server_binary, try_info_field, wait_until, Connection, Options, Server,
};

/// Short, so that an automatic failover happens within a few seconds.
pub const NODE_TIMEOUT_MS: u32 = 2000;
pub const SLOTS: u32 = 16384;

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

/// One cluster node: a `valkey-server` with the module in cluster mode
/// ([`Options::cluster_node`]), killed and reaped on drop. Everything a
/// [`Server`] has, with connections that time out reads after 30 s.
pub struct Node {
    server: Server,
}

impl Node {
    pub fn start() -> Node {
        Node::start_on(&server_binary())
    }

    /// A node running `server` (a `valkey-server` binary) instead of
    /// `ECHOMQ_SERVER`'s.
    pub fn start_on(server: &str) -> Node {
        Node::start_on_with(server, &[])
    }

    /// A node running `server` with more configs (`(name, value)`, passed as
    /// `--name value`), such as Valkey 9's `cluster-databases`.
    pub fn start_on_with(server: &str, configs: &[(&str, &str)]) -> Node {
        let options = configs
            .iter()
            .fold(Options::cluster_node(server), |o, (name, value)| {
                o.arg(name, value)
            });
        Node {
            server: Server::start_with(options),
        }
    }

    pub fn try_conn(&self) -> redis::RedisResult<Connection> {
        let con = self
            .client()
            .get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(con)
    }

    pub fn conn(&self) -> Connection {
        self.try_conn()
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.addr()))
    }

    /// Not killed (by the test).
    pub fn is_up(&self) -> bool {
        self.started()
    }

    /// SIGKILL by pid, then reap.
    pub fn kill(&mut self) {
        self.server.stop();
    }
}

impl Deref for Node {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.server
    }
}

impl DerefMut for Node {
    fn deref_mut(&mut self) -> &mut Server {
        &mut self.server
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
        Cluster::start_on_with(server, cli, &[])
    }

    /// [`Cluster::start_on`] with more configs on every node
    /// ([`Node::start_on_with`]).
    pub fn start_on_with(server: &str, cli: &str, configs: &[(&str, &str)]) -> Cluster {
        let nodes: Vec<Node> = (0..6)
            .map(|_| Node::start_on_with(server, configs))
            .collect();
        let cluster = Cluster { nodes };
        let out = Command::new(cli)
            .args(["--cluster", "create"])
            .args(cluster.nodes.iter().map(|n| n.addr()))
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

    /// Starts Valkey 9's atomic migration (`CLUSTER MIGRATESLOTS`) of `slot`
    /// from the primary `from` to the primary `to`; the server goes on with
    /// it after the reply.
    pub fn start_atomic_migration(&self, slot: u16, from: usize, to: usize) {
        let reply: String = q!(
            &mut self.conn(from),
            "CLUSTER",
            "MIGRATESLOTS",
            "SLOTSRANGE",
            slot,
            slot,
            "NODE",
            self.id(to)
        );
        assert_eq!(
            reply,
            "OK",
            "CLUSTER MIGRATESLOTS {slot} to {}",
            self.port(to)
        );
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
            .map(|n| n.url())
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
