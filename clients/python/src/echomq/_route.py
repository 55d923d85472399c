"""Where a queue's commands go: the client itself, or on a Valkey Cluster the primary that owns the
queue's slot.

Every key of a queue has the hash tag ``{name}``, so the whole queue is one slot and one node. The
library sends everything there through that node's own client (the ``valkey.Valkey`` the cluster
client keeps per node, with the cluster's parser and connection options): a ``MULTI``/``EXEC``
stays a real transaction (valkey-py's ``ClusterPipeline`` refuses ``transaction=True``), a pipeline
keeps its order on one connection, a script is loaded where it runs, and a keyless command
(``TIME``, ``ECHO.QUEUES``, ``ECHO.DELAY``) is answered by that node, whose clock and config are the
ones that schedule and promote the queue, not by a random node.

A redirection is not followed by hand: ``MOVED``, ``ASK``, ``TRYAGAIN`` and ``CLUSTERDOWN`` are
refusals before anything ran, so the caller refreshes the slot map (``refresh``) and sends the
command again. Not following ``ASK`` with ``ASKING`` is on purpose: during a slot migration a
transaction or a script touches several keys of the queue, some already moved and some not, and
running it on the importing node would create there a second copy of a key still on the other one.
Waiting for the migration to end costs a pause, never a job.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from valkey.cluster import ValkeyCluster
from valkey.exceptions import BusyLoadingError
from valkey.exceptions import ConnectionError as _ConnError
from valkey.exceptions import TimeoutError as _TimeoutError
from valkey.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MasterDownError,
    MovedError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
    ValkeyClusterException,
)

log = logging.getLogger("echomq")

#: the codes of the refusals that mean "not here, not now": the command did not run
_REDIRECT_CODES = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")
#: a pause shorter than this between two refreshes of the slot map is skipped: the threads of one
#: worker meet the same MOVED together, and one CLUSTER SLOTS answers them all
_REFRESH_EVERY_S = 0.1
#: how long a queue's call (add, counts, requeue...) on a cluster waits out a failover or a slot
#: migration, sending again, before it raises: a failover takes the node timeout and an election
CLUSTER_WAIT_S = 30.0


def is_cluster(client) -> bool:
    return isinstance(client, ValkeyCluster)


def redirected(exc: BaseException) -> bool:
    """A refusal of a cluster node that says the command ran nowhere: the slot moved (``MOVED``),
    is moving (``ASK``, ``TRYAGAIN``), or has no primary now (``CLUSTERDOWN``, a failover); or the
    slot map in hand names no node for it (``SlotNotCoveredError``, before anything was sent), or
    the cluster client gave up following redirections (``ClusterError``: TTL exhausted). The
    cluster's parser takes the code off the message, hence the classes first; the text is for a
    parser that keeps it (and for a pipeline's error, prefixed with its command)."""
    if isinstance(exc, (AskError, TryAgainError, ClusterDownError, ClusterError, SlotNotCoveredError)):
        return True
    if isinstance(exc, ValkeyClusterException):
        # "Valkey Cluster cannot be connected" and the like, from a slot map refresh
        return True
    if isinstance(exc, ResponseError):
        text = str(exc).split("caused error: ", 1)[-1]
        return text.startswith(_REDIRECT_CODES)
    return False


def describe(exc: BaseException) -> str:
    """An error for a log line, in the server's wording: valkey-py's parsers strip the code off
    the errors they raise as their own classes (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, MASTERDOWN,
    READONLY, LOADING: "147 127.0.0.1:7002"), so it is put back in front."""
    text = str(exc)
    for cls, code in (
        (ReadOnlyError, "READONLY"),
        (BusyLoadingError, "LOADING"),
        (MovedError, "MOVED"),
        (AskError, "ASK"),
        (TryAgainError, "TRYAGAIN"),
        (MasterDownError, "MASTERDOWN"),
        (ClusterDownError, "CLUSTERDOWN"),
    ):
        if isinstance(exc, cls):
            # a pipeline's error is "Command # n (...) of pipeline caused error: <text>"
            head, sep, tail = text.rpartition("caused error: ")
            return head + sep + (tail if tail.startswith(code) else code + " " + tail)
    return text


def unsent(exc: BaseException) -> bool:
    """A connection error raised while connecting (valkey-py says "connecting to"), or LOADING (a
    restarted node refuses every command until its data is loaded): the command did not run, so
    even a call that must not run twice can be sent again."""
    if isinstance(exc, BusyLoadingError):
        return True
    return isinstance(exc, (_ConnError, _TimeoutError)) and "connecting to" in str(exc)


class Route:
    """The client a queue's commands run on, and the refresh of the slot map after a refusal."""

    def __init__(self, client, key: bytes) -> None:
        self.client = client
        self.cluster = is_cluster(client)
        self._key = key  # any key of the queue: they all hash to its slot
        self._lock = threading.Lock()
        self._refreshed = 0.0

    def slot(self) -> int:
        return self.client.keyslot(self._key)

    def node(self):
        """The primary that owns the queue's slot (a ``ClusterNode``), by the slot map in hand.
        Raises ``SlotNotCoveredError`` when the map has no owner for it."""
        return self.client.nodes_manager.get_node_from_slot(self.slot())

    def target(self):
        """The client to send a queue's command to: the client itself, or on a cluster the slot
        owner's own ``valkey.Valkey``."""
        if not self.cluster:
            return self.client
        return self.client.get_valkey_connection(self.node())

    def connection_kwargs(self) -> dict:
        return dict(self.client.get_connection_kwargs())

    def refresh(self, exc: Optional[BaseException] = None) -> None:
        """Learns where the queue's slot is now. After a MOVED, from the MOVED itself (it names
        the new owner; the map takes it as the cluster client's own redirections do, with no
        round trip and no risk of asking a node whose view lags). Otherwise the slot map is asked
        for again (``CLUSTER SLOTS`` on a known node), at most once per 100 ms for all the
        threads of the process that share the client. An error is logged and left for the next
        try: the caller is in a loop that sends its command again."""
        if not self.cluster:
            return
        manager = self.client.nodes_manager
        if isinstance(exc, MovedError) and getattr(exc, "slot_id", None) in manager.slots_cache:
            manager.update_moved_exception(exc)
            return
        with self._lock:
            if time.monotonic() - self._refreshed < _REFRESH_EVERY_S:
                return
            try:
                manager.initialize()
            except Exception as err:  # noqa: BLE001 - a failover in progress: try again later
                log.warning("echomq: cannot refresh the cluster's slot map (%s)", err)
            finally:
                self._refreshed = time.monotonic()

    def run(self, op, idempotent: bool = True):
        """``op(target())``; on a cluster, again (with the slot map refreshed, after a pause of
        50 ms doubling to 1 s, for up to CLUSTER_WAIT_S) when it was refused by a redirection,
        which ran nothing, or lost with its connection: the node may have died and its replica
        taken over. A call that is not ``idempotent`` (an add with a generated id: a second XADD
        would be a second run of the job) is sent again after a lost connection only when the
        command never left (``unsent``); otherwise the error is raised, as on a single server.
        On a single server ``op`` runs once, as before."""
        if not self.cluster:
            return op(self.client)
        pause = 0.05
        give_up = time.monotonic() + CLUSTER_WAIT_S
        while True:
            try:
                return op(self.target())
            except Exception as exc:  # noqa: BLE001 - sorted below
                lost = isinstance(exc, (_ConnError, _TimeoutError, OSError))
                again = redirected(exc) or (lost and (idempotent or unsent(exc)))
                if not again or time.monotonic() + pause > give_up:
                    raise
                log.warning("echomq: %s; sending again", describe(exc))
                self.refresh(exc)
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
