"""Section `retry_options`: ECHO.RETRY with MAXATTEMPTS/DEAD against the plain
command and native ZADD/ZREM."""

import random
import sys
import time

from .client import cmdstats, encode, usec_per_call
from .harness import med, now_ms, ok, settle


def run(bench):
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
    rounds = (10 if bench.quick else 40) * bench.rounds
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
    bench.c.call("DEL", seed, dead_idle, sched_absent, *own_keys)
    rng = random.Random(9)
    future = now_ms() + 1_000_000_000
    cmds = []
    for j0 in range(0, total, 1000):
        cmd = ["ZADD", seed]
        for i in range(j0, min(total, j0 + 1000)):
            cmd += [future + rng.randrange(86_400_000), "job:%012d" % i]
        cmds.append(cmd)
    bench.c.pipeline(cmds)
    for _, _, _, _, _, seeded in variants:
        if seeded:
            bench.c.call("COPY", seed, seeded, "REPLACE")
    bench.c.call("DEL", seed)
    bench.fill(dead_idle, 1000, now_ms() - 10_000_000, 1, "old:", 0)
    bench.fill(sched_absent, 10_000, future, 1, "other:", 0)
    settle(bench.c)
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
        if any(not check(r) for r in bench.c.pipeline(
                [make("job:%012d" % j) for j in primed], check=False)):
            raise RuntimeError("%s: unexpected replies" % label)
        before = bench.c.call("ZCARD", seeded) if seeded else 0
        bench.c.call("CONFIG", "RESETSTAT")
        bench.c.sock.sendall(payload)
        replies = [bench.c.read() for _ in jobs]
        st = cmdstats(bench.c)
        bad = [r for r in replies if not check(r)]
        if bad:
            raise RuntimeError("%s: unexpected replies, e.g. %r" % (label, bad[0]))
        if st.get(stat, (0, 0))[0] != batch:
            raise RuntimeError("%s: %s calls seen" % (label, st.get(stat)))
        if seeded and before - bench.c.call("ZCARD", seeded) != len(jobs):
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
    if (bench.c.call("ZCARD", dead_idle) != 1000
            or bench.c.call("ZCARD", sched_absent) != 10_000
            or bench.c.call("ZCARD", "dl:dead:abs") != total
            or bench.c.call("ZCARD", "dl:dead:in") != total
            or bench.c.call("EXISTS", "dl:sched:in") != 0
            or bench.c.call("ZCARD", "dl:fixo") != total):
        raise RuntimeError("retry options: wrong contents after the rounds")
    bench.c.call("DEL", dead_idle, sched_absent, *own_keys)
    settle(bench.c)

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
        bench.add(section, labels[vid], "%.2f" % v, "µs/call (server)", "%.2f" % v, ratio,
                  goal, samples=us[vid], fmt="%.2f")
