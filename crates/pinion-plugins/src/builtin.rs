//! Pinion's three plugins by name, as the agent (`qosResourceManager.
//! builtinPlugins`) and `pinion plugin serve` open them: the plugin's
//! configuration, the machine facts it reads (per-NUMA memory, NICs) from a
//! sysfs root, and its state file in a state directory. One place, so both
//! run the same plugin with the same defaults.

use std::path::Path;

use pinion_core::Topology;

use crate::cpu::{CpuPlugin, CpuPluginConfig};
use crate::memory::{MemoryPlugin, MemoryPluginConfig};
use crate::nic::{NicPlugin, NicPluginConfig};
use crate::store::{StateFile, Store};
use crate::{PluginError, ResourcePlugin};

/// Which plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// katalyst's QoS levels over role-based CPU pools (resource `cpu`).
    Cpu,
    /// Per-NUMA memory accounting and NUMA binding (resource `memory`).
    Memory,
    /// NUMA-affine NICs (resource
    /// `resource.katalyst.kubewharf.io/net_bandwidth` unless configured).
    Nic,
}

impl Kind {
    /// Every plugin, in the order they are started.
    pub const ALL: [Kind; 3] = [Kind::Cpu, Kind::Memory, Kind::Nic];

    /// The name in configuration and on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cpu => "cpu",
            Kind::Memory => "memory",
            Kind::Nic => "nic",
        }
    }

    /// The kind named `name` (`cpu`, `memory`, `nic`).
    pub fn parse(name: &str) -> Result<Kind, UnknownKind> {
        Kind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| UnknownKind(name.to_string()))
    }

    /// Its state file's name in a state directory.
    #[must_use]
    pub fn state_file(self) -> &'static str {
        match self {
            Kind::Cpu => crate::cpu::STATE_FILE,
            Kind::Memory => crate::memory::STATE_FILE,
            Kind::Nic => crate::nic::STATE_FILE,
        }
    }

    /// Its socket's file name in a plugin-watcher directory.
    #[must_use]
    pub fn socket_name(self) -> String {
        format!("pinion-{}-plugin.sock", self.name())
    }
}

/// A plugin name that is not one of Pinion's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown plugin {0:?} (Pinion's plugins are cpu, memory and nic)")]
pub struct UnknownKind(pub String);

/// One plugin's configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum Config {
    Cpu(CpuPluginConfig),
    Memory(MemoryPluginConfig),
    Nic(NicPluginConfig),
}

impl Config {
    /// The defaults of `kind` (the CPU plugin: one CPU reserved, as the
    /// agent).
    #[must_use]
    pub fn default_for(kind: Kind) -> Config {
        match kind {
            Kind::Cpu => Config::Cpu(CpuPluginConfig::default()),
            Kind::Memory => Config::Memory(MemoryPluginConfig::default()),
            Kind::Nic => Config::Nic(NicPluginConfig::default()),
        }
    }

    /// Which plugin it configures.
    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            Config::Cpu(_) => Kind::Cpu,
            Config::Memory(_) => Kind::Memory,
            Config::Nic(_) => Kind::Nic,
        }
    }
}

/// Why a plugin could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the {plugin} plugin cannot read per-NUMA memory: {source}")]
    Memory {
        plugin: &'static str,
        #[source]
        source: pinion_host::meminfo::MemInfoError,
    },
    #[error("the {plugin} plugin cannot list the NICs: {source}")]
    Nics {
        plugin: &'static str,
        #[source]
        source: pinion_host::net::NetError,
    },
    #[error("the {plugin} plugin: {source}")]
    Plugin {
        plugin: &'static str,
        #[source]
        source: PluginError,
    },
}

/// The store of a plugin with its state file in `state_dir` (in memory
/// only with `None`).
#[must_use]
pub fn file_store(kind: Kind, state_dir: Option<&Path>) -> Store {
    Store::File(StateFile::new(state_dir, kind.state_file()))
}

/// Opens the plugin `config` configures on `topology`, reading the
/// machine's memory and NICs under `sysroot`, keeping its state in `store`
/// ([`file_store`], or the agent's journal).
pub fn open(
    config: &Config,
    topology: Topology,
    sysroot: &Path,
    store: Store,
) -> Result<Box<dyn ResourcePlugin>, OpenError> {
    let plugin = config.kind().name();
    let failed = |source| OpenError::Plugin { plugin, source };
    Ok(match config {
        Config::Cpu(config) => {
            Box::new(CpuPlugin::open_with_store(topology, config, store).map_err(failed)?)
        }
        Config::Memory(config) => {
            let nodes = pinion_host::meminfo::read_node_memory(sysroot)
                .map_err(|source| OpenError::Memory { plugin, source })?;
            Box::new(MemoryPlugin::open_with_store(nodes, config.clone(), store).map_err(failed)?)
        }
        Config::Nic(config) => {
            let nics = pinion_host::net::discover_nics(
                sysroot,
                &config.netns(),
                &pinion_host::net::SystemAddresses,
            )
            .map_err(|source| OpenError::Nics { plugin, source })?;
            Box::new(NicPlugin::open_with_store(&topology, nics, config, store).map_err(failed)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_an_unknown_one_is_named() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.name()), Ok(kind));
            assert_eq!(Config::default_for(kind).kind(), kind);
        }
        let err = Kind::parse("gpu").expect_err("not a plugin");
        assert!(err.to_string().contains("\"gpu\""), "{err}");
    }
}

#[cfg(test)]
mod config_tests {
    use crate::cpu::CpuPluginConfig;

    /// Regression: a partial `staticPolicyOptions` was refused with
    /// "missing field `distribute_cpus_across_numa`"; the options not named
    /// are false, and an unknown one is still named.
    #[test]
    fn a_partial_static_policy_options_block_is_accepted() {
        let config: CpuPluginConfig =
            serde_yaml_ng::from_str("staticPolicyOptions:\n  full_pcpus_only: true\n")
                .expect("valid");
        assert!(config.static_policy_options.full_pcpus_only);
        assert!(!config.static_policy_options.align_by_socket);
        let err = serde_yaml_ng::from_str::<CpuPluginConfig>(
            "staticPolicyOptions:\n  full_pcpu_only: true\n",
        )
        .expect_err("unknown option");
        assert!(err.to_string().contains("full_pcpu_only"), "{err}");
    }
}
