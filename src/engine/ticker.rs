//! Promotion inside the server: the `echomq.auto-promote*` module configs
//! and the timer that runs ticks.
//!
//! A tick serves the configured pairs in order, each with exactly what
//! `ECHO.PROMOTE schedule pending LIMIT limit` does (`mover::move_due`),
//! within a time budget of `PAIR_BUDGET` per pair. A timer callback serves
//! pairs until about `PAIR_BUDGET` has passed and leaves the rest to the
//! next callback, which the event loop runs after the clients that are
//! ready: the server wraps everything one callback replicates in a single
//! MULTI/EXEC, and no client waits much longer than the budget. A tick in which a pair moved
//! its full limit, or ran out of its budget, is followed at once by the next
//! (a 0 ms timer, which the event loop fires only after serving the clients
//! that are ready); otherwise the next tick comes `interval_ms` later. Each
//! tick reports the time it spent working, summed over its pairs, to the
//! latency monitor as `echomq-auto-promote`.
//!
//! The timer is armed only while a pair is configured: the server refuses to
//! unload a module that holds a timer, so emptying the config must disarm it.
//!
//! Everything here runs on the server's main thread (config callbacks,
//! timer callbacks); the mutex only makes the state a shareable static.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redis_module::{Context, RedisError};

use crate::engine::mover::{self, Moved, TimeLimit};
use crate::engine::{imports, release, stats};
use crate::rules::configs::{self, Pair};
use crate::rules::errors::{PAIR_CROSSSLOT, PAIR_FAILED, PAIR_WRONGTYPE};
use crate::rules::slots;
use crate::server::config::{self, numeric_config, ApplyConfigs, StringConfig};
use crate::server::keys::OwnedName;
use crate::server::timer::{self, OnTimer, TimerId};
use crate::server::{clock, context, events, log};

/// The keys of echomq.auto-promote live in database 0 (the only one a
/// cluster has by default); a timer's context has none of its own choosing.
const TIMER_DB: i32 = 0;

pub const DEFAULT_INTERVAL_MS: i64 = 10;
pub const MAX_INTERVAL_MS: i64 = 60_000;
pub const DEFAULT_LIMIT: i64 = 1000;
pub const MAX_LIMIT: i64 = 1_000_000;
/// The most one pair's move may hold the server in one tick, whatever the
/// limit: the rest follows at the next tick, at once, after the clients
/// that are ready.
pub const PAIR_BUDGET: Duration = Duration::from_millis(2);
/// A pair that keeps failing is logged at most this often.
const LOG_EVERY_MS: i64 = 60_000;
/// The latency monitor's name for a tick.
const LATENCY_EVENT: &std::ffi::CStr = c"echomq-auto-promote";

struct State {
    /// `echomq.auto-promote` exactly as set.
    text: Vec<u8>,
    pairs: Vec<Pair>,
    /// When each pair (same index) was last logged as failing.
    last_logged_ms: Vec<Option<i64>>,
    /// When each pair (same index) was listed, or the module loaded: a
    /// member due before then waited for nobody's timer, and its wait is
    /// not the timer's lag.
    watched_since_ms: Vec<i64>,
    interval_ms: i64,
    limit: i64,
    /// The armed timer, if any: at most one at a time.
    timer: Option<TimerId>,
    /// A pair of the running tick moved its full limit or ran out of time.
    tick_full: bool,
    /// The time the running tick has spent in its callbacks so far.
    tick_work: Duration,
}

static STATE: Mutex<State> = Mutex::new(State {
    text: Vec::new(),
    pairs: Vec::new(),
    last_logged_ms: Vec::new(),
    watched_since_ms: Vec::new(),
    interval_ms: DEFAULT_INTERVAL_MS,
    limit: DEFAULT_LIMIT,
    timer: None,
    tick_full: false,
    tick_work: Duration::ZERO,
});

fn state() -> MutexGuard<'static, State> {
    // A panic cannot happen while the lock is held (no code here panics), and
    // the state stays consistent field by field anyway.
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The configured pairs, in order (`ECHO.QUEUES`).
pub fn pairs() -> Vec<Pair> {
    state().pairs.clone()
}

/// Drops the pairs and the config's text, their memory with them: at load
/// (after MODULE UNLOAD the library can stay mapped with its statics) and at
/// unload (the server's allocator would otherwise keep them). No timer can
/// be armed then: the server refuses to unload a module that holds one.
pub fn reset() {
    let mut state = state();
    state.text = Vec::new();
    state.pairs = Vec::new();
    state.last_logged_ms = Vec::new();
    state.watched_since_ms = Vec::new();
    state.interval_ms = DEFAULT_INTERVAL_MS;
    state.limit = DEFAULT_LIMIT;
    state.timer = None;
    state.tick_full = false;
    state.tick_work = Duration::ZERO;
}

/// Registers the three configs; `start` follows once the server has loaded
/// every config's value.
pub fn register(ctx: &Context) -> Result<(), String> {
    reset();
    events::on_shutdown::<Disarm>(ctx)?;
    config::register_string::<Pairs, Rearm>(ctx, c"auto-promote", c"")?;
    config::register_numeric::<IntervalMs, Rearm>(
        ctx,
        c"auto-promote-interval-ms",
        DEFAULT_INTERVAL_MS,
        1,
        MAX_INTERVAL_MS,
    )?;
    config::register_numeric::<Limit, Rearm>(
        ctx,
        c"auto-promote-limit",
        DEFAULT_LIMIT,
        1,
        MAX_LIMIT,
    )
}

/// Arms the timer if a pair is configured.
pub fn start(ctx: &Context) {
    rearm(ctx);
}

/// At shutdown the timer is disarmed: the server exits anyway, and Valkey 9
/// then unloads the module cleanly instead of logging that it holds a timer.
struct Disarm;

impl events::OnShutdown for Disarm {
    fn shutdown(ctx: &Context) {
        if let Some(id) = state().timer.take() {
            timer::stop(ctx, id);
        }
    }
}

/// `echomq.auto-promote`.
struct Pairs;

impl StringConfig for Pairs {
    fn get() -> Vec<u8> {
        state().text.clone()
    }

    fn set(value: &[u8]) -> Result<(), String> {
        let mut state = state();
        match configs::parse_pairs(value) {
            Ok(pairs) => {
                let now_ms = clock::wall_ms();
                // A pair listed before keeps the moment it was first listed.
                let since: Vec<i64> = pairs
                    .iter()
                    .map(|pair| {
                        state
                            .pairs
                            .iter()
                            .position(|old| old == pair)
                            .and_then(|at| state.watched_since_ms.get(at).copied())
                            .unwrap_or(now_ms)
                    })
                    .collect();
                state.text = value.to_vec();
                state.last_logged_ms = vec![None; pairs.len()];
                state.watched_since_ms = since;
                state.pairs = pairs;
                Ok(())
            }
            Err(why) => Err(why.text().into()),
        }
    }
}

numeric_config!(IntervalMs, state, interval_ms, 1, MAX_INTERVAL_MS);
numeric_config!(Limit, state, limit, 1, MAX_LIMIT);

/// After a CONFIG SET of any of the three (once per command): a new pair
/// list or interval takes effect at once, an empty list disarms the timer.
struct Rearm;

impl ApplyConfigs for Rearm {
    fn apply(ctx: &Context) {
        rearm(ctx);
    }
}

/// Stops the armed timer, then arms a new one for a tick now if a pair is
/// configured.
fn rearm(ctx: &Context) {
    let mut state = state();
    if let Some(id) = state.timer.take() {
        timer::stop(ctx, id);
    }
    state.tick_full = false;
    state.tick_work = Duration::ZERO;
    if !state.pairs.is_empty() {
        state.timer = Some(timer::arm::<Tick>(ctx, 0, 0));
    }
}

/// The timer: serves pair number `data` of the running tick.
struct Tick;

impl OnTimer for Tick {
    fn fire(ctx: &Context, cursor: usize) {
        let started = Instant::now();
        let (pairs_len, limit, interval_ms) = {
            let mut state = state();
            // This timer has fired: it is armed no more.
            state.timer = None;
            if state.pairs.is_empty() {
                return;
            }
            (state.pairs.len(), state.limit, state.interval_ms)
        };
        if cursor >= pairs_len {
            // The list shrank under a running tick: the tick is over.
            finish_tick(ctx, interval_ms);
            return;
        }
        if !context::may_write(ctx) {
            // Nothing moves; the tick starts over once writing is possible.
            let mut state = state();
            state.tick_full = false;
            state.tick_work = Duration::ZERO;
            state.timer = Some(timer::arm::<Tick>(ctx, interval_ms, 0));
            return;
        }
        if cursor == 0 {
            stats::auto_tick();
            let mut state = state();
            state.tick_full = false;
            state.tick_work = Duration::ZERO;
        }
        // This callback serves pairs in order until about PAIR_BUDGET has
        // passed; the next callback, after the clients that are ready, goes
        // on from there. (A callback per pair would cost an event-loop pass,
        // a millisecond at least, per pair.) Slots cannot change during a
        // callback, so a cluster node reads its own once per callback.
        let mut own_slots = None;
        let mut cursor = cursor;
        while cursor < pairs_len {
            let Some(pair) = state().pairs.get(cursor).cloned() else {
                break;
            };
            // A pair whose release limit allows nothing now is passed over
            // without opening its keys (a hold is a key: move_due reads it).
            if release::may_allow(&pair.schedule, TIMER_DB) {
                serve_and_count(ctx, cursor, &pair, limit, &mut own_slots);
            }
            cursor += 1;
            if started.elapsed() >= PAIR_BUDGET {
                break;
            }
        }
        state().tick_work += started.elapsed();
        if cursor < pairs_len {
            state().timer = Some(timer::arm::<Tick>(ctx, 0, cursor));
        } else {
            finish_tick(ctx, interval_ms);
        }
    }
}

/// Serves one pair and counts what it did.
fn serve_and_count(
    ctx: &Context,
    cursor: usize,
    pair: &Pair,
    limit: i64,
    own_slots: &mut Option<slots::Slots>,
) {
    match serve(ctx, pair, limit, own_slots) {
        Ok(Some(moved)) => {
            if moved.count > 0 {
                let since_ms = state().watched_since_ms.get(cursor).copied();
                let lag_ms = moved
                    .earliest_ms
                    .map_or(0, |fire_ms| lag_ms(fire_ms, since_ms, clock::wall_ms()));
                stats::auto_promoted(moved.count, lag_ms);
            }
            if let Some(why) = moved.refused {
                // A stream out of IDs: what it took moved; the pair is failing.
                stats::auto_error();
                log_failure(ctx, cursor, pair, why.text());
            } else if moved.out_of_time || moved.count >= limit.unsigned_abs() {
                state().tick_full = true;
            }
        }
        // Not this node's to touch (another node's slot, or a slot migrating).
        Ok(None) => {}
        Err(why) => {
            stats::auto_error();
            log_failure(ctx, cursor, pair, why);
        }
    }
}

/// The timer's lag for a member due at `fire_ms` and moved at `now_ms`: how
/// long it waited since it became due, or since its pair was listed
/// (`since_ms`) when that came later. A member scheduled due long ago (a
/// score of 0, or -inf, meaning "now") waited for no timer before then.
/// A limit or hold that keeps a due member waiting counts: it is late.
fn lag_ms(fire_ms: f64, since_ms: Option<i64>, now_ms: i64) -> u64 {
    let since_ms = since_ms.unwrap_or(now_ms) as f64;
    let became_due_ms = if fire_ms.is_nan() {
        since_ms
    } else {
        fire_ms.max(since_ms)
    };
    (now_ms as f64 - became_due_ms).max(0.0) as u64
}

fn finish_tick(ctx: &Context, interval_ms: i64) {
    let mut state = state();
    let work = std::mem::take(&mut state.tick_work);
    // Milliseconds rounded down, as the server reports its own events.
    context::report_latency(
        LATENCY_EVENT,
        i64::try_from(work.as_millis()).unwrap_or(i64::MAX),
    );
    let delay_ms = if state.tick_full { 0 } else { interval_ms };
    state.tick_full = false;
    if !state.pairs.is_empty() {
        state.timer = Some(timer::arm::<Tick>(ctx, delay_ms, 0));
    }
}

/// Moves one pair's due members: `None` when the pair is not this node's.
fn serve(
    ctx: &Context,
    pair: &Pair,
    limit: i64,
    own_slots: &mut Option<slots::Slots>,
) -> Result<Option<Moved>, &'static str> {
    if context::in_cluster(ctx) {
        let slot = slots::key_slot(&pair.schedule);
        if slots::key_slot(&pair.pending) != slot {
            return Err(PAIR_CROSSSLOT);
        }
        // Read once per callback: a slot can start migrating between two.
        let own =
            own_slots.get_or_insert_with(|| slots::stable_own_slots(&context::cluster_nodes(ctx)));
        // An atomic migration's target holds the keys before the slot is its
        // own: it never acts on a slot it is importing.
        if !own.contains(slot) || imports::importing(slot) {
            return Ok(None);
        }
    }
    context::select_db(ctx, TIMER_DB);
    let schedule = OwnedName::new(ctx, &pair.schedule);
    let pending = OwnedName::new(ctx, &pair.pending);
    match mover::move_due(
        ctx,
        schedule.arg(),
        pending.arg(),
        limit.unsigned_abs(),
        clock::wall_ms(),
        TimeLimit::Budget(PAIR_BUDGET),
    ) {
        Ok(moved) => Ok(Some(moved)),
        Err(RedisError::WrongType) => Err(PAIR_WRONGTYPE),
        // move_due fails only with WRONGTYPE; a future error is still logged.
        Err(_) => Err(PAIR_FAILED),
    }
}

/// Logs a failing pair, at most once a minute per pair, with its names
/// quoted and escaped (a key name may hold `%`, NUL or invalid UTF-8).
fn log_failure(ctx: &Context, cursor: usize, pair: &Pair, why: &str) {
    let now_ms = clock::wall_ms();
    {
        let mut state = state();
        // The config may have changed; then this pair's slot is someone else's.
        if state.pairs.get(cursor) != Some(pair) {
            return;
        }
        let Some(last) = state.last_logged_ms.get_mut(cursor) else {
            return;
        };
        if last.is_some_and(|at_ms| now_ms.saturating_sub(at_ms) < LOG_EVERY_MS) {
            return;
        }
        *last = Some(now_ms);
    }
    log::warning(
        ctx,
        &format!(
            "echomq: auto-promote skips {} {}: {why} (counted in echomq_auto_promote_errors; logged at most once a minute)",
            log::quote(&pair.schedule),
            log::quote(&pair.pending),
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::lag_ms;

    #[test]
    fn lag_counts_from_when_a_member_became_due_while_watched() {
        let listed = Some(1_000_000);
        assert_eq!(lag_ms(1_000_500.0, listed, 1_000_700), 200);
        // Due before the pair was listed ("due now" written as 0 or -inf).
        assert_eq!(lag_ms(0.0, listed, 1_000_010), 10);
        assert_eq!(lag_ms(f64::NEG_INFINITY, listed, 1_000_010), 10);
        // Moved early (a clock step back): no lag, never a wrapped one.
        assert_eq!(lag_ms(1_000_900.0, listed, 1_000_700), 0);
        assert_eq!(lag_ms(f64::INFINITY, listed, 1_000_700), 0);
        assert_eq!(lag_ms(f64::NAN, listed, 1_000_700), 700);
        // No record of the listing: counted from now, never from 1970.
        assert_eq!(lag_ms(0.0, None, 1_000_700), 0);
    }
}
