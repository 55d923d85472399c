"""Section `spread`: ECHO.SPREAD over 10^3 and 10^6 members."""

from .client import cmdstats, usec_per_call
from .harness import med, now_ms, ok, rotate, settle


def run(bench):
    big = 100_000 if bench.quick else 1_000_000
    w = 1_000_000
    start = now_ms() + 1_000_000
    sets = [("sp:small", 1_000, "10^3"), ("sp:big", big, "10^6" if big == 10 ** 6 else str(big))]
    for key, n, _ in sets:
        bench.c.call("DEL", key)
        bench.fill(key, n, start, w // n, "s:", 0)
    calls = 40
    res = {k: [] for k, _, _ in sets}
    for r in range(3 * bench.rounds):
        for key, n, _ in rotate(sets, r):
            settle(bench.c)
            bench.c.call("CONFIG", "RESETSTAT")
            for _ in range(calls):
                counts = bench.c.call("ECHO.SPREAD", key, start, start + w, 20)
            if sum(counts) != n or len(counts) != 20:
                raise RuntimeError("spread %s: %r" % (key, counts))
            res[key].append(usec_per_call(cmdstats(bench.c), "echo.spread"))
    small = med(res["sp:small"])
    for key, n, label in sets:
        v = med(res[key])
        goal = "about the same: %s" % ok(v / small <= 1.5) if key == "sp:big" else ""
        bench.add("ECHO.SPREAD, 20 buckets (%d rounds of %d calls)" % (3 * bench.rounds, calls),
                  "%s members" % label, "%.1f" % v,
                  "µs/call (server)", "%.1f" % v, "%.2f× 10^3" % (v / small), goal,
                  samples=res[key], fmt="%.1f")
    bench.c.call("DEL", *[k for k, _, _ in sets])
    settle(bench.c)
