//! The FIFOs between a reflector and an informer: the [`DeltaFifo`] (client-go
//! `tools/cache/delta_fifo.go`, per-key merging) and the [`InOrderFifo`] (client-go
//! `the_real_fifo.go`, in arrival order, what client-go 1.36+ runs).
//!
//! The reflector pushes what it sees (adds, updates, deletes, whole relists, resyncs); for each
//! object key the FIFO accumulates the changes as [`Deltas`], queues each key once, and hands a
//! key's deltas to the informer in [`DeltaFifo::pop`].

mod delta;
mod in_order;
mod packing;
mod queue;

pub use delta::{DeletedFinalStateUnknown, Delta, DeltaObject, DeltaType, Deltas, ListItem};
pub(crate) use in_order::Popped;
pub use in_order::{DEFAULT_BATCH_SIZE, InOrderDelta, InOrderFifo};
pub(crate) use packing::UnreadableReport;
pub use queue::{DeltaFifo, FifoError, KnownObjects, TransformFn};
