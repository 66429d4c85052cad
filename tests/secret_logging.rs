//! Secure-by-default logging: with every `tracing` event captured at TRACE, Secret informers that
//! go through creates, updates, deletes, malformed watch lines, 500s and an undecodable Secret
//! never print a Secret's data (keys and resourceVersions only). Also checks that the crate never
//! turns TLS verification off.
#![cfg(feature = "testing")]

use std::{
    collections::BTreeMap,
    future::Future,
    io,
    path::Path,
    sync::{Arc, OnceLock},
    time::Duration,
};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{Api, core::ApiResource};
use kube_informer::{
    ApiListerWatcher, BackoffConfig, FactoryConfig, InformerConfig, ReflectorConfig,
    SharedIndexInformer, SharedInformerFactory, testing::FakeApiServer,
};
use parking_lot::Mutex;
use serde_json::json;
use tracing_subscriber::fmt::MakeWriter;

const DEADLOCK: &str = "likely deadlocked";
/// In `data` (base64-encoded on the wire), `stringData` and an annotation.
const MARKER: &str = "s3cr3t-canary-7f3a9c";
/// The marker in the base64 form `data` carries on the wire.
const MARKER_B64: &str = "czNjcjN0LWNhbmFyeS03ZjNhOWM=";
const ANNOTATION_MARKER: &str = "annotation-canary-55e1";

/// Everything every thread logs, as the fmt layer writes it.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The process-wide capture: a global subscriber, since the informers log from tokio workers and
/// from their handler threads.
fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(capture.clone())
            .init();
        capture
    })
}

fn secret(name: &str, generation: u32) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some("default".into());
    s.metadata.annotations = Some(BTreeMap::from([(
        "note".to_owned(),
        ANNOTATION_MARKER.to_owned(),
    )]));
    s.data = Some(BTreeMap::from([
        (
            "password".to_owned(),
            ByteString(MARKER.as_bytes().to_vec()),
        ),
        (
            "generation".to_owned(),
            ByteString(generation.to_string().into_bytes()),
        ),
    ]));
    s.string_data = Some(BTreeMap::from([("token".to_owned(), MARKER.to_owned())]));
    s
}

fn reflector_config() -> ReflectorConfig {
    // Fast retries so each fault is recovered from within the test's timeouts.
    ReflectorConfig::default().backoff(BackoffConfig {
        initial: Duration::from_millis(5),
        max: Duration::from_millis(50),
        ..BackoffConfig::default()
    })
}

/// Waits until `cond` holds, failing the test rather than hanging.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: {DEADLOCK}"));
}

async fn within<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .expect(DEADLOCK)
}

fn decode_errors(captured: &Capture) -> usize {
    String::from_utf8_lossy(&captured.0.lock())
        .matches("cannot decode")
        .count()
}

/// The resourceVersion both informers hold for `default/<name>`, if they agree.
fn cached_rv(informers: &[&SharedIndexInformer<Secret>], name: &str) -> Option<String> {
    let rvs: Vec<Option<String>> = informers
        .iter()
        .map(|i| {
            i.lister()
                .get_by_key(&format!("default/{name}"))
                .and_then(|s| s.metadata.resource_version.clone())
        })
        .collect();
    rvs.windows(2)
        .all(|w| w[0] == w[1])
        .then(|| rvs[0].clone())
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_informers_never_log_secret_data_at_trace() {
    let captured = capture();
    // In protobuf (the default for Secrets) and in JSON.
    scenario(captured, true).await;
    scenario(captured, false).await;

    let log = String::from_utf8_lossy(&captured.0.lock()).into_owned();
    // The capture works: the failures above were logged, with resourceVersions.
    for expected in [
        "list/watch failed; retrying",
        "cannot decode",
        "500",
        "resource_version=",
        "/secrets",
    ] {
        assert!(
            log.contains(expected),
            "capture lacks {expected:?}; captured:\n{log}"
        );
    }
    for secret_text in [MARKER, MARKER_B64, ANNOTATION_MARKER] {
        let hits: Vec<&str> = log.lines().filter(|l| l.contains(secret_text)).collect();
        assert!(
            hits.is_empty(),
            "object contents {secret_text:?} logged:\n{}",
            hits.join("\n")
        );
    }
}

/// Two informers of Secrets (factory and by hand) through a malformed watch event, failed
/// requests and, in JSON, undecodable Secrets; `protobuf` chooses the server's encoding.
async fn scenario(captured: &'static Capture, protobuf: bool) {
    let server = FakeApiServer::start_with_core().await.unwrap();
    server.set_protobuf_supported(protobuf);

    let faults = server.faults();
    server.create(&secret("before-start", 1)).unwrap();

    // One informer through the factory, one built by hand, each with a handler.
    let factory = SharedInformerFactory::new(
        server.client(),
        FactoryConfig::default().reflector(reflector_config()),
    );
    let from_factory = factory.informer::<Secret>();
    let by_hand = SharedIndexInformer::new(
        ApiListerWatcher::new(Api::<Secret>::namespaced(server.client(), "default")),
        InformerConfig::default().reflector(reflector_config()),
    );
    for informer in [&from_factory, &by_hand] {
        informer
            .add_event_handler(kube_informer::ResourceEventHandlerFuncs::new())
            .unwrap();
    }
    let informers = [&from_factory, &by_hand];
    factory.start();
    by_hand.start();
    within(factory.wait_for_cache_sync()).await;
    assert!(within(by_hand.wait_for_cache_sync()).await);

    // A create, preceded on the watch by a line that is not JSON.
    faults.malformed_line_next();
    let created = server.create(&secret("s1", 1)).unwrap();
    let rv = created.metadata.resource_version.clone();
    eventually("create seen", || cached_rv(&informers, "s1") == rv).await;

    // Watches cut, then their restarts and relists fail with 500s.
    faults.fail_next(4, 500);
    faults.drop_all_watches();
    let updated = server.update(&secret("s1", 2)).unwrap();
    let rv = updated.metadata.resource_version.clone();
    eventually("update seen", || cached_rv(&informers, "s1") == rv).await;

    // Secrets the informers cannot decode: data that is a string where a map belongs (serde's
    // message quotes it), and data that is not base64 (the message names a byte). The informers
    // report and skip them; the decode errors must not quote the value. Only in JSON: such a
    // Secret has no protobuf form (kube-apiserver could not have stored it).
    let secrets = ApiResource::erase::<Secret>(&());
    let corrupt = if protobuf {
        vec![]
    } else {
        vec![
            ("corrupt-type", json!(MARKER)),
            ("corrupt-b64", json!({"password": format!("{MARKER}!")})),
        ]
    };
    for (name, data) in corrupt {
        let logged = decode_errors(captured);
        server
            .create_value(json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": "default"},
                "data": data,
            }))
            .unwrap();
        // Both informers report it (once: they skip it rather than re-watch).
        eventually("decode errors logged", || {
            decode_errors(captured) >= logged + 2
        })
        .await;
        server
            .delete_value(&secrets, Some("default"), name)
            .unwrap();
        let marker = server.create(&secret(&format!("after-{name}"), 3)).unwrap();
        let rv = marker.metadata.resource_version.clone();
        eventually("recovered", || {
            cached_rv(&informers, &format!("after-{name}")) == rv
        })
        .await;
    }

    server.delete::<Secret>(Some("default"), "s1").unwrap();
    eventually("delete seen", || {
        informers
            .iter()
            .all(|i| i.lister().get_by_key("default/s1").is_none())
    })
    .await;

    within(factory.shutdown()).await;
    within(by_hand.shutdown()).await;
    let served_protobuf = server.requests().iter().any(|r| r.served_protobuf());
    assert_eq!(
        served_protobuf, protobuf,
        "the informers spoke the wrong encoding"
    );
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The crate leaves TLS to the caller's `kube::Client` and never weakens it: no source file names
/// a verification bypass (kube's `Config::accept_invalid_certs`, rustls' `dangerous()` API,
/// native-tls / openssl `danger_accept_invalid_*`, `SslVerifyMode::NONE`).
#[test]
fn crate_never_disables_tls_verification() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 10, "found only {files:?}");
    let forbidden = [
        "accept_invalid_certs",
        "accept_invalid_hostnames",
        "danger",
        "NoCertificateVerification",
        "ServerCertVerifier",
        "SslVerifyMode",
        "insecure",
    ];
    let mut hits = Vec::new();
    // The generated protobuf schema and decoders name API fields (`insecureSkipTLSVerify` of
    // APIService, `insecureSkipTLSVerifyBackend` of PodLogOptions), not TLS settings of this crate.
    let generated = [
        src.join("protobuf/schema/generated.rs"),
        src.join("protobuf/direct/generated.rs"),
    ];
    for file in files.iter().filter(|f| !generated.contains(f)) {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for word in forbidden {
                if line.contains(word) {
                    hits.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "TLS verification bypass:\n{}",
        hits.join("\n")
    );
}
