//! Replies the SDK's `RedisValue` cannot give: a map whose fields keep the
//! order written (its maps are hashed or sorted by key).

use std::ffi::CStr;
use std::os::raw::c_long;

use redis_module::Context;

/// A map value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field {
    Integer(i64),
    Double(f64),
    Null,
}

/// Replies with `fields` as a map: RESP3 a map, RESP2 a flat array of
/// field, value, field, value. The handler then returns `NoReply`.
pub fn map(ctx: &Context, fields: &[(&CStr, Field)]) {
    let len = c_long::try_from(fields.len()).unwrap_or(c_long::MAX);
    // SAFETY: checked at load; a live command context; `len` pairs follow.
    unsafe { api!(RedisModule_ReplyWithMap)(ctx.ctx, len) };
    for (name, value) in fields {
        let name = name.to_bytes();
        // SAFETY: as above; the name's bytes are copied by the server.
        unsafe {
            api!(RedisModule_ReplyWithStringBuffer)(ctx.ctx, name.as_ptr().cast(), name.len());
            match *value {
                Field::Integer(n) => api!(RedisModule_ReplyWithLongLong)(ctx.ctx, n),
                Field::Double(d) => api!(RedisModule_ReplyWithDouble)(ctx.ctx, d),
                Field::Null => api!(RedisModule_ReplyWithNull)(ctx.ctx),
            };
        }
    }
}
