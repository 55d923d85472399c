"""Section `promotion`: ECHO.PROMOTE against the Lua script and the native
commands from the client, warm and cold."""

import sys

from .harness import FUTURE, med, ok, rotate, settle


def run(bench):
    methods = [("module", "ECHO.PROMOTE"),
               ("lua", "Lua EVALSHA (ZRANGEBYSCORE, LPUSH chunks, ZREMRANGEBYRANK)"),
               ("native", "native ZRANGEBYSCORE + LPUSH + ZREMRANGEBYRANK from the client")]

    def rows(section, b, srv, wall, goal_here):
        ms = {m: med(srv[m]) for m, _ in methods}
        for m, label in methods:
            ratio = "%.2f× native, %.2f× Lua (server time)" % (
                ms[m] / ms["native"], ms[m] / ms["lua"])
            goal = ""
            if m == "module" and goal_here:
                goal = "≤ 1.2× native: %s; < Lua: %s" % (
                    ok(ms[m] <= 1.2 * ms["native"]), ok(ms[m] < ms["lua"]))
            bench.add(section, label, "%.0f" % (b / med(wall[m])),
                      "members/s (client wall, median call)", "%.1f" % ms[m], ratio, goal,
                      samples=[b / w for w in wall[m]])

    def check(m, sched, pend, expect_moved):
        # nothing lost or duplicated, earliest-due member at the right end
        if (bench.c.call("LLEN", pend) != expect_moved or bench.c.call("ZCARD", sched) != FUTURE
                or bench.c.call("LINDEX", pend, -1) != b"job:0"):
            raise RuntimeError("%s: wrong result" % m)

    # Warm: rounds of A, B, C (order rotating); in each, the schedule is
    # filled with batch*k due members plus FUTURE not yet due (a schedule
    # also holds future retries; it never empties nor shrinks its hash
    # table below 1/8 full) and promoted by k calls back to back.
    # Median over all calls.
    per_round = [(100, 20), (1000, 8), (10000, 2)]
    if bench.quick:
        per_round = [(100, 5), (1000, 2), (10000, 1)]
    for b, k in per_round:
        srv = {m: [] for m, _ in methods}
        wall = {m: [] for m, _ in methods}
        for r in range(bench.rounds):
            for m, _ in rotate(methods, r):
                sched, pend = "pr:sched", "pr:pend"
                bench.c.call("DEL", sched, pend)
                bench.fill_due(sched, b * k)
                bench.fill_future(sched, FUTURE)
                settle(bench.c)
                for _ in range(k):
                    s_us, w = bench.promote_exactly(m, sched, pend, b, m)
                    srv[m].append(s_us)
                    wall[m].append(w)
                check(m, sched, pend, b * k)
                bench.c.call("DEL", sched, pend)
        print("  promotion batch %d done" % b, file=sys.stderr)
        rows("promotion, batch %d, warm (%d rounds × %d calls in a row)" % (b, bench.rounds, k),
             b, srv, wall, b == 1000)

    # Cold: three schedules filled up front; single calls of A, B, C in
    # turn, so each call finds its set's members out of the CPU caches
    # (as a promoter ticking among other traffic does).
    b, calls = (1000, 10) if bench.quick else (1000, 90)
    keys = {m: ("pr:%s:sched" % m, "pr:%s:pend" % m) for m, _ in methods}
    for m, _ in methods:
        sched, pend = keys[m]
        bench.c.call("DEL", sched, pend)
        bench.fill_due(sched, b * calls)
        bench.fill_future(sched, FUTURE)
    settle(bench.c)
    srv = {m: [] for m, _ in methods}
    wall = {m: [] for m, _ in methods}
    for i in range(calls):
        for m, _ in rotate(methods, i):
            s_us, w = bench.promote_exactly(m, keys[m][0], keys[m][1], b, m)
            srv[m].append(s_us)
            wall[m].append(w)
    for m, _ in methods:
        check(m, keys[m][0], keys[m][1], b * calls)
        bench.c.call("DEL", *keys[m])
    settle(bench.c)
    rows("promotion, batch %d, cold (%d single calls each, interleaved)" % (b, calls),
         b, srv, wall, True)
