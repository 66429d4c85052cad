//! Compact storage against Decoded: a seeded model test, sharing without decoding, dictionary
//! training and retraining, and unreadable blobs.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

use super::{CacheStorage, CompactConfig, StorageError};
use crate::store::Listed;
use crate::{
    IndexFn, Indexer, Indexers, NAMESPACE_INDEX, ObjectKey, StoreOp, parse_label_selector,
};

fn cm(
    ns: &str,
    name: &str,
    rv: u64,
    labels: &[(&str, &str)],
    data: &[(&str, String)],
) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            resource_version: Some(rv.to_string()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>()
            }),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        ),
        ..Default::default()
    })
}

fn compact(config: CompactConfig) -> Indexer<ConfigMap> {
    Indexer::with_storage(CacheStorage::Compact(config))
}

/// Indexes a ConfigMap under each of its data keys.
fn data_key_index() -> IndexFn<ConfigMap> {
    Arc::new(|c: &ConfigMap| c.data.iter().flatten().map(|(k, _)| k.clone()).collect())
}

/// Indexes a ConfigMap under its "tier" label.
fn tier_index() -> IndexFn<ConfigMap> {
    Arc::new(|c: &ConfigMap| {
        c.metadata
            .labels
            .iter()
            .flatten()
            .filter(|(k, _)| *k == "tier")
            .map(|(_, v)| v.clone())
            .collect()
    })
}

fn sorted_keys(mut v: Vec<ObjectKey>) -> Vec<ObjectKey> {
    v.sort();
    v
}

/// Objects sorted by key, compared by value.
fn by_key(objs: Vec<Arc<ConfigMap>>) -> Vec<ConfigMap> {
    let mut v: Vec<ConfigMap> = objs.iter().map(|o| (**o).clone()).collect();
    v.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    v
}

struct Gen {
    rng: fastrand::Rng,
    rv: u64,
}

impl Gen {
    fn object(&mut self) -> Arc<ConfigMap> {
        self.rv += 1;
        let ns = ["a", "b", "c"][self.rng.usize(..3)];
        let name = format!("o{}", self.rng.usize(..40));
        let tier = ["web", "db", "cache"][self.rng.usize(..3)];
        let mut labels = vec![("tier", tier)];
        if self.rng.bool() {
            labels.push(("canary", "true"));
        }
        let mut data: Vec<(&str, String)> = Vec::new();
        for k in ["x", "y", "z", "w"] {
            if self.rng.bool() {
                let v = format!("value-{}-{}", k, self.rng.u32(..1000));
                data.push((k, v.repeat(self.rng.usize(1..20))));
            }
        }
        cm(ns, &name, self.rv, &labels, &data)
    }
}

/// Asserts that both stores answer every query the same, with deep-equal objects.
fn assert_same(decoded: &Indexer<ConfigMap>, compact: &Indexer<ConfigMap>, step: usize) {
    assert_eq!(
        sorted_keys(decoded.list_keys()),
        sorted_keys(compact.list_keys()),
        "list_keys at step {step}"
    );
    assert_eq!(
        by_key(decoded.list()),
        by_key(compact.list()),
        "list at step {step}"
    );
    for key in decoded.list_keys() {
        let d = decoded.get_by_key(key.as_str()).map(|o| (*o).clone());
        let c = compact.get_by_key(key.as_str()).map(|o| (*o).clone());
        assert_eq!(d, c, "get {key} at step {step}");
        assert_eq!(
            decoded.resource_version_of(key.as_str()),
            compact.resource_version_of(key.as_str()),
            "resource_version_of {key} at step {step}"
        );
    }
    assert!(compact.get_by_key("a/absent").is_none());
    let mut names = decoded.indexers();
    names.sort();
    let mut cnames = compact.indexers();
    cnames.sort();
    assert_eq!(names, cnames, "indexers at step {step}");
    for name in &names {
        let mut values = decoded.list_index_func_values(name);
        values.sort();
        let mut cvalues = compact.list_index_func_values(name);
        cvalues.sort();
        assert_eq!(values, cvalues, "values of {name} at step {step}");
        for value in values.iter().map(String::as_str).chain(["nothing"]) {
            assert_eq!(
                sorted_keys(decoded.index_keys(name, value).unwrap()),
                sorted_keys(compact.index_keys(name, value).unwrap()),
                "index_keys {name}={value} at step {step}"
            );
            assert_eq!(
                by_key(decoded.by_index(name, value).unwrap()),
                by_key(compact.by_index(name, value).unwrap()),
                "by_index {name}={value} at step {step}"
            );
        }
    }
    for selector in ["tier=web", "canary", "!canary,tier in (db,cache)"] {
        let selector = parse_label_selector(selector).unwrap();
        assert_eq!(
            by_key(decoded.list_selected(&selector)),
            by_key(compact.list_selected(&selector)),
            "list_selected {selector:?} at step {step}"
        );
        assert_eq!(
            by_key(
                decoded
                    .by_index_selected(NAMESPACE_INDEX, "a", &selector)
                    .unwrap()
            ),
            by_key(
                compact
                    .by_index_selected(NAMESPACE_INDEX, "a", &selector)
                    .unwrap()
            ),
            "by_index_selected {selector:?} at step {step}"
        );
    }
}

/// A copy of `o` that the Decoded store does not hold, so the Compact one must decode what
/// nobody else holds.
fn own(o: &Arc<ConfigMap>) -> Arc<ConfigMap> {
    Arc::new((**o).clone())
}

fn model_run(seed: u64) {
    let mut g = Gen {
        rng: fastrand::Rng::with_seed(seed),
        rv: 0,
    };
    let decoded = Indexer::<ConfigMap>::new();
    // Few samples and hot objects, so training, re-compression, eviction and decoding all happen.
    let compact = compact(
        CompactConfig::default()
            .hot_objects(g.rng.usize(..4))
            .dictionary_samples(30)
            .dictionary_size(4096),
    );
    for step in 0..400 {
        match g.rng.u8(..100) {
            0..=44 => {
                let o = g.object();
                decoded.add(Arc::clone(&o)).unwrap();
                compact.add(own(&o)).unwrap();
            }
            45..=59 => {
                let o = g.object();
                let d = decoded.insert(crate::key_of(&o).unwrap(), Arc::clone(&o));
                let c = compact.insert(crate::key_of(&o).unwrap(), own(&o));
                assert_eq!(
                    d.map(|o| (*o).clone()),
                    c.map(|o| (*o).clone()),
                    "insert at {step}"
                );
            }
            60..=74 => {
                let o = g.object();
                let key = crate::key_of(&o).unwrap();
                let d = decoded.remove(&key);
                let c = compact.remove(&key);
                assert_eq!(
                    d.map(|o| (*o).clone()),
                    c.map(|o| (*o).clone()),
                    "remove at {step}"
                );
                let o = g.object();
                decoded.delete(&o).unwrap();
                compact.delete(&o).unwrap();
            }
            75..=84 => {
                let ops: Vec<(bool, Arc<ConfigMap>)> = (0..g.rng.usize(1..6))
                    .map(|_| (g.rng.bool(), g.object()))
                    .collect();
                let to_ops = |ops: &[(bool, Arc<ConfigMap>)]| {
                    ops.iter()
                        .map(|(put, o)| {
                            let key = crate::key_of(o).unwrap();
                            if *put {
                                StoreOp::Put(key, own(o))
                            } else {
                                StoreOp::Remove(key)
                            }
                        })
                        .collect()
                };
                let rv = g.rv.to_string();
                let d = decoded.transaction(
                    ops.iter()
                        .map(|(put, o)| {
                            let key = crate::key_of(o).unwrap();
                            if *put {
                                StoreOp::Put(key, Arc::clone(o))
                            } else {
                                StoreOp::Remove(key)
                            }
                        })
                        .collect(),
                    Some(&rv),
                );
                let c = compact.transaction(to_ops(&ops), Some(&rv));
                let deep = |v: Vec<Option<Arc<ConfigMap>>>| {
                    v.into_iter()
                        .map(|o| o.map(|o| (*o).clone()))
                        .collect::<Vec<_>>()
                };
                assert_eq!(deep(d), deep(c), "transaction at {step}");
            }
            85..=91 => {
                let objs: Vec<Arc<ConfigMap>> =
                    (0..g.rng.usize(..60)).map(|_| g.object()).collect();
                compact.replace(objs.iter().map(own).collect()).unwrap();
                decoded.replace(objs).unwrap();
            }
            92..=95 => {
                // A resync stores the cached object again.
                if let Some(key) = decoded.list_keys().first() {
                    let d = decoded.get_by_key(key.as_str()).unwrap();
                    let c = compact.get_by_key(key.as_str()).unwrap();
                    decoded.add(d).unwrap();
                    compact.add(c).unwrap();
                }
            }
            _ => {
                let name = if decoded.indexers().len() == 1 {
                    "data-key"
                } else {
                    "tier"
                };
                if !decoded.indexers().iter().any(|n| n == name) {
                    let func = if name == "data-key" {
                        data_key_index()
                    } else {
                        tier_index()
                    };
                    decoded
                        .add_indexers(Indexers::from([(name.to_owned(), Arc::clone(&func))]))
                        .unwrap();
                    compact
                        .add_indexers(Indexers::from([(name.to_owned(), func)]))
                        .unwrap();
                }
            }
        }
        assert_eq!(
            decoded.last_store_sync_resource_version(),
            compact.last_store_sync_resource_version()
        );
        if step % 10 == 0 {
            assert_same(&decoded, &compact, step);
        }
    }
    assert_same(&decoded, &compact, 400);
    let stats = compact.stats();
    assert_eq!(stats.decode_errors, 0);
    assert!(stats.decodes > 0, "{stats:?}");
    assert_eq!(decoded.stats().decodes, 0);
}

#[test]
fn compact_answers_every_query_as_decoded_does() {
    let seeds: Vec<u64> = match std::env::var("KUBE_INFORMER_STORAGE_SEED") {
        Ok(s) => vec![s.parse().expect("numeric seed")],
        Err(_) => (0..12).collect(),
    };
    for seed in seeds {
        let result = std::panic::catch_unwind(|| model_run(seed));
        assert!(
            result.is_ok(),
            "seed {seed} failed; replay: KUBE_INFORMER_STORAGE_SEED={seed} cargo test --lib --features compact compact_answers"
        );
    }
}

#[test]
fn a_held_object_comes_back_without_decoding() {
    let store = compact(CompactConfig::default().hot_objects(0));
    let a = cm("ns", "a", 1, &[], &[("k", "v".into())]);
    store.add(Arc::clone(&a)).unwrap();
    // Held by the caller: the same Arc, nothing decoded.
    assert!(Arc::ptr_eq(&store.get_by_key("ns/a").unwrap(), &a));
    assert!(Arc::ptr_eq(&store.list()[0], &a));
    assert!(Arc::ptr_eq(
        &store.by_index(NAMESPACE_INDEX, "ns").unwrap()[0],
        &a
    ));
    assert_eq!(store.stats().decodes, 0);
    assert_eq!(store.stats().shared_hits, 3);
    drop(a);
    // Nobody holds it and no ring: decoded once, then shared while held.
    let first = store.get_by_key("ns/a").unwrap();
    assert_eq!(store.stats().decodes, 1);
    let second = store.get_by_key("ns/a").unwrap();
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(store.stats().decodes, 1);
    // The old object of an update comes from the held one too.
    let old = store.insert(
        ObjectKey::parse("ns/a").unwrap(),
        cm("ns", "a", 2, &[], &[]),
    );
    assert!(Arc::ptr_eq(&old.unwrap(), &first));
    assert_eq!(store.stats().decodes, 1);
    // Removing without wanting the object does not decode it.
    drop((first, second));
    store.delete(&cm("ns", "a", 2, &[], &[])).unwrap();
    assert_eq!(store.stats().decodes, 1);
    assert!(store.is_empty());
}

#[test]
fn hot_objects_stay_decoded_for_later_reads() {
    let store = compact(CompactConfig::default().hot_objects(2));
    for i in 0..3 {
        store.add(cm("ns", &format!("o{i}"), i, &[], &[])).unwrap();
    }
    // The two stored last are still in the ring; the first fell out.
    store.get_by_key("ns/o1").unwrap();
    store.get_by_key("ns/o2").unwrap();
    assert_eq!(store.stats().decodes, 0);
    store.get_by_key("ns/o0").unwrap();
    assert_eq!(store.stats().decodes, 1);
}

#[test]
fn a_scan_of_cold_objects_does_not_push_hot_ones_out() {
    let store = compact(CompactConfig::default().hot_objects(4));
    for i in 0..100 {
        store
            .add(cm("cold", &format!("o{i}"), i, &[], &[]))
            .unwrap();
    }
    // Stored last: the ring holds these four.
    for i in 0..4 {
        store.add(cm("hot", &format!("h{i}"), i, &[], &[])).unwrap();
    }
    assert_eq!(store.by_index(NAMESPACE_INDEX, "cold").unwrap().len(), 100);
    assert_eq!(store.stats().decodes, 100);
    for i in 0..4 {
        store.get_by_key(&format!("hot/h{i}")).unwrap();
    }
    assert_eq!(store.stats().decodes, 100, "a hot object was pushed out");
    // A cold object decoded twice within the ring's size of decodes is admitted: the third read
    // does not decode. First five other decodes, so that `o7`'s decode in the scan (in the
    // index's hash order, so maybe among its last four) is more than the ring's size ago.
    for i in 50..55 {
        store.get_by_key(&format!("cold/o{i}")).unwrap();
    }
    assert_eq!(store.stats().decodes, 105);
    store.get_by_key("cold/o7").unwrap();
    store.get_by_key("cold/o7").unwrap();
    assert_eq!(store.stats().decodes, 107);
    store.get_by_key("cold/o7").unwrap();
    assert_eq!(store.stats().decodes, 107);
}

#[test]
fn a_replaced_list_does_not_push_hot_objects_out() {
    let store = compact(CompactConfig::default().hot_objects(4));
    for i in 0..4 {
        store.add(cm("hot", &format!("h{i}"), i, &[], &[])).unwrap();
    }
    // A relist of the four, unchanged (the very objects the cache holds), and 100 new ones.
    let hot: Vec<_> = (0..4)
        .map(|i| store.get_by_key(&format!("hot/h{i}")).unwrap())
        .collect();
    let list: Vec<_> = hot
        .iter()
        .cloned()
        .chain((0..100).map(|i| cm("cold", &format!("o{i}"), i, &[], &[])))
        .collect();
    drop(hot);
    store.replace(list).unwrap();
    assert_eq!(store.stats().decodes, 0);
    for i in 0..4 {
        store.get_by_key(&format!("hot/h{i}")).unwrap();
    }
    assert_eq!(store.stats().decodes, 0, "the list pushed a hot object out");
    // Nor is the list's last object kept decoded: nobody has read it yet.
    store.get_by_key("cold/o99").unwrap();
    assert_eq!(store.stats().decodes, 1);
}

/// A key rewritten while its decoded object lives (here, in the hot ring) is checked by the
/// sweep once, not once per write: the queue stays bounded by the keys with a live object.
#[test]
fn a_key_rewritten_while_its_object_lives_is_queued_once() {
    let store = compact(CompactConfig::default());
    for i in 0..2_000 {
        let data = [("n", i.to_string())];
        store.add(cm("ns", "lease", i, &[], &data)).unwrap();
    }
    assert_eq!(
        store
            .get_by_key("ns/lease")
            .unwrap()
            .metadata
            .resource_version
            .as_deref(),
        Some("1999")
    );
    assert!(
        store.sweep_len() <= 1,
        "{} keys queued for one",
        store.sweep_len()
    );
}

/// Indexing a populated compact store decodes each object once, and leaves no `Weak` behind
/// that would pin the dropped object's allocation until swept.
#[test]
fn adding_an_index_to_a_cold_compact_store_pins_no_decoded_object() {
    let store = compact(CompactConfig::default().hot_objects(0));
    let list: Vec<_> = (0..1_000)
        .map(|i| {
            cm(
                "ns",
                &format!("c{i}"),
                i,
                &[],
                &[("k", format!("v{}", i % 10))],
            )
        })
        .collect();
    store.replace(list).unwrap();
    assert_eq!(store.sweep_len(), 0);
    store
        .add_indexers(Indexers::from([("data".to_owned(), data_key_index())]))
        .unwrap();
    assert_eq!(store.stats().decodes, 1_000);
    assert_eq!(store.sweep_len(), 0, "decoded objects left pinned");
    assert_eq!(store.by_index("data", "k").unwrap().len(), 1_000);
}

/// A ConfigMap whose data follows one of two shapes, so a dictionary trained on one compresses
/// the other badly.
fn shaped(shape: u8, i: usize) -> Arc<ConfigMap> {
    let body = match shape {
        0 => format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: service-{i}\n  labels:\n    app: checkout\nspec:\n  replicas: {}\n  template:\n    spec:\n      containers:\n      - name: main\n        image: registry.example.com/checkout:v{}\n",
            i % 7,
            i % 13
        ),
        _ => format!(
            "{{\"zones\":[\"{i:08x}\",\"{:08x}\"],\"weights\":{{\"alpha\":{},\"omega\":{}}},\"checksum\":\"{:016x}\"}}",
            i * 7919,
            i % 31,
            i % 17,
            (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ),
    };
    cm(
        "ns",
        &format!("s{shape}-{i}"),
        i as u64,
        &[],
        &[("config", body.repeat(3))],
    )
}

/// Stores `again` until the cache has trained `n` dictionaries: training runs on a thread of its
/// own, and a trained dictionary is put in use by the next write.
fn wait_for_trainings(store: &Indexer<ConfigMap>, n: u64, again: &Arc<ConfigMap>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store.stats().dictionary_trainings < n {
        assert!(
            std::time::Instant::now() < deadline,
            "dictionary {n} never trained (likely deadlocked): {:?}",
            store.stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        store.add(own(again)).unwrap();
    }
    assert_eq!(store.stats().dictionary_trainings, n);
}

#[test]
fn a_dictionary_is_trained_from_the_first_objects_and_recompresses_them() {
    let store = compact(
        CompactConfig::default()
            .dictionary_samples(100)
            .dictionary_size(8192),
    );
    for i in 0..99 {
        store.add(shaped(0, i)).unwrap();
    }
    let plain = store.stats();
    assert_eq!(plain.dictionary_trainings, 0);
    wait_for_trainings(&store, 1, &shaped(0, 99));
    // Each write re-compresses 32 of the objects compressed before the dictionary.
    for _ in 0..4 {
        store.add(shaped(0, 99)).unwrap();
    }
    let trained = store.stats();
    // The first 99 were re-compressed with the dictionary: the cache shrank.
    assert!(
        trained.stored_bytes < plain.stored_bytes,
        "plain {plain:?}, trained {trained:?}"
    );
    // And still read back as stored.
    for i in 0..100 {
        let o = shaped(0, i);
        let key = crate::key_of(&o).unwrap();
        assert_eq!(*store.get_by_key(key.as_str()).unwrap(), *o);
    }
}

#[test]
fn the_dictionary_is_retrained_when_the_ratio_degrades() {
    let samples = 100;
    let store = compact(
        CompactConfig::default()
            .dictionary_samples(samples)
            .dictionary_size(8192)
            .retrain_factor(1.5),
    );
    for i in 0..samples {
        store.add(shaped(0, i)).unwrap();
    }
    wait_for_trainings(&store, 1, &shaped(0, 0));
    // More of the same shape: the ratio holds, no retraining.
    for i in samples..3 * samples {
        store.add(shaped(0, i)).unwrap();
    }
    assert_eq!(store.stats().dictionary_trainings, 1);
    assert_eq!(store.stats().dictionary_trainings_started, 1);
    // A new shape: one window of bad ratio starts collecting, the next window trains.
    for i in 0..2 * samples {
        store.add(shaped(1, i)).unwrap();
    }
    wait_for_trainings(&store, 2, &shaped(1, 0));
    // Objects of both shapes, under both dictionaries, read back as stored.
    for (shape, i) in [(0, 0), (0, 250), (1, 0), (1, 199)] {
        let o = shaped(shape, i);
        let key = crate::key_of(&o).unwrap();
        assert_eq!(*store.get_by_key(key.as_str()).unwrap(), *o);
    }
    assert_eq!(store.stats().decode_errors, 0);
}

/// Objects of one shape whose unique parts (names, uids, addresses) a dictionary cannot know in
/// advance compress worse than its own samples did: that must not read as a degraded ratio.
#[test]
fn objects_of_one_shape_with_unique_parts_train_one_dictionary() {
    let samples = 100;
    let store = compact(
        CompactConfig::default()
            .dictionary_samples(samples)
            .dictionary_size(16384)
            .retrain_factor(1.5),
    );
    let unique = |i: usize| {
        let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let body = format!(
            "uid: {h:016x}-{:016x}\npodIP: 10.{}.{}.{}\nnode: node-{:05}\nimage: registry.example.com/app@sha256:{:016x}{:016x}\n",
            h.rotate_left(17),
            i % 251,
            (i / 251) % 251,
            i % 7,
            h % 99_991,
            h.rotate_left(29),
            h.rotate_left(41)
        );
        cm(
            "ns",
            &format!("u-{i}"),
            i as u64,
            &[("app", "checkout")],
            &[("status", body)],
        )
    };
    for i in 0..samples {
        store.add(unique(i)).unwrap();
    }
    wait_for_trainings(&store, 1, &unique(0));
    for i in samples..20 * samples {
        store.add(unique(i)).unwrap();
    }
    // Counted when started, so a retraining still running counts too.
    let stats = store.stats();
    assert_eq!(stats.dictionary_trainings_started, 1, "{stats:?}");
    assert_eq!(stats.dictionary_trainings, 1, "{stats:?}");
}

#[test]
fn no_dictionary_below_the_sample_count_and_none_when_disabled() {
    let store = compact(CompactConfig::default().dictionary_samples(0));
    for i in 0..300 {
        store.add(shaped(0, i)).unwrap();
    }
    assert_eq!(store.stats().dictionary_trainings, 0);
    let stats = store.stats();
    assert!(stats.stored_bytes < stats.encoded_bytes, "{stats:?}");
}

mod unreadable {
    use super::*;
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize, Serializer};

    /// Serializes `n` as a string, which its `Deserialize` rejects: a type whose serde impls
    /// disagree, the one way a stored object can fail to decode.
    fn as_string<S: Serializer>(n: &u32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&n.to_string())
    }

    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
    #[kube(group = "example.com", version = "v1", kind = "Odd", namespaced)]
    pub struct OddSpec {
        #[serde(serialize_with = "as_string")]
        n: u32,
    }

    #[test]
    fn a_stored_object_that_does_not_decode_is_a_typed_error_never_a_panic() {
        let store = Indexer::<Odd>::with_storage(CacheStorage::Compact(
            CompactConfig::default().hot_objects(0),
        ));
        let mut odd = Odd::new("a", OddSpec { n: 7 });
        odd.metadata.namespace = Some("ns".into());
        store.add(Arc::new(odd)).unwrap();
        // Nobody holds it: reads must decode, and cannot.
        assert!(store.get_by_key("ns/a").is_none());
        assert!(matches!(
            store.try_get_by_key("ns/a"),
            Err(StorageError::Decode { key, reason }) if key.as_str() == "ns/a" && !reason.contains('7')
        ));
        assert!(store.list().is_empty());
        // Keys and indices do not need the object.
        assert_eq!(store.list_keys().len(), 1);
        assert_eq!(store.index_keys(NAMESPACE_INDEX, "ns").unwrap().len(), 1);
        assert_eq!(store.stats().decode_errors, 3);
    }

    /// As [`StorageError`] promises: at error level the first time for a stored version, then at
    /// debug level, however many reads meet it (a controller that lists at every sync would
    /// flood its log otherwise).
    #[test]
    fn an_unreadable_object_is_logged_at_error_level_once() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use tracing_subscriber::prelude::*;

        #[derive(Clone, Default)]
        struct Errors(Arc<AtomicUsize>);
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Errors {
            fn on_event(
                &self,
                event: &tracing::Event<'_>,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                if *event.metadata().level() == tracing::Level::ERROR {
                    self.0.fetch_add(1, SeqCst);
                }
            }
        }
        let errors = Errors::default();
        let subscriber = tracing_subscriber::registry().with(errors.clone());
        tracing::subscriber::with_default(subscriber, || {
            let store = Indexer::<Odd>::with_storage(CacheStorage::Compact(
                CompactConfig::default().hot_objects(0),
            ));
            let mut odd = Odd::new("a", OddSpec { n: 7 });
            odd.metadata.namespace = Some("ns".into());
            store.add(Arc::new(odd)).unwrap();
            for _ in 0..3 {
                assert!(store.list().is_empty());
                assert!(store.get_by_key("ns/a").is_none());
                assert!(store.by_index(NAMESPACE_INDEX, "ns").unwrap().is_empty());
            }
            assert_eq!(store.stats().decode_errors, 9);
        });
        assert_eq!(errors.0.load(SeqCst), 1);
    }
}

/// A cold list that reaches the FIFO before the first dictionary is trained is packed with
/// plain zstd. Each object is then decompressed once, as it is popped: the re-compression with
/// the dictionary that storing it needs starts from those bytes, not from a second
/// decompression.
#[test]
fn a_list_packed_before_the_dictionary_is_decompressed_once_an_object() {
    use super::{
        Storage,
        compact::{Compact, DECOMPRESSIONS},
    };
    use crate::reflector::decode::{ItemBytes, ItemEncoding};

    let store = Compact::<ConfigMap>::new(
        CompactConfig::default()
            .hot_objects(0)
            .dictionary_samples(100)
            .dictionary_size(8192),
    );
    let pack = |o: &Arc<ConfigMap>| {
        let key = crate::key_of(&**o).unwrap();
        let json = serde_json::to_vec(&**o).unwrap();
        let bytes = ItemBytes {
            bytes: &json,
            encoding: ItemEncoding::Json,
        };
        let meta = crate::reflector::decode::ListedMeta::of(&**o);
        let packed = store.pack_bytes(&key, bytes, &meta).expect("packs");
        (key, packed)
    };
    let objects: Vec<_> = (0..300).map(|i| shaped(0, i)).collect();
    let packed: Vec<_> = objects.iter().map(pack).collect();
    // The 100th sample started the training; the next compression after it ends puts the
    // dictionary in use.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store.stats().dictionary_trainings == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no dictionary trained"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        pack(&shaped(0, 1000));
    }
    let plain: usize = objects
        .iter()
        .map(|o| {
            zstd::bulk::compress(&serde_json::to_vec(&**o).unwrap(), 3)
                .unwrap()
                .len()
        })
        .sum();

    DECOMPRESSIONS.with(|n| n.set(0));
    let mut slots = Vec::new();
    for ((key, body), want) in packed.into_iter().zip(&objects) {
        let obj = store.unpack(&key, body).unwrap();
        assert_eq!(*obj, **want);
        slots.push((key.clone(), store.store(&key, &obj), Arc::clone(want)));
    }
    assert_eq!(DECOMPRESSIONS.with(std::cell::Cell::get), 300);
    let stats = store.stats();
    assert_eq!(stats.kept_packed, 300, "{stats:?}");
    // Stored with the dictionary, not as packed.
    assert!(
        (stats.stored_bytes as usize) < plain / 2,
        "stored {} bytes, plain zstd {plain}",
        stats.stored_bytes
    );
    for (key, slot, want) in &slots {
        assert_eq!(*store.load(key, slot).unwrap(), **want);
    }
}

/// A streaming replace (an in-order relist): snapshots of what it stored and of what the store
/// held before, readable after the store moved on, decoded once while their readers hold the
/// object; and an unchanged object keeps its stored form.
#[test]
fn a_streaming_replace_hands_out_snapshots_that_outlive_the_store() {
    let store = compact(
        CompactConfig::default()
            .hot_objects(0)
            .dictionary_samples(0),
    );
    let body = |s: &str| [("k", s.repeat(50))];
    let (a1, b1) = (
        cm("ns", "a", 1, &[], &body("a1")),
        cm("ns", "b", 1, &[], &body("b1")),
    );
    store.replace_at(vec![a1.clone(), b1.clone()], "1").unwrap();
    let a1 = Arc::unwrap_or_clone(a1);
    let stored_before = store.stats().stored_bytes;
    let a2 = cm("ns", "a", 2, &[], &body("a2"));
    let key = |n: &str| ObjectKey::new(Some("ns"), n).unwrap();
    // `b` goes, `a` changes, `c` comes; `b1` is still held, so an unchanged `b` would be kept as
    // it was, but it is not listed.
    let c1 = cm("ns", "c", 2, &[], &body("c1"));
    let mut replaced = store.replace_streaming(
        &mut vec![
            (key("a"), Listed::Object(a2.clone())),
            (key("c"), Listed::Object(c1.clone())),
        ]
        .into_iter(),
        "2",
    );
    assert_eq!(store.last_store_sync_resource_version(), "2");
    let gone = replaced.take_gone();
    assert_eq!(
        gone.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        [key("b")]
    );
    assert_eq!(replaced.take_keys(), [key("a"), key("c")]);
    let (old_a, new_a) = replaced.take(&key("a"));
    let old_a = old_a.expect("a was stored before");
    assert_eq!(old_a.resource_version(), Some("1"), "read without decoding");
    assert_eq!(new_a.unwrap().resource_version(), Some("2"));

    // The old `a` is no longer in the store, and nobody holds it: its snapshot decodes it, once
    // while it is held.
    let decodes = store.stats().decodes;
    let loaded = old_a.load().unwrap();
    assert_eq!(*loaded, a1);
    let again = old_a.clone().load().unwrap();
    assert!(Arc::ptr_eq(&loaded, &again));
    assert_eq!(store.stats().decodes, decodes + 1);
    // `b1` is held by the test: shared, not decoded.
    let old_b = gone[0].1.load().unwrap();
    assert!(Arc::ptr_eq(&old_b, &b1));
    let (old_c, new_c) = replaced.take(&key("c"));
    assert!(old_c.is_none());
    assert_eq!(*new_c.unwrap().load().unwrap(), *c1);
    // Each previous object is handed out once.
    assert!(replaced.take(&key("a")).0.is_none());
    assert!(replaced.take_gone().is_empty());
    drop(replaced);
    assert_eq!(by_key(store.list()), [(*a2).clone(), (*c1).clone()]);
    assert!(store.stats().stored_bytes > 0 && stored_before > 0);

    // A relist of the very object the store holds keeps its stored form. Stored from bytes as
    // a server sent them (indented JSON here), it keeps those: encoded again, it would be
    // compact JSON, fewer bytes.
    let sent = serde_json::to_vec_pretty(&*c1).unwrap();
    let bytes = crate::reflector::decode::ItemBytes {
        bytes: &sent,
        encoding: crate::reflector::decode::ItemEncoding::Json,
    };
    let c = store
        .unpack(
            store
                .pack_bytes(
                    &key("c"),
                    bytes,
                    &crate::reflector::decode::ListedMeta::of(&*c1),
                )
                .unwrap(),
        )
        .unwrap();
    store.insert(key("c"), c.clone());
    let encoded = store.stats().encoded_bytes;
    let held = store.get_by_key("ns/a").unwrap();
    store.replace_streaming(
        &mut vec![
            (key("a"), Listed::Object(held)),
            (key("c"), Listed::Object(c)),
        ]
        .into_iter(),
        "3",
    );
    assert_eq!(
        store.stats().encoded_bytes,
        encoded,
        "kept, not encoded again"
    );
    assert_eq!(by_key(store.list()), [(*a2).clone(), (*c1).clone()]);
    // Relisted unchanged (the held object, or a reference to the cached one, which is not
    // decoded), each object's new snapshot is of its old one's very bytes (so a handler's old
    // and new decode once); two objects' snapshots are not. A reference to a key the store does
    // not hold is left out.
    let held = store.get_by_key("ns/a").unwrap();
    let decodes = store.stats().decodes;
    let mut relisted = store.replace_streaming(
        &mut vec![
            (key("a"), Listed::Object(held)),
            (key("c"), Listed::Cached),
            (key("gone"), Listed::Cached),
        ]
        .into_iter(),
        "4",
    );
    assert_eq!(store.stats().decodes, decodes, "nothing decoded");
    assert!(relisted.take_gone().is_empty());
    let keys = relisted.take_keys();
    assert_eq!(keys, [key("a"), key("c")]);
    let news: Vec<_> = keys
        .iter()
        .map(|k| {
            let (old, new) = relisted.take(k);
            let new = new.unwrap();
            assert!(new.same_object(&old.unwrap()), "{k}");
            new
        })
        .collect();
    assert!(!news[0].same_object(&news[1]));
    assert_eq!(store.stats().decodes, decodes, "nothing decoded");
    assert_eq!(store.stats().encoded_bytes, encoded);
    assert_eq!(
        store.index_keys(NAMESPACE_INDEX, "ns").unwrap().len(),
        2,
        "index values kept"
    );
    assert_eq!(by_key(store.list()), [(*a2).clone(), (*c1).clone()]);
}

/// A list that names a key twice (a server's fault): the later entry wins, and the earlier one
/// leaves no index values behind; the key is reported once, where it first came.
#[test]
fn a_key_listed_twice_in_a_streaming_replace_keeps_the_later_entry_only() {
    let store = compact(
        CompactConfig::default()
            .hot_objects(0)
            .dictionary_samples(0),
    );
    store
        .add_indexers(Indexers::from([("data".to_owned(), data_key_index())]))
        .unwrap();
    let a1 = cm("ns", "a", 1, &[], &[("old", "1".into())]);
    store.replace_at(vec![a1], "1").unwrap();
    let key = ObjectKey::new(Some("ns"), "a").unwrap();
    let a2 = cm("ns", "a", 2, &[], &[("new", "2".into())]);
    let b = ObjectKey::new(Some("ns"), "b").unwrap();
    let mut replaced = store.replace_streaming(
        &mut vec![
            (key.clone(), Listed::Object(a2)),
            (b.clone(), Listed::Object(cm("ns", "b", 2, &[], &[]))),
            (key.clone(), Listed::Cached),
        ]
        .into_iter(),
        "2",
    );
    assert_eq!(replaced.take_keys(), [key.clone(), b.clone()]);
    assert!(replaced.take_gone().is_empty());
    // The later entry, the cached `a`, is what is stored: the very object held before.
    let (old, new) = replaced.take(&key);
    assert!(old.unwrap().same_object(&new.unwrap()));
    assert!(
        replaced.take(&key).0.is_none(),
        "the old `a` handed out twice"
    );
    let (old, new) = replaced.take(&b);
    assert!(old.is_none() && new.is_some());
    drop(replaced);
    assert!(
        store.index_keys("data", "new").unwrap().is_empty(),
        "stale index values"
    );
    assert_eq!(store.index_keys("data", "old").unwrap(), [key]);
    assert_eq!(store.len(), 2);
}

#[test]
fn a_transaction_hands_back_snapshots_without_decoding() {
    let store = compact(
        CompactConfig::default()
            .hot_objects(0)
            .dictionary_samples(0),
    );
    let body = |s: &str| [("k", s.repeat(50))];
    let key = |n: &str| ObjectKey::new(Some("ns"), n).unwrap();
    let a1 = cm("ns", "a", 1, &[], &body("a1"));
    let b1 = cm("ns", "b", 1, &[], &body("b1"));
    store.replace_at(vec![a1.clone(), b1.clone()], "1").unwrap();
    let a1 = Arc::unwrap_or_clone(a1);
    drop(b1);
    let a2 = cm("ns", "a", 2, &[], &body("a2"));
    let c1 = cm("ns", "c", 2, &[], &body("c1"));
    let decodes = store.stats().decodes;
    let written = store.transaction_snapshots(
        vec![
            StoreOp::Put(key("a"), a2.clone()),
            StoreOp::Remove(key("b")),
            StoreOp::Put(key("c"), c1.clone()),
        ],
        Some("2"),
    );
    assert_eq!(store.stats().decodes, decodes, "nothing decoded");
    assert_eq!(store.last_store_sync_resource_version(), "2");
    assert_eq!(written.len(), 3);
    // An update: the old version's snapshot, read without decoding, decodes to it later, after
    // the store has dropped it.
    let old = written[0].old.as_ref().unwrap();
    assert_eq!(old.resource_version(), Some("1"));
    let new = written[0].new.as_ref().unwrap();
    assert_eq!(new.resource_version(), Some("2"));
    // The new snapshot does not share the writer's object, which the writer is about to drop:
    // a `Weak` of it would pin its allocation while the snapshot waits. The slot's is the only
    // one.
    assert_eq!(Arc::weak_count(&a2), 1);
    let loaded = new.load().unwrap();
    assert!(!Arc::ptr_eq(&loaded, &a2));
    assert_eq!(loaded, a2);
    assert_eq!(*old.load().unwrap(), a1);
    // A removal: the old snapshot only.
    assert!(written[1].new.is_none());
    let old_b = written[1].old.as_ref().unwrap();
    assert_eq!(old_b.load().unwrap().metadata.name.as_deref(), Some("b"));
    // An add: no old.
    assert!(written[2].old.is_none());
    assert_eq!(
        store.stats().decodes,
        decodes + 3,
        "the new a, the old a and the old b, once each"
    );
    // A snapshot shares an object someone holds (and only then).
    let held = store.get_by_key("ns/c").unwrap();
    let weak = Arc::weak_count(&held);
    let shared = store.snapshots();
    assert_eq!(Arc::weak_count(&held), weak + 1);
    drop((shared, held));
    // The very object stored again (a resync): one snapshot for old and new.
    let again = store.transaction_snapshots(vec![StoreOp::Put(key("c"), c1.clone())], None);
    let (old, new) = (
        again[0].old.as_ref().unwrap(),
        again[0].new.as_ref().unwrap(),
    );
    assert!(old.same_object(new));
    // Nobody else holding the stored object, the snapshot outlives it compressed.
    let snap = new.clone();
    drop((again, written, c1));
    let decodes = store.stats().decodes;
    assert_eq!(snap.load().unwrap().metadata.name.as_deref(), Some("c"));
    assert_eq!(store.stats().decodes, decodes + 1);
}

#[test]
fn objects_pushed_out_of_the_hot_ring_are_freed_once_the_lock_is_released() {
    use super::{Storage, compact::Compact};
    // The storage, which runs under the store's lock, only sets the object aside...
    let storage = Compact::<ConfigMap>::new(CompactConfig::default().hot_objects(1));
    let (a, b) = (cm("ns", "a", 1, &[], &[]), cm("ns", "b", 1, &[], &[]));
    let weak_a = Arc::downgrade(&a);
    let _slot_a = storage.store(&crate::key_of(&*a).unwrap(), &a);
    drop(a);
    let _slot_b = storage.store(&crate::key_of(&*b).unwrap(), &b);
    assert!(weak_a.upgrade().is_some(), "freed under the store's lock");
    // ...for the writer to free once the lock is released; a reader leaves it to the writer.
    storage.release(false);
    assert!(weak_a.upgrade().is_some(), "freed by a reader");
    storage.release(true);
    assert!(weak_a.upgrade().is_none());

    // A store has freed it when a write returns...
    let store = compact(CompactConfig::default().hot_objects(1));
    let (a, b) = (cm("ns", "a", 1, &[], &[]), cm("ns", "b", 1, &[], &[]));
    let (weak_a, weak_b) = (Arc::downgrade(&a), Arc::downgrade(&b));
    store.add(a).unwrap();
    store.add(b).unwrap();
    assert!(weak_a.upgrade().is_none());
    // ...but not when a read returns: `a` decoded a second time enters the ring, pushing `b`
    // out, which waits for the next write.
    store.get_by_key("ns/a").unwrap();
    store.get_by_key("ns/a").unwrap();
    assert_eq!(store.stats().decodes, 2);
    assert!(weak_b.upgrade().is_some());
    store.add(cm("ns", "c", 1, &[], &[])).unwrap();
    assert!(weak_b.upgrade().is_none());
}

#[test]
fn an_object_pushed_out_while_held_is_freed_by_the_writer_once_let_go() {
    let store = compact(CompactConfig::default().hot_objects(1));
    let a = cm("ns", "a", 1, &[], &[]);
    let weak_a = Arc::downgrade(&a);
    store.add(Arc::clone(&a)).unwrap();
    // Pushed out while a handler still holds it: it waits, so the handler's drop is not the
    // last one...
    store.add(cm("ns", "b", 1, &[], &[])).unwrap();
    drop(a);
    assert!(weak_a.upgrade().is_some(), "the holder freed it");
    // ...and the next write frees it.
    store.add(cm("ns", "c", 1, &[], &[])).unwrap();
    assert!(weak_a.upgrade().is_none());

    // At most EVICTED_MAX held ones wait; past that the oldest is let go to its holder.
    let store = compact(CompactConfig::default().hot_objects(1));
    let held: Vec<_> = (0..100)
        .map(|i| {
            let o = cm("ns", &format!("h{i}"), 1, &[], &[]);
            store.add(Arc::clone(&o)).unwrap();
            o
        })
        .collect();
    let weaks: Vec<_> = held.iter().map(Arc::downgrade).collect();
    drop(held);
    // Those still set aside (the last 64 pushed out, and the one in the ring) outlive the
    // holder's drop; the first 35 were let go to it.
    let alive = weaks.iter().filter(|w| w.upgrade().is_some()).count();
    assert_eq!(alive, 65);
}

#[test]
fn readers_free_only_what_is_over_the_bound() {
    use super::{Storage, compact::Compact};
    let storage = Compact::<ConfigMap>::new(CompactConfig::default().hot_objects(1));
    let weaks: Vec<_> = (0..70)
        .map(|i| {
            let o = cm("ns", &format!("o{i}"), 1, &[], &[]);
            let _slot = storage.store(&crate::key_of(&*o).unwrap(), &o);
            Arc::downgrade(&o)
        })
        .collect();
    let alive = || weaks.iter().filter(|w| w.upgrade().is_some()).count();
    // Nobody holds them: 69 set aside and one in the ring.
    assert_eq!(alive(), 70);
    // A reader drops the five oldest, over the bound, and nothing more the second time.
    storage.release(false);
    assert_eq!(alive(), 65);
    assert!(weaks[..5].iter().all(|w| w.upgrade().is_none()));
    storage.release(false);
    assert_eq!(alive(), 65);
    // The writer frees all it can: only the ring's is left.
    storage.release(true);
    assert_eq!(alive(), 1);
}

/// Each object packed by `store` from its protobuf body (magic and envelope) as a relist's entry.
fn packed_protobuf(
    store: &Indexer<ConfigMap>,
    wire: &[(Arc<ConfigMap>, Vec<u8>)],
) -> Vec<(ObjectKey, Listed<ConfigMap>)> {
    use crate::{
        protobuf::schema::BUILTIN,
        reflector::decode::{ItemBytes, ItemEncoding, ListedMeta},
        store::Packed,
    };
    wire.iter()
        .map(|(o, bytes)| {
            let bytes = ItemBytes {
                bytes,
                encoding: ItemEncoding::Enveloped { schema: &BUILTIN },
            };
            let key = crate::key_of(&**o).unwrap();
            let Packed { key, body } = store
                .pack_bytes(&key, bytes, &ListedMeta::of(&**o))
                .expect("packs");
            (key, Listed::Packed(body))
        })
        .collect()
}

/// An in-order relist of packed objects: protobuf items, which the server encoded from its own
/// typed objects, are stored as they were packed, decoded only for an index that needs the
/// object (the namespace one is read from the key, the labels and resourceVersion from what the
/// list decoder read of the bytes); JSON items, which may not fit the type, are checked (or
/// decoded, for an index) first and left out, reported, when they do not.
#[test]
fn a_relist_stores_packed_protobuf_objects_undecoded_unless_an_index_needs_them() {
    use crate::{
        protobuf::encode::encode_object,
        reflector::decode::{ItemBytes, ItemEncoding, ListedMeta},
        store::Packed,
    };

    let objects: Vec<_> = (0..40)
        .map(|i| {
            let tier = if i % 3 == 0 { "a" } else { "b" };
            cm(
                &format!("ns-{}", i % 4),
                &format!("cm-{i}"),
                100 + i,
                &[("tier", tier)],
                &[("k", format!("v{i}"))],
            )
        })
        .collect();
    let wire: Vec<Vec<u8>> = objects
        .iter()
        .map(|o| encode_object("v1", "ConfigMap", &serde_json::to_value(&**o).unwrap()).unwrap())
        .collect();
    let wire: Vec<_> = objects.iter().cloned().zip(wire).collect();
    let listed = |store: &Indexer<ConfigMap>| packed_protobuf(store, &wire);
    let tier_a = parse_label_selector("tier=a").unwrap();
    let want_a: Vec<ObjectKey> = sorted_keys(
        objects
            .iter()
            .filter(|o| o.metadata.labels.as_ref().unwrap()["tier"] == "a")
            .map(|o| crate::key_of(&**o).unwrap())
            .collect(),
    );

    // resourceVersions and labels as read beside the bytes (by the list decoder, or the check).
    let read_beside_the_bytes = |store: &Indexer<ConfigMap>| {
        assert_eq!(
            store.resource_version_of("ns-2/cm-6").as_deref(),
            Some("106")
        );
        let selected = store
            .list_selected(&tier_a)
            .iter()
            .map(|o| crate::key_of(&**o).unwrap())
            .collect();
        assert_eq!(sorted_keys(selected), want_a);
    };

    // The namespace index alone: nothing decoded.
    let store = compact(CompactConfig::default().hot_objects(0));
    let mut replaced = store.replace_streaming(&mut listed(&store).into_iter(), "200");
    assert!(replaced.take_undecodable().is_empty());
    drop(replaced);
    let stats = store.stats();
    assert_eq!((stats.decodes, stats.unpacks), (0, 0), "{stats:?}");
    assert_eq!(stats.kept_packed, 40, "{stats:?}");
    assert_eq!(
        sorted_keys(store.index_keys(NAMESPACE_INDEX, "ns-1").unwrap()),
        sorted_keys(
            (0..40)
                .filter(|i| i % 4 == 1)
                .map(|i| ObjectKey::new(Some("ns-1"), &format!("cm-{i}")).unwrap())
                .collect()
        )
    );
    read_beside_the_bytes(&store);
    assert_eq!(by_key(store.list()), by_key(objects.clone()));

    // An index that needs the object: each decoded once for it, and indexed right.
    let store = compact(CompactConfig::default().hot_objects(0));
    store
        .add_indexers(Indexers::from([("tier".to_owned(), tier_index())]))
        .unwrap();
    drop(store.replace_streaming(&mut listed(&store).into_iter(), "200"));
    assert_eq!(store.stats().unpacks, 0);
    assert_eq!(store.stats().decodes, 40);
    assert_eq!(sorted_keys(store.index_keys("tier", "a").unwrap()), want_a);
    assert_eq!(by_key(store.list()), by_key(objects.clone()));

    // JSON as the server sent it may not fit the type. Of a k8s-openapi kind, with the
    // namespace index alone, it is checked (decoded with `fieldsV1` skipped, which takes any
    // JSON) and stored as it was packed; with another index, decoded for it. Either way one that
    // does not fit is left out, and handed back to be reported.
    let json: Vec<Vec<u8>> = objects
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut v = serde_json::to_value(&**o).unwrap();
            // `fieldsV1` of every shape, which a decode takes as it comes.
            let fields = [
                serde_json::json!({"f:data": {"f:k": {}}}),
                serde_json::json!([1, "two", null, {"x": [[]]}]),
                serde_json::json!("a string"),
                serde_json::json!(7),
            ];
            v["metadata"]["managedFields"] = serde_json::json!([
                {"manager": "m", "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": fields[i % 4].clone()},
            ]);
            serde_json::to_vec(&v).unwrap()
        })
        .chain([
            br#"{"metadata":{"name":"bad","namespace":"ns-0"},"data":"not a map"}"#.to_vec(),
            // Wrong in a managedFields entry beside `fieldsV1`: the check sees it.
            br#"{"metadata":{"name":"bad-entry","namespace":"ns-0","managedFields":[{"fieldsV1":{},"time":5}]}}"#
                .to_vec(),
            // Not JSON inside `fieldsV1`, or JSON a `serde_json::Value` refuses (a lone
            // surrogate): the check reads it as strictly as a decode.
            br#"{"metadata":{"name":"bad-syntax","namespace":"ns-0","managedFields":[{"fieldsV1":{"a":}}]}}"#
                .to_vec(),
            br#"{"metadata":{"name":"bad-value","namespace":"ns-0","managedFields":[{"fieldsV1":{"\ud800":1}}]}}"#
                .to_vec(),
        ])
        .collect();
    let want: Vec<Arc<ConfigMap>> = json[..40]
        .iter()
        .map(|b| Arc::new(serde_json::from_slice(b).unwrap()))
        .collect();
    let bad = ["bad", "bad-entry", "bad-syntax", "bad-value"].map(|name| ListedMeta {
        namespace: Some("ns-0".into()),
        name: Some(name.into()),
        ..ListedMeta::default()
    });
    let listed_json = |store: &Indexer<ConfigMap>| {
        want.iter()
            .map(|o| ListedMeta::of(&**o))
            .chain(bad.clone())
            .zip(&json)
            .map(|(meta, bytes)| {
                let bytes = ItemBytes {
                    bytes,
                    encoding: ItemEncoding::Json,
                };
                let Packed { key, body } = store
                    .pack_bytes(&meta.key().unwrap(), bytes, &meta)
                    .expect("packs");
                (key, Listed::Packed(body))
            })
            .collect::<Vec<_>>()
    };
    let left_out = |undecodable: Vec<(ObjectKey, StorageError)>| {
        assert!(
            undecodable
                .iter()
                .all(|(_, e)| matches!(e, StorageError::Decode { .. })),
            "{undecodable:?}"
        );
        sorted_keys(undecodable.into_iter().map(|(key, _)| key).collect())
    };
    let want_left_out = sorted_keys(
        ["bad", "bad-entry", "bad-syntax", "bad-value"]
            .map(|name| ObjectKey::new(Some("ns-0"), name).unwrap())
            .to_vec(),
    );

    let store = compact(CompactConfig::default().hot_objects(0));
    let mut replaced = store.replace_streaming(&mut listed_json(&store).into_iter(), "200");
    assert_eq!(left_out(replaced.take_undecodable()), want_left_out);
    drop(replaced);
    let stats = store.stats();
    assert_eq!(
        (
            stats.checked,
            stats.kept_packed,
            stats.unpacks,
            stats.decodes
        ),
        (40, 40, 0, 0),
        "{stats:?}"
    );
    assert_eq!(stats.decode_errors, 4, "{stats:?}");
    read_beside_the_bytes(&store);
    // What is read back is the whole object, `fieldsV1` and all.
    assert_eq!(by_key(store.list()), by_key(want.clone()));

    let store = compact(CompactConfig::default().hot_objects(0));
    store
        .add_indexers(Indexers::from([("tier".to_owned(), tier_index())]))
        .unwrap();
    let mut replaced = store.replace_streaming(&mut listed_json(&store).into_iter(), "200");
    assert_eq!(left_out(replaced.take_undecodable()), want_left_out);
    drop(replaced);
    let stats = store.stats();
    assert_eq!(
        (stats.checked, stats.unpacks, stats.decode_errors),
        (0, 40, 4),
        "{stats:?}"
    );
    assert_eq!(sorted_keys(store.index_keys("tier", "a").unwrap()), want_a);
    assert_eq!(by_key(store.list()), by_key(want));
}

/// A protobuf item that does not decode (a string that is not UTF-8, which the server's own
/// encoding does not check): with an index that needs the object it is found while the relist
/// builds the cache, left out (neither its bytes nor the item counted) and handed back to be
/// reported; with the namespace index alone it is stored undecoded and found when read, as a
/// typed error.
#[test]
fn an_undecodable_protobuf_item_of_a_relist_is_left_out_or_found_when_read() {
    use crate::protobuf::encode::encode_object;

    let good = cm("ns", "good", 1, &[("tier", "a")], &[("k", "fine".into())]);
    let bad = cm(
        "ns",
        "bad",
        2,
        &[("tier", "a")],
        &[("k", "\u{1}marker".into())],
    );
    let encode = |o: &ConfigMap| {
        encode_object("v1", "ConfigMap", &serde_json::to_value(o).unwrap()).unwrap()
    };
    let mut bad_bytes = encode(&bad);
    let at = bad_bytes
        .windows(7)
        .position(|w| w == b"\x01marker")
        .expect("the value is in the bytes");
    bad_bytes[at] = 0xff; // no longer UTF-8
    let wire = [(good.clone(), encode(&good)), (bad.clone(), bad_bytes)];
    let relist = |store: &Indexer<ConfigMap>, wire: &[(Arc<ConfigMap>, Vec<u8>)]| {
        let mut items = packed_protobuf(store, wire).into_iter();
        let mut replaced = store.replace_streaming(&mut items, "9");
        replaced.take_undecodable()
    };

    let indexed = compact(CompactConfig::default().hot_objects(0));
    indexed
        .add_indexers(Indexers::from([("tier".to_owned(), tier_index())]))
        .unwrap();
    let undecodable = relist(&indexed, &wire);
    assert_eq!(undecodable.len(), 1);
    assert_eq!(undecodable[0].0.as_str(), "ns/bad");
    assert_eq!(indexed.list_keys(), [ObjectKey::parse("ns/good").unwrap()]);
    let only_good = compact(CompactConfig::default().hot_objects(0));
    assert!(relist(&only_good, &wire[..1]).is_empty());
    assert_eq!(
        indexed.stats().stored_bytes,
        only_good.stats().stored_bytes,
        "the bad item's bytes are not counted"
    );
    assert_eq!(
        (indexed.stats().kept_packed, only_good.stats().kept_packed),
        (1, 1),
        "nor is it counted as kept"
    );

    let by_namespace = compact(CompactConfig::default().hot_objects(0));
    assert!(relist(&by_namespace, &wire).is_empty());
    assert_eq!(by_namespace.len(), 2);
    assert!(matches!(
        by_namespace.try_get_by_key("ns/bad"),
        Err(StorageError::Decode { .. })
    ));
    assert_eq!(*by_namespace.get_by_key("ns/good").unwrap(), *good);
    assert_eq!(by_namespace.stats().decode_errors, 1);
}
