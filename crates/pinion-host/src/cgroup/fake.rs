//! An in-memory [`CpusetHost`] for tests of code that drives cgroups: it
//! keeps the same rules that matter to callers (children must exist, a
//! child with processes cannot be removed) and lets a test inspect and
//! change what is "on disk" (drift, processes exiting). Clones share state.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use pinion_core::placement::ResourceSettings;
use pinion_core::CpuSet;

use pinion_core::partition::PartitionMode;

use super::{
    partition, resources, CgroupError, CgroupName, CgroupOp, CgroupVersion, ContainerCgroup,
    ContainerCpuset, CpusetHost, PartitionOutcome, PartitionTarget, RootProcess,
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
    /// Pinion's children whose `cgroup.procs` cannot be read (an LSM's
    /// `EACCES`, an `EIO`): listing their processes fails.
    pub unreadable_procs: std::collections::BTreeSet<CgroupName>,
    /// The runtime's containers' cgroups, as a test says the runtime set
    /// them (absent: gone).
    pub containers: BTreeMap<ContainerCgroup, ContainerCpuset>,
    /// The cpuset partition files (runs' under `pinion/`).
    pub partitions: FakePartitions,
    /// Housekeeping cgroups (outside Pinion's root) and their
    /// `cpuset.cpus` (`None`: empty; absent: no such cgroup).
    pub housekeeping: BTreeMap<ContainerCgroup, Option<CpuSet>>,
    /// Cgroups outside Pinion's root whose memory Pinion limits (KEP-5894's
    /// system partition) and their limit (`None`: unlimited; absent: no such
    /// cgroup). A write fails when the tree's layout's limit file
    /// (`memory.max`, `memory.limit_in_bytes`) is in `fail_files`.
    pub memory_limits: BTreeMap<ContainerCgroup, Option<u64>>,
    /// The cgroups outside Pinion's root whose CFS quota was lifted, in
    /// order, once per write.
    pub quota_lifted: Vec<ContainerCgroup>,
    /// Processes that cannot be moved (they exited): `add_pid` of one
    /// fails with `ESRCH`.
    pub gone_pids: std::collections::BTreeSet<u32>,
    /// Processes in Pinion's root itself ([`FakeTree::all_cpus_offline_v1`]
    /// puts a child's there, as a cgroup v1 kernel does).
    pub root_processes: Vec<RootProcess>,
    /// Every cpus write and process move, in order: `set NAME CPUS` for
    /// Pinion's children, `pid NAME PID`, `housekeeping PATH CPUS` for
    /// housekeeping cgroups, `partition TARGET CPUS` / `unpartition TARGET
    /// CPUS` for cpuset partitions made and taken apart (v2).
    pub log: Vec<String>,
}

impl FakeTree {
    /// The memory nodes of Pinion's root (none before it is made): what a
    /// child without its own has, as cgroupfs.
    fn root_mems(&self) -> CpuSet {
        self.root
            .as_ref()
            .map(|(_, mems)| mems.clone())
            .unwrap_or_default()
    }
}

impl FakeTree {
    /// What a cgroup v1 kernel does when all the CPUs of child `name` go
    /// offline: its cpus become empty and its processes move to Pinion's
    /// root, each with its parent from `parents` (pid, parent).
    ///
    /// # Panics
    /// When there is no child `name`.
    pub fn all_cpus_offline_v1(&mut self, name: &CgroupName, parents: &[(u32, u32)]) {
        let child = self.children.get_mut(name).expect("no such fake cgroup");
        child.cpus = CpuSet::new();
        for pid in std::mem::take(&mut child.pids) {
            let parent = parents.iter().find(|(p, _)| *p == pid).map(|(_, up)| *up);
            self.root_processes.push(RootProcess { pid, parent });
        }
    }
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
        let inherited = tree.root_mems();
        let entry = tree.children.entry(name.clone()).or_default();
        entry.cpus = cpus.clone();
        // As cgroupfs: no memory nodes asked, the parent's.
        entry.mems = if mems.is_empty() {
            inherited
        } else {
            mems.clone()
        };
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
        if !mems.is_empty() {
            entry.mems = mems.clone();
        }
        tree.log.push(format!("set {name} {cpus}"));
        Ok(())
    }

    fn reset_mems(&mut self, name: &CgroupName) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        check_writable(&tree, name)?;
        let inherited = tree.root_mems();
        let entry = tree
            .children
            .get_mut(name)
            .ok_or_else(|| not_found(name, CgroupOp::Write))?;
        entry.mems = inherited;
        tree.log.push(format!("reset mems {name}"));
        Ok(())
    }

    fn write_resources(
        &mut self,
        name: &CgroupName,
        desired: &ResourceSettings,
        applied: Option<&ResourceSettings>,
        taken_back: &ResourceSettings,
    ) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        check_writable(&tree, name)?;
        let version = tree.version;
        let entry = tree
            .children
            .get_mut(name)
            .ok_or_else(|| not_found(name, CgroupOp::Write))?;
        let files = entry.files.clone();
        let writes = resources::plan_taking_back(
            version,
            std::path::Path::new(name.as_str()),
            desired,
            applied,
            taken_back,
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
        let v1 = tree.version == CgroupVersion::V1;
        check_writable(&tree, name)?;
        if tree.gone_pids.contains(&pid) {
            return Err(CgroupError::Io {
                op: CgroupOp::Write,
                path: format!("{name}/cgroup.procs").into(),
                data: Some(pid.to_string()),
                source: std::io::Error::from_raw_os_error(libc::ESRCH),
            });
        }
        let entry = tree
            .children
            .get_mut(name)
            .ok_or_else(|| not_found(name, CgroupOp::Write))?;
        if entry.cpus.is_empty() && v1 {
            // A v1 cpuset without CPUs takes no process.
            return Err(CgroupError::Io {
                op: CgroupOp::Write,
                path: format!("{name}/cgroup.procs").into(),
                data: Some(pid.to_string()),
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            });
        }
        // The kernel lists a process once, however often it is written.
        if !entry.pids.contains(&pid) {
            entry.pids.push(pid);
        }
        tree.root_processes.retain(|p| p.pid != pid);
        tree.log.push(format!("pid {name} {pid}"));
        Ok(())
    }

    fn root_processes(&self) -> Result<Vec<RootProcess>, CgroupError> {
        Ok(self.tree().root_processes.clone())
    }

    fn pids(&self, name: &CgroupName) -> Result<Vec<u32>, CgroupError> {
        let tree = self.tree();
        if tree.unreadable_procs.contains(name) {
            return Err(CgroupError::Io {
                op: CgroupOp::Read,
                path: format!("{name}/cgroup.procs").into(),
                data: None,
                source: std::io::ErrorKind::PermissionDenied.into(),
            });
        }
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

    fn make_partition(
        &mut self,
        target: &PartitionTarget,
        cpus: &CpuSet,
        mode: PartitionMode,
    ) -> PartitionOutcome {
        let mut tree = self.tree();
        if tree.version == CgroupVersion::V1 {
            return PartitionOutcome::Fallback {
                reason: super::V1_NO_PARTITIONS.to_string(),
            };
        }
        tree.log.push(format!("partition {target} {cpus}"));
        partition::make(&mut tree.partitions, &fake_chain(target), cpus, mode)
    }

    fn unmake_partition(
        &mut self,
        target: &PartitionTarget,
        cpus: &CpuSet,
    ) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        if tree.version == CgroupVersion::V1 {
            return Ok(());
        }
        tree.log.push(format!("unpartition {target} {cpus}"));
        partition::unmake(&mut tree.partitions, &fake_chain(target), cpus)
    }

    fn partition_of(&self, target: &PartitionTarget) -> Option<(String, CpuSet)> {
        let tree = self.tree();
        if tree.version == CgroupVersion::V1 {
            return None;
        }
        partition::current(&tree.partitions, &fake_chain(target))
    }

    fn isolated_cpus(&self) -> Option<CpuSet> {
        let tree = self.tree();
        (tree.version == CgroupVersion::V2 && !tree.partitions.unsupported)
            .then(|| tree.partitions.isolated())
    }

    fn container_cpuset(&self, cgroup: &ContainerCgroup) -> Result<ContainerCpuset, CgroupError> {
        self.tree()
            .containers
            .get(cgroup)
            .cloned()
            .ok_or_else(|| missing(cgroup))
    }

    fn housekeeping_cpus(&self, cgroup: &ContainerCgroup) -> Result<Option<CpuSet>, CgroupError> {
        self.tree()
            .housekeeping
            .get(cgroup)
            .cloned()
            .ok_or_else(|| missing(cgroup))
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

    fn set_memory_limit(
        &mut self,
        cgroup: &ContainerCgroup,
        bytes: u64,
    ) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        let file = resources::memory_limit_file(tree.version);
        let refused = tree.fail_writes || tree.fail_files.contains(file);
        let kind = match tree.memory_limits.get(cgroup) {
            None => Some(std::io::ErrorKind::NotFound),
            Some(_) if refused => Some(std::io::ErrorKind::InvalidInput),
            Some(_) => None,
        };
        if let Some(kind) = kind {
            return Err(CgroupError::Io {
                op: CgroupOp::Write,
                path: cgroup.relative().join(file),
                data: Some(bytes.to_string()),
                source: kind.into(),
            });
        }
        tree.memory_limits.insert(cgroup.clone(), Some(bytes));
        tree.log.push(format!("memory {cgroup} {bytes}"));
        Ok(())
    }

    fn lift_cpu_quota(&mut self, cgroup: &ContainerCgroup) -> Result<(), CgroupError> {
        let mut tree = self.tree();
        if tree.fail_writes {
            return Err(CgroupError::Io {
                op: CgroupOp::Write,
                path: cgroup.relative().to_path_buf(),
                data: Some("max".to_string()),
                source: std::io::ErrorKind::PermissionDenied.into(),
            });
        }
        tree.quota_lifted.push(cgroup.clone());
        tree.log.push(format!("quota {cgroup} max"));
        Ok(())
    }
}

/// The read error of a cgroup the fake does not have (as the real host's:
/// an I/O error of kind `NotFound`).
fn missing(cgroup: &ContainerCgroup) -> CgroupError {
    CgroupError::Io {
        op: CgroupOp::Read,
        path: cgroup.relative().to_path_buf(),
        data: None,
        source: std::io::ErrorKind::NotFound.into(),
    }
}

/// The fake's partition path of `target`: a run's is `pinion/<name>`
/// below `pinion`, a container's the directories of its cgroup.
fn fake_chain(target: &PartitionTarget) -> Vec<std::path::PathBuf> {
    let relative = match target {
        PartitionTarget::Run(name) => std::path::Path::new("pinion").join(name.as_str()),
        PartitionTarget::Container(cgroup) => cgroup.relative().to_path_buf(),
    };
    super::chain_below(std::path::Path::new(""), &relative)
}

/// The fake's cpuset partition files: a small model of the kernel's rules
/// (a directory's `cpuset.cpus.exclusive` must lie within its parent's and
/// apart from its siblings', a partition is valid only when its exclusive CPUs are listed by every
/// ancestor) so that tests see the same writes, in the same order, as on a
/// real cgroupfs, and the kernel's refusals.
#[derive(Debug, Default)]
pub struct FakePartitions {
    /// Files by directory (relative to the hierarchy's mount: a run's is
    /// `pinion/<name>`), as written.
    pub files: BTreeMap<std::path::PathBuf, BTreeMap<String, String>>,
    /// Every write, in order: (directory, file, data).
    pub writes: Vec<(String, String, String)>,
    /// A kernel without `cpuset.cpus.exclusive` (before 6.7).
    pub unsupported: bool,
    /// The reason a partition write reads back invalid, as a kernel that
    /// refuses it (`Parent is not a partition root`…).
    pub reject: Option<String>,
    /// Files whose writes fail.
    pub fail_files: std::collections::BTreeSet<String>,
    /// Directories removed ([`FakePartitions::remove_dir`]): their files
    /// read as missing and writes fail with `NotFound`.
    pub removed: std::collections::BTreeSet<std::path::PathBuf>,
    /// Pinion's records by directory (the extended attribute; not in
    /// `writes`). Their writes fail when `fail_files` names the attribute.
    pub records: BTreeMap<std::path::PathBuf, String>,
}

impl FakePartitions {
    /// A file as written (empty when never written).
    #[must_use]
    pub fn get(&self, dir: &std::path::Path, file: &str) -> String {
        self.files
            .get(dir)
            .and_then(|f| f.get(file))
            .cloned()
            .unwrap_or_default()
    }

    fn exclusive(&self, dir: &std::path::Path) -> CpuSet {
        CpuSet::parse_list(self.get(dir, "cpuset.cpus.exclusive").trim()).unwrap_or_default()
    }

    /// The ancestors of `dir` below the mount, nearest first.
    fn ancestors(dir: &std::path::Path) -> impl Iterator<Item = &std::path::Path> {
        dir.ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
    }

    /// The CPUs of valid isolated partitions (the root's
    /// `cpuset.cpus.isolated`).
    #[must_use]
    pub fn isolated(&self) -> CpuSet {
        let mut all = CpuSet::new();
        for (dir, files) in &self.files {
            if files.get("cpuset.cpus.partition").map(String::as_str) == Some("isolated") {
                all.union_with(&self.exclusive(dir));
            }
        }
        all
    }

    /// Removes `dir` and what is below it, as the runtime removes a
    /// container's cgroup (the kernel drops a partition with its cgroup;
    /// the ancestors' `cpuset.cpus.exclusive` keep what they list).
    pub fn remove_dir(&mut self, dir: &str) {
        let dir = std::path::PathBuf::from(dir);
        self.files.retain(|d, _| !d.starts_with(&dir));
        self.records.retain(|d, _| !d.starts_with(&dir));
        self.removed.insert(dir);
    }

    fn is_removed(&self, dir: &std::path::Path) -> bool {
        self.removed.iter().any(|gone| dir.starts_with(gone))
    }

    /// The partition file of `dir` (`member` when never written).
    #[must_use]
    pub fn partition(&self, dir: &str) -> String {
        let text = self.get(std::path::Path::new(dir), "cpuset.cpus.partition");
        if text.is_empty() {
            "member".to_string()
        } else {
            text
        }
    }
}

impl super::partition::PartitionFiles for FakePartitions {
    fn read(&self, dir: &std::path::Path, file: &str) -> Result<Option<String>, CgroupError> {
        let partition_file = file.starts_with("cpuset.cpus.exclusive")
            || file == "cpuset.cpus.partition"
            || file == super::partition::ISOLATED_FILE;
        if (self.unsupported && partition_file) || self.is_removed(dir) {
            return Ok(None);
        }
        if file == super::partition::ISOLATED_FILE {
            return Ok(Some(self.isolated().to_string()));
        }
        if file == "cpuset.cpus.exclusive.effective" {
            let own = self.exclusive(dir);
            let valid =
                !own.is_empty() && Self::ancestors(dir).all(|a| own.is_subset(&self.exclusive(a)));
            return Ok(Some(if valid {
                own.to_string()
            } else {
                String::new()
            }));
        }
        let text = self.get(dir, file);
        Ok(Some(
            if text.is_empty() && file == "cpuset.cpus.partition" {
                "member".to_string()
            } else {
                text
            },
        ))
    }

    fn write(&mut self, dir: &std::path::Path, file: &str, value: &str) -> Result<(), CgroupError> {
        let refuse = |kind: std::io::ErrorKind| CgroupError::Io {
            op: CgroupOp::Write,
            path: dir.join(file),
            data: Some(value.to_string()),
            source: kind.into(),
        };
        if self.is_removed(dir) {
            return Err(refuse(std::io::ErrorKind::NotFound));
        }
        if self.fail_files.contains(file) {
            return Err(refuse(std::io::ErrorKind::PermissionDenied));
        }
        let mut stored = value.trim().to_string();
        if file == "cpuset.cpus.exclusive" {
            let set = CpuSet::parse_list(&stored)
                .map_err(|_| refuse(std::io::ErrorKind::InvalidInput))?;
            // The kernel's rule: within the parent's exclusive CPUs (the
            // root's children may claim any).
            if let Some(parent) = Self::ancestors(dir).next() {
                if !set.is_subset(&self.exclusive(parent)) {
                    return Err(refuse(std::io::ErrorKind::InvalidInput));
                }
            }
            // And disjoint from the siblings' (EINVAL before Linux 7.0,
            // spec isolation.md §1.5).
            let overlaps_sibling = self.files.keys().any(|other| {
                other != dir
                    && other.parent() == dir.parent()
                    && !self.is_removed(other)
                    && !self.exclusive(other).is_disjoint(&set)
            });
            if overlaps_sibling {
                return Err(refuse(std::io::ErrorKind::InvalidInput));
            }
        }
        if file == "cpuset.cpus.partition" && stored != "member" {
            let own = self.exclusive(dir);
            let reason = self.reject.clone().or_else(|| {
                (own.is_empty() || !Self::ancestors(dir).all(|a| own.is_subset(&self.exclusive(a))))
                    .then(|| "Invalid cpu list in cpuset.cpus.exclusive".to_string())
            });
            if let Some(reason) = reason {
                stored = format!("{stored} invalid ({reason})");
            }
        }
        self.writes.push((
            dir.display().to_string(),
            file.to_string(),
            value.to_string(),
        ));
        self.files
            .entry(dir.to_path_buf())
            .or_default()
            .insert(file.to_string(), stored);
        Ok(())
    }

    fn read_record(&self, dir: &std::path::Path) -> Result<Option<String>, CgroupError> {
        Ok(self.records.get(dir).cloned())
    }

    fn write_record(&mut self, dir: &std::path::Path, value: &str) -> Result<(), CgroupError> {
        let name = pinion_core::partition::PartitionFile::Record.name();
        let refuse = |kind: std::io::ErrorKind| CgroupError::Io {
            op: CgroupOp::Write,
            path: dir.join(name),
            data: Some(value.to_string()),
            source: kind.into(),
        };
        if self.is_removed(dir) {
            return Err(refuse(std::io::ErrorKind::NotFound));
        }
        if self.fail_files.contains(name) {
            return Err(refuse(std::io::ErrorKind::Unsupported));
        }
        self.records.insert(dir.to_path_buf(), value.to_string());
        Ok(())
    }
}
