//! `ECHO.RETRY schedule job policy attempts [NX | XX] [GT | LT] [MAXATTEMPTS n DEAD dead] [GROUP group]`
//!
//! Computes `policy`'s delay for `attempts` from the server's command time
//! and random generator, and adds `job` to the sorted set `schedule` with
//! score `fire_at_ms = now_ms + delay_ms`, replacing the score of a job
//! already there. A missing `schedule` is created. `NX`, `XX`, `GT` and `LT`
//! condition the write as they condition ZADD; a job whose score they keep
//! is written nowhere. With `MAXATTEMPTS n DEAD dead` and `attempts >= n` the
//! job is dead-lettered instead: removed from `schedule` and added to the
//! sorted set `dead` at `now_ms`, with no delay drawn and no condition
//! applied. With `GROUP group` (a schedule with a hash tag) every one of
//! these writes goes to the group's members, `<schedule>:echomq-g:<group>`,
//! instead of `schedule`, and the group is kept in the schedule's time
//! index (`engine::groups`), so its release is fair across groups.
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

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::commands::option_words;
use crate::engine::scheduling::{dead_letter, schedule_after};
use crate::engine::{groups, release, stats};
use crate::rules::grammar::{self, ArgError, MAX_OPTION_WORDS};
use crate::server::context;
use crate::server::keys::{Arg, Key, Kind};
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};

/// The argument index of the first option (after `attempts`).
const FIRST_OPTION: usize = 5;
/// The reply for a dead-lettered job.
const DEAD_LETTERED: i64 = -1;

/// ECHO.RETRY's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.RETRY",
    entry: entry_point!(echo_retry),
    // getkeys-api: cluster routing learns of the optional dead key from
    // the command itself (it reads only the fixed key range otherwise)
    flags: c"write deny-oom fast getkeys-api",
    arity: -5,
    keys: &[
        KeyDoc {
            at: KeyAt::Index(1),
            // UPDATE also covers dead-lettering's removal: the server
            // allows one of INSERT, DELETE and UPDATE
            flags: K::READ_WRITE.union(K::UPDATE),
        },
        KeyDoc {
            // options start after `attempts`, so a job or policy spelled
            // DEAD is never taken for the keyword
            at: KeyAt::Keyword {
                keyword: "DEAD",
                start_from: 5,
            },
            flags: K::READ_WRITE.union(K::UPDATE),
        },
    ],
    acl_categories: c"write sortedset fast",
    summary: c"Adds a job to a schedule at now plus the policy's delay for its attempt count, or dead-letters it after its last attempt.",
    complexity: c"O(log(N)) with N the number of jobs in the schedule (and the dead set).",
    tips: Some(c"nondeterministic_output"),
};

// Kept out of line so profiles name each command (scripts/profile.sh).
#[inline(never)]
pub fn echo_retry(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, job, policy, attempts, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let mut buffer: [&[u8]; MAX_OPTION_WORDS] = [&[]; MAX_OPTION_WORDS];
    let words = match option_words(options, &mut buffer) {
        Some(words) => words,
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
    let group_names = groups::names_for(ctx, schedule, options, request.options.group)?;
    let schedule_key = Key::open_write(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let group = group_names.as_ref().map(|n| n.open(ctx)).transpose()?;
    let target = group.as_ref().map_or(&schedule_key, |g| &g.members);
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
        dead_letter(target, job, dead_key)?;
        if let Some(group) = &group {
            group.reindex()?;
        }
        stats::dead_lettered();
        release::failed(ctx, schedule.as_slice());
        return Ok(RedisValue::Integer(DEAD_LETTERED));
    }

    let jittered = request.delay.policy.is_jittered();
    let reply = schedule_after(target, job, request.options, || {
        request
            .delay
            .policy
            .delay_ms_with_rng(request.delay.attempts, &mut rand::rng())
    })?;
    if let Some(group) = &group {
        group.reindex()?;
    }
    stats::retried(jittered);
    release::failed(ctx, schedule.as_slice());
    Ok(RedisValue::Integer(reply))
}
