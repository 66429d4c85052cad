//! client-go's `tools/cache/delta_fifo_test.go` (v0.37), case by case, against [`DeltaFifo`].
//!
//! The Go tests key plain structs by a `name` field and carry a `val`; here every object is a
//! cluster-scoped ConfigMap whose name is the key and whose `data.val` is the value.
//!
//! One systematic difference: the crate's FIFO always behaves as client-go's does with
//! `EmitDeltaTypeReplaced: true` (what every client-go informer sets), so where a Go case built
//! without that option expects `Sync` deltas from `Replace`, these expect `Replaced`. `Sync`
//! still comes from [`DeltaFifo::resync`]. See `tests/CLIENTGO.md` for the full mapping.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::FutureExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube_informer::{
    DeletedFinalStateUnknown, Delta, DeltaFifo, DeltaObject, DeltaType, Deltas, FifoError,
    KnownObjects, ObjectKey, key_of,
};

/// A cluster-scoped ConfigMap `name` carrying `val`.
fn obj(name: &str, val: impl ToString) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("val".to_owned(), val.to_string())])),
        ..ConfigMap::default()
    }
}

fn val(cm: &ConfigMap) -> &str {
    cm.data
        .as_ref()
        .and_then(|d| d.get("val"))
        .map_or("", String::as_str)
}

fn name(cm: &ConfigMap) -> &str {
    cm.metadata.name.as_deref().unwrap_or("")
}

/// One delta as text: `Added foo=2`, or `Deleted tombstone(foo) foo=2` for a tombstone.
fn show(d: &Delta<ConfigMap>) -> String {
    match &d.object {
        DeltaObject::Object(o) => format!("{:?} {}={}", d.kind, name(o), val(o)),
        DeltaObject::DeletedFinalStateUnknown(t) => format!(
            "{:?} tombstone({}) {}={}",
            d.kind,
            t.key,
            name(&t.obj),
            val(&t.obj)
        ),
    }
}

fn show_all(ds: &Deltas<ConfigMap>) -> Vec<String> {
    ds.iter().map(show).collect()
}

/// The expected form of [`show`] for a plain object.
fn d(kind: DeltaType, name: &str, val: impl ToString) -> String {
    format!("{kind:?} {name}={}", val.to_string())
}

/// The expected form of [`show`] for a tombstone carrying `name=val`.
fn tomb(name: &str, val: impl ToString) -> String {
    format!("Deleted tombstone({name}) {name}={}", val.to_string())
}

/// The consumer's store as a fixed list (client-go's `literalListerGetter`).
struct Literal(Vec<ConfigMap>);

impl KnownObjects<ConfigMap> for Literal {
    fn list_keys(&self) -> Vec<ObjectKey> {
        self.0.iter().map(|o| key_of(o).unwrap()).collect()
    }

    fn get_by_key(&self, key: &ObjectKey) -> Option<Arc<ConfigMap>> {
        self.0
            .iter()
            .find(|o| key_of(*o).unwrap() == *key)
            .map(|o| Arc::new(o.clone()))
    }
}

fn with_known(objs: Vec<ConfigMap>) -> DeltaFifo<ConfigMap> {
    DeltaFifo::new(Some(
        Arc::new(Literal(objs)) as Arc<dyn KnownObjects<ConfigMap>>
    ))
}

fn without_known() -> DeltaFifo<ConfigMap> {
    DeltaFifo::new(None)
}

/// Pops the head key, which must be queued already; returns its deltas and `is_in_initial_list`.
fn pop2(f: &DeltaFifo<ConfigMap>) -> (Deltas<ConfigMap>, bool) {
    f.pop(|deltas, initial| (deltas, initial))
        .now_or_never()
        .expect("a key should be queued")
        .expect("the FIFO is not closed")
}

fn pop(f: &DeltaFifo<ConfigMap>) -> Deltas<ConfigMap> {
    pop2(f).0
}

/// The newest object of the next key (client-go's `testPop`).
fn pop_newest(f: &DeltaFifo<ConfigMap>) -> Arc<ConfigMap> {
    pop(f)
        .last()
        .expect("deltas are never empty")
        .object
        .object()
        .clone()
}

/// The newest object of each queued key (the Go test helper `list`).
fn newest_objects(f: &DeltaFifo<ConfigMap>) -> Vec<(String, String)> {
    f.list_keys()
        .iter()
        .map(|k| {
            let ds = f.get_by_key(k.as_str()).expect("queued keys have deltas");
            let o = ds.last().unwrap().object.object().clone();
            (name(&o).to_owned(), val(&o).to_owned())
        })
        .collect()
}

fn keys(f: &DeltaFifo<ConfigMap>) -> Vec<String> {
    f.list_keys().iter().map(ToString::to_string).collect()
}

async fn deadlock_guard<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: likely deadlocked"))
}

/// client-go `TestDeltaFIFO_basic`: two concurrent producers; each one's objects come out in the
/// order it added them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic() {
    let f = Arc::new(without_known());
    const AMOUNT: usize = 500;
    let producers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|prefix| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..AMOUNT {
                    f.add(obj(&format!("{prefix}-{i}"), i + 1)).unwrap();
                }
            })
        })
        .collect();
    let mut last = BTreeMap::from([("a", 0usize), ("b", 0usize)]);
    for _ in 0..AMOUNT * 2 {
        let newest = deadlock_guard(
            "pop",
            f.pop(|ds, _| ds.last().unwrap().object.object().clone()),
        )
        .await
        .unwrap();
        let producer = if name(&newest).starts_with("a-") {
            "a"
        } else {
            "b"
        };
        let v: usize = val(&newest).parse().unwrap();
        let prev = last.insert(producer, v).unwrap();
        assert!(
            v > prev,
            "producer {producer}: got {v} out of order, last was {prev}"
        );
    }
    for p in producers {
        p.join().unwrap();
    }
    assert!(f.is_empty());
}

/// client-go `TestDeltaFIFO_replaceWithDeleteDeltaIn`: a key whose queued deltas end in a
/// deletion still gets the listed object from a replace (kubernetes#83810: otherwise an
/// informer misses the re-creation).
#[test]
fn replace_with_delete_delta_in() {
    let f = with_known(vec![obj("foo", 1)]);
    f.delete(obj("foo", 1)).unwrap();
    f.replace(vec![obj("foo", 2)], "").unwrap();
    assert_eq!(
        show_all(&pop(&f)),
        [
            d(DeltaType::Deleted, "foo", 1),
            d(DeltaType::Replaced, "foo", 2)
        ]
    );
}

/// client-go `TestDeltaFIFOW_ReplaceMakesDeletionsForObjectsOnlyInQueue`: a key that is only
/// queued (the consumer never saw it) and missing from a replace gets exactly one deletion, with
/// or without known objects.
#[test]
fn replace_makes_deletions_for_objects_only_in_queue() {
    type Ops = fn(&DeltaFifo<ConfigMap>);
    let cases: Vec<(&str, Ops, Vec<String>)> = vec![
        (
            "added object is deleted on replace",
            |f| {
                f.add(obj("foo", 2)).unwrap();
                f.replace(vec![], "0").unwrap();
            },
            vec![d(DeltaType::Added, "foo", 2), tomb("foo", 2)],
        ),
        (
            "replaced object gets a single delete",
            |f| {
                f.add(obj("foo", 2)).unwrap();
                f.replace(vec![obj("foo", 2)], "0").unwrap();
                f.replace(vec![], "0").unwrap();
            },
            vec![
                d(DeltaType::Added, "foo", 2),
                d(DeltaType::Replaced, "foo", 2),
                tomb("foo", 2),
            ],
        ),
        (
            "deleted object gets a single delete",
            |f| {
                f.add(obj("foo", 2)).unwrap();
                f.delete(obj("foo", 2)).unwrap();
                f.replace(vec![], "0").unwrap();
            },
            vec![
                d(DeltaType::Added, "foo", 2),
                d(DeltaType::Deleted, "foo", 2),
            ],
        ),
        (
            // Go's case expects two `Sync`s: its FIFO is built without EmitDeltaTypeReplaced.
            "object listed twice gets a single delete",
            |f| {
                f.add(obj("foo", 2)).unwrap();
                f.replace(vec![obj("foo", 2)], "0").unwrap();
                f.replace(vec![obj("foo", 2)], "0").unwrap();
                f.replace(vec![], "0").unwrap();
            },
            vec![
                d(DeltaType::Added, "foo", 2),
                d(DeltaType::Replaced, "foo", 2),
                d(DeltaType::Replaced, "foo", 2),
                tomb("foo", 2),
            ],
        ),
        (
            "added object gets a single delete over several replaces",
            |f| {
                f.add(obj("foo", 2)).unwrap();
                f.replace(vec![], "0").unwrap();
                f.replace(vec![], "1").unwrap();
            },
            vec![d(DeltaType::Added, "foo", 2), tomb("foo", 2)],
        ),
        (
            "added, deleted and re-added object is deleted with its newest state",
            |f| {
                f.add(obj("foo", 2)).unwrap();
                f.delete(obj("foo", 2)).unwrap();
                f.add(obj("foo", 3)).unwrap();
                f.replace(vec![], "0").unwrap();
            },
            vec![
                d(DeltaType::Added, "foo", 2),
                d(DeltaType::Deleted, "foo", 2),
                d(DeltaType::Added, "foo", 3),
                tomb("foo", 3),
            ],
        ),
    ];
    for (case, ops, want) in cases {
        for (variant, f) in [
            ("with known objects", with_known(vec![])),
            ("without known objects", without_known()),
        ] {
            ops(&f);
            assert_eq!(show_all(&pop(&f)), want, "{case}, {variant}");
            assert!(
                f.is_empty(),
                "{case}, {variant}: extra deltas {:?}",
                keys(&f)
            );
        }
    }
}

/// client-go `TestDeltaFIFO_addUpdate`: add, update and delete of one key pop as one entry whose
/// newest object is the deletion's; nothing more follows.
#[tokio::test(start_paused = true)]
async fn add_update() {
    let f = Arc::new(without_known());
    f.add(obj("foo", 10)).unwrap();
    f.update(obj("foo", 12)).unwrap();
    f.delete(obj("foo", 15)).unwrap();
    assert_eq!(newest_objects(&f), [("foo".to_owned(), "15".to_owned())]);
    assert_eq!(keys(&f), ["foo"]);

    let (tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    let popper = {
        let f = f.clone();
        tokio::spawn(async move {
            while let Ok(o) = f
                .pop(|ds, _| ds.last().unwrap().object.object().clone())
                .await
            {
                let _ = tx.send(o);
            }
        })
    };
    let first = deadlock_guard("first pop", got.recv()).await.unwrap();
    assert_eq!(val(&first), "15");
    if let Ok(unexpected) = tokio::time::timeout(Duration::from_millis(50), got.recv()).await {
        panic!("got a second value {unexpected:?}");
    }
    assert!(f.get_by_key("foo").is_none(), "item was not removed");
    f.close();
    deadlock_guard("popper ends on close", popper)
        .await
        .unwrap();
}

/// client-go `TestDeltaFIFO_transformer`: the transform runs exactly once per object enqueued;
/// tombstones made by replaces carry the already transformed object.
#[test]
fn transformer() {
    fn mk(name: &str, rv: u32) -> ConfigMap {
        let mut o = obj(name, rv);
        o.data.as_mut().unwrap().insert("xfrm".into(), "0".into());
        o
    }
    fn xfrm(o: &ConfigMap) -> u32 {
        o.data.as_ref().unwrap()["xfrm"].parse().unwrap()
    }
    let f = without_known().with_transform(Arc::new(|mut o: ConfigMap| {
        let data = o.data.as_mut().unwrap();
        let n: u32 = data["xfrm"].parse().unwrap();
        data.insert("xfrm".into(), (n + 1).to_string());
        o
    }));
    f.add(mk("foo", 10)).unwrap();
    f.add(mk("bar", 11)).unwrap();
    f.update(mk("foo", 12)).unwrap();
    f.delete(mk("foo", 15)).unwrap();
    f.replace(vec![], "").unwrap();
    f.add(mk("bar", 16)).unwrap();
    f.replace(vec![], "").unwrap();

    assert_eq!(keys(&f), ["foo", "bar"]);
    for _ in 0..2 {
        let deltas = pop(&f);
        match &deltas.last().unwrap().object {
            DeltaObject::Object(o) => {
                assert_eq!(name(o), "foo", "expected the regular deletion of foo");
                assert_eq!(val(o), "15", "expected the last state of foo");
                assert_eq!(xfrm(o), 1, "foo transformed a wrong number of times");
            }
            DeltaObject::DeletedFinalStateUnknown(DeletedFinalStateUnknown { key, obj: o }) => {
                assert_eq!(key.as_str(), "bar", "expected the tombstone of bar");
                assert_eq!(val(o), "16", "expected the last state of bar");
                assert_eq!(xfrm(o), 1, "bar transformed a wrong number of times");
            }
        }
    }
}

/// client-go `TestDeltaFIFO_enqueueingNoLister`: without known objects, a delete of a key that
/// is not queued is dropped.
#[test]
fn enqueueing_no_lister() {
    let f = without_known();
    f.add(obj("foo", 10)).unwrap();
    f.update(obj("bar", 15)).unwrap();
    f.add(obj("qux", 17)).unwrap();
    f.delete(obj("qux", 18)).unwrap();
    // Nothing is queued for baz and nothing knows it: nothing to delete.
    f.delete(obj("baz", 20)).unwrap();
    for want in ["10", "15", "18"] {
        assert_eq!(val(&pop_newest(&f)), want);
    }
    assert!(f.is_empty(), "queue not empty: {:?}", keys(&f));
}

/// client-go `TestDeltaFIFO_enqueueingWithLister`: a delete of a key only the known objects hold
/// is queued.
#[test]
fn enqueueing_with_lister() {
    let f = with_known(vec![obj("foo", 5), obj("bar", 6), obj("baz", 7)]);
    f.add(obj("foo", 10)).unwrap();
    f.update(obj("bar", 15)).unwrap();
    f.delete(obj("baz", 20)).unwrap();
    for want in ["10", "15", "20"] {
        assert_eq!(val(&pop_newest(&f)), want);
    }
    assert!(f.is_empty(), "queue not empty: {:?}", keys(&f));
}

/// client-go `TestDeltaFIFO_addReplace`: an add then a replace listing the key pop once, with the
/// listed object newest.
#[tokio::test(start_paused = true)]
async fn add_replace() {
    let f = Arc::new(without_known());
    f.add(obj("foo", 10)).unwrap();
    f.replace(vec![obj("foo", 15)], "0").unwrap();
    let (tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    let popper = {
        let f = f.clone();
        tokio::spawn(async move {
            while let Ok(o) = f
                .pop(|ds, _| ds.last().unwrap().object.object().clone())
                .await
            {
                let _ = tx.send(o);
            }
        })
    };
    let first = deadlock_guard("first pop", got.recv()).await.unwrap();
    assert_eq!(val(&first), "15");
    if let Ok(unexpected) = tokio::time::timeout(Duration::from_millis(50), got.recv()).await {
        panic!("got a second value {unexpected:?}");
    }
    assert!(f.get_by_key("foo").is_none(), "item was not removed");
    f.close();
    deadlock_guard("popper ends on close", popper)
        .await
        .unwrap();
}

/// client-go `TestDeltaFIFO_ResyncNonExisting`: a resync adds nothing to a key whose deletion is
/// queued.
#[test]
fn resync_non_existing() {
    let f = with_known(vec![obj("foo", 5)]);
    f.delete(obj("foo", 10)).unwrap();
    f.resync().unwrap();
    let deltas = f.get_by_key("foo").unwrap();
    assert_eq!(show_all(&deltas), [d(DeltaType::Deleted, "foo", 10)]);
}

/// client-go `TestDeltaFIFO_Resync`: a resync queues `Sync` for a known key.
#[test]
fn resync() {
    let f = with_known(vec![obj("foo", 5)]);
    f.resync().unwrap();
    let deltas = f.get_by_key("foo").unwrap();
    assert_eq!(show_all(&deltas), [d(DeltaType::Sync, "foo", 5)]);
}

/// client-go `TestDeltaFIFO_DeleteExistingNonPropagated`: a delete of a key that is queued but
/// not known is still queued.
#[test]
fn delete_existing_non_propagated() {
    let f = with_known(vec![]);
    f.add(obj("foo", 5)).unwrap();
    f.delete(obj("foo", 6)).unwrap();
    let deltas = f.get_by_key("foo").unwrap();
    assert_eq!(deltas.len(), 2, "{:?}", show_all(&deltas));
    assert_eq!(deltas[1].kind, DeltaType::Deleted);
}

/// client-go `TestDeltaFIFO_ReplaceMakesDeletions`: a replace deletes every key missing from the
/// list, with the newest queued object when there is one, else the known object. (Go expects
/// `Sync` for listed objects; see the module docs.)
#[test]
fn replace_makes_deletions() {
    let known = || vec![obj("foo", 5), obj("bar", 6), obj("baz", 7)];

    // A deletion queued before the replace.
    let f = with_known(known());
    f.delete(obj("baz", 10)).unwrap();
    f.replace(vec![obj("foo", 5)], "0").unwrap();
    assert_eq!(show_all(&pop(&f)), [d(DeltaType::Deleted, "baz", 10)]);
    assert_eq!(show_all(&pop(&f)), [d(DeltaType::Replaced, "foo", 5)]);
    // bar had no deletion and is not listed: a tombstone with the known object.
    assert_eq!(show_all(&pop(&f)), [tomb("bar", 6)]);

    // An add instead of a deletion.
    let f = with_known(known());
    f.add(obj("baz", 10)).unwrap();
    f.replace(vec![obj("foo", 5)], "0").unwrap();
    assert_eq!(
        show_all(&pop(&f)),
        [d(DeltaType::Added, "baz", 10), tomb("baz", 10)]
    );
    assert_eq!(show_all(&pop(&f)), [d(DeltaType::Replaced, "foo", 5)]);
    assert_eq!(show_all(&pop(&f)), [tomb("bar", 6)]);

    // Deleted and re-created in the queue, then deleted by the replace: the tombstone carries the
    // queued object, newer than the known one.
    let f = with_known(known());
    f.delete(obj("bar", 6)).unwrap();
    f.add(obj("bar", 100)).unwrap();
    f.replace(vec![obj("foo", 5)], "0").unwrap();
    assert_eq!(
        show_all(&pop(&f)),
        [
            d(DeltaType::Deleted, "bar", 6),
            d(DeltaType::Added, "bar", 100),
            tomb("bar", 100)
        ]
    );
    assert_eq!(show_all(&pop(&f)), [d(DeltaType::Replaced, "foo", 5)]);
    assert_eq!(show_all(&pop(&f)), [tomb("baz", 7)]);

    // Listed first, so the deletion uses the listed version.
    let f = with_known(known());
    f.replace(vec![obj("bar", 100), obj("foo", 5)], "0")
        .unwrap();
    f.replace(vec![obj("foo", 5)], "0").unwrap();
    assert_eq!(
        show_all(&pop(&f)),
        [d(DeltaType::Replaced, "bar", 100), tomb("bar", 100)]
    );
    assert_eq!(
        show_all(&pop(&f)),
        [
            d(DeltaType::Replaced, "foo", 5),
            d(DeltaType::Replaced, "foo", 5)
        ]
    );
    assert_eq!(show_all(&pop(&f)), [tomb("baz", 7)]);

    // Without known objects only queued keys can be deleted.
    let f = without_known();
    f.add(obj("baz", 10)).unwrap();
    f.replace(vec![obj("foo", 5)], "0").unwrap();
    assert_eq!(
        show_all(&pop(&f)),
        [d(DeltaType::Added, "baz", 10), tomb("baz", 10)]
    );
    assert_eq!(show_all(&pop(&f)), [d(DeltaType::Replaced, "foo", 5)]);
    assert!(f.is_empty());
}

/// client-go `TestDeltaFIFO_ReplaceMakesDeletionsReplaced`: as above, with `Replaced` deltas.
#[test]
fn replace_makes_deletions_replaced() {
    let f = with_known(vec![obj("foo", 5), obj("bar", 6), obj("baz", 7)]);
    f.delete(obj("baz", 10)).unwrap();
    f.replace(vec![obj("foo", 6)], "0").unwrap();
    assert_eq!(show_all(&pop(&f)), [d(DeltaType::Deleted, "baz", 10)]);
    assert_eq!(show_all(&pop(&f)), [d(DeltaType::Replaced, "foo", 6)]);
    assert_eq!(show_all(&pop(&f)), [tomb("bar", 6)]);
}

/// client-go `TestDeltaFIFO_ReplaceDeltaType`: a listed known object gets `Replaced`.
#[test]
fn replace_delta_type() {
    let f = with_known(vec![obj("foo", 5)]);
    f.replace(vec![obj("foo", 5)], "0").unwrap();
    assert_eq!(show_all(&pop(&f)), [d(DeltaType::Replaced, "foo", 5)]);
}

/// client-go `TestDeltaFIFO_UpdateResyncRace`: a resync does not add `Sync` to a key with a
/// queued update.
#[test]
fn update_resync_race() {
    let f = with_known(vec![obj("foo", 5)]);
    f.update(obj("foo", 6)).unwrap();
    f.resync().unwrap();
    assert_eq!(show_all(&pop(&f)), [d(DeltaType::Updated, "foo", 6)]);
}

/// client-go `TestDeltaFIFO_HasSyncedCorrectOnDeletion`: the tombstones a first replace makes
/// count as part of the initial list; the FIFO has synced only once they are popped.
#[test]
fn has_synced_correct_on_deletion() {
    let f = with_known(vec![obj("foo", 5), obj("bar", 6), obj("baz", 7)]);
    f.replace(vec![obj("foo", 5)], "0").unwrap();
    let want = [
        vec![d(DeltaType::Replaced, "foo", 5)],
        vec![tomb("bar", 6)],
        vec![tomb("baz", 7)],
    ];
    for expected in want {
        assert!(!f.has_synced(), "synced before popping {expected:?}");
        let (deltas, initial) = pop2(&f);
        assert_eq!(show_all(&deltas), expected);
        assert!(initial, "expected an item of the initial list");
    }
    assert!(f.has_synced());
}

/// client-go `TestDeltaFIFO_detectLineJumpers`: a key keeps its place in line however often it
/// changes, and a popped key that changes again goes to the back.
#[test]
fn detect_line_jumpers() {
    let f = without_known();
    f.add(obj("foo", 10)).unwrap();
    f.add(obj("bar", 1)).unwrap();
    f.add(obj("foo", 11)).unwrap();
    f.add(obj("foo", 13)).unwrap();
    f.add(obj("zab", 30)).unwrap();
    assert_eq!(val(&pop_newest(&f)), "13");
    // foo must not jump back in line.
    f.add(obj("foo", 14)).unwrap();
    assert_eq!(val(&pop_newest(&f)), "1");
    assert_eq!(val(&pop_newest(&f)), "30");
    assert_eq!(val(&pop_newest(&f)), "14");
}

/// client-go `TestDeltaFIFO_KeyOf`: the key of an object, and of a tombstone. (Go's `KeyOf` also
/// accepts a `Deltas` list and keys it by its newest object; the crate's typed API has no call
/// that takes a list, see `tests/CLIENTGO.md`.)
#[test]
fn key_of_objects_and_tombstones() {
    assert_eq!(key_of(&obj("A", "")).unwrap().as_str(), "A");
    let tombstone = DeletedFinalStateUnknown {
        key: ObjectKey::parse("B").unwrap(),
        obj: Arc::new(obj("B", "")),
    };
    assert_eq!(tombstone.key.as_str(), "B");
    // A tombstone queued by a replace is keyed by its key, not by re-keying its object.
    let f = without_known();
    f.add(obj("D", 1)).unwrap();
    f.replace(vec![], "0").unwrap();
    assert_eq!(keys(&f), ["D"]);
    match &pop(&f).last().unwrap().object {
        DeltaObject::DeletedFinalStateUnknown(t) => assert_eq!(t.key.as_str(), "D"),
        other => panic!("expected a tombstone, got {other:?}"),
    }
}

/// client-go `TestDeltaFIFO_HasSynced`: synced once populated and every item of the first replace
/// is popped; duplicate keys in a list count once.
#[test]
fn has_synced() {
    type Action = fn(&DeltaFifo<ConfigMap>);
    let replace_ab: Action = |f| {
        f.replace(vec![obj("a", 1), obj("b", 2)], "0").unwrap();
    };
    let pop_one: Action = |f| {
        pop(f);
    };
    let cases: Vec<(Vec<Action>, bool)> = vec![
        (vec![], false),
        (
            vec![|f| {
                f.add(obj("a", 1)).unwrap();
            }],
            true,
        ),
        (
            vec![|f| {
                f.replace(vec![], "0").unwrap();
            }],
            true,
        ),
        (vec![replace_ab], false),
        (vec![replace_ab, pop_one], false),
        (vec![replace_ab, pop_one, pop_one], true),
        // Cannot happen with a real server (a list has no duplicate keys), but must not hang.
        (
            vec![
                |f| {
                    f.replace(vec![obj("a", 1), obj("a", 2)], "0").unwrap();
                },
                pop_one,
            ],
            true,
        ),
    ];
    for (i, (actions, want)) in cases.into_iter().enumerate() {
        let f = without_known();
        for action in actions {
            action(&f);
        }
        assert_eq!(f.has_synced(), want, "case {i}");
    }
}

/// client-go `TestDeltaFIFO_PopShouldUnblockWhenClosed`: closing wakes every waiting pop.
#[tokio::test(start_paused = true)]
async fn pop_should_unblock_when_closed() {
    let f = Arc::new(with_known(vec![obj("foo", 5)]));
    const JOBS: usize = 10;
    let waiting: Vec<_> = (0..JOBS)
        .map(|_| {
            let f = f.clone();
            tokio::spawn(async move { f.pop(|_, _| ()).await })
        })
        .collect();
    tokio::task::yield_now().await;
    f.close();
    for w in waiting {
        let res = tokio::time::timeout(Duration::from_millis(500), w)
            .await
            .expect("pop did not return after close: likely deadlocked")
            .unwrap();
        assert!(matches!(res, Err(FifoError::Closed)), "{res:?}");
    }
}
