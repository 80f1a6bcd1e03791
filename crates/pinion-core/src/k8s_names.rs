//! The checks Kubernetes' API server makes of a pod's name, namespace,
//! labels and annotations (`ValidateObjectMeta`): a pod that does not pass
//! them never reaches a kubelet, so resource plugins and podresources
//! consumers never see one. Pinion's standalone runs make their pods
//! themselves (`pinion run --pod-name/--namespace/--label/--annotation`,
//! `POST /v1/run`); these checks keep such pods what a consumer can expect.
//!
//! * pod name: a DNS-1123 subdomain (lowercase letters, digits, `-` and
//!   `.`; dot-separated labels starting and ending with a letter or digit;
//!   at most 253 characters);
//! * namespace: a DNS-1123 label (lowercase letters, digits and `-`,
//!   starting and ending with a letter or digit; at most 63 characters);
//! * label and annotation keys: qualified names, an optional DNS-1123
//!   subdomain prefix (at most 253) and `/`, then a name of at most 63
//!   letters, digits, `-`, `_` and `.` starting and ending with a letter or
//!   digit (annotation keys are checked lowercased, as the API server does);
//! * label values: empty, or at most 63 characters of the name's alphabet;
//! * annotations: keys and values together at most 256 KiB.
//!
//! Errors name the value at fault, cut to [`SHOWN_CHARS`] characters.

use std::collections::BTreeMap;

/// Longest DNS-1123 subdomain (a pod name, a qualified name's prefix).
pub const MAX_SUBDOMAIN: usize = 253;
/// Longest DNS-1123 label (a namespace), a qualified name's name part and
/// a label value.
pub const MAX_LABEL: usize = 63;
/// Largest total size of a pod's annotations, keys and values (bytes).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// Characters of a refused value an error repeats.
pub const SHOWN_CHARS: usize = 64;

/// A pod's metadata Kubernetes would refuse; the value is already cut for
/// display ([`shown`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    #[error("pod name {value}: {defect}")]
    PodName { value: String, defect: String },
    #[error("namespace {value}: {defect}")]
    Namespace { value: String, defect: String },
    #[error("label key {value}: {defect}")]
    LabelKey { value: String, defect: String },
    #[error("label {key}: value {value}: {defect}")]
    LabelValue {
        key: String,
        value: String,
        defect: String,
    },
    #[error("annotation key {value}: {defect}")]
    AnnotationKey { value: String, defect: String },
    #[error("annotations: {size} bytes of keys and values, more than Kubernetes allows ({MAX_ANNOTATIONS_BYTES}, 256 KiB)")]
    AnnotationsTooLarge { size: usize },
}

/// `text` quoted for an error message: whole when short, otherwise its
/// first [`SHOWN_CHARS`] characters and its length.
#[must_use]
pub fn shown(text: &str) -> String {
    if text.chars().count() <= SHOWN_CHARS {
        return format!("{text:?}");
    }
    let head: String = text.chars().take(SHOWN_CHARS).collect();
    format!("{head:?}… ({} bytes)", text.len())
}

fn too_long(len: usize, max: usize) -> Option<String> {
    (len > max).then(|| format!("{len} characters, at most {max} are allowed"))
}

fn lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// What is wrong with `text` as a DNS-1123 subdomain, if anything.
#[must_use]
pub fn dns1123_subdomain_defect(text: &str) -> Option<String> {
    if text.is_empty() {
        return Some("empty; a DNS-1123 subdomain is required".into());
    }
    if let Some(long) = too_long(text.len(), MAX_SUBDOMAIN) {
        return Some(long);
    }
    let found = if !text
        .chars()
        .all(|c| lower_alnum(c) || matches!(c, '-' | '.'))
    {
        "a character other than lowercase letters, digits, '-' and '.'"
    } else if text.split('.').any(str::is_empty) {
        "an empty part between dots"
    } else if text
        .split('.')
        .any(|part| !part.starts_with(lower_alnum) || !part.ends_with(lower_alnum))
    {
        "a dot-separated part starting or ending with '-'"
    } else {
        return None;
    };
    Some(format!(
        "not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', each \
         dot-separated part starting and ending with a letter or digit): it has {found}"
    ))
}

/// What is wrong with `text` as a DNS-1123 label, if anything.
#[must_use]
pub fn dns1123_label_defect(text: &str) -> Option<String> {
    if text.is_empty() {
        return Some("empty; a DNS-1123 label is required".into());
    }
    if let Some(long) = too_long(text.len(), MAX_LABEL) {
        return Some(long);
    }
    let found = if !text.chars().all(|c| lower_alnum(c) || c == '-') {
        "a character other than lowercase letters, digits and '-'"
    } else if !text.starts_with(lower_alnum) || !text.ends_with(lower_alnum) {
        "'-' at its start or end"
    } else {
        return None;
    };
    Some(format!(
        "not a DNS-1123 label (lowercase letters, digits and '-', starting and ending \
         with a letter or digit): it has {found}"
    ))
}

/// A name part's or a label value's alphabet.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// A non-empty name part's or label value's defect, if any.
fn name_part_defect(text: &str) -> Option<String> {
    if let Some(long) = too_long(text.len(), MAX_LABEL) {
        return Some(long);
    }
    let edge = |c: char| c.is_ascii_alphanumeric();
    if !text.chars().all(name_char) {
        return Some("only letters, digits, '-', '_' and '.' are allowed".into());
    }
    if !text.starts_with(edge) || !text.ends_with(edge) {
        return Some("must start and end with a letter or digit".into());
    }
    None
}

/// What is wrong with `text` as a qualified name (a label or annotation
/// key), if anything.
#[must_use]
pub fn qualified_name_defect(text: &str) -> Option<String> {
    let (prefix, name) = match text.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, text),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("the prefix before '/' is empty".into());
        }
        if let Some(defect) = dns1123_subdomain_defect(prefix) {
            return Some(format!("its prefix before '/': {defect}"));
        }
    }
    if name.is_empty() {
        return Some("the name is empty".into());
    }
    name_part_defect(name).map(|defect| {
        let part = if prefix.is_some() {
            "its name after '/'"
        } else {
            "a key (an optional DNS subdomain prefix and '/', then a name)"
        };
        format!("{part}: {defect}")
    })
}

/// What is wrong with `text` as a label value, if anything (empty is
/// allowed).
#[must_use]
pub fn label_value_defect(text: &str) -> Option<String> {
    if text.is_empty() {
        return None;
    }
    name_part_defect(text)
}

/// Checks a pod name.
pub fn check_pod_name(name: &str) -> Result<(), MetaError> {
    match dns1123_subdomain_defect(name) {
        None => Ok(()),
        Some(defect) => Err(MetaError::PodName {
            value: shown(name),
            defect,
        }),
    }
}

/// Checks a namespace name.
pub fn check_namespace(namespace: &str) -> Result<(), MetaError> {
    match dns1123_label_defect(namespace) {
        None => Ok(()),
        Some(defect) => Err(MetaError::Namespace {
            value: shown(namespace),
            defect,
        }),
    }
}

/// Checks labels: keys and values, in key order.
pub fn check_labels<'a>(
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), MetaError> {
    for (key, value) in labels {
        if let Some(defect) = qualified_name_defect(key) {
            return Err(MetaError::LabelKey {
                value: shown(key),
                defect,
            });
        }
        if let Some(defect) = label_value_defect(value) {
            return Err(MetaError::LabelValue {
                key: shown(key),
                value: shown(value),
                defect,
            });
        }
    }
    Ok(())
}

/// Checks annotations: keys (lowercased) are qualified names, keys and
/// values together at most [`MAX_ANNOTATIONS_BYTES`].
pub fn check_annotations<'a>(
    annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), MetaError> {
    let mut size = 0usize;
    for (key, value) in annotations {
        if let Some(defect) = qualified_name_defect(&key.to_ascii_lowercase()) {
            return Err(MetaError::AnnotationKey {
                value: shown(key),
                defect,
            });
        }
        size = size.saturating_add(key.len()).saturating_add(value.len());
    }
    if size > MAX_ANNOTATIONS_BYTES {
        return Err(MetaError::AnnotationsTooLarge { size });
    }
    Ok(())
}

/// Checks a pod's name, namespace, labels and annotations as the API
/// server would; the first defect found.
pub fn check_pod_meta(
    name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<(), MetaError> {
    check_pod_name(name)?;
    check_namespace(namespace)?;
    check_labels(labels)?;
    check_annotations(annotations)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn pod_names_are_dns_subdomains() {
        for good in ["db", "pinion-run-1-2-3", "a.b-c.d", "0", &"a".repeat(253)] {
            assert_eq!(dns1123_subdomain_defect(good), None, "{good}");
        }
        for bad in [
            "",
            "..",
            ".",
            "../..",
            "a..b",
            "-a",
            "a-",
            "A",
            "a_b",
            "a/b",
            "a b",
            "é",
            &"a".repeat(254),
        ] {
            assert!(dns1123_subdomain_defect(bad).is_some(), "{bad:?}");
        }
        let err = check_pod_name("").expect_err("empty");
        assert_eq!(
            err.to_string(),
            "pod name \"\": empty; a DNS-1123 subdomain is required"
        );
        let err = check_pod_name("Web_1").expect_err("upper case");
        assert!(
            err.to_string()
                .starts_with("pod name \"Web_1\": not a DNS-1123 subdomain"),
            "{err}"
        );
    }

    #[test]
    fn namespaces_are_dns_labels() {
        for good in ["pinion", "kube-system", "a", "0a", &"a".repeat(63)] {
            assert_eq!(dns1123_label_defect(good), None, "{good}");
        }
        for bad in ["", "../..", "a.b", "-a", "a-", "Prod", &"a".repeat(64)] {
            assert!(dns1123_label_defect(bad).is_some(), "{bad:?}");
        }
        let err = check_namespace("../..").expect_err("path");
        assert!(
            err.to_string()
                .starts_with("namespace \"../..\": not a DNS-1123 label"),
            "{err}"
        );
        assert_eq!(
            check_namespace(&"a".repeat(64))
                .expect_err("long")
                .to_string(),
            format!(
                "namespace \"{}\": 64 characters, at most 63 are allowed",
                "a".repeat(64)
            )
        );
    }

    #[test]
    fn label_keys_are_qualified_names() {
        for good in [
            "app",
            "App_1.x",
            "example.com/tier",
            "katalyst.kubewharf.io/qos_level",
            "a/B",
            &format!("{}/{}", "a".repeat(253), "b".repeat(63)),
        ] {
            assert_eq!(qualified_name_defect(good), None, "{good}");
        }
        for bad in [
            "",
            "bad key!",
            "/x",
            "x/",
            "a/b/c",
            "Example.com/x",
            "-x",
            "x.",
            &"a".repeat(64),
            &format!("{}/b", "a".repeat(254)),
        ] {
            assert!(qualified_name_defect(bad).is_some(), "{bad:?}");
        }
        let err = check_labels(&map(&[("bad key!", "v")])).expect_err("space");
        assert_eq!(
            err.to_string(),
            "label key \"bad key!\": a key (an optional DNS subdomain prefix and '/', then a \
             name): only letters, digits, '-', '_' and '.' are allowed"
        );
    }

    #[test]
    fn label_values_are_short_names_or_empty() {
        for good in ["", "v", "V1.2_3-x", &"a".repeat(63)] {
            assert_eq!(label_value_defect(good), None, "{good}");
        }
        for bad in ["-v", "v-", "a b", "a/b", &"a".repeat(64)] {
            assert!(label_value_defect(bad).is_some(), "{bad:?}");
        }
        let huge = "x".repeat(1 << 20);
        let err = check_labels(&map(&[("app", &huge)])).expect_err("1 MB");
        let text = err.to_string();
        assert!(text.len() < 300, "the value is cut: {} bytes", text.len());
        assert!(
            text.contains("(1048576 bytes)") && text.contains("1048576 characters, at most 63"),
            "{text}"
        );
    }

    #[test]
    fn annotations_are_bounded_and_keyed_by_qualified_names() {
        assert_eq!(
            check_annotations(&map(&[
                ("pinion.io/isolated-cpus", "prefer"),
                ("katalyst.kubewharf.io/cpu_enhancement", "{\"a\": \"b c\"}"),
                ("Example.COM/Name", "upper case is lowercased first"),
            ])),
            Ok(())
        );
        let err = check_annotations(&map(&[("no good", "v")])).expect_err("key");
        assert!(
            err.to_string().starts_with("annotation key \"no good\""),
            "{err}"
        );
        let at_limit = "v".repeat(MAX_ANNOTATIONS_BYTES - 1);
        assert_eq!(check_annotations(&map(&[("k", &at_limit)])), Ok(()));
        let over = "v".repeat(MAX_ANNOTATIONS_BYTES);
        assert_eq!(
            check_annotations(&map(&[("k", &over)])),
            Err(MetaError::AnnotationsTooLarge {
                size: MAX_ANNOTATIONS_BYTES + 1
            })
        );
    }

    #[test]
    fn shown_values_are_cut() {
        assert_eq!(shown("ab"), "\"ab\"");
        let long = "é".repeat(100);
        assert_eq!(
            shown(&long),
            format!("\"{}\"… (200 bytes)", "é".repeat(SHOWN_CHARS))
        );
    }

    #[test]
    fn pod_meta_checks_each_part() {
        let none = BTreeMap::new();
        assert_eq!(check_pod_meta("db", "prod", &none, &none), Ok(()));
        assert!(matches!(
            check_pod_meta("", "prod", &none, &none),
            Err(MetaError::PodName { .. })
        ));
        assert!(matches!(
            check_pod_meta("db", "../..", &none, &none),
            Err(MetaError::Namespace { .. })
        ));
        assert!(matches!(
            check_pod_meta("db", "prod", &map(&[("a", "-")]), &none),
            Err(MetaError::LabelValue { .. })
        ));
    }
}
