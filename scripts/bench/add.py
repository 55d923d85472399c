"""Section `add`: what a first run costs the server through ECHO.ADD's fast
path (a schedule with no limit, no hold: straight into the stream) against
the write a producer makes itself, as the libraries' adds with new ids send
them: HSET of the payload and the enqueue, in transactions of 1000."""

import sys

from .client import cmdstats, usec_per_call
from .harness import med, ok, rotate, settle

SCHEDULE, PENDING, JOBS = "{add}:schedule", "{add}:pending", "{add}:jobs"


def run(bench):
    """Server µs per job from INFO commandstats (reset before each batch):
    the HSET plus the enqueue, `XADD pending * job <id>` against
    `ECHO.ADD schedule pending <id>`, the two alternating by round, order
    rotating. The stream and its group exist, as a worker made them."""
    n = 2000 if bench.quick else 20_000
    variants = [("xadd", "HSET + XADD (a producer's own write)"),
                ("echo.add", "HSET + ECHO.ADD, fast path (the libraries' add)")]
    per_job = {v: [] for v, _ in variants}
    job = [0]

    def batch(enqueue):
        cmds = []
        for _ in range(1000):
            job[0] += 1
            jid = "job:%012d" % job[0]
            cmds.append(["HSET", JOBS, jid, "payload-0123456789"])
            if enqueue == "xadd":
                cmds.append(["XADD", PENDING, "*", "job", jid])
            else:
                cmds.append(["ECHO.ADD", SCHEDULE, PENDING, jid])
        bench.c.pipeline([["MULTI"]] + cmds + [["EXEC"]])

    for r in range(bench.rounds + 1):  # the first round warms up
        for enqueue, _ in rotate(variants, r):
            bench.c.call("DEL", JOBS, PENDING)
            bench.c.call("XGROUP", "CREATE", PENDING, "workers", "0", "MKSTREAM")
            settle(bench.c)
            bench.c.call("CONFIG", "RESETSTAT")
            for _ in range(n // 1000):
                batch(enqueue)
            st = cmdstats(bench.c)
            if bench.c.call("XLEN", PENDING) != n or st.get(enqueue, (0, 0))[0] != n:
                raise RuntimeError("add: %s wrote %s entries" % (enqueue, bench.c.call("XLEN", PENDING)))
            if r > 0:
                per_job[enqueue].append(usec_per_call(st, "hset") + usec_per_call(st, enqueue))
        print("  add round %d/%d done" % (r, bench.rounds), file=sys.stderr)
    bench.c.call("DEL", JOBS, PENDING, SCHEDULE)
    base = med(per_job["xadd"])
    pairs = [e / x for e, x in zip(per_job["echo.add"], per_job["xadd"])]
    for enqueue, label in variants:
        ratio, goal = "", ""
        if enqueue == "echo.add":
            ratio = "%.2f× HSET + XADD (median of per-round ratios %.2f×)" % (
                med(per_job[enqueue]) / base, med(pairs))
            goal = "≤ 1.05×: %s" % ok(med(per_job[enqueue]) <= 1.05 * base)
        bench.add("add, %d jobs in transactions of 1000" % n, label, "%.3f" % med(per_job[enqueue]),
                  "µs/job (server)", "", ratio, goal, samples=per_job[enqueue], fmt="%.3f")
