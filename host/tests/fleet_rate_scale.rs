//! `fleet run --rate-scale X`: a scenario run at X times its rates prints what the same scenario
//! written with those rates prints (workload rate, ramp stages, `[load]` stages); a scale that
//! cannot apply or would round is exit 2 naming the flag.

use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-rate-scale-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const BASE: &str = r#"
name = "rate-scale"
[workload]
seed = 5
requests = 120
tenants = 3
users_per_tenant = 2
prefix_tokens = 1000
suffix_tokens = [50, 200]
output_tokens = [10, 80]
ARRIVALS

[fleet]
pods = 3
capacity = 800
router = "prefix-aware"

[fleet.engine]
profile = "qwen3-32b-h100x2"
"#;

/// `fleet run --json` of `text` (with `args`), its provenance dropped.
fn run(d: &std::path::Path, name: &str, text: &str, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    let o = Command::new(BIN).args(["fleet", "run", "-q", "--no-date", "--json"]).args(args).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.remove("provenance");
    }
    (o.status.code(), v, err)
}

#[test]
fn scaled_rates_equal_the_scenario_written_with_them() {
    let d = dir("eq");
    let cases = [
        ("rate_per_s = 20.0", "rate_per_s = 30.0", "1.5"),
        (
            "[[workload.stages]]\nrate_per_s = 10.0\nduration_s = 4.0\n[[workload.stages]]\nrate_per_s = 40.0\nduration_s = 2.0",
            "[[workload.stages]]\nrate_per_s = 5.0\nduration_s = 4.0\n[[workload.stages]]\nrate_per_s = 20.0\nduration_s = 2.0",
            "0.5",
        ),
        (
            "[load]\ntype = \"poisson\"\n[[load.stages]]\nrate_per_s = 8.0\nduration_s = 3.0\n[[load.stages]]\nrate_per_s = 16.0\nduration_s = 2.0",
            "[load]\ntype = \"poisson\"\n[[load.stages]]\nrate_per_s = 20.0\nduration_s = 3.0\n[[load.stages]]\nrate_per_s = 40.0\nduration_s = 2.0",
            "2.5",
        ),
    ];
    for (i, (from, to, x)) in cases.iter().enumerate() {
        let (c1, scaled, e1) = run(&d, &format!("a{i}.toml"), &BASE.replace("ARRIVALS", from), &["--rate-scale", x]);
        let (c2, written, e2) = run(&d, &format!("b{i}.toml"), &BASE.replace("ARRIVALS", to), &[]);
        assert_eq!((c1, c2), (Some(0), Some(0)), "{e1}{e2}");
        assert!(scaled["requests"].as_u64().unwrap() > 0);
        assert_eq!(scaled, written, "case {i}: --rate-scale {x}");
        // and the scale changed something: the unscaled run differs
        let (_, unscaled, _) = run(&d, &format!("c{i}.toml"), &BASE.replace("ARRIVALS", from), &[]);
        assert_ne!(unscaled, written, "case {i}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_scale_that_cannot_apply_is_refused() {
    let d = dir("bad");
    let concurrent = "[load]\ntype = \"concurrent\"\n[[load.stages]]\nconcurrency_level = 4\nnum_requests = 20";
    for (arrivals, x, needle) in [
        (concurrent, "2", "load.type concurrent"),
        ("rate_per_s = 0.001", "0.5", "workload.rate_per_s"),
        ("rate_per_s = 0.0", "2", "no arrival rate"),
        ("rate_per_s = 20.0", "0", "--rate-scale 0"),
        ("rate_per_s = 20.0", "-1", "--rate-scale -1"),
        ("rate_per_s = 20.0", "x", "--rate-scale x"),
    ] {
        let (code, _, err) = run(&d, "s.toml", &BASE.replace("ARRIVALS", arrivals), &[&format!("--rate-scale={x}")]);
        assert_eq!(code, Some(2), "{arrivals} x {x}: {err}");
        assert!(err.contains(needle) && err.contains("--rate-scale"), "{arrivals} x {x}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
