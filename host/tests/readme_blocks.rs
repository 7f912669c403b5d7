//! Every ```sh block of every README.md runs as written from a clean copy of the repository
//! (its tracked files only), each bounded in time. A block is skipped only when the line right
//! before it says so with a reason: `<!-- readme-test: skip: WHY -->`; the default is run.
//!
//! The README says `brokerlab` stands for `cargo run --release -p brokerlab --`: both run this
//! build's binary (a `cargo` on the PATH of the blocks does exactly that rewrite and refuses any
//! other cargo command, so a block that needs one must be marked).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

/// Most time one block may take (a debug build: the slowest block replays the conversation
/// trace through the batched engine with every router).
const BLOCK_TIMEOUT: Duration = Duration::from_secs(600);

/// The marker of a skipped block.
const SKIP: &str = "<!-- readme-test: skip:";

struct Block {
    file: String,
    line: usize,
    text: String,
    skip: Option<String>,
}

fn blocks(root: &Path, file: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(root.join(file)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() == "```sh" {
            let start = i;
            let mut body = String::new();
            i += 1;
            while i < lines.len() && !lines[i].starts_with("```") {
                body += lines[i];
                body += "\n";
                i += 1;
            }
            let skip = start.checked_sub(1).map(|p| lines[p].trim()).filter(|l| l.starts_with(SKIP)).map(|l| {
                let why = l[SKIP.len()..].trim_end_matches("-->").trim().to_string();
                assert!(!why.is_empty(), "{file}:{}: a skip marker must say why", start);
                why
            });
            out.push(Block { file: file.to_string(), line: start + 1, text: body, skip });
        }
        i += 1;
    }
    out
}

/// A copy of the repository's tracked files (no target/, no out/, nothing a run left behind).
fn clean_copy(root: &Path, dest: &Path) {
    let o = Command::new("git").arg("-C").arg(root).args(["ls-files", "-z"]).output().expect("git is required");
    assert!(o.status.success());
    for f in o.stdout.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let f = std::str::from_utf8(f).unwrap();
        let src = root.join(f);
        if !src.is_file() {
            continue; // deleted in the working tree, not yet committed
        }
        let d = dest.join(f);
        std::fs::create_dir_all(d.parent().unwrap()).unwrap();
        std::fs::copy(&src, &d).unwrap();
    }
}

fn run_block(dir: &Path, path: &str, b: &Block) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut child = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &b.text])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("BROKERLAB_DB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // drain the pipes on threads so a chatty block cannot block on a full pipe
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let ho = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut so, &mut s);
        s
    });
    let he = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut se, &mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > BLOCK_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (ho.join().unwrap(), he.join().unwrap());
    match status {
        Some(st) if st.success() => Ok(t0.elapsed()),
        Some(st) => Err(format!("{st}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")),
        None => Err(format!("timed out after {BLOCK_TIMEOUT:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")),
    }
}

#[test]
fn every_readme_sh_block_runs_from_a_clean_copy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let tmp = std::env::temp_dir().join(format!("brokerlab-readme-blocks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let repo = tmp.join("repo");
    clean_copy(&root, &repo);

    // `cargo run --release -p brokerlab -- ARGS` is this build's binary; other cargo commands fail
    let shim: PathBuf = tmp.join("bin");
    std::fs::create_dir_all(&shim).unwrap();
    std::fs::write(
        shim.join("cargo"),
        "#!/bin/sh\n\
         if [ \"$1\" = run ] && [ \"$2\" = --release ] && [ \"$3\" = -p ] && [ \"$4\" = brokerlab ] && [ \"$5\" = -- ]; then\n\
         shift 5; exec brokerlab \"$@\"; fi\n\
         echo \"cargo $*: not run by the README test (mark the block skipped, with a reason)\" >&2; exit 97\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(shim.join("cargo"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!("{}:{}:{}", shim.display(), bin_dir.display(), std::env::var("PATH").unwrap_or_default());

    let o = Command::new("git").arg("-C").arg(&root).args(["ls-files", "*README.md"]).output().unwrap();
    let files: Vec<String> = String::from_utf8(o.stdout).unwrap().lines().map(String::from).collect();
    assert!(files.iter().any(|f| f == "README.md"), "{files:?}");
    let all: Vec<Block> = files.iter().flat_map(|f| blocks(&root, f)).collect();
    let (mut ran, mut skipped, mut failed) = (0, 0, Vec::new());
    for b in &all {
        if let Some(why) = &b.skip {
            eprintln!("skip {}:{}: {why}", b.file, b.line);
            skipped += 1;
            continue;
        }
        match run_block(&repo, &path, b) {
            Ok(t) => {
                eprintln!("ran  {}:{} in {:.1} s", b.file, b.line, t.as_secs_f64());
                ran += 1;
            }
            Err(e) => failed.push(format!("{}:{}:\n{}\n{e}", b.file, b.line, b.text)),
        }
    }
    eprintln!("{ran} blocks ran, {skipped} skipped (reasons above)");
    assert!(failed.is_empty(), "README blocks failed:\n{}", failed.join("\n\n"));
    assert!(ran >= 8, "only {ran} blocks ran: the extraction found too few");
    let _ = std::fs::remove_dir_all(&tmp);
}
