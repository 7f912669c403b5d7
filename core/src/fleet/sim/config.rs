//! A fleet's configuration: the pods, the router and one engine's configuration, so that a
//! combination the engines do not support cannot be written (the batched engine's variant has no
//! field for a CPU tier, a global cache, a stale view or autoscaling).

use super::defaults;
use super::pools::{self, Pool, PoolRole};
use super::scale::ScalePolicy;
use super::view::{IndexKind, ViewConfig};
use crate::fleet::base::error::{Error, Field, Rule};
use crate::fleet::base::limits::{MAX_ALPHA, MAX_POD_BLOCKS, MAX_PODS, quoting};

/// What `pods` must be (MAX_PODS: 1,024 with the `large-fleets` feature, else 64).
#[cfg(feature = "large-fleets")]
const PODS_EXPECTED: &str = quoting!("between 1 and 1024 (MAX_PODS)", MAX_PODS);
/// What `pods` must be (MAX_PODS: 1,024 with the `large-fleets` feature, else 64).
#[cfg(not(feature = "large-fleets"))]
const PODS_EXPECTED: &str = quoting!("between 1 and 64 (MAX_PODS)", MAX_PODS);
use crate::fleet::cache::approx::ApproxIndex;
use crate::fleet::cache::lru::LruPod;
use crate::fleet::engine::batched::{BatchedConfig, BatchedEngine};
use crate::fleet::engine::fifo::{CacheMode, FifoConfig};
use crate::fleet::route::kind::RouterKind;
use crate::fleet::route::spec::{RouterLayout, RouterSpec};

/// Which engine every pod runs, with its parameters.
// The batched variant holds a physics step cost (~450 bytes); no Box without alloc.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EngineConfig {
    /// FIFO single servers, and the fleet features only they support so far: a stale or global
    /// view of the caches and autoscaling.
    Fifo {
        /// The servers and their caches.
        engine: FifoConfig,
        /// The routers' view of the caches.
        view: ViewConfig,
        /// Autoscaling (None: all pods routable all the time; `pods` is then the most pods).
        scale: Option<ScalePolicy>,
    },
    /// vLLM-style continuous batching: the routers read the engines' cache maps exactly and
    /// every pod serves from the start.
    Batched(BatchedConfig),
}

impl EngineConfig {
    /// The FIFO engine with the model's defaults (`sim::defaults`), an exact view, no autoscaling.
    pub const fn fifo() -> Self {
        EngineConfig::Fifo { engine: defaults::FIFO, view: defaults::VIEW, scale: None }
    }

    /// The engine's name in outputs (`fifo` or `batched`).
    pub const fn name(&self) -> &'static str {
        match self {
            EngineConfig::Fifo { .. } => "fifo",
            EngineConfig::Batched(_) => "batched",
        }
    }
}

/// A fleet's configuration.
#[derive(Clone, Copy, PartialEq)]
pub struct FleetConfig {
    /// Number of pods N (1..=64).
    pub pods: usize,
    /// Blocks per pod C.
    pub capacity_blocks: usize,
    /// The router.
    pub router: RouterKind,
    /// Load penalty of the prefix-aware router, in blocks per queued request.
    pub alpha: f64,
    /// A shipped router's pipeline and parameters (None: the preset of `router` with its
    /// defaults; required for [`RouterKind::Custom`]; ignored by the seed's routers).
    pub routing: Option<RouterSpec>,
    /// The engine every pod runs.
    pub engine: EngineConfig,
    /// Heterogeneous pools (docs/MODEL.md, "Heterogeneous pools"; batched engine only): empty for
    /// a fleet of `pods` identical pods (or P/D's two pools); else the pools in pod order, their
    /// pods summing to `pods`. Stored once here; each pod's engine gets its own configuration.
    pub pools: &'static [Pool],
}

/// What `derive(Debug)` prints, `pools` only when there are any: a fleet without pools prints
/// what it always printed (a sweep's digest hashes it).
impl core::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("FleetConfig");
        d.field("pods", &self.pods)
            .field("capacity_blocks", &self.capacity_blocks)
            .field("router", &self.router)
            .field("alpha", &self.alpha)
            .field("routing", &self.routing)
            .field("engine", &self.engine);
        if !self.pools.is_empty() {
            d.field("pools", &self.pools);
        }
        d.finish()
    }
}

impl FleetConfig {
    /// The FIFO engine and the model's defaults for everything but pods, capacity and router.
    pub const fn new(pods: usize, capacity_blocks: usize, router: RouterKind) -> Self {
        FleetConfig {
            pods,
            capacity_blocks,
            router,
            alpha: defaults::ALPHA,
            routing: None,
            engine: EngineConfig::fifo(),
            pools: &[],
        }
    }

    /// The batched engine `engine` and the model's defaults for the rest.
    pub const fn batched(pods: usize, capacity_blocks: usize, router: RouterKind, engine: BatchedConfig) -> Self {
        FleetConfig { engine: EngineConfig::Batched(engine), ..Self::new(pods, capacity_blocks, router) }
    }

    /// The FIFO engine's configuration (None under the batched engine).
    pub fn fifo(&self) -> Option<&FifoConfig> {
        match &self.engine {
            EngineConfig::Fifo { engine, .. } => Some(engine),
            EngineConfig::Batched(_) => None,
        }
    }

    /// The FIFO engine's configuration to change.
    pub fn fifo_mut(&mut self) -> Option<&mut FifoConfig> {
        match &mut self.engine {
            EngineConfig::Fifo { engine, .. } => Some(engine),
            EngineConfig::Batched(_) => None,
        }
    }

    /// The batched engine's configuration (None under the FIFO engine).
    pub fn batched_config(&self) -> Option<&BatchedConfig> {
        match &self.engine {
            EngineConfig::Batched(e) => Some(e),
            EngineConfig::Fifo { .. } => None,
        }
    }

    /// The routers' view of the caches (exact for the batched engine).
    pub fn view(&self) -> ViewConfig {
        match &self.engine {
            EngineConfig::Fifo { view, .. } => *view,
            EngineConfig::Batched(_) => ViewConfig::EXACT,
        }
    }

    /// The view to change (None under the batched engine, whose view is always exact).
    pub fn view_mut(&mut self) -> Option<&mut ViewConfig> {
        match &mut self.engine {
            EngineConfig::Fifo { view, .. } => Some(view),
            EngineConfig::Batched(_) => None,
        }
    }

    /// The autoscaling policy to set (either engine's).
    pub fn scale_mut(&mut self) -> Option<&mut Option<ScalePolicy>> {
        match &mut self.engine {
            EngineConfig::Fifo { scale, .. } => Some(scale),
            EngineConfig::Batched(e) => Some(&mut e.scale),
        }
    }

    /// Autoscaling (None without it): the FIFO engine's queue-target rule, or the batched
    /// engine's pod counts, interval and startup for its WVA saturation rule
    /// ([`BatchedConfig::wva`]).
    pub fn scale(&self) -> Option<ScalePolicy> {
        match &self.engine {
            EngineConfig::Fifo { scale, .. } => *scale,
            EngineConfig::Batched(e) => e.scale,
        }
    }

    /// Pending-event queues the view needs (with `pending` records each): 0 unless the router
    /// reads the exact view.
    pub fn pending_queues(&self) -> usize {
        if self.uses_exact_index() { self.view().queues() } else { 0 }
    }

    /// The shipped router's spec: `routing`, else the preset of `router` (None for the seed's
    /// routers).
    pub fn router_spec(&self) -> Option<RouterSpec> {
        if self.router.is_seed() { None } else { self.routing.or(RouterSpec::preset(self.router)) }
    }

    /// Whether the router reads the exact index (prefix-aware, precise scorers, Dynamo).
    pub fn uses_exact_index(&self) -> bool {
        match self.router_spec() {
            Some(spec) => spec.needs_index(),
            None => self.router == RouterKind::PrefixAware,
        }
    }

    /// Buffer lengths of the router's own state (an approximate index), all 0 for most routers.
    pub fn router_layout(&self) -> Result<RouterLayout, Error> {
        match self.router_spec() {
            Some(spec) => spec.layout(self.pods, self.capacity_blocks),
            None => Ok(RouterLayout::default()),
        }
    }

    /// Buffer lengths (`runs`, `tables`) of the router's approximate index kept as runs of
    /// trace ids ([`ApproxIndex::runs_layout`], docs/MODEL.md "The approximate index as runs"):
    /// (0, 0) for a router without one; None when its LRUs cannot be kept so.
    pub fn router_runs_layout(&self) -> Option<(usize, usize)> {
        match self.router_spec() {
            Some(spec) if spec.needs_approx() => {
                let l = spec.layout(self.pods, self.capacity_blocks).ok()?;
                ApproxIndex::runs_layout(self.pods, l.slots_per_pod)
            }
            _ => Some((0, 0)),
        }
    }

    /// Checks every field against the model's limits and the combinations the engine supports.
    pub fn validate(&self) -> Result<(), Error> {
        if !self.router.is_seed() {
            match self.router_spec() {
                Some(spec) => spec.validate()?,
                None => {
                    return Err(Error::Conflict { field: Field::Router, rule: Rule::PipelineFile });
                }
            }
        }
        if self.pods == 0 || self.pods > MAX_PODS {
            return Err(Error::InvalidConfig { field: Field::Pods, expected: PODS_EXPECTED });
        }
        if self.capacity_blocks == 0
            || self.capacity_blocks > MAX_POD_BLOCKS
            || LruPod::table_len(self.capacity_blocks) == 0
        {
            return Err(Error::InvalidConfig {
                field: Field::Capacity,
                expected: quoting!(
                    "between 1 and 4294967294 blocks (MAX_POD_BLOCKS: slot indices are u32)",
                    MAX_POD_BLOCKS
                ),
            });
        }
        if !(self.alpha >= 0.0 && self.alpha <= MAX_ALPHA) {
            return Err(Error::InvalidConfig { field: Field::Alpha, expected: "a number between 0 and 1e9" });
        }
        match &self.engine {
            // (pools under the FIFO engine: refused when a fleet is built, [`Self::no_pools_unless_batched`], so
            // that a scenario's fleet, read under the FIFO engine, may carry them)
            EngineConfig::Fifo { engine, view, scale } => self.validate_fifo(engine, view, scale.as_ref()),
            EngineConfig::Batched(e) => {
                e.validate()?;
                self.validate_pools(e)?;
                if let Some(pd) = &e.pd {
                    pd.validate(self.pods)?;
                    if !self.router.is_seed() {
                        return Err(Error::InvalidConfig {
                            field: Field::Router,
                            expected: "round-robin, least-loaded or prefix-aware with --prefill-pods",
                        });
                    }
                    if BatchedEngine::table_len(pd.prefill_capacity_blocks) == 0 {
                        return Err(Error::InvalidConfig {
                            field: Field::PrefillCapacity,
                            expected: "a block count that fits in memory",
                        });
                    }
                }
                if let Some(policy) = &e.scale {
                    policy.validate_pods(self.pods)?;
                    e.wva.validate()?;
                    if e.pd.is_some() {
                        return Err(Error::InvalidConfig {
                            field: Field::ScaleMin,
                            expected: "no autoscaling with --prefill-pods (P/D)",
                        });
                    }
                }
                if BatchedEngine::table_len(self.capacity_blocks) == 0 {
                    return Err(Error::InvalidConfig {
                        field: Field::Capacity,
                        expected: "a block count that fits in memory",
                    });
                }
                Ok(())
            }
        }
    }

    /// An error unless the fleet has no pools or runs the batched engine (the FIFO engine has
    /// no pools).
    pub fn no_pools_unless_batched(&self) -> Result<(), Error> {
        if !self.pools.is_empty() && self.batched_config().is_none() {
            return Err(Error::InvalidConfig { field: Field::Pools, expected: "only with the batched engine" });
        }
        Ok(())
    }

    /// The pools' checks (none without pools): their pods sum to `pods`, each pod's engine and
    /// capacity are valid, and their roles are either all aggregated (no P/D) or prefill pools
    /// followed by decode pools with NP = the prefill pools' pods.
    fn validate_pools(&self, e: &BatchedConfig) -> Result<(), Error> {
        if self.pools.is_empty() {
            return Ok(());
        }
        let bad = |expected| Err(Error::InvalidConfig { field: Field::Pools, expected });
        let mut total = 0usize;
        let mut seen_decode = false;
        for pool in self.pools {
            if pool.pods == 0 {
                return bad("pods at least 1 in every pool");
            }
            total = total.saturating_add(pool.pods as usize);
            let c = pool.capacity(self.capacity_blocks);
            if c == 0 || c > MAX_POD_BLOCKS || BatchedEngine::table_len(c) == 0 {
                return bad("a capacity between 1 and 4294967294 blocks (MAX_POD_BLOCKS) that fits in memory");
            }
            pool.engine(e).validate()?;
            match pool.role {
                PoolRole::Aggregated if e.pd.is_some() => {
                    return bad(
                        "prefill and decode pools only (no aggregated pool) with prefill/decode disaggregation",
                    );
                }
                PoolRole::Prefill | PoolRole::Decode if e.pd.is_none() => {
                    return bad("aggregated pools only without prefill/decode disaggregation");
                }
                PoolRole::Prefill if seen_decode => return bad("every prefill pool listed before the decode pools"),
                PoolRole::Decode => seen_decode = true,
                _ => {}
            }
        }
        if total != self.pods {
            return Err(Error::InvalidConfig { field: Field::Pods, expected: "the sum of the pools' pods" });
        }
        if let Some(pd) = &e.pd {
            let np = pools::pods_of(self.pools, PoolRole::Prefill);
            if np == 0 || !seen_decode {
                return bad("at least one prefill and one decode pool");
            }
            if pd.prefill_pods as usize != np {
                return Err(Error::InvalidConfig {
                    field: Field::PrefillPods,
                    expected: "the prefill pools' pods (set by the pools)",
                });
            }
        }
        Ok(())
    }

    /// Writes pod `p`'s engine into `x` (a copy of the fleet's engine); returns its capacity.
    pub fn pod_setup(&self, x: &mut BatchedConfig, p: usize) -> usize {
        if let Some((_, pool)) = pools::pool_of(self.pools, p) {
            pool.apply(x);
            return pool.capacity(self.capacity_blocks);
        }
        match x.pd {
            Some(pd) if p < pd.prefill_pods as usize => {
                if let Some((profile, cost)) = pd.prefill_cost {
                    x.profile = profile;
                    x.cost = cost;
                }
                pd.prefill_capacity_blocks
            }
            _ => self.capacity_blocks,
        }
    }

    /// KV capacity, running slots and CPU-tier blocks of pod `p` of a batched fleet whose engine
    /// is `e` (what its buffers need).
    pub fn pod_shape(&self, e: &BatchedConfig, p: usize) -> (usize, usize, usize) {
        if let Some((_, pool)) = pools::pool_of(self.pools, p) {
            return (pool.capacity(self.capacity_blocks), pool.max_num_seqs(e) as usize, pool.cpu_capacity(e) as usize);
        }
        let c = match e.pd {
            Some(pd) if p < pd.prefill_pods as usize => pd.prefill_capacity_blocks,
            _ => self.capacity_blocks,
        };
        (c, e.max_num_seqs as usize, e.offload.cpu_capacity as usize)
    }

    /// The FIFO engine's checks, in the order their messages were always given.
    fn validate_fifo(&self, e: &FifoConfig, view: &ViewConfig, scale: Option<&ScalePolicy>) -> Result<(), Error> {
        // the CPU tier's own limit first, then the view's, the policy's, and the global cache's
        // combinations last
        FifoConfig { cache: CacheMode::Local, ..*e }.validate(self.pods, self.capacity_blocks)?;
        view.validate()?;
        if let Some(policy) = scale {
            policy.validate(self.pods)?;
        }
        if e.cache == CacheMode::Global {
            e.validate(self.pods, self.capacity_blocks)?;
            if view.is_stale() {
                return Err(Error::Conflict { field: Field::Stale, rule: Rule::GlobalStale });
            }
            if view.index != IndexKind::PodTables {
                return Err(Error::Conflict { field: Field::Index, rule: Rule::GlobalIndex });
            }
            if scale.is_some() {
                return Err(Error::Conflict { field: Field::ScaleMin, rule: Rule::GlobalScale });
            }
        }
        Ok(())
    }
}
