//! What each client measures about itself: CPU time (getrusage, user+sys, all threads), wall
//! time since `main` started, and resident memory from `/proc/self/status` (`VmHWM` is the peak;
//! writing `5` to `/proc/self/clear_refs` resets it, which is how S4 isolates the relist peak).

use std::{collections::HashMap, fmt::Write as _, time::Instant};

/// Clock and counters of one client process.
pub struct Meter {
    start: Instant,
    fields: String,
}

impl Default for Meter {
    fn default() -> Self {
        Self::new()
    }
}

impl Meter {
    /// Starts the wall clock; call first thing in `main`.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            fields: String::new(),
        }
    }

    /// Seconds since [`new`](Self::new).
    pub fn wall(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// User + system CPU seconds of the whole process so far.
    pub fn cpu() -> f64 {
        // getrusage has no safe wrapper in std; the library forbids `unsafe`, this bench crate
        // does not need to.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        assert_eq!(rc, 0, "getrusage");
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }

    /// A `/proc/self/status` field in kB (`VmRSS`, `VmHWM`).
    pub fn status_kb(field: &str) -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Resets the peak-RSS mark (`VmHWM`) to the current RSS.
    pub fn reset_hwm() {
        if let Err(e) = std::fs::write("/proc/self/clear_refs", "5") {
            eprintln!("cannot reset VmHWM: {e}");
        }
    }

    /// Records `key=value` for the final `RESULT` line.
    pub fn put(&mut self, key: &str, value: impl std::fmt::Display) {
        let _ = write!(self.fields, " {key}={value}");
    }

    /// Records the sync point (`synced_s`, `cpu_sync_s`) and returns it for [`put_watch`](Self::put_watch).
    pub fn put_synced(&mut self) -> (f64, f64) {
        let (wall, cpu) = (self.wall(), Self::cpu());
        self.put("synced_s", format!("{wall:.4}"));
        self.put("cpu_sync_s", format!("{cpu:.4}"));
        (wall, cpu)
    }

    /// Records when every handler had been called for every listed object (`handled_s`,
    /// `cpu_handled_s`, since the start, as `synced_s` and `cpu_sync_s`).
    pub fn put_handled(&mut self) {
        let (wall, cpu) = (self.wall(), Self::cpu());
        self.put("handled_s", format!("{wall:.4}"));
        self.put("cpu_handled_s", format!("{cpu:.4}"));
    }

    /// The current (wall, CPU) point, as [`put_synced`](Self::put_synced) returns it, without
    /// recording it: where a gated watch phase starts.
    pub fn mark(&self) -> (f64, f64) {
        (self.wall(), Self::cpu())
    }

    /// Records the watch figures for `events` events received since `from`: the sync point,
    /// or, when the replay server held the events until `GET /start-watch` (`--gate-watch`),
    /// the moment that call was sent ([`mark`](Self::mark)), so the time between the sync and
    /// the handlers' last listed object is not charged to the events. `watch_from_start=1`
    /// says which.
    pub fn put_watch(&mut self, events: u64, from: (f64, f64), gated: bool) {
        self.put("watch_from_start", u8::from(gated));
        let (wall, cpu) = (self.wall() - from.0, Self::cpu() - from.1);
        self.put("watch_s", format!("{wall:.4}"));
        self.put("events_per_s", format!("{:.0}", events as f64 / wall));
        self.put(
            "cpu_per_event_us",
            format!("{:.3}", cpu / events as f64 * 1e6),
        );
    }

    /// Prints the `RESULT` line (with the final peak RSS) and flushes stdout.
    pub fn finish(mut self) {
        self.put("hwm_kb", Self::status_kb("VmHWM"));
        self.put("cpu_total_s", format!("{:.4}", Self::cpu()));
        println!("RESULT{}", self.fields);
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
}

/// `--key value` pairs from the command line.
pub fn parse_args() -> HashMap<String, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = HashMap::new();
    let mut it = args.into_iter();
    while let Some(k) = it.next() {
        if let Some(k) = k.strip_prefix("--") {
            out.insert(k.to_owned(), it.next().unwrap_or_default());
        }
    }
    out
}

/// The client-side options every Rust client understands.
#[derive(Debug, Clone)]
pub struct ClientArgs {
    /// `host:port` of the replay server.
    pub addr: String,
    /// `sync`, `watch` or `relist`.
    pub mode: String,
    /// Watch events to wait for (mode `watch`).
    pub events: u64,
    /// Number of handlers (mode `watch`).
    pub handlers: usize,
    /// Updates expected from the relist (mode `relist`).
    pub changed: u64,
    /// Strip `managedFields` before objects reach the cache (`--strip true`).
    pub strip: bool,
    /// Strip `managedFields` while decoding, with the decode-time projection (`--project
    /// true`); only `client-informer` reads it.
    pub project: bool,
    /// A kubeconfig for a real cluster (S5); when set, `addr` is ignored.
    pub kubeconfig: Option<String>,
    /// The informer's FIFO (`--fifo delta|in-order`, default `delta`); only `client-informer`
    /// reads it.
    pub fifo: kube_informer::FifoMode,
    /// Cache shard `i` of `n` (`--shard i/n`, sharded list and watch); only `client-informer`
    /// reads it.
    pub shard: Option<kube_informer::sharding::ShardSelector>,
    /// The informer's cache (`--cache decoded|compact`, default `decoded`; with `compact`,
    /// `--decoded-backlog n` sets `CompactConfig::decoded_backlog`, `max` for never, and
    /// `--zstd-level n` sets `CompactConfig::level`, `--hot-objects n`
    /// `CompactConfig::hot_objects`, `--dictionary-samples n`
    /// `CompactConfig::dictionary_samples`); only
    /// `client-informer` reads it.
    pub cache: kube_informer::CacheStorage,
    /// How long each handler call sleeps, in µs (`--handler-sleep-us`, default 0): a slow
    /// handler, like one that calls an API per event. Only `client-informer` reads it.
    pub handler_sleep_us: u64,
    /// The encoding to ask for (`--wire json|protobuf`); the crate's default (protobuf for
    /// built-in types) when absent. Only `client-informer` reads it.
    pub wire: Option<kube_informer::reflector::WireFormat>,
}

impl ClientArgs {
    /// From the command line.
    pub fn parse() -> Self {
        let a = parse_args();
        let get = |k: &str, d: &str| a.get(k).cloned().unwrap_or_else(|| d.to_owned());
        Self {
            addr: get("addr", "127.0.0.1:18080"),
            mode: get("mode", "sync"),
            events: get("events", "0").parse().expect("--events"),
            handlers: get("handlers", "1").parse().expect("--handlers"),
            changed: get("changed", "0").parse().expect("--changed"),
            strip: get("strip", "false") == "true",
            project: get("project", "false") == "true",
            kubeconfig: a.get("kubeconfig").cloned(),
            fifo: match get("fifo", "delta").as_str() {
                "delta" => kube_informer::FifoMode::DeltaFifo,
                "in-order" => kube_informer::FifoMode::InOrder,
                other => panic!("--fifo {other}: expected delta or in-order"),
            },
            shard: a.get("shard").map(|s| {
                let (i, n) = s.split_once('/').expect("--shard i/n");
                kube_informer::sharding::ShardSelector::of(
                    i.parse().expect("--shard i/n"),
                    n.parse().expect("--shard i/n"),
                )
                .expect("--shard i/n")
            }),
            cache: match get("cache", "decoded").as_str() {
                "decoded" => kube_informer::CacheStorage::Decoded,
                "compact" => {
                    let mut config = kube_informer::CompactConfig::default();
                    if let Some(n) = a.get("decoded-backlog") {
                        config = config.decoded_backlog(match n.as_str() {
                            "max" => usize::MAX,
                            n => n.parse().expect("--decoded-backlog"),
                        });
                    }
                    if let Some(n) = a.get("hot-objects") {
                        config = config.hot_objects(n.parse().expect("--hot-objects"));
                    }
                    if let Some(n) = a.get("zstd-level") {
                        config = config.level(n.parse().expect("--zstd-level"));
                    }
                    if let Some(n) = a.get("dictionary-samples") {
                        config = config.dictionary_samples(n.parse().expect("--dictionary-samples"));
                    }
                    kube_informer::CacheStorage::Compact(config)
                }
                other => panic!("--cache {other}: expected decoded or compact"),
            },
            handler_sleep_us: get("handler-sleep-us", "0")
                .parse()
                .expect("--handler-sleep-us"),
            wire: a.get("wire").map(|w| match w.as_str() {
                "json" => kube_informer::reflector::WireFormat::Json,
                "protobuf" => kube_informer::reflector::WireFormat::Protobuf,
                other => panic!("--wire {other}: expected json or protobuf"),
            }),
        }
    }
}
