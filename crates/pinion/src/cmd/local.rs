//! What the commands that talk to the agent's local API share: where its
//! socket is and the output formats.

use std::path::PathBuf;

use pinion_api::{Client, DefaultPaths};
use serde::Serialize;

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

/// The options of every command that reads the agent's local API.
#[derive(Debug, clap::Args)]
pub struct Local {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table, global = true)]
    pub format: Format,
    /// Unix socket of the agent's local API.
    #[arg(long, global = true)]
    pub socket: Option<PathBuf>,
}

impl Local {
    /// A client of the agent's socket.
    pub fn client(&self) -> Client {
        Client::new(&socket_or_default(self.socket.as_ref()))
    }

    /// Prints `value` as pretty JSON, or as the text `table` makes of it.
    pub fn print<T: Serialize>(
        &self,
        value: &T,
        table: impl FnOnce(&T) -> String,
    ) -> anyhow::Result<()> {
        match self.format {
            Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
            Format::Table => print!("{}", table(value)),
        }
        Ok(())
    }
}
