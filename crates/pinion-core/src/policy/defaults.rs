//! Pinion's defaults for the agent's configuration: what a key absent from
//! the config file means — the same whether the file is absent, empty or
//! sets other keys only. One table, read by the agent's config, by the
//! `pinion state … --config` tools, and printed by `pinion-agent --help`.
//!
//! Where Pinion's default differs from kubelet's (kubelet's CPU manager
//! policy defaults to `none`, with no reservation), the table says so;
//! `docs/differences-from-kubelet.md` gives the reason: a node agent whose
//! job is pinning should not unpin running workloads because a file set
//! some unrelated key.

use super::PolicyError;

/// `cpuManagerPolicy` when the file does not set it.
pub const CPU_MANAGER_POLICY: &str = "static";

/// The CPU reservation, in millicores, when none of `reservedSystemCPUs`,
/// `kubeReserved.cpu` and `systemReserved.cpu` is set (as
/// `systemReserved.cpu: "1"`). An explicit `0` is kept: the static policy
/// then refuses to start with kubelet's message.
pub const RESERVED_CPU_MILLI: u128 = 1000;

/// Each key and its default, for `pinion-agent --help` and the docs.
pub const TABLE: &[(&str, &str)] = &[
    ("cpuManagerPolicy", "static (kubelet: none)"),
    (
        "systemReserved.cpu",
        "1, when no CPU reservation is set (kubelet: none)",
    ),
    ("cpuManagerPolicyOptions", "none"),
    ("cpuManagerReconcilePeriod", "10s"),
    ("topologyManagerPolicy", "none"),
    ("topologyManagerScope", "container"),
    (
        "migrateOnStart",
        "migrate only when no running workload loses exclusive CPUs; otherwise refuse",
    ),
    (
        "stateDir",
        "/var/lib/pinion (root), ~/.local/state/pinion (other users)",
    ),
    (
        "socket",
        "/run/pinion/pinion.sock (root), <stateDir>/pinion.sock (other users)",
    ),
    ("cgroupRoot", "<cpuset mount>/pinion"),
    ("metricsAddr", "127.0.0.1:9590"),
    ("nri.enabled", "false"),
    ("qosResourceManager.enabled", "false"),
];

/// The number of CPUs to reserve from the file's keys: the size of
/// `reservedSystemCPUs` when it is set; otherwise `kubeReserved.cpu +
/// systemReserved.cpu` rounded up to whole CPUs when either is set;
/// otherwise [`RESERVED_CPU_MILLI`]. Zero when the keys reserve nothing
/// (the static policy then refuses: [`num_reserved_cpus`]).
#[must_use]
pub fn reserved_count(
    reserved_cpus: Option<usize>,
    kube_milli: Option<u128>,
    system_milli: Option<u128>,
) -> usize {
    num_reserved_cpus(reservation_entry(reserved_cpus, kube_milli, system_milli)).unwrap_or(0)
}

/// The `cpu` entry of the reservation kubelet's container manager hands
/// its CPU manager, in millicores, or `None` when it has none:
///
/// * `reservedSystemCPUs` set: `systemReserved.cpu` becomes its size and
///   `kubeReserved.cpu` is dropped (kubelet's `cmd/kubelet/app/server.go`);
/// * otherwise `systemReserved.cpu + kubeReserved.cpu` (plus hard eviction
///   thresholds, which have no `cpu` signal), and a sum of zero is left
///   out of the map (`GetNodeAllocatableReservation` in
///   `pkg/kubelet/cm/node_container_manager_linux.go` keeps only non-zero
///   sums) — which is why a kubelet whose file reserves `0` CPUs prints
///   "unable to determine reserved CPU resources", never "greater than
///   zero".
///
/// When none of the three keys is set, Pinion reserves
/// [`RESERVED_CPU_MILLI`] where kubelet has no entry.
// difference-from-kubelet: static-default-without-config
#[must_use]
pub fn reservation_entry(
    reserved_cpus: Option<usize>,
    kube_milli: Option<u128>,
    system_milli: Option<u128>,
) -> Option<u128> {
    let milli = match (reserved_cpus, kube_milli, system_milli) {
        (Some(count), _, _) => u128::try_from(count).unwrap_or(u128::MAX) * 1000,
        (None, None, None) => RESERVED_CPU_MILLI,
        (None, kube, system) => kube.unwrap_or(0) + system.unwrap_or(0),
    };
    (milli != 0).then_some(milli)
}

/// kubelet's `getNumReservedCPUs` (`pkg/kubelet/cm/cpumanager`, once in
/// `NewManager`): the reservation's `cpu` entry rounded up to whole CPUs.
/// No entry is kubelet's "unable to determine reserved CPU resources"
/// ([`PolicyError::NoReservation`]); an entry of zero, which only a caller
/// that hands the CPU manager a reservation directly can give (Pinion:
/// `pinion state … --num-reserved 0`), is kubelet's "requires
/// systemreserved.cpu + kubereserved.cpu to be greater than zero"
/// ([`PolicyError::ZeroReservation`]).
pub fn num_reserved_cpus(entry: Option<u128>) -> Result<usize, PolicyError> {
    match entry {
        None => Err(PolicyError::NoReservation),
        Some(0) => Err(PolicyError::ZeroReservation),
        Some(milli) => Ok(usize::try_from(milli.div_ceil(1000)).unwrap_or(usize::MAX)),
    }
}

/// [`TABLE`] as aligned text lines.
#[must_use]
pub fn table_text() -> String {
    let width = TABLE.iter().map(|(key, _)| key.len()).max().unwrap_or(0);
    TABLE
        .iter()
        .map(|(key, value)| format!("  {key:width$}  {value}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reservation_defaults_only_when_nothing_is_set() {
        assert_eq!(reserved_count(None, None, None), 1);
        assert_eq!(reserved_count(None, Some(500), None), 1);
        assert_eq!(reserved_count(None, Some(500), Some(1000)), 2);
        assert_eq!(reserved_count(None, None, Some(0)), 0, "explicit zero kept");
        assert_eq!(reserved_count(Some(3), None, None), 3);
    }

    #[test]
    fn kubelets_two_refusals_come_from_no_entry_and_a_zero_entry() {
        // A file reserving 0 CPUs: kubelet's container manager leaves the
        // entry out, so the CPU manager says it cannot determine it.
        for (kube, system) in [(Some(0), None), (None, Some(0)), (Some(0), Some(0))] {
            assert_eq!(reservation_entry(None, kube, system), None);
            assert_eq!(
                num_reserved_cpus(reservation_entry(None, kube, system)),
                Err(PolicyError::NoReservation)
            );
        }
        assert_eq!(
            PolicyError::NoReservation.to_string(),
            "[cpumanager] unable to determine reserved CPU resources for static policy"
        );
        // An entry of zero handed in directly.
        assert_eq!(
            num_reserved_cpus(Some(0)),
            Err(PolicyError::ZeroReservation)
        );
        assert_eq!(
            PolicyError::ZeroReservation.to_string(),
            "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu \
             to be greater than zero"
        );
        // reservedSystemCPUs replaces both sums; fractions round up.
        assert_eq!(reservation_entry(Some(2), Some(0), Some(500)), Some(2000));
        assert_eq!(num_reserved_cpus(Some(1500)), Ok(2));
        assert_eq!(
            num_reserved_cpus(reservation_entry(None, None, None)),
            Ok(1)
        );
    }

    #[test]
    fn the_table_names_every_key_once() {
        let text = table_text();
        for (key, _) in TABLE {
            assert_eq!(text.matches(&format!("  {key} ")).count(), 1, "{key}");
        }
    }
}
