//! The global block index (key -> set of pods) and the stale-evict queue.
//!
//! The index is fed by the pods' events: an insert sets the pod's bit at once; an evict clears it
//! at once *in the held set*, and, when the router works with a stale view (delay k > 0), is also
//! recorded in [`PendingEvicts`] until it "reaches" the router. What the router believes is
//!
//! ```text
//! believed(p, key) = held(p, key)  OR  p evicted key while dispatching one of the last k requests
//! ```
//!
//! which is exactly the rule of docs/MODEL.md ("an evict made while dispatching request i reaches
//! the index just before request i+k+1 is routed, and is dropped if the same pod re-inserted that
//! key after the eviction"): the proof is in MODEL.md, "Stale index".

use super::table::{self, Probe};
use crate::fleet::base::error::{Buffer, Error, Limit};
use crate::fleet::base::mask::{PodSet, WORD_PODS, words_for};

/// One 16-byte unit of the index table: a key and a 64-pod word of the set of pods holding it.
/// A fleet of at most 64 pods uses one unit per slot (`mask == 0` marks an empty slot); a larger
/// one `ceil(pods / 64)` consecutive units per slot: the first unit's `key` is the key, unit j's
/// `mask` is word j (pods 64 j .. 64 j + 63), and the second unit's `key` counts the holders
/// (0 marks an empty slot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexEntry {
    key: u64,
    mask: u64,
}

/// Key -> set of pods holding it, over a caller-provided power-of-two table.
#[derive(Debug)]
pub struct BlockIndex<'a> {
    entries: &'a mut [IndexEntry],
    /// Units per slot: `ceil(pods / 64)`.
    words: usize,
    shift: u32,
    len: usize,
    max_len: usize,
}

// One unit per slot (at most 64 pods) is tested first in each method: the eviction path's
// backward shift then costs what it cost with plain `u64` masks.
impl Probe for BlockIndex<'_> {
    fn slots(&self) -> usize {
        if self.words == 1 { self.entries.len() } else { self.entries.len() / self.words }
    }
    fn is_empty(&self, i: usize) -> bool {
        self.vacant(i)
    }
    fn home_of(&self, i: usize) -> usize {
        let key = if self.words == 1 { self.entries[i].key } else { self.entries[i * self.words].key };
        table::home(key, self.shift)
    }
    fn move_entry(&mut self, from: usize, to: usize) {
        let w = self.words;
        if w == 1 {
            self.entries[to] = self.entries[from];
        } else {
            self.entries.copy_within(from * w..from * w + w, to * w);
        }
    }
    fn clear(&mut self, i: usize) {
        let w = self.words;
        if w == 1 {
            self.entries[i] = IndexEntry::default();
        } else {
            self.entries[i * w..i * w + w].fill(IndexEntry::default());
        }
    }
}

impl<'a> BlockIndex<'a> {
    /// Table length for an index of at most 64 pods that must hold up to `keys` distinct keys.
    pub const fn table_len(keys: usize) -> usize {
        match table::table_len_for(keys) {
            Some(n) => n,
            None => 0,
        }
    }

    /// Table length (in [`IndexEntry`] units) for an index of `pods` pods that must hold up to
    /// `keys` distinct keys: [`Self::table_len`] slots of `ceil(pods / 64)` units (0 when it
    /// does not fit in memory).
    pub const fn table_len_for_pods(keys: usize, pods: usize) -> usize {
        match Self::table_len(keys).checked_mul(words_for(pods)) {
            Some(n) => n,
            None => 0,
        }
    }

    /// An empty index of at most 64 pods over `entries` (length: a power of two, see
    /// [`Self::table_len`]).
    pub fn new(entries: &'a mut [IndexEntry]) -> Result<Self, Error> {
        Self::with_pods(entries, WORD_PODS)
    }

    /// An empty index of `pods` pods over `entries` (length: see [`Self::table_len_for_pods`]).
    pub fn with_pods(entries: &'a mut [IndexEntry], pods: usize) -> Result<Self, Error> {
        let words = words_for(pods);
        let slots = entries.len() / words;
        if !entries.len().is_multiple_of(words) || !table::check_len(slots, 2) {
            return Err(Error::BufferSize { buffer: Buffer::Index, expected: 2 * words, got: entries.len() });
        }
        entries.fill(IndexEntry::default());
        let shift = table::shift_for(slots);
        let max_len = table::max_entries(slots);
        Ok(BlockIndex { entries, words, shift, len: 0, max_len })
    }

    /// Distinct keys held by at least one pod.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no pod holds anything.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn vacant(&self, i: usize) -> bool {
        if self.words == 1 { self.entries[i].mask == 0 } else { self.entries[i * self.words + 1].key == 0 }
    }

    /// [`Self::find`] for an index of one unit per slot (at most 64 pods): the probe of a plain
    /// `u64`-mask table, no multiply by the slot width on the hot path.
    #[inline(always)]
    fn find_narrow(&self, key: u64) -> Result<usize, usize> {
        debug_assert_eq!(self.words, 1);
        let mask = self.entries.len() - 1;
        let mut i = table::home(key, self.shift);
        loop {
            let e = self.entries[i];
            if e.mask == 0 {
                return Err(i);
            }
            if e.key == key {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    fn find(&self, key: u64) -> Result<usize, usize> {
        if self.words == 1 {
            return self.find_narrow(key);
        }
        let mask = self.entries.len() / self.words - 1;
        let mut i = table::home(key, self.shift);
        loop {
            if self.vacant(i) {
                return Err(i);
            }
            if self.entries[i * self.words].key == key {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Bitmask of pods 0..64 holding `key` (the whole set for an index of at most 64 pods).
    #[inline]
    pub fn mask(&self, key: u64) -> u64 {
        if self.words == 1 {
            return match self.find_narrow(key) {
                Ok(i) => self.entries[i].mask,
                Err(_) => 0,
            };
        }
        match self.find(key) {
            Ok(i) => self.entries[i * self.words].mask,
            Err(_) => 0,
        }
    }

    /// The slot holding `key`, if any pod holds it (for [`Self::word`]).
    #[inline]
    pub fn slot_of(&self, key: u64) -> Option<usize> {
        self.find(key).ok()
    }

    /// Word `w` (pods 64 w .. 64 w + 63) of the pod set in slot `slot` (0 beyond the index's
    /// words).
    #[inline]
    pub fn word(&self, slot: usize, w: usize) -> u64 {
        if w < self.words { self.entries[slot * self.words + w].mask } else { 0 }
    }

    /// The pods holding `key`, as a set of `W` words (W at least `ceil(pods / 64)`; pods beyond
    /// 64 W are not reported).
    #[inline]
    pub fn holders<const W: usize>(&self, key: u64) -> PodSet<W> {
        debug_assert!(self.words <= W, "a set as wide as the index");
        let mut out = PodSet::EMPTY;
        if W == 1 {
            out.0[0] = self.mask(key);
            return out;
        }
        if let Ok(i) = self.find(key) {
            let base = i * self.words;
            for (o, e) in out.0.iter_mut().zip(&self.entries[base..base + self.words]) {
                *o = e.mask;
            }
        }
        out
    }

    /// Pod `pod` now holds `key`.
    pub fn insert(&mut self, key: u64, pod: usize) -> Result<(), Error> {
        debug_assert!(pod < self.words * WORD_PODS, "a pod of the index");
        if self.words == 1 {
            // One unit per slot: the plain-mask update.
            match self.find_narrow(key) {
                Ok(i) => self.entries[i].mask |= 1 << pod,
                Err(i) => {
                    if self.len == self.max_len {
                        return Err(Error::CapacityExceeded { limit: Limit::IndexKeys, capacity: self.max_len });
                    }
                    self.entries[i] = IndexEntry { key, mask: 1 << pod };
                    self.len += 1;
                }
            }
            return Ok(());
        }
        let (w, bit) = (pod / WORD_PODS, 1u64 << (pod % WORD_PODS));
        let i = match self.find(key) {
            Ok(i) => i,
            Err(i) => {
                if self.len == self.max_len {
                    return Err(Error::CapacityExceeded { limit: Limit::IndexKeys, capacity: self.max_len });
                }
                self.entries[i * self.words].key = key;
                self.len += 1;
                i
            }
        };
        let base = i * self.words;
        let e = &mut self.entries[base + w].mask;
        if self.words > 1 && *e & bit == 0 {
            self.entries[base + 1].key += 1;
        }
        self.entries[base + w].mask |= bit;
        Ok(())
    }

    /// Pod `pod` no longer holds `key`.
    pub fn remove(&mut self, key: u64, pod: usize) {
        debug_assert!(pod < self.words * WORD_PODS, "a pod of the index");
        if self.words == 1 {
            if let Ok(i) = self.find_narrow(key) {
                self.entries[i].mask &= !(1u64 << pod);
                if self.entries[i].mask == 0 {
                    table::remove_at(self, i);
                    self.len -= 1;
                }
            }
            return;
        }
        let (w, bit) = (pod / WORD_PODS, 1u64 << (pod % WORD_PODS));
        if let Ok(i) = self.find(key) {
            let base = i * self.words;
            if self.entries[base + w].mask & bit == 0 {
                return;
            }
            self.entries[base + w].mask &= !bit;
            if self.words > 1 {
                self.entries[base + 1].key -= 1;
            }
            if self.vacant(i) {
                table::remove_at(self, i);
                self.len -= 1;
            }
        }
    }
}

/// An eviction on its way to the router.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingRecord {
    key: u64,
    dispatch: u64,
    pod: u32,
}

/// Latest pending eviction of (key, pod) (`pod_plus1 == 0` marks an empty entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingEntry {
    key: u64,
    latest: u64,
    pod_plus1: u32,
}

/// Evictions made during the last k dispatches, in a FIFO ring, with a table of the latest
/// eviction per (key, pod) for O(1) lookups.
#[derive(Debug)]
pub struct PendingEvicts<'a> {
    ring: &'a mut [PendingRecord],
    head: usize,
    len: usize,
    table: PendingTable<'a>,
}

#[derive(Debug)]
struct PendingTable<'a> {
    entries: &'a mut [PendingEntry],
    shift: u32,
    len: usize,
    max_len: usize,
}

#[inline(always)]
fn pair_hash(key: u64, pod: u32) -> u64 {
    key ^ (pod as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)
}

impl Probe for PendingTable<'_> {
    fn slots(&self) -> usize {
        self.entries.len()
    }
    fn is_empty(&self, i: usize) -> bool {
        self.entries[i].pod_plus1 == 0
    }
    fn home_of(&self, i: usize) -> usize {
        let e = self.entries[i];
        table::home(pair_hash(e.key, e.pod_plus1 - 1), self.shift)
    }
    fn move_entry(&mut self, from: usize, to: usize) {
        self.entries[to] = self.entries[from];
    }
    fn clear(&mut self, i: usize) {
        self.entries[i] = PendingEntry::default();
    }
}

impl PendingTable<'_> {
    #[inline]
    fn find(&self, key: u64, pod: u32) -> Result<usize, usize> {
        let mask = self.entries.len() - 1;
        let mut i = table::home(pair_hash(key, pod), self.shift);
        loop {
            let e = self.entries[i];
            if e.pod_plus1 == 0 {
                return Err(i);
            }
            if e.key == key && e.pod_plus1 == pod + 1 {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }
}

impl<'a> PendingEvicts<'a> {
    /// Table length for a queue of `records` records.
    pub const fn table_len(records: usize) -> usize {
        match table::table_len_for(records) {
            Some(n) => n,
            None => 0,
        }
    }

    /// An empty queue; `ring.len()` records at most, `table.len()` must be [`Self::table_len`].
    pub fn new(ring: &'a mut [PendingRecord], table: &'a mut [PendingEntry]) -> Result<Self, Error> {
        let required = Self::table_len(ring.len());
        if ring.is_empty() || table.len() != required {
            return Err(Error::BufferSize { buffer: Buffer::PendingEvictTable, expected: required, got: table.len() });
        }
        table.fill(PendingEntry::default());
        let shift = table::shift_for(table.len());
        let max_len = table::max_entries(table.len());
        Ok(PendingEvicts { ring, head: 0, len: 0, table: PendingTable { entries: table, shift, len: 0, max_len } })
    }

    /// Records in flight.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no eviction is in flight.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pod `pod` evicted `key` while dispatching request `dispatch`.
    pub fn record(&mut self, key: u64, pod: usize, dispatch: u64) -> Result<(), Error> {
        let pod = pod as u32;
        if self.len == self.ring.len() {
            return Err(Error::CapacityExceeded { limit: Limit::PendingEvictions, capacity: self.ring.len() });
        }
        let t = &mut self.table;
        match t.find(key, pod) {
            Ok(i) => t.entries[i].latest = dispatch,
            Err(i) => {
                if t.len == t.max_len {
                    return Err(Error::CapacityExceeded { limit: Limit::PendingEvictions, capacity: t.max_len });
                }
                t.entries[i] = PendingEntry { key, latest: dispatch, pod_plus1: pod + 1 };
                t.len += 1;
            }
        }
        let tail = (self.head + self.len) % self.ring.len();
        self.ring[tail] = PendingRecord { key, dispatch, pod };
        self.len += 1;
        Ok(())
    }

    /// Delivers every eviction made while dispatching requests `<= upto`.
    pub fn deliver_through(&mut self, upto: u64) {
        while self.len > 0 {
            let r = self.ring[self.head];
            if r.dispatch > upto {
                break;
            }
            self.head = (self.head + 1) % self.ring.len();
            self.len -= 1;
            // Only the latest eviction of (key, pod) ends the router's belief.
            if let Ok(i) = self.table.find(r.key, r.pod)
                && self.table.entries[i].latest == r.dispatch
            {
                table::remove_at(&mut self.table, i);
                self.table.len -= 1;
            }
        }
    }

    /// True when pod `pod` evicted `key` during the last k dispatches.
    #[inline]
    pub fn contains(&self, key: u64, pod: usize) -> bool {
        self.table.find(key, pod as u32).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1,024-pod index against a model (per key, the set of pods), through inserts and removes
    /// that shift probe runs: the holder counts and the backward-shift deletion over 16-unit
    /// slots.
    #[test]
    fn wide_index_matches_a_model() {
        let pods = 1024;
        let mut entries = [IndexEntry::default(); 16 * 64];
        assert_eq!(BlockIndex::table_len_for_pods(40, pods), entries.len());
        let mut ix = BlockIndex::with_pods(&mut entries, pods).unwrap();
        let mut model = [PodSet::<16>::EMPTY; 40];
        let mut x = 7u64;
        for step in 0..4000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = (x >> 33) % 40;
            let pod = ((x >> 13) % 1024) as usize;
            let pod = if step % 3 == 0 { pod % 70 } else { pod };
            if (x >> 7) & 1 == 0 {
                ix.insert(key * 0x1_0000_0001, pod).unwrap();
                model[key as usize].insert(pod);
            } else {
                ix.remove(key * 0x1_0000_0001, pod);
                model[key as usize].remove(pod);
            }
            for (k, m) in model.iter().enumerate() {
                assert_eq!(ix.holders::<16>(k as u64 * 0x1_0000_0001), *m, "key {k} at step {step}");
            }
            assert_eq!(ix.len(), model.iter().filter(|m| !m.is_empty()).count());
        }
        assert!(BlockIndex::with_pods(&mut [IndexEntry::default(); 17], pods).is_err());
    }
}
