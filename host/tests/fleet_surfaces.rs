//! Issue 27's features on every surface (docs/MODEL.md, "Prefill/decode disaggregation", "The KV
//! offload tier", "SLO goodput", "Heterogeneous pools"): the readable table of `fleet run` says
//! what P/D, the offload tier and the SLO did; a scenario's `[slo]` sets the SLOs (each flag
//! overrides its key); `fleet sweep` sweeps the offload tier (`--param cpu-capacity`) and the P/D
//! split (`--param prefill-pods`), writes goodput's columns and plot under an SLO and nothing new
//! without; a pools scenario refuses the sweeps that would move nothing; `fleet compare --trace`
//! takes `--cpu-capacity`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-surfaces-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A small batched scenario; `EXTRA` is replaced by the feature's tables.
const BASE: &str = r#"
name = "surfaces"
[workload]
seed = 5
requests = 200
tenants = 8
users_per_tenant = 4
prefix_tokens = 2048
suffix_tokens = [64, 512]
output_tokens = [16, 64]
popularity = "zipf:0.8"
rate_per_s = 10.0

[fleet]
pods = 4
capacity = 400
router = "prefix-aware"

[fleet.engine]
EXTRA
"#;

fn write(d: &Path, name: &str, extra: &str) -> PathBuf {
    let p = d.join(name);
    std::fs::write(&p, BASE.replace("EXTRA", extra)).unwrap();
    p
}

fn brokerlab(args: &[&str], paths: &[&Path]) -> Output {
    Command::new(BIN).args(args).args(paths).output().unwrap()
}

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> Value {
    let v: Value = serde_json::from_str(&ok(o)).unwrap();
    v.get("summary").cloned().unwrap_or(v)
}

#[test]
fn the_run_table_says_what_pd_the_tier_and_the_slo_did() {
    let d = dir("table");
    let pd = write(&d, "pd.toml", "[fleet.pd]\nprefill_pods = 2\n");
    let tier = write(&d, "tier.toml", "cpu_capacity = 2000\n");
    let slo = ["--slo-ttft-ms", "2000", "--slo-tpot-ms", "100"];
    let run = |p: &Path, json: bool| {
        let mut a = vec!["fleet", "run", "-q", "--no-date"];
        if json {
            a.push("--json");
        }
        a.extend(slo);
        brokerlab(&a, &[p])
    };
    let t = ok(&run(&pd, false));
    let j = json(&run(&pd, true));
    assert!(t.contains("P/D ") && t.contains("2 prefill + 2 decode pods"), "{t}");
    let remote = j["disaggregated"].as_u64().unwrap();
    assert!(remote > 0, "{j}");
    assert!(t.contains(&format!("{remote} requests prefilled remotely")), "{t}");
    let good = j["slo_good_requests"].as_u64().unwrap();
    assert!(t.contains("SLO goodput") && t.contains(&format!("({good} requests,")), "{t}");
    let t = ok(&run(&tier, false));
    let j = json(&run(&tier, true));
    let hit = j["offload_hit_tokens"].as_u64().unwrap();
    assert!(hit > 0, "the tier is used: {j}");
    assert!(t.contains("offload tier") && t.contains(&format!("offload hits           {hit} tokens")), "{t}");
    // the FIFO engine's table says the SLO too
    let fifo = brokerlab(&["fleet", "run", "-q", "--no-date", "--engine", "fifo", "--slo-ttft-ms", "2000"], &[&tier]);
    assert!(ok(&fifo).contains("SLO goodput"), "FIFO table");
    // and without the features, none of it
    let plain = write(&d, "plain.toml", "");
    let t = ok(&brokerlab(&["fleet", "run", "-q", "--no-date"], &[&plain]));
    for w in ["P/D", "offload", "SLO"] {
        assert!(!t.contains(w), "{w} without the feature: {t}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_scenario_slo_sets_goodput_and_each_flag_overrides_its_key() {
    let d = dir("slo");
    let p = d.join("slo.toml");
    std::fs::write(&p, BASE.replace("EXTRA", "") + "\n[slo]\nttft_ms = 2000\ntpot_ms = 0.5\n").unwrap();
    let j = json(&brokerlab(&["fleet", "run", "-q", "--no-date", "--json"], &[&p]));
    assert_eq!(j["slo_ttft_ms"].as_f64(), Some(2000.0), "{j}");
    assert_eq!(j["slo_tpot_ms"].as_f64(), Some(0.5), "{j}");
    let tight = j["slo_good_requests"].as_u64().unwrap();
    let j = json(&brokerlab(&["fleet", "run", "-q", "--no-date", "--json", "--slo-tpot-ms", "100"], &[&p]));
    assert_eq!(j["slo_ttft_ms"].as_f64(), Some(2000.0), "the file's TTFT SLO stays: {j}");
    assert_eq!(j["slo_tpot_ms"].as_f64(), Some(100.0), "the flag's TPOT SLO: {j}");
    assert!(j["slo_good_requests"].as_u64().unwrap() > tight, "a looser TPOT SLO meets more: {j}");
    // sweep and compare read it too
    let o = brokerlab(
        &[
            "fleet",
            "sweep",
            "-q",
            "--no-date",
            "--param",
            "rate",
            "--values",
            "5,20",
            "--router",
            "round-robin",
            "--out",
        ],
        &[&d.join("sw"), &p],
    );
    ok(&o);
    let csv = std::fs::read_to_string(d.join("sw/points.csv")).unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",slo_good_requests,slo_attainment,goodput_req_per_s"), "{csv}");
    assert!(csv.lines().skip(1).all(|l| !l.ends_with(",,,")), "every point has its goodput: {csv}");
    assert!(d.join("sw/goodput.svg").exists(), "a goodput plot");
    let o =
        brokerlab(&["fleet", "compare", "-q", "--no-date", "--routers", "round-robin", "--out"], &[&d.join("cmp"), &p]);
    ok(&o);
    let c = std::fs::read_to_string(d.join("cmp/compare.json")).unwrap();
    let c: Value = serde_json::from_str(&c).unwrap();
    assert_eq!(c["runs"][0]["slo"]["slo_tpot_ms"].as_f64(), Some(0.5), "compare reads [slo]: {c}");
    assert!(c["runs"][0]["goodput_req_per_s"].as_f64().is_some(), "{c}");
    // a bad value names the file and the key (exit 2)
    std::fs::write(&p, BASE.replace("EXTRA", "") + "\n[slo]\nttft_ms = -3\n").unwrap();
    let o = brokerlab(&["fleet", "run", "-q", "--no-date"], &[&p]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("slo.toml") && err.contains("slo.ttft_ms"), "{err}");
    std::fs::write(&p, BASE.replace("EXTRA", "") + "\n[slo]\nttft = 3\n").unwrap();
    assert_eq!(brokerlab(&["fleet", "run", "-q", "--no-date"], &[&p]).status.code(), Some(2), "unknown key");
    let _ = std::fs::remove_dir_all(&d);
}

fn points(dir: &Path) -> Vec<Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("points.json")).unwrap()).unwrap();
    v["points"].as_array().unwrap().clone()
}

#[test]
fn sweeps_move_the_tier_and_the_pd_split() {
    let d = dir("sweep");
    let plain = write(&d, "plain.toml", "");
    let sweep = |param: &str, values: &str, out: &str, extra: &[&str]| {
        let mut a = vec!["fleet", "sweep", "-q", "--no-date", "--threads", "2", "--router", "prefix-aware"];
        a.extend(["--param", param, "--values", values]);
        a.extend(extra);
        a.push("--out");
        let out = d.join(out);
        let o = brokerlab(&a, &[&out, &plain]);
        (o, out)
    };
    // the offload tier: none, then a tier that catches the prefixes the GPU evicts
    let (o, out) = sweep("cpu-capacity", "0,4000", "tier", &[]);
    ok(&o);
    let p = points(&out);
    assert_eq!(p.len(), 2);
    assert!(p[0].get("offload_hit_tokens").is_none(), "no tier at 0: {}", p[0]);
    assert!(p[1]["offload_hit_tokens"].as_u64().unwrap() > 0, "{}", p[1]);
    assert_eq!(p[1]["cpu_capacity"].as_u64(), Some(4000), "{}", p[1]);
    let csv = std::fs::read_to_string(out.join("points.csv")).unwrap();
    assert!(csv.starts_with("param,value,router,pods,capacity,alpha,max_num_seqs"), "{csv}");
    assert!(csv.contains("\ncpu_capacity,4000,prefix-aware,"), "{csv}");
    assert!(!csv.contains("goodput"), "no SLO, no goodput columns: {csv}");
    assert!(!out.join("goodput.svg").exists());
    // P/D: aggregated at 0, then 1 and 2 prefill pods
    let (o, out) = sweep("prefill-pods", "0,1,2", "pd", &["--slo-ttft-ms", "3000"]);
    ok(&o);
    let p = points(&out);
    assert!(p[0].get("prefill_pods").is_none(), "0: aggregated: {}", p[0]);
    assert_eq!(p[1]["prefill_pods"].as_u64(), Some(1));
    assert_eq!(p[2]["decode_pods"].as_u64(), Some(2));
    assert!(out.join("goodput.svg").exists(), "goodput plot under an SLO");
    // refused where they cannot apply: P/D under the FIFO engine, the whole fleet as prefill
    let (o, _) = sweep("prefill-pods", "1", "fifo", &["--engine", "fifo"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--param prefill-pods") && err.contains("batched"), "{err}");
    let (o, _) = sweep("prefill-pods", "4", "all", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let (o, _) = sweep("nope", "1", "nope", &[]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("cpu-capacity or prefill-pods"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_pools_sweep_that_would_move_nothing_is_refused() {
    let d = dir("pools");
    let pools =
        "[[fleet.pool]]\nname = \"a\"\npods = 2\nCAP_A\n[[fleet.pool]]\nname = \"b\"\npods = 2\ncapacity = 500\n";
    let body = BASE.replace("pods = 4\n", "").replace("EXTRA", "");
    let p = d.join("pools.toml");
    let sweep = |param: &str, values: &str| {
        brokerlab(
            &[
                "fleet",
                "sweep",
                "-q",
                "--no-date",
                "--router",
                "round-robin",
                "--param",
                param,
                "--values",
                values,
                "--out",
            ],
            &[&d.join("out"), &p],
        )
    };
    std::fs::write(&p, format!("{body}\n{}", pools.replace("CAP_A", "capacity = 600"))).unwrap();
    for (param, values, want) in [("pods", "2,4", "--param pods"), ("capacity", "300,600", "--param capacity")] {
        let o = sweep(param, values);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{param}: {err}");
        assert!(err.contains(want) && err.contains("pools.toml") && err.contains("fleet.pool"), "{err}");
    }
    // a pool that takes the fleet's capacity moves with it
    std::fs::write(&p, format!("{body}\n{}", pools.replace("CAP_A", ""))).unwrap();
    ok(&sweep("capacity", "300,600"));
    let pts = points(&d.join("out"));
    assert_ne!(pts[0]["hit_rate"], pts[1]["hit_rate"], "the capacity moved pool a");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn compare_takes_the_offload_tier_over_a_trace() {
    let d = dir("compare");
    let plain = write(&d, "plain.toml", "");
    let trace = d.join("t.jsonl");
    ok(&brokerlab(&["fleet", "gen-trace", "-o"], &[&trace, &plain]));
    let cmp = |tier: &str, out: &str| {
        Command::new(BIN)
            .args(["fleet", "compare", "-q", "--no-date", "--routers", "prefix-aware", "--trace-block-size", "16"])
            .args(["--pods", "4", "--capacity", "400", "--cpu-capacity", tier, "--trace"])
            .arg(&trace)
            .arg("--out")
            .arg(d.join(out))
            .output()
            .unwrap()
    };
    ok(&cmp("4000", "tier"));
    let c: Value = serde_json::from_str(&std::fs::read_to_string(d.join("tier/compare.json")).unwrap()).unwrap();
    assert!(c["runs"][0]["offload_hit_tokens"].as_u64().unwrap() > 0, "the runs carry the tier: {c}");
    ok(&cmp("0", "none"));
    let c = std::fs::read_to_string(d.join("none/compare.json")).unwrap();
    assert!(!c.contains("offload_hit_tokens"), "no tier at 0");
    let _ = std::fs::remove_dir_all(&d);
}

/// `scenarios/autoscale.toml` sets the FIFO rule's `up_queue` and `down_queue`; under
/// `--engine batched` (fleet compare's default) the WVA rule would ignore them: exit 2 naming the
/// key, as for a file that names the batched engine. Under the FIFO engine it runs as it did.
#[test]
fn the_other_engines_scale_keys_are_refused_when_the_command_line_picks_the_engine() {
    let d = dir("scale-keys");
    let sc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/autoscale.toml");
    for args in [
        vec!["fleet", "run", "-q", "--no-date", "--engine", "batched"],
        vec!["fleet", "sweep", "-q", "--no-date", "--engine", "batched", "--param", "pods", "--values", "8"],
        vec!["fleet", "compare", "-q", "--no-date", "--routers", "round-robin"],
    ] {
        let mut a = args.clone();
        if a[1] != "run" {
            a.push("--out");
        }
        let out = d.join("out");
        let paths: Vec<&Path> = if a[1] == "run" { vec![&sc] } else { vec![&out, &sc] };
        let o = brokerlab(&a, &paths);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("fleet.autoscale.up_queue") && err.contains("--engine batched"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// `fleet compare`'s JSON carries each run's P/D and pool figures as `fleet run --json` writes
/// them, and none of it without the features.
#[test]
fn compare_json_carries_pd_and_pools() {
    let d = dir("compare-keys");
    let pd = write(&d, "pd.toml", "[fleet.pd]\nprefill_pods = 1\n");
    let pools = d.join("pools.toml");
    let body = BASE.replace("pods = 4\n", "").replace("EXTRA", "");
    std::fs::write(
        &pools,
        format!("{body}\n[[fleet.pool]]\nname = \"a\"\npods = 2\n[[fleet.pool]]\nname = \"b\"\npods = 1\n"),
    )
    .unwrap();
    let plain = write(&d, "plain.toml", "");
    let cmp = |sc: &Path, out: &str| {
        let out = d.join(out);
        ok(&brokerlab(
            &["fleet", "compare", "-q", "--no-date", "--routers", "round-robin,prefix-aware", "--out"],
            &[&out, sc],
        ));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
        v["runs"].as_array().unwrap().clone()
    };
    let runs = cmp(&pd, "pd");
    let run = json(&brokerlab(&["fleet", "run", "-q", "--no-date", "--json", "--router", "prefix-aware"], &[&pd]));
    assert_eq!(runs[1]["transfer_bytes"], run["transfer_bytes"], "compare's P/D figures are fleet run's");
    assert_eq!(runs[1]["prefill_pods"].as_u64(), Some(1));
    let runs = cmp(&pools, "pools");
    let names: Vec<&str> =
        runs[0]["per_pool"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"]);
    for r in cmp(&plain, "plain") {
        for k in ["prefill_pods", "offload_hit_tokens", "per_pool", "slo", "autoscale"] {
            assert!(r.get(k).is_none(), "{k} without the feature: {r}");
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// `fleet compare --trace` takes `--pools FILE` and the autoscaling flags as `fleet replay` does
/// (each run's figures are replay's); with a scenario they are refused (it has its own).
#[test]
fn compare_takes_pools_and_autoscaling_over_a_trace() {
    let d = dir("compare-trace");
    let plain = write(&d, "plain.toml", "");
    let trace = d.join("t.jsonl");
    ok(&brokerlab(&["fleet", "gen-trace", "-o"], &[&trace, &plain]));
    let pools = d.join("pools.toml");
    std::fs::write(
        &pools,
        "[[fleet.pool]]\nname = \"a\"\npods = 2\n[[fleet.pool]]\nname = \"b\"\npods = 1\ncapacity = 300\n",
    )
    .unwrap();
    let common = ["-q", "--no-date", "--trace-block-size", "16", "--capacity", "400"];
    let compare = |extra: &[&str], out: &str| {
        let out = d.join(out);
        let mut a = vec!["fleet", "compare", "--routers", "prefix-aware"];
        a.extend(common);
        a.extend(extra);
        a.extend(["--out"]);
        let o = brokerlab(&a, &[&out]);
        (o, out)
    };
    let replay = |extra: &[&str]| {
        let mut a = vec!["fleet", "replay", "--json", "--engine", "batched", "--router", "prefix-aware"];
        a.extend(common);
        a.extend(extra);
        a.push("--trace");
        json(&brokerlab(&a, &[&trace]))
    };
    let t = trace.to_str().unwrap();
    let (o, out) = compare(&["--pools", pools.to_str().unwrap(), "--trace", t], "pools");
    ok(&o);
    let c: Value = serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    let r = json(&{
        let mut a = vec!["fleet", "replay", "--json", "--engine", "batched", "--router", "prefix-aware"];
        a.extend(common);
        a.extend(["--pools", pools.to_str().unwrap(), "--trace", t]);
        brokerlab(&a, &[])
    });
    assert_eq!(c["runs"][0]["per_pool"], r["per_pool"], "compare's pools are replay's");
    assert_eq!(c["runs"][0]["pods"].as_u64(), Some(3));
    let scale = [
        "--pods",
        "4",
        "--scale-min",
        "1",
        "--scale-interval-s",
        "2",
        "--scale-window-s",
        "4",
        "--scale-startup-s",
        "1",
    ];
    let (o, out) = compare(&[&scale[..], &["--trace", t]].concat(), "scale");
    ok(&o);
    let c: Value = serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    let r = replay(&scale);
    assert_eq!(c["runs"][0]["autoscale"], r["autoscale"], "compare's scaler is replay's");
    assert!(r["autoscale"]["scale_outs"].as_u64().unwrap() >= 1, "{}", r["autoscale"]);
    // a scenario has its own
    let o = brokerlab(
        &["fleet", "compare", "-q", "--no-date", "--routers", "round-robin", "--scale-min", "1", "--out"],
        &[&d.join("x"), &plain],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--scale-min"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}
