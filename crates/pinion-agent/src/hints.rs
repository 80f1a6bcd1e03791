//! Topology hints of the providers outside the engine (resource plugins,
//! device managers), gathered *before* an admission reaches the controller:
//! asking them may take a network round trip, and the controller thread
//! never waits on I/O other than its own durable write. The answers travel
//! with the admission command as [`GatheredHints`], which the engine merges
//! with the CPU manager's own hints through the Topology Manager.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use pinion_core::pod::Pod;
use pinion_core::topomgr::provider::{HintProvider, ResourceHints};
use pinion_core::topomgr::{ProviderHints, Scope};
use tokio::task::JoinSet;

/// The hints of every outside provider for one admission, in the scope the
/// Topology Manager asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatheredHints {
    /// Pod scope: `GetPodTopologyHints`.
    pub pod: Option<ResourceHints>,
    /// Container scope: `GetTopologyHints`.
    pub container: Option<ResourceHints>,
}

impl HintProvider for GatheredHints {
    fn container_hints(&self, _pod: &Pod, _container: &str) -> ProviderHints {
        self.container.clone()
    }

    fn pod_hints(&self, _pod: &Pod) -> ProviderHints {
        self.pod.clone()
    }
}

/// A source's answer: resource → hints, or why it could not answer.
pub type HintFuture = Pin<Box<dyn Future<Output = Result<ResourceHints, String>> + Send>>;

/// A provider of topology hints that lives outside the engine.
pub trait HintSource: Send + Sync {
    /// The provider's name, for errors and logs.
    fn name(&self) -> String;
    /// Hints for `container` of `pod` (`None`: for the whole pod, pod scope).
    fn hints(&self, pod: Arc<Pod>, container: Option<String>) -> HintFuture;
}

/// Why hints could not be gathered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HintError {
    #[error("hint provider {source_name} failed: {reason}")]
    Failed { source_name: String, reason: String },
    #[error("hint providers {pending:?} did not answer within {deadline:?}")]
    Deadline {
        pending: Vec<String>,
        deadline: Duration,
    },
}

/// Asks every source, concurrently, within one deadline.
#[derive(Clone)]
pub struct HintGatherer {
    sources: Vec<Arc<dyn HintSource>>,
    scope: Scope,
    deadline: Duration,
}

impl std::fmt::Debug for HintGatherer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.sources.iter().map(|s| s.name()).collect();
        f.debug_struct("HintGatherer")
            .field("sources", &names)
            .field("scope", &self.scope)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl HintGatherer {
    /// No outside providers: every admission merges the CPU manager's hints
    /// alone.
    #[must_use]
    pub fn none() -> Self {
        Self::new(Vec::new(), Scope::Container, Duration::from_secs(10))
    }

    /// Gathers from `sources` in the Topology Manager's `scope`, giving up
    /// after `deadline`.
    #[must_use]
    pub fn new(sources: Vec<Arc<dyn HintSource>>, scope: Scope, deadline: Duration) -> Self {
        Self {
            sources,
            scope,
            deadline,
        }
    }

    /// The hints of every source for `container` of `pod`. A source that
    /// fails or misses the deadline fails the gathering (the admission then
    /// fails closed rather than ignoring a resource the pod needs).
    pub async fn gather(&self, pod: &Pod, container: &str) -> Result<GatheredHints, HintError> {
        // The Topology Manager's `none` policy collects no hints (kubelet's
        // none scope): no provider is asked.
        if self.sources.is_empty() || self.scope == Scope::None {
            return Ok(GatheredHints::default());
        }
        let pod = Arc::new(pod.clone());
        let asked = (self.scope != Scope::Pod).then(|| container.to_owned());
        if let [source] = self.sources.as_slice() {
            // One provider: asked right here, no task to spawn and join.
            let name = source.name();
            let answer = tokio::time::timeout(self.deadline, source.hints(pod, asked))
                .await
                .map_err(|_| HintError::Deadline {
                    pending: vec![name.clone()],
                    deadline: self.deadline,
                })?;
            let merged = answer.map_err(|reason| HintError::Failed {
                source_name: name,
                reason,
            })?;
            return Ok(self.scoped(merged));
        }
        let mut tasks = JoinSet::new();
        for source in &self.sources {
            let name = source.name();
            let answer = source.hints(Arc::clone(&pod), asked.clone());
            tasks.spawn(async move { (name, answer.await) });
        }
        let mut merged = ResourceHints::new();
        let mut pending: Vec<String> = self.sources.iter().map(|s| s.name()).collect();
        let collect = async {
            while let Some(joined) = tasks.join_next().await {
                let Ok((name, answer)) = joined else { continue };
                pending.retain(|p| *p != name);
                let hints = answer.map_err(|reason| HintError::Failed {
                    source_name: name.clone(),
                    reason,
                })?;
                for (resource, list) in hints {
                    if merged.contains_key(&resource) {
                        tracing::warn!(source = %name, %resource, "a second provider answered for a resource; its hints are ignored");
                        continue;
                    }
                    merged.insert(resource, list);
                }
            }
            Ok::<(), HintError>(())
        };
        let outcome = tokio::time::timeout(self.deadline, collect).await;
        match outcome {
            Ok(result) => result?,
            Err(_) => {
                tasks.abort_all();
                return Err(HintError::Deadline {
                    pending,
                    deadline: self.deadline,
                });
            }
        }
        Ok(self.scoped(merged))
    }

    /// `merged` as the hints of the scope's level.
    fn scoped(&self, merged: ResourceHints) -> GatheredHints {
        match self.scope {
            Scope::Pod => GatheredHints {
                pod: Some(merged),
                container: None,
            },
            Scope::Container | Scope::None => GatheredHints {
                pod: None,
                container: Some(merged),
            },
        }
    }
}
