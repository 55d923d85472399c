//! `ECHO.REPEAT schedule id spec [JITTER ms] [TZ zone] [FROM ms] [UNTIL ms]
//! [PAYLOAD key value]`
//!
//! Creates or replaces the recurring definition `id` of `schedule` and arms
//! its first occurrence: the member `<id>@<nominal_ms>` of `schedule`,
//! scored by its fire time. When a release (ECHO.PROMOTE, the timer, through
//! every limit, hold and group rule) moves that member to pending, the same
//! atomic step arms the next occurrence, so exactly one is scheduled at any
//! time, whatever the number of promoters, workers or servers. A stretch
//! missed while the server was down or the queue held runs once.
//!
//! - `spec`: `every:<ms>` (`1000..=10000000000000`; occurrences at
//!   `anchor + k*ms`, the anchor `FROM`, or the time of the call with the
//!   first occurrence one interval later) or `cron:<5 fields>` (see
//!   `rules::recurrence`), in UTC or in `TZ` (an IANA zone).
//! - `JITTER ms` (`0..=` the spec's smallest interval): each occurrence fires
//!   at its nominal time plus a uniform draw in `0..=ms`.
//! - `FROM ms` / `UNTIL ms` (Unix ms): no occurrence before `FROM` or after
//!   `UNTIL`; the definition is removed when its last occurrence is released.
//! - `PAYLOAD key value`: `HSET key <occurrence> value` each time an
//!   occurrence is armed (the client libraries' `jobs` hash), so a worker
//!   that reads a job's payload by its id runs the definition's.
//!
//! The same definition again (the same spec, jitter, zone, bounds and
//! payload) changes nothing while its occurrence is armed: every instance of
//! an application may declare its recurring jobs at start. A different one
//! replaces it: the armed occurrence (and its payload field) is removed and
//! the new definition armed from now.
//!
//! Reply: integer, the fire time (Unix ms) of the armed occurrence.
//! Errors: every malformed spec, zone, option or bound, in the words of
//! `rules::errors`; `ERR the definition has no occurrence still to come
//! (before UNTIL)`; `WRONGTYPE` when `schedule` is not a sorted set, the
//! definitions hash or the payload key not a hash; all checked before any
//! write.
//! Keys: `schedule`, and `key` of `PAYLOAD`; the definitions are the hash
//! `<schedule>:echomq-repeats` (`{<schedule>}:echomq-repeats` for a name
//! without a hash tag), in the schedule's slot.
//! Replication: the effects only, never the command (its clock reading and
//! jitter draw differ on a replica): `HSET <definitions> id <definition>`,
//! `ZADD schedule <fire_ms> <occurrence>`, `HSET key <occurrence> value`,
//! and for a replacement `ZREM` / `HDEL` of the old occurrence.

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use super::option_words;
use crate::engine::recurring;
use crate::rules::grammar::ArgError;
use crate::rules::recurrence::definition::{parse_repeat, RepeatError, MAX_REPEAT_OPTION_WORDS};
use crate::server::keys::Arg;
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};

/// ECHO.REPEAT's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.REPEAT",
    entry: entry_point!(echo_repeat),
    flags: c"write deny-oom",
    arity: -4,
    keys: &[
        KeyDoc {
            at: KeyAt::Index(1),
            flags: K::READ_WRITE.union(K::UPDATE),
        },
        KeyDoc {
            at: KeyAt::Keyword {
                keyword: "PAYLOAD",
                start_from: 4,
            },
            flags: K::READ_WRITE.union(K::UPDATE),
        },
    ],
    acl_categories: c"write sortedset hash",
    summary: c"Creates or replaces a recurring job: its next occurrence is armed in the schedule, jittered, and each release arms the next.",
    complexity: c"O(log(N)) with N the members of the schedule, plus the next-occurrence search of the spec.",
    tips: Some(c"nondeterministic_output"),
};

pub fn echo_repeat(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, id, spec, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let mut buffer: [&[u8]; MAX_REPEAT_OPTION_WORDS] = [&[]; MAX_REPEAT_OPTION_WORDS];
    let words = option_words(options, &mut buffer).ok_or(ArgError::Syntax)?;
    let request = parse_repeat(id.as_slice(), spec.as_slice(), words).map_err(|e| match e {
        RepeatError::Arg(e) => RedisError::from(e),
        RepeatError::Spec(e) => RedisError::from(e),
    })?;
    let payload = match request.payload {
        Some(at) => Some((
            options.get(at).ok_or(ArgError::Syntax)?,
            options.get(at + 1).ok_or(ArgError::Syntax)?,
        )),
        None => None,
    };
    let fire_at_ms = recurring::define(ctx, schedule, id, &request, payload)?;
    Ok(RedisValue::Integer(fire_at_ms))
}
