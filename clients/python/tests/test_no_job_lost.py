"""Issue 23: no job lost, and no trace left, by the protocol scripts when one of their calls fails
or a whole script is sent again (a requeue into a pending that refuses it, a resent success, a full
hold table, a remove() during a run, a hand-back on close into a pending that refuses it)."""

from __future__ import annotations

import threading

import pytest
import valkey
from valkey.exceptions import ResponseError

import echomq
from conftest import wait_for
from helpers import held_and_read, in_flight, keys, running

LAST_ID = "18446744073709551615-18446744073709551615"


def warned(caplog, text: str) -> bool:
    return any(text in r.getMessage() for r in caplog.records)


# -- 1. requeue ---------------------------------------------------------------------------------


@pytest.mark.parametrize("client", [2], indirect=True)  # no reply parsing involved
def test_requeue_into_a_refusing_pending_keeps_the_job_dead(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)

    def dead_job():
        q.add(b"payload", id="j", delay_ms=10_000_000)
        client.zrem(k["schedule"], "j")
        client.zadd(k["dead"], {"j": 5})
        client.hset(k["attempts"], "j", 3)
        client.hset(k["errors"], "j", "boom")

    def still_dead():
        assert client.zscore(k["dead"], "j") == 5
        assert client.hget(k["attempts"], "j") == b"3"
        assert client.hget(k["errors"], "j") == b"boom"
        assert client.hget(k["jobs"], "j") == b"payload"
        [record] = q.dead()
        assert (record.id, record.attempts, record.error, record.payload) == ("j", 3, "boom", b"payload")

    dead_job()
    client.set(k["pending"], "not a stream")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        q.requeue("j")
    still_dead()

    client.delete(k["pending"])
    client.xadd(k["pending"], {"job": "top"}, id=LAST_ID)  # a stream out of IDs
    with pytest.raises(ResponseError):
        q.requeue("j")
    still_dead()

    client.delete(k["pending"])
    assert q.requeue("j") is True
    [(_, fields)] = client.xrange(k["pending"])
    assert fields == {b"job": b"j"}
    assert client.zcard(k["dead"]) == 0
    assert not client.hexists(k["attempts"], "j") and not client.hexists(k["errors"], "j")


@pytest.mark.parametrize("client", [2], indirect=True)
def test_a_requeue_goes_through_the_release_into_its_group(client, qname):
    """A requeued run is released like an add's: with nothing governing the queue an ungrouped
    job goes straight to pending; on a held queue it waits in the schedule, a grouped one in its
    group (read from its payload's envelope), until the hold ends. A resend writes nothing."""
    from echomq._common import wrap_payload

    q = echomq.Queue(client, qname)
    k = keys(qname)
    group_key = k["schedule"] + ":echomq-g:shop-1"

    def dead(jid, group):
        client.hset(k["jobs"], jid, wrap_payload(b"payload", group))
        client.zadd(k["dead"], {jid: 5})
        client.hset(k["attempts"], jid, 3)
        client.hset(k["errors"], jid, "boom")

    dead("free", None)
    assert q.requeue("free") is True
    assert [f for _, f in client.xrange(k["pending"])] == [{b"job": b"free"}]
    assert client.xinfo_groups(k["pending"])[0]["name"] == b"workers", "made as a worker makes it"
    client.delete(k["pending"])

    client.execute_command("ECHO.HOLD", k["schedule"], 600_000)
    dead("plain", None)
    dead("grouped", b"shop-1")
    assert q.requeue("plain") is True and q.requeue("grouped") is True
    assert q.requeue("grouped") is False  # the resend finds it no longer dead
    assert client.xlen(k["pending"]) == 0, "a held queue releases nothing"
    assert client.zrange(k["schedule"], 0, -1) == [b"plain"]
    assert client.zrange(group_key, 0, -1) == [b"grouped"]
    assert client.zcard(k["dead"]) == 0 and client.hlen(k["attempts"]) == 0 and client.hlen(k["errors"]) == 0
    assert client.hget(k["jobs"], "grouped") == wrap_payload(b"payload", b"shop-1"), "the payload kept"

    client.execute_command("ECHO.HOLD", k["schedule"], 0)
    assert client.execute_command("ECHO.PROMOTE", k["schedule"], k["pending"]) == 2
    assert sorted(f[b"job"] for _, f in client.xrange(k["pending"])) == [b"grouped", b"plain"]
    assert client.exists(group_key) == 0


# -- 2. a resent success -----------------------------------------------------------------------


class LostAckReply(echomq.Worker):
    """A worker whose first success batch reaches the server but loses its reply: in between,
    ``on_lost`` runs (the job's id is added again); the ack loop then sends the batch again."""

    on_lost = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sends = 0
        self.resent = threading.Event()

    def _send_acks(self, batch):
        self.sends += 1
        super()._send_acks(batch)
        if self.sends == 1:
            self.on_lost()
            raise valkey.exceptions.ConnectionError("reply lost with the connection (injected)")
        self.resent.set()


@pytest.mark.parametrize("client", [2], indirect=True)  # no reply parsing involved
def test_a_resent_success_leaves_a_new_job_of_the_same_id_runnable(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    runs = []
    seen_after_resend = []

    class Worker(LostAckReply):
        def on_lost(self):
            # the first job is done: its id is free again, and a new job takes it
            assert q.add(b"second", id="same") == "same"

    def handler(job):
        runs.append(job.payload)
        if job.payload == b"second":
            assert worker.resent.wait(30), "the batch was not sent again"
            seen_after_resend.append(client.hget(k["jobs"], "same"))

    q.add(b"first", id="same")
    with running(q, handler, cls=Worker, lease_ms=60_000) as worker:
        wait_for(lambda: runs == [b"first", b"second"], what="the new job to run")
        wait_for(lambda: client.hlen(k["jobs"]) == 0 and in_flight(client, qname) == 0, what="the new job's success")
    assert seen_after_resend == [b"second"], "the resent batch deleted the new job's payload"
    assert client.xlen(k["pending"]) == 0


# -- 3. a full hold table ----------------------------------------------------------------------


def test_retry_after_with_a_full_hold_table_still_records_the_failure(client, qname, caplog):
    """10,000 schedules held (the most a hold table takes): the hold of a RetryAfter may be
    refused, but the failure is written, the entry acknowledged and the refusal reported."""
    q = echomq.Queue(client, qname)
    k = keys(qname)
    names = ["hold-fill-%s-%d" % (qname, i) for i in range(10_000)]
    runs = []

    def handler(job):
        runs.append(job.attempt)
        raise echomq.RetryAfter(60_000, "slow down")

    try:
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.execute_command("ECHO.HOLD", name, 60_000)
        pipe.execute()
        jid = q.add(b"x")
        with running(q, handler, backoff="fixed:600000", lease_ms=60_000, max_attempts=5):
            wait_for(lambda: client.zscore(k["schedule"], jid) is not None, what="the retry to be written")
            wait_for(lambda: in_flight(client, qname) == 0, what="the entry to be acknowledged")
        assert runs == [1]
        assert client.hget(k["attempts"], jid) == b"1"
        assert client.hget(k["errors"], jid) == b"slow down"
        assert client.xlen(k["pending"]) == 0
        assert client.hget(k["jobs"], jid) == b"x"
        held = client.execute_command("ECHO.LIMITS", k["schedule"])
        if not isinstance(held, dict):
            held = dict(zip(held[::2], held[1::2]))
        if not int(held[b"held-until-ms"] or 0):
            # the hold was refused: the worker said so, and went on
            assert warned(caplog, "could not be held"), [r.getMessage() for r in caplog.records]
    finally:
        pipe = client.pipeline(transaction=False)
        for name in names + [k["schedule"]]:
            pipe.execute_command("ECHO.HOLD", name, 0)
        pipe.execute()


# -- 4. remove() during a run ------------------------------------------------------------------


def test_remove_during_a_run_leaves_no_key(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    started = threading.Event()
    removed = threading.Event()
    attempts = []

    def handler(job):
        if job.payload == b"again":
            attempts.append(job.attempt)
            return
        started.set()
        assert removed.wait(30), "the test did not remove the job"
        raise RuntimeError("fails after its remove")

    with running(q, handler, backoff="fixed:600000", lease_ms=60_000):
        jid = q.add(b"x", id="doomed")
        assert started.wait(30), "the job did not start"
        assert q.remove(jid) is True
        removed.set()
        wait_for(lambda: client.xlen(k["pending"]) == 0 and in_flight(client, qname) == 0,
                 what="the entry to be acknowledged and deleted")
        for name in ("attempts", "errors", "jobs"):
            assert not client.hexists(k[name], jid), name
        for name in ("schedule", "dead"):
            assert client.zscore(k[name], jid) is None, name
        # the id is free again: a new job of it starts at attempt 1
        q.add(b"again", id=jid)
        wait_for(lambda: attempts, what="the new job to run")
    assert attempts == [1]


# -- 5. hand-back on close ---------------------------------------------------------------------


@pytest.mark.parametrize("client", [2], indirect=True)  # no reply parsing involved
def test_a_refused_hand_back_leaves_the_entry_in_the_group(client, qname, caplog):
    """Entries waiting out a hold are handed back on close; when pending refuses the new entry
    (a stream out of IDs) the old one stays delivered, to be taken over, not deleted."""
    k = keys(qname)
    with held_and_read(client, qname) as (runs, jid):
        client.xadd(k["pending"], {"job": "top"}, id=LAST_ID)
    assert runs == []
    assert warned(caplog, "cannot hand back"), [r.getMessage() for r in caplog.records]
    assert in_flight(client, qname) == 1, "the entry is still delivered"
    jobs = [fields.get(b"job") for _, fields in client.xrange(k["pending"])]
    assert jobs == [jid.encode(), b"top"]
    assert client.hget(k["jobs"], jid) == b"x"
