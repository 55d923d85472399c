//! The protocol's scripts and constants (docs/clients.md), from the
//! repository's `protocol/` folder: the one copy the three libraries share.
//!
//! `include_str!` of a path outside the crate, not a build script: nothing
//! needs generating, rustc rebuilds the crate when a file changes (it tracks
//! what it includes), and the crate is a workspace member that is never
//! packaged alone. The constants are parsed by `const fn`s, so a key missing
//! from `constants.json` (or a value of the wrong form) fails the build.

/// `add` with an id given by the caller.
pub(crate) const ADD_WITH_ID: &str = include_str!("../../../protocol/add_with_id.lua");
/// Step 3: a batch of successes.
pub(crate) const SUCCEED: &str = include_str!("../../../protocol/succeed.lua");
/// Steps 4 and 5: one failure.
pub(crate) const FAIL: &str = include_str!("../../../protocol/fail.lua");
/// Step 8: an entry taken but not started, handed back on close.
pub(crate) const HAND_BACK: &str = include_str!("../../../protocol/hand_back.lua");
/// Dead → pending.
pub(crate) const REQUEUE: &str = include_str!("../../../protocol/requeue.lua");
/// Removes the dead jobs older than a cutoff.
pub(crate) const PURGE_DEAD: &str = include_str!("../../../protocol/purge_dead.lua");

const CONSTANTS: &str = include_str!("../../../protocol/constants.json");

/// The consumer group every worker of every language joins (not a job's
/// group, `AddOptions::group`).
pub(crate) const GROUP: &str = string(CONSTANTS, "group");
/// What a grouped job's payload entry starts with, after a NUL byte.
pub(crate) const JOB_GROUP_ENVELOPE: &str = string(CONSTANTS, "job_group_envelope");
/// The longest job group `ECHO.ADD ... GROUP` takes.
pub(crate) const MAX_JOB_GROUP_BYTES: usize = number(CONSTANTS, "max_job_group_bytes") as usize;
/// The largest `delay_ms` (`ECHO.SCHEDULE` takes `0..=10^13`).
pub const MAX_DELAY_MS: u64 = number(CONSTANTS, "max_delay_ms");
/// The longest hold `ECHO.HOLD` takes (a day).
pub(crate) const MAX_HOLD_MS: u64 = number(CONSTANTS, "max_hold_ms");
/// The largest `n` of a group limit's `<n>/s`, `<n>/m`, `<n>/h`
/// (`ECHO.GROUPLIMIT`).
pub(crate) const MAX_GROUP_RATE: u64 = number(CONSTANTS, "max_group_rate");
/// The largest burst `ECHO.GROUPLIMIT` takes.
pub(crate) const MAX_GROUP_BURST: u64 = number(CONSTANTS, "max_group_burst");
/// The most groups one `ECHO.GROUPS` page shows.
pub(crate) const MAX_GROUPS_COUNT: u64 = number(CONSTANTS, "max_groups_count");
/// The longest id `ECHO.REPEAT` takes.
pub(crate) const MAX_REPEAT_ID_BYTES: usize = number(CONSTANTS, "max_repeat_id_bytes") as usize;
/// The shortest `every:<ms>` `ECHO.REPEAT` takes.
pub(crate) const MIN_EVERY_MS: u64 = number(CONSTANTS, "min_every_ms");
/// The longest `every:<ms>`, and the largest jitter.
pub(crate) const MAX_EVERY_MS: u64 = number(CONSTANTS, "max_every_ms");
/// The most shards a queue may have.
pub(crate) const MAX_SHARDS: usize = number(CONSTANTS, "max_shards") as usize;
/// The longest message kept in `{name}:errors`.
pub(crate) const MAX_ERROR_BYTES: usize = number(CONSTANTS, "max_error_bytes") as usize;
/// Jobs per transaction of `add_many`.
pub(crate) const ADD_BATCH: usize = number(CONSTANTS, "add_batch") as usize;
/// Pairs (entry, id) per success script call.
pub(crate) const SUCCESS_BATCH: usize = number(CONSTANTS, "success_batch") as usize;
/// `ECHO.PROMOTE ... LIMIT` of a worker that promotes its queue itself.
pub(crate) const PROMOTE_LIMIT: u64 = number(CONSTANTS, "promote_limit");
/// The worker's defaults.
pub(crate) const DEFAULT_BACKOFF: &str = string(CONSTANTS, "default_backoff");
pub(crate) const DEFAULT_MAX_ATTEMPTS: u64 = number(CONSTANTS, "default_max_attempts");
pub(crate) const DEFAULT_LEASE_MS: u64 = number(CONSTANTS, "default_lease_ms");
pub(crate) const DEFAULT_MAX_DELIVERIES: u64 = number(CONSTANTS, "default_max_deliveries");
pub(crate) const DEFAULT_SHUTDOWN_TIMEOUT_MS: u64 =
    number(CONSTANTS, "default_shutdown_timeout_ms");

const fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Where the value of `"key":` starts in the flat JSON object `json`.
const fn value_at(json: &[u8], key: &str) -> usize {
    let key = key.as_bytes();
    let mut i = 0;
    while i + key.len() + 2 <= json.len() {
        if json[i] == b'"' && json[i + key.len() + 1] == b'"' {
            let mut k = 0;
            while k < key.len() && json[i + 1 + k] == key[k] {
                k += 1;
            }
            if k == key.len() {
                let mut j = i + key.len() + 2;
                while j < json.len() && is_space(json[j]) {
                    j += 1;
                }
                if j < json.len() && json[j] == b':' {
                    j += 1;
                    while j < json.len() && is_space(json[j]) {
                        j += 1;
                    }
                    return j;
                }
            }
        }
        i += 1;
    }
    panic!("a key is missing from protocol/constants.json")
}

/// The non-negative integer value of `key`.
const fn number(json: &str, key: &str) -> u64 {
    let json = json.as_bytes();
    let mut i = value_at(json, key);
    let start = i;
    let mut n: u64 = 0;
    while i < json.len() && json[i].is_ascii_digit() {
        n = match n.checked_mul(10) {
            Some(m) => match m.checked_add((json[i] - b'0') as u64) {
                Some(m) => m,
                None => panic!("a number of protocol/constants.json is too large"),
            },
            None => panic!("a number of protocol/constants.json is too large"),
        };
        i += 1;
    }
    if i == start
        || (i < json.len() && !matches!(json[i], b',' | b'}' | b' ' | b'\n' | b'\r' | b'\t'))
    {
        panic!("a value of protocol/constants.json is not a non-negative integer")
    }
    n
}

/// The string value of `key` (no escapes).
const fn string(json: &'static str, key: &str) -> &'static str {
    let bytes = json.as_bytes();
    let start = value_at(bytes, key);
    if bytes[start] != b'"' {
        panic!("a value of protocol/constants.json is not a string")
    }
    let mut end = start + 1;
    while end < bytes.len() && bytes[end] != b'"' {
        if bytes[end] == b'\\' {
            panic!("a string of protocol/constants.json holds an escape")
        }
        end += 1;
    }
    if end == bytes.len() {
        panic!("a string of protocol/constants.json is not closed")
    }
    let (_, rest) = bytes.split_at(start + 1);
    let (text, _) = rest.split_at(end - start - 1);
    match core::str::from_utf8(text) {
        Ok(text) => text,
        Err(_) => panic!("protocol/constants.json is not UTF-8"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn file(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../protocol")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The library runs the files of protocol/ byte for byte (so their
    /// SHA1s, which the server caches them by, are the files').
    #[test]
    fn the_scripts_are_the_protocol_files() {
        for (name, text) in [
            ("add_with_id.lua", ADD_WITH_ID),
            ("succeed.lua", SUCCEED),
            ("fail.lua", FAIL),
            ("hand_back.lua", HAND_BACK),
            ("requeue.lua", REQUEUE),
            ("purge_dead.lua", PURGE_DEAD),
        ] {
            assert_eq!(
                redis::Script::new(text).get_hash(),
                redis::Script::new(&file(name)).get_hash(),
                "{name}"
            );
        }
    }

    #[test]
    fn the_constants_are_read_from_the_file() {
        let json = file("constants.json");
        for (key, value) in [
            ("group", GROUP.to_string()),
            ("job_group_envelope", JOB_GROUP_ENVELOPE.to_string()),
            ("max_job_group_bytes", MAX_JOB_GROUP_BYTES.to_string()),
            ("max_delay_ms", MAX_DELAY_MS.to_string()),
            ("max_hold_ms", MAX_HOLD_MS.to_string()),
            ("max_error_bytes", MAX_ERROR_BYTES.to_string()),
            ("max_repeat_id_bytes", MAX_REPEAT_ID_BYTES.to_string()),
            ("min_every_ms", MIN_EVERY_MS.to_string()),
            ("max_every_ms", MAX_EVERY_MS.to_string()),
            ("max_shards", MAX_SHARDS.to_string()),
            ("default_backoff", DEFAULT_BACKOFF.to_string()),
            ("default_lease_ms", DEFAULT_LEASE_MS.to_string()),
        ] {
            let quoted = format!("\"{value}\"");
            assert!(
                json.contains(&format!("\"{key}\": {value}"))
                    || json.contains(&format!("\"{key}\": {quoted}")),
                "{key} = {value}"
            );
        }
        assert_eq!(number("{\"a\": 12, \"b\": 3}", "b"), 3);
        assert_eq!(string("{\"ab\": 1, \"b\": \"x y\"}", "b"), "x y");
    }
}
