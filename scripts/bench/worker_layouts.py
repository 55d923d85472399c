"""Section `worker_layouts`: the Rust example worker end to end, stream layout
against list layout."""

import os
import subprocess
import sys
import time

from .harness import med, ok, rotate, settle


def run(bench):
    """The Rust example worker (examples/worker.rs) end to end, stream
    layout against list layout. Each run: N jobs seeded by
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
    worker = bench.worker
    if not os.path.exists(worker):
        raise RuntimeError("%s not found: cargo build --release --example worker" % worker)
    n = 2000 if bench.quick else 10_000
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
        bench.c.call("DEL", *keys)
        settle(bench.c)
        jobs = ["job-%d" % i for i in range(n)]
        if layout == "stream":
            bench.c.call("XGROUP", "CREATE", pend, "workers", "$", "MKSTREAM")
            for j0 in range(0, n, 1000):
                bench.c.pipeline([["XADD", pend, "*", "job", j] for j in jobs[j0:j0 + 1000]])
        else:
            for j0 in range(0, n, 1000):
                bench.c.call("LPUSH", pend, *jobs[j0:j0 + 1000])
        args = [worker, "--url", "redis://127.0.0.1:%d/" % bench.port, "--queue", queue,
                "--layout", layout, "--jobs", str(n), "--fail-first", str(ff),
                "--policy", "fixed:0", "--max-attempts", "5", "--consumers", "4",
                "--deadline-secs", "120", "--name", name]
        t_spawn = time.perf_counter()
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            t_first = d_first = None
            while True:
                d = bench.c.call("SCARD", done_key)
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
        left = bench.c.call("XLEN" if layout == "stream" else "LLEN", pend)
        if layout == "stream":
            left += bench.c.call("XPENDING", pend, "workers")[0]
        completions = sum(int(x) for x in bench.c.call("HGETALL", keys[4])[1::2])
        if (left or bench.c.call("ZCARD", keys[5]) or bench.c.call("ZCARD", keys[1])
                or completions != n):
            raise RuntimeError("worker %s: %d left, %d completions of %d" % (
                name, left, completions, n))
        bench.c.call("DEL", *keys)
        return (n - d_first) / (t_end - t_first), t_end - t_spawn, args

    for r in range(bench.rounds + 1):
        for ff, layout in rotate(variants, r):
            rate, wall, args = one_run(ff, layout, "bench-%s-%d-%d" % (layout, ff, r))
            if r > 0:
                rates[(ff, layout)].append(rate)
                walls[(ff, layout)].append(wall)
            cmdline = args
        print("  worker_layouts round %d/%d done%s" % (
            r + 1, bench.rounds + 1, " (warm-up)" if r == 0 else ""), file=sys.stderr)
    bench.bench_cmds.append("(worker) " + " ".join(
        a if a != cmdline[0] else "target/release/examples/worker" for a in cmdline))
    section = "Rust worker end to end, %d jobs, 4 consumers (%d rounds, layouts interleaved)" % (
        n, bench.rounds)
    for ff, label in workloads:
        s, l = med(rates[(ff, "stream")]), med(rates[(ff, "list")])
        pairs = med([x / y for x, y in zip(rates[(ff, "stream")], rates[(ff, "list")])])
        for layout in ("list", "stream"):
            v = (ff, layout)
            ratio, goal = "", ""
            if layout == "stream":
                ratio = "%.2f× list (median of per-round ratios %.2f×)" % (s / l, pairs)
                goal = "≥ 0.6× list: %s" % ok(s / l >= 0.6)
            bench.add(section, "--layout %s, %s [process start to last done: median %.2f s]"
                      % (layout, label, med(walls[v])), "%.0f" % med(rates[v]),
                      "jobs/s (first to last completion)", "", ratio, goal, samples=rates[v])
