//! The batched fleet's first-key index (docs/MODEL.md, "The first-key index"): for a bounded
//! set of keys (the first prompt keys the router asked about, least recently asked replaced
//! first) the exact set of pods whose KV cache map holds each, kept up to date from the pods'
//! changed keys after each of their events. The exact view then answers "which pods hold this
//! key" for such a key with one lookup instead of one probe of every pod's own map (the first
//! key of a request is asked of every pod: 1,024 cache misses at 1,024 pods).
//!
//! Layout (bring your own storage): `keys` and `stamps` of one slot each, in sets of [`WAYS`]
//! slots (a power of two of sets), `bits` of `ceil(pods / 64)` words a slot. A key lives in the
//! set its hash picks; a stamp of 0 marks a free slot, otherwise it is the clock of the key's
//! last use. Deterministic: what is replaced depends only on the order of the calls.

use crate::fleet::base::error::{Buffer, Error};
use crate::fleet::base::mask::{WORD_PODS, words_for};

/// Slots of a set (one cache line of keys).
pub const WAYS: usize = 8;

/// The first-key index over caller storage.
pub struct HeadIndex<'a> {
    keys: &'a mut [u64],
    stamps: &'a mut [u64],
    bits: &'a mut [u64],
    words: usize,
    set_mask: usize,
    pods: usize,
    clock: u64,
    /// Keys looked up in every pod's map to enter the index (reporting only).
    pub fills: u64,
    /// Whole-pod re-reads after a pod's log overflowed (reporting only).
    pub resyncs: u64,
}

impl<'a> HeadIndex<'a> {
    /// Words of pod bits a slot holds for `pods` pods.
    pub const fn words(pods: usize) -> usize {
        words_for(pods)
    }

    /// An empty index for `pods` pods over `keys` (a power of two of at least [`WAYS`] slots),
    /// `stamps` (as long) and `bits` ([`Self::words`] of `pods` per slot).
    pub fn new(keys: &'a mut [u64], stamps: &'a mut [u64], bits: &'a mut [u64], pods: usize) -> Result<Self, Error> {
        let n = keys.len();
        if n < WAYS || !n.is_power_of_two() {
            let expected = n.max(WAYS).next_power_of_two();
            return Err(Error::BufferSize { buffer: Buffer::HeadIndex, expected, got: n });
        }
        if stamps.len() != n {
            return Err(Error::BufferSize { buffer: Buffer::HeadIndex, expected: n, got: stamps.len() });
        }
        let words = Self::words(pods);
        if pods == 0 || bits.len() != n * words {
            return Err(Error::BufferSize { buffer: Buffer::HeadIndex, expected: n * words.max(1), got: bits.len() });
        }
        stamps.fill(0);
        Ok(HeadIndex { keys, stamps, bits, words, set_mask: n / WAYS - 1, pods, clock: 0, fills: 0, resyncs: 0 })
    }

    /// The pods the index is for.
    pub fn pods(&self) -> usize {
        self.pods
    }

    /// First slot of `key`'s set.
    #[inline(always)]
    fn set_of(&self, key: u64) -> usize {
        let h = key.wrapping_mul(super::table::FIB) >> 32;
        (h as usize & self.set_mask) * WAYS
    }

    /// The slot holding `key`, if the index keeps it.
    #[inline]
    pub fn find(&self, key: u64) -> Option<usize> {
        let s = self.set_of(key);
        (s..s + WAYS).find(|&i| self.stamps[i] != 0 && self.keys[i] == key)
    }

    /// Pod bits of slot `slot` (bit b of word w: pod 64 w + b holds the slot's key).
    #[inline]
    pub fn holders(&self, slot: usize) -> &[u64] {
        &self.bits[slot * self.words..(slot + 1) * self.words]
    }

    /// Keeps `key` (taking the least recently used slot of its set when it is new, its pods
    /// read with `holds(pod)` for every pod) and marks it used now; its slot.
    pub fn track(&mut self, key: u64, holds: impl Fn(usize) -> bool) -> usize {
        self.clock += 1;
        if let Some(i) = self.find(key) {
            self.stamps[i] = self.clock;
            return i;
        }
        let s = self.set_of(key);
        // a free slot, else the least recently used (the lowest on a tie)
        let mut v = s;
        for i in s..s + WAYS {
            if self.stamps[i] < self.stamps[v] {
                v = i;
            }
        }
        self.keys[v] = key;
        self.stamps[v] = self.clock;
        let w = self.words;
        let bits = &mut self.bits[v * w..(v + 1) * w];
        bits.fill(0);
        for p in 0..self.pods {
            if holds(p) {
                bits[p / WORD_PODS] |= 1 << (p % WORD_PODS);
            }
        }
        self.fills += 1;
        v
    }

    /// Pod `pod`'s map gained or lost `key`: sets its bit to `holds()` if the index keeps the key.
    #[inline]
    pub fn note(&mut self, key: u64, pod: usize, holds: impl FnOnce() -> bool) {
        if let Some(i) = self.find(key) {
            let word = &mut self.bits[i * self.words + pod / WORD_PODS];
            let bit = 1u64 << (pod % WORD_PODS);
            if holds() {
                *word |= bit;
            } else {
                *word &= !bit;
            }
        }
    }

    /// Re-reads pod `pod`'s bit of every key kept (after its changes were not all logged).
    pub fn resync_pod(&mut self, pod: usize, holds: impl Fn(u64) -> bool) {
        self.resyncs += 1;
        for i in 0..self.keys.len() {
            if self.stamps[i] != 0 {
                let word = &mut self.bits[i * self.words + pod / WORD_PODS];
                let bit = 1u64 << (pod % WORD_PODS);
                if holds(self.keys[i]) {
                    *word |= bit;
                } else {
                    *word &= !bit;
                }
            }
        }
    }

    /// Calls `f` with every key kept and its pod bits.
    pub fn each(&self, mut f: impl FnMut(u64, &[u64])) {
        for i in 0..self.keys.len() {
            if self.stamps[i] != 0 {
                f(self.keys[i], self.holders(i));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_least_recent_of_a_set_and_keeps_bits() {
        let (mut k, mut s, mut b) = ([0u64; 8], [9u64; 8], [0u64; 16]);
        let mut ix = HeadIndex::new(&mut k, &mut s, &mut b, 70).unwrap();
        for key in 0..8u64 {
            ix.track(key, |p| p == key as usize || p == 69);
        }
        assert_eq!(ix.holders(ix.find(3).unwrap()), &[1 << 3, 1 << 5]);
        ix.track(0, |_| true); // 0 used again: 1 is now the least recent
        ix.track(100, |_| false);
        assert!(ix.find(1).is_none() && ix.find(0).is_some() && ix.find(100).is_some());
        ix.note(100, 69, || true);
        ix.note(5, 5, || false);
        assert_eq!(ix.holders(ix.find(100).unwrap()), &[0, 1 << 5]);
        assert_eq!(ix.holders(ix.find(5).unwrap()), &[0, 1 << 5]);
        ix.resync_pod(2, |key| key == 100);
        assert_eq!(ix.holders(ix.find(100).unwrap()), &[1 << 2, 1 << 5]);
        assert_eq!(ix.holders(ix.find(2).unwrap()), &[0, 1 << 5]);
    }

    #[test]
    fn bad_buffers_are_errors() {
        let (mut k, mut s, mut b) = ([0u64; 12], [0u64; 12], [0u64; 12]);
        assert!(HeadIndex::new(&mut k, &mut s, &mut b, 3).is_err());
        let (mut k, mut s, mut b) = ([0u64; 8], [0u64; 8], [0u64; 8]);
        assert!(HeadIndex::new(&mut k, &mut s, &mut b, 65).is_err());
        assert!(HeadIndex::new(&mut k, &mut s, &mut b, 0).is_err());
        assert!(HeadIndex::new(&mut k, &mut s, &mut b, 64).is_ok());
    }
}
