//! `ECHO.UNREPEAT schedule id`
//!
//! Removes the recurring definition `id` of `schedule` and its armed
//! occurrence (with the occurrence's `PAYLOAD` field). An occurrence already
//! released runs to its end; its outcome is the queue's as for any job.
//!
//! Reply: integer, `1` when the definition existed, else `0`.
//! Errors: `WRONGTYPE` when `schedule` is not a sorted set or its
//! definitions hash not a hash, checked before any write.
//! Keys: `schedule` (the definitions hash is in its slot, see ECHO.REPEAT).
//! Replication: `ZREM schedule <occurrence>`, `HDEL <payload key>
//! <occurrence>`, `HDEL <definitions> id`; nothing when there was none.

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::engine::recurring;
use crate::server::keys::Arg;
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};

/// ECHO.UNREPEAT's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.UNREPEAT",
    entry: entry_point!(echo_unrepeat),
    flags: c"write fast",
    arity: 3,
    keys: &[KeyDoc {
        at: KeyAt::Index(1),
        flags: K::READ_WRITE.union(K::DELETE),
    }],
    acl_categories: c"write sortedset hash fast",
    summary: c"Removes a recurring job and its armed occurrence.",
    complexity: c"O(log(N)) with N the members of the schedule.",
    tips: None,
};

pub fn echo_unrepeat(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, id] = args else {
        return Err(RedisError::WrongArity);
    };
    let removed = recurring::remove(ctx, schedule, id.as_slice())?;
    Ok(RedisValue::Integer(i64::from(removed)))
}
