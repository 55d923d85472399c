//! The grammar of the module's string configs: `echomq.auto-promote`, key
//! names taken two by two, and `echomq.release-limits`, words taken three by
//! three. No server types, as the rest of the grammar.

use std::collections::HashSet;

use crate::rules::errors::{LimitsError, PairsError};
use crate::rules::grammar::{canonical_u64, quoted};
use crate::rules::limiter::{LimitKind, LimitSpec, Rate, MAX_BURST, MAX_RATE};

/// One `schedule pending` pair of `echomq.auto-promote`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub schedule: Vec<u8>,
    pub pending: Vec<u8>,
}

/// Reads `echomq.auto-promote`: key names separated by whitespace, taken two
/// by two. Refuses what could only be a mistake.
pub fn parse_pairs(text: &[u8]) -> Result<Vec<Pair>, PairsError> {
    let names: Vec<&[u8]> = text
        .split(u8::is_ascii_whitespace)
        .filter(|name| !name.is_empty())
        .collect();
    if !names.len().is_multiple_of(2) {
        return Err(PairsError::OddNames);
    }
    let mut pairs: Vec<Pair> = Vec::with_capacity(names.len() / 2);
    // A set, not a scan: a config of many thousand pairs is read at once.
    let mut seen = HashSet::with_capacity(names.len() / 2);
    for two in names.chunks_exact(2) {
        let (schedule, pending) = (two[0], two[1]);
        if schedule == pending {
            return Err(PairsError::SameKeys);
        }
        if !seen.insert(schedule) {
            return Err(PairsError::ScheduleTwice);
        }
        pairs.push(Pair {
            schedule: schedule.to_vec(),
            pending: pending.to_vec(),
        });
    }
    Ok(pairs)
}

/// A rate of `echomq.release-limits`: `<n>/s`, `<n>/m`, `<n>/h` (`n` in
/// `1..=MAX_RATE`), or `adaptive:` and such a rate, the ceiling. Names and
/// units in any case.
pub fn parse_rate(word: &[u8]) -> Option<Rate> {
    // The first kind whose prefix starts the word (the fixed kind's is empty).
    let (kind, rest) = LimitKind::ALL.into_iter().find_map(|kind| {
        let prefix = kind.prefix().as_bytes();
        word.get(..prefix.len())
            .filter(|start| start.eq_ignore_ascii_case(prefix))
            .map(|_| (kind, &word[prefix.len()..]))
    })?;
    let slash = rest.iter().position(|&b| b == b'/')?;
    let n = canonical_u64(&rest[..slash], MAX_RATE).filter(|&n| n >= 1)?;
    let period_ms = match &rest[slash + 1..] {
        [b's' | b'S'] => 1000,
        [b'm' | b'M'] => 60_000,
        [b'h' | b'H'] => 3_600_000,
        _ => return None,
    };
    Some(Rate { n, period_ms, kind })
}

/// One `rate burst` pair of `echomq.release-limits` (and of
/// `echomq.group-limits` and ECHO.GROUPLIMIT, which then refuse an adaptive
/// rate): the error quotes the word refused.
pub fn parse_rate_and_burst(rate: &[u8], burst: &[u8]) -> Result<(Rate, u64), LimitsError> {
    let parsed = parse_rate(rate).ok_or_else(|| LimitsError::Rate(quoted(rate)))?;
    let burst = canonical_u64(burst, MAX_BURST)
        .filter(|&b| b >= 1)
        .ok_or_else(|| LimitsError::Burst(quoted(burst)))?;
    Ok((parsed, burst))
}

/// Reads `echomq.release-limits`: words separated by whitespace, taken three
/// by three, `schedule rate burst`.
pub fn parse_release_limits(text: &[u8]) -> Result<Vec<LimitSpec>, LimitsError> {
    let words: Vec<&[u8]> = text
        .split(u8::is_ascii_whitespace)
        .filter(|word| !word.is_empty())
        .collect();
    if !words.len().is_multiple_of(3) {
        return Err(LimitsError::WordCount(words.len()));
    }
    let mut specs: Vec<LimitSpec> = Vec::with_capacity(words.len() / 3);
    let mut seen = HashSet::with_capacity(words.len() / 3);
    for three in words.chunks_exact(3) {
        let (schedule, rate, burst) = (three[0], three[1], three[2]);
        let (rate, burst) = parse_rate_and_burst(rate, burst)?;
        if !seen.insert(schedule) {
            return Err(LimitsError::ScheduleTwice(quoted(schedule)));
        }
        specs.push(LimitSpec {
            schedule: schedule.to_vec(),
            rate,
            burst,
        });
    }
    Ok(specs)
}

/// Reads `echomq.group-limits`: the grammar of `echomq.release-limits`,
/// fixed rates only (an adaptive group limit would need a window per group).
pub fn parse_group_limits(text: &[u8]) -> Result<Vec<LimitSpec>, LimitsError> {
    let specs = parse_release_limits(text)?;
    match specs.iter().find(|spec| spec.rate.kind != LimitKind::Fixed) {
        Some(spec) => Err(LimitsError::AdaptiveGroups(quoted(&spec.schedule))),
        None => Ok(specs),
    }
}

/// The kind a test's `adaptive` flag names.
#[cfg(test)]
fn kind(adaptive: bool) -> LimitKind {
    if adaptive {
        LimitKind::Adaptive
    } else {
        LimitKind::Fixed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_limits_are_read_three_by_three() {
        let one = |n, period_ms, adaptive, burst| LimitSpec {
            schedule: b"{a}:s".to_vec(),
            rate: Rate {
                n,
                period_ms,
                kind: kind(adaptive),
            },
            burst,
        };
        assert_eq!(parse_release_limits(b""), Ok(vec![]));
        assert_eq!(
            parse_release_limits(b" {a}:s 500/s 50 "),
            Ok(vec![one(500, 1000, false, 50)])
        );
        assert_eq!(
            parse_release_limits(b"{a}:s 3/M 1"),
            Ok(vec![one(3, 60_000, false, 1)])
        );
        assert_eq!(
            parse_release_limits(b"{a}:s 1000000/h 1000000"),
            Ok(vec![one(1_000_000, 3_600_000, false, 1_000_000)])
        );
        assert_eq!(
            parse_release_limits(b"{a}:s ADAPTIVE:2000/s 100"),
            Ok(vec![one(2000, 1000, true, 100)])
        );
        let two = parse_release_limits(b"{a}:s 1/s 1\n{b}:s adaptive:5/m 2").unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[1].schedule, b"{b}:s");
    }

    #[test]
    fn group_limits_take_fixed_rates_only() {
        assert_eq!(parse_group_limits(b"{a}:s 10/s 2").map(|s| s.len()), Ok(1));
        assert_eq!(
            parse_group_limits(b"{a}:s 10/s 2 \xc4\x80 adaptive:5/m 2"),
            Err(LimitsError::AdaptiveGroups("\\xc4\\x80".to_string()))
        );
        assert_eq!(
            parse_group_limits(b"{a}:s 10/s"),
            Err(LimitsError::WordCount(2))
        );
    }

    #[test]
    fn malformed_release_limits_name_their_fault() {
        use LimitsError::*;
        for (text, want) in [
            (&b"s"[..], WordCount(1)),
            (b"s 1/s", WordCount(2)),
            (b"s 1/s 1 t", WordCount(4)),
            (b"s 0/s 1", Rate("0/s".into())),
            (b"s 1/d 1", Rate("1/d".into())),
            (b"s 01/s 1", Rate("01/s".into())),
            (b"s 1.5/s 1", Rate("1.5/s".into())),
            (b"s -1/s 1", Rate("-1/s".into())),
            (b"s 1000001/s 1", Rate("1000001/s".into())),
            (b"s 1/ 1", Rate("1/".into())),
            (b"s /s 1", Rate("/s".into())),
            (b"s 1/ss 1", Rate("1/ss".into())),
            (b"s 1 1", Rate("1".into())),
            (b"s adaptive: 1", Rate("adaptive:".into())),
            (
                b"s adaptive:adaptive:1/s 1",
                Rate("adaptive:adaptive:1/s".into()),
            ),
            (b"s adaptive 1", Rate("adaptive".into())),
            (b"s 1/s 0", Burst("0".into())),
            (b"s 1/s -1", Burst("-1".into())),
            (b"s 1/s 1000001", Burst("1000001".into())),
            (
                b"s 1/s 99999999999999999999999",
                Burst("99999999999999999999999".into()),
            ),
            (b"s 1/s 01", Burst("01".into())),
            (b"s 1/s 1.0", Burst("1.0".into())),
            (b"s 1/s 1 s 2/s 2", ScheduleTwice("s".into())),
            (b"s 1/s\x00 1", Rate("1/s\\x00".into())),
        ] {
            assert_eq!(
                parse_release_limits(text),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    fn pair(schedule: &str, pending: &str) -> Pair {
        Pair {
            schedule: schedule.into(),
            pending: pending.into(),
        }
    }

    #[test]
    fn pairs_are_read_two_by_two() {
        assert_eq!(parse_pairs(b""), Ok(vec![]));
        assert_eq!(parse_pairs(b"  \t "), Ok(vec![]));
        assert_eq!(
            parse_pairs(b" {a}:s {a}:p\t{b}:s  {b}:p "),
            Ok(vec![pair("{a}:s", "{a}:p"), pair("{b}:s", "{b}:p")])
        );
        // One pending list may be fed by two schedules.
        assert!(parse_pairs(b"s1 p s2 p").is_ok());
        // Any bytes but whitespace make a name.
        assert_eq!(
            parse_pairs(b"%s%n\0 \xff\x01"),
            Ok(vec![Pair {
                schedule: b"%s%n\0".to_vec(),
                pending: b"\xff\x01".to_vec()
            }])
        );
    }

    #[test]
    fn pair_mistakes_are_refused() {
        assert_eq!(parse_pairs(b"s"), Err(PairsError::OddNames));
        assert_eq!(parse_pairs(b"s p t"), Err(PairsError::OddNames));
        assert_eq!(parse_pairs(b"s s"), Err(PairsError::SameKeys));
        assert_eq!(parse_pairs(b"s p s q"), Err(PairsError::ScheduleTwice));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    const CASES: u32 = 4096;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(CASES))]

        #[test]
        fn release_limit_triples_parse_to_what_they_say(
            entries in proptest::collection::vec(
                (1..=MAX_RATE, 0..3usize, any::<bool>(), 1..=MAX_BURST, any::<bool>()),
                0..6,
            ),
            separators in proptest::collection::vec(
                prop_oneof![Just(" "), Just("  "), Just("\t"), Just("\n"), Just(" \r\n ")],
                18..19,
            ),
        ) {
            let mut text = String::new();
            let mut want = Vec::new();
            for (i, &(n, unit, adaptive, burst, upper)) in entries.iter().enumerate() {
                let (letter, period_ms) = [("s", 1000), ("m", 60_000), ("h", 3_600_000)][unit];
                let letter = if upper { letter.to_uppercase() } else { letter.to_string() };
                let prefix = match (adaptive, upper) {
                    (true, true) => "ADAPTIVE:",
                    (true, false) => "adaptive:",
                    _ => "",
                };
                let schedule = format!("{{q{i}}}:schedule");
                for word in [schedule.clone(), format!("{prefix}{n}/{letter}"), burst.to_string()] {
                    text.push_str(&word);
                    text.push_str(separators[i * 3 % 18]);
                }
                want.push(LimitSpec {
                    schedule: schedule.into_bytes(),
                    rate: Rate { n, period_ms, kind: kind(adaptive) },
                    burst,
                });
            }
            prop_assert_eq!(parse_release_limits(text.as_bytes()), Ok(want));
        }

        #[test]
        fn release_limit_noise_parses_or_is_refused_without_panic(
            words in proptest::collection::vec(
                prop_oneof![
                    Just("s".to_string()),
                    Just("adaptive:".to_string()),
                    "[0-9]{0,8}/[smhd]?".prop_map(String::from),
                    "(adaptive:)?[0-9]{1,3}/[smh]".prop_map(String::from),
                    "-?[0-9]{0,22}".prop_map(String::from),
                    any::<String>(),
                ],
                0..10,
            ),
        ) {
            let text = words.join(" ");
            match parse_release_limits(text.as_bytes()) {
                Ok(specs) => {
                    let count = text.split(|c: char| c.is_ascii_whitespace()).filter(|w| !w.is_empty()).count();
                    prop_assert_eq!(specs.len() * 3, count);
                }
                Err(why) => {
                    let message = why.to_string();
                    prop_assert!(message.bytes().all(|b| b == b' ' || b.is_ascii_graphic()), "{}", message);
                }
            }
        }
    }
}
