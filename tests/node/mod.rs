//! Node.js for the tests: the packages of tests/node/package.json (the Valkey
//! client of examples/worker.mjs, the browser driver of tests/web) installed
//! by `npm ci` into target/node, never globally, and the scripts run from
//! there so that `import "iovalkey"` resolves to that install.
//!
//! Outside CI a missing Node.js, npm or browser makes the test say SKIPPED
//! with the reason; in CI (`CI=true`) it fails the test instead, since
//! scripts/setup.sh installs them there.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Says so on the real stderr: libtest captures only the print macros.
pub fn announce(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// `Some(x)` from `what`, or None after reporting the test as SKIPPED; in CI
/// a missing prerequisite fails the test.
pub fn or_skip<T>(test: &str, what: Result<T, String>) -> Option<T> {
    match what {
        Ok(x) => Some(x),
        Err(why) if in_ci() => panic!("{test}: {why} (CI=true: scripts/setup.sh installs it)"),
        Err(why) => {
            announce(&format!("SKIPPED {test}: {why}"));
            None
        }
    }
}

/// The target directory this test binary was built into (target/<profile>/deps/..).
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// target/node with the packages installed and the scripts copied in, or why not.
pub fn node_dir() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(install)
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(String::clone)
}

/// The Node.js binary: `ECHOMQ_NODE`, or `node` on the PATH.
pub fn node() -> PathBuf {
    std::env::var_os("ECHOMQ_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from)
}

/// Ok when `node()` is Node.js 18 or later, else why not.
pub fn node_is_recent() -> Result<(), String> {
    let version = Command::new(node())
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .ok_or_else(|| format!("{} (Node.js) is not installed", node().display()))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 18 {
        return Err(format!("Node.js {version} is too old (18 or later needed)"));
    }
    Ok(())
}

/// `npm ci` in `dir`: the packages of its package-lock.json, exactly.
pub fn npm_ci(dir: &Path) -> Result<(), String> {
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("npm is not installed ({e})"))?;
    if !out.status.success() {
        return Err(format!(
            "`npm ci` in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

fn install() -> Result<PathBuf, String> {
    node_is_recent()?;
    let dir = target_dir().join("node");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lock = std::fs::read(source("tests/node/package-lock.json")).map_err(|e| e.to_string())?;
    // npm ci only when the lock changed: it wipes node_modules and refetches.
    let stamp = dir.join("node_modules/.echomq-lock");
    if std::fs::read(&stamp).ok().as_deref() != Some(&lock[..]) {
        for f in ["package.json", "package-lock.json"] {
            std::fs::copy(source(&format!("tests/node/{f}")), dir.join(f))
                .map_err(|e| format!("copy {f}: {e}"))?;
        }
        npm_ci(&dir)?;
        std::fs::write(&stamp, &lock).map_err(|e| e.to_string())?;
    }
    // Copied afresh each run so the test always runs the files in the repository.
    for (from, to) in [
        ("examples/worker.mjs", "worker.mjs"),
        ("tests/node/browser.mjs", "browser.mjs"),
    ] {
        std::fs::copy(source(from), dir.join(to)).map_err(|e| format!("copy {from}: {e}"))?;
    }
    Ok(dir)
}

/// Debian's headless Chromium (`chromium-headless-shell`), or `ECHOMQ_CHROMIUM`.
pub fn chromium() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("ECHOMQ_CHROMIUM") {
        let path = PathBuf::from(path);
        return if path.exists() {
            Ok(path)
        } else {
            Err(format!("ECHOMQ_CHROMIUM={} does not exist", path.display()))
        };
    }
    // The real binary rather than /usr/bin's wrapper script, so killing the
    // process we started kills the browser itself.
    [
        "/usr/lib/chromium/chromium-headless-shell",
        "/usr/lib/chromium/chromium",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .ok_or_else(|| {
        "no headless Chromium (apt-get install chromium-headless-shell, or set ECHOMQ_CHROMIUM)"
            .into()
    })
}
