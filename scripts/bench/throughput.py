"""Section `throughput`: valkey-benchmark, 50 clients, pipeline 16, ECHO.RETRY
against ZADD, a Lua script and a function doing the jittered retry."""

import csv
import io
import subprocess
import sys

from .client import cmdstats, usec_per_call
from .harness import med, ok, rotate, settle


def run(bench):
    n = 60_000 if bench.quick else 300_000
    keyspace = 100_000
    base = ["valkey-benchmark", "-h", "127.0.0.1", "-p", str(bench.port),
            "-c", "50", "-P", "16", "-n", str(n), "-r", str(keyspace), "--csv"]
    # Every row: the same member spread (job:<12 digits>, 10^5 distinct)
    # and key length. Score spread matters as much as the command: a set
    # whose members share few distinct scores pays a member comparison
    # (sdscmp) at every tie on each skiplist step. The jittered retry
    # leaves ~1200-1500 distinct scores (now + 0..400 ms over the run) at
    # random positions; "500000__rand_int__e-5" is 5*10^12 + R/10^5 with
    # R < 10^5, which doubles round to 1024 distinct values (13 integer
    # digits like a Unix ms): the same tie density, at random positions.
    # The second ZADD row, 1__rand_int__, has ~58000 distinct scores.
    variants = [
        ("ZADD, ~1000 distinct scores (reference)", "tp:zadd", "zadd",
         ["ZADD", "tp:zadd", "500000__rand_int__e-5", "job:__rand_int__"]),
        ("ZADD, ~58000 distinct scores", "tp:zdst", "zadd",
         ["ZADD", "tp:zdst", "1__rand_int__", "job:__rand_int__"]),
        ("ECHO.RETRY fixed:1000 3", "tp:fixd", "echo.retry",
         ["ECHO.RETRY", "tp:fixd", "job:__rand_int__", "fixed:1000", "3"]),
        ("ECHO.RETRY jitter:exponential:100:10000 3", "tp:jitr", "echo.retry",
         ["ECHO.RETRY", "tp:jitr", "job:__rand_int__",
          "jitter:exponential:100:10000", "3"]),
        ("Lua EVALSHA jittered retry", "tp:eval", "evalsha",
         ["EVALSHA", bench.sha["retry"], "1", "tp:eval", "job:__rand_int__",
          "100", "10000", "3"]),
        ("FCALL jittered retry", "tp:fcal", "fcall",
         ["FCALL", "echobench_retry", "1", "tp:fcal", "job:__rand_int__",
          "100", "10000", "3"]),
    ]
    for _, _, _, cmd in variants:
        bench.bench_cmds.append(" ".join(base + cmd))
    rps = {v[0]: [] for v in variants}
    us = {v[0]: [] for v in variants}
    distinct = {}

    def run(cmd, requests):
        args = list(base)
        args[args.index("-n") + 1] = str(requests)
        p = subprocess.run(args + cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError("valkey-benchmark failed: %s" % p.stderr.strip())
        rows = list(csv.reader(io.StringIO(p.stdout)))
        if len(rows) < 2 or rows[0][:2] != ["test", "rps"]:
            raise RuntimeError("unexpected valkey-benchmark output: %r" % p.stdout)
        return float(rows[1][1])

    for _, key, _, cmd in variants:  # warm-up, not recorded
        run(cmd, n // 4)
        bench.c.call("DEL", key)
    for r in range(bench.rounds):
        for name, key, stat, cmd in rotate(variants, r):
            bench.c.call("DEL", key)
            settle(bench.c)
            bench.c.call("CONFIG", "RESETSTAT")
            rps[name].append(run(cmd, n))
            st = cmdstats(bench.c)
            if st.get(stat, (0, 0))[0] < n:
                raise RuntimeError("%s: only %s calls seen" % (name, st.get(stat)))
            us[name].append(usec_per_call(st, stat))
            if r == 0:
                scores = bench.c.call("ZRANGE", key, 0, -1, "WITHSCORES")[1::2]
                distinct[name] = (len(set(scores)), len(scores))
            bench.c.call("DEL", key)
        print("  throughput round %d/%d done" % (r + 1, bench.rounds), file=sys.stderr)
    m = {k: med(v) for k, v in rps.items()}
    zadd = m[variants[0][0]]
    zdst = m[variants[1][0]]
    lua = m["Lua EVALSHA jittered retry"]
    for name, _, _, _ in variants:
        ratio = "%.2f× ZADD, %.2f× EVALSHA (%.2f× ZADD-58000)" % (
            m[name] / zadd, m[name] / lua, m[name] / zdst)
        goal = ""
        if name == "ECHO.RETRY fixed:1000 3":
            goal = "≥ 0.80× ZADD: %s" % ok(m[name] / zadd >= 0.80)
        elif name.startswith("ECHO.RETRY jitter"):
            goal = "≥ 0.80× ZADD: %s; ≥ 1.5× EVALSHA: %s" % (
                ok(m[name] / zadd >= 0.80), ok(m[name] / lua >= 1.5))
        d, total = distinct[name]
        bench.add("throughput, 50 clients, pipeline 16",
                  "%s [set after a round: %d members, %d distinct scores]" % (name, total, d),
                  "%.0f" % m[name], "req/s", "%.2f" % med(us[name]), ratio, goal,
                  samples=rps[name])
