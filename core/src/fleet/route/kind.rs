//! The built-in routers by name ([`RouterKind`], the CLI's `--router`) and the one value that
//! holds any of them ([`AnyRouter`]).

use super::seed::{LeastLoaded, PrefixAware, RoundRobin};
use super::shipped::ShippedRouter;
use super::spec::{RouterBuffers, RouterSpec};
use super::{Route, RouteView, Router};
use crate::fleet::base::error::{Error, Field, Rule};

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
                let spec = RouterSpec::preset(kind)
                    .ok_or(Error::Conflict { field: Field::Router, rule: Rule::PresetOrPipeline })?;
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
                preset =
                    RouterSpec::preset(kind).ok_or(Error::Conflict { field: Field::Router, rule: Rule::Pipeline })?;
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
    fn routed_and_served(
        &mut self,
        pod: usize,
        keys: &[u64],
        pod_keys: &[u64],
        now_ns: u64,
    ) -> Result<Option<usize>, Error> {
        match self {
            AnyRouter::Shipped(r) => r.routed_and_served(pod, keys, pod_keys, now_ns),
            _ => Ok(None),
        }
    }
}
