"""Recurring jobs (docs/clients.md, Recurring jobs): ``repeat`` declares a definition the server
keeps and arms, one occurrence ``<id>@<nominal_ms>`` at a time; a worker runs each occurrence as a
job with the definition's payload, and no outcome of a run touches the definition; ``unrepeat``
ends it. Arguments the server would refuse for their form are refused here, with nothing sent."""

from __future__ import annotations

import contextlib
import time
from datetime import datetime, timezone

import pytest
import valkey

import echomq
from conftest import REPO, wait_for
from helpers import keys, running, server_ms

PAYLOAD = b"the report's payload \x00\xff"


@contextlib.contextmanager
def timer(client, qname: str):
    """The queue's pair in echomq.auto-promote for the block: the server releases it."""
    old = client.config_get("echomq.auto-promote").get(b"echomq.auto-promote", b"")
    client.config_set("echomq.auto-promote", "{%s}:schedule {%s}:pending" % (qname, qname))
    try:
        yield
    finally:
        client.config_set("echomq.auto-promote", old)


def calls(client, command: str) -> int:
    """How many times the server ran ``command`` (INFO commandstats; a module's command by the
    name it registered, upper case)."""
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_" + command, {}).get("calls", 0))


def queue_keys(client, qname: str):
    return sorted(k.decode() for k in client.keys("{%s}:*" % qname))


def nominal(occurrence: str, definition: str) -> int:
    head, _, ms = occurrence.rpartition("@")
    assert head == definition, occurrence
    return int(ms)


def test_repeat_repeats_and_unrepeat_round_trip(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    before = server_ms(client)
    fire = q.repeat("minutely", "every:60000", PAYLOAD)
    after = server_ms(client)
    # every: from the call, the first occurrence one interval later, no jitter: fired at it
    assert before + 60_000 <= fire <= after + 60_000
    until = before + 30 * 86_400_000
    report = q.repeat(
        "report", "cron:0 9 * * MON-FRI", "text payload", jitter_ms=60_000, tz="America/New_York",
        from_ms=before, until_ms=until,
    )
    listed = q.repeats()
    assert [r["id"] for r in listed] == ["minutely", "report"]
    minutely, daily = listed
    assert minutely == {
        "id": "minutely", "spec": "every:60000", "jitter_ms": 0, "tz": "UTC", "from_ms": None,
        "until_ms": None, "next_ms": fire, "fire_at_ms": fire,
    }
    assert {key: daily[key] for key in ("spec", "jitter_ms", "tz", "from_ms", "until_ms", "fire_at_ms")} == {
        "spec": "cron:0 9 * * MON-FRI", "jitter_ms": 60_000, "tz": "America/New_York",
        "from_ms": before, "until_ms": until, "fire_at_ms": report,
    }
    # A weekday's 9:00 in New York (13:00 or 14:00 UTC, by daylight saving time), after now,
    # within the next week; fired within its jitter.
    at = datetime.fromtimestamp(daily["next_ms"] / 1000, timezone.utc)
    assert (at.hour, at.minute, at.second, at.microsecond) in ((13, 0, 0, 0), (14, 0, 0, 0))
    assert before < daily["next_ms"] <= before + 7 * 86_400_000
    assert daily["next_ms"] <= report <= daily["next_ms"] + 60_000
    # Each armed occurrence is a job of the queue: in the schedule by its fire time, its payload
    # in the jobs hash as add stores one.
    schedule = {m.decode(): int(s) for m, s in client.zrange(k["schedule"], 0, -1, withscores=True)}
    one, two = "minutely@%d" % fire, "report@%d" % daily["next_ms"]
    assert schedule == {one: fire, two: report}
    assert client.hgetall(k["jobs"]) == {one.encode(): PAYLOAD, two.encode(): b"text payload"}
    assert q.unrepeat("report") is True
    assert q.unrepeat("report") is False
    assert [r["id"] for r in q.repeats()] == ["minutely"]
    assert client.zrange(k["schedule"], 0, -1) == [one.encode()]
    assert client.hkeys(k["jobs"]) == [one.encode()]
    assert q.unrepeat("minutely") is True
    assert q.repeats() == []
    # Only the stream the workers read is left (made by repeat, see below).
    assert queue_keys(client, qname) == [k["pending"]]


def test_the_same_definition_again_changes_nothing(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    first = q.repeat("tick", "every:60000", PAYLOAD, jitter_ms=30_000)
    # Another instance of the application declaring it at its start: nothing moves.
    assert q.repeat("tick", "every:60000", PAYLOAD, jitter_ms=30_000) == first
    assert echomq.Queue(client, qname).repeat("tick", "every:60000", bytearray(PAYLOAD), jitter_ms=30_000) == first
    [listed] = q.repeats()
    assert listed["fire_at_ms"] == first
    assert client.zcard(k["schedule"]) == 1
    # A payload that starts like a group's envelope is stored as add stores it (wrapped with no
    # group), the same every time, so it is the same definition too.
    tricky = b"\x00echomq-group:4:acmepayload"
    again = q.repeat("tricky", "every:60000", tricky)
    assert q.repeat("tricky", "every:60000", tricky) == again
    stored = client.hget(k["jobs"], "tricky@%d" % q.repeats()[1]["next_ms"])
    assert stored == b"\x00echomq-group:0:" + tricky
    # A different definition replaces it: one occurrence still, with the new payload.
    q.repeat("tick", "every:60000", b"new", jitter_ms=30_000)
    [tick] = [r for r in q.repeats() if r["id"] == "tick"]
    assert client.zrangebyscore(k["schedule"], "-inf", "+inf") == sorted(
        [("tick@%d" % tick["next_ms"]).encode(), ("tricky@%d" % again).encode()],
        key=lambda m: client.zscore(k["schedule"], m),
    )
    assert client.hget(k["jobs"], "tick@%d" % tick["next_ms"]) == b"new"
    assert client.hlen(k["jobs"]) == 2


BAD = [
    # (id, spec, keyword arguments, exception)
    ("", "every:1000", {}, ValueError),
    ("x" * 1025, "every:1000", {}, ValueError),
    ("é" * 513, "every:1000", {}, ValueError),
    (b"\xff", "every:1000", {}, ValueError),
    (7, "every:1000", {}, TypeError),
    ("id", "every:999", {}, ValueError),
    ("id", "every:10000000000001", {}, ValueError),
    ("id", "every:01000", {}, ValueError),
    ("id", "every:+1000", {}, ValueError),
    ("id", "every:1e3", {}, ValueError),
    ("id", "every: 1000", {}, ValueError),
    ("id", "every:", {}, ValueError),
    ("id", "hourly", {}, ValueError),
    ("id", "", {}, ValueError),
    ("id", "cron:", {}, ValueError),
    ("id", "cron:   ", {}, ValueError),
    ("id", b"every:1000", {}, TypeError),
    ("id", "every:1000", {"jitter_ms": -1}, ValueError),
    ("id", "every:1000", {"jitter_ms": 1001}, ValueError),
    ("id", "cron:* * * * *", {"jitter_ms": 10_000_000_000_001}, ValueError),
    ("id", "every:1000", {"jitter_ms": 1.5}, TypeError),
    ("id", "every:1000", {"jitter_ms": True}, TypeError),
    ("id", "every:1000", {"jitter_ms": None}, TypeError),
    ("id", "every:1000", {"tz": ""}, ValueError),
    ("id", "every:1000", {"tz": 1}, TypeError),
    ("id", "every:1000", {"from_ms": "5"}, TypeError),
    ("id", "every:1000", {"until_ms": 2**63}, ValueError),
    ("id", "every:1000", {"from_ms": -(2**63) - 1}, ValueError),
    ("id", "every:1000", {"from_ms": 10, "until_ms": 9}, ValueError),
]


def test_bad_arguments_raise_before_anything_is_sent(client, qname):
    q = echomq.Queue(client, qname)
    sent = calls(client, "ECHO.REPEAT")
    for rid, spec, options, error in BAD:
        with pytest.raises(error):
            q.repeat(rid, spec, b"p", **options)
    for payload in (None, 5, ["x"]):
        with pytest.raises(TypeError):
            q.repeat("id", "every:1000", payload)
    with pytest.raises(ValueError):
        q.unrepeat("")
    assert calls(client, "ECHO.REPEAT") == sent
    assert queue_keys(client, qname) == []
    # The bounds are the server's: it refuses just past them too, and takes them.
    schedule = keys(qname)["schedule"]
    for words in (["x" * 1025, "every:1000"], ["id", "every:999"], ["id", "every:1000", "JITTER", 1001]):
        with pytest.raises(valkey.exceptions.ResponseError):
            client.execute_command("ECHO.REPEAT", schedule, *words)
    q.repeat("x" * 1024, "every:1000", b"p", jitter_ms=1000)
    assert calls(client, "ECHO.REPEAT") == sent + 4  # the count sees what is sent
    q.repeat("é" * 512, "every:10000000000000", b"p", jitter_ms=10_000_000_000_000)
    q.repeat("cron", "cron:0 0 1 1 *", b"p", jitter_ms=60_000, tz="Europe/Berlin", from_ms=-(2**63), until_ms=2**63 - 1)
    assert len(q.repeats()) == 3


@pytest.mark.parametrize(
    "spec, options, wording",
    [
        ("cron:61 * * * *", {}, "invalid spec"),
        ("cron:* * * *", {}, "invalid spec"),
        ("cron:0 0 30 2 *", {}, "invalid spec"),
        ("every:60000", {"tz": "Mars/Olympus"}, "invalid TZ"),
        ("every:60000", {"until_ms": 1}, "no occurrence still to come"),
    ],
)
def test_what_only_the_server_knows_is_refused_with_nothing_written(client, qname, spec, options, wording):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    with pytest.raises(valkey.exceptions.ResponseError, match=wording):
        q.repeat("id", spec, b"p", **options)
    assert q.repeats() == []
    assert client.exists(k["schedule"], k["jobs"]) == 0


def test_a_worker_runs_each_occurrence_once_and_no_outcome_ends_the_definition(server, qname):
    """every:1000 on the server's timer and one Worker (max_attempts 2): the first occurrence
    succeeds, the second fails once and is retried, the third fails twice and is dead, the later
    ones succeed; the definition is there after each, every occurrence ran with the payload and
    its own id, no nominal second was skipped, none ran twice; unrepeat stops it."""
    client = server.client()
    q = echomq.Queue(client, qname)
    k = keys(qname)
    runs = []

    with timer(client, qname):
        first = q.repeat("tick", "every:1000", PAYLOAD)
        # The timer releases the first occurrence with no worker started: into the workers'
        # stream, which repeat made (a release into a missing pending would make it a list).
        wait_for(lambda: client.xlen(k["pending"]) == 1, timeout=10, what="the first release")
        assert client.type(k["pending"]) == b"stream"

        def handler(job):
            n = (nominal(job.id, "tick") - first) // 1000
            runs.append((job.id, job.payload, job.attempt))
            if n == 1 and job.attempt == 1 or n == 2:
                raise RuntimeError("occurrence %d, attempt %d" % (n, job.attempt))

        def ran(n):
            return ["tick@%d" % (first + 1000 * n), PAYLOAD] in [[i, p] for i, p, _ in runs]

        with running(q, handler, max_attempts=2, backoff="fixed:100"):
            wait_for(lambda: client.hexists(k["jobs"], "tick@%d" % first) == 0, timeout=15, what="the first success")
            assert [r["id"] for r in q.repeats()] == ["tick"]
            wait_for(lambda: ("tick@%d" % (first + 1000), PAYLOAD, 2) in runs, timeout=15, what="the retry")
            assert [r["id"] for r in q.repeats()] == ["tick"]
            wait_for(lambda: q.counts()["dead"] == 1, timeout=15, what="the dead occurrence")
            assert [r["id"] for r in q.repeats()] == ["tick"]
            wait_for(lambda: ran(3) and ran(4), timeout=15, what="the occurrences after the dead one")
            assert q.unrepeat("tick") is True
            settled = {"scheduled": 0, "due": 0, "pending": 0, "in_flight": 0, "dead": 1}
            wait_for(lambda: q.counts() == settled, timeout=15, what="the released occurrences to be done")
            count = len(runs)
            time.sleep(2.5)  # two intervals: an occurrence still armed would have run
            assert len(runs) == count
    assert q.repeats() == []
    assert client.zcard(k["schedule"]) == 0
    # Every occurrence from the first to the last released, each run once (the failing ones once
    # per attempt), with the definition's payload and its own id.
    nominals = sorted({nominal(i, "tick") for i, _, _ in runs})
    assert nominals == list(range(first, nominals[-1] + 1, 1000)), nominals
    assert len(nominals) >= 5
    assert all(p == PAYLOAD for _, p, _ in runs)
    attempts = {}
    for i, _, attempt in runs:
        attempts.setdefault(nominal(i, "tick"), []).append(attempt)
    assert {n: a for n, a in attempts.items() if a != [1]} == {first + 1000: [1, 2], first + 2000: [1, 2]}
    # The dead occurrence is kept like any dead job, with its payload.
    [dead] = q.dead()
    assert (dead.id, dead.payload, dead.attempts) == ("tick@%d" % (first + 2000), PAYLOAD, 2)
    assert dead.error == "occurrence 2, attempt 2"


def test_the_documented_acl_user_declares_lists_and_ends_a_recurring_job(server, qname):
    """docs/security.md's user for the libraries: repeat, repeats, an occurrence run by a worker,
    unrepeat, with not one refusal in ACL LOG."""
    client = server.client()
    line = [l for l in (REPO / "docs" / "security.md").read_text().splitlines() if l.startswith("ACL SETUSER echomq-app ")]
    assert len(line) == 1
    words = [">app-pw" if w == ">APP-PASSWORD" else w for w in line[0].split()]
    try:
        client.execute_command(*words)
    except valkey.exceptions.ResponseError as exc:
        if "Unknown command" not in str(exc):
            raise
        pytest.skip("the documented line names a command this server lacks (Redis 7.0: CLIENT SETINFO)")
    client.execute_command("ACL", "LOG", "RESET")
    app = valkey.Valkey(host="127.0.0.1", port=server.port, username="echomq-app", password="app-pw")
    try:
        q = echomq.Queue(app, qname)
        first = q.repeat("tick", "every:1000", PAYLOAD)
        assert [r["next_ms"] for r in q.repeats()] == [first]
        runs = []
        with running(q, lambda job: runs.append(job.id)):
            wait_for(lambda: runs, timeout=10, what="an occurrence")
        assert runs[0] == "tick@%d" % first
        assert q.unrepeat("tick") is True
        assert client.execute_command("ACL", "LOG") == []
    finally:
        app.close()
        client.execute_command("ACL", "DELUSER", "echomq-app")
