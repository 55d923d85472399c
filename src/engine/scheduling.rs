//! The writes ECHO.RETRY, ECHO.SCHEDULE and ECHO.ADD make: a job at
//! `now_ms + delay_ms` under ZADD's conditions, a job moved to the dead set,
//! and a run put straight into pending or, when its release governs it,
//! into the schedule.

use redis_module::{Context, RedisError};

use crate::engine::mover::Pending;
use crate::engine::{groups, release};
use crate::rules::grammar::{AddRequest, Compare, Presence, RetryOptions};
use crate::server::clock;
use crate::server::keys::{Arg, Key, Kind, Zadd, ZaddIf};

/// The reply for `XX` when the job is not in the schedule.
const NOT_SCHEDULED: i64 = -2;

/// The write ECHO.RETRY and ECHO.SCHEDULE share: `job` at `now_ms +
/// delay_ms()` under the options' condition. The reply: the fire time in the
/// schedule after the call, or `NOT_SCHEDULED`. The delay is drawn only
/// when something may be written.
pub fn schedule_after(
    schedule_key: &Key,
    job: &Arg,
    options: RetryOptions,
    delay_ms: impl FnOnce() -> u64,
) -> Result<i64, RedisError> {
    let RetryOptions {
        presence, compare, ..
    } = options;
    // XX on a missing key: a low-level add would create the key and delete
    // it again; nothing to do, and nothing must be seen.
    if presence == Presence::Existing && schedule_key.kind() == Kind::Missing {
        return Ok(NOT_SCHEDULED);
    }
    // delay_ms <= 10^13 and now is a Unix time, so this never saturates and
    // stays far below 2^53: the f64 score is the exact integer.
    let fire_at_ms = clock::now_ms().saturating_add(i64::try_from(delay_ms()).unwrap_or(i64::MAX));
    Ok(
        match schedule_key.zadd(fire_at_ms, job, zadd_if(presence, compare))? {
            Zadd::Added | Zadd::Updated => fire_at_ms,
            // Kept by a condition, re-added at its own score, or kept out by XX.
            Zadd::Unchanged => schedule_key
                .zscore(job)
                .map_or(NOT_SCHEDULED, kept_score_ms),
        },
    )
}

/// Where ECHO.ADD put a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// Straight into pending: nothing governs the run's release.
    Pending,
    /// Into the schedule, due at this time (server ms).
    Scheduled(i64),
    /// `NX`, and the job was in the schedule: nothing written.
    AlreadyScheduled,
}

/// Whether a run of `request` goes straight into pending: due now, with no
/// group, of a schedule with no group limit, no release limit and no hold
/// (a hold's key is read; the limits are in memory, looked up first).
pub fn goes_direct(ctx: &Context, schedule: &Arg, request: &AddRequest) -> bool {
    request.delay_ms == 0
        && request.group.is_none()
        && !groups::limited(schedule.as_slice())
        && !release::governed(ctx, schedule.as_slice())
}

/// ECHO.ADD's write. Both keys are open and type-checked: `schedule_key`,
/// where a scheduled run goes, is the schedule named `schedule` or, with
/// `GROUP`, its group's members. `direct` (`goes_direct`): the run is
/// pushed into pending as a producer would push it, with no detour; any
/// other run goes into the schedule at `now_ms + delay_ms` through the
/// very write ECHO.SCHEDULE makes, so its release limit, hold and group
/// govern it like any retry's. `NX` looks in the schedule first either way.
pub fn add_run(
    schedule_key: &Key,
    pending: &Pending,
    job: &Arg,
    request: AddRequest,
    direct: bool,
) -> Result<Added, RedisError> {
    if request.only_new && schedule_key.zscore(job).is_some() {
        return Ok(Added::AlreadyScheduled);
    }
    if direct {
        pending.push(job)?;
        return Ok(Added::Pending);
    }
    // The job is not there under NX (checked above), so no condition applies.
    let fire_at_ms = schedule_after(schedule_key, job, RetryOptions::default(), || {
        request.delay_ms
    })?;
    Ok(Added::Scheduled(fire_at_ms))
}

/// ZADD's flags for the options. The parser has refused NX with GT or LT.
fn zadd_if(presence: Presence, compare: Compare) -> ZaddIf {
    match (presence, compare) {
        (Presence::New, _) => ZaddIf::New,
        (Presence::Any, Compare::Always) => ZaddIf::Always,
        (Presence::Any, Compare::Later) => ZaddIf::Greater,
        (Presence::Any, Compare::Earlier) => ZaddIf::Less,
        (Presence::Existing, Compare::Always) => ZaddIf::Existing,
        (Presence::Existing, Compare::Later) => ZaddIf::ExistingGreater,
        (Presence::Existing, Compare::Earlier) => ZaddIf::ExistingLess,
    }
}

/// A score kept in the schedule as the integer reply: rounded down, clamped
/// to i64 (a score written by hand may be fractional or infinite).
fn kept_score_ms(score: f64) -> i64 {
    // `as` saturates at the i64 bounds; a sorted set never holds NaN.
    score.floor() as i64
}

/// Moves `job` from `schedule` (if there) to `dead` at `now_ms`: `ZREM`
/// then `ZADD`, so the events come in that order (the add sends `new` itself
/// when it creates `dead`).
pub fn dead_letter(schedule: &Key, job: &Arg, dead: &Key) -> Result<(), RedisError> {
    schedule.zrem(job);
    // The add cannot fail once the job is out of the schedule: the server's
    // ZsetAdd refuses only a key not open for writing, a key of another type
    // (both ruled out above) and a NaN score (now_ms is a Unix time, exact
    // as a double).
    dead.zadd(clock::now_ms(), job, ZaddIf::Always)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_scores_round_down_and_clamp() {
        for (score, want) in [
            (1.0, 1),
            (1.5, 1),
            (1.999, 1),
            (-0.5, -1),
            (0.0, 0),
            (1e300, i64::MAX),
            (f64::INFINITY, i64::MAX),
            (f64::NEG_INFINITY, i64::MIN),
            (9_007_199_254_740_993.0, 9_007_199_254_740_992),
        ] {
            assert_eq!(kept_score_ms(score), want, "{score}");
        }
    }
}
