//! Fleets above 64 pods (pod sets of several 64-bit words, MAX_PODS = 1,024): a generated trace
//! replayed on 1,024 pods under both engines, the per-pod counters adding up and the outcomes
//! agreeing with them; `--pods` above the limit is exit 2 naming the flag and the limit.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_brokerlab"))
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("brokerlab-pods-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `n` requests (trace block size 16): 400 families of shared prefixes (2 to 9 blocks) plus a
/// unique tail, arrivals in bursts of 300 within a millisecond so that queues spread the
/// requests over hundreds of pods.
fn trace(n: u64) -> PathBuf {
    let mut x = 3u64;
    let mut text = String::new();
    for i in 0..n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let family = (x >> 33) % 400;
        let depth = 2 + (x >> 20) % 8;
        let mut ids: Vec<u64> = (0..depth).map(|d| family * 1000 + d).collect();
        ids.extend([1_000_000 + 2 * i, 1_000_001 + 2 * i]);
        let ts = (i / 300) * 2000 + (i % 300) / 100;
        let len = 16 * ids.len() as u64 - (x >> 50) % 16;
        text.push_str(&format!(
            "{{\"timestamp\": {ts}, \"input_length\": {len}, \"output_length\": {}, \"hash_ids\": {ids:?}}}\n",
            1 + (x >> 8) % 40
        ));
    }
    let p = tmp(&format!("gen-{n}.jsonl"));
    std::fs::write(&p, text).unwrap();
    p
}

fn sum(v: &Value, key: &str) -> u64 {
    v[key].as_array().unwrap_or_else(|| panic!("{key} is an array")).iter().map(|x| x.as_u64().unwrap()).sum()
}

#[test]
fn llm_d_precise_on_1024_pods_batched_counts_add_up() {
    let n = 3000u64;
    let t = trace(n);
    let outcomes = tmp("precise-1024.outcomes.jsonl");
    let out = bin()
        .args(["fleet", "replay", "--json", "-q", "--no-date", "--trace-block-size", "16", "--trace"])
        .arg(&t)
        .args(["--pods", "1024", "--capacity", "64", "--router", "llm-d-precise", "--engine", "batched"])
        .args(["--max-num-batched-tokens", "512", "--max-num-seqs", "8", "--outcomes"])
        .arg(&outcomes)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["requests"], n);
    let per_pod = v["per_pod_requests"].as_array().unwrap();
    assert_eq!(per_pod.len(), 1024, "one count per pod");
    assert_eq!(sum(&v, "per_pod_requests"), n, "every request on one pod");
    assert_eq!(sum(&v, "per_pod_steps"), v["steps"].as_u64().unwrap());
    assert_eq!(sum(&v, "per_pod_preemptions"), v["preemptions"].as_u64().unwrap());
    // The outcomes: one per request, their pods tallying to per_pod_requests.
    let text = std::fs::read_to_string(&outcomes).unwrap();
    let mut tally = vec![0u64; 1024];
    let mut hits_above = 0;
    for line in text.lines() {
        let o: Value = serde_json::from_str(line).unwrap();
        let pod = o["pod"].as_u64().unwrap() as usize;
        tally[pod] += 1;
        if pod >= 64 && o["hit_tokens"].as_u64().unwrap() > 0 {
            hits_above += 1;
        }
    }
    assert_eq!(tally.iter().sum::<u64>(), n);
    for (p, c) in tally.iter().enumerate() {
        assert_eq!(per_pod[p].as_u64().unwrap(), *c, "pod {p}");
    }
    let used: BTreeSet<usize> = (0..1024).filter(|&p| tally[p] > 0).collect();
    assert!(used.len() > 200, "the bursts spread over hundreds of pods: {}", used.len());
    assert!(used.iter().any(|&p| p >= 960), "pods in the last word are routed to");
    // The precise scorer finds prefixes held by pods above 64 (wide sets from the exact view).
    assert!(hits_above > 100, "prefix hits on pods >= 64: {hits_above}");
    assert!(v["hit_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn fifo_engine_on_1024_pods_counts_add_up() {
    let n = 3000u64;
    let t = trace(n);
    for router in ["prefix-aware", "llm-d-precise", "round-robin"] {
        let out = bin()
            .args(["fleet", "replay", "--json", "-q", "--no-date", "--trace-block-size", "16", "--trace"])
            .arg(&t)
            .args(["--pods", "1024", "--capacity", "64", "--router", router])
            .output()
            .unwrap();
        assert!(out.status.success(), "{router}: {}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["requests"], n, "{router}");
        assert_eq!(v["per_pod_requests"].as_array().unwrap().len(), 1024, "{router}");
        assert_eq!(sum(&v, "per_pod_requests"), n, "{router}");
        let above: u64 = v["per_pod_requests"].as_array().unwrap()[64..].iter().map(|x| x.as_u64().unwrap()).sum();
        assert!(above > 0, "{router}: pods above 64 serve requests");
    }
}

/// The global index (one slot per key, 16 words per slot at 1,024 pods, read word by word as
/// the walk's live pods shrink) routes exactly as the pods' own tables asked pod by pod.
#[test]
fn global_index_on_1024_pods_routes_as_the_pod_tables() {
    let t = trace(2000);
    let run = |extra: &[&str]| -> Value {
        let out = bin()
            .args(["fleet", "replay", "--json", "-q", "--no-date", "--trace-block-size", "16", "--trace"])
            .arg(&t)
            .args(["--pods", "1024", "--capacity", "64", "--router", "prefix-aware", "--alpha", "0.5"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (tables, global) = (run(&[]), run(&["--index", "global"]));
    for k in ["per_pod_requests", "per_pod_hit_rate", "per_pod_max_queue", "hit_rate", "latency_ns_p90"] {
        assert!(tables.get(k).is_some(), "{k}");
        assert_eq!(tables[k], global[k], "{k}");
    }
    let above: u64 = tables["per_pod_requests"].as_array().unwrap()[64..].iter().map(|x| x.as_u64().unwrap()).sum();
    assert!(above > 0, "pods above 64 serve requests");
}

#[test]
fn pods_above_the_limit_are_exit_2_naming_the_flag_and_the_limit() {
    let t = trace(5);
    for engine in ["fifo", "batched"] {
        let out = bin()
            .args(["fleet", "replay", "-q", "--trace-block-size", "16", "--trace"])
            .arg(&t)
            .args(["--pods", "1025", "--capacity", "64", "--router", "round-robin", "--engine", engine])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{engine}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--pods") && err.contains("1024"), "{engine}: {err}");
    }
}
