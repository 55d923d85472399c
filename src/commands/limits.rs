//! `ECHO.LIMITS schedule`
//!
//! The release state of `schedule`, fields in this order: `rate` (the
//! configured rate, or ceiling, per second), `rate-in-force` (per second),
//! `burst`, `adaptive` (0/1), `available` (how many members the limit lets
//! leave now, due or not), `held-until-ms` (0 when not held), `released`
//! and `failures` (since the entry was set). For a schedule not listed in
//! `echomq.release-limits` every field but `held-until-ms` is nil: the module
//! keeps no state for it (a hold is a key beside it, see ECHO.HOLD).
//!
//! Reply: a map (RESP3) or a flat field/value array (RESP2).
//! Replication: none; read-only.

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::engine::release;
use crate::server::keys::Arg;
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};
use crate::server::reply::{self, Field};

/// ECHO.LIMITS's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.LIMITS",
    entry: entry_point!(echo_limits),
    flags: c"readonly fast",
    arity: 2,
    keys: &[KeyDoc {
        at: KeyAt::Index(1),
        flags: K::READ_ONLY,
    }],
    acl_categories: c"read sortedset fast",
    summary:
        c"The release limit of a schedule: rates, burst, what it allows now, its hold and counts.",
    complexity: c"O(log(N)) with N the number of limited and held schedules.",
    tips: Some(c"nondeterministic_output"),
};

pub fn echo_limits(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule] = args else {
        return Err(RedisError::WrongArity);
    };
    let snapshot = release::snapshot(ctx, schedule.as_slice());
    let count = |n: u64| Field::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    let limit = snapshot.limit.as_ref();
    reply::map(
        ctx,
        &[
            (
                c"rate",
                limit.map_or(Field::Null, |l| Field::Double(l.rate_per_second)),
            ),
            (
                c"rate-in-force",
                limit.map_or(Field::Null, |l| Field::Double(l.in_force_per_second)),
            ),
            (c"burst", limit.map_or(Field::Null, |l| count(l.burst))),
            (
                c"adaptive",
                limit.map_or(Field::Null, |l| Field::Integer(i64::from(l.adaptive))),
            ),
            (
                c"available",
                limit.map_or(Field::Null, |l| count(l.available)),
            ),
            (
                c"held-until-ms",
                Field::Integer(snapshot.held_until_ms.unwrap_or(0)),
            ),
            (
                c"released",
                limit.map_or(Field::Null, |l| count(l.released)),
            ),
            (
                c"failures",
                limit.map_or(Field::Null, |l| count(l.failures)),
            ),
        ],
    );
    Ok(RedisValue::NoReply)
}
