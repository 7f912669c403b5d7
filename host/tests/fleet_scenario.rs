//! Scenario files: every built-in one parses, and a bad key or value is an error (exit code 2)
//! that names the key and what it expects.

use brokerlab::fleet::scenario::Scenario;
use brokerlab::fleet::scenario::builtin::BUILTIN;

const BASE: &str = r#"
[workload]
requests = 100
tenants = 4
prefix_tokens = 256
suffix_tokens = [16, 64]
rate_per_s = 10.0

[fleet]
pods = 4
capacity = 64
"#;

fn parse(text: &str) -> Result<Scenario, (i32, String)> {
    Scenario::parse(text, "s.toml", "s").map_err(|e| (e.code(), e.to_string()))
}

#[test]
fn built_in_scenarios_parse() {
    for (name, text) in BUILTIN {
        let sc = parse(text).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(sc.name, name);
    }
    let auto = parse(BUILTIN.iter().find(|(n, _)| *n == "autoscale").unwrap().1).unwrap();
    let p = auto.fleet.scale().expect("autoscale scenario has a policy");
    assert_eq!((p.min_pods, p.initial_pods, p.interval_ns, p.startup_ns), (2, 2, 10_000_000_000, 30_000_000_000));
    assert_eq!((p.up_milli, p.down_milli), (2_000, 500));
    let w = auto.workload;
    assert_eq!((w.burst_rate_milli_per_s, w.burst_start_ms, w.burst_ms), (40_000, 60_000, 180_000));
}

#[test]
fn bad_keys_and_values_name_the_key() {
    let cases = [
        (format!("{BASE}bogus = 1\n"), "bogus"),
        (BASE.replace("rate_per_s = 10.0", "rate_per_s = -1.0"), "workload.rate_per_s"),
        // The router is a typed field (serde kebab-case): TOML's error shows the line, the key and
        // the accepted names.
        (BASE.replace("pods = 4", "pods = 4\nrouter = \"no-such-router\""), "router = \"no-such-router\""),
        (BASE.replace("pods = 4", "pods = 4\norder = \"sideways\""), "expected `tail-first` or `in-order`"),
        (BASE.replace("pods = 4", "pods = 4\nindex = \"nope\""), "expected `global` or `pod-tables`"),
        (BASE.replace("pods = 4", "pods = 4\ncache = \"pooled\""), "expected `local` or `global`"),
        (format!("{BASE}[fleet.autoscale]\nmin = 0\n"), "fleet.autoscale.min"),
        (format!("{BASE}[fleet.autoscale]\nmin = 5\n"), "fleet.autoscale.min"),
        (format!("{BASE}[fleet.autoscale]\nmin = 1\ninitial = 9\n"), "fleet.autoscale.initial"),
        (format!("{BASE}[fleet.autoscale]\nmin = 1\ninterval_s = 0\n"), "fleet.autoscale.interval_s"),
        (format!("{BASE}[fleet.autoscale]\nmin = 1\nstartup_s = -3\n"), "fleet.autoscale.startup_s"),
        (format!("{BASE}[fleet.autoscale]\nmin = 1\ndown_queue = 8\n"), "fleet.autoscale.down_queue"),
        (format!("{BASE}[fleet.autoscale]\nmin = 1\nspeed = 8\n"), "speed"),
        (
            BASE.replace(
                "rate_per_s = 10.0",
                "rate_per_s = 10.0\n[workload.burst]\nrate_per_s = -5\nstart_s = 1\nduration_s = 2",
            ),
            "workload.burst.rate_per_s",
        ),
        (
            BASE.replace(
                "rate_per_s = 10.0",
                "rate_per_s = 0.0\n[workload.burst]\nrate_per_s = 5\nstart_s = 1\nduration_s = 2",
            ),
            "workload.burst",
        ),
        (BASE.replace("rate_per_s = 10.0", "suffix_scope = \"session\"\nrate_per_s = 10.0"), "workload.suffix_scope"),
        (BASE.replace("rate_per_s = 10.0", ""), "workload.rate_per_s"),
        (
            BASE.replace("rate_per_s = 10.0", "rate_per_s = 10.0\n[[workload.stages]]\nrate_per_s = 5\nduration_s = 2"),
            "workload.rate_per_s",
        ),
        (
            BASE.replace("rate_per_s = 10.0", "[[workload.stages]]\nrate_per_s = 5\nduration_s = 2\n[[workload.stages]]\nrate_per_s = 5\nduration_s = 0"),
            "workload.stages[2].duration_s",
        ),
        (
            BASE.replace("rate_per_s = 10.0", "[[workload.stages]]\nrate_per_s = 0.0001\nduration_s = 2"),
            "workload.stages[1].rate_per_s",
        ),
        (BASE.replace("rate_per_s = 10.0", "[[workload.stages]]\nrate_per_s = 0\nduration_s = 2"), "workload.stages"),
    ];
    for (text, key) in cases {
        match parse(&text) {
            Ok(_) => panic!("accepted, expected an error naming {key}"),
            Err((code, msg)) => {
                assert_eq!(code, 2, "{msg}");
                assert!(msg.contains(key) && msg.contains("s.toml"), "expected `{key}` in: {msg}");
            }
        }
    }
}

/// `cache = "global"` in `[fleet]` is `--cache global`: `fleet run` of the scenario equals
/// `fleet replay --cache global` of the same workload written by `fleet gen-trace` (the replay
/// of a generated trace equals the direct run), and differs from the local default.
#[test]
fn the_cache_key_equals_the_flag() {
    use std::process::Command;
    let d = std::env::temp_dir().join(format!("brokerlab-scenario-cache-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let text = BASE.replace("pods = 4", "pods = 4\nrouter = \"round-robin\"\ncache = \"global\"");
    assert_eq!(parse(&text).unwrap().fifo().cache, brokerlab_core::fleet::CacheMode::Global);
    assert_eq!(parse(BASE).unwrap().fifo().cache, brokerlab_core::fleet::defaults::CACHE);
    let (global, local) = (d.join("global.toml"), d.join("local.toml"));
    std::fs::write(&global, &text).unwrap();
    std::fs::write(&local, text.replace("cache = \"global\"", "")).unwrap();
    let json = |args: &[&std::ffi::OsStr]| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_brokerlab")).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    let run = |sc: &std::path::Path| {
        json(&[os("fleet").as_os_str(), os("run").as_os_str(), sc.as_os_str(), os("--json").as_os_str()])
    };
    let (g, l) = (run(&global), run(&local));
    let trace = d.join("trace.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "gen-trace"])
        .arg(&global)
        .arg("-o")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success());
    let flags = "fleet replay --json --trace-block-size 16 --pods 4 --capacity 64 --router round-robin --cache global";
    let mut args: Vec<std::ffi::OsString> = flags.split(' ').map(os).collect();
    args.extend([os("--trace"), trace.into_os_string()]);
    let r = json(&args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>());
    assert_eq!(g["cache"], "global");
    assert!(l.get("cache").is_none(), "the local default is not written");
    for k in ["requests", "hit_tokens", "prefill_tokens", "latency_ns_p90", "per_pod_requests", "cache"] {
        assert_eq!(g[k], r[k], "{k}");
    }
    assert!(
        g["hit_tokens"].as_u64() > l["hit_tokens"].as_u64(),
        "one pool of 4 x 64 blocks hits more under round-robin"
    );
}
