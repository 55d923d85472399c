#!/usr/bin/env python3
"""The crossworker program of the echomq client libraries (same CLI in Python, Node.js and Rust).

  crossworker.py work --url URL --queue NAME [--cluster] [--shards N] [--done KEY] [--fail MSG]
                      [--sleep-ms MS] [--concurrency N] [--lease-ms MS] [--max-attempts N] [--backoff POLICY]
                      [--max-deliveries N] [--shutdown-timeout-ms MS] [--started KEY] [--crash]
                      [--crash-on ID] [--fail-first K] [--overload-every K] [--retry-after-ms MS]
                      [--hold-group-on ID] [--log-takes] [--log-starts KEY] [--jobs N]
                      [--deadline-secs S] [--ran KEY]
  crossworker.py add --url URL --queue NAME [--cluster] [--shards N] --count N [--id-prefix P]
                     [--delay-ms D] [--group G]
  crossworker.py dead --url URL --queue NAME [--cluster] [--shards N]
  crossworker.py requeue --url URL --queue NAME [--cluster] [--shards N] --id ID
  crossworker.py purge --url URL --queue NAME [--cluster] [--shards N] [--older-than-ms MS]
  crossworker.py repeat --url URL --queue NAME [--cluster] [--shards N] --id ID --spec SPEC
                        --payload TEXT [--jitter-ms MS] [--tz ZONE] [--from-ms MS] [--until-ms MS]
  crossworker.py repeats --url URL --queue NAME [--cluster] [--shards N]
  crossworker.py unrepeat --url URL --queue NAME [--cluster] [--shards N] --id ID

--shards N (every command; default 1) opens the queue as N shards (docs/clients.md, Sharded queues):
the adds go to each job's shard, a worker takes from every shard, and dead, requeue, purge, repeat,
repeats and unrepeat see the whole queue; a queue grown from N shards is read with the larger N.

With --cluster, --url is one seed node of a Valkey Cluster, or several separated by commas
(``redis://127.0.0.1:7000,127.0.0.1:7001``; a seed without a scheme takes the first one's options).

``repeat`` prints the fire time of the armed occurrence, ``repeats`` one JSON object a line (id,
spec, jitter_ms, tz, from_ms, until_ms, next_ms, fire_at_ms), ``unrepeat`` true or false.

A run of ``work`` goes, in this order: --log-takes prints ``took <entry> <id> <attempt>``, --started
pushes the id, --ran pushes ``<id> <payload as hex>``, --log-starts adds ``job <id> attempt <n>
entry <entry>`` to the stream KEY (the new entry's id is the server's clock at the start), --crash /
--crash-on kill the process, --sleep-ms sleeps, --hold-group-on fails that job's first attempt with
RetryAfter(--retry-after-ms) holding the job's own group, --overload-every raises RetryAfter,
--fail-first and then --fail raise, --done counts the success. Every exit that is not a crash
prints ``summary {"runs":R,"max_concurrent":C}``; --deadline-secs exits 2 after it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time

import valkey
from valkey.cluster import ClusterNode, ValkeyCluster
from valkey.connection import parse_url
from valkey.exceptions import BusyLoadingError, ClusterDownError, ClusterError, ReadOnlyError
from valkey.exceptions import ConnectionError as ValkeyConnectionError
from valkey.exceptions import ResponseError, SlotNotCoveredError, TryAgainError
from valkey.exceptions import TimeoutError as ValkeyTimeoutError

import echomq

_out = threading.Lock()  # one line at a time on stdout: the handler threads print too


def say(line: str) -> None:
    """One line on stdout, flushed. A reader that went away (a test that read `ready` and
    closed the pipe) is no failure of the worker: the line is dropped and stdout pointed at
    /dev/null, so neither a took line (which would fail the job) nor the summary, nor Python's
    own flush at exit, turns a graceful exit into an error."""
    with _out:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


def connect(args):
    """A client of --url: valkey.Valkey, or with --cluster a ValkeyCluster seeded with every node
    the comma-separated --url names (any one of them is enough to find the others)."""
    if not args.cluster:
        return valkey.Valkey.from_url(args.url)
    seeds = [s.strip() for s in args.url.split(",") if s.strip()]
    if not seeds:
        raise SystemExit("crossworker: --url names no node")
    scheme = seeds[0].split("://", 1)[0] + "://" if "://" in seeds[0] else "redis://"
    nodes = []
    options = None
    for seed in seeds:
        parsed = parse_url(seed if "://" in seed else scheme + seed)
        nodes.append(ClusterNode(parsed.pop("host", "127.0.0.1"), int(parsed.pop("port", 6379))))
        parsed.pop("db", None)  # a cluster has only database 0
        if options is None:
            options = parsed  # credentials, TLS and timeouts: the first seed's
    return ValkeyCluster(startup_nodes=nodes, **(options or {}))


# Replies that say the node cannot take the write now (a failover or a slot move in progress),
# not that the write is wrong: the handler's side writes wait them out instead of failing the job.
_RETRIED = (
    ValkeyConnectionError, ValkeyTimeoutError, OSError, ReadOnlyError, BusyLoadingError,
    ClusterDownError, TryAgainError, ClusterError, SlotNotCoveredError,
)
_RETRIED_CODES = ("READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN")


def retried(write):
    """Runs a side write of the handler (the --done HINCRBY, the --started RPUSH, the --log-starts
    XADD), again after a 50 ms pause doubling to 1 s while the server answers as in a failover, for
    up to 30 s: a failover must not turn into a job failure. MOVED and ASK are followed by the
    cluster client."""
    pause, give_up = 0.05, time.monotonic() + 30
    while True:
        try:
            return write()
        except Exception as exc:  # noqa: BLE001 - sorted below
            transient = isinstance(exc, _RETRIED) or (
                isinstance(exc, ResponseError) and str(exc).startswith(_RETRIED_CODES)
            )
            if not transient or time.monotonic() + pause > give_up:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def _trailing_number(job_id: str):
    m = re.search(r"([0-9]+)$", job_id)
    return int(m.group(1)) if m else None


class Stats:
    """Runs started and the most handlers running at once, for the summary line."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs = 0
        self.running = 0
        self.max_concurrent = 0
        self.printed = False

    def start(self) -> None:
        with self.lock:
            self.runs += 1
            self.running += 1
            self.max_concurrent = max(self.max_concurrent, self.running)

    def end(self) -> None:
        with self.lock:
            self.running -= 1

    def summary(self) -> bool:
        """Prints the summary once; False when it was printed already (the other exit won)."""
        with self.lock:
            if self.printed:
                return False
            self.printed = True
            line = "summary " + json.dumps(
                {"runs": self.runs, "max_concurrent": self.max_concurrent}, separators=(",", ":")
            )
        say(line)
        return True


def work(args) -> int:
    if args.jobs is not None and not args.done:
        raise SystemExit("crossworker: --jobs needs --done")
    client = connect(args)
    queue = echomq.Queue(client, args.queue, shards=args.shards)
    stats = Stats()

    def run(job: echomq.Job) -> None:
        if args.log_takes:
            say("took %s %s %d" % (job.entry_id, job.id, job.attempt))
        if args.started:
            retried(lambda: client.rpush(args.started, job.id))
        if args.ran:
            retried(lambda: client.rpush(args.ran, "%s %s" % (job.id, job.payload.hex())))
        if args.log_starts:
            fields = {"job": job.id, "attempt": job.attempt, "entry": job.entry_id}
            retried(lambda: client.xadd(args.log_starts, fields))
        if args.crash or (args.crash_on is not None and job.id == args.crash_on):
            # a job that kills whatever runs it: the worker dies as under SIGKILL
            os.kill(os.getpid(), signal.SIGKILL)
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)
        if job.id == args.hold_group_on and job.attempt == 1:
            raise echomq.RetryAfter(args.retry_after_ms, group=job.group)
        if args.overload_every and job.attempt % args.overload_every == 0:
            raise echomq.RetryAfter(args.retry_after_ms)
        if args.fail_first is not None:
            number = _trailing_number(job.id)
            if number is not None and job.attempt <= number % (args.fail_first + 1):
                raise RuntimeError("planned failure")
        if args.fail is not None:
            raise RuntimeError(args.fail)
        if args.done:
            retried(lambda: client.hincrby(args.done, job.id, 1))

    def handler(job: echomq.Job) -> None:
        stats.start()
        try:
            run(job)
        finally:
            stats.end()

    worker = echomq.Worker(
        queue,
        handler,
        concurrency=args.concurrency,
        backoff=args.backoff,
        max_attempts=args.max_attempts,
        lease_ms=args.lease_ms,
        max_deliveries=args.max_deliveries,
        shutdown_timeout_ms=args.shutdown_timeout_ms,
    )

    def announce() -> None:
        while not worker.ready.wait(0.1):
            if worker.closing:
                return
        say("ready")

    def watch_jobs() -> None:
        """--jobs N: closes the worker once N jobs are done or dead (polled every 50 ms)."""
        dead = ["{%s}:dead" % tag for tag in queue.shards]  # every shard's
        while not worker.closing:
            try:
                if client.hlen(args.done) + sum(client.zcard(key) for key in dead) >= args.jobs:
                    worker.close()
                    return
            except Exception:  # noqa: BLE001 - a poll during a failover: ask again
                pass
            time.sleep(0.05)

    def deadline() -> None:
        time.sleep(args.deadline_secs)
        if stats.summary():
            os._exit(2)  # still running after --deadline-secs: the test fails fast

    threading.Thread(target=announce, daemon=True).start()
    if args.jobs is not None:
        threading.Thread(target=watch_jobs, daemon=True).start()
    if args.deadline_secs:
        threading.Thread(target=deadline, daemon=True).start()
    try:
        worker.run()
    finally:
        if not stats.summary():
            # the deadline printed the summary and is exiting with 2: do not exit 0 under it
            time.sleep(60)
    return 0


def add(args) -> int:
    queue = echomq.Queue(connect(args), args.queue, shards=args.shards)
    payloads = ["payload-%d" % i for i in range(args.count)]
    ids = None
    if args.id_prefix is not None:
        ids = ["%s%d" % (args.id_prefix, i) for i in range(args.count)]
    for job_id in queue.add_many(payloads, ids=ids, delay_ms=args.delay_ms, group=args.group):
        print(job_id)
    sys.stdout.flush()
    return 0


def dead(args) -> int:
    queue = echomq.Queue(connect(args), args.queue, shards=args.shards)
    offset = 0
    while True:
        records = queue.dead(offset, 500)
        for r in records:
            print(
                json.dumps(
                    {
                        "id": r.id,
                        "died_at_ms": r.died_at_ms,
                        "attempts": r.attempts,
                        "error": r.error,
                        # JSON null for a missing error or payload (the same in the three crossworkers)
                        "payload_hex": r.payload.hex() if r.payload is not None else None,
                    }
                )
            )
        if len(records) < 500:
            break
        offset += len(records)
    sys.stdout.flush()
    return 0


def requeue(args) -> int:
    """Prints true when the job was dead and is pending again, else false."""
    queue = echomq.Queue(connect(args), args.queue, shards=args.shards)
    print("true" if queue.requeue(args.id) else "false", flush=True)
    return 0


def purge(args) -> int:
    """Prints how many dead jobs were removed."""
    queue = echomq.Queue(connect(args), args.queue, shards=args.shards)
    print(queue.purge_dead(args.older_than_ms), flush=True)
    return 0


def repeat(args) -> int:
    """Prints the fire time of the armed occurrence."""
    queue = echomq.Queue(connect(args), args.queue, shards=args.shards)
    fire = queue.repeat(
        args.id, args.spec, args.payload, jitter_ms=args.jitter_ms, tz=args.tz, from_ms=args.from_ms,
        until_ms=args.until_ms,
    )
    print(fire, flush=True)
    return 0


def repeats(args) -> int:
    """Prints each definition as a JSON object a line."""
    queue = echomq.Queue(connect(args), args.queue, shards=args.shards)
    for r in queue.repeats():
        print(json.dumps(r))
    sys.stdout.flush()
    return 0


def unrepeat(args) -> int:
    """Prints true when the definition existed, else false."""
    queue = echomq.Queue(connect(args), args.queue, shards=args.shards)
    print("true" if queue.unrepeat(args.id) else "false", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="crossworker")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--url", required=True)
        p.add_argument("--queue", required=True)
        p.add_argument("--cluster", action="store_true")
        p.add_argument("--shards", type=int, default=1)

    w = sub.add_parser("work")
    common(w)
    w.add_argument("--done")
    w.add_argument("--fail")
    w.add_argument("--sleep-ms", type=int, default=0)
    w.add_argument("--concurrency", type=int, default=10)
    w.add_argument("--lease-ms", type=int, default=30000)
    w.add_argument("--max-attempts", type=int, default=10)
    w.add_argument("--backoff", default=echomq.DEFAULT_BACKOFF)
    w.add_argument("--max-deliveries", type=int, default=3)
    w.add_argument("--shutdown-timeout-ms", type=int, default=10000)
    w.add_argument("--started")
    w.add_argument("--crash", action="store_true")
    w.add_argument("--crash-on")
    w.add_argument("--fail-first", type=int)
    w.add_argument("--overload-every", type=int)
    w.add_argument("--retry-after-ms", type=int, default=1000)
    w.add_argument("--hold-group-on")
    w.add_argument("--log-takes", action="store_true")
    w.add_argument("--log-starts")
    w.add_argument("--jobs", type=int)
    w.add_argument("--deadline-secs", type=float, default=0)
    w.add_argument("--ran")
    a = sub.add_parser("add")
    common(a)
    a.add_argument("--count", type=int, required=True)
    a.add_argument("--id-prefix")
    a.add_argument("--delay-ms", type=int, default=0)
    a.add_argument("--group")
    d = sub.add_parser("dead")
    common(d)
    r = sub.add_parser("requeue")
    common(r)
    r.add_argument("--id", required=True)
    p = sub.add_parser("purge")
    common(p)
    p.add_argument("--older-than-ms", type=int, default=0)
    rp = sub.add_parser("repeat")
    common(rp)
    rp.add_argument("--id", required=True)
    rp.add_argument("--spec", required=True)
    rp.add_argument("--payload", required=True)
    rp.add_argument("--jitter-ms", type=int, default=0)
    rp.add_argument("--tz")
    rp.add_argument("--from-ms", type=int)
    rp.add_argument("--until-ms", type=int)
    rs = sub.add_parser("repeats")
    common(rs)
    ur = sub.add_parser("unrepeat")
    common(ur)
    ur.add_argument("--id", required=True)
    args = parser.parse_args(argv)
    commands = {
        "work": work, "add": add, "dead": dead, "requeue": requeue, "purge": purge,
        "repeat": repeat, "repeats": repeats, "unrepeat": unrepeat,
    }
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
