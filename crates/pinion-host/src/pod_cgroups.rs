//! Where a pod's cgroup is, by pod UID, so that its `cpu.pressure` can be
//! read (pools that size themselves, `docs/qrm.md`).
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

/// The directory names kubelet gives pod `uid`'s cgroup.
fn kube_names(uid: &str) -> Vec<String> {
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
