//! The eviction guard. Queues live in ordinary keys, so a server that evicts
//! any key under memory pressure (`maxmemory-policy allkeys-*`) can silently
//! drop a whole schedule, pending list or dead set. echomq never changes the
//! policy; it tells: `echomq_eviction_policy_safe` in `INFO echomq`, and one
//! warning line in the server log at load and at each change to an evicting
//! policy.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use redis_module::Context;

use crate::server::events::{self, OnConfigChange};
use crate::server::log;

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

/// The log line for an evicting `policy`: the policy, the risk, the fix.
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
    events::on_config_change::<PolicyWatch>(ctx)?;
    refresh(ctx);
    Ok(())
}

/// Frees the last policy's name (at unload).
pub fn release() {
    if let Ok(mut last) = LAST_POLICY.lock() {
        *last = String::new();
    }
}

/// Re-reads the policy when it is among the configs changed.
struct PolicyWatch;

impl OnConfigChange for PolicyWatch {
    fn changed(ctx: &Context, names: &[&[u8]]) {
        if names.contains(&&b"maxmemory-policy"[..]) {
            refresh(ctx);
        }
    }
}

/// Reads the policy, sets the field, and logs one warning if it just became
/// an evicting policy.
fn refresh(ctx: &Context) {
    // From the server's own `INFO memory`, through the module API.
    let policy = events::server_info_field(ctx, c"memory", c"maxmemory_policy");
    let safe = policy.as_deref().is_some_and(is_safe);
    SAFE.store(u64::from(safe), Relaxed);
    let Ok(mut last) = LAST_POLICY.lock() else {
        return;
    };
    let now = policy.unwrap_or_else(|| "unknown (INFO memory has no maxmemory_policy)".into());
    if *last != now {
        if !safe {
            log::warning(ctx, &warning(&now));
        }
        *last = now;
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
