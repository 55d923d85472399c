//! `ECHO.HOLD schedule ms [GROUP group]`
//!
//! Nothing is released from `schedule` before `now_ms + ms`, by ECHO.PROMOTE
//! or the timer: the answer to a dependency's `429`/`503` with
//! `Retry-After`, which one worker gives for all. A longer hold already in
//! force is kept; `ms = 0` lifts the hold. Any schedule may be held, limited
//! in `echomq.release-limits` or not. `ms` is `0..=86400000`.
//!
//! Reply: integer, the server time in ms until which the schedule is held
//! (`0` when not held).
//! Errors: a malformed `ms`; `WRONGTYPE` when the hold key is of another
//! type; in a cluster, a schedule whose hold key cannot share its slot (a `}`
//! in a name without a hash tag); `OOM ...` for a new hold of a schedule that
//! does not exist while used memory is over maxmemory (extending or lifting a
//! hold, and holding a queue that has jobs, always work).
//! Keys: `schedule`, declared, and the command is flagged `write`, so a
//! cluster routes it to the owner and a replica refuses it. The hold is the
//! string key `<schedule>:echomq-hold` (`{<schedule>}:echomq-hold` for a
//! name without a hash tag), in the schedule's slot, holding the end of the
//! hold in server ms and expiring then: a key like any other, so a replica,
//! an AOF, a failover and a slot move keep the hold, and its memory counts in
//! maxmemory.
//! Replication: `SET <hold key> <until> PXAT <until>` when the hold grows,
//! `DEL <hold key>` when `ms = 0` lifts one; nothing when a longer hold is
//! kept.
//!
//! `GROUP group` holds one group of a grouped schedule instead (the
//! schedule needs a hash tag, `ERR a grouped schedule needs a {hash tag}`;
//! the group 1..=1024 bytes, `ERR group must be 1..=1024 bytes`): nothing of
//! that group is released before `now_ms + ms`, and the other groups go on
//! (the ungrouped members are held only by a hold of the whole schedule). The
//! rule of a longer hold, `ms = 0` and the reply are the same. The hold is
//! the string key `<schedule>:echomq-ghold:<group>`, expiring when it ends;
//! a release that meets the held group puts it in the time index at the
//! hold's end, out of the rotation until then. A group may be held before it
//! has members (the OOM rule above then refuses a new hold, as of a schedule
//! that does not exist); `ECHO.GROUPS` shows the hold (`held-until-ms`),
//! `ECHO.LIMITS` does not. Errors also: `WRONGTYPE` when the hold key is not
//! a string or a key of the group (its set, the index, the ring, the
//! directory) not a sorted set, checked before anything is written.
//! Replication: as above, of the group's hold key; lifting a hold also
//! writes `ZADD <index> <earliest fire time> <group>` when the group waited
//! for the hold's end, so it is released from now on.

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisResult, RedisValue};

use super::option_words;
use crate::engine::{groups, release};
use crate::rules::grammar::{canonical_u64, group_name, ArgError};
use crate::rules::limiter::MAX_HOLD_MS;
use crate::server::keys::Arg;
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};

/// ECHO.HOLD's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.HOLD",
    entry: entry_point!(echo_hold),
    // write: routed to the owner and refused by a replica, though it
    // writes no key; not deny-oom, it frees the dependency, not memory
    flags: c"write fast",
    arity: -3,
    keys: &[KeyDoc {
        at: KeyAt::Index(1),
        // changes how the schedule is released, not its members
        flags: K::READ_WRITE.union(K::UPDATE),
    }],
    acl_categories: c"write sortedset fast",
    summary: c"Releases nothing from a schedule for a time: a dependency's Retry-After, for every worker.",
    complexity: c"O(1); with GROUP, O(log(G)) with G the number of groups of the schedule.",
    tips: None,
};

pub fn echo_hold(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, ms, options @ ..] = args else {
        return Err(redis_module::RedisError::WrongArity);
    };
    let ms = parse_hold_ms(ms.as_slice())?;
    let mut buffer: [&[u8]; 2] = [&[]; 2];
    let words = option_words(options, &mut buffer).ok_or(ArgError::Syntax)?;
    match parse_hold_group(words)? {
        None => release::hold(ctx, schedule, ms),
        Some(at) => {
            let group = options.get(at).ok_or(ArgError::Syntax)?;
            groups::hold(ctx, schedule.as_slice(), group.as_slice(), ms)
        }
    }
    .map(RedisValue::Integer)
}

/// `ECHO.HOLD schedule ms`: the hold in ms, `0..=MAX_HOLD_MS`.
fn parse_hold_ms(ms: &[u8]) -> Result<u64, ArgError> {
    canonical_u64(ms, MAX_HOLD_MS).ok_or(ArgError::HoldMs)
}

/// The words after `ms`: none, or `GROUP group` (the keyword in any case):
/// the position of the group's name among them.
fn parse_hold_group(options: &[&[u8]]) -> Result<Option<usize>, ArgError> {
    match options {
        [] => Ok(None),
        [keyword, group] if keyword.eq_ignore_ascii_case(b"GROUP") => {
            group_name(group)?;
            Ok(Some(1))
        }
        _ => Err(ArgError::Syntax),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_arguments() {
        assert_eq!(parse_hold_ms(b"0"), Ok(0));
        assert_eq!(parse_hold_ms(b"86400000"), Ok(86_400_000));
        assert_eq!(parse_hold_ms(b"86400001"), Err(ArgError::HoldMs));
        assert_eq!(parse_hold_ms(b"1s"), Err(ArgError::HoldMs));
        assert_eq!(parse_hold_group(&[]), Ok(None));
        assert_eq!(parse_hold_group(&[b"group", b"g"]), Ok(Some(1)));
        assert_eq!(parse_hold_group(&[b"GROUP"]), Err(ArgError::Syntax));
        assert_eq!(parse_hold_group(&[b"GROUP", b""]), Err(ArgError::GroupName));
        assert_eq!(
            parse_hold_group(&[b"GROUP", b"g", b"x"]),
            Err(ArgError::Syntax)
        );
        assert_eq!(parse_hold_group(&[b"LIMIT", b"g"]), Err(ArgError::Syntax));
    }
}
