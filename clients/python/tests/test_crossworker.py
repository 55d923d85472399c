"""The crossworker program (the command line clients/tests/clients.rs drives in every language)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import CROSSWORKER
from helpers import keys

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
