//! Node.js for the module's tests: the package of tests/node/package.json
//! (iovalkey, the Valkey client of examples/worker.mjs) installed by `npm
//! ci` into target/node, never globally, and the worker run from there so
//! that `import "iovalkey"` resolves to that install. The rest (Node.js
//! itself, SKIPPED outside CI, failing in CI) is echomq-testkit's.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use echomq_testkit::node::*;

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// target/node with the packages installed and the worker copied in, or why not.
pub fn node_dir() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        install(
            "node",
            &source("tests/node"),
            &[(source("examples/worker.mjs"), "worker.mjs")],
        )
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(String::clone)
}
