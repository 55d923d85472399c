//! Registers the command table at load: each command with its flags and
//! legacy key range, then its arity, key specs and docs through the
//! command-info API (Valkey, Redis 7.0+), then its ACL categories where the
//! server has that API (Valkey; Redis 7.0 has none and still loads us).
//!
//! With the arity declared the server itself refuses a wrong argument count,
//! also at MULTI queue time, as it does for native commands; the key specs
//! tell the cluster and ACLs exactly what each key undergoes.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;
use std::sync::OnceLock;

use redis_module::commands::{get_redis_key_spec, BeginSearch, FindKeys, KeySpec, KeySpecFlags};
use redis_module::{raw, Context, RedisError, RedisResult};

use crate::rules::errors;
use crate::server::keys::Arg;

/// A command handler: the running command's arguments, its reply.
pub type Handler = fn(&Context, &[Arg]) -> RedisResult;

/// Sees each handler's result before it becomes the reply (the module counts
/// its error replies so): handed in by `register`, so this floor names
/// nothing above it.
pub type OnResult = fn(&RedisResult);

/// The hook `register` was given. Set at the first load; a load of the same
/// library after `MODULE UNLOAD` hands in the same function.
static ON_RESULT: OnceLock<OnResult> = OnceLock::new();

/// Where a key argument is.
pub enum KeyAt {
    /// At this argument index (the command name is 0).
    Index(i32),
    /// Right after the first `keyword` (any case) at or past `start_from`:
    /// an optional key such as `DEAD dead`.
    Keyword {
        keyword: &'static str,
        start_from: i32,
    },
}

/// One key argument: where it is and what the command does to it.
pub struct KeyDoc {
    pub at: KeyAt,
    pub flags: KeySpecFlags,
}

/// One row of the command table.
pub struct Command {
    pub name: &'static CStr,
    /// The server's entry point, made from a `Handler` by `entry_point!`.
    pub entry: unsafe extern "C" fn(
        *mut raw::RedisModuleCtx,
        *mut *mut raw::RedisModuleString,
        c_int,
    ) -> c_int,
    pub flags: &'static CStr,
    /// As the server counts it: the command name included; negative means "at least".
    pub arity: c_int,
    pub keys: &'static [KeyDoc],
    pub acl_categories: &'static CStr,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// E.g. `nondeterministic_output` for a reply that draws or reads the clock.
    pub tips: Option<&'static CStr>,
}

/// The server's entry point for a `Handler`: views argv without copying,
/// runs the handler, shows its result to the hook handed to `register`,
/// replies.
macro_rules! entry_point {
    ($handler:path) => {{
        unsafe extern "C" fn entry(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::os::raw::c_int,
        ) -> std::os::raw::c_int {
            let context = redis_module::Context::new(ctx);
            // SAFETY: the server passes the running command's own arguments.
            let args = unsafe { $crate::server::keys::Arg::from_argv(argv, argc) };
            let handler: $crate::server::register::Handler = $handler;
            $crate::server::register::finish(&context, handler(&context, args))
        }
        entry
    }};
}
pub(crate) use entry_point;

/// Shows a handler's result to the hook, then replies with it.
pub fn finish(ctx: &Context, result: RedisResult) -> c_int {
    if let Some(on_result) = ON_RESULT.get() {
        on_result(&result);
    }
    reply(ctx, result)
}

/// Replies with a handler's result. An error text passes through
/// `errors::printable` first: the SDK turns it into a C string by casting
/// each character to a byte, so a character such as U+0100 would become a
/// NUL and panic inside the SDK (aborting the server).
fn reply(ctx: &Context, result: RedisResult) -> c_int {
    let result = result.map_err(|e| match e {
        RedisError::String(text) => RedisError::String(errors::printable(&text)),
        other => other,
    });
    ctx.reply(result) as c_int
}

/// Valkey 9's `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION`: without it
/// the server refuses every `CLUSTER MIGRATESLOTS` while the module is loaded.
/// Bit 5 is unassigned elsewhere: Valkey 8.0's header ends its options at
/// 1 << 3 (next free 1 << 4), 8.1's at 1 << 4 (`SKIP_COMMAND_VALIDATION`, next
/// free 1 << 5), the SDK's Redis 7 header at 1 << 3. The servers store the bits
/// unread, but a later Redis may give bit 5 a meaning of its own, so it is set
/// only where the server is known to have it (`Server::handles_atomic_slot_migration`).
const HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// Sets the module's options, once at load: handlers signal modified keys
/// themselves, and only keys they changed (a promote that moves nothing must
/// not fail a WATCH); and, where `atomic_slot_migration`, the module handles
/// keys arriving through an atomic slot migration before the slot is ours.
pub fn set_module_options(ctx: &Context, atomic_slot_migration: bool) {
    let mut options = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int;
    if atomic_slot_migration {
        options |= HANDLE_ATOMIC_SLOT_MIGRATION;
    }
    // SAFETY: checked at load; a live context at load. The server stores the
    // bits as given (every version here), so one call sets them all.
    unsafe { api!(RedisModule_SetModuleOptions)(ctx.ctx, options) };
}

static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
};

/// Creates every command of `table`, each handler's result shown to
/// `on_result` before the reply. Fails the load if the server refuses any
/// part: a module whose arity the server does not check would answer
/// differently inside MULTI.
pub fn register(ctx: &Context, table: &[Command], on_result: OnResult) -> Result<(), String> {
    ON_RESULT.get_or_init(|| on_result);
    // SAFETY: pointers set once at load; all but the ACL one checked then.
    let (create, get_command, set_info, set_acl) = unsafe {
        (
            api!(RedisModule_CreateCommand),
            api!(RedisModule_GetCommand),
            api!(RedisModule_SetCommandInfo),
            raw::RedisModule_SetCommandACLCategories,
        )
    };
    for command in table {
        let name = command.name.to_string_lossy();
        // The legacy range covers the fixed keys; the key specs below add
        // the optional ones, which is what routing and ACLs then follow.
        let fixed: Vec<i32> = command
            .keys
            .iter()
            .filter_map(|k| match k.at {
                KeyAt::Index(position) => Some(position),
                KeyAt::Keyword { .. } => None,
            })
            .collect();
        let (first_key, last_key, key_step) = match fixed[..] {
            [] => (0, 0, 0),
            [only] => (only, only, 1),
            [first, .., last] => (first, last, 1),
        };
        // SAFETY: static C strings; the entry point matches the server's
        // command signature.
        let created = unsafe {
            create(
                ctx.ctx,
                command.name.as_ptr(),
                Some(command.entry),
                command.flags.as_ptr(),
                first_key,
                last_key,
                key_step,
            )
        };
        if created != raw::REDISMODULE_OK as c_int {
            return Err(format!("the server refused to create {name}"));
        }
        // SAFETY: the command was created by this name just above.
        let handle = unsafe { get_command(ctx.ctx, command.name.as_ptr()) };
        if handle.is_null() {
            return Err(format!("{name} is not registered"));
        }
        let key_specs = (!command.keys.is_empty()).then(|| {
            get_redis_key_spec(
                command
                    .keys
                    .iter()
                    .map(|k| {
                        KeySpec::new(
                            None,
                            // KeySpecFlags is neither Copy nor Clone: rebuild it.
                            KeySpecFlags::from_bits_truncate(k.flags.bits()),
                            match k.at {
                                KeyAt::Index(position) => BeginSearch::new_index(position),
                                KeyAt::Keyword {
                                    keyword,
                                    start_from,
                                } => BeginSearch::new_keyword(keyword.into(), start_from),
                            },
                            FindKeys::new_range(0, 1, 0),
                        )
                    })
                    .collect(),
            )
        });
        let info = raw::RedisModuleCommandInfo {
            version: &INFO_VERSION,
            summary: command.summary.as_ptr(),
            complexity: command.complexity.as_ptr(),
            since: c"0.1.0".as_ptr(),
            history: ptr::null_mut(),
            tips: command.tips.map_or(ptr::null(), CStr::as_ptr),
            arity: command.arity,
            key_specs: key_specs
                .as_ref()
                .map_or(ptr::null_mut(), |specs| specs.as_ptr().cast_mut()),
            args: ptr::null_mut(),
        };
        // SAFETY: the info and the key specs (terminated by a zeroed entry)
        // outlive the call, which copies what it keeps.
        if unsafe { set_info(handle, &info) } != raw::REDISMODULE_OK as c_int {
            return Err(format!("the server refused the command info of {name}"));
        }
        if let Some(set_acl) = set_acl {
            // SAFETY: a live command handle and a static C string.
            if unsafe { set_acl(handle, command.acl_categories.as_ptr()) }
                != raw::REDISMODULE_OK as c_int
            {
                return Err(format!("the server refused the ACL categories of {name}"));
            }
        }
    }
    Ok(())
}
