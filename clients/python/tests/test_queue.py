"""Queue operations and scenario 1 (payloads) and 2 (delays)."""

from __future__ import annotations

import os
import threading

import pytest
import valkey

import echomq
from conftest import wait_for
from helpers import running, server_ms


def test_ids_are_time_ordered_and_unique(client, qname):
    q = echomq.Queue(client, qname)
    ids = q.add_many(["x"] * 50)
    assert len(set(ids)) == 50
    for i in ids:
        ms, rnd = i.split("-")
        assert len(ms) == 13 and ms.isdigit()
        assert len(rnd) == 16 and int(rnd, 16) >= 0 and rnd == rnd.lower()
    assert [i[:13] for i in ids] == sorted(i[:13] for i in ids)


def test_decode_responses_is_refused(server, qname):
    with pytest.raises(ValueError, match="decode_responses"):
        echomq.Queue(valkey.Valkey(port=server.port, decode_responses=True), qname)


def test_scenario1_payloads_round_trip(client, qname):
    q = echomq.Queue(client, qname)
    binary = bytes(range(256))
    big = os.urandom(1024 * 1024)
    expected = {
        q.add(binary): binary,
        q.add(b""): b"",
        q.add(big): big,
        q.add("same"): b"same",
        q.add("same"): b"same",
        q.add("héllo"): "héllo".encode(),
    }
    assert len(expected) == 6, "two equal payloads must be two jobs"
    assert q.add(b"given", id="fixed-id") == "fixed-id"
    assert q.add(b"other", id="fixed-id") == "fixed-id"
    expected["fixed-id"] = b"given"
    seen = {}
    lock = threading.Lock()

    def handler(job):
        with lock:
            seen.setdefault(job.id, []).append(job.payload)

    with running(q, handler):
        wait_for(lambda: len(seen) == len(expected), what="all jobs to run")
        wait_for(lambda: q.counts()["in_flight"] == 0 and client.hlen("{%s}:jobs" % qname) == 0, what="acks")
    assert set(seen) == set(expected)
    for jid, payload in expected.items():
        assert seen[jid] == [payload], jid
    assert q.counts() == {"scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0}
    # After it is done, the id is free again.
    assert q.add(b"again", id="fixed-id") == "fixed-id"
    assert client.hget("{%s}:jobs" % qname, "fixed-id") == b"again"


def test_scenario2_delay_by_server_clock(client, qname):
    q = echomq.Queue(client, qname)
    started = {}

    def handler(job):
        started[job.id] = server_ms(client)

    with running(q, handler):
        before = server_ms(client)
        jid = q.add(b"later", delay_ms=700)
        many = q.add_many([b"a", b"b"], delay_ms=700)
        given = q.add(b"given", id="delayed-given", delay_ms=700)
        wait_for(lambda: len(started) == 4, what="delayed jobs to run")
    for key in [jid, *many, given]:
        assert started[key] >= before + 700, (key, started[key] - before)


def test_scenario2_delay_with_server_promotion(client, qname):
    """The same with the queue listed in echomq.auto-promote: the worker does not promote."""
    q = echomq.Queue(client, qname)
    old = client.config_get("echomq.auto-promote").get(b"echomq.auto-promote", b"")
    pair = "{%s}:schedule {%s}:pending" % (qname, qname)
    client.config_set("echomq.auto-promote", pair)
    try:
        started = {}

        def handler(job):
            started[job.id] = server_ms(client)

        with running(q, handler) as worker:
            assert worker._self_promote is False
            before = server_ms(client)
            jid = q.add(b"later", delay_ms=700)
            wait_for(lambda: jid in started, what="delayed job to run")
        assert started[jid] >= before + 700
    finally:
        client.config_set("echomq.auto-promote", old)


def test_add_many_with_ids_is_idempotent(client, qname):
    q = echomq.Queue(client, qname)
    client.script_flush()
    assert q.add_many([b"a", b"b"], ids=["x", "y"]) == ["x", "y"]
    assert q.add_many([b"c", b"d", b"e"], ids=["x", "y", "z"], delay_ms=50_000) == ["x", "y", "z"]
    assert client.hgetall("{%s}:jobs" % qname) == {b"x": b"a", b"y": b"b", b"z": b"e"}
    assert q.counts() == {"scheduled": 1, "due": 0, "pending": 2, "in_flight": 0, "dead": 0}


def test_counts_dead_remove(client, qname):
    q = echomq.Queue(client, qname)
    a = q.add(b"a")
    b = q.add(b"b", delay_ms=60_000)
    c = q.add(b"c")
    assert q.counts() == {"scheduled": 1, "due": 0, "pending": 2, "in_flight": 0, "dead": 0}
    assert q.remove(b) is True
    assert q.remove(b) is False
    assert q.remove(a) is True
    assert q.counts()["scheduled"] == 0
    seen = []
    with running(q, lambda job: seen.append(job.id)):
        wait_for(lambda: c in seen, what="job c")
        wait_for(lambda: q.counts()["pending"] == 0 and q.counts()["in_flight"] == 0, what="acks")
    assert seen == [c], "a removed job is dropped, not run"
    assert client.xlen("{%s}:pending" % qname) == 0
    assert q.requeue("nope") is False
    assert q.dead() == []
    assert q.purge_dead(0) == 0
