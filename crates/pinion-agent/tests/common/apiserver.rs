//! A stand-in API server for the agent's Kubernetes clients (included with
//! `#[path]` by `nrt_publish.rs`, `node_status.rs` and `qrm_nri.rs`): a
//! small hyper server answers the calls the agent makes and records every
//! request, so these tests can set failures, hangs and the objects it holds
//! (the real control plane is `scripts/e2e-cluster.sh`'s). The agent's
//! client is the real `kube` client.
//!
//! It answers:
//! * `GET /api/v1/nodes/NODE`: the Node it holds (name, UID, kubelet's
//!   status, Pinion's `managedFields` entry);
//! * `PATCH` of the NodeResourceTopology object: the body back;
//! * `PATCH /api/v1/nodes/NODE/status` with a server-side apply: a model
//!   of what the API server does for a field manager that is the only
//!   owner of its keys — the applied keys of `status.capacity` and
//!   `status.allocatable` are set, the keys it applied before and no
//!   longer does are removed, its `managedFields` entry lists what it owns.
//!   Other patch types are refused (415), as the agent sends none;
//! * `GET /api/v1/pods` (the node's pods' reflector): the pods it holds as
//!   a `PodList`; a watch (`watch=true`) is accepted and never answered, as
//!   a real watch with no changes.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

pub const NODE: &str = "worker-1";
pub const NODE_UID: &str = "6f1c1a52-node-uid";
pub const NODE_STATUS_PATH: &str = "/api/v1/nodes/worker-1/status";
const NODE_PATH: &str = "/api/v1/nodes/worker-1";
const PODS_PATH: &str = "/api/v1/pods";
const NRT_PATH: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-1";

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: Value,
}

/// The server's state; tests set the knobs and read what was asked.
pub struct ApiServer {
    pub requests: Mutex<Vec<Recorded>>,
    /// Answer this many of the next PATCHes with 500.
    pub failures: Mutex<usize>,
    /// Never answer a PATCH (a hung API server).
    pub hang: Mutex<bool>,
    /// Never answer this many of the next PATCHes (a server that hangs,
    /// then recovers).
    pub hang_next: Mutex<usize>,
    /// The Node, as `GET` answers it.
    pub node: Mutex<Value>,
    /// Refuse the `GET` of the Node with this status instead: 404 (there
    /// is none, a standalone machine) or 403 (no `nodes` `get` rule).
    pub node_refused: Mutex<Option<u16>>,
    /// The pods a list of pods answers.
    pub pods: Mutex<Vec<Value>>,
    /// The keys of `status.capacity` / `status.allocatable` each field
    /// manager's apply owns (by manager).
    owned: Mutex<std::collections::BTreeMap<String, BTreeSet<String>>>,
}

impl Default for ApiServer {
    fn default() -> Self {
        let kubelets = json!({
            "cpu": "8", "memory": "16Gi", "pods": "110",
            "hugepages-2Mi": "0", "ephemeral-storage": "100Gi",
        });
        Self {
            requests: Mutex::default(),
            failures: Mutex::default(),
            hang: Mutex::default(),
            hang_next: Mutex::default(),
            node_refused: Mutex::default(),
            node: Mutex::new(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": NODE, "uid": NODE_UID},
                "status": {"capacity": kubelets.clone(), "allocatable": kubelets},
            })),
            owned: Mutex::default(),
            pods: Mutex::default(),
        }
    }
}

impl ApiServer {
    /// Every PATCH, in order.
    pub fn patches(&self) -> Vec<Recorded> {
        self.of(|r| r.method == "PATCH")
    }

    /// How many times the Node was read (`GET`).
    pub fn node_gets(&self) -> usize {
        self.of(|r| r.method == "GET" && r.path == NODE_PATH).len()
    }

    /// The PATCHes of the Node's status, in order.
    pub fn status_patches(&self) -> Vec<Recorded> {
        self.of(|r| r.method == "PATCH" && r.path == NODE_STATUS_PATH)
    }

    /// The recorded requests that `keep` keeps.
    pub fn of(&self, keep: impl Fn(&Recorded) -> bool) -> Vec<Recorded> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| keep(r))
            .cloned()
            .collect()
    }

    /// The Node's `status.<map>`.
    pub fn status(&self, map: &str) -> Value {
        self.node.lock().unwrap()["status"][map].clone()
    }

    /// Pretends a field manager already owns `keys` (an earlier agent run),
    /// with `quantity` in both maps.
    pub fn owned_before(&self, manager: &str, keys: &[&str], quantity: &str) {
        let mut node = self.node.lock().unwrap();
        for key in keys {
            for map in ["capacity", "allocatable"] {
                node["status"][map][*key] = json!(quantity);
            }
        }
        let mut owned = self.owned.lock().unwrap();
        let entry = owned.entry(manager.to_string()).or_default();
        entry.extend(keys.iter().map(|k| (*k).to_string()));
        set_managed_fields(&mut node, &owned);
    }

    /// What kubelet does when it registers a recreated node
    /// (`reconcileExtendedResource`): every extended resource (a name with
    /// a `/`) zeroed in both maps, through an update that takes those
    /// fields over from whoever owned them.
    pub fn kubelet_zeroes_extended_resources(&self) {
        let mut node = self.node.lock().unwrap();
        let keys: Vec<String> = node["status"]["capacity"]
            .as_object()
            .map(|m| m.keys().filter(|k| k.contains('/')).cloned().collect())
            .unwrap_or_default();
        for key in &keys {
            node["status"]["capacity"][key] = json!("0");
            node["status"]["allocatable"][key] = json!("0");
        }
        let mut owned = self.owned.lock().unwrap();
        for set in owned.values_mut() {
            set.retain(|k| !keys.contains(k));
        }
        set_managed_fields(&mut node, &owned);
    }

    fn answer(&self, request: Recorded) -> (StatusCode, Value) {
        let answer = match (request.method.as_str(), request.path.as_str()) {
            ("GET", NODE_PATH) if self.node_refused.lock().unwrap().is_some() => {
                match *self.node_refused.lock().unwrap() {
                    Some(404) => (
                        StatusCode::NOT_FOUND,
                        status(404, "NotFound", "nodes \"worker-1\" not found"),
                    ),
                    _ => (
                        StatusCode::FORBIDDEN,
                        status(403, "Forbidden", "nodes \"worker-1\" is forbidden: User \"system:serviceaccount:pinion-system:pinion\" cannot get resource \"nodes\""),
                    ),
                }
            }
            ("GET", NODE_PATH) => (StatusCode::OK, self.node.lock().unwrap().clone()),
            ("GET", PODS_PATH) => (
                StatusCode::OK,
                json!({"apiVersion": "v1", "kind": "PodList",
                    "metadata": {"resourceVersion": "1"},
                    "items": self.pods.lock().unwrap().clone()}),
            ),
            ("PATCH", NRT_PATH | NODE_STATUS_PATH) if self.fail_once() => (
                // 500, not 503: kube's client retries 503 itself.
                StatusCode::INTERNAL_SERVER_ERROR,
                status(500, "InternalError", "etcd is down"),
            ),
            ("PATCH", NRT_PATH) => (StatusCode::OK, request.body.clone()),
            ("PATCH", NODE_STATUS_PATH) => self.apply_node_status(&request),
            _ => (StatusCode::NOT_FOUND, status(404, "NotFound", "not found")),
        };
        self.requests.lock().unwrap().push(request);
        answer
    }

    fn fail_once(&self) -> bool {
        let mut failures = self.failures.lock().unwrap();
        let fail = *failures > 0;
        *failures = failures.saturating_sub(1);
        fail
    }

    /// The model of a server-side apply of the Node's status.
    fn apply_node_status(&self, request: &Recorded) -> (StatusCode, Value) {
        if request.content_type != "application/apply-patch+yaml" {
            return (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                status(
                    415,
                    "UnsupportedMediaType",
                    "the stand-in models apply only",
                ),
            );
        }
        let Some(manager) = query_value(&request.query, "fieldManager") else {
            return (
                StatusCode::BAD_REQUEST,
                status(400, "BadRequest", "fieldManager is required for apply"),
            );
        };
        let mut node = self.node.lock().unwrap();
        let mut owned = self.owned.lock().unwrap();
        let before = owned.remove(&manager).unwrap_or_default();
        let mut now = BTreeSet::new();
        for map in ["capacity", "allocatable"] {
            if let Some(applied) = request.body["status"][map].as_object() {
                for (key, value) in applied {
                    node["status"][map][key] = value.clone();
                    now.insert(key.clone());
                }
            }
        }
        for key in before.difference(&now) {
            for map in ["capacity", "allocatable"] {
                if let Some(list) = node["status"][map].as_object_mut() {
                    list.remove(key);
                }
            }
        }
        if !now.is_empty() {
            owned.insert(manager, now);
        }
        set_managed_fields(&mut node, &owned);
        (StatusCode::OK, node.clone())
    }
}

/// The Node's `managedFields`: one apply entry of the status per manager.
fn set_managed_fields(
    node: &mut Value,
    owned: &std::collections::BTreeMap<String, BTreeSet<String>>,
) {
    let entries: Vec<Value> = owned
        .iter()
        .filter(|(_, keys)| !keys.is_empty())
        .map(|(manager, keys)| {
            let fields: serde_json::Map<String, Value> =
                keys.iter().map(|k| (format!("f:{k}"), json!({}))).collect();
            json!({
                "manager": manager, "operation": "Apply", "subresource": "status",
                "apiVersion": "v1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:capacity": fields, "f:allocatable": fields}},
            })
        })
        .collect();
    node["metadata"]["managedFields"] = Value::Array(entries);
}

fn query_value(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": message, "reason": reason, "code": code})
}

/// Serves the stand-in API server on 127.0.0.1.
pub async fn serve(server: Arc<ApiServer>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let server = Arc::clone(&server);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: Request<hyper::body::Incoming>| {
                        let server = Arc::clone(&server);
                        async move { Ok::<_, std::convert::Infallible>(respond(&server, request).await) }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

async fn respond(
    server: &ApiServer,
    request: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or_default().to_string(),
        content_type: parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    let watch = recorded.path == PODS_PATH
        && query_value(&recorded.query, "watch").is_some_and(|v| v == "true" || v == "1");
    let hang = watch
        || recorded.method == "PATCH" && {
            let mut next = server.hang_next.lock().unwrap();
            let once = *next > 0;
            *next = next.saturating_sub(1);
            once || *server.hang.lock().unwrap()
        };
    let (status, answer) = server.answer(recorded);
    if hang {
        std::future::pending::<()>().await;
    }
    let mut response = Response::new(Full::new(Bytes::from(answer.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().expect("header"));
    response
}
