"""Section `auto_promote`: the server's own promotion timer, fire time to BRPOP
and the drain of a backlog."""

import threading
import time

from .client import Conn
from .harness import med, ok, settle, start_pinger, stop_pinger


def run(bench):
    """Promotion inside the server: fire time to BRPOP, and a backlog."""
    jobs = 60 if bench.quick else 200
    window_ms = 1000 if bench.quick else 2000
    sched, pend = "ap:sched", "ap:pend"
    for interval_ms in (10, 1):
        lags = []          # every job of every round, ms
        round_medians = []
        for r in range(bench.rounds):
            bench.c.call("DEL", sched, pend)
            bench.c.call("CONFIG", "SET", "echomq.auto-promote-interval-ms", interval_ms,
                         "echomq.auto-promote-limit", 1000,
                         "echomq.auto-promote", "%s %s" % (sched, pend))
            got = []
            consumer = Conn(bench.port)

            def consume():
                while len(got) < jobs:
                    reply = consumer.call("BRPOP", pend, 30)
                    if reply is None:
                        raise RuntimeError("BRPOP timed out: nothing promoted")
                    got.append((reply[1], time.time() * 1000.0))

            t = threading.Thread(target=consume, daemon=True)
            t.start()
            time.sleep(0.05)
            cmds = [["MULTI"]] + [["ECHO.RETRY", sched, "ap:%d:%d" % (r, i),
                                    "jitter:fixed:%d" % window_ms, 1]
                                   for i in range(jobs)] + [["EXEC"]]
            fires = bench.c.pipeline(cmds)[-1]
            fire_of = {b"ap:%d:%d" % (r, i): f for i, f in enumerate(fires)}
            t.join(timeout=window_ms / 1000 + 30)
            consumer.close()
            mine = sorted(at - fire_of[job] for job, at in got)
            lags += mine
            round_medians.append(med(mine))
        lags.sort()
        pct = lambda q: lags[min(len(lags) - 1, int(len(lags) * q))]
        goal = "median <= %d ms: %s" % (interval_ms + 2, ok(med(lags) <= interval_ms + 2))
        bench.add("auto-promote, fire time to BRPOP", "interval %d ms (%d jobs x %d rounds)"
                  % (interval_ms, jobs, bench.rounds), "%.1f" % med(lags),
                  "ms median lag (p90 %.1f, p99 %.1f, max %.1f, min %.1f)"
                  % (pct(0.9), pct(0.99), lags[-1], lags[0]),
                  ratio="%.2f× interval" % (med(lags) / interval_ms), goal=goal,
                  samples=round_medians, fmt="%.1f")
    bench.c.call("CONFIG", "SET", "echomq.auto-promote", "")
    bench.c.call("DEL", sched, pend)

    # A backlog: 100k due, interval 200 ms, limit 1000, PING alongside.
    n = 20_000 if bench.quick else 100_000
    drains, pings_max, pings_p99 = [], [], []
    for r in range(min(bench.rounds, 3)):
        bench.c.call("CONFIG", "SET", "echomq.auto-promote", "")
        bench.c.call("DEL", sched, pend)
        bench.fill_due(sched, n)
        bench.c.call("CONFIG", "SET", "echomq.auto-promote-interval-ms", 200,
                     "echomq.auto-promote-limit", 1000)
        settle(bench.c)
        pings = start_pinger(bench.port)
        t0 = time.perf_counter()
        bench.c.call("CONFIG", "SET", "echomq.auto-promote", "%s %s" % (sched, pend))
        while bench.c.call("EXISTS", sched):
            time.sleep(0.001)
        drains.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.05)
        mx, p99, _ = stop_pinger(pings)
        pings_max.append(mx * 1000)
        pings_p99.append(p99 * 1000)
        if bench.c.call("LLEN", pend) != n:
            raise RuntimeError("backlog: pending holds %s" % bench.c.call("LLEN", pend))
    bench.c.call("CONFIG", "SET", "echomq.auto-promote", "",
                 "echomq.auto-promote-interval-ms", 10)
    bench.c.call("DEL", sched, pend)
    settle(bench.c)
    bench.add("auto-promote, backlog", "%d due, interval 200 ms, limit 1000" % n,
              "%.0f" % med(drains), "ms to drain (%d full ticks)" % (n // 1000),
              ratio="%.3f× one interval per tick" % (med(drains) / (n // 1000 * 200)),
              goal="well under 1 s: %s" % ok(med(drains) < 1000), samples=drains)
    bench.add("auto-promote, backlog", "concurrent PING during the drain",
              "%.2f" % med(pings_max), "ms max PING round trip (p99 %.3f ms)" % med(pings_p99),
              goal="a few ms: %s" % ok(med(pings_max) < 5), samples=pings_max, fmt="%.2f")
