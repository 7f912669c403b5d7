//! `--report-json`: the file is read back by a small Python script that uses vLLM's key names
//! (tests/reference/read_vllm_result.py); it fails when a key is missing, NaN or negative, and
//! recomputes the TTFT and E2E statistics from the per-request outcomes as numpy does. Python 3
//! is required: without it the test fails (it does not skip).

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

const SCENARIO: &str = r#"
name = "report-json"
[workload]
seed = 7
requests = 300
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
    let d = std::env::temp_dir().join(format!("brokerlab-report-json-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn python(args: &[&Path]) -> String {
    let o = Command::new("python3")
        .arg(repo().join("tests/reference/read_vllm_result.py"))
        .args(args)
        .output()
        .expect("python3 is required by this test (it reads the file as a vLLM dashboard would)");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "the reader refused the file: {out}{}", String::from_utf8_lossy(&o.stderr));
    out
}

#[test]
fn run_report_json_reads_back_with_vllm_keys() {
    let d = dir("run");
    let sc = d.join("s.toml");
    std::fs::write(&sc, SCENARIO).unwrap();
    let (json, outcomes) = (d.join("r.json"), d.join("o.jsonl"));
    let o = Command::new(BIN)
        .args(["fleet", "run", "-q"])
        .arg(&sc)
        .arg("--report-json")
        .arg(&json)
        .arg("--outcomes")
        .arg(&outcomes)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let out = python(&[&json, &outcomes]);
    assert!(out.contains("completed 300"), "{out}");

    // a broken file is refused: the reader can fail
    let text = std::fs::read_to_string(&json).unwrap();
    let broken = d.join("broken.json");
    std::fs::write(&broken, text.replace("\"mean_itl_ms\"", "\"mean_itl\"")).unwrap();
    let o =
        Command::new("python3").arg(repo().join("tests/reference/read_vllm_result.py")).arg(&broken).output().unwrap();
    assert!(!o.status.success(), "a missing key must fail");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn report_json_needs_the_batched_engine() {
    let d = dir("fifo");
    let sc = d.join("s.toml");
    std::fs::write(&sc, SCENARIO).unwrap();
    let o = Command::new(BIN)
        .args(["fleet", "run", "-q", "--engine", "fifo"])
        .arg(&sc)
        .arg("--report-json")
        .arg(d.join("r.json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--report-json"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn compare_report_json_has_a_run_per_router() {
    let d = dir("compare");
    let sc = d.join("s.toml");
    std::fs::write(&sc, SCENARIO).unwrap();
    let json = d.join("r.json");
    let out = d.join("page");
    let o = Command::new(BIN)
        .args(["fleet", "compare", "-q", "--no-date", "--routers", "round-robin,llm-d-precise", "--pods", "2,3"])
        .arg(&sc)
        .arg("--out")
        .arg(&out)
        .arg("--report-json")
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    for (i, r) in runs.iter().enumerate() {
        let one = d.join(format!("run{i}.json"));
        std::fs::write(&one, r.to_string()).unwrap();
        python(&[&one]);
    }
    // the page: HTML and Markdown from one source, plots against pods
    for f in ["index.html", "summary.md", "compare.json", "p90_vs_pods.svg", "p90_vs_pods.png", "tok_s_vs_pods.png"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    for needle in [
        "Routers at 2 pods",
        "Routers at 3 pods",
        "Winner per metric",
        "Death-spiral check",
        "What the model leaves out",
    ] {
        assert!(md.contains(needle) && html.contains(needle), "{needle}");
    }
    // deterministic: the same command gives the same bytes
    let o2 = Command::new(BIN)
        .args(["fleet", "compare", "-q", "--no-date", "--routers", "round-robin,llm-d-precise", "--pods", "2,3"])
        .arg(&sc)
        .arg("--out")
        .arg(d.join("page2"))
        .arg("--threads")
        .arg("1")
        .output()
        .unwrap();
    assert_eq!(o2.status.code(), Some(0));
    let md2 = std::fs::read_to_string(d.join("page2/summary.md")).unwrap();
    let strip = |s: &str| s.lines().filter(|l| !l.contains("command")).collect::<Vec<_>>().join("\n");
    assert_eq!(strip(&md), strip(&md2));
    let _ = std::fs::remove_dir_all(&d);
}

/// `fleet compare --slo-ttft-ms`: a goodput column and winner row, each router's figure the one
/// `fleet run` prints for the same router, pods and SLO; no column without an SLO.
#[test]
fn compare_takes_the_slo_flags() {
    let d = dir("compare-slo");
    let sc = d.join("s.toml");
    std::fs::write(&sc, SCENARIO).unwrap();
    let routers = ["round-robin", "llm-d-precise"];
    let o = Command::new(BIN)
        .args(["fleet", "compare", "-q", "--no-date", "--routers", &routers.join(","), "--pods", "2"])
        .arg(&sc)
        .arg("--out")
        .arg(d.join("page"))
        .args(["--slo-ttft-ms", "300", "--slo-tpot-ms", "40"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(d.join("page/summary.md")).unwrap();
    assert!(md.contains("SLO goodput (req/s)") && md.contains("| SLO goodput |"), "{md}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("page/compare.json")).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), routers.len());
    for (r, run) in routers.iter().zip(runs) {
        let got = run["goodput_req_per_s"].as_f64().expect("a goodput per router");
        let o = Command::new(BIN)
            .args(["fleet", "run", "-q", "--no-date", "--json", "--router", r, "--pods", "2"])
            .arg(&sc)
            .args(["--slo-ttft-ms", "300", "--slo-tpot-ms", "40"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        let j: serde_json::Value = serde_json::from_str(&text).unwrap();
        let want = find(&j, "goodput_req_per_s").unwrap_or_else(|| panic!("no goodput in {text}"));
        assert_eq!(got, want, "{r}");
        assert!(got > 0.0 && got.is_finite(), "{r}: {got}");
    }
    // without an SLO flag: no goodput column
    let o = Command::new(BIN)
        .args(["fleet", "compare", "-q", "--no-date", "--routers", "round-robin", "--pods", "2"])
        .arg(&sc)
        .arg("--out")
        .arg(d.join("page2"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(!std::fs::read_to_string(d.join("page2/summary.md")).unwrap().contains("SLO goodput"));
    let _ = std::fs::remove_dir_all(&d);
}

/// The first number under `key` anywhere in `v`.
fn find(v: &serde_json::Value, key: &str) -> Option<f64> {
    match v {
        serde_json::Value::Object(m) => {
            m.get(key).and_then(|x| x.as_f64()).or_else(|| m.values().find_map(|x| find(x, key)))
        }
        serde_json::Value::Array(a) => a.iter().find_map(|x| find(x, key)),
        _ => None,
    }
}
