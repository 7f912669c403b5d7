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
    assert!(pools[1]["ttft_p50"].as_f64() > pools[0]["ttft_p50"].as_f64());
    assert!(pools[1]["e2e_p50"].as_f64() > pools[0]["e2e_p50"].as_f64());
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
        "capacity",
        "--values",
        "8192,16384",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "sweep: {}", String::from_utf8_lossy(&o.stderr));
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
