//! [`CacheStorage::Decoded`](super::CacheStorage::Decoded): each object is the `Arc<K>` the
//! informer decoded, shared by the store, the FIFO, the handlers and every reader.

use std::sync::Arc;

use kube::{Resource, core::Selector};

use super::{Snapshot, Storage, StorageError, selector_matches};
use crate::store::ObjectKey;

/// Holds objects as they are.
#[derive(Debug, Default)]
pub(crate) struct Decoded;

impl<K: Resource + Send + Sync + 'static> Storage<K> for Decoded {
    type Slot = Arc<K>;

    fn store(&self, _key: &ObjectKey, obj: &Arc<K>) -> Arc<K> {
        Arc::clone(obj)
    }

    fn load(&self, _key: &ObjectKey, slot: &Arc<K>) -> Result<Arc<K>, StorageError> {
        Ok(Arc::clone(slot))
    }

    fn holds(&self, slot: &Arc<K>, obj: &Arc<K>) -> bool {
        Arc::ptr_eq(slot, obj)
    }

    fn copy(&self, _key: &ObjectKey, slot: &Arc<K>) -> Arc<K> {
        Arc::clone(slot)
    }

    fn snapshot(&self, _key: &ObjectKey, slot: &Arc<K>) -> Snapshot<K> {
        Snapshot::Decoded(Arc::clone(slot))
    }

    fn labels_match(&self, slot: &Arc<K>, selector: &Selector) -> bool {
        selector_matches(selector, slot.meta().labels.as_ref())
    }

    fn resource_version(&self, slot: &Arc<K>) -> Option<String> {
        slot.meta().resource_version.clone()
    }

    fn name(&self) -> &'static str {
        "Decoded"
    }
}
