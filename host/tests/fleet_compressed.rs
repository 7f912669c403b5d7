//! Compressed traces: the vendored `traces/*.jsonl.zst` replay exactly like the raw JSONL, gzip and
//! zstd are told apart by their magic bytes whatever the file is called, a run that must read its
//! trace twice re-decompresses it, and a corrupt or truncated file is exit code 2 naming the file.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use brokerlab::fleet::input::file;
use brokerlab::fleet::report;
use brokerlab::fleet::run::{Fifo, TraceSource, simulate, with_view};
use brokerlab::fleet::scenario::{Generated, write_trace};
use brokerlab_core::fleet::RouterKind;

fn vendored(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces").join(name)
}

fn tmp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("brokerlab-compressed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let p = tmp_dir().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The whole decompressed text of a vendored trace (the zstd frame's content checksum, written by
/// the `zstd` tool, is verified on the way).
fn decompressed(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    file::open(path).unwrap().read_to_end(&mut out).unwrap();
    out
}

fn gzip(text: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(text).unwrap();
    e.finish().unwrap()
}

fn zstd(text: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(text, ruzstd::encoding::CompressionLevel::Fastest)
}

/// `fleet replay --json --trace TRACE FLAGS...`: (exit code, stdout, stderr).
fn replay(trace: &Path, flags: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
        .args(["fleet", "replay", "--json", "--trace"])
        .arg(trace)
        .args(flags)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The results of a `--json` replay: everything but `provenance`, which names the input file and
/// its digest (so it differs between a trace and its compressed copy by design).
fn results(json: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let prov = v.as_object_mut().and_then(|o| o.remove("provenance"));
    assert!(prov.is_some(), "{json}");
    serde_json::to_string_pretty(&v).unwrap()
}

fn replay_ok(trace: &Path, flags: &[&str]) -> String {
    let (code, out, err) = replay(trace, flags);
    assert_eq!(code, 0, "{}: {err}", trace.display());
    assert!(out.contains("\"hit_rate\""), "{out}");
    results(&out)
}

#[test]
fn vendored_traces_decompress_to_the_published_files() {
    // Sizes and line counts of the upstream files (traces/README.md has their SHA-256).
    for (name, bytes, lines) in
        [("conversation_trace.jsonl.zst", 3_029_533, 12_031), ("synthetic_trace.jsonl.zst", 1_136_313, 3_993)]
    {
        let text = decompressed(&vendored(name));
        assert_eq!(text.len(), bytes, "{name}");
        assert_eq!(text.iter().filter(|&&b| b == b'\n').count(), lines, "{name}");
    }
}

#[test]
fn vendored_zst_replays_byte_identically_to_the_raw_jsonl() {
    for name in ["synthetic_trace.jsonl", "conversation_trace.jsonl"] {
        let zst = vendored(&format!("{name}.zst"));
        let raw = write(name, &decompressed(&zst));
        let configs: &[&[&str]] = if name.starts_with("synthetic") {
            &[
                &["--pods", "8", "--capacity", "2048", "--router", "round-robin"],
                &["--pods", "8", "--capacity", "2048", "--router", "least-loaded"],
                &["--pods", "8", "--capacity", "2048", "--router", "prefix-aware", "--alpha", "16", "--stale", "3"],
            ]
        } else {
            &[&["--pods", "8", "--capacity", "65536", "--router", "prefix-aware", "--alpha", "16"]]
        };
        for flags in configs {
            assert_eq!(replay_ok(&zst, flags), replay_ok(&raw, flags), "{name} {flags:?}");
        }
        std::fs::remove_file(&raw).ok();
    }
}

/// A small trace whose run fills the pending-evictions buffer (600-block prompts through 16-block
/// pods with a stale index), so the run starts over and reads the file a second time.
fn restarting_trace() -> String {
    (0..4)
        .map(|i| {
            let ids: Vec<String> = (i * 1000..i * 1000 + 600).map(|h| h.to_string()).collect();
            format!(
                "{{\"timestamp\": {i}, \"input_length\": 9600, \"output_length\": 1, \"hash_ids\": [{}]}}\n",
                ids.join(", ")
            )
        })
        .collect()
}

const RESTART_FLAGS: &[&str] =
    &["--pods", "2", "--router", "prefix-aware", "--trace-block-size", "16", "--capacity", "16", "--stale", "1"];

#[test]
fn gzip_and_zstd_are_detected_by_magic_whatever_the_name() {
    let text = restarting_trace();
    let plain = replay_ok(&write("plain.jsonl", text.as_bytes()), RESTART_FLAGS);
    let (gz, zs) = (gzip(text.as_bytes()), zstd(text.as_bytes()));
    for (name, bytes) in [
        ("t.jsonl.gz", &gz),
        ("t.jsonl.zst", &zs),
        // Misleading or missing extensions: the content decides.
        ("gzip-named.zst", &gz),
        ("zstd-named.gz", &zs),
        ("gzip.jsonl", &gz),
        ("zstd", &zs),
    ] {
        // These runs read the file twice (a buffer grows): a compressed regular file is reopened
        // and decompressed again.
        assert_eq!(replay_ok(&write(name, bytes), RESTART_FLAGS), plain, "{name}");
    }
}

#[test]
fn a_compressed_pipe_replays_like_the_file_or_refuses_a_restart() {
    let zst = vendored("synthetic_trace.jsonl.zst");
    let bytes = std::fs::read(&zst).unwrap();
    let piped = |flags: &[&str], data: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
            .args(["fleet", "replay", "--json", "--trace", "/dev/stdin"])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let data = data.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&data).ok());
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
    };
    let flags = ["--pods", "8", "--capacity", "2048", "--router", "prefix-aware"];
    let (code, out, err) = piped(&flags, &bytes);
    assert_eq!(code, 0, "{err}");
    assert_eq!(results(&out), replay_ok(&zst, &flags));

    // A pipe cannot be read twice, compressed or not: an error, never a truncated replay.
    let (code, _, err) = piped(RESTART_FLAGS, &gzip(restarting_trace().as_bytes()));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--trace /dev/stdin") && err.contains("regular file"), "{err}");
}

#[test]
fn corrupt_or_truncated_compressed_traces_are_exit_2_naming_the_file() {
    let zst = std::fs::read(vendored("synthetic_trace.jsonl.zst")).unwrap();
    let gz = gzip(&decompressed(&vendored("synthetic_trace.jsonl.zst")));
    let flags = ["--pods", "8", "--capacity", "2048", "--router", "prefix-aware"];
    for (kind, bytes) in [("zstd", &zst), ("gzip", &gz)] {
        let mut cut = bytes.clone();
        cut.truncate(bytes.len() / 2);
        let mut flipped = bytes.clone();
        let mid = bytes.len() / 2;
        flipped[mid..mid + 16].iter_mut().for_each(|b| *b ^= 0x55);
        let mut last = bytes.clone();
        *last.last_mut().unwrap() ^= 1;
        for (what, bad) in [("cut", cut), ("flipped", flipped), ("last", last)] {
            let path = write(&format!("{what}.{kind}"), &bad);
            let (code, out, err) = replay(&path, &flags);
            assert_eq!(code, 2, "{kind} {what}: {err}");
            assert!(out.is_empty(), "{kind} {what}: {out}");
            assert!(err.contains(&path.display().to_string()), "{kind} {what}: {err}");
            assert!(err.contains(&format!("corrupt or truncated {kind} data")), "{kind} {what}: {err}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}

#[test]
fn generated_traces_replay_exactly_when_compressed() {
    let mut sc = report::scenario("multi-tenant", 8).unwrap();
    sc.workload.rate_milli_per_s = 25_000;
    let g = Generated::new(sc.workload).unwrap();
    let mut text = Vec::new();
    write_trace(&g, &mut text).unwrap();
    for (name, bytes) in [("gen.jsonl.gz", gzip(&text)), ("gen.jsonl.zst", zstd(&text))] {
        let path = write(name, &bytes);
        for router in RouterKind::ALL {
            let cfg = with_view(brokerlab_core::fleet::FleetConfig { router, ..sc.fleet }, |v| v.stale_delay = 3);
            let direct = simulate::<Fifo>(cfg, &mut &g, true).unwrap();
            let mut src = TraceSource::new(path.clone(), 16);
            let replay = simulate::<Fifo>(cfg, &mut src, true).unwrap();
            assert_eq!(direct.summary, replay.summary, "{name} {router:?}");
            assert_eq!(direct.outcomes, replay.outcomes, "{name} {router:?}");
        }
    }
}
