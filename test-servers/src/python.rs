//! A Python virtual environment with packages from `PyPI`, for tests that drive atomflake
//! with clients no one here wrote (`requests`, `grpcio`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A virtual environment under `dir` holding `packages` (pip requirement strings), made
/// once and reused while the list is the same; `None`, after [`skip`](crate::skip), when
/// there is no `python3` with `venv` or `PyPI` cannot be reached.
pub fn venv(test: &str, dir: &Path, packages: &[&str]) -> Option<PathBuf> {
    let marker = dir.join("atomflake-packages");
    let wanted = packages.join("\n");
    let python = dir.join("bin/python");
    if python.exists() && std::fs::read_to_string(&marker).is_ok_and(|held| held == wanted) {
        return Some(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(dir)
        .output();
    match made {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            crate::skip(
                test,
                &format!("python3 -m venv failed: {}", String::from_utf8_lossy(&out.stderr)),
            );
            return None;
        }
        Err(error) => {
            crate::skip(test, &format!("no python3: {error}"));
            return None;
        }
    }
    let installed = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .output()
        .expect("the venv's python runs");
    if !installed.status.success() {
        crate::skip(
            test,
            &format!(
                "pip could not install {packages:?}: {}",
                String::from_utf8_lossy(&installed.stderr)
            ),
        );
        return None;
    }
    std::fs::write(&marker, wanted).unwrap();
    Some(python)
}
