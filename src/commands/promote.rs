//! `ECHO.PROMOTE schedule pending [LIMIT n]`
//!
//! Moves the members of the sorted set `schedule` whose score is `<= now_ms`
//! to the list `pending`, earliest first (ties in the set's own order), at
//! most `n` (default 1000). Each is pushed at the head in fire-time order, so
//! the earliest-due job sits at the right end: `RPOP`/`BRPOP` take it first.
//! An emptied `schedule` is deleted; clients blocked on `pending` wake.
//!
//! Reply: integer, the number of members moved.
//! Errors: `WRONGTYPE` when `schedule` is not a sorted set or `pending` not a
//! list, checked before anything moves, even when nothing is due; the same
//! key twice; a malformed LIMIT. Nothing is written on an error.
//! Replication: the effects, `ZREM schedule m1..mk` and `LPUSH pending m1..mk`
//! of exactly the members moved (the server wraps the two in MULTI/EXEC).
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
}

/// Where moved members go. Only a list today; a stream sink (issue 13) is
/// one more arm here, chosen by the type of the existing `pending` key.
enum Sink {
    List,
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
        Kind::SortedSet | Kind::Other => return Err(RedisError::WrongType),
    };

    // now_ms is an integer far below 2^53, so the f64 bound is exact and a
    // member due at exactly now_ms (or any fraction before it) is included.
    let due = schedule_key.zset_due(ctx, now_ms as f64, limit);
    if due.is_empty() {
        return Ok(Moved::default());
    }
    // Effects and events in the order `ZREM` then `LPUSH` make them.
    schedule_key.zset_remove(&due);
    keys::signal_modified(ctx, schedule);
    keys::notify(ctx, raw::REDISMODULE_NOTIFY_ZSET, c"zrem", schedule);
    if schedule_key.kind() == Kind::Missing {
        keys::notify(ctx, raw::REDISMODULE_NOTIFY_GENERIC, c"del", schedule);
    }
    keys::replicate_members(ctx, c"ZREM", schedule, &due);
    match sink {
        Sink::List => push_list(ctx, &pending_key, pending, &due),
    }
    Ok(Moved {
        count: due.len() as u64,
        earliest_ms: due.earliest_score(),
    })
}

fn push_list(ctx: &Context, key: &Key, name: &Arg, due: &Members) {
    key.list_push_head(due);
    keys::signal_modified(ctx, name);
    keys::notify(ctx, raw::REDISMODULE_NOTIFY_LIST, c"lpush", name);
    keys::replicate_members(ctx, c"LPUSH", name, due);
}
