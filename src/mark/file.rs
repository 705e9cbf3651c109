//! Restart safety: a high-water mark of minted time, persisted in a file.
//!
//! A generator built with [`Builder::high_water_file`](crate::Builder::high_water_file)
//! never mints an ID whose tick starts at or after the mark in its file without first
//! moving the mark past it, durably. A restarted process reads the mark and starts minting
//! at it, so it cannot mint an ID its predecessor minted, whatever its clock says.
//!
//! The file is one [`MarkStore`]: when and how far the mark moves is decided by the
//! [keeper](crate::generator::keeper), which writes it from a keeper thread, once per second
//! at most.
//!
//! # Files
//!
//! For a mark at `PATH`:
//!
//! - `PATH` holds the mark, as three lines of text: `atomflake high-water 1`,
//!   `unix_ms <mark>`, `check <FNV-1a of the first two lines, 16 hex digits>`. Any other
//!   content is an error ([`HighWaterError::Corrupt`]), never ignored.
//! - `PATH.tmp` is where a new mark is written and synced before it is renamed over `PATH`
//!   (and the directory synced). A crash before the rename leaves `PATH` as it was, which
//!   still covers every ID minted, since no mint passes a mark before its rename.
//! - `PATH.lock` is locked (`flock`) for as long as the generator lives: a second live
//!   generator on the same file, in this process or another, is refused
//!   ([`HighWaterError::Locked`]).
//!
//! When the generator is dropped, its files are given the mark that covers exactly the IDs
//! it minted ([`MarkStore::finish`]), at or past the mark they held when opened: a process
//! started again right after a clean stop does not wait out the lead of the stored mark.
//!
//! A sharded generator may keep its mark in several files, one per node
//! ([`Builder::high_water_files`](crate::Builder::high_water_files)): each is locked and
//! read when building, the generator starts past the greatest mark, and every store writes
//! each file. So a node's file stays true whichever set of nodes it is served with next.

use super::{MarkStore, StoreError};
use crate::io::{IoCause, io_is_transient};
use core::fmt;
use std::ffi::OsString;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The first line of a mark file: the format and its version.
const MAGIC: &str = "atomflake high-water 1";

/// A persisted mark, locked for one live generator: in one file, or kept alike in several
/// (one per node of a sharded generator, [`Builder::high_water_files`](crate::Builder::high_water_files)).
#[derive(Debug)]
pub(crate) struct HighWater {
    /// Each file, and its lock file, held for the generator's life; dropping it releases
    /// the lock.
    files: Vec<(PathBuf, File)>,
    /// The mark read when the files were opened: the greatest of theirs.
    opened: u64,
}

impl HighWater {
    /// Locks the marks at `paths`, in order, and reads them: the mark is the greatest (0
    /// when there is no file yet: a first run). On an error, the locks taken are released.
    ///
    /// # Errors
    ///
    /// [`HighWaterError::Locked`] when another live generator holds one (or a path is
    /// given twice); [`HighWaterError::Corrupt`] when a file is not a mark;
    /// [`HighWaterError::Io`] for a failed file operation.
    pub(crate) fn open(paths: &[PathBuf]) -> Result<HighWater, HighWaterError> {
        let mut files = Vec::with_capacity(paths.len());
        let mut opened = 0;
        for path in paths {
            let lock = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(with_suffix(path, ".lock"))
                .map_err(io_error(path, "open the lock file of"))?;
            lock.try_lock().map_err(|e| match e {
                TryLockError::WouldBlock => HighWaterError::Locked { path: path.clone() },
                TryLockError::Error(e) => io_error(path, "lock")(e),
            })?;
            opened = opened.max(read(path)?.unwrap_or(0));
            files.push((path.clone(), lock));
        }
        Ok(HighWater { files, opened })
    }
}

// The files' locks are held until the generator drops them: the tenure is the default,
// owned.
impl MarkStore for HighWater {
    fn mark(&self) -> u64 {
        self.opened
    }

    /// Writes each file in turn: `Ok` once all hold the mark. A failure part way leaves
    /// the others at a mark that still covers every ID minted, as no ID passes a mark
    /// before this returns `Ok` for it.
    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        self.files
            .iter()
            .try_for_each(|(path, _)| write(path, unix_ms))
            .map_err(StoreError::failed)
    }

    fn describe(&self) -> String {
        let paths: Vec<String> = self
            .files
            .iter()
            .map(|(path, _)| path.display().to_string())
            .collect();
        match &paths[..] {
            [path] => format!("high-water file {path}"),
            paths => format!("high-water files {}", paths.join(", ")),
        }
    }

    /// Writes the mark that covers exactly what the generator minted, so that a process
    /// started again at once (`atomflake mint` run twice) need not wait out the second and
    /// a half the stored mark ran ahead. Never below the mark the files held when opened:
    /// the IDs of the generator before are under that. A write that fails, or is cut off
    /// by the process's exit, leaves a file at its last mark, which covers as much and
    /// more.
    fn finish(&mut self, unix_ms: u64) {
        let mark = unix_ms.max(self.opened);
        for (path, _) in &self.files {
            // Best effort: the mark stored before covers every ID minted.
            let _ = write(path, mark);
        }
    }
}

/// The mark in the file at `path`: `None` when there is no file.
///
/// # Errors
///
/// [`HighWaterError::Corrupt`] when the file is not a mark; [`HighWaterError::Io`] for a
/// failed file operation.
pub(crate) fn read(path: &Path) -> Result<Option<u64>, HighWaterError> {
    match File::open(path) {
        Ok(mut file) => {
            let mut text = String::new();
            file.read_to_string(&mut text).map_err(|e| {
                if e.kind() == io::ErrorKind::InvalidData {
                    corrupt(path, 1, "bytes that are not UTF-8")
                } else {
                    io_error(path, "read")(e)
                }
            })?;
            parse(path, &text).map(Some)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path, "open")(e)),
    }
}

/// Writes `mark` to the file at `path`: a temporary file, synced, renamed over the file,
/// and the directory synced, so the file holds the old mark or the new one, whole. Two
/// writers of one file at once must not be.
///
/// # Errors
///
/// [`HighWaterError::Io`] for a failed file operation.
pub(crate) fn write(path: &Path, mark: u64) -> Result<(), HighWaterError> {
    let temporary = with_suffix(path, ".tmp");
    let mut file = File::create(&temporary).map_err(io_error(path, "create the temporary file of"))?;
    file.write_all(format(mark).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_error(path, "write"))?;
    std::fs::rename(&temporary, path).map_err(io_error(path, "rename the temporary file over"))?;
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(io_error(path, "sync the directory of"))
}

/// What a failed `action` on the file at `path` reports.
fn io_error<'a>(path: &'a Path, action: &'static str) -> impl Fn(io::Error) -> HighWaterError + 'a {
    move |e| HighWaterError::Io {
        path: path.to_path_buf(),
        action,
        cause: e.into(),
    }
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// The FNV-1a hash of `text` (64 bits): enough to catch a damaged file, not an attacker.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The text of a mark file holding `mark`.
fn format(mark: u64) -> String {
    let body = format!("{MAGIC}\nunix_ms {mark}\n");
    format!("{body}check {:016x}\n", fnv1a(&body))
}

/// The mark in the text of a mark file.
fn parse(path: &Path, text: &str) -> Result<u64, HighWaterError> {
    let mut lines = text.split_inclusive('\n');
    let mut line = |number: usize, expected: &'static str| {
        let line = lines.next().unwrap_or("");
        line.strip_suffix('\n')
            .ok_or_else(|| {
                corrupt(
                    path,
                    number,
                    if line.is_empty() {
                        "the end of the file"
                    } else {
                        line
                    },
                )
            })
            .and_then(|line| {
                if expected.is_empty() {
                    Ok(line)
                } else {
                    line.strip_prefix(expected)
                        .ok_or_else(|| corrupt(path, number, line))
                }
            })
    };
    let magic = line(1, "")?;
    if magic != MAGIC {
        return Err(corrupt(path, 1, magic));
    }
    let digits = line(2, "unix_ms ")?;
    let mark = digits
        .parse::<u64>()
        .ok()
        .filter(|_| digits.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| corrupt(path, 2, digits))?;
    let check = line(3, "check ")?;
    if check
        != format!(
            "{:016x}",
            fnv1a(&text[..MAGIC.len() + "\nunix_ms \n".len() + digits.len()])
        )
    {
        return Err(corrupt(path, 3, check));
    }
    if let Some(extra) = lines.next() {
        return Err(corrupt(path, 4, extra));
    }
    Ok(mark)
}

fn corrupt(path: &Path, line: usize, found: &str) -> HighWaterError {
    const SHOWN: usize = 60;
    let found = match found.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}…", &found[..cut]),
        None => found.to_owned(),
    };
    HighWaterError::Corrupt {
        path: path.to_path_buf(),
        line,
        found,
    }
}

/// A high-water file ([`Builder::high_water_file`](crate::Builder::high_water_file)) that
/// cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HighWaterError {
    /// Another live generator holds this file, in this process or another. Permanent while
    /// that generator lives: two would mint the same IDs.
    Locked {
        /// The high-water file.
        path: PathBuf,
    },
    /// A file that is not one atomflake wrote, or that was damaged: its mark cannot be
    /// trusted, so nothing is minted. Permanent until the file is repaired or removed (by
    /// someone who knows no ID past its mark was minted).
    Corrupt {
        /// The high-water file.
        path: PathBuf,
        /// The line found wrong (1 to 3; 4 for text after the last line).
        line: usize,
        /// What that line held (at most 60 characters of it).
        found: String,
    },
    /// A file operation failed. Transient or permanent as the operating system's error is
    /// (a full disk, missing permissions); the error is the [`source`](std::error::Error::source).
    Io {
        /// The high-water file.
        path: PathBuf,
        /// What was being done: "open", "lock", "read", "write", ...
        action: &'static str,
        /// What the operating system reported.
        cause: IoCause,
    },
}

impl fmt::Display for HighWaterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HighWaterError::Locked { path } => write!(
                f,
                "high-water file {} is in use: another live generator holds its lock",
                path.display()
            ),
            HighWaterError::Corrupt { path, line, found } => write!(
                f,
                "high-water file {} is corrupt: line {line} holds {found:?}, not what \
                 atomflake writes there",
                path.display()
            ),
            HighWaterError::Io { path, action, cause } => {
                write!(
                    f,
                    "could not {action} high-water file {}: {cause}",
                    path.display()
                )
            }
        }
    }
}

impl HighWaterError {
    /// Whether opening or writing the file again can succeed: for an I/O error whose kind
    /// says so (a full disk, an interrupted call). A locked or damaged file is permanent
    /// while the other generator lives or the file is not repaired.
    pub fn is_transient(&self) -> bool {
        match self {
            HighWaterError::Io { cause, .. } => io_is_transient(cause),
            HighWaterError::Locked { .. } | HighWaterError::Corrupt { .. } => false,
        }
    }
}

impl std::error::Error for HighWaterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HighWaterError::Io { cause, .. } => Some(cause.get()),
            _ => None,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_format_round_trips_and_every_damage_is_an_error() {
        let path = Path::new("ids.hw");
        let text = format(1_700_000_000_123);
        assert_eq!(parse(path, &text), Ok(1_700_000_000_123));
        let damaged = |text: &str, line: usize, found: &str| {
            assert_eq!(
                parse(path, text),
                Err(HighWaterError::Corrupt {
                    path: path.to_path_buf(),
                    line,
                    found: found.to_owned()
                }),
                "{text:?}"
            );
        };
        damaged("", 1, "the end of the file");
        damaged(&text[..10], 1, &text[..10]);
        damaged(
            &text[..text.len() - 1],
            3,
            text[..text.len() - 1].lines().last().unwrap(),
        );
        damaged(
            &text.replace("high-water 1", "high-water 2"),
            1,
            "atomflake high-water 2",
        );
        let flipped = text.replace("123\n", "124\n");
        damaged(
            &flipped,
            3,
            flipped.lines().nth(2).unwrap().strip_prefix("check ").unwrap(),
        );
        damaged(&text.replace("unix_ms 1", "unix_ms +1"), 2, "+1700000000123");
        damaged(&text.replace("unix_ms", "unix-ms"), 2, "unix-ms 1700000000123");
        damaged(&format!("{text}extra"), 4, "extra");
        damaged(&"x".repeat(100), 1, &format!("{}…", "x".repeat(60)));
    }
}
