//! A pod's cache and the router's approximate-index LRU of the same pod in one table (issue 28,
//! branches pb32 and pb33). The FIFO fleet keeps them so when its rules allow
//! ([`FifoFleet::fused_layout`]): the router's [`ApproxIndex`] then owns one table per pod and
//! the routed pod's cache work is done with the router's record ([`FusedLru::record_and_serve`]).
//!
//! [`FifoFleet::fused_layout`]: crate::fleet::sim::fifo::FifoFleet
//!
//! Under the FIFO engine with local caches and the index's defaults, the pod's LRU of pod p
//! ([`LruPod`], touched tail first) and the router's LRU of p ([`ApproxIndex`], the routed
//! prompt recorded in order) receive the same keys in the same requests. Here both are kept over
//! one key table and one slot array: a slot carries a key and two memberships, each with its own
//! recency links and its own capacity ([`Side::Pod`], [`Side::Router`]), so a key held by both
//! costs one table entry, and a key enters and leaves the table once however many of the two
//! hold it. Each side makes exactly the moves of an [`LruPod`] of its capacity touched with the
//! same keys in the same order (checked against two `LruPod`s by `tests::fused_is_two_lrus`): the
//! same hits, the same keys held, in the same recency order.
//!
//! Layout: `capacity(Pod) + capacity(Router)` slots (the most distinct keys the two can hold) of
//! 24 bytes, and a `u32` table (entries `tag | (slot + 1)` as [`LruPod`]'s, the tag from the
//! key's upper bits, the home bucket from its lower half since branch pb36) of at least
//! [`FusedLru::min_table_len`] entries, probed by buckets of 4 (16 bytes;
//! branch pb35, after pb34's buckets of 8): lane 0 of a bucket counts the entries whose probe
//! passed it (homed at an earlier bucket, stored at a later one), lanes 1 to 3 hold entries. A
//! probe compares a bucket's lanes at once (one SSE2 compare on x86-64, [`lanes`]) and moves to
//! the next bucket only when the count is not 0, and at most once around the table; a removal
//! clears its lane and the counts it had raised (no backward shift), an insertion takes the
//! first empty lane from the home bucket on. The buckets' entry lanes are 3/4 of the table, at
//! least 1.5 x the slots, so the table never fills. The table's layout differs from the linear
//! probing it replaced, not its answers (`tests::fused_is_two_lrus` checks them, and the
//! buckets' counts, after every request).
//!
//! [`ApproxIndex`]: super::approx::ApproxIndex

use super::lru::{Homed, LruPod};
use crate::fleet::base::error::{Buffer, Error, Field};
use crate::fleet::base::limits::MAX_POD_BLOCKS;

/// "No slot" in the recency links.
const NIL: u32 = u32::MAX;
/// In `prev`: the slot is not a member of that side.
const OUT: u32 = u32::MAX - 1;
/// Table entries per bucket (16 bytes): lane 0 the bucket's overflow count, lanes 1.. entries.
const LANES: usize = 4;
/// The entry lanes of a bucket, as a lane mask ([`FusedLru`] keeps it in a field, so that the
/// compiler does not drop lane 0 from the vector compare and compare the rest one by one).
const ENTRY_LANES: u32 = 0b1110;
/// Shortest table: two buckets.
const MIN_TABLE: usize = 2 * LANES;

/// The lanes `j` of `bucket` with `bucket[j] & and == want`, as a lane mask, without a branch.
/// Plain Rust that the compiler turns into one SSE2 compare on x86-64 (an unaligned 16-byte
/// load, `pand`, `pcmpeqd`, `movmskps`: checked in the release build's assembly; the
/// `core::arch` intrinsics would need `unsafe`, which the core denies) and into four scalar
/// compares elsewhere (the firmware's Cortex-M3): the same answer either way
/// (`tests::lane_compare_is_per_lane`).
#[inline(always)]
fn lanes(bucket: &[u32; LANES], and: u32, want: u32) -> u32 {
    let mut m = 0u32;
    for (j, &e) in bucket.iter().enumerate() {
        m |= u32::from(e & and == want) << j;
    }
    m
}

/// Which of the two LRUs a touch or a question is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The pod's own cache.
    Pod = 0,
    /// The router's approximate-index LRU of the same pod.
    Router = 1,
}

/// One key and its links in each side's recency list (`[prev, next]`; `prev == OUT`: not held
/// by that side).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedSlot {
    key: u64,
    link: [[u32; 2]; 2],
}

impl Default for FusedSlot {
    fn default() -> Self {
        FusedSlot { key: 0, link: [[OUT, NIL]; 2] }
    }
}

/// Two LRUs of block keys over one table ([module doc](self)).
#[derive(Debug)]
pub struct FusedLru<'a> {
    slots: &'a mut [FusedSlot],
    table: &'a mut [[u32; LANES]],
    /// Buckets - 1.
    mask: usize,
    slot_mask: u32,
    slot_bits: u32,
    cap: [u32; 2],
    len: [u32; 2],
    /// Most recent slot per side.
    head: [u32; 2],
    /// Least recent slot per side: its next victim.
    tail: [u32; 2],
    /// Slots held by neither side, chained through `link[0][1]`.
    free: u32,
    /// Slots ever used (the rest are taken in order before the free list).
    used: u32,
    /// [`ENTRY_LANES`], read at run time (see there).
    entry_lanes: u32,
}

impl<'a> FusedLru<'a> {
    /// Slots for a pod of `pod` blocks and a router LRU of `router` keys.
    pub const fn slots_len(pod: usize, router: usize) -> usize {
        pod.saturating_add(router)
    }

    /// Shortest table accepted: the smallest power of two >= 2 x slots and >= 8, two buckets
    /// (at most half full; a quarter full when both sides hold the same keys).
    pub const fn min_table_len(pod: usize, router: usize) -> usize {
        let t = LruPod::min_table_len(Self::slots_len(pod, router));
        if t != 0 && t < MIN_TABLE { MIN_TABLE } else { t }
    }

    /// Whether a table of [`Self::min_table_len`] for these sides is tag-homed (what
    /// [`Self::new`] requires: the rule of the tag-homed table before branch pb36, kept so
    /// that the fleet fuses exactly where it did; the home now comes from the key's lower half).
    pub const fn fits(pod: usize, router: usize) -> bool {
        let n = Self::slots_len(pod, router);
        let t = Self::min_table_len(pod, router);
        if pod == 0 || router == 0 || n > MAX_POD_BLOCKS || t == 0 {
            return false;
        }
        let slot_bits = 32 - (n as u32).leading_zeros();
        32 - slot_bits >= t.trailing_zeros()
    }

    /// Both sides empty, of `pod` and `router` keys. `slots.len()` must be their sum; `table` a
    /// power of two of at least [`Self::min_table_len`] entries, short enough that a key's tag
    /// gives its home (an error otherwise: callers keep the separate LRUs then).
    pub fn new(pod: usize, router: usize, slots: &'a mut [FusedSlot], table: &'a mut [u32]) -> Result<Self, Error> {
        let n = Self::slots_len(pod, router);
        if pod == 0 || router == 0 || n > MAX_POD_BLOCKS || slots.len() != n {
            return Err(Error::InvalidConfig { field: Field::Capacity, expected: "two sides of 1 block or more" });
        }
        let required = Self::min_table_len(pod, router);
        let slot_bits = 32 - (n as u32).leading_zeros();
        let direct = 32 - slot_bits >= table.len().trailing_zeros();
        if required == 0 || !table.len().is_power_of_two() || table.len() < required || !direct {
            return Err(Error::BufferSize { buffer: Buffer::PodTable, expected: required, got: table.len() });
        }
        table.fill(0);
        slots.fill(FusedSlot::default());
        let slot_mask = u32::MAX.checked_shr(32 - slot_bits).unwrap_or(0);
        let (table, _) = table.as_chunks_mut::<LANES>();
        Ok(FusedLru {
            mask: table.len() - 1,
            slots,
            table,
            slot_mask,
            slot_bits,
            cap: [pod as u32, router as u32],
            len: [0; 2],
            head: [NIL; 2],
            tail: [NIL; 2],
            free: NIL,
            used: 0,
            entry_lanes: ENTRY_LANES,
        })
    }

    /// Most keys `side` holds.
    pub fn capacity(&self, side: Side) -> usize {
        self.cap[side as usize] as usize
    }

    /// Keys `side` holds now.
    pub fn len(&self, side: Side) -> usize {
        self.len[side as usize] as usize
    }

    /// True when neither side holds a key.
    pub fn is_empty(&self) -> bool {
        self.len == [0, 0]
    }

    /// The slot of `key` (held by either side), if it is in the table.
    #[inline(always)]
    fn probe(&self, key: u64) -> Option<u32> {
        let h = self.homed(key);
        self.find(h)
    }

    /// The slot of `h`'s key from its home bucket on: a vector compare of a bucket's tags, the
    /// keys of the slots whose tag matches, and the next bucket only while the one just searched
    /// counts an entry that passed it.
    #[inline(always)]
    fn find(&self, h: Homed) -> Option<u32> {
        let (slot_mask, mask) = (self.slot_mask, self.mask);
        let mut b = h.home;
        loop {
            let bucket = &self.table[b];
            // A slot part of 0 (an empty lane when the tag is 0) names slot `u32::MAX`, out of
            // range.
            let mut m = lanes(bucket, !slot_mask, h.tag) & self.entry_lanes;
            while m != 0 {
                let s = (bucket[m.trailing_zeros() as usize] & slot_mask).wrapping_sub(1);
                if self.slots.get(s as usize).is_some_and(|slot| slot.key == h.key) {
                    return Some(s);
                }
                m &= m - 1;
            }
            b = (b + 1) & mask;
            // A count stays raised while the entry that passed is stored on, however many
            // entries left the bucket since: in a small table every bucket may count one, so
            // the probe also stops after a whole turn.
            if bucket[self.count_lane()] == 0 || b == h.home {
                return None;
            }
        }
    }

    /// Enters slot `s` of the key of `h` (not in the table): the first empty
    /// lane from its home bucket on, counting each full bucket passed.
    #[inline(always)]
    fn insert(&mut self, h: Homed, s: u32) {
        let (mask, count) = (self.mask, 1 << self.slot_bits);
        let entry = h.tag | (s + 1);
        let home = h.home;
        let mut b = home;
        loop {
            let bucket = &mut self.table[b];
            let free = lanes(bucket, u32::MAX, 0) & self.entry_lanes;
            if free != 0 {
                bucket[free.trailing_zeros() as usize] = entry;
                return;
            }
            bucket[0] += count;
            b = (b + 1) & mask;
            debug_assert!(b != home, "the buckets hold more lanes than slots");
        }
    }

    /// Clears the entry of slot `v`, whose key is `key`, and the counts its insertion raised.
    #[inline(always)]
    fn remove(&mut self, key: u64, v: u32) {
        let (slot_mask, mask, count) = (self.slot_mask, self.mask, 1 << self.slot_bits);
        let mut home = self.home_of(key);
        let mut b = home;
        loop {
            let bucket = &mut self.table[b];
            // Lane 0's slot part is 0: it never matches.
            let m = lanes(bucket, slot_mask, v + 1);
            if m != 0 {
                bucket[m.trailing_zeros() as usize] = 0;
                break;
            }
            b = (b + 1) & mask;
            debug_assert!(b != home, "a freed slot's entry is in the table");
        }
        while home != b {
            self.table[home][0] -= count;
            home = (home + 1) & mask;
        }
    }

    /// 0, the count's lane, as a value the compiler cannot fold: a probe that read the count as
    /// `bucket[0]` would share that lane's load with the lane compare, and the compiler then
    /// compares all four lanes one by one instead of with one vector compare (measured in
    /// `holders`' probe, branches pb35 and pb36).
    #[inline(always)]
    fn count_lane(&self) -> usize {
        (self.entry_lanes & 1) as usize
    }

    /// `key`'s tag and home in this table, valid for every [`FusedLru`] of the same sides'
    /// capacities and table length.
    #[inline(always)]
    pub fn homed(&self, key: u64) -> Homed {
        let hi = (key >> 32) as u32;
        Homed { key, tag: hi & !self.slot_mask, home: self.home_of(key) }
    }

    /// `key`'s home bucket: from the key's lower half, so that the tag (its upper bits) tells
    /// apart the keys of one home (branch pb36; with the home taken from the tag's own bits,
    /// as before, the entries of a home bucket differed in 2 tag bits at 8 x 16,384 blocks, and
    /// a probe read the slot of a quarter of them).
    #[inline(always)]
    fn home_of(&self, key: u64) -> usize {
        key as u32 as usize & self.mask
    }

    /// [`Self::contains`] on the router side from a [`Homed`] of a table of this shape
    /// (another shape's gives wrong answers or panics: [`ApproxIndex::holders`] carves them all
    /// alike).
    ///
    /// [`ApproxIndex::holders`]: super::approx::ApproxIndex::holders
    #[inline(always)]
    pub fn router_holds(&self, h: Homed) -> bool {
        self.find(h).is_some_and(|s| self.slots[s as usize].link[1][0] != OUT)
    }

    /// True when `side` holds `key`.
    #[inline]
    pub fn contains(&self, side: Side, key: u64) -> bool {
        self.probe(key).is_some_and(|s| self.slots[s as usize].link[side as usize][0] != OUT)
    }

    /// The largest h such that `side` holds all of `keys[..h]`.
    pub fn hit_blocks(&self, side: Side, keys: &[u64]) -> usize {
        keys.iter().take_while(|&&k| self.contains(side, k)).count()
    }

    #[inline(always)]
    fn push_head<const S: usize>(&mut self, s: u32) {
        let old = self.head[S];
        self.slots[s as usize].link[S] = [NIL, old];
        if old == NIL {
            self.tail[S] = s;
        } else {
            self.slots[old as usize].link[S][0] = s;
        }
        self.head[S] = s;
    }

    #[inline(always)]
    fn unlink<const S: usize>(&mut self, s: u32) {
        let [prev, next] = self.slots[s as usize].link[S];
        if prev == NIL {
            self.head[S] = next;
        } else {
            self.slots[prev as usize].link[S][1] = next;
        }
        if next == NIL {
            self.tail[S] = prev;
        } else {
            self.slots[next as usize].link[S][0] = prev;
        }
    }

    /// Drops side S's least recent key from S; when the other side does not hold it either,
    /// its table entry and slot are freed.
    #[inline(always)]
    fn evict<const S: usize>(&mut self) {
        let v = self.tail[S];
        // The tail's unlink: it has no next, so only its predecessor (or the head) changes.
        let prev = self.slots[v as usize].link[S][0];
        if prev == NIL {
            self.head[S] = NIL;
        } else {
            self.slots[prev as usize].link[S][1] = NIL;
        }
        self.tail[S] = prev;
        let slot = &mut self.slots[v as usize];
        slot.link[S] = [OUT, NIL];
        if slot.link[1 - S][0] != OUT {
            return;
        }
        let key = slot.key;
        self.remove(key, v);
        self.slots[v as usize].link[0][1] = self.free;
        self.free = v;
    }

    /// Makes `key` side S's most recent key, adding it (and dropping S's least recent key when S
    /// is full) if S does not hold it. Returns whether S held it.
    #[inline(always)]
    fn touch_side<const S: usize>(&mut self, key: u64) -> bool {
        let h = self.homed(key);
        if let Some(s) = self.find(h) {
            // In the table: held by S, or by the other side only (S then takes the same slot).
            return self.touch_slot::<S>(s);
        }
        self.add::<S>(h);
        false
    }

    /// The router side's touch of `key` ([`Self::touch_side`]), returning whether the **pod**
    /// side holds `key` (which a router touch does not change: it adds and drops router
    /// memberships only, and frees only slots the pod does not hold), for the pod's hit test.
    #[inline(always)]
    fn touch_router_pod_held(&mut self, key: u64) -> bool {
        let h = self.homed(key);
        if let Some(s) = self.find(h) {
            let pod = self.slots[s as usize].link[0][0] != OUT;
            self.touch_slot::<1>(s);
            return pod;
        }
        self.add::<1>(h);
        false
    }

    /// Adds the key of `h` (in no side, so not in the table) to side S as its most recent key,
    /// dropping S's least recent key first when S is full.
    #[inline(always)]
    fn add<const S: usize>(&mut self, h: Homed) {
        if self.len[S] == self.cap[S] {
            self.evict::<S>();
        } else {
            self.len[S] += 1;
        }
        let s = if self.free != NIL {
            let s = self.free;
            self.free = self.slots[s as usize].link[0][1];
            s
        } else {
            self.used += 1;
            self.used - 1
        };
        self.slots[s as usize] = FusedSlot { key: h.key, link: [[OUT, NIL]; 2] };
        self.push_head::<S>(s);
        self.insert(h, s);
    }

    /// [`LruPod::touch`] on `side`: makes `key` its most recent key. Returns whether it held it.
    #[inline]
    pub fn touch(&mut self, side: Side, key: u64) -> bool {
        match side {
            Side::Pod => self.touch_side::<0>(key),
            Side::Router => self.touch_side::<1>(key),
        }
    }

    /// [`Self::touch`] of every key of `keys` in turn on `side`.
    #[inline]
    pub fn touch_each(&mut self, side: Side, keys: impl Iterator<Item = u64>) {
        match side {
            Side::Pod => keys.for_each(|k| {
                self.touch_side::<0>(k);
            }),
            Side::Router => keys.for_each(|k| {
                self.touch_side::<1>(k);
            }),
        }
    }

    /// Side S's touch of the key in slot `s` (in the table, so no probe): the same moves as
    /// [`Self::touch_side`] of that key.
    #[inline(always)]
    fn touch_slot<const S: usize>(&mut self, s: u32) -> bool {
        if self.slots[s as usize].link[S][0] != OUT {
            if self.head[S] != s {
                self.unlink::<S>(s);
                self.push_head::<S>(s);
            }
            return true;
        }
        // S's victim is another slot (S does not hold `s`); a freed victim is held by neither
        // side, so no slot the caller still walks is freed.
        if self.len[S] == self.cap[S] {
            self.evict::<S>();
        } else {
            self.len[S] += 1;
        }
        self.push_head::<S>(s);
        false
    }

    /// A request routed to this pod, as the FIFO fleet applies it: the router records `keys` in
    /// prompt order, then the pod's hit test (returned) and its touches (`tail_first`, or in
    /// order). The same moves as `touch_each(Router, keys)`, `hit_blocks(Pod, keys)`,
    /// `touch_each(Pod, ..)` (checked by `tests::fused_is_two_lrus`), with one probe per key
    /// instead of two when the pod touches tail first: after the record the router's recency
    /// list from its head is the prompt's keys by last occurrence, latest first, which is the
    /// order the pod's tail-first pass meets them, so a cursor down that list hands the pod
    /// each key's slot (a key the cursor does not show, an earlier occurrence of a repeated key
    /// or one beyond the router's capacity, is probed). The pod's hit test is read during the
    /// record, from the slots the router's probes find (no probe of its own). Not inlined: its
    /// code is then the same in every binary that calls it (branch pb36; pb35 found `fleet
    /// bench`'s build and the `perblock` example's inlining it differently).
    #[inline(never)]
    pub fn record_and_serve(&mut self, keys: &[u64], tail_first: bool) -> usize {
        // The pod's hit test is read during the record: the router's touches do not change
        // which keys the pod holds.
        let (mut hit, mut run) = (0usize, true);
        for &k in keys {
            run &= self.touch_router_pod_held(k);
            hit += usize::from(run);
        }
        if !tail_first {
            for &k in keys {
                self.touch_side::<0>(k);
            }
            return hit;
        }
        let mut c = self.head[1];
        for &k in keys.iter().rev() {
            if c != NIL && self.slots[c as usize].key == k {
                let s = c;
                c = self.slots[c as usize].link[1][1];
                self.touch_slot::<0>(s);
            } else {
                self.touch_side::<0>(k);
            }
        }
        hit
    }

    /// `side`'s keys from most to least recent.
    pub fn iter_mru(&self, side: Side) -> impl Iterator<Item = u64> + '_ {
        let sd = side as usize;
        let mut s = self.head[sd];
        core::iter::from_fn(move || {
            if s == NIL {
                return None;
            }
            let slot = self.slots[s as usize];
            s = slot.link[sd][1];
            Some(slot.key)
        })
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::fleet::cache::lru::Slot;
    use proptest::prelude::*;
    use std::{vec, vec::Vec};

    impl FusedLru<'_> {
        /// The buckets' invariant: each entry carries its key's tag, and each bucket's count is
        /// the number of entries homed at an earlier bucket and stored at a later one (what the
        /// probes rely on to stop; a count too high only lengthens them, so the answers alone
        /// would not show it).
        fn check_buckets(&self) {
            let mut want = vec![0u32; self.table.len()];
            for (b, bucket) in self.table.iter().enumerate() {
                for &e in &bucket[1..] {
                    if e == 0 {
                        continue;
                    }
                    let h = self.homed(self.slots[((e & self.slot_mask) - 1) as usize].key);
                    assert_eq!(e & !self.slot_mask, h.tag, "an entry's tag is its key's");
                    let mut c = h.home;
                    while c != b {
                        want[c] += 1;
                        c = (c + 1) & self.mask;
                    }
                }
            }
            let got: Vec<u32> = self.table.iter().map(|b| b[0] >> self.slot_bits).collect();
            assert_eq!(got, want, "bucket counts");
            assert!(self.table.iter().all(|b| b[0] & self.slot_mask == 0), "a count's slot part is 0");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        /// The fused table against its oracle, a pod [`LruPod`] and a router [`LruPod`] per pod
        /// (today's separate structures): requests routed by a greedy-prefix rule over the
        /// router side's answers (so a wrong answer changes later routes), each recorded in
        /// prompt order on the router side, then the pod's hit test and its touches (tail first
        /// or in order). After every request: the route, the pod hit, `contains` of every key of
        /// the universe on both sides of every pod (the `holders` answers), lengths and recency
        /// order. Keys share high bits (homes collide), prompts repeat keys, capacities 1 to 60
        /// per side, equal or not.
        #[test]
        fn fused_is_two_lrus(
            pods in 1usize..4,
            cap_pod in 1usize..60,
            cap_router in 1usize..60,
            equal: bool,
            tail_first: bool,
            high in 1u64..16,
            reqs in proptest::collection::vec(proptest::collection::vec(0u64..96, 0..40), 0..60),
        ) {
            let cap_router = if equal { cap_pod } else { cap_router };
            let key = |h: u64| ((h % high) << 60) | ((h * 0x9e37) << 36) | h;
            let universe: Vec<u64> = (0..96).map(key).collect();
            let (pt, rt) = (LruPod::table_len(cap_pod), LruPod::table_len(cap_router));
            let (mut ps, mut pt_) = (vec![Slot::default(); pods * cap_pod], vec![0u32; pods * pt]);
            let (mut rs, mut rt_) = (vec![Slot::default(); pods * cap_router], vec![0u32; pods * rt]);
            let mut pod_lru: Vec<LruPod> =
                ps.chunks_exact_mut(cap_pod).zip(pt_.chunks_exact_mut(pt)).map(|(s, t)| LruPod::new(s, t).unwrap()).collect();
            let mut router_lru: Vec<LruPod> = rs
                .chunks_exact_mut(cap_router)
                .zip(rt_.chunks_exact_mut(rt))
                .map(|(s, t)| LruPod::new(s, t).unwrap())
                .collect();
            let n = FusedLru::slots_len(cap_pod, cap_router);
            let ft = FusedLru::min_table_len(cap_pod, cap_router);
            let (mut fs, mut ftab) = (vec![FusedSlot::default(); pods * n], vec![0u32; pods * ft]);
            let mut fused: Vec<FusedLru> = fs
                .chunks_exact_mut(n)
                .zip(ftab.chunks_exact_mut(ft))
                .map(|(s, t)| FusedLru::new(cap_pod, cap_router, s, t).unwrap())
                .collect();
            // The same over `record_and_serve` (the pod's tail-first pass led by the router's list).
            let (mut gs, mut gtab) = (vec![FusedSlot::default(); pods * n], vec![0u32; pods * ft]);
            let mut fused_req: Vec<FusedLru> = gs
                .chunks_exact_mut(n)
                .zip(gtab.chunks_exact_mut(ft))
                .map(|(s, t)| FusedLru::new(cap_pod, cap_router, s, t).unwrap())
                .collect();
            // Greedy prefix match over the router's answers; ties to the fewest requests, then
            // the lowest pod.
            let route = |held: &dyn Fn(usize, u64) -> bool, keys: &[u64], served: &[u32]| -> usize {
                (0..pods)
                    .max_by_key(|&p| {
                        let m = keys.iter().take_while(|&&k| held(p, k)).count();
                        (m, u32::MAX - served[p], usize::MAX - p)
                    })
                    .unwrap()
            };
            let mut served = vec![0u32; pods];
            for req in &reqs {
                let keys: Vec<u64> = req.iter().map(|&h| key(h)).collect();
                let a = route(&|p, k| router_lru[p].contains(k), &keys, &served);
                let b = route(&|p, k| fused[p].contains(Side::Router, k), &keys, &served);
                prop_assert_eq!(a, b);
                served[a] += 1;
                router_lru[a].touch_each(keys.iter().copied(), &mut ());
                fused[a].touch_each(Side::Router, keys.iter().copied());
                let hit = pod_lru[a].hit_blocks(&keys);
                prop_assert_eq!(hit, fused[a].hit_blocks(Side::Pod, &keys));
                prop_assert_eq!(hit, fused_req[a].record_and_serve(&keys, tail_first));
                if tail_first {
                    pod_lru[a].touch_each(keys.iter().rev().copied(), &mut ());
                    fused[a].touch_each(Side::Pod, keys.iter().rev().copied());
                } else {
                    pod_lru[a].touch_each(keys.iter().copied(), &mut ());
                    fused[a].touch_each(Side::Pod, keys.iter().copied());
                }
                for p in 0..pods {
                    fused[p].check_buckets();
                    fused_req[p].check_buckets();
                    for &k in &universe {
                        prop_assert_eq!(router_lru[p].contains(k), fused[p].contains(Side::Router, k));
                        prop_assert_eq!(pod_lru[p].contains(k), fused[p].contains(Side::Pod, k));
                    }
                    prop_assert_eq!(router_lru[p].len(), fused[p].len(Side::Router));
                    prop_assert_eq!(pod_lru[p].len(), fused[p].len(Side::Pod));
                    prop_assert!(router_lru[p].iter_mru().eq(fused[p].iter_mru(Side::Router)));
                    prop_assert!(pod_lru[p].iter_mru().eq(fused[p].iter_mru(Side::Pod)));
                    for &k in &universe {
                        prop_assert_eq!(router_lru[p].contains(k), fused_req[p].contains(Side::Router, k));
                        prop_assert_eq!(pod_lru[p].contains(k), fused_req[p].contains(Side::Pod, k));
                    }
                    prop_assert!(router_lru[p].iter_mru().eq(fused_req[p].iter_mru(Side::Router)));
                    prop_assert!(pod_lru[p].iter_mru().eq(fused_req[p].iter_mru(Side::Pod)));
                    prop_assert_eq!(
                        (fused_req[p].len(Side::Pod), fused_req[p].len(Side::Router)),
                        (pod_lru[p].len(), router_lru[p].len())
                    );
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5000))]
        /// The bucket compare (vectorized on x86-64) against a lane-by-lane filter, on random
        /// buckets whose lanes often equal `want` under `and` (lanes drawn from a few values,
        /// masks the table's own: all ones, the tag part, the slot part).
        #[test]
        fn lane_compare_is_per_lane(
            pick in proptest::collection::vec(0usize..6, LANES),
            vals in proptest::collection::vec(any::<u32>(), 4),
            slot_bits in 1u32..31,
            which in 0usize..3,
            want_pick in 0usize..6,
        ) {
            let from = |i: usize| if i < 4 { vals[i] } else if i == 4 { 0 } else { u32::MAX };
            let bucket: [u32; LANES] = core::array::from_fn(|j| from(pick[j]));
            let slot_mask = u32::MAX >> (32 - slot_bits);
            let and = [u32::MAX, !slot_mask, slot_mask][which];
            let want = from(want_pick) & and;
            let per_lane: u32 = (0..LANES).filter(|&j| bucket[j] & and == want).map(|j| 1 << j).sum();
            prop_assert_eq!(lanes(&bucket, and, want), per_lane);
        }
    }

    #[test]
    fn refuses_what_it_cannot_tag_home() {
        let (mut s, mut t) = (vec![FusedSlot::default(); 4], vec![0u32; 4]);
        assert!(FusedLru::new(2, 2, &mut s, &mut t).is_err(), "table below 2 x slots");
        let (mut s, mut t) = (vec![FusedSlot::default(); 2], vec![0u32; 4]);
        assert!(FusedLru::new(1, 1, &mut s, &mut t).is_err(), "table below two buckets");
        let (mut s, mut t) = (vec![FusedSlot::default(); 4], vec![0u32; 8]);
        assert!(FusedLru::new(2, 2, &mut s, &mut t).is_ok());
        assert!(FusedLru::new(0, 4, &mut s, &mut t).is_err());
    }
}
