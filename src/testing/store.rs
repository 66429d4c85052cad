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

use super::query::{ApiError, FieldError, FieldErrorKind};

/// What the server knows about one registered resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    /// Whether `.../{name}/status` is served, and main-resource writes leave `.status` alone.
    pub status_subresource: bool,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The qualified resource of messages: `configmaps`, `deployments.apps`.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether an update without a `resourceVersion` is unconditional (the strategy's
    /// `AllowUnconditionalUpdate`): true for most built-in kinds, false for custom resources
    /// (apiextensions' `customResourceStrategy` and its status strategy) and for the built-in
    /// kinds whose strategies refuse it too: `Lease`, `CustomResourceDefinition`, `APIService`.
    pub fn allows_unconditional_update(&self) -> bool {
        const REFUSED: [(&str, &str); 3] = [
            ("coordination.k8s.io", "Lease"),
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
            ("apiregistration.k8s.io", "APIService"),
        ];
        !REFUSED.contains(&(self.group.as_str(), self.kind.as_str())) && self.is_builtin()
    }

    /// Whether this is a built-in kind (one the protobuf schema knows) rather than a custom
    /// resource served by apiextensions-apiserver.
    pub fn is_builtin(&self) -> bool {
        crate::protobuf::schema::BUILTIN
            .root(&self.api_version(), &self.kind)
            .is_some()
    }

    /// The qualified kind of `Invalid` messages: `ConfigMap`, `Deployment.apps`.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// Which part of an object a write targets: the resource itself or its `/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Main,
    Status,
}

/// Who writes, which decides the rules that apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writer {
    /// A client, over HTTP: the apiserver's strategies apply (a main-resource write leaves
    /// `.status` alone when the resource has a status subresource; an update that changes
    /// nothing is not written; a resourceVersion on create is refused).
    Api,
    /// The test, through the direct methods of `FakeApiServer`: `.status` is written as given
    /// and every update is written, so tests can seed any state and provoke events.
    Direct,
}

/// How one write is made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteMode {
    pub writer: Writer,
    pub part: Part,
    /// `dryRun=All`: validated and answered as if written, nothing stored or sent to watchers.
    pub dry_run: bool,
}

impl WriteMode {
    /// The direct methods' writes.
    pub const DIRECT: Self = Self {
        writer: Writer::Direct,
        part: Part::Main,
        dry_run: false,
    };

    pub fn api(part: Part, dry_run: bool) -> Self {
        Self {
            writer: Writer::Api,
            part,
            dry_run,
        }
    }
}

/// The `DeleteOptions` the fake server honours.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    pub dry_run: bool,
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

    /// Registers a resource (idempotent on group/version/plural) and returns its id; with
    /// `set_status`, an existing registration takes the new status subresource choice.
    pub fn register(&mut self, info: ResourceInfo, set_status: bool) -> usize {
        if let Some(i) = self.lookup(&info.group, &info.version, &info.plural) {
            if set_status {
                self.resources[i].info.status_subresource = info.status_subresource;
            }
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
        mode: WriteMode,
    ) -> Result<Value, ApiError> {
        self.prepare(res, &mut obj)?;
        let ns = self.resolve_namespace(res, path_ns, &mut obj)?;
        if mode.writer == Writer::Api && !rv_of(&obj).is_empty() {
            // etcd3 store `Create`: `storage.ErrResourceVersionSetOnCreate`, which reaches the
            // client as an internal error.
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = match obj["metadata"]["name"].as_str().filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => match obj["metadata"]["generateName"].as_str() {
                // `names.SimpleNameGenerator`: the prefix cut to leave room for the suffix within
                // 63 characters (`maxGeneratedNameLength`).
                Some(prefix) => {
                    let cut = prefix
                        .char_indices()
                        .nth(MAX_GENERATED_NAME_PREFIX)
                        .map_or(prefix.len(), |(at, _)| at);
                    format!("{}{}", &prefix[..cut], random_suffix())
                }
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
        let info = self.info(res);
        if mode.writer == Writer::Api
            && let Some(why) = invalid_name(info, &name)
        {
            return Err(ApiError::invalid(
                &info.qualified_kind(),
                &name,
                &[FieldError {
                    field: "metadata.name",
                    kind: FieldErrorKind::Invalid(Value::String(name.clone()), why),
                }],
            ));
        }
        let key = key_for(ns.as_deref(), &name);
        if self.resources[res].objects.contains_key(&key) {
            let info = self.info(res);
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", info.qualified_resource()),
            ));
        }
        if mode.writer == Writer::Api
            && self.info(res).status_subresource
            && let Some(o) = obj.as_object_mut()
        {
            // The strategies' `PrepareForCreate` of resources with a status subresource
            // clear the status: only the status endpoint writes it.
            o.remove("status");
        }
        let rv = self.rv + 1;
        let meta = &mut obj["metadata"];
        if let Some(m) = meta.as_object_mut() {
            // `rest.BeforeCreate`: a new object is never being deleted.
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
        }
        meta["name"] = json!(name);
        meta["resourceVersion"] = json!(rv.to_string());
        meta["uid"] = json!(random_uid());
        meta["creationTimestamp"] = json!(now_rfc3339());
        meta["generation"] = json!(1);
        if mode.dry_run {
            // A dry-run create never reaches storage, so it has no resourceVersion.
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
            return Ok(obj);
        }
        let obj = Arc::new(obj);
        self.resources[res].objects.insert(key, obj.clone());
        self.publish(res, EventKind::Added, obj.clone(), None);
        Ok((*obj).clone())
    }

    /// An update (`PUT`, and the last step of a patch) of the main resource or its status,
    /// with the generic registry's rules (`registry/generic/registry/store.go` `Update`,
    /// `rest.BeforeUpdate`, `ValidateObjectMetaAccessorUpdate`).
    pub fn update(
        &mut self,
        res: usize,
        path_ns: Option<&str>,
        path_name: Option<&str>,
        mut obj: Value,
        mode: WriteMode,
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
        if sent_rv.is_empty()
            && mode.writer == Writer::Api
            && !self.info(res).allows_unconditional_update()
        {
            // The generic registry's `Update` (`newResourceVersion == 0 &&
            // !AllowUnconditionalUpdate`), after the object was found, for a `PUT` and a patch
            // alike (a patch keeps the stored resourceVersion unless it removes it). Its
            // "qualified kind" is the qualified resource (`widgets.example.com`).
            return Err(ApiError::invalid(
                &self.info(res).qualified_resource(),
                &name,
                &[FieldError {
                    field: "metadata.resourceVersion",
                    kind: FieldErrorKind::InvalidGo(
                        "0x0",
                        "must be specified for an update".into(),
                    ),
                }],
            ));
        }
        if !sent_rv.is_empty() && sent_rv != rv_of(&old) {
            // Optimistic concurrency; an update without a resourceVersion is unconditional
            // (`AllowUnconditionalUpdate`).
            return Err(ApiError::conflict(
                &self.info(res).qualified_resource(),
                &name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let info = self.info(res).clone();
        let mut new = match mode.part {
            // The status strategies (e.g. apiextensions' `statusStrategy.PrepareForUpdate`):
            // everything but `.status` stays as stored.
            Part::Status => {
                let mut new = (*old).clone();
                set_or_remove(&mut new, "status", obj.get("status").cloned());
                new
            }
            Part::Main => {
                if mode.writer == Writer::Api && info.status_subresource {
                    // The main strategies' `PrepareForUpdate`: `.status` is the status
                    // endpoint's to write.
                    set_or_remove(&mut obj, "status", old.get("status").cloned());
                }
                obj
            }
        };
        carry_system_metadata(&info, &name, &mut new, &old)?;
        // Like the apiserver's strategies, generation moves only when the desired state
        // changes: anything but metadata, and but status where the status endpoint owns it.
        let spec_changed = desired_state(&new, info.status_subresource)
            != desired_state(&old, info.status_subresource);
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        new["metadata"]["generation"] = json!(generation + i64::from(spec_changed));
        new["metadata"]["resourceVersion"] = json!(rv_of(&old));

        if is_being_deleted(&old) && finalizers(&new).is_empty() {
            // `ShouldDeleteDuringUpdate`: the last finalizer of an object being deleted is
            // gone, so the update becomes the deletion. The client gets the object it sent
            // (as updated, never stored); watchers get DELETED with the last stored state.
            if !mode.dry_run {
                self.remove(res, &key);
            }
            return Ok(new);
        }
        if mode.writer == Writer::Api && new == *old {
            // etcd3 `GuaranteedUpdate` skips a write whose bytes equal the stored ones: no new
            // resourceVersion, no event.
            return Ok(new);
        }
        if mode.dry_run {
            return Ok(new);
        }
        let rv = self.rv + 1;
        new["metadata"]["resourceVersion"] = json!(rv.to_string());
        let new = Arc::new(new);
        self.resources[res].objects.insert(key, new.clone());
        self.publish(res, EventKind::Modified, new.clone(), Some(old));
        Ok((*new).clone())
    }

    /// A delete, with the generic registry's finalizer rules (`store.go` `Delete`,
    /// `updateForGracefulDeletionAndFinalizers`, `markAsDeleting`): an object with finalizers
    /// is only marked (`deletionTimestamp`, `deletionGracePeriodSeconds: 0`, generation + 1)
    /// and stays until an update removes its last finalizer; one already marked is returned
    /// unchanged. Returns the marked object, or the last state stamped with the deletion's RV.
    pub fn delete(
        &mut self,
        res: usize,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let key = key_for(namespace, name);
        let Some(old) = self.resources[res].objects.get(&key).cloned() else {
            return Err(self.not_found(res, name));
        };
        // `rest.BeforeDelete` words these with the kind, not the resource.
        let kind = self.info(res).kind.clone();
        if let Some(uid) = &opts.uid
            && old["metadata"]["uid"].as_str() != Some(uid.as_str())
        {
            return Err(ApiError::conflict(
                &kind,
                name,
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    old["metadata"]["uid"].as_str().unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && rv_of(&old) != rv
        {
            return Err(ApiError::conflict(
                &kind,
                name,
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                    rv_of(&old)
                ),
            ));
        }
        if !finalizers(&old).is_empty() {
            if is_being_deleted(&old) {
                // Marking again changes nothing, so nothing is written.
                return Ok((*old).clone());
            }
            let mut marked = (*old).clone();
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            let meta = &mut marked["metadata"];
            meta["deletionTimestamp"] = json!(now_rfc3339());
            meta["deletionGracePeriodSeconds"] = json!(0);
            meta["generation"] = json!(generation + 1);
            if opts.dry_run {
                return Ok(marked);
            }
            let rv = self.rv + 1;
            marked["metadata"]["resourceVersion"] = json!(rv.to_string());
            let marked = Arc::new(marked);
            self.resources[res].objects.insert(key, marked.clone());
            self.publish(res, EventKind::Modified, marked.clone(), Some(old));
            return Ok((*marked).clone());
        }
        if opts.dry_run {
            return Ok((*old).clone());
        }
        Ok(self.remove(res, &key))
    }

    /// Removes a stored object and publishes its deletion; returns the DELETED event's object.
    fn remove(&mut self, res: usize, key: &str) -> Value {
        let Some(old) = self.resources[res].objects.remove(key) else {
            return Value::Null;
        };
        let gone = Arc::new(with_rv(&old, self.rv + 1));
        self.publish(res, EventKind::Deleted, gone.clone(), Some(old));
        (*gone).clone()
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
        let bookmark = matches!(msg, WatchMsg::Bookmark(_));
        self.watchers.retain(|w| {
            if w.resource != res {
                return true;
            }
            match w.tx.try_send(msg.clone()) {
                Ok(()) => true,
                // A bookmark is only a hint: the watch cache adds it without blocking and
                // drops it when the watcher's buffer is full, never cutting the watcher off.
                Err(mpsc::error::TrySendError::Full(_)) if bookmark => true,
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

/// The part of an object whose changes bump `metadata.generation`: all but `metadata`, and
/// but `status` where the status subresource owns it (apiextensions `PrepareForUpdate`
/// compares everything but metadata; built-in strategies compare their spec).
fn desired_state(obj: &Value, status_subresource: bool) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        if status_subresource {
            m.remove("status");
        }
    }
    o
}

fn set_or_remove(obj: &mut Value, field: &str, value: Option<Value>) {
    if let Some(o) = obj.as_object_mut() {
        match value {
            Some(v) => {
                o.insert(field.to_string(), v);
            }
            None => {
                o.remove(field);
            }
        }
    }
}

fn finalizers(obj: &Value) -> Vec<&str> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn is_being_deleted(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

/// `rest.BeforeUpdate` and `ValidateObjectMetaAccessorUpdate`: what an update may not change
/// in metadata is carried over from the stored object or refused as `Invalid`.
fn carry_system_metadata(
    info: &ResourceInfo,
    name: &str,
    new: &mut Value,
    old: &Value,
) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    let (om, nm) = (&old["metadata"], &mut new["metadata"]);
    if nm["uid"].as_str().is_none_or(str::is_empty) {
        nm["uid"] = om["uid"].clone();
    } else if nm["uid"] != om["uid"] {
        errors.push(immutable("metadata.uid", &nm["uid"]));
    }
    nm["creationTimestamp"] = om["creationTimestamp"].clone();
    if !om["deletionTimestamp"].is_null() {
        // An update can never remove or change a deletion timestamp.
        nm["deletionTimestamp"] = om["deletionTimestamp"].clone();
    } else if !nm["deletionTimestamp"].is_null() {
        errors.push(immutable(
            "metadata.deletionTimestamp",
            &nm["deletionTimestamp"],
        ));
    }
    if !om["deletionGracePeriodSeconds"].is_null() && nm["deletionGracePeriodSeconds"].is_null() {
        nm["deletionGracePeriodSeconds"] = om["deletionGracePeriodSeconds"].clone();
    } else if nm["deletionGracePeriodSeconds"] != om["deletionGracePeriodSeconds"] {
        errors.push(immutable(
            "metadata.deletionGracePeriodSeconds",
            &nm["deletionGracePeriodSeconds"],
        ));
    }
    if let Some(m) = nm.as_object_mut() {
        // Absent stays absent rather than becoming `null`.
        m.retain(|k, v| {
            !(v.is_null()
                && matches!(
                    k.as_str(),
                    "uid"
                        | "creationTimestamp"
                        | "deletionTimestamp"
                        | "deletionGracePeriodSeconds"
                ))
        });
    }
    if is_being_deleted(old) {
        let before = finalizers(old);
        let mut added: Vec<&str> = finalizers(new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        added.sort_unstable();
        added.dedup();
        if !added.is_empty() {
            let listed: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
            errors.push(FieldError {
                field: "metadata.finalizers",
                kind: FieldErrorKind::Forbidden(format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    listed.join(", ")
                )),
            });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&info.qualified_kind(), name, &errors))
    }
}

fn immutable(field: &'static str, value: &Value) -> FieldError {
    FieldError {
        field,
        kind: FieldErrorKind::Invalid(value.clone(), "field is immutable".into()),
    }
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

/// `names.SimpleNameGenerator`'s `maxGeneratedNameLength` (63 - 5): a `generateName` prefix is
/// cut to this.
const MAX_GENERATED_NAME_PREFIX: usize = 58;

/// Why `name` is not a valid name of `info`'s kind: a lowercase RFC 1123 subdomain for most
/// kinds (apimachinery `NameIsDNSSubdomain`), an RFC 1123 label for a Namespace
/// (`ValidateNamespaceName`), an RFC 1035 label for a Service (`ValidateServiceName`); RBAC's
/// take any path segment (checked for every kind already).
fn invalid_name(info: &ResourceInfo, name: &str) -> Option<String> {
    match (info.group.as_str(), info.kind.as_str()) {
        ("rbac.authorization.k8s.io", _) => None,
        ("", "Namespace") => not_a_dns_label(name, false),
        ("", "Service") => not_a_dns_label(name, true),
        _ => not_a_dns_subdomain(name),
    }
}

/// A lowercase label: alphanumerics and `-`, starting and ending with an alphanumeric.
fn is_label(l: &str) -> bool {
    let b = l.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Why `name` is not an RFC 1123 label (apimachinery `IsDNS1123Label`), or with `rfc1035` an
/// RFC 1035 label (`IsDNS1035Label`: it starts with a letter).
fn not_a_dns_label(name: &str, rfc1035: bool) -> Option<String> {
    if name.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    if rfc1035 {
        (!(is_label(name) && name.as_bytes()[0].is_ascii_lowercase())).then(|| {
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start \
             with an alphabetic character, and end with an alphanumeric character (e.g. \
             'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
                .to_owned()
        })
    } else {
        (!is_label(name)).then(|| {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
             '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or \
             '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                .to_owned()
        })
    }
}

/// Why `name` is not a lowercase RFC 1123 subdomain (apimachinery `IsDNS1123Subdomain`).
fn not_a_dns_subdomain(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    (!name.split('.').all(is_label)).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' \
         or '.', and must start and end with an alphanumeric character (e.g. 'example.com', \
         regex used for validation is \
         '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            .to_owned()
    })
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

    const D: WriteMode = WriteMode::DIRECT;

    fn cm_store() -> (Store, usize) {
        let mut s = Store::new();
        let r = s.register(
            ResourceInfo {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
                plural: "configmaps".into(),
                namespaced: true,
                status_subresource: false,
            },
            false,
        );
        (s, r)
    }

    fn cm(name: &str, data: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns"}, "data": {"k": data}})
    }

    #[test]
    fn writes_get_increasing_global_resource_versions() {
        let (mut s, r) = cm_store();
        let a = s.create(r, None, cm("a", "1"), D).unwrap();
        let b = s.create(r, None, cm("b", "1"), D).unwrap();
        assert_eq!(rv_of(&a), "1");
        assert_eq!(rv_of(&b), "2");
        assert_eq!(a["metadata"]["generation"], 1);
        assert!(a["metadata"]["uid"].as_str().unwrap().len() == 36);
        let a2 = s.update(r, None, None, cm("a", "2"), D).unwrap();
        assert_eq!(rv_of(&a2), "3");
        assert_eq!(a2["metadata"]["generation"], 2);
        assert_eq!(a2["metadata"]["uid"], a["metadata"]["uid"]);
        let gone = s
            .delete(r, Some("ns"), "b", &DeleteOptions::default())
            .unwrap();
        assert_eq!(rv_of(&gone), "4");
        assert_eq!(s.current_rv(), 4);
    }

    #[test]
    fn update_with_stale_resource_version_conflicts() {
        let (mut s, r) = cm_store();
        let a = s.create(r, None, cm("a", "1"), D).unwrap();
        s.update(r, None, None, a.clone(), D).unwrap();
        assert_eq!(
            s.update(r, None, None, a, D).unwrap_err().reason,
            "Conflict"
        );
    }

    #[test]
    fn snapshot_rebuilds_state_at_an_older_resource_version() {
        let (mut s, r) = cm_store();
        s.create(r, None, cm("a", "1"), D).unwrap(); // 1
        s.create(r, None, cm("b", "1"), D).unwrap(); // 2
        s.update(r, None, None, cm("a", "2"), D).unwrap(); // 3
        s.delete(r, Some("ns"), "b", &DeleteOptions::default())
            .unwrap(); // 4
        s.create(r, None, cm("c", "1"), D).unwrap(); // 5
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
            s.create(r, None, cm(&format!("o{i}"), "x"), D).unwrap();
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
            s.create(r, None, cm(&format!("o{i}"), "x"), D).unwrap();
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
            s.create(r, None, cm(&format!("o{i}"), "x"), D).unwrap();
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
