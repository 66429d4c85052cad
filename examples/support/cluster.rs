//! Shared by the examples (not an example itself: cargo builds only `examples/*.rs` and
//! `examples/*/main.rs`).

use kube::Client;

/// The configured cluster's client (kubeconfig or in-cluster), or `None` when
/// `KUBE_INFORMER_FAKE` is set or no cluster is configured at all (no `KUBECONFIG`, no
/// `~/.kube/config`, not in a pod): then the example uses the fake API server. A configuration
/// that is there but does not load (a broken kubeconfig) is an error, not a silent fallback.
pub async fn cluster_client() -> Result<Option<Client>, kube::Error> {
    use kube::config::KubeconfigError::{FindPath, ReadConfig};
    if std::env::var_os("KUBE_INFORMER_FAKE").is_some() {
        return Ok(None);
    }
    let set = |var| std::env::var_os(var).is_some_and(|v| !v.is_empty());
    match Client::try_default().await {
        Err(kube::Error::InferConfig(e))
            if !set("KUBECONFIG") && !set("KUBERNETES_SERVICE_HOST") =>
        {
            // No kubeconfig file at all, as opposed to one that could not be loaded.
            match std::error::Error::source(&e).and_then(|s| s.downcast_ref()) {
                Some(FindPath) => Ok(None),
                Some(ReadConfig(io, _)) if io.kind() == std::io::ErrorKind::NotFound => Ok(None),
                _ => Err(kube::Error::InferConfig(e)),
            }
        }
        other => other.map(Some),
    }
}
