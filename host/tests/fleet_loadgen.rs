//! The load generator through `fleet run`: each rule read back from the `--outcomes` lines
//! (send time = `arrival_ns`, client end = `arrival_ns + e2e_ns`, `stage`, `status`) and from
//! the `stages` of `--json`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

mod fleet_run_support;
use fleet_run_support::{run_scenario, u};

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

const WORKLOAD: &str = "[workload]\nseed = 5\nrequests = 12\ntenants = 3\nusers_per_tenant = 4\nprefix_tokens = 256\n\
suffix_tokens = [64, 64]\nsuffix_scope = \"user\"\noutput_tokens = [200, 200]\npopularity = \"cycle\"\n\n\
[fleet]\npods = 2\ncapacity = 400\nrouter = \"prefix-aware\"\n\n[fleet.engine]\nprofile = \"qwen3-32b-h100x2\"\n\n";

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-loadgen-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs a scenario of `load` (the `[load]` text): (exit code, stderr, JSON, outcome lines).
fn run(tag: &str, load: &str) -> (i32, String, Value, Vec<Value>) {
    run_scenario("loadgen", tag, &format!("{WORKLOAD}{load}"))
}

/// (send, client end) of each line.
fn spans(lines: &[Value]) -> Vec<(u64, u64)> {
    lines.iter().map(|l| (u(l, "arrival_ns"), u(l, "arrival_ns") + u(l, "e2e_ns"))).collect()
}

/// Most requests in flight at once.
fn most_in_flight(s: &[(u64, u64)]) -> usize {
    s.iter().map(|&(t, _)| s.iter().filter(|&&(a, e)| a <= t && e > t).count()).max().unwrap_or(0)
}

#[test]
fn closed_loop_never_exceeds_n_and_sends_on_completion_plus_think_time() {
    let (code, err, json, lines) = run(
        "closed",
        "[load]\ntype = \"concurrent\"\nthink_time_s = 0.05\n[[load.stages]]\nconcurrency_level = 3\nnum_requests = 30\n",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines.len(), 30);
    let s = spans(&lines);
    assert_eq!(most_in_flight(&s), 3);
    let mut sends: Vec<_> = s.iter().map(|x| x.0).collect();
    sends.sort_unstable();
    // after the first three, every send is some request's end + 50 ms (the 30 are scheduled
    // within the first second; the requests take longer, so the cap decides)
    for &t in &sends[3..] {
        assert!(s.iter().any(|&(_, e)| e + 50_000_000 == t), "send at {t} is no end + 50 ms");
    }
    assert!(lines.iter().all(|l| l["stage"] == 0 && l["status"] == "ok"));
    assert_eq!(json["stages"][0]["concurrency"], 3);
    assert_eq!(json["stages"][0]["sent"], 30);
}

#[test]
fn a_drained_stage_ends_before_the_next_starts_after_the_interval() {
    let (code, err, json, lines) = run(
        "drain",
        "[load]\ntype = \"poisson\"\ninterval_s = 2.5\n[[load.stages]]\nrate_per_s = 20\nduration_s = 1\n\
         [[load.stages]]\nrate_per_s = 5\nduration_s = 2\n",
    );
    assert_eq!(code, 0, "{err}");
    let of = |k: u64| -> Vec<(u64, u64)> {
        let v: Vec<Value> = lines.iter().filter(|l| l["stage"] == k).cloned().collect();
        spans(&v)
    };
    let (a, b) = (of(0), of(1));
    assert_eq!((a.len(), b.len()), (20, 10), "int(rate x duration) per stage");
    let last_end = a.iter().map(|x| x.1).max().unwrap();
    let first_next = b.iter().map(|x| x.0).min().unwrap();
    assert!(first_next >= last_end + 2_500_000_000, "{first_next} < {last_end} + 2.5 s");
    let st = &json["stages"];
    assert_eq!(st[1]["rate_per_s"], 5.0);
    assert_eq!(st[0]["sent"], 20);
    assert!(st[0]["output_tokens_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_in_flight_cap_holds() {
    let (code, err, _, lines) = run(
        "cap",
        "[load]\ntype = \"constant\"\nnum_workers = 2\nworker_max_concurrency = 2\n[[load.stages]]\nrate_per_s = 50\nduration_s = 1\n",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines.len(), 50);
    assert_eq!(most_in_flight(&spans(&lines)), 4);
}

#[test]
fn a_timeout_is_counted_and_frees_the_client_slot() {
    // one client, a 0.2 s timeout: requests of 200 output tokens take longer, each is given up
    // at send + 0.2 s and the next is sent then
    let (code, err, json, lines) = run(
        "timeout",
        "[load]\ntype = \"concurrent\"\nrequest_timeout_s = 0.2\n[[load.stages]]\nconcurrency_level = 1\nnum_requests = 4\n",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines.len(), 4);
    let mut by_send: Vec<&Value> = lines.iter().collect();
    by_send.sort_by_key(|l| u(l, "arrival_ns"));
    assert!(by_send.iter().all(|l| l["status"] == "timed_out"), "{by_send:?}");
    for w in by_send.windows(2) {
        assert_eq!(u(w[1], "arrival_ns"), u(w[0], "arrival_ns") + 200_000_000);
    }
    let st = &json["stages"][0];
    assert_eq!((st["completed"].as_u64(), st["timed_out"].as_u64()), (Some(0), Some(4)));
    assert!(st["ttft_ms_p90"].is_null() && st["output_tokens_per_s"].is_null());
}

#[test]
fn bad_load_keys_are_exit_2_naming_them() {
    for (load, key) in [
        ("[load]\ntype = \"poisson\"\nbogus = 1\n[[load.stages]]\nrate_per_s = 1\nduration_s = 1\n", "bogus"),
        ("[load]\ntype = \"closed\"\n[[load.stages]]\nrate_per_s = 1\nduration_s = 1\n", "load.type"),
        (
            "[load]\ntype = \"poisson\"\n[[load.stages]]\nconcurrency_level = 1\nnum_requests = 1\n",
            "load.stages[1].concurrency_level",
        ),
        ("[load]\ntype = \"concurrent\"\n[[load.stages]]\nconcurrency_level = 1\n", "load.stages[1].num_requests"),
        (
            "[load]\ntype = \"poisson\"\nnum_workers = 0\n[[load.stages]]\nrate_per_s = 1\nduration_s = 1\n",
            "load.num_workers",
        ),
        // each rule of the core's check named by its key, not `load`
        ("[load]\ntype = \"poisson\"\n[[load.stages]]\nrate_per_s = 0\nduration_s = 1\n", "load.stages[1].rate_per_s"),
        (
            "[load]\ntype = \"poisson\"\n[[load.stages]]\nrate_per_s = 1\nduration_s = 1\n[[load.stages]]\nrate_per_s = 1\nduration_s = 0\n",
            "load.stages[2].duration_s",
        ),
        (
            "[load]\ntype = \"concurrent\"\n[[load.stages]]\nconcurrency_level = 0\nnum_requests = 1\n",
            "load.stages[1].concurrency_level",
        ),
        (
            "[load]\ntype = \"concurrent\"\n[[load.stages]]\nconcurrency_level = 1\nnum_requests = 5000000000\n",
            "load.stages[1].num_requests",
        ),
        (
            "[load]\ntype = \"poisson\"\nnum_workers = 2000\nworker_max_concurrency = 1000\n[[load.stages]]\nrate_per_s = 1\nduration_s = 1\n",
            "load.num_workers",
        ),
        // rate x duration beyond 2^32 requests: the stage is named (the count never overflows)
        (
            "[load]\ntype = \"poisson\"\n[[load.stages]]\nrate_per_s = 1\nduration_s = 1\n[[load.stages]]\nrate_per_s = 1000000000\nduration_s = 1000000000\n",
            "`load.stages[2]` = \"1000000000 x 1000000000 s = 1000000000000000000 requests\"",
        ),
    ] {
        let (code, err, _, _) = run("bad", load);
        assert_eq!(code, 2, "{key}: {err}");
        assert!(err.contains(key), "{key} not named in {err}");
    }
}

#[test]
fn a_concurrent_config_imports_to_the_hand_written_scenario() {
    use brokerlab::fleet::scenario::Scenario;
    use brokerlab::fleet::scenario::inference_perf::{FleetFlags, import};
    let yaml = "load:\n  type: concurrent\n  num_workers: 4\n  request_timeout: 60\n  stages:\n    - concurrency_level: 8\n      num_requests: 100\n    - concurrency_level: 16\n      num_requests: 200\ndata:\n  type: shared_prefix\n  shared_prefix:\n    num_groups: 3\n    num_prompts_per_group: 4\n    system_prompt_len: 256\n    question_len: 64\n    output_len: 200\n";
    let flags = FleetFlags {
        pods: 2,
        capacity: 400,
        router: "prefix-aware".into(),
        alpha: 1.0,
        profile: Some("qwen3-32b-h100x2".into()),
        seed: 5,
        requests: None,
        name: Some("c".into()),
    };
    let imported = import(yaml, "c.yml", &flags).unwrap().scenario;
    let hand = Scenario::parse(
        &format!(
            "name = \"c\"\n{}[load]\ntype = \"concurrent\"\nnum_workers = 4\nrequest_timeout_s = 60\n\
             [[load.stages]]\nconcurrency_level = 8\nnum_requests = 100\n[[load.stages]]\nconcurrency_level = 16\nnum_requests = 200\n",
            WORKLOAD.replace("[fleet]\npods", "[fleet]\nalpha = 1.0\npods")
        ),
        "hand",
        "c",
    )
    .unwrap();
    assert_eq!(imported.workload, hand.workload);
    assert_eq!(imported.load, hand.load);
    assert_eq!(imported.fleet, hand.fleet);
}

/// `--stages-plot DIR`: the per-stage charts of a `[load]` run, SVG and PNG, one point per stage
/// that has the figure; without `[load]` the flag is refused (exit 2 naming it).
#[test]
fn stages_plot_draws_every_stage_and_needs_a_load() {
    let d = dir("plot");
    let sc = d.join("s.toml");
    let load = "[load]\ntype = \"constant\"\n[[load.stages]]\nrate_per_s = 4\nduration_s = 2\n[[load.stages]]\nrate_per_s = 8\nduration_s = 2\n";
    std::fs::write(&sc, format!("{WORKLOAD}{load}")).unwrap();
    let plots = d.join("plots");
    let o = Command::new(BIN)
        .args(["fleet", "run", "-q", "--json"])
        .arg(&sc)
        .arg("--stages-plot")
        .arg(&plots)
        .output()
        .unwrap();
    let read = |n: &str| std::fs::read(plots.join(n)).unwrap_or_default();
    let (ttft, tok, png) = (read("stages_ttft.svg"), read("stages_tok_s.svg"), read("stages_ttft.png"));
    let plain = d.join("plain.toml");
    std::fs::write(&plain, WORKLOAD.replace("requests = 12", "requests = 12\nrate_per_s = 2")).unwrap();
    let refused = Command::new(BIN)
        .args(["fleet", "run", "-q"])
        .arg(&plain)
        .arg("--stages-plot")
        .arg(d.join("p2"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&d);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let json: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["stages"].as_array().map(Vec::len), Some(2), "{json}");
    for (name, svg) in [("stages_ttft.svg", &ttft), ("stages_tok_s.svg", &tok)] {
        let text = String::from_utf8_lossy(svg);
        assert!(text.starts_with("<svg") && text.contains("per stage"), "{name}: {}", &text[..text.len().min(200)]);
    }
    assert!(png.starts_with(b"\x89PNG"), "stages_ttft.png is not a PNG");
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("--stages-plot") && err.contains("[load]"), "{err}");
}

/// The importer counts a stage's requests by the core's rule (int(rate x duration) in integer
/// milli-requests/s, `LoadStage::requests`), not by a float product: 0.29 x 100 is
/// 28.999999999999996 in f64, 29 requests here as in the core.
#[test]
fn the_importer_counts_a_stage_as_the_core_does() {
    use brokerlab::fleet::scenario::inference_perf::{FleetFlags, import};
    use brokerlab_core::fleet::loadgen::LoadKind;
    assert!((0.29f64 * 100.0).floor() < 29.0, "the float product this test is about");
    let yaml = "load:\n  type: poisson\n  stages:\n    - rate: 0.29\n      duration: 100\ndata:\n  type: random\n  input_distribution: {type: fixed, mean: 64}\n  output_distribution: {type: fixed, mean: 8}\n";
    let flags = FleetFlags {
        pods: 2,
        capacity: 400,
        router: "round-robin".into(),
        alpha: 1.0,
        profile: None,
        seed: 5,
        requests: None,
        name: None,
    };
    let sc = import(yaml, "r.yml", &flags).unwrap().scenario;
    let load = sc.load.unwrap();
    assert_eq!(load.stages()[0].requests(LoadKind::Poisson), 29);
    assert_eq!(sc.workload.requests, 29, "the data set holds the requests the core sends");
}

/// The server aborts a timed-out request (vLLM's finish_requests): it stops producing tokens
/// at the time-out, its KV is freed, and the client's next send is at the deadline.
#[test]
fn a_timed_out_request_is_aborted_on_the_server() {
    let (code, err, json, lines) = run(
        "abort",
        "[load]\ntype = \"concurrent\"\nrequest_timeout_s = 0.2\n[[load.stages]]\nconcurrency_level = 1\nnum_requests = 4\n",
    );
    assert_eq!(code, 0, "{err}");
    // every request is given up and aborted: one line each, marked, its client end the time-out
    assert_eq!(lines.len(), 4);
    assert!(lines.iter().all(|l| l["aborted"] == true && u(l, "e2e_ns") == 200_000_000), "{lines:?}");
    // the server stopped each at the time-out: far fewer than 4 x 200 tokens, and the run ends
    // within a step of the last time-out (without the abort it runs to 4 full requests)
    let produced = json["output_tokens"].as_u64().unwrap();
    assert!(produced < 4 * 200, "{produced} tokens produced");
    let last_deadline = lines.iter().map(|l| u(l, "arrival_ns") + 200_000_000).max().unwrap();
    let makespan_ns = (json["makespan_s"].as_f64().unwrap() * 1e9).round() as u64;
    assert!((last_deadline..last_deadline + 100_000_000).contains(&makespan_ns), "{makespan_ns} vs {last_deadline}");
    // the hit rate's population is the requests admitted, aborted ones with the hit they looked
    // up: request 3 (tenant 0 again, `cycle`) hits request 0's prefix, kept cached after its
    // abort, though no request completes; every request was admitted (one client), so the
    // denominator is every prompt token
    let (hit, input) = (u(&json, "hit_tokens"), u(&json, "input_tokens"));
    assert!(hit >= 256, "{hit} hit tokens");
    assert_eq!(json["hit_rate"].as_f64(), Some(hit as f64 / input as f64));
}
