"""Writing a job's outcome: a refused failure leaves the job in the group, the failure script is
loaded again after SCRIPT FLUSH, outcomes lost with the connection are sent again while the entry
stays leased, and a failure sent twice is written once."""

from __future__ import annotations

import time

import pytest
import valkey

import echomq
from conftest import wait_for
from echomq._protocol import FAIL
from helpers import held_until, in_flight, keys, recorder, running

def test_refused_retry_leaves_the_job_in_the_group(client, qname, caplog):
    """ECHO.RETRY refused (schedule of the wrong type): nothing is written and the entry is not
    acknowledged, so the job stays delivered in the group (to be taken over), not in no key at all."""
    q = echomq.Queue(client, qname)
    k = keys(qname)
    jid = q.add(b"payload")
    client.set(k["schedule"], "not a sorted set")
    runs = []

    def handler(job):
        runs.append(job.id)
        raise RuntimeError("boom")

    def refused():
        return any("cannot write the outcome" in r.getMessage() for r in caplog.records)

    with running(q, handler, lease_ms=60_000, max_attempts=5):
        wait_for(refused, what="the refused failure to be reported")
        assert runs == [jid]
        assert client.xpending(k["pending"], "workers")["pending"] == 1
        assert client.xlen(k["pending"]) == 1
        assert client.hget(k["jobs"], jid) == b"payload"
        assert not client.hexists(k["errors"], jid) and not client.hexists(k["attempts"], jid)
    client.delete(k["schedule"])


def test_failure_script_is_loaded_again_after_a_script_flush(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)

    def handler(job):
        raise RuntimeError("no")

    with running(q, handler, backoff="fixed:600000", lease_ms=60_000):
        first = q.add(b"1")
        wait_for(lambda: client.zscore(k["schedule"], first) is not None, what="the first failure")
        client.script_flush()
        second = q.add(b"2")
        wait_for(lambda: client.zscore(k["schedule"], second) is not None, what="the second failure")
        assert in_flight(client, qname) == 0 and client.xlen(k["pending"]) == 0


class FlakyAcks(echomq.Worker):
    """A worker whose first acknowledgements meet a lost connection."""

    failures = 5

    def _send_acks(self, batch):
        if self.failures > 0:
            self.failures -= 1
            raise valkey.exceptions.ConnectionError("connection lost (injected)")
        return super()._send_acks(batch)


@pytest.mark.parametrize("client", [2], indirect=True)  # no reply parsing involved
def test_success_is_sent_again_and_stays_leased(client, qname):
    """Acknowledgements refused by a lost connection are sent again; meanwhile the entry stays
    leased, so a second worker (short lease) does not run the job again."""
    q = echomq.Queue(client, qname)
    k = keys(qname)
    runs = []
    handler = recorder(runs)
    with running(q, handler("flaky"), cls=FlakyAcks, lease_ms=600) as flaky:
        jid = q.add(b"x")
        wait_for(lambda: runs, what="the first run")
        with running(q, handler("other"), lease_ms=600):
            wait_for(lambda: flaky.failures == 0, what="the injected failures")
            wait_for(lambda: client.hlen(k["jobs"]) == 0 and in_flight(client, qname) == 0, what="the acknowledgement")
            time.sleep(0.5)
    assert runs == [("flaky", jid)]
    assert client.xlen(k["pending"]) == 0


class FlakyFailures(echomq.Worker):
    """A worker whose first failure scripts meet a lost connection."""

    failures = 5

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        script = self._fail_script

        def flaky(*a, **kw):
            if self.failures > 0:
                self.failures -= 1
                raise valkey.exceptions.ConnectionError("connection lost (injected)")
            return script(*a, **kw)

        self._fail_script = flaky


@pytest.mark.parametrize("client", [2], indirect=True)  # no reply parsing involved
def test_failure_is_sent_again_and_stays_leased(client, qname):
    q = echomq.Queue(client, qname)
    runs = []
    handler = recorder(runs, fail="fails")
    with running(q, handler("flaky"), cls=FlakyFailures, lease_ms=600, max_attempts=1) as flaky:
        jid = q.add(b"x")
        wait_for(lambda: runs, what="the first run")
        with running(q, handler("other"), lease_ms=600, max_attempts=1):
            wait_for(lambda: flaky.failures == 0, what="the injected failures")
            wait_for(lambda: q.counts()["dead"] == 1 and in_flight(client, qname) == 0, what="the failure")
            time.sleep(0.5)
    assert runs == [("flaky", jid)]
    [record] = q.dead()
    assert (record.id, record.attempts, record.error) == (jid, 1, "fails")


def test_a_failure_sent_twice_is_written_once(client, qname):
    """The failure script run again for the same entry (a resend after a lost reply) writes
    nothing: the first run acknowledged the entry, so the retry is not drawn a second time."""
    k = keys(qname)
    q = echomq.Queue(client, qname)
    client.xgroup_create(k["pending"], "workers", id="0", mkstream=True)
    job = q.add(b"x")
    client.xreadgroup("workers", "me", {k["pending"]: ">"}, count=1)
    entry = client.xpending_range(k["pending"], "workers", "-", "+", 1)[0]["message_id"]
    fail = client.register_script(FAIL)
    script_keys = [k["schedule"], k["pending"], k["dead"], k["attempts"], k["errors"], k["jobs"]]
    args = [job, entry, "fixed:60000", 1, 5, "boom", 0]
    fired, held = fail(keys=script_keys, args=args)
    assert fired > 0 and held == 0
    assert client.zscore(k["schedule"], job) == fired
    args[1:] = [entry, "fixed:120000", 2, 5, "boom again", 0]
    assert fail(keys=script_keys, args=args) == [-3, 0]
    assert client.zscore(k["schedule"], job) == fired, "the retry was not drawn again"
    assert client.hget(k["attempts"], job) == b"1"
    assert client.hget(k["errors"], job) == b"boom"


@pytest.mark.parametrize("job_group", [b"", b"own"], ids=["ungrouped", "grouped"])
def test_a_failure_holding_a_group_sent_twice_holds_once_and_a_refused_hold_writes_it(client, qname, job_group):
    """fail.lua's hold of one group (ninth argument; an empty eighth for a job without a group of
    its own): written after the failure, once; a resend writes nothing and keeps the hold as the
    first run set it; a hold the server refuses leaves the failure written."""
    k = keys(qname)
    q = echomq.Queue(client, qname)
    client.xgroup_create(k["pending"], "workers", id="0", mkstream=True)
    hold_key = k["schedule"] + ":echomq-ghold:shop"
    fail = client.register_script(FAIL)
    script_keys = [k["schedule"], k["pending"], k["dead"], k["attempts"], k["errors"], k["jobs"]]

    def delivered():
        """A job added (with the group ``own``, released by hand) and read: its id and entry."""
        jid = q.add(b"x", group=job_group.decode() or None)
        client.execute_command("ECHO.PROMOTE", k["schedule"], k["pending"])
        client.xreadgroup("workers", "me", {k["pending"]: ">"}, count=1)
        [row] = client.xpending_range(k["pending"], "workers", "-", "+", 1)
        return jid, row["message_id"]

    jid, entry = delivered()
    args = [jid, entry, "fixed:60000", 1, 5, "429", 30_000, job_group, b"shop"]
    fired, held = fail(keys=script_keys, args=args)
    assert fired > 0 and held > 0
    assert int(client.get(hold_key)) == held
    in_own_group = client.zscore(k["schedule"] + ":echomq-g:own", jid) is not None
    assert in_own_group == bool(job_group), "the retry goes into the job's own group, not the held one"
    assert held_until(client, qname) == 0, "the queue itself is not held"
    # The resend: nothing written, the hold not taken again.
    args[6] = 60_000
    assert fail(keys=script_keys, args=args) == [-3, 0]
    assert int(client.get(hold_key)) == held
    # A refused hold (its key of another type): the failure is written all the same.
    client.delete(hold_key)
    client.rpush(hold_key, "not a hold")
    jid, entry = delivered()
    fired, held = fail(keys=script_keys, args=[jid, entry, "fixed:60000", 1, 5, "429", 30_000, job_group, b"shop"])
    assert fired > 0 and b"WRONGTYPE" in held
    assert client.hget(k["errors"], jid) == b"429"
    assert in_flight(client, qname) == 0
