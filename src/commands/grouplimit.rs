//! `ECHO.GROUPLIMIT schedule group rate burst`,
//! `ECHO.GROUPLIMIT schedule group DEFAULT`
//!
//! Overrides, for one group of the grouped `schedule`, the limit every group
//! gets from `echomq.group-limits`: from the group's next visit by a release
//! (ECHO.PROMOTE or the timer) it is limited to `rate` and `burst` instead,
//! with the grammar of `echomq.release-limits` and fixed rates only (`rate`
//! `<n>/s`, `<n>/m` or `<n>/h`, `n` in `1..=1000000`; `burst` in
//! `1..=1000000`). A group whose schedule is not listed in
//! `echomq.group-limits` is limited by its override alone. `DEFAULT` (any
//! case) removes the override: the config's limit applies again (none when
//! the schedule is not listed). The group's arrival time is kept across the
//! change and converted to the new limit keeping the bucket's level, so an
//! override grants no fresh burst. The queue's own limit
//! (`echomq.release-limits`) still caps the sum.
//!
//! An override is configuration, not state: a group that has no members may
//! be given one (it binds when members come), it never expires, and it stays
//! when the group empties (`DEFAULT` removes it). The ungrouped members
//! cannot be named, so they always have the config's limit.
//!
//! Reply: `OK`.
//! Errors: `ERR a grouped schedule needs a {hash tag}`; `ERR group must be
//! 1..=1024 bytes`; a malformed rate or burst, in the words of `CONFIG SET
//! echomq.release-limits`; `ERR group limits take fixed rates only` for an
//! `adaptive:` rate; `ERR syntax error` for other words; `WRONGTYPE` when the
//! override key is not a string or a key of the group (its set, the index,
//! the ring, the directory) not a sorted set; `OOM ...` for a new override
//! while used memory is over maxmemory. Nothing is written on an error.
//! Keys: `schedule`, declared, flagged `write` (a cluster routes it to the
//! owner, a replica refuses it). Not `deny-oom`, as ECHO.HOLD: lowering a
//! group's limit is how a client answers a dependency in trouble, and
//! removing or changing an override frees or keeps memory; only a new
//! override, a new key, is refused when out of memory. The override is the
//! string key `<schedule>:echomq-glim:<group>` holding `1 <n> <period_ms>
//! <burst>` (a layout version first; `GET` shows it), with no expiry.
//! Replication: `SET <override key> <text>` (nothing when it already holds
//! that) or `DEL <override key>`; and `ZADD <index> <earliest fire time>
//! <group>` when the group waited in the time index under the old limit, so
//! the new one applies at the next release.

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use super::option_words;
use crate::engine::groups;
use crate::rules::configs;
use crate::rules::fairness::GroupLimit;
use crate::rules::grammar::{group_name, ArgError};
use crate::server::keys::Arg;
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};

/// ECHO.GROUPLIMIT's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.GROUPLIMIT",
    entry: entry_point!(echo_grouplimit),
    flags: c"write fast",
    arity: -4,
    keys: &[KeyDoc {
        at: KeyAt::Index(1),
        // changes how the schedule's group is released, not its members
        flags: K::READ_WRITE.union(K::UPDATE),
    }],
    acl_categories: c"write sortedset fast",
    summary:
        c"Overrides the limit of one group of a grouped schedule, or restores the configured one.",
    complexity: c"O(log(G)) with G the number of groups of the schedule.",
    tips: None,
};

pub fn echo_grouplimit(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, group, rest @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let mut buffer: [&[u8]; 2] = [&[]; 2];
    let words = option_words(rest, &mut buffer).ok_or(ArgError::Syntax)?;
    let limit = parse_grouplimit(group.as_slice(), words)?;
    groups::set_limit(ctx, schedule.as_slice(), group.as_slice(), limit)?;
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// `group rate burst` (`Some`) or `group DEFAULT` (`None`).
fn parse_grouplimit(group: &[u8], words: &[&[u8]]) -> Result<Option<GroupLimit>, ArgError> {
    group_name(group)?;
    match words {
        [word] if word.eq_ignore_ascii_case(b"DEFAULT") => Ok(None),
        [rate, burst] => {
            let (rate, burst) =
                configs::parse_rate_and_burst(rate, burst).map_err(ArgError::GroupLimit)?;
            GroupLimit::fixed(rate, burst)
                .map(Some)
                .ok_or(ArgError::GroupLimitAdaptive)
        }
        _ => Err(ArgError::Syntax),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::limiter::{LimitKind, Rate};

    #[test]
    fn grouplimit_arguments() {
        let limit = |n, period_ms, burst| {
            Ok(Some(GroupLimit {
                rate: Rate {
                    n,
                    period_ms,
                    kind: LimitKind::Fixed,
                },
                burst,
            }))
        };
        assert_eq!(parse_grouplimit(b"g", &[b"10/s", b"2"]), limit(10, 1000, 2));
        assert_eq!(
            parse_grouplimit(b"g", &[b"1/H", b"1"]),
            limit(1, 3_600_000, 1)
        );
        assert_eq!(parse_grouplimit(b"g", &[b"default"]), Ok(None));
        assert_eq!(
            parse_grouplimit(b"", &[b"DEFAULT"]),
            Err(ArgError::GroupName)
        );
        assert_eq!(
            parse_grouplimit(b"g", &[b"adaptive:10/s", b"2"]),
            Err(ArgError::GroupLimitAdaptive)
        );
        assert_eq!(
            parse_grouplimit(b"g", &[b"10/s", b"2", b"x"]),
            Err(ArgError::Syntax)
        );
        assert_eq!(parse_grouplimit(b"g", &[b"10/s"]), Err(ArgError::Syntax));
        for (rate, burst, want) in [
            ("0/s", "1", "ERR rate '0/s' is not"),
            ("10/d", "1", "ERR rate '10/d' is not"),
            (
                "10/s",
                "0",
                "ERR burst '0' is not an integer in 1..=1000000",
            ),
            ("10/s", "01", "ERR burst '01'"),
        ] {
            let got = parse_grouplimit(b"g", &[rate.as_bytes(), burst.as_bytes()]);
            let text = got.map(|_| ()).unwrap_err().to_string();
            assert!(text.starts_with(want), "{rate} {burst}: {text}");
        }
    }
}
