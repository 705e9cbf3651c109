//! A second process on a locked high-water file is refused. In a test binary of its own:
//! spawning a process forks this one, and a forked child holds every lock of the parent
//! until it runs the new program, which would make other tests' "drop, then build again on
//! the same file" fail now and then if they ran in the same process.

use atomflake::mark::HighWaterError;
use atomflake::{BuildError, Builder, Layout, ManualClock};
use std::path::Path;
use std::process::Command;

const T0: u64 = 1_700_000_000_000;

fn builder(path: &Path) -> Builder<ManualClock> {
    Builder::with_clock(Layout::TWITTER, ManualClock::new(T0)).high_water_file(path)
}

/// The environment variable that makes [`child_process_tries_the_locked_file`] act.
const CHILD: &str = "ATOMFLAKE_HIGH_WATER_CHILD";

#[test]
fn a_second_process_is_refused() {
    let dir = std::env::temp_dir().join(format!("atomflake-process-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node-1.hw");
    let held = builder(&path).build(1).unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_process_tries_the_locked_file", "--nocapture"])
        .env(CHILD, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "child refused: high-water file {} is in use",
            path.display()
        )),
        "{stdout}"
    );
    drop(held);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Not a test of its own: the second process of [`a_second_process_is_refused`], which
/// runs this test binary again with [`CHILD`] set. Without it, it returns at once.
#[test]
fn child_process_tries_the_locked_file() {
    let Some(path) = std::env::var_os(CHILD) else {
        return;
    };
    let error = builder(Path::new(&path)).build(1).unwrap_err();
    println!("child refused: {error}");
    assert_eq!(
        error,
        BuildError::HighWater(HighWaterError::Locked { path: path.into() })
    );
}
