//! Injected faults: failed requests, dropped, corrupted and stalled watches, restarts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::watch;

use super::Shared;

/// The kind of API call a request is, for request logs and fault filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `GET` of one object.
    Get,
    /// `GET` of a collection.
    List,
    /// `GET` of a collection with `watch=true`.
    Watch,
    /// `POST`.
    Create,
    /// `PUT` (of the object or of its `/status`).
    Update,
    /// `PATCH` (of the object or of its `/status`).
    Patch,
    /// `DELETE`.
    Delete,
    /// Anything else (`/version`, unknown paths, other methods).
    Other,
}

#[derive(Debug)]
struct FailRule {
    remaining: usize,
    status: u16,
    verbs: Option<Vec<Verb>>,
}

/// Fault state shared by the server's tasks.
pub(crate) struct FaultState {
    fail: Mutex<Vec<FailRule>>,
    drop_after: Mutex<Option<usize>>,
    malformed: AtomicUsize,
    truncated: AtomicUsize,
    pub(crate) stalled: watch::Sender<bool>,
    /// Bytes whose first byte protobuf bodies have garbled ([`Faults::garble_protobuf`]).
    garbled: Mutex<Option<Vec<u8>>>,
}

impl FaultState {
    pub fn new() -> Self {
        Self {
            fail: Mutex::new(Vec::new()),
            drop_after: Mutex::new(None),
            malformed: AtomicUsize::new(0),
            truncated: AtomicUsize::new(0),
            stalled: watch::Sender::new(false),
            garbled: Mutex::new(None),
        }
    }

    /// A protobuf list body or watch frame as the garbling fault leaves it.
    pub(crate) fn garble_protobuf(&self, body: bytes::Bytes) -> bytes::Bytes {
        let garbled = self.garbled.lock();
        let Some(marker) = garbled.as_deref().filter(|m| !m.is_empty()) else {
            return body;
        };
        let mut body = body.to_vec();
        let mut at = 0;
        while let Some(i) = body[at..].windows(marker.len()).position(|w| w == marker) {
            body[at + i] = 0xff;
            at += i + marker.len();
        }
        body.into()
    }

    /// The status to fail this request with, consuming one use of the first matching rule.
    pub fn take_failure(&self, verb: Verb) -> Option<u16> {
        let mut rules = self.fail.lock();
        let i = rules
            .iter()
            .position(|r| r.verbs.as_ref().is_none_or(|v| v.contains(&verb)))?;
        let status = rules[i].status;
        rules[i].remaining -= 1;
        if rules[i].remaining == 0 {
            rules.remove(i);
        }
        Some(status)
    }

    pub fn drop_after(&self) -> Option<usize> {
        *self.drop_after.lock()
    }

    /// Whether the next watch line should be preceded by a garbage line (consumes it).
    pub fn take_malformed(&self) -> bool {
        self.malformed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Whether the next watch event should be cut off halfway, its stream with it (consumes it).
    pub fn take_truncated(&self) -> bool {
        self.truncated
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// A handle to inject faults into a [`FakeApiServer`](super::FakeApiServer); get one with
/// [`FakeApiServer::faults`](super::FakeApiServer::faults). Cheap to clone.
///
/// Faults act on requests and watch streams made after the call (and on open watch streams
/// where said), and stay until used up or cleared with [`Faults::clear`].
#[derive(Clone)]
pub struct Faults {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

impl Faults {
    /// Fails the next `n` requests (any path and verb) with `status` (e.g. 403, 429, 500) and a
    /// `Status` body whose `reason` matches the code (`Forbidden`, `TooManyRequests`,
    /// `InternalError`, ...). A 429 carries `retryAfterSeconds: 1` and a `Retry-After` header.
    pub fn fail_next(&self, n: usize, status: u16) {
        self.push_rule(n, status, None);
    }

    /// Like [`fail_next`](Self::fail_next), counting only requests of the given verbs.
    pub fn fail_next_for(&self, n: usize, status: u16, verbs: &[Verb]) {
        self.push_rule(n, status, Some(verbs.to_vec()));
    }

    fn push_rule(&self, n: usize, status: u16, verbs: Option<Vec<Verb>>) {
        if n > 0 {
            self.shared.faults.fail.lock().push(FailRule {
                remaining: n,
                status,
                verbs,
            });
        }
    }

    /// Closes every watch stream (open ones included) abruptly once it has written `n` lines
    /// (events and bookmarks), counted per stream, as a dropped connection would; holds until
    /// [`clear`](Self::clear). The client sees a body read error, not a clean end.
    pub fn drop_watches_after(&self, n: usize) {
        *self.shared.faults.drop_after.lock() = Some(n);
    }

    /// Makes the next watch line written (on any stream) be preceded by a line that is not
    /// valid JSON, or on a protobuf stream by a well-framed frame that is not a `WatchEvent`.
    /// The real event still follows, so nothing is lost.
    pub fn malformed_line_next(&self) {
        self.shared.faults.malformed.fetch_add(1, Ordering::SeqCst);
    }

    /// Cuts the next watch event written (on any stream) off halfway, then closes its
    /// connection abruptly: a partial JSON line, or a protobuf frame shorter than its length
    /// prefix. The event is lost to that stream (a new watch from the last RV gets it).
    pub fn truncated_event_next(&self) {
        self.shared.faults.truncated.fetch_add(1, Ordering::SeqCst);
    }

    /// Stalls every watch stream: connections stay open but send nothing (not even bookmarks,
    /// nor the clean end at `timeoutSeconds`) until [`unstall_watches`](Self::unstall_watches).
    /// Events queue up meanwhile; a stream whose queue overflows is cut off.
    pub fn stall_watches(&self) {
        self.shared.faults.stalled.send_replace(true);
    }

    /// Resumes stalled watch streams; they deliver what queued up, in order.
    pub fn unstall_watches(&self) {
        self.shared.faults.stalled.send_replace(false);
    }

    /// Closes every open watch stream abruptly (other connections stay).
    pub fn drop_all_watches(&self) {
        self.shared.watch_abort.send_modify(|g| *g += 1);
    }

    /// Simulates an API server restart: every open connection is closed abruptly, the state
    /// and history are kept, and the server goes on listening on the same port, so existing
    /// [`kube::Client`]s reconnect transparently.
    pub fn restart(&self) {
        self.shared.watch_abort.send_modify(|g| *g += 1);
        self.shared.conn_abort.send_modify(|g| *g += 1);
    }

    /// Garbles every protobuf list body and watch frame served from now on (until
    /// [`clear`](Self::clear)): wherever the bytes of `marker` occur, their first byte becomes
    /// `0xff`. With a marker
    /// inside a string value (say `"\u{1}bad"` in a ConfigMap's data) that string is no longer
    /// UTF-8, as a client that writes protobuf without checking can store it: kube-apiserver's
    /// protobuf encoding does not check strings, and its JSON encoding would replace the byte.
    /// The framing and the metadata stay readable; the object no longer decodes.
    pub fn garble_protobuf(&self, marker: &str) {
        *self.shared.faults.garbled.lock() = Some(marker.as_bytes().to_vec());
    }

    /// Clears pending request failures, malformed lines, truncated events, the drop-after rule,
    /// stalls and garbling.
    pub fn clear(&self) {
        let f = &self.shared.faults;
        *f.garbled.lock() = None;
        f.fail.lock().clear();
        *f.drop_after.lock() = None;
        f.malformed.store(0, Ordering::SeqCst);
        f.truncated.store(0, Ordering::SeqCst);
        f.stalled.send_replace(false);
    }
}
