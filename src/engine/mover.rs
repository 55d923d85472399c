//! The one move of due jobs from a schedule to pending, shared by
//! `ECHO.PROMOTE` and the auto-promote timer, so the two can never differ;
//! and the one reading of what `pending` is (`Pending`), which ECHO.ADD's
//! push of a single job shares with them.
//!
//! `pending` a list (or missing: a list is created): each member is pushed
//! at the head in fire-time order, so the earliest-due job sits at the right
//! end and `RPOP`/`BRPOP` take it first. `pending` a stream: each becomes one
//! entry `job <member>` with an ID the server chooses, in fire-time order, so
//! a consumer group delivers the earliest-due first. Both keys are
//! type-checked before anything is written.

use std::time::{Duration, Instant};

use redis_module::{Context, RedisError};

use crate::engine::release::{self, Allowance};
use crate::engine::{groups, recurring, stats};
use crate::rules::errors::ReplyError;
use crate::rules::fairness;
use crate::server::keys::{Arg, Key, Kind};

/// How long one move may hold the server: unbounded for a client's
/// ECHO.PROMOTE (its LIMIT is the client's own choice, and shows as the
/// command's latency), a budget for the timer, which no client waits on.
#[derive(Clone, Copy, Debug)]
pub enum TimeLimit {
    Unbounded,
    /// Stop after the batch that ran past this much time.
    Budget(Duration),
}

/// A budgeted move works in batches of this many members, checking the
/// clock between them (reading the clock costs tens of nanoseconds; a batch
/// of 64 takes some microseconds).
const BUDGET_BATCH: u64 = 64;

/// What one move did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Moved {
    pub count: u64,
    /// The release limit (or a hold) left due members in the schedule.
    pub limited: bool,
    /// The fire time of the earliest member moved (the timer's lag).
    pub earliest_ms: Option<f64>,
    /// Why the rest of the due members stayed scheduled: a stream out of
    /// IDs refused them. What moved stays moved.
    pub refused: Option<ReplyError>,
    /// The time budget ran out with members maybe still due.
    pub out_of_time: bool,
}

/// Where jobs go in `pending`, chosen by the type of the existing key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sink {
    List,
    Stream,
}

/// A `pending` key open for writing, and where jobs go in it.
pub struct Pending<'a> {
    key: Key<'a>,
    sink: Sink,
}

impl<'a> Pending<'a> {
    /// Opens `pending` and decides by its type, before anything is written,
    /// as ECHO.PROMOTE, the timer and ECHO.ADD all do: a list, or a missing
    /// key (a list is then created), or an existing stream; `WRONGTYPE` for
    /// any other type.
    pub fn open(ctx: &'a Context, name: &'a Arg) -> Result<Pending<'a>, RedisError> {
        let key = Key::open_write(ctx, name);
        let sink = match key.kind() {
            Kind::Missing | Kind::List => Sink::List,
            Kind::Stream => Sink::Stream,
            Kind::String | Kind::SortedSet | Kind::Hash | Kind::Other => {
                return Err(RedisError::WrongType)
            }
        };
        Ok(Pending { key, sink })
    }

    /// Appends one job exactly as a producer would: `LPUSH pending job`, or
    /// `XADD pending * job <job>`, with that command's events, wake-ups and
    /// replication (the XADD with the ID the server chose). A stream whose
    /// IDs have run out refuses it with XADD's own error, writing nothing.
    pub fn push(&self, job: &Arg) -> Result<(), RedisError> {
        match self.sink {
            Sink::List => self.key.lpush(job),
            Sink::Stream => self.key.xadd_job(job)?,
        }
        Ok(())
    }
}

/// Moves the members of `schedule` due at `now_ms`, at most `limit`, to
/// `pending`, with every effect (events, signals, replication) of the
/// equivalent `ZREM` then `LPUSH` (or `XADD`s). The caller has made sure the
/// two names differ. Within a budget the move is done in batches, each its
/// own `ZREM` and `LPUSH` (or `XADD`s): the same end state.
pub fn move_due(
    ctx: &Context,
    schedule: &Arg,
    pending: &Arg,
    limit: u64,
    now_ms: i64,
    time_limit: TimeLimit,
) -> Result<Moved, RedisError> {
    let pending_name = pending;
    let schedule_key = Key::open_write(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let pending = Pending::open(ctx, pending)?;
    let (batch, deadline) = match time_limit {
        TimeLimit::Unbounded => (limit, None),
        TimeLimit::Budget(budget) => (BUDGET_BATCH, Instant::now().checked_add(budget)),
    };
    let allowance = release::allowance(ctx, schedule, pending_name)?;
    // Released occurrences of recurring definitions arm the next ones in
    // this same step.
    let mut arming = recurring::Arming::new(ctx, schedule.as_slice());
    if groups::grouped(ctx, schedule.as_slice())? {
        let moved = move_grouped(
            ctx,
            schedule,
            &schedule_key,
            &pending,
            limit,
            now_ms,
            time_limit,
            allowance,
            &mut arming,
        )?;
        arming.arm(&schedule_key, now_ms);
        return Ok(moved);
    }
    let mut moved = take_due(
        &schedule_key,
        &pending,
        limit.min(allowance.as_ref().map_or(u64::MAX, |a| a.count)),
        now_ms,
        batch,
        deadline,
        &mut arming,
    );
    if let Some(allowance) = allowance {
        let still_due = !schedule_key.zset_due(now_ms as f64, 1).is_empty();
        book(ctx, schedule, &allowance, &mut moved, limit, still_due);
    }
    arming.arm(&schedule_key, now_ms);
    Ok(moved)
}

/// Books a move with the release limit (or hold) it passed. The limit bound
/// the move when it took all it allowed and wanted less than the caller:
/// then any member still due is held.
fn book(
    ctx: &Context,
    schedule: &Arg,
    allowance: &Allowance,
    moved: &mut Moved,
    limit: u64,
    still_due: bool,
) {
    moved.limited = moved.count == allowance.count
        && allowance.count < limit
        && moved.refused.is_none()
        && still_due;
    release::released(
        ctx,
        schedule.as_slice(),
        allowance,
        moved.count,
        moved.limited,
    );
}

/// The most admissions plus visits of groups a grouped release makes per
/// member it may move (and at least `MIN_GROUP_STEPS`): a visit that finds a
/// group limited moves nothing, and the rest carries on at the next move.
const GROUP_STEPS_PER_MEMBER: usize = 4;
const MIN_GROUP_STEPS: usize = 64;

/// The move of a grouped schedule: the fair release over its groups
/// (`groups::release`) chooses the members and takes them out of their
/// groups, then they are pushed to `pending` in that order, as `take_due`
/// pushes. The release limit of the schedule caps the sum. Within a budget
/// it goes in batches, each a release of its own from the cursor the last
/// left, checking the clock between them: a member of a grouped schedule
/// costs several times an ungrouped one, so a count alone cannot bound the
/// time a tick holds the server.
#[allow(clippy::too_many_arguments)]
fn move_grouped(
    ctx: &Context,
    schedule: &Arg,
    schedule_key: &Key,
    pending: &Pending,
    limit: u64,
    now_ms: i64,
    time_limit: TimeLimit,
    allowance: Option<Allowance<'_>>,
    arming: &mut recurring::Arming,
) -> Result<Moved, RedisError> {
    let want = limit.min(allowance.as_ref().map_or(u64::MAX, |a| a.count));
    let (batch, deadline) = match time_limit {
        TimeLimit::Unbounded => (want, None),
        TimeLimit::Budget(budget) => (BUDGET_BATCH, Instant::now().checked_add(budget)),
    };
    let mut moved = Moved::default();
    let mut still_due = false;
    while moved.count < want {
        let ask = (want - moved.count).min(batch);
        let max_steps = usize::try_from(ask)
            .unwrap_or(usize::MAX)
            .saturating_mul(GROUP_STEPS_PER_MEMBER)
            .max(MIN_GROUP_STEPS);
        let mut outcome = groups::release(
            ctx,
            schedule.as_slice(),
            schedule_key,
            now_ms,
            ask,
            max_steps,
        )?;
        let found = outcome.release.released.len();
        let (pushed, earliest_ms) =
            push_released(ctx, schedule, schedule_key, pending, &mut outcome)?;
        // `names` is now what went into pending.
        if pushed > 0 && arming.wanted() {
            arming.note(outcome.names.names());
        }
        let release = outcome.release;
        if moved.earliest_ms.is_none() {
            moved.earliest_ms = earliest_ms;
        }
        moved.count += pushed as u64;
        stats::group_released(pushed as u64, release.limited.len() as u64);
        still_due = release.left.by_want || release.left.by_budget;
        if pushed < found {
            moved.refused = Some(ReplyError::StreamFull);
            break;
        }
        if (pushed as u64) < ask {
            // Nothing more due, every due group limited, or the steps ran
            // out: only the last leaves members due for the next move.
            moved.out_of_time = release.left.by_budget;
            break;
        }
        if deadline.is_some_and(|at| Instant::now() >= at) {
            moved.out_of_time = moved.count < want;
            break;
        }
    }
    if let Some(allowance) = allowance {
        book(ctx, schedule, &allowance, &mut moved, limit, still_due);
    }
    Ok(moved)
}

/// Pushes a grouped release's members to `pending` in release order: how
/// many it took, and the earliest fire time among them. A stream out of IDs
/// refuses the tail, which goes back to its groups (`groups::put_back`):
/// nothing lost, nothing twice.
fn push_released(
    ctx: &Context,
    schedule: &Arg,
    schedule_key: &Key,
    pending: &Pending,
    outcome: &mut groups::Outcome,
) -> Result<(usize, Option<f64>), RedisError> {
    let released = &outcome.release.released;
    let names = &mut outcome.names;
    match pending.sink {
        Sink::Stream => {
            let appended = pending.key.xadd_jobs_keeping(names);
            let pushed = appended.len();
            // The tail the stream refused, copied before its strings are
            // freed.
            let refused: Vec<fairness::Released> = released
                .iter()
                .zip(names.args())
                .skip(pushed)
                .map(|(r, name)| fairness::Released {
                    group: r.group.clone(),
                    member: name.as_slice().to_vec(),
                    fire_at_ms: r.fire_at_ms,
                })
                .collect();
            names.keep_first(pushed);
            pending.key.publish(appended, names);
            if !refused.is_empty() {
                groups::put_back(ctx, schedule.as_slice(), schedule_key, &refused)?;
            }
            let earliest_ms = match refused.is_empty() {
                true => outcome.earliest_ms,
                false => released.iter().take(pushed).map(|r| r.fire_at_ms).min(),
            };
            Ok((pushed, earliest_ms.map(|ms| ms as f64)))
        }
        Sink::List => {
            pending.key.lpush_all(names);
            Ok((names.len(), outcome.earliest_ms.map(|ms| ms as f64)))
        }
    }
}

/// The batches of one move: at most `limit` members, in batches of
/// `batch`, until nothing more is due, the stream refuses, or the deadline.
fn take_due(
    schedule_key: &Key,
    pending: &Pending,
    limit: u64,
    now_ms: i64,
    batch: u64,
    deadline: Option<Instant>,
    arming: &mut recurring::Arming,
) -> Moved {
    let mut moved = Moved::default();
    while moved.count < limit {
        let want = (limit - moved.count).min(batch);
        // now_ms is an integer far below 2^53, so the f64 bound is exact and a
        // member due at exactly now_ms (or any fraction before it) is included.
        let mut due = schedule_key.zset_due(now_ms as f64, want);
        let found = due.len() as u64;
        // A stream appends first, and may refuse the tail of the batch (its
        // IDs run out): only what it took leaves the schedule.
        let appended = match pending.sink {
            Sink::Stream => Some(pending.key.xadd_jobs(&mut due)),
            Sink::List => None,
        };
        // Effects in the order `ZREM` then `LPUSH` (or `XADD`s) make them.
        schedule_key.zrem_all(&due);
        match appended {
            Some(appended) => pending.key.publish(appended, &due),
            None => pending.key.lpush_all(&due),
        }
        if moved.earliest_ms.is_none() {
            moved.earliest_ms = due.earliest_score();
        }
        if !due.is_empty() && arming.wanted() {
            arming.note(due.names());
        }
        moved.count += due.len() as u64;
        if (due.len() as u64) < found {
            moved.refused = Some(ReplyError::StreamFull);
            break;
        }
        if found < want {
            break;
        }
        if deadline.is_some_and(|at| Instant::now() >= at) {
            moved.out_of_time = moved.count < limit;
            break;
        }
    }
    moved
}
