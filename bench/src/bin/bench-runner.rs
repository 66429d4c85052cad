//! Runs every scenario against the replay server, each client in its own process, `--runs` times
//! (clients interleaved so drift hits them all alike), and prints medians and ratios as Markdown.
//!
//! `bench-runner [--runs 5] [--only S1,S2,S3,S4,S2burst,PB] [--port 18080] [--bin DIR] [--go BIN]
//!               [--update PATH]`
//!
//! kube-informer runs in both FIFO modes; `S2` runs both the original S2 (one event per HTTP
//! chunk) and its burst variant (1,000 events per chunk), `S2burst` only the latter.
//!
//! `--update` replaces the text between `<!-- results:begin -->` and `<!-- results:end -->` in
//! PATH (BENCHMARKS.md) with the tables. `bench/run.sh` builds everything and calls this.

use std::{
    collections::{BTreeMap, HashMap},
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
};

use kube_informer_bench::{http_get, parse_args};

const FLOOR: &str = "serde_json floor";
const INFORMER: &str = "kube-informer";
/// Row labels of the crate's client in its two FIFO modes (`client-informer --fifo ...`).
const INF_DELTA: &str = "kube-informer, DeltaFIFO";
const INF_IN_ORDER: &str = "kube-informer, in-order";
const RUNTIME: &str = "kube-runtime";
const GO: &str = "client-go";
/// S1's peers with `managedFields` stripped by a transform (kube-runtime: `.modify`), what the
/// crate's rows that drop them are divided by.
const RUNTIME_STRIP: &str = "kube-runtime, strip managedFields";
const GO_STRIP: &str = "client-go, strip managedFields";

const PB_NOTE: &str = "\nNot like for like for the projection row: it drops managedFields while \
     decoding, and `client-go, protobuf`, its divisor, builds and keeps them.\n";

/// Whether a row's client drops `managedFields` (a strip transform or the projection), so its
/// ratios are taken against the peers that strip them too.
fn drops_managed_fields(label: &str) -> bool {
    label.contains("strip managedFields") || label.contains("drops managedFields")
}

struct Env {
    bin: PathBuf,
    go: PathBuf,
    port: u16,
    runs: usize,
}

impl Env {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn client_cmd(&self, client: &str) -> Command {
        match client {
            GO => Command::new(&self.go),
            FLOOR => Command::new(self.bin.join("client-floor")),
            INFORMER => Command::new(self.bin.join("client-informer")),
            RUNTIME => Command::new(self.bin.join("client-kube-runtime")),
            other => panic!("unknown client {other}"),
        }
    }
}

/// The replay server of one scenario; killed (by its own pid, through the handle) on drop.
struct ServerProc(Child);

impl ServerProc {
    fn start(env: &Env, args: &[&str]) -> Self {
        let mut child = Command::new(env.bin.join("replay-server"))
            .args(["--port", &env.port.to_string()])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn replay-server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read replay-server");
        assert!(line.starts_with("LISTENING"), "replay-server said {line:?}");
        Self(child)
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

type Samples = BTreeMap<String, Vec<f64>>;

/// One client process; returns its `RESULT` fields.
fn run_client(env: &Env, client: &str, args: &[String]) -> HashMap<String, f64> {
    http_get(&env.addr(), "/reset").expect("reset server");
    let out = env
        .client_cmd(client)
        .args(["--addr", &env.addr()])
        .args(args)
        .env("GOMAXPROCS", "2")
        .stderr(Stdio::inherit())
        .output()
        .expect("spawn client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT"))
        .unwrap_or_else(|| panic!("{client} {args:?} printed no RESULT: {stdout}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect()
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `clients` (label, client, extra args) `env.runs` times each, interleaved.
fn measure(env: &Env, clients: &[(&str, &str, Vec<String>)]) -> BTreeMap<String, Samples> {
    let mut all: BTreeMap<String, Samples> = BTreeMap::new();
    for run in 0..env.runs {
        for (label, client, args) in clients {
            let r = run_client(env, client, args);
            eprintln!("  run {run} {label}: {r:?}");
            let s = all.entry((*label).to_owned()).or_default();
            for (k, v) in r {
                s.entry(k).or_default().push(v);
            }
        }
    }
    all
}

fn med(all: &BTreeMap<String, Samples>, label: &str, key: &str) -> f64 {
    all.get(label)
        .and_then(|s| s.get(key))
        .map_or(f64::NAN, |v| median(v))
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// `args` plus `--fifo delta|in-order`.
fn fifo(args: &[String], mode: &str) -> Vec<String> {
    let mut v = args.to_vec();
    v.extend(strs(&["--fifo", mode]));
    v
}

/// A table of the crate's two FIFO modes side by side: for each (what, DeltaFIFO row,
/// in-order row) and each (column title, RESULT key, divisor), the two medians and in-order ÷
/// DeltaFIFO.
fn modes_table(
    out: &mut String,
    all: &BTreeMap<String, Samples>,
    rows: &[(&str, &str, &str)],
    metrics: &[(&str, &str, f64)],
) {
    out.push_str("\nkube-informer's two FIFO modes (in-order ÷ DeltaFIFO):\n\n| |");
    for (title, _, _) in metrics {
        out.push_str(&format!(" {title}: DeltaFIFO | in-order | ratio |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|---|---|".repeat(metrics.len()));
    out.push('\n');
    for (what, delta, in_order) in rows {
        out.push_str(&format!("| {what} |"));
        for (_, key, div) in metrics {
            let (d, i) = (med(all, delta, key) / div, med(all, in_order, key) / div);
            // MiB and events/s as integers, seconds and µs to three places.
            let prec = if *div != 1.0 || d.abs() >= 1000.0 {
                0
            } else {
                3
            };
            out.push_str(&format!(" {d:.prec$} | {i:.prec$} | {} |", ratio(i, d)));
        }
        out.push('\n');
    }
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b != 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "–".to_owned()
    }
}

fn s1(env: &Env, n: usize, out: &mut String) {
    eprintln!("S1: cold sync of {n} pods");
    let _server = ServerProc::start(env, &["--pods", &n.to_string()]);
    let sync = strs(&["--mode", "sync"]);
    let strip = strs(&["--mode", "sync", "--strip", "true"]);
    let project = strs(&["--mode", "sync", "--project", "true"]);
    let clients = [
        (FLOOR, FLOOR, sync.clone()),
        (INF_DELTA, INFORMER, fifo(&sync, "delta")),
        (INF_IN_ORDER, INFORMER, fifo(&sync, "in-order")),
        (RUNTIME, RUNTIME, sync.clone()),
        (GO, GO, sync.clone()),
        (
            "kube-informer, DeltaFIFO, strip managedFields",
            INFORMER,
            fifo(&strip, "delta"),
        ),
        (
            "kube-informer, in-order, strip managedFields",
            INFORMER,
            fifo(&strip, "in-order"),
        ),
        (
            "kube-informer, DeltaFIFO, projection drops managedFields",
            INFORMER,
            fifo(&project, "delta"),
        ),
        (RUNTIME_STRIP, RUNTIME, strip.clone()),
        (GO_STRIP, GO, strip),
    ];
    let all = measure(env, &clients);
    out.push_str(&format!(
        "\n### S1: cold sync, N = {n} Pods\n\n| client | CPU to synced (s) | wall to synced (s) | peak RSS (MiB) | CPU ÷ client-go | CPU ÷ kube-runtime | CPU ÷ floor | RSS ÷ client-go |\n|---|---|---|---|---|---|---|---|\n"
    ));
    let floor_cpu = med(&all, FLOOR, "cpu_sync_s");
    for (label, _, _) in &clients {
        // Like for like: a row that drops managedFields against the peers that strip them.
        let (go, rt) = if drops_managed_fields(label) {
            (GO_STRIP, RUNTIME_STRIP)
        } else {
            (GO, RUNTIME)
        };
        let (go_cpu, rt_cpu, go_rss) = (
            med(&all, go, "cpu_sync_s"),
            med(&all, rt, "cpu_sync_s"),
            med(&all, go, "hwm_kb"),
        );
        let cpu = med(&all, label, "cpu_sync_s");
        let rss = med(&all, label, "hwm_kb");
        out.push_str(&format!(
            "| {label} | {cpu:.3} | {:.3} | {:.0} | {} | {} | {} | {} |\n",
            med(&all, label, "synced_s"),
            rss / 1024.0,
            ratio(cpu, go_cpu),
            ratio(cpu, rt_cpu),
            ratio(cpu, floor_cpu),
            ratio(rss, go_rss),
        ));
    }
    out.push_str(&format!(
        "\nRows that drop managedFields (strip transform or projection) are divided by \
         `{GO_STRIP}` and `{RUNTIME_STRIP}`, the others by the peers that keep them; the floor \
         keeps them. The floor's decode alone: {:.3} s CPU (the rest of its figure is the HTTP \
         fetch).\n",
        med(&all, FLOOR, "decode_cpu_s")
    ));
    modes_table(
        out,
        &all,
        &[
            ("as listed", INF_DELTA, INF_IN_ORDER),
            (
                "strip managedFields",
                "kube-informer, DeltaFIFO, strip managedFields",
                "kube-informer, in-order, strip managedFields",
            ),
        ],
        &[
            ("CPU to synced (s)", "cpu_sync_s", 1.0),
            ("wall to synced (s)", "synced_s", 1.0),
            ("peak RSS (MiB)", "hwm_kb", 1024.0),
        ],
    );
}

/// S1 and S2 in protobuf: the replay server serves the same fixture in both encodings
/// (`--protobuf true`), and each client is run in each.
fn protobuf_rows(env: &Env, n: usize, m: usize, out: &mut String) {
    eprintln!("S1/S2 in protobuf: {n} pods, {m} events");
    let _server = ServerProc::start(
        env,
        &[
            "--pods",
            &n.to_string(),
            "--events",
            &m.to_string(),
            "--burst",
            "1000",
            "--gate-watch",
            "true",
            "--protobuf",
            "true",
        ],
    );
    let with = |base: &[&str], extra: &[&str]| {
        let mut v = strs(base);
        v.extend(strs(extra));
        v
    };
    let sync = ["--mode", "sync"];
    let watch = ["--mode", "watch", "--events", &m.to_string()];
    let watch: Vec<&str> = watch.to_vec();
    let clients = [
        ("kube-informer, JSON", INFORMER, with(&sync, &["--wire", "json"])),
        ("kube-informer, protobuf", INFORMER, with(&sync, &["--wire", "protobuf"])),
        (
            "kube-informer, protobuf, projection drops managedFields",
            INFORMER,
            with(&sync, &["--wire", "protobuf", "--project", "true"]),
        ),
        (
            "kube-informer, protobuf, Compact cache",
            INFORMER,
            with(&sync, &["--wire", "protobuf", "--cache", "compact"]),
        ),
        ("client-go, JSON", GO, with(&sync, &[])),
        ("client-go, protobuf", GO, with(&sync, &["--protobuf", "true"])),
    ];
    let all = measure(env, &clients);
    out.push_str(&format!(
        "\n### S1 in protobuf: cold sync, N = {n} Pods, each client in JSON and in protobuf\n\n| client | CPU to synced (s) | wall to synced (s) | peak RSS (MiB) | CPU ÷ client-go protobuf | RSS ÷ client-go protobuf |\n|---|---|---|---|---|---|\n"
    ));
    let (go_cpu, go_rss) = (
        med(&all, "client-go, protobuf", "cpu_sync_s"),
        med(&all, "client-go, protobuf", "hwm_kb"),
    );
    for (label, _, _) in &clients {
        let cpu = med(&all, label, "cpu_sync_s");
        let rss = med(&all, label, "hwm_kb");
        out.push_str(&format!(
            "| {label} | {cpu:.3} | {:.3} | {:.0} | {} | {} |\n",
            med(&all, label, "synced_s"),
            rss / 1024.0,
            ratio(cpu, go_cpu),
            ratio(rss, go_rss),
        ));
    }
    out.push_str(PB_NOTE);
    let clients = [
        ("kube-informer, JSON", INFORMER, with(&watch, &["--wire", "json"])),
        ("kube-informer, protobuf", INFORMER, with(&watch, &["--wire", "protobuf"])),
        (
            "kube-informer, protobuf, projection drops managedFields",
            INFORMER,
            with(&watch, &["--wire", "protobuf", "--project", "true"]),
        ),
        (
            "kube-informer, JSON, Compact cache",
            INFORMER,
            with(&watch, &["--wire", "json", "--cache", "compact"]),
        ),
        (
            "kube-informer, protobuf, Compact cache",
            INFORMER,
            with(&watch, &["--wire", "protobuf", "--cache", "compact"]),
        ),
        ("client-go, JSON", GO, with(&watch, &[])),
        ("client-go, protobuf", GO, with(&watch, &["--protobuf", "true"])),
    ];
    let all = measure(env, &clients);
    out.push_str(&format!(
        "\n### S2 in protobuf: M = {m} MODIFIED events (after a list of {n}), bursts of 1,000 per chunk once synced\n\n| client | events/s to the handler | CPU per event (µs) | CPU/event ÷ client-go protobuf | compressed bytes per cached Pod after the events |\n|---|---|---|---|---|\n"
    ));
    let go_cpe = med(&all, "client-go, protobuf", "cpu_per_event_us");
    for (label, _, args) in &clients {
        let cpe = med(&all, label, "cpu_per_event_us");
        let stored = if args.iter().any(|a| a == "compact") {
            format!("{:.0}", med(&all, label, "stored_b_per_obj"))
        } else {
            "—".to_owned()
        };
        out.push_str(&format!(
            "| {label} | {:.0} | {cpe:.2} | {} | {stored} |\n",
            med(&all, label, "events_per_s"),
            ratio(cpe, go_cpe),
        ));
    }
    out.push_str(PB_NOTE);
}

/// S2 (and S3 with `s3`). `burst` is the replay server's events per HTTP chunk: 1 is the
/// original S2 (one chunk per event), 1,000 the burst variant of issue #14 (S3 is only run
/// with 1).
fn s2_s3(env: &Env, n: usize, m: usize, burst: usize, s3: bool, out: &mut String) {
    eprintln!("S2/S3: {m} MODIFIED events after a list of {n}, {burst} per chunk");
    let _server = ServerProc::start(
        env,
        &[
            "--pods",
            &n.to_string(),
            "--events",
            &m.to_string(),
            "--burst",
            &burst.to_string(),
            // The burst variant holds the events until the client is synced (see below).
            "--gate-watch",
            if burst == 1 { "false" } else { "true" },
        ],
    );
    let watch = |h: usize| {
        strs(&[
            "--mode",
            "watch",
            "--events",
            &m.to_string(),
            "--handlers",
            &h.to_string(),
        ])
    };
    let mut clients = vec![
        (INF_DELTA, INFORMER, fifo(&watch(1), "delta")),
        (INF_IN_ORDER, INFORMER, fifo(&watch(1), "in-order")),
    ];
    // kube-runtime has no FIFO: the burst variant leaves it out.
    if burst == 1 {
        clients.push((RUNTIME, RUNTIME, watch(1)));
    }
    clients.push((GO, GO, watch(1)));
    let singles = clients.len();
    if s3 {
        clients.push((
            "kube-informer, DeltaFIFO, 8 handlers",
            INFORMER,
            fifo(&watch(8), "delta"),
        ));
        clients.push((
            "kube-informer, in-order, 8 handlers",
            INFORMER,
            fifo(&watch(8), "in-order"),
        ));
        clients.push(("client-go, 8 handlers", GO, watch(8)));
    }
    let all = measure(env, &clients);
    let how = if burst == 1 {
        "one event per HTTP chunk".to_owned()
    } else {
        format!(
            "bursts of {burst} events per HTTP chunk, sent once the client is synced \
             (`replay-server --burst {burst} --gate-watch true`)"
        )
    };
    out.push_str(&format!(
        "\n### S2: watch throughput, M = {m} MODIFIED events (after a list of {n}), {how}\n\n| client | events/s to the handler | CPU per event (µs) | peak RSS (MiB) | events/s ÷ client-go | events/s ÷ kube-runtime | CPU/event ÷ client-go |\n|---|---|---|---|---|---|---|\n"
    ));
    let (go_eps, rt_eps, go_cpe) = (
        med(&all, GO, "events_per_s"),
        med(&all, RUNTIME, "events_per_s"),
        med(&all, GO, "cpu_per_event_us"),
    );
    for (label, _, _) in clients.iter().take(singles) {
        let eps = med(&all, label, "events_per_s");
        let cpe = med(&all, label, "cpu_per_event_us");
        out.push_str(&format!(
            "| {label} | {eps:.0} | {cpe:.2} | {:.0} | {} | {} | {} |\n",
            med(&all, label, "hwm_kb") / 1024.0,
            ratio(eps, go_eps),
            ratio(eps, rt_eps),
            ratio(cpe, go_cpe),
        ));
    }
    if s3 {
        out.push_str("\n### S3: fan-out, 1 versus 8 handlers on one informer\n\n| client | handlers | events/s (each handler) | CPU per watch event (µs) | CPU ÷ 1 handler | wall ÷ 1 handler |\n|---|---|---|---|---|---|\n");
        for (base, eight) in [
            (INF_DELTA, "kube-informer, DeltaFIFO, 8 handlers"),
            (INF_IN_ORDER, "kube-informer, in-order, 8 handlers"),
            (GO, "client-go, 8 handlers"),
        ] {
            let (c1, c8) = (
                med(&all, base, "cpu_per_event_us"),
                med(&all, eight, "cpu_per_event_us"),
            );
            let (w1, w8) = (med(&all, base, "watch_s"), med(&all, eight, "watch_s"));
            out.push_str(&format!(
                "| {base} | 1 | {:.0} | {c1:.2} | 1.00× | 1.00× |\n| {base} | 8 | {:.0} | {c8:.2} | {} | {} |\n",
                med(&all, base, "events_per_s"),
                med(&all, eight, "events_per_s"),
                ratio(c8, c1),
                ratio(w8, w1),
            ));
        }
    }
    let mut rows = vec![("1 handler", INF_DELTA, INF_IN_ORDER)];
    if s3 {
        rows.push((
            "8 handlers",
            "kube-informer, DeltaFIFO, 8 handlers",
            "kube-informer, in-order, 8 handlers",
        ));
    }
    modes_table(
        out,
        &all,
        &rows,
        &[
            ("events/s", "events_per_s", 1.0),
            ("CPU per event (µs)", "cpu_per_event_us", 1.0),
            ("peak RSS (MiB)", "hwm_kb", 1024.0),
        ],
    );
}

fn s4(env: &Env, n: usize, out: &mut String) {
    eprintln!("S4: relist of {n} pods, 10% changed");
    let _server = ServerProc::start(
        env,
        &[
            "--pods",
            &n.to_string(),
            "--relist",
            "true",
            "--changed-every",
            "10",
        ],
    );
    let args = strs(&["--mode", "relist", "--changed", &(n / 10).to_string()]);
    let clients = [
        (INF_DELTA, INFORMER, fifo(&args, "delta")),
        (INF_IN_ORDER, INFORMER, fifo(&args, "in-order")),
        (RUNTIME, RUNTIME, args.clone()),
        (GO, GO, args),
    ];
    let all = measure(env, &clients);
    out.push_str(&format!(
        "\n### S4: relist of {n} Pods, 10% changed (after a 410 on the watch)\n\n| client | steady RSS (MiB) | peak RSS during relist (MiB) | peak ÷ steady | relist wall (s) | relist peak ÷ client-go |\n|---|---|---|---|---|---|\n"
    ));
    let go_peak = med(&all, GO, "hwm_kb");
    for (label, _, _) in &clients {
        let steady = med(&all, label, "steady_kb");
        let peak = med(&all, label, "hwm_kb");
        out.push_str(&format!(
            "| {label} | {:.0} | {:.0} | {} | {:.3} | {} |\n",
            steady / 1024.0,
            peak / 1024.0,
            ratio(peak, steady),
            med(&all, label, "relist_s"),
            ratio(peak, go_peak),
        ));
    }
    modes_table(
        out,
        &all,
        &[("relist", INF_DELTA, INF_IN_ORDER)],
        &[
            ("steady RSS (MiB)", "steady_kb", 1024.0),
            ("relist peak (MiB)", "hwm_kb", 1024.0),
            ("relist wall (s)", "relist_s", 1.0),
        ],
    );
}

fn main() {
    let a = parse_args();
    let get = |k: &str, d: &str| a.get(k).cloned().unwrap_or_else(|| d.to_owned());
    let bin = PathBuf::from(get("bin", "target/release"));
    let env = Env {
        go: PathBuf::from(get("go", &bin.join("client-go-bench").to_string_lossy())),
        bin,
        port: get("port", "18080").parse().expect("--port"),
        runs: get("runs", "5").parse().expect("--runs"),
    };
    let only = get("only", "S1,S2,S3,S4,S2burst,PB");
    let want = |s: &str| only.split(',').any(|o| o == s);
    let scale: f64 = get("scale", "1").parse().expect("--scale");
    let sz = |n: usize| ((n as f64 * scale) as usize).max(10);

    let mut out = format!(
        "Medians of {} runs; each client in its own process; ratios are this row ÷ the named peer. \
         kube-informer runs in both FIFO modes (`client-informer --fifo delta|in-order`); \
         client-go v0.37.2 always runs in-order (RealFIFO: `InOrderInformers` GA, with \
         `InOrderInformersBatchProcess` on by default), so its rows are in-order mode.\n",
        env.runs
    );
    if want("S1") {
        s1(&env, sz(10_000), &mut out);
        s1(&env, sz(50_000), &mut out);
    }
    if want("S2") || want("S3") {
        s2_s3(&env, sz(10_000), sz(100_000), 1, want("S3"), &mut out);
    }
    if want("S2") || want("S2burst") {
        s2_s3(&env, sz(10_000), sz(100_000), 1000, false, &mut out);
    }
    if want("PB") {
        protobuf_rows(&env, sz(10_000), sz(100_000), &mut out);
    }
    if want("S4") {
        s4(&env, sz(50_000), &mut out);
    }
    println!("{out}");
    if let Some(path) = a.get("update") {
        let (begin, end) = ("<!-- results:begin -->", "<!-- results:end -->");
        let md = std::fs::read_to_string(path).expect("read --update file");
        let (Some(b), Some(e)) = (md.find(begin), md.find(end)) else {
            panic!("{path} has no {begin} … {end} markers");
        };
        let md = format!("{}{begin}\n{out}\n{}", &md[..b], &md[e..]);
        std::fs::write(path, md).expect("write --update file");
        eprintln!("results written into {path}");
    }
}
