//! Sharded queues (docs/clients.md, Sharded queues): one logical queue over
//! N sub-queues, each a queue of its own tag, so that a cluster spreads them
//! over its primaries. The three rules every library agrees on (the shards'
//! tags, a job's shard, the split of a release limit) are pure functions
//! here; the queue's calls that see the whole logical queue merge what the
//! shards answer.

use std::collections::BTreeMap;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{RedisResult, Value};

use crate::protocol::{MAX_GROUP_BURST, MAX_GROUP_RATE, MAX_SHARDS};
use crate::queue::{client_error, Counts, DeadJob, GroupInfo, Queue};
use crate::repeat::Repeat;

/// The number of hash slots of a Valkey Cluster.
const SLOTS: u16 = 16384;

/// CRC16-XMODEM (polynomial 0x1021, initial 0), the checksum Valkey's
/// `keyHashSlot` takes of a key.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot `CLUSTER KEYSLOT` gives `key`: with a hash tag (the bytes
/// between the first `{` and the first `}` after it, when not empty) only
/// the tag is hashed.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) % SLOTS
}

/// The tags of the first `shards` shards of the queue `name`: `name`, then
/// `name#i`, or `name#i.k` with the smallest `k` whose slot no earlier shard
/// has. A larger layout begins with a smaller one's tags.
pub fn shard_tags(name: &str, shards: usize) -> Vec<String> {
    let mut tags = Vec::with_capacity(shards);
    let mut taken = std::collections::HashSet::with_capacity(shards);
    for i in 0..shards {
        let mut tag = if i == 0 {
            name.to_string()
        } else {
            format!("{name}#{i}")
        };
        let mut k = 0;
        // The tag is the whole hash tag of its keys (`{tag}:...`): its slot
        // is CRC16 of its bytes.
        while i > 0 && taken.contains(&(crc16(tag.as_bytes()) % SLOTS)) {
            k += 1;
            tag = format!("{name}#{i}.{k}");
        }
        taken.insert(crc16(tag.as_bytes()) % SLOTS);
        tags.push(tag);
    }
    tags
}

/// The shard of the job `id` among `shards`: `KEYSLOT(id) mod shards`.
pub fn shard_of(id: &str, shards: usize) -> usize {
    usize::from(key_slot(id.as_bytes())) % shards.max(1)
}

/// The units of a rate, shortest first, with their length in seconds.
const UNITS: [(char, u64); 3] = [('s', 1), ('m', 60), ('h', 3600)];

/// A rate of `echomq.release-limits` checked as the server reads it:
/// `<n>/s`, `<n>/m` or `<n>/h` (n canonical, 1..=1000000, the unit in any
/// case), or `adaptive:` (any case) and such a rate. Returns the prefix as
/// given, n and the unit's index in [`UNITS`].
fn parse_rate(rate: &str) -> Option<(&str, u64, usize)> {
    let prefix_len = "adaptive:".len();
    let (prefix, rest) = match rate.get(..prefix_len) {
        Some(head) if head.eq_ignore_ascii_case("adaptive:") => rate.split_at(prefix_len),
        _ => ("", rate),
    };
    let (n, unit) = rest.split_once('/')?;
    if n.is_empty() || n.starts_with('0') || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = n.parse().ok().filter(|n| *n <= MAX_GROUP_RATE)?;
    let unit = match unit {
        "s" | "S" => 0,
        "m" | "M" => 1,
        "h" | "H" => 2,
        _ => return None,
    };
    Some((prefix, n, unit))
}

/// A release limit's rate and burst checked as `CONFIG SET
/// echomq.release-limits` would check them, before anything is sent.
pub(crate) fn check_release_limit(rate: &str, burst: u64) -> RedisResult<()> {
    if parse_rate(rate).is_none() {
        return Err(client_error(
            "invalid rate",
            format!("a release limit's rate is <n>/s, <n>/m or <n>/h with n in 1..={MAX_GROUP_RATE}, or adaptive:<rate>, not {rate:?}"),
        ));
    }
    if !(1..=MAX_GROUP_BURST).contains(&burst) {
        return Err(client_error(
            "invalid burst",
            format!("a release limit's burst must be in 1..={MAX_GROUP_BURST}, got {burst}"),
        ));
    }
    Ok(())
}

/// One shard's part of `rate` and `burst` over `shards` shards: the rate
/// divided in its own unit when `shards` divides it, else in the first
/// longer unit where it divides and stays within 1..=1000000, else floored
/// in the longest unit that keeps it within that bound (at least 1/h); an
/// `adaptive:` ceiling the same way; the burst `ceil(burst / shards)`. One
/// shard keeps both as given. `rate` must be valid ([`check_release_limit`]).
pub fn split_limit(rate: &str, burst: u64, shards: usize) -> (String, u64) {
    let shards = shards.max(1) as u64;
    let Some((prefix, n, unit)) = parse_rate(rate) else {
        return (rate.to_string(), burst);
    };
    let burst = burst.div_ceil(shards);
    if n.is_multiple_of(shards) {
        // The unit as given (one shard: the rate unchanged).
        let unit_as_given = &rate[rate.len() - 1..];
        return (format!("{prefix}{}/{unit_as_given}", n / shards), burst);
    }
    let per_second_unit = UNITS[unit].1;
    for &(letter, seconds) in &UNITS[unit + 1..] {
        let total = n * (seconds / per_second_unit);
        if total.is_multiple_of(shards) && total / shards <= MAX_GROUP_RATE {
            return (format!("{prefix}{}/{letter}", total / shards), burst);
        }
    }
    // No unit divides it: floored, in the longest unit within the bound.
    let mut best = (UNITS[unit].0, n / shards);
    for &(letter, seconds) in &UNITS[unit + 1..] {
        let floored = n * (seconds / per_second_unit) / shards;
        if floored <= MAX_GROUP_RATE {
            best = (letter, floored);
        }
    }
    if best.1 == 0 {
        best = ('h', 1);
    }
    (format!("{prefix}{}/{}", best.1, best.0), burst)
}

/// `echomq.release-limits` with the entries of `schedules` removed and, when
/// `entry` is given, one `schedule rate burst` per schedule added: the
/// other queues' entries are kept as they were.
fn rewrite_limits(config: &str, schedules: &[String], entry: Option<(&str, u64)>) -> String {
    let words: Vec<&str> = config.split_ascii_whitespace().collect();
    let mut kept: Vec<String> = Vec::new();
    for three in words.chunks(3) {
        if !schedules.iter().any(|s| s == three[0]) {
            kept.push(three.join(" "));
        }
    }
    if let Some((rate, burst)) = entry {
        for schedule in schedules {
            kept.push(format!("{schedule} {rate} {burst}"));
        }
    }
    kept.join(" ")
}

impl Queue {
    /// This queue over `shards` sub-queues (1..=1024; 1 is the queue as
    /// opened): producers and workers of every language that open it with
    /// the same count agree on where each job lives. Nothing is sent.
    pub fn with_shards(mut self, shards: usize) -> RedisResult<Queue> {
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(client_error(
                "invalid shard count",
                format!("shards must be in 1..={MAX_SHARDS}, got {shards}"),
            ));
        }
        self.set_layout(shard_tags(&self.name, shards));
        Ok(self)
    }

    /// The shards' tags, shard 0 first (`["mail", "mail#1", ...]`): shard
    /// `i`'s keys are `{tag}:schedule`, `{tag}:pending` and so on.
    pub fn shards(&self) -> &[String] {
        &self.tags
    }

    /// The shard (an index into [`Queue::shards`]) the job `id` lives in.
    pub fn shard_of(&self, id: &str) -> usize {
        shard_of(id, self.tags.len())
    }

    /// Shard `i` as a queue of one shard (`None` past the last): its
    /// `counts()`, `groups()`, `dead()` and the like show that shard alone,
    /// and a worker of it works that shard only.
    pub fn shard_queue(&self, i: usize) -> Option<Queue> {
        (i < self.tags.len()).then(|| self.shard(i).clone())
    }

    /// The shard `i` as a queue of its own (`i < shards().len()`).
    pub(crate) fn shard(&self, i: usize) -> &Queue {
        if self.views.is_empty() {
            self
        } else {
            &self.views[i]
        }
    }

    /// Every shard as a queue of its own (the queue itself when it has one).
    pub(crate) fn each_shard(&self) -> Vec<&Queue> {
        (0..self.tags.len()).map(|i| self.shard(i)).collect()
    }

    /// Whether the queue has more than one shard.
    pub(crate) fn sharded(&self) -> bool {
        !self.views.is_empty()
    }

    /// The shard of `id` first, then the others in order: where `requeue`,
    /// `remove` and `unrepeat` look (after a growth from N to M shards a
    /// job may live in the shard the N layout gave it).
    pub(crate) fn shards_for(&self, id: &str) -> Vec<&Queue> {
        let home = self.shard_of(id);
        let mut order = vec![self.shard(home)];
        order.extend(
            (0..self.tags.len())
                .filter(|&i| i != home)
                .map(|i| self.shard(i)),
        );
        order
    }

    /// [`Queue::counts`] of each shard, shard 0 first.
    pub async fn counts_per_shard(&self) -> RedisResult<Vec<Counts>> {
        let mut out = Vec::with_capacity(self.tags.len());
        for shard in self.each_shard() {
            out.push(shard.counts_one().await?);
        }
        Ok(out)
    }

    /// The figures of every shard's [`Queue::counts`], summed.
    pub(crate) async fn counts_sharded(&self) -> RedisResult<Counts> {
        let mut sum = Counts::default();
        for c in self.counts_per_shard().await? {
            sum.scheduled += c.scheduled;
            sum.due += c.due;
            sum.pending += c.pending;
            sum.in_flight += c.in_flight;
            sum.dead += c.dead;
        }
        Ok(sum)
    }

    /// The groups of every shard, one record per group name (in name order,
    /// the ungrouped jobs first): counts and limits summed (each shard has
    /// its part of a split limit), the earliest `waiting_until_ms` (0 when
    /// any shard has it in the rotation) and the latest hold.
    pub(crate) async fn groups_sharded(&self, page_size: u64) -> RedisResult<Vec<GroupInfo>> {
        let mut merged: BTreeMap<Option<String>, GroupInfo> = BTreeMap::new();
        for shard in self.each_shard() {
            for g in shard.groups_one(page_size).await? {
                let Some(m) = merged.get_mut(&g.group) else {
                    merged.insert(g.group.clone(), g);
                    continue;
                };
                m.members += g.members;
                m.due += g.due;
                m.limit_rate = sum_option(m.limit_rate, g.limit_rate, |a, b| a + b);
                m.limit_burst = sum_option(m.limit_burst, g.limit_burst, |a, b| a + b);
                m.available = sum_option(m.available, g.available, |a, b| a + b);
                // 0 (in the rotation) on any shard: it may release now.
                m.waiting_until_ms = m.waiting_until_ms.min(g.waiting_until_ms);
                m.held_until_ms = m.held_until_ms.max(g.held_until_ms);
            }
        }
        Ok(merged.into_values().collect())
    }

    /// The dead jobs of every shard in one order, oldest death first (ties
    /// by shard), from `offset`, at most `count`: each shard's first
    /// `offset + count` are enough to know the merged ones.
    pub(crate) async fn dead_sharded(&self, offset: u64, count: u64) -> RedisResult<Vec<DeadJob>> {
        let mut all = Vec::new();
        for shard in self.each_shard() {
            all.extend(shard.dead_one(0, offset.saturating_add(count)).await?);
        }
        // Stable: equal times keep the shards' order.
        all.sort_by_key(|job| job.died_at_ms);
        Ok(all
            .into_iter()
            .skip(offset as usize)
            .take(count as usize)
            .collect())
    }

    /// Every shard's recurring jobs, by id.
    pub(crate) async fn repeats_sharded(&self) -> RedisResult<Vec<Repeat>> {
        let mut all = Vec::new();
        for shard in self.each_shard() {
            all.extend(shard.repeats_one().await?);
        }
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }

    /// Limits the release of the whole queue to `rate` (`"500/s"`, `"30/m"`,
    /// `"2/h"`, n in 1..=1000000, or `"adaptive:<rate>"`) with bursts of
    /// `burst` (1..=1000000): each shard's schedule gets its part
    /// ([`split_limit`]) in `echomq.release-limits`, on every node the queue
    /// reaches (on a cluster, the primaries and the replicas, so a failover
    /// keeps it). The other entries of the config are kept; its old entries
    /// for this queue are replaced. A limit the server would refuse is
    /// refused here with nothing sent.
    pub async fn set_limit(&self, rate: &str, burst: u64) -> RedisResult<()> {
        check_release_limit(rate, burst)?;
        self.check_config_name()?;
        let (rate, burst) = split_limit(rate, burst, self.tags.len());
        self.write_release_limits(Some((&rate, burst))).await
    }

    /// Removes this queue's entries from `echomq.release-limits` on every
    /// node the queue reaches ([`Queue::set_limit`]).
    pub async fn clear_limit(&self) -> RedisResult<()> {
        self.check_config_name()?;
        self.write_release_limits(None).await
    }

    /// A config's words are separated by whitespace: a schedule whose name
    /// holds some cannot be listed.
    fn check_config_name(&self) -> RedisResult<()> {
        if self.name.chars().any(|c| c.is_ascii_whitespace()) {
            return Err(client_error(
                "invalid queue name for a limit",
                format!(
                    "echomq.release-limits cannot name a queue with whitespace: {:?}",
                    self.name
                ),
            ));
        }
        Ok(())
    }

    /// `CONFIG GET`, this queue's entries replaced (or removed), `CONFIG
    /// SET`, on each node.
    async fn write_release_limits(&self, entry: Option<(&str, u64)>) -> RedisResult<()> {
        const CONFIG: &str = "echomq.release-limits";
        let schedules: Vec<String> = self
            .each_shard()
            .iter()
            .map(|s| s.keys.schedule.clone())
            .collect();
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg(CONFIG);
        for (node, reply) in self.conn.on_every_node(&get).await? {
            let current = config_value(reply)?;
            let value = rewrite_limits(&current, &schedules, entry);
            if value == current {
                continue;
            }
            let mut set = redis::cmd("CONFIG");
            set.arg("SET").arg(CONFIG).arg(&value);
            let reply = self.conn.on_node(node, &set).await?;
            if let Value::ServerError(e) = reply {
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// [`Queue::set_group_limit`] on every shard, each with its part of the
    /// limit ([`split_limit`]).
    pub(crate) async fn group_limit_sharded(
        &self,
        group: &str,
        rate: &str,
        burst: u64,
    ) -> RedisResult<()> {
        let (rate, burst) = split_limit(rate, burst, self.tags.len());
        let burst = burst.to_string();
        for shard in self.each_shard() {
            shard.group_limit(group, &[&rate, &burst]).await?;
        }
        Ok(())
    }
}

/// The `host:port` of each node `CLUSTER NODES` lists as reachable (not
/// failed, not in a handshake, with an address).
fn cluster_node_addresses(listed: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for line in listed.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(address), Some(flags)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        if flags
            .split(',')
            .any(|f| matches!(f, "fail" | "handshake" | "noaddr"))
        {
            continue;
        }
        // ip:port@cport[,hostname]
        let address = address.split(['@', ',']).next().unwrap_or_default();
        if let Some((host, port)) = address.rsplit_once(':') {
            if let (false, Ok(port)) = (host.is_empty(), port.parse()) {
                out.push((host.to_string(), port));
            }
        }
    }
    out
}

fn sum_option<T: Copy>(a: Option<T>, b: Option<T>, add: impl Fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(add(a, b)),
        (a, b) => a.or(b),
    }
}

/// The value of a `CONFIG GET` reply (`[name, value]`, or a map in RESP3);
/// the node's refusal as the error.
fn config_value(reply: Value) -> RedisResult<String> {
    match reply {
        Value::ServerError(e) => Err(e.into()),
        Value::Array(items) => match items.into_iter().nth(1) {
            Some(v) => redis::from_redis_value(v).map_err(Into::into),
            None => Ok(String::new()),
        },
        Value::Map(pairs) => match pairs.into_iter().next() {
            Some((_, v)) => redis::from_redis_value(v).map_err(Into::into),
            None => Ok(String::new()),
        },
        other => Err(client_error(
            "unexpected CONFIG GET reply",
            format!("{other:?}"),
        )),
    }
}

/// A node to send a command to: `None` the one server, else a cluster
/// node's address.
pub(crate) type Node = Option<(String, u16)>;

impl crate::queue::QueueConnection {
    /// `cmd` on every node: the one server, or each node of the cluster
    /// (primaries and replicas, as `CLUSTER NODES` lists them; the cluster
    /// client's map of the slots holds the primaries only), with its reply.
    pub(crate) async fn on_every_node(&self, cmd: &redis::Cmd) -> RedisResult<Vec<(Node, Value)>> {
        let mut conn = self.clone();
        if !self.is_cluster() {
            let reply: Value = cmd.query_async(&mut conn).await?;
            return Ok(vec![(None, reply)]);
        }
        let mut nodes = redis::cmd("CLUSTER");
        nodes.arg("NODES");
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(self.route()));
        let listed: String = redis::from_redis_value(self.route_on_cluster(&nodes, route).await?)?;
        let mut out = Vec::new();
        for node in cluster_node_addresses(&listed) {
            match self.on_node(Some(node.clone()), cmd).await {
                Ok(reply) => out.push((Some(node), reply)),
                // Listed but not reachable (down, or a replica a plain
                // connection may not open): the others still get it.
                Err(e) if e.is_io_error() || e.is_connection_refusal() || e.is_timeout() => {
                    eprintln!("echomq-client: node {}:{} not reached: {e}", node.0, node.1)
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// `cmd` on one node of [`QueueConnection::on_every_node`]'s: through
    /// the cluster client where it has a connection to the node (the
    /// primaries), else (a replica, which the cluster client reaches only
    /// when it reads from replicas) on a connection of its own to the
    /// node's address.
    pub(crate) async fn on_node(&self, node: Node, cmd: &redis::Cmd) -> RedisResult<Value> {
        let Some((host, port)) = node else {
            return cmd.query_async(&mut self.clone()).await;
        };
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: host.clone(),
            port,
        });
        match self.route_on_cluster(cmd, route).await {
            Err(e) if e.kind() == redis::ErrorKind::ClusterConnectionNotFound => {
                let client = redis::Client::open((host.as_str(), port))?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(std::time::Duration::from_secs(10)))
                    .set_response_timeout(Some(std::time::Duration::from_secs(10)));
                let mut conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                cmd.query_async(&mut conn).await
            }
            result => result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_xmodem() {
        // The check value of CRC-16/XMODEM, and the example of the Redis
        // Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        // The README's example.
        assert_eq!((key_slot(b"order-42"), shard_of("order-42", 6)), (9984, 0));
    }

    #[test]
    fn limits_are_split_as_the_protocol_says() {
        for (rate, burst, shards, want_rate, want_burst) in [
            ("500/s", 50, 6, "5000/m", 9),
            ("7/s", 7, 6, "70/m", 2),
            ("10/s", 10, 3, "200/m", 4),
            ("1000000/s", 1, 3, "333333/s", 1),
            ("600/s", 60, 6, "100/s", 10),
            ("5/S", 3, 1, "5/S", 3),
            ("7/h", 5, 1, "7/h", 5),
            ("adaptive:500/s", 50, 6, "adaptive:5000/m", 9),
            ("adaptive:2000/s", 100, 4, "adaptive:500/s", 25),
            ("1/h", 1, 3, "1/h", 1),
            ("1/s", 1, 7, "514/h", 1),
            ("1/m", 1, 4, "15/h", 1),
            ("1000000/m", 1000000, 7, "142857/m", 142858),
        ] {
            assert_eq!(
                split_limit(rate, burst, shards),
                (want_rate.to_string(), want_burst),
                "{rate} {burst} over {shards}"
            );
        }
    }

    #[test]
    fn release_limits_are_checked_as_the_server_reads_them() {
        for good in ["1/s", "1000000/h", "5/M", "adaptive:20/s", "ADAPTIVE:3/h"] {
            assert!(check_release_limit(good, 1).is_ok(), "{good}");
        }
        for bad in [
            "0/s",
            "01/s",
            "1000001/s",
            "10/d",
            "/s",
            "s",
            "adaptive:",
            "adaptive:x/s",
            "+1/s",
            "1/ s",
        ] {
            assert!(check_release_limit(bad, 1).is_err(), "{bad}");
        }
        assert!(check_release_limit("1/s", 0).is_err());
        assert!(check_release_limit("1/s", 1_000_001).is_err());
    }

    #[test]
    fn cluster_nodes_are_read_with_their_addresses() {
        let listed = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002,node-2 master - 0 1426238316232 2 connected 5461-10922
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460
292f 127.0.0.1:30003@40003 master,fail - 0 1426238318243 3 connected 10923-16383
6ec2 :0@0 master,noaddr - 0 0 0 disconnected
";
        let hosts: Vec<(String, u16)> = ["30004", "30002", "30001"]
            .iter()
            .map(|p| ("127.0.0.1".to_string(), p.parse().unwrap()))
            .collect();
        assert_eq!(cluster_node_addresses(listed), hosts);
    }

    #[test]
    fn the_config_keeps_other_queues_entries() {
        let mine = vec!["{q}:schedule".to_string(), "{q#1}:schedule".to_string()];
        assert_eq!(
            rewrite_limits(
                "{a}:schedule 5/s 1  {q}:schedule 1/s 1",
                &mine,
                Some(("2/s", 3))
            ),
            "{a}:schedule 5/s 1 {q}:schedule 2/s 3 {q#1}:schedule 2/s 3"
        );
        assert_eq!(
            rewrite_limits("{q#1}:schedule 2/s 3 {a}:schedule 5/s 1", &mine, None),
            "{a}:schedule 5/s 1"
        );
        assert_eq!(rewrite_limits("", &mine, None), "");
    }
}
