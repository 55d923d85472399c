//! Module configs (`CONFIG SET/GET <module>.<name>`), typed: a config is a
//! type with `get` and `set`, and the server's C callbacks are generated
//! for it here.

use std::any::TypeId;
use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int, c_longlong};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};
use redis_module::Context;

/// A string config. `set` refuses a value with the reason CONFIG SET gives
/// (the old value is then kept).
pub trait StringConfig: 'static {
    fn get() -> Vec<u8>;
    fn set(value: &[u8]) -> Result<(), String>;
}

/// An integer config; the server checks the declared range before `set`.
pub trait NumericConfig {
    fn get() -> i64;
    fn set(value: i64) -> Result<(), &'static str>;
}

/// An integer config kept in a field of a state behind `$state()`: the
/// server checks the declared range before `set`, the clamp restates it.
macro_rules! numeric_config {
    ($config:ident, $state:path, $field:ident, $min:expr, $max:expr) => {
        struct $config;

        impl $crate::server::config::NumericConfig for $config {
            fn get() -> i64 {
                $state().$field
            }

            fn set(value: i64) -> Result<(), &'static str> {
                $state().$field = value.clamp($min, $max);
                Ok(())
            }
        }
    };
}
pub(crate) use numeric_config;

/// Runs once after a CONFIG SET of any of the module's configs (and after
/// the values are loaded at start-up).
pub trait ApplyConfigs {
    fn apply(ctx: &Context);
}

/// A server string owned by the module: what a string config's `get` hands
/// the server, which copies it. Kept until the next `get` of that config.
struct Owned(*mut RedisModuleString);

// SAFETY: configs run on the main thread only; the static needs Send to exist.
unsafe impl Send for Owned {}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: made with a null context by CreateString, freed once.
        unsafe { api!(RedisModule_FreeString)(ptr::null_mut(), self.0) };
    }
}

/// The string each string config last handed out.
static HANDED_OUT: Mutex<Vec<(TypeId, Owned)>> = Mutex::new(Vec::new());

/// The last value a string config refused: its name, the value, and why.
pub struct Refusal {
    pub name: String,
    pub value: Vec<u8>,
    pub why: String,
}

static LAST_REFUSAL: Mutex<Option<Refusal>> = Mutex::new(None);

/// Whether `load` is running: only a refusal at load is kept (the load's
/// error names it); a CONFIG SET's refusal is the client's reply and nothing
/// more, so a refused value of any size is freed with the call.
static LOADING: AtomicBool = AtomicBool::new(false);

/// The last refusal since load: what `load` failing was about.
pub fn take_last_refusal() -> Option<Refusal> {
    LAST_REFUSAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
}

fn checked(status: c_int, name: &CStr) -> Result<(), String> {
    if status == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(format!(
            "the server refused the config {}",
            name.to_string_lossy()
        ))
    }
}

pub fn register_string<C: StringConfig, A: ApplyConfigs>(
    ctx: &Context,
    name: &'static CStr,
    default: &'static CStr,
) -> Result<(), String> {
    // A reload of the module starts without strings of a former load.
    HANDED_OUT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|(id, _)| *id != TypeId::of::<C>());
    // SAFETY: checked at load; static name and default; the callbacks match
    // the API's types.
    let status = unsafe {
        api!(RedisModule_RegisterStringConfig)(
            ctx.ctx,
            name.as_ptr(),
            default.as_ptr(),
            raw::REDISMODULE_CONFIG_DEFAULT,
            Some(get_string::<C>),
            Some(set_string::<C>),
            Some(apply::<A>),
            ptr::null_mut(),
        )
    };
    checked(status, name)
}

pub fn register_numeric<C: NumericConfig, A: ApplyConfigs>(
    ctx: &Context,
    name: &'static CStr,
    default: i64,
    min: i64,
    max: i64,
) -> Result<(), String> {
    // SAFETY: as in register_string.
    let status = unsafe {
        api!(RedisModule_RegisterNumericConfig)(
            ctx.ctx,
            name.as_ptr(),
            default,
            raw::REDISMODULE_CONFIG_DEFAULT,
            min,
            max,
            Some(get_numeric::<C>),
            Some(set_numeric::<C>),
            Some(apply::<A>),
            ptr::null_mut(),
        )
    };
    checked(status, name)
}

/// Loads the registered configs' values (valkey.conf, `MODULE LOADEX ...
/// CONFIG`); fails when a `set` refused one, and the load must then fail.
pub fn load(ctx: &Context) -> bool {
    LAST_REFUSAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    LOADING.store(true, Relaxed);
    // SAFETY: checked at load; a live context.
    let loaded = unsafe { api!(RedisModule_LoadConfigs)(ctx.ctx) == raw::REDISMODULE_OK as c_int };
    LOADING.store(false, Relaxed);
    loaded
}

/// Frees what the configs keep (the strings last handed to the server, a
/// refusal): at unload, when the server's allocator would otherwise keep
/// them for good.
pub fn release_all() {
    *HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner) = Vec::new();
    LAST_REFUSAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
}

fn refuse(err: *mut *mut RedisModuleString, why: &str) -> c_int {
    if !err.is_null() {
        // SAFETY: the server frees the error string it is handed.
        unsafe {
            *err = api!(RedisModule_CreateString)(ptr::null_mut(), why.as_ptr().cast(), why.len())
        };
    }
    raw::REDISMODULE_ERR as c_int
}

extern "C" fn get_string<C: StringConfig>(
    _name: *const c_char,
    _privdata: *mut c_void,
) -> *mut RedisModuleString {
    let value = C::get();
    // SAFETY: a copy of the bytes, owned by the module (null context).
    let made = Owned(unsafe {
        api!(RedisModule_CreateString)(ptr::null_mut(), value.as_ptr().cast(), value.len())
    });
    let handed = made.0;
    let mut all = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    match all.iter_mut().find(|(id, _)| *id == TypeId::of::<C>()) {
        // The one handed out before has been copied by the server: freed here.
        Some((_, slot)) => *slot = made,
        None => all.push((TypeId::of::<C>(), made)),
    }
    handed
}

extern "C" fn set_string<C: StringConfig>(
    name: *const c_char,
    value: *mut RedisModuleString,
    _privdata: *mut c_void,
    err: *mut *mut RedisModuleString,
) -> c_int {
    let mut len = 0usize;
    // SAFETY: a live string the server passes for this call.
    let bytes = unsafe {
        let p = api!(RedisModule_StringPtrLen)(value, &mut len);
        if p.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        }
    };
    match C::set(bytes) {
        Ok(()) => raw::REDISMODULE_OK as c_int,
        Err(why) => {
            let name = if name.is_null() {
                String::new()
            } else {
                // SAFETY: the server passes the config's name, a C string.
                unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned()
            };
            let status = refuse(err, &why);
            if !LOADING.load(Relaxed) {
                return status;
            }
            *LAST_REFUSAL.lock().unwrap_or_else(PoisonError::into_inner) = Some(Refusal {
                name,
                value: bytes.to_vec(),
                why,
            });
            status
        }
    }
}

extern "C" fn get_numeric<C: NumericConfig>(
    _name: *const c_char,
    _privdata: *mut c_void,
) -> c_longlong {
    C::get()
}

extern "C" fn set_numeric<C: NumericConfig>(
    _name: *const c_char,
    value: c_longlong,
    _privdata: *mut c_void,
    err: *mut *mut RedisModuleString,
) -> c_int {
    match C::set(value) {
        Ok(()) => raw::REDISMODULE_OK as c_int,
        Err(why) => refuse(err, why),
    }
}

extern "C" fn apply<A: ApplyConfigs>(
    ctx: *mut RedisModuleCtx,
    _privdata: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    A::apply(&Context::new(ctx));
    raw::REDISMODULE_OK as c_int
}
