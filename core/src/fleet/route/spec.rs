//! A shipped router's description (docs/MODEL.md, "Shipped routers"): the scorers, filters,
//! pickers and policies by name (the names router config files use), every parameter with its
//! upstream default, the presets, the checks and the router's buffer layout.

use super::kind::RouterKind;
use crate::fleet::base::error::{Error, Field};
use crate::fleet::base::limits::MAX_POD_BLOCKS;
use crate::fleet::cache::approx::{ApproxIndex, PROBE_MAX_PODS};
use crate::fleet::cache::index::IndexEntry;
use crate::fleet::cache::lru::{LruPod, Slot};

/// Most scorers in one pipeline.
pub const MAX_SCORERS: usize = 8;
/// Most filters in one pipeline.
pub const MAX_FILTERS: usize = 2;
/// Largest weight of a scorer (and of Dynamo's `overlap_score_weight`, vllm-loadaware's beta):
/// scores are clamped to [0, 1], so a pipeline's total is at most MAX_SCORERS x 1e6 = 8e6 and
/// Dynamo's logit at most 1e6 x 2^60 blocks, finite; a weight of f64::MAX made the sum +inf and
/// every pod tie. Upstream weights are small integers (llm-d's examples: 1 to 3).
pub const MAX_WEIGHT: f64 = 1.0e6;

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

impl Policy {
    /// The config name (`policy = "..."`).
    pub const fn name(self) -> &'static str {
        match self {
            Policy::Pipeline => "pipeline",
            Policy::DynamoKv => "dynamo-kv",
            Policy::SglangCacheAware => "sglang-cache-aware",
            Policy::VllmLoadaware => "vllm-loadaware",
        }
    }
}

/// Every key of a router config file that sets a part of the router (`preset` and `policy`
/// choose it): a key the resolved router does not read ([`RouterSpec::reads`]) is refused, not
/// ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouterKey {
    /// `filters`.
    Filters,
    /// `[[scorers]]`.
    Scorers,
    /// `picker`.
    Picker,
    /// `params.seed`.
    Seed,
    /// `params.approx_lru_blocks`.
    ApproxLruBlocks,
    /// `params.approx_max_blocks`.
    ApproxMaxBlocks,
    /// `params.prefix_source`.
    PrefixSource,
    /// `params.load_aware_threshold`.
    LoadAwareThreshold,
    /// `params.token_load_threshold`.
    TokenLoadThreshold,
    /// `params.no_hit_lru_size`.
    NoHitLruSize,
    /// `params.affinity_threshold`.
    AffinityThreshold,
    /// `params.max_ttft_penalty_ms`.
    MaxTtftPenaltyMs,
    /// `params.peak_prefill_tokens_per_s`.
    PeakPrefillTokensPerS,
    /// `params.overlap_score_weight`.
    OverlapScoreWeight,
    /// `params.router_temperature`.
    RouterTemperature,
    /// `params.cache_threshold`.
    CacheThreshold,
    /// `params.balance_abs_threshold`.
    BalanceAbsThreshold,
    /// `params.balance_rel_threshold`.
    BalanceRelThreshold,
    /// `params.vllm_beta`.
    VllmBeta,
}

impl RouterKey {
    /// Every key, in file order.
    pub const ALL: [RouterKey; 19] = [
        RouterKey::Filters,
        RouterKey::Scorers,
        RouterKey::Picker,
        RouterKey::Seed,
        RouterKey::ApproxLruBlocks,
        RouterKey::ApproxMaxBlocks,
        RouterKey::PrefixSource,
        RouterKey::LoadAwareThreshold,
        RouterKey::TokenLoadThreshold,
        RouterKey::NoHitLruSize,
        RouterKey::AffinityThreshold,
        RouterKey::MaxTtftPenaltyMs,
        RouterKey::PeakPrefillTokensPerS,
        RouterKey::OverlapScoreWeight,
        RouterKey::RouterTemperature,
        RouterKey::CacheThreshold,
        RouterKey::BalanceAbsThreshold,
        RouterKey::BalanceRelThreshold,
        RouterKey::VllmBeta,
    ];

    /// The key as written in the file (`params.NAME` for the `[params]` table).
    pub const fn name(self) -> &'static str {
        match self {
            RouterKey::Filters => "filters",
            RouterKey::Scorers => "scorers",
            RouterKey::Picker => "picker",
            RouterKey::Seed => "params.seed",
            RouterKey::ApproxLruBlocks => "params.approx_lru_blocks",
            RouterKey::ApproxMaxBlocks => "params.approx_max_blocks",
            RouterKey::PrefixSource => "params.prefix_source",
            RouterKey::LoadAwareThreshold => "params.load_aware_threshold",
            RouterKey::TokenLoadThreshold => "params.token_load_threshold",
            RouterKey::NoHitLruSize => "params.no_hit_lru_size",
            RouterKey::AffinityThreshold => "params.affinity_threshold",
            RouterKey::MaxTtftPenaltyMs => "params.max_ttft_penalty_ms",
            RouterKey::PeakPrefillTokensPerS => "params.peak_prefill_tokens_per_s",
            RouterKey::OverlapScoreWeight => "params.overlap_score_weight",
            RouterKey::RouterTemperature => "params.router_temperature",
            RouterKey::CacheThreshold => "params.cache_threshold",
            RouterKey::BalanceAbsThreshold => "params.balance_abs_threshold",
            RouterKey::BalanceRelThreshold => "params.balance_rel_threshold",
            RouterKey::VllmBeta => "params.vllm_beta",
        }
    }

    /// What reads it (for the message that refuses it).
    pub const fn reader(self) -> &'static str {
        match self {
            RouterKey::Filters | RouterKey::Scorers | RouterKey::Picker => "policy \"pipeline\"",
            RouterKey::Seed => {
                "a random draw: the pipeline's max-score (ties) and random pickers, dynamo-kv, sglang-cache-aware"
            }
            RouterKey::ApproxLruBlocks | RouterKey::ApproxMaxBlocks => {
                "the approximate index: a prefix-cache scorer, an approximate prefix source, sglang-cache-aware, \
                 vllm-loadaware"
            }
            RouterKey::PrefixSource => "the prefix-cache-affinity filter and the no-hit-lru scorer",
            RouterKey::LoadAwareThreshold => "the load-aware scorer",
            RouterKey::TokenLoadThreshold => "the token-load scorer",
            RouterKey::NoHitLruSize => "the no-hit-lru scorer",
            RouterKey::AffinityThreshold | RouterKey::MaxTtftPenaltyMs | RouterKey::PeakPrefillTokensPerS => {
                "the prefix-cache-affinity filter"
            }
            RouterKey::OverlapScoreWeight | RouterKey::RouterTemperature => "policy \"dynamo-kv\"",
            RouterKey::CacheThreshold | RouterKey::BalanceAbsThreshold | RouterKey::BalanceRelThreshold => {
                "policy \"sglang-cache-aware\""
            }
            RouterKey::VllmBeta => "policy \"vllm-loadaware\"",
        }
    }
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
    /// Most leading keys of a prompt the approximate index matches and records; 0: every key.
    /// GIE's `maxPrefixBlocksToMatch` (v0.5.1: 256 blocks of 64 bytes of the prompt's UTF-8
    /// text, the text beyond them is not hashed; docs/MODEL.md, "Shipped routers").
    pub approx_max_blocks: u64,
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
        approx_max_blocks: 0,
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

    /// Whether this router reads `key` (see [`RouterKey::reader`]): the filters, scorers and
    /// picker only as a pipeline, each parameter only where a part that uses it is present.
    pub fn reads(&self, key: RouterKey) -> bool {
        let pipeline = self.policy == Policy::Pipeline;
        let scorer = |kind: ScorerKind| pipeline && self.has_scorer(|k| k == kind);
        match key {
            RouterKey::Filters | RouterKey::Scorers | RouterKey::Picker => pipeline,
            RouterKey::Seed => match self.policy {
                Policy::Pipeline => self.picker != PickerKind::MaxScoreLowestIndex,
                Policy::DynamoKv | Policy::SglangCacheAware => true,
                Policy::VllmLoadaware => false,
            },
            RouterKey::ApproxLruBlocks | RouterKey::ApproxMaxBlocks => self.needs_approx(),
            RouterKey::PrefixSource => pipeline && self.reads_prefix_info(),
            RouterKey::LoadAwareThreshold => scorer(ScorerKind::LoadAware),
            RouterKey::TokenLoadThreshold => scorer(ScorerKind::TokenLoad),
            RouterKey::NoHitLruSize => scorer(ScorerKind::NoHitLru),
            RouterKey::AffinityThreshold | RouterKey::MaxTtftPenaltyMs | RouterKey::PeakPrefillTokensPerS => {
                pipeline && self.has_filter()
            }
            RouterKey::OverlapScoreWeight | RouterKey::RouterTemperature => self.policy == Policy::DynamoKv,
            RouterKey::CacheThreshold | RouterKey::BalanceAbsThreshold | RouterKey::BalanceRelThreshold => {
                self.policy == Policy::SglangCacheAware
            }
            RouterKey::VllmBeta => self.policy == Policy::VllmLoadaware,
        }
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
        if table == 0 || !index_fits || pods.checked_mul(lru).is_none() || lru > MAX_POD_BLOCKS {
            return Err(Error::InvalidConfig {
                field: Field::ApproxLruBlocks,
                expected: "an LRU size per pod whose tables fit in memory (pods x size keys)",
            });
        }
        Ok(RouterLayout { slots_per_pod: lru, table_per_pod: table, index })
    }

    /// Checks every weight and parameter.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field, expected| Err(Error::InvalidConfig { field, expected });
        let p = &self.params;
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        let finite_pos = |x: f64| x.is_finite() && x >= 0.0;
        let weight = |x: f64| (0.0..=MAX_WEIGHT).contains(&x);
        if self.scorers.iter().flatten().any(|w| !weight(w.weight)) {
            return bad(
                Field::ScorerWeight,
                "a scorer weight from 0 to 1e6 (MAX_WEIGHT: the weighted sum stays finite)",
            );
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
        if !weight(p.overlap_score_weight) {
            return bad(Field::OverlapScoreWeight, "a weight from 0 to 1e6 (MAX_WEIGHT)");
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
        if !weight(p.vllm_beta) {
            return bad(Field::VllmBeta, "a weight from 0 to 1e6 (MAX_WEIGHT)");
        }
        Ok(())
    }
}
