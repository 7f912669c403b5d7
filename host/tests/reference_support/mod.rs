//! What the reference comparisons share: python3 required, temp files, hand-written traces, and
//! one run of the engine and of a Python reference on the same trace, compared request by request.
#![allow(dead_code)] // each test file uses its part

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A comparison that did not run is a failure, not a pass: python3 must be there
/// (scripts/test.sh installs it). `what` names the comparison.
pub fn need_python3(what: &str) {
    let ok = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(ok, "python3 not found: {what} needs it (scripts/test.sh installs it)");
}

/// A temp path of this process, `prefix` naming the test file.
pub fn tmp(prefix: &str, name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("brokerlab-{prefix}-{}-{name}", std::process::id()))
}

/// A trace line: (timestamp ms, input_length, output_length, hash_ids).
pub type Line = (u64, u64, u64, Vec<u64>);

/// A Mooncake trace of `lines` at `path`.
pub fn write_lines(path: &Path, lines: &[Line]) {
    let text: Vec<String> = lines
        .iter()
        .map(|(ts, l, o, ids)| {
            format!("{{\"timestamp\": {ts}, \"input_length\": {l}, \"output_length\": {o}, \"hash_ids\": {ids:?}}}")
        })
        .collect();
    std::fs::write(path, text.join("\n")).unwrap();
}

/// What one run of both saw: the engine's `--json`, the reference's JSON, the engine's
/// `--outcomes` lines (already equal to the reference's requests, one by one).
pub struct Both {
    pub summary: Value,
    pub reference: Value,
    pub outcomes: Vec<Value>,
}

/// Runs `fleet replay --engine batched` and the reference `script` (tests/reference/, with
/// `script_args` of its own) on `trace` with `args`, at once; both must succeed and every
/// request's `--outcomes` line must equal the reference's.
pub fn run_both(
    script: &str,
    script_args: &[&str],
    trace: &Path,
    args: &[String],
    label: &str,
    out_file: &Path,
) -> Both {
    let py = Command::new("python3")
        .arg(repo().join("tests/reference").join(script))
        .arg("--trace")
        .arg(trace)
        .args(script_args)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 starts");
    let ours = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "--engine", "batched", "--json", "-q", "--trace"])
        .arg(trace)
        .arg("--outcomes")
        .arg(out_file)
        .args(args)
        .output()
        .expect("brokerlab starts");
    let theirs = py.wait_with_output().expect("python3 runs");
    assert!(ours.status.success(), "{label} {args:?}: brokerlab: {}", String::from_utf8_lossy(&ours.stderr));
    assert!(
        theirs.status.success(),
        "{label} {args:?}: reference: {}{}",
        String::from_utf8_lossy(&theirs.stdout),
        String::from_utf8_lossy(&theirs.stderr)
    );
    let summary: Value = serde_json::from_slice(&ours.stdout).expect("brokerlab --json");
    let reference: Value = serde_json::from_slice(&theirs.stdout).expect("reference JSON");
    let text = std::fs::read_to_string(out_file).expect("--outcomes written");
    std::fs::remove_file(out_file).ok();
    let outcomes: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("outcome line")).collect();
    let expected = reference["requests"].as_array().expect("requests");
    assert_eq!(outcomes.len(), expected.len(), "{label} {args:?}: number of requests");
    for (o, e) in outcomes.iter().zip(expected) {
        assert_eq!(o, e, "{label} {args:?}: request {} differs (ours, reference)", e["index"]);
    }
    Both { summary, reference, outcomes }
}

/// `args` without `--alpha A` unless `--router prefix-aware` is among them: `--alpha` is
/// prefix-aware's load penalty and any other router refuses it (exit 2).
pub fn alpha_only_where_it_applies(args: Vec<String>) -> Vec<String> {
    if args.windows(2).any(|w| w[0] == "--router" && w[1] == "prefix-aware") {
        return args;
    }
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        if a == "--alpha" {
            it.next();
        } else {
            out.push(a);
        }
    }
    out
}
