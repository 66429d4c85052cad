//! Field ownership (`metadata.managedFields`) for server-side apply, as structured-merge-diff
//! tracks it (`k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager`,
//! `sigs.k8s.io/structured-merge-diff/merge`), for objects whose applied fields are maps and
//! scalars only.
//!
//! Each manager entry (a manager name and an operation, `Apply` or `Update`) owns a set of leaf
//! field paths. An apply takes ownership of the fields it sets and conflicts (409) where another
//! entry owns one of them with a different value, unless forced; fields it applied before and
//! no longer applies are removed from the object when nobody else owns them. An update (any
//! other write) takes ownership of the fields it changes away from every other entry, and
//! fields it removes are owned by nobody.
//!
//! The supported subset, refused with `415` outside it ([`check_supported`]): no lists (their
//! merge and ownership depend on each field's `listType` / patch strategy, schema the fake
//! server does not have), no `null` values in an apply configuration, no `$`-directives.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::query::{ApiError, Cause};
use super::store::now_rfc3339;

/// A field path, one map key per segment (`["spec", "holderIdentity"]`).
type Path = Vec<String>;

/// The operation of a managed-fields entry.
const APPLY: &str = "Apply";
const UPDATE: &str = "Update";

/// Fields the server owns: never part of any manager's set (`fieldmanager`'s stripped
/// metadata, and the identity of the object).
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// What a patch body of the strategic or apply type may hold for the fake server: maps and
/// scalars (and, outside apply configurations, `null` to delete).
pub(crate) fn check_supported(body: &Value, what: &str, allow_null: bool) -> Result<(), ApiError> {
    fn walk(v: &Value, path: &mut Vec<String>, allow_null: bool) -> Result<(), String> {
        match v {
            Value::Array(_) => Err(format!(
                "a list at .{} (list merge and ownership depend on per-field schema the fake server does not have)",
                path.join(".")
            )),
            Value::Null if !allow_null => Err(format!("a null value at .{}", path.join("."))),
            Value::Object(m) => {
                for (k, v) in m {
                    if k.starts_with('$') {
                        return Err(format!("the directive {k:?} at .{}", path.join(".")));
                    }
                    path.push(k.clone());
                    walk(v, path, allow_null)?;
                    path.pop();
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    walk(body, &mut Vec::new(), allow_null).map_err(|why| {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the fake API server supports {what} of maps and scalars only; this body has {why}"
            ),
        )
    })
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    fields: BTreeSet<Path>,
}

impl Entry {
    fn parse(v: &Value) -> Option<Self> {
        let mut fields = BTreeSet::new();
        decode_fields(&v["fieldsV1"], &mut Vec::new(), &mut fields);
        Some(Self {
            manager: v["manager"].as_str()?.to_string(),
            operation: v["operation"].as_str()?.to_string(),
            api_version: v["apiVersion"].as_str().unwrap_or_default().to_string(),
            time: v["time"].as_str().unwrap_or_default().to_string(),
            fields,
        })
    }

    fn to_json(&self) -> Value {
        json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode_fields(&self.fields),
        })
    }

    fn is(&self, manager: &str, operation: &str) -> bool {
        self.manager == manager && self.operation == operation
    }

    /// Whether this entry owns `p`, a path inside `p`, or a map `p` is inside.
    fn overlaps(&self, p: &[String]) -> bool {
        self.fields
            .iter()
            .any(|f| f.starts_with(p) || p.starts_with(f))
    }

    fn drop_overlapping(&mut self, p: &[String]) {
        self.fields
            .retain(|f| !(f.starts_with(p) || p.starts_with(f)));
    }
}

/// `FieldsV1`: `{"f:spec": {"f:holderIdentity": {}}}`.
fn encode_fields(fields: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut node = &mut root;
        for seg in path {
            node = node
                .entry(format!("f:{seg}"))
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("FieldsV1 nodes are always objects");
        }
    }
    Value::Object(root)
}

fn decode_fields(v: &Value, path: &mut Vec<String>, out: &mut BTreeSet<Path>) {
    let Some(m) = v.as_object() else { return };
    let children: Vec<_> = m.iter().filter(|(k, _)| k.as_str() != ".").collect();
    if children.is_empty() {
        if !path.is_empty() {
            out.insert(path.clone());
        }
        return;
    }
    for (k, child) in children {
        // `f:name` is a field; other prefixes (`k:`, `v:`, `i:`, list items written by another
        // server) are kept whole as one segment.
        path.push(k.strip_prefix("f:").unwrap_or(k).to_string());
        decode_fields(child, path, out);
        path.pop();
    }
}

/// The leaf paths of an object that managers can own: scalars, lists (atomic), `null`s and
/// empty maps; never server metadata, `apiVersion`/`kind`, nor `.status` where the status
/// subresource owns it.
fn leaves(obj: &Value, ignore_status: bool) -> BTreeSet<Path> {
    fn walk(v: &Value, path: &mut Vec<String>, out: &mut BTreeSet<Path>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    path.push(k.clone());
                    walk(child, path, out);
                    path.pop();
                }
            }
            _ => {
                out.insert(path.clone());
            }
        }
    }
    let mut out = BTreeSet::new();
    let Some(top) = obj.as_object() else {
        return out;
    };
    for (k, v) in top {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" if ignore_status => {}
            "metadata" => {
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    if !SERVER_METADATA.contains(&mk.as_str()) {
                        walk(mv, &mut vec![k.clone(), mk.clone()], &mut out);
                    }
                }
            }
            _ => walk(v, &mut vec![k.clone()], &mut out),
        }
    }
    out
}

fn get<'a>(obj: &'a Value, p: &[String]) -> Option<&'a Value> {
    p.iter().try_fold(obj, |v, seg| v.as_object()?.get(seg))
}

/// Sets `p` to `value`, making maps on the way (replacing a non-map in the way).
fn set(obj: &mut Value, p: &[String], value: Value) {
    let Some((last, parents)) = p.split_last() else {
        return;
    };
    let mut node = obj;
    for seg in parents {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        node = node
            .as_object_mut()
            .expect("made an object above")
            .entry(seg.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !node.is_object() {
        *node = Value::Object(Map::new());
    }
    node.as_object_mut()
        .expect("made an object above")
        .insert(last.clone(), value);
}

/// Removes `p`, and the maps it leaves empty (below the top level).
fn remove(obj: &mut Value, p: &[String]) {
    fn go(node: &mut Value, p: &[String]) -> bool {
        let Some(m) = node.as_object_mut() else {
            return false;
        };
        match p {
            [] => false,
            [last] => m.remove(last).is_some(),
            [first, rest @ ..] => {
                let Some(child) = m.get_mut(first) else {
                    return false;
                };
                let removed = go(child, rest);
                if removed && child.as_object().is_some_and(Map::is_empty) {
                    m.remove(first);
                }
                removed
            }
        }
    }
    go(obj, p);
}

fn entries(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| a.iter().filter_map(Entry::parse).collect())
        .unwrap_or_default()
}

fn store_entries(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    if !obj["metadata"].is_object() {
        obj["metadata"] = Value::Object(Map::new());
    }
    let meta = obj["metadata"]
        .as_object_mut()
        .expect("made an object above");
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::to_json).collect()),
        );
    }
}

fn dotted(p: &[String]) -> String {
    format!(".{}", p.join("."))
}

/// Server-side apply of `config` by `manager` to `live` (`None`: the object does not exist and
/// the apply creates it). Returns the object to store, `managedFields` included.
///
/// # Errors
///
/// `400` for a configuration that is not an object or lacks `apiVersion`/`kind`; `415` outside
/// the supported subset; `409 Conflict` (with one `FieldManagerConflict` cause per field) when
/// another manager owns an applied field with a different value and `force` is off.
pub(crate) fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    ignore_status: bool,
) -> Result<Value, ApiError> {
    if !config.is_object() {
        return Err(ApiError::bad_request(
            "an apply configuration must be a JSON or YAML object",
        ));
    }
    for field in ["apiVersion", "kind"] {
        if config[field].as_str().is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!(
                "{field} must be set in an apply configuration"
            )));
        }
    }
    check_supported(config, "server-side apply", false)?;
    let api_version = config["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let applied = leaves(config, ignore_status);
    let empty = json!({});
    let base = live.unwrap_or(&empty);
    let mut managers = entries(base);

    let mut conflicts: Vec<(String, String, Path)> = Vec::new();
    for p in &applied {
        let unchanged = get(base, p) == get(config, p);
        for e in managers.iter().filter(|e| !e.is(manager, APPLY)) {
            if e.overlaps(p) && !unchanged {
                conflicts.push((e.manager.clone(), e.api_version.clone(), p.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let causes: Vec<Cause> = conflicts
            .iter()
            .map(|(m, v, p)| Cause {
                reason: "FieldManagerConflict",
                message: format!("conflict with {m:?} using {v}"),
                field: Some(dotted(p)),
            })
            .collect();
        let listed: Vec<String> = conflicts
            .iter()
            .map(|(m, v, p)| format!("conflict with {m:?} using {v}: {}", dotted(p)))
            .collect();
        let mut e = ApiError::new(
            409,
            "Conflict",
            format!(
                "Apply failed with {} conflict{}: {}",
                conflicts.len(),
                if conflicts.len() == 1 { "" } else { "s" },
                listed.join("\n")
            ),
        );
        e.causes = causes;
        return Err(e);
    }

    let mut out = base.clone();
    for field in ["apiVersion", "kind"] {
        out[field] = config[field].clone();
    }
    for field in ["name", "namespace"] {
        if let Some(v) = config["metadata"].get(field) {
            out["metadata"][field] = v.clone();
        }
    }
    for p in &applied {
        if let Some(v) = get(config, p) {
            set(&mut out, p, v.clone());
        }
    }
    if force {
        for (_, _, p) in &conflicts {
            for e in managers.iter_mut().filter(|e| !e.is(manager, APPLY)) {
                e.drop_overlapping(p);
            }
        }
    }
    let previous = managers
        .iter()
        .position(|e| e.is(manager, APPLY))
        .map(|i| managers.remove(i));
    // Fields this manager applied before and no longer applies: gone, unless another entry
    // still owns them.
    for p in previous.iter().flat_map(|e| e.fields.difference(&applied)) {
        if !managers.iter().any(|e| e.overlaps(p)) {
            remove(&mut out, p);
        }
    }
    let time = match &previous {
        Some(prev) if prev.fields == applied && prev.api_version == api_version => {
            prev.time.clone()
        }
        _ => now_rfc3339(),
    };
    managers.push(Entry {
        manager: manager.to_string(),
        operation: APPLY.into(),
        api_version,
        time,
        fields: applied,
    });
    store_entries(&mut out, managers);
    Ok(out)
}

/// Records a non-apply write (`PUT`, JSON / merge / strategic patch) by `manager` of an object
/// that has managed fields: the updater takes the fields it changed from every other entry,
/// and removed fields are owned by nobody. Objects without managed fields are left as they are
/// (the fake server starts tracking an object at its first apply), as are writes that change
/// nothing. The request's own `metadata.managedFields` is not honoured on tracked objects.
pub(crate) fn record_update(
    old: &Value,
    mut new: Value,
    manager: &str,
    ignore_status: bool,
) -> Value {
    let mut managers = entries(old);
    // Not an object, or a `metadata` that is not one (`{"metadata":"x"}` merged in): the
    // write is refused or its metadata replaced later; nothing here may index into it.
    if managers.is_empty() || !new.is_object() || !new["metadata"].is_object() {
        return new;
    }
    let before = leaves(old, ignore_status);
    let after = leaves(&new, ignore_status);
    // A map emptied by the write (a release of every field under `spec`) is not a field the
    // updater now sets.
    let is_empty_map = |v: Option<&Value>| v.and_then(Value::as_object).is_some_and(Map::is_empty);
    let changed: Vec<&Path> = after
        .iter()
        .filter(|p| get(old, p) != get(&new, p) && !is_empty_map(get(&new, p)))
        .collect();
    let removed: Vec<&Path> = before.difference(&after).collect();
    if changed.is_empty() && removed.is_empty() {
        // Verbatim, so that a write that changes nothing stays equal to the stored object and
        // is not written (a rebuild would normalise entries the server did not write).
        new["metadata"]["managedFields"] = old["metadata"]["managedFields"].clone();
        return new;
    }
    for e in &mut managers {
        for p in changed.iter().chain(&removed) {
            e.drop_overlapping(p);
        }
    }
    if !changed.is_empty() {
        let api_version = new["apiVersion"].as_str().unwrap_or_default().to_string();
        let i = match managers.iter().position(|e| e.is(manager, UPDATE)) {
            Some(i) => i,
            None => {
                managers.push(Entry {
                    manager: manager.to_string(),
                    operation: UPDATE.into(),
                    api_version: api_version.clone(),
                    time: String::new(),
                    fields: BTreeSet::new(),
                });
                managers.len() - 1
            }
        };
        let e = &mut managers[i];
        e.fields.extend(changed.into_iter().cloned());
        e.time = now_rfc3339();
        e.api_version = api_version;
    }
    store_entries(&mut new, managers);
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease_apply(holder: &str) -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 2},
        })
    }

    fn lease() -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default", "uid": "u", "resourceVersion": "5"},
            "spec": {},
        })
    }

    fn owners(obj: &Value) -> Vec<(String, String, Vec<String>)> {
        entries(obj)
            .into_iter()
            .map(|e| {
                let fields = e.fields.iter().map(|p| dotted(p)).collect();
                (e.manager, e.operation, fields)
            })
            .collect()
    }

    #[test]
    fn apply_owns_the_applied_leaves_in_fields_v1() {
        let out = apply(Some(&lease()), &lease_apply("a"), "m-a", false, false).unwrap();
        assert_eq!(out["spec"]["holderIdentity"], "a");
        assert_eq!(out["metadata"]["uid"], "u");
        let mf = &out["metadata"]["managedFields"][0];
        assert_eq!(mf["manager"], "m-a");
        assert_eq!(mf["operation"], "Apply");
        assert_eq!(mf["fieldsType"], "FieldsV1");
        assert_eq!(
            mf["fieldsV1"],
            json!({"f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}}})
        );
    }

    #[test]
    fn a_different_value_for_a_field_another_manager_owns_conflicts_unless_forced() {
        let held = apply(Some(&lease()), &lease_apply("a"), "m-a", false, false).unwrap();
        let e = apply(Some(&held), &lease_apply("b"), "m-b", false, false).unwrap_err();
        assert_eq!((e.code, e.reason), (409, "Conflict"));
        assert!(
            e.message.contains(
                "conflict with \"m-a\" using coordination.k8s.io/v1: .spec.holderIdentity"
            ),
            "{}",
            e.message
        );
        assert_eq!(
            e.causes.len(),
            1,
            "the equal leaseDurationSeconds is shared, not a conflict"
        );
        assert_eq!(e.causes[0].field.as_deref(), Some(".spec.holderIdentity"));

        // The same value is no conflict: both own it.
        let shared = apply(Some(&held), &lease_apply("a"), "m-b", false, false).unwrap();
        assert_eq!(owners(&shared).len(), 2);

        let forced = apply(Some(&held), &lease_apply("b"), "m-b", true, false).unwrap();
        assert_eq!(forced["spec"]["holderIdentity"], "b");
        assert_eq!(
            owners(&forced),
            vec![
                (
                    "m-a".into(),
                    "Apply".into(),
                    vec![".spec.leaseDurationSeconds".into()]
                ),
                (
                    "m-b".into(),
                    "Apply".into(),
                    vec![
                        ".spec.holderIdentity".into(),
                        ".spec.leaseDurationSeconds".into()
                    ]
                ),
            ]
        );
    }

    #[test]
    fn fields_no_longer_applied_are_removed_unless_someone_else_owns_them() {
        let held = apply(Some(&lease()), &lease_apply("a"), "m-a", false, false).unwrap();
        let mut less = lease_apply("a");
        less["spec"]
            .as_object_mut()
            .unwrap()
            .remove("leaseDurationSeconds");
        let out = apply(Some(&held), &less, "m-a", false, false).unwrap();
        assert_eq!(out["spec"], json!({"holderIdentity": "a"}));

        let shared = apply(Some(&held), &lease_apply("a"), "m-b", false, false).unwrap();
        let out = apply(Some(&shared), &less, "m-a", false, false).unwrap();
        assert_eq!(out["spec"]["leaseDurationSeconds"], 2, "m-b still owns it");
    }

    #[test]
    fn an_update_takes_the_fields_it_changes_and_removed_fields_lose_their_owners() {
        let held = apply(Some(&lease()), &lease_apply("a"), "m-a", false, false).unwrap();
        let mut renewed = held.clone();
        renewed["spec"]["leaseDurationSeconds"] = json!(3);
        let out = record_update(&held, renewed, "m-b", false);
        assert_eq!(
            owners(&out),
            vec![
                (
                    "m-a".into(),
                    "Apply".into(),
                    vec![".spec.holderIdentity".into()]
                ),
                (
                    "m-b".into(),
                    "Update".into(),
                    vec![".spec.leaseDurationSeconds".into()]
                ),
            ]
        );
        // After a removal nobody owns the field, so a new holder's apply does not conflict.
        let mut released = out.clone();
        released["spec"] = json!({});
        let out = record_update(&out, released, "m-b", false);
        assert!(out["metadata"].get("managedFields").is_none(), "{out}");
        apply(Some(&out), &lease_apply("c"), "m-c", false, false).unwrap();
    }

    #[test]
    fn untracked_objects_and_no_op_writes_keep_their_managed_fields() {
        let mut changed = lease();
        changed["spec"]["holderIdentity"] = json!("x");
        let out = record_update(&lease(), changed.clone(), "m", false);
        assert_eq!(out, changed, "an object never applied is not tracked");

        let held = apply(Some(&lease()), &lease_apply("a"), "m-a", false, false).unwrap();
        let same = record_update(&held, held.clone(), "m-b", false);
        assert_eq!(same, held);
        let again = apply(Some(&held), &lease_apply("a"), "m-a", false, false).unwrap();
        assert_eq!(
            again, held,
            "a no-op apply changes nothing, timestamps included"
        );
    }

    #[test]
    fn apply_creates_ignores_status_where_the_subresource_owns_it_and_refuses_the_rest() {
        let created = apply(None, &lease_apply("a"), "m", false, false).unwrap();
        assert_eq!(created["metadata"]["name"], "l");
        let mut with_status = lease_apply("a");
        with_status["status"] = json!({"x": 1});
        let out = apply(None, &with_status, "m", false, true).unwrap();
        assert_eq!(
            entries(&out)[0]
                .fields
                .iter()
                .map(|p| dotted(p))
                .collect::<Vec<_>>(),
            vec![".spec.holderIdentity", ".spec.leaseDurationSeconds"]
        );
        for (body, code) in [
            (json!([1]), 400),
            (json!({"kind": "Lease"}), 400),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"l": [1]}}),
                415,
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": null}}),
                415,
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"$patch": "x"}}),
                415,
            ),
        ] {
            let e = apply(None, &body, "m", false, false).unwrap_err();
            assert_eq!(e.code, code, "{body}: {}", e.message);
        }
        let e = check_supported(&json!({"spec": {"l": [1]}}), "strategic merge patch", true)
            .unwrap_err();
        assert!(e.message.contains("a list at .spec.l"), "{}", e.message);
        check_supported(&json!({"spec": {"k": null}}), "strategic merge patch", true).unwrap();
    }
}
