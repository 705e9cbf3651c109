//! A process's wall clock, stepped by a test: a small preloaded library of the tests' own
//! (`clock/stepped_clock.c`, built here with the C compiler on first use), which moves
//! every reading of the wall clock by the word in a file that [`step_clock`] rewrites.
//!
//! Not libfaketime's `FAKETIME_NO_CACHE`: that opens its file with `fopen` inside every
//! clock reading, and a PostgreSQL backend reads the clock in its `SIGALRM` handler, so a
//! signal that lands inside an `fopen` deadlocks the backend on glibc's stream-list lock.
//! A reading here makes the clock's system call and one load from a mapped file, nothing
//! else. libfaketime stays for fixed offsets given in its environment (`FAKETIME=-3s`),
//! which read no file.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The library's source.
const SOURCE: &str = include_str!("clock/stepped_clock.c");

/// The environment variable naming a stepped process's clock file.
const FILE_VARIABLE: &str = "ATOMFLAKE_STEPPED_CLOCK";

/// The built library, or why it could not be built (no C compiler, say).
pub fn library() -> Result<&'static Path, &'static str> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(build)
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(String::as_str)
}

/// Builds the library into the temporary directory, named by its source's hash (one copy
/// for every test process, each built under a name of its own and renamed into place), and
/// readable by every user (a server runs as `postgres`).
fn build() -> Result<PathBuf, String> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    SOURCE.hash(&mut hasher);
    let dir = std::env::temp_dir();
    let library = dir.join(format!("atomflake-stepped-clock-{:016x}.so", hasher.finish()));
    if library.exists() {
        return Ok(library);
    }
    let source = dir.join(format!("atomflake-stepped-clock-{}.c", std::process::id()));
    let building = source.with_extension("so");
    std::fs::write(&source, SOURCE).map_err(|error| format!("{}: {error}", source.display()))?;
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&building)
        .arg(&source)
        .output();
    let _ = std::fs::remove_file(&source);
    match built {
        Ok(output) if output.status.success() => {
            std::fs::rename(&building, &library)
                .map_err(|error| format!("{}: {error}", library.display()))?;
            Ok(library)
        }
        Ok(output) => Err(format!(
            "cc could not build the stepped clock: {}",
            String::from_utf8_lossy(&output.stderr)
        )),
        Err(error) => Err(format!("no C compiler (cc) to build the stepped clock: {error}")),
    }
}

/// The environment that runs a process on the clock in `file` (made at the real time if
/// it does not exist yet).
///
/// # Panics
///
/// When the library cannot be built; check [`library`] first.
pub fn environment(file: &Path) -> [(&'static str, String); 2] {
    if !file.exists() {
        step_clock(file, "+0");
    }
    let library = library().unwrap_or_else(|why| panic!("{why}"));
    [
        ("LD_PRELOAD", library.display().to_string()),
        (FILE_VARIABLE, file.display().to_string()),
    ]
}

/// Steps the clock of the processes running on `file` to `clock`: `+N` or `-N` seconds from
/// the real time (`+0` is the real time), or a UTC time `YYYY-MM-DD HH:MM:SS` at which the
/// clock stands still. One 8-byte write in place: a process sees it at its next reading.
///
/// # Panics
///
/// On any other text, or when the file cannot be written.
pub fn step_clock(file: &Path, clock: &str) {
    let word = word(clock).unwrap_or_else(|| panic!("not a stepped clock: {clock:?}"));
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(file)
        .and_then(|opened| opened.write_all_at(&word.to_ne_bytes(), 0));
    if let Err(error) = opened {
        panic!("{}: {error}", file.display());
    }
}

/// A clock file of a test's own for [`step_clock`], in the temporary directory
/// (`atomflake-faketime-NAME-PID`), written `+0` (the real time) and removed when dropped,
/// also when the test fails. It derefs to its path.
#[derive(Debug)]
pub struct ClockFile(PathBuf);

impl ClockFile {
    /// The file for `name` (a test's), at the real time.
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    pub fn new(name: &str) -> ClockFile {
        let path = std::env::temp_dir().join(format!("atomflake-faketime-{name}-{}", std::process::id()));
        step_clock(&path, "+0");
        ClockFile(path)
    }
}

impl std::ops::Deref for ClockFile {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ClockFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The file's word for `clock` (see `clock/stepped_clock.c`): `(value << 1) | stopped`.
fn word(clock: &str) -> Option<i64> {
    if let Some(seconds) = clock.strip_suffix('s').unwrap_or(clock).strip_prefix(['+', '-']) {
        let seconds: i64 = seconds.parse().ok()?;
        let offset = if clock.starts_with('-') { -seconds } else { seconds };
        return Some(offset.checked_mul(1_000_000_000)? << 1);
    }
    let (date, time) = clock.split_once(' ')?;
    let numbers = |text: &str, separator| -> Option<Vec<i64>> {
        text.split(separator).map(|part| part.parse().ok()).collect()
    };
    let (date, time) = (numbers(date, '-')?, numbers(time, ':')?);
    let ([year, month, day], [hour, minute, second]) = (date.as_slice(), time.as_slice()) else {
        return None;
    };
    let seconds = days_from_civil(*year, *month, *day) * 86_400 + hour * 3_600 + minute * 60 + second;
    Some((seconds * 1_000_000_000) << 1 | 1)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = of_era * 365 + of_era / 4 - of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    /// The real time, in ms since 1970.
    fn real_ms() -> i64 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970");
        i64::try_from(now.as_millis()).expect("ms fit an i64")
    }

    /// `date +%s` of a process on the clock in `file`.
    fn date_seconds(file: &Path) -> i64 {
        let output = Command::new("date")
            .arg("+%s")
            .envs(environment(file))
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap().trim().parse().unwrap()
    }

    #[test]
    fn a_clock_file_is_removed_when_dropped_also_by_a_failing_test() {
        let file = ClockFile::new("removed");
        let path = file.to_path_buf();
        assert_eq!(std::fs::read(&path).unwrap(), 0_i64.to_ne_bytes(), "written +0");
        let failed = std::panic::catch_unwind(move || {
            step_clock(&file, "+5");
            panic!("a failing test");
        });
        assert!(failed.is_err());
        assert!(!path.exists(), "{} is left", path.display());
    }

    #[test]
    fn a_process_reads_the_clock_as_stepped() {
        let test = "a_process_reads_the_clock_as_stepped";
        if let Err(why) = library() {
            crate::skip(test, why);
            return;
        }
        let file = ClockFile::new(test);
        for (clock, expected) in [("-20", -20), ("+3600s", 3_600), ("+0", 0)] {
            step_clock(&file, clock);
            let before = real_ms() / 1000;
            let read = date_seconds(&file);
            let after = real_ms() / 1000;
            assert!(
                (before + expected..=after + expected).contains(&read),
                "{clock}: {read}"
            );
        }
        step_clock(&file, "2040-01-01 00:00:00");
        assert_eq!(date_seconds(&file), 2_208_988_800);
    }

    #[test]
    fn the_words_of_offsets_and_stopped_times() {
        assert_eq!(word("+0"), Some(0));
        assert_eq!(word("-3s"), Some(-6_000_000_000));
        assert_eq!(word("+2"), Some(4_000_000_000));
        assert_eq!(word("1970-01-01 00:00:01"), Some(2_000_000_001));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(word("soon"), None);
        assert_eq!(word("+x"), None);
    }
}
