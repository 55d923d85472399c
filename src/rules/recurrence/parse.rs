//! The spec grammar of a recurring definition and its `TZ` (the parent
//! module states it), refused in the server's words: a spec becomes its bit
//! sets here, once, and the search reads only those.

pub use crate::rules::errors::{FieldFault, SpecError};
use crate::rules::grammar::{canonical_u64, quoted};
use crate::rules::recurrence::{Cron, Spec, Zone, MAX_EVERY_MS, MIN_EVERY_MS};
use jiff::tz::TimeZone;

/// Parses `TZ zone`: an IANA name of the bundled database, in any case.
pub fn parse_zone(input: &[u8]) -> Result<Zone, SpecError> {
    let unknown = || SpecError::UnknownZone(quoted(input));
    let name = std::str::from_utf8(input).map_err(|_| unknown())?;
    // `Etc/Unknown` is the database's marker for "no zone", not a zone.
    if name.is_empty() || name.eq_ignore_ascii_case("Etc/Unknown") {
        return Err(unknown());
    }
    let tz = TimeZone::get(name).map_err(|_| unknown())?;
    Ok(Zone { tz })
}

/// Parses a spec (see the module's grammar).
pub fn parse_spec(input: &[u8]) -> Result<Spec, SpecError> {
    if input.is_empty() {
        return Err(SpecError::Empty);
    }
    let colon = input.iter().position(|&b| b == b':');
    let (kind, rest) = match colon {
        Some(at) => (&input[..at], &input[at + 1..]),
        None => return Err(SpecError::UnknownKind(quoted(input))),
    };
    if kind.eq_ignore_ascii_case(b"every") {
        parse_every(rest)
    } else if kind.eq_ignore_ascii_case(b"cron") {
        parse_cron(rest).map(Spec::Cron)
    } else {
        Err(SpecError::UnknownKind(quoted(input)))
    }
}

fn parse_every(digits: &[u8]) -> Result<Spec, SpecError> {
    let well_formed = digits
        .first()
        .is_some_and(|&b| b != b'0' || digits.len() == 1)
        && digits.iter().all(u8::is_ascii_digit);
    if !well_formed {
        return Err(SpecError::EveryNotInteger);
    }
    match canonical_u64(digits, MAX_EVERY_MS) {
        Some(interval_ms) if interval_ms >= MIN_EVERY_MS => Ok(Spec::Every { interval_ms }),
        _ => Err(SpecError::EveryOutOfRange),
    }
}

struct FieldDef {
    name: &'static str,
    min: u8,
    max: u8,
    max_step: u8,
    /// Names for `min + i`, three letters each.
    names: &'static [&'static [u8; 3]],
}

const MINUTE: FieldDef = FieldDef {
    name: "minute",
    min: 0,
    max: 59,
    max_step: 60,
    names: &[],
};
const HOUR: FieldDef = FieldDef {
    name: "hour",
    min: 0,
    max: 23,
    max_step: 24,
    names: &[],
};
const DAY: FieldDef = FieldDef {
    name: "day-of-month",
    min: 1,
    max: 31,
    max_step: 31,
    names: &[],
};
const MONTH: FieldDef = FieldDef {
    name: "month",
    min: 1,
    max: 12,
    max_step: 12,
    names: &[
        b"jan", b"feb", b"mar", b"apr", b"may", b"jun", b"jul", b"aug", b"sep", b"oct", b"nov",
        b"dec",
    ],
};
const WEEKDAY: FieldDef = FieldDef {
    name: "day-of-week",
    min: 0,
    max: 7,
    max_step: 7,
    names: &[b"sun", b"mon", b"tue", b"wed", b"thu", b"fri", b"sat"],
};

fn parse_cron(text: &[u8]) -> Result<Cron, SpecError> {
    let mut fields: [&[u8]; 5] = [&[]; 5];
    let mut count = 0usize;
    for field in text
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|f| !f.is_empty())
    {
        if let Some(slot) = fields.get_mut(count) {
            *slot = field;
        }
        count = count.saturating_add(1);
    }
    if count == 1 && fields[0].first() == Some(&b'@') {
        return shortcut(fields[0]);
    }
    if count != 5 {
        return Err(SpecError::FieldCount(count));
    }
    let [minute, hour, day, month, weekday] = fields;
    let starts_with_star = |field: &[u8]| field.first() == Some(&b'*');
    let minutes = parse_field(&MINUTE, minute)?;
    let hours = parse_field(&HOUR, hour)?;
    let days = parse_field(&DAY, day)?;
    let months = parse_field(&MONTH, month)?;
    let weekdays = parse_field(&WEEKDAY, weekday)?;
    // 7 is Sunday too.
    let weekdays = (weekdays | weekdays >> 7) & 0x7f;
    let cron = Cron {
        minutes,
        hours: u32::try_from(hours).unwrap_or(u32::MAX),
        days: u32::try_from(days).unwrap_or(u32::MAX),
        months: u16::try_from(months).unwrap_or(u16::MAX),
        weekdays: u8::try_from(weekdays).unwrap_or(u8::MAX),
        either_day: !starts_with_star(day) && !starts_with_star(weekday),
        each_pass: starts_with_star(minute) || starts_with_star(hour),
    };
    if !cron.either_day && !cron.some_day_exists() {
        return Err(SpecError::NeverDue);
    }
    Ok(cron)
}

fn shortcut(word: &[u8]) -> Result<Cron, SpecError> {
    let fields: &[u8] = match word.get(1..) {
        Some(name) if name.eq_ignore_ascii_case(b"yearly") => b"0 0 1 1 *",
        Some(name) if name.eq_ignore_ascii_case(b"annually") => b"0 0 1 1 *",
        Some(name) if name.eq_ignore_ascii_case(b"monthly") => b"0 0 1 * *",
        Some(name) if name.eq_ignore_ascii_case(b"weekly") => b"0 0 * * 0",
        Some(name) if name.eq_ignore_ascii_case(b"daily") => b"0 0 * * *",
        Some(name) if name.eq_ignore_ascii_case(b"midnight") => b"0 0 * * *",
        Some(name) if name.eq_ignore_ascii_case(b"hourly") => b"0 * * * *",
        _ => return Err(SpecError::UnknownShortcut(quoted(word))),
    };
    parse_cron(fields)
}

/// One field as a bit set of its values.
fn parse_field(def: &FieldDef, field: &[u8]) -> Result<u64, SpecError> {
    let mut bits = 0u64;
    for item in field.split(|&b| b == b',') {
        let fault = |fault| SpecError::Field {
            field: def.name,
            item: quoted(item),
            fault,
        };
        if item.is_empty() {
            return Err(fault(FieldFault::Empty));
        }
        let (range, step) = match item.iter().position(|&b| b == b'/') {
            Some(at) => (&item[..at], Some(&item[at + 1..])),
            None => (item, None),
        };
        let stepped = step.is_some();
        let step = match step {
            None => 1,
            Some(digits) => {
                let n = small_number(digits).ok_or(fault(FieldFault::NotValue))?;
                if n == 0 || n > u32::from(def.max_step) {
                    return Err(fault(FieldFault::Step { max: def.max_step }));
                }
                n
            }
        };
        let value = |word: &[u8]| parse_value(def, word).map_err(fault);
        let (low, high) = if range == b"*" {
            (u32::from(def.min), u32::from(def.max))
        } else if let Some(at) = range.iter().position(|&b| b == b'-') {
            (value(&range[..at])?, value(&range[at + 1..])?)
        } else {
            let low = value(range)?;
            // `5/15` runs to the end of the field, as `5-59/15`.
            let high = if stepped { u32::from(def.max) } else { low };
            (low, high)
        };
        if low > high {
            return Err(fault(FieldFault::Reversed));
        }
        let mut v = low;
        while v <= high {
            bits |= 1u64 << v;
            v = v.saturating_add(step);
        }
    }
    Ok(bits)
}

/// A number or a name of the field, in its range.
fn parse_value(def: &FieldDef, word: &[u8]) -> Result<u32, FieldFault> {
    let n = match small_number(word) {
        Some(n) => n,
        None => {
            let index = def
                .names
                .iter()
                .position(|name| word.eq_ignore_ascii_case(&name[..]))
                .ok_or(FieldFault::NotValue)?;
            return Ok(u32::from(def.min).saturating_add(u32::try_from(index).unwrap_or(u32::MAX)));
        }
    };
    if n < u32::from(def.min) || n > u32::from(def.max) {
        return Err(FieldFault::OutOfRange {
            min: def.min,
            max: def.max,
        });
    }
    Ok(n)
}

/// Decimal digits (leading zeros allowed), saturating far above any field.
fn small_number(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u32, |n, &b| {
        n.saturating_mul(10).saturating_add(u32::from(b - b'0'))
    }))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A cron spec that must parse (shared with the search's tests).
    pub fn cron(text: &str) -> Cron {
        match parse_spec(format!("cron:{text}").as_bytes()) {
            Ok(Spec::Cron(cron)) => cron,
            other => panic!("{text}: {other:?}"),
        }
    }

    pub fn zone(name: &str) -> Zone {
        parse_zone(name.as_bytes()).expect(name)
    }

    fn err(spec: &str) -> String {
        parse_spec(spec.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn shortcuts_are_their_fields() {
        for (word, fields) in [
            ("@yearly", "0 0 1 1 *"),
            ("@annually", "0 0 1 1 *"),
            ("@monthly", "0 0 1 * *"),
            ("@weekly", "0 0 * * 0"),
            ("@daily", "0 0 * * *"),
            ("@midnight", "0 0 * * *"),
            ("@hourly", "0 * * * *"),
            ("@HOURLY", "0 * * * *"),
        ] {
            assert_eq!(cron(word), cron(fields), "{word}");
        }
    }

    #[test]
    fn names_steps_ranges_and_lists() {
        assert_eq!(cron("0 0 * JAN-mar SUN,sat"), cron("0 0 * 1-3 0,6"));
        assert_eq!(cron("0 0 * * 7"), cron("0 0 * * 0"));
        assert_eq!(cron("0 0 * * 5-7"), cron("0 0 * * 0,5,6"));
        assert_eq!(
            cron("*/7 * * * *").minutes,
            (0..60).step_by(7).fold(0, |b, v| b | 1 << v)
        );
        assert_eq!(
            cron("10-40/5 * * * *"),
            cron("10,15,20,25,30,35,40 * * * *")
        );
        assert_eq!(cron("5/15 * * * *"), cron("5,20,35,50 * * * *"));
        assert_eq!(cron("05 00 * * *"), cron("5 0 * * *"));
        assert_eq!(cron("\t0  0 * *\t*  "), cron("0 0 * * *"));
        assert!(cron("0 0 1 * MON").either_day);
        assert!(!cron("0 0 */2 * MON").either_day);
        assert!(cron("*/5 3 * * *").each_pass);
        assert!(cron("0 * * * *").each_pass);
        assert!(!cron("0-59 0-23 * * *").each_pass);
        assert!(parse_spec(b"CRON:0 0 * * *").is_ok());
        assert_eq!(
            parse_spec(b"Every:60000"),
            Ok(Spec::Every {
                interval_ms: 60_000
            })
        );
    }

    #[test]
    fn malformed_specs_are_refused_in_the_servers_words() {
        let cases = [
            ("", "ERR invalid spec: empty"),
            ("0 * * * *", "ERR invalid spec: '0 * * * *' is neither every:<ms> nor cron:<fields>"),
            ("daily:1", "ERR invalid spec: 'daily:1' is neither every:<ms> nor cron:<fields>"),
            ("every:", "ERR invalid spec: every:<ms> is not a canonical non-negative integer"),
            ("every:-1000", "ERR invalid spec: every:<ms> is not a canonical non-negative integer"),
            ("every:01000", "ERR invalid spec: every:<ms> is not a canonical non-negative integer"),
            ("every:1e3", "ERR invalid spec: every:<ms> is not a canonical non-negative integer"),
            ("every:999", "ERR invalid spec: every:<ms> is out of range (1000..=10000000000000 ms)"),
            ("every:0", "ERR invalid spec: every:<ms> is out of range (1000..=10000000000000 ms)"),
            ("every:10000000000001", "ERR invalid spec: every:<ms> is out of range (1000..=10000000000000 ms)"),
            ("every:99999999999999999999999", "ERR invalid spec: every:<ms> is out of range (1000..=10000000000000 ms)"),
            ("cron:", "ERR invalid spec: cron needs 5 fields (minute hour day-of-month month day-of-week), got 0"),
            ("cron:* * * *", "ERR invalid spec: cron needs 5 fields (minute hour day-of-month month day-of-week), got 4"),
            ("cron:* * * * * *", "ERR invalid spec: cron needs 5 fields (minute hour day-of-month month day-of-week), got 6"),
            ("cron:@hourly *", "ERR invalid spec: cron needs 5 fields (minute hour day-of-month month day-of-week), got 2"),
            ("cron:@reboot", "ERR invalid spec: unknown shortcut '@reboot' (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"),
            ("cron:@", "ERR invalid spec: unknown shortcut '@' (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"),
            ("cron:60 * * * *", "ERR invalid spec: cron minute '60' is out of range (0..=59)"),
            ("cron:* 24 * * *", "ERR invalid spec: cron hour '24' is out of range (0..=23)"),
            ("cron:* * 0 * *", "ERR invalid spec: cron day-of-month '0' is out of range (1..=31)"),
            ("cron:* * 32 * *", "ERR invalid spec: cron day-of-month '32' is out of range (1..=31)"),
            ("cron:* * * 13 *", "ERR invalid spec: cron month '13' is out of range (1..=12)"),
            ("cron:* * * * 8", "ERR invalid spec: cron day-of-week '8' is out of range (0..=7)"),
            ("cron:* * * JANUARY *", "ERR invalid spec: cron month 'JANUARY' is not a number or name"),
            ("cron:* * * * MON-", "ERR invalid spec: cron day-of-week 'MON-' is not a number or name"),
            ("cron:* * * * FRI-MON", "ERR invalid spec: cron day-of-week 'FRI-MON' is a range whose start is after its end"),
            ("cron:MON * * * *", "ERR invalid spec: cron minute 'MON' is not a number or name"),
            ("cron:*/0 * * * *", "ERR invalid spec: cron minute '*/0' has a step out of range (1..=60)"),
            ("cron:*/61 * * * *", "ERR invalid spec: cron minute '*/61' has a step out of range (1..=60)"),
            ("cron:*/x * * * *", "ERR invalid spec: cron minute '*/x' is not a number or name"),
            ("cron:*/ * * * *", "ERR invalid spec: cron minute '*/' is not a number or name"),
            ("cron:1,,2 * * * *", "ERR invalid spec: cron minute '' is empty"),
            ("cron:1, * * * *", "ERR invalid spec: cron minute '' is empty"),
            ("cron:-5 * * * *", "ERR invalid spec: cron minute '-5' is not a number or name"),
            ("cron:1-2-3 * * * *", "ERR invalid spec: cron minute '1-2-3' is not a number or name"),
            ("cron:? * * * *", "ERR invalid spec: cron minute '?' is not a number or name"),
            ("cron:40-10 * * * *", "ERR invalid spec: cron minute '40-10' is a range whose start is after its end"),
            ("cron:0 0 30 2 *", "ERR invalid spec: the day-of-month exists in none of its months"),
            ("cron:0 0 31 4,6,9,11 *", "ERR invalid spec: the day-of-month exists in none of its months"),
            ("cron:0 0 30-31 FEB */2", "ERR invalid spec: the day-of-month exists in none of its months"),
        ];
        for (spec, want) in cases {
            assert_eq!(err(spec), want, "{spec:?}");
        }
        assert!(parse_spec(b"cron:0 0 31 JAN,2 *").is_ok());
        assert_eq!(
            err("cron:*/5/2 * * * *"),
            "ERR invalid spec: cron minute '*/5/2' is not a number or name"
        );
        assert_eq!(
            err("@hourly"),
            "ERR invalid spec: '@hourly' is neither every:<ms> nor cron:<fields>"
        );
        // Only the day-of-week saves a date that never exists: the OR rule.
        assert!(parse_spec(b"cron:0 0 30 2 MON").is_ok());
        assert!(parse_spec(b"cron:0 0 29 2 *").is_ok());
        // A client's bytes come back quoted and cut.
        assert_eq!(
            err("cron:\u{0}\r\n * * * *"),
            "ERR invalid spec: cron minute '\\x00\\x0d\\x0a' is not a number or name"
        );
        assert!(err(&format!("x{}", "a".repeat(100))).contains("aaa...'"));
    }

    #[test]
    fn zones_come_from_the_bundled_database() {
        assert_eq!(zone("Europe/Berlin").name(), "Europe/Berlin");
        assert_eq!(zone("europe/berlin").name(), "Europe/Berlin");
        assert_eq!(zone("UTC").name(), "UTC");
        for bad in [
            "",
            "Mars/Olympus",
            "Etc/Unknown",
            "../../../etc/passwd",
            "+01:00",
            "Europe/Berlin\0",
        ] {
            assert_eq!(
                parse_zone(bad.as_bytes()).unwrap_err(),
                SpecError::UnknownZone(quoted(bad.as_bytes())),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_zone(b"\xff").unwrap_err().to_string(),
            "ERR invalid TZ: unknown time zone '\\xff'"
        );
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_spec(&bytes);
            let _ = parse_zone(&bytes);
            let mut cron_bytes = b"cron:".to_vec();
            cron_bytes.extend_from_slice(&bytes);
            if let Ok(spec) = parse_spec(&cron_bytes) {
                let _ = spec.next_after(&Zone::utc(), 0, 0);
                let _ = spec.smallest_interval_ms();
            }
        }

        #[test]
        fn cron_shaped_text_never_panics(
            text in "[0-9*/,\\- \tA-Za-z@]{0,40}",
            zone_text in "[A-Za-z_/+\\-0-9.]{0,30}",
            after_ms in any::<i64>(),
        ) {
            let zone = parse_zone(zone_text.as_bytes()).unwrap_or_else(|_| Zone::utc());
            if let Ok(spec) = parse_spec(format!("cron:{text}").as_bytes()) {
                if let Some(next_ms) = spec.next_after(&zone, 0, after_ms) {
                    prop_assert!(next_ms > after_ms);
                }
            }
        }
    }
}
