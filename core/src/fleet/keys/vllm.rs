//! vLLM-compatible prefix-cache block hashes (`--prefix-caching-hash-algo sha256_cbor` and
//! `xxhash_cbor`), as specified in docs/MODEL.md, "vLLM-compatible block keys":
//!
//! * seed digest `NONE_HASH = H(cbor(seed))`, the seed a CBOR text string;
//! * block j's digest `d_j = H(cbor([d_{j-1}, [t_0, ..., t_{B-1}], null]))`, `d_{-1} = NONE_HASH`,
//!   with `cbor` the canonical (shortest-head) encoding of `cbor2.dumps(x, canonical=True)`;
//! * H = SHA-256 (32-byte digests, `sha256_cbor`) or XXH3-128 in its canonical big-endian form
//!   (16-byte digests, `xxhash_cbor`, Python's `xxhash.xxh3_128_digest`);
//! * block j's 64-bit key = the last 8 bytes of `d_j` read big-endian;
//! * only full blocks of B tokens are hashed.
//!
//! Allocation-free: the CBOR bytes go through a fixed 64-byte buffer into the hash state, so any
//! block size works without a per-block buffer. The CBOR encoder is these few functions (canonical
//! heads of unsigned integers, byte and text strings, arrays and `null`), not a crate: that is all
//! vLLM's block tuple needs.

use sha2::{Digest as _, Sha256};
use twox_hash::xxhash3_128::{DEFAULT_SECRET_LENGTH, RawHasher, SecretBuffer};

use crate::fleet::base::error::{Buffer, Error, Field};
use crate::fleet::base::limits::{MAX_VLLM_BLOCK_TOKENS, quoting};

/// A SHA-256 digest (vLLM's `BlockHash`, 32 bytes).
pub type Digest = [u8; 32];

/// CBOR major types used here.
const MAJOR_UINT: u8 = 0;
const MAJOR_BYTES: u8 = 2;
const MAJOR_TEXT: u8 = 3;
const MAJOR_ARRAY: u8 = 4;
/// CBOR `null` (major 7, simple value 22).
const CBOR_NULL: u8 = 0xf6;

/// Writes the canonical CBOR head of major type `major` with argument `v` (the shortest form:
/// 1, 2, 3, 5 or 9 bytes) into `out`; returns its length.
pub fn cbor_head(major: u8, v: u64, out: &mut [u8; 9]) -> usize {
    let m = major << 5;
    if v < 24 {
        out[0] = m | v as u8;
        1
    } else if v <= 0xff {
        out[0] = m | 24;
        out[1] = v as u8;
        2
    } else if v <= 0xffff {
        out[0] = m | 25;
        out[1..3].copy_from_slice(&(v as u16).to_be_bytes());
        3
    } else if v <= 0xffff_ffff {
        out[0] = m | 26;
        out[1..5].copy_from_slice(&(v as u32).to_be_bytes());
        5
    } else {
        out[0] = m | 27;
        out[1..9].copy_from_slice(&v.to_be_bytes());
        9
    }
}

/// Canonical CBOR of an unsigned integer (`cbor2.dumps(v, canonical=True)`), for tests.
pub fn cbor_uint(v: u64, out: &mut [u8; 9]) -> usize {
    cbor_head(MAJOR_UINT, v, out)
}

/// A hash function of vLLM's CBOR family: a streaming state and its digest.
pub trait CborHash {
    /// The digest (vLLM's `BlockHash` bytes).
    type Digest: Copy + AsRef<[u8]> + PartialEq + core::fmt::Debug;
    /// A fresh state.
    fn start() -> Self;
    /// Feeds bytes.
    fn feed(&mut self, b: &[u8]);
    /// The digest of what was fed.
    fn digest(self) -> Self::Digest;
}

/// SHA-256 (`sha256_cbor`).
pub struct Sha256Cbor(Sha256);

impl CborHash for Sha256Cbor {
    type Digest = Digest;
    fn start() -> Self {
        Sha256Cbor(Sha256::new())
    }
    fn feed(&mut self, b: &[u8]) {
        self.0.update(b);
    }
    fn digest(self) -> Digest {
        self.0.finalize().into()
    }
}

/// XXH3-128 with seed 0 and the default secret (`xxhash_cbor`: `xxhash.xxh3_128_digest`, whose
/// 16 bytes are the 128-bit value big-endian, high half first).
pub struct Xxh3Cbor(RawHasher<[u8; DEFAULT_SECRET_LENGTH]>);

/// An XXH3-128 digest (16 bytes).
pub type Xxh3Digest = [u8; 16];

impl CborHash for Xxh3Cbor {
    type Digest = Xxh3Digest;
    fn start() -> Self {
        // seed 0 derives the default secret unchanged (XXH3's `initCustomSecret` adds the seed)
        let buf = SecretBuffer::with_seed(0, [0u8; DEFAULT_SECRET_LENGTH]);
        Xxh3Cbor(RawHasher::new(buf.unwrap_or_else(|_| unreachable!("the secret has the default length"))))
    }
    fn feed(&mut self, b: &[u8]) {
        self.0.write(b);
    }
    fn digest(self) -> Xxh3Digest {
        self.0.finish_128().to_be_bytes()
    }
}

/// Streams CBOR bytes into a hash state through a fixed buffer.
struct CborSha<H: CborHash> {
    sha: H,
    buf: [u8; 64],
    len: usize,
}

impl<H: CborHash> CborSha<H> {
    fn new() -> Self {
        CborSha { sha: H::start(), buf: [0; 64], len: 0 }
    }

    fn bytes(&mut self, b: &[u8]) {
        if self.len + b.len() > self.buf.len() {
            self.sha.feed(&self.buf[..self.len]);
            self.len = 0;
        }
        if b.len() > self.buf.len() {
            self.sha.feed(b);
        } else {
            self.buf[self.len..self.len + b.len()].copy_from_slice(b);
            self.len += b.len();
        }
    }

    fn head(&mut self, major: u8, v: u64) {
        let mut h = [0u8; 9];
        let n = cbor_head(major, v, &mut h);
        self.bytes(&h[..n]);
    }

    fn finish(mut self) -> H::Digest {
        self.sha.feed(&self.buf[..self.len]);
        self.sha.digest()
    }
}

/// vLLM's `NONE_HASH` for a seed string (`PYTHONHASHSEED`): H of the seed as a CBOR text
/// string. The parent digest of every prompt's first block.
pub fn seed_hash<H: CborHash>(seed: &str) -> H::Digest {
    let mut s = CborSha::<H>::new();
    s.head(MAJOR_TEXT, seed.len() as u64);
    s.bytes(seed.as_bytes());
    s.finish()
}

/// Digest of one full block: H of `cbor([parent (bytes), [tokens...] (uints), null])`.
pub fn block_hash<H: CborHash>(parent: &H::Digest, tokens: &[u32]) -> H::Digest {
    let parent = parent.as_ref();
    let mut s = CborSha::<H>::new();
    s.head(MAJOR_ARRAY, 3);
    s.head(MAJOR_BYTES, parent.len() as u64);
    s.bytes(parent);
    s.head(MAJOR_ARRAY, tokens.len() as u64);
    for &t in tokens {
        s.head(MAJOR_UINT, u64::from(t));
    }
    s.bytes(&[CBOR_NULL]);
    s.finish()
}

/// [`seed_hash`] with SHA-256 (`sha256_cbor`).
pub fn seed_digest(seed: &str) -> Digest {
    seed_hash::<Sha256Cbor>(seed)
}

/// [`block_hash`] with SHA-256 (`sha256_cbor`).
pub fn block_digest(parent: &Digest, tokens: &[u32]) -> Digest {
    block_hash::<Sha256Cbor>(parent, tokens)
}

/// The 64-bit key of a digest: its last 8 bytes read big-endian (vLLM's
/// `maybe_convert_block_hash`, `int.from_bytes(h, "big") & (2**64 - 1)`). Every digest here has
/// at least 16 bytes.
pub fn digest_key(d: &[u8]) -> u64 {
    let mut last = [0u8; 8];
    last.copy_from_slice(&d[d.len() - 8..]);
    u64::from_be_bytes(last)
}

/// Checks a vLLM block size: 1 ..= [`MAX_VLLM_BLOCK_TOKENS`].
pub fn check_block_tokens(b: usize) -> Result<(), Error> {
    if b == 0 || b > MAX_VLLM_BLOCK_TOKENS {
        return Err(Error::InvalidConfig {
            field: Field::BlockSize,
            expected: quoting!("a whole number of tokens from 1 to 1048576", MAX_VLLM_BLOCK_TOKENS),
        });
    }
    Ok(())
}

/// Keys of the full `block_tokens`-token blocks of a prompt, chained from `seed` (a
/// [`seed_digest`]); the trailing partial block is not hashed. Writes `tokens.len() / block_tokens`
/// keys into `out` and returns that count.
pub fn token_keys(seed: &Digest, tokens: &[u32], block_tokens: usize, out: &mut [u64]) -> Result<usize, Error> {
    chain_keys::<Sha256Cbor>(seed, tokens, block_tokens, out)
}

/// [`token_keys`] with any hash of the family, chained from `seed` (a [`seed_hash`]).
pub fn chain_keys<H: CborHash>(
    seed: &H::Digest,
    tokens: &[u32],
    block_tokens: usize,
    out: &mut [u64],
) -> Result<usize, Error> {
    check_block_tokens(block_tokens)?;
    let m = tokens.len() / block_tokens;
    let Some(out) = out.get_mut(..m) else {
        return Err(Error::BufferSize { buffer: Buffer::Keys, expected: m, got: out.len() });
    };
    let mut parent = *seed;
    for (key, block) in out.iter_mut().zip(tokens.chunks_exact(block_tokens)) {
        parent = block_hash::<H>(&parent, block);
        *key = digest_key(parent.as_ref());
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_have_the_canonical_widths() {
        let mut h = [0u8; 9];
        for (v, len) in [(0u64, 1), (23, 1), (24, 2), (255, 2), (256, 3), (65535, 3), (65536, 5), (u32::MAX as u64, 5)]
        {
            assert_eq!(cbor_uint(v, &mut h), len, "{v}");
        }
        assert_eq!(cbor_uint(1 << 32, &mut h), 9);
        assert_eq!(h, [0x1b, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(cbor_head(MAJOR_ARRAY, 16, &mut h), 1);
        assert_eq!(h[0], 0x90);
        assert_eq!(cbor_head(MAJOR_ARRAY, 64, &mut h), 2);
        assert_eq!(h[..2], [0x98, 0x40]);
    }

    #[test]
    fn partial_block_is_not_hashed_and_chain_depends_on_parent() {
        let seed = seed_digest("0");
        let tokens: [u32; 40] = core::array::from_fn(|i| i as u32 * 1000);
        let mut out = [0u64; 4];
        assert_eq!(token_keys(&seed, &tokens, 16, &mut out), Ok(2));
        let d0 = block_digest(&seed, &tokens[..16]);
        assert_eq!(out[0], digest_key(&d0));
        assert_eq!(out[1], digest_key(&block_digest(&d0, &tokens[16..32])));
        assert_ne!(out[1], digest_key(&block_digest(&seed, &tokens[16..32])));
        assert!(token_keys(&seed, &tokens, 0, &mut out).is_err());
        assert!(token_keys(&seed, &tokens, 8, &mut out).is_err(), "5 keys do not fit in 4");
    }
}
