"""Helpers shared by the tests."""

from __future__ import annotations

import contextlib
import threading

import echomq


def server_ms(client) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


@contextlib.contextmanager
def running(queue, handler, cls=echomq.Worker, **options):
    """Runs a Worker (or ``cls``, a subclass) on a thread for the duration of the block, then
    closes it and joins."""
    worker = cls(queue, handler, **options)
    errors = []

    def target():
        try:
            worker.run()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    assert worker.ready.wait(30), "worker did not start"
    try:
        yield worker
    finally:
        worker.close()
        thread.join(60)
        assert not thread.is_alive(), "Worker.run did not return after close()"
        if errors:
            raise errors[0]


def queue_keys(name: str):
    tag = "{" + name + "}:"
    return [tag + k for k in ("schedule", "pending", "dead", "jobs", "attempts", "errors")]


def keys(qname: str):
    """The queue's six keys by suffix."""
    return {k: "{%s}:%s" % (qname, k) for k in ("schedule", "pending", "dead", "jobs", "attempts", "errors")}


def in_flight(client, qname: str) -> int:
    return echomq.Queue(client, qname).counts()["in_flight"]


def held_until(client, qname: str) -> int:
    """The end of the queue's hold (server ms), 0 when not held."""
    reply = client.execute_command("ECHO.LIMITS", "{%s}:schedule" % qname)
    if not isinstance(reply, dict):
        reply = dict(zip(reply[::2], reply[1::2]))
    return int(reply[b"held-until-ms"] or 0)


@contextlib.contextmanager
def held_and_read(client, qname: str):
    """A job added, then the queue held for a minute, then a Worker (60 s lease) whose handler
    records the ids it runs: the worker reads the job's entry and keeps it, waiting out the hold.
    Yields (runs, job id). (Added while held, the job would wait in the schedule instead.) The
    worker is closed when the block ends (so it hands the entry back), the hold lifted after."""
    from conftest import wait_for

    queue = echomq.Queue(client, qname)
    schedule = keys(qname)["schedule"]
    jid = queue.add(b"x")
    client.execute_command("ECHO.HOLD", schedule, 60_000)
    runs = []
    try:
        with running(queue, lambda job: runs.append(job.id), lease_ms=60_000):
            wait_for(lambda: in_flight(client, qname) == 1, what="the entry to be read")
            yield runs, jid
    finally:
        client.execute_command("ECHO.HOLD", schedule, 0)


def recorder(runs, fail=None):
    """``handler(name)``: a handler that records (name, job id) in ``runs`` (thread-safe), then
    raises RuntimeError(fail) when ``fail`` is given."""
    lock = threading.Lock()

    def handler(name):
        def h(job):
            with lock:
                runs.append((name, job.id))
            if fail is not None:
                raise RuntimeError(fail)

        return h

    return handler
