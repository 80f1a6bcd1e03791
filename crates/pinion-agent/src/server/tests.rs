use std::sync::atomic::{AtomicUsize, Ordering};

use pinion_core::testing::logs::capture;

use super::slots::{self, Room, Slots};
use super::*;

/// A listener whose `accept` fails with `EMFILE` until `heal_after`
/// attempts, then hands out in-memory connections.
struct Exhausted {
    attempts: Arc<AtomicUsize>,
    heal_after: usize,
}

impl Listener for Exhausted {
    type Io = tokio::io::DuplexStream;
    async fn accept_one(&self) -> std::io::Result<Self::Io> {
        let attempt = self.attempts.fetch_add(1, Ordering::SeqCst);
        if attempt < self.heal_after {
            return Err(std::io::Error::from_raw_os_error(24)); // EMFILE
        }
        let (ours, theirs) = tokio::io::duplex(64);
        std::mem::forget(theirs);
        Ok(ours)
    }
}

/// Regression (issue 10): with its descriptors exhausted the agent's accept
/// loop spun on `EMFILE` with a WARN per retry (a core busy, ~1 GB of logs
/// in 10 s). Now it backs off up to a second and warns once a minute.
#[tokio::test(start_paused = true)]
async fn regression_accept_emfile_backs_off_and_logs_rarely() {
    let (log, _guard) = capture();
    let attempts = Arc::new(AtomicUsize::new(0));
    let listener = Exhausted {
        attempts: Arc::clone(&attempts),
        heal_after: usize::MAX,
    };
    let (stop, stop_rx) = watch::channel(false);
    let served = Arc::new(AtomicUsize::new(0));
    let loop_task = tokio::spawn(accept_loop("test", listener, 4, stop_rx, {
        let served = Arc::clone(&served);
        move |_io, _slot| {
            served.fetch_add(1, Ordering::SeqCst);
            async {}
        }
    }));
    // Two virtual minutes of a listener that always fails.
    tokio::time::sleep(Duration::from_secs(120)).await;
    let _ = stop.send(true);
    loop_task.await.expect("accept loop ends on stop");
    let tried = attempts.load(Ordering::SeqCst);
    // A retry at most every second after the ramp (10 ms doubling to 1 s),
    // not a busy loop.
    assert!((100..=140).contains(&tried), "{tried} accept attempts");
    let warnings = log.lines("WARN");
    assert!((2..=3).contains(&warnings), "{warnings} warnings");
    assert_eq!(served.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn accepting_resumes_once_descriptors_are_back() {
    let (log, _guard) = capture();
    let attempts = Arc::new(AtomicUsize::new(0));
    let listener = Exhausted {
        attempts: Arc::clone(&attempts),
        heal_after: 5,
    };
    let (stop, stop_rx) = watch::channel(false);
    let served = Arc::new(AtomicUsize::new(0));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let loop_task = tokio::spawn(accept_loop("test", listener, 2, stop_rx, {
        let served = Arc::clone(&served);
        move |_io, _slot| {
            served.fetch_add(1, Ordering::SeqCst);
            let done = done_tx.clone();
            async move {
                let _ = done.send(());
            }
        }
    }));
    for _ in 0..3 {
        done_rx.recv().await.expect("a connection was served");
    }
    let _ = stop.send(true);
    loop_task.await.expect("accept loop ends on stop");
    assert!(served.load(Ordering::SeqCst) >= 3);
    assert_eq!(log.lines("WARN"), 1);
    assert_eq!(log.lines("accepting connections again"), 1);
}

/// A listener that hands out in-memory connections that never end.
struct Endless {
    accepted: Arc<AtomicUsize>,
}

impl Listener for Endless {
    type Io = tokio::io::DuplexStream;
    async fn accept_one(&self) -> std::io::Result<Self::Io> {
        self.accepted.fetch_add(1, Ordering::SeqCst);
        let (ours, theirs) = tokio::io::duplex(64);
        std::mem::forget(theirs);
        Ok(ours)
    }
}

#[tokio::test(start_paused = true)]
async fn no_more_than_the_cap_are_accepted_at_once() {
    let accepted = Arc::new(AtomicUsize::new(0));
    let listener = Endless {
        accepted: Arc::clone(&accepted),
    };
    let (stop, stop_rx) = watch::channel(false);
    let loop_task = tokio::spawn(accept_loop(
        "test",
        listener,
        3,
        stop_rx,
        |_io, slot| async move {
            let _held = slot;
            std::future::pending::<()>().await;
        },
    ));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
    let _ = stop.send(true);
    loop_task
        .await
        .expect("accept loop ends on stop while at the cap");
}

/// A listener handing out the in-memory connections a test pushes.
struct Handed(tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<tokio::io::DuplexStream>>);

impl Listener for Handed {
    type Io = tokio::io::DuplexStream;
    async fn accept_one(&self) -> std::io::Result<Self::Io> {
        match self.0.lock().await.recv().await {
            Some(io) => Ok(io),
            None => std::future::pending().await,
        }
    }
}

/// Limits whose timeouts never fire within a test: only eviction can make
/// room.
const PATIENT: Limits = Limits {
    max_connections: 3,
    header_read_timeout: Duration::from_secs(3600),
    body_read_timeout: Duration::from_secs(3600),
    max_head: MAX_HEAD,
    max_body: 0,
    keep_alive: true,
    max_connection_lifetime: Duration::from_secs(36_000),
};

/// Pushes new client connections to an HTTP accept loop serving `service`.
struct Server {
    clients: tokio::sync::mpsc::UnboundedSender<tokio::io::DuplexStream>,
    stop: watch::Sender<bool>,
}

impl Server {
    fn start<S, Fut>(limits: Limits, service: S) -> Self
    where
        S: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Answer> + Send + 'static,
    {
        let (clients, accepted) = tokio::sync::mpsc::unbounded_channel();
        let (stop, stop_rx) = watch::channel(false);
        let listener = Handed(tokio::sync::Mutex::new(accepted));
        tokio::spawn(accept_loop(
            "test",
            listener,
            limits.max_connections,
            stop_rx,
            move |io, slot| serve_http1(io, limits, slot, service.clone()),
        ));
        Self { clients, stop }
    }

    fn connect(&self) -> tokio::io::DuplexStream {
        let (ours, theirs) = tokio::io::duplex(4096);
        self.clients.send(theirs).expect("accept loop runs");
        ours
    }
}

fn ok(_request: Request<Incoming>) -> std::future::Ready<Answer> {
    std::future::ready(text(StatusCode::OK, "ok\n".into()))
}

const GET: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n";

/// Reads until the end of an answer's head and returns its status line.
async fn status_line(io: &mut tokio::io::DuplexStream) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if io.read(&mut byte).await.expect("read answer") == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    text.lines().next().unwrap_or_default().to_string()
}

/// Whether the server closed `io` (reading reaches the end of stream).
async fn closed(io: &mut tokio::io::DuplexStream) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut rest = Vec::new();
    io.read_to_end(&mut rest).await.is_ok()
}

/// Regression (issue 27, item 7a): idle connections (none or half of a
/// request head) filled the metrics port's cap and the accept loop stopped
/// accepting, so probes failed until the header timeout. Now the oldest
/// connection without a request in flight makes room for the newcomer.
#[tokio::test(start_paused = true)]
async fn regression_idle_connections_at_the_cap_do_not_crowd_out_a_request() {
    use tokio::io::AsyncWriteExt as _;
    let server = Server::start(PATIENT, ok);
    let mut silent = server.connect();
    let mut half_head = server.connect();
    half_head.write_all(b"GET /heal").await.expect("write");
    let mut kept_alive = server.connect();
    kept_alive.write_all(GET).await.expect("write");
    assert_eq!(status_line(&mut kept_alive).await, "HTTP/1.1 200 OK");
    // The cap (3) is full of connections without a request in flight.
    for _ in 0..3 {
        let mut probe = server.connect();
        probe.write_all(GET).await.expect("write");
        let answered = tokio::time::timeout(Duration::from_secs(60), status_line(&mut probe));
        assert_eq!(
            answered
                .await
                .expect("answered while the cap is full of idle connections"),
            "HTTP/1.1 200 OK"
        );
    }
    // Oldest first: the silent one, then the half head, then the idle
    // kept-alive one were evicted and closed.
    assert!(closed(&mut silent).await);
    assert!(closed(&mut half_head).await);
    assert!(closed(&mut kept_alive).await);
    let _ = server.stop.send(true);
}

/// A connection with a request in flight is never evicted: a newcomer
/// waits for it to end.
#[tokio::test(start_paused = true)]
async fn a_connection_with_a_request_in_flight_is_never_evicted() {
    use tokio::io::AsyncWriteExt as _;
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel::<()>();
    let release = Arc::new(tokio::sync::Notify::new());
    let service = {
        let release = Arc::clone(&release);
        move |_request: Request<Incoming>| {
            let entered = entered_tx.clone();
            let release = Arc::clone(&release);
            async move {
                let _ = entered.send(());
                release.notified().await;
                text(StatusCode::OK, "ok\n".into())
            }
        }
    };
    let limits = Limits {
        max_connections: 1,
        keep_alive: false,
        ..PATIENT
    };
    let server = Server::start(limits, service);
    let mut first = server.connect();
    first.write_all(GET).await.expect("write");
    entered
        .recv()
        .await
        .expect("the first request is in flight");
    let mut second = server.connect();
    second.write_all(GET).await.expect("write");
    // An hour of (paused) time later the first is still being served and
    // the second still waits.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(entered.try_recv().is_err(), "the second was not accepted");
    release.notify_one();
    assert_eq!(status_line(&mut first).await, "HTTP/1.1 200 OK");
    entered
        .recv()
        .await
        .expect("the second is served after the first");
    release.notify_one();
    assert_eq!(status_line(&mut second).await, "HTTP/1.1 200 OK");
    let _ = server.stop.send(true);
}

#[tokio::test(start_paused = true)]
async fn evicted_connections_count_until_they_end() {
    let slots = Slots::new(1);
    let first = slots.admit();
    first.allow_eviction();
    // Fresh: not evictable until it has been idle a while.
    assert!(matches!(slots.room(), Room::Full(Some(_))));
    tokio::time::sleep(slots::EVICTABLE_AFTER).await;
    assert_eq!(slots.room(), Room::ByEviction);
    let second = slots.admit();
    // The first is ending: room again only when one of them is evictable
    // and fewer than the cap are ending.
    second.allow_eviction();
    tokio::time::sleep(slots::EVICTABLE_AFTER).await;
    assert_eq!(slots.len(), 2);
    assert_eq!(slots.room(), Room::Full(None));
    drop(first);
    assert_eq!(slots.room(), Room::ByEviction);
    let busy = second.request();
    assert_eq!(slots.room(), Room::Full(None));
    drop(busy);
    // Idle again: evictable once it has been idle a while.
    assert!(matches!(slots.room(), Room::Full(Some(_))));
    tokio::time::sleep(slots::EVICTABLE_AFTER).await;
    assert_eq!(slots.room(), Room::ByEviction);
    drop(second);
    assert_eq!(slots.room(), Room::Free);
}

/// A burst of fresh connections (heads sent, not read yet) at the cap does
/// not evict its own members: the newcomer waits until one has been idle
/// for [`slots::EVICTABLE_AFTER`].
#[tokio::test(start_paused = true)]
async fn fresh_connections_are_not_evicted_by_a_burst() {
    let slots = Slots::new(2);
    let a = slots.admit();
    a.allow_eviction();
    let b = slots.admit();
    b.allow_eviction();
    assert!(matches!(slots.room(), Room::Full(Some(_))));
    let c = slots.admit();
    assert_eq!(slots.len(), 3, "nothing evicted");
    drop((a, b, c));
}
