"""Section `versions`: the retry and promote ratios against native commands
on several servers (and module builds) in one run.

`--servers BIN,BIN,...` (default: ECHOMQ_SERVER or valkey-server) and
`--modules SO,SO,...` (default: ECHOMQ_MODULE or target/release/libechomq.so;
relative paths are the repository root's):
one server is started per (server, module) pair, each with its own temp dir
on a free 127.0.0.1 port, all up at once, and stopped by pid at the end
(also on error or SIGTERM). Rounds alternate the targets (order rotating);
within a target the workloads run in an order shuffled afresh each round.
Server time is from INFO commandstats reset right before each measurement;
each ratio is computed within one target and one round (module ÷ native on
the same server in the same round), and the figures are medians over rounds.

Workloads (each server's own keys):
- retry: pipelined batches of 500 calls after 50 unmeasured ones, a new job
  every call: ECHO.RETRY fixed:1000 3, jitter:exponential:100:10000 3, and a
  dead-lettering one (job not in the schedule) against native ZADD, the
  throughput section's reference (~1000 distinct scores) and ZADD <now ms>
  (the write dead-lettering makes), as in the retry_options section.
- promote 1000: per workload a schedule of 3000 due beside FUTURE not yet
  due, promoted by 3 calls in a row: ECHO.PROMOTE into a list / into a
  stream (group `workers`), and the native equivalents from the client, as
  the promotion section's: ZRANGEBYSCORE + one LPUSH of the 1000 +
  ZREMRANGEBYRANK, and ZRANGEBYSCORE + 1000 pipelined XADD s * job <m> +
  ZREMRANGEBYRANK (server time: the sum of those commands').
- bare appends of 1000, 3 in a row into one key: pipelined XADD s * job <m>,
  XADD s <ms>-<seq> job <m> (explicit IDs, as a replica applies them),
  LPUSH l <m> one member each, and one LPUSH l m1..m1000.
"""

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from .client import ReplyError, cmdstats, encode
from .harness import (FUTURE, SCRIPTS, free_port, load_script, med, now_ms, rotate, settle,
                      start_server, stop_server)

B = 1000  # members per promotion / entries per bare append
K = 3  # promotions (appends) in a row per workload and round
BATCH, PRIME = 500, 50  # retry calls measured / unmeasured per batch


def version_of(binary):
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    for word in out.split():
        if word.startswith("v="):
            return word[2:]
    return out.strip()


class Target:
    """One server with one module build, started on a free port."""

    def __init__(self, binary, module, label):
        self.binary, self.module, self.label = binary, module, label
        self.dir = tempfile.mkdtemp(prefix="echomq-bench-versions.")
        self.proc = None
        for _ in range(3):  # another process may take the port first
            if self.start():
                break
            self.kill()
        else:
            self.stop()
            raise RuntimeError("versions: could not start %s with %s" % (binary, module))
        self.sha = {"fill": load_script(self.c, "fill.lua")}
        self.jobs = 0  # a new job name per retry call

    def start(self):
        self.port = free_port()
        self.proc, self.c = start_server(self.binary, self.module, self.dir, self.port)
        return self.c is not None

    def kill(self):
        """Stops this target's server, by its pid."""
        stop_server(self.proc)
        self.proc = None

    def fill(self, key, n, first_score, prefix):
        self.c.call("EVALSHA", self.sha["fill"], 1, key, n, first_score, 1, prefix, 0)

    def stop(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def usec(c, names, expect=None):
    st = cmdstats(c)
    if expect:
        name, calls = expect
        if st.get(name, (0, 0))[0] != calls:
            raise RuntimeError("versions: %s calls seen, expected %d %s"
                               % (st.get(name), calls, name))
    return sum(st.get(n, (0, 0))[1] for n in names)


def send_all(c, cmds):
    c.sock.sendall(b"".join(encode(x) for x in cmds))
    replies = [c.read() for _ in cmds]
    bad = [r for r in replies if isinstance(r, ReplyError)]
    if bad:
        raise RuntimeError("versions: %r" % bad[0])
    return replies


# --- promote: (id, label, into a stream?, how) -----------------------------

def promote(t, kind, stream):
    sched, pend = "v:%s:sched" % kind, "v:%s:pend" % kind
    c = t.c
    c.call("DEL", sched, pend)
    t.fill(sched, B * K, now_ms() - 10_000_000, "job:")
    t.fill(sched, FUTURE, now_ms() + 1_000_000_000, "future:")
    if stream:
        c.call("XGROUP", "CREATE", pend, "workers", "$", "MKSTREAM")
    settle(c)
    out = []
    for _ in range(K):
        c.call("CONFIG", "RESETSTAT")
        if kind.startswith("m"):
            moved = c.call("ECHO.PROMOTE", sched, pend, "LIMIT", B)
            us = usec(c, ["echo.promote"])
        else:
            due = c.call("ZRANGEBYSCORE", sched, "-inf", now_ms(), "LIMIT", 0, B)
            moved = len(due)
            if stream:
                cmds = [["XADD", pend, "*", "job", m] for m in due]
            else:
                cmds = [["LPUSH", pend] + due]
            send_all(c, cmds + [["ZREMRANGEBYRANK", sched, 0, moved - 1]])
            us = usec(c, ["zrangebyscore", "xadd" if stream else "lpush", "zremrangebyrank"])
        if moved != B:
            raise RuntimeError("versions: %s moved %d" % (kind, moved))
        out.append(us)
    length = c.call("XLEN" if stream else "LLEN", pend)
    if length != B * K or c.call("ZCARD", sched) != FUTURE:
        raise RuntimeError("versions: %s: wrong result" % kind)
    if stream:
        first = c.call("XRANGE", pend, "-", "+", "COUNT", 1)[0][1]
        ok_ = first == [b"job", b"job:0"]
    else:
        ok_ = c.call("LINDEX", pend, -1) == b"job:0"
    if not ok_:
        raise RuntimeError("versions: %s: wrong order" % kind)
    c.call("DEL", sched, pend)
    return med(out)


def bare(t, kind):
    key = "v:%s" % kind
    c = t.c
    c.call("DEL", key)
    if kind.startswith("x"):
        c.call("XGROUP", "CREATE", key, "workers", "$", "MKSTREAM")
    settle(c)
    out = []
    base = now_ms()
    for i in range(K):
        ms = ["job:%d" % (i * B + j) for j in range(B)]
        if kind == "xauto":
            cmds, stat = [["XADD", key, "*", "job", m] for m in ms], ("xadd", B)
        elif kind == "xid":
            cmds = [["XADD", key, "%d-%d" % (base + i, j), "job", m] for j, m in enumerate(ms)]
            stat = ("xadd", B)
        elif kind == "lpush1":
            cmds, stat = [["LPUSH", key, m] for m in ms], ("lpush", B)
        else:  # lpushk
            cmds, stat = [["LPUSH", key] + ms], ("lpush", 1)
        c.call("CONFIG", "RESETSTAT")
        send_all(c, cmds)
        out.append(usec(c, [stat[0]], stat))
    if c.call("XLEN" if kind.startswith("x") else "LLEN", key) != B * K:
        raise RuntimeError("versions: %s: wrong length" % kind)
    c.call("DEL", key)
    return med(out)


# --- retry ----------------------------------------------------------------

def retry(t, kind, rng):
    c = t.c

    def make(j):
        job = "job:%012d" % j
        if kind == "zref":
            return ["ZADD", "v:r:zref", "500000%012de-5" % rng.randrange(100_000), job]
        if kind == "znow":
            return ["ZADD", "v:r:znow", now_ms(), job]
        if kind == "fixd":
            return ["ECHO.RETRY", "v:r:fixd", job, "fixed:1000", "3"]
        if kind == "jitr":
            return ["ECHO.RETRY", "v:r:jitr", job, "jitter:exponential:100:10000", "3"]
        # dead-letters: attempts 5 of 5, the job not in the schedule
        return ["ECHO.RETRY", "v:r:absent", job, "fixed:1000", "5", "MAXATTEMPTS", "5",
                "DEAD", "v:r:dead"]

    jobs = list(range(t.jobs, t.jobs + PRIME + BATCH))
    t.jobs += PRIME + BATCH
    send_all(c, [make(j) for j in jobs[:PRIME]])
    payload = [make(j) for j in jobs[PRIME:]]
    c.call("CONFIG", "RESETSTAT")
    replies = send_all(c, payload)
    want = -1 if kind == "dabs" else None
    if any(not isinstance(r, int) or (want is not None and r != want) for r in replies):
        raise RuntimeError("versions: %s: unexpected replies" % kind)
    stat = "zadd" if kind.startswith("z") else "echo.retry"
    return usec(c, [stat], (stat, BATCH)) / BATCH


WORKLOADS = [
    # (id, label, unit, function(target, rng) -> µs)
    ("m_list", "ECHO.PROMOTE 1000 into a list", "µs/call",
     lambda t, rng: promote(t, "m_list", False)),
    ("m_stream", "ECHO.PROMOTE 1000 into a stream (group `workers`)", "µs/call",
     lambda t, rng: promote(t, "m_stream", True)),
    ("n_list", "native ZRANGEBYSCORE + LPUSH of 1000 + ZREMRANGEBYRANK", "µs/call",
     lambda t, rng: promote(t, "n_list", False)),
    ("n_stream", "native ZRANGEBYSCORE + 1000 XADD s * job m + ZREMRANGEBYRANK", "µs/call",
     lambda t, rng: promote(t, "n_stream", True)),
    ("xauto", "bare: 1000 XADD s * job m, pipelined", "µs/1000",
     lambda t, rng: bare(t, "xauto")),
    ("xid", "bare: 1000 XADD s <ms>-<seq> job m, pipelined", "µs/1000",
     lambda t, rng: bare(t, "xid")),
    ("lpush1", "bare: 1000 LPUSH l m, pipelined", "µs/1000",
     lambda t, rng: bare(t, "lpush1")),
    ("lpushk", "bare: one LPUSH l m1..m1000", "µs/1000",
     lambda t, rng: bare(t, "lpushk")),
    ("zref", "native ZADD, ~1000 distinct scores (throughput reference)", "µs/call",
     lambda t, rng: retry(t, "zref", rng)),
    ("znow", "native ZADD s <now ms> job", "µs/call", lambda t, rng: retry(t, "znow", rng)),
    ("fixd", "ECHO.RETRY s job fixed:1000 3", "µs/call", lambda t, rng: retry(t, "fixd", rng)),
    ("jitr", "ECHO.RETRY s job jitter:exponential:100:10000 3", "µs/call",
     lambda t, rng: retry(t, "jitr", rng)),
    ("dabs", "ECHO.RETRY ... MAXATTEMPTS 5 DEAD d, dead-letters (job not in schedule)",
     "µs/call", lambda t, rng: retry(t, "dabs", rng)),
]

# (label, numerator, denominator): computed per target and round
RATIOS = [
    ("ECHO.RETRY fixed ÷ ZADD reference", "fixd", "zref"),
    ("ECHO.RETRY jittered ÷ ZADD reference", "jitr", "zref"),
    ("dead-lettering ECHO.RETRY ÷ ZADD <now>", "dabs", "znow"),
    ("ECHO.PROMOTE list ÷ native list", "m_list", "n_list"),
    ("ECHO.PROMOTE stream ÷ native stream", "m_stream", "n_stream"),
    ("ECHO.PROMOTE stream ÷ ECHO.PROMOTE list", "m_stream", "m_list"),
    ("native stream ÷ native list (promote)", "n_stream", "n_list"),
    ("bare 1000 XADD * ÷ 1000 LPUSH", "xauto", "lpush1"),
    ("bare 1000 XADD <id> ÷ 1000 LPUSH", "xid", "lpush1"),
    ("bare 1000 XADD * ÷ one LPUSH of 1000", "xauto", "lpushk"),
]


def from_root(path):
    """A relative path (with a slash) is the repository root's: bench.sh runs
    this from scripts/."""
    if "/" in path and not os.path.isabs(path):
        return os.path.normpath(os.path.join(SCRIPTS, "..", path))
    return path


def run(bench):
    servers = [from_root(s) for s in (bench.servers or "").split(",") if s] or [
        os.environ.get("ECHOMQ_SERVER", "valkey-server")]
    default_module = os.environ.get("ECHOMQ_MODULE") or os.path.join(
        SCRIPTS, "..", "target", "release", "libechomq.so")
    modules = [from_root(m) for m in (bench.modules or "").split(",") if m] or [default_module]
    rounds = 3 if bench.quick else 3 * bench.rounds
    targets = []
    try:
        for s in servers:
            for m in modules:
                label = "Valkey %s" % version_of(s)
                if len(modules) > 1:
                    label += ", %s" % os.path.basename(m)
                targets.append(Target(s, os.path.abspath(m), label))
                print("  %s: pid %d on 127.0.0.1:%d" % (label, targets[-1].proc.pid,
                                                        targets[-1].port), file=sys.stderr)
        bench.bench_cmds.append("(versions) " + "; ".join(
            "%s = %s --loadmodule %s" % (t.label, t.binary, t.module) for t in targets))
        us = {(t.label, w[0]): [] for t in targets for w in WORKLOADS}
        rng = random.Random(24)
        for r in range(rounds + 1):  # round 0: warm-up, not recorded
            for t in rotate(targets, r):
                order = list(WORKLOADS)
                rng.shuffle(order)
                for wid, _, _, fn in order:
                    u = fn(t, rng)
                    if r > 0:
                        us[(t.label, wid)].append(u)
            print("  versions round %d/%d done" % (r, rounds), file=sys.stderr)
    finally:
        for t in targets:
            t.stop()

    for t in targets:
        section = "versions: %s (%d rounds, targets interleaved)" % (t.label, rounds)
        for wid, label, unit, _ in WORKLOADS:
            xs = us[(t.label, wid)]
            bench.add(section, label, "%.2f" % med(xs), unit + " (server)", "%.2f" % med(xs),
                      samples=xs, fmt="%.2f")
    for name, a, b in RATIOS:
        for t in targets:
            per = [x / y for x, y in zip(us[(t.label, a)], us[(t.label, b)])]
            bench.add("versions: ratios, median of per-round ratios (%d rounds)" % rounds,
                      "%s — %s" % (name, t.label), "%.2f" % med(per), "× (same server, round)",
                      ratio="%.2f× (ratio of medians)" % (
                          med(us[(t.label, a)]) / med(us[(t.label, b)])),
                      samples=per, fmt="%.2f")
    if len(modules) > 1:
        # each later module build against the first, per server and round
        for wid, label, _, _ in WORKLOADS:
            for s in servers:
                ts = [t for t in targets if t.binary == s]
                for t in ts[1:]:
                    per = [x / y for x, y in zip(us[(t.label, wid)], us[(ts[0].label, wid)])]
                    bench.add("versions: module builds, median of per-round ratios",
                              "%s — %s ÷ %s" % (label, t.label, os.path.basename(ts[0].module)),
                              "%.3f" % med(per), "× (same server, round)", samples=per,
                              fmt="%.3f")
