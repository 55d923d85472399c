#!/usr/bin/env python3
"""Side-by-side benchmark of echomq against native commands and Lua.

Run by scripts/bench.sh (`make bench`), which starts and stops the server.
Every row is measured in the same run as the rows it is compared with:
each section runs ROUNDS interleaved rounds (the order of the variants
rotates from round to round) and reports the median per row, so a burst of
load from other work on the machine hits all variants alike.

Python 3 standard library only. Usage:
  bench.py --port PORT [--rounds N] [--quick]
  bench.py --port PORT --workload NAME --seconds S   (for profiling)
"""

import argparse
import csv
import http.client
import io
import json
import multiprocessing
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LUA = os.path.join(HERE, "lua")


# --------------------------------------------------------------------------
# A minimal RESP2 client.

class ReplyError(Exception):
    pass


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        elif isinstance(a, str):
            b = a.encode()
        else:
            b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Conn:
    def __init__(self, port, host="127.0.0.1"):
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb", buffering=1 << 20)

    def read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("server closed the connection")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest
        if t == b"-":
            return ReplyError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self.read() for _ in range(n)]
        raise ConnectionError("bad reply line %r" % line)

    def call(self, *args):
        self.sock.sendall(encode(args))
        r = self.read()
        if isinstance(r, ReplyError):
            raise r
        return r

    def pipeline(self, cmds, check=True):
        self.sock.sendall(b"".join(encode(c) for c in cmds))
        replies = [self.read() for _ in cmds]
        if check:
            for r in replies:
                if isinstance(r, ReplyError):
                    raise r
        return replies

    def close(self):
        self.f.close()
        self.sock.close()


def info(conn, section):
    text = conn.call("INFO", section).decode()
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def cmdstats(conn):
    """{command name (lower case): (calls, usec)} since the last RESETSTAT."""
    out = {}
    for k, v in info(conn, "commandstats").items():
        if not k.startswith("cmdstat_"):
            continue
        fields = dict(f.split("=", 1) for f in v.split(","))
        out[k[len("cmdstat_"):].lower()] = (int(fields["calls"]), int(fields["usec"]))
    return out


def usec_per_call(stats, name, per=None):
    calls, usec = stats.get(name, (0, 0))
    n = per if per is not None else calls
    return usec / n if n else float("nan")


# --------------------------------------------------------------------------
# Helpers.

def med(xs):
    return statistics.median(xs) if xs else float("nan")


def rotate(items, r):
    r %= len(items)
    return items[r:] + items[:r]


def load_script(conn, name):
    with open(os.path.join(LUA, name), "rb") as f:
        return conn.call("SCRIPT", "LOAD", f.read()).decode()


def now_ms():
    return int(time.time() * 1000)


def settle(conn):
    """Waits until the server has freed what DEL/FLUSHALL handed to its
    background thread (lazyfree is on by default in Valkey 8), so that work
    does not overlap the next measurement."""
    for _ in range(600):
        if int(info(conn, "memory").get("lazyfree_pending_objects", "0")) == 0:
            return
        time.sleep(0.05)


# not-yet-due members in the promotion section's schedules
FUTURE = 10_000


class Bench:
    def __init__(self, port, rounds, quick, worker=None, web=None):
        self.port = port
        self.worker = worker
        self.web = web
        self.rounds = rounds
        self.quick = quick
        self.c = Conn(port)
        self.sha = {
            "retry": load_script(self.c, "retry.lua"),
            "promote": load_script(self.c, "promote.lua"),
            "fill": load_script(self.c, "fill.lua"),
        }
        with open(os.path.join(LUA, "retry_function.lua"), "rb") as f:
            self.c.call("FUNCTION", "LOAD", "REPLACE", f.read())
        self.rows = []  # (section, row, value, unit, server_us, ratio, goal)
        self.bench_cmds = []

    def fill(self, key, n, first_score, step, prefix, first_index=0):
        """Adds n members server-side (set-up, never measured)."""
        return self.c.call("EVALSHA", self.sha["fill"], 1, key, n, first_score,
                           step, prefix, first_index)

    def fill_due(self, key, n):
        # scores in the past (10^7 ms ago and on), distinct and increasing
        return self.fill(key, n, now_ms() - 10_000_000, 1, "job:", 0)

    def add(self, section, row, value, unit, server_us="", ratio="", goal="", samples=None,
            fmt="%.0f"):
        span = ""
        if samples:
            span = (fmt + "–" + fmt) % (min(samples), max(samples))
        self.rows.append((section, row, value, span, unit, server_us, ratio, goal))

    # ----------------------------------------------------------------------
    def throughput(self):
        n = 60_000 if self.quick else 300_000
        keyspace = 100_000
        base = ["valkey-benchmark", "-h", "127.0.0.1", "-p", str(self.port),
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
             ["EVALSHA", self.sha["retry"], "1", "tp:eval", "job:__rand_int__",
              "100", "10000", "3"]),
            ("FCALL jittered retry", "tp:fcal", "fcall",
             ["FCALL", "echobench_retry", "1", "tp:fcal", "job:__rand_int__",
              "100", "10000", "3"]),
        ]
        for _, _, _, cmd in variants:
            self.bench_cmds.append(" ".join(base + cmd))
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
            self.c.call("DEL", key)
        for r in range(self.rounds):
            for name, key, stat, cmd in rotate(variants, r):
                self.c.call("DEL", key)
                settle(self.c)
                self.c.call("CONFIG", "RESETSTAT")
                rps[name].append(run(cmd, n))
                st = cmdstats(self.c)
                if st.get(stat, (0, 0))[0] < n:
                    raise RuntimeError("%s: only %s calls seen" % (name, st.get(stat)))
                us[name].append(usec_per_call(st, stat))
                if r == 0:
                    scores = self.c.call("ZRANGE", key, 0, -1, "WITHSCORES")[1::2]
                    distinct[name] = (len(set(scores)), len(scores))
                self.c.call("DEL", key)
            print("  throughput round %d/%d done" % (r + 1, self.rounds), file=sys.stderr)
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
            self.add("throughput, 50 clients, pipeline 16",
                     "%s [set after a round: %d members, %d distinct scores]" % (name, total, d),
                     "%.0f" % m[name], "req/s", "%.2f" % med(us[name]), ratio, goal,
                     samples=rps[name])

    # ----------------------------------------------------------------------
    def retry_options(self):
        """ECHO.RETRY ... MAXATTEMPTS n DEAD dead: not dead-lettering
        (attempts < n) against a plain ECHO.RETRY, and dead-lettering
        (attempts >= n) against native ZADD (and ZREM), all in the same rounds.

        Driven by this script, not valkey-benchmark: a round is one pipelined
        batch of `batch` calls of every row (after `prime` unmeasured calls of
        the same row), in an order shuffled afresh each round, so the rows
        alternate every few ms and a burst of load from other work hits all
        alike. (With one valkey-benchmark run per row and round, the per-round
        ratio of the with-options row to the plain one spread 0.76-1.34 on
        this shared machine, too coarse for a 5 % goal.) Server time per call
        is from INFO commandstats reset before each batch; medians over
        rounds. A second, identical plain row is an A/A control: its ratio to
        the first is the resolution of the measurement.

        Every call names a job never named before in its row (a random
        permutation of job:<12 digits>), so every write is an insert and the
        supply is exact: the "job in schedule" row's schedule is seeded with
        every job it will name (and so is the native ZREM row's key), so each
        of its calls removes a job that is there; the "not in schedule" row's
        schedule exists (10^4 other members) and never holds the job. That one
        is the usual dead-lettering: a worker reports the failure of a job it
        took from the pending list, and the job left the schedule when it was
        promoted. Dead-lettering adds the job to `dead` at the server's now;
        the native ZADD it is held against does the same (score = the
        client's now in ms, a new member each call); the throughput section's
        reference ZADD (~1000 distinct scores at random positions) is shown
        beside it. Rows that do not dead-letter name a `dead` set that exists
        (10^3 members) and must stay unchanged."""
        batch = 500
        rounds = (10 if self.quick else 40) * self.rounds
        warm = 2
        prime = 50  # unmeasured calls of the same row right before each measured batch
        total = (rounds + warm) * (prime + batch)
        seed, dead_idle, sched_absent = "dl:seed", "dl:dead:idle", "dl:sched:absent"
        opt = ["MAXATTEMPTS", "5", "DEAD", dead_idle]
        fix, jit = ["fixed:1000", "3"], ["jitter:exponential:100:10000", "3"]
        die = ["fixed:1000", "5", "MAXATTEMPTS", "5", "DEAD"]
        is_int = lambda r: isinstance(r, int) and r >= 0  # noqa: E731
        is_dead = lambda r: r == -1  # noqa: E731
        is_one = lambda r: r == 1  # noqa: E731
        # (id, label, commandstats name, make(job) -> command, reply check, seeded key or None)
        variants = [
            ("znow", "native ZADD dead <now ms> job (the write dead-lettering makes)", "zadd",
             lambda j: ["ZADD", "dl:znow", now_ms(), j], is_int, None),
            ("zadd", "native ZADD, ~1000 distinct scores (throughput reference)", "zadd",
             lambda j: ["ZADD", "dl:zadd", "500000%012de-5" % random.randrange(100_000), j],
             is_int, None),
            ("zrem", "native ZREM schedule job, job in schedule", "zrem",
             lambda j: ["ZREM", "dl:zrem", j], is_one, "dl:zrem"),
            ("fixd", "ECHO.RETRY s job fixed:1000 3 (plain)", "echo.retry",
             lambda j: ["ECHO.RETRY", "dl:fixd", j] + fix, is_int, None),
            ("fixa", "ECHO.RETRY s job fixed:1000 3 (plain, a second time: A/A control)",
             "echo.retry", lambda j: ["ECHO.RETRY", "dl:fixa", j] + fix, is_int, None),
            ("fixo", "ECHO.RETRY s job fixed:1000 3 MAXATTEMPTS 5 DEAD d (not dead-lettered)",
             "echo.retry", lambda j: ["ECHO.RETRY", "dl:fixo", j] + fix + opt, is_int, None),
            ("jitr", "ECHO.RETRY s job jitter:exponential:100:10000 3 (plain)", "echo.retry",
             lambda j: ["ECHO.RETRY", "dl:jitr", j] + jit, is_int, None),
            ("jito", "ECHO.RETRY s job jitter:exponential:100:10000 3 MAXATTEMPTS 5 DEAD d "
             "(not dead-lettered)", "echo.retry",
             lambda j: ["ECHO.RETRY", "dl:jito", j] + jit + opt, is_int, None),
            ("dabs", "ECHO.RETRY s job fixed:1000 5 MAXATTEMPTS 5 DEAD d, dead-letters, "
             "job not in schedule", "echo.retry",
             lambda j: ["ECHO.RETRY", sched_absent, j] + die + ["dl:dead:abs"], is_dead, None),
            ("dins", "ECHO.RETRY s job fixed:1000 5 MAXATTEMPTS 5 DEAD d, dead-letters, "
             "job in schedule", "echo.retry",
             lambda j: ["ECHO.RETRY", "dl:sched:in", j] + die + ["dl:dead:in"], is_dead,
             "dl:sched:in"),
        ]
        own_keys = ["dl:znow", "dl:zadd", "dl:zrem", "dl:fixd", "dl:fixa", "dl:fixo", "dl:jitr",
                    "dl:jito", "dl:dead:abs", "dl:sched:in", "dl:dead:in"]

        # Set-up, never measured: the seed holds every job 0..total-1 at
        # random future fire times (a day's spread).
        t0 = time.perf_counter()
        self.c.call("DEL", seed, dead_idle, sched_absent, *own_keys)
        rng = random.Random(9)
        future = now_ms() + 1_000_000_000
        cmds = []
        for j0 in range(0, total, 1000):
            cmd = ["ZADD", seed]
            for i in range(j0, min(total, j0 + 1000)):
                cmd += [future + rng.randrange(86_400_000), "job:%012d" % i]
            cmds.append(cmd)
        self.c.pipeline(cmds)
        for _, _, _, _, _, seeded in variants:
            if seeded:
                self.c.call("COPY", seed, seeded, "REPLACE")
        self.c.call("DEL", seed)
        self.fill(dead_idle, 1000, now_ms() - 10_000_000, 1, "old:", 0)
        self.fill(sched_absent, 10_000, future, 1, "other:", 0)
        settle(self.c)
        # each row its own order of the jobs, each job named once
        order = {}
        for v in variants:
            perm = list(range(total))
            rng.shuffle(perm)
            order[v[0]] = perm
        print("  seeded in %.1f s" % (time.perf_counter() - t0), file=sys.stderr)

        def one_batch(v, b):
            vid, label, stat, make, check, seeded = v
            first = b * (prime + batch)
            primed = order[vid][first:first + prime]
            jobs = order[vid][first + prime:first + prime + batch]
            payload = b"".join(encode(make("job:%012d" % j)) for j in jobs)
            # warm this row's code and key, after whatever ran before it
            if any(not check(r) for r in self.c.pipeline(
                    [make("job:%012d" % j) for j in primed], check=False)):
                raise RuntimeError("%s: unexpected replies" % label)
            before = self.c.call("ZCARD", seeded) if seeded else 0
            self.c.call("CONFIG", "RESETSTAT")
            self.c.sock.sendall(payload)
            replies = [self.c.read() for _ in jobs]
            st = cmdstats(self.c)
            bad = [r for r in replies if not check(r)]
            if bad:
                raise RuntimeError("%s: unexpected replies, e.g. %r" % (label, bad[0]))
            if st.get(stat, (0, 0))[0] != batch:
                raise RuntimeError("%s: %s calls seen" % (label, st.get(stat)))
            if seeded and before - self.c.call("ZCARD", seeded) != len(jobs):
                raise RuntimeError("%s: the jobs were not all in the schedule" % label)
            return usec_per_call(st, stat)

        us = {v[0]: [] for v in variants}
        shuffler = random.Random(7)
        for b in range(rounds + warm):
            # A fresh order each round, not only a rotation: with a fixed cyclic
            # order each row always follows the same row (whose cache footprint
            # it inherits), which alone put two identical rows 14 % apart.
            round_order = list(variants)
            shuffler.shuffle(round_order)
            for v in round_order:
                u = one_batch(v, b)
                if b >= warm:
                    us[v[0]].append(u)
            if (b + 1) % 50 == 0:
                print("  retry options round %d/%d done" % (b + 1, rounds + warm),
                      file=sys.stderr)
        # nothing written where it must not be, nothing lost
        if (self.c.call("ZCARD", dead_idle) != 1000
                or self.c.call("ZCARD", sched_absent) != 10_000
                or self.c.call("ZCARD", "dl:dead:abs") != total
                or self.c.call("ZCARD", "dl:dead:in") != total
                or self.c.call("EXISTS", "dl:sched:in") != 0
                or self.c.call("ZCARD", "dl:fixo") != total):
            raise RuntimeError("retry options: wrong contents after the rounds")
        self.c.call("DEL", dead_idle, sched_absent, *own_keys)
        settle(self.c)

        m = {k: med(x) for k, x in us.items()}
        labels = {v[0]: v[1] for v in variants}

        def rr(a, b):
            # median of the per-round ratios, beside the ratio of the medians
            return med([x / y for x, y in zip(us[a], us[b])])

        section = "ECHO.RETRY MAXATTEMPTS n DEAD d (%d rounds of %d pipelined calls per row)" % (
            rounds, batch)
        for vid, _, _, _, _, _ in variants:
            v = m[vid]
            goal = ""
            if vid in ("fixa", "fixo", "jito"):
                p = {"fixa": "fixd", "fixo": "fixd", "jito": "jitr"}[vid]
                ratio = "%.3f× plain (per-round median %.3f×)" % (v / m[p], rr(vid, p))
                if vid != "fixa":
                    goal = "≤ 1.05× plain: %s" % ok(v / m[p] <= 1.05)
            elif vid in ("dabs", "dins"):
                ratio = ("%.2f× ZADD-now (per-round median %.2f×), %.2f× ZADD-ref, "
                         "%.2f× ZREM + ZADD-now" % (v / m["znow"], rr(vid, "znow"),
                                                   v / m["zadd"], v / (m["zrem"] + m["znow"])))
                goal = "≤ 1.5× ZADD: %s" % ok(v / m["znow"] <= 1.5)
            else:
                ratio = "%.2f× ZADD-now" % (v / m["znow"])
            self.add(section, labels[vid], "%.2f" % v, "µs/call (server)", "%.2f" % v, ratio,
                     goal, samples=us[vid], fmt="%.2f")

    # ----------------------------------------------------------------------
    def promote_call(self, method, sched, pend, batch):
        """One promotion of up to `batch` members; returns (moved, server µs,
        client wall seconds). Server time is from INFO commandstats, reset
        right before the call, so it holds exactly this call's commands."""
        self.c.call("CONFIG", "RESETSTAT")
        t0 = time.perf_counter()
        if method == "module":
            moved = self.c.call("ECHO.PROMOTE", sched, pend, "LIMIT", batch)
        elif method == "lua":
            moved = self.c.call("EVALSHA", self.sha["promote"], 2, sched, pend, batch)
        else:  # the native commands issued by the client (not atomic)
            due = self.c.call("ZRANGEBYSCORE", sched, "-inf", now_ms(), "LIMIT", 0, batch)
            if due:
                self.c.pipeline([["LPUSH", pend] + due,
                                 ["ZREMRANGEBYRANK", sched, 0, len(due) - 1]])
            moved = len(due)
        wall = time.perf_counter() - t0
        st = cmdstats(self.c)
        if method == "module":
            server = st.get("echo.promote", (0, 0))[1]
        elif method == "lua":
            server = st.get("evalsha", (0, 0))[1]
        else:
            server = sum(st.get(c, (0, 0))[1] for c in
                         ("zrangebyscore", "lpush", "zremrangebyrank"))
        return moved, server, wall

    def promotion(self):
        methods = [("module", "ECHO.PROMOTE"),
                   ("lua", "Lua EVALSHA (ZRANGEBYSCORE, LPUSH chunks, ZREMRANGEBYRANK)"),
                   ("native", "native ZRANGEBYSCORE + LPUSH + ZREMRANGEBYRANK from the client")]

        def rows(section, b, srv, wall, goal_here):
            ms = {m: med(srv[m]) for m, _ in methods}
            for m, label in methods:
                ratio = "%.2f× native, %.2f× Lua (server time)" % (
                    ms[m] / ms["native"], ms[m] / ms["lua"])
                goal = ""
                if m == "module" and goal_here:
                    goal = "≤ 1.2× native: %s; < Lua: %s" % (
                        ok(ms[m] <= 1.2 * ms["native"]), ok(ms[m] < ms["lua"]))
                self.add(section, label, "%.0f" % (b / med(wall[m])),
                         "members/s (client wall, median call)", "%.1f" % ms[m], ratio, goal,
                         samples=[b / w for w in wall[m]])

        def check(m, sched, pend, expect_moved):
            # nothing lost or duplicated, earliest-due member at the right end
            if (self.c.call("LLEN", pend) != expect_moved or self.c.call("ZCARD", sched) != FUTURE
                    or self.c.call("LINDEX", pend, -1) != b"job:0"):
                raise RuntimeError("%s: wrong result" % m)

        # Warm: rounds of A, B, C (order rotating); in each, the schedule is
        # filled with batch*k due members plus FUTURE not yet due (a schedule
        # also holds future retries; it never empties nor shrinks its hash
        # table below 1/8 full) and promoted by k calls back to back.
        # Median over all calls.
        per_round = [(100, 20), (1000, 8), (10000, 2)]
        if self.quick:
            per_round = [(100, 5), (1000, 2), (10000, 1)]
        for b, k in per_round:
            srv = {m: [] for m, _ in methods}
            wall = {m: [] for m, _ in methods}
            for r in range(self.rounds):
                for m, _ in rotate(methods, r):
                    sched, pend = "pr:sched", "pr:pend"
                    self.c.call("DEL", sched, pend)
                    self.fill_due(sched, b * k)
                    self.fill(sched, FUTURE, now_ms() + 1_000_000_000, 1, "future:", 0)
                    settle(self.c)
                    for _ in range(k):
                        moved, s_us, w = self.promote_call(m, sched, pend, b)
                        if moved != b:
                            raise RuntimeError("%s moved %d, expected %d" % (m, moved, b))
                        srv[m].append(s_us)
                        wall[m].append(w)
                    check(m, sched, pend, b * k)
                    self.c.call("DEL", sched, pend)
            print("  promotion batch %d done" % b, file=sys.stderr)
            rows("promotion, batch %d, warm (%d rounds × %d calls in a row)" % (b, self.rounds, k),
                 b, srv, wall, b == 1000)

        # Cold: three schedules filled up front; single calls of A, B, C in
        # turn, so each call finds its set's members out of the CPU caches
        # (as a promoter ticking among other traffic does).
        b, calls = (1000, 10) if self.quick else (1000, 90)
        keys = {m: ("pr:%s:sched" % m, "pr:%s:pend" % m) for m, _ in methods}
        for m, _ in methods:
            sched, pend = keys[m]
            self.c.call("DEL", sched, pend)
            self.fill_due(sched, b * calls)
            self.fill(sched, FUTURE, now_ms() + 1_000_000_000, 1, "future:", 0)
        settle(self.c)
        srv = {m: [] for m, _ in methods}
        wall = {m: [] for m, _ in methods}
        for i in range(calls):
            for m, _ in rotate(methods, i):
                moved, s_us, w = self.promote_call(m, keys[m][0], keys[m][1], b)
                if moved != b:
                    raise RuntimeError("%s moved %d, expected %d" % (m, moved, b))
                srv[m].append(s_us)
                wall[m].append(w)
        for m, _ in methods:
            check(m, keys[m][0], keys[m][1], b * calls)
            self.c.call("DEL", *keys[m])
        settle(self.c)
        rows("promotion, batch %d, cold (%d single calls each, interleaved)" % (b, calls),
             b, srv, wall, True)

    # ----------------------------------------------------------------------
    def promote_stream(self):
        """ECHO.PROMOTE of 1000 due members into a stream (one entry
        `job <member>` each, the group `workers` present, as the workers
        create it) against into a list (issue 13). Same schedules (1000·k due
        beside FUTURE not yet due), same call; the layouts alternate. Warm:
        rounds of k calls in a row per layout (order rotating); cold: both
        filled up front, single calls of each in turn. Server time from INFO
        commandstats reset right before each call."""
        b = 1000
        layouts = [("list", "ECHO.PROMOTE 1000 into a list"),
                   ("stream", "ECHO.PROMOTE 1000 into a stream (group `workers`)")]

        def prepare(layout, sched, pend, due):
            self.c.call("DEL", sched, pend)
            self.fill_due(sched, due)
            self.fill(sched, FUTURE, now_ms() + 1_000_000_000, 1, "future:", 0)
            if layout == "stream":
                self.c.call("XGROUP", "CREATE", pend, "workers", "$", "MKSTREAM")

        def check(layout, sched, pend, expect):
            # nothing lost or duplicated, the earliest-due member first out
            if layout == "stream":
                length = self.c.call("XLEN", pend)
                first = self.c.call("XRANGE", pend, "-", "+", "COUNT", 1)[0][1]
                ok_ = first == [b"job", b"job:0"]
            else:
                length = self.c.call("LLEN", pend)
                ok_ = self.c.call("LINDEX", pend, -1) == b"job:0"
            if length != expect or self.c.call("ZCARD", sched) != FUTURE or not ok_:
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
                self.add(section, label, "%.3f" % per[m], "µs/member (server)",
                         "%.1f" % med(srv[m]), ratio, goal,
                         samples=[s / b for s in srv[m]], fmt="%.3f")

        # warm
        k = 2 if self.quick else 8
        srv = {m: [] for m, _ in layouts}
        for r in range(self.rounds):
            for m, _ in rotate(layouts, r):
                sched, pend = "ps:sched", "ps:pend"
                prepare(m, sched, pend, b * k)
                settle(self.c)
                for _ in range(k):
                    moved, s_us, _ = self.promote_call("module", sched, pend, b)
                    if moved != b:
                        raise RuntimeError("%s moved %d, expected %d" % (m, moved, b))
                    srv[m].append(s_us)
                check(m, sched, pend, b * k)
                self.c.call("DEL", sched, pend)
        settle(self.c)
        rows("promote into a stream vs a list, batch 1000, warm (%d rounds × %d calls in a row)"
             % (self.rounds, k), srv)
        print("  promote_stream warm done", file=sys.stderr)

        # cold
        calls = 10 if self.quick else 60
        keys = {m: ("ps:%s:sched" % m, "ps:%s:pend" % m) for m, _ in layouts}
        for m, _ in layouts:
            prepare(m, keys[m][0], keys[m][1], b * calls)
        settle(self.c)
        # A reference in the same turns, not a goal: the stream part done
        # natively, 1000 XADD <stream> * job <member> pipelined by the client
        # (server time: the XADDs' own), into a stream with the same group.
        xkey = "ps:xadd:pend"
        self.c.call("DEL", xkey)
        self.c.call("XGROUP", "CREATE", xkey, "workers", "$", "MKSTREAM")
        xadd_us = []

        def native_xadd(i):
            cmds = [["XADD", xkey, "*", "job", "job:%d" % (i * b + j)] for j in range(b)]
            payload = b"".join(encode(c) for c in cmds)
            self.c.call("CONFIG", "RESETSTAT")
            self.c.sock.sendall(payload)
            replies = [self.c.read() for _ in cmds]
            if any(isinstance(r, ReplyError) for r in replies):
                raise RuntimeError("native XADD: %r" % replies[0])
            calls_, us = cmdstats(self.c).get("xadd", (0, 0))
            if calls_ != b:
                raise RuntimeError("native XADD: %d calls seen" % calls_)
            return us

        srv = {m: [] for m, _ in layouts}
        for i in range(calls):
            for m, _ in rotate(layouts + [("xadd", "")], i):
                if m == "xadd":
                    xadd_us.append(native_xadd(i))
                    continue
                moved, s_us, _ = self.promote_call("module", keys[m][0], keys[m][1], b)
                if moved != b:
                    raise RuntimeError("%s moved %d, expected %d" % (m, moved, b))
                srv[m].append(s_us)
        for m, _ in layouts:
            check(m, keys[m][0], keys[m][1], b * calls)
            self.c.call("DEL", *keys[m])
        if self.c.call("XLEN", xkey) != b * calls:
            raise RuntimeError("native XADD: wrong length")
        self.c.call("DEL", xkey)
        settle(self.c)
        pairs = [s / l for s, l in zip(srv["stream"], srv["list"])]
        section = ("promote into a stream vs a list, batch 1000, cold (%d single calls each, "
                   "interleaved)" % calls)
        rows(section, srv, pairs)
        x = med(xadd_us) / b
        self.add(section, "reference: 1000 native XADD s * job <member>, pipelined (not a goal)",
                 "%.3f" % x, "µs/member (server, the XADDs' own)", "%.1f" % med(xadd_us),
                 "%.2f× list, %.2f× stream" % (x / (med(srv["list"]) / b),
                                             x / (med(srv["stream"]) / b)),
                 samples=[u / b for u in xadd_us], fmt="%.3f")

    # ----------------------------------------------------------------------
    def web_scrape(self):
        """echomq-web scraping 500 queues (issue 14): half list queues, half
        stream queues (group `workers`, entries delivered and not acked),
        each with future and due members in its schedule, pending jobs and a
        dead set. One echomq-web process (target/release/echomq-web) on a free
        127.0.0.1 port, started by this script with --queue for each, and
        timed from here over one keep-alive HTTP connection: each round
        `k` GETs of /metrics and `k` of /api/queues (order rotating), wall
        time per request (HTTP + the scrape + rendering), median over all.
        Round trips per scrape: what echomq-web reports (`round_trips`, the
        pipelines it sent); commands and server time per scrape: INFO
        commandstats reset right before one /metrics scrape, read after."""
        web = self.web
        if not web or not os.path.exists(web):
            raise RuntimeError("%s not found: cargo build --release --workspace" % web)
        n_queues = 100 if self.quick else 500
        k = 5 if self.quick else 20
        self.c.call("FLUSHALL", "SYNC")
        now = now_ms()
        names = ["q%03d" % i for i in range(n_queues)]
        for i, q in enumerate(names):
            s, p, d = "{%s}:schedule" % q, "{%s}:pending" % q, "{%s}:dead" % q
            cmds = [["ZADD", s] + [x for j in range(20) for x in (now + 30_000 + 1000 * j, "f%d" % j)],
                    ["ZADD", s, now - 5000, "due0", now - 4000, "due1"],
                    ["ZADD", d, now - 9000, "dead0"]]
            if i % 2:
                cmds += [["XGROUP", "CREATE", p, "workers", "$", "MKSTREAM"]]
                cmds += [["XADD", p, "*", "job", "j%d" % j] for j in range(4)]
                cmds += [["XREADGROUP", "GROUP", "workers", "c1", "COUNT", 2, "STREAMS", p, ">"]]
            else:
                cmds += [["LPUSH", p, "j0", "j1", "j2"]]
            self.c.pipeline(cmds)
        args = [web, "--url", "redis://127.0.0.1:%d/" % self.port, "--listen", "127.0.0.1:0"]
        for q in names:
            args += ["--queue", q]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = proc.stdout.readline()
            url = next((w for w in line.split() if w.startswith("http://")), None)
            if not url:
                raise RuntimeError("echomq-web did not start: %r" % line)
            hostport = url[len("http://"):].rstrip("/")
            host, port = hostport.rsplit(":", 1)
            hc = http.client.HTTPConnection(host, int(port), timeout=30)

            def get(path):
                t = time.perf_counter()
                hc.request("GET", path)
                r = hc.getresponse()
                body = r.read()
                ms = (time.perf_counter() - t) * 1000
                if r.status != 200:
                    raise RuntimeError("GET %s: %d %r" % (path, r.status, body[:200]))
                return ms, body

            # Checked once: every queue in both, nothing in error.
            _, body = get("/metrics")
            text = body.decode()
            if "echomq_up 1" not in text.splitlines():
                raise RuntimeError("echomq_up is not 1")
            samples = sum(1 for l in text.splitlines() if l.startswith("echomq_queue_"))
            if samples != 5 * n_queues:
                raise RuntimeError("%d queue samples for %d queues" % (samples, n_queues))
            _, body = get("/api/queues")
            api = json.loads(body)
            if len(api["queues"]) != n_queues or any("error" in q for q in api["queues"]):
                raise RuntimeError("the API does not show every queue")
            round_trips = api["round_trips"]
            in_flight = sum(q["in_flight"] for q in api["queues"])
            if in_flight != 2 * (n_queues // 2):
                raise RuntimeError("in_flight %d" % in_flight)
            for _ in range(3):
                get("/metrics")
                get("/api/queues")
            times = {"/metrics": [], "/api/queues": []}
            for r in range(self.rounds):
                for path in rotate(list(times), r):
                    for _ in range(k):
                        times[path].append(get(path)[0])
            # Commands and server time of one scrape, per endpoint.
            srv = {p: [] for p in times}
            spread_us = {p: [] for p in times}
            cmds = {p: [] for p in times}
            for _, path in ((r, p) for r in range(self.rounds) for p in times):
                self.c.call("CONFIG", "RESETSTAT")
                get(path)
                st = cmdstats(self.c)
                st.pop("config|resetstat", None)
                # ECHO.SPREAD runs one ZCOUNT per bucket inside the server
                # (60 buckets by default): counted by commandstats, not sent.
                nested = st.get("echo.spread", (0, 0))[0] * 60
                cmds[path].append(sum(c for c, _ in st.values()) - nested)
                # The nested ZCOUNTs' time is inside ECHO.SPREAD's already:
                # of ZCOUNT's, only the scrape's own calls (one per queue) count.
                zc_calls, zc_us = st.pop("zcount", (0, 0))
                own = zc_calls - nested
                srv[path].append(sum(u for _, u in st.values())
                                 + (zc_us * own / zc_calls if zc_calls else 0))
                spread_us[path].append(st.get("echo.spread", (0, 0))[1])
            hc.close()
        finally:
            proc.terminate()
            proc.wait()
        self.c.call("FLUSHALL", "SYNC")
        section = ("echomq-web scrape of %d queues (%d list, %d stream), %d rounds × %d GETs"
                   % (n_queues, n_queues - n_queues // 2, n_queues // 2, self.rounds, k))
        for path, xs in times.items():
            m = med(xs)
            self.add(section, "GET %s, wall time per request" % path, "%.1f" % m, "ms",
                     goal="< 100 ms: %s" % ("yes" if m < 100 else "NO"), samples=xs, fmt="%.1f")
        self.add(section, "round trips to the server per scrape (echomq-web's round_trips)",
                 round_trips, "round trips",
                 goal="a handful: %s" % ("yes" if round_trips <= 5 else "NO"))
        for path in times:
            self.add(section, "GET %s: commands sent per scrape (INFO commandstats, less the "
                     "ZCOUNTs run inside ECHO.SPREAD); server µs per scrape (nested ZCOUNTs "
                     "counted once, inside ECHO.SPREAD)" % path, "%d" % med(cmds[path]),
                     "commands", server_us="%.0f" % med(srv[path]), samples=cmds[path])
        sp, total = med(spread_us["/api/queues"]), med(srv["/api/queues"])
        self.add(section, "GET /api/queues: of which ECHO.SPREAD (one per queue, 60 buckets: 60 "
                 "range counts each; /metrics sends none)", "%.0f" % sp, "server µs per scrape",
                 server_us="%.0f" % sp,
                 ratio="%.0f%% of the server time" % (100 * sp / total) if total else "",
                 samples=spread_us["/api/queues"])

    def worker_layouts(self):
        """The Rust example worker (examples/worker.rs) end to end, stream
        layout against list layout (issue 13). Each run: N jobs seeded by
        this script (unmeasured; for the stream, the group first), then one
        worker process with 4 consumer threads and its promoter, as shipped,
        against the same server; this script polls SCARD done every 2 ms and
        times from the first completion it sees to the last (so process start
        and the worker's 200 ms blocking-read tail at exit are left out).
        Two workloads: no failures (--fail-first 0: take, run, acknowledge),
        and every other job failing once (--fail-first 1, retried with
        fixed:0, so the worker's promoter moves it back at once: the retry
        path and ECHO.PROMOTE into the layout are inside the measure). The
        layouts alternate within each round, order rotating; the first round
        is a warm-up and not recorded."""
        worker = self.worker
        if not os.path.exists(worker):
            raise RuntimeError("%s not found: cargo build --release --example worker" % worker)
        n = 2000 if self.quick else 10_000
        queue = "bw"
        keys = ["{%s}:%s" % (queue, s) for s in
                ("pending", "schedule", "attempts", "done", "done-by", "dead")]
        pend, done_key = keys[0], keys[3]
        workloads = [(0, "no failures (--fail-first 0)"),
                     (1, "every other job fails once, retried (--fail-first 1 --policy fixed:0)")]
        variants = [(ff, layout) for ff, _ in workloads for layout in ("stream", "list")]
        rates = {v: [] for v in variants}
        walls = {v: [] for v in variants}
        cmdline = None

        def one_run(ff, layout, name):
            self.c.call("DEL", *keys)
            settle(self.c)
            jobs = ["job-%d" % i for i in range(n)]
            if layout == "stream":
                self.c.call("XGROUP", "CREATE", pend, "workers", "$", "MKSTREAM")
                for j0 in range(0, n, 1000):
                    self.c.pipeline([["XADD", pend, "*", "job", j] for j in jobs[j0:j0 + 1000]])
            else:
                for j0 in range(0, n, 1000):
                    self.c.call("LPUSH", pend, *jobs[j0:j0 + 1000])
            args = [worker, "--url", "redis://127.0.0.1:%d/" % self.port, "--queue", queue,
                    "--layout", layout, "--jobs", str(n), "--fail-first", str(ff),
                    "--policy", "fixed:0", "--max-attempts", "5", "--consumers", "4",
                    "--deadline-secs", "120", "--name", name]
            t_spawn = time.perf_counter()
            p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                t_first = d_first = None
                while True:
                    d = self.c.call("SCARD", done_key)
                    t = time.perf_counter()
                    if d > 0 and t_first is None:
                        t_first, d_first = t, d
                    if d >= n:
                        t_end = t
                        break
                    if p.poll() is not None or t - t_spawn > 120:
                        raise RuntimeError("worker %s: %d/%d done, exit %s: %s" % (
                            name, d, n, p.returncode, p.stderr.read().strip()))
                    time.sleep(0.002)
                out, err = p.communicate(timeout=30)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if p.returncode != 0:
                raise RuntimeError("worker %s exited %d: %s" % (name, p.returncode, err.strip()))
            # every job done exactly once, nothing left
            left = self.c.call("XLEN" if layout == "stream" else "LLEN", pend)
            if layout == "stream":
                left += self.c.call("XPENDING", pend, "workers")[0]
            completions = sum(int(x) for x in self.c.call("HGETALL", keys[4])[1::2])
            if (left or self.c.call("ZCARD", keys[5]) or self.c.call("ZCARD", keys[1])
                    or completions != n):
                raise RuntimeError("worker %s: %d left, %d completions of %d" % (
                    name, left, completions, n))
            self.c.call("DEL", *keys)
            return (n - d_first) / (t_end - t_first), t_end - t_spawn, args

        for r in range(self.rounds + 1):
            for ff, layout in rotate(variants, r):
                rate, wall, args = one_run(ff, layout, "bench-%s-%d-%d" % (layout, ff, r))
                if r > 0:
                    rates[(ff, layout)].append(rate)
                    walls[(ff, layout)].append(wall)
                cmdline = args
            print("  worker_layouts round %d/%d done%s" % (
                r + 1, self.rounds + 1, " (warm-up)" if r == 0 else ""), file=sys.stderr)
        self.bench_cmds.append("(worker) " + " ".join(
            a if a != cmdline[0] else "target/release/examples/worker" for a in cmdline))
        section = "Rust worker end to end, %d jobs, 4 consumers (%d rounds, layouts interleaved)" % (
            n, self.rounds)
        for ff, label in workloads:
            s, l = med(rates[(ff, "stream")]), med(rates[(ff, "list")])
            pairs = med([x / y for x, y in zip(rates[(ff, "stream")], rates[(ff, "list")])])
            for layout in ("list", "stream"):
                v = (ff, layout)
                ratio, goal = "", ""
                if layout == "stream":
                    ratio = "%.2f× list (median of per-round ratios %.2f×)" % (s / l, pairs)
                    goal = "≥ 0.6× list: %s" % ok(s / l >= 0.6)
                self.add(section, "--layout %s, %s [process start to last done: median %.2f s]"
                         % (layout, label, med(walls[v])), "%.0f" % med(rates[v]),
                         "jobs/s (first to last completion)", "", ratio, goal, samples=rates[v])

    # ----------------------------------------------------------------------
    def future_members(self):
        big = 200_000 if self.quick else 2_000_000
        sets = [("fm:small", 10_000, "10^4"),
                ("fm:big", big, "2·10^6" if big == 2_000_000 else str(big))]
        t0 = time.perf_counter()
        for key, n, _ in sets:
            self.c.call("DEL", key)
            # not yet due: 10^9 ms (about 11.6 days) from now and later
            got = self.fill(key, n, now_ms() + 1_000_000_000, 1, "f:", 0)
            if got != n:
                raise RuntimeError("fill %s: %d" % (key, got))
        print("  built %s future members in %.1f s" % (
            " + ".join(str(n) for _, n, _ in sets), time.perf_counter() - t0), file=sys.stderr)
        calls = 15 if self.quick else 60
        res = {key: [] for key, _, _ in sets}
        settle(self.c)
        for i in range(calls):
            for key, n, _ in rotate(sets, i):
                self.fill_due(key, 1000)
                moved, s, _ = self.promote_call("module", key, "fm:pend", 1000)
                if moved != 1000:
                    raise RuntimeError("moved %d" % moved)
                res[key].append(s)
                self.c.call("DEL", "fm:pend")
        for key, n, _ in sets:
            if self.c.call("ZCARD", key) != n:
                raise RuntimeError("future members were moved")
        small = med(res["fm:small"])
        for key, n, label in sets:
            v = med(res[key])
            goal = ""
            if key == "fm:big":
                goal = "≤ 1.5×: %s" % ok(v / small <= 1.5)
            self.add("promote 1000 due beside N future members (%d calls each)" % calls,
                     "ECHO.PROMOTE, N = %s" % label,
                     "%.1f" % v, "µs/call (server)", "%.1f" % v,
                     "%.2f× N = 10^4" % (v / small), goal, samples=res[key], fmt="%.0f")
        self.c.call("DEL", *[k for k, _, _ in sets])
        settle(self.c)

    # ----------------------------------------------------------------------
    def latency(self):
        calls = 10 if self.quick else 40
        methods = [("module", "ECHO.PROMOTE (default LIMIT 1000)"),
                   ("lua", "Lua EVALSHA promote, 1000")]
        res = {m: ([], [], []) for m, _ in methods + [("idle", "")]}
        for r in range(self.rounds):
            for m in rotate(["idle", "module", "lua"], r):
                sched, pend = "lat:sched", "lat:pend"
                self.c.call("DEL", sched, pend)
                if m != "idle":
                    self.fill_due(sched, 1000 * calls)
                    self.fill(sched, 1000, now_ms() + 1_000_000_000, 1, "future:", 0)
                settle(self.c)
                self.c.call("CONFIG", "RESETSTAT")
                stop = multiprocessing.Event()
                q = multiprocessing.Queue()
                p = multiprocessing.Process(target=pinger, args=(self.port, stop, q), daemon=True)
                p.start()
                time.sleep(0.1)
                for _ in range(calls):
                    if m == "module":
                        n = self.c.call("ECHO.PROMOTE", sched, pend)
                    elif m == "lua":
                        n = self.c.call("EVALSHA", self.sha["promote"], 2, sched, pend, 1000)
                    else:
                        n = 1000
                    if n != 1000:
                        raise RuntimeError("%s moved %d" % (m, n))
                    time.sleep(0.003)
                stop.set()
                mx, p99, count = q.get(timeout=30)
                p.join(timeout=30)
                st = cmdstats(self.c)
                if m != "idle":
                    res[m][0].append(usec_per_call(st, "echo.promote" if m == "module" else "evalsha"))
                res[m][1].append(mx)
                res[m][2].append(p99)
                self.c.call("DEL", sched, pend)
        srv_lua = med(res["lua"][0])
        for m, label in methods:
            s = med(res[m][0])
            goal = "< Lua: %s" % ok(s < srv_lua) if m == "module" else ""
            self.add("latency, one promote of 1000", label, "%.1f" % s, "µs/call (server)",
                     "%.1f" % s, "%.2f× Lua" % (s / srv_lua), goal, samples=res[m][0],
                     fmt="%.1f")
        for m, label in [("idle", "no promotes (noise floor)")] + methods:
            self.add("latency, concurrent PING client", "during: " + label,
                     "%.2f" % (med(res[m][1]) * 1000),
                     "ms max PING round trip (p99 %.3f ms)" % (med(res[m][2]) * 1000),
                     samples=[x * 1000 for x in res[m][1]], fmt="%.2f")

    # ----------------------------------------------------------------------
    def spread(self):
        big = 100_000 if self.quick else 1_000_000
        w = 1_000_000
        start = now_ms() + 1_000_000
        sets = [("sp:small", 1_000, "10^3"), ("sp:big", big, "10^6" if big == 10 ** 6 else str(big))]
        for key, n, _ in sets:
            self.c.call("DEL", key)
            self.fill(key, n, start, w // n, "s:", 0)
        calls = 40
        res = {k: [] for k, _, _ in sets}
        for r in range(3 * self.rounds):
            for key, n, _ in rotate(sets, r):
                settle(self.c)
                self.c.call("CONFIG", "RESETSTAT")
                for _ in range(calls):
                    counts = self.c.call("ECHO.SPREAD", key, start, start + w, 20)
                if sum(counts) != n or len(counts) != 20:
                    raise RuntimeError("spread %s: %r" % (key, counts))
                res[key].append(usec_per_call(cmdstats(self.c), "echo.spread"))
        small = med(res["sp:small"])
        for key, n, label in sets:
            v = med(res[key])
            goal = "about the same: %s" % ok(v / small <= 1.5) if key == "sp:big" else ""
            self.add("ECHO.SPREAD, 20 buckets (%d rounds of %d calls)" % (3 * self.rounds, calls),
                     "%s members" % label, "%.1f" % v,
                     "µs/call (server)", "%.1f" % v, "%.2f× 10^3" % (v / small), goal,
                     samples=res[key], fmt="%.1f")
        self.c.call("DEL", *[k for k, _, _ in sets])
        settle(self.c)

    # ----------------------------------------------------------------------
    def memory(self):
        jobs = 50_000 if self.quick else 500_000
        rounds = max(1, min(self.rounds, 3))
        res = {"retry": ([], []), "zadd": ([], [])}
        key = "mem:sched"
        for r in range(rounds):
            for m in (["retry", "zadd"] if r % 2 == 0 else ["zadd", "retry"]):
                self.c.call("FLUSHALL", "SYNC")
                self.c.call("MEMORY", "PURGE")
                before = int(info(self.c, "memory")["used_memory"])
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
                    self.c.pipeline(cmds)
                if self.c.call("ZCARD", key) != jobs:
                    raise RuntimeError("memory: %s wrote a wrong count" % m)
                after = int(info(self.c, "memory")["used_memory"])
                res[m][0].append(after)
                res[m][1].append(after - before)
            print("  memory round %d/%d done" % (r + 1, rounds), file=sys.stderr)
        self.c.call("FLUSHALL", "SYNC")
        z, zd = med(res["zadd"][0]), med(res["zadd"][1])
        for m, label in [("zadd", "ZADD"), ("retry", "ECHO.RETRY jitter:exponential:100:10000 3")]:
            a, d = med(res[m][0]), med(res[m][1])
            goal = "≤ 1.01×: %s" % ok(a / z <= 1.01) if m == "retry" else ""
            self.add("memory, %d jobs" % jobs, label, "%.0f" % a, "bytes used_memory",
                     "", "%.3f× ZADD (growth %.0f B, %.3f×)" % (a / z, d, d / zd), goal,
                     samples=res[m][0])

    # ----------------------------------------------------------------------
    def auto_promote(self):
        """Promotion inside the server: fire time to BRPOP, and a backlog."""
        import threading
        jobs = 60 if self.quick else 200
        window_ms = 1000 if self.quick else 2000
        sched, pend = "ap:sched", "ap:pend"
        for interval_ms in (10, 1):
            lags = []          # every job of every round, ms
            round_medians = []
            for r in range(self.rounds):
                self.c.call("DEL", sched, pend)
                self.c.call("CONFIG", "SET", "echomq.auto-promote-interval-ms", interval_ms,
                            "echomq.auto-promote-limit", 1000,
                            "echomq.auto-promote", "%s %s" % (sched, pend))
                got = []
                consumer = Conn(self.port)

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
                fires = self.c.pipeline(cmds)[-1]
                fire_of = {b"ap:%d:%d" % (r, i): f for i, f in enumerate(fires)}
                t.join(timeout=window_ms / 1000 + 30)
                consumer.close()
                mine = sorted(at - fire_of[job] for job, at in got)
                lags += mine
                round_medians.append(med(mine))
            lags.sort()
            pct = lambda q: lags[min(len(lags) - 1, int(len(lags) * q))]
            goal = "median <= %d ms: %s" % (interval_ms + 2, ok(med(lags) <= interval_ms + 2))
            self.add("auto-promote, fire time to BRPOP", "interval %d ms (%d jobs x %d rounds)"
                     % (interval_ms, jobs, self.rounds), "%.1f" % med(lags),
                     "ms median lag (p90 %.1f, p99 %.1f, max %.1f, min %.1f)"
                     % (pct(0.9), pct(0.99), lags[-1], lags[0]),
                     ratio="%.2f× interval" % (med(lags) / interval_ms), goal=goal,
                     samples=round_medians, fmt="%.1f")
        self.c.call("CONFIG", "SET", "echomq.auto-promote", "")
        self.c.call("DEL", sched, pend)

        # A backlog: 100k due, interval 200 ms, limit 1000, PING alongside.
        n = 20_000 if self.quick else 100_000
        drains, pings_max, pings_p99 = [], [], []
        for r in range(min(self.rounds, 3)):
            self.c.call("CONFIG", "SET", "echomq.auto-promote", "")
            self.c.call("DEL", sched, pend)
            self.fill_due(sched, n)
            self.c.call("CONFIG", "SET", "echomq.auto-promote-interval-ms", 200,
                        "echomq.auto-promote-limit", 1000)
            settle(self.c)
            stop = multiprocessing.Event()
            q = multiprocessing.Queue()
            p = multiprocessing.Process(target=pinger, args=(self.port, stop, q), daemon=True)
            p.start()
            time.sleep(0.1)
            t0 = time.perf_counter()
            self.c.call("CONFIG", "SET", "echomq.auto-promote", "%s %s" % (sched, pend))
            while self.c.call("EXISTS", sched):
                time.sleep(0.001)
            drains.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.05)
            stop.set()
            mx, p99, _ = q.get(timeout=30)
            p.join(timeout=30)
            pings_max.append(mx * 1000)
            pings_p99.append(p99 * 1000)
            if self.c.call("LLEN", pend) != n:
                raise RuntimeError("backlog: pending holds %s" % self.c.call("LLEN", pend))
        self.c.call("CONFIG", "SET", "echomq.auto-promote", "",
                    "echomq.auto-promote-interval-ms", 10)
        self.c.call("DEL", sched, pend)
        settle(self.c)
        self.add("auto-promote, backlog", "%d due, interval 200 ms, limit 1000" % n,
                 "%.0f" % med(drains), "ms to drain (%d full ticks)" % (n // 1000),
                 ratio="%.3f× one interval per tick" % (med(drains) / (n // 1000 * 200)),
                 goal="well under 1 s: %s" % ok(med(drains) < 1000), samples=drains)
        self.add("auto-promote, backlog", "concurrent PING during the drain",
                 "%.2f" % med(pings_max), "ms max PING round trip (p99 %.3f ms)" % med(pings_p99),
                 goal="a few ms: %s" % ok(med(pings_max) < 5), samples=pings_max, fmt="%.2f")


def ok(b):
    return "yes" if b else "NO"


def pinger(port, stop, q):
    """A concurrent client: back-to-back PINGs, each timed."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lat = []
    msg = b"*1\r\n$4\r\nPING\r\n"
    while not stop.is_set():
        t0 = time.perf_counter()
        s.sendall(msg)
        buf = b""
        while not buf.endswith(b"\r\n"):
            buf += s.recv(64)
        lat.append(time.perf_counter() - t0)
        # leave the CPU to the server and the promoting client (2 cores)
        time.sleep(0.0002)
    s.close()
    lat.sort()
    q.put((lat[-1], lat[int(len(lat) * 0.99)], len(lat)))


# --------------------------------------------------------------------------
# Workloads for profiling (scripts/profile.sh): one command at a time, in a
# loop, for a given number of seconds.

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
                b.fill("pf:sched", 10_000, now_ms() + 1_000_000_000, 1, "other:", 0)
        args = ["valkey-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "50", "-P", "16",
                "-r", "100000", "-n", "100000000", "-q",
                "ECHO.RETRY", "pf:sched", "job:__rand_int__", policy, attempts] + opts
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(seconds)
        p.terminate()
        p.wait()
    elif name == "zadd":
        args = ["valkey-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "50", "-P", "16",
                "-r", "100000", "-n", "100000000", "-q",
                "ZADD", "pf:sched", "500000__rand_int__e-5", "job:__rand_int__"]
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(seconds)
        p.terminate()
        p.wait()
    elif name in ("promote", "promote-lua", "promote-stream"):
        # Fill with client-side ZADDs (not a script) so that the fill is told
        # apart from the promotion in the profile (zaddCommand vs the handler).
        # promote-stream: into a stream with the group `workers` (issue 13).
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
    elif name == "spread":
        b.fill("pf:sp", 1_000_000, now_ms(), 1, "s:", 0)
        while time.time() < end:
            c.call("ECHO.SPREAD", "pf:sp", now_ms(), now_ms() + 1_000_000, 20)
    else:
        raise SystemExit("unknown workload %s" % name)


def main():
    # SIGTERM (from bench.sh's cleanup) unwinds like Ctrl-C: subprocess.run
    # kills a running valkey-benchmark, the PING process is a daemon.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="small sizes, for testing the script")
    ap.add_argument("--only", default="", help="comma-separated sections")
    ap.add_argument("--worker", default=os.path.join(HERE, "..", "target", "release", "examples",
                                                     "worker"),
                    help="the examples/worker binary, for the worker_layouts section")
    ap.add_argument("--web", default=os.path.join(HERE, "..", "target", "release", "echomq-web"),
                    help="the echomq-web binary, for the web_scrape section")
    ap.add_argument("--workload")
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    if a.workload:
        workload(a.port, a.workload, a.seconds)
        return
    b = Bench(a.port, a.rounds, a.quick, a.worker, a.web)
    sections = ["throughput", "retry_options", "promotion", "future_members", "latency", "spread",
                "memory", "auto_promote", "promote_stream", "worker_layouts", "web_scrape"]
    if a.only:
        sections = [s for s in sections if s in a.only.split(",")]
    t0 = time.perf_counter()
    for s in sections:
        t = time.perf_counter()
        print("%s ..." % s, file=sys.stderr)
        getattr(b, s)()
        print("  %s took %.0f s" % (s, time.perf_counter() - t), file=sys.stderr)
    elapsed = time.perf_counter() - t0

    print()
    print("valkey-benchmark commands (each run -n per round after a warm-up), and (worker) the last")
    print("worker run (the others differ in --layout, --fail-first and --name):")
    for cmd in b.bench_cmds:
        print("  " + cmd)
    print()
    print("Each section interleaves what it compares and reports medians; ratios are of the")
    print("medians. Throughput: %d rounds, each one valkey-benchmark run per row (order rotating)."
          % b.rounds)
    print("Retry options (MAXATTEMPTS/DEAD): rounds of one pipelined batch per row (order shuffled")
    print("each round), server time per call from INFO commandstats reset before each batch.")
    print("Promotion: warm = %d rounds of k calls in a row per variant; cold = single calls of"
          % b.rounds)
    print("each variant in turn; future members: single calls in turn. Medians over calls, server")
    print("time from INFO commandstats reset before each call. Latency: %d rounds." % b.rounds)
    print("Memory: %d rounds (order alternating). 'min–max' is over rounds or calls." %
          max(1, min(b.rounds, 3)))
    print("Auto-promote: %d rounds per interval of jobs retried with jitter:fixed:2000 in one MULTI,"
          % b.rounds)
    print("popped by a BRPOP client; lag = receipt wall time - fire time (min–max: round medians);")
    print("backlog: %d rounds, drain time from CONFIG SET until the schedule is gone." %
          max(1, min(b.rounds, 3)))
    print("Promote into a stream vs a list: warm = %d rounds of k calls per layout (order rotating),"
          % b.rounds)
    print("cold = single calls of each layout in turn; server time per call / 1000 members.")
    print("Rust worker: %d recorded rounds (+1 warm-up) of one worker process per layout and workload"
          % b.rounds)
    print("(order rotating); jobs/s from the first to the last completion seen by SCARD polled every")
    print("2 ms.")
    print("echomq-web: 500 queues; wall time per GET over one keep-alive connection, %d rounds"
          % b.rounds)
    print("(order rotating); commands and server µs of one scrape from INFO commandstats.")
    print()
    print("| section | row | median | min–max (rounds or calls) | unit | server µs/call | ratio | goal |")
    print("|---|---|---:|---:|---|---:|---|---|")
    for row in b.rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    print()
    print("measurement took %.0f s" % elapsed)


if __name__ == "__main__":
    main()
