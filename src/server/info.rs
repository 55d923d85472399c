//! The module's section of `INFO`.

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::raw::{self, RedisModuleInfoCtx};
use redis_module::Context;

/// Writes the module's INFO section.
pub trait InfoSection {
    fn write(section: &mut InfoWriter);
}

/// The section being written: fields in the order added, each name prefixed
/// by the server with the module's name.
pub struct InfoWriter(*mut RedisModuleInfoCtx);

impl InfoWriter {
    pub fn field(&mut self, name: &CStr, value: u64) {
        // SAFETY: checked at load; a live info context inside the callback,
        // a C-string name the server copies.
        unsafe { api!(RedisModule_InfoAddFieldULongLong)(self.0, name.as_ptr(), value) };
    }
}

/// Registers `I` as the module's INFO callback.
pub fn register<I: InfoSection>(ctx: &Context) -> Result<(), String> {
    // SAFETY: checked at load; a live context and a callback of the server's type.
    let status = unsafe { api!(RedisModule_RegisterInfoFunc)(ctx.ctx, Some(write::<I>)) };
    if status == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err("the server refused the INFO section".into())
    }
}

extern "C" fn write<I: InfoSection>(ctx: *mut RedisModuleInfoCtx, _for_crash_report: c_int) {
    // SAFETY: checked at load; a null name makes the section the module's own.
    unsafe { api!(RedisModule_InfoAddSection)(ctx, std::ptr::null()) };
    I::write(&mut InfoWriter(ctx));
}
