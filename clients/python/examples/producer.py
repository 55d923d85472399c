#!/usr/bin/env python3
"""Adds one job per URL given on the command line to the queue `fetch`; examples/worker.py runs them.

    python examples/producer.py [--url redis://127.0.0.1:6379/0] https://example.com/ ...
"""

import argparse

import valkey

import echomq


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="the echomq server")
    parser.add_argument("--queue", default="fetch")
    parser.add_argument("--delay-ms", type=int, default=0, help="run the jobs this much later")
    parser.add_argument("targets", nargs="+", metavar="URL", help="what the worker fetches")
    args = parser.parse_args()

    queue = echomq.Queue(valkey.Valkey.from_url(args.url), args.queue)
    for job_id, target in zip(queue.add_many(args.targets, delay_ms=args.delay_ms), args.targets):
        print(job_id, target)
    print(queue.counts())


if __name__ == "__main__":
    main()
