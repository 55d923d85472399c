//! Release limits in the server: the `echomq.release-limits` and
//! `echomq.adaptive-*` configs, and the one table of limits and holds that
//! every release from a schedule passes (`promotion::move_due`, shared by
//! ECHO.PROMOTE and the timer), that ECHO.RETRY reports failures to, and
//! that ECHO.HOLD and ECHO.LIMITS read and write.
//!
//! The state lives in the module's memory on the primary only: it is not
//! replicated or persisted, so after a restart, failover or slot move a
//! schedule starts with a full burst. What moves is replicated as always.
//! Everything runs on the main thread; the mutex only makes the table a
//! shareable static, and `ACTIVE` lets a call skip it while it is empty.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::Context;

use crate::limits::{Adaptive, HoldRefused, Limit, Limits};
use crate::parse;
use crate::server::clock;
use crate::server::config::{self, numeric_config, ApplyConfigs, StringConfig};
use crate::stats;

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

/// Registers the configs (loaded with the others at load).
pub fn register(ctx: &Context) -> Result<(), String> {
    {
        let mut state = state();
        state.text.clear();
        state.limits.clear();
        state.window_ms = DEFAULT_WINDOW_MS;
        state.failure_percent = DEFAULT_FAILURE_PERCENT;
        update_active(&state);
    }
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
        let specs = parse::parse_release_limits(value).map_err(|why| why.to_string())?;
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
/// limited nor held (the clock is not even read then).
pub fn allowance(schedule: &[u8]) -> Option<Allowance> {
    if !ACTIVE.load(Relaxed) {
        return None;
    }
    let at_ms = now_ms();
    let count = state().limits.allowance(schedule, at_ms)?;
    Some(Allowance { count, at_ms })
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

/// `ECHO.HOLD`: the hold in force after it (0 for none).
pub fn hold(schedule: &[u8], ms: u64) -> Result<i64, HoldRefused> {
    let mut state = state();
    let until = state.limits.hold(schedule, ms, now_ms());
    update_active(&state);
    until
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

pub fn snapshot(schedule: &[u8]) -> Snapshot {
    let now_ms = now_ms();
    let mut state = state();
    let adaptive = state.adaptive();
    let held_until_ms = state.limits.held_until(schedule, now_ms);
    let limit = state.limits.get_mut(schedule).map(|limit: &mut Limit| {
        // A window that ended shows its effect.
        if limit.roll(now_ms, adaptive) {
            stats::adaptive_decrease();
        }
        LimitView {
            rate_per_second: limit.spec().rate.per_second(),
            in_force_per_second: limit.in_force_per_second(),
            burst: limit.spec().burst,
            adaptive: limit.spec().rate.adaptive,
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
