//! Release limits and holds in the server: the `echomq.release-limits` and
//! `echomq.adaptive-*` configs, the one table of limits that every release
//! from a schedule passes (`mover::move_due`, shared by ECHO.PROMOTE and
//! the timer), that ECHO.RETRY reports failures to, ECHO.LIMITS reads and
//! ECHO.ADD asks whether a run may skip the schedule, and the holds
//! ECHO.HOLD writes.
//!
//! A limit's state lives in the keyspace, in a string key beside its
//! schedule (`<schedule>:echomq-limit`, `limiter::Saved`): the rate in force
//! and the theoretical arrival time, read before each release and written
//! in the same step when the release changed them, so a replica, the AOF, a
//! failover and a slot migration keep it, and each database has its own.
//! The key lives only while it says something (`Limit::persist`). What
//! stays in the memory of the node that counts it: the adaptive window's
//! counts and the totals ECHO.LIMITS shows. A hold lives in the keyspace
//! too, in a string key (`<schedule>:echomq-hold`) that expires when the hold ends: there
//! is no table of holds for a client to fill.
//! Everything runs on the main thread; the mutex only makes the table a
//! shareable static, and `ACTIVE` lets a call skip it while it is empty.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::{Context, RedisError};

use crate::engine::stats;
use crate::rules::configs;
use crate::rules::errors::ReplyError;
use crate::rules::limiter::{self, Adaptive, Limit, LimitKind, Limits, Persist, Saved};
use crate::rules::slots;
use crate::server::config::{self, numeric_config, ApplyConfigs, StringConfig};
use crate::server::keys::{Arg, KeptName, Key, Kind, OwnedName};
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
    HOLD_NAME.clear();
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
pub struct Allowance<'a> {
    pub count: u64,
    at_ms: i64,
    /// The limit's state differs from its key's before any release.
    unsaved: bool,
    /// The state key, open from the reading to the booking: a release reads
    /// and writes it through one open, not two.
    state: Option<Key<'a>>,
}

/// How many members may leave `schedule` now: `None` when it is neither
/// limited nor held. Reads the limit's saved state; `WRONGTYPE` when its
/// key is not a string (before anything is written). `pending`: where the
/// release goes, which the state key is kept open only when it is not
/// (then the release's own writes could change its type under it).
pub fn allowance<'a>(
    ctx: &'a Context,
    schedule: &Arg,
    pending: &Arg,
) -> Result<Option<Allowance<'a>>, RedisError> {
    let at_ms = now_ms();
    let limited = match ACTIVE.load(Relaxed) {
        true => limit_available(ctx, schedule.as_slice(), pending, at_ms)?,
        false => None,
    };
    let held = held_until(ctx, schedule.as_slice()).is_some();
    let (count, unsaved, state) = match (held, limited) {
        (true, limited) => match limited {
            Some((_, unsaved, state)) => (0, unsaved, state),
            None => (0, false, None),
        },
        (false, Some((count, unsaved, state))) => (count, unsaved, state),
        (false, None) => return Ok(None),
    };
    Ok(Some(Allowance {
        count,
        at_ms,
        unsaved,
        state,
    }))
}

/// What the limit alone lets leave `schedule` at `now_ms`, its saved state
/// read, whether that state was changed in the reading, and the state key
/// kept open for the booking unless it is `pending` (`None`: not listed).
fn limit_available<'a>(
    ctx: &'a Context,
    schedule: &[u8],
    pending: &Arg,
    now_ms: i64,
) -> Result<Option<(u64, bool, Option<Key<'a>>)>, RedisError> {
    let db = context::selected_db(ctx);
    let mut state = state();
    let Some(limit) = state.limits.get_mut(schedule, db, now_ms) else {
        return Ok(None);
    };
    let name = beside(ctx, schedule, LIMIT_SUFFIX);
    let Some(name) = name.filter(|name| name.as_slice() != pending.as_slice()) else {
        let unsaved = restore(ctx, schedule, limit, now_ms)?;
        return Ok(Some((limit.available(now_ms), unsaved, None)));
    };
    let key = Key::open_write_owned(ctx, OwnedName::new(ctx, &name));
    let unsaved = limit.restore(saved_in(&key)?, now_ms);
    Ok(Some((limit.available(now_ms), unsaved, Some(key))))
}

/// Whether the limit of `schedule` (in database `db`) may let anything
/// leave now, as this node's memory of its state says: the timer passes over
/// a pair it says no for without opening its keys. The memory is the state
/// this node last read from the key or wrote to it, and the key's can only
/// be as far ahead or further (TAT moves forward), unless a client wrote the
/// key: then a no is late by at most the time the bucket takes to refill.
pub fn may_allow(schedule: &[u8], db: i32) -> bool {
    if !ACTIVE.load(Relaxed) {
        return true;
    }
    let now_ms = now_ms();
    state()
        .limits
        .get(schedule, db)
        .is_none_or(|limit| limit.available(now_ms) > 0)
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
/// `held` when the limit (or a hold) left due members behind. Writes the
/// limit's saved state when the release changed it.
pub fn released(ctx: &Context, schedule: &[u8], allowance: &Allowance, count: u64, held: bool) {
    if held {
        stats::release_limited();
    }
    let db = context::selected_db(ctx);
    let mut state = state();
    let adaptive = state.adaptive();
    let Some(limit) = state.limits.get_mut(schedule, db, allowance.at_ms) else {
        return;
    };
    let before = limit.saved();
    let window = limit.window_start_ms();
    if limit.release(allowance.at_ms, count, held, adaptive) && limit.count_decrease_of(window) {
        stats::adaptive_decrease();
    }
    let changed = allowance.unsaved || limit.saved() != before;
    let change = changed.then(|| limit.persist(allowance.at_ms));
    drop(state);
    match (change, &allowance.state) {
        (Some(change), Some(key)) => save_to(key, change),
        (Some(change), None) => save(ctx, schedule, change),
        (None, _) => {}
    }
}

/// Records a failure of a job of `schedule` (an ECHO.RETRY naming it), and
/// writes the limit's saved state when the window it closed changed it. A
/// state key of another type is left alone (the failure still counts).
pub fn failed(ctx: &Context, schedule: &[u8]) {
    if !ACTIVE.load(Relaxed) {
        return;
    }
    let now_ms = now_ms();
    let db = context::selected_db(ctx);
    let mut state = state();
    let adaptive = state.adaptive();
    let Some(limit) = state.limits.get_mut(schedule, db, now_ms) else {
        return;
    };
    let restored = restore(ctx, schedule, limit, now_ms);
    let before = limit.saved();
    let window = limit.window_start_ms();
    if limit.fail(now_ms, adaptive) && limit.count_decrease_of(window) {
        stats::adaptive_decrease();
    }
    let changed = match restored {
        Ok(unsaved) => unsaved || limit.saved() != before,
        Err(_) => false,
    };
    let change = changed.then(|| limit.persist(now_ms));
    drop(state);
    if let Some(change) = change {
        save(ctx, schedule, change);
    }
}

/// What a schedule's limit key is named after, as its hold key.
pub const LIMIT_SUFFIX: &[u8] = b":echomq-limit";

/// Reads the saved state of `schedule`'s limit into `limit`: whether the
/// state then differs from the key's (`Limit::restore`). A key holding no
/// state `encode` writes holds none. Without a key name (see `beside`) the
/// state stays what this node's memory has.
fn restore(
    ctx: &Context,
    schedule: &[u8],
    limit: &mut Limit,
    now_ms: i64,
) -> Result<bool, RedisError> {
    let Some(name) = beside(ctx, schedule, LIMIT_SUFFIX) else {
        return Ok(false);
    };
    let name = OwnedName::new(ctx, &name);
    let key = Key::open_read(ctx, name.arg());
    Ok(limit.restore(saved_in(&key)?, now_ms))
}

/// The saved state a limit's state key holds (`None`: none, or not one
/// `encode` wrote); `WRONGTYPE` when it is not a string.
fn saved_in(key: &Key) -> Result<Option<Saved>, RedisError> {
    match key.kind() {
        Kind::Missing => Ok(None),
        Kind::String => Ok(key.string_bytes().and_then(|bytes| Saved::decode(&bytes))),
        _ => Err(RedisError::WrongType),
    }
}

/// Writes a change of `schedule`'s limit state (a key of another type is
/// left as it is).
fn save(ctx: &Context, schedule: &[u8], change: Persist) {
    let Some(name) = beside(ctx, schedule, LIMIT_SUFFIX) else {
        return;
    };
    let name = OwnedName::new(ctx, &name);
    save_to(&Key::open_write(ctx, name.arg()), change);
}

/// Writes a change of a limit's state to its open key.
fn save_to(key: &Key, change: Persist) {
    match (change, key.kind()) {
        (Persist::Forget, Kind::String) => {
            key.delete();
        }
        (Persist::Keep { text, until_ms }, Kind::String | Kind::Missing) => {
            key.set_expiring(text.as_bytes(), until_ms);
        }
        _ => {}
    }
}

/// What a schedule's hold key is named after: `<schedule>:echomq-hold` for
/// a schedule with a hash tag, `{<schedule>}:echomq-hold` otherwise.
pub const HOLD_SUFFIX: &[u8] = b":echomq-hold";

/// The name of the key of `schedule` with `suffix` (its hold or its
/// limit's state): `None` in a cluster when it could not share the
/// schedule's slot (a `}` in a name without a hash tag).
fn beside(ctx: &Context, schedule: &[u8], suffix: &[u8]) -> Option<Vec<u8>> {
    let name = slots::derived_key(schedule, suffix);
    if context::in_cluster(ctx) && slots::key_slot(&name) != slots::key_slot(schedule) {
        return None;
    }
    Some(name)
}

/// Until when (server ms) `schedule` is held, if it is now. A hold key of
/// another type, or holding no integer, holds nothing. Read for every
/// ECHO.ADD: the name of the last schedule's hold key is kept.
pub fn held_until(ctx: &Context, schedule: &[u8]) -> Option<i64> {
    HOLD_NAME.with(
        ctx,
        schedule,
        || beside(ctx, schedule, HOLD_SUFFIX),
        |name| {
            let key = Key::open_read(ctx, name?);
            key.string_i64().filter(|&until| until > now_ms())
        },
    )
}

/// The name of the last hold key `held_until` read.
static HOLD_NAME: KeptName = KeptName::new();

/// `ECHO.HOLD`: the hold in force after it (0 for none). Writes the hold key
/// (`SET key <until> PXAT <until>`) when the hold grows, deletes it for
/// `ms = 0`. Refused: a hold key of another type (`WRONGTYPE`); in a
/// cluster, a name whose hold key cannot share its slot; and a new hold of
/// a schedule that does not exist while memory is over maxmemory (a hold
/// must work then, for a queue with jobs, but must not let a client make
/// keys without bound; extending and lifting always work).
pub fn hold(ctx: &Context, schedule: &Arg, ms: u64) -> Result<i64, RedisError> {
    let Some(name) = beside(ctx, schedule.as_slice(), HOLD_SUFFIX) else {
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
        return Err(ReplyError::NewKeyOutOfMemory.into());
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

/// Works on a copy of the limit: a read-only command (served by a replica
/// too) writes nothing, and a window that ended shows its effect; a decrease
/// it shows is counted in INFO then, once.
pub fn snapshot(ctx: &Context, schedule: &[u8]) -> Snapshot {
    let held_until_ms = held_until(ctx, schedule);
    let now_ms = now_ms();
    let db = context::selected_db(ctx);
    let mut state = state();
    let adaptive = state.adaptive();
    let limit = state.limits.get_mut(schedule, db, now_ms).map(|limit| {
        let released = limit.released();
        let failures = limit.failures();
        let mut view = limit.clone();
        // A state key of another type: what this node's memory has.
        let _ = restore(ctx, schedule, &mut view, now_ms);
        // A window that ended shows its effect, and a decrease counts once
        // (the release that books it does not count it again).
        if view.roll(now_ms, adaptive) && limit.count_decrease_of(limit.window_start_ms()) {
            stats::adaptive_decrease();
        }
        LimitView {
            rate_per_second: view.spec().rate.per_second(),
            in_force_per_second: view.in_force_per_second(),
            burst: view.spec().burst,
            adaptive: view.spec().rate.kind == LimitKind::Adaptive,
            available: if held_until_ms.is_some() {
                0
            } else {
                view.available(now_ms)
            },
            released,
            failures,
        }
    });
    Snapshot {
        limit,
        held_until_ms,
    }
}
