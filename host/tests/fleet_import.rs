//! `fleet import inference-perf`: llm-d's own benchmark config (vendored) imports to the
//! hand-written `scenarios/llm-d-ramp.toml` (parsed scenarios equal, not only text), and a key
//! the importer does not model is exit 2 naming it.

use std::path::{Path, PathBuf};
use std::process::Command;

use brokerlab::fleet::scenario::Scenario;
use brokerlab::fleet::scenario::inference_perf::{FleetFlags, import};

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

const CONFIG: &str = "scenarios/inference-perf/llm-d-73-capacity.yml";

/// The flags of `scenarios/inference-perf/README.md`: the fleet of the llm-d benchmark.
const FLAGS: [&str; 14] = [
    "--pods",
    "8",
    "--capacity",
    "19208",
    "--router",
    "prefix-aware",
    "--alpha",
    "1",
    "--profile",
    "qwen3-32b-h100x2",
    "--seed",
    "13",
    "--name",
    "llm-d-ramp",
];

fn assert_same(a: &Scenario, b: &Scenario) {
    assert_eq!(a.workload, b.workload, "workload");
    assert_eq!(a.load, b.load, "load");
    assert_eq!(a.fleet, b.fleet, "fleet");
    assert_eq!(format!("{:?}", a.engine), format!("{:?}", b.engine), "engine");
    assert_eq!(a.name, b.name);
}

#[test]
fn llm_d_config_imports_to_the_hand_written_ramp() {
    let root = repo();
    let hand = Scenario::load(&root.join("scenarios/llm-d-ramp.toml")).unwrap();
    let text = std::fs::read_to_string(root.join(CONFIG)).unwrap();
    let flags = FleetFlags {
        pods: 8,
        capacity: 19208,
        router: "prefix-aware".into(),
        alpha: 1.0,
        profile: Some("qwen3-32b-h100x2".into()),
        seed: 13,
        requests: None,
        name: Some("llm-d-ramp".into()),
    };
    let imported = import(&text, CONFIG, &flags).unwrap();
    assert_same(&imported.scenario, &hand);
    // 17 drained stages, as published; the data set is the 750 prompts
    let load = imported.scenario.load.expect("a [load]");
    assert_eq!(load.stages_len, 17);
    assert_eq!((load.interval_ms, load.max_in_flight, load.timeout_ms), (1_000, 0, 300_000));
    assert_eq!(imported.scenario.workload.requests, 750);

    // the CLI writes the same scenario to a file
    let dir = std::env::temp_dir().join(format!("brokerlab-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("ramp.toml");
    let o = Command::new(BIN)
        .current_dir(&root)
        .args(["fleet", "import", "inference-perf", CONFIG, "-o"])
        .arg(&out)
        .args(FLAGS)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("note: load.num_workers absent"));
    let written = Scenario::load(&out).unwrap();
    assert_same(&written, &hand);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_changed_key_changes_the_import() {
    // the equality above can fail: one changed length gives a different workload
    let root = repo();
    let hand = Scenario::load(&root.join("scenarios/llm-d-ramp.toml")).unwrap();
    let text = std::fs::read_to_string(root.join(CONFIG)).unwrap().replace("question_len: 1200", "question_len: 1100");
    let flags = FleetFlags {
        pods: 8,
        capacity: 19208,
        router: "prefix-aware".into(),
        alpha: 1.0,
        profile: Some("qwen3-32b-h100x2".into()),
        seed: 13,
        requests: None,
        name: Some("llm-d-ramp".into()),
    };
    let imported = import(&text, CONFIG, &flags).unwrap();
    assert_ne!(imported.scenario.workload, hand.workload);
    // and one changed load key a different load
    let text =
        std::fs::read_to_string(root.join(CONFIG)).unwrap().replace("type: poisson", "type: poisson\n  interval: 2");
    let imported = import(&text, CONFIG, &flags).unwrap();
    assert_eq!(imported.scenario.workload, hand.workload);
    assert_ne!(imported.scenario.load, hand.load);
}

fn run_import(yaml: &str) -> (i32, String) {
    let dir = std::env::temp_dir().join(format!("brokerlab-import-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("c{}.yml", yaml.len()));
    std::fs::write(&p, yaml).unwrap();
    let o = Command::new(BIN)
        .args(["fleet", "import", "inference-perf"])
        .arg(&p)
        .args(["--pods", "2", "--capacity", "100"])
        .output()
        .unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
}

const BASE: &str = "load:\n  type: poisson\n  stages:\n    - rate: 2\n      duration: 10\ndata:\n  type: shared_prefix\n  shared_prefix:\n    num_groups: 3\n";

#[test]
fn unsupported_keys_are_exit_2_naming_them() {
    let (code, err) = run_import(BASE);
    assert_eq!(code, 0, "{err}");
    let cases: [(&str, &str); 9] = [
        (&BASE.replace("    num_groups: 3\n", "    num_groups: 3\n    bogus_key: 1\n"), "bogus_key"),
        (&BASE.replace("type: poisson", "type: bursty"), "load.type"),
        (&BASE.replace("type: poisson", "type: concurrent"), "load.stages[0].rate"),
        (
            &format!("{BASE}  enable_multi_turn_chat: true\n").replace("  enable_multi", "    enable_multi"),
            "enable_multi_turn_chat",
        ),
        (&BASE.replace("  stages:", "  request_timeout: -3\n  stages:"), "load.request_timeout"),
        (&BASE.replace("  stages:", "  worker_max_tcp_connections: 4\n  stages:"), "load.worker_max_tcp_connections"),
        (
            &BASE.replace("      duration: 10\n", "      duration: 10\n      concurrency_level: 3\n"),
            "concurrency_level",
        ),
        (
            "load:\n  type: poisson\n  stages:\n    - rate: 2\n      duration: 10\ndata:\n  type: random\n  input_distribution:\n    mean: 100\n  output_distribution:\n    type: fixed\n    mean: 10\n",
            "data.input_distribution.type",
        ),
        (&format!("{BASE}circuit_breakers: []\n"), "circuit_breakers"),
    ];
    for (yaml, key) in cases {
        let (code, err) = run_import(yaml);
        assert_eq!(code, 2, "{key}: {err}");
        assert!(err.contains(key), "{key} not named in: {err}");
    }
    // random data with fixed/uniform lengths is modelled
    let ok = "load:\n  type: poisson\n  stages:\n    - rate: 2\n      duration: 10\ndata:\n  type: random\n  input_distribution:\n    type: uniform\n    min: 100\n    max: 200\n  output_distribution:\n    type: fixed\n    mean: 10\n";
    let (code, err) = run_import(ok);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn fleet_run_inference_perf_equals_running_the_import() {
    let dir = std::env::temp_dir().join(format!("brokerlab-import-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("c.yml");
    std::fs::write(&cfg, BASE.replace("num_groups: 3\n", "num_groups: 3\n    system_prompt_len: 512\n")).unwrap();
    let toml = dir.join("c.toml");
    let fleet = ["--pods", "2", "--capacity", "400"];
    let o = Command::new(BIN)
        .args(["fleet", "import", "inference-perf"])
        .arg(&cfg)
        .arg("-o")
        .arg(&toml)
        .args(fleet)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let run = |args: &[&std::ffi::OsStr]| {
        let o = Command::new(BIN).args(["fleet", "run", "-q", "--json", "--no-date"]).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_object_mut().unwrap().remove("provenance");
        v
    };
    let direct = run(&[
        "--inference-perf".as_ref(),
        cfg.as_os_str(),
        "--pods".as_ref(),
        "2".as_ref(),
        "--capacity".as_ref(),
        "400".as_ref(),
    ]);
    let imported = run(&[toml.as_os_str()]);
    assert_eq!(direct, imported);
    assert_eq!(direct["requests"].as_u64(), imported["requests"].as_u64());
    // --pods overrides a scenario's
    let more = run(&[toml.as_os_str(), "--pods".as_ref(), "4".as_ref()]);
    assert_eq!(more["pods"].as_u64(), Some(4));
    // --inference-perf without the fleet is exit 2
    let o = Command::new(BIN).args(["fleet", "run", "--inference-perf"]).arg(&cfg).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
