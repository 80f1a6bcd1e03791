//! Who may hand the agent a resource plugin (issue 27): a plugin decides
//! where containers run, so its socket must come from the agent's user or
//! root, as kubelet's root-only device-plugin directory ensures.
//!
//! The rule, exactly:
//!
//! * a **trusted uid** is root (0) or the agent's effective uid;
//! * a **directory plugins register from** (the plugin-watcher directory,
//!   the directory of the registration socket) is owned by a trusted uid
//!   and has neither the group- nor the other-write bit (`mode & 0o022 ==
//!   0`; the sticky bit does not help here: it lets anyone create a
//!   socket);
//! * each of its **parents** is owned by a trusted uid and, when group- or
//!   other-writable, has the sticky bit (`/tmp`, 1777: others may create
//!   entries there but not rename or remove the trusted child);
//! * a **symbolic link** on the way (as the path is given) is owned by a
//!   trusted uid (in a sticky directory its owner may replace it);
//! * a **plugin socket** is served by a process running as a trusted uid
//!   (`SO_PEERCRED`) and its file is owned by one.
//!
//! Group write counts as "others" whatever the group: whether its members
//! are trusted is not something Pinion can tell.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};

/// Why a directory is not trusted.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{} ({what}) is owned by uid {uid} (mode {mode:04o}): only root or the agent's uid {agent} may own it", .path.display())]
    Owner {
        path: PathBuf,
        what: &'static str,
        uid: u32,
        mode: u32,
        agent: u32,
    },
    #[error("{} ({what}) is writable by others (owner uid {uid}, mode {mode:04o}): {rule}", .path.display())]
    Writable {
        path: PathBuf,
        what: &'static str,
        uid: u32,
        mode: u32,
        rule: &'static str,
    },
    #[error("checking who may write {}: {operation} {}: {source}", .dir.display(), .path.display())]
    Io {
        dir: PathBuf,
        operation: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The agent's effective uid.
#[must_use]
pub fn agent_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Whether `uid` is trusted by an agent running as `agent`: root or itself.
#[must_use]
pub fn is_trusted(uid: u32, agent: u32) -> bool {
    uid == 0 || uid == agent
}

/// Where a path component sits, which decides the rule it follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The directory plugins register from.
    Dir,
    /// A parent of it.
    Parent,
    /// A symbolic link on the path as given.
    Link,
}

impl Place {
    fn what(self) -> &'static str {
        match self {
            Place::Dir => "the plugin registration directory",
            Place::Parent => "a parent of the plugin registration directory",
            Place::Link => "a symbolic link on the way to the plugin registration directory",
        }
    }
}

/// The verdict on one path component owned by `uid` with `mode` (the
/// whole `st_mode` or its permission bits) for an agent running as
/// `agent`: `None` when trusted, else the reason. Pure.
#[must_use]
pub fn verdict(place: Place, uid: u32, mode: u32, agent: u32) -> Option<Defect> {
    if !is_trusted(uid, agent) {
        return Some(Defect::Owner);
    }
    let others_write = mode & 0o022 != 0;
    let sticky = mode & 0o1000 != 0;
    match place {
        Place::Dir if others_write => Some(Defect::Writable(
            "a registration directory must not be group- or other-writable, sticky or not",
        )),
        Place::Parent if others_write && !sticky => Some(Defect::Writable(
            "a group- or other-writable parent needs the sticky bit",
        )),
        _ => None,
    }
}

/// What [`verdict`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    Owner,
    Writable(&'static str),
}

/// Checks that nobody but root and the agent (uid `agent`) can put a
/// socket into `dir` or swap `dir` (or a parent) for another: the rule of
/// the module documentation, on the path as given and on its canonical
/// form.
pub fn check_dir(dir: &Path, agent: u32) -> Result<(), TrustError> {
    let io = |operation, path: &Path| {
        let dir = dir.to_path_buf();
        let path = path.to_path_buf();
        move |source| TrustError::Io {
            dir,
            operation,
            path,
            source,
        }
    };
    let absolute = std::path::absolute(dir).map_err(io("resolving", dir))?;
    // Symbolic links on the way, as the path is given.
    let mut prefix = PathBuf::new();
    for component in absolute.components() {
        prefix.push(component);
        let meta = std::fs::symlink_metadata(&prefix).map_err(io("lstat", &prefix))?;
        if meta.file_type().is_symlink() {
            judge(&prefix, Place::Link, &meta, agent)?;
        }
    }
    let canonical = std::fs::canonicalize(&absolute).map_err(io("resolving", &absolute))?;
    let mut prefix = PathBuf::new();
    let components: Vec<Component<'_>> = canonical.components().collect();
    for (index, component) in components.iter().enumerate() {
        prefix.push(component);
        let meta = std::fs::symlink_metadata(&prefix).map_err(io("lstat", &prefix))?;
        let place = if index + 1 == components.len() {
            Place::Dir
        } else {
            Place::Parent
        };
        judge(&prefix, place, &meta, agent)?;
    }
    Ok(())
}

fn judge(
    path: &Path,
    place: Place,
    meta: &std::fs::Metadata,
    agent: u32,
) -> Result<(), TrustError> {
    let (uid, mode) = (meta.uid(), meta.mode() & 0o7777);
    match verdict(place, uid, mode, agent) {
        None => Ok(()),
        Some(Defect::Owner) => Err(TrustError::Owner {
            path: path.to_path_buf(),
            what: place.what(),
            uid,
            mode,
            agent,
        }),
        Some(Defect::Writable(rule)) => Err(TrustError::Writable {
            path: path.to_path_buf(),
            what: place.what(),
            uid,
            mode,
            rule,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    const AGENT: u32 = 1000;
    const NOBODY: u32 = 65534;

    #[test]
    fn the_rule_by_owner_mode_and_place() {
        let cases = [
            (Place::Dir, 0, 0o750, None),
            (Place::Dir, AGENT, 0o700, None),
            (Place::Dir, NOBODY, 0o700, Some(Defect::Owner)),
            (Place::Parent, NOBODY, 0o755, Some(Defect::Owner)),
            (Place::Link, NOBODY, 0o777, Some(Defect::Owner)),
            (Place::Link, 0, 0o777, None),
            (Place::Parent, 0, 0o755, None),
            (Place::Parent, 0, 0o1777, None),
            (Place::Parent, 0, 0o1770, None),
        ];
        for (place, uid, mode, expected) in cases {
            assert_eq!(
                verdict(place, uid, mode, AGENT),
                expected,
                "{place:?} {uid} {mode:o}"
            );
        }
        for (place, mode) in [
            (Place::Dir, 0o777),
            (Place::Dir, 0o1777),
            (Place::Dir, 0o770),
            (Place::Dir, 0o752),
            (Place::Parent, 0o777),
            (Place::Parent, 0o775),
        ] {
            assert!(
                matches!(verdict(place, 0, mode, AGENT), Some(Defect::Writable(_))),
                "{place:?} {mode:o}"
            );
        }
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    /// Regression (issue 27, item 5): a world-writable registration
    /// directory (or parent) was accepted without a word.
    #[test]
    fn regression_a_directory_or_parent_writable_by_others_is_refused() {
        let root = tempfile::tempdir().expect("tempdir");
        let parent = root.path().join("state");
        let dir = parent.join("plugins_registry");
        std::fs::create_dir_all(&dir).expect("dirs");
        chmod(&parent, 0o755);
        chmod(&dir, 0o750);
        let me = agent_uid();
        check_dir(&dir, me).expect("a private directory is trusted");

        chmod(&dir, 0o777);
        let err = check_dir(&dir, me).expect_err("0777");
        assert!(
            matches!(err, TrustError::Writable { mode: 0o777, .. }),
            "{err}"
        );
        assert!(err.to_string().starts_with(&format!(
            "{} (the plugin registration directory) is writable by others (owner uid {me}, mode 0777)",
            dir.display()
        )), "{err}");
        chmod(&dir, 0o1777);
        assert!(
            check_dir(&dir, me).is_err(),
            "sticky does not protect the directory itself"
        );
        chmod(&dir, 0o750);

        chmod(&parent, 0o777);
        let err = check_dir(&dir, me).expect_err("parent 0777");
        assert!(
            matches!(err, TrustError::Writable { ref path, .. } if *path == parent),
            "{err}"
        );
        chmod(&parent, 0o1777);
        check_dir(&dir, me).expect("a sticky parent protects its children");
        chmod(&parent, 0o755);

        // Through a symbolic link: the target's path is judged.
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).expect("symlink");
        check_dir(&link, me).expect("a trusted link to a trusted directory");
        chmod(&dir, 0o777);
        assert!(
            check_dir(&link, me).is_err(),
            "the link's target is writable by others"
        );
    }

    /// Regression (issue 27, item 5): a registration directory owned by
    /// another user was accepted. Needs root (to chown).
    #[test]
    fn regression_a_directory_owned_by_another_user_is_refused() {
        if agent_uid() != 0 {
            println!("skipped: chown needs root (uid {})", agent_uid());
            return;
        }
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("plugins_registry");
        std::fs::create_dir(&dir).expect("dir");
        chmod(&dir, 0o700);
        std::os::unix::fs::chown(&dir, Some(NOBODY), None).expect("chown");
        let err = check_dir(&dir, 0).expect_err("owned by nobody");
        assert_eq!(
            err.to_string(),
            format!(
                "{} (the plugin registration directory) is owned by uid {NOBODY} (mode 0700): only root or the agent's uid 0 may own it",
                dir.display()
            )
        );
        // Not even as the agent's own directory through another's link.
        let mine = root.path().join("mine");
        std::fs::create_dir(&mine).expect("dir");
        chmod(&mine, 0o700);
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&mine, &link).expect("symlink");
        std::os::unix::fs::lchown(&link, Some(NOBODY), None).expect("lchown");
        let err = check_dir(&link, 0).expect_err("a link owned by nobody");
        assert!(
            matches!(err, TrustError::Owner { uid: NOBODY, .. }),
            "{err}"
        );
    }
}
