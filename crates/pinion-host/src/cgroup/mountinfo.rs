//! Finding the cpuset hierarchy from `/proc/<pid>/mountinfo` (format in
//! proc(5)): a cgroup v1 mount whose super options include `cpuset`, or a
//! cgroup2 mount whose `cgroup.controllers` lists `cpuset`.

use std::path::{Path, PathBuf};

use super::{CgroupError, CgroupOp, CgroupVersion};
use crate::bounded_read::{read_text, MAX_ATTRIBUTE};

/// Largest `mountinfo` read: a line per mount, a few hundred bytes each;
/// busy hosts with thousands of container mounts stay far below 16 MiB.
pub(crate) const MAX_MOUNTINFO: u64 = 16 << 20;

/// The `mountinfo` file's text: a regular file (a FIFO in its place is an
/// error, not a hang) of at most [`MAX_MOUNTINFO`] bytes (a symlink to
/// `/dev/zero` or a longer file is an error naming the cap, not a read
/// without end).
fn read_mountinfo(mountinfo: &Path) -> Result<String, CgroupError> {
    read_text(mountinfo, MAX_MOUNTINFO).map_err(|err| CgroupError::Io {
        op: CgroupOp::Read,
        path: mountinfo.to_path_buf(),
        data: None,
        source: err.into_io(),
    })
}

/// One cgroup mount that can hold cpusets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpusetMount {
    pub version: CgroupVersion,
    /// The mount point, under the prefix given to [`cpuset_mounts`].
    pub path: PathBuf,
}

/// Every cpuset-capable cgroup mount listed in the `mountinfo` file, mount
/// points joined under `prefix` (`/` for this machine). A cgroup2 mount
/// counts only when its `cgroup.controllers` offers `cpuset`.
pub fn cpuset_mounts(mountinfo: &Path, prefix: &Path) -> Result<Vec<CpusetMount>, CgroupError> {
    let text = read_mountinfo(mountinfo)?;
    let mut mounts = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (fstype, mount_point, super_opts) =
            parse_line(line).ok_or_else(|| CgroupError::MountInfo {
                path: mountinfo.to_path_buf(),
                line: index + 1,
                text: line.chars().take(200).collect(),
            })?;
        let path = prefix.join(mount_point.trim_start_matches('/'));
        let version = match fstype {
            "cgroup" if super_opts.split(',').any(|opt| opt == "cpuset") => CgroupVersion::V1,
            "cgroup2" if offers_cpuset(&path) => CgroupVersion::V2,
            _ => continue,
        };
        mounts.push(CpusetMount { version, path });
    }
    Ok(mounts)
}

/// The mount point (joined under `prefix`) of the cgroup v1 hierarchy
/// with `controller` (`cpu`, `memory`) among its super options, if any.
pub fn v1_controller_mount(
    mountinfo: &Path,
    prefix: &Path,
    controller: &str,
) -> Result<Option<PathBuf>, CgroupError> {
    let text = read_mountinfo(mountinfo)?;
    Ok(text
        .lines()
        .filter_map(parse_line)
        .find_map(|(fstype, mount_point, opts)| {
            (fstype == "cgroup" && opts.split(',').any(|opt| opt == controller))
                .then(|| prefix.join(mount_point.trim_start_matches('/')))
        }))
}

/// (filesystem type, unescaped mount point, super options) of one line.
fn parse_line(line: &str) -> Option<(&str, String, &str)> {
    let (before, after) = line.split_once(" - ")?;
    let mount_point = before.split(' ').nth(4)?;
    let mut tail = after.split(' ');
    let fstype = tail.next()?;
    let _source = tail.next()?;
    let super_opts = tail.next().unwrap_or("");
    Some((fstype, unescape(mount_point), super_opts))
}

/// Undoes the kernel's octal escapes (`\040` for a space, …).
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        if let Some(digits) = octal {
            let value = digits
                .iter()
                .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
            out.push(u8::try_from(value).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn offers_cpuset(mount: &Path) -> bool {
    read_text(&mount.join("cgroup.controllers"), MAX_ATTRIBUTE)
        .is_ok_and(|text| text.split_whitespace().any(|c| c == "cpuset"))
}

/// The mount `root` lies in (longest matching mount point), or, without a
/// root, the first v1 cpuset mount, else the first v2 one.
pub fn choose(mounts: &[CpusetMount], root: Option<&Path>) -> Option<CpusetMount> {
    match root {
        Some(root) => mounts
            .iter()
            .filter(|m| root.starts_with(&m.path) && root != m.path)
            .max_by_key(|m| m.path.components().count())
            .cloned(),
        None => mounts
            .iter()
            .find(|m| m.version == CgroupVersion::V1)
            .or_else(|| mounts.first())
            .cloned(),
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io::ErrorKind;

    use super::*;
    use crate::bounded_read::is_not_regular;
    use crate::bounded_read::testing::{mkfifo, without_hanging};

    const SAMPLE: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_v1_cpuset_and_v2_only_with_the_controller() {
        let dir = tempfile::tempdir().expect("tempdir");
        let info = dir.path().join("mountinfo");
        fs::write(&info, SAMPLE).expect("write");
        let mounts = cpuset_mounts(&info, dir.path()).expect("parse");
        let v1 = dir.path().join("sys/fs/cgroup/cpuset");
        assert_eq!(
            mounts,
            vec![CpusetMount {
                version: CgroupVersion::V1,
                path: v1.clone()
            }]
        );
        let unified = dir.path().join("sys/fs/cgroup/unified");
        fs::create_dir_all(&unified).expect("mkdir");
        fs::write(unified.join("cgroup.controllers"), "cpu cpuset memory\n").expect("write");
        let mounts = cpuset_mounts(&info, dir.path()).expect("parse");
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[1].version, CgroupVersion::V2);
        let chosen = choose(&mounts, Some(&unified.join("pinion"))).expect("v2 chosen");
        assert_eq!(chosen.path, unified);
        assert_eq!(choose(&mounts, None).expect("default").path, v1);
        assert!(
            choose(&mounts, Some(&v1)).is_none(),
            "the mount itself is no root"
        );
        assert!(choose(&mounts, Some(Path::new("/elsewhere"))).is_none());
    }

    #[test]
    fn finds_the_v1_cpu_and_memory_hierarchies() {
        let dir = tempfile::tempdir().expect("tempdir");
        let info = dir.path().join("mountinfo");
        let text = format!(
            "{SAMPLE}35 31 0:32 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        )
        .replace(
            "/sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n",
            "/sys/fs/cgroup/net rw - cgroup cgroup rw,net_cls\n",
        );
        fs::write(&info, text).expect("write");
        assert_eq!(
            v1_controller_mount(&info, dir.path(), "cpu").expect("parse"),
            Some(dir.path().join("sys/fs/cgroup/cpu,cpuacct"))
        );
        assert_eq!(
            v1_controller_mount(&info, dir.path(), "memory").expect("parse"),
            None
        );
    }

    #[test]
    fn malformed_line_names_file_and_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let info = dir.path().join("mountinfo");
        fs::write(&info, "31 23 0:28 / /x rw\n").expect("write");
        let err = cpuset_mounts(&info, dir.path()).expect_err("malformed");
        assert!(
            matches!(err, CgroupError::MountInfo { line: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn escaped_mount_points_are_unescaped() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain\\"), "/plain\\");
    }

    #[test]
    fn regression_fifo_as_mountinfo_hung_cgroup_detection() {
        let dir = tempfile::tempdir().expect("tempdir");
        let info = dir.path().join("proc/self/mountinfo");
        mkfifo(&info);
        let root = dir.path().to_path_buf();
        let (first, second) = without_hanging("reading a fifo mountinfo", move || {
            let info = root.join("proc/self/mountinfo");
            (
                cpuset_mounts(&info, &root).expect_err("a fifo is refused"),
                v1_controller_mount(&info, &root, "cpu").expect_err("a fifo is refused"),
            )
        });
        for err in [first, second] {
            assert!(
                matches!(err, CgroupError::Io { op: CgroupOp::Read, ref path, ref source, .. }
                    if path.ends_with("proc/self/mountinfo") && is_not_regular(source)),
                "{err:?}"
            );
            assert!(
                err.to_string().contains("not a regular file (a fifo)"),
                "{err}"
            );
        }
    }

    #[test]
    fn regression_mountinfo_was_read_without_a_size_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let info = dir.path().join("mountinfo");
        let over = usize::try_from(MAX_MOUNTINFO).expect("cap fits") + 1;
        let mut text = SAMPLE.to_string();
        text.push_str(&"\n".repeat(over - text.len()));
        fs::write(&info, &text).expect("write");
        for err in [
            cpuset_mounts(&info, dir.path()).expect_err("over the cap"),
            v1_controller_mount(&info, dir.path(), "cpu").expect_err("over the cap"),
        ] {
            assert!(
                matches!(err, CgroupError::Io { ref path, ref source, .. }
                    if path == &info && source.kind() == ErrorKind::FileTooLarge),
                "{err:?}"
            );
            assert!(
                err.to_string().contains("larger than 16777216 bytes"),
                "{err}"
            );
        }
        text.pop();
        fs::write(&info, &text).expect("write");
        assert_eq!(
            cpuset_mounts(&info, dir.path()).expect("at the cap").len(),
            1
        );
        let dev_zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &dev_zero).expect("symlink");
        let err = cpuset_mounts(&dev_zero, dir.path()).expect_err("a device");
        assert!(
            matches!(err, CgroupError::Io { ref source, .. } if is_not_regular(source)),
            "{err:?}"
        );
    }
}
