//! A demo NRI plugin for checking the protocol layer by hand against a real
//! containerd (see docs/nri.md, "Manual check against a real containerd").
//! It is NOT Pinion's allocator: Guaranteed containers with whole CPUs get the
//! lowest free CPUs of CPULIST (no CFS quota), everything else the rest.
//!
//! Usage: `demo_plugin [SOCKET] [CPULIST] [big-update]` (defaults:
//! /var/run/nri/nri.sock, 0-1; `big-update` sends one ~10 KB UpdateContainers
//! after the first Synchronize); when started by the runtime
//! (NRI_PLUGIN_SOCKET set) it uses fd 3.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use pinion_core::placement::{Placement, Pool, ResourceSettings};
use pinion_core::pod::guaranteed_cpus;
use pinion_core::CpuSet;
use pinion_nri::kube::{kube_container, kube_pod};
use pinion_nri::plugin::DEFAULT_SOCKET;
use pinion_nri::{
    Container, ContainerUpdate, Created, ErrorKind, HandlerError, NriHandler, Plugin,
    PluginOptions, PodSandbox, Resources, RuntimeInfo, UpdateSender,
};

struct Demo {
    all: CpuSet,
    exclusive: Mutex<BTreeMap<String, CpuSet>>,
    /// Shared-pool containers, moved with unsolicited updates when the pool changes.
    shared: Mutex<Vec<String>>,
    updates: std::sync::OnceLock<UpdateSender>,
    /// Send one big update after the next Synchronize.
    big_update: std::sync::atomic::AtomicBool,
}

impl Demo {
    /// Queues the shared pool for every shared container (sent after the handler returned).
    fn push_shared_pool(&self) {
        let cpus = self.shared();
        let updates: Vec<ContainerUpdate> = self
            .shared
            .lock()
            .unwrap()
            .iter()
            .map(|id| ContainerUpdate {
                container_id: id.clone(),
                placement: shared_assignment(cpus.clone()),
                order: 0,
            })
            .collect();
        eprintln!(
            "queue UpdateContainers: {} containers -> {cpus}",
            updates.len()
        );
        if let Some(sender) = self.updates.get() {
            sender.send(updates).unwrap();
        }
    }

    fn shared(&self) -> CpuSet {
        let exclusive = self.exclusive.lock().unwrap();
        exclusive
            .values()
            .fold(self.all.clone(), |pool, s| pool.difference(s))
    }
}

fn shared_assignment(cpus: CpuSet) -> Placement {
    placement(cpus, CpuSet::new(), false)
}

impl NriHandler for Demo {
    async fn configure(&self, info: RuntimeInfo) -> Result<(), HandlerError> {
        eprintln!("configure: {info:?}");
        Ok(())
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        eprintln!(
            "synchronize: {} pods, {} containers",
            pods.len(),
            containers.len()
        );
        for c in &containers {
            eprintln!(
                "  {} {} cpus={:?} quota={:?}",
                c.id, c.name, c.resources.cpus, c.resources.cpu_quota
            );
            let exclusive = c.resources.cpu_quota == Some(-1) && !c.resources.cpus.is_empty();
            match CpuSet::parse_list(&c.resources.cpus) {
                Ok(cpus) if exclusive => {
                    self.exclusive.lock().unwrap().insert(c.id.clone(), cpus);
                }
                _ => self.shared.lock().unwrap().push(c.id.clone()),
            }
        }
        if self
            .big_update
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            if let Some(sender) = self.updates.get() {
                sender.send(big_update(&self.all)).unwrap();
            }
        }
        Ok(Vec::new())
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> Result<Created, HandlerError> {
        let kube = kube_pod(&pod, &[&container])?;
        let spec = kube_container(&pod, &container)?;
        let n = guaranteed_cpus(&kube, &spec);
        eprintln!(
            "create {}/{}: qos {} exclusive cpus {n}",
            pod.name,
            spec.name,
            kube.qos()
        );
        if n == 0 {
            self.shared.lock().unwrap().push(container.id.clone());
            return Ok(Created {
                adjust: Some(shared_assignment(self.shared())),
                updates: Vec::new(),
            });
        }
        let pool = self.shared();
        if pool.len() <= n {
            return Err(HandlerError::new(
                ErrorKind::ResourceExhausted,
                format!(
                    "not enough cpus: requested={n}, free={}",
                    pool.len().saturating_sub(1)
                ),
            ));
        }
        let cpus: CpuSet = pool.iter().take(n).collect();
        self.exclusive
            .lock()
            .unwrap()
            .insert(container.id.clone(), cpus.clone());
        self.push_shared_pool();
        Ok(Created {
            adjust: Some(placement(cpus, CpuSet::parse_list("0").unwrap(), true)),
            updates: Vec::new(),
        })
    }

    async fn update_container(
        &self,
        _pod: PodSandbox,
        container: Container,
        resources: Resources,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        eprintln!("update {}: {resources:?}", container.name);
        Ok(Vec::new())
    }

    async fn stop_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        eprintln!("stop {}", container.name);
        self.shared.lock().unwrap().retain(|id| *id != container.id);
        let released = self.exclusive.lock().unwrap().remove(&container.id);
        if released.is_some() {
            self.push_shared_pool();
        }
        Ok(Vec::new())
    }

    async fn remove_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> Result<(), HandlerError> {
        eprintln!("remove {}", container.name);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> Result<(), HandlerError> {
        eprintln!("remove pod {}", pod.name);
        Ok(())
    }

    async fn updates_failed(&self, container_ids: Vec<String>) {
        eprintln!("runtime failed {} updates", container_ids.len());
    }
}

/// 300 updates of non-existent containers: one ~10 KB `UpdateContainers`
/// request, to check the 4096-byte frame rule against the Go side.
fn big_update(all: &CpuSet) -> Vec<ContainerUpdate> {
    (0..300)
        .map(|i| ContainerUpdate {
            container_id: format!("no-such-container-{i:04}"),
            placement: shared_assignment(all.clone()),
            order: 0,
        })
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let socket = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| DEFAULT_SOCKET.to_string());
    let all = CpuSet::parse_list(args.get(2).map_or("0-1", String::as_str)).unwrap();
    let options = match PluginOptions::from_launch_env(|k| std::env::var(k).ok()).unwrap() {
        Some(options) => options,
        None => PluginOptions::external("pinion-demo", "90", socket).unwrap(),
    };
    let handler = Arc::new(Demo {
        all,
        exclusive: Mutex::new(BTreeMap::new()),
        shared: Mutex::new(Vec::new()),
        updates: std::sync::OnceLock::new(),
        big_update: std::sync::atomic::AtomicBool::new(
            args.get(3).map(String::as_str) == Some("big-update"),
        ),
    });
    let (plugin, updates) = Plugin::new(options, Arc::clone(&handler));
    handler.updates.set(updates).unwrap();
    let result = plugin
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    eprintln!("plugin ended: {result:?}");
}

/// A placement of `cpus` (memory nodes `mems`, empty = leave them), with
/// no CFS quota when `exclusive`.
fn placement(cpus: CpuSet, mems: CpuSet, exclusive: bool) -> Placement {
    Placement {
        cpus,
        mems,
        pool: if exclusive {
            Pool::Exclusive
        } else {
            Pool::Shared
        },
        resources: ResourceSettings {
            cpu_quota: exclusive.then_some(-1),
            ..ResourceSettings::default()
        },
        env: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}
