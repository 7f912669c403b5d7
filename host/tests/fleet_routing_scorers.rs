//! `--routing-scorers NAME:W,...` is the router config file of those `[[scorers]]`: the same run,
//! to the byte (provenance aside); a bad list is exit 2 naming the flag.

use std::path::Path;
use std::process::Command;

fn replay(extra: &[&str]) -> (i32, String, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "-q", "--json", "--no-date", "--pods", "8", "--capacity", "16384", "--trace"])
        .arg(root.join("traces/conversation_trace.jsonl.zst"))
        .args(extra)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn without_provenance(json: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
    v.as_object_mut().unwrap().remove("provenance");
    v
}

#[test]
fn inline_scorers_equal_their_config_file() {
    let dir = std::env::temp_dir().join(format!("brokerlab-routing-scorers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("scorers.toml");
    std::fs::write(
        &file,
        "[[scorers]]\ntype = \"precise-prefix-cache\"\nweight = 2.0\n[[scorers]]\ntype = \"kv-cache-utilization\"\n\
         weight = 1.0\n[[scorers]]\ntype = \"queue\"\nweight = 1.0\n",
    )
    .unwrap();
    let (c1, inline, e1) = replay(&["--routing-scorers", "precise-prefix-cache:2,kv-cache-utilization:1,queue:1"]);
    assert_eq!(c1, 0, "{e1}");
    let (c2, from_file, e2) = replay(&["--router-config", file.to_str().unwrap()]);
    assert_eq!(c2, 0, "{e2}");
    let (a, b) = (without_provenance(&inline), without_provenance(&from_file));
    assert_eq!(a, b);
    assert!(
        a["pipeline"].as_str().unwrap().contains("scorers precise-prefix-cache 2, kv-cache-utilization 1, queue 1")
    );
    // a different weight is a different router
    let (_, other, _) = replay(&["--routing-scorers", "precise-prefix-cache:1,queue:3"]);
    assert_ne!(without_provenance(&other)["pipeline"], a["pipeline"]);
    for bad in ["bogus:1", "queue", "queue:x", ""] {
        let (c, _, e) = replay(&["--routing-scorers", bad]);
        assert_eq!(c, 2, "{bad}: {e}");
        assert!(e.contains("--routing-scorers"), "{bad}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
