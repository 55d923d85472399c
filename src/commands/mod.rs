//! One thin handler per command: parse, open keys, check types, write,
//! notify, replicate, reply.

pub mod delay;
pub mod docs;
pub mod promote;
pub mod retry;
pub mod spread;

use redis_module::{raw, Context, RedisString, Status};

/// Called once when the module loads, after the commands are registered.
pub fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // SAFETY: the API pointers are set by RedisModule_Init before OnLoad's
    // body runs; the ones checked here are those `keys` calls unconditionally.
    unsafe {
        // Copy each pointer out: a reference to a `static mut` is not allowed.
        macro_rules! present {
            ($($api:ident),* $(,)?) => { [$({ let api = raw::$api; api.is_some() }),*] };
        }
        let required = present!(
            RedisModule_OpenKey,
            RedisModule_CloseKey,
            RedisModule_KeyType,
            RedisModule_ValueLength,
            RedisModule_ZsetAdd,
            RedisModule_ZsetRem,
            RedisModule_ZsetFirstInScoreRange,
            RedisModule_ZsetRangeCurrentElement,
            RedisModule_ZsetRangeNext,
            RedisModule_ZsetRangeEndReached,
            RedisModule_ZsetRangeStop,
            RedisModule_ListPush,
            RedisModule_FreeString,
            RedisModule_SignalModifiedKey,
            RedisModule_Replicate,
            RedisModule_SetModuleOptions,
            RedisModule_RegisterInfoFunc,
            RedisModule_InfoAddSection,
            RedisModule_InfoAddFieldULongLong,
        );
        if required.contains(&false) {
            ctx.log_warning("echomq: this server lacks a module API echomq needs");
            return Status::Err;
        }
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
    if let Err(why) = docs::describe(ctx, crate::COMMAND_DOCS) {
        ctx.log_warning(&format!("echomq: {why}"));
        return Status::Err;
    }
    Status::Ok
}
