//! A resource plugin whose answers a test or benchmark sets: it keeps a
//! table pod → container → value, answers `Allocate` with the table's value
//! for the container (the default value for a container it does not know,
//! which it then records) and `GetResourcesAllocation` with the whole table,
//! every entry as one allocation of its resource with its OCI property.
//! Changing a value is the plugin changing its mind; forgetting a container
//! is a plugin that lost its state. Clones share the table, so a test keeps
//! one clone while the gRPC server serves another.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use pinion_plugins::{
    Allocation, AllocationInfo, Allocations, Options, PluginError, Request, ResourcePlugin,
};

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct TablePlugin {
    resource: String,
    property: String,
    env: String,
    inner: Arc<Mutex<Table>>,
}

#[derive(Debug, Default)]
struct Table {
    default: String,
    values: BTreeMap<String, BTreeMap<String, String>>,
    removed: Vec<String>,
    polls: u64,
}

impl TablePlugin {
    /// A plugin for `resource` answering `property` (`""`: environment and
    /// annotation only) with `default` for containers it does not know.
    #[must_use]
    pub fn new(resource: &str, property: &str, default: &str) -> Self {
        let env = resource
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        Self {
            resource: resource.to_string(),
            property: property.to_string(),
            env,
            inner: Arc::new(Mutex::new(Table {
                default: default.to_string(),
                ..Table::default()
            })),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The environment variable its answers set (the resource name in
    /// upper case, `_` for other characters); its annotation is the resource
    /// name.
    #[must_use]
    pub fn env_name(&self) -> &str {
        &self.env
    }

    /// Sets the answer for a container it allocated; false when it does not
    /// know the container.
    pub fn set(&self, pod: &str, container: &str, value: &str) -> bool {
        let mut table = self.table();
        match table.values.get_mut(pod).and_then(|c| c.get_mut(container)) {
            Some(old) => {
                *old = value.to_string();
                true
            }
            None => false,
        }
    }

    /// Sets the value new containers get.
    pub fn set_default(&self, value: &str) {
        self.table().default = value.to_string();
    }

    /// Forgets a container (a plugin that lost its state).
    pub fn forget(&self, pod: &str, container: &str) {
        let mut table = self.table();
        if let Some(containers) = table.values.get_mut(pod) {
            containers.remove(container);
            if containers.is_empty() {
                table.values.remove(pod);
            }
        }
    }

    /// The answer it holds for a container.
    #[must_use]
    pub fn value(&self, pod: &str, container: &str) -> Option<String> {
        self.table().values.get(pod)?.get(container).cloned()
    }

    /// The pods it was told were removed, in order.
    #[must_use]
    pub fn removed(&self) -> Vec<String> {
        self.table().removed.clone()
    }

    /// How many `GetResourcesAllocation` it answered.
    #[must_use]
    pub fn polls(&self) -> u64 {
        self.table().polls
    }

    /// The allocation it answers with `value`.
    #[must_use]
    pub fn info(&self, value: &str) -> AllocationInfo {
        AllocationInfo {
            oci_property_name: self.property.clone(),
            is_scalar_resource: true,
            allocated_quantity: 1.0,
            allocation_result: if self.property.is_empty() {
                String::new()
            } else {
                value.to_string()
            },
            envs: [(self.env.clone(), value.to_string())].into(),
            annotations: [(self.resource.clone(), value.to_string())].into(),
            ..AllocationInfo::default()
        }
    }
}

impl ResourcePlugin for TablePlugin {
    fn resource_name(&self) -> &str {
        &self.resource
    }

    fn options(&self) -> Options {
        Options {
            pre_start_required: false,
            with_topology_alignment: false,
            need_reconcile: true,
        }
    }

    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError> {
        let value = {
            let mut table = self.table();
            let default = table.default.clone();
            table
                .values
                .entry(request.pod_uid.clone())
                .or_default()
                .entry(request.container_name.clone())
                .or_insert(default)
                .clone()
        };
        Ok(Some([(self.resource.clone(), self.info(&value))].into()))
    }

    fn allocations(&self) -> Allocations {
        let values = {
            let mut table = self.table();
            table.polls += 1;
            table.values.clone()
        };
        values
            .into_iter()
            .map(|(pod, containers)| {
                let containers = containers
                    .into_iter()
                    .map(|(name, value)| {
                        (name, [(self.resource.clone(), self.info(&value))].into())
                    })
                    .collect();
                (pod, containers)
            })
            .collect()
    }

    fn remove_pod(&mut self, pod_uid: &str) -> Result<(), PluginError> {
        let mut table = self.table();
        table.values.remove(pod_uid);
        table.removed.push(pod_uid.to_string());
        Ok(())
    }
}
