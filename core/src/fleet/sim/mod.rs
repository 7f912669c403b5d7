//! The fleet: N pods of one engine behind a router, dispatching one request at a time in arrival
//! order (docs/MODEL.md is the specification this follows). One type, [`Fleet`], for any engine
//! ([`FleetEngine`]: the FIFO single server, [`fifo`]; the batched engine, [`batched`]) and any
//! router; the fleet-level features (the routers' view of the caches, [`view`]; autoscaling,
//! [`scale`]) live here once.

pub mod batched;
pub mod calendar;
pub mod config;
pub mod defaults;
pub mod fifo;
pub mod pd;
pub mod pools;
pub mod scale;
pub mod view;
pub mod wva;

use heapless::Vec as HVec;

use self::config::FleetConfig;
use self::scale::{ScaleAction, ScaleState};
use self::view::View;
use self::wva::{Sample, ScaleEvent, ScaleEventKind, WvaState};
use crate::fleet::base::error::{Buffer, Error, Field, RequestField};
use crate::fleet::base::limits::{BLOCK_TOKENS, MAX_PODS};
use crate::fleet::base::load::PodLoad;
use crate::fleet::cache::heads::HeadIndex;
use crate::fleet::engine::{Engine, EngineEvents, Request, Routed};
use crate::fleet::route::kind::AnyRouter;
use crate::fleet::route::spec::RouterBuffers;
use crate::fleet::route::{Holders, KeyHolders, Route, RouteView, Router};

/// What [`FleetEngine::pods`] builds: the pods' engines, the storage they share, the view's part
/// of the buffers, the P/D part and the WVA autoscaler's part (empty but for an autoscaled
/// batched fleet).
pub type PodsOf<'a, E> =
    (HVec<E, MAX_PODS>, <E as Engine>::Shared, view::ViewBuffers<'a>, pd::PdBuffers<'a>, &'a mut [wva::WvaPod]);

/// The error of a fleet built by one engine from a configuration of the other.
pub(crate) fn wrong_engine(expected: &'static str) -> Error {
    Error::InvalidConfig { field: crate::fleet::base::error::Field::Engine, expected }
}

/// An engine the fleet can build from a [`FleetConfig`] and caller buffers.
pub trait FleetEngine<'a>: Engine {
    /// The engine's own configuration (a variant of [`config::EngineConfig`]).
    type Config: Copy;
    /// Caller storage of the pods (and of the routers' view, for the engines that support a
    /// stale or global view), lengths from the engine's layout.
    type Buffers;

    /// This engine's configuration in `cfg` (None when `cfg` configures another engine).
    fn config(cfg: &FleetConfig) -> Option<Self::Config>;

    /// The pods of `cfg` (already checked; its engine `engine`) over `b`, the storage they share,
    /// and the part of `b` that is the view's. An error when a buffer's length is wrong.
    fn pods(cfg: &FleetConfig, engine: &Self::Config, b: Self::Buffers) -> Result<PodsOf<'a, Self>, Error>;

    /// Counts a served request in the fleet's totals (the figures an engine knows at dispatch).
    fn count(totals: &mut FleetTotals, out: &Self::Outcome);

    /// A P/D dispatch's outcome (only the batched engine runs P/D).
    fn outcome_of(_routed: Routed) -> Result<Self::Outcome, Error> {
        Err(Error::InvalidConfig { field: Field::PrefillPods, expected: "0 unless --engine batched" })
    }

    /// The first-key index ([`Fleet::attach_heads`]): gives the pod a log of the keys whose
    /// presence in its cache changes; false when the engine keeps none.
    fn attach_key_log(&mut self, _log: &'a mut [u64]) -> bool {
        false
    }

    /// The keys logged since [`Self::clear_changed_keys`], and whether the log overflowed.
    fn changed_keys(&self) -> (&[u64], bool) {
        (&[], true)
    }

    /// Empties the changed-key log.
    fn clear_changed_keys(&mut self) {}

    /// Whether the pod's cache holds `key` (the exact view of one pod).
    fn caches(&self, _key: u64) -> bool {
        false
    }
}

/// Brings the first-key index up to date with pod `p`'s logged changes (each logged key the
/// index keeps has its bit read from the pod's own map; after an overflow, every kept key's).
#[inline]
fn sync_heads<'a, E: FleetEngine<'a>>(ix: &mut Option<HeadIndex<'a>>, p: usize, pod: &mut E) {
    let Some(ix) = ix.as_mut() else { return };
    let (keys, over) = pod.changed_keys();
    if over {
        ix.resync_pod(p, |k| pod.caches(k));
    } else if keys.is_empty() {
        return;
    } else {
        for &k in keys {
            ix.note(k, p, || pod.caches(k));
        }
    }
    pod.clear_changed_keys();
}

/// Runs pod `p` to `t_ns` (as [`Engine::advance`]), bringing the first-key index up to date
/// after each event.
#[inline]
fn advance_pod<'a, E: FleetEngine<'a>>(
    ix: &mut Option<HeadIndex<'a>>,
    p: usize,
    pod: &mut E,
    t_ns: u64,
    ev: &mut impl EngineEvents,
) -> Result<(), Error> {
    if ix.is_none() {
        return pod.advance(t_ns, ev);
    }
    while pod.advance_once(t_ns, t_ns, ev)? {
        sync_heads(ix, p, pod);
    }
    Ok(())
}

/// Fleet-wide counters. The batched engine counts in its pods ([`Engine::stats`]): its figures
/// here are the requests, tokens asked for and pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FleetTotals {
    /// Requests dispatched.
    pub requests: u64,
    /// Sum of L.
    pub input_tokens: u64,
    /// Sum of O.
    pub output_tokens: u64,
    /// Sum of hit tokens.
    pub hit_tokens: u64,
    /// Sum of tokens loaded from CPU tiers.
    pub cpu_hit_tokens: u64,
    /// Sum of prefill tokens.
    pub prefill_tokens: u64,
    /// Sum of latencies, ns.
    pub latency_ns_sum: u64,
    /// Requests where the router believed in more blocks than the pod had (stale chases).
    pub chased_requests: u64,
    /// Sum over requests of believed - actual blocks, when positive.
    pub phantom_blocks: u64,
    /// Last finish time, ns.
    pub makespan_ns: u64,
    /// Pods booted by the autoscaler.
    pub scale_outs: u64,
    /// Pods dropped by the autoscaler.
    pub scale_ins: u64,
    /// Most routable pods at any arrival.
    pub max_active_pods: u32,
    /// Requests routed while more pods than `initial_pods` were routable (autoscaling only).
    pub scaled_out_requests: u64,
    /// Of those, requests routed to a pod the autoscaler added (index >= `initial_pods`).
    pub new_pod_requests: u64,
    /// Their fair share: the sum over those requests of 1000 (active - initial) / active, rounded
    /// down. `new_pod_requests * 1000 / fair_new_pod_milli` is 1 when the router spreads
    /// load onto new pods like round-robin, below 1 when it keeps traffic on the warm ones.
    pub fair_new_pod_milli: u64,
    /// Sum over the routing decisions of the waiting requests each routable pod's load signal
    /// showed the router then (the scraped gauge with `metrics_scrape_ns` > 0): what GIE's EPP
    /// logs at each scheduling cycle (docs/MODEL.md, "Load signals"; P/D dispatches not counted).
    pub routed_waiting: u64,
    /// Pods sampled into [`Self::routed_waiting`]: the routable pods, summed over the decisions.
    pub routed_waiting_samples: u64,
}

/// The pods' own caches seen as the exact index: each engine answers for its pods.
pub struct Exact<'v, E: Engine> {
    pods: &'v [E],
    shared: &'v E::Shared,
    /// The fleet's first-key index, when it keeps one: the same answers for the keys it keeps.
    heads: Option<&'v HeadIndex<'v>>,
    /// Whether the engines may answer the leading matches themselves ([`Engine::leads`]: false
    /// skips asking them).
    lead: bool,
    /// Whether the matches may be walked pod by pod ([`KeyHolders::runs_by_pod`]; not on the
    /// reference path, which walks key by key).
    by_pod: bool,
}

/// Fewest candidate pods for which the exact view looks a key up in the first-key index (one
/// lookup) before asking the pods' maps (a probe of each candidate's). Any value gives the same
/// answers.
const HEADS_MIN_CANDIDATES: u32 = 8;

impl<E: Engine> KeyHolders for Exact<'_, E> {
    #[inline]
    fn mask(&self, key: u64, word: usize, candidates: u64) -> u64 {
        E::holds(self.pods, self.shared, key, word, candidates)
    }
    #[inline]
    fn holders_into(&self, key: u64, candidates: &[u64], out: &mut [u64]) -> bool {
        let Some(ix) = self.heads else { return false };
        if candidates.iter().map(|c| c.count_ones()).sum::<u32>() < HEADS_MIN_CANDIDATES {
            return false;
        }
        let Some(slot) = ix.find(key) else { return false };
        let held = ix.holders(slot);
        for (w, (o, &c)) in out.iter_mut().zip(candidates).enumerate() {
            *o = held.get(w).map_or(0, |h| h & c);
        }
        true
    }
    #[inline]
    fn leading_matches(&self, keys: &[u64], out: &mut [u32]) -> bool {
        self.lead && E::leading_matches(self.pods, self.shared, keys, out)
    }
    #[inline]
    fn runs_by_pod(&self) -> bool {
        self.by_pod
    }
    #[inline]
    fn leading_run(&self, pod: usize, keys: &[u64]) -> u32 {
        E::leading_run(self.pods, self.shared, pod, keys)
    }
}

/// N pods of engine `E` behind router `R`.
pub struct Fleet<'a, E: FleetEngine<'a>, R: Router = AnyRouter<'a>> {
    cfg: FleetConfig,
    engine: E::Config,
    router: R,
    pods: HVec<E, MAX_PODS>,
    shared: E::Shared,
    view: View<'a>,
    scale: Option<ScaleState>,
    /// Autoscaling by the WVA saturation rule (the batched engine's; None otherwise), its per-pod
    /// state in the caller's buffer.
    wva: Option<WvaState<'a>>,
    /// What the WVA scaler did during the last dispatch (or [`Self::finish`]).
    scale_events: HVec<ScaleEvent, 6>,
    /// Prefill/decode disaggregation (None: every pod aggregated).
    pd: Option<pd::PdState<'a>>,
    next_request: u64,
    last_arrival_ns: u64,
    totals: FleetTotals,
    poisoned: bool,
    /// The pods' next events and signals, for a dispatch that advances only the pods with an
    /// event before the arrival ([`calendar`]).
    calendar: calendar::Calendar,
    /// The reference path (every pod advanced and asked at every arrival), the calendar's
    /// oracle: set by tests (feature `harness`).
    reference: bool,
    /// The first prompt keys' holders ([`Self::attach_heads`]).
    heads: Option<HeadIndex<'a>>,
    /// The pods were handed out to change ([`Self::pods_mut`]): the first-key index re-reads
    /// every pod before it is next read.
    heads_stale: bool,
    /// [`Engine::leads`] of the pods, once asked (None: to ask; reset where the pods' offload
    /// tiers or cache-map forms may change).
    lead: Option<bool>,
}

impl<'a, E: FleetEngine<'a>> Fleet<'a, E, AnyRouter<'a>> {
    /// A fleet with the built-in router named by `cfg.router` (one without router-side storage;
    /// see [`Self::with_router_buffers`]).
    pub fn new(cfg: FleetConfig, buffers: E::Buffers) -> Result<Self, Error> {
        Self::with_router_buffers(cfg, buffers, RouterBuffers::default())
    }

    /// A fleet with the built-in router named by `cfg.router` and `cfg.routing`, its
    /// approximate index in `router` ([`FleetConfig::router_layout`]).
    pub fn with_router_buffers(
        cfg: FleetConfig,
        buffers: E::Buffers,
        router: RouterBuffers<'a>,
    ) -> Result<Self, Error> {
        cfg.validate()?;
        let r = AnyRouter::build(cfg.router, cfg.alpha, cfg.router_spec().as_ref(), cfg.pods, router)?;
        Self::with_router(cfg, r, buffers)
    }
}

impl<'a, E: FleetEngine<'a>, R: Router> Fleet<'a, E, R> {
    /// A fleet with a custom router. `cfg.router` is ignored except for buffer sizing.
    pub fn with_router(cfg: FleetConfig, router: R, b: E::Buffers) -> Result<Self, Error> {
        cfg.validate()?;
        cfg.no_pools_unless_batched()?;
        let engine = E::config(&cfg).ok_or(Error::InvalidConfig {
            field: Field::Engine,
            expected: "the configuration of the engine the fleet is built for",
        })?;
        let (pods, shared, view_buffers, pd_buffers, scale_buffer) = E::pods(&cfg, &engine, b)?;
        let pd = match cfg.batched_config() {
            Some(e) => match e.pd {
                Some(p) => {
                    // with pools, a request is checked against the smallest prefill pool
                    let cp = pools::min_capacity(cfg.pools, cfg.capacity_blocks, pools::PoolRole::Prefill);
                    let p = crate::fleet::engine::pd::PdConfig {
                        prefill_capacity_blocks: cp.unwrap_or(p.prefill_capacity_blocks),
                        ..p
                    };
                    Some(pd::PdState::new(p, cfg.pods, pd_buffers)?)
                }
                None => None,
            },
            None => None,
        };
        let view = View::new(cfg.view(), router.needs_index(), cfg.pods, cfg.capacity_blocks, view_buffers)?;
        let wva_pods = if cfg.scale().is_some() && cfg.batched_config().is_some() { cfg.pods } else { 0 };
        if scale_buffer.len() != wva_pods {
            return Err(Error::BufferSize { buffer: Buffer::ScalePods, expected: wva_pods, got: scale_buffer.len() });
        }
        let (scale, wva) = match (cfg.scale(), cfg.batched_config()) {
            (None, _) => (None, None),
            (Some(policy), None) => (Some(ScaleState::new(policy, cfg.pods)?), None),
            (Some(policy), Some(e)) => (None, Some(WvaState::new(policy, e.wva, scale_buffer)?)),
        };
        // The calendar: pods that describe their signals, changed only by a dispatch's steps
        // 2 and 5 (no autoscaling, no P/D).
        let on = scale.is_none() && wva.is_none() && pd.is_none() && pods.iter().all(|e| e.signals().is_some());
        Ok(Fleet {
            cfg,
            engine,
            router,
            pods,
            shared,
            view,
            scale,
            wva,
            scale_events: HVec::new(),
            pd,
            next_request: 0,
            last_arrival_ns: 0,
            totals: FleetTotals::default(),
            poisoned: false,
            calendar: calendar::Calendar::new(on),
            reference: false,
            heads: None,
            heads_stale: false,
            lead: None,
        })
    }

    /// Keeps, for up to `keys.len()` first prompt keys (the least recently asked replaced
    /// first), the exact set of pods whose cache holds each (docs/MODEL.md, "The first-key
    /// index"): `keys` and `stamps` one entry a slot (a power of two, at least 8 slots), `bits`
    /// [`HeadIndex::words`] of the pods per slot, `logs` the pods' changed-key logs (split
    /// equally, at least one entry a pod). The exact view then answers for such a key with one
    /// lookup instead of a probe of every pod's map. Same results (core/tests/fleet_heads.rs
    /// compares it with the pods' maps). Only for a fleet whose pods keep such a log (the
    /// batched engine, per-block maps), whose router reads the exact view, without autoscaling
    /// or P/D, before its first dispatch.
    pub fn attach_heads(
        &mut self,
        keys: &'a mut [u64],
        stamps: &'a mut [u64],
        bits: &'a mut [u64],
        logs: &'a mut [u64],
    ) -> Result<(), Error> {
        let n = self.pods.len();
        if self.scale.is_some()
            || self.wva.is_some()
            || self.pd.is_some()
            || self.view.index.is_some()
            || self.next_request > 0
            || self.heads.is_some()
            || !self.router.needs_index()
        {
            return Err(Error::InvalidConfig {
                field: Field::Router,
                expected: "a first-key index only for a router reading the exact view, without autoscaling or P/D, \
                           attached once before the first request",
            });
        }
        let per = logs.len() / n.max(1);
        if per == 0 {
            return Err(Error::BufferSize { buffer: Buffer::KeyLogs, expected: n, got: logs.len() });
        }
        let ix = HeadIndex::new(keys, stamps, bits, n)?;
        let mut rest = logs;
        for pod in self.pods.iter_mut() {
            let (log, r) = core::mem::take(&mut rest).split_at_mut(per);
            rest = r;
            if !pod.attach_key_log(log) {
                return Err(Error::InvalidConfig {
                    field: Field::Engine,
                    expected: "the batched engine with per-block cache maps for a first-key index",
                });
            }
            // (the index starts empty: nothing to read)
            pod.clear_changed_keys();
        }
        self.heads = Some(ix);
        Ok(())
    }

    /// The first-key index, when the fleet keeps one.
    pub fn heads(&self) -> Option<&HeadIndex<'a>> {
        self.heads.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.cfg
    }

    /// The engine configuration of the fleet (`cfg.engine`'s): every pod's without pools; with
    /// pools ([`FleetConfig::pools`]) each pod runs its pool's variant of it
    /// ([`Engine`]'s own configuration, e.g. [`crate::fleet::BatchedEngine::config`]), and this
    /// is the base they were derived from.
    pub fn engine_config(&self) -> &E::Config {
        &self.engine
    }

    /// The router.
    pub fn router(&self) -> &R {
        &self.router
    }

    /// Fleet-wide counters so far.
    pub fn totals(&self) -> &FleetTotals {
        &self.totals
    }

    /// The pods' engines.
    pub fn pods(&self) -> &[E] {
        &self.pods
    }

    /// The pods' engines to change: test support (feature `harness`), to break an engine's
    /// state on purpose and see the fleet refuse to go on.
    #[cfg(feature = "harness")]
    pub fn pods_mut(&mut self) -> &mut [E] {
        self.calendar.fresh = false;
        self.heads_stale = self.heads.is_some();
        self.lead = None;
        &mut self.pods
    }

    /// Whether the engines may answer the leading matches themselves ([`Engine::leads`], asked
    /// once and kept; the reference path asks the engines' `leading_matches` at every decision).
    fn leads(&mut self) -> bool {
        if self.reference {
            return true;
        }
        let lead = *self.lead.get_or_insert_with(|| E::leads(&self.pods, &self.shared));
        debug_assert_eq!(lead, E::leads(&self.pods, &self.shared), "the pods' leads changed unseen");
        lead
    }

    /// Test support (feature `harness`): with `on`, the fleet takes the reference paths, the
    /// oracle of its fast ones: every pod is advanced and asked for its signals at every
    /// arrival (no calendar).
    #[cfg(feature = "harness")]
    pub fn use_reference_paths(&mut self, on: bool) {
        self.reference = on;
        self.calendar.fresh = false;
    }

    /// Whether a dispatch reads the calendar.
    fn calendar_on(&self) -> bool {
        self.calendar.on && !self.reference
    }

    /// Counters of pod `p`.
    pub fn pod_stats(&self, p: usize) -> Option<&E::Stats> {
        self.pods.get(p).map(E::stats)
    }

    /// The last finish so far, ns.
    pub fn makespan_ns(&self) -> u64 {
        let pods = self.pods.iter().map(E::last_finish_ns).max().unwrap_or(0);
        pods.max(self.totals.makespan_ns)
    }

    /// Provisioned pod-time until `end_ns`, ns: with autoscaling, see [`ScaleState::pod_ns`];
    /// without, every pod from 0 to `end_ns`.
    pub fn pod_ns(&self, end_ns: u64) -> u64 {
        match (&self.scale, &self.wva) {
            (Some(s), _) => s.pod_ns(end_ns),
            (None, Some(w)) => w.pod_ns(end_ns),
            (None, None) => end_ns.saturating_mul(self.pods.len() as u64),
        }
    }

    /// Routable pods now (all pods without autoscaling).
    pub fn active_pods(&self) -> usize {
        match (&self.scale, &self.wva) {
            (Some(s), _) => s.active(),
            (None, Some(w)) => w.active(),
            (None, None) => self.pods.len(),
        }
    }

    /// What the WVA scaler (batched engine) did during the last [`Self::dispatch`] or
    /// [`Self::finish`], in order (empty for the FIFO scaler, whose decisions show in
    /// [`FleetTotals`] and the routed requests' `active_pods`).
    pub fn scale_events(&self) -> &[ScaleEvent] {
        &self.scale_events
    }

    /// Runs the pods up to request `req`'s arrival, routes it and serves it. Completions (and
    /// the batched engine's inter-token latencies) go to `ev`.
    pub fn dispatch(&mut self, req: &Request<'_>, ev: &mut impl EngineEvents) -> Result<E::Outcome, Error> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        self.check(req)?;
        // Per-dispatch scratch of 64 entries up to 64 pods (the memory traffic of a 64-pod
        // bound), MAX_PODS above.
        let r = if self.pods.len() <= 64 {
            self.dispatch_inner::<64>(req, ev)
        } else {
            self.dispatch_inner::<MAX_PODS>(req, ev)
        };
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    fn check(&self, req: &Request<'_>) -> Result<(), Error> {
        let prompt = req.input_tokens / BLOCK_TOKENS as u64;
        let generated = self.cfg.batched_config().is_some_and(|e| e.cache_generated_tokens && e.pd.is_none());
        let with_output = (req.input_tokens + req.output_tokens) / BLOCK_TOKENS as u64;
        let n = req.keys.len() as u64;
        if n != prompt && !(generated && n == with_output) {
            return Err(Error::InvalidRequest {
                field: RequestField::Keys,
                expected: "one key per full 16-token block of the prompt (with cache_generated_tokens: or of prompt and output)",
            });
        }
        if req.arrival_ns < self.last_arrival_ns {
            return Err(Error::ArrivalOutOfOrder { previous_ns: self.last_arrival_ns, arrival_ns: req.arrival_ns });
        }
        // Pools: checked against the smallest capacity of the pools the request may be decoded
        // on, wherever it is routed (docs/MODEL.md, "Heterogeneous pools"); without pools each pod
        // checks its own (all equal).
        if !self.cfg.pools.is_empty() {
            let role = if self.pd.is_some() { pools::PoolRole::Decode } else { pools::PoolRole::Aggregated };
            let c = pools::min_capacity(self.cfg.pools, self.cfg.capacity_blocks, role).unwrap_or(0) as u64;
            let out = req.output_tokens.max(1);
            let need = req.input_tokens.saturating_add(out - 1).div_ceil(BLOCK_TOKENS as u64);
            // (an empty prompt or too long an output: the engine's own error)
            if req.input_tokens > 0 && out <= crate::fleet::base::limits::MAX_OUTPUT_TOKENS && need > c {
                return Err(Error::InvalidRequest {
                    field: RequestField::InputLength,
                    expected: crate::fleet::engine::batched::OVER_KV_CAPACITY,
                });
            }
        }
        Ok(())
    }

    fn dispatch_inner<const P: usize>(
        &mut self,
        req: &Request<'_>,
        ev: &mut impl EngineEvents,
    ) -> Result<E::Outcome, Error> {
        if self.pd.is_some() {
            let routed = self.pd_dispatch(req, ev)?;
            return E::outcome_of(routed);
        }
        let i = self.next_request;
        let t = req.arrival_ns;
        // 1. The view catches up with the events it may know of at t.
        self.view.deliver(i, t);
        // 2. Every pod runs what starts before t; queue lengths at arrival.
        let mut queue_lens = [0u32; P];
        if self.calendar_on() && self.calendar.refresh(&self.pods) {
            // only the pods with an event before t run (in pod order, as below)
            let cal = &mut self.calendar;
            let ix = &mut self.heads;
            for (p, pod) in self.pods.iter_mut().enumerate() {
                if cal.due(p, t) {
                    advance_pod(ix, p, pod, t, ev)?;
                    cal.note(p, pod);
                }
            }
            // (a pod's entry changes only when that pod runs: the same lengths as read pod by
            // pod after each pod's turn)
            cal.queue_lens(t, &mut queue_lens[..self.pods.len()]);
        } else {
            self.calendar.fresh = false;
            let ix = &mut self.heads;
            for (p, (q, pod)) in queue_lens.iter_mut().zip(self.pods.iter_mut()).enumerate() {
                advance_pod(ix, p, pod, t, ev)?;
                *q = pod.queue_len_at(t);
            }
        }
        // 3. Autoscaling: the routable pods are 0..active.
        let active = self.autoscale(i, t, &mut queue_lens)?;
        let queue_lens = &queue_lens[..active];
        // 4. Route.
        let (route, served) = self.route::<P>(i, req, queue_lens)?;
        let p = route.pod;
        // 5. Serve, feeding the pod's cache events to the view.
        let routed = Routed {
            request: i,
            pod: p as u32,
            queue_len: queue_lens[p],
            believed_match_blocks: route.believed_match_blocks,
            active_pods: active as u32,
            served_hit_blocks: served.map(|h| h as u32),
        };
        if self.calendar.fresh {
            // the calendar may have left the pod inside a run of decode steps that nothing a
            // router reads sees (`Signals::next_event_ns`): it runs them before the arrival
            advance_pod(&mut self.heads, p, &mut self.pods[p], t, ev)?;
        }
        let stamp = self.view.stamp(i, t);
        let mut feed = self.view.feed(p, stamp);
        let out = self.pods[p].serve(&mut self.shared, req, routed, &mut feed, ev)?;
        feed.finish()?;
        sync_heads(&mut self.heads, p, &mut self.pods[p]);
        if self.calendar.fresh {
            self.calendar.note(p, &self.pods[p]);
        }
        // 6. Counters.
        self.count(req, &out, p, active);
        self.next_request += 1;
        self.last_arrival_ns = t;
        Ok(out)
    }

    /// Step 4 of a dispatch: the router picks a routable pod from its view (queue lengths, the
    /// caches as the view has them, the load signals when it reads them).
    /// With the pod's hit blocks when the router served the pod's cache with its record
    /// ([`Router::routed_and_served`]).
    fn route<const P: usize>(
        &mut self,
        i: u64,
        req: &Request<'_>,
        queue_lens: &[u32],
    ) -> Result<(Route, Option<usize>), Error> {
        let active = queue_lens.len();
        let t = req.arrival_ns;
        let lead = self.leads();
        let heads = if self.track_first_key(req, active) { self.heads.as_ref() } else { None };
        let exact = Exact { pods: &self.pods, shared: &self.shared, heads, lead, by_pod: !self.reference };
        let held = match self.view.index.as_ref() {
            Some(ix) => Holders::Index(ix),
            None => Holders::Exact(&exact),
        };
        // The load signals at the decision: read by the router when it needs them, and sampled
        // for every router as the EPP logs its candidates' metrics at each scheduling cycle.
        let mut asked;
        let loads: &[PodLoad] = if self.calendar.fresh {
            // (fresh: every pod's entry is its state now, the calendar being read in place)
            self.calendar.loads(active)
        } else {
            asked = [PodLoad::default(); P];
            for (p, l) in asked[..active].iter_mut().enumerate() {
                *l = self.pods[p].load(queue_lens[p], t);
            }
            &asked[..active]
        };
        self.totals.routed_waiting += loads.iter().map(|l| u64::from(l.waiting)).sum::<u64>();
        self.totals.routed_waiting_samples += active as u64;
        let loads = self.router.needs_loads().then_some(loads);
        let view = RouteView {
            request: i,
            queue_lens,
            held,
            pending: self.view.pending.as_ref(),
            pending_stores: self.view.stores.as_ref(),
            speculative: self.view.speculative.as_ref(),
            loads,
            now_ns: t,
        };
        // The router sees the prompt's keys only (a request may carry its output's keys too,
        // with `cache_generated_tokens`).
        let keys = &req.keys[..(req.input_tokens / BLOCK_TOKENS as u64) as usize];
        let route = self.router.route(&view, keys);
        // A custom router may name a pod that does not exist or is not booted yet.
        if route.pod >= active {
            return Err(Error::InvalidConfig {
                field: Field::Router,
                expected: "a routable pod (index below the active pods)",
            });
        }
        let served = self.router.routed_and_served(route.pod, keys, req.keys, t)?;
        self.view.routed(route.pod, keys, t)?;
        Ok((route, served))
    }

    /// Whether the exact view of a routing decision reads the first-key index: the fleet keeps
    /// one and the router reads the pods' maps (not on the reference path: the pods answer
    /// there). `req`'s first prompt key is then kept in it (entered with one probe of every
    /// pod's map when new).
    fn track_first_key(&mut self, req: &Request<'_>, active: usize) -> bool {
        let Some(ix) = self.heads.as_mut() else { return false };
        if self.reference || active != self.pods.len() || self.view.index.is_some() {
            return false;
        }
        if self.heads_stale {
            self.heads_stale = false;
            for (p, pod) in self.pods.iter_mut().enumerate() {
                ix.resync_pod(p, |k| pod.caches(k));
                pod.clear_changed_keys();
            }
        }
        if req.input_tokens >= BLOCK_TOKENS as u64
            && let Some(&key) = req.keys.first()
        {
            let pods = &self.pods;
            ix.track(key, |p| pods[p].caches(key));
        }
        true
    }

    /// Runs the autoscaler at the arrival of request `i` (docs/MODEL.md, "Autoscaling"); returns
    /// the number of routable pods. `queue_lens` is updated for a pod that comes up.
    fn autoscale(&mut self, i: u64, t_ns: u64, queue_lens: &mut [u32]) -> Result<usize, Error> {
        if self.wva.is_some() {
            return self.autoscale_wva(i, t_ns, queue_lens);
        }
        let Some(scale) = self.scale.as_mut() else { return Ok(self.pods.len()) };
        // Before the rule reads the queue lengths, and again after it (a startup of 0).
        come_up(scale.activate_ready(t_ns), &mut self.pods, queue_lens)?;
        match scale.evaluate(t_ns, &queue_lens[..scale.active()])? {
            ScaleAction::Hold => {}
            ScaleAction::Out { .. } => self.totals.scale_outs += 1,
            ScaleAction::In { pod } => {
                let stamp = self.view.stamp(i, t_ns);
                let mut feed = self.view.feed(pod, stamp);
                self.pods[pod].shut_down(&mut self.shared, &mut feed)?;
                feed.finish()?;
                scale.release(pod, t_ns.max(self.pods[pod].last_finish_ns()));
                self.totals.scale_ins += 1;
            }
        }
        come_up(scale.activate_ready(t_ns), &mut self.pods, queue_lens)?;
        Ok(scale.active())
    }

    /// The WVA saturation scaler at the arrival of request `i` (docs/MODEL.md, "Autoscaling
    /// under the batched engine"): a ready pod comes up; a drain that ended drops its pod's
    /// cache; the routable pods' signals are sampled; the rule runs; a pod ready at once (startup
    /// 0) comes up. Returns the number of routable pods.
    fn autoscale_wva(&mut self, i: u64, t_ns: u64, queue_lens: &mut [u32]) -> Result<usize, Error> {
        self.scale_events.clear();
        self.wva_come_up(t_ns, queue_lens)?;
        self.end_drain(i, t_ns)?;
        let Some(w) = self.wva.as_mut() else { return Ok(self.pods.len()) };
        let pods = &self.pods;
        w.sample(t_ns, (0..w.active()).map(|p| Sample::of(&pods[p].load(queue_lens[p], t_ns))));
        let action = w.evaluate(t_ns)?;
        let active = w.active() as u32;
        match action {
            ScaleAction::Hold => {}
            ScaleAction::Out { pod, .. } => {
                self.totals.scale_outs += 1;
                self.log(t_ns, ScaleEventKind::Out, pod, active);
            }
            ScaleAction::In { pod } => {
                self.totals.scale_ins += 1;
                self.log(t_ns, ScaleEventKind::In, pod, active);
                self.end_drain(i, t_ns)?;
            }
        }
        self.wva_come_up(t_ns, queue_lens)?;
        Ok(self.wva.as_ref().map_or(self.pods.len(), WvaState::active))
    }

    /// A booting pod ready at `t_ns` comes up (a new machine: empty KV and CPU tier).
    fn wva_come_up(&mut self, t_ns: u64, queue_lens: &mut [u32]) -> Result<(), Error> {
        let Some(w) = self.wva.as_mut() else { return Ok(()) };
        if let Some(p) = w.activate_ready(t_ns) {
            let active = w.active() as u32;
            come_up(Some(p), &mut self.pods, queue_lens)?;
            self.log(t_ns, ScaleEventKind::Ready, p, active);
        }
        Ok(())
    }

    /// The draining pod, if it finished its last request by `t_ns`, drops its cache (every block
    /// evicted, least recent first, through the usual events) and stops being provisioned.
    fn end_drain(&mut self, i: u64, t_ns: u64) -> Result<(), Error> {
        let Some(w) = self.wva.as_mut() else { return Ok(()) };
        let Some(p) = w.draining() else { return Ok(()) };
        let last = self.pods[p].last_finish_ns();
        if self.pods[p].next_event_ns().is_some() || last > t_ns {
            return Ok(());
        }
        let stamp = self.view.stamp(i, t_ns);
        let mut feed = self.view.feed(p, stamp);
        self.pods[p].shut_down(&mut self.shared, &mut feed)?;
        feed.finish()?;
        let at = w.drained(last);
        let active = w.active() as u32;
        self.log(at, ScaleEventKind::Drained, p, active);
        Ok(())
    }

    fn log(&mut self, t_ns: u64, kind: ScaleEventKind, pod: usize, active: u32) {
        // at most 4 events per dispatch (ready, drained, a decision, ready or drained again)
        let _full = self.scale_events.push(ScaleEvent { t_ns, kind, pod: pod as u32, active });
        debug_assert!(_full.is_ok(), "room for every event of one dispatch");
    }

    /// Step 6: the fleet's counters.
    fn count(&mut self, req: &Request<'_>, out: &E::Outcome, p: usize, active: usize) {
        let t = &mut self.totals;
        t.requests += 1;
        t.input_tokens += req.input_tokens;
        t.output_tokens += req.output_tokens;
        t.max_active_pods = t.max_active_pods.max(active as u32);
        E::count(t, out);
        if let Some(policy) = self.cfg.scale()
            && active > policy.initial_pods as usize
        {
            let initial = policy.initial_pods as usize;
            t.scaled_out_requests += 1;
            t.new_pod_requests += u64::from(p >= initial);
            t.fair_new_pod_milli += ((active - initial) * 1000 / active) as u64;
        }
    }

    /// Runs the pod whose next event starts first, if that is before `t_ns`: one event, or a run
    /// of events that completes no request, cut so that each starts at most when another pod's
    /// next event does. Returns false when no event starts before `t_ns`.
    ///
    /// For closed loops (docs/MODEL.md, "dynamo"), where a completion makes the next arrival:
    /// events run in order of start over the fleet, and a batched step lasts at least 1 ns (a
    /// step cost of at least 1), so a completion reported later ends after every step already
    /// run; an arrival it causes then sees the pods as [`Self::dispatch`] would (every step
    /// before it run, no other). The FIFO engine has no events: its completions come with
    /// [`Self::dispatch`].
    pub fn advance_next(&mut self, t_ns: u64, ev: &mut impl EngineEvents) -> Result<bool, Error> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        self.calendar.fresh = false;
        if self.pd.is_some() {
            let r = self.pd_run(t_ns, false, true, ev);
            if r.is_err() {
                self.poisoned = true;
            }
            return r;
        }
        let starts = || self.pods.iter().enumerate().filter_map(|(p, e)| e.next_event_ns().map(|s| (p, s)));
        // The earliest next event (the lowest pod on ties), and the earliest of the other pods'.
        let Some((p, s)) = starts().min_by_key(|&(_, s)| s) else { return Ok(false) };
        let other_ns = starts().filter(|&(q, _)| q != p).map(|(_, s)| s).min().unwrap_or(u64::MAX);
        if s >= t_ns {
            return Ok(false);
        }
        let ff_ns = t_ns.min(other_ns.saturating_add(1));
        let r = self.pods[p].advance_once(t_ns, ff_ns, ev);
        sync_heads(&mut self.heads, p, &mut self.pods[p]);
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    /// Aborts request `request` at `t_ns`, its client having given up (vLLM's
    /// `Scheduler.finish_requests` with `FINISHED_ABORTED`; docs/MODEL.md, "The load
    /// generator"). The pods are asked in index order: each first runs what starts before
    /// `t_ns` (completions to `ev`), then is asked to drop the request ([`Engine::abort`]); the
    /// first that holds it drops it and ends the search (the pods after it are not run: a caller
    /// that needs every pod at `t_ns`, as the load generator's pumps do, has run them there
    /// already with [`Self::advance_next`]). Returns false, changing nothing, under P/D (not
    /// modelled: the hosts refuse a client time-out with P/D) and for a request never
    /// dispatched; false too, after every pod ran up to `t_ns`, when no pod holds it unfinished
    /// (it finished, or its engine cannot abort: the FIFO engine). An engine error poisons the
    /// fleet.
    pub fn abort(&mut self, request: u64, t_ns: u64, ev: &mut impl EngineEvents) -> Result<bool, Error> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        self.calendar.fresh = false;
        if self.pd.is_some() || request >= self.next_request {
            return Ok(false);
        }
        let mut r = Ok(false);
        let ix = &mut self.heads;
        for (p, pod) in self.pods.iter_mut().enumerate() {
            r = advance_pod(ix, p, pod, t_ns, ev).and_then(|()| pod.abort(request, t_ns));
            sync_heads(ix, p, pod);
            if r != Ok(false) {
                break;
            }
        }
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    /// Runs every pod until it has nothing left to do.
    pub fn finish(&mut self, ev: &mut impl EngineEvents) -> Result<(), Error> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        self.calendar.fresh = false;
        if self.pd.is_some() {
            let r = self.pd_run(u64::MAX, true, false, ev).map(|_| ());
            if r.is_err() {
                self.poisoned = true;
            }
            return r;
        }
        let ix = &mut self.heads;
        for (p, e) in self.pods.iter_mut().enumerate() {
            if let Err(err) = advance_pod(ix, p, e, u64::MAX, ev) {
                self.poisoned = true;
                return Err(err);
            }
            debug_assert!(e.next_event_ns().is_none(), "a pod advanced to the end of time has no work left");
        }
        if self.wva.is_some() {
            self.scale_events.clear();
            let r = self.end_drain(self.next_request, u64::MAX);
            if r.is_err() {
                self.poisoned = true;
            }
            return r;
        }
        Ok(())
    }
}

/// A pod that comes up is a new machine (its engine boots; requests of its previous life finish
/// elsewhere): nothing queued.
fn come_up<E: Engine>(pod: Option<usize>, pods: &mut [E], queue_lens: &mut [u32]) -> Result<(), Error> {
    if let Some(p) = pod {
        pods[p].boot()?;
        queue_lens[p] = 0;
    }
    Ok(())
}
