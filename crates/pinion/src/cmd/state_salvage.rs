//! The damaged-file part of `pinion state inspect`: a checkpoint that does
//! not decode (cut short, or broken further on) is shown as far as it can
//! be read — the fields and container entries complete before the point
//! where reading stopped, the checksum it stores (if that was reached) and
//! the one kubelet would compute for the readable content
//! (`pinion_core::checkpoint::salvage`). The command still fails.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pinion_core::checkpoint::Salvaged;
use serde::Serialize;

use super::state::push_assignments;
use crate::render::text::{plural, CpuSetView};

/// What can be read of a damaged checkpoint.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DamagedReport {
    file: String,
    /// Why the file does not decode.
    damaged: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    default: Option<CpuSetView>,
    /// v2: pod → container → CPU set, the complete ones.
    entries: BTreeMap<String, BTreeMap<String, CpuSetView>>,
    /// v1: container id → CPU set, the complete ones.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    v1_entries: BTreeMap<String, CpuSetView>,
    /// The pod whose containers were being read when reading stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    cut_in_pod: Option<String>,
    checksum: DamagedChecksum,
    problems: Vec<String>,
}

#[derive(Debug, Serialize)]
struct DamagedChecksum {
    /// As stored, when reading got that far.
    stored: Option<u64>,
    /// What kubelet computes for the readable content.
    computed: u64,
}

impl DamagedReport {
    pub(super) fn new(file: String, salvaged: &Salvaged) -> Self {
        let damaged = salvaged
            .error
            .as_ref()
            .map_or_else(|| "it does not decode".to_string(), ToString::to_string);
        let views = |items: &BTreeMap<String, String>| {
            items
                .iter()
                .map(|(name, cpus)| (name.clone(), CpuSetView::new(cpus)))
                .collect()
        };
        DamagedReport {
            file,
            problems: vec![damaged.clone()],
            damaged,
            policy: salvaged.policy_name.clone(),
            default: salvaged.default_cpu_set.as_deref().map(CpuSetView::new),
            entries: salvaged
                .entries
                .iter()
                .map(|(pod, containers)| (pod.clone(), views(containers)))
                .collect(),
            v1_entries: views(&salvaged.v1_entries),
            cut_in_pod: salvaged.cut_in_pod.clone(),
            checksum: DamagedChecksum {
                stored: salvaged.stored_checksum,
                computed: salvaged.computed_checksum(),
            },
        }
    }

    pub(super) fn to_text(&self) -> String {
        const UNREAD: &str = "(not reached)";
        let mut out = String::new();
        let _ = writeln!(out, "file      {}", self.file);
        let _ = writeln!(out, "DAMAGED   {}", self.damaged);
        let _ = writeln!(out, "readable  what is complete before that point:");
        let _ = writeln!(
            out,
            "policy    {}",
            self.policy.as_deref().unwrap_or(UNREAD)
        );
        let _ = writeln!(
            out,
            "default   {}",
            self.default
                .as_ref()
                .map_or_else(|| UNREAD.to_string(), CpuSetView::describe)
        );
        let containers: usize = self.entries.values().map(BTreeMap::len).sum();
        let cut = self
            .cut_in_pod
            .as_ref()
            .map(|pod| format!(", cut inside pod {pod}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "entries   {} ({}){cut}",
            plural(self.entries.len(), "pod"),
            plural(containers, "container")
        );
        for (pod, containers) in &self.entries {
            let _ = writeln!(out, "  pod {pod}");
            push_assignments(&mut out, "    ", containers);
        }
        if !self.v1_entries.is_empty() {
            let _ = writeln!(
                out,
                "v1        {} (keyed by container id)",
                plural(self.v1_entries.len(), "container")
            );
            push_assignments(&mut out, "  ", &self.v1_entries);
        }
        let stored = self.checksum.stored.map_or_else(
            || "none stored (not reached)".to_string(),
            |s| format!("stored {s}"),
        );
        let _ = writeln!(
            out,
            "checksum  {stored}; the readable content's would be {}",
            self.checksum.computed
        );
        out
    }
}
