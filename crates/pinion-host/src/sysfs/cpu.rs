//! Which CPUs exist and are online, and where each online CPU sits: its core
//! (kubelet's id: the lowest online CPU of the core's threads), socket, die
//! and, on hybrid machines, core type.

use std::collections::BTreeMap;
use std::path::Path;

use pinion_core::CpuSet;

use super::read;
use super::DiscoveryError;

/// Online and present-but-offline CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CpuState {
    pub online: CpuSet,
    pub offline: CpuSet,
}

/// Reads `online` and `present` (falling back to the `cpuN` directories and
/// their `online` files when the kernel or the capture lacks them).
pub(crate) fn read_state(cpu_dir: &Path) -> Result<CpuState, DiscoveryError> {
    let numbers =
        read::numbered_entries(cpu_dir, "cpu")?.ok_or_else(|| DiscoveryError::NotFound {
            path: cpu_dir.to_path_buf(),
        })?;
    let dirs =
        CpuSet::from_ids(numbers).map_err(|err| read::malformed(cpu_dir, err.to_string()))?;
    let online = match read::read_list(&cpu_dir.join("online"))? {
        Some(online) => online,
        None => online_from_dirs(cpu_dir, &dirs)?,
    };
    if online.is_empty() {
        return Err(DiscoveryError::NoOnlineCpus {
            path: cpu_dir.to_path_buf(),
        });
    }
    if let Some(cpu) = online.difference(&dirs).first() {
        return Err(DiscoveryError::MissingCpu {
            path: cpu_dir.join(format!("cpu{cpu}")),
            cpu,
        });
    }
    let present = read::read_list(&cpu_dir.join("present"))?.unwrap_or(dirs);
    let offline = present.difference(&online);
    Ok(CpuState { online, offline })
}

/// Online CPUs from the per-CPU `online` files; a CPU without one (often
/// cpu0, which cannot be unplugged) is online.
fn online_from_dirs(cpu_dir: &Path, dirs: &CpuSet) -> Result<CpuSet, DiscoveryError> {
    let mut online = CpuSet::new();
    for cpu in dirs {
        let path = cpu_dir.join(format!("cpu{cpu}/online"));
        match read::read_int(&path)? {
            None | Some(1) => {
                online.insert(cpu);
            }
            Some(0) => {}
            Some(other) => {
                return Err(read::malformed(
                    &path,
                    format!("expected 0 or 1, found {other}"),
                ))
            }
        }
    }
    Ok(online)
}

/// Where one online CPU sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    /// Lowest online CPU id among the core's threads.
    pub core: u32,
    /// `physical_package_id`; 0 when the kernel reports -1 or nothing.
    pub socket: u32,
    /// Lowest online CPU id of the die (`die_id` within the socket), when
    /// the kernel reports a die.
    pub die: Option<u32>,
}

/// The place of every online CPU, indexed by CPU id (`None` for ids that
/// are not online). The topology directory is read once per core: the
/// kernel's sibling lists are symmetric, so the threads listed by the
/// lowest CPU of a core get that core's package and die.
pub(crate) fn read_places(
    cpu_dir: &Path,
    online: &CpuSet,
) -> Result<Vec<Option<Place>>, DiscoveryError> {
    let size = online.last().map_or(0, |id| id as usize + 1);
    let mut places: Vec<Option<Place>> = vec![None; size];
    let mut dies: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    for cpu in online {
        if places[cpu as usize].is_some() {
            continue;
        }
        let topology = cpu_dir.join(format!("cpu{cpu}/topology"));
        let siblings =
            read::read_list_or_mask(&topology, "thread_siblings_list", "thread_siblings")?
                .unwrap_or_default();
        let socket = read::read_id(&topology.join("physical_package_id"))?.unwrap_or(0);
        let die = read::read_id(&topology.join("die_id"))?
            .map(|raw| *dies.entry((socket, raw)).or_insert(cpu));
        let place = Place {
            core: cpu,
            socket,
            die,
        };
        let mut threads = siblings.intersection(online);
        threads.insert(cpu);
        for thread in &threads {
            let slot = &mut places[thread as usize];
            if slot.is_none() {
                *slot = Some(place);
            }
        }
    }
    Ok(places)
}
