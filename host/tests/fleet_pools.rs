//! Heterogeneous pools (`[[fleet.pool]]`; docs/MODEL.md, "Heterogeneous pools"): one pool is the
//! fleet without pools byte for byte; P/D written as two pools is `[fleet.pd]`'s short form byte
//! for byte; each pool's step cost is its own (exact step times); routing reads each pod's own
//! capacity; bad pool keys exit 2 naming the key.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("brokerlab-pools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn brokerlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brokerlab")).args(args).output().expect("brokerlab starts")
}

/// `fleet run --json` of scenario text `sc` with `args`: the JSON summary and the `--outcomes`
/// file's bytes.
fn run(name: &str, sc: &str, args: &[&str]) -> (Value, String) {
    let p = tmp(&format!("{name}.toml"));
    std::fs::write(&p, sc).unwrap();
    let out = tmp(&format!("{name}.outcomes"));
    let mut a = vec!["fleet", "run", "--json", "-q", "--no-date", "--outcomes", out.to_str().unwrap()];
    a.extend_from_slice(args);
    a.push(p.to_str().unwrap());
    let o = brokerlab(&a);
    assert!(o.status.success(), "{name} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    let outcomes = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&p).ok();
    std::fs::remove_file(&out).ok();
    (serde_json::from_slice(&o.stdout).unwrap(), outcomes)
}

/// The summary without what names the input file (`provenance`) and without `per_pool`, as text.
fn comparable(v: &Value) -> String {
    let mut v = v.clone();
    let m = v.as_object_mut().unwrap();
    m.remove("provenance");
    m.remove("per_pool");
    serde_json::to_string(&v).unwrap()
}

/// A batched scenario with tight pods (preemptions) and shared prefixes (hits), `fleet` the
/// `[fleet]` table's body and `rest` the tables after `[fleet.engine]`.
fn scenario(fleet: &str, engine: &str, rest: &str) -> String {
    format!(
        "name = \"pools-test\"\n\n[workload]\nseed = 5\nrequests = 240\ntenants = 6\nusers_per_tenant = 4\n\
         prefix_tokens = 512\nsuffix_tokens = [32, 256]\noutput_tokens = [8, 96]\npopularity = \"zipf:0.8\"\n\
         rate_per_s = 40.0\n\n[fleet]\n{fleet}\n\n[fleet.engine]\n{engine}\n{rest}"
    )
}

const ENGINE: &str = "profile = \"llama-3.1-8b-h100\"\nmax_num_seqs = 16\nmax_num_batched_tokens = 1024\n";

/// One pool holding every pod is the fleet without pools: the same `--json` (but `per_pool`)
/// and the same `--outcomes` bytes, for routers that read queues, caches and load signals.
#[test]
fn one_pool_is_the_fleet_without_pools() {
    let plain = scenario("pods = 4\ncapacity = 96\nrouter = \"prefix-aware\"\nalpha = 1.0", ENGINE, "");
    let pooled = scenario(
        "capacity = 96\nrouter = \"prefix-aware\"\nalpha = 1.0",
        ENGINE,
        "\n[[fleet.pool]]\nname = \"all\"\npods = 4\n",
    );
    for router in [&[][..], &["--router", "round-robin"][..], &["--router", "llm-d-precise"][..]] {
        let (a, oa) = run("plain", &plain, router);
        let (b, ob) = run("pooled", &pooled, router);
        assert!(a.get("per_pool").is_none(), "no per_pool without pools");
        assert!(a["preemptions"].as_u64().unwrap() > 0, "{router:?}: the case has preemptions");
        assert!(a["hit_tokens"].as_u64().unwrap() > 0, "{router:?}: the case has hits");
        assert_eq!(comparable(&a), comparable(&b), "{router:?}");
        assert_eq!(oa, ob, "{router:?}: --outcomes bytes");
        let pools = b["per_pool"].as_array().unwrap();
        assert_eq!(pools.len(), 1);
        assert_eq!(pools[0]["name"], "all");
        assert_eq!(pools[0]["requests"], a["requests"]);
        assert_eq!(pools[0]["decoded"], a["requests"]);
        assert_eq!(pools[0]["ttft_p90"], a["ttft_p90"]);
        assert_eq!(pools[0]["e2e_p50"], a["e2e_p50"]);
        assert_eq!(pools[0]["steps"], a["steps"]);
        assert_eq!(pools[0]["preemptions"], a["preemptions"]);
        assert_eq!(pools[0]["kv_util_mean"], a["kv_util_mean"]);
    }
}

/// P/D as two pools (a prefill pool with its own profile and capacity, a decode pool) is
/// `[fleet.pd]`'s short form byte for byte.
#[test]
fn pd_as_pools_is_the_short_form() {
    let short = scenario(
        "pods = 4\ncapacity = 128\nrouter = \"prefix-aware\"",
        ENGINE,
        "\n[fleet.pd]\nprefill_pods = 1\nprefill_capacity = 200\nprefill_profile = \"qwen3-32b-h100x2\"\n\
         decider = \"prefix-threshold\"\nthreshold_tokens = 64\n",
    );
    let pooled = scenario(
        "capacity = 128\nrouter = \"prefix-aware\"",
        ENGINE,
        "\n[fleet.pd]\ndecider = \"prefix-threshold\"\nthreshold_tokens = 64\n\n\
         [[fleet.pool]]\nname = \"p\"\npods = 1\nrole = \"prefill\"\ncapacity = 200\nprofile = \"qwen3-32b-h100x2\"\n\n\
         [[fleet.pool]]\nname = \"d\"\npods = 3\nrole = \"decode\"\n",
    );
    for router in [&[][..], &["--router", "round-robin"][..]] {
        let (a, oa) = run("pd-short", &short, router);
        let (b, ob) = run("pd-pooled", &pooled, router);
        assert!(a["disaggregated"].as_u64().unwrap() > 0, "{router:?}: some requests disaggregate");
        assert_eq!(comparable(&a), comparable(&b), "{router:?}");
        assert_eq!(oa, ob, "{router:?}: --outcomes bytes");
        let pools = b["per_pool"].as_array().unwrap();
        assert_eq!((pools[0]["role"].as_str(), pools[1]["role"].as_str()), (Some("prefill"), Some("decode")));
        assert_eq!(pools[0]["decoded"], 0, "the prefill pool decodes nothing");
        assert_eq!(pools[1]["decoded"], a["requests"]);
        assert_eq!(pools[0]["capacity"], 200);
        assert_eq!(pools[0]["profile"], "qwen3-32b-h100x2");
    }
}

/// Each pool's step cost is its own: two requests at t = 0, round-robin, one per pod, each alone
/// on its pod: TTFT = one prefill step of its pool's profile, exactly (docs/MODEL.md, "One step":
/// t_overhead + t_prefill_token x L). A physics A100 pool is slower than an H100 pool likewise.
#[test]
fn a_slower_pool_takes_longer_steps() {
    let sc = |pools: &str| {
        format!(
            "[workload]\nseed = 1\nrequests = 2\ntenants = 2\nprefix_tokens = 1000\nsuffix_tokens = [64, 64]\n\
             output_tokens = [4, 4]\nrate_per_s = 0\n\n[fleet]\ncapacity = 4096\nrouter = \"round-robin\"\n\n\
             [fleet.engine]\nprofile = \"llama-3.1-8b-h100\"\n{pools}"
        )
    };
    let (s, outcomes) = run(
        "slow-linear",
        &sc(
            "\n[[fleet.pool]]\nname = \"fast\"\npods = 1\n\n[[fleet.pool]]\nname = \"slow\"\npods = 1\nprofile = \"qwen3-32b-h100x2\"\n",
        ),
        &[],
    );
    let lines: Vec<Value> = outcomes.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    for l in &lines {
        let input = l["hit_tokens"].as_u64().unwrap() + l["prefill_tokens"].as_u64().unwrap();
        assert_eq!(input, 1064);
        let want = match l["pod"].as_u64().unwrap() {
            // llama-3.1-8b-h100: 5,752,710 + 17,251 x L; qwen3-32b-h100x2: 12,601,270 + 61,244 x L
            0 => 5_752_710 + 17_251 * 1064,
            1 => 12_601_270 + 61_244 * 1064,
            p => panic!("pod {p}"),
        };
        assert_eq!(l["ttft_ns"].as_u64(), Some(want), "{l}");
    }
    let pools = s["per_pool"].as_array().unwrap();
    // unwrapped first: a missing value fails (None < Some(x) would pass silently)
    let p50 = |i: usize, k: &str| pools[i][k].as_f64().unwrap_or_else(|| panic!("pool {i} {k}: {}", pools[i]));
    assert!(p50(1, "ttft_p50") > p50(0, "ttft_p50"), "slow pool's TTFT p50 over the fast one's");
    assert!(p50(1, "e2e_p50") > p50(0, "e2e_p50"), "slow pool's E2E p50 over the fast one's");
    // the physics profiles of one model on two GPUs: the A100's steps are longer
    let (s, _) = run(
        "slow-physics",
        &sc("\n[[fleet.pool]]\nname = \"h100\"\npods = 1\nprofile = \"llama-3.1-8b-h100-tp1\"\n\n\
             [[fleet.pool]]\nname = \"a100\"\npods = 1\nprofile = \"llama-3.1-8b-a100-tp1\"\n"),
        &[],
    );
    let pools = s["per_pool"].as_array().unwrap();
    assert_eq!(pools[1]["profile"], "llama-3.1-8b-a100-tp1");
    let (h, a) = (pools[0]["ttft_p50"].as_f64().unwrap(), pools[1]["ttft_p50"].as_f64().unwrap());
    assert!(a > h * 1.2, "A100 {a} s vs H100 {h} s");
}

/// A router that reads KV utilization sees each pod's own fraction: with a kv-cache-utilization
/// scorer alone, a pod of 100 x the blocks takes nearly every request (its fraction stays far
/// lower); with equal capacities the two pods share them.
#[test]
fn routing_reads_each_pods_own_capacity() {
    let rc = tmp("kv-util.toml");
    std::fs::write(
        &rc,
        "policy = \"pipeline\"\npicker = \"max-score-lowest-index\"\n\n[[scorers]]\ntype = \"kv-cache-utilization\"\nweight = 1.0\n",
    )
    .unwrap();
    let sc = |small: u32| {
        format!(
            "[workload]\nseed = 3\nrequests = 40\ntenants = 40\nprefix_tokens = 512\nsuffix_tokens = [64, 64]\n\
             output_tokens = [400, 400]\nrate_per_s = 20\n\n[fleet]\ncapacity = 20000\n\n\
             [fleet.engine]\nprofile = \"llama-3.1-8b-h100\"\n\n\
             [[fleet.pool]]\nname = \"small\"\npods = 1\ncapacity = {small}\n\n[[fleet.pool]]\nname = \"big\"\npods = 1\n"
        )
    };
    let rc_arg = ["--router-config", rc.to_str().unwrap()];
    let (s, _) = run("kv-hetero", &sc(200), &rc_arg);
    let pools = s["per_pool"].as_array().unwrap();
    let (small, big) = (pools[0]["requests"].as_u64().unwrap(), pools[1]["requests"].as_u64().unwrap());
    assert_eq!(small + big, 40);
    assert!(big >= 30, "small {small}, big {big}: the big pod's own fraction is lower");
    let (s, _) = run("kv-equal", &sc(20000), &rc_arg);
    let pools = s["per_pool"].as_array().unwrap();
    let (small, big) = (pools[0]["requests"].as_u64().unwrap(), pools[1]["requests"].as_u64().unwrap());
    assert!(small >= 12 && big >= 12, "equal capacities share: {small} / {big}");
    std::fs::remove_file(&rc).ok();
}

/// Bad pool keys and combinations exit 2 naming the key.
#[test]
fn bad_pool_keys_exit_2_naming_the_key() {
    let base = |pools: &str, fleet_extra: &str, engine: bool| {
        format!(
            "[workload]\nrequests = 4\ntenants = 1\nprefix_tokens = 32\nsuffix_tokens = [16, 16]\nrate_per_s = 1\n\n\
             [fleet]\ncapacity = 64\n{fleet_extra}\n{}{pools}",
            if engine { "\n[fleet.engine]\nprofile = \"seed\"\n" } else { "" }
        )
    };
    let one = "\n[[fleet.pool]]\nname = \"a\"\npods = 2\n";
    let cases: Vec<(String, &[&str], &str)> = vec![
        (base(&format!("{one}capacityy = 3\n"), "", true), &[], "capacityy"),
        (base(&format!("{one}role = \"both\"\n"), "", true), &[], "`fleet.pool[1].role`"),
        (base("\n[[fleet.pool]]\nname = \"a\"\npods = 0\n", "", true), &[], "`fleet.pool[1].pods`"),
        (base(&format!("{one}{one}"), "", true), &[], "`fleet.pool[2].name`"),
        (base(&format!("{one}capacity = 0\n"), "", true), &[], "`fleet.pool[1].capacity`"),
        (base(&format!("{one}max_num_seqs = 0\n"), "", true), &[], "`fleet.pool[1].max_num_seqs`"),
        (base(&format!("{one}profile = \"nope\"\n"), "", true), &[], "`fleet.pool[1].profile`"),
        (base(&format!("{one}step_model = \"nope\"\n"), "", true), &[], "`fleet.pool[1].step_model`"),
        (
            base(&format!("{one}pcie_bytes_per_s = 0\ncpu_capacity = 4\n"), "", true),
            &[],
            "`fleet.pool[1].pcie_bytes_per_s`",
        ),
        (base(one, "pods = 3", true), &[], "`fleet.pods`"),
        (base(one, "", false), &[], "`fleet.pool`"),
        (base(one, "", true), &["--engine", "fifo"], "`fleet.pool`"),
        (base(one, "", true), &["--pods", "5"], "pods"),
        (
            base(
                "\n[[fleet.pool]]\nname = \"d\"\npods = 1\nrole = \"decode\"\n\n[[fleet.pool]]\nname = \"p\"\npods = 1\nrole = \"prefill\"\n",
                "",
                true,
            ),
            &[],
            "`fleet.pool`",
        ),
        (base("\n[[fleet.pool]]\nname = \"p\"\npods = 1\nrole = \"prefill\"\n", "", true), &[], "`fleet.pool`"),
        (
            base(
                "\n[[fleet.pool]]\nname = \"p\"\npods = 1\nrole = \"prefill\"\n\n[[fleet.pool]]\nname = \"a\"\npods = 1\n",
                "",
                true,
            ),
            &[],
            "`fleet.pool`",
        ),
        (
            base(
                "\n[fleet.pd]\nprefill_capacity = 8\n\n[[fleet.pool]]\nname = \"p\"\npods = 1\nrole = \"prefill\"\n\n[[fleet.pool]]\nname = \"d\"\npods = 1\nrole = \"decode\"\n",
                "",
                true,
            ),
            &[],
            "`fleet.pd.prefill_capacity`",
        ),
        (
            base(
                "\n[fleet.pd]\nprefill_pods = 2\n\n[[fleet.pool]]\nname = \"p\"\npods = 1\nrole = \"prefill\"\n\n[[fleet.pool]]\nname = \"d\"\npods = 2\nrole = \"decode\"\n",
                "",
                true,
            ),
            &[],
            "`fleet.pd.prefill_pods`",
        ),
        (base("", "", true), &[], "`fleet.pods`"),
    ];
    for (i, (sc, args, key)) in cases.iter().enumerate() {
        let p = tmp(&format!("bad-{i}.toml"));
        std::fs::write(&p, sc).unwrap();
        let mut a = vec!["fleet", "run", "-q"];
        a.extend_from_slice(args);
        a.push(p.to_str().unwrap());
        let o = brokerlab(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "case {i} ({key}): {err}\n{sc}");
        assert!(err.contains(key), "case {i}: expected {key} in: {err}");
        assert!(!err.contains("panicked"), "case {i}: {err}");
        std::fs::remove_file(&p).ok();
    }
    // a request over the smallest pool's capacity is refused wherever it would be routed
    let sc = base(
        "\n[[fleet.pool]]\nname = \"big\"\npods = 1\n\n[[fleet.pool]]\nname = \"tiny\"\npods = 1\ncapacity = 2\n",
        "",
        true,
    );
    let p = tmp("over.toml");
    std::fs::write(&p, sc).unwrap();
    let o = brokerlab(&["fleet", "run", "-q", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("input_length"));
    std::fs::remove_file(&p).ok();
}

/// The example scenario runs, and `fleet sweep` and `fleet compare` take a scenario with pools.
#[test]
fn the_example_runs_under_run_sweep_and_compare() {
    let sc = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/mixed-h100-a100.toml");
    let o = brokerlab(&["fleet", "run", "--json", "-q", "--no-date", sc]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    let pools = s["per_pool"].as_array().unwrap();
    assert_eq!((pools[0]["pods"].as_u64(), pools[1]["pods"].as_u64()), (Some(8), Some(4)));
    assert_eq!(s["pods"], 12);
    let total: u64 = pools.iter().map(|p| p["requests"].as_u64().unwrap()).sum();
    assert_eq!(total, s["requests"].as_u64().unwrap());
    let out = tmp("sweep");
    let o = brokerlab(&[
        "fleet",
        "sweep",
        "-q",
        sc,
        "--param",
        "rate",
        "--values",
        "15,30",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "sweep: {}", String::from_utf8_lossy(&o.stderr));
    // every pool sets its own capacity, so a capacity sweep would move nothing: refused, naming
    // the pools' key
    let o = brokerlab(&["fleet", "sweep", "-q", sc, "--param", "capacity", "--values", "8192,16384"]);
    assert_eq!(o.status.code(), Some(2), "capacity sweep over pools that set their own");
    assert!(String::from_utf8_lossy(&o.stderr).contains("fleet.pool[i].capacity"));
    let out = tmp("compare");
    let o = brokerlab(&[
        "fleet",
        "compare",
        "-q",
        sc,
        "--routers",
        "round-robin,prefix-aware",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "compare: {}", String::from_utf8_lossy(&o.stderr));
}

/// The pool table is stored once (a borrowed slice in the fleet's configuration), never copied
/// into each pod's engine: an engine holds one engine configuration, as without pools, and the
/// fleet's configuration does not grow with the pools (an inline table of 8 pools' step costs,
/// ~3.8 KB, would fail both bounds; on the Cortex-M3 it overflowed the stack).
#[test]
fn pod_engines_and_the_fleet_config_do_not_hold_the_pool_table() {
    use brokerlab_core::fleet::{BatchedConfig, BatchedEngine, FleetConfig, Pool};
    use std::mem::size_of;
    let e = size_of::<BatchedConfig>();
    assert!(
        size_of::<BatchedEngine<'static>>() < e + 1024,
        "engine {} vs config {e}",
        size_of::<BatchedEngine<'static>>()
    );
    assert!(size_of::<FleetConfig>() < e + 1024, "fleet config {} vs engine config {e}", size_of::<FleetConfig>());
    assert!(8 * size_of::<Pool>() > 2048, "the bounds above would catch an inline table");
}

/// `fleet replay --json` of `trace` with `args`: (exit code, JSON, stderr).
fn replay(trace: &std::path::Path, args: &[&str]) -> (Option<i32>, Value, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "-q", "--no-date", "--json", "--trace-block-size", "16", "--trace"])
        .arg(trace)
        .args(args)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o.status.code(), v, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The pools of a two-pool fleet whose second pool is slower and smaller, as `[[fleet.pool]]`
/// tables (for a scenario or a `--pools` file).
const TWO_POOLS: &str = "\n[[fleet.pool]]\nname = \"fast\"\npods = 3\n\n\
    [[fleet.pool]]\nname = \"slow\"\npods = 2\nprofile = \"qwen3-32b-h100x2\"\ncapacity = 64\nmax_num_seqs = 8\n";

/// `fleet replay --pools FILE` is the scenario's `[[fleet.pool]]` for a trace: the trace that
/// `fleet gen-trace` writes of a scenario with pools, replayed over the same pools from a file
/// with the scenario's fleet as flags, gives the scenario's run (every figure, per pool too, and
/// the `--outcomes` bytes). One pool of every pod is the replay without pools; the file's digest
/// is in the provenance.
#[test]
fn replay_over_pools_from_a_file_is_the_scenario_run() {
    let sc = scenario("capacity = 96\nrouter = \"prefix-aware\"\nalpha = 1.0", ENGINE, TWO_POOLS);
    let (want, want_outcomes) = run("pools-src", &sc, &[]);
    let p = tmp("pools-src-gen.toml");
    std::fs::write(&p, &sc).unwrap();
    let trace = tmp("pools-src.jsonl");
    let o = brokerlab(&["fleet", "gen-trace", p.to_str().unwrap(), "-o", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pools = tmp("two.pools.toml");
    std::fs::write(&pools, TWO_POOLS).unwrap();
    let out = tmp("pools-replay.outcomes");
    let fleet = [
        "--engine",
        "batched",
        "--profile",
        "llama-3.1-8b-h100",
        "--max-num-seqs",
        "16",
        "--max-num-batched-tokens",
        "1024",
        "--capacity",
        "96",
        "--router",
        "prefix-aware",
        "--alpha",
        "1",
    ];
    let mut args = fleet.to_vec();
    args.extend(["--pools", pools.to_str().unwrap(), "--outcomes", out.to_str().unwrap()]);
    let (code, got, err) = replay(&trace, &args);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(got["pods"], 5, "--pods left out: the pools' sum");
    let per_pool = got["per_pool"].as_array().unwrap();
    assert_eq!(per_pool.len(), 2);
    assert_eq!((per_pool[1]["name"].as_str(), per_pool[1]["capacity"].as_u64()), (Some("slow"), Some(64)));
    assert!(per_pool.iter().all(|p| p["requests"].as_u64().unwrap() > 0), "both pools serve: {per_pool:?}");
    for k in [
        "requests",
        "hit_tokens",
        "prefill_tokens",
        "ttft_p50",
        "ttft_p90",
        "e2e_p90",
        "steps",
        "preemptions",
        "per_pod_requests",
        "per_pool",
    ] {
        assert_eq!(got[k], want[k], "{k}");
    }
    assert!(want["preemptions"].as_u64().unwrap() > 0 && want["hit_tokens"].as_u64().unwrap() > 0);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), want_outcomes, "--outcomes bytes");
    let prov = got["provenance"].to_string();
    assert!(prov.contains("pools") && prov.contains("two.pools.toml"), "{prov}");
    // --pods equal to the pools' sum is accepted, the same run
    let mut with_pods = fleet.to_vec();
    with_pods.extend(["--pools", pools.to_str().unwrap(), "--pods", "5"]);
    let (code, same, err) = replay(&trace, &with_pods);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(same["per_pool"], got["per_pool"]);
    // one pool of every pod is the replay without pools
    let one = tmp("one.pools.toml");
    std::fs::write(&one, "[[fleet.pool]]\nname = \"all\"\npods = 5\n").unwrap();
    let mut a = fleet.to_vec();
    a.extend(["--pods", "5"]);
    let (_, plain, _) = replay(&trace, &a);
    let mut b = fleet.to_vec();
    b.extend(["--pools", one.to_str().unwrap()]);
    let (code, pooled, err) = replay(&trace, &b);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(comparable(&plain), comparable(&pooled));
    for f in [&p, &trace, &pools, &out, &one] {
        std::fs::remove_file(f).ok();
    }
}

/// A bad `--pools` file, or flags that contradict it, exit 2 naming the file, the line and the
/// key (or the flag).
#[test]
fn bad_pools_files_exit_2_naming_file_line_and_key() {
    let trace = tmp("bad-pools.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 64, \"output_length\": 4, \"hash_ids\": [1, 2, 3, 4]}\n",
    )
    .unwrap();
    let good = "[[fleet.pool]]\nname = \"a\"\npods = 2\n\n[[fleet.pool]]\nname = \"b\"\npods = 1\n";
    let batched: &[&str] = &["--engine", "batched", "--capacity", "64", "--router", "round-robin"];
    // (file text, flags, what the message must hold: {F} is the file's path)
    let cases: Vec<(String, Vec<&str>, Vec<&str>)> = vec![
        (good.replace("name = \"b\"", "name = \"b\"\nrole = \"both\""), batched.to_vec(), vec!["{F}:7:", "`fleet.pool[2].role`", "\"both\""]),
        (good.replace("pods = 1", "pods = 1\ncapacity = 0"), batched.to_vec(), vec!["{F}:8:", "`fleet.pool[2].capacity`"]),
        (good.replace("pods = 1", "pods = 1\nprofile = \"nope\""), batched.to_vec(), vec!["{F}:8:", "`fleet.pool[2].profile`"]),
        (good.replace("pods = 1", "pods = 1\nmax_num_seqs = 0"), batched.to_vec(), vec!["{F}:8:", "`fleet.pool[2].max_num_seqs`"]),
        (good.replace("pods = 2", "pods = 0"), batched.to_vec(), vec!["{F}:3:", "`fleet.pool[1].pods`"]),
        (good.replace("name = \"b\"", "name = \"a\""), batched.to_vec(), vec!["{F}:6:", "`fleet.pool[2].name`"]),
        (good.replace("pods = 1", "pods = 1\ncapacityy = 3"), batched.to_vec(), vec!["{F}", "line 8", "capacityy"]),
        (format!("[fleet]\npods = 3\n\n{good}"), batched.to_vec(), vec!["{F}", "line 2", "pods"]),
        (format!("name = \"x\"\n{good}"), batched.to_vec(), vec!["{F}", "line 1", "name"]),
        (String::new(), batched.to_vec(), vec!["{F}", "`fleet.pool`"]),
        (good.to_string(), vec!["--capacity", "64", "--router", "round-robin"], vec!["--pools {F}", "--engine batched"]),
        (good.to_string(), [batched, &["--pods", "4"]].concat(), vec!["--pods 4", "expected 3", "{F}"]),
        (
            "[[fleet.pool]]\nname = \"d\"\npods = 1\nrole = \"decode\"\n\n[[fleet.pool]]\nname = \"p\"\npods = 1\nrole = \"prefill\"\n"
                .to_string(),
            batched.to_vec(),
            vec!["{F}:2:", "`fleet.pool`", "prefill pool listed before"],
        ),
        (
            "[[fleet.pool]]\nname = \"p\"\npods = 1\nrole = \"prefill\"\n\n[[fleet.pool]]\nname = \"d\"\npods = 1\nrole = \"decode\"\n"
                .to_string(),
            [batched, &["--prefill-capacity", "8"]].concat(),
            vec!["--prefill-capacity", "{F}"],
        ),
        (
            "[[fleet.pool]]\nname = \"p\"\npods = 1\nrole = \"prefill\"\n\n[[fleet.pool]]\nname = \"d\"\npods = 1\nrole = \"decode\"\n"
                .to_string(),
            [batched, &["--prefill-pods", "2"]].concat(),
            vec!["--prefill-pods 2", "expected 1"],
        ),
    ];
    for (i, (text, flags, want)) in cases.iter().enumerate() {
        let f = tmp(&format!("bad-{i}.pools.toml"));
        std::fs::write(&f, text).unwrap();
        let fs = f.to_str().unwrap();
        let mut a = flags.clone();
        a.extend(["--pools", fs]);
        let (code, _, err) = replay(&trace, &a);
        assert_eq!(code, Some(2), "case {i}: {err}\n{text}");
        assert!(!err.contains("panicked"), "case {i}: {err}");
        for w in want {
            let w = w.replace("{F}", fs);
            assert!(err.contains(&w), "case {i}: expected {w:?} in: {err}");
        }
        std::fs::remove_file(&f).ok();
    }
    // a file that is not there
    let (code, _, err) = replay(&trace, &[batched, &["--pools", "/nonexistent/pools.toml"]].concat());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--pools /nonexistent/pools.toml"), "{err}");
    // a scenario's pool errors name the line too
    let sc = scenario("capacity = 64", ENGINE, "\n[[fleet.pool]]\nname = \"a\"\npods = 2\nrole = \"both\"\n");
    let line = sc.lines().position(|l| l.starts_with("role")).unwrap() + 1;
    let p = tmp("bad-line.toml");
    std::fs::write(&p, &sc).unwrap();
    let o = brokerlab(&["fleet", "run", "-q", p.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{}:{line}: `fleet.pool[1].role`", p.display())), "{err}");
    std::fs::remove_file(&p).ok();
    std::fs::remove_file(&trace).ok();
}

/// Autoscaling over pools (docs/MODEL.md, "Heterogeneous pools", "With autoscaling"): the pool
/// order is the scaling order. A ramp scales a fleet of a 1-pod pool then a 2-pod pool (and the
/// same pools listed the other way round) from 1 pod out into the second pool and back in: every boot is the lowest pod not routable (so the second pool's
/// pods boot only once the first pool's are all routable), every scale-in the highest routable
/// pod; listing the pools the other way round grows the other pool first.
#[test]
fn autoscaling_grows_pools_in_order_and_shrinks_them_in_reverse() {
    let sc = |pools: &str| {
        format!(
            "[workload]\nseed = 11\nrequests = 1100\ntenants = 4\nusers_per_tenant = 4\nprefix_tokens = 1024\n\
             suffix_tokens = [16, 128]\noutput_tokens = [8, 64]\n\n\
             [[workload.stages]]\nrate_per_s = 2.0\nduration_s = 20.0\n\n\
             [[workload.stages]]\nrate_per_s = 24.0\nduration_s = 40.0\n\n\
             [[workload.stages]]\nrate_per_s = 1.0\nduration_s = 400.0\n\n\
             [fleet]\ncapacity = 2048\nrouter = \"round-robin\"\n\n\
             [fleet.engine]\nprofile = \"qwen3-32b-h100x2\"\nmax_num_seqs = 4\n\n\
             [fleet.autoscale]\nmin = 1\ninterval_s = 5.0\nwindow_s = 5.0\nstartup_s = 5.0\n{pools}"
        )
    };
    let first = "\n[[fleet.pool]]\nname = \"first\"\npods = 1\n";
    let second = "\n[[fleet.pool]]\nname = \"second\"\npods = 2\ncapacity = 3072\n";
    for (order, pools) in [("first, second", format!("{first}{second}")), ("second, first", format!("{second}{first}"))]
    {
        let (s, outcomes) = run("scale-pools", &sc(&pools), &[]);
        let a = &s["autoscale"];
        let events = a["events"].as_array().unwrap();
        assert!(a["scale_outs"].as_u64().unwrap() >= 2, "{order}: {a}");
        assert!(a["scale_ins"].as_u64().unwrap() >= 1, "{order}: {a}");
        for e in events {
            let (pod, active) = (e["pod"].as_u64().unwrap(), e["active"].as_u64().unwrap());
            match e["kind"].as_str().unwrap() {
                // boot decided: the lowest pod not routable (routable pods unchanged)
                "out" => assert_eq!(pod, active, "{order}: {e}"),
                // routable: it is the last of 0..active
                "ready" => assert_eq!(pod + 1, active, "{order}: {e}"),
                // scale-in: the highest routable pod leaves 0..active
                "in" => assert_eq!(pod, active, "{order}: {e}"),
                _ => {}
            }
        }
        let per_pool = s["per_pool"].as_array().unwrap();
        let lead = &per_pool[0];
        let lead_pods = lead["pods"].as_u64().unwrap();
        // the first listed pool's pods all came up before any other pool's pod booted
        let first_other_boot = events.iter().position(|e| e["kind"] == "out" && e["pod"].as_u64() >= Some(lead_pods));
        let initial = a["initial_pods"].as_u64().unwrap();
        let other = first_other_boot.unwrap_or_else(|| panic!("{order}: a pod of the second pool booted: {events:?}"));
        if lead_pods > initial {
            let lead_all_ready = events
                .iter()
                .position(|e| e["kind"] == "ready" && e["pod"].as_u64() == Some(lead_pods - 1))
                .unwrap_or_else(|| panic!("{order}: the first pool's last pod came up: {events:?}"));
            assert!(lead_all_ready < other, "{order}: {events:?}");
        }
        // a pool served requests iff one of its pods was ever routable (pods 0..max_active)
        let max_active = a["max_active_pods"].as_u64().unwrap();
        for p in per_pool {
            let up = p["first_pod"].as_u64().unwrap() < max_active;
            assert_eq!(p["requests"].as_u64().unwrap() > 0, up, "{order}: {p} (at most {max_active} pods)");
        }
        assert!(max_active > lead_pods, "{order}: the ramp reaches the second listed pool ({max_active} pods)");
        let total: u64 = per_pool.iter().map(|p| p["requests"].as_u64().unwrap()).sum();
        assert_eq!(total, s["requests"].as_u64().unwrap());
        assert_eq!(outcomes.lines().count() as u64, total);
    }
}
