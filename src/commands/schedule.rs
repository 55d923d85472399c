//! `ECHO.SCHEDULE schedule job delay_ms [NX | XX] [GT | LT]`
//!
//! A run that is not a failure (a producer's delayed first run, a job
//! re-queued by hand): exactly `ECHO.RETRY schedule job fixed:<delay_ms> 1`
//! with the same options (validation, write, reply, events, replication),
//! but counted in `echomq_scheduled`, not as a retry, and never as a failure
//! of an adaptive release limit. `delay_ms` is `0..=10000000000000`.

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::engine::scheduling::schedule_after;
use crate::engine::stats;
use crate::rules::grammar::{self, ArgError, MAX_OPTION_WORDS};
use crate::server::keys::{Arg, Key, Kind};
use crate::server::register::{Command, KeyAt, KeyDoc};

/// ECHO.SCHEDULE's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.SCHEDULE",
    entry: crate::entry_point!(echo_schedule),
    flags: c"write deny-oom fast",
    arity: -4,
    keys: &[KeyDoc {
        at: KeyAt::Index(1),
        flags: K::READ_WRITE.union(K::UPDATE),
    }],
    acl_categories: c"write sortedset fast",
    summary: c"Adds a job to a schedule at now plus a delay: a run that is not a failure.",
    complexity: c"O(log(N)) with N the number of jobs in the schedule.",
    tips: None,
};

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
