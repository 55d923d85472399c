"""Holds (RetryAfter, ECHO.HOLD): RetryAfter(0) lifts no other worker's hold, a lifted hold is seen
within seconds, and entries taken while the queue is held are handed back on close."""

from __future__ import annotations

import echomq
from conftest import wait_for
from helpers import held_and_read, held_until, in_flight, keys, running

def test_retry_after_zero_keeps_another_workers_hold(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    jid = q.add(b"x")
    holds = []

    def handler(job):
        # another worker's RetryAfter(5000), written while this one runs
        client.execute_command("ECHO.HOLD", k["schedule"], 5000)
        holds.append(held_until(client, qname))
        raise echomq.RetryAfter(0)

    try:
        with running(q, handler, lease_ms=60_000):
            wait_for(lambda: client.hexists(k["errors"], jid), what="the failure")
            wait_for(lambda: client.zscore(k["schedule"], jid) is not None, what="the retry")
            assert holds and held_until(client, qname) == holds[0], "RetryAfter(0) must not lift a hold"
    finally:
        client.execute_command("ECHO.HOLD", k["schedule"], 0)


def test_a_lifted_hold_is_seen_within_seconds(client, qname):
    with held_and_read(client, qname) as (runs, jid):
        assert runs == []
        client.execute_command("ECHO.HOLD", keys(qname)["schedule"], 0)
        wait_for(lambda: runs == [jid], timeout=15, what="the job to start after the hold is lifted")


def test_entries_waiting_out_a_hold_are_handed_back_on_close(client, qname):
    with held_and_read(client, qname) as (runs, jid):
        pass
    assert runs == []
    assert in_flight(client, qname) == 0, "handed back, not left leased"
    [(_, fields)] = client.xrange(keys(qname)["pending"])
    assert fields == {b"job": jid.encode()}


def test_an_add_while_held_waits_in_the_schedule(client, qname):
    """A hold governs first runs too: an add while the queue is held goes into the schedule, due
    now, and into pending once the hold ends (the server decides, through ECHO.ADD)."""
    q = echomq.Queue(client, qname)
    k = keys(qname)
    client.execute_command("ECHO.HOLD", k["schedule"], 60_000)
    try:
        jid = q.add(b"x")
        named = q.add(b"y", id="held-1")
        assert client.xlen(k["pending"]) == 0
        assert client.zcard(k["schedule"]) == 2
        assert client.zscore(k["schedule"], jid) is not None and client.zscore(k["schedule"], named) is not None
        assert client.hget(k["jobs"], jid) == b"x"
    finally:
        client.execute_command("ECHO.HOLD", k["schedule"], 0)
    assert client.execute_command("ECHO.PROMOTE", k["schedule"], k["pending"]) == 2
    assert sorted(f[b"job"] for _, f in client.xrange(k["pending"])) == sorted([jid.encode(), b"held-1"])
