//! Randomised model test: 100,000 random operations on a `DeltaFifo` feeding an `Indexer` the way
//! an informer does, checked step by step against a small reference model of client-go's
//! DeltaFIFO rules.
//!
//! Replay a failure with `KUBE_INFORMER_SEED=<seed printed on failure> cargo test --test fifo_model`.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use futures::FutureExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube_informer::{
    DeltaFifo, DeltaObject, DeltaType, FifoError, Indexer, KnownObjects, NAMESPACE_INDEX,
};

const OPS: usize = 100_000;
const NAMESPACES: [&str; 2] = ["ns1", "ns2"];
const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// One delta as the model sees it: the object's identity is its unique version number.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MDelta {
    kind: DeltaType,
    version: u64,
    tombstone: bool,
}

#[derive(Default)]
struct Model {
    /// Queued keys in pop order, each with its deltas (oldest first).
    queue: Vec<(String, Vec<MDelta>)>,
    /// What the informer's store should hold: key → version.
    store: BTreeMap<String, u64>,
    populated: bool,
    initial: usize,
}

impl Model {
    fn queued(&self, key: &str) -> Option<&Vec<MDelta>> {
        self.queue.iter().find(|(k, _)| k == key).map(|(_, d)| d)
    }

    fn queue_action(&mut self, key: &str, delta: MDelta) {
        match self.queue.iter_mut().find(|(k, _)| k == key) {
            Some((_, deltas)) => {
                deltas.push(delta);
                let n = deltas.len();
                let both_deleted = deltas[n - 1].kind == DeltaType::Deleted
                    && deltas[n - 2].kind == DeltaType::Deleted;
                if both_deleted {
                    // Keep the older delete unless it is a tombstone.
                    if deltas[n - 2].tombstone {
                        deltas.remove(n - 2);
                    } else {
                        deltas.pop();
                    }
                }
            }
            None => self.queue.push((key.to_owned(), vec![delta])),
        }
    }

    fn synced(&self) -> bool {
        self.populated && self.initial == 0
    }
}

fn cm(ns: &str, name: &str, version: u64) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            resource_version: Some(version.to_string()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn version_of(obj: &ConfigMap) -> u64 {
    obj.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("test objects carry a numeric version")
}

struct Harness {
    rng: fastrand::Rng,
    next_version: u64,
    fifo: DeltaFifo<ConfigMap>,
    store: Indexer<ConfigMap>,
    model: Model,
}

impl Harness {
    fn new(seed: u64) -> Self {
        let store = Indexer::new();
        let known: Arc<dyn KnownObjects<ConfigMap>> = Arc::new(store.clone());
        Self {
            rng: fastrand::Rng::with_seed(seed),
            next_version: 0,
            fifo: DeltaFifo::new(Some(known)),
            store,
            model: Model::default(),
        }
    }

    fn random_object(&mut self) -> (String, ConfigMap) {
        let ns = NAMESPACES[self.rng.usize(..NAMESPACES.len())];
        let name = NAMES[self.rng.usize(..NAMES.len())];
        self.next_version += 1;
        (format!("{ns}/{name}"), cm(ns, name, self.next_version))
    }

    fn add_or_update(&mut self, kind: DeltaType) {
        let (key, obj) = self.random_object();
        let version = version_of(&obj);
        match kind {
            DeltaType::Added => self.fifo.add(obj).unwrap(),
            _ => self.fifo.update(obj).unwrap(),
        }
        self.model.populated = true;
        self.model.queue_action(
            &key,
            MDelta {
                kind,
                version,
                tombstone: false,
            },
        );
    }

    fn delete(&mut self) {
        let (key, obj) = self.random_object();
        let version = version_of(&obj);
        self.fifo.delete(obj).unwrap();
        self.model.populated = true;
        if self.model.queued(&key).is_some() || self.model.store.contains_key(&key) {
            self.model.queue_action(
                &key,
                MDelta {
                    kind: DeltaType::Deleted,
                    version,
                    tombstone: false,
                },
            );
        }
    }

    fn replace(&mut self) {
        let n = self.rng.usize(..=NAMES.len() * NAMESPACES.len());
        let list: Vec<(String, ConfigMap)> = (0..n).map(|_| self.random_object()).collect();
        if self.rng.u8(..100) == 0 {
            // A nameless object anywhere in the list rejects the whole replace, changing nothing.
            let mut objs: Vec<ConfigMap> = list.into_iter().map(|(_, o)| o).collect();
            objs.insert(self.rng.usize(..=objs.len()), ConfigMap::default());
            assert!(matches!(
                self.fifo.replace(objs, "x"),
                Err(FifoError::Key(_))
            ));
            return;
        }
        let listed: BTreeSet<String> = list.iter().map(|(k, _)| k.clone()).collect();
        let model = &mut self.model;
        for (key, obj) in &list {
            model.queue_action(
                key,
                MDelta {
                    kind: DeltaType::Replaced,
                    version: version_of(obj),
                    tombstone: false,
                },
            );
        }
        let mut deletions = 0;
        for (key, deltas) in &mut model.queue {
            if !listed.contains(key) {
                let newest = deltas.last().expect("queued keys have deltas").version;
                deltas.push(MDelta {
                    kind: DeltaType::Deleted,
                    version: newest,
                    tombstone: true,
                });
                let n = deltas.len();
                if deltas[n - 2].kind == DeltaType::Deleted {
                    if deltas[n - 2].tombstone {
                        deltas.remove(n - 2);
                    } else {
                        deltas.pop();
                    }
                }
                deletions += 1;
            }
        }
        let known: Vec<(String, u64)> = model.store.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for (key, version) in known {
            if !listed.contains(&key) && model.queued(&key).is_none() {
                model.queue_action(
                    &key,
                    MDelta {
                        kind: DeltaType::Deleted,
                        version,
                        tombstone: true,
                    },
                );
                deletions += 1;
            }
        }
        if !model.populated {
            model.populated = true;
            model.initial = listed.len() + deletions;
        }
        let rv = self.next_version.to_string();
        self.fifo
            .replace(list.into_iter().map(|(_, o)| o).collect(), &rv)
            .unwrap();
        assert_eq!(self.fifo.last_sync_resource_version(), rv);
    }

    fn resync(&mut self) {
        let before = self.model.queue.len();
        self.fifo.resync().unwrap();
        let synced: BTreeSet<String> = self
            .model
            .store
            .keys()
            .filter(|k| self.model.queued(k).is_none())
            .cloned()
            .collect();
        // The order in which resync queues keys is unspecified (client-go: Go map order): take
        // the real order after checking it queues exactly the expected keys.
        let real_new: Vec<String> = self
            .fifo
            .list_keys()
            .iter()
            .skip(before)
            .map(|k| k.to_string())
            .collect();
        assert_eq!(
            real_new.iter().cloned().collect::<BTreeSet<_>>(),
            synced,
            "resync queued the wrong keys"
        );
        for key in real_new {
            let version = self.model.store[&key];
            self.model.queue_action(
                &key,
                MDelta {
                    kind: DeltaType::Sync,
                    version,
                    tombstone: false,
                },
            );
        }
    }

    /// Pops one key like an informer: apply its deltas to the store.
    fn pop(&mut self) {
        let store = self.store.clone();
        let popped = self
            .fifo
            .pop(|deltas, initial| {
                let mut key = None;
                let summary: Vec<MDelta> = deltas
                    .iter()
                    .map(|d| {
                        let obj = d.object.object();
                        match (&d.kind, &d.object) {
                            (DeltaType::Deleted, DeltaObject::DeletedFinalStateUnknown(t)) => {
                                store.remove(&t.key);
                            }
                            (DeltaType::Deleted, DeltaObject::Object(o)) => {
                                store.delete(o).unwrap()
                            }
                            _ => store.update(Arc::clone(obj)).unwrap(),
                        }
                        key = Some(format!(
                            "{}/{}",
                            obj.metadata.namespace.as_deref().unwrap(),
                            obj.metadata.name.as_deref().unwrap()
                        ));
                        MDelta {
                            kind: d.kind,
                            version: version_of(obj),
                            tombstone: d.object.is_tombstone(),
                        }
                    })
                    .collect();
                (key, summary, initial)
            })
            .now_or_never();
        if self.model.queue.is_empty() {
            assert!(popped.is_none(), "pop completed with nothing queued");
            return;
        }
        let (key, deltas) = self.model.queue.remove(0);
        let initial = !self.model.synced();
        self.model.initial = self.model.initial.saturating_sub(1);
        for d in &deltas {
            if d.kind == DeltaType::Deleted {
                self.model.store.remove(&key);
            } else {
                self.model.store.insert(key.clone(), d.version);
            }
        }
        let (real_key, real_deltas, real_initial) = popped
            .expect("pop did not complete with work queued")
            .unwrap();
        assert_eq!(
            real_key.as_deref(),
            Some(key.as_str()),
            "popped the wrong key"
        );
        assert_eq!(real_deltas, deltas, "wrong deltas for {key}");
        assert_eq!(real_initial, initial, "wrong is_in_initial_list for {key}");
    }

    fn check(&self) {
        let keys: Vec<String> = self
            .fifo
            .list_keys()
            .iter()
            .map(|k| k.to_string())
            .collect();
        let model_keys: Vec<&String> = self.model.queue.iter().map(|(k, _)| k).collect();
        assert_eq!(keys.iter().collect::<Vec<_>>(), model_keys, "queue order");
        assert_eq!(self.fifo.has_synced(), self.model.synced(), "has_synced");
        let mut stored: Vec<(String, u64)> = self
            .store
            .list()
            .iter()
            .map(|o| {
                (
                    format!(
                        "{}/{}",
                        o.metadata.namespace.as_deref().unwrap(),
                        o.metadata.name.as_deref().unwrap()
                    ),
                    version_of(o),
                )
            })
            .collect();
        stored.sort();
        let model_store: Vec<(String, u64)> = self
            .model
            .store
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        assert_eq!(stored, model_store, "store content");
        for ns in NAMESPACES {
            let expected = self
                .model
                .store
                .keys()
                .filter(|k| k.starts_with(&format!("{ns}/")))
                .count();
            assert_eq!(
                self.store.by_index(NAMESPACE_INDEX, ns).unwrap().len(),
                expected,
                "namespace index of {ns}"
            );
        }
    }

    fn step(&mut self) {
        match self.rng.u8(..100) {
            0..20 => self.add_or_update(DeltaType::Added),
            20..40 => self.add_or_update(DeltaType::Updated),
            40..55 => self.delete(),
            55..60 => self.replace(),
            60..64 => self.resync(),
            _ => self.pop(),
        }
        self.check();
    }

    fn close_and_drain(&mut self) {
        self.fifo.close();
        while !self.model.queue.is_empty() {
            self.pop();
            self.check();
        }
        let closed = self
            .fifo
            .pop(|_, _| ())
            .now_or_never()
            .expect("pop waited on a closed, empty fifo");
        assert_eq!(closed, Err(FifoError::Closed));
    }
}

#[test]
fn delta_fifo_and_store_match_the_reference_model() {
    let seed = std::env::var("KUBE_INFORMER_SEED")
        .ok()
        .map(|s| s.parse().expect("KUBE_INFORMER_SEED must be a u64"))
        .unwrap_or_else(|| fastrand::u64(..));
    println!("KUBE_INFORMER_SEED={seed}");
    let result = std::panic::catch_unwind(|| {
        let mut harness = Harness::new(seed);
        for _ in 0..OPS {
            harness.step();
        }
        harness.close_and_drain();
    });
    if let Err(panic) = result {
        eprintln!("model test failed; replay with KUBE_INFORMER_SEED={seed}");
        std::panic::resume_unwind(panic);
    }
}
