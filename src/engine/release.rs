//! Release limits and holds in the server: the `echomq.release-limits` and
//! `echomq.adaptive-*` configs, the one table of limits that every release
//! from a schedule passes (`mover::move_due`, shared by ECHO.PROMOTE and
//! the timer), that ECHO.RETRY reports failures to, ECHO.LIMITS reads and
//! ECHO.ADD asks whether a run may skip the schedule, and the holds
//! ECHO.HOLD writes.
//!
//! A limit's state lives in the module's memory on the primary only: it is
//! not replicated or persisted, so after a restart, failover or slot move a
//! schedule starts with a full burst. A hold lives in the keyspace, in a
//! string key beside its schedule (`hold_key`) that expires when the hold
//! ends: it is replicated and persisted like any key, counted in maxmemory,
//! and there is no table of holds for a client to fill.
//! Everything runs on the main thread; the mutex only makes the table a
//! shareable static, and `ACTIVE` lets a call skip it while it is empty.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::{Context, RedisError};

use crate::engine::stats;
use crate::rules::configs;
use crate::rules::errors::ReplyError;
use crate::rules::limiter::{self, Adaptive, Limit, LimitKind, Limits};
use crate::rules::slots;
use crate::server::config::{self, numeric_config, ApplyConfigs, StringConfig};
use crate::server::keys::{Arg, Key, Kind, OwnedName};
use crate::server::{clock, context};

pub const DEFAULT_WINDOW_MS: i64 = 200;
pub const MIN_WINDOW_MS: i64 = 10;
pub const MAX_WINDOW_MS: i64 = 60_000;
pub const DEFAULT_FAILURE_PERCENT: i64 = 10;

struct State {
    /// `echomq.release-limits` exactly as set.
    text: Vec<u8>,
    limits: Limits,
    /// `echomq.adaptive-window-ms` and `echomq.adaptive-failure-percent`.
    window_ms: i64,
    failure_percent: i64,
}

impl State {
    fn adaptive(&self) -> Adaptive {
        Adaptive {
            window_ms: self.window_ms.unsigned_abs(),
            failure_percent: self.failure_percent.unsigned_abs(),
        }
    }
}

static STATE: Mutex<State> = Mutex::new(State {
    text: Vec::new(),
    limits: Limits::new(),
    window_ms: DEFAULT_WINDOW_MS,
    failure_percent: DEFAULT_FAILURE_PERCENT,
});

/// Whether any schedule is limited or held: when not, releases and
/// failures need not look anything up.
static ACTIVE: AtomicBool = AtomicBool::new(false);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn update_active(state: &State) {
    ACTIVE.store(!state.limits.is_empty(), Relaxed);
}

/// Drops every limit and the config's text, their memory with them: at load
/// (a module loaded again may find the statics of its former load) and at
/// unload (the server's allocator would otherwise keep them for good).
pub fn reset() {
    let mut state = state();
    state.text = Vec::new();
    state.limits.clear();
    state.window_ms = DEFAULT_WINDOW_MS;
    state.failure_percent = DEFAULT_FAILURE_PERCENT;
    update_active(&state);
}

/// Registers the configs (loaded with the others at load).
pub fn register(ctx: &Context) -> Result<(), String> {
    reset();
    config::register_string::<ReleaseLimits, Nothing>(ctx, c"release-limits", c"")?;
    config::register_numeric::<WindowMs, Nothing>(
        ctx,
        c"adaptive-window-ms",
        DEFAULT_WINDOW_MS,
        MIN_WINDOW_MS,
        MAX_WINDOW_MS,
    )?;
    config::register_numeric::<FailurePercent, Nothing>(
        ctx,
        c"adaptive-failure-percent",
        DEFAULT_FAILURE_PERCENT,
        1,
        100,
    )
}

/// `echomq.release-limits`.
struct ReleaseLimits;

impl StringConfig for ReleaseLimits {
    fn get() -> Vec<u8> {
        state().text.clone()
    }

    fn set(value: &[u8]) -> Result<(), String> {
        let specs = configs::parse_release_limits(value).map_err(|why| why.to_string())?;
        let mut state = state();
        state.text = value.to_vec();
        state.limits.configure(specs, now_ms());
        update_active(&state);
        Ok(())
    }
}

numeric_config!(WindowMs, state, window_ms, MIN_WINDOW_MS, MAX_WINDOW_MS);
numeric_config!(FailurePercent, state, failure_percent, 1, 100);

/// The configs take effect when set: nothing to apply after.
struct Nothing;

impl ApplyConfigs for Nothing {
    fn apply(_ctx: &Context) {}
}

/// The clock of every limit and hold: the wall clock. A command's own time
/// is frozen for a whole script or MULTI, and a release booked at it would
/// count as made at the script's start.
fn now_ms() -> i64 {
    clock::wall_ms()
}

/// What a limit lets leave a schedule now, and the instant it was read, at
/// which the release is then booked.
pub struct Allowance {
    pub count: u64,
    at_ms: i64,
}

/// How many members may leave `schedule` now: `None` when it is neither
/// limited nor held.
pub fn allowance(ctx: &Context, schedule: &Arg) -> Option<Allowance> {
    if held_until(ctx, schedule.as_slice()).is_some() {
        return Some(Allowance {
            count: 0,
            at_ms: now_ms(),
        });
    }
    limit_allowance(schedule.as_slice())
}

/// What the limit alone lets leave `schedule` now (`None`: not limited; the
/// clock is not even read then). The timer asks this before it opens a
/// pair's keys.
pub fn limit_allowance(schedule: &[u8]) -> Option<Allowance> {
    if !ACTIVE.load(Relaxed) {
        return None;
    }
    let at_ms = now_ms();
    let count = state().limits.allowance(schedule, at_ms)?;
    Some(Allowance { count, at_ms })
}

/// Whether a run of `schedule` must pass its release: the schedule is listed
/// in `echomq.release-limits` (whatever the limit allows now) or held now.
/// ECHO.ADD goes straight into pending only when it is neither; the limit
/// is looked up first, as it needs no key opened.
pub fn governed(ctx: &Context, schedule: &[u8]) -> bool {
    let limited = ACTIVE.load(Relaxed) && state().limits.contains(schedule);
    limited || held_until(ctx, schedule).is_some()
}

/// Records `count` members released from `schedule` under `allowance`;
/// `held` when the limit (or a hold) left due members behind.
pub fn released(schedule: &[u8], allowance: &Allowance, count: u64, held: bool) {
    if held {
        stats::release_limited();
    }
    let mut state = state();
    let adaptive = state.adaptive();
    if state
        .limits
        .released(schedule, allowance.at_ms, count, held, adaptive)
    {
        stats::adaptive_decrease();
    }
}

/// Records a failure of a job of `schedule` (an ECHO.RETRY naming it).
pub fn failed(schedule: &[u8]) {
    if !ACTIVE.load(Relaxed) {
        return;
    }
    let mut state = state();
    let adaptive = state.adaptive();
    if state.limits.failed(schedule, now_ms(), adaptive) {
        stats::adaptive_decrease();
    }
}

/// What a schedule's hold key is named after: `<schedule>:echomq-hold` for
/// a schedule with a hash tag, `{<schedule>}:echomq-hold` otherwise.
pub const HOLD_SUFFIX: &[u8] = b":echomq-hold";

/// The name of `schedule`'s hold key: `None` in a cluster when it could not
/// share the schedule's slot (a `}` in a name without a hash tag).
fn hold_key(ctx: &Context, schedule: &[u8]) -> Option<Vec<u8>> {
    let name = slots::derived_key(schedule, HOLD_SUFFIX);
    if context::in_cluster(ctx) && slots::key_slot(&name) != slots::key_slot(schedule) {
        return None;
    }
    Some(name)
}

/// Until when (server ms) `schedule` is held, if it is now. A hold key of
/// another type, or holding no integer, holds nothing.
pub fn held_until(ctx: &Context, schedule: &[u8]) -> Option<i64> {
    let name = OwnedName::new(ctx, &hold_key(ctx, schedule)?);
    let key = Key::open_read(ctx, name.arg());
    key.string_i64().filter(|&until| until > now_ms())
}

/// `ECHO.HOLD`: the hold in force after it (0 for none). Writes the hold key
/// (`SET key <until> PXAT <until>`) when the hold grows, deletes it for
/// `ms = 0`. Refused: a hold key of another type (`WRONGTYPE`); in a
/// cluster, a name whose hold key cannot share its slot; and a new hold of
/// a schedule that does not exist while memory is over maxmemory (a hold
/// must work then, for a queue with jobs, but must not let a client make
/// keys without bound; extending and lifting always work).
pub fn hold(ctx: &Context, schedule: &Arg, ms: u64) -> Result<i64, RedisError> {
    let Some(name) = hold_key(ctx, schedule.as_slice()) else {
        return Err(ReplyError::HoldNeedsTag.into());
    };
    let name = OwnedName::new(ctx, &name);
    let key = Key::open_write(ctx, name.arg());
    key.require(Kind::String)?;
    if ms == 0 {
        key.delete();
        return Ok(0);
    }
    let now_ms = now_ms();
    let in_force = key.string_i64().filter(|&until| until > now_ms);
    let Some(until) = limiter::hold_until(in_force, ms, now_ms) else {
        return Ok(in_force.unwrap_or(0));
    };
    if in_force.is_none()
        && context::out_of_memory(ctx)
        && Key::open_read(ctx, schedule).kind() == Kind::Missing
    {
        return Err(ReplyError::HoldOutOfMemory.into());
    }
    key.set_i64_expiring(until, until);
    Ok(until)
}

/// What `ECHO.LIMITS` shows of `schedule` now.
pub struct Snapshot {
    pub limit: Option<LimitView>,
    pub held_until_ms: Option<i64>,
}

pub struct LimitView {
    pub rate_per_second: f64,
    pub in_force_per_second: f64,
    pub burst: u64,
    pub adaptive: bool,
    pub available: u64,
    pub released: u64,
    pub failures: u64,
}

pub fn snapshot(ctx: &Context, schedule: &[u8]) -> Snapshot {
    let held_until_ms = held_until(ctx, schedule);
    let now_ms = now_ms();
    let mut state = state();
    let adaptive = state.adaptive();
    let limit = state.limits.get_mut(schedule).map(|limit: &mut Limit| {
        // A window that ended shows its effect.
        if limit.roll(now_ms, adaptive) {
            stats::adaptive_decrease();
        }
        LimitView {
            rate_per_second: limit.spec().rate.per_second(),
            in_force_per_second: limit.in_force_per_second(),
            burst: limit.spec().burst,
            adaptive: limit.spec().rate.kind == LimitKind::Adaptive,
            available: if held_until_ms.is_some() {
                0
            } else {
                limit.available(now_ms)
            },
            released: limit.released(),
            failures: limit.failures(),
        }
    });
    Snapshot {
        limit,
        held_until_ms,
    }
}
