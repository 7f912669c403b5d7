//! Open addressing with linear probing and backward-shift deletion (no tombstones), shared by
//! the pod's key table, the block index and the pending-evict table.

use crate::fleet::base::limits::{LOAD_DEN, LOAD_NUM};

/// Fibonacci hashing multiplier: spreads keys over the table even if they are not random.
pub(crate) const FIB: u64 = 0x9e37_79b9_7f4a_7c15;

/// Smallest power-of-two table length keeping `entries` at most `LOAD_NUM/LOAD_DEN` full.
pub(crate) const fn table_len_for(entries: usize) -> Option<usize> {
    let Some(scaled) = entries.checked_mul(LOAD_DEN) else { return None };
    let min = scaled.div_ceil(LOAD_NUM);
    (if min < 2 { 2 } else { min }).checked_next_power_of_two()
}

/// Most entries a table of `len` slots may hold.
pub(crate) fn max_entries(len: usize) -> usize {
    len / LOAD_DEN * LOAD_NUM + len % LOAD_DEN * LOAD_NUM / LOAD_DEN
}

/// Right shift that maps a 64-bit product onto a table of `len` (a power of two, >= 2) slots.
pub(crate) fn shift_for(len: usize) -> u32 {
    64 - len.trailing_zeros()
}

/// Home slot of `key`.
#[inline(always)]
pub(crate) fn home(key: u64, shift: u32) -> usize {
    (key.wrapping_mul(FIB) >> shift) as usize
}

/// A table that [`remove_at`] can shift entries in.
pub(crate) trait Probe {
    fn slots(&self) -> usize;
    fn is_empty(&self, i: usize) -> bool;
    fn home_of(&self, i: usize) -> usize;
    fn move_entry(&mut self, from: usize, to: usize);
    fn clear(&mut self, i: usize);
}

/// Removes the entry at `hole`, shifting later entries of the probe run back so that every
/// remaining key stays reachable from its home slot. Returns the empty slot that ended the run
/// (as it was before the removal): a probe path that ended at another empty slot is unchanged.
pub(crate) fn remove_at<P: Probe>(t: &mut P, mut hole: usize) -> usize {
    debug_assert!(t.slots().is_power_of_two(), "tables are a power of two long");
    debug_assert!(hole < t.slots(), "the hole lies in the table");
    let mask = t.slots() - 1;
    let mut i = hole;
    loop {
        i = (i + 1) & mask;
        if t.is_empty(i) {
            break;
        }
        let h = t.home_of(i);
        debug_assert!(h < t.slots(), "a home slot lies in the table");
        // The entry may fill the hole when the hole lies on its probe path from `h` to `i`.
        if (i.wrapping_sub(h) & mask) >= (i.wrapping_sub(hole) & mask) {
            t.move_entry(i, hole);
            hole = i;
        }
    }
    t.clear(hole);
    debug_assert!(t.is_empty(hole) && t.is_empty(i), "the run ends at an empty slot; the hole is empty");
    i
}

/// [`remove_at`] for a table of `u32` entries (0 = empty) that carry their own home position in
/// bits `home_shift..` (the pod LRU's tag-homed, `direct`, tables: docs/MODEL.md, "Pod"), so that
/// the backward shift reads only the table. The same moves and the same result as [`remove_at`]
/// over a [`Probe`] whose `home_of(i)` is `(t[i] >> home_shift) & (len - 1)` (checked against it
/// by `tagged_removal_is_remove_at` below); inlined into the LRU's eviction.
#[inline(always)]
pub(crate) fn remove_tagged(t: &mut [u32], home_shift: u32, mut hole: usize) -> usize {
    debug_assert!(t.len().is_power_of_two(), "tables are a power of two long");
    debug_assert!(hole < t.len(), "the hole lies in the table");
    let mask = t.len() - 1;
    let mut i = hole;
    loop {
        i = (i + 1) & mask;
        let e = t[i];
        if e == 0 {
            break;
        }
        let h = (e >> home_shift) as usize & mask;
        if (i.wrapping_sub(h) & mask) >= (i.wrapping_sub(hole) & mask) {
            t[hole] = e;
            hole = i;
        }
    }
    t[hole] = 0;
    i
}

/// Checks a caller-provided table length: a power of two, at least 2 and at least `required`.
pub(crate) fn check_len(len: usize, required: usize) -> bool {
    len >= 2 && len.is_power_of_two() && len >= required
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::{vec, vec::Vec};

    /// The generic deletion over a tag-homed `u32` table: the oracle of [`remove_tagged`].
    struct Tagged<'t> {
        t: &'t mut [u32],
        shift: u32,
    }

    impl Probe for Tagged<'_> {
        fn slots(&self) -> usize {
            self.t.len()
        }
        fn is_empty(&self, i: usize) -> bool {
            self.t[i] == 0
        }
        fn home_of(&self, i: usize) -> usize {
            (self.t[i] >> self.shift) as usize & (self.t.len() - 1)
        }
        fn move_entry(&mut self, from: usize, to: usize) {
            self.t[to] = self.t[from];
        }
        fn clear(&mut self, i: usize) {
            self.t[i] = 0;
        }
    }

    /// Inserts entries `(home << shift) | id` by linear probing (ids from 1, so never 0).
    fn build(log_len: u32, shift: u32, homes: &[usize]) -> Vec<u32> {
        let len = 1usize << log_len;
        let mut t = vec![0u32; len];
        for (id, &h) in homes.iter().enumerate().take(len - 1) {
            let mut i = h & (len - 1);
            while t[i] != 0 {
                i = (i + 1) & (len - 1);
            }
            t[i] = ((h as u32 & (len as u32 - 1)) << shift) | (id as u32 + 1);
        }
        t
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Random tables of 2 to 64 slots up to full (so probe runs wrap around the end and
        /// collide), every entry removed in a random order: after each removal the table and the
        /// returned run end equal the generic [`remove_at`]'s.
        #[test]
        fn tagged_removal_is_remove_at(
            log_len in 1u32..7,
            homes in proptest::collection::vec(0usize..64, 1..64),
            order in proptest::collection::vec(any::<usize>(), 64),
        ) {
            let shift = 8;
            let mut a = build(log_len, shift, &homes);
            let mut b = a.clone();
            for pick in order {
                let full: Vec<usize> = (0..a.len()).filter(|&i| a[i] != 0).collect();
                if full.is_empty() {
                    break;
                }
                let hole = full[pick % full.len()];
                let end_a = remove_tagged(&mut a, shift, hole);
                let end_b = remove_at(&mut Tagged { t: &mut b, shift }, hole);
                prop_assert_eq!(end_a, end_b);
                prop_assert_eq!(&a, &b);
            }
        }
    }
}
