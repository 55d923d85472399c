"""Worker: runs a handler for each job of a queue, `concurrency` at a time, on threads."""

from __future__ import annotations

import logging
import queue as _queue
import signal
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

import valkey
from valkey.exceptions import BusyLoadingError, ReadOnlyError
from valkey.exceptions import ConnectionError as _ConnError
from valkey.exceptions import ResponseError
from valkey.exceptions import TimeoutError as _TimeoutError

from ._common import consumer_name, error_text, job_group_bytes, make_stream, server_ms, to_str, unwrap_payload
from ._route import describe, redirected
from ._protocol import (
    DEFAULT_BACKOFF,
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_DELIVERIES,
    DEFAULT_SHUTDOWN_TIMEOUT_MS,
    FAIL,
    GROUP,
    HAND_BACK,
    MAX_HOLD_MS,
    PROMOTE_LIMIT,
    SUCCEED,
    SUCCESS_BATCH,
)

if TYPE_CHECKING:  # queue.py imports this module: the annotation only, no import cycle
    from .queue import Queue

log = logging.getLogger("echomq")

HOLD_RECHECK_S = 1.0  # a worker waiting out a hold asks again this often: a lifted hold is seen
_TRANSIENT = (_ConnError, _TimeoutError, OSError)
_STALE_CODES = ("READONLY", "UNBLOCKED", "MASTERDOWN", "LOADING")
REDIRECT_PAUSE_S = 0.1  # the worker's loop after a MOVED, ASK, TRYAGAIN or CLUSTERDOWN: map refreshed


def _stale(exc: BaseException) -> bool:
    """A refusal that says where the connection leads, not what was sent: the server is a replica
    now (READONLY for a write, UNBLOCKED for a read blocked when it turned), a replica cut from
    its primary (MASTERDOWN), or loading its data (LOADING). Behind a primary endpoint (a DNS
    name that moves at a failover) the pools' connections opened before still reach the old
    primary: the worker drops them (``_reconnect``), so the next command goes through the
    endpoint again, and sends the command again. A refused write wrote nothing (the server
    refuses it before it runs: a script at its first write, which comes after its checks), and
    every write of the protocol is safe to resend."""
    if isinstance(exc, (ReadOnlyError, BusyLoadingError)):
        return True
    if not isinstance(exc, ResponseError):
        return False
    text = str(exc)
    # A pipeline's error is prefixed with the command it answered.
    text = text.split("caused error: ", 1)[-1]
    return text.startswith(_STALE_CODES)


def _resend(exc: BaseException) -> bool:
    """Worth sending again: the connection was lost, or the refusal says where the command went
    (``_stale``) or that it ran nowhere (a cluster's redirection, ``redirected``). Every write of
    the protocol is safe to resend (docs/clients.md)."""
    return isinstance(exc, _TRANSIENT) or _stale(exc) or redirected(exc)

class RetryAfter(Exception):
    """Raise from a handler when a dependency asked to wait (429/503 with Retry-After): the job
    fails as usual and the queue is held for ``ms`` (the server releases none of its jobs, and no
    worker starts one). With ``group`` (``RetryAfter(ms, group=job.group)``) only that group is
    held: the other groups' jobs go on, and the held group's wait in the schedule until the hold
    ends. ``group=None`` (the default, and ``job.group`` of a job added without one) holds the
    whole queue: the ungrouped jobs have no name a hold could take. A group the server would
    refuse (not 1..=1024 bytes) raises here, so the job fails with that error and nothing is
    held."""

    def __init__(self, ms: int, message: Optional[str] = None, *, group: Optional[str] = None) -> None:
        self.ms = max(0, int(ms))
        self.group = group
        self._group = job_group_bytes(group)
        super().__init__(message or "retry after %d ms" % self.ms)


@dataclass(frozen=True)
class Job:
    """What a handler gets: the id, the payload (bytes), the attempt number (1 = first run) and
    ``entry_id``, the pending entry that delivered this run, for logs (a job retried or taken over
    runs from another entry each time). ``entry_id`` is the last field, with a default, so a Job
    built positionally with three fields (as in a handler's own tests) still works."""

    id: str
    payload: bytes
    attempt: int
    entry_id: str = ""
    #: the job's group (``add(..., group=...)``), None for a job without one
    group: Optional[str] = None


class _Pool:
    """A fixed pool of daemon threads whose tasks return concurrent.futures.Future objects.

    Daemon threads, unlike concurrent.futures.ThreadPoolExecutor's, do not keep the process alive
    at exit: a handler that outlives the shutdown timeout is abandoned (its job stays in the group
    and another worker takes it over after the lease)."""

    def __init__(self, size: int, name: str) -> None:
        self._tasks: "_queue.SimpleQueue" = _queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name="%s-%d" % (name, i), daemon=True) for i in range(size)
        ]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            item = self._tasks.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - reported through the future
                future.set_exception(exc)

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        self._tasks.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)


def _fields_job(fields) -> Optional[bytes]:
    if not fields:
        return None
    return fields.get(b"job")


def _read_entries(reply) -> List[Tuple[bytes, Optional[bytes]]]:
    """XREADGROUP's reply as valkey-py parses it (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    streams = reply.values() if isinstance(reply, dict) else [r[1] for r in reply]
    out = []
    for messages in streams:
        if messages and isinstance(messages[0], list):  # RESP3: [[(id, fields), ...]]
            messages = messages[0]
        for eid, fields in messages or []:
            if eid is not None:
                out.append((eid, _fields_job(fields)))
    return out


def _held_until(limits) -> int:
    if isinstance(limits, dict):
        value = limits.get(b"held-until-ms", limits.get("held-until-ms"))
    else:
        value = None
        for i in range(0, len(limits) - 1, 2):
            if limits[i] in (b"held-until-ms", "held-until-ms"):
                value = limits[i + 1]
                break
    return int(value or 0)


class _Shard:
    """One sub-queue a worker takes from (the queue itself when unsharded): its keys, where its
    commands go, its blocking reads' client, its takeover cursor, whether the worker promotes it."""

    __slots__ = ("index", "keys", "route", "reader", "reader_node", "claim_cursor", "self_promote", "next_takeover")

    def __init__(self, index: int, part) -> None:
        self.index = index
        self.keys = part.keys
        self.route = part._route
        self.reader = None  # the blocking reads' client, once made
        self.reader_node: Optional[str] = None  # on a cluster, the node the reader is connected to
        self.claim_cursor = b"0-0"  # XAUTOCLAIM's cursor, kept between takeovers
        self.self_promote = True
        self.next_takeover = 0.0


class Worker:
    """Runs ``handler(job)`` for the jobs of ``queue``, ``concurrency`` at a time.

    ``run()`` blocks until ``close()`` is called (from a handler, another thread, or SIGTERM when
    ``run()`` is on the main thread). A handler that returns succeeds; one that raises fails the
    job, which the server retries under ``backoff`` until ``max_attempts`` failures make it dead.

    On a sharded queue (``Queue(..., shards=N)``) the worker takes from every shard, fairly, and
    while idle blocks on all of them at once (a thread and a connection per shard), so it may hold
    up to N runs beyond ``concurrency``, leased, waiting for a handler thread; each outcome is
    written on its run's shard, and a ``RetryAfter`` holds every shard.
    """

    def __init__(
        self,
        queue: Queue,
        handler: Callable[[Job], object],
        concurrency: int = 10,
        backoff: str = DEFAULT_BACKOFF,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        lease_ms: int = DEFAULT_LEASE_MS,
        max_deliveries: int = DEFAULT_MAX_DELIVERIES,
        shutdown_timeout_ms: int = DEFAULT_SHUTDOWN_TIMEOUT_MS,
        block_ms: int = 1000,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if lease_ms < 3:
            raise ValueError("lease_ms must be at least 3")
        if max_deliveries < 1:
            raise ValueError("max_deliveries must be at least 1")
        if shutdown_timeout_ms < 0:
            raise ValueError("shutdown_timeout_ms must not be negative")
        self.queue = queue
        self.client = queue.client
        # Where the queue's commands go: the client, or on a cluster the slot owner's node client
        # (queue.py's Route). Looked up for each command, so a refreshed slot map takes effect.
        self._route = queue._route
        self.keys = queue.keys
        self.handler = handler
        self.concurrency = int(concurrency)
        self.backoff = backoff
        self.max_attempts = int(max_attempts)
        self.lease_ms = int(lease_ms)
        self.max_deliveries = int(max_deliveries)
        self.shutdown_timeout_ms = int(shutdown_timeout_ms)
        self.block_ms = max(1, min(int(block_ms), 1000))
        self.consumer = consumer_name()
        #: set once the consumer group exists and the worker is about to take jobs
        self.ready = threading.Event()

        self._closing = threading.Event()
        self._sigterm = False  # set by the signal handler: no locks there
        self._started = False
        self._lock = threading.Condition()  # guards _running and _leased
        self._running = 0
        # (shard, entry id) -> job id, for lease renewal: two shards' streams may have the same ids
        self._leased: Dict[Tuple[int, bytes], bytes] = {}
        self._ack_cv = threading.Condition()  # guards _acks, _stopped, _ack_stop
        # (shard, entry, job id or None: drop only)
        self._acks: List[Tuple[int, bytes, Optional[bytes]]] = []
        self._stopped = False
        self._ack_stop = False
        self._lease_stop = threading.Event()
        self._deadline: Optional[float] = None  # monotonic time after which unsent outcomes are dropped
        self._shards = [_Shard(i, part) for i, part in enumerate(queue._parts)]
        self._sharded = len(self._shards) > 1
        # A sharded worker's wait on every shard at once: the loop sets _idle when a round of reads
        # found nothing, each shard's waiting thread then blocks on its shard, and the first to
        # take an entry clears _idle and sets _woke.
        self._idle = threading.Event()
        self._woke = threading.Event()
        self._waiters_stop = threading.Event()
        self._next_queues = 0.0  # the read loop's next _check_queues (monotonic), set as it starts
        self._fail_script = self.client.register_script(FAIL)
        self._success_script = self.client.register_script(SUCCEED)
        self._hand_back_script = self.client.register_script(HAND_BACK)

    # -- public ------------------------------------------------------------------------------

    def close(self) -> None:
        """Asks ``run()`` to stop: nothing new is taken, running handlers get up to
        ``shutdown_timeout_ms`` to finish. Safe from any thread, a handler included."""
        self._closing.set()
        self._woke.set()
        if self._lock.acquire(blocking=False):
            try:
                self._lock.notify_all()
            finally:
                self._lock.release()

    @property
    def _self_promote(self) -> bool:
        """Whether the worker promotes (the first shard's, for a sharded queue)."""
        return self._shards[0].self_promote

    @property
    def closing(self) -> bool:
        return self._closing.is_set() or self._sigterm

    def run(self) -> None:
        """Works until ``close()`` (or SIGTERM, when called on the main thread)."""
        if self._started:
            raise RuntimeError("a Worker runs once")
        self._started = True
        installed = False
        old = None
        if threading.current_thread() is threading.main_thread():
            old = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)
            installed = True
        try:
            self._run()
        finally:
            if installed:
                signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)

    # -- internals ---------------------------------------------------------------------------

    def _on_sigterm(self, signum, frame) -> None:
        self._sigterm = True

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.closing:
            left = end - time.monotonic()
            if left <= 0:
                return
            self._closing.wait(min(left, 0.1))

    def _make_reader(self, shard: _Shard, block_ms: int):
        """A client of its own for the blocking reads (a read must not hold up the connections
        the acknowledgements use), whose socket timeout outlasts the block. On a cluster, a client
        of the node that owns the queue's slot, with the cluster's connection options (its parser,
        which names MOVED and the like); ``_current_reader`` makes a new one when the slot moves."""
        route = shard.route
        if route.cluster:
            node = route.node()
            kwargs = route.connection_kwargs()
            timeout = kwargs.get("socket_timeout")
            # Also without a timeout of the caller's: a node that stops answering (paused,
            # partitioned) while its replica takes the slot over would hold the read forever. A
            # read blocks at most a second, so one silent for block + 5 s is a lost connection.
            if timeout is None or timeout < block_ms / 1000 + 5:
                kwargs["socket_timeout"] = block_ms / 1000 + 5
            reader = self.client.nodes_manager.create_valkey_node(node.host, node.port, **kwargs)
            shard.reader_node = node.name
            return reader
        pool = self.client.connection_pool
        kwargs = dict(pool.connection_kwargs)
        timeout = kwargs.get("socket_timeout")
        if timeout is not None and timeout < block_ms / 1000 + 5:
            kwargs["socket_timeout"] = block_ms / 1000 + 5
        reader_pool = valkey.ConnectionPool(connection_class=pool.connection_class, max_connections=2, **kwargs)
        return valkey.Valkey(connection_pool=reader_pool)

    def _current_reader(self, shard: _Shard):
        """The shard's reader, made again on a cluster when the slot map in hand names another
        owner of its slot than the one it reads from (after a failover or a slot migration)."""
        if shard.reader is not None and shard.route.cluster and shard.route.node().name != shard.reader_node:
            self._close_reader(shard)
        if shard.reader is None:
            shard.reader = self._make_reader(shard, self.block_ms)
        return shard.reader

    def _close_reader(self, shard: _Shard) -> None:
        reader, shard.reader = shard.reader, None
        if reader is not None:
            try:
                reader.close()
                reader.connection_pool.disconnect()
            except Exception as exc:  # noqa: BLE001
                log.warning("echomq: cannot close the reader's connections (%s)", exc)

    def _setup(self) -> None:
        for shard in self._shards[1:]:
            make_stream(shard.route.target(), shard.keys.pending)
        node = self._route.target()
        make_stream(node, self.keys.pending)
        # An invalid policy would make every failure's MULTI lose its job: ECHO.DELAY
        # validates it as ECHO.RETRY does, and writes and counts nothing. On a cluster it is
        # keyless: the queue's node answers it, as it answers ECHO.QUEUES below.
        node.execute_command("ECHO.DELAY", self.backoff, 1)
        self._check_queues()

    def _check_queues(self) -> None:
        # Each node of a cluster has its own echomq.auto-promote: the one that owns the slot is
        # the one whose timer would promote the queue. One ECHO.QUEUES per node.
        asked: Dict[int, list] = {}
        for shard in self._shards:
            k = shard.keys
            node = shard.route.target()
            pairs = asked.get(id(node))
            if pairs is None:
                pairs = asked[id(node)] = node.execute_command("ECHO.QUEUES") or []
            listed = any(len(p) == 2 and bytes(p[0]) == k.schedule and bytes(p[1]) == k.pending for p in pairs)
            shard.self_promote = not listed

    def _run(self) -> None:
        while True:
            try:
                self._setup()
                break
            except Exception as exc:  # noqa: BLE001 - sorted below
                if not (isinstance(exc, _TRANSIENT) or redirected(exc)):
                    raise
                if self.closing:
                    return
                log.warning("echomq: cannot reach the server (%s); retrying", describe(exc))
                self._route.refresh(exc)
                self._sleep(1.0)
                if self.closing:
                    return
        self.ready.set()
        if not self._route.cluster and not self._sharded:
            self._current_reader(self._shards[0])
        pool = _Pool(self.concurrency, "echomq-handler")
        acker = threading.Thread(target=self._ack_loop, name="echomq-ack", daemon=True)
        leaser = threading.Thread(target=self._lease_loop, name="echomq-lease", daemon=True)
        acker.start()
        leaser.start()
        try:
            if self._sharded:
                self._loop_sharded(pool)
            else:
                self._loop(pool)
        finally:
            deadline = time.monotonic() + self.shutdown_timeout_ms / 1000
            self._deadline = deadline
            with self._lock:
                while self._running > 0:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._lock.wait(min(left, 0.1))
                abandoned = self._running
            if abandoned:
                log.warning("echomq: %d handler(s) still running at shutdown; left in the group", abandoned)
            with self._ack_cv:
                self._stopped = True
                self._ack_stop = True
                self._ack_cv.notify_all()
            acker.join(timeout=max(deadline - time.monotonic(), 0) + 30)
            self._lease_stop.set()
            leaser.join(timeout=5)
            pool.shutdown()
            for shard in self._shards:
                self._close_reader(shard)

    def _reconnect(self) -> None:
        """Closes the idle connections of the client's pool and of the reader's (those in use
        are closed when they meet the same refusal): the next command opens a new one. On a
        cluster, those of the queue's node, and the slot map is asked for again."""
        pools = {}
        for shard in self._shards:
            try:
                target = shard.route.target().connection_pool
                pools[id(target)] = target
            except Exception as exc:  # noqa: BLE001 - no owner in the map: the refresh below finds one
                log.warning("echomq: %s", exc)
            reader = shard.reader
            if reader is not None:
                pools[id(reader.connection_pool)] = reader.connection_pool
        self._route.refresh()  # the shards' routes share the cluster client's slot map
        for pool in pools.values():
            try:
                pool.disconnect(inuse_connections=False)
            except Exception as exc:  # noqa: BLE001
                log.warning("echomq: cannot close the connections (%s)", exc)

    def _after_refusal(self, exc: BaseException) -> None:
        """Before an outcome or a lease is sent again: a stale connection is dropped (the next
        one goes through the endpoint), and on a cluster the slot map is asked for again, so the
        resend goes to the slot's owner now (after a redirection, a failover, a dead node)."""
        if _stale(exc):
            self._reconnect()
        else:
            self._route.refresh(exc)

    def _free(self) -> int:
        with self._lock:
            return self.concurrency - self._running

    def _round(self) -> Tuple[float, int]:
        """The start of a round of the read loop: the queues checked when ``_next_queues`` has come
        (every 10 s, the next time set first so a failed check waits its turn too), then the free
        slots counted; with none free, a wait of up to 0.1 s for one (the caller starts the round
        again). Returns the round's time (monotonic) and the free slots."""
        now = time.monotonic()
        if now >= self._next_queues:
            self._next_queues = now + 10
            self._check_queues()
        with self._lock:
            free = self.concurrency - self._running
            if free <= 0:
                self._lock.wait(0.1)
        return now, free

    def _loop(self, pool: _Pool) -> None:
        self._next_queues = time.monotonic() + 10
        takeover_every = self.lease_ms / 2000
        next_takeover = 0.0
        while not self.closing:
            try:
                now, free = self._round()
                if free <= 0:
                    continue
                shard = self._shards[0]
                reader = self._current_reader(shard)
                if now >= next_takeover:
                    next_takeover = now + takeover_every
                    self._takeover(shard, reader, pool, free)
                    continue
                self._take(shard, reader, pool, free)
            except Exception as exc:  # noqa: BLE001 - sorted below; anything else ends run()
                if not self._recover(exc):
                    raise

    def _loop_sharded(self, pool: _Pool) -> None:
        """The loop over N shards. Each round reads the shards without blocking, starting one shard
        further than the round before and stopping when the free slots are filled, so a deep shard
        cannot keep another shard's job waiting more than N rounds. A round that found nothing
        waits on every shard at once: one thread per shard blocks on its shard (``_wait_on``)
        while the loop sleeps until one of them took something. Each of those reads takes one
        entry at most, so the worker holds at most N runs beyond its concurrency (they wait for a
        handler thread, leased, and are handed back if the worker closes first)."""
        waiters = [
            threading.Thread(target=self._wait_on, args=(shard, pool), name="echomq-wait-%d" % shard.index, daemon=True)
            for shard in self._shards
        ]
        for thread in waiters:
            thread.start()
        self._next_queues = time.monotonic() + 10
        takeover_every = self.lease_ms / 2000
        first = 0
        try:
            while not self.closing:
                try:
                    now, free = self._round()
                    if free <= 0:
                        continue
                    due = [shard for shard in self._shards if now >= shard.next_takeover]
                    if due:
                        for shard in due:
                            free = self._free()
                            if free <= 0:
                                break
                            shard.next_takeover = now + takeover_every
                            self._takeover(shard, shard.route.target(), pool, free)
                        continue
                    got = 0
                    for j in range(len(self._shards)):
                        if free - got <= 0:
                            break
                        shard = self._shards[(first + j) % len(self._shards)]
                        got += self._take(shard, shard.route.target(), pool, free - got, block_ms=None)
                    first = (first + 1) % len(self._shards)
                    if not got:
                        wake = min([self._next_queues] + [shard.next_takeover for shard in self._shards])
                        self._wait_all(wake - time.monotonic())
                except Exception as exc:  # noqa: BLE001 - sorted below; anything else ends run()
                    if not self._recover(exc):
                        raise
        finally:
            self._idle.clear()
            self._waiters_stop.set()
            for thread in waiters:
                thread.join(self.block_ms / 1000 + 10)

    def _wait_all(self, seconds: float) -> None:
        """Lets every shard's waiting thread block on its shard, until one took an entry, the
        worker closes, or ``seconds`` pass (the next takeover or ECHO.QUEUES is due)."""
        end = time.monotonic() + max(seconds, 0.0)
        self._woke.clear()
        self._idle.set()
        try:
            while not self.closing:
                left = end - time.monotonic()
                if left <= 0 or self._woke.wait(min(left, 0.1)):
                    return
        finally:
            self._idle.clear()

    def _wait_on(self, shard: _Shard, pool: _Pool) -> None:
        """One shard's blocking reads, while the loop waits (``_wait_all``): one entry a read, so
        a job added to any shard starts as fast as on one queue, and no read holds another up."""
        while not (self._waiters_stop.is_set() or self.closing):
            if not self._idle.wait(0.1):
                continue
            if self._free() <= 0:
                self._sleep(0.01)
                continue
            try:
                got = self._take(shard, self._current_reader(shard), pool, 1)
            except Exception as exc:  # noqa: BLE001 - sorted below
                if self.closing:
                    return
                if not self._recover(exc):
                    log.exception("echomq: cannot read shard %s", shard.keys.pending)
                    self._sleep(1.0)
                continue
            if got:
                self._idle.clear()
                self._woke.set()

    def _recover(self, exc: BaseException) -> bool:
        """What the loop does after a failed read or takeover; False for an error it does not
        know (raised out of run())."""
        if redirected(exc):
            # MOVED, ASK, TRYAGAIN, CLUSTERDOWN: nothing ran. Entries a read delivered before a
            # later command of its round was refused stay delivered to this worker and are taken
            # over after the lease: none is lost.
            log.warning("echomq: %s; asking the cluster where the queue's slot is", describe(exc))
            self._route.refresh(exc)
            self._sleep(REDIRECT_PAUSE_S)
        elif isinstance(exc, ResponseError):
            if _stale(exc):
                log.warning("echomq: %s; reconnecting", describe(exc))
                self._reconnect()
                self._sleep(0.5)
            elif "NOGROUP" in str(exc):
                log.warning("echomq: the consumer group is gone; creating it again")
                try:
                    self._setup()
                except Exception:  # noqa: BLE001
                    log.exception("echomq: cannot create the group")
                    self._sleep(1.0)
            else:
                log.exception("echomq: server error")
                self._sleep(1.0)
        elif isinstance(exc, _TRANSIENT):
            log.warning("echomq: connection problem (%s); retrying", exc)
            # On a cluster the node may be gone for good (its replica takes over): the new map
            # names the new owner.
            self._route.refresh()
            self._sleep(0.5)
        else:
            return False
        return True

    _BLOCK = object()  # _take's default: block as long as the worker's reads do

    def _take(self, shard: _Shard, reader, pool: _Pool, free: int, block_ms=_BLOCK) -> int:
        """One read of the shard (``block_ms`` None: without blocking); returns how many entries
        it took."""
        k = shard.keys
        promote = shard.self_promote  # once: ECHO.QUEUES may change it from another thread meanwhile
        if block_ms is Worker._BLOCK:
            block_ms = min(100 if promote else self.block_ms, max(1, self.lease_ms // 2))
        pipe = reader.pipeline(transaction=False)
        if promote:
            pipe.execute_command("ECHO.PROMOTE", k.schedule, k.pending, "LIMIT", PROMOTE_LIMIT)
        pipe.xreadgroup(GROUP, self.consumer, {k.pending: ">"}, count=free, block=block_ms)
        pipe.execute_command("ECHO.LIMITS", k.schedule)
        pipe.time()
        # Not raising on the first error: a refused PROMOTE must not throw away the entries the
        # XREADGROUP beside it delivered (they would wait for a takeover).
        replies = pipe.execute(raise_on_error=False)
        if promote and isinstance(replies[0], Exception):
            log.warning("echomq: ECHO.PROMOTE failed (%s)", describe(replies[0]))
        if isinstance(replies[-3], Exception):
            raise replies[-3]
        entries = _read_entries(replies[-3])
        if not entries:
            return 0
        if self.closing:
            self._hand_back(shard, entries)
            return len(entries)
        limits, now = replies[-2], replies[-1]
        if isinstance(limits, Exception) or isinstance(now, Exception):
            log.warning("echomq: ECHO.LIMITS or TIME failed (%s); the entries are not held", limits)
            held_until, now_ms = 0, 0
        else:
            held_until, now_ms = _held_until(limits), server_ms(now)
        if not self._wait_hold(shard, reader, entries, held_until, now_ms):
            return len(entries)
        fetch = reader.pipeline(transaction=False)
        for _, jid in entries:
            if jid is not None:
                fetch.hget(k.jobs, jid)
                fetch.hget(k.attempts, jid)
        values = iter(fetch.execute())
        rows = []
        for eid, jid in entries:
            if jid is None:
                rows.append((eid, None, None, None))
            else:
                rows.append((eid, jid, next(values), next(values)))
        self._launch(shard, pool, rows)
        return len(entries)

    def _wait_hold(self, shard: _Shard, reader, entries, held_until: int, now_ms: int) -> bool:
        """Keeps entries taken while the queue is held, and returns True once the hold has ended
        (by the server's clock), False when the worker closes first (they are handed back)."""
        if held_until <= now_ms:
            return True
        with self._lock:
            for eid, jid in entries:
                self._leased[(shard.index, eid)] = jid or b""
        try:
            while held_until > now_ms:
                self._sleep(min((held_until - now_ms) / 1000, HOLD_RECHECK_S))
                if self.closing:
                    self._hand_back(shard, entries)
                    return False
                pipe = reader.pipeline(transaction=False)
                pipe.execute_command("ECHO.LIMITS", shard.keys.schedule)
                pipe.time()
                limits, now = pipe.execute()
                held_until, now_ms = _held_until(limits), server_ms(now)
            return True
        finally:
            with self._lock:
                for eid, _ in entries:
                    self._leased.pop((shard.index, eid), None)

    def _hand_back(self, shard: _Shard, entries) -> None:
        """Entries taken but not started when the worker closes: back to pending at once (the
        hand-back script, one call per entry, pipelined), so another worker gets them without
        waiting for the lease. An entry whose hand-back fails stays in the group and is taken over
        after the lease; an entry without a job field is only dropped."""
        k = shard.keys
        try:
            pipe = shard.route.target().pipeline(transaction=False)
            for eid, jid in entries:
                if jid is None:
                    pipe.xack(k.pending, GROUP, eid)
                    pipe.xdel(k.pending, eid)
                else:
                    self._hand_back_script(keys=[k.pending], args=[eid, jid], client=pipe)
            replies = pipe.execute(raise_on_error=False)
            errors = [r for r in replies if isinstance(r, Exception)]
        except Exception as exc:  # noqa: BLE001
            errors = [exc]
        if errors:
            log.warning(
                "echomq: cannot hand back %d of %d entries (%s); they are taken over after the lease",
                len(errors), len(entries), errors[0],
            )

    def _launch(self, shard: _Shard, pool: _Pool, rows) -> None:
        if self.closing:
            self._hand_back(shard, [(eid, jid) for eid, jid, _, _ in rows])
            return
        for eid, jid, payload, attempts in rows:
            if jid is None or payload is None:
                # The job was removed: acknowledge the entry, run nothing.
                with self._ack_cv:
                    self._acks.append((shard.index, eid, None))
                    self._ack_cv.notify()
                continue
            attempt = int(attempts or 0) + 1
            payload, job_group = unwrap_payload(payload)
            with self._lock:
                self._running += 1
                self._leased[(shard.index, eid)] = jid
            pool.submit(self._execute, shard, eid, jid, payload, attempt, job_group)

    def _takeover(self, shard: _Shard, reader, pool: _Pool, free: int) -> None:
        k = shard.keys
        node = shard.route.target()  # the XPENDING and the reads below go to the same node
        reply = node.xautoclaim(k.pending, GROUP, self.consumer, self.lease_ms, shard.claim_cursor, count=free)
        # One call looks at no more than 10 x COUNT entries: go on from where it stopped (it
        # replies 0-0 at the end), or an old entry behind many live ones is never reached.
        shard.claim_cursor = reply[0] or b"0-0"
        claimed = [(eid, _fields_job(fields)) for eid, fields in (reply[1] or []) if eid is not None]
        if not claimed:
            return
        pipe = node.pipeline(transaction=False)
        for eid, jid in claimed:
            pipe.xpending_range(k.pending, GROUP, eid, eid, 1)
            pipe.hget(k.jobs, jid if jid is not None else b"")
            pipe.hget(k.attempts, jid if jid is not None else b"")
        pipe.execute_command("ECHO.LIMITS", k.schedule)
        pipe.time()
        values = pipe.execute()
        rows = []
        for i, (eid, jid) in enumerate(claimed):
            pending, payload, attempts = values[3 * i : 3 * i + 3]
            deliveries = int(pending[0]["times_delivered"]) if pending else 1
            if jid is not None and payload is not None and deliveries > self.max_deliveries:
                attempt = int(attempts or 0) + 1
                message = "delivered %d times without an outcome" % deliveries
                job_group = unwrap_payload(payload)[1]
                self._fail(shard, eid, jid, attempt, RuntimeError(message), job_group, resend=False)
                continue
            rows.append((eid, jid, payload, attempts))
        if not rows:
            return
        entries = [(eid, jid) for eid, jid, _, _ in rows]
        if self.closing:
            self._hand_back(shard, entries)
            return
        if self._wait_hold(shard, reader, entries, _held_until(values[-2]), server_ms(values[-1])):
            self._launch(shard, pool, rows)

    def _execute(
        self, shard: _Shard, eid: bytes, jid: bytes, payload: bytes, attempt: int, job_group: Optional[bytes]
    ) -> None:
        if self._sharded and self.closing:
            # Taken by a wait on every shard beyond the concurrency, and not started before the
            # close: back to the queue, as any entry taken and not started.
            try:
                self._hand_back(shard, [(eid, jid)])
            finally:
                with self._lock:
                    self._running -= 1
                    self._leased.pop((shard.index, eid), None)
                    self._lock.notify_all()
            return
        outcome: Optional[BaseException] = None
        group = to_str(job_group) if job_group is not None else None
        try:
            self.handler(Job(to_str(jid), payload, attempt, to_str(eid), group))
        except BaseException as exc:  # noqa: BLE001 - any raise fails the job
            outcome = exc
        keep_lease = False
        try:
            if outcome is None:
                # The entry stays in the lease set (renewed) until the ack loop confirms it.
                with self._ack_cv:
                    if not self._stopped:
                        self._acks.append((shard.index, eid, jid))
                        self._ack_cv.notify()
                        keep_lease = True
            elif not self._stopped:
                self._fail(shard, eid, jid, attempt, outcome, job_group)
        except Exception:  # noqa: BLE001
            log.exception("echomq: cannot write the outcome of job %r; another worker will run it", jid)
        finally:
            with self._lock:
                self._running -= 1
                if not keep_lease:
                    self._leased.pop((shard.index, eid), None)
                self._lock.notify_all()

    def _give_up(self) -> bool:
        """True once the worker is closed and its shutdown timeout has passed: an outcome not
        written by then is dropped (the entry stays in the group and is taken over)."""
        deadline = self._deadline
        return deadline is not None and time.monotonic() >= deadline

    def _fail(
        self,
        shard: _Shard,
        eid: bytes,
        jid: bytes,
        attempt: int,
        exc: BaseException,
        job_group: Optional[bytes],
        resend: bool = True,
    ) -> None:
        """Writes a failure with the script of step 4 (EVALSHA, loaded again on NOSCRIPT). The
        caller keeps the entry leased meanwhile; on a connection error the script is sent again
        (short backoff) until it is confirmed or the worker gives up (``resend`` False: once).
        A grouped job (``job_group``, from its payload's envelope) is retried into its group.
        On a sharded queue the script writes the failure and the hold on the run's own shard; a
        hold then follows on every other shard."""
        k = shard.keys
        hold_ms = min(exc.ms, MAX_HOLD_MS) if isinstance(exc, RetryAfter) else 0  # 0: no hold
        hold_group = getattr(exc, "_group", None) if hold_ms else None
        args = [jid, eid, self.backoff, attempt, self.max_attempts, error_text(exc), hold_ms]
        if job_group is not None or hold_group is not None:
            args.append(job_group or b"")  # '': no group of its own, the hold's group follows
        if hold_group is not None:
            args.append(hold_group)
        pause = 0.05
        while True:
            try:
                reply = self._fail_script(
                    keys=[k.schedule, k.pending, k.dead, k.attempts, k.errors, k.jobs],
                    args=args,
                    client=shard.route.target(),
                )
                break
            except Exception as err:  # noqa: BLE001
                if not _resend(err) or not resend or self._give_up():
                    raise
                log.warning("echomq: cannot write a failure (%s); sending it again", describe(err))
                self._after_refusal(err)
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
        # {fired, held}: -3 (a resend, or settled elsewhere) and -4 (removed) wrote nothing more.
        held = reply[1] if isinstance(reply, (list, tuple)) and len(reply) > 1 else 0
        what = "the queue" if hold_group is None else "group %r" % to_str(hold_group)
        if isinstance(held, (bytes, str)):
            log.warning(
                "echomq: job %r failed and was written, but %s could not be held for %d ms (%s)",
                to_str(jid), what, hold_ms, to_str(held),
            )
        fired = reply[0] if isinstance(reply, (list, tuple)) and reply else None
        if hold_ms and self._sharded and fired not in (-3, -4):
            self._hold_others(shard, hold_ms, hold_group, what)

    def _hold_others(self, shard: _Shard, hold_ms: int, hold_group: Optional[bytes], what: str) -> None:
        """The hold of a RetryAfter on every shard but the failed run's (whose script took it):
        the dependency that said "later" is the whole queue's. A refused hold is logged, never
        raised into the job, whose failure is written."""
        words = [] if hold_group is None else [b"GROUP", hold_group]
        for other in self._shards:
            if other is shard:
                continue
            try:
                other.route.target().execute_command("ECHO.HOLD", other.keys.schedule, hold_ms, *words)
            except Exception as exc:  # noqa: BLE001 - logged: the failure itself is written
                log.warning(
                    "echomq: %s could not be held for %d ms on shard %s (%s)",
                    what, hold_ms, to_str(other.keys.schedule), describe(exc),
                )

    def _ack_loop(self) -> None:
        """Sends the successes, batched: those finished while a batch is on the wire go in the
        next. A batch refused by a connection error is sent again (with what joined it meanwhile)
        until it is confirmed, or the worker is closed and its shutdown timeout has passed; its
        entries stay leased (renewed) until then, so no other worker runs them again."""
        batch: List[Tuple[int, bytes, Optional[bytes]]] = []
        pause = 0.05
        while True:
            with self._ack_cv:
                while not self._acks and not batch and not self._ack_stop:
                    self._ack_cv.wait(0.5)
                batch.extend(self._acks)
                self._acks = []
            if not batch:
                return
            try:
                self._send_acks(batch)
            except Exception as exc:  # noqa: BLE001
                if self._give_up() or not _resend(exc):
                    log.warning("echomq: acknowledgement of %d entries failed (%s); they are taken over after the lease", len(batch), describe(exc))
                    self._release(batch)
                    batch = []
                    continue
                log.warning("echomq: acknowledgement failed (%s); sending it again", describe(exc))
                self._after_refusal(exc)
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            self._release(batch)
            batch = []
            pause = 0.05

    def _release(self, batch) -> None:
        with self._lock:
            for index, eid, _ in batch:
                self._leased.pop((index, eid), None)

    def _send_acks(self, batch) -> None:
        """The success script, SUCCESS_BATCH runs a call. An entry with no job to delete (the job
        was removed before it ran) goes with the id "" (no job has it): only the entry is dropped,
        never a job added with the same id since."""
        by_shard: Dict[int, List[Tuple[bytes, Optional[bytes]]]] = {}
        for index, eid, jid in batch:
            by_shard.setdefault(index, []).append((eid, jid))
        for index, runs in by_shard.items():
            shard = self._shards[index]
            k = shard.keys
            keys = [k.pending, k.jobs, k.attempts, k.errors]
            node = shard.route.target()
            for i in range(0, len(runs), SUCCESS_BATCH):
                args: List[bytes] = []
                for eid, jid in runs[i : i + SUCCESS_BATCH]:
                    args.append(eid)
                    args.append(jid if jid is not None else b"")
                self._success_script(keys=keys, args=args, client=node)

    def _lease_loop(self) -> None:
        interval = self.lease_ms / 3000
        while not self._lease_stop.wait(interval):
            by_shard: Dict[int, List[bytes]] = {}
            with self._lock:
                for index, eid in self._leased:
                    by_shard.setdefault(index, []).append(eid)
            for index, entries in by_shard.items():
                self._renew(self._shards[index], entries)

    def _renew(self, shard: _Shard, entries: List[bytes]) -> None:
        k = shard.keys
        for i in range(0, len(entries), 1000):
            try:
                node = shard.route.target()
                node.xclaim(k.pending, GROUP, self.consumer, 0, entries[i : i + 1000], justid=True)
            except Exception as exc:  # noqa: BLE001
                # Renewed again in lease_ms / 3: a lease outlives two missed renewals.
                log.warning("echomq: lease renewal failed (%s)", describe(exc))
                if _resend(exc):
                    self._after_refusal(exc)
