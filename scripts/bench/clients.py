"""Section `clients`: BullMQ's Worker against the echomq client libraries'
workers (Node.js, Python, Rust), each an ordinary program on its library's
public API, measured the same way."""

import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

from .client import info
from .harness import SCRIPTS, med, ok, rotate, settle

ROOT = os.path.dirname(SCRIPTS)
TARGET = os.path.join(ROOT, "target")
DRIVERS = os.path.join(SCRIPTS, "bench", "clients")
NODE_DIR = os.path.join(TARGET, "bench-node")
VENV = os.path.join(TARGET, "pyenv-clients")
CONCURRENCY = 50
# what the drivers may take per phase, generous for a loaded machine
READY_S, ADD_S, WORK_S = 120, 300, 600

# (workload, --fail-once given, label)
WORKLOADS = [(0, "no failures"),
             (1, "every job fails once, retried at once")]
# the goals for the echomq Node.js worker against BullMQ: (jobs/s at least,
# server CPU per job at most), as multiples of BullMQ's
GOALS = {0: (1.3, 0.4), 1: (2.5, 0.35)}


class Skip(Exception):
    """A contender that cannot run here, and why."""


def run_quiet(argv, cwd=None, what=None):
    """Runs a set-up command; Skip with the tail of its stderr when it fails."""
    try:
        out = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                             text=True)
    except OSError as e:
        raise Skip("%s: %s" % (what or argv[0], e))
    if out.returncode != 0:
        tail = " / ".join(out.stderr.strip().splitlines()[-3:])
        raise Skip("`%s` failed: %s" % (what or " ".join(argv), tail))
    return out.stdout


def node_binary():
    """node (18 or later) and npm, or Skip."""
    node = shutil.which("node")
    if not node:
        raise Skip("node (Node.js) is not installed")
    if not shutil.which("npm"):
        raise Skip("npm is not installed")
    version = run_quiet([node, "--version"]).strip()
    try:
        major = int(version.lstrip("v").split(".")[0])
    except ValueError:
        major = 0
    if major < 18:
        raise Skip("Node.js %s is too old (18 or later needed)" % version)
    return node


def node_packages():
    """target/bench-node: scripts/bench/clients' package-lock.json installed
    with `npm ci` (again only when the lock changed: npm ci wipes and
    refetches), and the .mjs drivers copied afresh, so that they run as they
    are in the checkout and `import "bullmq"` resolves to this install."""
    os.makedirs(NODE_DIR, exist_ok=True)
    with open(os.path.join(DRIVERS, "package-lock.json"), "rb") as f:
        lock = f.read()
    stamp = os.path.join(NODE_DIR, "node_modules", ".echomq-lock")
    try:
        with open(stamp, "rb") as f:
            fresh = f.read() == lock
    except OSError:
        fresh = False
    if not fresh:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(DRIVERS, name), os.path.join(NODE_DIR, name))
        run_quiet(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_DIR,
                  what="npm ci in %s" % NODE_DIR)
        with open(stamp, "wb") as f:
            f.write(lock)
    for name in ("bullmq.mjs", "echomq.mjs"):
        shutil.copy(os.path.join(DRIVERS, name), os.path.join(NODE_DIR, name))


def node_client():
    """The checkout's clients/node, its dependencies installed (`npm ci`
    there when missing)."""
    d = os.path.join(ROOT, "clients", "node")
    if not os.path.exists(os.path.join(d, "index.js")):
        raise Skip("clients/node is not in this checkout")
    if not os.path.exists(os.path.join(d, "node_modules", "iovalkey")):
        run_quiet(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=d,
                  what="npm ci in clients/node")
    return d


def tree_digest(d):
    """A digest of the files under d (build outputs left out), to reinstall
    the Python package when its source changed."""
    h = hashlib.sha256()
    for top, dirs, files in os.walk(d, followlinks=True):  # src/echomq/protocol is a symlink
        dirs[:] = sorted(x for x in dirs
                         if x not in ("__pycache__", "build", "dist", ".pytest_cache")
                         and not x.endswith(".egg-info") and not x.startswith(".venv"))
        for name in sorted(files):
            p = os.path.join(top, name)
            h.update(os.path.relpath(p, d).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def python_client():
    """The python of target/pyenv-clients (created when missing) with
    clients/python installed by pip (again whenever its source changed)."""
    d = os.path.join(ROOT, "clients", "python")
    if not os.path.exists(os.path.join(d, "pyproject.toml")):
        raise Skip("clients/python is not in this checkout")
    python = os.path.join(VENV, "bin", "python")
    if not os.path.exists(python):
        run_quiet([sys.executable, "-m", "venv", "--clear", VENV],
                  what="python3 -m venv (is python3-venv installed?)")
    stamp = os.path.join(VENV, ".echomq-bench-source")
    digest = tree_digest(d)
    try:
        with open(stamp) as f:
            fresh = f.read() == digest
    except OSError:
        fresh = False
    if not fresh:
        run_quiet([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                   "--timeout", "30", "--retries", "1", d], what="pip install ./clients/python")
        with open(stamp, "w") as f:
            f.write(digest)
    return python


def rust_client():
    """echomq-client's `bench` example, built (release) here: a no-op when
    it is fresh."""
    if not os.path.exists(os.path.join(ROOT, "clients", "rust", "examples", "bench.rs")):
        raise Skip("clients/rust/examples/bench.rs is not in this checkout")
    cargo = os.environ.get("CARGO") or shutil.which("cargo") or os.path.expanduser(
        "~/.cargo/bin/cargo")
    run_quiet([cargo, "build", "--release", "--quiet", "-p", "echomq-client", "--example", "bench"],
              cwd=ROOT, what="cargo build --release -p echomq-client --example bench")
    return os.path.join(TARGET, "release", "examples", "bench")


class Contender:
    def __init__(self, key, label, add_api, prepare, argv, echomq):
        self.key, self.label, self.add_api = key, label, add_api
        self.prepare, self.argv, self.echomq = prepare, argv, echomq
        self.base = None  # what prepare() returned
        self.skipped = None  # why not, when it cannot run


def contenders(node):
    def bullmq_argv(base):
        return [node, os.path.join(NODE_DIR, "bullmq.mjs")]

    def node_argv(base):
        return [node, os.path.join(NODE_DIR, "echomq.mjs"), "--client", base]

    def python_argv(base):
        return [base, "-B", os.path.join(DRIVERS, "echomq_worker.py")]

    def rust_argv(base):
        return [base]

    return [
        Contender("bullmq", "BullMQ 6.7.0 (Node.js, ioredis)",
                  "queue.addBulk, chunks of 1,000", lambda: None, bullmq_argv, False),
        Contender("node", "echomq Node.js (clients/node)", "queue.addMany",
                  node_client, node_argv, True),
        Contender("python", "echomq Python (clients/python)", "queue.add_many",
                  python_client, python_argv, True),
        Contender("rust", "echomq Rust (clients/rust)", "queue.add_many",
                  rust_client, rust_argv, True),
    ]


def pin_server(bench):
    """Pins every thread of the server bench.sh started to CPU 0 (taskset
    -a -p), so the worker processes can have CPU 1. Returns (what unpin
    takes, the note for the table, the prefix of the worker commands)."""
    if not shutil.which("taskset"):
        return None, "unpinned: taskset is not installed", []
    cpus = os.sched_getaffinity(0)
    if not {0, 1} <= cpus:
        return None, "unpinned: CPUs 0 and 1 are not both available (%d CPU)" % len(cpus), []
    pid = int(info(bench.c, "server")["process_id"])
    try:
        old = os.sched_getaffinity(pid)
    except OSError as e:
        return None, "unpinned: the server's process %d is not visible here (%s)" % (pid, e), []
    r = subprocess.run(["taskset", "-a", "-p", "-c", "0", str(pid)], capture_output=True, text=True)
    if r.returncode != 0:
        return None, "unpinned: taskset failed: %s" % r.stderr.strip(), []
    return (pid, old), "server on CPU 0, worker process on CPU 1", ["taskset", "-c", "1"]


def unpin_server(handle):
    """Gives the server back the CPUs it had."""
    if handle:
        pid, old = handle
        subprocess.run(["taskset", "-a", "-p", "-c", ",".join(str(c) for c in sorted(old)),
                        str(pid)], capture_output=True)


def cpu_seconds(bench):
    i = info(bench.c, "cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


class Driver:
    """One driver process and its line protocol: JSON lines on its stdout,
    the words `add` and `work` on its stdin; stderr kept in a file for the
    error message."""

    def __init__(self, argv, name):
        self.name = name
        self.err = tempfile.TemporaryFile()
        self.buf = b""
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err)

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace").strip()[-1500:]

    def fail(self, what):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        raise RuntimeError("%s: %s (exit %s): %s" % (self.name, what, self.p.returncode,
                                                      self.stderr()))

    def expect(self, event, timeout):
        """The driver's next JSON line, which must be `event` (lines that are
        not JSON objects are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.fail("no '%s' within %d s" % (event, timeout))
                r, _, _ = select.select([self.p.stdout], [], [], left)
                if r:
                    chunk = os.read(self.p.stdout.fileno(), 65536)
                    if not chunk:
                        self.fail("exited before '%s'" % event)
                    self.buf += chunk
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if msg.get("event") != event:
                self.fail("said %r, expected '%s'" % (msg, event))
            return msg

    def send(self, word):
        self.p.stdin.write(word.encode() + b"\n")
        self.p.stdin.flush()

    def finish(self):
        self.p.stdin.close()
        try:
            rc = self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("did not exit within 60 s of its last job")
        if rc != 0:
            self.fail("exited %d" % rc)

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        for f in (self.p.stdin, self.p.stdout):
            if f and not f.closed:
                f.close()
        self.err.close()


def echomq_keys(queue):
    return ["{%s}:%s" % (queue, s) for s in
            ("schedule", "pending", "dead", "jobs", "attempts", "errors")]


def check_and_clear(bench, c, queue):
    """Raises when the run left anything of a job behind; then deletes the
    queue's keys, and waits for the server to have freed them."""
    conn = bench.c
    if c.echomq:
        sched, pend, dead, jobs, attempts, errors = echomq_keys(queue)
        left = {"schedule": conn.call("ZCARD", sched), "pending": conn.call("XLEN", pend),
                "dead": conn.call("ZCARD", dead), "jobs": conn.call("HLEN", jobs),
                "attempts": conn.call("HLEN", attempts), "errors": conn.call("HLEN", errors)}
        if conn.call("EXISTS", pend):
            left["in flight"] = conn.call("XPENDING", pend, "workers")[0]
        keys = echomq_keys(queue)
    else:
        pre = "bull:%s:" % queue
        left = {"wait": conn.call("LLEN", pre + "wait"),
                "active": conn.call("LLEN", pre + "active"),
                "delayed": conn.call("ZCARD", pre + "delayed"),
                "prioritized": conn.call("ZCARD", pre + "prioritized"),
                "failed": conn.call("ZCARD", pre + "failed"),
                "completed": conn.call("ZCARD", pre + "completed")}
        keys, cursor = [], b"0"
        while True:
            cursor, batch = conn.call("SCAN", cursor, "MATCH", pre + "*", "COUNT", 1000)
            keys += batch
            if cursor in (b"0", 0):
                break
        left["job hashes"] = sum(1 for k in keys if k[len(pre):].split(b":")[0].isdigit())
    if any(left.values()):
        raise RuntimeError("%s left on queue %s: %r" % (c.key, queue, left))
    for i in range(0, len(keys), 500):
        conn.call("DEL", *keys[i:i + 500])
    settle(conn)


def run(bench):
    """BullMQ 6.7.0's Worker against the echomq Node.js worker, and the
    Python and Rust echomq workers measured the same way, on the server
    bench.sh started (nothing is restarted). Its threads are pinned to CPU 0
    and each worker process to CPU 1 with taskset, the server's CPUs given
    back at the end (without taskset or a second CPU: unpinned, and the
    table says so).

    Each contender is one small driver program on its library's public API
    (scripts/bench/clients/bullmq.mjs, echomq.mjs, echomq_worker.py, and
    clients/rust/examples/bench.rs), all speaking one line protocol with
    this script. A run, on a fresh queue: the driver connects; on `add` it
    adds N jobs (10,000; 2,000 with --quick) with its own bulk API (BullMQ
    queue.addBulk in chunks of 1,000, echomq one addMany / add_many, which
    pipelines transactions of 1,000) and reports the wall time of that;
    on `work` it starts one Worker, concurrency 50, with an empty handler,
    and reports when every job has succeeded and the queue is seen empty
    (polled every 1 ms after the last handler returned, so the last
    outcome is written), then closes and exits 0. jobs/s = N / the time
    from the Worker's start to then (start to last, the same for all:
    with failures, BullMQ runs every first attempt before any retry, so a
    first-to-last measure would leave its failures out). Server CPU:
    used_cpu_user + used_cpu_sys of INFO cpu, read before `add`, after
    its reply and after the last job, per job; the processing phase
    includes the server's own promotions (echomq.auto-promote's timer).

    Two workloads: no failures; and every job failing once (the handler
    throws on the first run of each id it sees) and retried at once:
    BullMQ with attempts 2 and no backoff, echomq with backoff fixed:0 and
    max_attempts 2, the queue's pair added to echomq.auto-promote with
    CONFIG SET for the run (restored after), as a deployment would list
    it. Without failures no config is set: the echomq worker promotes by
    itself (an ECHO.PROMOTE before each read), as out of the box. BullMQ
    jobs are added with removeOnComplete and removeOnFail, so that done
    jobs leave nothing behind, as echomq's do; each run is checked to have
    left no job (and N successes, and N failures with the second
    workload) and its keys are deleted.

    Rounds: every contender and workload once per round, order rotating;
    the first round is a warm-up and not recorded (bench.rounds rounds
    recorded, at most 3 with --quick). Medians, ratios of medians against
    BullMQ, goals for the echomq Node.js worker: without failures at least
    1.3x BullMQ's jobs/s at most 0.4x its server CPU per job; with one
    failure each at least 2.5x and at most 0.35x. A contender that cannot
    run here (its library or driver missing, a failed install) is a
    SKIPPED row with the reason; without node or npm the whole section is
    SKIPPED."""
    try:
        node = node_binary()
        node_packages()
    except Skip as e:
        print("SKIPPED clients: %s" % e)
        bench.add("Workers side by side", "SKIPPED: %s" % e, "", "")
        return
    n = 2000 if bench.quick else 10_000
    rounds = min(bench.rounds, 3) if bench.quick else bench.rounds
    url = "redis://127.0.0.1:%d/" % bench.port
    cs = contenders(node)
    for c in cs:
        try:
            c.base = c.prepare()
        except Skip as e:
            c.skipped = str(e)
            print("  clients: SKIPPED %s: %s" % (c.label, e), file=sys.stderr)
    live = [c for c in cs if c.skipped is None]
    variants = [(w, c) for w, _ in WORKLOADS for c in live]
    results = {(w, c.key): [] for w, c in variants}
    cmdlines = {}

    pin, pin_note, prefix = pin_server(bench)
    print("  clients: %s" % pin_note, file=sys.stderr)
    old_auto = bench.c.call("CONFIG", "GET", "echomq.auto-promote")[1].decode()

    def one_run(w, c, queue):
        argv = prefix + c.argv(c.base) + ["--url", url, "--queue", queue, "--jobs", str(n),
                                          "--concurrency", str(CONCURRENCY)]
        if w:
            argv.append("--fail-once")
        cmdlines[c.key] = argv
        d = Driver(argv, "%s driver on %s" % (c.key, queue))
        try:
            d.expect("ready", READY_S)
            if w and c.echomq:
                pair = "{%s}:schedule {%s}:pending" % (queue, queue)
                bench.c.call("CONFIG", "SET", "echomq.auto-promote",
                             (old_auto + " " + pair).strip())
            c0 = cpu_seconds(bench)
            d.send("add")
            added = d.expect("added", ADD_S)
            c1 = cpu_seconds(bench)
            d.send("work")
            done = d.expect("done", WORK_S)
            c2 = cpu_seconds(bench)
            d.finish()
        finally:
            d.close()
            if w and c.echomq:
                bench.c.call("CONFIG", "SET", "echomq.auto-promote", old_auto)
        if done.get("succeeded") != n or done.get("failed") != (n if w else 0):
            raise RuntimeError("%s on %s: %d succeeded, %d failed of %d jobs" % (
                c.key, queue, done.get("succeeded", -1), done.get("failed", -1), n))
        check_and_clear(bench, c, queue)
        return {"add_rate": n / added["seconds"], "add_us": (c1 - c0) / n * 1e6,
                "rate": n / done["seconds"], "us": (c2 - c1) / n * 1e6,
                "start_s": done["seconds"] - done["first_to_last"]}

    try:
        for r in range(rounds + 1):
            for w, c in rotate(variants, r):
                res = one_run(w, c, "cb-%s-%d-%d" % (c.key, w, r))
                if r > 0:
                    results[(w, c.key)].append(res)
            print("  clients round %d/%d done%s" % (
                r + 1, rounds + 1, " (warm-up)" if r == 0 else ""), file=sys.stderr)
    finally:
        unpin_server(pin)

    for key, argv in cmdlines.items():
        bench.bench_cmds.append("(clients, %s) %s" % (key, " ".join(
            os.path.relpath(a, ROOT) if a.startswith(ROOT) else a for a in argv)))
    bench.clients_note = pin_note
    section = ("Workers side by side: %s jobs, one worker process, concurrency %d, empty handler "
               "(%d rounds, interleaved; %s)" % ("{:,}".format(n), CONCURRENCY, rounds, pin_note))

    def series(w, key, field):
        return [x[field] for x in results.get((w, key), [])]

    bull = [c for c in live if c.key == "bullmq"]
    for w, label in WORKLOADS:
        b_rate = med(series(w, "bullmq", "rate")) if bull else float("nan")
        b_us = med(series(w, "bullmq", "us")) if bull else float("nan")
        for c in cs:
            row = "%s: Worker, %s" % (c.label, label)
            goal = ""
            if c.key == "node":
                g_rate, g_cpu = GOALS[w]
            if c.skipped is not None:
                if c.key == "node":
                    goal = "≥ %.1f× jobs/s, ≤ %.2f× CPU/job: not measured" % (g_rate, g_cpu)
                bench.add(section, row, "SKIPPED: %s" % c.skipped, "", goal=goal)
                continue
            rate, us = med(series(w, c.key, "rate")), med(series(w, c.key, "us"))
            ratio = ""
            if c.key != "bullmq":
                pairs = med([x / y for x, y in zip(series(w, c.key, "rate"),
                                                    series(w, "bullmq", "rate"))])
                ratio = "%.2f× jobs/s (median of per-round ratios %.2f×), %.2f× CPU/job" % (
                    rate / b_rate, pairs, us / b_us)
                if c.key == "node":
                    goal = "≥ %.1f× jobs/s: %s; ≤ %.2f× CPU/job: %s" % (
                        g_rate, ok(rate / b_rate >= g_rate), g_cpu, ok(us / b_us <= g_cpu))
            # how long the worker took to its first success (with failures, BullMQ
            # runs every first attempt before any retry)
            row += " [start to first success: median %.0f ms]" % (
                1000 * med(series(w, c.key, "start_s")))
            bench.add(section, row, "%.0f" % rate,
                      "jobs/s, worker start to last done; server µs = INFO cpu per job",
                      "%.1f" % us, ratio, goal, samples=series(w, c.key, "rate"))
    # the add phase of both workloads (the same calls but BullMQ's attempts option)
    b_rate = med(series(0, "bullmq", "add_rate") + series(1, "bullmq", "add_rate"))
    b_us = med(series(0, "bullmq", "add_us") + series(1, "bullmq", "add_us"))
    for c in live:
        rates = series(0, c.key, "add_rate") + series(1, c.key, "add_rate")
        us = med(series(0, c.key, "add_us") + series(1, c.key, "add_us"))
        ratio = "" if c.key == "bullmq" else "%.2f× jobs/s, %.2f× CPU/job" % (
            med(rates) / b_rate, us / b_us)
        bench.add(section, "%s: adding the jobs, %s (both workloads)" % (c.label, c.add_api),
                  "%.0f" % med(rates), "jobs/s added; server µs = INFO cpu per job", "%.1f" % us,
                  ratio, samples=rates)
