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

/// Checks a caller-provided table length: a power of two, at least 2 and at least `required`.
pub(crate) fn check_len(len: usize, required: usize) -> bool {
    len >= 2 && len.is_power_of_two() && len >= required
}
