//! Shared harness of the plugin tests: the seed's machine, request
//! builders, a small hint merge, and fake sysfs trees with NICs.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use pinion_core::qos;
use pinion_core::topology::{synthetic, Shape};
use pinion_core::{CpuSet, Topology};
use pinion_plugins::{ContainerType, Hint, Request, ResourcePlugin};

/// The seed's machine: 80 CPUs, 0-39 on NUMA node 0, 40-79 on node 1.
pub fn seed_machine() -> Topology {
    synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 40,
        threads_per_core: 1,
        cores_per_uncore: 0,
    })
}

pub fn list(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

/// A pod: uid, annotations, QoS class.
#[derive(Clone, Debug, Default)]
pub struct Pod {
    pub uid: String,
    pub name: String,
    pub role: String,
    pub annotations: BTreeMap<String, String>,
    pub qos_class: String,
}

impl Pod {
    pub fn new(name: &str) -> Self {
        Self {
            uid: format!("uid-{name}"),
            name: name.to_string(),
            qos_class: "Burstable".into(),
            ..Self::default()
        }
    }

    pub fn level(mut self, level: &str) -> Self {
        self.annotations
            .insert(qos::QOS_LEVEL_KEY.into(), level.into());
        self
    }

    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    pub fn role(mut self, role: &str) -> Self {
        self.role = role.into();
        self
    }

    pub fn guaranteed(mut self) -> Self {
        self.qos_class = "Guaranteed".into();
        self
    }

    /// The request of container `container0` for `resource`.
    pub fn request(&self, resource: &str, quantity: f64, hint: Option<&[u64]>) -> Request {
        Request {
            pod_uid: self.uid.clone(),
            pod_namespace: "default".into(),
            pod_name: self.name.clone(),
            container_name: "container0".into(),
            container_type: ContainerType::Main,
            container_index: 0,
            pod_role: self.role.clone(),
            pod_type: String::new(),
            resource_name: resource.into(),
            hint: hint.map(|nodes| Hint {
                nodes: nodes.to_vec(),
                preferred: true,
            }),
            resource_requests: BTreeMap::from([(resource.to_string(), quantity)]),
            labels: BTreeMap::from([(qos::POD_ROLE_LABEL.to_string(), self.role.clone())]),
            annotations: self.annotations.clone(),
            native_qos_class: self.qos_class.clone(),
            resource_limits: BTreeMap::new(),
        }
    }
}

/// The Topology Manager's pick, simplified: the narrowest mask preferred by
/// every provider that has a preference (lowest node ids first); `None` when
/// no provider cares.
pub fn merge(providers: &[Option<Vec<Hint>>]) -> Option<Vec<u64>> {
    let lists: Vec<&Vec<Hint>> = providers.iter().flatten().collect();
    if lists.is_empty() {
        return None;
    }
    let mut candidates: Vec<Vec<u64>> = lists[0]
        .iter()
        .filter(|h| h.preferred)
        .map(|h| h.nodes.clone())
        .collect();
    candidates.sort_by_key(|nodes| (nodes.len(), nodes.clone()));
    candidates.into_iter().find(|nodes| {
        lists
            .iter()
            .all(|list| list.iter().any(|h| h.preferred && &h.nodes == nodes))
    })
}

/// Hints of every plugin for `requests` (plugin, request), merged.
pub fn admit_hint(asks: &[(&dyn ResourcePlugin, &Request)]) -> Option<Vec<u64>> {
    let hints: Vec<Option<Vec<Hint>>> = asks
        .iter()
        .map(|(plugin, request)| plugin.topology_hints(request).expect("hints"))
        .collect();
    merge(&hints)
}

pub fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

/// A sysfs tree with one NIC `name` on NUMA node `numa` (a PCI device).
pub fn nic_tree(root: &Path, name: &str, numa: u32, speed: u64) {
    let device = format!("sys/devices/pci0000:00/0000:0{numa}:00.0");
    write(root, &format!("{device}/numa_node"), &format!("{numa}\n"));
    write(
        root,
        &format!("sys/class/net/{name}/speed"),
        &format!("{speed}\n"),
    );
    std::os::unix::fs::symlink(
        root.join(&device),
        root.join(format!("sys/class/net/{name}/device")),
    )
    .expect("link");
}

/// `/sys/devices/system/node/nodeN/meminfo` for nodes with these totals (bytes).
pub fn meminfo_tree(root: &Path, totals: &[u64]) {
    for (node, total) in totals.iter().enumerate() {
        let kib = total / 1024;
        write(
            root,
            &format!("sys/devices/system/node/node{node}/meminfo"),
            &format!("Node {node} MemTotal: {kib} kB\nNode {node} MemFree: {kib} kB\n"),
        );
    }
}
