"""The crossworker program (the command line clients/tests/clients.rs drives in every language)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import echomq
from conftest import CROSSWORKER, wait_for
from helpers import held_until, keys, server_ms

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


def crossworker(server, *args, timeout=60):
    """Runs the crossworker to its end: (exit code, stdout lines, stderr)."""
    out = subprocess.run(
        [sys.executable, str(CROSSWORKER), *args[:1], "--url", server.url, *args[1:]],
        capture_output=True, text=True, timeout=timeout,
    )
    return out.returncode, out.stdout.splitlines(), out.stderr


def summary_of(lines):
    found = [json.loads(line[len("summary "):]) for line in lines if line.startswith("summary ")]
    assert len(found) == 1, lines
    return found[0]


def test_crossworker_work_logs_takes_plans_failures_and_exits_after_jobs(server, qname):
    """--fail-first 2: job-i fails its first i % 3 attempts; --jobs stops the worker once every job
    is done or dead, with one took line per run and the summary counting them."""
    client = server.client()
    ids = ["job-%d" % i for i in range(6)] + ["plain"]
    code, lines, err = crossworker(server, "add", "--queue", qname, "--count", "6", "--id-prefix", "job-")
    assert code == 0, err
    echomq.Queue(client, qname).add(b"x", id="plain")  # no trailing digits: never fails by plan
    done = "{%s}:done" % qname
    code, lines, err = crossworker(
        server, "work", "--queue", qname, "--done", done, "--jobs", "7", "--log-takes",
        "--fail-first", "2", "--max-attempts", "2", "--backoff", "fixed:0", "--concurrency", "2",
        "--deadline-secs", "50",
    )
    assert code == 0, err
    assert lines[0] == "ready"
    takes = [line.split(" ") for line in lines if line.startswith("took ")]
    runs = {}
    for _, entry, job, attempt in takes:
        ms, seq = entry.split("-")
        assert ms.isdigit() and seq.isdigit(), entry
        runs.setdefault(job, []).append(int(attempt))
    # i % 3 == 0: one run; 1: fails once, then done; 2: fails both allowed attempts, dead
    assert runs == {
        "job-0": [1], "job-1": [1, 2], "job-2": [1, 2],
        "job-3": [1], "job-4": [1, 2], "job-5": [1, 2], "plain": [1],
    }
    summary = summary_of(lines)
    assert summary["runs"] == len(takes)
    assert 1 <= summary["max_concurrent"] <= 2
    assert {k.decode(): int(v) for k, v in client.hgetall(done).items()} == {
        j: 1 for j in ids if j not in ("job-2", "job-5")
    }
    assert sorted(client.zrange("{%s}:dead" % qname, 0, -1)) == [b"job-2", b"job-5"]
    assert client.hget("{%s}:errors" % qname, "job-2") == b"planned failure"
    client.close()


def test_crossworker_overload_every_holds_the_queue(server, qname):
    client = server.client()
    echomq.Queue(client, qname).add(b"x", id="h-0")
    code, lines, err = crossworker(
        server, "work", "--queue", qname, "--done", "{%s}:done" % qname, "--jobs", "1",
        "--overload-every", "1", "--retry-after-ms", "20000", "--max-attempts", "1",
    )
    assert code == 0, err
    assert summary_of(lines) == {"runs": 1, "max_concurrent": 1}
    assert held_until(client, qname) > server_ms(client) + 10_000
    assert client.zrange("{%s}:dead" % qname, 0, -1) == [b"h-0"]
    assert client.hget("{%s}:errors" % qname, "h-0") == b"retry after 20000 ms"
    client.execute_command("ECHO.HOLD", "{%s}:schedule" % qname, 0)
    client.close()


def test_crossworker_crash_on_kills_at_that_job_only(server, qname):
    client = server.client()
    q = echomq.Queue(client, qname)
    for i in range(4):
        q.add(b"x", id="k-%d" % i)
    done = "{%s}:done" % qname
    code, lines, err = crossworker(
        server, "work", "--queue", qname, "--done", done, "--concurrency", "1", "--crash-on", "k-2",
    )
    assert code == -signal.SIGKILL, (code, err)
    assert not any(line.startswith("summary ") for line in lines), "a crash prints no summary"
    assert sorted(client.hkeys(done)) == [b"k-0", b"k-1"]
    client.close()


def test_crossworker_deadline_exits_2_with_a_summary(server, qname):
    code, lines, err = crossworker(server, "work", "--queue", qname, "--deadline-secs", "1", timeout=30)
    assert code == 2, err
    assert lines == ["ready", 'summary {"runs":0,"max_concurrent":0}']


def test_crossworker_sigterm_prints_the_summary(server, qname):
    proc = subprocess.Popen(
        [sys.executable, str(CROSSWORKER), "work", "--url", server.url, "--queue", qname],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert proc.stdout.read().splitlines() == ['summary {"runs":0,"max_concurrent":0}']
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_crossworker_jobs_needs_done(server, qname):
    code, lines, err = crossworker(server, "work", "--queue", qname, "--jobs", "1", timeout=30)
    assert code != 0
    assert "--jobs needs --done" in err
    assert lines == []


def test_crossworker_exits_0_when_its_reader_is_gone(server, qname):
    """clients/tests' Worker::start reads `ready` and drops the pipe: took lines and the summary
    then meet a closed stdout, which must neither fail a job nor the graceful exit."""
    client = server.client()
    echomq.Queue(client, qname).add(b"x", id="j-1")
    done = "{%s}:done" % qname
    proc = subprocess.Popen(
        [sys.executable, str(CROSSWORKER), "work", "--url", server.url, "--queue", qname,
         "--done", done, "--log-takes"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.stdout.close()
        wait_for(lambda: client.hget(done, "j-1") == b"1", what="the job done")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.stderr.read()
        assert client.zcard("{%s}:dead" % qname) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        client.close()


def test_crossworker_shards_on_every_command(server, qname):
    """--shards N: add puts each job on its shard, work runs every shard's jobs and --jobs counts
    every shard's dead, dead/requeue/purge and the recurring commands see the whole queue."""
    client = server.client()
    q = echomq.Queue(client, qname, shards=3)
    code, lines, err = crossworker(server, "add", "--queue", qname, "--shards", "3", "--count", "12", "--id-prefix", "job-")
    assert code == 0, err
    assert lines == ["job-%d" % i for i in range(12)]
    for jid in lines:
        assert client.hexists("{%s}:jobs" % q.shards[q.shard_of(jid)], jid)
    assert len({q.shard_of(jid) for jid in lines}) == 3
    done = "{%s}:done" % qname
    code, lines, err = crossworker(
        server, "work", "--queue", qname, "--shards", "3", "--done", done, "--jobs", "12",
        "--fail-first", "1", "--max-attempts", "1", "--deadline-secs", "30",
    )
    assert code == 0, err
    dead_ids = sorted("job-%d" % i for i in range(12) if i % 2 == 1)  # failed their first attempt
    assert sorted(k.decode() for k in client.hkeys(done)) == sorted(set("job-%d" % i for i in range(12)) - set(dead_ids))
    code, lines, err = crossworker(server, "dead", "--queue", qname, "--shards", "3")
    assert code == 0, err
    assert sorted(json.loads(line)["id"] for line in lines) == dead_ids
    stray = next(j for j in dead_ids if q.shard_of(j) != 0)
    code, lines, err = crossworker(server, "requeue", "--queue", qname, "--shards", "3", "--id", stray)
    assert (code, lines) == (0, ["true"]), err
    assert client.xlen("{%s}:pending" % q.shards[q.shard_of(stray)]) == 1
    code, lines, err = crossworker(server, "purge", "--queue", qname, "--shards", "3")
    assert (code, lines) == (0, [str(len(dead_ids) - 1)]), err
    code, lines, err = crossworker(
        server, "repeat", "--queue", qname, "--shards", "3", "--id", "sync", "--spec", "every:60000", "--payload", "p"
    )
    assert code == 0, err
    assert client.exists("{%s}:schedule:echomq-repeats" % q.shards[q.shard_of("sync")])
    code, lines, err = crossworker(server, "repeats", "--queue", qname, "--shards", "3")
    assert [json.loads(line)["id"] for line in lines] == ["sync"], err
    code, lines, err = crossworker(server, "unrepeat", "--queue", qname, "--shards", "3", "--id", "sync")
    assert (code, lines) == (0, ["true"]), err
