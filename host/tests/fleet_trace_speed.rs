//! `--speedup X`, `--start-at S`, `--max-requests N`: arrivals retimed exactly in integer ns,
//! checked request by request against the unchanged replay's per-request lines.

use std::process::Command;

fn trace() -> String {
    let mut t = String::new();
    for i in 0..40u64 {
        // timestamps in ms, irregular; two shared blocks then a request's own
        t += &format!(
            "{{\"timestamp\": {}, \"input_length\": 1536, \"output_length\": 5, \"hash_ids\": [1, 2, {}]}}\n",
            i * 37 + (i * i) % 11,
            100 + i
        );
    }
    t
}

/// The (arrival_ns) of each request of a batched replay with `extra` flags, in request order.
fn arrivals(dir: &std::path::Path, extra: &[&str]) -> Vec<u64> {
    let out = dir.join(format!("o{}.jsonl", extra.join("_").replace(['-', '.'], "")));
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "-q", "--pods", "2", "--capacity", "512", "--router", "round-robin"])
        .args(["--engine", "batched", "--trace"])
        .arg(dir.join("t.jsonl"))
        .arg("--outcomes")
        .arg(&out)
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    let mut v: Vec<(u64, u64)> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            let j: serde_json::Value = serde_json::from_str(l).unwrap();
            (j["index"].as_u64().unwrap(), j["arrival_ns"].as_u64().unwrap())
        })
        .collect();
    v.sort_unstable();
    v.into_iter().map(|x| x.1).collect()
}

#[test]
fn speedup_start_at_and_max_requests_retime_exactly() {
    let dir = std::env::temp_dir().join(format!("brokerlab-trace-speed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t.jsonl"), trace()).unwrap();
    let base = arrivals(&dir, &[]);
    assert_eq!(base.len(), 40);
    // X = 2.5 = 5/2: floor(t x 2 / 5)
    let fast = arrivals(&dir, &["--speedup", "2.5"]);
    assert_eq!(fast, base.iter().map(|t| t * 2 / 5).collect::<Vec<_>>());
    // X = 0.3: three tenths as fast, floor(t x 10 / 3)
    let slow = arrivals(&dir, &["--speedup", "0.3"]);
    assert_eq!(slow, base.iter().map(|t| t * 10 / 3).collect::<Vec<_>>());
    // from 0.5 s, at most 7 requests, twice as fast
    let cut = arrivals(&dir, &["--start-at", "0.5", "--max-requests", "7", "--speedup", "2"]);
    let want: Vec<u64> = base.iter().filter(|&&t| t >= 500_000_000).take(7).map(|t| (t - 500_000_000) / 2).collect();
    assert_eq!(cut, want);
    assert_eq!(cut.len(), 7);
    // bad values are exit 2 naming the flag
    for (flag, v) in [("--speedup", "0"), ("--speedup", "-2"), ("--speedup", "1e3"), ("--start-at", "x")] {
        let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
            .args(["fleet", "replay", "-q", "--pods", "2", "--capacity", "64", "--router", "round-robin", "--trace"])
            .arg(dir.join("t.jsonl"))
            .args([flag, v])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{flag} {v}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(flag), "{flag} {v}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
