//! The FIFOs between a reflector and an informer: the [`DeltaFifo`] (client-go
//! `tools/cache/delta_fifo.go`, per-key merging) and the [`InOrderFifo`] (client-go
//! `the_real_fifo.go`, in arrival order, what client-go 1.36+ runs).
//!
//! The reflector pushes what it sees (adds, updates, deletes, whole relists, resyncs). The
//! DeltaFIFO accumulates each object key's changes as [`Deltas`], queues each key once, and
//! hands a key's deltas to the informer in [`DeltaFifo::pop`]; the in-order FIFO queues every
//! change as it came and hands them over in batches ([`InOrderFifo`]).

mod delta;
mod in_order;
mod packing;
mod queue;

pub use delta::{DeletedFinalStateUnknown, Delta, DeltaObject, DeltaType, Deltas, ListItem};
pub(crate) use in_order::Popped;
pub use in_order::{DEFAULT_BATCH_SIZE, InOrderDelta, InOrderFifo};
pub(crate) use packing::UnreadableReport;
pub use queue::{DeltaFifo, FifoError, KnownObjects, TransformFn};
