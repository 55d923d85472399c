//! Turns argument bytes into typed requests: the grammar more than one
//! command or config shares (canonical integers, quoting, policies, attempt
//! counts, delays, the options ECHO.RETRY and ECHO.SCHEDULE share, and
//! ECHO.ADD's, which share ECHO.SCHEDULE's delay and will share `GROUP` with
//! both). A grammar of one command alone sits beside its handler in
//! `commands/`; the configs' in `rules/configs.rs`. No server types: every
//! rule of the contract's argument grammar is checked before a key is
//! opened, so a malformed call can never write anything.

pub use crate::rules::errors::ArgError;
use crate::rules::fairness::Group;
use crate::rules::policy::{Backoff, Jitter, Jitters, Policy, MAX_JITTER_LAYERS, MAX_MS};

/// A canonical unsigned decimal, as the server reads its own integers: digits
/// only, no sign, no leading zero except `0` itself. `None` when malformed or
/// above `max`.
pub fn canonical_u64(bytes: &[u8], max: u64) -> Option<u64> {
    let (&first, _) = bytes.split_first()?;
    if first == b'0' && bytes.len() > 1 {
        return None;
    }
    let mut value: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    (value <= max).then_some(value)
}

/// A canonical signed decimal in the full `i64` range (`-0` is refused, as
/// the server refuses it).
pub fn canonical_i64(bytes: &[u8]) -> Option<i64> {
    match bytes.split_first() {
        Some((b'-', magnitude)) => {
            let m = canonical_u64(magnitude, i64::MAX as u64 + 1)?;
            if m == 0 {
                return None;
            }
            // m is in 1..=2^63, so 0 - m is in i64::MIN..=-1.
            0i64.checked_sub_unsigned(m)
        }
        _ => canonical_u64(bytes, i64::MAX as u64).and_then(|v| i64::try_from(v).ok()),
    }
}

fn policy_ms(bytes: &[u8], field: &'static str) -> Result<u64, ArgError> {
    if canonical_u64(bytes, u64::MAX).is_none() && !is_all_digits_overflowing(bytes) {
        return Err(ArgError::NotInteger(field));
    }
    canonical_u64(bytes, MAX_MS).ok_or(ArgError::OutOfRange(field))
}

/// A well-formed decimal too large for `u64`: out of range, not malformed.
fn is_all_digits_overflowing(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes[0] != b'0' && bytes.iter().all(u8::is_ascii_digit)
}

/// Shows a client's bytes in an error reply without letting them break the
/// reply: at most 32 bytes, anything but printable ASCII escaped.
pub fn quoted(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes.iter().take(32) {
        if b.is_ascii_graphic() && b != b'\'' || b == b' ' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > 32 {
        out.push_str("...");
    }
    out
}

/// Parses a policy string: `fixed:<ms>`, `exponential:<base>:<max>`, or a
/// backoff wrapped in `jitter:` and `equal-jitter:` layers, at most
/// `MAX_JITTER_LAYERS` of them in all. Names are case-insensitive.
pub fn parse_policy(input: &[u8]) -> Result<Policy, ArgError> {
    const FIXED: &str = "fixed:<ms>";
    const EXPONENTIAL: &str = "exponential:<base>:<max>";
    let mut fields = input.split(|&b| b == b':');
    // Outermost first, as written; applied innermost first.
    let mut layers = [Jitter::Full; MAX_JITTER_LAYERS as usize];
    let mut depth = 0usize;
    loop {
        let name = match fields.next() {
            Some(name) if !name.is_empty() => name,
            _ if depth > 0 => {
                let wrapper = match layers.get(depth - 1) {
                    Some(Jitter::Equal) => "equal-jitter",
                    _ => "jitter",
                };
                return Err(ArgError::MissingInnerPolicy(wrapper));
            }
            _ => return Err(ArgError::EmptyPolicy),
        };
        let layer = if name.eq_ignore_ascii_case(b"jitter") {
            Some(Jitter::Full)
        } else if name.eq_ignore_ascii_case(b"equal-jitter") {
            Some(Jitter::Equal)
        } else {
            None
        };
        if let Some(layer) = layer {
            // Refused at the 9th prefix, before reading on: a policy of a
            // million prefixes costs no more than one of nine.
            let slot = layers.get_mut(depth).ok_or(ArgError::TooDeep)?;
            *slot = layer;
            depth += 1;
            continue;
        }
        let backoff = if name.eq_ignore_ascii_case(b"fixed") {
            let ms = fields.next().ok_or(ArgError::MissingField(FIXED))?;
            if fields.next().is_some() {
                return Err(ArgError::ExtraField(FIXED));
            }
            Backoff::Fixed {
                delay_ms: policy_ms(ms, "ms")?,
            }
        } else if name.eq_ignore_ascii_case(b"exponential") {
            let base = fields.next().ok_or(ArgError::MissingField(EXPONENTIAL))?;
            let max = fields.next().ok_or(ArgError::MissingField(EXPONENTIAL))?;
            if fields.next().is_some() {
                return Err(ArgError::ExtraField(EXPONENTIAL));
            }
            let base_ms = policy_ms(base, "base")?;
            let max_ms = policy_ms(max, "max")?;
            if max_ms < base_ms {
                return Err(ArgError::MaxLessThanBase);
            }
            Backoff::Exponential { base_ms, max_ms }
        } else {
            return Err(ArgError::UnknownPolicy(quoted(name)));
        };
        let jitters = layers
            .get(..depth)
            .and_then(Jitters::from_outermost)
            .ok_or(ArgError::TooDeep)?;
        return Ok(Policy { backoff, jitters });
    }
}

/// A delay in ms from now, as ECHO.SCHEDULE's `delay_ms` and ECHO.ADD's
/// `DELAY ms` take it: a canonical integer in `0..=MAX_MS`.
pub fn delay_ms(bytes: &[u8]) -> Option<u64> {
    canonical_u64(bytes, MAX_MS)
}

/// The most option words a valid ECHO.ADD call has: `DELAY ms`, `GROUP
/// group`, `NX`.
pub const MAX_ADD_OPTION_WORDS: usize = 5;

/// ECHO.ADD's options after `job`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddRequest {
    /// `DELAY ms`; `0` when absent (a run due now).
    pub delay_ms: u64,
    /// `NX`: nothing at all when the job is already in the schedule.
    pub only_new: bool,
    /// `GROUP group`: the position of the group's name among the options.
    pub group: Option<usize>,
}

/// A group's name as `GROUP` takes it: 1..=1024 bytes.
pub fn group_name(name: &[u8]) -> Result<(), ArgError> {
    match Group::named(name) {
        Some(_) => Ok(()),
        None => Err(ArgError::GroupName),
    }
}

/// Parses ECHO.ADD's options after `job`: `[DELAY ms] [GROUP group] [NX]` in
/// any order, keywords in any case, each at most once; then that the two
/// keys differ.
pub fn parse_add_request(
    schedule: &[u8],
    pending: &[u8],
    options: &[&[u8]],
) -> Result<AddRequest, ArgError> {
    let mut request = AddRequest::default();
    let (mut nx, mut delay) = (false, false);
    let mut i = 0;
    while let Some(&word) = options.get(i) {
        if word.eq_ignore_ascii_case(b"NX") {
            if std::mem::replace(&mut nx, true) {
                return Err(ArgError::Syntax);
            }
            i += 1;
            continue;
        }
        let value = options.get(i + 1).ok_or(ArgError::Syntax)?;
        if word.eq_ignore_ascii_case(b"DELAY") && !std::mem::replace(&mut delay, true) {
            request.delay_ms = delay_ms(value).ok_or(ArgError::Delay)?;
        } else if word.eq_ignore_ascii_case(b"GROUP") && request.group.is_none() {
            group_name(value)?;
            request.group = Some(i + 1);
        } else {
            return Err(ArgError::Syntax);
        }
        i += 2;
    }
    request.only_new = nx;
    if schedule == pending {
        return Err(ArgError::SameKey);
    }
    Ok(request)
}

/// What ECHO.RETRY and ECHO.DELAY share: a policy and an attempt count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayRequest {
    pub policy: Policy,
    pub attempts: u64,
}

pub fn parse_delay_request(policy: &[u8], attempts: &[u8]) -> Result<DelayRequest, ArgError> {
    let policy = parse_policy(policy)?;
    let attempts = canonical_u64(attempts, i64::MAX as u64)
        .filter(|&a| a >= 1)
        .ok_or(ArgError::Attempts)?;
    Ok(DelayRequest { policy, attempts })
}

/// The most option words a valid ECHO.RETRY or ECHO.SCHEDULE call has:
/// `NX|XX`, `GT|LT`, `MAXATTEMPTS n`, `DEAD dead`, `GROUP group`.
pub const MAX_OPTION_WORDS: usize = 8;

/// Whether ECHO.RETRY may add a new job or replace an existing one's score.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Presence {
    /// Either (no option).
    #[default]
    Any,
    /// `NX`: only a job not yet in the schedule.
    New,
    /// `XX`: only a job already in the schedule.
    Existing,
}

/// When ECHO.RETRY may replace an existing job's score.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compare {
    #[default]
    Always,
    /// `GT`: only by a later fire time.
    Later,
    /// `LT`: only by an earlier fire time.
    Earlier,
}

/// `MAXATTEMPTS n DEAD dead`: where a job goes once it has failed `n` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    pub max_attempts: u64,
    /// The position of the `dead` key among the options, so the handler can
    /// open the very argument the server routed by.
    pub key_index: usize,
}

/// ECHO.RETRY's options after `attempts`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryOptions {
    pub presence: Presence,
    pub compare: Compare,
    pub dead_letter: Option<DeadLetter>,
    /// `GROUP group`: the position of the group's name among the options.
    pub group: Option<usize>,
}

/// ECHO.RETRY in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryRequest {
    pub delay: DelayRequest,
    pub options: RetryOptions,
}

impl RetryRequest {
    /// Whether this call dead-letters instead of scheduling.
    pub fn dies(&self) -> bool {
        self.options
            .dead_letter
            .is_some_and(|dead| self.delay.attempts >= dead.max_attempts)
    }
}

/// Parses ECHO.RETRY's arguments after the command name: policy, attempts and
/// options are checked in that order, then that `dead` is not `schedule`.
pub fn parse_retry_request(
    schedule: &[u8],
    policy: &[u8],
    attempts: &[u8],
    options: &[&[u8]],
) -> Result<RetryRequest, ArgError> {
    let delay = parse_delay_request(policy, attempts)?;
    let parsed = parse_retry_options(options)?;
    if let Some(dead) = parsed.dead_letter {
        if options.get(dead.key_index).copied() == Some(schedule) {
            return Err(ArgError::DeadIsSchedule);
        }
    }
    Ok(RetryRequest {
        delay,
        options: parsed,
    })
}

/// Where the `dead` key is among ECHO.RETRY's options, by the rule of its
/// key spec: the argument after the first `DEAD` keyword. For every call the
/// option parser accepts this is the key it names (a `DEAD` word before the
/// keyword could only be MAXATTEMPTS's value, which must be a number), and
/// it answers for malformed calls too, which the handler then refuses.
pub fn dead_key_index(options: &[&[u8]]) -> Option<usize> {
    let keyword = options
        .iter()
        .position(|w| w.eq_ignore_ascii_case(b"DEAD"))?;
    let key = keyword + 1;
    (key < options.len()).then_some(key)
}

/// `[NX | XX] [GT | LT] [MAXATTEMPTS n DEAD dead] [GROUP group]` in any
/// order, keywords in any case, each at most once. The exclusions are
/// ZADD's: `NX` with any of `XX`, `GT`, `LT`, and `GT` with `LT`. The `dead`
/// key must be the word after the first `DEAD` (the rule a cluster routes
/// by), so a group named `dead` must come after the `DEAD dead` pair.
pub fn parse_retry_options(options: &[&[u8]]) -> Result<RetryOptions, ArgError> {
    let mut parsed = RetryOptions::default();
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    let mut max_attempts = None;
    let mut dead_key_index = None;
    let mut i = 0;
    while let Some(&word) = options.get(i) {
        let flag = if word.eq_ignore_ascii_case(b"NX") {
            Some(&mut nx)
        } else if word.eq_ignore_ascii_case(b"XX") {
            Some(&mut xx)
        } else if word.eq_ignore_ascii_case(b"GT") {
            Some(&mut gt)
        } else if word.eq_ignore_ascii_case(b"LT") {
            Some(&mut lt)
        } else {
            None
        };
        if let Some(flag) = flag {
            if std::mem::replace(flag, true) {
                return Err(ArgError::Syntax);
            }
            i += 1;
            continue;
        }
        let value = options.get(i + 1).ok_or(ArgError::Syntax)?;
        if word.eq_ignore_ascii_case(b"MAXATTEMPTS") && max_attempts.is_none() {
            let n = canonical_u64(value, i64::MAX as u64)
                .filter(|&n| n >= 1)
                .ok_or(ArgError::MaxAttempts)?;
            max_attempts = Some(n);
        } else if word.eq_ignore_ascii_case(b"DEAD") && dead_key_index.is_none() {
            dead_key_index = Some(i + 1);
        } else if word.eq_ignore_ascii_case(b"GROUP") && parsed.group.is_none() {
            group_name(value)?;
            parsed.group = Some(i + 1);
        } else {
            return Err(ArgError::Syntax);
        }
        i += 2;
    }
    if nx && xx {
        return Err(ArgError::Conflict("XX and NX"));
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return Err(ArgError::Conflict("GT, LT, and/or NX"));
    }
    parsed.presence = match (nx, xx) {
        (true, _) => Presence::New,
        (_, true) => Presence::Existing,
        _ => Presence::Any,
    };
    parsed.compare = match (gt, lt) {
        (true, _) => Compare::Later,
        (_, true) => Compare::Earlier,
        _ => Compare::Always,
    };
    if dead_key_index.is_some() && dead_key_index != self::dead_key_index(options) {
        return Err(ArgError::Syntax);
    }
    parsed.dead_letter = match (max_attempts, dead_key_index) {
        (Some(max_attempts), Some(key_index)) => Some(DeadLetter {
            max_attempts,
            key_index,
        }),
        (None, None) => None,
        _ => return Err(ArgError::DeadNeedsBoth),
    };
    Ok(parsed)
}

/// `value` in decimal, written into `buffer` (20 bytes hold any i64).
pub fn i64_text(value: i64, buffer: &mut [u8; 20]) -> &[u8] {
    let mut at = buffer.len();
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        buffer[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        at -= 1;
        buffer[at] = b'-';
    }
    &buffer[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i64_text_writes_what_display_writes() {
        for v in [0, 1, -1, 9, 10, -10, 1_796_310_000_000, i64::MAX, i64::MIN] {
            let mut buffer = [0u8; 20];
            assert_eq!(i64_text(v, &mut buffer), v.to_string().as_bytes());
        }
    }

    fn full(n: u8) -> Jitters {
        Jitters::from_outermost(&vec![Jitter::Full; usize::from(n)]).unwrap()
    }
    fn fixed(delay_ms: u64, jitter_layers: u8) -> Policy {
        Policy {
            backoff: Backoff::Fixed { delay_ms },
            jitters: full(jitter_layers),
        }
    }
    fn exp(base_ms: u64, max_ms: u64, jitter_layers: u8) -> Policy {
        Policy {
            backoff: Backoff::Exponential { base_ms, max_ms },
            jitters: full(jitter_layers),
        }
    }

    #[test]
    fn canonical_integers() {
        let max = i64::MAX as u64;
        for (s, want) in [
            ("0", Some(0)),
            ("1", Some(1)),
            ("10", Some(10)),
            ("9223372036854775807", Some(max)),
            ("9223372036854775808", None),
            ("18446744073709551616", None),
            ("", None),
            ("00", None),
            ("007", None),
            ("+1", None),
            ("-1", None),
            (" 1", None),
            ("1 ", None),
            ("1.0", None),
            ("1e3", None),
            ("0x10", None),
            ("١", None),
        ] {
            assert_eq!(canonical_u64(s.as_bytes(), max), want, "{s:?}");
        }
        for (s, want) in [
            ("0", Some(0)),
            ("-1", Some(-1)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("-9223372036854775809", None),
            ("9223372036854775807", Some(i64::MAX)),
            ("-0", None),
            ("-", None),
            ("--1", None),
            ("-01", None),
        ] {
            assert_eq!(canonical_i64(s.as_bytes()), want, "{s:?}");
        }
    }

    #[test]
    fn policy_grammar() {
        let ok: &[(&str, Policy)] = &[
            ("fixed:1000", fixed(1000, 0)),
            ("FIXED:0", fixed(0, 0)),
            ("fixed:10000000000000", fixed(MAX_MS, 0)),
            ("exponential:100:10000", exp(100, 10_000, 0)),
            ("Exponential:5:5", exp(5, 5, 0)),
            ("exponential:0:0", exp(0, 0, 0)),
            ("jitter:exponential:100:10000", exp(100, 10_000, 1)),
            ("JITTER:jitter:fixed:7", fixed(7, 2)),
            (
                "jitter:jitter:jitter:jitter:jitter:jitter:jitter:jitter:fixed:1",
                fixed(1, 8),
            ),
        ];
        for (s, want) in ok {
            assert_eq!(parse_policy(s.as_bytes()).as_ref(), Ok(want), "{s}");
        }
        use ArgError::*;
        let bad: &[(&str, ArgError)] = &[
            ("", EmptyPolicy),
            (":", EmptyPolicy),
            ("jitter", MissingInnerPolicy("jitter")),
            ("jitter:", MissingInnerPolicy("jitter")),
            ("nope:1", UnknownPolicy("nope".into())),
            ("fixed", MissingField("fixed:<ms>")),
            ("fixed:", NotInteger("ms")),
            ("fixed:1:2", ExtraField("fixed:<ms>")),
            ("fixed:-1", NotInteger("ms")),
            ("fixed:1.5", NotInteger("ms")),
            ("fixed:1e3", NotInteger("ms")),
            ("fixed:007", NotInteger("ms")),
            ("fixed:10000000000001", OutOfRange("ms")),
            ("fixed:99999999999999999999999", OutOfRange("ms")),
            ("exponential:100", MissingField("exponential:<base>:<max>")),
            ("exponential:100:", NotInteger("max")),
            (
                "exponential:100:1000:1",
                ExtraField("exponential:<base>:<max>"),
            ),
            ("exponential:100:50", MaxLessThanBase),
            ("exponential:x:50", NotInteger("base")),
            (
                "jitter:jitter:jitter:jitter:jitter:jitter:jitter:jitter:jitter:fixed:1",
                TooDeep,
            ),
            ("jitter:nope", UnknownPolicy("nope".into())),
            ("fixed :1", UnknownPolicy("fixed ".into())),
        ];
        for (s, want) in bad {
            assert_eq!(parse_policy(s.as_bytes()).as_ref(), Err(want), "{s}");
        }
    }

    #[test]
    fn error_replies_quote_safely() {
        let long = [b'\n'; 100];
        let msg = parse_policy(&long).unwrap_err().to_string();
        assert!(msg.starts_with("ERR invalid policy: unknown policy name '\\x0a"));
        assert!(msg.len() < 250 && !msg.contains('\n'), "{msg}");
        for e in [ArgError::Attempts, ArgError::Limit, ArgError::TooDeep] {
            assert!(e.to_string().starts_with("ERR "));
        }
    }

    #[test]
    fn attempts() {
        assert_eq!(
            parse_delay_request(b"fixed:1", b"1").map(|r| r.attempts),
            Ok(1)
        );
        assert_eq!(
            parse_delay_request(b"fixed:1", b"9223372036854775807").map(|r| r.attempts),
            Ok(i64::MAX as u64)
        );
        for a in ["0", "-1", "", "01", "9223372036854775808", "1.0"] {
            assert_eq!(
                parse_delay_request(b"fixed:1", a.as_bytes()),
                Err(ArgError::Attempts),
                "{a}"
            );
        }
        // the policy is judged first
        assert_eq!(
            parse_delay_request(b"x", b"0"),
            Err(ArgError::UnknownPolicy("x".into()))
        );
    }

    #[test]
    fn equal_jitter_policies() {
        let eq = |layers: &[Jitter]| Jitters::from_outermost(layers).unwrap();
        for (s, want) in [
            ("equal-jitter:fixed:10", eq(&[Jitter::Equal])),
            ("EQUAL-JITTER:fixed:10", eq(&[Jitter::Equal])),
            ("jitter:equal-jitter:fixed:10", eq(&[Jitter::Full, Jitter::Equal])),
            ("Equal-Jitter:JITTER:fixed:10", eq(&[Jitter::Equal, Jitter::Full])),
            (
                "equal-jitter:jitter:equal-jitter:jitter:equal-jitter:jitter:equal-jitter:jitter:fixed:10",
                eq(&[Jitter::Equal, Jitter::Full].repeat(4)),
            ),
        ] {
            let policy = parse_policy(s.as_bytes()).unwrap();
            assert_eq!(policy.jitters, want, "{s}");
            assert_eq!(policy.backoff, Backoff::Fixed { delay_ms: 10 });
        }
        use ArgError::*;
        for (s, want) in [
            ("equal-jitter", MissingInnerPolicy("equal-jitter")),
            ("equal-jitter:", MissingInnerPolicy("equal-jitter")),
            ("equal-jitter:jitter:", MissingInnerPolicy("jitter")),
            ("jitter:equal-jitter", MissingInnerPolicy("equal-jitter")),
            ("equal:fixed:1", UnknownPolicy("equal".into())),
            ("equaljitter:fixed:1", UnknownPolicy("equaljitter".into())),
            ("equal_jitter:fixed:1", UnknownPolicy("equal_jitter".into())),
            ("equal-jitter:nope:1", UnknownPolicy("nope".into())),
            (
                "equal-jitter:jitter:equal-jitter:jitter:equal-jitter:jitter:equal-jitter:jitter:equal-jitter:fixed:1",
                TooDeep,
            ),
        ] {
            assert_eq!(parse_policy(s.as_bytes()), Err(want), "{s}");
        }
        let nine = format!("{}fixed:1", "equal-jitter:".repeat(9));
        assert_eq!(parse_policy(nine.as_bytes()), Err(TooDeep));
    }

    fn options(call: &str) -> Result<RetryOptions, ArgError> {
        let words: Vec<&[u8]> = call.split_whitespace().map(str::as_bytes).collect();
        parse_retry_options(&words)
    }

    #[test]
    fn retry_options_table() {
        let dead = |max_attempts, key_index| {
            Some(DeadLetter {
                max_attempts,
                key_index,
            })
        };
        let ok = |presence, compare, dead_letter| {
            Ok(RetryOptions {
                presence,
                compare,
                dead_letter,
                group: None,
            })
        };
        let grouped = |dead_letter, at| {
            Ok(RetryOptions {
                dead_letter,
                group: Some(at),
                ..RetryOptions::default()
            })
        };
        use Compare::*;
        use Presence::*;
        for (call, want) in [
            ("", ok(Any, Always, None)),
            ("NX", ok(New, Always, None)),
            ("xx", ok(Existing, Always, None)),
            ("Gt", ok(Any, Later, None)),
            ("lT", ok(Any, Earlier, None)),
            ("XX GT", ok(Existing, Later, None)),
            ("LT XX", ok(Existing, Earlier, None)),
            ("MAXATTEMPTS 5 DEAD d", ok(Any, Always, dead(5, 3))),
            ("dead d maxattempts 5", ok(Any, Always, dead(5, 1))),
            ("DEAD d NX MAXATTEMPTS 1", ok(New, Always, dead(1, 1))),
            (
                "GT MAXATTEMPTS 9223372036854775807 XX DEAD NX",
                ok(Existing, Later, dead(i64::MAX as u64, 5)),
            ),
            // the dead key may be spelled like a keyword
            ("DEAD DEAD MAXATTEMPTS 2", ok(Any, Always, dead(2, 1))),
            (
                "MAXATTEMPTS 2 DEAD MAXATTEMPTS",
                ok(Any, Always, dead(2, 3)),
            ),
            ("GROUP g", grouped(None, 1)),
            ("group NX", grouped(None, 1)),
            ("GROUP g MAXATTEMPTS 2 DEAD d", grouped(dead(2, 5), 1)),
            ("MAXATTEMPTS 2 DEAD d GROUP dead", grouped(dead(2, 3), 5)),
        ] {
            assert_eq!(options(call), want, "{call:?}");
        }
        use ArgError::*;
        for (call, want) in [
            ("NX NX", Syntax),
            ("gt GT", Syntax),
            ("FOO", Syntax),
            ("FOO bar", Syntax),
            ("NX 1", Syntax),
            ("MAXATTEMPTS", Syntax),
            ("DEAD", Syntax),
            ("MAXATTEMPTS 3 DEAD", Syntax),
            ("MAXATTEMPTS 3 MAXATTEMPTS 3 DEAD d", Syntax),
            ("MAXATTEMPTS 3 DEAD d DEAD e", Syntax),
            ("MAXATTEMPTS 3", DeadNeedsBoth),
            ("DEAD d", DeadNeedsBoth),
            ("NX DEAD d", DeadNeedsBoth),
            ("MAXATTEMPTS 0 DEAD d", MaxAttempts),
            ("MAXATTEMPTS -1 DEAD d", MaxAttempts),
            ("MAXATTEMPTS 01 DEAD d", MaxAttempts),
            ("MAXATTEMPTS 1.5 DEAD d", MaxAttempts),
            ("MAXATTEMPTS 9223372036854775808 DEAD d", MaxAttempts),
            ("MAXATTEMPTS x DEAD d", MaxAttempts),
            ("NX XX", Conflict("XX and NX")),
            ("XX NX GT", Conflict("XX and NX")),
            ("NX GT", Conflict("GT, LT, and/or NX")),
            ("LT NX", Conflict("GT, LT, and/or NX")),
            ("GT LT", Conflict("GT, LT, and/or NX")),
            ("XX GT LT", Conflict("GT, LT, and/or NX")),
            ("GROUP", Syntax),
            ("GROUP a GROUP b", Syntax),
            // the dead key is the word after the first DEAD, as a cluster
            // routes it: a group named dead comes after the pair
            ("GROUP dead MAXATTEMPTS 2 DEAD d", Syntax),
        ] {
            assert_eq!(options(call), Err(want), "{call:?}");
        }
    }

    #[test]
    fn retry_requests_check_policy_then_attempts_then_options_then_keys() {
        let req = |schedule: &str, policy: &str, attempts: &str, opts: &str| {
            let words: Vec<&[u8]> = opts.split_whitespace().map(str::as_bytes).collect();
            parse_retry_request(
                schedule.as_bytes(),
                policy.as_bytes(),
                attempts.as_bytes(),
                &words,
            )
        };
        assert_eq!(
            req("s", "x", "0", "NX XX"),
            Err(ArgError::UnknownPolicy("x".into()))
        );
        assert_eq!(req("s", "fixed:1", "0", "NX XX"), Err(ArgError::Attempts));
        assert_eq!(
            req("s", "fixed:1", "1", "NX XX DEAD s MAXATTEMPTS 1"),
            Err(ArgError::Conflict("XX and NX"))
        );
        assert_eq!(
            req("s", "fixed:1", "1", "DEAD s MAXATTEMPTS 1"),
            Err(ArgError::DeadIsSchedule)
        );
        // keys are binary: a different case is a different key
        let r = req("s", "fixed:1", "3", "DEAD S MAXATTEMPTS 3").unwrap();
        assert!(r.dies());
        let r = req("s", "fixed:1", "2", "DEAD d MAXATTEMPTS 3").unwrap();
        assert!(!r.dies());
        assert!(!req("s", "fixed:1", "9", "").unwrap().dies());
        for e in [
            ArgError::Conflict("XX and NX"),
            ArgError::DeadNeedsBoth,
            ArgError::MaxAttempts,
            ArgError::DeadIsSchedule,
        ] {
            assert!(e.to_string().starts_with("ERR "), "{e}");
        }
    }

    fn add(schedule: &str, pending: &str, opts: &str) -> Result<AddRequest, ArgError> {
        let words: Vec<&[u8]> = opts.split_whitespace().map(str::as_bytes).collect();
        parse_add_request(schedule.as_bytes(), pending.as_bytes(), &words)
    }

    #[test]
    fn add_options_table() {
        let ok = |delay_ms, only_new| {
            Ok(AddRequest {
                delay_ms,
                only_new,
                group: None,
            })
        };
        let grouped = |delay_ms, only_new, at| {
            Ok(AddRequest {
                delay_ms,
                only_new,
                group: Some(at),
            })
        };
        for (opts, want) in [
            ("", ok(0, false)),
            ("NX", ok(0, true)),
            ("nx", ok(0, true)),
            ("DELAY 0", ok(0, false)),
            ("delay 1500", ok(1500, false)),
            ("DELAY 10000000000000", ok(MAX_MS, false)),
            ("NX Delay 5", ok(5, true)),
            ("DELAY 5 NX", ok(5, true)),
            ("GROUP tenant-1", grouped(0, false, 1)),
            ("group g NX", grouped(0, true, 1)),
            ("NX DELAY 5 GROUP g", grouped(5, true, 4)),
            ("GROUP NX NX", grouped(0, true, 1)),
            ("GROUP DELAY DELAY 3", grouped(3, false, 1)),
        ] {
            assert_eq!(add("s", "p", opts), want, "{opts:?}");
        }
        use ArgError::*;
        for (opts, want) in [
            ("NX NX", Syntax),
            ("DELAY 1 DELAY 2", Syntax),
            ("DELAY", Syntax),
            ("NX DELAY", Syntax),
            ("XX", Syntax),
            ("GT", Syntax),
            ("LIMIT 5", Syntax),
            ("DELAY -1", Delay),
            ("DELAY 10000000000001", Delay),
            ("DELAY 1.5", Delay),
            ("DELAY 01", Delay),
            ("DELAY 1s", Delay),
            ("DELAY 99999999999999999999999", Delay),
            ("GROUP", Syntax),
            ("GROUP a GROUP b", Syntax),
            // options are judged in order: the first fault is the one named
            ("DELAY x GROUP g", Delay),
            ("GROUP g DELAY x", Delay),
        ] {
            assert_eq!(add("s", "p", opts), Err(want), "{opts:?}");
        }
        // keys are compared after the options, as ECHO.PROMOTE does
        assert_eq!(add("s", "s", ""), Err(SameKey));
        assert_eq!(add("s", "s", "DELAY x"), Err(Delay));
        assert_eq!(add("s", "S", ""), ok(0, false));
        let long = "g".repeat(1025);
        assert_eq!(add("s", "p", &format!("GROUP {long}")), Err(GroupName));
        assert_eq!(
            add("s", "p", &format!("GROUP {}", &long[1..])),
            grouped(0, false, 1)
        );
        let empty: [&[u8]; 2] = [b"GROUP", b""];
        assert_eq!(parse_add_request(b"s", b"p", &empty), Err(GroupName));
        for e in [Delay, GroupName, GroupNeedsTag] {
            assert!(e.to_string().starts_with("ERR "), "{e}");
        }
        assert_eq!(
            Delay.to_string(),
            "ERR DELAY is not an integer or out of range (0..=10000000000000)"
        );
    }

    #[test]
    fn delays_are_schedules_delays() {
        assert_eq!(delay_ms(b"0"), Some(0));
        assert_eq!(delay_ms(b"10000000000000"), Some(MAX_MS));
        for bad in ["", "-1", "+1", "007", "10000000000001", "1e3", " 1"] {
            assert_eq!(delay_ms(bad.as_bytes()), None, "{bad:?}");
        }
    }
}

/// Runs `check` on arbitrary byte strings (up to 64 bytes, as many cases as
/// the grammar's own properties): for a command's grammar, beside its
/// handler, to show it refuses or takes any bytes and never panics.
#[cfg(test)]
pub fn never_panics(check: impl Fn(&[u8])) {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config::with_cases(properties::CASES));
    let bytes = proptest::collection::vec(any::<u8>(), 0..64);
    runner
        .run(&bytes, |bytes| {
            check(&bytes);
            Ok(())
        })
        .unwrap();
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    pub const CASES: u32 = 4096;

    /// A policy from the grammar, rendered with names in random case.
    fn policy_text() -> impl Strategy<Value = (String, Policy)> {
        let backoff = prop_oneof![
            (0..=MAX_MS).prop_map(|delay_ms| Backoff::Fixed { delay_ms }),
            (0..=MAX_MS, 0..=MAX_MS).prop_map(|(a, b)| Backoff::Exponential {
                base_ms: a.min(b),
                max_ms: a.max(b),
            }),
        ];
        let layers = proptest::collection::vec(
            prop_oneof![Just(Jitter::Full), Just(Jitter::Equal)],
            0..=usize::from(MAX_JITTER_LAYERS),
        );
        (backoff, layers, any::<u64>()).prop_map(|(backoff, layers, case_bits)| {
            let mut bit = 0u32;
            let mut cased = |name: &str| -> String {
                name.chars()
                    .map(|c| {
                        bit = (bit + 1) % 64;
                        if case_bits >> bit & 1 == 1 {
                            c.to_ascii_uppercase()
                        } else {
                            c
                        }
                    })
                    .collect()
            };
            let mut text = String::new();
            for layer in &layers {
                text.push_str(&cased(match layer {
                    Jitter::Full => "jitter",
                    Jitter::Equal => "equal-jitter",
                }));
                text.push(':');
            }
            match backoff {
                Backoff::Fixed { delay_ms } => {
                    text.push_str(&format!("{}:{delay_ms}", cased("fixed")))
                }
                Backoff::Exponential { base_ms, max_ms } => {
                    text.push_str(&format!("{}:{base_ms}:{max_ms}", cased("exponential")))
                }
            }
            let jitters = Jitters::from_outermost(&layers).unwrap();
            (text, Policy { backoff, jitters })
        })
    }

    /// The contract's formula, computed independently in 128 bits.
    fn formula_ms(backoff: Backoff, attempts: u64) -> u64 {
        match backoff {
            Backoff::Fixed { delay_ms } => delay_ms,
            Backoff::Exponential { base_ms, max_ms } => {
                let doublings = attempts.max(1) - 1;
                if doublings >= 64 {
                    return if base_ms == 0 { 0 } else { max_ms };
                }
                let d = u128::from(base_ms) << doublings;
                u64::try_from(d.min(u128::from(max_ms))).unwrap()
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(CASES))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_policy(&bytes);
            let _ = canonical_u64(&bytes, u64::MAX);
            let _ = canonical_i64(&bytes);
            let _ = parse_delay_request(&bytes, &bytes);
            let _ = parse_retry_options(&[&bytes]);
            let _ = parse_retry_options(&[b"MAXATTEMPTS", &bytes, b"DEAD", &bytes]);
            let _ = parse_add_request(&bytes, b"p", &[b"DELAY", &bytes]);
            let _ = parse_add_request(b"s", &bytes, &[&bytes, &bytes]);
            let _ = parse_add_request(b"s", b"p", &[&bytes]);
        }

        #[test]
        fn add_option_noise_is_parsed_or_refused(
            words in proptest::collection::vec(
                prop_oneof![
                    Just("NX".to_string()), Just("delay".to_string()), Just("GROUP".to_string()),
                    Just("xx".to_string()), "[0-9]{1,15}", "-?[0-9.]{0,21}", "[a-z]{0,4}",
                    Just(String::new()),
                ],
                0..7,
            ),
        ) {
            let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            match parse_add_request(b"s", b"p", &bytes) {
                Err(e) => prop_assert!(e.to_string().starts_with("ERR "), "{}", e),
                Ok(request) => {
                    // every word consumed: NX alone, DELAY and GROUP with their values
                    let rest = bytes.len() - usize::from(request.only_new) - 2 * usize::from(request.group.is_some());
                    prop_assert!(rest == 0 || rest == 2, "{:?}", words);
                    prop_assert!(bytes.len() <= MAX_ADD_OPTION_WORDS);
                    if let Some(at) = request.group {
                        prop_assert!(bytes[at - 1].eq_ignore_ascii_case(b"GROUP"));
                        prop_assert!(!bytes[at].is_empty());
                    }
                    prop_assert!(request.delay_ms <= MAX_MS);
                }
            }
        }

        #[test]
        fn policy_shaped_noise_never_panics(text in "(?i)((equal-)?jitter:){0,10}(fixed|exponential|jitter|equal-jitter|x)?(:[0-9+\\-. e]{0,22}){0,3}") {
            if let Err(e) = parse_policy(text.as_bytes()) {
                prop_assert!(e.to_string().starts_with("ERR invalid policy: "));
            }
        }

        #[test]
        fn grammar_strings_parse_to_the_contract_formula(
            (text, want) in policy_text(),
            attempts in 1..=i64::MAX as u64,
            small_attempts in 1u64..80,
        ) {
            let policy = parse_policy(text.as_bytes());
            prop_assert_eq!(policy, Ok(want));
            for a in [attempts, small_attempts] {
                let d = formula_ms(want.backoff, a);
                prop_assert_eq!(want.backoff.delay_ms(a), d);
                // without jitter, or with a sampler at the top of the range, the formula itself
                prop_assert_eq!(want.delay_ms(a, |max| max), d);
            }
        }

        #[test]
        fn jitter_stays_within_its_bound(
            (_, policy) in policy_text(),
            attempts in 1..=i64::MAX as u64,
            seed in any::<u64>(),
        ) {
            use rand::SeedableRng;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let bound = policy.backoff.delay_ms(attempts);
            let (low, high) = policy.bounds_ms(attempts);
            prop_assert_eq!(high, bound);
            let d = policy.delay_ms_with_rng(attempts, &mut rng);
            prop_assert!(low <= d && d <= high, "{} not in {}..={}", d, low, high);
            prop_assert!(d <= MAX_MS);
            // the two extreme samplers reach the two ends
            prop_assert_eq!(policy.delay_ms(attempts, |_| 0), low);
            prop_assert_eq!(policy.delay_ms(attempts, |n| n), high);
        }

        #[test]
        fn valid_option_sets_parse_in_any_order_and_case(
            presence in 0u8..3,
            compare in 0u8..3,
            max_attempts in proptest::option::of(1..=i64::MAX as u64),
            key in "[a-zA-Z{}:]{1,12}",
            order in Just((0..4usize).collect::<Vec<_>>()).prop_shuffle(),
            case_bits in any::<u64>(),
        ) {
            // NX excludes GT and LT
            let compare = if presence == 1 { 0 } else { compare };
            let mut groups: Vec<Vec<String>> = vec![Vec::new(); 4];
            let mut bit = 0;
            let mut cased = |w: &str| -> String {
                bit += 1;
                if case_bits >> (bit % 64) & 1 == 1 { w.to_ascii_lowercase() } else { w.to_string() }
            };
            match presence { 1 => groups[0].push(cased("NX")), 2 => groups[0].push(cased("XX")), _ => {} }
            match compare { 1 => groups[1].push(cased("GT")), 2 => groups[1].push(cased("LT")), _ => {} }
            if let Some(n) = max_attempts {
                groups[2] = vec![cased("MAXATTEMPTS"), n.to_string()];
                groups[3] = vec![cased("DEAD"), key.clone()];
            }
            let words: Vec<String> = order.iter().flat_map(|&g| groups[g].clone()).collect();
            let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            let parsed = parse_retry_options(&bytes);
            prop_assert!(parsed.is_ok(), "{:?}: {:?}", words, parsed);
            let parsed = parsed.unwrap();
            prop_assert_eq!(parsed.presence, [Presence::Any, Presence::New, Presence::Existing][usize::from(presence)]);
            prop_assert_eq!(parsed.compare, [Compare::Always, Compare::Later, Compare::Earlier][usize::from(compare)]);
            prop_assert_eq!(parsed.dead_letter.map(|d| d.max_attempts), max_attempts);
            if let Some(d) = parsed.dead_letter {
                prop_assert_eq!(bytes[d.key_index], key.as_bytes());
                prop_assert_eq!(dead_key_index(&bytes), Some(d.key_index));
            } else {
                prop_assert_eq!(dead_key_index(&bytes), None);
            }
        }

        #[test]
        fn option_noise_is_parsed_or_refused_never_panics(
            words in proptest::collection::vec(
                prop_oneof![
                    Just("NX".to_string()), Just("xx".to_string()), Just("GT".to_string()),
                    Just("lt".to_string()), Just("MAXATTEMPTS".to_string()), Just("dead".to_string()),
                    Just("GROUP".to_string()),
                    "[0-9]{1,3}", "-?[0-9.]{0,21}", "[a-z]{0,4}", Just(String::new()),
                ],
                0..8,
            ),
        ) {
            let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            match parse_retry_options(&bytes) {
                Err(e) => prop_assert!(e.to_string().starts_with("ERR "), "{}", e),
                Ok(parsed) => {
                    // every word consumed: one per flag, two per MAXATTEMPTS or DEAD
                    let flags = usize::from(parsed.presence != Presence::Any)
                        + usize::from(parsed.compare != Compare::Always);
                    let pairs = if parsed.dead_letter.is_some() { 4 } else { 0 }
                        + if parsed.group.is_some() { 2 } else { 0 };
                    prop_assert_eq!(bytes.len(), flags + pairs, "{:?}", words);
                    prop_assert!(!(parsed.presence == Presence::New && parsed.compare != Compare::Always));
                    if let Some(d) = parsed.dead_letter {
                        prop_assert!(bytes[d.key_index - 1].eq_ignore_ascii_case(b"DEAD"));
                        prop_assert!(d.max_attempts >= 1);
                    }
                }
            }
            let _ = parse_retry_request(b"s", b"fixed:1", b"1", &bytes);
            // the key spec's rule finds the parser's dead key in every accepted call
            if let Ok(RetryOptions { dead_letter: Some(dead), .. }) = parse_retry_options(&bytes) {
                prop_assert_eq!(dead_key_index(&bytes), Some(dead.key_index));
            }
        }

        #[test]
        fn canonical_decimals_round_trip(v in any::<u64>(), w in any::<i64>()) {
            prop_assert_eq!(canonical_u64(v.to_string().as_bytes(), u64::MAX), Some(v));
            prop_assert_eq!(canonical_i64(w.to_string().as_bytes()), Some(w));
            let padded = format!("0{v}");
            prop_assert_eq!(canonical_u64(padded.as_bytes(), u64::MAX), None);
        }

    }
}
