//! `pinion completions SHELL` and `pinion man [--dir DIR]`: shell
//! completions (clap_complete) and man pages (clap_mangen), both generated
//! from the same clap definitions as the commands themselves.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::CommandFactory as _;

/// Arguments of `pinion completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh or fish.
    shell: Shell,
}

/// Shells we print completions for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Arguments of `pinion man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write pinion.1 and pinion-SUBCOMMAND.1 here (created when missing);
    /// without it, pinion.1 goes to standard output.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints the completion script of `args.shell`.
pub fn completions(args: &CompletionsArgs) -> anyhow::Result<()> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut command = crate::Cli::command();
    clap_complete::generate(shell, &mut command, "pinion", &mut std::io::stdout());
    Ok(())
}

/// Writes the man pages into `args.dir`, or prints pinion.1.
pub fn man(args: &ManArgs) -> anyhow::Result<()> {
    let mut command = crate::Cli::command();
    command.build();
    let Some(dir) = &args.dir else {
        clap_mangen::Man::new(command)
            .render(&mut std::io::stdout())
            .context("writing pinion.1 to standard output")?;
        return Ok(());
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for (title, page) in pages(&command, None) {
        let name = format!("{title}.1");
        let path = dir.join(&name);
        let mut text = Vec::new();
        clap_mangen::Man::new(page)
            .title(title)
            .render(&mut text)
            .with_context(|| format!("rendering {name}"))?;
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(name);
    }
    eprintln!(
        "pinion: wrote {} man pages to {}",
        written.len(),
        dir.display()
    );
    Ok(())
}

/// `command` and every visible subcommand below it, each named
/// `pinion-sub-subsub` as man pages of git-style tools are.
fn pages(command: &clap::Command, parent: Option<&str>) -> Vec<(String, clap::Command)> {
    let name = match parent {
        None => command.get_name().to_string(),
        Some(parent) => format!("{parent}-{}", command.get_name()),
    };
    let mut all = vec![(name.clone(), command.clone())];
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        all.extend(pages(sub, Some(&name)));
    }
    all
}
