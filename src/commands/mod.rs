//! One file per command: its row of the command table (flags, keys, arity,
//! docs, ACL categories), its grammar where no other command shares it, and
//! a thin handler: parse, open keys, check types, write (each write carries
//! its events and replication), reply.

pub mod delay;
pub mod hold;
pub mod limits;
pub mod promote;
pub mod queues;
pub mod retry;
pub mod schedule;
pub mod spread;
