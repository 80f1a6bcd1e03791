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
/// otherwise [`RESERVED_CPU_MILLI`].
#[must_use]
pub fn reserved_count(
    reserved_cpus: Option<usize>,
    kube_milli: Option<u128>,
    system_milli: Option<u128>,
) -> usize {
    if let Some(count) = reserved_cpus {
        return count;
    }
    let milli = match (kube_milli, system_milli) {
        (None, None) => RESERVED_CPU_MILLI,
        (kube, system) => kube.unwrap_or(0) + system.unwrap_or(0),
    };
    usize::try_from(milli.div_ceil(1000)).unwrap_or(usize::MAX)
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
    fn the_table_names_every_key_once() {
        let text = table_text();
        for (key, _) in TABLE {
            assert_eq!(text.matches(&format!("  {key} ")).count(), 1, "{key}");
        }
    }
}
