//! echomq: jittered retry scheduling and atomic promotion of due jobs,
//! computed inside Valkey. This file holds the module declaration, the
//! command table and the load. The layers, each importing only those below
//! it: `rules/` (pure), `server/` (every call into the server's C API, the
//! only unsafe code), `engine/` (the module's state and moves), `commands/`
//! (one file per command).

mod commands;
mod engine;
mod rules;
mod server;

use commands::{delay, hold, limits as limits_command, promote, queues, retry, spread};
use engine::{eviction, imports, release, stats, ticker};
use redis_module::commands::KeySpecFlags as K;
use redis_module::{redis_module, Context, RedisString, Status};
use rules::versions;
use server::register::{self, Command, KeyAt, KeyDoc};
use server::{config, events, info, log};

// Unit tests run outside a server, where the server's allocator does not
// exist. A library built with cfg(test) is never loaded into a server.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;
#[cfg(test)]
const ALLOCATOR: Allocator = std::alloc::System;

redis_module! {
    name: "echomq",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [],
    // init registers COMMANDS: one table for each command's flags, keys,
    // arity, docs and ACL categories, and an entry point that reads the
    // arguments in place.
    init: init,
    deinit: deinit,
}

/// Called once when the module loads: registers the commands, the INFO
/// section, the eviction guard and the auto-promote configs (which may arm
/// the timer). A failure is logged and refuses the load.
fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    match load(ctx) {
        Ok(()) => Status::Ok,
        Err(why) => {
            log::warning(ctx, &format!("echomq: {why}"));
            Status::Err
        }
    }
}

/// Called at `MODULE UNLOAD` (which the server refuses while the timer is
/// armed): frees every table the module keeps. They were allocated with the
/// server's allocator, which would otherwise count them in used memory for
/// as long as the server runs.
fn deinit(_ctx: &Context) -> Status {
    release::reset();
    ticker::reset();
    eviction::release();
    config::release_all();
    Status::Ok
}

fn load(ctx: &Context) -> Result<(), String> {
    if let Some(name) = server::missing_api() {
        return Err(format!("this server lacks {name}, which echomq needs"));
    }
    // Atomic slot migration where the server has it (Valkey 9+): declared,
    // and its event followed so the timer never acts on a slot it imports.
    let server = versions::classify(
        events::server_info_field(ctx, c"server", c"valkey_version").as_deref(),
        events::server_info_field(ctx, c"server", c"redis_version").as_deref(),
    );
    let atomic_slot_migration = server.handles_atomic_slot_migration();
    register::set_module_options(ctx, atomic_slot_migration);
    imports::reset_importing();
    if atomic_slot_migration {
        events::on_slot_migration::<imports::MigrationWatch>(ctx)?;
    }
    log::notice(
        ctx,
        &format!(
            "echomq: loaded into {server}; atomic slot migration {}",
            if atomic_slot_migration {
                "handled"
            } else {
                "not available on this server"
            }
        ),
    );
    stats::reset();
    info::register::<stats::Info>(ctx)?;
    register::register(ctx, COMMANDS, stats::count_result)?;
    eviction::init(ctx)?;
    ticker::register(ctx)?;
    release::register(ctx)?;
    // The values of valkey.conf (or MODULE LOADEX ... CONFIG); a refused
    // one fails the load, as the server expects.
    if !config::load(ctx) {
        return Err(match config::take_last_refusal() {
            Some(refusal) => format!(
                "echomq.{} {} refused at load: {}",
                refusal.name,
                log::quote(&refusal.value),
                refusal.why
            ),
            None => "a configured echomq.* value was refused at load".into(),
        });
    }
    ticker::start(ctx);
    Ok(())
}

/// The commands. ACL categories apply where the server has the API (Valkey).
const COMMANDS: &[Command] = &[
    Command {
        name: c"ECHO.RETRY",
        entry: entry_point!(retry::echo_retry),
        // getkeys-api: cluster routing learns of the optional dead key from
        // the command itself (it reads only the fixed key range otherwise)
        flags: c"write deny-oom fast getkeys-api",
        arity: -5,
        keys: &[
            KeyDoc {
                at: KeyAt::Index(1),
                // UPDATE also covers dead-lettering's removal: the server
                // allows one of INSERT, DELETE and UPDATE
                flags: K::READ_WRITE.union(K::UPDATE),
            },
            KeyDoc {
                // options start after `attempts`, so a job or policy spelled
                // DEAD is never taken for the keyword
                at: KeyAt::Keyword {
                    keyword: "DEAD",
                    start_from: 5,
                },
                flags: K::READ_WRITE.union(K::UPDATE),
            },
        ],
        acl_categories: c"write sortedset fast",
        summary: c"Adds a job to a schedule at now plus the policy's delay for its attempt count, or dead-letters it after its last attempt.",
        complexity: c"O(log(N)) with N the number of jobs in the schedule (and the dead set).",
        tips: Some(c"nondeterministic_output"),
    },
    Command {
        name: c"ECHO.PROMOTE",
        entry: entry_point!(promote::echo_promote),
        // not deny-oom: moving a job frees about what it uses
        flags: c"write",
        arity: -3,
        keys: &[
            KeyDoc {
                at: KeyAt::Index(1),
                flags: K::READ_WRITE.union(K::ACCESS).union(K::DELETE),
            },
            KeyDoc {
                at: KeyAt::Index(2),
                flags: K::READ_WRITE.union(K::INSERT),
            },
        ],
        acl_categories: c"write sortedset list stream slow",
        summary: c"Moves the due jobs of a schedule to a pending list or stream, earliest first.",
        complexity: c"O(M*log(N)) with M the jobs moved and N the jobs in the schedule.",
        tips: None,
    },
    Command {
        name: c"ECHO.DELAY",
        entry: entry_point!(delay::echo_delay),
        flags: c"readonly fast",
        arity: 3,
        keys: &[],
        acl_categories: c"fast",
        summary: c"Computes one delay of a policy for an attempt count, writing nothing.",
        complexity: c"O(1)",
        tips: Some(c"nondeterministic_output"),
    },
    Command {
        name: c"ECHO.SPREAD",
        entry: entry_point!(spread::echo_spread),
        flags: c"readonly",
        arity: 5,
        // counts only, never the members: RO without ACCESS, as ZCOUNT
        keys: &[KeyDoc {
            at: KeyAt::Index(1),
            flags: K::READ_ONLY,
        }],
        acl_categories: c"read sortedset slow",
        summary: c"Counts a schedule's jobs in equal time buckets.",
        complexity: c"O(B*log(N)) with B the buckets and N the jobs in the schedule.",
        tips: None,
    },
    Command {
        name: c"ECHO.QUEUES",
        entry: entry_point!(queues::echo_queues),
        flags: c"readonly fast",
        arity: 1,
        keys: &[],
        acl_categories: c"read fast",
        summary: c"Lists the schedule and pending pairs the server promotes itself (echomq.auto-promote).",
        complexity: c"O(N) with N the configured pairs.",
        tips: None,
    },
    Command {
        name: c"ECHO.SCHEDULE",
        entry: entry_point!(retry::echo_schedule),
        flags: c"write deny-oom fast",
        arity: -4,
        keys: &[KeyDoc {
            at: KeyAt::Index(1),
            flags: K::READ_WRITE.union(K::UPDATE),
        }],
        acl_categories: c"write sortedset fast",
        summary: c"Adds a job to a schedule at now plus a delay: a run that is not a failure.",
        complexity: c"O(log(N)) with N the number of jobs in the schedule.",
        tips: None,
    },
    Command {
        name: c"ECHO.HOLD",
        entry: entry_point!(hold::echo_hold),
        // write: routed to the owner and refused by a replica, though it
        // writes no key; not deny-oom, it frees the dependency, not memory
        flags: c"write fast",
        arity: 3,
        keys: &[KeyDoc {
            at: KeyAt::Index(1),
            // changes how the schedule is released, not its members
            flags: K::READ_WRITE.union(K::UPDATE),
        }],
        acl_categories: c"write sortedset fast",
        summary: c"Releases nothing from a schedule for a time: a dependency's Retry-After, for every worker.",
        complexity: c"O(log(N)) with N the number of held schedules.",
        tips: None,
    },
    Command {
        name: c"ECHO.LIMITS",
        entry: entry_point!(limits_command::echo_limits),
        flags: c"readonly fast",
        arity: 2,
        keys: &[KeyDoc {
            at: KeyAt::Index(1),
            flags: K::READ_ONLY,
        }],
        acl_categories: c"read sortedset fast",
        summary: c"The release limit of a schedule: rates, burst, what it allows now, its hold and counts.",
        complexity: c"O(log(N)) with N the number of limited and held schedules.",
        tips: Some(c"nondeterministic_output"),
    },
];
