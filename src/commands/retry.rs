//! `ECHO.RETRY schedule job policy attempts`
//!
//! Computes `policy`'s delay for `attempts` from the server's command time
//! and random generator, and adds `job` to the sorted set `schedule` with
//! score `fire_at_ms = now_ms + delay_ms`, replacing the score of a job
//! already there. A missing `schedule` is created.
//!
//! Reply: integer, `fire_at_ms`.
//! Errors: policy and attempts errors from `parse`; `WRONGTYPE` when
//! `schedule` is not a sorted set. Nothing is written on an error.
//! Replication: the effect, `ZADD schedule fire_at_ms job`; the random draw
//! and the clock are never recomputed on a replica or an AOF reload.

use redis_module::{raw, Context, RedisError, RedisResult, RedisValue};

use crate::keys::{self, Arg, Key, Kind};
use crate::{clock, parse, stats};

// Kept out of line so profiles name each command (scripts/profile.sh).
#[inline(never)]
pub fn echo_retry(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, job, policy, attempts] = args else {
        return Err(RedisError::WrongArity);
    };
    let request = parse::parse_delay_request(policy.as_slice(), attempts.as_slice())?;
    let key = Key::open_write(ctx, schedule);
    key.require(Kind::SortedSet)?;

    let delay_ms = request
        .policy
        .delay_ms_with_rng(request.attempts, &mut rand::rng());
    // delay_ms <= 10^13 and now is a Unix time, so this never saturates and
    // stays far below 2^53: the f64 score is the exact integer.
    let fire_at_ms = clock::now_ms().saturating_add(i64::try_from(delay_ms).unwrap_or(i64::MAX));
    if key.zset_add(fire_at_ms as f64, job)? {
        keys::signal_modified(ctx, schedule);
        keys::notify(ctx, raw::REDISMODULE_NOTIFY_ZSET, c"zadd", schedule);
        keys::replicate_zadd(ctx, schedule, fire_at_ms, job);
    }
    stats::retried(request.policy.is_jittered());
    Ok(RedisValue::Integer(fire_at_ms))
}
