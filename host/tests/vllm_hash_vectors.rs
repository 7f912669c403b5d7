//! `--hash vllm-sha256-cbor` and `--hash vllm-xxhash-cbor` against vectors produced by vLLM's own
//! hash functions: tests/reference/vllm_block_hash.py (vLLM's `sha256_cbor` and `xxhash_cbor`,
//! i.e. `cbor2.dumps(x, canonical=True)` into `hashlib.sha256` or `xxhash.xxh3_128_digest`), run
//! on every test run. A missing python3, cbor2 or xxhash fails the test (scripts/test.sh installs
//! them).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use brokerlab_core::fleet::vllm::{self, CborHash, Sha256Cbor, Xxh3Cbor};
use serde_json::Value;

fn vectors() -> &'static Value {
    static V: OnceLock<Value> = OnceLock::new();
    V.get_or_init(|| {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/vllm_block_hash.py");
        let out = Command::new("python3").arg(&script).output().unwrap_or_else(|e| {
            panic!("python3 is required to produce the vLLM reference vectors ({}): {e}", script.display())
        });
        assert!(
            out.status.success(),
            "{} failed (needs `python3 -m pip install cbor2 xxhash`): {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("the reference prints JSON")
    })
}

/// The algorithms the reference writes, by its names (vLLM's `--prefix-caching-hash-algo`).
const ALGOS: [&str; 2] = ["sha256_cbor", "xxhash_cbor"];

fn seed_hex(algo: &str, seed: &str) -> String {
    match algo {
        "sha256_cbor" => hex(&vllm::seed_hash::<Sha256Cbor>(seed)),
        "xxhash_cbor" => hex(&vllm::seed_hash::<Xxh3Cbor>(seed)),
        _ => panic!("unknown algorithm {algo}"),
    }
}

/// (keys, every digest in hex) of the full blocks, chained by hand.
fn chain<H: CborHash>(seed: &str, tokens: &[u32], b: usize) -> (Vec<u64>, Vec<String>) {
    let mut keys = vec![0u64; tokens.len() / b];
    let n = vllm::chain_keys::<H>(&vllm::seed_hash::<H>(seed), tokens, b, &mut keys).unwrap();
    assert_eq!(n, keys.len());
    let mut parent = vllm::seed_hash::<H>(seed);
    let mut digests = vec![];
    for block in tokens.chunks_exact(b) {
        parent = vllm::block_hash::<H>(&parent, block);
        let d = parent.as_ref();
        assert_eq!(vllm::digest_key(d), u64::from_be_bytes(d[d.len() - 8..].try_into().unwrap()));
        digests.push(hex(d));
    }
    (keys, digests)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The rule of the generated token ids (`mixed` in the Python script).
fn mixed(i: u64) -> u32 {
    const MODS: [u64; 4] = [24, 256, 65536, 1 << 32];
    (((i * 2654435761 + 12345) % (1 << 32)) % MODS[(i % 4) as usize]) as u32
}

fn tokens_of(case: &Value) -> Vec<u32> {
    match case.get("tokens") {
        Some(t) => t.as_array().unwrap().iter().map(|v| u32::try_from(v.as_u64().unwrap()).unwrap()).collect(),
        None => {
            assert_eq!(case["tokens_rule"], "mixed");
            (0..case["token_count"].as_u64().unwrap()).map(mixed).collect()
        }
    }
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|k| k.as_u64().unwrap()).collect()
}

#[test]
fn cbor_integer_heads_match_cbor2() {
    let v = vectors();
    let all = v["uint_cbor"].as_array().unwrap();
    let mut widths = std::collections::BTreeSet::new();
    for e in all {
        let mut h = [0u8; 9];
        let n = vllm::cbor_uint(e["value"].as_u64().unwrap(), &mut h);
        assert_eq!(hex(&h[..n]), e["cbor"].as_str().unwrap(), "{}", e["value"]);
        widths.insert(n);
    }
    assert_eq!(widths.into_iter().collect::<Vec<_>>(), [1, 2, 3, 5, 9], "every head width is covered");
}

#[test]
fn seed_digests_match() {
    let v = vectors();
    let seeds = v["seeds"].as_array().unwrap();
    for algo in ALGOS {
        assert!(seeds.iter().filter(|s| s["algo"] == algo).count() >= 3, "{algo}");
    }
    for s in seeds {
        let algo = s["algo"].as_str().unwrap();
        let got = seed_hex(algo, s["seed"].as_str().unwrap());
        assert_eq!(got, s["none_hash"].as_str().unwrap(), "{algo} seed {}", s["seed"]);
    }
    // the SHA-256 path's own spelling agrees with the generic one
    assert_eq!(vllm::seed_digest("10"), vllm::seed_hash::<Sha256Cbor>("10"));
}

#[test]
fn block_digests_and_keys_match() {
    let v = vectors();
    let cases = v["cases"].as_array().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut longest = 0;
    for c in cases {
        let algo = c["algo"].as_str().unwrap();
        let seed = c["seed"].as_str().unwrap();
        let b = c["block_size"].as_u64().unwrap() as usize;
        let tokens = tokens_of(c);
        let want_keys = u64s(&c["keys"]);
        let want_digests: Vec<&str> = c["digests"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
        let what = format!("{algo}, seed {seed:?}, B {b}, {} tokens", tokens.len());

        // keys through the library call, digests chained by hand (all, or the last of long chains)
        let (keys, digests) = match algo {
            "sha256_cbor" => {
                let mut direct = vec![0u64; tokens.len() / b];
                vllm::token_keys(&vllm::seed_digest(seed), &tokens, b, &mut direct).unwrap();
                let (keys, digests) = chain::<Sha256Cbor>(seed, &tokens, b);
                assert_eq!(direct, keys, "{what}");
                (keys, digests)
            }
            "xxhash_cbor" => chain::<Xxh3Cbor>(seed, &tokens, b),
            _ => panic!("unknown algorithm {algo}"),
        };
        let n = keys.len();
        assert_eq!(n, want_keys.len(), "{what}: full blocks");
        assert_eq!(keys, want_keys, "{what}");
        if want_digests.len() == digests.len() {
            assert_eq!(digests, want_digests, "{what}");
        } else {
            assert_eq!(want_digests.len(), 1, "{what}");
            assert_eq!(digests.last().map(String::as_str), Some(want_digests[0]), "{what}");
        }
        seen.insert((algo.to_string(), seed.to_string(), b, n));
        longest = longest.max(n);
    }
    // with and without a parent (block 0's parent is NONE_HASH; blocks 1.. chain), B 16 and 64
    for algo in ALGOS {
        for seed in ["10", "0", "abc"] {
            for b in [16, 64] {
                for n in 0..=5 {
                    let key = (algo.to_string(), seed.to_string(), b, n);
                    assert!(seen.contains(&key), "no vector for {algo}, seed {seed}, B {b}, {n} blocks");
                }
            }
        }
    }
    assert_eq!(longest, 1000);
}

#[test]
fn fleet_keys_prints_the_vectors_keys() {
    let v = vectors();
    let dir = std::env::temp_dir().join(format!("brokerlab-vllm-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (algo, flag, seed, b) in [
        ("sha256_cbor", "vllm-sha256-cbor", "abc", 64),
        ("sha256_cbor", "vllm-sha256-cbor", "10", 16),
        ("xxhash_cbor", "vllm-xxhash-cbor", "abc", 64),
        ("xxhash_cbor", "vllm-xxhash-cbor", "0", 16),
    ] {
        let cases: Vec<&Value> = v["cases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["algo"] == algo && c["seed"] == seed && c["block_size"] == b && c.get("tokens").is_some())
            .collect();
        assert_eq!(cases.len(), 6);
        let mut text = String::new();
        for (i, c) in cases.iter().enumerate() {
            let ids: Vec<String> = tokens_of(c).iter().map(u32::to_string).collect();
            text.push_str(&format!(
                "{{\"timestamp\": {i}, \"token_ids\": [{}], \"output_length\": 1}}\n\n",
                ids.join(", ")
            ));
        }
        let trace = dir.join(format!("{algo}-{seed}-{b}.jsonl"));
        std::fs::write(&trace, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
            .args(["fleet", "keys", "--format", "tokens", "--hash", flag, "--hash-seed", seed])
            .args(["--block-size", &b.to_string(), "--trace"])
            .arg(&trace)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), cases.len(), "one line per request");
        for (line, c) in lines.iter().zip(&cases) {
            let want: Vec<String> = u64s(&c["keys"]).iter().map(u64::to_string).collect();
            assert_eq!(*line, want.join(" "));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fleet_keys_bad_input_is_exit_2_naming_line_and_field_or_flag() {
    let dir = std::env::temp_dir().join(format!("brokerlab-vllm-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"token_ids\": [1, 2], \"output_length\": 1}\n{\"timestamp\": 1, \"token_ids\": [1, 4294967296], \"output_length\": 1}\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
            .args(["fleet", "keys", "--trace"])
            .arg(&trace)
            .args(args)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["--hash", "vllm-sha256-cbor"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("t.jsonl:2: field `token_ids[1]`"), "{err}");
    let (code, err) = run(&["--hash", "vllm-sha256-cbor", "--block-size", "0"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--block-size 0"), "{err}");
    let (code, err) = run(&["--block-size", "64"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--block-size 64"), "{err}");
    let (code, err) = run(&["--hash", "sha256"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--hash"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
