//! Server events the module follows, and the server's own INFO fields.

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleEvent};
use redis_module::Context;

/// Told of each CONFIG SET (and CONFIG REWRITE, restart) that changed
/// configs, with the names changed.
pub trait OnConfigChange {
    fn changed(ctx: &Context, names: &[&[u8]]);
}

/// Subscribes `H` to the config-change event.
pub fn on_config_change<H: OnConfigChange>(ctx: &Context) -> Result<(), String> {
    let event = RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CONFIG,
        dataver: 1,
    };
    // SAFETY: checked at load; a live context and a callback with the
    // server's signature.
    let status = unsafe {
        api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, event, Some(config_changed::<H>))
    };
    if status == raw::REDISMODULE_OK as i32 {
        Ok(())
    } else {
        Err("the server refused the config-change event".into())
    }
}

extern "C" fn config_changed<H: OnConfigChange>(
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
    let names: Vec<&[u8]> = unsafe {
        let change = &*(data as *const raw::RedisModuleConfigChange);
        if change.config_names.is_null() {
            return;
        }
        (0..change.num_changes as usize)
            .map(|i| *change.config_names.add(i))
            .filter(|name| !name.is_null())
            .map(|name| CStr::from_ptr(name).to_bytes())
            .collect()
    };
    H::changed(&Context::new(ctx), &names);
}

/// Told once when the server shuts down, after its last save and before it
/// unloads the modules (Valkey 9 unloads them all at shutdown, and refuses,
/// with a warning in the log, a module that holds a timer).
pub trait OnShutdown {
    fn shutdown(ctx: &Context);
}

/// Subscribes `H` to the shutdown event.
pub fn on_shutdown<H: OnShutdown>(ctx: &Context) -> Result<(), String> {
    let event = RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_SHUTDOWN,
        dataver: 1,
    };
    // SAFETY: checked at load; a live context and a callback with the
    // server's signature.
    let status = unsafe {
        api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, event, Some(shutting_down::<H>))
    };
    if status == raw::REDISMODULE_OK as i32 {
        Ok(())
    } else {
        Err("the server refused the shutdown event".into())
    }
}

extern "C" fn shutting_down<H: OnShutdown>(
    ctx: *mut RedisModuleCtx,
    _event: RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    H::shutdown(&Context::new(ctx));
}

/// One field of the server's own `INFO section`, read through the module
/// API (no command call, no reply to parse); `None` when it has no such field.
pub fn server_info_field(ctx: &Context, section: &CStr, field: &CStr) -> Option<String> {
    // SAFETY: checked at load; the info data is freed once, after the field
    // was copied out.
    unsafe {
        let info = api!(RedisModule_GetServerInfo)(ctx.ctx, section.as_ptr());
        if info.is_null() {
            return None;
        }
        let value: *const c_char = api!(RedisModule_ServerInfoGetFieldC)(info, field.as_ptr());
        let text = (!value.is_null()).then(|| CStr::from_ptr(value).to_string_lossy().into_owned());
        api!(RedisModule_FreeServerInfo)(ctx.ctx, info);
        text
    }
}

/// Valkey 9's atomic slot migration event (`VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION`,
/// id 19, info version 1), which the SDK's Redis header does not know. Only
/// a server that declares atomic slot migration has it: subscribe there only.
const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;

/// What an atomic slot migration event says happened, for the job's slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotMigration {
    ImportStarted,
    ExportStarted,
    ImportAborted,
    ExportAborted,
    ImportCompleted,
    ExportCompleted,
}

impl SlotMigration {
    /// `VALKEYMODULE_SUBEVENT_ATOMIC_SLOT_MIGRATION_*`, 0 to 5.
    fn from_subevent(subevent: u64) -> Option<SlotMigration> {
        Some(match subevent {
            0 => SlotMigration::ImportStarted,
            1 => SlotMigration::ExportStarted,
            2 => SlotMigration::ImportAborted,
            3 => SlotMigration::ExportAborted,
            4 => SlotMigration::ImportCompleted,
            5 => SlotMigration::ExportCompleted,
            _ => return None,
        })
    }
}

/// `ValkeyModuleSlotRange`: first and last slot, both inclusive.
#[repr(C)]
struct SlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfoV1`.
#[repr(C)]
struct SlotMigrationInfo {
    version: u64,
    /// `VALKEYMODULE_NODE_ID_LEN + 1`
    job_name: [c_char; 41],
    slot_ranges: *const SlotRange,
    num_slot_ranges: u32,
}

/// Told of each step of an atomic slot migration this node takes part in,
/// with the job's slot ranges (first, last, inclusive).
pub trait OnSlotMigration {
    fn step(ctx: &Context, step: SlotMigration, ranges: &[(u16, u16)]);
}

/// Subscribes `H` to the atomic slot migration event.
pub fn on_slot_migration<H: OnSlotMigration>(ctx: &Context) -> Result<(), String> {
    let event = RedisModuleEvent {
        id: EVENT_ATOMIC_SLOT_MIGRATION,
        dataver: 1,
    };
    // SAFETY: checked at load; a live context and a callback with the
    // server's signature. A server without the event refuses with an error.
    let status = unsafe {
        api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, event, Some(slot_migration::<H>))
    };
    if status == raw::REDISMODULE_OK as i32 {
        Ok(())
    } else {
        Err("the server refused the atomic slot migration event".into())
    }
}

extern "C" fn slot_migration<H: OnSlotMigration>(
    ctx: *mut RedisModuleCtx,
    _event: RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let Some(step) = SlotMigration::from_subevent(subevent) else {
        return;
    };
    if data.is_null() {
        return;
    }
    // SAFETY: for this event the server passes a
    // ValkeyModuleAtomicSlotMigrationInfo (version 1, as subscribed), live
    // for the call, whose `slot_ranges` holds `num_slot_ranges` ranges.
    let ranges: Vec<(u16, u16)> = unsafe {
        let info = &*(data as *const SlotMigrationInfo);
        if info.version != 1 || info.slot_ranges.is_null() {
            return;
        }
        (0..info.num_slot_ranges as usize)
            .map(|i| &*info.slot_ranges.add(i))
            .filter_map(|range| {
                Some((
                    u16::try_from(range.start).ok()?,
                    u16::try_from(range.end).ok()?,
                ))
            })
            .collect()
    };
    H::step(&Context::new(ctx), step, &ranges);
}
