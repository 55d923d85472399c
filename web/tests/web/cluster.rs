//! echomq-web on a real Valkey Cluster (three primaries, one replica each),
//! started with the `--url` of one primary that serves none of the queues:
//! the slot map is discovered, each queue read on the primary serving its
//! slot, the module's counters summed over the primaries; and with one
//! primary killed, the other queues still read, and the dead one's queue
//! reads again once its replica has taken over.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::*;
use crate::harness::*;
use serde_json::{json, Value as Json};

/// What a queue is built with on its primary.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Want {
    due: i64,
    future: i64,
    pending: i64,
    dead: i64,
    /// `pending` as a stream (XADD) rather than a list.
    stream: bool,
}

/// Writes `w` on `con` (the primary serving `{q}`), and waits until its
/// replica has it too.
fn write_queue(con: &mut Connection, q: &str, w: Want) {
    let (s, p, d) = (
        format!("{{{q}}}:schedule"),
        format!("{{{q}}}:pending"),
        format!("{{{q}}}:dead"),
    );
    let now = server_time_ms(con);
    for i in 0..w.due {
        let _: i64 = q!(con, "ZADD", &s, now - 1000 * (i + 1), format!("due-{i}"));
    }
    for i in 0..w.future {
        let _: i64 = q!(con, "ZADD", &s, now + 600_000 + i, format!("later-{i}"));
    }
    for i in 0..w.pending {
        if w.stream {
            let _: String = q!(con, "XADD", &p, "*", "job", format!("p-{i}"));
        } else {
            let _: i64 = q!(con, "LPUSH", &p, format!("p-{i}"));
        }
    }
    for i in 0..w.dead {
        let _: i64 = q!(con, "ZADD", &d, now - 5000 - i, format!("dead-{i}"));
    }
    let acked: i64 = q!(con, "WAIT", 1, 10_000);
    assert_eq!(acked, 1, "the replica of {q}'s primary did not acknowledge");
}

/// The queues of a test: names and their primaries. Picks names until two
/// are served by `a` and one by `b`.
fn names_on(cluster: &Cluster, a: usize, b: usize) -> Vec<(String, usize)> {
    let mut on_a = Vec::new();
    let mut on_b = Vec::new();
    for i in 0.. {
        let name = format!("q{i}");
        let owner = cluster.owner(cluster.keyslot(&format!("{{{name}}}:schedule")));
        if owner == a && on_a.len() < 2 {
            on_a.push((name, owner));
        } else if owner == b && on_b.is_empty() {
            on_b.push((name, owner));
        }
        if on_a.len() == 2 && on_b.len() == 1 {
            break;
        }
    }
    on_a.into_iter().chain(on_b).collect()
}

fn want_of(i: usize) -> Want {
    let i = i as i64;
    Want {
        due: 2 + i,
        future: 5 + 2 * i,
        pending: 3 + 3 * i,
        dead: 1 + i,
        stream: i == 1,
    }
}

fn queue_json(api: &Json, name: &str) -> Json {
    api["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .find(|q| q["name"] == json!(name))
        .unwrap_or_else(|| panic!("no queue {name}: {api}"))
        .clone()
}

fn assert_counts(api: &Json, name: &str, w: Want) {
    let q = queue_json(api, name);
    let got = (
        q["scheduled"].clone(),
        q["due"].clone(),
        q["pending"].clone(),
        q["in_flight"].clone(),
        q["dead"].clone(),
    );
    assert_eq!(
        got,
        (
            json!(w.due + w.future),
            json!(w.due),
            json!(w.pending),
            json!(0),
            json!(w.dead)
        ),
        "{name}: {q}"
    );
}

/// The samples of a /metrics text: `name{labels}` to value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn assert_metrics(text: &str, name: &str, w: Want) {
    let s = samples(text);
    let get = |family: &str| s.get(&format!("{family}{{queue=\"{name}\"}}")).copied();
    assert_eq!(
        (
            get("echomq_queue_scheduled"),
            get("echomq_queue_due"),
            get("echomq_queue_pending"),
            get("echomq_queue_in_flight"),
            get("echomq_queue_dead"),
        ),
        (
            Some((w.due + w.future) as f64),
            Some(w.due as f64),
            Some(w.pending as f64),
            Some(0.0),
            Some(w.dead as f64)
        ),
        "{name}:\n{text}"
    );
}

fn info_field(con: &mut Connection, field: &str) -> i64 {
    let text: String = q!(con, "INFO", "echomq");
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field}: {text}"))
        .trim()
        .parse()
        .expect("an integer")
}

#[test]
fn on_a_cluster_each_queue_is_read_on_its_primary_and_the_counters_summed() {
    let cluster = Cluster::start();
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    let (seed, a, b) = (primaries[0], primaries[1], primaries[2]);
    let queues = names_on(&cluster, a, b);
    for (i, (name, owner)) in queues.iter().enumerate() {
        write_queue(&mut cluster.conn(*owner), name, want_of(i));
    }
    // Counters on two primaries: ECHO.RETRY of a job beyond the window, on
    // the first and the last queue's primaries (one more member each).
    let (first, last) = (&queues[0], &queues[2]);
    retry(
        &mut cluster.conn(first.1),
        &format!("{{{}}}:schedule", first.0),
        "r",
        "fixed:900000",
        1,
    );
    for j in 0..2 {
        retry(
            &mut cluster.conn(last.1),
            &format!("{{{}}}:schedule", last.0),
            format!("r{j}"),
            "fixed:900000",
            1,
        );
    }
    let mut wants: Vec<Want> = (0..queues.len()).map(want_of).collect();
    wants[0].future += 1;
    wants[2].future += 2;

    let args: Vec<&str> = queues
        .iter()
        .flat_map(|(n, _)| ["--queue", n.as_str()])
        .collect();
    let web = Web::start(&cluster.nodes[seed].url(), &args);
    let (status, api) = web.api();
    assert_eq!(status, 200, "{api}");
    for ((name, _), w) in queues.iter().zip(&wants) {
        assert_counts(&api, name, *w);
    }
    // Every primary, each with the queues it serves, all answering.
    let mut nodes: Vec<(String, Json, Json)> = api["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("no nodes: {api}"))
        .iter()
        .map(|n| {
            (
                n["addr"].as_str().unwrap().to_string(),
                n["queues"].clone(),
                n["error"].clone(),
            )
        })
        .collect();
    nodes.sort_by(|x, y| x.0.cmp(&y.0));
    let mut expected: Vec<(String, Json, Json)> = primaries
        .iter()
        .map(|&p| {
            let served = queues.iter().filter(|(_, o)| *o == p).count();
            (
                format!("127.0.0.1:{}", cluster.port(p)),
                json!(served),
                Json::Null,
            )
        })
        .collect();
    expected.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(nodes, expected, "{api}");
    // The counters are the sum over the primaries.
    let retries: i64 = primaries
        .iter()
        .map(|&p| info_field(&mut cluster.conn(p), "echomq_retries"))
        .sum();
    assert_eq!(retries, 3);
    assert_eq!(api["info"]["echomq_retries"], json!(retries), "{api}");
    assert_eq!(
        api["info"]["echomq_eviction_policy_safe"],
        json!(1),
        "{api}"
    );
    assert_eq!(api["eviction_policy_safe"], json!(true), "{api}");
    assert_eq!(api["maxmemory_policy"], json!("noeviction"), "{api}");

    let (status, text) = web.get("/metrics");
    assert_eq!(status, 200, "{text}");
    for ((name, _), w) in queues.iter().zip(&wants) {
        assert_metrics(&text, name, *w);
    }
    let s = samples(&text);
    assert_eq!(s.get("echomq_up"), Some(&1.0), "{text}");
    assert_eq!(s.get("echomq_retries_total"), Some(&3.0), "{text}");
    for &p in &primaries {
        let key = format!("echomq_node_up{{node=\"127.0.0.1:{}\"}}", cluster.port(p));
        assert_eq!(s.get(&key), Some(&1.0), "{key}\n{text}");
    }

    // One primary whose policy may evict: the gauge is 0 for the cluster.
    let _: () = q!(
        &mut cluster.conn(b),
        "CONFIG",
        "SET",
        "maxmemory-policy",
        "allkeys-lru"
    );
    let (_, api) = web.api();
    assert_eq!(
        api["info"]["echomq_eviction_policy_safe"],
        json!(0),
        "{api}"
    );
    assert_eq!(api["eviction_policy_safe"], json!(false), "{api}");
    let policy = api["maxmemory_policy"].as_str().unwrap_or("");
    assert!(
        policy.contains("allkeys-lru") && policy.contains("noeviction"),
        "{api}"
    );
    let (_, text) = web.get("/metrics");
    assert_eq!(
        samples(&text).get("echomq_eviction_policy_safe"),
        Some(&0.0),
        "{text}"
    );
}

#[test]
fn on_a_cluster_a_dead_primary_blanks_only_its_own_queues() {
    let mut cluster = Cluster::start();
    let primaries = cluster.primaries();
    let (seed, a, b) = (primaries[0], primaries[1], primaries[2]);
    let queues = names_on(&cluster, a, b);
    for (i, (name, owner)) in queues.iter().enumerate() {
        write_queue(&mut cluster.conn(*owner), name, want_of(i));
    }
    let args: Vec<&str> = queues
        .iter()
        .flat_map(|(n, _)| ["--queue", n.as_str()])
        .collect();
    let web = Web::start(&cluster.nodes[seed].url(), &args);
    let (status, api) = web.api();
    assert_eq!(status, 200, "{api}");
    for (i, (name, _)) in queues.iter().enumerate() {
        assert_counts(&api, name, want_of(i));
    }

    let dead_addr = format!("127.0.0.1:{}", cluster.port(b));
    cluster.nodes[b].kill();
    // At once, before any failover: b's queue shows its primary's error,
    // the others their counts.
    let (status, api) = web.api();
    assert_eq!(status, 200, "{api}");
    for (i, (name, owner)) in queues.iter().enumerate() {
        if *owner == b {
            let q = queue_json(&api, name);
            let error = q["error"].as_str().unwrap_or_else(|| panic!("{q}"));
            assert!(error.contains(&dead_addr), "{q}");
        } else {
            assert_counts(&api, name, want_of(i));
        }
    }
    let down: Vec<&Json> = api["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| !n["error"].is_null())
        .collect();
    assert_eq!(down.len(), 1, "{api}");
    assert_eq!(down[0]["addr"], json!(dead_addr), "{api}");
    let (status, text) = web.get("/metrics");
    assert_eq!(status, 200, "{text}");
    let s = samples(&text);
    assert_eq!(s.get("echomq_up"), Some(&1.0), "{text}");
    let key = format!("echomq_node_up{{node=\"{dead_addr}\"}}");
    assert_eq!(s.get(&key), Some(&0.0), "{text}");
    for (i, (name, owner)) in queues.iter().enumerate() {
        if *owner == b {
            let due = format!("echomq_queue_due{{queue=\"{name}\"}}");
            assert!(!s.contains_key(&due), "{text}");
        } else {
            assert_metrics(&text, name, want_of(i));
        }
    }

    // Once the replica has taken over, the slot map is read again and the
    // queue reads on its new primary (the writes were WAITed for).
    let started = Instant::now();
    let api = loop {
        let (_, api) = web.api();
        let (name, _) = queues.iter().find(|(_, o)| *o == b).unwrap();
        if queue_json(&api, name)["error"].is_null() {
            break api;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no takeover within 60 s: {api}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    for (i, (name, _)) in queues.iter().enumerate() {
        assert_counts(&api, name, want_of(i));
    }
}
