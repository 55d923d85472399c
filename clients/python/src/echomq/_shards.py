"""The rules of a sharded queue (docs/clients.md, Sharded queues): the shards' tags, a job's shard,
and the split of a release limit. Pure functions, so that producers and workers of every language
agree on them without asking the server (protocol/shards.json pins them)."""

from __future__ import annotations

import re
from typing import List, Tuple, Union

from ._protocol import MAX_SHARDS

_SLOTS = 16384
#: ECHO's limits take n in 1..=1000000 per unit (and a burst up to the same)
MAX_RATE = 1_000_000
MAX_BURST = 1_000_000
#: ms per unit, shortest first: a split that does not divide goes on to the next longer unit
_UNITS = (("s", 1000), ("m", 60_000), ("h", 3_600_000))
_UNIT_MS = dict(_UNITS)


def _crc16_table() -> List[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


_TABLE = _crc16_table()


def crc16(data: bytes) -> int:
    """CRC16-CCITT (XMODEM: poly 0x1021, init 0), the one Valkey's keyHashSlot takes."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _TABLE[((crc >> 8) ^ byte) & 0xFF]
    return crc


def _raw(key: Union[bytes, bytearray, str]) -> bytes:
    if isinstance(key, str):
        # surrogateescape: an id read back from the server that is not UTF-8 hashes as its bytes
        return key.encode("utf-8", "surrogateescape")
    return bytes(key)


def keyslot(key: Union[bytes, bytearray, str]) -> int:
    """The slot ``CLUSTER KEYSLOT`` answers: CRC16 of the key mod 16384, or of its hash tag, the
    bytes between the first ``{`` and the first ``}`` after it when there are any."""
    data = _raw(key)
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return crc16(data) % _SLOTS


def check_shards(shards) -> int:
    """A shard count, 1..=max_shards; refused with nothing sent."""
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise TypeError("shards is an integer, not %s" % type(shards).__name__)
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError("shards must be in 1..=%d, not %d" % (MAX_SHARDS, shards))
    return shards


def shard_tags(name: str, shards: int) -> List[str]:
    """The hash tags of a queue's shards: ``name``, then ``name#i``, or ``name#i.k`` with the
    smallest k whose slot no earlier shard has. The first N of any layout are those of N shards,
    which is what lets a queue grow without moving a job."""
    check_shards(shards)
    tags = [name]
    slots = {keyslot(name)}
    for i in range(1, shards):
        tag = "%s#%d" % (name, i)
        k = 0
        while keyslot(tag) in slots:
            k += 1
            tag = "%s#%d.%d" % (name, i, k)
        slots.add(keyslot(tag))
        tags.append(tag)
    return tags


def shard_of(job_id: Union[bytes, str], shards: int) -> int:
    """A job's shard: its id's KEYSLOT mod the shard count."""
    return keyslot(job_id) % shards


_RELEASE_RATE = re.compile(r"(adaptive:)?(0|[1-9][0-9]*)/([smh])", re.IGNORECASE | re.ASCII)


def release_limit_words(rate, burst) -> Tuple[str, int]:
    """A release limit checked as the server reads ``echomq.release-limits``, before anything is
    sent: ``<n>/s``, ``<n>/m``, ``<n>/h`` (n in 1..=1000000, no sign, no leading zero, the unit in
    any case) or ``adaptive:`` and such a rate, the ceiling; a burst in 1..=1000000."""
    if not isinstance(rate, str):
        raise TypeError("a rate is a str such as '500/s', not %s" % type(rate).__name__)
    match = _RELEASE_RATE.fullmatch(rate)
    if match is None or not 1 <= int(match.group(2)) <= MAX_RATE:
        raise ValueError(
            "rate '%s' is not <n>/s, <n>/m or <n>/h with n in 1..=%d, or adaptive:<rate>" % (rate, MAX_RATE)
        )
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_BURST:
        raise ValueError("burst '%s' is not an integer in 1..=%d" % (burst, MAX_BURST))
    return rate, burst


def split_rate(rate: str, shards: int) -> str:
    """A shard's part of ``rate`` over ``shards``: divided in its own unit when the count divides
    it, else in the first longer unit (``/m``, then ``/h``) where it divides and stays within
    1000000, else floored in the longest unit within that bound, at least ``1/h``. ``adaptive:``
    splits its ceiling. One shard: the rate as given."""
    match = _RELEASE_RATE.fullmatch(rate)
    if match is None:
        raise ValueError("rate '%s' is not <n>/s, <n>/m or <n>/h, or adaptive:<rate>" % rate)
    if shards == 1:
        return rate
    prefix = "adaptive:" if match.group(1) else ""
    n, unit = int(match.group(2)), match.group(3).lower()
    own_ms = _UNIT_MS[unit]
    longer = [(u, ms) for u, ms in _UNITS if ms >= own_ms]
    for u, ms in longer:
        scaled = n * (ms // own_ms)
        if scaled % shards == 0 and scaled // shards <= MAX_RATE:
            return "%s%d/%s" % (prefix, scaled // shards, u)
    within = [(u, n * (ms // own_ms) // shards) for u, ms in longer if n * (ms // own_ms) // shards <= MAX_RATE]
    u, part = within[-1]  # the own unit is always within: n / shards <= n
    if part < 1:
        return "%s1/h" % prefix
    return "%s%d/%s" % (prefix, part, u)


def split_burst(burst: int, shards: int) -> int:
    """A shard's burst: ``ceil(burst / shards)``, so no shard is left without one."""
    return -(-burst // shards)


def split_limit(rate: str, burst: int, shards: int) -> Tuple[str, int]:
    """``(rate, burst)`` of each of ``shards`` shards of a queue limited to ``rate`` and
    ``burst``."""
    return split_rate(rate, shards), split_burst(burst, shards)
