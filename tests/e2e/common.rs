//! Helpers shared by the informer e2e tests: timeouts, polling, object builders, and a handler
//! that records what an informer delivers.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::{Client, Resource};
use kube_informer::{
    DeltaObject, FactoryConfig, FifoMode, InformerConfig, InformerEvent, ResourceEventHandlerFuncs,
    SharedIndexInformer,
};
use serde::de::DeserializeOwned;

/// The FIFO mode the suite's informers run: `KUBE_INFORMER_E2E_FIFO=in-order` for
/// [`FifoMode::InOrder`] (client-go 1.36+), else the default [`FifoMode::DeltaFifo`].
/// `.ci/e2e.sh` runs the informer tests once in each.
pub fn fifo_mode() -> FifoMode {
    match std::env::var("KUBE_INFORMER_E2E_FIFO").as_deref() {
        Ok("in-order") => FifoMode::InOrder,
        Ok("delta" | "") | Err(_) => FifoMode::DeltaFifo,
        Ok(other) => panic!("KUBE_INFORMER_E2E_FIFO={other}: expected in-order or delta"),
    }
}

/// `InformerConfig::default()` in the suite's FIFO mode.
pub fn informer_config() -> InformerConfig {
    InformerConfig::default().fifo_mode(fifo_mode())
}

/// `FactoryConfig::default()` in the suite's FIFO mode.
pub fn factory_config() -> FactoryConfig {
    FactoryConfig::default().fifo_mode(fifo_mode())
}

/// How long any single step may take before the test is declared stuck. Generous: CI machines
/// are slow and share their cores with the apiserver and etcd.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(180);

/// How long an informer may take to reflect a change it should see.
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `fut`, failing the test instead of hanging forever.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no result in {STEP_TIMEOUT:?}, likely deadlocked"))
}

/// Polls `check` every 20 ms until it returns `Ok`; panics with its last complaint after
/// `timeout`.
pub async fn eventually(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<(), String>,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check() {
            Ok(()) => return,
            Err(why) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not reached in {timeout:?}, likely deadlocked or lost: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

pub fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("key".to_owned(), value.to_owned())])),
        ..ConfigMap::default()
    }
}

/// Creates namespace `ns` and returns the admin's config map API in it.
pub async fn config_maps_in(cluster: &crate::support::Cluster, ns: &str) -> Api<ConfigMap> {
    let admin = cluster.admin();
    create_namespace(&admin, ns).await;
    Api::namespaced(admin, ns)
}

pub async fn create_namespace(client: &Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    within(
        "create namespace",
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns),
    )
    .await
    .unwrap_or_else(|e| panic!("admin creates namespace {name}: {e}"));
}

/// The cache key of an object: `namespace/name`, or `name` when cluster-scoped.
pub fn key<K: Resource>(obj: &K) -> String {
    let m = obj.meta();
    let name = m.name.clone().unwrap_or_default();
    match &m.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    }
}

pub fn rv<K: Resource>(obj: &K) -> String {
    obj.meta().resource_version.clone().unwrap_or_default()
}

/// The value of the `step` label the tests use to tell versions apart.
pub fn step<K: Resource>(obj: &K) -> Option<String> {
    obj.meta().labels.as_ref()?.get("step").cloned()
}

/// `key → resourceVersion` of some objects: two such maps are equal exactly when two caches
/// hold the same versions of the same objects.
pub fn versions<'a, K: Resource + 'a>(
    objs: impl IntoIterator<Item = &'a K>,
) -> BTreeMap<String, String> {
    objs.into_iter().map(|o| (key(o), rv(o))).collect()
}

/// `key → resourceVersion` of what the server lists now (a consistent read).
pub async fn server_versions<K>(api: &Api<K>) -> BTreeMap<String, String>
where
    K: Resource + Clone + DeserializeOwned + 'static + Debug,
{
    let list = within("list from the server", api.list(&ListParams::default()))
        .await
        .expect("admin lists");
    versions(&list.items)
}

/// One notification, reduced to what the tests compare: keys, versions and the `step` label
/// of every object it carries.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Seen {
    Add {
        key: String,
        rv: String,
        step: Option<String>,
        initial: bool,
    },
    Update {
        key: String,
        old_rv: String,
        old_step: Option<String>,
        new_rv: String,
        new_step: Option<String>,
        /// The new object has a `deletionTimestamp` (a graceful deletion has begun).
        new_deleting: bool,
    },
    Delete {
        key: String,
        rv: String,
        step: Option<String>,
        tombstone: bool,
    },
}

impl Seen {
    pub fn of<K: Resource>(event: &InformerEvent<K>) -> Seen {
        match event {
            InformerEvent::Add {
                obj,
                is_in_initial_list,
            } => Seen::Add {
                key: key(&**obj),
                rv: rv(&**obj),
                step: step(&**obj),
                initial: *is_in_initial_list,
            },
            InformerEvent::Update { old, new } => Seen::Update {
                key: key(&**new),
                old_rv: rv(&**old),
                old_step: step(&**old),
                new_rv: rv(&**new),
                new_step: step(&**new),
                new_deleting: new.meta().deletion_timestamp.is_some(),
            },
            InformerEvent::Delete(d) => Seen::Delete {
                key: match d {
                    DeltaObject::DeletedFinalStateUnknown(t) => t.key.as_str().to_owned(),
                    DeltaObject::Object(o) => key(&**o),
                },
                rv: rv(&**d.object()),
                step: step(&**d.object()),
                tombstone: d.is_tombstone(),
            },
        }
    }

    pub fn key(&self) -> &str {
        match self {
            Seen::Add { key, .. } | Seen::Update { key, .. } | Seen::Delete { key, .. } => key,
        }
    }
}

/// Records every notification a handler receives, in order. Handlers run on the informer's
/// handler thread, not the test's, so the log is behind a std mutex.
pub struct Recorder<K> {
    events: Arc<Mutex<Vec<InformerEvent<K>>>>,
}

impl<K> Clone for Recorder<K> {
    fn clone(&self) -> Self {
        Self {
            events: self.events.clone(),
        }
    }
}

impl<K: Resource + Send + Sync + 'static> Recorder<K> {
    pub fn new() -> Self {
        Self {
            events: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A recorder registered on `informer`.
    pub fn attach(informer: &SharedIndexInformer<K>) -> Self {
        let me = Self::new();
        informer
            .add_event_handler(me.handler())
            .expect("the informer takes handlers until it stops");
        me
    }

    /// A handler appending to this recorder.
    pub fn handler(&self) -> ResourceEventHandlerFuncs<K> {
        let (a, u, d) = (
            self.events.clone(),
            self.events.clone(),
            self.events.clone(),
        );
        ResourceEventHandlerFuncs::new()
            .on_add(move |obj: &Arc<K>, initial| {
                a.lock().unwrap().push(InformerEvent::Add {
                    obj: obj.clone(),
                    is_in_initial_list: initial,
                })
            })
            .on_update(move |old: &Arc<K>, new: &Arc<K>| {
                u.lock().unwrap().push(InformerEvent::Update {
                    old: old.clone(),
                    new: new.clone(),
                })
            })
            .on_delete(move |obj: &DeltaObject<K>| {
                d.lock().unwrap().push(InformerEvent::Delete(obj.clone()))
            })
    }

    pub fn events(&self) -> Vec<InformerEvent<K>> {
        self.events.lock().unwrap().clone()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.events.lock().unwrap().iter().map(Seen::of).collect()
    }

    pub fn len(&self) -> usize {
        self.events.lock().unwrap().len()
    }

    /// Waits until at least `n` notifications have arrived and returns them all.
    pub async fn wait_for(&self, what: &str, n: usize) -> Vec<Seen> {
        eventually(what, CONVERGE_TIMEOUT, || {
            if self.len() >= n {
                Ok(())
            } else {
                Err(format!(
                    "{} of {n} notifications: {:#?}",
                    self.len(),
                    self.seen()
                ))
            }
        })
        .await;
        self.seen()
    }
}

/// Records what a watch-error handler is given: the message and the HTTP status, if any.
#[derive(Clone, Default)]
pub struct ErrorLog {
    errors: Arc<Mutex<Vec<LoggedError>>>,
}

#[derive(Debug, Clone)]
pub struct LoggedError {
    pub at: std::time::Instant,
    #[allow(dead_code, reason = "shown by Debug in failure messages")]
    pub message: String,
    pub status: Option<u16>,
    pub expired: bool,
    pub watch_list: bool,
}

impl ErrorLog {
    /// A log set as `informer`'s watch-error handler (before it starts).
    pub fn attach<K: Resource + Send + Sync + 'static>(informer: &SharedIndexInformer<K>) -> Self {
        let me = Self::default();
        informer
            .set_watch_error_handler(me.handler())
            .expect("the watch-error handler is set before start");
        me
    }

    pub fn handler(&self) -> Arc<dyn Fn(&kube_informer::reflector::Error) + Send + Sync> {
        let errors = self.errors.clone();
        Arc::new(move |e: &kube_informer::reflector::Error| {
            errors.lock().unwrap().push(LoggedError {
                at: std::time::Instant::now(),
                message: e.to_string(),
                status: e.list_watch_error().and_then(|l| l.status_code()),
                expired: e.is_expired(),
                watch_list: matches!(e, kube_informer::reflector::Error::WatchList(_)),
            });
        })
    }

    pub fn all(&self) -> Vec<LoggedError> {
        self.errors.lock().unwrap().clone()
    }
}

/// Creates `obj` (which should carry the label `step=created`), relabels it `step=updated`
/// with a merge patch, and deletes it. Returns the created and the updated object as the
/// server answered them.
pub async fn create_update_delete<K>(api: &Api<K>, obj: &K) -> (K, K)
where
    K: Resource + Clone + DeserializeOwned + 'static + serde::Serialize + Debug,
{
    let name = obj.meta().name.clone().expect("the object has a name");
    let created = within("create", api.create(&PostParams::default(), obj))
        .await
        .unwrap_or_else(|e| panic!("admin creates {name}: {e}"));
    let patch = serde_json::json!({ "metadata": { "labels": { "step": "updated" } } });
    let updated = within(
        "update",
        api.patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("admin updates {name}: {e}"));
    within(
        "delete",
        api.delete(&name, &kube::api::DeleteParams::default()),
    )
    .await
    .unwrap_or_else(|e| panic!("admin deletes {name}: {e}"));
    (created, updated)
}

/// Asserts that `seen` is exactly what an informer must deliver for [`create_update_delete`]:
/// the add of the created version, the update from it to the updated version (old and new
/// objects both right), and the delete of the last state (a real delete, not a tombstone).
///
/// With `graceful`, the server marks the object deleted (an update setting
/// `deletionTimestamp`) before removing it, as it does for pods, even unscheduled ones.
pub fn assert_create_update_delete_seen<K: Resource, L: Resource>(
    what: &str,
    seen: &[Seen],
    created: &K,
    updated: &L,
    graceful: bool,
) {
    let k = key(created);
    assert_eq!(seen.len(), 3 + usize::from(graceful), "{what}: {seen:#?}");
    assert_eq!(
        seen[0],
        Seen::Add {
            key: k.clone(),
            rv: rv(created),
            step: Some("created".to_owned()),
            initial: false,
        },
        "{what}: the add carries the created object"
    );
    assert_eq!(
        seen[1],
        Seen::Update {
            key: k.clone(),
            old_rv: rv(created),
            old_step: Some("created".to_owned()),
            new_rv: rv(updated),
            new_step: Some("updated".to_owned()),
            new_deleting: false,
        },
        "{what}: the update carries the created object as old and the updated one as new"
    );
    let num = |s: &str| {
        s.parse::<u64>()
            .expect("etcd resourceVersions are integers")
    };
    let mut last_rv = rv(updated);
    if graceful {
        let Seen::Update {
            key: marked,
            old_rv,
            new_rv,
            new_deleting,
            ..
        } = &seen[2]
        else {
            panic!("{what}: third notification is not the deletion mark: {seen:#?}");
        };
        assert_eq!(
            (marked, old_rv, *new_deleting),
            (&k, &last_rv, true),
            "{what}: {seen:#?}"
        );
        assert!(num(new_rv) > num(old_rv), "{what}: {seen:#?}");
        last_rv.clone_from(new_rv);
    }
    let Seen::Delete {
        key: deleted,
        rv: deleted_rv,
        step: deleted_step,
        tombstone,
    } = &seen[seen.len() - 1]
    else {
        panic!("{what}: last notification is not a delete: {seen:#?}");
    };
    assert_eq!(deleted, &k, "{what}");
    assert!(!tombstone, "{what}: a watched delete is not a tombstone");
    assert_eq!(
        deleted_step.as_deref(),
        Some("updated"),
        "{what}: the delete carries the last state"
    );
    // The watch's DELETED object carries the version of the deletion itself.
    assert!(
        num(deleted_rv) > num(&last_rv),
        "{what}: delete at {deleted_rv} does not follow the last change at {last_rv}"
    );
}
