//! kubelet's checkpoint checksum: FNV-1a (32 bit) over go-spew's `%#v` text
//! of a pointer to the checkpoint struct with its checksum field set to 0.
//!
//! The text is rebuilt here from the facts of go-spew's formatter with the
//! settings kubelet uses (sorted map keys, no methods, no pointer addresses):
//! * the pointer prints as `(*state.CPUManagerCheckpoint)` followed by the
//!   struct; kubelet renames the v1 type to this same name before hashing;
//! * struct fields print as `Name:(type)value`, separated by one space;
//! * strings print raw: no quotes, no escaping;
//! * a map prints as `map[k:v k:v]` with keys in byte order and no types
//!   inside; a nil map prints as `<nil>`;
//! * the checksum field prints as `(checksum.Checksum)0`.

use super::{Checkpoint, Entries};

const FNV_OFFSET_BASIS: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

/// FNV-1a, 32 bit (Go's `hash/fnv.New32a`).
#[must_use]
pub fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The exact text kubelet hashes for this checkpoint (checksum field as 0).
#[must_use]
pub fn hashed_text(checkpoint: &Checkpoint) -> String {
    let mut out = String::from("(*state.CPUManagerCheckpoint){PolicyName:(string)");
    out.push_str(&checkpoint.policy_name);
    out.push_str(" DefaultCPUSet:(string)");
    out.push_str(&checkpoint.default_cpu_set);
    out.push_str(" Entries:");
    match &checkpoint.entries {
        Entries::V1(by_container) => {
            out.push_str("(map[string]string)");
            if checkpoint.nils.entries {
                out.push_str("<nil>");
            } else {
                push_flat_map(&mut out, by_container.iter());
            }
        }
        Entries::V2(pods) => {
            out.push_str("(map[string]map[string]string)");
            if checkpoint.nils.entries {
                out.push_str("<nil>");
            } else {
                out.push_str("map[");
                for (index, (pod, containers)) in pods.iter().enumerate() {
                    if index > 0 {
                        out.push(' ');
                    }
                    out.push_str(pod);
                    out.push(':');
                    if checkpoint.nils.pods.contains(pod) {
                        out.push_str("<nil>");
                    } else {
                        push_flat_map(&mut out, containers.iter());
                    }
                }
                out.push(']');
            }
        }
    }
    out.push_str(" Checksum:(checksum.Checksum)0}");
    out
}

/// `map[k:v k:v]` for a map of strings already in byte order.
fn push_flat_map<'a>(out: &mut String, items: impl Iterator<Item = (&'a String, &'a String)>) {
    out.push_str("map[");
    for (index, (key, value)) in items.enumerate() {
        if index > 0 {
            out.push(' ');
        }
        out.push_str(key);
        out.push(':');
        out.push_str(value);
    }
    out.push(']');
}
