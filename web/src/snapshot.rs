//! One scrape of the server: every number the page, the API and /metrics
//! show, read in three round trips whatever the number of queues: TIME and the
//! configs first, because every other command needs the server's `now` and
//! the queue names; then one pipeline with INFO and the TYPE of each queue's
//! three keys; then one pipeline that reads each key as what it is (ZCARD,
//! ZCOUNT and ECHO.SPREAD of a schedule, LLEN of a list `pending`, XLEN and
//! XINFO GROUPS of a stream, ZCARD of a dead set), so no command meets a key
//! of the wrong type: an error reply would count in the server's error stats,
//! and ECHO.SPREAD's in `echomq_errors`, changing what the next scrape shows.
//! Kept apart from any rendering: /api/queues and /metrics share it.

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
    /// LLEN of a list `pending`, XLEN of a stream.
    pub pending: i64,
    /// For a stream `pending`: the entries delivered to a consumer and not
    /// yet acknowledged, summed over its consumer groups. 0 for a list.
    pub in_flight: i64,
    pub dead: i64,
    /// ECHO.SPREAD's buckets; empty in a snapshot taken without them.
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
    /// The server's `maxmemory-policy` ("" when CONFIG GET is refused).
    pub maxmemory_policy: String,
    /// Pipelines sent to the server for this snapshot (each one round trip).
    pub round_trips: u32,
}

impl Snapshot {
    /// `echomq_eviction_policy_safe` from INFO: Some(false) when the server
    /// may evict queue keys, None when the module does not report it.
    pub fn eviction_policy_safe(&self) -> Option<bool> {
        self.info.iter().find_map(|(k, v)| {
            (k == "echomq_eviction_policy_safe").then_some(match v {
                Number::Int(i) => *i != 0,
                Number::Float(f) => *f != 0.0,
            })
        })
    }
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

/// The sum of the `pending` fields of an XINFO GROUPS reply (one map, or
/// one flat array of field/value pairs in RESP2, per group).
fn groups_pending(v: &Value) -> Result<i64, String> {
    let groups = match v {
        Value::Array(g) => g,
        Value::ServerError(e) => return Err(server_error(e)),
        other => return Err(format!("XINFO GROUPS: expected an array, got {other:?}")),
    };
    let mut sum: i64 = 0;
    for g in groups {
        let pending = match g {
            Value::Array(kv) => kv
                .chunks_exact(2)
                .find(|p| text(&p[0]).as_deref() == Some("pending"))
                .map(|p| int(&p[1])),
            Value::Map(kv) => kv
                .iter()
                .find(|(k, _)| text(k).as_deref() == Some("pending"))
                .map(|(_, v)| int(v)),
            other => Some(Err(format!("XINFO GROUPS: a group is {other:?}"))),
        };
        let n = pending.unwrap_or_else(|| Err("XINFO GROUPS: a group without `pending`".into()))?;
        sum = sum.saturating_add(n);
    }
    Ok(sum)
}

/// The server's own text for a key of the wrong type.
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// TYPE's answer for one key: its type name, or the error it gave.
fn key_type(v: &Value) -> Result<String, String> {
    match v {
        Value::ServerError(e) => Err(server_error(e)),
        v => text(v).ok_or_else(|| format!("TYPE: {v:?}")),
    }
}

/// How one key is read in the third round trip, from its TYPE.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Read {
    /// The key does not exist: its counts are 0, no command is sent.
    Missing,
    /// The expected type: the commands for it are in the pipeline.
    Send,
}

fn plan(t: &Result<String, String>, expected: &[&str]) -> Result<Read, String> {
    match t.as_deref() {
        Ok("none") => Ok(Read::Missing),
        Ok(t) if expected.contains(&t) => Ok(Read::Send),
        Ok(_) => Err(WRONGTYPE.to_string()),
        Err(e) => Err(e.clone()),
    }
}

/// The next reply of the third pipeline.
fn next<'a>(it: &mut impl Iterator<Item = &'a Value>) -> Result<&'a Value, String> {
    it.next().ok_or_else(|| "missing reply".to_string())
}

/// Reads everything shown for `cli_queues` plus the auto-promoted queues.
///
/// Every command is sent only to a key of the type it reads (TYPE first), so
/// a scrape never fails a command: a misconfigured queue does not bump the
/// server's error stats nor `echomq_errors` (ECHO.SPREAD on a wrong type
/// would), and scraping changes no number it reports.
///
/// `with_spread` false leaves ECHO.SPREAD out (each `spread` is then empty):
/// /metrics shows no histogram, and the spreads are nearly all of a scrape's
/// server time (one range count per bucket per queue).
pub async fn collect(
    con: &mut MultiplexedConnection,
    cli_queues: &[String],
    window_ms: i64,
    buckets: u32,
    with_spread: bool,
) -> Result<Snapshot, RedisError> {
    let first: Vec<Value> = redis::pipe()
        .ignore_errors()
        .cmd("TIME")
        .cmd("CONFIG")
        .arg("GET")
        .arg("echomq.auto-promote")
        .cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(con)
        .await?;
    let (Some(time), Some(config), Some(policy)) = (first.first(), first.get(1), first.get(2))
    else {
        return Err(error("TIME, CONFIG GET", format!("{first:?}")));
    };
    let now_ms = time_ms(time)?;
    let maxmemory_policy = config_value(policy);
    let names = merge_queues(cli_queues, &queues_from_auto_promote(&config_value(config)));
    let window = Window {
        start_ms: now_ms,
        end_ms: now_ms.saturating_add(window_ms),
        buckets,
    };
    let keys: Vec<Keys> = names.iter().map(|n| Keys::of(n)).collect();

    // Second: INFO and the three keys' types.
    let mut pipe = redis::pipe();
    pipe.ignore_errors().cmd("INFO").arg("echomq");
    for k in &keys {
        pipe.cmd("TYPE").arg(&k.schedule);
        pipe.cmd("TYPE").arg(&k.pending);
        pipe.cmd("TYPE").arg(&k.dead);
    }
    let replies: Vec<Value> = pipe.query_async(con).await?;
    let want = 1 + 3 * keys.len();
    if replies.len() != want {
        return Err(error(
            "pipeline",
            format!("{} replies for {want} commands", replies.len()),
        ));
    }
    let info = match &replies[0] {
        Value::ServerError(e) => return Err(error("INFO echomq", server_error(e))),
        v => parse_info(&text(v).unwrap_or_default()),
    };
    // Per queue: how to read the schedule, `pending` (and whether it is a
    // stream) and the dead set.
    type Plan = (
        Result<Read, String>,
        Result<(Read, bool), String>,
        Result<Read, String>,
    );
    let plans: Vec<Plan> = replies[1..]
        .chunks_exact(3)
        .map(|t| {
            let pending = key_type(&t[1]);
            let stream = pending.as_deref() == Ok("stream");
            (
                plan(&key_type(&t[0]), &["zset"]),
                plan(&pending, &["list", "stream"]).map(|r| (r, stream)),
                plan(&key_type(&t[2]), &["zset"]),
            )
        })
        .collect();

    // Third: the counts, each from a key of the right type.
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut sent = 0;
    for (k, (schedule, pending, dead)) in keys.iter().zip(&plans) {
        if schedule == &Ok(Read::Send) {
            pipe.cmd("ZCARD").arg(&k.schedule);
            pipe.cmd("ZCOUNT").arg(&k.schedule).arg("-inf").arg(now_ms);
            sent += 2;
            if with_spread {
                pipe.cmd("ECHO.SPREAD")
                    .arg(&k.schedule)
                    .arg(window.start_ms)
                    .arg(window.end_ms)
                    .arg(buckets);
                sent += 1;
            }
        }
        match pending {
            Ok((Read::Send, true)) => {
                pipe.cmd("XLEN").arg(&k.pending);
                pipe.cmd("XINFO").arg("GROUPS").arg(&k.pending);
                sent += 2;
            }
            Ok((Read::Send, false)) => {
                pipe.cmd("LLEN").arg(&k.pending);
                sent += 1;
            }
            _ => {}
        }
        if dead == &Ok(Read::Send) {
            pipe.cmd("ZCARD").arg(&k.dead);
            sent += 1;
        }
    }
    let mut round_trips = 2;
    let third: Vec<Value> = if sent == 0 {
        Vec::new()
    } else {
        round_trips += 1;
        pipe.query_async(con).await?
    };
    if third.len() != sent {
        return Err(error(
            "pipeline",
            format!("{} replies for {sent} commands", third.len()),
        ));
    }
    let mut it = third.iter();
    let queues = names
        .into_iter()
        .zip(plans)
        .map(|(name, (schedule, pending, dead))| {
            // Every reply of this queue is taken, whatever fails, so the
            // next queue reads its own.
            let schedule = schedule.map(|r| -> Result<(i64, i64, Vec<i64>), String> {
                match r {
                    Read::Missing if with_spread => Ok((0, 0, vec![0; buckets as usize])),
                    Read::Missing => Ok((0, 0, Vec::new())),
                    Read::Send => {
                        let (a, b) = (next(&mut it), next(&mut it));
                        let c = if with_spread {
                            spread(next(&mut it)?)?
                        } else {
                            Vec::new()
                        };
                        Ok((int(a?)?, int(b?)?, c))
                    }
                }
            });
            let pending = pending.map(|r| -> Result<(i64, i64), String> {
                match r {
                    (Read::Missing, _) => Ok((0, 0)),
                    (Read::Send, true) => {
                        let (len, groups) = (next(&mut it), next(&mut it));
                        Ok((int(len?)?, groups_pending(groups?)?))
                    }
                    (Read::Send, false) => Ok((int(next(&mut it)?)?, 0)),
                }
            });
            let dead = dead.map(|r| -> Result<i64, String> {
                match r {
                    Read::Missing => Ok(0),
                    Read::Send => int(next(&mut it)?),
                }
            });
            let counts = (|| -> Result<Counts, String> {
                let (scheduled, due, spread) = schedule??;
                let (pending, in_flight) = pending??;
                Ok(Counts {
                    scheduled,
                    due,
                    pending,
                    in_flight,
                    dead: dead??,
                    spread,
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
        maxmemory_policy,
        round_trips,
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
    fn xinfo_groups_pending_summed_in_resp2_and_resp3() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp2 = Value::Array(vec![
            Value::Array(vec![
                bulk("name"),
                bulk("workers"),
                bulk("pending"),
                Value::Int(3),
            ]),
            Value::Array(vec![
                bulk("name"),
                bulk("audit"),
                bulk("pending"),
                Value::Int(4),
            ]),
        ]);
        assert_eq!(groups_pending(&resp2), Ok(7));
        let resp3 = Value::Array(vec![Value::Map(vec![
            (bulk("name"), bulk("workers")),
            (bulk("pending"), Value::Int(2)),
        ])]);
        assert_eq!(groups_pending(&resp3), Ok(2));
        assert_eq!(groups_pending(&Value::Array(vec![])), Ok(0));
        assert!(groups_pending(&Value::Array(vec![Value::Array(vec![bulk("name")])])).is_err());
        assert!(groups_pending(&Value::Nil).is_err());
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
