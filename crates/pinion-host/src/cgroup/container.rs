//! The cgroups of containers a runtime created (NRI's
//! `linux.cgroups_path`, the OCI spec's `linux.cgroupsPath`), resolved the
//! way runc resolves them, so that the reconcile pass can read their
//! cpusets back:
//!
//! * cgroupfs driver: an absolute path below the hierarchy's mount
//!   (`/kubepods/burstable/pod<uid>/<container id>`);
//! * systemd driver: `slice:prefix:name`, the scope `<prefix>-<name>.scope`
//!   (a `name` ending in `.slice` is used as it is) inside `slice` expanded
//!   to its ancestors (`kubepods-burstable-pod<uid>.slice` is
//!   `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`;
//!   an empty slice is `system.slice`, `-` the root slice).
//!
//! The same relative path holds in the v1 cpuset hierarchy and in the v2
//! unified one. Paths come from the runtime and are checked: no `..`, no
//! empty or relative cgroupfs path, no `/` inside systemd names.

use std::path::PathBuf;

use super::CgroupError;

/// The longest cgroups path accepted.
pub const MAX_CGROUPS_PATH_LEN: usize = 4096;

/// A container's cgroup relative to a hierarchy's mount
/// (`kubepods/burstable/pod…/id`, never leaving it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ContainerCgroup(PathBuf);

impl ContainerCgroup {
    /// Resolves an OCI `cgroupsPath` as runc does (see the module
    /// documentation).
    pub fn resolve(cgroups_path: &str) -> Result<Self, CgroupError> {
        let invalid = |reason: &'static str| CgroupError::InvalidName {
            name: cgroups_path.to_string(),
            reason,
        };
        if cgroups_path.len() > MAX_CGROUPS_PATH_LEN {
            return Err(invalid("longer than 4096 bytes"));
        }
        let parts: Vec<&str> = cgroups_path.split(':').collect();
        let relative = match parts.as_slice() {
            [slice, prefix, name] => systemd_path(slice, prefix, name).map_err(invalid)?,
            [path] => cgroupfs_path(path).map_err(invalid)?,
            _ => {
                return Err(invalid(
                    "neither a cgroupfs path nor systemd's slice:prefix:name",
                ))
            }
        };
        Ok(Self(relative))
    }

    /// The path relative to the hierarchy's mount.
    #[must_use]
    pub fn relative(&self) -> &std::path::Path {
        &self.0
    }

    /// The cgroup of Kubernetes pod `uid` that this container's cgroup
    /// lies in: its parent, when kubelet named that after the pod
    /// (`pod<uid>` with the cgroupfs driver,
    /// `kubepods[-<qos>]-pod<uid>.slice` with systemd's, the uid's `-` as
    /// `_`); `None` for any other parent.
    #[must_use]
    pub fn pod_cgroup(&self, uid: &str) -> Option<ContainerCgroup> {
        let parent = self.0.parent()?;
        let name = parent.file_name()?.to_str()?;
        crate::pod_cgroups::kube_names(uid)
            .iter()
            .any(|kube| kube == name)
            .then(|| ContainerCgroup(parent.to_path_buf()))
    }
}

impl std::fmt::Display for ContainerCgroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/{}", self.0.display())
    }
}

fn cgroupfs_path(path: &str) -> Result<PathBuf, &'static str> {
    if path.is_empty() {
        return Err("empty cgroups path");
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err("a cgroupfs path must be absolute");
    };
    let mut relative = PathBuf::new();
    for part in rest.split('/').filter(|p| !p.is_empty()) {
        if part == "." || part == ".." {
            return Err("'.' and '..' are not allowed");
        }
        relative.push(part);
    }
    if relative.as_os_str().is_empty() {
        return Err("the hierarchy's root is not a container's cgroup");
    }
    Ok(relative)
}

fn systemd_path(slice: &str, prefix: &str, name: &str) -> Result<PathBuf, &'static str> {
    if [slice, prefix, name].iter().any(|p| p.contains('/')) {
        return Err("systemd names cannot contain '/'");
    }
    if name.is_empty() {
        return Err("empty unit name in slice:prefix:name");
    }
    let mut relative = expand_slice(if slice.is_empty() {
        "system.slice"
    } else {
        slice
    })?;
    let unit = if name.ends_with(".slice") {
        name.to_string()
    } else {
        format!("{prefix}-{name}.scope")
    };
    if unit == ".." || unit == "." {
        return Err("'.' and '..' are not allowed");
    }
    relative.push(unit);
    Ok(relative)
}

/// `a-b-c.slice` → `a.slice/a-b.slice/a-b-c.slice`; `-.slice` and `-` are
/// the root.
fn expand_slice(slice: &str) -> Result<PathBuf, &'static str> {
    if slice == "-" || slice == "-.slice" {
        return Ok(PathBuf::new());
    }
    let Some(stem) = slice.strip_suffix(".slice") else {
        return Err("a systemd slice must end in .slice");
    };
    if stem.is_empty() || stem.starts_with('-') || stem.ends_with('-') || stem.contains("--") {
        return Err("malformed systemd slice name");
    }
    let mut path = PathBuf::new();
    let mut prefix = String::new();
    for (index, part) in stem.split('-').enumerate() {
        if index > 0 {
            prefix.push('-');
        }
        prefix.push_str(part);
        path.push(format!("{prefix}.slice"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_containers_pod_cgroup_is_its_parent_named_after_the_pod() {
        let uid = "12-34";
        let pod = |path: &str| {
            ContainerCgroup::resolve(path)
                .unwrap()
                .pod_cgroup(uid)
                .map(|c| c.to_string())
        };
        assert_eq!(
            pod("/kubepods/pod12-34/abcd").as_deref(),
            Some("/kubepods/pod12-34")
        );
        assert_eq!(
            pod("/kubepods/burstable/pod12-34/abcd").as_deref(),
            Some("/kubepods/burstable/pod12-34")
        );
        assert_eq!(
            pod("kubepods-pod12_34.slice:cri-containerd:abcd").as_deref(),
            Some("/kubepods.slice/kubepods-pod12_34.slice")
        );
        assert_eq!(
            pod("kubepods-burstable-pod12_34.slice:cri-containerd:abcd").as_deref(),
            Some("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice")
        );
        // Another pod's cgroup, a parent not named after a pod, a
        // container at the hierarchy's top: none.
        assert_eq!(pod("/kubepods/pod56-78/abcd"), None);
        assert_eq!(pod("/system.slice/abcd"), None);
        assert_eq!(pod("/abcd"), None);
    }

    fn resolved(path: &str) -> String {
        ContainerCgroup::resolve(path)
            .unwrap_or_else(|err| panic!("{path}: {err}"))
            .to_string()
    }

    #[test]
    fn cgroupfs_paths_are_taken_below_the_mount() {
        assert_eq!(
            resolved("/kubepods/burstable/pod1234/abcd"),
            "/kubepods/burstable/pod1234/abcd"
        );
        assert_eq!(resolved("/kubepods//pod1/c/"), "/kubepods/pod1/c");
    }

    #[test]
    fn systemd_paths_expand_the_slice_and_name_the_scope() {
        assert_eq!(
            resolved("kubepods-burstable-pod12_34.slice:cri-containerd:abcd"),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice/cri-containerd-abcd.scope"
        );
        assert_eq!(
            resolved("kubepods-pod9.slice:crio:ef"),
            "/kubepods.slice/kubepods-pod9.slice/crio-ef.scope"
        );
        assert_eq!(resolved(":runc:x"), "/system.slice/runc-x.scope");
        assert_eq!(resolved("-:p:x"), "/p-x.scope");
        assert_eq!(
            resolved("a-b.slice:p:c-d.slice"),
            "/a.slice/a-b.slice/c-d.slice"
        );
    }

    #[test]
    fn paths_that_could_leave_the_hierarchy_are_refused_by_name() {
        for bad in [
            "",
            "kubepods/pod1/c",
            "/kubepods/../etc",
            "/",
            "/a/./b",
            "kubepods.slice:p:../x",
            "kubepods.slice:p:",
            "kube/pods.slice:p:x",
            "kubepods:p:x",
            "-kubepods.slice:p:x",
            "a--b.slice:p:x",
            "a:b",
            "a:b:c:d",
        ] {
            let err = ContainerCgroup::resolve(bad).expect_err(bad);
            assert!(
                matches!(&err, CgroupError::InvalidName { name, .. } if name == bad),
                "{bad}: {err}"
            );
        }
        let long = format!("/{}", "a".repeat(MAX_CGROUPS_PATH_LEN));
        assert!(ContainerCgroup::resolve(&long).is_err());
    }

    proptest::proptest! {
        /// Whatever the runtime sends, a resolved path stays below the
        /// mount: relative, without `.` or `..` components.
        #[test]
        fn a_resolved_path_never_leaves_the_mount(text in "[a-z./:_-]{0,40}") {
            if let Ok(cgroup) = ContainerCgroup::resolve(&text) {
                let path = cgroup.relative();
                proptest::prop_assert!(path.is_relative(), "{text:?} -> {path:?}");
                proptest::prop_assert!(path.components().all(|c| matches!(c, std::path::Component::Normal(_))), "{text:?} -> {path:?}");
                proptest::prop_assert!(path.components().count() > 0, "{text:?}");
            }
        }
    }
}
