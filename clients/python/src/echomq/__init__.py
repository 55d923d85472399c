"""echomq: a job queue on a Valkey server with the echomq module (blocking API, threads)."""

from .queue import DeadJob, Group, Queue
from .worker import DEFAULT_BACKOFF, Job, RetryAfter, Worker

__all__ = ["Queue", "Worker", "Job", "RetryAfter", "DeadJob", "Group", "DEFAULT_BACKOFF"]
__version__ = "0.1.0"
