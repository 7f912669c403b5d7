//! Conversation replay through `fleet run` (docs/MODEL.md, "Conversation replay"): a turn's hit
//! on its conversation's previous turn with and without `cache_generated_tokens`, a session
//! waiting for its previous turn, client time-outs aborted on the server, turns refused for
//! their length counted, and the inputs refused (exit 2 naming the key) that used to be
//! accepted silently or to fail late. Each rule is read back from `--outcomes` and `--json`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

mod fleet_run_support;
use fleet_run_support::{run_scenario, u};

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-conv-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `fleet run --json --outcomes` on scenario `text`: (exit code, stderr, JSON, outcome
/// lines).
fn run(tag: &str, text: &str) -> (i32, String, Value, Vec<Value>) {
    run_scenario("conv", tag, text)
}

/// One pod; `count` conversations of `turns` fixed turns, a 32-token shared system prompt,
/// `input` and `output` tokens per turn; a concurrent stage of `requests` at `conc`; `load` and
/// `engine` add keys to `[load]` and `[fleet.engine]`.
fn conv(
    count: u32,
    turns: u32,
    input: u64,
    output: u64,
    (conc, requests): (u32, u32),
    load: &str,
    engine: &str,
) -> String {
    format!(
        "[workload]\nseed = 7\n\n[workload.conversations]\ncount = {count}\nshared_system_prompt_tokens = 32\n\
         turns = {{ dist = \"fixed\", mean = {turns} }}\ninput_tokens_per_turn = {{ dist = \"fixed\", mean = {input} }}\n\
         output_tokens_per_turn = {{ dist = \"fixed\", mean = {output} }}\n\n[load]\ntype = \"concurrent\"\n{load}\n\
         [[load.stages]]\nconcurrency_level = {conc}\nnum_requests = {requests}\n\n[fleet]\npods = 1\ncapacity = 400\n\
         router = \"prefix-aware\"\n\n[fleet.engine]\nprofile = \"qwen3-32b-h100x2\"\n{engine}\n"
    )
}

#[test]
fn turn_two_hits_turn_ones_response_only_with_cache_generated_tokens() {
    // Turn 0: prompt 32 + 64 = 96 tokens (6 blocks), 32 generated; its last token's KV is never
    // computed, so 127 tokens are: 7 full blocks. Turn 1's prompt is turn 0's prompt and
    // response + 64: it hits 6 blocks (96 tokens) of the prompt, and with
    // cache_generated_tokens the 7th, all generated (112 tokens).
    for (flag, hit) in [("", 96), ("cache_generated_tokens = true", 112)] {
        let (code, err, json, lines) = run("hit", &conv(1, 2, 64, 32, (1, 2), "", flag));
        assert_eq!(code, 0, "{err}");
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(u(&lines[0], "hit_tokens"), 0);
        assert_eq!(u(&lines[1], "hit_tokens"), hit, "{flag:?}: {:?}", lines[1]);
        assert_eq!(u(&json, "input_tokens"), 96 + 192);
    }
}

#[test]
fn a_session_waits_for_its_previous_turn() {
    // Two clients, one conversation of two turns: the generator hands turn 1 to the second
    // client within the stage's first second, but its session holds it until turn 0 (200
    // output tokens: seconds) has ended; it is sent at that end, and its latency starts there.
    let (code, err, _, lines) = run("session", &conv(1, 2, 64, 200, (2, 2), "", ""));
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines.len(), 2);
    let end0 = u(&lines[0], "arrival_ns") + u(&lines[0], "e2e_ns");
    assert!(end0 > 2_000_000_000, "turn 0 outlasts the generator's sends ({end0} ns)");
    assert_eq!(u(&lines[1], "arrival_ns"), end0, "turn 1 is sent when turn 0 ends");
    // two conversations: their first turns wait for nothing (both sent within the first second)
    let (code, err, _, lines) = run("session2", &conv(2, 2, 64, 200, (2, 2), "", ""));
    assert_eq!(code, 0, "{err}");
    assert!(lines.iter().all(|l| u(l, "arrival_ns") <= 2_000_000_000), "{lines:?}");
}

#[test]
fn a_timed_out_turn_is_aborted_on_the_server_and_frees_its_session() {
    // Three clients, one conversation of three turns of 400 output tokens (seconds each), a
    // 0.2 s time-out: the generator hands the three turns out within the stage's first second
    // (by 2 s); each turn is aborted by the server at its deadline, and the session's next turn
    // is sent then or when the generator hands it out, whichever is later (without the abort,
    // at its predecessor's end, seconds later). The context is kept: every prompt is the system
    // prompt + its input, as no turn answered. The run ends within a step of the last deadline.
    let (code, err, json, lines) =
        run("timeout", &conv(1, 3, 64, 400, (3, 3), "request_timeout_s = 0.2\n", "cache_generated_tokens = true"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines.len(), 3, "{lines:?}");
    for l in &lines {
        assert_eq!(l["aborted"], true, "{l}");
        assert_eq!(l["status"], "timed_out", "{l}");
        assert_eq!(u(l, "e2e_ns"), 200_000_000, "{l}");
    }
    for k in 1..3 {
        let (at, deadline) = (u(&lines[k], "arrival_ns"), u(&lines[k - 1], "arrival_ns") + 200_000_000);
        assert!(at >= deadline && at <= deadline.max(2_000_000_000), "turn {k} sent at {at}, deadline {deadline}");
    }
    // the context was kept: 3 prompts of 96 tokens
    assert_eq!(u(&json, "input_tokens"), 3 * 96);
    let produced = u(&json, "output_tokens");
    assert!(produced < 3 * 400 / 4, "{produced} tokens produced: the server stopped each turn");
    let stage = &json["stages"][0];
    assert_eq!((u(stage, "sent"), u(stage, "completed"), u(stage, "timed_out")), (3, 0, 3), "{stage}");
    let last_deadline = u(&lines[2], "arrival_ns") + 200_000_000;
    let makespan_ns = (json["makespan_s"].as_f64().unwrap() * 1e9).round() as u64;
    assert!((last_deadline..last_deadline + 100_000_000).contains(&makespan_ns), "{makespan_ns} vs {last_deadline}");
}

#[test]
fn a_turn_refused_for_its_length_is_counted_not_lost() {
    // max_model_len 200: turn 0 (96 + 16) and turn 1 (96 + 16 + 64 = 176, + 16) fit, turn 2
    // (192 + 64 + 16 = 272) does not: refused at once, never dispatched, but sent and counted.
    let (code, err, json, lines) = run("refused", &conv(1, 3, 64, 16, (1, 3), "", "max_model_len = 200"));
    assert_eq!(code, 0, "{err}");
    let stage = &json["stages"][0];
    assert_eq!(
        (u(stage, "sent"), u(stage, "completed"), u(stage, "timed_out"), u(stage, "refused")),
        (3, 2, 0, 1),
        "{stage}"
    );
    assert_eq!(u(&json, "requests"), 2, "the engine ran two");
    assert_eq!(lines.len(), 3, "{lines:?}");
    let r = &lines[2];
    assert_eq!(
        (r["refused"].clone(), r["status"].clone(), r["index"].clone()),
        (Value::Bool(true), "refused".into(), Value::Null)
    );
    assert_eq!((u(r, "input_tokens"), u(r, "output_tokens"), u(r, "e2e_ns")), (256, 16, 0), "{r}");
    // the text table says so too
    let d = dir("refused-text");
    let sc = d.join("s.toml");
    std::fs::write(&sc, conv(1, 3, 64, 16, (1, 3), "", "max_model_len = 200")).unwrap();
    let o = Command::new(BIN).args(["fleet", "run", "-q", "--no-date"]).arg(&sc).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("refused by the server") && text.contains("stage 0: 1"), "{text}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Asserts exit 2, no panic, and every one of `want` in stderr.
fn refused(tag: &str, text: &str, want: &[&str]) {
    let (code, err, _, _) = run(tag, text);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for w in want {
        assert!(err.contains(w), "{err:?} lacks {w:?}");
    }
}

#[test]
fn inputs_that_cannot_apply_are_refused_naming_the_key() {
    // conv-cache-generated-without-conversations
    let synthetic = "[workload]\nseed = 3\nrequests = 20\ntenants = 2\nprefix_tokens = 64\nsuffix_tokens = [16, 32]\n\
                     output_tokens = [4, 8]\nrate_per_s = 10.0\n\n[fleet]\npods = 2\ncapacity = 64\n\n[fleet.engine]\n\
                     cache_generated_tokens = true\n";
    refused("gen", synthetic, &["`fleet.engine.cache_generated_tokens`", "[workload.conversations]"]);
    // conv-system-prompt-over-reset: a system prompt the safety reset would restart every turn at
    let big = conv(1, 2, 16, 16, (1, 2), "", "")
        .replace("shared_system_prompt_tokens = 32", "shared_system_prompt_tokens = 230000")
        .replace("capacity = 400", "capacity = 20000");
    refused("system", &big, &["workload.conversations.shared_system_prompt_tokens", "225000"]);
    let dynamic = conv(1, 2, 16, 16, (1, 2), "", "").replace(
        "shared_system_prompt_tokens = 32",
        "shared_system_prompt_tokens = 32\ndynamic_system_prompt_tokens = { dist = \"uniform\", min = 1000, max = 300000 }",
    );
    refused("dynamic", &dynamic, &["dynamic_system_prompt_tokens", "225000"]);
    // conv-timeout-with-pd: a client time-out under P/D (conversation replay and [load] alike)
    let pd = "\n[fleet.pd]\nprefill_pods = 1\n";
    let with_pd = conv(1, 2, 64, 16, (1, 2), "request_timeout_s = 5\n", "").replace("pods = 1\n", "pods = 2\n") + pd;
    refused("pd-conv", &with_pd, &["`load.request_timeout_s`", "fleet.pd.prefill_pods"]);
    let load = synthetic.replace("rate_per_s = 10.0\n", "").replace("cache_generated_tokens = true\n", "")
        + "\n[fleet.pd]\nprefill_pods = 1\n\n[load]\ntype = \"concurrent\"\nrequest_timeout_s = 5\n[[load.stages]]\nconcurrency_level = 2\nnum_requests = 4\n";
    refused("pd-load", &load, &["`load.request_timeout_s`", "fleet.pd.prefill_pods"]);
    // without a time-out the same P/D runs
    let (code, err, _, _) = run("pd-ok", &load.replace("request_timeout_s = 5\n", ""));
    assert_eq!(code, 0, "{err}");
}
