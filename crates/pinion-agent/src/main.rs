//! `pinion-agent`: the node daemon (design: `docs/design.md`). `pinion
//! agent ARGS…` execs this binary with the same arguments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr as _;

use anyhow::Context as _;
use clap::Parser;
use pinion_agent::{Config, DefaultPaths, KubeletFlags, Overrides};

/// `pinion-agent --version`: the version, the commit and the build date
/// (`build.rs`; `unknown` commit outside a git checkout).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PINION_COMMIT"),
    ", built ",
    env!("PINION_BUILD_DATE"),
    ")"
);

/// Pinion's node agent: owns CPU assignments; local API, /metrics, NRI.
/// Flags override the config file.
#[derive(Debug, Parser)]
#[command(name = "pinion-agent", version = VERSION, after_help = defaults_help())]
struct Args {
    /// YAML config file (kubelet key names; see docs/design.md). A key it
    /// does not set takes the default below, as without a file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Directory of the `cpu_manager_state` checkpoint.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Unix socket of the local API.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Pinion's cgroup directory (default: `<cpuset mount>/pinion`).
    #[arg(long)]
    cgroup_root: Option<PathBuf>,
    /// Root of `sys/` and `proc/` to read (default `/`).
    #[arg(long)]
    sysroot: Option<PathBuf>,
    /// Address of `/metrics`, `/healthz`, `/readyz` (default 127.0.0.1:9590).
    #[arg(long)]
    metrics_addr: Option<String>,
    /// Run as an NRI plugin of containerd / CRI-O (external mode; see
    /// docs/nri.md). A runtime-launched agent is detected from NRI_PLUGIN_*.
    #[arg(long)]
    nri: bool,
    /// The runtime's NRI socket (default /var/run/nri/nri.sock); implies --nri.
    #[arg(long)]
    nri_socket: Option<PathBuf>,
    /// Unix socket of kubelet's podresources API as Pinion serves it
    /// (default <state-dir>/pod-resources/pinion.sock).
    #[arg(long)]
    podresources_socket: Option<PathBuf>,
    /// kubelet's flag: the CPU manager policy, `none` or `static`
    /// (overrides `cpuManagerPolicy`).
    #[arg(long, value_name = "POLICY")]
    cpu_manager_policy: Option<String>,
    /// kubelet's flag: policy options as NAME=VALUE,NAME=VALUE (overrides
    /// `cpuManagerPolicyOptions`).
    #[arg(long, value_name = "OPTIONS")]
    cpu_manager_policy_options: Option<String>,
    /// kubelet's flag: the reserved CPUs as a cpulist (overrides
    /// `reservedSystemCPUs`).
    #[arg(long, value_name = "CPULIST")]
    reserved_cpus: Option<String>,
    /// kubelet's flag: the Topology Manager policy (overrides
    /// `topologyManagerPolicy`).
    #[arg(long, value_name = "POLICY")]
    topology_manager_policy: Option<String>,
    /// kubelet's flag: the Topology Manager scope, `container` or `pod`
    /// (overrides `topologyManagerScope`).
    #[arg(long, value_name = "SCOPE")]
    topology_manager_scope: Option<String>,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    log_level: String,
}

/// The defaults of the config file's keys (one table with `pinion state`).
fn defaults_help() -> String {
    format!(
        "Defaults of the config file's keys (a key the file does not set, or no file):\n{}",
        pinion_core::policy::defaults::table_text()
    )
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("pinion-agent: {}", report(&err));
            ExitCode::FAILURE
        }
    }
}

/// Runs the agent until SIGTERM or SIGINT.
fn run(args: &Args) -> anyhow::Result<()> {
    let level = tracing::Level::from_str(&args.log_level)
        .map_err(|_| anyhow::anyhow!("invalid --log-level {:?}", args.log_level))?;
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let overrides = Overrides {
        config: args.config.clone(),
        state_dir: args.state_dir.clone(),
        socket: args.socket.clone(),
        cgroup_root: args.cgroup_root.clone(),
        sysroot: args.sysroot.clone(),
        metrics_addr: args.metrics_addr.clone(),
        nri: args.nri,
        nri_socket: args.nri_socket.clone(),
        podresources_socket: args.podresources_socket.clone(),
        kubelet: KubeletFlags {
            cpu_manager_policy: args.cpu_manager_policy.clone(),
            cpu_manager_policy_options: args.cpu_manager_policy_options.clone(),
            reserved_cpus: args.reserved_cpus.clone(),
            topology_manager_policy: args.topology_manager_policy.clone(),
            topology_manager_scope: args.topology_manager_scope.clone(),
        },
    };
    let config = Config::load(&overrides, &DefaultPaths::current())?;
    let runtime = pinion_agent::daemon::runtime().context("cannot start the async runtime")?;
    runtime.block_on(pinion_agent::run(config))?;
    Ok(())
}

/// The error and its causes, leaving out a cause whose text the message
/// already contains (most error types embed their source).
fn report(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}
