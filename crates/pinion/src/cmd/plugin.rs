//! `pinion plugin serve cpu|memory|nic`: one of Pinion's own resource
//! plugins as a standalone gRPC process, registering through the
//! plugin-watcher protocol with any katalyst-compatible manager (Pinion's
//! agent, katalyst-agent's ORM, the kubewharf kubelet fork).
//!
//! It listens on `<socket-dir>/pinion-<name>-plugin.sock` (mode 0600) and
//! serves both the `Registration` service (`GetInfo`,
//! `NotifyRegistrationStatus`) and `resourceplugin.v1alpha1`; the manager
//! watching the directory finds it. The socket is removed on SIGTERM or
//! SIGINT, which the manager takes as de-registration. State lives in the
//! plugin's own file of `--state-dir` and survives restarts.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use pinion_api::plugin::{self, Identity, RegistrationState};
use pinion_host::pod_cgroups::PodCpuSource;
use pinion_plugins::builtin::{self, Config, Kind};
use pinion_plugins::cpu::{CpuPlugin, CpuPluginHandle, LoadSources};
use pinion_plugins::grpc::GrpcPlugin;
use pinion_plugins::ResourcePlugin as _;
use serde::de::DeserializeOwned;

/// Arguments of `pinion plugin`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Debug, clap::Subcommand)]
enum PluginCommand {
    /// Serve one of Pinion's resource plugins over gRPC on a unix socket.
    Serve(ServeArgs),
}

/// Which plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Which {
    /// katalyst's QoS levels over role-based CPU pools (resource `cpu`).
    Cpu,
    /// Per-NUMA memory accounting and NUMA binding (resource `memory`).
    Memory,
    /// NUMA-affine NICs (resource `resource.katalyst.kubewharf.io/net_bandwidth`
    /// unless configured).
    Nic,
}

impl Which {
    fn kind(self) -> Kind {
        match self {
            Which::Cpu => Kind::Cpu,
            Which::Memory => Kind::Memory,
            Which::Nic => Kind::Nic,
        }
    }
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The plugin to serve.
    #[arg(value_enum)]
    plugin: Which,
    /// The manager's plugin-watcher directory (katalyst's `--qrm-socket-dirs`;
    /// Pinion's `qosResourceManager.pluginRegistrationDir`).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/lib/pinion/plugins_registry"
    )]
    socket_dir: PathBuf,
    /// The plugin's configuration (YAML): the keys of
    /// `qosResourceManager.plugins.<name>` (docs/qrm.md). Default: one CPU
    /// reserved, as the agent.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Root of the sysfs tree to read the machine from.
    #[arg(long, value_name = "DIR", default_value = "/")]
    sysroot: PathBuf,
    /// Where the plugin keeps its state file.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/pinion")]
    state_dir: PathBuf,
    /// The CPU plugin's closed loop: seconds between two measurements of
    /// its pools' load (`/proc/stat` under --sysroot, and the members' pods'
    /// `cpu.pressure`, or on cgroup v1 their throttling, under --cgroup-root).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    reconcile_period: f64,
    /// Where the CPU plugin finds its pods' cgroups (kubelet's `kubepods`
    /// tree, either cgroup driver) to read their CPU pressure: a cgroup v2
    /// mount (`cpu.pressure`), or on cgroup v1 the directory of the
    /// hierarchies (`cpu/` with `cpu.stat`, `cpuacct/`) or the `cpu`
    /// hierarchy itself (throttling). Default: `sys/fs/cgroup` under --sysroot.
    #[arg(long, value_name = "DIR")]
    cgroup_root: Option<PathBuf>,
}

/// Runs `pinion plugin`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    match &args.command {
        PluginCommand::Serve(serve) => run_serve(serve),
    }
}

fn run_serve(args: &ServeArgs) -> anyhow::Result<()> {
    let topology = pinion_host::discover(&args.sysroot).with_context(|| {
        format!(
            "cannot read the CPU topology under {}",
            args.sysroot.display()
        )
    })?;
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("cannot create {}", args.state_dir.display()))?;
    std::fs::create_dir_all(&args.socket_dir)
        .with_context(|| format!("cannot create {}", args.socket_dir.display()))?;
    let socket = args.socket_dir.join(args.plugin.kind().socket_name());
    let kind = args.plugin.kind();
    let config = match kind {
        Kind::Cpu => Config::Cpu(read_config(args.config.as_deref())?),
        Kind::Memory => Config::Memory(read_config(args.config.as_deref())?),
        Kind::Nic => Config::Nic(read_config(args.config.as_deref())?),
    };
    if let Config::Cpu(cpu) = &config {
        // The CPU plugin runs its pools' closed loop beside the server.
        let plugin = CpuPlugin::open(topology, cpu, Some(&args.state_dir))?;
        let handle = CpuPluginHandle::new(plugin);
        let period = std::time::Duration::try_from_secs_f64(args.reconcile_period)
            .ok()
            .filter(|p| !p.is_zero())
            .with_context(|| {
                format!(
                    "--reconcile-period {}: expected a number of seconds greater than zero",
                    args.reconcile_period
                )
            })?;
        let cgroup_root = args
            .cgroup_root
            .clone()
            .unwrap_or_else(|| args.sysroot.join("sys/fs/cgroup"));
        let closed_loop = (
            handle.clone(),
            LoadSources {
                sysroot: args.sysroot.clone(),
                pods: Some(PodCpuSource::at(&cgroup_root, None)),
            },
            period,
        );
        return serve_with(&socket, handle.grpc(), "cpu", Some(closed_loop));
    }
    let store = builtin::file_store(config.kind(), Some(&args.state_dir));
    let plugin = builtin::open(&config, topology, &args.sysroot, store)?;
    let resource = plugin.resource_name().to_string();
    serve_with(&socket, GrpcPlugin::new(plugin), &resource, None)
}

/// The plugin's configuration from `path` (defaults without one).
fn read_config<T: DeserializeOwned + Default>(path: Option<&Path>) -> anyhow::Result<T> {
    let Some(path) = path else {
        return Ok(T::default());
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    if text.trim().is_empty() {
        return Ok(T::default());
    }
    serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{}: invalid configuration", path.display()))
}

/// The CPU plugin's closed loop: its handle, where it measures, the period.
type ClosedLoop = (CpuPluginHandle, LoadSources, std::time::Duration);

fn serve_with<S>(
    socket: &Path,
    plugin: S,
    resource: &str,
    closed_loop: Option<ClosedLoop>,
) -> anyhow::Result<()>
where
    S: pinion_api::resourceplugin::resource_plugin_server::ResourcePlugin,
{
    let resource = resource.to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let identity = Identity::new(&resource);
        let mut registration = identity.registration();
        let socket_shown = socket.display().to_string();
        tokio::spawn(async move {
            while registration.changed().await.is_ok() {
                match &*registration.borrow() {
                    RegistrationState::Registered => {
                        eprintln!("pinion: the manager registered the {resource} plugin");
                    }
                    RegistrationState::Refused(reason) => {
                        eprintln!("pinion: the manager refused the {resource} plugin: {reason}");
                    }
                    RegistrationState::Pending => {}
                }
            }
        });
        if let Some((handle, sources, period)) = closed_loop {
            tokio::spawn(handle.run_closed_loop(sources, period, std::future::pending()));
        }
        eprintln!("pinion: serving on {socket_shown}");
        plugin::serve(socket, identity, plugin, shutdown()).await
    })?;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
