//! Scenario files: every built-in one parses, and a bad key or value is an error (exit code 2)
//! that names the key and what it expects.

use brokerlab::fleet::report::BUILTIN;
use brokerlab::fleet::scenario::Scenario;

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
    let p = auto.fleet.scale.expect("autoscale scenario has a policy");
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
