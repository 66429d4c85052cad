//! The DeltaFIFO between a reflector and an informer (client-go `tools/cache/delta_fifo.go`).
//!
//! The reflector pushes what it sees (adds, updates, deletes, whole relists, resyncs); for each
//! object key the FIFO accumulates the changes as [`Deltas`], queues each key once, and hands a
//! key's deltas to the informer in [`DeltaFifo::pop`].

mod delta;
mod queue;

pub use delta::{DeletedFinalStateUnknown, Delta, DeltaObject, DeltaType, Deltas, ListItem};
pub use queue::{DeltaFifo, FifoError, KnownObjects, TransformFn};
