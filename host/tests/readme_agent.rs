//! README "Run a real agent" works as written: its shell block is run with bash from a directory
//! holding the repository's `examples/`, `brokerlab` on the PATH, and what it printed is what
//! the README says.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

#[test]
fn the_readme_agent_block_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let at = readme.find("### Run a real agent").expect("the section");
    let rest = &readme[at..];
    let start = rest.find("```sh\n").expect("its shell block") + 6;
    let block = &rest[start..start + rest[start..].find("```").unwrap()];
    assert!(block.contains("task run examples/agent-openai.toml"), "{block}");
    let dir = std::env::temp_dir().join(format!("brokerlab-readme-agent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(root.join("examples").canonicalize().unwrap(), dir.join("examples")).unwrap();
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", block])
        .current_dir(&dir)
        .env("PATH", path)
        .env_remove("BROKERLAB_DB")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains(
            "completed (4 steps, 13 records); the model's answer: \"Order o-1042 was refunded (49.99) and the customer \
             was told.\""
        ),
        "{stdout}"
    );
    assert!(stdout.contains("answer"), "{stdout}");
    assert_eq!(std::fs::read_to_string(dir.join("outbox.txt")).unwrap().lines().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
