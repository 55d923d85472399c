"""Section `promote_stream`: ECHO.PROMOTE into a stream against into a list."""

import sys

from .client import ReplyError, cmdstats, encode
from .harness import FUTURE, med, ok, rotate, settle


def run(bench):
    """ECHO.PROMOTE of 1000 due members into a stream (one entry
    `job <member>` each, the group `workers` present, as the workers
    create it) against into a list. Same schedules (1000·k due
    beside FUTURE not yet due), same call; the layouts alternate. Warm:
    rounds of k calls in a row per layout (order rotating); cold: both
    filled up front, single calls of each in turn. Server time from INFO
    commandstats reset right before each call."""
    b = 1000
    layouts = [("list", "ECHO.PROMOTE 1000 into a list"),
               ("stream", "ECHO.PROMOTE 1000 into a stream (group `workers`)")]

    def prepare(layout, sched, pend, due):
        bench.c.call("DEL", sched, pend)
        bench.fill_due(sched, due)
        bench.fill_future(sched, FUTURE)
        if layout == "stream":
            bench.c.call("XGROUP", "CREATE", pend, "workers", "$", "MKSTREAM")

    def check(layout, sched, pend, expect):
        # nothing lost or duplicated, the earliest-due member first out
        if layout == "stream":
            length = bench.c.call("XLEN", pend)
            first = bench.c.call("XRANGE", pend, "-", "+", "COUNT", 1)[0][1]
            ok_ = first == [b"job", b"job:0"]
        else:
            length = bench.c.call("LLEN", pend)
            ok_ = bench.c.call("LINDEX", pend, -1) == b"job:0"
        if length != expect or bench.c.call("ZCARD", sched) != FUTURE or not ok_:
            raise RuntimeError("promote into a %s: wrong result" % layout)

    def rows(section, srv, goal_pairs=None):
        per = {m: med(srv[m]) / b for m, _ in layouts}
        for m, label in layouts:
            ratio, goal = "", ""
            if m == "stream":
                ratio = "%.2f× list" % (per["stream"] / per["list"])
                if goal_pairs:
                    ratio += " (median of per-pair ratios %.2f×)" % med(goal_pairs)
                goal = "≤ 2× list: %s" % ok(per["stream"] <= 2 * per["list"])
            bench.add(section, label, "%.3f" % per[m], "µs/member (server)",
                      "%.1f" % med(srv[m]), ratio, goal,
                      samples=[s / b for s in srv[m]], fmt="%.3f")

    # warm
    k = 2 if bench.quick else 8
    srv = {m: [] for m, _ in layouts}
    for r in range(bench.rounds):
        for m, _ in rotate(layouts, r):
            sched, pend = "ps:sched", "ps:pend"
            prepare(m, sched, pend, b * k)
            settle(bench.c)
            for _ in range(k):
                s_us, _ = bench.promote_exactly("module", sched, pend, b, m)
                srv[m].append(s_us)
            check(m, sched, pend, b * k)
            bench.c.call("DEL", sched, pend)
    settle(bench.c)
    rows("promote into a stream vs a list, batch 1000, warm (%d rounds × %d calls in a row)"
         % (bench.rounds, k), srv)
    print("  promote_stream warm done", file=sys.stderr)

    # cold
    calls = 10 if bench.quick else 60
    keys = {m: ("ps:%s:sched" % m, "ps:%s:pend" % m) for m, _ in layouts}
    for m, _ in layouts:
        prepare(m, keys[m][0], keys[m][1], b * calls)
    settle(bench.c)
    # A reference in the same turns, not a goal: the stream part done
    # natively, 1000 XADD <stream> * job <member> pipelined by the client
    # (server time: the XADDs' own), into a stream with the same group.
    xkey = "ps:xadd:pend"
    bench.c.call("DEL", xkey)
    bench.c.call("XGROUP", "CREATE", xkey, "workers", "$", "MKSTREAM")
    xadd_us = []

    def native_xadd(i):
        cmds = [["XADD", xkey, "*", "job", "job:%d" % (i * b + j)] for j in range(b)]
        payload = b"".join(encode(c) for c in cmds)
        bench.c.call("CONFIG", "RESETSTAT")
        bench.c.sock.sendall(payload)
        replies = [bench.c.read() for _ in cmds]
        if any(isinstance(r, ReplyError) for r in replies):
            raise RuntimeError("native XADD: %r" % replies[0])
        calls_, us = cmdstats(bench.c).get("xadd", (0, 0))
        if calls_ != b:
            raise RuntimeError("native XADD: %d calls seen" % calls_)
        return us

    srv = {m: [] for m, _ in layouts}
    for i in range(calls):
        for m, _ in rotate(layouts + [("xadd", "")], i):
            if m == "xadd":
                xadd_us.append(native_xadd(i))
                continue
            s_us, _ = bench.promote_exactly("module", keys[m][0], keys[m][1], b, m)
            srv[m].append(s_us)
    for m, _ in layouts:
        check(m, keys[m][0], keys[m][1], b * calls)
        bench.c.call("DEL", *keys[m])
    if bench.c.call("XLEN", xkey) != b * calls:
        raise RuntimeError("native XADD: wrong length")
    bench.c.call("DEL", xkey)
    settle(bench.c)
    pairs = [s / l for s, l in zip(srv["stream"], srv["list"])]
    section = ("promote into a stream vs a list, batch 1000, cold (%d single calls each, "
               "interleaved)" % calls)
    rows(section, srv, pairs)
    x = med(xadd_us) / b
    bench.add(section, "reference: 1000 native XADD s * job <member>, pipelined (not a goal)",
              "%.3f" % x, "µs/member (server, the XADDs' own)", "%.1f" % med(xadd_us),
              "%.2f× list, %.2f× stream" % (x / (med(srv["list"]) / b),
                                            x / (med(srv["stream"]) / b)),
              samples=[u / b for u in xadd_us], fmt="%.3f")
