//! The shipped deployment files (`deploy/`) against the agent itself: the
//! ConfigMap's agent config must load with the agent's own config loader,
//! and the DaemonSet, the runtime snippets and the kubelet snippet must
//! agree with that config, so none of them can drift from what runs.

use std::path::{Path, PathBuf};

use pinion_agent::config::{Config, DefaultPaths, FileConfig, Overrides};
use serde::Deserialize as _;
use serde_yaml_ng::{Mapping, Value};

const MANIFEST: &str = "deploy/kubernetes/pinion-daemonset.yaml";
const CONTAINERD: &str = "deploy/containerd/config.toml.snippet";
const CRIO: &str = "deploy/cri-o/99-nri.conf";
const KUBELET: &str = "deploy/kubelet/kubelet-config.snippet.yaml";
const CONTAINERFILE: &str = "deploy/Containerfile";

fn read(relative: &str) -> String {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).expect("every document is valid YAML"))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// The one object of `kind` in the manifest.
fn object<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "expected exactly one {kind} in {MANIFEST}");
    found[0]
}

fn text<'a>(value: &'a Value, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} should be a string, is {value:?}"))
}

fn list<'a>(value: &'a Value, what: &str) -> &'a [Value] {
    value
        .as_sequence()
        .unwrap_or_else(|| panic!("{what} should be a list, is {value:?}"))
}

struct Deployment {
    docs: Vec<Value>,
    /// The ConfigMap key holding the agent config, and its text.
    config_key: String,
    config_text: String,
}

impl Deployment {
    fn load() -> Self {
        let docs = documents(&read(MANIFEST));
        let data = object(&docs, "ConfigMap")["data"]
            .as_mapping()
            .expect("the ConfigMap has data");
        assert_eq!(
            data.len(),
            1,
            "the ConfigMap holds one file, the agent config"
        );
        let (key, value) = data.iter().next().expect("one entry");
        let config_key = text(key, "the ConfigMap key").to_string();
        let config_text = text(value, "the agent config").to_string();
        Self {
            docs,
            config_key,
            config_text,
        }
    }

    fn pod(&self) -> &Value {
        &object(&self.docs, "DaemonSet")["spec"]["template"]["spec"]
    }

    fn container(&self) -> &Value {
        let containers = list(&self.pod()["containers"], "containers");
        assert_eq!(containers.len(), 1, "one container: the agent");
        &containers[0]
    }

    /// The raw YAML of the agent config.
    fn raw_config(&self) -> Mapping {
        serde_yaml_ng::from_str(&self.config_text).expect("the agent config is a YAML mapping")
    }

    /// The volume mounted at exactly `mount_path`.
    fn volume_at(&self, mount_path: &Path) -> &Value {
        let mounts = list(&self.container()["volumeMounts"], "volumeMounts");
        let mount = mounts
            .iter()
            .find(|m| Path::new(text(&m["mountPath"], "mountPath")) == mount_path)
            .unwrap_or_else(|| panic!("nothing is mounted at {}", mount_path.display()));
        let name = &mount["name"];
        list(&self.pod()["volumes"], "volumes")
            .iter()
            .find(|v| &v["name"] == name)
            .unwrap_or_else(|| panic!("no volume named {name:?}"))
    }

    /// The host directory behind the container directory `dir`.
    fn host_dir(&self, dir: &Path) -> PathBuf {
        PathBuf::from(text(
            &self.volume_at(dir)["hostPath"]["path"],
            &format!("hostPath of {}", dir.display()),
        ))
    }
}

/// The agent's own loader: the file form, then validation.
fn load_config(deployment: &Deployment) -> Config {
    let path = Path::new(MANIFEST);
    let file = FileConfig::parse(&deployment.config_text, path)
        .unwrap_or_else(|err| panic!("the shipped agent config does not load: {err}"));
    let defaults = DefaultPaths::for_user(true, None);
    Config::resolve(file, &Overrides::default(), &defaults)
        .unwrap_or_else(|err| panic!("the shipped agent config is invalid: {err}"))
}

#[test]
fn agent_config_loads_with_the_agents_loader() {
    let deployment = Deployment::load();
    let config = load_config(&deployment);
    assert_eq!(config.policy.policy.as_deref(), Some("static"));
    assert!(
        config.policy.num_reserved.unwrap_or(0) >= 1,
        "the static policy reserves at least one CPU"
    );
    assert!(
        config.nri.enabled,
        "the DaemonSet runs the agent as an NRI plugin"
    );
    assert!(
        !config.metrics_addr.ip().is_loopback(),
        "Prometheus scrapes from outside the pod: metricsAddr {} must not be loopback",
        config.metrics_addr
    );
}

#[test]
fn the_loader_check_catches_a_misspelled_key() {
    let deployment = Deployment::load();
    let mut raw = deployment.raw_config();
    raw.insert("cpuManagerPolicyy".into(), "static".into());
    let broken = serde_yaml_ng::to_string(&raw).expect("re-serialise");
    let err = FileConfig::parse(&broken, Path::new(MANIFEST)).expect_err("unknown key");
    assert!(err.to_string().contains("cpuManagerPolicyy"), "{err}");
}

#[test]
fn daemonset_runs_the_agent_with_the_configmap_file() {
    let deployment = Deployment::load();
    let container = deployment.container();
    let command: Vec<&str> = [&container["command"], &container["args"]]
        .into_iter()
        .filter(|v| !v.is_null())
        .flat_map(|v| list(v, "command/args"))
        .map(|v| text(v, "an argument"))
        .collect();
    assert!(command[0].ends_with("/pinion"), "{command:?}");
    let image_copy = format!("/src/target/release/pinion {}", command[0]);
    assert!(
        read(CONTAINERFILE).contains(&image_copy),
        "the image puts the binary at {}",
        command[0]
    );
    assert_eq!(command.get(1), Some(&"agent"), "{command:?}");
    let at = command
        .iter()
        .position(|a| *a == "--config")
        .expect("--config");
    let config_path = Path::new(command[at + 1]);
    let volume = deployment.volume_at(config_path.parent().expect("a directory"));
    let configmap = object(&deployment.docs, "ConfigMap");
    assert_eq!(volume["configMap"]["name"], configmap["metadata"]["name"]);
    assert_eq!(
        config_path.file_name().and_then(|n| n.to_str()),
        Some(deployment.config_key.as_str())
    );
}

#[test]
fn daemonset_mounts_what_the_config_names() {
    let deployment = Deployment::load();
    let config = load_config(&deployment);
    assert_eq!(
        deployment.host_dir(&config.state_dir),
        config.state_dir,
        "the state directory is the node's, so the checkpoint outlives the pod"
    );
    assert_eq!(
        deployment.host_dir(Path::new("/sys/fs/cgroup")),
        Path::new("/sys/fs/cgroup")
    );
    let socket_dir = config.socket.parent().expect("the socket has a directory");
    assert!(
        !deployment.volume_at(socket_dir)["emptyDir"].is_null(),
        "the local API socket lives in a pod-private directory"
    );
    let security = &deployment.container()["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_ne!(security["privileged"], true, "no privileged container");
    assert_ne!(deployment.pod()["hostPID"], true, "no host PID namespace");
}

#[test]
fn nri_settings_match_the_runtime_snippets() {
    let deployment = Deployment::load();
    let raw = deployment.raw_config();
    let nri = raw.get("nri").expect("the config has NRI settings");
    assert_eq!(nri["enabled"], true);
    let name = text(&nri["pluginName"], "nri.pluginName");
    let valid_char = |c: char| c.is_ascii_alphanumeric() || "_.+-".contains(c);
    assert!(!name.is_empty() && name.chars().all(valid_char), "{name:?}");
    let index = text(&nri["pluginIndex"], "nri.pluginIndex");
    assert!(
        index.len() == 2 && index.chars().all(|c| c.is_ascii_digit()),
        "{index:?}"
    );
    let socket = Path::new(text(&nri["socket"], "nri.socket"));
    let dir = socket.parent().expect("the NRI socket has a directory");
    let volume = deployment.volume_at(dir);
    assert_eq!(
        volume["hostPath"]["type"], "Directory",
        "the directory, not the socket file"
    );
    let host_socket = deployment
        .host_dir(dir)
        .join(socket.file_name().expect("a file"));
    let host_socket = host_socket.display();
    let containerd = read(CONTAINERD);
    assert!(containerd.contains(&format!("socket_path = \"{host_socket}\"")));
    assert!(containerd.contains("disable_connections = false"));
    let crio = read(CRIO);
    assert!(crio.contains(&format!("nri_listen = \"{host_socket}\"")));
    assert!(crio.contains("enable_nri = true"));
}

/// Issue 27, item 7a: the probes ask the local API socket with the image's
/// own binary (`pinion health`), so a crowd on the metrics port cannot fail
/// them.
#[test]
fn probes_run_pinion_health_against_the_local_api_socket() {
    let deployment = Deployment::load();
    let config = load_config(&deployment);
    let container = deployment.container();
    let binary = text(&list(&container["command"], "command")[0], "command");
    let socket = config.socket.display().to_string();
    for (probe, ready) in [
        ("startupProbe", false),
        ("livenessProbe", false),
        ("readinessProbe", true),
    ] {
        assert!(
            container[probe]["httpGet"].is_null(),
            "{probe} must not probe the metrics port"
        );
        let command: Vec<&str> = list(&container[probe]["exec"]["command"], probe)
            .iter()
            .map(|arg| text(arg, probe))
            .collect();
        assert_eq!(command[0], binary, "{probe} runs the image's pinion");
        assert_eq!(command[1], "health", "{probe}");
        assert_eq!(command.contains(&"--ready"), ready, "{probe}");
        let at = command
            .iter()
            .position(|arg| *arg == "--socket")
            .unwrap_or_else(|| panic!("{probe} names the socket"));
        assert_eq!(command[at + 1], socket, "{probe} asks the agent's socket");
        // The client gives up before kubelet does.
        let at = command
            .iter()
            .position(|arg| *arg == "--timeout")
            .unwrap_or_else(|| panic!("{probe} bounds its call"));
        let timeout: u64 = command[at + 1].parse().expect("seconds");
        let kubelet = container[probe]["timeoutSeconds"]
            .as_u64()
            .expect("timeoutSeconds");
        assert!(
            timeout < kubelet,
            "{probe}: {timeout}s within kubelet's {kubelet}s"
        );
    }
}

/// Found on the cluster bed's emulated node: the agent serves its local
/// API only once the built-in plugins and the API-server clients have
/// started, and a slow node took longer than the liveness probe's first
/// ~35 s, so kubelet killed the agent and started it again, in a loop. A
/// startup probe holds the liveness probe back until the agent answers.
#[test]
fn regression_a_slow_start_is_not_killed_by_the_liveness_probe() {
    let deployment = Deployment::load();
    let container = deployment.container();
    let startup = &container["startupProbe"];
    let seconds = |probe: &Value, field: &str, default: u64| {
        if probe[field].is_null() {
            default
        } else {
            probe[field]
                .as_u64()
                .unwrap_or_else(|| panic!("{field} is a whole number"))
        }
    };
    // kubelet's defaults: period 10 s, failure threshold 3, no delay.
    let allowed = seconds(startup, "periodSeconds", 10) * seconds(startup, "failureThreshold", 3);
    assert!(
        allowed >= 120,
        "the startup probe leaves a slow start {allowed} s; at least 2 minutes"
    );
    let liveness = &container["livenessProbe"];
    let liveness_allows = seconds(liveness, "initialDelaySeconds", 0)
        + seconds(liveness, "periodSeconds", 10) * seconds(liveness, "failureThreshold", 3);
    assert!(
        allowed > liveness_allows,
        "the startup probe ({allowed} s) must outlast what the liveness probe alone would allow ({liveness_allows} s)"
    );
    assert!(
        liveness["initialDelaySeconds"].is_null(),
        "the startup probe holds the liveness probe back; no delay of its own"
    );
}

#[test]
fn pod_is_node_critical_tolerant_and_opt_in() {
    let deployment = Deployment::load();
    let pod = deployment.pod();
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    let tolerates_all = list(&pod["tolerations"], "tolerations")
        .iter()
        .any(|t| t["operator"] == "Exists" && t["key"].is_null() && t["effect"].is_null());
    assert!(tolerates_all, "a toleration for every taint");
    let selector = pod["nodeSelector"].as_mapping().expect("a nodeSelector");
    assert!(!selector.is_empty(), "nodes opt in by label");
    let namespace = &object(&deployment.docs, "Namespace")["metadata"]["name"];
    let cluster_scoped = ["Namespace", "ClusterRole", "ClusterRoleBinding"];
    for doc in deployment
        .docs
        .iter()
        .filter(|d| !cluster_scoped.iter().any(|k| d["kind"] == *k))
    {
        assert_eq!(
            &doc["metadata"]["namespace"], namespace,
            "{:?}",
            doc["kind"]
        );
    }
    let account = &object(&deployment.docs, "ServiceAccount")["metadata"]["name"];
    assert_eq!(&pod["serviceAccountName"], account);
    let requests = &deployment.container()["resources"]["requests"];
    assert!(!requests["cpu"].is_null() && !requests["memory"].is_null());
}

#[test]
fn kubelet_snippet_keeps_pinions_reservation() {
    let deployment = Deployment::load();
    let raw = deployment.raw_config();
    let kubelet: Mapping = serde_yaml_ng::from_str(&read(KUBELET)).expect("kubelet snippet");
    assert_eq!(kubelet.get("cpuManagerPolicy"), Some(&Value::from("none")));
    for key in ["kubeReserved", "systemReserved", "reservedSystemCPUs"] {
        let cpu = |map: &Mapping| match map.get(key) {
            Some(Value::Mapping(m)) => m.get("cpu").cloned(),
            other => other.cloned(),
        };
        assert_eq!(
            cpu(&kubelet),
            cpu(&raw),
            "{key} differs between kubelet and Pinion"
        );
    }
}

/// Publishing the NodeResourceTopology object and the plugins' extended
/// resources needs the service account's token in the pod, the node's name
/// and exactly the rules docs/nrt.md lists, bound to that account.
#[test]
fn the_daemonset_can_publish_with_its_own_rbac() {
    let deployment = Deployment::load();
    let pod = deployment.pod();
    let account = object(&deployment.docs, "ServiceAccount");
    assert_ne!(account["automountServiceAccountToken"], Value::Bool(false));
    assert_ne!(pod["automountServiceAccountToken"], Value::Bool(false));
    let node_name = list(&deployment.container()["env"], "env")
        .iter()
        .find(|e| e["name"] == "NODE_NAME")
        .expect("NODE_NAME in the container's env");
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );

    let role = object(&deployment.docs, "ClusterRole");
    let binding = object(&deployment.docs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let subjects = list(&binding["subjects"], "subjects");
    assert!(subjects.iter().any(|s| s["kind"] == "ServiceAccount"
        && s["name"] == account["metadata"]["name"]
        && s["namespace"] == account["metadata"]["namespace"]));
    let allowed = |group: &str, resource: &str, verb: &str| {
        list(&role["rules"], "rules").iter().any(|rule| {
            let has = |key: &str, want: &str| list(&rule[key], key).iter().any(|v| v == want);
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    for verb in ["get", "create", "update", "patch"] {
        assert!(
            allowed("topology.node.k8s.io", "noderesourcetopologies", verb),
            "{verb}"
        );
    }
    assert!(allowed("", "nodes", "get"));
    assert!(allowed("", "nodes/status", "patch"));
    // The node's pods' extended requests (nodeResourceTopology.podRequests):
    // a list and a watch, as kube's reflector makes them.
    assert!(allowed("", "pods", "list"));
    assert!(allowed("", "pods", "watch"));
    // Nothing beyond what publishing and reading needs.
    assert!(!allowed("", "nodes", "patch"));
    assert!(!allowed("", "pods", "get"));
    assert!(!allowed("", "pods", "patch"));
}

/// The first run on a real node (scripts/e2e-cluster.sh): with every
/// capability dropped the agent could not create its cgroup root
/// (`/sys/fs/cgroup/pinion: Permission denied`) — a cgroup hierarchy's root
/// directory is mode 0555, so even uid 0 needs DAC_OVERRIDE there. The
/// container keeps that one capability and no other.
#[test]
fn regression_the_daemonset_keeps_the_one_capability_its_cgroup_root_needs() {
    let deployment = Deployment::load();
    let capabilities = &deployment.container()["securityContext"]["capabilities"];
    let drop = list(&capabilities["drop"], "drop");
    assert!(drop.iter().any(|c| c == "ALL"));
    let add: Vec<&Value> = list(&capabilities["add"], "add").iter().collect();
    assert_eq!(add, vec![&Value::from("DAC_OVERRIDE")]);
}
