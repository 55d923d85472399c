//! The Rust client library against real servers, as one test binary: each
//! file below was a binary of its own, and each compiled the whole client
//! again (26-34 s of CPU apiece in a release build); one binary compiles it
//! once.

mod common;

mod cluster;
mod groups;
mod lost_jobs;
mod processes;
mod queue_worker;
mod repeat;
mod shards;
