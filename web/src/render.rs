//! The JSON of `GET /api/queues`, from a snapshot.

use serde_json::{json, Map, Value};

use crate::snapshot::{
    Counts, Group, Groups, Number, QueueStats, Release, Repeat, Repeats, Shard, Snapshot,
};

/// A queue's release limit and hold: null from a module without
/// ECHO.LIMITS, `{"error": ...}` when the server refused it; otherwise every
/// field, those of the limit null for a schedule not in
/// `echomq.release-limits`.
fn release_json(c: &Counts, now_ms: i64, held_back: Option<i64>) -> Value {
    let r: &Release = match &c.release {
        None => return Value::Null,
        Some(Err(e)) => return json!({ "error": e }),
        Some(Ok(r)) => r,
    };
    let l = r.limit.as_ref();
    json!({
        "limited": l.is_some(),
        "rate_per_second": l.map(|l| l.rate_per_second),
        "rate_in_force_per_second": l.map(|l| l.in_force_per_second),
        "adaptive": l.map(|l| l.adaptive),
        "burst": l.map(|l| l.burst),
        "available": l.map(|l| l.available),
        "held_until_ms": r.held_until_ms,
        "held_for_ms": r.held_for_ms(now_ms),
        "held_back": held_back.unwrap_or_else(|| r.held_back(c.due)),
        "released": l.map(|l| l.released),
        "failures": l.map(|l| l.failures),
    })
}

/// A group of the `largest` list: its backlog.
fn backlog_json(g: &Group) -> Value {
    json!({ "group": g.name, "members": g.members, "due": g.due })
}

/// A group of the `limited` list: its backlog and what holds it back.
fn limited_json(g: &Group, now_ms: i64) -> Value {
    json!({
        "group": g.name,
        "members": g.members,
        "due": g.due,
        "limit_rate_per_second": g.limit_rate_per_second,
        "limit_burst": g.limit_burst,
        "available": g.available,
        "held_until_ms": g.held_until_ms,
        "held_for_ms": g.held_until_ms.saturating_sub(now_ms).max(0),
    })
}

/// A queue's groups: null when the server shows none (a module without
/// ECHO.GROUPS, a schedule it cannot group), `{"error": ...}` when it
/// refused; otherwise the count, the limited count and the two lists of at
/// most ten, `truncated` when more groups were there than a scrape reads.
fn groups_json(c: &Counts, now_ms: i64) -> Value {
    let g: &Groups = match &c.groups {
        None => return Value::Null,
        Some(Err(e)) => return json!({ "error": e }),
        Some(Ok(g)) => g,
    };
    json!({
        "count": g.count,
        "truncated": g.truncated(),
        "largest": g.largest.iter().map(backlog_json).collect::<Vec<_>>(),
        "limited_count": g.limited_count,
        "limited": g.limited.iter().map(|l| limited_json(l, now_ms)).collect::<Vec<_>>(),
    })
}

/// One recurring definition: what ECHO.REPEATS says of it, and how long
/// until it fires (negative once due and not yet released; null when it has
/// no armed occurrence).
fn repeat_json(r: &Repeat, now_ms: i64) -> Value {
    json!({
        "id": r.id,
        "spec": r.spec,
        "jitter_ms": r.jitter_ms,
        "tz": r.tz,
        "from_ms": r.from_ms,
        "until_ms": r.until_ms,
        "next_ms": r.next_ms,
        "fire_at_ms": r.fire_at_ms,
        "fire_in_ms": r.fire_at_ms.map(|at| at.saturating_sub(now_ms)),
        "payload_key": r.payload_key,
    })
}

/// A queue's recurring definitions: null from a module without
/// ECHO.REPEATS, `{"error": ...}` when the server refused it; otherwise the
/// count, the unarmed count and the first ten to fire (the unarmed first).
fn repeats_json(c: &Counts, now_ms: i64) -> Value {
    let r: &Repeats = match &c.repeats {
        None => return Value::Null,
        Some(Err(e)) => return json!({ "error": e }),
        Some(Ok(r)) => r,
    };
    json!({
        "count": r.count,
        "unarmed": r.unarmed,
        "next": r.next.iter().map(|x| repeat_json(x, now_ms)).collect::<Vec<_>>(),
    })
}

/// A queue's or a shard's figures after `head` (its name or tag), or its
/// error.
fn figures_json(
    mut head: Map<String, Value>,
    counts: &Result<Counts, String>,
    now_ms: i64,
    held_back: Option<i64>,
) -> Map<String, Value> {
    let c = match counts {
        Ok(c) => c,
        Err(e) => {
            head.insert("error".into(), json!(e));
            return head;
        }
    };
    let fields = json!({
        "scheduled": c.scheduled,
        "due": c.due,
        "pending": c.pending,
        "in_flight": c.in_flight,
        "dead": c.dead,
        "spread": c.spread,
        "release": release_json(c, now_ms, held_back),
        "groups": groups_json(c, now_ms),
        "repeats": repeats_json(c, now_ms),
    });
    if let Value::Object(fields) = fields {
        head.extend(fields);
    }
    head
}

/// One shard: its tag, on a cluster the primary it was read on, its own
/// figures.
fn shard_json(sh: &Shard, now_ms: i64) -> Value {
    let mut head = Map::new();
    head.insert("tag".into(), json!(sh.tag));
    if let Some(node) = &sh.node {
        head.insert("node".into(), json!(node));
    }
    Value::Object(figures_json(head, &sh.counts, now_ms, None))
}

/// A queue: a single one as it always was; a sharded one with its shards'
/// figures summed, `shards` its shard count, and with `per_shard` each
/// shard's own figures in `per_shard` (bounded by the --sharded counts, but
/// a spread per shard makes the reply N times larger, so only on request).
fn queue_json(q: &QueueStats, now_ms: i64, per_shard: bool) -> Value {
    let mut head = Map::new();
    head.insert("name".into(), json!(q.name));
    let mut out = figures_json(head, &q.counts, now_ms, crate::shards::held_back(q));
    if !q.shards.is_empty() {
        out.insert("shards".into(), json!(q.shards.len()));
        if per_shard {
            let list: Vec<Value> = q.shards.iter().map(|sh| shard_json(sh, now_ms)).collect();
            out.insert("per_shard".into(), Value::Array(list));
        }
    }
    Value::Object(out)
}

pub fn queues_json(s: &Snapshot, per_shard: bool) -> Value {
    let queues: Vec<Value> = s
        .queues
        .iter()
        .map(|q| queue_json(q, s.now_ms, per_shard))
        .collect();
    let info: Map<String, Value> = s
        .info
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Number::Int(i) => json!(i),
                Number::Float(f) => json!(f),
            };
            (k.clone(), v)
        })
        .collect();
    let mut out = json!({
        "now_ms": s.now_ms,
        "window": {
            "start_ms": s.window.start_ms,
            "end_ms": s.window.end_ms,
            "ms": s.window.end_ms.saturating_sub(s.window.start_ms),
            "buckets": s.window.buckets,
        },
        "queues": queues,
        "info": info,
        "maxmemory_policy": s.maxmemory_policy,
        "eviction_policy_safe": s.eviction_policy_safe(),
        "round_trips": s.round_trips,
    });
    // Only on a cluster: a single server's JSON is what it was.
    if !s.nodes.is_empty() {
        let nodes: Vec<Value> = s
            .nodes
            .iter()
            .map(|n| json!({ "addr": n.addr, "queues": n.queues, "error": n.error }))
            .collect();
        out["nodes"] = Value::Array(nodes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Limit, QueueStats, Repeat, Repeats, Window};

    #[test]
    fn a_snapshot_as_json() {
        let s = Snapshot {
            now_ms: 1000,
            window: Window {
                start_ms: 1000,
                end_ms: 61000,
                buckets: 3,
            },
            queues: vec![
                QueueStats {
                    name: "a".into(),
                    counts: Ok(Counts {
                        scheduled: 5,
                        due: 1,
                        pending: 2,
                        in_flight: 1,
                        dead: 3,
                        spread: vec![1, 0, 3],
                        release: Some(Ok(Release {
                            limit: Some(Limit {
                                rate_per_second: 100.0,
                                in_force_per_second: 50.0,
                                burst: 10,
                                adaptive: true,
                                available: 0,
                                released: 12,
                                failures: 3,
                            }),
                            held_until_ms: 1250,
                        })),
                        groups: None,
                        repeats: Some(Ok(Repeats {
                            count: 2,
                            unarmed: 1,
                            next: vec![
                                Repeat {
                                    id: "gone".into(),
                                    spec: "every:60000".into(),
                                    jitter_ms: 0,
                                    tz: "UTC".into(),
                                    from_ms: None,
                                    until_ms: None,
                                    next_ms: 900,
                                    fire_at_ms: None,
                                    payload_key: None,
                                },
                                Repeat {
                                    id: "hourly".into(),
                                    spec: "cron:0 * * * *".into(),
                                    jitter_ms: 300_000,
                                    tz: "Europe/Berlin".into(),
                                    from_ms: Some(5),
                                    until_ms: Some(9_000_000),
                                    next_ms: 3_600_000,
                                    fire_at_ms: Some(3_700_000),
                                    payload_key: Some("{a}:jobs".into()),
                                },
                            ],
                        })),
                    }),
                    shards: Vec::new(),
                },
                QueueStats {
                    name: "free".into(),
                    counts: Ok(Counts {
                        scheduled: 4,
                        due: 4,
                        pending: 0,
                        in_flight: 0,
                        dead: 0,
                        spread: vec![0, 0, 0],
                        release: Some(Ok(Release {
                            limit: None,
                            held_until_ms: 0,
                        })),
                        groups: None,
                        repeats: None,
                    }),
                    shards: Vec::new(),
                },
                QueueStats {
                    name: "old".into(),
                    counts: Ok(Counts {
                        scheduled: 0,
                        due: 0,
                        pending: 0,
                        in_flight: 0,
                        dead: 0,
                        spread: vec![0, 0, 0],
                        release: None,
                        groups: None,
                        repeats: Some(Err("NOPERM no".into())),
                    }),
                    shards: Vec::new(),
                },
                QueueStats {
                    name: "b".into(),
                    counts: Err("WRONGTYPE x".into()),
                    shards: Vec::new(),
                },
            ],
            info: vec![
                ("echomq_retries".into(), Number::Int(4)),
                ("echomq_x".into(), Number::Float(0.5)),
                ("echomq_eviction_policy_safe".into(), Number::Int(0)),
            ],
            maxmemory_policy: "allkeys-lru".into(),
            round_trips: 3,
            nodes: Vec::new(),
        };
        assert_eq!(
            queues_json(&s, false),
            json!({
                "now_ms": 1000,
                "window": {"start_ms": 1000, "end_ms": 61000, "ms": 60000, "buckets": 3},
                "queues": [
                    {"name": "a", "scheduled": 5, "due": 1, "pending": 2, "in_flight": 1, "dead": 3, "spread": [1, 0, 3],
                     "release": {"limited": true, "rate_per_second": 100.0, "rate_in_force_per_second": 50.0,
                                 "adaptive": true, "burst": 10, "available": 0, "held_until_ms": 1250,
                                 "held_for_ms": 250, "held_back": 1, "released": 12, "failures": 3},
                     "groups": null,
                     "repeats": {"count": 2, "unarmed": 1, "next": [
                         {"id": "gone", "spec": "every:60000", "jitter_ms": 0, "tz": "UTC", "from_ms": null,
                          "until_ms": null, "next_ms": 900, "fire_at_ms": null, "fire_in_ms": null, "payload_key": null},
                         {"id": "hourly", "spec": "cron:0 * * * *", "jitter_ms": 300000, "tz": "Europe/Berlin",
                          "from_ms": 5, "until_ms": 9000000, "next_ms": 3600000, "fire_at_ms": 3700000,
                          "fire_in_ms": 3699000, "payload_key": "{a}:jobs"}]}},
                    {"name": "free", "scheduled": 4, "due": 4, "pending": 0, "in_flight": 0, "dead": 0, "spread": [0, 0, 0],
                     "release": {"limited": false, "rate_per_second": null, "rate_in_force_per_second": null,
                                 "adaptive": null, "burst": null, "available": null, "held_until_ms": 0,
                                 "held_for_ms": 0, "held_back": 0, "released": null, "failures": null},
                     "groups": null, "repeats": null},
                    {"name": "old", "scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0, "spread": [0, 0, 0],
                     "release": null, "groups": null, "repeats": {"error": "NOPERM no"}},
                    {"name": "b", "error": "WRONGTYPE x"},
                ],
                "info": {"echomq_retries": 4, "echomq_x": 0.5, "echomq_eviction_policy_safe": 0},
                "maxmemory_policy": "allkeys-lru",
                "eviction_policy_safe": false,
                "round_trips": 3,
            })
        );
        // On a cluster: each primary, after the single server's fields.
        let mut s = s;
        s.nodes = vec![crate::snapshot::NodeStatus {
            addr: "10.0.0.1:7000".into(),
            queues: 2,
            error: Some("Connection refused".into()),
        }];
        assert_eq!(
            queues_json(&s, false)["nodes"],
            json!([{"addr": "10.0.0.1:7000", "queues": 2, "error": "Connection refused"}])
        );
    }
}
