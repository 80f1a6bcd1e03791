//! One module per subcommand. Each has `Args` (clap) and `run(&Args)`.

pub mod agent;
pub mod alloc;
pub mod hints;
pub mod ps;
pub mod run;
pub mod simulate;
pub mod state;
pub mod state_check;
pub mod topology;
