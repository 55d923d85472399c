//! `ECHO.PROMOTE schedule pending [LIMIT n]`
//!
//! Moves the members of the sorted set `schedule` whose score is `<= now_ms`
//! to `pending`, earliest first (ties in the set's own order), at most `n`
//! (default 1000). `pending` a list (or missing: a list is created): each is
//! pushed at the head in fire-time order, so the earliest-due job sits at the
//! right end and `RPOP`/`BRPOP` take it first. `pending` a stream: each
//! becomes one entry `job <member>` with an ID the server chooses, in
//! fire-time order, so a consumer group delivers the earliest-due first. An
//! emptied `schedule` is deleted; clients blocked on `pending` wake.
//!
//! Reply: integer, the number of members moved.
//! Errors: `WRONGTYPE` when `schedule` is not a sorted set or `pending`
//! neither a list nor a stream, checked before anything moves, even when
//! nothing is due; the same key twice; a malformed LIMIT. Nothing is written
//! on those errors. A stream whose IDs run out (possible only after an entry
//! was added by hand at the top of the ID space) takes what it can: those
//! members stay moved and replicated, the rest stay scheduled, and the reply
//! is XADD's own error.
//! Replication: the effects, `ZREM schedule m1..mk` and `LPUSH pending
//! m1..mk`, or one `XADD pending <ms>-<seq> job <m>` per entry with the ID
//! the primary chose, of exactly the members moved (the server wraps them in
//! MULTI/EXEC).
//!
//! `move_due` is the one implementation of the move: the auto-promote timer
//! (`crate::auto_promote`) calls it too, so a tick does exactly what this
//! command does.

use redis_module::{raw, Context, RedisError, RedisResult, RedisValue};

use crate::keys::{self, Arg, Key, Kind, Members};
use crate::parse;
use crate::{clock, stats};

// Kept out of line so profiles name each command (scripts/profile.sh).
#[inline(never)]
pub fn echo_promote(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, pending, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let options: Vec<&[u8]> = options.iter().map(Arg::as_slice).collect();
    let limit = parse::parse_promote_request(schedule.as_slice(), pending.as_slice(), &options)?;
    let moved = move_due(ctx, schedule, pending, limit, clock::now_ms())?;
    if let Some(why) = moved.refused {
        stats::promoted_partly(moved.count);
        return Err(RedisError::Str(why));
    }
    stats::promoted(moved.count);
    Ok(RedisValue::Integer(
        i64::try_from(moved.count).unwrap_or(i64::MAX),
    ))
}

/// What one move did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Moved {
    pub count: u64,
    /// The fire time of the earliest member moved (the timer's lag).
    pub earliest_ms: Option<f64>,
    /// Why the rest of the due members stayed scheduled: a stream out of
    /// IDs refused them (XADD's error). What moved stays moved.
    pub refused: Option<&'static str>,
}

/// XADD's own words for a stream whose IDs have run out.
const STREAM_FULL: &str =
    "ERR The stream has exhausted the last possible ID, unable to add more items";

/// Where moved members go, chosen by the type of the existing `pending` key.
enum Sink {
    List,
    Stream,
}

/// Moves the members of `schedule` due at `now_ms`, at most `limit`, to
/// `pending`; sends the events, signals the keys and replicates the effects.
/// Both keys are type-checked before anything is written. The caller has
/// made sure the two names differ.
pub fn move_due(
    ctx: &Context,
    schedule: &Arg,
    pending: &Arg,
    limit: u64,
    now_ms: i64,
) -> Result<Moved, RedisError> {
    let schedule_key = Key::open_write(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let pending_key = Key::open_write(ctx, pending);
    let sink = match pending_key.kind() {
        Kind::Missing | Kind::List => Sink::List,
        Kind::Stream => Sink::Stream,
        Kind::SortedSet | Kind::Other => return Err(RedisError::WrongType),
    };

    // now_ms is an integer far below 2^53, so the f64 bound is exact and a
    // member due at exactly now_ms (or any fraction before it) is included.
    let mut due = schedule_key.zset_due(ctx, now_ms as f64, limit);
    // A stream appends first, and may refuse the tail of the batch (its IDs
    // run out): only what it took leaves the schedule.
    let wanted = due.len();
    let stream_ids = match sink {
        Sink::Stream => {
            let ids = pending_key.stream_append_jobs(ctx, &due);
            due.truncate(ids.len());
            ids
        }
        Sink::List => Vec::new(),
    };
    let refused = (due.len() < wanted).then_some(STREAM_FULL);
    if due.is_empty() {
        return Ok(Moved {
            refused,
            ..Moved::default()
        });
    }
    // Effects and events in the order `ZREM` then `LPUSH` (or `XADD`s) make them.
    schedule_key.zset_remove(&due);
    keys::signal_modified(ctx, schedule);
    keys::notify(ctx, raw::REDISMODULE_NOTIFY_ZSET, c"zrem", schedule);
    if schedule_key.kind() == Kind::Missing {
        keys::notify(ctx, raw::REDISMODULE_NOTIFY_GENERIC, c"del", schedule);
    }
    keys::replicate_members(ctx, c"ZREM", schedule, &due);
    match sink {
        Sink::List => push_list(ctx, &pending_key, pending, &due),
        Sink::Stream => {
            // The entries are in; closing the key wakes XREAD/XREADGROUP.
            keys::signal_modified(ctx, pending);
            for _ in &stream_ids {
                keys::notify(ctx, raw::REDISMODULE_NOTIFY_STREAM, c"xadd", pending);
            }
            keys::replicate_xadds(ctx, pending, &stream_ids, &due);
        }
    }
    Ok(Moved {
        count: due.len() as u64,
        earliest_ms: due.earliest_score(),
        refused,
    })
}

fn push_list(ctx: &Context, key: &Key, name: &Arg, due: &Members) {
    key.list_push_head(due);
    keys::signal_modified(ctx, name);
    keys::notify(ctx, raw::REDISMODULE_NOTIFY_LIST, c"lpush", name);
    keys::replicate_members(ctx, c"LPUSH", name, due);
}
