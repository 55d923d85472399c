//! Recurring schedules: the spec grammar of a recurring definition and its
//! next occurrence strictly after a given instant. Pure: the instant comes in
//! as an argument (ms since the Unix epoch), and the zone database is the
//! copy of the IANA database bundled into the module (through `jiff`), so no
//! file is read from inside the server and nothing depends on the host's
//! tzdata.
//!
//! # Grammar
//!
//! ```text
//! spec     = every | cron                      (kind names in any case)
//! every    = "every:" ms                       ms canonical, 1000..=10^13
//! cron     = "cron:" ( shortcut | fields )
//! shortcut = @yearly | @annually | @monthly | @weekly | @daily | @midnight | @hourly
//! fields   = minute hour day-of-month month day-of-week   (spaces or tabs between)
//! field    = item ( "," item )*
//! item     = ( "*" | value | value "-" value ) [ "/" step ]
//! ```
//!
//! | field        | values | names            | step     |
//! |--------------|--------|------------------|----------|
//! | minute       | 0-59   |                  | 1..=60   |
//! | hour         | 0-23   |                  | 1..=24   |
//! | day-of-month | 1-31   |                  | 1..=31   |
//! | month        | 1-12   | JAN-DEC          | 1..=12   |
//! | day-of-week  | 0-7    | SUN-SAT (0, 7 Sunday) | 1..=7 |
//!
//! Names take any case and stand wherever a number may, ranges included
//! (`MON-FRI`). `value/step` alone runs from `value` to the field's end
//! (`5/15` is `5-59/15`). A range must not run backwards (`FRI-MON` is
//! refused). Leading zeros are taken (`05`), as crontabs write them.
//! `@yearly` and `@annually` are `0 0 1 1 *`, `@monthly` `0 0 1 * *`,
//! `@weekly` `0 0 * * 0`, `@daily` and `@midnight` `0 0 * * *`, `@hourly`
//! `0 * * * *`.
//!
//! # Semantics
//!
//! - `every:<ms>`: the occurrences are `anchor + k·ms` for `k >= 0`; the
//!   next one after `t` is the smallest of them greater than `t`. The zone
//!   plays no part.
//! - `cron:`: the occurrences are the instants whose wall-clock time in the
//!   zone, at a whole minute, matches every field (when the clocks change,
//!   see below). The days combine as in
//!   Vixie cron: when both day-of-month and day-of-week are restricted
//!   (neither field starts with `*`), a day matches when *either* matches
//!   (`0 0 1 * MON` is every 1st and every Monday); when one starts with `*`
//!   (even `*/2`), a day matches when *both* match.
//! - A spec whose days are combined by AND and whose day-of-month exists in
//!   none of its months (`0 0 30 2 *`, `0 0 31 4,6,9,11 *`) never fires: it
//!   is refused at parse time, so every accepted spec has an occurrence at
//!   most about 400 years after any instant (the Gregorian cycle), and the
//!   search is bounded by that.
//!
//! # Daylight saving and other offset changes
//!
//! As Vixie cron does, a spec is one of two kinds:
//!
//! - *Fixed-time* (both the minute and the hour field name values, such as
//!   `30 2 * * *` or `0 9,17 * * MON-FRI`): each of its wall-clock times
//!   fires once on each day it matches. A time that does not exist (the
//!   clocks jump forward over it) is skipped to the next wall-clock time that
//!   does, the first instant after the jump: `30 2 * * *` in Europe/Berlin
//!   fires at 03:00 on the last Sunday of March, and several of its times
//!   inside one jump fire once there. A time that happens twice (the clocks
//!   go back over it) fires at its first instant only.
//! - *Running through the hours* (the minute or the hour field starts with
//!   `*`, such as `0 * * * *` or `*/15 * * * *`): it follows real time. A
//!   wall-clock time that does not exist never happens, so it is skipped;
//!   one that happens twice fires in both passes, so an hourly job keeps one
//!   occurrence per real hour instead of a two-hour hole.
//!
//! # Cost
//!
//! The search jumps field by field (a month not in the spec is skipped
//! whole, then days, hours, minutes), so `0 0 29 2 *` finds the next leap
//! day after a look at one February a year, at most eight of them. The
//! zone is walked from one offset change to the next; the field search is
//! remembered across them, so years of daylight-saving changes cost one
//! lookup each.

pub mod definition;
pub mod parse;

use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;

/// Bounds of `every:<ms>`: at least a second, at most 10^13 ms (about 317
/// years), the bound every other millisecond argument has.
pub const MIN_EVERY_MS: u64 = 1000;
pub const MAX_EVERY_MS: u64 = 10_000_000_000_000;

const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;

/// The Gregorian calendar repeats every 400 years, weekdays included: a
/// day rule that matches at all matches within this many years of any day.
const SEARCH_YEARS: i32 = 401;

/// The last civil year the zone arithmetic covers.
const LAST_YEAR: i32 = 9999;

/// Offset changes walked in one search: about two a year over the
/// Gregorian cycle, with room to spare. Never reached by an accepted spec
/// in a real zone; it only bounds the loop.
const MAX_SEGMENTS: u32 = 4096;

/// A parsed recurring spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// `every:<ms>`.
    Every { interval_ms: u64 },
    /// `cron:...`, as sets of allowed values.
    Cron(Cron),
}

/// The five cron fields as bit sets (bit `v` set when value `v` matches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    /// Bit 0 is Sunday; a 7 in the spec is folded into it.
    weekdays: u8,
    /// Vixie's rule: day-of-month OR day-of-week when neither starts with
    /// `*`, AND otherwise.
    either_day: bool,
    /// The minute or hour field starts with `*`: the spec runs through the
    /// hours, following real time (both passes of a repeated hour, nothing
    /// for a skipped one); otherwise it is fixed-time.
    each_pass: bool,
}

/// A time zone from the bundled IANA database.
#[derive(Clone, Debug)]
pub struct Zone {
    tz: TimeZone,
}

impl Zone {
    /// The default zone of a definition without `TZ`.
    pub fn utc() -> Zone {
        Zone { tz: TimeZone::UTC }
    }

    /// The database's own spelling of the zone's name (`europe/berlin`
    /// gives `Europe/Berlin`).
    pub fn name(&self) -> &str {
        self.tz.iana_name().unwrap_or("UTC")
    }

    fn offset_ms(&self, at: Timestamp) -> i64 {
        i64::from(self.tz.to_offset(at).seconds()) * 1000
    }

    /// The first instant after `at` at which the offset changes.
    fn next_change_ms(&self, at: Timestamp) -> Option<i64> {
        let at_ms = at.as_millisecond();
        self.tz
            .following(at)
            .map(|change| change.timestamp().as_millisecond())
            .find(|&change_ms| change_ms > at_ms)
    }

    /// When the offset grows at `change_ms` (the clocks go forward), the
    /// wall-clock times it skips, `[change + old offset, change + new
    /// offset)`, in civil ms.
    fn gap_ms(&self, change_ms: i64) -> Option<(i64, i64)> {
        let change = Timestamp::from_millisecond(change_ms).ok()?;
        let before = Timestamp::from_millisecond(change_ms.checked_sub(1)?).ok()?;
        let (old_ms, new_ms) = (self.offset_ms(before), self.offset_ms(change));
        if new_ms <= old_ms {
            return None;
        }
        Some((
            change_ms.checked_add(old_ms)?,
            change_ms.checked_add(new_ms)?,
        ))
    }

    /// The earliest instant whose wall-clock time is `civil_ms` (a civil
    /// time counted in ms as if it were UTC), `None` when it does not exist.
    fn first_instant_ms(&self, civil_ms: i64) -> Option<i64> {
        let (year, month, day) = civil_from_days(civil_ms.div_euclid(DAY_MS));
        let minute_of_day = civil_ms.rem_euclid(DAY_MS) / MINUTE_MS;
        let civil = jiff::civil::DateTime::new(
            i16::try_from(year).ok()?,
            i8::try_from(month).ok()?,
            i8::try_from(day).ok()?,
            i8::try_from(minute_of_day / 60).ok()?,
            i8::try_from(minute_of_day % 60).ok()?,
            0,
            0,
        )
        .ok()?;
        let offset_s = match self.tz.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => offset.seconds(),
            AmbiguousOffset::Gap { .. } => return None,
            // The earlier instant has the larger offset.
            AmbiguousOffset::Fold { before, after } => before.seconds().max(after.seconds()),
        };
        civil_ms.checked_sub(i64::from(offset_s) * 1000)
    }
}

impl Spec {
    /// The first occurrence strictly after `after_ms`. `anchor_ms` is the
    /// first occurrence of `every:` (the creation time or `FROM`); cron
    /// ignores it. `None` only past the calendar's end (year 9999) or when
    /// the arithmetic would leave `i64`.
    pub fn next_after(&self, zone: &Zone, anchor_ms: i64, after_ms: i64) -> Option<i64> {
        match self {
            Spec::Every { interval_ms } => next_every(*interval_ms, anchor_ms, after_ms),
            Spec::Cron(cron) => cron.next_after(zone, after_ms),
        }
    }

    /// The shortest time between two consecutive occurrences as the spec
    /// writes them (wall-clock time, before any offset change), the bound
    /// of `JITTER`: `every:`'s interval, and for cron the closest two
    /// matching minutes anywhere in the 400-year cycle (`*/7 * * * *` gives
    /// 4 minutes, from :56 to :00; `@monthly` 28 days; `0 0 29 2 *` four
    /// years). A clock change can bring two occurrences closer in real time
    /// (`59 1 * * *` and `0 3 * * *` one minute apart the night the clocks
    /// go forward); that is not counted.
    pub fn smallest_interval_ms(&self) -> u64 {
        match self {
            Spec::Every { interval_ms } => *interval_ms,
            Spec::Cron(cron) => cron
                .smallest_interval_minutes()
                .saturating_mul(MINUTE_MS as u64),
        }
    }
}

fn next_every(interval_ms: u64, anchor_ms: i64, after_ms: i64) -> Option<i64> {
    if after_ms < anchor_ms {
        return Some(anchor_ms);
    }
    let interval = i128::from(interval_ms.max(1));
    let elapsed = i128::from(after_ms) - i128::from(anchor_ms);
    let next = i128::from(anchor_ms) + (elapsed / interval + 1) * interval;
    i64::try_from(next).ok()
}

/// The memo of the field search across offset changes: the first civil
/// match at or after `from_ms` is `found_ms`, so any query between the two
/// has the same answer.
#[derive(Clone, Copy)]
struct Found {
    from_ms: i64,
    found_ms: i64,
}

impl Cron {
    /// See [`Spec::next_after`].
    pub fn next_after(&self, zone: &Zone, after_ms: i64) -> Option<i64> {
        let mut cursor_ms = after_ms.checked_add(1)?;
        let mut memo: Option<Found> = None;
        if self.fires_at_change(zone, &mut memo, cursor_ms)? {
            return Some(cursor_ms);
        }
        // Each round covers one stretch of constant offset, in which the
        // wall clock runs with real time, so the first civil match in it is
        // its first occurrence.
        for _ in 0..MAX_SEGMENTS {
            let cursor = Timestamp::from_millisecond(cursor_ms).ok()?;
            let offset_ms = zone.offset_ms(cursor);
            let change_ms = zone.next_change_ms(cursor);
            let civil_end_ms = change_ms.and_then(|c| c.checked_add(offset_ms));
            let mut civil_from_ms = ceil_minute(cursor_ms.checked_add(offset_ms)?)?;
            loop {
                let found_ms = self.first_match(&mut memo, civil_from_ms)?;
                if civil_end_ms.is_some_and(|end| found_ms >= end) {
                    break;
                }
                let at_ms = found_ms.checked_sub(offset_ms)?;
                if self.each_pass || zone.first_instant_ms(found_ms) == Some(at_ms) {
                    return Some(at_ms);
                }
                // The second pass of a repeated wall-clock time.
                civil_from_ms = found_ms.checked_add(MINUTE_MS)?;
            }
            let change_ms = change_ms?;
            if self.fires_at_change(zone, &mut memo, change_ms)? {
                return Some(change_ms);
            }
            cursor_ms = change_ms;
        }
        None
    }

    /// [`Cron::next_civil`], remembered: a query between the last one and
    /// its answer has the same answer.
    fn first_match(&self, memo: &mut Option<Found>, from_ms: i64) -> Option<i64> {
        match *memo {
            Some(m) if m.from_ms <= from_ms && from_ms <= m.found_ms => Some(m.found_ms),
            _ => {
                let found_ms = self.next_civil(from_ms)?;
                *memo = Some(Found { from_ms, found_ms });
                Some(found_ms)
            }
        }
    }

    /// A time of a fixed-time spec inside the wall-clock gap that a change
    /// of offset at `change_ms` opens fires at the change, the first instant
    /// after the gap.
    fn fires_at_change(
        &self,
        zone: &Zone,
        memo: &mut Option<Found>,
        change_ms: i64,
    ) -> Option<bool> {
        match (self.each_pass, zone.gap_ms(change_ms)) {
            (false, Some((gap_start_ms, gap_end_ms))) => {
                Some(self.first_match(memo, ceil_minute(gap_start_ms)?)? < gap_end_ms)
            }
            _ => Some(false),
        }
    }

    fn smallest_interval_minutes(&self) -> u64 {
        let minutes = set_bits(self.minutes);
        let hours = set_bits(u64::from(self.hours));
        let (Some(&first_minute), Some(&last_minute), Some(&first_hour), Some(&last_hour)) =
            (minutes.first(), minutes.last(), hours.first(), hours.last())
        else {
            return 0;
        };
        // From the last minute of one matching hour to the first of the
        // next, `hours_apart` later.
        let across = |hours_apart: i64| hours_apart * 60 + first_minute - last_minute;
        let within_hours = minutes.windows(2).map(|w| w[1] - w[0]);
        let across_hours = hours.windows(2).map(|w| across(w[1] - w[0]));
        let across_days = across(self.smallest_day_gap() * 24 + first_hour - last_hour);
        let smallest = within_hours.chain(across_hours).fold(across_days, i64::min);
        u64::try_from(smallest).unwrap_or(0)
    }

    /// The fewest days between two consecutive matching days, over one
    /// Gregorian cycle and its wrap into the next.
    fn smallest_day_gap(&self) -> i64 {
        const CYCLE_DAYS: i64 = 146_097;
        let (mut first, mut last, mut smallest): (Option<i64>, Option<i64>, i64) =
            (None, None, CYCLE_DAYS);
        let mut index = 0i64;
        let mut weekday = weekday(days_from_civil(2000, 1, 1));
        for year in 2000..2400 {
            for month in 1..=12u32 {
                let month_days = days_in_month(year, month);
                if self.months >> month & 1 == 0 {
                    index += i64::from(month_days);
                    weekday = (weekday + month_days) % 7;
                    continue;
                }
                for day in 1..=month_days {
                    if self.day_matches(day, weekday) {
                        if let Some(previous) = last {
                            smallest = smallest.min(index - previous);
                            if smallest == 1 {
                                return 1;
                            }
                        }
                        first = first.or(Some(index));
                        last = Some(index);
                    }
                    index += 1;
                    weekday = (weekday + 1) % 7;
                }
            }
        }
        match (first, last) {
            (Some(first), Some(last)) => smallest.min(first + CYCLE_DAYS - last),
            _ => CYCLE_DAYS,
        }
    }

    fn day_matches(&self, day: u32, weekday: u32) -> bool {
        let by_date = self.days >> day & 1 == 1;
        let by_weekday = self.weekdays >> weekday & 1 == 1;
        if self.either_day {
            by_date || by_weekday
        } else {
            by_date && by_weekday
        }
    }

    /// Some month of the spec has a day-of-month of the spec (February
    /// counted with 29 days). Only asked when the days combine by AND:
    /// over the 400-year cycle each such date falls on every weekday.
    fn some_day_exists(&self) -> bool {
        (1..=12u32).any(|month| {
            // Bits 1..=days of the month (2000 is a leap year).
            let in_month = (1u64 << (days_in_month(2000, month) + 1)) - 2;
            self.months >> month & 1 == 1 && u64::from(self.days) & in_month != 0
        })
    }

    /// The first civil minute at or after `from_ms` (civil time counted in
    /// ms as if it were UTC, a whole minute) whose fields all match.
    fn next_civil(&self, from_ms: i64) -> Option<i64> {
        let (mut year, mut month, mut day) = civil_from_days(from_ms.div_euclid(DAY_MS));
        let minute_of_day = u32::try_from(from_ms.rem_euclid(DAY_MS) / MINUTE_MS).ok()?;
        let (mut hour, mut minute) = (minute_of_day / 60, minute_of_day % 60);
        let last_year = year.saturating_add(SEARCH_YEARS).min(LAST_YEAR);
        while year <= last_year {
            match next_bit(u64::from(self.months), month) {
                None => {
                    (year, month, day, hour, minute) = (year + 1, 1, 1, 0, 0);
                    continue;
                }
                Some(m) if m != month => (month, day, hour, minute) = (m, 1, 0, 0),
                Some(_) => {}
            }
            let month_days = days_in_month(year, month);
            let first_weekday = weekday(days_from_civil(year, month, 1));
            let matching_day =
                (day..=month_days).find(|&d| self.day_matches(d, (first_weekday + d - 1) % 7));
            match matching_day {
                None => {
                    (month, day, hour, minute) = (month + 1, 1, 0, 0);
                    if month > 12 {
                        (year, month) = (year + 1, 1);
                    }
                    continue;
                }
                Some(d) if d != day => (day, hour, minute) = (d, 0, 0),
                Some(_) => {}
            }
            match next_bit(u64::from(self.hours), hour) {
                None => {
                    (day, hour, minute) = (day + 1, 0, 0);
                    continue;
                }
                Some(h) if h != hour => (hour, minute) = (h, 0),
                Some(_) => {}
            }
            match next_bit(self.minutes, minute) {
                None => (hour, minute) = (hour + 1, 0),
                Some(m) => {
                    let days = days_from_civil(year, month, day);
                    let minutes = i64::from(hour * 60 + m);
                    return days.checked_mul(DAY_MS)?.checked_add(minutes * MINUTE_MS);
                }
            }
        }
        None
    }

    /// Whether `at_ms` is an occurrence, by the rules read directly: its
    /// wall-clock time is a whole minute matching every field and (unless
    /// the spec fires in both passes) the first instant with that time; or
    /// the spec is fixed-time, the clocks go forward at `at_ms`, and some
    /// skipped minute matches.
    #[cfg(test)]
    fn fires_at(&self, zone: &Zone, at_ms: i64) -> bool {
        let Ok(at) = Timestamp::from_millisecond(at_ms) else {
            return false;
        };
        let civil_ms = at_ms + zone.offset_ms(at);
        let on_time = civil_ms.rem_euclid(MINUTE_MS) == 0
            && self.matches_civil(civil_ms)
            && (self.each_pass || zone.first_instant_ms(civil_ms) == Some(at_ms));
        let after_gap = !self.each_pass
            && zone
                .gap_ms(at_ms)
                .is_some_and(|(gap_start_ms, gap_end_ms)| {
                    (gap_start_ms..gap_end_ms)
                        .step_by(60_000)
                        .any(|minute_ms| self.matches_civil(minute_ms))
                });
        on_time || after_gap
    }

    /// Every field matches the wall-clock minute `civil_ms`.
    #[cfg(test)]
    fn matches_civil(&self, civil_ms: i64) -> bool {
        let days = civil_ms.div_euclid(DAY_MS);
        let (_, month, day) = civil_from_days(days);
        let minute_of_day = civil_ms.rem_euclid(DAY_MS) / MINUTE_MS;
        let (hour, minute) = (minute_of_day / 60, minute_of_day % 60);
        self.minutes >> minute & 1 == 1
            && self.hours >> hour & 1 == 1
            && self.months >> month & 1 == 1
            && self.day_matches(day, weekday(days))
    }
}

/// The values of a bit set, smallest first.
fn set_bits(bits: u64) -> Vec<i64> {
    (0..64).filter(|&v| bits >> v & 1 == 1).collect()
}

/// The smallest set bit at or above `from`.
fn next_bit(bits: u64, from: u32) -> Option<u32> {
    let rest = bits.checked_shr(from)?.checked_shl(from)?;
    (rest != 0).then(|| rest.trailing_zeros())
}

/// Rounds civil ms up to a whole minute.
fn ceil_minute(ms: i64) -> Option<i64> {
    let rem = ms.rem_euclid(MINUTE_MS);
    if rem == 0 {
        Some(ms)
    } else {
        ms.checked_add(MINUTE_MS - rem)
    }
}

fn is_leap(year: i32) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// 0 is Sunday; day 0 (1970-01-01) was a Thursday.
fn weekday(days: i64) -> u32 {
    u32::try_from((days + 4).rem_euclid(7)).unwrap_or(0)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i32, month: u32, day: u32) -> i64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let m = i64::from(month);
    let day_of_year = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i32, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (
        i32::try_from(year).unwrap_or(i32::MAX),
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod cases;

#[cfg(test)]
mod tests {
    use super::parse::parse_spec;
    use super::parse::tests::{cron, zone};
    use super::*;

    #[test]
    fn the_table_matches_the_reference() {
        let mut failures = Vec::new();
        for &(spec, zone_name, after_ms, expected_ms) in cases::CASES {
            let spec_parsed = parse_spec(spec.as_bytes()).expect(spec);
            let got = spec_parsed.next_after(&zone(zone_name), 0, after_ms);
            if got != Some(expected_ms) {
                failures.push(format!(
                    "{spec} {zone_name} after {after_ms}: got {got:?}, want {expected_ms}"
                ));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert!(cases::CASES.len() >= 60);
    }

    #[test]
    fn every_counts_from_its_anchor() {
        let every = parse_spec(b"every:1000").unwrap();
        let utc = Zone::utc();
        assert_eq!(every.next_after(&utc, 5_000, 0), Some(5_000));
        assert_eq!(every.next_after(&utc, 5_000, 4_999), Some(5_000));
        assert_eq!(every.next_after(&utc, 5_000, 5_000), Some(6_000));
        assert_eq!(every.next_after(&utc, 5_000, 5_999), Some(6_000));
        assert_eq!(every.next_after(&utc, -2_500, -2_000), Some(-1_500));
        let far = parse_spec(b"every:10000000000000").unwrap();
        assert_eq!(far.next_after(&utc, i64::MAX - 5, i64::MAX - 5), None);
        assert_eq!(
            far.next_after(&utc, i64::MIN, i64::MIN),
            Some(i64::MIN + 10_000_000_000_000)
        );
    }

    #[test]
    fn a_leap_day_is_found_without_a_scan() {
        // 2096-02-29 to 2104-02-29: eight years, 2100 not a leap year.
        let leap = cron("0 0 29 2 *");
        let from = days_from_civil(2096, 3, 1) * DAY_MS;
        assert_eq!(
            leap.next_after(&Zone::utc(), from),
            Some(days_from_civil(2104, 2, 29) * DAY_MS)
        );
        // A 29 February that is a Sunday (AND: the day-of-week starts with
        // `*`): 28 years apart inside a century, 40 across 2100.
        let rare = cron("0 0 29 2 */7");
        let mut at = 0i64;
        for _ in 0..20 {
            at = rare.next_after(&zone("Australia/Sydney"), at).unwrap();
        }
        assert!(at > days_from_civil(2400, 1, 1) * DAY_MS);
    }

    #[test]
    fn the_smallest_interval_bounds_the_jitter() {
        const MIN: u64 = 60_000;
        const DAY: u64 = 1440 * MIN;
        for (text, want) in [
            ("* * * * *", MIN),
            ("*/7 * * * *", 4 * MIN),
            ("0,30 * * * *", 30 * MIN),
            ("0 * * * *", 60 * MIN),
            ("15 9,17 * * MON-FRI", 8 * 60 * MIN),
            ("50 23 * * *", DAY),
            ("@daily", DAY),
            ("0 0 */2 * *", DAY),
            ("0 0 1 * MON", DAY),
            ("0 0 * * 5,1", 3 * DAY),
            ("@weekly", 7 * DAY),
            ("@monthly", 28 * DAY),
            ("0 0 1 1,3 *", 59 * DAY),
            ("@yearly", 365 * DAY),
            ("0 0 29 2 *", 1461 * DAY),
            // A 29 February that is a Sunday: 2004, 2032, ... 28 years.
            ("0 0 29 2 */7", 10_227 * DAY),
        ] {
            assert_eq!(cron(text).smallest_interval_minutes() * MIN, want, "{text}");
        }
        assert_eq!(
            Spec::Every { interval_ms: 1234 }.smallest_interval_ms(),
            1234
        );
        assert_eq!(
            Spec::Cron(cron("@hourly")).smallest_interval_ms(),
            3_600_000
        );
    }

    #[test]
    fn the_ends_of_time_give_none() {
        let every_minute = cron("* * * * *");
        assert_eq!(every_minute.next_after(&Zone::utc(), i64::MAX), None);
        assert_eq!(every_minute.next_after(&Zone::utc(), i64::MAX - 1), None);
        assert_eq!(every_minute.next_after(&Zone::utc(), i64::MIN), None);
        let berlin = zone("Europe/Berlin");
        let end = days_from_civil(9999, 12, 31) * DAY_MS;
        assert_eq!(cron("0 0 1 1 *").next_after(&berlin, end), None);
        assert!(every_minute.next_after(&berlin, 0).is_some());
    }

    #[test]
    fn civil_days_round_trip() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(weekday(days_from_civil(2026, 12, 2)), 3);
    }
}

#[cfg(test)]
mod properties {
    use super::parse::{parse_spec, parse_zone, SpecError};
    use super::*;
    use proptest::prelude::*;

    const ZONES: &[&str] = &[
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Sydney",
        "Asia/Kolkata",
        "Australia/Lord_Howe",
        "America/Sao_Paulo",
    ];

    /// The longest stretch after the instant scanned minute by minute.
    const SCAN_MINUTES: i64 = 4 * 24 * 60;

    fn field(min: u32, max: u32, max_step: u32) -> impl Strategy<Value = String> {
        prop_oneof![
            Just("*".to_string()),
            (1..=max_step).prop_map(|step| format!("*/{step}")),
            (min..=max).prop_map(|v| v.to_string()),
            (min..=max, min..=max, 1..=4u32)
                .prop_map(|(a, b, step)| { format!("{}-{}/{step}", a.min(b), a.max(b)) }),
            proptest::collection::vec(min..=max, 1..4).prop_map(|values| {
                values
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            }),
        ]
    }

    fn cron_text() -> impl Strategy<Value = String> {
        (
            field(0, 59, 60),
            field(0, 23, 24),
            field(1, 31, 31),
            field(1, 12, 12),
            field(0, 7, 7),
        )
            .prop_map(|(mi, h, d, mo, w)| format!("cron:{mi} {h} {d} {mo} {w}"))
    }

    /// Specs whose hours are those the clocks change at (local 00:00 to
    /// 03:00 in these zones), named or by `*`, so the skipped and repeated
    /// hours are met often.
    fn night_cron_text() -> impl Strategy<Value = String> {
        let hours = prop_oneof![
            Just("*"),
            Just("*/2"),
            Just("0-4"),
            Just("0-23"),
            Just("1"),
            Just("2"),
            Just("1,2"),
            Just("0,3"),
        ];
        (field(0, 59, 60), hours, field(1, 31, 31), field(0, 7, 7))
            .prop_map(|(mi, h, d, w)| format!("cron:{mi} {h} {d} * {w}"))
    }

    /// 1980 to 2080: a modern span, where every zone above keeps whole
    /// minutes, so a minute-by-minute scan in UTC sees every wall-clock
    /// minute.
    fn instant() -> impl Strategy<Value = i64> {
        315_532_800_000i64..3_471_292_800_000i64
    }

    /// The next occurrence fires, is after the instant, and no minute
    /// between (scanned up to `SCAN_MINUTES`) fires; any instant between
    /// has the same next occurrence.
    fn first_after(text: &str, zone_name: &str, after_ms: i64) -> Result<(), TestCaseError> {
        let Ok(Spec::Cron(cron)) = parse_spec(text.as_bytes()) else {
            // Only an AND of days that never exist is refused.
            prop_assert_eq!(parse_spec(text.as_bytes()), Err(SpecError::NeverDue));
            return Ok(());
        };
        let zone = parse_zone(zone_name.as_bytes()).unwrap();
        let next_ms = cron
            .next_after(&zone, after_ms)
            .expect("an accepted spec fires");
        prop_assert!(next_ms > after_ms);
        prop_assert!(
            cron.fires_at(&zone, next_ms),
            "{} does not fire at {}",
            text,
            next_ms
        );
        let first_minute = after_ms.div_euclid(MINUTE_MS) + 1;
        let last_minute = next_ms
            .div_euclid(MINUTE_MS)
            .min(first_minute + SCAN_MINUTES);
        for minute in first_minute..last_minute {
            let at_ms = minute * MINUTE_MS;
            prop_assert!(
                !cron.fires_at(&zone, at_ms),
                "{} in {} fires at {} before {}",
                text,
                zone_name,
                at_ms,
                next_ms
            );
        }
        let mid_ms = after_ms + (next_ms - after_ms) / 2;
        prop_assert_eq!(cron.next_after(&zone, mid_ms), Some(next_ms));
        prop_assert_eq!(cron.next_after(&zone, next_ms - 1), Some(next_ms));
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn the_next_occurrence_is_the_first_after(
            text in cron_text(),
            zone_index in 0..ZONES.len(),
            after_ms in instant(),
        ) {
            first_after(&text, ZONES[zone_index], after_ms)?;
        }

        /// The same within two days of an offset change, where the wall
        /// clock skips or repeats.
        #[test]
        fn the_next_occurrence_is_the_first_after_around_offset_changes(
            text in night_cron_text(),
            zone_index in 1..ZONES.len(),
            near_ms in instant(),
            delta_ms in -3 * 3_600_000i64..2 * 3_600_000,
        ) {
            let zone = parse_zone(ZONES[zone_index].as_bytes()).unwrap();
            let change_ms = zone.next_change_ms(Timestamp::from_millisecond(near_ms).unwrap());
            // Asia/Kolkata has no change after 1945.
            let after_ms = change_ms.map_or(near_ms, |c| c + delta_ms);
            first_after(&text, ZONES[zone_index], after_ms)?;
        }

        /// In UTC, where the wall clock never jumps, no two consecutive
        /// occurrences are closer than the smallest interval.
        #[test]
        fn occurrences_are_never_closer_than_the_smallest_interval(
            text in cron_text(),
            after_ms in instant(),
        ) {
            let Ok(spec @ Spec::Cron(_)) = parse_spec(text.as_bytes()) else {
                return Ok(());
            };
            let smallest_ms = spec.smallest_interval_ms() as i64;
            let mut at_ms = spec.next_after(&Zone::utc(), 0, after_ms).unwrap();
            for _ in 0..8 {
                let next_ms = spec.next_after(&Zone::utc(), 0, at_ms).unwrap();
                prop_assert!(next_ms - at_ms >= smallest_ms, "{}: {} then {}", text, at_ms, next_ms);
                at_ms = next_ms;
            }
        }

        #[test]
        fn every_is_the_first_multiple_after(
            interval_ms in MIN_EVERY_MS..=MAX_EVERY_MS,
            anchor_ms in -(MAX_EVERY_MS as i64)..MAX_EVERY_MS as i64,
            after_ms in -2 * (MAX_EVERY_MS as i64)..2 * MAX_EVERY_MS as i64,
        ) {
            let spec = Spec::Every { interval_ms };
            let next_ms = spec.next_after(&Zone::utc(), anchor_ms, after_ms).unwrap();
            prop_assert!(next_ms > after_ms);
            prop_assert!(next_ms >= anchor_ms);
            prop_assert_eq!((next_ms - anchor_ms) % interval_ms as i64, 0);
            prop_assert!(next_ms - interval_ms as i64 <= after_ms || next_ms == anchor_ms);
        }

    }
}
