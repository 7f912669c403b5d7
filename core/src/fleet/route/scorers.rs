//! The pipeline's scorers and its filter (docs/MODEL.md, "Pipeline"), and the set helpers the
//! policies share: s(p) in [0, 1] per candidate, from its match and its load signals.

use super::spec::{RouterParams, ScorerKind};
use crate::fleet::base::limits::MAX_PODS;
use crate::fleet::base::load::PodLoad;
use crate::fleet::base::mask::PodSet;

/// LRU of pod ids (no-hit-lru), oldest first.
#[derive(Clone, Copy, Debug)]
pub(super) struct PodLru {
    pub(super) order: [u16; MAX_PODS],
    pub(super) len: usize,
    cap: usize,
}

impl PodLru {
    pub(super) fn new(size: u32) -> Self {
        PodLru { order: [0; MAX_PODS], len: 0, cap: (size as usize).min(MAX_PODS) }
    }
    pub(super) fn position(&self, pod: usize) -> Option<usize> {
        self.order[..self.len].iter().position(|&p| p as usize == pod)
    }
    /// Makes `pod` the most recent (golang-lru `Add`), dropping the oldest when full.
    pub(super) fn add(&mut self, pod: usize) {
        if let Some(i) = self.position(pod) {
            self.order.copy_within(i + 1..self.len, i);
            self.len -= 1;
        } else if self.len == self.cap {
            self.order.copy_within(1..self.len, 0);
            self.len -= 1;
        }
        self.order[self.len] = pod as u16;
        self.len += 1;
    }
}

/// Per-pod inputs of one decision (`W` words of pods, `P` = 64 W per-pod entries).
pub(super) struct Inputs<'x, const W: usize, const P: usize> {
    pub(super) candidates: PodSet<W>,
    pub(super) total: u32,
    pub(super) matches: &'x [u32; P],
    pub(super) loads: &'x [PodLoad; P],
}

/// The pods of `cand` with the highest total (exact float equality is a tie).
pub(super) fn max_set<const W: usize, const P: usize>(cand: PodSet<W>, totals: &[f64; P]) -> PodSet<W> {
    let mut best = f64::NEG_INFINITY;
    let mut set = PodSet::EMPTY;
    cand.for_each(|p| {
        if totals[p] > best {
            best = totals[p];
            set = PodSet::single(p);
        } else if totals[p] == best {
            set.insert(p);
        }
    });
    set
}

/// min and max of `f(p)` over the pods of `cand` (non-empty).
pub(super) fn min_max<T: Copy + PartialOrd, const W: usize>(cand: PodSet<W>, f: impl Fn(usize) -> T) -> (T, T) {
    let first = f(cand.lowest());
    let (mut lo, mut hi) = (first, first);
    cand.for_each(|p| {
        let v = f(p);
        if v < lo {
            lo = v;
        }
        if v > hi {
            hi = v;
        }
    });
    (lo, hi)
}

/// One scorer's s(p) for every candidate (no-hit-lru aside).
/// The scorers' per-pod formulas, one home each: [`score`] (per scorer, over the candidates) and
/// [`Fused::add_terms`] (the fused pass) both call them, so their totals are the same bits.
mod term {
    use crate::fleet::base::load::PodLoad;

    /// prefix-cache, precise-prefix-cache: the share of the request's keys matched.
    #[inline(always)]
    pub(super) fn share(m: u32, total: u32) -> f64 {
        let ratio = if total == 0 { 0.0 } else { m as f64 / total as f64 };
        ratio.min(1.0)
    }

    /// Min-max normalised upwards (1 when every value is the same).
    #[inline(always)]
    pub(super) fn span_up(v: u64, lo: u64, hi: u64) -> f64 {
        if hi == lo { 1.0 } else { (v - lo) as f64 / (hi - lo) as f64 }
    }

    /// Min-max normalised downwards, the queue scorer (1 when every value is the same).
    #[inline(always)]
    pub(super) fn span_down(v: u64, lo: u64, hi: u64) -> f64 {
        if hi == lo { 1.0 } else { (hi - v) as f64 / (hi - lo) as f64 }
    }

    /// kv-cache-utilization: the free share of the pod's KV blocks.
    #[inline(always)]
    pub(super) fn kv_free(l: &PodLoad) -> f64 {
        let used = if l.kv_capacity_blocks == 0 { 0.0 } else { l.kv_used_blocks as f64 / l.kv_capacity_blocks as f64 };
        1.0 - used
    }

    /// token-load against its threshold `q`.
    #[inline(always)]
    pub(super) fn token_free(l: &PodLoad, q: u64) -> f64 {
        let t = l.pending_prefill_tokens;
        if t == 0 { 1.0 } else { 1.0 - t.min(q) as f64 / q as f64 }
    }

    /// active-requests' count: waiting plus running.
    #[inline(always)]
    pub(super) fn active(l: &PodLoad) -> u64 {
        l.waiting as u64 + l.running as u64
    }

    /// active-requests against the candidates' highest count `hi`.
    #[inline(always)]
    pub(super) fn active_free(c: u64, hi: u64) -> f64 {
        if c == 0 { 1.0 } else { (hi - c) as f64 / hi as f64 }
    }

    /// load-aware against its threshold `t`.
    #[inline(always)]
    pub(super) fn load_aware(l: &PodLoad, t: u32) -> f64 {
        let q = l.waiting;
        if q == 0 { 0.5 } else { 0.5 * (1.0 - q.min(t) as f64 / t as f64) }
    }
}

pub(super) fn score<const W: usize, const P: usize>(
    kind: ScorerKind,
    inp: &Inputs<'_, W, P>,
    prm: &RouterParams,
    s: &mut [f64; P],
) {
    let cand = inp.candidates;
    if cand.is_empty() {
        return;
    }
    match kind {
        ScorerKind::PrefixCache | ScorerKind::PrecisePrefixCache => {
            cand.for_each(|p| s[p] = term::share(inp.matches[p], inp.total))
        }
        ScorerKind::PrecisePrefixCacheMinMax => {
            let holders = cand.filter(|p| inp.matches[p] > 0);
            if holders.is_empty() {
                return;
            }
            let (lo, hi) = min_max(holders, |p| inp.matches[p]);
            holders.for_each(|p| s[p] = term::span_up(inp.matches[p].into(), lo.into(), hi.into()));
        }
        ScorerKind::Queue => {
            let (lo, hi) = min_max(cand, |p| inp.loads[p].waiting);
            cand.for_each(|p| s[p] = term::span_down(inp.loads[p].waiting.into(), lo.into(), hi.into()));
        }
        ScorerKind::KvCacheUtilization => cand.for_each(|p| s[p] = term::kv_free(&inp.loads[p])),
        ScorerKind::TokenLoad => cand.for_each(|p| s[p] = term::token_free(&inp.loads[p], prm.token_load_threshold)),
        ScorerKind::ActiveRequests => {
            let (_, hi) = min_max(cand, |p| term::active(&inp.loads[p]));
            cand.for_each(|p| s[p] = term::active_free(term::active(&inp.loads[p]), hi));
        }
        ScorerKind::LoadAware => cand.for_each(|p| s[p] = term::load_aware(&inp.loads[p], prm.load_aware_threshold)),
        ScorerKind::NoHitLru => {}
    }
}

/// no-hit-lru: returns whether the request is cold (then the chosen pod moves to the LRU's
/// most recent end once routed).
pub(super) fn no_hit_lru<const W: usize, const P: usize>(
    inp: &Inputs<'_, W, P>,
    lru: &PodLru,
    s: &mut [f64; P],
) -> bool {
    let cand = inp.candidates;
    if cand.is_empty() {
        return false;
    }
    if !cand.filter(|p| inp.matches[p] > 0).is_empty() {
        cand.for_each(|p| s[p] = 0.5);
        return false;
    }
    let n = u64::from(cand.count());
    if n == 1 {
        cand.for_each(|p| s[p] = 1.0);
        return true;
    }
    let denom = (n - 1) as f64;
    let mut rank = 0u64;
    // Never-used pods first, in pod order; then the used ones, least recent first.
    cand.for_each(|p| {
        if lru.position(p).is_none() {
            s[p] = 1.0 - rank as f64 / denom;
            rank += 1;
        }
    });
    // A used pod's rank is #never-used + its position in the whole LRU (llm-d counts pods that
    // are not candidates too).
    let never = rank;
    for (pos, &p) in lru.order[..lru.len].iter().enumerate() {
        let p = p as usize;
        if cand.contains(p) {
            s[p] = (1.0 - (never + pos as u64) as f64 / denom).max(0.0);
        }
    }
    true
}

/// The prefix-cache-affinity filter: the candidates it keeps.
pub(super) fn affinity_filter<const W: usize, const P: usize>(inp: &Inputs<'_, W, P>, prm: &RouterParams) -> PodSet<W> {
    let cand = inp.candidates;
    if cand.count() <= 1 || prm.affinity_threshold <= 0.0 {
        return cand;
    }
    let ratio = |p: usize| if inp.total == 0 { 0.0 } else { inp.matches[p] as f64 / inp.total as f64 };
    let sticky = cand.filter(|p| ratio(p) >= prm.affinity_threshold);
    let others = cand.and_not(sticky);
    if sticky.is_empty() {
        return cand;
    }
    if prm.max_ttft_penalty_ms > 0.0 && !others.is_empty() {
        let ttft = |p: usize| inp.loads[p].pending_prefill_tokens as f64 / prm.peak_prefill_tokens_per_s * 1000.0;
        let (best_sticky, _) = min_max(sticky, ttft);
        let (best_other, _) = min_max(others, ttft);
        if best_sticky - best_other > prm.max_ttft_penalty_ms {
            return cand;
        }
    }
    sticky
}

/// Lowest-index pod with the smallest `f`.
pub(super) fn first_min<const W: usize>(cand: PodSet<W>, f: impl Fn(usize) -> u64) -> usize {
    let (lo, _) = min_max(cand, &f);
    cand.filter(|p| f(p) == lo).lowest()
}

/// Lowest-index pod with the largest `f`.
pub(super) fn first_max<const W: usize>(cand: PodSet<W>, f: impl Fn(usize) -> u32) -> usize {
    let (_, hi) = min_max(cand, &f);
    cand.filter(|p| f(p) == hi).lowest()
}

/// One weighted scorer of the fused pass (`ShippedRouter`'s pipeline without a filter or
/// no-hit-lru): what [`score`] needs of the whole candidate set (the min and max it divides by),
/// taken once, then its term added to every pod's total ([`Self::add_terms`]) in the pipeline's
/// order, with the same operations as [`score`] and the weighted sum (so the same bits).
#[derive(Clone, Copy, Debug)]
pub(super) struct Fused {
    kind: ScorerKind,
    weight: f64,
    /// Reads the approximate index's matches (prefix-cache), else the exact ones.
    pub(super) approx: bool,
    /// The keys its matches are a share of.
    total: u32,
    lo: u64,
    hi: u64,
}

/// Widest span (hi - lo + 1) of the queue scorer's values whose terms [`Fused::add_terms`]
/// computes once per value instead of once per pod.
const SPAN_TABLE: usize = 64;

impl Fused {
    /// `kind` of weight `weight` over the candidates `cand` = pods `0..n` (n >= 1), its matches
    /// `m` out of `total` keys.
    pub(super) fn new<const W: usize>(
        kind: ScorerKind,
        weight: f64,
        cand: PodSet<W>,
        total: u32,
        m: &[u32],
        loads: &[PodLoad],
    ) -> Self {
        let n = cand.count() as usize;
        debug_assert!(cand == PodSet::first(n), "the fused pass has no filter");
        let (lo, hi) = match kind {
            ScorerKind::PrecisePrefixCacheMinMax => {
                let holders = cand.filter(|p| m[p] > 0);
                if holders.is_empty() {
                    (0, 0)
                } else {
                    let (lo, hi) = min_max(holders, |p| m[p]);
                    (u64::from(lo), u64::from(hi))
                }
            }
            // The candidates are pods 0..n: a plain pass over their signals (min and max do not
            // depend on the order).
            ScorerKind::Queue => loads[..n]
                .iter()
                .fold((u64::MAX, 0), |(lo, hi), l| (lo.min(u64::from(l.waiting)), hi.max(u64::from(l.waiting)))),
            ScorerKind::ActiveRequests => (0, loads[..n].iter().map(term::active).max().unwrap_or(0)),
            _ => (0, 0),
        };
        Fused { kind, weight, approx: kind == ScorerKind::PrefixCache, total, lo, hi }
    }

    /// Adds w clamp(s(p), 0, 1) to `totals[p]` for every pod p of `totals` (the candidates
    /// are pods `0..totals.len()`: the fused pass has no filter), with [`score`]'s s(p) (`m`:
    /// this scorer's matches) and the weighted sum's operations. One loop per kind, the pods in
    /// order, so that the kind is settled once per decision and not per pod.
    pub(super) fn add_terms(&self, totals: &mut [f64], m: &[u32], loads: &[PodLoad], prm: &RouterParams) {
        let n = totals.len();
        let (m, loads) = (&m[..n], &loads[..n]);
        let (w, lo, hi) = (self.weight, self.lo, self.hi);
        #[inline(always)]
        fn add(totals: &mut [f64], w: f64, s: impl Fn(usize) -> f64) {
            for (p, t) in totals.iter_mut().enumerate() {
                *t += w * s(p).clamp(0.0, 1.0);
            }
        }
        match self.kind {
            // A pod without a match: share(0, total) is +0.0 whatever the total (no division).
            ScorerKind::PrefixCache | ScorerKind::PrecisePrefixCache => add(totals, w, |p| match m[p] {
                0 => 0.0,
                v => term::share(v, self.total),
            }),
            // A pod without a match keeps the 0 it had (it is not a holder).
            ScorerKind::PrecisePrefixCacheMinMax => add(totals, w, |p| match u64::from(m[p]) {
                0 => 0.0,
                v => term::span_up(v, lo, hi),
            }),
            // A narrow span: span_down of each of its values computed once (the same division,
            // so the same bits), then read per pod.
            ScorerKind::Queue if hi > lo && hi - lo < SPAN_TABLE as u64 => {
                let mut tab = [0.0f64; SPAN_TABLE];
                for (d, x) in tab.iter_mut().enumerate().take((hi - lo) as usize + 1) {
                    *x = term::span_down(hi - d as u64, lo, hi);
                }
                add(totals, w, |p| tab[(hi - u64::from(loads[p].waiting)) as usize])
            }
            ScorerKind::Queue => add(totals, w, |p| term::span_down(u64::from(loads[p].waiting), lo, hi)),
            ScorerKind::KvCacheUtilization => add(totals, w, |p| term::kv_free(&loads[p])),
            ScorerKind::TokenLoad => add(totals, w, |p| term::token_free(&loads[p], prm.token_load_threshold)),
            ScorerKind::ActiveRequests => add(totals, w, |p| term::active_free(term::active(&loads[p]), hi)),
            ScorerKind::LoadAware => add(totals, w, |p| term::load_aware(&loads[p], prm.load_aware_threshold)),
            // Never fused (its ranks need the whole candidate set).
            ScorerKind::NoHitLru => add(totals, w, |_| 0.0),
        }
    }
}
