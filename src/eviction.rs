//! The eviction guard. Queues live in ordinary keys, so a server that evicts
//! any key under memory pressure (`maxmemory-policy allkeys-*`) can silently
//! drop a whole schedule, pending list or dead set. echomq never changes the
//! policy; it tells: `echomq_eviction_policy_safe` in `INFO echomq`, and one
//! warning line in the server log at load and at each change to an unsafe
//! policy.

use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use redis_module::raw::{self, RedisModuleCtx, RedisModuleEvent};
use redis_module::Context;

/// 1 while the policy evicts no queue key, 0 otherwise (also while unknown).
static SAFE: AtomicU64 = AtomicU64::new(0);

/// The policy last seen, so a warning is logged once per change, not once
/// per event (the server reports a CONFIG SET of the value it already has).
static LAST_POLICY: Mutex<String> = Mutex::new(String::new());

/// Whether `policy` leaves keys without a TTL alone: `noeviction`, or a
/// `volatile-*` policy (only keys with a TTL are evicted; echomq sets none).
pub fn is_safe(policy: &str) -> bool {
    policy == "noeviction" || policy.starts_with("volatile-")
}

/// The log line for an unsafe `policy`: the policy, the risk, the fix.
pub fn warning(policy: &str) -> String {
    format!(
        "echomq: WARNING maxmemory-policy is {policy}: under memory pressure the server may evict \
         queue keys (schedules, pending lists and streams, dead sets) and lose jobs without an \
         error; set maxmemory-policy noeviction (or a volatile-* policy)"
    )
}

/// The value of `INFO echomq`'s `echomq_eviction_policy_safe`.
pub fn safe() -> u64 {
    SAFE.load(Relaxed)
}

/// Reads the policy now and follows every later change of it. Called once
/// at load; fails only if the server cannot tell the module of config
/// changes, since the field would then go stale.
pub fn init(ctx: &Context) -> Result<(), String> {
    // A reload of the module starts over: the load itself is a change.
    if let Ok(mut last) = LAST_POLICY.lock() {
        last.clear();
    }
    // SAFETY: a pointer set once at load.
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else {
        return Err("this server cannot tell modules of config changes".into());
    };
    let event = RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CONFIG,
        dataver: 1,
    };
    // SAFETY: a live context at load and a callback with the server's signature.
    if unsafe { subscribe(ctx.ctx, event, Some(on_config_change)) } != raw::REDISMODULE_OK as i32 {
        return Err("the server refused the config-change event".into());
    }
    refresh(ctx.ctx);
    Ok(())
}

/// The server's config-change event: re-reads the policy when it is among
/// the configs changed.
extern "C" fn on_config_change(
    ctx: *mut RedisModuleCtx,
    _event: RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_CONFIG_CHANGE || data.is_null() {
        return;
    }
    // SAFETY: for this event the server passes a RedisModuleConfigChange,
    // live for the call, whose names are `num_changes` C strings.
    let changed = unsafe {
        let change = &*(data as *const raw::RedisModuleConfigChange);
        if change.config_names.is_null() {
            return;
        }
        (0..change.num_changes as usize).any(|i| {
            let name = *change.config_names.add(i);
            !name.is_null() && CStr::from_ptr(name).to_bytes() == b"maxmemory-policy"
        })
    };
    if changed {
        refresh(ctx);
    }
}

/// Reads the policy, sets the field, and logs one warning if it just became
/// an unsafe policy.
fn refresh(ctx: *mut RedisModuleCtx) {
    let policy = read_policy(ctx);
    let safe = policy.as_deref().is_some_and(is_safe);
    SAFE.store(u64::from(safe), Relaxed);
    let Ok(mut last) = LAST_POLICY.lock() else {
        return;
    };
    let now = policy.unwrap_or_else(|| "unknown (INFO memory has no maxmemory_policy)".into());
    if *last != now {
        if !safe {
            Context::new(ctx).log_warning(&warning(&now));
        }
        *last = now;
    }
}

/// `maxmemory_policy` from the server's own `INFO memory`, read through the
/// module API (no command call, no reply to parse).
fn read_policy(ctx: *mut RedisModuleCtx) -> Option<String> {
    // SAFETY: pointers set once at load, checked before use; the info data is
    // freed once, after the field was copied out.
    unsafe {
        let get = raw::RedisModule_GetServerInfo?;
        let field = raw::RedisModule_ServerInfoGetFieldC?;
        let free = raw::RedisModule_FreeServerInfo?;
        let info = get(ctx, c"memory".as_ptr());
        if info.is_null() {
            return None;
        }
        let value: *const c_char = field(info, c"maxmemory_policy".as_ptr());
        let policy =
            (!value.is_null()).then(|| CStr::from_ptr(value).to_string_lossy().into_owned());
        free(ctx, info);
        policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noeviction_and_volatile_policies_are_safe() {
        for (policy, safe) in [
            ("noeviction", true),
            ("volatile-lru", true),
            ("volatile-lfu", true),
            ("volatile-random", true),
            ("volatile-ttl", true),
            ("allkeys-lru", false),
            ("allkeys-lfu", false),
            ("allkeys-random", false),
            ("", false),
        ] {
            assert_eq!(is_safe(policy), safe, "{policy}");
        }
        let line = warning("allkeys-lru");
        assert!(
            line.contains("allkeys-lru") && line.contains("noeviction") && line.contains("evict")
        );
        assert!(!line.contains('\n'));
    }
}
