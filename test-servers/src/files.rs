//! The files a server under test watches (TLS certificates, token files), replaced as a
//! deployment or a certificate manager replaces them: by a rename.

use std::path::Path;
use std::time::SystemTime;

/// Replaces `file` by a rename with a file of `contents`, written beside it first; with
/// `stamp`, the new file has that modification time (set before the rename).
pub fn replace(file: &Path, contents: impl AsRef<[u8]>, stamp: Option<SystemTime>) {
    let staged = file.with_extension("staged");
    std::fs::write(&staged, contents).unwrap();
    if let Some(stamp) = stamp {
        std::fs::File::options()
            .write(true)
            .open(&staged)
            .unwrap()
            .set_modified(stamp)
            .unwrap();
    }
    std::fs::rename(&staged, file).unwrap();
}

/// [`replace`] with `file`'s modification time kept, so that a watch of the time stamp
/// cannot tell: only a signal, or a request to reload, makes the server read it again.
pub fn replace_keeping_stamp(file: &Path, contents: impl AsRef<[u8]>) {
    replace(file, contents, Some(modified(file)));
}

/// The modification time of `file`.
pub fn modified(file: &Path) -> SystemTime {
    std::fs::metadata(file).unwrap().modified().unwrap()
}
