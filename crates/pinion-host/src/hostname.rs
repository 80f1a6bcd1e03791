//! The machine's host name: `<root>/proc/sys/kernel/hostname` (the name of
//! the reader's UTS namespace; `/` for this machine).

use std::path::Path;

/// The host name under `root`, trimmed; `None` when the file cannot be read
/// or is empty.
#[must_use]
pub fn hostname(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join("proc/sys/kernel/hostname")).ok()?;
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::hostname;

    #[test]
    fn the_host_name_is_read_under_the_root_and_trimmed() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(hostname(dir.path()), None);
        let file = dir.path().join("proc/sys/kernel");
        std::fs::create_dir_all(&file).expect("mkdir");
        std::fs::write(file.join("hostname"), "worker-1\n").expect("write");
        assert_eq!(hostname(dir.path()).as_deref(), Some("worker-1"));
        std::fs::write(file.join("hostname"), "\n").expect("write");
        assert_eq!(hostname(dir.path()), None);
    }
}
