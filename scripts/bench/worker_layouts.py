"""Section `worker_layouts`: the Rust library's worker (stream layout) end to
end, against the list layout's worker (examples/list_worker.rs)."""

import json
import os
import subprocess
import sys
import time

from .harness import med, ok, rotate, settle

QUEUE = "bw"
# every key of the three layouts' runs, deleted before and after each run
KEYS = ["{%s}:%s" % (QUEUE, s) for s in
        ("pending", "schedule", "jobs", "attempts", "errors", "dead", "done", "taken", "done-by")]


def run(bench):
    """The Rust library's worker (echomq-client, through its crossworker
    example: `crossworker work --concurrency 4`, stopped with SIGTERM) against
    the list layout (examples/list_worker.rs, 4 consumer threads each on its
    own connection: ECHO.PROMOTE pipelined with BLMOVE, then the outcome in
    one MULTI/EXEC), end to end. Each run: N jobs added by this script
    (unmeasured; for the library, with `crossworker add`, before the worker
    starts), then one worker process against the same server; this script
    polls every 2 ms how many jobs are done (the list worker's HLEN done,
    counted in its outcome's transaction; for the library, the jobs whose
    payload its success script deleted: N - HLEN jobs, and afterwards the
    worker's summary must count exactly the planned runs) and times from the
    first completion it sees to the last (so process start and the exit are
    left out). Two workloads: no
    failures, and every other job failing once (retried with fixed:0, so the
    worker's promotion moves it back at once: the retry path and ECHO.PROMOTE
    are inside the measure). With ECHOMQ_EXAMPLE_WORKER set to the old
    example worker's binary (examples/worker.rs, --layout stream, 4
    consumers), it runs as a third variant, for reference. The variants
    alternate within each round, order rotating; the first round is a
    warm-up and not recorded."""
    crossworker, list_worker = bench.worker, bench.list_worker
    for path, build in ((crossworker, "-p echomq-client --example crossworker"),
                        (list_worker, "-p echomq --example list_worker")):
        if not os.path.exists(path):
            raise RuntimeError("%s not found: cargo build --release %s" % (path, build))
    example = os.environ.get("ECHOMQ_EXAMPLE_WORKER", "")
    n = 2000 if bench.quick else 10_000
    url = "redis://127.0.0.1:%d/" % bench.port
    pend, done_key = KEYS[0], KEYS[6]
    workloads = [(0, "no failures"),
                 (1, "every other job fails once, retried (fixed:0)")]
    layouts = ["library", "list"] + (["example"] if example else [])
    variants = [(ff, layout) for ff, _ in workloads for layout in layouts]
    rates = {v: [] for v in variants}
    walls = {v: [] for v in variants}
    cmdlines = {}

    def seed(layout):
        jobs = ["job-%d" % i for i in range(n)]
        if layout == "library":
            subprocess.run([crossworker, "add", "--url", url, "--queue", QUEUE, "--count", str(n),
                            "--id-prefix", "job-"], check=True, stdout=subprocess.DEVNULL)
        elif layout == "list":
            for j0 in range(0, n, 1000):
                bench.c.call("LPUSH", pend, *jobs[j0:j0 + 1000])
        else:
            bench.c.call("XGROUP", "CREATE", pend, "workers", "$", "MKSTREAM")
            for j0 in range(0, n, 1000):
                bench.c.pipeline([["XADD", pend, "*", "job", j] for j in jobs[j0:j0 + 1000]])

    def command(ff, layout, name):
        if layout == "library":
            # no --done: the handler's HINCRBY would be a round trip per job
            # inside the measure that the other workers make in their outcome's
            # transaction; the library's outcome itself is counted instead
            args = [crossworker, "work", "--url", url, "--queue", QUEUE,
                    "--concurrency", "4", "--deadline-secs", "120"]
            if ff:
                args += ["--fail-first", str(ff), "--backoff", "fixed:0", "--max-attempts", "5"]
            return args
        if layout == "list":
            return [list_worker, "--url", url, "--queue", QUEUE, "--jobs", str(n),
                    "--consumers", "4", "--fail-first", str(ff), "--policy", "fixed:0",
                    "--max-attempts", "5"]
        return [example, "--url", url, "--queue", QUEUE, "--layout", "stream", "--jobs", str(n),
                "--fail-first", str(ff), "--policy", "fixed:0", "--max-attempts", "5",
                "--consumers", "4", "--deadline-secs", "120", "--name", name]

    def done_count(layout):
        # the library's success script deletes the job's payload; the example
        # worker's done is a set, the list worker's a hash
        if layout == "library":
            return n - bench.c.call("HLEN", KEYS[2])
        return bench.c.call("SCARD" if layout == "example" else "HLEN", done_key)

    def one_run(ff, layout, name):
        bench.c.call("DEL", *KEYS)
        settle(bench.c)
        seed(layout)
        args = command(ff, layout, name)
        t_spawn = time.perf_counter()
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            t_first = d_first = None
            while True:
                d = done_count(layout)
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
            if layout == "library":
                p.terminate()  # runs until SIGTERM, then closes and exits 0
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if p.returncode != 0:
            raise RuntimeError("worker %s exited %d: %s" % (name, p.returncode, err.strip()))
        # every job done exactly once, nothing left
        if layout == "list":
            left = bench.c.call("LLEN", pend) + bench.c.call("LLEN", KEYS[7])
        else:
            left = bench.c.call("XLEN", pend) + bench.c.call("XPENDING", pend, "workers")[0]
        if layout == "library":
            # each job run exactly its planned times: once, or (--fail-first 1)
            # twice for the ones ending in an odd digit
            summary = [ln for ln in out.splitlines() if ln.startswith("summary ")]
            runs = json.loads(summary[-1][len("summary "):])["runs"] if summary else -1
            completions = n if runs == n + (n // 2 if ff else 0) else -runs
        elif layout == "example":
            completions = sum(int(x) for x in bench.c.call("HGETALL", KEYS[8])[1::2])
        else:
            completions = sum(int(x) for x in bench.c.call("HGETALL", done_key)[1::2])
        if (left or bench.c.call("ZCARD", KEYS[5]) or bench.c.call("ZCARD", KEYS[1])
                or completions != n):
            raise RuntimeError("worker %s: %d left, %d completions of %d" % (
                name, left, completions, n))
        bench.c.call("DEL", *KEYS)
        return (n - d_first) / (t_end - t_first), t_end - t_spawn, args

    for r in range(bench.rounds + 1):
        for ff, layout in rotate(variants, r):
            rate, wall, args = one_run(ff, layout, "bench-%s-%d-%d" % (layout, ff, r))
            if r > 0:
                rates[(ff, layout)].append(rate)
                walls[(ff, layout)].append(wall)
            cmdlines[layout] = args
        print("  worker_layouts round %d/%d done%s" % (
            r + 1, bench.rounds + 1, " (warm-up)" if r == 0 else ""), file=sys.stderr)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for layout in layouts:
        bench.bench_cmds.append("(worker, %s) " % layout + " ".join(
            os.path.relpath(a, root) if a.startswith(root + os.sep) else a
            for a in cmdlines[layout]))
    section = ("Rust worker end to end, %d jobs, concurrency 4 (%d rounds, variants interleaved)"
               % (n, bench.rounds))
    for ff, label in workloads:
        base = rates[(ff, "list")]
        for layout in layouts:
            v = (ff, layout)
            ratio, goal = "", ""
            if layout != "list":
                pairs = med([x / y for x, y in zip(rates[v], base)])
                ratio = "%.2f× list (median of per-round ratios %.2f×)" % (
                    med(rates[v]) / med(base), pairs)
                if layout == "library":
                    goal = "≥ 0.6× list: %s" % ok(med(rates[v]) / med(base) >= 0.6)
                    if example:
                        ex = rates[(ff, "example")]
                        ratio += "; %.2f× example (per-round %.2f×)" % (
                            med(rates[v]) / med(ex), med([x / y for x, y in zip(rates[v], ex)]))
            what = {"library": "library worker (stream)", "list": "list_worker (list)",
                    "example": "example worker (stream, reference)"}[layout]
            bench.add(section, "%s, %s [process start to last done: median %.2f s]"
                      % (what, label, med(walls[v])), "%.0f" % med(rates[v]),
                      "jobs/s (first to last completion)", "", ratio, goal, samples=rates[v])
