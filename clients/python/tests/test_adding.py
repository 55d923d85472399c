"""Adding: delays and ids checked before anything is sent, and a refused enqueue leaves no payload
behind (a given id would otherwise be taken for good)."""

from __future__ import annotations

import pytest
from valkey.exceptions import ResponseError

import echomq
from helpers import keys

def test_delay_out_of_range_is_refused_before_sending(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    for bad in (10_000_000_000_001, -1, 1.5):
        with pytest.raises(ValueError, match=r"0\.\.=10000000000000"):
            q.add(b"x", id="ghost", delay_ms=bad)
        with pytest.raises(ValueError, match=r"0\.\.=10000000000000"):
            q.add(b"x", delay_ms=bad)
        with pytest.raises(ValueError, match=r"0\.\.=10000000000000"):
            q.add_many([b"x"], ids=["ghost"], delay_ms=bad)
    assert client.exists(*k.values()) == 0, "nothing was written"
    # The id is free: a new add with it is a job.
    assert q.add(b"real", id="ghost", delay_ms=10_000_000_000_000) == "ghost"
    assert client.hget(k["jobs"], "ghost") == b"real"
    assert client.zscore(k["schedule"], "ghost") is not None


def test_refused_enqueue_takes_the_payload_back(client, qname):
    """A schedule key of the wrong type: ECHO.ADD is refused, delayed or not, the error reaches the
    caller and the payload is not left behind (a given id would otherwise be taken for good); the
    add script, on a queue without a stream yet, makes none."""
    q = echomq.Queue(client, qname)
    k = keys(qname)
    client.set(k["schedule"], "not a sorted set")
    for delay_ms in (5, 0):
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            q.add(b"p", id="given", delay_ms=delay_ms)
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            q.add_many([b"p1", b"p2"], ids=["m1", "m2"], delay_ms=delay_ms)
    assert client.exists(k["pending"]) == 0
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        q.add(b"p")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        q.add(b"p", delay_ms=5)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        q.add_many([b"a", b"b"], delay_ms=5)
    assert client.hlen(k["jobs"]) == 0, client.hgetall(k["jobs"])
    client.delete(k["schedule"])
    assert q.add(b"second", id="given", delay_ms=5) == "given"
    assert client.hget(k["jobs"], "given") == b"second"


def test_ids_must_be_valid_utf8(client, qname):
    q = echomq.Queue(client, qname)
    for bad in (b"\xff\xfe", "\udcff", b"", ""):
        with pytest.raises(ValueError):
            q.add(b"x", id=bad)
        with pytest.raises(ValueError):
            q.add_many([b"x"], ids=[bad])
    assert client.hlen("{%s}:jobs" % qname) == 0
    assert q.add(b"x", id=b"caf\xc3\xa9") == "café"
    assert q.add_many([b"y"], ids=[b"bytes-id"]) == ["bytes-id"]
