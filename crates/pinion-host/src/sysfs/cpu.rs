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
/// are not online).
///
/// Each facet is read once per group, not once per CPU: the kernel's group
/// lists are symmetric (every CPU of `thread_siblings` lists the same
/// threads; `package_cpus`/`core_siblings` are exactly the CPUs with the
/// same `physical_package_id`; `die_cpus` those with the same die), so the
/// lowest CPU of a group speaks for all of it. This keeps discovery of a
/// large machine to a few hundred file reads.
pub(crate) fn read_places(
    cpu_dir: &Path,
    online: &CpuSet,
) -> Result<Vec<Option<Place>>, DiscoveryError> {
    let topology = |cpu: u32| cpu_dir.join(format!("cpu{cpu}/topology"));
    let cores = spread(online, |cpu| {
        let siblings =
            read::read_list_or_mask(&topology(cpu), "thread_siblings_list", "thread_siblings")?;
        Ok((siblings.unwrap_or_default(), cpu))
    })?;
    let sockets = spread(online, |cpu| {
        let dir = topology(cpu);
        let socket = read::read_id(&dir.join("physical_package_id"))?.unwrap_or(0);
        let members = match read::read_list_or_mask(&dir, "package_cpus_list", "package_cpus")? {
            Some(members) => Some(members),
            None => read::read_list_or_mask(&dir, "core_siblings_list", "core_siblings")?,
        };
        Ok((members.unwrap_or_default(), socket))
    })?;
    let dies = read_dies(cpu_dir, online, &sockets)?;
    let place = |cpu: u32| {
        let index = cpu as usize;
        Some(Place {
            core: cores.get(index).copied().flatten()?,
            socket: sockets.get(index).copied().flatten()?,
            die: dies.get(index).copied().flatten(),
        })
    };
    let size = online.last().map_or(0, |id| id as usize + 1);
    Ok((0..size)
        .map(|i| u32::try_from(i).ok().and_then(place))
        .collect())
}

/// Die of every online CPU: the lowest online CPU of the CPUs with the same
/// socket and `die_id` (raw die ids restart at 0 in every package, and the
/// model wants platform-unique ids). `die_id` is all-or-nothing on a
/// kernel: when the first online CPU has none (or -1), no CPU has a die.
fn read_dies(
    cpu_dir: &Path,
    online: &CpuSet,
    sockets: &[Option<u32>],
) -> Result<Vec<Option<u32>>, DiscoveryError> {
    let topology = |cpu: u32| cpu_dir.join(format!("cpu{cpu}/topology"));
    let first = online.first().unwrap_or(0);
    if read::read_id(&topology(first).join("die_id"))?.is_none() {
        return Ok(Vec::new());
    }
    let mut labels: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    let dies = spread(online, |cpu| {
        let dir = topology(cpu);
        let socket = sockets.get(cpu as usize).copied().flatten().unwrap_or(0);
        let die = read::read_id(&dir.join("die_id"))?
            .map(|raw| *labels.entry((socket, raw)).or_insert(cpu));
        let members = read::read_list_or_mask(&dir, "die_cpus_list", "die_cpus")?;
        Ok((members.unwrap_or_default(), die))
    })?;
    Ok(dies.into_iter().map(Option::flatten).collect())
}

/// Walks the online CPUs upwards; for each CPU not yet assigned, `read`
/// returns its group and value, and every still unassigned online member
/// of the group (always including the CPU itself) gets that value.
fn spread<T: Copy>(
    online: &CpuSet,
    mut read: impl FnMut(u32) -> Result<(CpuSet, T), DiscoveryError>,
) -> Result<Vec<Option<T>>, DiscoveryError> {
    let size = online.last().map_or(0, |id| id as usize + 1);
    let mut values: Vec<Option<T>> = vec![None; size];
    for cpu in online {
        if values[cpu as usize].is_some() {
            continue;
        }
        let (group, value) = read(cpu)?;
        let mut members = group.intersection(online);
        members.insert(cpu);
        for member in &members {
            let slot = &mut values[member as usize];
            if slot.is_none() {
                *slot = Some(value);
            }
        }
    }
    Ok(values)
}
