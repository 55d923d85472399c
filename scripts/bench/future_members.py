"""Section `future_members`: ECHO.PROMOTE of 1000 due members beside 10^4 and
2·10^6 not yet due."""

import sys
import time

from .harness import med, ok, rotate, settle


def run(bench):
    big = 200_000 if bench.quick else 2_000_000
    sets = [("fm:small", 10_000, "10^4"),
            ("fm:big", big, "2·10^6" if big == 2_000_000 else str(big))]
    t0 = time.perf_counter()
    for key, n, _ in sets:
        bench.c.call("DEL", key)
        got = bench.fill_future(key, n, "f:")
        if got != n:
            raise RuntimeError("fill %s: %d" % (key, got))
    print("  built %s future members in %.1f s" % (
        " + ".join(str(n) for _, n, _ in sets), time.perf_counter() - t0), file=sys.stderr)
    calls = 15 if bench.quick else 60
    res = {key: [] for key, _, _ in sets}
    settle(bench.c)
    for i in range(calls):
        for key, n, _ in rotate(sets, i):
            bench.fill_due(key, 1000)
            moved, s, _ = bench.promote_call("module", key, "fm:pend", 1000)
            if moved != 1000:
                raise RuntimeError("moved %d" % moved)
            res[key].append(s)
            bench.c.call("DEL", "fm:pend")
    for key, n, _ in sets:
        if bench.c.call("ZCARD", key) != n:
            raise RuntimeError("future members were moved")
    small = med(res["fm:small"])
    for key, n, label in sets:
        v = med(res[key])
        goal = ""
        if key == "fm:big":
            goal = "≤ 1.5×: %s" % ok(v / small <= 1.5)
        bench.add("promote 1000 due beside N future members (%d calls each)" % calls,
                  "ECHO.PROMOTE, N = %s" % label,
                  "%.1f" % v, "µs/call (server)", "%.1f" % v,
                  "%.2f× N = 10^4" % (v / small), goal, samples=res[key], fmt="%.0f")
    bench.c.call("DEL", *[k for k, _, _ in sets])
    settle(bench.c)
