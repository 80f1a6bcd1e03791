//! Conformance: `topomgr/TestPodGuaranteedCPUs.json` (pod-scope CPU totals,
//! which also exercise QoS and the integral-request rule).

mod common;

use pinion_core::pod::{pod_guaranteed_cpus, Container, Pod, RestartPolicy};
use pinion_core::Quantity;
use serde::Deserialize;

#[derive(Deserialize)]
struct CaseContainer {
    cpu_request: Option<Quantity>,
    cpu_limit: Option<Quantity>,
    memory_request: Option<Quantity>,
    memory_limit: Option<Quantity>,
    restartable: bool,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    init_containers: Vec<CaseContainer>,
    containers: Vec<CaseContainer>,
    expect: usize,
}

fn container(index: usize, c: CaseContainer) -> Container {
    Container {
        name: format!("c{index}"),
        cpu_request: c.cpu_request,
        cpu_limit: c.cpu_limit,
        memory_request: c.memory_request,
        memory_limit: c.memory_limit,
        restart_policy: c.restartable.then_some(RestartPolicy::Always),
        ..Container::default()
    }
}

#[test]
fn pod_guaranteed_cpus_conformance() {
    let file = "topomgr/TestPodGuaranteedCPUs.json";
    let Some(values) = common::load_cases(file) else {
        return;
    };
    let mut failures = Vec::new();
    for value in &values {
        let case: Case = serde_json::from_value(value.clone()).expect("case matches the format");
        let pod = Pod {
            uid: "pod".to_owned(),
            init_containers: case
                .init_containers
                .into_iter()
                .enumerate()
                .map(|(i, c)| container(i, c))
                .collect(),
            containers: case
                .containers
                .into_iter()
                .enumerate()
                .map(|(i, c)| container(100 + i, c))
                .collect(),
            ..Pod::default()
        };
        let got = pod_guaranteed_cpus(&pod);
        if got != case.expect {
            failures.push(format!("{}: got {got}, want {}", case.name, case.expect));
        }
    }
    common::assert_all_passed(file, values.len(), &failures);
}
