//! Issue 11: every fleet input that used to abort, panic or answer wrong is now exit 2 with a
//! message naming the flag, scenario key or file:line and the limit. One test per row of
//! docs/BAD_INPUT.md (the `case` ids), and a check that the table and these tests list the same
//! cases. Issue 22 (what was accepted silently) adds the rows from `write-full-stdout` on.
//!
//! `BROKERLAB_BIN=/path/to/brokerlab` runs these tests against another build of the binary (how
//! issue 22's tests were checked to fail on the main branch before the fix).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The binary under test: this build's, or `BROKERLAB_BIN`.
fn exe() -> PathBuf {
    std::env::var_os("BROKERLAB_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_brokerlab")), PathBuf::from)
}

fn bin() -> Command {
    Command::new(exe())
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-hardening-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `bytes` to a fresh directory (tests run in parallel) as `name`.
fn file(name: &str, bytes: &[u8]) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let d = dir().join(N.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string());
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

const LINE: &str = "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 2, \"hash_ids\": [1, 2]}\n";

fn trace() -> PathBuf {
    file("t.jsonl", format!("{LINE}{LINE}").as_bytes())
}

/// A small scenario; `set` replaces `key = value` lines (the key at the start of a line).
fn scenario(name: &str, set: &[(&str, &str)]) -> PathBuf {
    let mut text = String::from(
        "[workload]\nseed = 3\nrequests = 60\ntenants = 4\nprefix_tokens = 64\nsuffix_tokens = [16, 48]\n\
         output_tokens = [1, 8]\nrate_per_s = 10.0\n\n[fleet]\npods = 2\ncapacity = 32\nt_prefill_ns = 50000\n",
    );
    for (k, v) in set {
        let start = text.find(&format!("\n{k} = ")).unwrap_or_else(|| panic!("no key {k}")) + 1;
        let end = start + text[start..].find('\n').unwrap();
        text.replace_range(start..end, &format!("{k} = {v}"));
    }
    file(name, text.as_bytes())
}

/// Runs the binary; (exit code, stdout, stderr). No signal: an abort would have no code.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let code = out.status.code().unwrap_or_else(|| panic!("killed by a signal: {args:?}\n{}", text(&out.stderr)));
    (code, text(&out.stdout), text(&out.stderr))
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Asserts exit 2 and that stderr contains every one of `want`, and no panic.
fn bad(args: &[&str], want: &[&str]) -> String {
    let (code, _, err) = run(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for w in want {
        assert!(err.contains(w), "{args:?}: {err:?} lacks {w:?}");
    }
    err
}

fn replay(extra: &[&str]) -> Vec<String> {
    let t = trace();
    let mut v: Vec<String> =
        ["fleet", "replay", "--trace", p(&t), "--router", "round-robin"].map(String::from).to_vec();
    let mut defaults = vec![("--pods", "2"), ("--capacity", "16")];
    defaults.retain(|(f, _)| !extra.contains(f));
    for (f, val) in defaults {
        v.extend([f.to_string(), val.to_string()]);
    }
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The cases of docs/BAD_INPUT.md, each tested below.
const CASES: &[&str] = &[
    "capacity-flag",
    "capacity-key",
    "capacity-sweep",
    "cpu-capacity-flag",
    "audit-capacity",
    "over-budget-flag",
    "over-budget-default",
    "over-budget-ulimit",
    "alloc-failure",
    "requests-max",
    "requests-huge",
    "requests-budget",
    "requests-streamed",
    "epipe",
    "rate-below-resolution",
    "rate-not-multiple",
    "rate-sweep",
    "sweep-zero",
    "sweep-hot-0",
    "sweep-steps",
    "sweep-fraction",
    "service-overflow",
    "timestamp-null",
    "bom",
    "pods-negative",
    "huge-float",
    "line-cap",
    "cache-key",
    "cache-batched",
    "write-full-stdout",
    "write-full-file",
    "output-is-input",
    "outcomes-dir",
    "budget-streamed",
    "budget-dynamo",
    "bailian-types",
    "blank-lines",
    "weight-huge",
    "router-key-unread",
    "approx-lru-zero",
    "router-config-provenance",
    "merge-edited",
    "merge-threads",
    "duplicate-key",
    "timestamp-overflow",
    "engine-flag-name",
    "bench-capacity-file",
    "bench-repeats-zero",
    "dynamo-outcomes",
    // the physics step cost's inputs, tested in host/tests/fleet_cost.rs
    "calibrate-steps-column",
    "calibrate-steps-field",
    "calibrate-too-few",
    "calibrate-model",
    "calibrate-tp",
    "calibrate-gpu",
    "calibrate-output",
    "calibrate-vllm-field",
    "calibrate-vllm-too-few",
    // the step model and the physics profiles of the batched engine, tested in host/tests/fleet_engine.rs
    "step-model-mismatch",
    "step-model-linear-flag",
    "profile-name",
    "profile-file",
    "capacity-missing",
    "alpha-not-prefix-aware",
    "view-flag-no-index",
    "fifo-cost-batched",
    "vllm-pickle-hash",
    "vllm-replay-block-size",
];

#[test]
fn the_table_in_docs_lists_exactly_these_cases() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/BAD_INPUT.md")).unwrap();
    let in_doc: Vec<&str> =
        doc.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).collect();
    assert_eq!(in_doc, CASES, "docs/BAD_INPUT.md rows vs tests");
}

#[test]
fn flags_that_do_not_apply() {
    // alpha-not-prefix-aware (replay()'s router is round-robin)
    bad(&args(&replay(&["--alpha", "4"])), &["--alpha", "prefix-aware only", "--router round-robin does not read it"]);
    // view-flag-no-index
    bad(&args(&replay(&["--stale", "3"])), &["--stale 3", "--router round-robin reads none"]);
    // fifo-cost-batched
    bad(&args(&replay(&["--engine", "batched", "--t-decode-ns", "7"])), &["--t-decode-ns", "--engine batched"]);
    let tokens = file("tokens.jsonl", b"{\"timestamp\": 0, \"token_ids\": [1, 2], \"output_length\": 1}\n");
    // vllm-pickle-hash
    bad(&["fleet", "keys", "--trace", p(&tokens), "--hash", "vllm-sha256"], &["--hash vllm-sha256", "pickle"]);
    // vllm-replay-block-size
    let r = ["fleet", "replay", "--pods", "1", "--capacity", "8", "--router", "round-robin", "--trace", p(&tokens)];
    bad(
        &[&r[..], &["--hash", "vllm-sha256-cbor", "--block-size", "24"]].concat(),
        &["--block-size 24", "multiple of 16"],
    );
}

#[test]
fn capacity_limits() {
    // capacity-flag
    bad(&args(&replay(&["--capacity", "1099511627776"])), &["--capacity", "1..=4294967294", "MAX_POD_BLOCKS"]);
    // capacity-key
    let sc = scenario("cap.toml", &[("capacity", "1099511627776")]);
    bad(&["fleet", "run", p(&sc)], &["cap.toml", "`fleet.capacity`", "4294967294"]);
    // capacity-sweep
    let ok = scenario("ok.toml", &[]);
    let out = dir().join("sweep-cap");
    bad(
        &["fleet", "sweep", p(&ok), "--param", "capacity", "--values", "1099511627776", "--out", p(&out)],
        &["capacity value `1099511627776`", "at most 4294967294"],
    );
    // cpu-capacity-flag
    bad(&args(&replay(&["--cpu-capacity", "4294967295"])), &["--cpu-capacity", "0..=4294967294"]);
    // audit-capacity: the audit refuses the scenario instead of reporting 281 TB.
    bad(&["audit", p(&sc), "--no-firmware"], &["cap.toml", "`fleet.capacity`", "4294967294"]);
}

#[test]
fn memory_budget() {
    // over-budget-flag: within the limit, over --max-memory: bytes per structure and the flags.
    let err = bad(
        &args(&replay(&["--capacity", "4294967294", "--max-memory", "1G"])),
        &["needs", "--max-memory 1073741824", "pod LRU slots", "pod key tables", "--capacity or --pods"],
    );
    // The figures are the audit's: 2 pods x C slots of 16 B.
    let slots = format!("{}", 2u128 * 4294967294 * 16);
    let grouped: String = {
        let s = slots.as_str();
        let mut o = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                o.push(',');
            }
            o.push(c);
        }
        o
    };
    assert!(err.contains(&grouped), "{err} lacks {grouped}");
    // over-budget-default: 64 x 4294967294 blocks is ~6.6 TB, over any machine's memory.
    bad(&args(&replay(&["--pods", "64", "--capacity", "4294967294"])), &["needs", "available", "set --max-memory"]);
}

#[cfg(target_os = "linux")]
fn under_ulimit(kb: u64, a: &[String]) -> (i32, String) {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!("ulimit -v {kb} && exec \"$0\" \"$@\"")).arg(exe()).args(a);
    let out = cmd.output().unwrap();
    let code = out.status.code().expect("not killed by a signal (no abort)");
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[cfg(target_os = "linux")]
#[test]
fn ulimit_is_the_default_budget_and_a_failed_allocation_is_an_error() {
    // over-budget-ulimit: under ulimit -v 4 GB the default budget is below 18.8 GB.
    let (code, err) = under_ulimit(4_000_000, &replay(&["--pods", "64", "--capacity", "10000000"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ulimit -v") && err.contains("pod LRU slots"), "{err}");
    // alloc-failure: the budget is lifted with --max-memory, the allocation itself fails.
    let (code, err) =
        under_ulimit(2_000_000, &replay(&["--pods", "64", "--capacity", "10000000", "--max-memory", "100G"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot allocate the pods' LRU slots"), "{err}");
}

#[test]
fn requests_are_bounded_and_streamed() {
    // requests-max, requests-huge
    for (name, v) in [("rmax.toml", "18446744073709551615"), ("rhuge.toml", "100000000000")] {
        let sc = scenario(name, &[("requests", v)]);
        bad(&["fleet", "run", p(&sc)], &[name, "workload.requests", "at most 4294967296"]);
    }
    // requests-budget: within the bound, over the budget (8 bytes of latency per request).
    let sc = scenario("rbig.toml", &[("requests", "4000000000")]);
    bad(
        &["fleet", "run", p(&sc), "--max-memory", "1G"],
        &["latencies (exact percentiles)", "32,000,000,000", "workload.requests"],
    );
    // requests-streamed: `fleet run` generates on the fly, so it fits a budget that the
    // materialised workload of a sweep does not.
    let sc = scenario("rstream.toml", &[("requests", "4000")]);
    let (code, out, err) = run(&["fleet", "run", p(&sc), "--max-memory", "400K", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["requests"], 4000);
    let o = dir().join("sweep-stream");
    bad(
        &["fleet", "sweep", p(&sc), "--param", "alpha", "--values", "1", "--max-memory", "400K", "--out", p(&o)],
        &["generated block keys", "workload.requests"],
    );
}

/// Spawns with stdout a pipe whose reading end is closed at once: the command's first write gets
/// EPIPE. It must end quietly: exit 0, nothing on stderr about a panic or a broken pipe.
fn closed_stdout(a: &[&str]) {
    let mut child = bin().args(a).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{a:?}: {err}");
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{a:?}: {err}");
}

#[test]
fn closed_stdout_ends_quietly() {
    // epipe
    let sc = scenario("pipe.toml", &[]);
    let o = dir().join("sweep-pipe");
    closed_stdout(&args(&replay(&[])));
    closed_stdout(&args(&replay(&["--json"])));
    closed_stdout(&["fleet", "run", p(&sc)]);
    closed_stdout(&["fleet", "sweep", p(&sc), "--param", "alpha", "--values", "1,2", "--out", p(&o)]);
    closed_stdout(&["fleet", "replay", "--help"]);
    // The task commands print through the same path.
    let spec = file("spec.toml", b"id = \"pipe\"\n[[step]]\nmodel = \"hello\"\n");
    let (db, world) = (dir().join("pipe.sqlite"), dir().join("pipe-world"));
    closed_stdout(&["task", "run", p(&spec), "--db", p(&db), "--world", p(&world)]);
    closed_stdout(&["task", "list", "--db", p(&db)]);
}

#[test]
fn rates_are_exact_or_rejected() {
    // rate-below-resolution
    for v in ["1e-4", "3e-4"] {
        let sc = scenario("rlow.toml", &[("rate_per_s", v)]);
        bad(&["fleet", "run", p(&sc)], &["`workload.rate_per_s`", "at least 0.001 (the resolution)"]);
    }
    // rate-not-multiple
    let sc = scenario("rodd.toml", &[("rate_per_s", "0.0015")]);
    bad(&["fleet", "run", p(&sc)], &["`workload.rate_per_s`", "a multiple of 0.001"]);
    // The smallest rate accepted is a real rate: 0.001 req/s spreads 3 requests over many
    // seconds, rate 0 puts them all at t = 0.
    let makespan = |rate: &str| {
        let sc = scenario("rmin.toml", &[("rate_per_s", rate), ("requests", "3")]);
        let (code, out, err) = run(&["fleet", "run", p(&sc), "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["makespan_s"].as_f64().unwrap()
    };
    assert!(makespan("0.001") > 100.0 * makespan("0.0").max(0.001));
    // rate-sweep
    let o = dir().join("sweep-rate");
    let ok = scenario("ok.toml", &[]);
    bad(
        &["fleet", "sweep", p(&ok), "--param", "rate", "--values", "0.0001", "--out", p(&o)],
        &["--values 0.0001", "the resolution"],
    );
}

#[test]
fn sweep_values_are_never_changed_silently() {
    let ok = scenario("ok.toml", &[]);
    let o = dir().join("sweep-bad");
    let sweep = |extra: &[&str], want: &[&str]| {
        let mut a = vec!["fleet", "sweep", p(&ok), "--out", p(&o)];
        a.extend_from_slice(extra);
        bad(&a, want);
    };
    // sweep-zero
    sweep(&["--param", "capacity", "--values", "1,0"], &["capacity value `0`", "at least 1 block"]);
    // sweep-hot-0
    sweep(
        &["--param", "capacity", "--from", "fit", "--to", "hot/0"],
        &["capacity value `hot/0`", "K must be at least 1"],
    );
    sweep(&["--param", "capacity", "--values", "hot/0"], &["capacity value `hot/0`", "K must be at least 1"]);
    // sweep-steps
    for s in ["0", "1", "-3"] {
        sweep(
            &["--param", "capacity", "--from", "fit", "--to", "hot/2", "--steps", s],
            &["--steps", "at least 2 points"],
        );
    }
    // sweep-fraction
    sweep(&["--param", "pods", "--values", "1.5"], &["--values 1.5", "whole numbers"]);
    sweep(&["--param", "stale", "--values", "-1"], &["--values -1", "whole numbers"]);
}

#[test]
fn service_time_overflow_names_the_scenario_and_key() {
    // service-overflow
    let sc = scenario("over.toml", &[("t_prefill_ns", "18446744073709551615")]);
    bad(&["fleet", "run", p(&sc)], &["over.toml: request 0: service time overflows", "`fleet.t_prefill_ns`"]);
}

#[test]
fn wording() {
    // timestamp-null
    let t =
        file("null.jsonl", b"{\"timestamp\": null, \"input_length\": 40, \"output_length\": 2, \"hash_ids\": [1]}\n");
    let mut a = replay(&[]);
    a[3] = p(&t).to_string();
    bad(&args(&a), &["null.jsonl:1: field `timestamp` is null: expected a non-negative integer"]);
    // bom: a trace and a scenario starting with a UTF-8 byte-order mark are read.
    let t = file("bom.jsonl", format!("\u{feff}{LINE}").as_bytes());
    a[3] = p(&t).to_string();
    let (code, _, err) = run(&args(&a));
    assert_eq!(code, 0, "{err}");
    let sc = std::fs::read(scenario("plain.toml", &[])).unwrap();
    let bom = file("bom.toml", &[&b"\xef\xbb\xbf"[..], &sc].concat());
    let (code, _, err) = run(&["fleet", "run", p(&bom)]);
    assert_eq!(code, 0, "{err}");
    // pods-negative
    for v in ["-1", "0", "1025"] {
        bad(&args(&replay(&["--pods", v])), &["--pods", "pods must be 1..=1024 (MAX_PODS)"]);
    }
    // huge-float
    let err = bad(&args(&replay(&["--scale-min", "1", "--scale-startup-s", "1e300"])), &["--scale-startup-s: 1e300"]);
    assert!(err.len() < 200, "{err}");
    let sc = scenario("bigrate.toml", &[("rate_per_s", "1e300")]);
    let err = bad(&["fleet", "run", p(&sc)], &["\"1e300\""]);
    assert!(err.len() < 300, "{err}");
}

#[test]
fn the_cache_key_is_checked_and_named() {
    // cache-key
    let sc = scenario("cache-bad.toml", &[("capacity", "32\ncache = \"shared\"")]);
    bad(&["fleet", "run", p(&sc)], &["cache-bad.toml", "cache = \"shared\"", "expected `local` or `global`"]);
    // cache-batched: the key from the file, the engine from the flag (run and sweep), or both
    // from the file
    let sc = scenario("cache-global.toml", &[("capacity", "32\ncache = \"global\"")]);
    let want = ["cache-global.toml: `fleet.cache`: expected local with --engine batched"];
    bad(&["fleet", "run", p(&sc), "--engine", "batched"], &want);
    let out = dir().join("cache-sweep");
    bad(
        &["fleet", "sweep", p(&sc), "--param", "pods", "--values", "2", "--out", p(&out), "--engine", "batched"],
        &want,
    );
    let text = std::fs::read_to_string(&sc).unwrap() + "[fleet.engine]\n";
    let both = file("cache-engine.toml", text.as_bytes());
    bad(&["fleet", "run", p(&both)], &["cache-engine.toml: `fleet.cache`: expected local with --engine batched"]);
    bad(
        &args(&replay(&["--cache", "global", "--engine", "batched"])),
        &["--cache: expected local with --engine batched"],
    );
}

#[test]
fn line_length_is_capped() {
    // line-cap
    let mut long = String::from("{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 2, \"hash_ids\": [");
    long += &vec!["7"; 200].join(", ");
    long += "]}\n";
    let t = file("long.jsonl", format!("{LINE}{long}").as_bytes());
    let mut a = replay(&["--max-line-bytes", "300"]);
    a[3] = p(&t).to_string();
    bad(&args(&a), &["long.jsonl:2: the line is longer than --max-line-bytes 300 bytes"]);
    // The same line under the default cap is read.
    let mut a = replay(&[]);
    a[3] = p(&t).to_string();
    let (code, _, err) = run(&args(&a));
    assert_eq!(code, 0, "{err}");
}

// ---- Issue 22: what used to be accepted silently ----

/// Runs with stdout on `/dev/full` (every write fails with ENOSPC): (exit code, stderr).
#[cfg(target_os = "linux")]
fn to_full_device(a: &[&str]) -> (i32, String) {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let out = bin().args(a).stdout(full).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().expect("no signal"), err)
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_stdout_is_a_failure() {
    // write-full-stdout: the JSON, the table, fleet keys and a sweep's table; a closed pipe
    // stays quiet (`epipe`).
    let sc = scenario("full.toml", &[]);
    let o = dir().join("sweep-full-stdout");
    let tokens = file("tok.jsonl", b"{\"timestamp\": 0, \"token_ids\": [1, 2, 3], \"output_length\": 1}\n");
    for a in [
        args(&replay(&["--json"])),
        args(&replay(&[])),
        vec!["fleet", "keys", "--trace", p(&tokens)],
        vec!["fleet", "sweep", p(&sc), "--param", "alpha", "--values", "1", "--out", p(&o), "-q"],
        vec!["fleet", "replay", "--help"],
    ] {
        let (code, err) = to_full_device(&a);
        assert_eq!(code, 1, "{a:?}: {err}");
        assert!(err.contains("cannot write to stdout: No space left on device"), "{a:?}: {err}");
    }
}

/// Runs under `ulimit -f BLOCKS` (a write past it fails with EFBIG: a real write error on a
/// regular file, no root or special file system needed): (exit code, stderr).
#[cfg(target_os = "linux")]
fn under_file_limit(blocks: u64, a: &[&str]) -> (i32, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -f {blocks} && exec \"$0\" \"$@\""))
        .arg(exe())
        .args(a)
        .output()
        .unwrap();
    (out.status.code().expect("no signal"), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn names_in(d: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[cfg(target_os = "linux")]
#[test]
fn a_failed_file_write_leaves_no_truncated_result() {
    // write-full-file: a sweep whose points.json cannot be written (ulimit -f: EFBIG) exits 1
    // naming the file; the directory keeps the previous complete set, byte for byte, and no
    // temporary file.
    let sc = scenario("wf.toml", &[]);
    let out = dir().join("sweep-write-fail");
    let sweep = |vals: &str| -> Vec<String> {
        ["fleet", "sweep", p(&sc), "--param", "alpha", "--values", vals, "--out", p(&out), "-q", "--no-date"]
            .map(String::from)
            .to_vec()
    };
    let (code, _, err) = run(&args(&sweep("1,2")));
    assert_eq!(code, 0, "{err}");
    let before: Vec<(String, Vec<u8>)> =
        names_in(&out).into_iter().map(|n| (n.clone(), std::fs::read(out.join(&n)).unwrap())).collect();
    let (code, err) = under_file_limit(2, &args(&sweep("1,2,3")));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot write: File too large"), "{err}");
    let after: Vec<(String, Vec<u8>)> =
        names_in(&out).into_iter().map(|n| (n.clone(), std::fs::read(out.join(&n)).unwrap())).collect();
    assert!(before == after, "the earlier sweep's files changed: {:?}", names_in(&out));
    // a new directory: nothing in it
    let fresh = dir().join("sweep-write-fail-new");
    let mut a = sweep("1,2,3");
    *a.iter_mut().find(|x| **x == p(&out)).unwrap() = p(&fresh).to_string();
    let (code, err) = under_file_limit(2, &args(&a));
    assert_eq!(code, 1, "{err}");
    assert!(names_in(&fresh).is_empty(), "{:?}", names_in(&fresh));
    // --outcomes on a full device: exit 1 naming the flag
    let (code, _, err) = run(&args(&replay(&["--engine", "batched", "--outcomes", "/dev/full"])));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--outcomes /dev/full: cannot write: No space left on device"), "{err}");
}

#[test]
fn an_output_that_is_an_input_is_refused() {
    // output-is-input: --outcomes naming the trace by another path (a hard link): refused before
    // the run, the trace untouched
    let t = file("in.jsonl", format!("{LINE}{LINE}").as_bytes());
    let link = t.with_file_name("link.jsonl");
    std::fs::hard_link(&t, &link).unwrap();
    let before = std::fs::read(&t).unwrap();
    let mut a = replay(&["--engine", "batched", "--outcomes", p(&link)]);
    a[3] = p(&t).to_string();
    bad(&args(&a), &["--outcomes", "is the same file as --trace", "in.jsonl"]);
    assert_eq!(std::fs::read(&t).unwrap(), before);
    // the router config as --outcomes, fleet run's scenario, gen-trace's -o
    let rc = file("rc.toml", b"preset = \"llm-d-precise\"\n");
    let mut a = replay(&["--engine", "batched", "--router-config", p(&rc), "--outcomes", p(&rc)]);
    a.drain(4..6); // no --router
    bad(&args(&a), &["is the same file as --router-config"]);
    let sc = scenario("self.toml", &[]);
    bad(
        &["fleet", "run", p(&sc), "--engine", "batched", "--outcomes", p(&sc)],
        &["--outcomes", "is the same file as the scenario"],
    );
    bad(&["fleet", "gen-trace", p(&sc), "-o", p(&sc)], &["-o", "is the same file as the scenario"]);
    // a sweep into the directory that holds its scenario (points.csv could be it)
    let inside = file("points.csv", std::fs::read(&sc).unwrap().as_slice());
    bad(
        &["fleet", "sweep", p(&inside), "--param", "alpha", "--values", "1", "--out", p(inside.parent().unwrap())],
        &["--out", "holds the scenario"],
    );
    // outcomes-dir: a directory is exit 2 before the run (was 1 after it)
    bad(&args(&replay(&["--engine", "batched", "--outcomes", p(&dir())])), &["--outcomes", "is a directory"]);
    let missing = dir().join("no-such-dir").join("o.jsonl");
    bad(&args(&replay(&["--engine", "batched", "--outcomes", p(&missing)])), &["does not exist"]);
}

/// A Mooncake trace of `n` requests, 1 ms apart, one shared and one own id each.
fn long_trace(name: &str, n: usize) -> PathBuf {
    let mut t = String::with_capacity(n * 80);
    for i in 0..n {
        t += &format!("{{\"timestamp\": {i}, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [0, {i}]}}\n");
    }
    file(name, t.as_bytes())
}

#[test]
fn the_memory_budget_binds_a_streamed_replay() {
    // budget-streamed: 40,000 requests keep 320 KB of latencies (and a Bailian replay its labels
    // and outcomes): past --max-memory 400K that is exit 2 naming the structure, not a run that
    // quietly takes what it needs.
    let n = 40_000;
    let t = long_trace("long.jsonl", n);
    let run_args = |t: &Path, extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "fleet",
            "replay",
            "--trace",
            p(t),
            "--pods",
            "1",
            "--capacity",
            "64",
            "--router",
            "round-robin",
            "--trace-block-size",
            "16",
        ]
        .map(String::from)
        .to_vec();
        // a FIFO cost: the batched engine refuses it (`fifo-cost-batched`)
        if !extra.contains(&"batched") {
            v.extend(["--t-prefill-ns".to_string(), "1".to_string()]);
        }
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    bad(
        &args(&run_args(&t, &["--max-memory", "400K"])),
        &[
            "the latencies (exact percentiles, 8 B per request) would grow past the memory budget",
            "--max-memory 409600",
        ],
    );
    // the same trace fits a budget that holds its latencies
    let (code, _, err) = run(&args(&run_args(&t, &["--max-memory", "4M"])));
    assert_eq!(code, 0, "{err}");
    // Bailian: per-request labels and outcomes, FIFO and batched
    let mut b = String::new();
    for i in 0..n {
        b += &format!(
            "{{\"chat_id\": {i}, \"parent_chat_id\": -1, \"timestamp\": {}.{}, \"input_length\": 32, \
             \"output_length\": 1, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [0, {i}]}}\n",
            i / 10,
            i % 10
        );
    }
    let bt = file("long-bailian.jsonl", b.as_bytes());
    for engine in [&[][..], &["--engine", "batched"][..]] {
        let mut extra = vec!["--max-memory", "1M"];
        extra.extend_from_slice(engine);
        let a = run_args(&bt, &extra);
        let err = bad(&args(&a), &["would grow past the memory budget", "--max-memory 1048576"]);
        assert!(err.contains("per-request labels") || err.contains("outcomes") || err.contains("completions"), "{err}");
    }
}

#[test]
fn a_dynamo_trace_is_counted_as_held() {
    // budget-dynamo: 20,000 one-turn sessions hold about 5 MB (turns, ids, names, the session
    // index), which used to be counted as 2.7 MB and checked only when the count doubled.
    let mut t = String::new();
    for i in 0..20_000 {
        t += &format!(
            "{{\"session_id\": \"s{i}\", \"timestamp\": {i}, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [0, {i}]}}\n"
        );
    }
    let f = file("sessions.jsonl", t.as_bytes());
    let a = |mm: &str| -> Vec<String> {
        [
            "fleet",
            "replay",
            "--trace",
            p(&f),
            "--pods",
            "1",
            "--capacity",
            "64",
            "--router",
            "round-robin",
            "--trace-block-size",
            "16",
            "--max-memory",
            mm,
        ]
        .map(String::from)
        .to_vec()
    };
    bad(
        &args(&a("2500K")),
        &["reading the Dynamo trace", "Dynamo trace held in memory", "outgrew the memory budget", "--max-memory"],
    );
    let (code, _, err) = run(&args(&a("64M")));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn bailian_types_are_bounded() {
    // bailian-types: distinct `type` values are looked up per line and kept: at most 1024
    let mut t = String::new();
    for i in 0..1025 {
        t += &format!(
            "{{\"chat_id\": {i}, \"parent_chat_id\": -1, \"timestamp\": 1, \"input_length\": 32, \
             \"output_length\": 1, \"type\": \"t{i}\", \"turn\": 1, \"hash_ids\": [0, {i}]}}\n"
        );
    }
    let f = file("types.jsonl", t.as_bytes());
    let mut a = replay(&[]);
    a[3] = p(&f).to_string();
    bad(&args(&a), &["types.jsonl:1025: field `type`", "at most 1024"]);
}

#[test]
fn blank_lines_are_counted() {
    // blank-lines: a trace of nothing but blank lines stops at --max-blank-lines (default
    // 1,000,000), instead of reading them all and replaying no request
    let blank = file("blank.jsonl", &vec![b'\n'; 1_000_001]);
    let mut a = replay(&[]);
    a[3] = p(&blank).to_string();
    bad(&args(&a), &["blank.jsonl:1000001: more than --max-blank-lines 1000000 blank lines"]);
    let few = file("few.jsonl", format!("\n\n\n{LINE}\n\n{LINE}").as_bytes());
    a[3] = p(&few).to_string();
    let mut b = a.clone();
    b.extend(["--max-blank-lines".into(), "4".into()]);
    bad(&args(&b), &["few.jsonl:6: more than --max-blank-lines 4 blank lines"]);
    *b.last_mut().unwrap() = "5".into();
    let (code, _, err) = run(&args(&b));
    assert_eq!(code, 0, "{err}");
    // the other readers: a tokens trace (fleet keys) and format detection
    let tok = file("blank-tokens.jsonl", b"\n\n\n{\"timestamp\": 0, \"token_ids\": [1], \"output_length\": 1}\n");
    bad(&["fleet", "keys", "--trace", p(&tok), "--max-blank-lines", "2"], &["blank-tokens.jsonl:3: more than"]);
}

/// `fleet replay` of the test trace with the router config `toml` (no --router).
fn with_router_config(name: &str, toml: &str, extra: &[&str]) -> (Vec<String>, PathBuf) {
    let rc = file(name, toml.as_bytes());
    let mut a = replay(extra);
    a.drain(4..6);
    a.extend(["--router-config".to_string(), p(&rc).to_string()]);
    (a, rc)
}

#[test]
fn weights_are_bounded() {
    // weight-huge: f64::MAX overflowed the weighted sum to +inf (every pod tied, picked at
    // random): refused, as is any weight above 1e6
    for w in ["1.7976931348623157e308", "1000001", "inf"] {
        let (a, _) = with_router_config("w.toml", &format!("[[scorers]]\ntype = \"queue\"\nweight = {w}\n"), &[]);
        bad(&args(&a), &["w.toml: key `scorers.weight`: expected a scorer weight from 0 to 1e6"]);
    }
    let (a, _) = with_router_config("ow.toml", "preset = \"dynamo-kv\"\n[params]\noverlap_score_weight = 1e300\n", &[]);
    bad(&args(&a), &["key `params.overlap_score_weight`", "from 0 to 1e6"]);
    let (a, _) = with_router_config("ok.toml", "[[scorers]]\ntype = \"queue\"\nweight = 1e6\n", &[]);
    let (code, _, err) = run(&args(&a));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn keys_a_router_does_not_read_are_refused() {
    // router-key-unread: the two cases, and parameters of parts the pipeline lacks
    for (toml, key, reader) in [
        ("policy = \"sglang-cache-aware\"\n[[scorers]]\ntype = \"queue\"\n", "scorers", "policy \"pipeline\""),
        ("preset = \"dynamo-kv\"\nfilters = [\"prefix-cache-affinity\"]\n", "filters", "policy \"pipeline\""),
        ("preset = \"dynamo-kv\"\n[params]\nvllm_beta = 2\n", "params.vllm_beta", "policy \"vllm-loadaware\""),
        (
            "preset = \"llm-d-precise\"\n[params]\nload_aware_threshold = 5\n",
            "params.load_aware_threshold",
            "load-aware",
        ),
        ("preset = \"vllm-loadaware\"\n[params]\nseed = 5\n", "params.seed", "a random draw"),
    ] {
        let (a, _) = with_router_config("unread.toml", toml, &[]);
        bad(&args(&a), &[&format!("unread.toml: key `{key}`: this router does not read it"), reader]);
    }
    // approx-lru-zero: 0 used to mean "the pod's capacity" silently
    let (a, _) =
        with_router_config("lru0.toml", "preset = \"llm-d-approximate\"\n[params]\napprox_lru_blocks = 0\n", &[]);
    bad(&args(&a), &["key `params.approx_lru_blocks`: expected at least 1 key per pod"]);
}

#[test]
fn provenance_records_the_router_config() {
    // router-config-provenance: the file (path, SHA-256) and the resolved router, in the JSON's
    // provenance; the table and the JSON show the pipeline, not only `custom`
    let toml = "preset = \"llm-d-precise\"\n[[scorers]]\ntype = \"precise-prefix-cache\"\nweight = 3.0\n\
                [[scorers]]\ntype = \"queue\"\nweight = 2.0\n";
    let (a, rc) = with_router_config("p322.toml", toml, &["--json", "--no-date"]);
    let (code, out, err) = run(&args(&a));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let inputs = v["provenance"]["inputs"].as_array().unwrap();
    let sha: String =
        brokerlab::provenance::sha256_file(&rc).unwrap().iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert!(
        inputs.iter().any(|i| i["kind"] == "router-config" && i["path"] == p(&rc) && i["sha256"] == sha.as_str()),
        "{inputs:?}"
    );
    let spec = &v["provenance"]["router_pipeline"]["spec"];
    assert_eq!(spec["policy"], "pipeline");
    assert_eq!(spec["scorers"][0]["kind"], "precise-prefix-cache");
    assert_eq!(spec["scorers"][1]["weight"], 2.0);
    assert_eq!(v["router"], "custom");
    assert_eq!(v["pipeline"], "custom: policy pipeline; scorers precise-prefix-cache 3, queue 2; picker max-score");
    let (a, _) = with_router_config("p322.toml", toml, &[]);
    let (code, out, err) = run(&args(&a));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("router                 custom: policy pipeline; scorers precise-prefix-cache 3"), "{out}");
}

/// Runs `brokerlab` in `cwd`: (exit code, stdout, stderr).
fn run_in(cwd: &Path, a: &[&str]) -> (i32, String, String) {
    let out = bin().current_dir(cwd).args(a).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().expect("no signal"), text(&out.stdout), text(&out.stderr))
}

/// A capacity sweep (5 values x 3 routers) as 3 shards in `d`, into part0..part2; `extra[i]`
/// are shard i's own flags.
fn three_shards(d: &Path, scenario: [&str; 3], extra: [&[&str]; 3]) {
    for i in 0..3 {
        let mut a = vec!["fleet", "sweep", scenario[i], "--param", "capacity", "--values", "24,32,48,64,128"];
        let (out, shard) = (format!("part{i}"), format!("{i}/3"));
        a.extend(["--no-date", "--out", &out, "--shard", &shard]);
        a.extend_from_slice(extra[i]);
        let (code, _, err) = run_in(d, &a);
        assert_eq!(code, 0, "{a:?}: {err}");
    }
}

#[test]
fn merge_checks_the_points() {
    // merge-edited: a point edited after the run (the issue's: hit_rate 0.99, capacity 123456
    // where the sweep's value is 1000) is refused, by its digest and, with the digest recomputed,
    // by the plan
    let d = dir().join("merge-edited");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("sc.toml"), std::fs::read(scenario("m.toml", &[])).unwrap()).unwrap();
    three_shards(&d, ["sc.toml"; 3], [&["-q"], &["-q"], &["-q"]]);
    let merge = ["fleet", "merge", "part0", "part1", "part2", "--out", "all"];
    let (code, _, err) = run_in(&d, &merge);
    assert_eq!(code, 0, "{err}");
    let path = d.join("part1/partial.json");
    let original = std::fs::read_to_string(&path).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&original).unwrap();
    let point = &mut v["points"][0][1];
    point["hit_rate"] = serde_json::json!(0.99);
    point["capacity"] = serde_json::json!(123456);
    std::fs::write(&path, v.to_string()).unwrap();
    let (code, _, err) = run_in(&d, &merge);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("part1/partial.json: its points do not match their SHA-256"), "{err}");
    // the digest recomputed as the writer does (SHA-256 of the compact JSON of `points`)
    let pts = d.join("points-only.json");
    std::fs::write(&pts, v["points"].to_string()).unwrap();
    let sha: String = brokerlab::provenance::sha256_file(&pts).unwrap().iter().map(|b| format!("{b:02x}")).collect();
    v["points_sha256"] = serde_json::json!(sha);
    std::fs::write(&path, v.to_string()).unwrap();
    let (code, _, err) = run_in(&d, &merge);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("part1/partial.json: point 1 is not the sweep's point 1 (capacity = 32"), "{err}");
    assert!(err.contains("capacity 123456"), "{err}");
    std::fs::write(&path, original).unwrap();
    let (code, _, err) = run_in(&d, &merge);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn shards_differing_in_how_they_ran_merge() {
    // merge-threads: --threads, -q, --max-memory and the scenario's path do not change the
    // results: such shards merge, into the one-machine sweep's points byte for byte
    let d = dir().join("merge-threads");
    std::fs::create_dir_all(d.join("elsewhere")).unwrap();
    let text = std::fs::read(scenario("m.toml", &[])).unwrap();
    std::fs::write(d.join("sc.toml"), &text).unwrap();
    std::fs::write(d.join("elsewhere/copy.toml"), &text).unwrap();
    three_shards(
        &d,
        ["sc.toml", "elsewhere/copy.toml", "sc.toml"],
        [&["--threads", "1"], &["--threads", "2", "-q"], &["--max-memory", "1G"]],
    );
    let (code, _, err) = run_in(&d, &["fleet", "merge", "part0", "part1", "part2", "--out", "all"]);
    assert_eq!(code, 0, "{err}");
    let one = ["fleet", "sweep", "sc.toml", "--param", "capacity", "--values", "24,32,48,64,128", "--no-date"];
    let (code, _, err) = run_in(&d, &[&one[..], &["--out", "single"]].concat());
    assert_eq!(code, 0, "{err}");
    for f in ["points.csv", "points.json"] {
        let (a, b) = (std::fs::read(d.join("all").join(f)).unwrap(), std::fs::read(d.join("single").join(f)).unwrap());
        if f == "points.csv" {
            assert_eq!(a, b, "{f}");
        } else {
            // the provenance's command is shard 0's (its --threads), the points the same
            let (a, b): (serde_json::Value, serde_json::Value) =
                (serde_json::from_slice(&a).unwrap(), serde_json::from_slice(&b).unwrap());
            assert_eq!(a["points"], b["points"], "{f}");
        }
    }
    // a different scenario (its bytes) is still another sweep
    std::fs::write(d.join("elsewhere/copy.toml"), [&text[..], b"\n# changed\n"].concat()).unwrap();
    let (code, _, err) = run_in(
        &d,
        &["fleet", "sweep", "elsewhere/copy.toml", "--param", "capacity", "--values", "24,32,48,64,128", "--no-date"]
            .into_iter()
            .chain(["--out", "part1", "--shard", "1/3"])
            .collect::<Vec<_>>(),
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_in(&d, &["fleet", "merge", "part0", "part1", "part2", "--out", "all"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a shard of another sweep"), "{err}");
}

/// Replays a one-line trace `line` (with `extra` flags): (exit code, stderr).
fn replay_line(name: &str, line: &str, extra: &[&str]) -> (i32, String) {
    let t = file(name, format!("{line}\n").as_bytes());
    let mut a = replay(extra);
    a[3] = p(&t).to_string();
    let (code, _, err) = run(&args(&a));
    (code, err)
}

#[test]
fn a_field_given_twice_is_refused() {
    // duplicate-key: serde_json kept the last silently (`delay` beat `delay_ms` in either order)
    for (line, want) in [
        (
            "{\"timestamp\": 0, \"timestamp\": 9, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1]}",
            "field `timestamp` is given twice",
        ),
        (
            "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1], \"hash_ids\": [2]}",
            "field `hash_ids` is given twice",
        ),
        (
            "{\"chat_id\": 1, \"chat_id\": 2, \"parent_chat_id\": -1, \"timestamp\": 1, \"input_length\": 32, \
             \"output_length\": 1, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [1, 2]}",
            "field `chat_id` is given twice",
        ),
        (
            "{\"session_id\": \"a\", \"timestamp\": 0, \"created_time\": 5, \"output_length\": 1, \"hash_ids\": [1]}",
            "fields `timestamp` and `created_time` are both given",
        ),
        (
            "{\"session_id\": \"a\", \"timestamp\": 0, \"input_length\": 16, \"input_tokens\": 32, \"output_length\": 1, \
             \"hash_ids\": [1]}",
            "fields `input_length` and `input_tokens` are both given",
        ),
        (
            "{\"session_id\": \"a\", \"timestamp\": 0, \"output_length\": 1, \"output_tokens\": 2, \"hash_ids\": [1]}",
            "fields `output_length` and `output_tokens` are both given",
        ),
        (
            "{\"timestamp\": 0, \"token_ids\": [1], \"token_ids\": [2], \"output_length\": 1}",
            "field `token_ids` is given twice",
        ),
    ] {
        let (code, err) = replay_line("dup.jsonl", line, &[]);
        assert_eq!(code, 2, "{line}: {err}");
        assert!(err.contains(&format!("dup.jsonl:1: {want}")), "{line}: {err}");
    }
    // delay with delay_ms, on a session's second turn, in either order
    for (a, b) in [("delay", "delay_ms"), ("delay_ms", "delay")] {
        let t = format!(
            "{{\"session_id\": \"a\", \"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}}\n\
             {{\"session_id\": \"a\", \"{a}\": 5, \"{b}\": 7, \"output_length\": 1, \"hash_ids\": [1]}}\n"
        );
        let f = file("dup-delay.jsonl", t.as_bytes());
        let mut r = replay(&[]);
        r[3] = p(&f).to_string();
        bad(&args(&r), &["dup-delay.jsonl:2: fields `delay` and `delay_ms` are both given"]);
    }
}

#[test]
fn messages_name_the_right_thing() {
    // timestamp-overflow: a representable but too large time says overflow
    let bailian = "{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": 1e12, \"input_length\": 32, \
                   \"output_length\": 1, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [1, 2]}";
    let (code, err) = replay_line("big.jsonl", bailian, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("big.jsonl:1: field `timestamp`: 1e12 s overflows 64-bit nanoseconds"), "{err}");
    let dynamo = "{\"session_id\": \"a\", \"timestamp\": 1e16, \"output_length\": 1, \"hash_ids\": [1]}";
    let (code, err) = replay_line("bigd.jsonl", dynamo, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bigd.jsonl:1: field `timestamp`: 1e16 ms overflows 64-bit nanoseconds"), "{err}");
    let (code, err) = replay_line("neg.jsonl", &dynamo.replace("1e16", "-1"), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("expected a non-negative number of milliseconds, got -1"), "{err}");
    // engine-flag-name: each staleness flag named as given, under the batched engine
    for flag in ["--event-delay-ms", "--speculative-ttl-ms", "--stale"] {
        bad(
            &args(&replay(&[flag, "5", "--engine", "batched"])),
            &[&format!("{flag}: expected 0 with --engine batched")],
        );
    }
}

#[test]
fn bench_inputs_are_checked() {
    // bench-capacity-file: a request the batched engine cannot take names the trace and line
    let mut t = String::from("\n");
    for i in 0..3 {
        t += &format!(
            "{{\"timestamp\": {i}, \"input_length\": 2048, \"output_length\": 2, \"hash_ids\": [1, 2, 3, 4]}}\n"
        );
    }
    let f = file("bench.jsonl", t.as_bytes());
    bad(
        &["fleet", "bench", "--trace", p(&f), "--capacity", "16", "--no-python", "--repeats", "1"],
        &[
            "bench.jsonl:2: request 0: request field `input_length`",
            "at most one pod's KV capacity (--capacity x 16 tokens)",
        ],
    );
    // bench-repeats-zero: "best of 0" is not a measurement
    for r in ["0", "-1", "1001"] {
        bad(&["fleet", "bench", "--trace", p(&f), "--repeats", r], &["--repeats", "expected 1 to 1000 repeats"]);
    }
}

#[test]
fn dynamo_outcomes_name_the_session_and_line() {
    // dynamo-outcomes: the index is the dispatch order the closed loop decides; each line adds
    // the session and the trace line of its turn
    let t = file(
        "sessions-out.jsonl",
        b"{\"session_id\": \"a\", \"timestamp\": 0, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2]}\n\
          {\"session_id\": \"b\", \"timestamp\": 1, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [3, 4]}\n\
          {\"session_id\": \"a\", \"delay\": 0, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2]}\n\
          {\"timestamp\": 2, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [5, 6]}\n",
    );
    let out = t.with_file_name("out.jsonl");
    let mut a = replay(&["--engine", "batched", "--outcomes", p(&out), "--trace-block-size", "16"]);
    a[3] = p(&t).to_string();
    let (code, _, err) = run(&args(&a));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4);
    let mut seen: Vec<(serde_json::Value, u64)> =
        lines.iter().map(|l| (l["session_id"].clone(), l["line"].as_u64().unwrap())).collect();
    seen.sort_by_key(|s| s.1);
    assert_eq!(
        seen,
        [
            (serde_json::json!("a"), 1),
            (serde_json::json!("b"), 2),
            (serde_json::json!("a"), 3),
            (serde_json::Value::Null, 4)
        ]
    );
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["index"], i as u64);
    }
}
