//! `pinion`: the command-line entry point. Each subcommand lives in `cmd/`.

mod cmd;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod golden_tests;
mod input;
mod output;
mod render;

use std::io::Write as _;

use clap::{Parser, Subcommand};

/// `pinion --version`: the version, the commit and the build date
/// (`build.rs`; `unknown` commit outside a git checkout).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PINION_COMMIT"),
    ", built ",
    env!("PINION_BUILD_DATE"),
    ")"
);

/// Pinion: node-level CPU and NUMA resource manager with kubelet's semantics.
#[derive(Debug, Parser)]
#[command(name = "pinion", version = VERSION, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the CPU topology of this machine (or of a sysfs tree).
    Topology(cmd::topology::Args),
    /// Run kubelet's CPU allocation on a case file or on a machine's topology.
    Alloc(cmd::alloc::Args),
    /// Run a policy scenario (pods added and removed) and show the outcome.
    Simulate(cmd::simulate::Args),
    /// Inspect, verify or migrate kubelet's CPU manager checkpoint.
    State(cmd::state::Args),
    /// Show what the Topology Manager decides for hint cases (merge, cpu_hints).
    Hints(cmd::hints::Args),
    /// Run the node agent (owns CPU assignments; local API, /metrics).
    Agent(cmd::agent::Args),
    /// Run a command on CPUs given by the agent (exclusive with --cpus N).
    Run(cmd::run::Args),
    /// Show who holds which CPUs, as the agent sees it.
    Ps(cmd::ps::Args),
    /// Probe the agent's local API socket (`/healthz`, `--ready`: `/readyz`);
    /// exits 0 when it answers, 1 otherwise.
    Health(cmd::health::Args),
    /// Resize a running workload's CPUs in place (`pinion resize ID --cpus N`).
    Resize(cmd::resize::Args),
    /// Show what kubelet's podresources API on Pinion's socket reports
    /// (list, get POD, allocatable).
    Podresources(cmd::podresources::Args),
    /// Show the resource plugins the agent hosts (QoS Resource Manager).
    Plugins(cmd::plugins::Args),
    /// Show the NodeResourceTopology object Pinion publishes for this node
    /// (zones, resources, costs, attributes; `-o yaml` the object itself).
    Nrt(cmd::nrt::Args),
    /// Show the CPU plugin's pools, or pin one (`pools set NAME=SIZE|MIN-MAX|auto`).
    Pools(cmd::pools::Args),
    /// Serve one of Pinion's own resource plugins (cpu, memory, nic) over
    /// gRPC, for Pinion's agent or any katalyst-compatible manager.
    Plugin(cmd::plugin::Args),
    /// Print the shell completion script for bash, zsh or fish.
    Completions(cmd::package::CompletionsArgs),
    /// Write the man pages (pinion.1 and one per subcommand) into a
    /// directory, or print pinion.1.
    Man(cmd::package::ManArgs),
}

fn main() -> std::process::ExitCode {
    quiet_on_closed_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Topology(args) => cmd::topology::run(&args),
        Command::Alloc(args) => cmd::alloc::run(&args),
        Command::State(args) => cmd::state::run(&args),
        Command::Simulate(args) => cmd::simulate::run(&args),
        Command::Hints(args) => cmd::hints::run(&args),
        Command::Agent(args) => cmd::agent::run(&args),
        Command::Run(args) => cmd::run::run(&args),
        Command::Ps(args) => cmd::ps::run(&args),
        Command::Health(args) => cmd::health::run(&args),
        Command::Resize(args) => cmd::resize::run(&args),
        Command::Podresources(args) => cmd::podresources::run(&args),
        Command::Plugins(args) => cmd::plugins::run(&args),
        Command::Nrt(args) => cmd::nrt::run(&args),
        Command::Pools(args) => cmd::pools::run(&args),
        Command::Plugin(args) => cmd::plugin::run(&args),
        Command::Completions(args) => cmd::package::completions(&args),
        Command::Man(args) => cmd::package::man(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // Not `eprintln!`: a closed standard error must not turn the
            // failure into a panic.
            let _ = writeln!(std::io::stderr().lock(), "pinion: {}", report(&err));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The exit status of a `pinion` whose standard output or error is a pipe
/// the reader has closed (`pinion state inspect FILE 2>&1 | head -1`):
/// 128 + SIGPIPE, what a shell shows for a writer that SIGPIPE ended.
const CLOSED_PIPE_STATUS: i32 = 128 + 13;

/// Makes a write to a closed standard output or error end the process
/// quietly, as a Unix filter ends, instead of a panic (exit 101).
///
/// The Rust runtime ignores SIGPIPE, so such a write fails with EPIPE and
/// `print!`/`println!`/`eprintln!` panic with "failed printing to stdout:
/// Broken pipe", as do libraries that `expect` their writes (clap_complete
/// for `pinion completions`). Restoring SIGPIPE's default disposition
/// instead would need `unsafe` (denied in the workspace) and would also
/// apply to the Unix sockets of `health`, `ps`, `run`, `resize` (killed
/// without a word when the agent goes away mid-request) and to `pinion
/// plugin`'s server (killed by a client that disconnects). So the hook
/// takes the standard library's print panic from any thread (the streams
/// are the process's) and any other EPIPE panic of the main thread, where
/// the subcommands print; every other panic keeps the default report.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied());
        let main = std::thread::current().name() == Some("main");
        if message.is_some_and(|message| is_closed_pipe_panic(message, main)) {
            std::process::exit(CLOSED_PIPE_STATUS);
        }
        default(info);
    }));
}

/// Whether a panic's `message` is a write to a pipe without a reader: the
/// standard library's print panic, or (`main`: on the main thread) an I/O
/// error of kind `BrokenPipe` in its `Display` or `Debug` form.
fn is_closed_pipe_panic(message: &str, main: bool) -> bool {
    let epipe = std::io::Error::from_raw_os_error(nix::errno::Errno::EPIPE as i32);
    let display = epipe.to_string();
    let printing = ["stdout", "stderr"].iter().any(|stream| {
        message
            .strip_prefix("failed printing to ")
            .and_then(|rest| rest.strip_prefix(stream))
            .is_some_and(|rest| rest == format!(": {display}"))
    });
    let debug = format!("kind: {:?}", std::io::ErrorKind::BrokenPipe);
    printing || (main && (message.ends_with(&display) || message.contains(&debug)))
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

#[cfg(test)]
mod tests {
    use super::is_closed_pipe_panic;

    #[test]
    fn closed_pipe_panics_are_told_from_others() {
        let print = "failed printing to stdout: Broken pipe (os error 32)";
        assert!(is_closed_pipe_panic(print, false));
        assert!(is_closed_pipe_panic(
            "failed printing to stderr: Broken pipe (os error 32)",
            false
        ));
        let expect = "failed to write completion file: Os { code: 32, kind: BrokenPipe, message: \"Broken pipe\" }";
        assert!(is_closed_pipe_panic(expect, true));
        assert!(!is_closed_pipe_panic(expect, false), "another thread");
        assert!(!is_closed_pipe_panic(
            "failed printing to stdout: No space left on device (os error 28)",
            true
        ));
        assert!(!is_closed_pipe_panic("index out of bounds", true));
    }
}
