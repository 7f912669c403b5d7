//! Routers: one trait ([`Router`]) and the view of the fleet it decides from ([`RouteView`]);
//! the seed's round-robin, least-loaded and prefix-aware ([`seed`]), and the shipped routers'
//! presets and pipelines (filters -> weighted scorers -> picker, Dynamo, SGLang; [`spec`],
//! [`shipped`]). A user can plug their own router.
//!
//! The route layer sits above the caches (it reads the exact index and the pending events) and
//! beside the engines: both read the load signals of `base::load`, neither imports the other.

pub mod kind;
pub mod policies;
pub mod rng;
pub mod scorers;
pub mod seed;
pub mod shipped;
pub mod spec;

use crate::fleet::base::error::Error;
use crate::fleet::base::limits::MAX_PODS;
use crate::fleet::base::load::PodLoad;
use crate::fleet::base::mask::{POD_WORDS, PodSet, WORD_PODS, for_each, width_words};
use crate::fleet::cache::index::{BlockIndex, PendingEvicts};

/// "Which of these pods hold this key": implemented by whatever holds the exact cache state (the
/// FIFO pods' key tables, the batched engines' cache maps), so the router needs no knowledge of
/// the fleet or engine types.
pub trait KeyHolders {
    /// Bitmask of the `candidates` pods of word `word` (bit b is pod 64 word + b) whose cache
    /// holds `key`.
    fn mask(&self, key: u64, word: usize, candidates: u64) -> u64;

    /// match_p for the pods `0..out.len()` (the longest leading run of `keys` pod p holds), when
    /// the holder computes it faster than key by key (the run-length replay); false to be asked
    /// key by key ([`Self::mask`]).
    fn leading_matches(&self, _keys: &[u64], _out: &mut [u32]) -> bool {
        false
    }

    /// The holders of `key` among `candidates` (one word per 64 pods) into `out` (as long),
    /// when the holder answers for all words at once (a key -> holders table keeps the key);
    /// false to be asked word by word ([`Self::mask`]).
    fn holders_into(&self, _key: u64, _candidates: &[u64], _out: &mut [u64]) -> bool {
        false
    }

    /// Whether [`RouteView::matches`] may walk pod by pod (the first key's holders, then each
    /// one's leading run of the other keys, [`Self::leading_run`]) instead of key by key over
    /// the pods still matching: the same answers, with a pod's probes of consecutive keys in
    /// one loop. False (the default): key by key.
    fn runs_by_pod(&self) -> bool {
        false
    }

    /// The longest leading run of `keys` pod `pod` holds: key by key through [`Self::mask`]
    /// (the default), or faster when the holder knows how (same answer).
    fn leading_run(&self, pod: usize, keys: &[u64]) -> u32 {
        let (word, bit) = (pod / WORD_PODS, 1u64 << (pod % WORD_PODS));
        keys.iter().take_while(|&&k| self.mask(k, word, bit) != 0).count() as u32
    }
}

/// Where "which pods hold this key" comes from.
pub enum Holders<'v, 'a> {
    /// No index: the router does not look at caches.
    None,
    /// The global block index.
    Index(&'v BlockIndex<'a>),
    /// The pods' own caches (FIFO key tables or batched cache maps), asked directly.
    Exact(&'v dyn KeyHolders),
}

/// What a router may look at when it routes request `request`.
pub struct RouteView<'v, 'a> {
    /// 0-based index of the request, in file order.
    pub request: u64,
    /// queue_len(p) at the request's arrival, one per pod.
    pub queue_lens: &'v [u32],
    /// Which pods hold a key now (exact), when the router asked for it ([`Router::needs_index`]).
    pub held: Holders<'v, 'a>,
    /// Evictions that have not reached the router yet (stale index: delay k > 0 requests, or
    /// `event_delay_ns` > 0).
    pub pending: Option<&'v PendingEvicts<'a>>,
    /// Stores that have not reached the router yet (`event_delay_ns` > 0).
    pub pending_stores: Option<&'v PendingEvicts<'a>>,
    /// llm-d's speculative entries: keys routed to a pod in the last `speculative_ttl_ns`.
    pub speculative: Option<&'v PendingEvicts<'a>>,
    /// Load signals, one per routable pod: the batched engine's own, or, when the router asks
    /// for them ([`Router::needs_loads`]), the FIFO engine's (docs/MODEL.md, "Load signals
    /// under FIFO"); None otherwise.
    pub loads: Option<&'v [PodLoad]>,
    /// The request's arrival, ns.
    pub now_ns: u64,
}

impl RouteView<'_, '_> {
    /// Pods the index believes hold `key`, restricted to `candidates` (pods 0..64).
    #[inline]
    pub fn believed_mask(&self, key: u64, candidates: u64) -> u64 {
        self.believed(key, PodSet::<1>([candidates])).0[0]
    }

    /// Pods the index believes hold `key`, restricted to `candidates`, as a set of `W` words
    /// (`W` at least the fleet's `ceil(pods / 64)`).
    #[inline]
    pub fn believed<const W: usize>(&self, key: u64, candidates: PodSet<W>) -> PodSet<W> {
        let held = match &self.held {
            Holders::None => PodSet::EMPTY,
            Holders::Index(ix) => ix.holders::<W>(key).and(candidates),
            Holders::Exact(pods) => {
                let mut out = PodSet::EMPTY;
                if !pods.holders_into(key, &candidates.0, &mut out.0) {
                    for (w, (o, &c)) in out.0.iter_mut().zip(&candidates.0).enumerate() {
                        if c != 0 {
                            *o = pods.mask(key, w, c);
                        }
                    }
                }
                out
            }
        };
        let mut believed = match self.pending {
            Some(p) if !p.is_empty() => {
                let mut ghosts = PodSet::EMPTY;
                candidates.and_not(held).for_each(|pod| ghosts.set_if(pod, p.contains(key, pod)));
                held.or(ghosts)
            }
            _ => held,
        };
        if let Some(s) = self.pending_stores
            && !s.is_empty()
        {
            believed = self.without_unseen_stores(s, key, held, believed);
        }
        if let Some(s) = self.speculative
            && !s.is_empty()
        {
            candidates.and_not(believed).for_each(|pod| believed.set_if(pod, s.contains(key, pod)));
        }
        believed
    }

    /// With stores delayed too (docs/MODEL.md, "Staleness in time"): a pod that stored `key`
    /// within the delay is believed to hold it only if it also evicted it within the delay (it
    /// held it before: the shortest history); a ghost (evicted within the delay) that was also
    /// stored within it was not held before.
    #[cold]
    fn without_unseen_stores<const W: usize>(
        &self,
        stores: &PendingEvicts<'_>,
        key: u64,
        held: PodSet<W>,
        believed: PodSet<W>,
    ) -> PodSet<W> {
        let evicted = |pod: usize| self.pending.is_some_and(|p| p.contains(key, pod));
        let mut out = believed;
        believed.for_each(|pod| {
            if !stores.contains(key, pod) {
                return;
            }
            let holds_now = held.contains(pod);
            if !holds_now || !evicted(pod) {
                out.remove(pod);
            }
        });
        out
    }

    /// match_p for every pod: the longest leading run of `keys` the index says pod p holds.
    pub fn matches(&self, keys: &[u64], out: &mut [u32]) {
        let n = self.queue_lens.len();
        let quiet = |q: Option<&PendingEvicts<'_>>| q.is_none_or(PendingEvicts::is_empty);
        if let Holders::Exact(h) = &self.held
            && quiet(self.pending)
            && quiet(self.pending_stores)
            && quiet(self.speculative)
        {
            if h.leading_matches(keys, &mut out[..n]) {
                return;
            }
            if h.runs_by_pod() {
                if width_words(n) == 1 {
                    self.runs_by_pod::<1>(*h, keys, n, out);
                } else {
                    self.runs_by_pod::<POD_WORDS>(*h, keys, n, out);
                }
                return;
            }
        }
        out[..n].fill(keys.len() as u32);
        // One word for a fleet of at most 64 pods (the plain-bitmask code), else the widest set.
        const _: () = assert!(POD_WORDS * WORD_PODS == MAX_PODS);
        if width_words(n) == 1 {
            self.matches_in::<1>(keys, n, out);
        } else if let Holders::Index(ix) = &self.held
            && quiet(self.pending)
            && quiet(self.pending_stores)
            && quiet(self.speculative)
        {
            index_matches(ix, keys, n, out);
        } else {
            self.matches_in::<POD_WORDS>(keys, n, out);
        }
    }

    /// [`Self::matches`] pod by pod, with the exact view and nothing in flight: the first key's
    /// holders (every other pod matches 0 keys), then each holder's leading run of the rest.
    /// The walk key by key ([`Self::matches_in`]) asks the same pods the same keys, each key of
    /// all of them before the next; here a pod's keys are asked in one loop.
    fn runs_by_pod<const W: usize>(&self, h: &dyn KeyHolders, keys: &[u64], n: usize, out: &mut [u32]) {
        out[..n].fill(0);
        let Some((&first, rest)) = keys.split_first() else { return };
        self.believed(first, PodSet::<W>::first(n)).for_each(|p| out[p] = 1 + h.leading_run(p, rest));
    }

    fn matches_in<const W: usize>(&self, keys: &[u64], n: usize, out: &mut [u32]) {
        let mut alive = PodSet::<W>::first(n);
        for (j, &key) in keys.iter().enumerate() {
            let b = self.believed(key, alive);
            alive.and_not(b).for_each(|p| out[p] = j as u32);
            alive = b;
            if alive.is_empty() {
                break;
            }
        }
    }
}

/// [`RouteView::matches`] from the global index alone (no event in flight), above 64 pods: the
/// same walk as the generic one, reading only the words of a key's pod set that still hold live
/// pods (the live words shrink as the walk goes on), so that a key costs the cache lines of the
/// live words, not of all ceil(N / 64).
fn index_matches(ix: &BlockIndex<'_>, keys: &[u64], n: usize, out: &mut [u32]) {
    let mut alive = PodSet::<POD_WORDS>::first(n).0;
    let (mut lo, mut hi) = (0, n.div_ceil(WORD_PODS));
    for (j, &key) in keys.iter().enumerate() {
        let slot = ix.slot_of(key);
        let mut any = false;
        for (w, a) in alive.iter_mut().enumerate().take(hi).skip(lo) {
            if *a == 0 {
                continue;
            }
            let b = slot.map_or(0, |s| ix.word(s, w)) & *a;
            for_each(*a & !b, |p| out[w * WORD_PODS + p] = j as u32);
            *a = b;
            any |= b != 0;
        }
        if !any {
            break;
        }
        while alive[lo] == 0 {
            lo += 1;
        }
        while alive[hi - 1] == 0 {
            hi -= 1;
        }
    }
}

/// The router's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Chosen pod.
    pub pod: usize,
    /// Blocks the router believed the pod held (prefix-aware only; 0 otherwise).
    pub believed_match_blocks: u32,
}

/// A routing policy.
pub trait Router {
    /// Whether the fleet must maintain the block index for this router.
    fn needs_index(&self) -> bool;
    /// Picks a pod for the request whose block keys are `keys`. The fleet checks that the pod is
    /// routable (an error, not a panic, otherwise).
    fn route(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route;
    /// Whether [`RouteView::loads`] must be filled under the FIFO engine too.
    fn needs_loads(&self) -> bool {
        false
    }
    /// The fleet accepted the route: router-side state (an approximate index) records it.
    fn routed(&mut self, _pod: usize, _keys: &[u64], _now_ns: u64) -> Result<(), Error> {
        Ok(())
    }
    /// [`Self::routed`], for a router that may keep the routed pod's own cache too (the FIFO
    /// fleet's fused tables, [`ApproxIndex::use_fused`]): then it also serves `pod_keys` (the
    /// request's keys) on that cache, as the pod would, and returns the pod's hit blocks. None
    /// (the default: [`Self::routed`] alone) when it keeps no pod's cache.
    ///
    /// [`ApproxIndex::use_fused`]: crate::fleet::cache::approx::ApproxIndex::use_fused
    fn routed_and_served(
        &mut self,
        pod: usize,
        keys: &[u64],
        _pod_keys: &[u64],
        now_ns: u64,
    ) -> Result<Option<usize>, Error> {
        self.routed(pod, keys, now_ns).map(|()| None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::cache::index::IndexEntry;

    /// match_p over the global index above 64 pods (the live-words walk, and the
    /// generic walk over 16-word sets) against a brute-force leading run per pod.
    #[test]
    fn wide_index_matches_are_leading_runs() {
        for pods in [65, 130, MAX_PODS] {
            let mut entries = [IndexEntry::default(); 64 * POD_WORDS];
            let mut ix = BlockIndex::with_pods(&mut entries[..BlockIndex::table_len_for_pods(40, pods)], pods).unwrap();
            let keys: [u64; 40] = core::array::from_fn(|i| 1000 + i as u64);
            let mut x = pods as u64;
            // Pod p holds a leading run of about (p * 7919) % 41 keys, with holes.
            for p in 0..pods {
                let run = (p * 7919) % 41;
                for (i, &k) in keys.iter().enumerate().take(run) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    if (x >> 60) != 0 || i == 0 {
                        ix.insert(k, p).unwrap();
                    }
                }
            }
            let queue = [0u32; MAX_PODS];
            let view = RouteView {
                request: 0,
                queue_lens: &queue[..pods],
                held: Holders::Index(&ix),
                pending: None,
                pending_stores: None,
                speculative: None,
                loads: None,
                now_ns: 0,
            };
            let mut out = [u32::MAX; MAX_PODS];
            view.matches(&keys, &mut out);
            let mut generic = [u32::MAX; MAX_PODS];
            generic[..pods].fill(keys.len() as u32);
            view.matches_in::<POD_WORDS>(&keys, pods, &mut generic);
            for p in 0..pods {
                let expect = keys.iter().take_while(|&&k| ix.holders::<POD_WORDS>(k).contains(p)).count() as u32;
                assert_eq!((out[p], generic[p]), (expect, expect), "{pods} pods, pod {p}");
            }
            assert!(out[pods..].iter().all(|&m| m == u32::MAX), "pods beyond the fleet untouched");
        }
    }
}
