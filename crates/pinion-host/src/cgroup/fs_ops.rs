//! The file operations behind [`super::Cgroups`]; every error names the
//! path, the operation and, for writes, the data.

use std::fs;
use std::io::{self, ErrorKind};
use std::path::Path;

use pinion_core::CpuSet;

use super::{CgroupError, CgroupName, CgroupOp};

fn io_error(op: CgroupOp, path: &Path, data: Option<&str>, source: io::Error) -> CgroupError {
    CgroupError::Io {
        op,
        path: path.to_path_buf(),
        data: data.map(str::to_string),
        source,
    }
}

pub(super) fn write(path: &Path, data: &str) -> Result<(), CgroupError> {
    fs::write(path, data).map_err(|e| io_error(CgroupOp::Write, path, Some(data), e))
}

/// The file's text; a missing file reads as empty (a plain directory in a
/// test tree, or a control file this kernel does not have).
pub(super) fn read(path: &Path) -> Result<String, CgroupError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(io_error(CgroupOp::Read, path, None, e)),
    }
}

pub(super) fn read_cpuset(path: &Path) -> Result<CpuSet, CgroupError> {
    let text = read(path)?;
    CpuSet::parse_list(text.trim()).map_err(|err| CgroupError::Malformed {
        path: path.to_path_buf(),
        text: text.trim().to_string(),
        reason: err.to_string(),
    })
}

pub(super) fn read_pids(path: &Path) -> Result<Vec<u32>, CgroupError> {
    let text = read(path)?;
    text.split_whitespace()
        .map(|word| {
            word.parse().map_err(|_| CgroupError::Malformed {
                path: path.to_path_buf(),
                text: word.to_string(),
                reason: "not a process id".to_string(),
            })
        })
        .collect()
}

/// The parent of process `pid`, from `<proc>/<pid>/stat` (`None` when the
/// process is gone or the file does not say). The command name in
/// parentheses may hold spaces and parentheses: the state and the parent
/// come after its last `)`.
pub(super) fn parent_process(proc_root: &Path, pid: u32) -> Option<u32> {
    let text = fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    let (_, after_name) = text.rsplit_once(')')?;
    let mut fields = after_name.split_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// The most cgroups below a run's that [`read_pids_below`] and
/// [`remove_dir_below`] visit: more is an error (the run counts as running,
/// its cgroup stays), not an unbounded walk.
pub(super) const MAX_NESTED_CGROUPS: usize = 1024;

/// The cgroup directories directly below `dir` (none when it is gone).
fn subdirs(dir: &Path) -> Result<Vec<std::path::PathBuf>, CgroupError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(CgroupOp::ListDir, dir, None, e)),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(CgroupOp::ListDir, dir, None, e))?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            dirs.push(entry.path());
        }
    }
    Ok(dirs)
}

/// `dir` and the cgroups below it, parents before children (at most
/// [`MAX_NESTED_CGROUPS`] below it).
fn tree(dir: &Path) -> Result<Vec<std::path::PathBuf>, CgroupError> {
    let mut found = vec![dir.to_path_buf()];
    let mut next = 0;
    while next < found.len() {
        let below = subdirs(&found[next])?;
        next += 1;
        if found.len() + below.len() > MAX_NESTED_CGROUPS + 1 {
            return Err(CgroupError::Malformed {
                path: dir.to_path_buf(),
                text: String::new(),
                reason: format!("more than {MAX_NESTED_CGROUPS} cgroups below it"),
            });
        }
        found.extend(below);
    }
    Ok(found)
}

/// The processes in cgroup `dir` and in every cgroup below it: a run's
/// process that moved into a cgroup of its own below the run's (a nested
/// runtime, a job that delegates) is still the run's.
pub(super) fn read_pids_below(dir: &Path) -> Result<Vec<u32>, CgroupError> {
    let mut pids = Vec::new();
    for here in tree(dir)? {
        pids.extend(read_pids(&here.join("cgroup.procs"))?);
    }
    Ok(pids)
}

/// Removes cgroup `dir` with the cgroups below it, children first (the
/// kernel removes a cgroup only once it has none); a missing one is fine.
pub(super) fn remove_dir_below(dir: &Path) -> Result<(), CgroupError> {
    for here in tree(dir)?.iter().rev() {
        remove_dir(here)?;
    }
    Ok(())
}

/// Creates `dir`; an existing directory is fine.
pub(super) fn create_dir(dir: &Path) -> Result<(), CgroupError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(io_error(CgroupOp::CreateDir, dir, None, e)),
    }
}

/// Removes `dir`; a missing directory is fine.
pub(super) fn remove_dir(dir: &Path) -> Result<(), CgroupError> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(CgroupOp::RemoveDir, dir, None, e)),
    }
}

/// v1: an intermediate cpuset created empty gets its parent's cpus and
/// mems, so that tasks (and Pinion's root) can live below it.
pub(super) fn inherit_cpuset(dir: &Path) -> Result<(), CgroupError> {
    for file in ["cpuset.mems", "cpuset.cpus"] {
        inherit(dir, file)?;
    }
    Ok(())
}

/// v1: gives `dir` its parent's `cpuset.mems` when it has none yet.
pub(super) fn inherit_mems(dir: &Path) -> Result<(), CgroupError> {
    inherit(dir, "cpuset.mems")
}

fn inherit(dir: &Path, file: &str) -> Result<(), CgroupError> {
    if read(&dir.join(file))?.trim().is_empty() {
        copy_from_parent(dir, file, file)?;
    }
    Ok(())
}

/// Writes the list in the parent's file `from` into `dir`'s file `to`.
pub(super) fn copy_from_parent(dir: &Path, from: &str, to: &str) -> Result<(), CgroupError> {
    let Some(parent) = dir.parent() else {
        return Ok(());
    };
    let value = read(&parent.join(from))?;
    write(&dir.join(to), value.trim())
}

/// v2: enables the cpuset controller for the children of `dir`, and the
/// cpu and memory controllers where `dir` offers them (its
/// `cgroup.controllers`), for the resource settings of standalone runs. A
/// kernel that refuses the optional ones still gets cpuset (resource writes
/// then fail naming their file).
pub(super) fn enable_controllers(dir: &Path) -> Result<(), CgroupError> {
    let path = dir.join("cgroup.subtree_control");
    let enabled = read(&path)?;
    let enabled: Vec<&str> = enabled
        .split_whitespace()
        .map(|c| c.trim_start_matches('+'))
        .collect();
    let offered = read(&dir.join("cgroup.controllers"))?;
    let mut missing: Vec<&str> = ["cpuset", "cpu", "memory"]
        .into_iter()
        .filter(|c| !enabled.contains(c))
        .filter(|c| *c == "cpuset" || offered.split_whitespace().any(|o| o == *c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let all = missing
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    if write(&path, &all).is_ok() {
        return Ok(());
    }
    missing.retain(|c| *c == "cpuset");
    if missing.is_empty() {
        Ok(())
    } else {
        write(&path, "+cpuset")
    }
}

/// v2: enables only the cpuset controller for the children of `dir` when
/// its `cgroup.subtree_control` lacks it (housekeeping cgroups: Pinion asks
/// for nothing else there).
pub(super) fn enable_cpuset(dir: &Path) -> Result<(), CgroupError> {
    let path = dir.join("cgroup.subtree_control");
    let enabled = read(&path)?;
    if enabled
        .split_whitespace()
        .any(|c| c.trim_start_matches('+') == "cpuset")
    {
        return Ok(());
    }
    write(&path, "+cpuset")
}

/// Child directories of `root` whose names are valid cgroup names.
pub(super) fn list_children(root: &Path) -> Result<Vec<CgroupName>, CgroupError> {
    let mut names: Vec<CgroupName> = subdirs(root)?
        .iter()
        .filter_map(|dir| dir.file_name()?.to_str())
        .filter_map(|name| CgroupName::new(name).ok())
        .collect();
    names.sort();
    Ok(names)
}
