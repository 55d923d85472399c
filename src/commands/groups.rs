//! `ECHO.GROUPS schedule [CURSOR cursor] [COUNT count]`
//!
//! The groups of the grouped `schedule` that have members, paged like
//! `SCAN`: call with no cursor (or `CURSOR 0`), then with each cursor the
//! reply gives, until it gives `0`. The groups come in name order (bytes
//! compared as unsigned), the ungrouped members first, shown as the group
//! with the empty name when `schedule` itself has members. `COUNT` is the
//! most groups one page shows, `1..=1000`, default 10; a page may show fewer
//! (a group emptied by hand is passed over) and is empty only at the end.
//!
//! The cursor is the name of the last group the page passed, encoded so any
//! bytes survive a client: `x` then its bytes in lowercase hex (`x` alone:
//! after the ungrouped members). The next page starts after that name in the
//! directory (`<schedule>:echomq-gnames`, a sorted set of every named group
//! with members, walked by name), so a page costs O(log(G) + COUNT) and the
//! cursor stays valid whatever happens between pages: a group that has
//! members from the first page to the last is shown exactly once; a group
//! added or emptied meanwhile is shown at most once. A cursor not made so
//! (`ERR invalid cursor`) is refused.
//!
//! Each group, a map (RESP3) or a flat field/value array (RESP2), fields in
//! this order: `group` (its name, empty for the ungrouped), `members` (its
//! count), `due` (members due now), `limit-rate` (per second, a double; nil
//! when not limited), `limit-burst` (nil when not limited), `available` (how
//! many members its limit lets leave now, due or not; nil when not limited),
//! `waiting-until-ms` (the first ms it may release while it waits outside the
//! rotation, for its earliest member, its limit or its hold; 0 while it is in
//! the rotation), `held-until-ms` (the end of its own hold, `ECHO.HOLD ...
//! GROUP`, 0 when not held; a hold of the whole schedule is ECHO.LIMITS's).
//!
//! Reply: a two-element array, the next cursor (`0` at the end) and an array
//! of the groups.
//! Errors: `ERR a grouped schedule needs a {hash tag}`; `ERR invalid
//! cursor`; `ERR COUNT is not an integer or out of range (1..=1000)`; `ERR
//! syntax error` for other words or an option given twice; `WRONGTYPE` when
//! `schedule`, the index, the ring or the directory is of another type.
//! Replication: none; read-only.

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use super::option_words;
use crate::engine;
use crate::rules::fairness::{DEFAULT_GROUPS_COUNT, MAX_GROUPS_COUNT, MAX_GROUP_BYTES};
use crate::rules::grammar::{canonical_u64, ArgError};
use crate::server::clock;
use crate::server::keys::Arg;
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};
use crate::server::reply::{self, Field};

/// ECHO.GROUPS's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.GROUPS",
    entry: entry_point!(echo_groups),
    flags: c"readonly",
    arity: -2,
    keys: &[KeyDoc {
        at: KeyAt::Index(1),
        flags: K::READ_ONLY,
    }],
    acl_categories: c"read sortedset",
    summary: c"Pages through the groups of a grouped schedule: members, due members, limit and hold of each.",
    complexity: c"O(log(G) + COUNT * log(N)) with G the groups and N the members of a group.",
    tips: Some(c"nondeterministic_output"),
};

pub fn echo_groups(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let mut buffer: [&[u8]; 4] = [&[]; 4];
    let words = option_words(options, &mut buffer).ok_or(ArgError::Syntax)?;
    let request = parse_groups_request(words)?;
    let after = match &request.cursor {
        Cursor::Start => None,
        Cursor::After(name) => Some(name.as_slice()),
    };
    let page = engine::groups::page(ctx, schedule, after, request.count, clock::now_ms())?;
    reply::array(ctx, 2);
    match &page.next_after {
        Some(name) => reply::bytes(ctx, encode_cursor(name).as_bytes()),
        None => reply::bytes(ctx, b"0"),
    }
    reply::array(ctx, page.groups.len());
    let count = |n: u64| Field::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    for group in &page.groups {
        let limit = group.limit.as_ref();
        reply::map(
            ctx,
            &[
                (c"group", Field::Bytes(&group.name)),
                (c"members", count(group.members)),
                (c"due", count(group.due)),
                (
                    c"limit-rate",
                    limit.map_or(Field::Null, |l| Field::Double(l.rate.per_second())),
                ),
                (
                    c"limit-burst",
                    limit.map_or(Field::Null, |l| count(l.burst)),
                ),
                (c"available", group.available.map_or(Field::Null, count)),
                (c"waiting-until-ms", Field::Integer(group.waiting_until_ms)),
                (c"held-until-ms", Field::Integer(group.held_until_ms)),
            ],
        );
    }
    Ok(RedisValue::NoReply)
}

/// Where a page starts.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Cursor {
    Start,
    /// After this group's name (empty: after the ungrouped members).
    After(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct GroupsRequest {
    cursor: Cursor,
    count: u64,
}

/// `[CURSOR cursor] [COUNT count]` in any order, keywords in any case, each
/// at most once.
fn parse_groups_request(options: &[&[u8]]) -> Result<GroupsRequest, ArgError> {
    let mut request = GroupsRequest {
        cursor: Cursor::Start,
        count: DEFAULT_GROUPS_COUNT,
    };
    let (mut cursor_seen, mut count_seen) = (false, false);
    for pair in options.chunks(2) {
        let [keyword, value] = pair else {
            return Err(ArgError::Syntax);
        };
        if keyword.eq_ignore_ascii_case(b"CURSOR") && !std::mem::replace(&mut cursor_seen, true) {
            request.cursor = decode_cursor(value).ok_or(ArgError::Cursor)?;
        } else if keyword.eq_ignore_ascii_case(b"COUNT")
            && !std::mem::replace(&mut count_seen, true)
        {
            request.count = canonical_u64(value, MAX_GROUPS_COUNT)
                .filter(|&n| n >= 1)
                .ok_or(ArgError::Count)?;
        } else {
            return Err(ArgError::Syntax);
        }
    }
    Ok(request)
}

/// `x` then the name's bytes in lowercase hex.
fn encode_cursor(name: &[u8]) -> String {
    let mut text = String::with_capacity(1 + 2 * name.len());
    text.push('x');
    for b in name {
        text.push_str(&format!("{b:02x}"));
    }
    text
}

/// `0`, or what `encode_cursor` made of a name of at most 1024 bytes.
fn decode_cursor(text: &[u8]) -> Option<Cursor> {
    if text == b"0" {
        return Some(Cursor::Start);
    }
    let hex = text.strip_prefix(b"x")?;
    if hex.len() % 2 != 0 || hex.len() > 2 * MAX_GROUP_BYTES {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut name = Vec::with_capacity(hex.len() / 2);
    for two in hex.chunks_exact(2) {
        name.push(digit(two[0])? << 4 | digit(two[1])?);
    }
    Some(Cursor::After(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::grammar::never_panics;

    #[test]
    fn cursors_read_back_as_written_and_nothing_else_reads() {
        for name in [&b""[..], b"a", b"tenant-1", b"\x00\xff\n{}", &[0xab; 1024]] {
            let text = encode_cursor(name);
            assert!(text.bytes().all(|b| b.is_ascii_alphanumeric()), "{text}");
            assert_eq!(
                decode_cursor(text.as_bytes()),
                Some(Cursor::After(name.to_vec()))
            );
        }
        assert_eq!(decode_cursor(b"0"), Some(Cursor::Start));
        let too_long = encode_cursor(&[1; 1025]);
        for bad in [
            &b""[..],
            b"00",
            b"1",
            b"x0",
            b"xAB",
            b"xzz",
            b"X61",
            too_long.as_bytes(),
        ] {
            assert_eq!(decode_cursor(bad), None, "{bad:?}");
        }
        never_panics(|bytes| {
            let _ = decode_cursor(bytes);
        });
    }

    #[test]
    fn groups_arguments() {
        let parse = |words: &[&str]| {
            let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            parse_groups_request(&words)
        };
        assert_eq!(
            parse(&[]),
            Ok(GroupsRequest {
                cursor: Cursor::Start,
                count: 10
            })
        );
        assert_eq!(
            parse(&["count", "1000", "Cursor", "x61"]),
            Ok(GroupsRequest {
                cursor: Cursor::After(b"a".to_vec()),
                count: 1000
            })
        );
        for (words, want) in [
            (&["COUNT", "0"][..], ArgError::Count),
            (&["COUNT", "1001"], ArgError::Count),
            (&["COUNT", "01"], ArgError::Count),
            (&["CURSOR", "x6"], ArgError::Cursor),
            (&["COUNT"], ArgError::Syntax),
            (&["COUNT", "1", "COUNT", "2"], ArgError::Syntax),
            (&["CURSOR", "0", "CURSOR", "0"], ArgError::Syntax),
            (&["LIMIT", "1"], ArgError::Syntax),
        ] {
            assert_eq!(parse(words), Err(want), "{words:?}");
        }
    }
}
