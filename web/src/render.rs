//! The JSON of `GET /api/queues`, from a snapshot.

use serde_json::{json, Map, Value};

use crate::snapshot::{Number, Snapshot};

pub fn queues_json(s: &Snapshot) -> Value {
    let queues: Vec<Value> = s
        .queues
        .iter()
        .map(|q| match &q.counts {
            Ok(c) => json!({
                "name": q.name,
                "scheduled": c.scheduled,
                "due": c.due,
                "pending": c.pending,
                "in_flight": c.in_flight,
                "dead": c.dead,
                "spread": c.spread,
            }),
            Err(e) => json!({ "name": q.name, "error": e }),
        })
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
    json!({
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Counts, QueueStats, Window};

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
                    }),
                },
                QueueStats {
                    name: "b".into(),
                    counts: Err("WRONGTYPE x".into()),
                },
            ],
            info: vec![
                ("echomq_retries".into(), Number::Int(4)),
                ("echomq_x".into(), Number::Float(0.5)),
                ("echomq_eviction_policy_safe".into(), Number::Int(0)),
            ],
            maxmemory_policy: "allkeys-lru".into(),
            round_trips: 3,
        };
        assert_eq!(
            queues_json(&s),
            json!({
                "now_ms": 1000,
                "window": {"start_ms": 1000, "end_ms": 61000, "ms": 60000, "buckets": 3},
                "queues": [
                    {"name": "a", "scheduled": 5, "due": 1, "pending": 2, "in_flight": 1, "dead": 3, "spread": [1, 0, 3]},
                    {"name": "b", "error": "WRONGTYPE x"},
                ],
                "info": {"echomq_retries": 4, "echomq_x": 0.5, "echomq_eviction_policy_safe": 0},
                "maxmemory_policy": "allkeys-lru",
                "eviction_policy_safe": false,
                "round_trips": 3,
            })
        );
    }
}
