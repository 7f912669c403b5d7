//! `brokerlab fleet replay` against an independent Python implementation of docs/MODEL.md
//! (`tests/reference/fleet_model.py`, written from the specification alone), config by config:
//! exact integers, latencies within 1e-9 relative.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run_json(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().expect("command starts (python3 is needed for this test)");
    assert!(
        out.status.success(),
        "{:?}: {}{}",
        cmd,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn compare(trace: &Path, args: &[String]) {
    let ours = run_json(
        Command::new(env!("CARGO_BIN_EXE_brokerlab"))
            .args(["fleet", "replay", "--json", "--trace"])
            .arg(trace)
            .args(args),
    );
    let theirs = run_json(
        Command::new("python3").arg(repo().join("tests/reference/fleet_model.py")).arg("--trace").arg(trace).args(args),
    );
    for k in ["requests", "input_tokens", "hit_tokens", "prefill_tokens", "per_pod_requests"] {
        assert_eq!(ours[k], theirs[k], "{k} differs for {args:?}");
    }
    for k in ["hit_rate", "latency_p50", "latency_p90", "latency_p99"] {
        match (ours[k].as_f64(), theirs[k].as_f64()) {
            (Some(a), Some(b)) => assert!((a - b).abs() <= 1e-9 * a.abs().max(b.abs()), "{k}: {a} vs {b} for {args:?}"),
            (a, b) => assert_eq!(a, b, "{k} for {args:?}"),
        }
    }
}

fn args(pods: usize, cap: usize, router: &str, alpha: f64, stale: u32, order: &str, s: u32) -> Vec<String> {
    [
        "--pods",
        &pods.to_string(),
        "--capacity",
        &cap.to_string(),
        "--router",
        router,
        "--alpha",
        &alpha.to_string(),
        "--stale",
        &stale.to_string(),
        "--order",
        order,
        "--trace-block-size",
        &s.to_string(),
        "--t-decode-ns",
        "1000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<String>>()
    // --alpha is prefix-aware's load penalty and --stale delays the index it reads; any other
    // router refuses them (exit 2), and ignores them in the reference
    .chunks(2)
    .filter(|kv| router == "prefix-aware" || (kv[0] != "--alpha" && kv[0] != "--stale"))
    .flatten()
    .cloned()
    .collect()
}

/// A small trace full of edge cases: shared prefixes of different depths, partial blocks,
/// requests longer than the cache, equal timestamps, a blank line.
fn edge_trace() -> PathBuf {
    let mut lines = Vec::new();
    let mut x = 7u64;
    let mut ts = 0u64;
    for i in 0..160u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        if x >> 60 < 12 {
            ts += (x >> 40) % 40;
        }
        let family = (x >> 20) % 5;
        let depth = 1 + (x >> 30) % 6;
        let mut ids: Vec<u64> = (0..depth).map(|d| family * 100 + d).collect();
        ids.push(10_000 + i);
        let len = 32 * (depth + 1) - (x >> 50) % 20;
        lines.push(format!(
            "{{\"timestamp\": {ts}, \"input_length\": {len}, \"output_length\": {}, \"hash_ids\": {ids:?}}}",
            (x >> 8) % 50
        ));
        if i == 80 {
            lines.push(String::new());
        }
    }
    let p = std::env::temp_dir().join(format!("brokerlab-ref-edge-{}.jsonl", std::process::id()));
    std::fs::write(&p, lines.join("\n")).unwrap();
    p
}

#[test]
fn edge_cases_match_the_reference() {
    let t = edge_trace();
    for router in ["round-robin", "least-loaded", "prefix-aware"] {
        for (cap, stale, order, alpha) in
            [(3, 0, "tail-first", 1.0), (3, 2, "in-order", 0.5), (8, 1, "tail-first", 0.0), (20, 5, "in-order", 3.0)]
        {
            compare(&t, &args(3, cap, router, alpha, stale, order, 32));
        }
    }
    std::fs::remove_file(&t).ok();
}

#[test]
fn real_trace_prefix_matches_the_reference() {
    let src = repo().join("traces/synthetic_trace.jsonl.zst");
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut brokerlab::fleet::input::file::open(&src).expect("vendored trace present"),
        &mut text,
    )
    .unwrap();
    let head: Vec<&str> = text.lines().take(400).collect();
    let t = std::env::temp_dir().join(format!("brokerlab-ref-head-{}.jsonl", std::process::id()));
    std::fs::write(&t, head.join("\n")).unwrap();
    for (router, alpha, stale) in [
        ("round-robin", 1.0, 0),
        ("least-loaded", 1.0, 0),
        ("prefix-aware", 1.0, 0),
        ("prefix-aware", 0.5, 3),
        ("prefix-aware", 3.0, 50),
    ] {
        compare(&t, &args(4, 1024, router, alpha, stale, "tail-first", 512));
    }
    std::fs::remove_file(&t).ok();
}
