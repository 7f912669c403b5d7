//! Sets of pods as `u64` bitmasks (pod p is bit p; [`super::limits::MAX_PODS`] = 64).

/// The pods `0..n` as a bitmask.
#[inline]
pub const fn pods_mask(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// Calls `f` on every set bit of `mask`, lowest first.
#[inline]
pub fn for_each(mut mask: u64, mut f: impl FnMut(usize)) {
    while mask != 0 {
        f(mask.trailing_zeros() as usize);
        mask &= mask - 1;
    }
}
