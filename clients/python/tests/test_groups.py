"""Groups (docs/clients.md, Groups): ``add(..., group=...)`` puts the job in its group's part of the
schedule, released by the server's timer; a grouped job keeps its group through a retry; a group
the server would refuse is refused by the library with nothing written."""

from __future__ import annotations

import contextlib

import pytest
import valkey

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


def limits_held_until(client, qname: str) -> int:
    """The whole queue's hold, ECHO.LIMITS' held-until-ms (0: not held)."""
    from helpers import held_until

    return held_until(client, qname)


def calls(client, command: str) -> int:
    """How many times the server ran ``command`` (INFO commandstats)."""
    stats = client.info("commandstats").get("cmdstat_" + command, {})
    return int(stats.get("calls", 0))


def test_a_group_limit_set_by_the_library_binds_that_group_only(client, qname):
    q = echomq.Queue(client, qname)
    q.set_group_limit("slow", "2/s", 1)
    [slow] = q.groups() or [None]
    assert slow is None, "a limit alone makes no group: it has no jobs"
    q.add_many([b"s"] * 6, group="slow")
    q.add_many([b"f"] * 6, group="fast")
    by_name = {g.group: g for g in q.groups()}
    assert (by_name["slow"].limit_rate, by_name["slow"].limit_burst) == (2.0, 1)
    assert (by_name["fast"].limit_rate, by_name["fast"].limit_burst) == (None, None)
    order = []

    def handler(job):
        order.append(job.group)

    with timer(client, qname), running(q, handler):
        wait_for(lambda: len(order) == 12, what="every job to run")
    # At 2/s, burst 1, the slow group's six jobs take 2.5 s at least (one now, then one every
    # 500 ms); the fast one's leave at the first release with the slow group's first (started in
    # any order), so all six run before the slow group's second job. Without the limit both would
    # leave at once.
    assert order.index("slow") < 7, order
    second_slow = [i for i, g in enumerate(order) if g == "slow"][1]
    assert order[:second_slow].count("fast") == 6, order
    assert not client.exists("{%s}:schedule:echomq-g:slow" % qname)


def test_a_cleared_group_limit_lets_the_group_go(client, qname):
    q = echomq.Queue(client, qname)
    q.set_group_limit("g", "1/h", 1)
    q.add_many([b"x"] * 3, group="g")
    assert [(g.limit_rate, g.limit_burst) for g in q.groups()] == [(1 / 3600, 1)]
    ran = []
    with timer(client, qname), running(q, lambda job: ran.append(job.id)):
        wait_for(lambda: len(ran) == 1, what="the one job its burst lets go")
        assert [g.members for g in q.groups()] == [2], "one an hour: the two others wait"
        q.clear_group_limit("g")
        wait_for(lambda: len(ran) == 3, what="the two others once the limit is cleared")
    q.clear_group_limit("g")  # nothing left to clear is no error
    assert q.groups() == []


def test_retry_after_with_a_group_holds_that_group_only(client, qname):
    q = echomq.Queue(client, qname)
    k = keys(qname)
    held = q.add(b"h", group="held")
    runs = []

    def handler(job):
        sec, usec = client.time()
        runs.append((job.id, job.group, job.attempt, int(sec) * 1000 + int(usec) // 1000))
        if job.group == "held" and job.attempt == 1:
            raise echomq.RetryAfter(3000, group=job.group)

    with timer(client, qname), running(q, handler, backoff="fixed:0"):
        wait_for(lambda: client.hget(k["attempts"], held) == b"1", what="the held group's failure")
        [group] = [g for g in q.groups() if g.group == "held"]
        hold_end = group.held_until_ms
        assert hold_end > runs[0][3] + 2000, "the group is held for about 3 s"
        assert limits_held_until(client, qname) == 0, "the queue itself is not held"
        later = q.add(b"h2", group="held")
        others = q.add_many([b"o"] * 5, group="other")
        # The other group runs during the hold, the held group's jobs wait it out.
        wait_for(lambda: {r[0] for r in runs} >= set(others), what="the other group's jobs")
        assert all(when < hold_end for jid, _, _, when in runs if jid in others)
        assert [r for r in runs if r[0] == later] == []
        wait_for(lambda: len(runs) == 8, timeout=30, what="the held group's jobs after the hold")
    for jid, _, attempt, when in runs:
        if jid in (held, later) and (jid, attempt) != (held, 1):
            assert when >= hold_end, "a held group's job ran before its hold ended"
    assert sorted((r[0], r[2]) for r in runs if r[1] == "held") == sorted([(held, 1), (held, 2), (later, 1)])


def test_retry_after_without_a_group_of_its_own_holds_the_queue(client, qname):
    """An ungrouped job's ``RetryAfter(ms, group=job.group)`` is ``group=None``: the whole queue."""
    q = echomq.Queue(client, qname)
    k = keys(qname)
    jid = q.add(b"u")

    def handler(job):
        assert job.group is None
        raise echomq.RetryAfter(60_000, group=job.group)

    try:
        with running(q, handler, backoff="fixed:600000"):
            wait_for(lambda: client.hexists(k["errors"], jid), what="the failure")
            wait_for(lambda: limits_held_until(client, qname) > 0, what="the queue's hold")
    finally:
        client.execute_command("ECHO.HOLD", k["schedule"], 0)


def test_groups_lists_every_group_with_its_counts_across_pages(client, qname):
    q = echomq.Queue(client, qname)
    sizes = {"g%02d" % i: i + 1 for i in range(7)}
    for name, n in sizes.items():
        q.add_many([b"x"] * n, group=name)
        q.add(b"later", group=name, delay_ms=600_000)
    q.add_many([b"u", b"u"])  # nothing governs the ungrouped jobs: straight into pending
    q.add(b"u", delay_ms=600_000)
    client.execute_command("ECHO.SCHEDULE", keys(qname)["schedule"], "due-now", 0)
    client.execute_command("ECHO.HOLD", keys(qname)["schedule"], 60_000, "GROUP", "g03")
    before = calls(client, "ECHO.GROUPS")
    got = q.groups(page_size=2)
    assert calls(client, "ECHO.GROUPS") - before >= 4, "eight groups, two a page"
    assert [g.group for g in got] == [None] + sorted(sizes)
    assert (got[0].members, got[0].due) == (2, 1)
    for g in got[1:]:
        assert (g.members, g.due) == (sizes[g.group] + 1, sizes[g.group]), g
        assert g.limit_rate is None and g.available is None
    assert [g.group for g in got if g.held_until_ms > 0] == ["g03"]
    assert q.groups() == got  # one page of 1,000
    # More groups than the default page: 1,001 groups, two pages or more.
    q.add_many([b"y"], group="h")
    pipe = client.pipeline(transaction=False)
    for i in range(1000):
        pipe.execute_command("ECHO.SCHEDULE", keys(qname)["schedule"], "m%d" % i, 600_000, "GROUP", "z%04d" % i)
    pipe.execute()
    before = calls(client, "ECHO.GROUPS")
    many = q.groups()
    assert calls(client, "ECHO.GROUPS") - before >= 2
    assert len(many) == 1 + 7 + 1 + 1000
    assert [g.group for g in many[-1000:]] == ["z%04d" % i for i in range(1000)]
    assert all((g.members, g.due) == (1, 0) for g in many[-1000:])
    # counts() adds every group's jobs to the schedule's own, past the first page too.
    counts = q.counts()
    assert (counts["scheduled"], counts["due"]) == (
        sum(g.members - g.due for g in many),
        sum(g.due for g in many),
    ) == (1 + 7 + 1000, 1 + sum(sizes.values()) + 1)
    assert counts["pending"] == 2


BAD_LIMITS = [
    ("", "5/s", 1, ValueError),
    ("x" * 1025, "5/s", 1, ValueError),
    (None, "5/s", 1, ValueError),
    (7, "5/s", 1, TypeError),
    ("g", "0/s", 1, ValueError),
    ("g", "05/s", 1, ValueError),
    ("g", "5/d", 1, ValueError),
    ("g", "5", 1, ValueError),
    ("g", "-5/s", 1, ValueError),
    ("g", "1000001/s", 1, ValueError),
    ("g", "adaptive:5/s", 1, ValueError),
    ("g", " 5/s", 1, ValueError),
    ("g", 5, 1, TypeError),
    ("g", "5/s", 0, ValueError),
    ("g", "5/s", 1000001, ValueError),
    ("g", "5/s", True, ValueError),
    ("g", "5/s", "1", ValueError),
    ("g", "5/s", 1.5, ValueError),
]


@pytest.mark.parametrize("group,rate,burst,error", BAD_LIMITS)
def test_a_bad_group_limit_is_refused_with_nothing_sent(client, qname, group, rate, burst, error):
    q = echomq.Queue(client, qname)
    before = calls(client, "ECHO.GROUPLIMIT")
    with pytest.raises(error):
        q.set_group_limit(group, rate, burst)
    assert calls(client, "ECHO.GROUPLIMIT") == before
    assert queue_keys(client, qname) == []
    q.set_group_limit("g", "5/s", 1)  # counted: the count above can tell
    assert calls(client, "ECHO.GROUPLIMIT") == before + 1


def test_bad_group_arguments_are_refused_with_nothing_sent(client, qname):
    q = echomq.Queue(client, qname)
    before = (calls(client, "ECHO.GROUPLIMIT"), calls(client, "ECHO.GROUPS"))
    for group in ["", "x" * 1025, None]:
        with pytest.raises(ValueError):
            q.clear_group_limit(group)
    for page_size in [0, 1001, True, 2.0]:
        with pytest.raises(ValueError):
            q.groups(page_size=page_size)
    for group in ["", "x" * 1025]:
        with pytest.raises(ValueError, match="1..=1024 bytes"):
            echomq.RetryAfter(1000, group=group)
    assert (calls(client, "ECHO.GROUPLIMIT"), calls(client, "ECHO.GROUPS")) == before
    assert queue_keys(client, qname) == []
    # The largest the server takes is taken, and counted.
    q.set_group_limit("x" * 1024, "1000000/H", 1_000_000)
    q.set_group_limit("g", "1/m", 1)
    assert client.get("{%s}:schedule:echomq-glim:g" % qname) == b"1 1 60000 1"
    assert calls(client, "ECHO.GROUPLIMIT") == before[0] + 2


def test_the_servers_refusal_of_a_group_limit_is_raised(client, qname):
    q = echomq.Queue(client, qname)
    client.rpush("{%s}:schedule:echomq-glim:g" % qname, "not an override")
    with pytest.raises(valkey.exceptions.ResponseError, match="WRONGTYPE"):
        q.set_group_limit("g", "5/s", 1)
    with pytest.raises(valkey.exceptions.ResponseError, match="WRONGTYPE"):
        q.clear_group_limit("g")
    assert client.lrange("{%s}:schedule:echomq-glim:g" % qname, 0, -1) == [b"not an override"]


def test_the_documented_acl_user_makes_every_group_call(server, client, qname):
    """docs/security.md's user for the libraries: counts(), groups(), a group's limit and a group's
    hold, with not one refusal in ACL LOG."""
    from conftest import REPO

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
        q.set_group_limit("g", "5/s", 1)
        held = q.add(b"x", group="g")
        q.add(b"y", group="h", delay_ms=600_000)
        assert q.counts()["due"] == 1
        assert [g.group for g in q.groups()] == ["g", "h"]

        def handler(job):
            raise echomq.RetryAfter(60_000, group=job.group)

        with running(q, handler, backoff="fixed:0"):
            wait_for(lambda: client.hexists(keys(qname)["errors"], held), what="the failure")
        assert [g.held_until_ms > 0 for g in q.groups()] == [True, False]
        q.clear_group_limit("g")
        assert client.execute_command("ACL", "LOG") == []
    finally:
        app.close()
        client.execute_command("ACL", "DELUSER", "echomq-app")
