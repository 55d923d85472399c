//! `ECHO.PROMOTE schedule pending [LIMIT n]`
//!
//! Moves the members of the sorted set `schedule` whose score is `<= now_ms`
//! to `pending`, earliest first (ties in the set's own order), at most `n`
//! (default 1000). `pending` a list (or missing: a list is created): each is
//! pushed at the head in fire-time order, so the earliest-due job sits at the
//! right end and `RPOP`/`BRPOP` take it first. `pending` a stream: each
//! becomes one entry `job <member>` with an ID the server chooses, in
//! fire-time order, so a consumer group delivers the earliest-due first. An
//! emptied `schedule` is deleted; clients blocked on `pending` wake.
//!
//! Reply: integer, the number of members moved.
//! Errors: `WRONGTYPE` when `schedule` is not a sorted set or `pending`
//! neither a list nor a stream, checked before anything moves, even when
//! nothing is due; the same key twice; a malformed LIMIT. Nothing is written
//! on those errors. A stream whose IDs run out (possible only after an entry
//! was added by hand at the top of the ID space) takes what it can: those
//! members stay moved and replicated, the rest stay scheduled, and the reply
//! is XADD's own error.
//! Replication: the effects, `ZREM schedule m1..mk` and `LPUSH pending
//! m1..mk`, or one `XADD pending <ms>-<seq> job <m>` per entry with the ID
//! the primary chose, of exactly the members moved (the server wraps them in
//! MULTI/EXEC).

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::engine::mover::{self, TimeLimit};
use crate::engine::stats;
use crate::rules::grammar::{canonical_u64, ArgError};
use crate::server::clock;
use crate::server::keys::Arg;
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};

/// ECHO.PROMOTE's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.PROMOTE",
    entry: entry_point!(echo_promote),
    // not deny-oom: moving a job frees about what it uses
    flags: c"write",
    arity: -3,
    keys: &[
        KeyDoc {
            at: KeyAt::Index(1),
            flags: K::READ_WRITE.union(K::ACCESS).union(K::DELETE),
        },
        KeyDoc {
            at: KeyAt::Index(2),
            flags: K::READ_WRITE.union(K::INSERT),
        },
    ],
    acl_categories: c"write sortedset list stream slow",
    summary: c"Moves the due jobs of a schedule to a pending list or stream, earliest first.",
    complexity: c"O(M*log(N)) with M the jobs moved and N the jobs in the schedule.",
    tips: None,
};

// Kept out of line so profiles name each command (scripts/profile.sh).
#[inline(never)]
pub fn echo_promote(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, pending, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let options: Vec<&[u8]> = options.iter().map(Arg::as_slice).collect();
    let limit = parse_promote_request(schedule.as_slice(), pending.as_slice(), &options)?;
    let moved = mover::move_due(
        ctx,
        schedule,
        pending,
        limit,
        clock::now_ms(),
        TimeLimit::Unbounded,
    )?;
    if let Some(why) = moved.refused {
        stats::promoted_partly(moved.count);
        return Err(why.into());
    }
    stats::promoted(moved.count);
    Ok(RedisValue::Integer(
        i64::try_from(moved.count).unwrap_or(i64::MAX),
    ))
}

/// Promote moves at most this many members when the call names no LIMIT.
const DEFAULT_PROMOTE_LIMIT: u64 = 1000;

/// ECHO.PROMOTE's keys and options: two distinct keys, then nothing or
/// `LIMIT n`. Gives the limit.
fn parse_promote_request(
    schedule: &[u8],
    pending: &[u8],
    options: &[&[u8]],
) -> Result<u64, ArgError> {
    let limit = parse_promote_limit(options)?;
    if schedule == pending {
        return Err(ArgError::SameKey);
    }
    Ok(limit)
}

/// ECHO.PROMOTE's options after the two keys: nothing, or `LIMIT n`.
fn parse_promote_limit(options: &[&[u8]]) -> Result<u64, ArgError> {
    match options {
        [] => Ok(DEFAULT_PROMOTE_LIMIT),
        [keyword, n] if keyword.eq_ignore_ascii_case(b"LIMIT") => canonical_u64(n, i64::MAX as u64)
            .filter(|&n| n >= 1)
            .ok_or(ArgError::Limit),
        _ => Err(ArgError::Syntax),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promote_limit_and_keys() {
        assert_eq!(
            parse_promote_request(b"s", b"p", &[]),
            Ok(DEFAULT_PROMOTE_LIMIT)
        );
        assert_eq!(
            parse_promote_request(b"s", b"s", &[]),
            Err(ArgError::SameKey)
        );
        // a malformed LIMIT is reported before the keys are compared
        assert_eq!(
            parse_promote_request(b"s", b"s", &[b"LIMIT"]),
            Err(ArgError::Syntax)
        );
        assert_eq!(parse_promote_limit(&[]), Ok(DEFAULT_PROMOTE_LIMIT));
        assert_eq!(parse_promote_limit(&[b"limit", b"5"]), Ok(5));
        assert_eq!(
            parse_promote_limit(&[b"LIMIT", b"9223372036854775807"]),
            Ok(i64::MAX as u64)
        );
        assert_eq!(parse_promote_limit(&[b"LIMIT", b"0"]), Err(ArgError::Limit));
        assert_eq!(
            parse_promote_limit(&[b"LIMIT", b"-1"]),
            Err(ArgError::Limit)
        );
        assert_eq!(parse_promote_limit(&[b"LIMIT"]), Err(ArgError::Syntax));
        assert_eq!(
            parse_promote_limit(&[b"COUNT", b"5"]),
            Err(ArgError::Syntax)
        );
        assert_eq!(
            parse_promote_limit(&[b"LIMIT", b"5", b"x"]),
            Err(ArgError::Syntax)
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        crate::rules::grammar::never_panics(|bytes| {
            let _ = parse_promote_limit(&[b"LIMIT", bytes]);
            let _ = parse_promote_limit(&[bytes]);
        });
    }
}
