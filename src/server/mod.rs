//! Every call into the server's C API, behind small safe wrappers: the rest
//! of the crate is safe Rust, and this folder is the one a reviewer audits
//! for `unsafe`. Each wrapper relies only on what the module API documents:
//! the function pointers are set once at load, a key handle stays valid
//! until closed, a string until freed.

/// Lists each server function the wrappers call through `api!`, once:
/// `missing_api` checks them at load.
macro_rules! for_each_api {
    ($callback:ident) => {
        $callback!(
            RedisModule_OpenKey,
            RedisModule_CloseKey,
            RedisModule_KeyType,
            RedisModule_ValueLength,
            RedisModule_ZsetAdd,
            RedisModule_ZsetRem,
            RedisModule_ZsetScore,
            RedisModule_ZsetFirstInScoreRange,
            RedisModule_ZsetFirstInLexRange,
            RedisModule_ZsetRangeCurrentElement,
            RedisModule_ZsetRangeNext,
            RedisModule_ZsetRangeEndReached,
            RedisModule_ZsetRangeStop,
            RedisModule_ListPush,
            RedisModule_StreamAdd,
            RedisModule_StringDMA,
            RedisModule_StringSet,
            RedisModule_SetAbsExpire,
            RedisModule_DeleteKey,
            RedisModule_FreeString,
            RedisModule_CreateString,
            RedisModule_RetainString,
            RedisModule_StringPtrLen,
            RedisModule_SignalModifiedKey,
            RedisModule_NotifyKeyspaceEvent,
            RedisModule_Replicate,
            RedisModule_IsKeysPositionRequest,
            RedisModule_KeyAtPos,
            RedisModule_GetContextFlags,
            RedisModule_AvoidReplicaTraffic,
            RedisModule_SelectDb,
            RedisModule_GetSelectedDb,
            RedisModule_Milliseconds,
            RedisModule_Log,
            RedisModule_LatencyAddSample,
            RedisModule_CreateTimer,
            RedisModule_StopTimer,
            RedisModule_RegisterStringConfig,
            RedisModule_RegisterNumericConfig,
            RedisModule_LoadConfigs,
            RedisModule_SubscribeToServerEvent,
            RedisModule_GetServerInfo,
            RedisModule_ServerInfoGetFieldC,
            RedisModule_FreeServerInfo,
            RedisModule_RegisterInfoFunc,
            RedisModule_InfoAddSection,
            RedisModule_InfoAddFieldULongLong,
            RedisModule_CreateCommand,
            RedisModule_GetCommand,
            RedisModule_SetCommandInfo,
            RedisModule_SetModuleOptions,
            RedisModule_ReplyWithMap,
            RedisModule_ReplyWithStringBuffer,
            RedisModule_ReplyWithLongLong,
            RedisModule_ReplyWithDouble,
            RedisModule_ReplyWithNull,
            RedisModule_ReplyWithArray,
            RedisModule_HashGet,
            RedisModule_HashSet,
            RedisModule_ScanKey,
            RedisModule_ScanCursorCreate,
            RedisModule_ScanCursorDestroy
        )
    };
}

/// A server function checked at load. The module refuses to load unless
/// `missing_api` is `None`, and the pointers never change after load: that
/// is what makes this infallible.
///
/// Why the `None` arm cannot run: `lib.rs`'s load calls `missing_api` before
/// anything else, and returns (refusing the load) when it names a function.
/// Every caller of `api!` is reached only after that check passed: from the
/// commands, configs, timers, events and INFO section that load registers
/// after it. The one thing load does on the refusing path, logging the
/// reason, goes through `log.rs`, which checks its pointer itself and does
/// not use this macro.
macro_rules! api {
    ($name:ident) => {
        match redis_module::raw::$name {
            Some(f) => f,
            None => unreachable!(concat!(stringify!($name), " is checked at load")),
        }
    };
}

pub mod clock;
pub mod config;
pub mod context;
pub mod events;
pub mod info;
pub mod keys;
pub mod log;
pub mod register;
pub mod reply;
pub mod timer;

/// The first server function the module calls that this server does not
/// provide, if any. Checked first thing at load.
pub fn missing_api() -> Option<&'static str> {
    macro_rules! first_missing {
        ($($name:ident),*) => {{
            // SAFETY: copies a pointer written once at load, before any command.
            $(if unsafe { redis_module::raw::$name }.is_none() {
                return Some(stringify!($name));
            })*
            None
        }};
    }
    for_each_api!(first_missing)
}
