//! Resource state and event history of the fake API server.
//!
//! One global resourceVersion counter (like etcd's revision) orders every write to every
//! resource. Each write appends an event to one bounded history shared by all resources;
//! compaction drops its oldest part. The state at an older RV is rebuilt by undoing newer
//! events, which is why each event keeps the object it replaced.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::query::ApiError;

/// What the server knows about one registered resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The type of a stored change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One write, as kept in the history.
#[derive(Debug)]
pub(crate) struct StoredEvent {
    pub rv: u64,
    pub resource: usize,
    pub kind: EventKind,
    /// The new object; for a deletion, the last state stamped with the deletion's RV (what
    /// the apiserver sends in a DELETED event).
    pub object: Arc<Value>,
    /// The object this write replaced (`None` for an addition).
    pub prev: Option<Arc<Value>>,
}

/// What a watcher's channel carries, in RV order.
#[derive(Debug, Clone)]
pub(crate) enum WatchMsg {
    Event(Arc<StoredEvent>),
    /// A bookmark at this RV: every event up to it has already been sent on the channel.
    Bookmark(u64),
}

struct Watcher {
    resource: usize,
    tx: mpsc::Sender<WatchMsg>,
    /// Set when the watcher is dropped for falling behind, so its stream ends abruptly rather
    /// than as a clean end of watch.
    kicked: Arc<AtomicBool>,
}

struct Resource {
    info: ResourceInfo,
    objects: BTreeMap<String, Arc<Value>>,
}

/// How a new watch starts.
pub(crate) enum WatchStart {
    /// Synthetic ADDED events for the current state, then live events.
    CurrentState,
    /// Events after this RV (replayed from history), then live events.
    After(u64),
    /// Live events only, after the current RV.
    Now,
}

/// A resource's objects at one RV, as `(key, object)` sorted by key.
pub(crate) type Snapshot = Vec<(String, Arc<Value>)>;

/// What a watch gets when it registers.
pub(crate) struct WatchRegistration {
    /// Objects of the current state to send as synthetic ADDED events.
    pub initial: Vec<Arc<Value>>,
    /// History events to replay before the channel's live events.
    pub replay: Vec<Arc<StoredEvent>>,
    /// The RV the initial state or replay brings the watcher to.
    pub rv: u64,
    pub rx: mpsc::Receiver<WatchMsg>,
    pub kicked: Arc<AtomicBool>,
}

pub(crate) struct Store {
    rv: u64,
    resources: Vec<Resource>,
    history: VecDeque<Arc<StoredEvent>>,
    /// Events with an RV above this are all in `history`: state and watches are available
    /// from any RV >= `floor`.
    floor: u64,
    history_limit: Option<usize>,
    watchers: Vec<Watcher>,
    pub watcher_capacity: usize,
}

/// The store key of an object: `namespace/name`, or `name` when cluster-scoped (client-go's
/// `MetaNamespaceKeyFunc`), which is also the order lists are served in.
pub(crate) fn key_of(obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

fn key_for(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

fn rv_of(obj: &Value) -> &str {
    obj["metadata"]["resourceVersion"].as_str().unwrap_or("")
}

fn with_rv(obj: &Value, rv: u64) -> Value {
    let mut obj = obj.clone();
    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
    obj
}

impl Store {
    pub fn new() -> Self {
        Self {
            rv: 0,
            resources: Vec::new(),
            history: VecDeque::new(),
            floor: 0,
            history_limit: None,
            watchers: Vec::new(),
            watcher_capacity: 1024,
        }
    }

    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    pub fn oldest_rv(&self) -> u64 {
        self.floor
    }

    /// Registers a resource (idempotent on group/version/plural) and returns its id.
    pub fn register(&mut self, info: ResourceInfo) -> usize {
        if let Some(i) = self.lookup(&info.group, &info.version, &info.plural) {
            return i;
        }
        self.resources.push(Resource {
            info,
            objects: BTreeMap::new(),
        });
        self.resources.len() - 1
    }

    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.resources.iter().position(|r| {
            r.info.group == group && r.info.version == version && r.info.plural == plural
        })
    }

    pub fn lookup_kind(&self, api_version: &str, kind: &str) -> Option<usize> {
        self.resources
            .iter()
            .position(|r| r.info.api_version() == api_version && r.info.kind == kind)
    }

    pub fn info(&self, res: usize) -> &ResourceInfo {
        &self.resources[res].info
    }

    fn not_found(&self, res: usize, name: &str) -> ApiError {
        let info = self.info(res);
        let what = if info.group.is_empty() {
            info.plural.clone()
        } else {
            format!("{}.{}", info.plural, info.group)
        };
        ApiError::not_found(&what, name)
    }

    /// Checks the namespace of a path against the resource's scope and the body's namespace,
    /// and returns the namespace the object lives in.
    fn resolve_namespace(
        &self,
        res: usize,
        path_ns: Option<&str>,
        obj: &mut Value,
    ) -> Result<Option<String>, ApiError> {
        if !self.info(res).namespaced {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("namespace");
            }
            return Ok(None);
        }
        let body_ns = obj["metadata"]["namespace"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let ns = match (path_ns, body_ns) {
            (Some(p), Some(b)) if p != b => {
                // apiserver `rest.EnsureObjectNamespaceMatchesRequestNamespace`.
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (Some(p), _) => p.to_string(),
            (None, Some(b)) => b,
            (None, None) => "default".to_string(),
        };
        obj["metadata"]["namespace"] = json!(ns);
        Ok(Some(ns))
    }

    fn prepare(&self, res: usize, obj: &mut Value) -> Result<(), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let info = self.info(res);
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
        Ok(())
    }

    pub fn create(
        &mut self,
        res: usize,
        path_ns: Option<&str>,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        self.prepare(res, &mut obj)?;
        let ns = self.resolve_namespace(res, path_ns, &mut obj)?;
        let name = match obj["metadata"]["name"].as_str().filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => match obj["metadata"]["generateName"].as_str() {
                Some(prefix) => format!("{prefix}{}", random_suffix()),
                None => {
                    return Err(ApiError::new(
                        422,
                        "Invalid",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        validate_name(&name)?;
        let key = key_for(ns.as_deref(), &name);
        if self.resources[res].objects.contains_key(&key) {
            let info = self.info(res);
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", info.plural),
            ));
        }
        let rv = self.rv + 1;
        let meta = &mut obj["metadata"];
        meta["name"] = json!(name);
        meta["resourceVersion"] = json!(rv.to_string());
        meta["uid"] = json!(random_uid());
        meta["creationTimestamp"] = json!(now_rfc3339());
        meta["generation"] = json!(1);
        let obj = Arc::new(obj);
        self.resources[res].objects.insert(key, obj.clone());
        self.publish(res, EventKind::Added, obj.clone(), None);
        Ok((*obj).clone())
    }

    pub fn update(
        &mut self,
        res: usize,
        path_ns: Option<&str>,
        path_name: Option<&str>,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        self.prepare(res, &mut obj)?;
        let ns = self.resolve_namespace(res, path_ns, &mut obj)?;
        let body_name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let name = match path_name {
            Some(p) if p != body_name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({p})"
                )));
            }
            _ => body_name,
        };
        let key = key_for(ns.as_deref(), &name);
        let Some(old) = self.resources[res].objects.get(&key).cloned() else {
            return Err(self.not_found(res, &name));
        };
        let sent_rv = rv_of(&obj);
        if !sent_rv.is_empty() && sent_rv != rv_of(&old) {
            // Optimistic concurrency (apiserver `storage.NewResourceVersionConflictsError`).
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    self.info(res).plural
                ),
            ));
        }
        let rv = self.rv + 1;
        // Like the apiserver's strategies, generation moves only when the desired state
        // (anything but metadata and status) changes.
        let content_changed = strip_meta_status(&obj) != strip_meta_status(&old);
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let meta = &mut obj["metadata"];
        meta["resourceVersion"] = json!(rv.to_string());
        meta["uid"] = old["metadata"]["uid"].clone();
        meta["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
        meta["generation"] = json!(generation + i64::from(content_changed));
        let obj = Arc::new(obj);
        self.resources[res].objects.insert(key, obj.clone());
        self.publish(res, EventKind::Modified, obj.clone(), Some(old));
        Ok((*obj).clone())
    }

    pub fn delete(
        &mut self,
        res: usize,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let key = key_for(namespace, name);
        let Some(old) = self.resources[res].objects.remove(&key) else {
            return Err(self.not_found(res, name));
        };
        let gone = Arc::new(with_rv(&old, self.rv + 1));
        self.publish(res, EventKind::Deleted, gone.clone(), Some(old));
        Ok((*gone).clone())
    }

    pub fn get(&self, res: usize, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        self.resources[res]
            .objects
            .get(&key_for(namespace, name))
            .map(|o| (**o).clone())
            .ok_or_else(|| self.not_found(res, name))
    }

    /// The objects of a resource at `at` (the current state when `None` or current), sorted by
    /// key.
    pub fn snapshot(&self, res: usize, at: Option<u64>) -> Result<(u64, Snapshot), ApiError> {
        let current = &self.resources[res].objects;
        let at = match at {
            None => {
                return Ok((
                    self.rv,
                    current
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ));
            }
            Some(at) if at == self.rv => {
                return Ok((
                    at,
                    current
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ));
            }
            Some(at) if at > self.rv => return Err(ApiError::too_large(at, self.rv)),
            Some(at) if at < self.floor => return Err(ApiError::too_old(at, self.floor)),
            Some(at) => at,
        };
        let mut state = current.clone();
        for ev in self.history.iter().rev().take_while(|e| e.rv > at) {
            if ev.resource != res {
                continue;
            }
            let key = key_of(&ev.object);
            match (&ev.kind, &ev.prev) {
                (EventKind::Added, _) => {
                    state.remove(&key);
                }
                (_, Some(prev)) => {
                    state.insert(key, prev.clone());
                }
                (_, None) => {}
            }
        }
        Ok((at, state.into_iter().collect()))
    }

    fn publish(
        &mut self,
        res: usize,
        kind: EventKind,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        self.rv += 1;
        let ev = Arc::new(StoredEvent {
            rv: self.rv,
            resource: res,
            kind,
            object,
            prev,
        });
        self.history.push_back(ev.clone());
        self.enforce_history_limit();
        self.send_to_watchers(res, WatchMsg::Event(ev));
    }

    fn send_to_watchers(&mut self, res: usize, msg: WatchMsg) {
        self.watchers.retain(|w| {
            if w.resource != res {
                return true;
            }
            match w.tx.try_send(msg.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // A watcher this far behind is cut off, as the watch cache does with
                    // `cacheWatcher`s whose buffer stays full; the client must re-watch.
                    w.kicked.store(true, Ordering::SeqCst);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
    }

    fn enforce_history_limit(&mut self) {
        if let Some(limit) = self.history_limit {
            while self.history.len() > limit {
                if let Some(ev) = self.history.pop_front() {
                    self.floor = ev.rv;
                }
            }
        }
    }

    pub fn compact(&mut self, rv: u64) {
        let rv = rv.min(self.rv);
        while self.history.front().is_some_and(|e| e.rv <= rv) {
            self.history.pop_front();
        }
        self.floor = self.floor.max(rv);
    }

    pub fn set_history_limit(&mut self, limit: Option<usize>) {
        self.history_limit = limit;
        self.enforce_history_limit();
    }

    /// Registers a watcher; the registration and the state or replay it starts from are taken
    /// under one lock, so the watcher sees every event after its start exactly once.
    pub fn watch(&mut self, res: usize, start: WatchStart) -> Result<WatchRegistration, ApiError> {
        let (initial, replay, rv) = match start {
            WatchStart::CurrentState => {
                let objects = self.resources[res].objects.values().cloned().collect();
                (objects, Vec::new(), self.rv)
            }
            WatchStart::Now => (Vec::new(), Vec::new(), self.rv),
            WatchStart::After(rv) => {
                if rv < self.floor {
                    return Err(ApiError::too_old(rv, self.floor));
                }
                if rv > self.rv {
                    return Err(ApiError::too_large(rv, self.rv));
                }
                let from = self.history.partition_point(|e| e.rv <= rv);
                let replay = self
                    .history
                    .range(from..)
                    .filter(|e| e.resource == res)
                    .cloned()
                    .collect();
                (Vec::new(), replay, self.rv)
            }
        };
        let (tx, rx) = mpsc::channel(self.watcher_capacity.max(1));
        let kicked = Arc::new(AtomicBool::new(false));
        self.watchers.push(Watcher {
            resource: res,
            tx,
            kicked: kicked.clone(),
        });
        Ok(WatchRegistration {
            initial,
            replay,
            rv,
            rx,
            kicked,
        })
    }

    /// Queues a bookmark at the current RV to every watcher.
    pub fn bookmark_all(&mut self) {
        let rv = self.rv;
        for res in 0..self.resources.len() {
            self.send_to_watchers(res, WatchMsg::Bookmark(rv));
        }
    }

    pub fn watcher_count(&mut self) -> usize {
        self.watchers.retain(|w| !w.tx.is_closed());
        self.watchers.len()
    }
}

fn strip_meta_status(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

fn validate_name(name: &str) -> Result<(), ApiError> {
    // Every resource forbids these path-breaking names (apiserver `path.IsValidPathSegmentName`).
    if name == "." || name == ".." || name.contains('/') || name.contains('%') {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "metadata.name: Invalid value: {name:?}: may not contain '/' or '%' or be '.' or '..'"
            ),
        ));
    }
    Ok(())
}

/// The alphabet apiserver's `names.SimpleNameGenerator` draws from.
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

fn random_uid() -> String {
    let v = fastrand::u128(..);
    let h = format!("{v:032x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// RFC 3339 UTC timestamp with second precision, as `metav1.Time` serialises.
pub(crate) fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm_store() -> (Store, usize) {
        let mut s = Store::new();
        let r = s.register(ResourceInfo {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespaced: true,
        });
        (s, r)
    }

    fn cm(name: &str, data: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns"}, "data": {"k": data}})
    }

    #[test]
    fn writes_get_increasing_global_resource_versions() {
        let (mut s, r) = cm_store();
        let a = s.create(r, None, cm("a", "1")).unwrap();
        let b = s.create(r, None, cm("b", "1")).unwrap();
        assert_eq!(rv_of(&a), "1");
        assert_eq!(rv_of(&b), "2");
        assert_eq!(a["metadata"]["generation"], 1);
        assert!(a["metadata"]["uid"].as_str().unwrap().len() == 36);
        let a2 = s.update(r, None, None, cm("a", "2")).unwrap();
        assert_eq!(rv_of(&a2), "3");
        assert_eq!(a2["metadata"]["generation"], 2);
        assert_eq!(a2["metadata"]["uid"], a["metadata"]["uid"]);
        let gone = s.delete(r, Some("ns"), "b").unwrap();
        assert_eq!(rv_of(&gone), "4");
        assert_eq!(s.current_rv(), 4);
    }

    #[test]
    fn update_with_stale_resource_version_conflicts() {
        let (mut s, r) = cm_store();
        let a = s.create(r, None, cm("a", "1")).unwrap();
        s.update(r, None, None, a.clone()).unwrap();
        assert_eq!(s.update(r, None, None, a).unwrap_err().reason, "Conflict");
    }

    #[test]
    fn snapshot_rebuilds_state_at_an_older_resource_version() {
        let (mut s, r) = cm_store();
        s.create(r, None, cm("a", "1")).unwrap(); // 1
        s.create(r, None, cm("b", "1")).unwrap(); // 2
        s.update(r, None, None, cm("a", "2")).unwrap(); // 3
        s.delete(r, Some("ns"), "b").unwrap(); // 4
        s.create(r, None, cm("c", "1")).unwrap(); // 5
        let (_, at2) = s.snapshot(r, Some(2)).unwrap();
        let names: Vec<_> = at2.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["ns/a", "ns/b"]);
        assert_eq!(at2[0].1["data"]["k"], "1");
        let (_, at4) = s.snapshot(r, Some(4)).unwrap();
        assert_eq!(at4.len(), 1);
        assert_eq!(at4[0].1["data"]["k"], "2");
        assert_eq!(s.snapshot(r, Some(9)).unwrap_err().code, 504);
    }

    #[test]
    fn compaction_expires_older_resource_versions() {
        let (mut s, r) = cm_store();
        for i in 0..5 {
            s.create(r, None, cm(&format!("o{i}"), "x")).unwrap();
        }
        s.compact(3);
        assert_eq!(s.snapshot(r, Some(2)).unwrap_err().code, 410);
        assert_eq!(s.snapshot(r, Some(3)).unwrap().1.len(), 3);
        assert!(s.watch(r, WatchStart::After(2)).is_err());
        assert_eq!(s.watch(r, WatchStart::After(3)).unwrap().replay.len(), 2);
    }

    #[test]
    fn history_limit_auto_compacts() {
        let (mut s, r) = cm_store();
        s.set_history_limit(Some(2));
        for i in 0..5 {
            s.create(r, None, cm(&format!("o{i}"), "x")).unwrap();
        }
        assert_eq!(s.oldest_rv(), 3);
        assert!(s.watch(r, WatchStart::After(2)).is_err());
    }

    #[test]
    fn slow_watcher_is_kicked_not_blocking_writers() {
        let (mut s, r) = cm_store();
        s.watcher_capacity = 2;
        let reg = s.watch(r, WatchStart::Now).unwrap();
        for i in 0..5 {
            s.create(r, None, cm(&format!("o{i}"), "x")).unwrap();
        }
        assert!(reg.kicked.load(Ordering::SeqCst));
        assert_eq!(s.watcher_count(), 0);
    }

    #[test]
    fn timestamp_is_rfc3339() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    }
}
