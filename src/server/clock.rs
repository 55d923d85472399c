//! The server's clocks.

use redis_module::raw;

/// The server's command time in Unix milliseconds.
///
/// Valkey's cached time is the instant the server itself uses for the
/// command and stays frozen for every command inside one MULTI/EXEC or
/// script, so a cohort retried in one transaction shares one `now`. (A script
/// that runs past busy-reply-threshold lets the server refresh it, as it
/// does for TIME.) Redis 7.0 lacks that API; there the wall clock is used,
/// which keeps moving.
pub fn now_ms() -> i64 {
    // SAFETY: a pointer written once at load, before any command can run;
    // reading the Option copies it.
    if let Some(cached_us) = unsafe { raw::RedisModule_CachedMicroseconds } {
        // SAFETY: no arguments, no preconditions.
        return unsafe { cached_us() } / 1000;
    }
    wall_ms()
}

/// The wall clock in Unix milliseconds: the instant a timer callback runs
/// (a timer has no command time).
pub fn wall_ms() -> i64 {
    // SAFETY: checked at load; no arguments, no preconditions.
    unsafe { api!(RedisModule_Milliseconds)() }
}
