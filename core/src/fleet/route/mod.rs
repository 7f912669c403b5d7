//! Routers: the seed's round-robin, least-loaded and prefix-aware, and the shipped routers'
//! presets (filters -> weighted scorers -> picker, Dynamo, SGLang; [`super::pipeline`]). One
//! trait, so a user can plug their own.

use super::Error;
use super::engine::PodLoad;
use super::index::{BlockIndex, PendingEvicts};
use super::limits::MAX_PODS;
use super::pipeline::{RouterBuffers, RouterSpec, ShippedRouter};

/// "Which of these pods hold this key": implemented by whatever holds the exact cache state (the
/// FIFO pods' key tables, the batched engines' cache maps), so the router needs no knowledge of
/// the fleet types (and `router.rs` does not import `sim.rs`).
pub trait KeyHolders {
    /// Bitmask of the `candidates` pods whose cache holds `key`.
    fn mask(&self, key: u64, candidates: u64) -> u64;
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
    /// Pods the index believes hold `key`, restricted to `candidates`.
    #[inline]
    pub fn believed_mask(&self, key: u64, candidates: u64) -> u64 {
        let held = match &self.held {
            Holders::None => 0,
            Holders::Index(ix) => ix.mask(key) & candidates,
            Holders::Exact(pods) => pods.mask(key, candidates),
        };
        let mut believed = match self.pending {
            Some(p) if !p.is_empty() => {
                let mut ghosts = 0;
                let mut rest = candidates & !held;
                while rest != 0 {
                    let pod = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    if p.contains(key, pod) {
                        ghosts |= 1 << pod;
                    }
                }
                held | ghosts
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
            let mut rest = candidates & !believed;
            while rest != 0 {
                let pod = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                if s.contains(key, pod) {
                    believed |= 1 << pod;
                }
            }
        }
        believed
    }

    /// With stores delayed too (docs/MODEL.md, "Staleness in time"): a pod that stored `key`
    /// within the delay is believed to hold it only if it also evicted it within the delay (it
    /// held it before: the shortest history); a ghost (evicted within the delay) that was also
    /// stored within it was not held before.
    #[cold]
    fn without_unseen_stores(&self, stores: &PendingEvicts<'_>, key: u64, held: u64, believed: u64) -> u64 {
        let evicted = |pod: usize| self.pending.is_some_and(|p| p.contains(key, pod));
        let mut out = believed;
        let mut rest = believed;
        while rest != 0 {
            let pod = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if !stores.contains(key, pod) {
                continue;
            }
            let holds_now = held & (1 << pod) != 0;
            if !holds_now || !evicted(pod) {
                out &= !(1u64 << pod);
            }
        }
        out
    }

    /// match_p for every pod: the longest leading run of `keys` the index says pod p holds.
    pub fn matches(&self, keys: &[u64], out: &mut [u32]) {
        let n = self.queue_lens.len();
        let mut alive = pods_mask(n);
        out[..n].fill(keys.len() as u32);
        for (j, &key) in keys.iter().enumerate() {
            let b = self.believed_mask(key, alive);
            let mut dead = alive & !b;
            while dead != 0 {
                out[dead.trailing_zeros() as usize] = j as u32;
                dead &= dead - 1;
            }
            alive = b;
            if alive == 0 {
                break;
            }
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
}

/// The routable pods as a bitmask: pods `0..n`.
#[inline]
pub const fn pods_mask(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// Request i goes to pod i mod N.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobin;

impl Router for RoundRobin {
    fn needs_index(&self) -> bool {
        false
    }
    fn route(&mut self, view: &RouteView<'_, '_>, _keys: &[u64]) -> Route {
        let pod = (view.request % view.queue_lens.len() as u64) as usize;
        Route { pod, believed_match_blocks: 0 }
    }
}

/// The pod with the smallest queue; ties to the lowest index.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeastLoaded;

impl Router for LeastLoaded {
    fn needs_index(&self) -> bool {
        false
    }
    fn route(&mut self, view: &RouteView<'_, '_>, _keys: &[u64]) -> Route {
        let mut best = 0;
        for (p, &q) in view.queue_lens.iter().enumerate() {
            if q < view.queue_lens[best] {
                best = p;
            }
        }
        Route { pod: best, believed_match_blocks: 0 }
    }
}

/// score_p = match_p - alpha * queue_len(p), computed in IEEE-754 binary64 exactly as written;
/// the highest score wins, ties to the smaller queue, then to the lowest index.
#[derive(Clone, Copy, Debug)]
pub struct PrefixAware {
    /// Load penalty per queued request, in blocks.
    pub alpha: f64,
}

impl Router for PrefixAware {
    fn needs_index(&self) -> bool {
        true
    }
    fn route(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        let mut matches = [0u32; MAX_PODS];
        view.matches(keys, &mut matches);
        self.choose(&matches, view.queue_lens)
    }
}

impl PrefixAware {
    /// The pod with the highest score given match_p (`matches[p]`) and queue_len(p), one per
    /// routable pod (also used by the run-length replay, which computes the matches per run).
    pub fn choose(&self, matches: &[u32], queue_lens: &[u32]) -> Route {
        // A whole alpha up to 2^20 (the default is 1): every score is an integer below 2^53 in
        // magnitude, exact in f64, so integer arithmetic makes the same comparisons, faster.
        let whole = self.alpha >= 0.0 && self.alpha <= MAX_WHOLE_ALPHA && (self.alpha as u64) as f64 == self.alpha;
        if whole {
            return choose_whole(self.alpha as u64, matches, queue_lens);
        }
        let mut best = 0;
        let mut best_score = f64::NEG_INFINITY;
        // queue_lens[best], kept alongside.
        let mut best_q = queue_lens.first().copied().unwrap_or(0);
        for (p, (&m, &q)) in matches.iter().zip(queue_lens).enumerate() {
            let score = m as f64 - self.alpha * q as f64;
            // Selects rather than branches (the winner is data-dependent: mispredicted branches
            // showed in `fleet bench`); the same comparisons, in the same order.
            let better = score > best_score || (score == best_score && q < best_q);
            best = if better { p } else { best };
            best_score = if better { score } else { best_score };
            best_q = if better { q } else { best_q };
        }
        Route { pod: best, believed_match_blocks: matches[best] }
    }
}

/// Largest alpha [`PrefixAware::choose`] scores in integers: alpha x queue_len stays below 2^52.
const MAX_WHOLE_ALPHA: f64 = (1u64 << 20) as f64;

/// [`PrefixAware::choose`] for a whole alpha at most [`MAX_WHOLE_ALPHA`], in integers.
fn choose_whole(alpha: u64, matches: &[u32], queue_lens: &[u32]) -> Route {
    let mut best = 0;
    let mut best_score = i64::MIN;
    let mut best_q = queue_lens.first().copied().unwrap_or(0);
    for (p, (&m, &q)) in matches.iter().zip(queue_lens).enumerate() {
        // |score| < 2^53: m < 2^32, alpha q < 2^20 x 2^32.
        let score = m as i64 - (alpha * q as u64) as i64;
        let better = score > best_score || (score == best_score && q < best_q);
        best = if better { p } else { best };
        best_score = if better { score } else { best_score };
        best_q = if better { q } else { best_q };
    }
    Route { pod: best, believed_match_blocks: matches[best] }
}

/// Which built-in router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum RouterKind {
    /// [`RoundRobin`].
    RoundRobin,
    /// [`LeastLoaded`].
    LeastLoaded,
    /// [`PrefixAware`].
    PrefixAware,
    /// llm-d's precise-prefix guide: precise-prefix-cache 2, kv-cache-utilization 1, queue 1,
    /// max-score picker.
    LlmDPrecise,
    /// The same weights with the approximate (router-side LRU) prefix index.
    LlmDApproximate,
    /// queue 1 + kv-cache-utilization 1 (no prefix scorer).
    LlmDLoad,
    /// A uniform pick, seeded.
    Random,
    /// GIE's / llm-d's default profile: prefix-cache 3, queue 2, kv-cache-utilization 2.
    GieDefault,
    /// llm-d's 2026 routing: prefix-cache-affinity filter, then token-load.
    LlmDAffinity,
    /// Dynamo's KV router: min of overlap_score_weight x prefill blocks + decode blocks
    /// (or a softmax sample at temperature > 0).
    DynamoKv,
    /// SGLang router's cache_aware policy.
    SglangCacheAware,
    /// The "vLLM production-stack" formula (ours: production-stack ships no such router,
    /// docs/MODEL.md): match fraction - beta x relative load.
    VllmLoadaware,
    /// A pipeline from `--router-config FILE.toml`.
    Custom,
}

impl core::fmt::Display for RouterKind {
    /// Its CLI name (`round-robin`, `least-loaded`, `prefix-aware`, `llm-d-precise`, ...).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl RouterKind {
    /// The seed's three routers, in report order (the sweeps and the report's seed sections run
    /// these).
    pub const ALL: [RouterKind; 3] = [RouterKind::RoundRobin, RouterKind::LeastLoaded, RouterKind::PrefixAware];

    /// The shipped routers' presets (issue 13), in report order.
    pub const PRESETS: [RouterKind; 9] = [
        RouterKind::LlmDPrecise,
        RouterKind::LlmDApproximate,
        RouterKind::LlmDLoad,
        RouterKind::Random,
        RouterKind::GieDefault,
        RouterKind::LlmDAffinity,
        RouterKind::DynamoKv,
        RouterKind::SglangCacheAware,
        RouterKind::VllmLoadaware,
    ];

    /// Every name the CLI takes: the seed's routers, then the presets.
    pub const NAMED: [RouterKind; 12] = {
        let mut all = [RouterKind::RoundRobin; 12];
        let mut i = 0;
        while i < 12 {
            all[i] = if i < 3 { Self::ALL[i] } else { Self::PRESETS[i - 3] };
            i += 1;
        }
        all
    };

    /// The CLI name.
    pub const fn name(self) -> &'static str {
        match self {
            RouterKind::RoundRobin => "round-robin",
            RouterKind::LeastLoaded => "least-loaded",
            RouterKind::PrefixAware => "prefix-aware",
            RouterKind::LlmDPrecise => "llm-d-precise",
            RouterKind::LlmDApproximate => "llm-d-approximate",
            RouterKind::LlmDLoad => "llm-d-load",
            RouterKind::Random => "random",
            RouterKind::GieDefault => "gie-default",
            RouterKind::LlmDAffinity => "llm-d-affinity",
            RouterKind::DynamoKv => "dynamo-kv",
            RouterKind::SglangCacheAware => "sglang-cache-aware",
            RouterKind::VllmLoadaware => "vllm-loadaware",
            RouterKind::Custom => "custom",
        }
    }

    /// Parses a CLI name (`custom` is not one: it comes from `--router-config`).
    pub fn parse(s: &str) -> Option<Self> {
        Self::NAMED.into_iter().find(|r| r.name() == s)
    }

    /// True for the seed's three routers (built without a [`RouterSpec`]).
    pub const fn is_seed(self) -> bool {
        matches!(self, RouterKind::RoundRobin | RouterKind::LeastLoaded | RouterKind::PrefixAware)
    }
}

/// A built-in router chosen at run time.
// The shipped router carries its per-pod LRU handles inline (about 4 KiB): the core cannot box,
// and a fleet holds exactly one router.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum AnyRouter<'a> {
    /// See [`RoundRobin`].
    RoundRobin(RoundRobin),
    /// See [`LeastLoaded`].
    LeastLoaded(LeastLoaded),
    /// See [`PrefixAware`].
    PrefixAware(PrefixAware),
    /// A shipped router's preset or a custom pipeline (docs/MODEL.md, "Shipped routers").
    Shipped(ShippedRouter<'a>),
}

impl<'a> AnyRouter<'a> {
    /// One of the seed's routers, `kind` with load penalty `alpha` (used by prefix-aware only).
    /// A shipped preset is built with its default parameters and no approximate-index storage
    /// (use [`Self::build`] when [`RouterSpec::approx_lru_blocks`] is not 0).
    pub fn new(kind: RouterKind, alpha: f64) -> Result<Self, Error> {
        match kind {
            RouterKind::RoundRobin => Ok(AnyRouter::RoundRobin(RoundRobin)),
            RouterKind::LeastLoaded => Ok(AnyRouter::LeastLoaded(LeastLoaded)),
            RouterKind::PrefixAware => Ok(AnyRouter::PrefixAware(PrefixAware { alpha })),
            _ => {
                let spec = RouterSpec::preset(kind).ok_or(Error::InvalidConfig {
                    field: super::Field::Router,
                    expected: "a preset name, or a pipeline from --router-config",
                })?;
                Self::build(kind, alpha, Some(&spec), 1, RouterBuffers::default())
            }
        }
    }

    /// The router `kind` (`spec` = its pipeline and parameters for a shipped router; None: the
    /// preset's defaults) over `pods` pods, with caller storage for an approximate index
    /// ([`RouterSpec::layout`]).
    pub fn build(
        kind: RouterKind,
        alpha: f64,
        spec: Option<&RouterSpec>,
        pods: usize,
        buffers: RouterBuffers<'a>,
    ) -> Result<Self, Error> {
        if kind.is_seed() {
            return Self::new(kind, alpha);
        }
        let preset;
        let spec = match spec {
            Some(s) => s,
            None => {
                preset = RouterSpec::preset(kind).ok_or(Error::InvalidConfig {
                    field: super::Field::Router,
                    expected: "a pipeline from --router-config",
                })?;
                &preset
            }
        };
        Ok(AnyRouter::Shipped(ShippedRouter::new(*spec, pods, buffers)?))
    }
}

impl Router for AnyRouter<'_> {
    fn needs_index(&self) -> bool {
        match self {
            AnyRouter::PrefixAware(_) => true,
            AnyRouter::Shipped(r) => r.needs_index(),
            _ => false,
        }
    }
    fn route(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        match self {
            AnyRouter::RoundRobin(r) => r.route(view, keys),
            AnyRouter::LeastLoaded(r) => r.route(view, keys),
            AnyRouter::PrefixAware(r) => r.route(view, keys),
            AnyRouter::Shipped(r) => r.route(view, keys),
        }
    }
    fn needs_loads(&self) -> bool {
        match self {
            AnyRouter::Shipped(r) => r.needs_loads(),
            _ => false,
        }
    }
    fn routed(&mut self, pod: usize, keys: &[u64], now_ns: u64) -> Result<(), Error> {
        match self {
            AnyRouter::Shipped(r) => r.routed(pod, keys, now_ns),
            _ => Ok(()),
        }
    }
}
