"""Section `herd_first`: 10,000 new jobs (first runs, not retries) against
the herd section's dependency (issue 27).

The dependency is herd.py's model, up from the start: 500 calls a second
from a token bucket of 50, "overloaded, retry after <ms until the next
token>" beyond that; no blink, no outage (a first run fails only when the
dependency is overloaded). The producer adds N jobs (10,000; --herd-jobs,
2,000 with --quick) at once with ECHO.ADD, pipelined in transactions of
1,000 as the libraries' add_many sends them, while the workers (herd.py's:
8 threads, the stream protocol, jitter:exponential:100:30000, MAXATTEMPTS
50) wait for work; the server promotes every 10 ms (echomq.auto-promote,
limit 1000 a tick). Lanes, on fresh keys:
  none    no limit: ECHO.ADD's fast path, straight into pending
  limit   echomq.release-limits "<schedule> 500/s 50": ECHO.ADD puts every
          run into the schedule, and the limit releases them
  bullmq  BullMQ 6.7.0 (scripts/bench/clients/bullmq_herd.mjs, installed as
          the clients section installs it) with limiter {max: 500, duration:
          1000}, concurrency 8, the same dependency model in its process,
          the same backoff (a custom strategy: full jitter of
          min(100 * 2^(a-1), 30000)), attempts 50; without node or npm the
          lane is SKIPPED with the reason.
Failed calls: every call the dependency did not serve. Time to finish: from
the producer's first add to the last job done. Rounds: --herd-rounds
(default 1), every lane once per round, order rotating; medians over rounds.
Goal: none's failed calls at least 50 times limit's.
"""

import json
import os
import shutil
import sys
import time

from . import clients
from .client import Conn
from .harness import delete_keys, med, ok, rotate, server_configs
from .herd import BURST, JITTER, LIMIT, MAX_ATTEMPTS, OK, PROMOTION, RATE, Dependency, start_run

WORKERS = 8
ADD_TX = 1000  # jobs in one MULTI/EXEC of the producer
BULL_DRIVER = "bullmq_herd.mjs"
LANES = [("none", "echomq, no limit (ECHO.ADD's fast path into pending)"),
         ("limit", "echomq, release limit 500/s 50 (ECHO.ADD into the schedule)"),
         ("bullmq", "BullMQ 6.7.0, limiter {max: 500, duration: 1000}")]


def add_many(conn, sched, pend, jobs, extra=()):
    """ECHO.ADD of every job, with `extra` arguments (e.g. GROUP g), in
    transactions of ADD_TX, as the libraries' add_many sends them."""
    for lo in range(0, len(jobs), ADD_TX):
        r = conn.pipeline([["MULTI"]] + [["ECHO.ADD", sched, pend, job, *extra]
                                         for job in jobs[lo:lo + ADD_TX]] + [["EXEC"]])
        if not isinstance(r[-1], list):
            raise RuntimeError("ECHO.ADD into %s: the EXEC replied %r" % (sched, r[-1]))


def echomq_lane(bench, name, limit, n, workers, deadline_s):
    c = bench.c
    q = "herdfirst-%s" % name
    run, threads = start_run(bench, q, JITTER, False, n, limit, workers)
    producer = Conn(bench.port)
    # the clock and the dependency's full bucket start with the first add
    t0 = run.t0 = time.monotonic()
    run.dep = Dependency(t0, down_s=0.0, blink=False)
    add_many(producer, run.sched, run.pend, ["job-%d" % i for i in range(n)])
    add_s = time.monotonic() - t0
    producer.close()
    run.all_done.wait(deadline_s)
    run.stop.set()
    for t in threads:
        t.join(timeout=5)
    if run.errors:
        raise RuntimeError("herd_first %s: %s" % (name, "; ".join(run.errors[:3])))
    finished = run.all_done.is_set()
    done, dead = c.call("SCARD", run.done), c.call("ZCARD", run.dead)
    c.call("CONFIG", "SET", "echomq.auto-promote", "", "echomq.release-limits", "")
    c.call("DEL", *run.keys())
    calls = run.dep.calls
    return {"calls": len(calls), "failed": sum(1 for _, _, o in calls if o != OK),
            "seconds": run.last_done if finished else None, "done": done, "dead": dead,
            "add_s": add_s}


def bullmq_lane(bench, node, n, workers, deadline_s):
    url = "redis://127.0.0.1:%d/" % bench.port
    queue = "herdfirst-bull-%d" % time.monotonic_ns()
    argv = [node, os.path.join(clients.NODE_DIR, BULL_DRIVER), "--url", url, "--queue", queue,
            "--jobs", str(n), "--concurrency", str(workers), "--rate", str(RATE),
            "--burst", str(BURST), "--max-attempts", str(MAX_ATTEMPTS)]
    bench.herd_first_cmd = argv
    d = clients.Driver(argv, "BullMQ herd driver on %s" % queue)
    try:
        d.expect("ready", clients.READY_S)
        d.send("go")
        r = d.expect("done", deadline_s + 60)
        d.finish()
    finally:
        d.close()
    delete_keys(bench.c, "bull:%s:*" % queue)
    return {"calls": r["calls"], "failed": r["failed"],
            "seconds": r["seconds"] if r["finished"] else None, "done": r["succeeded"],
            "dead": r["dead"], "add_s": r["add_s"]}


def run(bench):
    n = bench.herd_jobs or (2000 if bench.quick else 10_000)
    rounds = getattr(bench, "herd_rounds", 1) or 1
    ideal = (n - BURST) / RATE
    deadline = max(30.0, 6 * ideal)
    c = bench.c
    skipped = None
    node = None
    try:
        node = clients.node_binary()
        clients.node_packages()
        shutil.copy(os.path.join(clients.DRIVERS, BULL_DRIVER),
                    os.path.join(clients.NODE_DIR, BULL_DRIVER))
    except clients.Skip as e:
        skipped = str(e)
        print("  herd_first: SKIPPED bullmq: %s" % e, file=sys.stderr)
    lanes = [lane for lane, _ in LANES if lane != "bullmq" or skipped is None]
    res = {lane: [] for lane, _ in LANES}
    with server_configs(c, PROMOTION):
        for k in range(rounds):
            for lane in rotate(lanes, k):
                if lane == "bullmq":
                    r = bullmq_lane(bench, node, n, WORKERS, deadline)
                else:
                    r = echomq_lane(bench, "%s-%d" % (lane, k), LIMIT if lane == "limit" else None,
                                    n, WORKERS, deadline)
                res[lane].append(r)
                print("  herd_first round %d %-6s calls %6d, failed %6d, %s, dead %d, add %.3f s"
                      % (k + 1, lane, r["calls"], r["failed"],
                         "%.2f s" % r["seconds"] if r["seconds"] is not None
                         else "not done after %.0f s (%d done)" % (deadline, r["done"]),
                         r["dead"], r["add_s"]), file=sys.stderr)
    if getattr(bench, "herd_first_cmd", None):
        bench.bench_cmds.append("(herd_first, bullmq) " + " ".join(
            os.path.relpath(a, clients.ROOT) if a.startswith(clients.ROOT) else a
            for a in bench.herd_first_cmd))
    os.makedirs(os.path.join(clients.TARGET, "bench"), exist_ok=True)
    with open(os.path.join(clients.TARGET, "bench", "herd-first.json"), "w") as f:
        json.dump({"jobs": n, "rate": RATE, "burst": BURST, "rounds": res}, f)

    section = "herd, first runs vs a dependency (%d new jobs, %d workers, %d round%s)" % (
        n, WORKERS, rounds, "" if rounds == 1 else "s")
    base = med([r["failed"] for r in res["limit"]])
    for lane, title in LANES:
        if lane == "bullmq" and skipped is not None:
            bench.add(section, title, "SKIPPED: %s" % skipped, "")
            continue
        rs = res[lane]
        failed = [r["failed"] for r in rs]
        secs = [r["seconds"] for r in rs if r["seconds"] is not None]
        ratio, goal = "", ""
        if lane != "limit":
            ratio = "%.0f× the limit's failed calls" % (med(failed) / max(1, base))
            ratio += " (per round: %s)" % ", ".join(
                "%.0f×" % (a["failed"] / max(1, b["failed"])) for a, b in zip(rs, res["limit"]))
        if lane == "none":
            goal = "≥ 50× the limit's: %s" % ok(med(failed) >= 50 * max(1, base))
        bench.add(section, title, "%.0f" % med(failed),
                  "failed calls; calls %s; done in %s s (ideal %.1f s); not done in %d of %d; "
                  "dead %s; add %s s" % (
                      "/".join(str(r["calls"]) for r in rs),
                      "/".join("%.1f" % r["seconds"] if r["seconds"] is not None else "-"
                               for r in rs), ideal, len(rs) - len(secs), len(rs),
                      "/".join(str(r["dead"]) for r in rs),
                      "/".join("%.2f" % r["add_s"] for r in rs)),
                  ratio=ratio, goal=goal, samples=failed)
