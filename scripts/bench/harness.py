"""What every section shares: the Bench (a connection to the server bench.sh
started, the Lua scripts loaded, the rows measured so far), set-up fills,
one timed promotion, the concurrent PING client, medians and the rotation
that interleaves variants, the servers a section starts of its own (the
versions' and the cluster's), and the final table."""

import contextlib
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import time

from .client import Conn, ReplyError, cmdstats, info

SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LUA = os.path.join(SCRIPTS, "lua")
# the binaries the worker_layouts and web_scrape sections run, as built by cargo
DEFAULT_WORKER = os.path.join(SCRIPTS, "..", "target", "release", "examples", "crossworker")
DEFAULT_LIST_WORKER = os.path.join(SCRIPTS, "..", "target", "release", "examples", "list_worker")
DEFAULT_WEB = os.path.join(SCRIPTS, "..", "target", "release", "echomq-web")

# not-yet-due members in the promotion sections' schedules
FUTURE = 10_000


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def rotate(items, r):
    r %= len(items)
    return items[r:] + items[:r]


def ok(b):
    return "yes" if b else "NO"


def load_script(conn, name):
    with open(os.path.join(LUA, name), "rb") as f:
        return conn.call("SCRIPT", "LOAD", f.read()).decode()


def now_ms():
    return int(time.time() * 1000)


def settle(conn):
    """Waits until the server has freed what DEL/FLUSHALL handed to its
    background thread (lazyfree is on by default in Valkey 8), so that work
    does not overlap the next measurement."""
    for _ in range(600):
        if int(info(conn, "memory").get("lazyfree_pending_objects", "0")) == 0:
            return
        time.sleep(0.05)


def free_port():
    """A free 127.0.0.1 port: bound to port 0 and released, so another
    process may take it before a server binds it (the callers retry)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_server(binary, module, workdir, port, extra=()):
    """Starts `binary` with `module` on 127.0.0.1:`port` (no persistence,
    `workdir` its dir and its log's, `extra` arguments before the log's and
    the module's). Returns the process and a Conn once it answers PING; the
    Conn is None when it exited or did not answer within 10 s (the process
    is then for stop_server)."""
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", workdir,
         "--save", "", "--appendonly", "no", "--daemonize", "no", *extra,
         "--logfile", os.path.join(workdir, "valkey.log"), "--loadmodule", module],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if proc.poll() is not None:
            return proc, None
        try:
            c = Conn(port)
            if c.call("PING") == b"PONG":
                return proc, c
        except (OSError, ConnectionError, ReplyError):
            pass
        time.sleep(0.1)
    return proc, None


def stop_server(proc):
    """Stops a server started by start_server, by its pid: SIGTERM, then
    SIGKILL if it is still there after 10 s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def delete_keys(conn, pattern):
    """Deletes every key matching `pattern` (SCAN, then DEL 500 at a time)."""
    keys, cursor = [], b"0"
    while True:
        cursor, batch = conn.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
        keys += batch
        if cursor in (b"0", 0):
            break
    for i in range(0, len(keys), 500):
        conn.call("DEL", *keys[i:i + 500])


@contextlib.contextmanager
def server_configs(conn, values):
    """The block runs with the server configs `values` ({name: value}) set;
    what they were is put back after it, also on error."""
    saved = [x for name in values for x in (name, conn.call("CONFIG", "GET", name)[1])]
    conn.call("CONFIG", "SET", *[x for kv in values.items() for x in kv])
    try:
        yield
    finally:
        conn.call("CONFIG", "SET", *saved)


class Bench:
    def __init__(self, port, rounds, quick, worker=None, web=None, list_worker=None):
        self.port = port
        self.worker = worker
        self.list_worker = list_worker or DEFAULT_LIST_WORKER
        self.web = web
        self.rounds = rounds
        self.quick = quick
        self.c = Conn(port)
        self.sha = {
            "retry": load_script(self.c, "retry.lua"),
            "promote": load_script(self.c, "promote.lua"),
            "fill": load_script(self.c, "fill.lua"),
        }
        with open(os.path.join(LUA, "retry_function.lua"), "rb") as f:
            self.c.call("FUNCTION", "LOAD", "REPLACE", f.read())
        self.rows = []  # (section, row, value, min–max, unit, server_us, ratio, goal)
        self.bench_cmds = []

    def fill(self, key, n, first_score, step, prefix, first_index=0):
        """Adds n members server-side (set-up, never measured)."""
        return self.c.call("EVALSHA", self.sha["fill"], 1, key, n, first_score,
                           step, prefix, first_index)

    def fill_due(self, key, n):
        # scores in the past (10^7 ms ago and on), distinct and increasing
        return self.fill(key, n, now_ms() - 10_000_000, 1, "job:", 0)

    def fill_future(self, key, n, prefix="future:"):
        # not yet due: 10^9 ms (about 11.6 days) from now and later
        return self.fill(key, n, now_ms() + 1_000_000_000, 1, prefix, 0)

    def add(self, section, row, value, unit, server_us="", ratio="", goal="", samples=None,
            fmt="%.0f"):
        span = ""
        if samples:
            span = (fmt + "–" + fmt) % (min(samples), max(samples))
        self.rows.append((section, row, value, span, unit, server_us, ratio, goal))

    def promote_call(self, method, sched, pend, batch):
        """One promotion of up to `batch` members; returns (moved, server µs,
        client wall seconds). Server time is from INFO commandstats, reset
        right before the call, so it holds exactly this call's commands."""
        self.c.call("CONFIG", "RESETSTAT")
        t0 = time.perf_counter()
        if method == "module":
            moved = self.c.call("ECHO.PROMOTE", sched, pend, "LIMIT", batch)
        elif method == "lua":
            moved = self.c.call("EVALSHA", self.sha["promote"], 2, sched, pend, batch)
        else:  # the native commands issued by the client (not atomic)
            due = self.c.call("ZRANGEBYSCORE", sched, "-inf", now_ms(), "LIMIT", 0, batch)
            if due:
                self.c.pipeline([["LPUSH", pend] + due,
                                 ["ZREMRANGEBYRANK", sched, 0, len(due) - 1]])
            moved = len(due)
        wall = time.perf_counter() - t0
        st = cmdstats(self.c)
        if method == "module":
            server = st.get("echo.promote", (0, 0))[1]
        elif method == "lua":
            server = st.get("evalsha", (0, 0))[1]
        else:
            server = sum(st.get(c, (0, 0))[1] for c in
                         ("zrangebyscore", "lpush", "zremrangebyrank"))
        return moved, server, wall

    def promote_exactly(self, method, sched, pend, batch, name):
        """promote_call, which must move a full batch (name says who did not)."""
        moved, server, wall = self.promote_call(method, sched, pend, batch)
        if moved != batch:
            raise RuntimeError("%s moved %d, expected %d" % (name, moved, batch))
        return server, wall


def pinger(port, stop, q):
    """A concurrent client: back-to-back PINGs, each timed."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lat = []
    msg = b"*1\r\n$4\r\nPING\r\n"
    while not stop.is_set():
        t0 = time.perf_counter()
        s.sendall(msg)
        buf = b""
        while not buf.endswith(b"\r\n"):
            buf += s.recv(64)
        lat.append(time.perf_counter() - t0)
        # leave the CPU to the server and the promoting client (2 cores)
        time.sleep(0.0002)
    s.close()
    lat.sort()
    q.put((lat[-1], lat[int(len(lat) * 0.99)], len(lat)))


def start_pinger(port):
    """The pinger in its own process, given 0.1 s to get going; returns what
    stop_pinger takes."""
    stop = multiprocessing.Event()
    q = multiprocessing.Queue()
    p = multiprocessing.Process(target=pinger, args=(port, stop, q), daemon=True)
    p.start()
    time.sleep(0.1)
    return stop, q, p


def stop_pinger(handle):
    """Stops the pinger; returns (max, p99 round trip in seconds, PINGs sent)."""
    stop, q, p = handle
    stop.set()
    result = q.get(timeout=30)
    p.join(timeout=30)
    return result


def run_sections(bench, sections):
    """Runs each (name, function) in turn, progress on stderr; returns the
    seconds they took in all."""
    t0 = time.perf_counter()
    for name, run in sections:
        t = time.perf_counter()
        print("%s ..." % name, file=sys.stderr)
        run(bench)
        print("  %s took %.0f s" % (name, time.perf_counter() - t), file=sys.stderr)
    return time.perf_counter() - t0


def report(b, elapsed):
    """The commands run, how each section measures, and the table."""
    print()
    print("valkey-benchmark commands (each run -n per round after a warm-up), and (worker) the last")
    if getattr(b, "clients_note", None):
        print("worker run of each variant (the others differ in --fail-first), and (clients, X)")
        print("each driver's last run (the others differ in --queue and --fail-once):")
    else:
        print("worker run of each variant (the others differ in --fail-first):")
    for cmd in b.bench_cmds:
        print("  " + cmd)
    print()
    print("Each section interleaves what it compares and reports medians; ratios are of the")
    print("medians. Throughput: %d rounds, each one valkey-benchmark run per row (order rotating)."
          % b.rounds)
    print("Retry options (MAXATTEMPTS/DEAD): rounds of one pipelined batch per row (order shuffled")
    print("each round), server time per call from INFO commandstats reset before each batch.")
    print("Promotion: warm = %d rounds of k calls in a row per variant; cold = single calls of"
          % b.rounds)
    print("each variant in turn; future members: single calls in turn. Medians over calls, server")
    print("time from INFO commandstats reset before each call. Latency: %d rounds." % b.rounds)
    print("Memory: %d rounds (order alternating). 'min–max' is over rounds or calls." %
          max(1, min(b.rounds, 3)))
    print("Auto-promote: %d rounds per interval of jobs retried with jitter:fixed:2000 in one MULTI,"
          % b.rounds)
    print("popped by a BRPOP client; lag = receipt wall time - fire time (min–max: round medians);")
    print("backlog: %d rounds, drain time from CONFIG SET until the schedule is gone." %
          max(1, min(b.rounds, 3)))
    print("Promote into a stream vs a list: warm = %d rounds of k calls per layout (order rotating),"
          % b.rounds)
    print("cold = single calls of each layout in turn; server time per call / 1000 members.")
    print("Rust worker: %d recorded rounds (+1 warm-up) of one worker process per variant and workload"
          % b.rounds)
    print("(order rotating); jobs/s from the first to the last completion seen by HLEN polled every")
    print("2 ms (scripts/bench/worker_layouts.py says how).")
    print("echomq-web: 500 queues; wall time per GET over one keep-alive connection, %d rounds"
          % b.rounds)
    print("(order rotating); commands and server µs of one scrape from INFO commandstats.")
    if getattr(b, "clients_note", None):
        print("Workers side by side: %d recorded rounds (+1 warm-up), every contender and workload"
              % (min(b.rounds, 3) if b.quick else b.rounds))
        print("once per round (order rotating), a fresh queue and one driver process per run")
        print("(scripts/bench/clients.py says how); jobs/s from the worker's start to the last job")
        print("done; server CPU per job = used_cpu_user + used_cpu_sys of INFO cpu over the phase;")
        print("%s." % b.clients_note)
    if getattr(b, "herd_json_written", None):
        print("Herd: one run per strategy, back to back on fresh keys; the simulated dependency and")
        print("the worker threads live in the benchmark process (scripts/bench/herd.py says how); the")
        print("blink's first calls are not counted in the failures or the window maxima; the series")
        print("are written to %s." % b.herd_json_written)
    if getattr(b, "tenants_json_written", None):
        print("Tenants: every lane once per round, order rotating, fresh keys; the tenants' quotas and")
        print("the worker threads live in the benchmark process (scripts/bench/tenants.py says how);")
        print("the rounds are written to %s." % b.tenants_json_written)
    if getattr(b, "cluster_note", None):
        rounds, n, queue, tags = b.cluster_note
        print("Cluster: a 3-primary cluster of its own, queue %s (shards %s, each on its own primary);" % (
            queue, ", ".join(tags)))
        print("%d rounds (+1 warm-up) of both layouts, order alternating, %d jobs added before the"
              % (rounds, n))
        print("workers start; jobs/s from the first to the last completion (XLEN polled every 5 ms);")
        print("server CPU per primary = INFO cpu user + sys over the workers' run, per job of the run")
        print("(the goal's ⅓) and per job it served (scripts/bench/cluster.py says how).")
    print()
    print("| section | row | median | min–max (rounds or calls) | unit | server µs/call | ratio | goal |")
    print("|---|---|---:|---:|---|---:|---|---|")
    for row in b.rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    print()
    print("measurement took %.0f s" % elapsed)
