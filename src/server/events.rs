//! Server events the module follows, and the server's own INFO fields.

use std::ffi::{c_void, CStr};
use std::os::raw::c_char;

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
