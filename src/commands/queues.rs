//! `ECHO.QUEUES`
//!
//! Lists the queues the server promotes itself: the `schedule pending` pairs
//! of `echomq.auto-promote`, in the order configured. The same list as
//! `CONFIG GET echomq.auto-promote`, for a user who may not run CONFIG (an
//! @admin, @dangerous command that would also show the server's passwords).
//!
//! Reply: an array with one two-element array `[schedule, pending]` per
//! pair; an empty array when promotion inside the server is off.
//! Errors: the server's arity error for any argument.
//! Replication: none; read-only, no keys.

use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::engine::ticker;
use crate::server::keys::Arg;
use crate::server::register::{entry_point, Command};

/// ECHO.QUEUES's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.QUEUES",
    entry: entry_point!(echo_queues),
    flags: c"readonly fast",
    arity: 1,
    keys: &[],
    acl_categories: c"read fast",
    summary:
        c"Lists the schedule and pending pairs the server promotes itself (echomq.auto-promote).",
    complexity: c"O(N) with N the configured pairs.",
    tips: None,
};

pub fn echo_queues(_ctx: &Context, args: &[Arg]) -> RedisResult {
    if args.len() != 1 {
        return Err(RedisError::WrongArity);
    }
    let pairs = ticker::pairs()
        .into_iter()
        .map(|pair| {
            RedisValue::Array(vec![
                RedisValue::StringBuffer(pair.schedule),
                RedisValue::StringBuffer(pair.pending),
            ])
        })
        .collect();
    Ok(RedisValue::Array(pairs))
}
