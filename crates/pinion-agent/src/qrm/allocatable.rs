//! What the plugins can hand out: their `GetTopologyAwareAllocatableResources`
//! answers, merged and kept for podresources' `GetAllocatableResources`
//! (spec `qrm.md` §6.4: the kubelet fork and katalyst's ORM merge them into
//! the answer's `resources`; katalyst's node reporter builds the node's
//! topology from them). Refreshed once per reconcile period, so that a
//! podresources call never waits for a plugin.

use std::collections::BTreeMap;
use std::sync::Arc;

use pinion_api::resourceplugin as rp;
use tokio::sync::watch;

use super::{CallError, Qrm};

/// Resource name → what the plugin serving it says is allocatable.
pub type PluginAllocatable = BTreeMap<String, rp::AllocatableTopologyAwareResource>;

/// The sending side, kept by the manager.
pub(super) fn channel() -> watch::Sender<Arc<PluginAllocatable>> {
    watch::channel(Arc::new(PluginAllocatable::new())).0
}

impl Qrm {
    /// The plugins' allocatable resources as last refreshed.
    #[must_use]
    pub fn plugin_allocatable(&self) -> watch::Receiver<Arc<PluginAllocatable>> {
        self.allocatable.subscribe()
    }

    /// Asks every active plugin (in resource order; a later answer for the
    /// same name replaces an earlier one, as the fork's merge does). A
    /// plugin that does not implement the call, or fails, adds nothing this
    /// round.
    pub async fn refresh_allocatable(&self) {
        let mut merged = PluginAllocatable::new();
        for plugin in self.registry.all_active() {
            let result = self
                .registry
                .call(
                    &plugin,
                    "GetTopologyAwareAllocatableResources",
                    |mut client, timeout| async move {
                        client
                            .get_topology_aware_allocatable_resources(
                                rp::GetTopologyAwareAllocatableResourcesRequest {},
                                timeout,
                            )
                            .await
                    },
                )
                .await;
            match result {
                Ok(answer) => {
                    for entry in answer.allocatable_resources {
                        if let Some(value) = entry.value {
                            merged.insert(entry.key, value);
                        }
                    }
                }
                Err(CallError::Unsupported { .. }) => {}
                Err(err) => tracing::debug!(resource = %plugin.resource, "allocatable: {err}"),
            }
        }
        self.allocatable.send_if_modified(|current| {
            if **current == merged {
                return false;
            }
            *current = Arc::new(merged);
            true
        });
    }
}
