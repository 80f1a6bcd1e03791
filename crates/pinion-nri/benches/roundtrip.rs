//! CreateContainer + RemoveContainer round trip through the fake runtime's
//! real protocol bytes (unix socket, mux, ttrpc, protobuf both ways) with a
//! trivial handler: the protocol layer's share of the admission latency.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use pinion_core::placement::{Placement, Pool, ResourceSettings};
use pinion_core::CpuSet;
use pinion_nri::fake_runtime::{ContainerSpec, FakeOptions, FakeRuntime, PodSpec};
use pinion_nri::{
    Container, ContainerUpdate, Created, HandlerError, NriHandler, Plugin, PluginOptions,
    PodSandbox, Resources,
};

struct Shared(CpuSet);

impl NriHandler for Shared {
    async fn synchronize(
        &self,
        _: Vec<PodSandbox>,
        _: Vec<Container>,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        Ok(Vec::new())
    }
    async fn create_container(&self, _: PodSandbox, _: Container) -> Result<Created, HandlerError> {
        let adjust = placement(self.0.clone(), CpuSet::new(), false);
        Ok(Created {
            adjust: Some(adjust),
            updates: Vec::new(),
        })
    }
    async fn update_container(
        &self,
        _: PodSandbox,
        _: Container,
        _: Resources,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        Ok(Vec::new())
    }
    async fn stop_container(
        &self,
        _: PodSandbox,
        _: Container,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        Ok(Vec::new())
    }
    async fn remove_container(&self, _: PodSandbox, _: Container) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn remove_pod_sandbox(&self, _: PodSandbox) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn roundtrip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nri.sock");
    let _guard = rt.enter();
    let fake = FakeRuntime::start(&path, FakeOptions::default()).unwrap();
    let options = PluginOptions::external("pinion", "90", &path).unwrap();
    let (plugin, _updates) = Plugin::new(
        options,
        Arc::new(Shared(CpuSet::parse_list("0-7").unwrap())),
    );
    rt.spawn(plugin.run(std::future::pending()));
    rt.block_on(fake.wait_synced(1));
    let pod = PodSpec {
        name: "bench".into(),
        uid: "uid-bench".into(),
        namespace: "default".into(),
        cgroup_parent: "/kubepods/pod-uid-bench".into(),
        ..PodSpec::default()
    };
    let pod = rt.block_on(fake.run_pod(pod)).unwrap();
    let spec = ContainerSpec {
        name: "app".into(),
        resources: Resources {
            cpu_shares: Some(2048),
            memory_limit: Some(1 << 30),
            ..Resources::default()
        },
        ..ContainerSpec::default()
    };
    c.bench_function("nri_create_container_roundtrip", |b| {
        b.iter(|| {
            rt.block_on(async {
                let id = fake.create_container(&pod, spec.clone()).await.unwrap();
                fake.remove_container(&id).await.unwrap();
            });
        });
    });
}

criterion_group!(benches, roundtrip);
criterion_main!(benches);

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
