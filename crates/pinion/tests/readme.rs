//! The README's shell blocks run as written (issue 33): every ```sh block
//! not marked `<!-- readme-test: skip: REASON -->` on the line before runs
//! line by line with `./target/release/` meaning the binaries under test,
//! against an agent on a captured machine's sysfs tree with a directory as
//! its cgroup hierarchy (`PINION_SOCKET`, `PINION_PODRESOURCES_SOCKET`).

mod common;

use std::path::Path;
use std::process::Command;

const MACHINE: &str = "topologies/x86-2s-intel-xeon-silver-4108-ht";
const SKIP: &str = "<!-- readme-test: skip: ";

/// A shell block: the line it starts on, its commands, and why it is not
/// run (`None`: run it).
struct Block {
    line: usize,
    commands: Vec<String>,
    skip: Option<String>,
}

fn blocks(readme: &str) -> Vec<Block> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut all = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start().starts_with("```sh") {
            let skip = i
                .checked_sub(1)
                .and_then(|p| lines[p].trim().strip_prefix(SKIP))
                .map(|reason| reason.trim_end_matches("-->").trim().to_string());
            let start = i + 1;
            let mut commands = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                let command = lines[i].trim();
                if !command.is_empty() && !command.starts_with('#') {
                    commands.push(command.to_string());
                }
                i += 1;
            }
            all.push(Block {
                line: start,
                commands,
                skip,
            });
        }
        i += 1;
    }
    all
}

#[test]
fn every_shell_block_is_fenced_and_every_skip_has_a_reason() {
    let readme = std::fs::read_to_string(common::workspace().join("README.md")).expect("README");
    let blocks = blocks(&readme);
    assert!(blocks.iter().filter(|b| b.skip.is_none()).count() >= 2);
    for block in &blocks {
        if let Some(reason) = &block.skip {
            assert!(
                !reason.is_empty(),
                "README line {}: skip without a reason",
                block.line
            );
        }
    }
    // No `sudo`: the machines Pinion's README is run on may lack it.
    for block in &blocks {
        for command in &block.commands {
            assert!(
                !command.starts_with("sudo "),
                "README line {}: {command}",
                block.line
            );
        }
    }
    // The first block builds both binaries, the second line runs the agent.
    let first = &blocks[0].commands;
    assert_eq!(first[0], "cargo build --release -p pinion -p pinion-agent");
    assert_eq!(first[1], "./target/release/pinion-agent");
}

#[test]
fn the_readmes_commands_run_as_written() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let node = common::SysrootAgent::start(
        &machine,
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0,16\"\n",
    );
    // `./target/release/pinion…` are the binaries under test.
    let bin = Path::new(common::BIN)
        .parent()
        .expect("bin dir")
        .to_path_buf();
    common::agent_bin();
    let root = common::workspace();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let mut ran = 0;
    for block in blocks(&readme).iter().filter(|b| b.skip.is_none()) {
        for command in &block.commands {
            let local = command.replace("./target/release/", &format!("{}/", bin.display()));
            let out = Command::new("bash")
                .arg("-o")
                .arg("pipefail")
                .arg("-c")
                .arg(&local)
                .current_dir(&root)
                .env("PINION_SOCKET", node.socket())
                .env("PINION_PODRESOURCES_SOCKET", node.podresources())
                .output()
                .expect("bash runs");
            assert!(
                out.status.success(),
                "README line {}: `{command}` failed ({}):\n{}{}\nagent log:\n{}",
                block.line,
                out.status,
                common::stdout(&out),
                common::stderr(&out),
                node.log()
            );
            ran += 1;
        }
    }
    assert!(ran >= 5, "ran {ran} commands");
}
