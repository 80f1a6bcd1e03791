//! The metrics endpoint: `/metrics` (the latest snapshot's numbers, the
//! resource plugins' statistics and the NRI front-end's request times,
//! encoded by `crate::metrics`), `/healthz` and `/readyz`, on the agent's
//! one HTTP stack.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::controller::ControllerHandle;
use crate::metrics::{render, CONTENT_TYPE};
use crate::nri::request_times::RequestTimes;
use crate::server::{self, Answer, Limits};

/// Serves `/metrics`, `/healthz` and `/readyz` until `stop` turns true,
/// with [`Limits::METRICS`]; `nri_requests`: the NRI front-end's request
/// times (empty without it).
pub async fn serve(
    listener: TcpListener,
    handle: ControllerHandle,
    nri_requests: Arc<RequestTimes>,
    stop: watch::Receiver<bool>,
) {
    serve_with(listener, handle, nri_requests, stop, Limits::METRICS).await;
}

/// Serves the metrics endpoint with `limits`.
pub async fn serve_with(
    listener: TcpListener,
    handle: ControllerHandle,
    nri_requests: Arc<RequestTimes>,
    stop: watch::Receiver<bool>,
    limits: Limits,
) {
    server::accept_loop(
        "metrics",
        listener,
        limits.max_connections,
        stop,
        move |stream, slot| {
            let handle = handle.clone();
            let nri_requests = Arc::clone(&nri_requests);
            server::serve_http1(stream, limits, slot, move |request: Request<Incoming>| {
                let answer = route(
                    request.method(),
                    request.uri().path(),
                    &handle,
                    &nri_requests,
                );
                async move { answer }
            })
        },
    )
    .await;
}

/// Answers by path (the query is ignored); `GET` and `HEAD` only.
fn route(
    method: &Method,
    path: &str,
    handle: &ControllerHandle,
    nri_requests: &RequestTimes,
) -> Answer {
    let known = matches!(path, "/metrics" | "/healthz" | "/readyz");
    if !known {
        return server::text(StatusCode::NOT_FOUND, format!("no such endpoint {path}\n"));
    }
    if method != Method::GET && method != Method::HEAD {
        let message = format!("method {method} not allowed on {path} (allowed: GET, HEAD)\n");
        return server::allow(
            server::text(StatusCode::METHOD_NOT_ALLOWED, message),
            "GET, HEAD",
        );
    }
    if path == "/metrics" {
        let body = render(
            &handle.snapshot().metrics,
            &handle.plugins(),
            &nri_requests.snapshot(),
        );
        return server::with_type(StatusCode::OK, CONTENT_TYPE, body.into_bytes());
    }
    server::text(StatusCode::OK, "ok\n".into())
}
