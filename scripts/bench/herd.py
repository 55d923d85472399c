"""Section `herd`: the herd against a dependency.

A dependency blinks: N jobs (10,000; --herd-jobs, or 2,000 with --quick)
are in flight at once (added to a stream queue and taken by one consumer,
as if each were in a worker's hands), and the first call of each fails:
the failures are step 4 of the protocol below for 100 jobs per MULTI/EXEC,
pipelined, so the blink is over in a fraction of a second (its length and
the first retried call's time are in the JSON). The
dependency stays down for 1 s after that (answering "unavailable, retry
after <ms until it is up>"), then serves RATE calls a second from a token
bucket of BURST (500/s, 50), answering "overloaded, retry after <ms until
the next token>" beyond that. The ideal finish is 1 s + N / RATE.

Five strategies run back to back on fresh keys, with the same workers and
the server's own promotion (echomq.auto-promote, 10 ms):
  1. exponential:100:30000 (no jitter)
  2. jitter:exponential:100:30000 (full jitter)
  3. full jitter + echomq.release-limits "<schedule> 500/s 50"
  4. full jitter + "<schedule> adaptive:10000/s 50" (told a ceiling 20x too high)
  5. as 3, and the worker calls ECHO.HOLD <schedule> <retry after> when the
     dependency says when to come back, then fails the job as usual.

The workers are threads of this process, each with its own connection,
following the stream protocol of docs/workers.md: XREADGROUP COUNT 1; on
success SADD done + XACK + XDEL in one MULTI/EXEC; on failure MULTI,
ECHO.RETRY ... MAXATTEMPTS 50 DEAD dead, XACK, XDEL, EXEC; a takeover
(XAUTOCLAIM) at start and every half lease (no worker dies here, so it
finds nothing). The attempt number is kept in this process (the workers
are its threads) instead of a HINCRBY round trip.

Every call to the dependency is recorded (time, attempt, outcome); the
per-100-ms series of every strategy go to target/bench/herd-limits.json,
which examples/demo.rs draws as docs/herd-limits.svg.
"""

import json
import math
import os
import sys
import threading
import time

from .client import Conn, encode
from .harness import SCRIPTS, ok, server_configs

RATE = 500         # the dependency's calls a second once it is up
BURST = 50         # its token bucket
DOWN_S = 1.0       # how long it stays down after the blink
MAX_ATTEMPTS = 50
BIN_S = 0.1        # the series' bins
PLAIN = "exponential:100:30000"
JITTER = "jitter:exponential:100:30000"
LIMIT = "500/s 50"
ADAPTIVE = "adaptive:10000/s 50"
LEASE_MS = 30000
BLINK_BATCH = 100  # jobs failed in one MULTI/EXEC during the blink
BLINK_CHUNK = 500  # jobs failed in one write during the blink
# the server's promotion in the herd sections: every 10 ms, up to 1000 a tick,
# and no queue promoted or limited but the one a run sets (put back after)
PROMOTION = {"echomq.auto-promote-interval-ms": 10, "echomq.auto-promote-limit": 1000,
             "echomq.auto-promote": "", "echomq.release-limits": ""}
JSON_PATH = os.path.join(SCRIPTS, "..", "target", "bench", "herd-limits.json")

# (short name, title, policy, release limit or None, hold on retry-after)
STRATEGIES = [
    ("plain", "exponential, no jitter", PLAIN, None, False),
    ("jitter", "full jitter", JITTER, None, False),
    ("limit", "full jitter + limit 500/s 50", JITTER, LIMIT, False),
    ("adaptive", "full jitter + adaptive:10000/s 50", JITTER, ADAPTIVE, False),
    ("hold", "limit 500/s 50 + ECHO.HOLD on retry-after", JITTER, LIMIT, True),
]

# outcomes of a call
OK, BLINK, DOWN, OVERLOADED = 0, 1, 2, 3


class Dependency:
    """The simulated dependency: thread-safe, records every call."""

    def __init__(self, t0, rate=RATE, burst=BURST, down_s=DOWN_S, blink=True):
        self.lock = threading.Lock()
        self.blink = blink  # every first call fails (the blink); False: first runs are served
        self.t0 = t0
        self.up = t0 + down_s
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.last = self.up
        self.calls = []  # (seconds after t0, attempt, outcome)

    def call(self, attempt):
        """(succeeded, retry after in ms or 0)."""
        with self.lock:
            now = time.monotonic()
            if (self.blink and attempt == 1) or now < self.up:
                self.calls.append((now - self.t0, attempt, BLINK if attempt == 1 else DOWN))
                return False, max(0, math.ceil((self.up - now) * 1000))
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= 1:
                self.tokens -= 1
                self.calls.append((now - self.t0, attempt, OK))
                return True, 0
            self.calls.append((now - self.t0, attempt, OVERLOADED))
            return False, max(1, math.ceil((1 - self.tokens) / self.rate * 1000))


class Run:
    """One strategy's keys, counters and workers."""

    def __init__(self, port, q, policy, hold, n):
        self.port = port
        self.sched, self.pend = "{%s}:schedule" % q, "{%s}:pending" % q
        self.done, self.dead = "{%s}:done" % q, "{%s}:dead" % q
        self.policy, self.hold, self.n = policy, hold, n
        self.attempts = {}
        self.lock = threading.Lock()
        self.finished = 0     # done or dead
        self.died = 0
        self.last_done = 0.0  # seconds after t0 of the last EXEC that finished a job
        self.all_done = threading.Event()
        self.stop = threading.Event()
        self.errors = []
        self.dep = None
        self.t0 = None
        self.holds = 0

    def keys(self):
        return [self.sched, self.pend, self.done, self.dead]

    def finish(self, dead):
        with self.lock:
            self.finished += 1
            self.died += dead
            self.last_done = time.monotonic() - self.t0
            if self.finished >= self.n:
                self.all_done.set()

    def call_dependency(self, job, attempt):
        """(succeeded, retry after in ms or 0): the job's call (the tenants
        section calls each tenant's own dependency)."""
        return self.dep.call(attempt)

    def retry_command(self, job, attempt, retry_after):
        """The failed job's ECHO.RETRY (the tenants section retries it after
        what the dependency answered, into its group)."""
        return ["ECHO.RETRY", self.sched, job, self.policy, attempt,
                "MAXATTEMPTS", MAX_ATTEMPTS, "DEAD", self.dead]

    def work(self, conn, entry_id, job):
        attempt = self.attempts.get(job, 0) + 1
        self.attempts[job] = attempt
        succeeded, retry_after = self.call_dependency(job, attempt)
        if succeeded:
            conn.pipeline([["MULTI"], ["SADD", self.done, job],
                           ["XACK", self.pend, "workers", entry_id],
                           ["XDEL", self.pend, entry_id], ["EXEC"]])
            self.finish(0)
            return
        cmds = []
        if self.hold and retry_after > 0:
            cmds.append(["ECHO.HOLD", self.sched, retry_after])
            self.holds += 1
        cmds += [["MULTI"], self.retry_command(job, attempt, retry_after),
                 ["XACK", self.pend, "workers", entry_id],
                 ["XDEL", self.pend, entry_id], ["EXEC"]]
        fire = conn.pipeline(cmds)[-1][0]
        if fire == -1:
            self.finish(1)

    def takeover(self, conn, me):
        cursor = "0-0"
        while True:
            r = conn.call("XAUTOCLAIM", self.pend, "workers", me, LEASE_MS, cursor, "COUNT", 1)
            cursor = r[0].decode()
            for entry_id, fields in r[1]:
                if fields:
                    self.work(conn, entry_id, dict(zip(fields[::2], fields[1::2]))[b"job"])
            if cursor == "0-0":
                return

    def worker(self, i):
        me = "w%d" % i
        try:
            conn = Conn(self.port)
            self.takeover(conn, me)
            last_takeover = time.monotonic()
            while not self.stop.is_set():
                r = conn.call("XREADGROUP", "GROUP", "workers", me, "COUNT", 1, "BLOCK", 200,
                              "STREAMS", self.pend, ">")
                if r:
                    entry_id, fields = r[0][1][0]
                    job = dict(zip(fields[::2], fields[1::2])).get(b"job")
                    if job is None:
                        conn.call("XACK", self.pend, "workers", entry_id)
                    else:
                        self.work(conn, entry_id, job)
                if time.monotonic() - last_takeover > LEASE_MS / 2000:
                    self.takeover(conn, me)
                    last_takeover = time.monotonic()
            conn.close()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.errors.append("%s: %r" % (me, e))
            self.all_done.set()


def sliding_max(times, width):
    """The most of the sorted `times` in any window [t, t + width)."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def start_run(bench, q, policy, hold, n, limit, workers, group_limit=None, run=None):
    """Fresh keys of queue q, its release limit (None: none), its group limit
    (echomq.group-limits, None: none) and the server's promotion set, and
    `workers` worker threads of `run` (default a Run of these arguments)
    started and waiting (past their takeover, blocked in XREADGROUP);
    returns (the Run, the threads)."""
    c = bench.c
    run = run or Run(bench.port, q, policy, hold, n)
    c.call("DEL", *run.keys())
    c.call("XGROUP", "CREATE", run.pend, "workers", "0", "MKSTREAM")
    c.call("CONFIG", "SET", "echomq.release-limits",
           "%s %s" % (run.sched, limit) if limit else "")
    if group_limit:  # only when asked: a build before groups has no such config
        c.call("CONFIG", "SET", "echomq.group-limits", "%s %s" % (run.sched, group_limit))
    c.call("CONFIG", "SET", "echomq.auto-promote", "%s %s" % (run.sched, run.pend))
    threads = [threading.Thread(target=run.worker, args=(i,), daemon=True)
               for i in range(workers)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    return run, threads


def run_strategy(bench, k, strategy, n, workers, deadline_s):
    short, title, policy, limit, hold = strategy
    q = "herd-%d-%s" % (k, short)
    c = bench.c
    # The workers first: each starts with a takeover (XAUTOCLAIM), which walks
    # the group's pending entries; started with the blink's 10,000 pending,
    # they would spend the blink walking them (a few hundred ms, ten entries a
    # call) instead of taking the first retries.
    run, threads = start_run(bench, q, policy, hold, n, limit, workers)
    # The jobs, all due at once: added to the stream and taken (in flight) by
    # the consumer "blink" in one transaction, so that no worker gets one, as
    # if each were in a worker's hands when the dependency blinks.
    r = c.pipeline([["MULTI"]] + [["XADD", run.pend, "*", "job", "job-%d" % i] for i in range(n)]
                   + [["XREADGROUP", "GROUP", "workers", "blink", "COUNT", n, "STREAMS",
                       run.pend, ">"], ["EXEC"]])[-1][-1]
    in_flight = [(entry_id, dict(zip(f[::2], f[1::2]))[b"job"]) for entry_id, f in r[0][1]]
    if len(in_flight) != n:
        raise RuntimeError("herd %s: %d in flight, expected %d" % (short, len(in_flight), n))
    # the limiter's series (adaptive: the rate in force), sampled every 100 ms
    limits = []
    # The blink: the first call of every job fails, and the failures are step
    # 4 of the protocol for BLINK_BATCH jobs at a time (their ECHO.RETRYs, one
    # XACK and one XDEL of their entries in one MULTI/EXEC), as if that many
    # workers failed at once. With the hold, the failures first hold the
    # schedule for what the dependency answered (one ECHO.HOLD: the same
    # answer for all). Encoded beforehand, on a connection of its own: the
    # blink takes the server's time, a fraction of a second.
    batches = []
    for lo in range(0, n, BLINK_BATCH):
        part = in_flight[lo:lo + BLINK_BATCH]
        ids = [entry_id for entry_id, _ in part]
        batches.append(b"".join(
            [encode(["MULTI"])] +
            [encode(["ECHO.RETRY", run.sched, job, policy, 1, "MAXATTEMPTS", MAX_ATTEMPTS,
                     "DEAD", run.dead]) for _, job in part] +
            [encode(["XACK", run.pend, "workers"] + ids), encode(["XDEL", run.pend] + ids),
             encode(["EXEC"])]))
    blink = Conn(bench.port)
    run.t0 = time.monotonic()
    run.dep = Dependency(run.t0)
    hold_ms = 0
    for _, job in in_flight:
        run.attempts[job] = 1
        hold_ms = max(hold_ms, run.dep.call(1)[1])
    if hold and hold_ms > 0:
        blink.call("ECHO.HOLD", run.sched, hold_ms)
        run.holds += 1
    # BLINK_CHUNK jobs a write, each write's replies read (in bulk, up to a
    # final ECHO) before the next.
    per = BLINK_CHUNK // BLINK_BATCH
    for i in range(0, len(batches), per):
        marker = b"herd-blink-%d" % i
        blink.sock.sendall(b"".join(batches[i:i + per]) + encode(["ECHO", marker]))
        end = b"$%d\r\n%s\r\n" % (len(marker), marker)
        got = bytearray()
        while not got.endswith(end):
            part = blink.sock.recv(1 << 20)
            if not part:
                raise ConnectionError("herd: the server closed the blink's connection")
            got += part
        if b"\r\n-" in got or got.startswith(b"-"):
            at = max(0, got.find(b"\r\n-"))
            raise RuntimeError("herd %s: the blink got an error: %r"
                               % (short, bytes(got[at:at + 120])))
    blink.close()
    blink_s = time.monotonic() - run.t0
    sampler_stop = threading.Event()

    def sample():
        sc = Conn(bench.port)
        while not sampler_stop.is_set():
            t = time.monotonic() - run.t0
            if limit:
                r = sc.call("ECHO.LIMITS", run.sched)
                f = dict(zip(r[::2], r[1::2]))
                limits.append((round(t, 3), float(f[b"rate-in-force"])))
            time.sleep(BIN_S)
        sc.close()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    run.all_done.wait(deadline_s)
    run.stop.set()
    sampler_stop.set()
    for t in threads:
        t.join(timeout=5)
    sampler.join(timeout=5)
    if run.errors:
        raise RuntimeError("herd %s: %s" % (short, "; ".join(run.errors[:3])))
    finished = run.all_done.is_set()
    done = c.call("SCARD", run.done)
    dead = c.call("ZCARD", run.dead)
    stats = {}
    if limit:
        r = c.call("ECHO.LIMITS", run.sched)
        stats = {k.decode(): v.decode() if isinstance(v, bytes) else v
                 for k, v in zip(r[::2], r[1::2])}
    c.call("CONFIG", "SET", "echomq.auto-promote", "", "echomq.release-limits", "")
    c.call("DEL", *run.keys())

    calls = sorted(run.dep.calls)
    retried = [t for t, a, _ in calls if a > 1]
    failed = [t for t, a, o in calls if a > 1 and o != OK]
    end = calls[-1][0] if calls else 0.0
    nbins = int(end / BIN_S) + 1
    series = {"calls": [0] * nbins, "failed": [0] * nbins, "blink": [0] * nbins}
    for t, a, o in calls:
        b = int(t / BIN_S)
        series["calls"][b] += 1
        if o == BLINK:
            series["blink"][b] += 1
        elif o != OK:
            series["failed"][b] += 1
    return {
        "name": short, "title": title, "policy": policy, "limit": limit or "",
        "hold": hold, "jobs": n, "finished": finished, "done": done, "dead": dead,
        "calls": len(calls), "retried_calls": len(retried), "failed_beyond_blink": len(failed),
        "blink_failures": sum(1 for _, _, o in calls if o == BLINK),
        "overloaded": sum(1 for _, _, o in calls if o == OVERLOADED),
        "down": sum(1 for _, _, o in calls if o == DOWN),
        "seconds": run.last_done if finished else None,
        "stopped_after": None if finished else deadline_s,
        "max_100ms": sliding_max(retried, 0.1), "max_1s": sliding_max(retried, 1.0),
        "holds": run.holds, "blink_s": blink_s,
        "first_retried_call_s": retried[0] if retried else None, "limits_at_end": stats,
        "rate_in_force": limits,
        "series": series,
    }


def run(bench):
    n = bench.herd_jobs or (2000 if bench.quick else 10_000)
    workers = bench.herd_workers
    ideal = DOWN_S + n / RATE
    deadline = max(30.0, 6 * ideal)
    c = bench.c
    results = []
    with server_configs(c, dict(PROMOTION, **{
            "echomq.adaptive-window-ms": bench.adaptive_window_ms,
            "echomq.adaptive-failure-percent": bench.adaptive_failure_percent})):
        for k, strategy in enumerate(STRATEGIES, 1):
            if bench.herd_only and strategy[0] not in bench.herd_only.split(","):
                continue
            r = run_strategy(bench, k, strategy, n, workers, deadline)
            results.append(r)
            print("  herd %-9s calls %6d, failed beyond the blink %6d, %s, dead %d, "
                  "max %d / 100 ms, %d / s" %
                  (r["name"], r["calls"], r["failed_beyond_blink"],
                   "%.2f s" % r["seconds"] if r["finished"] else
                   "stopped after %.0f s with %d done" % (deadline, r["done"]),
                   r["dead"], r["max_100ms"], r["max_1s"]), file=sys.stderr)

    out = {"jobs": n, "rate": RATE, "burst": BURST, "down_s": DOWN_S, "bin_s": BIN_S,
           "ideal_s": ideal, "workers": workers, "max_attempts": MAX_ATTEMPTS,
           "adaptive_window_ms": bench.adaptive_window_ms,
           "adaptive_failure_percent": bench.adaptive_failure_percent,
           "strategies": results}
    path = os.path.normpath(bench.herd_json or JSON_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f)
    bench.herd_json_written = path

    by = {r["name"]: r for r in results}
    section = "herd vs a dependency (%d jobs, %d workers)" % (n, workers)
    for r in results:
        if r["finished"]:
            took = "done in %.1f s (%.2f× ideal %.0f s)" % (r["seconds"], r["seconds"] / ideal,
                                                             ideal)
        else:
            took = "not done after %.0f s (%d of %d)" % (deadline, r["done"] + r["dead"], n)
        goal = ""
        jit = by.get("jitter")
        if jit and r["name"] == "limit":
            f = jit["failed_beyond_blink"] / max(1, r["failed_beyond_blink"])
            goal = ("≥50× fewer failed than jitter (%.0f×): %s; ≤1.15× ideal: %s; "
                    "1 s window ≤ %d: %s" %
                    (f, ok(f >= 50), ok(r["finished"] and r["seconds"] <= 1.15 * ideal),
                     RATE + BURST, ok(r["max_1s"] <= RATE + BURST)))
        elif jit and r["name"] == "adaptive":
            f = jit["failed_beyond_blink"] / max(1, r["failed_beyond_blink"])
            goal = "≥10× fewer failed than jitter (%.0f×): %s; ≤1.5× ideal: %s" % (
                f, ok(f >= 10), ok(r["finished"] and r["seconds"] <= 1.5 * ideal))
        elif jit and r["name"] == "hold":
            f = jit["failed_beyond_blink"] / max(1, r["failed_beyond_blink"])
            goal = "≥200× fewer failed than jitter (%.0f×): %s" % (f, ok(f >= 200))
        bench.add(section, r["title"], r["failed_beyond_blink"],
                  "failed calls beyond the blink's %d; %d calls in all; %s; "
                  "dead %d; most retried calls in 100 ms %d, in 1 s %d"
                  % (r["blink_failures"], r["calls"], took, r["dead"], r["max_100ms"],
                     r["max_1s"]), goal=goal)
