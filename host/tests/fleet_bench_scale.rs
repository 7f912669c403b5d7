//! Issue 28's bench modes at a small size (CI never runs the 1M-request or 1,000-configuration
//! bench): `fleet bench --scale` streams the generated trace and notes the peak RSS at 1/8, 1/4,
//! 1/2 and all of it, and simulates what `fleet run` does on the same workload;
//! `fleet bench --sweep-configs N` runs N grid points on 1 and on all threads, checked equal to
//! each other and (its first points) to the file's replay.

use std::path::PathBuf;
use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab")).args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().expect("exited"), text(&out.stdout), text(&out.stderr))
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-bench-scale-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn scale_bench_streams_and_matches_fleet_run() {
    let r = json(&["fleet", "bench", "--scale", "--scale-requests", "2000", "--scale-pods", "16", "--json"]);
    assert_eq!(r["requests"], 2000);
    assert_eq!(r["pods"], 16);
    assert_eq!(r["router"], "llm-d-precise");
    let marks: Vec<u64> =
        r["checkpoints"].as_array().unwrap().iter().map(|c| c["requests"].as_u64().unwrap()).collect();
    assert_eq!(marks, [250, 500, 1000, 2000]);
    let rss: Vec<u64> =
        r["checkpoints"].as_array().unwrap().iter().map(|c| c["peak_rss_bytes"].as_u64().unwrap()).collect();
    assert!(rss.windows(2).all(|w| w[0] <= w[1]) && rss[0] > 0, "{rss:?}");
    assert!(r["wall_s"].as_f64().unwrap() > 0.0 && r["generate_s"].as_f64().unwrap() > 0.0);

    // the same workload through `fleet run`: the bench simulates what the CLI does
    let sc = dir().join("scale.toml");
    let text = format!(
        "name = \"scale\"\n[workload]\nseed = 28\nrequests = 2000\ntenants = 4096\nusers_per_tenant = 20\n\
         prefix_tokens = 2048\nsuffix_tokens = [64, 512]\noutput_tokens = [32, 256]\npopularity = \"uniform\"\n\
         rate_per_s = {}\nlayout = \"stable-prefix-first\"\n[fleet]\npods = 16\ncapacity = 19208\n\
         router = \"llm-d-precise\"\nalpha = 1.0\n",
        3.906 * 16.0
    );
    std::fs::write(&sc, text).unwrap();
    let f = json(&["fleet", "run", sc.to_str().unwrap(), "--engine", "batched", "--json", "--no-date"]);
    for k in ["steps", "makespan_s", "hit_rate", "ttft_p90", "preemptions"] {
        assert_eq!(r[k], f[k], "{k}: bench {} vs fleet run {}", r[k], f[k]);
    }
}

/// A Mooncake trace of `n` requests over 24 shared 2-id prefixes (512-token ids), 20 ms apart.
fn small_trace(n: usize) -> PathBuf {
    let mut t = String::new();
    for i in 0..n {
        let g = (i * 7) % 24;
        let own = 1_000 + i as u64;
        t += &format!(
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [{}, {}, {own}]}}\n",
            i * 20,
            1024 + 300 + (i % 200),
            16 + (i % 64),
            2 * g,
            2 * g + 1
        );
    }
    let p = dir().join(format!("small-{n}.jsonl"));
    std::fs::write(&p, t).unwrap();
    p
}

#[test]
fn sweep_configs_bench_splits_threads_and_checks_the_file() {
    let t = small_trace(2000);
    let r = json(&["fleet", "bench", "--sweep-configs", "4", "--trace", t.to_str().unwrap(), "--json"]);
    assert_eq!(r["configs"], 4);
    assert_eq!(r["requests"], 2000);
    assert_eq!(r["file_checked"], 2);
    assert_eq!(r["split"], "split");
    assert!(r["one_thread_s"].as_f64().unwrap() > 0.0 && r["all_threads_s"].as_f64().unwrap() > 0.0);
    assert!(r["ratio"].as_f64().unwrap() > 0.0);
    // 4 points evenly over the grid: one per router of the first four
    let routers: Vec<&str> = r["per_router_s"].as_array().unwrap().iter().map(|x| x[0].as_str().unwrap()).collect();
    assert_eq!(routers, ["llm-d-precise", "llm-d-approximate", "llm-d-load", "gie-default"]);
    // each point's own time and work, in grid order (the threads take them heaviest first)
    let points = r["points"].as_array().unwrap();
    let by_point: Vec<&str> = points.iter().map(|p| p["point"]["router"].as_str().unwrap()).collect();
    assert_eq!(by_point, routers);
    for p in points {
        assert!(p["s"].as_f64().unwrap() > 0.0 && p["steps"].as_u64().unwrap() > 0, "{p}");
        assert!(p["cpu_s"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["restarts"].is_u64(), "{p}");
    }
    // every point ran on one of the threads of the every-core run
    let per_thread = r["per_thread"].as_array().unwrap();
    assert_eq!(per_thread.len() as u64, r["threads"].as_u64().unwrap());
    assert_eq!(per_thread.iter().map(|t| t[1].as_u64().unwrap()).sum::<u64>(), 4);
    let one = json(&[
        "fleet",
        "bench",
        "--sweep-configs",
        "1",
        "--trace",
        t.to_str().unwrap(),
        "--sweep-threads",
        "one",
        "--json",
    ]);
    assert!(one["all_threads_s"].is_null() && one["ratio"].is_null());
}

#[test]
fn bench_mode_flags_are_checked() {
    for n in ["0", "1001", "x"] {
        let (code, _, err) = run(&["fleet", "bench", "--sweep-configs", n]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--sweep-configs"), "{err}");
    }
    let (code, _, err) = run(&["fleet", "bench", "--scale", "--route"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--scale") && err.contains("--route"), "{err}");
    let (code, _, err) = run(&["fleet", "bench", "--scale", "--scale-pods", "1025"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--scale-pods"), "{err}");
    let (code, _, err) = run(&["fleet", "bench", "--sweep-configs", "2", "--sweep-threads", "three"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--sweep-threads") && err.contains("split"), "{err}");
}
