//! Issue 11's property test: random integers, floats and strings (0, max, NaN, inf, negative, junk)
//! in every numeric flag of `fleet replay`, `fleet run` and `fleet sweep`, and (issue 22) in every
//! key of a scenario file and of a router config (weights included), with the valid names of the
//! keys that take names mixed in. The binary never panics or aborts: it exits 0 or 2, under a
//! small `--max-memory`. Fixed seed; about 1,000 runs of the debug binary on tiny inputs.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::Ordering::Relaxed;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};

/// Every run gets this budget: whatever the values, nothing larger is allocated.
const MAX_MEMORY: &str = "24M";

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-props-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn runner(cases: u32, seed: u64) -> TestRunner {
    TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 16,
        ..Config::default()
    })
}

/// A value for a numeric input: edge cases, random integers and floats, junk strings.
fn value() -> impl Strategy<Value = String> {
    const EDGES: &[&str] = &[
        "0",
        "1",
        "2",
        "-1",
        "-0",
        "64",
        "65",
        "1024",
        "1025",
        "4294967294",
        "4294967295",
        "4294967296",
        "18446744073709551615",
        "18446744073709551616",
        "9223372036854775807",
        "-9223372036854775808",
        "NaN",
        "nan",
        "inf",
        "-inf",
        "infinity",
        "1e300",
        "-1e300",
        "1e-300",
        "0.5",
        "0.0001",
        "0.0015",
        "1.5",
        "",
        " ",
        "abc",
        "0x10",
        "1_000",
        "+3",
    ];
    prop_oneof![
        4 => proptest::sample::select(EDGES).prop_map(str::to_string),
        3 => (0u64..2000).prop_map(|v| v.to_string()),
        2 => (0u64..100).prop_map(|v| format!("{}.{}", v, v % 10)),
        2 => any::<u64>().prop_map(|v| v.to_string()),
        1 => any::<i64>().prop_map(|v| v.to_string()),
        2 => any::<f64>().prop_map(|v| v.to_string()),
        1 => (-10.0f64..10.0).prop_map(|v| format!("{v:e}")),
        1 => "[-+.,a-z0-9/*]{0,6}",
    ]
}

/// Runs that exited 0 and 2, per test (so a test that only ever hits parse errors is noticed).
struct Tally(std::sync::atomic::AtomicUsize, std::sync::atomic::AtomicUsize);

impl Tally {
    fn new() -> Self {
        Tally(0.into(), 0.into())
    }
    /// Asserts that at least `min_ok` runs exited 0 and `min_bad` exited 2.
    fn assert_both(&self, what: &str, min_ok: usize, min_bad: usize) {
        let (ok, bad) = (self.0.load(Relaxed), self.1.load(Relaxed));
        eprintln!("{what}: {ok} runs exited 0, {bad} exited 2");
        assert!(
            ok >= min_ok && bad >= min_bad,
            "{what}: {ok} exit 0 (want >= {min_ok}), {bad} exit 2 (want >= {min_bad})"
        );
    }
}

/// Runs the binary; fails the case on a signal (abort), a panic, or an exit code other than 0/2.
fn check(args: &[String], tally: &Tally) -> Result<(), TestCaseError> {
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab")).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    prop_assert!(code.is_some(), "killed by a signal (abort?): {:?}\n{}", args, err);
    prop_assert!(!err.contains("panicked"), "panic: {:?}\n{}", args, err);
    prop_assert!(matches!(code, Some(0 | 2)), "exit {:?}: {:?}\n{}", code, args, err);
    if code == Some(2) {
        prop_assert!(!err.trim().is_empty(), "exit 2 without a message: {:?}", args);
        tally.1.fetch_add(1, Relaxed);
    } else {
        tally.0.fetch_add(1, Relaxed);
    }
    Ok(())
}

/// The trace, written once per test process (the tests run in parallel threads: one rewriting
/// the file while another's run reads it would show that run half a line).
fn trace() -> PathBuf {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(write_trace).clone()
}

fn write_trace() -> PathBuf {
    let p = dir().join("t.jsonl");
    let mut text = String::new();
    for i in 0..20u64 {
        text += &format!(
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 4, \"hash_ids\": [0, 1, {}, {}]}}\n",
            i * 100,
            40 + 16 * (i % 5),
            2 + i % 3,
            10 + i
        );
    }
    std::fs::write(&p, text).unwrap();
    p
}

const REPLAY_FLAGS: &[&str] = &[
    "--pods",
    "--capacity",
    "--alpha",
    "--stale",
    "--t-prefill-ns",
    "--t-decode-ns",
    "--cpu-capacity",
    "--prefill-pods",
    "--pd-threshold-tokens",
    "--pd-link-bytes-per-s",
    "--pcie-bytes-per-s",
    "--kv-bytes-per-token",
    "--slo-ttft-ms",
    "--slo-tpot-ms",
    "--t-cpu-ns",
    "--trace-block-size",
    "--max-line-bytes",
    "--scale-min",
    "--scale-initial",
    "--scale-interval-s",
    "--scale-up-queue",
    "--scale-down-queue",
    "--scale-startup-s",
];

#[test]
fn replay_numeric_flags() {
    let t = trace();
    let flags = proptest::sample::subsequence(REPLAY_FLAGS, 1..=3);
    let tally = Tally::new();
    let mut r = runner(200, 0x11A);
    r.run(&(flags, proptest::collection::vec(value(), 3), any::<bool>()), |(flags, vals, router)| {
        let mut a: Vec<String> = vec!["fleet".into(), "replay".into(), "--trace".into(), t.display().to_string()];
        a.extend(["--max-memory".into(), MAX_MEMORY.into(), "--json".into()]);
        a.extend(["--router".into(), if router { "prefix-aware" } else { "round-robin" }.into()]);
        for f in ["--pods", "--capacity"] {
            if !flags.contains(&f) {
                a.extend([f.into(), "4".into()]);
            }
        }
        // the autoscaler's other flags are refused without --scale-min (exit 2 naming them):
        // give them one so their own values are what the case tests
        if flags.iter().any(|f| f.starts_with("--scale-")) && !flags.contains(&"--scale-min") {
            a.push("--scale-min=1".into());
        }
        for (f, v) in flags.iter().zip(&vals) {
            // `--flag=value`: a value starting with `-` or empty is still this flag's value.
            a.push(format!("{f}={v}"));
        }
        check(&a, &tally)
    })
    .unwrap();
    tally.assert_both("replay", 10, 10);
}

const ENGINE_FLAGS: &[&str] = &[
    "--pods",
    "--capacity",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--t-overhead-ns",
    "--t-prefill-token-ns",
    "--t-decode-seq-ns",
    "--t-kv-token-ns",
    "--trace-block-size",
];

/// The batched engine's numeric flags: exit 0 or 2, never a panic, an abort or a hang (a zero
/// step cost or budget must be refused, not loop forever).
#[test]
fn batched_engine_numeric_flags() {
    let t = trace();
    let flags = proptest::sample::subsequence(ENGINE_FLAGS, 1..=2);
    let tally = Tally::new();
    let mut r = runner(120, 0xE61);
    r.run(&(flags, proptest::collection::vec(value(), 3), any::<bool>()), |(flags, vals, router)| {
        let mut a: Vec<String> = vec!["fleet".into(), "replay".into(), "--trace".into(), t.display().to_string()];
        a.extend(["--engine".into(), "batched".into(), "--max-memory".into(), MAX_MEMORY.into(), "--json".into()]);
        a.extend(["--router".into(), if router { "prefix-aware" } else { "round-robin" }.into()]);
        for (f, v) in [("--pods", "4"), ("--capacity", "64")] {
            if !flags.contains(&f) {
                a.extend([f.into(), v.into()]);
            }
        }
        for (f, v) in flags.iter().zip(&vals) {
            a.push(format!("{f}={v}"));
        }
        check(&a, &tally)
    })
    .unwrap();
    tally.assert_both("batched replay", 10, 10);
}

/// Every key of a scenario file (dotted: table.key), its value in the base scenario (None: absent
/// unless chosen), and the valid names of a key that takes one (mixed into the random values).
const KEYS: &[(&str, Option<&str>, &[&str])] = &[
    ("name", None, &["n"]),
    ("description", None, &["d"]),
    ("workload.seed", Some("3"), &[]),
    ("workload.requests", Some("40"), &[]),
    ("workload.tenants", Some("4"), &[]),
    ("workload.users_per_tenant", Some("3"), &[]),
    ("workload.prefix_tokens", Some("64"), &[]),
    ("workload.suffix_tokens", Some("[16, 48]"), &[]),
    ("workload.output_tokens", Some("[1, 8]"), &[]),
    ("workload.output_tokens_choices", None, &[]),
    ("workload.popularity", None, &["uniform", "cycle", "zipf:1.1", "zipf:0"]),
    ("workload.rate_per_s", Some("10.0"), &[]),
    ("workload.suffix_scope", None, &["request", "user"]),
    ("workload.layout", None, &["stable-prefix-first", "timestamp-first"]),
    ("workload.header_tokens", Some("16"), &[]),
    ("workload.stages.rate_per_s", None, &[]),
    ("workload.stages.duration_s", None, &[]),
    ("workload.rag.docs", Some("6"), &[]),
    ("workload.rag.doc_tokens", Some("32"), &[]),
    ("workload.rag.per_request", Some("2"), &[]),
    ("workload.rag.order", None, &["random", "sorted"]),
    ("workload.burst.rate_per_s", Some("20.0"), &[]),
    ("workload.burst.start_s", Some("1.0"), &[]),
    ("workload.burst.duration_s", Some("1.0"), &[]),
    ("fleet.pods", Some("3"), &[]),
    ("fleet.capacity", Some("32"), &[]),
    ("fleet.router", None, &["round-robin", "prefix-aware", "llm-d-precise", "dynamo-kv", "sglang-cache-aware"]),
    ("fleet.alpha", Some("1.0"), &[]),
    ("fleet.stale", Some("0"), &[]),
    ("fleet.order", None, &["tail-first", "in-order"]),
    ("fleet.t_prefill_ns", Some("50000"), &[]),
    ("fleet.t_decode_ns", Some("0"), &[]),
    ("fleet.index", None, &["pod-tables", "global"]),
    ("fleet.cpu_capacity", Some("0"), &[]),
    ("fleet.t_cpu_ns", Some("5000"), &[]),
    ("fleet.cache", None, &["local", "global"]),
    ("fleet.autoscale.min", Some("1"), &[]),
    ("fleet.autoscale.initial", Some("2"), &[]),
    ("fleet.autoscale.interval_s", Some("1.0"), &[]),
    ("fleet.autoscale.up_queue", Some("2.0"), &[]),
    ("fleet.autoscale.down_queue", Some("0.5"), &[]),
    ("fleet.autoscale.startup_s", Some("1.0"), &[]),
    ("fleet.engine.model", None, &["batched", "fifo"]),
    ("fleet.engine.profile", None, &["qwen3-32b-h100x2", "llama-3.1-8b-h100", "seed"]),
    ("fleet.engine.max_num_seqs", None, &[]),
    ("fleet.engine.max_num_batched_tokens", None, &[]),
    ("fleet.engine.t_overhead_ns", None, &[]),
    ("fleet.engine.t_prefill_token_ns", None, &[]),
    ("fleet.engine.t_decode_seq_ns", None, &[]),
    ("fleet.engine.t_kv_token_ns", None, &[]),
];

/// TOML for `v` as a key's value: numbers as they are when TOML reads them as numbers, else a
/// string (a type error is a fine answer too); pairs and lists get the value in one place.
fn toml_value(key: &str, v: &str, second: bool) -> String {
    let is_num = v.parse::<i128>().is_ok()
        || toml::from_str::<toml::Table>(&format!("x = {v}")).is_ok_and(|t| t["x"].is_integer() || t["x"].is_float());
    let lit = if is_num { v.to_string() } else { format!("{v:?}") };
    match key {
        "workload.suffix_tokens" | "workload.output_tokens" if second => format!("[1, {lit}]"),
        "workload.suffix_tokens" | "workload.output_tokens" => format!("[{lit}, 4096]"),
        "workload.output_tokens_choices" if second => format!("[1, {lit}]"),
        "workload.output_tokens_choices" => format!("[{lit}]"),
        _ => lit,
    }
}

/// A value for `key`: one of its valid names (as a TOML string) when `pick` says so and it has
/// names, else the random `v`.
fn key_value(key: &str, names: &[&str], v: &str, second: bool, pick: usize) -> String {
    if !names.is_empty() && pick.is_multiple_of(2) {
        return format!("{:?}", names[pick / 2 % names.len()]);
    }
    toml_value(key, v, second)
}

fn scenario_text(set: &[(&str, String)]) -> String {
    let mut tables: Vec<(&str, Vec<(String, String)>)> = vec![
        ("", vec![]),
        ("workload", vec![]),
        ("workload.rag", vec![]),
        ("workload.burst", vec![]),
        ("[workload.stages]", vec![]),
        ("fleet", vec![]),
        ("fleet.autoscale", vec![]),
        ("fleet.engine", vec![]),
    ];
    let stages = set.iter().any(|(k, _)| k.starts_with("workload.stages."));
    for (k, default) in KEYS.iter().map(|(k, d, _)| (*k, *d)) {
        let (table, key) = k.rsplit_once('.').unwrap_or(("", k));
        let chosen = set.iter().find(|(s, _)| *s == k).map(|(_, v)| v.clone());
        // a stage's two keys go together; stages replace the single rate
        let default = match k {
            "workload.stages.rate_per_s" | "workload.stages.duration_s" if stages => Some("2.0"),
            "workload.rate_per_s" if stages => None,
            _ => default,
        };
        let Some(v) = chosen.or(default.map(str::to_string)) else { continue };
        let table = if table == "workload.stages" { "[workload.stages]" } else { table };
        tables.iter_mut().find(|(t, _)| *t == table).unwrap().1.push((key.to_string(), v));
    }
    let mut text = String::new();
    for (t, kv) in tables {
        if kv.is_empty() && t != "workload" && t != "fleet" {
            continue;
        }
        if !t.is_empty() {
            text += &format!("[{t}]\n");
        }
        for (k, v) in kv {
            text += &format!("{k} = {v}\n");
        }
    }
    text
}

#[test]
fn scenario_keys() {
    // The base scenario itself runs.
    let base = dir().join("base.toml");
    std::fs::write(&base, scenario_text(&[])).unwrap();
    let a = |p: &std::path::Path| -> Vec<String> {
        ["fleet", "run", p.to_str().unwrap(), "--max-memory", MAX_MEMORY, "--json"].map(String::from).to_vec()
    };
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab")).args(a(&base)).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let keys = proptest::sample::subsequence(KEYS, 1..=3);
    let tally = Tally::new();
    let mut r = runner(400, 0x5CE);
    let n = std::sync::atomic::AtomicUsize::new(0);
    r.run(&(keys, proptest::collection::vec((value(), any::<bool>(), any::<usize>()), 3)), |(keys, vals)| {
        let set: Vec<(&str, String)> = keys
            .iter()
            .zip(&vals)
            .map(|((k, _, names), (v, second, pick))| (*k, key_value(k, names, v, *second, *pick)))
            .collect();
        let p = dir().join(format!("s{}.toml", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        std::fs::write(&p, scenario_text(&set)).unwrap();
        check(&a(&p), &tally)
    })
    .unwrap();
    tally.assert_both("scenario", 10, 10);
}

/// Every key of a router config file (`scorers.` keys in one `[[scorers]]` table, `params.` in
/// `[params]`) and the valid names of the keys that take one.
const ROUTER_KEYS: &[(&str, &[&str])] = &[
    (
        "preset",
        &[
            "llm-d-precise",
            "llm-d-approximate",
            "llm-d-load",
            "random",
            "gie-default",
            "llm-d-affinity",
            "dynamo-kv",
            "sglang-cache-aware",
            "vllm-loadaware",
        ],
    ),
    ("policy", &["pipeline", "dynamo-kv", "sglang-cache-aware", "vllm-loadaware"]),
    ("picker", &["max-score", "max-score-lowest-index", "random"]),
    ("filters", &["prefix-cache-affinity"]),
    (
        "scorers.type",
        &[
            "prefix-cache",
            "precise-prefix-cache",
            "precise-prefix-cache-min-max",
            "queue",
            "kv-cache-utilization",
            "no-hit-lru",
            "token-load",
            "active-requests",
            "load-aware",
        ],
    ),
    ("scorers.weight", &[]),
    ("params.seed", &[]),
    ("params.approx_lru_blocks", &[]),
    ("params.approx_max_blocks", &[]),
    ("params.prefix_source", &["auto", "approximate", "precise"]),
    ("params.load_aware_threshold", &[]),
    ("params.token_load_threshold", &[]),
    ("params.no_hit_lru_size", &[]),
    ("params.affinity_threshold", &[]),
    ("params.max_ttft_penalty_ms", &[]),
    ("params.peak_prefill_tokens_per_s", &[]),
    ("params.overlap_score_weight", &[]),
    ("params.router_temperature", &[]),
    ("params.cache_threshold", &[]),
    ("params.balance_abs_threshold", &[]),
    ("params.balance_rel_threshold", &[]),
    ("params.vllm_beta", &[]),
];

/// A router config with `set` (key, TOML value); a scorer table gets a `type` unless chosen.
fn router_config_text(set: &[(&str, String)]) -> String {
    let (mut top, mut scorer, mut params) = (String::new(), String::new(), String::new());
    for (k, v) in set {
        match k.split_once('.') {
            Some(("scorers", key)) => scorer += &format!("{key} = {v}\n"),
            Some(("params", key)) => params += &format!("{key} = {v}\n"),
            _ if *k == "filters" => top += &format!("filters = [{v}]\n"),
            _ => top += &format!("{k} = {v}\n"),
        }
    }
    if !scorer.is_empty() && !scorer.contains("type = ") {
        scorer = format!("type = \"queue\"\n{scorer}");
    }
    let mut text = top;
    if !scorer.is_empty() {
        text += &format!("[[scorers]]\n{scorer}");
    }
    if !params.is_empty() {
        text += &format!("[params]\n{params}");
    }
    text
}

/// Every key of a router config, weights and parameters at their extremes, under either engine:
/// exit 0 or 2 (a weight beyond 1e6, a key the router does not read, a bad name), never a panic,
/// an abort or a silent +inf.
#[test]
fn router_config_keys() {
    let t = trace();
    let keys = proptest::sample::subsequence(ROUTER_KEYS, 1..=3);
    let tally = Tally::new();
    let mut r = runner(250, 0x20C);
    let n = std::sync::atomic::AtomicUsize::new(0);
    r.run(
        &(keys, proptest::collection::vec((value(), any::<usize>()), 3), any::<bool>(), any::<usize>()),
        |(keys, vals, batched, base)| {
            let mut set: Vec<(&str, String)> = keys
                .iter()
                .zip(&vals)
                .map(|((k, names), (v, pick))| (*k, key_value(k, names, v, false, *pick)))
                .collect();
            // most files start from a preset (else most are empty pipelines, refused at once)
            let presets = ROUTER_KEYS[0].1;
            if base % 5 != 0 && !set.iter().any(|(k, _)| *k == "preset") {
                set.insert(0, ("preset", format!("{:?}", presets[base % presets.len()])));
            }
            let p = dir().join(format!("rc{}.toml", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
            std::fs::write(&p, router_config_text(&set)).unwrap();
            let mut a: Vec<String> = vec!["fleet".into(), "replay".into(), "--trace".into(), t.display().to_string()];
            a.extend(["--pods", "4", "--capacity", "64", "--max-memory", MAX_MEMORY, "--json"].map(String::from));
            a.extend(["--router-config".into(), p.display().to_string()]);
            if batched {
                a.extend(["--engine".into(), "batched".into()]);
            }
            check(&a, &tally)
        },
    )
    .unwrap();
    tally.assert_both("router config", 10, 10);
}

#[test]
fn sweep_numeric_flags() {
    let sc = dir().join("sweep.toml");
    std::fs::write(&sc, scenario_text(&[("workload.requests", "20".into())])).unwrap();
    let out = dir().join("sweep-out");
    let params = proptest::sample::select(&["capacity", "alpha", "stale", "pods", "rate"][..]);
    let form = prop_oneof![
        // --values a,b
        (value(), value()).prop_map(|(a, b)| vec![format!("--values={a},{b}")]),
        // --from a --to b [--steps n]
        (value(), value(), proptest::option::of(value())).prop_map(|(f, t, s)| {
            let mut v = vec![format!("--from={f}"), format!("--to={t}")];
            if let Some(s) = s {
                // Many points only cost time (each runs three routers): at most 8 here.
                let s = if s.parse::<u64>().is_ok_and(|n| n > 8 && n <= 10_000) { "8".to_string() } else { s };
                v.push(format!("--steps={s}"));
            }
            v
        }),
        // capacity forms
        (proptest::sample::select(&["hot/", "hot*", "fit", "hot"][..]), value()).prop_map(|(f, k)| vec![format!(
            "--values={f}{}",
            if f.ends_with(['/', '*']) { k } else { String::new() }
        )]),
    ];
    let tally = Tally::new();
    let mut r = runner(150, 0x5EE);
    r.run(&(params, form, proptest::option::of(value())), |(param, form, threads)| {
        let mut a: Vec<String> = vec!["fleet".into(), "sweep".into(), sc.display().to_string()];
        a.extend([
            format!("--param={param}"),
            format!("--out={}", out.display()),
            format!("--max-memory={MAX_MEMORY}"),
        ]);
        a.extend(form);
        // Threads: a random count, or 1 (a large count only costs idle threads).
        a.push(format!(
            "--threads={}",
            threads.filter(|t| t.parse::<u64>().map_or(true, |v| v < 64)).unwrap_or("1".into())
        ));
        check(&a, &tally)
    })
    .unwrap();
    tally.assert_both("sweep", 5, 10);
}
