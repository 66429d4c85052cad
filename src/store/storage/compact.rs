//! [`CacheStorage::Compact`](super::CacheStorage::Compact): each object held zstd-compressed
//! (as the JSON or protobuf the server sent, or encoded as JSON) and decoded on demand.
//!
//! - **Encoding and compression**, chosen by measurement (BENCHMARKS.md "Compact cache codec"):
//!   JSON (what the server sent, after the transform) compressed by zstd with a dictionary
//!   trained per cache on the first [`CompactConfig::dictionary_samples`] objects it stores
//!   (the first list), on a thread of its own (training on 250 Pods takes 0.1 s, which must
//!   not hold the store's lock). Until it is ready objects are compressed without a dictionary;
//!   then those objects are re-compressed with it, 32 per write (bytes to bytes, nothing is
//!   decoded).
//! - **Retraining**: the store keeps the compression ratio of the last
//!   `dictionary_samples` objects it compressed. When that window's ratio falls below the
//!   ratio the dictionary reached on the samples held out of its training (every fifth)
//!   divided by
//!   [`CompactConfig::retrain_factor`] (objects changed shape: a rollout, a new version), the
//!   next `dictionary_samples` objects stored are kept as samples and a new dictionary is
//!   trained from them (windows are not counted while a training runs). If zstd cannot train a
//!   first dictionary (too few or too uniform samples), the cache stays on plain zstd. New writes use the new dictionary; an object keeps the dictionary it
//!   was compressed with (held by an `Arc`) until it is written again, so retraining never
//!   re-compresses the whole cache under the lock.
//! - **A cold list waits compressed**: the DeltaFIFO has each listed object packed here as
//!   soon as it is decoded ([`Storage::pack`]: the same encoding and codec as a slot), or straight
//!   from the bytes the server sent when nothing changes the object on its way, holds the
//!   blob while it is queued, and decodes it as it is popped; the slot then takes that very blob
//!   (a hand-off keyed by the popped `Arc`), so a sync encodes and compresses each object once
//!   and never holds the whole list decoded. Objects of watch events take the same path. An
//!   in-order relist does not decode what it stores, when it can: a blob the cache encoded
//!   from a decoded object, or a protobuf item of a kind `K` has a generated decoder for (the
//!   k8s-openapi type the server encoded it from), is stored as packed
//!   ([`Storage::store_packed`]), with the resourceVersion and labels read beside it and the
//!   namespace index's value from the key; it is decoded only if another index needs the
//!   object. Its handlers' snapshots then decode each object once. JSON as the server sent it,
//!   or protobuf decoded through serde, may not fit the type (a custom resource, a field whose
//!   type changed), so it is decoded first, and left out and reported if it does not decode.
//! - **Snapshots**: an in-order relist, a resync and a late handler's replay notify handlers
//!   with [`Snapshot`]s: the slot's blob (shared through an `Arc`, not copied) decoded when the
//!   handler is called, so listener buffers never hold a list decoded. A relist that lists an
//!   object the store holds (the same `Arc`) shares its blob with the new store.
//! - **Sharing**: each slot keeps a `Weak` of the last decoded (or stored) object, so an object
//!   still held by the FIFO, a handler or a reader comes back without decoding; a ring of the
//!   last [`CompactConfig::hot_objects`] objects stored, read while held, or decoded twice in a
//!   short while keeps hot objects alive (a scan of cold objects does not push them out). A dead
//!   `Weak` still pins its allocation (`size_of::<K>()` bytes, 1–3 KB for wide k8s-openapi
//!   types), so slots whose object is gone are swept a few at a time after each write and each
//!   decoding read.
//! - **Frees**: an object pushed out of the ring is set aside and freed after the store's lock
//!   is released ([`Storage::release`]), never under it: by the next write once nobody else
//!   holds it (a handler behind the ring), so that the informer's writer, which decoded most of
//!   them, frees them, since glibc's frees of one thread's allocations on another contend with
//!   that thread for its arena (BENCHMARKS.md "The hot ring's size"). At most 64 wait after
//!   each release; past that the oldest is let go by whichever thread releases, and its last
//!   holder frees it. Until freed, a set-aside object is still shared through its slot's `Weak`.

use std::{
    collections::{HashSet, VecDeque},
    sync::{
        Arc, Weak,
        atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering::Relaxed},
    },
};

use kube::{Resource, core::Selector};
use parking_lot::Mutex;
use serde::{Serialize, de::DeserializeOwned};

use super::{CacheStats, SlotMap, Snapshot, Storage, StorageError, StoredObject, selector_matches};
use crate::{
    protobuf::schema::MessageId,
    reflector::decode::{ItemBytes, ItemEncoding, ListedMeta},
    store::ObjectKey,
};

/// Options of [`CacheStorage::Compact`](super::CacheStorage::Compact).
///
/// ```
/// use kube_informer::{CacheStorage, CompactConfig};
///
/// let storage = CacheStorage::Compact(CompactConfig::default().hot_objects(4096));
/// # let _ = storage;
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CompactConfig {
    /// How many recently stored or read objects are kept decoded (strong `Arc`s in a ring),
    /// so that a controller reading the object it was just told about does not decode it.
    /// Each costs its decoded size (a podgen Pod: 54 KB), so the default, 256, is 14 MB of Pods,
    /// and 1024 measured 1.1 KB per Pod on 50,000 (BENCHMARKS.md S6). 0 keeps none (objects are
    /// still shared while someone else holds them).
    pub hot_objects: usize,
    /// zstd compression level. Default 3 (zstd's own default).
    pub level: i32,
    /// How many objects are sampled for a dictionary: the first ones stored, and the ones stored
    /// after the ratio degrades. Four in five train it; every fifth is held out to measure the
    /// ratio later windows are compared with. Default 250: on podgen Pods a dictionary from 250 gives 566
    /// bytes a Pod against 553 from 1,000, for a third of the training CPU (BENCHMARKS.md
    /// "Compact cache codec"); 0 never trains (plain zstd).
    pub dictionary_samples: usize,
    /// The dictionary's size in bytes. Default 64 KiB.
    pub dictionary_size: usize,
    /// Retrain when the compression ratio of the last `dictionary_samples` objects compressed
    /// is worse than the dictionary's ratio on its held-out samples by this factor. Default 1.5.
    pub retrain_factor: f64,
    /// How many notifications a handler may have waiting (buffered or being handled) before its
    /// next ones wait compressed: from then on its notifications of adds and updates carry the
    /// cache's compressed objects, decoded when the handler is called, so a handler that falls
    /// far behind (a slow API call per event, a burst of events) holds about this many decoded
    /// objects (two per update) rather than one per event. A handler that keeps up gets the
    /// objects already decoded, as in `Decoded` mode; one that is behind costs a decode per
    /// object it is sent compressed (two for an update). Deletions are sent decoded whatever
    /// the backlog (a watched deletion carries the server's last state, not the cache's).
    /// Default 64: a few MB of Pods per slow handler; 0 sends every add and update compressed,
    /// `usize::MAX` none.
    pub decoded_backlog: usize,
}

impl Default for CompactConfig {
    fn default() -> Self {
        Self {
            hot_objects: 256,
            level: 3,
            dictionary_samples: 250,
            dictionary_size: 64 * 1024,
            retrain_factor: 1.5,
            decoded_backlog: 64,
        }
    }
}

impl CompactConfig {
    /// Sets [`Self::hot_objects`].
    #[must_use]
    pub fn hot_objects(mut self, n: usize) -> Self {
        self.hot_objects = n;
        self
    }

    /// Sets [`Self::decoded_backlog`].
    #[must_use]
    pub fn decoded_backlog(mut self, n: usize) -> Self {
        self.decoded_backlog = n;
        self
    }

    /// Sets [`Self::level`].
    #[must_use]
    pub fn level(mut self, level: i32) -> Self {
        self.level = level;
        self
    }

    /// Sets [`Self::dictionary_samples`].
    #[must_use]
    pub fn dictionary_samples(mut self, n: usize) -> Self {
        self.dictionary_samples = n;
        self
    }

    /// Sets [`Self::dictionary_size`].
    #[must_use]
    pub fn dictionary_size(mut self, bytes: usize) -> Self {
        self.dictionary_size = bytes;
        self
    }

    /// Sets [`Self::retrain_factor`].
    #[must_use]
    pub fn retrain_factor(mut self, factor: f64) -> Self {
        self.retrain_factor = factor;
        self
    }
}

/// One zstd configuration: a dictionary (or none) and contexts using it. Slots hold the codec
/// they were compressed with.
struct Codec {
    /// 0 for plain zstd; then 1, 2, … per trained dictionary.
    generation: u64,
    dictionary: Vec<u8>,
    /// The compression context, and the buffer it compresses into (see [`Codec::compress`]);
    /// `None` once a newer codec has taken over ([`Codec::retire`]): the blobs made with this one
    /// only need it to decompress.
    compressor: Mutex<Option<(zstd::bulk::Compressor<'static>, Vec<u8>)>>,
    /// Decompression contexts, reused: making one costs more than decompressing a Pod.
    decompressors: Mutex<Vec<zstd::bulk::Decompressor<'static>>>,
    /// Buffers to decompress into, reused (see [`Codec::decompressed`]).
    buffers: Mutex<Vec<Vec<u8>>>,
}

/// Decompression contexts, and buffers, kept per codec, beyond which they are dropped after
/// use.
const POOLED_DECOMPRESSORS: usize = 8;

/// A pooled decompression buffer that grew past this (one very large object) is freed after use
/// rather than kept.
const POOLED_BUFFER_BYTES: usize = 1 << 20;

#[cfg(test)]
thread_local! {
    /// Decompressions on this thread, for tests that count them.
    pub(super) static DECOMPRESSIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl Codec {
    fn new(generation: u64, level: i32, dictionary: Vec<u8>) -> std::io::Result<Self> {
        let mut compressor = zstd::bulk::Compressor::with_dictionary(level, &dictionary)?;
        // The store keeps each object's length itself, and which dictionary it used.
        compressor.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))?;
        compressor.set_parameter(zstd::zstd_safe::CParameter::DictIdFlag(false))?;
        Ok(Self {
            generation,
            dictionary,
            compressor: Mutex::new(Some((compressor, Vec::new()))),
            decompressors: Mutex::new(Vec::new()),
            buffers: Mutex::new(Vec::new()),
        })
    }

    /// `raw` compressed, in an allocation of exactly its size: compressing into a reused
    /// buffer and copying out, rather than shrinking a worst-case-sized `Vec`, leaves no freed
    /// tail next to each of the cache's long-lived blobs for the allocator to be unable to
    /// return (RSS after a 50,000-Pod sync and a `malloc_trim`: 114–140 MiB with shrunk `Vec`s,
    /// 94–96 MiB with this).
    fn compress(&self, raw: &[u8]) -> std::io::Result<Box<[u8]>> {
        let mut guard = self.compressor.lock();
        let Some((compressor, buf)) = &mut *guard else {
            return Err(std::io::Error::other("compact cache: codec retired"));
        };
        buf.clear();
        buf.reserve(zstd::zstd_safe::compress_bound(raw.len()));
        compressor.compress_to_buffer(raw, buf)?;
        Ok(Box::from(&buf[..]))
    }

    /// Frees the compression context (its digested dictionary and its workspace) and buffer: a
    /// newer codec compresses from now on, and this one's blobs, which may live as long as their
    /// objects, only decompress. A compression that races it fails, and takes the newer codec.
    fn retire(&self) {
        drop(self.compressor.lock().take());
    }

    fn is_retired(&self) -> bool {
        self.compressor.lock().is_none()
    }

    /// `f` of `blob` decompressed, which must give exactly `raw_len` bytes, in a pooled buffer.
    /// A fresh buffer per object costs more than it seems: with glibc, a request of this size
    /// (a Pod is a few KB) first merges the small freed chunks that wait in its fast bins, and
    /// a cold sync frees a decoded object for each object it stores.
    fn decompressed<R>(
        &self,
        blob: &[u8],
        raw_len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> std::io::Result<R> {
        #[cfg(test)]
        DECOMPRESSIONS.with(|n| n.set(n.get() + 1));
        let mut buf = self.buffers.lock().pop().unwrap_or_default();
        buf.clear();
        buf.reserve(raw_len);
        let pooled = self.decompressors.lock().pop();
        let mut d = match pooled {
            Some(d) => d,
            None => zstd::bulk::Decompressor::with_dictionary(&self.dictionary)?,
        };
        // The buffer may hold more than `raw_len` (a reused one, or `reserve`'s rounding), so
        // zstd's own bound is not this object's: a blob that gives any other length is refused.
        let n = d.decompress_to_buffer(blob, &mut buf);
        {
            // The context goes back before `f` runs, for other readers meanwhile.
            let mut pool = self.decompressors.lock();
            if pool.len() < POOLED_DECOMPRESSORS {
                pool.push(d);
            }
        }
        let out = match n {
            Ok(n) if n == raw_len => Ok(f(&buf)),
            Ok(n) => Err(std::io::Error::other(format!(
                "decompressed to {n} bytes, not the {raw_len} stored"
            ))),
            Err(e) => Err(e),
        };
        if buf.capacity() <= POOLED_BUFFER_BYTES {
            let mut pool = self.buffers.lock();
            if pool.len() < POOLED_DECOMPRESSORS {
                pool.push(buf);
            }
        }
        out
    }
}

/// One object's compressed encoding, with the codec that reads it back.
pub(crate) struct Blob {
    bytes: Box<[u8]>,
    raw_len: u32,
    codec: Arc<Codec>,
    /// What the decompressed bytes are: JSON the store wrote, or a listed item's bytes as the
    /// server sent them (JSON or protobuf).
    encoding: ItemEncoding,
    /// Whether a failure to decode this blob was logged ([`LOGGED`]) and reported to the
    /// informer ([`REPORTED`]): each once per stored version of an object, however many
    /// snapshots (handlers, resyncs, relists) and lister reads meet it. Fits in the struct's
    /// padding.
    unreadable: AtomicU8,
}

/// [`Blob::unreadable`]: the failure to decode was logged at error level.
const LOGGED: u8 = 1;
/// [`Blob::unreadable`]: the failure to decode was reported to the informer's sink.
const REPORTED: u8 = 2;

impl Blob {
    /// `f` of the bytes this blob holds, decompressed (see [`Codec::decompressed`]).
    fn decompressed<R>(&self, f: impl FnOnce(&[u8]) -> R) -> std::io::Result<R> {
        self.codec
            .decompressed(&self.bytes, self.raw_len as usize, f)
    }

    /// This blob's bytes compressed with `codec` instead, from `raw`, what it decompresses to.
    fn recoded(&self, raw: &[u8], codec: &Arc<Codec>) -> std::io::Result<Blob> {
        Ok(Blob {
            bytes: codec.compress(raw)?,
            raw_len: self.raw_len,
            codec: Arc::clone(codec),
            encoding: self.encoding,
            unreadable: AtomicU8::new(0),
        })
    }
}

/// What a slot keeps of its object.
enum Body<K> {
    /// Shared with the slot's [`Snapshot`]s, and with its copy in a relist's new store.
    Compressed(Arc<Blob>),
    /// An object that could not be encoded (its `Serialize` failed) or compressed: kept decoded
    /// rather than lost, and logged.
    Pinned(Arc<K>),
}

/// The decoded object while someone holds it.
struct Shared<K> {
    weak: Weak<K>,
    /// When the object last entered the hot ring (a ring position), to re-enter it only once it
    /// is about to fall out.
    ring_stamp: u64,
    /// Whether the key is in the sweep queue.
    queued: bool,
    /// When the object was last decoded (a count of decodes), to tell a hot object from a cold
    /// one read once.
    decoded_at: u64,
}

impl<K> Shared<K> {
    /// Of an object nobody holds, never decoded here.
    fn none() -> Self {
        Self {
            weak: Weak::new(),
            ring_stamp: u64::MAX,
            queued: false,
            decoded_at: u64::MAX,
        }
    }
}

/// One stored object.
pub(crate) struct CompactSlot<K> {
    body: Body<K>,
    /// `resourceVersion`, then each label's key and value, NUL-separated (label keys and values
    /// cannot hold a NUL): one allocation for what reads need without decoding.
    meta: SlotMeta,
    shared: Mutex<Shared<K>>,
}

impl<K> CompactSlot<K> {
    fn stored_bytes(&self) -> (u64, u64) {
        match &self.body {
            Body::Compressed(blob) => (blob.bytes.len() as u64, u64::from(blob.raw_len)),
            Body::Pinned(_) => (0, 0),
        }
    }

    fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut parts = self.meta.split('\0').skip(1);
        std::iter::from_fn(move || Some((parts.next()?, parts.next()?)))
    }
}

/// What a slot keeps beside its bytes: the `resourceVersion`, then each label's key and value,
/// NUL-separated (see [`CompactSlot`]).
pub(crate) type SlotMeta = Box<str>;

fn meta_of<K: Resource>(obj: &K) -> SlotMeta {
    let meta = obj.meta();
    slot_meta(meta.resource_version.as_deref(), meta.labels.as_ref())
}

/// [`meta_of`] an object the server sent, read from its bytes without decoding it.
fn listed_meta_of(meta: &ListedMeta) -> SlotMeta {
    slot_meta(meta.resource_version.as_deref(), meta.labels.as_ref())
}

fn slot_meta(
    resource_version: Option<&str>,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> SlotMeta {
    let mut out = resource_version.unwrap_or_default().to_owned();
    for (k, v) in labels.into_iter().flatten() {
        for part in [k, v] {
            out.push('\0');
            out.push_str(part);
        }
    }
    out.into_boxed_str()
}

/// Recently used objects, kept alive. Not looked up: slots find their object through their
/// `Weak`, which this keeps upgradable.
struct Ring<K> {
    objects: Vec<Option<Arc<K>>>,
    next: u64,
}

impl<K> Ring<K> {
    /// Puts `obj` in the ring and hands back its stamp and the object it pushed out (to be
    /// dropped outside the lock).
    fn push(&mut self, obj: Arc<K>) -> (u64, Option<Arc<K>>) {
        let stamp = self.next;
        self.next += 1;
        let at = (stamp % self.objects.len() as u64) as usize;
        (stamp, self.objects[at].replace(obj))
    }
}

/// A dictionary being trained on a thread of its own: training on 1,000 Pods takes a few hundred
/// milliseconds, which must not hold the store's lock.
type Training = std::sync::mpsc::Receiver<Option<(Codec, f64)>>;

/// Training state: which codec new writes use, and the samples and ratios that decide when to
/// train the next.
struct Trainer {
    /// `None` only if zstd could not make a context at all.
    current: Option<Arc<Codec>>,
    /// Raw encodings kept to train from (only while collecting).
    samples: Vec<Vec<u8>>,
    collecting: bool,
    /// The dictionary being trained, if any.
    training: Option<Training>,
    /// Raw and compressed bytes, and count, of the current window of compressions.
    window: (u64, u64, usize),
    /// The current dictionary's ratio on its training samples; 0 without a dictionary.
    trained_ratio: f64,
    /// Keys of the objects compressed before the first dictionary, to re-compress with it a few
    /// per write once it is there.
    plain_keys: Vec<ObjectKey>,
}

/// The keys to sweep, in order, each at most once: a key rewritten while its object lives (a
/// new slot, not yet marked queued) is not queued again, so the queue holds at most one key
/// per slot with a `Weak`. A key settled meanwhile is forgotten at once and its place in the
/// order skipped when reached.
#[derive(Default)]
struct Sweep {
    order: VecDeque<ObjectKey>,
    queued: HashSet<ObjectKey>,
}

impl Sweep {
    fn push(&mut self, key: &ObjectKey) {
        if self.queued.insert(key.clone()) {
            self.order.push_back(key.clone());
        }
    }

    fn forget(&mut self, key: &ObjectKey) {
        self.queued.remove(key);
    }

    /// The next queued key; forgotten ones are dropped on the way.
    fn pop(&mut self) -> Option<ObjectKey> {
        loop {
            let key = self.order.pop_front()?;
            if self.queued.remove(&key) {
                return Some(key);
            }
        }
    }
}

/// Compressed objects with shared decoded ones.
pub(crate) struct Compact<K> {
    config: CompactConfig,
    trainer: Mutex<Trainer>,
    ring: Option<Mutex<Ring<K>>>,
    /// Keys whose slot holds a `Weak`; swept a few at a time.
    sweep: Mutex<Sweep>,
    /// Blobs of objects the FIFO has just decoded from what [`Storage::pack`] made, by key, until
    /// the store takes them (the `Weak` tells that it is storing that very object, and keeps
    /// its address from being reused meanwhile). Several per key when one pop hands out
    /// several packed deltas of the key (an add and the updates after it), stored in turn.
    handoff: Mutex<Handoffs<K>>,
    /// Shared with the cache's [`Snapshot`]s, which count their decodes here too.
    counters: Arc<Counters>,
    /// Objects pushed out of the hot ring, oldest first, freed once the store's lock is released
    /// ([`Storage::release`]): after a write, once nobody else holds them; on any release, the
    /// oldest over [`EVICTED_MAX`].
    evicted: Mutex<VecDeque<Arc<K>>>,
    /// `evicted`'s length, so that a release with nothing to do takes no lock (every read
    /// releases).
    evicted_len: AtomicUsize,
    /// Protobuf messages (by schema and id) and whether `K` has a generated decoder for each
    /// ([`Compact::decodes_generated`]).
    generated: Mutex<Vec<((usize, MessageId), bool)>>,
    /// Whether `K` is a k8s-openapi kind with a generated decoder, so that listed JSON may be
    /// checked rather than decoded ([`Storage::store_checked`]). Found out at the first check.
    checks_json: std::sync::OnceLock<bool>,
    /// Where a snapshot's object that does not decode is reported
    /// ([`Storage::report_unreadable`]); shared with every snapshot.
    unreadable: Arc<Mutex<Option<super::UnreadableSink>>>,
}

/// How many objects pushed out of the hot ring wait after each release, held or not. A held one
/// (by a handler behind the ring, or a reader) waits to be let go, so that the informer's writer,
/// which decoded it, frees it rather than the thread that drops it last: glibc frees one
/// thread's allocations on another under the allocating arena's lock, which the decoding thread
/// then waits for (BENCHMARKS.md, "The hot ring's size"). Past this many, the next release drops
/// the oldest, and its last holder frees it.
const EVICTED_MAX: usize = 64;

/// The counters behind [`CacheStats`].
#[derive(Default)]
struct Counters {
    decodes: AtomicU64,
    decode_errors: AtomicU64,
    packed: AtomicU64,
    packed_from_wire: AtomicU64,
    unpacks: AtomicU64,
    kept_packed: AtomicU64,
    checked: AtomicU64,
    shared_hits: AtomicU64,
    stored_bytes: AtomicU64,
    encoded_bytes: AtomicU64,
    trainings: AtomicU64,
    trainings_started: AtomicU64,
}

/// Objects compressed before the first dictionary that each write re-compresses with it.
const RECODE_PER_WRITE: usize = 32;

/// Trains a dictionary from four in five of `samples` and measures its ratio on the fifth (on
/// all of them when there are fewer than five); `None` (logged) if zstd
/// cannot train one (too few or too uniform samples): plain zstd, or the old dictionary, goes on.
fn train_codec(
    samples: &[Vec<u8>],
    generation: u64,
    level: i32,
    size: usize,
) -> Option<(Codec, f64)> {
    // Every fifth sample is held out, and the ratio the cache later compares with is measured
    // on those: on its own samples a dictionary does far better than on the objects that follow
    // (it holds their unique parts too: names, uids, addresses), so an in-sample ratio would look
    // degraded against every later window and retrain over and over.
    let (mut held_out, mut train) = (Vec::new(), Vec::new());
    for (i, s) in samples.iter().enumerate() {
        if i % 5 == 4 {
            &mut held_out
        } else {
            &mut train
        }
        .push(s.as_slice());
    }
    let trained =
        zstd::dict::from_samples(&train, size).and_then(|dict| Codec::new(generation, level, dict));
    let codec = match trained {
        Ok(codec) => codec,
        Err(e) => {
            tracing::debug!(error = %e, "compact cache: no dictionary trained");
            return None;
        }
    };
    let measured = if held_out.is_empty() {
        &train
    } else {
        &held_out
    };
    let (mut raw, mut compressed) = (0u64, 0u64);
    for s in measured {
        raw += s.len() as u64;
        compressed += codec.compress(s).map_or(s.len(), |b| b.len()) as u64;
    }
    Some((codec, raw as f64 / compressed.max(1) as f64))
}

/// Slots checked per sweep: more than one key gets a `Weak` per write, and a key is queued once
/// (see [`Sweep`]), so the queue cannot grow beyond the keys whose object is alive.
const SWEEP_PER_CALL: usize = 8;

impl<K> Compact<K> {
    pub(crate) fn new(config: CompactConfig) -> Self {
        // An out-of-range level is clamped by zstd; a context that cannot be made (no memory)
        // leaves no codec, and objects are then kept decoded (see `store`).
        let plain = match Codec::new(0, config.level, Vec::new()) {
            Ok(codec) => Some(Arc::new(codec)),
            Err(e) => {
                tracing::error!(error = %e, "compact cache: no zstd context; objects are kept decoded");
                None
            }
        };
        let ring = (config.hot_objects > 0).then(|| {
            Mutex::new(Ring {
                objects: (0..config.hot_objects).map(|_| None).collect(),
                next: 0,
            })
        });
        Self {
            trainer: Mutex::new(Trainer {
                current: plain,
                samples: Vec::new(),
                collecting: config.dictionary_samples > 0,
                training: None,
                window: (0, 0, 0),
                trained_ratio: 0.0,
                plain_keys: Vec::new(),
            }),
            config,
            ring,
            sweep: Mutex::new(Sweep::default()),
            handoff: Mutex::new(std::collections::HashMap::new()),
            generated: Mutex::new(Vec::new()),
            checks_json: std::sync::OnceLock::new(),
            unreadable: Arc::default(),
            counters: Arc::default(),
            evicted: Mutex::new(VecDeque::new()),
            evicted_len: AtomicUsize::new(0),
        }
    }

    /// Keeps `obj` in the hot ring when it is not there or about to leave it.
    fn keep_hot(&self, shared: &mut Shared<K>, obj: &Arc<K>) {
        let Some(ring) = &self.ring else { return };
        let half = (self.config.hot_objects as u64).div_ceil(2);
        let pushed_out = {
            let mut ring = ring.lock();
            let fresh = shared.ring_stamp != u64::MAX && ring.next - shared.ring_stamp < half;
            if fresh {
                return;
            }
            let (stamp, out) = ring.push(Arc::clone(obj));
            shared.ring_stamp = stamp;
            out
        };
        if let Some(out) = pushed_out {
            let mut evicted = self.evicted.lock();
            evicted.push_back(out);
            self.evicted_len.store(evicted.len(), Relaxed);
        }
    }

    fn share(&self, key: &ObjectKey, shared: &mut Shared<K>, obj: &Arc<K>, hot: bool) {
        shared.weak = Arc::downgrade(obj);
        if hot {
            self.keep_hot(shared, obj);
        }
        if !shared.queued {
            shared.queued = true;
            self.sweep.lock().push(key);
        }
    }

    /// Compresses `raw` with the current codec, and decides on training. `stored`: the object
    /// goes into the store now (not packed for the FIFO), so it is to be re-compressed once a
    /// first dictionary is there.
    fn compress(
        &self,
        key: &ObjectKey,
        raw: &[u8],
        stored: bool,
    ) -> Result<(Box<[u8]>, Arc<Codec>), String> {
        let (codec, blob) = loop {
            let codec = {
                let mut t = self.trainer.lock();
                self.install_trained(&mut t);
                t.current.clone().ok_or("no zstd context")?
            };
            match codec.compress(raw) {
                Ok(blob) => break (codec, blob),
                // A newer codec took over meanwhile: it is current now.
                Err(_) if codec.is_retired() => {}
                Err(e) => return Err(e.to_string()),
            }
        };
        let mut t = self.trainer.lock();
        // Only while a first dictionary is coming: a cache whose training failed stays plain.
        if stored && codec.generation == 0 && (t.collecting || t.training.is_some()) {
            t.plain_keys.push(key.clone());
        }
        if t.collecting {
            t.samples.push(raw.to_vec());
            if t.samples.len() >= self.config.dictionary_samples {
                self.train(&mut t);
            }
        } else if t.trained_ratio > 0.0
            && t.training.is_none()
            && t.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &codec))
        {
            t.window.0 += raw.len() as u64;
            t.window.1 += blob.len() as u64;
            t.window.2 += 1;
            if t.window.2 >= self.config.dictionary_samples {
                let ratio = t.window.0 as f64 / t.window.1.max(1) as f64;
                t.window = (0, 0, 0);
                if ratio * self.config.retrain_factor < t.trained_ratio {
                    tracing::debug!(
                        ratio,
                        trained_ratio = t.trained_ratio,
                        "compact cache: compression ratio degraded, collecting samples to retrain"
                    );
                    t.collecting = true;
                }
            }
        }
        Ok((blob, codec))
    }

    /// Starts training a dictionary from the collected samples.
    fn train(&self, t: &mut Trainer) {
        let samples = std::mem::take(&mut t.samples);
        t.collecting = false;
        t.window = (0, 0, 0);
        let generation = t.current.as_ref().map_or(0, |c| c.generation) + 1;
        let (level, size) = (self.config.level, self.config.dictionary_size);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let job = move || {
            // The receiver may be gone (the store was dropped): nothing to tell then.
            let _ = tx.send(train_codec(&samples, generation, level, size));
        };
        match std::thread::Builder::new()
            .name("compact-cache-dictionary".into())
            .spawn(job)
        {
            Ok(_) => {
                t.training = Some(rx);
                self.counters.trainings_started.fetch_add(1, Relaxed);
            }
            Err(e) => tracing::debug!(error = %e, "compact cache: no thread to train a dictionary"),
        }
    }

    /// Puts a trained dictionary in use once its training is done.
    fn install_trained(&self, t: &mut Trainer) {
        let Some(training) = &t.training else { return };
        let (codec, ratio) = match training.try_recv() {
            Err(std::sync::mpsc::TryRecvError::Empty) => return,
            Ok(Some(done)) => done,
            Ok(None) | Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                t.training = None;
                if t.current.as_ref().is_some_and(|c| c.generation == 0) {
                    t.plain_keys = Vec::new();
                }
                return;
            }
        };
        t.training = None;
        t.trained_ratio = ratio;
        tracing::debug!(
            generation = codec.generation,
            ratio,
            "compact cache: dictionary trained"
        );
        if codec.generation > 1 {
            t.plain_keys = Vec::new();
        }
        if let Some(old) = t.current.replace(Arc::new(codec)) {
            old.retire();
        }
        self.counters.trainings.fetch_add(1, Relaxed);
    }

    /// Re-compresses up to [`RECODE_PER_WRITE`] of the objects compressed before the first
    /// dictionary (bytes to bytes: nothing is decoded).
    fn recode_some(&self, slots: &mut dyn SlotMap<CompactSlot<K>>) {
        let (current, keys) = {
            let mut t = self.trainer.lock();
            self.install_trained(&mut t);
            let Some(current) = t.current.clone().filter(|c| c.generation > 0) else {
                return;
            };
            if t.plain_keys.is_empty() {
                return;
            }
            let at = t.plain_keys.len().saturating_sub(RECODE_PER_WRITE);
            let keys = t.plain_keys.split_off(at);
            if t.plain_keys.is_empty() {
                t.plain_keys = Vec::new();
            }
            (current, keys)
        };
        for key in keys {
            let Some(slot) = slots.slot_mut(&key) else {
                continue;
            };
            let Body::Compressed(blob) = &slot.body else {
                continue;
            };
            if blob.codec.generation != 0 {
                continue;
            }
            if let Some(recoded) = self.recode(&key, blob, &current) {
                self.count_out(slot);
                slot.body = Body::Compressed(Arc::new(recoded));
                self.count_in(slot);
            }
        }
    }

    /// The blob the FIFO handed over for `obj` under `key` (see [`Storage::pack`]), if it is
    /// this very object; re-compressed with the first dictionary if that came meanwhile.
    fn take_handoff(&self, key: &ObjectKey, obj: &Arc<K>) -> Option<Blob> {
        let blob = {
            let mut handoff = self.handoff.lock();
            let entries = handoff.get_mut(key)?;
            let at = entries
                .iter()
                .position(|(weak, _)| std::ptr::eq(weak.as_ptr(), Arc::as_ptr(obj)));
            let taken = at.map(|at| entries.remove(at).1);
            // Objects handed out but never stored (dropped since) leave with them.
            entries.retain(|(weak, _)| weak.strong_count() > 0);
            if entries.is_empty() {
                handoff.remove(key);
            }
            taken?
        };
        self.counters.kept_packed.fetch_add(1, Relaxed);
        Some(self.kept(key, blob))
    }

    /// Whether `bytes`, encoded as `encoding`, are protobuf of a message `K` has a generated
    /// decoder for (see [`crate::protobuf::has_generated_decoder`]), so that the store may hold
    /// them undecoded ([`Storage::store_packed`]). Looked up once per message.
    fn decodes_generated(&self, bytes: &[u8], encoding: ItemEncoding) -> bool
    where
        K: 'static,
    {
        let (schema, id) = match encoding {
            ItemEncoding::Json => return false,
            ItemEncoding::Protobuf { schema, message } => (schema, message),
            ItemEncoding::Enveloped { schema } => {
                match crate::protobuf::enveloped_message(schema, bytes) {
                    Some(id) => (schema, id),
                    None => return false,
                }
            }
        };
        let of = (std::ptr::from_ref(schema) as usize, id);
        let mut known = self.generated.lock();
        if let Some(&(_, yes)) = known.iter().find(|(m, _)| *m == of) {
            return yes;
        }
        let yes = crate::protobuf::has_generated_decoder::<K>(schema, id);
        known.push((of, yes));
        yes
    }

    /// [`recode`] with `current`, or with the codec that replaced it meanwhile (retiring it).
    fn recode(&self, key: &ObjectKey, blob: &Blob, current: &Arc<Codec>) -> Option<Blob> {
        match recoded(blob, current) {
            Err(_) if current.is_retired() => {
                let newer = self.trainer.lock().current.clone()?;
                recode(key, blob, &newer)
            }
            r => logged_recode(key, r),
        }
    }

    /// A packed `blob` the store is about to keep under `key`: re-compressed with the first
    /// dictionary if it was compressed before that came, or queued to be once it comes.
    fn kept(&self, key: &ObjectKey, blob: Blob) -> Blob {
        if blob.codec.generation != 0 {
            return blob;
        }
        let mut t = self.trainer.lock();
        self.install_trained(&mut t);
        match t.current.clone() {
            Some(current) if current.generation > 0 => {
                drop(t);
                self.recode(key, &blob, &current).unwrap_or(blob)
            }
            _ => {
                if t.collecting || t.training.is_some() {
                    t.plain_keys.push(key.clone());
                }
                blob
            }
        }
    }

    /// The slot for a packed `blob` kept as it is ([`Storage::store_packed`] and
    /// [`Storage::store_checked`]), with its `meta`, counted in.
    fn packed_slot(&self, key: &ObjectKey, blob: Blob, meta: SlotMeta) -> CompactSlot<K> {
        self.counters.kept_packed.fetch_add(1, Relaxed);
        let slot = CompactSlot {
            body: Body::Compressed(Arc::new(self.kept(key, blob))),
            meta,
            shared: Mutex::new(Shared::none()),
        };
        self.count_in(&slot);
        slot
    }

    fn count_in(&self, slot: &CompactSlot<K>) {
        let (stored, encoded) = slot.stored_bytes();
        self.counters.stored_bytes.fetch_add(stored, Relaxed);
        self.counters.encoded_bytes.fetch_add(encoded, Relaxed);
    }

    fn count_out(&self, slot: &CompactSlot<K>) {
        let (stored, encoded) = slot.stored_bytes();
        self.counters.stored_bytes.fetch_sub(stored, Relaxed);
        self.counters.encoded_bytes.fetch_sub(encoded, Relaxed);
    }
}

/// The FIFO's decoded objects, per key, and the blobs the cache is to keep for them
/// ([`Compact::take_handoff`]).
type Handoffs<K> = std::collections::HashMap<ObjectKey, Vec<(Weak<K>, Blob)>>;

/// What checks that listed JSON of a k8s-openapi kind decodes ([`Storage::store_checked`]): a
/// decode through [`Projection::checking`](crate::reflector::decode::Projection::checking),
/// which reads each `managedFields` entry's `fieldsV1` as strictly as the `serde_json::Value`
/// k8s-openapi decodes it into, but does not build it. So the check fails exactly where a
/// decode would (with serde_json as this crate uses it: its `arbitrary_precision` feature,
/// turned on elsewhere in a build, changes how a `Value` reads numbers), at less cost on a Pod
/// with managedFields (see `cargo bench --bench projection`, `relist check`).
fn json_check() -> &'static crate::reflector::decode::Projection {
    static CHECK: std::sync::LazyLock<crate::reflector::decode::Projection> =
        std::sync::LazyLock::new(|| {
            crate::reflector::decode::Projection::checking("metadata.managedFields[*].fieldsV1")
                .expect("a valid path")
        });
    &CHECK
}

/// A packed body of another kind reached the storage (the store resolves cached ones itself).
fn not_packed_here(key: &ObjectKey) -> StorageError {
    StorageError::Decode {
        key: key.clone(),
        reason: "not packed by this cache".to_owned(),
    }
}

/// `blob` compressed again with `current` (bytes to bytes: nothing is decoded); `None` (logged)
/// keeps it as it is, still readable with the codec it holds.
fn recode(key: &ObjectKey, blob: &Blob, current: &Arc<Codec>) -> Option<Blob> {
    logged_recode(key, recoded(blob, current))
}

fn recoded(blob: &Blob, current: &Arc<Codec>) -> std::io::Result<Blob> {
    blob.decompressed(|raw| blob.recoded(raw, current))
        .and_then(|r| r)
}

/// What a re-compression gave; a failure is logged, and the blob is then kept as it was.
fn logged_recode(key: &ObjectKey, recoded: std::io::Result<Blob>) -> Option<Blob> {
    recoded
        .inspect_err(
            |e| tracing::debug!(key = %key, error = %e, "compact cache: not re-compressed"),
        )
        .ok()
}

/// A serde_json error without the object's contents: its category and position.
fn redacted(e: &serde_json::Error) -> String {
    format!(
        "{:?} error at line {} column {}",
        e.classify(),
        e.line(),
        e.column()
    )
}

impl<K> Compact<K>
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    /// A snapshot of `slot` whose readers share `weak`'s object while it lives.
    fn snapshot_sharing(
        &self,
        key: &ObjectKey,
        slot: &CompactSlot<K>,
        weak: Weak<K>,
    ) -> Snapshot<K> {
        match &slot.body {
            Body::Pinned(obj) => Snapshot::Decoded(Arc::clone(obj)),
            Body::Compressed(blob) => Snapshot::Stored(Arc::new(StoredCopy {
                key: key.clone(),
                blob: Arc::clone(blob),
                resource_version: slot.meta.split('\0').next().unwrap_or_default().into(),
                shared: Mutex::new(weak),
                counters: Arc::clone(&self.counters),
                unreadable: Arc::clone(&self.unreadable),
            })),
        }
    }
}

/// A slot's compressed object apart from the store (a [`Snapshot`]), with the decoded object
/// its readers share.
struct StoredCopy<K> {
    key: ObjectKey,
    blob: Arc<Blob>,
    resource_version: Box<str>,
    shared: Mutex<Weak<K>>,
    counters: Arc<Counters>,
    unreadable: Arc<Mutex<Option<super::UnreadableSink>>>,
}

impl<K> StoredObject<K> for StoredCopy<K>
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    fn load(&self, report: bool) -> Result<Arc<K>, StorageError> {
        let mut shared = self.shared.lock();
        if let Some(obj) = shared.upgrade() {
            self.counters.shared_hits.fetch_add(1, Relaxed);
            return Ok(obj);
        }
        match self.decode() {
            Ok(obj) => {
                *shared = Arc::downgrade(&obj);
                Ok(obj)
            }
            Err(e) => {
                drop(shared);
                if report {
                    self.failed(&e);
                }
                Err(e)
            }
        }
    }

    fn load_unshared(&self) -> Result<Arc<K>, StorageError> {
        if let Some(obj) = self.shared.lock().upgrade() {
            self.counters.shared_hits.fetch_add(1, Relaxed);
            return Ok(obj);
        }
        self.decode()
    }

    fn resource_version(&self) -> Option<&str> {
        (!self.resource_version.is_empty()).then_some(&*self.resource_version)
    }

    fn stored(&self) -> *const () {
        Arc::as_ptr(&self.blob).cast()
    }
}

/// Logs that `blob` does not decode: at error level the first time, then at debug level (the
/// object, and so the error, are the same each time).
fn log_unreadable(blob: &Blob, e: &StorageError) {
    if blob.unreadable.fetch_or(LOGGED, Relaxed) & LOGGED == 0 {
        tracing::error!(error = %e, "cached object unreadable");
    } else {
        tracing::debug!(error = %e, "cached object unreadable, again");
    }
}

impl<K: DeserializeOwned + 'static> StoredCopy<K> {
    fn decode(&self) -> Result<Arc<K>, StorageError> {
        match decode_blob(&self.key, &self.blob, |_| ()) {
            Ok((obj, ())) => {
                self.counters.decodes.fetch_add(1, Relaxed);
                Ok(obj)
            }
            Err(e) => {
                self.counters.decode_errors.fetch_add(1, Relaxed);
                log_unreadable(&self.blob, &e);
                Err(e)
            }
        }
    }

    /// Tells the sink, if there is one, that the object does not decode (`e`): the first time
    /// for this stored version of it only, and with no lock held, since it calls user code
    /// (the informer's sink catches a panic in it).
    fn failed(&self, e: &StorageError) {
        if self.blob.unreadable.fetch_or(REPORTED, Relaxed) & REPORTED != 0 {
            return;
        }
        let Some(sink) = self.unreadable.lock().clone() else {
            return;
        };
        sink(e.clone());
    }
}

impl<K> Compact<K>
where
    K: Serialize + DeserializeOwned + 'static,
{
    /// A slot holding `body`, with `obj` shared (and kept hot if `hot`).
    fn new_slot(
        &self,
        key: &ObjectKey,
        body: Body<K>,
        meta: Box<str>,
        obj: &Arc<K>,
        hot: bool,
    ) -> CompactSlot<K> {
        let slot = CompactSlot {
            body,
            meta,
            shared: Mutex::new(Shared::none()),
        };
        self.share(key, &mut slot.shared.lock(), obj, hot);
        self.count_in(&slot);
        slot
    }

    fn decode(&self, key: &ObjectKey, body: &Body<K>) -> Result<Arc<K>, StorageError> {
        let blob = match body {
            Body::Compressed(blob) => blob,
            Body::Pinned(obj) => return Ok(Arc::clone(obj)),
        };
        let (obj, ()) = decode_blob(key, blob, |_| ()).inspect_err(|e| log_unreadable(blob, e))?;
        self.counters.decodes.fetch_add(1, Relaxed);
        Ok(obj)
    }

    /// `obj` encoded and compressed; `stored` as in [`compress`](Self::compress).
    fn encode(&self, key: &ObjectKey, obj: &K, stored: bool) -> Result<Blob, String> {
        let raw = serde_json::to_vec(obj).map_err(|e| redacted(&e))?;
        self.blob(key, &raw, ItemEncoding::Json, stored)
    }

    /// `raw`, encoded so, compressed; `stored` as in [`compress`](Self::compress).
    fn blob(
        &self,
        key: &ObjectKey,
        raw: &[u8],
        encoding: ItemEncoding,
        stored: bool,
    ) -> Result<Blob, String> {
        let raw_len = u32::try_from(raw.len()).map_err(|_| "larger than 4 GiB".to_owned())?;
        let (bytes, codec) = self.compress(key, raw, stored)?;
        Ok(Blob {
            bytes,
            raw_len,
            codec,
            encoding,
            unreadable: AtomicU8::new(0),
        })
    }

    /// Decodes a packed object for the FIFO (see [`Storage::unpack`] and [`Storage::peek`]),
    /// and gives `also` its decompressed bytes.
    fn unpack_blob<T>(
        &self,
        key: &ObjectKey,
        blob: &Blob,
        also: impl FnOnce(&[u8]) -> T,
    ) -> Result<(Arc<K>, T), StorageError> {
        let out = decode_blob(key, blob, also).inspect_err(|_| {
            self.counters.decode_errors.fetch_add(1, Relaxed);
        })?;
        self.counters.unpacks.fetch_add(1, Relaxed);
        Ok(out)
    }

    /// The codec of the first or a later trained dictionary, if there is one yet.
    fn trained_codec(&self) -> Option<Arc<Codec>> {
        let mut t = self.trainer.lock();
        self.install_trained(&mut t);
        t.current.clone().filter(|c| c.generation > 0)
    }
}

/// The object `blob` holds, and `also` of its decompressed bytes once they decoded.
fn decode_blob<K: DeserializeOwned + 'static, T>(
    key: &ObjectKey,
    blob: &Blob,
    also: impl FnOnce(&[u8]) -> T,
) -> Result<(Arc<K>, T), StorageError> {
    read_blob(key, blob, |raw| {
        let obj = blob.encoding.decode::<K>(raw)?;
        Ok::<_, crate::reflector::decode::DecodeError>((Arc::new(obj), also(raw)))
    })
}

/// `read` of `blob`'s decompressed bytes; a failure to decompress, or `read`'s own (a decode),
/// as the storage reports it for `key`.
fn read_blob<T, E: std::fmt::Display>(
    key: &ObjectKey,
    blob: &Blob,
    read: impl FnOnce(&[u8]) -> Result<T, E>,
) -> Result<T, StorageError> {
    blob.decompressed(read)
        .map_err(|e| StorageError::Decompress {
            key: key.clone(),
            reason: e.to_string(),
        })?
        .map_err(|e| StorageError::Decode {
            key: key.clone(),
            reason: e.to_string(),
        })
}

impl<K> Compact<K>
where
    K: Resource + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// The slot for `obj` (the blob the FIFO handed over, or encoded now), kept hot if `hot`.
    fn store_hot(&self, key: &ObjectKey, obj: &Arc<K>, hot: bool) -> CompactSlot<K> {
        let encoded = match self.take_handoff(key, obj) {
            Some(blob) => Ok(blob),
            None => self.encode(key, obj, true),
        };
        let body = encoded
            .map(|blob| Body::Compressed(Arc::new(blob)))
            .unwrap_or_else(|reason| {
            tracing::warn!(key = %key, reason, "compact cache: object kept decoded, it does not encode");
            Body::Pinned(Arc::clone(obj))
        });
        self.new_slot(key, body, meta_of(&**obj), obj, hot)
    }
}

impl<K> Storage<K> for Compact<K>
where
    K: Resource + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    type Slot = CompactSlot<K>;

    fn store(&self, key: &ObjectKey, obj: &Arc<K>) -> CompactSlot<K> {
        // Just written: what a controller reads next, once its handler has queued the key.
        self.store_hot(key, obj, true)
    }

    fn store_listed(&self, key: &ObjectKey, obj: &Arc<K>) -> CompactSlot<K> {
        // Kept hot, each of a list's objects would pass through the ring, pushing out what the
        // controller reads and, once pushed out itself, leaving a dead `Weak` in its slot that
        // pins the object's allocation (`size_of::<K>()`) until the store built from the list
        // is swept: 25 MB for 10,000 Pods.
        self.store_hot(key, obj, false)
    }

    fn restore(&self, key: &ObjectKey, slot: &CompactSlot<K>, obj: &Arc<K>) -> CompactSlot<K> {
        let body = match &slot.body {
            Body::Compressed(blob) => Body::Compressed(Arc::clone(blob)),
            Body::Pinned(obj) => Body::Pinned(Arc::clone(obj)),
        };
        self.new_slot(key, body, slot.meta.clone(), obj, false)
    }

    fn copy(&self, key: &ObjectKey, slot: &CompactSlot<K>) -> CompactSlot<K> {
        let body = match &slot.body {
            Body::Compressed(blob) => Body::Compressed(Arc::clone(blob)),
            Body::Pinned(obj) => Body::Pinned(Arc::clone(obj)),
        };
        let held = slot.shared.lock().weak.upgrade();
        let copy = CompactSlot {
            body,
            meta: slot.meta.clone(),
            shared: Mutex::new(Shared::none()),
        };
        // Still shared with whoever holds the object.
        if let Some(obj) = held {
            self.share(key, &mut copy.shared.lock(), &obj, false);
        }
        self.count_in(&copy);
        copy
    }

    fn settle(&self, key: &ObjectKey, slot: &CompactSlot<K>) {
        let mut shared = slot.shared.lock();
        if shared.weak.strong_count() == 0 {
            // Frees the allocation the dead `Weak` pinned.
            shared.weak = Weak::new();
            if std::mem::take(&mut shared.queued) {
                self.sweep.lock().forget(key);
            }
        } else {
            // Queued again even if it says it is: its key may have been taken by a sweep of
            // another store (a key already queued stays queued once).
            shared.queued = true;
            self.sweep.lock().push(key);
        }
    }

    fn snapshot(&self, key: &ObjectKey, slot: &CompactSlot<K>) -> Snapshot<K> {
        // A `Weak` of an object nobody holds would pin its allocation (`size_of::<K>()`) for
        // as long as the snapshot waits.
        let weak = Some(slot.shared.lock().weak.clone()).filter(|w| w.strong_count() > 0);
        self.snapshot_sharing(key, slot, weak.unwrap_or_default())
    }

    fn snapshot_unshared(&self, key: &ObjectKey, slot: &CompactSlot<K>) -> Snapshot<K> {
        self.snapshot_sharing(key, slot, Weak::new())
    }

    fn load(&self, key: &ObjectKey, slot: &CompactSlot<K>) -> Result<Arc<K>, StorageError> {
        let mut shared = slot.shared.lock();
        if let Some(obj) = shared.weak.upgrade() {
            self.counters.shared_hits.fetch_add(1, Relaxed);
            self.keep_hot(&mut shared, &obj);
            return Ok(obj);
        }
        match self.decode(key, &slot.body) {
            Ok(obj) => {
                // Admission: an object enters the hot ring when decoded a second time within
                // about as many decodes as the ring holds, so a scan of cold objects (a list)
                // neither evicts the hot ones nor pays for dropping them.
                let now = self.counters.decodes.load(Relaxed);
                let hot = shared.decoded_at != u64::MAX
                    && now - shared.decoded_at <= self.config.hot_objects as u64;
                shared.decoded_at = now;
                self.share(key, &mut shared, &obj, hot);
                Ok(obj)
            }
            Err(e) => {
                self.counters.decode_errors.fetch_add(1, Relaxed);
                Err(e)
            }
        }
    }

    fn load_detached(
        &self,
        key: &ObjectKey,
        slot: &CompactSlot<K>,
    ) -> Result<Arc<K>, StorageError> {
        if let Some(obj) = slot.shared.lock().weak.upgrade() {
            self.counters.shared_hits.fetch_add(1, Relaxed);
            return Ok(obj);
        }
        self.decode(key, &slot.body).inspect_err(|_| {
            self.counters.decode_errors.fetch_add(1, Relaxed);
        })
    }

    fn holds(&self, slot: &CompactSlot<K>, obj: &Arc<K>) -> bool {
        std::ptr::eq(slot.shared.lock().weak.as_ptr(), Arc::as_ptr(obj))
    }

    fn labels_match(&self, slot: &CompactSlot<K>, selector: &Selector) -> bool {
        if selector.selects_all() {
            return true;
        }
        let labels = slot
            .labels()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        selector_matches(selector, Some(&labels))
    }

    fn resource_version(&self, slot: &CompactSlot<K>) -> Option<String> {
        let rv = slot.meta.split('\0').next().unwrap_or_default();
        (!rv.is_empty()).then(|| rv.to_owned())
    }

    fn drop_slot(&self, slot: &CompactSlot<K>) {
        self.count_out(slot);
    }

    fn discard_packed(&self, slot: &CompactSlot<K>) {
        self.count_out(slot);
        self.counters.kept_packed.fetch_sub(1, Relaxed);
    }

    fn packs(&self) -> bool {
        true
    }

    fn report_unreadable(&self, sink: super::UnreadableSink) {
        *self.unreadable.lock() = Some(sink);
    }

    fn pack(&self, key: &ObjectKey, obj: &K) -> Option<super::PackedBody> {
        match self.encode(key, obj, false) {
            Ok(blob) => {
                self.counters.packed.fetch_add(1, Relaxed);
                Some(super::PackedBody::Compressed {
                    blob,
                    meta: Some(meta_of(obj)),
                })
            }
            // The FIFO holds it decoded, and `store` tries (and reports) again.
            Err(reason) => {
                tracing::debug!(key = %key, reason, "compact cache: listed object not packed");
                None
            }
        }
    }

    fn pack_bytes(
        &self,
        key: &ObjectKey,
        bytes: ItemBytes<'_>,
        meta: &ListedMeta,
    ) -> Option<super::PackedBody> {
        match self.blob(key, bytes.bytes, bytes.encoding, false) {
            Ok(blob) => {
                self.counters.packed.fetch_add(1, Relaxed);
                self.counters.packed_from_wire.fetch_add(1, Relaxed);
                let meta = self
                    .decodes_generated(bytes.bytes, bytes.encoding)
                    .then(|| listed_meta_of(meta));
                Some(super::PackedBody::Compressed { blob, meta })
            }
            Err(reason) => {
                tracing::debug!(key = %key, reason, "compact cache: object not packed");
                None
            }
        }
    }

    fn store_packed(
        &self,
        key: &ObjectKey,
        body: super::PackedBody,
    ) -> Result<CompactSlot<K>, super::PackedBody> {
        let (blob, meta) = match body {
            super::PackedBody::Compressed {
                blob,
                meta: Some(meta),
            } => (blob, meta),
            body => return Err(body),
        };
        Ok(self.packed_slot(key, blob, meta))
    }

    fn store_checked(
        &self,
        key: &ObjectKey,
        body: super::PackedBody,
    ) -> Result<Result<CompactSlot<K>, StorageError>, super::PackedBody> {
        let blob = match body {
            super::PackedBody::Compressed { blob, meta: None }
                if matches!(blob.encoding, ItemEncoding::Json)
                    && *self
                        .checks_json
                        .get_or_init(crate::protobuf::is_generated_kind::<K>) =>
            {
                blob
            }
            body => return Err(body),
        };
        // Listed before the first dictionary was trained, and it is there now: re-compressed
        // from the bytes just checked, as `unpack` does.
        let trained = (blob.codec.generation == 0)
            .then(|| self.trained_codec())
            .flatten();
        let checked = read_blob(key, &blob, |raw| {
            let obj: K = json_check().from_slice(raw).map_err(|e| redacted(&e))?;
            let recoded = trained
                .as_ref()
                .and_then(|codec| logged_recode(key, blob.recoded(raw, codec)));
            Ok::<_, String>((meta_of(&obj), recoded))
        });
        let (meta, recoded) = match checked {
            Ok(checked) => checked,
            Err(e) => {
                self.counters.decode_errors.fetch_add(1, Relaxed);
                return Ok(Err(e));
            }
        };
        self.counters.checked.fetch_add(1, Relaxed);
        Ok(Ok(self.packed_slot(key, recoded.unwrap_or(blob), meta)))
    }

    fn decode_bytes(&self, key: &ObjectKey, bytes: ItemBytes<'_>) -> Result<Arc<K>, StorageError> {
        bytes
            .decode::<K>()
            .map(Arc::new)
            .map_err(|e| StorageError::Decode {
                key: key.clone(),
                reason: e.to_string(),
            })
    }

    fn unpack(&self, key: &ObjectKey, body: super::PackedBody) -> Result<Arc<K>, StorageError> {
        let super::PackedBody::Compressed { blob, .. } = body else {
            return Err(not_packed_here(key));
        };
        // Listed before the first dictionary was trained, and it is there now: re-compressed
        // here from the bytes just decoded, rather than decompressed again once stored.
        let trained = (blob.codec.generation == 0)
            .then(|| self.trained_codec())
            .flatten();
        let (obj, recoded) = self.unpack_blob(key, &blob, |raw| {
            logged_recode(key, blob.recoded(raw, &trained?))
        })?;
        let mut handoff = self.handoff.lock();
        let entries = handoff.entry(key.clone()).or_default();
        entries.retain(|(weak, _)| weak.strong_count() > 0);
        entries.push((Arc::downgrade(&obj), recoded.unwrap_or(blob)));
        drop(handoff);
        Ok(obj)
    }

    fn peek(&self, key: &ObjectKey, body: &super::PackedBody) -> Result<Arc<K>, StorageError> {
        let super::PackedBody::Compressed { blob, .. } = body else {
            return Err(not_packed_here(key));
        };
        self.unpack_blob(key, blob, |_| ()).map(|(obj, ())| obj)
    }

    fn release(&self, after_write: bool) {
        // One at a time, so that a free never holds this lock either. Readers free only what
        // is over the bound: the writer decoded these objects and frees them best.
        loop {
            let len = self.evicted_len.load(Relaxed);
            if len == 0 || (!after_write && len <= EVICTED_MAX) {
                return;
            }
            let out = {
                let mut evicted = self.evicted.lock();
                let at = if evicted.len() > EVICTED_MAX {
                    Some(0)
                } else if after_write {
                    evicted.iter().position(|obj| Arc::strong_count(obj) == 1)
                } else {
                    None
                };
                let out = at.and_then(|at| evicted.remove(at));
                self.evicted_len.store(evicted.len(), Relaxed);
                out
            };
            let Some(out) = out else { return };
            drop(out);
        }
    }

    fn maintain(&self, slots: &mut dyn SlotMap<CompactSlot<K>>) {
        self.recode_some(slots);
        self.tidy(&*slots);
    }

    fn tidy(&self, slots: &dyn SlotMap<CompactSlot<K>>) {
        let mut checked = 0;
        while checked < SWEEP_PER_CALL {
            let Some(key) = self.sweep.lock().pop() else {
                return;
            };
            checked += 1;
            let Some(slot) = slots.slot(&key) else {
                continue;
            };
            let mut shared = slot.shared.lock();
            if shared.weak.strong_count() == 0 {
                // Frees the allocation the dead `Weak` pinned.
                shared.weak = Weak::new();
                shared.queued = false;
            } else {
                drop(shared);
                self.sweep.lock().push(&key);
            }
        }
    }

    fn stats(&self) -> CacheStats {
        CacheStats {
            decodes: self.counters.decodes.load(Relaxed),
            decode_errors: self.counters.decode_errors.load(Relaxed),
            shared_hits: self.counters.shared_hits.load(Relaxed),
            stored_bytes: self.counters.stored_bytes.load(Relaxed),
            encoded_bytes: self.counters.encoded_bytes.load(Relaxed),
            dictionary_trainings: self.counters.trainings.load(Relaxed),
            dictionary_trainings_started: self.counters.trainings_started.load(Relaxed),
            packed: self.counters.packed.load(Relaxed),
            packed_from_wire: self.counters.packed_from_wire.load(Relaxed),
            unpacks: self.counters.unpacks.load(Relaxed),
            kept_packed: self.counters.kept_packed.load(Relaxed),
            checked: self.counters.checked.load(Relaxed),
        }
    }

    fn name(&self) -> &'static str {
        "Compact"
    }

    #[cfg(test)]
    fn sweep_len(&self) -> usize {
        self.sweep.lock().queued.len()
    }
}

#[cfg(test)]
mod codec_tests {
    use super::Codec;

    /// Every cached object has a blob: the flags that keep an unreadable one from being
    /// reported at each read must not make it larger.
    #[test]
    fn a_blob_stays_48_bytes() {
        assert_eq!(std::mem::size_of::<super::Blob>(), 48);
    }

    /// A retired codec (a newer dictionary took over) frees its compression side and still
    /// decompresses its blobs.
    #[test]
    fn a_retired_codec_still_decompresses() {
        let codec = Codec::new(1, 3, b"some dictionary bytes, not trained".to_vec()).unwrap();
        let raw: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let blob = codec.compress(&raw).unwrap();
        codec.retire();
        assert!(codec.is_retired());
        assert!(codec.compress(&raw).is_err());
        assert_eq!(
            codec.decompressed(&blob, 5000, <[u8]>::to_vec).unwrap(),
            raw
        );
    }

    /// A reused buffer is larger than the next object: its capacity must not become the bound,
    /// so a blob that decompresses to any other length than the one stored is an error.
    #[test]
    fn a_blob_that_decompresses_to_another_length_than_stored_is_refused() {
        let codec = Codec::new(0, 3, Vec::new()).unwrap();
        let raw: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let blob = codec.compress(&raw).unwrap();
        let big = codec.compress(&vec![1u8; 64 * 1024]).unwrap();
        codec.decompressed(&big, 64 * 1024, |_| ()).unwrap();
        assert_eq!(
            codec.decompressed(&blob, 5000, <[u8]>::to_vec).unwrap(),
            raw
        );
        for wrong in [0, 4999, 5001, 60_000] {
            let e = codec.decompressed(&blob, wrong, |_| ()).unwrap_err();
            assert!(!e.to_string().is_empty(), "{wrong}");
        }
        // And the pool still works after the refusals.
        codec
            .decompressed(&blob, 5000, |r| assert_eq!(r, &raw[..]))
            .unwrap();
    }
}
