use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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

/// Log lines captured from the current thread's tracing events.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self, level: &str) -> usize {
        let text = String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned();
        text.lines().filter(|line| line.contains(level)).count()
    }
}

fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
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
        move |_io| {
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
        move |_io| {
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
    let loop_task = tokio::spawn(accept_loop("test", listener, 3, stop_rx, |_io| {
        std::future::pending::<()>()
    }));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
    let _ = stop.send(true);
    loop_task
        .await
        .expect("accept loop ends on stop while at the cap");
}
