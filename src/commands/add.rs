//! `ECHO.ADD schedule pending job [DELAY ms] [GROUP group] [NX]`
//!
//! Enqueues a run of `job`, the server deciding where it goes, so that every
//! run passes the release and not only retries. When `schedule` is not
//! listed in `echomq.release-limits`, is not held, and the run is due now
//! (no `DELAY`, or `DELAY 0`): straight into `pending`, exactly the write a
//! producer makes (a list, or a missing key, which becomes a list: `LPUSH
//! pending job`; a stream: `XADD pending * job <job>`), chosen by `pending`'s
//! type as ECHO.PROMOTE chooses. Otherwise: into the sorted set `schedule` at
//! `now_ms + ms` (`ms` the delay, or 0) by the server's clock, with the very
//! write ECHO.SCHEDULE makes, so the limit and the hold govern it. `NX`:
//! nothing at all when `job` is already in `schedule` (also when it would
//! have gone to `pending`). `ms` is `0..=10000000000000`, as ECHO.SCHEDULE's
//! `delay_ms`. `GROUP group` (a schedule with a hash tag, `group` 1..=1024
//! bytes): always into the group's members, `<schedule>:echomq-g:<group>`,
//! whose release is fair across the schedule's groups (`engine::groups`);
//! `NX` looks there.
//!
//! Reply: integer. `1`: the job went to `pending`. A Unix time in ms: the
//! job's fire time in `schedule`. `0`: `NX` found the job in `schedule`, and
//! nothing was written.
//! Errors: a malformed, repeated or unknown option; `schedule` and `pending`
//! the same key; `WRONGTYPE` when `schedule` is not a sorted set or
//! `pending` neither a list nor a stream, both checked before any write,
//! whichever way the job would go; XADD's own error for a stream whose IDs
//! have run out. Nothing is written on an error.
//! Keys: `schedule` and `pending` (positions 1 and 2): in a cluster they
//! must share a slot, else the server answers CROSSSLOT.
//! Replication: the effect only, never the command, whose clock reading
//! differs on a replica and an AOF reload: `LPUSH pending job`, or `XADD
//! pending <ms>-<seq> job <job>` with the ID the primary chose, or `ZADD
//! schedule <fire_ms> job` (nothing when the score was already that). `NX`
//! finding the job sends nothing.
//! INFO: a job put into pending counts in `echomq_added_direct`, one
//! scheduled in `echomq_scheduled` (as an ECHO.SCHEDULE does).

use redis_module::commands::KeySpecFlags as K;
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::commands::option_words;
use crate::engine::mover::Pending;
use crate::engine::scheduling::{add_run, goes_direct, Added};
use crate::engine::{groups, stats};
use crate::rules::grammar::{self, ArgError, MAX_ADD_OPTION_WORDS};
use crate::server::keys::{Arg, Key, Kind};
use crate::server::register::{entry_point, Command, KeyAt, KeyDoc};

/// The reply for a job put straight into pending (a fire time is a Unix
/// time in ms, never this small).
const INTO_PENDING: i64 = 1;
/// The reply for `NX` finding the job in the schedule.
const ALREADY_SCHEDULED: i64 = 0;

/// ECHO.ADD's row of the command table.
pub const COMMAND: Command = Command {
    name: c"ECHO.ADD",
    entry: entry_point!(echo_add),
    // fast as LPUSH, XADD and ZADD are: one write of O(log N)
    flags: c"write deny-oom fast",
    arity: -4,
    keys: &[
        KeyDoc {
            at: KeyAt::Index(1),
            // read for NX, written when the run is scheduled
            flags: K::READ_WRITE.union(K::UPDATE),
        },
        KeyDoc {
            at: KeyAt::Index(2),
            flags: K::READ_WRITE.union(K::INSERT),
        },
    ],
    acl_categories: c"write sortedset list stream fast",
    summary: c"Enqueues a job: straight into pending when nothing governs its release, else into the schedule at now plus a delay.",
    complexity: c"O(log(N)) with N the number of jobs in the schedule.",
    tips: Some(c"nondeterministic_output"),
};

// Kept out of line so profiles name each command (scripts/profile.sh).
#[inline(never)]
pub fn echo_add(ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, pending, job, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let mut buffer: [&[u8]; MAX_ADD_OPTION_WORDS] = [&[]; MAX_ADD_OPTION_WORDS];
    let words = option_words(options, &mut buffer).ok_or(ArgError::Syntax)?;
    let request = grammar::parse_add_request(schedule.as_slice(), pending.as_slice(), words)?;
    let group_names = groups::names_for(ctx, schedule, options, request.group)?;
    let direct = goes_direct(ctx, schedule, &request);
    if direct && !request.only_new {
        // The fast path: the schedule is only type-checked, and nothing
        // else is opened but pending.
        Key::open_probe(ctx, schedule).require(Kind::SortedSet)?;
        Pending::open(ctx, pending)?.push(job)?;
        stats::added_direct();
        return Ok(RedisValue::Integer(INTO_PENDING));
    }
    let schedule_key = Key::open_write(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let pending = Pending::open(ctx, pending)?;
    let group = group_names.as_ref().map(|n| n.open(ctx)).transpose()?;
    let target = group.as_ref().map_or(&schedule_key, |g| &g.members);
    Ok(RedisValue::Integer(
        match add_run(target, &pending, job, request, direct)? {
            Added::Pending => {
                stats::added_direct();
                INTO_PENDING
            }
            Added::Scheduled(fire_at_ms) => {
                if let Some(group) = &group {
                    group.reindex()?;
                }
                stats::scheduled();
                fire_at_ms
            }
            Added::AlreadyScheduled => ALREADY_SCHEDULED,
        },
    ))
}
