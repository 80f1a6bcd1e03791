//! Small renderings every command shares: a count with its noun, and a CPU
//! set as stored (with its size, or why it does not parse).

use pinion_core::CpuSet;
use serde::Serialize;

/// `1 pod`, `3 pods`.
pub fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// One CPU set as stored, with its size or why it does not parse.
#[derive(Debug, Serialize)]
pub struct CpuSetView {
    cpus: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl CpuSetView {
    pub fn new(text: &str) -> Self {
        let parsed = CpuSet::parse_list(text);
        CpuSetView {
            cpus: text.to_string(),
            count: parsed.as_ref().ok().map(CpuSet::len),
            error: parsed.err().map(|err| err.to_string()),
        }
    }

    /// `0-3 (4 CPUs)`, `(empty) (0 CPUs)`, `x (INVALID: …)`.
    pub fn describe(&self) -> String {
        let shown = if self.cpus.is_empty() {
            "(empty)"
        } else {
            &self.cpus
        };
        match (&self.count, &self.error) {
            (Some(1), _) => format!("{shown} (1 CPU)"),
            (Some(count), _) => format!("{shown} ({count} CPUs)"),
            (None, Some(err)) => format!("{shown} (INVALID: {err})"),
            (None, None) => shown.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_their_noun_in_the_right_number() {
        assert_eq!(plural(0, "pod"), "0 pods");
        assert_eq!(plural(1, "pod"), "1 pod");
        assert_eq!(plural(2, "NUMA node"), "2 NUMA nodes");
    }

    #[test]
    fn a_stored_set_shows_its_size_or_its_error() {
        assert_eq!(CpuSetView::new("0-3").describe(), "0-3 (4 CPUs)");
        assert_eq!(CpuSetView::new("5").describe(), "5 (1 CPU)");
        assert_eq!(CpuSetView::new("").describe(), "(empty) (0 CPUs)");
        assert!(CpuSetView::new("3-1")
            .describe()
            .starts_with("3-1 (INVALID: "));
    }
}
