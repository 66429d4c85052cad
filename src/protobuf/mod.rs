//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), decoded straight into
//! k8s-openapi's types through their own `Deserialize` impls.

pub mod schema;
