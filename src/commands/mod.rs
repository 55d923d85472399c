//! One thin handler per command: parse, open keys, check types, write
//! (each write carries its events and replication), reply.

pub mod delay;
pub mod hold;
pub mod limits;
pub mod promote;
pub mod queues;
pub mod retry;
pub mod spread;
