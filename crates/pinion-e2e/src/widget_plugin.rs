//! An example resource plugin for Pinion's QoS Resource Manager (or any
//! katalyst-compatible manager), in a hundred lines: it serves the made-up
//! resource `example.com/widget`, registers through the plugin-watcher
//! directory, and gives every container that asks for widgets
//!
//! * the environment variables `WIDGET_ID` (`<pod uid>/<container>`) and
//!   `WIDGET_TEAM` (the pod's `team` annotation, `none` without one),
//! * the annotation `example.com/widget: "<count>"`,
//! * with `--cpus LIST`, that cpuset (`CpusetCpus`); the list is re-read from
//!   `--cpus-file FILE` when given, so that changing the file is the plugin
//!   changing its answer, which the manager's reconcile pushes to running
//!   containers. Only the plugin of the `cpu` resource may set a cpuset
//!   (Pinion refuses it from any other), so `--cpus` needs `--resource cpu`:
//!   the plugin then serves `cpu` instead of widgets, and every run with
//!   `--cpus` asks it.
//!
//! It declares `--count N` widgets (default 4) as a node resource
//! (`GetTopologyAwareAllocatableResources`, `IsNodeResource` and
//! `IsScalarResource`): with API-server credentials the agent puts them in
//! the Node's capacity and allocatable, where the scheduler and kubelet see
//! them (`docs/nrt.md`). Serving `cpu`, it declares nothing (kubelet's).
//!
//! Run it beside an agent that has `qosResourceManager.enabled: true`:
//!
//! ```text
//! cargo run -p pinion-e2e --bin widget-plugin -- --socket-dir /var/lib/pinion/plugins_registry
//! pinion run --request example.com/widget=1 --annotation team=a -- env
//! # or, placing the runs' CPUs:
//! cargo run -p pinion-e2e --bin widget-plugin -- --socket-dir … --resource cpu --cpus 2-3
//! pinion run --cpus 500m --annotation team=a -- env
//! ```
//!
//! Tests (`crates/pinion/tests/e2e_run.rs`) run it against the real agent.

use std::collections::BTreeMap;
use std::path::PathBuf;

use pinion_api::plugin::Identity;
use pinion_plugins::grpc::GrpcPlugin;
use pinion_plugins::{
    AllocatableResource, Allocation, AllocationInfo, Allocations, Options, PluginError, Request,
    ResourcePlugin,
};

const RESOURCE: &str = "example.com/widget";

struct Widgets {
    /// The resource it serves: widgets, or `cpu` with `--cpus`.
    resource: String,
    cpus: Option<String>,
    cpus_file: Option<PathBuf>,
    /// The widgets it declares (`--count`).
    count: u32,
    /// pod uid → container → (count, team)
    held: BTreeMap<String, BTreeMap<String, (f64, String)>>,
}

impl Widgets {
    fn cpus(&self) -> Option<String> {
        self.cpus_file
            .as_ref()
            .and_then(|file| std::fs::read_to_string(file).ok())
            .map(|text| text.trim().to_string())
            .or_else(|| self.cpus.clone())
    }

    fn info(&self, pod: &str, container: &str, count: f64, team: &str) -> AllocationInfo {
        let cpus = self.cpus();
        AllocationInfo {
            oci_property_name: if cpus.is_some() {
                "CpusetCpus".into()
            } else {
                String::new()
            },
            is_scalar_resource: true,
            allocated_quantity: count,
            allocation_result: cpus.unwrap_or_default(),
            envs: [
                ("WIDGET_ID".to_string(), format!("{pod}/{container}")),
                ("WIDGET_TEAM".to_string(), team.to_string()),
            ]
            .into(),
            annotations: [("example.com/widget".to_string(), count.to_string())].into(),
            ..AllocationInfo::default()
        }
    }
}

impl ResourcePlugin for Widgets {
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
        let count = request
            .resource_requests
            .get(&self.resource)
            .copied()
            .unwrap_or(0.0);
        let team = request
            .annotations
            .get("team")
            .cloned()
            .unwrap_or_else(|| "none".into());
        let info = self.info(&request.pod_uid, &request.container_name, count, &team);
        self.held
            .entry(request.pod_uid.clone())
            .or_default()
            .insert(request.container_name.clone(), (count, team));
        Ok(Some([(self.resource.clone(), info)].into()))
    }

    fn allocations(&self) -> Allocations {
        self.held
            .iter()
            .map(|(pod, containers)| {
                let containers = containers
                    .iter()
                    .map(|(name, (count, team))| {
                        let info = self.info(pod, name, *count, team);
                        (name.clone(), [(self.resource.clone(), info)].into())
                    })
                    .collect();
                (pod.clone(), containers)
            })
            .collect()
    }

    fn remove_pod(&mut self, pod_uid: &str) -> Result<(), PluginError> {
        self.held.remove(pod_uid);
        Ok(())
    }

    fn allocatable_resources(&self) -> BTreeMap<String, AllocatableResource> {
        if self.resource == "cpu" {
            return BTreeMap::new();
        }
        let count = f64::from(self.count);
        let widgets = AllocatableResource {
            is_node_resource: true,
            is_scalar_resource: true,
            aggregated_allocatable_quantity: count,
            aggregated_capacity_quantity: count,
            ..AllocatableResource::default()
        };
        [(self.resource.clone(), widgets)].into()
    }
}

fn main() {
    let mut socket_dir = None;
    let mut resource = RESOURCE.to_string();
    let mut cpus = None;
    let mut cpus_file = None;
    let mut count = 4;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--socket-dir" => socket_dir = Some(PathBuf::from(value())),
            "--resource" => resource = value(),
            "--cpus" => cpus = Some(value()),
            "--cpus-file" => cpus_file = Some(PathBuf::from(value())),
            "--count" => {
                let text = value();
                count = text.parse().unwrap_or_else(|_| {
                    usage(&format!("--count {text:?}: not a whole number of widgets"))
                });
            }
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    let socket_dir = socket_dir.unwrap_or_else(|| usage("--socket-dir is required"));
    if (cpus.is_some() || cpus_file.is_some()) && resource != "cpu" {
        usage("only the cpu resource plugin may set a cpuset: --cpus and --cpus-file need --resource cpu");
    }
    let socket = socket_dir.join("widget.sock");
    let plugin = Widgets {
        resource: resource.clone(),
        cpus,
        cpus_file,
        count,
        held: BTreeMap::new(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let served = runtime.block_on(async {
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        let stop = async move {
            tokio::select! {
                () = stop => {}
                _ = term.recv() => {}
            }
        };
        eprintln!("widget plugin: serving {resource} on {}", socket.display());
        pinion_api::plugin::serve(
            &socket,
            Identity::new(&resource),
            GrpcPlugin::new(plugin),
            stop,
        )
        .await
    });
    if let Err(err) = served {
        eprintln!("widget plugin: {err}");
        std::process::exit(1);
    }
}

fn usage(problem: &str) -> ! {
    eprintln!("widget plugin: {problem}\nusage: widget-plugin --socket-dir DIR [--resource NAME] [--cpus LIST] [--cpus-file FILE] [--count N]");
    std::process::exit(2);
}
