//! The controller's thread and the handle front-ends use to reach it.
//!
//! The controller runs on one dedicated OS thread (its work is blocking
//! file I/O: fsync of the checkpoint, cgroupfs writes), receiving
//! [`Command`]s from a bounded channel and answering each on its own
//! one-shot channel. Snapshots and the shared pool are `watch` channels, so
//! readers never wait for the controller.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread::JoinHandle;

use pinion_core::CpuSet;
use tokio::sync::{mpsc, oneshot, watch};

use super::{
    AdmitRequest, Admitted, ControlError, Controller, Key, ReconcileReport, Released, Snapshot,
};

/// How many commands may wait for the controller.
const QUEUE: usize = 1024;

type Reply<T> = oneshot::Sender<Result<T, ControlError>>;

/// A typed request to the controller.
#[derive(Debug)]
pub enum Command {
    /// Admit one container of a pod.
    Admit {
        request: AdmitRequest,
        reply: Reply<Admitted>,
    },
    /// Release one container (`Some`) or a whole pod (`None`).
    Release {
        pod: String,
        container: Option<String>,
        reply: Reply<Released>,
    },
    /// Agree with the runtime's list of running containers (NRI Synchronize).
    SyncRuntime {
        running: BTreeSet<Key>,
        reply: Reply<Released>,
    },
    /// Run a reconcile pass now.
    Reconcile { reply: Reply<ReconcileReport> },
    /// Stop after the commands already queued.
    Shutdown,
}

/// A cloneable handle to the controller.
#[derive(Debug, Clone)]
pub struct ControllerHandle {
    commands: mpsc::Sender<Command>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    shared_pool: watch::Receiver<CpuSet>,
}

/// Starts the controller thread.
pub fn spawn(controller: Controller) -> std::io::Result<(ControllerHandle, JoinHandle<()>)> {
    let (commands, receiver) = mpsc::channel(QUEUE);
    let handle = ControllerHandle {
        commands,
        snapshots: controller.subscribe_snapshots(),
        shared_pool: controller.subscribe_shared_pool(),
    };
    let thread = std::thread::Builder::new()
        .name("pinion-controller".to_string())
        .spawn(move || run(controller, receiver))?;
    Ok((handle, thread))
}

fn run(mut controller: Controller, mut receiver: mpsc::Receiver<Command>) {
    while let Some(command) = receiver.blocking_recv() {
        match command {
            Command::Admit { request, reply } => {
                let span = tracing::info_span!("admit", pod = %request.pod.uid, container = %request.container);
                let _guard = span.enter();
                let _ = reply.send(controller.admit(&request));
            }
            Command::Release {
                pod,
                container,
                reply,
            } => {
                let span = tracing::info_span!("release", pod = %pod, container = ?container);
                let _guard = span.enter();
                let _ = reply.send(controller.release(&pod, container.as_deref()));
            }
            Command::SyncRuntime { running, reply } => {
                let _ = reply.send(controller.sync_runtime(&running));
            }
            Command::Reconcile { reply } => {
                let _ = reply.send(Ok(controller.reconcile()));
            }
            Command::Shutdown => break,
        }
    }
    tracing::debug!("controller stopped");
}

impl ControllerHandle {
    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, ControlError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(make(reply))
            .await
            .map_err(|_| ControlError::Stopped)?;
        answer.await.map_err(|_| ControlError::Stopped)?
    }

    /// Admits a container; answers once the decision is durable and placed.
    pub async fn admit(&self, request: AdmitRequest) -> Result<Admitted, ControlError> {
        self.ask(|reply| Command::Admit { request, reply }).await
    }

    /// Releases a container, or every container of the pod with `None`.
    pub async fn release(
        &self,
        pod: String,
        container: Option<String>,
    ) -> Result<Released, ControlError> {
        self.ask(|reply| Command::Release {
            pod,
            container,
            reply,
        })
        .await
    }

    /// Releases runtime-placed containers not in `running` and records the
    /// running ones (see [`Controller::sync_runtime`]).
    pub async fn sync_runtime(&self, running: BTreeSet<Key>) -> Result<Released, ControlError> {
        self.ask(|reply| Command::SyncRuntime { running, reply })
            .await
    }

    /// Runs a reconcile pass.
    pub async fn reconcile(&self) -> Result<ReconcileReport, ControlError> {
        self.ask(|reply| Command::Reconcile { reply }).await
    }

    /// Asks the controller to stop.
    pub async fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown).await;
    }

    /// The latest snapshot (assignments, workloads, metrics).
    #[must_use]
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshots.borrow().clone()
    }

    /// A receiver that changes whenever the shared pool does.
    #[must_use]
    pub fn shared_pool(&self) -> watch::Receiver<CpuSet> {
        self.shared_pool.clone()
    }
}
