//! One scrape of the server: every number the page and the API show, read in
//! two round trips whatever the number of queues (TIME and the config first,
//! because every other command needs the server's `now`; then one pipeline).
//! Kept apart from any rendering so other outputs (e.g. /metrics) can share it.

use redis::aio::MultiplexedConnection;
use redis::{RedisError, Value};

/// The keys of one queue, in the layout of the example workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub schedule: String,
    pub pending: String,
    pub dead: String,
}

impl Keys {
    pub fn of(queue: &str) -> Keys {
        Keys {
            schedule: format!("{{{queue}}}:schedule"),
            pending: format!("{{{queue}}}:pending"),
            dead: format!("{{{queue}}}:dead"),
        }
    }
}

/// `[start_ms, end_ms)` split into `buckets`, as ECHO.SPREAD splits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_ms: i64,
    pub end_ms: i64,
    pub buckets: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    pub scheduled: i64,
    pub due: i64,
    pub pending: i64,
    pub dead: i64,
    pub spread: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueStats {
    pub name: String,
    /// Err holds the server's error for this queue alone (e.g. WRONGTYPE), so
    /// one misconfigured queue does not blank the others.
    pub counts: Result<Counts, String>,
}

/// An INFO value: the counters are integers, but a field a later module
/// version adds need not be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Int(i64),
    Float(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub now_ms: i64,
    pub window: Window,
    pub queues: Vec<QueueStats>,
    /// The `INFO echomq` fields, in the server's order.
    pub info: Vec<(String, Number)>,
}

/// The queue names in an `echomq.auto-promote` value: each `schedule pending`
/// pair whose keys are `{NAME}:schedule {NAME}:pending` gives NAME, once.
/// Pairs in another layout are left out: their dead set cannot be named.
pub fn queues_from_auto_promote(value: &str) -> Vec<String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    let mut names: Vec<String> = Vec::new();
    for pair in words.chunks_exact(2) {
        let (Some(a), Some(b)) = (tagged(pair[0], ":schedule"), tagged(pair[1], ":pending")) else {
            continue;
        };
        if a == b && !names.iter().any(|n| n == a) {
            names.push(a.to_string());
        }
    }
    names
}

fn tagged<'a>(key: &'a str, suffix: &str) -> Option<&'a str> {
    let name = key
        .strip_suffix(suffix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    // The server hashes only up to the first `}`: a name with one inside
    // would not keep its keys in one slot, so it is not this layout.
    (!name.is_empty() && !name.contains('}')).then_some(name)
}

/// The queues to show: those given on the command line, in order, then those
/// of the server's auto-promote config not already listed.
pub fn merge_queues(cli: &[String], from_config: &[String]) -> Vec<String> {
    let mut all: Vec<String> = Vec::with_capacity(cli.len() + from_config.len());
    for name in cli.iter().chain(from_config) {
        if !all.contains(name) {
            all.push(name.clone());
        }
    }
    all
}

/// `field:value` lines of an INFO text, values as numbers; section headers,
/// blank lines and non-numeric values are skipped.
pub fn parse_info(text: &str) -> Vec<(String, Number)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (field, value) = line.trim().split_once(':')?;
            let value = value.trim();
            let number = match value.parse::<i64>() {
                Ok(i) => Number::Int(i),
                Err(_) => Number::Float(value.parse::<f64>().ok().filter(|f| f.is_finite())?),
            };
            Some((field.to_string(), number))
        })
        .collect()
}

fn error(what: &str, detail: String) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected reply",
        format!("{what}: {detail}"),
    ))
}

/// An error reply as the server wrote it: `CODE detail`.
fn server_error(e: &redis::ServerError) -> String {
    match e.details() {
        Some(d) => format!("{} {d}", e.code()),
        None => e.code().to_string(),
    }
}

fn int(v: &Value) -> Result<i64, String> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::ServerError(e) => Err(server_error(e)),
        other => Err(format!("expected an integer, got {other:?}")),
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// Unix milliseconds from a TIME reply `[seconds, microseconds]`.
fn time_ms(v: &Value) -> Result<i64, RedisError> {
    let Value::Array(parts) = v else {
        return Err(error("TIME", format!("{v:?}")));
    };
    let field = |i: usize| -> Result<i64, RedisError> {
        parts
            .get(i)
            .and_then(text)
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| error("TIME", format!("{v:?}")))
    };
    // Checked: a reply from something that is not Valkey must not overflow.
    field(0)?
        .checked_mul(1000)
        .and_then(|ms| ms.checked_add(field(1).ok()? / 1000))
        .ok_or_else(|| error("TIME", format!("{v:?}")))
}

/// The value of CONFIG GET's reply for one name, or "" when the server has
/// no such config (an older module) or refuses CONFIG (e.g. ACL).
fn config_value(v: &Value) -> String {
    match v {
        Value::Array(kv) => kv.get(1).and_then(text).unwrap_or_default(),
        Value::Map(kv) => kv.first().and_then(|(_, v)| text(v)).unwrap_or_default(),
        _ => String::new(),
    }
}

fn spread(v: &Value) -> Result<Vec<i64>, String> {
    match v {
        Value::Array(items) => items.iter().map(int).collect(),
        Value::ServerError(e) => Err(server_error(e)),
        other => Err(format!("expected an array, got {other:?}")),
    }
}

/// Reads everything shown for `cli_queues` plus the auto-promoted queues.
pub async fn collect(
    con: &mut MultiplexedConnection,
    cli_queues: &[String],
    window_ms: i64,
    buckets: u32,
) -> Result<Snapshot, RedisError> {
    let first: Vec<Value> = redis::pipe()
        .ignore_errors()
        .cmd("TIME")
        .cmd("CONFIG")
        .arg("GET")
        .arg("echomq.auto-promote")
        .query_async(con)
        .await?;
    let (Some(time), Some(config)) = (first.first(), first.get(1)) else {
        return Err(error("TIME, CONFIG GET", format!("{first:?}")));
    };
    let now_ms = time_ms(time)?;
    let names = merge_queues(cli_queues, &queues_from_auto_promote(&config_value(config)));
    let window = Window {
        start_ms: now_ms,
        end_ms: now_ms.saturating_add(window_ms),
        buckets,
    };

    let mut pipe = redis::pipe();
    pipe.ignore_errors().cmd("INFO").arg("echomq");
    for name in &names {
        let k = Keys::of(name);
        pipe.cmd("ZCARD").arg(&k.schedule);
        pipe.cmd("ZCOUNT").arg(&k.schedule).arg("-inf").arg(now_ms);
        pipe.cmd("LLEN").arg(&k.pending);
        pipe.cmd("ZCARD").arg(&k.dead);
        pipe.cmd("ECHO.SPREAD")
            .arg(&k.schedule)
            .arg(window.start_ms)
            .arg(window.end_ms)
            .arg(buckets);
    }
    let replies: Vec<Value> = pipe.query_async(con).await?;
    if replies.len() != 1 + 5 * names.len() {
        return Err(error(
            "pipeline",
            format!(
                "{} replies for {} commands",
                replies.len(),
                1 + 5 * names.len()
            ),
        ));
    }
    let info = match &replies[0] {
        Value::ServerError(e) => return Err(error("INFO echomq", server_error(e))),
        v => parse_info(&text(v).unwrap_or_default()),
    };
    let queues = names
        .into_iter()
        .zip(replies[1..].chunks_exact(5))
        .map(|(name, r)| {
            let counts = (|| {
                Ok(Counts {
                    scheduled: int(&r[0])?,
                    due: int(&r[1])?,
                    pending: int(&r[2])?,
                    dead: int(&r[3])?,
                    spread: spread(&r[4])?,
                })
            })();
            QueueStats { name, counts }
        })
        .collect();
    Ok(Snapshot {
        now_ms,
        window,
        queues,
        info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_promote_pairs_in_the_examples_layout_name_their_queue() {
        assert_eq!(
            queues_from_auto_promote(
                "{orders}:schedule {orders}:pending {mail}:schedule {mail}:pending"
            ),
            ["orders", "mail"]
        );
        // Extra spaces and tabs separate words as the server's list does.
        assert_eq!(
            queues_from_auto_promote("  {a}:schedule\t{a}:pending  "),
            ["a"]
        );
    }

    #[test]
    fn auto_promote_off_or_in_another_layout_names_nothing() {
        assert!(queues_from_auto_promote("").is_empty());
        assert!(queues_from_auto_promote("   ").is_empty());
        // Not the examples' layout: no {NAME} tag, mismatched names, swapped roles.
        assert!(queues_from_auto_promote("sched pend").is_empty());
        assert!(queues_from_auto_promote("{a}:schedule {b}:pending").is_empty());
        assert!(queues_from_auto_promote("{a}:pending {a}:schedule").is_empty());
        assert!(queues_from_auto_promote("{}:schedule {}:pending").is_empty());
        assert!(queues_from_auto_promote("{a}b}:schedule {a}b}:pending").is_empty());
        // A trailing half pair is ignored, the whole pairs before it kept.
        assert_eq!(
            queues_from_auto_promote("{a}:schedule {a}:pending {b}:schedule"),
            ["a"]
        );
        // Mixed: only the pair in the layout counts.
        assert_eq!(
            queues_from_auto_promote("x:s x:p {q}:schedule {q}:pending"),
            ["q"]
        );
    }

    #[test]
    fn a_queue_listed_twice_is_shown_once_command_line_first() {
        assert_eq!(
            queues_from_auto_promote("{a}:schedule {a}:pending {a}:schedule {a}:pending"),
            ["a"]
        );
        let cli = vec!["b".to_string(), "a".to_string()];
        let config = vec!["a".to_string(), "c".to_string()];
        assert_eq!(merge_queues(&cli, &config), ["b", "a", "c"]);
    }

    #[test]
    fn info_fields_become_numbers() {
        let text = "# echomq\r\necho_x:1\r\nechomq_retries:12\r\nechomq_lag:1.5\r\nechomq_name:abc\r\n\r\n";
        assert_eq!(
            parse_info(text),
            vec![
                ("echo_x".to_string(), Number::Int(1)),
                ("echomq_retries".to_string(), Number::Int(12)),
                ("echomq_lag".to_string(), Number::Float(1.5)),
            ]
        );
        assert!(parse_info("").is_empty());
    }

    #[test]
    fn time_reply_to_milliseconds() {
        let v = Value::Array(vec![
            Value::BulkString(b"1795987450".to_vec()),
            Value::BulkString(b"887937".to_vec()),
        ]);
        assert_eq!(time_ms(&v).ok(), Some(1_795_987_450_887));
        assert!(time_ms(&Value::Nil).is_err());
        assert!(time_ms(&Value::Array(vec![Value::BulkString(b"x".to_vec())])).is_err());
    }

    #[test]
    fn config_get_reply_with_and_without_the_config() {
        let v = Value::Array(vec![
            Value::BulkString(b"echomq.auto-promote".to_vec()),
            Value::BulkString(b"{a}:schedule {a}:pending".to_vec()),
        ]);
        assert_eq!(config_value(&v), "{a}:schedule {a}:pending");
        assert_eq!(config_value(&Value::Array(vec![])), "");
    }
}
