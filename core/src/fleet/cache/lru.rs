//! A pod's KV-block cache: an LRU of at most C block keys with O(1) hit test, touch and eviction.
//!
//! Layout (bring your own storage): `slots` holds C [`Slot`]s `{key, prev, next}` forming a doubly
//! linked recency list; `table` is an open-addressing index from key to slot, by default the
//! largest power of two at most 4 C (so more than 2 C: a full pod fills a quarter to a half of
//! it). A table entry is `0` when empty, else `tag | (slot + 1)`: the low `slot_bits` bits hold
//! slot + 1 and the bits above hold the same bits of the key's upper half (a tag), so a
//! probe over another key's entry rarely has to read that key's slot. When the tag has at least
//! log2(table length) bits (C < 32768), the home position is taken from those tag bits, so
//! deletion can shift entries without reading any slot either. Keys are chained-hash outputs, so
//! their bits are uniform; other keys stay correct, only slower. Bytes per cached block:
//! `16 + 4 * table_len / C`, i.e. more than 24 and at most 32 (exactly 32 when C is a power
//! of two); a caller short of memory may pass a table half that long (24 to 32 bytes, slower).

use super::CacheEvents;
use super::table::{self, Probe};
use crate::fleet::base::error::{Buffer, Error, Field};
use crate::fleet::base::limits::MAX_POD_BLOCKS;

/// "No slot" in the recency links.
const NIL: u32 = u32::MAX;

/// One cached block: its key and its neighbours in recency order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    key: u64,
    /// Towards more recent.
    prev: u32,
    /// Towards less recent.
    next: u32,
}

impl Default for Slot {
    fn default() -> Self {
        Slot { key: 0, prev: NIL, next: NIL }
    }
}

/// A key with its tag and home position in a tag-homed table ([`LruPod::homed`],
/// [`FusedLru::homed`]), computed once and probed in every table of the same shape
/// ([`LruPod::contains_homed`], [`FusedLru::router_holds`]).
///
/// [`FusedLru::homed`]: super::fused::FusedLru::homed
/// [`FusedLru::router_holds`]: super::fused::FusedLru::router_holds
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Homed {
    pub(super) key: u64,
    pub(super) tag: u32,
    pub(super) home: usize,
}

/// An LRU cache of at most `capacity` block keys.
#[derive(Debug)]
pub struct LruPod<'a> {
    slots: &'a mut [Slot],
    table: &'a mut [u32],
    shift: u32,
    /// Low bits of a table entry that hold slot + 1; the others hold the key's tag.
    slot_mask: u32,
    slot_bits: u32,
    /// Home positions come from the tag bits (see the module doc).
    direct: bool,
    len: u32,
    /// Most recently touched slot.
    mru: u32,
    /// Least recently touched slot: the next victim.
    lru: u32,
}

struct TableView<'t, 'a> {
    slots: &'t [Slot],
    table: &'t mut [u32],
    shift: u32,
    slot_mask: u32,
    slot_bits: u32,
    direct: bool,
    _p: core::marker::PhantomData<&'a ()>,
}

impl Probe for TableView<'_, '_> {
    fn slots(&self) -> usize {
        self.table.len()
    }
    fn is_empty(&self, i: usize) -> bool {
        self.table[i] == 0
    }
    fn home_of(&self, i: usize) -> usize {
        let e = self.table[i];
        match self.direct {
            true => (e >> self.slot_bits) as usize & (self.table.len() - 1),
            false => table::home(self.slots[(e & self.slot_mask) as usize - 1].key, self.shift),
        }
    }
    fn move_entry(&mut self, from: usize, to: usize) {
        self.table[to] = self.table[from];
    }
    fn clear(&mut self, i: usize) {
        self.table[i] = 0;
    }
}

impl<'a> LruPod<'a> {
    /// Recommended length of the key table for a pod of `capacity` blocks (0 when it does not
    /// fit in `usize`).
    pub const fn table_len(capacity: usize) -> usize {
        // The smallest power of two above 2 C, i.e. the largest <= 4 C: a full pod fills a
        // quarter to a half of it, and 16 + 4 * table / C stays <= 32 bytes per block. Why not
        // the smaller `min_table_len`: `fleet bench` replays the same key stream through pods
        // with both and reports the ratio (about 1.5x here on a miss-heavy trace): with a table
        // at most a quarter full, most probe, search and shift loops end at their first entry.
        let Some(double) = capacity.checked_mul(2) else { return 0 };
        let Some(above) = double.checked_add(1) else { return 0 };
        match above.checked_next_power_of_two() {
            Some(n) if capacity > 0 => n,
            _ => 0,
        }
    }

    /// Bytes of core memory per cached block for a pod of `capacity` blocks.
    pub fn bytes_per_block(capacity: usize) -> f64 {
        let bytes = capacity * core::mem::size_of::<Slot>() + Self::table_len(capacity) * core::mem::size_of::<u32>();
        bytes as f64 / capacity.max(1) as f64
    }

    /// Shortest key table a pod of `capacity` blocks accepts: the smallest power of two >= 2 C
    /// (at most half full; 24 to 32 bytes per block, ~1.5x slower on a miss-heavy replay than
    /// [`Self::table_len`], see `fleet bench`). 0 when it does not fit in `usize`.
    pub const fn min_table_len(capacity: usize) -> usize {
        let Some(double) = capacity.checked_mul(2) else { return 0 };
        match double.checked_next_power_of_two() {
            Some(n) if n >= 2 => n,
            Some(_) => 2,
            None => 0,
        }
    }

    /// An empty pod whose capacity is `slots.len()`. `table.len()` must be a power of two of at
    /// least [`Self::min_table_len`]; [`Self::table_len`] is the recommended length (the fleet
    /// uses it). A longer table only shortens probes: results are the same for every length.
    pub fn new(slots: &'a mut [Slot], table: &'a mut [u32]) -> Result<Self, Error> {
        let capacity = slots.len();
        if capacity == 0 || capacity > MAX_POD_BLOCKS {
            return Err(Error::InvalidConfig { field: Field::Capacity, expected: "between 1 and 4294967294 blocks" });
        }
        let required = Self::min_table_len(capacity);
        if required == 0 || !table::check_len(table.len(), required) {
            return Err(Error::BufferSize { buffer: Buffer::PodTable, expected: required, got: table.len() });
        }
        table.fill(0);
        slots.fill(Slot::default());
        let shift = table::shift_for(table.len());
        let slot_bits = 32 - (capacity as u32).leading_zeros();
        let slot_mask = u32::MAX.checked_shr(32 - slot_bits).unwrap_or(0);
        let direct = 32 - slot_bits >= table.len().trailing_zeros();
        Ok(LruPod { slots, table, shift, slot_mask, slot_bits, direct, len: 0, mru: NIL, lru: NIL })
    }

    /// Most blocks this pod holds.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Blocks held now.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when no block is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn tag(&self, key: u64) -> u32 {
        (key >> 32) as u32 & !self.slot_mask
    }

    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        match self.direct {
            true => ((key >> 32) as u32 >> self.slot_bits) as usize & (self.table.len() - 1),
            false => table::home(key, self.shift),
        }
    }

    /// Table position and slot of `key`, or the empty position that ended the probe.
    #[inline]
    fn probe(&self, key: u64) -> Result<(usize, u32), usize> {
        let mask = self.table.len() - 1;
        let tag = self.tag(key);
        let mut i = self.home(key);
        loop {
            let e = self.table[i];
            if e == 0 {
                return Err(i);
            }
            if e & !self.slot_mask == tag {
                let s = (e & self.slot_mask) - 1;
                if self.slots[s as usize].key == key {
                    return Ok((i, s));
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Table position and slot of `key`, if held.
    #[inline]
    fn find(&self, key: u64) -> Option<(usize, u32)> {
        self.probe(key).ok()
    }

    /// True when `key` is cached.
    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        self.find(key).is_some()
    }

    /// `key`'s tag and home position in this pod's table when the table is tag-homed (None
    /// otherwise): the same for every pod of the same capacity and table length, so a caller
    /// asking many such pods about one key computes it once ([`Self::contains_homed`]).
    #[inline(always)]
    pub fn homed(&self, key: u64) -> Option<Homed> {
        self.direct.then(|| {
            let hi = (key >> 32) as u32;
            Homed { key, tag: hi & !self.slot_mask, home: (hi >> self.slot_bits) as usize & (self.table.len() - 1) }
        })
    }

    /// [`Self::contains`] of `h.key` from a [`Homed`] computed by a pod of this pod's capacity
    /// and table length (the same probe with the tag and home given). Another shape's `Homed`
    /// gives wrong answers or panics: the caller, [`ApproxIndex::holders`], carves its LRUs
    /// all of one shape.
    ///
    /// [`ApproxIndex::holders`]: super::approx::ApproxIndex::holders
    #[inline(always)]
    pub fn contains_homed(&self, h: Homed) -> bool {
        let (table, slot_mask) = (&*self.table, self.slot_mask);
        let mask = table.len() - 1;
        let mut i = h.home;
        loop {
            let e = table[i];
            if e == 0 {
                return false;
            }
            if e & !slot_mask == h.tag && self.slots[((e & slot_mask) - 1) as usize].key == h.key {
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    /// The largest h such that `keys[..h]` are all cached (a prefix hit is contiguous).
    pub fn hit_blocks(&self, keys: &[u64]) -> usize {
        keys.iter().take_while(|&&k| self.contains(k)).count()
    }

    fn unlink(&mut self, s: u32) {
        let Slot { prev, next, .. } = self.slots[s as usize];
        if prev == NIL {
            self.mru = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.lru = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    fn push_mru(&mut self, s: u32) {
        let old = self.mru;
        self.slots[s as usize].prev = NIL;
        self.slots[s as usize].next = old;
        if old == NIL {
            self.lru = s;
        } else {
            self.slots[old as usize].prev = s;
        }
        self.mru = s;
    }

    fn table_insert(&mut self, key: u64, s: u32) {
        let mask = self.table.len() - 1;
        let mut i = self.home(key);
        while self.table[i] != 0 {
            i = (i + 1) & mask;
        }
        self.table[i] = self.tag(key) | (s + 1);
    }

    /// Table position of the entry pointing at slot `s`, whose key is `key`.
    fn position_of(&self, key: u64, s: u32) -> Option<usize> {
        let mask = self.table.len() - 1;
        let mut i = self.home(key);
        loop {
            let e = self.table[i];
            if e == 0 {
                return None;
            }
            if e & self.slot_mask == s + 1 {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Evicts the least recent key; returns its slot and the empty position that ended its
    /// probe run before the removal.
    fn evict_lru(&mut self, events: &mut impl CacheEvents) -> (u32, usize) {
        let victim = self.lru;
        let key = self.slots[victim as usize].key;
        let mut run_end = usize::MAX;
        if let Some(pos) = self.position_of(key, victim) {
            if self.direct {
                // Homes come from the entries' tags: the shift reads only the table, inlined.
                run_end = table::remove_tagged(self.table, self.slot_bits, pos);
                self.unlink(victim);
                events.evicted(key);
                return (victim, run_end);
            }
            let mut view = TableView {
                slots: self.slots,
                table: self.table,
                shift: self.shift,
                slot_mask: self.slot_mask,
                slot_bits: self.slot_bits,
                direct: self.direct,
                _p: Default::default(),
            };
            run_end = table::remove_at(&mut view, pos);
        }
        self.unlink(victim);
        events.evicted(key);
        (victim, run_end)
    }

    /// Makes `key` the most recent, inserting it (and evicting the least recent key when full) if
    /// absent. Returns whether it was present.
    ///
    /// A full pod with a tag-homed table (the fleet's pods and the router's LRUs below 32,768
    /// blocks, once warm) takes [`Self::touch_full`], small enough to inline into the callers'
    /// loops; the rest [`Self::touch_general`]. Both make the same moves (checked against each
    /// other, table and slots included, by `tests::full_path_is_general_path`).
    #[inline(always)]
    pub fn touch(&mut self, key: u64, events: &mut impl CacheEvents) -> bool {
        if self.direct && self.len as usize == self.slots.len() && self.len >= 2 {
            return self.touch_full(key, events);
        }
        self.touch_general(key, events)
    }

    /// [`Self::touch`] of a full pod (at least 2 blocks) with a tag-homed table: the victim is
    /// the tail of the recency list and its slot becomes the head, every table position comes
    /// from the key's own bits ([`Full::touch`]).
    #[inline(always)]
    fn touch_full(&mut self, key: u64, events: &mut impl CacheEvents) -> bool {
        let mut full = self.full();
        let hit = full.touch(key, events);
        (self.mru, self.lru) = (full.mru, full.lru);
        hit
    }

    /// The full, tag-homed pod's state as locals for [`Full::touch`] (the caller checked both).
    #[inline(always)]
    fn full(&mut self) -> Full<'_> {
        Full {
            mask: self.table.len() - 1,
            slots: &mut *self.slots,
            table: &mut *self.table,
            slot_mask: self.slot_mask,
            slot_bits: self.slot_bits,
            mru: self.mru,
            lru: self.lru,
        }
    }

    /// [`Self::touch`] of every key of `keys` in turn, the answers dropped: the same moves and
    /// events as one `touch` per key (checked by `tests::touch_each_is_touch`). Once the pod is
    /// full with a tag-homed table (it then stays full) the rest of the keys run through
    /// [`Full::touch`] with the pod's fields held in locals across the loop, so that its masks,
    /// links and table bounds are not reloaded per key.
    #[inline(always)]
    pub fn touch_each(&mut self, keys: impl Iterator<Item = u64>, events: &mut impl CacheEvents) {
        let mut keys = keys;
        while !(self.direct && self.len as usize == self.slots.len() && self.len >= 2) {
            match keys.next() {
                Some(k) => self.touch_general(k, events),
                None => return,
            };
        }
        let mut full = self.full();
        for k in keys {
            full.touch(k, events);
        }
        (self.mru, self.lru) = (full.mru, full.lru);
    }

    /// [`Self::touch`] for every state (the oracle of [`Self::touch_full`]).
    #[inline(never)]
    fn touch_general(&mut self, key: u64, events: &mut impl CacheEvents) -> bool {
        let empty = match self.probe(key) {
            Ok((_, s)) => {
                if s != self.mru {
                    self.unlink(s);
                    self.push_mru(s);
                }
                return true;
            }
            Err(empty) => empty,
        };
        let (s, stale) = if self.len as usize == self.slots.len() {
            // The eviction may shorten the probe run that ended at `empty`; then probe again.
            let (s, run_end) = self.evict_lru(events);
            (s, run_end == empty)
        } else {
            self.len += 1;
            (self.len - 1, false)
        };
        self.slots[s as usize].key = key;
        if stale {
            self.table_insert(key, s);
        } else {
            self.table[empty] = self.tag(key) | (s + 1);
        }
        self.push_mru(s);
        events.inserted(key);
        false
    }

    /// Drops every key, least recent first, reporting each as evicted (a pod scaled in).
    pub fn clear(&mut self, events: &mut impl CacheEvents) {
        let mut s = self.lru;
        while s != NIL {
            let slot = self.slots[s as usize];
            events.evicted(slot.key);
            s = slot.prev;
        }
        self.table.fill(0);
        self.slots[..self.len as usize].fill(Slot::default());
        self.len = 0;
        self.mru = NIL;
        self.lru = NIL;
    }

    /// Keys from most to least recent.
    pub fn iter_mru(&self) -> impl Iterator<Item = u64> + '_ {
        let mut s = self.mru;
        core::iter::from_fn(move || {
            if s == NIL {
                return None;
            }
            let slot = self.slots[s as usize];
            s = slot.next;
            Some(slot.key)
        })
    }
}

/// A full pod (at least 2 blocks, tag-homed table) with its fields as locals: [`LruPod::touch`]'s
/// fast path, one key at a time ([`LruPod::touch_full`]) or over a whole request
/// ([`LruPod::touch_each`]). `mru` and `lru` are written back by the caller.
struct Full<'x> {
    slots: &'x mut [Slot],
    table: &'x mut [u32],
    mask: usize,
    slot_mask: u32,
    slot_bits: u32,
    mru: u32,
    lru: u32,
}

impl Full<'_> {
    /// The victim is the list's tail and its slot becomes the head, every table position comes
    /// from the key's own bits (the same moves as [`LruPod::touch_general`] of a full pod).
    #[inline(always)]
    fn touch(&mut self, key: u64, events: &mut impl CacheEvents) -> bool {
        let (slot_mask, slot_bits, mask) = (self.slot_mask, self.slot_bits, self.mask);
        let hi = (key >> 32) as u32;
        let tag = hi & !slot_mask;
        let mut i = (hi >> slot_bits) as usize & mask;
        loop {
            let e = self.table[i];
            if e == 0 {
                break;
            }
            if e & !slot_mask == tag {
                let s = (e & slot_mask) - 1;
                if self.slots[s as usize].key == key {
                    if s != self.mru {
                        // s is not the head, so it has a predecessor; the head is another slot.
                        let Slot { prev, next, .. } = self.slots[s as usize];
                        self.slots[prev as usize].next = next;
                        if next == NIL {
                            self.lru = prev;
                        } else {
                            self.slots[next as usize].prev = prev;
                        }
                        let head = self.mru;
                        self.slots[s as usize].prev = NIL;
                        self.slots[s as usize].next = head;
                        self.slots[head as usize].prev = s;
                        self.mru = s;
                    }
                    return true;
                }
            }
            i = (i + 1) & mask;
        }
        let empty = i;
        // The victim: the tail; its entry is found from its key's home by its slot number.
        let v = self.lru;
        let Slot { key: old, prev, .. } = self.slots[v as usize];
        let mut j = ((old >> 32) as u32 >> slot_bits) as usize & mask;
        let mut run_end = usize::MAX;
        loop {
            let e = self.table[j];
            if e == 0 {
                break;
            }
            if e & slot_mask == v + 1 {
                run_end = table::remove_tagged(self.table, slot_bits, j);
                break;
            }
            j = (j + 1) & mask;
        }
        events.evicted(old);
        // The tail's slot moves to the head (at least 2 blocks: the tail has a predecessor,
        // and the head is another slot).
        let head = self.mru;
        self.slots[prev as usize].next = NIL;
        self.lru = prev;
        self.slots[v as usize] = Slot { key, prev: NIL, next: head };
        self.slots[head as usize].prev = v;
        self.mru = v;
        let mut at = empty;
        if run_end == empty {
            // The removal shortened the probe run that ended at `empty`: probe again.
            at = (hi >> slot_bits) as usize & mask;
            while self.table[at] != 0 {
                at = (at + 1) & mask;
            }
        }
        self.table[at] = tag | (v + 1);
        events.inserted(key);
        false
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::{vec, vec::Vec};

    #[derive(Default)]
    struct Log(Vec<(bool, u64)>);
    impl CacheEvents for Log {
        fn inserted(&mut self, k: u64) {
            self.0.push((true, k));
        }
        fn evicted(&mut self, k: u64) {
            self.0.push((false, k));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        /// [`LruPod::touch`] (whose full, tag-homed case is [`LruPod::touch_full`]) against
        /// [`LruPod::touch_general`] on twin pods: after every touch the same answer, the same
        /// events, and the same table, slots and links, entry for entry. Keys share a few high
        /// bits, so homes collide, probe runs are long and evictions shift them.
        #[test]
        fn full_path_is_general_path(
            cap in 2usize..40,
            short: bool,
            high in 1u64..64,
            ops in proptest::collection::vec((0u64..64, 0u64..80), 0..600),
        ) {
            let len = if short { LruPod::min_table_len(cap) } else { LruPod::table_len(cap) };
            let (mut sa, mut ta) = (vec![Slot::default(); cap], vec![0u32; len]);
            let (mut sb, mut tb) = (sa.clone(), ta.clone());
            let mut a = LruPod::new(&mut sa, &mut ta).unwrap();
            let mut b = LruPod::new(&mut sb, &mut tb).unwrap();
            prop_assert!(a.direct);
            let (mut la, mut lb) = (Log::default(), Log::default());
            for &(h, low) in &ops {
                let key = ((h % high) << 56) | ((h * 0x9e37) << 32) | low;
                prop_assert_eq!(a.touch(key, &mut la), b.touch_general(key, &mut lb));
                prop_assert_eq!(&a.table[..], &b.table[..]);
                prop_assert_eq!(&a.slots[..], &b.slots[..]);
                prop_assert_eq!((a.len, a.mru, a.lru), (b.len, b.mru, b.lru));
            }
            prop_assert_eq!(la.0, lb.0);
        }

        /// [`LruPod::touch_each`] (whose full, tag-homed part runs [`Full::touch`] with the
        /// fields in locals) against one [`LruPod::touch_general`] per key on twin pods, over
        /// requests of up to 50 keys touched in order or tail first (as the router's index and
        /// the FIFO pods do): after every request the same events, table, slots and links.
        /// Requests repeat keys (within and across requests) and share high bits.
        #[test]
        fn touch_each_is_touch(
            cap in 2usize..40,
            short: bool,
            high in 1u64..64,
            reqs in proptest::collection::vec(
                (any::<bool>(), proptest::collection::vec((0u64..64, 0u64..80), 0..50)),
                0..40,
            ),
        ) {
            let len = if short { LruPod::min_table_len(cap) } else { LruPod::table_len(cap) };
            let (mut sa, mut ta) = (vec![Slot::default(); cap], vec![0u32; len]);
            let (mut sb, mut tb) = (sa.clone(), ta.clone());
            let mut a = LruPod::new(&mut sa, &mut ta).unwrap();
            let mut b = LruPod::new(&mut sb, &mut tb).unwrap();
            let (mut la, mut lb) = (Log::default(), Log::default());
            for (rev, req) in &reqs {
                let keys: Vec<u64> =
                    req.iter().map(|&(h, low)| ((h % high) << 56) | ((h * 0x9e37) << 32) | low).collect();
                if *rev {
                    a.touch_each(keys.iter().rev().copied(), &mut la);
                    for &k in keys.iter().rev() {
                        b.touch_general(k, &mut lb);
                    }
                } else {
                    a.touch_each(keys.iter().copied(), &mut la);
                    for &k in &keys {
                        b.touch_general(k, &mut lb);
                    }
                }
                prop_assert_eq!(&la.0, &lb.0);
                prop_assert_eq!(&a.table[..], &b.table[..]);
                prop_assert_eq!(&a.slots[..], &b.slots[..]);
                prop_assert_eq!((a.len, a.mru, a.lru), (b.len, b.mru, b.lru));
            }
        }
    }
}
