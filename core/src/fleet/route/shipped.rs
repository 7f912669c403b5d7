//! The shipped routers (issue 13): a configurable pipeline (filters -> weighted scorers ->
//! picker, as llm-d and the Gateway API Inference Extension build theirs), Dynamo's KV router,
//! SGLang's cache-aware policy and the vLLM load-aware formula. Every formula, its
//! upstream file and version are in docs/MODEL.md ("Shipped routers"); allocation-free, and the
//! only randomness is a SplitMix64 seeded from [`RouterParams::seed`].

use super::Error;
use super::approx::{ApproxIndex, PROBE_MAX_PODS, for_each};
use super::engine::PodLoad;
use super::fixmath::exp2_neg_q32;
use super::index::IndexEntry;
use super::limits::{BLOCK_TOKENS, MAX_PODS};
use super::pod::{LruPod, Slot};
use super::router::{Route, RouteView, Router, RouterKind, pods_mask};

/// Most scorers in one pipeline.
pub const MAX_SCORERS: usize = 8;
/// Most filters in one pipeline.
pub const MAX_FILTERS: usize = 2;

/// A scorer: s(pod) in [0, 1] (clamped by the pipeline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum ScorerKind {
    /// Approximate prefix cache: llm-d's greedy match over the router-side LRUs / total blocks.
    PrefixCache,
    /// Precise prefix cache (exact index), absolute form min(1, matched / total).
    PrecisePrefixCache,
    /// Precise prefix cache, the older min-max form over the pods holding a prefix.
    PrecisePrefixCacheMinMax,
    /// (q_max - q) / (q_max - q_min) over waiting queues; all equal -> 1.
    Queue,
    /// 1 - KV blocks in use / KV capacity.
    KvCacheUtilization,
    /// llm-d's rule for cold requests.
    NoHitLru,
    /// 1 - min(1, in-flight uncached prompt tokens / threshold).
    TokenLoad,
    /// (c_max - c) / c_max over in-flight requests; idle -> 1.
    ActiveRequests,
    /// 0.5 at an empty queue, else 0.5 (1 - min(q, T) / T).
    LoadAware,
}

impl ScorerKind {
    /// Every scorer, in docs order.
    pub const ALL: [ScorerKind; 9] = [
        ScorerKind::PrefixCache,
        ScorerKind::PrecisePrefixCache,
        ScorerKind::PrecisePrefixCacheMinMax,
        ScorerKind::Queue,
        ScorerKind::KvCacheUtilization,
        ScorerKind::NoHitLru,
        ScorerKind::TokenLoad,
        ScorerKind::ActiveRequests,
        ScorerKind::LoadAware,
    ];

    /// The config name (llm-d's plugin type, minus `-scorer`).
    pub const fn name(self) -> &'static str {
        match self {
            ScorerKind::PrefixCache => "prefix-cache",
            ScorerKind::PrecisePrefixCache => "precise-prefix-cache",
            ScorerKind::PrecisePrefixCacheMinMax => "precise-prefix-cache-min-max",
            ScorerKind::Queue => "queue",
            ScorerKind::KvCacheUtilization => "kv-cache-utilization",
            ScorerKind::NoHitLru => "no-hit-lru",
            ScorerKind::TokenLoad => "token-load",
            ScorerKind::ActiveRequests => "active-requests",
            ScorerKind::LoadAware => "load-aware",
        }
    }

    /// Parses a config name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// A filter: narrows the candidate pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum FilterKind {
    /// llm-d's prefix-cache-affinity-filter.
    PrefixCacheAffinity,
}

impl FilterKind {
    /// The config name.
    pub const fn name(self) -> &'static str {
        match self {
            FilterKind::PrefixCacheAffinity => "prefix-cache-affinity",
        }
    }

    /// Parses a config name.
    pub fn parse(s: &str) -> Option<Self> {
        [FilterKind::PrefixCacheAffinity].into_iter().find(|k| k.name() == s)
    }
}

/// How the pipeline picks among scored pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum PickerKind {
    /// GIE's max-score picker: the highest total; exact ties picked uniformly (seeded).
    MaxScore,
    /// The highest total; ties to the lowest pod index.
    MaxScoreLowestIndex,
    /// A uniform pick among the candidates (seeded), scores ignored.
    Random,
}

impl PickerKind {
    /// The config name.
    pub const fn name(self) -> &'static str {
        match self {
            PickerKind::MaxScore => "max-score",
            PickerKind::MaxScoreLowestIndex => "max-score-lowest-index",
            PickerKind::Random => "random",
        }
    }

    /// Parses a config name.
    pub fn parse(s: &str) -> Option<Self> {
        [PickerKind::MaxScore, PickerKind::MaxScoreLowestIndex, PickerKind::Random].into_iter().find(|k| k.name() == s)
    }
}

/// What decides: the pipeline, or one of the routers that are not pipelines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Policy {
    /// filters -> weighted scorers -> picker.
    Pipeline,
    /// Dynamo's KV router.
    DynamoKv,
    /// SGLang router's cache_aware policy.
    SglangCacheAware,
    /// The vLLM load-aware formula.
    VllmLoadaware,
}

/// Where the affinity filter and no-hit-lru read a pod's match from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum PrefixSource {
    /// The precise index when the pipeline has a precise scorer, else the approximate one.
    Auto,
    /// The router-side approximate index.
    Approximate,
    /// The exact index.
    Precise,
}

/// One scorer and its weight.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WeightedScorer {
    /// The scorer.
    pub kind: ScorerKind,
    /// Its weight w_i (finite, >= 0).
    pub weight: f64,
}

/// Every tunable parameter of the shipped routers, with the upstream defaults (docs/MODEL.md
/// gives each one's source and version).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RouterParams {
    /// Seed of the router's RNG (tie picks, random picker, softmax); the scenario's seed.
    pub seed: u64,
    /// Keys per pod in the approximate index's LRU; 0: the pod's capacity C (as GIE sizes it
    /// from the pod's `CacheNumBlocks` with autoTune).
    pub approx_lru_blocks: u64,
    /// Where the affinity filter and no-hit-lru read matches.
    pub prefix_source: PrefixSource,
    /// load-aware's queue threshold T (llm-d: 128).
    pub load_aware_threshold: u32,
    /// token-load's `queueThresholdTokens` (llm-d: 4,194,304).
    pub token_load_threshold: u64,
    /// no-hit-lru's LRU size (llm-d: 1,024).
    pub no_hit_lru_size: u32,
    /// Affinity filter: `affinityThreshold` (0.80).
    pub affinity_threshold: f64,
    /// Affinity filter: `maxTTFTPenaltyMs` (18,000; 0: always keep the sticky pods).
    pub max_ttft_penalty_ms: f64,
    /// Affinity filter: `peakPrefillThroughput`, tokens/s (15,928).
    pub peak_prefill_tokens_per_s: f64,
    /// Dynamo: `overlap_score_weight` (1.0).
    pub overlap_score_weight: f64,
    /// Dynamo: `router_temperature` (0.0: argmin).
    pub router_temperature: f64,
    /// SGLang: `cache_threshold` (0.3, sglang-router 0.3.2 CLI).
    pub cache_threshold: f64,
    /// SGLang: `balance_abs_threshold` (64).
    pub balance_abs_threshold: u32,
    /// SGLang: `balance_rel_threshold` (1.5).
    pub balance_rel_threshold: f64,
    /// vllm-loadaware: beta (ours, 1.0: the issue gives none).
    pub vllm_beta: f64,
}

impl RouterParams {
    /// The upstream defaults.
    pub const DEFAULT: RouterParams = RouterParams {
        seed: 0,
        approx_lru_blocks: 0,
        prefix_source: PrefixSource::Auto,
        load_aware_threshold: 128,
        token_load_threshold: 4_194_304,
        no_hit_lru_size: 1024,
        affinity_threshold: 0.80,
        max_ttft_penalty_ms: 18_000.0,
        peak_prefill_tokens_per_s: 15_928.0,
        overlap_score_weight: 1.0,
        router_temperature: 0.0,
        cache_threshold: 0.3,
        balance_abs_threshold: 64,
        balance_rel_threshold: 1.5,
        vllm_beta: 1.0,
    };
}

impl Default for RouterParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A shipped router: its policy, pipeline and parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RouterSpec {
    /// What decides.
    pub policy: Policy,
    /// Filters, in order (None: unused slot).
    pub filters: [Option<FilterKind>; MAX_FILTERS],
    /// Weighted scorers (None: unused slot).
    pub scorers: [Option<WeightedScorer>; MAX_SCORERS],
    /// The picker.
    pub picker: PickerKind,
    /// Parameters.
    pub params: RouterParams,
}

/// Buffer lengths of a shipped router's approximate index (all 0 when it has none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterLayout {
    /// LRU keys per pod.
    pub slots_per_pod: usize,
    /// LRU key-table entries per pod.
    pub table_per_pod: usize,
    /// Key -> pods table entries (0 at up to [`PROBE_MAX_PODS`] pods, whose LRUs are asked).
    pub index: usize,
}

impl RouterLayout {
    /// Total bytes.
    pub fn bytes(&self, pods: usize) -> usize {
        use core::mem::size_of;
        pods * (self.slots_per_pod * size_of::<Slot>() + self.table_per_pod * 4) + self.index * size_of::<IndexEntry>()
    }
}

/// Caller storage of a shipped router (lengths from [`RouterSpec::layout`], slots and tables
/// times the number of pods); empty when the router has no approximate index.
#[derive(Debug, Default)]
pub struct RouterBuffers<'a> {
    /// LRU slots.
    pub slots: &'a mut [Slot],
    /// LRU key tables.
    pub tables: &'a mut [u32],
    /// Key -> pods table.
    pub index: &'a mut [IndexEntry],
}

const fn ws(kind: ScorerKind, weight: f64) -> Option<WeightedScorer> {
    Some(WeightedScorer { kind, weight })
}

impl RouterSpec {
    /// An empty pipeline (max-score picker, default parameters).
    pub const EMPTY: RouterSpec = RouterSpec {
        policy: Policy::Pipeline,
        filters: [None; MAX_FILTERS],
        scorers: [None; MAX_SCORERS],
        picker: PickerKind::MaxScore,
        params: RouterParams::DEFAULT,
    };

    /// The preset of a shipped router (None for the seed's routers and `custom`).
    pub const fn preset(kind: RouterKind) -> Option<RouterSpec> {
        use ScorerKind::*;
        let e = Self::EMPTY;
        let mut s = e.scorers;
        let spec = match kind {
            RouterKind::LlmDPrecise => {
                s[0] = ws(PrecisePrefixCache, 2.0);
                s[1] = ws(KvCacheUtilization, 1.0);
                s[2] = ws(Queue, 1.0);
                RouterSpec { scorers: s, ..e }
            }
            RouterKind::LlmDApproximate => {
                s[0] = ws(PrefixCache, 2.0);
                s[1] = ws(KvCacheUtilization, 1.0);
                s[2] = ws(Queue, 1.0);
                RouterSpec { scorers: s, ..e }
            }
            RouterKind::LlmDLoad => {
                s[0] = ws(Queue, 1.0);
                s[1] = ws(KvCacheUtilization, 1.0);
                RouterSpec { scorers: s, ..e }
            }
            RouterKind::Random => RouterSpec { picker: PickerKind::Random, ..e },
            RouterKind::GieDefault => {
                s[0] = ws(PrefixCache, 3.0);
                s[1] = ws(Queue, 2.0);
                s[2] = ws(KvCacheUtilization, 2.0);
                RouterSpec { scorers: s, ..e }
            }
            RouterKind::LlmDAffinity => {
                s[0] = ws(TokenLoad, 1.0);
                let mut p = RouterParams::DEFAULT;
                p.prefix_source = PrefixSource::Approximate;
                RouterSpec { filters: [Some(FilterKind::PrefixCacheAffinity), None], scorers: s, params: p, ..e }
            }
            RouterKind::DynamoKv => RouterSpec { policy: Policy::DynamoKv, ..e },
            RouterKind::SglangCacheAware => RouterSpec { policy: Policy::SglangCacheAware, ..e },
            RouterKind::VllmLoadaware => RouterSpec { policy: Policy::VllmLoadaware, ..e },
            _ => return None,
        };
        Some(spec)
    }

    fn has_scorer(&self, pred: impl Fn(ScorerKind) -> bool) -> bool {
        self.scorers.iter().flatten().any(|w| pred(w.kind))
    }

    fn has_filter(&self) -> bool {
        self.filters.iter().any(Option::is_some)
    }

    /// The match source of the affinity filter and no-hit-lru.
    pub fn prefix_source(&self) -> PrefixSource {
        match self.params.prefix_source {
            PrefixSource::Auto => {
                let precise = self
                    .has_scorer(|k| matches!(k, ScorerKind::PrecisePrefixCache | ScorerKind::PrecisePrefixCacheMinMax));
                if precise { PrefixSource::Precise } else { PrefixSource::Approximate }
            }
            s => s,
        }
    }

    /// True when a filter or scorer reads the match of [`Self::prefix_source`].
    fn reads_prefix_info(&self) -> bool {
        self.has_filter() || self.has_scorer(|k| k == ScorerKind::NoHitLru)
    }

    /// Whether the fleet must keep the exact index for this router.
    pub fn needs_index(&self) -> bool {
        match self.policy {
            Policy::DynamoKv => true,
            Policy::SglangCacheAware | Policy::VllmLoadaware => false,
            Policy::Pipeline => {
                self.has_scorer(|k| matches!(k, ScorerKind::PrecisePrefixCache | ScorerKind::PrecisePrefixCacheMinMax))
                    || (self.reads_prefix_info() && self.prefix_source() == PrefixSource::Precise)
            }
        }
    }

    /// Whether the router keeps an approximate index.
    pub fn needs_approx(&self) -> bool {
        match self.policy {
            Policy::DynamoKv => false,
            Policy::SglangCacheAware | Policy::VllmLoadaware => true,
            Policy::Pipeline => {
                self.has_scorer(|k| k == ScorerKind::PrefixCache)
                    || (self.reads_prefix_info() && self.prefix_source() == PrefixSource::Approximate)
            }
        }
    }

    /// Buffer lengths for `pods` pods of `capacity_blocks` blocks.
    pub fn layout(&self, pods: usize, capacity_blocks: usize) -> Result<RouterLayout, Error> {
        self.validate()?;
        if !self.needs_approx() {
            return Ok(RouterLayout::default());
        }
        let lru = match self.params.approx_lru_blocks {
            0 => capacity_blocks,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let table = LruPod::table_len(lru);
        let index = ApproxIndex::index_len(pods, lru);
        // No table at up to PROBE_MAX_PODS pods (the LRUs are asked); above, it must fit.
        let index_fits = index > 0 || pods <= PROBE_MAX_PODS;
        if table == 0 || !index_fits || pods.checked_mul(lru).is_none() || lru > super::limits::MAX_POD_BLOCKS {
            return Err(Error::InvalidConfig {
                field: super::Field::ApproxLruBlocks,
                expected: "an LRU size per pod whose tables fit in memory (pods x size keys)",
            });
        }
        Ok(RouterLayout { slots_per_pod: lru, table_per_pod: table, index })
    }

    /// Checks every weight and parameter.
    pub fn validate(&self) -> Result<(), Error> {
        use super::Field;
        let bad = |field, expected| Err(Error::InvalidConfig { field, expected });
        let p = &self.params;
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        let finite_pos = |x: f64| x.is_finite() && x >= 0.0;
        if self.scorers.iter().flatten().any(|w| !finite_pos(w.weight)) {
            return bad(Field::ScorerWeight, "a finite scorer weight >= 0");
        }
        if self.policy == Policy::Pipeline && self.picker != PickerKind::Random && !self.has_scorer(|_| true) {
            return bad(Field::Scorers, "at least one scorer (or picker = \"random\")");
        }
        if p.load_aware_threshold == 0 {
            return bad(Field::LoadAwareThreshold, "at least 1 waiting request");
        }
        if p.token_load_threshold == 0 {
            return bad(Field::TokenLoadThreshold, "at least 1 token");
        }
        if p.no_hit_lru_size == 0 {
            return bad(Field::NoHitLruSize, "at least 1 pod");
        }
        if !unit(p.affinity_threshold) {
            return bad(Field::AffinityThreshold, "a fraction between 0 and 1");
        }
        if !finite_pos(p.max_ttft_penalty_ms) {
            return bad(Field::MaxTtftPenaltyMs, "a finite number of ms >= 0");
        }
        if !(p.peak_prefill_tokens_per_s.is_finite() && p.peak_prefill_tokens_per_s > 0.0) {
            return bad(Field::PeakPrefillTokensPerS, "a finite rate > 0 tokens/s");
        }
        if !finite_pos(p.overlap_score_weight) {
            return bad(Field::OverlapScoreWeight, "a finite weight >= 0");
        }
        if !(finite_pos(p.router_temperature) && p.router_temperature <= 1.0e6) {
            return bad(Field::RouterTemperature, "a temperature between 0 and 1e6");
        }
        if !unit(p.cache_threshold) {
            return bad(Field::CacheThreshold, "a fraction between 0 and 1");
        }
        if !(p.balance_rel_threshold.is_finite() && p.balance_rel_threshold >= 0.0) {
            return bad(Field::BalanceRelThreshold, "a finite ratio >= 0");
        }
        if !finite_pos(p.vllm_beta) {
            return bad(Field::VllmBeta, "a finite number >= 0");
        }
        Ok(())
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, seedable, the same on every target.
#[derive(Clone, Copy, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A draw in 0..n (n >= 1) by multiply-shift (bias below n / 2^64).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n >= 1);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// The `k`-th (0-based) set bit of `mask`.
fn nth_bit(mut mask: u64, k: u64) -> usize {
    for _ in 0..k {
        mask &= mask - 1;
    }
    mask.trailing_zeros() as usize
}

/// A uniform pick among the pods of `mask` (non-empty); no draw when there is one.
fn pick_uniform(rng: &mut SplitMix64, mask: u64) -> usize {
    debug_assert!(mask != 0);
    let n = mask.count_ones() as u64;
    if n == 1 { mask.trailing_zeros() as usize } else { nth_bit(mask, rng.below(n)) }
}

/// LRU of pod ids (no-hit-lru), oldest first.
#[derive(Clone, Copy, Debug)]
struct PodLru {
    order: [u8; MAX_PODS],
    len: usize,
    cap: usize,
}

impl PodLru {
    fn new(size: u32) -> Self {
        PodLru { order: [0; MAX_PODS], len: 0, cap: (size as usize).min(MAX_PODS) }
    }
    fn position(&self, pod: usize) -> Option<usize> {
        self.order[..self.len].iter().position(|&p| p as usize == pod)
    }
    /// Makes `pod` the most recent (golang-lru `Add`), dropping the oldest when full.
    fn add(&mut self, pod: usize) {
        if let Some(i) = self.position(pod) {
            self.order.copy_within(i + 1..self.len, i);
            self.len -= 1;
        } else if self.len == self.cap {
            self.order.copy_within(1..self.len, 0);
            self.len -= 1;
        }
        self.order[self.len] = pod as u8;
        self.len += 1;
    }
}

/// Per-pod inputs of one decision.
struct Inputs<'x> {
    candidates: u64,
    total: u32,
    matches: &'x [u32; MAX_PODS],
    loads: &'x [PodLoad; MAX_PODS],
}

/// What a pipeline computed before its pick ([`ShippedRouter::evaluate`]).
#[derive(Clone, Copy, Debug)]
pub struct Evaluation {
    /// The pods left by the filters (a bitmask).
    pub candidates: u64,
    /// sum_i w_i clamp(s_i(p), 0, 1) for each candidate p (0 for the others).
    pub totals: [f64; MAX_PODS],
    /// The match (blocks) each pod has in the filter's / no-hit-lru's prefix source.
    pub matches: [u32; MAX_PODS],
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

    /// Load signals are read by every policy but a pure-prefix pipeline; asking is cheap.
    pub fn needs_loads(&self) -> bool {
        true
    }

    fn loads(view: &RouteView<'_, '_>, out: &mut [PodLoad; MAX_PODS]) {
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

    fn approx_greedy(&self, keys: &[u64], cand: u64, out: &mut [u32; MAX_PODS]) {
        if let Some(a) = &self.approx {
            a.greedy_matches(keys, cand, out);
        }
    }

    fn approx_leading(&self, keys: &[u64], cand: u64, out: &mut [u32; MAX_PODS]) {
        if let Some(a) = &self.approx {
            a.leading_matches(keys, cand, out);
        }
    }

    /// The pipeline's work before the pick: the candidates left by the filters and each one's
    /// total score (docs/MODEL.md, "Pipeline"). Changes no state; public so that tests and
    /// users can see why a pod was chosen.
    pub fn evaluate(&self, view: &RouteView<'_, '_>, keys: &[u64]) -> Evaluation {
        let n = view.queue_lens.len();
        let mut cand = pods_mask(n);
        let mut loads = [PodLoad::default(); MAX_PODS];
        Self::loads(view, &mut loads);
        let spec = &self.spec;
        let mut exact = [0u32; MAX_PODS];
        if spec.needs_index() {
            view.matches(keys, &mut exact);
        }
        let mut approx = [0u32; MAX_PODS];
        self.approx_greedy(keys, cand, &mut approx);
        let info = match spec.prefix_source() {
            PrefixSource::Precise => exact,
            _ => approx,
        };
        let total = keys.len() as u32;
        for f in spec.filters.iter().flatten() {
            match f {
                FilterKind::PrefixCacheAffinity => {
                    let inp = Inputs { candidates: cand, total, matches: &info, loads: &loads };
                    cand = affinity_filter(&inp, &spec.params);
                }
            }
        }
        let mut totals = [0.0f64; MAX_PODS];
        let mut cold = false;
        for w in spec.scorers.iter().flatten() {
            let mut s = [0.0f64; MAX_PODS];
            let m = match w.kind {
                ScorerKind::PrefixCache => &approx,
                ScorerKind::NoHitLru => &info,
                _ => &exact,
            };
            let inp = Inputs { candidates: cand, total, matches: m, loads: &loads };
            match w.kind {
                ScorerKind::NoHitLru => cold = no_hit_lru(&inp, &self.no_hit, &mut s),
                k => score(k, &inp, &spec.params, &mut s),
            }
            for_each(cand, |p| totals[p] += w.weight * s[p].clamp(0.0, 1.0));
        }
        Evaluation { candidates: cand, totals, matches: info, cold }
    }

    fn route_pipeline(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        let e = self.evaluate(view, keys);
        self.last_cold = e.cold;
        let pod = match self.spec.picker {
            PickerKind::Random => pick_uniform(&mut self.rng, e.candidates),
            PickerKind::MaxScore => pick_uniform(&mut self.rng, max_set(e.candidates, &e.totals)),
            PickerKind::MaxScoreLowestIndex => max_set(e.candidates, &e.totals).trailing_zeros() as usize,
        };
        Route { pod, believed_match_blocks: e.matches[pod] }
    }

    fn route_dynamo(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        let n = view.queue_lens.len();
        let cand = pods_mask(n);
        let mut loads = [PodLoad::default(); MAX_PODS];
        Self::loads(view, &mut loads);
        let mut overlap = [0u32; MAX_PODS];
        view.matches(keys, &mut overlap);
        let mut logits = [0.0f64; MAX_PODS];
        dynamo_logits(cand, keys.len() as u32, &overlap, &loads, self.spec.params.overlap_score_weight, &mut logits);
        let pod = dynamo_pick(&mut self.rng, cand, &logits, self.spec.params.router_temperature);
        Route { pod, believed_match_blocks: overlap[pod] }
    }

    fn route_sglang(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        let cand = pods_mask(view.queue_lens.len());
        let mut loads = [PodLoad::default(); MAX_PODS];
        Self::loads(view, &mut loads);
        let mut m = [0u32; MAX_PODS];
        self.approx_leading(keys, cand, &mut m);
        let approx = self.approx.as_ref();
        let held = |p: usize| approx.map_or(0, |a| a.held_blocks(p));
        let pod = sglang_pick(&mut self.rng, cand, keys.len() as u32, &m, &loads, &self.spec.params, held);
        Route { pod, believed_match_blocks: m[pod] }
    }

    fn route_vllm(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        let cand = pods_mask(view.queue_lens.len());
        let mut loads = [PodLoad::default(); MAX_PODS];
        Self::loads(view, &mut loads);
        let mut m = [0u32; MAX_PODS];
        self.approx_leading(keys, cand, &mut m);
        let pod = vllm_pick(cand, keys.len() as u32, &m, &loads, self.spec.params.vllm_beta);
        Route { pod, believed_match_blocks: m[pod] }
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
        match self.spec.policy {
            Policy::Pipeline => self.route_pipeline(view, keys),
            Policy::DynamoKv => self.route_dynamo(view, keys),
            Policy::SglangCacheAware => self.route_sglang(view, keys),
            Policy::VllmLoadaware => self.route_vllm(view, keys),
        }
    }
    fn routed(&mut self, pod: usize, keys: &[u64], _now_ns: u64) -> Result<(), Error> {
        if self.last_cold {
            self.no_hit.add(pod);
            self.last_cold = false;
        }
        match self.approx.as_mut() {
            Some(a) => a.record(pod, keys),
            None => Ok(()),
        }
    }
}

/// The pods of `cand` with the highest total (exact float equality is a tie).
fn max_set(cand: u64, totals: &[f64; MAX_PODS]) -> u64 {
    let mut best = f64::NEG_INFINITY;
    let mut set = 0u64;
    for_each(cand, |p| {
        if totals[p] > best {
            best = totals[p];
            set = 1 << p;
        } else if totals[p] == best {
            set |= 1 << p;
        }
    });
    set
}

/// min and max of `f(p)` over the pods of `cand` (non-empty).
fn min_max<T: Copy + PartialOrd>(cand: u64, f: impl Fn(usize) -> T) -> (T, T) {
    let first = f(cand.trailing_zeros() as usize);
    let (mut lo, mut hi) = (first, first);
    for_each(cand, |p| {
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
fn score(kind: ScorerKind, inp: &Inputs<'_>, prm: &RouterParams, s: &mut [f64; MAX_PODS]) {
    let cand = inp.candidates;
    if cand == 0 {
        return;
    }
    let total = inp.total as f64;
    let ratio = |p: usize| if inp.total == 0 { 0.0 } else { inp.matches[p] as f64 / total };
    match kind {
        ScorerKind::PrefixCache | ScorerKind::PrecisePrefixCache => for_each(cand, |p| s[p] = ratio(p).min(1.0)),
        ScorerKind::PrecisePrefixCacheMinMax => {
            let holders = cand & mask_where(cand, |p| inp.matches[p] > 0);
            if holders == 0 {
                return;
            }
            let (lo, hi) = min_max(holders, |p| inp.matches[p]);
            for_each(holders, |p| {
                s[p] = if hi == lo { 1.0 } else { (inp.matches[p] - lo) as f64 / (hi - lo) as f64 };
            });
        }
        ScorerKind::Queue => {
            let (lo, hi) = min_max(cand, |p| inp.loads[p].waiting);
            for_each(cand, |p| {
                s[p] = if hi == lo { 1.0 } else { (hi - inp.loads[p].waiting) as f64 / (hi - lo) as f64 };
            });
        }
        ScorerKind::KvCacheUtilization => for_each(cand, |p| {
            let l = inp.loads[p];
            let used =
                if l.kv_capacity_blocks == 0 { 0.0 } else { l.kv_used_blocks as f64 / l.kv_capacity_blocks as f64 };
            s[p] = 1.0 - used;
        }),
        ScorerKind::TokenLoad => for_each(cand, |p| {
            let l = inp.loads[p].pending_prefill_tokens;
            let q = prm.token_load_threshold;
            s[p] = if l == 0 { 1.0 } else { 1.0 - l.min(q) as f64 / q as f64 };
        }),
        ScorerKind::ActiveRequests => {
            let active = |p: usize| inp.loads[p].waiting as u64 + inp.loads[p].running as u64;
            let (_, hi) = min_max(cand, active);
            for_each(cand, |p| {
                let c = active(p);
                s[p] = if c == 0 { 1.0 } else { (hi - c) as f64 / hi as f64 };
            });
        }
        ScorerKind::LoadAware => for_each(cand, |p| {
            let q = inp.loads[p].waiting;
            let t = prm.load_aware_threshold;
            s[p] = if q == 0 { 0.5 } else { 0.5 * (1.0 - q.min(t) as f64 / t as f64) };
        }),
        ScorerKind::NoHitLru => {}
    }
}

fn mask_where(cand: u64, f: impl Fn(usize) -> bool) -> u64 {
    let mut m = 0;
    for_each(cand, |p| {
        if f(p) {
            m |= 1 << p;
        }
    });
    m
}

/// no-hit-lru: returns whether the request is cold (then the chosen pod moves to the LRU's
/// most recent end once routed).
fn no_hit_lru(inp: &Inputs<'_>, lru: &PodLru, s: &mut [f64; MAX_PODS]) -> bool {
    let cand = inp.candidates;
    if cand == 0 {
        return false;
    }
    if mask_where(cand, |p| inp.matches[p] > 0) != 0 {
        for_each(cand, |p| s[p] = 0.5);
        return false;
    }
    let n = cand.count_ones() as u64;
    if n == 1 {
        for_each(cand, |p| s[p] = 1.0);
        return true;
    }
    let denom = (n - 1) as f64;
    let mut rank = 0u64;
    // Never-used pods first, in pod order; then the used ones, least recent first.
    for_each(cand, |p| {
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
        if cand & (1 << p) != 0 {
            s[p] = (1.0 - (never + pos as u64) as f64 / denom).max(0.0);
        }
    }
    true
}

/// The prefix-cache-affinity filter: the candidates it keeps.
fn affinity_filter(inp: &Inputs<'_>, prm: &RouterParams) -> u64 {
    let cand = inp.candidates;
    if cand.count_ones() <= 1 || prm.affinity_threshold <= 0.0 {
        return cand;
    }
    let ratio = |p: usize| if inp.total == 0 { 0.0 } else { inp.matches[p] as f64 / inp.total as f64 };
    let sticky = mask_where(cand, |p| ratio(p) >= prm.affinity_threshold);
    let others = cand & !sticky;
    if sticky == 0 {
        return cand;
    }
    if prm.max_ttft_penalty_ms > 0.0 && others != 0 {
        let ttft = |p: usize| inp.loads[p].pending_prefill_tokens as f64 / prm.peak_prefill_tokens_per_s * 1000.0;
        let (best_sticky, _) = min_max(sticky, ttft);
        let (best_other, _) = min_max(others, ttft);
        if best_sticky - best_other > prm.max_ttft_penalty_ms {
            return cand;
        }
    }
    sticky
}

/// Dynamo's logit per candidate: w x prefill blocks + decode blocks (lower is better).
fn dynamo_logits(
    cand: u64,
    total: u32,
    overlap: &[u32; MAX_PODS],
    loads: &[PodLoad; MAX_PODS],
    weight: f64,
    out: &mut [f64; MAX_PODS],
) {
    let b = BLOCK_TOKENS as u64;
    for_each(cand, |p| {
        let new_tokens = (total - overlap[p].min(total)) as u64 * b;
        let prefill_tokens = loads[p].pending_prefill_tokens.saturating_add(new_tokens);
        let new_blocks = (total - overlap[p].min(total)) as u64;
        let decode_blocks = loads[p].kv_used_blocks as u64 + new_blocks;
        out[p] = weight * (prefill_tokens as f64 / b as f64) + decode_blocks as f64;
    });
}

/// log2(e) in Q32.32.
const LOG2_E_Q32: f64 = core::f64::consts::LOG2_E * 4_294_967_296.0;

/// Dynamo's selection: argmin (exact ties uniform), or at temperature T > 0 a draw with
/// p_i ~ exp(-((l_i - l_min) / (l_max - l_min)) / T) (all equal: uniform).
fn dynamo_pick(rng: &mut SplitMix64, cand: u64, logits: &[f64; MAX_PODS], temperature: f64) -> usize {
    let (lo, hi) = min_max(cand, |p| logits[p]);
    if temperature <= 0.0 || hi == lo {
        let mins = mask_where(cand, |p| logits[p] == lo);
        return pick_uniform(rng, mins);
    }
    // Integer weights 2^(-x log2 e) in Q0.64 (fixmath): the same bits on every target.
    let mut w = [0u64; MAX_PODS];
    let mut sum: u128 = 0;
    for_each(cand, |p| {
        let x = (logits[p] - lo) / (hi - lo) / temperature;
        let q = (x * LOG2_E_Q32).min((64u64 << 32) as f64) as u64;
        // Q0.56: 64 weights sum below 2^62, so the draw below fits in u128.
        w[p] = exp2_neg_q32(q) >> 8;
        sum += w[p] as u128;
    });
    let r = (rng.next_u64() as u128 * sum) >> 64;
    let mut acc: u128 = 0;
    let mut chosen = cand.trailing_zeros() as usize;
    let mut done = false;
    for_each(cand, |p| {
        if done {
            return;
        }
        acc += w[p] as u128;
        if r < acc {
            chosen = p;
            done = true;
        }
    });
    chosen
}

/// SGLang's cache_aware choice (see docs/MODEL.md).
fn sglang_pick(
    rng: &mut SplitMix64,
    cand: u64,
    total: u32,
    m: &[u32; MAX_PODS],
    loads: &[PodLoad; MAX_PODS],
    prm: &RouterParams,
    held: impl Fn(usize) -> usize,
) -> usize {
    let load = |p: usize| loads[p].waiting as u64 + loads[p].running as u64;
    let (lo, hi) = min_max(cand, load);
    let imbalanced = hi - lo > prm.balance_abs_threshold as u64 && hi as f64 > lo as f64 * prm.balance_rel_threshold;
    if imbalanced {
        return first_min(cand, load);
    }
    let best = first_max(cand, |p| m[p]);
    let rate = if total == 0 { 0.0 } else { m[best] as f64 / total as f64 };
    if rate > prm.cache_threshold {
        return best;
    }
    // The smallest tenant; SGLang takes the first found in a hash map (arbitrary): a seeded
    // uniform pick among the equal ones (equal when every LRU is full).
    let (fewest, _) = min_max(cand, &held);
    pick_uniform(rng, mask_where(cand, |p| held(p) == fewest))
}

/// The vLLM load-aware formula: match / total - beta x load / max load.
fn vllm_pick(cand: u64, total: u32, m: &[u32; MAX_PODS], loads: &[PodLoad; MAX_PODS], beta: f64) -> usize {
    let load = |p: usize| loads[p].waiting as u64 + loads[p].running as u64;
    let (_, hi) = min_max(cand, load);
    let mut scores = [0.0f64; MAX_PODS];
    for_each(cand, |p| {
        let frac = if total == 0 { 0.0 } else { m[p] as f64 / total as f64 };
        let rel = if hi == 0 { 0.0 } else { load(p) as f64 / hi as f64 };
        scores[p] = frac - beta * rel;
    });
    max_set(cand, &scores).trailing_zeros() as usize
}

/// Lowest-index pod with the smallest `f`.
fn first_min(cand: u64, f: impl Fn(usize) -> u64) -> usize {
    let (lo, _) = min_max(cand, &f);
    mask_where(cand, |p| f(p) == lo).trailing_zeros() as usize
}

/// Lowest-index pod with the largest `f`.
fn first_max(cand: u64, f: impl Fn(usize) -> u32) -> usize {
    let (_, hi) = min_max(cand, &f);
    mask_where(cand, |p| f(p) == hi).trailing_zeros() as usize
}
