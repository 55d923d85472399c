"""Section `tenants`: the tenants' herd (issue 27).

Ten tenants share one stream queue and one dependency that gives each
tenant a quota of 50 calls a second (herd.py's model, one bucket of 50/s,
burst 5, per tenant, up from the start) and answers a call over its
tenant's quota "retry after <ms until the tenant's next token>". Tenant t0
adds 50,000 jobs at once (ECHO.ADD, transactions of 1,000, as the
libraries' add_many); t1..t9 add 20 jobs/s each, evenly spaced, the nine
interleaved, for 15 s (--quick: 5,000 jobs, 5 s). One pool of 10 worker
threads (herd.py's stream protocol, COUNT 1), each call taking 20 ms of its
worker: at most 500 calls/s, twice what the quotas let succeed here (50 for
t0, 180 for the small tenants). The server promotes every 10 ms, up to
1,000 a tick.

A call over quota is answered as the dependency asks: the worker retries
the job with ECHO.RETRY ... fixed:<retry after> (MAXATTEMPTS 50), GROUP
<tenant> in the grouped lanes, so the job comes back when its tenant has
room, and nothing else waits. ECHO.HOLD without GROUP would stop every
tenant, and on the ungrouped queue send the small tenants' adds through the
held schedule; ECHO.HOLD ... GROUP has no counterpart in lane (a), so the
lanes answer alike, and in (b) the group limit keeps the tenant under its
quota before any answer.

Lanes, on fresh keys, in one run, order rotating by round:
  (a) fifo     no groups, no limits: ECHO.ADD's fast path, arrival order
  (b) limited  GROUP <tenant>, echomq.group-limits "<schedule> 50/s 5",
               queue cap echomq.release-limits "<schedule> 400/s 40"
  (c) fair     GROUP <tenant>, the queue cap only (no per-group limit)
  (d) groups   GROUP <tenant>, no limit at all
The cap is 80 % of the pool's 500 calls/s, so released jobs do not pile
up in pending (fairness is at the release); in (b) the group limits' sum
(at most 10 × 50/s) stays under it in practice (230/s here).

Per lane: the small tenants' wait from add to start (the worker's first
call; a job not started at the end counts from its add to the end, and a
percentile that falls on one is shown as "≥"), failed calls (every call the
dependency did not serve) as % of calls, t0's throughput (its served calls
a second), the run time (from the first add until every small tenant's job
is done, at most 10 s after the last add, --tenants-grace). t0's backlog is
not drained: at its quota that would take 1,000 s. Rounds: --tenants-rounds (default 3, 1
with --quick); medians over rounds. Goal (b): p99 ≤ 1 s, failed ≤ 1 %.

Every lane's every round also goes into target/bench/tenants.json with its
per-job data (`detail`): per 250 ms from the first add, t0's and the small
tenants' first calls, served calls and failed calls, and each small
tenant's job as [add, wait] in seconds (wait null: not started by the end),
which `make demo` draws (scripts/demo_tenants.py).
"""

import json
import math
import os
import subprocess
import sys
import threading
import time

from .client import Conn, info
from .harness import SCRIPTS, delete_keys, med, ok, rotate, server_configs, settle
from .herd import MAX_ATTEMPTS, OK, PROMOTION, Dependency, Run, start_run
from .herd_first import add_many

TENANTS = 10
BIG = b"t0"
BIG_JOBS = 50_000
SMALL_RATE = 20       # jobs a second of each small tenant
QUOTA, QUOTA_BURST = 50, 5
GROUP_LIMIT = "50/s 5"
QUEUE_LIMIT = "400/s 40"
WORKERS = 10
SERVICE_S = 0.02      # a call's time in its worker
ARRIVALS_S = 15.0
GRACE_S = 10.0        # after the last add, for the small tenants' last jobs
BIN_S = 0.25          # the per-job data's bins (tenants.json's detail)
JSON_PATH = os.path.join(SCRIPTS, "..", "target", "bench", "tenants.json")

# (name, title, grouped, queue limit, group limit)
LANES = [
    ("fifo", "(a) no groups, no limits (arrival order)", False, None, None),
    ("limited", "(b) groups, per-group 50/s 5, queue 400/s 40", True, QUEUE_LIMIT, GROUP_LIMIT),
    ("fair", "(c) groups, queue 400/s 40, no per-group limit", True, QUEUE_LIMIT, None),
    ("groups", "(d) groups, no limit", True, None, None),
]


class TenantRun(Run):
    """herd.py's workers, calling each tenant's own quota and recording when
    every job first started."""

    def __init__(self, port, q, grouped):
        super().__init__(port, q, None, False, 1 << 62)  # ended by all_done, not a count
        self.grouped = grouped
        self.deps = {}
        self.added = {}    # small tenant's job: monotonic time of its add
        self.started = {}  # job: monotonic time of its first call
        self.small_added = None  # set when the last small add is sent
        self.small_done = 0

    @staticmethod
    def tenant(job):
        return job.split(b"-", 1)[0]

    def call_dependency(self, job, attempt):
        tenant = self.tenant(job)
        if attempt == 1:
            self.started[job] = time.monotonic()
        succeeded, retry_after = self.deps[tenant].call(attempt)
        time.sleep(SERVICE_S)
        if succeeded and tenant != BIG:
            with self.lock:
                self.small_done += 1
                if self.small_added is not None and self.small_done >= self.small_added:
                    self.all_done.set()
        return succeeded, retry_after

    def retry_command(self, job, attempt, retry_after):
        cmd = ["ECHO.RETRY", self.sched, job, "fixed:%d" % retry_after, attempt,
               "MAXATTEMPTS", MAX_ATTEMPTS, "DEAD", self.dead]
        return cmd + ["GROUP", self.tenant(job)] if self.grouped else cmd

    def begin(self):
        """The clock and every tenant's full bucket start now, at the first add."""
        self.t0 = time.monotonic()
        self.deps = {b"t%d" % i: Dependency(self.t0, rate=QUOTA, burst=QUOTA_BURST, down_s=0.0,
                                            blink=False) for i in range(TENANTS)}
        return self.t0

    def arrivals_done(self, n):
        with self.lock:
            self.small_added = n
            if self.small_done >= n:
                self.all_done.set()


def small_producer(run, arrivals_s, errors):
    """t1..t9 at SMALL_RATE each, evenly spaced, each tenant offset by 1/9 of
    the period; a late add is sent at once (its add time is when it is sent)."""
    small = TENANTS - 1
    period = 1.0 / SMALL_RATE
    events = sorted((j * period + k * period / small, k + 1)
                    for k in range(small) for j in range(int(arrivals_s * SMALL_RATE)))
    try:
        conn = Conn(run.port)
        for i, (at, k) in enumerate(events):
            pause = run.t0 + at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            job = b"t%d-%d" % (k, i)
            cmd = ["ECHO.ADD", run.sched, run.pend, job]
            run.added[job] = time.monotonic()
            conn.call(*(cmd + ["GROUP", b"t%d" % k] if run.grouped else cmd))
        conn.close()
    except Exception as e:  # noqa: BLE001 - reported by the lane
        errors.append("small producer: %r" % e)
    run.arrivals_done(len(run.added))


def run_info(bench, load_before):
    """Which run tenants.json is: the checkout's commit (+ "-dirty" when it has
    changes), the time, the server, the machine and its load before and after."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=SCRIPTS, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "--short", "HEAD")
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), "")
    except OSError:
        pass
    server = info(bench.c, "server")
    return {"commit": commit, "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "server": "%s %s" % ("Valkey" if "valkey_version" in server else "Redis",
                                 server.get("valkey_version") or server.get("redis_version", "?")),
            "cpu": cpu, "cores": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()]}


def detail(run, span, end):
    """The lane's per-job data for tenants.json: per BIN_S from the first add,
    t0's ("big") and the small tenants' first calls, served and failed calls,
    and every small tenant's job as [add s, wait s], wait None when it had
    not started by the end, in add order."""
    n = max(1, math.ceil(span / BIN_S))
    series = {"%s_%s" % (who, what): [0] * n
              for who in ("big", "small") for what in ("started", "served", "failed")}
    for tenant, dep in run.deps.items():
        who = "big" if tenant == BIG else "small"
        for at, attempt, outcome in dep.calls:
            if at > span:
                continue
            b = min(n - 1, int(at / BIN_S))
            series["%s_%s" % (who, "served" if outcome == OK else "failed")][b] += 1
            if attempt == 1:
                series[who + "_started"][b] += 1
    small = [[round(at - run.t0, 3),
              round(run.started[job] - at, 3) if run.started.get(job, end + 1) <= end else None]
             for job, at in sorted(run.added.items(), key=lambda item: item[1])]
    return {"bin_s": BIN_S, "series": series, "small": small}


def lane(bench, name, grouped, queue_limit, group_limit, big_jobs, arrivals_s, grace_s):
    c = bench.c
    q = "tenants-%s" % name
    delete_keys(c, "{%s}*" % q)
    run, threads = start_run(bench, q, None, False, 0, queue_limit, WORKERS,
                             group_limit=group_limit, run=TenantRun(bench.port, q, grouped))
    t0 = run.begin()
    errors = []
    small = threading.Thread(target=small_producer, args=(run, arrivals_s, errors), daemon=True)
    small.start()
    big = Conn(bench.port)
    add_many(big, run.sched, run.pend, [b"t0-%d" % i for i in range(big_jobs)],
             ("GROUP", BIG) if grouped else ())
    big_add_s = time.monotonic() - t0
    big.close()
    run.all_done.wait(max(0.0, t0 + arrivals_s + grace_s - time.monotonic()))
    end = time.monotonic()
    run.stop.set()
    small.join(timeout=5)
    for t in threads:
        t.join(timeout=5)
    errors += run.errors
    if errors:
        raise RuntimeError("tenants %s: %s" % (name, "; ".join(errors[:3])))
    dead = c.call("ZCARD", run.dead)
    c.call("CONFIG", "SET", "echomq.auto-promote", "", "echomq.release-limits", "",
           "echomq.group-limits", "")
    delete_keys(c, "{%s}*" % q)
    settle(c)

    span = end - t0
    # (wait, started): a job not started by the end waits at least until then
    waits = sorted((run.started[job] - at, True) if run.started.get(job, end + 1) <= end
                   else (end - at, False) for job, at in run.added.items())
    unstarted = sum(1 for _, started in waits if not started)

    def pct(qq):
        """The percentile, and whether it is only a lower bound: a job not
        started sorts by its bound, so every percentile from it on is one."""
        i = min(len(waits) - 1, int(len(waits) * qq))
        return waits[i][0], not all(started for _, started in waits[:i + 1])

    calls = {t: [o for at, _, o in d.calls if at <= span] for t, d in run.deps.items()}
    big_calls = calls[BIG]
    small_calls = [o for t, os_ in calls.items() if t != BIG for o in os_]
    failed_big = sum(1 for o in big_calls if o != OK)
    failed_small = sum(1 for o in small_calls if o != OK)
    n_calls = len(big_calls) + len(small_calls)
    p50, p50_censored = pct(0.5)
    p99, p99_censored = pct(0.99)
    return {"p50_s": p50, "p50_censored": p50_censored, "p99_s": p99,
            "p99_censored": p99_censored, "max_s": waits[-1][0], "small_jobs": len(waits),
            "unstarted": unstarted, "calls": n_calls, "failed": failed_big + failed_small,
            "failed_pct": 100.0 * (failed_big + failed_small) / max(1, n_calls),
            "big_calls": len(big_calls), "failed_big": failed_big,
            "small_calls": len(small_calls), "failed_small": failed_small,
            "big_per_s": (len(big_calls) - failed_big) / span,
            "calls_per_s": n_calls / span, "run_s": span,
            "finished": run.all_done.is_set(), "dead": dead, "big_add_s": big_add_s,
            "detail": detail(run, span, end)}


def show_wait(x, censored):
    return ("≥ %.1f" if censored else "%.2f") % x


def run(bench):
    load_before = os.getloadavg()
    quick = bench.quick
    big_jobs = 5_000 if quick else BIG_JOBS
    arrivals_s = 5.0 if quick else ARRIVALS_S
    rounds = getattr(bench, "tenants_rounds", 0) or (1 if quick else 3)
    grace_s = getattr(bench, "tenants_grace", 0) or GRACE_S
    only = [x for x in getattr(bench, "tenants_lanes", "").split(",") if x]
    lanes = [x for x in LANES if not only or x[0] in only]
    res = {x[0]: [] for x in lanes}
    with server_configs(bench.c, dict(PROMOTION, **{"echomq.group-limits": ""})):
        for k in range(rounds):
            for name, _, grouped, queue_limit, group_limit in rotate(lanes, k):
                r = lane(bench, name, grouped, queue_limit, group_limit, big_jobs, arrivals_s,
                         grace_s)
                res[name].append(r)
                print("  tenants round %d %-7s small wait p50 %s p99 %s s (max %.1f, %d of %d "
                      "not started); failed %.1f %% of %d calls (t0 %d of %d, small %d of %d); "
                      "t0 %.1f served/s; %.0f calls/s; run %.1f s; dead %d; t0's add %.2f s"
                      % (k + 1, name, show_wait(r["p50_s"], r["p50_censored"]),
                         show_wait(r["p99_s"], r["p99_censored"]), r["max_s"], r["unstarted"],
                         r["small_jobs"], r["failed_pct"], r["calls"], r["failed_big"],
                         r["big_calls"], r["failed_small"], r["small_calls"], r["big_per_s"],
                         r["calls_per_s"], r["run_s"], r["dead"], r["big_add_s"]),
                      file=sys.stderr)
    path = os.path.normpath(JSON_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"big_jobs": big_jobs, "arrivals_s": arrivals_s, "grace_s": grace_s,
                   "workers": WORKERS, "service_s": SERVICE_S, "quota": QUOTA,
                   "quota_burst": QUOTA_BURST, "small_rate": SMALL_RATE, "tenants": TENANTS,
                   "group_limit": GROUP_LIMIT, "queue_limit": QUEUE_LIMIT,
                   "lanes": [{"name": n, "title": t, "grouped": g, "queue_limit": ql,
                              "group_limit": gl} for n, t, g, ql, gl in lanes],
                   "run": run_info(bench, load_before), "rounds": res}, f)
    bench.tenants_json_written = path

    section = ("tenants' herd (t0 adds %d at once, t1..t9 %d/s each for %.0f s; quota %d/s %d a "
               "tenant; %d workers × %.0f ms; %d round%s)"
               % (big_jobs, SMALL_RATE, arrivals_s, QUOTA, QUOTA_BURST, WORKERS,
                  SERVICE_S * 1000, rounds, "" if rounds == 1 else "s"))
    base = res.get("limited")

    def m(rs, f):
        return med([r[f] for r in rs])

    for name, title, *_ in lanes:
        rs = res[name]
        p99 = m(rs, "p99_s")
        p99_censored = sum(r["p99_censored"] for r in rs) * 2 > len(rs)
        fpct = m(rs, "failed_pct")
        ratio, goal = "", ""
        if base and name != "limited":
            base_fpct = m(base, "failed_pct")
            ratio = "p99 %s× (b)'s; failed %s" % (
                ("≥ %.0f" if p99_censored else "%.0f") % (p99 / max(1e-9, m(base, "p99_s"))),
                "%.0f× (b)'s" % (fpct / base_fpct) if base_fpct else "(b): none")
        if name == "limited":
            goal = "p99 ≤ 1 s: %s; failed ≤ 1 %%: %s" % (ok(not p99_censored and p99 <= 1.0),
                                                        ok(fpct <= 1.0))
        bench.add(section, title, show_wait(p99, p99_censored),
                  "s p99 wait add→start of t1..t9 (p50 %s s; not started at the end %s of %s); "
                  "failed calls %.2f %% of %s calls (t0's %s); t0 served %.1f/s; run %s s; "
                  "dead %s"
                  % (show_wait(m(rs, "p50_s"), sum(r["p50_censored"] for r in rs) * 2 > len(rs)),
                     "/".join(str(r["unstarted"]) for r in rs),
                     "/".join(str(r["small_jobs"]) for r in rs), fpct,
                     "/".join(str(r["calls"]) for r in rs),
                     "/".join(str(r["failed_big"]) for r in rs), m(rs, "big_per_s"),
                     "/".join("%.1f" % r["run_s"] for r in rs),
                     "/".join(str(r["dead"]) for r in rs)),
                  ratio=ratio, goal=goal, samples=[r["p99_s"] for r in rs], fmt="%.2f")
