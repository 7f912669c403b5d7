//! What the `fleet run` rule tests share: one scenario run with `--json --outcomes`, read back.
#![allow(dead_code)] // each test file uses its part

use std::process::Command;

use serde_json::Value;

/// Runs `fleet run --json --outcomes` on scenario `text` in a fresh temporary directory named by
/// `suite` and `tag` (removed afterwards): (exit code, stderr, JSON, outcome lines).
pub fn run_scenario(suite: &str, tag: &str, text: &str) -> (i32, String, Value, Vec<Value>) {
    let d = std::env::temp_dir().join(format!("brokerlab-{suite}-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let sc = d.join("s.toml");
    std::fs::write(&sc, text).unwrap();
    let out = d.join("o.jsonl");
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "run", "-q", "--json", "--no-date"])
        .arg(&sc)
        .arg("--outcomes")
        .arg(&out)
        .output()
        .unwrap();
    let code = o.status.code().unwrap_or(-1);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let json = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let lines =
        std::fs::read_to_string(&out).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let _ = std::fs::remove_dir_all(&d);
    (code, err, json, lines)
}

/// `v[k]` as an integer; a missing or non-integer key fails naming it.
pub fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}
