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

/// `fleet sweep --router-config FILE...`: each file's points after the routers', named by the
/// file's stem (a changed pipeline's kind is `custom`: two files would be named alike), each
/// point's figures those `fleet run --router-config` prints for the same pods; two runs of one
/// name are exit 2.
#[test]
fn router_config_files_sweep_beside_the_routers() {
    let dir = std::env::temp_dir().join(format!("brokerlab-sweep-router-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let custom = dir.join("queue-heavy.toml");
    std::fs::write(
        &custom,
        "preset = \"llm-d-precise\"\n[[scorers]]\ntype = \"queue\"\nweight = 1.0\n[[scorers]]\ntype = \"precise-prefix-cache\"\nweight = 3.0\n",
    )
    .unwrap();
    let custom = custom.to_str().unwrap().to_string();
    let other = dir.join("prefix-heavy.toml");
    std::fs::write(
        &other,
        "preset = \"llm-d-precise\"\n[[scorers]]\ntype = \"queue\"\nweight = 1.0\n[[scorers]]\ntype = \"precise-prefix-cache\"\nweight = 9.0\n",
    )
    .unwrap();
    let other = other.to_str().unwrap().to_string();
    let (code, err) = sweep(
        &dir,
        &[
            "--param",
            "pods",
            "--values",
            "2,3",
            "--router",
            "round-robin",
            "--router-config",
            &custom,
            "--router-config",
            &other,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let csv = std::fs::read_to_string(dir.join("out/points.csv")).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap_or_else(|| panic!("no {n} column"));
    let rows: Vec<Vec<String>> = lines.map(|l| l.split(',').map(String::from).collect()).collect();
    let named: Vec<&str> = rows.iter().map(|r| r[col("router")].as_str()).collect();
    assert_eq!(named, ["round-robin", "round-robin", "queue-heavy", "queue-heavy", "prefix-heavy", "prefix-heavy"]);
    for r in &rows[2..4] {
        let pods = &r[col("pods")];
        let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
            .args(["fleet", "run", "-q", "--no-date", "--json", "--pods", pods, "--router-config", &custom])
            .arg(scenario(&dir))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for k in ["hit_rate", "requests"] {
            let got: f64 = r[col(k)].parse().unwrap();
            assert_eq!(got, j[k].as_f64().unwrap(), "pods {pods}: {k}");
        }
        assert!(r[col("hit_rate")].parse::<f64>().unwrap() > 0.0);
    }
    // the readable table names them too
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "sweep", "-q", "--no-date", "--threads", "2", "--param", "pods", "--values", "2"])
        .arg(scenario(&dir))
        .args(["--out", dir.join("out2").to_str().unwrap(), "--router-config", &custom, "--router-config", &other])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("queue-heavy") && text.contains("prefix-heavy") && !text.contains("custom"), "{text}");
    // two runs of one name: refused, naming the file
    let preset = dir.join("llm-d-precise.toml");
    std::fs::write(&preset, "preset = \"llm-d-precise\"\n").unwrap();
    let preset = preset.to_str().unwrap().to_string();
    for extra in [
        vec!["--router-config", custom.as_str(), "--router-config", custom.as_str()],
        vec!["--router", "llm-d-precise", "--router-config", preset.as_str()],
    ] {
        let mut args = vec!["--param", "pods", "--values", "2"];
        args.extend(extra);
        let (code, err) = sweep(&dir, &args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("--router-config") && err.contains("named"), "{err}");
    }
    // a pipeline that does not read alpha under --param alpha
    let (code, err) = sweep(
        &dir,
        &["--param", "alpha", "--values", "0,2", "--router", "prefix-aware", "--router-config", custom.as_str()],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--router-config") && err.contains("does not read it"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
