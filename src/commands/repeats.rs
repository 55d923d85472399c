//! `ECHO.REPEATS schedule`
//!
//! Every recurring definition of `schedule`, by id (bytes compared as
//! unsigned). Each a map (RESP3) or a flat field/value array (RESP2), fields
//! in this order: `id`, `spec` (as given), `jitter-ms`, `tz` (the zone's
//! name, `UTC` without `TZ`), `from-ms` and `until-ms` (nil when not given),
//! `next-ms` (the nominal time of the armed occurrence), `fire-at-ms` (its
//! fire time, nil when the member was removed by hand: an ECHO.REPEAT of
//! the same definition arms it again), `payload-key` (nil without
//! `PAYLOAD`).
//!
//! Reply: an array of the definitions (empty when there are none).
//! Errors: `WRONGTYPE` when `schedule` is not a sorted set or its
//! definitions hash not a hash.
//! Replication: none; read-only.

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::engine::recurring;
use crate::server::keys::Arg;
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};
use crate::server::reply::{self, Field};

/// ECHO.REPEATS's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.REPEATS",
    entry: entry_point!(echo_repeats),
    flags: c"readonly",
    arity: 2,
    keys: &[KeyDoc {
        at: KeyAt::Index(1),
        flags: K::READ_ONLY,
    }],
    acl_categories: c"read sortedset hash",
    summary: c"Lists the recurring jobs of a schedule with their next fire times.",
    complexity: c"O(D * log(N)) with D the definitions and N the members of the schedule.",
    tips: None,
};

pub fn echo_repeats(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule] = args else {
        return Err(RedisError::WrongArity);
    };
    let listed = recurring::list(ctx, schedule)?;
    reply::array(ctx, listed.len());
    let ms = |v: Option<i64>| v.map_or(Field::Null, Field::Integer);
    for each in &listed {
        let d = &each.definition;
        let zone: &[u8] = if d.zone.is_empty() { b"UTC" } else { &d.zone };
        reply::map(
            ctx,
            &[
                (c"id", Field::Bytes(&each.id)),
                (c"spec", Field::Bytes(&d.spec)),
                (
                    c"jitter-ms",
                    Field::Integer(i64::try_from(d.jitter_ms).unwrap_or(i64::MAX)),
                ),
                (c"tz", Field::Bytes(zone)),
                (c"from-ms", ms(d.from_ms)),
                (c"until-ms", ms(d.until_ms)),
                (c"next-ms", Field::Integer(d.next_ms)),
                (c"fire-at-ms", ms(each.fire_at_ms)),
                (
                    c"payload-key",
                    d.payload
                        .as_ref()
                        .map_or(Field::Null, |(key, _)| Field::Bytes(key)),
                ),
            ],
        );
    }
    Ok(RedisValue::NoReply)
}
