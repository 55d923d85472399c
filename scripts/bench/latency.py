"""Section `latency`: server time of one promotion of 1000, and what a
concurrent PING client sees meanwhile."""

import time

from .client import cmdstats, usec_per_call
from .harness import med, ok, rotate, settle, start_pinger, stop_pinger


def run(bench):
    calls = 10 if bench.quick else 40
    methods = [("module", "ECHO.PROMOTE (default LIMIT 1000)"),
               ("lua", "Lua EVALSHA promote, 1000")]
    res = {m: ([], [], []) for m, _ in methods + [("idle", "")]}
    for r in range(bench.rounds):
        for m in rotate(["idle", "module", "lua"], r):
            sched, pend = "lat:sched", "lat:pend"
            bench.c.call("DEL", sched, pend)
            if m != "idle":
                bench.fill_due(sched, 1000 * calls)
                bench.fill_future(sched, 1000)
            settle(bench.c)
            bench.c.call("CONFIG", "RESETSTAT")
            pings = start_pinger(bench.port)
            for _ in range(calls):
                if m == "module":
                    n = bench.c.call("ECHO.PROMOTE", sched, pend)
                elif m == "lua":
                    n = bench.c.call("EVALSHA", bench.sha["promote"], 2, sched, pend, 1000)
                else:
                    n = 1000
                if n != 1000:
                    raise RuntimeError("%s moved %d" % (m, n))
                time.sleep(0.003)
            mx, p99, count = stop_pinger(pings)
            st = cmdstats(bench.c)
            if m != "idle":
                res[m][0].append(usec_per_call(st, "echo.promote" if m == "module" else "evalsha"))
            res[m][1].append(mx)
            res[m][2].append(p99)
            bench.c.call("DEL", sched, pend)
    srv_lua = med(res["lua"][0])
    for m, label in methods:
        s = med(res[m][0])
        goal = "< Lua: %s" % ok(s < srv_lua) if m == "module" else ""
        bench.add("latency, one promote of 1000", label, "%.1f" % s, "µs/call (server)",
                  "%.1f" % s, "%.2f× Lua" % (s / srv_lua), goal, samples=res[m][0],
                  fmt="%.1f")
    for m, label in [("idle", "no promotes (noise floor)")] + methods:
        bench.add("latency, concurrent PING client", "during: " + label,
                  "%.2f" % (med(res[m][1]) * 1000),
                  "ms max PING round trip (p99 %.3f ms)" % (med(res[m][2]) * 1000),
                  samples=[x * 1000 for x in res[m][1]], fmt="%.2f")
