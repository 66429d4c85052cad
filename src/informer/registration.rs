//! Handles to registered handlers and subscriptions.

use std::{
    pin::Pin,
    sync::{Arc, Weak},
    task::{Context, Poll},
};

use futures::{Stream, StreamExt, stream::BoxStream};
use kube::Resource;

use super::{
    Inner,
    handler::Event,
    processor::{Listener, Note},
};

/// A registered handler (client-go `ResourceEventHandlerRegistration`).
///
/// Dropping it does not remove the handler; call [`remove`](Self::remove) or
/// [`SharedIndexInformer::remove_event_handler`](super::SharedIndexInformer::remove_event_handler).
pub struct ResourceEventHandlerRegistration<K> {
    listener: Arc<Listener<K>>,
    informer: Weak<Inner<K>>,
}

impl<K> std::fmt::Debug for ResourceEventHandlerRegistration<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceEventHandlerRegistration")
            .field("id", &self.listener.id)
            .field("pending", &self.listener.queue.pending())
            .finish()
    }
}

impl<K> ResourceEventHandlerRegistration<K>
where
    K: Resource + Send + Sync + 'static,
{
    pub(crate) fn new(listener: Arc<Listener<K>>, informer: Weak<Inner<K>>) -> Self {
        Self { listener, informer }
    }

    #[cfg(test)]
    pub(crate) fn listener_for_tests(&self) -> Arc<Listener<K>> {
        self.listener.clone()
    }

    /// Whether this registration was made on the informer `inner`.
    pub(crate) fn belongs_to(&self, inner: &Arc<Inner<K>>) -> bool {
        std::ptr::eq(self.informer.as_ptr(), Arc::as_ptr(inner))
    }

    /// True once the informer has synced and this handler has handled every add of the initial
    /// list (or of its replay, when added late).
    pub fn has_synced(&self) -> bool {
        self.informer.upgrade().is_some_and(|i| i.has_synced())
            && self.listener.queue.initial_pending() == 0
    }

    /// Waits until this handler will be called no more (after its removal, or once its informer
    /// has stopped). On the thread that calls the handler it waits only for the removal or
    /// the stop (see
    /// [`shut_down_event_handler`](crate::SharedIndexInformer::shut_down_event_handler)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_finished(&self) {
        self.listener.queue.wait_finished().await;
    }

    /// Notifications buffered for this handler and not yet handled.
    pub fn pending(&self) -> usize {
        self.listener.queue.pending()
    }

    /// Removes the handler from its informer.
    pub fn remove(&self) {
        if let Some(i) = self.informer.upgrade() {
            i.remove_listener(&self.listener);
        }
    }
}

/// A subscription's notifications as an async [`Stream`]; it ends when the informer stops.
/// Dropping it unsubscribes.
pub struct EventStream<K> {
    registration: ResourceEventHandlerRegistration<K>,
    inner: BoxStream<'static, Event<K>>,
}

impl<K> EventStream<K>
where
    K: Resource + Send + Sync + 'static,
{
    pub(crate) fn new(listener: Arc<Listener<K>>, informer: Weak<Inner<K>>) -> Self {
        let queue = listener.queue.clone();
        // A notification counts as handled once the consumer asks for the next one, so
        // `has_synced` means the consumer has been through the whole initial list.
        let inner = futures::stream::unfold((queue, None::<Note<K>>), |(queue, prev)| async move {
            if let Some(note) = prev {
                queue.finished(&note);
            }
            let (ev, note) = loop {
                let notified = queue.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                match queue.try_pop() {
                    Err(()) => return None,
                    Ok(Some(note)) => {
                        // A snapshot that does not decode (logged and reported) is skipped.
                        match note.event().map(std::borrow::Cow::into_owned) {
                            Some(ev) => break (ev, note),
                            None => queue.finished(&note),
                        }
                    }
                    Ok(None) => notified.await,
                }
            };
            Some((ev, (queue, Some(note))))
        })
        .boxed();
        Self {
            registration: ResourceEventHandlerRegistration::new(listener, informer),
            inner,
        }
    }

    /// The subscription's registration: `has_synced`, `pending`.
    pub fn registration(&self) -> &ResourceEventHandlerRegistration<K> {
        &self.registration
    }
}

impl<K> Stream for EventStream<K> {
    type Item = Event<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

impl<K> Drop for EventStream<K> {
    fn drop(&mut self) {
        if let Some(i) = self.registration.informer.upgrade() {
            i.remove_listener(&self.registration.listener);
        }
    }
}
