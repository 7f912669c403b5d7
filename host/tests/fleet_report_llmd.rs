//! `--report-llmd`: the file is llm-d-benchmark's benchmark report v0.1, read back by a small
//! stdlib Python script (tests/reference/read_llmd_report.py) that restates the schema's structure
//! (required keys, types, enums, the unit checks) and recomputes the TTFT and request-latency
//! figures from the per-request outcomes. Python 3 is required: without it the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

const SCENARIO: &str = r#"
name = "report-llmd"
[workload]
seed = 7
requests = 200
tenants = 4
users_per_tenant = 3
prefix_tokens = 2000
suffix_tokens = [100, 400]
output_tokens = [20, 200]
rate_per_s = 20.0

[fleet]
pods = 3
capacity = 2000
router = "prefix-aware"

[fleet.engine]
profile = "qwen3-32b-h100x2"
"#;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-report-llmd-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the reader on `args`: (success, stdout).
fn read(args: &[&Path]) -> (bool, String) {
    let o = Command::new("python3")
        .arg(repo().join("tests/reference/read_llmd_report.py"))
        .args(args)
        .output()
        .expect("python3 is required by this test (it validates the file against the schema)");
    (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
}

fn brokerlab(args: &[&str], paths: &[&Path]) {
    let o = Command::new(BIN).args(args).args(paths).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn run_report_validates_against_the_schema_and_the_outcomes() {
    let d = dir("run");
    let sc = d.join("s.toml");
    std::fs::write(&sc, SCENARIO).unwrap();
    let (rep, outcomes) = (d.join("r.json"), d.join("o.jsonl"));
    let o = Command::new(BIN)
        .args(["fleet", "run", "-q"])
        .arg(&sc)
        .arg("--report-llmd")
        .arg(&rep)
        .arg("--outcomes")
        .arg(&outcomes)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let (ok, out) = read(&[&rep, &outcomes]);
    assert!(ok, "{out}");
    assert!(out.contains("vllm-benchmark requests 200") && out.contains("outcomes: match"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    let lat = &v["metrics"]["latency"];
    assert_eq!(lat["time_to_first_token"]["units"], "ms");
    assert_eq!(lat["time_per_output_token"]["units"], "ms/token");
    assert_eq!(lat["inter_token_latency"]["units"], "ms/token");
    assert_eq!(v["metrics"]["requests"]["input_length"]["units"], "count");

    // the reader can fail: a wrong unit, a missing required key, a key outside the schema
    let text = std::fs::read_to_string(&rep).unwrap();
    for (what, broken) in [
        ("unit", text.replacen("\"units\": \"ms\"", "\"units\": \"ms/token\"", 1)),
        ("version", text.replace("\"version\": \"0.1\"", "\"versio\": \"0.1\"")),
        ("key", text.replace("\"total_tokens_per_sec\"", "\"tokens_per_sec\"")),
        ("generator", text.replace("\"vllm-benchmark\"", "\"brokerlab\"")),
    ] {
        assert_ne!(broken, text, "{what}: the edit applies");
        let b = d.join(format!("broken-{what}.json"));
        std::fs::write(&b, broken).unwrap();
        let (ok, out) = read(&[&b]);
        assert!(!ok, "{what}: the reader accepted a broken file: {out}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn replay_compare_and_load_runs_write_valid_reports() {
    let d = dir("more");
    let sc = d.join("s.toml");
    std::fs::write(&sc, SCENARIO).unwrap();
    // a trace replay
    let trace = d.join("t.jsonl");
    let mut t = String::new();
    for i in 0..40u64 {
        t.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": 700, \"output_length\": 30, \"hash_ids\": [{}, {}]}}\n",
            i * 50,
            i % 4,
            100 + i
        ));
    }
    std::fs::write(&trace, t).unwrap();
    let rep = d.join("replay.json");
    brokerlab(
        &[
            "fleet",
            "replay",
            "-q",
            "--pods",
            "2",
            "--capacity",
            "400",
            "--router",
            "prefix-aware",
            "--engine",
            "batched",
        ],
        &[Path::new("--trace"), &trace, Path::new("--report-llmd"), &rep],
    );
    let (ok, out) = read(&[&rep]);
    assert!(ok && out.contains("requests 40"), "{out}");
    // fleet compare: one report per run, in a list
    let rep = d.join("compare.json");
    brokerlab(
        &["fleet", "compare", "-q", "--no-date", "--routers", "round-robin,llm-d-precise", "--pods", "2,3"],
        &[&sc, Path::new("--out"), &d.join("page"), Path::new("--report-llmd"), &rep],
    );
    let (ok, out) = read(&[&rep]);
    assert!(ok, "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("$[")).count(), 4, "{out}");
    // a [load] run: inference-perf's generator, its stages in the args, time-outs incomplete
    let load = d.join("l.toml");
    std::fs::write(
        &load,
        SCENARIO.replace("rate_per_s = 20.0\n", "")
            + "\n[load]\ntype = \"concurrent\"\nrequest_timeout_s = 0.5\n[[load.stages]]\nconcurrency_level = 8\nnum_requests = 40\n",
    )
    .unwrap();
    let (rep, outcomes) = (d.join("load.json"), d.join("load.jsonl"));
    brokerlab(&["fleet", "run", "-q"], &[&load, Path::new("--report-llmd"), &rep, Path::new("--outcomes"), &outcomes]);
    let (ok, out) = read(&[&rep, &outcomes]);
    assert!(ok && out.contains("inference-perf requests 40"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    assert_eq!(v["scenario"]["load"]["type"], "concurrent");
    assert_eq!(v["scenario"]["load"]["args"]["stages"][0]["concurrency_level"], 8);
    // the FIFO engine has no tokens: refused, naming the flag
    let o = Command::new(BIN)
        .args(["fleet", "run", "-q", "--engine", "fifo"])
        .arg(&sc)
        .arg("--report-llmd")
        .arg(d.join("fifo.json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--report-llmd"));
    let _ = std::fs::remove_dir_all(&d);
}
