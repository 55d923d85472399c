//! Counters for `INFO echomq`, since the module loaded.
//!
//! Commands run on the server's main thread; atomics only make the statics
//! shareable, so relaxed ordering is enough.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::RedisResult;

use crate::server::info::{InfoSection, InfoWriter};

static RETRIES: AtomicU64 = AtomicU64::new(0);
static RETRIES_JITTERED: AtomicU64 = AtomicU64::new(0);
static PROMOTE_CALLS: AtomicU64 = AtomicU64::new(0);
static PROMOTED: AtomicU64 = AtomicU64::new(0);
static DEAD_LETTERED: AtomicU64 = AtomicU64::new(0);
static ERRORS: AtomicU64 = AtomicU64::new(0);
static AUTO_TICKS: AtomicU64 = AtomicU64::new(0);
static AUTO_PROMOTED: AtomicU64 = AtomicU64::new(0);
static AUTO_ERRORS: AtomicU64 = AtomicU64::new(0);
static AUTO_LAG_MS_MAX: AtomicU64 = AtomicU64::new(0);
static SCHEDULED: AtomicU64 = AtomicU64::new(0);
static ADDED_DIRECT: AtomicU64 = AtomicU64::new(0);
static RELEASE_LIMITED: AtomicU64 = AtomicU64::new(0);
static ADAPTIVE_DECREASES: AtomicU64 = AtomicU64::new(0);
static GROUP_RELEASES: AtomicU64 = AtomicU64::new(0);
static GROUP_LIMITED: AtomicU64 = AtomicU64::new(0);

pub fn retried(jittered: bool) {
    RETRIES.fetch_add(1, Relaxed);
    if jittered {
        RETRIES_JITTERED.fetch_add(1, Relaxed);
    }
}

/// An ECHO.SCHEDULE call that replied a fire time or `-2`, or an ECHO.ADD
/// call that scheduled its job.
pub fn scheduled() {
    SCHEDULED.fetch_add(1, Relaxed);
}

/// An ECHO.ADD call that put its job straight into pending (one that
/// scheduled it counts as `scheduled`).
pub fn added_direct() {
    ADDED_DIRECT.fetch_add(1, Relaxed);
}

/// A promote or a tick left due members in a schedule because of a release
/// limit or a hold.
pub fn release_limited() {
    RELEASE_LIMITED.fetch_add(1, Relaxed);
}

/// An adaptive limit halved its rate in force.
pub fn adaptive_decrease() {
    ADAPTIVE_DECREASES.fetch_add(1, Relaxed);
}

/// Members a grouped release moved, and the groups it found held back by
/// their own limit.
pub fn group_released(moved: u64, limited: u64) {
    GROUP_RELEASES.fetch_add(moved, Relaxed);
    GROUP_LIMITED.fetch_add(limited, Relaxed);
}

pub fn dead_lettered() {
    DEAD_LETTERED.fetch_add(1, Relaxed);
}

pub fn promoted(moved: u64) {
    PROMOTE_CALLS.fetch_add(1, Relaxed);
    PROMOTED.fetch_add(moved, Relaxed);
}

/// A tick of the auto-promote timer began (on a primary free to write).
pub fn auto_tick() {
    AUTO_TICKS.fetch_add(1, Relaxed);
}

/// The timer moved `moved` members, the earliest `lag_ms` after its fire time.
pub fn auto_promoted(moved: u64, lag_ms: u64) {
    AUTO_PROMOTED.fetch_add(moved, Relaxed);
    AUTO_LAG_MS_MAX.fetch_max(lag_ms, Relaxed);
}

/// The timer skipped a pair it could not serve (a wrong-typed key).
pub fn auto_error() {
    AUTO_ERRORS.fetch_add(1, Relaxed);
}

/// Members moved by a promote that then failed (a stream out of IDs): they
/// count as moved, the call does not count as completed.
pub fn promoted_partly(moved: u64) {
    PROMOTED.fetch_add(moved, Relaxed);
}

/// Starts every counter from zero. Called at load: after `MODULE UNLOAD` the
/// library can stay mapped (a thread-local destructor of the random
/// generator pins it), and a reload would otherwise resume the old counts.
pub fn reset() {
    for counter in [
        &RETRIES,
        &RETRIES_JITTERED,
        &PROMOTE_CALLS,
        &PROMOTED,
        &DEAD_LETTERED,
        &ERRORS,
        &AUTO_TICKS,
        &AUTO_PROMOTED,
        &AUTO_ERRORS,
        &AUTO_LAG_MS_MAX,
        &SCHEDULED,
        &ADDED_DIRECT,
        &RELEASE_LIMITED,
        &ADAPTIVE_DECREASES,
        &GROUP_RELEASES,
        &GROUP_LIMITED,
    ] {
        counter.store(0, Relaxed);
    }
}

/// Sees each handler's result (handed to the command table at load),
/// counting the error replies the module itself makes.
pub fn count_result(result: &RedisResult) {
    if result.is_err() {
        ERRORS.fetch_add(1, Relaxed);
    }
}

/// The module's `INFO` section, whose fields the server prefixes with
/// `echomq_`.
pub struct Info;

impl InfoSection for Info {
    fn write(section: &mut InfoWriter) {
        for (name, counter) in [
            (c"retries", &RETRIES),
            (c"retries_jittered", &RETRIES_JITTERED),
            (c"scheduled", &SCHEDULED),
            (c"added_direct", &ADDED_DIRECT),
            (c"promote_calls", &PROMOTE_CALLS),
            (c"promoted", &PROMOTED),
            (c"dead_lettered", &DEAD_LETTERED),
            (c"errors", &ERRORS),
            (c"auto_promote_ticks", &AUTO_TICKS),
            (c"auto_promoted", &AUTO_PROMOTED),
            (c"auto_promote_errors", &AUTO_ERRORS),
            (c"auto_promote_lag_ms_max", &AUTO_LAG_MS_MAX),
            (c"release_limited", &RELEASE_LIMITED),
            (c"adaptive_decreases", &ADAPTIVE_DECREASES),
            (c"group_releases", &GROUP_RELEASES),
            (c"group_limited", &GROUP_LIMITED),
        ] {
            section.field(name, counter.load(Relaxed));
        }
        // A gauge, not a counter: whether maxmemory-policy spares queue keys.
        section.field(c"eviction_policy_safe", crate::engine::eviction::safe());
    }
}
