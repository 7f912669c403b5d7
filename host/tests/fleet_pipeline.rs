//! The trace read on its own thread (`fleet replay --threads`, `fleet run --threads`;
//! `host/src/fleet/run/pipeline.rs`): the replay sees the same requests in the same order as the
//! one-thread feed, so every output is byte-identical, and an error stops both at the same request
//! with the same message and exit code.
//!
//! `BROKERLAB_BIN=/path/to/brokerlab` runs the command-line tests against another build.

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;

use brokerlab::fleet::run::{RequestSource, TraceSource};
use brokerlab::fleet::scenario::Streamed;
use brokerlab_core::fleet::{Error as CoreError, Request};

fn exe() -> PathBuf {
    std::env::var_os("BROKERLAB_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_brokerlab")), PathBuf::from)
}

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// A file in a directory of its own, removed with it when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(d) = self.0.parent() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A fresh file `name` holding `text` (tests run in parallel).
fn file(name: &str, text: &str) -> Scratch {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "brokerlab-pipeline-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    Scratch(p)
}

/// (exit code, stdout less the recorded command line, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(exe()).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains("\"command\":"))
        .collect::<Vec<_>>()
        .join("\n");
    (out.status.code().expect("exited"), stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The same command with `--threads 1` and `--threads 2`: the same exit code, stdout and stderr.
fn same_both_ways(args: &[&str]) -> (i32, String, String) {
    let one = run(&[args, &["--threads", "1"]].concat());
    let two = run(&[args, &["--threads", "2"]].concat());
    assert_eq!(one, two, "{args:?}");
    one
}

#[test]
fn vendored_traces_replay_the_same_on_one_and_two_threads() {
    for trace in ["traces/conversation_trace.jsonl.zst", "traces/synthetic_trace.jsonl.zst"] {
        let trace = repo(trace);
        for (engine, router) in
            [("batched", "llm-d-precise"), ("batched", "llm-d-approximate"), ("fifo", "round-robin")]
        {
            let t = trace.to_str().unwrap();
            let args = replay_args(t, engine, router, "8");
            let (code, stdout, stderr) = same_both_ways(&args);
            assert_eq!(code, 0, "{args:?}: {stderr}");
            assert!(stdout.contains("\"requests\""), "{stdout}");
        }
    }
}

/// The first 1,000 lines of the synthetic trace (4 batches of 256 requests and a part).
fn lines() -> Vec<String> {
    let mut text = String::new();
    brokerlab::fleet::input::file::open(&repo("traces/synthetic_trace.jsonl.zst"))
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text.lines().take(1000).map(str::to_string).collect()
}

/// Line `n` (1-based) made an empty prompt, which the batched engine refuses (its timestamp kept).
fn empty_prompt(lines: &mut [String], n: usize) {
    let mut v: serde_json::Value = serde_json::from_str(&lines[n - 1]).unwrap();
    v["input_length"] = 0.into();
    v["hash_ids"] = serde_json::json!([]);
    lines[n - 1] = v.to_string();
}

/// Line `n` (1-based) made unreadable.
fn bad_field(lines: &mut [String], n: usize) {
    lines[n - 1] = "{\"timestamp\": 1, \"input_length\": \"many\", \"output_length\": 1, \"hash_ids\": []}".into();
}

/// A line made bad: how, and its number.
type Edit = (fn(&mut [String], usize), usize);

#[test]
fn a_bad_line_stops_both_ways_at_the_same_line() {
    // (lines made bad, the line named): a bad field, a request the engine refuses, both in
    // either order (the first one is reported), one at the very start, one past the last batch
    let cases: [(&[Edit], usize, &str); 5] = [
        (&[(bad_field, 600)], 600, "input_length"),
        (&[(empty_prompt, 400), (bad_field, 700)], 400, "at least 1 token"),
        (&[(bad_field, 300), (empty_prompt, 500)], 300, "input_length"),
        (&[(empty_prompt, 1)], 1, "at least 1 token"),
        (&[(bad_field, 1000)], 1000, "input_length"),
    ];
    let base = lines();
    for (edits, named, says) in cases {
        let mut l = base.clone();
        for (edit, n) in edits {
            edit(&mut l, *n);
        }
        let scratch = file("t.jsonl", &(l.join("\n") + "\n"));
        let p = scratch.0.to_str().unwrap();
        let args = replay_args(p, "batched", "llm-d-precise", "4");
        let (code, stdout, stderr) = same_both_ways(&args);
        assert_eq!(code, 2, "{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(stderr.contains(&format!("{p}:{named}: ")) && stderr.contains(says), "{named}: {stderr}");
    }
}

/// `fleet replay` of `trace` on `pods` pods of 16,384 blocks, JSON without a date, quiet.
fn replay_args<'a>(trace: &'a str, engine: &'a str, router: &'a str, pods: &'a str) -> [&'a str; 15] {
    [
        "fleet",
        "replay",
        "--trace",
        trace,
        "--engine",
        engine,
        "--router",
        router,
        "--pods",
        pods,
        "--capacity",
        "16384",
        "--json",
        "--no-date",
        "-q",
    ]
}

/// A request as a sink saw it.
type Seen = (u64, u64, u64, Vec<u64>);

/// Feeds `src` to a sink that records every request and refuses the `fail_at`-th (0-based):
/// what it saw and the error's code and message.
fn feed_recorded(src: &mut dyn RequestSource, fail_at: Option<usize>) -> (Vec<Seen>, Option<(i32, String)>) {
    let mut seen = Vec::new();
    let r = src.feed(&mut |r: &Request<'_>| {
        if fail_at == Some(seen.len()) {
            return Err(CoreError::Poisoned);
        }
        seen.push((r.arrival_ns, r.input_tokens, r.output_tokens, r.keys.to_vec()));
        Ok(())
    });
    (seen, r.err().map(|e| (e.code(), e.to_string())))
}

#[test]
fn a_refused_request_is_named_by_its_line_both_ways() {
    let mut l = lines();
    bad_field(&mut l, 900);
    let scratch = file("t.jsonl", &(l.join("\n") + "\n"));
    let path = &scratch.0;
    for fail_at in [None, Some(0), Some(255), Some(256), Some(700), Some(898), Some(899)] {
        let feed = |pipelined| {
            let mut src = TraceSource { pipelined, ..TraceSource::new(path.clone(), 512) };
            feed_recorded(&mut src, fail_at)
        };
        let (one, two) = (feed(false), feed(true));
        assert_eq!(one, two, "{fail_at:?}");
        let named = fail_at.map_or(900, |k| k + 1);
        let msg = &one.1.as_ref().expect("an error").1;
        assert!(msg.starts_with(&format!("{}:{named}: ", path.display())), "{msg}");
        assert_eq!(one.0.len(), fail_at.unwrap_or(899));
    }
}

#[test]
fn a_generated_workload_feeds_the_same_requests_both_ways() {
    let (sc, _) = brokerlab::fleet::bench::scale::scale_setup(3_000, 16).unwrap();
    for fail_at in [None, Some(0), Some(1_234)] {
        let feed = |pipelined| {
            let mut src = Streamed::new(sc.workload, &sc.origin).unwrap();
            src.set_pipelined(pipelined);
            feed_recorded(&mut src, fail_at)
        };
        let (one, two) = (feed(false), feed(true));
        assert_eq!(one.0.len(), fail_at.unwrap_or(3_000));
        assert_eq!(one, two, "{fail_at:?}");
    }
}

#[test]
fn a_scenario_runs_the_same_on_one_and_two_threads() {
    let sc = repo("scenarios/multi-tenant.toml");
    let sc = sc.to_str().unwrap();
    for engine in ["fifo", "batched"] {
        let (code, stdout, stderr) =
            same_both_ways(&["fleet", "run", sc, "--engine", engine, "--json", "--no-date", "-q"]);
        assert_eq!(code, 0, "{stderr}");
        assert!(!stdout.is_empty());
    }
}
