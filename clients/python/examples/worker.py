#!/usr/bin/env python3
"""Fetches the URL in each job of the queue `fetch` (see examples/producer.py) until Ctrl-C/SIGTERM.

A 429 or 503 answer with a Retry-After header holds the whole queue for that long (RetryAfter):
no worker starts another job of it until then, and this job is retried later. Any other failure is
a plain error: the job is retried under the backoff policy, and after max_attempts it is dead.

    python examples/worker.py [--url redis://127.0.0.1:6379/0]
"""

import argparse
import email.utils
import logging
import time
import urllib.error
import urllib.request

import valkey

import echomq


def retry_after_ms(value):
    """A Retry-After header (seconds, or an HTTP date) in ms; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value) * 1000
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0, int((when - time.time()) * 1000))


def fetch(job: echomq.Job) -> None:
    url = job.payload.decode("utf-8")
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (429, 503):
            ms = retry_after_ms(exc.headers.get("Retry-After"))
            if ms is not None:
                raise echomq.RetryAfter(ms, "HTTP %d, retry after %d ms" % (exc.code, ms)) from exc
        raise RuntimeError("HTTP %d from %s" % (exc.code, url)) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeError("cannot fetch %s: %s" % (url, exc)) from exc
    print("job %s attempt %d: %d bytes from %s" % (job.id, job.attempt, len(body), url), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="the echomq server")
    parser.add_argument("--queue", default="fetch")
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)

    queue = echomq.Queue(valkey.Valkey.from_url(args.url), args.queue)
    worker = echomq.Worker(queue, fetch, concurrency=args.concurrency, max_attempts=5)
    try:
        worker.run()  # returns after SIGTERM (installed because this is the main thread)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
