//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), decoded straight into
//! k8s-openapi's types through their own `Deserialize` impls.

#[cfg(feature = "testing")]
pub mod encode;
pub mod schema;
