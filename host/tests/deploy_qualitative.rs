//! The qualitative checks of the deployment features (docs/MODEL.md, "Prefill/decode
//! disaggregation", "The KV offload tier", "SLO goodput") on the engine itself: P/D wins SLO
//! goodput on long prompts with short outputs under a tight TPOT SLO and loses on short prompts;
//! a slower KV link makes TTFT grow without bound; the prefix-threshold rule skips the transfer
//! when the decode pod holds the prefix; the offload tier raises the hit rate and lowers TTFT when
//! the working set fits GPU + CPU, never pays over a PCIe link near 0, and with 0 blocks changes
//! nothing. Default profile (qwen3-32b-h100x2) unless a case says otherwise.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

mod reference_support;
use reference_support::Line;

fn tmp(name: &str) -> PathBuf {
    reference_support::tmp("deployq", name)
}

/// A trace of `lines` (trace block size 16).
fn write(name: &str, lines: &[Line]) -> PathBuf {
    let p = tmp(&format!("{name}.jsonl"));
    reference_support::write_lines(&p, lines);
    p
}

/// `fleet replay --engine batched --json` of `trace` with `args`: the summary and the outcomes.
fn replay(trace: &PathBuf, args: &[&str]) -> (Value, Vec<Value>) {
    let out_file = tmp(&format!("{}.outcomes", trace.file_name().unwrap().to_string_lossy()));
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "--engine", "batched", "--json", "-q", "--trace-block-size", "16", "--trace"])
        .arg(trace)
        .arg("--outcomes")
        .arg(&out_file)
        .args(args)
        .output()
        .expect("brokerlab starts");
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    let lines = std::fs::read_to_string(&out_file).unwrap();
    std::fs::remove_file(&out_file).ok();
    (serde_json::from_slice(&o.stdout).unwrap(), lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect())
}

/// One request every `gap_us`, unique prompts (no cache hit anywhere).
fn unique(n: u64, gap_us: u64, l: u64, o: u64) -> Vec<Line> {
    (0..n).map(|i| (i * gap_us / 1000, l, o, (0..l.div_ceil(16)).map(|j| 1_000_000 + 1000 * i + j).collect())).collect()
}

fn goodput(trace: &PathBuf, tpot_ms: &str, extra: &[&str]) -> (u64, f64) {
    let mut a = vec!["--pods", "4", "--capacity", "20000", "--router", "least-loaded", "--slo-ttft-ms", "3000"];
    a.extend(["--slo-tpot-ms", tpot_ms]);
    a.extend(extra);
    let (s, _) = replay(trace, &a);
    (s["slo_good_requests"].as_u64().unwrap(), s["goodput_req_per_s"].as_f64().unwrap())
}

/// 8,000-token prompts every 250 ms with 64 output tokens under a 20 ms TPOT SLO: aggregated, a
/// decode that shares a step with another request's 8,000-token prefill waits ~0.5 s for that
/// token; 2 prefill + 2 decode pods keep prefills out of the decode steps.
#[test]
fn pd_wins_goodput_on_long_prompts_with_short_outputs() {
    let t = write("long", &unique(40, 250_000, 8000, 64));
    let (agg_good, agg) = goodput(&t, "20", &[]);
    let (pd_good, pd) = goodput(&t, "20", &["--prefill-pods", "2", "--pd-decider", "always"]);
    assert_eq!(pd_good, 40, "P/D: every request meets the SLOs");
    assert!(agg_good < 20, "aggregated: {agg_good} good");
    assert!(pd > 2.0 * agg, "goodput P/D {pd} vs aggregated {agg}");
    std::fs::remove_file(&t).ok();
}

/// 128-token prompts every 12.5 ms with 256 output tokens under a 17 ms TPOT SLO: the work is
/// decode; P/D leaves it to half the pods.
#[test]
fn pd_loses_goodput_on_short_prompts() {
    let t = write("short", &unique(200, 12_500, 128, 256));
    let (agg_good, agg) = goodput(&t, "17", &[]);
    let (pd_good, pd) = goodput(&t, "17", &["--prefill-pods", "2", "--pd-decider", "always"]);
    assert!(agg_good > 180, "aggregated: {agg_good} good");
    assert!(pd_good < 20, "P/D: {pd_good} good");
    assert!(pd < agg);
    std::fs::remove_file(&t).ok();
}

/// One disaggregated request as the link slows: TTFT grows with 1 / bandwidth, past any bound.
#[test]
fn ttft_grows_without_bound_as_the_link_slows() {
    let t = write("one", &[(0, 64, 3, vec![1, 2, 3, 4])]);
    let base = ["--pods", "2", "--capacity", "64", "--router", "round-robin", "--prefill-pods", "1"];
    let mut last = 0;
    for bw in ["25000000000", "1000000000", "1000000", "1000"] {
        let mut a = base.to_vec();
        a.extend(["--pd-decider", "always", "--pd-link-bytes-per-s", bw]);
        let (s, o) = replay(&t, &a);
        let ttft = o[0]["ttft_ns"].as_u64().unwrap();
        let transfer = o[0]["transfer_ns"].as_u64().unwrap();
        let bytes = o[0]["transfer_bytes"].as_u64().unwrap();
        assert_eq!(bytes, 64 * 262_144, "the prompt's blocks at the profile's KV bytes per token");
        // alone on its link: ceil(bytes x 10^9 / BW) + the default 50 us latency
        assert_eq!(transfer, (bytes as u128 * 1_000_000_000).div_ceil(bw.parse::<u128>().unwrap()) as u64 + 50_000);
        assert!(ttft > transfer && ttft > last, "bw {bw}: ttft {ttft}, before {last}");
        assert_eq!(s["disaggregated"], 1);
        last = ttft;
    }
    assert!(last > 10_000_000_000_000, "at 1 kB/s a 16 MiB transfer takes hours: {last} ns");
    std::fs::remove_file(&t).ok();
}

/// Two requests with the same prompt: the second finds it on its decode pod, so the
/// prefix-threshold rule decodes it locally (no transfer); `always` transfers it anyway.
#[test]
fn prefix_threshold_skips_transfers_when_the_decode_pod_holds_the_prefix() {
    let ids: Vec<u64> = (1..=8).collect();
    let t = write("twice", &[(0, 128, 4, ids.clone()), (1000, 128, 4, ids)]);
    let base = ["--pods", "2", "--capacity", "64", "--router", "prefix-aware", "--prefill-pods", "1"];
    let (s, o) = replay(&t, &base);
    assert_eq!(o[0]["prefill_pod"], 0, "first: nothing cached on the decode pod, prefilled remotely");
    assert_eq!(o[1]["prefill_pod"], Value::Null, "second: the decode pod holds its prefix");
    assert_eq!(o[1]["transfer_bytes"], 0);
    assert_eq!(s["disaggregated"], 1);
    // the local decode hits the prefix the transfer left there (8 blocks, capped below the prompt)
    assert_eq!(o[1]["hit_tokens"], 112);
    let mut always = base.to_vec();
    always.extend(["--pd-decider", "always"]);
    let (s, o) = replay(&t, &always);
    assert_eq!(s["disaggregated"], 2);
    assert_eq!(o[1]["prefill_pod"], 0);
    // a threshold above the prompt never disaggregates
    let mut high = base.to_vec();
    high.extend(["--pd-threshold-tokens", "129"]);
    assert_eq!(replay(&t, &high).0["disaggregated"], 0);
    std::fs::remove_file(&t).ok();
}

/// 8 prompts of 16 blocks each, cycled 12 times on one pod of 64 blocks: the GPU holds half the
/// working set, so LRU evicts each prompt before it comes back; a 128-block CPU tier holds all of
/// it.
fn cycling() -> PathBuf {
    let lines: Vec<Line> =
        (0..96u64).map(|i| (i * 200, 256, 4, (0..16).map(|j| (i % 8) * 100 + j).collect())).collect();
    write("cycle", &lines)
}

fn mean_ttft(o: &[Value]) -> f64 {
    o.iter().map(|r| r["ttft_ns"].as_u64().unwrap() as f64).sum::<f64>() / o.len() as f64
}

#[test]
fn the_tier_raises_hits_and_lowers_ttft_when_the_working_set_fits_gpu_and_cpu() {
    let t = cycling();
    let base = ["--pods", "1", "--capacity", "64", "--router", "round-robin"];
    let (off, o_off) = replay(&t, &base);
    let mut tier = base.to_vec();
    tier.extend(["--cpu-capacity", "128"]);
    let (on, o_on) = replay(&t, &tier);
    let hits =
        |s: &Value| s["hit_tokens"].as_u64().unwrap() + s.get("offload_hit_tokens").map_or(0, |v| v.as_u64().unwrap());
    assert!(hits(&on) > 2 * hits(&off) + 1000, "hits with the tier {} vs without {}", hits(&on), hits(&off));
    assert!(on["offload_loads"].as_u64().unwrap() > 50);
    assert!(mean_ttft(&o_on) < 0.7 * mean_ttft(&o_off), "TTFT {} vs {}", mean_ttft(&o_on), mean_ttft(&o_off));
    // PCIe near 0: every load outlasts the recompute it replaces
    let mut slow = tier.clone();
    slow.extend(["--pcie-bytes-per-s", "1000"]);
    let (_, o_slow) = replay(&t, &slow);
    assert!(
        mean_ttft(&o_slow) > 10.0 * mean_ttft(&o_off),
        "slow PCIe {} vs none {}",
        mean_ttft(&o_slow),
        mean_ttft(&o_off)
    );
    std::fs::remove_file(&t).ok();
}

/// `--cpu-capacity 0` and `--prefill-pods 0` are today's engine (every key of the summary; the
/// byte-for-byte check of every output is scripts/identity.sh).
#[test]
fn features_off_are_todays_results() {
    let t = cycling();
    let base = ["--pods", "2", "--capacity", "40", "--router", "prefix-aware"];
    let run = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend(extra);
        let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
            .args(["fleet", "replay", "--engine", "batched", "--json", "-q", "--no-date", "--trace-block-size", "16"])
            .arg("--trace")
            .arg(&t)
            .args(&a)
            .output()
            .unwrap();
        assert!(o.status.success());
        // everything but the provenance, which quotes the command line
        let mut v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_object_mut().unwrap().remove("provenance");
        serde_json::to_string(&v).unwrap()
    };
    let today = run(&[]);
    assert_eq!(today, run(&["--cpu-capacity", "0"]));
    assert_eq!(today, run(&["--prefill-pods", "0"]));
    assert!(!today.contains("offload") && !today.contains("disaggregated") && !today.contains("slo"));
    std::fs::remove_file(&t).ok();
}

/// Bad P/D, tier and SLO input exits 2 naming the flag or the scenario key; a scenario with
/// `[fleet.pd]` and the tier's `[fleet.engine]` keys runs and reports their keys.
#[test]
fn bad_input_names_the_flag_and_scenarios_take_the_tables() {
    let t = write("bad", &[(0, 64, 3, vec![1, 2, 3, 4])]);
    let base = ["--router", "round-robin", "--capacity", "64", "--engine", "batched"];
    for (extra, flag) in [
        (&["--pods", "2", "--prefill-pods", "2"][..], "--prefill-pods"),
        (&["--pods", "3", "--prefill-pods", "1", "--pd-decider", "foo"][..], "--pd-decider"),
        (&["--pods", "3", "--prefill-pods", "1", "--pd-link-bytes-per-s", "0"][..], "--pd-link-bytes-per-s"),
        (&["--pods", "3", "--prefill-pods", "1", "--prefill-capacity", "2"][..], "--prefill-capacity"),
        (&["--pods", "1", "--cpu-capacity", "8", "--cpu-tier-weight", "2"][..], "--cpu-tier-weight"),
        (&["--pods", "1", "--cpu-capacity", "8", "--pcie-bytes-per-s", "0"][..], "--pcie-bytes-per-s"),
        (&["--pods", "1", "--kv-bytes-per-token", "0"][..], "--kv-bytes-per-token"),
        (&["--pods", "1", "--slo-tpot-ms", "1e3"][..], "--slo-tpot-ms"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
            .args(["fleet", "replay", "-q", "--trace-block-size", "16", "--trace"])
            .arg(&t)
            .args(base)
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?}: {err}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "-q", "--trace-block-size", "16", "--pods", "2", "--prefill-pods", "1"])
        .args(["--router", "round-robin", "--capacity", "64", "--trace"])
        .arg(&t)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--prefill-pods: only with --engine batched"));
    // a scenario
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/rag.toml")).unwrap();
    let sc = src.replace("requests = 4000", "requests = 200")
        + "\n[fleet.engine]\ncpu_capacity = 2048\ncpu_tier_weight = 0.4\n\n[fleet.pd]\nprefill_pods = 3\nlink_bytes_per_s = 50000000000\n";
    let p = tmp("rag-pd.toml");
    std::fs::write(&p, &sc).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "run", "--json", "-q", "--slo-ttft-ms", "2000"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["prefill_pods"].as_u64(), s["decode_pods"].as_u64()), (Some(3), Some(5)));
    assert_eq!(s["cpu_capacity"], 2048);
    assert_eq!(s["cpu_tier_weight"], 0.4);
    assert!(s["disaggregated"].as_u64().unwrap() > 0);
    assert_eq!(s["requests"], 200);
    assert!(s["slo_good_requests"].as_u64().is_some());
    std::fs::write(&p, sc.replace("prefill_pods = 3", "prefill_pods = 8")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab")).args(["fleet", "run", "-q"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("`fleet.pd.prefill_pods`"));
    std::fs::remove_file(&p).ok();
    std::fs::remove_file(&t).ok();
}
