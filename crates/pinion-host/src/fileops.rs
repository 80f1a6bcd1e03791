//! The few file operations of Pinion's write paths — the checkpoint's atomic
//! replacement (`durable`) and the journal — behind one small trait, so that
//! tests can replace the operating system where they must: a failed or short
//! write, `ENOSPC`, a failed `fdatasync` ([`Faults`]), or a crash at a chosen
//! operation (the crash tests implement the trait themselves).
//!
//! Opening and reading files stay plain `std`: only the operations whose
//! failure a caller must survive go through [`FileOps`].

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The operations of the write paths. Every method gets the path of the file
/// (or directory) it acts on, for error messages and for fault injection.
pub trait FileOps: Send {
    /// Writes some of `buf` at `offset`; may write fewer bytes than asked
    /// (a short write). [`write_all_at`] loops over it.
    fn write_at(&mut self, file: &File, path: &Path, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// `fdatasync(2)`: the file's data (and the metadata needed to read it).
    fn sync_data(&mut self, file: &File, path: &Path) -> io::Result<()>;
    /// `fsync(2)`: the file's data and all its metadata.
    fn sync_all(&mut self, file: &File, path: &Path) -> io::Result<()>;
    /// `rename(2)` inside one directory.
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()>;
    /// `fsync(2)` of a directory, so a rename or a new name in it is durable.
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()>;
}

/// The real operating system.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsFiles;

impl FileOps for OsFiles {
    fn write_at(&mut self, file: &File, _: &Path, buf: &[u8], offset: u64) -> io::Result<usize> {
        file.write_at(buf, offset)
    }

    fn sync_data(&mut self, file: &File, _: &Path) -> io::Result<()> {
        file.sync_data()
    }

    fn sync_all(&mut self, file: &File, _: &Path) -> io::Result<()> {
        file.sync_all()
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// Writes all of `buf` at `offset` through `ops`, continuing after short
/// writes and `EINTR`; a write of 0 bytes is an error (`WriteZero`).
pub fn write_all_at(
    ops: &mut dyn FileOps,
    file: &File,
    path: &Path,
    mut buf: &[u8],
    mut offset: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        match ops.write_at(file, path, buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "the file system accepted no bytes",
                ))
            }
            Ok(written) => {
                buf = &buf[written..];
                offset += written as u64;
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// One kind of [`FileOps`] call, for fault plans and operation logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    Write,
    SyncData,
    SyncAll,
    Rename,
    SyncDir,
}

/// What an injected fault does instead of the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Fail with this `errno` (e.g. `libc::EIO`, `libc::ENOSPC`); nothing is done.
    Fail(i32),
    /// (writes) Write only the first this many bytes and report that.
    Short(usize),
    /// Do the operation: lets one call through to reach a later call of
    /// the same kind (the second `sync_dir` of a compaction).
    Pass,
}

#[derive(Debug, Clone)]
struct Fault {
    op: FileOp,
    /// Only paths whose file name contains this.
    name: Option<String>,
    effect: Effect,
}

#[derive(Debug, Default)]
struct Plan {
    faults: VecDeque<Fault>,
    log: Vec<(FileOp, PathBuf)>,
}

/// The shared plan of a [`Faults`] layer: tests arm faults on it after the
/// layer was handed to a store, and read the log of operations.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan(Arc<Mutex<Plan>>);

impl FaultPlan {
    fn lock(&self) -> MutexGuard<'_, Plan> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes the next `op` on a file whose name contains `name` (any file
    /// when `None`) have `effect`. Faults fire once each, in the order armed.
    pub fn inject(&self, op: FileOp, name: Option<&str>, effect: Effect) {
        self.lock().faults.push_back(Fault {
            op,
            name: name.map(str::to_string),
            effect,
        });
    }

    /// Faults armed but not fired yet.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.lock().faults.len()
    }

    /// Every operation attempted so far (faulty or not), in order.
    #[must_use]
    pub fn log(&self) -> Vec<(FileOp, PathBuf)> {
        self.lock().log.clone()
    }

    /// Logs the operation and takes the first armed fault matching it.
    fn take(&self, op: FileOp, path: &Path) -> Option<Effect> {
        let mut plan = self.lock();
        plan.log.push((op, path.to_path_buf()));
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let index = plan.faults.iter().position(|fault| {
            fault.op == op
                && fault
                    .name
                    .as_deref()
                    .is_none_or(|want| file_name.contains(want))
        })?;
        plan.faults.remove(index).map(|fault| fault.effect)
    }
}

/// A [`FileOps`] that performs the real operations except where its
/// [`FaultPlan`] says otherwise.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    plan: FaultPlan,
}

impl Faults {
    /// A layer and the plan that steers it.
    #[must_use]
    pub fn new() -> (Faults, FaultPlan) {
        let plan = FaultPlan::default();
        (Faults { plan: plan.clone() }, plan)
    }

    fn fail(errno: i32) -> io::Error {
        io::Error::from_raw_os_error(errno)
    }

    fn simple(
        &self,
        op: FileOp,
        path: &Path,
        run: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        match self.plan.take(op, path) {
            Some(Effect::Fail(errno)) => Err(Self::fail(errno)),
            // A short "sync" or "rename" means nothing: run it.
            Some(Effect::Short(_) | Effect::Pass) | None => run(),
        }
    }
}

impl FileOps for Faults {
    fn write_at(&mut self, file: &File, path: &Path, buf: &[u8], offset: u64) -> io::Result<usize> {
        match self.plan.take(FileOp::Write, path) {
            Some(Effect::Fail(errno)) => Err(Self::fail(errno)),
            Some(Effect::Short(len)) => file.write_at(&buf[..len.min(buf.len())], offset),
            Some(Effect::Pass) | None => file.write_at(buf, offset),
        }
    }

    fn sync_data(&mut self, file: &File, path: &Path) -> io::Result<()> {
        self.simple(FileOp::SyncData, path, || file.sync_data())
    }

    fn sync_all(&mut self, file: &File, path: &Path) -> io::Result<()> {
        self.simple(FileOp::SyncAll, path, || file.sync_all())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        self.simple(FileOp::Rename, from, || std::fs::rename(from, to))
    }

    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        self.simple(FileOp::SyncDir, dir, || OsFiles.sync_dir(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_writes_are_continued_and_faults_fire_once_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let file = File::create(&path).expect("create");
        let (mut ops, plan) = Faults::new();
        plan.inject(FileOp::Write, Some("f"), Effect::Short(3));
        plan.inject(FileOp::Write, None, Effect::Short(1));
        write_all_at(&mut ops, &file, &path, b"hello world", 0).expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"hello world");
        assert_eq!(plan.pending(), 0);
        assert_eq!(plan.log().len(), 3, "3 bytes, 1 byte, the rest");
    }

    #[test]
    fn injected_errors_carry_their_errno_and_only_hit_matching_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal");
        let file = File::create(&path).expect("create");
        let (mut ops, plan) = Faults::new();
        plan.inject(
            FileOp::SyncData,
            Some("checkpoint"),
            Effect::Fail(libc::EIO),
        );
        plan.inject(FileOp::Write, Some("journal"), Effect::Fail(libc::ENOSPC));
        ops.sync_data(&file, &path).expect("not the named file");
        let err = write_all_at(&mut ops, &file, &path, b"x", 0).expect_err("no space");
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(plan.pending(), 1, "the checkpoint fault is still armed");
    }

    #[test]
    fn a_write_of_zero_bytes_is_an_error_not_a_loop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let file = File::create(&path).expect("create");
        let (mut ops, plan) = Faults::new();
        plan.inject(FileOp::Write, None, Effect::Short(0));
        let err = write_all_at(&mut ops, &file, &path, b"abc", 0).expect_err("zero");
        assert_eq!(err.kind(), io::ErrorKind::WriteZero);
    }
}
