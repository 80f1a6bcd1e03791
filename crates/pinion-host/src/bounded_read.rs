//! The one reader of files the machine provides: sysfs and procfs
//! attributes, `meminfo`, hugepage counts, `mountinfo`, and the trees
//! captured from them that `--sysroot` points at.
//!
//! Such a file is always a regular file of bounded size. A tree can hold
//! anything else in its place: a FIFO (opening one without a writer blocks
//! forever), a device (a symlink to `/dev/zero` never ends) or a directory.
//! [`read_text`] opens without blocking, refuses anything but a regular
//! file, and reads at most `cap` bytes: a longer file is an error naming
//! the cap, never a silent truncation.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind, Read as _};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

/// The cap for a sysfs or procfs attribute file (at most a page on a
/// kernel) and for the small procfs files read whole (`meminfo`).
pub(crate) const MAX_ATTRIBUTE: u64 = 1 << 20;

/// Why [`read_text`] failed. The caller adds the path: each module has its
/// own error type naming the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// Opening or reading failed (kind `NotFound` when the file does not
    /// exist), or the path is not a regular file ([`NotRegularFile`]
    /// inside an error of kind `IsADirectory` or `InvalidInput`).
    #[error(transparent)]
    Io(io::Error),
    /// The file holds more than `cap` bytes.
    #[error("larger than {cap} bytes")]
    TooLarge { cap: u64 },
    /// The file is not UTF-8 text.
    #[error("not utf-8 text")]
    NotText,
}

impl ReadError {
    /// This error as an I/O error, for modules whose error type carries
    /// only I/O errors (kinds `FileTooLarge` and `InvalidData`).
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            ReadError::Io(err) => err,
            err @ ReadError::TooLarge { .. } => io::Error::new(ErrorKind::FileTooLarge, err),
            err @ ReadError::NotText => io::Error::new(ErrorKind::InvalidData, err),
        }
    }
}

/// What stood where a regular file was expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotRegularFile {
    /// `directory`, `fifo`, `socket`, `character device`, `block device`.
    pub kind: &'static str,
}

impl fmt::Display for NotRegularFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a regular file (a {})", self.kind)
    }
}

impl std::error::Error for NotRegularFile {}

/// Whether `err` says the path was not a regular file.
#[cfg(test)]
pub(crate) fn is_not_regular(err: &io::Error) -> bool {
    err.get_ref()
        .is_some_and(|inner| inner.is::<NotRegularFile>())
}

/// The text of the regular file at `path`, at most `cap` bytes.
///
/// The open never blocks (`O_NONBLOCK`: a FIFO opens at once and is then
/// refused), never leaks into a child (`O_CLOEXEC`) and never makes a
/// terminal the controlling one (`O_NOCTTY`). `O_NONBLOCK` changes nothing
/// for a regular file. No `statx` size probe is made (sysfs reports 4096
/// for every attribute anyway): the `fstat` of the opened file is the only
/// extra system call.
pub(crate) fn read_text(path: &Path, cap: u64) -> Result<String, ReadError> {
    let file = open_regular(path).map_err(ReadError::Io)?;
    let mut bytes = Vec::with_capacity(4096);
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge { cap });
    }
    String::from_utf8(bytes).map_err(|_| ReadError::NotText)
}

/// Opens the regular file at `path` for reading, as [`read_text`] does:
/// without blocking on a FIFO, refusing anything but a regular file (an
/// error of kind `IsADirectory` or `InvalidInput` holding a
/// [`NotRegularFile`]). The state files (the checkpoint, the journal) are
/// opened this way too.
pub(crate) fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)?;
    check_regular(&file).map_err(ReadError::into_io)?;
    Ok(file)
}

fn check_regular(file: &File) -> Result<(), ReadError> {
    let kind = file.metadata().map_err(ReadError::Io)?.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let (io_kind, name) = if kind.is_dir() {
        (ErrorKind::IsADirectory, "directory")
    } else if kind.is_fifo() {
        (ErrorKind::InvalidInput, "fifo")
    } else if kind.is_socket() {
        (ErrorKind::InvalidInput, "socket")
    } else if kind.is_char_device() {
        (ErrorKind::InvalidInput, "character device")
    } else if kind.is_block_device() {
        (ErrorKind::InvalidInput, "block device")
    } else {
        (ErrorKind::InvalidInput, "special file")
    };
    Err(ReadError::Io(io::Error::new(
        io_kind,
        NotRegularFile { kind: name },
    )))
}

/// Helpers for tests that plant FIFOs and must fail rather than hang.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Makes a FIFO at `path` (with `mkfifo(1)`: no `unsafe` in tests).
    pub(crate) fn mkfifo(path: &Path) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("run mkfifo");
        assert!(status.success(), "mkfifo {}: {status}", path.display());
    }

    /// Runs `read` on another thread and returns its answer; panics when
    /// none comes within 10 s (a read blocked on a FIFO), so that such a
    /// test fails instead of hanging. Not a timing assertion: a working
    /// read answers in microseconds.
    pub(crate) fn without_hanging<T: Send + 'static>(
        what: &str,
        read: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{what} hung (blocked opening a fifo?)"))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{mkfifo, without_hanging};
    use super::*;

    #[test]
    fn a_regular_file_is_read_up_to_and_including_the_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("online");
        std::fs::write(&path, "0-3\n").expect("write");
        assert_eq!(read_text(&path, 4).expect("read"), "0-3\n");
        let missing = read_text(&dir.path().join("absent"), 4).expect_err("absent");
        assert!(
            matches!(missing, ReadError::Io(ref err) if err.kind() == ErrorKind::NotFound),
            "{missing:?}"
        );
    }

    #[test]
    fn regression_fifo_was_opened_blocking_and_hung_the_reader() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("online");
        mkfifo(&path);
        let err = without_hanging("reading a fifo", move || read_text(&path, MAX_ATTRIBUTE))
            .expect_err("a fifo is refused");
        assert!(
            matches!(err, ReadError::Io(ref io) if is_not_regular(io)),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "not a regular file (a fifo)");
    }

    #[test]
    fn regression_symlink_to_dev_zero_was_read_without_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nr_hugepages");
        std::os::unix::fs::symlink("/dev/zero", &path).expect("symlink");
        let err = read_text(&path, MAX_ATTRIBUTE).expect_err("a device is refused");
        assert!(
            matches!(err, ReadError::Io(ref io) if is_not_regular(io)),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "not a regular file (a character device)");
    }

    #[test]
    fn a_directory_is_not_a_regular_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = read_text(dir.path(), MAX_ATTRIBUTE).expect_err("a directory");
        assert!(
            matches!(err, ReadError::Io(ref io) if io.kind() == ErrorKind::IsADirectory && is_not_regular(io)),
            "{err:?}"
        );
    }

    #[test]
    fn regression_file_over_the_cap_is_an_error_naming_the_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("meminfo");
        std::fs::write(&path, "x".repeat(17)).expect("write");
        assert_eq!(read_text(&path, 17).expect("at the cap").len(), 17);
        let err = read_text(&path, 16).expect_err("over the cap");
        assert!(matches!(err, ReadError::TooLarge { cap: 16 }), "{err:?}");
        assert_eq!(err.to_string(), "larger than 16 bytes");
        let io = err.into_io();
        assert_eq!(io.kind(), ErrorKind::FileTooLarge);
        assert_eq!(io.to_string(), "larger than 16 bytes");
    }

    #[test]
    fn non_utf8_is_not_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("present");
        std::fs::write(&path, [0xff, 0xfe]).expect("write");
        assert!(matches!(
            read_text(&path, MAX_ATTRIBUTE),
            Err(ReadError::NotText)
        ));
    }
}
