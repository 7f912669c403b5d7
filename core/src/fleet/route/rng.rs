//! The shipped routers' only randomness: a SplitMix64 seeded from `RouterParams::seed`, and the
//! uniform pick among a set of pods.

/// SplitMix64 (Steele, Lea, Flood 2014): small, seedable, the same on every target.
#[derive(Clone, Copy, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A draw in 0..n (n >= 1) by multiply-shift (bias below n / 2^64).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n >= 1);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// The `k`-th (0-based) set bit of `mask`.
pub(super) fn nth_bit(mut mask: u64, k: u64) -> usize {
    for _ in 0..k {
        mask &= mask - 1;
    }
    mask.trailing_zeros() as usize
}

/// A uniform pick among the pods of `mask` (non-empty); no draw when there is one.
pub(super) fn pick_uniform(rng: &mut SplitMix64, mask: u64) -> usize {
    debug_assert!(mask != 0);
    let n = mask.count_ones() as u64;
    if n == 1 { mask.trailing_zeros() as usize } else { nth_bit(mask, rng.below(n)) }
}
