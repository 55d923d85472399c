//! A recurring definition as `ECHO.REPEAT` takes it and keeps it, its
//! occurrences' member names, and the rule that picks the occurrence to arm.
//! Pure: the instant and the random draw come in as arguments.
//!
//! An occurrence is the member `<id>@<nominal_ms>` of the schedule, scored
//! by its fire time (the nominal time plus the jitter drawn for it). The
//! definition remembers the nominal time of the one occurrence it has armed
//! (`next_ms`): only the release of that very member arms the next, so a
//! retry of an older occurrence (the same name, back in the schedule) never
//! arms a second one.

use crate::rules::errors::{ArgError, SpecError};
use crate::rules::grammar::{canonical_i64, canonical_u64, i64_text};
use crate::rules::recurrence::parse::{parse_spec, parse_zone};
use crate::rules::recurrence::{Spec, Zone};

/// A definition's id: 1..=1024 bytes, as a group's name.
pub const MAX_ID_BYTES: usize = 1024;

/// Between an occurrence's id and its nominal time.
const AT: u8 = b'@';

/// The layout of a stored definition, first in its text.
const LAYOUT: &[u8] = b"1";

/// ECHO.REPEAT's arguments after the schedule, parsed. `payload` holds the
/// positions of `PAYLOAD key value` among the options, so the handler opens
/// the key from its own argument.
#[derive(Clone, Debug)]
pub struct RepeatRequest<'a> {
    pub spec: Spec,
    pub spec_text: &'a [u8],
    pub zone: Zone,
    /// `TZ` as given, kept only when given.
    pub zone_given: bool,
    pub jitter_ms: u64,
    pub from_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub payload: Option<usize>,
}

/// Why ECHO.REPEAT is refused before anything is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RepeatError {
    Arg(ArgError),
    Spec(SpecError),
}

impl From<ArgError> for RepeatError {
    fn from(err: ArgError) -> Self {
        RepeatError::Arg(err)
    }
}

impl From<SpecError> for RepeatError {
    fn from(err: SpecError) -> Self {
        RepeatError::Spec(err)
    }
}

/// The most option words a valid ECHO.REPEAT has: `JITTER ms`, `TZ zone`,
/// `FROM ms`, `UNTIL ms`, `PAYLOAD key value`.
pub const MAX_REPEAT_OPTION_WORDS: usize = 11;

/// Parses `id spec [JITTER ms] [TZ zone] [FROM ms] [UNTIL ms] [PAYLOAD key
/// value]`: options in any order, keywords in any case, each at most once.
/// The spec is read before `JITTER`, whose bound is the spec's smallest
/// interval.
pub fn parse_repeat<'a>(
    id: &[u8],
    spec: &'a [u8],
    options: &[&'a [u8]],
) -> Result<RepeatRequest<'a>, RepeatError> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(ArgError::RepeatId.into());
    }
    let mut jitter: Option<&[u8]> = None;
    let mut zone: Option<&[u8]> = None;
    let (mut from_ms, mut until_ms, mut payload) = (None, None, None);
    let mut i = 0;
    while let Some(&word) = options.get(i) {
        let value = *options.get(i + 1).ok_or(ArgError::Syntax)?;
        let step = 2;
        if word.eq_ignore_ascii_case(b"JITTER") && jitter.is_none() {
            jitter = Some(value);
        } else if word.eq_ignore_ascii_case(b"TZ") && zone.is_none() {
            zone = Some(value);
        } else if word.eq_ignore_ascii_case(b"FROM") && from_ms.is_none() {
            from_ms = Some(canonical_i64(value).ok_or(ArgError::RepeatBound("FROM"))?);
        } else if word.eq_ignore_ascii_case(b"UNTIL") && until_ms.is_none() {
            until_ms = Some(canonical_i64(value).ok_or(ArgError::RepeatBound("UNTIL"))?);
        } else if word.eq_ignore_ascii_case(b"PAYLOAD") && payload.is_none() {
            options.get(i + 2).ok_or(ArgError::Syntax)?;
            payload = Some(i + 1);
            i += 3;
            continue;
        } else {
            return Err(ArgError::Syntax.into());
        }
        i += step;
    }
    if let (Some(from), Some(until)) = (from_ms, until_ms) {
        if until < from {
            return Err(ArgError::UntilBeforeFrom.into());
        }
    }
    let parsed = parse_spec(spec)?;
    let zone_given = zone.is_some();
    let zone = match zone {
        Some(name) => parse_zone(name)?,
        None => Zone::utc(),
    };
    let bound_ms = parsed.smallest_interval_ms();
    let jitter_ms = match jitter {
        Some(word) => canonical_u64(word, bound_ms).ok_or(ArgError::RepeatJitter(bound_ms))?,
        None => 0,
    };
    Ok(RepeatRequest {
        spec: parsed,
        spec_text: spec,
        zone,
        zone_given,
        jitter_ms,
        from_ms,
        until_ms,
        payload,
    })
}

/// A definition as kept in the schedule's definitions hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Definition {
    pub spec: Vec<u8>,
    /// The zone's name as the database spells it; empty for UTC by default.
    pub zone: Vec<u8>,
    pub jitter_ms: u64,
    pub from_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// `every:`'s first occurrence: `FROM`, or the creation time.
    pub anchor_ms: i64,
    /// The nominal time of the one occurrence armed now.
    pub next_ms: i64,
    /// `PAYLOAD key value`: written as `HSET key <occurrence> value` when an
    /// occurrence is armed.
    pub payload: Option<(Vec<u8>, Vec<u8>)>,
}

impl Definition {
    /// The definition a request makes, anchored at `now_ms` (or `FROM`),
    /// with its first occurrence after `now_ms`: `None` when it has none
    /// within `UNTIL` (or the calendar).
    pub fn first(
        request: &RepeatRequest,
        payload: Option<(Vec<u8>, Vec<u8>)>,
        now_ms: i64,
    ) -> Option<Definition> {
        let anchor_ms = request.from_ms.unwrap_or(now_ms);
        // From FROM itself when it is still to come, else strictly after now.
        let after_ms = match request.from_ms {
            Some(from) if from > now_ms => from.checked_sub(1)?,
            _ => now_ms,
        };
        let next_ms = request
            .spec
            .next_after(&request.zone, anchor_ms, after_ms)
            .filter(|&n| request.until_ms.is_none_or(|until| n <= until))?;
        Some(Definition {
            spec: request.spec_text.to_vec(),
            // `TZ UTC` is the default said out loud: stored as no `TZ`, so
            // an instance that says it and one that does not declare the
            // same definition.
            zone: match request.zone.name() {
                _ if !request.zone_given => Vec::new(),
                "UTC" | "Etc/UTC" => Vec::new(),
                name => name.as_bytes().to_vec(),
            },
            jitter_ms: request.jitter_ms,
            from_ms: request.from_ms,
            until_ms: request.until_ms,
            anchor_ms,
            next_ms,
            payload,
        })
    }

    /// Whether `other` says the same as `self` apart from its anchor and
    /// armed occurrence: a second ECHO.REPEAT of it changes nothing.
    pub fn same_as(&self, other: &Definition) -> bool {
        self.spec == other.spec
            && self.zone == other.zone
            && self.jitter_ms == other.jitter_ms
            && self.from_ms == other.from_ms
            && self.until_ms == other.until_ms
            && self.payload == other.payload
    }

    /// The spec and zone again, as stored (both were checked when stored; a
    /// hand-written hash that no longer parses gives `None`).
    #[cfg(test)]
    pub fn parsed(&self) -> Option<(Spec, Zone)> {
        parsed(&self.spec, &self.zone)
    }

    /// The nominal time to arm after the occurrence at `released_ms` left
    /// the schedule at `now_ms`: the next one, unless its jitter window has
    /// wholly passed (the server was down, or the queue held, past it),
    /// then the first still to come, so a missed stretch runs once. `None`
    /// past `UNTIL` or the calendar: the definition is done. (A release
    /// reads it in place: `Stored::after_release`, the same rule.)
    #[cfg(test)]
    pub fn after_release(
        &self,
        spec: &Spec,
        zone: &Zone,
        released_ms: i64,
        now_ms: i64,
    ) -> Option<i64> {
        after_release(
            spec,
            zone,
            (self.anchor_ms, self.jitter_ms, self.until_ms),
            released_ms,
            now_ms,
        )
    }

    /// The stored text: the layout, the numbers, then each byte string with
    /// its length in front (`<len>:<bytes>`), so any bytes round-trip.
    pub fn encode(&self) -> Vec<u8> {
        let payload_len = self.payload.as_ref().map_or(0, |(k, v)| k.len() + v.len());
        let mut out = Vec::with_capacity(120 + self.spec.len() + self.zone.len() + payload_len);
        out.extend_from_slice(LAYOUT);
        out.push(b' ');
        put_u64(&mut out, self.jitter_ms);
        for bound in [self.from_ms, self.until_ms] {
            out.push(b' ');
            match bound {
                Some(ms) => put_i64(&mut out, ms),
                None => out.push(b'-'),
            }
        }
        for ms in [self.anchor_ms, self.next_ms] {
            out.push(b' ');
            put_i64(&mut out, ms);
        }
        out.push(b' ');
        let mut put = |bytes: &[u8]| {
            put_u64(&mut out, bytes.len() as u64);
            out.push(b':');
            out.extend_from_slice(bytes);
        };
        put(&self.spec);
        put(&self.zone);
        if let Some((key, value)) = &self.payload {
            put(key);
            put(value);
        }
        out
    }

    /// Reads what `encode` wrote; `None` for anything else.
    pub fn decode(text: &[u8]) -> Option<Definition> {
        let stored = Stored::read(text)?;
        Some(Definition {
            spec: stored.spec.to_vec(),
            zone: stored.zone.to_vec(),
            jitter_ms: stored.jitter_ms,
            from_ms: stored.from_ms,
            until_ms: stored.until_ms,
            anchor_ms: stored.anchor_ms,
            next_ms: stored.next_ms,
            payload: stored.payload.map(|(k, v)| (k.to_vec(), v.to_vec())),
        })
    }
}

/// A stored definition read in place, without copying its strings: what a
/// release reads to arm the next occurrence, which then writes the same
/// text back with only `next_ms` changed (`with_next`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored<'t> {
    text: &'t [u8],
    /// Where `next_ms`'s digits are in `text`.
    next_at: (usize, usize),
    pub spec: &'t [u8],
    pub zone: &'t [u8],
    pub jitter_ms: u64,
    pub from_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub anchor_ms: i64,
    pub next_ms: i64,
    pub payload: Option<(&'t [u8], &'t [u8])>,
}

impl<'t> Stored<'t> {
    /// Reads what `Definition::encode` wrote; `None` for anything else.
    pub fn read(text: &'t [u8]) -> Option<Stored<'t>> {
        let after_layout = text.strip_prefix(LAYOUT)?.strip_prefix(b" ")?;
        let mut at = text.len() - after_layout.len();
        let mut word = || -> Option<(&'t [u8], usize)> {
            let rest = &text[at..];
            let end = rest.iter().position(|&b| b == b' ')?;
            let start = at;
            at += end + 1;
            Some((&rest[..end], start))
        };
        let jitter_ms = canonical_u64(word()?.0, u64::MAX)?;
        let opt = |w: &[u8]| -> Option<Option<i64>> {
            if w == b"-" {
                Some(None)
            } else {
                canonical_i64(w).map(Some)
            }
        };
        let from_ms = opt(word()?.0)?;
        let until_ms = opt(word()?.0)?;
        let anchor_ms = canonical_i64(word()?.0)?;
        let (next, next_start) = word()?;
        let next_ms = canonical_i64(next)?;
        let mut rest = &text[at..];
        let mut strings: [&[u8]; 4] = [&[]; 4];
        let mut count = 0;
        while !rest.is_empty() {
            let colon = rest.iter().position(|&b| b == b':')?;
            let len = usize::try_from(canonical_u64(&rest[..colon], u64::MAX)?).ok()?;
            let body = rest.get(colon + 1..)?;
            *strings.get_mut(count)? = body.get(..len)?;
            count += 1;
            rest = &body[len..];
        }
        let payload = match count {
            2 => None,
            4 => Some((strings[2], strings[3])),
            _ => return None,
        };
        Some(Stored {
            text,
            next_at: (next_start, next_start + next.len()),
            spec: strings[0],
            zone: strings[1],
            jitter_ms,
            from_ms,
            until_ms,
            anchor_ms,
            next_ms,
            payload,
        })
    }

    /// See [`Definition::after_release`].
    pub fn after_release(
        &self,
        spec: &Spec,
        zone: &Zone,
        released_ms: i64,
        now_ms: i64,
    ) -> Option<i64> {
        after_release(
            spec,
            zone,
            (self.anchor_ms, self.jitter_ms, self.until_ms),
            released_ms,
            now_ms,
        )
    }

    /// The stored text with `next_ms` in place of its own: what `encode`
    /// writes for the same definition armed at `next_ms`.
    pub fn with_next(&self, next_ms: i64) -> Vec<u8> {
        let (start, end) = self.next_at;
        let mut out = Vec::with_capacity(self.text.len() + 20);
        out.extend_from_slice(&self.text[..start]);
        put_i64(&mut out, next_ms);
        out.extend_from_slice(&self.text[end..]);
        out
    }
}

/// The rule of [`Definition::after_release`], for a definition anchored at
/// `anchor_ms` with `jitter_ms` and `until_ms`.
fn after_release(
    spec: &Spec,
    zone: &Zone,
    (anchor_ms, jitter_ms, until_ms): (i64, u64, Option<i64>),
    released_ms: i64,
    now_ms: i64,
) -> Option<i64> {
    let next = spec.next_after(zone, anchor_ms, released_ms)?;
    let window_end = next.saturating_add(i64::try_from(jitter_ms).unwrap_or(i64::MAX));
    let next = if window_end >= now_ms {
        next
    } else {
        spec.next_after(zone, anchor_ms, now_ms)?
    };
    until_ms.is_none_or(|until| next <= until).then_some(next)
}

/// How many parsed specs and zones `parsed` keeps: the releases of a
/// schedule whose definitions share a few specs parse none of them again.
const PARSED_CACHE: usize = 16;

/// A remembered parse: the stored spec and zone texts, and what they parse to.
type ParsedEntry = (Vec<u8>, Vec<u8>, Spec, Zone);

thread_local! {
    /// The last specs and zones parsed by `parsed`, by their stored text
    /// (parsing is pure: an entry never goes stale). Most recent first.
    static PARSED: std::cell::RefCell<Vec<ParsedEntry>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A stored spec and zone (empty: UTC) parsed, `None` when they no longer
/// parse (a hand-written hash); remembered for the next release.
pub fn parsed(spec_text: &[u8], zone_text: &[u8]) -> Option<(Spec, Zone)> {
    let hit = PARSED.with(|cache| {
        let mut cache = cache.borrow_mut();
        let at = cache
            .iter()
            .position(|(s, z, _, _)| s.as_slice() == spec_text && z.as_slice() == zone_text)?;
        if at > 0 {
            let entry = cache.remove(at);
            cache.insert(0, entry);
        }
        cache
            .first()
            .map(|(_, _, spec, zone)| (spec.clone(), zone.clone()))
    });
    if hit.is_some() {
        return hit;
    }
    let spec = parse_spec(spec_text).ok()?;
    let zone = if zone_text.is_empty() {
        Zone::utc()
    } else {
        parse_zone(zone_text).ok()?
    };
    PARSED.with(|cache| {
        let mut cache = cache.borrow_mut();
        cache.truncate(PARSED_CACHE - 1);
        cache.insert(
            0,
            (
                spec_text.to_vec(),
                zone_text.to_vec(),
                spec.clone(),
                zone.clone(),
            ),
        );
    });
    Some((spec, zone))
}

fn put_i64(out: &mut Vec<u8>, value: i64) {
    let mut digits = [0u8; 20];
    out.extend_from_slice(i64_text(value, &mut digits));
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// The member name of the occurrence of `id` at `nominal_ms`.
pub fn occurrence(id: &[u8], nominal_ms: i64) -> Vec<u8> {
    let mut name = Vec::with_capacity(id.len() + 21);
    name.extend_from_slice(id);
    name.push(AT);
    put_i64(&mut name, nominal_ms);
    name
}

/// The id and nominal time of a member named as an occurrence (after its
/// last `@`, a canonical integer); `None` for any other name.
pub fn parse_occurrence(member: &[u8]) -> Option<(&[u8], i64)> {
    let at = member.iter().rposition(|&b| b == AT)?;
    let (id, nominal) = (&member[..at], &member[at + 1..]);
    if id.is_empty() {
        return None;
    }
    Some((id, canonical_i64(nominal)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::errors::SpecError;

    const HOUR_MS: i64 = 3_600_000;
    /// 2026-12-03T15:00:00Z
    const T0: i64 = 1_796_310_000_000;

    fn request<'a>(spec: &'a [u8], options: &[&'a [u8]]) -> RepeatRequest<'a> {
        parse_repeat(b"id", spec, options).unwrap()
    }

    #[test]
    fn the_options_parse_in_any_order_and_case_once_each() {
        let r = request(
            b"cron:0 * * * *",
            &[
                b"jitter",
                b"300000",
                b"TZ",
                b"europe/berlin",
                b"from",
                b"5",
                b"Until",
                b"9",
            ],
        );
        assert_eq!(r.jitter_ms, 300_000);
        assert_eq!(r.zone.name(), "Europe/Berlin");
        assert_eq!((r.from_ms, r.until_ms), (Some(5), Some(9)));
        let r = request(b"every:1000", &[b"PAYLOAD", b"{q}:jobs", b"hello"]);
        assert_eq!(r.payload, Some(1));
        assert_eq!(r.jitter_ms, 0);
        assert!(!r.zone_given);
    }

    #[test]
    fn bad_requests_are_refused_with_their_reason() {
        let refused = |id: &[u8], spec: &[u8], options: &[&[u8]]| {
            parse_repeat(id, spec, options).unwrap_err()
        };
        let arg = RepeatError::Arg;
        assert_eq!(refused(b"", b"every:1000", &[]), arg(ArgError::RepeatId));
        assert_eq!(
            refused(&[b'x'; MAX_ID_BYTES + 1], b"every:1000", &[]),
            arg(ArgError::RepeatId)
        );
        assert_eq!(
            refused(b"i", b"every:1000", &[b"JITTER"]),
            arg(ArgError::Syntax)
        );
        assert_eq!(
            refused(b"i", b"every:1000", &[b"JITTER", b"1", b"JITTER", b"1"]),
            arg(ArgError::Syntax)
        );
        assert_eq!(
            refused(b"i", b"every:1000", &[b"NX", b"1"]),
            arg(ArgError::Syntax)
        );
        assert_eq!(
            refused(b"i", b"every:1000", &[b"JITTER", b"1001"]),
            arg(ArgError::RepeatJitter(1000))
        );
        assert_eq!(
            refused(b"i", b"cron:*/7 * * * *", &[b"JITTER", b"240001"]),
            arg(ArgError::RepeatJitter(240_000))
        );
        assert_eq!(
            refused(b"i", b"every:1000", &[b"JITTER", b"-1"]),
            arg(ArgError::RepeatJitter(1000))
        );
        assert_eq!(
            refused(b"i", b"every:1000", &[b"FROM", b"x"]),
            arg(ArgError::RepeatBound("FROM"))
        );
        assert_eq!(
            refused(b"i", b"every:1000", &[b"UNTIL", b"01"]),
            arg(ArgError::RepeatBound("UNTIL"))
        );
        assert_eq!(
            refused(b"i", b"every:1000", &[b"FROM", b"10", b"UNTIL", b"9"]),
            arg(ArgError::UntilBeforeFrom)
        );
        assert_eq!(
            refused(b"i", b"every:1000", &[b"PAYLOAD", b"k"]),
            arg(ArgError::Syntax)
        );
        assert_eq!(refused(b"i", b"", &[]), RepeatError::Spec(SpecError::Empty));
        assert!(matches!(
            refused(b"i", b"every:1000", &[b"TZ", b"Mars/Olympus"]),
            RepeatError::Spec(SpecError::UnknownZone(_))
        ));
    }

    #[test]
    fn the_first_occurrence_comes_after_now_or_at_from() {
        let every = request(b"every:60000", &[]);
        let d = Definition::first(&every, None, T0).unwrap();
        assert_eq!((d.anchor_ms, d.next_ms), (T0, T0 + 60_000));
        let later = T0 + 5_000;
        let from = format!("{later}");
        let r = request(b"every:60000", &[b"FROM", from.as_bytes()]);
        assert_eq!(Definition::first(&r, None, T0).unwrap().next_ms, later);
        let past = format!("{}", T0 - 90_000);
        let r = request(b"every:60000", &[b"FROM", past.as_bytes()]);
        assert_eq!(
            Definition::first(&r, None, T0).unwrap().next_ms,
            T0 + 30_000
        );
        let hourly = request(b"cron:0 * * * *", &[]);
        assert_eq!(
            Definition::first(&hourly, None, T0).unwrap().next_ms,
            T0 + HOUR_MS
        );
        let until = format!("{}", T0 + 59_999);
        let r = request(b"every:60000", &[b"UNTIL", until.as_bytes()]);
        assert_eq!(Definition::first(&r, None, T0), None);
    }

    #[test]
    fn after_a_release_the_next_is_armed_and_a_missed_stretch_runs_once() {
        let r = request(b"every:1000", &[b"JITTER", b"1000"]);
        let d = Definition::first(&r, None, T0).unwrap();
        let (spec, zone) = d.parsed().unwrap();
        let n = d.next_ms;
        // On time, late within its jitter, and later than the next nominal
        // but within that one's window: the next nominal each time.
        for now in [n, n + 999, n + 1000, n + 1500, n + 2000] {
            assert_eq!(
                d.after_release(&spec, &zone, n, now),
                Some(n + 1000),
                "{now}"
            );
        }
        // The next one's window has passed: the first still to come.
        assert_eq!(d.after_release(&spec, &zone, n, n + 2001), Some(n + 3000));
        assert_eq!(
            d.after_release(&spec, &zone, n, n + 3_600_000),
            Some(n + 3_601_000)
        );
        // Without jitter: the next still to come.
        let r = request(b"every:1000", &[]);
        let d = Definition::first(&r, None, T0).unwrap();
        let n = d.next_ms;
        assert_eq!(d.after_release(&spec, &zone, n, n + 5), Some(n + 1000));
        assert_eq!(d.after_release(&spec, &zone, n, n + 1000), Some(n + 1000));
        assert_eq!(d.after_release(&spec, &zone, n, n + 1001), Some(n + 2000));
        // UNTIL ends it after its last occurrence.
        let until = format!("{}", T0 + 2000);
        let r = request(b"every:1000", &[b"UNTIL", until.as_bytes()]);
        let d = Definition::first(&r, None, T0).unwrap();
        assert_eq!(
            d.after_release(&spec, &zone, T0 + 1000, T0 + 1000),
            Some(T0 + 2000)
        );
        assert_eq!(d.after_release(&spec, &zone, T0 + 2000, T0 + 2000), None);
    }

    #[test]
    fn definitions_round_trip_any_bytes_and_refuse_anything_else() {
        let r = request(
            b"cron:0 9 * * MON-FRI",
            &[b"TZ", b"America/New_York", b"JITTER", b"60000"],
        );
        let mut d = Definition::first(
            &r,
            Some((b"{q}:jobs".to_vec(), b"a:b 1:\0\xff".to_vec())),
            T0,
        )
        .unwrap();
        assert_eq!(Definition::decode(&d.encode()), Some(d.clone()));
        d.payload = None;
        d.from_ms = Some(-5);
        assert_eq!(Definition::decode(&d.encode()), Some(d.clone()));
        let text = d.encode();
        for cut in 0..text.len() {
            assert_ne!(Definition::decode(&text[..cut]), Some(d.clone()), "{cut}");
        }
        for bad in [
            &b""[..],
            b"2 0 - - 1 2 1:x0:",
            b"1 0 - - 1 2 1:x",
            b"1 x - - 1 2 1:x0:",
        ] {
            assert_eq!(Definition::decode(bad), None);
        }
        let utc = request(b"every:1000", &[b"TZ", b"utc"]);
        let plain = request(b"every:1000", &[]);
        let (a, b) = (
            Definition::first(&utc, None, T0).unwrap(),
            Definition::first(&plain, None, T0).unwrap(),
        );
        assert!(a.same_as(&b), "TZ UTC is no TZ");
        let mut other = d.clone();
        other.next_ms += 1;
        other.anchor_ms += 1;
        assert!(d.same_as(&other));
        other.jitter_ms += 1;
        assert!(!d.same_as(&other));
    }

    #[test]
    fn a_stored_definition_read_in_place_rearms_to_what_encode_writes() {
        let r = request(
            b"cron:0 9 * * MON-FRI",
            &[b"TZ", b"America/New_York", b"JITTER", b"60000"],
        );
        let with_payload = Definition::first(
            &r,
            Some((b"{q}:jobs".to_vec(), b"a:b 1:\0\xff".to_vec())),
            T0,
        )
        .unwrap();
        let mut bounded = Definition::first(&request(b"every:1000", &[]), None, T0).unwrap();
        bounded.from_ms = Some(-5);
        bounded.until_ms = Some(T0 * 2);
        for d in [with_payload, bounded] {
            let text = d.encode();
            let stored = Stored::read(&text).unwrap();
            assert_eq!(Definition::decode(&text), Some(d.clone()));
            assert_eq!((stored.spec, stored.zone), (&d.spec[..], &d.zone[..]));
            assert_eq!(
                stored.payload,
                d.payload.as_ref().map(|(k, v)| (&k[..], &v[..]))
            );
            for next in [0, -1, 7, T0 + 60_000, i64::MAX, i64::MIN] {
                let mut moved = d.clone();
                moved.next_ms = next;
                assert_eq!(stored.with_next(next), moved.encode(), "{next}");
            }
            let (spec, zone) = parsed(stored.spec, stored.zone).unwrap();
            for now in [d.next_ms, d.next_ms + 3_600_000] {
                assert_eq!(
                    stored.after_release(&spec, &zone, d.next_ms, now),
                    d.after_release(&spec, &zone, d.next_ms, now)
                );
            }
        }
        // Extra strings after the payload, or half a payload: refused.
        let text = Definition::first(&request(b"every:1000", &[]), None, T0)
            .unwrap()
            .encode();
        for tail in [&b"1:k"[..], b"1:k1:v1:x"] {
            let mut bad = text.clone();
            bad.extend_from_slice(tail);
            assert_eq!(Stored::read(&bad), None);
        }
    }

    #[test]
    fn parsed_specs_and_zones_are_remembered_and_equal_a_fresh_parse() {
        for _ in 0..2 {
            for i in 0..(PARSED_CACHE + 3) {
                let text = format!("every:{}", 1000 + i);
                let (spec, zone) = parsed(text.as_bytes(), b"").unwrap();
                assert_eq!(spec, parse_spec(text.as_bytes()).unwrap());
                assert_eq!(zone.name(), "UTC");
            }
            let (spec, zone) = parsed(b"cron:*/5 * * * *", b"Europe/Berlin").unwrap();
            assert_eq!(spec, parse_spec(b"cron:*/5 * * * *").unwrap());
            assert_eq!(zone.name(), "Europe/Berlin");
            assert!(parsed(b"cron:*/5 * * * *", b"Mars/Olympus").is_none());
            assert!(parsed(b"every:1", b"").is_none());
        }
    }

    #[test]
    fn occurrence_names_carry_the_id_and_the_nominal_time() {
        assert_eq!(
            occurrence(b"report", T0),
            format!("report@{T0}").into_bytes()
        );
        assert_eq!(
            parse_occurrence(b"report@1796310000000"),
            Some((&b"report"[..], T0))
        );
        assert_eq!(parse_occurrence(b"a@b.com@-5"), Some((&b"a@b.com"[..], -5)));
        for name in [
            &b"user@example.com"[..],
            b"@5",
            b"x@",
            b"x@05",
            b"plain",
            b"x@1e3",
        ] {
            assert_eq!(
                parse_occurrence(name),
                None,
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
    }
}
