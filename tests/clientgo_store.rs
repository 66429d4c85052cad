//! client-go's `tools/cache/thread_safe_store_test.go`, `index_test.go` and `store_test.go`
//! (v0.37), the cases the crate's [`Indexer`] can express.
//!
//! The Go store holds `interface{}` values under any string key; the crate's holds Kubernetes
//! objects. Where a Go case stores strings under hand-picked keys, these store ConfigMaps whose
//! `data.val` is the string, under the same keys through [`Indexer::insert`]. client-go reads its
//! private index sets directly; these read the same sets through
//! [`Indexer::index_keys`] and [`Indexer::list_index_func_values`].

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ObjectMeta;
use kube_informer::{IndexFn, Indexer, Indexers, ObjectKey, StoreOp};

/// A cluster-scoped ConfigMap `name` carrying `val`.
fn obj(name: &str, val: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()).filter(|n| !n.is_empty()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("val".to_owned(), val.to_owned())])),
        ..ConfigMap::default()
    }
}

fn val(cm: &ConfigMap) -> &str {
    cm.data
        .as_ref()
        .and_then(|d| d.get("val"))
        .map_or("", String::as_str)
}

fn key(k: &str) -> ObjectKey {
    ObjectKey::parse(k).unwrap()
}

fn one_index<K>(name: &str, f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static) -> Indexers<K> {
    HashMap::from([(name.to_owned(), Arc::new(f) as IndexFn<K>)])
}

/// The keys index `index` holds under `value`, sorted.
fn index_set<K: kube::Resource + Send + Sync + 'static>(
    store: &Indexer<K>,
    index: &str,
    value: &str,
) -> Vec<String> {
    let mut keys: Vec<String> = store
        .index_keys(index, value)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    keys.sort();
    keys
}

/// client-go `TestThreadSafeStoreDeleteRemovesEmptySetsFromIndex`: deleting the last object under
/// an index value removes the value from the index.
#[test]
fn thread_safe_store_delete_removes_empty_sets_from_index() {
    let store = Indexer::with_indexers(one_index("testIndexer", |o: &ConfigMap| {
        vec![val(o).to_owned()]
    }))
    .unwrap();
    store.insert(key("testKey"), Arc::new(obj("testKey", "testKey")));
    assert_eq!(index_set(&store, "testIndexer", "testKey"), ["testKey"]);

    store.remove(&key("testKey"));
    assert!(index_set(&store, "testIndexer", "testKey").is_empty());
    assert!(
        !store
            .list_index_func_values("testIndexer")
            .contains(&"testKey".to_owned()),
        "the emptied value is still listed"
    );
}

/// client-go `TestThreadSafeStoreAddKeepsNonEmptySetPostDeleteFromIndex`: deleting one of two
/// objects under a value keeps the value with the other.
#[test]
fn thread_safe_store_add_keeps_non_empty_set_post_delete_from_index() {
    let store = Indexer::with_indexers(one_index("testIndexer", |_: &ConfigMap| {
        vec!["testIndex".into()]
    }))
    .unwrap();
    store.insert(key("retain"), Arc::new(obj("retain", "retain")));
    store.insert(key("delete"), Arc::new(obj("delete", "delete")));
    assert_eq!(
        index_set(&store, "testIndexer", "testIndex"),
        ["delete", "retain"]
    );

    store.remove(&key("delete"));
    assert_eq!(
        store.list_index_func_values("testIndexer"),
        ["testIndex"],
        "the value was dropped with one of its two objects"
    );
    assert_eq!(index_set(&store, "testIndexer", "testIndex"), ["retain"]);
}

/// client-go `TestThreadSafeStoreIndexingFunctionsWithMultipleValues`: an index function with
/// several values, as objects gain and lose values through updates and deletes.
#[test]
fn thread_safe_store_indexing_functions_with_multiple_values() {
    let store = Indexer::with_indexers(one_index("testIndexer", |o: &ConfigMap| {
        val(o).split(',').map(str::to_owned).collect()
    }))
    .unwrap();
    let put = |k: &str, v: &str| {
        store.insert(key(k), Arc::new(obj(k, v)));
    };
    let check = |want: &[(&str, &[&str])]| {
        for (value, keys) in want {
            assert_eq!(
                index_set(&store, "testIndexer", value),
                *keys,
                "index value {value:?}"
            );
        }
    };

    put("key1", "foo");
    put("key2", "bar");
    check(&[("foo", &["key1"]), ("bar", &["key2"])]);

    put("key2", "foo,bar");
    check(&[("foo", &["key1", "key2"]), ("bar", &["key2"])]);

    put("key1", "foo,bar");
    check(&[("foo", &["key1", "key2"]), ("bar", &["key1", "key2"])]);

    put("key3", "foo,bar,baz");
    check(&[
        ("foo", &["key1", "key2", "key3"]),
        ("bar", &["key1", "key2", "key3"]),
        ("baz", &["key3"]),
    ]);

    put("key1", "foo");
    check(&[
        ("foo", &["key1", "key2", "key3"]),
        ("bar", &["key2", "key3"]),
        ("baz", &["key3"]),
    ]);

    put("key2", "bar");
    check(&[
        ("foo", &["key1", "key3"]),
        ("bar", &["key2", "key3"]),
        ("baz", &["key3"]),
    ]);

    store.remove(&key("key1"));
    check(&[
        ("foo", &["key3"]),
        ("bar", &["key2", "key3"]),
        ("baz", &["key3"]),
    ]);

    store.remove(&key("key3"));
    check(&[("foo", &[]), ("bar", &["key2"]), ("baz", &[])]);
}

/// A ConfigMap `name` at resourceVersion `rv` (client-go's `&metav1.ObjectMeta{ResourceVersion}`).
fn at(name: &str, rv: &str) -> Arc<ConfigMap> {
    let mut o = obj(name, "");
    o.metadata.resource_version = Some(rv.to_owned()).filter(|rv| !rv.is_empty());
    Arc::new(o)
}

fn rv_of(o: &ConfigMap) -> Option<&str> {
    o.metadata.resource_version.as_deref()
}

/// client-go `threadSafeMap.Add`/`Update` as the in-order informer applies one: a one-op
/// transaction carrying the object's version. (The crate's plain `add`/`insert` leave the
/// store's version alone, so that a DeltaFIFO informer, which uses them, keeps it empty.)
fn add_at(store: &Indexer<ConfigMap>, k: &str, o: Arc<ConfigMap>) -> Vec<Option<Arc<ConfigMap>>> {
    let rv = rv_of(&o).map(str::to_owned);
    store.transaction(vec![StoreOp::Put(key(k), o)], rv.as_deref())
}

/// client-go `threadSafeMap.DeleteWithObject`: a one-op transaction carrying the deleted
/// object's version.
fn delete_with_object(store: &Indexer<ConfigMap>, k: &str, o: &ConfigMap) {
    store.transaction(vec![StoreOp::Remove(key(k))], rv_of(o));
}

/// client-go `TestThreadSafeStoreRV`: the store's resourceVersion (`LastStoreSyncResourceVersion`)
/// starts empty, follows every add, update, delete-with-object and transaction (the version of
/// its last object), is left alone by a delete without object and an object without a version,
/// and a replace sets it to the list's version.
///
/// Go's store reads the version off the objects; the crate's [`Indexer::transaction`] is handed
/// it by its caller (the in-order informer passes the version of the batch's last object, which
/// `tests/in_order_model.rs` checks batch by batch). Go's "non-meta object" (a plain string)
/// cannot be stored in a typed store; the nearest case is an object without a resourceVersion.
#[test]
fn thread_safe_store_rv() {
    // Initial state.
    let store = Indexer::<ConfigMap>::new();
    assert_eq!(store.last_store_sync_resource_version(), "");

    // Add, Update and Delete.
    let store = Indexer::<ConfigMap>::new();
    let rv = |s: &Indexer<ConfigMap>| s.last_store_sync_resource_version();
    add_at(&store, "key1", at("key1", "10"));
    assert_eq!(rv(&store), "10");
    add_at(&store, "key3", at("key3", "10"));
    assert_eq!(rv(&store), "10", "after adding the same version");
    add_at(&store, "key4", at("key4", "20"));
    assert_eq!(rv(&store), "20");
    // Delete an earlier object with a newer version.
    delete_with_object(&store, "key4", &at("key4", "30"));
    assert_eq!(rv(&store), "30", "after a delete with object");
    assert!(store.get_by_key("key4").is_none());
    // Go: a non-meta object leaves the version; here, an object without one.
    add_at(&store, "key5", at("key5", ""));
    assert_eq!(rv(&store), "30", "after an object without a version");
    add_at(&store, "key6", at("key6", "40"));
    assert_eq!(rv(&store), "40");
    // A delete without object.
    store.remove(&key("key6"));
    assert_eq!(rv(&store), "40", "after a delete without object");
    // A transaction: the version of its last object, whatever came before it.
    let previous = store.transaction(
        vec![
            StoreOp::Put(key("key9"), at("key9", "40")),
            StoreOp::Put(key("key10"), at("key10", "30")),
            StoreOp::Put(key("key11"), at("key11", "50")),
        ],
        Some("50"),
    );
    assert_eq!(rv(&store), "50", "after a transaction");
    assert!(previous.iter().all(Option::is_none), "all three were new");
    let mut keys: Vec<String> = store.list_keys().iter().map(|k| k.to_string()).collect();
    keys.sort();
    assert_eq!(keys, ["key1", "key10", "key11", "key3", "key5", "key9"]);

    // Replace.
    let store = Indexer::<ConfigMap>::new();
    add_at(&store, "key1", at("key1", "10"));
    assert_eq!(rv(&store), "10", "setup");
    store
        .replace_at(vec![at("key3", "40"), at("key2", "30")], "50")
        .unwrap();
    assert_eq!(rv(&store), "50", "after a replace");
    assert!(store.get_by_key("key1").is_none(), "replace kept key1");

    // Delete.
    let store = Indexer::<ConfigMap>::new();
    add_at(&store, "key1", at("key1", "10"));
    assert_eq!(rv(&store), "10", "setup");
    delete_with_object(&store, "key1", &at("key1", "20"));
    assert_eq!(rv(&store), "20", "after a delete");
}

/// The store's version moves only with in-order changes: the plain [`Indexer::add`],
/// [`Indexer::insert`], [`Indexer::delete`] and [`Indexer::replace`] leave it alone (a DeltaFIFO
/// informer's cache reports none, as client-go's does without `AtomicFIFO`), while a bookmark
/// sets it without touching the objects (client-go `threadSafeMap.Bookmark`). Not a Go test:
/// client-go's plain `Add` records the version too; see `tests/CLIENTGO.md`.
#[test]
fn thread_safe_store_rv_moves_only_with_in_order_changes() {
    let store = Indexer::<ConfigMap>::new();
    store.add(at("a", "10")).unwrap();
    store.insert(key("b"), at("b", "11"));
    store.delete(&at("a", "12")).unwrap();
    store.replace(vec![at("c", "13")]).unwrap();
    assert_eq!(store.last_store_sync_resource_version(), "");
    store.bookmark("20");
    assert_eq!(store.last_store_sync_resource_version(), "20");
    assert_eq!(store.len(), 1);
    // A replace without a version keeps the store's.
    store.replace(vec![at("d", "21")]).unwrap();
    assert_eq!(store.last_store_sync_resource_version(), "20");
}

fn pod(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
    let map = |kv: &[(&str, &str)]| {
        Some(
            kv.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
        .filter(|m: &BTreeMap<String, String>| !m.is_empty())
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: map(labels),
            annotations: map(annotations),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

fn pod_names(pods: &[Arc<Pod>]) -> BTreeSet<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

/// client-go `TestGetIndexFuncValues`: the values an index holds, each once.
#[test]
fn get_index_func_values() {
    let index = Indexer::with_indexers(one_index("testmodes", |p: &Pod| {
        vec![
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("foo"))
                .cloned()
                .unwrap_or_default(),
        ]
    }))
    .unwrap();
    index
        .add(Arc::new(pod("one", &[("foo", "bar")], &[])))
        .unwrap();
    index
        .add(Arc::new(pod("two", &[("foo", "bar")], &[])))
        .unwrap();
    index
        .add(Arc::new(pod("tre", &[("foo", "biz")], &[])))
        .unwrap();

    let values: BTreeSet<String> = index
        .list_index_func_values("testmodes")
        .into_iter()
        .collect();
    assert_eq!(values, BTreeSet::from(["bar".to_owned(), "biz".to_owned()]));
}

/// client-go `TestMultiIndexKeys`: a multi-valued index, through `by_index`, after a delete and an
/// update that drops a value.
#[test]
fn multi_index_keys() {
    let index = Indexer::with_indexers(one_index("byUser", |p: &Pod| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("users"))
            .map(|u| u.split(',').map(str::to_owned).collect())
            .unwrap_or_default()
    }))
    .unwrap();
    let pod1 = pod("one", &[], &[("users", "ernie,bert")]);
    let pod2 = pod("two", &[], &[("users", "bert,oscar")]);
    let pod3 = pod("tre", &[], &[("users", "ernie,elmo")]);
    index.add(Arc::new(pod1)).unwrap();
    index.add(Arc::new(pod2.clone())).unwrap();
    index.add(Arc::new(pod3.clone())).unwrap();

    let expected: [(&str, &[&str]); 5] = [
        ("ernie", &["one", "tre"]),
        ("bert", &["one", "two"]),
        ("elmo", &["tre"]),
        ("oscar", &["two"]),
        ("elmo1", &[]),
    ];
    for (user, names) in expected {
        let found = pod_names(&index.by_index("byUser", user).unwrap());
        let want: BTreeSet<String> = names.iter().map(|n| (*n).to_owned()).collect();
        assert_eq!(found, want, "index value {user}");
    }

    index.delete(&pod3).unwrap();
    assert_eq!(
        pod_names(&index.by_index("byUser", "ernie").unwrap()),
        BTreeSet::from(["one".to_owned()])
    );
    assert!(index.by_index("byUser", "elmo").unwrap().is_empty());

    let mut pod2_only_oscar = pod2;
    pod2_only_oscar
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("users".into(), "oscar".into());
    index.update(Arc::new(pod2_only_oscar)).unwrap();
    assert_eq!(
        pod_names(&index.by_index("byUser", "bert").unwrap()),
        BTreeSet::from(["one".to_owned()])
    );
}

/// client-go `doTestStore`, through `TestCache`: add, get, update, delete, list and replace.
#[test]
fn cache() {
    let store = Indexer::<ConfigMap>::new();
    let found = |id: &str| store.get(&obj(id, "")).unwrap();

    store.add(Arc::new(obj("foo", "bar"))).unwrap();
    assert_eq!(val(&found("foo").expect("inserted item")), "bar");

    store.update(Arc::new(obj("foo", "baz"))).unwrap();
    assert_eq!(val(&found("foo").expect("updated item")), "baz");

    store.delete(&obj("foo", "")).unwrap();
    assert!(found("foo").is_none(), "found a deleted item");

    let vals = |store: &Indexer<ConfigMap>| -> Vec<String> {
        let mut v: Vec<String> = store.list().iter().map(|o| val(o).to_owned()).collect();
        v.sort();
        v
    };
    store.add(Arc::new(obj("a", "b"))).unwrap();
    store.add(Arc::new(obj("c", "d"))).unwrap();
    store.add(Arc::new(obj("e", "e"))).unwrap();
    assert_eq!(vals(&store), ["b", "d", "e"]);

    store
        .replace(vec![
            Arc::new(obj("foo", "foo")),
            Arc::new(obj("bar", "bar")),
        ])
        .unwrap();
    assert_eq!(vals(&store), ["bar", "foo"]);
}

/// client-go `doTestIndex`, through `TestIndex`: `index` finds every object sharing a value with
/// the object asked about.
#[test]
fn index() {
    let indexer =
        Indexer::with_indexers(one_index("by_val", |o: &ConfigMap| vec![val(o).to_owned()]))
            .unwrap();
    indexer.add(Arc::new(obj("a", "b"))).unwrap();
    indexer.add(Arc::new(obj("c", "b"))).unwrap();
    indexer.add(Arc::new(obj("e", "f"))).unwrap();
    indexer.add(Arc::new(obj("g", "h"))).unwrap();
    let expected: [(&str, &[&str]); 3] = [("b", &["a", "c"]), ("f", &["e"]), ("h", &["g"])];
    for (value, ids) in expected {
        // The object asked about has no name: only its index values matter.
        let found: BTreeSet<String> = indexer
            .index("by_val", &obj("", value))
            .unwrap()
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect();
        let want: BTreeSet<String> = ids.iter().map(|i| (*i).to_owned()).collect();
        assert_eq!(found, want, "index value {value}");
    }
}
