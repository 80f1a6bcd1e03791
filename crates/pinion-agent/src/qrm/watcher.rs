//! The plugin watcher (spec `qrm.md` §3.1): Pinion's registration directory
//! is scanned at start and watched with inotify (the `notify` crate); every
//! socket that appears is registered, every socket that goes stops its
//! plugin. Names starting with `.` and anything that is not a socket are
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
        match event.kind {
            EventKind::Create(_) => {
                for path in event.paths.iter().filter(|p| is_plugin_socket(p)) {
                    register(&registry, path).await;
                }
            }
            EventKind::Remove(_) => {
                for path in &event.paths {
                    registry.stop_socket(path, "its socket was removed");
                }
            }
            _ => {}
        }
    }
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
