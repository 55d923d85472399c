"""Sharded queues (docs/clients.md, Sharded queues): the shards' tags and a job's shard as
protocol/shards.json pins them, each job on its shard (checked on the server's keys), the inspecting
calls over every shard, the split release limit in the server's config, and a worker that runs every
shard's jobs once, fairly, and starts a job of an idle shard at once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time

import pytest
import valkey
from valkey.cluster import ClusterNode, ValkeyCluster

import echomq
from conftest import REPO, wait_for
from echomq._shards import split_limit
from helpers import running, server_ms

VECTORS = json.loads((REPO / "protocol" / "shards.json").read_text(encoding="utf-8"))
only_resp2 = pytest.mark.parametrize("client", [2], indirect=True)  # no reply parsing involved


def key(tag: str, suffix: str) -> str:
    return "{%s}:%s" % (tag, suffix)


def ids_on(shard: int, shards: int, count: int, prefix: str = "job-"):
    """``count`` ids that hash to ``shard`` of ``shards``."""
    out, i = [], 0
    while len(out) < count:
        candidate = "%s%d" % (prefix, i)
        if echomq.shard_of(candidate, shards) == shard:
            out.append(candidate)
        i += 1
    return out


def command_calls(client, command: str) -> int:
    """How many times the server ran ``command`` (INFO commandstats)."""
    return int(client.info("commandstats").get("cmdstat_" + command, {}).get("calls", 0))


def run_all(q, count: int, **options):
    """Runs a worker on ``q`` until ``count`` jobs have run and every outcome is written; the
    runs of each job id."""
    runs = {}
    lock = threading.Lock()

    def handler(job):
        with lock:
            runs[job.id] = runs.get(job.id, 0) + 1

    with running(q, handler, **options):
        wait_for(lambda: len(runs) == count, timeout=20, what="every job to run")
        wait_for(lambda: sum(q.counts().values()) == 0, what="every outcome")
    return runs


# -- the rules --------------------------------------------------------------------------------


@only_resp2
def test_tags_and_shards_are_the_vectors(client):
    for layout in VECTORS["layouts"]:
        assert echomq.shard_tags(layout["queue"], layout["shards"]) == layout["tags"]
        q = echomq.Queue(client, layout["queue"], shards=layout["shards"])
        assert list(q.shards) == layout["tags"]
    for job in VECTORS["jobs"]:
        assert echomq.keyslot(job["id"]) == job["slot"], job
        assert echomq.shard_of(job["id"], job["shards"]) == job["shard"], job
        q = echomq.Queue(client, "vectors", shards=job["shards"])
        assert q.shard_of(job["id"]) == job["shard"], job
    # the server's own function agrees on the hash tag rule (CLUSTER KEYSLOT needs a cluster: the
    # vectors were checked there; CRC16 is XMODEM, check value 0x31C3 for "123456789")
    assert echomq.crc16(b"123456789") == 0x31C3


@pytest.mark.parametrize(
    "rate, burst, shards, split",
    [
        ("500/s", 60, 6, ("5000/m", 10)),
        ("7/s", 7, 6, ("70/m", 2)),
        ("10/s", 10, 3, ("200/m", 4)),
        ("1000000/s", 1, 3, ("333333/s", 1)),
        ("6/s", 5, 3, ("2/s", 2)),
        ("5/m", 2, 2, ("150/h", 1)),
        ("1/s", 1, 7, ("514/h", 1)),
        ("1/h", 3, 2, ("1/h", 2)),
        ("999999/s", 9, 2, ("499999/s", 5)),
        ("500/S", 50, 1, ("500/S", 50)),
        ("adaptive:500/s", 6, 6, ("adaptive:5000/m", 1)),
        ("adaptive:9/s", 4, 3, ("adaptive:3/s", 2)),
    ],
)
def test_the_split_of_a_limit(rate, burst, shards, split):
    assert split_limit(rate, burst, shards) == split


@only_resp2
@pytest.mark.parametrize("shards", [0, -1, 1025, True, 2.0, "3"])
def test_shards_out_of_range_are_refused(client, qname, shards):
    with pytest.raises((ValueError, TypeError)):
        echomq.Queue(client, qname, shards=shards)
    assert len(echomq.Queue(client, qname, shards=1024).shards) == 1024


# -- placement --------------------------------------------------------------------------------


@only_resp2
def test_jobs_land_on_their_shard(client, qname):
    q = echomq.Queue(client, qname, shards=3)
    tags = q.shards
    assert tags[0] == qname
    given = ["job-%d" % i for i in range(30)]
    for jid in given:
        assert q.add(b"p-" + jid.encode(), id=jid) == jid
    for jid in given:
        shard = q.shard_of(jid)
        assert client.hget(key(tags[shard], "jobs"), jid) == b"p-" + jid.encode()
        assert [f[b"job"] for _, f in client.xrange(key(tags[shard], "pending"))].count(jid.encode()) == 1
        assert all(client.hget(key(t, "jobs"), jid) is None for i, t in enumerate(tags) if i != shard)
    # an add with an id twice is one job
    q.add(b"again", id=given[0])
    assert q.counts()["pending"] == 30
    assert client.hget(key(tags[q.shard_of(given[0])], "jobs"), given[0]) == b"p-" + given[0].encode()
    # generated ids spread over every shard, each on the shard its id hashes to
    generated = [q.add(b"g") for _ in range(30)] + q.add_many([b"m"] * 60)
    per_shard = [client.hlen(key(t, "jobs")) for t in tags]
    assert sum(per_shard) == 120 and all(n > 10 for n in per_shard), per_shard
    for jid in generated:
        assert client.hexists(key(tags[q.shard_of(jid)], "jobs"), jid)
    # the plain queue's keys are shard 0's: an unsharded queue is shard 0 of any layout
    assert echomq.Queue(client, qname).counts()["pending"] == client.xlen(key(qname, "pending"))


@only_resp2
def test_add_many_is_one_transaction_per_shard_and_batch(client, qname):
    q = echomq.Queue(client, qname, shards=4)
    ids = ["many-%d" % i for i in range(40)]
    used = {q.shard_of(i) for i in ids}
    before = command_calls(client, "multi")
    assert q.add_many([i.encode() for i in ids], ids=ids) == ids
    assert command_calls(client, "multi") - before == len(used)
    for i in ids:
        assert client.hget(key(q.shards[q.shard_of(i)], "jobs"), i) == i.encode()
    before = command_calls(client, "multi")
    out = q.add_many([b"x"] * 2500)  # generated: 2500 over 4 shards, 1,000 a transaction at most
    assert len(set(out)) == 2500
    sizes = [client.hlen(key(t, "jobs")) for t in q.shards]
    expected = sum(-(-(n - sum(1 for i in ids if q.shard_of(i) == s)) // 1000) for s, n in enumerate(sizes))
    assert command_calls(client, "multi") - before == expected


# -- the whole queue ----------------------------------------------------------------------------


def test_counts_dead_requeue_remove_purge_repeats_over_shards(client, qname):
    q = echomq.Queue(client, qname, shards=3)
    tags = q.shards
    now = server_ms(client)
    # dead jobs on every shard, their deaths interleaved across the shards
    dead_ids = ["dead-%d" % i for i in range(9)]
    for n, jid in enumerate(dead_ids):
        tag = tags[q.shard_of(jid)]
        client.zadd(key(tag, "dead"), {jid: now - 100_000 + n * 1000})
        client.hset(key(tag, "jobs"), jid, b"payload-" + jid.encode())
        client.hset(key(tag, "attempts"), jid, 3)
        client.hset(key(tag, "errors"), jid, "boom " + jid)
    assert len({q.shard_of(j) for j in dead_ids}) == 3
    q.add(b"later", id="later-1", delay_ms=60_000)
    q.add_many([b"now"] * 5)
    counts = q.counts()
    assert counts == {"scheduled": 1, "due": 0, "pending": 5, "in_flight": 0, "dead": 9}
    per_shard = q.counts(per_shard=True)
    assert len(per_shard) == 3 and sum(c["dead"] for c in per_shard) == 9
    assert [c["dead"] for c in per_shard] == [client.zcard(key(t, "dead")) for t in tags]
    # oldest death first over every shard, offset and count in that order
    records = q.dead()
    assert [r.id for r in records] == dead_ids
    assert [r.id for r in q.dead(2, 4)] == dead_ids[2:6]
    assert (records[4].attempts, records[4].error, records[4].payload) == (3, "boom dead-4", b"payload-dead-4")
    # requeue and remove reach the job's shard
    assert q.requeue("dead-0") is True and q.requeue("dead-0") is False
    assert q.remove("dead-1") is True and q.remove("dead-1") is False
    assert q.counts()["dead"] == 7 and q.counts()["pending"] == 6
    assert q.purge_dead(95_000) == 4  # dead-2 .. dead-5 died at least 95 s ago
    assert [r.id for r in q.dead()] == dead_ids[6:]
    assert q.purge_dead() == 3 and q.counts()["dead"] == 0
    # recurring jobs on their shards, listed together
    rids = ["nightly", "hourly", "sync", "report"]
    for rid in rids:
        q.repeat(rid, "every:3600000", b"r")
    assert sorted(r["id"] for r in q.repeats()) == sorted(rids)
    for rid in rids:
        occurrence = next(r for r in q.repeats() if r["id"] == rid)
        assert client.hexists(key(tags[q.shard_of(rid)], "jobs"), "%s@%d" % (rid, occurrence["next_ms"]))
    assert q.unrepeat("sync") is True and q.unrepeat("sync") is False
    assert sorted(r["id"] for r in q.repeats()) == sorted(set(rids) - {"sync"})


@only_resp2
def test_groups_are_merged_and_group_limits_split(client, qname):
    q = echomq.Queue(client, qname, shards=3)
    ids = ["grouped-%d" % i for i in range(12)]
    q.add_many([b"g"] * 12, ids=ids, group="acme")
    q.add(b"o", id="other-1", group="other")
    q.set_group_limit("acme", "10/s", 3)
    groups = q.groups()
    assert [g.group for g in groups] == ["acme", "other"]
    acme = groups[0]
    assert acme.members == 12
    each = q.groups(per_shard=True)
    assert sum(g.members for shard in each for g in shard if g.group == "acme") == 12
    for shard in each:
        for g in shard:
            if g.group == "acme":
                assert g.limit_rate == pytest.approx(200 / 60) and g.limit_burst == 1
    assert acme.limit_burst == sum(1 for shard in each if any(g.group == "acme" for g in shard))
    q.clear_group_limit("acme")
    assert all(g.limit_rate is None for shard in q.groups(per_shard=True) for g in shard)


# -- the release limit ----------------------------------------------------------------------


def test_set_limit_writes_the_split_entries_and_keeps_other_queues(client, qname):
    old = client.config_get("echomq.release-limits")["echomq.release-limits"]
    other = b"{%s-\xff}:schedule" % qname.encode()  # another queue's name, not even UTF-8: kept as it is
    client.config_set("echomq.release-limits", other + b" 5/s 1")
    try:
        q = echomq.Queue(client, qname, shards=6)
        q.set_limit("500/s", 10)

        def entries():
            reply = client.execute_command("CONFIG", "GET", "echomq.release-limits")
            value = reply[1] if isinstance(reply, list) else list(reply.values())[0]
            words = value.split()
            return {words[i]: (words[i + 1].decode(), words[i + 2].decode()) for i in range(0, len(words), 3)}

        def mine(rate, burst):
            return {key(t, "schedule").encode(): (rate, burst) for t in q.shards}

        assert entries() == {other: ("5/s", "1"), **mine("5000/m", "2")}
        q.set_limit("adaptive:7/s", 1)  # replaced, not added
        assert entries() == {other: ("5/s", "1"), **mine("adaptive:70/m", "1")}
        gets, sets = command_calls(client, "config|get"), command_calls(client, "config|set")
        refused = [
            ("0/s", 1), ("05/s", 1), ("1/x", 1), ("1000001/s", 1), ("5/s", 0), ("5/s", 1000001),
            ("adaptive:", 1), ("5 /s", 1), ("-5/s", 1),
        ]
        for rate, burst in refused:
            with pytest.raises(ValueError):
                q.set_limit(rate, burst)
        for rate, burst in [(5, 1), ("5/s", "1"), ("5/s", True)]:
            with pytest.raises((TypeError, ValueError)):
                q.set_limit(rate, burst)
        assert (command_calls(client, "config|get"), command_calls(client, "config|set")) == (gets, sets)
        q.clear_limit()
        assert entries() == {other: ("5/s", "1")}
        echomq.Queue(client, qname).set_limit("500/s", 10)  # one shard: the limit as given
        assert entries() == {other: ("5/s", "1"), key(qname, "schedule").encode(): ("500/s", "10")}
    finally:
        client.config_set("echomq.release-limits", old)


# -- the worker -----------------------------------------------------------------------------


def test_a_worker_on_three_shards_runs_every_job_once(client, qname):
    q = echomq.Queue(client, qname, shards=3)
    ids = q.add_many([b"x"] * 300) + q.add_many([b"y"] * 30, ids=["given-%d" % i for i in range(30)])
    ids += [q.add(b"later", delay_ms=200) for _ in range(6)]
    assert len({q.shard_of(i) for i in ids}) == 3
    assert run_all(q, len(ids), concurrency=8) == {i: 1 for i in ids}
    assert all(client.hlen(key(t, "jobs")) == 0 for t in q.shards)


@only_resp2
def test_a_deep_shard_does_not_delay_another_shards_job(client, qname):
    q = echomq.Queue(client, qname, shards=3)
    deep = ids_on(0, 3, 10_000, "deep-")
    q.add_many([b"d"] * len(deep), ids=deep)
    assert client.xlen(key(q.shards[0], "pending")) == 10_000
    started = {}
    ran = []

    def handler(job):
        if job.id.startswith("deep-"):
            ran.append(job.id)
            time.sleep(0.002)
        else:
            started[job.id] = time.monotonic()

    with running(q, handler, concurrency=4):
        wait_for(lambda: len(ran) >= 200, what="the deep shard to be worked")
        latencies = []
        for n, shard in enumerate([1, 2, 1, 2]):
            [jid] = ids_on(shard, 3, 1, "urgent-%d-" % n)
            added = time.monotonic()
            q.add(b"u", id=jid)
            wait_for(lambda: jid in started, timeout=5, what="the other shard's job")
            latencies.append(started[jid] - added)
        assert len(ran) < 10_000, "the deep shard must still be deep"
    print("fairness: start latencies (ms) behind a shard 10,000 deep:", [round(x * 1000, 1) for x in latencies])
    assert max(latencies) < 0.2, latencies


@only_resp2
def test_an_idle_worker_starts_a_job_of_any_shard_at_once(client, qname):
    q = echomq.Queue(client, qname, shards=4)
    started = {}
    with running(q, lambda job: started.setdefault(job.id, time.monotonic()), concurrency=2):
        time.sleep(0.3)  # idle: every shard's blocking read is waiting
        latencies = []
        for n in range(5):
            [jid] = ids_on(3, 4, 1, "last-%d-" % n)
            added = time.monotonic()
            q.add(b"x", id=jid)
            wait_for(lambda: jid in started, timeout=5, what="the last shard's job")
            latencies.append(started[jid] - added)
            time.sleep(0.15)  # idle again
    print("idle: start latencies (ms) of a job on the last of 4 shards:", [round(x * 1000, 1) for x in latencies])
    assert max(latencies) < 0.2, latencies


@only_resp2
def test_retry_after_holds_every_shard(client, qname):
    q = echomq.Queue(client, qname, shards=3)
    schedules = [key(t, "schedule") for t in q.shards]

    def held(schedule):
        reply = client.execute_command("ECHO.LIMITS", schedule)
        fields = dict(zip(reply[::2], reply[1::2]))
        return int(fields[b"held-until-ms"] or 0)

    [jid] = ids_on(1, 3, 1, "overloaded-")
    try:
        with running(q, lambda job: (_ for _ in ()).throw(echomq.RetryAfter(30_000)), lease_ms=60_000):
            q.add(b"x", id=jid)
            wait_for(
                lambda: all(held(s) > server_ms(client) + 20_000 for s in schedules), timeout=10, what="every shard held"
            )
        assert client.zscore(schedules[1], jid) is not None  # the retry, on its own shard
    finally:
        for s in schedules:
            client.execute_command("ECHO.HOLD", s, 0)
    # a group's hold holds that group on every shard
    [grouped] = ids_on(2, 3, 1, "grouped-")
    others = [ids_on(i, 3, 1, "member-")[0] for i in range(3)]
    assert q.remove(jid) is True  # its retry would hold the whole queue again

    def hold_group(job):
        if job.group == "acme":
            raise echomq.RetryAfter(30_000, group=job.group)

    try:
        with running(q, hold_group, lease_ms=60_000):
            q.add(b"x", id=grouped, group="acme")
            wait_for(lambda: client.hexists(key(q.shards[2], "errors"), grouped), timeout=10, what="the failure")
        # closed: the run's failure, with the holds that follow it on the other shards, is written
        q.add_many([b"m"] * 3, ids=others, group="acme")
        for shard in q.groups(per_shard=True):
            [acme] = [g for g in shard if g.group == "acme"]
            assert acme.held_until_ms > server_ms(client) + 20_000
        assert all(held(s) == 0 for s in schedules), "a group's hold does not hold the queue"
    finally:
        for s in schedules:
            client.execute_command("ECHO.HOLD", s, 0, "GROUP", "acme")


@only_resp2
def test_growing_from_two_to_three_shards_runs_every_job_once(client, qname):
    old = echomq.Queue(client, qname, shards=2)
    ids = old.add_many([b"x"] * 60) + old.add_many([b"y"] * 20, ids=["old-%d" % i for i in range(20)])
    ids += old.add_many([b"later"] * 20, delay_ms=300)
    moved = [i for i in ids if echomq.shard_of(i, 3) != echomq.shard_of(i, 2)]
    assert moved, "some jobs sit where the new layout would not put them"
    assert client.exists(key(old.shards[1], "jobs")) and not client.exists(key(qname + "#2", "jobs"))
    new = echomq.Queue(client, qname, shards=3)
    assert new.shards[:2] == old.shards
    fresh = new.add_many([b"new"] * 30)
    runs = {}
    lock = threading.Lock()

    def handler(job):
        with lock:
            runs[job.id] = runs.get(job.id, 0) + 1

    with running(new, handler, concurrency=8):
        wait_for(lambda: len(runs) == len(ids) + len(fresh), timeout=20, what="every job to run")
        wait_for(lambda: sum(new.counts().values()) == 0, what="every outcome")
    assert runs == {i: 1 for i in ids + fresh}
    # remove, requeue and unrepeat find what the old layout placed where the new one would not
    strays = [i for i in ("stray-%d" % n for n in range(100)) if echomq.shard_of(i, 2) != echomq.shard_of(i, 3)]
    old.add(b"s", id=strays[0], delay_ms=60_000)
    assert new.remove(strays[0]) is True
    assert not client.hexists(key(old.shards[echomq.shard_of(strays[0], 2)], "jobs"), strays[0])
    was = old.shards[echomq.shard_of(strays[1], 2)]
    client.zadd(key(was, "dead"), {strays[1]: 1})
    client.hset(key(was, "jobs"), strays[1], b"d")
    assert new.requeue(strays[1]) is True
    assert [f[b"job"] for _, f in client.xrange(key(was, "pending"))] == [strays[1].encode()]
    old.repeat(strays[2], "every:60000", b"r")
    assert new.unrepeat(strays[2]) is True and new.repeats() == []


@only_resp2
def test_a_wait_on_every_shard_takes_at_most_one_run_per_shard_and_hands_back_the_rest(client, qname):
    """Idle, with one slot: a job on each of 4 shards at once may be read by each shard's wait, so
    the worker holds at most concurrency + 4 runs; those it did not start go back on close."""
    q = echomq.Queue(client, qname, shards=4)
    release = threading.Event()
    started = []
    ids = [ids_on(shard, 4, 1, "one-%d-" % shard)[0] for shard in range(4)]

    def handler(job):
        started.append(job.id)
        release.wait(10)

    with running(q, handler, concurrency=1, lease_ms=60_000) as worker:
        time.sleep(0.3)  # idle: a blocking read on every shard
        q.add_many([b"x"] * 4, ids=ids)
        wait_for(lambda: started, what="a first run")
        time.sleep(0.3)
        held = q.counts()["in_flight"]
        print("runs held by a worker with one slot on 4 shards:", held)
        assert 1 <= held <= 1 + 4, held
        worker.close()
        release.set()
    assert len(started) == 1
    counts = q.counts()
    assert (counts["in_flight"], counts["pending"]) == (0, 3), counts
    runs = []
    with running(q, lambda job: runs.append(job.id)):
        wait_for(lambda: len(runs) == 3, what="the handed-back runs")
    assert sorted(started + runs) == sorted(ids)


@only_resp2
def test_stale_runs_are_taken_over_on_their_shard(client, qname):
    q = echomq.Queue(client, qname, shards=3)
    [jid] = ids_on(2, 3, 1, "orphan-")
    q.add(b"x", id=jid)
    pending = key(q.shards[2], "pending")
    assert client.xreadgroup("workers", "crashed", {pending: ">"}, count=10)  # never acknowledged
    runs = []
    with running(q, lambda job: runs.append((job.id, job.attempt)), lease_ms=400):
        wait_for(lambda: runs, timeout=10, what="the takeover")
        wait_for(lambda: client.xlen(pending) == 0, what="the success on its shard")
    assert runs == [(jid, 1)]
    assert q.counts()["in_flight"] == 0 and not client.hexists(key(q.shards[2], "jobs"), jid)


# -- on a cluster -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(server, tmp_path_factory):
    """Three primaries (no replicas) with the module, the slots split in three; stopped by pid."""
    binary = os.environ.get("ECHOMQ_SERVER") or "valkey-server"
    module = os.environ.get("ECHOMQ_MODULE") or str(REPO / "target" / "release" / "libechomq.so")
    workdir = tmp_path_factory.mktemp("cluster")

    def free_port() -> int:
        # the cluster bus takes a port of its own (--cluster-port), so any free port will do
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    procs, ports, buses = [], [], []
    try:
        for i in range(3):
            port, bus = free_port(), free_port()
            args = [
                binary, "--port", str(port), "--cluster-port", str(bus), "--bind", "127.0.0.1",
                "--cluster-enabled", "yes", "--cluster-config-file", str(workdir / ("nodes-%d.conf" % i)),
                "--save", "", "--appendonly", "no", "--dir", str(workdir), "--loadmodule", module,
            ]
            with open(workdir / ("node-%d.log" % i), "wb") as out:
                procs.append(subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT))
            ports.append(port)
            buses.append(bus)
        nodes = [valkey.Valkey(host="127.0.0.1", port=port, socket_connect_timeout=1) for port in ports]
        for c in nodes:
            wait_for(lambda c=c: _pings(c), timeout=15, what="a cluster node to start")
        for i, c in enumerate(nodes):
            low, high = i * 16384 // 3, (i + 1) * 16384 // 3 - 1
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
        for c in nodes[1:]:
            c.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0], buses[0])
        wait_for(
            lambda: all(b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO") for c in nodes)
            and all(len(c.execute_command("CLUSTER", "SLOTS")) == 3 for c in nodes),
            timeout=20, what="the cluster to form",
        )
        client = ValkeyCluster(startup_nodes=[ClusterNode("127.0.0.1", ports[0])])
        yield client, nodes
        client.close()
        for c in nodes:
            c.close()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _pings(c) -> bool:
    try:
        return bool(c.ping())
    except valkey.exceptions.ConnectionError:
        return False


def test_on_a_cluster_the_shards_spread_and_a_worker_runs_every_job_once(cluster, qname):
    client, nodes = cluster
    q = echomq.Queue(client, qname, shards=6)
    owners = {client.nodes_manager.get_node_from_slot(echomq.keyslot(t)).name for t in q.shards}
    assert len(owners) == 3, "six shards over three primaries"
    ids = q.add_many([b"x"] * 60) + q.add_many([b"y"] * 12, ids=["given-%d" % i for i in range(12)])
    ids.append(q.add(b"later", delay_ms=100))
    for jid in ids:
        assert client.hexists(key(q.shards[q.shard_of(jid)], "jobs"), jid)
    assert q.counts()["pending"] == 72
    assert run_all(q, len(ids), concurrency=4) == {i: 1 for i in ids}
    # the split limit is every node's config
    q.set_limit("600/s", 6)
    for c in nodes:
        words = c.execute_command("CONFIG", "GET", "echomq.release-limits")[1].split()
        assert words == [w for t in q.shards for w in (key(t, "schedule").encode(), b"100/s", b"1")]
    q.clear_limit()
    assert all(c.execute_command("CONFIG", "GET", "echomq.release-limits")[1] == b"" for c in nodes)
