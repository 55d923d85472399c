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

A dependency that answers "overloaded, retry after N ms" (simulated with
--overload-every K --retry-after-ms N) is answered with ECHO.HOLD
{NAME}:schedule N before the job is failed as usual: one worker's hold stops
the release of due jobs to every worker. --seed --seed-delay-ms D gives each
seeded job a delayed first run with ECHO.SCHEDULE, as a producer would.

Same keys and options as examples/worker.rs, so workers in several languages
can share one queue:

    pip install valkey
    python3 examples/worker.py --url redis://127.0.0.1:6379/ --queue orders --jobs 100 --fresh --seed

Options (each also read from the environment variable in brackets):
  --url URL[,URL...]   [ECHOMQ_URL] default redis://127.0.0.1:6379/; several
                       addresses, comma-separated: the worker uses whichever
                       reports itself primary (ROLE) and moves to the new one
                       after a failover; in a cluster it follows MOVED
  --reconnect-secs S   [ECHOMQ_RECONNECT_SECS] default 30: retry commands
                       refused by a failover (READONLY, UNBLOCKED, MOVED,
                       LOADING, ...) or a lost connection, with a short
                       backoff, for at most S seconds without a successful
                       command, then give up (exit 1); 0: give up at once
  --queue NAME         [ECHOMQ_QUEUE] default jobs; keys {NAME}:pending,
                       {NAME}:schedule, {NAME}:attempts, {NAME}:done (a set),
                       {NAME}:done-by, {NAME}:dead
  --fresh              [ECHOMQ_FRESH=1] first delete those six keys: start the
                       queue afresh (what a second --seed run needs)
  --seed               add job-0 .. job-(N-1) to {NAME}:pending first
  --seed-delay-ms D    [ECHOMQ_SEED_DELAY_MS] default 0: with --seed, schedule
                       each job's first run D ms ahead instead, with
                       ECHO.SCHEDULE {NAME}:schedule <job> D (the promoter, or
                       the server's own promotion, moves it when due)
  --layout L           [ECHOMQ_LAYOUT] stream (default) or list
  --group NAME         [ECHOMQ_GROUP] default workers: the consumer group
  --lease-ms MS        [ECHOMQ_LEASE_MS] default 30000: take over entries idle
                       that long (choose it above the longest job)
  --max-deliveries K   [ECHOMQ_MAX_DELIVERIES] default 3: fail, unrun, an entry
                       taken over after K deliveries
  --jobs N             [ECHOMQ_JOBS] default 100: stop once N distinct jobs are
                       done or dead
  --fail-first K       [ECHOMQ_FAIL_FIRST] default 2: job-<i> fails its first
                       i % (K + 1) attempts, then succeeds
  --policy P           [ECHOMQ_POLICY] default jitter:exponential:50:2000
  --max-attempts M     [ECHOMQ_MAX_ATTEMPTS] default 5: a job's M-th failure
                       sends it to {NAME}:dead instead of scheduling it again
  --work-ms MS         [ECHOMQ_WORK_MS] default 0: simulated work per job
  --overload-every K   [ECHOMQ_OVERLOAD_EVERY] default 0 (never): a job's run
                       whose attempt number is a multiple of K answers
                       "overloaded, retry after --retry-after-ms" (before the
                       planned failures): the worker holds the schedule with
                       ECHO.HOLD {NAME}:schedule <ms>, so no worker gets more
                       jobs until then, and fails the job as usual
  --retry-after-ms MS  [ECHOMQ_RETRY_AFTER_MS] default 1000: the wait an
                       overloaded answer asks for
  --crash-on JOB       [ECHOMQ_CRASH_ON] the process aborts when it takes that job
  --consumers C        [ECHOMQ_CONSUMERS] default 4 threads, consumers <name>-<i>
  --deadline-secs S    [ECHOMQ_DEADLINE_SECS] default 60: give up (exit 2)
  --name NAME          [ECHOMQ_WORKER_NAME] default python-<pid>
  --no-promoter        [ECHOMQ_NO_PROMOTER=1] run no promoter and rely on the
                       server promoting the queue itself; the server must list
                       the pair in echomq.auto-promote (e.g. CONFIG SET
                       echomq.auto-promote "{NAME}:schedule {NAME}:pending")
  --log-takes          [ECHOMQ_LOG_TAKES=1] print "took <entry-id> <job>" on
                       stdout for each stream entry a consumer receives
                       (XREADGROUP or an XAUTOCLAIM takeover)
  -h, --help           this text

Through a failover, a command refused because the server is no longer the
primary (READONLY, UNBLOCKED, MASTERDOWN), is loading (LOADING), or cannot be
reached is retried after a short backoff (20 ms doubling to 1 s) on whichever
address reports itself primary (ROLE; a replica's ROLE names its primary,
which is tried too); a cluster's MOVED is followed to the slot's new owner,
ASK, TRYAGAIN and CLUSTERDOWN retried. A job's outcome refused by the old
primary is written on the new one only while its entry is still this
consumer's: not when the write went through and only the reply was lost, nor
when another consumer took the entry over meanwhile (it settles it). So a job
runs again only if it was in flight at the failover, and no completion is
counted twice.

Exit status: 0 when every job is done or dead, 2 at the deadline, 1 on an error.
"""

import argparse
import os
import re
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
# How long the promoter pauses when a job is due yet stayed in the schedule: a
# hold (ECHO.HOLD) or a release limit kept it there, and asking again at once
# would only spin.
PROMOTER_HELD_S = 0.01
PROMOTE_LIMIT = 1000
# One entry per read or claim: an entry's idle time (what the lease is
# measured against) runs from its delivery, so entries waiting in a worker's
# own batch would age there; and a claimed batch would share the fate of a job
# that kills its worker.
BATCH = 1
BLOCK_MS = 200
BACKOFF_FIRST_S = 0.02
BACKOFF_MAX_S = 1.0


def env(name, default):
    return os.environ.get(name, default)


def parse_args():
    p = argparse.ArgumentParser(
        usage="%(prog)s [options]", description=__doc__, add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-h", "--help", action="help", help=argparse.SUPPRESS)
    p.add_argument("--url", default=env("ECHOMQ_URL", "redis://127.0.0.1:6379/"))
    p.add_argument("--reconnect-secs", type=float, default=float(env("ECHOMQ_RECONNECT_SECS", "30")))
    p.add_argument("--fresh", action="store_true", default=env("ECHOMQ_FRESH", "") == "1")
    p.add_argument("--queue", default=env("ECHOMQ_QUEUE", "jobs"))
    p.add_argument("--layout", choices=["stream", "list"], default=env("ECHOMQ_LAYOUT", "stream"))
    p.add_argument("--group", default=env("ECHOMQ_GROUP", "workers"))
    p.add_argument("--lease-ms", type=int, default=int(env("ECHOMQ_LEASE_MS", "30000")))
    p.add_argument("--max-deliveries", type=int, default=int(env("ECHOMQ_MAX_DELIVERIES", "3")))
    p.add_argument("--work-ms", type=int, default=int(env("ECHOMQ_WORK_MS", "0")))
    p.add_argument("--overload-every", type=int, default=int(env("ECHOMQ_OVERLOAD_EVERY", "0")))
    p.add_argument("--retry-after-ms", type=int, default=int(env("ECHOMQ_RETRY_AFTER_MS", "1000")))
    p.add_argument("--seed-delay-ms", type=int, default=int(env("ECHOMQ_SEED_DELAY_MS", "0")))
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
    p.add_argument("--log-takes", action="store_true", default=env("ECHOMQ_LOG_TAKES", "") == "1")
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


# Errors a failover (or a resharding) causes: retried on the primary of now.
RETRIED_CODES = ("READONLY", "UNBLOCKED", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "ASK")


def trouble(e):
    """("moved", "host:port"), ("failover", None), or None for a real error."""
    exc = client.exceptions
    if isinstance(e, (exc.ReadOnlyError, exc.BusyLoadingError, exc.ConnectionError, exc.TimeoutError)):
        return ("failover", None)
    if isinstance(e, exc.ResponseError):
        # A pipeline prefixes "Command # n (...) of pipeline caused error: ".
        msg = str(e).split("caused error: ")[-1]
        moved = re.match(r"MOVED \d+ (\S+)", msg)
        if moved:
            return ("moved", moved.group(1))
        if msg.split(" ", 1)[0] in RETRIED_CODES:
            return ("failover", None)
    return None


def url_with_addr(url, addr):
    """url with its host:port replaced by addr (scheme, credentials, database kept)."""
    scheme, _, rest = url.partition("://") if "://" in url else ("redis", "", url)
    authority, slash, path = rest.partition("/")
    creds = authority.rpartition("@")[0]
    return f"{scheme}://{creds + '@' if creds else ''}{addr}{slash}{path}"


def addr_of(url):
    rest = url.partition("://")[2] or url
    return rest.partition("/")[0].rpartition("@")[2]


class Link:
    """One connection to the queue's primary that outlives failovers: call(op)
    runs op(db, tries) and, when the server refuses it for a failover or the
    connection is lost, finds the primary again and reruns it, for at most
    --reconnect-secs without a success."""

    def __init__(self, args, who):
        self.who = who
        self.seeds = [u.strip() for u in args.url.split(",") if u.strip()]
        if not self.seeds:
            raise ValueError("--url: no address")
        self.current = self.seeds[0]
        self.patience = args.reconnect_secs
        self.db = None

    @staticmethod
    def open(url):
        # A command may wait out a failover's pause; a dead peer must not hang us.
        return client.Redis.from_url(url, decode_responses=True, socket_connect_timeout=2, socket_timeout=10)

    def close(self):
        if self.db is not None:
            try:
                self.db.close()
            except Exception:
                pass
            self.db = None

    def call(self, op):
        outage, backoff, tries = None, BACKOFF_FIRST_S, 0
        while True:
            try:
                if self.db is None:
                    self.db = Link.open(self.current)
                value = op(self.db, tries)
                if tries:
                    print(f"worker {self.who}: going on with {self.current}", file=sys.stderr, flush=True)
                return value
            except Exception as e:
                what = trouble(e)
                if what is None:
                    raise
                now = time.monotonic()
                outage = outage or now
                if now - outage >= self.patience:
                    raise RuntimeError(
                        f"no primary for {self.patience}s (--reconnect-secs) on {','.join(self.seeds)}: {e!r}"
                    ) from e
                if not tries:
                    print(f"worker {self.who}: {e!r} (on {self.current}): retrying", file=sys.stderr, flush=True)
                self.close()
                tries += 1
                if what[0] == "moved":
                    self.current = url_with_addr(self.current, what[1])
                else:
                    time.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                    self.find_primary()

    def find_primary(self):
        """Points current at the first address whose ROLE is master: the current
        one, the primary a replica names, then the seeds; else keeps it (a
        cluster replica redirects with MOVED)."""
        candidates = [self.current] + self.seeds
        i = 0
        while i < len(candidates) and i < 16:
            url = candidates[i]
            i += 1
            db = Link.open(url)
            try:
                role = db.execute_command("ROLE")
            except Exception:
                db.close()
                continue
            if role and role[0] == "master":
                self.current, self.db = url, db
                return
            db.close()
            if role and role[0] == "slave" and len(role) > 2:
                primary = url_with_addr(url, f"{role[1]}:{role[2]}")
                if all(addr_of(c) != addr_of(primary) for c in candidates):
                    candidates.insert(i, primary)


def wrong_layout(pending, kind):
    """Why a stream worker cannot use pending, and what to run."""
    return (
        f"{pending} is a {kind}, not a stream (XGROUP CREATE: WRONGTYPE): the stream workers "
        f"need a stream with the group; a list is left by --layout list workers, or by a "
        f"promotion (ECHO.PROMOTE or echomq.auto-promote) into {pending} before any stream "
        f"worker created it. Run the worker with --fresh to start the queue afresh (it "
        f"deletes the queue's keys), or DEL {pending} to drop only what it holds"
    )


class Worker:
    def __init__(self, args):
        self.args = args
        self.keys = Keys(args.queue)
        # Each thread has its own Link; this one is the main thread's.
        self.link = Link(args, args.name)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.completed = 0
        self.retried = 0
        self.dead = 0
        self.held = 0
        self.taken_over = 0
        self.errors = []

    def work(self, job, attempt):
        """Runs job for its attempt-th take: "done", "failed", or "overloaded"
        (every --overload-every-th attempt: retry after --retry-after-ms)."""
        a = self.args
        if a.crash_on and job == a.crash_on:
            print(f"worker {a.name}: {job} kills its worker: aborting", file=sys.stderr, flush=True)
            os.abort()
        if a.work_ms > 0:
            time.sleep(a.work_ms / 1000.0)
        if a.overload_every > 0 and attempt % a.overload_every == 0:
            return "overloaded"
        return "done" if attempt > failures(job, a.fail_first) else "failed"

    def hold(self, link):
        """ECHO.HOLD schedule ms: nothing leaves the schedule, for any worker,
        before the server's now + ms (a longer hold in force is kept)."""
        link.call(lambda db, _: db.execute_command("ECHO.HOLD", self.keys.schedule, self.args.retry_after_ms))
        with self.lock:
            self.held += 1

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

    def consume_list(self, consumer):
        k, a = self.keys, self.args
        link = Link(a, consumer)
        while not self.stop.is_set():
            # A short timeout so the loop sees `stop`; the pop blocks in the server.
            popped = link.call(lambda db, _: db.brpop([k.pending], timeout=BLOCK_MS / 1000.0))
            if popped is None:
                continue
            _, job = popped
            attempt = link.call(lambda db, _: db.hincrby(k.attempts, job, 1))
            outcome = self.work(job, attempt)
            if outcome == "overloaded":
                self.hold(link)
            if outcome != "done":
                self.count_retry(link.call(lambda db, _: db.execute_command(*self.retry_args(job, attempt))))
            else:
                def done(db, _):
                    pipe = db.pipeline(transaction=True)
                    pipe.sadd(k.done, job)
                    pipe.hincrby(k.done_by, a.name, 1)
                    return pipe.execute()

                link.call(done)
                with self.lock:
                    self.completed += 1

    def consume_stream(self, consumer):
        k, a = self.keys, self.args
        link = Link(a, consumer)
        next_claim = 0.0  # take over at once what a dead worker left
        while not self.stop.is_set():
            if time.monotonic() >= next_claim:
                self.take_over(link, consumer)
                next_claim = time.monotonic() + a.lease_ms / 2000.0
            # A read whose reply a failover lost leaves its entry delivered to
            # this consumer: the lease brings it back (take_over).
            read = link.call(
                lambda db, _: db.xreadgroup(a.group, consumer, {k.pending: ">"}, count=BATCH, block=BLOCK_MS))
            for _, entries in read or []:
                for entry_id, fields in entries:
                    self.run_entry(link, consumer, entry_id, (fields or {}).get("job"), False)

    def take_over(self, link, consumer):
        """XAUTOCLAIM: entries idle longer than the lease change owner to this
        consumer atomically, so two consumers never take over the same one."""
        k, a = self.keys, self.args
        cursor = "0-0"
        while not self.stop.is_set():
            reply = link.call(lambda db, _: db.xautoclaim(
                k.pending, a.group, consumer, a.lease_ms, start_id=cursor, count=BATCH))
            cursor, claimed = reply[0], reply[1]
            for entry in claimed:
                if not entry:
                    continue
                entry_id, fields = entry[0], entry[1] or {}
                job = fields.get("job")
                with self.lock:
                    self.taken_over += 1
                self.run_entry(link, consumer, entry_id, job, True)
            if cursor == "0-0":
                return

    def run_entry(self, link, consumer, entry_id, job, taken_over):
        k, a = self.keys, self.args
        if a.log_takes and job is not None:
            with self.lock:  # one whole line at a time, flushed
                print(f"took {entry_id} {job}", flush=True)
        if job is None:  # its data is gone: only acknowledge it
            link.call(lambda db, _: db.xack(k.pending, a.group, entry_id))
            return
        attempt = link.call(lambda db, _: db.hincrby(k.attempts, job, 1))
        if taken_over and link.call(lambda db, _: self.pending_row(db, entry_id))["times_delivered"] > a.max_deliveries:
            outcome = "failed"  # the poison bound: failed without being run again
        else:
            outcome = self.work(job, attempt)
        if outcome == "overloaded":
            # Held first, so the retry below is not released before the wait.
            self.hold(link)
        ok = outcome == "done"

        def settle(db, tries):
            # After a failure (a failover refused the step, or the connection
            # went away with it), the step is written only while the entry is
            # still this consumer's: acknowledged means the step went through
            # before the reply was lost; another owner took it over and settles it.
            if tries and self.pending_row(db, entry_id)["consumer"] != consumer:
                return None
            # The outcome and the acknowledgement are one step: the job is
            # never both scheduled and pending, nor neither.
            pipe = db.pipeline(transaction=True)
            if ok:
                pipe.sadd(k.done, job)
                pipe.hincrby(k.done_by, a.name, 1)
            else:
                pipe.execute_command(*self.retry_args(job, attempt))
            pipe.xack(k.pending, a.group, entry_id)
            pipe.xdel(k.pending, entry_id)
            return pipe.execute()

        replies = link.call(settle)
        if replies is None:
            print(f"worker {consumer}: {job} ({entry_id}) was settled elsewhere meanwhile: "
                  "its outcome here is dropped", file=sys.stderr, flush=True)
        elif ok:
            with self.lock:
                self.completed += 1
        else:
            self.count_retry(replies[0])

    def pending_row(self, db, entry_id):
        """How many times the group delivered entry_id, and to whom (XPENDING)."""
        k, a = self.keys, self.args
        rows = db.xpending_range(k.pending, a.group, min=entry_id, max=entry_id, count=1)
        return rows[0] if rows else {"times_delivered": 0, "consumer": None}

    def promote(self):
        k = self.keys
        link = Link(self.args, f"{self.args.name}-promoter")
        while not self.stop.is_set():
            moved = link.call(
                lambda db, _: db.execute_command("ECHO.PROMOTE", k.schedule, k.pending, "LIMIT", PROMOTE_LIMIT))
            if moved == PROMOTE_LIMIT:
                continue  # more may be due already

            def next_due(db, _):
                pipe = db.pipeline(transaction=False)
                pipe.zrange(k.schedule, 0, 0, withscores=True)
                pipe.time()
                return pipe.execute()

            nxt, (secs, micros) = link.call(next_due)
            now_ms = secs * 1000 + micros // 1000
            if nxt:
                due_in_ms = nxt[0][1] - now_ms
                wait = PROMOTER_HELD_S if due_in_ms <= 0 else min(due_in_ms / 1000.0, PROMOTER_CAP_S)
            else:
                wait = PROMOTER_CAP_S
            # Sleep by the server's clock, but wake at once when told to stop.
            self.stop.wait(wait)

    def finished(self):
        """How many distinct jobs are done and how many dead, in one round trip."""
        def counts(db, _):
            pipe = db.pipeline(transaction=False)
            pipe.scard(self.keys.done)
            pipe.zcard(self.keys.dead)
            return pipe.execute()

        return self.link.call(counts)

    def guarded(self, fn):
        def run():
            try:
                fn()
            except Exception as e:  # report it and stop the worker
                self.errors.append(e)
                self.stop.set()

        return run

    def create_group(self):
        """The protocol's step 1: the stream and its group, before any entry;
        a group that exists already is fine, a list there is explained."""
        k, a = self.keys, self.args

        def create(db, _):
            try:
                # At 0, not $: entries a producer added before the group existed
                # are delivered too.
                db.xgroup_create(k.pending, a.group, id="0", mkstream=True)
            except client.ResponseError as e:
                if "BUSYGROUP" in str(e):
                    return None
                if str(e).startswith("WRONGTYPE"):
                    return db.type(k.pending)
                raise
            return None

        kind = self.link.call(create)
        if kind is not None:
            raise RuntimeError(wrong_layout(k.pending, kind))

    def run(self):
        a, k = self.args, self.keys
        try:
            if a.fresh:
                self.link.call(lambda db, _: db.delete(k.pending, k.schedule, k.attempts, k.done, k.done_by, k.dead))
            if a.layout == "stream":
                self.create_group()
            if a.seed and a.jobs > 0 and a.seed_delay_ms > 0:
                jobs = [f"job-{i}" for i in range(a.jobs)]

                def schedule(db, _):
                    # A delayed first run: ECHO.SCHEDULE (not a failure, not a
                    # retry), all or nothing, so a retry cannot seed twice.
                    pipe = db.pipeline(transaction=True)
                    for job in jobs:
                        pipe.execute_command("ECHO.SCHEDULE", k.schedule, job, a.seed_delay_ms)
                    return pipe.execute()

                fire_at = self.link.call(schedule)
                print(f"worker {a.name}: scheduled job-0 .. job-{a.jobs - 1} with ECHO.SCHEDULE, "
                      f"due at {min(fire_at)} .. {max(fire_at)} (server ms)", flush=True)
            elif a.seed and a.jobs > 0:
                jobs = [f"job-{i}" for i in range(a.jobs)]

                def seed(db, _):
                    # All or nothing, so a retry after a refusal cannot seed twice.
                    pipe = db.pipeline(transaction=True)
                    if a.layout == "stream":
                        for job in jobs:
                            pipe.xadd(k.pending, {"job": job})
                    else:
                        pipe.lpush(k.pending, *jobs)
                    pipe.execute()

                self.link.call(seed)
        except Exception as e:
            print(f"worker: {e}", file=sys.stderr)
            return 1
        consumers = [f"{a.name}-{i}" for i in range(max(1, a.consumers))]
        if a.layout == "stream":
            targets = [lambda c=c: self.consume_stream(c) for c in consumers]
        else:
            targets = [lambda c=c: self.consume_list(c) for c in consumers]
        threads = [threading.Thread(target=self.guarded(t)) for t in targets]
        if not a.no_promoter:
            threads.append(threading.Thread(target=self.guarded(self.promote)))
        for t in threads:
            t.start()
        started = time.monotonic()
        all_done = False
        # Every worker sharing the queue stops once each job is done or dead.
        while time.monotonic() - started < a.deadline_secs and not self.stop.is_set():
            try:
                done, dead = self.finished()
            except Exception as e:
                self.errors.append(e)
                break
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
            f"dead-lettered {self.dead} here, held {self.held} here, took over {self.taken_over} here; "
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
