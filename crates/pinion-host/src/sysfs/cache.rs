//! Cache groups: the last-level cache (LLC) and kubelet's uncore cache.
//!
//! A CPU's LLC is its highest-level cache of type `Unified`, or, when it
//! has no unified cache, its highest-level `Data` cache (ppc LPARs expose
//! only L1, s390 splits L2 into data and instruction halves). Its uncore
//! cache is what cAdvisor reports to kubelet: its first cache above L2
//! (`level > 2`, not an instruction cache); CPUs without one fall back to
//! their socket (done by the caller). A group is the cache's
//! `shared_cpu_list` (or the hex `shared_cpu_map`) restricted to online
//! CPUs. Ids: the kernel's cache `id` when every group has one and they are
//! distinct (as kubelet uses it); otherwise the lowest CPU id of the group.
//! Without any cache directory every CPU is in LLC group 0.

use std::collections::BTreeSet;
use std::path::Path;

use pinion_core::CpuSet;

use super::read;
use super::DiscoveryError;

/// The last-level cache seen from one CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Llc {
    shared: CpuSet,
    id: Option<u32>,
}

/// One group of online CPUs sharing an LLC (or a lone CPU without one).
#[derive(Debug)]
struct Group {
    cpus: CpuSet,
    lowest: u32,
    id: Option<u32>,
    has_cache: bool,
}

/// Which cache of a CPU defines a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pick {
    /// The last-level cache (highest unified, else highest data).
    LastLevel,
    /// kubelet's uncore cache: the first cache above L2.
    AboveL2,
}

/// The LLC group id of every online CPU, indexed by CPU id. The cache
/// directory is read once per group (sharing is symmetric in the kernel).
pub(crate) fn read_llcs(cpu_dir: &Path, online: &CpuSet) -> Result<Vec<u32>, DiscoveryError> {
    let size = online.last().map_or(0, |id| id as usize + 1);
    let labels = read_groups(cpu_dir, online, Pick::LastLevel)?;
    if labels.iter().all(Option::is_none) {
        return Ok(vec![0; size]);
    }
    // A CPU without any cache while others have one is a group of its own.
    Ok(labels
        .iter()
        .enumerate()
        .map(|(cpu, label)| label.unwrap_or(u32::try_from(cpu).unwrap_or(u32::MAX)))
        .collect())
}

/// kubelet's uncore (L3) group id of every online CPU, indexed by CPU id;
/// `None` for CPUs without a cache above L2 (kubelet then uses the socket).
pub(crate) fn read_l3s(
    cpu_dir: &Path,
    online: &CpuSet,
) -> Result<Vec<Option<u32>>, DiscoveryError> {
    read_groups(cpu_dir, online, Pick::AboveL2)
}

/// The group label of every online CPU for the cache `pick` selects
/// (`None` for CPUs without such a cache).
fn read_groups(
    cpu_dir: &Path,
    online: &CpuSet,
    pick: Pick,
) -> Result<Vec<Option<u32>>, DiscoveryError> {
    let size = online.last().map_or(0, |id| id as usize + 1);
    let mut assigned = CpuSet::new();
    let mut groups: Vec<Group> = Vec::new();
    for cpu in online {
        if assigned.contains(cpu) {
            continue;
        }
        let llc = read_cache(&cpu_dir.join(format!("cpu{cpu}/cache")), pick)?;
        let mut cpus = llc
            .as_ref()
            .map_or_else(CpuSet::new, |l| l.shared.intersection(online));
        cpus.insert(cpu);
        cpus.difference_with(&assigned);
        assigned.union_with(&cpus);
        groups.push(Group {
            cpus,
            lowest: cpu,
            id: llc.as_ref().and_then(|l| l.id),
            has_cache: llc.is_some(),
        });
    }
    let mut labels = vec![None; size];
    let use_ids = cache_ids_usable(&groups, pick == Pick::LastLevel);
    for group in groups.iter().filter(|g| g.has_cache) {
        let label = match group.id {
            Some(id) if use_ids => id,
            _ => group.lowest,
        };
        for cpu in &group.cpus {
            labels[cpu as usize] = Some(label);
        }
    }
    Ok(labels)
}

/// Cache ids label groups only when every group has one (every group with
/// a cache, unless `all`) and no two share it.
fn cache_ids_usable(groups: &[Group], all: bool) -> bool {
    let mut seen = BTreeSet::new();
    groups
        .iter()
        .filter(|g| all || g.has_cache)
        .all(|g| g.has_cache && g.id.is_some_and(|id| seen.insert(id)))
}

/// The cache `pick` selects for the CPU whose `cache` directory is
/// `cache_dir`, or `None` when it has no such cache entry.
fn read_cache(cache_dir: &Path, pick: Pick) -> Result<Option<Llc>, DiscoveryError> {
    let Some(indexes) = read::numbered_entries(cache_dir, "index")? else {
        return Ok(None);
    };
    let mut best: Option<(bool, u32, u32)> = None; // (unified, level, index)
    for index in indexes {
        let dir = cache_dir.join(format!("index{index}"));
        let Some((unified, level)) = read_kind(&dir)? else {
            continue;
        };
        let better = match (pick, best) {
            (Pick::AboveL2, _) if level <= 2 => false,
            (Pick::AboveL2, Some(_)) => false,
            (Pick::LastLevel, Some((b_unified, b_level, _))) => {
                (unified, level) > (b_unified, b_level)
            }
            (_, None) => true,
        };
        if better {
            best = Some((unified, level, index));
        }
    }
    let Some((_, _, index)) = best else {
        return Ok(None);
    };
    let dir = cache_dir.join(format!("index{index}"));
    let shared =
        read::read_list_or_mask(&dir, "shared_cpu_list", "shared_cpu_map")?.ok_or_else(|| {
            read::malformed(&dir, "cache has neither shared_cpu_list nor shared_cpu_map")
        })?;
    let id = read::read_id(&dir.join("id"))?;
    Ok(Some(Llc { shared, id }))
}

/// `(is_unified, level)` of a cache entry that can be an LLC (unified or
/// data); `None` for instruction caches and entries without type or level.
fn read_kind(dir: &Path) -> Result<Option<(bool, u32)>, DiscoveryError> {
    let Some(kind) = read::read_trimmed(&dir.join("type"))? else {
        return Ok(None);
    };
    let unified = match kind.as_str() {
        "Unified" => true,
        "Data" => false,
        "Instruction" => return Ok(None),
        other => {
            return Err(read::malformed(
                &dir.join("type"),
                format!("unknown cache type {other:?}"),
            ))
        }
    };
    let level_path = dir.join("level");
    let Some(level) = read::read_int(&level_path)? else {
        return Ok(None);
    };
    let level = u32::try_from(level).map_err(|_| {
        read::malformed(&level_path, format!("cache level {level} is out of range"))
    })?;
    Ok(Some((unified, level)))
}
