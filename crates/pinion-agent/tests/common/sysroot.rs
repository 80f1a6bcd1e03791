//! A sysroot of symlinks for an agent on a real machine's tree (included
//! with `#[path]` by the agent's and the CLI's tests).

use std::path::Path;

/// Builds a sysroot at `root` for an agent on `machine` (a `../shared`
/// topology): its `sys` and `proc` files symlinked (read in place), the
/// real `/proc/locks` (the cgroup-root lock names its holder there), and a
/// mountinfo that puts a plain-directory cgroup v2 hierarchy on
/// `root/cgroup` with the cpuset, cpu and memory controllers.
pub fn fake_cgroup_v2_sysroot(machine: &Path, root: &Path) {
    std::fs::create_dir_all(root.join("proc/self")).expect("proc");
    std::os::unix::fs::symlink(machine.join("sys"), root.join("sys")).expect("sys link");
    for entry in std::fs::read_dir(machine.join("proc")).expect("machine's proc") {
        let entry = entry.expect("entry");
        std::os::unix::fs::symlink(entry.path(), root.join("proc").join(entry.file_name()))
            .expect("proc link");
    }
    std::os::unix::fs::symlink("/proc/locks", root.join("proc/locks")).expect("locks link");
    std::fs::write(
        root.join("proc/self/mountinfo"),
        "30 23 0:26 / /cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n",
    )
    .expect("mountinfo");
    std::fs::create_dir_all(root.join("cgroup")).expect("cgroup mount");
    std::fs::write(
        root.join("cgroup/cgroup.controllers"),
        "cpuset cpu memory\n",
    )
    .expect("controllers");
    std::fs::write(root.join("cgroup/cgroup.subtree_control"), "").expect("subtree");
}
