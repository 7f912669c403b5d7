//! Chained 64-bit block keys: `key_j = H(key_{j-1}, block j)`, with `key_{-1} = ROOT_KEY`.
//!
//! Why this hash (details in docs/MODEL.md, "Block keys"):
//! * no_std, no tables, no dependencies: a few 64x64->128 multiplies and xor-shifts, identical on
//!   every architecture (integer arithmetic only).
//! * speed: a 16-token block is four independent folded multiplies (the wyhash / xxh3 "mum"
//!   primitive, so they run in parallel) and one murmur3 `fmix64` finalizer; a trace block
//!   (`hash_id`, sub-block) is two `fmix64`.
//! * quality: `fmix64` is a bijection with full avalanche, and the parent key enters only through
//!   it, so for a fixed block two different parents never give the same key, and for a fixed
//!   parent and sub-block two different hash ids never do either. Other pairs collide like random
//!   64-bit values: with n distinct blocks the chance of any collision is about n^2 / 2^65, 2.7e-4 at
//!   n = 10^8.
//! * It is not a cryptographic hash: inputs can be built on purpose to collide (a token word equal
//!   to a secret constant zeroes one multiply, as in wyhash). Simulated traffic does not do that.

use crate::fleet::base::limits::BLOCK_TOKENS;

/// `key_{-1}`: the parent of every prompt's first block.
pub const ROOT_KEY: u64 = 0x6272_6f6b_6572_6c61; // "brokerla"

/// Secrets for the token-block multiplies (the wyhash v4 default secret words).
const K: [u64; 8] = [
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
    0x1d8e_4e27_c47d_124f,
    0x7259_0c8f_7f8e_5a19,
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
];
/// Domain separation: a trace block id never hashes like a token block.
const DOMAIN_TRACE: u64 = 0x94d0_49bb_1331_11eb;

/// Folded 64x64 -> 128-bit multiply.
#[inline(always)]
fn mum(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

/// The murmur3 64-bit finalizer: a bijection on `u64` with full avalanche.
#[inline(always)]
pub const fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// Key of a block of 16 token ids whose parent key is `parent`.
#[inline]
pub fn chain_tokens(parent: u64, block: &[u32; BLOCK_TOKENS]) -> u64 {
    let w = |i: usize| (block[2 * i] as u64) | ((block[2 * i + 1] as u64) << 32);
    let s = mum(w(0) ^ K[0], w(1) ^ K[1])
        .wrapping_add(mum(w(2) ^ K[2], w(3) ^ K[3]))
        .wrapping_add(mum(w(4) ^ K[4], w(5) ^ K[5]))
        .wrapping_add(mum(w(6) ^ K[6], w(7) ^ K[7]));
    fmix64(parent ^ s)
}

/// Key of trace block (`hash_id`, `sub`) — the `sub`-th 16-token block inside trace hash id
/// `hash_id` — whose parent key is `parent`.
#[inline]
pub fn chain_trace(parent: u64, hash_id: u64, sub: u32) -> u64 {
    chain_trace_mixed(parent, trace_id_mix(hash_id), sub)
}

/// The part of a trace block's word that depends on its hash id only (the same for all its
/// sub-blocks, so a loop over an id's blocks computes it once).
#[inline]
pub fn trace_id_mix(hash_id: u64) -> u64 {
    fmix64(hash_id ^ DOMAIN_TRACE)
}

/// [`chain_trace`] given `id_mix` = [`trace_id_mix`]`(hash_id)`.
#[inline]
pub fn chain_trace_mixed(parent: u64, id_mix: u64, sub: u32) -> u64 {
    fmix64(parent ^ (id_mix ^ (sub as u64).wrapping_mul(K[6])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_token_changes_this_and_every_later_key() {
        let a = [[7u32; 16], [8u32; 16], [9u32; 16]];
        let mut b = a;
        b[1][15] = 1234;
        let chain = |blocks: &[[u32; 16]; 3]| {
            let mut out = [0u64; 3];
            let mut parent = ROOT_KEY;
            for (o, blk) in out.iter_mut().zip(blocks) {
                parent = chain_tokens(parent, blk);
                *o = parent;
            }
            out
        };
        let (ka, kb) = (chain(&a), chain(&b));
        assert_eq!(ka[0], kb[0]);
        assert_ne!(ka[1], kb[1]);
        assert_ne!(ka[2], kb[2]);
    }

    #[test]
    fn avalanche_is_close_to_half_the_bits() {
        // Flip every input bit of a token block and of the parent; the mean number of output bits
        // that change must be near 32 (a broken mixer gives far fewer).
        let base = [0x1234_5678u32; 16];
        let k0 = chain_tokens(ROOT_KEY, &base);
        let mut total = 0u32;
        let mut n = 0u32;
        for t in 0..16 {
            for bit in 0..32 {
                let mut b = base;
                b[t] ^= 1 << bit;
                total += (chain_tokens(ROOT_KEY, &b) ^ k0).count_ones();
                n += 1;
            }
        }
        for bit in 0..64 {
            total += (chain_tokens(ROOT_KEY ^ (1 << bit), &base) ^ k0).count_ones();
            n += 1;
        }
        let mean = total as f64 / n as f64;
        assert!((30.0..34.0).contains(&mean), "mean flipped bits {mean}");
    }

    #[test]
    fn trace_blocks_differ_by_id_and_sub() {
        let p = ROOT_KEY;
        assert_ne!(chain_trace(p, 1, 0), chain_trace(p, 2, 0));
        assert_ne!(chain_trace(p, 1, 0), chain_trace(p, 1, 1));
        assert_ne!(chain_trace(p, 1, 0), chain_trace(p ^ 1, 1, 0));
    }
}
