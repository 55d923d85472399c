"""Groups (docs/clients.md, Groups): ``add(..., group=...)`` puts the job in its group's part of the
schedule, released by the server's timer; a grouped job keeps its group through a retry; a group
the server would refuse is refused by the library with nothing written."""

from __future__ import annotations

import contextlib

import pytest

import echomq
from conftest import wait_for
from helpers import keys, running


def group_key(qname: str, group: str) -> str:
    return "{%s}:schedule:echomq-g:%s" % (qname, group)


def queue_keys(client, qname: str):
    return sorted(k.decode() for k in client.keys("{%s}:*" % qname))


@contextlib.contextmanager
def timer(client, qname: str):
    """The queue's pair in echomq.auto-promote for the block: the server releases it."""
    old = client.config_get("echomq.auto-promote").get(b"echomq.auto-promote", b"")
    client.config_set("echomq.auto-promote", "{%s}:schedule {%s}:pending" % (qname, qname))
    try:
        yield
    finally:
        client.config_set("echomq.auto-promote", old)


def test_a_grouped_add_waits_in_its_group_and_the_timer_releases_it(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    generated = q.add(b"one", group="acme")
    given = q.add(b"two", id="given-1", group="acme")
    many = q.add_many([b"three", b"four"], group="other")
    # Not straight into pending, though nothing governs the queue: into the group's own set.
    assert client.xlen(k["pending"]) == 0
    assert client.zcard(k["schedule"]) == 0
    assert sorted(m.decode() for m in client.zrange(group_key(qname, "acme"), 0, -1)) == sorted([generated, given])
    assert sorted(m.decode() for m in client.zrange(group_key(qname, "other"), 0, -1)) == sorted(many)
    runs = {}

    def handler(job):
        runs[job.id] = (job.payload, job.group)

    with timer(client, qname), running(q, handler) as worker:
        assert worker._self_promote is False
        wait_for(lambda: len(runs) == 4, what="the grouped jobs to run")
    assert runs == {
        generated: (b"one", "acme"),
        given: (b"two", "acme"),
        many[0]: (b"three", "other"),
        many[1]: (b"four", "other"),
    }
    wait_for(lambda: queue_keys(client, qname) == [k["pending"]], what="every job to be done")


def test_a_grouped_job_is_retried_into_its_group(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    grouped = q.add(b"g", group="acme")
    plain = q.add(b"p")
    attempts = []

    def handler(job):
        attempts.append((job.id, job.attempt, job.group))
        if job.attempt == 1:
            raise RuntimeError("once")

    with timer(client, qname), running(q, handler, backoff="fixed:600000"):
        wait_for(lambda: client.hget(k["attempts"], grouped) == b"1", what="the grouped failure")
        wait_for(lambda: client.hget(k["attempts"], plain) == b"1", what="the ungrouped failure")
        # The grouped retry is in its group, the ungrouped one in the schedule, as before.
        assert client.zscore(group_key(qname, "acme"), grouped) is not None
        assert client.zscore(k["schedule"], grouped) is None
        assert client.zscore(k["schedule"], plain) is not None
        # Due now (still in its group): the timer releases it and it succeeds.
        client.execute_command("ECHO.SCHEDULE", k["schedule"], grouped, 0, "XX", "GROUP", "acme")
        wait_for(lambda: not client.hexists(k["jobs"], grouped), what="the grouped retry to be done")
    assert (grouped, 2, "acme") in attempts
    assert sorted(a for a in attempts if a[0] == grouped) == [(grouped, 1, "acme"), (grouped, 2, "acme")]
    assert not client.exists(group_key(qname, "acme"))


def test_a_dead_grouped_job_keeps_its_group(client, qname):
    q = echomq.Queue(client, qname)

    def handler(job):
        raise RuntimeError("never")

    jid = q.add(b"d", group="acme")
    with timer(client, qname), running(q, handler, max_attempts=1):
        wait_for(lambda: q.counts()["dead"] == 1, what="the job to die")
    [dead] = q.dead()
    assert (dead.id, dead.payload, dead.group) == (jid, b"d", "acme")


def test_a_payload_that_looks_like_an_envelope_stays_as_it_is(client, qname):
    q = echomq.Queue(client, qname)
    tricky = b"\x00echomq-group:4:acmepayload"
    runs = []
    q.add(tricky)
    q.add(b"", group="g")
    with timer(client, qname), running(q, lambda job: runs.append((job.payload, job.group))):
        wait_for(lambda: len(runs) == 2, what="both jobs")
    assert sorted(runs, key=repr) == sorted([(tricky, None), (b"", "g")], key=repr)


@pytest.mark.parametrize("group", ["", b"", "x" * 1025, "é" * 513])
def test_a_bad_group_is_refused_with_nothing_written(client, qname, group):
    q = echomq.Queue(client, qname)
    with pytest.raises(ValueError, match="1..=1024 bytes"):
        q.add(b"x", group=group)
    with pytest.raises(ValueError, match="1..=1024 bytes"):
        q.add(b"x", id="given", group=group)
    with pytest.raises(ValueError, match="1..=1024 bytes"):
        q.add_many([b"x", b"y"], group=group)
    with pytest.raises(TypeError):
        q.add(b"x", group=7)
    assert queue_keys(client, qname) == []
    # The longest group the server takes is taken.
    q.add(b"x", group="x" * 1024)
    assert client.zcard(group_key(qname, "x" * 1024)) == 1
