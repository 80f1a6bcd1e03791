//! `pinion agent ARGS…`: starts the node daemon, the `pinion-agent` binary
//! (shipped beside `pinion`), with the same arguments. The CLI itself
//! carries no daemon code.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

/// The daemon's executable name.
pub const AGENT_BIN: &str = "pinion-agent";

/// Arguments of `pinion agent`: everything is passed on to `pinion-agent`
/// (`pinion agent --help` shows its flags).
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub struct Args {
    /// Arguments of `pinion-agent` (--config, --state-dir, --socket, …).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

/// Replaces this process by `pinion-agent ARGS…`; returns only on failure.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let exe = std::env::current_exe().ok();
    let beside = exe.as_deref().and_then(Path::parent);
    let path = std::env::var_os("PATH");
    let Some(agent) = find_agent(beside, path.as_deref()) else {
        anyhow::bail!(
            "cannot find the {AGENT_BIN} executable: not beside this one (in {}) and not on PATH ({}); install both binaries together",
            beside.map_or_else(|| "an unknown directory".into(), |d| d.display().to_string()),
            path.as_deref()
                .map_or_else(|| "unset".into(), |p| p.to_string_lossy().into_owned())
        );
    };
    let err = std::process::Command::new(&agent).args(&args.args).exec();
    anyhow::bail!("cannot execute {}: {err}", agent.display())
}

/// `pinion-agent` in `beside` (the directory of the running `pinion`),
/// else the first one on `path`.
fn find_agent(beside: Option<&Path>, path: Option<&OsStr>) -> Option<PathBuf> {
    let sibling = beside.map(|dir| dir.join(AGENT_BIN));
    let on_path = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(AGENT_BIN));
    sibling
        .into_iter()
        .chain(on_path)
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executable(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join(AGENT_BIN);
        std::fs::write(&path, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[test]
    fn the_sibling_wins_over_path_and_path_is_the_fallback() {
        let beside = tempfile::tempdir().expect("tempdir");
        let on_path = tempfile::tempdir().expect("tempdir");
        let path_agent = executable(on_path.path());
        let path = std::env::join_paths([Path::new("/nonexistent"), on_path.path()]).expect("join");
        assert_eq!(
            find_agent(Some(beside.path()), Some(&path)),
            Some(path_agent)
        );
        let sibling = executable(beside.path());
        assert_eq!(find_agent(Some(beside.path()), Some(&path)), Some(sibling));
    }

    #[test]
    fn non_executable_files_are_not_taken() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(AGENT_BIN), "").expect("write");
        assert_eq!(find_agent(Some(dir.path()), None), None);
    }
}
