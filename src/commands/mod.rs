//! One file per command: its row of the command table (flags, keys, arity,
//! docs, ACL categories), its grammar where no other command shares it, and
//! a thin handler: parse, open keys, check types, write (each write carries
//! its events and replication), reply.

use crate::server::keys::Arg;

pub mod add;
pub mod delay;
pub mod grouplimit;
pub mod groups;
pub mod hold;
pub mod limits;
pub mod promote;
pub mod queues;
pub mod repeat;
pub mod repeats;
pub mod retry;
pub mod schedule;
pub mod spread;
pub mod unrepeat;

/// The option words of a call as byte slices, in `buffer` on the stack: a
/// heap vector per call cost a measurable share of a retry. `None` when there
/// are more than `N` words, more than any valid call of the command has.
fn option_words<'a, const N: usize>(
    options: &'a [Arg],
    buffer: &'a mut [&'a [u8]; N],
) -> Option<&'a [&'a [u8]]> {
    let words = buffer.get_mut(..options.len())?;
    for (word, option) in words.iter_mut().zip(options) {
        *word = option.as_slice();
    }
    Some(words)
}
