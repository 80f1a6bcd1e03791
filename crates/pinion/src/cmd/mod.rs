//! One module per subcommand. Each has `Args` (clap) and `run(&Args)`.

pub mod agent;
pub mod agent_config;
pub mod alloc;
pub mod health;
pub mod hints;
mod local;
pub mod nrt;
pub mod package;
pub mod plugin;
pub mod plugins;
pub mod podresources;
pub mod pools;
pub mod ps;
pub mod resize;
pub mod run;
pub mod simulate;
pub mod simulate_qrm;
pub mod state;
pub mod state_check;
pub mod state_import;
pub mod state_journal;
pub mod state_rebuild;
mod state_salvage;
mod state_side;
pub mod topology;
