//! What the commands that talk to the agent's local API share: where its
//! socket is, the output options and the one hint for a missing agent.

use std::path::PathBuf;

use pinion_api::{Client, DefaultPaths};
use serde::Serialize;

use crate::output::{self, OutputArgs};

/// The agent's socket: `socket` when given (`--socket`), else the default
/// for this user.
pub fn socket_or_default(socket: Option<&PathBuf>) -> PathBuf {
    socket
        .cloned()
        .unwrap_or_else(|| DefaultPaths::current().socket)
}

/// The one hint every command gives when the agent cannot be reached.
pub use pinion_api::client::unreachable as agent_unreachable;

/// The options of every command that reads the agent's local API.
#[derive(Debug, clap::Args)]
pub struct Local {
    #[command(flatten)]
    pub output: OutputArgs,
    /// Unix socket of the agent's local API (default: /run/pinion/pinion.sock
    /// for root, under ~/.local/state/pinion otherwise).
    #[arg(long, global = true, env = "PINION_SOCKET")]
    pub socket: Option<PathBuf>,
}

impl Local {
    /// A client of the agent's socket.
    pub fn client(&self) -> Client {
        Client::new(&socket_or_default(self.socket.as_ref()))
    }

    /// Prints `value` in the chosen output; `table` makes the text of the
    /// `table`/`wide` formats (its flag: `wide`).
    pub fn print<T: Serialize>(
        &self,
        value: &T,
        table: impl FnOnce(&T, bool) -> String,
    ) -> anyhow::Result<()> {
        print!("{}", output::render(self.output.output(), value, table)?);
        Ok(())
    }
}
