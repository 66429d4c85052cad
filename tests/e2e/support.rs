//! A throwaway Kubernetes control plane for end-to-end tests: one etcd and one kube-apiserver,
//! built by `scripts/build-k8s.sh`, listening on free loopback ports, with all their state in a
//! temporary directory that is removed when the [`Cluster`] is dropped (also when a test panics).
//!
//! The e2e tests are `#[ignore]`d, so a plain `cargo test` lists them as ignored; run with
//! `--include-ignored` (as `.ci/e2e.sh` does), they need `KUBE_INFORMER_E2E_BIN` naming the
//! directory holding the `etcd` and `kube-apiserver` binaries, and fail at once without it.
//!
//! Authentication uses a static token file with two users: `admin` (group `system:masters`,
//! allowed everything) and `restricted` (no RBAC bindings, so every resource request is refused
//! with 403). Serving certificates come from a throwaway CA made with the `openssl` CLI; the
//! clients trust that CA, nothing skips TLS verification.

#![allow(
    dead_code,
    reason = "helpers for the tests to come; not every test uses all"
)]

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kube::Client;
use kube::config::{AuthInfo, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The environment variable naming the directory with the `etcd` and `kube-apiserver` binaries.
pub const BIN_ENV: &str = "KUBE_INFORMER_E2E_BIN";
/// Set to keep the temporary directory (certificates, etcd data, logs) after the test.
pub const KEEP_ENV: &str = "KUBE_INFORMER_E2E_KEEP";

/// The bearer token of `admin` (for child processes that authenticate on their own).
pub const ADMIN_TOKEN: &str = "e2e-admin-token";
const RESTRICTED_TOKEN: &str = "e2e-restricted-token";
/// A cold kube-apiserver start on a loaded 2-core machine takes well under this.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// The bin dir from [`BIN_ENV`].
///
/// # Panics
/// When [`BIN_ENV`] is unset or empty, with a message saying how to get the binaries: an e2e
/// test that was asked to run (`--include-ignored`) must fail, not pass having tested nothing.
pub fn bin_dir(test: &str) -> PathBuf {
    match std::env::var_os(BIN_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => panic!(
            "{test}: {BIN_ENV} is not set, so there is no kube-apiserver and etcd to test against. \
             Run `bash .ci/e2e.sh` (it builds them and runs the e2e tests), or build them with \
             `bin=\"$(bash scripts/build-k8s.sh)\"` and run \
             `KUBE_INFORMER_E2E_BIN=\"$bin\" cargo test --all-features --test e2e -- \
             --include-ignored --test-threads=1`; see tests/e2e/README.md"
        ),
    }
}

/// A running etcd + kube-apiserver pair. Dropping it kills both and removes its directory.
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    etcd_port: u16,
    apiserver_port: u16,
    ca_der: Vec<u8>,
    /// `--feature-gates` of kube-apiserver, kept across restarts (empty: the defaults).
    feature_gates: String,
}

impl Cluster {
    /// Starts a cluster for `test` from the binaries in [`BIN_ENV`].
    ///
    /// # Panics
    /// When [`BIN_ENV`] is unset (see [`bin_dir`]) or the cluster cannot be started (with the
    /// log tail): a misconfigured run must fail loudly, never pass having run nothing.
    pub async fn start_for(test: &str) -> Cluster {
        Cluster::start_for_with_gates(test, "").await
    }

    /// As [`Cluster::start_for`], with kube-apiserver's `--feature-gates` set to `gates` (for
    /// example `ShardedListAndWatch=true`).
    pub async fn start_for_with_gates(test: &str, gates: &str) -> Cluster {
        let bin = bin_dir(test);
        match Cluster::start(&bin, gates).await {
            Ok(cluster) => cluster,
            Err(err) => panic!("{test}: cannot start the e2e cluster: {err}"),
        }
    }

    /// Starts etcd and kube-apiserver from `bin` (with `--feature-gates=gates` unless empty)
    /// and waits until the apiserver is ready.
    pub async fn start(bin: &Path, gates: &str) -> Result<Cluster, String> {
        for name in ["etcd", "kube-apiserver"] {
            if !bin.join(name).is_file() {
                return Err(format!(
                    "{} not found (run scripts/build-k8s.sh)",
                    bin.join(name).display()
                ));
            }
        }
        let dir = make_temp_dir()?;
        // From here on `Drop` cleans up whatever was started, whichever step fails.
        let mut cluster = Cluster {
            dir,
            bin: bin.to_path_buf(),
            etcd: None,
            apiserver: None,
            etcd_port: 0,
            apiserver_port: free_port()?,
            ca_der: Vec::new(),
            feature_gates: gates.to_owned(),
        };
        cluster.write_credentials()?;
        cluster.start_etcd().await?;
        cluster.start_apiserver().await?;
        Ok(cluster)
    }

    /// The apiserver's URL, e.g. `https://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver_port)
    }

    /// The etcd client URL (plain HTTP on loopback).
    pub fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_port)
    }

    /// The temporary directory holding certificates, etcd data and the `*.log` files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The test CA's certificate (PEM), for clients outside this process.
    pub fn ca_pem(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// A client for `admin`, member of `system:masters`: allowed everything.
    pub fn admin(&self) -> Client {
        self.client_with_token(ADMIN_TOKEN)
    }

    /// A client for `restricted`, a user without any RBAC binding: every resource request is
    /// refused with 403 Forbidden.
    pub fn restricted(&self) -> Client {
        self.client_with_token(RESTRICTED_TOKEN)
    }

    /// The `kube::Config` behind [`Cluster::admin`], to tune (or point through a proxy) before
    /// building a client.
    pub fn admin_config(&self) -> Config {
        self.config_with_token(ADMIN_TOKEN)
    }

    /// The loopback port kube-apiserver listens on (the same across restarts).
    pub fn apiserver_port(&self) -> u16 {
        self.apiserver_port
    }

    /// A `kube::Config` for this cluster authenticated with a bearer `token`; tests can tune it
    /// (timeouts, retries) before building a client.
    pub fn config_with_token(&self, token: &str) -> Config {
        let mut config = Config::new(self.url().parse().expect("the cluster URL is a valid URI"));
        config.root_cert = Some(vec![self.ca_der.clone()]);
        // `AuthInfo::token` is a `secrecy::SecretString`; going through serde avoids a direct
        // dependency on `secrecy` just for tests.
        config.auth_info =
            serde_json::from_value::<AuthInfo>(serde_json::json!({ "token": token }))
                .expect("an AuthInfo with a token deserializes");
        config
    }

    /// Writes a kubeconfig for `admin` (the test CA by file, the bearer token) into the
    /// cluster's directory and returns its path, for child processes (`KUBECONFIG`).
    pub fn write_kubeconfig(&self) -> Result<PathBuf, String> {
        self.write_kubeconfig_via(&self.url(), "kubeconfig")
    }

    /// [`write_kubeconfig`](Self::write_kubeconfig) with another server URL (a
    /// [`Proxy`](crate::proxy::Proxy) in front of the apiserver), as file `name`.
    pub fn write_kubeconfig_via(&self, server: &str, name: &str) -> Result<PathBuf, String> {
        let path = self.dir.join(name);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: admin\n  user:\n    token: {ADMIN_TOKEN}\n\
             contexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: admin\n    \
             namespace: default\ncurrent-context: e2e\n",
            server,
            self.dir.join("ca.crt").display()
        );
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }

    fn client_with_token(&self, token: &str) -> Client {
        Client::try_from(self.config_with_token(token))
            .expect("a client for the e2e cluster builds")
    }

    /// Kills kube-apiserver (SIGKILL, like a crash: connections drop without a goodbye) and
    /// starts it again on the same port with the same etcd, then waits until it is ready.
    /// Existing clients keep working: they reconnect to the same URL.
    pub async fn restart_apiserver(&mut self) -> Result<(), String> {
        self.stop_apiserver();
        self.start_apiserver().await
    }

    /// Kills kube-apiserver, leaving etcd running; [`Cluster::start_apiserver`] brings it back.
    pub fn stop_apiserver(&mut self) {
        if let Some(child) = self.apiserver.take() {
            kill_and_wait(child);
        }
    }

    /// Starts kube-apiserver (if stopped) and waits until its `/readyz` answers `ok`.
    pub async fn start_apiserver(&mut self) -> Result<(), String> {
        if self.apiserver.is_some() {
            return Ok(());
        }
        let d = &self.dir;
        let path = |name: &str| d.join(name).display().to_string();
        let args = [
            format!("--etcd-servers={}", self.etcd_url()),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", self.apiserver_port),
            format!("--cert-dir={}", path("apiserver-certs")),
            format!("--tls-cert-file={}", path("server.crt")),
            format!("--tls-private-key-file={}", path("server.key")),
            format!("--token-auth-file={}", path("tokens.csv")),
            "--authorization-mode=RBAC".to_owned(),
            format!("--service-account-key-file={}", path("sa.pub")),
            format!("--service-account-signing-key-file={}", path("sa.key")),
            "--service-account-issuer=https://kube-informer-e2e.invalid".to_owned(),
            // The ServiceAccount admission plugin wants a `default` service account, which only
            // kube-controller-manager would create; without it pods could not be created.
            "--disable-admission-plugins=ServiceAccount".to_owned(),
            // No other apiserver advertises itself here, and a loopback address is refused in
            // the `kubernetes` Endpoints object: skip that reconciliation altogether.
            "--endpoint-reconciler-type=none".to_owned(),
            // Compaction is up to the tests (`Cluster::compact`), so that 410 Gone is on demand.
            "--etcd-compaction-interval=0".to_owned(),
            "--profiling=false".to_owned(),
        ];
        let mut args = args.to_vec();
        if !self.feature_gates.is_empty() {
            args.push(format!("--feature-gates={}", self.feature_gates));
        }
        self.apiserver = Some(self.spawn("kube-apiserver", &args)?);
        self.wait_apiserver_ready().await
    }

    /// Compacts etcd up to its current revision, physically, so that every older
    /// resourceVersion is gone from storage. Returns the revision compacted to.
    ///
    /// Goes through etcd's gRPC gateway (JSON over HTTP on the client port, on by default), so
    /// no `etcdctl` is needed. The apiserver's own periodic compaction is off
    /// (`--etcd-compaction-interval=0`). Note that the apiserver's watch cache keeps serving its
    /// in-memory window after a compaction; [`Cluster::restart_apiserver`] drops that window.
    pub async fn compact(&self) -> Result<i64, String> {
        let range = self.etcd_post("/v3/kv/range", r#"{"key":"AA=="}"#).await?;
        let revision = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse::<i64>().ok())
            .ok_or_else(|| format!("no header.revision in etcd's range answer: {range}"))?;
        let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
        self.etcd_post("/v3/kv/compaction", &body).await?;
        Ok(revision)
    }

    /// POSTs `body` to etcd's gRPC gateway and returns the parsed JSON answer (an error on any
    /// non-200 status, with etcd's message).
    async fn etcd_post(&self, path: &str, body: &str) -> Result<serde_json::Value, String> {
        let (status, answer) = http_request(self.etcd_port, "POST", path, body).await?;
        let json: serde_json::Value = serde_json::from_str(&answer)
            .map_err(|e| format!("etcd {path}: status {status}, not JSON ({e}): {answer}"))?;
        if status != 200 {
            return Err(format!("etcd {path}: status {status}: {answer}"));
        }
        Ok(json)
    }

    fn write_credentials(&mut self) -> Result<(), String> {
        let d = self.dir.clone();
        std::fs::write(
            d.join("tokens.csv"),
            format!(
                "{ADMIN_TOKEN},admin,uid-admin,\"system:masters\"\n\
                 {RESTRICTED_TOKEN},restricted,uid-restricted\n"
            ),
        )
        .map_err(|e| format!("tokens.csv: {e}"))?;
        std::fs::write(
            d.join("server.ext"),
            "basicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth\n\
             subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .map_err(|e| format!("server.ext: {e}"))?;
        // P-256 keys: quick to generate, and accepted by rustls and by the apiserver's
        // service-account token signer alike.
        let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        for command in [
            &format!(
                "req -x509 {ec} -keyout ca.key -out ca.crt -days 2 -subj /CN=kube-informer-e2e-ca \
                 -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign"
            ),
            &format!("req {ec} -keyout server.key -out server.csr -subj /CN=kube-apiserver"),
            "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
             -days 2 -extfile server.ext",
            "x509 -in ca.crt -outform DER -out ca.der",
            "ecparam -name prime256v1 -genkey -noout -out sa.key",
            "ec -in sa.key -pubout -out sa.pub",
        ] {
            openssl(&d, command)?;
        }
        self.ca_der = std::fs::read(d.join("ca.der")).map_err(|e| format!("ca.der: {e}"))?;
        Ok(())
    }

    async fn start_etcd(&mut self) -> Result<(), String> {
        self.etcd_port = free_port()?;
        let peer = format!("http://127.0.0.1:{}", free_port()?);
        let client = self.etcd_url();
        let args = [
            "--name=e2e".to_owned(),
            format!("--data-dir={}", self.dir.join("etcd").display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=e2e={peer}"),
            // Durability is pointless for a throwaway cluster and fsync is slow on CI disks.
            "--unsafe-no-fsync".to_owned(),
            "--log-level=warn".to_owned(),
        ];
        self.etcd = Some(self.spawn("etcd", &args)?);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok((200, body)) = http_request(self.etcd_port, "GET", "/health", "").await
                && body.contains(r#""health":"true""#)
            {
                return Ok(());
            }
            check_alive(&mut self.etcd, "etcd", &self.dir.join("etcd.log"))?;
            if Instant::now() > deadline {
                return Err(format!(
                    "etcd not healthy after {READY_TIMEOUT:?}{}",
                    log_tail(&self.dir.join("etcd.log"))
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_apiserver_ready(&mut self) -> Result<(), String> {
        let admin = self.admin();
        let log = self.dir.join("kube-apiserver.log");
        let readyz = kube::core::Request::new("")
            .get("readyz", &Default::default())
            .map_err(|e| format!("readyz request: {e}"))?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let last = match admin.request_text(readyz.clone()).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => body,
                Err(err) => err.to_string(),
            };
            check_alive(&mut self.apiserver, "kube-apiserver", &log)?;
            if Instant::now() > deadline {
                return Err(format!(
                    "kube-apiserver not ready after {READY_TIMEOUT:?}: {last}{}",
                    log_tail(&log)
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Spawns the binary `name` from the bin dir, appending its output to `<name>.log` (appending,
    /// so a restarted apiserver's log follows the previous one's).
    fn spawn(&self, name: &str, args: &[String]) -> Result<Child, String> {
        let log_path = self.dir.join(format!("{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("{}: {e}", log_path.display()))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("{}: {e}", log_path.display()))?;
        Command::new(self.bin.join(name))
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("cannot spawn {name}: {e}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The apiserver first: it would otherwise log etcd connection errors while stopping.
        self.stop_apiserver();
        if let Some(child) = self.etcd.take() {
            kill_and_wait(child);
        }
        if std::thread::panicking() {
            let _ = writeln!(
                std::io::stderr(),
                "the test panicked; e2e cluster dir {} (set {KEEP_ENV}=1 to keep it):{}",
                self.dir.display(),
                log_tail(&self.dir.join("kube-apiserver.log"))
            );
        }
        if std::env::var_os(KEEP_ENV).is_some() {
            let _ = writeln!(
                std::io::stderr(),
                "e2e cluster dir kept: {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn kill_and_wait(mut child: Child) {
    let _ = child.kill();
    let deadline = Instant::now() + STOP_TIMEOUT;
    // SIGKILL cannot be ignored, so this only waits for the kernel to reap the process; poll
    // rather than block forever should something be very wrong.
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Fails with the log's tail when the process behind `child` has exited.
fn check_alive(child: &mut Option<Child>, name: &str, log: &Path) -> Result<(), String> {
    if let Some(c) = child
        && let Ok(Some(status)) = c.try_wait()
    {
        *child = None;
        return Err(format!("{name} exited with {status}{}", log_tail(log)));
    }
    Ok(())
}

/// The last lines of a log file, prefixed with a newline, for error messages.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = format!("\n--- last lines of {} ---", path.display());
    for line in &lines[lines.len().saturating_sub(40)..] {
        let _ = write!(out, "\n{line}");
    }
    out
}

/// Runs `openssl` in `dir` with the whitespace-separated arguments of `command`.
fn openssl(dir: &Path, command: &str) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(command.split_whitespace())
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run openssl (is it installed?): {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("openssl {command}: {stderr}"));
    }
    Ok(())
}

/// A loopback port that was free a moment ago. Picked below Linux's ephemeral range (32768 and
/// up), which outgoing connections take their local ports from: an apiserver restarted on its
/// port must find it free again, and the OS would hand out ports from that range (the OS picks
/// one only if none of a few hundred tries there is free).
fn free_port() -> Result<u16, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id().wrapping_mul(7919);
    for _ in 0..300 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (seed.wrapping_add(n.wrapping_mul(104_729)) % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("free port: {e}"))
}

fn make_temp_dir() -> Result<PathBuf, String> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        "kube-informer-e2e-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let dir = std::env::temp_dir().join(name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// A minimal HTTP/1.0 exchange with a loopback server (etcd speaks plain HTTP): returns the
/// status code and the body. HTTP/1.0 keeps the answer unchunked and closes the connection
/// after it. Enough for etcd's small JSON answers; avoids an HTTP client crate.
async fn http_request(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), String> {
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| {
            format!("{method} {path} on port {port}: no answer in 10s, likely deadlocked")
        })?
        .map_err(|e| format!("{method} {path} on port {port}: {e}"))?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path}: not an HTTP answer: {head}"))?;
    Ok((status, body.to_owned()))
}
