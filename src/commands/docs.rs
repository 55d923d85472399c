//! What `COMMAND INFO` / `COMMAND DOCS` show for each command: arity, key
//! specs, summary and complexity, set through the command-info API (Valkey,
//! Redis 7.0+). With the arity declared the server itself refuses a wrong
//! argument count, also at MULTI queue time, as it does for native commands;
//! the key specs tell the cluster and ACLs exactly what each key undergoes.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;

use redis_module::commands::{get_redis_key_spec, BeginSearch, FindKeys, KeySpec, KeySpecFlags};
use redis_module::{raw, Context};

/// One key argument: its position and what the command does to it.
pub struct KeyDoc {
    pub position: i32,
    pub flags: KeySpecFlags,
}

pub struct CommandDocs {
    pub name: &'static CStr,
    /// As the server counts it: the command name included; negative means "at least".
    pub arity: c_int,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub keys: &'static [KeyDoc],
    /// E.g. `nondeterministic_output` for a reply that draws or reads the clock.
    pub tips: Option<&'static CStr>,
}

static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
};

/// Attaches `docs` to the already registered commands. Fails the load if the
/// server refuses them: a module whose arity the server does not check would
/// answer differently inside MULTI.
pub fn describe(ctx: &Context, docs: &[CommandDocs]) -> Result<(), String> {
    // SAFETY: the pointers are copied out of statics set once at load.
    let (get_command, set_info) =
        unsafe { (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo) };
    let (Some(get_command), Some(set_info)) = (get_command, set_info) else {
        return Err("this server has no command-info API (Redis 7.0+ or Valkey needed)".into());
    };
    for doc in docs {
        let key_specs = (!doc.keys.is_empty()).then(|| {
            get_redis_key_spec(
                doc.keys
                    .iter()
                    .map(|k| {
                        KeySpec::new(
                            None,
                            // KeySpecFlags is neither Copy nor Clone: rebuild it.
                            KeySpecFlags::from_bits_truncate(k.flags.bits()),
                            BeginSearch::new_index(k.position),
                            FindKeys::new_range(0, 1, 0),
                        )
                    })
                    .collect(),
            )
        });
        let info = raw::RedisModuleCommandInfo {
            version: &INFO_VERSION,
            summary: doc.summary.as_ptr(),
            complexity: doc.complexity.as_ptr(),
            since: c"0.1.0".as_ptr(),
            history: ptr::null_mut(),
            tips: doc.tips.map_or(ptr::null(), CStr::as_ptr),
            arity: doc.arity,
            key_specs: key_specs
                .as_ref()
                .map_or(ptr::null_mut(), |specs| specs.as_ptr().cast_mut()),
            args: ptr::null_mut(),
        };
        // SAFETY: the command was registered by name just before; the info and
        // the key specs (terminated by a zeroed entry) outlive the call, which
        // copies what it keeps.
        let status = unsafe {
            let command = get_command(ctx.ctx, doc.name.as_ptr());
            if command.is_null() {
                return Err(format!(
                    "{doc_name} is not registered",
                    doc_name = doc.name.to_string_lossy()
                ));
            }
            set_info(command, &info)
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!(
                "the server refused the command info of {}",
                doc.name.to_string_lossy()
            ));
        }
    }
    Ok(())
}
