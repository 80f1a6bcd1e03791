//! Pod-level resources through NRI (issue #15, `featureGates:
//! PodLevelResourceManagers`): the front-end registers the sandbox's
//! pod-level resources (annotation `pinion.dev/pod-level-resources:
//! "true"`) before admitting the pod's containers; with the Topology
//! Manager at pod scope the pod's first container allocates the pod's whole
//! CPU set and each container gets its part. End to end through the fake
//! runtime and the real controller.
#![allow(clippy::unwrap_used)]

mod nri_common;

use nri_common::*;
use pinion_core::policy::{Features, PolicyConfig};
use pinion_nri::fake_runtime::{ContainerSpec, PodSpec};
use pinion_nri::Resources;

fn pod_level_on() -> Features {
    Features {
        pod_level_resource_managers: true,
        ..Features::default()
    }
}

/// Static policy, cpu 0 reserved, Topology Manager `best-effort` at pod scope.
fn pod_scope() -> PolicyConfig {
    PolicyConfig {
        policy: Some("static".into()),
        num_reserved: Some(1),
        topology_manager_policy: Some("best-effort".into()),
        topology_manager_scope: Some("pod".into()),
        ..PolicyConfig::default()
    }
}

/// A Guaranteed pod whose spec sets pod-level resources of `milli` CPU.
fn pod_level_pod(uid: &str, milli: u64) -> PodSpec {
    let mut pod = guaranteed_pod(uid);
    pod.annotations
        .insert("pinion.dev/pod-level-resources".into(), "true".into());
    pod.pod_resources = Some(Resources {
        cpu_shares: Some(milli * 1024 / 1000),
        cpu_quota: Some(i64::try_from(milli * 100).unwrap()),
        cpu_period: Some(100_000),
        memory_limit: Some(4 << 30),
        ..Resources::default()
    });
    pod
}

/// A container that sets no resources of its own.
fn bare(name: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.to_string(),
        ..ContainerSpec::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_pod_level_resources_gets_one_cpu_set_and_its_containers_their_parts() {
    let node = Node::new();
    let agent = node.agent_with_config(1, pod_level_on(), pod_scope()).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    let (pod_id, app) = node
        .pod_with(pod_level_pod("db", 4000), container("app", 2000))
        .await;
    let side = node
        .runtime
        .create_container(&pod_id, bare("side"))
        .await
        .unwrap();
    node.runtime.start_container(&side).await.unwrap();

    let snapshot = agent.handle.snapshot();
    let app_cpus = set(&node.runtime.cpus(&app));
    let side_cpus = set(&node.runtime.cpus(&side));
    assert_eq!(app_cpus.len(), 2, "app's own exclusive cpus: {app_cpus}");
    assert!(
        app_cpus.intersection(&side_cpus).is_empty(),
        "app {app_cpus} and side {side_cpus} do not share"
    );
    let pod_cpus = app_cpus.union(&side_cpus);
    assert_eq!(pod_cpus.len(), 4, "the pod's cpu set {pod_cpus}");
    assert!(!pod_cpus.contains(0), "reserved cpu 0 stays outside");
    assert_eq!(
        topology().numa_nodes_of(&pod_cpus).len(),
        1,
        "pod scope aligns the whole pod: {pod_cpus}"
    );
    assert_eq!(
        snapshot.assignments["db"]["app"], app_cpus,
        "app's exclusive cpus are in the checkpoint"
    );
    // The pod's cpus left the node's shared pool.
    let pool = set("0-7").difference(&pod_cpus);
    node.wait_cpus(&web, &pool.to_string()).await;
    // podresources reports them as the pod's own cpu_ids.
    let listed = pinion_agent::podresources::list(&agent.handle.snapshot());
    let db = listed
        .pod_resources
        .iter()
        .find(|p| p.name == "db-pod")
        .expect("the pod is listed");
    let want: Vec<i64> = pod_cpus.iter().map(i64::from).collect();
    assert_eq!(db.cpu_ids, want, "pod-level cpu_ids");
    let web_pod = listed
        .pod_resources
        .iter()
        .find(|p| p.name == "web-pod")
        .expect("web is listed");
    assert!(web_pod.cpu_ids.is_empty(), "no pod-level cpus for web");

    // The pod's containers go, its cpus come back.
    node.runtime.stop_container(&app).await.unwrap();
    node.runtime.stop_container(&side).await.unwrap();
    node.runtime.remove_pod(&pod_id).await.unwrap();
    node.wait_cpus(&web, "0-7").await;
    assert!(agent.handle.snapshot().assignments.is_empty());
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_switch_off_a_pod_with_pod_level_resources_stays_in_the_shared_pool() {
    let node = Node::new();
    let agent = node
        .agent_with_config(1, Features::default(), pod_scope())
        .await;
    let (_, app) = node
        .pod_with(pod_level_pod("db", 4000), container("app", 2000))
        .await;
    assert_eq!(
        node.runtime.cpus(&app),
        "0-7",
        "kubelet's CPU manager skips the pod"
    );
    assert!(agent.handle.snapshot().assignments.is_empty());
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restart_keeps_the_pods_cpu_set() {
    let node = Node::new();
    let agent = node.agent_with_config(1, pod_level_on(), pod_scope()).await;
    let (pod_id, app) = node
        .pod_with(pod_level_pod("db", 4000), container("app", 2000))
        .await;
    let side = node
        .runtime
        .create_container(&pod_id, bare("side"))
        .await
        .unwrap();
    node.runtime.start_container(&side).await.unwrap();
    // Two containers on the pod's shared cpus: the checkpoint holds the same
    // cpus for both.
    let side2 = node
        .runtime
        .create_container(&pod_id, bare("side2"))
        .await
        .unwrap();
    node.runtime.start_container(&side2).await.unwrap();
    let (app_cpus, side_cpus) = (node.runtime.cpus(&app), node.runtime.cpus(&side));
    assert_eq!(node.runtime.cpus(&side2), side_cpus);
    agent.stop().await;

    let agent = node.agent_with_config(2, pod_level_on(), pod_scope()).await;
    assert_eq!(node.runtime.cpus(&app), app_cpus, "nothing moved");
    assert_eq!(node.runtime.cpus(&side), side_cpus);
    assert_eq!(node.runtime.cpus(&side2), side_cpus);
    let recovery = agent.handle.snapshot().recovery.clone();
    assert!(recovery.is_empty(), "restored as it was: {recovery:?}");
    // A container created now still gets the pod's shared cpus: the pod's
    // cpu set was restored and its resources registered again.
    let late = node
        .runtime
        .create_container(&pod_id, bare("late"))
        .await
        .unwrap();
    assert_eq!(node.runtime.cpus(&late), side_cpus);
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    let pod_cpus = set(&app_cpus).union(&set(&side_cpus));
    assert_eq!(
        set(&node.runtime.cpus(&web)),
        set("0-7").difference(&pod_cpus),
        "the node's shared pool still excludes the pod's cpus"
    );
    agent.stop().await;
}

/// kubelet replaces a pod's sandbox (it died, or the node rebooted): it
/// stops the old one, runs a new one under the same pod UID, creates the
/// containers again in it, and its garbage collector removes the old
/// sandbox later, while the new one runs. Until the fiftieth session that
/// `RemovePodSandbox` forgot the pod's pod-level resources although the
/// new sandbox's containers ran on them: a resize of such a pod, which
/// kubelet never resizes, then moved its CPUs as if it had none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_removing_a_replaced_sandbox_keeps_the_pods_resources_for_its_successor() {
    let node = Node::new();
    let features = Features {
        in_place_resize_exclusive_cpus: true,
        ..pod_level_on()
    };
    let agent = node.agent_with_config(1, features, pod_scope()).await;
    let (old_sandbox, old_app) = node
        .pod_with(pod_level_pod("db", 4000), container("app", 2000))
        .await;
    node.runtime.stop_container(&old_app).await.unwrap();
    node.runtime.stop_pod(&old_sandbox).await.unwrap();
    let (_, app) = node
        .pod_with(pod_level_pod("db", 4000), container("app", 2000))
        .await;
    let cpus = node.runtime.cpus(&app);
    assert_eq!(set(&cpus).len(), 2, "app's own exclusive cpus: {cpus}");
    let resize_to = |milli| container("app", milli).resources;

    // With both sandboxes there, the pod is not resized (kubelet: pods with
    // pod-level resources are not), and neither is it after the old one went
    // (to another size: the same one again would be nothing to resize).
    node.runtime
        .update_container(&app, &resize_to(4000))
        .await
        .unwrap();
    assert_eq!(node.runtime.cpus(&app), cpus, "not resized");
    node.runtime.remove_pod(&old_sandbox).await.unwrap();
    node.runtime
        .update_container(&app, &resize_to(3000))
        .await
        .unwrap();
    assert_eq!(
        node.runtime.cpus(&app),
        cpus,
        "still a pod with pod-level resources after its old sandbox went"
    );
    assert_eq!(agent.handle.snapshot().assignments["db"]["app"], set(&cpus));
    agent.stop().await;
}
