"""Section `limits`: what a release limit costs by itself. (a) ECHO.PROMOTE of
1000 through a limit that allows them all, and through one that binds,
against the same promote with no limit configured; (b) the auto-promote
timer's ticks over 1000 pairs whose limit (or hold) allows nothing, against
idle ticks over 1000 pairs with nothing due and no limit; and ticks over 1000
limited pairs whose limit allows, each pair's state key read and written
every tick, against the same ticks with no limit."""

import random
import sys
import time

from .client import info
from .harness import FUTURE, med, ok, settle

LIMITED = "{lim}:schedule"
ALLOW_ALL = LIMITED + " 1000000/s 1000000"
# A limit whose burst is the call's 1000: each promote empties the bucket.
# The bench writes the bucket back full (a state key whose TAT is 0) before
# each call, outside the measured time, so every call reads and decodes a
# state key that is there and writes it again.
BINDING = "{bd}:schedule"
BIND = BINDING + " 1000/s 1000"
STATE_SUFFIX = ":echomq-limit"


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
        ("bind", "ECHO.PROMOTE through %s (binds: a state key there read and written each call)"
         % BIND, "{bd}", BIND),
    ]
    keys = {v[0]: (v[2] + ":schedule", v[2] + ":pending") for v in variants}
    full = full_bucket(bench)

    def before_call(vid):
        # every row's call follows one SET, so that only the key differs
        if vid == "bind":
            bench.c.call("SET", BINDING + STATE_SUFFIX, full)
        else:
            bench.c.call("SET", "{bench}:limits-scratch", full)

    def after_call(vid):
        # the binding limit's call must have written its state (an emptied bucket)
        if vid == "bind" and bench.c.call("GET", BINDING + STATE_SUFFIX) in (None, full):
            raise RuntimeError("limits (a) bind: the state key was not written")

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
            if vid in ("lim", "bind"):
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
                before_call(vid)
                s_us, _ = bench.promote_exactly("module", sched, pend, b, vid)
                after_call(vid)
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
            before_call(vid)
            s_us, _ = bench.promote_exactly("module", keys[vid][0], keys[vid][1], b, vid)
            after_call(vid)
            srv[vid].append(s_us)
    for vid, _, _, _ in variants:
        check(vid, b * calls)
        bench.c.call("DEL", *keys[vid])
    bench.c.call("DEL", BINDING + STATE_SUFFIX, "{bench}:limits-scratch")
    set_limits(bench, "")
    settle(bench.c)
    print("  limits (a) cold done", file=sys.stderr)
    rows("release limit, ECHO.PROMOTE 1000, cold (%d single calls each, interleaved)" % calls,
         srv)


def full_bucket(bench):
    """The state key's text of BIND with a full bucket: what the module
    writes after one release, with its TAT (the last word) set to 0."""
    sched, pend = BINDING, "{bd}:pending"
    bench.c.call("DEL", sched, pend, sched + STATE_SUFFIX)
    bench.fill_due(sched, 1)
    set_limits(bench, BIND)
    if bench.c.call("ECHO.PROMOTE", sched, pend, "LIMIT", 1) != 1:
        raise RuntimeError("limits (a) bind: the priming promote moved nothing")
    text = bench.c.call("GET", sched + STATE_SUFFIX)
    bench.c.call("DEL", sched, pend, sched + STATE_SUFFIX)
    set_limits(bench, "")
    if not text:
        raise RuntimeError("limits (a) bind: no state key after a release")
    return b" ".join(text.split(b" ")[:-1] + [b"0"])


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
    """(server CPU seconds, ticks, members the timer moved, client time)
    right after the tick counter moved, so that a window spans whole ticks
    (with no pairs: now)."""
    k = ticks(bench)
    if vid != "none":
        deadline = time.perf_counter() + 30
        while ticks(bench) == k:
            if time.perf_counter() > deadline:
                raise RuntimeError("limits (b) %s: no tick in 30 s" % vid)
            time.sleep(POLL_S)
    i = info(bench.c, "echomq")
    return (cpu_seconds(bench), int(i["echomq_auto_promote_ticks"]),
            int(i["echomq_auto_promoted"]), time.perf_counter())


# The lanes whose limit allows: each pair releases one member a tick
# (echomq.auto-promote-limit 1), from MOVE_DUE due members filled afresh each
# round (a tick then follows at once: about 100 ticks a second, so a round's
# warm-up and window of MOVE_SECONDS use about a hundred of them). The limit
# 10/s with a burst of 10^6 never binds here, and its TAT runs ahead of now
# (100 ms a member, far more than a tick), so its state key is there at every
# read: each tick reads, decodes and writes 1000 state keys.
MOVE_DUE = 500
MOVE_SECONDS = 0.5
MOVE_WARM_S = 0.2
ALLOWING = " 10/s 1000000"


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
      none:  echomq.auto-promote empty (no timer): the server's own idle CPU;
      allow: every schedule has due members and is listed at ALLOWING, the
             timer moving one member a pair a tick (auto-promote-limit 1), so
             each tick reads and writes 1000 state keys;
      move1: its baseline: the same with no limit.
    The latency monitor (threshold 1 ms) counts the ticks that took >= 1 ms."""
    n = 1000
    due, future = 20, 10
    seconds = 1.0 if bench.quick else 2.0
    warm_s = 0.5
    rounds = 2 if bench.quick else max(3, min(bench.rounds, 5))
    names = {s: [("{b%s%d}:schedule" % (s, i), "{b%s%d}:pending" % (s, i)) for i in range(n)]
             for s in ("held", "spent", "empty", "allow", "move1")}
    moving = ("allow", "move1")
    state_keys = [sched + STATE_SUFFIX for sched, _ in names["allow"]]
    # the spent bursts' state lives in the keyspace (for an hour): deleted
    # before each round's spending, as a config change no longer resets it
    spent_keys = [sched + STATE_SUFFIX for sched, _ in names["spent"]]
    all_keys = ([k for pairs in names.values() for pair in pairs for k in pair] + state_keys
                + spent_keys)

    def delete(keys):
        for i in range(0, len(keys), 1000):
            bench.c.call("DEL", *keys[i:i + 1000])

    bench.c.call("CONFIG", "SET", "echomq.auto-promote", "")
    set_limits(bench, "")
    delete(all_keys)
    for s, pairs in names.items():
        if s in moving:
            continue
        for sched, _ in pairs:
            if s != "empty":
                bench.fill_due(sched, due)
            bench.fill_future(sched, future)
    settle(bench.c)
    pair_text = {s: " ".join("%s %s" % p for p in pairs) for s, pairs in names.items()}
    pair_text["none"] = ""
    spent_limits = " ".join("%s 1/h 1" % sched for sched, _ in names["spent"])
    allow_limits = " ".join(sched + ALLOWING for sched, _ in names["allow"])
    variants = [
        ("held", "1000 pairs, each with %d due members, held (ECHO.HOLD s 86400000)" % due),
        ("spent", "1000 pairs, each with due members, limited at 1/h burst 1, burst spent"),
        ("empty", "baseline: 1000 pairs, no limit or hold, nothing due (%d future members each)"
         % future),
        ("none", "no pairs (echomq.auto-promote empty): the server's idle CPU"),
        ("allow", "1000 pairs limited at%s (allows), 1 member each a tick: 1000 state keys "
         "read and written a tick" % ALLOWING),
        ("move1", "its baseline: 1000 pairs, no limit, 1 member each a tick "
         "(echomq.auto-promote-limit 1)"),
    ]
    per_tick = {v[0]: [] for v in variants}
    per_sec = {v[0]: [] for v in variants}
    tps = {v[0]: [] for v in variants}
    moved_per_tick = {v[0]: [] for v in variants}
    slow = {v[0]: [] for v in variants}
    worst = {v[0]: 0 for v in variants}
    spent_rounds = 0
    bench.c.call("CONFIG", "SET", "latency-monitor-threshold", 1)
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for vid, _ in order:
            if vid == "held":
                bench.c.pipeline([["ECHO.HOLD", s, 86_400_000] for s, _ in names["held"]])
            if vid in moving:
                for i in range(0, n, 100):
                    bench.c.pipeline([["EVALSHA", bench.sha["fill"], 1, sched, MOVE_DUE,
                                       int(time.time() * 1000) - 10_000_000, 1, "job:", 0]
                                      for sched, _ in names[vid][i:i + 100]])
                bench.c.call("CONFIG", "SET", "echomq.auto-promote-limit", 1)
                settle(bench.c)
            set_limits(bench, {"spent": spent_limits, "allow": allow_limits}.get(vid, ""))
            if vid == "spent":
                # spend each burst (1 member) by a client's promote, so the
                # timer's first tick already finds every limit empty
                delete(spent_keys)
                moved = bench.c.pipeline([["ECHO.PROMOTE", s, p] for s, p in names["spent"]])
                if any(m != 1 for m in moved):
                    raise RuntimeError("limits (b): spending the bursts moved %r" % moved[:5])
            bench.c.call("CONFIG", "SET", "echomq.auto-promote-interval-ms", 1,
                         "echomq.auto-promote", pair_text[vid])
            time.sleep(MOVE_WARM_S if vid in moving else warm_s)
            bench.c.call("LATENCY", "RESET")
            span = MOVE_SECONDS if vid in moving else seconds
            c0, k0, p0, t0 = window_edge(bench, vid)
            while True:
                time.sleep(POLL_S)
                if time.perf_counter() - t0 >= span and (vid == "none"
                                                         or ticks(bench) - k0 >= MIN_TICKS):
                    break
            c1, k1, p1, t1 = window_edge(bench, vid)
            hist = bench.c.call("LATENCY", "HISTORY", "echomq-auto-promote") or []
            bench.c.call("CONFIG", "SET", "echomq.auto-promote", "")
            if vid == "held":
                bench.c.pipeline([["ECHO.HOLD", s, 0] for s, _ in names["held"]])
            if vid == "spent":
                spent_rounds += 1
            if vid in moving:
                # every pair must still have had a due member at every tick
                left = bench.c.pipeline([["ZCARD", sched] for sched, _ in names[vid]])
                if min(left) == 0:
                    raise RuntimeError("limits (b) %s: a schedule ran out of due members "
                                       "(raise MOVE_DUE)" % vid)
                if vid == "allow":
                    there = sum(bench.c.pipeline([["EXISTS", k] for k in state_keys]))
                    if there != n:
                        raise RuntimeError("limits (b) allow: %d of %d state keys there"
                                           % (there, n))
                set_limits(bench, "")
                bench.c.call("CONFIG", "SET", "echomq.auto-promote-limit", 1000)
                delete([k for pair in names[vid] for k in pair]
                       + (state_keys if vid == "allow" else []))
                settle(bench.c)
            cpu = c1 - c0
            dt = t1 - t0
            dk = k1 - k0
            if vid != "none":
                if dk <= 0:
                    raise RuntimeError("limits (b) %s: no tick counted" % vid)
                per_tick[vid].append(cpu * 1e6 / dk)
                tps[vid].append(dk / dt)
                moved_per_tick[vid].append((p1 - p0) / dk)
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
    delete(all_keys)
    settle(bench.c)

    title = ("release limit, auto-promote ticks over 1000 pairs, interval 1 ms (%d rounds × %.0f s"
             ", the moving lanes %.1f s)" % (rounds, seconds, MOVE_SECONDS))
    base = med(per_tick["empty"])
    for vid, label in variants:
        if vid == "none":
            bench.add(title, label, "%.1f" % med(per_sec[vid]), "server CPU ms per second",
                      samples=per_sec[vid], fmt="%.1f")
            continue
        v = med(per_tick[vid])
        unit = ("µs server CPU per tick (%.1f ticks/s; %.0f members moved a tick; CPU %.0f ms/s; "
                "ticks ≥ 1 ms in the latency monitor: %d per round, max %d ms)"
                % (med(tps[vid]), med(moved_per_tick[vid]), med(per_sec[vid]), med(slow[vid]),
                   worst[vid]))
        ratio, goal = "", ""
        if vid in ("held", "spent"):
            ratio = "%.4f× the baseline tick (%+.1f ms)" % (v / base, (v - base) / 1000)
            goal = "< 1 ms per tick: %s" % ok(v < 1000)
        if vid == "allow":
            b1 = med(per_tick["move1"])
            rr = med([a / m for a, m in zip(per_tick["allow"], per_tick["move1"])])
            ratio = ("%.3f× its baseline (per-round ratios %.3f×): %+.2f µs a pair"
                     % (v / b1, rr, (v - b1) / n))
            goal = "≤ 1.05× per member: %s" % ok(v / b1 <= 1.05)
        bench.add(title, label, "%.1f" % v, unit, ratio=ratio, goal=goal,
                  samples=per_tick[vid], fmt="%.1f")
