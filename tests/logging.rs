//! What informers log under: the factory's client-go style cache-sync lines, and the per-informer
//! `tracing` span (group, version, resource, namespace, selectors) around everything an informer
//! logs — its reflector, its processing loop and its handlers, on tasks and on threads.
#![cfg(feature = "testing")]

use std::{
    collections::BTreeMap,
    future::Future,
    sync::{Arc, OnceLock},
    time::Duration,
};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{
    api::{ApiResource, DynamicObject, ObjectMeta},
    discovery::Scope,
};
use kube_informer::{
    BackoffConfig, FactoryConfig, HandlerOptions, ReflectorConfig, ResourceEventHandlerFuncs,
    SharedInformerFactory,
    testing::{FakeApiServer, Verb},
};
use parking_lot::Mutex;
use serde_json::json;
use tracing::{
    Event, Subscriber,
    field::{Field, Visit},
    span,
};
use tracing_subscriber::{Layer, layer::Context, prelude::*, registry::LookupSpan};

type Fields = BTreeMap<String, String>;

/// One captured event: its message, its own fields, and its spans (innermost first).
#[derive(Debug, Clone)]
struct Captured {
    message: String,
    fields: Fields,
    spans: Vec<(String, Fields)>,
}

impl Captured {
    /// The fields of the innermost span named `name`.
    fn span(&self, name: &str) -> Option<&Fields> {
        self.spans.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }
}

#[derive(Default)]
struct FieldVisitor(Fields);

impl Visit for FieldVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// Records every event with the fields of the spans it was emitted in.
#[derive(Clone, Default)]
struct CaptureLayer(Arc<Mutex<Vec<Captured>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for CaptureLayer {
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut v = FieldVisitor::default();
        attrs.record(&mut v);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(v.0);
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut ext = span.extensions_mut();
            if let Some(fields) = ext.get_mut::<Fields>() {
                let mut v = FieldVisitor(std::mem::take(fields));
                values.record(&mut v);
                *fields = v.0;
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut v = FieldVisitor::default();
        event.record(&mut v);
        let mut fields = v.0;
        let message = fields.remove("message").unwrap_or_default();
        let spans = ctx
            .event_scope(event)
            .into_iter()
            .flatten()
            .map(|s| {
                let f = s.extensions().get::<Fields>().cloned().unwrap_or_default();
                (s.name().to_owned(), f)
            })
            .collect();
        self.0.lock().push(Captured {
            message,
            fields,
            spans,
        });
    }
}

/// The process-wide capture: a global subscriber, since informers log from tokio tasks, from
/// their handler thread and from dedicated handler threads.
fn capture() -> &'static CaptureLayer {
    static CAPTURE: OnceLock<CaptureLayer> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let layer = CaptureLayer::default();
        tracing_subscriber::registry().with(layer.clone()).init();
        layer
    })
}

/// Every captured event whose message is `message`.
fn events(message: &str) -> Vec<Captured> {
    capture()
        .0
        .lock()
        .iter()
        .filter(|e| e.message == message)
        .cloned()
        .collect()
}

/// The only captured event with this message, failing with what was captured otherwise.
fn one_event(message: &str) -> Captured {
    let found = events(message);
    assert_eq!(found.len(), 1, "{message:?}: {found:#?}");
    found.into_iter().next().unwrap()
}

fn fields(pairs: &[(&str, &str)]) -> Fields {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: likely deadlocked"))
}

fn meta(ns: &str, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn cron_tabs() -> ApiResource {
    ApiResource {
        group: "stable.example.com".into(),
        version: "v1".into(),
        api_version: "stable.example.com/v1".into(),
        kind: "CronTab".into(),
        plural: "crontabs".into(),
    }
}

/// A handler that logs `message` from inside its callback.
fn logging_handler<K: Send + Sync + 'static>(
    message: &'static str,
) -> ResourceEventHandlerFuncs<K> {
    ResourceEventHandlerFuncs::new().on_add(move |_: &Arc<K>, _| tracing::info!("{message}"))
}

#[tokio::test]
async fn informers_log_in_spans_that_say_what_they_watch() {
    capture();
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.register_api_resource(&cron_tabs(), true);
    server
        .create(&Pod {
            metadata: meta("default", "p", &[]),
            ..Default::default()
        })
        .unwrap();
    server
        .create(&ConfigMap {
            metadata: meta("prod", "web", &[("app", "web")]),
            ..Default::default()
        })
        .unwrap();
    server
        .create_value(json!({
            "apiVersion": "stable.example.com/v1",
            "kind": "CronTab",
            "metadata": {"name": "nightly", "namespace": "default"},
            "spec": {"cronSpec": "0 0 * * *"},
        }))
        .unwrap();

    // The first list fails, so some reflector's default watch-error handler logs a warning.
    server.faults().fail_next_for(1, 500, &[Verb::List]);
    let config = || {
        FactoryConfig::default().reflector(ReflectorConfig::default().backoff(BackoffConfig {
            initial: Duration::from_millis(5),
            max: Duration::from_millis(50),
            ..BackoffConfig::default()
        }))
    };
    // Cluster-wide: a typed Pod informer and a dynamic CronTab informer.
    let cluster = SharedInformerFactory::new(server.client(), config());
    let pods = cluster.informer::<Pod>();
    pods.add_event_handler(logging_handler::<Pod>("pod handler task"))
        .unwrap();
    pods.add_event_handler_with_options(
        logging_handler::<Pod>("pod handler thread"),
        HandlerOptions::default().dedicated_thread(),
    )
    .unwrap();
    let crons = cluster.dynamic_informer(&cron_tabs(), &Scope::Namespaced);
    crons
        .add_event_handler(logging_handler::<DynamicObject>("cron handler"))
        .unwrap();
    // One namespace and a label selector: a ConfigMap informer.
    let scoped = SharedInformerFactory::new(
        server.client(),
        config().namespace("prod").labels("app=web"),
    );
    let config_maps = scoped.informer::<ConfigMap>();
    config_maps
        .add_event_handler(logging_handler::<ConfigMap>("config map handler"))
        .unwrap();

    cluster.start();
    scoped.start();
    let synced = within("sync", cluster.wait_for_cache_sync()).await;
    assert_eq!(
        synced.keys().collect::<Vec<_>>(),
        ["stable.example.com/v1/CronTab (dynamic)", "v1/Pod"]
    );
    within("sync", scoped.wait_for_cache_sync()).await;
    for message in [
        "pod handler task",
        "pod handler thread",
        "cron handler",
        "config map handler",
    ] {
        within(message, async {
            while events(message).is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }
    cluster.shutdown().await;
    scoped.shutdown().await;

    let pod_span = fields(&[
        ("informer", "v1/Pod"),
        ("group", ""),
        ("version", "v1"),
        ("resource", "pods"),
        ("namespace", ""),
    ]);
    let cron_span = fields(&[
        ("informer", "stable.example.com/v1/CronTab (dynamic)"),
        ("group", "stable.example.com"),
        ("version", "v1"),
        ("resource", "crontabs"),
        ("namespace", ""),
    ]);
    let config_map_span = fields(&[
        ("informer", "v1/ConfigMap"),
        ("group", ""),
        ("version", "v1"),
        ("resource", "configmaps"),
        ("namespace", "prod"),
        ("label_selector", "app=web"),
    ]);
    assert_eq!(pods.name(), "v1/Pod");
    assert_eq!(config_maps.name(), "v1/ConfigMap");
    assert_eq!(crons.name(), "stable.example.com/v1/CronTab (dynamic)");

    for (name, span) in [
        ("v1/Pod", &pod_span),
        ("stable.example.com/v1/CronTab (dynamic)", &cron_span),
        ("v1/ConfigMap", &config_map_span),
    ] {
        // client-go `WaitForNamedCacheSync`'s lines, exactly, in the informer's span.
        for message in [
            format!("Waiting for caches to sync for {name}"),
            format!("Caches are synced for {name}"),
        ] {
            let e = one_event(&message);
            assert_eq!(e.fields, fields(&[("informer", name)]), "{message}");
            assert_eq!(e.span("informer"), Some(span), "{message}: {e:#?}");
        }
        // The reflector, inside the informer's run, is named after the informer.
        let listed: Vec<_> = events("listed")
            .into_iter()
            .filter(|e| e.fields.get("reflector").map(String::as_str) == Some(name))
            .collect();
        assert!(!listed.is_empty(), "no list logged by {name}");
        for e in listed {
            assert_eq!(e.span("informer"), Some(span), "{e:#?}");
        }
    }
    // Handlers log in the span too: as tasks on the handler thread and on a thread of their own.
    for (message, span) in [
        ("pod handler task", &pod_span),
        ("pod handler thread", &pod_span),
        ("cron handler", &cron_span),
        ("config map handler", &config_map_span),
    ] {
        let e = one_event(message);
        assert_eq!(e.span("informer"), Some(span), "{e:#?}");
    }
    // The default watch-error handler names the reflector as its informer.
    let failed = one_event("list/watch failed; retrying");
    let informer = &failed.span("informer").expect("in an informer span")["informer"];
    assert_eq!(
        failed.fields.get("reflector"),
        Some(informer),
        "{failed:#?}"
    );
}
