"""Section `memory`: used_memory after N jittered retries against N ZADDs."""

import random
import sys

from .client import info
from .harness import med, now_ms, ok


def run(bench):
    jobs = 50_000 if bench.quick else 500_000
    rounds = max(1, min(bench.rounds, 3))
    res = {"retry": ([], []), "zadd": ([], [])}
    key = "mem:sched"
    for r in range(rounds):
        for m in (["retry", "zadd"] if r % 2 == 0 else ["zadd", "retry"]):
            bench.c.call("FLUSHALL", "SYNC")
            bench.c.call("MEMORY", "PURGE")
            before = int(info(bench.c, "memory")["used_memory"])
            chunk = 10_000
            for i0 in range(0, jobs, chunk):
                cmds = []
                for i in range(i0, min(jobs, i0 + chunk)):
                    member = "job:%012d" % i
                    if m == "retry":
                        cmds.append(["ECHO.RETRY", key, member,
                                     "jitter:exponential:100:10000", "3"])
                    else:
                        cmds.append(["ZADD", key, now_ms() + random.randint(0, 400), member])
                bench.c.pipeline(cmds)
            if bench.c.call("ZCARD", key) != jobs:
                raise RuntimeError("memory: %s wrote a wrong count" % m)
            after = int(info(bench.c, "memory")["used_memory"])
            res[m][0].append(after)
            res[m][1].append(after - before)
        print("  memory round %d/%d done" % (r + 1, rounds), file=sys.stderr)
    bench.c.call("FLUSHALL", "SYNC")
    z, zd = med(res["zadd"][0]), med(res["zadd"][1])
    for m, label in [("zadd", "ZADD"), ("retry", "ECHO.RETRY jitter:exponential:100:10000 3")]:
        a, d = med(res[m][0]), med(res[m][1])
        goal = "≤ 1.01×: %s" % ok(a / z <= 1.01) if m == "retry" else ""
        bench.add("memory, %d jobs" % jobs, label, "%.0f" % a, "bytes used_memory",
                  "", "%.3f× ZADD (growth %.0f B, %.3f×)" % (a / z, d, d / zd), goal,
                  samples=res[m][0])
