//! The `housekeeping` section and `otherWriters` (issue 31 items 2 and 6,
//! docs/housekeeping.md): cgroups outside Pinion's whose `cpuset.cpus`
//! follow the shared pool, and what Pinion does about cpusets someone else
//! changed.

use pinion_core::drift::OtherWriters;
use pinion_host::cgroup::ContainerCgroup;
use serde::Deserialize;

use super::{field_error, ConfigError};

/// The most housekeeping cgroups one agent keeps.
pub const MAX_HOUSEKEEPING_CGROUPS: usize = 32;
/// The longest path of one (bytes).
pub const MAX_HOUSEKEEPING_PATH_LEN: usize = 1024;

const FIELD: &str = "housekeeping.cgroups";

/// The file form of `housekeeping`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HousekeepingFileConfig {
    pub cgroups: Option<Vec<String>>,
}

/// The validated `housekeeping` section and `otherWriters`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HousekeepingConfig {
    /// Paths relative to the cpuset hierarchy's mount, in the file's order.
    pub cgroups: Vec<ContainerCgroup>,
    pub other_writers: OtherWriters,
}

impl HousekeepingConfig {
    /// Validates both keys: each cgroup an absolute cgroupfs path (no `..`,
    /// `.`, `:`, not the hierarchy's root), none twice, none inside another,
    /// at most [`MAX_HOUSEKEEPING_CGROUPS`] of at most
    /// [`MAX_HOUSEKEEPING_PATH_LEN`] bytes.
    pub fn resolve(
        file: Option<HousekeepingFileConfig>,
        other_writers: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let other_writers = match other_writers {
            None => OtherWriters::default(),
            Some(text) => OtherWriters::parse(text)
                .map_err(|reason| field_error("otherWriters", text, &reason))?,
        };
        let texts = file.and_then(|f| f.cgroups).unwrap_or_default();
        if texts.len() > MAX_HOUSEKEEPING_CGROUPS {
            return Err(field_error(
                FIELD,
                &format!("{} entries", texts.len()),
                &format!("at most {MAX_HOUSEKEEPING_CGROUPS} cgroups"),
            ));
        }
        let mut cgroups: Vec<ContainerCgroup> = Vec::new();
        for text in &texts {
            let cgroup = parse_one(text)?;
            if let Some(other) = cgroups.iter().find(|c| {
                c.relative().starts_with(cgroup.relative())
                    || cgroup.relative().starts_with(c.relative())
            }) {
                let reason = if *other == cgroup {
                    "named twice".to_string()
                } else {
                    format!("nested with {other} (name only the outer one)")
                };
                return Err(field_error(FIELD, text, &reason));
            }
            cgroups.push(cgroup);
        }
        Ok(Self {
            cgroups,
            other_writers,
        })
    }
}

fn parse_one(text: &str) -> Result<ContainerCgroup, ConfigError> {
    parse_cgroup_path(FIELD, text)
}

/// A cgroup outside Pinion's named in the config by its path from the
/// hierarchy's root (`/system.slice`); a bad one is an error of `field`
/// naming the text.
pub(super) fn parse_cgroup_path(
    field: &'static str,
    text: &str,
) -> Result<ContainerCgroup, ConfigError> {
    if text.len() > MAX_HOUSEKEEPING_PATH_LEN {
        return Err(field_error(
            field,
            text,
            &format!("longer than {MAX_HOUSEKEEPING_PATH_LEN} bytes"),
        ));
    }
    if !text.starts_with('/') {
        return Err(field_error(
            field,
            text,
            &"must be a path from the cgroup hierarchy's root, starting with '/' (e.g. /system.slice)",
        ));
    }
    if text.contains(':') {
        return Err(field_error(field, text, &"':' is not allowed"));
    }
    ContainerCgroup::resolve(text).map_err(|err| match err {
        pinion_host::cgroup::CgroupError::InvalidName { reason, .. } => {
            field_error(field, text, &reason)
        }
        other => field_error(field, text, &other),
    })
}

/// Whether `outer` is `inner` or one of its ancestors (both relative to the
/// same mount).
#[must_use]
pub fn contains(outer: &ContainerCgroup, inner: &std::path::Path) -> bool {
    inner.starts_with(outer.relative())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(cgroups: &[&str]) -> Result<HousekeepingConfig, ConfigError> {
        HousekeepingConfig::resolve(
            Some(HousekeepingFileConfig {
                cgroups: Some(cgroups.iter().map(ToString::to_string).collect()),
            }),
            None,
        )
    }

    fn refused(cgroups: &[&str]) -> (String, String) {
        match resolve(cgroups).expect_err("refused") {
            ConfigError::Field {
                field,
                value,
                reason,
            } => {
                assert_eq!(field, FIELD);
                (value, reason)
            }
            other => panic!("not a field error: {other}"),
        }
    }

    #[test]
    fn absent_keys_keep_nothing_and_repair() {
        let config = HousekeepingConfig::resolve(None, None).expect("valid");
        assert!(config.cgroups.is_empty());
        assert_eq!(config.other_writers, OtherWriters::Repair);
    }

    #[test]
    fn cgroups_are_kept_relative_to_the_mount_in_order() {
        let config = resolve(&["/system.slice", "/runtime.slice/containerd.service"]).expect("ok");
        let shown: Vec<String> = config.cgroups.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            ["/system.slice", "/runtime.slice/containerd.service"]
        );
        assert_eq!(
            config.cgroups[0].relative(),
            std::path::Path::new("system.slice")
        );
    }

    #[test]
    fn bad_paths_are_refused_naming_them() {
        for (bad, why) in [
            ("system.slice", "starting with '/'"),
            ("/", "root"),
            ("/a/../b", ".."),
            ("/a/./b", "'.'"),
            ("/a:b:c", "':'"),
            ("", "starting with '/'"),
        ] {
            let (value, reason) = refused(&[bad]);
            assert_eq!(value, bad);
            assert!(reason.contains(why), "{bad}: {reason}");
        }
        let long = format!("/{}", "a".repeat(MAX_HOUSEKEEPING_PATH_LEN));
        let (_, reason) = refused(&[&long]);
        assert!(reason.contains("longer than"), "{reason}");
    }

    #[test]
    fn duplicates_nesting_and_too_many_are_refused() {
        assert_eq!(
            refused(&["/system.slice", "/system.slice/"]).1,
            "named twice"
        );
        let (value, reason) = refused(&["/system.slice", "/system.slice/sshd.service"]);
        assert_eq!(value, "/system.slice/sshd.service");
        assert!(reason.contains("nested with /system.slice"), "{reason}");
        let many: Vec<String> = (0..=MAX_HOUSEKEEPING_CGROUPS)
            .map(|i| format!("/c{i}"))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(refused(&many).1.contains("at most 32"));
    }

    #[test]
    fn other_writers_takes_repair_or_report_and_names_anything_else() {
        let report = HousekeepingConfig::resolve(None, Some("report")).expect("ok");
        assert_eq!(report.other_writers, OtherWriters::Report);
        match HousekeepingConfig::resolve(None, Some("ignore")).expect_err("refused") {
            ConfigError::Field { field, value, .. } => {
                assert_eq!((field, value.as_str()), ("otherWriters", "ignore"));
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn containment_is_by_path_components() {
        let system = parse_one("/system.slice").expect("valid");
        assert!(contains(
            &system,
            std::path::Path::new("system.slice/pinion")
        ));
        assert!(contains(&system, std::path::Path::new("system.slice")));
        assert!(!contains(
            &system,
            std::path::Path::new("system.slice2/pinion")
        ));
    }
}
