"""The protocol's scripts and constants (docs/clients.md): the files of the repository's
``protocol/`` folder, the one copy the three libraries share. ``src/echomq/protocol`` is a symlink
to that folder; setuptools follows it and copies the files into the wheel and the sdist as package
data, so an installed package reads its own copy here, at import."""

from __future__ import annotations

import json
from pathlib import Path

DIR = Path(__file__).with_name("protocol")


def _text(name: str) -> str:
    # Bytes, not read_text(): no newline translation, so the text (and its SHA1, which the
    # server caches the script by) is the file's, byte for byte.
    return (DIR / name).read_bytes().decode("utf-8")


#: ``add`` with an id given by the caller
ADD_WITH_ID = _text("add_with_id.lua")
#: step 3: a batch of successes
SUCCEED = _text("succeed.lua")
#: steps 4 and 5: one failure
FAIL = _text("fail.lua")
#: step 8: an entry taken but not started, handed back on close
HAND_BACK = _text("hand_back.lua")
#: dead -> pending
REQUEUE = _text("requeue.lua")
#: removes the dead jobs older than a cutoff
PURGE_DEAD = _text("purge_dead.lua")
#: every script, by file name
SCRIPTS = {
    "add_with_id.lua": ADD_WITH_ID,
    "succeed.lua": SUCCEED,
    "fail.lua": FAIL,
    "hand_back.lua": HAND_BACK,
    "requeue.lua": REQUEUE,
    "purge_dead.lua": PURGE_DEAD,
}

CONSTANTS = json.loads(_text("constants.json"))

GROUP: bytes = CONSTANTS["group"].encode()  # the stream's consumer group, not a job's group
#: a grouped job's payload entry starts with NUL and this (docs/clients.md, Groups)
JOB_GROUP_ENVELOPE: bytes = b"\x00" + CONSTANTS["job_group_envelope"].encode()
MAX_JOB_GROUP_BYTES: int = CONSTANTS["max_job_group_bytes"]  # what ECHO.ADD ... GROUP takes
MAX_DELAY_MS: int = CONSTANTS["max_delay_ms"]  # the most ECHO.SCHEDULE takes
MAX_HOLD_MS: int = CONSTANTS["max_hold_ms"]  # the most ECHO.HOLD takes (a day)
MAX_GROUP_RATE: int = CONSTANTS["max_group_rate"]  # the largest n of ECHO.GROUPLIMIT's n/s, n/m, n/h
MAX_GROUP_BURST: int = CONSTANTS["max_group_burst"]  # the largest burst ECHO.GROUPLIMIT takes
MAX_GROUPS_COUNT: int = CONSTANTS["max_groups_count"]  # the most groups an ECHO.GROUPS page shows
MAX_REPEAT_ID_BYTES: int = CONSTANTS["max_repeat_id_bytes"]  # the longest id ECHO.REPEAT takes
MIN_EVERY_MS: int = CONSTANTS["min_every_ms"]  # the shortest every:<ms> ECHO.REPEAT takes
MAX_EVERY_MS: int = CONSTANTS["max_every_ms"]  # the longest every:<ms>, and the largest jitter
MAX_SHARDS: int = CONSTANTS["max_shards"]  # the most sub-queues a sharded queue has
MAX_ERROR_BYTES: int = CONSTANTS["max_error_bytes"]
ADD_BATCH: int = CONSTANTS["add_batch"]  # jobs per transaction of add_many
SUCCESS_BATCH: int = CONSTANTS["success_batch"]  # runs per success script call
PROMOTE_LIMIT: int = CONSTANTS["promote_limit"]
DEFAULT_BACKOFF: str = CONSTANTS["default_backoff"]
DEFAULT_MAX_ATTEMPTS: int = CONSTANTS["default_max_attempts"]
DEFAULT_LEASE_MS: int = CONSTANTS["default_lease_ms"]
DEFAULT_MAX_DELIVERIES: int = CONSTANTS["default_max_deliveries"]
DEFAULT_SHUTDOWN_TIMEOUT_MS: int = CONSTANTS["default_shutdown_timeout_ms"]
