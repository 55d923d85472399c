#!/usr/bin/env python3
"""A job worker on echomq, in Python with the `valkey` client (or `redis`).

Consumers take jobs from {NAME}:pending, fail some of them (deterministically),
retry those with ECHO.RETRY under a jittered policy, and one promoter moves due
retries back with ECHO.PROMOTE (or, with --no-promoter, the server does it:
echomq.auto-promote). The server decides when a job has failed for
the last time: the same ECHO.RETRY call moves it to the dead set instead
(MAXATTEMPTS n DEAD dead), so the worker never counts attempts to decide when
to give up.

Two layouts of {NAME}:pending:
  stream (default)  a stream read through a consumer group: a taken job stays
                    pending in the group until acknowledged, in the same
                    MULTI/EXEC as its outcome; entries idle longer than the
                    lease are taken over with XAUTOCLAIM; an entry delivered
                    more than --max-deliveries times is failed unrun, so a job
                    that kills its workers ends in the dead set. At least once:
                    handlers must be idempotent.
  list              a list taken with BRPOP: simpler, but a job popped by a
                    worker that then dies is lost.

Same keys and options as examples/worker.rs, so workers in several languages
can share one queue:

    pip install valkey
    python3 examples/worker.py --url redis://127.0.0.1:6379/ --queue orders --jobs 100 --seed

Options (each also read from the environment variable in brackets):
  --url URL            [ECHOMQ_URL]  default redis://127.0.0.1:6379/
  --queue NAME         [ECHOMQ_QUEUE] default jobs; keys {NAME}:pending,
                       {NAME}:schedule, {NAME}:attempts, {NAME}:done (a set),
                       {NAME}:done-by, {NAME}:dead
  --layout L           [ECHOMQ_LAYOUT] stream (default) or list
  --group NAME         [ECHOMQ_GROUP] default workers: the consumer group
  --lease-ms MS        [ECHOMQ_LEASE_MS] default 30000: take over entries idle that long
  --max-deliveries K   [ECHOMQ_MAX_DELIVERIES] default 3: fail, unrun, an entry
                       taken over after K deliveries
  --jobs N             [ECHOMQ_JOBS] default 100: stop once N distinct jobs are done or dead
  --seed               first add job-0 .. job-(N-1) to {NAME}:pending
  --fail-first K       [ECHOMQ_FAIL_FIRST] default 2: job-<i> fails its first
                       i % (K + 1) attempts, then succeeds
  --policy P           [ECHOMQ_POLICY] default jitter:exponential:50:2000
  --max-attempts M     [ECHOMQ_MAX_ATTEMPTS] default 5: a job's M-th failure
                       sends it to {NAME}:dead instead of scheduling it again
  --work-ms MS         [ECHOMQ_WORK_MS] default 0: simulated work per job
  --crash-on JOB       [ECHOMQ_CRASH_ON] the process aborts when it takes that job
  --consumers C        [ECHOMQ_CONSUMERS] default 4 threads, consumers <name>-<i>
  --deadline-secs S    [ECHOMQ_DEADLINE_SECS] default 60: give up (exit 2)
  --name NAME          [ECHOMQ_WORKER_NAME] default python-<pid>
  --no-promoter        [ECHOMQ_NO_PROMOTER=1] run no promoter thread and rely on
                       the server promoting the queue itself; the server must
                       list the pair in echomq.auto-promote (e.g. CONFIG SET
                       echomq.auto-promote "{NAME}:schedule {NAME}:pending")
"""

import argparse
import os
import sys
import threading
import time

try:
    import valkey as client
except ImportError:  # redis-py speaks the same protocol
    try:
        import redis as client
    except ImportError:
        sys.exit("worker.py needs the 'valkey' (or 'redis') package: pip install valkey")

# The promoter sleeps at most this long, so retries scheduled meanwhile are
# picked up within this much of their fire time.
PROMOTER_CAP_S = 0.05
PROMOTE_LIMIT = 1000
# One entry per read or claim: an entry's idle time (what the lease is
# measured against) runs from its delivery, so entries waiting in a worker's
# own batch would age there; and a claimed batch would share the fate of a job
# that kills its worker.
BATCH = 1
BLOCK_MS = 200


def env(name, default):
    return os.environ.get(name, default)


def parse_args():
    p = argparse.ArgumentParser(description="echomq worker (see the module docstring)")
    p.add_argument("--url", default=env("ECHOMQ_URL", "redis://127.0.0.1:6379/"))
    p.add_argument("--queue", default=env("ECHOMQ_QUEUE", "jobs"))
    p.add_argument("--layout", choices=["stream", "list"], default=env("ECHOMQ_LAYOUT", "stream"))
    p.add_argument("--group", default=env("ECHOMQ_GROUP", "workers"))
    p.add_argument("--lease-ms", type=int, default=int(env("ECHOMQ_LEASE_MS", "30000")))
    p.add_argument("--max-deliveries", type=int, default=int(env("ECHOMQ_MAX_DELIVERIES", "3")))
    p.add_argument("--work-ms", type=int, default=int(env("ECHOMQ_WORK_MS", "0")))
    p.add_argument("--crash-on", default=env("ECHOMQ_CRASH_ON", ""))
    p.add_argument("--jobs", type=int, default=int(env("ECHOMQ_JOBS", "100")))
    p.add_argument("--seed", action="store_true")
    p.add_argument("--no-promoter", action="store_true", default=env("ECHOMQ_NO_PROMOTER", "") == "1")
    p.add_argument("--fail-first", type=int, default=int(env("ECHOMQ_FAIL_FIRST", "2")))
    p.add_argument("--policy", default=env("ECHOMQ_POLICY", "jitter:exponential:50:2000"))
    p.add_argument("--max-attempts", type=int, default=int(env("ECHOMQ_MAX_ATTEMPTS", "5")))
    p.add_argument("--consumers", type=int, default=int(env("ECHOMQ_CONSUMERS", "4")))
    p.add_argument("--deadline-secs", type=float, default=float(env("ECHOMQ_DEADLINE_SECS", "60")))
    p.add_argument("--name", default=env("ECHOMQ_WORKER_NAME", f"python-{os.getpid()}"))
    return p.parse_args()


class Keys:
    """Hash-tagged so a cluster keeps one queue in one slot."""

    def __init__(self, queue):
        key = lambda suffix: f"{{{queue}}}:{suffix}"
        self.pending = key("pending")
        self.schedule = key("schedule")
        self.attempts = key("attempts")
        self.done = key("done")
        self.done_by = key("done-by")
        self.dead = key("dead")


def failures(job, fail_first):
    """job-<i> fails its first i % (K + 1) attempts; other names never fail."""
    if job.startswith("job-") and job[4:].isdigit():
        return int(job[4:]) % (fail_first + 1)
    return 0


class Worker:
    def __init__(self, args):
        self.args = args
        self.keys = Keys(args.queue)
        # One pool, shared by the threads (the client is thread-safe).
        self.db = client.Redis.from_url(args.url, decode_responses=True)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.completed = 0
        self.retried = 0
        self.dead = 0
        self.taken_over = 0
        self.errors = []

    def work(self, job, attempt):
        """Runs job for its attempt-th take: True when it succeeded."""
        a = self.args
        if a.crash_on and job == a.crash_on:
            print(f"worker {a.name}: {job} kills its worker: aborting", file=sys.stderr, flush=True)
            os.abort()
        if a.work_ms > 0:
            time.sleep(a.work_ms / 1000.0)
        return attempt > failures(job, a.fail_first)

    def retry_args(self, job, attempt):
        """ECHO.RETRY: the server draws the jittered delay and schedules the
        retry in one step (the reply is the fire time), or, at the last
        attempt, moves the job to the dead set (-1)."""
        k, a = self.keys, self.args
        return ("ECHO.RETRY", k.schedule, job, a.policy, attempt,
                "MAXATTEMPTS", max(1, a.max_attempts), "DEAD", k.dead)

    def count_retry(self, fire_at_ms):
        with self.lock:
            if fire_at_ms == -1:
                self.dead += 1
            else:
                self.retried += 1

    def consume_list(self):
        k, a = self.keys, self.args
        while not self.stop.is_set():
            # A short timeout so the loop sees `stop`; the pop blocks in the server.
            popped = self.db.brpop([k.pending], timeout=BLOCK_MS / 1000.0)
            if popped is None:
                continue
            _, job = popped
            attempt = self.db.hincrby(k.attempts, job, 1)
            if not self.work(job, attempt):
                self.count_retry(self.db.execute_command(*self.retry_args(job, attempt)))
            else:
                pipe = self.db.pipeline(transaction=True)
                pipe.sadd(k.done, job)
                pipe.hincrby(k.done_by, a.name, 1)
                pipe.execute()
                with self.lock:
                    self.completed += 1

    def consume_stream(self, consumer):
        k, a = self.keys, self.args
        next_claim = 0.0  # take over at once what a dead worker left
        while not self.stop.is_set():
            if time.monotonic() >= next_claim:
                self.take_over(consumer)
                next_claim = time.monotonic() + a.lease_ms / 2000.0
            read = self.db.xreadgroup(a.group, consumer, {k.pending: ">"}, count=BATCH, block=BLOCK_MS)
            for _, entries in read or []:
                for entry_id, fields in entries:
                    self.run_entry(entry_id, (fields or {}).get("job"), False)

    def take_over(self, consumer):
        """XAUTOCLAIM: entries idle longer than the lease change owner to this
        consumer atomically, so two consumers never take over the same one."""
        k, a = self.keys, self.args
        cursor = "0-0"
        while not self.stop.is_set():
            reply = self.db.xautoclaim(k.pending, a.group, consumer, a.lease_ms, start_id=cursor, count=BATCH)
            cursor, claimed = reply[0], reply[1]
            for entry in claimed:
                if not entry:
                    continue
                entry_id, fields = entry[0], entry[1] or {}
                job = fields.get("job")
                with self.lock:
                    self.taken_over += 1
                self.run_entry(entry_id, job, True)
            if cursor == "0-0":
                return

    def run_entry(self, entry_id, job, taken_over):
        k, a = self.keys, self.args
        if job is None:  # its data is gone: only acknowledge it
            self.db.xack(k.pending, a.group, entry_id)
            return
        attempt = self.db.hincrby(k.attempts, job, 1)
        if taken_over and self.deliveries(entry_id) > a.max_deliveries:
            ok = False  # the poison bound: failed without being run again
        else:
            ok = self.work(job, attempt)
        # The outcome and the acknowledgement are one step: the job is never
        # both scheduled and pending, nor neither.
        pipe = self.db.pipeline(transaction=True)
        if ok:
            pipe.sadd(k.done, job)
            pipe.hincrby(k.done_by, a.name, 1)
        else:
            pipe.execute_command(*self.retry_args(job, attempt))
        pipe.xack(k.pending, a.group, entry_id)
        pipe.xdel(k.pending, entry_id)
        replies = pipe.execute()
        if ok:
            with self.lock:
                self.completed += 1
        else:
            self.count_retry(replies[0])

    def deliveries(self, entry_id):
        """How many times the group has delivered entry_id (XPENDING)."""
        k, a = self.keys, self.args
        rows = self.db.xpending_range(k.pending, a.group, min=entry_id, max=entry_id, count=1)
        return rows[0]["times_delivered"] if rows else 0

    def promote(self):
        k = self.keys
        while not self.stop.is_set():
            moved = self.db.execute_command("ECHO.PROMOTE", k.schedule, k.pending, "LIMIT", PROMOTE_LIMIT)
            if moved == PROMOTE_LIMIT:
                continue  # more may be due already
            pipe = self.db.pipeline(transaction=False)
            pipe.zrange(k.schedule, 0, 0, withscores=True)
            pipe.time()
            nxt, (secs, micros) = pipe.execute()
            now_ms = secs * 1000 + micros // 1000
            if nxt:
                wait = min(max(nxt[0][1] - now_ms, 0) / 1000.0, PROMOTER_CAP_S)
            else:
                wait = PROMOTER_CAP_S
            # Sleep by the server's clock, but wake at once when told to stop.
            self.stop.wait(wait)

    def finished(self):
        """How many distinct jobs are done and how many dead, in one round trip."""
        pipe = self.db.pipeline(transaction=False)
        pipe.scard(self.keys.done)
        pipe.zcard(self.keys.dead)
        return pipe.execute()

    def guarded(self, fn):
        def run():
            try:
                fn()
            except Exception as e:  # report it and stop the worker
                self.errors.append(e)
                self.stop.set()

        return run

    def run(self):
        a, k = self.args, self.keys
        if a.layout == "stream":
            try:  # the protocol's step 1: the group, before any entry
                self.db.xgroup_create(k.pending, a.group, id="$", mkstream=True)
            except client.ResponseError as e:
                if "BUSYGROUP" not in str(e):
                    raise
        if a.seed and a.jobs > 0:
            jobs = [f"job-{i}" for i in range(a.jobs)]
            if a.layout == "stream":
                pipe = self.db.pipeline(transaction=False)
                for job in jobs:
                    pipe.xadd(k.pending, {"job": job})
                pipe.execute()
            else:
                self.db.lpush(k.pending, *jobs)
        consumers = range(max(1, a.consumers))
        if a.layout == "stream":
            targets = [lambda i=i: self.consume_stream(f"{a.name}-{i}") for i in consumers]
        else:
            targets = [self.consume_list for _ in consumers]
        threads = [threading.Thread(target=self.guarded(t)) for t in targets]
        if not a.no_promoter:
            threads.append(threading.Thread(target=self.guarded(self.promote)))
        for t in threads:
            t.start()
        started = time.monotonic()
        all_done = False
        # Every worker sharing the queue stops once each job is done or dead.
        while time.monotonic() - started < a.deadline_secs and not self.stop.is_set():
            done, dead = self.finished()
            if done + dead >= a.jobs:
                all_done = True
                break
            time.sleep(0.02)
        self.stop.set()
        for t in threads:
            t.join()
        if self.errors:
            print(f"worker {a.name}: {self.errors[0]!r}", file=sys.stderr)
            return 1
        done, dead = self.finished()
        print(
            f"worker {a.name}: completed {self.completed} here, retried {self.retried} here, "
            f"dead-lettered {self.dead} here, took over {self.taken_over} here; "
            f"{done}/{a.jobs} done and {dead} dead on queue '{a.queue}' after {time.monotonic() - started:.2f}s",
            flush=True,
        )
        if not all_done:
            print(
                f"worker {a.name}: deadline of {a.deadline_secs}s reached with {done}/{a.jobs} done and {dead} dead",
                file=sys.stderr,
            )
            return 2
        return 0


if __name__ == "__main__":
    sys.exit(Worker(parse_args()).run())
