//! `fleet sweep --shard I/N` + `fleet merge`: the merged files are byte for byte the files of the
//! same sweep run on one machine (FIFO and batched), whatever order the shards are given in; a
//! missing, repeated or foreign shard is exit 2 naming it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-shard-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn bl(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_brokerlab")).current_dir(cwd).args(args).output().unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (o.status.code().unwrap_or(-1), s(&o.stdout), s(&o.stderr))
}

fn ok(cwd: &Path, args: &[&str]) -> String {
    let (c, out, err) = bl(cwd, args);
    assert_eq!(c, 0, "{args:?}: {err}");
    out
}

const SCENARIO: &str = "[workload]\nrequests = 300\ntenants = 3\nprefix_tokens = 256\nsuffix_tokens = [16, 64]\n\
output_tokens = [2, 6]\nrate_per_s = 40.0\n\n[fleet]\npods = 3\ncapacity = 64\nrouter = \"prefix-aware\"\n";

/// Every file of `a`, compared with the same file of `b`.
fn same_files(a: &Path, b: &Path) {
    let mut names: Vec<_> = std::fs::read_dir(a).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert!(names.len() >= 5, "{names:?}");
    for n in names {
        let (x, y) = (std::fs::read(a.join(&n)).unwrap(), std::fs::read(b.join(&n)).unwrap_or_default());
        if x != y {
            let (x, y) = (String::from_utf8_lossy(&x), String::from_utf8_lossy(&y));
            let line = x.lines().zip(y.lines()).position(|(p, q)| p != q);
            let at = |t: &str| line.and_then(|l| t.lines().nth(l)).unwrap_or("").to_string();
            panic!("{n:?} differs at line {line:?}: {:?} vs {:?}", at(&x), at(&y));
        }
    }
}

fn identity(engine: &[&str], tag: &str) {
    let d = dir().join(tag);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("sc.toml"), SCENARIO).unwrap();
    let base =
        ["fleet", "sweep", "sc.toml", "--param", "capacity", "--values", "24,32,48,64,128", "--no-date", "--quiet"];
    let with =
        |extra: &[&str]| -> Vec<String> { base.iter().chain(engine).chain(extra).map(|s| s.to_string()).collect() };
    let run = |args: Vec<String>| ok(&d, &args.iter().map(String::as_str).collect::<Vec<_>>());
    // one machine, into `all`, kept as `single`
    let single_out = run(with(&["--out", "all"]));
    std::fs::rename(d.join("all"), d.join("single")).unwrap();
    // three shards (15 points: 5 each), merged in another order into `all`
    for i in 0..3 {
        let s = format!("{i}/3");
        let out = run(with(&["--out", &format!("part{i}"), "--shard", &s]));
        assert!(out.contains(&format!("shard {i}/3: 5 of 15 points")), "{out}");
    }
    let merged = ok(&d, &["fleet", "merge", "part2", "part0", "part1", "--out", "all"]);
    assert_eq!(merged, single_out, "the printed table too");
    same_files(&d.join("all"), &d.join("single"));
    same_files(&d.join("single"), &d.join("all"));
    // a missing shard, a repeated shard, a shard of another sweep
    let (c, _, err) = bl(&d, &["fleet", "merge", "part0", "part2", "--out", "x"]);
    assert!(c == 2 && err.contains("shard(s) 1 of 3 missing"), "{err}");
    let (c, _, err) = bl(&d, &["fleet", "merge", "part0", "part1", "part1", "part2", "--out", "x"]);
    assert!(c == 2 && err.contains("both hold shard 1/3"), "{err}");
    run(with(&["--out", "other", "--shard", "1/3", "--threads", "1", "--values", "24,32,48,64,256"]));
    let (c, _, err) = bl(&d, &["fleet", "merge", "part0", "other", "part2", "--out", "x"]);
    assert!(c == 2 && err.contains("another sweep"), "{err}");
    let (c, _, err) = bl(&d, &["fleet", "merge", "sc.toml", "--out", "x"]);
    assert!(c == 2 && err.contains("partial.json"), "{err}");
}

#[test]
fn merged_shards_equal_the_one_machine_sweep() {
    identity(&[], "fifo");
}

#[test]
fn merged_batched_shards_equal_the_one_machine_sweep() {
    identity(&["--engine", "batched"], "batched");
}

/// With SLO flags every point carries its goodput keys, sharded or not, and the merge is the
/// one-machine sweep byte for byte (both engines).
#[test]
fn merged_shards_with_an_slo_equal_the_one_machine_sweep() {
    identity(&["--slo-ttft-ms", "40", "--slo-tpot-ms", "2"], "fifo-slo");
    identity(&["--engine", "batched", "--slo-ttft-ms", "300", "--slo-tpot-ms", "25"], "batched-slo");
    let json = std::fs::read_to_string(dir().join("batched-slo/single/points.json")).unwrap();
    assert!(json.contains("\"goodput_req_per_s\""), "no goodput in the points");
}

/// Shards run under different SLOs are two sweeps: the merge refuses them; without an SLO the
/// shards keep the digest they always had (the SLO is hashed only when given).
#[test]
fn shards_of_different_slos_do_not_merge() {
    let d = dir().join("slo-mix");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("sc.toml"), SCENARIO).unwrap();
    let shard = |out: &str, i: &str, slo: &[&str]| {
        let mut a = vec!["fleet", "sweep", "sc.toml", "--param", "alpha", "--values", "1,2", "-q", "--no-date"];
        a.extend(["--shard", i, "--out", out]);
        a.extend(slo);
        ok(&d, &a);
    };
    shard("a0", "0/2", &["--slo-ttft-ms", "40"]);
    shard("a1", "1/2", &["--slo-ttft-ms", "41"]);
    let (c, _, err) = bl(&d, &["fleet", "merge", "a0", "a1", "--out", "x"]);
    assert!(c == 2 && err.contains("another sweep"), "{err}");
    shard("b1", "1/2", &["--slo-ttft-ms", "40"]);
    ok(&d, &["fleet", "merge", "a0", "b1", "--out", "y"]);
    shard("n0", "0/2", &[]);
    let (c, _, err) = bl(&d, &["fleet", "merge", "n0", "b1", "--out", "z"]);
    assert!(c == 2 && err.contains("another sweep"), "an SLO shard merged with one without: {err}");
}

#[test]
fn bad_shards_are_exit_2() {
    let d = dir();
    std::fs::write(d.join("b.toml"), SCENARIO).unwrap();
    for bad in ["3/3", "1/0", "x", "-1/2"] {
        let (c, _, err) =
            bl(&d, &["fleet", "sweep", "b.toml", "--param", "alpha", "--values", "1,2", &format!("--shard={bad}")]);
        assert!(c == 2 && err.contains("I/N"), "{bad}: {err}");
    }
}
