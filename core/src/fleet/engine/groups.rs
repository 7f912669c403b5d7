//! The batched engine's KV pool kept per trace id and per run (docs/MODEL.md, "Run-length KV
//! blocks"): for a trace of ids of R 16-token blocks each, block j of a prompt is sub-block
//! j mod R of the group named by the prompt's key of block j - j mod R (its *group key*: the id
//! in its prefix context).
//!
//! Under the design's Invariant (I), which Lemma 3 says always holds where this pool is used (no
//! offload tier, P/D or cached generated tokens), a group G's cached sub-blocks are a prefix
//! 0 .. n_G - 1, the unreferenced ones among them a suffix p_G .. n_G - 1, lying in the free
//! queue with the higher sub-block nearer the head. So a group is (n_G, p_G, its holders) and
//! no block has an identity of its own:
//!
//! * the reference counts of 0 .. p_G - 1 are kept as runs of equal counts: every request holds
//!   a prefix 0 .. t - 1 of each group it touches (Lemma 1), so the count of sub-block s is the
//!   number of holders with t > s, and the group keeps, for each t, the number of its holders
//!   with exactly that t (a pin or a keying is one increment, a release one decrement and, when
//!   sub-blocks become free, a scan down to the next holder);
//! * the free queue is a ring of runs, head first: (group, hi down to lo), or a count of keyless
//!   blocks; a group's runs are linked from its tail-most one (`last`), since a pin takes the
//!   group's lowest free sub-blocks, i.e. from its runs nearest the tail (a run taken whole is
//!   left dead in the ring, skipped by pops and dropped by a compaction when the ring is full);
//! * an eviction takes the head run's highest sub-block, which (I) says is n_G - 1, so the prefix
//!   stays a prefix; a request's own blocks are a count until they are keyed, and keying one is
//!   extending its group's prefix (n_G = s, or s < n_G: the block stays a keyless duplicate).
//!
//! An operation that would break (I) (a hole: keying above the prefix, an eviction not at a
//! group's top) is refused (None), and the engine reports it as a broken invariant
//! ([`crate::fleet::base::error::Invariant::GroupPrefix`]): never a silent difference from the
//! per-block pool, which stays the oracle (`core/tests/batched_runs.rs`).
//!
//! The work is per group and per run: a request's hit, pins, keying and release probe the group
//! table once per group; an allocation pops whole runs.
//!
//! Every buffer is the caller's ([`PoolGroups::layout`]).

use crate::fleet::base::error::{Buffer, Error};
use crate::fleet::cache::table::{self, Probe};

/// "No record / no run".
const NIL: u32 = u32::MAX;
/// A ring entry's record word: a run of keyless blocks (its span word is their count).
const KEYLESS: u32 = u32::MAX - 1;
/// A ring entry's record word: a run a pin took whole.
const DEAD: u32 = u32::MAX;
/// Words of a ring entry: record, span (hi << 16 | lo; keyless: a count), previous run of the
/// same group.
const ENTRY: usize = 3;

/// One pod's KV pool per group and per run.
pub struct PoolGroups<'a> {
    /// Sub-blocks per group R.
    r: u32,
    /// log2 of a record's holder stride (R rounded up to a power of two).
    stride_log: u32,
    /// Group table: record + 1, 0 empty.
    table: &'a mut [u32],
    shift: u32,
    /// Per record: its group key.
    gkeys: &'a mut [u64],
    /// Per record: n_G, its cached sub-blocks 0 .. n_G - 1; while the record is free, the next
    /// free record.
    counts: &'a mut [u32],
    /// Per record, `1 << stride_log` words: word t - 1 counts the requests holding exactly
    /// sub-blocks 0 .. t - 1 of it.
    holders: &'a mut [u32],
    /// Per record: p_G, its referenced sub-blocks 0 .. p_G - 1.
    pinned: &'a mut [u32],
    /// Per record: the ring position of its tail-most free run (NIL: none).
    last: &'a mut [u32],
    /// The free queue: C entries of [`ENTRY`] words, a ring from `head`, `len` entries (dead
    /// ones included).
    ring: &'a mut [u32],
    head: u32,
    len: u32,
    /// Head of the free records.
    free: u32,
    /// Records in use (groups in the table).
    used: u32,
    /// Records whose holder words are cleared (0 .. fresh): the free list hands records out in
    /// index order until one is removed, so a record's holders are cleared when it is first used
    /// (a removed record's holders are all 0 again), never all at once.
    fresh: u32,
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
    /// Records (= blocks C: every record in use holds at least one cached block), and runs of
    /// the free queue's ring.
    pub records: usize,
    /// Holder words per record (R rounded up to a power of two).
    pub stride: usize,
}

impl GroupsLayout {
    /// `u32` entries of one pod: its table, and per record its count, holders, p_G, last run
    /// and a ring entry.
    pub const fn words(&self) -> usize {
        self.table + self.records * (self.stride + 3 + ENTRY)
    }
    /// `u64` entries of one pod: the group keys.
    pub const fn keys(&self) -> usize {
        self.records
    }
}

impl<'a> PoolGroups<'a> {
    /// The layout for a pod of `capacity` blocks and ids of `r` blocks, or None when it does not
    /// fit (r < 2 or r > 65,536, or holder indices past `u32`).
    pub const fn layout(capacity: usize, r: u32) -> Option<GroupsLayout> {
        if r < 2 || r > 1 << 16 || capacity == 0 {
            return None;
        }
        let stride = (r as usize).next_power_of_two();
        let Some(slots) = capacity.checked_mul(stride + 3 + ENTRY) else { return None };
        if slots >= u32::MAX as usize {
            return None;
        }
        let Some(table) = table::table_len_for(capacity) else { return None };
        Some(GroupsLayout { table, records: capacity, stride })
    }

    /// An empty pool of `capacity` free keyless blocks over `words` and `keys` ([`Self::layout`]'s
    /// lengths).
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
        let (holders, rest) = rest.split_at_mut(l.records * l.stride);
        let (pinned, rest) = rest.split_at_mut(l.records);
        let (last, ring) = rest.split_at_mut(l.records);
        table.fill(0);
        // The holders are most of the map (R' words per record) and a run uses the records at
        // the start of the free list only: each record's are cleared when it is first used
        // (`fresh`), so the untouched ones are neither read nor written (whatever the buffer
        // holds), and their pages cost no memory when the caller's are fresh.
        for (i, c) in counts.iter_mut().enumerate() {
            *c = if i + 1 == l.records { NIL } else { i as u32 + 1 };
        }
        // every block free and keyless: one run
        ring[..ENTRY].copy_from_slice(&[KEYLESS, capacity as u32, NIL]);
        Ok(PoolGroups {
            r,
            stride_log: l.stride.trailing_zeros(),
            shift: table::shift_for(table.len()),
            table,
            gkeys: keys,
            counts,
            holders,
            pinned,
            last,
            ring,
            head: 0,
            len: 1,
            free: 0,
            used: 0,
            fresh: 0,
        })
    }

    /// Sub-blocks per group R.
    #[inline(always)]
    pub fn r(&self) -> u32 {
        self.r
    }

    /// Blocks C of the pod.
    pub fn capacity(&self) -> usize {
        self.counts.len()
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

    /// Group `gkey`'s (n_G, p_G): its cached sub-blocks 0 .. n_G - 1, of which 0 .. p_G - 1 are
    /// referenced ((0, 0): not cached).
    pub fn group(&self, gkey: u64) -> (u32, u32) {
        self.find(gkey).map_or((0, 0), |rec| (self.counts[rec as usize], self.pinned[rec as usize]))
    }

    /// The word of record `rec`'s holders with exactly `t` >= 1 sub-blocks.
    #[inline(always)]
    fn hix(&self, rec: u32, t: u32) -> usize {
        ((rec as usize) << self.stride_log) + t as usize - 1
    }

    /// The longest leading run of `keys` (a prompt's keys from its block 0: the key at each
    /// multiple of R names a group) cached here, and how many of its blocks are unreferenced
    /// (free): per group, min(n_G, the keys left), of which those at p_G and above are free.
    #[inline]
    pub fn lead(&self, keys: &[u64]) -> (u32, u32) {
        let r = self.r as usize;
        let (mut j, mut free) = (0usize, 0u32);
        while j < keys.len() {
            let Some(rec) = self.find(keys[j]) else { break };
            let want = (keys.len() - j).min(r);
            let m = (self.counts[rec as usize] as usize).min(want);
            free += (m as u32).saturating_sub(self.pinned[rec as usize]);
            j += m;
            if m < want {
                break;
            }
        }
        (j as u32, free)
    }

    /// Pins blocks 0 .. h - 1 of a prompt (`keys` from its block 0, at least h of them), cached
    /// (a hit): each group's prefix gets one holder more, and its free sub-blocks among them
    /// leave the free queue. Returns how many left it, or None when a block is not cached.
    #[inline]
    pub fn pin(&mut self, keys: &[u64], h: u32) -> Option<u32> {
        let r = self.r as usize;
        let (mut j, mut taken) = (0usize, 0u32);
        while j < h as usize {
            let rec = self.find(keys[j])?;
            let t = (h as usize - j).min(r) as u32;
            if t > self.counts[rec as usize] {
                return None;
            }
            let i = self.hix(rec, t);
            self.holders[i] += 1;
            let p = self.pinned[rec as usize];
            if t > p {
                self.take_lowest(rec, t - p)?;
                self.pinned[rec as usize] = t;
                taken += t - p;
            }
            j += r;
        }
        Some(taken)
    }

    /// Takes group `rec`'s `k` lowest free sub-blocks out of the free queue (from its runs
    /// nearest the tail).
    #[inline]
    fn take_lowest(&mut self, rec: u32, mut k: u32) -> Option<()> {
        let mut e = self.last[rec as usize];
        while k > 0 {
            if e == NIL || self.ring[e as usize * ENTRY] != rec {
                return None;
            }
            let at = e as usize * ENTRY;
            let span = self.ring[at + 1];
            let (hi, lo) = (span >> 16, span & 0xffff);
            let n = hi - lo + 1;
            if n <= k {
                self.ring[at] = DEAD;
                k -= n;
                e = self.ring[at + 2];
            } else {
                self.ring[at + 1] = (hi << 16) | (lo + k);
                k = 0;
            }
        }
        self.last[rec as usize] = e;
        Some(())
    }

    /// Ring position `head + k`.
    #[inline(always)]
    fn at(&self, k: u32) -> u32 {
        let cap = self.counts.len() as u32;
        let p = self.head as u64 + k as u64;
        (if p >= cap as u64 { p - cap as u64 } else { p }) as u32
    }

    /// Drops the ring's head entry.
    #[inline(always)]
    fn pop_head(&mut self) {
        self.head = self.at(1);
        self.len -= 1;
    }

    /// Pops `n` blocks from the free queue's head (they become a request's own, keyless
    /// blocks), evicting the cached ones: whole runs at a time, each from its group's top.
    /// Returns how many were cached (evicted), or None when the queue holds fewer than `n` or a
    /// run is not at its group's top (a hole).
    #[inline]
    pub fn pop(&mut self, mut n: u32) -> Option<u32> {
        let mut evicted = 0;
        while n > 0 {
            if self.len == 0 {
                return None;
            }
            let e = self.head;
            let at = e as usize * ENTRY;
            let rec = self.ring[at];
            if rec == DEAD {
                self.pop_head();
                continue;
            }
            let span = self.ring[at + 1];
            if rec == KEYLESS {
                let k = span.min(n);
                n -= k;
                if k == span {
                    self.pop_head();
                } else {
                    self.ring[at + 1] = span - k;
                }
                continue;
            }
            let (hi, lo) = (span >> 16, span & 0xffff);
            let k = (hi - lo + 1).min(n);
            let cnt = self.counts[rec as usize];
            if hi + 1 != cnt {
                return None;
            }
            n -= k;
            evicted += k;
            self.counts[rec as usize] = cnt - k;
            if k == hi - lo + 1 {
                if self.last[rec as usize] == e {
                    self.last[rec as usize] = NIL;
                }
                self.pop_head();
            } else {
                self.ring[at + 1] = ((hi - k) << 16) | lo;
            }
            if cnt == k {
                self.remove_record(rec);
            }
        }
        Some(evicted)
    }

    /// A request holding sub-blocks 0 .. a - 1 of group `gkey` (none when a = 0) keys its own
    /// blocks for sub-blocks a .. b - 1: Some(true) when they are now cached (the group's
    /// prefix was 0 .. a - 1: it is 0 .. b - 1, and the request holds it), Some(false) when they
    /// were all cached already (keyless duplicates: nothing changes), None when either would
    /// break (I) (a hole, or keys above a duplicate).
    #[inline]
    pub fn extend(&mut self, gkey: u64, a: u32, b: u32) -> Option<bool> {
        debug_assert!(a < b && b <= self.r);
        let rec = self.find_or_new(gkey)?;
        let n = self.counts[rec as usize];
        if n >= b {
            return Some(false);
        }
        if n != a || self.pinned[rec as usize] != a {
            if n == 0 {
                self.remove_record(rec);
            }
            return None;
        }
        if a > 0 {
            let i = self.hix(rec, a);
            if self.holders[i] == 0 {
                return None;
            }
            self.holders[i] -= 1;
        }
        let i = self.hix(rec, b);
        self.holders[i] += 1;
        self.counts[rec as usize] = b;
        self.pinned[rec as usize] = b;
        Some(true)
    }

    /// The longest prefix below `t` (t >= 1) that a holder of record `rec` holds: the largest
    /// lo in 1 .. t - 1 with holders, 0 when none. The words of 1 .. t - 1 are read from the top
    /// eight at a time (one OR of a chunk, which the compiler does in vector registers), then
    /// one by one in the chunk that has a holder: a request's release mostly lets go of whole
    /// groups that nobody else holds, where every word below t is 0.
    #[inline]
    fn longest_below(&self, rec: u32, t: u32) -> u32 {
        const CHUNK: usize = 8;
        let at = self.hix(rec, 1);
        let words = &self.holders[at..at + t as usize - 1];
        let mut end = words.len();
        while let Some(chunk) = words[..end].last_chunk::<CHUNK>() {
            if chunk.iter().fold(0, |a, &h| a | h) != 0 {
                break;
            }
            end -= CHUNK;
        }
        // word i counts the holders of 0 .. i (t' = i + 1)
        words[..end].iter().rposition(|&h| h != 0).map_or(0, |i| i as u32 + 1)
    }

    /// The record of group `gkey`, a new empty one if it has none (a free record exists while
    /// fewer than C blocks are cached: the caller is about to key a block that holds no key).
    #[inline]
    fn find_or_new(&mut self, gkey: u64) -> Option<u32> {
        match self.probe(gkey) {
            Ok(rec) => Some(rec),
            Err(empty) => {
                let rec = self.free;
                if rec == NIL {
                    return None;
                }
                self.free = self.counts[rec as usize];
                // first use (records come in index order until one is removed): clear its
                // holders, and any skipped before it
                while self.fresh <= rec {
                    let at = (self.fresh as usize) << self.stride_log;
                    self.holders[at..at + (1 << self.stride_log)].fill(0);
                    self.fresh += 1;
                }
                self.counts[rec as usize] = 0;
                self.pinned[rec as usize] = 0;
                self.last[rec as usize] = NIL;
                self.gkeys[rec as usize] = gkey;
                self.table[empty] = rec + 1;
                self.used += 1;
                Some(rec)
            }
        }
    }

    /// A request holding sub-blocks 0 .. t - 1 (t >= 1) of group `gkey` lets them go: those no
    /// other request holds (a suffix lo .. t - 1) are appended to the free queue's tail as one
    /// run (hi = t - 1 first). Returns how many, or None when the request held no such prefix.
    #[inline]
    pub fn let_go(&mut self, gkey: u64, t: u32) -> Option<u32> {
        let rec = self.find(gkey)?;
        let i = self.hix(rec, t);
        if self.holders[i] == 0 {
            return None;
        }
        self.holders[i] -= 1;
        let p = self.pinned[rec as usize];
        if t != p || self.holders[i] > 0 {
            return (t <= p).then_some(0);
        }
        let lo = self.longest_below(rec, t);
        self.pinned[rec as usize] = lo;
        // (the push may compact the ring, which moves the group's runs: link after it)
        let pos = self.push([rec, ((t - 1) << 16) | lo, NIL])?;
        self.ring[pos as usize * ENTRY + 2] = self.last[rec as usize];
        self.last[rec as usize] = pos;
        Some(t - lo)
    }

    /// Appends `k` keyless blocks to the free queue's tail (one run with a keyless run there).
    #[inline]
    pub fn free_keyless(&mut self, k: u32) -> Option<()> {
        if k == 0 {
            return Some(());
        }
        if self.len > 0 {
            let at = self.at(self.len - 1) as usize * ENTRY;
            if self.ring[at] == KEYLESS {
                self.ring[at + 1] += k;
                return Some(());
            }
        }
        self.push([KEYLESS, k, NIL]).map(|_| ())
    }

    /// Appends a ring entry (compacting a full ring first); its position.
    #[inline]
    fn push(&mut self, entry: [u32; ENTRY]) -> Option<u32> {
        if self.len as usize == self.counts.len() {
            self.compact();
            if self.len as usize == self.counts.len() {
                return None;
            }
        }
        let pos = self.at(self.len);
        let at = pos as usize * ENTRY;
        self.ring[at..at + ENTRY].copy_from_slice(&entry);
        self.len += 1;
        Some(pos)
    }

    /// Drops the ring's dead entries, keeping the others in order from the head and relinking
    /// each group's runs (every live run holds a free block, and the free blocks are fewer than
    /// C while one is being freed, so a compaction before a push frees a position).
    fn compact(&mut self) {
        for k in 0..self.len {
            let rec = self.ring[self.at(k) as usize * ENTRY];
            if rec < KEYLESS {
                self.last[rec as usize] = NIL;
            }
        }
        let mut kept = 0;
        for k in 0..self.len {
            let from = self.at(k) as usize * ENTRY;
            let rec = self.ring[from];
            if rec == DEAD {
                continue;
            }
            let pos = self.at(kept);
            let to = pos as usize * ENTRY;
            self.ring[to] = rec;
            self.ring[to + 1] = self.ring[from + 1];
            if rec != KEYLESS {
                self.ring[to + 2] = self.last[rec as usize];
                self.last[rec as usize] = pos;
            }
            kept += 1;
        }
        self.len = kept;
    }

    /// Calls `each(group key or None for a keyless block, sub-block)` for every free block in
    /// queue order, head first (tests and audits).
    pub fn each_free(&self, mut each: impl FnMut(Option<u64>, u32)) {
        for k in 0..self.len {
            let at = self.at(k) as usize * ENTRY;
            let (rec, span) = (self.ring[at], self.ring[at + 1]);
            match rec {
                DEAD => {}
                KEYLESS => (0..span).for_each(|_| each(None, 0)),
                _ => (span & 0xffff..=span >> 16).rev().for_each(|s| each(Some(self.gkeys[rec as usize]), s)),
            }
        }
    }

    /// The pool's state against itself (debug audits of small pods and tests): every group's
    /// runs, followed from its last, cover exactly p_G .. n_G - 1 from the lowest up, p_G is
    /// the largest t with a holder; returns (cached blocks, free blocks, referenced blocks,
    /// references), or None when something does not hold.
    pub fn audit(&self) -> Result<(u64, u64, u64, u64), &'static str> {
        let (mut cached, mut pinned, mut refs) = (0u64, 0u64, 0u64);
        for &e in self.table.iter() {
            if e == 0 {
                continue;
            }
            let rec = e - 1;
            let (n, p) = (self.counts[rec as usize], self.pinned[rec as usize]);
            if n == 0 || p > n || n > self.r {
                return Err("0 < n_G <= R, p_G <= n_G");
            }
            cached += n as u64;
            pinned += p as u64;
            let top = (1..=self.r).rev().find(|&t| self.holders[self.hix(rec, t)] > 0).unwrap_or(0);
            if top != p {
                return Err("p_G is the longest holder's t");
            }
            refs += (1..=self.r).map(|t| self.holders[self.hix(rec, t)] as u64 * t as u64).sum::<u64>();
            let (mut lo, mut e) = (p, self.last[rec as usize]);
            while lo < n {
                if e == NIL || self.ring[e as usize * ENTRY] != rec {
                    return Err("a group's runs cover p_G .. n_G - 1");
                }
                let span = self.ring[e as usize * ENTRY + 1];
                if span & 0xffff != lo || span >> 16 < lo {
                    return Err("a group's runs are contiguous, the lowest nearest the tail");
                }
                lo = (span >> 16) + 1;
                e = self.ring[e as usize * ENTRY + 2];
            }
            if lo != n {
                return Err("a group's runs end at n_G - 1");
            }
        }
        let mut free = 0u64;
        self.each_free(|_, _| free += 1);
        Ok((cached, free, pinned, refs))
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
    use std::collections::{BTreeMap, VecDeque};
    use std::vec;
    use std::vec::Vec;

    use super::*;

    /// A request of the test: its prompt's keys (the key at each multiple of R names a group),
    /// hit h, own blocks (model: block ids, oldest first) and how many of them are keyed.
    struct Req {
        keys: Vec<u64>,
        hit: u32,
        own: Vec<usize>,
        keyed: u32,
    }

    /// The per-block pool of the engine (the oracle): blocks with a key (group key, sub-block) or
    /// none, reference counts, vLLM's free queue of block ids (pops from the head, frees to the
    /// tail, a pinned block taken out of the middle), the map (group key, sub-block) -> block.
    struct Model {
        key: Vec<Option<(u64, u32)>>,
        refs: Vec<u32>,
        queue: VecDeque<usize>,
        map: BTreeMap<(u64, u32), usize>,
    }

    impl Model {
        /// The leading run of a prompt's keys cached, and its free blocks.
        fn lead(&self, keys: &[u64], r: u32) -> (u32, u32) {
            let mut free = 0;
            for j in 0..keys.len() {
                let g0 = j / r as usize * r as usize;
                match self.map.get(&(keys[g0], (j - g0) as u32)) {
                    Some(&b) => free += u32::from(self.refs[b] == 0),
                    None => return (j as u32, free),
                }
            }
            (keys.len() as u32, free)
        }
        /// Unreferences block `b`, freeing it at 0.
        fn unref(&mut self, b: usize) -> u32 {
            self.refs[b] -= 1;
            if self.refs[b] == 0 {
                self.queue.push_back(b);
                return 1;
            }
            0
        }
    }

    /// The pool against the per-block model under random requests as the engine makes them
    /// (prompts of chained ids, so that a group is cached only below a cached prefix):
    /// admissions (the leading hit, sometimes capped one block short, then a keyless duplicate
    /// stays keyless), pins of the hit, pops of own blocks (evictions of whole runs), keying of
    /// the own blocks one chunk at a time and releases in the per-block order (keyless own
    /// blocks, then the held prefix from the last block down), one request mid-prompt at a time
    /// (Lemma 3's condition). After every operation: the free queue block by block (group key
    /// and sub-block, or keyless) equal to the model's in order, the counts of every operation,
    /// the leading runs and free hits of random prompts, and the audit's cached, free, pinned
    /// and referenced blocks. Pods of 3 to 300 blocks, groups of 2 to 32 blocks; the ring is
    /// asserted to have filled (compactions) and runs to have been taken whole by pins (dead
    /// entries).
    /// The chunked scan for the next holder below t against the word-by-word scan it replaced,
    /// on random holder words (mostly 0, as after releases) of every record, for every t.
    #[test]
    fn longest_below_is_the_word_by_word_scan() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut found = 0;
        for (c, r) in [(64usize, 32u32), (40, 20), (16, 3), (8, 8), (8, 2)] {
            let l = PoolGroups::layout(c, r).unwrap();
            let mut words = vec![0u32; l.words()];
            let mut gkeys = vec![0u64; l.keys()];
            let g = PoolGroups::new(c, r, &mut words, &mut gkeys).unwrap();
            for round in 0..200 {
                let sparse = 1 + round % 40;
                for h in g.holders.iter_mut() {
                    *h = if rnd() % sparse == 0 { (rnd() % 3) as u32 } else { 0 };
                }
                for rec in 0..c as u32 {
                    for t in 1..=r {
                        let mut lo = t - 1;
                        while lo > 0 && g.holders[g.hix(rec, lo)] == 0 {
                            lo -= 1;
                        }
                        assert_eq!(g.longest_below(rec, t), lo, "c {c} r {r} record {rec} t {t}");
                        found += usize::from(lo > 0 && t - lo > 8);
                    }
                }
            }
        }
        assert!(found > 1000, "holders found beyond a chunk of zeros: {found}");
    }

    #[test]
    fn matches_the_per_block_pool() {
        for (c, r) in [(3usize, 2u32), (8, 2), (16, 3), (40, 4), (64, 8), (300, 32), (300, 3)] {
            let l = PoolGroups::layout(c, r).unwrap();
            // buffers of junk: the pool must not read what it has not written (a record's
            // holders are cleared at its first use)
            let mut words = vec![0xa5a5_a5a5u32; l.words()];
            let mut gkeys = vec![0x5a5a_5a5a_5a5a_5a5au64; l.keys()];
            let mut g = PoolGroups::new(c, r, &mut words, &mut gkeys).unwrap();
            let mut m = Model { key: vec![None; c], refs: vec![0; c], queue: (0..c).collect(), map: BTreeMap::new() };
            let mut x = 0x2545_f491_4f6c_dd1du64 ^ (c as u64 * 31 + r as u64);
            let mut rnd = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut reqs: Vec<Req> = Vec::new();
            let (mut compactions, mut dead, mut evicted_total) = (0usize, 0usize, 0u64);
            for op in 0..10_000 {
                let free_len = m.queue.len() as u32;
                // (at most 8 requests at once, as running slots)
                if (rnd() % 5 < 2 || reqs.len() >= 8) && !reqs.is_empty() || free_len == 0 {
                    // release a random request: keyless own blocks first, then its held prefix
                    // from the last block down (the per-block pool's order)
                    let q = reqs.swap_remove((rnd() % reqs.len() as u64) as usize);
                    let mut want = 0;
                    let top = q.hit + q.keyed;
                    for &b in q.own[q.keyed as usize..].iter().rev() {
                        want += m.unref(b);
                    }
                    for j in (0..top).rev() {
                        let g0 = j / r * r;
                        let b = m.map[&(q.keys[g0 as usize], j - g0)];
                        want += m.unref(b);
                    }
                    let mut got = q.own.len() as u32 - q.keyed;
                    let before = g.len;
                    g.free_keyless(got).unwrap();
                    let (mut hi, mut runs) = (top, 0);
                    while hi > 0 {
                        let g0 = (hi - 1) / r * r;
                        let k = g.let_go(q.keys[g0 as usize], hi - g0).unwrap();
                        runs += u32::from(k > 0);
                        got += k;
                        hi = g0;
                    }
                    // a release only appends (a run per group that frees blocks, and perhaps a
                    // keyless one): fewer entries than that after it, the ring was compacted
                    compactions += usize::from(g.len < before + runs);
                    assert_eq!(got, want, "c {c} r {r} op {op}: freed");
                } else {
                    // a new request: 1 to 3 ids of 3 after each prefix, a partial last one at
                    // times; chained group keys (a group names its prefix, as a trace's keys)
                    let ngroups = 1 + rnd() % 3;
                    let mut keys = Vec::new();
                    let mut gk = 0u64;
                    for k in 0..ngroups {
                        gk = gk * 8 + 1 + rnd() % 3;
                        let len = if k + 1 == ngroups { 1 + rnd() % r as u64 } else { r as u64 };
                        keys.extend((0..len).map(|_| gk));
                    }
                    let (h_full, free_hits) = m.lead(&keys, r);
                    assert_eq!(g.lead(&keys), (h_full, free_hits), "c {c} r {r} op {op}: lead");
                    // capped one short at times (the block at the cap is then computed again)
                    let capped = h_full > 0 && rnd() % 4 == 0;
                    let h = h_full - u32::from(capped);
                    let (_, free_h) = m.lead(&keys[..h as usize], r);
                    // no own block at times (a pin and, later, a release only: runs taken whole by
                    // pins pile up dead in the ring until it is full)
                    // (the last 4,000 operations pin and release only: nothing pops the ring's head,
                    // so it fills up)
                    let need = match h > 0 && (op >= 6_000 || rnd() % 3 == 0) {
                        true => 0,
                        false => (keys.len() as u32 - h).max(1).min(free_len.saturating_sub(free_h)),
                    };
                    if (need == 0 && h == 0) || free_h + need > free_len || (op >= 6_000 && need > 0) {
                        continue;
                    }
                    // pin the hit
                    for j in 0..h {
                        let g0 = j / r * r;
                        let b = m.map[&(keys[g0 as usize], j - g0)];
                        if m.refs[b] == 0 {
                            let i = m.queue.iter().position(|&y| y == b).unwrap();
                            m.queue.remove(i);
                        }
                        m.refs[b] += 1;
                    }
                    assert_eq!(g.pin(&keys, h), Some(free_h), "c {c} r {r} op {op}: pinned");
                    dead += (0..g.len).filter(|&k| g.ring[g.at(k) as usize * ENTRY] == DEAD).count();
                    // pop own blocks
                    let mut own = Vec::new();
                    let mut want_ev = 0;
                    for _ in 0..need {
                        let b = m.queue.pop_front().unwrap();
                        if let Some(k) = m.key[b].take() {
                            assert_eq!(m.map.remove(&k), Some(b));
                            want_ev += 1;
                        }
                        m.refs[b] = 1;
                        own.push(b);
                    }
                    assert_eq!(g.pop(need), Some(want_ev), "c {c} r {r} op {op}: evicted");
                    evicted_total += want_ev as u64;
                    // key the own blocks below the prompt's keys, in one or two chunks
                    // (capped: the block at the cap is the prompt's last key in the engine, so
                    // nothing above it is keyed)
                    let full = (h + need).min(keys.len() as u32).min(if capped { h + 1 } else { u32::MAX });
                    let mid = h + (full - h) / 2;
                    let mut q = Req { keys, hit: h, own, keyed: 0 };
                    for (lo, hi) in [(h, mid), (mid, full)] {
                        for j in lo..hi {
                            let g0 = j / r * r;
                            let k = (q.keys[g0 as usize], j - g0);
                            let b = q.own[(j - h) as usize];
                            if let std::collections::btree_map::Entry::Vacant(v) = m.map.entry(k) {
                                v.insert(b);
                                m.key[b] = Some(k);
                            }
                        }
                        let mut j = lo;
                        while j < hi {
                            let g0 = j / r * r;
                            let end = (g0 + r).min(hi);
                            let gk = q.keys[g0 as usize];
                            if j == q.hit + q.keyed {
                                if g.extend(gk, j - g0, end - g0).unwrap() {
                                    q.keyed += end - j;
                                }
                            } else {
                                assert!(g.group(gk).0 >= end - g0, "c {c} r {r} op {op}: duplicates");
                            }
                            j = end;
                        }
                    }
                    reqs.push(q);
                }
                // the free queue block by block, and the counts
                let mut free = Vec::new();
                g.each_free(|gk, s| free.push(gk.map(|k| (k, s))));
                let want: Vec<Option<(u64, u32)>> = m.queue.iter().map(|&b| m.key[b]).collect();
                assert_eq!(free, want, "c {c} r {r} op {op}: the free queue");
                let refs: u64 = m.refs.iter().map(|&n| n as u64).sum::<u64>()
                    - reqs.iter().map(|q| (q.own.len() as u32 - q.keyed) as u64).sum::<u64>();
                let pinned = (0..c).filter(|&b| m.refs[b] > 0 && m.key[b].is_some()).count() as u64;
                assert_eq!(
                    g.audit(),
                    Ok((m.map.len() as u64, m.queue.len() as u64, pinned, refs)),
                    "c {c} r {r} op {op}: audit"
                );
                for _ in 0..4 {
                    let gk = 1 + rnd() % 3;
                    let keys: Vec<u64> = (0..(rnd() % (2 * r as u64 + 1))).map(|j| gk + j / r as u64).collect();
                    assert_eq!(g.lead(&keys), m.lead(&keys, r), "c {c} r {r} op {op}: lead of {keys:?}");
                }
            }
            assert!(
                compactions > 0 && dead > 0 && evicted_total > 0,
                "c {c} r {r}: {compactions} {dead} {evicted_total}"
            );
        }
    }
}
