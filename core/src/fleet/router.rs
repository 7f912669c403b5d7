//! Routers: round-robin, least-loaded, prefix-aware. One trait, so a user can plug their own.

use super::batched::EngineCaches;
use super::engine::PodLoad;
use super::index::{BlockIndex, PendingEvicts};
use super::limits::MAX_PODS;
use super::sim::PodCaches;

/// Where "which pods hold this key" comes from.
pub enum Holders<'v, 'a> {
    /// No index: the router does not look at caches.
    None,
    /// The global block index.
    Index(&'v BlockIndex<'a>),
    /// The pods' own key tables.
    Pods(PodCaches<'v, 'a>),
    /// The batched engines' cache maps (cached blocks, pinned or free).
    Engines(EngineCaches<'v, 'a>),
}

/// What a router may look at when it routes request `request`.
pub struct RouteView<'v, 'a> {
    /// 0-based index of the request, in file order.
    pub request: u64,
    /// queue_len(p) at the request's arrival, one per pod.
    pub queue_lens: &'v [u32],
    /// Which pods hold a key now (exact), when the router asked for it ([`Router::needs_index`]).
    pub held: Holders<'v, 'a>,
    /// Evictions that have not reached the router yet (stale index, delay k > 0).
    pub pending: Option<&'v PendingEvicts<'a>>,
    /// The batched engine's load signals, one per routable pod (None with the FIFO engine).
    pub loads: Option<&'v [PodLoad]>,
}

impl RouteView<'_, '_> {
    /// Pods the index believes hold `key`, restricted to `candidates`.
    #[inline]
    pub fn believed_mask(&self, key: u64, candidates: u64) -> u64 {
        let held = match &self.held {
            Holders::None => 0,
            Holders::Index(ix) => ix.mask(key) & candidates,
            Holders::Pods(pods) => pods.mask(key, candidates),
            Holders::Engines(engines) => engines.mask(key, candidates),
        };
        match self.pending {
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
        }
    }

    /// match_p for every pod: the longest leading run of `keys` the index says pod p holds.
    pub fn matches(&self, keys: &[u64], out: &mut [u32]) {
        let n = self.queue_lens.len();
        let mut alive: u64 = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
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
    /// Picks a pod for the request whose block keys are `keys`.
    fn route(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route;
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
        let mut best = 0;
        let mut best_score = f64::NEG_INFINITY;
        for (p, &q) in queue_lens.iter().enumerate() {
            let score = matches[p] as f64 - self.alpha * q as f64;
            if score > best_score || (score == best_score && q < queue_lens[best]) {
                best = p;
                best_score = score;
            }
        }
        Route { pod: best, believed_match_blocks: matches[best] }
    }
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
}

impl core::fmt::Display for RouterKind {
    /// Its CLI name (`round-robin`, `least-loaded`, `prefix-aware`).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl RouterKind {
    /// All built-in routers, in report order.
    pub const ALL: [RouterKind; 3] = [RouterKind::RoundRobin, RouterKind::LeastLoaded, RouterKind::PrefixAware];

    /// The CLI name.
    pub const fn name(self) -> &'static str {
        match self {
            RouterKind::RoundRobin => "round-robin",
            RouterKind::LeastLoaded => "least-loaded",
            RouterKind::PrefixAware => "prefix-aware",
        }
    }

    /// Parses a CLI name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == s)
    }
}

/// A built-in router chosen at run time.
#[derive(Clone, Copy, Debug)]
pub enum AnyRouter {
    /// See [`RoundRobin`].
    RoundRobin(RoundRobin),
    /// See [`LeastLoaded`].
    LeastLoaded(LeastLoaded),
    /// See [`PrefixAware`].
    PrefixAware(PrefixAware),
}

impl AnyRouter {
    /// The router of `kind` with load penalty `alpha` (used by prefix-aware only).
    pub fn new(kind: RouterKind, alpha: f64) -> Self {
        match kind {
            RouterKind::RoundRobin => AnyRouter::RoundRobin(RoundRobin),
            RouterKind::LeastLoaded => AnyRouter::LeastLoaded(LeastLoaded),
            RouterKind::PrefixAware => AnyRouter::PrefixAware(PrefixAware { alpha }),
        }
    }
}

impl Router for AnyRouter {
    fn needs_index(&self) -> bool {
        matches!(self, AnyRouter::PrefixAware(_))
    }
    fn route(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        match self {
            AnyRouter::RoundRobin(r) => r.route(view, keys),
            AnyRouter::LeastLoaded(r) => r.route(view, keys),
            AnyRouter::PrefixAware(r) => r.route(view, keys),
        }
    }
}
