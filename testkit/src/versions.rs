//! A server of at least a given Valkey major version for a test that needs
//! one (Valkey 9's `CLUSTER MIGRATESLOTS`): the one under test
//! (`ECHOMQ_SERVER`) when it is recent enough, else the newest such version
//! cached by `scripts/valkey-matrix.sh` (its `--list` prints
//! `<version> <server path>` lines; the cli lies beside the server). The
//! binaries are returned, not put in the environment: tests run in parallel
//! threads of one process, so they start their servers on them explicitly
//! (`Cluster::start_on`).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::{cli_binary, server_binary, workspace_root};

/// `(major, minor, patch)` of a Valkey server binary, from `--version`
/// (`Valkey server v=9.1.2 sha=...`); None for another server or none.
pub fn valkey_version_of(server: &str) -> Option<(u32, u32, u32)> {
    let out = Command::new(server)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !text.starts_with("Valkey server") {
        return None;
    }
    let v = text.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
    parse_version(v)
}

fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// The versions `scripts/valkey-matrix.sh --list` says are cached, with
/// their server and cli, newest first (those whose binaries exist).
pub fn cached_valkeys() -> Vec<((u32, u32, u32), String, String)> {
    let script = workspace_root().join("scripts/valkey-matrix.sh");
    let Ok(out) = Command::new("bash")
        .arg(&script)
        .arg("--list")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    let mut found: Vec<((u32, u32, u32), String, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let (version, server) = line.trim().split_once(' ')?;
            let server = Path::new(server.trim());
            let cli = server.with_file_name("valkey-cli");
            if !(server.is_file() && cli.is_file()) {
                return None;
            }
            Some((
                parse_version(version)?,
                server.display().to_string(),
                cli.display().to_string(),
            ))
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    found
}

/// `(server, cli)` of a Valkey `major` or newer: the binaries under test
/// when they are, else the newest cached one that is; None when there is
/// none.
pub fn valkey_at_least(major: u32) -> Option<(String, String)> {
    let server = server_binary();
    if valkey_version_of(&server).is_some_and(|(m, ..)| m >= major) {
        return Some((server, cli_binary()));
    }
    cached_valkeys()
        .into_iter()
        .find(|((m, ..), ..)| *m >= major)
        .map(|(_, server, cli)| (server, cli))
}

/// `valkey_at_least(major)` for `test`, which says which binary it runs on
/// when it is not the one under test. None: outside CI the test says
/// `SKIPPED` (on the real stderr) and should return; in CI it panics, since
/// a test that needs the version must not pass without it.
pub fn valkey_at_least_or_skip(major: u32, test: &str) -> Option<(String, String)> {
    use std::io::Write;
    match valkey_at_least(major) {
        Some((server, cli)) => {
            if server != server_binary() {
                let _ = writeln!(
                    std::io::stderr(),
                    "{test}: the server under test ({}) is older than Valkey {major}: \
                     running on the cached {server}",
                    server_binary()
                );
            }
            Some((server, cli))
        }
        None => crate::node::or_skip(
            test,
            Err(format!(
                "needs Valkey {major}+: {} is not, and `scripts/valkey-matrix.sh --list` has \
                 none cached",
                server_binary()
            )),
        ),
    }
}
