"""Queue: adding jobs, inspecting and repairing a queue."""

from __future__ import annotations

from dataclasses import dataclass
import heapq
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from ._common import (
    Keys,
    Payload,
    check_client,
    group_limit_words,
    id_bytes,
    job_group_bytes,
    make_stream,
    new_id,
    new_job_id,
    repeat_words,
    server_ms,
    to_bytes,
    to_str,
    unwrap_payload,
    wrap_payload,
)
from ._protocol import (
    ADD_BATCH,
    ADD_WITH_ID,
    GROUP,
    JOB_GROUP_ENVELOPE,
    MAX_DELAY_MS,
    MAX_GROUPS_COUNT,
    PURGE_DEAD,
    REQUEUE,
)
from ._route import Route, is_cluster, redirected
from ._shards import check_shards, release_limit_words, shard_of, shard_tags, split_burst, split_limit, split_rate
from .worker import Worker


class _Refused(Exception):
    """Carries an error from inside EXEC's reply past the cluster's resend loop: the transaction
    ran, so a MOVED or TRYAGAIN text in it (a script's own error) must not make it run again."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class DeadJob:
    """A job that failed for the last time."""

    id: str
    died_at_ms: int
    attempts: int
    error: Optional[str]
    payload: Optional[bytes]
    #: the job's group (``add(..., group=...)``), None for a job without one
    group: Optional[str] = None


@dataclass(frozen=True)
class GroupInfo:
    """One group of the queue that has jobs waiting in the schedule, as ECHO.GROUPS reports it
    (docs/groups.md). Its ``members`` and ``due`` are its share of the schedule's jobs: a job
    released into pending belongs to no group's count any more."""

    #: the group's name, None for the jobs added without one (listed first)
    group: Optional[str]
    #: its jobs waiting in the schedule, due or not
    members: int
    #: those due now (waiting for the release: their group's turn, its limit or a hold)
    due: int
    #: its limit per second, None when nothing limits the group
    limit_rate: Optional[float]
    limit_burst: Optional[int]
    #: how many jobs its limit lets leave now, None when not limited
    available: Optional[int]
    #: the first ms (server clock) it may release while it waits out of the rotation, for its
    #: earliest job, its limit or its hold; 0 while it is in the rotation
    waiting_until_ms: int
    #: the end of its own hold (``RetryAfter(ms, group=...)``, ECHO.HOLD ... GROUP), 0 for none
    held_until_ms: int


def _field(entry, name: bytes):
    """A field of one ECHO.GROUPS entry: a map in RESP3, a flat field/value list in RESP2."""
    if isinstance(entry, dict):
        return entry.get(name, entry.get(name.decode()))
    for i in range(0, len(entry) - 1, 2):
        if entry[i] in (name, name.decode()):
            return entry[i + 1]
    return None


def _group(entry) -> GroupInfo:
    def number(name: bytes, cast=int):
        value = _field(entry, name)
        return None if value is None else cast(value)

    name = _field(entry, b"group")
    return GroupInfo(
        group=to_str(name) if name else None,
        members=number(b"members"),
        due=number(b"due"),
        limit_rate=number(b"limit-rate", float),
        limit_burst=number(b"limit-burst"),
        available=number(b"available"),
        waiting_until_ms=number(b"waiting-until-ms") or 0,
        held_until_ms=number(b"held-until-ms") or 0,
    )


def _plus(a, b):
    """Two shards' figure summed; None (no limit) stays None only when both are None."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _merge_groups(a: GroupInfo, b: GroupInfo) -> GroupInfo:
    """One group of two shards: its figures summed, the earliest wait of a waiting shard, the
    latest hold."""
    waits = [w for w in (a.waiting_until_ms, b.waiting_until_ms) if w]
    return GroupInfo(
        group=a.group,
        members=a.members + b.members,
        due=a.due + b.due,
        limit_rate=_plus(a.limit_rate, b.limit_rate),
        limit_burst=_plus(a.limit_burst, b.limit_burst),
        available=_plus(a.available, b.available),
        waiting_until_ms=min(waits) if waits else 0,
        held_until_ms=max(a.held_until_ms, b.held_until_ms),
    )


def _repeat(entry) -> Dict[str, Any]:
    """One ECHO.REPEATS entry (a map in RESP3, a flat field/value list in RESP2) as ``repeats()``
    returns it."""

    def number(name: bytes) -> Optional[int]:
        value = _field(entry, name)
        return None if value is None else int(value)

    def text(name: bytes) -> Optional[str]:
        value = _field(entry, name)
        return None if value is None else to_str(value)

    return {
        "id": text(b"id"),
        "spec": text(b"spec"),
        "jitter_ms": number(b"jitter-ms"),
        "tz": text(b"tz"),
        "from_ms": number(b"from-ms"),
        "until_ms": number(b"until-ms"),
        "next_ms": number(b"next-ms"),
        "fire_at_ms": number(b"fire-at-ms"),
    }


def _delay(delay_ms: int) -> int:
    """delay_ms checked before anything is sent: an integer in 0..=10^13, the range
    ECHO.SCHEDULE takes (a refused schedule must not leave half a job behind)."""
    if isinstance(delay_ms, bool) or int(delay_ms) != delay_ms:
        raise ValueError("delay_ms must be an integer in 0..=%d, not %r" % (MAX_DELAY_MS, delay_ms))
    delay_ms = int(delay_ms)
    if not 0 <= delay_ms <= MAX_DELAY_MS:
        raise ValueError("delay_ms must be in 0..=%d, not %d" % (MAX_DELAY_MS, delay_ms))
    return delay_ms


class Queue:
    """A queue on an echomq server.

    ``client`` is a ``valkey.Valkey`` or a ``valkey.cluster.ValkeyCluster``, made with
    ``decode_responses=False`` (the default): payloads are bytes. The queue is thread-safe as the
    client is. On a cluster every command of the queue goes to the primary that owns its slot (all
    its keys share the hash tag ``{name}``), transactions and scripts included; a call refused by
    a redirection or a failover is sent again for up to 30 s (see ``_route.py``).

    ``shards`` (1..=1024) makes one logical queue of that many sub-queues, each under a hash tag
    of its own (``shards``: ``name``, ``name#1``, ...), so a cluster spreads them over its
    primaries (docs/clients.md, Sharded queues). A job goes to the shard its id hashes to; the
    inspecting calls see the whole queue. One shard, the default, is the plain queue.
    """

    def __init__(self, client, name: str, shards: int = 1) -> None:
        check_client(client)
        shards = check_shards(shards)
        self.client = client
        self.name = name
        self.keys = Keys(name)
        self._tags = tuple(shard_tags(name, shards))
        #: the sub-queues, each a plain one-shard Queue under its own tag; [self] when unsharded
        self._parts: List["Queue"] = [self] if shards == 1 else [Queue(client, tag) for tag in self._tags]
        self._route = Route(client, self.keys.pending)
        # Registered on the caller's client (for its encoder) but always called with the client
        # of the queue's node, or a pipeline of it: EVALSHA, and on NOSCRIPT the text, go there.
        self._add_script = client.register_script(ADD_WITH_ID)
        self._requeue_script = client.register_script(REQUEUE)
        self._purge_script = client.register_script(PURGE_DEAD)
        self._stream_made = False

    @property
    def shards(self) -> Tuple[str, ...]:
        """The shards' hash tags, shard 0 first (the queue's own name): shard i's keys are
        ``{<tag>}:pending`` and the like."""
        return self._tags

    @property
    def _sharded(self) -> bool:
        return len(self._tags) > 1

    def shard_of(self, id: str) -> int:
        """The shard a job with this id goes to: ``KEYSLOT(id) mod shards``."""
        return shard_of(id_bytes(id), len(self._tags))

    def _part_of(self, jid: bytes) -> "Queue":
        return self._parts[shard_of(jid, len(self._parts))]

    def _make_stream(self) -> None:
        """The stream and the workers' group, as a worker's start makes them, once per Queue before
        its first add with a generated id: ECHO.ADD would make a missing pending a list. (The add
        script makes them itself when they are missing.)"""
        self._route.run(lambda client: make_stream(client, self.keys.pending))
        self._stream_made = True

    # -- adding ------------------------------------------------------------------------------

    def _queue_add(
        self, pipe, jid: bytes, value: bytes, delay_ms: int, given: bool, job_group: Optional[bytes]
    ) -> None:
        """``value``: the payload as stored, wrapped with ``job_group`` (``wrap_payload``)."""
        k = self.keys
        tail = [] if job_group is None else [job_group]
        if given:
            args = [jid, value, delay_ms, GROUP] + tail
            self._add_script(keys=[k.jobs, k.pending, k.schedule], args=args, client=pipe)
            return
        pipe.hset(k.jobs, jid, value)
        # the server decides: straight into pending, or through the schedule's release limit (a
        # grouped job always goes through its group's part of the schedule)
        grouped = [] if job_group is None else [b"GROUP", job_group]
        pipe.execute_command("ECHO.ADD", k.schedule, k.pending, jid, "DELAY", delay_ms, *grouped)

    def add(self, payload: Payload, id: Optional[str] = None, delay_ms: int = 0, group: Optional[str] = None) -> str:
        """Adds a job; returns its id. With ``id`` given, a second add while the job exists is a
        no-op. ``delay_ms`` is counted by the server's clock. With ``group`` (1..=1024 bytes) the
        job is released fairly across groups, under its group's limit, and keeps its group
        through its retries (docs/clients.md, Groups)."""
        job_group = job_group_bytes(group)
        value = wrap_payload(to_bytes(payload), job_group)
        delay_ms = _delay(delay_ms)
        if self._sharded:
            if id is None:
                text = new_id()
                return self._part_of(text.encode())._add_generated(text, value, delay_ms, job_group)
            text = new_job_id(id)[0]
            return self._part_of(text.encode("utf-8")).add(payload, id=text, delay_ms=delay_ms, group=group)
        if id is not None:
            text, jid = new_job_id(id)
            # A refused enqueue is raised by the script with nothing written; a resend after a lost
            # reply finds the job and changes nothing, so it is sent again like any idempotent call.
            self._route.run(lambda c: self._queue_add(c, jid, value, delay_ms, True, job_group))
            return text
        return self._add_generated(new_id(), value, delay_ms, job_group)

    def _add_generated(self, jid_s: str, value: bytes, delay_ms: int, job_group: Optional[bytes]) -> str:
        self._execute_adds([(jid_s.encode(), value)], delay_ms, False, job_group)
        return jid_s

    def _execute_adds(self, jobs, delay_ms: int, given: bool, job_group: Optional[bytes] = None) -> None:
        """One MULTI of adds; an error inside EXEC's reply is raised to the caller. A job with a
        generated id whose enqueue was refused has its payload taken back (its id is unique: no
        other job can own that payload).

        On a cluster the MULTI runs on the node of the queue's slot, so it is a transaction there as
        on a single server. A refusal at queueing time (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) makes
        the server discard the whole transaction (EXECABORT): nothing ran and it is sent again.
        Generated ids are not idempotent (a second XADD is a second run), so after a connection
        lost with the EXEC on the wire the error is raised, as on a single server."""

        def execute(client):
            pipe = client.pipeline(transaction=True)
            for jid, payload in jobs:
                self._queue_add(pipe, jid, payload, delay_ms, given, job_group)
            replies = pipe.execute(raise_on_error=False)
            errors = [r for r in replies if isinstance(r, Exception)]
            if not errors:
                return
            if not given:
                refused = [jid for i, (jid, _) in enumerate(jobs) if isinstance(replies[2 * i + 1], Exception)]
                if refused:
                    try:
                        client.hdel(self.keys.jobs, *refused)
                    except Exception:  # noqa: BLE001 - the first error is the one to report
                        pass
            # An error inside EXEC's reply is the command's own refusal (it ran, the others of
            # the transaction too): raised to the caller, never sent again.
            raise _Refused(errors[0])

        if not given and not self._stream_made:
            self._make_stream()
        try:
            self._route.run(execute, idempotent=given)
        except _Refused as refused:
            raise refused.error from None

    def add_many(
        self,
        payloads: Iterable[Payload],
        ids: Optional[Sequence[str]] = None,
        delay_ms: int = 0,
        group: Optional[str] = None,
    ) -> List[str]:
        """Adds several jobs, in transactions of up to 1,000 jobs; returns their ids.
        With ``ids`` (one per payload) each add is idempotent as in ``add``; ``group``, the
        group of every one, as in ``add``."""
        job_group = job_group_bytes(group)
        data = [wrap_payload(to_bytes(p), job_group) for p in payloads]
        delay_ms = _delay(delay_ms)
        if ids is not None:
            checked = [new_job_id(i) for i in ids]
            out = [text for text, _ in checked]
            if len(out) != len(data):
                raise ValueError("add_many: ids and payloads differ in number")
            raw = [jid for _, jid in checked]
            given = True  # the pipeline loads the script before its MULTI when the server lacks it
        else:
            out = [new_id() for _ in data]
            raw = [i.encode() for i in out]
            given = False
        if not self._sharded:
            self._add_batches(raw, data, delay_ms, given, job_group)
            return out
        # One transaction per shard and batch: a MULTI cannot span two slots of a cluster.
        by_shard: Dict[int, List[int]] = {}
        for i, jid in enumerate(raw):
            by_shard.setdefault(shard_of(jid, len(self._parts)), []).append(i)
        for index, members in sorted(by_shard.items()):
            part = self._parts[index]
            part._add_batches([raw[i] for i in members], [data[i] for i in members], delay_ms, given, job_group)
        return out

    def _add_batches(self, raw: List[bytes], data: List[bytes], delay_ms: int, given: bool, job_group) -> None:
        for start in range(0, len(data), ADD_BATCH):
            batch = list(zip(raw[start : start + ADD_BATCH], data[start : start + ADD_BATCH]))
            self._execute_adds(batch, delay_ms, given, job_group)

    # -- inspecting --------------------------------------------------------------------------

    def counts(self, per_shard: bool = False) -> Union[Dict[str, int], List[Dict[str, int]]]:
        """{scheduled, due, pending, in_flight, dead}; scheduled and due count the jobs of every
        group too (``groups()`` has them per group): one more call per 1,000 groups past the
        first 1,000. A sharded queue's figures are its shards' summed; ``per_shard=True``: one
        such dict per shard, shard 0 first."""
        if self._sharded or per_shard:
            each = [part._counts() for part in self._parts]
            if per_shard:
                return each
            return {name: sum(c[name] for c in each) for name in each[0]}
        return self._counts()

    def _counts(self) -> Dict[str, int]:
        k = self.keys

        def read(client):
            # TIME on the queue's node: its clock is the one that schedules the queue
            now = server_ms(client.time())
            pipe = client.pipeline(transaction=False)
            pipe.zcard(k.schedule)
            pipe.zcount(k.schedule, "-inf", now)
            pipe.xlen(k.pending)
            pipe.execute_command("XPENDING", k.pending, GROUP)
            pipe.zcard(k.dead)
            pipe.execute_command("ECHO.GROUPS", k.schedule, "COUNT", MAX_GROUPS_COUNT)
            replies = pipe.execute(raise_on_error=False)
            for value in replies:
                if isinstance(value, Exception) and self._route.cluster and redirected(value):
                    raise value  # the slot moved between the commands: read it all again
            return replies

        zcard, due, xlen, xpending, dead, first_groups = self._route.run(read)
        if isinstance(xpending, Exception):
            if "NOGROUP" not in str(xpending):
                raise xpending
            in_flight = 0
        elif isinstance(xpending, dict):
            in_flight = int(xpending.get("pending", 0))
        else:
            in_flight = int(xpending[0])
        for value in (zcard, due, xlen, dead, first_groups):
            if isinstance(value, Exception):
                raise value
        zcard, due = int(zcard), int(due)
        # the ungrouped jobs (group None) are the schedule's own, counted above
        for group in self._group_pages(MAX_GROUPS_COUNT, first_groups):
            if group.group is not None:
                zcard += group.members
                due += group.due
        return {
            "scheduled": zcard - due,
            "due": due,
            "pending": max(int(xlen) - in_flight, 0),
            "in_flight": in_flight,
            "dead": int(dead),
        }

    def groups(self, page_size: int = MAX_GROUPS_COUNT, per_shard: bool = False):
        """Every group that has jobs waiting in the schedule, in name order, the ungrouped jobs
        first (``group`` None): ECHO.GROUPS' pages of ``page_size`` (1..=1000) groups, one call
        each, from the first cursor to the end. A group that has jobs from the first page to the
        last is listed exactly once; one added or emptied meanwhile at most once.

        A sharded queue lists each group once, its shards' figures summed (``members``, ``due``,
        the limits and ``available``: each shard has its part of a split limit), with the
        earliest ``waiting_until_ms`` of a waiting shard and the latest ``held_until_ms``;
        ``per_shard=True``: one list per shard, shard 0 first."""
        if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= MAX_GROUPS_COUNT:
            raise ValueError("page_size is an integer in 1..=%d, not %r" % (MAX_GROUPS_COUNT, page_size))
        if per_shard:
            return [list(part._group_pages(page_size)) for part in self._parts]
        if not self._sharded:
            return list(self._group_pages(page_size))
        merged: Dict[Optional[str], GroupInfo] = {}
        for part in self._parts:
            for info in part._group_pages(page_size):
                seen = merged.get(info.group)
                merged[info.group] = info if seen is None else _merge_groups(seen, info)
        # name order, the ungrouped first: as one queue's ECHO.GROUPS lists them
        return sorted(
            merged.values(), key=lambda g: (g.group is not None, (g.group or "").encode("utf-8", "surrogateescape"))
        )

    def _group_pages(self, page_size: int, page=None) -> Iterator[GroupInfo]:
        """The groups, page after page from ``page`` (a first page read already) or the start."""
        schedule = self.keys.schedule
        cursor = b"0"
        while True:
            if page is None:
                page = self._route.run(
                    lambda c, at=cursor: c.execute_command("ECHO.GROUPS", schedule, "CURSOR", at, "COUNT", page_size)
                )
            cursor, entries = page
            yield from (_group(entry) for entry in entries)
            if cursor in (b"0", "0"):
                return
            page = None

    def dead(self, offset: int = 0, count: int = 100) -> List[DeadJob]:
        """Dead jobs, oldest death first (over every shard of a sharded queue: ``offset`` and
        ``count`` count in that merged order)."""
        if count <= 0:
            return []
        if not self._sharded:
            return self._dead(offset, count)
        # Each shard's first offset + count deaths hold the merged order's first offset + count.
        heads = [
            part._route.run(lambda c, k=part.keys: c.zrange(k.dead, 0, offset + count - 1, withscores=True))
            for part in self._parts
        ]
        rows = heapq.merge(
            *[[(int(score), member, index) for member, score in head] for index, head in enumerate(heads)]
        )
        chosen = list(rows)[offset : offset + count]
        records: Dict[Tuple[int, bytes], DeadJob] = {}
        for index in sorted({index for _, _, index in chosen}):
            mine = [(member, score) for score, member, i in chosen if i == index]
            for record, (member, _) in zip(self._parts[index]._dead_records(mine), mine):
                records[(index, member)] = record
        return [records[(index, member)] for _, member, index in chosen]

    def _dead(self, offset: int, count: int) -> List[DeadJob]:
        k = self.keys

        def read(client):
            rows = client.zrange(k.dead, offset, offset + count - 1, withscores=True)
            return rows, self._dead_values(client, rows)

        return self._dead_list(*self._route.run(read))

    def _dead_records(self, rows) -> List[DeadJob]:
        """The records of ``rows`` ((id, time of death) read from this queue's dead set)."""
        return self._dead_list(rows, self._route.run(lambda c: self._dead_values(c, rows)))

    def _dead_values(self, client, rows) -> list:
        if not rows:
            return []
        k = self.keys
        pipe = client.pipeline(transaction=False)
        for member, _ in rows:
            pipe.hget(k.attempts, member)
            pipe.hget(k.errors, member)
            pipe.hget(k.jobs, member)
        return pipe.execute()

    @staticmethod
    def _dead_list(rows, values) -> List[DeadJob]:
        out = []
        for i, (member, score) in enumerate(rows):
            attempts, error, value = values[3 * i : 3 * i + 3]
            payload, job_group = unwrap_payload(value) if value is not None else (None, None)
            out.append(
                DeadJob(
                    id=to_str(member),
                    died_at_ms=int(score),
                    attempts=int(attempts) if attempts is not None else 0,
                    error=error.decode("utf-8", "replace") if error is not None else None,
                    payload=payload,
                    group=to_str(job_group) if job_group is not None else None,
                )
            )
        return out

    # -- group limits ------------------------------------------------------------------------

    def set_group_limit(self, group: str, rate: str, burst: int) -> None:
        """Limits one group to ``rate`` (``"5/s"``, ``"300/m"``, ``"2/h"``; n in 1..=1000000)
        with bursts of ``burst`` (1..=1000000), instead of the limit every group gets from the
        server's ``echomq.group-limits`` (ECHO.GROUPLIMIT). It binds from the group's next
        release, keeps the group's bucket at its level (no fresh burst), and stays, as
        configuration, when the group empties, until ``clear_group_limit``. The queue's own
        limit still caps the sum. Arguments the server would refuse are refused here, with
        nothing sent (ValueError, TypeError); the server's own refusal is raised as its error."""
        job_group = self._named(group)
        rate, burst = group_limit_words(rate, burst)
        if self._sharded:
            # each shard releases on its own: its part of the limit (docs/clients.md, Sharded queues)
            rate, burst = split_rate(rate, len(self._parts)), split_burst(burst, len(self._parts))
        for part in self._parts:
            schedule = part.keys.schedule
            part._route.run(lambda c: c.execute_command("ECHO.GROUPLIMIT", schedule, job_group, rate, burst))

    def clear_group_limit(self, group: str) -> None:
        """Removes ``set_group_limit``'s limit of one group: the configured one applies again
        (none when ``echomq.group-limits`` does not list the queue). Nothing to remove is no
        error."""
        job_group = self._named(group)
        for part in self._parts:
            schedule = part.keys.schedule
            part._route.run(lambda c: c.execute_command("ECHO.GROUPLIMIT", schedule, job_group, "DEFAULT"))

    @staticmethod
    def _named(group: str) -> bytes:
        job_group = job_group_bytes(group)
        if job_group is None:
            raise ValueError("a group limit needs a group: the ungrouped jobs have the configured limit")
        return job_group

    # -- recurring jobs ----------------------------------------------------------------------

    def repeat(
        self,
        id: str,
        spec: str,
        payload: Payload,
        jitter_ms: int = 0,
        tz: Optional[str] = None,
        from_ms: Optional[int] = None,
        until_ms: Optional[int] = None,
    ) -> int:
        """Creates or replaces the recurring job ``id`` (ECHO.REPEAT, docs/clients.md, Recurring
        jobs) and returns the fire time (server Unix ms) of its armed occurrence.

        ``spec`` is ``"every:<ms>"`` (ms in 1000..=10^13, from the call, or from ``from_ms``) or
        ``"cron:<minute hour day-of-month month day-of-week>"`` (names, ranges, steps, lists,
        ``@hourly`` and the like), in UTC or in ``tz`` (an IANA zone such as
        ``"Europe/Berlin"``). Each occurrence fires at its nominal time plus a draw in
        ``0..=jitter_ms`` (at most the spec's interval), and none comes before ``from_ms`` or
        after ``until_ms`` (Unix ms).

        The server arms one occurrence at a time, the job ``<id>@<nominal_ms>`` of this queue
        with ``payload`` (stored as ``add`` stores one, never grouped), and arms the next in the
        same step that releases it, however many workers and promoters run: a worker runs it as
        any job (``job.id`` is the occurrence's id), and its success, retries or death never
        touch the definition. A stretch missed while the server was down runs once.

        The same definition again changes nothing and returns the same fire time, so every
        instance of an application may declare its recurring jobs at start; a different one (any
        argument changed, the payload too) replaces it, armed again from now. Arguments the
        server would refuse for their form are refused here, with nothing sent (ValueError,
        TypeError); a cron field or a zone the server does not know is refused by the server
        (``valkey.exceptions.ResponseError``), with nothing written."""
        rid, spec_bytes, words = repeat_words(id, spec, jitter_ms, tz, from_ms, until_ms)
        if self._sharded:
            return self._part_of(rid).repeat(id, spec, payload, jitter_ms, tz, from_ms, until_ms)
        value = wrap_payload(to_bytes(payload), None)
        if not self._stream_made:
            # The release that moves an occurrence into a missing pending would make it a list.
            self._make_stream()
        k = self.keys
        return int(
            self._route.run(
                lambda c: c.execute_command(
                    "ECHO.REPEAT", k.schedule, rid, spec_bytes, *words, b"PAYLOAD", k.jobs, value
                )
            )
        )

    def unrepeat(self, id: str) -> bool:
        """Removes the recurring job ``id`` and its armed occurrence (ECHO.UNREPEAT); False when
        there was none. An occurrence already released runs to its end, as any job."""
        jid = id_bytes(id)
        if self._sharded:
            return self._in_any_shard(jid, lambda part: part.unrepeat(id))
        schedule = self.keys.schedule
        return bool(self._route.run(lambda c: c.execute_command("ECHO.UNREPEAT", schedule, jid)))

    def _in_any_shard(self, jid: bytes, call) -> bool:
        """``call`` on the id's shard, then on the others until one says True: after a growth
        from N to M shards a job added under N may sit in a shard the M layout does not name."""
        own = shard_of(jid, len(self._parts))
        if call(self._parts[own]):
            return True
        return any(call(part) for i, part in enumerate(self._parts) if i != own)

    def repeats(self) -> List[Dict[str, Any]]:
        """The queue's recurring jobs by id (ECHO.REPEATS), each a dict: ``id``, ``spec`` (as
        given), ``jitter_ms``, ``tz`` (``"UTC"`` without one), ``from_ms`` and ``until_ms`` (None
        when not given), ``next_ms`` (the nominal time of the armed occurrence) and
        ``fire_at_ms`` (its fire time, None when its job was removed by hand: ``repeat`` with
        the same definition arms it again)."""
        if self._sharded:
            merged = [r for part in self._parts for r in part.repeats()]
            return sorted(merged, key=lambda r: (r["id"] or "").encode("utf-8", "surrogateescape"))
        schedule = self.keys.schedule
        entries = self._route.run(lambda c: c.execute_command("ECHO.REPEATS", schedule))
        return [_repeat(entry) for entry in entries or []]

    # -- repairing ---------------------------------------------------------------------------

    def requeue(self, id: str) -> bool:
        """Moves a dead job back with its attempts reset, through the release as an ``add`` goes
        (into its group for a grouped job); False when not dead. When the queue cannot take it (a key of another type, a stream out of IDs) the server's
        error is raised and the job stays dead with its attempts and error."""
        k = self.keys
        jid = id_bytes(id)
        if self._sharded:
            return self._in_any_shard(jid, lambda part: part.requeue(id))
        # Sent again after a lost reply: a first try that ran left the job pending, not dead, so
        # the resend changes nothing (and says False).
        return bool(
            self._route.run(
                lambda c: self._requeue_script(
                    keys=[k.dead, k.attempts, k.errors, k.pending, k.schedule, k.jobs],
                    args=[jid, JOB_GROUP_ENVELOPE, GROUP],
                    client=c,
                )
            )
        )

    def remove(self, id: str) -> bool:
        """Removes a job wherever it waits; True when it existed. A run in flight of the job
        writes nothing when it ends: its failure drops the entry without a trace, its success
        deletes what the remove already deleted."""
        k = self.keys
        jid = id_bytes(id)
        if self._sharded:
            return self._in_any_shard(jid, lambda part: part.remove(id))

        def remove(client):
            pipe = client.pipeline(transaction=True)
            pipe.zrem(k.schedule, jid)
            pipe.zrem(k.dead, jid)
            pipe.hdel(k.jobs, jid)
            pipe.hdel(k.attempts, jid)
            pipe.hdel(k.errors, jid)
            return pipe.execute()

        replies = self._route.run(remove)
        return int(replies[2]) == 1

    def purge_dead(self, older_than_ms: int = 0) -> int:
        """Removes the dead jobs that died at least ``older_than_ms`` ago (server clock)."""
        k = self.keys
        cutoff = int(older_than_ms)
        if self._sharded:
            return sum(part.purge_dead(cutoff) for part in self._parts)
        return int(
            self._route.run(
                lambda c: self._purge_script(keys=[k.dead, k.jobs, k.attempts, k.errors], args=[cutoff], client=c)
            )
        )

    # -- release limit -----------------------------------------------------------------------

    def set_limit(self, rate: str, burst: int) -> None:
        """Limits the queue's release to ``rate`` (``"500/s"``, ``"300/m"``, ``"2/h"``, or
        ``"adaptive:<rate>"``; n in 1..=1000000) with bursts of ``burst`` (1..=1000000): its
        entries in the server's ``echomq.release-limits`` (CONFIG SET; the other queues' entries
        kept), on every node the client reaches (a cluster's primaries and replicas, so a
        failover keeps the limit). A sharded queue's shards get ``rate / N`` and
        ``ceil(burst / N)`` each (``split_limit``). A rate or burst the server would refuse is
        refused here, with nothing sent (ValueError, TypeError)."""
        rate, burst = release_limit_words(rate, burst)
        rate, burst = split_limit(rate, burst, len(self._parts))
        mine = [(part.keys.schedule, rate.encode(), str(burst).encode()) for part in self._parts]
        self._write_release_limits(mine)

    def clear_limit(self) -> None:
        """Removes the queue's entries (every shard's) from ``echomq.release-limits`` on every
        node; the other queues' entries are kept. Nothing to remove is no error."""
        self._write_release_limits([])

    def _write_release_limits(self, mine: List[Tuple[bytes, bytes, bytes]]) -> None:
        schedules = {part.keys.schedule for part in self._parts}
        if is_cluster(self.client):
            nodes = [self.client.get_valkey_connection(node) for node in self.client.get_nodes()]
        else:
            nodes = [self.client]
        for node in nodes:
            # "CONFIG", "GET" as two words: valkey-py's CONFIG GET parser decodes the value, which
            # would mangle another queue's name that is not UTF-8 when it is written back
            reply = node.execute_command("CONFIG", "GET", "echomq.release-limits")
            pairs = list(reply.items()) if isinstance(reply, dict) else list(zip(reply[::2], reply[1::2]))
            text = next((value for _, value in pairs), b"") or b""
            words = (text.encode() if isinstance(text, str) else bytes(text)).split()
            kept = [tuple(words[i : i + 3]) for i in range(0, len(words) - 2, 3) if words[i] not in schedules]
            node.config_set("echomq.release-limits", b" ".join(w for entry in kept + mine for w in entry))

    def worker(self, handler, **options):
        """Shorthand for ``Worker(self, handler, **options)``."""
        return Worker(self, handler, **options)
