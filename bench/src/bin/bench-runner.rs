//! Runs every scenario against the replay server, each client in its own process, `--runs` times
//! (clients interleaved so drift hits them all alike), and prints medians and ratios as Markdown.
//!
//! `bench-runner [--runs 5] [--only S1,S2,S3,S4] [--port 18080] [--bin DIR] [--go BIN]
//!               [--update PATH]`
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
const RUNTIME: &str = "kube-runtime";
const GO: &str = "client-go";

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
    let clients = [
        (FLOOR, FLOOR, sync.clone()),
        (INFORMER, INFORMER, sync.clone()),
        (RUNTIME, RUNTIME, sync.clone()),
        (GO, GO, sync.clone()),
        (
            "kube-informer, strip managedFields",
            INFORMER,
            strip.clone(),
        ),
        ("client-go, strip managedFields", GO, strip),
    ];
    let all = measure(env, &clients);
    out.push_str(&format!(
        "\n### S1: cold sync, N = {n} Pods\n\n| client | CPU to synced (s) | wall to synced (s) | peak RSS (MiB) | CPU ÷ client-go | CPU ÷ kube-runtime | CPU ÷ floor | RSS ÷ client-go |\n|---|---|---|---|---|---|---|---|\n"
    ));
    let (go_cpu, rt_cpu, floor_cpu) = (
        med(&all, GO, "cpu_sync_s"),
        med(&all, RUNTIME, "cpu_sync_s"),
        med(&all, FLOOR, "cpu_sync_s"),
    );
    let go_rss = med(&all, GO, "hwm_kb");
    for (label, _, _) in &clients {
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
        "\nThe floor's decode alone: {:.3} s CPU (the rest of its figure is the HTTP fetch).\n",
        med(&all, FLOOR, "decode_cpu_s")
    ));
}

fn s2_s3(env: &Env, n: usize, m: usize, s3: bool, out: &mut String) {
    eprintln!("S2/S3: {m} MODIFIED events after a list of {n}");
    let _server = ServerProc::start(env, &["--pods", &n.to_string(), "--events", &m.to_string()]);
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
        (INFORMER, INFORMER, watch(1)),
        (RUNTIME, RUNTIME, watch(1)),
        (GO, GO, watch(1)),
    ];
    if s3 {
        clients.push(("kube-informer, 8 handlers", INFORMER, watch(8)));
        clients.push(("client-go, 8 handlers", GO, watch(8)));
    }
    let all = measure(env, &clients);
    out.push_str(&format!(
        "\n### S2: watch throughput, M = {m} MODIFIED events (after a list of {n})\n\n| client | events/s to the handler | CPU per event (µs) | peak RSS (MiB) | events/s ÷ client-go | events/s ÷ kube-runtime | CPU/event ÷ client-go |\n|---|---|---|---|---|---|---|\n"
    ));
    let (go_eps, rt_eps, go_cpe) = (
        med(&all, GO, "events_per_s"),
        med(&all, RUNTIME, "events_per_s"),
        med(&all, GO, "cpu_per_event_us"),
    );
    for (label, _, _) in clients.iter().take(3) {
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
            (INFORMER, "kube-informer, 8 handlers"),
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
        (INFORMER, INFORMER, args.clone()),
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
    let only = get("only", "S1,S2,S3,S4");
    let want = |s: &str| only.split(',').any(|o| o == s);
    let scale: f64 = get("scale", "1").parse().expect("--scale");
    let sz = |n: usize| ((n as f64 * scale) as usize).max(10);

    let mut out = format!(
        "Medians of {} runs; each client in its own process; ratios are this row ÷ the named peer.\n",
        env.runs
    );
    if want("S1") {
        s1(&env, sz(10_000), &mut out);
        s1(&env, sz(50_000), &mut out);
    }
    if want("S2") || want("S3") {
        s2_s3(&env, sz(10_000), sz(100_000), want("S3"), &mut out);
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
