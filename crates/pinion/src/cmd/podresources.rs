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

/// Arguments of `pinion podresources`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: Option<What>,
    /// The agent's podresources socket (default: under the default state
    /// directory, `/var/lib/pinion/pod-resources/pinion.sock` for root).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", alias = "format", value_enum, default_value_t = Format::Table, global = true)]
    output: Format,
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

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    Table,
    Json,
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
    let text = runtime.block_on(query(socket, args))?;
    print!("{text}");
    Ok(())
}

async fn query(socket: PathBuf, args: &Args) -> anyhow::Result<String> {
    let channel = pinion_api::uds::connect(&socket, TIMEOUT).await?;
    let mut client = v1::pod_resources_lister_client::PodResourcesListerClient::new(channel)
        .max_decoding_message_size(MAX_ANSWER);
    let call =
        |status: tonic::Status| anyhow::anyhow!("{} (gRPC {:?})", status.message(), status.code());
    let json = matches!(args.output, Format::Json);
    Ok(match args.what.as_ref().unwrap_or(&What::List) {
        What::List => {
            let pods = client
                .list(v1::ListPodResourcesRequest {})
                .await
                .map_err(call)?
                .into_inner()
                .pod_resources;
            if json {
                pretty(&Value::Array(pods.iter().map(pod_json).collect()))
            } else {
                pods_table(&pods)
            }
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
            if json {
                pretty(&pod_json(&pod))
            } else {
                pods_table(std::slice::from_ref(&pod))
            }
        }
        What::Allocatable => {
            let answer = client
                .get_allocatable_resources(v1::AllocatableResourcesRequest {})
                .await
                .map_err(call)?
                .into_inner();
            if json {
                pretty(&allocatable_json(&answer))
            } else {
                allocatable_table(&answer)
            }
        }
    })
}

fn pretty(value: &Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(value).unwrap_or_default()
    )
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
    let header = [
        "NAMESPACE",
        "POD",
        "CONTAINER",
        "CPU_IDS",
        "MEMORY",
        "RESOURCES",
    ]
    .map(str::to_string);
    let mut rows = Vec::new();
    for pod in pods {
        for c in &pod.containers {
            rows.push([
                pod.namespace.clone(),
                pod.name.clone(),
                c.name.clone(),
                cpulist(&c.cpu_ids),
                memory_text(&c.memory),
                resources_text(&c.resources),
            ]);
        }
        if pod.containers.is_empty() {
            let dash = "-".to_string();
            rows.push([
                pod.namespace.clone(),
                pod.name.clone(),
                dash.clone(),
                dash.clone(),
                dash.clone(),
                dash,
            ]);
        }
    }
    table(&header, &rows)
}

fn table<const N: usize>(header: &[String; N], rows: &[[String; N]]) -> String {
    let mut widths = header.clone().map(|h| h.len());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(header).chain(rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

fn allocatable_table(answer: &v1::AllocatableResourcesResponse) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "cpu_ids: {}", cpulist(&answer.cpu_ids));
    let _ = writeln!(out, "memory: {}", memory_text(&answer.memory));
    let header = ["RESOURCE", "ALLOCATABLE", "CAPACITY", "PER_NUMA"].map(str::to_string);
    let rows: Vec<[String; 4]> = answer
        .resources
        .iter()
        .map(|r| {
            let per_numa: Vec<String> = r
                .topology_aware_allocatable_quantity_list
                .iter()
                .map(|q| format!("{}:{}", q.node, q.resource_value))
                .collect();
            [
                r.resource_name.clone(),
                r.aggregated_allocatable_quantity.to_string(),
                r.aggregated_capacity_quantity.to_string(),
                per_numa.join(","),
            ]
        })
        .collect();
    out.push_str(&table(&header, &rows));
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
