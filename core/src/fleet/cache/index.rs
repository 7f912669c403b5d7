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

/// One index entry: a key and the bitmask of pods that hold it (`mask == 0` marks an empty entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexEntry {
    key: u64,
    mask: u64,
}

/// Key -> bitmask of pods holding it, over a caller-provided power-of-two table.
#[derive(Debug)]
pub struct BlockIndex<'a> {
    entries: &'a mut [IndexEntry],
    shift: u32,
    len: usize,
    max_len: usize,
}

impl Probe for BlockIndex<'_> {
    fn slots(&self) -> usize {
        self.entries.len()
    }
    fn is_empty(&self, i: usize) -> bool {
        self.entries[i].mask == 0
    }
    fn home_of(&self, i: usize) -> usize {
        table::home(self.entries[i].key, self.shift)
    }
    fn move_entry(&mut self, from: usize, to: usize) {
        self.entries[to] = self.entries[from];
    }
    fn clear(&mut self, i: usize) {
        self.entries[i] = IndexEntry::default();
    }
}

impl<'a> BlockIndex<'a> {
    /// Table length for an index that must hold up to `keys` distinct keys.
    pub const fn table_len(keys: usize) -> usize {
        match table::table_len_for(keys) {
            Some(n) => n,
            None => 0,
        }
    }

    /// An empty index over `entries` (length: a power of two, see [`Self::table_len`]).
    pub fn new(entries: &'a mut [IndexEntry]) -> Result<Self, Error> {
        if !table::check_len(entries.len(), 2) {
            return Err(Error::BufferSize { buffer: Buffer::Index, expected: 2, got: entries.len() });
        }
        entries.fill(IndexEntry::default());
        let shift = table::shift_for(entries.len());
        let max_len = table::max_entries(entries.len());
        Ok(BlockIndex { entries, shift, len: 0, max_len })
    }

    /// Distinct keys held by at least one pod.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no pod holds anything.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn find(&self, key: u64) -> Result<usize, usize> {
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

    /// Bitmask of pods holding `key`.
    #[inline]
    pub fn mask(&self, key: u64) -> u64 {
        match self.find(key) {
            Ok(i) => self.entries[i].mask,
            Err(_) => 0,
        }
    }

    /// Pod `pod` now holds `key`.
    pub fn insert(&mut self, key: u64, pod: usize) -> Result<(), Error> {
        match self.find(key) {
            Ok(i) => self.entries[i].mask |= 1 << pod,
            Err(i) => {
                if self.len == self.max_len {
                    return Err(Error::CapacityExceeded { limit: Limit::IndexKeys, capacity: self.max_len });
                }
                self.entries[i] = IndexEntry { key, mask: 1 << pod };
                self.len += 1;
            }
        }
        Ok(())
    }

    /// Pod `pod` no longer holds `key`.
    pub fn remove(&mut self, key: u64, pod: usize) {
        if let Ok(i) = self.find(key) {
            self.entries[i].mask &= !(1u64 << pod);
            if self.entries[i].mask == 0 {
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
