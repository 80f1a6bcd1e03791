//! Exclusive locks on a file or directory (`flock`), held while the
//! returned [`Lock`] lives, and the holder of a lock another process has:
//! its pid from `/proc/locks`, and the state directory of that agent from
//! the lock file it keeps open (`<state dir>/.pinion-agent.lock`).
//!
//! The agent takes two: its state directory's lock file, and Pinion's
//! cgroup root directory itself, so two agents with different state
//! directories cannot manage (and fight over) the same cgroups.

use std::fs::{File, TryLockError};
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// The name of the lock file in an agent's state directory.
pub const STATE_LOCK_FILE: &str = ".pinion-agent.lock";

/// An exclusive lock, released when dropped.
#[derive(Debug)]
pub struct Lock {
    _file: File,
    path: PathBuf,
}

impl Lock {
    /// The locked path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The process holding a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// The state directory of that agent, when it could be read.
    pub state_dir: Option<PathBuf>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}", self.pid)?;
        if let Some(dir) = &self.state_dir {
            write!(f, ", state directory {}", dir.display())?;
        }
        Ok(())
    }
}

/// Why a lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{} is locked by another process{}", .path.display(), holder_suffix(.holder.as_ref()))]
    Held {
        path: PathBuf,
        holder: Option<Holder>,
    },
    #[error("locking {}: {source}", .path.display())]
    Io { path: PathBuf, source: io::Error },
}

fn holder_suffix(holder: Option<&Holder>) -> String {
    holder.map(|h| format!(" ({h})")).unwrap_or_default()
}

/// Opens `path` (creating it as a file when `create` and it is missing)
/// and takes an exclusive lock without waiting. When another process holds
/// it, the error names that process as seen in `proc_root`
/// (`/proc` on a live machine).
pub fn lock_exclusive(path: &Path, create: bool, proc_root: &Path) -> Result<Lock, LockError> {
    let io_error = |source| LockError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = if create {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
    } else {
        File::open(path)
    }
    .map_err(io_error)?;
    match file.try_lock() {
        Ok(()) => Ok(Lock {
            _file: file,
            path: path.to_path_buf(),
        }),
        Err(TryLockError::WouldBlock) => {
            let holder = file
                .metadata()
                .ok()
                .and_then(|meta| holder_of(proc_root, meta.dev(), meta.ino()));
            Err(LockError::Held {
                path: path.to_path_buf(),
                holder,
            })
        }
        Err(TryLockError::Error(source)) => Err(io_error(source)),
    }
}

/// The process holding a `flock` on the file `(dev, ino)`, from
/// `<proc_root>/locks`.
#[must_use]
pub fn holder_of(proc_root: &Path, dev: u64, ino: u64) -> Option<Holder> {
    let locks = read_locks(proc_root)?;
    let pid = locks
        .lines()
        .find_map(|line| lock_line_pid(line, dev, ino))?;
    Some(Holder {
        pid,
        state_dir: state_dir_of(proc_root, pid),
    })
}

/// Largest `<proc_root>/locks` read: a line of about 60 bytes per lock.
const MAX_LOCKS: u64 = 16 << 20;

/// `<proc_root>/locks`; `None` when it cannot be read, is no regular file
/// (a FIFO there is no hang) or is larger than [`MAX_LOCKS`].
fn read_locks(proc_root: &Path) -> Option<String> {
    crate::bounded_read::read_text(&proc_root.join("locks"), MAX_LOCKS).ok()
}

/// The pid of a `/proc/locks` line of a FLOCK on `(dev, ino)`: fields are
/// `N: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> <start> <end>`,
/// major and minor in hex, the inode in decimal.
fn lock_line_pid(line: &str, dev: u64, ino: u64) -> Option<u32> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let at = fields.iter().position(|f| *f == "FLOCK")?;
    let pid: u32 = fields.get(at + 3)?.parse().ok()?;
    let mut id = fields.get(at + 4)?.split(':');
    let major = u64::from_str_radix(id.next()?, 16).ok()?;
    let minor = u64::from_str_radix(id.next()?, 16).ok()?;
    let inode: u64 = id.next()?.parse().ok()?;
    let same_dev = (major, minor) == (dev_major(dev), dev_minor(dev));
    (same_dev && inode == ino).then_some(pid)
}

/// glibc's `major()` of a `dev_t`.
fn dev_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff)
}

/// glibc's `minor()` of a `dev_t`.
fn dev_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff)
}

/// The state directory of agent `pid`: the directory of the state lock
/// file it holds open.
fn state_dir_of(proc_root: &Path, pid: u32) -> Option<PathBuf> {
    let fds = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")).ok()?;
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .find(|target| target.file_name().is_some_and(|n| n == STATE_LOCK_FILE))
        .and_then(|target| target.parent().map(Path::to_path_buf))
}

/// Another process's `flock` on a directory above or below a cgroup root
/// (found by [`nested_lock`]): another agent's cgroup root that contains
/// this one, or lies inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NestedLock {
    /// The locked directory.
    pub path: PathBuf,
    /// It contains the root (`true`) or lies inside it (`false`).
    pub above: bool,
    pub holder: Holder,
}

/// Directories visited below a root, at most (a cgroup root holds a
/// cgroup or two per workload).
const MAX_WALK: usize = 100_000;

/// A lock held on a directory that contains `root` (up to its file
/// system's top, the cgroup mount) or lies inside it, as `<proc_root>/locks`
/// lists it: two agents whose roots nest would hand out the same CPUs and
/// the outer one would delete the inner root as a stray. `root`'s own lock
/// (this agent's) is not counted.
#[must_use]
pub fn nested_lock(root: &Path, proc_root: &Path) -> Option<NestedLock> {
    let locks = read_locks(proc_root)?;
    let root_meta = std::fs::metadata(root).ok()?;
    let found = |path: &Path, above: bool| -> Option<NestedLock> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        let pid = locks
            .lines()
            .find_map(|line| lock_line_pid(line, meta.dev(), meta.ino()))?;
        Some(NestedLock {
            path: path.to_path_buf(),
            above,
            holder: Holder {
                pid,
                state_dir: state_dir_of(proc_root, pid),
            },
        })
    };
    for ancestor in root.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(ancestor) else {
            break;
        };
        if meta.dev() != root_meta.dev() {
            break;
        }
        if let Some(nested) = found(ancestor, true) {
            return Some(nested);
        }
    }
    let mut pending = vec![root.to_path_buf()];
    let mut visited = 0;
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            visited += 1;
            if visited > MAX_WALK {
                return None;
            }
            let path = entry.path();
            if let Some(nested) = found(&path, false) {
                return Some(nested);
            }
            pending.push(path);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounded_read::testing::{mkfifo, without_hanging};

    #[test]
    fn regression_fifo_as_proc_locks_hung_the_holder_lookup() {
        let dir = tempfile::tempdir().expect("tempdir");
        mkfifo(&dir.path().join("locks"));
        let proc_root = dir.path().to_path_buf();
        let answer = without_hanging("holder lookup", move || {
            (
                holder_of(&proc_root, 1, 1),
                nested_lock(&proc_root, &proc_root),
            )
        });
        assert_eq!(answer, (None, None));
    }

    #[test]
    fn a_second_lock_names_the_holder_and_its_state_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        std::fs::create_dir(&state).expect("mkdir");
        let proc_root = Path::new("/proc");
        let _state_lock =
            lock_exclusive(&state.join(STATE_LOCK_FILE), true, proc_root).expect("state lock");
        let target = dir.path().join("cgroup-root");
        std::fs::create_dir(&target).expect("mkdir");
        let held = lock_exclusive(&target, false, proc_root).expect("first");
        let err = lock_exclusive(&target, false, proc_root).expect_err("second");
        let LockError::Held { holder, .. } = &err else {
            panic!("expected Held, got {err:?}");
        };
        let holder = holder.clone().expect("holder found in /proc/locks");
        assert_eq!(holder.pid, std::process::id());
        assert_eq!(holder.state_dir.as_deref(), Some(state.as_path()));
        let text = err.to_string();
        assert!(text.contains(&state.display().to_string()), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop(held);
        lock_exclusive(&target, false, proc_root).expect("free again");
    }

    /// Issue 27, item 7: an agent whose cgroup root was inside (or above)
    /// another agent's root was accepted; both handed out the same CPUs.
    #[test]
    fn regression_a_root_inside_or_above_a_locked_root_is_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outer = dir.path().join("pinion");
        let inner = outer.join("nested");
        std::fs::create_dir_all(&inner).expect("mkdir");
        let proc_root = Path::new("/proc");
        let held = lock_exclusive(&outer, false, proc_root).expect("outer lock");
        let found = nested_lock(&inner, proc_root).expect("inside a locked root");
        assert_eq!((found.path.as_path(), found.above), (outer.as_path(), true));
        assert_eq!(found.holder.pid, std::process::id());
        assert_eq!(nested_lock(&outer, proc_root), None, "its own lock");
        drop(held);
        assert_eq!(nested_lock(&inner, proc_root), None, "released");
        let _inner = lock_exclusive(&inner, false, proc_root).expect("inner lock");
        let found = nested_lock(&outer, proc_root).expect("above a locked root");
        assert_eq!(
            (found.path.as_path(), found.above),
            (inner.as_path(), false)
        );
    }

    #[test]
    fn lock_lines_are_matched_by_device_and_inode() {
        let line = "1: FLOCK  ADVISORY  WRITE 12390 00:1f:22 0 EOF";
        let dev = (0x1f_u64) & 0xff; // major 0, minor 0x1f
        assert_eq!(lock_line_pid(line, dev, 22), Some(12390));
        assert_eq!(lock_line_pid(line, dev, 23), None);
        assert_eq!(
            lock_line_pid("2: POSIX ADVISORY WRITE 1 00:1f:22 0 EOF", dev, 22),
            None
        );
        assert_eq!(lock_line_pid("garbage", dev, 22), None);
        // A large device number: major 259, minor 3.
        let dev = (259 << 8) | 3;
        assert_eq!(dev_major(dev), 259);
        assert_eq!(dev_minor(dev), 3);
        assert_eq!(
            lock_line_pid("3: FLOCK ADVISORY WRITE 7 103:03:99 0 EOF", dev, 99),
            Some(7)
        );
    }
}
