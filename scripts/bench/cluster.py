"""Section `cluster`: one logical queue on 1 shard against 3 shards on a
3-primary Valkey Cluster, the same Node.js workers (issue: sharded queues).

The section starts its own cluster: three valkey-server processes with
--cluster-enabled yes and the module, each on a free 127.0.0.1 port in its
own temp dir, no replicas, slots 0-5460, 5461-10922 and 10923-16383 given
with CLUSTER ADDSLOTSRANGE and joined with CLUSTER MEET (what `valkey-cli
--cluster create` does, without its prompts and sleeps); all three stopped
by pid at the end, also on error or SIGTERM. bench.sh's own server is not
used.

The queue's name is the first of bench-0, bench-1, ... whose first three
shard tags (docs/clients.md, Sharded queues: `name`, `name#1`, `name#2`,
or `name#i.k` on a slot clash) fall in the three primaries' ranges; the
tags are computed here and each checked against CLUSTER KEYSLOT, and after
every fill each shard's pending stream is read (XLEN) on the primary that
should own it, so a shard on the wrong node is a MOVED error, not a quiet
skew. Shard 0 is the queue's own tag, so the 1-shard layout is served by
the same primary as the 3-shard layout's shard 0.

A run, with the cluster flushed before it: clients/node's crossworker adds
N jobs (30,000; 6,000 with --quick) with addMany over the layout's shards
(`add --cluster --shards S`), generated ids, so about N/3 on each shard
at 3 shards; then WORKERS (2) worker processes (`work --cluster --shards S
--concurrency CONCURRENCY` (50), empty handler, no --done: its HINCRBY per job
would land on one primary and skew the split) start together. The fill is
not measured. From before the workers start until the shards' pending
streams are empty (XLEN summed, polled every 5 ms; a job's entry is deleted
when it is acknowledged), each primary's INFO cpu used_cpu_user +
used_cpu_sys delta is its server CPU. jobs/s = the jobs done from the first
poll that saw one done to the poll that saw none left, over that time (the
workers' node start-up is left out of both layouts). The CPU window does
hold the workers' start-up commands and the servers' own cron and cluster
bus, in both layouts: an idle primary's CPU over the run bounds them. Then
the workers get SIGTERM (by pid) and are waited for.

Beside the sums: the kernel's share (used_cpu_sys) and the commands per job
(INFO commandstats calls, all primaries), which tell a smaller batch per
shard (more reads, success scripts and housekeeping per job) from a dearer
job.

Rounds: --cluster-rounds (default 4, 2 with --quick), each one run per
layout, the order alternating (1 then 3, 3 then 1, ...), after one
unrecorded warm-up run of each layout. Medians over rounds; ratios of the
medians, and the per-round ratios' range.

Per primary: CPU per job it served (its shards' jobs) and CPU per job of
the run (its CPU over all N jobs). Goal: at 3 shards each primary's CPU per
job of the run is a third of the 1-shard primary's, ±15 % (0.283-0.383x),
and the 3-shard jobs/s not below the 1-shard's. On a 2-core machine the
three primaries and the workers share the cores, so jobs/s is bounded by
the cores, not by one primary; the split of the server CPU is the figure
that carries over to a cluster with a core per primary.
"""

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from .client import cmdstats, info
from .clients import Skip, node_binary, node_client
from .harness import free_port, med, ok, start_server, stop_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CROSSWORKER = os.path.join(ROOT, "clients", "node", "test", "crossworker.mjs")
RANGES = [(0, 5460), (5461, 10922), (10923, 16383)]
LAYOUTS = [1, 3]
WORKERS = 2          # worker processes, the same in both layouts (--cluster-workers)
CONCURRENCY = 50     # each process's, as the clients section's (--cluster-concurrency)
JOBS, QUICK_JOBS = 30_000, 6_000
POLL_S = 0.005
SPLIT_TOLERANCE = 0.15
# what a phase may take on a loaded machine before the run is given up
READY_S, FILL_S, WORK_S, FORM_S = 60, 120, 300, 30


def crc16(data):
    """CRC16-CCITT (XMODEM), the checksum CLUSTER KEYSLOT takes."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def slot(tag):
    return crc16(tag.encode()) % 16384


def shard_tags(name, shards):
    """docs/clients.md's rule: name, then name#i, or name#i.k for the
    smallest k whose slot no earlier shard has."""
    tags, taken = [name], {slot(name)}
    for i in range(1, shards):
        tag, k = "%s#%d" % (name, i), 0
        while slot(tag) in taken:
            k += 1
            tag = "%s#%d.%d" % (name, i, k)
        taken.add(slot(tag))
        tags.append(tag)
    return tags


def owner(s):
    return next(i for i, (lo, hi) in enumerate(RANGES) if lo <= s <= hi)


def pick_queue(conn):
    """The first bench-<i> whose 3 shards are on 3 primaries, the tags'
    slots checked against the server's CLUSTER KEYSLOT."""
    for i in range(1000):
        name = "bench-%d" % i
        tags = shard_tags(name, max(LAYOUTS))
        if len({owner(slot(t)) for t in tags}) == len(RANGES):
            for t in tags:
                server = conn.call("CLUSTER", "KEYSLOT", "{%s}:pending" % t)
                if server != slot(t):
                    raise RuntimeError("cluster: tag %s: slot %d here, %d by CLUSTER KEYSLOT"
                                       % (t, slot(t), server))
            return name, tags
    raise RuntimeError("cluster: no bench-<i> spreads 3 shards over 3 primaries")


class Node:
    """One cluster-enabled valkey-server with the module, on a free port."""

    def __init__(self, binary, module, parent):
        self.dir = tempfile.mkdtemp(prefix="node.", dir=parent)
        self.proc = None
        for _ in range(3):  # another process may take the port first
            if self.start(binary, module):
                return
            self.stop()
        raise RuntimeError("cluster: could not start %s with %s (log: %s)"
                           % (binary, module, os.path.join(self.dir, "valkey.log")))

    def start(self, binary, module):
        self.port = free_port()
        # the cluster bus is port + 10000: a port above 55535 cannot have one
        if self.port > 55535:
            return False
        self.proc, self.c = start_server(
            binary, module, self.dir, self.port,
            ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
        return self.c is not None

    def cpu_s(self):
        """(user, sys) CPU seconds of the server process."""
        i = info(self.c, "cpu")
        return float(i["used_cpu_user"]), float(i["used_cpu_sys"])

    def stop(self):
        """Stops this node's server, by its pid."""
        stop_server(self.proc)
        self.proc = None


def form(nodes):
    for n, (lo, hi) in zip(nodes, RANGES):
        n.c.call("CLUSTER", "ADDSLOTSRANGE", lo, hi)
    for n in nodes[1:]:
        n.c.call("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
    deadline = time.monotonic() + FORM_S
    while time.monotonic() < deadline:
        if all(b"cluster_state:ok" in n.c.call("CLUSTER", "INFO")
               and len(n.c.call("CLUSTER", "NODES").strip().splitlines()) == len(nodes)
               for n in nodes):
            return
        time.sleep(0.05)
    raise RuntimeError("cluster: the 3 primaries did not form a cluster within %d s" % FORM_S)


def stop_process(p):
    """SIGTERM to a worker by its pid (the library's Worker closes on it),
    SIGKILL if it has not exited in 10 s."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_ready(procs):
    """Each worker's `ready` line (its group exists on every shard)."""
    bufs = {p: b"" for p in procs}
    deadline = time.monotonic() + READY_S
    waiting = set(procs)
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError("cluster: a worker printed no 'ready' within %d s" % READY_S)
        r, _, _ = select.select([p.stdout for p in waiting], [], [], left)
        for p in list(waiting):
            if p.stdout in r:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError("cluster: a worker exited %s before 'ready'" % p.wait())
                bufs[p] += chunk
                if b"ready\n" in bufs[p]:
                    waiting.discard(p)


def one_run(node, nodes, seeds, queue, tags, shards, n, cmds, workers, concurrency):
    for x in nodes:
        x.c.call("FLUSHALL", "SYNC")
    base = [node, CROSSWORKER]
    common = ["--url", seeds, "--cluster", "--queue", queue, "--shards", str(shards)]
    add = base + ["add"] + common + ["--count", str(n)]
    r = subprocess.run(add, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=FILL_S)
    if r.returncode != 0:
        raise RuntimeError("cluster: %s: %s" % (" ".join(add), r.stderr.strip()[-500:]))
    # each shard read on the primary that should own it: a MOVED raises
    pend = [(nodes[owner(slot(t))], "{%s}:pending" % t) for t in tags[:shards]]
    per_shard = [x.c.call("XLEN", k) for x, k in pend]
    if sum(per_shard) != n:
        raise RuntimeError("cluster: %d jobs in the shards after adding %d" % (sum(per_shard), n))
    served = [0] * len(nodes)
    for (x, _), jobs in zip(pend, per_shard):
        served[nodes.index(x)] += jobs
    work = base + ["work"] + common + ["--concurrency", str(concurrency)]
    cmds["add %d" % shards], cmds["work %d" % shards] = add, work
    for x in nodes:
        x.c.call("CONFIG", "RESETSTAT")
    cpu0 = [x.cpu_s() for x in nodes]
    procs = [subprocess.Popen(work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) for _ in range(workers)]
    try:
        first = None  # (time, jobs left) at the first poll that saw a job done
        deadline = time.monotonic() + WORK_S
        while True:
            left = sum(x.c.call("XLEN", k) for x, k in pend)
            t = time.monotonic()
            if first is None and left < n:
                first = (t, left)
            if left == 0:
                break
            if t > deadline:
                raise RuntimeError("cluster: %d of %d jobs left after %d s" % (left, n, WORK_S))
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError("cluster: a worker exited %d with %d jobs left"
                                       % (p.returncode, left))
            time.sleep(POLL_S)
        cpu1 = [x.cpu_s() for x in nodes]
        stats = [cmdstats(x.c) for x in nodes]
        # a worker that never got ready left the run to the other: not the layout compared
        wait_ready(procs)
    finally:
        for p in procs:
            stop_process(p)
            p.stdout.close()
    t0, left0 = first
    return {"rate": left0 / (t - t0) if t > t0 else float("nan"),
            "cpu_s": [sum(b) - sum(a) for a, b in zip(cpu0, cpu1)], "served": served,
            # the kernel's share: where a smaller batch per wake-up of each server shows
            "sys_s": sum(b[1] - a[1] for a, b in zip(cpu0, cpu1)),
            # calls per job of the run, every primary's summed: what a smaller batch per shard costs
            "calls": {name: sum(st.get(name, (0, 0))[0] for st in stats) / n
                      for name in set().union(*stats) if name not in ("info", "config", "xlen")}}


def run(bench):
    """One logical queue on 1 shard and on 3 over a 3-primary cluster
    (this module's docstring says how)."""
    section = "Sharded queue on a 3-primary cluster"
    try:
        node = node_binary()
        node_client()
    except Skip as e:
        print("SKIPPED cluster: %s" % e)
        bench.add(section, "SKIPPED: %s" % e, "", "")
        return
    binary = os.environ.get("ECHOMQ_SERVER") or shutil.which("valkey-server")
    module = os.environ.get("ECHOMQ_MODULE")
    n = QUICK_JOBS if bench.quick else JOBS
    rounds = bench.cluster_rounds or (2 if bench.quick else 4)
    workers = bench.cluster_workers or WORKERS
    concurrency = bench.cluster_concurrency or CONCURRENCY
    parent = tempfile.mkdtemp(prefix="echomq-bench-cluster.")
    nodes = []
    # SIGTERM from bench.sh is an exit (__main__), so the finally below stops the nodes
    try:
        for _ in RANGES:
            nodes.append(Node(binary, module, parent))
        form(nodes)
        queue, tags = pick_queue(nodes[0].c)
        seeds = ",".join("127.0.0.1:%d" % x.port for x in nodes)
        home = owner(slot(tags[0]))  # the primary of shard 0, the 1-shard layout's
        print("  cluster: queue %s, shards %s on primaries %s; ports %s" % (
            queue, ", ".join(tags), ", ".join(str(owner(slot(t))) for t in tags),
            ", ".join(str(x.port) for x in nodes)), file=sys.stderr)
        cmds = {}
        results = {s: [] for s in LAYOUTS}
        for s in LAYOUTS:  # warm-up: node's and the servers' caches, not recorded
            one_run(node, nodes, seeds, queue, tags, s, n, cmds, workers, concurrency)
        for r in range(rounds):
            order = LAYOUTS if r % 2 == 0 else LAYOUTS[::-1]
            for s in order:
                res = one_run(node, nodes, seeds, queue, tags, s, n, cmds, workers, concurrency)
                results[s].append(res)
                print("  cluster round %d/%d, %d shard(s): %.0f jobs/s, CPU µs/job of the run "
                      "per primary %s" % (r + 1, rounds, s, res["rate"], " ".join(
                          "%.2f" % (c / n * 1e6) for c in res["cpu_s"])), file=sys.stderr)
    finally:
        for x in nodes:
            x.stop()
        shutil.rmtree(parent, ignore_errors=True)

    for key, argv in cmds.items():
        bench.bench_cmds.append("(cluster, %s) %s" % (key, " ".join(
            os.path.relpath(a, ROOT) if a.startswith(ROOT) else a for a in argv)))
    bench.cluster_note = (rounds, n, queue, tags)
    head = ("%s: %s jobs pre-filled, %d Node.js worker processes × concurrency %d, empty "
            "handler; %d rounds, layouts alternating" % (
                section, "{:,}".format(n), workers, concurrency, rounds))

    one, three = results[1], results[3]
    rate1, rate3 = [x["rate"] for x in one], [x["rate"] for x in three]
    per_round = [b / a for a, b in zip(rate1, rate3)]
    bench.add(head, "1 shard: jobs/s", "%.0f" % med(rate1), "jobs/s", samples=rate1)
    bench.add(head, "3 shards: jobs/s", "%.0f" % med(rate3), "jobs/s",
              ratio="%.2f× 1 shard (per round %.2f–%.2f×)" % (
                  med(rate3) / med(rate1), min(per_round), max(per_round)),
              goal="≥ 1.00×: %s" % ok(med(rate3) >= med(rate1)), samples=rate3)

    def us(res, i, per):
        # per "run": over all n jobs; per "served": over the jobs of i's shards
        d = res["served"][i] if per == "served" else n
        return res["cpu_s"][i] / d * 1e6 if d else float("nan")

    base = med([us(x, home, "run") for x in one])
    lo, hi = (1 - SPLIT_TOLERANCE) / 3, (1 + SPLIT_TOLERANCE) / 3
    for i in range(len(nodes)):
        tag = "shard 0's" if i == home else "idle"
        xs = [us(x, i, "run") for x in one]
        bench.add(head, "1 shard: primary %d (%s), server CPU per job of the run" % (i, tag),
                  "%.2f" % med(xs), "µs/job", samples=xs, fmt="%.2f")
    splits = []
    for i in range(len(nodes)):
        xs = [us(x, i, "run") for x in three]
        served = [us(x, i, "served") for x in three]
        split = med(xs) / base
        splits.append(split)
        rounds_split = [us(b, i, "run") / us(a, home, "run") for a, b in zip(one, three)]
        bench.add(head, "3 shards: primary %d, server CPU per job of the run [per job it served: "
                  "%.2f µs, %.0f jobs]" % (i, med(served), med([x["served"][i] for x in three])),
                  "%.2f" % med(xs), "µs/job", samples=xs,
                  ratio="%.3f× the 1-shard primary (per round %.3f–%.3f×)" % (
                      split, min(rounds_split), max(rounds_split)),
                  goal="%.3f–%.3f× (⅓ ± 15 %%): %s" % (lo, hi, ok(lo <= split <= hi)), fmt="%.2f")
    for s, res in ((1, one), (3, three)):
        xs = [sum(x["cpu_s"]) / n * 1e6 for x in res]
        ratio = ""
        if s == 3:
            ratio = "%.2f× 1 shard's sum" % (med(xs) / med([sum(x["cpu_s"]) / n * 1e6 for x in one]))
        names = sorted(set().union(*[x["calls"] for x in res]))
        calls = {k: med([x["calls"].get(k, 0) for x in res]) for k in names}
        top = ", ".join("%s %.3f" % (k, v) for k, v in
                        sorted(calls.items(), key=lambda kv: -kv[1]) if v >= 0.001)
        sys_us = med([x["sys_s"] / n * 1e6 for x in res])
        bench.add(head, "%d shard%s: the 3 primaries' server CPU per job, summed [sys %.2f µs of "
                  "it; commands per job: %s]" % (s, "" if s == 1 else "s", sys_us, top),
                  "%.2f" % med(xs), "µs/job",
                  samples=xs, ratio=ratio, fmt="%.2f")
