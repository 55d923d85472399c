"""`python3 -m bench`: the sections given (all by default), then the table."""

import argparse
import signal
import sys

from . import (auto_promote, clients, future_members, herd, latency, memory, promote_stream,
               promotion, retry_options, spread, throughput, versions, web_scrape, worker_layouts)
from . import add, cluster, groups, herd_first, limits, repeat, tenants
from .harness import DEFAULT_LIST_WORKER, DEFAULT_WEB, DEFAULT_WORKER, Bench, report, run_sections
from .workloads import workload

# In the order they run; the names are --only's.
SECTIONS = [("throughput", throughput), ("retry_options", retry_options),
            ("promotion", promotion), ("future_members", future_members), ("latency", latency),
            ("spread", spread), ("memory", memory), ("auto_promote", auto_promote),
            ("promote_stream", promote_stream), ("versions", versions),
            ("worker_layouts", worker_layouts),
            ("web_scrape", web_scrape)]
SECTIONS.append(("limits", limits))  # the release limit's own cost
SECTIONS.append(("add", add))  # ECHO.ADD's fast path against a producer's own XADD
SECTIONS.append(("clients", clients))  # BullMQ's worker against the client libraries' (needs node)
SECTIONS.append(("groups", groups))  # the fair release's cost per member, 100,000 groups
SECTIONS.append(("repeat", repeat))  # recurring jobs: arming at release, memory, the calendar's herd
SECTIONS.append(("herd_first", herd_first))  # new jobs against the dependency, BullMQ beside
SECTIONS.append(("tenants", tenants))  # one tenant's 50,000 jobs beside nine small tenants
SECTIONS.append(("cluster", cluster))  # one queue on 1 and on 3 shards of a 3-primary cluster
SECTIONS.append(("herd", herd))  # the herd against a dependency, the longest: last


def main():
    # SIGTERM (from bench.sh's cleanup) unwinds like Ctrl-C: subprocess.run
    # kills a running valkey-benchmark, the PING process is a daemon.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(prog="bench")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="small sizes, for testing the script")
    ap.add_argument("--only", default="", help="comma-separated sections")
    ap.add_argument("--worker", default=DEFAULT_WORKER,
                    help="echomq-client's crossworker example, for the worker_layouts section")
    ap.add_argument("--list-worker", default=DEFAULT_LIST_WORKER,
                    help="the examples/list_worker binary, for the worker_layouts section")
    ap.add_argument("--web", default=DEFAULT_WEB,
                    help="the echomq-web binary, for the web_scrape section")
    ap.add_argument("--herd-jobs", type=int, default=0,
                    help="herd: jobs in the blink (default 10000, 2000 with --quick)")
    ap.add_argument("--herd-workers", type=int, default=8,
                    help="herd: worker threads, each with its own connection")
    ap.add_argument("--herd-strategies", default="",
                    help="herd: comma-separated subset of plain,jitter,limit,adaptive,hold")
    ap.add_argument("--herd-rounds", type=int, default=1,
                    help="herd_first: rounds, every lane once per round")
    ap.add_argument("--tenants-rounds", type=int, default=0,
                    help="tenants: rounds, every lane once per round (default 3, 1 with --quick)")
    ap.add_argument("--tenants-lanes", default="",
                    help="tenants: comma-separated subset of fifo,limited,fair,groups")
    ap.add_argument("--tenants-grace", type=float, default=0,
                    help="tenants: seconds after the last add for the small tenants' jobs "
                    "(default 10; longer lets arrival order finish them)")
    ap.add_argument("--cluster-rounds", type=int, default=0,
                    help="cluster: rounds, each layout once per round (default 4, 2 with --quick)")
    ap.add_argument("--cluster-workers", type=int, default=0,
                    help="cluster: worker processes, the same in both layouts (default 2)")
    ap.add_argument("--cluster-concurrency", type=int, default=0,
                    help="cluster: each worker process's concurrency (default 50)")
    ap.add_argument("--groups-old-module", default="",
                    help="groups: a module build to compare the release lanes and the ungrouped "
                    "empty promote with (started on a server of its own, beside this build's)")
    ap.add_argument("--repeat-old-module", default="",
                    help="repeat: a module build before recurring jobs, to compare a promote on a "
                    "schedule without definitions with (on a server of its own, beside this build's)")
    ap.add_argument("--repeat-ab-module", default="",
                    help="repeat: another build with recurring jobs, to compare the release lanes "
                    "with (on a server of its own, beside this build's)")
    ap.add_argument("--herd-json", default="",
                    help="herd: where to write the series (default target/bench/herd-limits.json)")
    ap.add_argument("--adaptive-window-ms", type=int, default=200,
                    help="herd: echomq.adaptive-window-ms during the run")
    ap.add_argument("--adaptive-failure-percent", type=int, default=10,
                    help="herd: echomq.adaptive-failure-percent during the run")
    ap.add_argument("--servers", default="",
                    help="versions: comma-separated server binaries, interleaved in one run "
                    "(default ECHOMQ_SERVER or valkey-server); the section runs in a full run "
                    "only when this is given")
    ap.add_argument("--modules", default="",
                    help="versions: comma-separated module builds, each on every server "
                    "(default ECHOMQ_MODULE or target/release/libechomq.so)")
    ap.add_argument("--workload")
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    if a.workload:
        workload(a.port, a.workload, a.seconds)
        return
    b = Bench(a.port, a.rounds, a.quick, a.worker, a.web, a.list_worker)
    b.herd_jobs, b.herd_workers, b.herd_only = a.herd_jobs, a.herd_workers, a.herd_strategies
    b.herd_json = a.herd_json
    b.herd_rounds, b.groups_old_module = a.herd_rounds, a.groups_old_module
    b.repeat_old_module = a.repeat_old_module
    b.repeat_ab_module = a.repeat_ab_module
    b.tenants_rounds, b.tenants_lanes = a.tenants_rounds, a.tenants_lanes
    b.tenants_grace = a.tenants_grace
    b.cluster_rounds = a.cluster_rounds
    b.cluster_workers, b.cluster_concurrency = a.cluster_workers, a.cluster_concurrency
    b.servers, b.modules = a.servers, a.modules
    b.adaptive_window_ms = a.adaptive_window_ms
    b.adaptive_failure_percent = a.adaptive_failure_percent
    sections = [(name, module.run) for name, module in SECTIONS]
    if a.only:
        sections = [s for s in sections if s[0] in a.only.split(",")]
    elif not a.servers:  # versions repeats the other sections on one server: asked for only
        sections = [s for s in sections if s[0] != "versions"]
    elapsed = run_sections(b, sections)
    report(b, elapsed)


if __name__ == "__main__":
    main()
