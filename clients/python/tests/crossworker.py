#!/usr/bin/env python3
"""The crossworker program of the echomq client libraries (same CLI in Python, Node.js and Rust).

  crossworker.py work --url URL --queue NAME [--done KEY] [--fail MSG] [--sleep-ms MS]
                      [--concurrency N] [--lease-ms MS] [--max-attempts N] [--backoff POLICY]
                      [--max-deliveries N] [--shutdown-timeout-ms MS] [--started KEY] [--crash]
  crossworker.py add --url URL --queue NAME --count N [--id-prefix P] [--delay-ms D]
  crossworker.py dead --url URL --queue NAME
  crossworker.py requeue --url URL --queue NAME --id ID
  crossworker.py purge --url URL --queue NAME [--older-than-ms MS]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

import valkey

import echomq


def work(args) -> int:
    client = valkey.Valkey.from_url(args.url)
    queue = echomq.Queue(client, args.queue)

    def handler(job: echomq.Job) -> None:
        if args.started:
            client.rpush(args.started, job.id)
        if args.crash:
            # a job that kills whatever runs it: the worker dies as under SIGKILL
            os.kill(os.getpid(), signal.SIGKILL)
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)
        if args.fail is not None:
            raise RuntimeError(args.fail)
        if args.done:
            client.hincrby(args.done, job.id, 1)

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
        print("ready", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    worker.run()
    return 0


def add(args) -> int:
    queue = echomq.Queue(valkey.Valkey.from_url(args.url), args.queue)
    payloads = ["payload-%d" % i for i in range(args.count)]
    ids = None
    if args.id_prefix is not None:
        ids = ["%s%d" % (args.id_prefix, i) for i in range(args.count)]
    for job_id in queue.add_many(payloads, ids=ids, delay_ms=args.delay_ms):
        print(job_id)
    sys.stdout.flush()
    return 0


def dead(args) -> int:
    queue = echomq.Queue(valkey.Valkey.from_url(args.url), args.queue)
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
    queue = echomq.Queue(valkey.Valkey.from_url(args.url), args.queue)
    print("true" if queue.requeue(args.id) else "false", flush=True)
    return 0


def purge(args) -> int:
    """Prints how many dead jobs were removed."""
    queue = echomq.Queue(valkey.Valkey.from_url(args.url), args.queue)
    print(queue.purge_dead(args.older_than_ms), flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="crossworker")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--url", required=True)
        p.add_argument("--queue", required=True)

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
    a = sub.add_parser("add")
    common(a)
    a.add_argument("--count", type=int, required=True)
    a.add_argument("--id-prefix")
    a.add_argument("--delay-ms", type=int, default=0)
    d = sub.add_parser("dead")
    common(d)
    r = sub.add_parser("requeue")
    common(r)
    r.add_argument("--id", required=True)
    p = sub.add_parser("purge")
    common(p)
    p.add_argument("--older-than-ms", type=int, default=0)
    args = parser.parse_args(argv)
    commands = {"work": work, "add": add, "dead": dead, "requeue": requeue, "purge": purge}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
