//! A seeded fuzz run: 20,000 calls of every module command (the list below,
//! ECHO.GROUPLIMIT and ECHO.GROUPS included, with the words that reach their
//! grammars) and `CONFIG SET`
//! of every module config, with arguments drawn from valid words, hostile
//! names and random bytes. After each call the server must answer PING, an
//! error must be printable ASCII, and a refused call must leave `DEBUG
//! DIGEST` unchanged. `ECHOMQ_FUZZ_SEED` and `ECHOMQ_FUZZ_CALLS` override
//! the seed and the count; a failure prints the seed and the call.

mod common;

use redis::Value;

use common::*;

/// xorshift64*: tiny, seedable, the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const HOSTILE: &[&[u8]] = &[
    b"%s%s%n",
    b"%p%99999999d",
    b"nul\0byte",
    b"line\nbreak",
    b"\r\n",
    b"ctl\x01\x1b\x7f",
    b"bad\xff\xfeutf8",
    "\u{100}\u{200}".as_bytes(),
    b"",
    b" ",
    b"{",
    b"}",
];

const KEYS: &[&[u8]] = &[
    b"{f}:s",
    b"{f}:p",
    b"{f}:d",
    b"{f}:str",
    b"{f}:stream",
    b"{g}:s",
];

const WORDS: &[&[u8]] = &[
    b"fixed:0",
    b"fixed:100",
    b"exponential:1:1000",
    b"jitter:exponential:100:10000",
    b"equal-jitter:fixed:50",
    b"jitter:",
    b"fixed:-1",
    b"exponential:5:1",
    b"FIXED:007",
    b"0",
    b"1",
    b"3",
    b"-1",
    b"18446744073709551616",
    b"9223372036854775807",
    b"1.5",
    b"NX",
    b"xx",
    b"Gt",
    b"LT",
    b"MAXATTEMPTS",
    b"DEAD",
    b"LIMIT",
    b"DELAY",
    b"GROUP",
    b"GROUP",
    b"tenant-1",
    b"DEFAULT",
    b"default",
    b"10/s",
    b"1/h",
    b"adaptive:5/s",
    b"CURSOR",
    b"COUNT",
    b"x",
    b"x61",
    b"x7a7a",
    b"tenant-2",
    b"job-1",
    b"job-2",
    b"every:1000",
    b"every:999",
    b"cron:0 * * * *",
    b"cron:*/7 * * * *",
    b"cron:0 0 30 2 *",
    b"cron:@hourly",
    b"cron:61 * * * *",
    b"JITTER",
    b"TZ",
    b"Europe/Berlin",
    b"FROM",
    b"UNTIL",
    b"PAYLOAD",
    b"report@1796310000000",
];

const COMMANDS: &[&str] = &[
    "ECHO.RETRY",
    "ECHO.PROMOTE",
    "ECHO.DELAY",
    "ECHO.SPREAD",
    "ECHO.QUEUES",
    "ECHO.SCHEDULE",
    "ECHO.HOLD",
    "ECHO.LIMITS",
    "ECHO.ADD",
    "ECHO.GROUPLIMIT",
    "ECHO.GROUPS",
    "ECHO.REPEAT",
    "ECHO.UNREPEAT",
    "ECHO.REPEATS",
];

fn word(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0..=2 => rng.pick(KEYS).to_vec(),
        3..=6 => rng.pick(WORDS).to_vec(),
        7 | 8 => rng.pick(HOSTILE).to_vec(),
        _ => {
            let len = rng.below(24);
            (0..len).map(|_| rng.next() as u8).collect()
        }
    }
}

/// A value of `echomq.release-limits` or `echomq.group-limits`: up to three
/// `schedule rate burst` triples of valid and hostile words.
fn limits_value(rng: &mut Rng) -> Vec<u8> {
    let mut value = Vec::new();
    for _ in 0..rng.below(4) {
        for word in [word(rng), rate(rng), number_or_junk(rng)] {
            value.extend_from_slice(&word);
            value.push(b' ');
        }
    }
    value
}

/// A config value. Pairs name only keys no command writes (`cfg` names), so
/// the timer never moves anything between two digests.
fn config_call(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut call = vec![b"CONFIG".to_vec(), b"SET".to_vec()];
    match rng.below(7) {
        0 => {
            call.push(b"echomq.auto-promote".to_vec());
            let mut value = Vec::new();
            for _ in 0..rng.below(5) {
                value.extend_from_slice(b"cfg");
                let part: &[u8] = HOSTILE[rng.below(HOSTILE.len())];
                value.extend_from_slice(part);
                value.extend_from_slice(&rng.below(3).to_le_bytes()[..1]);
                value.push(*rng.pick(b" \t\nx"));
            }
            call.push(value);
        }
        1 => {
            call.push(b"echomq.auto-promote-interval-ms".to_vec());
            call.push(number_or_junk(rng));
        }
        2 => {
            call.push(b"echomq.auto-promote-limit".to_vec());
            call.push(number_or_junk(rng));
        }
        3 => {
            // Limits on any of the command keys: a limit changes what a
            // later promote moves, never what a refused call writes.
            call.push(b"echomq.release-limits".to_vec());
            call.push(limits_value(rng));
        }
        4 => {
            call.push(b"echomq.adaptive-window-ms".to_vec());
            call.push(number_or_junk(rng));
        }
        5 => {
            // Group limits, as release limits: they change what a later
            // promote moves, never what a refused call writes.
            call.push(b"echomq.group-limits".to_vec());
            call.push(limits_value(rng));
        }
        _ => {
            call.push(b"echomq.adaptive-failure-percent".to_vec());
            call.push(number_or_junk(rng));
        }
    }
    call
}

fn rate(rng: &mut Rng) -> Vec<u8> {
    let prefix = if rng.below(3) == 0 { "adaptive:" } else { "" };
    let unit = rng.pick(&["s", "m", "h", "d", ""]);
    let n = match rng.below(4) {
        0 => "0".to_string(),
        1 => "01".to_string(),
        _ => (1 + rng.below(2_000_000)).to_string(),
    };
    format!("{prefix}{n}/{unit}").into_bytes()
}

fn number_or_junk(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => (rng.below(70_000)).to_string().into_bytes(),
        1 => (rng.next() as i64).to_string().into_bytes(),
        2 => rng.pick(HOSTILE).to_vec(),
        _ => rng.pick(WORDS).to_vec(),
    }
}

fn printable(text: &str) -> bool {
    text.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
}

#[test]
fn twenty_thousand_random_calls_never_crash_and_refused_calls_write_nothing() {
    let seed: u64 = std::env::var("ECHOMQ_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0EC0_0000_0001);
    let calls: usize = std::env::var("ECHOMQ_FUZZ_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let mut server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "SET", "{f}:str", "a string");
    let _: String = q!(&mut con, "XADD", "{f}:stream", "*", "job", "x");
    let mut rng = Rng(seed | 1);
    let (mut refused, mut config_calls) = (0usize, 0usize);
    for i in 0..calls {
        let call: Vec<Vec<u8>> = if rng.below(5) == 0 {
            config_calls += 1;
            config_call(&mut rng)
        } else {
            let name = rng.pick(COMMANDS);
            let mut call = vec![name.as_bytes().to_vec()];
            for _ in 0..rng.below(10) {
                call.push(word(&mut rng));
            }
            call
        };
        let mut command = redis::cmd(std::str::from_utf8(&call[0]).expect("a command name"));
        for arg in &call[1..] {
            command.arg(arg);
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .cmd("DEBUG")
            .arg("DIGEST")
            .add_command(command)
            .cmd("DEBUG")
            .arg("DIGEST")
            .cmd("PING");
        let shown = show(&call.iter().map(Vec::as_slice).collect::<Vec<_>>());
        let replies: Vec<Value> = pipe
            .query(&mut con)
            .unwrap_or_else(|e| panic!("seed {seed}, call {i} {shown:?}: the server is gone: {e}"));
        assert!(
            server.alive(),
            "seed {seed}, call {i} {shown:?}: the server died"
        );
        let [before, reply, after, pong] = &replies[..] else {
            panic!("seed {seed}, call {i}: {replies:?}");
        };
        assert_eq!(
            *pong,
            Value::SimpleString("PONG".into()),
            "seed {seed}, call {i} {shown:?}"
        );
        if let Value::ServerError(e) = reply {
            refused += 1;
            let text = format!("{} {}", e.code(), e.details().unwrap_or(""));
            assert!(
                printable(&text),
                "seed {seed}, call {i} {shown:?}: {text:?}"
            );
            assert_eq!(
                before, after,
                "seed {seed}, call {i} {shown:?} wrote on an error"
            );
        }
    }
    eprintln!("seed {seed}: {calls} calls, {refused} refused, {config_calls} CONFIG SET");
    assert!(
        refused > calls / 4,
        "the fuzz reached the refusals: {refused}"
    );
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", "");
    let pong: String = q!(&mut con, "PING");
    assert_eq!(pong, "PONG");
}
