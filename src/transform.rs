//! Transforms applied to objects before they are cached.

use std::sync::Arc;

use kube::Resource;

use crate::fifo::TransformFn;

/// Drops `metadata.managedFields`, which is often half of an object's size and rarely read by
/// controllers (client-go users write the same transform by hand).
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// let pod = kube_informer::strip_managed_fields(Pod::default());
/// assert!(pod.metadata.managed_fields.is_none());
/// ```
pub fn strip_managed_fields<K: Resource>(mut obj: K) -> K {
    obj.meta_mut().managed_fields = None;
    obj
}

/// [`strip_managed_fields`] as a [`TransformFn`] for
/// [`SharedIndexInformer::set_transform`](crate::SharedIndexInformer::set_transform).
pub fn strip_managed_fields_transform<K: Resource + 'static>() -> TransformFn<K> {
    Arc::new(strip_managed_fields::<K>)
}

/// A transform of object metadata that works for every resource type; the factory applies it to
/// all its informers.
pub type MetaTransformFn =
    Arc<dyn Fn(&mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) + Send + Sync>;

pub(crate) fn meta_transform<K: Resource + 'static>(f: MetaTransformFn) -> TransformFn<K> {
    Arc::new(move |mut obj: K| {
        f(obj.meta_mut());
        obj
    })
}
