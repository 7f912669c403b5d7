//! `brokerlab audit` without the firmware part: sizes add up and meet the per-block bound.

use std::process::Command;

#[test]
fn audit_json_adds_up() {
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["audit", "llm-d", "--no-firmware", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let sum: u64 = rows.iter().map(|r| r["bytes"].as_u64().unwrap()).sum();
    assert_eq!(sum, v["total_bytes"].as_u64().unwrap());
    for r in rows {
        assert_eq!(r["bytes"].as_u64(), Some(r["element_bytes"].as_u64().unwrap() * r["elements"].as_u64().unwrap()));
    }
    // llm-d: 8 pods x 9375 blocks; slots are 16 bytes each.
    assert_eq!(rows[0]["bytes"].as_u64(), Some(8 * 9375 * 16));
    let per_block = v["pod_bytes_per_block"].as_f64().unwrap();
    assert!(per_block > 16.0 && per_block <= 32.0, "{per_block}");
    assert!(v["no_heap"][0].as_str().unwrap().contains("#![no_std] present"));
}

#[test]
fn audit_names_a_bad_scenario() {
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["audit", "/nonexistent.toml", "--no-firmware"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.toml"));
}

/// Without qemu-system-arm the firmware part says so, naming it (not the thumbv7m target).
#[test]
fn a_missing_qemu_is_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["audit", "multi-tenant"])
        .env("PATH", "/nonexistent-for-this-test")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("qemu-system-arm") && err.contains("--no-firmware"), "{err}");
    assert!(!err.contains("thumbv7m"), "{err}");
}
