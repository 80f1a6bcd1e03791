//! Property test: the records of a real engine's decisions, replayed on the
//! checkpoint of any earlier state (kubelet's bytes), restore exactly the
//! state that produced them — with the policy's own start checks passing.

use proptest::prelude::*;

use pinion_core::checkpoint::decode_verified;
use pinion_core::engine::Engine;
use pinion_core::policy::{
    ContainerKind, ContainerRequest, Policy, Reservation, StaticPolicy, StaticPolicyOptions,
};
use pinion_core::record::{diff, replay_onto_checkpoint, Record};
use pinion_core::restore::{restore, to_checkpoint};
use pinion_core::state::State;
use pinion_core::topology::{synthetic, Shape};
use pinion_core::CpuSet;

fn policy(reserved: usize) -> Policy {
    let topology = synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    });
    let reservation = Reservation {
        count: reserved,
        cpus: CpuSet::new(),
    };
    let policy = StaticPolicy::new(topology, StaticPolicyOptions::default(), &reservation);
    Policy::Static(Box::new(policy.expect("valid policy")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn engine_decisions_replayed_on_an_earlier_checkpoint_restore_the_state(
        actions in prop::collection::vec((any::<bool>(), 0u8..5, 0u8..2, 0usize..4), 1..30),
        cut in 0usize..30,
    ) {
        let static_policy = policy(1);
        let machine = static_policy.topology().expect("static policy").clone();
        let mut engine = Engine::new(&machine, static_policy, State::default());
        engine.start().expect("starts");
        let mut history = vec![(engine.state().clone(), Vec::<Record>::new())];
        for (add, pod, container, cpus) in actions {
            let before = engine.state().clone();
            let (pod, container) = (format!("pod-{pod}"), format!("c{container}"));
            if add {
                let request = ContainerRequest { pod: &pod, container: &container, cpus, kind: ContainerKind::App, ask: Default::default() };
                let _ = engine.admit(&request, None);
            } else {
                engine.remove(&pod, &container);
            }
            history.push((engine.state().clone(), diff(&before, engine.state())));
        }
        let cut = cut % history.len();
        let base = to_checkpoint(&history[cut].0, engine.policy()).to_bytes().expect("v2");
        let base = decode_verified(&base).expect("verifies");
        let records: Vec<Record> = history[cut + 1..].iter().flat_map(|(_, r)| r.clone()).collect();
        let replayed = replay_onto_checkpoint(Some(&base), "static", &records)
            .expect("replays")
            .expect("a checkpoint");
        let restored = restore(&replayed, &policy(1)).expect("the policy accepts the replayed state");
        prop_assert_eq!(&restored, engine.state());
    }
}
