//! The CLI's answers to bad input: exit code 2, a message naming the line, field or flag.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_brokerlab"))
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("brokerlab-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `fleet replay` with default flags, replaced by `flags` (pairs) when named there.
fn replay(trace: &PathBuf, flags: &[&str]) -> (i32, String, String) {
    let mut args = vec!["--pods", "2", "--capacity", "16", "--router", "prefix-aware"];
    let mut i = 0;
    while i < flags.len() {
        if flags[i] == "--json" {
            args.push("--json");
            i += 1;
            continue;
        }
        match args.iter().position(|a| *a == flags[i]) {
            Some(j) => args[j + 1] = flags[i + 1],
            None => args.extend_from_slice(&flags[i..i + 2]),
        }
        i += 2;
    }
    let out = bin().args(["fleet", "replay", "--trace"]).arg(trace).args(&args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

const GOOD: &str = "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 2, \"hash_ids\": [1]}\n";

#[test]
fn good_trace_prints_json_with_the_contract_keys() {
    let t = tmp("good.jsonl", &format!("{GOOD}\n{GOOD}"));
    let (code, out, err) = replay(&t, &["--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for k in [
        "requests",
        "input_tokens",
        "hit_tokens",
        "prefill_tokens",
        "hit_rate",
        "latency_p50",
        "latency_p90",
        "latency_p99",
        "per_pod_requests",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert_eq!(v["requests"], 2);
    assert_eq!(v["hit_tokens"], 32);
    assert_eq!(v["prefill_tokens"], 48);
}

#[test]
fn autoscaling_flags_add_the_autoscale_object() {
    // Two pods at most, one at the start; ten 1-second requests at t = 0 queue up, so the
    // evaluation at the first arrival at or after 1 s boots the second pod.
    let mut text = String::new();
    for ms in [0, 0, 0, 0, 0, 1000, 1000, 2000, 3000] {
        text += &format!("{{\"timestamp\": {ms}, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1]}}\n");
    }
    let t = tmp("scale.jsonl", &text);
    let flags =
        ["--scale-min", "1", "--scale-interval-s", "1", "--scale-startup-s", "0", "--t-decode-ns", "1000000000"];
    let (code, out, err) = replay(&t, &[&flags[..], &["--json"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let a = &v["autoscale"];
    assert_eq!((a["scale_outs"].as_u64(), a["max_active_pods"].as_u64()), (Some(1), Some(2)), "{a}");
    assert!(a["pod_seconds"].as_f64().unwrap() > 0.0);
    let (code, out, _) = replay(&t, &["--json"]);
    assert_eq!(code, 0);
    assert!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["autoscale"].is_null());
    let (code, out, _) = replay(&t, &flags);
    assert_eq!(code, 0);
    assert!(out.contains("autoscaling") && out.contains("pod-seconds"), "{out}");
}

#[test]
fn empty_trace_gives_nulls() {
    let t = tmp("empty.jsonl", "\n\n");
    let (code, out, err) = replay(&t, &["--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["hit_rate"].is_null() && v["latency_p90"].is_null());
    assert_eq!(v["requests"], 0);
}

#[test]
fn bad_input_names_the_line_or_flag() {
    let cases: Vec<(String, Vec<&str>, &str)> = vec![
        (format!("{GOOD}{{\"timestamp\": 1, \"input_length\": 40"), vec![], "bad.jsonl:2: column"),
        (
            format!("{GOOD}{{\"timestamp\": 1, \"output_length\": 2, \"hash_ids\": [1]}}"),
            vec![],
            "bad.jsonl:2: missing field `input_length`",
        ),
        (
            format!("{GOOD}\n{{\"timestamp\": 1, \"input_length\": 1100, \"output_length\": 2, \"hash_ids\": [1, 2]}}"),
            vec![],
            "bad.jsonl:3: field `hash_ids`: has 2 ids",
        ),
        (
            "{\"timestamp\": 5, \"input_length\": 4, \"output_length\": 2, \"hash_ids\": [1]}\n".to_string() + GOOD,
            vec![],
            "bad.jsonl:2: field `timestamp`",
        ),
        (
            "{\"timestamp\": 2.5, \"input_length\": 4, \"output_length\": 2, \"hash_ids\": [1]}".to_string(),
            vec![],
            "bad.jsonl:1: field `timestamp`: expected a non-negative integer",
        ),
        (GOOD.to_string(), vec!["--pods", "0"], "--pods"),
        (GOOD.to_string(), vec!["--pods", "1025"], "--pods"),
        (GOOD.to_string(), vec!["--capacity", "0"], "--capacity"),
        (GOOD.to_string(), vec!["--router", "no-such-router"], "--router"),
        (GOOD.to_string(), vec!["--alpha", "-1"], "--alpha"),
        (GOOD.to_string(), vec!["--trace-block-size", "500"], "--trace-block-size"),
        (GOOD.to_string(), vec!["--scale-min", "0"], "--scale-min"),
        (GOOD.to_string(), vec!["--scale-min", "3"], "--scale-min"),
        (GOOD.to_string(), vec!["--scale-min", "1", "--scale-initial", "3"], "--scale-initial"),
        (GOOD.to_string(), vec!["--scale-min", "1", "--scale-interval-s", "0"], "--scale-interval-s"),
        (GOOD.to_string(), vec!["--scale-min", "1", "--scale-startup-s", "-1"], "--scale-startup-s"),
        (GOOD.to_string(), vec!["--scale-min", "1", "--scale-up-queue", "nan"], "--scale-up-queue"),
        (GOOD.to_string(), vec!["--scale-min", "1", "--scale-down-queue", "9"], "--scale-down-queue"),
    ];
    for (text, flags, want) in cases {
        let t = tmp("bad.jsonl", &text);
        let (code, _, err) = replay(&t, &flags);
        assert_eq!(code, 2, "{want}: {err}");
        assert!(err.contains(want), "expected `{want}` in: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let (code, _, err) = replay(&PathBuf::from("/nonexistent/trace.jsonl"), &[]);
    assert_eq!(code, 2);
    assert!(err.contains("--trace /nonexistent/trace.jsonl"), "{err}");
}

/// A full buffer makes the run start over and read the trace again. A pipe (`--trace /dev/stdin`,
/// `<(zcat ...)`) cannot be read twice: the second pass used to see an empty stream and report a
/// run of 0 requests with exit code 0. Now it is either the file's result or an error, never a
/// silently truncated replay.
#[test]
fn a_piped_trace_is_never_silently_truncated_by_a_restart() {
    use std::io::Write;
    use std::process::Stdio;
    // 600-block prompts through a 16-block pod evict ~600 keys each: with a stale index (k = 1),
    // the first pending-evict buffer (512 records) fills and the run restarts.
    let text: String = (0..4)
        .map(|i| {
            let ids: Vec<String> = (i * 1000..i * 1000 + 600).map(|h| h.to_string()).collect();
            format!(
                "{{\"timestamp\": {i}, \"input_length\": 9600, \"output_length\": 1, \"hash_ids\": [{}]}}\n",
                ids.join(", ")
            )
        })
        .collect();
    let flags = ["--trace-block-size", "16", "--capacity", "16", "--stale", "1", "--json"];
    let (code, from_file, err) = replay(&tmp("restart.jsonl", &text), &flags);
    assert_eq!(code, 0, "{err}");
    let mut child = bin()
        .args(["fleet", "replay", "--trace", "/dev/stdin", "--pods", "2", "--router", "prefix-aware"])
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    match out.status.code() {
        Some(0) => assert_eq!(stdout, from_file, "a piped trace must replay like the file"),
        Some(2) => assert!(stderr.contains("--trace /dev/stdin") && stderr.contains("regular file"), "{stderr}"),
        other => panic!("exit {other:?}: {stderr}"),
    }
}

#[test]
fn router_presets_and_config_files() {
    let t = tmp("good-router.jsonl", &format!("{GOOD}\n{GOOD}"));
    for name in ["llm-d-precise", "gie-default", "llm-d-affinity", "dynamo-kv", "sglang-cache-aware"] {
        let (code, out, err) = replay(&t, &["--router", name, "--json"]);
        assert_eq!(code, 0, "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["router"], name);
    }
    let cases = [
        ("[[scorers]]\ntype = \"queue\"\nwieght = 2\n", "unknown field `wieght`"),
        ("[[scorers]]\ntype = \"no-such-scorer\"\n", "no-such-scorer"),
        ("preset = \"dynamo-kv\"\n[params]\nrouter_temperature = -1\n", "key `params.router_temperature`"),
        ("[[scorers]]\ntype = \"queue\"\nweight = -1\n", "key `scorers.weight`"),
        ("preset = \"prefix-aware\"\n", "key `preset`"),
    ];
    for (text, want) in cases {
        let cfg = tmp("router.toml", text);
        let (code, _, err) = replay(&t, &["--router-config", cfg.to_str().unwrap()]);
        assert_eq!(code, 2, "{want}: {err}");
        assert!(err.contains(want) && err.contains("router.toml"), "expected `{want}` and the file in: {err}");
    }
    let cfg = tmp("router-ok.toml", "filters = [\"prefix-cache-affinity\"]\n[[scorers]]\ntype = \"token-load\"\n");
    let (code, out, err) = replay(&t, &["--router-config", cfg.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"custom\""), "{out}");
}
