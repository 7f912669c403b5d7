//! The router-side approximate prefix index (llm-d's `approx-prefix-cache-producer`, GIE's
//! prefix plugin, SGLang's per-worker tree): per pod, an LRU of the block keys of the requests
//! routed there, recorded at routing and never told of the engines' evictions. "Which pods hold
//! this key" (llm-d's `hashToPods`) is answered, for up to [`PROBE_MAX_PODS`] pods, by asking
//! each pod's LRU; for more, by a key -> pods mask table kept in step with the LRUs' inserts and
//! evictions. Both give the same set: the table costs two updates per recorded miss and one
//! lookup per key matched, asking costs one probe per pod per key matched (`fleet bench`,
//! `fleet bench --route`; docs/MODEL.md, "The two prefix indexes"). For prompts keyed from
//! trace ids (the FIFO engine's run-length replay) the LRUs can be kept as runs instead
//! ([`ApproxIndex::use_runs`]; docs/MODEL.md, "The approximate index as runs"): the same
//! answers, one probe per pod per group of the prompt.

use heapless::Vec as HVec;

use super::CacheEvents;
use super::fused::{FusedLru, FusedSlot, Side};
use super::index::{BlockIndex, IndexEntry};
use super::lru::{LruPod, Slot};
use super::runs::{NO_RUN, Run, RunLru};
use crate::fleet::base::error::{Buffer, Error, Field};
use crate::fleet::base::limits::MAX_POD_BLOCKS;
use crate::fleet::base::limits::MAX_PODS;
use crate::fleet::base::mask::PodSet;

/// Most pods whose LRUs are asked directly; above this a key -> pods table is kept. Measured
/// (`fleet bench`, conversation trace, 8 pods, 91% misses): asking was about twice as fast for
/// the whole replay, the table's two updates per recorded miss cost more than 8 probes per
/// matched key. At 64 pods with a 15,000-key match (`fleet bench --route`) asking took 6 to 12 ms
/// a decision against 0.09 ms with the table. Between 8 and 64 not measured.
pub const PROBE_MAX_PODS: usize = 8;

/// Per-pod LRUs of routed block keys and, above [`PROBE_MAX_PODS`] pods, the key -> pods table
/// over them.
#[derive(Debug)]
pub struct ApproxIndex<'a> {
    pods: HVec<LruPod<'a>, MAX_PODS>,
    index: Option<BlockIndex<'a>>,
    /// In run-length mode ([`Self::use_runs`]), the same LRUs kept as runs of trace ids of
    /// `group` blocks each (then `pods` and `index` stay unused).
    runs: HVec<RunLru<'a>, MAX_PODS>,
    group: usize,
    /// With [`Self::use_fused`], each LRU kept with its pod's own cache in one table (then
    /// `pods` stays unused): the router's side of pod p is `fused[p]`'s [`Side::Router`].
    /// (At most [`PROBE_MAX_PODS`] of them: a full [`MAX_PODS`] would add 88 B per pod to
    /// every index, fused or not.)
    fused: HVec<FusedLru<'a>, PROBE_MAX_PODS>,
    /// The pods' touch order (their side of `fused`).
    tail_first: bool,
}

/// Keeps the key -> pods table in step with one pod's LRU.
struct Feed<'x, 'a> {
    index: &'x mut BlockIndex<'a>,
    pod: usize,
    error: Option<Error>,
}

impl CacheEvents for Feed<'_, '_> {
    fn inserted(&mut self, key: u64) {
        if let Err(e) = self.index.insert(key, self.pod) {
            self.error.get_or_insert(e);
        }
    }
    fn evicted(&mut self, key: u64) {
        self.index.remove(key, self.pod);
    }
}

impl<'a> ApproxIndex<'a> {
    /// Table length for `pods` LRUs of `lru_blocks` keys each (every key of every LRU fits); 0
    /// when the LRUs are asked instead (at most [`PROBE_MAX_PODS`] pods) or when it does not fit.
    pub const fn index_len(pods: usize, lru_blocks: usize) -> usize {
        if pods <= PROBE_MAX_PODS {
            return 0;
        }
        match pods.checked_mul(lru_blocks) {
            Some(keys) => BlockIndex::table_len_for_pods(keys, pods),
            None => 0,
        }
    }

    /// `pods` empty LRUs of `slots.len() / pods` keys each over caller storage.
    pub fn new(
        pods: usize,
        slots: &'a mut [Slot],
        tables: &'a mut [u32],
        index: &'a mut [IndexEntry],
    ) -> Result<Self, Error> {
        let wrong = |buffer, expected, got| Error::BufferSize { buffer, expected, got };
        if pods == 0 || pods > MAX_PODS || slots.is_empty() || !slots.len().is_multiple_of(pods) {
            return Err(wrong(Buffer::RouterSlots, pods.max(1), slots.len()));
        }
        let lru = slots.len() / pods;
        let table = LruPod::table_len(lru);
        if tables.len() != pods * table {
            return Err(wrong(Buffer::RouterTables, pods * table, tables.len()));
        }
        if index.len() != Self::index_len(pods, lru) {
            return Err(wrong(Buffer::RouterIndex, Self::index_len(pods, lru), index.len()));
        }
        let index = if pods <= PROBE_MAX_PODS { None } else { Some(BlockIndex::with_pods(index, pods)?) };
        let mut lrus = HVec::new();
        for (s, t) in slots.chunks_exact_mut(lru).zip(tables.chunks_exact_mut(table)) {
            lrus.push(LruPod::new(s, t)?).map_err(|_| wrong(Buffer::RouterSlots, MAX_PODS, pods))?;
        }
        Ok(ApproxIndex { pods: lrus, index, runs: HVec::new(), group: 0, fused: HVec::new(), tail_first: true })
    }

    /// Run buffer lengths (`runs`, `tables`) of [`Self::use_runs`] for `pods` LRUs of
    /// `lru_blocks` keys each (None when they do not fit).
    pub const fn runs_layout(pods: usize, lru_blocks: usize) -> Option<(usize, usize)> {
        let (r, t) = (RunLru::runs_len(lru_blocks), RunLru::table_len(lru_blocks));
        if lru_blocks == 0 || lru_blocks >= MAX_POD_BLOCKS || t == 0 {
            return None;
        }
        match (pods.checked_mul(r), pods.checked_mul(t)) {
            (Some(r), Some(t)) => Some((r, t)),
            _ => None,
        }
    }

    /// Switches to the run-length index for prompts keyed from trace ids of `group` blocks each
    /// (block j is sub-block j mod `group` of id j div `group`), before anything is recorded:
    /// the same LRUs, with the same answers (docs/MODEL.md, "The approximate index as runs"),
    /// work per run of blocks. `runs` and `tables` as [`Self::runs_layout`] says. Afterwards
    /// only the prompt-level queries ([`Self::greedy_matches`], [`Self::leading_matches`],
    /// [`Self::held_blocks`], [`Self::record`]) answer; the per-key [`Self::holders`] and
    /// [`Self::mask`] read the per-block LRUs, which stay empty.
    pub fn use_runs(&mut self, group: usize, runs: &'a mut [Run], tables: &'a mut [u32]) -> Result<(), Error> {
        let pods = self.pods.len();
        let lru = self.pods.first().map_or(0, LruPod::capacity);
        let wrong = |buffer, expected, got| Error::BufferSize { buffer, expected, got };
        let Some((runs_len, tables_len)) = Self::runs_layout(pods, lru) else {
            return Err(wrong(Buffer::Runs, 0, runs.len()));
        };
        if runs.len() != runs_len {
            return Err(wrong(Buffer::Runs, runs_len, runs.len()));
        }
        if tables.len() != tables_len {
            return Err(wrong(Buffer::RunTables, tables_len, tables.len()));
        }
        if group == 0 || self.pods.iter().any(|p| !p.is_empty()) {
            return Err(Error::InvalidConfig {
                field: Field::TraceBlockSize,
                expected: "at least 1 block per trace id, attached before the first request",
            });
        }
        let mut lrus = HVec::new();
        for (r, t) in runs.chunks_exact_mut(runs_len / pods).zip(tables.chunks_exact_mut(tables_len / pods)) {
            lrus.push(RunLru::new_in_order(lru, r, t)?).map_err(|_| wrong(Buffer::Runs, MAX_PODS, pods))?;
        }
        self.runs = lrus;
        self.group = group;
        Ok(())
    }

    /// Buffer lengths (`slots`, `tables`) of [`Self::use_fused`] for `pods` pods of
    /// `pod_blocks` blocks, or None when the tables would not be tag-homed or the index keeps a
    /// key -> pods table (more than [`PROBE_MAX_PODS`] pods).
    pub const fn fused_layout(pods: usize, pod_blocks: usize, lru_blocks: usize) -> Option<(usize, usize)> {
        if pods == 0 || pods > PROBE_MAX_PODS || !FusedLru::fits(pod_blocks, lru_blocks) {
            return None;
        }
        Some((
            pods * FusedLru::slots_len(pod_blocks, lru_blocks),
            pods * FusedLru::min_table_len(pod_blocks, lru_blocks),
        ))
    }

    /// Keeps each pod's LRU with that pod's own cache of `pod_blocks` blocks in one table
    /// ([`FusedLru`]), before anything is recorded: the router's answers are the same (the
    /// router side makes an [`LruPod`]'s moves), and the pod's cache, touched tail first or in
    /// order, is served here with each record ([`Self::record_and_serve`]), so the caller's
    /// pod keeps no cache of its own. `slots` and `tables` as [`Self::fused_layout`] says.
    pub fn use_fused(
        &mut self,
        pod_blocks: usize,
        tail_first: bool,
        slots: &'a mut [FusedSlot],
        tables: &'a mut [u32],
    ) -> Result<(), Error> {
        let pods = self.pods.len();
        let lru = self.pods.first().map_or(0, LruPod::capacity);
        let wrong = |buffer, expected, got| Error::BufferSize { buffer, expected, got };
        let Some((slots_len, tables_len)) = Self::fused_layout(pods, pod_blocks, lru) else {
            return Err(wrong(Buffer::RouterSlots, 0, slots.len()));
        };
        if slots.len() != slots_len {
            return Err(wrong(Buffer::RouterSlots, slots_len, slots.len()));
        }
        if tables.len() != tables_len {
            return Err(wrong(Buffer::RouterTables, tables_len, tables.len()));
        }
        if self.is_runs() || self.pods.iter().any(|p| !p.is_empty()) {
            return Err(Error::InvalidConfig {
                field: Field::Router,
                expected: "a fused index attached before the first request",
            });
        }
        let mut fused = HVec::new();
        for (s, t) in slots.chunks_exact_mut(slots_len / pods).zip(tables.chunks_exact_mut(tables_len / pods)) {
            fused
                .push(FusedLru::new(pod_blocks, lru, s, t)?)
                .map_err(|_| wrong(Buffer::RouterSlots, PROBE_MAX_PODS, pods))?;
        }
        self.fused = fused;
        self.tail_first = tail_first;
        Ok(())
    }

    /// Whether the index keeps the pods' caches too ([`Self::use_fused`]).
    pub fn is_fused(&self) -> bool {
        !self.fused.is_empty()
    }

    /// Pod `p`'s own cache when the index keeps it ([`Self::use_fused`]): whether it holds `key`.
    pub fn pod_holds(&self, p: usize, key: u64) -> Option<bool> {
        self.fused.get(p).map(|f| f.contains(Side::Pod, key))
    }

    /// Whether the index is kept as runs ([`Self::use_runs`]).
    pub fn is_runs(&self) -> bool {
        !self.runs.is_empty()
    }

    /// Pods 0..64 that the router believes hold `key`.
    #[inline]
    pub fn mask(&self, key: u64) -> u64 {
        self.holders(key, PodSet::<1>([u64::MAX])).0[0]
    }

    /// The pods of `candidates` that hold `key` (a set of `W` words, at least the fleet's
    /// `ceil(pods / 64)`): from the table, or one probe per pod, none waiting for another's
    /// result, so that their cache misses overlap.
    #[inline]
    pub fn holders<const W: usize>(&self, key: u64, candidates: PodSet<W>) -> PodSet<W> {
        // Every LRU has the same capacity and table ([`Self::new`], [`Self::use_fused`]): with
        // tag-homed tables the key's tag and home are computed once for all of them.
        if self.is_fused() {
            // At most [`PROBE_MAX_PODS`] pods: word 0 only.
            let mut m = PodSet::EMPTY;
            m.0[0] = Self::fused_holders(&self.fused, key, candidates.0[0]);
            return m;
        }
        if self.index.is_none()
            && let Some(h) = self.pods.first().and_then(|l| l.homed(key))
        {
            let mut m = PodSet::EMPTY;
            candidates.and(PodSet::first(self.pods.len())).for_each(|p| m.set_if(p, self.pods[p].contains_homed(h)));
            return m;
        }
        self.holders_reference(key, candidates)
    }

    /// [`Self::holders`] over the fused tables (pods `0..fused.len()`, at most 64) as a bitmask:
    /// the key homed once, then one probe per candidate pod in pod order (a plain loop over the
    /// tables, no set iteration or indexing per pod).
    #[inline(always)]
    fn fused_holders(fused: &[FusedLru<'a>], key: u64, candidates: u64) -> u64 {
        let Some(first) = fused.first() else { return 0 };
        let h = first.homed(key);
        let mut m = 0u64;
        for (p, f) in fused.iter().enumerate() {
            if candidates >> p & 1 != 0 && f.router_holds(h) {
                m |= 1 << p;
            }
        }
        m
    }

    /// [`Self::holders`] by one generic probe per pod (the oracle of its tag-homed probe; the
    /// same answers, checked by `core/tests/shipped_routers.rs`).
    #[inline]
    pub fn holders_reference<const W: usize>(&self, key: u64, candidates: PodSet<W>) -> PodSet<W> {
        if let Some(index) = &self.index {
            return index.holders::<W>(key).and(candidates);
        }
        let mut m = PodSet::EMPTY;
        if self.is_fused() {
            let f = &self.fused;
            candidates.and(PodSet::first(f.len())).for_each(|p| m.set_if(p, f[p].contains(Side::Router, key)));
            return m;
        }
        candidates.and(PodSet::first(self.pods.len())).for_each(|p| m.set_if(p, self.pods[p].contains(key)));
        m
    }

    /// Keys recorded for pod `p` (its LRU's length; SGLang's tenant size, in blocks).
    pub fn held_blocks(&self, p: usize) -> usize {
        if self.is_runs() {
            return self.runs.get(p).map_or(0, RunLru::len);
        }
        if self.is_fused() {
            return self.fused.get(p).map_or(0, |f| f.len(Side::Router));
        }
        self.pods.get(p).map_or(0, LruPod::len)
    }

    /// Records that `keys` were routed to `pod`: each key is added in prompt order (re-adding
    /// refreshes it), so the leading blocks are the least recent, as llm-d's `PreRequest` adds them.
    pub fn record(&mut self, pod: usize, keys: &[u64]) -> Result<(), Error> {
        let lru = self
            .pods
            .get_mut(pod)
            .ok_or(Error::InvalidConfig { field: Field::Router, expected: "a pod index below the number of pods" })?;
        if let Some(runs) = self.runs.get_mut(pod) {
            return runs.touch_request_in_order(keys, self.group);
        }
        if let Some(f) = self.fused.get_mut(pod) {
            // The router side only: a caller that keeps the pods' caches here serves them with
            // [`Self::record_and_serve`] instead.
            f.touch_each(Side::Router, keys.iter().copied());
            return Ok(());
        }
        let Some(index) = self.index.as_mut() else {
            lru.touch_each(keys.iter().copied(), &mut ());
            return Ok(());
        };
        let mut feed = Feed { index, pod, error: None };
        lru.touch_each(keys.iter().copied(), &mut feed);
        // The table holds pods x LRU keys, so it cannot fill: an error here is a bug.
        debug_assert!(feed.error.is_none());
        feed.error.map_or(Ok(()), Err)
    }

    /// [`Self::record`] of `router_keys` for `pod`, then, when the index keeps the pods' caches
    /// ([`Self::use_fused`]), pod `pod`'s serve of `pod_keys` (its hit test, returned, then its
    /// touches): [`FusedLru::record_and_serve`] when both are the same keys. None (only the
    /// record done) when the index does not keep the pods' caches. Not inlined (branch pb36):
    /// inlined into `AnyRouter::routed_and_served`, it made that function's frame larger for
    /// every router, the ones without an approximate index too.
    #[inline(never)]
    pub fn record_and_serve(
        &mut self,
        pod: usize,
        router_keys: &[u64],
        pod_keys: &[u64],
    ) -> Result<Option<usize>, Error> {
        let tail_first = self.tail_first;
        match self.fused.get_mut(pod) {
            Some(f) if core::ptr::eq(router_keys, pod_keys) || router_keys == pod_keys => {
                Ok(Some(f.record_and_serve(pod_keys, tail_first)))
            }
            Some(f) => {
                f.touch_each(Side::Router, router_keys.iter().copied());
                let hit = f.hit_blocks(Side::Pod, pod_keys);
                if tail_first {
                    f.touch_each(Side::Pod, pod_keys.iter().rev().copied());
                } else {
                    f.touch_each(Side::Pod, pod_keys.iter().copied());
                }
                Ok(Some(hit))
            }
            None => self.record(pod, router_keys).map(|()| None),
        }
    }

    /// llm-d's match (`matchLongestPrefix`): walk the keys in order and stop at the first key no
    /// candidate holds; every candidate holding a key before that gets one block. `out[p]` for
    /// every p in `candidates` (others untouched).
    pub fn greedy_matches<const W: usize, const P: usize>(
        &self,
        keys: &[u64],
        candidates: PodSet<W>,
        out: &mut [u32; P],
    ) {
        candidates.for_each(|p| out[p] = 0);
        if self.is_runs() {
            return self.greedy_runs(keys, candidates, out);
        }
        // Runs of keys with the same holder set are counted once per run (prompts sent to the
        // same pods share long runs): the cost is one lookup (or a probe per
        // candidate) per key plus one pass per run.
        let (mut run_mask, mut run_len) = (PodSet::<W>::EMPTY, 0u32);
        for &key in keys {
            let m = self.holders(key, candidates);
            if m != run_mask {
                run_mask.for_each(|p| out[p] += run_len);
                (run_mask, run_len) = (m, 0);
            }
            if m.is_empty() {
                break;
            }
            run_len += 1;
        }
        run_mask.for_each(|p| out[p] += run_len);
    }

    /// Longest leading run of `keys` each candidate holds (SGLang's per-tenant tree match).
    pub fn leading_matches<const W: usize, const P: usize>(
        &self,
        keys: &[u64],
        candidates: PodSet<W>,
        out: &mut [u32; P],
    ) {
        candidates.for_each(|p| out[p] = keys.len() as u32);
        if self.is_runs() {
            return self.leading_runs(keys, candidates, out);
        }
        let mut alive = candidates;
        for (j, &key) in keys.iter().enumerate() {
            let b = self.holders(key, alive);
            alive.and_not(b).for_each(|p| out[p] = j as u32);
            alive = b;
            if alive.is_empty() {
                break;
            }
        }
    }

    /// [`Self::greedy_matches`] from the runs, a group at a time: the walk's stop in a group of
    /// t sub-blocks is the lowest sub-block below t that no candidate's runs cover (the runs of
    /// a group are sorted by position, so one cursor per pod sweeps them once); each candidate
    /// counts its held sub-blocks below the stop. `out` is zeroed by the caller.
    fn greedy_runs<const W: usize, const P: usize>(&self, keys: &[u64], candidates: PodSet<W>, out: &mut [u32; P]) {
        let cand = candidates.and(PodSet::first(self.runs.len()));
        let mut head = [NO_RUN; P];
        for chunk in keys.chunks(self.group) {
            let t = chunk.len() as u32;
            let mut any = false;
            cand.for_each(|p| {
                head[p] = self.runs[p].group_head(chunk[0]);
                any |= head[p] != NO_RUN;
            });
            if !any {
                return;
            }
            // The covered prefix 0..c of the group, extended while some candidate's run
            // contains c.
            let mut cur = head;
            let mut c = 0u32;
            while c < t {
                let mut ext = c;
                cand.for_each(|p| {
                    let lru = &self.runs[p];
                    while cur[p] != NO_RUN {
                        let (lo, hi, older) = lru.next_run(cur[p]);
                        if hi <= c {
                            cur[p] = older;
                            continue;
                        }
                        if lo <= c {
                            ext = ext.max(hi);
                        }
                        break;
                    }
                });
                if ext == c {
                    break;
                }
                c = ext;
            }
            let stop = c.min(t);
            cand.for_each(|p| {
                let lru = &self.runs[p];
                let mut r = head[p];
                while r != NO_RUN {
                    let (lo, hi, older) = lru.next_run(r);
                    if lo >= stop {
                        break;
                    }
                    out[p] += hi.min(stop) - lo;
                    r = older;
                }
            });
            if stop < t {
                return;
            }
        }
    }

    /// [`Self::leading_matches`] from the runs: per group, each live candidate's runs from
    /// sub-block 0 while they are contiguous. `out` holds the prompt length for every candidate.
    fn leading_runs<const W: usize, const P: usize>(&self, keys: &[u64], candidates: PodSet<W>, out: &mut [u32; P]) {
        let mut alive = candidates.and(PodSet::first(self.runs.len()));
        candidates.and_not(alive).for_each(|p| out[p] = 0);
        for (g, chunk) in keys.chunks(self.group).enumerate() {
            let t = chunk.len() as u32;
            let base = (g * self.group) as u32;
            let mut next = alive;
            alive.for_each(|p| {
                let lru = &self.runs[p];
                let (mut r, mut c) = (lru.group_head(chunk[0]), 0u32);
                while r != NO_RUN && c < t {
                    let (lo, hi, older) = lru.next_run(r);
                    if lo > c {
                        break;
                    }
                    c = hi;
                    r = older;
                }
                if c < t {
                    out[p] = base + c;
                    next.remove(p);
                }
            });
            alive = next;
            if alive.is_empty() {
                return;
            }
        }
    }
}
