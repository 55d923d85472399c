"""The library runs the scripts and constants of the repository's protocol/ folder (their one copy,
installed as package data) byte for byte: a copy that differs would be cached by the server under
another SHA1 (clients/tests/clients.rs checks all three libraries against a server the same way)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import echomq
from echomq import _protocol

PROTOCOL = Path(__file__).resolve().parents[3] / "protocol"


def sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


@pytest.fixture(scope="module")
def files():
    if not PROTOCOL.is_dir():
        pytest.skip("not run from a checkout: no %s" % PROTOCOL)
    return {p.name: p.read_bytes() for p in PROTOCOL.glob("*.lua")}


def test_the_installed_scripts_are_the_checkouts(files):
    assert sorted(files) == sorted(_protocol.SCRIPTS)
    for name, text in _protocol.SCRIPTS.items():
        assert text.encode() == files[name], "the installed %s is not protocol/%s" % (name, name)
    assert _protocol.CONSTANTS == json.loads((PROTOCOL / "constants.json").read_bytes())


@pytest.mark.parametrize("client", [2], indirect=True)
def test_queue_and_worker_run_the_files(client, qname, files):
    q = echomq.Queue(client, qname)
    w = echomq.Worker(q, lambda job: None)
    run = {
        "add_with_id.lua": q._add_script,
        "requeue.lua": q._requeue_script,
        "purge_dead.lua": q._purge_script,
        "fail.lua": w._fail_script,
        "succeed.lua": w._success_script,
        "hand_back.lua": w._hand_back_script,
    }
    assert sorted(run) == sorted(files)
    for name, script in run.items():
        assert script.sha == sha1(files[name]), name
    # What the server caches after the queue's three scripts ran: the files' SHA1s.
    client.script_flush()
    q.add(b"x", id="given")
    q.requeue("given")
    q.purge_dead(0)
    shas = [sha1(files[n]) for n in ("add_with_id.lua", "requeue.lua", "purge_dead.lua")]
    assert client.script_exists(*shas) == [True, True, True]


def test_the_constants_are_the_files():
    constants = json.loads((PROTOCOL / "constants.json").read_bytes()) if PROTOCOL.is_dir() else _protocol.CONSTANTS
    assert echomq.DEFAULT_BACKOFF == constants["default_backoff"]
    assert _protocol.GROUP == constants["group"].encode()
    assert _protocol.MAX_HOLD_MS == constants["max_hold_ms"] == 86_400_000
