//! The shared processor: fans notifications out to listeners, each with its own buffer and its
//! own consumer: a task on the informer's handler thread, or an OS thread of its own for handlers
//! that block (client-go `sharedProcessor` / `processorListener`, whose consumers are goroutines).

use std::{
    collections::VecDeque,
    future::Future,
    panic::AssertUnwindSafe,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    task::Poll,
    thread::JoinHandle,
    time::Duration,
};

use futures::{FutureExt, StreamExt, task::LocalSpawnExt};
use parking_lot::{Condvar, Mutex, RwLock};
use tokio::{sync::Notify, time::Instant};
use tracing::Instrument;

use crate::panic_message;

use super::{
    InformerError,
    handler::{Event, ResourceEventHandler},
};
use crate::{
    fifo::{DeletedFinalStateUnknown, DeltaObject},
    store::{ObjectKey, Snapshot},
};

/// A notification as a listener's buffer holds it: an event, or an event whose objects are
/// [`Snapshot`]s of the cache, decoded as the handler is called. With a compact cache, a late
/// handler's replay, the in-order FIFO's relists and resyncs, and every add and update sent to
/// a handler that has fallen behind ([`Processor::distribute_stored`]) are notified so: N
/// notifications in the buffers are then N compressed objects, not N decoded ones (issue #12
/// part 4).
pub(crate) enum Note<K> {
    Ready(Event<K>),
    Stored(StoredEvent<K>),
}

/// An [`Event`] whose objects are snapshots.
pub(crate) enum StoredEvent<K> {
    Add {
        obj: Snapshot<K>,
        is_in_initial_list: bool,
    },
    Update {
        old: Snapshot<K>,
        new: Snapshot<K>,
        /// For the add this becomes if `old` does not decode ([`Event::update_or_add`]).
        is_in_initial_list: bool,
    },
    /// A `DeletedFinalStateUnknown` tombstone.
    Tombstone { key: ObjectKey, obj: Snapshot<K> },
}

impl<K> Clone for Note<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Ready(ev) => Self::Ready(ev.clone()),
            Self::Stored(ev) => Self::Stored(ev.clone()),
        }
    }
}

impl<K> Clone for StoredEvent<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Add {
                obj,
                is_in_initial_list,
            } => Self::Add {
                obj: obj.clone(),
                is_in_initial_list: *is_in_initial_list,
            },
            Self::Update {
                old,
                new,
                is_in_initial_list,
            } => Self::Update {
                old: old.clone(),
                new: new.clone(),
                is_in_initial_list: *is_in_initial_list,
            },
            Self::Tombstone { key, obj } => Self::Tombstone {
                key: key.clone(),
                obj: obj.clone(),
            },
        }
    }
}

impl<K> From<Event<K>> for Note<K> {
    fn from(ev: Event<K>) -> Self {
        Self::Ready(ev)
    }
}

impl<K> From<StoredEvent<K>> for Note<K> {
    fn from(ev: StoredEvent<K>) -> Self {
        Self::Stored(ev)
    }
}

impl<K> Note<K> {
    fn is_initial_add(&self) -> bool {
        match self {
            Self::Ready(ev) => ev.is_initial_add(),
            Self::Stored(StoredEvent::Add {
                is_in_initial_list, ..
            }) => *is_in_initial_list,
            Self::Stored(_) => false,
        }
    }

    /// The event to hand to the handler, its snapshots decoded; `None` if one does not decode
    /// (logged, counted and reported to the informer's error handler by the cache; see
    /// [`StorageError`](crate::StorageError) for when it can happen: a protobuf item an
    /// in-order relist stored undecoded whose bytes do not decode), except an update's old
    /// object, without which
    /// the update is an add (as [`Indexer::insert`](crate::Indexer::insert) returns no old
    /// object it cannot read).
    pub(crate) fn event(&self) -> Option<std::borrow::Cow<'_, Event<K>>> {
        use std::borrow::Cow;
        let ev = match self {
            Self::Ready(ev) => return Some(Cow::Borrowed(ev)),
            Self::Stored(StoredEvent::Add {
                obj,
                is_in_initial_list,
            }) => Event::Add {
                obj: obj.load().ok()?,
                is_in_initial_list: *is_in_initial_list,
            },
            Self::Stored(StoredEvent::Update {
                old,
                new,
                is_in_initial_list,
            }) => {
                // The new object first: if it does not decode, nothing is notified, and the old
                // one (the same snapshot for a resync) is not decoded for nothing.
                let new = new.load().ok()?;
                Event::update_or_add(old.load_old(), new, *is_in_initial_list)
            }
            Self::Stored(StoredEvent::Tombstone { key, obj }) => Event::Delete(
                DeltaObject::DeletedFinalStateUnknown(DeletedFinalStateUnknown {
                    key: key.clone(),
                    obj: obj.load().ok()?,
                }),
            ),
        };
        Some(Cow::Owned(ev))
    }
}

/// client-go's `initialBufferSize`: a listener's ring buffer starts here and doubles as needed.
const INITIAL_BUFFER: usize = 1024;

/// How long a listener pauses after its handler panicked before it takes the next notification
/// (client-go `processorListener.run` restarts its loop after a panic with `wait.Until(..., 1s)`).
/// Nothing is dropped: the notifications wait in the listener's buffer.
pub(crate) const PANIC_PAUSE: Duration = Duration::from_secs(1);

/// A listener's queue: an unbounded ring buffer, woken by a condvar (thread consumers) or a
/// `Notify` (task and stream consumers).
pub(crate) struct ListenerQueue<K> {
    state: Mutex<QueueState<K>>,
    cond: Condvar,
    /// With a bounded buffer: signalled when the consumer takes notifications out. A `Notify`,
    /// so the informer waits for room as a future, never blocking a runtime thread.
    space: Notify,
    capacity: Option<usize>,
    notify: Notify,
    /// Adds with `is_in_initial_list` queued and not yet fully handled (client-go
    /// `synctrack.SingleFileTracker`).
    initial_pending: AtomicUsize,
    /// Buffered plus in-flight notifications.
    pending: AtomicUsize,
    /// Mirrors `QueueState::closed`, so a consumer can check it per notification without the lock.
    closed: AtomicBool,
    /// Turns `true` once the consumer will call the handler no more (its loop has ended), or at
    /// close when there is no consumer task or thread.
    finished: tokio::sync::watch::Sender<bool>,
    /// Whether a task or thread of ours consumes this queue (not so for a `subscribe` stream,
    /// whose queue is finished once closed).
    has_consumer: AtomicBool,
    /// The thread that calls the handler: its own, or the informer's shared handler thread.
    consumer_thread: std::sync::OnceLock<std::thread::ThreadId>,
    /// Turns `true` at close (see [`ListenerQueue::wait_finished`]).
    closed_signal: tokio::sync::watch::Sender<bool>,
}

/// Marks a listener's consumer finished when dropped: at the end of its loop, or when its task
/// or thread is dropped without running.
struct FinishGuard<K>(Arc<ListenerQueue<K>>);

impl<K> Drop for FinishGuard<K> {
    fn drop(&mut self) {
        self.0.consumer_finished();
    }
}

struct QueueState<K> {
    buf: VecDeque<Note<K>>,
    closed: bool,
}

impl<K> ListenerQueue<K> {
    fn new(capacity: Option<usize>) -> Self {
        let capacity = capacity.map(|c| c.max(1));
        Self {
            state: Mutex::new(QueueState {
                buf: VecDeque::with_capacity(
                    capacity.unwrap_or(INITIAL_BUFFER).min(INITIAL_BUFFER),
                ),
                closed: false,
            }),
            cond: Condvar::new(),
            space: Notify::new(),
            capacity,
            notify: Notify::new(),
            initial_pending: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            finished: tokio::sync::watch::channel(false).0,
            has_consumer: AtomicBool::new(false),
            consumer_thread: std::sync::OnceLock::new(),
            closed_signal: tokio::sync::watch::channel(false).0,
        }
    }

    /// The consumer has ended: the handler will be called no more.
    fn consumer_finished(&self) {
        self.finished.send_replace(true);
    }

    /// Waits until the handler will be called no more: the consumer has ended (see
    /// [`consumer_finished`](Self::consumer_finished)). Asked from the thread that calls the
    /// handler (the handler itself on its own thread, or any handler on the shared handler
    /// thread), waiting for its consumer to end would wait on the waiter (a deadlock): that
    /// thread is busy with the caller, so the handler is not mid-call, and it checks the queue
    /// before each call; so it waits only for the queue to close. The handler is dropped when
    /// the thread gets back to it.
    pub(crate) async fn wait_finished(&self) {
        if self.consumer_thread.get() == Some(&std::thread::current().id()) {
            let mut closed = self.closed_signal.subscribe();
            // The sender lives in `self`.
            let _ = closed.wait_for(|c| *c).await;
            return;
        }
        let mut rx = self.finished.subscribe();
        let _ = rx.wait_for(|f| *f).await;
    }

    /// Queues a notification, ignoring any bound, and wakes the consumer: the replay of the
    /// cache to a late handler (done before its consumer may be running). The informer's pops
    /// queue an unbounded listener's notifications with [`push_unwoken`](Self::push_unwoken).
    pub(crate) fn push(&self, ev: Note<K>) {
        if self.push_unwoken(ev) {
            self.wake_consumer();
        }
    }

    /// [`push`](Self::push) without waking the consumer: true if the notification was queued
    /// (the queue is open), and the caller then owes the consumer a
    /// [`wake_consumer`](Self::wake_consumer).
    fn push_unwoken(&self, ev: Note<K>) -> bool {
        self.reserve(&ev);
        let mut st = self.state.lock();
        if st.closed {
            drop(st);
            self.finished(&ev);
            return false;
        }
        st.buf.push_back(ev);
        true
    }

    /// Counts a notification as pending before it is in the buffer: a bounded listener's
    /// notifications are reserved under the FIFO lock and delivered after it is released, and
    /// `has_synced` must not see the gap.
    fn reserve(&self, ev: &Note<K>) {
        if ev.is_initial_add() {
            self.initial_pending.fetch_add(1, Ordering::AcqRel);
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
    }

    /// Buffers a reserved notification once the bounded buffer has room (back-pressure), or
    /// drops it if the listener closes first. Returns the notification while it must wait, so
    /// a dropped [`Reservation`] still accounts for it.
    fn try_push_reserved(&self, ev: Note<K>) -> Result<(), Note<K>> {
        let mut st = self.state.lock();
        if st.closed {
            drop(st);
            self.finished(&ev);
            return Ok(());
        }
        if st.buf.len() >= self.capacity.unwrap_or(usize::MAX) {
            return Err(ev);
        }
        st.buf.push_back(ev);
        drop(st);
        self.wake_consumer();
        Ok(())
    }

    fn wake_consumer(&self) {
        self.cond.notify_one();
        self.notify.notify_one();
    }

    /// After a handler panic: waits [`PANIC_PAUSE`] on the consumer's thread, or less if the
    /// listener closes.
    fn pause_blocking(&self) {
        let deadline = std::time::Instant::now() + PANIC_PAUSE;
        let mut st = self.state.lock();
        while !st.closed && !self.cond.wait_until(&mut st, deadline).timed_out() {}
    }

    /// After a handler panic: a future that waits [`PANIC_PAUSE`], or less if the listener
    /// closes. The handler thread runs no timer of its own, so a short-lived thread sleeps for
    /// it; panics are rare and this runs at most once a second per listener.
    async fn pause(&self) {
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        let timer = std::thread::Builder::new()
            .name("informer-handler-pause".into())
            .spawn(move || {
                std::thread::sleep(PANIC_PAUSE);
                let _ = tx.send(());
            });
        if timer.is_err() {
            return;
        }
        let mut rx = rx.fuse();
        loop {
            let notified = self.notify.notified();
            if self.is_closed() {
                return;
            }
            futures::select! {
                _ = rx => return,
                () = notified.fuse() => {}
            }
        }
    }

    /// Marks one notification handled.
    pub(crate) fn finished(&self, ev: &Note<K>) {
        if ev.is_initial_add() {
            self.initial_pending.fetch_sub(1, Ordering::AcqRel);
        }
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    /// Marks notifications dropped unhandled (closed listener) as finished.
    fn finished_all(&self, dropped: impl IntoIterator<Item = Note<K>>) {
        for ev in dropped {
            self.finished(&ev);
        }
    }

    pub(crate) fn close(&self) {
        let dropped: Vec<_> = {
            let mut st = self.state.lock();
            st.closed = true;
            self.closed.store(true, Ordering::Release);
            st.buf.drain(..).collect()
        };
        self.finished_all(dropped);
        self.closed_signal.send_replace(true);
        if !self.has_consumer.load(Ordering::Acquire) {
            self.consumer_finished();
        }
        self.cond.notify_all();
        self.space.notify_waiters();
        self.space.notify_one();
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Blocks the calling thread until notifications are buffered; takes them all. `None` once
    /// closed.
    fn take_blocking(&self, into: &mut VecDeque<Note<K>>) -> bool {
        let mut st = self.state.lock();
        loop {
            if st.closed {
                return false;
            }
            if !st.buf.is_empty() {
                if self.capacity.is_some() {
                    // Bounded: take one at a time, so buffered plus in hand never exceeds the
                    // bound by more than the one being handled.
                    into.extend(st.buf.pop_front());
                    drop(st);
                    self.space.notify_one();
                    return true;
                } else {
                    // Swap buffers: the producer keeps pushing into a fresh ring while this
                    // thread works through the batch without holding the lock.
                    std::mem::swap(&mut st.buf, into);
                }
                return true;
            }
            self.cond.wait(&mut st);
        }
    }

    /// Takes every buffered notification without blocking: `None` once closed, else whether
    /// anything was taken. The task consumer's half of [`take_blocking`](Self::take_blocking).
    fn try_take(&self, into: &mut VecDeque<Note<K>>) -> Option<bool> {
        let mut st = self.state.lock();
        if st.closed {
            return None;
        }
        if st.buf.is_empty() {
            return Some(false);
        }
        std::mem::swap(&mut st.buf, into);
        Some(true)
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Takes the next notification without blocking; `Err(())` once closed.
    pub(crate) fn try_pop(&self) -> Result<Option<Note<K>>, ()> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(());
        }
        let ev = st.buf.pop_front();
        if ev.is_some() && self.capacity.is_some() {
            drop(st);
            self.space.notify_one();
        }
        Ok(ev)
    }

    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    pub(crate) fn initial_pending(&self) -> usize {
        self.initial_pending.load(Ordering::Acquire)
    }
}

/// What distributing popped deltas leaves for the informer's loop, once the FIFO lock is
/// released: the notifications of bounded listeners to deliver, and the consumers of unbounded
/// listeners that were sent notifications and not woken yet.
///
/// The wakes wait so that the loop can send several pops' notifications with one wake (see
/// [`HeldWakes`]). Dropped, it wakes whoever it still owes, so no wake is ever lost.
pub(crate) struct Deliveries<K> {
    reservations: Vec<Reservation<K>>,
    unwoken: Vec<Arc<ListenerQueue<K>>>,
    /// A listener with this many notifications pending is woken at once, not held.
    wake_at: usize,
}

impl<K> Deliveries<K> {
    fn new(wake_at: usize) -> Self {
        Self {
            reservations: Vec::new(),
            unwoken: Vec::new(),
            wake_at,
        }
    }

    /// After a notification was queued for `queue`: its consumer is woken now if that many
    /// are waiting for it, or later.
    fn wake_later(&mut self, queue: &Arc<ListenerQueue<K>>) {
        if queue.pending() >= self.wake_at {
            queue.wake_consumer();
        } else {
            owe(&mut self.unwoken, queue);
        }
    }
}

impl<K> Drop for Deliveries<K> {
    fn drop(&mut self) {
        wake_all(&mut self.unwoken);
    }
}

/// Adds `queue` to `owed` unless it is there already (a handful of listeners: a scan is cheaper
/// than a set).
fn owe<K>(owed: &mut Vec<Arc<ListenerQueue<K>>>, queue: &Arc<ListenerQueue<K>>) {
    if !owed.iter().any(|q| Arc::ptr_eq(q, queue)) {
        owed.push(queue.clone());
    }
}

fn wake_all<K>(owed: &mut Vec<Arc<ListenerQueue<K>>>) {
    for q in owed.drain(..) {
        q.wake_consumer();
    }
}

/// Pops this many in a row at most before the handlers held back by [`HeldWakes`] are woken.
const MAX_HELD_POPS: u32 = 64;
/// And this long at most, so that slow pops (a compact cache's decode, an in-order batch of a
/// thousand writes) do not hold the handlers back longer.
const MAX_HELD_FOR: Duration = Duration::from_millis(2);
/// A listener with this many notifications pending is woken at once, even within a pop (a
/// relist, or an in-order batch, notifies thousands in one pop). With a compact cache, half its
/// `decoded_backlog` if that is less, so that holding a wake never makes a handler that keeps up
/// look behind (which would send it snapshots to decode).
pub(crate) const WAKE_AT: usize = 32;

/// The informer loop's consumers to wake, gathered over consecutive pops.
///
/// A consumer whose handler is faster than the pops (a compact cache decodes each object as it
/// is popped; a cold sync pops thousands in a row) would otherwise empty its buffer after every
/// notification, park its thread, and have to be woken for the next one: a futex call and two
/// context switches per object, a fifth of a Compact sync's CPU. Held, the wakes go out when the
/// FIFO has nothing ready (the next pop would wait), before a bounded listener's delivery, which
/// may wait, at the end of the pop that reaches [`MAX_HELD_POPS`] pops or [`MAX_HELD_FOR`] since
/// the first one held, or as soon as a listener has [`WAKE_AT`] notifications pending. So a
/// handler hears of the last change before the FIFO runs dry at once, and of the others at most
/// a few milliseconds (and the pop in progress) later. Dropped, it wakes everyone it holds.
pub(crate) struct HeldWakes<K> {
    owed: Vec<Arc<ListenerQueue<K>>>,
    pops: u32,
    since: Option<std::time::Instant>,
    max_pops: u32,
    max_for: Duration,
}

impl<K> Default for HeldWakes<K> {
    fn default() -> Self {
        Self::with_limits(MAX_HELD_POPS, MAX_HELD_FOR)
    }
}

impl<K> HeldWakes<K> {
    fn with_limits(max_pops: u32, max_for: Duration) -> Self {
        Self {
            owed: Vec::new(),
            pops: 0,
            since: None,
            max_pops,
            max_for,
        }
    }

    /// Takes over the wakes `deliveries` owes, waking them all at once if a limit is reached or
    /// it has bounded listeners' notifications; returns those, to deliver.
    pub(crate) fn hold(&mut self, mut deliveries: Deliveries<K>) -> Vec<Reservation<K>> {
        let reservations = std::mem::take(&mut deliveries.reservations);
        for q in deliveries.unwoken.drain(..) {
            owe(&mut self.owed, &q);
        }
        if !self.owed.is_empty() {
            self.pops += 1;
            let since = *self.since.get_or_insert_with(std::time::Instant::now);
            if !reservations.is_empty()
                || self.pops >= self.max_pops
                || since.elapsed() >= self.max_for
            {
                self.wake();
            }
        }
        reservations
    }

    /// Wakes every consumer held.
    pub(crate) fn wake(&mut self) {
        wake_all(&mut self.owed);
        self.pops = 0;
        self.since = None;
    }
}

impl<K> Drop for HeldWakes<K> {
    fn drop(&mut self) {
        self.wake();
    }
}

/// A notification for a bounded listener, counted as pending under the FIFO lock and delivered
/// after it is released (see [`Processor::distribute`]). Dropped undelivered (the informer
/// stopped while it waited for room), it is accounted as finished.
pub(crate) struct Reservation<K> {
    listener: Arc<Listener<K>>,
    ev: Option<Note<K>>,
}

impl<K> Reservation<K> {
    /// Waits for room in the listener's buffer and buffers the notification.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it completes, the notification is accounted as finished.
    pub(crate) async fn deliver(mut self) {
        let queue = self.listener.queue.clone();
        while let Some(ev) = self.ev.take() {
            let space = queue.space.notified();
            tokio::pin!(space);
            space.as_mut().enable();
            if let Err(ev) = queue.try_push_reserved(ev) {
                self.ev = Some(ev);
                space.await;
            }
        }
    }
}

impl<K> Drop for Reservation<K> {
    fn drop(&mut self) {
        if let Some(ev) = self.ev.take() {
            self.listener.queue.finished(&ev);
        }
    }
}

/// A handler's task, sent to the handler thread to run there.
type HandlerTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A handler thread to wait for: its handle, and a signal that its body has returned or
/// unwound (its sender is dropped then), so the wait is a future and a caller can stop waiting
/// for a thread that is itself waiting (a handler that shuts its informer down).
pub(crate) struct HandlerThread {
    pub(crate) handle: JoinHandle<()>,
    pub(crate) exited: tokio::sync::oneshot::Receiver<()>,
}

impl HandlerThread {
    /// Spawns `body` on a thread named `name`.
    fn spawn(name: String, body: impl FnOnce() + Send + 'static) -> std::io::Result<Self> {
        let (exit, exited) = tokio::sync::oneshot::channel::<()>();
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            // Dropped last, once `body` has returned or unwound.
            let _exit = exit;
            body();
        })?;
        Ok(Self { handle, exited })
    }
}

/// The informer's handler thread: an OS thread of its own running a small single-threaded
/// executor, where every handler that does not ask for a dedicated thread runs as a task.
///
/// One thread for all of them, because waking a thread per handler per notification is what
/// costs (~4 µs of context switch each: 8 handlers used 1.3-1.4x the CPU of one); handing a
/// notification to a task on an already awake thread costs next to nothing. Its own thread, not
/// the caller's runtime, because there the handlers would queue behind the reflector's decoding
/// (tokio does not preempt) and fall behind a fast watch. Not a tokio runtime, so a handler
/// runs outside any runtime context exactly as on a plain thread: `blocking_send` and friends
/// work, and a `tokio::spawn` from a handler fails loudly instead of landing on a runtime that
/// nothing else drives.
struct Dispatcher {
    tasks: futures::channel::mpsc::UnboundedSender<HandlerTask>,
    thread: HandlerThread,
}

impl Dispatcher {
    fn start(name: String) -> std::io::Result<Self> {
        let (tasks, mut incoming) = futures::channel::mpsc::unbounded::<HandlerTask>();
        let thread = HandlerThread::spawn(name, move || {
            let mut pool = futures::executor::LocalPool::new();
            let spawner = pool.spawner();
            pool.run_until(async {
                // Ends when the informer stops (the sender is dropped).
                while let Some(task) = incoming.next().await {
                    if spawner.spawn_local(task).is_err() {
                        break;
                    }
                }
            });
            // Every queue is closed by now: let the tasks notice, account for what they held
            // and finish; drop whatever still waits (a handler registered as the informer
            // stopped, whose registration failed).
            pool.run_until_stalled();
        })?;
        Ok(Self { tasks, thread })
    }

    /// Runs `task` on the handler thread.
    fn spawn(&self, task: HandlerTask) {
        // Only fails once the thread has stopped; the task's queue is closed by then.
        let _ = self.tasks.unbounded_send(task);
    }

    fn stop(self) -> HandlerThread {
        drop(self.tasks);
        self.thread
    }
}

/// Lets the other tasks of the handler thread run before going on.
async fn yield_now() {
    let mut yielded = false;
    futures::future::poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await;
}

/// One registered consumer: its queue, its resync schedule, and its handler's consumer.
pub(crate) struct Listener<K> {
    pub(crate) id: u64,
    pub(crate) queue: Arc<ListenerQueue<K>>,
    requested_resync: Duration,
    resync: Mutex<ResyncState>,
    /// A dedicated thread, to join.
    thread: Mutex<Option<HandlerThread>>,
    /// Set when the listener is due for the resync the informer is running now.
    syncing: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct ResyncState {
    period: Duration,
    next: Option<Instant>,
}

impl<K> Listener<K> {
    /// Closes the queue; hands back a dedicated handler thread to join.
    pub(crate) fn stop(&self) -> Option<HandlerThread> {
        self.queue.close();
        self.thread.lock().take()
    }
}

impl<K> Listener<K> {
    pub(crate) fn new(
        id: u64,
        requested_resync: Duration,
        resync_period: Duration,
        capacity: Option<usize>,
    ) -> Arc<Self> {
        Arc::new(Self {
            id,
            queue: Arc::new(ListenerQueue::new(capacity)),
            requested_resync,
            resync: Mutex::new(ResyncState {
                period: resync_period,
                next: None,
            }),
            thread: Mutex::new(None),
            // client-go `sharedProcessor.addListener` registers every listener as syncing: until
            // the first resync check, it hears of same-version updates (a relist's unchanged
            // objects) too; an informer without resync never checks, so its listeners always do.
            syncing: AtomicBool::new(true),
        })
    }

    /// Starts the handler as a task on the informer's handler thread.
    fn spawn_task(
        &self,
        mut handler: Box<dyn ResourceEventHandler<K>>,
        name: String,
        span: tracing::Span,
        dispatcher: &Dispatcher,
    ) where
        K: Send + Sync + 'static,
    {
        let queue = self.queue.clone();
        self.queue.has_consumer.store(true, Ordering::Release);
        let _ = self
            .queue
            .consumer_thread
            .set(dispatcher.thread.handle.thread().id());
        let finished = FinishGuard(queue.clone());
        let task = async move {
            let mut batch = VecDeque::with_capacity(INITIAL_BUFFER);
            let mut slow = SlowHandlerWarning::default();
            loop {
                // Registered before looking, so a push between the look and the wait is not
                // missed (`notify_one` leaves a permit when nobody waits).
                let notified = queue.notified();
                match queue.try_take(&mut batch) {
                    None => break,
                    Some(false) => {
                        notified.await;
                        continue;
                    }
                    Some(true) => {}
                }
                // One clock read per call: a call's end is the next call's start.
                let mut slice = std::time::Instant::now();
                let mut last = slice;
                while let Some(ev) = batch.pop_front() {
                    if !queue.is_closed() {
                        let panicked = ev
                            .event()
                            .is_some_and(|ev| handle_one(&mut *handler, &ev, &name));
                        let now = std::time::Instant::now();
                        slow.check(now - last, &name);
                        last = now;
                        if panicked {
                            queue.finished(&ev);
                            queue.pause().await;
                            slice = std::time::Instant::now();
                            last = slice;
                            continue;
                        }
                    }
                    queue.finished(&ev);
                    // A long batch must not keep the other handlers on this thread waiting.
                    if last - slice >= HANDLER_SLICE {
                        yield_now().await;
                        slice = std::time::Instant::now();
                        last = slice;
                    }
                }
            }
            // Closed: whatever was taken but not handled is dropped, as client-go drops the
            // pending buffer of a stopped listener.
            queue.finished_all(batch.drain(..));
            drop(handler);
            drop(finished);
        };
        dispatcher.spawn(Box::pin(task.instrument(span)));
    }

    /// Starts the handler on an OS thread of its own.
    fn spawn_thread(
        &self,
        mut handler: Box<dyn ResourceEventHandler<K>>,
        name: String,
        span: tracing::Span,
    ) -> std::io::Result<()>
    where
        K: Send + Sync + 'static,
    {
        let queue = self.queue.clone();
        self.queue.has_consumer.store(true, Ordering::Release);
        let finished = FinishGuard(queue.clone());
        let spawned = HandlerThread::spawn(name.clone(), move || {
            // Before the first call, so that the handler may ask about itself from it.
            let _ = queue.consumer_thread.set(std::thread::current().id());
            let _span = span.entered();
            let mut batch = VecDeque::with_capacity(INITIAL_BUFFER);
            while queue.take_blocking(&mut batch) {
                while let Some(ev) = batch.pop_front() {
                    let panicked = !queue.is_closed()
                        && ev
                            .event()
                            .is_some_and(|ev| handle_one(&mut *handler, &ev, &name));
                    queue.finished(&ev);
                    if panicked {
                        queue.pause_blocking();
                    }
                }
            }
            queue.finished_all(batch.drain(..));
            drop(handler);
            drop(finished);
        });
        *self.thread.lock() = Some(spawned?);
        Ok(())
    }

    fn should_resync(&self, now: Instant) -> bool {
        let mut r = self.resync.lock();
        if r.period.is_zero() {
            return false;
        }
        match r.next {
            Some(next) if now < next => false,
            _ => {
                r.next = Some(now + r.period.min(crate::FAR_FUTURE));
                true
            }
        }
    }

    fn set_resync_period(&self, period: Duration) {
        self.resync.lock().period = period;
    }

    pub(crate) fn start_resync_clock(&self, now: Instant) {
        let mut r = self.resync.lock();
        if !r.period.is_zero() && r.next.is_none() {
            r.next = Some(now + r.period.min(crate::FAR_FUTURE));
        }
    }
}

/// The informer's fan-out (client-go `sharedProcessor`).
pub(crate) struct Processor<K> {
    listeners: RwLock<Vec<Arc<Listener<K>>>>,
    next_id: AtomicU64,
    /// Started with the first handler that runs as a task.
    dispatcher: Mutex<Option<Dispatcher>>,
    /// Dedicated threads of handlers removed while the informer ran, which may still be in a
    /// call: the informer's stop waits for them too ([`stop_all`](Self::stop_all)).
    removed: Mutex<Vec<HandlerThread>>,
    /// Set by [`stop_all`](Self::stop_all): no listener or handler thread may start afterwards.
    stopped: AtomicBool,
    /// See [`WAKE_AT`].
    wake_at: usize,
}

impl<K> Processor<K> {
    /// A processor whose listeners are woken at once with `wake_at` notifications pending
    /// (see [`WAKE_AT`]).
    pub(crate) fn new(wake_at: usize) -> Self {
        Self {
            listeners: RwLock::new(Vec::new()),
            next_id: AtomicU64::new(1),
            dispatcher: Mutex::new(None),
            removed: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            wake_at: wake_at.max(1),
        }
    }

    /// Where a pop gathers the deliveries and wakes its notifications owe.
    pub(crate) fn deliveries(&self) -> Deliveries<K> {
        Deliveries::new(self.wake_at)
    }

    /// Starts `handler` as `listener`'s consumer: on a thread of its own, or as a task on the
    /// informer's handler thread (`thread_name`), started with the first such handler.
    ///
    /// # Errors
    ///
    /// [`InformerError::Stopped`] after [`stop_all`](Self::stop_all);
    /// [`InformerError::HandlerThread`] when the thread cannot be spawned.
    pub(crate) fn start_handler(
        &self,
        listener: &Listener<K>,
        handler: Box<dyn ResourceEventHandler<K>>,
        name: String,
        dedicated_thread: bool,
        span: &tracing::Span,
        thread_name: impl FnOnce() -> String,
    ) -> Result<(), InformerError>
    where
        K: Send + Sync + 'static,
    {
        // Checked under the dispatcher's lock, which `stop_all` takes after setting the flag, so
        // no handler thread starts after the informer stopped.
        let mut dispatcher = self.dispatcher.lock();
        if self.stopped.load(Ordering::Acquire) {
            return Err(InformerError::Stopped);
        }
        if dedicated_thread {
            return listener
                .spawn_thread(handler, name, span.clone())
                .map_err(InformerError::HandlerThread);
        }
        let d = match dispatcher.take() {
            Some(d) => d,
            None => Dispatcher::start(thread_name()).map_err(InformerError::HandlerThread)?,
        };
        listener.spawn_task(handler, name, span.clone(), &d);
        *dispatcher = Some(d);
        Ok(())
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds a listener; after [`stop_all`](Self::stop_all) closes it instead and fails.
    pub(crate) fn add(&self, l: Arc<Listener<K>>) -> Result<(), InformerError> {
        let mut listeners = self.listeners.write();
        if self.stopped.load(Ordering::Acquire) {
            drop(listeners);
            drop(l.stop());
            return Err(InformerError::Stopped);
        }
        listeners.push(l);
        Ok(())
    }

    /// Removes this very listener (matched by identity, never by id: ids are per informer)
    /// and stops it, without waiting (removal may be called from inside a handler). A dedicated
    /// thread it had is kept for the informer's stop to wait for.
    pub(crate) fn remove(&self, listener: &Arc<Listener<K>>) {
        let mut g = self.listeners.write();
        let Some(pos) = g.iter().position(|l| Arc::ptr_eq(l, listener)) else {
            return;
        };
        // Kept with the listeners' lock held, which `stop_all` takes before it takes these
        // threads: a stop cannot come between, miss the thread, and return while it is in a
        // call.
        if let Some(thread) = g.remove(pos).stop() {
            let mut kept = self.removed.lock();
            kept.retain(|t| !t.handle.is_finished());
            kept.push(thread);
        }
    }

    pub(crate) fn all(&self) -> Vec<Arc<Listener<K>>> {
        self.listeners.read().clone()
    }

    /// Sends a notification to every listener, or for a resync only to those due. Unbounded
    /// listeners have it queued at once (a push never waits), their consumers woken through
    /// `deferred` (see [`HeldWakes`]); for a bounded one it is reserved into
    /// `deferred`, for the informer to deliver once the FIFO lock is released, so a full bounded
    /// buffer holds back the informer as a future, never a runtime thread with the lock held.
    /// The targets are fixed here, under the lock that orders deltas and late registrations.
    pub(crate) fn distribute(
        &self,
        ev: impl Into<Note<K>>,
        is_sync: bool,
        deferred: &mut Deliveries<K>,
    ) {
        let ev = ev.into();
        let listeners = self.listeners.read();
        let mut targets = listeners
            .iter()
            .filter(|l| !is_sync || l.syncing.load(Ordering::Acquire))
            .peekable();
        let mut ev = Some(ev);
        while let Some(l) = targets.next() {
            // Cloned for all but the last target.
            let this = if targets.peek().is_none() {
                ev.take()
            } else {
                ev.clone()
            };
            let Some(ev) = this else { return };
            Self::deliver(l, ev, deferred);
        }
    }

    /// Whether a listener has `backlog` or more notifications buffered or being handled.
    pub(crate) fn any_behind(&self, backlog: usize) -> bool {
        self.listeners
            .read()
            .iter()
            .any(|l| l.queue.pending.load(Ordering::Acquire) >= backlog)
    }

    /// [`distribute`](Self::distribute) for a change a compact cache holds as snapshots: a
    /// listener with `backlog` or more notifications pending gets `stored`, whose objects wait
    /// in its buffer compressed and are decoded when its handler is called; the others get the
    /// decoded event `ready` makes (once), as usual. So a slow handler's buffer holds a bounded
    /// number of decoded objects, however far behind it falls (issue #12 part 4), and a handler
    /// that keeps up costs no extra decode.
    pub(crate) fn distribute_stored(
        &self,
        stored: StoredEvent<K>,
        ready: impl FnOnce() -> Event<K>,
        is_sync: bool,
        backlog: usize,
        deferred: &mut Deliveries<K>,
    ) {
        let hearing = |l: &&Arc<Listener<K>>| !is_sync || l.syncing.load(Ordering::Acquire);
        let behind = |l: &Arc<Listener<K>>| l.queue.pending.load(Ordering::Acquire) >= backlog;
        // Decoded outside the listeners lock, which `add_event_handler` and
        // `remove_event_handler` wait for. A listener that catches up in between gets the
        // snapshots if no one else wanted the decoded event.
        let keeping_up = self
            .listeners
            .read()
            .iter()
            .filter(hearing)
            .any(|l| !behind(l));
        let made = keeping_up.then(ready);
        for l in self.listeners.read().iter().filter(hearing) {
            let note = match &made {
                Some(ev) if !behind(l) => Note::Ready(ev.clone()),
                _ => Note::Stored(stored.clone()),
            };
            Self::deliver(l, note, deferred);
        }
    }

    /// Queues `ev` for `l` at once, leaving its consumer to be woken through `deferred`, or
    /// (bounded) reserves it into `deferred`.
    fn deliver(l: &Arc<Listener<K>>, ev: Note<K>, deferred: &mut Deliveries<K>) {
        if l.queue.capacity.is_some() {
            l.queue.reserve(&ev);
            deferred.reservations.push(Reservation {
                listener: l.clone(),
                ev: Some(ev),
            });
        } else if l.queue.push_unwoken(ev) {
            deferred.wake_later(&l.queue);
        }
    }

    /// client-go `shouldResync`: marks which listeners are due now; true if any is.
    pub(crate) fn should_resync(&self) -> bool {
        let now = Instant::now();
        let mut any = false;
        for l in self.listeners.read().iter() {
            let due = l.should_resync(now);
            l.syncing.store(due, Ordering::Release);
            any |= due;
        }
        any
    }

    /// client-go `resyncCheckPeriodChanged`.
    pub(crate) fn resync_check_period_changed(&self, check: Duration) {
        for l in self.listeners.read().iter() {
            l.set_resync_period(determine_resync_period(l.requested_resync, check));
        }
    }

    /// Closes every listener and stops the handler thread; hands back the threads to join.
    /// Listeners and handlers added afterwards are refused.
    pub(crate) fn stop_all(&self) -> Vec<HandlerThread> {
        let ls = {
            let mut listeners = self.listeners.write();
            self.stopped.store(true, Ordering::Release);
            std::mem::take(&mut *listeners)
        };
        let mut threads: Vec<_> = ls.iter().filter_map(|l| l.stop()).collect();
        threads.extend(self.dispatcher.lock().take().map(Dispatcher::stop));
        threads.append(&mut self.removed.lock());
        threads
    }
}

/// client-go `determineResyncPeriod`: a handler cannot resync more often than the informer
/// checks, and an informer that never checks resyncs no handler.
pub(crate) fn determine_resync_period(desired: Duration, check: Duration) -> Duration {
    if desired.is_zero() {
        return Duration::ZERO;
    }
    if check.is_zero() {
        tracing::warn!(
            requested = ?desired,
            "resync requested but the informer's resync check period is 0; this handler will not resync"
        );
        return Duration::ZERO;
    }
    desired.max(check)
}

/// Calls the handler for one notification; a panic is logged and reported (`true`), and the
/// caller pauses the listener for [`PANIC_PAUSE`] before the next notification, so a handler
/// that panics on everything cannot spin a core and flood the logs.
fn handle_one<K: 'static>(
    handler: &mut dyn ResourceEventHandler<K>,
    ev: &Event<K>,
    name: &str,
) -> bool {
    let res = std::panic::catch_unwind(AssertUnwindSafe(|| ev.dispatch(handler)));
    match res {
        Ok(()) => false,
        Err(panic) => {
            tracing::error!(
                handler = %name,
                panic = %panic_message(&*panic),
                pause = ?PANIC_PAUSE,
                "event handler panicked; its next notification follows after a pause"
            );
            true
        }
    }
}

/// How long a handler task works through its batch before letting the other handlers run.
const HANDLER_SLICE: Duration = Duration::from_millis(2);

/// A handler call this long on the handler thread holds up every other handler there.
const SLOW_HANDLER_CALL: Duration = Duration::from_millis(100);

/// Warns, once per handler, that a handler running as a task blocks the handler thread.
#[derive(Default)]
struct SlowHandlerWarning {
    warned: bool,
}

impl SlowHandlerWarning {
    fn check(&mut self, took: Duration, name: &str) {
        if took >= SLOW_HANDLER_CALL && !self.warned {
            self.warned = true;
            tracing::warn!(
                handler = %name,
                took = ?took,
                "event handler call blocked the informer's handler thread, delaying its other \
                 handlers; register handlers that block with HandlerOptions::dedicated_thread()"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resync_period_is_raised_to_the_check_period_and_zero_stays_zero() {
        let s = Duration::from_secs;
        assert_eq!(determine_resync_period(s(0), s(10)), s(0));
        assert_eq!(determine_resync_period(s(5), s(0)), s(0));
        assert_eq!(determine_resync_period(s(5), s(10)), s(10));
        assert_eq!(determine_resync_period(s(30), s(10)), s(30));
    }

    use k8s_openapi::api::core::v1::ConfigMap;

    fn add() -> Note<ConfigMap> {
        Note::Ready(Event::Add {
            obj: Arc::new(ConfigMap::default()),
            is_in_initial_list: false,
        })
    }

    /// Whether the queue's task consumer has been woken (a `notify_one` with no waiter leaves
    /// a permit, which the next `notified()` takes at once).
    fn woken(q: &ListenerQueue<ConfigMap>) -> bool {
        q.notified().now_or_never().is_some()
    }

    /// One pop's deliveries: `n` notifications for the unbounded listener `l`.
    fn pop(l: &Arc<Listener<ConfigMap>>, n: usize) -> Deliveries<ConfigMap> {
        let mut d = Deliveries::new(usize::MAX);
        for _ in 0..n {
            Processor::deliver(l, add(), &mut d);
        }
        d
    }

    #[test]
    fn held_wakes_go_out_after_the_pop_limit_once_per_listener() {
        let l = Listener::<ConfigMap>::new(1, Duration::ZERO, Duration::ZERO, None);
        let mut held = HeldWakes::with_limits(MAX_HELD_POPS, Duration::from_secs(3600));
        for _ in 1..MAX_HELD_POPS {
            assert!(held.hold(pop(&l, 2)).is_empty());
        }
        // Queued and counted, and the consumer still asleep.
        assert_eq!(l.queue.pending(), 2 * (MAX_HELD_POPS as usize - 1));
        assert!(!woken(&l.queue));
        assert_eq!(
            held.owed.len(),
            1,
            "one wake owed per listener, not per notification"
        );
        held.hold(pop(&l, 1));
        assert!(woken(&l.queue));
        assert!(held.owed.is_empty() && held.since.is_none());
        // A pop that notifies nobody starts no count.
        held.hold(Deliveries::new(usize::MAX));
        assert!(held.since.is_none() && held.pops == 0);
    }

    #[test]
    fn held_wakes_go_out_after_the_time_limit() {
        let l = Listener::<ConfigMap>::new(1, Duration::ZERO, Duration::ZERO, None);
        let mut held = HeldWakes::with_limits(u32::MAX, Duration::from_millis(20));
        held.hold(pop(&l, 1));
        assert!(!woken(&l.queue));
        std::thread::sleep(Duration::from_millis(25));
        held.hold(pop(&l, 1));
        assert!(woken(&l.queue));
    }

    #[test]
    fn held_wakes_go_out_when_dropped_or_asked() {
        let l = Listener::<ConfigMap>::new(1, Duration::ZERO, Duration::ZERO, None);
        // Deliveries dropped without being handed on wake what they owe.
        drop(pop(&l, 1));
        assert!(woken(&l.queue));

        let mut held = HeldWakes::default();
        held.hold(pop(&l, 1));
        held.wake();
        assert!(woken(&l.queue));

        held.hold(pop(&l, 1));
        drop(held);
        assert!(woken(&l.queue));
        assert_eq!(l.queue.pending(), 3);
    }

    #[test]
    fn a_bounded_listener_in_the_pop_wakes_the_held_ones_at_once() {
        let unbounded = Listener::<ConfigMap>::new(1, Duration::ZERO, Duration::ZERO, None);
        let bounded = Listener::<ConfigMap>::new(2, Duration::ZERO, Duration::ZERO, Some(4));
        let mut held = HeldWakes::default();
        held.hold(pop(&unbounded, 1));
        let mut d = pop(&unbounded, 1);
        Processor::deliver(&bounded, add(), &mut d);
        // The bounded delivery may wait for room: nobody is held behind it.
        let reservations = held.hold(d);
        assert_eq!(reservations.len(), 1);
        assert!(woken(&unbounded.queue));
        assert!(held.owed.is_empty());
    }

    #[test]
    fn a_closed_listener_is_owed_no_wake() {
        let l = Listener::<ConfigMap>::new(1, Duration::ZERO, Duration::ZERO, None);
        l.stop();
        let d = pop(&l, 3);
        assert!(d.unwoken.is_empty());
        assert_eq!(l.queue.pending(), 0);
        assert!(d.reservations.is_empty());
    }

    #[test]
    fn a_listener_with_enough_pending_is_woken_within_the_pop() {
        let l = Listener::<ConfigMap>::new(1, Duration::ZERO, Duration::ZERO, None);
        let mut d = Deliveries::new(3);
        for _ in 0..2 {
            Processor::deliver(&l, add(), &mut d);
        }
        assert!(!woken(&l.queue));
        Processor::deliver(&l, add(), &mut d);
        assert!(woken(&l.queue));
        // Across pops too: the third notification held wakes it.
        let l = Listener::<ConfigMap>::new(2, Duration::ZERO, Duration::ZERO, None);
        let mut held = HeldWakes::with_limits(u32::MAX, Duration::from_secs(3600));
        for _ in 0..2 {
            let mut d = Deliveries::new(3);
            Processor::deliver(&l, add(), &mut d);
            held.hold(d);
        }
        assert!(!woken(&l.queue));
        let mut d = Deliveries::new(3);
        Processor::deliver(&l, add(), &mut d);
        assert!(woken(&l.queue));
        held.hold(d);
    }
}
