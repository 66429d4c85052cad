//! The fake API server's write path as a controller uses it, through kube's own client: PATCH
//! (JSON merge patch, JSON patch, strategic merge patch and server-side apply of maps and
//! scalars), `/status` subresources, finalizers and deletion,
//! optimistic concurrency, dry runs. Each rule is kube-apiserver's (the comments name where).
#![cfg(feature = "testing")]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec, PodStatus};
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use kube::{CustomResource, Resource};
use kube_informer::testing::{FakeApiServer, StatusSubresource, Verb};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

const DEADLOCK: &str = "likely deadlocked";

/// A custom resource with a status, as a controller's own type would be.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub struct WidgetSpec {
    size: u32,
}

/// The status a controller reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct WidgetStatus {
    ready: bool,
}

fn cm(name: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.namespace = Some("default".into());
    c.data = Some([("k".to_string(), "v".to_string())].into());
    c
}

fn widget(name: &str, size: u32) -> Widget {
    let mut w = Widget::new(name, WidgetSpec { size });
    w.metadata.namespace = Some("default".into());
    w
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "app".into(),
                image: Some("app:1".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        }),
    }
}

async fn server() -> (FakeApiServer, Api<ConfigMap>) {
    let s = FakeApiServer::start_with_core().await.unwrap();
    let api = Api::namespaced(s.client(), "default");
    (s, api)
}

/// The code, reason and message of an API error response.
#[derive(Debug)]
struct ApiErr {
    code: u16,
    reason: String,
    message: String,
}

fn api_err<T: std::fmt::Debug>(r: kube::Result<T>) -> ApiErr {
    match r {
        Err(kube::Error::Api(s)) => ApiErr {
            code: s.code,
            reason: s.reason.clone(),
            message: s.message.clone(),
        },
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn rv<K: Resource>(obj: &K) -> String {
    obj.meta().resource_version.clone().unwrap_or_default()
}

fn generation<K: Resource>(obj: &K) -> i64 {
    obj.meta().generation.unwrap_or_default()
}

fn merge(v: serde_json::Value) -> Patch<serde_json::Value> {
    Patch::Merge(v)
}

fn json_patch(v: serde_json::Value) -> Patch<serde_json::Value> {
    Patch::Json(serde_json::from_value(v).unwrap())
}

fn pp() -> PatchParams {
    PatchParams::default()
}

/// Watch events from `rv` as `TYPE name` strings, failing rather than hanging.
async fn events<K>(api: &Api<K>, from: &str, n: usize) -> Vec<String>
where
    K: Resource + Clone + std::fmt::Debug + for<'de> Deserialize<'de> + Send + 'static,
{
    let stream = api.watch(&WatchParams::default(), from).await.unwrap();
    let evs: Vec<WatchEvent<K>> =
        tokio::time::timeout(Duration::from_secs(10), stream.take(n).try_collect())
            .await
            .expect(DEADLOCK)
            .unwrap();
    evs.iter()
        .map(|e| match e {
            WatchEvent::Added(o) => format!("ADDED {}", o.meta().name.as_deref().unwrap_or("")),
            WatchEvent::Modified(o) => {
                format!("MODIFIED {}", o.meta().name.as_deref().unwrap_or(""))
            }
            WatchEvent::Deleted(o) => format!("DELETED {}", o.meta().name.as_deref().unwrap_or("")),
            WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
            WatchEvent::Error(e) => format!("ERROR {}", e.code),
        })
        .collect()
}

// ---- PATCH ----------------------------------------------------------------------------------

#[tokio::test]
async fn merge_patch_sets_merges_and_removes_fields() {
    let (s, api) = server().await;
    let mut c = cm("a");
    c.metadata.labels = Some([("keep".to_string(), "1".to_string())].into());
    c.metadata.annotations = Some([("drop".to_string(), "x".to_string())].into());
    let created = api.create(&PostParams::default(), &c).await.unwrap();
    let patched = api
        .patch(
            "a",
            &pp(),
            &merge(json!({
                "metadata": {"labels": {"new": "2"}, "annotations": {"drop": null}},
                "data": {"k2": "v2"},
            })),
        )
        .await
        .unwrap();
    let labels = patched.metadata.labels.clone().unwrap();
    assert_eq!(labels.get("keep").map(String::as_str), Some("1"));
    assert_eq!(labels.get("new").map(String::as_str), Some("2"));
    assert!(
        patched
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .is_empty()
    );
    let data = patched.data.clone().unwrap();
    assert_eq!((data["k"].as_str(), data["k2"].as_str()), ("v", "v2"));
    assert_eq!(rv(&patched), "2");
    assert_eq!(patched.metadata.uid, created.metadata.uid);
    let last = s.requests().last().cloned().unwrap();
    assert_eq!((last.verb, last.method.as_str()), (Verb::Patch, "PATCH"));
    assert_eq!(api.get("a").await.unwrap().data, patched.data);
    assert_eq!(events(&api, "1", 1).await, ["MODIFIED a"]);
}

#[tokio::test]
async fn json_patch_applies_every_operation() {
    let (_s, api) = server().await;
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let patched = api
        .patch(
            "a",
            &pp(),
            &json_patch(json!([
                {"op": "test", "path": "/data/k", "value": "v"},
                {"op": "add", "path": "/metadata/labels", "value": {"app": "web"}},
                {"op": "copy", "from": "/data/k", "path": "/data/copy"},
                {"op": "move", "from": "/data/k", "path": "/data/moved"},
                {"op": "replace", "path": "/data/copy", "value": "replaced"},
                {"op": "add", "path": "/data/gone", "value": "x"},
                {"op": "remove", "path": "/data/gone"},
            ])),
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&patched.data).unwrap(),
        json!({"copy": "replaced", "moved": "v"})
    );
    assert_eq!(
        patched
            .metadata
            .labels
            .unwrap()
            .get("app")
            .map(String::as_str),
        Some("web")
    );
}

#[tokio::test]
async fn json_patch_failed_test_is_422_and_writes_nothing() {
    let (s, api) = server().await;
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let e = api_err(
        api.patch(
            "a",
            &pp(),
            &json_patch(json!([
                {"op": "add", "path": "/data/x", "value": "1"},
                {"op": "test", "path": "/data/k", "value": "not-v"},
            ])),
        )
        .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
    // A path that does not exist is as unprocessable.
    let e = api_err(
        api.patch(
            "a",
            &pp(),
            &json_patch(json!([{"op": "remove", "path": "/spec/nothing"}])),
        )
        .await,
    );
    assert_eq!(e.code, 422, "{e:?}");
    assert_eq!(s.current_resource_version(), 1);
    assert!(!api.get("a").await.unwrap().data.unwrap().contains_key("x"));
}

#[tokio::test]
async fn patch_resource_version_is_a_precondition() {
    let (s, api) = server().await;
    let created = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    api.patch("a", &pp(), &merge(json!({"data": {"k": "2"}})))
        .await
        .unwrap();
    // A patch that carries the resourceVersion it was computed from conflicts once stale.
    let stale = merge(json!({"metadata": {"resourceVersion": rv(&created)}, "data": {"k": "3"}}));
    let e = api_err(api.patch("a", &pp(), &stale).await);
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"), "{e:?}");
    assert!(
        e.message.contains("the object has been modified"),
        "{}",
        e.message
    );
    let current = merge(json!({"metadata": {"resourceVersion": "2"}, "data": {"k": "3"}}));
    assert_eq!(rv(&api.patch("a", &pp(), &current).await.unwrap()), "3");
    // The same through a JSON patch `replace` of the resourceVersion.
    let e = api_err(
        api.patch(
            "a",
            &pp(),
            &json_patch(
                json!([{"op": "replace", "path": "/metadata/resourceVersion", "value": "1"}]),
            ),
        )
        .await,
    );
    assert_eq!(e.code, 409);
    assert_eq!(s.current_resource_version(), 3);
}

#[tokio::test]
async fn strategic_merge_patch_of_maps_and_scalars_merges_and_lists_are_refused_with_415() {
    let (s, api) = server().await;
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let out = api
        .patch(
            "a",
            &pp(),
            &Patch::Strategic(
                json!({"data": {"k": "x", "n": "y"}, "metadata": {"labels": {"l": "1"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        out.data,
        Some([("k".into(), "x".into()), ("n".into(), "y".into())].into())
    );
    let out = api
        .patch("a", &pp(), &Patch::Strategic(json!({"data": {"n": null}})))
        .await
        .unwrap();
    assert_eq!(out.data, cm_data("x"));
    let e = api_err(
        api.patch(
            "a",
            &pp(),
            &Patch::Strategic(json!({"metadata": {"finalizers": ["f"]}})),
        )
        .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (415, "UnsupportedMediaType"));
    assert!(
        e.message.contains("a list at .metadata.finalizers"),
        "{}",
        e.message
    );
    assert_eq!(
        s.current_resource_version(),
        3,
        "the refused patch wrote nothing"
    );
}

fn cm_data(v: &str) -> Option<std::collections::BTreeMap<String, String>> {
    Some([("k".to_string(), v.to_string())].into())
}

#[tokio::test]
async fn server_side_apply_tracks_field_managers_and_conflicts_with_409() {
    let (_s, api) = server().await;
    let applied = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": v}});
    // An apply creates what does not exist.
    let out = api
        .patch("a", &PatchParams::apply("one"), &Patch::Apply(applied("1")))
        .await
        .unwrap();
    assert_eq!(out.data, cm_data("1"));
    let mf = out.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("one"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    assert_eq!(
        mf[0].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {"f:k": {}}})
    );

    // Another manager applying a different value: 409 Conflict, naming the owner and field.
    let e = api_err(
        api.patch("a", &PatchParams::apply("two"), &Patch::Apply(applied("2")))
            .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message
            .contains("conflict with \"one\" using v1: .data.k"),
        "{}",
        e.message
    );
    // The same value is shared ownership; force takes the field.
    api.patch("a", &PatchParams::apply("two"), &Patch::Apply(applied("1")))
        .await
        .unwrap();
    let out = api
        .patch(
            "a",
            &PatchParams::apply("two").force(),
            &Patch::Apply(applied("2")),
        )
        .await
        .unwrap();
    assert_eq!(out.data, cm_data("2"));
    let managers: Vec<_> = out
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| m.manager.unwrap())
        .collect();
    assert_eq!(
        managers,
        ["two"],
        "the forced apply took the field from \"one\""
    );

    // An update takes what it changes: the next apply by "two" of another value conflicts
    // with the updater, named by its fieldManager.
    let upd = PatchParams {
        field_manager: Some("editor".into()),
        ..Default::default()
    };
    api.patch("a", &upd, &Patch::Strategic(json!({"data": {"k": "3"}})))
        .await
        .unwrap();
    let e = api_err(
        api.patch("a", &PatchParams::apply("two"), &Patch::Apply(applied("4")))
            .await,
    );
    assert!(
        e.message.contains("conflict with \"editor\""),
        "{}",
        e.message
    );

    // Apply needs a field manager (kube checks it client-side too) and a matching name.
    let e = api_err(
        api.patch(
            "a",
            &PatchParams::apply("two"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
            ),
        )
        .await,
    );
    assert_eq!(e.code, 400, "{}", e.message);
}

#[tokio::test]
async fn patch_of_a_missing_object_is_404_and_bad_bodies_400() {
    let (_s, api) = server().await;
    let e = api_err(api.patch("nope", &pp(), &merge(json!({"data": {}}))).await);
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let e = api_err(
        api.patch("a", &pp(), &merge(json!(["not", "an", "object"])))
            .await,
    );
    assert_eq!(e.code, 400, "{e:?}");
    // A patch may not rename the object or move it to another namespace.
    let e = api_err(
        api.patch("a", &pp(), &merge(json!({"metadata": {"name": "b"}})))
            .await,
    );
    assert_eq!(e.code, 400, "{e:?}");
    let e = api_err(
        api.patch(
            "a",
            &pp(),
            &merge(json!({"metadata": {"namespace": "other"}})),
        )
        .await,
    );
    assert_eq!(e.code, 400, "{e:?}");
}

#[tokio::test]
async fn an_update_or_patch_that_changes_nothing_is_not_written() {
    let (s, api) = server().await;
    let created = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let same = api
        .replace("a", &PostParams::default(), &created)
        .await
        .unwrap();
    assert_eq!(rv(&same), "1");
    let same = api
        .patch("a", &pp(), &merge(json!({"data": {"k": "v"}})))
        .await
        .unwrap();
    assert_eq!(rv(&same), "1");
    assert_eq!(s.current_resource_version(), 1);
    // The direct method writes anyway: that is how a test provokes a MODIFIED event.
    let direct = s.update(&created).unwrap();
    assert_eq!(rv(&direct), "2");
}

#[tokio::test]
async fn create_with_a_resource_version_and_stale_updates_are_refused() {
    let (s, api) = server().await;
    let created = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    // etcd3 `Create`: "resourceVersion should not be set on objects to be created".
    let mut again = created.clone();
    again.metadata.name = Some("b".into());
    let e = api_err(api.create(&PostParams::default(), &again).await);
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"), "{e:?}");
    assert!(e.message.contains("resourceVersion should not be set"));
    let e = api_err(api.create(&PostParams::default(), &cm("a")).await);
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "2".to_string())].into());
    api.replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    let e = api_err(api.replace("a", &PostParams::default(), &changed).await);
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    // Without a resourceVersion an update is unconditional.
    changed.metadata.resource_version = None;
    changed.data = Some([("k".to_string(), "3".to_string())].into());
    let done = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(rv(&done), "3");
    // The uid is immutable.
    changed.metadata.uid = Some("00000000-0000-4000-a000-000000000000".into());
    let e = api_err(api.replace("a", &PostParams::default(), &changed).await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(e.message.contains("metadata.uid"), "{}", e.message);
    assert_eq!(s.current_resource_version(), 3);
}

/// A fake server with the `Widget` custom resource and one widget `w` of size 1 in `default`.
async fn server_with_widget_w() -> (FakeApiServer, Api<Widget>) {
    let s = FakeApiServer::start_with_core().await.unwrap();
    s.register::<Widget>();
    let api: Api<Widget> = Api::namespaced(s.client(), "default");
    api.create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    (s, api)
}

/// Custom resources refuse an update without a resourceVersion (apiextensions' strategies do
/// not `AllowUnconditionalUpdate`), as do their status updates; a patch that does not set one
/// is applied to the stored object and stays unconditional. Built-in kinds allow it (above).
#[tokio::test]
async fn a_custom_resource_update_without_a_resource_version_is_invalid() {
    let (_s, api) = server_with_widget_w().await;
    let e = api_err(
        api.replace("w", &PostParams::default(), &widget("w", 2))
            .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
    assert_eq!(
        e.message,
        "widgets.example.com \"w\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    let mut status = widget("w", 1);
    status.status = Some(WidgetStatus { ready: true });
    let e = api_err(
        api.replace_status("w", &PostParams::default(), &status)
            .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
    // Not found comes first, as in the generic registry.
    let e = api_err(
        api.replace("x", &PostParams::default(), &widget("x", 2))
            .await,
    );
    assert_eq!(e.code, 404, "{e:?}");
    // With the stored resourceVersion it is written; a merge patch needs none.
    let mut current = api.get("w").await.unwrap();
    current.spec.size = 3;
    api.replace("w", &PostParams::default(), &current)
        .await
        .unwrap();
    api.patch("w", &pp(), &merge(json!({"spec": {"size": 4}})))
        .await
        .unwrap();
    assert_eq!(api.get("w").await.unwrap().spec.size, 4);
}

/// apiextensions-apiserver serves custom resources JSON patch, merge patch and apply only
/// (`customresource_handler.go`): a strategic merge patch is `415`.
#[tokio::test]
async fn a_strategic_merge_patch_of_a_custom_resource_is_415() {
    let (_s, api) = server_with_widget_w().await;
    let e = api_err(
        api.patch("w", &pp(), &Patch::Strategic(json!({"spec": {"size": 2}})))
            .await,
    );
    assert_eq!(
        (e.code, e.reason.as_str()),
        (415, "UnsupportedMediaType"),
        "{e:?}"
    );
    assert_eq!(
        e.message,
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    assert_eq!(api.get("w").await.unwrap().spec.size, 1);
}

/// A patch is an update of the patched object (`store.go` `Update`): one that removes the
/// resourceVersion is unconditional only where the kind allows it, else `422`, like a `PUT`.
#[tokio::test]
async fn a_patch_that_drops_the_resource_version_needs_an_unconditional_kind() {
    let (s, api) = server_with_widget_w().await;
    let drop_rv = json!({"metadata": {"resourceVersion": null}, "spec": {"size": 2}});
    let e = api_err(api.patch("w", &pp(), &merge(drop_rv.clone())).await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
    assert_eq!(
        e.message,
        "widgets.example.com \"w\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    let e = api_err(
        api.patch(
            "w",
            &pp(),
            &json_patch(json!([{"op": "remove", "path": "/metadata/resourceVersion"}])),
        )
        .await,
    );
    assert_eq!(e.code, 422, "{e:?}");
    assert_eq!(api.get("w").await.unwrap().spec.size, 1);
    // A ConfigMap allows unconditional updates.
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    cms.patch(
        "a",
        &pp(),
        &merge(json!({"metadata": {"resourceVersion": null}, "data": {"k": "2"}})),
    )
    .await
    .unwrap();
}

/// Names: a lowercase RFC 1123 subdomain (most kinds' `NameIsDNSSubdomain`), and a
/// `generateName` prefix cut to 58 characters, as `names.SimpleNameGenerator` does.
#[tokio::test]
async fn names_are_dns_subdomains_and_generated_names_fit_63_characters() {
    let (_s, api) = server().await;
    for bad in ["Foo", "a_b", "-a", "a-", "a..b", &"a".repeat(254)] {
        let e = api_err(api.create(&PostParams::default(), &cm(bad)).await);
        assert_eq!(
            (e.code, e.reason.as_str()),
            (422, "Invalid"),
            "{bad}: {e:?}"
        );
        assert!(
            e.message.starts_with(&format!(
                "ConfigMap \"{bad}\" is invalid: metadata.name: Invalid value: \"{bad}\": "
            )),
            "{}",
            e.message
        );
    }
    for good in ["a", "a-b.c-d", "0.1", &"a".repeat(253)] {
        api.create(&PostParams::default(), &cm(good)).await.unwrap();
    }
    let mut generated = cm("");
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("g".repeat(70));
    let made = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let name = made.metadata.name.unwrap();
    assert_eq!(name.len(), 63, "{name}");
    assert!(name.starts_with(&"g".repeat(58)), "{name}");
}

/// A Namespace's name is an RFC 1123 label, a Service's an RFC 1035 label; a Lease refuses an
/// update without a resourceVersion as custom resources do (its strategy does not allow it).
#[tokio::test]
async fn namespace_and_service_names_are_labels_and_a_lease_update_needs_a_version() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Namespace, Service};
    let s = FakeApiServer::start_with_core().await.unwrap();
    s.register::<Service>();
    s.register::<Lease>();
    let named = |name: &str| kube::api::ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    };
    let namespaces: Api<Namespace> = Api::all(s.client());
    let ns = Namespace {
        metadata: named("a.b"),
        ..Default::default()
    };
    let e = api_err(namespaces.create(&PostParams::default(), &ns).await);
    assert_eq!(e.code, 422, "{e:?}");
    assert!(e.message.contains("RFC 1123 label"), "{}", e.message);
    let services: Api<Service> = Api::namespaced(s.client(), "default");
    let svc = |name: &str| Service {
        metadata: named(name),
        ..Default::default()
    };
    let e = api_err(services.create(&PostParams::default(), &svc("1abc")).await);
    assert_eq!(e.code, 422, "{e:?}");
    assert!(e.message.contains("DNS-1035 label"), "{}", e.message);
    services
        .create(&PostParams::default(), &svc("abc-1"))
        .await
        .unwrap();
    let leases: Api<Lease> = Api::namespaced(s.client(), "default");
    let lease = Lease {
        metadata: named("l"),
        ..Default::default()
    };
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let e = api_err(leases.replace("l", &PostParams::default(), &lease).await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let (s, api) = server().await;
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let answer = api.create(&dry, &cm("a")).await.unwrap();
    assert_eq!(answer.metadata.name.as_deref(), Some("a"));
    assert!(answer.metadata.resource_version.is_none());
    assert!(s.get::<ConfigMap>(Some("default"), "a").unwrap().is_none());
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let answer = api
        .patch("a", &pp().dry_run(), &merge(json!({"data": {"k": "dry"}})))
        .await
        .unwrap();
    assert_eq!(answer.data.unwrap()["k"], "dry");
    api.delete("a", &DeleteParams::default().dry_run())
        .await
        .unwrap();
    assert_eq!(api.get("a").await.unwrap().data, cm("a").data);
    assert_eq!(s.current_resource_version(), 1);
}

// ---- /status --------------------------------------------------------------------------------

#[tokio::test]
async fn status_subresource_defaults_from_the_type() {
    assert_eq!(StatusSubresource::of::<Pod>(), StatusSubresource::Enabled);
    assert_eq!(
        StatusSubresource::of::<Widget>(),
        StatusSubresource::Enabled
    );
    assert_eq!(
        StatusSubresource::of::<ConfigMap>(),
        StatusSubresource::Disabled
    );
    assert_eq!(
        StatusSubresource::of::<DynamicObject>(),
        StatusSubresource::Disabled
    );
    let (_s, api) = server().await;
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let e = api_err(api.get_status("a").await);
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
}

#[tokio::test]
async fn status_writes_change_only_status_and_never_generation() {
    let s = FakeApiServer::start().await.unwrap();
    s.register::<Widget>();
    let api: Api<Widget> = Api::namespaced(s.client(), "default");
    let mut w = widget("w", 1);
    w.status = Some(WidgetStatus { ready: true });
    // `PrepareForCreate`: a create never sets the status.
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.status, None);
    assert_eq!(generation(&created), 1);

    // A status patch that also tries to change the spec and labels changes only the status.
    let patched = api
        .patch_status(
            "w",
            &pp(),
            &merge(json!({
                "metadata": {"labels": {"sneaky": "1"}},
                "spec": {"size": 99},
                "status": {"ready": true},
            })),
        )
        .await
        .unwrap();
    assert_eq!(patched.status, Some(WidgetStatus { ready: true }));
    assert_eq!(patched.spec.size, 1);
    assert!(patched.metadata.labels.is_none());
    assert_eq!(generation(&patched), 1);
    assert_eq!(rv(&patched), "2");

    // PUT of /status, with optimistic concurrency.
    let mut next = patched.clone();
    next.status = Some(WidgetStatus { ready: false });
    next.spec.size = 50;
    let replaced = api
        .replace_status("w", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_eq!(replaced.status, Some(WidgetStatus { ready: false }));
    assert_eq!((replaced.spec.size, generation(&replaced)), (1, 1));
    let e = api_err(api.replace_status("w", &PostParams::default(), &next).await);
    assert_eq!(e.code, 409);
    assert_eq!(api.get_status("w").await.unwrap().spec.size, 1);

    // A main-resource write ignores the status; only a spec change bumps generation.
    let mut main = replaced.clone();
    main.status = Some(WidgetStatus { ready: true });
    main.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
    let relabelled = api
        .replace("w", &PostParams::default(), &main)
        .await
        .unwrap();
    assert_eq!(relabelled.status, Some(WidgetStatus { ready: false }));
    assert_eq!(generation(&relabelled), 1);
    let resized = api
        .patch(
            "w",
            &pp(),
            &merge(json!({"spec": {"size": 2}, "status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert_eq!(resized.spec.size, 2);
    assert_eq!(resized.status, Some(WidgetStatus { ready: false }));
    assert_eq!(generation(&resized), 2);
    // Removing the status through the status endpoint removes it.
    let cleared = api
        .patch_status("w", &pp(), &merge(json!({"status": null})))
        .await
        .unwrap();
    assert_eq!(cleared.status, None);
    assert_eq!(generation(&cleared), 2);
}

#[tokio::test]
async fn pod_status_is_written_through_status_only() {
    let (s, _) = server().await;
    let pods: Api<Pod> = Api::namespaced(s.client(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();
    assert!(created.status.is_none());
    let patched = pods
        .patch_status("p", &pp(), &merge(json!({"status": {"phase": "Running"}})))
        .await
        .unwrap();
    assert_eq!(
        patched.status.and_then(|st| st.phase).as_deref(),
        Some("Running")
    );
    // Seeding through the direct methods writes the status as given.
    let seeded = s.create(&pod("seeded")).unwrap();
    assert_eq!(
        seeded.status.and_then(|st| st.phase).as_deref(),
        Some("Running")
    );
}

#[tokio::test]
async fn without_a_status_subresource_status_is_an_ordinary_field() {
    let s = FakeApiServer::start().await.unwrap();
    s.register_with_status::<Widget>(StatusSubresource::Disabled);
    let api: Api<Widget> = Api::namespaced(s.client(), "default");
    let mut w = widget("w", 1);
    w.status = Some(WidgetStatus { ready: true });
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.status, Some(WidgetStatus { ready: true }));
    let patched = api
        .patch("w", &pp(), &merge(json!({"status": {"ready": false}})))
        .await
        .unwrap();
    assert_eq!(patched.status, Some(WidgetStatus { ready: false }));
    // As apiextensions' strategy: any change outside metadata moves generation.
    assert_eq!(generation(&patched), 2);
    let e = api_err(
        api.patch_status("w", &pp(), &merge(json!({"status": {"ready": true}})))
            .await,
    );
    assert_eq!(e.code, 404);
    // Registering again with the subresource turns it on.
    s.register_with_status::<Widget>(StatusSubresource::Enabled);
    assert!(api.get_status("w").await.is_ok());
}

// ---- finalizers and deletion ----------------------------------------------------------------

fn with_finalizers(name: &str, finalizers: &[&str]) -> ConfigMap {
    let mut c = cm(name);
    c.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
    c
}

#[tokio::test]
async fn delete_with_finalizers_marks_then_last_finalizer_removal_deletes() {
    let (s, api) = server().await;
    api.create(
        &PostParams::default(),
        &with_finalizers("a", &["example.com/a", "example.com/b"]),
    )
    .await
    .unwrap();
    let marked = api
        .delete("a", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("an object that is kept is returned, not a Status");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(generation(&marked), 2);
    assert_eq!(rv(&marked), "2");
    // Still there, and a second delete changes nothing.
    assert!(api.get("a").await.is_ok());
    let again = api
        .delete("a", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(rv(&again), "2");

    // No new finalizers once deleting (`ValidateNoNewFinalizers`).
    let e = api_err(
        api.patch(
            "a",
            &pp(),
            &json_patch(json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/new"}])),
        )
        .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
    assert!(
        e.message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        e.message
    );
    assert!(e.message.contains("example.com/new"), "{}", e.message);
    // An update can neither clear nor change the deletion timestamp: it is carried over.
    let mut cleared = api.get("a").await.unwrap();
    cleared.metadata.deletion_timestamp = None;
    cleared.metadata.finalizers = Some(vec!["example.com/b".into()]);
    let one_left = api
        .replace("a", &PostParams::default(), &cleared)
        .await
        .unwrap();
    assert_eq!(
        one_left.metadata.deletion_timestamp,
        marked.metadata.deletion_timestamp
    );
    assert_eq!(rv(&one_left), "3");
    assert_eq!(generation(&one_left), 2);

    // Removing the last finalizer deletes the object.
    let answer = api
        .patch(
            "a",
            &pp(),
            &merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(answer.metadata.finalizers.is_none());
    assert_eq!(api_err(api.get("a").await).code, 404);
    assert_eq!(
        events(&api, "1", 3).await,
        ["MODIFIED a", "MODIFIED a", "DELETED a"]
    );
    assert_eq!(s.current_resource_version(), 4);
}

#[tokio::test]
async fn deleted_event_after_finalization_carries_the_last_stored_state() {
    let (_s, api) = server().await;
    api.create(&PostParams::default(), &with_finalizers("a", &["f"]))
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let stream = api.watch(&WatchParams::default(), "2").await.unwrap();
    api.patch(
        "a",
        &pp(),
        &json_patch(json!([{"op": "remove", "path": "/metadata/finalizers/0"}])),
    )
    .await
    .unwrap();
    let evs: Vec<WatchEvent<ConfigMap>> =
        tokio::time::timeout(Duration::from_secs(10), stream.take(1).try_collect())
            .await
            .expect(DEADLOCK)
            .unwrap();
    // As etcd's delete event (its previous value): the update that emptied the finalizers is
    // never stored, so the object still lists them, at the deletion's resourceVersion.
    let WatchEvent::Deleted(gone) = &evs[0] else {
        panic!("expected DELETED, got {:?}", evs[0]);
    };
    assert_eq!(
        gone.metadata.finalizers.as_deref(),
        Some(&["f".to_string()][..])
    );
    assert!(gone.metadata.deletion_timestamp.is_some());
    assert_eq!(rv(gone), "3");
}

#[tokio::test]
async fn a_deletion_timestamp_cannot_be_set_by_an_update() {
    let (_s, api) = server().await;
    let mut c = api
        .create(&PostParams::default(), &with_finalizers("a", &["f"]))
        .await
        .unwrap();
    c.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2030-01-01T00:00:00Z".parse().unwrap(),
    ));
    let e = api_err(api.replace("a", &PostParams::default(), &c).await);
    assert_eq!(e.code, 422, "{e:?}");
    assert!(
        e.message.contains("metadata.deletionTimestamp"),
        "{}",
        e.message
    );
    // And a create never starts out deleting.
    let mut fresh = with_finalizers("b", &["f"]);
    fresh.metadata.deletion_timestamp = c.metadata.deletion_timestamp.clone();
    let created = api.create(&PostParams::default(), &fresh).await.unwrap();
    assert!(created.metadata.deletion_timestamp.is_none());
}

#[tokio::test]
async fn delete_without_finalizers_is_immediate_and_preconditions_conflict() {
    let (s, api) = server().await;
    let created = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let stale = DeleteParams::default().preconditions(Preconditions {
        resource_version: Some("99".into()),
        uid: None,
    });
    let e = api_err(api.delete("a", &stale).await);
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("ResourceVersion in the precondition"),
        "{}",
        e.message
    );
    let wrong_uid = DeleteParams::default().preconditions(Preconditions {
        resource_version: None,
        uid: Some("not-it".into()),
    });
    assert_eq!(api_err(api.delete("a", &wrong_uid).await).code, 409);
    let right = DeleteParams::default().preconditions(Preconditions {
        resource_version: Some(rv(&created)),
        uid: created.metadata.uid.clone(),
    });
    api.delete("a", &right).await.unwrap();
    assert_eq!(api_err(api.get("a").await).code, 404);
    assert_eq!(events(&api, "1", 1).await, ["DELETED a"]);
    assert_eq!(s.current_resource_version(), 2);
}

#[tokio::test]
async fn direct_delete_honours_finalizers_too() {
    let (s, api) = server().await;
    s.create(&with_finalizers("a", &["f"])).unwrap();
    let marked: ConfigMap = s.delete(Some("default"), "a").unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    let mut last = s.get::<ConfigMap>(Some("default"), "a").unwrap().unwrap();
    last.metadata.finalizers = None;
    s.update(&last).unwrap();
    assert!(s.get::<ConfigMap>(Some("default"), "a").unwrap().is_none());
    assert_eq!(api_err(api.get("a").await).code, 404);
}

#[tokio::test]
async fn injected_faults_hit_patches_by_verb() {
    let (s, api) = server().await;
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    s.faults().fail_next_for(1, 500, &[Verb::Patch]);
    let e = api_err(
        api.patch("a", &pp(), &merge(json!({"data": {"k": "2"}})))
            .await,
    );
    assert_eq!(e.code, 500);
    api.patch("a", &pp(), &merge(json!({"data": {"k": "2"}})))
        .await
        .unwrap();
    let statuses: Vec<_> = s
        .requests()
        .iter()
        .filter(|r| r.verb == Verb::Patch)
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [500, 200]);
}

/// A Namespace's own `/status` is its subresource, not a resource `status` in that namespace.
#[tokio::test]
async fn a_namespace_status_is_reachable() {
    use k8s_openapi::api::core::v1::Namespace;
    let (s, _) = server().await;
    let namespaces: Api<Namespace> = Api::all(s.client());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("n".into());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let out = namespaces
        .patch_status(
            "n",
            &PatchParams::default(),
            &merge(json!({"status": {"phase": "Terminating"}})),
        )
        .await
        .unwrap();
    assert_eq!(out.status.unwrap().phase.as_deref(), Some("Terminating"));
    assert!(namespaces.get_status("n").await.is_ok());
}

/// Odd writes to an object with managed fields are refused, never a panic (which would drop
/// the connection): a merge patch that makes `metadata` a string, a body that is not an
/// object.
#[tokio::test]
async fn odd_writes_to_an_applied_object_are_answered() {
    let (s, api) = server().await;
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1"}});
    api.patch("a", &PatchParams::apply("one"), &Patch::Apply(applied))
        .await
        .unwrap();
    let e = api_err(
        api.patch(
            "a",
            &PatchParams::default(),
            &merge(json!({"metadata": "x"})),
        )
        .await,
    );
    assert!((400..500).contains(&e.code), "{e:?}");
    let dynamic: Api<DynamicObject> = Api::namespaced_with(
        s.client(),
        "default",
        &kube::core::ApiResource::erase::<ConfigMap>(&()),
    );
    let e = api_err(
        dynamic
            .patch(
                "a",
                &PatchParams::default(),
                &json_patch(json!([{"op": "replace", "path": "", "value": []}])),
            )
            .await,
    );
    assert!((400..500).contains(&e.code), "{e:?}");
    assert!(api.get("a").await.is_ok());
}

/// A write that changes nothing is not written, even when the object holds managed fields
/// the server did not write itself (copied from a real cluster): they are kept verbatim, not
/// rebuilt into something that differs.
#[tokio::test]
async fn a_no_op_update_of_foreign_managed_fields_is_not_written() {
    let (s, api) = server().await;
    let c: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": "a",
            "namespace": "default",
            "managedFields": [{
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:k": {}}}
            }]
        },
        "data": {"k": "v"}
    }))
    .unwrap();
    let created = s.create(&c).unwrap();
    let replaced = api
        .replace("a", &PostParams::default(), &created)
        .await
        .unwrap();
    assert_eq!(rv(&replaced), rv(&created), "a no-op write was written");
    assert_eq!(
        replaced.metadata.managed_fields,
        created.metadata.managed_fields
    );
}

/// `force` is read as apimachinery reads boolean parameters (`Convert_Slice_string_To_bool`):
/// only `0` and `false` are false, anything else true, and the first value counts.
#[tokio::test]
async fn force_is_any_value_but_0_or_false() {
    let (s, api) = server().await;
    let applied = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": v}});
    api.patch("a", &PatchParams::apply("one"), &Patch::Apply(applied("1")))
        .await
        .unwrap();
    let apply = |query: &str, v: &str| {
        let req = http::Request::patch(format!(
            "/api/v1/namespaces/default/configmaps/a?fieldManager=two&{query}"
        ))
        .header(http::header::CONTENT_TYPE, "application/apply-patch+yaml")
        .body(kube::client::Body::from(
            applied(v).to_string().into_bytes(),
        ))
        .unwrap();
        let client = s.client();
        async move { client.send(req).await.unwrap().status().as_u16() }
    };
    assert_eq!(apply("force=0", "2").await, 409);
    assert_eq!(apply("force=False", "2").await, 409);
    assert_eq!(apply("force=false&force=true", "2").await, 409);
    assert_eq!(apply("force=yes", "2").await, 200);
    assert_eq!(apply("force=&force=false", "3").await, 200);
    assert_eq!(
        api.get("a").await.unwrap().data.unwrap()["k"],
        "3".to_string()
    );
}
