//! `ECHO.SPREAD schedule start_ms end_ms buckets`
//!
//! Splits `[start_ms, end_ms)` into `buckets` buckets, bucket `i` covering
//! `[start_ms + floor(i*W/buckets), start_ms + floor((i+1)*W/buckets))` with
//! `W = end_ms - start_ms`, and counts the members of `schedule` whose score
//! falls in each: the herd made visible. One range count per bucket, so the
//! cost is O(buckets * log N) whatever the size of the set.
//!
//! Reply: array of `buckets` integers; all zeros for a missing key.
//! Errors: argument errors from its grammar; `WRONGTYPE` for a non-sorted-set.
//! Replication: none; read-only.

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::rules::buckets::{ceil_to_f64, edge_text, SpreadRequest, MAX_SPREAD_BUCKETS};
use crate::rules::errors::ReplyError;
use crate::rules::grammar::{canonical_i64, canonical_u64, ArgError};
use crate::server::keys::{Arg, Key, Kind};
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};

/// ECHO.SPREAD's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.SPREAD",
    entry: entry_point!(echo_spread),
    flags: c"readonly",
    arity: 5,
    // counts only, never the members: RO without ACCESS, as ZCOUNT
    keys: &[KeyDoc {
        at: KeyAt::Index(1),
        flags: K::READ_ONLY,
    }],
    acl_categories: c"read sortedset slow",
    summary: c"Counts a schedule's jobs in equal time buckets.",
    complexity: c"O(B*log(N)) with B the buckets and N the jobs in the schedule.",
    tips: None,
};

// Kept out of line so profiles name each command (scripts/profile.sh).
#[inline(never)]
pub fn echo_spread(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, start_ms, end_ms, buckets] = args else {
        return Err(RedisError::WrongArity);
    };
    let request = parse_spread_request(start_ms.as_slice(), end_ms.as_slice(), buckets.as_slice())?;
    let kind = Key::open_read(ctx, schedule).kind();
    if kind != Kind::Missing && kind != Kind::SortedSet {
        return Err(RedisError::WrongType);
    }
    let mut counts = Vec::with_capacity(usize::try_from(request.buckets).unwrap_or(0));
    for i in 0..request.buckets {
        let (low_ms, high_ms) = request.bucket_bounds_ms(i);
        let count = if kind == Kind::Missing || low_ms >= high_ms {
            0
        } else {
            // ZCOUNT is O(log N) through the set's own rank index; "(" makes
            // the upper edge exclusive. Edges are sent as the doubles the
            // integer edges round up to, which Display writes exactly.
            let low = edge_text(ceil_to_f64(low_ms));
            let high = format!("({}", edge_text(ceil_to_f64(high_ms)));
            match ctx.call(
                "ZCOUNT",
                &[schedule.as_slice(), low.as_bytes(), high.as_bytes()],
            )? {
                RedisValue::Integer(n) => n,
                _ => return Err(ReplyError::ZcountReply.into()),
            }
        };
        counts.push(RedisValue::Integer(count));
    }
    Ok(RedisValue::Array(counts))
}

/// `start_ms end_ms buckets`: a window of the full i64 range, not empty, and
/// `1..=MAX_SPREAD_BUCKETS` buckets.
fn parse_spread_request(
    start_ms: &[u8],
    end_ms: &[u8],
    buckets: &[u8],
) -> Result<SpreadRequest, ArgError> {
    let start_ms = canonical_i64(start_ms).ok_or(ArgError::SpreadBound("start_ms"))?;
    let end_ms = canonical_i64(end_ms).ok_or(ArgError::SpreadBound("end_ms"))?;
    let buckets = canonical_u64(buckets, MAX_SPREAD_BUCKETS)
        .filter(|&b| b >= 1)
        .ok_or(ArgError::Buckets)?;
    if end_ms <= start_ms {
        return Err(ArgError::SpreadEmptyRange);
    }
    Ok(SpreadRequest {
        start_ms,
        end_ms,
        buckets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_windows_are_read_in_the_full_i64_range() {
        assert_eq!(
            parse_spread_request(b"-9223372036854775808", b"9223372036854775807", b"10000"),
            Ok(SpreadRequest {
                start_ms: i64::MIN,
                end_ms: i64::MAX,
                buckets: 10_000
            })
        );
        assert_eq!(
            parse_spread_request(b"5", b"5", b"1"),
            Err(ArgError::SpreadEmptyRange)
        );
        assert_eq!(
            parse_spread_request(b"0", b"5", b"0"),
            Err(ArgError::Buckets)
        );
        assert_eq!(
            parse_spread_request(b"0", b"5", b"10001"),
            Err(ArgError::Buckets)
        );
        assert_eq!(
            parse_spread_request(b"x", b"5", b"1"),
            Err(ArgError::SpreadBound("start_ms"))
        );
        assert_eq!(
            parse_spread_request(b"0", b"5.0", b"1"),
            Err(ArgError::SpreadBound("end_ms"))
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        crate::rules::grammar::never_panics(|bytes| {
            let _ = parse_spread_request(bytes, bytes, bytes);
        });
    }
}
