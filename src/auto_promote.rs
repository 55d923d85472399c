//! Promotion inside the server (SPEC.md, "Promotion inside the server"):
//! the `echomq.auto-promote*` module configs and the timer that runs ticks.
//!
//! A tick serves the configured pairs in order, each with exactly what
//! `ECHO.PROMOTE schedule pending LIMIT limit` does (`promote::move_due`).
//! Each pair runs in its own timer callback: the server wraps everything one
//! callback replicates in a single MULTI/EXEC, so one callback per pair gives
//! one transaction per pair, and other clients run between pairs. A tick in
//! which a pair moved its full limit is followed at once by the next (a 0 ms
//! timer, which the event loop fires only after serving the clients that are
//! ready); otherwise the next tick comes `interval_ms` later.
//!
//! The timer is armed only while a pair is configured: the server refuses to
//! unload a module that holds a timer, so emptying the config must disarm it.
//!
//! Everything here runs on the server's main thread (config callbacks,
//! timer callbacks); the mutex only makes the state a shareable static.

use std::ffi::c_void;
use std::os::raw::{c_char, c_int, c_longlong};
use std::ptr;
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString, RedisModuleTimerID};
use redis_module::{Context, RedisError, RedisValue};

use crate::cluster;
use crate::commands::promote;
use crate::keys::OwnedName;
use crate::stats;

pub const DEFAULT_INTERVAL_MS: i64 = 10;
pub const MAX_INTERVAL_MS: i64 = 60_000;
pub const DEFAULT_LIMIT: i64 = 1000;
pub const MAX_LIMIT: i64 = 1_000_000;
/// A pair that keeps failing is logged at most this often.
const LOG_EVERY_MS: i64 = 60_000;

/// One `schedule pending` pair of `echomq.auto-promote`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub schedule: Vec<u8>,
    pub pending: Vec<u8>,
}

/// Reads `echomq.auto-promote`: key names separated by whitespace, taken two
/// by two. Refuses what could only be a mistake; the message is the reason
/// CONFIG SET gives.
pub fn parse_pairs(text: &[u8]) -> Result<Vec<Pair>, &'static str> {
    let names: Vec<&[u8]> = text
        .split(u8::is_ascii_whitespace)
        .filter(|name| !name.is_empty())
        .collect();
    if !names.len().is_multiple_of(2) {
        return Err("odd number of key names: give schedule pending pairs");
    }
    let mut pairs: Vec<Pair> = Vec::with_capacity(names.len() / 2);
    for two in names.chunks_exact(2) {
        let (schedule, pending) = (two[0], two[1]);
        if schedule == pending {
            return Err("schedule and pending must be different keys");
        }
        if pairs.iter().any(|p| p.schedule == schedule) {
            return Err("a schedule is named twice");
        }
        pairs.push(Pair {
            schedule: schedule.to_vec(),
            pending: pending.to_vec(),
        });
    }
    Ok(pairs)
}

/// A server string the module owns: the config value CONFIG GET copies.
struct ServerString(*mut RedisModuleString);

// SAFETY: only touched on the main thread (see the module doc); the static
// needs Send only to exist.
unsafe impl Send for ServerString {}

struct State {
    /// `echomq.auto-promote` exactly as set, and its server copy.
    text: Vec<u8>,
    text_string: ServerString,
    pairs: Vec<Pair>,
    /// When each pair (same index) was last logged as failing.
    last_logged_ms: Vec<Option<i64>>,
    interval_ms: i64,
    limit: i64,
    /// The armed timer, if any: at most one at a time.
    timer: Option<RedisModuleTimerID>,
    /// A pair of the running tick moved its full limit.
    tick_full: bool,
}

static STATE: Mutex<State> = Mutex::new(State {
    text: Vec::new(),
    text_string: ServerString(ptr::null_mut()),
    pairs: Vec::new(),
    last_logged_ms: Vec::new(),
    interval_ms: DEFAULT_INTERVAL_MS,
    limit: DEFAULT_LIMIT,
    timer: None,
    tick_full: false,
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

/// Registers the three configs and loads their values (valkey.conf, or
/// `MODULE LOADEX ... CONFIG`), then arms the timer if a pair is set. A value
/// the set callbacks refuse makes the load fail, as the server expects.
pub fn init(ctx: &Context) -> Result<(), String> {
    // After MODULE UNLOAD the library can stay mapped with its statics: start
    // afresh. No timer can be armed then (the unload would have been refused).
    {
        let mut state = state();
        let old = std::mem::replace(&mut state.text_string.0, ptr::null_mut());
        free_string(old);
        state.text.clear();
        state.pairs.clear();
        state.last_logged_ms.clear();
        state.interval_ms = DEFAULT_INTERVAL_MS;
        state.limit = DEFAULT_LIMIT;
        state.timer = None;
        state.tick_full = false;
    }
    // SAFETY: pointers set once at load, each checked before it is called.
    let (Some(string_config), Some(numeric_config), Some(load_configs)) = (unsafe {
        (
            raw::RedisModule_RegisterStringConfig,
            raw::RedisModule_RegisterNumericConfig,
            raw::RedisModule_LoadConfigs,
        )
    }) else {
        return Err("this server has no module-config API (Redis 7.0+ or Valkey needed)".into());
    };
    let ok = raw::REDISMODULE_OK as c_int;
    let flags = raw::REDISMODULE_CONFIG_DEFAULT;
    // SAFETY: static names and defaults; the callbacks match the API's types.
    unsafe {
        if string_config(
            ctx.ctx,
            c"auto-promote".as_ptr(),
            c"".as_ptr(),
            flags,
            Some(get_pairs),
            Some(set_pairs),
            Some(apply),
            ptr::null_mut(),
        ) != ok
        {
            return Err("the server refused the config auto-promote".into());
        }
        if numeric_config(
            ctx.ctx,
            c"auto-promote-interval-ms".as_ptr(),
            DEFAULT_INTERVAL_MS,
            flags,
            1,
            MAX_INTERVAL_MS,
            Some(get_interval_ms),
            Some(set_interval_ms),
            Some(apply),
            ptr::null_mut(),
        ) != ok
        {
            return Err("the server refused the config auto-promote-interval-ms".into());
        }
        if numeric_config(
            ctx.ctx,
            c"auto-promote-limit".as_ptr(),
            DEFAULT_LIMIT,
            flags,
            1,
            MAX_LIMIT,
            Some(get_limit),
            Some(set_limit),
            Some(apply),
            ptr::null_mut(),
        ) != ok
        {
            return Err("the server refused the config auto-promote-limit".into());
        }
        if load_configs(ctx.ctx) != ok {
            return Err("a configured echomq.auto-promote* value was refused".into());
        }
    }
    rearm(ctx.ctx);
    Ok(())
}

fn free_string(string: *mut RedisModuleString) {
    if string.is_null() {
        return;
    }
    // SAFETY: a string the module made with a null context, freed once.
    if let Some(free) = unsafe { raw::RedisModule_FreeString } {
        unsafe { free(ptr::null_mut(), string) };
    }
}

fn error_string(err: *mut *mut RedisModuleString, message: &str) {
    if err.is_null() {
        return;
    }
    // SAFETY: the server frees the error string it is handed.
    if let Some(create) = unsafe { raw::RedisModule_CreateString } {
        unsafe { *err = create(ptr::null_mut(), message.as_ptr().cast(), message.len()) };
    }
}

extern "C" fn get_pairs(_name: *const c_char, _privdata: *mut c_void) -> *mut RedisModuleString {
    let mut state = state();
    if state.text_string.0.is_null() {
        // SAFETY: a copy of the bytes, owned by the module (null context).
        if let Some(create) = unsafe { raw::RedisModule_CreateString } {
            let text = &state.text;
            let made = unsafe { create(ptr::null_mut(), text.as_ptr().cast(), text.len()) };
            state.text_string.0 = made;
        }
    }
    // The server copies it; the module keeps ownership.
    state.text_string.0
}

extern "C" fn set_pairs(
    _name: *const c_char,
    value: *mut RedisModuleString,
    _privdata: *mut c_void,
    err: *mut *mut RedisModuleString,
) -> c_int {
    let mut len = 0usize;
    // SAFETY: a live string the server passes for this call.
    let bytes = unsafe {
        match raw::RedisModule_StringPtrLen {
            Some(ptr_len) => {
                let p = ptr_len(value, &mut len);
                if p.is_null() {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(p.cast::<u8>(), len)
                }
            }
            None => &[][..],
        }
    };
    match parse_pairs(bytes) {
        Ok(pairs) => {
            let mut state = state();
            state.text = bytes.to_vec();
            let old = std::mem::replace(&mut state.text_string.0, ptr::null_mut());
            free_string(old);
            state.last_logged_ms = vec![None; pairs.len()];
            state.pairs = pairs;
            raw::REDISMODULE_OK as c_int
        }
        Err(why) => {
            error_string(err, why);
            raw::REDISMODULE_ERR as c_int
        }
    }
}

extern "C" fn get_interval_ms(_name: *const c_char, _privdata: *mut c_void) -> c_longlong {
    state().interval_ms
}

extern "C" fn set_interval_ms(
    _name: *const c_char,
    value: c_longlong,
    _privdata: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    // The server has checked the declared range 1..=60000.
    state().interval_ms = value.clamp(1, MAX_INTERVAL_MS);
    raw::REDISMODULE_OK as c_int
}

extern "C" fn get_limit(_name: *const c_char, _privdata: *mut c_void) -> c_longlong {
    state().limit
}

extern "C" fn set_limit(
    _name: *const c_char,
    value: c_longlong,
    _privdata: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    state().limit = value.clamp(1, MAX_LIMIT);
    raw::REDISMODULE_OK as c_int
}

/// After a CONFIG SET of any of the three (once per command): a new pair
/// list or interval takes effect at once, an empty list disarms the timer.
extern "C" fn apply(
    ctx: *mut RedisModuleCtx,
    _privdata: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    rearm(ctx);
    raw::REDISMODULE_OK as c_int
}

/// Stops the armed timer, then arms a new one for a tick now if a pair is
/// configured.
fn rearm(ctx: *mut RedisModuleCtx) {
    let mut state = state();
    if let Some(id) = state.timer.take() {
        stop_timer(ctx, id);
    }
    state.tick_full = false;
    if !state.pairs.is_empty() {
        state.timer = arm(ctx, 0, 0);
    }
}

fn stop_timer(ctx: *mut RedisModuleCtx, id: RedisModuleTimerID) {
    // SAFETY: the pointer is set at load; the timer's data is a plain index,
    // nothing to free.
    if let Some(stop) = unsafe { raw::RedisModule_StopTimer } {
        let mut data: *mut c_void = ptr::null_mut();
        unsafe { stop(ctx, id, &mut data) };
    }
}

/// Arms a timer that serves pair `cursor` after `delay_ms`.
fn arm(ctx: *mut RedisModuleCtx, delay_ms: i64, cursor: usize) -> Option<RedisModuleTimerID> {
    // SAFETY: the pointer is set at load. The data is the pair index carried
    // in the pointer itself, never dereferenced.
    let create = unsafe { raw::RedisModule_CreateTimer }?;
    Some(unsafe { create(ctx, delay_ms, Some(on_timer), cursor as *mut c_void) })
}

/// Whether this server may write now: a primary, not loading, and writes not
/// paused. A write replicated during a pause (CLIENT PAUSE WRITE, a failover)
/// aborts the server, and commands are held back by the server itself but a
/// timer is not: `AvoidReplicaTraffic` is the API that tells (true during
/// CLIENT PAUSE, WRITE or ALL, and failover pauses, on Valkey 8 and Redis 7.0).
fn may_write(ctx: *mut RedisModuleCtx) -> bool {
    // SAFETY: pointers set at load; a live context.
    let (Some(flags_of), Some(avoid)) = (unsafe {
        (
            raw::RedisModule_GetContextFlags,
            raw::RedisModule_AvoidReplicaTraffic,
        )
    }) else {
        return false;
    };
    let flags = unsafe { flags_of(ctx) } as u32;
    flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
        && flags & raw::REDISMODULE_CTX_FLAGS_LOADING == 0
        && unsafe { avoid() } == 0
}

fn in_cluster(ctx: *mut RedisModuleCtx) -> bool {
    // SAFETY: as in may_write.
    unsafe { raw::RedisModule_GetContextFlags }.is_some_and(
        |flags_of| unsafe { flags_of(ctx) } as u32 & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0,
    )
}

/// This node's slots that are served here and not being migrated, read now:
/// a slot can start migrating between two callbacks.
fn stable_own_slots(ctx: &Context) -> cluster::Slots {
    // The SDK's call unwraps only a CString of the command name (static, no
    // NUL) and the RedisModule_Call pointer (in every server version); its
    // reply conversion panics only on RESP3 maps and sets, and a RESP2 call
    // of CLUSTER NODES replies with one bulk string. Nothing is replicated:
    // the format has no `!`.
    let text = match ctx.call("CLUSTER", &["NODES"]) {
        Ok(RedisValue::SimpleString(text)) => text,
        Ok(RedisValue::BulkString(text)) => text,
        Ok(RedisValue::BulkRedisString(text)) => text.to_string_lossy(),
        Ok(RedisValue::StringBuffer(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(RedisValue::VerbatimString((_, bytes))) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    };
    cluster::stable_own_slots(&text)
}

fn wall_ms() -> i64 {
    // SAFETY: set at load. The timer has no command time: the wall clock is
    // the instant the move happens, which the lag is measured against.
    unsafe { raw::RedisModule_Milliseconds }.map_or(0, |ms| unsafe { ms() })
}

/// What the callback does with one pair.
enum Outcome {
    Moved(promote::Moved),
    /// Not this node's to touch (another node's slot, or a slot migrating).
    NotOurs,
    Failed(String),
}

extern "C" fn on_timer(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    let cursor = data as usize;
    let (pair, pairs_len, limit, interval_ms) = {
        let mut state = state();
        // This timer has fired: it is armed no more.
        state.timer = None;
        if state.pairs.is_empty() {
            return;
        }
        let pair = state.pairs.get(cursor).cloned();
        (pair, state.pairs.len(), state.limit, state.interval_ms)
    };
    let Some(pair) = pair else {
        // The list shrank under a running tick: the tick is over.
        finish_tick(ctx, interval_ms);
        return;
    };
    if !may_write(ctx) {
        // Nothing moves; the tick starts over once writing is possible.
        let mut state = state();
        state.tick_full = false;
        state.timer = arm(ctx, interval_ms, 0);
        return;
    }
    if cursor == 0 {
        stats::auto_tick();
        state().tick_full = false;
    }
    let context = Context::new(ctx);
    let outcome = serve(&context, ctx, &pair, limit);
    match outcome {
        Outcome::Moved(moved) => {
            if moved.count > 0 {
                let lag_ms = moved
                    .earliest_ms
                    .map_or(0, |fire_ms| (wall_ms() as f64 - fire_ms).max(0.0) as u64);
                stats::auto_promoted(moved.count, lag_ms);
            }
            if let Some(why) = moved.refused {
                // A stream out of IDs: what it took moved; the pair is failing.
                stats::auto_error();
                log_failure(&context, cursor, &pair, why);
            } else if moved.count >= limit.unsigned_abs() {
                state().tick_full = true;
            }
        }
        Outcome::NotOurs => {}
        Outcome::Failed(why) => {
            stats::auto_error();
            log_failure(&context, cursor, &pair, &why);
        }
    }
    let next = cursor.saturating_add(1);
    if next < pairs_len {
        state().timer = arm(ctx, 0, next);
    } else {
        finish_tick(ctx, interval_ms);
    }
}

fn finish_tick(ctx: *mut RedisModuleCtx, interval_ms: i64) {
    let mut state = state();
    let delay_ms = if state.tick_full { 0 } else { interval_ms };
    state.tick_full = false;
    if !state.pairs.is_empty() {
        state.timer = arm(ctx, delay_ms, 0);
    }
}

fn serve(context: &Context, ctx: *mut RedisModuleCtx, pair: &Pair, limit: i64) -> Outcome {
    if in_cluster(ctx) {
        let slot = cluster::key_slot(&pair.schedule);
        if cluster::key_slot(&pair.pending) != slot {
            return Outcome::Failed("CROSSSLOT the two keys hash to different slots".into());
        }
        if !stable_own_slots(context).contains(slot) {
            return Outcome::NotOurs;
        }
    }
    // SAFETY: set at load; a timer context has no database of its own choice.
    if let Some(select) = unsafe { raw::RedisModule_SelectDb } {
        // The keys of echomq.auto-promote live in database 0 (the only one a
        // cluster has).
        unsafe { select(ctx, 0) };
    }
    let schedule = OwnedName::new(context, &pair.schedule);
    let pending = OwnedName::new(context, &pair.pending);
    match promote::move_due(
        context,
        schedule.arg(),
        pending.arg(),
        limit.unsigned_abs(),
        wall_ms(),
    ) {
        Ok(moved) => Outcome::Moved(moved),
        Err(RedisError::WrongType) => Outcome::Failed(
            "WRONGTYPE the schedule is not a sorted set or pending neither a list nor a stream"
                .into(),
        ),
        Err(other) => Outcome::Failed(other.to_string()),
    }
}

/// Logs a failing pair, at most once a minute per pair.
fn log_failure(context: &Context, cursor: usize, pair: &Pair, why: &str) {
    let now_ms = wall_ms();
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
    context.log_warning(&format!(
        "echomq: auto-promote skips {} {}: {why} (counted in echomq_auto_promote_errors; logged at most once a minute)",
        String::from_utf8_lossy(&pair.schedule),
        String::from_utf8_lossy(&pair.pending),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(schedule: &str, pending: &str) -> Pair {
        Pair {
            schedule: schedule.into(),
            pending: pending.into(),
        }
    }

    #[test]
    fn pairs_are_read_two_by_two() {
        assert_eq!(parse_pairs(b""), Ok(vec![]));
        assert_eq!(parse_pairs(b"  \t "), Ok(vec![]));
        assert_eq!(
            parse_pairs(b" {a}:s {a}:p\t{b}:s  {b}:p "),
            Ok(vec![pair("{a}:s", "{a}:p"), pair("{b}:s", "{b}:p")])
        );
        // One pending list may be fed by two schedules.
        assert!(parse_pairs(b"s1 p s2 p").is_ok());
    }

    #[test]
    fn mistakes_are_refused() {
        assert!(parse_pairs(b"s").is_err());
        assert!(parse_pairs(b"s p t").is_err());
        assert!(parse_pairs(b"s s").is_err());
        assert!(parse_pairs(b"s p s q").is_err());
    }
}
