#!/usr/bin/env python3
"""Independent reference for brokerlab's `--hash vllm-sha256-cbor` and `--hash vllm-xxhash-cbor`
(docs/MODEL.md, "vLLM-compatible block keys"): prints the vectors as JSON on stdout.

The hash functions are vLLM's, as written in vllm-project/vllm `vllm/utils/hashing.py`
(`sha256_cbor`, `xxhash_cbor` = `xxhash.xxh3_128_digest` of the same CBOR bytes) and
`vllm/v1/core/kv_cache_utils.py` (`hash_block_tokens`: hash of (parent, tuple(tokens), extra_keys);
`init_none_hash`: NONE_HASH = hash_fn(PYTHONHASHSEED); `maybe_convert_block_hash`). Nothing here is
shared with the Rust code. host/tests/vllm_hash_vectors.rs runs this script on every test run and
fails if python3, cbor2 or xxhash is missing (scripts/test.sh installs them):

    python3 -m pip install cbor2 xxhash
    python3 tests/reference/vllm_block_hash.py
"""
import hashlib
import json
import sys
from importlib.metadata import version

import cbor2
import xxhash


def sha256_cbor(x):
    # vllm/utils/hashing.py sha256_cbor
    return hashlib.sha256(cbor2.dumps(x, canonical=True)).digest()


def xxhash_cbor(x):
    # vllm/utils/hashing.py xxhash_cbor (_xxhash_digest = xxh3_128_digest)
    return xxhash.xxh3_128_digest(cbor2.dumps(x, canonical=True))


ALGOS = {"sha256_cbor": sha256_cbor, "xxhash_cbor": xxhash_cbor}


def none_hash(hash_fn, seed):
    # vLLM init_none_hash: NONE_HASH = hash_fn(seed string), the PYTHONHASHSEED value.
    return hash_fn(seed)


def hash_block_tokens(hash_fn, parent, block, extra_keys=None):
    # vLLM hash_block_tokens: the parent is NONE_HASH for a prompt's first block.
    return hash_fn((parent, tuple(block), extra_keys))


def block_hashes(hash_fn, seed, tokens, block_size):
    """(digest, key) of every FULL block, chained; vLLM's hash_block_tokens with extra_keys None."""
    parent = none_hash(hash_fn, seed)
    out = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash_block_tokens(hash_fn, parent, tokens[start:start + block_size])
        out.append((parent, int.from_bytes(parent, "big") & (2**64 - 1)))
    return out


# Token ids that hit every CBOR head width a u32 can have (1, 2, 3 and 5 bytes), edges included.
EDGES = [0, 1, 23, 24, 25, 255, 256, 257, 65535, 65536, 65537, 2**32 - 2, 2**32 - 1]
MODS = [24, 256, 65536, 2**32]


def mixed(i):
    """Rule for generated token ids (also in host/tests/vllm_hash_vectors.rs): head widths cycle."""
    return ((i * 2654435761 + 12345) % 2**32) % MODS[i % 4]


def main():
    doc = {
        "generator": "tests/reference/vllm_block_hash.py",
        "cbor2": version("cbor2"),
        "xxhash": version("xxhash"),
        "uint_cbor": [],
        "seeds": [],
        "cases": [],
    }
    for v in EDGES + [2**32, 2**40 + 5, 2**64 - 1]:
        doc["uint_cbor"].append({"value": v, "cbor": cbor2.dumps(v, canonical=True).hex()})
    for algo, fn in ALGOS.items():
        for seed in ["10", "0", "abc", "42", "vllm-none-hash", ""]:
            doc["seeds"].append({"algo": algo, "seed": seed, "none_hash": none_hash(fn, seed).hex()})
    for algo in ALGOS:
        add_cases(doc, algo)
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


def add_cases(doc, algo):
    def add(seed, block_size, tokens, rule=None, all_digests=True):
        hs = block_hashes(ALGOS[algo], seed, tokens, block_size)
        c = {"algo": algo, "seed": seed, "block_size": block_size}
        if rule is None:
            c["tokens"] = tokens
        else:
            c["tokens_rule"] = rule
            c["token_count"] = len(tokens)
        c["digests"] = [d.hex() for d, _ in hs] if all_digests else [hs[-1][0].hex()] if hs else []
        c["keys"] = [k for _, k in hs]
        doc["cases"].append(c)

    for seed in ["10", "0", "abc"]:
        for b in [16, 64]:
            for n in range(6):
                extra = (7 * n + 3) % b  # a partial tail that must not be hashed
                count = n * b + extra
                tokens = [EDGES[(i + n) % len(EDGES)] if i % 3 == 0 else mixed(i + 1000 * n) for i in range(count)]
                add(seed, b, tokens)
    # The array-length head for other block sizes: 1 byte (1), 2 (24), 3 (256), 5 (65536).
    for b in [1, 24, 256, 65536]:
        add("0", b, [mixed(i) for i in range(2 * b + 1)], rule="mixed", all_digests=False)
    # A chain of 1,000 blocks (B = 16, seed "10"): every key, the last digest.
    add("10", 16, [mixed(i) for i in range(16 * 1000)], rule="mixed", all_digests=False)


if __name__ == "__main__":
    main()
