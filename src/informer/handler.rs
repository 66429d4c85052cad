//! Event handlers: what an informer calls for each change.

use std::sync::Arc;

use crate::fifo::DeltaObject;

/// Receives an informer's notifications (client-go `ResourceEventHandler`).
///
/// Each registered handler is called one notification at a time and in order, so it may keep
/// state in `&mut self`; notifications wait in the handler's own buffer, unbounded by default
/// (as in client-go), so a slow handler never delays the informer; a bounded one
/// ([`HandlerOptions::bounded_buffer`](super::HandlerOptions::bounded_buffer)) holds the informer
/// back instead, while it is full. By default an informer's handlers run as tasks on one
/// handler thread of the informer's (as client-go's run in goroutines): keep their calls short
/// and non-blocking, typically a workqueue `add`, so they do not delay each other. A handler that
/// blocks needs its own thread: register it with
/// [`HandlerOptions::dedicated_thread`](super::HandlerOptions::dedicated_thread).
/// A panic in a handler is caught and logged, and the handler goes on with the next notification
/// after a pause of a second (as client-go's `processorListener.run` restarts its loop with
/// `wait.Until(..., 1s)`); nothing is dropped meanwhile.
///
/// Objects are shared `Arc`s straight from the cache: never copy them to read them.
pub trait ResourceEventHandler<K>: Send + 'static {
    /// An object appeared. `is_in_initial_list` is true while the informer is delivering its
    /// initial list (and for the replay a late-registered handler receives).
    fn on_add(&mut self, obj: &Arc<K>, is_in_initial_list: bool) {
        let _ = (obj, is_in_initial_list);
    }

    /// An object changed: the cached version before and after. On a resync `old` and `new` carry
    /// the same resourceVersion.
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        let _ = (old, new);
    }

    /// An object was deleted. The value is the last known object, or a
    /// [`DeletedFinalStateUnknown`](crate::fifo::DeletedFinalStateUnknown) tombstone when the
    /// deletion was inferred from a relist (the watch missed it); both give the object through
    /// [`DeltaObject::object`], so the tombstone case cannot be forgotten.
    fn on_delete(&mut self, obj: &DeltaObject<K>) {
        let _ = obj;
    }
}

/// A handler built from closures (client-go `ResourceEventHandlerFuncs`); unset callbacks do
/// nothing.
///
/// ```
/// use kube_informer::ResourceEventHandlerFuncs;
/// use k8s_openapi::api::core::v1::Pod;
/// let handler = ResourceEventHandlerFuncs::<Pod>::new()
///     .on_add(|pod, _initial| println!("added {:?}", pod.metadata.name))
///     .on_delete(|d| println!("deleted {:?}", d.object().metadata.name));
/// ```
pub struct ResourceEventHandlerFuncs<K> {
    add: Option<Box<AddFn<K>>>,
    update: Option<Box<UpdateFn<K>>>,
    delete: Option<Box<DeleteFn<K>>>,
}

type AddFn<K> = dyn FnMut(&Arc<K>, bool) + Send;
type UpdateFn<K> = dyn FnMut(&Arc<K>, &Arc<K>) + Send;
type DeleteFn<K> = dyn FnMut(&DeltaObject<K>) + Send;

impl<K> Default for ResourceEventHandlerFuncs<K> {
    fn default() -> Self {
        Self {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> ResourceEventHandlerFuncs<K> {
    /// A handler that does nothing until callbacks are set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the add callback.
    #[must_use]
    pub fn on_add(mut self, f: impl FnMut(&Arc<K>, bool) + Send + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    /// Sets the update callback.
    #[must_use]
    pub fn on_update(mut self, f: impl FnMut(&Arc<K>, &Arc<K>) + Send + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// Sets the delete callback.
    #[must_use]
    pub fn on_delete(mut self, f: impl FnMut(&DeltaObject<K>) + Send + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for ResourceEventHandlerFuncs<K> {
    fn on_add(&mut self, obj: &Arc<K>, initial: bool) {
        if let Some(f) = &mut self.add {
            f(obj, initial);
        }
    }
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        if let Some(f) = &mut self.update {
            f(old, new);
        }
    }
    fn on_delete(&mut self, obj: &DeltaObject<K>) {
        if let Some(f) = &mut self.delete {
            f(obj);
        }
    }
}

/// Passes on only the objects a filter accepts (client-go `FilteringResourceEventHandler`).
///
/// An update is translated by whether the old and new objects pass: both → update; only the new
/// one → add; only the old one → delete (of the old object, the last version that passed);
/// neither → nothing.
pub struct FilteringResourceEventHandler<K, F, H> {
    filter: F,
    handler: H,
    _k: std::marker::PhantomData<fn(K)>,
}

impl<K, F, H> FilteringResourceEventHandler<K, F, H>
where
    F: FnMut(&K) -> bool + Send + 'static,
    H: ResourceEventHandler<K>,
{
    /// Wraps `handler` so it sees only objects for which `filter` returns true.
    pub fn new(filter: F, handler: H) -> Self {
        Self {
            filter,
            handler,
            _k: std::marker::PhantomData,
        }
    }
}

impl<K, F, H> ResourceEventHandler<K> for FilteringResourceEventHandler<K, F, H>
where
    K: Send + Sync + 'static,
    F: FnMut(&K) -> bool + Send + 'static,
    H: ResourceEventHandler<K>,
{
    fn on_add(&mut self, obj: &Arc<K>, initial: bool) {
        if (self.filter)(obj) {
            self.handler.on_add(obj, initial);
        }
    }

    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        match ((self.filter)(old), (self.filter)(new)) {
            (true, true) => self.handler.on_update(old, new),
            (false, true) => self.handler.on_add(new, false),
            (true, false) => self.handler.on_delete(&DeltaObject::Object(old.clone())),
            (false, false) => {}
        }
    }

    fn on_delete(&mut self, obj: &DeltaObject<K>) {
        if (self.filter)(obj.object()) {
            self.handler.on_delete(obj);
        }
    }
}

/// One notification, as delivered to a handler or by [`SharedIndexInformer::subscribe`](super::SharedIndexInformer::subscribe).
///
/// Re-exported at the crate root as [`InformerEvent`](crate::InformerEvent), so that it does not
/// clash with Kubernetes' `Event` (`k8s_openapi::api::core::v1::Event`) in user code.
#[doc(alias = "InformerEvent")]
#[derive(Debug)]
pub enum Event<K> {
    /// See [`ResourceEventHandler::on_add`].
    Add {
        /// The new object.
        obj: Arc<K>,
        /// Part of the initial list (or a late handler's replay).
        is_in_initial_list: bool,
    },
    /// See [`ResourceEventHandler::on_update`].
    Update {
        /// The cached object before.
        old: Arc<K>,
        /// The cached object after.
        new: Arc<K>,
    },
    /// See [`ResourceEventHandler::on_delete`].
    Delete(DeltaObject<K>),
}

impl<K> Clone for Event<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Add {
                obj,
                is_in_initial_list,
            } => Self::Add {
                obj: obj.clone(),
                is_in_initial_list: *is_in_initial_list,
            },
            Self::Update { old, new } => Self::Update {
                old: old.clone(),
                new: new.clone(),
            },
            Self::Delete(d) => Self::Delete(d.clone()),
        }
    }
}

impl<K> Event<K> {
    pub(crate) fn dispatch<H: ResourceEventHandler<K> + ?Sized>(&self, h: &mut H) {
        match self {
            Self::Add {
                obj,
                is_in_initial_list,
            } => h.on_add(obj, *is_in_initial_list),
            Self::Update { old, new } => h.on_update(old, new),
            Self::Delete(d) => h.on_delete(d),
        }
    }

    /// The notification of a write that replaced `old` with `new`: an update, or an add when
    /// the old object cannot be read (a compact cache's bytes that do not decode), as
    /// [`Indexer::insert`](crate::Indexer::insert) returns no old object it cannot read.
    pub(crate) fn update_or_add<E>(
        old: Result<Arc<K>, E>,
        new: Arc<K>,
        is_in_initial_list: bool,
    ) -> Self {
        match old {
            Ok(old) => Self::Update { old, new },
            Err(_) => Self::Add {
                obj: new,
                is_in_initial_list,
            },
        }
    }

    pub(crate) fn is_initial_add(&self) -> bool {
        matches!(
            self,
            Self::Add {
                is_in_initial_list: true,
                ..
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::fifo::DeletedFinalStateUnknown;
    use crate::store::ObjectKey;

    fn cm(name: &str, keep: bool) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("ns".to_owned()),
                labels: keep.then(|| [("keep".to_owned(), "yes".to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        })
    }

    /// A deliberate difference from client-go (README, "Deliberate differences"): client-go's
    /// `FilterFunc` is handed the `DeletedFinalStateUnknown` itself, so a filter written for the
    /// object type drops every tombstone; here the filter sees the object inside it.
    #[test]
    fn a_filter_sees_the_object_inside_a_tombstone() {
        let deleted = Arc::new(Mutex::new(Vec::new()));
        let seen = deleted.clone();
        let mut handler = FilteringResourceEventHandler::new(
            |cm: &ConfigMap| cm.metadata.labels.is_some(),
            ResourceEventHandlerFuncs::new().on_delete(move |d: &DeltaObject<ConfigMap>| {
                let name = d.object().metadata.name.clone().unwrap_or_default();
                seen.lock().unwrap().push((name, d.is_tombstone()));
            }),
        );
        for (name, keep) in [("kept", true), ("dropped", false)] {
            handler.on_delete(&DeltaObject::DeletedFinalStateUnknown(
                DeletedFinalStateUnknown {
                    key: ObjectKey::new(Some("ns"), name).unwrap(),
                    obj: cm(name, keep),
                },
            ));
        }
        handler.on_delete(&DeltaObject::Object(cm("live", true)));
        assert_eq!(
            *deleted.lock().unwrap(),
            vec![("kept".to_owned(), true), ("live".to_owned(), false)]
        );
    }
}
