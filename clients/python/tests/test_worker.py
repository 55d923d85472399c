"""Scenarios 3-5: concurrency, retries and the dead set, RetryAfter."""

from __future__ import annotations

import threading
import time

import echomq
from conftest import wait_for
from helpers import queue_keys, running, server_ms


def test_scenario3_concurrency_is_exact(client, qname):
    q = echomq.Queue(client, qname)
    lock = threading.Lock()
    state = {"running": 0, "max": 0, "done": 0}

    def handler(job):
        with lock:
            state["running"] += 1
            state["max"] = max(state["max"], state["running"])
        time.sleep(0.2)
        with lock:
            state["running"] -= 1
            state["done"] += 1

    q.add_many([b"job"] * 100)
    with running(q, handler, concurrency=20):
        wait_for(lambda: state["done"] == 100, timeout=60, what="100 jobs")
    assert state["max"] == 20


def test_scenario4_retries_then_success(client, qname):
    q = echomq.Queue(client, qname)
    attempts = []

    def handler(job):
        attempts.append(job.attempt)
        if job.attempt <= 2:
            raise RuntimeError("failure %d" % job.attempt)

    jid = q.add(b"flaky")
    with running(q, handler, backoff="fixed:100"):
        wait_for(lambda: attempts == [1, 2, 3], what="three runs")
        wait_for(lambda: not client.hexists("{%s}:jobs" % qname, jid), what="success written")
    assert attempts == [1, 2, 3]
    for key in ("jobs", "attempts", "errors"):
        assert not client.hexists("{%s}:%s" % (qname, key), jid)
    assert client.zcard("{%s}:schedule" % qname) == 0
    assert client.zcard("{%s}:dead" % qname) == 0
    assert client.xlen("{%s}:pending" % qname) == 0
    assert q.counts() == {"scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0}


def test_scenario4_dead_requeue_purge(client, qname):
    q = echomq.Queue(client, qname)
    runs = []

    def handler(job):
        runs.append(job.attempt)
        raise ValueError("broken on attempt %d" % job.attempt)

    jid = q.add(b"\x00doomed\xff")
    with running(q, handler, backoff="fixed:50", max_attempts=3):
        wait_for(lambda: q.counts()["dead"] == 1, what="the job to die")
        assert runs == [1, 2, 3]
        [record] = q.dead(0, 10)
        assert record.id == jid
        assert record.attempts == 3
        assert record.error == "broken on attempt 3"
        assert record.payload == b"\x00doomed\xff"
        assert record.died_at_ms <= server_ms(client)
        assert q.requeue(jid) is True
        assert q.requeue(jid) is False
        wait_for(lambda: len(runs) >= 4, what="the requeued run")
        assert runs[3] == 1, "a requeued job starts again at attempt 1"
        wait_for(lambda: q.counts()["dead"] == 1 and len(runs) == 6, what="the job to die again")
    assert runs == [1, 2, 3, 1, 2, 3]
    assert q.purge_dead(0) == 1
    assert q.dead() == []
    for key in queue_keys(qname):
        if not key.endswith(":pending"):
            assert client.exists(key) == 0, key
    assert client.xlen("{%s}:pending" % qname) == 0


def test_error_message_is_cut(client, qname):
    q = echomq.Queue(client, qname)

    def handler(job):
        raise RuntimeError("é" * 5000)

    q.add(b"x")
    with running(q, handler, max_attempts=1):
        wait_for(lambda: q.counts()["dead"] == 1, what="dead")
    [record] = q.dead()
    assert len(record.error.encode()) <= 4096
    assert record.error == "é" * 2048


def test_purge_dead_keeps_recent(client, qname):
    q = echomq.Queue(client, qname)

    def handler(job):
        raise RuntimeError("no")

    q.add_many([b"1", b"2"])
    with running(q, handler, max_attempts=1):
        wait_for(lambda: q.counts()["dead"] == 2, what="dead")
    assert q.purge_dead(3_600_000) == 0
    assert q.counts()["dead"] == 2
    assert q.purge_dead(0) == 2


def test_scenario5_retry_after_holds_every_worker(client, qname):
    q = echomq.Queue(client, qname)
    lock = threading.Lock()
    starts = []  # (job id, attempt, server ms at start)

    def handler(job):
        now = server_ms(client)
        with lock:
            starts.append((job.id, job.attempt, now))
        if job.id == "trigger" and job.attempt == 1:
            raise echomq.RetryAfter(500)

    limits_key = "{%s}:schedule" % qname

    def held_until():
        reply = client.execute_command("ECHO.LIMITS", limits_key)
        if not isinstance(reply, dict):
            reply = dict(zip(reply[::2], reply[1::2]))
        return int(reply[b"held-until-ms"] or 0)

    with running(q, handler, backoff="fixed:50", concurrency=4), running(q, handler, backoff="fixed:50", concurrency=4):
        q.add(b"t", id="trigger")
        until = wait_for(held_until, what="the hold")
        # While held: jobs waiting in pending (read by both workers, kept) and in schedule.
        now_ids = q.add_many([b"now"] * 8)
        later_ids = q.add_many([b"later"] * 4, delay_ms=100)
        wait_for(lambda: len(starts) == 1 + 1 + 12, what="every job to run")
    first = starts[0]
    assert first[:2] == ("trigger", 1)
    assert until >= first[2] + 500
    for jid, attempt, at in starts[1:]:
        assert at >= until, (jid, attempt, until - at)
    assert {s[0] for s in starts[1:]} == {"trigger", *now_ids, *later_ids}
