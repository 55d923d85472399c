"""Section `groups`: what the fair release of groups (docs/groups.md) costs.

Release cost per member: `ECHO.PROMOTE s p LIMIT 1000` moving 1000 due
members of (i) an ungrouped schedule, (ii) one group of 1000, (iii) 10
groups of 100, (iv) 1000 groups of 1, each filled by ECHO.SCHEDULE ... 0
[GROUP g] (pipelined, not measured) on fresh keys; server µs per member
from INFO commandstats reset before the call; K calls per variant a round,
bench.rounds rounds (+1 warm-up), order rotating; ratios of medians to (i).

(v) An ungrouped promote that finds nothing due, on a schedule with a hash
tag and 1000 future members: pipelined batches of 1000 calls, server µs per
call.

With --groups-old-module SO (another build: 4941470, before groups, for
(v); any build to compare the release with), two servers of this section's
own (ECHOMQ_SERVER or valkey-server, as the versions section starts them),
one with that build and one with the module bench.sh loaded, interleaved by
round with bench.sh's server (an A/A control: the same build on two
servers): the release's lanes on each, with each lane's ratio this build ÷
that build, and the grouped check's one key lookup per promote (v), as a
ratio.

Scale: G = 100,000 groups (10,000 with --quick) with one due member each
against the same number of members in one ungrouped schedule, alternating,
3 rounds: memory per group (INFO memory used_memory before and after the
fill, MEMORY USAGE of one group's key and of the index
S:echomq-gidx); then drained by the timer (echomq.auto-promote, its default
interval and limit), with latency-monitor-threshold 1: server CPU per tick
(INFO cpu over the drain / the ticks it took, INFO echomq's
echomq_auto_promote_ticks; the drain polled every 5 ms), members per tick,
the latency monitor's largest echomq-auto-promote event (LATENCY HISTORY:
at most one sample a second), and DBSIZE after the drain (only pending
should be left)."""

import os
import shutil
import sys
import time

from .client import Conn, cmdstats, info, usec_per_call
from .harness import med, ok, rotate, settle
from .versions import Target

B = 1000  # members per promote
K = 3  # promotes per variant and round
TX = 1000  # commands per pipelined write of a fill
RELEASE = [("plain", "(i) ungrouped", 0), ("g1", "(ii) one group of 1000", 1),
           ("g10", "(iii) 10 groups of 100", 10), ("g1000", "(iv) 1000 groups of 1", 1000)]


def fill(conn, sched, n, groups, prefix="m", delay=0):
    """n members due after `delay` ms, round-robin over `groups` groups (0:
    ungrouped), by ECHO.SCHEDULE, pipelined."""
    for lo in range(0, n, TX):
        cmds = []
        for i in range(lo, min(n, lo + TX)):
            cmd = ["ECHO.SCHEDULE", sched, "%s%d" % (prefix, i), delay]
            if groups:
                cmd += ["GROUP", "g%d" % (i % groups)]
            cmds.append(cmd)
        conn.pipeline(cmds)


def release_cost(bench, own):
    """The release lanes on bench.sh's server and, with own servers (this
    build, another), on those too, interleaved by round."""
    targets = [("here", "", bench.c)] + [(k, " (%s)" % label, t.c) for k, label, t in own]
    per = {(k, v): [] for k, _, _ in targets for v, _, _ in RELEASE}
    for r in range(bench.rounds + 1):
        for k, _, c in rotate(targets, r):
            for v, _, groups in rotate(RELEASE, r):
                sched, pend = "{grp-%s}:schedule" % v, "{grp-%s}:pending" % v
                for _ in range(K):
                    c.call("DEL", sched, pend)
                    fill(c, sched, B, groups)
                    settle(c)
                    c.call("CONFIG", "RESETSTAT")
                    moved = c.call("ECHO.PROMOTE", sched, pend, "LIMIT", B)
                    st = cmdstats(c)
                    if moved != B or c.call("LLEN", pend) != B:
                        raise RuntimeError("groups: %s moved %r of %d" % (v, moved, B))
                    if r > 0:
                        per[(k, v)].append(st["echo.promote"][1] / B)
                left = c.call("KEYS", "{grp-%s}*" % v)
                if left != [pend.encode()]:
                    raise RuntimeError("groups: %s left %r" % (v, left))
                c.call("DEL", pend)
    section = "groups: release of 1000 members by ECHO.PROMOTE (%d rounds × %d)" % (bench.rounds, K)
    for k, where, _ in targets:
        base = med(per[(k, "plain")])
        for v, label, _ in RELEASE:
            ratio = "%.2f× (i)" % (med(per[(k, v)]) / base)
            if k == "new":
                ratio += "; %.3f× the other build" % (med(per[(k, v)]) / med(per[("old", v)]))
            bench.add(section, label + where, "%.3f" % med(per[(k, v)]), "µs/member (server)",
                      ratio=ratio, samples=per[(k, v)], fmt="%.3f")
    return {"%s %s" % kv: med(x) for kv, x in per.items()}


def empty_promotes(conn, sched, pend):
    """Server µs per call of 1000 pipelined ECHO.PROMOTEs that find nothing due."""
    conn.call("CONFIG", "RESETSTAT")
    r = conn.pipeline([["ECHO.PROMOTE", sched, pend, "LIMIT", B]] * 1000)
    if any(r):
        raise RuntimeError("groups: an empty promote moved %r" % max(r))
    return usec_per_call(cmdstats(conn), "echo.promote")


def own_servers(bench):
    """With --groups-old-module: (key, label, Target) of this build and the
    other, each on a server of its own."""
    old = bench.groups_old_module
    if not old:
        return []
    binary = os.environ.get("ECHOMQ_SERVER") or shutil.which("valkey-server")
    new_so = os.environ.get("ECHOMQ_MODULE")
    new = Target(binary, new_so, "this build")
    try:
        other = Target(binary, old, "old")
    except Exception:
        new.stop()
        raise
    return [("new", "own server, this build", new),
            ("old", "own server, %s" % os.path.basename(old), other)]


def empty_cost(bench, own):
    sched, pend = "{gempty}:schedule", "{gempty}:pending"
    targets = [("here", "bench.sh's server, this build", bench.c)]
    targets += [(k, label, t.c) for k, label, t in own]
    per = {k: [] for k, _, _ in targets}
    try:
        for _, _, conn in targets:
            conn.call("DEL", sched, pend)
            fill(conn, sched, B, 0, prefix="f", delay=1_000_000_000)
        for r in range(bench.rounds + 1):
            for k, _, conn in rotate(targets, r):
                for _ in range(K):
                    us = empty_promotes(conn, sched, pend)
                    if r > 0:
                        per[k].append(us)
    finally:
        bench.c.call("DEL", sched, pend)
    section = "groups: ECHO.PROMOTE finding nothing due, hash-tagged schedule (%d rounds × %d × 1000)" % (
        bench.rounds, K)
    for k, label, _ in targets:
        ratio = ""
        if k == "new":
            ratio = "%.3f× the old build; A/A (bench.sh's ÷ own, same build) %.3f×" % (
                med(per["new"]) / med(per["old"]), med(per["here"]) / med(per["new"]))
        bench.add(section, label, "%.3f" % med(per[k]), "µs/call (server)", ratio=ratio,
                  samples=per[k], fmt="%.3f")
    return {k: med(v) for k, v in per.items()}


def cpu(conn):
    i = info(conn, "cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


def scale_round(bench, grouped, g):
    c = bench.c
    tag = "gscale-%s" % ("g" if grouped else "u")
    sched, pend = "{%s}:schedule" % tag, "{%s}:pending" % tag
    c.call("FLUSHALL")
    settle(c)
    mem0 = int(info(c, "memory")["used_memory"])
    fill(c, sched, g, g if grouped else 0)
    settle(c)
    mem1 = int(info(c, "memory")["used_memory"])
    usage = {}
    if grouped:
        usage["group key"] = c.call("MEMORY", "USAGE", "%s:echomq-g:g0" % sched)
        usage["index"] = c.call("MEMORY", "USAGE", "%s:echomq-gidx" % sched, "SAMPLES", 0)
        usage["keys"] = c.call("DBSIZE")
    else:
        usage["schedule"] = c.call("MEMORY", "USAGE", sched, "SAMPLES", 0)
        usage["keys"] = c.call("DBSIZE")
    c.call("CONFIG", "SET", "latency-monitor-threshold", 1)
    c.call("LATENCY", "RESET")
    e0 = info(c, "echomq")
    c0 = cpu(c)
    t0 = time.monotonic()
    c.call("CONFIG", "SET", "echomq.auto-promote", "%s %s" % (sched, pend))
    while True:
        n = c.call("LLEN", pend)
        if n >= g:
            break
        if time.monotonic() - t0 > 120:
            raise RuntimeError("groups: %d of %d drained after 120 s" % (n, g))
        time.sleep(0.005)
    wall = time.monotonic() - t0
    c1 = cpu(c)
    e1 = info(c, "echomq")
    c.call("CONFIG", "SET", "echomq.auto-promote", "")
    hist = c.call("LATENCY", "HISTORY", "echomq-auto-promote")
    c.call("CONFIG", "SET", "latency-monitor-threshold", 0)
    ticks = int(e1["echomq_auto_promote_ticks"]) - int(e0["echomq_auto_promote_ticks"])
    moved = int(e1["echomq_auto_promoted"]) - int(e0["echomq_auto_promoted"])
    dbsize = c.call("DBSIZE")
    keys = c.call("KEYS", "*")
    if moved != g or keys != [pend.encode()]:
        raise RuntimeError("groups: the drain moved %d of %d and left %r" % (moved, g, keys[:5]))
    c.call("FLUSHALL")
    settle(c)
    return {"bytes": (mem1 - mem0) / g, "usage": usage, "ticks": ticks,
            "cpu_us_tick": (c1 - c0) * 1e6 / max(1, ticks), "per_tick": g / max(1, ticks),
            "wall_ms": wall * 1000, "cpu_ms": (c1 - c0) * 1000,
            "latency_max_ms": max((x[1] for x in hist), default=0),
            "latency_samples": len(hist), "dbsize": dbsize}


def scale(bench):
    g = 10_000 if bench.quick else 100_000
    if bench.c.call("DBSIZE"):
        raise RuntimeError("groups: the scale rounds FLUSHALL, and the server holds keys")
    res = {True: [], False: []}
    for r in range(3):
        for grouped in rotate([True, False], r):
            x = scale_round(bench, grouped, g)
            res[grouped].append(x)
            print("  groups scale %s: %.1f B each, %d ticks, %.0f members/tick, %.0f µs CPU/tick, "
                  "drain %.0f ms (CPU %.0f ms), latency max %d ms (%d samples), %s, DBSIZE after %d"
                  % ("grouped" if grouped else "ungrouped", x["bytes"], x["ticks"], x["per_tick"],
                     x["cpu_us_tick"], x["wall_ms"], x["cpu_ms"], x["latency_max_ms"],
                     x["latency_samples"], x["usage"], x["dbsize"]), file=sys.stderr)
    section = "groups: %d due members drained by the timer (3 rounds alternating)" % g
    gm, um = res[True], res[False]

    def m(rs, f):
        return med([x[f] for x in rs])

    for grouped, label in ((True, "%d groups of 1" % g), (False, "ungrouped, one schedule")):
        rs = res[grouped]
        other = "" if not grouped else " (%.2f× ungrouped)" % (m(gm, "cpu_us_tick") /
                                                             m(um, "cpu_us_tick"))
        usage = rs[-1]["usage"]
        bench.add(section, label + ": server CPU per tick", "%.0f" % m(rs, "cpu_us_tick"),
                  "µs/tick (INFO cpu); %.0f members/tick over %s ticks; drain %s ms; "
                  "latency monitor max %s ms; DBSIZE after %s"
                  % (m(rs, "per_tick"), "/".join(str(x["ticks"]) for x in rs),
                     "/".join("%.0f" % x["wall_ms"] for x in rs),
                     "/".join(str(x["latency_max_ms"]) for x in rs),
                     "/".join(str(x["dbsize"]) for x in rs)),
                  ratio=other.strip(" ()"), samples=[x["cpu_us_tick"] for x in rs])
        bench.add(section, label + ": used_memory per member", "%.1f" % m(rs, "bytes"),
                  "bytes; MEMORY USAGE %s" % ", ".join("%s %s" % kv for kv in usage.items()),
                  ratio="" if not grouped else "%.2f× ungrouped" % (m(gm, "bytes") / m(um, "bytes")),
                  samples=[x["bytes"] for x in rs], fmt="%.1f")
    return res


def run(bench):
    own = own_servers(bench)
    try:
        rel = release_cost(bench, own)
        print("  groups release µs/member: %s" % rel, file=sys.stderr)
        emp = empty_cost(bench, own)
        print("  groups empty promote µs/call: %s" % emp, file=sys.stderr)
    finally:
        for _, _, t in own:
            t.stop()
    scale(bench)
