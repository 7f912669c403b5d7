//! `brokerlab fleet replay --engine batched` against an independent Python implementation of the
//! batched engine (`tests/reference/batched_model.py`, written from docs/MODEL.md alone), request
//! by request: pod, queue_len at routing, hit tokens, prefill tokens, TTFT and E2E in ns,
//! preemptions (`--outcomes`), and the run's counters (steps, preemptions, prefill tokens per pod),
//! makespan, KV utilization and mean waiting queue.
//!
//! Edge-case traces written by hand, and the first 2,000 lines of both vendored traces (decompressed
//! here: the reference reads plain JSONL) with pods and capacity small enough to preempt.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod reference_support;
use reference_support::{Both, Line, need_python3, repo, run_both};

fn tmp(name: &str) -> PathBuf {
    reference_support::tmp("refb", name)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// What a comparison saw, for the callers' own checks.
struct Seen {
    outcomes: Vec<Value>,
    preemptions: u64,
}

/// Runs both on `trace` with `args` (the Rust binary and the reference at once) and compares.
fn compare(trace: &Path, args: &[String], label: &str) -> Seen {
    let out_file = tmp(&format!("{label}.outcomes.jsonl"));
    let Both { summary, reference, outcomes } = run_both("batched_model.py", &[], trace, args, label, &out_file);
    let t = &reference["totals"];
    for k in [
        "requests",
        "output_tokens",
        "hit_tokens",
        "prefill_tokens",
        "preemptions",
        "per_pod_preemptions",
        "steps",
        "per_pod_steps",
        "per_pod_requests",
    ] {
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
    let (a, b) = (summary["mean_waiting"].as_f64().unwrap(), t["mean_waiting"].as_f64().unwrap());
    assert!(close(a, b), "{label} {args:?}: mean_waiting {a} vs {b}");
    Seen { outcomes, preemptions: t["preemptions"].as_u64().unwrap() }
}

/// Trace lines, trace block size 16.
fn write_trace(name: &str, reqs: &[Line]) -> PathBuf {
    let p = tmp(&format!("{name}.jsonl"));
    reference_support::write_lines(&p, reqs);
    p
}

/// Small-trace arguments: trace block size 16 and step costs that make every term visible and
/// let millisecond arrivals fall between steps. `s` is clamped to `m` (S <= M is required).
fn small(pods: u32, cap: u32, router: &str, m: u32, s: u32, alpha: f64) -> Vec<String> {
    reference_support::alpha_only_where_it_applies(strings(&[
        "--trace-block-size",
        "16",
        "--pods",
        &pods.to_string(),
        "--capacity",
        &cap.to_string(),
        "--router",
        router,
        "--alpha",
        &alpha.to_string(),
        "--max-num-batched-tokens",
        &m.to_string(),
        "--max-num-seqs",
        &s.min(m).to_string(),
        "--t-overhead-ns",
        "500000",
        "--t-prefill-token-ns",
        "20000",
        "--t-decode-seq-ns",
        "300000",
        "--t-kv-token-ns",
        "7",
    ]))
}

fn ids(range: std::ops::Range<u64>) -> Vec<u64> {
    range.collect()
}

fn field(o: &Value, k: &str) -> u64 {
    o[k].as_u64().unwrap()
}

#[test]
fn one_request_alone() {
    need_python3("the batched reference comparison");
    let t = write_trace("one", &[(0, 100, 5, ids(1..8))]);
    let seen = compare(&t, &small(1, 64, "round-robin", 8192, 1024, 1.0), "one");
    // hand-computed: one prefill step of 100 tokens, then 4 decode steps (K = c + n)
    let prefill = 500_000 + 20_000 * 100 + 7 * 100;
    let decodes: u64 = (101..105).map(|k| 500_000 + 300_000 + 7 * k).sum();
    assert_eq!(field(&seen.outcomes[0], "ttft_ns"), prefill);
    assert_eq!(field(&seen.outcomes[0], "e2e_ns"), prefill + decodes);
    std::fs::remove_file(&t).ok();
}

#[test]
fn edge_cases_match_the_reference() {
    need_python3("the batched reference comparison");
    // two requests sharing one step's budget (M = 64: 40 + a chunk of 24)
    let shared = write_trace("shared", &[(0, 40, 3, ids(10..12)), (0, 50, 4, ids(20..23))]);
    for m in [64, 90, 8192] {
        compare(&shared, &small(1, 64, "round-robin", m, 1024, 1.0), "shared");
    }
    // one running slot: the second waits for the first to finish
    compare(&shared, &small(1, 64, "round-robin", 8192, 1, 1.0), "shared-s1");

    // chunked prefill across steps
    let chunked = write_trace("chunked", &[(0, 200, 3, ids(1..13)), (3, 33, 2, ids(50..52))]);
    for m in [1, 16, 48, 199, 200] {
        compare(&chunked, &small(1, 64, "round-robin", m, 1, 1.0), "chunked");
    }

    // prefix hits at exactly a block multiple: with no output yet the last block is recomputed
    let multiple = write_trace(
        "multiple",
        &[
            (0, 64, 2, ids(1..5)),
            (50, 64, 2, ids(1..5)),
            (100, 80, 2, vec![1, 2, 3, 4, 5]),
            (150, 65, 1, vec![1, 2, 3, 4, 6]),
            (200, 64, 0, ids(1..5)),
            (250, 16, 1, vec![1]),
            (300, 17, 1, vec![1, 9]),
        ],
    );
    let seen = compare(&multiple, &small(1, 64, "round-robin", 8192, 1024, 1.0), "multiple");
    let hits: Vec<u64> = seen.outcomes.iter().map(|o| field(o, "hit_tokens")).collect();
    assert_eq!(hits, [0, 48, 64, 64, 48, 0, 16]);
    for router in ["least-loaded", "prefix-aware"] {
        compare(&multiple, &small(2, 64, router, 32, 1024, 1.0), "multiple-2");
    }

    // a pinned prefix survives eviction pressure: A decodes for long while B and C push every
    // free block out; D hits A's prefix (pinned), E misses B's (evicted)
    let pinned = write_trace(
        "pinned",
        &[
            (0, 48, 60, ids(1..4)),
            (5, 64, 2, ids(7..11)),
            (10, 64, 2, ids(11..15)),
            (15, 64, 2, ids(15..19)),
            (25, 56, 2, vec![1, 2, 3, 30]),
            (40, 64, 2, ids(7..11)),
        ],
    );
    let seen = compare(&pinned, &small(1, 14, "round-robin", 8192, 1024, 1.0), "pinned");
    assert_eq!(field(&seen.outcomes[4], "hit_tokens"), 48, "A's pinned prefix is hit");
    assert_eq!(field(&seen.outcomes[5], "hit_tokens"), 0, "B's released blocks were evicted");
    for cap in [12, 20] {
        compare(&pinned, &small(1, cap, "round-robin", 8192, 1024, 1.0), "pinned-cap");
    }

    // preemption and recompute: two requests grow to 5 blocks each in 8
    let preempt = write_trace("preempt", &[(0, 40, 40, ids(1..4)), (0, 40, 40, ids(1..4)), (1, 40, 40, ids(8..11))]);
    for (cap, m) in [(8, 8192), (8, 24), (6, 8192), (11, 40)] {
        let seen = compare(&preempt, &small(1, cap, "round-robin", m, 1024, 1.0), "preempt");
        assert!(seen.preemptions > 0, "cap {cap}, M {m}: no preemption");
        if cap == 8 && m == 8192 {
            assert!(seen.outcomes.iter().any(|o| field(o, "preemptions") > 0));
        }
    }

    // self-preemption, several preemptions in a row, and a recompute chunked by M = 16 whose last
    // chunk is one token (g >= 1 and need = 1: counted as a decode, as the rule says); found by a
    // search over small random traces with coverage counters in the reference
    let recompute = write_trace(
        "recompute",
        &[
            (3, 32, 5, vec![3, 1]),
            (6, 16, 16, vec![3]),
            (7, 48, 23, vec![52, 201, 202]),
            (7, 48, 22, vec![1, 301, 302]),
            (7, 32, 6, vec![3, 401]),
            (8, 16, 19, vec![1]),
        ],
    );
    for (cap, m, s) in [(7, 16, 4), (7, 16, 2), (8, 24, 4), (9, 17, 3)] {
        let seen = compare(&recompute, &small(1, cap, "round-robin", m, s, 1.0), "recompute");
        assert!(seen.preemptions > 0, "cap {cap}, M {m}: no preemption");
    }

    // ties in routing: equal arrivals, equal matches, score ties broken by queue_len then index
    let ties = write_trace(
        "ties",
        &[
            (0, 32, 3, vec![1, 2]),
            (0, 32, 3, vec![1, 2]),
            (0, 32, 3, vec![3, 4]),
            (0, 32, 3, vec![5, 6]),
            (20, 40, 3, vec![1, 2, 7]),
            (20, 40, 3, vec![3, 4, 8]),
            (20, 32, 3, vec![1, 2]),
            (21, 32, 3, vec![9, 10]),
            (21, 32, 3, vec![1, 2]),
        ],
    );
    for router in ["round-robin", "least-loaded", "prefix-aware"] {
        for alpha in [0.0, 1.0, 2.0] {
            compare(&ties, &small(3, 64, router, 8192, 1024, alpha), "ties");
        }
    }
    for p in [shared, chunked, multiple, pinned, preempt, recompute, ties] {
        std::fs::remove_file(&p).ok();
    }
}

/// A pseudo-random mix (shared prefixes of different depths, partial blocks, equal timestamps,
/// outputs of 0 to 59 tokens) on tight pods: every rule at once.
#[test]
fn mixed_trace_matches_the_reference() {
    need_python3("the batched reference comparison");
    let mut reqs = Vec::new();
    let mut x = 11u64;
    let mut ts = 0u64;
    for i in 0..200u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        if x >> 60 < 10 {
            ts += (x >> 40) % 8;
        }
        let family = (x >> 20) % 4;
        let depth = (x >> 30) % 7;
        let mut v: Vec<u64> = (0..depth).map(|d| family * 100 + d).collect();
        v.extend([10_000 + 3 * i, 10_001 + 3 * i]);
        let len = 16 * (depth + 2) - (x >> 50) % 17;
        reqs.push((ts, len.max(1), (x >> 8) % 60, v));
    }
    let t = write_trace("mixed", &reqs);
    let mut preemptions = 0;
    preemptions += compare(&t, &small(1, 16, "round-robin", 64, 8, 1.0), "mixed-1").preemptions;
    for router in ["round-robin", "least-loaded", "prefix-aware"] {
        for (pods, cap, m, s, alpha) in [(2, 12, 8192, 1024, 0.5), (3, 24, 40, 3, 4.0), (4, 12, 33, 2, 1.0)] {
            let label = format!("mixed-{router}-{pods}");
            preemptions += compare(&t, &small(pods, cap, router, m, s, alpha), &label).preemptions;
        }
    }
    assert!(preemptions > 0);
    std::fs::remove_file(&t).ok();
}

/// More than 64 pods (pod sets of several 64-bit words): a burst of 150 requests with distinct
/// prefixes at t = 0 spreads over pods 0..149 (each sees the earlier ones queued), then 250
/// requests reuse those prefixes and follow them to pods above 64. prefix-aware reads the exact
/// index through the wide sets; the reference knows nothing of words.
#[test]
fn more_than_64_pods_match_the_reference() {
    need_python3("the batched reference comparison");
    let mut reqs = Vec::new();
    let mut x = 5u64;
    for i in 0..400u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let (ts, family) = if i < 150 { (0, i) } else { (1 + (i - 150) * 3, (x >> 33) % 150) };
        let depth = 2 + (x >> 20) % 3;
        let mut v: Vec<u64> = (0..depth).map(|d| family * 100 + d).collect();
        v.push(100_000 + i);
        reqs.push((ts, 16 * (depth + 1), 1 + (x >> 8) % 20, v));
    }
    let t = write_trace("wide", &reqs);
    for pods in [150, 1024] {
        let seen = compare(&t, &small(pods, 40, "prefix-aware", 64, 4, 1.0), &format!("wide-{pods}"));
        let above = seen.outcomes.iter().filter(|o| o["pod"].as_u64().unwrap() >= 64).count();
        let hits_above =
            seen.outcomes.iter().filter(|o| o["pod"].as_u64().unwrap() >= 64 && o["hit_tokens"].as_u64().unwrap() > 0);
        assert!(above > 100, "{pods} pods: {above} requests on pods >= 64");
        assert!(hits_above.count() > 20, "{pods} pods: prefix hits on pods >= 64");
    }
    std::fs::remove_file(&t).ok();
}

/// The first 2,000 lines of a vendored trace, as plain JSONL.
fn head(name: &str, router: &str) -> PathBuf {
    let src = repo().join(format!("traces/{name}.jsonl.zst"));
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut brokerlab::fleet::input::file::open(&src).expect("vendored trace present"),
        &mut text,
    )
    .unwrap();
    let lines: Vec<&str> = text.lines().take(2000).collect();
    let p = tmp(&format!("{name}-{router}-head.jsonl"));
    std::fs::write(&p, lines.join("\n")).unwrap();
    p
}

/// Default profile and budget (qwen3-32b-h100x2, M = 8192, S = 1024), pods and capacity that
/// preempt hundreds of times.
fn real(name: &str, router: &str, pods: &str, cap: &str, extra: &[&str]) {
    need_python3("the batched reference comparison");
    let t = head(name, router);
    let mut args = strings(&["--pods", pods, "--capacity", cap, "--router", router]);
    args.extend(strings(extra));
    let seen = compare(&t, &args, &format!("{name}-{router}"));
    assert_eq!(seen.outcomes.len(), 2000);
    assert!(seen.preemptions > 0, "{name} {router}: no preemption");
    std::fs::remove_file(&t).ok();
}

#[test]
fn conversation_head_round_robin() {
    real("conversation_trace", "round-robin", "4", "8000", &[]);
}

#[test]
fn conversation_head_prefix_aware() {
    real("conversation_trace", "prefix-aware", "4", "8000", &[]);
}

#[test]
fn synthetic_head_round_robin() {
    real("synthetic_trace", "round-robin", "2", "9000", &["--max-num-batched-tokens", "2048", "--max-num-seqs", "64"]);
}

#[test]
fn synthetic_head_prefix_aware() {
    real("synthetic_trace", "prefix-aware", "2", "9000", &["--max-num-batched-tokens", "2048", "--max-num-seqs", "64"]);
}

/// Inputs the engine rejects are rejected by both, naming the same line.
#[test]
fn rejected_inputs_match_the_reference() {
    need_python3("the batched reference comparison");
    let cases: [(&str, Vec<Line>, u32); 3] = [
        ("too-long", vec![(0, 32, 1, vec![1, 2]), (1, 40, 10, vec![1, 2, 3])], 3),
        ("empty-prompt", vec![(0, 32, 1, vec![1, 2]), (1, 0, 3, vec![])], 8),
        ("fits-exactly", vec![(0, 40, 9, vec![1, 2, 3])], 3),
    ];
    for (name, reqs, cap) in cases {
        let t = write_trace(name, &reqs);
        let args = small(1, cap, "round-robin", 8192, 1024, 1.0);
        let ours = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
            .args(["fleet", "replay", "--engine", "batched", "--json", "-q", "--trace"])
            .arg(&t)
            .args(&args)
            .output()
            .unwrap();
        let theirs = Command::new("python3")
            .arg(repo().join("tests/reference/batched_model.py"))
            .arg("--trace")
            .arg(&t)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(ours.status.code(), theirs.status.code(), "{name}: exit codes");
        if theirs.status.code() == Some(2) {
            let ref_line = String::from_utf8_lossy(&theirs.stdout).split_whitespace().nth(1).unwrap().to_string();
            let line = ref_line.trim_start_matches("line=").trim_end_matches(':');
            let err = String::from_utf8_lossy(&ours.stderr);
            assert!(err.contains(&format!(".jsonl:{line}:")), "{name}: reference {ref_line}, ours {err}");
        }
        std::fs::remove_file(&t).ok();
    }
}
