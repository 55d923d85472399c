//! Node.js and a headless Chromium for the page tests: the package of
//! web/tests/node/package.json (playwright-core, the browser driver of
//! web/tests/node/browser.mjs) installed by `npm ci` into target/web-node,
//! never globally, and the driver run from there. The rest (Node.js itself,
//! SKIPPED outside CI, failing in CI) is echomq-testkit's.

use std::path::{Path, PathBuf};

pub use echomq_testkit::node::*;
pub use echomq_testkit::target_dir;

/// target/web-node with the packages installed and the driver copied in, or why not.
pub fn node_dir() -> Result<&'static Path, String> {
    static NODE: Install = Install::new();
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node");
    NODE.dir(
        "web-node",
        &tests,
        &[(tests.join("browser.mjs"), "browser.mjs")],
    )
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
