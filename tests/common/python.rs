//! The python3 the example worker runs with: the system one when it can
//! import `valkey` (or `redis`), else a venv under target/ with `valkey`
//! installed into it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::{python_venv, target_dir};

/// A python3 that can import `valkey` (or `redis`): the system one, else a
/// venv under target/ with `valkey` installed into it. Err says why not, and
/// the Python tests then pass after saying they were skipped.
pub fn python() -> Result<&'static Path, &'static str> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON
        .get_or_init(find_python)
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(String::as_str)
}

fn imports_client(python: &Path) -> bool {
    Command::new(python)
        .args([
            "-c",
            "import importlib.util, sys; \
             sys.exit(0 if importlib.util.find_spec('valkey') or importlib.util.find_spec('redis') else 1)",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn find_python() -> Result<PathBuf, String> {
    // ECHOMQ_PYTHON names another interpreter (its venv goes to target/ too).
    let system = PathBuf::from(std::env::var("ECHOMQ_PYTHON").unwrap_or_else(|_| "python3".into()));
    match Command::new(&system).arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(_) | Err(_) => return Err(format!("{} is not installed", system.display())),
    }
    if imports_client(&system) {
        return Ok(system);
    }
    python_venv(
        &system,
        &target_dir().join("pyenv"),
        "valkey",
        imports_client,
    )
}
