//! Node.js for the tests: the packages of tests/node/package.json (the Valkey
//! client of examples/worker.mjs, the browser driver of tests/web) installed
//! by `npm ci` into target/node, never globally, and the scripts run from
//! there so that `import "iovalkey"` resolves to that install. The rest
//! (Node.js itself, SKIPPED outside CI, failing in CI) is echomq-testkit's.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use echomq_testkit::node::*;
#[allow(unused_imports)] // tests/web reads it
pub use echomq_testkit::target_dir;

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// target/node with the packages installed and the scripts copied in, or why not.
pub fn node_dir() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        install(
            "node",
            &source("tests/node"),
            &[
                (source("examples/worker.mjs"), "worker.mjs"),
                (source("tests/node/browser.mjs"), "browser.mjs"),
            ],
        )
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(String::clone)
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
