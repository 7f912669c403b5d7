//! `--hash vllm-sha256-cbor` against vectors produced by an independent implementation:
//! tests/reference/vllm_block_hash.py (Python's `cbor2.dumps(x, canonical=True)` and `hashlib`,
//! what vLLM's `sha256_cbor` uses), run once and checked in as tests/reference/vllm_hash_vectors.json.
//! Needs no Python and no network.

use std::path::PathBuf;
use std::process::Command;

use brokerlab_core::fleet::vllm;
use serde_json::Value;

fn vectors() -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/vllm_hash_vectors.json");
    serde_json::from_str(&std::fs::read_to_string(&p).expect("checked-in vectors")).unwrap()
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
    assert!(seeds.len() >= 3);
    for s in seeds {
        let got = vllm::seed_digest(s["seed"].as_str().unwrap());
        assert_eq!(hex(&got), s["none_hash"].as_str().unwrap(), "seed {}", s["seed"]);
    }
}

#[test]
fn block_digests_and_keys_match() {
    let v = vectors();
    let cases = v["cases"].as_array().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut longest = 0;
    for c in cases {
        let seed = c["seed"].as_str().unwrap();
        let b = c["block_size"].as_u64().unwrap() as usize;
        let tokens = tokens_of(c);
        let want_keys = u64s(&c["keys"]);
        let want_digests: Vec<&str> = c["digests"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
        let what = format!("seed {seed:?}, B {b}, {} tokens", tokens.len());

        let mut keys = vec![0u64; tokens.len() / b];
        let n = vllm::token_keys(&vllm::seed_digest(seed), &tokens, b, &mut keys).unwrap();
        assert_eq!(n, want_keys.len(), "{what}: full blocks");
        assert_eq!(keys, want_keys, "{what}");

        // The digests themselves, chained by hand (all of them, or the last for long chains).
        let mut parent = vllm::seed_digest(seed);
        let mut digests = vec![];
        for block in tokens.chunks_exact(b) {
            parent = vllm::block_digest(&parent, block);
            assert_eq!(vllm::digest_key(&parent), u64::from_be_bytes(parent[24..].try_into().unwrap()));
            digests.push(hex(&parent));
        }
        if want_digests.len() == digests.len() {
            assert_eq!(digests, want_digests, "{what}");
        } else {
            assert_eq!(want_digests.len(), 1, "{what}");
            assert_eq!(digests.last().map(String::as_str), Some(want_digests[0]), "{what}");
        }
        seen.insert((seed.to_string(), b, n));
        longest = longest.max(n);
    }
    for seed in ["10", "0", "abc"] {
        for b in [16, 64] {
            for n in 0..=5 {
                assert!(seen.contains(&(seed.to_string(), b, n)), "no vector for seed {seed}, B {b}, {n} blocks");
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
    for (seed, b) in [("abc", 64), ("10", 16)] {
        let cases: Vec<&Value> = v["cases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["seed"] == seed && c["block_size"] == b && c.get("tokens").is_some())
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
        let trace = dir.join(format!("{seed}-{b}.jsonl"));
        std::fs::write(&trace, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_brokerlab"))
            .args(["fleet", "keys", "--format", "tokens", "--hash", "vllm-sha256-cbor", "--hash-seed", seed])
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
