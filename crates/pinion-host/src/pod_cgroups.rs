//! Where a pod's cgroup is, by pod UID, so that its CPU pressure can be
//! read (pools that size themselves, `docs/qrm.md`): its `cpu.pressure` on
//! cgroup v2, its `cpu.stat` throttling and `cpuacct.usage` on cgroup v1
//! ([`PodCpuSource`]).
//!
//! Three layouts are recognised below a cgroup mount:
//!
//! * Pinion's own runs (`pinion run`): `<own root>/<uid>`;
//! * kubelet with the cgroupfs driver: `…/kubepods/<qos>/pod<uid>`;
//! * kubelet with the systemd driver:
//!   `…/kubepods-<qos>-pod<uid with '-' as '_'>.slice`.
//!
//! The tree is walked at most [`MAX_DEPTH`] levels deep and over at most
//! [`MAX_VISITED`] directories, once per [`PodCgroups::refresh`] when a pod
//! is not known yet; found directories are remembered while they exist.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::cgroup::{mountinfo, Cgroups};
use crate::pressure::{read_v1_cpu_stat, read_v1_usage, CpuCounters, PressureError};

/// How deep below the mount the walk looks (kubepods.slice /
/// kubepods-burstable.slice / kubepods-burstable-pod….slice is 3).
pub const MAX_DEPTH: usize = 4;
/// The most directories one walk visits.
pub const MAX_VISITED: usize = 100_000;
/// The longest pod UID looked for.
pub const MAX_UID_LEN: usize = 128;

/// Pod UID → cgroup directory.
#[derive(Debug, Clone)]
pub struct PodCgroups {
    mount: PathBuf,
    own_root: Option<PathBuf>,
    known: BTreeMap<String, PathBuf>,
}

impl PodCgroups {
    /// Looks below `mount` (a cgroup v2 mount, e.g. `/sys/fs/cgroup`), and
    /// for Pinion's runs in `own_root` (their directories are named by UID).
    #[must_use]
    pub fn new(mount: PathBuf, own_root: Option<PathBuf>) -> Self {
        Self {
            mount,
            own_root,
            known: BTreeMap::new(),
        }
    }

    /// Makes sure every pod of `uids` that has a cgroup is known: forgets
    /// directories that are gone and walks the tree once if any pod is
    /// unknown. UIDs that are not plausible ids are ignored.
    pub fn refresh<'a>(&mut self, uids: impl IntoIterator<Item = &'a str>) {
        self.known.retain(|_, dir| dir.is_dir());
        let wanted: BTreeSet<&str> = uids
            .into_iter()
            .filter(|uid| plausible_uid(uid) && !self.known.contains_key(*uid))
            .collect();
        if wanted.is_empty() {
            return;
        }
        if let Some(root) = &self.own_root {
            for uid in &wanted {
                let dir = root.join(uid);
                if dir.is_dir() {
                    self.known.insert((*uid).to_string(), dir);
                }
            }
        }
        let missing: BTreeSet<&str> = wanted
            .into_iter()
            .filter(|uid| !self.known.contains_key(*uid))
            .collect();
        if missing.is_empty() {
            return;
        }
        let by_name: BTreeMap<String, &str> = missing
            .iter()
            .flat_map(|uid| kube_names(uid).into_iter().map(move |name| (name, *uid)))
            .collect();
        let mut visited = 0usize;
        let mut level = vec![self.mount.clone()];
        for _ in 0..MAX_DEPTH {
            let mut next = Vec::new();
            for dir in level {
                let Ok(entries) = fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    visited += 1;
                    if visited > MAX_VISITED {
                        return;
                    }
                    if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                        continue;
                    }
                    let path = entry.path();
                    if let Some(uid) = entry.file_name().to_str().and_then(|n| by_name.get(n)) {
                        self.known.insert((*uid).to_string(), path);
                    } else {
                        next.push(path);
                    }
                }
            }
            level = next;
        }
    }

    /// The cgroup directory of pod `uid`, when [`PodCgroups::refresh`] found it.
    #[must_use]
    pub fn get(&self, uid: &str) -> Option<&Path> {
        self.known.get(uid).map(PathBuf::as_path)
    }
}

/// Where the closed loop reads its pods' CPU pressure, by cgroup version.
#[derive(Debug, Clone)]
pub enum PodCpuSource {
    /// cgroup v2: each pod's `cpu.pressure` (PSI).
    V2(PodCgroups),
    /// cgroup v1 (no PSI): each pod's `cpu.stat` and `cpuacct.usage`.
    V1(V1PodCgroups),
}

impl PodCpuSource {
    /// The source below `dir` (`pinion plugin serve cpu --cgroup-root`):
    /// v2 when `dir` is a cgroup2 mount (it has `cgroup.controllers`); v1
    /// when it is a v1 `cpu` hierarchy (it has `cpu.stat`) or holds the v1
    /// hierarchies (`<dir>/cpu`, with `<dir>/cpuacct`); else v2, where
    /// nothing will be found. Pinion's own runs are looked for in
    /// `own_root` (its root in the `cpu` hierarchy on v1).
    #[must_use]
    pub fn at(dir: &Path, own_root: Option<PathBuf>) -> Self {
        if dir.join("cgroup.controllers").is_file() {
            return Self::V2(PodCgroups::new(dir.to_path_buf(), own_root));
        }
        if dir.join("cpu.stat").is_file() {
            return Self::V1(V1PodCgroups::new(dir.to_path_buf(), own_root, None));
        }
        let cpu = dir.join("cpu");
        if cpu.is_dir() {
            let cpuacct = Some(dir.join("cpuacct")).filter(|d| d.is_dir());
            return Self::V1(V1PodCgroups::new(cpu, own_root, cpuacct));
        }
        Self::V2(PodCgroups::new(dir.to_path_buf(), own_root))
    }

    /// The agent's source: on cgroup v1 with a `cpu` hierarchy, the pods'
    /// throttling there (Pinion's runs in its root there) and their usage
    /// in the `cpuacct` hierarchy named in `mountinfo` (mount points under
    /// `prefix`; none when it cannot be read); otherwise their PSI below
    /// the cgroup mount (Pinion's runs in its root).
    #[must_use]
    pub fn for_cgroups(cgroups: &Cgroups, mountinfo: &Path, prefix: &Path) -> Self {
        match cgroups.v1_cpu_root() {
            Some((cpu, own)) => {
                let cpuacct = mountinfo::v1_controller_mount(mountinfo, prefix, "cpuacct")
                    .ok()
                    .flatten();
                Self::V1(V1PodCgroups::new(cpu.to_path_buf(), Some(own), cpuacct))
            }
            None => Self::V2(PodCgroups::new(
                cgroups.mount().to_path_buf(),
                Some(cgroups.root().to_path_buf()),
            )),
        }
    }
}

/// Pod UID → its cgroups in the v1 `cpu` hierarchy and, when that is
/// mounted apart, the `cpuacct` one.
#[derive(Debug, Clone)]
pub struct V1PodCgroups {
    cpu: PodCgroups,
    /// The `cpuacct` hierarchy when it is not the `cpu` one (`cpu,cpuacct`).
    cpuacct: Option<PodCgroups>,
}

/// A pod's cumulative cgroup v1 counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V1PodCounters {
    /// `cpu.stat`'s, with `usage_ns` from `cpuacct.usage` when read.
    pub counters: CpuCounters,
    /// Whether `cpuacct.usage` was read (else `usage_ns` is 0).
    pub usage_read: bool,
}

impl V1PodCgroups {
    /// Pods below the v1 `cpu` hierarchy mounted at `cpu_mount` (Pinion's
    /// runs in `own_root`, its root there) and, when the `cpuacct`
    /// controller is mounted elsewhere, below `cpuacct_mount` (Pinion does
    /// not mirror its runs there: their usage stays unknown).
    #[must_use]
    pub fn new(
        cpu_mount: PathBuf,
        own_root: Option<PathBuf>,
        cpuacct_mount: Option<PathBuf>,
    ) -> Self {
        let cpuacct = cpuacct_mount
            .filter(|acct| !same_dir(acct, &cpu_mount))
            .map(|acct| PodCgroups::new(acct, None));
        Self {
            cpu: PodCgroups::new(cpu_mount, own_root),
            cpuacct,
        }
    }

    /// [`PodCgroups::refresh`] in both hierarchies.
    pub fn refresh<'a>(&mut self, uids: impl IntoIterator<Item = &'a str>) {
        let uids: Vec<&str> = uids.into_iter().collect();
        self.cpu.refresh(uids.iter().copied());
        if let Some(acct) = &mut self.cpuacct {
            acct.refresh(uids);
        }
    }

    /// Pod `uid`'s directory in the `cpu` hierarchy, when found.
    #[must_use]
    pub fn cpu_dir(&self, uid: &str) -> Option<&Path> {
        self.cpu.get(uid)
    }

    /// Pod `uid`'s counters (`None` when its `cpu` cgroup is not known):
    /// an error when `cpu.stat` cannot be read; a usage not read when its
    /// `cpuacct` cgroup was not found or has no readable `cpuacct.usage`.
    #[must_use]
    pub fn counters(&self, uid: &str) -> Option<Result<V1PodCounters, PressureError>> {
        let cpu = self.cpu.get(uid)?;
        let counters = match read_v1_cpu_stat(cpu) {
            Ok(counters) => counters,
            Err(err) => return Some(Err(err)),
        };
        let acct = match &self.cpuacct {
            Some(acct) => acct.get(uid),
            None => Some(cpu),
        };
        let usage = acct.and_then(|dir| read_v1_usage(dir).ok());
        Some(Ok(V1PodCounters {
            counters: CpuCounters {
                usage_ns: usage.unwrap_or(0),
                ..counters
            },
            usage_read: usage.is_some(),
        }))
    }
}

/// Whether two paths name one directory (`cpuacct` is often a symlink to
/// `cpu,cpuacct`, as is `cpu`).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The directory names kubelet gives pod `uid`'s cgroup.
pub(crate) fn kube_names(uid: &str) -> Vec<String> {
    let systemd = uid.replace('-', "_");
    ["besteffort", "burstable", "guaranteed"]
        .iter()
        .map(|qos| format!("kubepods-{qos}-pod{systemd}.slice"))
        .chain([format!("kubepods-pod{systemd}.slice"), format!("pod{uid}")])
        .collect()
}

/// 1..=[`MAX_UID_LEN`] ASCII letters, digits, `-` and `_`.
fn plausible_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= MAX_UID_LEN
        && uid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::CgroupVersion;

    fn mkdir(root: &Path, path: &str) -> PathBuf {
        let dir = root.join(path);
        fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    #[test]
    fn finds_pods_of_both_kubelet_drivers_and_pinions_own_runs() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let cgroupfs = mkdir(root, "kubepods/burstable/poda-1");
        let systemd = mkdir(
            root,
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podb_2.slice",
        );
        let guaranteed = mkdir(root, "kubepods.slice/kubepods-podc_3.slice");
        let own = mkdir(root, "pinion/run-4");
        // A container directory below a pod is not the pod.
        mkdir(root, "kubepods/burstable/poda-1/0123abcd");
        let mut pods = PodCgroups::new(root.to_path_buf(), Some(root.join("pinion")));
        pods.refresh(["a-1", "b-2", "c-3", "run-4", "gone", "../etc"]);
        assert_eq!(pods.get("a-1"), Some(cgroupfs.as_path()));
        assert_eq!(pods.get("b-2"), Some(systemd.as_path()));
        assert_eq!(pods.get("c-3"), Some(guaranteed.as_path()));
        assert_eq!(pods.get("run-4"), Some(own.as_path()));
        assert_eq!(pods.get("gone"), None);
        assert_eq!(pods.get("../etc"), None);
    }

    #[test]
    fn a_removed_pod_is_forgotten_and_a_new_one_found_at_the_next_refresh() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let first = mkdir(root, "kubepods/pod1");
        let mut pods = PodCgroups::new(root.to_path_buf(), None);
        pods.refresh(["1", "2"]);
        assert_eq!(pods.get("1"), Some(first.as_path()));
        assert_eq!(pods.get("2"), None);
        fs::remove_dir(&first).expect("rmdir");
        let second = mkdir(root, "kubepods/burstable/pod2");
        pods.refresh(["1", "2"]);
        assert_eq!(pods.get("1"), None);
        assert_eq!(pods.get("2"), Some(second.as_path()));
    }

    fn write(dir: &Path, name: &str, text: &str) {
        fs::create_dir_all(dir).expect("mkdir");
        fs::write(dir.join(name), text).expect("write");
    }

    #[test]
    fn v1_pods_are_found_in_the_cpu_and_cpuacct_hierarchies() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let cpu = root.join("cpu/kubepods/burstable/poda-1");
        let acct = root.join("cpuacct/kubepods/burstable/poda-1");
        write(
            &cpu,
            "cpu.stat",
            "nr_periods 10\nnr_throttled 4\nthrottled_time 7\n",
        );
        write(&acct, "cpuacct.usage", "5000\n");
        // Pinion's own run: mirrored in the cpu hierarchy only.
        let own = root.join("cpu/pinion/run-2");
        write(
            &own,
            "cpu.stat",
            "nr_periods 3\nnr_throttled 0\nthrottled_time 0\n",
        );
        let mut source = PodCpuSource::at(root, Some(root.join("cpu/pinion")));
        let PodCpuSource::V1(pods) = &mut source else {
            panic!("not v1: {source:?}");
        };
        pods.refresh(["a-1", "run-2", "gone"]);
        assert_eq!(pods.cpu_dir("a-1"), Some(cpu.as_path()));
        let read = pods.counters("a-1").expect("known").expect("read");
        assert!(read.usage_read);
        assert_eq!(
            read.counters,
            CpuCounters {
                usage_ns: 5000,
                nr_periods: 10,
                nr_throttled: 4,
                throttled_ns: 7
            }
        );
        let own_read = pods.counters("run-2").expect("known").expect("read");
        assert!(!own_read.usage_read, "no cpuacct mirror: usage unknown");
        assert_eq!(own_read.counters.nr_periods, 3);
        assert!(pods.counters("gone").is_none());
        fs::remove_file(cpu.join("cpu.stat")).expect("rm");
        assert!(matches!(
            pods.counters("a-1"),
            Some(Err(PressureError::Read { .. }))
        ));
    }

    #[test]
    fn the_agents_source_follows_its_cgroups_version_and_mounts() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let mountinfo = root.join("mountinfo");
        fs::write(
            &mountinfo,
            "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
             32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
             33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n",
        )
        .expect("mountinfo");
        let cgroup = root.join("sys/fs/cgroup");
        let cpuset = cgroup.join("cpuset");
        let v1 = Cgroups::new(CgroupVersion::V1, cpuset.clone(), cpuset.join("pinion"))
            .with_v1_hierarchies(Some(cgroup.join("cpu")), None);
        let pod = cgroup.join("cpuacct/kubepods/podk-1");
        write(&pod, "cpuacct.usage", "9\n");
        write(
            &cgroup.join("cpu/kubepods/podk-1"),
            "cpu.stat",
            "nr_periods 1\nnr_throttled 1\nthrottled_time 0\n",
        );
        let own = cgroup.join("cpu/pinion/run-1");
        write(
            &own,
            "cpu.stat",
            "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
        );
        let PodCpuSource::V1(mut pods) = PodCpuSource::for_cgroups(&v1, &mountinfo, root) else {
            panic!("v1 cgroups give a v1 source");
        };
        pods.refresh(["k-1", "run-1"]);
        let read = pods.counters("k-1").expect("found").expect("read");
        assert_eq!((read.counters.usage_ns, read.usage_read), (9, true));
        assert_eq!(pods.cpu_dir("run-1"), Some(own.as_path()));
        let v2 = Cgroups::new(CgroupVersion::V2, root.join("v2"), root.join("v2/pinion"));
        assert!(matches!(
            PodCpuSource::for_cgroups(&v2, &mountinfo, root),
            PodCpuSource::V2(_)
        ));
    }

    #[test]
    fn a_combined_cpu_cpuacct_mount_reads_both_files_in_one_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let mount = root.join("cpu,cpuacct");
        write(
            &mount,
            "cpu.stat",
            "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
        );
        let pod = mount.join("kubepods.slice/kubepods-podb_2.slice");
        write(
            &pod,
            "cpu.stat",
            "nr_periods 8\nnr_throttled 8\nthrottled_time 1\n",
        );
        write(&pod, "cpuacct.usage", "42\n");
        let mut pods = V1PodCgroups::new(mount.clone(), None, Some(mount.clone()));
        pods.refresh(["b-2"]);
        let read = pods.counters("b-2").expect("known").expect("read");
        assert!(read.usage_read);
        assert_eq!(
            (read.counters.usage_ns, read.counters.nr_throttled),
            (42, 8)
        );
        // The mount itself given as the root is a v1 cpu hierarchy.
        assert!(matches!(
            PodCpuSource::at(&mount, None),
            PodCpuSource::V1(_)
        ));
        // A cgroup2 mount is v2; an empty directory stays v2 (nothing found).
        let v2 = root.join("v2");
        write(&v2, "cgroup.controllers", "cpuset cpu\n");
        assert!(matches!(PodCpuSource::at(&v2, None), PodCpuSource::V2(_)));
        let empty = root.join("empty");
        fs::create_dir_all(&empty).expect("mkdir");
        assert!(matches!(
            PodCpuSource::at(&empty, None),
            PodCpuSource::V2(_)
        ));
    }

    /// This machine, when it has a cgroup v1 `cpu` hierarchy and lets the
    /// test create cgroups there (root): a pod cgroup laid out as kubelet's
    /// cgroupfs driver does, found and its kernel-written `cpu.stat` (and
    /// `cpuacct.usage`) read. Skipped with a notice otherwise.
    #[test]
    fn a_real_v1_pod_cgroup_is_found_and_read() {
        let mountinfo = Path::new("/proc/self/mountinfo");
        let mount = |controller| {
            crate::cgroup::mountinfo::v1_controller_mount(mountinfo, Path::new("/"), controller)
                .ok()
                .flatten()
        };
        let Some(cpu) = mount("cpu") else {
            eprintln!("skipping: no cgroup v1 cpu hierarchy mounted");
            return;
        };
        let acct = mount("cpuacct");
        let top = format!("pinion-test-pods-{}", std::process::id());
        let pod = format!("{top}/kubepods/burstable/podreal-1");
        let mounts: Vec<&PathBuf> = std::iter::once(&cpu).chain(acct.iter()).collect();
        for m in &mounts {
            if let Err(err) = fs::create_dir_all(m.join(&pod)) {
                eprintln!("skipping: cannot create a cgroup in {}: {err}", m.display());
                remove_tree(&mounts, &top);
                return;
            }
        }
        let mut pods = V1PodCgroups::new(cpu.join(&top), None, acct.as_ref().map(|a| a.join(&top)));
        pods.refresh(["real-1"]);
        let outcome = throttle_a_busy_process(&pods, &mounts, &pod);
        remove_tree(&mounts, &top);
        let (first, last, elapsed) = outcome.expect("a busy process in the pod");
        assert!(first.usage_read && last.usage_read, "{last:?}");
        // The kernel throttled the pod in most of its periods: pressure at
        // or above the default grow threshold.
        let (busy, throttled) = last.counters.since(&first.counters, elapsed);
        let load = pinion_core::pools::load_from_throttling(&[pinion_core::pools::Throttling {
            throttled,
            busy: Some(busy),
        }])
        .expect("measured");
        assert!(
            load.pressure >= pinion_core::pools::PoolParams::default().grow_pressure,
            "{first:?} -> {last:?}: {load:?}"
        );
    }

    /// Gives pod cgroup `pod` a quota of 1 ms per 100 ms period, runs a
    /// busy shell in it until the kernel reports it throttled (at most 20 s)
    /// and returns the counters before and after and the nanoseconds
    /// between them; the shell is gone when it returns.
    fn throttle_a_busy_process(
        pods: &V1PodCgroups,
        mounts: &[&PathBuf],
        pod: &str,
    ) -> Result<(V1PodCounters, V1PodCounters, u64), String> {
        let cpu_dir = pods.cpu_dir("real-1").ok_or("not found")?.to_path_buf();
        fs::write(cpu_dir.join("cpu.cfs_quota_us"), "1000").map_err(|e| e.to_string())?;
        let read = || {
            pods.counters("real-1")
                .ok_or("not found")?
                .map_err(|e| e.to_string())
        };
        let first = read()?;
        let start = std::time::Instant::now();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut result = Err("the kernel never throttled the pod".to_string());
        let joined = mounts
            .iter()
            .try_for_each(|m| fs::write(m.join(pod).join("cgroup.procs"), child.id().to_string()));
        if let Err(err) = joined {
            result = Err(format!("cannot move the shell in: {err}"));
        } else {
            let deadline = start + std::time::Duration::from_secs(20);
            while std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(100));
                match read() {
                    Ok(last) if last.counters.nr_throttled >= 3 => {
                        let elapsed = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        result = Ok((first, last, elapsed));
                        break;
                    }
                    Ok(_) => {}
                    Err(err) => {
                        result = Err(err);
                        break;
                    }
                }
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        result
    }

    /// Removes the test's cgroups below `top` in every mount, innermost first.
    fn remove_tree(mounts: &[&PathBuf], top: &str) {
        for m in mounts {
            let mut dirs: Vec<PathBuf> = Vec::new();
            let mut level = vec![m.join(top)];
            while let Some(dir) = level.pop() {
                if let Ok(entries) = fs::read_dir(&dir) {
                    level.extend(
                        entries
                            .flatten()
                            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                            .map(|e| e.path()),
                    );
                }
                dirs.push(dir);
            }
            for dir in dirs.iter().rev() {
                let _ = fs::remove_dir(dir);
            }
        }
    }

    #[test]
    fn the_walk_stops_at_its_depth() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        mkdir(root, "a/b/c/d/pod9");
        let mut pods = PodCgroups::new(root.to_path_buf(), None);
        pods.refresh(["9"]);
        assert_eq!(pods.get("9"), None);
        let shallow = mkdir(root, "a/b/c/pod9");
        pods.refresh(["9"]);
        assert_eq!(pods.get("9"), Some(shallow.as_path()));
    }
}
