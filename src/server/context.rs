//! What a callback may ask of the server about its situation: role, flags,
//! cluster routing, the selected database, the latency monitor, and the one
//! command the module calls (`CLUSTER NODES`).

use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use redis_module::{raw, Context, RedisValue};

/// Whether this server may write now: a primary, not loading, and writes not
/// paused. A write replicated during a pause (CLIENT PAUSE WRITE, a failover)
/// aborts the server, and commands are held back by the server itself but a
/// timer is not: `AvoidReplicaTraffic` is the API that tells (true during
/// CLIENT PAUSE, WRITE or ALL, and failover pauses, on Valkey 8 and Redis 7.0).
pub fn may_write(ctx: &Context) -> bool {
    let flags = flags(ctx);
    // SAFETY: checked at load; no arguments.
    let avoid = unsafe { api!(RedisModule_AvoidReplicaTraffic)() };
    flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
        && flags & raw::REDISMODULE_CTX_FLAGS_LOADING == 0
        && avoid == 0
}

/// Whether the server runs in cluster mode: read at load (`init`), as the
/// server fixes it at start (`cluster-enabled` cannot be changed at run
/// time), so a command need not ask for every context flag to learn it.
pub fn in_cluster(_ctx: &Context) -> bool {
    CLUSTER.load(Relaxed)
}

static CLUSTER: AtomicBool = AtomicBool::new(false);

/// At load: reads whether the server runs in cluster mode.
pub fn init(ctx: &Context) {
    CLUSTER.store(
        flags(ctx) & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0,
        Relaxed,
    );
}

/// Whether used memory is over `maxmemory` (and a deny-oom command would be
/// refused now).
pub fn out_of_memory(ctx: &Context) -> bool {
    flags(ctx) & raw::REDISMODULE_CTX_FLAGS_OOM != 0
}

fn flags(ctx: &Context) -> u32 {
    // SAFETY: checked at load; a live context.
    unsafe { api!(RedisModule_GetContextFlags)(ctx.ctx) as u32 }
}

/// The database the context works in: a client's selected one, or what a
/// timer selected.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: checked at load; a live context.
    unsafe { api!(RedisModule_GetSelectedDb)(ctx.ctx) }
}

/// Selects database `db` for what the context does next (a timer's context
/// has none of its own choosing).
pub fn select_db(ctx: &Context, db: c_int) {
    // SAFETY: checked at load; a live context. A database out of range is
    // refused by the server with an error status, never undefined.
    unsafe { api!(RedisModule_SelectDb)(ctx.ctx, db) };
}

/// This node's `CLUSTER NODES` text ("" when the call fails).
pub fn cluster_nodes(ctx: &Context) -> String {
    // The SDK's call unwraps only a CString of the command name (static, no
    // NUL) and the RedisModule_Call pointer (in every server version); its
    // reply conversion panics only on RESP3 maps and sets, and a RESP2 call
    // of CLUSTER NODES replies with one bulk string. Nothing is replicated:
    // the format has no `!`.
    match ctx.call("CLUSTER", &["NODES"]) {
        Ok(RedisValue::SimpleString(text)) => text,
        Ok(RedisValue::BulkString(text)) => text,
        Ok(RedisValue::BulkRedisString(text)) => text.to_string_lossy(),
        Ok(RedisValue::StringBuffer(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(RedisValue::VerbatimString((_, bytes))) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    }
}

/// Whether the server called the command only to learn where its keys are
/// (a command registered with `getkeys-api`, e.g. for cluster routing).
pub fn is_keys_position_request(ctx: &Context) -> bool {
    // SAFETY: checked at load; a live context.
    unsafe { api!(RedisModule_IsKeysPositionRequest)(ctx.ctx) != 0 }
}

/// Answers a keys-position request: argument `position` is a key. The
/// caller passes only positions of arguments that exist.
pub fn report_key_at(ctx: &Context, position: usize) {
    if let Ok(position) = c_int::try_from(position) {
        // SAFETY: a live context in a keys-position request, and a position
        // inside the command's arguments.
        unsafe { api!(RedisModule_KeyAtPos)(ctx.ctx, position) };
    }
}

/// Reports `latency_ms` of `event` to the latency monitor, which keeps it
/// when it reaches `latency-monitor-threshold` (`LATENCY LATEST`,
/// `LATENCY HISTORY event`, `LATENCY DOCTOR`).
pub fn report_latency(event: &CStr, latency_ms: i64) {
    // SAFETY: checked at load; a static event name the server copies.
    unsafe { api!(RedisModule_LatencyAddSample)(event.as_ptr(), latency_ms) };
}
