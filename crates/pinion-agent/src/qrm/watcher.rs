//! The plugin watcher (spec `qrm.md` §3.1): Pinion's registration directory
//! is scanned at start and watched with inotify (the `notify` crate); every
//! socket that appears is registered, every socket that goes stops its
//! plugin. A socket renamed into the directory appears, one renamed out of
//! it goes (kubelet's fsnotify watcher reads a move-in as a creation). Names starting with `.` and anything that is not a socket are
//! ignored; sub-directories are watched too. The registration socket's
//! directory is watched for removals only ([`follow_removals`]): a plugin
//! registered with `Registration.Register` stops when its socket goes.
//!
//! Each socket registers on its own task, as kubelet's plugin manager
//! registers each socket asynchronously: a plugin slow to answer (or never
//! answering) holds up neither another plugin's registration nor the
//! handling of removals. At most one registration per socket path is under
//! way ([`Pending`]), at most [`MAX_REGISTERING`] talk to their plugins at
//! once; the socket's removal cancels it before its plugin is stopped.

use std::collections::BTreeMap;
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher as _};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

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

impl DirWatch {
    /// The next event, or `None` once the watch ended or `stop` changed.
    async fn next(&mut self, stop: &mut watch::Receiver<bool>) -> Option<notify::Event> {
        tokio::select! {
            event = self.events.recv() => event,
            _ = stop.changed() => None,
        }
    }
}

/// Creates `dir` (0750) if missing and starts watching it (before the first
/// scan, so no socket created in between is missed).
pub fn watch_dir(dir: &Path) -> Result<DirWatch, WatchError> {
    watch_dir_with(dir, RecursiveMode::Recursive)
}

/// Watches the directory of the registration socket, whose plugin sockets
/// come and go with `Registration.Register` ([`follow_removals`]): its
/// own entries only.
pub fn watch_socket_dir(dir: &Path) -> Result<DirWatch, WatchError> {
    watch_dir_with(dir, RecursiveMode::NonRecursive)
}

fn watch_dir_with(dir: &Path, mode: RecursiveMode) -> Result<DirWatch, WatchError> {
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
        .watch(dir, mode)
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
/// `stop` turns true (pending registrations are cancelled then).
pub async fn run(
    dir: PathBuf,
    mut watch: DirWatch,
    registry: Arc<Registry>,
    mut stop: watch::Receiver<bool>,
) {
    let mut pending = Pending::new(dir.clone(), registry);
    for socket in sockets_in(&dir) {
        pending.register(&socket);
    }
    loop {
        let Some(event) = watch.next(&mut stop).await else {
            break;
        };
        match change(&event) {
            Change::Created => {
                for path in event.paths.iter().filter(|p| is_plugin_socket(p)) {
                    pending.register(path);
                }
            }
            Change::MovedIn => {
                for path in &event.paths {
                    pending.moved_in(path);
                }
            }
            Change::Gone => {
                for path in &event.paths {
                    pending.gone(path).await;
                }
            }
            Change::Renamed => {
                for path in &event.paths {
                    if std::fs::symlink_metadata(path).is_ok() {
                        pending.moved_in(path);
                    } else {
                        pending.gone(path).await;
                    }
                }
            }
            Change::None => {}
        }
    }
    pending.cancel_all().await;
}

/// Stops each plugin registered with `Registration.Register` whose socket
/// leaves the registration socket's directory (removed or moved away), as
/// the plugin watcher stops one whose socket leaves its directory: the
/// socket of a plugin that exits goes with it, and until now such a plugin
/// stayed active for good, each `RemovePod` of a departed pod retried on
/// it. Sockets that appear register only through `Register`. A socket
/// back in place by the time its removal is read (a plugin restarting:
/// unlink, bind, `Register` again) is not stopped: its entry reaches
/// whatever listens there, checked at each connection.
pub async fn follow_removals(
    dir: PathBuf,
    mut watch: DirWatch,
    registry: Arc<Registry>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let Some(event) = watch.next(&mut stop).await else {
            break;
        };
        if !matches!(change(&event), Change::Gone | Change::Renamed) {
            continue;
        }
        for path in &event.paths {
            if path.starts_with(&dir) && std::fs::symlink_metadata(path).is_err() {
                registry.stop_socket(path, "its socket was removed or moved away");
            }
        }
    }
}

/// The registrations under way, one task per socket path (a socket seen
/// again while its registration runs is not registered twice; the task
/// retries and reaches whatever listens there).
struct Pending {
    dir: PathBuf,
    registry: Arc<Registry>,
    tasks: BTreeMap<PathBuf, JoinHandle<()>>,
    /// At most [`MAX_REGISTERING`] registrations talk to their plugins at
    /// once (the directory may fill with sockets nobody answers on).
    registering: Arc<tokio::sync::Semaphore>,
}

/// Registrations that talk to their plugins at once; more wait their turn.
pub const MAX_REGISTERING: usize = 16;

impl Pending {
    fn new(dir: PathBuf, registry: Arc<Registry>) -> Self {
        Self {
            dir,
            registry,
            tasks: BTreeMap::new(),
            registering: Arc::new(tokio::sync::Semaphore::new(MAX_REGISTERING)),
        }
    }

    /// Starts registering the plugin on `socket`, unless that is under
    /// way already.
    fn register(&mut self, socket: &Path) {
        self.tasks.retain(|_, task| !task.is_finished());
        if self.tasks.contains_key(socket) {
            tracing::debug!(socket = %socket.display(), "registration under way already");
            return;
        }
        let registry = Arc::clone(&self.registry);
        let dir = self.dir.clone();
        let path = socket.to_path_buf();
        let registering = Arc::clone(&self.registering);
        let task = tokio::spawn(async move {
            // Never closed: the permit always comes.
            let _turn = registering.acquire_owned().await;
            register(&registry, &path, &dir).await;
        });
        self.tasks.insert(socket.to_path_buf(), task);
    }

    /// A plugin socket moved in is registered; a directory moved in has
    /// its sockets registered.
    fn moved_in(&mut self, path: &Path) {
        if is_plugin_socket(path) {
            self.register(path);
        } else if std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir()) {
            for socket in sockets_in(path) {
                self.register(&socket);
            }
        }
    }

    /// A path that went (removed, or moved out): its registration under
    /// way, or those of sockets under it (a directory), are cancelled and
    /// have ended (none can make its plugin active afterwards); then the
    /// plugins registered from it stop.
    async fn gone(&mut self, path: &Path) {
        let cancelled: Vec<PathBuf> = self
            .tasks
            .keys()
            .filter(|socket| socket.starts_with(path))
            .cloned()
            .collect();
        for socket in cancelled {
            if let Some(task) = self.tasks.remove(&socket) {
                task.abort();
                if task.await.is_err_and(|err| err.is_cancelled()) {
                    tracing::debug!(socket = %socket.display(), "registration cancelled: the socket went");
                }
            }
        }
        self.registry
            .stop_socket(path, "its socket was removed or moved away");
    }

    /// Cancels every registration under way.
    async fn cancel_all(&mut self) {
        for (_, task) in std::mem::take(&mut self.tasks) {
            task.abort();
            let _ = task.await;
        }
    }
}

/// Registers the plugin on `socket` (found in the plugin directory `dir`),
/// trying a few times while its server comes up (another server's socket
/// file may exist from `bind(2)`, before `listen(2)`; Pinion's own appear
/// listening, `pinion_api::uds::listen`).
async fn register(registry: &Registry, socket: &Path, dir: &Path) {
    let mut delay = Duration::from_millis(50);
    for attempt in 1..=5 {
        match registry.register_socket_within(socket, dir).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Hunt D2: registrations run on their own tasks now; the same socket
    /// seen twice (the start-up scan and its creation event, a plugin
    /// re-creating its socket) has one registration under way, and the
    /// socket's removal cancels it (it has ended when `gone` returns).
    #[tokio::test]
    async fn regression_a_socket_has_one_registration_at_a_time_and_its_removal_cancels_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("p.sock");
        // Listening but never accepting: each try waits for `GetInfo`.
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let registry = Arc::new(Registry::new(Duration::from_secs(10)));
        let mut pending = Pending::new(dir.path().to_path_buf(), Arc::clone(&registry));
        pending.register(&socket);
        let first = pending.tasks[&socket].id();
        pending.register(&socket);
        assert_eq!(pending.tasks.len(), 1, "one registration per socket");
        assert_eq!(
            pending.tasks[&socket].id(),
            first,
            "the registration under way goes on, no second one starts"
        );
        let other = dir.path().join("q.sock");
        let _other = std::os::unix::net::UnixListener::bind(&other).expect("bind");
        pending.register(&other);
        assert_eq!(pending.tasks.len(), 2);
        pending.gone(&socket).await;
        assert_eq!(
            pending.tasks.keys().collect::<Vec<_>>(),
            vec![&other],
            "the removed socket's registration is cancelled, the other goes on"
        );
        pending.cancel_all().await;
        assert!(pending.tasks.is_empty());
        assert!(registry.views().is_empty());
    }
}
