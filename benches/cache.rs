//! Store and DeltaFIFO micro-benchmarks at informer scale.
//!
//! `cargo bench --bench cache -- --quick`

use std::{hint::black_box, sync::Arc};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use futures::FutureExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube_informer::{DeltaFifo, Indexer, KnownObjects, NAMESPACE_INDEX, key_of};

const OBJECTS: usize = 100_000;
const NAMESPACES: usize = 100;

fn cm(i: usize, version: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("cm-{i}")),
            namespace: Some(format!("ns-{}", i % NAMESPACES)),
            resource_version: Some(version.to_string()),
            ..Default::default()
        },
        data: Some([("key".to_owned(), "value".to_owned())].into()),
        ..Default::default()
    }
}

fn objects(version: usize) -> Vec<Arc<ConfigMap>> {
    (0..OBJECTS).map(|i| Arc::new(cm(i, version))).collect()
}

fn filled_store() -> Indexer<ConfigMap> {
    let store = Indexer::new();
    store.replace(objects(1)).unwrap();
    store
}

fn store(c: &mut Criterion) {
    let mut g = c.benchmark_group("store");
    g.bench_function("add 100k objects to an empty store", |b| {
        b.iter_batched(
            || objects(1),
            |objs| {
                let store = Indexer::new();
                for obj in objs {
                    store.add(obj).unwrap();
                }
                store
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("replace with 100k objects", |b| {
        b.iter_batched(
            || objects(1),
            |objs| Indexer::new().replace(objs).unwrap(),
            BatchSize::LargeInput,
        )
    });

    let store = filled_store();
    let updates = objects(2);
    let mut i = 0;
    g.bench_function("update one object in a 100k store", |b| {
        b.iter(|| {
            i = (i + 1) % OBJECTS;
            store.update(Arc::clone(&updates[i])).unwrap()
        })
    });
    let keys: Vec<String> = updates
        .iter()
        .map(|o| key_of(o).unwrap().to_string())
        .collect();
    g.bench_function("get_by_key in a 100k store", |b| {
        b.iter(|| {
            i = (i + 1) % OBJECTS;
            black_box(store.get_by_key(&keys[i]))
        })
    });
    g.bench_function("by_index namespace (1,000 of 100k objects)", |b| {
        b.iter(|| {
            i = (i + 1) % NAMESPACES;
            black_box(store.by_index(NAMESPACE_INDEX, &format!("ns-{i}")).unwrap())
        })
    });
    g.finish();
}

fn fifo(c: &mut Criterion) {
    let mut g = c.benchmark_group("fifo");
    g.bench_function("add + pop 100k objects", |b| {
        b.iter_batched(
            || (0..OBJECTS).map(|i| cm(i, 1)).collect::<Vec<_>>(),
            |objs| {
                let fifo = DeltaFifo::new(None);
                for obj in objs {
                    fifo.add(obj).unwrap();
                }
                while let Some(popped) = fifo.pop(|deltas, _| deltas.len()).now_or_never() {
                    black_box(popped.unwrap());
                }
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("replace 50k over a 50k store + pop into the store", |b| {
        b.iter_batched(
            || {
                let store = Indexer::new();
                store
                    .replace((0..50_000).map(|i| Arc::new(cm(i, 1))).collect())
                    .unwrap();
                let list: Vec<ConfigMap> = (0..50_000).map(|i| cm(i + 1_000, 2)).collect();
                (store, list)
            },
            |(store, list)| {
                let known: Arc<dyn KnownObjects<ConfigMap>> = Arc::new(store.clone());
                let fifo = DeltaFifo::new(Some(known));
                fifo.replace(list, "2").unwrap();
                while let Some(popped) = fifo
                    .pop(|deltas, _| {
                        for d in deltas {
                            let obj = d.object.object();
                            let key = key_of(obj).unwrap();
                            if d.object.is_tombstone()
                                || d.kind == kube_informer::DeltaType::Deleted
                            {
                                store.remove(&key);
                            } else {
                                store.insert(key, Arc::clone(obj));
                            }
                        }
                    })
                    .now_or_never()
                {
                    popped.unwrap();
                }
                store
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, store, fifo);
criterion_main!(benches);
