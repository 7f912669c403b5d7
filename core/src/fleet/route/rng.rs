//! The shipped routers' only randomness: a SplitMix64 seeded from `RouterParams::seed`, and the
//! uniform pick among a set of pods.

use crate::fleet::base::mask::PodSet;

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

/// A uniform pick among the pods of `set` (non-empty); no draw when there is one.
pub(super) fn pick_uniform<const W: usize>(rng: &mut SplitMix64, set: PodSet<W>) -> usize {
    debug_assert!(!set.is_empty());
    let n = u64::from(set.count());
    if n == 1 { set.lowest() } else { set.nth(rng.below(n)) }
}
