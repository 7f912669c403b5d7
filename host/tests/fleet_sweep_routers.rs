//! `fleet sweep --router LIST`: any named router (shipped presets included) swept over a
//! parameter; the points name their router, and `--param alpha` with a router that does not read
//! alpha is exit 2.

use std::path::{Path, PathBuf};
use std::process::Command;

fn scenario(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join("scenarios/multi-tenant.toml")).unwrap();
    let small = text.replace("requests = 24000", "requests = 300");
    assert_ne!(small, text, "the scenario's request count moved");
    let p = dir.join("small.toml");
    std::fs::write(&p, small).unwrap();
    p
}

fn sweep(dir: &Path, extra: &[&str]) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "sweep", "-q", "--no-date", "--threads", "2"])
        .arg(scenario(dir))
        .arg("--out")
        .arg(dir.join("out"))
        .args(extra)
        .output()
        .unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn presets_sweep_over_pods_capacity_and_rate_and_name_their_router() {
    let dir = std::env::temp_dir().join(format!("brokerlab-sweep-routers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let routers = ["llm-d-precise", "dynamo-kv", "round-robin"];
    for (param, values) in [("pods", "2,4"), ("capacity", "64,256"), ("rate", "1,2")] {
        let (code, err) = sweep(&dir, &["--param", param, "--values", values, "--router", &routers.join(",")]);
        assert_eq!(code, 0, "{param}: {err}");
        let csv = std::fs::read_to_string(dir.join("out/points.csv")).unwrap();
        let mut lines = csv.lines();
        let head: Vec<&str> = lines.next().unwrap().split(',').collect();
        let col = head.iter().position(|h| *h == "router").unwrap();
        let named: Vec<String> = lines.map(|l| l.split(',').nth(col).unwrap().to_string()).collect();
        // each router in the order given, once per value
        let want: Vec<String> = routers.iter().flat_map(|r| [r.to_string(), r.to_string()]).collect();
        assert_eq!(named, want, "{param}");
        let json = std::fs::read_to_string(dir.join("out/points.json")).unwrap();
        for r in routers {
            assert!(json.contains(&format!("\"{r}\"")), "{param}: {r} missing from points.json");
        }
    }
    let (code, err) = sweep(&dir, &["--param", "alpha", "--values", "0,2", "--router", "llm-d-precise"]);
    assert_eq!(code, 2);
    assert!(err.contains("--router llm-d-precise does not read it"), "{err}");
    let (code, err) = sweep(&dir, &["--param", "pods", "--values", "2", "--router", "no-such"]);
    assert_eq!(code, 2);
    assert!(err.contains("--router"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
