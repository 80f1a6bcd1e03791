//! One module per subcommand. Each has `Args` (clap) and `run(&Args)`.

pub mod alloc;
pub mod state;
pub mod hints;
pub mod topology;
