//! Embeds the git commit the binary is built from as `BROKERLAB_GIT_COMMIT` ("unknown" outside a
//! git checkout, or when git is missing or refuses the repository).
//!
//! Cargo reruns this script only when `.git/HEAD` or the ref it points to changes (a commit, a
//! checkout), never on every build: each path is watched only if it exists, because a watched
//! path that does not exist makes cargo rerun the script every time.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn watch(path: PathBuf) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=GIT_DIR");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let commit = git(&dir, &["rev-parse", "--verify", "--quiet", "HEAD"]);
    if commit.is_some() {
        // In a linked worktree HEAD lives in the worktree's git dir and refs in the common one.
        if let Some(git_dir) = git(&dir, &["rev-parse", "--path-format=absolute", "--git-dir"]) {
            watch(Path::new(&git_dir).join("HEAD"));
        }
        if let (Some(common), Some(head_ref)) = (
            git(&dir, &["rev-parse", "--path-format=absolute", "--git-common-dir"]),
            git(&dir, &["symbolic-ref", "--quiet", "HEAD"]),
        ) {
            watch(Path::new(&common).join(&head_ref));
            watch(Path::new(&common).join("packed-refs"));
        }
    }
    println!("cargo:rustc-env=BROKERLAB_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}
