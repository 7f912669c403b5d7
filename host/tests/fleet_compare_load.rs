//! `fleet compare` of a workload with `[load]` (an inference-perf config, or a scenario file):
//! each router runs through the load generator, and its figures are the ones `fleet run` prints
//! for the same router, pods and engine.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-compare-load-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The vendored llm-d config with its 17 stages replaced by two short ones (run time).
fn short_llmd(d: &Path) -> PathBuf {
    let s = std::fs::read_to_string(repo().join("scenarios/inference-perf/llm-d-73-capacity.yml")).unwrap();
    let (a, b) = (s.find("  stages:\n").unwrap(), s.find("api:").unwrap());
    let short = format!(
        "{}  stages:\n    - rate: 15\n      duration: 4\n    - rate: 30\n      duration: 3\n\n{}",
        &s[..a],
        &s[b..]
    );
    let p = d.join("short.yml");
    std::fs::write(&p, short).unwrap();
    p
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

fn run_json(args: &[&str], input: &[&Path]) -> serde_json::Value {
    let mut c = Command::new(BIN);
    c.args(["fleet", "run", "-q", "--no-date", "--json", "--engine", "batched"]).args(args);
    for p in input {
        c.arg(p);
    }
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn check_against_run(compare_json: &Path, routers: &[&str], run: &dyn Fn(&str) -> serde_json::Value) {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(compare_json).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), routers.len());
    for (r, got) in routers.iter().zip(runs) {
        assert_eq!(got["router"], *r);
        let want = run(r);
        for (ck, rk) in [
            ("ttft_p50_s", "ttft_p50"),
            ("ttft_p90_s", "ttft_p90"),
            ("ttft_p99_s", "ttft_p99"),
            ("output_tok_per_s", "output_tok_per_s"),
            ("hit_rate", "hit_rate"),
            ("requests", "requests"),
            ("makespan_s", "makespan_s"),
        ] {
            let g = got[ck].as_f64().unwrap_or_else(|| panic!("{r}: no {ck}"));
            let w = find(&want, rk).unwrap_or_else(|| panic!("{r}: fleet run has no {rk}"));
            assert_eq!(g, w, "{r}: {ck}");
            assert!(g.is_finite() && g > 0.0, "{r}: {ck} = {g}");
        }
        assert_eq!(got["per_pod_requests"], want["per_pod_requests"], "{r}");
    }
}

/// The regression: the vendored llm-d config (shared_prefix, imported as `[load]`) was refused
/// (exit 2); now every router runs through the load generator as `fleet run` runs it.
#[test]
fn compare_runs_an_inference_perf_config_through_the_load_generator() {
    let d = dir("ip");
    let cfg = short_llmd(&d);
    let routers = ["llm-d-precise", "random"];
    let o = Command::new(BIN)
        .args(["fleet", "compare", "-q", "--no-date", "--routers", &routers.join(","), "--pods", "8"])
        .args(["--capacity", "19208", "--inference-perf"])
        .arg(&cfg)
        .arg("--out")
        .arg(d.join("page"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(d.join("page/summary.md")).unwrap();
    assert!(md.contains("load generator"), "the page says how clients send: {md}");
    check_against_run(&d.join("page/compare.json"), &routers, &|r| {
        run_json(&["--pods", "8", "--capacity", "19208", "--router", r, "--inference-perf"], &[&cfg])
    });
    let _ = std::fs::remove_dir_all(&d);
}

const LOAD_SCENARIO: &str = r#"
name = "compare-load"
[workload]
seed = 3
requests = 60
tenants = 3
users_per_tenant = 2
prefix_tokens = 1500
suffix_tokens = [100, 300]
output_tokens = [20, 120]

[load]
type = "concurrent"
[[load.stages]]
concurrency_level = 6
num_requests = 80

[fleet]
pods = 3
capacity = 1500
router = "prefix-aware"

[fleet.engine]
profile = "qwen3-32b-h100x2"
"#;

/// A scenario file with `[load]` given to compare: the same tie to `fleet run`.
#[test]
fn compare_runs_a_load_scenario_as_fleet_run_does() {
    let d = dir("sc");
    let sc = d.join("s.toml");
    std::fs::write(&sc, LOAD_SCENARIO).unwrap();
    let routers = ["round-robin", "llm-d-precise"];
    let o = Command::new(BIN)
        .args(["fleet", "compare", "-q", "--no-date", "--routers", &routers.join(",")])
        .arg(&sc)
        .arg("--out")
        .arg(d.join("page"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    check_against_run(&d.join("page/compare.json"), &routers, &|r| run_json(&["--router", r], &[&sc]));
    let _ = std::fs::remove_dir_all(&d);
}
