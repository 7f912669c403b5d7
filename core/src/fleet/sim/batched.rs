//! A fleet of batched engines behind a router (docs/MODEL.md, "The batched engine", "Fleet and
//! time"): before request i is routed at its arrival t, every pod runs the steps that start
//! before t; the router sees queue lengths, the pods' cache maps and the load signals.

use heapless::Vec as HVec;

use super::FleetConfig;
use super::kinds::{CacheMode, IndexKind};
use crate::fleet::base::error::{Error, Field};
use crate::fleet::base::limits::{BLOCK_TOKENS, MAX_PODS};
use crate::fleet::base::load::PodLoad;
use crate::fleet::engine::batched::{Engine, EngineConfig, EngineEvents, EngineStats, KvBlock, PodBuffers, ReqSlot};
use crate::fleet::route::kind::AnyRouter;
use crate::fleet::route::spec::RouterBuffers;
use crate::fleet::route::{Holders, KeyHolders, RouteView, Router};

/// Buffer lengths a batched fleet needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineLayout {
    /// Pods.
    pub pods: usize,
    /// KV blocks per pod (= capacity C).
    pub blocks_per_pod: usize,
    /// Cache-map entries per pod.
    pub table_per_pod: usize,
    /// Requests tracked at once per pod (request slots; the waiting ring has as many).
    pub requests_per_pod: usize,
    /// Running slots per pod (= max_num_seqs).
    pub running_per_pod: usize,
    /// Prompt keys kept per pod (of the requests tracked).
    pub keys_per_pod: usize,
}

impl EngineLayout {
    /// Layout for `cfg` and `engine`, tracking `requests_per_pod` requests and
    /// `keys_per_pod` of their prompt keys per pod at once.
    pub fn new(
        cfg: &FleetConfig,
        engine: &EngineConfig,
        requests_per_pod: usize,
        keys_per_pod: usize,
    ) -> Result<Self, Error> {
        validate(cfg, engine)?;
        Ok(EngineLayout {
            pods: cfg.pods,
            blocks_per_pod: cfg.capacity_blocks,
            table_per_pod: Engine::table_len(cfg.capacity_blocks),
            requests_per_pod: requests_per_pod.max(1),
            running_per_pod: engine.max_num_seqs as usize,
            keys_per_pod: keys_per_pod.max(1),
        })
    }

    /// Total bytes of the buffers.
    pub fn bytes(&self) -> usize {
        use core::mem::size_of;
        self.pods
            * (self.blocks_per_pod * size_of::<KvBlock>()
                + self.table_per_pod * 4
                + self.requests_per_pod * (size_of::<ReqSlot>() + 4)
                + self.running_per_pod * 4
                + self.keys_per_pod * 8)
    }
}

/// Checks a fleet configuration for the batched engine.
pub fn validate(cfg: &FleetConfig, engine: &EngineConfig) -> Result<(), Error> {
    cfg.validate()?;
    engine.validate()?;
    if Engine::table_len(cfg.capacity_blocks) == 0 {
        return Err(Error::InvalidConfig { field: Field::Capacity, expected: "a block count that fits in memory" });
    }
    // each staleness named by its own field (the batched engine's index is exact)
    let exact = |field| Err(Error::InvalidConfig { field, expected: "0 with --engine batched (its index is exact)" });
    if cfg.stale_delay > 0 {
        return exact(Field::Stale);
    }
    if cfg.event_delay_ns > 0 {
        return exact(Field::EventDelay);
    }
    if cfg.speculative_ttl_ns > 0 {
        return exact(Field::SpeculativeTtl);
    }
    if cfg.index != IndexKind::PodTables {
        return Err(Error::InvalidConfig { field: Field::Index, expected: "pod-tables with --engine batched" });
    }
    if cfg.cpu_capacity_blocks > 0 {
        return Err(Error::InvalidConfig { field: Field::CpuCapacity, expected: "0 with --engine batched" });
    }
    if cfg.scale.is_some() {
        return Err(Error::InvalidConfig { field: Field::ScaleMin, expected: "no autoscaling with --engine batched" });
    }
    if cfg.cache != CacheMode::Local {
        return Err(Error::InvalidConfig { field: Field::Cache, expected: "local with --engine batched" });
    }
    Ok(())
}

/// Caller-provided storage, lengths from [`EngineLayout`] (each times `pods`).
pub struct EngineBuffers<'a> {
    /// `blocks_per_pod` KV blocks per pod.
    pub blocks: &'a mut [KvBlock],
    /// `table_per_pod` cache-map entries per pod.
    pub tables: &'a mut [u32],
    /// `requests_per_pod` request slots per pod.
    pub requests: &'a mut [ReqSlot],
    /// `requests_per_pod` waiting-ring entries per pod.
    pub waiting: &'a mut [u32],
    /// `running_per_pod` running slots per pod.
    pub running: &'a mut [u32],
    /// `keys_per_pod` prompt keys per pod.
    pub keys: &'a mut [u64],
}

/// The engines' cache maps seen as an exact block index.
pub struct EngineCaches<'v, 'a> {
    engines: &'v [Engine<'a>],
}

impl KeyHolders for EngineCaches<'_, '_> {
    /// Bitmask of the `candidates` pods whose cache map holds `key`.
    #[inline]
    fn mask(&self, key: u64, candidates: u64) -> u64 {
        let mut out = 0;
        let mut rest = candidates;
        while rest != 0 {
            let p = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if self.engines.get(p).is_some_and(|e| e.contains(key)) {
                out |= 1 << p;
            }
        }
        out
    }
}

/// Where a request went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatched {
    /// Pod.
    pub pod: u32,
    /// queue_len of that pod at arrival.
    pub queue_len: u32,
    /// Blocks the router believed the pod held (prefix-aware; 0 otherwise).
    pub believed_match_blocks: u32,
}

fn chunks<'a, T>(
    buf: &'a mut [T],
    parts: usize,
    each: usize,
    name: &'static str,
) -> Result<core::slice::ChunksExactMut<'a, T>, Error> {
    if each == 0 || buf.len() != parts * each {
        return Err(Error::BufferSize { buffer: name, expected: parts * each, got: buf.len() });
    }
    Ok(buf.chunks_exact_mut(each))
}

/// N batched engines behind a router.
pub struct BatchedFleet<'a, R: Router = AnyRouter<'a>> {
    cfg: FleetConfig,
    engine: EngineConfig,
    router: R,
    engines: HVec<Engine<'a>, MAX_PODS>,
    next_request: u64,
    last_arrival_ns: u64,
    poisoned: bool,
}

impl<'a> BatchedFleet<'a, AnyRouter<'a>> {
    /// A fleet with the built-in router named by `cfg.router` (one without router-side storage;
    /// see [`Self::with_router_buffers`]).
    pub fn new(cfg: FleetConfig, engine: EngineConfig, buffers: EngineBuffers<'a>) -> Result<Self, Error> {
        Self::with_router_buffers(cfg, engine, buffers, RouterBuffers::default())
    }

    /// A fleet with the built-in router of `cfg`, its approximate index in `router`.
    pub fn with_router_buffers(
        cfg: FleetConfig,
        engine: EngineConfig,
        buffers: EngineBuffers<'a>,
        router: RouterBuffers<'a>,
    ) -> Result<Self, Error> {
        validate(&cfg, &engine)?;
        let r = AnyRouter::build(cfg.router, cfg.alpha, cfg.router_spec().as_ref(), cfg.pods, router)?;
        Self::with_router(cfg, engine, r, buffers)
    }
}

impl<'a, R: Router> BatchedFleet<'a, R> {
    /// A fleet with a custom router.
    pub fn with_router(cfg: FleetConfig, engine: EngineConfig, router: R, b: EngineBuffers<'a>) -> Result<Self, Error> {
        validate(&cfg, &engine)?;
        let n = cfg.pods;
        let per = |len: usize| len / n;
        let requests_per_pod = per(b.requests.len());
        let keys_per_pod = per(b.keys.len());
        let blocks = chunks(b.blocks, n, cfg.capacity_blocks, "engine blocks")?;
        let tables = chunks(b.tables, n, Engine::table_len(cfg.capacity_blocks), "engine tables")?;
        let reqs = chunks(b.requests, n, requests_per_pod, "engine requests")?;
        let waiting = chunks(b.waiting, n, requests_per_pod, "engine waiting")?;
        let running = chunks(b.running, n, engine.max_num_seqs as usize, "engine running")?;
        let keys = chunks(b.keys, n, keys_per_pod, "engine keys")?;
        let mut engines = HVec::new();
        for (p, (((((bl, t), r), w), ru), k)) in
            blocks.zip(tables).zip(reqs).zip(waiting).zip(running).zip(keys).enumerate()
        {
            let bufs = PodBuffers { blocks: bl, table: t, reqs: r, waiting: w, running: ru, keys: k };
            let e = Engine::new(engine, p as u32, bufs)?;
            if engines.push(e).is_err() {
                return Err(Error::InvalidConfig { field: Field::Pods, expected: "at most 64" });
            }
        }
        Ok(BatchedFleet { cfg, engine, router, engines, next_request: 0, last_arrival_ns: 0, poisoned: false })
    }

    /// The fleet configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.cfg
    }

    /// The router.
    pub fn router(&self) -> &R {
        &self.router
    }

    /// The engine configuration.
    pub fn engine_config(&self) -> &EngineConfig {
        &self.engine
    }

    /// Counters of pod `p`.
    pub fn pod_stats(&self, p: usize) -> Option<&EngineStats> {
        self.engines.get(p).map(Engine::stats)
    }

    /// The load signals of pod `p` now.
    pub fn pod_load(&self, p: usize) -> Option<PodLoad> {
        self.engines.get(p).map(Engine::load)
    }

    /// Last finish over all pods, ns.
    pub fn makespan_ns(&self) -> u64 {
        self.engines.iter().map(|e| e.stats().last_finish_ns).max().unwrap_or(0)
    }

    /// Runs the pods up to request `req`'s arrival, routes it and queues it. Finished requests
    /// and inter-token latencies go to `ev`.
    pub fn dispatch(&mut self, req: &super::Request<'_>, ev: &mut impl EngineEvents) -> Result<Dispatched, Error> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if req.keys.len() as u64 != req.input_tokens / BLOCK_TOKENS as u64 {
            return Err(Error::InvalidRequest {
                field: "keys",
                expected: "one key per full 16-token block of the prompt",
            });
        }
        if req.arrival_ns < self.last_arrival_ns {
            return Err(Error::ArrivalOutOfOrder { previous_ns: self.last_arrival_ns, arrival_ns: req.arrival_ns });
        }
        let r = self.dispatch_inner(req, ev);
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    fn dispatch_inner(&mut self, req: &super::Request<'_>, ev: &mut impl EngineEvents) -> Result<Dispatched, Error> {
        let t = req.arrival_ns;
        let i = self.next_request;
        debug_assert!(t >= self.last_arrival_ns, "arrivals are checked to be in order before dispatch");
        let mut queue_lens = [0u32; MAX_PODS];
        let mut loads = [PodLoad::default(); MAX_PODS];
        for (p, e) in self.engines.iter_mut().enumerate() {
            e.advance(t, ev)?;
            queue_lens[p] = e.queue_len_at(t);
            loads[p] = e.load();
        }
        let n = self.engines.len();
        let caches = EngineCaches { engines: &self.engines };
        let view = RouteView {
            request: i,
            queue_lens: &queue_lens[..n],
            held: Holders::Exact(&caches),
            pending: None,
            pending_stores: None,
            speculative: None,
            loads: Some(&loads[..n]),
            now_ns: t,
        };
        let route = self.router.route(&view, req.keys);
        let p = route.pod;
        if p >= n {
            return Err(Error::InvalidConfig {
                field: Field::Router,
                expected: "a pod index below the number of pods",
            });
        }
        self.router.routed(p, req.keys, t)?;
        self.engines[p].enqueue(i, t, req.input_tokens, req.output_tokens, req.keys, queue_lens[p])?;
        self.next_request += 1;
        self.last_arrival_ns = t;
        Ok(Dispatched { pod: p as u32, queue_len: queue_lens[p], believed_match_blocks: route.believed_match_blocks })
    }

    /// Runs the pod whose next step starts first, if that is before `t_ns`: one step, or a run
    /// of decode steps that finishes no request, cut so that each starts at most when another
    /// pod's next step does. Returns false when no step starts before `t_ns`.
    ///
    /// For closed loops (docs/MODEL.md, "dynamo"), where a completion makes the next arrival:
    /// steps run in order of start over the fleet, and a step lasts at least 1 ns (a
    /// `t_overhead_ns` of at least 1), so a completion reported later ends after every step
    /// already run; an arrival it causes then sees the pods as [`Self::dispatch`] would (every
    /// step before it run, no other).
    pub fn advance_next(&mut self, t_ns: u64, ev: &mut impl EngineEvents) -> Result<bool, Error> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        let starts = || self.engines.iter().enumerate().filter_map(|(p, e)| e.next_step_ns().map(|s| (p, s)));
        // The earliest next step (the lowest pod on ties), and the earliest of the other pods'.
        let Some((p, s)) = starts().min_by_key(|&(_, s)| s) else { return Ok(false) };
        let other_ns = starts().filter(|&(q, _)| q != p).map(|(_, s)| s).min().unwrap_or(u64::MAX);
        if s >= t_ns {
            return Ok(false);
        }
        let ff_ns = t_ns.min(other_ns.saturating_add(1));
        let r = self.engines[p].advance_once(t_ns, ff_ns, ev);
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    /// Runs every pod until it has no work.
    pub fn finish(&mut self, ev: &mut impl EngineEvents) -> Result<(), Error> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        for e in self.engines.iter_mut() {
            if let Err(err) = e.advance(u64::MAX, ev) {
                self.poisoned = true;
                return Err(err);
            }
            debug_assert!(e.is_idle(), "a pod advanced to the end of time has no work left");
        }
        Ok(())
    }
}
