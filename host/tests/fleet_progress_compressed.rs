//! The progress of a compressed trace counts its text read out of its text (known once the
//! stream is checked), not out of the compressed file's size: never "2.6 MiB of 0.3 MiB read
//! (761%)", and not a full bar a tenth of the way through.

use std::path::Path;
use std::process::Command;

/// (read MiB, of MiB, percent, requests) of a status line.
fn parse(l: &str) -> Option<(f64, f64, f64, u64)> {
    let rest = l.split("replay: ").nth(1)?;
    let mut w = rest.split_whitespace();
    let read: f64 = w.next()?.parse().ok()?;
    let of: f64 = rest.split(" of ").nth(1)?.split_whitespace().next()?.parse().ok()?;
    let pct: f64 = rest.split('(').nth(1)?.split('%').next()?.parse().ok()?;
    let req: u64 = rest.rsplit(", ").next()?.split_whitespace().next()?.parse().ok()?;
    Some((read, of, pct, req))
}

#[test]
fn compressed_trace_progress_counts_text_out_of_text() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let trace = root.join("traces/conversation_trace.jsonl.zst");
    let file_mib = std::fs::metadata(&trace).unwrap().len() as f64 / (1024.0 * 1024.0);
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "--pods", "4", "--capacity", "4096", "--router", "round-robin", "--trace"])
        .arg(&trace)
        // status lines (stderr is not a terminal here) every 10 ms
        .env("BROKERLAB_PROGRESS_INTERVAL", "0.01")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let rows: Vec<(f64, f64, f64, u64)> = err.lines().filter_map(parse).collect();
    let started: Vec<_> = rows.iter().filter(|r| r.3 > 0).collect();
    assert!(!started.is_empty(), "no progress lines after the first requests: {err}");
    for &&(read, of, pct, req) in &started {
        assert!(pct <= 100.0 && read <= of + 0.05, "{err}");
        // the text's length (about 2.9 MiB), not the compressed file's 0.3 MiB
        assert!(of > 2.0 * file_mib, "of {of} MiB at {req} requests: {err}");
        // not full early: the share of text read follows the requests replayed (12,031 in all)
        if req < 6000 {
            assert!(pct < 75.0, "{pct}% at {req} requests: {err}");
        }
    }
    assert!(err.contains("done, "), "{err}");
}
