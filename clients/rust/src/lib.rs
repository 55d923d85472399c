#![doc = include_str!("../README.md")]

mod envelope;
mod protocol;
mod queue;
mod repeat;
mod shards;
mod worker;

pub use protocol::MAX_DELAY_MS;
pub use queue::{new_job_id, AddOptions, Counts, DeadJob, GroupInfo, Queue, QueueConnection};
pub use repeat::{Repeat, RepeatOptions};
pub use shards::{crc16, key_slot, shard_of, shard_tags, split_limit};
pub use worker::{Job, JobError, Worker, WorkerHandle, WorkerOptions};
