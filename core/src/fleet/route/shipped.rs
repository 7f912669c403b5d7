//! The shipped routers at run time: a configurable pipeline (filters -> weighted scorers ->
//! picker, as llm-d and the Gateway API Inference Extension build theirs), Dynamo's KV router,
//! SGLang's cache-aware policy and the vLLM load-aware formula. Every formula, its
//! upstream file and version are in docs/MODEL.md ("Shipped routers"); allocation-free, and the
//! only randomness is a SplitMix64 seeded from [`RouterParams::seed`].

use super::policies::{dynamo_logits, dynamo_pick, sglang_pick, vllm_pick};
use super::rng::{SplitMix64, pick_uniform};
use super::scorers::{Fused, Inputs, PodLru, affinity_filter, max_set, no_hit_lru, score};
use super::spec::MAX_SCORERS;
use super::spec::{FilterKind, PickerKind, Policy, PrefixSource, RouterBuffers, RouterSpec, ScorerKind};
use super::{Route, RouteView, Router};
use crate::fleet::base::error::{Buffer, Error};
use crate::fleet::base::limits::MAX_PODS;
use crate::fleet::base::load::PodLoad;
use crate::fleet::base::mask::{POD_WORDS, PodSet, width_words};
use crate::fleet::cache::approx::ApproxIndex;
use crate::fleet::cache::fused::FusedSlot;
use crate::fleet::cache::runs::Run;

/// What a pipeline computed before its pick ([`ShippedRouter::evaluate`]), for a fleet of up
/// to `P` = 64 `W` pods (the defaults: [`MAX_PODS`]).
#[derive(Clone, Copy, Debug)]
pub struct Evaluation<const W: usize = POD_WORDS, const P: usize = MAX_PODS> {
    /// The pods left by the filters.
    pub candidates: PodSet<W>,
    /// sum_i w_i clamp(s_i(p), 0, 1) for each candidate p (0 for the others).
    pub totals: [f64; P],
    /// The match (blocks) each pod has in the filter's / no-hit-lru's prefix source.
    pub matches: [u32; P],
    /// No candidate had a match (no-hit-lru's cold request), when no-hit-lru is in the pipeline.
    pub cold: bool,
}

/// A shipped router at run time: its spec, approximate index, RNG and no-hit LRU.
#[derive(Debug)]
pub struct ShippedRouter<'a> {
    spec: RouterSpec,
    approx: Option<ApproxIndex<'a>>,
    rng: SplitMix64,
    no_hit: PodLru,
    last_cold: bool,
}

impl<'a> ShippedRouter<'a> {
    /// The router of `spec` over `pods` pods; `buffers` as [`RouterSpec::layout`] says.
    pub fn new(spec: RouterSpec, pods: usize, buffers: RouterBuffers<'a>) -> Result<Self, Error> {
        spec.validate()?;
        let approx = if spec.needs_approx() {
            Some(ApproxIndex::new(pods, buffers.slots, buffers.tables, buffers.index)?)
        } else {
            None
        };
        Ok(ShippedRouter {
            spec,
            approx,
            // The seed is mixed once so that seed 0 does not start at SplitMix64's zero state.
            rng: SplitMix64::new(spec.params.seed ^ 0x005e_ed0f_b07e_5a11),
            no_hit: PodLru::new(spec.params.no_hit_lru_size),
            last_cold: false,
        })
    }

    /// Its spec.
    pub fn spec(&self) -> &RouterSpec {
        &self.spec
    }

    /// The approximate index (None when the router keeps none).
    pub fn approx(&self) -> Option<&ApproxIndex<'a>> {
        self.approx.as_ref()
    }

    /// Whether the fleet must keep the exact index.
    pub fn needs_index(&self) -> bool {
        self.spec.needs_index()
    }

    /// Keeps the approximate index as runs of trace ids of `group` blocks
    /// ([`ApproxIndex::use_runs`]: the same answers), before the first request; `runs` and
    /// `tables` as [`ApproxIndex::runs_layout`] says. A router without one takes no buffers
    /// (both empty) and is unchanged.
    pub fn use_runs(&mut self, group: usize, runs: &'a mut [Run], tables: &'a mut [u32]) -> Result<(), Error> {
        match self.approx.as_mut() {
            Some(a) => a.use_runs(group, runs, tables),
            None if runs.is_empty() && tables.is_empty() => Ok(()),
            None => Err(Error::BufferSize { buffer: Buffer::Runs, expected: 0, got: runs.len() + tables.len() }),
        }
    }

    /// Keeps the approximate index and the pods' own caches of `pod_blocks` blocks in one table
    /// per pod ([`ApproxIndex::use_fused`]: the same answers; the routed pod's cache is then
    /// served by [`Router::routed_and_served`]), before the first request. False, nothing done,
    /// for a router without an approximate index or one that sees a truncated prompt
    /// (`approx_max_blocks`) or keeps LRUs of another size than the pods (`approx_lru_blocks`);
    /// `slots` and `tables` as [`ApproxIndex::fused_layout`] says.
    pub fn use_fused(
        &mut self,
        pod_blocks: usize,
        tail_first: bool,
        slots: &'a mut [FusedSlot],
        tables: &'a mut [u32],
    ) -> Result<bool, Error> {
        let p = &self.spec.params;
        match self.approx.as_mut() {
            Some(a) if p.approx_max_blocks == 0 && p.approx_lru_blocks == 0 => {
                a.use_fused(pod_blocks, tail_first, slots, tables).map(|()| true)
            }
            _ => Ok(false),
        }
    }

    /// Load signals are read by every policy but a pure-prefix pipeline; asking is cheap.
    pub fn needs_loads(&self) -> bool {
        true
    }

    fn loads<const P: usize>(view: &RouteView<'_, '_>, out: &mut [PodLoad; P]) {
        match view.loads {
            Some(l) => out[..l.len()].copy_from_slice(l),
            // A fleet that gives no loads: the queue length is all there is.
            None => {
                for (o, &q) in out.iter_mut().zip(view.queue_lens) {
                    *o = PodLoad { waiting: q, ..PodLoad::default() };
                }
            }
        }
    }

    /// The leading keys the approximate index sees: at most `approx_max_blocks` (GIE's
    /// `maxPrefixBlocksToMatch`: the prompt is truncated before hashing), all when 0.
    fn approx_keys<'k>(&self, keys: &'k [u64]) -> &'k [u64] {
        approx_prefix(self.spec.params.approx_max_blocks, keys)
    }

    fn approx_greedy<const W: usize, const P: usize>(&self, keys: &[u64], cand: PodSet<W>, out: &mut [u32; P]) {
        if let Some(a) = &self.approx {
            a.greedy_matches(keys, cand, out);
        }
    }

    fn approx_leading<const W: usize, const P: usize>(&self, keys: &[u64], cand: PodSet<W>, out: &mut [u32; P]) {
        if let Some(a) = &self.approx {
            a.leading_matches(keys, cand, out);
        }
    }

    /// The pipeline's work before the pick: the candidates left by the filters and each one's
    /// total score (docs/MODEL.md, "Pipeline"). Changes no state; public so that tests and
    /// users can see why a pod was chosen.
    pub fn evaluate(&self, view: &RouteView<'_, '_>, keys: &[u64]) -> Evaluation {
        self.evaluate_in::<POD_WORDS, MAX_PODS>(view, keys)
    }

    /// [`Self::evaluate`] over sets of `W` words (at least the fleet's `ceil(pods / 64)`).
    fn evaluate_in<const W: usize, const P: usize>(&self, view: &RouteView<'_, '_>, keys: &[u64]) -> Evaluation<W, P> {
        let n = view.queue_lens.len();
        let mut cand = PodSet::<W>::first(n);
        let mut loads = [PodLoad::default(); P];
        Self::loads(view, &mut loads);
        let spec = &self.spec;
        let mut exact = [0u32; P];
        if spec.needs_index() {
            view.matches(keys, &mut exact);
        }
        let mut approx = [0u32; P];
        let akeys = self.approx_keys(keys);
        self.approx_greedy(akeys, cand, &mut approx);
        // A match is a share of the keys its index saw (GIE: matchLen / len(hashes) after the
        // truncation).
        let (total, approx_total) = (keys.len() as u32, akeys.len() as u32);
        let (info, info_total) = match spec.prefix_source() {
            PrefixSource::Precise => (exact, total),
            _ => (approx, approx_total),
        };
        for f in spec.filters.iter().flatten() {
            match f {
                FilterKind::PrefixCacheAffinity => {
                    let inp = Inputs { candidates: cand, total: info_total, matches: &info, loads: &loads };
                    cand = affinity_filter(&inp, &spec.params);
                }
            }
        }
        let mut totals = [0.0f64; P];
        let mut cold = false;
        for w in spec.scorers.iter().flatten() {
            let mut s = [0.0f64; P];
            let (m, total) = match w.kind {
                ScorerKind::PrefixCache => (&approx, approx_total),
                ScorerKind::NoHitLru => (&info, info_total),
                _ => (&exact, total),
            };
            let inp = Inputs { candidates: cand, total, matches: m, loads: &loads };
            match w.kind {
                ScorerKind::NoHitLru => cold = no_hit_lru(&inp, &self.no_hit, &mut s),
                k => score(k, &inp, &spec.params, &mut s),
            }
            cand.for_each(|p| totals[p] += w.weight * s[p].clamp(0.0, 1.0));
        }
        Evaluation { candidates: cand, totals, matches: info, cold }
    }

    fn route_pipeline<const W: usize, const P: usize>(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        let e = self.evaluate_in::<W, P>(view, keys);
        self.last_cold = e.cold;
        let pod = match self.spec.picker {
            PickerKind::Random => pick_uniform(&mut self.rng, e.candidates),
            PickerKind::MaxScore => pick_uniform(&mut self.rng, max_set(e.candidates, &e.totals)),
            PickerKind::MaxScoreLowestIndex => max_set(e.candidates, &e.totals).lowest(),
        };
        Route { pod, believed_match_blocks: e.matches[pod] }
    }

    /// Whether [`Self::route_fused`] picks for this pipeline: no filter and no no-hit-lru (their
    /// passes need every candidate's match and rank before any score), and a load signal for
    /// every pod.
    fn fusable(&self, view: &RouteView<'_, '_>) -> bool {
        let spec = &self.spec;
        spec.filters.iter().all(Option::is_none)
            && !spec.scorers.iter().flatten().any(|w| w.kind == ScorerKind::NoHitLru)
            && view.loads.is_some_and(|l| l.len() >= view.queue_lens.len())
    }

    /// [`Self::route_pipeline`] for a pipeline without a filter or no-hit-lru ([`Self::fusable`]),
    /// the scorers fused: the candidates are pods `0..n` (no filter), so each scorer's
    /// fleet-wide figures (the min and max it divides by) are taken once and its term is added
    /// straight into the pods' totals, scorer by scorer in the pipeline's order with the same
    /// operations (every total bit-identical to [`Self::evaluate`]'s), with no per-scorer
    /// array, no copy of the load signals (read in place) and no [`Evaluation`]; then one pass
    /// keeps the set of the highest totals ([`max_set`]'s order and comparisons). `note` is
    /// given each candidate's total (the property tests compare them with [`Self::evaluate`]'s).
    fn route_fused<const W: usize, const P: usize>(
        &mut self,
        view: &RouteView<'_, '_>,
        keys: &[u64],
        mut note: impl FnMut(usize, f64),
    ) -> Route {
        static ZEROS: [u32; MAX_PODS] = [0; MAX_PODS];
        let n = view.queue_lens.len();
        let cand = PodSet::<W>::first(n);
        let loads = view.loads.unwrap_or(&[]);
        let spec = &self.spec;
        // The exact matches when the reference asks for them (the same calls into the view),
        // the approximate ones when the router keeps that index; zeros otherwise.
        let mut exact_buf;
        let exact: &[u32] = if spec.needs_index() {
            exact_buf = [0u32; P];
            view.matches(keys, &mut exact_buf);
            &exact_buf
        } else {
            &ZEROS
        };
        let akeys = self.approx_keys(keys);
        let mut approx_buf;
        let approx: &[u32] = match &self.approx {
            Some(a) => {
                approx_buf = [0u32; P];
                a.greedy_matches(akeys, cand, &mut approx_buf);
                &approx_buf
            }
            None => &ZEROS,
        };
        let (total, approx_total) = (keys.len() as u32, akeys.len() as u32);
        let info = match spec.prefix_source() {
            PrefixSource::Precise => exact,
            _ => approx,
        };
        self.last_cold = false;
        let pod = match spec.picker {
            PickerKind::Random => pick_uniform(&mut self.rng, cand),
            picker => {
                let mut fused = [None; MAX_SCORERS];
                let mut k = 0;
                if !cand.is_empty() {
                    for w in spec.scorers.iter().flatten() {
                        let (m, t) =
                            if w.kind == ScorerKind::PrefixCache { (approx, approx_total) } else { (exact, total) };
                        fused[k] = Some(Fused::new(w.kind, w.weight, cand, t, m, loads));
                        k += 1;
                    }
                }
                let prm = &spec.params;
                let mut totals = [0.0f64; P];
                let totals = &mut totals[..n];
                for f in fused[..k].iter().flatten() {
                    f.add_terms(totals, if f.approx { approx } else { exact }, loads, prm);
                }
                let mut best = f64::NEG_INFINITY;
                let mut set = PodSet::<W>::EMPTY;
                for (p, &t) in totals.iter().enumerate() {
                    note(p, t);
                    if t > best {
                        best = t;
                        set = PodSet::single(p);
                    } else if t == best {
                        set.insert(p);
                    }
                }
                match picker {
                    PickerKind::MaxScoreLowestIndex => set.lowest(),
                    _ => pick_uniform(&mut self.rng, set),
                }
            }
        };
        Route { pod, believed_match_blocks: info[pod] }
    }

    fn route_dynamo<const W: usize, const P: usize>(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        let n = view.queue_lens.len();
        let cand = PodSet::<W>::first(n);
        let mut loads = [PodLoad::default(); P];
        Self::loads(view, &mut loads);
        let mut overlap = [0u32; P];
        view.matches(keys, &mut overlap);
        let mut logits = [0.0f64; P];
        dynamo_logits(cand, keys.len() as u32, &overlap, &loads, self.spec.params.overlap_score_weight, &mut logits);
        let pod = dynamo_pick(&mut self.rng, cand, &logits, self.spec.params.router_temperature);
        Route { pod, believed_match_blocks: overlap[pod] }
    }

    fn route_sglang<const W: usize, const P: usize>(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        let cand = PodSet::<W>::first(view.queue_lens.len());
        let mut loads = [PodLoad::default(); P];
        Self::loads(view, &mut loads);
        let mut m = [0u32; P];
        let akeys = self.approx_keys(keys);
        self.approx_leading(akeys, cand, &mut m);
        let approx = self.approx.as_ref();
        let held = |p: usize| approx.map_or(0, |a| a.held_blocks(p));
        let pod = sglang_pick(&mut self.rng, cand, akeys.len() as u32, &m, &loads, &self.spec.params, held);
        Route { pod, believed_match_blocks: m[pod] }
    }

    fn route_vllm<const W: usize, const P: usize>(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        let cand = PodSet::<W>::first(view.queue_lens.len());
        let mut loads = [PodLoad::default(); P];
        Self::loads(view, &mut loads);
        let mut m = [0u32; P];
        let akeys = self.approx_keys(keys);
        self.approx_leading(akeys, cand, &mut m);
        let pod = vllm_pick(cand, akeys.len() as u32, &m, &loads, self.spec.params.vllm_beta);
        Route { pod, believed_match_blocks: m[pod] }
    }
}

impl ShippedRouter<'_> {
    fn route_in<const W: usize, const P: usize>(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        match self.spec.policy {
            Policy::Pipeline if self.fusable(view) => self.route_fused::<W, P>(view, keys, |_, _| {}),
            Policy::Pipeline => self.route_pipeline::<W, P>(view, keys),
            Policy::DynamoKv => self.route_dynamo::<W, P>(view, keys),
            Policy::SglangCacheAware => self.route_sglang::<W, P>(view, keys),
            Policy::VllmLoadaware => self.route_vllm::<W, P>(view, keys),
        }
    }
}

/// The reference paths, for the property tests (feature `harness`).
#[cfg(feature = "harness")]
impl ShippedRouter<'_> {
    /// [`Router::route`] by the reference path: every pipeline through [`Self::evaluate`]'s
    /// per-scorer passes (the fused pass never taken).
    pub fn route_reference(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        let wide = width_words(view.queue_lens.len()) != 1;
        match self.spec.policy {
            Policy::Pipeline if wide => self.route_pipeline::<POD_WORDS, MAX_PODS>(view, keys),
            Policy::Pipeline => self.route_pipeline::<1, 64>(view, keys),
            _ => self.route(view, keys),
        }
    }

    /// [`Router::route`] by the fused pass when it applies (else None, nothing done), `note`
    /// given each candidate's total (not called with the random picker, which reads none).
    pub fn route_fused_noting(
        &mut self,
        view: &RouteView<'_, '_>,
        keys: &[u64],
        note: &mut dyn FnMut(usize, f64),
    ) -> Option<Route> {
        if self.spec.policy != Policy::Pipeline || !self.fusable(view) {
            return None;
        }
        Some(if width_words(view.queue_lens.len()) == 1 {
            self.route_fused::<1, 64>(view, keys, note)
        } else {
            self.route_fused::<POD_WORDS, MAX_PODS>(view, keys, note)
        })
    }
}

impl Router for ShippedRouter<'_> {
    fn needs_index(&self) -> bool {
        self.spec.needs_index()
    }
    fn needs_loads(&self) -> bool {
        true
    }
    fn route(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        // A fleet of at most 64 pods is routed with one-word sets and 64-entry scratch (the
        // plain-bitmask code and speed); a larger one with the widest.
        if width_words(view.queue_lens.len()) == 1 {
            self.route_in::<1, 64>(view, keys)
        } else {
            self.route_in::<POD_WORDS, MAX_PODS>(view, keys)
        }
    }
    fn routed(&mut self, pod: usize, keys: &[u64], _now_ns: u64) -> Result<(), Error> {
        if self.last_cold {
            self.no_hit.add(pod);
            self.last_cold = false;
        }
        let keys = approx_prefix(self.spec.params.approx_max_blocks, keys);
        match self.approx.as_mut() {
            Some(a) => a.record(pod, keys),
            None => Ok(()),
        }
    }
    fn routed_and_served(
        &mut self,
        pod: usize,
        keys: &[u64],
        pod_keys: &[u64],
        now_ns: u64,
    ) -> Result<Option<usize>, Error> {
        match self.approx.as_mut() {
            Some(a) if a.is_fused() => {
                if self.last_cold {
                    self.no_hit.add(pod);
                    self.last_cold = false;
                }
                let keys = approx_prefix(self.spec.params.approx_max_blocks, keys);
                a.record_and_serve(pod, keys, pod_keys)
            }
            _ => self.routed(pod, keys, now_ns).map(|()| None),
        }
    }
}

/// The first `max` keys of `keys` (all when `max` is 0 or at least their number).
fn approx_prefix(max: u64, keys: &[u64]) -> &[u64] {
    match usize::try_from(max) {
        Ok(n) if n > 0 && n < keys.len() => &keys[..n],
        _ => keys,
    }
}
