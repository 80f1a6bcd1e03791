//! An in-memory [`CpusetHost`] for tests of code that drives cgroups: it
//! keeps the same rules that matter to callers (children must exist, a
//! child with processes cannot be removed) and lets a test inspect and
//! change what is "on disk" (drift, processes exiting). Clones share state.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use pinion_core::placement::ResourceSettings;
use pinion_core::CpuSet;

use super::{
    resources, CgroupError, CgroupName, CgroupOp, CgroupVersion, ContainerCgroup, ContainerCpuset,
    CpusetHost,
};

/// One fake cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeCgroup {
    pub cpus: CpuSet,
    pub mems: CpuSet,
    pub pids: Vec<u32>,
    /// Resource files as written (`cpu.max` → `max 100000`), by the
    /// tree's [`FakeTree::version`] layout.
    pub files: BTreeMap<String, String>,
    /// Every resource file write, in order: (file, data).
    pub writes: Vec<(String, String)>,
}

/// Shared fake cgroup tree.
#[derive(Debug, Clone, Default)]
pub struct FakeCgroups {
    inner: Arc<Mutex<FakeTree>>,
}

/// The fake's content.
#[derive(Debug, Default)]
pub struct FakeTree {
    pub root: Option<(CpuSet, CpuSet)>,
    pub children: BTreeMap<CgroupName, FakeCgroup>,
    /// When set, every write fails (to test error paths).
    pub fail_writes: bool,
    /// Resource files (`memory.max`, `cpu.max`…) whose writes fail, as the
    /// kernel refuses a value it cannot take.
    pub fail_files: std::collections::BTreeSet<String>,
    /// The layout of resource files (v2 unless a test says otherwise).
    pub version: CgroupVersion,
    /// The runtime's containers' cgroups, as a test says the runtime set
    /// them (absent: gone).
    pub containers: BTreeMap<ContainerCgroup, ContainerCpuset>,
    /// Housekeeping cgroups (outside Pinion's root) and their
    /// `cpuset.cpus` (`None`: empty; absent: no such cgroup).
    pub housekeeping: BTreeMap<ContainerCgroup, Option<CpuSet>>,
    /// Every cpus write and process move, in order: `set NAME CPUS` for
    /// Pinion's children, `pid NAME PID`, `housekeeping PATH CPUS` for
    /// housekeeping cgroups.
    pub log: Vec<String>,
}

impl FakeCgroups {
    /// The tree, for inspection or changes.
    ///
    /// # Panics
    /// When a test panicked while holding the lock.
    pub fn tree(&self) -> MutexGuard<'_, FakeTree> {
        self.inner.lock().expect("fake cgroup lock")
    }
}

fn not_found(name: &CgroupName, op: CgroupOp) -> CgroupError {
    CgroupError::Io {
        op,
        path: name.as_str().into(),
        data: None,
        source: std::io::ErrorKind::NotFound.into(),
    }
}

fn check_writable(tree: &FakeTree, name: &CgroupName) -> Result<(), CgroupError> {
    if tree.fail_writes {
        return Err(CgroupError::Io {
            op: CgroupOp::Write,
            path: name.as_str().into(),
            data: None,
            source: std::io::ErrorKind::PermissionDenied.into(),
        });
    }
    Ok(())
}

impl CpusetHost for FakeCgroups {
    fn ensure_root(&mut self, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError> {
        self.tree().root = Some((cpus.clone(), mems.clone()));
        Ok(())
    }

    fn create(
        &mut self,
        name: &CgroupName,
        cpus: &CpuSet,
        mems: &CpuSet,
    ) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        // As cgroupfs: the directory is made before its cpuset is written,
        // and stays when that write fails.
        tree.children.entry(name.clone()).or_default();
        check_writable(&tree, name)?;
        let entry = tree.children.entry(name.clone()).or_default();
        entry.cpus = cpus.clone();
        entry.mems = mems.clone();
        tree.log.push(format!("set {name} {cpus}"));
        Ok(())
    }

    fn set(&mut self, name: &CgroupName, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        check_writable(&tree, name)?;
        let entry = tree
            .children
            .get_mut(name)
            .ok_or_else(|| not_found(name, CgroupOp::Write))?;
        entry.cpus = cpus.clone();
        entry.mems = mems.clone();
        tree.log.push(format!("set {name} {cpus}"));
        Ok(())
    }

    fn set_resources(
        &mut self,
        name: &CgroupName,
        desired: &ResourceSettings,
        applied: Option<&ResourceSettings>,
    ) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        check_writable(&tree, name)?;
        let version = tree.version;
        let entry = tree
            .children
            .get_mut(name)
            .ok_or_else(|| not_found(name, CgroupOp::Write))?;
        let files = entry.files.clone();
        let writes = resources::plan(
            version,
            std::path::Path::new(name.as_str()),
            desired,
            applied,
            &mut |_, file| Ok(files.get(file).cloned().unwrap_or_default()),
        )?;
        let fail_files = tree.fail_files.clone();
        let entry = tree
            .children
            .get_mut(name)
            .ok_or_else(|| not_found(name, CgroupOp::Write))?;
        for write in writes {
            if fail_files.contains(write.file) {
                return Err(CgroupError::Io {
                    op: CgroupOp::Write,
                    path: std::path::Path::new(name.as_str()).join(write.file),
                    data: Some(write.value),
                    source: std::io::ErrorKind::InvalidInput.into(),
                });
            }
            entry
                .files
                .insert(write.file.to_string(), write.value.clone());
            entry.writes.push((write.file.to_string(), write.value));
        }
        Ok(())
    }

    fn cpus(&self, name: &CgroupName) -> Result<CpuSet, CgroupError> {
        let tree = self.tree();
        let entry = tree
            .children
            .get(name)
            .ok_or_else(|| not_found(name, CgroupOp::Read))?;
        Ok(entry.cpus.clone())
    }

    fn add_pid(&mut self, name: &CgroupName, pid: u32) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        check_writable(&tree, name)?;
        let entry = tree
            .children
            .get_mut(name)
            .ok_or_else(|| not_found(name, CgroupOp::Write))?;
        entry.pids.push(pid);
        tree.log.push(format!("pid {name} {pid}"));
        Ok(())
    }

    fn pids(&self, name: &CgroupName) -> Result<Vec<u32>, CgroupError> {
        let tree = self.tree();
        Ok(tree
            .children
            .get(name)
            .map(|c| c.pids.clone())
            .unwrap_or_default())
    }

    fn remove(&mut self, name: &CgroupName) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        if tree.children.get(name).is_some_and(|c| !c.pids.is_empty()) {
            return Err(CgroupError::Io {
                op: CgroupOp::RemoveDir,
                path: name.as_str().into(),
                data: None,
                source: std::io::ErrorKind::ResourceBusy.into(),
            });
        }
        tree.children.remove(name);
        Ok(())
    }

    fn list(&self) -> Result<Vec<CgroupName>, CgroupError> {
        Ok(self.tree().children.keys().cloned().collect())
    }

    fn container_cpuset(&self, cgroup: &ContainerCgroup) -> Result<ContainerCpuset, CgroupError> {
        self.tree()
            .containers
            .get(cgroup)
            .cloned()
            .ok_or_else(|| CgroupError::Io {
                op: CgroupOp::Read,
                path: cgroup.relative().to_path_buf(),
                data: None,
                source: std::io::ErrorKind::NotFound.into(),
            })
    }

    fn housekeeping_cpus(&self, cgroup: &ContainerCgroup) -> Result<Option<CpuSet>, CgroupError> {
        self.tree()
            .housekeeping
            .get(cgroup)
            .cloned()
            .ok_or_else(|| CgroupError::Io {
                op: CgroupOp::Read,
                path: cgroup.relative().to_path_buf(),
                data: None,
                source: std::io::ErrorKind::NotFound.into(),
            })
    }

    fn set_housekeeping_cpus(
        &mut self,
        cgroup: &ContainerCgroup,
        cpus: &CpuSet,
    ) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        let failing = tree.fail_writes;
        let Some(entry) = tree.housekeeping.get_mut(cgroup).filter(|_| !failing) else {
            return Err(CgroupError::Io {
                op: CgroupOp::Write,
                path: cgroup.relative().to_path_buf(),
                data: Some(cpus.to_string()),
                source: if failing {
                    std::io::ErrorKind::PermissionDenied
                } else {
                    std::io::ErrorKind::NotFound
                }
                .into(),
            });
        };
        *entry = Some(cpus.clone());
        tree.log.push(format!("housekeeping {cgroup} {cpus}"));
        Ok(())
    }
}
