//! Helpers for tests: this crate's own, and other crates' with the
//! `testing` feature (`pinion-core = { …, features = ["testing"] }` under
//! `[dev-dependencies]`), so tests build sets one way instead of each file
//! writing its own.

use std::collections::BTreeMap;

use crate::{CpuSet, Topology};

#[cfg(feature = "testing")]
pub mod logs {
    //! The log lines a test's own thread emits (`tracing` events at INFO
    //! and above, as the agent prints them), for tests that assert on
    //! what is logged.

    use std::sync::{Arc, Mutex, PoisonError};

    /// What was logged since [`capture`]; clones share the lines.
    #[derive(Clone, Default)]
    pub struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        /// Everything logged so far.
        #[must_use]
        pub fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
                .into_owned()
        }

        /// How many lines contain `needle`.
        #[must_use]
        pub fn lines(&self, needle: &str) -> usize {
            self.text()
                .lines()
                .filter(|line| line.contains(needle))
                .count()
        }
    }

    /// Captures this thread's log lines (a current-thread runtime's tasks
    /// included) until the guard is dropped.
    #[must_use]
    pub fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (captured, tracing::subscriber::set_default(subscriber))
    }
}

/// The set of a cpulist literal (`"0-3,8"`, `""` for none). Panics, naming
/// the text and the calling test, when the literal is malformed.
#[track_caller]
#[must_use]
pub fn cpus(list: &str) -> CpuSet {
    match CpuSet::parse_list(list) {
        Ok(set) => set,
        Err(err) => panic!("test cpulist {list:?}: {err}"),
    }
}

/// `topology` with the CPUs `offline` taken offline, as sysfs discovery
/// sees it afterwards (a core's id is its lowest online thread). Panics
/// when nothing would be left online.
#[track_caller]
#[must_use]
pub fn without_cpus(topology: &Topology, offline: &CpuSet) -> Topology {
    let mut spec = topology.spec().clone();
    spec.cpus.retain(|c| !offline.contains(c.id));
    let mut lowest: BTreeMap<u32, u32> = BTreeMap::new();
    for cpu in &spec.cpus {
        let entry = lowest.entry(cpu.core).or_insert(cpu.id);
        *entry = (*entry).min(cpu.id);
    }
    for cpu in &mut spec.cpus {
        cpu.core = lowest[&cpu.core];
    }
    spec.offline.union_with(offline);
    match Topology::new(spec) {
        Ok(topology) => topology,
        Err(err) => panic!("test topology without cpus {offline}: {err}"),
    }
}

/// A one-socket machine of 8 cores × 2 threads: core n = CPUs n and n+8.
#[must_use]
pub fn machine_8c2t() -> Topology {
    crate::topology::synthetic(crate::topology::Shape {
        sockets: 1,
        numa_per_socket: 1,
        cores_per_socket: 8,
        threads_per_core: 2,
        cores_per_uncore: 0,
    })
}

/// The static policy with default options on `topology`, `reserved` (a
/// cpulist) reserved.
///
/// # Panics
/// On an invalid cpulist or a reservation the policy refuses.
#[must_use]
pub fn static_policy(topology: Topology, reserved: &str) -> crate::policy::Policy {
    let cpus = cpus(reserved);
    let reservation = crate::policy::Reservation {
        count: cpus.len(),
        cpus,
    };
    crate::policy::Policy::Static(Box::new(
        crate::policy::StaticPolicy::new(
            topology,
            crate::policy::StaticPolicyOptions::default(),
            &reservation,
        )
        .expect("policy"),
    ))
}

/// The static policy with `strict-cpu-reservation` (other options at their
/// defaults) on `topology`, `reserved` (a cpulist) reserved.
///
/// # Panics
/// On an invalid cpulist or a reservation the policy refuses.
#[must_use]
pub fn strict_static_policy(topology: Topology, reserved: &str) -> crate::policy::Policy {
    let cpus = cpus(reserved);
    let reservation = crate::policy::Reservation {
        count: cpus.len(),
        cpus,
    };
    let options = crate::policy::StaticPolicyOptions {
        strict_cpu_reservation: true,
        ..crate::policy::StaticPolicyOptions::default()
    };
    crate::policy::Policy::Static(Box::new(
        crate::policy::StaticPolicy::new(topology, options, &reservation).expect("policy"),
    ))
}

/// A one-socket, one-NUMA-node machine of `cores` cores × `threads` threads.
#[must_use]
pub fn small_machine(cores: u32, threads: u32) -> Topology {
    crate::topology::synthetic(crate::topology::Shape {
        sockets: 1,
        numa_per_socket: 1,
        cores_per_socket: cores,
        threads_per_core: threads,
        cores_per_uncore: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_become_sets() {
        assert_eq!(cpus("0-2,8"), CpuSet::from_iter([0, 1, 2, 8]));
        assert!(cpus("").is_empty());
    }

    #[test]
    #[should_panic(expected = "test cpulist \"0-\"")]
    fn malformed_literals_name_themselves() {
        let _ = cpus("0-");
    }
}
