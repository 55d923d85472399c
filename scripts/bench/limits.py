"""Section `limits`: what a release limit costs by itself. (a) ECHO.PROMOTE of
1000 through a limit that allows them all against the same promote with no
limit configured; (b) the auto-promote timer's ticks over 1000 pairs whose
limit (or hold) allows nothing, against idle ticks over 1000 pairs with
nothing due and no limit."""

import random
import sys
import time

from .client import info
from .harness import FUTURE, med, ok, settle

LIMITED = "{lim}:schedule"
ALLOW_ALL = LIMITED + " 1000000/s 1000000"


def run(bench):
    promote_through_limit(bench)
    ticks_over_limited_pairs(bench)


def set_limits(bench, text):
    bench.c.call("CONFIG", "SET", "echomq.release-limits", text)


def promote_through_limit(bench):
    """(a) Server time of ECHO.PROMOTE ... LIMIT 1000 (INFO commandstats reset
    right before each call, as in the promotion section). The config is set
    before each call, so the rows without a limit run with
    echomq.release-limits empty (no lookup at all) and the limited row with
    only its own schedule listed. A fourth row promotes a schedule that is not
    listed while another is (a lookup that finds nothing); a second row
    without a limit is an A/A control, the measurement's resolution."""
    b = 1000
    variants = [
        ("plain", "ECHO.PROMOTE, echomq.release-limits empty", "{pl}", ""),
        ("aa", "ECHO.PROMOTE, echomq.release-limits empty (again: A/A control)", "{aa}", ""),
        ("lim", "ECHO.PROMOTE through %s 1000000/s 1000000 (allows all)" % LIMITED, "{lim}",
         ALLOW_ALL),
        ("other", "ECHO.PROMOTE of a schedule not listed while %s is" % LIMITED, "{ot}",
         ALLOW_ALL),
    ]
    keys = {v[0]: (v[2] + ":schedule", v[2] + ":pending") for v in variants}

    def check(vid, moved_total):
        sched, pend = keys[vid]
        if (bench.c.call("LLEN", pend) != moved_total or bench.c.call("ZCARD", sched) != FUTURE
                or bench.c.call("LINDEX", pend, -1) != b"job:0"):
            raise RuntimeError("limits (a) %s: wrong result" % vid)

    def rows(title, srv):
        m = {v[0]: med(srv[v[0]]) for v in variants}

        def rr(x, y):
            return med([p / q for p, q in zip(srv[x], srv[y])])

        for vid, label, _, _ in variants:
            goal = ""
            if vid == "plain":
                ratio = "1.000× no limit"
            else:
                ratio = "%.3f× no limit (median of per-call ratios %.3f×)" % (
                    m[vid] / m["plain"], rr(vid, "plain"))
            if vid == "lim":
                goal = "≤ 1.05× no limit: %s" % ok(m[vid] / m["plain"] <= 1.05)
            bench.add(title, label, "%.1f" % m[vid], "µs/call (server)", "%.1f" % m[vid], ratio,
                      goal, samples=srv[vid], fmt="%.0f")

    shuffler = random.Random(11)
    # Warm: rounds of every row in a shuffled order; each row's schedule filled
    # with k*1000 due (+ FUTURE not yet due), then k calls in a row.
    k = 8
    rounds = bench.rounds * (1 if bench.quick else 3)
    srv = {v[0]: [] for v in variants}
    for _ in range(rounds):
        order = list(variants)
        shuffler.shuffle(order)
        for vid, _, _, cfg in order:
            sched, pend = keys[vid]
            bench.c.call("DEL", sched, pend)
            bench.fill_due(sched, b * k)
            bench.fill_future(sched, FUTURE)
            settle(bench.c)
            set_limits(bench, cfg)
            for _ in range(k):
                s_us, _ = bench.promote_exactly("module", sched, pend, b, vid)
                srv[vid].append(s_us)
            check(vid, b * k)
            bench.c.call("DEL", sched, pend)
    settle(bench.c)
    print("  limits (a) warm done", file=sys.stderr)
    rows("release limit, ECHO.PROMOTE 1000, warm (%d rounds × %d calls in a row)" % (rounds, k),
         srv)

    # Cold: all schedules filled up front; single calls of each row in turn
    # (a fresh order each turn), the config set before each.
    calls = 10 if bench.quick else 150
    for vid, _, _, _ in variants:
        sched, pend = keys[vid]
        bench.c.call("DEL", sched, pend)
        bench.fill_due(sched, b * calls)
        bench.fill_future(sched, FUTURE)
    settle(bench.c)
    srv = {v[0]: [] for v in variants}
    for _ in range(calls):
        order = list(variants)
        shuffler.shuffle(order)
        for vid, _, _, cfg in order:
            set_limits(bench, cfg)
            s_us, _ = bench.promote_exactly("module", keys[vid][0], keys[vid][1], b, vid)
            srv[vid].append(s_us)
    for vid, _, _, _ in variants:
        check(vid, b * calls)
        bench.c.call("DEL", *keys[vid])
    set_limits(bench, "")
    settle(bench.c)
    print("  limits (a) cold done", file=sys.stderr)
    rows("release limit, ECHO.PROMOTE 1000, cold (%d single calls each, interleaved)" % calls,
         srv)


def cpu_seconds(bench):
    i = info(bench.c, "cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


def ticks(bench):
    return int(info(bench.c, "echomq")["echomq_auto_promote_ticks"])


# how often the measuring window polls the tick counter, and the fewest
# whole ticks it spans (a tick over 1000 pairs that are not skipped takes
# about as many event-loop turns, seconds of wall time)
POLL_S = 0.02
MIN_TICKS = 2


def window_edge(bench, vid):
    """(server CPU seconds, ticks, client time) right after the tick counter
    moved, so that a window spans whole ticks (with no pairs: now)."""
    k = ticks(bench)
    if vid != "none":
        deadline = time.perf_counter() + 30
        while ticks(bench) == k:
            if time.perf_counter() > deadline:
                raise RuntimeError("limits (b) %s: no tick in 30 s" % vid)
            time.sleep(POLL_S)
        k = ticks(bench)
    return cpu_seconds(bench), k, time.perf_counter()


def ticks_over_limited_pairs(bench):
    """(b) echomq.auto-promote-interval-ms 1 over 1000 pairs; per variant and
    round: the server's CPU (INFO cpu, user + sys) over at least `seconds`
    and MIN_TICKS whole ticks (from one change of echomq_auto_promote_ticks
    to another, polled every POLL_S), divided by the ticks counted, after a
    warm-up. Variants, in a rotating order each round:
      held:  every schedule has due members and is held (ECHO.HOLD s 86400000);
      spent: every schedule has due members and is listed at 1/h burst 1,
             its burst spent by one ECHO.PROMOTE each before the timer starts;
      empty: the baseline, no limit and no hold, nothing due (only members
             due in 11 days), so a tick opens each pair's keys and finds nothing;
      none:  echomq.auto-promote empty (no timer): the server's own idle CPU.
    The latency monitor (threshold 1 ms) counts the ticks that took >= 1 ms."""
    n = 1000
    due, future = 20, 10
    seconds = 1.0 if bench.quick else 2.0
    warm_s = 0.5
    rounds = 2 if bench.quick else max(3, min(bench.rounds, 5))
    names = {s: [("{b%s%d}:schedule" % (s, i), "{b%s%d}:pending" % (s, i)) for i in range(n)]
             for s in ("held", "spent", "empty")}
    all_keys = [k for pairs in names.values() for pair in pairs for k in pair]
    bench.c.call("CONFIG", "SET", "echomq.auto-promote", "")
    set_limits(bench, "")
    for i in range(0, len(all_keys), 1000):
        bench.c.call("DEL", *all_keys[i:i + 1000])
    for s, pairs in names.items():
        for sched, _ in pairs:
            if s != "empty":
                bench.fill_due(sched, due)
            bench.fill_future(sched, future)
    settle(bench.c)
    pair_text = {s: " ".join("%s %s" % p for p in pairs) for s, pairs in names.items()}
    pair_text["none"] = ""
    spent_limits = " ".join("%s 1/h 1" % sched for sched, _ in names["spent"])
    variants = [
        ("held", "1000 pairs, each with %d due members, held (ECHO.HOLD s 86400000)" % due),
        ("spent", "1000 pairs, each with due members, limited at 1/h burst 1, burst spent"),
        ("empty", "baseline: 1000 pairs, no limit or hold, nothing due (%d future members each)"
         % future),
        ("none", "no pairs (echomq.auto-promote empty): the server's idle CPU"),
    ]
    per_tick = {v[0]: [] for v in variants}
    per_sec = {v[0]: [] for v in variants}
    tps = {v[0]: [] for v in variants}
    slow = {v[0]: [] for v in variants}
    worst = {v[0]: 0 for v in variants}
    spent_rounds = 0
    bench.c.call("CONFIG", "SET", "latency-monitor-threshold", 1)
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for vid, _ in order:
            if vid == "held":
                bench.c.pipeline([["ECHO.HOLD", s, 86_400_000] for s, _ in names["held"]])
            set_limits(bench, spent_limits if vid == "spent" else "")
            if vid == "spent":
                # spend each burst (1 member) by a client's promote, so the
                # timer's first tick already finds every limit empty
                moved = bench.c.pipeline([["ECHO.PROMOTE", s, p] for s, p in names["spent"]])
                if any(m != 1 for m in moved):
                    raise RuntimeError("limits (b): spending the bursts moved %r" % moved[:5])
            bench.c.call("CONFIG", "SET", "echomq.auto-promote-interval-ms", 1,
                         "echomq.auto-promote", pair_text[vid])
            time.sleep(warm_s)
            bench.c.call("LATENCY", "RESET")
            c0, k0, t0 = window_edge(bench, vid)
            while True:
                time.sleep(POLL_S)
                if time.perf_counter() - t0 >= seconds and (vid == "none"
                                                             or ticks(bench) - k0 >= MIN_TICKS):
                    break
            c1, k1, t1 = window_edge(bench, vid)
            hist = bench.c.call("LATENCY", "HISTORY", "echomq-auto-promote") or []
            bench.c.call("CONFIG", "SET", "echomq.auto-promote", "")
            if vid == "held":
                bench.c.pipeline([["ECHO.HOLD", s, 0] for s, _ in names["held"]])
            if vid == "spent":
                spent_rounds += 1
            cpu = c1 - c0
            dt = t1 - t0
            dk = k1 - k0
            if vid != "none":
                if dk <= 0:
                    raise RuntimeError("limits (b) %s: no tick counted" % vid)
                per_tick[vid].append(cpu * 1e6 / dk)
                tps[vid].append(dk / dt)
            per_sec[vid].append(cpu * 1000 / dt)
            slow[vid].append(len(hist))
            worst[vid] = max([worst[vid]] + [h[1] for h in hist])
        print("  limits (b) round %d/%d done" % (r + 1, rounds), file=sys.stderr)
    set_limits(bench, "")
    # nothing moved from a held schedule, one member per round from each spent one
    held_moved = sum(bench.c.call("LLEN", p) for _, p in names["held"])
    spent_moved = [bench.c.call("LLEN", p) for _, p in names["spent"]]
    if held_moved != 0 or any(x != spent_rounds for x in spent_moved):
        raise RuntimeError("limits (b): held moved %d, spent moved %s (expected 0 and %d each)"
                           % (held_moved, sorted(set(spent_moved)), spent_rounds))
    bench.c.call("CONFIG", "SET", "echomq.auto-promote-interval-ms", 10,
                 "latency-monitor-threshold", 0)
    bench.c.call("LATENCY", "RESET")
    for i in range(0, len(all_keys), 1000):
        bench.c.call("DEL", *all_keys[i:i + 1000])
    settle(bench.c)

    title = ("release limit, auto-promote ticks over 1000 pairs, interval 1 ms (%d rounds × %.0f s)"
             % (rounds, seconds))
    base = med(per_tick["empty"])
    for vid, label in variants:
        if vid == "none":
            bench.add(title, label, "%.1f" % med(per_sec[vid]), "server CPU ms per second",
                      samples=per_sec[vid], fmt="%.1f")
            continue
        v = med(per_tick[vid])
        unit = ("µs server CPU per tick (%.1f ticks/s; CPU %.0f ms/s; ticks ≥ 1 ms in the "
                "latency monitor: %d per round, max %d ms)"
                % (med(tps[vid]), med(per_sec[vid]), med(slow[vid]), worst[vid]))
        ratio, goal = "", ""
        if vid in ("held", "spent"):
            ratio = "%.4f× the baseline tick (%+.1f ms)" % (v / base, (v - base) / 1000)
            goal = "< 1 ms per tick: %s" % ok(v < 1000)
        bench.add(title, label, "%.1f" % v, unit, ratio=ratio, goal=goal,
                  samples=per_tick[vid], fmt="%.1f")
