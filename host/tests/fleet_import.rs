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

const CODEGEN: &str = "scenarios/inference-perf/llm-d-sticky-code-generation.yml";

/// The vendored code-generation config as `run_benchmark.sh` (llm-d/llm-d @ 06d672f7) fills it with
/// `envsubst` for concurrency level `c`: CONC = SEED = NUM_CONVERSATIONS = c, MAX_REQUESTS = 6 c;
/// the rest name where the real run sends and writes (no effect here).
fn codegen_at(c: u64) -> String {
    let mut t = std::fs::read_to_string(repo().join(CODEGEN)).unwrap();
    let c6 = (6 * c).to_string();
    let c = c.to_string();
    for (k, v) in [
        ("CONC", c.as_str()),
        ("SEED", &c),
        ("NUM_CONVERSATIONS", &c),
        ("MAX_REQUESTS", &c6),
        ("STREAMING_MODE", "false"),
        ("SLO_TPOT_MS", "0"),
        ("SLO_TTFT_MS", "0"),
        ("SHEDDABLE", "nonsheddable"),
        ("MODEL_NAME", "Qwen/Qwen3-32B"),
        ("BASE_URL", "http://gateway:80"),
        ("GCS_BUCKET", "bucket"),
        ("OUTPUT_DIR", "out"),
        ("REPORT_PREFIX", "run"),
    ] {
        t = t.replace(&format!("${{{k}}}"), v);
    }
    assert!(!t.contains("${"), "a placeholder left: {t}");
    t
}

fn codegen_flags() -> FleetFlags {
    FleetFlags {
        pods: 10,
        capacity: 19208,
        router: "llm-d-affinity".into(),
        alpha: brokerlab_core::fleet::defaults::ALPHA,
        profile: Some("qwen3-32b-h100-tp2".into()),
        seed: 13,
        requests: None,
        name: Some("sticky-code-generation-c60".into()),
    }
}

/// inference-perf's `conversation_replay` data (table 2's code-generation runs) imports to
/// `[workload.conversations]`: the vendored llm-d config at c = 60 gives the hand-written
/// scenario's conversations and load (parsed values), and one changed key changes them.
#[test]
fn llm_d_code_generation_config_imports_to_the_hand_written_conversations() {
    let hand = Scenario::load_any(&repo().join("scenarios/sticky-code-generation.toml")).unwrap();
    let imported = import(&codegen_at(60), CODEGEN, &codegen_flags()).unwrap();
    let s = &imported.scenario;
    let mut conv = s.conversations.expect("conversations imported");
    // vLLM's max_model_len (131,072 with YaRN) is the server's, not in the config: the flags'
    // fleet has none; every other field is the config's
    assert_eq!(conv.max_model_len, 0);
    conv.max_model_len = hand.conversations.expect("hand-written conversations").max_model_len;
    assert_eq!(Some(conv), hand.conversations, "conversations");
    assert_eq!(s.load, hand.load, "load");
    assert_eq!(s.workload.seed, hand.workload.seed, "seed");
    assert_eq!(s.name, hand.name);
    assert_eq!(
        (s.fleet.pods, s.fleet.capacity_blocks, s.fleet.router),
        (hand.fleet.pods, hand.fleet.capacity_blocks, hand.fleet.router)
    );
    assert!(imported.toml.contains("cache_generated_tokens = true"), "{}", imported.toml);
    assert!(imported.notes.iter().any(|n| n.contains("tool_call_latency_sec: always 0")), "{:?}", imported.notes);
    // one changed distribution, another level
    let other = import(&codegen_at(60).replace("mean: 800", "mean: 700"), CODEGEN, &codegen_flags()).unwrap();
    assert_ne!(other.scenario.conversations, s.conversations);
    assert_eq!(other.scenario.load, hand.load);
    let c30 = import(&codegen_at(30), CODEGEN, &codegen_flags()).unwrap().scenario;
    let (conv, load) = (c30.conversations.unwrap(), c30.load.unwrap());
    assert_eq!((conv.count, c30.workload.seed), (30, 30));
    assert_eq!((load.stages[0].concurrency, load.stages[0].num_requests), (30, 180));
    // fleet compare runs synthetic workloads only: the import is refused there by name
    let dir = std::env::temp_dir().join(format!("brokerlab-import-conv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("cg60.yml");
    std::fs::write(&p, codegen_at(60)).unwrap();
    let o = Command::new(BIN)
        .args(["fleet", "compare", "--inference-perf"])
        .arg(&p)
        .args(["--pods", "10", "--capacity", "19208"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("workload.conversations"));
    let _ = std::fs::remove_dir_all(&dir);
}

const CONV_BASE: &str = "load:\n  type: concurrent\n  stages:\n    - concurrency_level: 4\n      num_requests: 8\ndata:\n  type: conversation_replay\n  conversation_replay:\n    num_conversations: 4\n    shared_system_prompt_len: 100\n";

#[test]
fn conversation_replay_keys_the_model_lacks_are_exit_2_naming_them() {
    let (code, err) = run_import(CONV_BASE);
    assert_eq!(code, 0, "{err}");
    let add = |more: &str| format!("{CONV_BASE}{more}");
    let cases: [(String, &str); 8] = [
        (add("    tool_call_latency_sec:\n      type: fixed\n      mean: 2\n"), "tool_call_latency_sec"),
        (add("    max_model_len: 131072\n"), "data.conversation_replay.max_model_len"),
        (add("    bogus_key: 1\n"), "bogus_key"),
        (add("    turns_per_conversation:\n      type: skew_normal\n"), "turns_per_conversation.type"),
        (add("    input_tokens_per_turn:\n      min: 50\n      max: 10\n"), "input_tokens_per_turn.min"),
        (
            CONV_BASE
                .replace("type: concurrent", "type: poisson")
                .replace("    - concurrency_level: 4\n      num_requests: 8\n", "    - rate: 2\n      duration: 10\n"),
            "load.type",
        ),
        (
            CONV_BASE.replace(
                "      num_requests: 8\n",
                "      num_requests: 8\n    - concurrency_level: 8\n      num_requests: 8\n",
            ),
            "load.stages",
        ),
        (CONV_BASE.replace("type: conversation_replay", "type: random"), "data.conversation_replay"),
    ];
    for (yaml, key) in cases {
        let (code, err) = run_import(&yaml);
        assert_eq!(code, 2, "{key}: {err}");
        assert!(err.contains(key), "{key} not named in: {err}");
    }
    // a latency that is always 0 (llm-d's configs) is accepted
    let (code, err) = run_import(&add(
        "    tool_call_latency_sec:\n      type: normal\n      min: 0\n      max: 0\n      mean: 0\n      std_dev: 0\n",
    ));
    assert_eq!(code, 0, "{err}");
}
