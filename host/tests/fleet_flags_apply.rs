//! A flag the chosen router or engine would ignore is exit 2 naming the flag and why, never
//! accepted silently (docs/BAD_INPUT.md, "Flags that do not apply"); a pipeline run prints its
//! pipeline, not `custom`.

use std::path::PathBuf;
use std::process::Command;

/// The trace, written once per test process: the tests run in parallel threads, and one
/// rewriting the file while another's run reads it made that run see half a line.
fn trace() -> PathBuf {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(write_trace).clone()
}

fn write_trace() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("brokerlab-flags-apply-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("t.jsonl");
    let mut text = String::new();
    for i in 0..20u64 {
        text.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": 100, \"output_length\": 4, \"hash_ids\": [{}, {}]}}\n",
            i * 10,
            i % 3,
            100 + i
        ));
    }
    std::fs::write(&p, text).unwrap();
    p
}

fn replay(extra: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "-q", "--no-date", "--pods", "2", "--capacity", "64", "--trace-block-size", "64"])
        .arg("--trace")
        .arg(trace())
        .args(extra)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn refused(extra: &[&str], flag: &str, why: &str) {
    let (code, out, err) = replay(extra);
    assert_eq!(code, 2, "{extra:?}: {out}{err}");
    assert!(err.contains(flag) && err.contains(why), "{extra:?}: {err}");
}

#[test]
fn alpha_is_refused_by_every_router_but_prefix_aware() {
    for r in [
        "round-robin",
        "least-loaded",
        "llm-d-precise",
        "llm-d-approximate",
        "llm-d-load",
        "random",
        "gie-default",
        "llm-d-affinity",
        "dynamo-kv",
        "sglang-cache-aware",
        "vllm-loadaware",
    ] {
        refused(&["--router", r, "--alpha", "4"], "--alpha", &format!("--router {r} does not read it"));
        // without --alpha the router runs
        let (code, _, err) = replay(&["--router", r]);
        assert_eq!(code, 0, "{r}: {err}");
    }
    let (code, out, err) = replay(&["--router", "prefix-aware", "--alpha", "4", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["alpha"], 4.0);
}

#[test]
fn alpha_is_refused_by_pipelines() {
    refused(
        &["--routing-scorers", "precise-prefix-cache:2,queue:1", "--alpha", "2"],
        "--alpha",
        "a --routing-scorers pipeline does not read it",
    );
    let cfg = trace().with_file_name("router.toml");
    std::fs::write(&cfg, "[[scorers]]\ntype = \"queue\"\nweight = 1.0\n").unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    refused(&["--router-config", &cfg, "--alpha", "2"], "--alpha", "a --router-config pipeline does not read it");
}

#[test]
fn fifo_costs_are_refused_by_the_batched_engine() {
    for flag in ["--t-prefill-ns", "--t-decode-ns", "--t-cpu-ns"] {
        refused(
            &["--router", "round-robin", "--engine", "batched", flag, "7"],
            flag,
            "--engine batched costs its steps",
        );
        let (code, _, err) = replay(&["--router", "round-robin", flag, "7"]);
        assert_eq!(code, 0, "{flag} under FIFO: {err}");
    }
}

#[test]
fn pipeline_runs_print_the_pipeline_not_custom() {
    let cfg = trace().with_file_name("router2.toml");
    std::fs::write(&cfg, "[[scorers]]\ntype = \"queue\"\nweight = 1.0\n").unwrap();
    let (code, out, err) = replay(&["--router-config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let line = out.lines().find(|l| l.starts_with("router ")).unwrap();
    assert!(line.contains("queue") && line.contains("policy pipeline"), "{line}");
    // the tokens format prints it too, for inline scorers as well
    let tokens = trace().with_file_name("tokens.jsonl");
    std::fs::write(&tokens, "{\"timestamp\": 0, \"token_ids\": [1, 2, 3], \"output_length\": 1}\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "-q", "--no-date", "--pods", "2", "--capacity", "64", "--trace"])
        .arg(&tokens)
        .args(["--routing-scorers", "queue:1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().find(|l| l.starts_with("router ")).unwrap();
    assert!(line.contains("queue") && !line.ends_with("custom"), "{line}");
}

/// The routers' view of the caches is built only for a router that reads the index: its flags
/// under any other router would change nothing, so they are refused (FIFO engine; the batched
/// engine refuses them all, its index being exact).
#[test]
fn view_flags_are_refused_by_routers_that_read_no_index() {
    for r in ["round-robin", "least-loaded", "llm-d-approximate", "llm-d-load", "random", "sglang-cache-aware"] {
        for (flag, value) in
            [("--stale", "3"), ("--event-delay-ms", "5"), ("--speculative-ttl-ms", "5"), ("--index", "global")]
        {
            refused(
                &["--router", r, flag, value],
                &format!("{flag} {value}"),
                &format!("--router {r} reads none, so it would change nothing"),
            );
        }
        // the defaults (0, pod-tables) are no-ops and pass
        let (code, _, err) = replay(&["--router", r, "--stale", "0", "--index", "pod-tables"]);
        assert_eq!(code, 0, "{r}: {err}");
    }
    // routers that read the index take them
    for r in ["prefix-aware", "llm-d-precise", "dynamo-kv"] {
        for (flag, value) in [("--stale", "3"), ("--event-delay-ms", "5"), ("--speculative-ttl-ms", "5")] {
            let (code, _, err) = replay(&["--router", r, flag, value]);
            assert_eq!(code, 0, "{r} {flag}: {err}");
        }
    }
    // a pipeline without a precise prefix scorer
    let cfg = trace().with_file_name("router3.toml");
    std::fs::write(&cfg, "[[scorers]]\ntype = \"queue\"\nweight = 1.0\n").unwrap();
    refused(
        &["--router-config", cfg.to_str().unwrap(), "--stale", "2"],
        "--stale 2",
        "a --router-config pipeline without a precise prefix scorer reads none",
    );
    refused(
        &["--routing-scorers", "queue:1", "--event-delay-ms", "9"],
        "--event-delay-ms 9",
        "a --routing-scorers pipeline without a precise prefix scorer reads none",
    );
    let (code, _, err) = replay(&["--routing-scorers", "precise-prefix-cache:2,queue:1", "--stale", "2"]);
    assert_eq!(code, 0, "{err}");
}
