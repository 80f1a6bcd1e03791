//! `pinion podresources`: what a consumer of kubelet's podresources API
//! (resource-topology-exporter, NFD's topology-updater…) sees on Pinion's
//! socket, through the real gRPC API (docs/podresources.md).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use pinion_api::podresources::v1;
use pinion_api::DefaultPaths;
use pinion_core::CpuSet;
use serde_json::{json, Value};

use super::local::agent_unreachable;
use crate::output::{self, Output, OutputArgs, Table};

/// Arguments of `pinion podresources`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: Option<What>,
    /// The agent's podresources socket (default: under the default state
    /// directory, `/var/lib/pinion/pod-resources/pinion.sock` for root).
    #[arg(long, global = true, env = "PINION_PODRESOURCES_SOCKET")]
    socket: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Every pod with its containers' CPUs, memory and plugin resources
    /// (`List`; the default).
    List,
    /// One pod (`Get`).
    Get {
        /// The pod's name.
        name: String,
        /// The pod's namespace.
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
    },
    /// What the node can hand out (`GetAllocatableResources`).
    Allocatable,
}

/// How long to wait for the agent.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Answers list every container of the node.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// Queries the socket and prints the answer.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let socket = args
        .socket
        .clone()
        .unwrap_or_else(|| DefaultPaths::current().podresources_socket());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let output = args.output.output();
    let text = runtime.block_on(query(socket, args, output))?;
    print!("{text}");
    Ok(())
}

async fn query(socket: PathBuf, args: &Args, output: Output) -> anyhow::Result<String> {
    let channel = pinion_api::uds::connect(&socket, TIMEOUT)
        .await
        .map_err(|err| anyhow::anyhow!(agent_unreachable(&socket, &root_cause(&err))))?;
    let mut client = v1::pod_resources_lister_client::PodResourcesListerClient::new(channel)
        .max_decoding_message_size(MAX_ANSWER);
    let call =
        |status: tonic::Status| anyhow::anyhow!("{} (gRPC {:?})", status.message(), status.code());
    Ok(match args.what.as_ref().unwrap_or(&What::List) {
        What::List => {
            let pods = client
                .list(v1::ListPodResourcesRequest {})
                .await
                .map_err(call)?
                .into_inner()
                .pod_resources;
            render_list(output, &pods)?
        }
        What::Get { name, namespace } => {
            let pod = client
                .get(v1::GetPodResourcesRequest {
                    pod_name: name.clone(),
                    pod_namespace: namespace.clone(),
                })
                .await
                .map_err(call)?
                .into_inner()
                .pod_resources
                .unwrap_or_default();
            shown(output, &pod_json(&pod), || {
                pods_table(std::slice::from_ref(&pod))
            })?
        }
        What::Allocatable => {
            let answer = client
                .get_allocatable_resources(v1::AllocatableResourcesRequest {})
                .await
                .map_err(call)?
                .into_inner();
            render_allocatable(output, &answer)?
        }
    })
}

/// `List`'s answer in `output`.
pub(crate) fn render_list(output: Output, pods: &[v1::PodResources]) -> anyhow::Result<String> {
    shown(
        output,
        &Value::Array(pods.iter().map(pod_json).collect()),
        || pods_table(pods),
    )
}

/// `GetAllocatableResources`' answer in `output`.
pub(crate) fn render_allocatable(
    output: Output,
    answer: &v1::AllocatableResourcesResponse,
) -> anyhow::Result<String> {
    shown(output, &allocatable_json(answer), || {
        allocatable_table(answer)
    })
}

/// A node's answers for the golden tests: a run with an exclusive CPU and
/// its memory, a plugin pod with a NIC, an empty pod; two NUMA nodes.
#[cfg(test)]
pub(crate) fn fixture() -> (Vec<v1::PodResources>, v1::AllocatableResourcesResponse) {
    let numa = |id: i64| {
        Some(v1::TopologyInfo {
            nodes: vec![v1::NumaNode { id }],
        })
    };
    let memory = |size: u64, node: i64| v1::ContainerMemory {
        memory_type: "memory".into(),
        size,
        topology: numa(node),
    };
    let pods = vec![
        v1::PodResources {
            name: "pinion-run-42-1795821397".into(),
            namespace: "pinion".into(),
            containers: vec![v1::ContainerResources {
                name: "main".into(),
                cpu_ids: vec![1],
                memory: vec![memory(1 << 30, 0)],
                ..Default::default()
            }],
            ..Default::default()
        },
        v1::PodResources {
            name: "web".into(),
            namespace: "shop".into(),
            containers: vec![v1::ContainerResources {
                name: "nginx".into(),
                resources: vec![v1::TopologyAwareResource {
                    resource_name: "example.com/nic".into(),
                    is_scalar_resource: true,
                    aggregated_quantity: 1.0,
                    topology_aware_quantity_list: vec![v1::TopologyAwareQuantity {
                        resource_value: 1.0,
                        node: 1,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        },
        v1::PodResources {
            name: "empty".into(),
            namespace: "default".into(),
            ..Default::default()
        },
    ];
    let allocatable = v1::AllocatableResourcesResponse {
        cpu_ids: vec![1, 2, 3, 5, 6, 7],
        memory: vec![memory(8 << 30, 0), memory(8 << 30, 1)],
        resources: vec![v1::AllocatableTopologyAwareResource {
            resource_name: "example.com/nic".into(),
            is_scalar_resource: true,
            aggregated_allocatable_quantity: 2.0,
            aggregated_capacity_quantity: 2.0,
            topology_aware_allocatable_quantity_list: vec![
                v1::TopologyAwareQuantity {
                    resource_value: 1.0,
                    node: 0,
                    ..Default::default()
                },
                v1::TopologyAwareQuantity {
                    resource_value: 1.0,
                    node: 1,
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        ..Default::default()
    };
    (pods, allocatable)
}

/// `value` as JSON or YAML, or the table `table` makes.
fn shown(output: Output, value: &Value, table: impl FnOnce() -> String) -> anyhow::Result<String> {
    output::render(output, value, |_, _| table())
}

/// The innermost cause of `err` (a connect error's text is the transport's
/// wrapper; its cause says what happened, e.g. no such file).
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// CPU ids as a cpulist (`1-3,8`); `-` when empty; the ids as given when
/// they are not CPU ids.
fn cpulist(ids: &[i64]) -> String {
    if ids.is_empty() {
        return "-".to_string();
    }
    let set = ids
        .iter()
        .map(|&id| u32::try_from(id).ok())
        .collect::<Option<Vec<u32>>>()
        .and_then(|ids| CpuSet::from_ids(ids).ok());
    set.map_or_else(|| format!("{ids:?}"), |s| s.to_string())
}

fn memory_text(memory: &[v1::ContainerMemory]) -> String {
    if memory.is_empty() {
        return "-".to_string();
    }
    let parts: Vec<String> = memory
        .iter()
        .map(|m| {
            let nodes: Vec<String> = m
                .topology
                .iter()
                .flat_map(|t| t.nodes.iter().map(|n| n.id.to_string()))
                .collect();
            format!("{} {} on node {}", m.memory_type, m.size, nodes.join(","))
        })
        .collect();
    parts.join("; ")
}

fn resources_text(resources: &[v1::TopologyAwareResource]) -> String {
    if resources.is_empty() {
        return "-".to_string();
    }
    let parts: Vec<String> = resources
        .iter()
        .map(|r| format!("{}={}", r.resource_name, r.aggregated_quantity))
        .collect();
    parts.join(",")
}

fn pods_table(pods: &[v1::PodResources]) -> String {
    let mut table = Table::new(&[
        "NAMESPACE",
        "POD",
        "CONTAINER",
        "CPU_IDS",
        "MEMORY",
        "RESOURCES",
    ]);
    for pod in pods {
        for c in &pod.containers {
            table.row(vec![
                pod.namespace.clone(),
                pod.name.clone(),
                c.name.clone(),
                cpulist(&c.cpu_ids),
                memory_text(&c.memory),
                resources_text(&c.resources),
            ]);
        }
        if pod.containers.is_empty() {
            table.row(vec![pod.namespace.clone(), pod.name.clone()]);
        }
    }
    table.render()
}

fn allocatable_table(answer: &v1::AllocatableResourcesResponse) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "cpu_ids: {}", cpulist(&answer.cpu_ids));
    let _ = writeln!(out, "memory: {}", memory_text(&answer.memory));
    let mut table = Table::new(&["RESOURCE", "ALLOCATABLE>", "CAPACITY>", "PER_NUMA"]);
    for r in &answer.resources {
        let per_numa: Vec<String> = r
            .topology_aware_allocatable_quantity_list
            .iter()
            .map(|q| format!("{}:{}", q.node, q.resource_value))
            .collect();
        table.row(vec![
            r.resource_name.clone(),
            r.aggregated_allocatable_quantity.to_string(),
            r.aggregated_capacity_quantity.to_string(),
            per_numa.join(","),
        ]);
    }
    out.push_str(&table.render());
    out
}

fn memory_json(memory: &[v1::ContainerMemory]) -> Value {
    memory
        .iter()
        .map(|m| {
            json!({
                "memory_type": m.memory_type,
                "size": m.size,
                "numa_nodes": m.topology.iter().flat_map(|t| t.nodes.iter().map(|n| n.id)).collect::<Vec<i64>>(),
            })
        })
        .collect()
}

fn quantities_json(list: &[v1::TopologyAwareQuantity]) -> Value {
    list.iter()
        .map(|q| json!({"node": q.node, "value": q.resource_value, "name": q.name, "type": q.r#type}))
        .collect()
}

fn pod_json(pod: &v1::PodResources) -> Value {
    json!({
        "name": pod.name,
        "namespace": pod.namespace,
        "pod_role": pod.pod_role,
        "pod_type": pod.pod_type,
        "labels": pod.labels,
        "annotations": pod.annotations,
        "containers": pod.containers.iter().map(|c| json!({
            "name": c.name,
            "cpu_ids": c.cpu_ids,
            "memory": memory_json(&c.memory),
            "resources": c.resources.iter().map(|r| json!({
                "resource_name": r.resource_name,
                "is_node_resource": r.is_node_resource,
                "is_scalar_resource": r.is_scalar_resource,
                "aggregated_quantity": r.aggregated_quantity,
                "topology_aware_quantity_list": quantities_json(&r.topology_aware_quantity_list),
            })).collect::<Vec<Value>>(),
        })).collect::<Vec<Value>>(),
    })
}

fn allocatable_json(answer: &v1::AllocatableResourcesResponse) -> Value {
    json!({
        "cpu_ids": answer.cpu_ids,
        "memory": memory_json(&answer.memory),
        "resources": answer.resources.iter().map(|r| json!({
            "resource_name": r.resource_name,
            "aggregated_allocatable_quantity": r.aggregated_allocatable_quantity,
            "aggregated_capacity_quantity": r.aggregated_capacity_quantity,
            "topology_aware_allocatable_quantity_list": quantities_json(&r.topology_aware_allocatable_quantity_list),
            "topology_aware_capacity_quantity_list": quantities_json(&r.topology_aware_capacity_quantity_list),
        })).collect::<Vec<Value>>(),
    })
}
