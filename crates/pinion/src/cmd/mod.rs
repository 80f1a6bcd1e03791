//! One module per subcommand. Each has `Args` (clap) and `run(&Args)`.

pub mod alloc;
pub mod hints;
pub mod topology;
