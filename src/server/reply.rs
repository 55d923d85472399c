//! Replies the SDK's `RedisValue` cannot give: a map whose fields keep the
//! order written (its maps are hashed or sorted by key), and arrays of them.

use std::ffi::CStr;
use std::os::raw::c_long;

use redis_module::Context;

/// A map value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field<'a> {
    Integer(i64),
    Double(f64),
    Null,
    /// A bulk string of any bytes (copied by the server).
    Bytes(&'a [u8]),
}

/// Replies with `fields` as a map: RESP3 a map, RESP2 a flat array of
/// field, value, field, value. The handler then returns `NoReply`.
pub fn map(ctx: &Context, fields: &[(&CStr, Field<'_>)]) {
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
                Field::Bytes(b) => {
                    api!(RedisModule_ReplyWithStringBuffer)(ctx.ctx, b.as_ptr().cast(), b.len())
                }
            };
        }
    }
}

/// Starts an array of `len` elements, which the next `len` replies fill.
pub fn array(ctx: &Context, len: usize) {
    let len = c_long::try_from(len).unwrap_or(c_long::MAX);
    // SAFETY: checked at load; a live command context; `len` replies follow.
    unsafe { api!(RedisModule_ReplyWithArray)(ctx.ctx, len) };
}

/// A bulk string of any bytes (copied by the server).
pub fn bytes(ctx: &Context, bytes: &[u8]) {
    // SAFETY: checked at load; a live command context; a live buffer.
    unsafe { api!(RedisModule_ReplyWithStringBuffer)(ctx.ctx, bytes.as_ptr().cast(), bytes.len()) };
}
