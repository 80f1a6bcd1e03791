use std::collections::BTreeMap;
use std::path::PathBuf;

use pinion_core::nrt::fingerprint::sign;
use pinion_core::nrt::Method;
use pinion_core::pod::{Container, Pod};
use pinion_core::{CpuSet, Placement, Pool, Quantity};

use super::publish::{credentials, optional, Credentials, PublishError};
use super::*;
use crate::config::NrtConfig;
use crate::controller::WorkloadView;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    move |key| map.get(key).cloned()
}

const IN_CLUSTER: &[(&str, &str)] = &[
    ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
    ("KUBERNETES_SERVICE_PORT", "443"),
];

#[test]
fn credentials_come_from_the_kubeconfig_else_the_pod_else_publishing_is_off() {
    let mut config = NrtConfig::default();
    assert_eq!(credentials(&config, env_of(&[])).expect("off"), None);
    assert_eq!(
        credentials(&config, env_of(IN_CLUSTER)).expect("pod"),
        Some(Credentials::InCluster)
    );
    config.kubeconfig = Some(PathBuf::from("/etc/pinion/kubeconfig"));
    assert_eq!(
        credentials(&config, env_of(IN_CLUSTER)).expect("file"),
        Some(Credentials::Kubeconfig(PathBuf::from(
            "/etc/pinion/kubeconfig"
        )))
    );
    config.publish = Some(false);
    assert_eq!(
        credentials(&config, env_of(IN_CLUSTER)).expect("never"),
        None
    );
}

#[test]
fn publish_true_without_credentials_is_refused_with_what_to_set() {
    let config = NrtConfig {
        publish: Some(true),
        ..NrtConfig::default()
    };
    let err = credentials(&config, env_of(&[("KUBERNETES_SERVICE_HOST", "")])).expect_err("none");
    assert!(matches!(err, PublishError::NoCredentials));
    assert!(
        err.to_string().contains("nodeResourceTopology.kubeconfig"),
        "{err}"
    );
}

/// Whether the node-status task starts: `nodeStatus: false` never; by
/// default only with the QoS Resource Manager and credentials (also with
/// `publish: false`); `nodeStatus: true` without either is a start error
/// saying what is missing.
#[tokio::test]
async fn the_node_status_task_needs_plugins_and_credentials() {
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let resources = || Some(tokio::sync::watch::channel(Arc::default()).1);
    let name = || Ok("worker-1".to_string());
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"http://127.0.0.1:9\"}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
    )
    .expect("kubeconfig");
    let with = |node_status, kubeconfig: Option<&std::path::Path>| NrtConfig {
        node_status,
        publish: Some(false),
        kubeconfig: kubeconfig.map(std::path::Path::to_path_buf),
        ..NrtConfig::default()
    };

    let start = |config: NrtConfig, plugins: bool| {
        let stop = stop.clone();
        async move {
            let resources = if plugins { resources() } else { None };
            node_status::start(&config, name(), resources, env_of(&[]), &stop).await
        }
    };
    let task = start(with(None, Some(&kubeconfig)), true)
        .await
        .expect("on");
    let task = task.expect("runs with plugins and credentials, publish: false or not");
    task.abort();
    assert!(start(with(None, None), true).await.expect("off").is_none());
    assert!(start(with(None, Some(&kubeconfig)), false)
        .await
        .expect("off")
        .is_none());
    assert!(start(with(Some(false), Some(&kubeconfig)), true)
        .await
        .expect("off")
        .is_none());
    let err = start(with(Some(true), None), true)
        .await
        .expect_err("no credentials");
    assert!(
        matches!(
            err,
            NrtStartError::Publish(PublishError::NodeStatusWithoutCredentials)
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("nodeResourceTopology.kubeconfig"),
        "{err}"
    );
    let err = start(with(Some(true), Some(&kubeconfig)), false)
        .await
        .expect_err("no plugins");
    assert!(
        matches!(
            err,
            NrtStartError::Publish(PublishError::NodeStatusWithoutPlugins)
        ),
        "{err}"
    );
    assert!(err.to_string().contains("qosResourceManager"), "{err}");
}

#[test]
fn the_node_name_is_the_configured_one_else_node_name_else_the_host_name() {
    let mut config = NrtConfig::default();
    let host = || Some("Worker-7.Example.COM\n".to_string());
    assert_eq!(
        node_name(&config, env_of(&[]), host).expect("host"),
        "worker-7.example.com"
    );
    assert_eq!(
        node_name(&config, env_of(&[("NODE_NAME", "node-a")]), host).expect("env"),
        "node-a"
    );
    config.node_name = Some("node-b".to_string());
    assert_eq!(
        node_name(&config, env_of(&[("NODE_NAME", "node-a")]), host).expect("config"),
        "node-b"
    );
}

#[test]
fn a_node_name_kubernetes_would_refuse_is_named_in_the_error() {
    let config = NrtConfig::default();
    let err = node_name(&config, env_of(&[]), || Some("bad_name".to_string())).expect_err("bad");
    assert_eq!(err.field(), Some("the host name"));
    assert!(err.to_string().contains("bad_name"), "{err}");
    let err = node_name(&config, env_of(&[]), || None).expect_err("none");
    assert_eq!(err.field(), Some("the host name"));
}

/// Regression (found from outside with a real API server): a name with an
/// empty dot-separated part (`hunt..node`) passed the start-up check and
/// every update was then refused by the API server for ever; and a bad
/// `NODE_NAME` was blamed on `nodeResourceTopology.nodeName`, which was not
/// set. The check is the API server's (each part of the subdomain), and
/// the error names where the name came from.
#[test]
fn regression_a_node_name_with_an_empty_part_is_refused_naming_its_source() {
    let mut config = NrtConfig::default();
    let host = || Some("host".to_string());
    for bad in ["hunt..node", "a.-b", "a-.b", ".a"] {
        let err = node_name(&config, env_of(&[("NODE_NAME", bad)]), host).expect_err(bad);
        assert_eq!(err.field(), Some("NODE_NAME"), "{bad}");
        assert!(err.to_string().contains(bad), "{err}");
    }
    config.node_name = Some("hunt..node".to_string());
    let err = node_name(&config, env_of(&[]), host).expect_err("configured");
    assert_eq!(err.field(), Some("nodeResourceTopology.nodeName"));
    assert_eq!(
        node_name(
            &NrtConfig::default(),
            env_of(&[("NODE_NAME", "a.b-c.d")]),
            host
        )
        .expect("valid"),
        "a.b-c.d"
    );
}

fn workload(pod: &str, frontend: &str, cpus: &str) -> WorkloadView {
    let cpus = CpuSet::parse_list(cpus).expect("cpus");
    WorkloadView {
        pod: pod.to_string(),
        container: "main".to_string(),
        frontend: frontend.to_string(),
        placement: Placement {
            cpus,
            mems: CpuSet::parse_list("0").expect("mems"),
            pool: Pool::Exclusive,
            ..Placement::default()
        },
        applied: true,
        cgroup: None,
        pid: None,
        container_id: None,
        plugins: BTreeMap::new(),
        apply_error: None,
        partition: None,
        foreign_write: None,
        admitted: 0,
    }
}

fn guaranteed(uid: &str, namespace: &str, name: &str) -> Arc<Pod> {
    let one = Quantity::parse("1").expect("quantity");
    let memory = Quantity::parse("1Gi").expect("quantity");
    Arc::new(Pod {
        uid: uid.to_string(),
        name: name.to_string(),
        namespace: namespace.to_string(),
        containers: vec![Container {
            name: "main".to_string(),
            cpu_request: Some(one.clone()),
            cpu_limit: Some(one),
            memory_request: Some(memory.clone()),
            memory_limit: Some(memory),
            ..Container::default()
        }],
        ..Pod::default()
    })
}

#[test]
fn standalone_runs_take_cpus_but_are_not_in_the_pods_fingerprint() {
    let topology = pinion_core::testing::small_machine(4, 1);
    let policy = pinion_core::testing::static_policy(topology.clone(), "0");
    let node = Node::new(&policy, None, None, Vec::new(), Method::All);
    let mut snapshot = Snapshot {
        policy: "static".to_string(),
        reserved: CpuSet::parse_list("0").expect("reserved"),
        shared_pool: CpuSet::parse_list("0,3").expect("pool"),
        ..Snapshot::default()
    };
    snapshot
        .pods
        .insert("k8s".to_string(), guaranteed("k8s", "prod", "db"));
    snapshot.pods.insert(
        "run".to_string(),
        guaranteed("run", "pinion", "pinion-run-1"),
    );
    snapshot.workloads = vec![
        workload("k8s", "runtime", "1"),
        workload("run", "standalone", "2"),
    ];
    let nrt = content_of(&snapshot, &topology, &node, &[]);
    assert_eq!(nrt.fingerprint(), Some(sign([("prod", "db")]).as_str()));
    let cpu = &nrt.zones[0].resources[0];
    assert_eq!(
        (cpu.allocatable.as_str(), cpu.available.as_str()),
        ("3", "1")
    );
    let object = object("node-a", &nrt, Some("uid-1"));
    assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(
        object["metadata"]["annotations"]["topology.node.k8s.io/fingerprint"],
        sign([("prod", "db")])
    );
}

/// Found from outside (session 46): after an agent restart the runtime's
/// containers have no pod spec until its first `Synchronize` (and a
/// crash-looping one none after it): their pods were left out of the
/// holdings, so the object published their exclusive CPUs as available
/// and the scheduler sent pods the node then refused. Their CPUs are
/// charged now; the fingerprint still names only the pods it knows.
#[test]
fn regression_exclusive_cpus_of_containers_without_a_pod_spec_are_not_available() {
    let topology = pinion_core::testing::small_machine(4, 1);
    let policy = pinion_core::testing::static_policy(topology.clone(), "0");
    let node = Node::new(&policy, None, None, Vec::new(), Method::All);
    let mut snapshot = Snapshot {
        policy: "static".to_string(),
        reserved: CpuSet::parse_list("0").expect("reserved"),
        shared_pool: CpuSet::parse_list("0,3").expect("pool"),
        ..Snapshot::default()
    };
    snapshot
        .pods
        .insert("k8s".to_string(), guaranteed("k8s", "prod", "db"));
    snapshot.workloads = vec![
        workload("k8s", "runtime", "1"),
        workload("restored", "runtime", "2"),
    ];
    let nrt = content_of(&snapshot, &topology, &node, &[]);
    let cpu = &nrt.zones[0].resources[0];
    assert_eq!(
        (cpu.allocatable.as_str(), cpu.available.as_str()),
        ("3", "1"),
        "cpus 1 and 2 are held"
    );
    assert_eq!(nrt.fingerprint(), Some(sign([("prod", "db")]).as_str()));
}

#[test]
fn regression_a_pod_without_a_service_account_token_runs_without_publishing() {
    // Every pod has KUBERNETES_SERVICE_HOST; Pinion's DaemonSet mounts no
    // token. Publishing found on its own is given up, never one asked for.
    let mut config = NrtConfig::default();
    assert!(optional(&config, &Credentials::InCluster));
    assert!(!optional(
        &config,
        &Credentials::Kubeconfig(PathBuf::from("/etc/pinion/kubeconfig"))
    ));
    config.publish = Some(true);
    assert!(!optional(&config, &Credentials::InCluster));
}

#[tokio::test]
async fn in_cluster_credentials_without_a_token_are_an_error_naming_it() {
    // This test process is not in a pod: the token file is absent.
    if std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token").exists() {
        return;
    }
    let err = super::publish::client_config(&Credentials::InCluster)
        .await
        .expect_err("no token here");
    assert!(matches!(err, PublishError::InCluster(_)), "{err}");
}

/// Regression (found from outside with a real API server): without the
/// CRD, an update read "404 page not found: Failed to parse error data",
/// which does not say that the resource is not served at all.
#[test]
fn regression_a_missing_crd_is_named_in_the_update_error() {
    let status = kube::core::Status::failure("404 page not found\n", "Failed to parse error data")
        .with_code(404);
    let text = super::publish::describe(&kube::Error::Api(Box::new(status)));
    assert!(
        text.contains("404") && text.contains("CustomResourceDefinition"),
        "{text}"
    );
    // A Kubernetes 404 (a Node that does not exist) is not that.
    let status = kube::core::Status::failure("nodes \"x\" not found", "NotFound").with_code(404);
    let text = super::publish::describe(&kube::Error::Api(Box::new(status)));
    assert!(!text.contains("CustomResourceDefinition"), "{text}");
}
