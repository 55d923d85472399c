//! The module's integration tests' shared part: the servers, replicas,
//! clusters and commands of echomq-testkit (re-exported, so a suite says
//! `use common::*`), and the helpers only the module's suites use.

#![allow(dead_code)]

use std::thread::sleep;
use std::time::{Duration, Instant};

pub mod cluster;

pub use echomq_testkit::*;

/// The whole-dataset digest: equal digests mean equal data.
pub fn digest(con: &mut Connection) -> String {
    q!(con, "DEBUG", "DIGEST")
}

/// Waits until `n` clients are blocked on the server.
pub fn wait_blocked_clients(con: &mut Connection, n: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(con, "clients", "blocked_clients") != n.to_string() {
        assert!(Instant::now() < deadline, "clients did not block");
        sleep(Duration::from_millis(5));
    }
}

/// Whether the server is Valkey (Redis 7.0 runs the compatibility suites).
pub fn is_valkey(con: &mut Connection) -> bool {
    info_field(con, "server", "server_name") == "valkey"
}

/// The names of the loaded modules (`MODULE LIST`). Valkey 9 lists its Lua
/// engine (`lua`) as a module too, so a test asks whether echomq is there,
/// never whether the list is empty.
pub fn module_names(con: &mut Connection) -> Vec<String> {
    let modules: Vec<Value> = run(con, redis::cmd("MODULE").arg("LIST"));
    modules
        .into_iter()
        .filter_map(|module| {
            // Each entry is a name/value list (RESP2) or a map (RESP3).
            let fields: Vec<(String, Value)> = match module {
                Value::Map(pairs) => pairs
                    .into_iter()
                    .filter_map(|(k, v)| Some((String::from_redis_value(k).ok()?, v)))
                    .collect(),
                Value::Array(items) => items
                    .chunks(2)
                    .filter_map(|pair| match pair {
                        [k, v] => Some((String::from_redis_value(k.clone()).ok()?, v.clone())),
                        _ => None,
                    })
                    .collect(),
                _ => return None,
            };
            fields
                .into_iter()
                .find(|(k, _)| k == "name")
                .and_then(|(_, v)| String::from_redis_value(v).ok())
        })
        .collect()
}

/// Whether `MODULE LIST` names echomq.
pub fn echomq_loaded(con: &mut Connection) -> bool {
    module_names(con).iter().any(|name| name == "echomq")
}

/// One event of `LATENCY LATEST`, read by position of the fields every
/// version has: `[name, time, latest ms, max ms]` on Valkey 8 and Redis 7,
/// with two more (sum, count) on Valkey 8.1 and 9.
#[derive(Debug)]
pub struct LatencyLatest {
    pub time: i64,
    pub latest_ms: i64,
    pub max_ms: i64,
}

/// `event`'s line of `LATENCY LATEST`, if the monitor has one.
pub fn latency_latest(con: &mut Connection, event: &str) -> Option<LatencyLatest> {
    let latest: Vec<Vec<Value>> = run(con, redis::cmd("LATENCY").arg("LATEST"));
    latest.into_iter().find_map(|fields| {
        let name = String::from_redis_value(fields.first()?.clone()).ok()?;
        let number = |i: usize| i64::from_redis_value(fields.get(i)?.clone()).ok();
        (name == event).then_some(LatencyLatest {
            time: number(1)?,
            latest_ms: number(2)?,
            max_ms: number(3)?,
        })
    })
}

/// Keyspace events seen while `work` runs, with `prefix` cut from key names.
pub fn events(server: &Server, prefix: &str, work: impl FnOnce(&mut Connection)) -> Vec<String> {
    let mut con = server.conn();
    // KEA plus n: new-key events too, so their order is compared as well.
    let _: () = q!(&mut con, "CONFIG", "SET", "notify-keyspace-events", "KEAn");
    let mut sub_con = server.conn();
    sub_con
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut sub = sub_con.as_pubsub();
    sub.psubscribe(format!("__keyspace@0__:{prefix}*")).unwrap();
    sub.psubscribe("__keyevent@0__:*").unwrap();
    sub.subscribe("done").unwrap();
    work(&mut con);
    let _: () = q!(&mut con, "PUBLISH", "done", 1);
    let mut seen = Vec::new();
    loop {
        let msg = sub.get_message().unwrap();
        if msg.get_channel_name() == "done" {
            return seen;
        }
        let payload: String = msg.get_payload().unwrap();
        if msg.get_channel_name().starts_with("__keyevent") && !payload.starts_with(prefix) {
            continue;
        }
        seen.push(format!(
            "{} {}",
            msg.get_channel_name().replace(prefix, ""),
            payload.replace(prefix, "")
        ));
    }
}
