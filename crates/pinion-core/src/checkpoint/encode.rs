//! Writing a v2 checkpoint exactly as kubelet does: Go's `json.Marshal` of
//! the struct, compact, fields in declaration order (`policyName`,
//! `defaultCpuSet`, `entries` (left out when empty), `checksum`), map keys in
//! byte order, strings escaped the way Go escapes them.

use std::fmt::Write as _;

use super::{Checkpoint, PodEntries};

/// The bytes kubelet writes for this content, checksum included.
#[must_use]
pub fn encode(policy_name: &str, default_cpu_set: &str, entries: &PodEntries) -> Vec<u8> {
    let checksum = Checkpoint::new(policy_name, default_cpu_set, entries.clone()).stored_checksum();
    let mut out = String::with_capacity(64 + 48 * entries.len());
    out.push_str("{\"policyName\":");
    push_go_string(&mut out, policy_name);
    out.push_str(",\"defaultCpuSet\":");
    push_go_string(&mut out, default_cpu_set);
    if !entries.is_empty() {
        out.push_str(",\"entries\":{");
        for (pod_index, (pod, containers)) in entries.iter().enumerate() {
            if pod_index > 0 {
                out.push(',');
            }
            push_go_string(&mut out, pod);
            out.push_str(":{");
            for (index, (container, cpus)) in containers.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_go_string(&mut out, container);
                out.push(':');
                push_go_string(&mut out, cpus);
            }
            out.push('}');
        }
        out.push('}');
    }
    let _ = write!(out, ",\"checksum\":{checksum}}}");
    out.into_bytes()
}

/// A JSON string as Go's encoder writes it: `"` and `\` escaped, control
/// characters as `\b \f \n \r \t` or `\u00XX`, `<`, `>`, `&` and U+2028,
/// U+2029 as `\uXXXX` (HTML-safe), everything else as UTF-8.
pub(crate) fn push_go_string(out: &mut String, text: &str) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(ch));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
