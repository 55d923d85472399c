"""Workloads for profiling (scripts/profile.sh, `--workload NAME --seconds S`):
one command at a time, in a loop, for a given number of seconds."""

import subprocess
import sys
import time

from .client import Conn
from .harness import Bench, load_script, now_ms


def hammer(port, seconds, cmd):
    """valkey-benchmark sending cmd (50 clients, pipeline 16, __rand_int__ below
    10^5) for the given seconds."""
    args = ["valkey-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "50", "-P", "16",
            "-r", "100000", "-n", "100000000", "-q"] + cmd
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(seconds)
    p.terminate()
    p.wait()


def workload(port, name, seconds):
    c = Conn(port)
    b = Bench.__new__(Bench)
    b.c, b.port = c, port
    b.sha = {"fill": load_script(c, "fill.lua"), "promote": load_script(c, "promote.lua")}
    end = time.time() + seconds
    if name in ("retry", "retry-fixed", "retry-maxattempts", "retry-dead"):
        # retry-maxattempts: MAXATTEMPTS given, not reached (dead set of 10^3
        # members, never written); retry-dead: every call dead-letters (a job
        # not in the schedule, as in the bench's "job not in schedule" row)
        policy = "jitter:exponential:100:10000" if name == "retry" else "fixed:1000"
        attempts, opts = "3", []
        if name in ("retry-maxattempts", "retry-dead"):
            b.fill("pf:dead", 1000, now_ms(), 1, "old:", 0)
            opts = ["MAXATTEMPTS", "5", "DEAD", "pf:dead"]
            attempts = "5" if name == "retry-dead" else "3"
            if name == "retry-dead":
                b.fill_future("pf:sched", 10_000, "other:")
        hammer(port, seconds, ["ECHO.RETRY", "pf:sched", "job:__rand_int__", policy, attempts]
               + opts)
    elif name == "zadd":
        hammer(port, seconds, ["ZADD", "pf:sched", "500000__rand_int__e-5", "job:__rand_int__"])
    elif name in ("promote", "promote-lua", "promote-stream"):
        # Fill with client-side ZADDs (not a script) so that the fill is told
        # apart from the promotion in the profile (zaddCommand vs the handler).
        # promote-stream: into a stream with the group `workers`.
        n = 0
        while time.time() < end:
            if name == "promote-stream":
                c.call("XGROUP", "CREATE", "pf:pend", "workers", "$", "MKSTREAM")
            t = now_ms() - 10_000_000
            cmds = []
            for j in range(0, 20_000, 1000):
                cmd = ["ZADD", "pf:sched"]
                for i in range(j, j + 1000):
                    cmd += [t + i, "job:%d" % i]
                cmds.append(cmd)
            c.pipeline(cmds)
            for _ in range(20):
                if name in ("promote", "promote-stream"):
                    n += c.call("ECHO.PROMOTE", "pf:sched", "pf:pend")
                else:
                    n += c.call("EVALSHA", b.sha["promote"], 2, "pf:sched", "pf:pend", 1000)
            c.call("DEL", "pf:pend")
        print("promoted %d" % n, file=sys.stderr)
    elif name == "promote-mix":
        # as the bench's cold promotion rows: ECHO.PROMOTE, the Lua script and
        # the native commands in turn, each on its own schedule of due
        # members beside 10^4 not yet due, batch 1000
        keys = ["pf:m", "pf:l", "pf:n"]
        n = 0
        while time.time() < end:
            t = now_ms() - 10_000_000
            for k in keys:
                c.call("DEL", k, k + ":p")
                cmds = []
                for j in range(0, 45_000, 1000):
                    cmd = ["ZADD", k]
                    for i in range(j, j + 1000):
                        cmd += [t + i, "job:%d" % i]
                    cmds.append(cmd)
                for j in range(0, 10_000, 1000):
                    cmd = ["ZADD", k]
                    for i in range(j, j + 1000):
                        cmd += [t + 10 ** 10 + i, "future:%d" % i]
                    cmds.append(cmd)
                c.pipeline(cmds)
            for _ in range(45):
                if time.time() >= end:
                    break
                n += c.call("ECHO.PROMOTE", "pf:m", "pf:m:p")
                n += c.call("EVALSHA", b.sha["promote"], 2, "pf:l", "pf:l:p", 1000)
                due = c.call("ZRANGEBYSCORE", "pf:n", "-inf", now_ms(), "LIMIT", 0, 1000)
                c.pipeline([["LPUSH", "pf:n:p"] + due, ["ZREMRANGEBYRANK", "pf:n", 0, len(due) - 1]])
                n += len(due)
        print("promoted %d" % n, file=sys.stderr)
    elif name in ("promote-g0", "promote-g1", "promote-g10"):
        # as the groups section's release lanes: 1000 members due now by
        # ECHO.SCHEDULE ... 0 [GROUP g] over 0 (ungrouped), 1 or 10 groups (the
        # fill shows as echo.schedule), moved by one ECHO.PROMOTE ... LIMIT 1000
        groups = int(name[len("promote-g"):])
        n = 0
        while time.time() < end:
            cmds = []
            for i in range(1000):
                cmd = ["ECHO.SCHEDULE", "{pf}:g", "job:%d" % i, 0]
                if groups:
                    cmd += ["GROUP", "g%d" % (i % groups)]
                cmds.append(cmd)
            c.pipeline(cmds)
            n += c.call("ECHO.PROMOTE", "{pf}:g", "{pf}:p", "LIMIT", 1000)
            c.call("DEL", "{pf}:p")
        print("promoted %d" % n, file=sys.stderr)
    elif name == "promote-limited":
        # small releases through a limit that allows (10/s, burst 10^6):
        # each ECHO.PROMOTE ... LIMIT 1 reads and writes the limit's state key
        c.call("CONFIG", "SET", "echomq.release-limits", "{pf}:l 10/s 1000000")
        n = 0
        while time.time() < end:
            b.fill("{pf}:l", 20_000, now_ms() - 10_000_000, 1, "job:", 0)
            for _ in range(20):
                n += sum(c.pipeline([["ECHO.PROMOTE", "{pf}:l", "{pf}:lp", "LIMIT", 1]] * 1000))
            c.call("DEL", "{pf}:lp")
        print("promoted %d" % n, file=sys.stderr)
    elif name == "spread":
        b.fill("pf:sp", 1_000_000, now_ms(), 1, "s:", 0)
        while time.time() < end:
            c.call("ECHO.SPREAD", "pf:sp", now_ms(), now_ms() + 1_000_000, 20)
    else:
        raise SystemExit("unknown workload %s" % name)
