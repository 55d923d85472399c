"""Section `repeat`: what recurring jobs (ECHO.REPEAT, docs: the command's
header in src/commands/repeat.rs) cost.

(a) Release: `ECHO.PROMOTE s p LIMIT 1000` moving 1000 due occurrences,
each release arming its definition's next occurrence in the same step (HGET
of the definition, decode, parse of the spec and zone, next occurrence,
jitter draw, ZADD, HSET of the payload, HSET of the definition), against
moving 1000 plain due members (bench.fill_due); every lane's schedule holds
1000 plain members not yet due beside. Lanes: `every:60000
JITTER 1000`, `cron:*/5 * * * * JITTER 60000` (UTC) and the same cron with
`TZ Europe/Berlin`, each of 1000 definitions with `PAYLOAD {q}:jobs <100
bytes>` (the client libraries' jobs hash). Set-up (not measured): the armed
occurrences are made due by one `ZADD XX` of past scores (as if their time
had come), and after the call the released occurrences' payload fields are
deleted (as workers do). Server µs per member from INFO commandstats reset
before each call; K calls per lane a round, bench.rounds rounds (+1
warm-up), order rotating; ratios of medians to the plain lane and the
median of per-round ratios (goal: at most 1.5×). A reference row: the
plain release plus the same 1000 ZADDs and 1000 HSETs of the payload sent
as commands (one pipeline; what a client-side scheduler makes the server
do), summed.

With --repeat-ab-module SO (another build with recurring jobs), the lanes
also run on two servers of the section's own, this build and SO,
interleaved by round with bench.sh's: each lane's ratio this build ÷ SO.

(b) A plain promote on a schedule with no definitions, which looks up the
definitions hash when a release moves something (9603c79; every release
before it): 1000 pipelined ECHO.PROMOTEs finding nothing due (1000 future
members), and promotes of 1000 due members. With --repeat-old-module SO
(main's build before recurring jobs) also on two servers of this
section's own (this build, SO), interleaved by round with bench.sh's;
bench.sh's ÷ own (same build) is the A/A control.

(c) Memory: 100,000 definitions `cron:0 * * * * JITTER 300000` without and
with a 100-byte PAYLOAD, against 100,000 plain scheduled members (ZADD) and
members with a 100-byte payload (ZADD + HSET), 3 rounds rotating: INFO
memory used_memory around the fill (FLUSHALL between), per definition.

(d) The calendar's herd: 10,000 definitions `cron:0 * * * *` without and
with `JITTER 300000`, ECHO.SPREAD over the next hour in 3600 1-second
buckets: the largest bucket, and its ratio to the mean over the first five
minutes (10,000 / 300); 3 rounds on fresh keys."""

import os
import shutil
import sys

from .client import cmdstats, info, usec_per_call
from .harness import load_script, med, now_ms, ok, rotate, settle
from .versions import Target

B = 1000  # occurrences (members) per promote
K = 3  # promotes per lane and round
PAYLOAD = "x" * 100
JOBS = "{%s}:jobs"
LANES = [
    ("plain", "plain members", None, []),
    ("every", "every:60000 JITTER 1000", "every:60000", ["JITTER", 1000]),
    ("cron", "cron:*/5 * * * * JITTER 60000 (UTC)", "cron:*/5 * * * *", ["JITTER", 60000]),
    ("crontz", "cron:*/5 * * * * JITTER 60000 TZ Europe/Berlin", "cron:*/5 * * * *",
     ["JITTER", 60000, "TZ", "Europe/Berlin"]),
]


def keys(lane):
    tag = "rp-" + lane
    return "{%s}:schedule" % tag, "{%s}:pending" % tag, JOBS % tag


def define(conn, lane, spec, opts, n=B, prefix="d"):
    """n definitions of `spec` in lane's schedule, each with a payload."""
    sched, _, jobs = keys(lane)
    for lo in range(0, n, 1000):
        conn.pipeline([["ECHO.REPEAT", sched, "%s%d" % (prefix, i), spec] + opts
                       + ["PAYLOAD", jobs, PAYLOAD] for i in range(lo, min(n, lo + 1000))])


def make_due(conn, sched):
    """The armed occurrences (every member of sched) made due: one ZADD XX
    with past scores, in their order."""
    members = [m for m in conn.call("ZRANGE", sched, 0, -1) if b"@" in m]
    t = now_ms() - 10_000_000
    args = []
    for i, m in enumerate(members):
        args += [t + i, m]
    conn.call("ZADD", sched, "XX", *args)
    return len(members)


def prepare(conn, lane):
    """Before a measured call: B due members in lane's schedule."""
    sched, pend, _ = keys(lane)
    if lane == "plain":
        conn.call("EVALSHA", conn.fill_sha, 1, sched, B, now_ms() - 10_000_000, 1, "job:", 0)
    elif make_due(conn, sched) != B:
        raise RuntimeError("repeat: %s holds %d occurrences" % (lane, conn.call("ZCARD", sched)))
    conn.call("DEL", pend)


def after(conn, lane):
    """After a measured call: checks, then the workers' part (the payloads of
    what was released deleted, pending emptied)."""
    sched, pend, jobs = keys(lane)
    released = conn.call("LRANGE", pend, 0, -1)
    if len(released) != B or conn.call("ZCARD", sched) != (B if lane == "plain" else 2 * B):
        raise RuntimeError("repeat: %s released %d, %d left scheduled"
                           % (lane, len(released), conn.call("ZCARD", sched)))
    if lane != "plain":
        armed = conn.call("ZRANGE", sched, 0, 0, "WITHSCORES")
        if float(armed[1]) < now_ms() or b"@" not in armed[0]:
            raise RuntimeError("repeat: %s armed a due occurrence %r" % (lane, armed))
        if conn.call("HDEL", jobs, *released) != B:
            raise RuntimeError("repeat: %s released occurrences without payloads" % lane)
        if conn.call("HLEN", jobs) != B:
            raise RuntimeError("repeat: %s's armed occurrences lack payloads" % lane)
    conn.call("DEL", pend)


def setup(conn, lanes=LANES):
    for lane, _, spec, opts in lanes:
        sched, pend, jobs = keys(lane)
        conn.call("DEL", sched, pend, jobs, sched + ":echomq-repeats")
        # every lane's schedule holds 1000 plain members not yet due beside
        # (a release's surroundings alike: a skiplist throughout)
        conn.call("EVALSHA", conn.fill_sha, 1, sched, B, now_ms() + 1_000_000_000, 1, "future:",
                  0)
        if spec is not None:
            define(conn, lane, spec, opts)
    settle(conn)


def teardown(conn):
    for lane, _, _, _ in LANES:
        sched, pend, jobs = keys(lane)
        conn.call("DEL", sched, pend, jobs, sched + ":echomq-repeats")
    settle(conn)


def reference(conn):
    """Server µs of the arming writes sent as commands: 1000 ZADD (new
    members, future scores) and 1000 HSET of a payload, one pipeline."""
    sched, jobs = "{rp-ref}:schedule", JOBS % "rp-ref"
    conn.call("DEL", sched, jobs)
    t = now_ms() + 1_000_000
    cmds = []
    for i in range(B):
        cmds.append(["ZADD", sched, t + i * 7, "d%d@%d" % (i, t)])
        cmds.append(["HSET", jobs, "d%d@%d" % (i, t), PAYLOAD])
    conn.call("CONFIG", "RESETSTAT")
    conn.pipeline(cmds)
    st = cmdstats(conn)
    conn.call("DEL", sched, jobs)
    return st["zadd"][1] + st["hset"][1]


def release_cost(bench):
    """(a) on bench.sh's server and, with --repeat-ab-module, on two servers
    of its own (this build, that one), interleaved by round."""
    bench.c.fill_sha = bench.sha["fill"]
    targets = [("here", "", bench.c)]
    own = ab_servers(bench)
    for k, label, t in own:
        t.c.fill_sha = t.sha["fill"]
        targets.append((k, " (%s)" % label, t.c))
    per = {(k, lane): [] for k, _, _ in targets for lane in [x[0] for x in LANES] + ["ref"]}
    rounds = {(k, lane): [] for k, _, _ in targets for lane, _, _, _ in LANES}
    try:
        for _, _, c in targets:
            setup(c)
        for r in range(bench.rounds + 1):
            for k, _, c in rotate(targets, r):
                for lane, _, _, _ in rotate(LANES, r):
                    calls = []
                    for _ in range(K):
                        prepare(c, lane)
                        settle(c)
                        c.call("CONFIG", "RESETSTAT")
                        moved = c.call("ECHO.PROMOTE", keys(lane)[0], keys(lane)[1], "LIMIT", B)
                        st = cmdstats(c)
                        if moved != B:
                            raise RuntimeError("repeat: %s moved %r of %d" % (lane, moved, B))
                        after(c, lane)
                        calls.append(st["echo.promote"][1] / B)
                    if r > 0:
                        per[(k, lane)] += calls
                        rounds[(k, lane)].append(med(calls))
                ref = reference(c)
                if r > 0:
                    per[(k, "ref")].append(ref / B)
    finally:
        for _, _, c in targets:
            teardown(c)
        for _, _, t in own:
            t.stop()
    section = ("repeat (a): release of 1000 by ECHO.PROMOTE, each arming its next (%d rounds × %d)"
               % (bench.rounds, K))
    for k, where, _ in targets:
        base = med(per[(k, "plain")])
        for lane, label, _, _ in LANES:
            m = med(per[(k, lane)])
            ratio = goal = ""
            if lane != "plain":
                pr = med([x / y for x, y in zip(rounds[(k, lane)], rounds[(k, "plain")])])
                ratio = "%.2f× plain (per round %.2f×)" % (m / base, pr)
                goal = "≤ 1.5×: %s" % ok(m / base <= 1.5)
            if k == "new":
                ratio += "; %.3f× the other build" % (m / med(per[("ab", lane)]))
            bench.add(section, label + where, "%.3f" % m, "µs/member (server)", "%.0f" % (m * B),
                      ratio.lstrip("; "), goal, samples=per[(k, lane)], fmt="%.3f")
        ref = med(per[(k, "ref")]) + base
        bench.add(section, "reference: plain release + 1000 ZADD + 1000 HSET sent as commands"
                  + where, "%.3f" % ref, "µs/member (server)", "%.0f" % (ref * B),
                  "%.2f× plain; every: %.2f× this" % (ref / base, med(per[(k, "every")]) / ref),
                  samples=[x + base for x in per[(k, "ref")]], fmt="%.3f")
    return {"%s %s" % kv: med(v) for kv, v in per.items()}


def ab_servers(bench):
    """With --repeat-ab-module: (key, label, Target) of this build and that
    one, each on a server of its own."""
    other = getattr(bench, "repeat_ab_module", "")
    if not other:
        return []
    binary = os.environ.get("ECHOMQ_SERVER") or shutil.which("valkey-server")
    new = Target(binary, os.environ.get("ECHOMQ_MODULE"), "this build")
    try:
        that = Target(binary, other, "other")
    except Exception:
        new.stop()
        raise
    return [("new", "own server, this build", new),
            ("ab", "own server, %s" % os.path.basename(other), that)]


def own_servers(bench):
    old = getattr(bench, "repeat_old_module", "")
    if not old:
        return []
    binary = os.environ.get("ECHOMQ_SERVER") or shutil.which("valkey-server")
    new = Target(binary, os.environ.get("ECHOMQ_MODULE"), "this build")
    try:
        other = Target(binary, old, "old")
    except Exception:
        new.stop()
        raise
    return [("new", "own server, this build", new),
            ("old", "own server, %s" % os.path.basename(old), other)]


def empty_definitions(bench):
    """(b): plain promotes on schedules without definitions, on this build
    and, with --repeat-old-module, on the build before recurring jobs."""
    own = own_servers(bench)
    targets = [("here", "bench.sh's server, this build", bench.c)]
    targets += [(k, label, t.c) for k, label, t in own]
    sched, pend = "{rp-empty}:schedule", "{rp-empty}:pending"
    dsched, dpend = "{rp-due}:schedule", "{rp-due}:pending"
    empty = {k: [] for k, _, _ in targets}
    due = {k: [] for k, _, _ in targets}
    try:
        for _, _, conn in targets:
            conn.fill_sha = load_script(conn, "fill.lua")
            conn.call("DEL", sched, pend, dsched, dpend)
            conn.call("EVALSHA", conn.fill_sha, 1, sched, B, now_ms() + 1_000_000_000, 1, "f:", 0)
            conn.call("EVALSHA", conn.fill_sha, 1, dsched, B, now_ms() + 1_000_000_000, 1, "f:",
                      0)
        for r in range(bench.rounds + 1):
            for k, _, conn in rotate(targets, r):
                for _ in range(K):
                    conn.call("CONFIG", "RESETSTAT")
                    got = conn.pipeline([["ECHO.PROMOTE", sched, pend, "LIMIT", B]] * 1000)
                    if any(got):
                        raise RuntimeError("repeat (b): an empty promote moved %r" % max(got))
                    us = usec_per_call(cmdstats(conn), "echo.promote")
                    conn.call("EVALSHA", conn.fill_sha, 1, dsched, B, now_ms() - 10_000_000, 1,
                              "job:", 0)
                    settle(conn)
                    conn.call("CONFIG", "RESETSTAT")
                    moved = conn.call("ECHO.PROMOTE", dsched, dpend, "LIMIT", B)
                    d_us = cmdstats(conn)["echo.promote"][1] / B
                    if moved != B:
                        raise RuntimeError("repeat (b): moved %r of %d" % (moved, B))
                    conn.call("DEL", dpend)
                    if r > 0:
                        empty[k].append(us)
                        due[k].append(d_us)
        for _, _, conn in targets:
            conn.call("DEL", sched, pend, dsched, dpend)
    finally:
        for _, _, t in own:
            t.stop()
    for title, per, unit in (
            ("repeat (b): ECHO.PROMOTE finding nothing due, no definitions (%d rounds × %d × 1000)"
             % (bench.rounds, K), empty, "µs/call (server)"),
            ("repeat (b): ECHO.PROMOTE of 1000, no definitions (%d rounds × %d)"
             % (bench.rounds, K), due, "µs/member (server)")):
        for k, label, _ in targets:
            ratio = ""
            if k == "new":
                ratio = "%.3f× the old build; A/A (bench.sh's ÷ own, same build) %.3f×" % (
                    med(per["new"]) / med(per["old"]), med(per["here"]) / med(per["new"]))
            bench.add(title, label, "%.3f" % med(per[k]), unit, ratio=ratio, samples=per[k],
                      fmt="%.3f")
    return {k: (med(empty[k]), med(due[k])) for k, _, _ in targets}


MEM_KINDS = [
    ("def", "definition cron:0 * * * * JITTER 300000", False),
    ("defp", "definition cron:0 * * * * JITTER 300000 PAYLOAD (100 B)", True),
    ("zadd", "reference: a plain member (ZADD)", False),
    ("zaddp", "reference: a plain member with a 100 B payload (ZADD + HSET)", True),
]


def memory(bench):
    c = bench.c
    n = 10_000 if bench.quick else 100_000
    if c.call("DBSIZE"):
        raise RuntimeError("repeat (c): FLUSHALL between rounds, and the server holds keys")
    sched, jobs = "{rp-mem}:schedule", "{rp-mem}:jobs"
    res = {k: [] for k, _, _ in MEM_KINDS}
    usage = {}
    t = now_ms() + 3_600_000
    for r in range(3):
        for kind, _, payload in rotate(MEM_KINDS, r):
            c.call("FLUSHALL", "SYNC")
            c.call("MEMORY", "PURGE")
            before = int(info(c, "memory")["used_memory"])
            for lo in range(0, n, 1000):
                cmds = []
                for i in range(lo, min(n, lo + 1000)):
                    if kind.startswith("def"):
                        cmd = ["ECHO.REPEAT", sched, "def:%06d" % i, "cron:0 * * * *",
                               "JITTER", 300000]
                        if payload:
                            cmd += ["PAYLOAD", jobs, PAYLOAD]
                        cmds.append(cmd)
                    else:
                        member = "def:%06d@%d" % (i, t)
                        cmds.append(["ZADD", sched, t + (i * 3) % 300000, member])
                        if payload:
                            cmds.append(["HSET", jobs, member, PAYLOAD])
                c.pipeline(cmds)
            if c.call("ZCARD", sched) != n or (payload and c.call("HLEN", jobs) != n):
                raise RuntimeError("repeat (c): %s wrote a wrong count" % kind)
            after_ = int(info(c, "memory")["used_memory"])
            res[kind].append((after_ - before) / n)
            if kind == "defp":
                usage = {k: c.call("MEMORY", "USAGE", k, "SAMPLES", 0)
                         for k in (sched, sched + ":echomq-repeats", jobs)}
        print("  repeat (c) round %d/3 done" % (r + 1), file=sys.stderr)
    c.call("FLUSHALL", "SYNC")
    settle(c)
    section = "repeat (c): used_memory per definition, %d of them (3 rounds rotating)" % n
    for kind, label, _ in MEM_KINDS:
        m = med(res[kind])
        ratio = ""
        if kind == "def":
            ratio = "%.2f× a plain member" % (m / med(res["zadd"]))
        elif kind == "defp":
            ratio = "%.2f× a plain member with its payload; MEMORY USAGE %s" % (
                m / med(res["zaddp"]), ", ".join("%s %s" % kv for kv in usage.items()))
        bench.add(section, label, "%.1f" % m, "bytes", ratio=ratio, samples=res[kind], fmt="%.1f")
    return {k: med(v) for k, v in res.items()}


def herd(bench):
    c = bench.c
    n = 10_000
    hour = 3_600_000
    res = {False: [], True: []}
    for r in range(3):
        for jitter in rotate([False, True], r):
            sched = "{rp-herd-%s}:schedule" % ("j" if jitter else "n")
            c.call("DEL", sched, sched + ":echomq-repeats")
            opts = ["JITTER", 300000] if jitter else []
            fires = []
            for lo in range(0, n, 1000):
                fires += c.pipeline([["ECHO.REPEAT", sched, "tenant:%d" % i, "cron:0 * * * *"]
                                     + opts for i in range(lo, lo + 1000)])
            start = min(fires) // hour * hour
            if max(fires) - start > (300000 if jitter else 0):
                raise RuntimeError("repeat (d): fire times %d..%d after %d"
                                   % (min(fires) - start, max(fires) - start, start))
            counts = c.call("ECHO.SPREAD", sched, start, start + hour, 3600)
            if sum(counts) != n:
                raise RuntimeError("repeat (d): ECHO.SPREAD counted %d of %d" % (sum(counts), n))
            res[jitter].append((max(counts), max(counts) / (n / 300),
                                sum(1 for x in counts if x)))
            c.call("DEL", sched, sched + ":echomq-repeats")
    settle(c)
    section = ("repeat (d): 10,000 definitions cron:0 * * * *, ECHO.SPREAD over the hour "
               "in 1 s buckets (3 rounds)")
    for jitter, label in ((False, "without jitter"), (True, "JITTER 300000")):
        rs = res[jitter]
        largest = med([x[0] for x in rs])
        ratio = med([x[1] for x in rs])
        goal = ("one bucket of 10,000: %s" % ok(largest == n and max(x[2] for x in rs) == 1)
                if not jitter else "≤ 3× the mean: %s" % ok(max(x[1] for x in rs) <= 3))
        bench.add(section, label + ": largest 1 s bucket", "%d" % largest,
                  "jobs; ÷ mean over 5 min (33.3): %s; non-empty buckets %s"
                  % ("/".join("%.2f" % x[1] for x in rs), "/".join(str(x[2]) for x in rs)),
                  ratio="%.2f× the mean" % ratio, goal=goal, samples=[x[0] for x in rs])
    return res


def run(bench):
    rel = release_cost(bench)
    print("  repeat (a) µs/member: %s" % rel, file=sys.stderr)
    emp = empty_definitions(bench)
    print("  repeat (b) µs (empty call, per member): %s" % emp, file=sys.stderr)
    herd(bench)
    memory(bench)
