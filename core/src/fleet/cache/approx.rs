//! The router-side approximate prefix index (llm-d's `approx-prefix-cache-producer`, GIE's
//! prefix plugin, SGLang's per-worker tree): per pod, an LRU of the block keys of the requests
//! routed there, recorded at routing and never told of the engines' evictions. "Which pods hold
//! this key" (llm-d's `hashToPods`) is answered, for up to [`PROBE_MAX_PODS`] pods, by asking
//! each pod's LRU; for more, by a key -> pods mask table kept in step with the LRUs' inserts and
//! evictions. Both give the same set: the table costs two updates per recorded miss and one
//! lookup per key matched, asking costs one probe per pod per key matched (`fleet bench`,
//! `fleet bench --route`; docs/MODEL.md, "The two prefix indexes").

use heapless::Vec as HVec;

use super::CacheEvents;
use super::index::{BlockIndex, IndexEntry};
use super::lru::{LruPod, Slot};
use crate::fleet::base::error::{Buffer, Error, Field};
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
        Ok(ApproxIndex { pods: lrus, index })
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
        if let Some(index) = &self.index {
            return index.holders::<W>(key).and(candidates);
        }
        let mut m = PodSet::EMPTY;
        candidates.and(PodSet::first(self.pods.len())).for_each(|p| m.set_if(p, self.pods[p].contains(key)));
        m
    }

    /// Keys recorded for pod `p` (its LRU's length; SGLang's tenant size, in blocks).
    pub fn held_blocks(&self, p: usize) -> usize {
        self.pods.get(p).map_or(0, LruPod::len)
    }

    /// Records that `keys` were routed to `pod`: each key is added in prompt order (re-adding
    /// refreshes it), so the leading blocks are the least recent, as llm-d's `PreRequest` adds them.
    pub fn record(&mut self, pod: usize, keys: &[u64]) -> Result<(), Error> {
        let lru = self
            .pods
            .get_mut(pod)
            .ok_or(Error::InvalidConfig { field: Field::Router, expected: "a pod index below the number of pods" })?;
        let Some(index) = self.index.as_mut() else {
            for &k in keys {
                lru.touch(k, &mut ());
            }
            return Ok(());
        };
        let mut feed = Feed { index, pod, error: None };
        for &k in keys {
            lru.touch(k, &mut feed);
        }
        // The table holds pods x LRU keys, so it cannot fill: an error here is a bug.
        debug_assert!(feed.error.is_none());
        feed.error.map_or(Ok(()), Err)
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
}
