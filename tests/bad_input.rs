//! Every malformed call is refused with an error reply, writes nothing, and
//! leaves the server serving.

mod common;

use common::*;

/// Keys of every type the commands can meet, plus due and future work.
fn seed(con: &mut Connection) {
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg("s")
        .arg(1)
        .arg("due")
        .arg(9e15)
        .arg("future")
        .ignore()
        .cmd("ZADD")
        .arg("zset")
        .arg(1)
        .arg("x")
        .ignore()
        .cmd("SET")
        .arg("str")
        .arg("x")
        .ignore()
        .cmd("LPUSH")
        .arg("list")
        .arg("x")
        .ignore()
        .cmd("LPUSH")
        .arg("p")
        .arg("old")
        .ignore()
        .cmd("HSET")
        .arg("hash")
        .arg("f")
        .arg("v")
        .ignore()
        .cmd("SADD")
        .arg("set")
        .arg("x")
        .ignore()
        .cmd("XADD")
        .arg("stream")
        .arg("*")
        .arg("f")
        .arg("v")
        .ignore()
        .query(con)
        .unwrap();
}

#[test]
fn malformed_calls_are_refused_and_write_nothing() {
    let nine_jitters = format!("{}fixed:1", "jitter:".repeat(9));
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
    let wrong_arity = "ERR wrong number of arguments";
    let cases: Vec<(Vec<Vec<u8>>, &str)> = vec![
        // ECHO.RETRY: arity
        (raw(&[b"ECHO.RETRY"]), wrong_arity),
        (raw(&[b"ECHO.RETRY", b"s", b"job", b"fixed:1"]), wrong_arity),
        (
            raw(&[b"ECHO.RETRY", b"s", b"job", b"fixed:1", b"1", b"extra"]),
            wrong_arity,
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
        (
            raw(&[b"ECHO.RETRY", b"str", b"job", b"fixed:1", b"1"]),
            "WRONGTYPE",
        ),
        (
            raw(&[b"ECHO.RETRY", b"list", b"job", b"fixed:1", b"1"]),
            "WRONGTYPE",
        ),
        (
            raw(&[b"ECHO.RETRY", b"hash", b"job", b"fixed:1", b"1"]),
            "WRONGTYPE",
        ),
        (
            raw(&[b"ECHO.RETRY", b"stream", b"job", b"fixed:1", b"1"]),
            "WRONGTYPE",
        ),
        // ECHO.PROMOTE: arity and LIMIT forms
        (raw(&[b"ECHO.PROMOTE"]), wrong_arity),
        (raw(&[b"ECHO.PROMOTE", b"s"]), wrong_arity),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"p", b"LIMIT"]),
            "ERR syntax error",
        ),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"p", b"LIMIT", b"0"]),
            "ERR LIMIT is not an integer",
        ),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"p", b"LIMIT", b"-5"]),
            "ERR LIMIT",
        ),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"p", b"LIMIT", b"1.5"]),
            "ERR LIMIT",
        ),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"p", b"LIMIT", b"abc"]),
            "ERR LIMIT",
        ),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"p", b"LIMIT", b""]),
            "ERR LIMIT",
        ),
        (
            raw(&[
                b"ECHO.PROMOTE",
                b"s",
                b"p",
                b"LIMIT",
                b"9223372036854775808",
            ]),
            "ERR LIMIT",
        ),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"p", b"COUNT", b"5"]),
            "ERR syntax error",
        ),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"p", b"LIMIT", b"5", b"x"]),
            "ERR syntax error",
        ),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"p", b"5"]),
            "ERR syntax error",
        ),
        (
            raw(&[b"ECHO.PROMOTE", b"s", b"s"]),
            "ERR schedule and pending must be different keys",
        ),
        // ECHO.PROMOTE: wrong key types, for each key, with and without due work
        (raw(&[b"ECHO.PROMOTE", b"str", b"p"]), "WRONGTYPE"),
        (raw(&[b"ECHO.PROMOTE", b"list", b"p"]), "WRONGTYPE"),
        (raw(&[b"ECHO.PROMOTE", b"s", b"str"]), "WRONGTYPE"),
        (raw(&[b"ECHO.PROMOTE", b"s", b"set"]), "WRONGTYPE"),
        (raw(&[b"ECHO.PROMOTE", b"s", b"zset"]), "WRONGTYPE"),
        (raw(&[b"ECHO.PROMOTE", b"missing", b"hash"]), "WRONGTYPE"),
        // ECHO.DELAY
        (raw(&[b"ECHO.DELAY"]), wrong_arity),
        (raw(&[b"ECHO.DELAY", b"fixed:1"]), wrong_arity),
        (raw(&[b"ECHO.DELAY", b"fixed:1", b"1", b"x"]), wrong_arity),
        (raw(&[b"ECHO.DELAY", b"bogus", b"1"]), "ERR invalid policy"),
        (raw(&[b"ECHO.DELAY", b"fixed:1", b"0"]), "ERR attempts"),
        // ECHO.SPREAD
        (raw(&[b"ECHO.SPREAD", b"s", b"0", b"10"]), wrong_arity),
        (
            raw(&[b"ECHO.SPREAD", b"s", b"0", b"10", b"0"]),
            "ERR buckets",
        ),
        (
            raw(&[b"ECHO.SPREAD", b"s", b"0", b"10", b"10001"]),
            "ERR buckets",
        ),
        (
            raw(&[b"ECHO.SPREAD", b"s", b"10", b"10", b"1"]),
            "ERR end_ms must be greater",
        ),
        (
            raw(&[b"ECHO.SPREAD", b"s", b"1.5", b"10", b"1"]),
            "ERR start_ms",
        ),
        (
            raw(&[b"ECHO.SPREAD", b"s", b"0", b"9223372036854775808", b"1"]),
            "ERR end_ms",
        ),
        (
            raw(&[b"ECHO.SPREAD", b"str", b"0", b"10", b"1"]),
            "WRONGTYPE",
        ),
    ];
    assert!(cases.len() >= 40, "{} cases", cases.len());

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
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
    }
    // and the server still works
    let _: i64 = redis::cmd("ECHO.RETRY")
        .arg("s")
        .arg("j")
        .arg("fixed:1")
        .arg(1)
        .query(&mut con)
        .unwrap();
    println!("{} malformed calls refused", cases.len());
}
