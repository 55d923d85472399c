//! `ECHO.SCHEDULE schedule job delay_ms [NX | XX] [GT | LT] [GROUP group]`
//!
//! A run that is not a failure (a producer's delayed first run, a job
//! re-queued by hand): exactly `ECHO.RETRY schedule job fixed:<delay_ms> 1`
//! with the same options (validation, write, reply, events, replication),
//! but counted in `echomq_scheduled`, not as a retry, and never as a failure
//! of an adaptive release limit. `delay_ms` is `0..=10000000000000`.

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::commands::option_words;
use crate::engine::scheduling::schedule_after;
use crate::engine::{groups, stats};
use crate::rules::grammar::{self, parse_retry_options, ArgError, RetryOptions, MAX_OPTION_WORDS};
use crate::server::keys::{Arg, Key, Kind};
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};

/// ECHO.SCHEDULE's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.SCHEDULE",
    entry: entry_point!(echo_schedule),
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
    let words = option_words(options, &mut buffer).ok_or(ArgError::Syntax)?;
    let (delay_ms, parsed) = parse_schedule_request(delay_ms.as_slice(), words)?;
    let group_names = groups::names_for(ctx, schedule, options, parsed.group)?;
    let schedule_key = Key::open_write(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let group = group_names.as_ref().map(|n| n.open(ctx)).transpose()?;
    let target = group.as_ref().map_or(&schedule_key, |g| &g.members);
    let reply = schedule_after(target, job, parsed, || delay_ms)?;
    if let Some(group) = &group {
        group.reindex()?;
    }
    stats::scheduled();
    Ok(RedisValue::Integer(reply))
}

/// `ECHO.SCHEDULE schedule job delay_ms [NX | XX] [GT | LT]`: the delay and
/// the options, which are ECHO.RETRY's without dead-lettering.
fn parse_schedule_request(
    delay_ms: &[u8],
    options: &[&[u8]],
) -> Result<(u64, RetryOptions), ArgError> {
    let delay_ms = grammar::delay_ms(delay_ms).ok_or(ArgError::DelayMs)?;
    let parsed = parse_retry_options(options)?;
    if parsed.dead_letter.is_some() {
        return Err(ArgError::Syntax);
    }
    Ok((delay_ms, parsed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::policy::MAX_MS;

    #[test]
    fn schedule_arguments() {
        assert_eq!(parse_schedule_request(b"0", &[]).map(|r| r.0), Ok(0));
        assert_eq!(
            parse_schedule_request(b"10000000000000", &[b"NX"]).map(|r| r.0),
            Ok(MAX_MS)
        );
        assert_eq!(
            parse_schedule_request(b"10000000000001", &[]),
            Err(ArgError::DelayMs)
        );
        assert_eq!(parse_schedule_request(b"-1", &[]), Err(ArgError::DelayMs));
        assert_eq!(
            parse_schedule_request(b"1", &[b"MAXATTEMPTS", b"1", b"DEAD", b"d"]),
            Err(ArgError::Syntax)
        );
        assert_eq!(
            parse_schedule_request(b"1", &[b"NX", b"XX"]),
            Err(ArgError::Conflict("XX and NX"))
        );
    }

    /// The libraries clamp to the bounds in `protocol/constants.json` before
    /// they send: those must be the server's own, or a clamped delay or hold
    /// would still be refused.
    #[test]
    fn the_protocol_constants_are_the_servers_bounds() {
        let constants = include_str!("../../protocol/constants.json");
        let field = |name: &str| {
            let at = constants.find(&format!("\"{name}\":")).expect(name) + name.len() + 3;
            let digits: String = constants[at..]
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<u64>().expect(name)
        };
        assert_eq!(field("max_delay_ms"), MAX_MS);
        assert_eq!(field("max_hold_ms"), crate::rules::limiter::MAX_HOLD_MS);
        // what the libraries check a group's name, limit and page size against
        use crate::rules::fairness::{MAX_GROUPS_COUNT, MAX_GROUP_BYTES};
        use crate::rules::limiter::{MAX_BURST, MAX_RATE};
        assert_eq!(field("max_job_group_bytes"), MAX_GROUP_BYTES as u64);
        assert_eq!(field("max_group_rate"), MAX_RATE);
        assert_eq!(field("max_group_burst"), MAX_BURST);
        assert_eq!(field("max_groups_count"), MAX_GROUPS_COUNT);
        // and a recurring job's id and every:<ms>
        use crate::rules::recurrence::definition::MAX_ID_BYTES;
        use crate::rules::recurrence::{MAX_EVERY_MS, MIN_EVERY_MS};
        assert_eq!(field("max_repeat_id_bytes"), MAX_ID_BYTES as u64);
        assert_eq!(field("min_every_ms"), MIN_EVERY_MS);
        assert_eq!(field("max_every_ms"), MAX_EVERY_MS);
    }
}
