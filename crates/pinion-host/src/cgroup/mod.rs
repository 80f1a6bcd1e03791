//! cgroupfs cpuset writers for cgroup v1 (the `cpuset` hierarchy) and v2
//! (the unified hierarchy with the cpuset controller).
//!
//! Pinion keeps its cgroups in one directory, *Pinion's root* (by default
//! `<cpuset mount>/pinion`; not `pinion.slice`, which systemd would take
//! as its own unit). Each managed workload gets one child directory named by
//! a validated [`CgroupName`], so no name can reach outside the root.
//!
//! v1 rules kept here: a new cpuset has empty `cpuset.cpus`/`cpuset.mems`
//! and refuses tasks until both are set, and a child must stay a subset of
//! its parent, so the root grows before its children (top-down) and
//! children shrink before the root (bottom-up). v2: the cpuset controller is
//! enabled in `cgroup.subtree_control` of every ancestor from the mount down
//! to Pinion's root.
//!
//! [`CpusetHost`] is the seam the agent's tests replace ([`fake::FakeCgroups`]).

pub mod container;
pub mod fake;
mod fs_ops;
pub mod mountinfo;
mod name;
pub mod partition;
pub mod resources;

use std::io;
use std::path::{Path, PathBuf};

use pinion_core::partition::{PartitionFile, PartitionMode};
use pinion_core::placement::ResourceSettings;
use pinion_core::CpuSet;

pub use container::ContainerCgroup;
pub use name::{CgroupName, MAX_NAME_LEN};
pub use partition::{PartitionOutcome, PartitionTarget};
use resources::Controller;

/// The closed set of cgroup versions Pinion writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    #[default]
    V2,
}

impl std::fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::V1 => "v1",
            Self::V2 => "v2",
        })
    }
}

/// The operation a [`CgroupError::Io`] failed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupOp {
    Read,
    Write,
    CreateDir,
    RemoveDir,
    ListDir,
}

impl std::fmt::Display for CgroupOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::CreateDir => "create directory",
            Self::RemoveDir => "remove directory",
            Self::ListDir => "list directory",
        })
    }
}

/// Errors of cgroupfs access.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("invalid cgroup name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("{op} {}{}: {source}", .path.display(), data_suffix(.data.as_deref()))]
    Io {
        op: CgroupOp,
        path: PathBuf,
        /// For writes: the data written.
        data: Option<String>,
        source: io::Error,
    },
    #[error("{}: line {line} is not a mountinfo line: {text:?}", .path.display())]
    MountInfo {
        path: PathBuf,
        line: usize,
        text: String,
    },
    #[error("no cgroup v1 cpuset hierarchy and no cgroup v2 hierarchy with the cpuset controller in {}", .mountinfo.display())]
    NoCpusetHierarchy { mountinfo: PathBuf },
    #[error("cgroup root {} is not inside a cpuset hierarchy listed in {}", .root.display(), .mountinfo.display())]
    RootOutsideHierarchy { root: PathBuf, mountinfo: PathBuf },
    #[error("cannot set {file} of {}: {reason}", .path.display())]
    Setting {
        path: PathBuf,
        file: &'static str,
        reason: String,
    },
    #[error("{}: unexpected content {text:?} ({reason})", .path.display())]
    Malformed {
        path: PathBuf,
        text: String,
        reason: String,
    },
}

impl CgroupError {
    /// Whether the cgroup (or file) read or written does not exist: an I/O
    /// error of kind `NotFound` — a container or pod that ended.
    #[must_use]
    pub fn is_missing(&self) -> bool {
        matches!(self, CgroupError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

fn data_suffix(data: Option<&str>) -> String {
    data.map(|d| format!(" (data {d:?})")).unwrap_or_default()
}

/// What a runtime container's cgroup holds (`None`: the file is empty,
/// nothing set there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerCpuset {
    pub cpus: Option<CpuSet>,
    pub mems: Option<CpuSet>,
}

/// A process in Pinion's root ([`CpusetHost::root_processes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootProcess {
    pub pid: u32,
    /// Its parent process (`None`: it could not be read, the process ended).
    pub parent: Option<u32>,
}

/// The most processes [`CpusetHost::root_processes`] lists; the rest wait
/// for the next call.
pub const MAX_ROOT_PROCESSES: usize = 4096;

/// What the agent needs from cgroupfs: Pinion's root and its children, and
/// reading the cpusets of the runtime's containers.
pub trait CpusetHost: Send {
    /// Creates Pinion's root (and its ancestors) as needed and sets its
    /// cpus and memory nodes.
    fn ensure_root(&mut self, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError>;
    /// Creates child `name` (if missing) and sets its cpus and mems (empty
    /// `mems`: the parent's).
    fn create(
        &mut self,
        name: &CgroupName,
        cpus: &CpuSet,
        mems: &CpuSet,
    ) -> Result<(), CgroupError>;
    /// Sets the cpus and mems of an existing child (empty `mems`: left as
    /// they are).
    fn set(&mut self, name: &CgroupName, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError>;
    /// Gives an existing child its parent's memory nodes again, after
    /// [`CpusetHost::set`] named some: the parent's list is written (v2:
    /// its `cpuset.mems.effective`, v1: its `cpuset.mems`). Emptying the
    /// file is no way back: a cpuset with processes that has memory nodes
    /// refuses to lose them all, v2 as v1 (`ENOSPC`).
    fn reset_mems(&mut self, name: &CgroupName) -> Result<(), CgroupError>;
    /// Writes the resource settings `desired` gives that differ from
    /// `applied` (what was written last; `None`: unknown) into child `name`,
    /// and a fresh cgroup's value for those `applied` gave and `desired` no
    /// longer gives ([`resources::plan`]).
    fn set_resources(
        &mut self,
        name: &CgroupName,
        desired: &ResourceSettings,
        applied: Option<&ResourceSettings>,
    ) -> Result<(), CgroupError> {
        let taken_back = applied.map(|a| desired.taken_back(a)).unwrap_or_default();
        self.write_resources(name, desired, applied, &taken_back)
    }
    /// Writes the resource settings `desired` gives that differ from
    /// `applied` into child `name`, and a fresh cgroup's value for each
    /// setting of `taken_back` — settings that may be in its files (given
    /// by a write that succeeded, or by one that failed part way) and that
    /// `desired` no longer gives ([`resources::plan_taking_back`]).
    fn write_resources(
        &mut self,
        name: &CgroupName,
        desired: &ResourceSettings,
        applied: Option<&ResourceSettings>,
        taken_back: &ResourceSettings,
    ) -> Result<(), CgroupError>;
    /// The cpus a child is configured with (`cpuset.cpus`).
    fn cpus(&self, name: &CgroupName) -> Result<CpuSet, CgroupError>;
    /// Moves process `pid` into child `name`.
    fn add_pid(&mut self, name: &CgroupName, pid: u32) -> Result<(), CgroupError>;
    /// The processes in child `name`, and in the cgroups below it (a run's
    /// process may have moved into one of its own there).
    fn pids(&self, name: &CgroupName) -> Result<Vec<u32>, CgroupError>;
    /// The processes in Pinion's root itself, not in a child, each with
    /// its parent. Pinion never puts one there; a cgroup v1 kernel does:
    /// when all the CPUs of a cpuset go offline it moves the cpuset's
    /// processes to the nearest ancestor that has CPUs, Pinion's root (v2
    /// leaves them where they are). At most [`MAX_ROOT_PROCESSES`].
    fn root_processes(&self) -> Result<Vec<RootProcess>, CgroupError>;
    /// Removes child `name` with the cgroups below it (fails while they
    /// have processes); a missing child is not an error.
    fn remove(&mut self, name: &CgroupName) -> Result<(), CgroupError>;
    /// Pinion's children (directories with a valid name).
    fn list(&self) -> Result<Vec<CgroupName>, CgroupError>;
    /// The `cpuset.cpus` and `cpuset.mems` of a container the runtime
    /// created, below the cpuset hierarchy's mount (read only: the runtime
    /// writes them). A cgroup that is gone is an I/O error of kind
    /// `NotFound`.
    fn container_cpuset(&self, cgroup: &ContainerCgroup) -> Result<ContainerCpuset, CgroupError>;
    /// Makes `target`'s cgroup a `mode` cpuset partition of `cpus`
    /// ([`partition::make`]); a host that cannot answers a fallback with
    /// the reason.
    fn make_partition(
        &mut self,
        target: &PartitionTarget,
        cpus: &CpuSet,
        mode: PartitionMode,
    ) -> PartitionOutcome {
        let _ = (target, cpus, mode);
        PartitionOutcome::Fallback {
            reason: "this host writes no cpuset partitions".to_string(),
        }
    }
    /// Takes apart the partition of `cpus` at `target`'s cgroup
    /// ([`partition::unmake`]).
    fn unmake_partition(
        &mut self,
        target: &PartitionTarget,
        cpus: &CpuSet,
    ) -> Result<(), CgroupError> {
        let _ = (target, cpus);
        Ok(())
    }
    /// The partition `target`'s cgroup is now, with the CPUs it claims
    /// ([`partition::current`]); `None` for a member, a gone cgroup, or a
    /// host without partitions.
    fn partition_of(&self, target: &PartitionTarget) -> Option<(String, CpuSet)> {
        let _ = target;
        None
    }
    /// The root's `cpuset.cpus.isolated` (`None`: not on this kernel or
    /// cgroup version).
    fn isolated_cpus(&self) -> Option<CpuSet> {
        None
    }
    /// The `cpuset.cpus` of a cgroup outside Pinion's root that Pinion keeps
    /// (config `housekeeping.cgroups`), below the hierarchy's mount (`None`:
    /// the file is empty). A missing cgroup is an I/O error of kind
    /// `NotFound`.
    fn housekeeping_cpus(&self, cgroup: &ContainerCgroup) -> Result<Option<CpuSet>, CgroupError>;
    /// Writes the `cpuset.cpus` of such a cgroup; on v2 first enables the
    /// cpuset controller in `cgroup.subtree_control` of each ancestor from
    /// the mount down where it is missing (and only it). A missing cgroup is
    /// an I/O error of kind `NotFound`; it is never created.
    fn set_housekeeping_cpus(
        &mut self,
        cgroup: &ContainerCgroup,
        cpus: &CpuSet,
    ) -> Result<(), CgroupError>;
    /// Limits the memory of a cgroup outside Pinion's root (KEP-5894's
    /// system partition) to `bytes`: `memory.max` on v2,
    /// `memory.limit_in_bytes` in the memory hierarchy on v1
    /// ([`resources::memory_limit_file`]). A missing cgroup is an I/O error
    /// of kind `NotFound`; it is never created. A cgroup without the memory
    /// controller is a [`CgroupError::Setting`] naming the file and value.
    fn set_memory_limit(&mut self, cgroup: &ContainerCgroup, bytes: u64)
        -> Result<(), CgroupError>;
    /// Lifts the CFS quota of a cgroup outside Pinion's root: the cgroup of
    /// a Kubernetes pod whose containers hold exclusive CPUs, as kubelet's
    /// `static` policy creates it (`DisableCPUQuotaWithExclusiveCPUs`,
    /// locked on since 1.37). `cpu.max` = `max` on v2 (its period kept),
    /// `cpu.cfs_quota_us` = `-1` in the cpu hierarchy on v1. A cgroup
    /// without the cpu controller has no quota: nothing is written. A
    /// missing cgroup is an I/O error of kind `NotFound`; it is never
    /// created.
    fn lift_cpu_quota(&mut self, cgroup: &ContainerCgroup) -> Result<(), CgroupError>;
}

/// Why cgroup v1 gets no partition.
pub const V1_NO_PARTITIONS: &str =
    "cgroup v1 has no cpuset partitions (cpuset.cpus.partition is cgroup v2's)";

/// The real cgroupfs's cpuset files, for [`partition`].
struct RealPartitionFiles;

impl partition::PartitionFiles for RealPartitionFiles {
    fn read(&self, dir: &Path, file: &str) -> Result<Option<String>, CgroupError> {
        let path = dir.join(file);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CgroupError::Io {
                op: CgroupOp::Read,
                path,
                data: None,
                source,
            }),
        }
    }

    fn write(&mut self, dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
        fs_ops::write(&dir.join(file), value)
    }

    /// The directory's extended attribute (the kernel bounds its size:
    /// 64 KiB at most). A filesystem without extended attributes has no
    /// record (writing one then fails, naming why), and neither has a
    /// directory removed since its claim was read.
    fn read_record(&self, dir: &Path) -> Result<Option<String>, CgroupError> {
        let name = PartitionFile::Record.name();
        match xattr::get(dir, name) {
            Ok(value) => Ok(value.map(|bytes| String::from_utf8_lossy(&bytes).into_owned())),
            Err(e)
                if e.raw_os_error() == Some(libc::EOPNOTSUPP)
                    || e.kind() == io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            Err(source) => Err(CgroupError::Io {
                op: CgroupOp::Read,
                path: dir.join(name),
                data: None,
                source,
            }),
        }
    }

    fn write_record(&mut self, dir: &Path, value: &str) -> Result<(), CgroupError> {
        let name = PartitionFile::Record.name();
        xattr::set(dir, name, value.as_bytes()).map_err(|source| CgroupError::Io {
            op: CgroupOp::Write,
            path: dir.join(name),
            data: Some(value.to_string()),
            source,
        })
    }
}

/// The real cgroupfs under one Pinion root.
#[derive(Debug, Clone)]
pub struct Cgroups {
    version: CgroupVersion,
    mount: PathBuf,
    root: PathBuf,
    /// v1: where the `cpu` and `memory` hierarchies are; in separate
    /// ones, Pinion's root and children are mirrored (same relative path)
    /// for the resource settings.
    v1_cpu: Hierarchy,
    v1_memory: Hierarchy,
}

/// Where a v1 controller's hierarchy is, seen from the cpuset one.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hierarchy {
    /// Not mounted (or not known: [`Cgroups::new`]).
    Absent,
    /// Mounted together with cpuset: the same directories.
    WithCpuset,
    /// Its own mount point.
    Separate(PathBuf),
}

impl Cgroups {
    /// Finds the cpuset hierarchy in the `mountinfo` file (mount points
    /// joined under `prefix`, `/` on a live machine). With `root`, it must
    /// lie inside one of them; without, the root is `<mount>/pinion` of the
    /// v1 cpuset hierarchy, else of a v2 one with the cpuset controller.
    pub fn detect(
        mountinfo: &Path,
        prefix: &Path,
        root: Option<&Path>,
    ) -> Result<Self, CgroupError> {
        let mounts = mountinfo::cpuset_mounts(mountinfo, prefix)?;
        if mounts.is_empty() {
            return Err(CgroupError::NoCpusetHierarchy {
                mountinfo: mountinfo.to_path_buf(),
            });
        }
        let mount =
            mountinfo::choose(&mounts, root).ok_or_else(|| CgroupError::RootOutsideHierarchy {
                root: root.map(Path::to_path_buf).unwrap_or_default(),
                mountinfo: mountinfo.to_path_buf(),
            })?;
        let root = root.map_or_else(|| mount.path.join("pinion"), Path::to_path_buf);
        let mut cgroups = Self::new(mount.version, mount.path, root);
        if cgroups.version == CgroupVersion::V1 {
            let cpu = mountinfo::v1_controller_mount(mountinfo, prefix, "cpu")?;
            let memory = mountinfo::v1_controller_mount(mountinfo, prefix, "memory")?;
            cgroups = cgroups.with_v1_hierarchies(cpu, memory);
        }
        Ok(cgroups)
    }

    /// v1: the mount points of the `cpu` and `memory` hierarchies (a
    /// hierarchy mounted together with cpuset is the cpuset one).
    #[must_use]
    pub fn with_v1_hierarchies(mut self, cpu: Option<PathBuf>, memory: Option<PathBuf>) -> Self {
        let hierarchy = |mount: Option<PathBuf>| match mount {
            None => Hierarchy::Absent,
            Some(m) if m == self.mount => Hierarchy::WithCpuset,
            Some(m) => Hierarchy::Separate(m),
        };
        self.v1_cpu = hierarchy(cpu);
        self.v1_memory = hierarchy(memory);
        self
    }

    /// A writer for a known layout (`root` must be below `mount`).
    #[must_use]
    pub fn new(version: CgroupVersion, mount: PathBuf, root: PathBuf) -> Self {
        Self {
            version,
            mount,
            root,
            v1_cpu: Hierarchy::Absent,
            v1_memory: Hierarchy::Absent,
        }
    }

    /// The cgroup version.
    #[must_use]
    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The hierarchy's mount point.
    #[must_use]
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// Pinion's root directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// v1: the `cpu` hierarchy's mount point and Pinion's root in it (its
    /// mirror, or the root itself when `cpu` is mounted with cpuset);
    /// `None` on v2 or without that hierarchy.
    #[must_use]
    pub fn v1_cpu_root(&self) -> Option<(&Path, PathBuf)> {
        match &self.v1_cpu {
            Hierarchy::Absent => None,
            Hierarchy::WithCpuset => Some((&self.mount, self.root.clone())),
            Hierarchy::Separate(mount) => Some((mount, mount.join(self.relative_root()))),
        }
    }

    /// The directory of child `name` (a validated name cannot escape).
    #[must_use]
    pub fn path_of(&self, name: &CgroupName) -> PathBuf {
        self.root.join(name.as_str())
    }

    /// Removes Pinion's root itself (it must have no children left).
    pub fn remove_root(&self) -> Result<(), CgroupError> {
        for mount in self.v1_extra() {
            fs_ops::remove_dir(&mount.join(self.relative_root()))?;
        }
        fs_ops::remove_dir(&self.root)
    }

    /// Creates the missing directories from the mount down to Pinion's root
    /// (their cpusets are set by [`CpusetHost::ensure_root`]), so the root
    /// can be locked before anything else touches it. Returns the ones it
    /// created, top first, for [`Cgroups::remove_created`].
    pub fn create_root_dirs(&self) -> Result<Vec<PathBuf>, CgroupError> {
        let mut created = Vec::new();
        for dir in self.chain() {
            if !dir.is_dir() {
                fs_ops::create_dir(&dir)?;
                created.push(dir);
            }
        }
        Ok(created)
    }

    /// Removes directories [`Cgroups::create_root_dirs`] created, innermost
    /// first, as long as they are empty (a start that failed leaves nothing
    /// behind; one that got further keeps what now holds workloads).
    pub fn remove_created(created: &[PathBuf]) -> Result<(), CgroupError> {
        for dir in created.iter().rev() {
            fs_ops::remove_dir(dir)?;
        }
        Ok(())
    }

    /// Directories from below the mount down to the root, top first.
    fn chain(&self) -> Vec<PathBuf> {
        chain_below(&self.mount, self.relative_root())
    }

    fn relative_root(&self) -> &Path {
        self.root.strip_prefix(&self.mount).unwrap_or(Path::new(""))
    }

    /// v1: the separate `cpu` and `memory` hierarchies' mount points.
    fn v1_extra(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.v1_cpu, &self.v1_memory]
            .into_iter()
            .filter_map(|h| match h {
                Hierarchy::Separate(mount) => Some(mount),
                _ => None,
            })
    }

    /// v1: the separate hierarchies where Pinion's root is mirrored.
    fn v1_mirrors(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.v1_extra()
            .map(|mount| mount.join(self.relative_root()))
            .filter(|root| root.is_dir())
    }

    /// Whether Pinion's children have `controller`: v2, enabled in the
    /// root's `cgroup.subtree_control`; v1, its hierarchy mounted (with
    /// Pinion's root mirrored there when separate).
    fn has_controller(&self, controller: Controller) -> Result<bool, CgroupError> {
        let hierarchy = match (self.version, controller) {
            (CgroupVersion::V2, _) => {
                let enabled = fs_ops::read(&self.root.join("cgroup.subtree_control"))?;
                let name = controller.to_string();
                return Ok(enabled
                    .split_whitespace()
                    .any(|c| c.trim_start_matches('+') == name));
            }
            (CgroupVersion::V1, Controller::Cpu) => &self.v1_cpu,
            (CgroupVersion::V1, Controller::Memory) => &self.v1_memory,
            // Only cgroup v2 files (a plugin's Unified) use them.
            (CgroupVersion::V1, Controller::Io | Controller::Pids) => return Ok(false),
        };
        Ok(match hierarchy {
            Hierarchy::Absent => false,
            Hierarchy::WithCpuset => true,
            Hierarchy::Separate(mount) => mount.join(self.relative_root()).is_dir(),
        })
    }

    /// v1: a run gets its directory in the `cpu` or `memory` hierarchy
    /// with the first setting there, and its processes are moved in (a run
    /// admitted earlier, or by an older agent), so the setting takes
    /// effect; processes added later join the mirrors that exist.
    fn ensure_mirror(&self, dir: &Path, name: &CgroupName) -> Result<(), CgroupError> {
        if *dir == self.path_of(name) || dir.is_dir() {
            return Ok(());
        }
        fs_ops::create_dir(dir)?;
        for pid in self.pids(name)? {
            fs_ops::write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Child `name`'s directory in the hierarchy of `controller` (v2 and
    /// co-mounted v1 controllers: the cpuset directory).
    fn controller_dir(&self, controller: Controller, name: &CgroupName) -> PathBuf {
        let hierarchy = match controller {
            Controller::Cpu => &self.v1_cpu,
            Controller::Memory => &self.v1_memory,
            Controller::Io | Controller::Pids => return self.path_of(name),
        };
        match hierarchy {
            Hierarchy::Separate(mount) if self.version == CgroupVersion::V1 => {
                mount.join(self.relative_root()).join(name.as_str())
            }
            _ => self.path_of(name),
        }
    }

    /// Writes `cpus` and, when some are given, the memory nodes `mems`
    /// (none: as they are). Memory nodes first: a v1 cpuset with cpus but
    /// no mems takes no task.
    fn write_cpuset(&self, dir: &Path, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError> {
        if !mems.is_empty() {
            fs_ops::write(&dir.join("cpuset.mems"), &mems.to_string())?;
        }
        fs_ops::write(&dir.join("cpuset.cpus"), &cpus.to_string())
    }

    fn shrink_children(&self, cpus: &CpuSet) -> Result<(), CgroupError> {
        for name in self.list()? {
            let current = self.cpus(&name)?;
            if !current.is_subset(cpus) {
                let narrowed = current.intersection(cpus);
                let dir = self.path_of(&name);
                fs_ops::write(&dir.join("cpuset.cpus"), &narrowed.to_string())?;
            }
        }
        Ok(())
    }
}

impl CpusetHost for Cgroups {
    fn ensure_root(&mut self, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError> {
        let chain = self.chain();
        if self.version == CgroupVersion::V2 {
            fs_ops::enable_controllers(&self.mount)?;
        }
        for (index, dir) in chain.iter().enumerate() {
            fs_ops::create_dir(dir)?;
            if index + 1 == chain.len() {
                break;
            }
            match self.version {
                CgroupVersion::V1 => fs_ops::inherit_cpuset(dir)?,
                CgroupVersion::V2 => fs_ops::enable_controllers(dir)?,
            }
        }
        for mount in self.v1_extra() {
            // Best effort (a user may own a cpuset directory only): without
            // the mirror, unlimited settings need nothing and limits fail
            // naming the controller.
            for dir in chain_below(mount, self.relative_root()) {
                if fs_ops::create_dir(&dir).is_err() {
                    break;
                }
            }
        }
        // Bottom-up when the root shrinks: children first.
        self.shrink_children(cpus)?;
        self.write_cpuset(&self.root, cpus, mems)?;
        if self.version == CgroupVersion::V2 {
            fs_ops::enable_controllers(&self.root)?;
        }
        Ok(())
    }

    fn create(
        &mut self,
        name: &CgroupName,
        cpus: &CpuSet,
        mems: &CpuSet,
    ) -> Result<(), CgroupError> {
        // v1 mirrors come with the first setting of their controller
        // ([`Cgroups::ensure_mirror`]): a memory cgroup costs milliseconds
        // to create and remove, and most runs set nothing there.
        let dir = self.path_of(name);
        fs_ops::create_dir(&dir)?;
        if mems.is_empty() && self.version == CgroupVersion::V1 {
            // A new v1 child without asked nodes takes its parent's (only
            // here: an existing child already has some).
            fs_ops::inherit_mems(&dir)?;
        }
        self.write_cpuset(&dir, cpus, mems)
    }

    fn set(&mut self, name: &CgroupName, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError> {
        self.write_cpuset(&self.path_of(name), cpus, mems)
    }

    fn reset_mems(&mut self, name: &CgroupName) -> Result<(), CgroupError> {
        let from = match self.version {
            CgroupVersion::V2 => "cpuset.mems.effective",
            CgroupVersion::V1 => "cpuset.mems",
        };
        fs_ops::copy_from_parent(&self.path_of(name), from, "cpuset.mems")
    }

    fn write_resources(
        &mut self,
        name: &CgroupName,
        desired: &ResourceSettings,
        applied: Option<&ResourceSettings>,
        taken_back: &ResourceSettings,
    ) -> Result<(), CgroupError> {
        let writes = resources::plan_taking_back(
            self.version,
            &self.path_of(name),
            desired,
            applied,
            taken_back,
            &mut |controller, file| fs_ops::read(&self.controller_dir(controller, name).join(file)),
        )?;
        let mut mirrored = Vec::new();
        for write in writes {
            let dir = self.controller_dir(write.controller, name);
            if !self.has_controller(write.controller)? {
                // Without the controller nothing is limited: an unlimited
                // setting holds already; a limit cannot.
                if write.value == "max" || write.value == "-1" {
                    continue;
                }
                return Err(CgroupError::Setting {
                    path: dir,
                    file: write.file,
                    reason: format!(
                        "{} {:?}: the {} controller is not available to Pinion's cgroups ({})",
                        write.file,
                        write.value,
                        write.controller,
                        match self.version {
                            CgroupVersion::V2 =>
                                "not enabled in cgroup.subtree_control of the root",
                            CgroupVersion::V1 => "no writable cgroup v1 hierarchy of it",
                        }
                    ),
                });
            }
            if !mirrored.contains(&write.controller) {
                self.ensure_mirror(&dir, name)?;
                mirrored.push(write.controller);
            }
            fs_ops::write(&dir.join(write.file), &write.value)?;
        }
        Ok(())
    }

    fn cpus(&self, name: &CgroupName) -> Result<CpuSet, CgroupError> {
        fs_ops::read_cpuset(&self.path_of(name).join("cpuset.cpus"))
    }

    fn add_pid(&mut self, name: &CgroupName, pid: u32) -> Result<(), CgroupError> {
        let procs = self.path_of(name).join("cgroup.procs");
        if pid == 0 {
            // The kernel reads 0 as "the writer": the agent itself would
            // move into the run's cgroup.
            return Err(CgroupError::Malformed {
                path: procs,
                text: "0".to_string(),
                reason: "process id 0 is the writer itself, not a process to move".to_string(),
            });
        }
        fs_ops::write(&procs, &pid.to_string())?;
        for mirror in self.v1_mirrors() {
            let dir = mirror.join(name.as_str());
            if dir.is_dir() {
                fs_ops::write(&dir.join("cgroup.procs"), &pid.to_string())?;
            }
        }
        Ok(())
    }

    fn pids(&self, name: &CgroupName) -> Result<Vec<u32>, CgroupError> {
        fs_ops::read_pids_below(&self.path_of(name))
    }

    fn root_processes(&self) -> Result<Vec<RootProcess>, CgroupError> {
        let mut pids = fs_ops::read_pids(&self.root.join("cgroup.procs"))?;
        pids.truncate(MAX_ROOT_PROCESSES);
        Ok(pids
            .into_iter()
            .map(|pid| RootProcess {
                pid,
                parent: fs_ops::parent_process(Path::new("/proc"), pid),
            })
            .collect())
    }

    fn remove(&mut self, name: &CgroupName) -> Result<(), CgroupError> {
        // The mirrors first: the cpuset directory is what lists a child.
        for mount in self.v1_extra() {
            fs_ops::remove_dir_below(&mount.join(self.relative_root()).join(name.as_str()))?;
        }
        fs_ops::remove_dir_below(&self.path_of(name))
    }

    fn list(&self) -> Result<Vec<CgroupName>, CgroupError> {
        fs_ops::list_children(&self.root)
    }

    fn make_partition(
        &mut self,
        target: &PartitionTarget,
        cpus: &CpuSet,
        mode: PartitionMode,
    ) -> PartitionOutcome {
        if self.version == CgroupVersion::V1 {
            return PartitionOutcome::Fallback {
                reason: V1_NO_PARTITIONS.to_string(),
            };
        }
        partition::make(
            &mut RealPartitionFiles,
            &self.partition_chain(target),
            cpus,
            mode,
        )
    }

    fn unmake_partition(
        &mut self,
        target: &PartitionTarget,
        cpus: &CpuSet,
    ) -> Result<(), CgroupError> {
        if self.version == CgroupVersion::V1 {
            return Ok(());
        }
        partition::unmake(&mut RealPartitionFiles, &self.partition_chain(target), cpus)
    }

    fn partition_of(&self, target: &PartitionTarget) -> Option<(String, CpuSet)> {
        if self.version == CgroupVersion::V1 {
            return None;
        }
        partition::current(&RealPartitionFiles, &self.partition_chain(target))
    }

    fn isolated_cpus(&self) -> Option<CpuSet> {
        if self.version == CgroupVersion::V1 {
            return None;
        }
        partition::isolated(&RealPartitionFiles, &self.mount)
    }

    fn container_cpuset(&self, cgroup: &ContainerCgroup) -> Result<ContainerCpuset, CgroupError> {
        let dir = must_exist(self.mount.join(cgroup.relative()), CgroupOp::Read, None)?;
        let read = |file: &str| -> Result<Option<CpuSet>, CgroupError> {
            let path = dir.join(file);
            if fs_ops::read(&path)?.trim().is_empty() {
                return Ok(None);
            }
            fs_ops::read_cpuset(&path).map(Some)
        };
        Ok(ContainerCpuset {
            cpus: read("cpuset.cpus")?,
            mems: read("cpuset.mems")?,
        })
    }

    fn housekeeping_cpus(&self, cgroup: &ContainerCgroup) -> Result<Option<CpuSet>, CgroupError> {
        self.container_cpuset(cgroup).map(|seen| seen.cpus)
    }

    fn set_housekeeping_cpus(
        &mut self,
        cgroup: &ContainerCgroup,
        cpus: &CpuSet,
    ) -> Result<(), CgroupError> {
        let dir = must_exist(
            self.mount.join(cgroup.relative()),
            CgroupOp::Write,
            Some(cpus.to_string()),
        )?;
        if self.version == CgroupVersion::V2 {
            let parents = chain_below(&self.mount, cgroup.relative());
            let parents = std::iter::once(self.mount.clone())
                .chain(parents)
                .take_while(|p| *p != dir);
            for parent in parents {
                fs_ops::enable_cpuset(&parent)?;
            }
        }
        fs_ops::write(&dir.join("cpuset.cpus"), &cpus.to_string())
    }

    fn set_memory_limit(
        &mut self,
        cgroup: &ContainerCgroup,
        bytes: u64,
    ) -> Result<(), CgroupError> {
        let file = resources::memory_limit_file(self.version);
        let value = bytes.to_string();
        let Some(mount) = self.controller_mount(Controller::Memory) else {
            return Err(CgroupError::Setting {
                path: self.mount.join(cgroup.relative()),
                file,
                reason: format!("{file} {value}: no cgroup v1 memory hierarchy is mounted"),
            });
        };
        let dir = must_exist(
            mount.join(cgroup.relative()),
            CgroupOp::Write,
            Some(value.clone()),
        )?;
        if !dir.join(file).is_file() {
            return Err(CgroupError::Setting {
                path: dir,
                file,
                reason: format!(
                    "{file} {value}: the memory controller is not enabled for this cgroup (cgroup.subtree_control of its parent)"
                ),
            });
        }
        fs_ops::write(&dir.join(file), &value)
    }

    fn lift_cpu_quota(&mut self, cgroup: &ContainerCgroup) -> Result<(), CgroupError> {
        let Some(mount) = self.controller_mount(Controller::Cpu) else {
            return Ok(());
        };
        let (file, unlimited) = resources::unlimited_quota(self.version);
        let dir = must_exist(
            mount.join(cgroup.relative()),
            CgroupOp::Write,
            Some(unlimited.to_string()),
        )?;
        let path = dir.join(file);
        if !path.is_file() {
            return Ok(());
        }
        fs_ops::write(&path, unlimited)
    }
}

/// `dir`, a cgroup Pinion does not create (kubelet's or the runtime's), when
/// it exists; otherwise the I/O error of kind `NotFound` naming it, with the
/// operation and the value that could not be applied.
fn must_exist(dir: PathBuf, op: CgroupOp, data: Option<String>) -> Result<PathBuf, CgroupError> {
    if dir.is_dir() {
        return Ok(dir);
    }
    Err(CgroupError::Io {
        op,
        path: dir,
        data,
        source: io::ErrorKind::NotFound.into(),
    })
}

impl Cgroups {
    /// The mount of the hierarchy holding the files of `controller` (`cpu`
    /// or `memory`): the v2 mount, or v1's hierarchy of that controller
    /// (`None`: v1 without one).
    fn controller_mount(&self, controller: Controller) -> Option<&Path> {
        let hierarchy = match controller {
            Controller::Cpu => &self.v1_cpu,
            Controller::Memory => &self.v1_memory,
            Controller::Io | Controller::Pids => return Some(&self.mount),
        };
        match (self.version, hierarchy) {
            (CgroupVersion::V2, _) | (CgroupVersion::V1, Hierarchy::WithCpuset) => {
                Some(&self.mount)
            }
            (CgroupVersion::V1, Hierarchy::Separate(mount)) => Some(mount),
            (CgroupVersion::V1, Hierarchy::Absent) => None,
        }
    }

    /// The directories from below the mount down to `target`'s cgroup.
    fn partition_chain(&self, target: &PartitionTarget) -> Vec<PathBuf> {
        match target {
            PartitionTarget::Run(name) => {
                let mut chain = self.chain();
                chain.push(self.path_of(name));
                chain
            }
            PartitionTarget::Container(cgroup) => chain_below(&self.mount, cgroup.relative()),
        }
    }
}

/// Directories from below `mount` down to `mount/relative`, top first.
pub(crate) fn chain_below(mount: &Path, relative: &Path) -> Vec<PathBuf> {
    let mut dir = mount.to_path_buf();
    let mut chain = Vec::new();
    for part in relative.components() {
        dir.push(part);
        chain.push(dir.clone());
    }
    chain
}

#[cfg(test)]
mod tests;
