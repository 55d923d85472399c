#!/usr/bin/env python3
"""Prints src/rules/recurrence/cases.rs: the next occurrence of each spec in
CASES, computed here independently of the module, by brute force.

    pip install tzdata     # the IANA release the module bundles (2026f)
    python3 scripts/recurrence_cases.py > src/rules/recurrence/cases.rs

Run once to make the table, never at test time. Its own cron parser and a
scan of real time in UTC, minute by minute, converted to the zone's wall
clock with the standard library's zoneinfo. A spec whose minute or hour field
starts with `*` follows real time: a wall-clock time that does not exist is
never seen, one seen twice fires twice. A fixed-time spec (both fields name
values) fires each of its wall-clock times once: one seen twice only on its
first pass (zoneinfo's fold=0), and where the clocks jump forward over some
of its times, once at the first minute after the jump. The days combine as
Vixie cron does (OR when neither day field starts with `*`, AND otherwise).
"""

import importlib.metadata
import sys
import zoneinfo
from datetime import datetime, timedelta, timezone

# The tzdata package, not the host's /usr/share/zoneinfo, so the release is
# the one named in the header whatever the machine has.
zoneinfo.reset_tzpath([])

MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
WEEKDAYS = "sun mon tue wed thu fri sat".split()
SHORTCUTS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def field_set(text, low, high, names=(), name_base=0):
    def value(word):
        if word.isdigit():
            return int(word)
        return names.index(word.lower()) + name_base

    values = set()
    for item in text.split(","):
        rng, _, step = item.partition("/")
        step = int(step) if step else 1
        if rng == "*":
            a, b = low, high
        elif "-" in rng:
            a, b = (value(w) for w in rng.split("-"))
        else:
            a = value(rng)
            b = high if "/" in item else a
        values.update(range(a, b + 1, step))
    return values


def parse(spec):
    kind, _, rest = spec.partition(":")
    assert kind == "cron", spec
    rest = SHORTCUTS.get(rest.strip(), rest)
    minute, hour, dom, month, dow = rest.split()
    weekdays = field_set(dow, 0, 7, WEEKDAYS)
    if 7 in weekdays:
        weekdays.add(0)
    return {
        "minute": field_set(minute, 0, 59),
        "hour": field_set(hour, 0, 23),
        "dom": field_set(dom, 1, 31),
        "month": field_set(month, 1, 12, MONTHS, 1),
        "dow": weekdays,
        "either_day": not dom.startswith("*") and not dow.startswith("*"),
        "each_pass": minute.startswith("*") or hour.startswith("*"),
    }


def matches(c, local):
    return local.minute in c["minute"] and local.hour in c["hour"] and day_matches(c, local)


def day_matches(c, local):
    by_date = local.day in c["dom"]
    # Python: Monday is 0; cron: Sunday is 0.
    by_weekday = (local.weekday() + 1) % 7 in c["dow"]
    if c["either_day"]:
        return local.month in c["month"] and (by_date or by_weekday)
    return local.month in c["month"] and by_date and by_weekday


def next_cron(spec, zone_name, after):
    c = parse(spec)
    zone = zoneinfo.ZoneInfo(zone_name)
    t = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    limit = after + timedelta(days=366 * 40)
    while t < limit:
        local = t.astimezone(zone)
        offset_minutes = local.utcoffset().total_seconds() / 60
        # Every offset the table's zones have had since 1970 is a whole
        # quarter hour, so a local day starts on a UTC quarter hour and a
        # day that cannot match may be passed a quarter hour at a time.
        assert offset_minutes % 15 == 0, (zone_name, t)
        if not c["each_pass"]:
            # The wall-clock minutes the clocks jumped over just before t.
            before = (t - timedelta(minutes=1)).astimezone(zone).replace(tzinfo=None)
            skipped = before + timedelta(minutes=1)
            while skipped < local.replace(tzinfo=None):
                if matches(c, skipped):
                    return t
                skipped += timedelta(minutes=1)
        if not day_matches(c, local):
            t += timedelta(minutes=15 - t.minute % 15)
            continue
        if matches(c, local) and (c["each_pass"] or local.fold == 0):
            return t
        t += timedelta(minutes=1)
    raise SystemExit(f"no occurrence of {spec} within 40 years of {after}")


def next_every(spec, after_ms):
    # The anchor is 0 in the table's test.
    interval = int(spec.partition(":")[2])
    return (after_ms // interval + 1) * interval


def utc(text):
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def ms(t):
    return (t - EPOCH) // timedelta(milliseconds=1)


# (spec, zone, after as UTC ISO): what each case pins is in the comment the
# table carries (the expected time in the zone).
CASES = [
    # UTC: steps, lists, ranges, month ends, leap years, the OR rule.
    ("cron:* * * * *", "UTC", "2026-12-02T17:54:30.500"),
    ("cron:0 * * * *", "UTC", "2026-12-02T17:00:00"),
    ("cron:*/7 * * * *", "UTC", "2026-12-02T17:50:00"),
    ("cron:*/7 * * * *", "UTC", "2026-12-02T17:56:00"),
    ("cron:10-40/5 3 * * *", "UTC", "2026-12-02T03:40:00"),
    ("cron:5/15 * * * *", "UTC", "2026-12-02T10:51:00"),
    ("cron:0 0 29 2 *", "UTC", "2025-03-01T00:00:00"),
    ("cron:0 0 29 2 *", "UTC", "2028-02-29T00:00:00"),
    ("cron:0 0 29 2 *", "UTC", "2096-03-01T00:00:00"),
    ("cron:0 0 31 * *", "UTC", "2026-04-01T00:00:00"),
    ("cron:30 23 28-31 * *", "UTC", "2026-02-28T23:30:00"),
    ("cron:59 23 31 12 *", "UTC", "2026-12-31T23:59:00"),
    ("cron:0 0 1 1 *", "UTC", "2026-12-31T23:59:59.999"),
    ("cron:0 12 1 * MON", "UTC", "2026-12-02T00:00:00"),
    ("cron:0 12 1 * MON", "UTC", "2027-01-25T12:00:00"),
    ("cron:0 12 */2 * MON", "UTC", "2026-12-02T00:00:00"),
    ("cron:0 0 13 * FRI", "UTC", "2026-02-06T00:00:00"),
    ("cron:0 0 29 2 MON", "UTC", "2027-02-22T00:00:00"),
    ("cron:0 0 */29 2 MON", "UTC", "2026-01-01T00:00:00"),
    ("cron:15 10 * * MON-FRI", "UTC", "2026-12-04T10:15:00"),
    ("cron:0 9 * JAN,jul *", "UTC", "2026-01-31T09:00:00"),
    ("cron:0 0 * * 7", "UTC", "2026-12-02T00:00:00"),
    ("cron:0 0 * * 5-7", "UTC", "2026-12-05T00:00:00"),
    ("cron:@yearly", "UTC", "2026-12-02T00:00:00"),
    ("cron:@annually", "UTC", "2026-12-02T00:00:00"),
    ("cron:@monthly", "UTC", "2026-12-31T23:00:00"),
    ("cron:@weekly", "UTC", "2026-12-02T00:00:00"),
    ("cron:@daily", "UTC", "2026-12-02T00:00:00"),
    ("cron:@midnight", "UTC", "2026-12-31T23:59:00"),
    ("cron:@hourly", "UTC", "2026-12-02T23:59:59"),
    ("every:60000", "UTC", "2026-12-02T17:54:30"),
    ("every:86400000", "UTC", "2026-12-02T00:00:00"),
    ("every:7000", "UTC", "2026-12-02T17:54:30"),
    # Europe/Berlin: forward 2026-03-29 02:00 -> 03:00, back 2026-10-25
    # 03:00 -> 02:00.
    ("cron:30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00"),
    ("cron:30 2 * * *", "Europe/Berlin", "2026-03-29T00:59:59.999"),
    ("cron:30 2 * * *", "Europe/Berlin", "2026-03-29T01:00:00"),
    ("cron:0 2 * * *", "Europe/Berlin", "2026-03-28T02:00:00"),
    ("cron:0,30 2 * * *", "Europe/Berlin", "2026-03-29T00:30:00"),
    ("cron:30 2,3 * * *", "Europe/Berlin", "2026-03-29T01:00:00"),
    ("cron:*/30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00"),
    ("cron:0 3 * * *", "Europe/Berlin", "2026-03-28T12:00:00"),
    ("cron:59 1 * * *", "Europe/Berlin", "2026-03-28T12:00:00"),
    ("cron:0 * * * *", "Europe/Berlin", "2026-03-29T00:30:00"),
    ("cron:30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00"),
    ("cron:30 2 * * *", "Europe/Berlin", "2026-10-25T00:30:00"),
    ("cron:0,30 2 * * *", "Europe/Berlin", "2026-10-25T00:30:00"),
    ("cron:0 * * * *", "Europe/Berlin", "2026-10-25T00:00:00"),
    ("cron:*/15 * * * *", "Europe/Berlin", "2026-10-25T00:50:00"),
    ("cron:0 9 * * MON-FRI", "Europe/Berlin", "2026-03-27T08:00:00"),
    ("cron:0 0 29 2 *", "Europe/Berlin", "2026-01-01T00:00:00"),
    ("cron:0 0 31 * *", "Europe/Berlin", "2026-03-30T22:00:00"),
    ("cron:@daily", "Europe/Berlin", "2026-03-28T23:00:00"),
    ("cron:@weekly", "Europe/Berlin", "2026-10-20T00:00:00"),
    ("cron:@monthly", "Europe/Berlin", "2026-12-15T00:00:00"),
    # America/New_York: forward 2026-03-08 02:00 -> 03:00, back 2026-11-01
    # 02:00 -> 01:00.
    ("cron:30 2 * * *", "America/New_York", "2026-03-07T12:00:00"),
    ("cron:*/20 * * * *", "America/New_York", "2026-03-08T06:50:00"),
    ("cron:0 3 * * SUN", "America/New_York", "2026-03-01T12:00:00"),
    ("cron:30 1 * * *", "America/New_York", "2026-10-31T12:00:00"),
    ("cron:30 1 * * *", "America/New_York", "2026-11-01T05:30:00"),
    ("cron:0 * * * *", "America/New_York", "2026-11-01T05:00:00"),
    ("cron:@hourly", "America/New_York", "2026-11-01T05:30:00"),
    ("cron:0 1 * * *", "America/New_York", "2026-11-01T05:00:00"),
    ("cron:0 0 1 * MON", "America/New_York", "2026-11-02T05:00:00"),
    ("cron:0 12 29 2 *", "America/New_York", "2027-03-01T00:00:00"),
    ("cron:@midnight", "America/New_York", "2026-12-31T12:00:00"),
    ("cron:45 23 30,31 * *", "America/New_York", "2026-04-30T12:00:00"),
    # Australia/Sydney: back 2026-04-05 03:00 -> 02:00, forward 2026-10-04
    # 02:00 -> 03:00.
    ("cron:30 2 * * *", "Australia/Sydney", "2026-10-03T00:00:00"),
    ("cron:0 * * * *", "Australia/Sydney", "2026-10-03T15:30:00"),
    ("cron:30 2 * * *", "Australia/Sydney", "2026-04-04T00:00:00"),
    ("cron:30 2 * * *", "Australia/Sydney", "2026-04-04T15:30:00"),
    ("cron:*/30 * * * *", "Australia/Sydney", "2026-04-04T15:45:00"),
    ("cron:0 0 1 1 *", "Australia/Sydney", "2026-06-01T00:00:00"),
    ("cron:0 0 29 2 *", "Australia/Sydney", "2026-01-01T00:00:00"),
    ("cron:0 9 * * MON", "Australia/Sydney", "2026-04-05T00:00:00"),
    ("cron:*/7 * * * *", "Australia/Sydney", "2026-10-03T15:58:00"),
    ("cron:@monthly", "Australia/Sydney", "2026-09-30T00:00:00"),
    # Asia/Kolkata: +05:30, no daylight saving.
    ("cron:0 0 * * *", "Asia/Kolkata", "2026-12-02T00:00:00"),
    ("cron:*/7 * * * *", "Asia/Kolkata", "2026-12-02T17:54:00"),
    ("cron:30 5 31 12 *", "Asia/Kolkata", "2026-06-01T00:00:00"),
    ("cron:0 0 29 2 *", "Asia/Kolkata", "2026-01-01T00:00:00"),
    ("cron:0 12 1 * FRI", "Asia/Kolkata", "2026-12-02T00:00:00"),
    ("cron:@weekly", "Asia/Kolkata", "2026-12-02T00:00:00"),
    ("cron:@yearly", "Asia/Kolkata", "2026-12-31T18:29:00"),
    # Australia/Lord_Howe: daylight saving of half an hour.
    ("cron:15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00"),
    ("cron:45 1 * * *", "Australia/Lord_Howe", "2026-04-04T14:00:00"),
]


def main():
    tzdata = importlib.metadata.version("tzdata")
    out = sys.stdout
    out.write("//! Generated by `python3 scripts/recurrence_cases.py >\n")
    out.write("//! src/rules/recurrence/cases.rs` (brute force over real time with\n")
    out.write(f"//! Python's zoneinfo, tzdata {tzdata}); do not edit by hand.\n\n")
    out.write("/// (spec, zone, after_ms, next_ms); `every:` counts from 0.\n")
    out.write("#[rustfmt::skip]\n")
    out.write("pub const CASES: &[(&str, &str, i64, i64)] = &[\n")
    for spec, zone_name, after_text in CASES:
        after = utc(after_text)
        if spec.startswith("every:"):
            nxt_ms = next_every(spec, ms(after))
            nxt = EPOCH + timedelta(milliseconds=nxt_ms)
        else:
            nxt = next_cron(spec, zone_name, after)
            nxt_ms = ms(nxt)
        local = nxt.astimezone(zoneinfo.ZoneInfo(zone_name))
        out.write(
            f"    // after {after_text}Z: {local.isoformat(timespec='seconds')}"
            f"{' (second pass)' if local.fold else ''}\n"
        )
        out.write(f'    ("{spec}", "{zone_name}", {ms(after)}, {nxt_ms}),\n')
    out.write("];\n")


if __name__ == "__main__":
    main()
