//! The side data of Pinion's journal in `pinion state verify`, `migrate`
//! and `rebuild`: pod-level CPU sets (`pod-cpus`), the CPUs resized
//! containers were first given (`promised-cpus`) and the built-in resource
//! plugins' state (`plugin-state/*`), replayed from the journal beside the
//! checkpoint as the agent does at start. `verify` checks them against the
//! checkpoint; `migrate` and `rebuild` supersede the journal, so they say
//! which of them the agent will start without.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;

use pinion_core::record::{kinds, replay, SideData};
use pinion_core::state::State;
use pinion_core::CpuSet;
use pinion_host::journal::{inspect_paths, JOURNAL};
use pinion_host::store::CPU_MANAGER_STATE;

/// The side data the agent would start with: the journal beside
/// `checkpoint` (a `cpu_manager_state`) replayed. `None` without a journal
/// or when it cannot be read (`pinion state inspect` says why).
#[must_use]
pub fn read(checkpoint: &Path) -> Option<SideData> {
    if checkpoint.file_name() != Some(OsStr::new(CPU_MANAGER_STATE)) {
        return None;
    }
    let journal = checkpoint.parent()?.join(JOURNAL);
    if !journal.exists() {
        return None;
    }
    let Ok(Some(Ok(view))) = inspect_paths(checkpoint, &journal).map(|i| i.journal) else {
        return None;
    };
    let mut side = SideData::new();
    replay(&view.replay.records, &mut State::default(), &mut side);
    Some(side)
}

/// What the side data holds, one line per kind: `pod-cpus: 2 pods`.
#[must_use]
pub fn summary(side: &SideData) -> Vec<String> {
    side.iter()
        .map(|(kind, entries)| {
            let pods = entries
                .keys()
                .filter(|key| {
                    !(kind.starts_with(kinds::PLUGIN_STATE_PREFIX)
                        && key.as_str() == kinds::PLUGIN_STATE_REST)
                })
                .count();
            format!("{kind}: {}", crate::render::text::plural(pods, "pod"))
        })
        .collect()
}

/// The side data checked against `state`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SideCheck {
    /// Inconsistencies the agent would start with (verify fails on them).
    pub problems: Vec<String>,
    /// Entries that may be stale, not necessarily wrong (a shared-pool pod
    /// has plugin state but no CPU assignment).
    pub warnings: Vec<String>,
}

/// Checks `side` against `state`: pod-level CPUs must belong to a pod of
/// the state and not overlap another pod's exclusive CPUs; promised CPUs
/// must be within the CPUs of an assigned container; plugin state of a pod
/// with no assignment is a warning.
#[must_use]
pub fn check(side: &SideData, state: &State) -> SideCheck {
    let mut out = SideCheck::default();
    for (pod, value) in side.get(kinds::POD_CPUS).into_iter().flatten() {
        let Ok(cpus) = value.decode::<CpuSet>() else {
            out.problems.push(format!(
                "{}: pod {pod}: unreadable value {}",
                kinds::POD_CPUS,
                value.json()
            ));
            continue;
        };
        if !state.assignments.contains_key(pod) {
            out.problems.push(format!(
                "{}: pod {pod} has cpus {cpus} but no assignment in the checkpoint",
                kinds::POD_CPUS
            ));
        }
        for (other, containers) in state.assignments.iter().filter(|(p, _)| *p != pod) {
            for (container, exclusive) in containers {
                let shared = cpus.intersection(exclusive);
                if !shared.is_empty() {
                    out.problems.push(format!(
                        "{}: pod {pod}'s cpus {cpus} overlap the exclusive cpus {exclusive} of {other}/{container} (cpus {shared})",
                        kinds::POD_CPUS
                    ));
                }
            }
        }
    }
    for (pod, value) in side.get(kinds::PROMISED).into_iter().flatten() {
        let Ok(containers) = value.decode::<BTreeMap<String, CpuSet>>() else {
            out.problems.push(format!(
                "{}: pod {pod}: unreadable value {}",
                kinds::PROMISED,
                value.json()
            ));
            continue;
        };
        for (container, promised) in containers {
            match state.assignment(pod, &container) {
                None => out.problems.push(format!(
                    "{}: {pod}/{container} was promised cpus {promised} but has no assignment in the checkpoint",
                    kinds::PROMISED
                )),
                Some(cpus) if !promised.is_subset(cpus) => out.problems.push(format!(
                    "{}: {pod}/{container} was promised cpus {promised}, not all within its cpus {cpus}",
                    kinds::PROMISED
                )),
                Some(_) => {}
            }
        }
    }
    for (kind, entries) in side {
        if !kind.starts_with(kinds::PLUGIN_STATE_PREFIX) {
            continue;
        }
        for pod in entries
            .keys()
            .filter(|k| k.as_str() != kinds::PLUGIN_STATE_REST)
        {
            if !state.assignments.contains_key(pod) {
                out.warnings.push(format!(
                    "{kind}: pod {pod} has no assignment in the checkpoint (fine for a shared-pool pod; stale if the pod has left)"
                ));
            }
        }
    }
    out
}

/// What `migrate` / `rebuild` leave behind: the side data of the journal
/// they supersede, or `None` when there is none.
#[must_use]
pub fn dropped(side: Option<&SideData>) -> Option<String> {
    let side = side.filter(|side| !side.is_empty())?;
    Some(format!(
        "not carried over: the journal's side data ({}) — the agent starts without it: pod-level cpu sets and resize promises are recomputed as pods are admitted again, the built-in plugins start from empty state (their pods keep running)",
        summary(side).join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use pinion_core::record::SideValue;

    use super::*;

    fn cpus(text: &str) -> CpuSet {
        CpuSet::parse_list(text).expect("cpulist")
    }

    fn put(side: &mut SideData, kind: &str, key: &str, value: serde_json::Value) {
        side.entry(kind.to_string())
            .or_default()
            .insert(key.to_string(), SideValue::from(value));
    }

    fn state() -> State {
        let mut state = State {
            default: cpus("0,5-7"),
            ..State::default()
        };
        state.assign("pod-a", "app", cpus("1-2"));
        state.assign("pod-b", "db", cpus("3-4"));
        state
    }

    #[test]
    fn consistent_side_data_passes() {
        let mut side = SideData::new();
        put(
            &mut side,
            kinds::POD_CPUS,
            "pod-a",
            serde_json::json!("1-2"),
        );
        put(
            &mut side,
            kinds::PROMISED,
            "pod-b",
            serde_json::json!({"db": "3"}),
        );
        put(
            &mut side,
            "plugin-state/cpu",
            "pod-a",
            serde_json::json!({}),
        );
        put(&mut side, "plugin-state/cpu", "rest", serde_json::json!({}));
        assert_eq!(check(&side, &state()), SideCheck::default());
        assert_eq!(
            summary(&side),
            [
                "plugin-state/cpu: 1 pod",
                "pod-cpus: 1 pod",
                "promised-cpus: 1 pod"
            ]
        );
    }

    #[test]
    fn overlapping_pod_cpus_and_promises_outside_the_state_are_problems() {
        let mut side = SideData::new();
        put(
            &mut side,
            kinds::POD_CPUS,
            "pod-a",
            serde_json::json!("1-3"),
        );
        put(
            &mut side,
            kinds::POD_CPUS,
            "pod-gone",
            serde_json::json!("6"),
        );
        put(
            &mut side,
            kinds::PROMISED,
            "pod-b",
            serde_json::json!({"db": "3,5"}),
        );
        put(
            &mut side,
            kinds::PROMISED,
            "pod-c",
            serde_json::json!({"web": "7"}),
        );
        put(
            &mut side,
            "plugin-state/cpu",
            "pod-left",
            serde_json::json!({}),
        );
        let found = check(&side, &state());
        assert_eq!(found.problems.len(), 4, "{:#?}", found.problems);
        assert!(found.problems[0].contains("overlap the exclusive cpus 3-4 of pod-b/db (cpus 3)"));
        assert!(found.problems[1].contains("pod pod-gone has cpus 6 but no assignment"));
        assert!(found.problems[2]
            .contains("pod-b/db was promised cpus 3,5, not all within its cpus 3-4"));
        assert!(found.problems[3].contains("pod-c/web was promised cpus 7 but has no assignment"));
        assert_eq!(found.warnings.len(), 1);
        assert!(found.warnings[0].starts_with("plugin-state/cpu: pod pod-left"));
    }

    #[test]
    fn dropped_names_what_is_left_behind() {
        assert_eq!(dropped(None), None);
        assert_eq!(dropped(Some(&SideData::new())), None);
        let mut side = SideData::new();
        put(
            &mut side,
            kinds::POD_CPUS,
            "pod-a",
            serde_json::json!("1-2"),
        );
        let text = dropped(Some(&side)).expect("something dropped");
        assert!(text.contains("(pod-cpus: 1 pod)"), "{text}");
    }
}
