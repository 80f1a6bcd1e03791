//! The connections one listener serves, oldest first, and which of them may
//! be evicted: an HTTP connection with no request in flight (no complete
//! request head yet, or idle between kept-alive requests). A connection with
//! a request in flight is never evicted, nor one whose server never allowed
//! it (gRPC on the podresources socket).
//!
//! At the cap the accept loop keeps accepting while some connection is
//! evictable, and evicts the oldest such one for each newcomer, so idle or
//! slow-header connections cannot crowd out new requests. A connection
//! becomes evictable [`EVICTABLE_AFTER`] after it was accepted or last
//! answered, so a burst of clients cannot evict each other before their
//! heads are read. Evicted
//! connections count until they have ended, and at most as many as the cap
//! are ending at once: descriptors stay below twice the cap.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

/// A connection is evictable only once it has been without a request in
/// flight this long: a burst of clients whose heads are in the socket but
/// not read yet (their tasks not polled) must not evict each other.
pub(crate) const EVICTABLE_AFTER: Duration = Duration::from_millis(500);

/// One listener's connections.
#[derive(Debug)]
pub(crate) struct Slots {
    cap: usize,
    inner: Mutex<Inner>,
    /// Woken when a connection ends or becomes evictable.
    changed: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    /// By accept order: the first entry is the oldest.
    live: BTreeMap<u64, Arc<Conn>>,
}

/// What a connection and its accept loop share.
#[derive(Debug)]
struct Conn {
    /// The server allows evicting it while no request is in flight.
    evictable_when_idle: AtomicBool,
    in_flight: AtomicUsize,
    /// Since when it has had no request in flight (accepted, or its last
    /// request answered).
    idle_since: Mutex<Instant>,
    evicted: AtomicBool,
    evict: Notify,
}

impl Conn {
    fn new() -> Self {
        Self {
            evictable_when_idle: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            evicted: AtomicBool::new(false),
            evict: Notify::new(),
        }
    }

    /// When it is (or was) evictable from: `None` while it cannot be.
    fn evictable_from(&self) -> Option<Instant> {
        let idle = self.evictable_when_idle.load(Ordering::SeqCst)
            && self.in_flight.load(Ordering::SeqCst) == 0
            && !self.evicted.load(Ordering::SeqCst);
        idle.then(|| {
            *self
                .idle_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                + EVICTABLE_AFTER
        })
    }

    fn evictable(&self, now: Instant) -> bool {
        self.evictable_from().is_some_and(|from| from <= now)
    }
}

/// Whether the accept loop may take another connection now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Room {
    /// Below the cap.
    Free,
    /// At the cap, but the oldest evictable connection can make room.
    ByEviction,
    /// At the cap with nothing evictable (or too many ending): wait, until
    /// the time given when a connection becomes evictable then.
    Full(Option<Instant>),
}

impl Slots {
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap: cap.max(1),
            inner: Mutex::new(Inner::default()),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a connection may be accepted now.
    pub(crate) fn room(&self) -> Room {
        let inner = self.lock();
        let ending = inner
            .live
            .values()
            .filter(|c| c.evicted.load(Ordering::SeqCst))
            .count();
        if inner.live.len() - ending < self.cap {
            return Room::Free;
        }
        if ending >= self.cap {
            return Room::Full(None);
        }
        let now = Instant::now();
        let soonest = inner.live.values().filter_map(|c| c.evictable_from()).min();
        match soonest {
            Some(from) if from <= now => Room::ByEviction,
            later => Room::Full(later),
        }
    }

    /// Waits until [`Self::room`] may have changed. Take the future
    /// before checking the room, so no change is missed.
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// Registers a newly accepted connection, evicting the oldest evictable
    /// one when the cap is reached.
    pub(crate) fn admit(self: &Arc<Self>) -> Slot {
        let mut inner = self.lock();
        let active = inner
            .live
            .values()
            .filter(|c| !c.evicted.load(Ordering::SeqCst))
            .count();
        if active >= self.cap {
            let now = Instant::now();
            if let Some(oldest) = inner.live.values().find(|c| c.evictable(now)) {
                oldest.evicted.store(true, Ordering::SeqCst);
                oldest.evict.notify_one();
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let conn = Arc::new(Conn::new());
        inner.live.insert(id, Arc::clone(&conn));
        Slot {
            slots: Arc::clone(self),
            id,
            conn,
        }
    }

    /// Connections counted (including those ending after eviction).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().live.len()
    }
}

/// One connection's place among its listener's; dropping it frees the place.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    conn: Arc<Conn>,
}

impl Slot {
    /// Allows evicting this connection while no request is in flight.
    pub fn allow_eviction(&self) {
        self.conn.evictable_when_idle.store(true, Ordering::SeqCst);
        self.slots.changed.notify_waiters();
    }

    /// Marks a request in flight until the guard is dropped.
    #[must_use]
    pub fn request(&self) -> InFlight {
        self.conn.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight {
            slots: Arc::clone(&self.slots),
            conn: Arc::clone(&self.conn),
        }
    }

    /// Resolves once the accept loop evicted this connection.
    pub async fn evicted(&self) {
        loop {
            let notified = self.conn.evict.notified();
            if self.conn.evicted.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }

    /// Whether a request is in flight.
    #[must_use]
    pub fn busy(&self) -> bool {
        self.conn.in_flight.load(Ordering::SeqCst) > 0
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().live.remove(&self.id);
        self.slots.changed.notify_waiters();
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
pub struct InFlight {
    slots: Arc<Slots>,
    conn: Arc<Conn>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.conn.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            *self
                .conn
                .idle_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Instant::now();
            self.slots.changed.notify_waiters();
        }
    }
}
