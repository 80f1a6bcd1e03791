//! The plugin watcher (spec `qrm.md` §3.1): Pinion's registration directory
//! is scanned at start and watched with inotify (the `notify` crate); every
//! socket that appears is registered, every socket that goes stops its
//! plugin. A socket renamed into the directory appears, one renamed out of
//! it goes (kubelet's fsnotify watcher reads a move-in as a creation). Names starting with `.` and anything that is not a socket are
//! ignored; sub-directories are watched too.

use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher as _};
use tokio::sync::{mpsc, watch};

use super::registry::Registry;

/// Why the directory cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("plugin registration directory {}: {source}", .dir.display())]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("watching plugin registration directory {}: {source}", .dir.display())]
    Watch { dir: PathBuf, source: notify::Error },
}

/// A running watch; dropping it stops the inotify watch.
pub struct DirWatch {
    _watcher: notify::RecommendedWatcher,
    events: mpsc::UnboundedReceiver<notify::Event>,
}

/// Creates `dir` (0750) if missing and starts watching it (before the first
/// scan, so no socket created in between is missed).
pub fn watch_dir(dir: &Path) -> Result<DirWatch, WatchError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
        .map_err(|source| WatchError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
    let (tx, events) = mpsc::unbounded_channel();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) => {
                let _ = tx.send(event);
            }
            Err(err) => tracing::warn!("plugin directory watch: {err}"),
        })
        .map_err(|source| WatchError::Watch {
            dir: dir.to_path_buf(),
            source,
        })?;
    watcher
        .watch(dir, RecursiveMode::Recursive)
        .map_err(|source| WatchError::Watch {
            dir: dir.to_path_buf(),
            source,
        })?;
    Ok(DirWatch {
        _watcher: watcher,
        events,
    })
}

/// Registers the sockets already in `dir`, then follows the watch until
/// `stop` turns true.
pub async fn run(
    dir: PathBuf,
    mut watch: DirWatch,
    registry: Arc<Registry>,
    mut stop: watch::Receiver<bool>,
) {
    for socket in sockets_in(&dir) {
        register(&registry, &socket).await;
    }
    loop {
        let event = tokio::select! {
            event = watch.events.recv() => match event {
                Some(event) => event,
                None => break,
            },
            _ = stop.changed() => break,
        };
        match change(&event) {
            Change::Created => {
                for path in event.paths.iter().filter(|p| is_plugin_socket(p)) {
                    register(&registry, path).await;
                }
            }
            Change::MovedIn => {
                for path in &event.paths {
                    moved_in(&registry, path).await;
                }
            }
            Change::Gone => {
                for path in &event.paths {
                    gone(&registry, path);
                }
            }
            Change::Renamed => {
                for path in &event.paths {
                    if std::fs::symlink_metadata(path).is_ok() {
                        moved_in(&registry, path).await;
                    } else {
                        gone(&registry, path);
                    }
                }
            }
            Change::None => {}
        }
    }
}

/// What a watch event means for the plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Its paths were created (a new directory's sockets come with their
    /// own events: the watch is recursive).
    Created,
    /// Its paths were moved in (inotify `IN_MOVED_TO`, which kubelet's
    /// fsnotify reports as a creation), a directory with its sockets.
    MovedIn,
    /// Its paths were removed, or moved out (`IN_MOVED_FROM`).
    Gone,
    /// A rename whose side is not said: each path is there or not.
    Renamed,
    None,
}

fn change(event: &notify::Event) -> Change {
    use notify::event::{ModifyKind, RenameMode};
    match event.kind {
        EventKind::Create(_) => Change::Created,
        EventKind::Modify(ModifyKind::Name(RenameMode::To)) => Change::MovedIn,
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(RenameMode::From)) => {
            Change::Gone
        }
        // inotify reports each side of a rename on its own too (`From`,
        // then `To`); `Both` repeats them.
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => Change::None,
        EventKind::Modify(ModifyKind::Name(_)) => Change::Renamed,
        _ => Change::None,
    }
}

/// A plugin socket moved in is registered; a directory moved in has its
/// sockets registered.
async fn moved_in(registry: &Registry, path: &Path) {
    if is_plugin_socket(path) {
        register(registry, path).await;
    } else if std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir()) {
        for socket in sockets_in(path) {
            register(registry, &socket).await;
        }
    }
}

/// A path that went (removed, or moved out): the plugins registered from
/// it, or from a socket under it (a directory), stop.
fn gone(registry: &Registry, path: &Path) {
    registry.stop_socket(path, "its socket was removed or moved away");
}

/// Registers the plugin on `socket`, trying a few times while its server
/// comes up (another server's socket file may exist from `bind(2)`, before
/// `listen(2)`; Pinion's own appear listening, `pinion_api::uds::listen`).
async fn register(registry: &Registry, socket: &Path) {
    let mut delay = Duration::from_millis(50);
    for attempt in 1..=5 {
        match registry.register_socket(socket).await {
            Ok(resource) => {
                tracing::debug!(%resource, socket = %socket.display(), attempt, "registered");
                return;
            }
            Err(err @ super::registry::RegisterError::Refused(_)) => {
                tracing::warn!(socket = %socket.display(), "plugin refused: {err}");
                return;
            }
            Err(err) if attempt == 5 => {
                tracing::warn!(socket = %socket.display(), "plugin registration failed: {err}");
            }
            Err(_) => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
}

fn is_plugin_socket(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with('.'));
    !hidden && std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_socket())
}

/// Every plugin socket under `dir` (recursively).
fn sockets_in(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push(path);
            } else if is_plugin_socket(&path) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}
