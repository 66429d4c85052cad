// Placeholder until `scripts/protobuf-schema` generates this file.
use super::{Message, Root};

pub(super) const KUBERNETES_VERSION: &str = "";
pub(super) static MESSAGES: [Message; 0] = [];
pub(super) static ROOTS: [Root; 0] = [];
