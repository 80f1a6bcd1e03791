//! The metrics endpoint: `/metrics` (the latest snapshot's numbers and the
//! resource plugins' statistics, encoded by `crate::metrics`), `/healthz`
//! and `/readyz`, on the agent's one HTTP stack.

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::controller::ControllerHandle;
use crate::metrics::{render, CONTENT_TYPE};
use crate::server::{self, Answer, Limits};

/// Serves `/metrics`, `/healthz` and `/readyz` until `stop` turns true,
/// with [`Limits::METRICS`].
pub async fn serve(listener: TcpListener, handle: ControllerHandle, stop: watch::Receiver<bool>) {
    serve_with(listener, handle, stop, Limits::METRICS).await;
}

/// Serves the metrics endpoint with `limits`.
pub async fn serve_with(
    listener: TcpListener,
    handle: ControllerHandle,
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
            server::serve_http1(stream, limits, slot, move |request: Request<Incoming>| {
                let answer = route(request.method(), request.uri().path(), &handle);
                async move { answer }
            })
        },
    )
    .await;
}

/// Answers by path (the query is ignored); `GET` and `HEAD` only.
fn route(method: &Method, path: &str, handle: &ControllerHandle) -> Answer {
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
        let body = render(&handle.snapshot().metrics, &handle.plugins());
        return server::with_type(StatusCode::OK, CONTENT_TYPE, body.into_bytes());
    }
    server::text(StatusCode::OK, "ok\n".into())
}
