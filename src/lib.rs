//! echomq: jittered retry scheduling and atomic promotion of due jobs,
//! computed inside Valkey. The command contract is SPEC.md; this file holds
//! the module declaration and the command table only.

mod clock;
mod commands;
mod keys;
mod parse;
mod policy;
mod stats;

use commands::docs::{CommandDocs, KeyDoc};
use commands::{
    delay::echo_delay, init, promote::echo_promote, retry::echo_retry, spread::echo_spread,
};
use redis_module::commands::KeySpecFlags as K;
use redis_module::redis_module;

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
    init: init,
    commands: [
        // name, handler, flags, first key, last key, key step, then ACL
        // categories: none mandatory (a mandatory list makes Redis 7.0, which
        // lacks the API, refuse the module), and the optional ones Valkey applies.
        ["ECHO.RETRY", echo_retry, "write deny-oom fast", 1, 1, 1, "", "write sortedset fast"],
        ["ECHO.PROMOTE", echo_promote, "write", 1, 2, 1, "", "write sortedset list slow"],
        ["ECHO.DELAY", echo_delay, "readonly fast", 0, 0, 0, "", "fast"],
        ["ECHO.SPREAD", echo_spread, "readonly", 1, 1, 1, "", "read sortedset slow"],
    ],
}

/// Arity, key specs and docs of each command, attached at load.
const COMMAND_DOCS: &[CommandDocs] = &[
    CommandDocs {
        name: c"ECHO.RETRY",
        arity: 5,
        summary: c"Adds a job to a schedule at now plus the policy's delay for its attempt count.",
        complexity: c"O(log(N)) with N the number of jobs in the schedule.",
        keys: &[KeyDoc {
            position: 1,
            flags: K::READ_WRITE.union(K::UPDATE),
        }],
        tips: Some(c"nondeterministic_output"),
    },
    CommandDocs {
        name: c"ECHO.PROMOTE",
        arity: -3,
        summary: c"Moves the due jobs of a schedule to a pending list, earliest first.",
        complexity: c"O(M*log(N)) with M the jobs moved and N the jobs in the schedule.",
        keys: &[
            KeyDoc {
                position: 1,
                flags: K::READ_WRITE.union(K::ACCESS).union(K::DELETE),
            },
            KeyDoc {
                position: 2,
                flags: K::READ_WRITE.union(K::INSERT),
            },
        ],
        tips: None,
    },
    CommandDocs {
        name: c"ECHO.DELAY",
        arity: 3,
        summary: c"Computes one delay of a policy for an attempt count, writing nothing.",
        complexity: c"O(1)",
        keys: &[],
        tips: Some(c"nondeterministic_output"),
    },
    CommandDocs {
        name: c"ECHO.SPREAD",
        arity: 5,
        summary: c"Counts a schedule's jobs in equal time buckets.",
        complexity: c"O(B*log(N)) with B the buckets and N the jobs in the schedule.",
        // counts only, never the members: RO without ACCESS, as ZCOUNT
        keys: &[KeyDoc {
            position: 1,
            flags: K::READ_ONLY,
        }],
        tips: None,
    },
];
