//! The connection's two tasks: the reader (frames in, requests to the
//! server task, replies to waiting callers) and the server (one served call at
//! a time, holding the handler gate; a call that overran the caller's
//! deadline is answered on time and still finished before the next).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message as _;
use tokio::io::AsyncReadExt;
use tokio::net::unix::OwnedReadHalf;
use tokio::sync::mpsc;

use super::{Call, Service, Shared};
use crate::proto::ttrpc;
use crate::status::{Code, Status};
use crate::wire::{
    decode_frame_header, Assembler, Message, FRAME_HEADER_LEN, TYPE_REQUEST, TYPE_RESPONSE,
};

/// An answer that kept the runtime waiting this long is logged as a warning
/// (the runtime holds the container, often the pod's start, meanwhile).
const SLOW_ANSWER: Duration = Duration::from_secs(1);

/// A request read off the served connection, with when it was read.
pub(super) type Received = (Instant, Message);

/// Requests read but not answered yet, at most. A runtime calls a plugin
/// one event at a time and waits for each answer (containerd's and CRI-O's
/// NRI adaptations hold a lock around every call), so more means a peer
/// that does not wait: the connection is closed rather than queueing
/// without bound (each request may be 4 MiB). The reader never waits for
/// room: replies to the plugin's own calls travel on the same socket, and
/// a handler may be waiting for one.
pub(super) const MAX_QUEUED_REQUESTS: usize = 64;

pub(super) async fn read_loop(
    shared: Arc<Shared>,
    mut read: OwnedReadHalf,
    requests: mpsc::Sender<Received>,
) {
    let reason = match read_frames(&shared, &mut read, &requests).await {
        Ok(()) => {
            tracing::debug!("nri peer closed the connection");
            "peer closed the connection".to_string()
        }
        Err(reason) => {
            tracing::warn!(%reason, "nri connection closed on a protocol error");
            reason
        }
    };
    shared.close(reason).await;
}

async fn read_frames(
    shared: &Shared,
    read: &mut OwnedReadHalf,
    requests: &mpsc::Sender<Received>,
) -> Result<(), String> {
    let roles = shared.roles;
    let mut served = Assembler::default();
    let mut replies = Assembler::default();
    loop {
        let mut header = [0u8; FRAME_HEADER_LEN];
        match read.read_exact(&mut header).await {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(err) => return Err(format!("reading a frame header failed: {err}")),
        }
        let (conn, len) = decode_frame_header(header).map_err(|e| e.to_string())?;
        if len > roles.max_in_frame {
            return Err(format!(
                "frame for connection {conn} has {len} bytes, more than the accepted {}",
                roles.max_in_frame
            ));
        }
        shared.largest_in_frame.fetch_max(len, Ordering::Relaxed);
        let mut payload = vec![0u8; len];
        read.read_exact(&mut payload)
            .await
            .map_err(|err| format!("reading a {len}-byte frame failed: {err}"))?;
        if conn == roles.serve {
            served.push(&payload);
            while let Some(message) = served.next_message().map_err(|e| e.to_string())? {
                if message.kind == TYPE_REQUEST {
                    match requests.try_send((Instant::now(), message)) {
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            return Err(format!(
                                "the peer sent more than {MAX_QUEUED_REQUESTS} requests without waiting for their answers"
                            ));
                        }
                        // The server task ended: the connection is closing.
                        Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                    }
                } else {
                    tracing::debug!(
                        kind = message.kind,
                        "non-request message on the served connection dropped"
                    );
                }
            }
        } else if conn == roles.client {
            replies.push(&payload);
            while let Some(message) = replies.next_message().map_err(|e| e.to_string())? {
                if message.kind == TYPE_RESPONSE {
                    shared.deliver(&message);
                }
            }
        } else {
            tracing::debug!(conn, len, "frame for an unopened connection dropped");
        }
    }
}

pub(super) async fn serve_loop(
    shared: Arc<Shared>,
    service: Arc<dyn Service>,
    mut requests: mpsc::Receiver<Received>,
) {
    while let Some((read_at, message)) = requests.recv().await {
        let _gate = shared.gate.lock().await;
        let started = Instant::now();
        let (method, response, overran) = serve_one(service.as_ref(), &message.payload).await;
        let reply = Message {
            stream_id: message.stream_id,
            kind: TYPE_RESPONSE,
            flags: 0,
            payload: response.encode_to_vec(),
        };
        let written = shared.write_message(shared.roles.serve, &reply).await;
        // What the peer waited on us: queued behind earlier calls (or an
        // unsolicited request being written), then served and answered. The
        // method is the peer's string: logged escaped (`?`).
        let (queued, served) = (started.duration_since(read_at), started.elapsed());
        if queued + served >= SLOW_ANSWER {
            tracing::warn!(
                ?method,
                stream = message.stream_id,
                ?queued,
                ?served,
                "nri request answered slowly"
            );
        } else {
            tracing::debug!(
                ?method,
                stream = message.stream_id,
                ?queued,
                ?served,
                "nri request answered"
            );
        }
        if let Some(handler) = overran {
            // Answered DEADLINE_EXCEEDED, yet finished before the next
            // request, still behind the gate: a handler's effects (an
            // admission made and its container tracked, a release) are
            // never cut in half, and events stay in order. The runtime's
            // undo of a failed create (containerd's StopContainer and
            // RemoveContainer) then finds the container it releases.
            let late = handler.await;
            tracing::warn!(
                ?method,
                stream = message.stream_id,
                served = ?started.elapsed(),
                succeeded = late.is_ok(),
                "nri request finished after its deadline was answered"
            );
        }
        if written.is_err() {
            return;
        }
    }
}

/// A handler still running when its deadline was answered.
type Overran = crate::conn::ServiceFuture;

/// Serves one encoded ttrpc request: the method it named (empty when it
/// did not decode), the response, and the handler when it did not finish
/// within the caller's budget (the response says DEADLINE_EXCEEDED; the
/// caller finishes it).
async fn serve_one(
    service: &dyn Service,
    payload: &[u8],
) -> (String, ttrpc::Response, Option<Overran>) {
    let request = match ttrpc::Request::decode(payload) {
        Ok(request) => request,
        Err(err) => {
            let status = Status::new(
                Code::InvalidArgument,
                format!("undecodable ttrpc request: {err}"),
            );
            return (String::new(), status_response(&status), None);
        }
    };
    let timeout = u64::try_from(request.timeout_nano)
        .ok()
        .filter(|nanos| *nanos > 0)
        .map(Duration::from_nanos);
    let method = request.method.clone();
    let mut future = service.call(Call {
        service: request.service,
        method: request.method,
        payload: request.payload,
        timeout,
    });
    let mut overran = None;
    let result = match timeout.map(answer_budget) {
        Some(budget) => match tokio::time::timeout(budget, &mut future).await {
            Ok(result) => result,
            Err(_) => {
                overran = Some(future);
                Err(Status::new(
                    Code::DeadlineExceeded,
                    format!("{method} did not finish within the caller's {budget:?}"),
                ))
            }
        },
        None => future.await,
    };
    let response = match result {
        Ok(payload) => ttrpc::Response {
            status: Some(ttrpc::Status {
                code: 0,
                message: String::new(),
            }),
            payload,
        },
        Err(status) => status_response(&status),
    };
    (method, response, overran)
}

/// The part of the caller's budget a handler may use: a tenth (at most
/// 100 ms) is kept for the reply to travel back, so a slow handler is
/// answered with DEADLINE_EXCEEDED before the caller gives up on us (which
/// containerd answers by disconnecting the plugin and creating the
/// container without Pinion's adjustment).
#[must_use]
pub fn answer_budget(caller: Duration) -> Duration {
    caller.saturating_sub((caller / 10).min(Duration::from_millis(100)))
}

fn status_response(status: &Status) -> ttrpc::Response {
    ttrpc::Response {
        status: Some(ttrpc::Status {
            code: status.code.number(),
            message: status.message.clone(),
        }),
        payload: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_budget_keeps_a_tenth_up_to_100ms() {
        assert_eq!(
            answer_budget(Duration::from_secs(2)),
            Duration::from_millis(1900)
        );
        assert_eq!(
            answer_budget(Duration::from_millis(300)),
            Duration::from_millis(270)
        );
        assert_eq!(
            answer_budget(Duration::from_secs(60)),
            Duration::from_millis(59_900)
        );
        assert_eq!(answer_budget(Duration::ZERO), Duration::ZERO);
    }
}
