//! One scrape of the server: every number the page, the API and /metrics
//! show, read in three round trips whatever the number of queues: TIME,
//! ECHO.QUEUES (the auto-promoted pairs) and INFO memory (the eviction
//! policy) first, because every other command needs the server's `now` and
//! the queue names; then one pipeline with INFO echomq and the TYPE of each
//! queue's three keys; then one pipeline that reads each key as what it is
//! (ZCARD, ZCOUNT and ECHO.SPREAD of a schedule, LLEN of a list `pending`,
//! XLEN and XINFO GROUPS of a stream, ZCARD of a dead set), so no command
//! meets a key of the wrong type: an error reply would count in the server's
//! error stats, and ECHO.SPREAD's in `echomq_errors`, changing what the next
//! scrape shows. The same pipeline asks ECHO.LIMITS of each schedule (its
//! release limit and hold, which need no key to exist) and the first page of
//! its ECHO.GROUPS (the groups live in keys of their own); a queue with more
//! than one page of groups takes one more round trip per page, all such
//! queues' pages in one pipeline, up to [`GROUP_PAGES`] pages. Each queue's
//! commands in that pipeline come from one plan ([`Step`]s), which sends
//! them and then decodes their replies.
//! Only read commands, none of them @admin or @dangerous (no CONFIG): see
//! docs/security.md for the ACL user this needs.
//! Kept apart from any rendering: /api/queues and /metrics share it.

use redis::aio::MultiplexedConnection;
use redis::{RedisError, Value};

/// The keys of one queue, in the layout of the client libraries.
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

#[derive(Debug, Clone, PartialEq)]
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
    /// ECHO.LIMITS of the schedule: None when the module has no such
    /// command (an older one), Err with the server's error otherwise (e.g.
    /// a user not allowed it), which leaves the counts shown.
    pub release: Option<Result<Release, String>>,
    /// ECHO.GROUPS of the schedule: None when there are no groups to read
    /// (a module without the command, a schedule name without a hash tag),
    /// Err with the server's error otherwise, which leaves the counts shown.
    pub groups: Option<Result<Groups, String>>,
    /// ECHO.REPEATS of the schedule: None from a module without the
    /// command, Err with the server's error otherwise (e.g. a user not
    /// allowed it, a definitions hash of another type), which leaves the
    /// counts shown.
    pub repeats: Option<Result<Repeats, String>>,
}

/// How many recurring definitions [`Repeats`] lists.
pub const REPEATS_LISTED: usize = 10;

/// One recurring definition, as an ECHO.REPEATS entry gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Repeat {
    pub id: String,
    /// `every:<ms>` or `cron:<fields>`, as given to ECHO.REPEAT.
    pub spec: String,
    pub jitter_ms: i64,
    /// The zone's name, `UTC` for a definition without `TZ`.
    pub tz: String,
    pub from_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// The nominal time of the armed occurrence, `<id>@<next_ms>`.
    pub next_ms: i64,
    /// Its fire time (nominal plus the jitter drawn), None when the member
    /// is gone from the schedule (removed by hand): then nothing fires
    /// until an ECHO.REPEAT of the definition arms it again.
    pub fire_at_ms: Option<i64>,
    pub payload_key: Option<String>,
}

/// What a scrape read of a schedule's recurring definitions, bounded: two
/// counts and the first [`REPEATS_LISTED`] to fire, whatever their number.
#[derive(Debug, Clone, PartialEq)]
pub struct Repeats {
    /// The definitions.
    pub count: i64,
    /// Of those, the ones with no armed occurrence (`fire-at-ms` nil).
    pub unarmed: i64,
    /// The unarmed first, then the soonest to fire, then by id.
    pub next: Vec<Repeat>,
}

/// Groups asked per ECHO.GROUPS page, the command's most.
pub const GROUP_PAGE: u32 = 1000;
/// Pages of ECHO.GROUPS read per queue per scrape: beyond
/// `GROUP_PAGES * GROUP_PAGE` groups (100,000), the figures are those of the
/// first ones by name, and [`Groups::truncated`] says so.
pub const GROUP_PAGES: u32 = 100;
/// How many groups each list of [`Groups`] names.
pub const GROUPS_LISTED: usize = 10;

/// One group of a grouped schedule, as an ECHO.GROUPS entry gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub name: String,
    pub members: i64,
    pub due: i64,
    /// The group's limit (None when not limited): per second, and burst.
    pub limit_rate_per_second: Option<f64>,
    pub limit_burst: Option<i64>,
    /// What its limit lets leave now; None when not limited.
    pub available: Option<i64>,
    pub waiting_until_ms: i64,
    /// The end of the group's own hold, 0 for none.
    pub held_until_ms: i64,
}

impl Group {
    /// Whether the group is held back at `now_ms`: due members and no room
    /// in its limit, or its own hold not yet over.
    pub fn limited(&self, now_ms: i64) -> bool {
        (self.due > 0 && self.available == Some(0)) || self.held_until_ms > now_ms
    }
}

/// What a scrape read of a schedule's groups, bounded: two counts and the
/// first [`GROUPS_LISTED`] of two lists, whatever the number of groups.
/// The ungrouped members (ECHO.GROUPS's group with the empty name) are
/// not a group here: they are the schedule's own `scheduled`.
#[derive(Debug, Clone, PartialEq)]
pub struct Groups {
    /// Named groups with members, of those read.
    pub count: i64,
    /// Of those, the groups [`Group::limited`] now.
    pub limited_count: i64,
    /// The largest backlogs: most members first, then by name.
    pub largest: Vec<Group>,
    /// Groups limited now: most due first, then by name.
    pub limited: Vec<Group>,
    /// ECHO.GROUPS pages read.
    pub pages: u32,
    /// The cursor of the next page, "0" when every group was read.
    pub cursor: String,
}

impl Groups {
    fn new() -> Groups {
        Groups {
            count: 0,
            limited_count: 0,
            largest: Vec::new(),
            limited: Vec::new(),
            pages: 0,
            cursor: "0".into(),
        }
    }

    /// Whether some groups were left unread (more than [`GROUP_PAGES`]
    /// pages): the figures are then those of the first `count` groups.
    pub fn truncated(&self) -> bool {
        self.cursor != "0"
    }

    /// One ECHO.GROUPS reply, `[cursor, [entry...]]`, added.
    fn add_page(&mut self, v: &Value, now_ms: i64) -> Result<(), String> {
        let (cursor, entries) = match v {
            Value::Array(parts) => match &parts[..] {
                [cursor, Value::Array(entries)] => (
                    text(cursor).ok_or_else(|| format!("ECHO.GROUPS: cursor {cursor:?}"))?,
                    entries,
                ),
                _ => return Err(format!("ECHO.GROUPS: {v:?}")),
            },
            Value::ServerError(e) => return Err(server_error(e)),
            other => return Err(format!("ECHO.GROUPS: {other:?}")),
        };
        for entry in entries {
            let g = group(entry).map_err(|e| format!("ECHO.GROUPS: {e}"))?;
            if g.name.is_empty() {
                continue;
            }
            self.count = self.count.saturating_add(1);
            if g.limited(now_ms) {
                self.limited_count = self.limited_count.saturating_add(1);
                self.limited.push(g.clone());
            }
            self.largest.push(g);
        }
        let by = |key: fn(&Group) -> i64| {
            move |a: &Group, b: &Group| key(b).cmp(&key(a)).then_with(|| a.name.cmp(&b.name))
        };
        self.largest.sort_by(by(|g| g.members));
        self.largest.truncate(GROUPS_LISTED);
        self.limited.sort_by(by(|g| g.due));
        self.limited.truncate(GROUPS_LISTED);
        self.pages += 1;
        self.cursor = cursor;
        Ok(())
    }
}

/// What ECHO.LIMITS says of a schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    /// None when the schedule is not in `echomq.release-limits`.
    pub limit: Option<Limit>,
    /// When the hold ends, in the server's Unix ms; 0 when not held.
    pub held_until_ms: i64,
}

/// A schedule's entry in `echomq.release-limits`, as ECHO.LIMITS gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// The configured rate (the ceiling of an adaptive one), per second.
    pub rate_per_second: f64,
    /// The rate in force, per second (the configured one unless adaptive).
    pub in_force_per_second: f64,
    pub burst: i64,
    pub adaptive: bool,
    /// How many members the limit lets leave now (0 while held).
    pub available: i64,
    /// Released and failed (ECHO.RETRY naming the schedule) since the entry
    /// was set.
    pub released: i64,
    pub failures: i64,
}

impl Release {
    /// Whether the limit or a hold applies to the schedule at all.
    pub fn applies(&self) -> bool {
        self.limit.is_some() || self.held_until_ms > 0
    }

    /// How long the hold lasts from `now_ms` (the scrape's server time), 0
    /// when not held.
    pub fn held_for_ms(&self, now_ms: i64) -> i64 {
        if self.held_until_ms > 0 {
            self.held_until_ms.saturating_sub(now_ms).max(0)
        } else {
            0
        }
    }

    /// The due members the limit (or hold) keeps in the schedule now: `due`
    /// minus what may leave, floored at 0, where what may leave is nothing
    /// while held, ECHO.LIMITS's `available` under a limit, and everything
    /// for a schedule neither limited nor held (so 0).
    pub fn held_back(&self, due: i64) -> i64 {
        let available = if self.held_until_ms > 0 {
            0
        } else {
            match &self.limit {
                Some(l) => l.available,
                None => return 0,
            }
        };
        due.saturating_sub(available).max(0)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueStats {
    pub name: String,
    /// Err holds the server's error for this queue alone (e.g. WRONGTYPE), so
    /// one misconfigured queue does not blank the others.
    pub counts: Result<Counts, String>,
    /// A sharded queue's shards, in shard order, each read as a queue of
    /// its own; `counts` is then their figures summed or merged (see
    /// shards.rs). Empty for a single queue.
    pub shards: Vec<Shard>,
}

impl QueueStats {
    pub fn single(name: String, counts: Result<Counts, String>) -> QueueStats {
        QueueStats {
            name,
            counts,
            shards: Vec::new(),
        }
    }
}

/// One shard of a sharded queue: a queue whose name is the shard's tag.
#[derive(Debug, Clone, PartialEq)]
pub struct Shard {
    pub tag: String,
    /// On a cluster, the primary it was read on (`host:port`).
    pub node: Option<String>,
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
    /// The server's `maxmemory-policy`, from INFO memory ("" when the server
    /// does not report it).
    pub maxmemory_policy: String,
    /// Pipelines sent to the server for this snapshot (each one round trip);
    /// on a cluster, to all its nodes (see [`NodeStatus`]).
    pub round_trips: u32,
    /// On a cluster, each primary and whether it answered; empty for a
    /// single server.
    pub nodes: Vec<NodeStatus>,
}

/// A primary of a cluster in one scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeStatus {
    /// `host:port`, as CLUSTER SLOTS names it.
    pub addr: String,
    /// The queues whose slot it serves.
    pub queues: usize,
    /// Why it could not be read, None when it answered.
    pub error: Option<String>,
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

/// The queue names of the auto-promoted `(schedule, pending)` pairs: each
/// pair whose keys are `{NAME}:schedule {NAME}:pending` gives NAME, once.
/// Pairs in another layout are left out: their dead set cannot be named.
pub fn queues_from_pairs(pairs: &[(String, String)]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (schedule, pending) in pairs {
        let (Some(a), Some(b)) = (tagged(schedule, ":schedule"), tagged(pending, ":pending"))
        else {
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

/// The pairs of an ECHO.QUEUES reply. An error (an older module without
/// the command, or a user not allowed it) or any other reply: no pairs, so
/// only the --queue queues are shown.
fn echo_queues_pairs(v: &Value) -> Vec<(String, String)> {
    let Value::Array(items) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|pair| match pair {
            Value::Array(kv) if kv.len() == 2 => Some((text(&kv[0])?, text(&kv[1])?)),
            _ => None,
        })
        .collect()
}

/// One `field:value` of an INFO reply as text, or "" (no such field, or an
/// error reply).
fn info_text(v: &Value, field: &str) -> String {
    text(v)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_default()
        .trim()
        .to_string()
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

/// A number of an ECHO.LIMITS or ECHO.GROUPS reply: nil as None, a double
/// as RESP3 gives it or as RESP2's bulk string, an integer.
fn limits_number(v: &Value) -> Result<Option<f64>, String> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(i) => Ok(Some(*i as f64)),
        Value::Double(f) => Ok(Some(*f)),
        v => text(v)
            .and_then(|t| t.parse::<f64>().ok())
            .filter(|f| f.is_finite())
            .map(Some)
            .ok_or_else(|| format!("not a number: {v:?}")),
    }
}

fn limits_int(v: &Value) -> Result<Option<i64>, String> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(i) => Ok(Some(*i)),
        other => Err(format!("expected an integer, got {other:?}")),
    }
}

/// The fields of a reply that is a map in RESP3 and a flat field/value
/// array in RESP2; None for anything else.
fn fields(v: &Value) -> Option<Vec<(String, &Value)>> {
    match v {
        Value::Array(items) if items.len() % 2 == 0 => Some(
            items
                .chunks_exact(2)
                .map(|p| (text(&p[0]).unwrap_or_default(), &p[1]))
                .collect(),
        ),
        Value::Map(kv) => Some(
            kv.iter()
                .map(|(k, v)| (text(k).unwrap_or_default(), v))
                .collect(),
        ),
        _ => None,
    }
}

/// The value of `name` among `pairs`.
fn field<'a>(pairs: &[(String, &'a Value)], name: &str) -> Result<&'a Value, String> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| *v)
        .ok_or_else(|| format!("no `{name}` field"))
}

/// An error reply that says the command does not exist (an older module).
fn unknown_command(e: &redis::ServerError) -> bool {
    e.code() == "ERR"
        && e.details()
            .is_some_and(|d| d.starts_with("unknown command"))
}

/// One entry of an ECHO.GROUPS page.
fn group(v: &Value) -> Result<Group, String> {
    let pairs = fields(v).ok_or_else(|| format!("an entry is {v:?}"))?;
    let f = |name: &str| field(&pairs, name).map_err(|e| format!("{e} in {v:?}"));
    let int = |name: &str| -> Result<i64, String> {
        limits_int(f(name)?)?.ok_or_else(|| format!("`{name}` is nil"))
    };
    Ok(Group {
        name: text(f("group")?).ok_or_else(|| format!("`group` in {v:?}"))?,
        members: int("members")?,
        due: int("due")?,
        limit_rate_per_second: limits_number(f("limit-rate")?)?,
        limit_burst: limits_int(f("limit-burst")?)?,
        available: limits_int(f("available")?)?,
        waiting_until_ms: int("waiting-until-ms")?,
        held_until_ms: int("held-until-ms")?,
    })
}

/// The first ECHO.GROUPS page of a schedule: None when the server has no
/// groups to show (a module without the command, or a schedule it cannot
/// group), Err for any other error reply or a reply not the command's.
fn first_group_page(v: &Value, now_ms: i64) -> Option<Result<Groups, String>> {
    if let Value::ServerError(e) = v {
        if unknown_command(e)
            || (e.code() == "ERR"
                && e.details()
                    .is_some_and(|d| d.starts_with("a grouped schedule needs")))
        {
            return None;
        }
    }
    let mut g = Groups::new();
    Some(g.add_page(v, now_ms).map(|()| g))
}

/// One entry of an ECHO.REPEATS reply.
fn repeat(v: &Value) -> Result<Repeat, String> {
    let pairs = fields(v).ok_or_else(|| format!("an entry is {v:?}"))?;
    let f = |name: &str| field(&pairs, name).map_err(|e| format!("{e} in {v:?}"));
    let int = |name: &str| -> Result<i64, String> {
        limits_int(f(name)?)?.ok_or_else(|| format!("`{name}` is nil"))
    };
    let string = |name: &str| -> Result<String, String> {
        text(f(name)?).ok_or_else(|| format!("`{name}` in {v:?}"))
    };
    let payload_key = match f("payload-key")? {
        Value::Nil => None,
        other => Some(text(other).ok_or_else(|| format!("`payload-key` in {v:?}"))?),
    };
    Ok(Repeat {
        id: string("id")?,
        spec: string("spec")?,
        jitter_ms: int("jitter-ms")?,
        tz: string("tz")?,
        from_ms: limits_int(f("from-ms")?)?,
        until_ms: limits_int(f("until-ms")?)?,
        next_ms: int("next-ms")?,
        fire_at_ms: limits_int(f("fire-at-ms")?)?,
        payload_key,
    })
}

/// An ECHO.REPEATS reply: None from a module without the command, Err for
/// any other error reply or a reply not the command's.
fn repeats(v: &Value) -> Option<Result<Repeats, String>> {
    let entries = match v {
        Value::ServerError(e) if unknown_command(e) => return None,
        Value::ServerError(e) => return Some(Err(server_error(e))),
        Value::Array(entries) => entries,
        other => return Some(Err(format!("ECHO.REPEATS: {other:?}"))),
    };
    let mut all = Vec::with_capacity(entries.len());
    for entry in entries {
        match repeat(entry) {
            Ok(r) => all.push(r),
            Err(e) => return Some(Err(format!("ECHO.REPEATS: {e}"))),
        }
    }
    let count = i64::try_from(all.len()).unwrap_or(i64::MAX);
    let unarmed =
        i64::try_from(all.iter().filter(|r| r.fire_at_ms.is_none()).count()).unwrap_or(i64::MAX);
    // The unarmed first (nothing fires for them: the first to look at),
    // then the soonest to fire.
    all.sort_by(|a, b| {
        let key = |r: &Repeat| (r.fire_at_ms.is_some(), r.fire_at_ms.unwrap_or(r.next_ms));
        key(a).cmp(&key(b)).then_with(|| a.id.cmp(&b.id))
    });
    all.truncate(REPEATS_LISTED);
    Some(Ok(Repeats {
        count,
        unarmed,
        next: all,
    }))
}

/// Whether `key` has a hash tag, as the server finds one: a `{` and, after
/// it, a `}` with something between. ECHO.GROUPS refuses a schedule without
/// one (an error that would count in `echomq_errors`), so none is sent.
pub fn has_hash_tag(key: &str) -> bool {
    key.split_once('{')
        .and_then(|(_, rest)| rest.find('}'))
        .is_some_and(|end| end > 0)
}

/// An ECHO.LIMITS reply (a map in RESP3, a flat field/value array in
/// RESP2): None for an older module without the command, Err for any other
/// error reply or a reply that is not what the command gives.
fn release(v: &Value) -> Option<Result<Release, String>> {
    let pairs = match v {
        Value::ServerError(e) if unknown_command(e) => return None,
        Value::ServerError(e) => return Some(Err(server_error(e))),
        v => match fields(v) {
            Some(p) => p,
            None => return Some(Err(format!("ECHO.LIMITS: {v:?}"))),
        },
    };
    let field = |name: &str| field(&pairs, name);
    let decode = || -> Result<Release, String> {
        let held_until_ms = limits_int(field("held-until-ms")?)?.unwrap_or(0);
        let Some(rate_per_second) = limits_number(field("rate")?)? else {
            return Ok(Release {
                limit: None,
                held_until_ms,
            });
        };
        let int = |name: &str| -> Result<i64, String> {
            limits_int(field(name)?)?.ok_or_else(|| format!("`{name}` is nil"))
        };
        Ok(Release {
            limit: Some(Limit {
                rate_per_second,
                in_force_per_second: limits_number(field("rate-in-force")?)?
                    .ok_or("`rate-in-force` is nil")?,
                burst: int("burst")?,
                adaptive: int("adaptive")? != 0,
                available: int("available")?,
                released: int("released")?,
                failures: int("failures")?,
            }),
            held_until_ms,
        })
    };
    Some(decode().map_err(|e| format!("ECHO.LIMITS: {e}")))
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

/// The type of one key, from TYPE's answer: None when the key does not
/// exist (its counts are 0 and nothing is sent for it), the type when it is
/// one of `expected`, the server's WRONGTYPE error otherwise.
fn expect(t: &Value, expected: &[&str]) -> Result<Option<String>, String> {
    match key_type(t)?.as_str() {
        "none" => Ok(None),
        t if expected.contains(&t) => Ok(Some(t.to_string())),
        _ => Err(WRONGTYPE.to_string()),
    }
}

/// One command of a queue's plan in the third round trip, and what its
/// reply is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// ZCARD schedule: `scheduled`.
    Scheduled,
    /// ZCOUNT schedule -inf now: `due`.
    Due,
    /// ECHO.SPREAD schedule start end buckets: `spread`.
    Spread,
    /// LLEN of a list `pending`: `pending`.
    ListLength,
    /// XLEN of a stream `pending`: `pending`.
    StreamLength,
    /// XINFO GROUPS of a stream `pending`: `in_flight`.
    Groups,
    /// ZCARD dead: `dead`.
    Dead,
    /// ECHO.LIMITS schedule: `release`. Sent whatever the keys' types: a
    /// limit or a hold needs no key.
    Limits,
    /// ECHO.GROUPS schedule COUNT 1000, the first page: `groups`. Sent
    /// whatever the keys' types (a grouped job is in a key of its group's),
    /// for a schedule with a hash tag.
    GroupPage,
    /// ECHO.REPEATS schedule: `repeats`. Sent whatever the keys' types (the
    /// definitions are in a hash of their own, and a schedule whose armed
    /// occurrences were all removed by hand may not exist).
    Repeats,
}

impl Step {
    fn command(self, k: &Keys, now_ms: i64, window: &Window) -> redis::Cmd {
        match self {
            Step::Scheduled => redis::cmd("ZCARD").arg(&k.schedule).clone(),
            Step::Due => redis::cmd("ZCOUNT")
                .arg(&k.schedule)
                .arg("-inf")
                .arg(now_ms)
                .clone(),
            Step::Spread => redis::cmd("ECHO.SPREAD")
                .arg(&k.schedule)
                .arg(window.start_ms)
                .arg(window.end_ms)
                .arg(window.buckets)
                .clone(),
            Step::ListLength => redis::cmd("LLEN").arg(&k.pending).clone(),
            Step::StreamLength => redis::cmd("XLEN").arg(&k.pending).clone(),
            Step::Groups => redis::cmd("XINFO").arg("GROUPS").arg(&k.pending).clone(),
            Step::Dead => redis::cmd("ZCARD").arg(&k.dead).clone(),
            Step::Limits => redis::cmd("ECHO.LIMITS").arg(&k.schedule).clone(),
            Step::GroupPage => group_page(&k.schedule, "0"),
            Step::Repeats => redis::cmd("ECHO.REPEATS").arg(&k.schedule).clone(),
        }
    }

    /// Sets the count this step reads from its reply.
    fn decode(self, v: &Value, c: &mut Counts, now_ms: i64) -> Result<(), String> {
        match self {
            Step::Scheduled => c.scheduled = int(v)?,
            Step::Due => c.due = int(v)?,
            Step::Spread => c.spread = spread(v)?,
            Step::ListLength | Step::StreamLength => c.pending = int(v)?,
            Step::Groups => c.in_flight = groups_pending(v)?,
            Step::Dead => c.dead = int(v)?,
            // Never the queue's error: the counts stand without it.
            Step::Limits => c.release = release(v),
            Step::GroupPage => c.groups = first_group_page(v, now_ms),
            Step::Repeats => c.repeats = repeats(v),
        }
        Ok(())
    }
}

/// One ECHO.GROUPS page of `schedule` from `cursor` ("0": the first).
fn group_page(schedule: &str, cursor: &str) -> redis::Cmd {
    redis::cmd("ECHO.GROUPS")
        .arg(schedule)
        .arg("CURSOR")
        .arg(cursor)
        .arg("COUNT")
        .arg(GROUP_PAGE)
        .clone()
}

/// The commands that read one queue, from the TYPEs of its schedule,
/// `pending` and dead set, and whether its schedule can be grouped (has a
/// hash tag); Err with the first key's error (e.g. WRONGTYPE), and then
/// nothing is sent for the queue.
fn plan(types: &[Value], with_spread: bool, grouped: bool) -> Result<Vec<Step>, String> {
    let [schedule, pending, dead] = types else {
        return Err(format!("TYPE: {types:?}"));
    };
    let mut steps = Vec::with_capacity(9);
    if expect(schedule, &["zset"])?.is_some() {
        steps.extend([Step::Scheduled, Step::Due]);
        if with_spread {
            steps.push(Step::Spread);
        }
    }
    match expect(pending, &["list", "stream"])?.as_deref() {
        Some("stream") => steps.extend([Step::StreamLength, Step::Groups]),
        Some(_) => steps.push(Step::ListLength),
        None => {}
    }
    if expect(dead, &["zset"])?.is_some() {
        steps.push(Step::Dead);
    }
    steps.push(Step::Limits);
    if grouped {
        steps.push(Step::GroupPage);
    }
    steps.push(Step::Repeats);
    Ok(steps)
}

/// A queue's counts from the replies to its plan's commands, in order. A
/// missing key counts 0 (and an empty spread of `buckets` zeros).
fn counts(
    steps: &[Step],
    replies: &[Value],
    spread_buckets: usize,
    now_ms: i64,
) -> Result<Counts, String> {
    if steps.len() != replies.len() {
        return Err("missing reply".to_string());
    }
    let mut c = Counts {
        scheduled: 0,
        due: 0,
        pending: 0,
        in_flight: 0,
        dead: 0,
        spread: vec![0; spread_buckets],
        release: None,
        groups: None,
        repeats: None,
    };
    for (step, v) in steps.iter().zip(replies) {
        step.decode(v, &mut c, now_ms)?;
    }
    Ok(c)
}

/// What the first round trip reads of a server: its clock, the queues of
/// its auto-promote config, and its eviction policy.
#[derive(Debug, Clone, PartialEq)]
pub struct First {
    pub now_ms: i64,
    pub maxmemory_policy: String,
    pub queues: Vec<String>,
}

/// TIME, ECHO.QUEUES and INFO memory, in one round trip.
pub async fn first(con: &mut MultiplexedConnection) -> Result<First, RedisError> {
    let first: Vec<Value> = redis::pipe()
        .ignore_errors()
        .cmd("TIME")
        .cmd("ECHO.QUEUES")
        .cmd("INFO")
        .arg("memory")
        .query_async(con)
        .await?;
    let [time, pairs, memory] = &first[..] else {
        return Err(error(
            "TIME, ECHO.QUEUES, INFO memory",
            format!("{first:?}"),
        ));
    };
    Ok(First {
        now_ms: time_ms(time)?,
        maxmemory_policy: info_text(memory, "maxmemory_policy"),
        queues: queues_from_pairs(&echo_queues_pairs(pairs)),
    })
}

/// What the second and third round trips read of a server: its INFO
/// echomq and the counts of the queues asked, in their order.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    pub info: Vec<(String, Number)>,
    pub queues: Vec<QueueStats>,
    /// Pipelines sent: 2, and one per further page of ECHO.GROUPS.
    pub round_trips: u32,
}

/// INFO echomq and the TYPEs of the queues' keys, then each queue's plan.
pub async fn read_queues(
    con: &mut MultiplexedConnection,
    names: Vec<String>,
    now_ms: i64,
    window: &Window,
    with_spread: bool,
) -> Result<Read, RedisError> {
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
    let plans: Vec<Result<Vec<Step>, String>> = replies[1..]
        .chunks_exact(3)
        .zip(&keys)
        .map(|(types, k)| plan(types, with_spread, has_hash_tag(&k.schedule)))
        .collect();

    // Third: each queue's plan, sent in order.
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for (k, steps) in keys.iter().zip(&plans) {
        for step in steps.iter().flatten() {
            pipe.add_command(step.command(k, now_ms, window));
        }
    }
    let sent = pipe.len();
    let mut round_trips = 1;
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
    // And decoded by the same plans: each queue takes as many replies as
    // its plan sent commands.
    let spread_buckets = if with_spread {
        window.buckets as usize
    } else {
        0
    };
    let mut rest = &third[..];
    let mut queues: Vec<QueueStats> = names
        .into_iter()
        .zip(plans)
        .map(|(name, plan)| {
            let counts = plan.and_then(|steps| {
                let (mine, tail) = rest.split_at(steps.len().min(rest.len()));
                rest = tail;
                counts(&steps, mine, spread_buckets, now_ms)
            });
            QueueStats::single(name, counts)
        })
        .collect();
    round_trips += more_group_pages(con, &keys, &mut queues, now_ms).await?;
    Ok(Read {
        info,
        queues,
        round_trips,
    })
}

/// The groups of a queue whose first page did not end them, if it is
/// still to be read further.
fn open_groups(q: &mut QueueStats) -> Option<&mut Groups> {
    match &mut q.counts {
        Ok(Counts {
            groups: Some(Ok(g)),
            ..
        }) if g.truncated() && g.pages < GROUP_PAGES => Some(g),
        _ => None,
    }
}

/// The further ECHO.GROUPS pages of the queues whose first page did not end
/// their groups: each round trip one page of every such queue, until every
/// queue's groups are read or [`GROUP_PAGES`] pages were. Returns the round
/// trips sent.
async fn more_group_pages(
    con: &mut MultiplexedConnection,
    keys: &[Keys],
    queues: &mut [QueueStats],
    now_ms: i64,
) -> Result<u32, RedisError> {
    let mut round_trips = 0;
    loop {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut asked: Vec<usize> = Vec::new();
        for (i, (q, k)) in queues.iter_mut().zip(keys).enumerate() {
            if let Some(g) = open_groups(q) {
                pipe.add_command(group_page(&k.schedule, &g.cursor));
                asked.push(i);
            }
        }
        if asked.is_empty() {
            return Ok(round_trips);
        }
        round_trips += 1;
        let replies: Vec<Value> = pipe.query_async(con).await?;
        if replies.len() != asked.len() {
            return Err(error(
                "ECHO.GROUPS pipeline",
                format!("{} replies for {} commands", replies.len(), asked.len()),
            ));
        }
        for (i, v) in asked.into_iter().zip(&replies) {
            let q = &mut queues[i];
            if let Some(g) = open_groups(q) {
                if let Err(e) = g.add_page(v, now_ms) {
                    if let Ok(c) = &mut q.counts {
                        c.groups = Some(Err(e));
                    }
                }
            }
        }
    }
}

/// The spread window of a scrape at `now_ms`.
pub fn window_at(now_ms: i64, window_ms: i64, buckets: u32) -> Window {
    Window {
        start_ms: now_ms,
        end_ms: now_ms.saturating_add(window_ms),
        buckets,
    }
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
    sharded: &[(String, u32)],
    window_ms: i64,
    buckets: u32,
    with_spread: bool,
) -> Result<Snapshot, RedisError> {
    let f = first(con).await?;
    let shown = crate::shards::layout(cli_queues, sharded, &f.queues);
    let window = window_at(f.now_ms, window_ms, buckets);
    // Every shard's tag in the one read: the round trips do not grow with
    // the shards.
    let r = read_queues(
        con,
        crate::shards::tags(&shown),
        f.now_ms,
        &window,
        with_spread,
    )
    .await?;
    let nodes = vec![None; r.queues.len()];
    Ok(Snapshot {
        now_ms: f.now_ms,
        window,
        queues: crate::shards::group(&shown, r.queues, nodes),
        info: r.info,
        maxmemory_policy: f.maxmemory_policy,
        round_trips: 1 + r.round_trips,
        nodes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queues of an `echomq.auto-promote` value, split into its pairs as
    /// the server does (a trailing half pair is not a pair).
    fn queues_from_auto_promote(value: &str) -> Vec<String> {
        let words: Vec<&str> = value.split_whitespace().collect();
        let pairs: Vec<(String, String)> = words
            .chunks_exact(2)
            .map(|p| (p[0].to_string(), p[1].to_string()))
            .collect();
        queues_from_pairs(&pairs)
    }

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
    fn echo_queues_reply_with_and_without_pairs() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let v = Value::Array(vec![
            Value::Array(vec![bulk("{a}:schedule"), bulk("{a}:pending")]),
            Value::Array(vec![bulk("x:s"), bulk("x:p")]),
        ]);
        let pairs = echo_queues_pairs(&v);
        assert_eq!(
            pairs,
            [
                ("{a}:schedule".to_string(), "{a}:pending".to_string()),
                ("x:s".to_string(), "x:p".to_string())
            ]
        );
        assert_eq!(queues_from_pairs(&pairs), ["a"]);
        assert!(echo_queues_pairs(&Value::Array(vec![])).is_empty());
        // An older module: the command is unknown.
        let unknown = redis::parse_redis_value(b"-ERR unknown command 'ECHO.QUEUES'\r\n")
            .expect("an error reply");
        assert!(matches!(unknown, Value::ServerError(_)), "{unknown:?}");
        assert!(echo_queues_pairs(&unknown).is_empty());
    }

    #[test]
    fn a_redirect_reads_as_the_servers_text() {
        // What a cluster node answers for a key of a slot it does not serve:
        // the queue's error, which main.rs takes as a stale slot map.
        for reply in [
            &b"-MOVED 105 127.0.0.1:7000\r\n"[..],
            b"-ASK 105 127.0.0.1:7000\r\n",
        ] {
            let v = redis::parse_redis_value(reply).expect("an error reply");
            let e = key_type(&v).unwrap_err();
            assert!(crate::cluster::is_redirect(&e), "{e}");
            assert!(e.ends_with("105 127.0.0.1:7000"), "{e}");
            assert_eq!(plan(&[v.clone(), v.clone(), v], true, true), Err(e));
        }
    }

    #[test]
    fn the_policy_from_info_memory() {
        let v = Value::VerbatimString {
            format: redis::VerbatimFormat::Text,
            text: "# Memory\r\nused_memory:1\r\nmaxmemory_policy:allkeys-lru\r\n".into(),
        };
        assert_eq!(info_text(&v, "maxmemory_policy"), "allkeys-lru");
        assert_eq!(info_text(&v, "maxmemory"), "");
        assert_eq!(info_text(&Value::Nil, "maxmemory_policy"), "");
    }

    #[test]
    fn a_plan_sends_each_key_what_its_type_reads_and_decodes_the_same() {
        let ty = |s: &str| Value::SimpleString(s.to_string());
        use Step::*;
        assert_eq!(
            plan(&[ty("zset"), ty("stream"), ty("zset")], true, true),
            Ok(vec![
                Scheduled,
                Due,
                Spread,
                StreamLength,
                Groups,
                Dead,
                Limits,
                GroupPage,
                Repeats
            ])
        );
        assert_eq!(
            plan(&[ty("zset"), ty("list"), ty("none")], false, false),
            Ok(vec![Scheduled, Due, ListLength, Limits, Repeats])
        );
        assert_eq!(
            plan(&[ty("none"), ty("none"), ty("none")], true, true),
            Ok(vec![Limits, GroupPage, Repeats])
        );
        assert_eq!(
            plan(&[ty("none"), ty("string"), ty("zset")], true, true),
            Err(WRONGTYPE.to_string())
        );
        let c = counts(
            &[Scheduled, Due, ListLength, Dead],
            &[Value::Int(5), Value::Int(2), Value::Int(7), Value::Int(1)],
            3,
            0,
        )
        .unwrap();
        assert_eq!(
            (c.scheduled, c.due, c.pending, c.in_flight, c.dead, c.spread),
            (5, 2, 7, 0, 1, vec![0, 0, 0])
        );
        assert!(counts(&[Scheduled], &[], 0, 0).is_err());
    }

    /// An ECHO.GROUPS entry as RESP2 gives it (a flat array, doubles as
    /// bulk strings), or RESP3 (a map, doubles as doubles).
    fn entry(
        resp3: bool,
        name: &str,
        members: i64,
        due: i64,
        limit: Option<(f64, i64, i64)>,
        held_until_ms: i64,
    ) -> Value {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let (rate, burst, available) = match limit {
            Some((r, b, a)) if resp3 => (Value::Double(r), Value::Int(b), Value::Int(a)),
            Some((r, b, a)) => (bulk(&r.to_string()), Value::Int(b), Value::Int(a)),
            None => (Value::Nil, Value::Nil, Value::Nil),
        };
        let kv = [
            ("group", bulk(name)),
            ("members", Value::Int(members)),
            ("due", Value::Int(due)),
            ("limit-rate", rate),
            ("limit-burst", burst),
            ("available", available),
            ("waiting-until-ms", Value::Int(0)),
            ("held-until-ms", Value::Int(held_until_ms)),
        ];
        if resp3 {
            Value::Map(kv.into_iter().map(|(k, v)| (bulk(k), v)).collect())
        } else {
            Value::Array(kv.into_iter().flat_map(|(k, v)| [bulk(k), v]).collect())
        }
    }

    fn page(cursor: &str, entries: Vec<Value>) -> Value {
        Value::Array(vec![
            Value::BulkString(cursor.as_bytes().to_vec()),
            Value::Array(entries),
        ])
    }

    #[test]
    fn echo_groups_pages_add_up_to_two_bounded_lists() {
        for resp3 in [false, true] {
            let now = 1000;
            // The ungrouped members first (not a group), then 12 groups of
            // 1..=12 members over two pages; g03 held until after now, g05
            // limited with nothing available, g07 limited with room, g09
            // limited with no room but nothing due, g11 held until before now.
            let g = |i: i64| {
                let name = format!("g{i:02}");
                let (limit, held, due) = match i {
                    3 => (None, now + 1, i),
                    5 => (Some((2.5, 2, 0)), 0, i),
                    7 => (Some((1.0, 1, 1)), 0, i),
                    9 => (Some((1.0, 1, 0)), 0, 0),
                    11 => (None, now - 1, i),
                    _ => (None, 0, i),
                };
                entry(resp3, &name, i, due, limit, held)
            };
            let mut first = vec![entry(resp3, "", 50, 50, None, 0)];
            first.extend((1..=6).map(g));
            let mut groups = first_group_page(&page("x673036", first), now)
                .expect("groups")
                .expect("a page");
            assert!(groups.truncated());
            groups
                .add_page(&page("0", (7..=12).map(g).collect()), now)
                .expect("a page");
            assert!(!groups.truncated());
            assert_eq!(
                (groups.count, groups.limited_count, groups.pages),
                (12, 2, 2)
            );
            let names = |l: &[Group]| l.iter().map(|g| g.name.clone()).collect::<Vec<_>>();
            let want: Vec<String> = (3..=12).rev().map(|i| format!("g{i:02}")).collect();
            assert_eq!(names(&groups.largest), want);
            assert_eq!(names(&groups.limited), ["g05", "g03"]);
            let g05 = &groups.limited[0];
            assert_eq!(
                (
                    g05.limit_rate_per_second,
                    g05.limit_burst,
                    g05.available,
                    g05.due
                ),
                (Some(2.5), Some(2), Some(0), 5)
            );
        }
        // Ties in size go by name; an empty schedule has no groups.
        let mut ties = Groups::new();
        let same = (0..12)
            .rev()
            .map(|i| entry(false, &format!("t{i:02}"), 3, 0, None, 0));
        ties.add_page(&page("0", same.collect()), 0)
            .expect("a page");
        assert_eq!(ties.largest.first().map(|g| g.name.as_str()), Some("t00"));
        assert_eq!(ties.largest.len(), GROUPS_LISTED);
        let empty = Groups {
            pages: 1,
            ..Groups::new()
        };
        assert_eq!(first_group_page(&page("0", vec![]), 0), Some(Ok(empty)));
    }

    #[test]
    fn echo_groups_errors_none_from_a_module_without_groups() {
        let reply = |text: &[u8]| redis::parse_redis_value(text).expect("a reply");
        assert_eq!(
            first_group_page(
                &reply(b"-ERR unknown command 'ECHO.GROUPS', with args beginning with: \r\n"),
                0
            ),
            None
        );
        assert_eq!(
            first_group_page(&reply(b"-ERR a grouped schedule needs a {hash tag}\r\n"), 0),
            None
        );
        assert_eq!(
            first_group_page(
                &reply(b"-NOPERM no permissions to run 'echo.groups'\r\n"),
                0
            ),
            Some(Err("NOPERM no permissions to run 'echo.groups'".into()))
        );
        for bad in [
            Value::Nil,
            Value::Array(vec![Value::Int(0)]),
            page("0", vec![Value::Int(1)]),
            page("0", vec![Value::Array(vec![])]),
        ] {
            assert!(matches!(first_group_page(&bad, 0), Some(Err(_))), "{bad:?}");
        }
        assert!(has_hash_tag("{orders}:schedule"));
        assert!(has_hash_tag("{a}b}:schedule"));
        assert!(!has_hash_tag("{}x}:schedule"));
        assert!(!has_hash_tag("plain"));
        assert!(!has_hash_tag("{open"));
    }

    /// An ECHO.REPEATS entry as RESP2 gives it (a flat array) or RESP3 (a
    /// map).
    fn repeat_entry(resp3: bool, id: &str, fire_at_ms: Option<i64>, next_ms: i64) -> Value {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let kv = [
            ("id", bulk(id)),
            ("spec", bulk("cron:0 * * * *")),
            ("jitter-ms", Value::Int(300_000)),
            ("tz", bulk("Europe/Berlin")),
            ("from-ms", Value::Nil),
            ("until-ms", Value::Int(9_000_000)),
            ("next-ms", Value::Int(next_ms)),
            ("fire-at-ms", fire_at_ms.map_or(Value::Nil, Value::Int)),
            (
                "payload-key",
                if id == "p" {
                    bulk("{q}:jobs")
                } else {
                    Value::Nil
                },
            ),
        ];
        if resp3 {
            Value::Map(kv.into_iter().map(|(k, v)| (bulk(k), v)).collect())
        } else {
            Value::Array(kv.into_iter().flat_map(|(k, v)| [bulk(k), v]).collect())
        }
    }

    #[test]
    fn echo_repeats_lists_the_unarmed_then_the_soonest_ten() {
        for resp3 in [false, true] {
            // 12 armed, fire times descending with the name, one unarmed,
            // and two that fire in the same ms (by id then).
            let mut entries: Vec<Value> = (0..12)
                .map(|i| repeat_entry(resp3, &format!("r{i:02}"), Some(5000 - i), 4000 - i))
                .collect();
            entries.push(repeat_entry(resp3, "gone", None, 100));
            entries.push(repeat_entry(resp3, "p", Some(4989), 4000));
            let got = repeats(&Value::Array(entries))
                .expect("repeats")
                .expect("decoded");
            assert_eq!((got.count, got.unarmed), (14, 1));
            let ids: Vec<&str> = got.next.iter().map(|r| r.id.as_str()).collect();
            assert_eq!(
                ids,
                ["gone", "p", "r11", "r10", "r09", "r08", "r07", "r06", "r05", "r04"]
            );
            assert_eq!(
                got.next[1],
                Repeat {
                    id: "p".into(),
                    spec: "cron:0 * * * *".into(),
                    jitter_ms: 300_000,
                    tz: "Europe/Berlin".into(),
                    from_ms: None,
                    until_ms: Some(9_000_000),
                    next_ms: 4000,
                    fire_at_ms: Some(4989),
                    payload_key: Some("{q}:jobs".into()),
                }
            );
        }
        let none = repeats(&Value::Array(vec![]))
            .expect("repeats")
            .expect("decoded");
        assert_eq!((none.count, none.unarmed, none.next.len()), (0, 0, 0));
        // An older module: none; any other error kept; a reply not the
        // command's refused.
        let reply = |text: &[u8]| redis::parse_redis_value(text).expect("a reply");
        assert_eq!(
            repeats(&reply(
                b"-ERR unknown command 'ECHO.REPEATS', with args beginning with: '{q}:schedule' \r\n"
            )),
            None
        );
        assert_eq!(
            repeats(&reply(
                b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
            )),
            Some(Err(WRONGTYPE.to_string()))
        );
        for bad in [
            Value::Nil,
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Array(vec![])]),
        ] {
            assert!(matches!(repeats(&bad), Some(Err(_))), "{bad:?}");
        }
    }

    #[test]
    fn echo_limits_in_resp2_and_resp3_and_from_an_older_module() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        // RESP2: a flat array, the doubles as bulk strings.
        let resp2 = Value::Array(vec![
            bulk("rate"),
            bulk("100"),
            bulk("rate-in-force"),
            bulk("50.5"),
            bulk("burst"),
            Value::Int(10),
            bulk("adaptive"),
            Value::Int(1),
            bulk("available"),
            Value::Int(3),
            bulk("held-until-ms"),
            Value::Int(0),
            bulk("released"),
            Value::Int(7),
            bulk("failures"),
            Value::Int(2),
        ]);
        let limited = Release {
            limit: Some(Limit {
                rate_per_second: 100.0,
                in_force_per_second: 50.5,
                burst: 10,
                adaptive: true,
                available: 3,
                released: 7,
                failures: 2,
            }),
            held_until_ms: 0,
        };
        assert_eq!(release(&resp2), Some(Ok(limited.clone())));
        assert_eq!(limited.held_back(40), 37);
        assert_eq!(limited.held_back(2), 0);
        assert_eq!(limited.held_for_ms(5), 0);
        assert!(limited.applies());
        // RESP3: a map, doubles as doubles; a schedule not listed but held.
        let resp3 = Value::Map(
            [
                ("rate", Value::Nil),
                ("rate-in-force", Value::Nil),
                ("burst", Value::Nil),
                ("adaptive", Value::Nil),
                ("available", Value::Nil),
                ("held-until-ms", Value::Int(9000)),
                ("released", Value::Nil),
                ("failures", Value::Nil),
            ]
            .into_iter()
            .map(|(k, v)| (bulk(k), v))
            .collect(),
        );
        let held = Release {
            limit: None,
            held_until_ms: 9000,
        };
        assert_eq!(release(&resp3), Some(Ok(held.clone())));
        assert_eq!((held.held_back(4), held.held_for_ms(1000)), (4, 8000));
        assert_eq!(held.held_for_ms(9500), 0);
        // Neither limited nor held: nothing held back.
        let free = Release {
            limit: None,
            held_until_ms: 0,
        };
        assert_eq!((free.held_back(40), free.applies()), (0, false));
        let resp3_double = Value::Map(vec![
            (bulk("rate"), Value::Double(2.5)),
            (bulk("rate-in-force"), Value::Double(2.5)),
            (bulk("burst"), Value::Int(1)),
            (bulk("adaptive"), Value::Int(0)),
            (bulk("available"), Value::Int(1)),
            (bulk("held-until-ms"), Value::Int(0)),
            (bulk("released"), Value::Int(0)),
            (bulk("failures"), Value::Int(0)),
        ]);
        assert!(matches!(
            release(&resp3_double),
            Some(Ok(Release { limit: Some(Limit { rate_per_second, .. }), .. })) if rate_per_second == 2.5
        ));
        // An older module: no limits at all; any other error is kept.
        let unknown = redis::parse_redis_value(
            b"-ERR unknown command 'ECHO.LIMITS', with args beginning with: '{q}:schedule' \r\n",
        )
        .expect("an error reply");
        assert_eq!(release(&unknown), None);
        let noperm = redis::parse_redis_value(
            b"-NOPERM User u has no permissions to run the 'echo.limits' command\r\n",
        )
        .expect("an error reply");
        assert_eq!(
            release(&noperm),
            Some(Err(
                "NOPERM User u has no permissions to run the 'echo.limits' command".into()
            ))
        );
        assert!(matches!(
            release(&Value::Array(vec![bulk("rate")])),
            Some(Err(_))
        ));
        assert!(matches!(
            release(&Value::Array(vec![bulk("rate"), bulk("1")])),
            Some(Err(_))
        ));
    }
}
