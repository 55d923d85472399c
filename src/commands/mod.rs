//! One thin handler per command: parse, open keys, check types, write,
//! notify, replicate, reply.

pub mod delay;
pub mod promote;
pub mod queues;
pub mod register;
pub mod retry;
pub mod spread;

use redis_module::{raw, Context, RedisString, Status};

/// Called once when the module loads: registers the commands, the INFO
/// section, the eviction guard and the auto-promote configs (which may arm
/// the timer).
pub fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // The crate's INFO helpers call these without checking; keys.rs lists its own.
    // SAFETY: copies pointers written once at load.
    let info_api = [
        unsafe { raw::RedisModule_InfoAddSection }.is_some(),
        unsafe { raw::RedisModule_InfoAddFieldULongLong }.is_some(),
    ];
    if let Some(name) = crate::keys::missing_api() {
        ctx.log_warning(&format!(
            "echomq: this server lacks {name}, which echomq needs"
        ));
        return Status::Err;
    }
    if info_api.contains(&false) {
        ctx.log_warning("echomq: this server lacks the INFO module API echomq needs");
        return Status::Err;
    }
    // SAFETY: as above; each pointer is checked before it is called.
    unsafe {
        // Handlers signal modified keys themselves, and only keys they changed:
        // a promote that moves nothing must not fail a WATCH.
        if let Some(set_options) = raw::RedisModule_SetModuleOptions {
            set_options(
                ctx.ctx,
                raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as std::os::raw::c_int,
            );
        }
        if let Some(register_info) = raw::RedisModule_RegisterInfoFunc {
            register_info(ctx.ctx, Some(crate::stats::info));
        }
    }
    crate::stats::reset();
    if let Err(why) = register::register(ctx, crate::COMMANDS) {
        ctx.log_warning(&format!("echomq: {why}"));
        return Status::Err;
    }
    if let Err(why) = crate::eviction::init(ctx) {
        ctx.log_warning(&format!("echomq: {why}"));
        return Status::Err;
    }
    if let Err(why) = crate::auto_promote::init(ctx) {
        ctx.log_warning(&format!("echomq: {why}"));
        return Status::Err;
    }
    Status::Ok
}
