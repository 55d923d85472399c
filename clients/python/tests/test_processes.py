"""Scenarios 6 and 7: leases, takeover after SIGKILL, SIGTERM shutdown (worker processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import valkey

import echomq
from conftest import CROSSWORKER, wait_for
from helpers import running


@pytest.fixture
def client(server):
    """The worker processes speak RESP2; so does this side."""
    c = server.client()
    yield c
    c.close()


def test_scenario6_slow_job_is_not_run_twice(client, qname, crossworkers):
    q = echomq.Queue(client, qname)
    runs = []
    started = "%s:started" % qname
    done = "%s:done" % qname
    # Two live workers: one in this process, one in another; both with a short lease.
    other = crossworkers(qname, "--lease-ms", "300", "--sleep-ms", "1000", "--started", started, "--done", done)

    def handler(job):
        client.rpush(started, job.id)
        runs.append(job.id)
        time.sleep(1.0)
        client.hincrby(done, job.id, 1)

    with running(q, handler, lease_ms=300):
        ids = q.add_many([b"slow"] * 4)
        wait_for(lambda: client.hlen(done) == 4, timeout=60, what="the slow jobs")
        time.sleep(0.7)  # more than two leases: a wrong takeover would show up now
    assert other.stop() == 0
    assert sorted(x.decode() for x in client.lrange(started, 0, -1)) == sorted(ids), "each job ran once"
    assert {k.decode(): int(v) for k, v in client.hgetall(done).items()} == {i: 1 for i in ids}
    assert q.counts() == {"scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0}


def test_scenario6_killed_worker_job_is_taken_over(client, qname, crossworkers):
    q = echomq.Queue(client, qname)
    started = "%s:started" % qname
    done = "%s:done" % qname
    victim = crossworkers(qname, "--lease-ms", "1000", "--sleep-ms", "60000", "--started", started, "--concurrency", "2")
    ids = q.add_many([b"a", b"b"])
    wait_for(lambda: client.llen(started) == 2, what="the victim to start both jobs")
    victim.stop(signal.SIGKILL)
    killed_at = time.monotonic()
    survivor = crossworkers(qname, "--lease-ms", "1000", "--done", done)
    wait_for(lambda: client.hlen(done) == 2, timeout=30, what="the takeover")
    assert time.monotonic() - killed_at < 10.0, "taken over within 10 leases"
    assert {k.decode(): int(v) for k, v in client.hgetall(done).items()} == {i: 1 for i in ids}
    assert survivor.stop() == 0
    assert q.counts() == {"scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0}


def test_max_deliveries_sends_a_killer_job_to_dead(client, qname, crossworkers):
    q = echomq.Queue(client, qname)
    started = "%s:started" % qname
    jid = q.add(b"killer", id="killer")
    for n in range(1, 4):
        w = crossworkers(qname, "--lease-ms", "300", "--sleep-ms", "60000", "--started", started, "--max-deliveries", "3")
        wait_for(lambda: client.llen(started) == n, what="delivery %d" % n)
        w.stop(signal.SIGKILL)
    # The failure counts as an attempt: with max_attempts=1 it is the last one.
    w = crossworkers(qname, "--lease-ms", "300", "--max-deliveries", "3", "--max-attempts", "1")
    wait_for(lambda: q.counts()["dead"] == 1, what="the job to die")
    assert w.stop() == 0
    assert client.llen(started) == 3, "not run a fourth time"
    [record] = q.dead()
    assert record.id == jid and record.attempts == 1
    assert record.error == "delivered 4 times without an outcome"
    out = subprocess.run(
        [sys.executable, str(CROSSWORKER), "dead", "--url", "redis://127.0.0.1:%d/0" % client.connection_pool.connection_kwargs["port"], "--queue", qname],
        check=True, capture_output=True, text=True,
    ).stdout.splitlines()
    assert [json.loads(line) for line in out] == [
        {"id": "killer", "died_at_ms": record.died_at_ms, "attempts": 1,
         "error": "delivered 4 times without an outcome", "payload_hex": b"killer".hex()}
    ]


def test_scenario7_sigterm_finishes_running_handlers(client, qname, crossworkers):
    q = echomq.Queue(client, qname)
    started = "%s:started" % qname
    done = "%s:done" % qname
    w = crossworkers(qname, "--concurrency", "3", "--sleep-ms", "1500", "--started", started, "--done", done)
    ids = q.add_many([b"job"] * 10)
    wait_for(lambda: client.llen(started) == 3, what="three handlers")
    assert w.stop(timeout=30) == 0
    first = [x.decode() for x in client.lrange(started, 0, -1)]
    assert len(first) == 3, "nothing new taken after SIGTERM"
    assert {k.decode(): int(v) for k, v in client.hgetall(done).items()} == {i: 1 for i in first}
    assert q.counts() == {"scheduled": 0, "due": 0, "pending": 7, "in_flight": 0, "dead": 0}
    assert set(first) < set(ids)


def test_scenario7_sigterm_leaves_an_overlong_handler_in_the_group(client, qname, crossworkers):
    q = echomq.Queue(client, qname)
    started = "%s:started" % qname
    done = "%s:done" % qname
    w = crossworkers(
        qname, "--sleep-ms", "30000", "--shutdown-timeout-ms", "300", "--lease-ms", "1000",
        "--started", started, "--done", done,
    )
    jid = q.add(b"long")
    wait_for(lambda: client.llen(started) == 1, what="the handler")
    assert w.stop(timeout=30) == 0
    pending = client.xpending("{%s}:pending" % qname, "workers")
    assert pending["pending"] == 1
    assert client.hlen(done) == 0
    seen = []
    with running(q, lambda job: seen.append(job.id), lease_ms=1000):
        wait_for(lambda: seen == [jid], timeout=30, what="the takeover")
        wait_for(lambda: q.counts()["in_flight"] == 0, what="the ack")
    assert q.counts() == {"scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 0}


def test_close_from_a_handler(client, qname):
    q = echomq.Queue(client, qname)
    holder = {}

    def handler(job):
        holder["worker"].close()

    w = echomq.Worker(q, handler)
    holder["worker"] = w
    q.add(b"x")
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert q.counts()["in_flight"] == 0 and client.hlen("{%s}:jobs" % qname) == 0


def test_crossworker_add_and_fail(client, qname, server, crossworkers):
    out = subprocess.run(
        [sys.executable, str(CROSSWORKER), "add", "--url", server.url, "--queue", qname, "--count", "3", "--id-prefix", "p-"],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    assert out == ["p-0", "p-1", "p-2"]
    assert client.hget("{%s}:jobs" % qname, "p-1") == b"payload-1"
    w = crossworkers(qname, "--fail", "nope", "--max-attempts", "2", "--backoff", "fixed:10")
    q = echomq.Queue(client, qname)
    wait_for(lambda: q.counts()["dead"] == 3, what="three dead")
    assert w.stop() == 0
    assert sorted((r.id, r.attempts, r.error, r.payload) for r in q.dead()) == [
        ("p-%d" % i, 2, "nope", b"payload-%d" % i) for i in range(3)
    ]


def test_sigterm_on_the_main_thread_closes_and_restores_the_handler(client, qname):
    q = echomq.Queue(client, qname)
    assert threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM)
    marker = []

    def mine(signum, frame):
        marker.append(signum)

    signal.signal(signal.SIGTERM, mine)
    try:
        finished = []

        def handler(job):
            # SIGTERM while this handler runs: it still finishes and its outcome is written.
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)
            finished.append(job.id)

        jid = q.add(b"x")
        echomq.Worker(q, handler).run()
        assert finished == [jid]
        assert marker == [], "the worker's handler, not the old one, got the signal"
        assert signal.getsignal(signal.SIGTERM) is mine
        assert client.hlen("{%s}:jobs" % qname) == 0
        assert q.counts()["in_flight"] == 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_invalid_policy_is_refused_at_start(client, qname):
    q = echomq.Queue(client, qname)
    with pytest.raises(valkey.exceptions.ResponseError):
        echomq.Worker(q, lambda job: None, backoff="no-such-policy").run()
