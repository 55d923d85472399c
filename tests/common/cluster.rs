//! The cluster of echomq-testkit (three primaries with one replica each,
//! every node loading the module; re-exported) and the helpers the module's
//! cluster suites share.

#![allow(dead_code)]

use std::collections::BTreeMap;

pub use echomq_testkit::cluster::*;
// Not every suite reads them.
#[allow(unused_imports)]
pub use echomq_testkit::inspect::{echomq_stat, limits_from, limits_of};

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
