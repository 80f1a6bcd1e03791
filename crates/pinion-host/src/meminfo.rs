//! Per-NUMA memory: `<root>/sys/devices/system/node/nodeN/meminfo` and
//! `…/nodeN/hugepages/hugepages-<size>kB/{nr,free}_hugepages`.
//!
//! `meminfo` lines read `Node 0 MemTotal:  16384 kB`; every value Pinion
//! uses is in kB. A machine without a node directory (no NUMA support in
//! the kernel) reports `<root>/proc/meminfo` as node 0.
//!
//! Every file must be a regular file of at most 1 MiB (`MAX_ATTRIBUTE`; a
//! real one is a few KiB): a FIFO or a device in its place is a read error,
//! a longer file is malformed. Neither hangs nor exhausts memory.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::bounded_read::{read_text, ReadError, MAX_ATTRIBUTE};

/// Errors of memory discovery; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum MemInfoError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed {}: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    #[error("no memory information under {}", path.display())]
    NotFound { path: PathBuf },
}

/// One hugepage size on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugePages {
    /// Page size in KiB (2048, 1048576, …).
    pub size_kib: u64,
    /// Pages configured (`nr_hugepages`).
    pub total: u64,
    /// Pages free (`free_hugepages`).
    pub free: u64,
}

impl HugePages {
    /// The resource name Kubernetes uses (`hugepages-2Mi`, `hugepages-1Gi`).
    #[must_use]
    pub fn resource_name(&self) -> String {
        let kib = self.size_kib;
        if kib >= 1 << 20 && kib.is_multiple_of(1 << 20) {
            format!("hugepages-{}Gi", kib >> 20)
        } else if kib >= 1 << 10 && kib.is_multiple_of(1 << 10) {
            format!("hugepages-{}Mi", kib >> 10)
        } else {
            format!("hugepages-{kib}Ki")
        }
    }

    /// Bytes configured.
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.total
            .saturating_mul(self.size_kib)
            .saturating_mul(1024)
    }
}

/// One NUMA node's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMemory {
    pub node: u32,
    /// `MemTotal` in bytes.
    pub total: u64,
    /// `MemFree` in bytes.
    pub free: u64,
    /// Hugepage pools of the node, ascending by page size.
    pub hugepages: Vec<HugePages>,
}

/// Every hugepage pool of `nodes` as the NodeResourceTopology lists it
/// (resource name and bytes configured, per node).
#[must_use]
pub fn hugepage_pools(nodes: &[NodeMemory]) -> Vec<pinion_core::nrt::HugePages> {
    nodes
        .iter()
        .flat_map(|node| {
            node.hugepages
                .iter()
                .map(|pool| pinion_core::nrt::HugePages {
                    node: node.node,
                    resource: pool.resource_name(),
                    bytes: pool.total_bytes(),
                })
        })
        .collect()
}

/// Reads every NUMA node's memory under `root` (`/` for this machine),
/// ascending by node id.
pub fn read_node_memory(root: &Path) -> Result<Vec<NodeMemory>, MemInfoError> {
    let node_dir = root.join("sys/devices/system/node");
    let mut ids = match fs::read_dir(&node_dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name();
                let digits = name.to_str()?.strip_prefix("node")?.to_string();
                digits.parse::<u32>().ok()
            })
            .collect::<Vec<_>>(),
        Err(err) if err.kind() == ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(MemInfoError::Read {
                path: node_dir,
                source,
            })
        }
    };
    ids.sort_unstable();
    if ids.is_empty() {
        return read_whole_machine(root);
    }
    ids.into_iter()
        .map(|id| {
            let dir = node_dir.join(format!("node{id}"));
            let path = dir.join("meminfo");
            let text = read(&path)?;
            Ok(NodeMemory {
                node: id,
                total: field(&path, &text, "MemTotal")?,
                free: field(&path, &text, "MemFree")?,
                hugepages: read_hugepages(&dir.join("hugepages"))?,
            })
        })
        .collect()
}

/// `<root>/proc/meminfo` as node 0 (no NUMA in the kernel); hugepages from
/// `<root>/sys/kernel/mm/hugepages`.
fn read_whole_machine(root: &Path) -> Result<Vec<NodeMemory>, MemInfoError> {
    let path = root.join("proc/meminfo");
    let text = match read(&path) {
        Ok(text) => text,
        Err(MemInfoError::Read { source, .. }) if source.kind() == ErrorKind::NotFound => {
            return Err(MemInfoError::NotFound {
                path: root.to_path_buf(),
            })
        }
        Err(err) => return Err(err),
    };
    Ok(vec![NodeMemory {
        node: 0,
        total: field(&path, &text, "MemTotal")?,
        free: field(&path, &text, "MemFree")?,
        hugepages: read_hugepages(&root.join("sys/kernel/mm/hugepages"))?,
    }])
}

/// The text of a meminfo or hugepages file (see the module's note on
/// FIFOs, devices and the size cap).
fn read(path: &Path) -> Result<String, MemInfoError> {
    read_text(path, MAX_ATTRIBUTE).map_err(|err| match err {
        ReadError::Io(source) => MemInfoError::Read {
            path: path.to_path_buf(),
            source,
        },
        err => MemInfoError::Malformed {
            path: path.to_path_buf(),
            reason: err.to_string(),
        },
    })
}

/// The value of `name:` in a meminfo text, in bytes (the file says kB).
fn field(path: &Path, text: &str, name: &str) -> Result<u64, MemInfoError> {
    let key = format!("{name}:");
    let malformed = |reason: String| MemInfoError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    let line = text
        .lines()
        .find(|line| line.split_ascii_whitespace().any(|w| w == key))
        .ok_or_else(|| malformed(format!("no {name} line")))?;
    let mut words = line
        .split_once(&key)
        .map_or("", |(_, rest)| rest)
        .split_ascii_whitespace();
    let value = words.next().unwrap_or_default();
    let kib = value
        .parse::<u64>()
        .map_err(|_| malformed(format!("{name} {value:?} is not a number")))?;
    match words.next() {
        Some("kB") => kib
            .checked_mul(1024)
            .ok_or_else(|| malformed(format!("{name} {kib} kB overflows"))),
        unit => Err(malformed(format!("{name} unit {unit:?}, expected \"kB\""))),
    }
}

/// `hugepages-<size>kB` directories; none is an empty list.
fn read_hugepages(dir: &Path) -> Result<Vec<HugePages>, MemInfoError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(MemInfoError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut pools = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(size_kib) = name
            .to_str()
            .and_then(|n| n.strip_prefix("hugepages-"))
            .and_then(|n| n.strip_suffix("kB"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let path = entry.path();
        pools.push(HugePages {
            size_kib,
            total: number(&path.join("nr_hugepages"))?,
            free: number(&path.join("free_hugepages"))?,
        });
    }
    pools.sort_unstable_by_key(|p| p.size_kib);
    Ok(pools)
}

fn number(path: &Path) -> Result<u64, MemInfoError> {
    let text = read(path)?;
    text.trim()
        .parse::<u64>()
        .map_err(|_| MemInfoError::Malformed {
            path: path.to_path_buf(),
            reason: format!("{:?} is not a number", text.trim()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounded_read::is_not_regular;
    use crate::bounded_read::testing::{mkfifo, without_hanging};

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }

    fn node_meminfo(node: u32, total_kib: u64, free_kib: u64) -> String {
        format!(
            "Node {node} MemTotal:       {total_kib} kB\nNode {node} MemFree:        {free_kib} kB\nNode {node} MemUsed:        1 kB\nNode {node} HugePages_Total:     0\n"
        )
    }

    #[test]
    fn nodes_and_hugepages_are_read_in_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        write(
            root,
            "sys/devices/system/node/node1/meminfo",
            &node_meminfo(1, 2048, 1024),
        );
        write(
            root,
            "sys/devices/system/node/node0/meminfo",
            &node_meminfo(0, 4096, 100),
        );
        let huge = "sys/devices/system/node/node0/hugepages/hugepages-2048kB";
        write(root, &format!("{huge}/nr_hugepages"), "8\n");
        write(root, &format!("{huge}/free_hugepages"), "6\n");
        let giga = "sys/devices/system/node/node0/hugepages/hugepages-1048576kB";
        write(root, &format!("{giga}/nr_hugepages"), "1\n");
        write(root, &format!("{giga}/free_hugepages"), "1\n");
        write(root, "sys/devices/system/node/possible", "0-1\n");
        let nodes = read_node_memory(root).expect("read");
        assert_eq!(nodes.len(), 2);
        assert_eq!(
            (nodes[0].node, nodes[0].total, nodes[0].free),
            (0, 4096 * 1024, 100 * 1024)
        );
        assert_eq!(
            nodes[0].hugepages,
            vec![
                HugePages {
                    size_kib: 2048,
                    total: 8,
                    free: 6
                },
                HugePages {
                    size_kib: 1_048_576,
                    total: 1,
                    free: 1
                },
            ]
        );
        assert_eq!(nodes[0].hugepages[0].resource_name(), "hugepages-2Mi");
        assert_eq!(nodes[0].hugepages[1].resource_name(), "hugepages-1Gi");
        assert_eq!(nodes[0].hugepages[0].total_bytes(), 16 << 20);
        assert_eq!(nodes[1].total, 2048 * 1024);
        assert!(nodes[1].hugepages.is_empty());
    }

    #[test]
    fn hugepage_pools_are_listed_per_node_by_resource_name_in_bytes() {
        let node = |node: u32, hugepages: Vec<HugePages>| NodeMemory {
            node,
            total: 1 << 30,
            free: 0,
            hugepages,
        };
        let pools = hugepage_pools(&[
            node(
                0,
                vec![HugePages {
                    size_kib: 2048,
                    total: 8,
                    free: 8,
                }],
            ),
            node(
                3,
                vec![HugePages {
                    size_kib: 1_048_576,
                    total: 2,
                    free: 0,
                }],
            ),
        ]);
        let listed: Vec<(u32, &str, u64)> = pools
            .iter()
            .map(|p| (p.node, p.resource.as_str(), p.bytes))
            .collect();
        assert_eq!(
            listed,
            [
                (0, "hugepages-2Mi", 16 << 20),
                (3, "hugepages-1Gi", 2 << 30)
            ]
        );
    }

    #[test]
    fn without_numa_the_machine_is_node_zero() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "proc/meminfo",
            "MemTotal:  1000 kB\nMemFree:  10 kB\n",
        );
        let nodes = read_node_memory(dir.path()).expect("read");
        assert_eq!(
            nodes,
            vec![NodeMemory {
                node: 0,
                total: 1_024_000,
                free: 10_240,
                hugepages: vec![]
            }]
        );
        let empty = tempfile::tempdir().expect("tempdir");
        assert!(matches!(
            read_node_memory(empty.path()),
            Err(MemInfoError::NotFound { .. })
        ));
    }

    #[test]
    fn malformed_files_name_the_file_and_the_value() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "sys/devices/system/node/node0/meminfo",
            "Node 0 MemTotal: lots kB\n",
        );
        let err = read_node_memory(dir.path()).expect_err("malformed");
        assert!(
            matches!(err, MemInfoError::Malformed { ref reason, .. } if reason.contains("\"lots\""))
        );
        assert!(err.to_string().contains("node0/meminfo"), "{err}");
        write(
            dir.path(),
            "sys/devices/system/node/node0/meminfo",
            "Node 0 MemTotal: 5 MB\nNode 0 MemFree: 1 kB\n",
        );
        let err = read_node_memory(dir.path()).expect_err("unit");
        assert!(err.to_string().contains("\"MB\""), "{err}");
    }

    /// A tree with node 0's meminfo and a 2 MiB hugepage pool, whose
    /// `nr_hugepages` the caller plants.
    fn tree_with_hugepages() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "sys/devices/system/node/node0/meminfo",
            &node_meminfo(0, 4096, 100),
        );
        let pool = dir
            .path()
            .join("sys/devices/system/node/node0/hugepages/hugepages-2048kB");
        write(&pool, "free_hugepages", "0\n");
        (dir, pool.join("nr_hugepages"))
    }

    /// Reads the memory of `root` on another thread: fails rather than
    /// hangs when a read blocks.
    fn read_promptly(root: &Path) -> Result<Vec<NodeMemory>, MemInfoError> {
        let root = root.to_path_buf();
        without_hanging("memory discovery", move || read_node_memory(&root))
    }

    fn assert_not_regular(err: &MemInfoError, suffix: &str) {
        assert!(
            matches!(err, MemInfoError::Read { path, source }
                if path.ends_with(suffix) && is_not_regular(source)),
            "{err:?}"
        );
        assert!(err.to_string().contains(suffix), "{err}");
    }

    #[test]
    fn regression_fifo_as_nr_hugepages_or_meminfo_hung_memory_discovery() {
        let (dir, nr_hugepages) = tree_with_hugepages();
        mkfifo(&nr_hugepages);
        let err = read_promptly(dir.path()).expect_err("a fifo is refused");
        assert_not_regular(&err, "hugepages-2048kB/nr_hugepages");
        assert!(
            err.to_string().contains("not a regular file (a fifo)"),
            "{err}"
        );

        let whole = tempfile::tempdir().expect("tempdir");
        mkfifo(&whole.path().join("proc/meminfo"));
        let err = read_promptly(whole.path()).expect_err("a fifo is refused");
        assert_not_regular(&err, "proc/meminfo");
    }

    #[test]
    fn regression_nr_hugepages_symlinked_to_dev_zero_grew_memory_without_bound() {
        let (dir, nr_hugepages) = tree_with_hugepages();
        std::os::unix::fs::symlink("/dev/zero", &nr_hugepages).expect("symlink");
        let err = read_promptly(dir.path()).expect_err("a device is refused");
        assert_not_regular(&err, "hugepages-2048kB/nr_hugepages");
    }

    #[test]
    fn regression_meminfo_over_the_cap_was_read_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let over = usize::try_from(MAX_ATTRIBUTE).expect("cap fits") + 1;
        let mut text = node_meminfo(0, 4096, 100);
        text.push_str(&" ".repeat(over - text.len()));
        write(dir.path(), "sys/devices/system/node/node0/meminfo", &text);
        let err = read_node_memory(dir.path()).expect_err("over the cap");
        assert!(
            matches!(err, MemInfoError::Malformed { ref path, ref reason }
                if path.ends_with("node0/meminfo") && reason == "larger than 1048576 bytes"),
            "{err:?}"
        );
        assert!(err.to_string().contains("node0/meminfo"), "{err}");
        text.pop();
        write(dir.path(), "sys/devices/system/node/node0/meminfo", &text);
        read_node_memory(dir.path()).expect("at the cap");
    }

    /// This machine: one node with memory and a free figure below the total.
    #[test]
    fn this_machine() {
        let Ok(nodes) = read_node_memory(Path::new("/")) else {
            eprintln!("skipping: no readable memory information on this machine");
            return;
        };
        assert!(!nodes.is_empty());
        for node in nodes {
            assert!(node.total > 0 && node.free <= node.total, "{node:?}");
        }
    }
}
