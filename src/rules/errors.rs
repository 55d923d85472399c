//! Every error text the module replies with, refuses a config with, or logs
//! a failing queue with: each written once, here.

use std::fmt;

use redis_module::RedisError;

use crate::rules::buckets::MAX_SPREAD_BUCKETS;
use crate::rules::fairness::{MAX_GROUPS_COUNT, MAX_GROUP_BYTES};
use crate::rules::limiter::{MAX_BURST, MAX_HOLD_MS, MAX_RATE};
use crate::rules::policy::{MAX_JITTER_LAYERS, MAX_MS};
use crate::rules::recurrence::definition::MAX_ID_BYTES;
use crate::rules::recurrence::{MAX_EVERY_MS, MIN_EVERY_MS};

/// Said by ECHO.PROMOTE and by the auto-promote config alike.
const SAME_KEYS: &str = "schedule and pending must be different keys";

/// A malformed argument. `Display` gives the full error reply, `ERR` code
/// included, so handlers answer in the server's own form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    EmptyPolicy,
    UnknownPolicy(String),
    /// The wrapper named last, as written in lower case.
    MissingInnerPolicy(&'static str),
    MissingField(&'static str),
    ExtraField(&'static str),
    NotInteger(&'static str),
    OutOfRange(&'static str),
    MaxLessThanBase,
    TooDeep,
    Attempts,
    Limit,
    Syntax,
    /// Two options ZADD itself refuses together, named as ZADD names them.
    Conflict(&'static str),
    MaxAttempts,
    /// `MAXATTEMPTS` without `DEAD`, or the reverse: both or neither.
    DeadNeedsBoth,
    SameKey,
    DeadIsSchedule,
    SpreadBound(&'static str),
    SpreadEmptyRange,
    Buckets,
    DelayMs,
    /// ECHO.ADD's `DELAY ms`, which takes what `delay_ms` takes.
    Delay,
    /// `GROUP group` with a name that is empty or too long.
    GroupName,
    /// `GROUP group` on a schedule whose name has no hash tag: the group's
    /// keys could not share its slot.
    GroupNeedsTag,
    HoldMs,
    /// ECHO.GROUPLIMIT's `rate` or `burst`, as `echomq.release-limits`
    /// words it (the refused word quoted and escaped).
    GroupLimit(LimitsError),
    /// ECHO.GROUPLIMIT with an `adaptive:` rate: group limits are fixed.
    GroupLimitAdaptive,
    /// ECHO.GROUPS's `CURSOR`, not one it gave.
    Cursor,
    /// ECHO.GROUPS's `COUNT`.
    Count,
    /// ECHO.REPEAT's `id`, empty or too long.
    RepeatId,
    /// ECHO.REPEAT's `FROM` or `UNTIL`, not an integer.
    RepeatBound(&'static str),
    /// ECHO.REPEAT's `UNTIL` before its `FROM`.
    UntilBeforeFrom,
    /// ECHO.REPEAT's `JITTER`, above the spec's smallest interval (given).
    RepeatJitter(u64),
    /// ECHO.REPEAT of a definition with no occurrence still to come.
    NoOccurrence,
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ArgError::*;
        match self {
            EmptyPolicy => write!(f, "ERR invalid policy: empty"),
            UnknownPolicy(name) => write!(
                f,
                "ERR invalid policy: unknown policy name '{name}' (expected fixed, exponential, jitter or equal-jitter)"
            ),
            MissingInnerPolicy(wrapper) => {
                write!(f, "ERR invalid policy: '{wrapper}' needs an inner policy")
            }
            MissingField(form) => write!(f, "ERR invalid policy: missing field, expected {form}"),
            ExtraField(form) => write!(f, "ERR invalid policy: extra field, expected {form}"),
            NotInteger(field) => write!(
                f,
                "ERR invalid policy: {field} is not a canonical non-negative integer"
            ),
            OutOfRange(field) => write!(
                f,
                "ERR invalid policy: {field} is out of range (0..={MAX_MS} ms)"
            ),
            MaxLessThanBase => write!(f, "ERR invalid policy: max is less than base"),
            TooDeep => write!(
                f,
                "ERR invalid policy: too deeply nested (at most {MAX_JITTER_LAYERS} jitter and equal-jitter layers)"
            ),
            Attempts => write!(
                f,
                "ERR attempts is not an integer or out of range (1..={})",
                i64::MAX
            ),
            Limit => write!(
                f,
                "ERR LIMIT is not an integer or out of range (1..={})",
                i64::MAX
            ),
            Syntax => write!(f, "ERR syntax error"),
            Conflict(which) => write!(
                f,
                "ERR syntax error: {which} options at the same time are not compatible"
            ),
            MaxAttempts => write!(
                f,
                "ERR MAXATTEMPTS is not an integer or out of range (1..={})",
                i64::MAX
            ),
            DeadNeedsBoth => write!(
                f,
                "ERR syntax error: MAXATTEMPTS and DEAD must be given together"
            ),
            SameKey => write!(f, "ERR {SAME_KEYS}"),
            DeadIsSchedule => write!(f, "ERR schedule and dead must be different keys"),
            SpreadBound(name) => write!(f, "ERR {name} is not an integer or out of range"),
            SpreadEmptyRange => write!(f, "ERR end_ms must be greater than start_ms"),
            Buckets => write!(
                f,
                "ERR buckets is not an integer or out of range (1..={MAX_SPREAD_BUCKETS})"
            ),
            DelayMs => write!(
                f,
                "ERR delay_ms is not an integer or out of range (0..={MAX_MS})"
            ),
            Delay => write!(
                f,
                "ERR DELAY is not an integer or out of range (0..={MAX_MS})"
            ),
            GroupName => write!(
                f,
                "ERR group must be 1..={MAX_GROUP_BYTES} bytes"
            ),
            GroupNeedsTag => write!(f, "ERR a grouped schedule needs a {{hash tag}}"),
            HoldMs => write!(
                f,
                "ERR ms is not an integer or out of range (0..={MAX_HOLD_MS})"
            ),
            GroupLimit(why) => write!(f, "ERR {why}"),
            GroupLimitAdaptive => write!(f, "ERR group limits take fixed rates only"),
            Cursor => write!(f, "ERR invalid cursor"),
            Count => write!(
                f,
                "ERR COUNT is not an integer or out of range (1..={MAX_GROUPS_COUNT})"
            ),
            RepeatId => write!(f, "ERR id must be 1..={MAX_ID_BYTES} bytes"),
            RepeatBound(name) => write!(f, "ERR {name} is not an integer or out of range"),
            UntilBeforeFrom => write!(f, "ERR UNTIL must not be before FROM"),
            RepeatJitter(max) => write!(
                f,
                "ERR JITTER is not an integer or out of range (0..={max}, the spec's smallest interval in ms)"
            ),
            NoOccurrence => write!(
                f,
                "ERR the definition has no occurrence still to come (before UNTIL)"
            ),
        }
    }
}

impl From<ArgError> for RedisError {
    fn from(err: ArgError) -> Self {
        RedisError::String(err.to_string())
    }
}

/// A failure after the arguments were read. The texts are the server's own
/// where a native command has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// XADD's words for a stream whose IDs have run out.
    StreamFull,
    /// The low-level ZsetAdd refused a write the type checks allowed.
    ZsetAdd,
    /// A range count inside ECHO.SPREAD answered something else.
    ZcountReply,
    /// ECHO.HOLD in a cluster of a schedule whose hold key cannot share its
    /// slot (a `}` in a name without a hash tag).
    HoldNeedsTag,
    /// A new hold (ECHO.HOLD, of the queue or of a group) of what has no
    /// members, or a new ECHO.GROUPLIMIT override, while used memory is over
    /// maxmemory (the server's own words for that refusal).
    NewKeyOutOfMemory,
    /// ECHO.REPEAT in a cluster of a schedule whose definitions hash cannot
    /// share its slot (as `HoldNeedsTag`).
    RepeatNeedsTag,
}

impl ReplyError {
    pub const fn text(self) -> &'static str {
        match self {
            ReplyError::StreamFull => {
                "ERR The stream has exhausted the last possible ID, unable to add more items"
            }
            ReplyError::ZsetAdd => "ERR could not add to the sorted set",
            ReplyError::ZcountReply => "ERR unexpected ZCOUNT reply",
            ReplyError::HoldNeedsTag => {
                "ERR a schedule held in a cluster needs a {hash tag} when its name holds a '}'"
            }
            ReplyError::RepeatNeedsTag => {
                "ERR a schedule with recurring jobs in a cluster needs a {hash tag} when its name holds a '}'"
            }
            ReplyError::NewKeyOutOfMemory => {
                "OOM command not allowed when used memory > 'maxmemory'."
            }
        }
    }
}

impl From<ReplyError> for RedisError {
    fn from(err: ReplyError) -> Self {
        RedisError::Str(err.text())
    }
}

/// Why CONFIG SET refuses a value of `echomq.auto-promote` (the server puts
/// it after its own `ERR CONFIG SET failed ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairsError {
    OddNames,
    SameKeys,
    ScheduleTwice,
}

impl PairsError {
    pub const fn text(self) -> &'static str {
        match self {
            PairsError::OddNames => "odd number of key names: give schedule pending pairs",
            PairsError::SameKeys => SAME_KEYS,
            PairsError::ScheduleTwice => "a schedule is named twice",
        }
    }
}

/// Why CONFIG SET refuses a value of `echomq.release-limits`; the words a
/// client gave are quoted and escaped by the parser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimitsError {
    WordCount(usize),
    Rate(String),
    Burst(String),
    ScheduleTwice(String),
    /// `echomq.group-limits` takes fixed rates only.
    AdaptiveGroups(String),
}

impl fmt::Display for LimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitsError::WordCount(n) => write!(
                f,
                "{n} words: give schedule rate burst triples (a multiple of three)"
            ),
            LimitsError::Rate(word) => write!(
                f,
                "rate '{word}' is not <n>/s, <n>/m or <n>/h with n in 1..={MAX_RATE}, or adaptive:<rate>"
            ),
            LimitsError::Burst(word) => {
                write!(f, "burst '{word}' is not an integer in 1..={MAX_BURST}")
            }
            LimitsError::ScheduleTwice(word) => write!(f, "schedule '{word}' is named twice"),
            LimitsError::AdaptiveGroups(word) => {
                write!(f, "schedule '{word}': group limits take fixed rates only")
            }
        }
    }
}

/// Why a recurring definition's `spec` or `TZ` is refused. The client's
/// words are quoted and escaped by the parser before they land here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    Empty,
    /// Neither `every:` nor `cron:` in front.
    UnknownKind(String),
    EveryNotInteger,
    EveryOutOfRange,
    /// How many fields a `cron:` spec had instead of five.
    FieldCount(usize),
    UnknownShortcut(String),
    /// One item of a cron field, named with the field.
    Field {
        field: &'static str,
        item: String,
        fault: FieldFault,
    },
    /// Days combined by AND (one of the two day fields starts with `*`) whose
    /// day-of-month exists in none of its months: `0 0 30 2 *`.
    NeverDue,
    UnknownZone(String),
}

/// What is wrong with one item of a cron field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldFault {
    Empty,
    NotValue,
    OutOfRange { min: u8, max: u8 },
    Step { max: u8 },
    Reversed,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Empty => write!(f, "ERR invalid spec: empty"),
            SpecError::UnknownKind(word) => write!(
                f,
                "ERR invalid spec: '{word}' is neither every:<ms> nor cron:<fields>"
            ),
            SpecError::EveryNotInteger => write!(
                f,
                "ERR invalid spec: every:<ms> is not a canonical non-negative integer"
            ),
            SpecError::EveryOutOfRange => write!(
                f,
                "ERR invalid spec: every:<ms> is out of range ({MIN_EVERY_MS}..={MAX_EVERY_MS} ms)"
            ),
            SpecError::FieldCount(n) => write!(
                f,
                "ERR invalid spec: cron needs 5 fields (minute hour day-of-month month day-of-week), got {n}"
            ),
            SpecError::UnknownShortcut(word) => write!(
                f,
                "ERR invalid spec: unknown shortcut '{word}' (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"
            ),
            SpecError::Field { field, item, fault } => {
                write!(f, "ERR invalid spec: cron {field} '{item}' ")?;
                match fault {
                    FieldFault::Empty => write!(f, "is empty"),
                    FieldFault::NotValue => write!(f, "is not a number or name"),
                    FieldFault::OutOfRange { min, max } => {
                        write!(f, "is out of range ({min}..={max})")
                    }
                    FieldFault::Step { max } => write!(f, "has a step out of range (1..={max})"),
                    FieldFault::Reversed => write!(f, "is a range whose start is after its end"),
                }
            }
            SpecError::NeverDue => write!(
                f,
                "ERR invalid spec: the day-of-month exists in none of its months"
            ),
            SpecError::UnknownZone(word) => write!(f, "ERR invalid TZ: unknown time zone '{word}'"),
        }
    }
}

impl From<SpecError> for RedisError {
    fn from(err: SpecError) -> Self {
        RedisError::String(err.to_string())
    }
}

/// Why the auto-promote timer skips a pair, in its log line.
pub const PAIR_CROSSSLOT: &str = "CROSSSLOT the two keys hash to different slots";
pub const PAIR_WRONGTYPE: &str =
    "WRONGTYPE the schedule is not a sorted set or pending neither a list nor a stream";
pub const PAIR_FAILED: &str = "ERR the move failed";

/// An error text as the SDK can send it: printable ASCII and spaces kept,
/// every other byte (controls, NUL, and each byte of a non-ASCII character)
/// as `\xNN`. The SDK converts an error text to a C string by casting each
/// character to one byte, so anything else could turn into a NUL and panic.
pub fn printable(text: &str) -> String {
    if text.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b == b' ' || b.is_ascii_graphic() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_texts_become_printable_ascii() {
        assert_eq!(printable("ERR plain text"), "ERR plain text");
        assert_eq!(printable("ERR a\0b\r\n"), "ERR a\\x00b\\x0d\\x0a");
        // U+0100 cast to a byte is NUL: it must never reach the SDK as is.
        assert_eq!(printable("ERR \u{100}"), "ERR \\xc4\\x80");
        assert!(printable("ERR \u{e9}%s")
            .bytes()
            .all(|b| b.is_ascii_graphic() || b == b' '));
    }

    #[test]
    fn the_shared_text_is_written_once() {
        assert_eq!(
            ArgError::SameKey.to_string(),
            format!("ERR {}", PairsError::SameKeys.text())
        );
    }
}
