//! What the suites read back from a server: the module's INFO counters, a
//! schedule's release state, and the ACL users docs/security.md documents
//! with what `ACL LOG` says they were refused.

use std::collections::BTreeMap;

use redis::{Connection, Value};

use crate::{info_field, run, workspace_root};

/// `INFO echomq`'s counter `field`.
pub fn echomq_stat(con: &mut Connection, field: &str) -> u64 {
    info_field(con, "echomq", field)
        .parse()
        .unwrap_or_else(|_| panic!("INFO echomq has no {field}"))
}

/// `ECHO.LIMITS schedule` on `con` (RESP2: a flat field, value array) as
/// field -> integer; nil (a schedule not listed) is absent, and the rates
/// are left out (they are doubles).
pub fn limits_of(con: &mut Connection, schedule: &str) -> BTreeMap<String, i64> {
    let reply: Vec<Value> = run(con, redis::cmd("ECHO.LIMITS").arg(schedule));
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

/// The words of docs/security.md's `ACL SETUSER <user> ...` line, its
/// password placeholder replaced by `password`.
pub fn acl_line(user: &str, password: &str) -> Vec<String> {
    let path = workspace_root().join("docs/security.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let prefix = format!("ACL SETUSER {user} ");
    let lines: Vec<&str> = doc.lines().filter(|l| l.starts_with(&prefix)).collect();
    assert_eq!(lines.len(), 1, "one ACL line for {user}: {lines:?}");
    lines[0]
        .split_whitespace()
        .map(|w| match w.strip_suffix("-PASSWORD") {
            Some(p) if p.starts_with('>') => format!(">{password}"),
            _ => w.to_string(),
        })
        .collect()
}

/// The `ACL LOG` entries as (username, command or key refused) pairs.
pub fn acl_log(con: &mut Connection) -> Vec<(String, String)> {
    let entries: Vec<BTreeMap<String, Value>> = run(con, redis::cmd("ACL").arg("LOG"));
    let text = |v: Option<&Value>| match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        other => format!("{other:?}"),
    };
    entries
        .iter()
        .map(|e| (text(e.get("username")), text(e.get("object"))))
        .collect()
}
