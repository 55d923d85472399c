//! A Valkey Cluster behind `--url`: the pure part. Which slot a queue's keys
//! hash to (CRC16 mod 16384 of the hash tag, as the server computes it),
//! which primary serves that slot (from `CLUSTER SLOTS`, which Valkey 8.0
//! and 9.x both answer), the URL of each primary (the `--url` with its host
//! and port swapped), and the merge of the primaries' `INFO echomq` into the
//! one set of fields the page and /metrics show. The I/O is in main.rs.

use redis::Value;

use crate::snapshot::Number;

pub const SLOTS: u16 = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection),
/// the checksum Valkey's key slots use.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
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

/// The slot of `key`: when it has a `{` followed later by a `}` with at
/// least one byte between them, only those bytes (the first such tag) are
/// hashed; otherwise the whole key.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

/// The slot of a queue: that of its schedule (its three keys share the tag
/// `{NAME}`, so one slot, for any name without a `}`).
pub fn queue_slot(name: &str) -> u16 {
    key_slot(crate::snapshot::Keys::of(name).schedule.as_bytes())
}

/// The most shards a sharded queue may have: `max_shards` of
/// protocol/constants.json (a unit test pins it to the file), as the client
/// libraries check it.
pub const MAX_SHARDS: u32 = 1024;

/// The hash tags of a sharded queue's `shards` shards, by the libraries'
/// rule (docs/clients.md, Sharded queues): `name`, then `name#i`, or
/// `name#i.k` with the smallest `k >= 1` whose slot no earlier shard has, so
/// that no two shards share a slot and any layout starts with a smaller one.
pub fn shard_tags(name: &str, shards: u32) -> Vec<String> {
    let mut tags = vec![name.to_string()];
    let mut slots = vec![key_slot(name.as_bytes())];
    for i in 1..shards {
        let mut tag = format!("{name}#{i}");
        let mut k = 0;
        while slots.contains(&key_slot(tag.as_bytes())) {
            k += 1;
            tag = format!("{name}#{i}.{k}");
        }
        slots.push(key_slot(tag.as_bytes()));
        tags.push(tag);
    }
    tags
}

/// Whether `INFO cluster` says the server runs in cluster mode.
pub fn cluster_enabled(info: &str) -> bool {
    info.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .any(|(k, v)| k == "cluster_enabled" && v.trim() == "1")
}

/// A queue error that means the slot map is out of date: the node does not
/// serve the slot (MOVED) or is migrating it (ASK).
pub fn is_redirect(error: &str) -> bool {
    error.starts_with("MOVED ") || error.starts_with("ASK ")
}

/// Which primary serves which slots.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlotMap {
    /// `host:port` of each primary, in the order CLUSTER SLOTS first names
    /// them.
    pub primaries: Vec<String>,
    /// `(first, last, index into primaries)`, sorted.
    ranges: Vec<(u16, u16, usize)>,
}

pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        v => text(v)?.parse().ok(),
    }
}

/// `host:port`, with an IPv6 host in brackets.
pub fn address(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl SlotMap {
    /// The map from a `CLUSTER SLOTS` reply: one entry per slot range,
    /// `[first, last, [host, port, id, ...], replicas...]`. A primary whose
    /// host is empty or `?` (the node does not know its own address) is on
    /// `seed_host`, the host of the node asked.
    pub fn from_cluster_slots(v: &Value, seed_host: &str) -> Result<SlotMap, String> {
        let Value::Array(entries) = v else {
            return Err(format!("CLUSTER SLOTS: {v:?}"));
        };
        let mut map = SlotMap::default();
        for e in entries {
            let bad = || format!("CLUSTER SLOTS: an entry {e:?}");
            let Value::Array(fields) = e else {
                return Err(bad());
            };
            let (Some(first), Some(last), Some(Value::Array(node))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return Err(bad());
            };
            let (first, last) = (int(first).ok_or_else(bad)?, int(last).ok_or_else(bad)?);
            let host = node.first().and_then(text).ok_or_else(bad)?;
            let port = node
                .get(1)
                .and_then(int)
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(bad)?;
            if !(0..i64::from(SLOTS)).contains(&first) || !(first..i64::from(SLOTS)).contains(&last)
            {
                return Err(bad());
            }
            let host = if host.is_empty() || host == "?" {
                seed_host
            } else {
                &host
            };
            let addr = address(host, port);
            let index = match map.primaries.iter().position(|p| *p == addr) {
                Some(i) => i,
                None => {
                    map.primaries.push(addr);
                    map.primaries.len() - 1
                }
            };
            map.ranges.push((first as u16, last as u16, index));
        }
        map.ranges.sort();
        if map.primaries.is_empty() {
            return Err("CLUSTER SLOTS: no slot is served".into());
        }
        Ok(map)
    }

    /// The index (into `primaries`) of the primary serving `slot`.
    pub fn owner(&self, slot: u16) -> Option<usize> {
        self.ranges
            .iter()
            .find(|&&(a, b, _)| a <= slot && slot <= b)
            .map(|&(_, _, i)| i)
    }

    /// For each queue, the index of the primary serving its slot, or the
    /// slot nobody serves.
    pub fn assign(&self, queues: &[String]) -> Vec<Result<usize, u16>> {
        queues
            .iter()
            .map(|q| {
                let slot = queue_slot(q);
                self.owner(slot).ok_or(slot)
            })
            .collect()
    }
}

/// `url` (`redis://[user:pass@]host:port[/db]`, or `rediss://`) with its
/// host and port replaced by `addr` (`host:port`): the same user, password,
/// database and TLS for every node of the cluster.
pub fn url_for(url: &str, addr: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (s, r),
        None => ("redis", url),
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let userinfo = authority
        .rfind('@')
        .map(|at| &authority[..=at])
        .unwrap_or("");
    format!("{scheme}://{userinfo}{addr}{tail}")
}

/// The host of `url` (without brackets), for a node that does not know
/// its own address.
pub fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = hostport.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("").to_string();
    }
    hostport
        .rsplit_once(':')
        .map_or(hostport, |(h, _)| h)
        .to_string()
}

/// How a field of `INFO echomq` is merged over the primaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Merge {
    Sum,
    Min,
    Max,
}

fn merge_of(field: &str) -> Merge {
    match field {
        // 1 only when every primary's policy is safe.
        "echomq_eviction_policy_safe" => Merge::Min,
        // The largest lag of any primary.
        "echomq_auto_promote_lag_ms_max" => Merge::Max,
        // The counters, and any field a later module adds.
        _ => Merge::Sum,
    }
}

fn combine(a: Number, b: Number, how: Merge) -> Number {
    use Number::*;
    match (a, b, how) {
        (Int(x), Int(y), Merge::Sum) => Int(x.saturating_add(y)),
        (Int(x), Int(y), Merge::Min) => Int(x.min(y)),
        (Int(x), Int(y), Merge::Max) => Int(x.max(y)),
        (x, y, how) => {
            let f = |n: Number| match n {
                Int(i) => i as f64,
                Float(f) => f,
            };
            let (x, y) = (f(x), f(y));
            Float(match how {
                Merge::Sum => x + y,
                Merge::Min => x.min(y),
                Merge::Max => x.max(y),
            })
        }
    }
}

/// The primaries' `INFO echomq` fields as one: each field in the order it
/// first appears, summed over the primaries that report it, except
/// `echomq_eviction_policy_safe` (the smallest: 1 only when all are 1) and
/// `echomq_auto_promote_lag_ms_max` (the largest).
pub fn merge_info(per_node: &[Vec<(String, Number)>]) -> Vec<(String, Number)> {
    let mut out: Vec<(String, Number)> = Vec::new();
    for fields in per_node {
        for (k, v) in fields {
            match out.iter_mut().find(|(f, _)| f == k) {
                Some((_, total)) => *total = combine(*total, *v, merge_of(k)),
                None => out.push((k.clone(), *v)),
            }
        }
    }
    out
}

/// The primaries' `maxmemory-policy`: the one policy when they agree, else
/// each distinct one in order, comma-separated ("" ones left out).
pub fn merge_policy(per_node: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for p in per_node {
        if !p.is_empty() && !seen.contains(&p.as_str()) {
            seen.push(p);
        }
    }
    seen.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_cluster_keyslot() {
        // CLUSTER KEYSLOT answers of Valkey 8.0.1.
        for (key, slot) in [
            ("", 0),
            ("foo", 12182),
            ("bar", 5061),
            ("123456789", 12739),
            ("{orders}:schedule", 105),
            ("{mail}:pending", 4247),
            ("{}x", 10595),
            ("a{b}c", 3300),
            ("a{}{b}", 15033),
            ("{a", 10276),
            ("a}b{c}", 7365),
            ("{{x}}", 11068),
            ("é", 10180),
            ("somekey", 11058),
            ("foo{hash_tag}", 2515),
            ("{q1}:dead", 7450),
        ] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key:?}");
        }
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(queue_slot("orders"), 105);
        assert_eq!(queue_slot("q1"), 7450);
    }

    /// The file the libraries share, read at test time so a change to it
    /// fails here rather than drifting.
    fn protocol_file(name: &str) -> serde_json::Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../protocol")
            .join(name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn shard_tags_match_the_protocol_vectors() {
        let constants = protocol_file("constants.json");
        assert_eq!(constants["max_shards"], serde_json::json!(MAX_SHARDS));
        let vectors = protocol_file("shards.json");
        let layouts = vectors["layouts"].as_array().expect("layouts");
        assert!(!layouts.is_empty());
        for layout in layouts {
            let name = layout["queue"].as_str().expect("queue");
            let shards = layout["shards"].as_u64().expect("shards") as u32;
            let want: Vec<String> = layout["tags"]
                .as_array()
                .expect("tags")
                .iter()
                .map(|t| t.as_str().expect("a tag").to_string())
                .collect();
            assert_eq!(shard_tags(name, shards), want, "{name} over {shards}");
        }
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn entry(first: i64, last: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]),
            Value::Array(vec![bulk(host), Value::Int(port + 1), bulk("r")]),
        ])
    }

    #[test]
    fn the_owner_of_each_slot_from_cluster_slots() {
        let v = Value::Array(vec![
            entry(10923, 16383, "10.0.0.3", 7002),
            entry(0, 5460, "10.0.0.1", 7000),
            entry(5461, 10922, "", 7001),
            entry(100, 100, "10.0.0.1", 7000),
        ]);
        let map = SlotMap::from_cluster_slots(&v, "seed").unwrap();
        assert_eq!(
            map.primaries,
            ["10.0.0.3:7002", "10.0.0.1:7000", "seed:7001"]
        );
        assert_eq!(map.owner(0), Some(1));
        assert_eq!(map.owner(5461), Some(2));
        assert_eq!(map.owner(16383), Some(0));
        let queues: Vec<String> = ["orders", "q1"].map(String::from).to_vec();
        assert_eq!(map.assign(&queues), [Ok(1), Ok(2)]);
        // A slot nobody serves is named.
        let partial =
            SlotMap::from_cluster_slots(&Value::Array(vec![entry(0, 99, "h", 1)]), "s").unwrap();
        assert_eq!(partial.assign(&queues), [Err(105), Err(7450)]);
        for bad in [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![Value::Array(vec![Value::Int(0)])]),
            Value::Array(vec![entry(0, 16384, "h", 1)]),
            Value::Array(vec![entry(5, 4, "h", 1)]),
            Value::Array(vec![entry(0, 1, "h", 70000)]),
        ] {
            assert!(SlotMap::from_cluster_slots(&bad, "s").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn node_urls_keep_user_password_database_and_scheme() {
        assert_eq!(
            url_for("redis://127.0.0.1:6379/", "10.0.0.1:7000"),
            "redis://10.0.0.1:7000/"
        );
        assert_eq!(
            url_for("rediss://u:p@w@h:1/2?protocol=resp3", "[::1]:7"),
            "rediss://u:p@w@[::1]:7/2?protocol=resp3"
        );
        assert_eq!(url_for("redis://h:1", "x:2"), "redis://x:2");
        assert_eq!(host_of("redis://u:p@h:1/"), "h");
        assert_eq!(host_of("redis://[::1]:1/"), "::1");
        assert_eq!(host_of("redis://h"), "h");
        assert_eq!(address("::1", 5), "[::1]:5");
    }

    #[test]
    fn info_is_summed_except_the_policy_and_the_lag() {
        let node = |retries: i64, safe: i64, lag: i64, extra: Option<f64>| {
            let mut v = vec![
                ("echomq_retries".to_string(), Number::Int(retries)),
                ("echomq_eviction_policy_safe".to_string(), Number::Int(safe)),
                (
                    "echomq_auto_promote_lag_ms_max".to_string(),
                    Number::Int(lag),
                ),
            ];
            if let Some(x) = extra {
                v.push(("echomq_new".to_string(), Number::Float(x)));
            }
            v
        };
        let merged = merge_info(&[
            node(1, 1, 5, None),
            node(2, 0, 50, Some(1.5)),
            node(3, 1, 7, Some(1.0)),
        ]);
        assert_eq!(
            merged,
            vec![
                ("echomq_retries".to_string(), Number::Int(6)),
                ("echomq_eviction_policy_safe".to_string(), Number::Int(0)),
                (
                    "echomq_auto_promote_lag_ms_max".to_string(),
                    Number::Int(50)
                ),
                ("echomq_new".to_string(), Number::Float(2.5)),
            ]
        );
        let all_safe = merge_info(&[node(0, 1, 0, None), node(0, 1, 0, None)]);
        assert_eq!(all_safe[1].1, Number::Int(1));
        assert!(merge_info(&[]).is_empty());
        let p = |s: &[&str]| merge_policy(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(p(&["noeviction", "noeviction"]), "noeviction");
        assert_eq!(
            p(&["noeviction", "", "allkeys-lru", "noeviction"]),
            "noeviction,allkeys-lru"
        );
    }

    #[test]
    fn cluster_mode_and_redirects() {
        assert!(cluster_enabled("# Cluster\r\ncluster_enabled:1\r\n"));
        assert!(!cluster_enabled("# Cluster\r\ncluster_enabled:0\r\n"));
        assert!(!cluster_enabled(""));
        assert!(is_redirect("MOVED 105 127.0.0.1:7000"));
        assert!(is_redirect("ASK 105 127.0.0.1:7000"));
        assert!(!is_redirect("WRONGTYPE Operation"));
    }
}
