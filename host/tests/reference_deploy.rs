//! `brokerlab fleet replay --engine batched` against the independent Python reference of the
//! deployment features (`tests/reference/deploy_model.py`, written from docs/MODEL.md alone):
//! the KV offload tier and SLO goodput, request by request (every `--outcomes` field, the offload
//! hit included) and on the run's counters, on generated traces over many seeds, the tier on and
//! off. A missing python3 fails the test (a comparison that did not run is no pass).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod reference_support;
use reference_support::{Both, need_python3, run_both};

fn tmp(name: &str) -> PathBuf {
    reference_support::tmp("refd", name)
}

/// What one comparison saw.
struct Seen {
    totals: Value,
    coverage: BTreeMap<String, u64>,
}

/// Runs both on `trace` with `args` and compares request by request and on the totals.
fn compare(trace: &Path, args: &[String], label: &str) -> Seen {
    let out_file = tmp(&format!("{label}.outcomes.jsonl"));
    let Both { summary, reference, .. } = run_both("deploy_model.py", &["--coverage"], trace, args, label, &out_file);
    let t = &reference["totals"];
    let mut keys = vec![
        "requests",
        "output_tokens",
        "hit_tokens",
        "prefill_tokens",
        "preemptions",
        "per_pod_preemptions",
        "steps",
        "per_pod_steps",
        "per_pod_requests",
    ];
    let tier = t.get("offload_loads").is_some();
    assert_eq!(summary.get("offload_loads").is_some(), tier, "{label}: offload keys only with the tier");
    if tier {
        keys.extend([
            "offload_hit_tokens",
            "offload_loads",
            "offload_load_blocks",
            "offload_stored_blocks",
            "per_pod_offload_loads",
        ]);
    }
    let pd = t.get("disaggregated").is_some();
    assert_eq!(summary.get("disaggregated").is_some(), pd, "{label}: P/D keys only with P/D");
    if pd {
        keys.extend([
            "disaggregated",
            "transfer_bytes",
            "transfer_ns_p50",
            "transfer_ns_p90",
            "transfer_ns_p99",
            "transfer_ns_max",
        ]);
    }
    let slo = t.get("slo_good_requests").is_some();
    assert_eq!(summary.get("slo_good_requests").is_some(), slo, "{label}: SLO keys only with an SLO");
    if slo {
        keys.push("slo_good_requests");
    }
    for k in keys {
        assert!(t.get(k).is_some(), "{label}: reference has {k}");
        assert_eq!(summary[k], t[k], "{label} {args:?}: {k}");
    }
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
    let makespan = t["makespan_ns"].as_u64().unwrap() as f64 / 1e9;
    assert!(close(summary["makespan_s"].as_f64().unwrap(), makespan), "{label} {args:?}: makespan");
    for k in ["per_pod_kv_util_peak", "per_pod_kv_util_mean"] {
        let (a, b) = (summary[k].as_array().unwrap(), t[k].as_array().unwrap());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!(close(x.as_f64().unwrap(), y.as_f64().unwrap()), "{label} {args:?}: {k}: {a:?} vs {b:?}");
        }
    }
    let mut floats = vec!["mean_waiting"];
    if slo {
        floats.extend(["slo_attainment", "goodput_req_per_s"]);
    }
    for k in floats {
        let (a, b) = (summary[k].as_f64().unwrap(), t[k].as_f64().unwrap());
        assert!(close(a, b), "{label} {args:?}: {k} {a} vs {b}");
    }
    let coverage = t["coverage"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect())
        .unwrap_or_default();
    Seen { totals: t.clone(), coverage }
}

/// A deterministic generator (LCG), so that every seed is a fixed case.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A trace of `n` requests over `families` shared prefixes (depths 1 to 9 blocks), with a
/// private tail, partial last blocks, equal timestamps and outputs of 0 to 40 tokens: a working
/// set that outgrows small pods, so that blocks leave the GPU and come back.
fn trace(seed: u64, n: u64, families: u64) -> PathBuf {
    let mut g = Lcg(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut ts = 0u64;
    let mut lines = Vec::new();
    for i in 0..n {
        if g.below(3) > 0 {
            ts += g.below(6);
        }
        let family = g.below(families);
        let depth = 1 + g.below(9);
        let mut ids: Vec<u64> = (0..depth).map(|d| family * 1000 + d).collect();
        let tail = g.below(3);
        ids.extend((0..tail).map(|k| 1_000_000 + 10 * i + k));
        let blocks = ids.len() as u64;
        let len = (16 * blocks).saturating_sub(g.below(16)).max(1);
        let out = g.below(41);
        lines.push(format!(
            "{{\"timestamp\": {ts}, \"input_length\": {len}, \"output_length\": {out}, \"hash_ids\": {ids:?}}}"
        ));
    }
    let p = tmp(&format!("trace-{seed}.jsonl"));
    std::fs::write(&p, lines.join("\n")).unwrap();
    p
}

/// The arguments of case `seed`: pods, capacity, budget and router from the seed; the tier on
/// (`c2` > 0) with a PCIe link from fast to slow enough that loads outlast steps.
fn args(seed: u64, c2: u64, slo: bool, pd: bool) -> Vec<String> {
    let mut g = Lcg(seed ^ 0xABCD);
    let pods = if pd { 2 + g.below(3) } else { 1 + g.below(3) };
    let cap = 24 + g.below(40);
    let m = [33, 64, 128, 8192][g.below(4) as usize];
    let s = (1 + g.below(8)).min(m);
    let router = ["round-robin", "least-loaded", "prefix-aware"][g.below(3) as usize];
    let mut a: Vec<String> = [
        "--trace-block-size",
        "16",
        "--pods",
        &pods.to_string(),
        "--capacity",
        &cap.to_string(),
        "--router",
        router,
        "--alpha",
        ["0.5", "1", "4"][g.below(3) as usize],
        "--max-num-batched-tokens",
        &m.to_string(),
        "--max-num-seqs",
        &s.to_string(),
        "--t-overhead-ns",
        "1000",
        "--t-prefill-token-ns",
        "100",
        "--t-decode-seq-ns",
        "300",
        "--t-kv-token-ns",
        "7",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if c2 > 0 {
        // 16 x 4096 B per block: ~2 us per block at 32 GB/s, ~1 ms at 64 MB/s
        let bw = [32_000_000_000u64, 640_000_000, 64_000_000][g.below(3) as usize];
        a.extend(
            [
                "--cpu-capacity",
                &c2.to_string(),
                "--kv-bytes-per-token",
                "4096",
                "--pcie-bytes-per-s",
                &bw.to_string(),
                "--pcie-latency-ns",
                ["0", "1000", "250000"][g.below(3) as usize],
                "--cpu-tier-weight",
                ["0.8", "0.4", "1", "0"][g.below(4) as usize],
            ]
            .iter()
            .map(|s| s.to_string()),
        );
    }
    if pd {
        let np = 1 + g.below(pods - 1);
        let pcap = cap + [0, 16, 200][g.below(3) as usize];
        a.extend(
            [
                "--prefill-pods",
                &np.to_string(),
                "--prefill-capacity",
                &pcap.to_string(),
                "--pd-decider",
                ["prefix-threshold", "prefix-threshold", "always", "never"][g.below(4) as usize],
                "--pd-threshold-tokens",
                ["16", "0", "48", "160"][g.below(4) as usize],
                "--pd-link-bytes-per-s",
                ["25000000000", "640000000", "64000000", "6400000"][g.below(4) as usize],
                "--pd-link-latency-ns",
                ["0", "50000", "7"][g.below(3) as usize],
                "--kv-bytes-per-token",
                "4096",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        if g.below(4) == 0 {
            a.extend(["--prefill-profile".to_string(), "seed".to_string()]);
        }
        if c2 > 0 {
            // --kv-bytes-per-token given twice otherwise
            let i = a.iter().rposition(|x| x == "--kv-bytes-per-token").unwrap();
            a.drain(i..i + 2);
        }
    }
    if slo {
        a.extend(["--slo-ttft-ms", "0.05", "--slo-tpot-ms", "0.004"].iter().map(|s| s.to_string()));
    }
    reference_support::alpha_only_where_it_applies(a)
}

/// Many seeds, P/D off and on, the tier off and on (two sizes), SLO goodput on half of them: every request's
/// times and counters agree, and the rare branches of the tier are reached somewhere.
#[test]
fn generated_cases_match_the_reference_request_by_request() {
    need_python3("the deployment reference comparison");
    let mut coverage: BTreeMap<String, u64> = BTreeMap::new();
    let mut loads = 0;
    for seed in 0..24u64 {
        let t = trace(seed, 120, 4 + seed % 5);
        for (c2, pd) in [(0, false), (16, false), (200, false), (0, true), (16, true)] {
            let seen = compare(&t, &args(seed, c2, seed % 2 == 0, pd), &format!("s{seed}-c{c2}-pd{pd}"));
            for (k, v) in seen.coverage {
                *coverage.entry(k).or_default() += v;
            }
            loads += seen.totals.get("offload_loads").and_then(Value::as_u64).unwrap_or(0);
        }
        std::fs::remove_file(&t).ok();
    }
    assert!(loads > 100, "the tier loads blocks: {loads}");
    for branch in [
        "preempt",
        "preempt_loading",
        "skip_loading",
        "wait",
        "wake",
        "load_blocked",
        "tier_full",
        "shared_link",
        "transferred_admission",
        "transferred_blocked",
    ] {
        assert!(coverage.get(branch).copied().unwrap_or(0) > 0, "branch {branch} not reached: {coverage:?}");
    }
}

/// With the tier off the deployment reference is the batched reference: the same cases run
/// without any new flag agree with the engine (its results unchanged by the feature).
#[test]
fn tier_of_zero_blocks_is_todays_engine() {
    need_python3("the deployment reference comparison");
    let t = trace(99, 150, 6);
    let a = args(99, 0, false, false);
    let off = compare(&t, &a, "off");
    let mut zero = a.clone();
    zero.extend(["--cpu-capacity".to_string(), "0".to_string()]);
    let z = compare(&t, &zero, "zero");
    assert_eq!(off.totals, z.totals);
    std::fs::remove_file(&t).ok();
}
