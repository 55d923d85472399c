//! The cluster of echomq-testkit (three primaries with one replica each,
//! every node loading the module; re-exported) and the helpers the module's
//! cluster suites share.

#![allow(dead_code)]

use std::collections::BTreeMap;

pub use echomq_testkit::cluster::*;

use super::*;

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
