//! The agent's configuration file as the state tools read it
//! (`pinion state … --config FILE`): the keys that decide the policy, the
//! state directory, the sysroot and the cgroup root, read with the agent's
//! rules (kubelet's key names; a key absent takes Pinion's default —
//! `pinion_core::policy::defaults`: static policy, one CPU reserved when
//! no reservation is set, `/var/lib/pinion` — with or without a file). Other keys of the file are the agent's business and are
//! ignored here; the agent itself validates them.
//!
//! The `pinion` binary does not link the agent (see ARCHITECTURE.md), so
//! this is the CLI's reading of the same file; `tests/state_rebuild.rs`
//! checks that the two agree on the agent's own state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use pinion_api::paths::DefaultPaths;
use pinion_core::policy::{defaults, FeatureGates, PolicyConfig};
use pinion_core::{CpuSet, Quantity};
use serde::Deserialize;

/// The keys of the agent's file the state tools use.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileKeys {
    cpu_manager_policy: Option<String>,
    cpu_manager_policy_options: Option<BTreeMap<String, serde_yaml_ng::Value>>,
    #[serde(rename = "reservedSystemCPUs")]
    reserved_system_cpus: Option<String>,
    kube_reserved: Option<BTreeMap<String, serde_yaml_ng::Value>>,
    system_reserved: Option<BTreeMap<String, serde_yaml_ng::Value>>,
    topology_manager_policy: Option<String>,
    topology_manager_scope: Option<String>,
    topology_manager_policy_options: Option<BTreeMap<String, String>>,
    feature_gates: Option<BTreeMap<String, bool>>,
    state_dir: Option<PathBuf>,
    sysroot: Option<PathBuf>,
    cgroup_root: Option<PathBuf>,
}

/// What the state tools take from the agent's configuration.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub policy: PolicyConfig,
    pub state_dir: PathBuf,
    pub sysroot: PathBuf,
    pub cgroup_root: Option<PathBuf>,
}

impl AgentConfig {
    /// The agent's configuration from `file`, or its defaults (a key the
    /// file does not set takes the same default as no file).
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        let defaults = DefaultPaths::current();
        let Some(path) = file else {
            let policy = policy_config(&FileKeys::default())?;
            return Ok(Self {
                policy,
                state_dir: defaults.state_dir,
                sysroot: PathBuf::from("/"),
                cgroup_root: None,
            });
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the agent's config file {}", path.display()))?;
        let keys: FileKeys = if text.trim().is_empty() {
            FileKeys::default()
        } else {
            serde_yaml_ng::from_str(&text)
                .with_context(|| format!("config file {}", path.display()))?
        };
        let policy =
            policy_config(&keys).with_context(|| format!("config file {}", path.display()))?;
        Ok(Self {
            policy,
            state_dir: keys.state_dir.unwrap_or(defaults.state_dir),
            sysroot: keys.sysroot.unwrap_or_else(|| PathBuf::from("/")),
            cgroup_root: keys.cgroup_root,
        })
    }

    /// The checkpoint the agent uses.
    #[must_use]
    pub fn checkpoint(&self) -> PathBuf {
        self.state_dir.join(pinion_host::store::CPU_MANAGER_STATE)
    }
}

fn policy_config(keys: &FileKeys) -> anyhow::Result<PolicyConfig> {
    let name = keys
        .cpu_manager_policy
        .clone()
        .unwrap_or_else(|| defaults::CPU_MANAGER_POLICY.to_string());
    let mut gates = FeatureGates::default();
    for (gate, on) in keys.feature_gates.iter().flatten() {
        match gate.as_str() {
            "CPUManagerPolicyAlphaOptions" => gates.alpha = *on,
            "CPUManagerPolicyBetaOptions" => gates.beta = *on,
            // The agent's feature switches do not change how a checkpoint
            // is restored or rebuilt.
            "InPlacePodVerticalScalingExclusiveCPUs" | "PodLevelResourceManagers" => {}
            _ => anyhow::bail!("invalid featureGates {gate:?}: unknown feature gate"),
        }
    }
    let mut options = BTreeMap::new();
    for (option, value) in keys.cpu_manager_policy_options.iter().flatten() {
        let text = scalar(value).with_context(|| {
            format!("invalid cpuManagerPolicyOptions {option:?}: the value must be a string or a boolean")
        })?;
        options.insert(option.clone(), text);
    }
    let reserved = match keys.reserved_system_cpus.as_deref() {
        None | Some("") => None,
        Some(text) => Some(
            CpuSet::parse_list(text)
                .with_context(|| format!("invalid reservedSystemCPUs {text:?}"))?,
        ),
    };
    let entry = defaults::reservation_entry(
        reserved.as_ref().map(CpuSet::len),
        millicores(keys.kube_reserved.as_ref(), "kubeReserved.cpu")?,
        millicores(keys.system_reserved.as_ref(), "systemReserved.cpu")?,
    );
    // kubelet's texts: a file reserving nothing has no entry ("unable to
    // determine reserved CPU resources"), as the agent's config says.
    let num_reserved = match defaults::num_reserved_cpus(entry) {
        Ok(count) => count,
        Err(_) if name != "static" => 0,
        Err(err) => return Err(err.into()),
    };
    Ok(PolicyConfig {
        policy: Some(name),
        options,
        feature_gates: Some(gates),
        topology_manager_policy: keys.topology_manager_policy.clone(),
        topology_manager_scope: keys.topology_manager_scope.clone(),
        topology_manager_policy_options: keys
            .topology_manager_policy_options
            .clone()
            .unwrap_or_default(),
        num_reserved: Some(num_reserved),
        reserved,
    })
}

fn scalar(value: &serde_yaml_ng::Value) -> Option<String> {
    match value {
        serde_yaml_ng::Value::String(text) => Some(text.clone()),
        serde_yaml_ng::Value::Bool(b) => Some(b.to_string()),
        serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn millicores(
    map: Option<&BTreeMap<String, serde_yaml_ng::Value>>,
    field: &str,
) -> anyhow::Result<Option<u128>> {
    let Some(value) = map.and_then(|m| m.get("cpu")) else {
        return Ok(None);
    };
    let text = scalar(value).with_context(|| format!("invalid {field}: must be a quantity"))?;
    let quantity = Quantity::parse(&text).with_context(|| format!("invalid {field} {text:?}"))?;
    Ok(Some(quantity.milli_value()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> anyhow::Result<AgentConfig> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, yaml).expect("write");
        AgentConfig::load(Some(&path))
    }

    #[test]
    fn the_agents_keys_are_read_with_its_rules() {
        let config = load(
            "cpuManagerPolicy: static\nkubeReserved:\n  cpu: 500m\nsystemReserved:\n  cpu: \"1\"\n\
             cpuManagerPolicyOptions:\n  full-pcpus-only: true\nstateDir: /srv/pinion\n\
             metricsAddr: 0.0.0.0:9590\nnri:\n  enabled: true\n",
        )
        .expect("reads");
        assert_eq!(config.policy.num_reserved, Some(2), "ceil(1.5)");
        assert_eq!(config.policy.options["full-pcpus-only"], "true");
        assert_eq!(
            config.checkpoint(),
            Path::new("/srv/pinion/cpu_manager_state")
        );
        let explicit =
            load("cpuManagerPolicy: static\nreservedSystemCPUs: \"0,4\"\n").expect("reads");
        assert_eq!(explicit.policy.num_reserved, Some(2));
        assert_eq!(
            explicit.policy.reserved,
            Some(CpuSet::parse_list("0,4").expect("cpus"))
        );
    }

    /// Issue 27, item 2: a file that sets other keys only took kubelet's
    /// `none`, and the next start unpinned running workloads.
    #[test]
    fn regression_an_absent_key_takes_the_same_default_as_no_file() {
        let defaults = AgentConfig::load(None).expect("defaults");
        assert_eq!(defaults.policy.policy.as_deref(), Some("static"));
        assert_eq!(defaults.policy.num_reserved, Some(1));
        for yaml in ["", "stateDir: /srv/pinion\n", "cpuManagerPolicy: static\n"] {
            let config = load(yaml).expect("reads");
            assert_eq!(config.policy.policy, defaults.policy.policy, "{yaml:?}");
            assert_eq!(config.policy.num_reserved, Some(1), "{yaml:?}");
        }
        let err = load("cpuManagerPolicy: static\nsystemReserved:\n  cpu: \"0\"\n")
            .expect_err("no reservation");
        assert!(
            format!("{err:#}").contains("unable to determine reserved CPU resources"),
            "{err:#}"
        );
        let err = load("reservedSystemCPUs: \"x\"\n").expect_err("bad cpus");
        assert!(format!("{err:#}").contains("\"x\""), "{err:#}");
    }
}
