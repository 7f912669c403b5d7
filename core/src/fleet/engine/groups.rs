//! The batched engine's cache map kept per trace id (docs/MODEL.md, "Run-length KV blocks"):
//! for a trace of ids of R 16-token blocks each, block j of a prompt is sub-block j mod R of the
//! group named by the prompt's key of block j - j mod R (its *group key*: the id in its prefix
//! context). The map is two-level: group key -> a record of R slots, slot s holding the block
//! cached for sub-block s of that group (or none). One probe of the group table per group of a
//! request instead of one per block, and an eviction clears its slot in the record without a
//! probe (the group's entry leaves the table with its last cached sub-block). Holes (a cached
//! sub-block above an uncached one) are slots like any other, so the map holds exactly the
//! per-block map's (key -> block) pairs at every step, as long as keys do not collide (the
//! model's standing assumption, docs/MODEL.md "Blocks and keys": a key is then a function of its
//! group key and sub-block number).
//!
//! Every buffer is the caller's ([`PoolGroups::layout`]).

use crate::fleet::base::error::{Buffer, Error};
use crate::fleet::cache::table::{self, Probe};

/// "No block / no record".
const NIL: u32 = u32::MAX;

/// One pod's group map.
pub struct PoolGroups<'a> {
    /// Sub-blocks per group R.
    r: u32,
    /// log2 of a record's slot stride (R rounded up to a power of two).
    stride_log: u32,
    /// Group table: record + 1, 0 empty.
    table: &'a mut [u32],
    shift: u32,
    /// Per record: its group key.
    gkeys: &'a mut [u64],
    /// Per record: cached sub-blocks; while the record is free, the next free record.
    counts: &'a mut [u32],
    /// Per record, `1 << stride_log` slots: block + 1, 0 none.
    slots: &'a mut [u32],
    /// Per block: its slot index while it holds a key.
    blk_slot: &'a mut [u32],
    /// Per block, while a request owns it: the owner's previous own block (the engine's owner
    /// chain, kept here in 4 bytes a block rather than in the 20-byte blocks: a release walks
    /// it one dependent load at a time, and this array is 1/5 of the blocks' cache footprint).
    own_next: &'a mut [u32],
    /// Head of the free records.
    free: u32,
    /// Records in use (groups in the table).
    used: u32,
}

/// A view of the group table for [`table::remove_at`].
struct View<'t> {
    table: &'t mut [u32],
    gkeys: &'t [u64],
    shift: u32,
}

impl Probe for View<'_> {
    fn slots(&self) -> usize {
        self.table.len()
    }
    fn is_empty(&self, i: usize) -> bool {
        self.table[i] == 0
    }
    fn home_of(&self, i: usize) -> usize {
        table::home(self.gkeys[self.table[i] as usize - 1], self.shift)
    }
    fn move_entry(&mut self, from: usize, to: usize) {
        self.table[to] = self.table[from];
    }
    fn clear(&mut self, i: usize) {
        self.table[i] = 0;
    }
}

/// Lengths of one pod's buffers: (`u32` entries, `u64` entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupsLayout {
    /// Group table entries.
    pub table: usize,
    /// Records (= blocks C: every record in use holds at least one cached block).
    pub records: usize,
    /// Slots per record (R rounded up to a power of two).
    pub stride: usize,
}

impl GroupsLayout {
    /// `u32` entries of one pod: its table, counts, slots, per-block slot indices and owner
    /// links.
    pub const fn words(&self) -> usize {
        self.table + self.records * (self.stride + 3)
    }
    /// `u64` entries of one pod: the group keys.
    pub const fn keys(&self) -> usize {
        self.records
    }
}

impl<'a> PoolGroups<'a> {
    /// The layout for a pod of `capacity` blocks and ids of `r` blocks, or None when it does not
    /// fit (r < 2, or slot indices past `u32`).
    pub const fn layout(capacity: usize, r: u32) -> Option<GroupsLayout> {
        if r < 2 || capacity == 0 {
            return None;
        }
        let stride = (r as usize).next_power_of_two();
        let Some(slots) = capacity.checked_mul(stride) else { return None };
        if slots >= u32::MAX as usize {
            return None;
        }
        let Some(table) = table::table_len_for(capacity) else { return None };
        Some(GroupsLayout { table, records: capacity, stride })
    }

    /// An empty map over `words` and `keys` ([`Self::layout`]'s lengths).
    pub fn new(capacity: usize, r: u32, words: &'a mut [u32], keys: &'a mut [u64]) -> Result<Self, Error> {
        let Some(l) = Self::layout(capacity, r) else {
            return Err(Error::BufferSize { buffer: Buffer::EngineGroups, expected: 0, got: words.len() });
        };
        if words.len() != l.words() {
            return Err(Error::BufferSize { buffer: Buffer::EngineGroups, expected: l.words(), got: words.len() });
        }
        if keys.len() != l.keys() {
            return Err(Error::BufferSize { buffer: Buffer::EngineGroupKeys, expected: l.keys(), got: keys.len() });
        }
        let (table, rest) = words.split_at_mut(l.table);
        let (counts, rest) = rest.split_at_mut(l.records);
        let (slots, rest) = rest.split_at_mut(l.records * l.stride);
        let (blk_slot, own_next) = rest.split_at_mut(l.records);
        table.fill(0);
        // The slots are most of the map (R' words per record) and a run uses the records at the
        // start of the free list only: a caller's zeroed buffer (fresh pages from the allocator)
        // is left unwritten, so its untouched pages cost neither clearing nor memory. Reading it
        // maps no page for writing.
        if slots.iter().any(|&w| w != 0) {
            slots.fill(0);
        }
        blk_slot.fill(NIL);
        for (i, c) in counts.iter_mut().enumerate() {
            *c = if i + 1 == l.records { NIL } else { i as u32 + 1 };
        }
        Ok(PoolGroups {
            r,
            stride_log: l.stride.trailing_zeros(),
            shift: table::shift_for(table.len()),
            table,
            gkeys: keys,
            counts,
            slots,
            blk_slot,
            own_next,
            free: 0,
            used: 0,
        })
    }

    /// Sub-blocks per group R.
    #[inline(always)]
    pub fn r(&self) -> u32 {
        self.r
    }

    /// Groups in the map.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// The record of group `gkey`, or the empty table position that ended its probe.
    #[inline]
    fn probe(&self, gkey: u64) -> Result<u32, usize> {
        let mask = self.table.len() - 1;
        let mut i = table::home(gkey, self.shift);
        loop {
            let e = self.table[i];
            if e == 0 {
                return Err(i);
            }
            if self.gkeys[e as usize - 1] == gkey {
                return Ok(e - 1);
            }
            i = (i + 1) & mask;
        }
    }

    /// The record of group `gkey` (None: no sub-block of it is cached).
    #[inline]
    pub fn find(&self, gkey: u64) -> Option<u32> {
        self.probe(gkey).ok()
    }

    /// The longest leading run of `keys` (a prompt's keys from its block 0: the key at each
    /// multiple of R names a group) cached here, calling `each(block)` for its blocks in order.
    #[inline]
    pub fn leading(&self, keys: &[u64], mut each: impl FnMut(u32)) -> usize {
        let r = self.r as usize;
        let mut j = 0;
        while j < keys.len() {
            let Some(rec) = self.find(keys[j]) else { return j };
            let end = (j + r).min(keys.len());
            for s in 0..(end - j) as u32 {
                let b = self.block(rec, s);
                if b == NIL {
                    return j + s as usize;
                }
                each(b);
            }
            j = end;
        }
        keys.len()
    }

    /// The owner's previous own block of block `b` (written by [`Self::set_own_next`] when the
    /// owner took `b`; unspecified while nobody owns `b`).
    #[inline(always)]
    pub fn own_next(&self, b: u32) -> u32 {
        self.own_next[b as usize]
    }

    /// Block `b`'s new owner's previous own block (NIL: none).
    #[inline(always)]
    pub fn set_own_next(&mut self, b: u32, older: u32) {
        self.own_next[b as usize] = older;
    }

    /// The block cached for sub-block `s` of record `rec` (NIL: none).
    #[inline(always)]
    pub fn block(&self, rec: u32, s: u32) -> u32 {
        self.slots[((rec as usize) << self.stride_log) + s as usize].wrapping_sub(1)
    }

    /// The record of group `gkey`, a new empty one if it has none (a free record exists while
    /// fewer than C blocks are cached: the caller is about to key a block that holds no key).
    #[inline]
    pub fn find_or_new(&mut self, gkey: u64) -> Option<u32> {
        match self.probe(gkey) {
            Ok(rec) => Some(rec),
            Err(empty) => {
                let rec = self.free;
                if rec == NIL {
                    return None;
                }
                self.free = self.counts[rec as usize];
                self.counts[rec as usize] = 0;
                self.gkeys[rec as usize] = gkey;
                self.table[empty] = rec + 1;
                self.used += 1;
                Some(rec)
            }
        }
    }

    /// Caches block `b` as sub-block `s` of record `rec` unless that sub-block is cached
    /// already; returns whether it did.
    #[inline(always)]
    pub fn insert(&mut self, rec: u32, s: u32, b: u32) -> bool {
        let i = ((rec as usize) << self.stride_log) + s as usize;
        if self.slots[i] != 0 {
            return false;
        }
        self.slots[i] = b + 1;
        self.counts[rec as usize] += 1;
        self.blk_slot[b as usize] = i as u32;
        true
    }

    /// Drops a record that [`Self::find_or_new`] made and nothing was inserted in.
    #[inline]
    pub fn drop_if_empty(&mut self, rec: u32) {
        if self.counts[rec as usize] == 0 {
            self.remove_record(rec);
        }
    }

    /// Block `b`, which holds a key, loses it (evicted); false if it held none here.
    #[inline(always)]
    pub fn remove(&mut self, b: u32) -> bool {
        let i = self.blk_slot[b as usize];
        if i == NIL || self.slots[i as usize] != b + 1 {
            return false;
        }
        self.blk_slot[b as usize] = NIL;
        self.slots[i as usize] = 0;
        let rec = i >> self.stride_log;
        self.counts[rec as usize] -= 1;
        if self.counts[rec as usize] == 0 {
            self.remove_record(rec);
        }
        true
    }

    fn remove_record(&mut self, rec: u32) {
        let mask = self.table.len() - 1;
        let mut i = table::home(self.gkeys[rec as usize], self.shift);
        while self.table[i] != rec + 1 {
            debug_assert!(self.table[i] != 0, "a record in use is in the table");
            i = (i + 1) & mask;
        }
        let mut view = View { table: self.table, gkeys: self.gkeys, shift: self.shift };
        table::remove_at(&mut view, i);
        self.counts[rec as usize] = self.free;
        self.free = rec;
        self.used -= 1;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::collections::BTreeMap;
    use std::vec;

    use super::*;

    /// Against a model map (group key, sub-block) -> block under random keying and eviction,
    /// from zeroed buffers (whose slots `new` leaves unwritten) and from dirty ones.
    #[test]
    fn matches_a_model_map() {
        for (c, r, dirty) in [(8usize, 2u32, false), (64, 3, false), (300, 32, false), (8, 2, true), (300, 32, true)] {
            let l = PoolGroups::layout(c, r).unwrap();
            let mut words = vec![if dirty { 0xA5A5_A5A5u32 } else { 0 }; l.words()];
            let mut keys = vec![if dirty { u64::MAX } else { 0 }; l.keys()];
            let mut g = PoolGroups::new(c, r, &mut words, &mut keys).unwrap();
            let mut model: BTreeMap<(u64, u32), u32> = BTreeMap::new();
            let mut held: std::vec::Vec<Option<(u64, u32)>> = vec![None; c];
            let mut x = 12345u64;
            for _ in 0..20_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let b = ((x >> 33) % c as u64) as u32;
                let gkey = (x >> 13) % 40;
                let s = ((x >> 40) % r as u64) as u32;
                if let Some(k) = held[b as usize] {
                    assert!(g.remove(b));
                    model.remove(&k);
                    held[b as usize] = None;
                } else {
                    let rec = g.find_or_new(gkey).unwrap();
                    let did = g.insert(rec, s, b);
                    g.drop_if_empty(rec);
                    assert_eq!(did, !model.contains_key(&(gkey, s)));
                    if did {
                        model.insert((gkey, s), b);
                        held[b as usize] = Some((gkey, s));
                    }
                }
                for gk in 0..40u64 {
                    for s in 0..r {
                        let want = model.get(&(gk, s)).copied().unwrap_or(NIL);
                        let got = g.find(gk).map_or(NIL, |rec| g.block(rec, s));
                        assert_eq!(got, want);
                    }
                }
                let groups: std::collections::BTreeSet<u64> = model.keys().map(|k| k.0).collect();
                assert_eq!(g.used() as usize, groups.len());
            }
        }
    }
}
