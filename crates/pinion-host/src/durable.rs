//! Durable, atomic replacement of one file in a directory.
//!
//! A write goes: create `.<name>.pinion-tmp` in the same directory
//! exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`: a file, directory or symlink
//! already at that name is never opened, let alone followed), write the
//! bytes, fsync the temp file, rename it over `<name>`, fsync the directory.
//! A crash before the rename leaves the old file untouched (plus a stale temp
//! file, which reads never look at and the next write unlinks — `unlink`
//! removes a symlink itself, never its target — before creating its own); a
//! crash after it leaves the new file. Nobody ever sees a torn `<name>`.
//!
//! [`write_atomic_with`] calls a hook after every step ([`WriteStep`]) so a
//! test can stop the process at each one; [`write_atomic_using`] also takes
//! the [`FileOps`] layer, so a test can make a step fail.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::fileops::{write_all_at, FileOps, OsFiles};

/// Errors of durable file operations; each names the operation and path.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error("invalid file name {name:?}: must be a plain file name inside the directory")]
    InvalidName { name: String },
    #[error("{op} {}: {source}", .path.display())]
    Io {
        op: Op,
        path: PathBuf,
        source: io::Error,
    },
    #[error("no free name to move {} aside", .path.display())]
    NoFreeName { path: PathBuf },
    #[error("rename {} to {}: {source}", .from.display(), .to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: io::Error,
    },
}

/// The operation an [`DurableError::Io`] failed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    CreateTemp,
    /// Creating a new file (never replacing one).
    Create,
    /// Writing this many bytes.
    Write(usize),
    SyncFile,
    SyncDir,
    Remove,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Read => f.write_str("read"),
            Op::CreateTemp => f.write_str("create temp file"),
            Op::Create => f.write_str("create"),
            Op::Write(bytes) => write!(f, "write {bytes} bytes to"),
            Op::SyncFile => f.write_str("fsync file"),
            Op::SyncDir => f.write_str("fsync directory"),
            Op::Remove => f.write_str("remove"),
        }
    }
}

/// The points of a write, in order; the hook runs after each one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    /// The temp file exists, empty.
    TempCreated,
    /// The first half of the bytes is in the temp file.
    TempHalfWritten,
    /// All bytes are in the temp file (maybe not on disk yet).
    TempWritten,
    /// The temp file is fsynced.
    TempSynced,
    /// The temp file has replaced the target (directory not yet fsynced).
    Renamed,
    /// The directory is fsynced: the write is durable.
    DirSynced,
}

impl WriteStep {
    /// Every step, in the order a write passes them.
    pub const ALL: [WriteStep; 6] = [
        WriteStep::TempCreated,
        WriteStep::TempHalfWritten,
        WriteStep::TempWritten,
        WriteStep::TempSynced,
        WriteStep::Renamed,
        WriteStep::DirSynced,
    ];

    /// A stable name (for logs and test plumbing).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            WriteStep::TempCreated => "temp-created",
            WriteStep::TempHalfWritten => "temp-half-written",
            WriteStep::TempWritten => "temp-written",
            WriteStep::TempSynced => "temp-synced",
            WriteStep::Renamed => "renamed",
            WriteStep::DirSynced => "dir-synced",
        }
    }

    /// The step with this [`WriteStep::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<WriteStep> {
        WriteStep::ALL.into_iter().find(|step| step.name() == name)
    }
}

/// The temp file name used while writing `name`.
#[must_use]
pub fn temp_name(name: &str) -> String {
    format!(".{name}.pinion-tmp")
}

/// Refuses names that are empty, `.`/`..`, or contain a path separator or
/// NUL, so a join can never leave the directory.
pub fn check_name(name: &str) -> Result<(), DurableError> {
    let bad = name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']);
    if bad {
        Err(DurableError::InvalidName {
            name: name.to_string(),
        })
    } else {
        Ok(())
    }
}

fn io_err(op: Op, path: &Path) -> impl FnOnce(io::Error) -> DurableError + '_ {
    move |source| DurableError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Replaces `dir/name` with `bytes` durably and atomically.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), DurableError> {
    write_atomic_with(dir, name, bytes, &mut |_| {})
}

/// [`write_atomic`], calling `hook` after each [`WriteStep`]. On an error
/// before the rename the temp file is removed (best effort) and the target
/// is untouched.
pub fn write_atomic_with(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    hook: &mut impl FnMut(WriteStep),
) -> Result<(), DurableError> {
    write_atomic_using(&mut OsFiles, dir, name, bytes, hook)
}

/// [`write_atomic_with`] through a [`FileOps`] layer (tests inject faults).
pub fn write_atomic_using(
    ops: &mut dyn FileOps,
    dir: &Path,
    name: &str,
    bytes: &[u8],
    hook: &mut dyn FnMut(WriteStep),
) -> Result<(), DurableError> {
    check_name(name)?;
    let temp = dir.join(temp_name(name));
    let target = dir.join(name);
    let file = create_exclusive(&temp)?;
    hook(WriteStep::TempCreated);
    if let Err(err) = write_temp(ops, &file, &temp, bytes, hook) {
        let _ = fs::remove_file(&temp);
        return Err(err);
    }
    drop(file);
    ops.rename(&temp, &target).map_err(|source| {
        let _ = fs::remove_file(&temp);
        DurableError::Rename {
            from: temp.clone(),
            to: target.clone(),
            source,
        }
    })?;
    hook(WriteStep::Renamed);
    ops.sync_dir(dir).map_err(io_err(Op::SyncDir, dir))?;
    hook(WriteStep::DirSynced);
    Ok(())
}

/// Creates `path` exclusively, mode 0600, never following a symlink: with
/// `O_CREAT|O_EXCL` the call fails on any existing name (a dangling or
/// planted symlink included) instead of opening it, and `O_NOFOLLOW` says
/// so twice. A leftover from a crash (or anything planted there) is
/// unlinked — which removes the name itself, never what a symlink points
/// to — and the creation tried once more; a second collision is an error.
pub fn create_exclusive(path: &Path) -> Result<File, DurableError> {
    match open_exclusive(path) {
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(path).map_err(io_err(Op::Remove, path))?;
            open_exclusive(path).map_err(io_err(Op::CreateTemp, path))
        }
        other => other.map_err(io_err(Op::CreateTemp, path)),
    }
}

fn open_exclusive(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Writes and fsyncs the temp file.
fn write_temp(
    ops: &mut dyn FileOps,
    file: &File,
    temp: &Path,
    bytes: &[u8],
    hook: &mut dyn FnMut(WriteStep),
) -> Result<(), DurableError> {
    let (first, second) = bytes.split_at(bytes.len() / 2);
    write_all_at(ops, file, temp, first, 0).map_err(io_err(Op::Write(bytes.len()), temp))?;
    hook(WriteStep::TempHalfWritten);
    write_all_at(ops, file, temp, second, first.len() as u64)
        .map_err(io_err(Op::Write(bytes.len()), temp))?;
    hook(WriteStep::TempWritten);
    ops.sync_all(file, temp)
        .map_err(io_err(Op::SyncFile, temp))?;
    hook(WriteStep::TempSynced);
    Ok(())
}

/// fsyncs a directory so a rename or removal in it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), DurableError> {
    OsFiles.sync_dir(dir).map_err(io_err(Op::SyncDir, dir))
}

/// What [`read_optional_at_most`] found in a file that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Contents {
    /// Its bytes (no more than the limit).
    Bytes(Vec<u8>),
    /// It is larger than the limit: `size` bytes (or more); nothing read.
    TooLarge { size: u64 },
}

/// Reads `dir/name`, a file that may not be larger than `max` bytes:
/// `Ok(None)` when it does not exist, an error when it exists but cannot be
/// read (a FIFO or a directory: not opened). A
/// larger one is [`Contents::TooLarge`] and is not read (a damaged file
/// cannot exhaust the memory; one that grows while it is read is caught too).
pub fn read_optional_at_most(
    dir: &Path,
    name: &str,
    max: u64,
) -> Result<Option<Contents>, DurableError> {
    use std::io::Read;
    check_name(name)?;
    let path = dir.join(name);
    let io_error = |source| DurableError::Io {
        op: Op::Read,
        path: path.clone(),
        source,
    };
    let file = match crate::bounded_read::open_regular(&path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io_error(source)),
    };
    let size = file.metadata().map_err(io_error)?.len();
    if size > max {
        return Ok(Some(Contents::TooLarge { size }));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > max {
        return Ok(Some(Contents::TooLarge { size: read }));
    }
    Ok(Some(Contents::Bytes(bytes)))
}

/// Removes a temp file a crashed write left behind. Returns whether there
/// was one.
pub fn remove_stale_temp(dir: &Path, name: &str) -> Result<bool, DurableError> {
    check_name(name)?;
    let temp = dir.join(temp_name(name));
    match fs::remove_file(&temp) {
        Ok(()) => {
            sync_dir(dir)?;
            Ok(true)
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(DurableError::Io {
            op: Op::Remove,
            path: temp,
            source,
        }),
    }
}

/// Moves `dir/name` to `dir/<name>.corrupt-<n>` with the smallest free
/// `n >= 1`, never replacing an existing file (link, then unlink), and
/// fsyncs the directory. Returns the new path.
pub fn move_aside(dir: &Path, name: &str) -> Result<PathBuf, DurableError> {
    move_aside_as(dir, name, "corrupt")
}

/// [`move_aside`] to `dir/<name>.<label>-<n>`.
pub fn move_aside_as(dir: &Path, name: &str, label: &str) -> Result<PathBuf, DurableError> {
    let aside = keep_copy(dir, name, label)?;
    let path = dir.join(name);
    fs::remove_file(&path).map_err(io_err(Op::Remove, &path))?;
    sync_dir(dir)?;
    Ok(aside)
}

/// Keeps the current `dir/name` as `dir/<name>.<label>-<n>` (smallest free
/// `n >= 1`, a hard link: no copy, never replacing an existing file) and
/// fsyncs the directory. The original stays in place. Returns the new path.
pub fn keep_copy(dir: &Path, name: &str, label: &str) -> Result<PathBuf, DurableError> {
    check_name(name)?;
    let path = dir.join(name);
    for n in 1u32.. {
        let copy = dir.join(format!("{name}.{label}-{n}"));
        match fs::hard_link(&path, &copy) {
            Ok(()) => {
                sync_dir(dir)?;
                return Ok(copy);
            }
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(DurableError::Rename {
                    from: path,
                    to: copy,
                    source,
                })
            }
        }
    }
    Err(DurableError::NoFreeName { path })
}

/// Writes `bytes` to a new file `dir/<name>.<label>-<n>` (smallest free
/// `n >= 1`, created exclusively: an earlier copy is never replaced), fsyncs
/// it and the directory. For keeping a copy of a file about to be repaired
/// in place. Returns the new path.
pub fn keep_bytes(
    dir: &Path,
    name: &str,
    label: &str,
    bytes: &[u8],
) -> Result<PathBuf, DurableError> {
    check_name(name)?;
    for n in 1u32.. {
        let copy = dir.join(format!("{name}.{label}-{n}"));
        let file = match open_exclusive(&copy) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => {
                return Err(DurableError::Io {
                    op: Op::Create,
                    path: copy,
                    source,
                })
            }
        };
        write_all_at(&mut OsFiles, &file, &copy, bytes, 0)
            .map_err(io_err(Op::Write(bytes.len()), &copy))?;
        file.sync_all().map_err(io_err(Op::SyncFile, &copy))?;
        sync_dir(dir)?;
        return Ok(copy);
    }
    Err(DurableError::NoFreeName {
        path: dir.join(name),
    })
}

#[cfg(test)]
mod tests;
