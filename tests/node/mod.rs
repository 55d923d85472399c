//! Node.js for the module's tests: the package of tests/node/package.json
//! (iovalkey, the Valkey client of examples/worker.mjs) installed by `npm
//! ci` into target/node, never globally, and the worker run from there so
//! that `import "iovalkey"` resolves to that install. The rest (Node.js
//! itself, SKIPPED outside CI, failing in CI) is echomq-testkit's.

#![allow(dead_code)]

use std::path::Path;

pub use echomq_testkit::node::*;
use echomq_testkit::workspace_root;

/// target/node with the packages installed and the worker copied in, or why not.
pub fn node_dir() -> Result<&'static Path, String> {
    static NODE: Install = Install::new();
    let root = workspace_root();
    NODE.dir(
        "node",
        &root.join("tests/node"),
        &[(root.join("examples/worker.mjs"), "worker.mjs")],
    )
}
