"""A real valkey-server with the echomq module for the suite (never a mock)."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import valkey

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
CROSSWORKER = HERE / "crossworker.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _missing(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip("SKIPPED: " + reason)


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.log = log
        self.url = "redis://127.0.0.1:%d/0" % port

    def client(self, protocol: int = 2) -> valkey.Valkey:
        return valkey.Valkey(host="127.0.0.1", port=self.port, protocol=protocol)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    binary = os.environ.get("ECHOMQ_SERVER") or shutil.which("valkey-server")
    if not binary:
        _missing("valkey-server not found (set ECHOMQ_SERVER or put it on PATH)")
    module = Path(os.environ.get("ECHOMQ_MODULE") or REPO / "target" / "release" / "libechomq.so")
    if not module.is_file():
        pytest.fail("the echomq module is missing at %s: run make build (or set ECHOMQ_MODULE)" % module, pytrace=False)
    workdir = tmp_path_factory.mktemp("valkey")
    for _ in range(5):
        port = _free_port()
        log = workdir / ("server-%d.log" % port)
        args = [
            binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(workdir), "--loadmodule", str(module),
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        client = valkey.Valkey(host="127.0.0.1", port=port, socket_connect_timeout=1)
        deadline = time.monotonic() + 15
        up = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                client.ping()
                up = True
                break
            except valkey.exceptions.ConnectionError:
                time.sleep(0.05)
        client.close()
        if up:
            break
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
    else:
        pytest.fail("valkey-server did not start; log: %s" % log.read_text(errors="replace"), pytrace=False)
    srv = Server(proc, port, log)
    yield srv
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def client(server, request):
    """A client of the test server, in RESP2 and in RESP3 (the library reads both)."""
    c = server.client(request.param)
    yield c
    c.close()


@pytest.fixture
def qname():
    return "pytest-" + secrets.token_hex(4)


class CrossWorker:
    """tests/crossworker.py in a separate process."""

    def __init__(self, server: Server, queue: str, *options: str) -> None:
        args = [sys.executable, str(CROSSWORKER), "work", "--url", server.url, "--queue", queue, *options]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=None, text=True)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("crossworker did not print ready (got %r)" % line)

    def stop(self, sig=None, timeout: float = 30) -> int:
        import signal as _signal

        if self.proc.poll() is None:
            self.proc.send_signal(sig if sig is not None else _signal.SIGTERM)
        return self.proc.wait(timeout)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def crossworkers(server):
    started = []

    def start(queue: str, *options: str) -> CrossWorker:
        w = CrossWorker(server, queue, *options)
        started.append(w)
        return w

    yield start
    for w in started:
        w.cleanup()


def wait_for(predicate, timeout: float = 30, interval: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(interval)
