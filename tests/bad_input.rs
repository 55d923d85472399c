//! Every malformed call is refused with an error reply, writes nothing, and
//! leaves the server serving.

mod common;

use common::*;

/// Keys of every type the commands can meet, plus due and future work.
fn seed(con: &mut Connection) {
    let mut pipe = redis::pipe();
    for cmd in [
        cmd!("ZADD", "s", 1, "due", 9e15, "future"),
        cmd!("ZADD", "zset", 1, "x"),
        cmd!("SET", "str", "x"),
        cmd!("LPUSH", "list", "x"),
        cmd!("LPUSH", "p", "old"),
        cmd!("HSET", "hash", "f", "v"),
        cmd!("SADD", "set", "x"),
        cmd!("XADD", "stream", "*", "f", "v"),
        // a grouped schedule's keys of the wrong types
        cmd!("SET", "{t}:str", "x"),
        cmd!("SET", "{t}:s:echomq-g:bad", "x"),
        cmd!("ZADD", "{t}:s:echomq-ghold:zh", 1, "x"),
        cmd!("ZADD", "{t}:s:echomq-glim:zl", 1, "x"),
        cmd!("SET", "{t}:w:echomq-gnames", "x"),
        // a recurring schedule's definitions of the wrong type
        cmd!("SET", "{r}:w:echomq-repeats", "x"),
    ] {
        pipe.add_command(cmd).ignore();
    }
    let _: () = pipe.query(con).unwrap();
}

#[test]
fn malformed_calls_are_refused_and_write_nothing() {
    let nine_jitters = format!("{}fixed:1", "jitter:".repeat(9));
    let nine_mixed = format!("{}jitter:fixed:1", "equal-jitter:jitter:".repeat(4));
    let nine_equal = format!("{}fixed:1", "equal-jitter:".repeat(9));
    let deep_policy = format!("{}fixed:1", "jitter:".repeat(100_000));
    let long_number = format!("fixed:{}", "9".repeat(1_000_000));
    let long_name = "x".repeat(1_000_000);
    let r = |policy: &str, attempts: &str| -> Vec<Vec<u8>> {
        ["ECHO.RETRY", "s", "job", policy, attempts]
            .iter()
            .map(|a| a.as_bytes().to_vec())
            .collect()
    };
    let raw = |args: &[&[u8]]| -> Vec<Vec<u8>> { args.iter().map(|a| a.to_vec()).collect() };
    // A call given as one string of words separated by single spaces.
    let words =
        |call: &str| -> Vec<Vec<u8>> { call.split(' ').map(|a| a.as_bytes().to_vec()).collect() };
    let wrong_arity = "ERR wrong number of arguments";
    let cases: Vec<(Vec<Vec<u8>>, &str)> = vec![
        // ECHO.RETRY: arity
        (words("ECHO.RETRY"), wrong_arity),
        (words("ECHO.RETRY s job fixed:1"), wrong_arity),
        (
            words("ECHO.RETRY s job fixed:1 1 extra"),
            "ERR syntax error",
        ),
        // policies: empty, missing, extra and empty fields
        (r("", "1"), "ERR invalid policy: empty"),
        (r(":", "1"), "ERR invalid policy: empty"),
        (r("fixed", "1"), "ERR invalid policy: missing field"),
        (r("fixed:", "1"), "ERR invalid policy: ms is not"),
        (r("fixed:1:2", "1"), "ERR invalid policy: extra field"),
        (
            r("exponential:100", "1"),
            "ERR invalid policy: missing field",
        ),
        (
            r("exponential::100", "1"),
            "ERR invalid policy: base is not",
        ),
        (r("exponential:100:", "1"), "ERR invalid policy: max is not"),
        (
            r("exponential:100:1000:5", "1"),
            "ERR invalid policy: extra field",
        ),
        // numbers: signed, fractional, exponent, hex, non-ASCII, padded, leading zero
        (r("fixed:-1", "1"), "ERR invalid policy: ms is not"),
        (r("fixed:+1", "1"), "ERR invalid policy: ms is not"),
        (r("fixed:1.5", "1"), "ERR invalid policy: ms is not"),
        (r("fixed:1e3", "1"), "ERR invalid policy: ms is not"),
        (r("fixed:0x10", "1"), "ERR invalid policy: ms is not"),
        (r("fixed:١٢", "1"), "ERR invalid policy: ms is not"),
        (r("fixed:１", "1"), "ERR invalid policy: ms is not"),
        (r("fixed: 1", "1"), "ERR invalid policy: ms is not"),
        (r("fixed:007", "1"), "ERR invalid policy: ms is not"),
        // out of range and overflowing
        (
            r("fixed:10000000000001", "1"),
            "ERR invalid policy: ms is out of range",
        ),
        (
            r("fixed:18446744073709551616", "1"),
            "ERR invalid policy: ms is out of range",
        ),
        (
            r("exponential:1:99999999999999999999", "1"),
            "ERR invalid policy: max is out of range",
        ),
        (
            r("exponential:100:50", "1"),
            "ERR invalid policy: max is less than base",
        ),
        // names and nesting
        (
            r("nope:1", "1"),
            "ERR invalid policy: unknown policy name 'nope'",
        ),
        (
            r("fixedd:1", "1"),
            "ERR invalid policy: unknown policy name",
        ),
        (
            r("jitter", "1"),
            "ERR invalid policy: 'jitter' needs an inner policy",
        ),
        (
            r("jitter:", "1"),
            "ERR invalid policy: 'jitter' needs an inner policy",
        ),
        (
            r("jitter:jitter:nope:1", "1"),
            "ERR invalid policy: unknown policy name",
        ),
        (
            r(&nine_jitters, "1"),
            "ERR invalid policy: too deeply nested",
        ),
        // huge arguments
        (
            r(&deep_policy, "1"),
            "ERR invalid policy: too deeply nested",
        ),
        (
            r(&long_number, "1"),
            "ERR invalid policy: ms is out of range",
        ),
        (
            r(&long_name, "1"),
            "ERR invalid policy: unknown policy name",
        ),
        // attempts
        (
            r("fixed:1", "0"),
            "ERR attempts is not an integer or out of range",
        ),
        (r("fixed:1", "-1"), "ERR attempts"),
        (r("fixed:1", ""), "ERR attempts"),
        (r("fixed:1", "1.0"), "ERR attempts"),
        (r("fixed:1", "1e2"), "ERR attempts"),
        (r("fixed:1", "01"), "ERR attempts"),
        (r("fixed:1", " 1"), "ERR attempts"),
        (r("fixed:1", "9223372036854775808"), "ERR attempts"),
        (r("fixed:1", "99999999999999999999999"), "ERR attempts"),
        // wrong key types
        (words("ECHO.RETRY str job fixed:1 1"), "WRONGTYPE"),
        (words("ECHO.RETRY list job fixed:1 1"), "WRONGTYPE"),
        (words("ECHO.RETRY hash job fixed:1 1"), "WRONGTYPE"),
        (words("ECHO.RETRY stream job fixed:1 1"), "WRONGTYPE"),
        // ECHO.RETRY options: unknown, repeated, incomplete
        (
            words("ECHO.RETRY s job fixed:1 1 NX NX"),
            "ERR syntax error",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 xx XX"),
            "ERR syntax error",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 GT gt"),
            "ERR syntax error",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 LT LT"),
            "ERR syntax error",
        ),
        (words("ECHO.RETRY s job fixed:1 1 CH"), "ERR syntax error"),
        (words("ECHO.RETRY s job fixed:1 1 INCR"), "ERR syntax error"),
        (words("ECHO.RETRY s job fixed:1 1 NX 5"), "ERR syntax error"),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS"),
            "ERR syntax error",
        ),
        (words("ECHO.RETRY s job fixed:1 1 DEAD"), "ERR syntax error"),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 3 DEAD"),
            "ERR syntax error",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 3 DEAD d DEAD e"),
            "ERR syntax error",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 3 MAXATTEMPTS 3 DEAD d"),
            "ERR syntax error",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 3 DEAD d extra"),
            "ERR syntax error",
        ),
        // MAXATTEMPTS and DEAD: both or neither
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 3"),
            "ERR syntax error: MAXATTEMPTS and DEAD must be given together",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 DEAD d"),
            "ERR syntax error: MAXATTEMPTS and DEAD",
        ),
        (
            words("ECHO.RETRY s job fixed:1 9 NX DEAD d"),
            "ERR syntax error: MAXATTEMPTS and DEAD",
        ),
        // MAXATTEMPTS n: canonical 1..=i64::MAX
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 0 DEAD d"),
            "ERR MAXATTEMPTS is not an integer or out of range",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS -1 DEAD d"),
            "ERR MAXATTEMPTS",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 03 DEAD d"),
            "ERR MAXATTEMPTS",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS +3 DEAD d"),
            "ERR MAXATTEMPTS",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 3.0 DEAD d"),
            "ERR MAXATTEMPTS",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 1e3 DEAD d"),
            "ERR MAXATTEMPTS",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 9223372036854775808 DEAD d"),
            "ERR MAXATTEMPTS",
        ),
        (
            raw(&[
                b"ECHO.RETRY",
                b"s",
                b"job",
                b"fixed:1",
                b"1",
                b"MAXATTEMPTS",
                b"",
                b"DEAD",
                b"d",
            ]),
            "ERR MAXATTEMPTS",
        ),
        // ZADD's own exclusions
        (
            words("ECHO.RETRY s job fixed:1 1 NX XX"),
            "ERR syntax error: XX and NX options at the same time are not compatible",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 xx nx"),
            "ERR syntax error: XX and NX",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 NX GT"),
            "ERR syntax error: GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 LT NX"),
            "ERR syntax error: GT, LT, and/or NX",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 GT LT"),
            "ERR syntax error: GT, LT, and/or NX",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 XX GT LT"),
            "ERR syntax error: GT, LT, and/or NX",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 NX XX MAXATTEMPTS 1 DEAD d"),
            "ERR syntax error: XX and NX",
        ),
        // the dead key: not the schedule, a sorted set (also when not dying)
        (
            words("ECHO.RETRY s job fixed:1 1 MAXATTEMPTS 3 DEAD s"),
            "ERR schedule and dead must be different keys",
        ),
        (
            words("ECHO.RETRY s job fixed:1 5 DEAD s MAXATTEMPTS 3"),
            "ERR schedule and dead must be different keys",
        ),
        (
            words("ECHO.RETRY s due fixed:1 1 MAXATTEMPTS 3 DEAD str"),
            "WRONGTYPE",
        ),
        (
            words("ECHO.RETRY s due fixed:1 3 MAXATTEMPTS 3 DEAD list"),
            "WRONGTYPE",
        ),
        (
            words("ECHO.RETRY s new fixed:1 1 MAXATTEMPTS 1 DEAD stream"),
            "WRONGTYPE",
        ),
        (
            words("ECHO.RETRY str due fixed:1 3 MAXATTEMPTS 3 DEAD zset"),
            "WRONGTYPE",
        ),
        // options are judged after the policy and attempts
        (
            words("ECHO.RETRY s job bogus 1 NX XX"),
            "ERR invalid policy",
        ),
        (
            words("ECHO.RETRY s job fixed:1 0 MAXATTEMPTS 0 DEAD d"),
            "ERR attempts",
        ),
        // equal jitter: names, nesting, depth
        (
            r("equal-jitter", "1"),
            "ERR invalid policy: 'equal-jitter' needs an inner policy",
        ),
        (
            r("equal-jitter:", "1"),
            "ERR invalid policy: 'equal-jitter' needs",
        ),
        (
            r("equal:fixed:1", "1"),
            "ERR invalid policy: unknown policy name 'equal'",
        ),
        (
            r("equal_jitter:fixed:1", "1"),
            "ERR invalid policy: unknown policy name",
        ),
        (
            r("equal-jitter:nope:1", "1"),
            "ERR invalid policy: unknown policy name 'nope'",
        ),
        (r(&nine_mixed, "1"), "ERR invalid policy: too deeply nested"),
        (r(&nine_equal, "1"), "ERR invalid policy: too deeply nested"),
        (
            words("ECHO.DELAY equal-jitter:fixed:-1 1"),
            "ERR invalid policy: ms is not",
        ),
        // ECHO.PROMOTE: arity and LIMIT forms
        (words("ECHO.PROMOTE"), wrong_arity),
        (words("ECHO.PROMOTE s"), wrong_arity),
        (words("ECHO.PROMOTE s p LIMIT"), "ERR syntax error"),
        (
            words("ECHO.PROMOTE s p LIMIT 0"),
            "ERR LIMIT is not an integer",
        ),
        (words("ECHO.PROMOTE s p LIMIT -5"), "ERR LIMIT"),
        (words("ECHO.PROMOTE s p LIMIT 1.5"), "ERR LIMIT"),
        (words("ECHO.PROMOTE s p LIMIT abc"), "ERR LIMIT"),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"p", b"LIMIT", b""]),
            "ERR LIMIT",
        ),
        (
            words("ECHO.PROMOTE s p LIMIT 9223372036854775808"),
            "ERR LIMIT",
        ),
        (words("ECHO.PROMOTE s p COUNT 5"), "ERR syntax error"),
        (words("ECHO.PROMOTE s p LIMIT 5 x"), "ERR syntax error"),
        (words("ECHO.PROMOTE s p 5"), "ERR syntax error"),
        (
            words("ECHO.PROMOTE s s"),
            "ERR schedule and pending must be different keys",
        ),
        // ECHO.PROMOTE: wrong key types, for each key, with and without due work
        (words("ECHO.PROMOTE str p"), "WRONGTYPE"),
        (words("ECHO.PROMOTE list p"), "WRONGTYPE"),
        (words("ECHO.PROMOTE s str"), "WRONGTYPE"),
        (words("ECHO.PROMOTE s set"), "WRONGTYPE"),
        (words("ECHO.PROMOTE s zset"), "WRONGTYPE"),
        (words("ECHO.PROMOTE missing hash"), "WRONGTYPE"),
        // ECHO.DELAY
        (words("ECHO.DELAY"), wrong_arity),
        (words("ECHO.DELAY fixed:1"), wrong_arity),
        (words("ECHO.DELAY fixed:1 1 x"), wrong_arity),
        (words("ECHO.DELAY bogus 1"), "ERR invalid policy"),
        (words("ECHO.DELAY fixed:1 0"), "ERR attempts"),
        // ECHO.SPREAD
        (words("ECHO.SPREAD s 0 10"), wrong_arity),
        (words("ECHO.SPREAD s 0 10 0"), "ERR buckets"),
        (words("ECHO.SPREAD s 0 10 10001"), "ERR buckets"),
        (words("ECHO.SPREAD s 10 10 1"), "ERR end_ms must be greater"),
        (words("ECHO.SPREAD s 1.5 10 1"), "ERR start_ms"),
        (words("ECHO.SPREAD s 0 9223372036854775808 1"), "ERR end_ms"),
        (words("ECHO.SPREAD str 0 10 1"), "WRONGTYPE"),
        // ECHO.QUEUES
        (words("ECHO.QUEUES x"), wrong_arity),
        // ECHO.SCHEDULE: arity, delay, options, types
        (words("ECHO.SCHEDULE"), wrong_arity),
        (words("ECHO.SCHEDULE s job"), wrong_arity),
        (
            words("ECHO.SCHEDULE s job -1"),
            "ERR delay_ms is not an integer or out of range (0..=10000000000000)",
        ),
        (
            words("ECHO.SCHEDULE s job 10000000000001"),
            "ERR delay_ms is not an integer",
        ),
        (
            words("ECHO.SCHEDULE s job 1.5"),
            "ERR delay_ms is not an integer",
        ),
        (
            words("ECHO.SCHEDULE s job 01"),
            "ERR delay_ms is not an integer",
        ),
        (
            raw(&[b"ECHO.SCHEDULE", b"s", b"job", b""]),
            "ERR delay_ms is not an integer",
        ),
        (
            words("ECHO.SCHEDULE s job 1 NX XX"),
            "ERR syntax error: XX and NX options at the same time are not compatible",
        ),
        (
            words("ECHO.SCHEDULE s job 1 GT LT"),
            "ERR syntax error: GT, LT, and/or NX options",
        ),
        (
            words("ECHO.SCHEDULE s job 1 NX GT"),
            "ERR syntax error: GT, LT, and/or NX options",
        ),
        (words("ECHO.SCHEDULE s job 1 NX NX"), "ERR syntax error"),
        (words("ECHO.SCHEDULE s job 1 BOGUS"), "ERR syntax error"),
        (
            words("ECHO.SCHEDULE s job 1 MAXATTEMPTS 1 DEAD d"),
            "ERR syntax error",
        ),
        (
            words("ECHO.SCHEDULE s job 1 NX GT LT XX a b c"),
            "ERR syntax error",
        ),
        (words("ECHO.SCHEDULE str job 1"), "WRONGTYPE"),
        (words("ECHO.SCHEDULE list job 1 XX"), "WRONGTYPE"),
        // ECHO.HOLD
        (words("ECHO.HOLD"), wrong_arity),
        (words("ECHO.HOLD s"), wrong_arity),
        (words("ECHO.HOLD s 1 2"), "ERR syntax error"),
        // ECHO.HOLD ... GROUP
        (words("ECHO.HOLD s 1 GROUP"), "ERR syntax error"),
        (words("ECHO.HOLD {t}:s 1 GROUP g x"), "ERR syntax error"),
        (words("ECHO.HOLD {t}:s 1 LIMIT g"), "ERR syntax error"),
        (
            words("ECHO.HOLD s 1 GROUP g"),
            "ERR a grouped schedule needs a {hash tag}",
        ),
        (
            words("ECHO.HOLD {t}:s -1 GROUP g"),
            "ERR ms is not an integer",
        ),
        (
            raw(&[b"ECHO.HOLD", b"{t}:s", b"1", b"GROUP", b""]),
            "ERR group must be 1..=1024 bytes",
        ),
        (
            raw(&[b"ECHO.HOLD", b"{t}:s", b"1", b"group", &[b'g'; 1025]]),
            "ERR group must be 1..=1024 bytes",
        ),
        (words("ECHO.HOLD {t}:s 100 GROUP zh"), "WRONGTYPE"),
        (words("ECHO.HOLD {t}:s 0 GROUP zh"), "WRONGTYPE"),
        (words("ECHO.HOLD {t}:s 100 GROUP bad"), "WRONGTYPE"),
        (words("ECHO.HOLD {t}:w 100 GROUP g"), "WRONGTYPE"),
        // ECHO.GROUPLIMIT
        (words("ECHO.GROUPLIMIT"), wrong_arity),
        (words("ECHO.GROUPLIMIT s g"), wrong_arity),
        (
            words("ECHO.GROUPLIMIT s g DEFAULT"),
            "ERR a grouped schedule needs a {hash tag}",
        ),
        (
            words("ECHO.GROUPLIMIT s g 10/s 1"),
            "ERR a grouped schedule needs a {hash tag}",
        ),
        (words("ECHO.GROUPLIMIT {t}:s g 10/s"), "ERR syntax error"),
        (
            words("ECHO.GROUPLIMIT {t}:s g DEFAULTS"),
            "ERR syntax error",
        ),
        (
            words("ECHO.GROUPLIMIT {t}:s g DEFAULT x"),
            "ERR rate 'DEFAULT' is not",
        ),
        (
            words("ECHO.GROUPLIMIT {t}:s g 10/s 1 2"),
            "ERR syntax error",
        ),
        (
            words("ECHO.GROUPLIMIT {t}:s g 0/s 1"),
            "ERR rate '0/s' is not <n>/s, <n>/m or <n>/h",
        ),
        (words("ECHO.GROUPLIMIT {t}:s g 10/d 1"), "ERR rate '10/d'"),
        (words("ECHO.GROUPLIMIT {t}:s g 1000001/s 1"), "ERR rate"),
        (
            words("ECHO.GROUPLIMIT {t}:s g 10/s 0"),
            "ERR burst '0' is not",
        ),
        (words("ECHO.GROUPLIMIT {t}:s g 10/s 1000001"), "ERR burst"),
        (words("ECHO.GROUPLIMIT {t}:s g 10/s -1"), "ERR burst"),
        (
            raw(&[b"ECHO.GROUPLIMIT", b"{t}:s", b"g", b"1\x00/s", b"1"]),
            "ERR rate '1\\x00/s'",
        ),
        (
            words("ECHO.GROUPLIMIT {t}:s g adaptive:10/s 1"),
            "ERR group limits take fixed rates only",
        ),
        (
            raw(&[b"ECHO.GROUPLIMIT", b"{t}:s", b"", b"DEFAULT"]),
            "ERR group must be 1..=1024 bytes",
        ),
        (
            raw(&[b"ECHO.GROUPLIMIT", b"{t}:s", &[b'g'; 1025], b"10/s", b"1"]),
            "ERR group must be 1..=1024 bytes",
        ),
        (words("ECHO.GROUPLIMIT {t}:s zl 10/s 1"), "WRONGTYPE"),
        (words("ECHO.GROUPLIMIT {t}:s zl DEFAULT"), "WRONGTYPE"),
        (words("ECHO.GROUPLIMIT {t}:s bad 10/s 1"), "WRONGTYPE"),
        (words("ECHO.GROUPLIMIT {t}:w g 10/s 1"), "WRONGTYPE"),
        // ECHO.GROUPS
        (words("ECHO.GROUPS"), wrong_arity),
        (
            words("ECHO.GROUPS s"),
            "ERR a grouped schedule needs a {hash tag}",
        ),
        (
            words("ECHO.GROUPS {t}:s COUNT 0"),
            "ERR COUNT is not an integer or out of range (1..=1000)",
        ),
        (words("ECHO.GROUPS {t}:s COUNT 1001"), "ERR COUNT is not"),
        (words("ECHO.GROUPS {t}:s COUNT 1.5"), "ERR COUNT is not"),
        (words("ECHO.GROUPS {t}:s CURSOR 5"), "ERR invalid cursor"),
        (words("ECHO.GROUPS {t}:s CURSOR x6"), "ERR invalid cursor"),
        (words("ECHO.GROUPS {t}:s CURSOR xAB"), "ERR invalid cursor"),
        (
            raw(&[b"ECHO.GROUPS", b"{t}:s", b"CURSOR", b"x\x00"]),
            "ERR invalid cursor",
        ),
        (words("ECHO.GROUPS {t}:s COUNT"), "ERR syntax error"),
        (
            words("ECHO.GROUPS {t}:s COUNT 1 COUNT 2"),
            "ERR syntax error",
        ),
        (
            words("ECHO.GROUPS {t}:s CURSOR 0 CURSOR 0"),
            "ERR syntax error",
        ),
        (words("ECHO.GROUPS {t}:s LIMIT 1"), "ERR syntax error"),
        (
            words("ECHO.GROUPS {t}:s CURSOR 0 COUNT 1 x"),
            "ERR syntax error",
        ),
        (words("ECHO.GROUPS {t}:str"), "WRONGTYPE"),
        (words("ECHO.GROUPS {t}:w"), "WRONGTYPE"),
        (
            words("ECHO.HOLD s -1"),
            "ERR ms is not an integer or out of range (0..=86400000)",
        ),
        (words("ECHO.HOLD s 86400001"), "ERR ms is not an integer"),
        (words("ECHO.HOLD s 1s"), "ERR ms is not an integer"),
        (words("ECHO.HOLD s 007"), "ERR ms is not an integer"),
        // ECHO.LIMITS
        (words("ECHO.LIMITS"), wrong_arity),
        (words("ECHO.LIMITS s x"), wrong_arity),
        // ECHO.ADD: arity, options, keys, types (on the fast path and not)
        (words("ECHO.ADD"), wrong_arity),
        (words("ECHO.ADD s p"), wrong_arity),
        (words("ECHO.ADD s p job DELAY"), "ERR syntax error"),
        (
            words("ECHO.ADD s p job DELAY -1"),
            "ERR DELAY is not an integer or out of range (0..=10000000000000)",
        ),
        (
            words("ECHO.ADD s p job DELAY 10000000000001"),
            "ERR DELAY is not an integer",
        ),
        (
            words("ECHO.ADD s p job DELAY 1.5"),
            "ERR DELAY is not an integer",
        ),
        (
            words("ECHO.ADD s p job DELAY 01"),
            "ERR DELAY is not an integer",
        ),
        (
            raw(&[b"ECHO.ADD", b"s", b"p", b"job", b"DELAY", b""]),
            "ERR DELAY is not an integer",
        ),
        (
            words("ECHO.ADD s p job DELAY 1 DELAY 2"),
            "ERR syntax error",
        ),
        (words("ECHO.ADD s p job NX NX"), "ERR syntax error"),
        (words("ECHO.ADD s p job XX"), "ERR syntax error"),
        (words("ECHO.ADD s p job GT"), "ERR syntax error"),
        (words("ECHO.ADD s p job LIMIT 5"), "ERR syntax error"),
        (words("ECHO.ADD s p job GROUP"), "ERR syntax error"),
        (
            words("ECHO.ADD s p job GROUP tenant-1"),
            "ERR a grouped schedule needs a {hash tag}",
        ),
        (
            words("ECHO.ADD s p job NX DELAY 5 group g"),
            "ERR a grouped schedule needs a {hash tag}",
        ),
        (
            raw(&[b"ECHO.ADD", b"{t}:s", b"{t}:p", b"job", b"GROUP", b""]),
            "ERR group must be 1..=1024 bytes",
        ),
        (
            raw(&[
                b"ECHO.ADD",
                b"{t}:s",
                b"{t}:p",
                b"job",
                b"GROUP",
                &[b'g'; 1025],
            ]),
            "ERR group must be 1..=1024 bytes",
        ),
        (
            words("ECHO.ADD {t}:s {t}:p job GROUP a GROUP b"),
            "ERR syntax error",
        ),
        (
            words("ECHO.SCHEDULE s job 10 GROUP g"),
            "ERR a grouped schedule needs a {hash tag}",
        ),
        (
            raw(&[b"ECHO.SCHEDULE", b"{t}:s", b"job", b"10", b"GROUP", b""]),
            "ERR group must be 1..=1024 bytes",
        ),
        (
            words("ECHO.SCHEDULE {t}:s job 10 GROUP"),
            "ERR syntax error",
        ),
        (
            words("ECHO.RETRY s job fixed:1 1 GROUP g"),
            "ERR a grouped schedule needs a {hash tag}",
        ),
        (
            words("ECHO.RETRY {t}:s job fixed:1 1 GROUP dead MAXATTEMPTS 1 DEAD {t}:d"),
            "ERR syntax error",
        ),
        (
            raw(&[
                b"ECHO.RETRY",
                b"{t}:s",
                b"job",
                b"fixed:1",
                b"1",
                b"GROUP",
                &[b'g'; 1025],
            ]),
            "ERR group must be 1..=1024 bytes",
        ),
        // more words than any valid call has
        (
            words("ECHO.ADD s p job NX DELAY 5 GROUP g x"),
            "ERR syntax error",
        ),
        (
            words("ECHO.ADD s s job"),
            "ERR schedule and pending must be different keys",
        ),
        (words("ECHO.ADD str p job"), "WRONGTYPE"),
        (words("ECHO.ADD list p job DELAY 5"), "WRONGTYPE"),
        (words("ECHO.ADD hash p due NX"), "WRONGTYPE"),
        (words("ECHO.ADD s str job"), "WRONGTYPE"),
        (words("ECHO.ADD s zset job DELAY 5"), "WRONGTYPE"),
        (words("ECHO.ADD s set due NX"), "WRONGTYPE"),
        (words("ECHO.ADD missing hash job"), "WRONGTYPE"),
        // ECHO.REPEAT: arity, id, every malformed spec, zone, option and
        // bound, and the types of its three keys
        (words("ECHO.REPEAT"), wrong_arity),
        (words("ECHO.REPEAT {r}:s id"), wrong_arity),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"", b"every:1000"]),
            "ERR id must be 1..=1024 bytes",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", &[b'i'; 1025], b"every:1000"]),
            "ERR id must be 1..=1024 bytes",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b""]),
            "ERR invalid spec: empty",
        ),
        (
            words("ECHO.REPEAT {r}:s id hourly"),
            "ERR invalid spec: 'hourly' is neither every:<ms> nor cron:<fields>",
        ),
        (words("ECHO.REPEAT {r}:s id at:5"), "ERR invalid spec: 'at:5'"),
        (
            words("ECHO.REPEAT {r}:s id every:"),
            "ERR invalid spec: every:<ms> is not a canonical non-negative integer",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:01000"),
            "ERR invalid spec: every:<ms> is not a canonical",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:-1000"),
            "ERR invalid spec: every:<ms> is not a canonical",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1e3"),
            "ERR invalid spec: every:<ms> is not a canonical",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:999"),
            "ERR invalid spec: every:<ms> is out of range (1000..=10000000000000 ms)",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:10000000000001"),
            "ERR invalid spec: every:<ms> is out of range",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:99999999999999999999999"),
            "ERR invalid spec: every:<ms> is out of range",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:0 * * *"]),
            "ERR invalid spec: cron needs 5 fields (minute hour day-of-month month day-of-week), got 4",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:0 * * * * *"]),
            "ERR invalid spec: cron needs 5 fields",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:"]),
            "ERR invalid spec: cron needs 5 fields",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:60 * * * *"]),
            "ERR invalid spec: cron minute '60' is out of range (0..=59)",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:* 24 * * *"]),
            "ERR invalid spec: cron hour '24' is out of range (0..=23)",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:* * 0 * *"]),
            "ERR invalid spec: cron day-of-month '0' is out of range (1..=31)",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:* * * 13 *"]),
            "ERR invalid spec: cron month '13' is out of range (1..=12)",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:* * * * 8"]),
            "ERR invalid spec: cron day-of-week '8' is out of range (0..=7)",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:*/0 * * * *"]),
            "ERR invalid spec: cron minute '*/0' has a step out of range (1..=60)",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:5-1 * * * *"]),
            "ERR invalid spec: cron minute '5-1' is a range whose start is after its end",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:0 0 * * FRI-MON"]),
            "ERR invalid spec: cron day-of-week 'FRI-MON' is a range",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:x * * * *"]),
            "ERR invalid spec: cron minute 'x' is not a number or name",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:0 0 * FOO *"]),
            "ERR invalid spec: cron month 'FOO' is not a number or name",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:1,,2 * * * *"]),
            "ERR invalid spec: cron minute",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:@every"]),
            "ERR invalid spec: unknown shortcut '@every'",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:0 0 30 2 *"]),
            "ERR invalid spec: the day-of-month exists in none of its months",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:0 0 31 4,6,9,11 *"]),
            "ERR invalid spec: the day-of-month exists in none of its months",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:0\x00 * * * *"]),
            "ERR invalid spec: cron minute '0\\x00'",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 TZ Mars/Olympus"),
            "ERR invalid TZ: unknown time zone 'Mars/Olympus'",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"every:1000", b"TZ", b""]),
            "ERR invalid TZ: unknown time zone ''",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"every:1000", b"TZ", b"UTC\xff"]),
            "ERR invalid TZ: unknown time zone 'UTC\\xff'",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 TZ Etc/Unknown"),
            "ERR invalid TZ: unknown time zone",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 JITTER 1001"),
            "ERR JITTER is not an integer or out of range (0..=1000, the spec's smallest interval in ms)",
        ),
        (
            raw(&[b"ECHO.REPEAT", b"{r}:s", b"id", b"cron:*/7 * * * *", b"JITTER", b"240001"]),
            "ERR JITTER is not an integer or out of range (0..=240000,",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 JITTER -1"),
            "ERR JITTER is not an integer",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 JITTER 1.5"),
            "ERR JITTER is not an integer",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 FROM x"),
            "ERR FROM is not an integer or out of range",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 UNTIL 1.5"),
            "ERR UNTIL is not an integer or out of range",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 UNTIL 9223372036854775808"),
            "ERR UNTIL is not an integer or out of range",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 FROM 10 UNTIL 5"),
            "ERR UNTIL must not be before FROM",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 UNTIL 5"),
            "ERR the definition has no occurrence still to come (before UNTIL)",
        ),
        (
            words("ECHO.REPEAT {r}:s id cron:0 0 1 1 * UNTIL 5"),
            "ERR syntax error",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 JITTER"),
            "ERR syntax error",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 JITTER 1 JITTER 1"),
            "ERR syntax error",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 TZ UTC tz UTC"),
            "ERR syntax error",
        ),
        (words("ECHO.REPEAT {r}:s id every:1000 NX"), "ERR syntax error"),
        (
            words("ECHO.REPEAT {r}:s id every:1000 PAYLOAD {r}:jobs"),
            "ERR syntax error",
        ),
        (
            words("ECHO.REPEAT {r}:s id every:1000 PAYLOAD {r}:jobs v PAYLOAD {r}:jobs v"),
            "ERR syntax error",
        ),
        (words("ECHO.REPEAT str id every:1000"), "WRONGTYPE"),
        (words("ECHO.REPEAT {r}:w id every:1000"), "WRONGTYPE"),
        (words("ECHO.REPEAT s id every:1000 PAYLOAD str v"), "WRONGTYPE"),
        (words("ECHO.REPEAT s id every:1000 PAYLOAD zset v"), "WRONGTYPE"),
        // ECHO.UNREPEAT and ECHO.REPEATS
        (words("ECHO.UNREPEAT"), wrong_arity),
        (words("ECHO.UNREPEAT s"), wrong_arity),
        (words("ECHO.UNREPEAT s id x"), wrong_arity),
        (words("ECHO.UNREPEAT str id"), "WRONGTYPE"),
        (words("ECHO.UNREPEAT {r}:w id"), "WRONGTYPE"),
        (words("ECHO.REPEATS"), wrong_arity),
        (words("ECHO.REPEATS s x"), wrong_arity),
        (words("ECHO.REPEATS str"), "WRONGTYPE"),
        (words("ECHO.REPEATS {r}:w"), "WRONGTYPE"),
    ];
    assert!(cases.len() >= 120, "{} cases", cases.len());

    let server = Server::start();
    let mut con = server.conn();
    seed(&mut con);
    let before = digest(&mut con);
    for (args, want) in &cases {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let err = error_of(&mut con, &args);
        assert!(
            err.starts_with(want),
            "{:?}: got {err:?}, want {want:?}",
            show(&args)
        );
        assert!(
            !err.contains('\n') && err.len() < 300,
            "{:?}: {err:?}",
            show(&args)
        );
        assert_eq!(
            digest(&mut con),
            before,
            "{:?} wrote something",
            show(&args)
        );
        let pong: String = q!(&mut con, "PING");
        assert_eq!(pong, "PONG");
    }
    // and the server still works
    retry(&mut con, "s", "j", "fixed:1", 1);
    println!("{} malformed calls refused", cases.len());
}
