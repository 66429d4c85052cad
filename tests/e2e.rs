//! End-to-end tests against a real etcd + kube-apiserver (see `tests/e2e/README.md`).
//!
//! Every test is `#[ignore]`d: a plain `cargo test` reports them as ignored, not as passed.
//! `bash .ci/e2e.sh` builds the binaries and runs them with `--include-ignored`; run by hand,
//! they need `KUBE_INFORMER_E2E_BIN` set to the bin dir printed by `scripts/build-k8s.sh`, and
//! each one fails at once (saying how to get the binaries) when it is not set:
//!
//! ```sh
//! bin="$(bash scripts/build-k8s.sh)"
//! KUBE_INFORMER_E2E_BIN="$bin" cargo test --all-features --test e2e -- --include-ignored --test-threads=1
//! ```

#[path = "e2e/common.rs"]
mod common;
#[path = "e2e/conformance_diff.rs"]
mod conformance_diff;
#[path = "e2e/faults.rs"]
mod faults;
#[path = "e2e/proxy.rs"]
mod proxy;
#[path = "e2e/stress.rs"]
mod stress;
#[path = "e2e/support.rs"]
mod support;

#[path = "e2e/compact.rs"]
mod compact;
#[path = "e2e/conformance.rs"]
mod conformance;
#[path = "e2e/crd.rs"]
mod crd;
#[path = "e2e/leader.rs"]
mod leader;
#[path = "e2e/protobuf.rs"]
mod protobuf;
#[path = "e2e/recovery.rs"]
mod recovery;
#[path = "e2e/sharding.rs"]
mod sharding;
#[path = "e2e/streaming.rs"]
mod streaming;
#[path = "e2e/typed.rs"]
mod typed;

use std::time::Instant;

use common::{config_map, within};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams, VersionMatch};
use support::Cluster;

fn api_status(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The harness itself: the cluster starts, admin can read and write, `restricted` is refused,
/// the apiserver restarts against the same etcd, and compaction makes old versions 410 Gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kube-apiserver + etcd: run bash .ci/e2e.sh"]
async fn cluster_smoke_admin_restricted_restart_compact() {
    let started = Instant::now();
    let mut cluster = within("start", Cluster::start_for("cluster_smoke")).await;
    eprintln!(
        "e2e cluster ready in {:?} at {}",
        started.elapsed(),
        cluster.url()
    );

    let admin = cluster.admin();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let names: Vec<String> = within("list namespaces", namespaces.list(&ListParams::default()))
        .await
        .expect("admin lists namespaces")
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect();
    assert!(
        names.iter().any(|n| n == "default"),
        "namespaces: {names:?}"
    );

    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let created = within(
        "create",
        cms.create(&PostParams::default(), &config_map("smoke", "one")),
    )
    .await
    .expect("admin creates a ConfigMap");
    let got = within("get", cms.get("smoke"))
        .await
        .expect("admin gets the ConfigMap");
    assert_eq!(got.data, created.data);
    let first_rv = created
        .metadata
        .resource_version
        .clone()
        .expect("created object has an RV");

    // `restricted` has no RBAC binding: 403 on reads and writes.
    let denied: Api<ConfigMap> = Api::namespaced(cluster.restricted(), "default");
    let err = within("restricted get", denied.get("smoke"))
        .await
        .expect_err("restricted is refused");
    assert_eq!(api_status(&err), Some(403), "{err}");
    let err = within("restricted list", denied.list(&ListParams::default()))
        .await
        .expect_err("restricted is refused");
    assert_eq!(api_status(&err), Some(403), "{err}");

    // Restart: the object survives (same etcd) and the old client reconnects to the same URL.
    let restart = Instant::now();
    within("restart", cluster.restart_apiserver())
        .await
        .expect("apiserver restarts");
    eprintln!("kube-apiserver restarted in {:?}", restart.elapsed());
    let got = within("get after restart", cms.get("smoke"))
        .await
        .expect("get after restart");
    assert_eq!(got.data, created.data);

    // Compaction: write a newer version, compact etcd, then an exact read at the first version
    // must be refused with 410 Gone once the apiserver no longer has it in its watch cache.
    let mut updated = got.clone();
    updated.data = config_map("smoke", "two").data;
    within(
        "replace",
        cms.replace("smoke", &PostParams::default(), &updated),
    )
    .await
    .expect("admin updates the ConfigMap");
    let revision = within("compact", cluster.compact())
        .await
        .expect("etcd compacts");
    assert!(revision >= first_rv.parse::<i64>().expect("etcd RVs are integers"));
    within("restart", cluster.restart_apiserver())
        .await
        .expect("apiserver restarts after compaction");
    let exact = ListParams::default()
        .at(&first_rv)
        .matching(VersionMatch::Exact);
    let err = within("list at compacted RV", cms.list(&exact))
        .await
        .expect_err("a compacted RV is gone");
    assert_eq!(api_status(&err), Some(410), "{err}");
}
