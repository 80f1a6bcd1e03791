//! Where the agent keeps its state and its socket by default: both sides of
//! the local API need the socket's path (the agent to listen, `pinion run`
//! and `pinion ps` to connect).

use std::path::{Path, PathBuf};

/// The podresources socket's path under the agent's state directory.
pub const PODRESOURCES_SOCKET: &str = "pod-resources/pinion.sock";

/// Where state and the socket go by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultPaths {
    pub state_dir: PathBuf,
    pub socket: PathBuf,
}

impl DefaultPaths {
    /// `/var/lib/pinion` and `/run/pinion/pinion.sock` for root; for anyone
    /// else both under `<home>/.local/state/pinion`.
    #[must_use]
    pub fn for_user(is_root: bool, home: Option<&Path>) -> Self {
        if is_root {
            return Self {
                state_dir: PathBuf::from("/var/lib/pinion"),
                socket: PathBuf::from("/run/pinion/pinion.sock"),
            };
        }
        let base = home.unwrap_or(Path::new(".")).join(".local/state/pinion");
        Self {
            socket: base.join("pinion.sock"),
            state_dir: base,
        }
    }

    /// The podresources socket of an agent with the default state
    /// directory (`/var/lib/pinion/pod-resources/pinion.sock` for root).
    #[must_use]
    pub fn podresources_socket(&self) -> PathBuf {
        self.state_dir.join(PODRESOURCES_SOCKET)
    }

    /// The defaults for the user running this process.
    #[must_use]
    pub fn current() -> Self {
        use std::os::unix::fs::MetadataExt as _;
        let is_root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Self::for_user(is_root, home.as_deref())
    }
}
