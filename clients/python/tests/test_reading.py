"""Taking jobs: a refused ECHO.PROMOTE does not lose the entries read beside it, the takeover's
cursor reaches an orphan behind many live entries, and a run knows the entry that delivered it."""

from __future__ import annotations

import threading
import time

import valkey

import echomq
from conftest import wait_for
from helpers import keys, running

def test_a_refused_promote_does_not_lose_the_read(client, qname):
    """ECHO.PROMOTE refused (schedule of the wrong type): the entries XREADGROUP delivered in the
    same pipeline still run, without waiting for a takeover."""
    q = echomq.Queue(client, qname)
    k = keys(qname)
    jid = q.add(b"x")  # before the schedule breaks: an add checks its type too
    client.set(k["schedule"], "not a sorted set")
    runs = []
    with running(q, lambda job: runs.append(job.id), lease_ms=60_000) as worker:
        assert worker._self_promote
        wait_for(lambda: runs == [jid], timeout=15, what="the job to run")
    client.delete(k["schedule"])


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


def test_job_entry_id_is_the_entry_that_delivered_the_run(client, qname):
    q = echomq.Queue(client, qname)
    pending = "{%s}:pending" % qname
    seen = []

    def handler(job):
        # while the run lasts, its entry is delivered to this worker and holds this job
        delivered = client.xpending_range(pending, "workers", job.entry_id, job.entry_id, 1)
        seen.append((job.id, job.entry_id, delivered, client.xrange(pending, job.entry_id, job.entry_id)))

    jid = q.add(b"x")
    with running(q, handler) as worker:
        wait_for(lambda: seen, what="the run")
    (job_id, entry_id, delivered, entry) = seen[0]
    assert job_id == jid
    assert isinstance(entry_id, str)
    assert [d["message_id"] for d in delivered] == [entry_id.encode()]
    assert delivered[0]["consumer"] == worker.consumer
    assert entry == [(entry_id.encode(), {b"job": jid.encode()})]


def test_job_built_with_three_fields_has_no_entry_id():
    job = echomq.Job("a", b"p", 1)
    assert (job.id, job.payload, job.attempt, job.entry_id) == ("a", b"p", 1, "")
