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

use redis_module::{raw, Context, RedisError, RedisResult, RedisValue};

use crate::keys::{self, Arg, Key, Kind};
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
    let schedule_key = Key::open_write(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let pending_key = Key::open_write(ctx, pending);
    pending_key.require(Kind::List)?;

    // now_ms is an integer far below 2^53, so the f64 bound is exact and a
    // member due at exactly now_ms (or any fraction before it) is included.
    let due = schedule_key.zset_due(ctx, clock::now_ms() as f64, limit);
    let moved = due.len() as u64;
    if !due.is_empty() {
        // Effects and events in the order `ZREM` then `LPUSH` make them.
        schedule_key.zset_remove(&due);
        keys::signal_modified(ctx, schedule);
        keys::notify(ctx, raw::REDISMODULE_NOTIFY_ZSET, c"zrem", schedule);
        if schedule_key.kind() == Kind::Missing {
            keys::notify(ctx, raw::REDISMODULE_NOTIFY_GENERIC, c"del", schedule);
        }
        pending_key.list_push_head(&due);
        keys::signal_modified(ctx, pending);
        keys::notify(ctx, raw::REDISMODULE_NOTIFY_LIST, c"lpush", pending);

        keys::replicate_members(ctx, c"ZREM", schedule, &due);
        keys::replicate_members(ctx, c"LPUSH", pending, &due);
    }
    stats::promoted(moved);
    Ok(RedisValue::Integer(
        i64::try_from(moved).unwrap_or(i64::MAX),
    ))
}
