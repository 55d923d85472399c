//! `ECHO.RETRY schedule job policy attempts [NX | XX] [GT | LT] [MAXATTEMPTS n DEAD dead]`
//!
//! Computes `policy`'s delay for `attempts` from the server's command time
//! and random generator, and adds `job` to the sorted set `schedule` with
//! score `fire_at_ms = now_ms + delay_ms`, replacing the score of a job
//! already there. A missing `schedule` is created. `NX`, `XX`, `GT` and `LT`
//! condition the write as they condition ZADD; a job whose score they keep
//! is written nowhere. With `MAXATTEMPTS n DEAD dead` and `attempts >= n` the
//! job is dead-lettered instead: removed from `schedule` and added to the
//! sorted set `dead` at `now_ms`, with no delay drawn and no condition
//! applied.
//!
//! Reply: integer. `>= 0`: the job's fire time in `schedule` after the call
//! (written now, or kept by a condition; a kept fractional score rounded
//! down, clamped to i64). `-1`: dead-lettered. `-2`: `XX` and no such job.
//! Errors: policy, attempts and option errors from `rules::grammar`, and `dead` naming
//! `schedule`, before any key is opened; `WRONGTYPE` when `schedule` or
//! `dead` is not a sorted set, checked before any write (`dead` also when the
//! job is not dead-lettered). Nothing is written on an error.
//! Keys: `schedule`, and `dead` after the first `DEAD` keyword among the
//! options; declared by key specs and, for cluster routing, reported by the
//! command itself (`getkeys-api`).
//! Replication: the effects only, so the random draw and the clock are never
//! recomputed on a replica or an AOF reload: `ZADD schedule fire_at_ms job`
//! when the score changed; dead-lettering sends `ZREM schedule job` (when the
//! job was there) then `ZADD dead now_ms job` (the server wraps the two in
//! MULTI/EXEC); a kept score sends nothing.

use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::engine::{release, stats};
use crate::rules::grammar::{self, ArgError, Compare, Presence, RetryOptions};
use crate::server::keys::{Arg, Key, Kind, Zadd, ZaddIf};
use crate::server::{clock, context};

/// The argument index of the first option (after `attempts`).
const FIRST_OPTION: usize = 5;
/// The most option words a valid call has: `NX|XX`, `GT|LT`, `MAXATTEMPTS n`,
/// `DEAD dead`.
const MAX_OPTION_WORDS: usize = 6;
/// The reply for a dead-lettered job.
const DEAD_LETTERED: i64 = -1;
/// The reply for `XX` when the job is not in the schedule.
const NOT_SCHEDULED: i64 = -2;

// Kept out of line so profiles name each command (scripts/profile.sh).
#[inline(never)]
pub fn echo_retry(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, job, policy, attempts, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    // On the stack: a heap vector per call cost a measurable share of a
    // retry. No valid call has more option words than MAX_OPTION_WORDS.
    let mut buffer: [&[u8]; MAX_OPTION_WORDS] = [&[]; MAX_OPTION_WORDS];
    let words = match buffer.get_mut(..options.len()) {
        Some(words) => {
            for (word, option) in words.iter_mut().zip(options) {
                *word = option.as_slice();
            }
            &*words
        }
        // Too many to be valid: routed by the schedule alone, then refused.
        None if context::is_keys_position_request(ctx) => {
            context::report_key_at(ctx, 1);
            return Ok(RedisValue::NoReply);
        }
        None => return Err(ArgError::Syntax.into()),
    };
    if context::is_keys_position_request(ctx) {
        // Cluster routing asks the command itself (`getkeys-api`): the
        // server's own slot check reads only the fixed key range otherwise,
        // and would let a dead set in another slot through.
        context::report_key_at(ctx, 1);
        if let Some(index) = grammar::dead_key_index(words) {
            context::report_key_at(ctx, FIRST_OPTION + index);
        }
        return Ok(RedisValue::NoReply);
    }
    let request = grammar::parse_retry_request(
        schedule.as_slice(),
        policy.as_slice(),
        attempts.as_slice(),
        words,
    )?;
    let schedule_key = Key::open_write(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let dies = request.dies();
    let dead = match request.options.dead_letter {
        Some(dead) => {
            let name = options.get(dead.key_index).ok_or(ArgError::Syntax)?;
            // Type-checked dying or not; opened for writing only to write.
            let key = if dies {
                Key::open_write(ctx, name)
            } else {
                Key::open_read(ctx, name)
            };
            key.require(Kind::SortedSet)?;
            Some(key)
        }
        None => None,
    };

    if let (true, Some(dead_key)) = (dies, &dead) {
        dead_letter(&schedule_key, job, dead_key)?;
        stats::dead_lettered();
        release::failed(schedule.as_slice());
        return Ok(RedisValue::Integer(DEAD_LETTERED));
    }

    let jittered = request.delay.policy.is_jittered();
    let reply = schedule_after(&schedule_key, job, request.options, || {
        request
            .delay
            .policy
            .delay_ms_with_rng(request.delay.attempts, &mut rand::rng())
    })?;
    stats::retried(jittered);
    release::failed(schedule.as_slice());
    Ok(RedisValue::Integer(reply))
}

/// `ECHO.SCHEDULE schedule job delay_ms [NX | XX] [GT | LT]`
///
/// A run that is not a failure (a producer's delayed first run, a job
/// re-queued by hand): exactly `ECHO.RETRY schedule job fixed:<delay_ms> 1`
/// with the same options (validation, write, reply, events, replication),
/// but counted in `echomq_scheduled`, not as a retry, and never as a failure
/// of an adaptive release limit. `delay_ms` is `0..=10000000000000`.
// Kept out of line so profiles name each command (scripts/profile.sh).
#[inline(never)]
pub fn echo_schedule(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, job, delay_ms, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let mut buffer: [&[u8]; MAX_OPTION_WORDS] = [&[]; MAX_OPTION_WORDS];
    let Some(words) = buffer.get_mut(..options.len()) else {
        return Err(ArgError::Syntax.into());
    };
    for (word, option) in words.iter_mut().zip(options) {
        *word = option.as_slice();
    }
    let (delay_ms, options) = grammar::parse_schedule_request(delay_ms.as_slice(), words)?;
    let schedule_key = Key::open_write(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let reply = schedule_after(&schedule_key, job, options, || delay_ms)?;
    stats::scheduled();
    Ok(RedisValue::Integer(reply))
}

/// The write ECHO.RETRY and ECHO.SCHEDULE share: `job` at `now_ms +
/// delay_ms()` under the options' condition. The reply: the fire time in the
/// schedule after the call, or `NOT_SCHEDULED`. The delay is drawn only
/// when something may be written.
fn schedule_after(
    schedule_key: &Key,
    job: &Arg,
    options: RetryOptions,
    delay_ms: impl FnOnce() -> u64,
) -> Result<i64, RedisError> {
    let RetryOptions {
        presence, compare, ..
    } = options;
    // XX on a missing key: a low-level add would create the key and delete
    // it again; nothing to do, and nothing must be seen.
    if presence == Presence::Existing && schedule_key.kind() == Kind::Missing {
        return Ok(NOT_SCHEDULED);
    }
    // delay_ms <= 10^13 and now is a Unix time, so this never saturates and
    // stays far below 2^53: the f64 score is the exact integer.
    let fire_at_ms = clock::now_ms().saturating_add(i64::try_from(delay_ms()).unwrap_or(i64::MAX));
    Ok(
        match schedule_key.zadd(fire_at_ms, job, zadd_if(presence, compare))? {
            Zadd::Added | Zadd::Updated => fire_at_ms,
            // Kept by a condition, re-added at its own score, or kept out by XX.
            Zadd::Unchanged => schedule_key
                .zscore(job)
                .map_or(NOT_SCHEDULED, kept_score_ms),
        },
    )
}

/// ZADD's flags for the options. The parser has refused NX with GT or LT.
fn zadd_if(presence: Presence, compare: Compare) -> ZaddIf {
    match (presence, compare) {
        (Presence::New, _) => ZaddIf::New,
        (Presence::Any, Compare::Always) => ZaddIf::Always,
        (Presence::Any, Compare::Later) => ZaddIf::Greater,
        (Presence::Any, Compare::Earlier) => ZaddIf::Less,
        (Presence::Existing, Compare::Always) => ZaddIf::Existing,
        (Presence::Existing, Compare::Later) => ZaddIf::ExistingGreater,
        (Presence::Existing, Compare::Earlier) => ZaddIf::ExistingLess,
    }
}

/// A score kept in the schedule as the integer reply: rounded down, clamped
/// to i64 (a score written by hand may be fractional or infinite).
fn kept_score_ms(score: f64) -> i64 {
    // `as` saturates at the i64 bounds; a sorted set never holds NaN.
    score.floor() as i64
}

/// Moves `job` from `schedule` (if there) to `dead` at `now_ms`: `ZREM`
/// then `ZADD`, so the events come in that order (the add sends `new` itself
/// when it creates `dead`).
fn dead_letter(schedule: &Key, job: &Arg, dead: &Key) -> Result<(), RedisError> {
    schedule.zrem(job);
    // The add cannot fail once the job is out of the schedule: the server's
    // ZsetAdd refuses only a key not open for writing, a key of another type
    // (both ruled out above) and a NaN score (now_ms is a Unix time, exact
    // as a double).
    dead.zadd(clock::now_ms(), job, ZaddIf::Always)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_scores_round_down_and_clamp() {
        for (score, want) in [
            (1.0, 1),
            (1.5, 1),
            (1.999, 1),
            (-0.5, -1),
            (0.0, 0),
            (1e300, i64::MAX),
            (f64::INFINITY, i64::MAX),
            (f64::NEG_INFINITY, i64::MIN),
            (9_007_199_254_740_993.0, 9_007_199_254_740_992),
        ] {
            assert_eq!(kept_score_ms(score), want, "{score}");
        }
    }
}
