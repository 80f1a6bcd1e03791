//! `pinion-cri`: a CRI v1 client that acts as kubelet, for Pinion's
//! end-to-end scripts (`scripts/e2e-containerd.sh`). One call per
//! invocation; ids go to stdout, errors to stderr in Go's gRPC error format.
//! Exit status: 0 done, 1 the runtime refused or failed, 2 bad arguments.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use pinion_e2e::client::{self, ClientError};
use pinion_e2e::proto;
use pinion_e2e::spec::{self, ContainerSpec, PodSpec, Qos, Resources};
use tonic::transport::Channel;

type Client = proto::runtime_service_client::RuntimeServiceClient<Channel>;

#[derive(Debug, Parser)]
#[command(
    name = "pinion-cri",
    about = "A CRI v1 client acting as kubelet (Pinion's e2e tests)"
)]
struct Cli {
    /// The runtime's CRI socket.
    #[arg(long, default_value = "/run/containerd/containerd.sock")]
    endpoint: PathBuf,
    /// Deadline of the connection and of the call, in seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    #[command(subcommand)]
    verb: Verb,
}

/// The pod as kubelet describes it (needed by `runp` and `create`).
#[derive(Debug, clap::Args)]
struct PodArgs {
    #[arg(long)]
    pod_name: String,
    #[arg(long)]
    pod_uid: String,
    #[arg(long, default_value = "default")]
    namespace: String,
    /// guaranteed, burstable or besteffort: decides the cgroup parent.
    #[arg(long)]
    qos: String,
    /// Pod annotation KEY=VALUE (repeatable).
    #[arg(long = "pod-annotation")]
    pod_annotations: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// Print the runtime's name, version and CRI version.
    Version,
    /// RunPodSandbox (host network); prints the sandbox id.
    Runp {
        #[command(flatten)]
        pod: PodArgs,
    },
    /// CreateContainer with kubelet's resources; prints the container id.
    Create {
        #[arg(long)]
        pod_id: String,
        #[command(flatten)]
        pod: PodArgs,
        #[arg(long)]
        name: String,
        #[arg(long)]
        image: String,
        #[arg(long)]
        cpu_request: Option<String>,
        #[arg(long)]
        cpu_limit: Option<String>,
        #[arg(long)]
        memory_limit: Option<String>,
        /// Container annotation KEY=VALUE (repeatable).
        #[arg(long = "annotation")]
        annotations: Vec<String>,
        /// The command (after `--`).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// StartContainer.
    Start { id: String },
    /// StopContainer (SIGTERM, then SIGKILL after the grace period).
    Stop {
        id: String,
        #[arg(long, default_value_t = 0)]
        grace: i64,
    },
    /// RemoveContainer.
    Rm { id: String },
    /// StopPodSandbox.
    Stopp { id: String },
    /// RemovePodSandbox.
    Rmp { id: String },
    /// UpdateContainerResources (what `crictl update` sends).
    Update {
        id: String,
        #[arg(long, default_value_t = 0)]
        cpu_shares: i64,
        #[arg(long, default_value_t = 0)]
        cpu_quota: i64,
        #[arg(long, default_value_t = 0)]
        cpu_period: i64,
        #[arg(long, default_value = "")]
        cpuset_cpus: String,
        #[arg(long, default_value_t = 0)]
        memory_limit: i64,
    },
    /// ContainerStatus: prints `state=… pid=… exit_code=… reason=…`.
    Status { id: String },
    /// ListPodSandbox: one `ID NAME UID STATE` line per sandbox.
    Pods,
    /// Stop and remove every pod sandbox (cleanup).
    RemoveAll,
}

fn main() {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("pinion-cri: cannot start the async runtime: {err}");
            std::process::exit(1);
        }
    };
    if let Err(err) = runtime.block_on(run(cli)) {
        eprintln!("pinion-cri: {err:#}");
        let usage = err.downcast_ref::<spec::SpecError>().is_some();
        std::process::exit(if usage { 2 } else { 1 });
    }
}

fn pod_spec(args: &PodArgs) -> Result<PodSpec, spec::SpecError> {
    Ok(PodSpec {
        name: args.pod_name.clone(),
        uid: args.pod_uid.clone(),
        namespace: args.namespace.clone(),
        qos: args.qos.parse::<Qos>()?,
        annotations: annotations(&args.pod_annotations)?,
    })
}

fn annotations(texts: &[String]) -> Result<Vec<(String, String)>, spec::SpecError> {
    texts.iter().map(|t| spec::parse_annotation(t)).collect()
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(cli.timeout);
    // Validate the arguments before connecting, so a typo is exit status 2.
    let request = prepare(&cli.verb)?;
    let mut client = client::connect(&cli.endpoint, timeout).await?;
    match cli.verb {
        Verb::Version => {
            let r = client
                .version(proto::VersionRequest {
                    version: "v1".to_string(),
                })
                .await
                .map_err(|s| ClientError::status("Version", &s))?
                .into_inner();
            println!(
                "{} {} {}",
                r.runtime_name, r.runtime_version, r.runtime_api_version
            );
        }
        Verb::Runp { .. } => {
            let Prepared::Sandbox(config) = request else {
                unreachable!("prepare answers runp with a sandbox")
            };
            let r = client
                .run_pod_sandbox(proto::RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler: String::new(),
                })
                .await
                .map_err(|s| ClientError::status("RunPodSandbox", &s))?
                .into_inner();
            println!("{}", r.pod_sandbox_id);
        }
        Verb::Create { pod_id, .. } => {
            let Prepared::Container(sandbox, config) = request else {
                unreachable!("prepare answers create with a container")
            };
            let r = client
                .create_container(proto::CreateContainerRequest {
                    pod_sandbox_id: pod_id,
                    config: Some(*config),
                    sandbox_config: Some(sandbox),
                })
                .await
                .map_err(|s| ClientError::status("CreateContainer", &s))?
                .into_inner();
            println!("{}", r.container_id);
        }
        Verb::Start { id } => {
            client
                .start_container(proto::StartContainerRequest { container_id: id })
                .await
                .map_err(|s| ClientError::status("StartContainer", &s))?;
        }
        Verb::Stop { id, grace } => {
            client
                .stop_container(proto::StopContainerRequest {
                    container_id: id,
                    timeout: grace,
                })
                .await
                .map_err(|s| ClientError::status("StopContainer", &s))?;
        }
        Verb::Rm { id } => {
            client
                .remove_container(proto::RemoveContainerRequest { container_id: id })
                .await
                .map_err(|s| ClientError::status("RemoveContainer", &s))?;
        }
        Verb::Stopp { id } => stop_pod(&mut client, id).await?,
        Verb::Rmp { id } => remove_pod(&mut client, id).await?,
        Verb::Update {
            id,
            cpu_shares,
            cpu_quota,
            cpu_period,
            cpuset_cpus,
            memory_limit,
        } => {
            client
                .update_container_resources(proto::UpdateContainerResourcesRequest {
                    container_id: id,
                    linux: Some(proto::LinuxContainerResources {
                        cpu_period,
                        cpu_quota,
                        cpu_shares,
                        memory_limit_in_bytes: memory_limit,
                        oom_score_adj: 0,
                        cpuset_cpus,
                        cpuset_mems: String::new(),
                    }),
                })
                .await
                .map_err(|s| ClientError::status("UpdateContainerResources", &s))?;
        }
        Verb::Status { id } => status(&mut client, id).await?,
        Verb::Pods => {
            for pod in list_pods(&mut client).await? {
                let state = pod.state().as_str_name();
                let (name, uid) = pod.metadata.map(|m| (m.name, m.uid)).unwrap_or_default();
                println!("{} {name} {uid} {state}", pod.id);
            }
        }
        Verb::RemoveAll => {
            for pod in list_pods(&mut client).await? {
                stop_pod(&mut client, pod.id.clone()).await?;
                remove_pod(&mut client, pod.id).await?;
            }
        }
    }
    Ok(())
}

/// What a verb sends, built (and validated) before connecting.
enum Prepared {
    Nothing,
    Sandbox(proto::PodSandboxConfig),
    Container(proto::PodSandboxConfig, Box<proto::ContainerConfig>),
}

fn prepare(verb: &Verb) -> Result<Prepared, spec::SpecError> {
    Ok(match verb {
        Verb::Runp { pod } => Prepared::Sandbox(pod_spec(pod)?.sandbox_config()),
        Verb::Create {
            pod,
            name,
            image,
            cpu_request,
            cpu_limit,
            memory_limit,
            annotations: texts,
            command,
            ..
        } => {
            let pod = pod_spec(pod)?;
            let container = ContainerSpec {
                name: name.clone(),
                image: image.clone(),
                command: command.clone(),
                resources: Resources::parse(
                    cpu_request.as_deref(),
                    cpu_limit.as_deref(),
                    memory_limit.as_deref(),
                )?,
                annotations: annotations(texts)?,
            };
            Prepared::Container(pod.sandbox_config(), Box::new(container.config(&pod)?))
        }
        _ => Prepared::Nothing,
    })
}

async fn stop_pod(client: &mut Client, id: String) -> Result<(), ClientError> {
    client
        .stop_pod_sandbox(proto::StopPodSandboxRequest { pod_sandbox_id: id })
        .await
        .map_err(|s| ClientError::status("StopPodSandbox", &s))?;
    Ok(())
}

async fn remove_pod(client: &mut Client, id: String) -> Result<(), ClientError> {
    client
        .remove_pod_sandbox(proto::RemovePodSandboxRequest { pod_sandbox_id: id })
        .await
        .map_err(|s| ClientError::status("RemovePodSandbox", &s))?;
    Ok(())
}

async fn list_pods(client: &mut Client) -> Result<Vec<proto::PodSandbox>, ClientError> {
    Ok(client
        .list_pod_sandbox(proto::ListPodSandboxRequest {})
        .await
        .map_err(|s| ClientError::status("ListPodSandbox", &s))?
        .into_inner()
        .items)
}

/// Prints the container's state, its init process id (from containerd's
/// verbose `info` JSON; 0 when not running) and its exit code.
async fn status(client: &mut Client, id: String) -> anyhow::Result<()> {
    let r = client
        .container_status(proto::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: true,
        })
        .await
        .map_err(|s| ClientError::status("ContainerStatus", &s))?
        .into_inner();
    let status = r
        .status
        .with_context(|| format!("the runtime sent no status for container {id}"))?;
    let pid = match r.info.get("info") {
        Some(info) => serde_json::from_str::<serde_json::Value>(info)
            .with_context(|| format!("container {id}: the runtime's info is not JSON: {info}"))?
            .get("pid")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0),
        None => 0,
    };
    println!(
        "state={} pid={pid} exit_code={} reason={}",
        status.state().as_str_name(),
        status.exit_code,
        status.reason
    );
    Ok(())
}
