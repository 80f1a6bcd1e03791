//! `pinion state import-qrm FILE`: carry katalyst ORM's resource-plugin
//! allocations (`kubelet_qrm_checkpoint`, spec `qrm.md` §5) into Pinion's
//! state directory, so that a node moving from katalyst-agent to Pinion
//! keeps what its plugins allocated.
//!
//! A dry run by default: it prints what it would import. With `--write` it
//! takes the agent's state-directory lock (so it refuses while an agent
//! runs), appends one journal record per container and makes them durable.
//! Containers Pinion already has plugin data for are left alone unless
//! `--replace` is given; nothing is overwritten silently. At its next start
//! the agent attaches the imported allocations to the runtime's containers
//! (kept until the runtime's `Synchronize`, as with its own data).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use pinion_core::qrm_checkpoint::{self, QrmCheckpoint, StoredAllocations, ALLOCATIONS};
use pinion_core::record::{self, Record, SideData, SideValue};
use pinion_core::state::State;
use pinion_host::journal::{self, StateStore};

/// Arguments of `pinion state import-qrm`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// katalyst ORM's checkpoint, e.g.
    /// /var/lib/katalyst/qrm_advisor/kubelet_qrm_checkpoint.
    file: PathBuf,
    /// The agent's state directory.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Write the allocations (default: print what would be imported).
    #[arg(long)]
    write: bool,
    /// Import even when the checkpoint's checksum does not match.
    #[arg(long)]
    ignore_checksum: bool,
    /// Replace the plugin data Pinion already has for an imported container.
    #[arg(long)]
    replace: bool,
}

/// What happens to one container.
#[derive(Debug, PartialEq)]
enum Action {
    Add,
    Same,
    Replace,
    Keep,
}

/// Runs `pinion state import-qrm`.
pub fn import(args: &ImportArgs) -> anyhow::Result<()> {
    let bytes = pinion_host::journal::read_state_file(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let checkpoint = QrmCheckpoint::decode(&bytes)
        .with_context(|| format!("{}: cannot decode", args.file.display()))?;
    if let Err(err) = checkpoint.verify() {
        if !args.ignore_checksum {
            anyhow::bail!(
                "{}: {err}; nothing imported (--ignore-checksum imports it anyway)",
                args.file.display()
            );
        }
        println!("warning: {err}; importing anyway (--ignore-checksum)");
    }
    let imported = checkpoint.to_allocations();
    for line in &imported.skipped {
        println!("skipped  {line}");
    }
    for line in &imported.notes {
        println!("note     {line}");
    }
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| pinion_api::paths::DefaultPaths::current().state_dir);
    if args.write {
        write(args, &state_dir, &imported.containers)
    } else {
        let side = side_data(&state_dir)?;
        let actions = plan(&imported.containers, &side, args.replace);
        report(&imported.containers, &actions);
        println!(
            "dry run: nothing written (--write imports into {})",
            state_dir.display()
        );
        Ok(())
    }
}

/// Opening the store repairs a journal that cannot be replayed to its end
/// (its bad part copied aside and erased), after which it reads back
/// clean: the agent would then start from its readable part instead of
/// rebuilding from the node, losing what the damage held (found from
/// outside, session 45). Such a journal is left to the agent.
fn refuse_an_incomplete_journal(state_dir: &Path) -> anyhow::Result<()> {
    let inspection = journal::inspect(state_dir)
        .with_context(|| format!("cannot read the state in {}", state_dir.display()))?;
    let Some(why) = inspection.not_replayable() else {
        return Ok(());
    };
    anyhow::bail!(
        "journal {} {why}: nothing imported. The agent rebuilds the state from the node at its next start; start it once, stop it, then import",
        inspection.journal_path.display()
    )
}

fn write(
    args: &ImportArgs,
    state_dir: &Path,
    containers: &BTreeMap<(String, String), StoredAllocations>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("cannot create {}", state_dir.display()))?;
    let _lock = super::state_rebuild::lock_offline(
        state_dir,
        "stop the agent before importing (it owns the state directory)",
    )?;
    refuse_an_incomplete_journal(state_dir)?;
    let policy = existing_policy(state_dir).unwrap_or_else(|| "static".to_string());
    let mut opened = StateStore::open(state_dir, &policy)
        .with_context(|| format!("cannot open the state in {}", state_dir.display()))?;
    for warning in opened.recovery.warnings() {
        println!("state: {warning}");
    }
    let actions = plan(containers, &opened.side, args.replace);
    report(containers, &actions);
    let mut written = 0;
    for ((pod, container), stored) in containers {
        if !matches!(
            actions[&(pod.clone(), container.clone())],
            Action::Add | Action::Replace
        ) {
            continue;
        }
        let value = SideValue::encode(stored).context("encoding an allocation")?;
        opened.store.record(&Record::Side {
            kind: ALLOCATIONS.to_string(),
            key: qrm_checkpoint::side_key(pod, container),
            value: Some(value),
        })?;
        written += 1;
    }
    opened
        .store
        .flush()
        .with_context(|| format!("cannot write the journal in {}", state_dir.display()))?;
    println!(
        "wrote {written} container(s) to {}",
        opened.store.journal_path().display()
    );
    Ok(())
}

/// The policy name of the checkpoint already there, if any.
fn existing_policy(dir: &Path) -> Option<String> {
    let inspection = journal::inspect(dir).ok()?;
    match inspection.checkpoint {
        Some(Ok(checkpoint)) => Some(checkpoint.policy_name().to_string()),
        _ => None,
    }
}

/// The side data the state directory holds now (read-only).
fn side_data(dir: &Path) -> anyhow::Result<SideData> {
    let inspection = journal::inspect(dir)
        .with_context(|| format!("cannot read the state in {}", dir.display()))?;
    let mut side = SideData::new();
    match inspection.journal {
        None => {}
        Some(Ok(view)) => record::replay(&view.replay.records, &mut State::default(), &mut side),
        Some(Err(reason)) => anyhow::bail!(
            "{}: the journal is unreadable ({reason}); see `pinion state inspect`",
            inspection.journal_path.display()
        ),
    }
    Ok(side)
}

fn plan(
    containers: &BTreeMap<(String, String), StoredAllocations>,
    side: &SideData,
    replace: bool,
) -> BTreeMap<(String, String), Action> {
    let existing = side.get(ALLOCATIONS);
    containers
        .iter()
        .map(|((pod, container), stored)| {
            let key = qrm_checkpoint::side_key(pod, container);
            let have = existing
                .and_then(|e| e.get(&key))
                .map(|value| value.decode::<StoredAllocations>().ok());
            let action = match have {
                None => Action::Add,
                Some(Some(have)) if &have == stored => Action::Same,
                Some(_) if replace => Action::Replace,
                Some(_) => Action::Keep,
            };
            ((pod.clone(), container.clone()), action)
        })
        .collect()
}

fn report(
    containers: &BTreeMap<(String, String), StoredAllocations>,
    actions: &BTreeMap<(String, String), Action>,
) {
    for ((pod, container), stored) in containers {
        let action = match actions.get(&(pod.clone(), container.clone())) {
            Some(Action::Add) => "import  ",
            Some(Action::Same) => "same    ",
            Some(Action::Replace) => "REPLACE ",
            Some(Action::Keep) | None => "KEEP    ",
        };
        let resources: Vec<String> = stored
            .allocations
            .iter()
            .map(|(name, a)| {
                if a.oci_property_name.is_empty() {
                    name.clone()
                } else {
                    format!("{name} {}={}", a.oci_property_name, a.allocation_result)
                }
            })
            .collect();
        println!("{action} {pod}/{container}: {}", resources.join(", "));
    }
    let kept = actions.values().filter(|a| **a == Action::Keep).count();
    if kept > 0 {
        println!(
            "{kept} container(s) already have different plugin data in Pinion's state and are kept (--replace overwrites them)"
        );
    }
}
