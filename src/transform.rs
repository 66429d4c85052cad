//! Transforms applied to objects before they are cached.

use std::sync::Arc;

use kube::Resource;

use crate::fifo::TransformFn;

/// Drops `metadata.managedFields`, which is often half of an object's size and rarely read by
/// controllers (client-go users write the same transform by hand).
///
/// As a transform it runs on the decoded object, after `managedFields` has been built. The
/// cheaper way is the decode-time [`Projection::strip_managed_fields`](crate::Projection::strip_managed_fields)
/// (what [`FactoryConfig::strip_managed_fields`](crate::FactoryConfig::strip_managed_fields)
/// sets), whose parser skips them: on the benchmarks' generated Pods it decodes a Pod in 0.66× the
/// time of a full decode and never allocates the 21 KiB (155 allocations) of heap its
/// `managedFields` take (`BENCHMARKS.md`, "Decode-time projection"). Keep the transform for objects that do not come through this
/// crate's decoders (a custom [`ListerWatcher`](crate::ListerWatcher) that hands out objects
/// it already has), or to drop them conditionally.
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
