//! NIC discovery: `<root>/sys/class/net/*` for the NICs and their NUMA
//! node, an [`AddressSource`] for their addresses.
//!
//! * Only interfaces with a `device` link are NICs; virtual ones
//!   (loopback, bridges, veth, ifb, dummy, …) have none and are skipped.
//! * The NUMA node is `device/numa_node`; when the device has none (a
//!   virtio device sits below its PCI function), the nearest ancestor's
//!   (at most [`MAX_PARENT_HOPS`] levels up, never leaving `<root>/sys`).
//!   `-1` or no file at all means "no NUMA information": the NIC counts for
//!   every node. Anything but a regular file of at most 1 MiB there (a
//!   FIFO, a device) is an error naming it, never a hang.
//! * `speed` (Mb/s) when the driver reports it (`-1` or an unreadable file
//!   — the kernel fails the read for a link that is down — is unknown).
//! * Interfaces in other network namespaces are listed when the namespace
//!   is configured ([`Netns`]); sysfs shows the interfaces of the namespace
//!   that mounted it, so the namespace's own sysfs root may be given
//!   (`sysfs_root`); without one, its interfaces come from the address
//!   source alone (every interface but loopback, NUMA unknown).
//!
//! Addresses come from `getifaddrs(3)` through the `nix` crate
//! ([`SystemAddresses`]): it needs no netlink parsing of our own and works
//! in any namespace the calling thread is in; for another namespace a
//! short-lived thread enters it with `setns(2)` (CAP_SYS_ADMIN) and lists it
//! there, so the process itself never changes namespace.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::bounded_read::{read_text, ReadError, MAX_ATTRIBUTE};

/// How far above `device` a NUMA node is looked for.
pub const MAX_PARENT_HOPS: usize = 3;

/// Errors of NIC discovery; each names the path or namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed {}: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    #[error("cannot enter network namespace {}: {source}", path.display())]
    EnterNamespace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot list interface addresses{}: {source}", namespace_suffix(.namespace.as_deref()))]
    Addresses {
        namespace: Option<PathBuf>,
        #[source]
        source: std::io::Error,
    },
}

fn namespace_suffix(path: Option<&Path>) -> String {
    path.map(|p| format!(" in network namespace {}", p.display()))
        .unwrap_or_default()
}

/// A configured network namespace whose NICs pods may get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netns {
    /// Its name (`ns1`).
    pub name: String,
    /// The namespace file (`/var/run/netns/ns1`): what pods receive in
    /// `kubernetes.io/host-netns-path`.
    pub path: PathBuf,
    /// A root whose `sys/class/net` shows this namespace's interfaces.
    pub sysfs_root: Option<PathBuf>,
}

/// One NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    pub name: String,
    /// NUMA node, `None` = no NUMA information (any node).
    pub numa: Option<u32>,
    /// Link speed in Mb/s, when known.
    pub speed_mbps: Option<u64>,
    /// Addresses, in the order the source listed them.
    pub addresses: Vec<IpAddr>,
    /// The namespace it lives in (`None` = the host's).
    pub netns: Option<Netns>,
}

/// Interface name → addresses, for one namespace.
pub type AddressMap = BTreeMap<String, Vec<IpAddr>>;

/// Where addresses come from (the OS, or fixed ones in tests and
/// simulations).
pub trait AddressSource {
    /// Addresses of the host namespace (`None`) or of `netns`.
    fn addresses(&self, netns: Option<&Netns>) -> Result<AddressMap, NetError>;
}

/// `getifaddrs(3)` in the current or a configured namespace.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemAddresses;

impl AddressSource for SystemAddresses {
    fn addresses(&self, netns: Option<&Netns>) -> Result<AddressMap, NetError> {
        match netns {
            None => list_addresses(None),
            Some(ns) => {
                let file = File::open(&ns.path).map_err(|source| NetError::EnterNamespace {
                    path: ns.path.clone(),
                    source,
                })?;
                let path = ns.path.clone();
                std::thread::scope(|scope| {
                    scope
                        .spawn(|| {
                            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                                .map_err(|errno| NetError::EnterNamespace {
                                    path: path.clone(),
                                    source: errno.into(),
                                })?;
                            list_addresses(Some(&path))
                        })
                        .join()
                        .unwrap_or_else(|_| {
                            Err(NetError::Addresses {
                                namespace: Some(path.clone()),
                                source: std::io::Error::other("address listing thread panicked"),
                            })
                        })
                })
            }
        }
    }
}

fn list_addresses(namespace: Option<&Path>) -> Result<AddressMap, NetError> {
    let entries = nix::ifaddrs::getifaddrs().map_err(|errno| NetError::Addresses {
        namespace: namespace.map(Path::to_path_buf),
        source: errno.into(),
    })?;
    let mut map = AddressMap::new();
    for entry in entries {
        let list = map.entry(entry.interface_name.clone()).or_default();
        let Some(address) = entry.address else {
            continue;
        };
        if let Some(v4) = address.as_sockaddr_in() {
            list.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = address.as_sockaddr_in6() {
            list.push(IpAddr::V6(v6.ip()));
        }
    }
    Ok(map)
}

/// Fixed addresses: namespace name (`None` = host) → interface → addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FixedAddresses(pub BTreeMap<Option<String>, AddressMap>);

impl AddressSource for FixedAddresses {
    fn addresses(&self, netns: Option<&Netns>) -> Result<AddressMap, NetError> {
        let key = netns.map(|ns| ns.name.clone());
        Ok(self.0.get(&key).cloned().unwrap_or_default())
    }
}

/// The NICs of the host namespace (sysfs under `root`) and of every
/// configured namespace, host first, then by namespace order; by name
/// within one namespace.
pub fn discover_nics(
    root: &Path,
    namespaces: &[Netns],
    addresses: &dyn AddressSource,
) -> Result<Vec<Nic>, NetError> {
    let mut nics = nics_in(root, None, &addresses.addresses(None)?)?;
    for ns in namespaces {
        let found = addresses.addresses(Some(ns))?;
        match &ns.sysfs_root {
            Some(sysfs) => nics.extend(nics_in(sysfs, Some(ns), &found)?),
            None => nics.extend(found.into_iter().filter(|(name, _)| name != "lo").map(
                |(name, addresses)| Nic {
                    name,
                    numa: None,
                    speed_mbps: None,
                    addresses,
                    netns: Some(ns.clone()),
                },
            )),
        }
    }
    Ok(nics)
}

fn nics_in(
    root: &Path,
    netns: Option<&Netns>,
    addresses: &AddressMap,
) -> Result<Vec<Nic>, NetError> {
    let dir = root.join("sys/class/net");
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(NetError::Read { path: dir, source }),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut nics = Vec::new();
    for name in names {
        let iface = dir.join(&name);
        let device = iface.join("device");
        if !device.exists() {
            continue;
        }
        nics.push(Nic {
            numa: numa_node(root, &device)?,
            speed_mbps: speed(&iface.join("speed")),
            addresses: addresses.get(&name).cloned().unwrap_or_default(),
            netns: netns.cloned(),
            name,
        });
    }
    Ok(nics)
}

/// `device/numa_node`, or the nearest ancestor's inside `<root>/sys`.
fn numa_node(root: &Path, device: &Path) -> Result<Option<u32>, NetError> {
    if let Some(node) = read_numa_file(&device.join("numa_node"))? {
        return Ok(node);
    }
    let Ok(resolved) = fs::canonicalize(device) else {
        return Ok(None);
    };
    let boundary = fs::canonicalize(root.join("sys")).unwrap_or_else(|_| root.join("sys"));
    let mut dir = resolved.as_path();
    for _ in 0..MAX_PARENT_HOPS {
        let Some(parent) = dir.parent() else { break };
        if !parent.starts_with(&boundary) || parent == boundary {
            break;
        }
        if let Some(node) = read_numa_file(&parent.join("numa_node"))? {
            return Ok(node);
        }
        dir = parent;
    }
    Ok(None)
}

/// `Some(node)` from a `numa_node` file (`Some(None)` for `-1`), `None`
/// when there is no file.
fn read_numa_file(path: &Path) -> Result<Option<Option<u32>>, NetError> {
    let text = match read_text(path, MAX_ATTRIBUTE) {
        Ok(text) => text,
        Err(ReadError::Io(err)) if err.kind() == ErrorKind::NotFound => return Ok(None),
        Err(ReadError::Io(source)) => {
            return Err(NetError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
        Err(err) => {
            return Err(NetError::Malformed {
                path: path.to_path_buf(),
                reason: err.to_string(),
            })
        }
    };
    let value = text.trim();
    match value.parse::<i64>() {
        Ok(-1) => Ok(Some(None)),
        Ok(n) => u32::try_from(n)
            .map(|n| Some(Some(n)))
            .map_err(|_| NetError::Malformed {
                path: path.to_path_buf(),
                reason: format!("numa node {n} is out of range"),
            }),
        Err(_) => Err(NetError::Malformed {
            path: path.to_path_buf(),
            reason: format!("{value:?} is not a numa node"),
        }),
    }
}

/// Link speed in Mb/s; unknown (`-1`, unreadable, absent) is `None`.
fn speed(path: &Path) -> Option<u64> {
    let text = read_text(path, MAX_ATTRIBUTE).ok()?;
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u64::try_from(n).ok())
        .filter(|&n| n > 0)
}

#[cfg(test)]
mod tests;
