"""Shared helpers: key names, ids, time."""

from __future__ import annotations

import os
import re
import secrets
import time
from typing import List, Optional, Tuple, Union

from valkey.exceptions import ResponseError

from ._protocol import (
    GROUP,
    JOB_GROUP_ENVELOPE,
    MAX_ERROR_BYTES,
    MAX_GROUP_BURST,
    MAX_GROUP_RATE,
    MAX_JOB_GROUP_BYTES,
    MAX_EVERY_MS,
    MAX_REPEAT_ID_BYTES,
    MIN_EVERY_MS,
)

Payload = Union[bytes, bytearray, memoryview, str]


class Keys:
    """The six keys of a queue, under one hash tag."""

    __slots__ = ("name", "schedule", "pending", "dead", "jobs", "attempts", "errors")

    def __init__(self, name: str) -> None:
        if not name:
            raise ValueError("the queue name must not be empty")
        self.name = name
        tag = "{" + name + "}:"
        self.schedule = (tag + "schedule").encode()
        self.pending = (tag + "pending").encode()
        self.dead = (tag + "dead").encode()
        self.jobs = (tag + "jobs").encode()
        self.attempts = (tag + "attempts").encode()
        self.errors = (tag + "errors").encode()


def new_id() -> str:
    """A time-ordered unique id: 13 digits of Unix ms, '-', 16 hex digits."""
    return "%013d-%s" % (time.time_ns() // 1_000_000, secrets.token_hex(8))


def to_bytes(payload: Payload) -> bytes:
    if isinstance(payload, str):
        return payload.encode("utf-8")
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    raise TypeError("a payload is bytes or str, not %s" % type(payload).__name__)


def to_str(value: Union[bytes, str]) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def id_bytes(job_id: Union[bytes, str]) -> bytes:
    """An id to look a job up with (requeue, remove): also one read back from the server that is
    not valid UTF-8 (as ``dead()`` returns it, surrogate-escaped), so such a job can be repaired."""
    if isinstance(job_id, bytes):
        data = job_id
    else:
        data = str(job_id).encode("utf-8", "surrogateescape")
    if not data:
        raise ValueError("a job id must not be empty")
    return data


def new_job_id(job_id: Union[bytes, bytearray, str]) -> Tuple[str, bytes]:
    """An id given to ``add``: a non-empty string of valid UTF-8 (every library must be able to
    hold it as a string). Returns it as str and as bytes; ValueError otherwise."""
    if isinstance(job_id, (bytes, bytearray, memoryview)):
        data = bytes(job_id)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("a job id must be valid UTF-8: %r" % data) from None
    elif isinstance(job_id, str):
        text = job_id
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a job id must be valid UTF-8: %r" % text) from None
    else:
        raise TypeError("a job id is str or bytes, not %s" % type(job_id).__name__)
    if not data:
        raise ValueError("a job id must not be empty")
    return text, data


def job_group_bytes(group: Union[bytes, bytearray, str, None]) -> Optional[bytes]:
    """A job's group (``add(..., group=...)``; not the stream's consumer group) checked as
    ECHO.ADD checks it, before anything is sent: 1..=1024 bytes. None: no group."""
    if group is None:
        return None
    if isinstance(group, str):
        data = group.encode("utf-8")
    elif isinstance(group, (bytes, bytearray, memoryview)):
        data = bytes(group)
    else:
        raise TypeError("a job group is str or bytes, not %s" % type(group).__name__)
    if not 1 <= len(data) <= MAX_JOB_GROUP_BYTES:
        raise ValueError("a job group must be 1..=%d bytes, not %d" % (MAX_JOB_GROUP_BYTES, len(data)))
    return data


_RATE = re.compile(r"([1-9][0-9]*)/[smhSMH]")


def group_limit_words(rate: str, burst: int) -> Tuple[str, int]:
    """A group's limit checked as ECHO.GROUPLIMIT checks it, before anything is sent: ``rate``
    ``<n>/s``, ``<n>/m`` or ``<n>/h`` with n in 1..=1000000 (no sign, no leading zero; the
    unit in any case; a fixed rate, not ``adaptive:``), ``burst`` an integer in 1..=1000000."""
    if not isinstance(rate, str):
        raise TypeError("a group's rate is a str such as '5/s', not %s" % type(rate).__name__)
    match = _RATE.fullmatch(rate)
    if match is None or int(match.group(1)) > MAX_GROUP_RATE:
        raise ValueError(
            "a group's rate is <n>/s, <n>/m or <n>/h with n in 1..=%d, not %r" % (MAX_GROUP_RATE, rate)
        )
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_GROUP_BURST:
        raise ValueError("a group's burst is an integer in 1..=%d, not %r" % (MAX_GROUP_BURST, burst))
    return rate, burst


_EVERY = re.compile(r"every:(0|[1-9][0-9]*)", re.IGNORECASE | re.ASCII)
_CRON = re.compile(r"cron:.*\S.*", re.IGNORECASE | re.DOTALL)
_I64 = (-(2**63), 2**63 - 1)


def _integer(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s is an integer, not %s" % (name, type(value).__name__))
    if not low <= value <= high:
        raise ValueError("%s must be in %d..=%d, not %d" % (name, low, high, value))
    return value


def repeat_words(
    repeat_id, spec, jitter_ms, tz, from_ms, until_ms
) -> Tuple[bytes, bytes, List[Union[bytes, int]]]:
    """ECHO.REPEAT's arguments checked as the server checks them, before anything is sent: the
    id (1..=1024 bytes of UTF-8: its occurrences ``<id>@<nominal_ms>`` are job ids), the spec
    (``every:<ms>`` with ms in 1000..=10^13, or ``cron:`` and its fields, which the server reads),
    the jitter (0..= the interval of ``every:``, 0..=10^13 for a cron), the zone (a non-empty
    name; the server knows which exist), and ``from_ms <= until_ms`` (Unix ms, 64-bit). Returns
    the id and the spec as bytes and the option words; JITTER and TZ only when given, so that
    every library sends one definition in the same words (a definition declared again changes
    nothing only when it is the same as written)."""
    _, rid = new_job_id(repeat_id)
    if len(rid) > MAX_REPEAT_ID_BYTES:
        raise ValueError("a recurring job's id must be 1..=%d bytes, not %d" % (MAX_REPEAT_ID_BYTES, len(rid)))
    if not isinstance(spec, str):
        raise TypeError("a spec is a str such as 'every:60000' or 'cron:0 * * * *', not %s" % type(spec).__name__)
    every = _EVERY.fullmatch(spec)
    if every is not None:
        interval = int(every.group(1))
        if not MIN_EVERY_MS <= interval <= MAX_EVERY_MS:
            raise ValueError("every:<ms> takes ms in %d..=%d, not %d" % (MIN_EVERY_MS, MAX_EVERY_MS, interval))
        jitter_bound = interval
    elif _CRON.fullmatch(spec) is not None:
        jitter_bound = MAX_EVERY_MS  # the spec's smallest interval: the server knows it
    else:
        raise ValueError("a spec is every:<ms> (no sign, no leading zero) or cron:<5 fields>, not %r" % spec)
    words: List[Union[bytes, int]] = []
    jitter_ms = _integer("jitter_ms", jitter_ms, 0, jitter_bound)
    if jitter_ms:
        words += [b"JITTER", jitter_ms]
    if tz is not None:
        if not isinstance(tz, str):
            raise TypeError("tz is a str such as 'Europe/Berlin', not %s" % type(tz).__name__)
        if not tz:
            raise ValueError("tz must not be empty (None: UTC)")
        words += [b"TZ", tz.encode("utf-8")]
    if from_ms is not None:
        words += [b"FROM", _integer("from_ms", from_ms, *_I64)]
    if until_ms is not None:
        words += [b"UNTIL", _integer("until_ms", until_ms, *_I64)]
    if from_ms is not None and until_ms is not None and until_ms < from_ms:
        raise ValueError("until_ms (%d) must not be before from_ms (%d)" % (until_ms, from_ms))
    return rid, spec.encode("utf-8"), words


def wrap_payload(payload: bytes, job_group: Optional[bytes]) -> bytes:
    """The value stored in ``{name}:jobs``: the payload itself, or for a grouped job the envelope
    ``\\0echomq-group:<n>:<group>`` before it, so that a worker of any language retries the job into
    its group. A payload that starts like an envelope is wrapped with n = 0 (no group), so it is
    never misread; any other payload without a group is stored as it is."""
    if job_group is None:
        if not payload.startswith(JOB_GROUP_ENVELOPE):
            return payload
        job_group = b""
    return b"%s%d:%s%s" % (JOB_GROUP_ENVELOPE, len(job_group), job_group, payload)


def unwrap_payload(value: bytes) -> Tuple[bytes, Optional[bytes]]:
    """``wrap_payload`` undone: (payload, job group or None). A value that is not a whole envelope
    is a payload as it is."""
    if not value.startswith(JOB_GROUP_ENVELOPE):
        return value, None
    start = len(JOB_GROUP_ENVELOPE)
    colon = value.find(b":", start, start + 5)
    digits = value[start:colon]
    if colon < 0 or not digits.isdigit():
        return value, None
    n = int(digits)
    end = colon + 1 + n
    if n > MAX_JOB_GROUP_BYTES or end > len(value):
        return value, None
    return value[end:], (value[colon + 1 : end] or None)


def server_ms(time_reply) -> int:
    """TIME's reply (as valkey-py parses it, or raw) in Unix ms."""
    sec, usec = time_reply
    return int(sec) * 1000 + int(usec) // 1000


def error_text(exc: BaseException) -> bytes:
    text = str(exc) or type(exc).__name__
    data = text.encode("utf-8", "replace")
    if len(data) > MAX_ERROR_BYTES:
        data = data[:MAX_ERROR_BYTES].decode("utf-8", "ignore").encode("utf-8")
    return data


def check_client(client) -> None:
    # get_connection_kwargs: the pool's options for a Valkey, every node's for a ValkeyCluster
    # (which has no connection_pool)
    get = getattr(client, "get_connection_kwargs", None)
    kwargs = get() if get is not None else getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    if kwargs.get("decode_responses"):
        raise ValueError(
            "echomq needs a client made with decode_responses=False: payloads are bytes"
        )


def consumer_name() -> bytes:
    import socket

    return ("%s-%d-%s" % (socket.gethostname(), os.getpid(), secrets.token_hex(3))).encode()


def make_stream(node, pending) -> None:
    """``XGROUP CREATE pending workers 0 MKSTREAM`` on the queue's node: the stream and the
    workers' group, where a group that exists already (``BUSYGROUP``) is success. ``0``: entries
    added before the group are delivered."""
    try:
        node.xgroup_create(pending, GROUP, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
