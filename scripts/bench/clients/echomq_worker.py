"""The echomq Python worker (clients/python), driven for the `clients` section
of make bench (scripts/bench/clients.py says how the section measures). Run
with the python of a venv where clients/python is installed:

    python echomq_worker.py --url redis://127.0.0.1:PORT/ --queue NAME --jobs N
                            [--concurrency 50] [--fail-once]

Speaks the drivers' line protocol on stdin/stdout (the same in every driver):
prints {"event":"ready"} once connected, then on the line `add` adds N jobs
with one queue.add_many (payload {"i":<i>}) and prints {"event":"added",...};
on the line `work` starts one Worker (concurrency --concurrency, an empty
handler; with --fail-once the first run of every job raises, retried under
backoff fixed:0 with max_attempts 2), and prints {"event":"done",...} when
every job has succeeded and the queue is seen empty; then closes and exits 0.
"""

import argparse
import json
import sys
import threading
import time

import valkey

from echomq import Queue, Worker


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def expect(word):
    line = sys.stdin.readline()
    if line.strip() != word:
        raise SystemExit("expected %r on stdin, got %r" % (word, line))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--jobs", type=int, required=True)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--fail-once", action="store_true")
    a = ap.parse_args()
    n = a.jobs

    client = valkey.Valkey.from_url(a.url)
    queue = Queue(client, a.queue)
    client.ping()
    say({"event": "ready"})

    expect("add")
    payloads = [json.dumps({"i": i}, separators=(",", ":")).encode() for i in range(n)]
    t0 = time.perf_counter()
    queue.add_many(payloads)
    say({"event": "added", "jobs": n, "seconds": time.perf_counter() - t0})

    expect("work")
    lock = threading.Lock()
    finished = threading.Event()
    seen = set()
    st = {"succeeded": 0, "failed": 0, "runs": 0, "first": None}

    def handler(job):
        with lock:
            st["runs"] += 1
            if a.fail_once and job.id not in seen:
                seen.add(job.id)
                st["failed"] += 1
                fail = True
            else:
                fail = False
                st["succeeded"] += 1
                if st["first"] is None:
                    st["first"] = time.perf_counter()
                if st["succeeded"] == n:
                    finished.set()
        if fail:
            raise RuntimeError("fails once")

    t0 = time.perf_counter()
    worker = Worker(queue, handler, concurrency=a.concurrency, backoff="fixed:0", max_attempts=2)
    errors = []

    def run():
        try:
            worker.run()
        except BaseException as e:  # reported below, the driver fails
            errors.append(e)
            finished.set()

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    finished.wait()
    if errors:
        raise errors[0]
    # The last handler has returned; its outcome is written once the queue holds nothing.
    while True:
        c = queue.counts()
        if c["scheduled"] + c["due"] + c["pending"] + c["in_flight"] + c["dead"] == 0:
            break
        time.sleep(0.001)
    t_last = time.perf_counter()
    say({"event": "done", "jobs": n, "succeeded": st["succeeded"], "failed": st["failed"],
         "runs": st["runs"], "seconds": t_last - t0, "first_to_last": t_last - st["first"]})
    worker.close()
    runner.join(timeout=30)
    client.close()


if __name__ == "__main__":
    main()
