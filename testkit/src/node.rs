//! Node.js for the tests, and how a test that needs a tool says it is
//! missing. A suite's Node.js packages (its package.json and
//! package-lock.json) are installed by `npm ci` into a folder of target/,
//! never globally, and its scripts copied beside them so that their imports
//! resolve to that install ([`install`]).
//!
//! Outside CI a missing Node.js, npm or other tool makes the test say SKIPPED
//! with the reason; in CI (`CI=true`) it fails the test instead, since
//! scripts/setup.sh installs them there ([`or_skip`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::target_dir;

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

/// target/`name` with the packages of `package` (a folder with package.json
/// and package-lock.json) installed and each `(source, name)` of `scripts`
/// copied in, or why not. `npm ci` runs only when the lock changed (it wipes
/// node_modules and fetches again); the scripts are copied afresh each run
/// so that a test always runs the files in the repository.
pub fn install(name: &str, package: &Path, scripts: &[(PathBuf, &str)]) -> Result<PathBuf, String> {
    node_is_recent()?;
    let dir = target_dir().join(name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lock = std::fs::read(package.join("package-lock.json")).map_err(|e| e.to_string())?;
    let stamp = dir.join("node_modules/.echomq-lock");
    if std::fs::read(&stamp).ok().as_deref() != Some(&lock[..]) {
        for f in ["package.json", "package-lock.json"] {
            std::fs::copy(package.join(f), dir.join(f)).map_err(|e| format!("copy {f}: {e}"))?;
        }
        npm_ci(&dir)?;
        std::fs::write(&stamp, &lock).map_err(|e| e.to_string())?;
    }
    for (from, to) in scripts {
        std::fs::copy(from, dir.join(to)).map_err(|e| format!("copy {}: {e}", from.display()))?;
    }
    Ok(dir)
}

/// A suite's Node.js install, made once per test binary:
/// `static NODE: Install = Install::new();` then `NODE.dir(...)`.
pub struct Install(OnceLock<Result<PathBuf, String>>);

impl Install {
    pub const fn new() -> Install {
        Install(OnceLock::new())
    }

    /// [`install`]'s folder (or why not), made by the first call.
    pub fn dir(
        &'static self,
        name: &str,
        package: &Path,
        scripts: &[(PathBuf, &str)],
    ) -> Result<&'static Path, String> {
        self.0
            .get_or_init(|| install(name, package, scripts))
            .as_ref()
            .map(PathBuf::as_path)
            .map_err(String::clone)
    }
}

impl Default for Install {
    fn default() -> Install {
        Install::new()
    }
}
