//! The batched engine on the host: the real trace step by step against fast-forward and over the
//! per-block KV pool (and the core's debug invariants on every step), the CLI's flags, keys and
//! bad input.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::Command;

use brokerlab::fleet::run::TraceSource;
use brokerlab::fleet::run::{Batched, simulate};
use brokerlab_core::fleet::{BatchedConfig, FleetConfig, Profile, RouterKind};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_brokerlab"))
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("brokerlab-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The first `n` lines of a vendored trace (traces/NAME.zst), as a file.
fn head(name: &str, n: usize) -> (PathBuf, u64) {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces").join(format!("{name}.zst"));
    let f = brokerlab::fleet::input::file::open(&src).expect("vendored trace");
    let mut out = String::new();
    let mut outputs = 0u64;
    for line in f.lines().take(n) {
        let line = line.unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        outputs += v["output_length"].as_u64().unwrap().max(1);
        out.push_str(&line);
        out.push('\n');
    }
    (tmp(&format!("head-{n}-{name}"), &out), outputs)
}

#[test]
fn conversation_head_fast_forward_equals_step_by_step() {
    // 2,000 requests, 8 pods of 8,192 blocks (preemptions happen), both routers. Debug builds
    // check the invariants after every step.
    let (path, outputs) = head("conversation_trace.jsonl", 2000);
    for router in [RouterKind::RoundRobin, RouterKind::PrefixAware] {
        let e = BatchedConfig::new(Profile::Qwen3_32bH100x2);
        let cfg = |fast_forward, block_runs| {
            let e = BatchedConfig { fast_forward, block_runs, ..e };
            FleetConfig { alpha: 16.0, ..FleetConfig::batched(8, 8192, router, e) }
        };
        let mut src = TraceSource::new(path.clone(), 512);
        let slow = simulate::<Batched>(cfg(false, true), &mut src, true).unwrap();
        let fast = simulate::<Batched>(cfg(true, true), &mut src, true).unwrap();
        assert_eq!(slow.summary, fast.summary, "{router:?}");
        assert_eq!(slow.completions, fast.completions, "{router:?}");
        // the per-block KV pool, the oracle of the run-at-a-time pool
        let blocks = simulate::<Batched>(cfg(true, false), &mut src, true).unwrap();
        assert_eq!(blocks.summary, fast.summary, "{router:?}: per-block pool");
        assert_eq!(blocks.completions, fast.completions, "{router:?}: per-block pool");
        let s = &fast.summary;
        assert_eq!(s.requests, 2000);
        assert_eq!(fast.completions.len(), 2000);
        let mut ids: Vec<u64> = fast.completions.iter().map(|c| c.request).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 2000, "each request finishes once");
        assert_eq!(s.output_tokens, outputs, "tokens produced = output lengths");
        assert_eq!(s.itl_samples, outputs - 2000, "one ITL sample per token after the first");
        eprintln!("{router:?}: preemptions {} steps {} ttft p90 {:?}", s.preemptions, s.steps, s.ttft_p90);
        assert!(s.preemptions > 0, "the case must exercise preemption");
    }
}

const GOOD: &str = "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 3, \"hash_ids\": [1]}\n";

fn replay(trace: &PathBuf, flags: &[&str]) -> (i32, String, String) {
    let out = bin()
        .args(["fleet", "replay", "--trace"])
        .arg(trace)
        .args(["--pods", "2", "--capacity", "16", "--router", "prefix-aware"])
        .args(flags)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn batched_json_has_the_documented_keys() {
    let t = tmp("good.jsonl", &format!("{GOOD}{GOOD}"));
    let (code, out, err) = replay(&t, &["--engine", "batched", "--profile", "seed", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for k in [
        "engine",
        "max_num_seqs",
        "max_num_batched_tokens",
        "profile",
        "t_overhead_ns",
        "t_prefill_token_ns",
        "t_decode_seq_ns",
        "t_kv_token_ns",
        "ttft_p50",
        "ttft_p90",
        "ttft_p99",
        "ttft_mean",
        "ttft_ns_p90",
        "e2e_p50",
        "e2e_p90",
        "e2e_p99",
        "e2e_mean",
        "e2e_ns_p90",
        "latency_p90",
        "latency_ns_p90",
        "itl_p50",
        "itl_p90",
        "itl_p99",
        "itl_ns_p90",
        "itl_samples",
        "output_tokens",
        "output_tok_per_s",
        "prefill_tokens",
        "prefill_tok_per_s",
        "hit_tokens",
        "hit_rate",
        "preemptions",
        "per_pod_preemptions",
        "steps",
        "per_pod_steps",
        "per_pod_kv_util_mean",
        "per_pod_kv_util_peak",
        "kv_util_mean",
        "kv_util_peak",
        "mean_waiting",
        "per_pod_requests",
        "per_pod_max_queue",
    ] {
        assert!(v.get(k).is_some(), "missing key {k}");
    }
    // Seed profile: 1 ns + 40 x 50 us prefill, then 2 decode steps of 1 ns.
    assert_eq!(v["engine"], "batched");
    assert_eq!(v["ttft_ns_p90"], 2_000_001);
    assert_eq!(v["e2e_ns_p90"], 2_000_003);
    assert_eq!(v["output_tokens"], 6);
    assert_eq!(v["itl_samples"], 4);
}

#[test]
fn fifo_flag_is_the_default_output() {
    let t = tmp("good2.jsonl", &format!("{GOOD}{GOOD}"));
    let (c1, a, _) = replay(&t, &["--json"]);
    let (c2, b, _) = replay(&t, &["--json", "--engine", "fifo"]);
    assert_eq!((c1, c2), (0, 0));
    // the results, apart from the provenance (its command line differs by `--engine fifo`)
    let results = |s: &str| {
        let mut v: serde_json::Value = serde_json::from_str(s).unwrap();
        v.as_object_mut().unwrap().remove("provenance").expect("provenance");
        v
    };
    assert_eq!(results(&a), results(&b));
    assert!(!a.contains("\"engine\""));
}

#[test]
fn bad_engine_input_is_exit_2_naming_the_flag() {
    let t = tmp("good3.jsonl", GOOD);
    let big = tmp("big.jsonl", "{\"timestamp\": 0, \"input_length\": 300, \"output_length\": 1, \"hash_ids\": [1]}\n");
    for (flags, needle) in [
        (vec!["--engine", "batched", "--max-num-seqs", "0"], "--max-num-seqs"),
        (vec!["--engine", "batched", "--max-num-seqs", "20000", "--max-num-batched-tokens", "100"], "--max-num-seqs"),
        (vec!["--engine", "batched", "--max-num-batched-tokens", "0"], "--max-num-batched-tokens"),
        (vec!["--engine", "batched", "--t-overhead-ns", "0"], "--t-overhead-ns"),
        (vec!["--engine", "batched", "--profile", "h200"], "--profile"),
        (vec!["--max-num-seqs", "8"], "--max-num-seqs"),
        (vec!["--engine", "fifo", "--t-kv-token-ns", "8"], "--t-kv-token-ns"),
        (vec!["--engine", "batched", "--stale", "2"], "--stale"),
        (vec!["--engine", "batched", "--index", "global"], "--index"),
        // --cpu-capacity is the batched engine's offload tier; its other flags are checked
        (vec!["--engine", "batched", "--cpu-capacity", "8", "--cpu-tier-weight", "1.5"], "--cpu-tier-weight"),
        (vec!["--engine", "fifo", "--prefill-pods", "1"], "--prefill-pods"),
        (vec!["--engine", "fifo", "--pcie-bytes-per-s", "8"], "--pcie-bytes-per-s"),
        (vec!["--engine", "turbo"], "--engine"),
    ] {
        let (code, _, err) = replay(&t, &flags);
        assert_eq!(code, 2, "{flags:?}: {err}");
        assert!(err.contains(needle), "{flags:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // 300 tokens do not fit in 16 blocks = 256 tokens: the line and the field are named.
    let (code, _, err) = replay(&big, &["--engine", "batched"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("big.jsonl:1:") && err.contains("input_length"), "{err}");
}

fn scenario(engine: &str) -> String {
    format!(
        "[workload]\nrequests = 50\ntenants = 2\nprefix_tokens = 64\nsuffix_tokens = [16, 32]\noutput_tokens = [4, 8]\nrate_per_s = 100.0\n\n[fleet]\npods = 2\ncapacity = 64\nrouter = \"prefix-aware\"\n{engine}"
    )
}

#[test]
fn scenario_engine_table() {
    let good = tmp("sc-good.toml", &scenario("[fleet.engine]\nprofile = \"llama-3.1-8b-h100\"\nmax_num_seqs = 8\n"));
    let out = bin().args(["fleet", "run"]).arg(&good).arg("--json").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["engine"].as_str(), v["max_num_seqs"].as_u64()), (Some("batched"), Some(8)));
    assert_eq!(v["t_overhead_ns"], 5_752_710);
    // A flag overrides the scenario's key; --engine fifo ignores the table.
    let out = bin().args(["fleet", "run"]).arg(&good).args(["--json", "--max-num-seqs", "4"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["max_num_seqs"], 4);
    let out = bin().args(["fleet", "run"]).arg(&good).args(["--json", "--engine", "fifo"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("engine").is_none());
    for (table, needle) in [
        ("[fleet.engine]\nmax_num_seq = 8\n", "max_num_seq"),
        ("[fleet.engine]\nmax_num_seqs = 0\n", "fleet.engine.max_num_seqs"),
        ("[fleet.engine]\nmodel = \"turbo\"\n", "fleet.engine.model"),
        ("[fleet.engine]\nprofile = \"h200\"\n", "fleet.engine.profile"),
        ("stale = 3\n[fleet.engine]\n", "fleet.stale"),
    ] {
        let p = tmp("sc-bad.toml", &scenario(table));
        let out = bin().args(["fleet", "run"]).arg(&p).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{table}: {err}");
        assert!(err.contains(needle), "{table}: {err}");
    }
    let _ = std::io::stdout().flush();
}

#[test]
fn output_lengths_from_a_list_keep_the_other_draws() {
    use brokerlab::fleet::scenario::{Generated, Scenario};
    let base = scenario("");
    let list = base.replace("output_tokens = [4, 8]", "output_tokens_choices = [1, 100, 1000]");
    let a = Generated::new(Scenario::parse(&base, "base", "base").unwrap().workload).unwrap();
    let b = Generated::new(Scenario::parse(&list, "list", "list").unwrap().workload).unwrap();
    let outs: std::collections::BTreeSet<u64> = b.requests.iter().map(|r| r.2).collect();
    assert_eq!(outs.into_iter().collect::<Vec<_>>(), vec![1, 100, 1000]);
    // One draw either way: arrivals, tenants and prompts are the same.
    assert_eq!(a.keys, b.keys);
    let strip = |g: &Generated| g.requests.iter().map(|r| (r.0, r.1, r.3)).collect::<Vec<_>>();
    assert_eq!(strip(&a), strip(&b));
    for (text, needle) in [
        (list.replace("output_tokens_choices", "output_tokens = [1, 2]\noutput_tokens_choices"), "both"),
        (base.replace("output_tokens = [4, 8]", "output_tokens_choices = []"), "1 to 16"),
    ] {
        let err = Scenario::parse(&text, "x", "x").unwrap_err();
        let msg = err.to_string();
        assert_eq!(err.code(), 2);
        assert!(msg.contains("workload.output_tokens_choices") && msg.contains(needle), "{msg}");
    }
}

#[test]
fn a_full_request_ring_is_doubled_and_the_run_repeated() {
    // 3,000 requests at t = 0 on one pod: more than the 1,024 request slots the run starts with.
    let line = "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 2, \"hash_ids\": [7]}\n";
    let t = tmp("burst.jsonl", &line.repeat(3000));
    let out = bin()
        .args(["fleet", "replay", "--trace"])
        .arg(&t)
        .args(["--pods", "1", "--capacity", "64", "--router", "round-robin", "--engine", "batched", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["requests"], 3000);
    assert_eq!(v["output_tokens"], 6000);
    assert_eq!(v["per_pod_max_queue"][0], 2999);
}

/// `fleet sweep --engine batched`: every router at every value, the batched metrics in the CSV,
/// the same files for any thread count, and output tokens/s that follows the arrival rate while
/// the fleet keeps up.
#[test]
fn batched_sweep_over_the_rate() {
    let sc = tmp("sweep-batched.toml", &scenario(""));
    let run = |threads: &str, out: &str| {
        let out_dir = sc.with_file_name(out);
        let o = bin()
            .args(["fleet", "sweep"])
            .arg(&sc)
            .args(["--param", "rate", "--values", "5,10,20", "--engine", "batched", "--quiet", "--no-date"])
            .args(["--threads", threads, "--out"])
            .arg(&out_dir)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(out_dir.join("points.csv")).unwrap()
    };
    let csv = run("1", "sweep-b1");
    assert_eq!(csv, run("2", "sweep-b2"), "independent of the thread count");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 9, "3 routers x 3 rates");
    let rr: Vec<f64> = rows
        .iter()
        .filter(|r| r[col("router")] == "round-robin")
        .map(|r| r[col("output_tok_per_s")].parse().unwrap())
        .collect();
    assert_eq!(rr.len(), 3);
    assert!(rr[0] < rr[1] && rr[1] < rr[2], "output tok/s rises with the rate: {rr:?}");
    assert!(rows.iter().all(|r| !r[col("ttft_p90_s")].is_empty()), "{csv}");
}

/// Runs `fleet replay` of `trace` with exactly `flags`.
fn replay_bare(trace: &PathBuf, flags: &[&str]) -> (i32, String, String) {
    let out = bin().args(["fleet", "replay", "--trace"]).arg(trace).args(flags).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn linear_profiles_keep_their_results_byte_for_byte() {
    // host/tests/data/linear-golden/README.md: stdout and outcomes written before the physics
    // step cost reached the engine; the linear profiles, named or with --step-model linear, must
    // give the same bytes.
    let (trace, _) = head("conversation_trace.jsonl", 300);
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/linear-golden");
    for p in ["qwen3-32b-h100x2", "llama-3.1-8b-h100", "seed"] {
        let want = std::fs::read_to_string(golden.join(format!("{p}.json"))).unwrap();
        let want_sha = std::fs::read_to_string(golden.join(format!("{p}.outcomes.sha256"))).unwrap();
        for extra in [&[][..], &["--step-model", "linear"][..]] {
            let outcomes = tmp(&format!("golden-{p}-{}.jsonl", extra.len()), "");
            std::fs::remove_file(&outcomes).unwrap();
            let mut flags = vec!["--engine", "batched", "--profile", p, "--pods", "4", "--capacity", "8192"];
            flags.extend(["--router", "prefix-aware", "--json", "--no-date", "--outcomes", outcomes.to_str().unwrap()]);
            flags.extend(extra);
            let (code, out, err) = replay_bare(&trace, &flags);
            assert_eq!(code, 0, "{p} {extra:?}: {err}");
            let at = out.find("  \"engine\"").expect("the summary follows the provenance");
            assert_eq!(&out[at..], want, "{p} {extra:?}: stdout changed");
            let sha = brokerlab::fleet::cost::calibrate::sha256_hex(&std::fs::read(&outcomes).unwrap());
            assert_eq!(sha, want_sha.trim(), "{p} {extra:?}: outcomes changed");
        }
    }
}

#[test]
fn a_physics_profile_replays_the_vendored_trace_with_its_derived_capacity() {
    let (trace, outputs) = head("conversation_trace.jsonl", 1000);
    let run = |extra: &[&str]| {
        let mut flags = vec!["--engine", "batched", "--profile", "qwen3-32b-h100-tp2", "--pods", "4"];
        flags.extend(["--router", "prefix-aware", "--json", "--no-date"]);
        flags.extend(extra);
        let (code, out, err) = replay_bare(&trace, &flags);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let v = run(&[]);
    assert_eq!(v["profile"], "qwen3-32b-h100-tp2");
    assert_eq!(v["physics"]["step_model"], "physics");
    assert_eq!(v["physics"]["tp"], 2);
    // vLLM's rule on 2 x H100 with the published reserve: 19,221 blocks = 307,536 tokens
    // (docs/MODEL.md, "KV capacity of a pod"; llm-d measured 307,328).
    assert_eq!(v["capacity"], 19_221);
    assert_eq!(v["physics"]["kv_capacity_blocks_derived"], 19_221);
    assert!(v.get("t_overhead_ns").is_none(), "a physics run has no linear coefficients");
    assert_eq!(v["requests"], 1000);
    assert_eq!(v["output_tokens"], outputs);
    let ttft = v["ttft_p50"].as_f64().unwrap();
    let itl = v["itl_p50"].as_f64().unwrap();
    assert!(ttft > 0.0 && itl > 0.01 && itl < 0.2, "ttft {ttft} itl {itl}");
    // --capacity overrides the derived capacity; --step-model physics alone is the same profile.
    let w = run(&["--capacity", "8192"]);
    assert_eq!(w["capacity"], 8192);
    assert_eq!(w["physics"]["kv_capacity_blocks_derived"], 19_221);
    let d = run(&["--step-model", "physics"]);
    assert_eq!(d["ttft_p90"], v["ttft_p90"]);
    assert_eq!(d["e2e_p90"], v["e2e_p90"]);
}

#[test]
fn bad_step_model_input_is_exit_2_naming_the_flag_or_the_file() {
    let t = tmp("good-phys.jsonl", GOOD);
    let prof = tmp("bad-profile.toml", "tp = 2\n[model]\nlayers = 0\n");
    let no_cal = tmp("no-cal.toml", &{
        let mut s = String::from("tp = 1\n");
        s += "[model]\nlayers = 2\nhidden = 64\nheads = 4\nintermediate = 128\nvocab = 1000\n";
        s += "[gpu]\nflops_bf16 = 1e15\nhbm_bytes_per_s = 3e12\nmemory_bytes = 8e10\nlink_bytes_per_s = 4e11\npcie_bytes_per_s = 6e10\n";
        s += "[calibration]\ncompute_ppm = 0\nattention_ppm = 1\nmoe_ppm = 1\nmemory_ppm = 1\nlink_ppm = 1\n";
        s += "step_ns = 1\nrequest_ns = 0\nlayer_ns = 0\nallreduce_ns = 0\nreserve_bytes = 0\ngpu_memory_utilization_ppm = 900000\n";
        s
    });
    // a KV-cache factor past 100% (the key is optional; profiles before it leave it out)
    let bad_kv = tmp(
        "bad-kv.toml",
        &std::fs::read_to_string(&no_cal)
            .unwrap()
            .replace("compute_ppm = 0\n", "compute_ppm = 1\nkv_memory_ppm = 1000001\n"),
    );
    // a shared-prefix read factor past 1 (optional too: absent is off)
    let bad_shared = tmp(
        "bad-shared.toml",
        &std::fs::read_to_string(&no_cal)
            .unwrap()
            .replace("compute_ppm = 0\n", "compute_ppm = 1\nshared_kv_read_ppm = 1000001\n"),
    );
    let p = prof.to_str().unwrap();
    let n = no_cal.to_str().unwrap();
    let k = bad_kv.to_str().unwrap();
    let sh = bad_shared.to_str().unwrap();
    for (flags, needles) in [
        (
            vec!["--engine", "batched", "--profile", "seed", "--step-model", "physics", "--capacity", "16"],
            vec!["--profile", "linear", "--step-model"],
        ),
        (
            vec!["--engine", "batched", "--profile", "qwen3-32b-h100-tp2", "--t-overhead-ns", "5"],
            vec!["--t-overhead-ns", "physics"],
        ),
        (
            vec!["--engine", "batched", "--profile", "h100", "--capacity", "16"],
            vec!["--profile", "qwen3-32b-h100-tp2", "seed"],
        ),
        (vec!["--engine", "batched"], vec!["--capacity"]),
        (vec!["--capacity", "16", "--step-model", "physics"], vec!["--step-model", "only with --engine batched"]),
        (vec!["--engine", "batched", "--profile", p], vec!["bad-profile.toml", "missing field"]),
        (vec!["--engine", "batched", "--profile", n], vec!["no-cal.toml", "calibration.compute_ppm"]),
        (vec!["--engine", "batched", "--profile", k], vec!["bad-kv.toml", "calibration.kv_memory_ppm"]),
        (vec!["--engine", "batched", "--profile", sh], vec!["bad-shared.toml", "calibration.shared_kv_read_ppm"]),
        (vec!["--engine", "batched", "--profile", "missing.toml"], vec!["--profile", "missing.toml"]),
    ] {
        let mut all = vec!["--pods", "2", "--router", "round-robin"];
        all.extend(flags.iter().copied());
        let (code, _, err) = replay_bare(&t, &all);
        assert_eq!(code, 2, "{flags:?}: {err}");
        for needle in needles {
            assert!(err.contains(needle), "{flags:?}: {needle:?} not in {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `--shared-kv-read` (docs/MODEL.md "Shared-prefix reads"): off by default (`1` is the default's
/// output, byte for byte but the command line, and the summary names no factor), below 1 the
/// decodes of requests sharing a prefix on a pod get cheaper (the first 300 conversation requests
/// on 2 pods behind prefix-aware routing: ITL p50 falls with f), and the run names the factor;
/// bad values, a linear profile and the FIFO engine are exit 2 naming the flag.
#[test]
fn shared_kv_read_flag_is_off_by_default_and_cheapens_shared_decodes() {
    let (path, _) = head("conversation_trace.jsonl", 300);
    let go = |extra: &[&str]| {
        let out = bin()
            .args(["fleet", "replay", "--trace"])
            .arg(&path)
            .args(["--pods", "2", "--capacity", "8192", "--router", "prefix-aware", "--json"])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), err)
    };
    let phys = ["--engine", "batched", "--profile", "qwen3-32b-h100-tp2"];
    let run = |extra: &[&str]| {
        let flags: Vec<&str> = phys.into_iter().chain(extra.iter().copied()).collect();
        let (code, out, err) = go(&flags);
        assert_eq!(code, 0, "{flags:?}: {err}");
        let mut v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v.as_object_mut().unwrap().remove("provenance");
        v
    };
    let (default, one) = (run(&[]), run(&["--shared-kv-read", "1"]));
    assert_eq!(default, one);
    assert!(default["physics"].get("shared_kv_read_ppm").is_none(), "{}", default["physics"]);
    let (fit, zero) = (run(&["--shared-kv-read", "0.45"]), run(&["--shared-kv-read", "0"]));
    assert_eq!(fit["physics"]["shared_kv_read_ppm"], 450_000);
    assert_eq!(zero["physics"]["shared_kv_read_ppm"], 0);
    let itl = |v: &serde_json::Value| v["itl_p50"].as_f64().unwrap();
    assert!(itl(&default) > itl(&fit) && itl(&fit) > itl(&zero), "{} {} {}", itl(&default), itl(&fit), itl(&zero));
    for (flags, needles) in [
        (vec!["--shared-kv-read", "1.5"], vec!["--shared-kv-read", "between 0 and 1"]),
        (vec!["--shared-kv-read", "0.1234567"], vec!["--shared-kv-read", "six digits"]),
        (vec!["--shared-kv-read", "abc"], vec!["--shared-kv-read", "decimal"]),
        (vec!["--shared-kv-read=-0.5"], vec!["--shared-kv-read", "between 0 and 1"]),
    ] {
        let all: Vec<&str> = phys.into_iter().chain(flags.iter().copied()).collect();
        let (code, _, err) = go(&all);
        assert_eq!(code, 2, "{flags:?}: {err}");
        for needle in needles {
            assert!(err.contains(needle), "{flags:?}: {needle:?} not in {err}");
        }
    }
    let (code, _, err) = go(&["--engine", "batched", "--profile", "seed", "--shared-kv-read", "0.5"]);
    assert!(code == 2 && err.contains("--shared-kv-read") && err.contains("physics"), "{err}");
    let (code, _, err) = go(&["--shared-kv-read", "0.5"]);
    assert!(code == 2 && err.contains("--shared-kv-read") && err.contains("only with --engine batched"), "{err}");
}

/// `--reserve-full-isl` (vLLM's full-sequence admission gate, docs/MODEL.md "One step"): off by
/// default (`false` is the default's output), on it admits fewer requests at once, so a tight
/// fleet preempts less (the first 300 conversation requests on 2 pods of 8,192 blocks: 136
/// preemptions without, 3 with); the FIFO engine refuses it.
#[test]
fn reserve_full_isl_flag_is_off_by_default_and_gates_admission() {
    let (path, _) = head("conversation_trace.jsonl", 300);
    let go = |extra: &[&str]| {
        let out = bin()
            .args(["fleet", "replay", "--trace"])
            .arg(&path)
            .args(["--pods", "2", "--capacity", "8192", "--router", "round-robin", "--json"])
            .args(extra)
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let run = |extra: &[&str]| {
        let flags: Vec<&str> = ["--engine", "batched"].into_iter().chain(extra.iter().copied()).collect();
        let (code, out) = go(&flags);
        assert_eq!(code, 0, "{flags:?}");
        let mut v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v.as_object_mut().unwrap().remove("provenance");
        v
    };
    let (default, off, on) = (run(&[]), run(&["--reserve-full-isl", "false"]), run(&["--reserve-full-isl", "true"]));
    assert_eq!(default, off);
    let pre = |v: &serde_json::Value| v["preemptions"].as_u64().unwrap();
    assert_eq!((pre(&off), pre(&on)), (136, 3));
    assert_eq!(go(&["--reserve-full-isl", "true"]).0, 2, "the FIFO engine refuses the flag");
}
