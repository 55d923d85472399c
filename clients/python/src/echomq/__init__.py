"""echomq: a job queue on a Valkey server with the echomq module (blocking API, threads)."""

from ._shards import crc16, keyslot, shard_of, shard_tags, split_limit
from .queue import DeadJob, GroupInfo, Queue
from .worker import DEFAULT_BACKOFF, Job, RetryAfter, Worker

__all__ = [
    "Queue", "Worker", "Job", "RetryAfter", "DeadJob", "GroupInfo", "DEFAULT_BACKOFF",
    "crc16", "keyslot", "shard_of", "shard_tags", "split_limit",
]
__version__ = "0.1.0"
