#![doc = include_str!("../README.md")]

mod protocol;
mod queue;
mod worker;

pub use protocol::MAX_DELAY_MS;
pub use queue::{AddOptions, Counts, DeadJob, Queue, QueueConnection};
pub use worker::{Job, JobError, Worker, WorkerHandle, WorkerOptions};

use std::time::{SystemTime, UNIX_EPOCH};

/// A time-ordered unique id: the client's Unix time in ms as 13 digits, `-`,
/// then 16 lower-case hex digits from a random source.
pub fn new_job_id() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{ms:013}-{:016x}", rand::random::<u64>())
}
