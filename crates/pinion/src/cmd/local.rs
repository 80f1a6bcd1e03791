//! What the commands that talk to the agent's local API share: where its
//! socket is and the output formats.

use std::path::PathBuf;

use pinion_api::DefaultPaths;

/// Output format of a local-API command.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// The agent's socket: `socket` when given (`--socket`), else the default
/// for this user.
pub fn socket_or_default(socket: Option<&PathBuf>) -> PathBuf {
    socket
        .cloned()
        .unwrap_or_else(|| DefaultPaths::current().socket)
}
