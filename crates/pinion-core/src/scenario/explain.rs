//! The simulator's explanation of Pinion's own asks (boot-isolated CPUs,
//! whole uncore caches): one sentence per `add` step whose pod carries
//! `pinion.io/isolated-cpus` or `pinion.io/uncore`.

use crate::cpuset::CpuSet;
use crate::policy::{CpuAsk, IsolatedAsk, PolicyError, UncoreAsk};
use crate::topology::Topology;

/// What the ask did for a container that asked for `requested` CPUs and got
/// `result`.
#[must_use]
pub fn explain(
    topology: &Topology,
    ask: CpuAsk,
    requested: usize,
    result: &Result<Option<CpuSet>, PolicyError>,
) -> String {
    let head = format!("asked {ask}");
    let cpus = match result {
        Ok(Some(cpus)) => cpus,
        Ok(None) => return format!("{head}: runs in the shared pool (no exclusive cpus asked)"),
        Err(_) => return format!("{head}: refused (the reason is the step's error)"),
    };
    let mut parts = Vec::new();
    if let UncoreAsk::Exclusive { .. } = ask.uncore {
        let caches: Vec<String> = topology
            .uncores()
            .iter()
            .filter(|(_, group)| !group.is_disjoint(cpus))
            .map(|(id, group)| format!("{id} ({group})"))
            .collect();
        let mut text = format!(
            "whole uncore caches {}, which no other container and not the shared pool use while it runs",
            caches.join(", ")
        );
        if cpus.len() > requested {
            text.push_str(&format!(
                "; {requested} cpus rounded up to {} (pinion.io/uncore-round-up)",
                cpus.len()
            ));
        }
        parts.push(text);
    }
    let isolated = cpus.intersection(topology.isolated());
    match ask.isolated {
        IsolatedAsk::No => {}
        IsolatedAsk::Require => parts.push(format!(
            "boot-isolated cpus {isolated} (isolcpus {})",
            topology.isolated()
        )),
        IsolatedAsk::Prefer => {
            let ordinary = cpus.difference(topology.isolated());
            let mut text = format!("{} boot-isolated cpus", isolated.len());
            if !isolated.is_empty() {
                text.push_str(&format!(" ({isolated})"));
            }
            if !ordinary.is_empty() {
                text.push_str(&format!(
                    ", {} ordinary ({ordinary}): not enough isolated cpus were free",
                    ordinary.len()
                ));
            }
            parts.push(text);
        }
    }
    format!("{head}: {}", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{synthetic, Shape, TopologySpec};

    fn set(text: &str) -> CpuSet {
        CpuSet::parse_list(text).unwrap()
    }

    fn machine() -> Topology {
        let t = synthetic(Shape {
            sockets: 1,
            numa_per_socket: 1,
            cores_per_socket: 8,
            threads_per_core: 1,
            cores_per_uncore: 2,
        });
        let spec = TopologySpec {
            isolated: set("6-7"),
            ..t.spec().clone()
        };
        Topology::new(spec).unwrap()
    }

    #[test]
    fn rounding_up_and_the_caches_are_named() {
        let ask = CpuAsk {
            uncore: UncoreAsk::Exclusive { round_up: true },
            ..CpuAsk::default()
        };
        let text = explain(&machine(), ask, 3, &Ok(Some(set("2-5"))));
        assert!(
            text.contains("whole uncore caches 1 (2-3), 2 (4-5)"),
            "{text}"
        );
        assert!(text.contains("3 cpus rounded up to 4"), "{text}");
    }

    #[test]
    fn a_preferring_container_is_told_what_was_ordinary() {
        let ask = CpuAsk {
            isolated: IsolatedAsk::Prefer,
            ..CpuAsk::default()
        };
        let text = explain(&machine(), ask, 3, &Ok(Some(set("5-7"))));
        assert!(text.contains("2 boot-isolated cpus (6-7)"), "{text}");
        assert!(text.contains("1 ordinary (5)"), "{text}");
    }

    #[test]
    fn a_refusal_carries_the_reason() {
        let ask = CpuAsk {
            isolated: IsolatedAsk::Require,
            ..CpuAsk::default()
        };
        let err = PolicyError::IsolatedShortfall {
            requested: 3,
            free: 2,
            shortfall: 1,
            isolated: "6-7".to_owned(),
        };
        let text = explain(&machine(), ask, 3, &Err(err));
        assert_eq!(
            text,
            "asked isolated=require: refused (the reason is the step's error)"
        );
    }
}
