//! client-go's `tools/cache/the_real_fifo_test.go` (v0.37.2), against [`InOrderFifo`].
//!
//! client-go's shared informers build their RealFIFO with `AtomicEvents`,
//! `UnlockWhileProcessing` and `EmitDeltaTypeBookmark` (the defaults of the `AtomicFIFO` and
//! `UnlockWhileProcessingFIFO` gates since v0.36), and pop it with `PopBatch`
//! (`InOrderInformersBatchProcess`). [`InOrderFifo`] is always that FIFO, so these tests run
//! every Go case under those options. Most Go cases build the FIFO without `AtomicEvents`
//! (`NewRealFIFO` with known objects), where a relist is a `Replaced` delta per object plus
//! tombstones made by the FIFO; informers no longer run that, and `tests/CLIENTGO.md` lists those
//! cases as skipped. A Go case that only adds, updates and deletes behaves the same in both
//! modes and is translated as it is; a case whose expectations depend on the mode is translated
//! with the atomic expectations, which the doc comment spells out.
//!
//! Go's objects are a name and an integer; here a cluster-scoped ConfigMap whose name is the Go
//! name (so its key is too) and whose `data.val` is the integer. Go pops one delta at a time with
//! `Pop`; the crate's FIFO pops batches ([`InOrderFifo::pop`], client-go `PopBatch`), so where a
//! Go case checks the order of single pops, these check the order of the batches flattened, and
//! where the batches are the point, the batches themselves.
//!
//! The last tests are not in Go's file: they hold [`InOrderFifo`] (and an in-order informer) to
//! rules of `the_real_fifo.go` itself that the Go tests do not reach.

mod clientgo_support;

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::FutureExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube_informer::{
    FifoError, FifoMode, InOrderDelta, InOrderFifo, Indexer, InformerConfig, KnownObjects,
    SharedIndexInformer,
};

use clientgo_support::{FakeControllerSource, PATIENCE, TestListener, settle};

/// client-go `mkFifoObj(name, val)`: a cluster-scoped ConfigMap keyed `name`.
fn obj(name: &str, val: i64) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("val".to_owned(), val.to_string())])),
        ..ConfigMap::default()
    }
}

fn name(o: &ConfigMap) -> &str {
    o.metadata.name.as_deref().unwrap_or("")
}

fn val(o: &ConfigMap) -> i64 {
    o.data
        .as_ref()
        .and_then(|d| d.get("val"))
        .and_then(|v| v.parse().ok())
        .expect("test objects carry a value")
}

/// `name=val`, the way the expectations below spell an object.
fn show(o: &ConfigMap) -> String {
    format!("{}={}", name(o), val(o))
}

/// One delta as a short string: `added foo=10`, `replaced-all@123 [foo=2]`, `sync-all`,
/// `bookmark@123`.
fn describe(d: &InOrderDelta<ConfigMap>) -> String {
    match d {
        InOrderDelta::Added(o) => format!("added {}", show(o)),
        InOrderDelta::Updated(o) => format!("updated {}", show(o)),
        InOrderDelta::Deleted(o) => format!("deleted {}", show(o)),
        InOrderDelta::ReplacedAll {
            objects,
            resource_version,
        } => format!(
            "replaced-all@{resource_version} [{}]",
            objects
                .iter()
                .map(|o| show(o))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        InOrderDelta::SyncAll => "sync-all".to_owned(),
        InOrderDelta::Bookmark { resource_version } => format!("bookmark@{resource_version}"),
        InOrderDelta::Forgotten(k) => format!("forgotten {k}"),
    }
}

/// The FIFO client-go's informers build (`AtomicEvents`, `UnlockWhileProcessing`,
/// `EmitDeltaTypeBookmark`): every [`InOrderFifo`] is.
fn fifo() -> InOrderFifo<ConfigMap> {
    InOrderFifo::new(None)
}

/// Pops one batch if one is ready: (descriptions, is_in_initial_list).
fn pop_now(f: &InOrderFifo<ConfigMap>) -> Option<(Vec<String>, bool)> {
    f.pop(|batch, initial| (batch.iter().map(describe).collect(), initial))
        .now_or_never()
        .map(|r| r.expect("the fifo is open"))
}

/// Every batch ready now, in order.
fn drain(f: &InOrderFifo<ConfigMap>) -> Vec<Vec<String>> {
    std::iter::from_fn(|| pop_now(f).map(|(b, _)| b)).collect()
}

/// client-go `popN(f, len(f.getItems()))` + `collapseDeltas`: every queued delta, in order,
/// popped one at a time as Go's `Pop` does.
fn pop_all_single(f: InOrderFifo<ConfigMap>) -> Vec<String> {
    let f = f.with_batch_size(1);
    let out = drain(&f).concat();
    assert!(f.is_empty(), "deltas left behind");
    out
}

/// A consumer task popping batches into a channel until the FIFO closes (the goroutine of
/// client-go's `addUpdate`/`addReplace` style tests); returns the channel and the task.
fn consumer(
    f: &Arc<InOrderFifo<ConfigMap>>,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<Vec<String>>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let f = f.clone();
    let task = tokio::spawn(async move {
        while let Ok(batch) = f
            .pop(|batch, _| batch.iter().map(describe).collect::<Vec<_>>())
            .await
        {
            let _ = tx.send(batch);
        }
    });
    (rx, task)
}

async fn recv(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<String>>) -> Vec<String> {
    tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .expect("no batch popped: likely deadlocked")
        .expect("the consumer ended early")
}

/// client-go `TestRealFIFO_basic`: two producers add concurrently; each producer's objects come
/// out in the order it added them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic() {
    const AMOUNT: i64 = 500;
    let f = Arc::new(fifo());
    let producers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|prefix| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..AMOUNT {
                    f.add(obj(&format!("{prefix}{i}"), i + 1)).unwrap();
                }
            })
        })
        .collect();
    let mut last = BTreeMap::from([('a', 0), ('b', 0)]);
    let mut seen = 0;
    while seen < 2 * AMOUNT {
        let batch = tokio::time::timeout(
            PATIENCE,
            f.pop(|batch, _| {
                batch
                    .iter()
                    .map(|d| match d {
                        InOrderDelta::Added(o) => (name(o).chars().next().unwrap(), val(o)),
                        other => panic!("unexpected {}", describe(other)),
                    })
                    .collect::<Vec<_>>()
            }),
        )
        .await
        .expect("pop: likely deadlocked")
        .unwrap();
        for (producer, v) in batch {
            let prev = last.insert(producer, v).unwrap();
            assert!(
                v > prev,
                "{producer}: got {v} out of order, last was {prev}"
            );
            seen += 1;
        }
    }
    for p in producers {
        p.join().unwrap();
    }
    assert!(f.is_empty());
}

/// client-go `TestRealFIFO_addUpdate`: an add, an update and a delete of one key are all queued
/// (no merging) and popped in order, one at a time (one key never shares a batch); nothing more
/// comes; closing ends the consumer.
#[tokio::test]
async fn add_update() {
    let f = Arc::new(fifo());
    f.add(obj("foo", 10)).unwrap();
    f.update(obj("foo", 12)).unwrap();
    f.delete(obj("foo", 15)).unwrap();
    assert_eq!(f.len(), 3, "every change is queued");

    let (mut rx, task) = consumer(&f);
    assert_eq!(recv(&mut rx).await, ["added foo=10"]);
    assert_eq!(recv(&mut rx).await, ["updated foo=12"]);
    assert_eq!(recv(&mut rx).await, ["deleted foo=15"]);
    let extra = tokio::time::timeout(Duration::from_millis(50), rx.recv()).await;
    assert!(extra.is_err(), "got a further batch {extra:?}");
    assert!(f.is_empty());
    f.close();
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("consumer did not end on close: likely deadlocked")
        .unwrap();
}

/// client-go `TestRealFIFO_transformer`, with atomic replaces: every object is transformed
/// exactly once, when it is queued, whatever the delta. Go's non-atomic FIFO turns each
/// `Replace` into tombstones for `bar` (and hands the transformer the tombstones to check their
/// object was transformed once); an atomic FIFO queues the replace as one `ReplacedAll`
/// (tombstones are the informer's business, from its cache, whose objects were transformed when
/// queued). The listed objects are transformed too: one replace here lists an object.
#[test]
fn transformer() {
    fn xfrm(o: &ConfigMap) -> u32 {
        o.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("xfrm"))
            .map_or(0, |v| v.parse().unwrap())
    }
    let f = fifo().with_transform(Arc::new(|mut o: ConfigMap| {
        let n = xfrm(&o) + 1;
        o.metadata
            .annotations
            .get_or_insert_default()
            .insert("xfrm".to_owned(), n.to_string());
        o
    }));
    f.add(obj("foo", 10)).unwrap();
    f.add(obj("bar", 11)).unwrap();
    f.update(obj("foo", 12)).unwrap();
    f.delete(obj("foo", 15)).unwrap();
    f.replace(vec![], "").unwrap();
    f.add(obj("bar", 16)).unwrap();
    f.replace(vec![obj("baz", 17)], "").unwrap();

    let f = f.with_batch_size(1);
    let mut popped = Vec::new();
    while let Some(batch) = f
        .pop(|batch, _| {
            batch
                .iter()
                .map(|d| {
                    let objects: Vec<&Arc<ConfigMap>> = match d {
                        InOrderDelta::Added(o)
                        | InOrderDelta::Updated(o)
                        | InOrderDelta::Deleted(o) => vec![o],
                        InOrderDelta::ReplacedAll { objects, .. } => objects.iter().collect(),
                        other => panic!("unexpected {}", describe(other)),
                    };
                    for o in objects {
                        assert_eq!(xfrm(o), 1, "{} transformed {} times", show(o), xfrm(o));
                    }
                    describe(d)
                })
                .collect::<Vec<_>>()
        })
        .now_or_never()
    {
        popped.extend(batch.unwrap());
    }
    assert_eq!(
        popped,
        [
            "added foo=10",
            "added bar=11",
            "updated foo=12",
            "deleted foo=15",
            "replaced-all@ []",
            "added bar=16",
            "replaced-all@ [baz=17]",
        ]
    );
}

/// client-go `TestRealFIFO_enqueueingNoLister`: everything is queued, including the delete of a
/// key the FIFO never saw, and comes out in order.
#[test]
fn enqueueing_no_lister() {
    let f = fifo();
    f.add(obj("foo", 10)).unwrap();
    f.update(obj("bar", 15)).unwrap();
    f.add(obj("qux", 17)).unwrap();
    f.delete(obj("qux", 18)).unwrap();
    f.delete(obj("baz", 20)).unwrap();
    let vals: Vec<String> = drain(&f).concat();
    assert_eq!(
        vals,
        [
            "added foo=10",
            "updated bar=15",
            "added qux=17",
            "deleted qux=18",
            "deleted baz=20"
        ]
    );
    assert!(f.is_empty(), "queue unexpectedly not empty");
}

/// client-go `TestRealFIFO_enqueueingWithLister`: with the consumer's store given to the FIFO
/// (the informer's indexer, which the crate's in-order FIFO reads only to reuse unchanged listed
/// objects), adds, updates and deletes are queued all the same.
#[test]
fn enqueueing_with_lister() {
    let store = Indexer::new();
    for (n, v) in [("foo", 5), ("bar", 6), ("baz", 7)] {
        store.add(Arc::new(obj(n, v))).unwrap();
    }
    let f = InOrderFifo::new(Some(Arc::new(store) as Arc<dyn KnownObjects<ConfigMap>>));
    f.add(obj("foo", 10)).unwrap();
    f.update(obj("bar", 15)).unwrap();
    f.delete(obj("baz", 20)).unwrap();
    assert_eq!(
        drain(&f).concat(),
        ["added foo=10", "updated bar=15", "deleted baz=20"]
    );
    assert!(f.is_empty(), "queue unexpectedly not empty");
}

/// client-go `TestRealFIFO_DeleteExistingNonPropagated`: an add then a delete of the same key
/// are two deltas, the delete last.
#[test]
fn delete_existing_non_propagated() {
    let f = fifo();
    f.add(obj("foo", 5)).unwrap();
    f.delete(obj("foo", 6)).unwrap();
    assert_eq!(pop_all_single(f), ["added foo=5", "deleted foo=6"]);
}

/// client-go `TestRealFIFO_detectLineJumpers`: every change comes out in arrival order; one
/// queued after a pop goes to the back. Go pops one at a time; with batch pops the batches are
/// also checked: distinct keys, closed at the first repeated key.
#[test]
fn detect_line_jumpers() {
    let f = fifo();
    f.add(obj("foo", 10)).unwrap();
    f.add(obj("bar", 1)).unwrap();
    f.add(obj("foo", 11)).unwrap();
    f.add(obj("foo", 13)).unwrap();
    f.add(obj("zab", 30)).unwrap();

    assert_eq!(pop_now(&f).unwrap().0, ["added foo=10", "added bar=1"]);
    // foo must not jump back in line.
    f.add(obj("foo", 14)).unwrap();
    assert_eq!(
        drain(&f),
        [
            vec!["added foo=11"],
            vec!["added foo=13", "added zab=30"],
            vec!["added foo=14"],
        ]
    );
}

/// client-go `TestRealFIFO_HasSynced`, with atomic replaces. Go's cases run without
/// `AtomicEvents`, where a replace queues one delta per listed object and an empty replace
/// queues nothing (synced at once); atomically a replace is one `ReplacedAll`, so the FIFO has
/// synced once that one entry has been popped, whatever the list holds.
#[test]
fn has_synced() {
    type Action = fn(&InOrderFifo<ConfigMap>);
    let replace_ab: Action = |f| f.replace(vec![obj("a", 1), obj("b", 2)], "0").unwrap();
    let pop: Action = |f| {
        pop_now(f).expect("something to pop");
    };
    let cases: Vec<(&str, Vec<Action>, bool)> = vec![
        ("nothing yet", vec![], false),
        ("an add first", vec![|f| f.add(obj("a", 1)).unwrap()], true),
        // Go without AtomicEvents: true (nothing queued).
        (
            "an empty replace, not popped",
            vec![|f| f.replace(vec![], "0").unwrap()],
            false,
        ),
        (
            "an empty replace, popped",
            vec![|f| f.replace(vec![], "0").unwrap(), pop],
            true,
        ),
        ("a replace of two, not popped", vec![replace_ab], false),
        // Go without AtomicEvents: false (one of two popped).
        ("a replace of two, popped once", vec![replace_ab, pop], true),
        (
            "a replace listing one key twice, popped once",
            vec![
                |f| f.replace(vec![obj("a", 1), obj("a", 2)], "0").unwrap(),
                pop,
            ],
            true,
        ),
    ];
    for (name, actions, expected) in cases {
        let f = fifo();
        for a in actions {
            a(&f);
        }
        assert_eq!(f.has_synced(), expected, "case {name:?}");
    }
}

/// client-go `TestRealFIFO_PopShouldUnblockWhenClosed`: pops waiting on an empty FIFO all return
/// once it is closed.
#[tokio::test]
async fn pop_should_unblock_when_closed() {
    const JOBS: usize = 10;
    let f = Arc::new(fifo());
    let (tx, mut rx) = tokio::sync::mpsc::channel(JOBS);
    for _ in 0..JOBS {
        let (f, tx) = (f.clone(), tx.clone());
        tokio::spawn(async move {
            let res = f.pop(|_, _| ()).await;
            let _ = tx.send(res).await;
        });
    }
    tokio::task::yield_now().await;
    f.close();
    for _ in 0..JOBS {
        let res = tokio::time::timeout(Duration::from_millis(500), rx.recv())
            .await
            .expect("timed out waiting for pop to return after close")
            .unwrap();
        assert_eq!(res, Err(FifoError::Closed));
    }
}

/// client-go `TestRealFIFO_PopMultipleDeltaInBatch`, with atomic replaces: each Go case starts
/// with a replace of its initial items, then updates. Atomically the replace is one
/// `ReplacedAll`, which never shares a batch and is not split by the batch size (Go's
/// non-atomic replace queues one `Replaced` per item, which batch); the updates after it batch
/// as in Go: distinct keys, closed at a repeated key or at the batch size. As in Go, exactly the
/// initial items are delivered as "in the initial list".
#[test]
fn pop_multiple_delta_in_batch() {
    const UNLIMITED: usize = 999_999;
    let o = |n: u8| obj(&format!("foo{n}"), 5);
    struct Case {
        name: &'static str,
        initial: Vec<u8>,
        updates: Vec<u8>,
        batch_size: usize,
        expected: Vec<Vec<&'static str>>,
    }
    let cases = [
        Case {
            name: "non-split: pop unique items should work",
            initial: vec![1, 2, 3],
            updates: vec![],
            batch_size: UNLIMITED,
            expected: vec![vec!["replaced-all@123 [foo1=5 foo2=5 foo3=5]"]],
        },
        Case {
            name: "split due to initial list: initial 2 items with 2 updates should have 2 batches",
            initial: vec![1, 2],
            updates: vec![3, 4],
            batch_size: 2,
            expected: vec![
                vec!["replaced-all@123 [foo1=5 foo2=5]"],
                vec!["updated foo3=5", "updated foo4=5"],
            ],
        },
        Case {
            name: "split due to non-unique#1: update single item for multiple items should have separate batch",
            initial: vec![1],
            updates: vec![1, 1],
            batch_size: UNLIMITED,
            expected: vec![
                vec!["replaced-all@123 [foo1=5]"],
                vec!["updated foo1=5"],
                vec!["updated foo1=5"],
            ],
        },
        Case {
            name: "split due to non-unique#2: update 3 item for with non-unique item at the end should have separate batch",
            initial: vec![1, 2],
            updates: vec![2, 3],
            batch_size: UNLIMITED,
            expected: vec![
                vec!["replaced-all@123 [foo1=5 foo2=5]"],
                vec!["updated foo2=5", "updated foo3=5"],
            ],
        },
        Case {
            name: "split due to non-unique#3: update 3 item for with non-unique item in the mid should have separate batch",
            initial: vec![1, 2, 3],
            updates: vec![2],
            batch_size: UNLIMITED,
            expected: vec![
                vec!["replaced-all@123 [foo1=5 foo2=5 foo3=5]"],
                vec!["updated foo2=5"],
            ],
        },
        Case {
            name: "split due to batch size#1: batching initial list should work",
            initial: vec![1, 2, 3],
            updates: vec![],
            batch_size: 2,
            // Go without AtomicEvents: [foo1 foo2] [foo3].
            expected: vec![vec!["replaced-all@123 [foo1=5 foo2=5 foo3=5]"]],
        },
        Case {
            name: "split due to batch size#2: batching incoming non-initial deltas should work",
            initial: vec![],
            updates: vec![1, 2, 3],
            batch_size: 2,
            expected: vec![
                vec!["replaced-all@123 []"],
                vec!["updated foo1=5", "updated foo2=5"],
                vec!["updated foo3=5"],
            ],
        },
        Case {
            name: "split due to batch size#3: pop 4 mixed initial & non-initial items with 2 batch size should have 3 batch",
            initial: vec![1, 2, 3],
            updates: vec![4],
            batch_size: 2,
            // Go without AtomicEvents: [foo1 foo2] [foo3] [foo4].
            expected: vec![
                vec!["replaced-all@123 [foo1=5 foo2=5 foo3=5]"],
                vec!["updated foo4=5"],
            ],
        },
    ];
    for case in cases {
        let f = fifo().with_batch_size(case.batch_size);
        f.replace(case.initial.iter().map(|n| o(*n)).collect(), "123")
            .unwrap();
        for n in &case.updates {
            f.update(o(*n)).unwrap();
        }
        let mut batches = Vec::new();
        let mut initial_items = Vec::new();
        while let Some(r) = f
            .pop(|batch, initial| {
                if initial {
                    for d in &batch {
                        if let InOrderDelta::ReplacedAll { objects, .. } = d {
                            initial_items.extend(objects.iter().map(|o| show(o)));
                        } else {
                            initial_items.push(describe(d));
                        }
                    }
                }
                batch.iter().map(describe).collect::<Vec<_>>()
            })
            .now_or_never()
        {
            batches.push(r.unwrap());
        }
        assert_eq!(batches, case.expected, "{}", case.name);
        let want_initial: Vec<String> = case.initial.iter().map(|n| show(&o(*n))).collect();
        assert_eq!(initial_items, want_initial, "{}: initial items", case.name);
    }
}

/// client-go `TestRealFIFO_ReplaceAtomic`: an atomic replace is one `ReplacedAll` with the list
/// and its resourceVersion, queued after whatever came before (an add, a bookmark), and
/// several run in order.
#[test]
fn replace_atomic() {
    type Ops = fn(&InOrderFifo<ConfigMap>);
    let cases: [(&str, Ops, &[&str]); 4] = [
        (
            "Base replace",
            |f| f.replace(vec![], "123").unwrap(),
            &["replaced-all@123 []"],
        ),
        (
            "Added object exists in deltas on Atomic Replace",
            |f| {
                f.add(obj("foo", 2)).unwrap();
                f.replace(vec![], "123").unwrap();
            },
            &["added foo=2", "replaced-all@123 []"],
        ),
        (
            "Multiple replaces run in order",
            |f| {
                f.add(obj("foo", 2)).unwrap();
                f.replace(vec![obj("foo", 2)], "10").unwrap();
                f.replace(vec![obj("foo", 2)], "20").unwrap();
                f.replace(vec![], "56").unwrap();
            },
            &[
                "added foo=2",
                "replaced-all@10 [foo=2]",
                "replaced-all@20 [foo=2]",
                "replaced-all@56 []",
            ],
        ),
        (
            "Bookmark object should not be included in Replace",
            |f| {
                f.bookmark("123");
                f.replace(vec![], "1234").unwrap();
            },
            &["bookmark@123", "replaced-all@1234 []"],
        ),
    ];
    for (name, ops, expected) in cases {
        let f = fifo();
        ops(&f);
        assert_eq!(pop_all_single(f), expected, "{name}");
    }
}

/// client-go `TestRealFIFO_ReplaceAtomicPop`: an add then an atomic replace pop as the add,
/// then one `ReplacedAll` with the listed object; nothing else; closing ends the consumer.
#[tokio::test]
async fn replace_atomic_pop() {
    let f = Arc::new(fifo());
    f.add(obj("foo", 10)).unwrap();
    f.replace(vec![obj("foo", 15)], "20").unwrap();
    let (mut rx, task) = consumer(&f);
    assert_eq!(recv(&mut rx).await, ["added foo=10"]);
    assert_eq!(recv(&mut rx).await, ["replaced-all@20 [foo=15]"]);
    let extra = tokio::time::timeout(Duration::from_millis(50), rx.recv()).await;
    assert!(extra.is_err(), "got a further batch {extra:?}");
    assert!(f.is_empty(), "item did not get removed");
    f.close();
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("consumer did not end on close: likely deadlocked")
        .unwrap();
}

/// client-go `TestRealFIFO_ResyncAtomic`: an atomic resync is one `SyncAll`, after whatever came
/// before it.
#[test]
fn resync_atomic() {
    let f = fifo();
    f.resync();
    assert_eq!(pop_all_single(f), ["sync-all"], "Base resync");

    let f = fifo();
    f.add(obj("foo", 2)).unwrap();
    f.resync();
    assert_eq!(
        pop_all_single(f),
        ["added foo=2", "sync-all"],
        "Added object exists in deltas on Atomic Resync"
    );
}

// ---------------------------------------------------------------------------------------------
// Rules of `the_real_fifo.go` the Go tests do not reach.

/// `the_real_fifo.go` `Bookmark`: queues the bookmark and leaves `populated` alone, so a bookmark
/// before the first `Replace` does not make the FIFO synced; the replace then counts it in its
/// initial population (`initialPopulationCount = len(f.items)`): synced once both are popped,
/// both popped as in the initial list.
#[test]
fn a_bookmark_before_the_first_replace_does_not_populate() {
    let f = fifo();
    f.bookmark("5");
    assert!(!f.has_synced(), "synced after a lone bookmark");
    f.replace(vec![obj("a", 1)], "6").unwrap();
    assert!(!f.has_synced(), "synced before the initial list was popped");
    assert_eq!(pop_now(&f).unwrap(), (vec!["bookmark@5".to_owned()], true));
    assert!(!f.has_synced(), "synced before the replace was popped");
    assert_eq!(
        pop_now(&f).unwrap(),
        (vec!["replaced-all@6 [a=1]".to_owned()], true)
    );
    assert!(f.has_synced());
}

/// `the_real_fifo.go` `Resync` with `AtomicEvents` (`addResyncToItemsLocked`): queues `SyncAll`
/// and leaves `populated` alone, as [`a_bookmark_before_the_first_replace_does_not_populate`].
#[test]
fn a_resync_before_the_first_replace_does_not_populate() {
    let f = fifo();
    f.resync();
    assert!(!f.has_synced(), "synced after a lone resync");
    f.replace(vec![obj("a", 1)], "6").unwrap();
    assert!(!f.has_synced(), "synced before the initial list was popped");
    assert_eq!(pop_now(&f).unwrap(), (vec!["sync-all".to_owned()], true));
    assert_eq!(
        pop_now(&f).unwrap(),
        (vec!["replaced-all@6 [a=1]".to_owned()], true)
    );
    assert!(f.has_synced());
}

/// An informer whose lists keep failing while resyncs come due must not report synced.
async fn lists_fail_while_resyncs_come_due(mode: FifoMode) {
    let source = FakeControllerSource::new();
    source.add(obj("a", 1));
    source.set_list_error(Some((403, "Forbidden", "Access Denied")));
    let informer = SharedIndexInformer::new(
        source.clone(),
        InformerConfig::default()
            .resync_period(Duration::from_secs(1))
            .fifo_mode(mode),
    );
    let listener = TestListener::new();
    let reg = informer.add_event_handler(listener.clone()).unwrap();
    informer.start();
    for _ in 0..5 {
        tokio::time::advance(Duration::from_secs(1)).await;
        settle(Duration::from_millis(5)).await;
    }
    let (lists, _) = source.requests();
    assert!(lists >= 2, "the list was retried ({lists} lists)");
    assert!(
        !informer.has_synced(),
        "{mode:?}: has_synced with every list failing; cache holds {} objects",
        informer.indexer().len()
    );
    assert!(!reg.has_synced(), "{mode:?}: the registration has_synced");
    informer.shutdown().await;
}

/// [`lists_fail_while_resyncs_come_due`] in DeltaFIFO mode, which holds (a DeltaFIFO resync of an
/// empty cache queues nothing and does not populate the FIFO).
#[tokio::test(start_paused = true)]
async fn a_delta_fifo_informer_whose_lists_fail_never_syncs_even_when_resyncs_come_due() {
    lists_fail_while_resyncs_come_due(FifoMode::DeltaFifo).await;
}

/// The informer-level consequence of [`a_resync_before_the_first_replace_does_not_populate`]:
/// [`lists_fail_while_resyncs_come_due`] in in-order mode. client-go cannot get there twice over:
/// its reflector starts resyncing only once a list has succeeded (`reflector.go`
/// `ListAndWatchWithContext` → `watchWithResync`), and an atomic `Resync` does not populate the
/// FIFO anyway. The crate's reflector runs its resync timer from the start, so a resync comes
/// due while the list is still failing, and queues a `SyncAll` that populates the FIFO.
#[tokio::test(start_paused = true)]
async fn an_in_order_informer_whose_lists_fail_never_syncs_even_when_resyncs_come_due() {
    lists_fail_while_resyncs_come_due(FifoMode::InOrder).await;
}

/// `the_real_fifo.go` `whileProcessing_locked` with `UnlockWhileProcessing`: the lock is released
/// while a batch is processed, so a producer can add meanwhile (here from another thread, which
/// would deadlock otherwise), and what it adds comes after the batch.
#[test]
fn producers_add_while_a_batch_is_processed() {
    let f = Arc::new(fifo());
    f.add(obj("a", 1)).unwrap();
    let start = Instant::now();
    let taken = f
        .pop(|batch, _| {
            let f = f.clone();
            std::thread::spawn(move || f.add(obj("b", 2)).unwrap())
                .join()
                .unwrap();
            batch.iter().map(describe).collect::<Vec<_>>()
        })
        .now_or_never()
        .unwrap()
        .unwrap();
    assert!(start.elapsed() < PATIENCE);
    assert_eq!(taken, ["added a=1"]);
    assert_eq!(drain(&f), [["added b=2"]]);
}
