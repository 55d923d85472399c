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

use commands::{
    add, delay, grouplimit, hold, limits, promote, queues, repeat, repeats, retry, schedule,
    spread, unrepeat,
};
use engine::{eviction, groups, imports, release, stats, ticker};
use redis_module::{redis_module, Context, RedisString, Status};
use rules::versions;
use server::register::{self, Command};
use server::{config, context, events, info, keys, log};

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
    // init registers COMMANDS: one row per command (its flags, keys, arity,
    // docs and ACL categories, beside its handler), and an entry point that
    // reads the arguments in place.
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
    groups::reset();
    ticker::reset();
    eviction::release();
    keys::release();
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
    keys::init();
    context::init(ctx);
    info::register::<stats::Info>(ctx)?;
    register::register(ctx, COMMANDS, stats::count_result)?;
    eviction::init(ctx)?;
    ticker::register(ctx)?;
    release::register(ctx)?;
    groups::register(ctx)?;
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

/// The commands, each row beside its handler in `commands/`. ACL categories
/// apply where the server has the API (Valkey).
const COMMANDS: &[Command] = &[
    retry::COMMAND,
    promote::COMMAND,
    delay::COMMAND,
    spread::COMMAND,
    queues::COMMAND,
    schedule::COMMAND,
    hold::COMMAND,
    limits::COMMAND,
    add::COMMAND,
    grouplimit::COMMAND,
    // `commands::groups`: ECHO.GROUPS (the name `groups` is the engine's)
    commands::groups::COMMAND,
    repeat::COMMAND,
    unrepeat::COMMAND,
    repeats::COMMAND,
];
