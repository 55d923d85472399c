//! The server's command time.

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
    // SAFETY: the API pointers are written once, at module load, before any
    // command can run; reading the Option copies it.
    unsafe {
        if let Some(cached_us) = raw::RedisModule_CachedMicroseconds {
            return cached_us() / 1000;
        }
        raw::RedisModule_Milliseconds.map_or(0, |wall_ms| wall_ms())
    }
}
