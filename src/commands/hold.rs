//! `ECHO.HOLD schedule ms`
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

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisResult, RedisValue};

use crate::engine::release;
use crate::rules::grammar::{canonical_u64, ArgError};
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
    arity: 3,
    keys: &[KeyDoc {
        at: KeyAt::Index(1),
        // changes how the schedule is released, not its members
        flags: K::READ_WRITE.union(K::UPDATE),
    }],
    acl_categories: c"write sortedset fast",
    summary: c"Releases nothing from a schedule for a time: a dependency's Retry-After, for every worker.",
    complexity: c"O(log(N)) with N the number of held schedules.",
    tips: None,
};

pub fn echo_hold(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, ms] = args else {
        return Err(redis_module::RedisError::WrongArity);
    };
    let ms = parse_hold_ms(ms.as_slice())?;
    release::hold(ctx, schedule, ms).map(RedisValue::Integer)
}

/// `ECHO.HOLD schedule ms`: the hold in ms, `0..=MAX_HOLD_MS`.
fn parse_hold_ms(ms: &[u8]) -> Result<u64, ArgError> {
    canonical_u64(ms, MAX_HOLD_MS).ok_or(ArgError::HoldMs)
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
    }
}
