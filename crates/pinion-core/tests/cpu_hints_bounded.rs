//! Property tests of the bounded CPU hint generator against a literal
//! transcription of kubelet's exhaustive `generateCPUTopologyHints`, on
//! machines of up to 8 NUMA nodes (`docs/decisions/004-bounded-cpu-hints.md`):
//!
//! * with an unlimited budget the output is kubelet's, in kubelet's order;
//! * with any budget it is a prefix of kubelet's list (plus the full mask);
//! * single-numa-node merges give kubelet's result whenever every single
//!   node was visited;
//! * best-effort / restricted give kubelet's result whenever kubelet's
//!   result is preferred and its mask is in the bounded list.

use std::collections::BTreeMap;

use proptest::prelude::*;

use pinion_core::topology::{CpuInfo, Topology, TopologySpec};
use pinion_core::topomgr::bitmask::iterate_masks;
use pinion_core::topomgr::cpu_hints::{generate_cpu_hints_bounded, HintInputs};
use pinion_core::topomgr::policy::merge_with_policy;
use pinion_core::topomgr::{NumaInfo, NumaMask, Policy, ProviderHints, TopologyHint};
use pinion_core::CpuSet;

/// `cpus_per_node[i]` single-thread cores on node `i`; `nodes_per_socket`
/// consecutive nodes per socket.
fn machine(cpus_per_node: &[u32], nodes_per_socket: u32) -> Topology {
    let mut cpus = Vec::new();
    let mut id = 0;
    for (node, &count) in (0u32..).zip(cpus_per_node) {
        for _ in 0..count {
            cpus.push(CpuInfo {
                id,
                core: id,
                socket: node / nodes_per_socket,
                numa: node,
                uncore: node,
                llc: None,
                die: None,
                core_type: None,
            });
            id += 1;
        }
    }
    Topology::new(TopologySpec {
        cpus,
        ..TopologySpec::default()
    })
    .expect("valid machine")
}

/// kubelet's loop, transcribed: `minAffinitySize` lowered while visiting.
fn kubelet_hints(inputs: &HintInputs<'_>, request: usize) -> Vec<TopologyHint> {
    let topo = inputs.topology;
    let ids: Vec<u32> = topo.numa_cpus().keys().copied().collect();
    let mut min_size = u32::try_from(ids.len()).expect("few nodes");
    let mut hints = Vec::new();
    iterate_masks(&ids, |mask| {
        let on = |cpu: &u32| topo.cpu(*cpu).is_some_and(|c| mask.is_set(c.numa));
        let total = topo.all_cpus().iter().filter(|c| on(c)).count();
        if total >= request && mask.count() < min_size {
            min_size = mask.count();
        }
        if inputs.reusable.iter().any(|c| !on(&c)) {
            return;
        }
        let free = inputs.available.iter().filter(|c| on(c)).count();
        if inputs.reusable.len() + free >= request {
            hints.push(TopologyHint::new(mask, false));
        }
    });
    let per_socket = topo.num_numa_nodes() / topo.num_sockets().max(1);
    let min_sockets = (min_size as usize).div_ceil(per_socket.max(1));
    for hint in &mut hints {
        let mask = hint.affinity.expect("masks");
        let mut sockets: Vec<u32> = topo
            .cpus()
            .iter()
            .filter(|c| mask.is_set(c.numa))
            .map(|c| c.socket)
            .collect();
        sockets.sort_unstable();
        sockets.dedup();
        let aligned = inputs.align_by_socket && per_socket > 0 && sockets.len() == min_sockets;
        hint.preferred = mask.count() == min_size || aligned;
    }
    hints
}

#[derive(Debug, Clone)]
struct Input {
    cpus_per_node: Vec<u32>,
    nodes_per_socket: u32,
    available: Vec<bool>,
    reusable: Vec<bool>,
    request: usize,
    align: bool,
    budget: usize,
    others: Vec<Vec<(u64, bool)>>,
}

fn input() -> impl Strategy<Value = Input> {
    (1usize..=8, 1u32..=2).prop_flat_map(|(nodes, nodes_per_socket)| {
        let full = (1u64 << nodes) - 1;
        (
            prop::collection::vec(1u32..=3, nodes),
            prop::collection::vec(any::<bool>(), 24),
            prop::collection::vec(prop::bool::weighted(0.1), 24),
            1usize..=12,
            any::<bool>(),
            1usize..=300,
            prop::collection::vec(
                prop::collection::vec((1..=full, any::<bool>()), 1..=4),
                0..=2,
            ),
        )
            .prop_map(
                move |(cpus_per_node, available, reusable, request, align, budget, others)| Input {
                    cpus_per_node,
                    nodes_per_socket,
                    available,
                    reusable,
                    request,
                    align,
                    budget,
                    others,
                },
            )
    })
}

fn set(flags: &[bool], topo: &Topology) -> CpuSet {
    let ids = topo.all_cpus().iter().filter(|&c| flags[c as usize]);
    CpuSet::from_iter(ids)
}

fn providers(cpu: Vec<TopologyHint>, others: &[Vec<(u64, bool)>]) -> Vec<ProviderHints> {
    let mut all = vec![Some(BTreeMap::from([("cpu".to_owned(), Some(cpu))]))];
    for (i, list) in others.iter().enumerate() {
        let hints = list
            .iter()
            .map(|&(raw, preferred)| TopologyHint::new(NumaMask::from_raw(raw), preferred))
            .collect();
        all.push(Some(BTreeMap::from([(format!("r{i}"), Some(hints))])));
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn bounded_hints_agree_with_kubelet(input in input()) {
        let topo = machine(&input.cpus_per_node, input.nodes_per_socket);
        let available = set(&input.available, &topo);
        let reusable = set(&input.reusable, &topo).difference(&available);
        let inputs = HintInputs {
            topology: &topo,
            available: &available,
            reusable: &reusable,
            align_by_socket: input.align,
        };
        let kubelet = kubelet_hints(&inputs, input.request);
        prop_assert_eq!(&generate_cpu_hints_bounded(&inputs, input.request, usize::MAX), &kubelet);

        // A prefix of kubelet's visiting order, plus the full mask.
        let ids: Vec<u32> = topo.numa_cpus().keys().copied().collect();
        let mut visited = Vec::new();
        iterate_masks(&ids, |m| visited.push(m));
        let seen = &visited[..input.budget.min(visited.len())];
        let all = NumaMask::from_ids(ids.iter().copied()).expect("ids");
        let bounded = generate_cpu_hints_bounded(&inputs, input.request, input.budget);
        let expected: Vec<TopologyHint> = kubelet
            .iter()
            .filter(|h| h.affinity.is_some_and(|m| seen.contains(&m) || m == all))
            .copied()
            .collect();
        prop_assert_eq!(&bounded, &expected);

        let numa = NumaInfo::new(&ids, None).expect("ids");
        let exact_lists = providers(kubelet, &input.others);
        let bounded_lists = providers(bounded.clone(), &input.others);
        let singles_seen = input.budget >= ids.len();
        for policy in [Policy::SingleNumaNode, Policy::BestEffort, Policy::Restricted] {
            let exact = merge_with_policy(policy, &numa, false, &exact_lists);
            let got = merge_with_policy(policy, &numa, false, &bounded_lists);
            let covered = match policy {
                Policy::SingleNumaNode => singles_seen,
                _ => exact.hint.preferred
                    && bounded.iter().any(|h| h.affinity == exact.hint.affinity),
            };
            if covered {
                prop_assert_eq!(got, exact, "{}", policy);
            }
        }
    }
}
