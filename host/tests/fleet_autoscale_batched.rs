//! Autoscaling under the batched engine (docs/MODEL.md, "Autoscaling under the batched engine":
//! llm-d WVA's saturation rule): a load ramp scales the fleet out and back in; an added pod starts
//! cold; a pod scaled in takes no new request and finishes every request it held; a scaler that
//! cannot move changes nothing; settings of the wrong rule or out of range are exit 2 naming the
//! key or flag; `fleet replay`, `sweep` and `compare` run it too.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-autoscale-batched-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Requests of [`RAMP`]: the ramp (2 req/s for 20 s, 24 req/s for 40 s) and 100 s of 1 req/s.
const REQUESTS: u64 = 1_100;

/// A ramp on pods of 4 running requests each (so that the waiting queue builds).
const RAMP: &str = r#"
name = "autoscale-batched"
[workload]
seed = 11
requests = 1100
tenants = 4
users_per_tenant = 4
prefix_tokens = 1024
suffix_tokens = [16, 128]
output_tokens = [8, 64]

[[workload.stages]]
rate_per_s = 2.0
duration_s = 20.0

[[workload.stages]]
rate_per_s = 24.0
duration_s = 40.0

[[workload.stages]]
rate_per_s = 1.0
duration_s = 400.0

[fleet]
pods = 6
capacity = 2048
router = "ROUTER"

[fleet.engine]
profile = "qwen3-32b-h100x2"
max_num_seqs = 4

AUTOSCALE
"#;

const SCALER: &str = "[fleet.autoscale]\nmin = 2\ninterval_s = 5.0\nwindow_s = 5.0\nstartup_s = 5.0\n";

fn scenario(router: &str, autoscale: &str) -> String {
    RAMP.replace("ROUTER", router).replace("AUTOSCALE", autoscale)
}

/// `fleet run --json` of `text` with `args`: (exit code, JSON without provenance, stderr).
fn run(d: &Path, name: &str, text: &str, args: &[&str]) -> (Option<i32>, Value, String) {
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    let o = Command::new(BIN).args(["fleet", "run", "-q", "--no-date", "--json"]).args(args).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let mut v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.remove("provenance");
    }
    (o.status.code(), v, err)
}

/// The run's summary (`fleet run --json` nests it under `summary` when it has one).
fn summary(v: &Value) -> &Value {
    v.get("summary").unwrap_or(v)
}

fn outcomes(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn events(a: &Value, kind: &str) -> Vec<(u64, u64)> {
    a["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .map(|e| ((e["t_s"].as_f64().unwrap() * 1e9).round() as u64, e["pod"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_ramp_scales_out_and_the_pod_count_comes_back_down() {
    let d = dir("ramp");
    let (code, v, err) = run(&d, "ramp.toml", &scenario("round-robin", SCALER), &[]);
    assert_eq!(code, Some(0), "{err}");
    let s = summary(&v);
    let a = &s["autoscale"];
    assert_eq!(a["policy"], "wva-saturation", "{s}");
    assert_eq!(s["requests"].as_u64(), Some(REQUESTS));
    let outs = a["scale_outs"].as_u64().unwrap();
    let ins = a["scale_ins"].as_u64().unwrap();
    let max = a["max_active_pods"].as_u64().unwrap();
    assert!(outs >= 1 && max >= 3, "the ramp adds pods: {a}");
    assert!(ins >= 1, "the quiet tail drops pods: {a}");
    let steps = a["pods_over_time"].as_array().unwrap();
    let last = steps.last().unwrap()[1].as_u64().unwrap();
    assert!(last < max, "the pod count comes back down after the ramp: {a}");
    assert_eq!(steps[0][1].as_u64(), Some(2), "starts at min");
    // the curve and the figure agree: its highest step is the most pods routable at an arrival
    let top = steps.iter().map(|p| p[1].as_u64().unwrap()).max();
    assert_eq!(top, Some(max), "pods_over_time's maximum is max_active_pods: {a}");
    let times: Vec<f64> = steps.iter().map(|p| p[0].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "one step per instant: {a}");
    // every scale-in ended with a drain; every boot became routable
    assert_eq!(events(a, "drained").len() as u64, ins, "{a}");
    assert_eq!(events(a, "ready").len() as u64, outs, "{a}");
    // cheaper than all pods throughout, dearer than the minimum
    let pod_s = a["pod_seconds"].as_f64().unwrap();
    let makespan = s["makespan_s"].as_f64().unwrap();
    assert!(pod_s < 6.0 * makespan && pod_s > 2.0 * makespan, "{pod_s} pod-s over {makespan} s");
    // the readable table says it too
    let p = d.join("ramp.toml");
    let o = Command::new(BIN).args(["fleet", "run", "-q", "--no-date"]).arg(&p).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("wva-saturation") && text.contains("pod-seconds"), "{text}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Per request (index order): (pod, arrival ns, hit tokens, e2e ns).
fn rows(path: &Path) -> Vec<(u64, u64, u64, u64)> {
    outcomes(path)
        .iter()
        .map(|o| {
            let g = |k: &str| o[k].as_u64().unwrap();
            (g("pod"), g("arrival_ns"), g("hit_tokens"), g("e2e_ns"))
        })
        .collect()
}

#[test]
fn an_added_pod_starts_cold() {
    let d = dir("cold");
    let out = d.join("outcomes.jsonl");
    let (code, v, err) = run(&d, "cold.toml", &scenario("round-robin", SCALER), &["--outcomes", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let a = &summary(&v)["autoscale"];
    let rows = rows(&out);
    let ready = events(a, "ready");
    assert!(!ready.is_empty(), "{a}");
    let mut checked = 0;
    for &(t, pod) in &ready {
        // its first request in this life (none if it was scaled in before one came)
        if let Some(first) = rows.iter().find(|r| r.0 == pod && r.1 >= t) {
            assert_eq!(first.2, 0, "pod {pod} up at {t} ns: its first request found an empty cache");
            checked += 1;
        }
    }
    assert!(checked >= 1, "round-robin sends an added pod a request");
    // and the added pods do warm up (so the check above can fail)
    assert!(rows.iter().any(|r| r.0 >= 2 && r.2 > 0), "an added pod's later requests hit its cache");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_drained_pod_takes_no_new_request_and_finishes_every_one_it_held() {
    let d = dir("drain");
    let out = d.join("outcomes.jsonl");
    let (code, v, err) =
        run(&d, "drain.toml", &scenario("prefix-aware", SCALER), &["--outcomes", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let s = summary(&v);
    let a = &s["autoscale"];
    let rows = rows(&out);
    // no request lost: one completion per request sent
    assert_eq!(rows.len() as u64, REQUESTS);
    let idx: Vec<u64> = outcomes(&out).iter().map(|o| o["index"].as_u64().unwrap()).collect();
    assert_eq!(idx, (0..REQUESTS).collect::<Vec<_>>());
    assert_eq!(s["requests"].as_u64(), Some(REQUESTS));
    let ins = events(a, "in");
    assert!(!ins.is_empty(), "{a}");
    let ready = events(a, "ready");
    let drained = events(a, "drained");
    for &(t, pod) in &ins {
        // until the pod comes up again, no request arrives on it
        let back = ready.iter().filter(|r| r.1 == pod && r.0 > t).map(|r| r.0).min().unwrap_or(u64::MAX);
        assert!(
            !rows.iter().any(|r| r.0 == pod && r.1 >= t && r.1 < back),
            "pod {pod} scaled in at {t} ns took a new request"
        );
        // its drain ends with the last request it held
        let held: Vec<&(u64, u64, u64, u64)> = rows.iter().filter(|r| r.0 == pod && r.1 < t).collect();
        let end = drained.iter().find(|e| e.1 == pod && e.0 >= t).expect("a drain for each scale-in").0;
        let last = held.iter().map(|r| r.1 + r.3).max().unwrap_or(0);
        assert_eq!(end, last.max(t), "pod {pod}: the drain ends at its last finish");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_scaler_that_cannot_move_changes_nothing() {
    let d = dir("still");
    for router in ["round-robin", "prefix-aware"] {
        let (c0, mut off, e0) = run(&d, "off.toml", &scenario(router, ""), &[]);
        let pinned = "[fleet.autoscale]\nmin = 6\ninterval_s = 5.0\nwindow_s = 5.0\n";
        let (c1, mut on, e1) = run(&d, "on.toml", &scenario(router, pinned), &[]);
        assert_eq!((c0, c1), (Some(0), Some(0)), "{e0}{e1}");
        let a = summary(&on)["autoscale"].clone();
        assert_eq!((a["scale_outs"].as_u64(), a["scale_ins"].as_u64()), (Some(0), Some(0)));
        assert!(summary(&off).get("autoscale").is_none(), "no autoscale key without autoscaling");
        for v in [&mut off, &mut on] {
            let s = if v.get("summary").is_some() { v.get_mut("summary").unwrap() } else { v };
            if let Some(m) = s.as_object_mut() {
                m.remove("autoscale");
            }
        }
        assert_eq!(summary(&off), summary(&on), "{router}: the same run");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_settings_exit_2_naming_the_key() {
    let d = dir("bad");
    let batched = |extra: &str| scenario("round-robin", &format!("{SCALER}{extra}"));
    let fifo = |extra: &str| {
        scenario("round-robin", &format!("[fleet.autoscale]\nmin = 2\n{extra}"))
            .replace("[fleet.engine]\nprofile = \"qwen3-32b-h100x2\"\nmax_num_seqs = 4\n", "")
    };
    let cases = [
        (batched("kv_threshold = 1.5\n"), "fleet.autoscale.kv_threshold"),
        (batched("kv_spare = -0.1\n"), "fleet.autoscale.kv_spare"),
        (batched("queue_threshold = 2e7\n"), "fleet.autoscale.queue_threshold"),
        (batched("queue_spare = -1\n"), "fleet.autoscale.queue_spare"),
        (batched("policy = \"fastest\"\n"), "fleet.autoscale.policy"),
        (batched("policy = \"queue-target\"\n"), "fleet.autoscale.policy"),
        (batched("up_queue = 3.0\n"), "fleet.autoscale.up_queue"),
        (batched("down_queue = 0.1\n"), "fleet.autoscale.down_queue"),
        (scenario("round-robin", "[fleet.autoscale]\nmin = 2\nwindow_s = 0.0\n"), "fleet.autoscale.window_s"),
        (scenario("round-robin", "[fleet.autoscale]\nmin = 2\nwindow_s = -5.0\n"), "fleet.autoscale.window_s"),
        (scenario("round-robin", "[fleet.autoscale]\nmin = 2\nwindow_s = 1e-9\n"), "fleet.autoscale.window_s"),
        (scenario("round-robin", "[fleet.autoscale]\nmin = 7\n"), "fleet.autoscale.min"),
        (fifo("policy = \"wva-saturation\"\n"), "fleet.autoscale.policy"),
        (fifo("kv_threshold = 0.5\n"), "fleet.autoscale.kv_threshold"),
        (fifo("window_s = 60.0\n"), "fleet.autoscale.window_s"),
    ];
    for (text, key) in cases {
        let (code, _, err) = run(&d, "bad.toml", &text, &[]);
        assert_eq!(code, Some(2), "{key}: {err}");
        assert!(err.contains(key), "{key}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A trace of the ramp (`fleet gen-trace`), for `fleet replay`.
fn trace(d: &Path) -> PathBuf {
    let sc = d.join("ramp.toml");
    std::fs::write(&sc, scenario("round-robin", "")).unwrap();
    let t = d.join("ramp.jsonl");
    let o = Command::new(BIN).args(["fleet", "gen-trace"]).arg(&sc).arg("-o").arg(&t).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    t
}

fn replay(t: &Path, args: &[&str]) -> (Option<i32>, Value, String) {
    let o = Command::new(BIN)
        .args(["fleet", "replay", "-q", "--no-date", "--json", "--trace"])
        .arg(t)
        .args(["--pods", "6", "--capacity", "2048", "--router", "round-robin"])
        .args(args)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o.status.code(), v, String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn replay_takes_the_scale_flags_and_refuses_the_other_rules() {
    let d = dir("replay");
    let t = trace(&d);
    let batched = ["--engine", "batched", "--max-num-seqs", "4"];
    let scale = ["--scale-min", "2", "--scale-interval-s", "5", "--scale-window-s", "5", "--scale-startup-s", "5"];
    let (code, v, err) = replay(&t, &[&batched[..], &scale[..]].concat());
    assert_eq!(code, Some(0), "{err}");
    let a = &summary(&v)["autoscale"];
    assert!(a["scale_outs"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(a["interval_s"].as_f64(), Some(5.0));
    let cases: [(&[&str], &str); 6] = [
        (&["--scale-up-queue", "3"], "--scale-up-queue"),
        (&["--scale-policy", "queue-target"], "--scale-policy"),
        (&["--scale-kv-threshold", "2"], "--scale-kv-threshold"),
        (&["--scale-queue-spare", "-1"], "--scale-queue-spare"),
        (&["--scale-window-s", "0"], "--scale-window-s"),
        (&["--scale-window-s", "-1"], "--scale-window-s"),
    ];
    for (extra, flag) in cases {
        let (code, _, err) = replay(&t, &[&batched[..], &scale[..4], extra].concat());
        assert_eq!(code, Some(2), "{flag}: {err}");
        assert!(err.contains(flag), "{flag}: {err}");
    }
    // the FIFO engine refuses the WVA settings, and the new flags need --scale-min
    for (args, flag) in [
        (vec!["--scale-min", "2", "--scale-policy", "wva-saturation"], "--scale-policy"),
        (vec!["--scale-min", "2", "--scale-kv-spare", "0.2"], "--scale-kv-spare"),
        (vec!["--engine", "batched", "--scale-window-s", "60"], "--scale-window-s"),
        // every other scale flag is ignored without --scale-min, so it is refused, naming itself
        (vec!["--scale-up-queue", "3"], "--scale-up-queue"),
        (vec!["--scale-down-queue", "0.2"], "--scale-down-queue"),
        (vec!["--scale-initial", "2"], "--scale-initial"),
        (vec!["--scale-interval-s", "5"], "--scale-interval-s"),
        (vec!["--engine", "batched", "--scale-startup-s", "5"], "--scale-startup-s"),
    ] {
        let (code, _, err) = replay(&t, &args);
        assert_eq!(code, Some(2), "{flag}: {err}");
        assert!(err.contains(flag), "{flag}: {err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sweep_and_compare_run_the_scaler() {
    let d = dir("sweep");
    let sc = d.join("ramp.toml");
    std::fs::write(&sc, scenario("round-robin", SCALER)).unwrap();
    let o = Command::new(BIN)
        .args(["fleet", "sweep", "-q", "--no-date", "--threads", "2", "--param", "capacity", "--values", "1024,2048"])
        .arg(&sc)
        .arg("--out")
        .arg(d.join("out"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let all: String = std::fs::read_dir(d.join("out"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(all.contains("wva-saturation") && all.contains("pods_over_time"), "sweep points carry the scaler");
    let o = Command::new(BIN)
        .args(["fleet", "compare", "-q", "--no-date", "--routers", "round-robin,prefix-aware"])
        .arg(&sc)
        .arg("--out")
        .arg(d.join("page"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let json = std::fs::read_to_string(d.join("page/compare.json")).unwrap();
    assert!(json.contains("wva-saturation") && json.contains("pods_over_time"), "compare carries the scaler");
    let _ = std::fs::remove_dir_all(&d);
}
