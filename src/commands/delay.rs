//! `ECHO.DELAY policy attempts`
//!
//! Computes one delay exactly as ECHO.RETRY would (a fresh draw for a jittered
//! policy) and writes nothing.
//!
//! Reply: integer, the delay in ms.
//! Errors: as ECHO.RETRY's policy and attempts errors.
//! Replication: none; the command is read-only and has no keys.

use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::rules::grammar;
use crate::server::keys::Arg;
use crate::server::register::{entry_point, Command};

/// ECHO.DELAY's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.DELAY",
    entry: entry_point!(echo_delay),
    flags: c"readonly fast",
    arity: 3,
    keys: &[],
    acl_categories: c"fast",
    summary: c"Computes one delay of a policy for an attempt count, writing nothing.",
    complexity: c"O(1)",
    tips: Some(c"nondeterministic_output"),
};

// Kept out of line so profiles name each command (scripts/profile.sh).
#[inline(never)]
pub fn echo_delay(_ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, policy, attempts] = args else {
        return Err(RedisError::WrongArity);
    };
    let request = grammar::parse_delay_request(policy.as_slice(), attempts.as_slice())?;
    let delay_ms = request
        .policy
        .delay_ms_with_rng(request.attempts, &mut rand::rng());
    // delay_ms <= 10^13 always fits.
    Ok(RedisValue::Integer(
        i64::try_from(delay_ms).unwrap_or(i64::MAX),
    ))
}
