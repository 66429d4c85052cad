//! 10,000 writes from several tasks while an informer watches: no update may be lost.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::Selector;
use kube_informer::{DeltaObject, ResourceEventHandler, SharedInformerFactory};

use crate::common::{
    CONVERGE_TIMEOUT, ErrorLog, Seen, config_map, config_maps_in, eventually, server_versions,
    versions, within,
};
use crate::support::Cluster;

const TASKS: usize = 8;
const KEYS_PER_TASK: usize = 25;
const WRITES_PER_TASK: usize = 1250;
/// Every this many writes (per task) the key at hand is deleted instead of updated; its next
/// turn recreates it.
const DELETE_EVERY: usize = 150;
/// The last writes of each task delete the keys they touch, so some keys end deleted.
const FINAL_DELETES: usize = 10;

/// Per key: the last notification, plus every break in the chain of notifications (an update
/// whose old version is not the previous new one, an add over a live object, ...).
#[derive(Default)]
struct Chains {
    last: HashMap<String, Seen>,
    broken: Vec<String>,
    notifications: usize,
}

#[derive(Clone, Default)]
struct ChainChecker(Arc<Mutex<Chains>>);

fn num(rv: &str) -> u64 {
    rv.parse().unwrap_or(0)
}

fn live_rv(s: Option<&Seen>) -> Option<&str> {
    match s? {
        Seen::Add { rv, .. } | Seen::Update { new_rv: rv, .. } => Some(rv),
        Seen::Delete { .. } => None,
    }
}

impl ChainChecker {
    fn record(&self, seen: Seen) {
        let mut c = self.0.lock().unwrap();
        c.notifications += 1;
        let prev = c.last.get(seen.key());
        let problem = match &seen {
            Seen::Add { .. } => live_rv(prev).map(|p| format!("add over live version {p}")),
            Seen::Update { old_rv, new_rv, .. } => match live_rv(prev) {
                Some(p) if p == old_rv && num(new_rv) > num(old_rv) => None,
                p => Some(format!("update {old_rv} -> {new_rv} after {p:?}")),
            },
            Seen::Delete { rv, tombstone, .. } => match live_rv(prev) {
                Some(p) if *tombstone || num(rv) > num(p) => None,
                p => Some(format!("delete at {rv} after {p:?}")),
            },
        };
        if let Some(p) = problem {
            c.broken.push(format!("{}: {p}", seen.key()));
        }
        c.last.insert(seen.key().to_owned(), seen);
    }
}

impl ResourceEventHandler<ConfigMap> for ChainChecker {
    fn on_add(&mut self, obj: &Arc<ConfigMap>, is_in_initial_list: bool) {
        self.record(Seen::of(&kube_informer::InformerEvent::Add {
            obj: obj.clone(),
            is_in_initial_list,
        }));
    }
    fn on_update(&mut self, old: &Arc<ConfigMap>, new: &Arc<ConfigMap>) {
        self.record(Seen::of(&kube_informer::InformerEvent::Update {
            old: old.clone(),
            new: new.clone(),
        }));
    }
    fn on_delete(&mut self, obj: &DeltaObject<ConfigMap>) {
        self.record(Seen::of(&kube_informer::InformerEvent::Delete(obj.clone())));
    }
}

/// One writer: creates its keys, updates them round-robin, deletes one now and then (recreating
/// it on its next turn) and deletes the keys of its last writes. Every step is one write.
async fn writer(cms: Api<ConfigMap>, task: usize) {
    let mut exists = [false; KEYS_PER_TASK];
    for i in 0..WRITES_PER_TASK {
        let k = i % KEYS_PER_TASK;
        let name = format!("t{task}-k{k}");
        let final_phase = i >= WRITES_PER_TASK - FINAL_DELETES;
        let result = if !exists[k] {
            exists[k] = true;
            cms.create(&PostParams::default(), &config_map(&name, &i.to_string()))
                .await
                .map(drop)
        } else if final_phase || i % DELETE_EVERY == DELETE_EVERY - 1 {
            exists[k] = false;
            cms.delete(&name, &DeleteParams::default()).await.map(drop)
        } else {
            let patch = serde_json::json!({ "data": { "key": i.to_string() } });
            cms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop)
        };
        result.unwrap_or_else(|e| panic!("writer {task}, write {i} on {name}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn ten_thousand_concurrent_writes_lose_no_update() {
    let cluster = within("start", Cluster::start_for("ten_thousand_writes")).await;
    let ns = "stress";
    let cms = config_maps_in(&cluster, ns).await;

    let factory = SharedInformerFactory::new(
        cluster.admin(),
        crate::common::factory_config().namespace(ns),
    );
    let informer = factory.informer::<ConfigMap>();
    let errors = ErrorLog::attach(&informer);
    let chains = ChainChecker::default();
    informer
        .add_event_handler(chains.clone())
        .expect("add handler");
    factory.start();
    within("sync", factory.wait_for_cache_sync()).await;

    let started = Instant::now();
    let writers: Vec<_> = (0..TASKS)
        .map(|t| tokio::spawn(writer(cms.clone(), t)))
        .collect();
    for w in writers {
        within("writer", w).await.expect("writer task");
    }
    let total = TASKS * WRITES_PER_TASK;
    eprintln!(
        "{total} writes in {:?} ({:.0}/s)",
        started.elapsed(),
        total as f64 / started.elapsed().as_secs_f64()
    );

    // The cache converges on a fresh list...
    let server = server_versions(&cms).await;
    let deleted_at_end = TASKS * FINAL_DELETES;
    assert_eq!(server.len(), TASKS * KEYS_PER_TASK - deleted_at_end);
    eventually("cache equals a fresh list", CONVERGE_TIMEOUT, || {
        let got = versions(
            informer
                .lister()
                .list(&Selector::default())
                .iter()
                .map(|o| &**o),
        );
        if got == server {
            Ok(())
        } else {
            let missing: Vec<_> = server
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(v))
                .collect();
            let extra: Vec<_> = got.keys().filter(|k| !server.contains_key(*k)).collect();
            Err(format!(
                "{} differ: {missing:?}; extra {extra:?}",
                missing.len() + extra.len()
            ))
        }
    })
    .await;
    // ...and so does the handler: its last notification for every key is the key's final state.
    eventually("handler saw every final state", CONVERGE_TIMEOUT, || {
        let c = chains.0.lock().unwrap();
        let mut wrong = BTreeMap::new();
        for (k, s) in &c.last {
            match (server.get(k), live_rv(Some(s))) {
                (Some(want), Some(got)) if want == got => {}
                (None, None) => {}
                (want, got) => {
                    wrong.insert(k.clone(), (want.cloned(), got.map(str::to_owned)));
                }
            }
        }
        let never: Vec<_> = server.keys().filter(|k| !c.last.contains_key(*k)).collect();
        if wrong.is_empty() && never.is_empty() && c.last.len() == TASKS * KEYS_PER_TASK {
            Ok(())
        } else {
            Err(format!(
                "{} keys known; wrong (server, handler): {wrong:?}; never notified: {never:?}",
                c.last.len()
            ))
        }
    })
    .await;

    let (broken, notifications) = {
        let c = chains.0.lock().unwrap();
        (c.broken.clone(), c.notifications)
    };
    assert!(broken.is_empty(), "broken notification chains: {broken:#?}");
    let errs = errors.all();
    eprintln!(
        "{notifications} notifications for {total} writes; {} watch errors",
        errs.len()
    );
    if errs.is_empty() {
        // Without a relist every write is exactly one watch event and one notification.
        assert_eq!(notifications, total, "notifications lost or invented");
    } else {
        // A relist may fold several updates into one, never invent any.
        assert!(notifications <= total, "{errs:#?}");
    }
    within("shutdown", factory.shutdown()).await;
}
