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

/// The binary does not build the firmware: without the figures file `cargo xtask fw` writes, the
/// firmware part says where it looked and how to get one (exit 1), and never blames a target.
#[test]
fn missing_firmware_figures_are_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["audit", "multi-tenant", "--firmware-figures", "/nonexistent/figures.json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/nonexistent/figures.json") && err.contains("cargo xtask fw"), "{err}");
    assert!(err.contains("--no-firmware"), "{err}");
}

/// A figures file is read as it is, and one that is not figures is bad input naming the file.
#[test]
fn firmware_figures_are_read_from_the_file() {
    let dir = std::env::temp_dir().join(format!("brokerlab-audit-figures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("figures.json");
    std::fs::write(
        &good,
        r#"{"elf":"x","machine":"mps2-an385","text":1000,"data":8,"bss":2000,"measurements":{"stack_peak_bytes":512,"ram_bytes":4194304},"allocator_symbols":[],"exit_code":0}"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["audit", "multi-tenant", "--json", "--firmware-figures"])
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["firmware"]["text"], 1000);
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{}").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["audit", "multi-tenant", "--firmware-figures"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.json") && err.contains("cargo xtask fw"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
