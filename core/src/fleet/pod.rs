//! A pod's KV-block cache: an LRU of at most C block keys with O(1) hit test, touch and eviction.
//!
//! Layout (bring your own storage): `slots` holds C [`Slot`]s `{key, prev, next}` forming a doubly
//! linked recency list; `table` is an open-addressing index from key to slot (`0` = empty, else
//! slot + 1), a power of two at least 4/3 of C. Bytes per cached block:
//! `16 + 4 * table_len / C`, i.e. between 21.3 and 26.7.

use super::Error;
use super::limits::MAX_POD_BLOCKS;
use super::table::{self, Probe};

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

/// Receives a pod's cache events (the block index is fed from these).
pub trait CacheEvents {
    /// `key` was inserted as most recent.
    fn inserted(&mut self, key: u64);
    /// `key` was evicted as least recent.
    fn evicted(&mut self, key: u64);
}

/// Ignores all events.
impl CacheEvents for () {
    fn inserted(&mut self, _: u64) {}
    fn evicted(&mut self, _: u64) {}
}

/// An LRU cache of at most `capacity` block keys.
#[derive(Debug)]
pub struct LruPod<'a> {
    slots: &'a mut [Slot],
    table: &'a mut [u32],
    shift: u32,
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
        table::home(self.slots[self.table[i] as usize - 1].key, self.shift)
    }
    fn move_entry(&mut self, from: usize, to: usize) {
        self.table[to] = self.table[from];
    }
    fn clear(&mut self, i: usize) {
        self.table[i] = 0;
    }
}

impl<'a> LruPod<'a> {
    /// Length of the key table for a pod of `capacity` blocks.
    pub fn table_len(capacity: usize) -> usize {
        table::table_len_for(capacity).unwrap_or(0)
    }

    /// Bytes of core memory per cached block for a pod of `capacity` blocks.
    pub fn bytes_per_block(capacity: usize) -> f64 {
        let bytes = capacity * core::mem::size_of::<Slot>() + Self::table_len(capacity) * core::mem::size_of::<u32>();
        bytes as f64 / capacity.max(1) as f64
    }

    /// An empty pod whose capacity is `slots.len()`; `table.len()` must equal [`Self::table_len`].
    pub fn new(slots: &'a mut [Slot], table: &'a mut [u32]) -> Result<Self, Error> {
        let capacity = slots.len();
        if capacity == 0 || capacity > MAX_POD_BLOCKS {
            return Err(Error::InvalidConfig { field: "capacity", expected: "between 1 and 4294967294 blocks" });
        }
        let required = Self::table_len(capacity);
        if !table::check_len(table.len(), required) || table.len() != required {
            return Err(Error::BufferSize { buffer: "pod table", expected: required, got: table.len() });
        }
        table.fill(0);
        slots.fill(Slot::default());
        let shift = table::shift_for(table.len());
        Ok(LruPod { slots, table, shift, len: 0, mru: NIL, lru: NIL })
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

    /// Table position and slot of `key`, if held.
    #[inline]
    fn find(&self, key: u64) -> Option<(usize, u32)> {
        let mask = self.table.len() - 1;
        let mut i = table::home(key, self.shift);
        loop {
            let e = self.table[i];
            if e == 0 {
                return None;
            }
            if self.slots[(e - 1) as usize].key == key {
                return Some((i, e - 1));
            }
            i = (i + 1) & mask;
        }
    }

    /// True when `key` is cached.
    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        self.find(key).is_some()
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
        let mut i = table::home(key, self.shift);
        while self.table[i] != 0 {
            i = (i + 1) & mask;
        }
        self.table[i] = s + 1;
    }

    /// Evicts the least recent key; returns it.
    fn evict_lru(&mut self, events: &mut impl CacheEvents) -> u32 {
        let victim = self.lru;
        let key = self.slots[victim as usize].key;
        if let Some((pos, _)) = self.find(key) {
            let mut view =
                TableView { slots: self.slots, table: self.table, shift: self.shift, _p: Default::default() };
            table::remove_at(&mut view, pos);
        }
        self.unlink(victim);
        events.evicted(key);
        victim
    }

    /// Makes `key` the most recent, inserting it (and evicting the least recent key when full) if
    /// absent. Returns whether it was present.
    #[inline]
    pub fn touch(&mut self, key: u64, events: &mut impl CacheEvents) -> bool {
        if let Some((_, s)) = self.find(key) {
            if s != self.mru {
                self.unlink(s);
                self.push_mru(s);
            }
            return true;
        }
        let s = if self.len as usize == self.slots.len() {
            self.evict_lru(events)
        } else {
            self.len += 1;
            self.len - 1
        };
        self.slots[s as usize].key = key;
        self.table_insert(key, s);
        self.push_mru(s);
        events.inserted(key);
        false
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
