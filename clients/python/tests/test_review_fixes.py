"""Jobs are neither lost nor run twice when the server refuses a write or the connection fails:
adds that cannot be enqueued, failures that cannot be retried, holds, takeover of old entries,
outcomes sent again, entries handed back on close."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import valkey
from valkey.exceptions import ResponseError

import echomq
from conftest import CROSSWORKER, wait_for
from helpers import running


def keys(qname):
    return {k: "{%s}:%s" % (qname, k) for k in ("schedule", "pending", "dead", "jobs", "attempts", "errors")}


def in_flight(client, qname) -> int:
    return echomq.Queue(client, qname).counts()["in_flight"]


def held_until(client, qname) -> int:
    reply = client.execute_command("ECHO.LIMITS", "{%s}:schedule" % qname)
    if not isinstance(reply, dict):
        reply = dict(zip(reply[::2], reply[1::2]))
    return int(reply[b"held-until-ms"] or 0)


# -- adding ------------------------------------------------------------------------------------


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
    """A schedule key of the wrong type: ECHO.SCHEDULE is refused, the error reaches the caller and
    the payload is not left behind (a given id would otherwise be taken for good)."""
    q = echomq.Queue(client, qname)
    k = keys(qname)
    client.set(k["schedule"], "not a sorted set")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        q.add(b"p", id="given", delay_ms=5)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        q.add_many([b"p1", b"p2"], ids=["m1", "m2"], delay_ms=5)
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


# -- failures ----------------------------------------------------------------------------------


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
    q = echomq.Queue(client, qname)
    k = keys(qname)
    client.execute_command("ECHO.HOLD", k["schedule"], 60_000)
    runs = []
    try:
        with running(q, lambda job: runs.append(job.id), lease_ms=60_000):
            jid = q.add(b"x")
            wait_for(lambda: in_flight(client, qname) == 1, what="the entry to be read")
            assert runs == []
            client.execute_command("ECHO.HOLD", k["schedule"], 0)
            wait_for(lambda: runs == [jid], timeout=15, what="the job to start after the hold is lifted")
    finally:
        client.execute_command("ECHO.HOLD", k["schedule"], 0)


def test_entries_waiting_out_a_hold_are_handed_back_on_close(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    client.execute_command("ECHO.HOLD", k["schedule"], 60_000)
    runs = []
    try:
        with running(q, lambda job: runs.append(job.id), lease_ms=60_000):
            jid = q.add(b"x")
            wait_for(lambda: in_flight(client, qname) == 1, what="the entry to be read")
        assert runs == []
        assert in_flight(client, qname) == 0, "handed back, not left leased"
        [(_, fields)] = client.xrange(k["pending"])
        assert fields == {b"job": jid.encode()}
    finally:
        client.execute_command("ECHO.HOLD", k["schedule"], 0)


def test_a_refused_promote_does_not_lose_the_read(client, qname):
    """ECHO.PROMOTE refused (schedule of the wrong type): the entries XREADGROUP delivered in the
    same pipeline still run, without waiting for a takeover."""
    q = echomq.Queue(client, qname)
    k = keys(qname)
    client.set(k["schedule"], "not a sorted set")
    runs = []
    with running(q, lambda job: runs.append(job.id), lease_ms=60_000) as worker:
        assert worker._self_promote
        jid = q.add(b"x")
        wait_for(lambda: runs == [jid], timeout=15, what="the job to run")
    client.delete(k["schedule"])


# -- takeover ----------------------------------------------------------------------------------


def test_takeover_reaches_an_orphan_behind_live_entries(client, qname):
    """One XAUTOCLAIM looks at 10 x COUNT entries: with one free slot, an orphan behind 15 live
    entries is found only when the cursor is kept between calls."""
    q = echomq.Queue(client, qname)
    k = keys(qname)
    client.xgroup_create(k["pending"], "workers", id="0", mkstream=True)
    live_ids = ["live-%02d" % i for i in range(15)]
    q.add_many([b"live"] * 15 + [b"orphan"], ids=live_ids + ["orphan"])
    read = client.xreadgroup("workers", "other", {k["pending"]: ">"}, count=100)
    entries = read[0][1] if isinstance(read, list) else list(read.values())[0][0]
    assert len(entries) == 16
    live = [eid for eid, _ in entries[:15]]
    stop = threading.Event()

    def keep_alive():  # the live worker "other" renews the leases of its 15 entries
        c = valkey.Valkey(host="127.0.0.1", port=client.connection_pool.connection_kwargs["port"])
        while not stop.wait(0.05):
            c.xclaim(k["pending"], "workers", "other", 0, live, justid=True)
        c.close()

    keeper = threading.Thread(target=keep_alive, daemon=True)
    keeper.start()
    runs = []
    try:
        time.sleep(1.1)  # the orphan is now idle longer than the lease
        with running(q, lambda job: runs.append(job.id), concurrency=1, lease_ms=1000):
            wait_for(lambda: "orphan" in runs, timeout=20, what="the orphan to be taken over")
    finally:
        stop.set()
        keeper.join(5)
    assert runs == ["orphan"]


# -- outcomes sent again -----------------------------------------------------------------------


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
    lock = threading.Lock()

    def handler(name):
        def h(job):
            with lock:
                runs.append((name, job.id))

        return h

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
    k = keys(qname)
    runs = []
    lock = threading.Lock()

    def handler(name):
        def h(job):
            with lock:
                runs.append((name, job.id))
            raise RuntimeError("fails")

        return h

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


# -- crossworker -------------------------------------------------------------------------------


def test_crossworker_dead_prints_null_for_missing_error_and_payload(client, qname, server):
    k = keys(qname)
    client.zadd(k["dead"], {"bare": 5})
    out = subprocess.run(
        [sys.executable, str(CROSSWORKER), "dead", "--url", server.url, "--queue", qname],
        check=True, capture_output=True, text=True,
    ).stdout.splitlines()
    assert [json.loads(line) for line in out] == [
        {"id": "bare", "died_at_ms": 5, "attempts": 0, "error": None, "payload_hex": None}
    ]


def test_a_failure_sent_twice_is_written_once(client, qname):
    """The failure script run again for the same entry (a resend after a lost reply) writes
    nothing: the first run acknowledged the entry, so the retry is not drawn a second time."""
    from echomq.worker import FAIL_SCRIPT

    k = keys(qname)
    q = echomq.Queue(client, qname)
    client.xgroup_create(k["pending"], "workers", id="0", mkstream=True)
    job = q.add(b"x")
    client.xreadgroup("workers", "me", {k["pending"]: ">"}, count=1)
    entry = client.xpending_range(k["pending"], "workers", "-", "+", 1)[0]["message_id"]
    fail = client.register_script(FAIL_SCRIPT)
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
