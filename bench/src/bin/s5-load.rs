//! S5 loader: creates `--pods` Pods of the seeded fixture (`podgen`, `--seed`, default 42 like
//! `replay-server`) in namespace `--namespace` of the real cluster named by `--kubeconfig`, then
//! writes each Pod's status, `--concurrency` requests in flight (default 16).
//!
//! The apiserver owns some fields, so each fixture Pod is adapted: server-set metadata
//! (`resourceVersion`, `uid`, `creationTimestamp`, `managedFields`) is dropped, the namespace is
//! the one given, and the status (ignored on create) is sent afterwards on the `status`
//! subresource, so the cluster's Pods carry conditions and container statuses like S1's. The
//! fixture names its service-account token mounts independently of the volume (the replay server
//! never validates), so they are renamed to the Pod's `kube-api-access-*` volume.

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use kube_informer_bench::{kubeconfig_client, parse_args, pod_json};

#[tokio::main]
async fn main() {
    let a = parse_args();
    let get = |k: &str, d: &str| a.get(k).cloned().unwrap_or_else(|| d.to_owned());
    let kubeconfig = a.get("kubeconfig").expect("--kubeconfig").clone();
    let n: usize = get("pods", "10000").parse().expect("--pods");
    let seed: u64 = get("seed", "42").parse().expect("--seed");
    let concurrency: usize = get("concurrency", "16").parse().expect("--concurrency");
    let ns = get("namespace", "bench");
    let client = kubeconfig_client(&kubeconfig).await;

    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create namespace");

    let pods = Api::<Pod>::namespaced(client, &ns);
    let started = std::time::Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            let ns = ns.clone();
            async move {
                let mut value = pod_json(seed, i, "0");
                let status = value.as_object_mut().expect("pod object").remove("status");
                let meta = value["metadata"].as_object_mut().expect("metadata");
                for server_set in [
                    "resourceVersion",
                    "uid",
                    "creationTimestamp",
                    "managedFields",
                ] {
                    meta.remove(server_set);
                }
                meta.insert("namespace".into(), ns.into());
                fix_token_mounts(&mut value);
                let pod: Pod = serde_json::from_value(value).expect("fixture pod");
                let name = pod.metadata.name.clone().expect("name");
                pods.create(&PostParams::default(), &pod).await?;
                if let Some(status) = status {
                    let patch = Patch::Merge(serde_json::json!({ "status": status }));
                    pods.patch_status(&name, &PatchParams::default(), &patch)
                        .await?;
                }
                Ok::<_, kube::Error>(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<()>()
        .await
        .expect("create pods");
    eprintln!(
        "s5-load: {n} pods in namespace {ns} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Points every `kube-api-access-*` volume mount at the Pod's volume of that kind.
fn fix_token_mounts(pod: &mut serde_json::Value) {
    const PREFIX: &str = "kube-api-access-";
    let spec = &mut pod["spec"];
    let Some(volume) = spec["volumes"].as_array().and_then(|vs| {
        vs.iter()
            .filter_map(|v| v["name"].as_str())
            .find(|n| n.starts_with(PREFIX))
            .map(str::to_owned)
    }) else {
        return;
    };
    for container in spec["containers"].as_array_mut().into_iter().flatten() {
        for mount in container["volumeMounts"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if mount["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(PREFIX))
            {
                mount["name"] = volume.clone().into();
            }
        }
    }
}
