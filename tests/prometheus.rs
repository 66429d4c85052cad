//! The Prometheus export (feature `prometheus`): known work on a named queue and on named
//! informers, then the exposition text parsed back and checked against client-go's names,
//! labels, buckets and the values that work must produce.
#![cfg(feature = "prometheus")]

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ObjectMeta;
use kube_informer::{
    FactoryConfig, FifoMode, ItemExponentialFailure, RateLimitingQueue, SharedInformerFactory,
    WorkQueue,
    informer::metric_names as informer_names,
    prometheus::{
        PrometheusMetrics,
        prometheus_client::{encoding, registry::Registry},
    },
    testing::FakeApiServer,
    workqueue::{Config, names},
};

/// One sample line of an exposition.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition: the samples, and the `# TYPE` of each family.
#[derive(Debug, Default)]
struct Exposition {
    samples: Vec<Sample>,
    types: BTreeMap<String, String>,
}

impl Exposition {
    fn parse(text: &str) -> Self {
        let mut out = Self::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (family, ty) = rest.split_once(' ').expect("TYPE line: name and type");
                out.types.insert(family.to_owned(), ty.to_owned());
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (series, value) = line
                .rsplit_once(' ')
                .expect("sample line: series and value");
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|e| panic!("value of {line:?}: {e}")),
            };
            let (name, labels) = match series.split_once('{') {
                None => (series, BTreeMap::new()),
                Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}').unwrap())),
            };
            out.samples.push(Sample {
                name: name.to_owned(),
                labels,
                value,
            });
        }
        out
    }

    /// The samples named `name` whose labels include `with`.
    fn find<'a>(
        &'a self,
        name: &'a str,
        with: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |s| {
            s.name == name
                && with
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The value of the one sample named `name` with labels including `with`.
    fn value(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        let found: Vec<_> = self.find(name, with).collect();
        assert_eq!(
            found.len(),
            1,
            "one {name} {with:?} sample, found {found:?}"
        );
        found[0].value
    }

    /// The `(le, cumulative count)` pairs of a histogram series.
    fn buckets(&self, histogram: &str, with: &[(&str, &str)]) -> Vec<(f64, f64)> {
        let bucket = format!("{histogram}_bucket");
        let mut out: Vec<(f64, f64)> = self
            .find(&bucket, with)
            .map(|s| {
                let le = &s.labels["le"];
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                (le, s.value)
            })
            .collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }

    /// The cumulative count of the bucket whose bound is `le`.
    fn bucket(&self, histogram: &str, with: &[(&str, &str)], le: f64) -> f64 {
        self.buckets(histogram, with)
            .into_iter()
            .find(|(b, _)| *b == le)
            .unwrap_or_else(|| panic!("{histogram} has a bucket le={le}"))
            .1
    }
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").expect("label: key=\"value\"");
        // Values here never hold an escaped quote (names, groups, resources, numbers).
        let (value, after) = after
            .split_once('"')
            .expect("label value ends with a quote");
        labels.insert(key.to_owned(), value.to_owned());
        rest = after.strip_prefix(',').unwrap_or(after);
    }
    labels
}

fn openmetrics(registry: &Registry) -> String {
    let mut text = String::new();
    encoding::text::encode(&mut text, registry).unwrap();
    text
}

fn prometheus_text(registry: &Registry) -> String {
    let mut text = String::new();
    encoding::prometheus_text::encode(&mut text, registry).unwrap();
    text
}

/// The samples in a canonical order, bucket bounds as numbers.
fn normalized(exp: &Exposition) -> Vec<(String, BTreeMap<String, String>, u64)> {
    let mut out: Vec<_> = exp
        .samples
        .iter()
        .map(|s| {
            let mut labels = s.labels.clone();
            if let Some(le) = labels.get_mut("le") {
                let v: f64 = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                *le = v.to_string();
            }
            (s.name.clone(), labels, s.value.to_bits())
        })
        .collect();
    out.sort();
    out
}

/// The `le` labels of a bucket series, as written, in order.
fn le_strings<'a>(exp: &'a Exposition, bucket: &'a str, with: &'a [(&str, &str)]) -> Vec<&'a str> {
    exp.find(bucket, with)
        .map(|s| s.labels["le"].as_str())
        .collect()
}

fn label_keys(s: &Sample) -> Vec<&str> {
    s.labels
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "le")
        .collect()
}

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .unwrap_or_else(|_| panic!("{what} timed out: likely deadlocked"))
}

const QUEUE: &[(&str, &str)] = &[("name", "jobs")];

#[tokio::test(start_paused = true)]
async fn workqueue_series_have_client_go_names_labels_buckets_and_values() {
    let mut registry = Registry::default();
    let metrics = Arc::new(PrometheusMetrics::new(&mut registry));
    let queue: RateLimitingQueue<&str> = RateLimitingQueue::with_config(
        Config::default()
            .name("jobs")
            .metrics_provider(metrics.clone()),
        ItemExponentialFailure::new(Duration::from_millis(5), Duration::from_secs(1000)),
    );
    // As client-go: an unnamed queue reports nothing, even with a provider.
    let unnamed = WorkQueue::with_config(Config::default().metrics_provider(metrics.clone()));
    unnamed.add(1).unwrap();

    queue.add("a").unwrap();
    queue.add("b").unwrap();
    queue.add("a").unwrap(); // deduplicated: not an add
    tokio::time::advance(Duration::from_secs(2)).await;
    let a = queue.get().await.unwrap(); // queued 2 s
    tokio::time::advance(Duration::from_millis(500)).await;
    queue.done(&a); // worked 0.5 s
    let b = queue.get().await.unwrap(); // queued 2.5 s
    // The unfinished-work gauges refresh every 500 ms: the last refresh before this wakes is at
    // 3 s of work on `b`.
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let during = Exposition::parse(&openmetrics(&registry));
    assert!(
        (during.value(names::UNFINISHED_WORK, QUEUE) - 3.0).abs() < 0.01,
        "{during:?}"
    );
    assert!((during.value(names::LONGEST_RUNNING_PROCESSOR, QUEUE) - 3.0).abs() < 0.01);
    assert_eq!(during.value(names::DEPTH, QUEUE), 0.0);
    queue.done(&b); // worked 3.2 s

    // Two retries of `c`: the earlier deadline wins, so it is added once, 5 ms later.
    queue.add_rate_limited("c").unwrap();
    queue.add_rate_limited("c").unwrap();
    let c = within("get c", queue.get()).await.unwrap();
    tokio::time::advance(Duration::from_millis(20)).await;
    queue.done(&c); // worked 20 ms
    queue.forget(&c);
    tokio::time::sleep(Duration::from_secs(1)).await; // a refresh with nothing in flight

    let text = openmetrics(&registry);
    let exp = Exposition::parse(&text);

    // Names: exactly client-go's, no doubled `_total` or unit suffix; one label, `name`.
    assert!(
        !text.contains("_total_total") && !text.contains("_seconds_seconds"),
        "{text}"
    );
    for s in exp
        .samples
        .iter()
        .filter(|s| s.name.starts_with("workqueue_"))
    {
        assert_eq!(label_keys(s), ["name"], "{s:?}");
        assert_eq!(
            s.labels["name"], "jobs",
            "only the named queue reports: {s:?}"
        );
    }
    let got: BTreeSet<&str> = exp
        .samples
        .iter()
        .map(|s| s.name.as_str())
        .filter(|n| n.starts_with("workqueue_"))
        .collect();
    let histogram_series = |h: &str| {
        [
            format!("{h}_bucket"),
            format!("{h}_sum"),
            format!("{h}_count"),
        ]
    };
    let mut expected: BTreeSet<String> = [
        names::DEPTH,
        names::ADDS,
        names::UNFINISHED_WORK,
        names::LONGEST_RUNNING_PROCESSOR,
        names::RETRIES,
    ]
    .map(str::to_owned)
    .into();
    expected.extend(histogram_series(names::QUEUE_DURATION));
    expected.extend(histogram_series(names::WORK_DURATION));
    let expected: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
    assert_eq!(got, expected);

    // Types (OpenMetrics names a counter family without its `_total`).
    assert_eq!(exp.types["workqueue_depth"], "gauge");
    assert_eq!(exp.types["workqueue_adds"], "counter");
    assert_eq!(exp.types["workqueue_retries"], "counter");
    assert_eq!(exp.types[names::QUEUE_DURATION], "histogram");
    assert_eq!(exp.types[names::WORK_DURATION], "histogram");
    assert_eq!(exp.types[names::UNFINISHED_WORK], "gauge");
    assert_eq!(exp.types[names::LONGEST_RUNNING_PROCESSOR], "gauge");

    // Values.
    assert_eq!(exp.value(names::ADDS, QUEUE), 3.0);
    assert_eq!(exp.value(names::RETRIES, QUEUE), 2.0);
    assert_eq!(exp.value(names::DEPTH, QUEUE), 0.0);
    assert_eq!(exp.value(names::UNFINISHED_WORK, QUEUE), 0.0);
    assert_eq!(exp.value(names::LONGEST_RUNNING_PROCESSOR, QUEUE), 0.0);

    // Histograms: client-go's bounds plus +Inf, cumulative counts placing each observation.
    for h in [names::QUEUE_DURATION, names::WORK_DURATION] {
        let bounds: Vec<f64> = exp.buckets(h, QUEUE).iter().map(|b| b.0).collect();
        let mut want = names::DURATION_BUCKETS.to_vec();
        want.push(f64::INFINITY);
        assert_eq!(bounds, want, "{h} buckets");
        assert_eq!(exp.value(&format!("{h}_count"), QUEUE), 3.0);
    }
    // Queued: a 2 s, b 2.5 s, c under 5 ms.
    let q = names::QUEUE_DURATION;
    assert_eq!(exp.bucket(q, QUEUE, 0.01), 1.0);
    assert_eq!(exp.bucket(q, QUEUE, 1.0), 1.0);
    assert_eq!(exp.bucket(q, QUEUE, 10.0), 3.0);
    assert_eq!(exp.bucket(q, QUEUE, f64::INFINITY), 3.0);
    let sum = exp.value(&format!("{q}_sum"), QUEUE);
    assert!((sum - 4.5).abs() < 0.01, "{q}_sum {sum}");
    // Worked: a 0.5 s, b 3.2 s, c 20 ms.
    let w = names::WORK_DURATION;
    assert_eq!(exp.bucket(w, QUEUE, 0.01), 0.0);
    assert_eq!(exp.bucket(w, QUEUE, 0.1), 1.0);
    assert_eq!(exp.bucket(w, QUEUE, 1.0), 2.0);
    assert_eq!(exp.bucket(w, QUEUE, 10.0), 3.0);
    let sum = exp.value(&format!("{w}_sum"), QUEUE);
    assert!((sum - 3.72).abs() < 0.01, "{w}_sum {sum}");

    // The Prometheus text format (0.0.4) exposes the same series, with bucket bounds written as
    // a Go controller writes them (`strconv.FormatFloat(le, 'g', -1, 64)`), where OpenMetrics
    // writes `1e-8` and `1.0`.
    let classic = Exposition::parse(&prometheus_text(&registry));
    assert_eq!(normalized(&classic), normalized(&exp));
    assert_eq!(classic.types["workqueue_adds_total"], "counter");
    assert_eq!(
        le_strings(&classic, &format!("{q}_bucket"), QUEUE),
        [
            "1e-08", "1e-07", "1e-06", "1e-05", "0.0001", "0.001", "0.01", "0.1", "1", "10", "+Inf"
        ]
    );
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_series_have_client_go_names_labels_buckets_and_values() {
    const N: usize = 25;
    let server = FakeApiServer::start_with_core().await.unwrap();
    for i in 0..N {
        server.create(&config_map(&format!("cm-{i}"))).unwrap();
    }
    server
        .create(&Secret {
            metadata: ObjectMeta {
                name: Some("s".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();

    let mut registry = Registry::default();
    let metrics = Arc::new(PrometheusMetrics::new(&mut registry));
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default()
            .fifo_mode(FifoMode::InOrder)
            .fifo_mode_for::<Secret>(FifoMode::DeltaFifo)
            .informer_name("ctrl")
            .metrics_provider(metrics.clone()),
    );
    let config_maps = factory.informer::<ConfigMap>();
    factory.informer::<Secret>();
    factory.start();
    let synced = within("cache sync", factory.wait_for_cache_sync()).await;
    assert!(synced.values().all(|s| *s), "{synced:?}");
    assert_eq!(
        factory
            .lister::<ConfigMap>()
            .list(&Default::default())
            .len(),
        N
    );

    // One change through the watch, then wait for the cache to reflect it.
    server.create(&config_map("late")).unwrap();
    let server_rv = server.current_resource_version();
    within("the watch event", async {
        while config_maps.last_store_sync_resource_version() != server_rv.to_string() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    let text = openmetrics(&registry);
    let exp = Exposition::parse(&text);
    let cm: &[(&str, &str)] = &[
        ("name", "ctrl"),
        ("group", ""),
        ("version", "v1"),
        ("resource", "configmaps"),
    ];
    let secrets: &[(&str, &str)] = &[("resource", "secrets")];

    for s in exp
        .samples
        .iter()
        .filter(|s| s.name.starts_with("informer_"))
    {
        assert_eq!(
            label_keys(s),
            ["group", "name", "resource", "version"],
            "{s:?}"
        );
    }
    assert_eq!(exp.types[informer_names::QUEUED_ITEMS], "gauge");
    assert_eq!(exp.types[informer_names::PROCESSING_LATENCY], "histogram");
    assert_eq!(exp.types[informer_names::STORE_RESOURCE_VERSION], "gauge");
    assert!(!text.contains("_seconds_seconds"), "{text}");

    // Everything popped, the store at the server's resourceVersion.
    assert_eq!(exp.value(informer_names::QUEUED_ITEMS, cm), 0.0);
    assert_eq!(
        exp.value(informer_names::STORE_RESOURCE_VERSION, cm),
        server_rv as f64
    );

    // At least two batches processed: the initial list and the late add.
    let p = informer_names::PROCESSING_LATENCY;
    let count = exp.value(&format!("{p}_count"), cm);
    assert!(count >= 2.0, "{p}_count {count}");
    let buckets = exp.buckets(p, cm);
    let bounds: Vec<f64> = buckets.iter().map(|b| b.0).collect();
    let mut want = informer_names::PROCESSING_LATENCY_BUCKETS.to_vec();
    want.push(f64::INFINITY);
    assert_eq!(bounds, want);
    assert!(
        buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "cumulative: {buckets:?}"
    );
    assert_eq!(buckets.last().unwrap().1, count);
    let classic = Exposition::parse(&prometheus_text(&registry));
    assert_eq!(
        le_strings(&classic, &format!("{p}_bucket"), cm),
        [
            "0.001", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
            "+Inf"
        ]
    );

    // As client-go's DeltaFIFO, a DeltaFIFO informer reports no queue metrics.
    assert_eq!(exp.find(informer_names::QUEUED_ITEMS, secrets).count(), 0);
    assert_eq!(exp.find(&format!("{p}_count"), secrets).count(), 0);

    factory.shutdown().await;
}
