//! A pod's LRU kept as runs of trace ids instead of single blocks: the same cache as
//! [`super::lru::LruPod`] (same hits, same final content and recency order), with work per run
//! instead of per block.
//!
//! Why it is exact (docs/MODEL.md, "Run-length replay"): with trace ids of S tokens, block j of a
//! request is sub-block j mod R of id j div R (R = S / 16 blocks per id, the *group*), and its key
//! is a function of the group's first key and the sub-block number (the chain). Touching
//! tail-first, a request touches each of its groups' sub-blocks t-1, ..., 0 in a row, so after it
//! they are the most recent blocks of that group, more recent the lower the sub-block. An LRU
//! evicts the least recent block, i.e. the highest sub-block of some group. By induction, each
//! group's held sub-blocks are always a prefix `0..n`, with recency decreasing along it: it is cut
//! into *runs* `lo..hi` of consecutive sub-blocks with consecutive recency, the most recent run
//! starting at 0. A request touching `0..t` of a group removes the runs below `t`, shortens the one
//! straddling `t`, and puts one run `0..t` at the most recent end; eviction trims blocks from the
//! end of the least recent run. The content after a request is the C most recently touched blocks
//! in both representations (an LRU property that does not depend on when the evictions happen),
//! so hits and matches are equal as long as keys do not collide (as for every result here).
//!
//! In-order touches (sub-block 0 first: the router's approximate index records prompts so,
//! [`RunLru::new_in_order`]) keep the same runs with the recency reversed inside each: eviction
//! trims the least recent run from below and a group's held set is a union of runs sorted by
//! position, possibly with gaps (docs/MODEL.md, "The approximate index as runs").
//!
//! Not modelled here (callers use the per-block pod): event feeds (a global index, a stale
//! index, a CPU tier), clearing.
//!
//! Layout: `runs` holds C + 1 [`Run`]s (a request's group is pushed before the cache is trimmed
//! back to C blocks); `table` maps a group's first key to its most recent run (power of two, at
//! least [`RunLru::table_len`]).

use super::table::{self, Probe};
use crate::fleet::base::error::{Buffer, Error, Field, Invariant};
use crate::fleet::base::limits::MAX_POD_BLOCKS;

/// "No run" in the links.
const NIL: u32 = u32::MAX;

/// "No run": what [`RunLru::group_head`] and [`RunLru::next_run`] return past a group's runs.
pub const NO_RUN: u32 = NIL;

/// A run of consecutive sub-blocks `lo..hi` of one group, with consecutive recency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// The group's first key (sub-block 0).
    key: u64,
    /// Towards more recent (recency list); next free run on the free list.
    prev: u32,
    /// Towards less recent.
    next: u32,
    /// The same group's next run (higher sub-blocks, less recent), NIL for its last.
    older: u32,
    lo: u32,
    hi: u32,
}

impl Default for Run {
    fn default() -> Self {
        Run { key: 0, prev: NIL, next: NIL, older: NIL, lo: 0, hi: 0 }
    }
}

/// An LRU of at most `capacity` blocks, kept as runs of trace-id groups.
#[derive(Debug)]
pub struct RunLru<'a> {
    runs: &'a mut [Run],
    /// 0 when empty, else the run index + 1 of a group's most recent run.
    table: &'a mut [u32],
    shift: u32,
    capacity: u32,
    /// Blocks held.
    len: u32,
    mru: u32,
    lru: u32,
    free: u32,
    /// Runs never used yet start here.
    fresh: u32,
    /// Touches in prompt order (sub-block 0 first): a run's least recent block is its lowest,
    /// so eviction trims runs from below (see [`Self::new_in_order`]).
    in_order: bool,
}

struct GroupTable<'t> {
    runs: &'t [Run],
    table: &'t mut [u32],
    shift: u32,
}

impl Probe for GroupTable<'_> {
    fn slots(&self) -> usize {
        self.table.len()
    }
    fn is_empty(&self, i: usize) -> bool {
        self.table[i] == 0
    }
    fn home_of(&self, i: usize) -> usize {
        table::home(self.runs[self.table[i] as usize - 1].key, self.shift)
    }
    fn move_entry(&mut self, from: usize, to: usize) {
        self.table[to] = self.table[from];
    }
    fn clear(&mut self, i: usize) {
        self.table[i] = 0;
    }
}

impl<'a> RunLru<'a> {
    /// Runs a pod of `capacity` blocks needs (C + 1).
    pub const fn runs_len(capacity: usize) -> usize {
        capacity.saturating_add(1)
    }

    /// Group-table length for a pod of `capacity` blocks (0 when it does not fit in `usize`).
    pub const fn table_len(capacity: usize) -> usize {
        match table::table_len_for(capacity.saturating_add(1)) {
            Some(n) => n,
            None => 0,
        }
    }

    /// An empty cache of `capacity` blocks over `runs` ([`Self::runs_len`]) and `table`
    /// ([`Self::table_len`] or a longer power of two).
    pub fn new(capacity: usize, runs: &'a mut [Run], table: &'a mut [u32]) -> Result<Self, Error> {
        if capacity == 0 || capacity >= MAX_POD_BLOCKS {
            return Err(Error::InvalidConfig { field: Field::Capacity, expected: "between 1 and 4294967293 blocks" });
        }
        if runs.len() != Self::runs_len(capacity) {
            return Err(Error::BufferSize {
                buffer: Buffer::Runs,
                expected: Self::runs_len(capacity),
                got: runs.len(),
            });
        }
        let required = Self::table_len(capacity);
        if required == 0 || !table::check_len(table.len(), required) {
            return Err(Error::BufferSize { buffer: Buffer::RunTable, expected: required, got: table.len() });
        }
        table.fill(0);
        let shift = table::shift_for(table.len());
        Ok(RunLru {
            runs,
            table,
            shift,
            capacity: capacity as u32,
            len: 0,
            mru: NIL,
            lru: NIL,
            free: NIL,
            fresh: 0,
            in_order: false,
        })
    }

    /// An empty cache as [`Self::new`] whose groups are touched in prompt order (sub-block 0
    /// first, t-1 last: the router's approximate index records a routed prompt so). Then a
    /// run `lo..hi` has *increasing* recency along its sub-blocks, eviction trims the least
    /// recent run from its low end, and a group's held set is a union of runs sorted by
    /// position, the lowest the most recent, possibly with gaps (docs/MODEL.md, "Run-length
    /// replay", "The approximate index as runs"); read it with [`Self::group_runs`].
    pub fn new_in_order(capacity: usize, runs: &'a mut [Run], table: &'a mut [u32]) -> Result<Self, Error> {
        let mut lru = Self::new(capacity, runs, table)?;
        lru.in_order = true;
        Ok(lru)
    }

    /// Blocks held now.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when no block is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Table position and most recent run of the group whose first key is `key`, or the empty
    /// position that ended the probe.
    #[inline]
    fn probe(&self, key: u64) -> Result<(usize, u32), usize> {
        let mask = self.table.len() - 1;
        let mut i = table::home(key, self.shift);
        loop {
            let e = self.table[i];
            if e == 0 {
                return Err(i);
            }
            if self.runs[e as usize - 1].key == key {
                return Ok((i, e - 1));
            }
            i = (i + 1) & mask;
        }
    }

    /// Sub-blocks `0..n` of the group whose first key is `key` are held: returns n (tail-first
    /// touches only, where a group's held set is a prefix).
    #[inline]
    pub fn held(&self, key: u64) -> u32 {
        debug_assert!(!self.in_order, "an in-order cache's groups are read with group_runs");
        match self.probe(key) {
            Ok((_, mut r)) => loop {
                let run = &self.runs[r as usize];
                if run.older == NIL {
                    return run.hi;
                }
                r = run.older;
            },
            Err(_) => 0,
        }
    }

    /// The largest h such that blocks `0..h` of a request are held, for a request of `blocks`
    /// blocks whose groups (R = `group` blocks each) start with `first_keys`.
    #[inline]
    pub fn hit_blocks(&self, keys: &[u64], group: usize) -> usize {
        debug_assert!(group > 0);
        let mut h = 0;
        for (g, &key) in keys.iter().step_by(group).enumerate() {
            let t = (keys.len() - g * group).min(group) as u32;
            let n = self.held(key);
            if n < t {
                return h + n as usize;
            }
            h += t as usize;
        }
        h
    }

    fn unlink(&mut self, r: u32) {
        let Run { prev, next, .. } = self.runs[r as usize];
        match prev {
            NIL => self.mru = next,
            p => self.runs[p as usize].next = next,
        }
        match next {
            NIL => self.lru = prev,
            n => self.runs[n as usize].prev = prev,
        }
    }

    fn push_mru(&mut self, r: u32) {
        let old = self.mru;
        self.runs[r as usize].prev = NIL;
        self.runs[r as usize].next = old;
        match old {
            NIL => self.lru = r,
            o => self.runs[o as usize].prev = r,
        }
        self.mru = r;
    }

    fn alloc(&mut self) -> Result<u32, Error> {
        if self.free != NIL {
            let r = self.free;
            self.free = self.runs[r as usize].prev;
            return Ok(r);
        }
        // At most C runs are held between requests' groups and one more while a group is pushed;
        // checked in every build: past it the next run would be written out of bounds.
        if self.fresh as usize >= self.runs.len() {
            return Err(Error::Invariant { what: Invariant::RunSlots });
        }
        self.fresh += 1;
        Ok(self.fresh - 1)
    }

    fn release(&mut self, r: u32) {
        self.runs[r as usize].prev = self.free;
        self.free = r;
    }

    /// Touches sub-blocks `0..t` of the group whose first key is `key` tail-first (t-1 first,
    /// 0 last), then evicts least recent blocks down to the capacity. An error is a broken
    /// invariant (a bug): the cache is then unusable, and the fleet that owns it poisoned.
    pub fn touch_group(&mut self, key: u64, t: u32) -> Result<(), Error> {
        debug_assert!(t > 0);
        let (pos, rest, held) = match self.probe(key) {
            Ok((pos, head)) => {
                // Runs below t are touched again: they leave; one straddling t keeps its top.
                // `held` counts the group's held blocks below t (a group's runs are sorted by
                // position, the lowest first, in both orders).
                let mut r = head;
                let mut held = 0;
                let rest = loop {
                    let run = self.runs[r as usize];
                    if run.lo >= t {
                        break r;
                    }
                    if run.hi > t {
                        held += t - run.lo;
                        self.runs[r as usize].lo = t;
                        break r;
                    }
                    held += run.hi - run.lo;
                    self.unlink(r);
                    self.release(r);
                    if run.older == NIL {
                        break NIL;
                    }
                    r = run.older;
                };
                (Ok(pos), rest, held)
            }
            Err(empty) => (Err(empty), NIL, 0),
        };
        let new = self.alloc()?;
        self.runs[new as usize] = Run { key, prev: NIL, next: NIL, older: rest, lo: 0, hi: t };
        self.push_mru(new);
        match pos {
            Ok(pos) => self.table[pos] = new + 1,
            Err(empty) => self.table[empty] = new + 1,
        }
        self.len += t - held;
        self.trim()
    }

    /// Touches a whole request's blocks tail-first, `group` blocks per trace id. An error is a
    /// broken invariant, as for [`Self::touch_group`].
    pub fn touch_request(&mut self, keys: &[u64], group: usize) -> Result<(), Error> {
        debug_assert!(group > 0);
        let groups = keys.len().div_ceil(group);
        for g in (0..groups).rev() {
            let t = (keys.len() - g * group).min(group) as u32;
            self.touch_group(keys[g * group], t)?;
        }
        Ok(())
    }

    /// Touches a whole request's blocks in prompt order (an in-order cache,
    /// [`Self::new_in_order`]): group by group from the first, each group's sub-blocks
    /// `0..t` in order. An error is a broken invariant, as for [`Self::touch_group`].
    pub fn touch_request_in_order(&mut self, keys: &[u64], group: usize) -> Result<(), Error> {
        debug_assert!(group > 0 && self.in_order);
        for chunk in keys.chunks(group) {
            self.touch_group(chunk[0], chunk.len() as u32)?;
        }
        Ok(())
    }

    /// The most recent run of the group whose first key is `key` (NIL when none is held): the
    /// first of [`Self::next_run`]'s walk.
    #[inline]
    pub fn group_head(&self, key: u64) -> u32 {
        match self.probe(key) {
            Ok((_, r)) => r,
            Err(_) => NIL,
        }
    }

    /// The sub-blocks `lo..hi` of run `r` (not NIL) and the same group's next run by position
    /// (higher sub-blocks; NIL after its last).
    #[inline]
    pub fn next_run(&self, r: u32) -> (u32, u32, u32) {
        let run = &self.runs[r as usize];
        (run.lo, run.hi, run.older)
    }

    /// A group's held runs `(lo, hi)` by position, the lowest first.
    pub fn group_runs(&self, key: u64) -> impl Iterator<Item = (u32, u32)> + '_ {
        let mut r = self.group_head(key);
        core::iter::from_fn(move || {
            if r == NIL {
                return None;
            }
            let (lo, hi, older) = self.next_run(r);
            r = older;
            Some((lo, hi))
        })
    }

    /// Evicts least recent blocks until at most `capacity` are held.
    fn trim(&mut self) -> Result<(), Error> {
        while self.len > self.capacity {
            let r = self.lru;
            let run = self.runs[r as usize];
            let take = (self.len - self.capacity).min(run.hi - run.lo);
            self.len -= take;
            if take < run.hi - run.lo {
                // Tail-first, a run's least recent block is its highest; in order, its lowest.
                match self.in_order {
                    false => self.runs[r as usize].hi -= take,
                    true => self.runs[r as usize].lo += take,
                }
                continue;
            }
            // The run empties; it is its group's last (least recent) run.
            self.unlink(r);
            self.drop_last_run(run.key, r)?;
            self.release(r);
        }
        Ok(())
    }

    /// Forgets run `r`, the last run of the group `key`. The links it follows are checked in
    /// every build: a broken one would otherwise index with `NIL`, out of bounds.
    fn drop_last_run(&mut self, key: u64, r: u32) -> Result<(), Error> {
        let broken = |what| Err(Error::Invariant { what });
        let Ok((pos, head)) = self.probe(key) else { return broken(Invariant::RunGroupMapped) };
        if self.runs[r as usize].older != NIL {
            return broken(Invariant::RunLastOfGroup);
        }
        if head == r {
            let mut view = GroupTable { runs: self.runs, table: self.table, shift: self.shift };
            table::remove_at(&mut view, pos);
            return Ok(());
        }
        let mut p = head;
        loop {
            match self.runs[p as usize].older {
                NIL => return broken(Invariant::RunLastOfGroup),
                o if o == r => break,
                o => p = o,
            }
        }
        self.runs[p as usize].older = NIL;
        Ok(())
    }

    /// Runs from most to least recent, as (first key of the group, lo, hi).
    pub fn iter_mru(&self) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
        let mut r = self.mru;
        core::iter::from_fn(move || {
            if r == NIL {
                return None;
            }
            let run = self.runs[r as usize];
            r = run.next;
            Some((run.key, run.lo, run.hi))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: usize = 8;

    fn keys(first: u64, n: usize) -> [u64; C] {
        let mut k = [0; C];
        for (i, x) in k.iter_mut().enumerate().take(n) {
            *x = first + i as u64;
        }
        k
    }

    /// A broken invariant is an error in every build (release included), never an index out of
    /// bounds: each of the three checks, with the state corrupted by hand.
    #[test]
    fn broken_links_are_errors_not_out_of_bounds() {
        let mut runs = [Run::default(); RunLru::runs_len(C)];
        let mut table = [0u32; RunLru::table_len(C)];
        let mut lru = RunLru::new(C, &mut runs, &mut table).unwrap();
        lru.touch_request(&keys(100, 4)[..4], 4).unwrap();
        lru.touch_request(&keys(200, 4)[..4], 4).unwrap();
        // Every slot used and none free: the next run has nowhere to go.
        lru.fresh = lru.runs.len() as u32;
        let full = lru.touch_request(&keys(300, 4)[..4], 4);
        assert_eq!(full, Err(Error::Invariant { what: Invariant::RunSlots }));

        let mut runs = [Run::default(); RunLru::runs_len(C)];
        let mut table = [0u32; RunLru::table_len(C)];
        let mut lru = RunLru::new(C, &mut runs, &mut table).unwrap();
        lru.touch_request(&keys(100, 4)[..4], 4).unwrap();
        lru.touch_request(&keys(200, 4)[..4], 4).unwrap();
        // The least recent run's group missing from the table: eviction cannot find it.
        lru.table.fill(0);
        let unmapped = lru.touch_request(&keys(300, 4)[..4], 4);
        assert_eq!(unmapped, Err(Error::Invariant { what: Invariant::RunGroupMapped }));

        let mut runs = [Run::default(); RunLru::runs_len(C)];
        let mut table = [0u32; RunLru::table_len(C)];
        let mut lru = RunLru::new(C, &mut runs, &mut table).unwrap();
        lru.touch_request(&keys(100, 4)[..4], 4).unwrap();
        lru.touch_request(&keys(200, 4)[..4], 4).unwrap();
        // The least recent run points at an older run of its group (it must be the last).
        let r = lru.lru;
        lru.runs[r as usize].older = r;
        let linked = lru.touch_request(&keys(300, 4)[..4], 4);
        assert_eq!(linked, Err(Error::Invariant { what: Invariant::RunLastOfGroup }));
    }
}
