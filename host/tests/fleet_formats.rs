//! `--format bailian|dynamo|tokens` (docs/MODEL.md, "Trace formats"): small hand-written traces
//! with hand-computed answers, format detection, bad input (exit 2 naming file, line and field),
//! and a Mooncake trace re-expressed as Bailian lines giving identical results.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use brokerlab::fleet::input::formats::{Format, FormatSource, HashArgs, HashKind, Keyer};
use brokerlab::fleet::run::{Batched, Fifo, Summary, TraceSource, simulate, with_view};
use brokerlab_core::fleet::{BatchedConfig, FleetConfig, Profile, RouterKind};
use serde_json::Value;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-formats-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(name: &str, text: &str) -> PathBuf {
    let p = dir().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `fleet replay --json` (1 pod of 1000 blocks, prefix-aware unless `flags` say otherwise).
fn replay(trace: &Path, flags: &[&str]) -> (i32, Value, String) {
    let mut args: Vec<&str> = vec!["--pods", "1", "--capacity", "1000", "--router", "prefix-aware"];
    for pair in flags.chunks(2) {
        match args.iter().position(|a| *a == pair[0]) {
            Some(j) => args[j + 1] = pair[1],
            None => args.extend_from_slice(pair),
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "--json", "--quiet", "--trace"])
        .arg(trace)
        .args(&args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn replay_ok(trace: &Path, flags: &[&str]) -> Value {
    let (code, v, err) = replay(trace, flags);
    assert_eq!(code, 0, "{err}");
    v
}

fn tokens_line(ts: u64, ids: &[u32]) -> String {
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    format!("{{\"timestamp\": {ts}, \"token_ids\": [{}], \"output_length\": 2}}\n", ids.join(", "))
}

#[test]
fn tokens_trace_hits_by_hand_with_both_hashes() {
    // r0: 40 tokens (2 full blocks); r1 shares its first 32 tokens then differs (2 blocks hit of
    // 3); r2 differs at token 5 (no hit); r3 = r1's first 47 tokens (2 full blocks, both hit).
    let a: Vec<u32> = (0..40).map(|i| i * 7919).collect();
    let mut b = a[..32].to_vec();
    b.extend((0..20).map(|i| 100_000 + i));
    let mut c = a.clone();
    c[5] = 1;
    let d = b[..47].to_vec();
    let text = [tokens_line(0, &a), tokens_line(1, &b), tokens_line(1, &c), "\n".into(), tokens_line(5, &d)].concat();
    let t = write("tokens.jsonl", &text);
    for flags in [vec![], vec!["--hash", "vllm-sha256-cbor", "--hash-seed", "42"], vec!["--hash", "vllm-sha256-cbor"]] {
        let v = replay_ok(&t, &flags);
        assert_eq!(v["format"], "tokens");
        assert_eq!(v["requests"], 4);
        assert_eq!(v["input_tokens"], 40 + 52 + 40 + 47);
        assert_eq!(v["hit_tokens"], 32 + 32, "{flags:?}");
    }
    // Explicit --format gives the same.
    assert_eq!(replay_ok(&t, &["--format", "tokens"])["hit_tokens"], 64);
    // vLLM blocks of 32 tokens: r1 and r3 share a's first full 32-token block (their tails never
    // hit); of 64 tokens: no prompt has a full block, so nothing hits.
    for hash in [&["--hash", "vllm-sha256-cbor"][..], &["--hash", "vllm-xxhash-cbor", "--hash-seed", "0"]] {
        let b32 = replay_ok(&t, &[hash, &["--block-size", "32"]].concat());
        assert_eq!(b32["hit_tokens"], 32 + 32, "{hash:?}");
        let b64 = replay_ok(&t, &[hash, &["--block-size", "64"]].concat());
        assert_eq!(b64["hit_tokens"], 0, "{hash:?}");
    }
    for b in ["24", "8", "1048577"] {
        let (code, _, err) = replay(&t, &["--hash", "vllm-sha256-cbor", "--block-size", b]);
        assert_eq!(code, 2, "{b}");
        assert!(err.contains(&format!("--block-size {b}")), "{err}");
        assert!(err.contains("multiple of 16") || err.contains("1 to 1048576"), "{err}");
    }
}

#[test]
fn vllm_64_token_blocks_hit_whole_blocks_only() {
    // e: 140 tokens; f shares e's first 100 then differs. With 64-token vLLM blocks f hits the
    // one full block they share (64 tokens); the model's own hash hits 6 blocks of 16 (96).
    let e: Vec<u32> = (0..140).map(|i| i * 31 + 7).collect();
    let mut f = e[..100].to_vec();
    f.extend((0..60).map(|i| 500_000 + i));
    let t = write("tokens64.jsonl", &[tokens_line(0, &e), tokens_line(1, &f), tokens_line(2, &e)].concat());
    let vllm = replay_ok(&t, &["--hash", "vllm-sha256-cbor", "--hash-seed", "0", "--block-size", "64"]);
    // e again hits its 2 full blocks (128 tokens), not the 12 tokens of its tail
    assert_eq!(vllm["hit_tokens"], 64 + 128);
    assert_eq!(replay_ok(&t, &[])["hit_tokens"], 96 + 128);
    // pickle-based vLLM hashes are refused with the reason
    for h in ["vllm-sha256", "vllm-xxhash"] {
        let (code, _, err) = replay(&t, &["--hash", h]);
        assert_eq!(code, 2, "{h}");
        assert!(err.contains(&format!("--hash {h}")) && err.contains("pickle"), "{err}");
    }
    let (code, _, err) = replay(&t, &["--hash", "vllm-xxhash-cbor"]);
    assert_eq!(code, 2);
    assert!(err.contains("--hash-seed"), "{err}");
}

#[test]
fn tokens_keys_in_the_library_follow_the_flags() {
    let args = |hash| HashArgs { hash, hash_seed: None, block_size: None };
    let tokens: Vec<u32> = (0..33).collect();
    let mut k1 = vec![];
    let mut k2 = vec![];
    Keyer::new(&args(HashKind::Brokerlab)).unwrap().keys(&tokens, &mut k1);
    Keyer::new(&args(HashKind::VllmSha256Cbor)).unwrap().keys(&tokens, &mut k2);
    assert_eq!((k1.len(), k2.len()), (2, 2));
    assert_ne!(k1, k2);
    // The default seed is vLLM v0.33's "vllm-none-hash".
    let seed = brokerlab_core::fleet::vllm::seed_digest("vllm-none-hash");
    let d0 = brokerlab_core::fleet::vllm::block_digest(&seed, &tokens[..16]);
    assert_eq!(k2[0], brokerlab_core::fleet::vllm::digest_key(&d0));
}

const BAILIAN: &str = r#"{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 48, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]}
{"chat_id": 2, "parent_chat_id": 1, "timestamp": 1.5, "input_length": 64, "output_length": 5, "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 4]}
{"chat_id": 3, "parent_chat_id": -1, "timestamp": 2.0005, "input_length": 32, "output_length": 5, "type": "search", "turn": 1, "hash_ids": [9, 2]}
{"chat_id": 4, "parent_chat_id": 3, "timestamp": 3e0, "input_length": 40, "output_length": 5, "type": "search", "turn": 2, "hash_ids": [9, 2, 7]}
"#;

#[test]
fn bailian_trace_hits_and_breakdowns_by_hand() {
    let t = write("bailian.jsonl", BAILIAN);
    let v = replay_ok(&t, &[]);
    assert_eq!(v["format"], "bailian");
    assert_eq!(v["requests"], 4);
    // r1 hits ids 1,2,3 (48 tokens); r3 hits 9,2 (32 of its 40 tokens: 2 full blocks).
    assert_eq!(v["hit_tokens"], 80);
    let g = |by: &str, k: &str, f: &str| v["breakdown"][by][k][f].as_u64().unwrap();
    assert_eq!((g("by_type", "text", "input_tokens"), g("by_type", "text", "hit_tokens")), (112, 48));
    assert_eq!((g("by_type", "search", "input_tokens"), g("by_type", "search", "hit_tokens")), (72, 32));
    assert_eq!((g("by_turn", "1", "requests"), g("by_turn", "1", "hit_tokens")), (2, 0));
    assert_eq!((g("by_turn", "2", "input_tokens"), g("by_turn", "2", "hit_tokens")), (104, 80));
    // Arrivals: 0, 1.5 s, 2.0005 s, 3 s exactly (the last request starts at 3 s; no queue).
    let makespan = v["makespan_s"].as_f64().unwrap();
    assert!((makespan - (3.0 + 8.0 * 50e-6)).abs() < 1e-12, "{makespan}");
    // The readable output has the breakdown tables.
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "--quiet", "--pods", "1", "--capacity", "100", "--router", "round-robin", "--trace"])
        .arg(&t)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(format bailian)") && text.contains("\nsearch ") && text.contains("\n2  "), "{text}");
}

/// Dynamo: the delay counts from the previous turn's simulated completion (closed loop).
#[test]
fn dynamo_sessions_are_a_closed_loop() {
    // Session a: turn 0 at 0 ms, 1024 tokens, all computed: 1024 x 50 us = 51.2 ms. Turn 1 comes
    // 100 ms after that completion, at 151.2 ms (open loop would be 100 ms), and hits all 64 blocks.
    // Session b's only turn, at 120 ms, 512 fresh tokens: 25.6 ms on the same pod.
    for turn1 in [r#""delay": 100"#, r#""delay_ms": 100.0"#, r#""timestamp": 100"#, r#""created_time": 100"#] {
        let text = format!(
            "{{\"session_id\": \"a\", \"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [1, 2]}}\n\
             {{\"session_id\": \"a\", {turn1}, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [1, 2]}}\n\
             {{\"session_id\": \"b\", \"timestamp\": 120, \"output_length\": 1, \"hash_ids\": [5]}}\n"
        );
        let t = write("dynamo.jsonl", &text);
        let v = replay_ok(&t, &[]);
        assert_eq!(v["format"], "dynamo", "{turn1}");
        assert_eq!(v["requests"], 3);
        assert_eq!(v["input_tokens"], 1024 + 1024 + 512, "b's input_length = 1 id x 512");
        assert_eq!(v["hit_tokens"], 1024);
        assert!((v["makespan_s"].as_f64().unwrap() - 0.1512).abs() < 1e-12, "{turn1}: {}", v["makespan_s"]);
    }
}

#[test]
fn formats_are_detected_from_the_first_line() {
    let cases = [
        ("{\"timestamp\": 0, \"token_ids\": [1], \"output_length\": 1}\n", Format::Tokens),
        (BAILIAN, Format::Bailian),
        ("{\"session_id\": \"s\", \"output_length\": 1, \"hash_ids\": [1]}\n", Format::Dynamo),
        ("\n{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", Format::Mooncake),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = write(&format!("detect{i}.jsonl"), text);
        assert_eq!(
            brokerlab::fleet::input::formats::resolve_format(
                None,
                &p,
                brokerlab::fleet::input::trace::DEFAULT_MAX_LINE_BYTES,
                9
            )
            .unwrap(),
            *want
        );
        assert_eq!(
            brokerlab::fleet::input::formats::resolve_format(
                Some(Format::Dynamo),
                &p,
                brokerlab::fleet::input::trace::DEFAULT_MAX_LINE_BYTES,
                9
            )
            .unwrap(),
            Format::Dynamo
        );
    }
    let p = write("detect-none.jsonl", "{\"timestamp\": 0}\n");
    let err = brokerlab::fleet::input::formats::resolve_format(
        None,
        &p,
        brokerlab::fleet::input::trace::DEFAULT_MAX_LINE_BYTES,
        9,
    )
    .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.code(), 2);
    assert!(msg.contains("detect-none.jsonl:1: cannot tell the trace format"), "{msg}");
}

#[test]
fn bad_lines_are_exit_2_naming_file_line_and_field() {
    let tok_ok = "{\"timestamp\": 5, \"token_ids\": [1], \"output_length\": 1}\n";
    let bai_ok = BAILIAN.lines().next().unwrap().to_string() + "\n";
    let dyn_ok = "{\"session_id\": \"s\", \"timestamp\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "tokens",
            format!("{tok_ok}{{\"timestamp\": 4, \"token_ids\": [1], \"output_length\": 1}}"),
            ":2: field `timestamp`: 4 ms is before",
        ),
        (
            "tokens",
            format!("{tok_ok}{{\"timestamp\": 6, \"token_ids\": [1, \"x\"], \"output_length\": 1}}"),
            ":2: field `token_ids[1]`",
        ),
        ("tokens", format!("{tok_ok}{{\"timestamp\": 6, \"token_ids\": [1]}}"), ":2: missing field `output_length`"),
        ("bailian", bai_ok.replace("0.0", "-1.0"), ":1: field `timestamp`"),
        ("bailian", bai_ok.replace("\"turn\": 1", "\"turn\": \"1\""), ":1: field `turn`"),
        ("bailian", bai_ok.replace("\"type\": \"text\"", "\"type\": 3"), ":1: field `type`"),
        ("bailian", bai_ok.replace("\"parent_chat_id\": -1", "\"parent_chat_id\": -2"), ":1: field `parent_chat_id`"),
        (
            "bailian",
            bai_ok.replace(", \"chat_id\": 1", "").replace("\"chat_id\": 1, ", ""),
            ":1: missing field `chat_id`",
        ),
        ("bailian", bai_ok.replace("[1, 2, 3]", "[1, 2]"), ":1: field `hash_ids`: has 2 ids"),
        (
            "bailian",
            format!("{}{}", BAILIAN.lines().nth(1).unwrap(), "\n") + &bai_ok,
            ":2: field `timestamp`: 0 s (0 ns) is before",
        ),
        (
            "dynamo",
            format!("{dyn_ok}{}", dyn_ok.replace("\"timestamp\": 5", "\"timestamp\": 4")),
            ":2: field `timestamp`: 4 ms is before",
        ),
        (
            "dynamo",
            dyn_ok.replace("\"timestamp\": 5", "\"timestamp\": 5, \"delay\": 3"),
            ":1: field `delay`: the first turn",
        ),
        ("dynamo", dyn_ok.replace("\"output_length\": 1, ", ""), ":1: missing field `output_length`"),
        (
            "dynamo",
            dyn_ok.replace("\"hash_ids\": [1]", "\"input_length\": 600, \"hash_ids\": [1]"),
            ":1: field `input_length`: 600 tokens exceed",
        ),
        (
            "dynamo",
            format!("{}{dyn_ok}", dyn_ok.replace("\"timestamp\": 5, ", "")),
            ":2: field `timestamp`: session \"s\" has no earlier timestamp",
        ),
        ("dynamo", dyn_ok.replace("\"s\"", "7"), ":1: field `session_id`"),
    ];
    for (i, (format, text, want)) in cases.iter().enumerate() {
        let name = format!("bad{i}.jsonl");
        let p = write(&name, text);
        let (code, _, err) = replay(&p, &["--format", format]);
        assert_eq!(code, 2, "{format} case {i}: {err}");
        assert!(err.contains(&format!("{name}{want}")), "{format} case {i}: {err}");
    }
    // Hash flags belong to token ids.
    let p = write("bai-hash.jsonl", BAILIAN);
    let (code, _, err) = replay(&p, &["--hash", "vllm-sha256-cbor"]);
    assert_eq!(code, 2);
    assert!(err.contains("--hash: applies to token ids"), "{err}");
}

fn vendored(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces").join(name)
}

/// The first `n` lines of a vendored (zstd) Mooncake trace, and the same requests as Bailian
/// lines: each 512-token id h becomes the 16-token ids 32h .. 32h+31 (as many as the prompt's
/// ceil(L/16) blocks need), milliseconds become seconds.
fn mooncake_and_bailian(n: usize) -> (String, String) {
    let mut text = String::new();
    let mut r = brokerlab::fleet::input::file::open(&vendored("conversation_trace.jsonl.zst")).unwrap();
    r.read_to_string(&mut text).unwrap();
    let mooncake: String = text.lines().take(n).map(|l| format!("{l}\n")).collect();
    let mut bailian = String::new();
    for (i, l) in mooncake.lines().enumerate() {
        let v: Value = serde_json::from_str(l).unwrap();
        let ms = v["timestamp"].as_u64().unwrap();
        let len = v["input_length"].as_u64().unwrap();
        let ids: Vec<String> = v["hash_ids"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|h| (0..32).map(move |k| h.as_u64().unwrap() * 32 + k))
            .take(len.div_ceil(16) as usize)
            .map(|x| x.to_string())
            .collect();
        bailian.push_str(&format!(
            "{{\"chat_id\": {i}, \"parent_chat_id\": -1, \"timestamp\": {}.{:03}, \"input_length\": {len}, \"output_length\": {}, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [{}]}}\n",
            ms / 1000,
            ms % 1000,
            v["output_length"],
            ids.join(", ")
        ));
    }
    (mooncake, bailian)
}

#[test]
fn mooncake_re_expressed_as_bailian_gives_identical_hits() {
    let (mooncake, bailian) = mooncake_and_bailian(3000);
    let (m, b) = (write("mc.jsonl", &mooncake), write("mc-as-bailian.jsonl", &bailian));
    let configs = [
        FleetConfig { alpha: 16.0, ..FleetConfig::new(4, 4096, RouterKind::PrefixAware) },
        FleetConfig::new(4, 2048, RouterKind::RoundRobin),
        with_view(FleetConfig::new(8, 8192, RouterKind::PrefixAware), |v| v.stale_delay = 8),
    ];
    for cfg in configs {
        let mut ms = TraceSource::new(m.clone(), 512);
        let mut bs = FormatSource {
            path: b.clone(),
            format: Format::Bailian,
            keyer: Keyer::new(&HashArgs { hash: HashKind::Brokerlab, hash_seed: None, block_size: None }).unwrap(),
            trace_block_tokens: 16,
            labels: vec![],
            types: vec![],
            max_line_bytes: brokerlab::fleet::input::trace::DEFAULT_MAX_LINE_BYTES,
            max_blank_lines: brokerlab::fleet::input::trace::DEFAULT_MAX_BLANK_LINES,
            read: Default::default(),
            growth: None,
        };
        let a: Summary = simulate::<Fifo>(cfg, &mut ms, false).unwrap().summary;
        let c = simulate::<Fifo>(cfg, &mut bs, true).unwrap();
        assert_eq!(a.requests, 3000);
        assert!(a.hit_tokens > 0, "the prefix is shared, so something hits");
        assert!(a.hit_tokens < a.input_tokens);
        assert_eq!(a.hit_tokens, c.summary.hit_tokens, "{cfg:?}");
        // Same arrivals and hits, so the whole summary is the same.
        assert_eq!(a, c.summary, "{cfg:?}");
        assert_eq!(c.outcomes.len(), 3000);
    }
    // Through the CLI, detecting both formats.
    let (vm, vb) =
        (replay_ok(&m, &["--pods", "4", "--capacity", "4096"]), replay_ok(&b, &["--pods", "4", "--capacity", "4096"]));
    assert_eq!(vb["format"], "bailian");
    for k in ["hit_tokens", "input_tokens", "latency_ns_p90", "per_pod_requests"] {
        assert_eq!(vm[k], vb[k], "{k}");
    }
    assert_eq!(vb["breakdown"]["by_type"]["text"]["hit_tokens"], vm["hit_tokens"]);
}

/// A Bailian request source over `path` (16-token ids, the model's hash).
fn bailian_source(path: &Path) -> FormatSource {
    FormatSource {
        path: path.to_path_buf(),
        format: Format::Bailian,
        keyer: Keyer::new(&HashArgs { hash: HashKind::Brokerlab, hash_seed: None, block_size: None }).unwrap(),
        trace_block_tokens: 16,
        labels: vec![],
        types: vec![],
        max_line_bytes: brokerlab::fleet::input::trace::DEFAULT_MAX_LINE_BYTES,
        max_blank_lines: brokerlab::fleet::input::trace::DEFAULT_MAX_BLANK_LINES,
        read: Default::default(),
        growth: None,
    }
}

/// The batched engine on the same requests as Mooncake lines and as Bailian lines: the same
/// summary and the same completions (the FIFO engine's test above, mirrored).
#[test]
fn mooncake_re_expressed_as_bailian_gives_the_identical_batched_summary() {
    let (mooncake, bailian) = mooncake_and_bailian(1000);
    let (m, b) = (write("mc-b.jsonl", &mooncake), write("mc-b-as-bailian.jsonl", &bailian));
    let engine = BatchedConfig::new(Profile::Qwen3_32bH100x2);
    // the second: small pods, so requests wait, get preempted and recomputed
    // (the longest request needs 7,649 blocks)
    let small = BatchedConfig { max_num_seqs: 16, max_num_batched_tokens: 2048, ..engine };
    let runs = [
        FleetConfig { alpha: 16.0, ..FleetConfig::batched(4, 8192, RouterKind::PrefixAware, engine) },
        FleetConfig::batched(2, 7700, RouterKind::RoundRobin, small),
    ];
    for cfg in runs {
        let a = simulate::<Batched>(cfg, &mut TraceSource::new(m.clone(), 512), true).unwrap();
        let c = simulate::<Batched>(cfg, &mut bailian_source(&b), true).unwrap();
        assert_eq!(a.summary.requests, 1000);
        assert!(a.summary.hit_tokens > 0 && a.summary.hit_tokens < a.summary.input_tokens);
        assert_eq!(a.summary, c.summary, "{cfg:?}");
        assert_eq!(a.completions, c.completions);
    }
    assert!(
        simulate::<Batched>(runs[1], &mut TraceSource::new(m.clone(), 512), false).unwrap().summary.preemptions > 0,
        "the small pods preempt, so recompute is compared too"
    );
    // Through the CLI, detecting both formats; --outcomes writes the same lines.
    let flags = ["--pods", "4", "--capacity", "8192", "--engine", "batched"];
    let (vm, om) = outcome_lines(&m, &flags, "om.jsonl");
    let (vb, ob) = outcome_lines(&b, &flags, "ob.jsonl");
    assert_eq!((vb["format"].as_str(), vb["engine"].as_str()), (Some("bailian"), Some("batched")));
    for k in ["hit_tokens", "input_tokens", "ttft_ns_p90", "e2e_ns_p90", "itl_ns_p90", "steps", "per_pod_requests"] {
        assert_eq!(vm[k], vb[k], "{k}");
    }
    assert_eq!(om, ob);
    assert_eq!(vb["breakdown"]["by_type"]["text"]["hit_tokens"], vm["hit_tokens"]);
    assert_eq!(vb["breakdown"]["by_turn"]["1"]["input_tokens"], vm["input_tokens"]);
}

/// A step cost easy to add up by hand: 1,000 ns + 10 ns per prefill token + 100 ns per decode.
const HAND_COST: [&str; 10] = [
    "--engine",
    "batched",
    "--t-overhead-ns",
    "1000",
    "--t-prefill-token-ns",
    "10",
    "--t-decode-seq-ns",
    "100",
    "--t-kv-token-ns",
    "0",
];

/// The per-request lines of `--outcomes` written to `name`.
fn outcome_lines(trace: &Path, flags: &[&str], name: &str) -> (Value, Vec<Value>) {
    let o = dir().join(name);
    let mut all = flags.to_vec();
    let os = o.to_str().unwrap().to_string();
    all.extend(["--outcomes", &os]);
    let v = replay_ok(trace, &all);
    let lines = std::fs::read_to_string(&o).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (v, lines)
}

#[test]
fn tokens_trace_under_the_batched_engine_by_hand() {
    // r0 at 0: 40 tokens, 2 outputs. Step 0..1,400 ns prefills 40 (1,000 + 400): first token;
    // step 1,400..2,500 decodes (1,000 + 100): done. r1 at 1 ms shares r0's first 32 tokens then
    // 20 new ones: 2 blocks hit (r0's freed blocks stay cached), prefill 20 in 1,200 ns, decode
    // 1,100 ns: TTFT 1,200, E2E 2,300.
    let a: Vec<u32> = (0..40).map(|i| i * 7919).collect();
    let mut b = a[..32].to_vec();
    b.extend((0..20).map(|i| 100_000 + i));
    let t = write("tokens-batched.jsonl", &[tokens_line(0, &a), tokens_line(1, &b)].concat());
    for (i, hash) in [&[][..], &["--hash", "vllm-sha256-cbor", "--hash-seed", "7"][..]].iter().enumerate() {
        let flags = [&HAND_COST[..], hash].concat();
        let (v, lines) = outcome_lines(&t, &flags, &format!("tok-out{i}.jsonl"));
        assert_eq!((v["format"].as_str(), v["engine"].as_str()), (Some("tokens"), Some("batched")));
        assert_eq!((v["requests"].as_u64(), v["input_tokens"].as_u64()), (Some(2), Some(92)));
        assert_eq!((v["output_tokens"].as_u64(), v["hit_tokens"].as_u64()), (Some(4), Some(32)), "{hash:?}");
        assert_eq!((v["prefill_tokens"].as_u64(), v["steps"].as_u64()), (Some(60), Some(4)));
        let got: Vec<[u64; 5]> = lines
            .iter()
            .map(|l| {
                ["arrival_ns", "hit_tokens", "prefill_tokens", "ttft_ns", "e2e_ns"].map(|k| l[k].as_u64().unwrap())
            })
            .collect();
        assert_eq!(got, vec![[0, 0, 40, 1_400, 2_500], [1_000_000, 32, 20, 1_200, 2_300]]);
        assert!((v["makespan_s"].as_f64().unwrap() - 1_002_300e-9).abs() < 1e-15);
    }
}

/// Dynamo under the batched engine: still a closed loop, the completion being the last token.
#[test]
fn dynamo_sessions_are_a_closed_loop_under_the_batched_engine() {
    // Session a: turn 0 at 0, 1024 tokens, 1 output: one step of 1,000 + 10,240 ns, done at
    // 11,240 ns. Turn 1 arrives 100 ms after that (open loop: 100 ms), hits 63 blocks (a full
    // hit recomputes the last token, so 1,008 tokens) and prefills 16 in 1,160 ns. Session b's
    // turn at 120 ms: 512 fresh tokens, 6,120 ns.
    for turn1 in [r#""delay": 100"#, r#""timestamp": 100"#] {
        let text = format!(
            "{{\"session_id\": \"a\", \"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [1, 2]}}\n\
             {{\"session_id\": \"b\", \"timestamp\": 120, \"output_length\": 1, \"hash_ids\": [5]}}\n\
             {{\"session_id\": \"a\", {turn1}, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [1, 2]}}\n"
        );
        let t = write("dynamo-batched.jsonl", &text);
        let (v, lines) = outcome_lines(&t, &HAND_COST, "dyn-out.jsonl");
        assert_eq!((v["format"].as_str(), v["engine"].as_str()), (Some("dynamo"), Some("batched")));
        let got: Vec<[u64; 4]> = lines
            .iter()
            .map(|l| ["arrival_ns", "hit_tokens", "prefill_tokens", "e2e_ns"].map(|k| l[k].as_u64().unwrap()))
            .collect();
        // requests in dispatch order: a's turn 0, a's turn 1 (ready first), b
        assert_eq!(got, vec![[0, 0, 1024, 11_240], [100_011_240, 1008, 16, 1_160], [120_000_000, 0, 512, 6_120]]);
        assert!((v["makespan_s"].as_f64().unwrap() - 120_006_120e-9).abs() < 1e-15, "{turn1}");
    }
    // Make turn 0 take longer: a decode step of 1,000 + 51,000,000 ns and 3 outputs, so turn 0
    // ends at 11,240 + 2 x 51,001,000 = 102,013,240 ns and turn 1 is ready at 202,013,240 ns,
    // after b (120 ms), which is now dispatched before it.
    let text = "{\"session_id\": \"a\", \"timestamp\": 0, \"input_length\": 1024, \"output_length\": 3, \"hash_ids\": [1, 2]}\n\
                {\"session_id\": \"b\", \"timestamp\": 120, \"output_length\": 1, \"hash_ids\": [5]}\n\
                {\"session_id\": \"a\", \"delay\": 100, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [1, 2]}\n";
    let t = write("dynamo-batched2.jsonl", text);
    let mut flags = HAND_COST.to_vec();
    flags[7] = "51000000";
    let (_, lines) = outcome_lines(&t, &flags, "dyn-out2.jsonl");
    let arrivals: Vec<u64> = lines.iter().map(|l| l["arrival_ns"].as_u64().unwrap()).collect();
    assert_eq!(arrivals, vec![0, 120_000_000, 202_013_240]);
}

/// Every line its own one-turn session is an open loop: the closed-loop driver (steps in order
/// of start, stopping at completions) gives what the streamed Mooncake replay gives.
#[test]
fn one_turn_dynamo_sessions_under_the_batched_engine_equal_the_mooncake_replay() {
    let (mooncake, _) = mooncake_and_bailian(600);
    let dynamo: String =
        mooncake.lines().enumerate().map(|(i, l)| format!("{{\"session_id\": \"s{i}\", {}\n", &l[1..])).collect();
    let (m, d) = (write("mc-d.jsonl", &mooncake), write("mc-as-dynamo.jsonl", &dynamo));
    for flags in [
        vec!["--pods", "4", "--capacity", "8192", "--router", "prefix-aware", "--alpha", "16"],
        vec!["--pods", "2", "--capacity", "7700", "--router", "least-loaded", "--max-num-seqs", "16"],
    ] {
        let flags = [&flags[..], &["--engine", "batched"]].concat();
        let (vm, om) = outcome_lines(&m, &flags, "eq-m.jsonl");
        let (vd, od) = outcome_lines(&d, &flags, "eq-d.jsonl");
        assert_eq!(vd["format"], "dynamo");
        // a Dynamo line adds its session and trace line (line i + 1 holds session s{i})
        let od: Vec<serde_json::Value> = od
            .into_iter()
            .map(|mut l| {
                let o = l.as_object_mut().unwrap();
                let (session, line) = (o.remove("session_id").unwrap(), o.remove("line").unwrap());
                assert_eq!(session, format!("s{}", line.as_u64().unwrap() - 1));
                l
            })
            .collect();
        assert_eq!(om, od, "{flags:?}");
        for (k, x) in vm.as_object().unwrap() {
            if k != "provenance" && k != "format" {
                assert_eq!(&vd[k], x, "{k} {flags:?}");
            }
        }
    }
}

#[test]
fn bad_lines_under_the_batched_engine_are_exit_2_naming_file_line_and_field() {
    let tok_ok = "{\"timestamp\": 5, \"token_ids\": [1], \"output_length\": 1}\n";
    let bai_ok = BAILIAN.lines().next().unwrap().to_string() + "\n";
    let dyn_ok = "{\"session_id\": \"s\", \"timestamp\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "tokens",
            format!("{tok_ok}{{\"timestamp\": 6, \"token_ids\": [1, -3], \"output_length\": 1}}"),
            ":2: field `token_ids[1]`",
        ),
        (
            "tokens",
            format!("{tok_ok}{{\"timestamp\": 6, \"token_ids\": [], \"output_length\": 1}}"),
            ":2: field `token_ids` (0 tokens, the prompt): expected at least 1 token",
        ),
        ("bailian", format!("{bai_ok}{}", bai_ok.replace("\"turn\": 1", "\"turn\": -1")), ":2: field `turn`"),
        (
            "bailian",
            bai_ok.replace("\"output_length\": 5", "\"output_length\": 99999999"),
            ":1: request field `output_length`: expected at most 16777216",
        ),
        (
            "dynamo",
            format!("{dyn_ok}{}", dyn_ok.replace("\"output_length\": 1, ", "")),
            ":2: missing field `output_length`",
        ),
        (
            "dynamo",
            format!("{dyn_ok}{}", dyn_ok.replace("\"timestamp\": 5, ", "\"delay\": 1, \"input_length\": 0, ")),
            ":2: request field `input_length`: expected at least 1 token",
        ),
    ];
    for (i, (format, text, want)) in cases.iter().enumerate() {
        let name = format!("bad-batched{i}.jsonl");
        let p = write(&name, text);
        let (code, _, err) = replay(&p, &["--format", format, "--engine", "batched"]);
        assert_eq!(code, 2, "{format} case {i}: {err}");
        assert!(err.contains(&format!("{name}{want}")), "{format} case {i}: {err}");
    }
    // The batched engine's flags are checked as for Mooncake.
    let p = write("bai-batched-stale.jsonl", BAILIAN);
    let (code, _, err) = replay(&p, &["--engine", "batched", "--stale", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("--stale: expected 0 with --engine batched (its index is exact)"), "{err}");
    let (code, _, err) = replay(&p, &["--outcomes", "x.jsonl"]);
    assert_eq!(code, 2);
    assert!(err.contains("--outcomes: only with --engine batched"), "{err}");
}

#[test]
fn seconds_become_ns_exactly_rounding_half_up() {
    use brokerlab::fleet::input::formats::decimal_to_ns;
    assert_eq!(decimal_to_ns("61.114", 9), Some(61_114_000_000));
    assert_eq!(decimal_to_ns("0.1", 9), Some(100_000_000));
    assert_eq!(decimal_to_ns("1e-9", 9), Some(1));
    assert_eq!(decimal_to_ns("0.0000000005", 9), Some(1), "half rounds up");
    assert_eq!(decimal_to_ns("0.00000000049", 9), Some(0));
    assert_eq!(decimal_to_ns("2.0000000015", 9), Some(2_000_000_002));
    assert_eq!(decimal_to_ns("1.5E3", 6), Some(1_500_000_000));
    assert_eq!(decimal_to_ns("18446744073.709551615", 9), Some(u64::MAX));
    assert_eq!(decimal_to_ns("18446744073.709551616", 9), None);
    for bad in ["-1", "1.", ".5", "x", "1e", "", "1e99999999"] {
        assert_eq!(decimal_to_ns(bad, 9), None, "{bad}");
    }
}

#[test]
fn a_dynamo_trace_beyond_the_memory_budget_is_refused_while_reading() {
    let ids: Vec<String> = (0..200).map(|i| i.to_string()).collect();
    let line = format!("{{\"session_id\": \"s\", \"output_length\": 1, \"hash_ids\": [{}]}}\n", ids.join(", "));
    let t = write("dynamo-big.jsonl", &line.repeat(2000)); // 2000 turns x 200 ids: 3.2 MB held
    let (code, _, err) = replay(&t, &["--max-memory", "2M"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("reading the Dynamo trace") && err.contains("--max-memory"), "{err}");
    // Under a budget that fits, it runs: every turn after the first hits its 200 x 32 blocks.
    let v = replay_ok(&t, &["--max-memory", "64M", "--capacity", "8000"]);
    assert_eq!(v["hit_tokens"], 1999 * 200 * 512);
}
