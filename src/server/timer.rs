//! One-shot timers of the server's event loop.

use std::ffi::c_void;
use std::ptr;

use redis_module::raw::{RedisModuleCtx, RedisModuleTimerID};
use redis_module::Context;

/// What a timer does when it fires, given the number it was armed with.
pub trait OnTimer {
    fn fire(ctx: &Context, data: usize);
}

/// An armed timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerId(RedisModuleTimerID);

/// Arms a timer that calls `T::fire(ctx, data)` after `delay_ms` (0: once the
/// event loop has served the clients that are ready).
pub fn arm<T: OnTimer>(ctx: &Context, delay_ms: i64, data: usize) -> TimerId {
    // SAFETY: checked at load; a live context. The data is a plain number
    // carried in the pointer itself, never dereferenced or freed.
    let id = unsafe {
        api!(RedisModule_CreateTimer)(ctx.ctx, delay_ms, Some(fired::<T>), data as *mut c_void)
    };
    TimerId(id)
}

/// Stops a timer that has not fired (an unknown ID is ignored).
pub fn stop(ctx: &Context, id: TimerId) {
    let mut data: *mut c_void = ptr::null_mut();
    // SAFETY: checked at load; the timer's data is a number, nothing to free.
    unsafe { api!(RedisModule_StopTimer)(ctx.ctx, id.0, &mut data) };
}

extern "C" fn fired<T: OnTimer>(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    T::fire(&Context::new(ctx), data as usize);
}
