//! The machine's host name: `<root>/proc/sys/kernel/hostname` (the name of
//! the reader's UTS namespace; `/` for this machine).

use std::path::Path;

use crate::bounded_read::{read_text, MAX_ATTRIBUTE};

/// The host name under `root`, trimmed; `None` when the file cannot be read
/// (a FIFO or a device in its place included: never a hang), is larger
/// than 1 MiB, or is empty.
#[must_use]
pub fn hostname(root: &Path) -> Option<String> {
    let text = read_text(&root.join("proc/sys/kernel/hostname"), MAX_ATTRIBUTE).ok()?;
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::hostname;
    use crate::bounded_read::testing::{mkfifo, without_hanging};

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

    #[test]
    fn regression_fifo_as_hostname_hung_the_reader() {
        let dir = tempfile::tempdir().expect("tempdir");
        mkfifo(&dir.path().join("proc/sys/kernel/hostname"));
        let root = dir.path().to_path_buf();
        assert_eq!(without_hanging("hostname", move || hostname(&root)), None);
    }
}
