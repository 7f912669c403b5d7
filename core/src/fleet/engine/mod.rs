//! The engines: what one pod does with the requests routed to it, in time. One trait,
//! [`Engine`], that the FIFO single server ([`fifo`], over [`server`]) and vLLM-style continuous
//! batching ([`batched`]) implement; the fleet (`sim`) drives any of them behind any router.
//!
//! What the fleet asks of a pod's engine, in the order of one dispatch at arrival t
//! (docs/MODEL.md, "Fleet and time"):
//!
//! 1. [`Engine::advance`] to t: run the work that starts before t (the batched engine's steps;
//!    the FIFO server decides everything at arrival and has none), reporting completions;
//! 2. [`Engine::queue_len_at`] t and, for routers that read them, [`Engine::load`]: the signals
//!    a router sees;
//! 3. [`Engine::holds`]: which keys the pod's cache holds (the exact view);
//! 4. [`Engine::serve`] the request routed to it: the FIFO server serves it at once (its cache
//!    effects, start and finish); the batched engine queues it for its steps.
//!
//! Closed loops (a completion makes the next arrival) step the fleet event by event with
//! [`Engine::next_event_ns`] and [`Engine::advance_once`]. Cache events (a key stored or evicted)
//! go to the caller's [`CacheEvents`], which feeds the fleet's view of the caches.

pub mod batched;
pub mod fifo;
pub mod groups;
pub mod offload;
pub mod pd;
pub mod server;

use crate::fleet::base::error::Error;
use crate::fleet::base::load::PodLoad;
use crate::fleet::cache::CacheEvents;

/// One request as an engine (and the fleet) sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'k> {
    /// Arrival time, ns from the start of the run.
    pub arrival_ns: u64,
    /// Prompt length L in tokens.
    pub input_tokens: u64,
    /// Output length O in tokens.
    pub output_tokens: u64,
    /// Keys of the floor(L/16) full blocks.
    pub keys: &'k [u64],
}

/// The fleet's decision for one request, handed to the engine of the pod it chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Routed {
    /// 0-based request index, in dispatch order.
    pub request: u64,
    /// The pod.
    pub pod: u32,
    /// queue_len of that pod at arrival.
    pub queue_len: u32,
    /// Blocks the router believed the pod held (0 for routers that do not match prefixes).
    pub believed_match_blocks: u32,
    /// Routable pods when it was routed (all pods without autoscaling).
    pub active_pods: u32,
    /// The pod's hit blocks when its cache was served with the router's record (the FIFO
    /// fleet's fused tables: the router keeps the pod's cache, the engine keeps none); None:
    /// the engine serves its own cache.
    pub served_hit_blocks: Option<u32>,
}

/// A finished request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Completion {
    /// 0-based request index (dispatch order).
    pub request: u64,
    /// Pod.
    pub pod: u32,
    /// Arrival, ns.
    pub arrival_ns: u64,
    /// Time of its first output token, ns (the FIFO server has no tokens: its finish).
    pub first_token_ns: u64,
    /// Time of its last output token (its finish), ns.
    pub finish_ns: u64,
    /// Prompt length L.
    pub input_tokens: u64,
    /// Tokens produced: O' = max(O, 1) for the batched engine, O for the FIFO server.
    pub output_tokens: u64,
    /// 16 x hit blocks (the batched engine: at its first admission).
    pub hit_tokens: u64,
    /// Prefill tokens computed for it (recompute included).
    pub prefill_tokens: u64,
    /// Times it was preempted.
    pub preemptions: u32,
    /// queue_len of its pod when it was routed.
    pub queue_len: u32,
    /// 16 x blocks loaded from the pod's CPU tier at its first admission (the batched engine's
    /// offload tier; 0 without one).
    pub offload_hit_tokens: u64,
    /// Prefill/decode disaggregation ([`pd::PdOutcome::NONE`] without it).
    pub pd: pd::PdOutcome,
}

impl Completion {
    /// Time to first token, ns.
    pub fn ttft_ns(&self) -> u64 {
        self.first_token_ns - self.arrival_ns
    }
    /// End to end, ns.
    pub fn e2e_ns(&self) -> u64 {
        self.finish_ns - self.arrival_ns
    }
}

/// Receives what the engines produce.
pub trait EngineEvents {
    /// A request's completion is final: the batched engine reports it when the request finishes;
    /// the FIFO server when it serves the request (its finish is decided at its arrival).
    fn completed(&mut self, c: &Completion);
    /// `count` inter-token latency samples of `itl_ns` each (the batched engine).
    fn itl(&mut self, itl_ns: u64, count: u64);
}

/// Ignores every event.
impl EngineEvents for () {
    #[inline]
    fn completed(&mut self, _: &Completion) {}
    #[inline]
    fn itl(&mut self, _: u64, _: u64) {}
}

/// One pod's engine.
pub trait Engine: Sized {
    /// What serving a request returns at its dispatch (the FIFO server: the request's whole
    /// outcome; the batched engine: where it went).
    type Outcome: Copy;
    /// Storage the pods of one fleet share (the FIFO engine's pool under a global cache).
    type Shared;
    /// The pod's counters.
    type Stats: Copy;

    /// Serves request `req`, routed here as `routed`, at its arrival (after [`Self::advance`] to
    /// it). Cache stores and evictions go to `cache`; completions to `ev`.
    fn serve(
        &mut self,
        shared: &mut Self::Shared,
        req: &Request<'_>,
        routed: Routed,
        cache: &mut impl CacheEvents,
        ev: &mut impl EngineEvents,
    ) -> Result<Self::Outcome, Error>;

    /// If the pod's next event starts before `t_ns`, runs it (an event, or a run of events that
    /// completes nothing and whose members each start before `ff_ns` <= `t_ns`); returns whether
    /// anything ran.
    fn advance_once(&mut self, t_ns: u64, ff_ns: u64, ev: &mut impl EngineEvents) -> Result<bool, Error>;

    /// Runs every event that starts before `t_ns` (all of them for `u64::MAX`).
    fn advance(&mut self, t_ns: u64, ev: &mut impl EngineEvents) -> Result<(), Error> {
        while self.advance_once(t_ns, t_ns, ev)? {}
        Ok(())
    }

    /// Start of the pod's next event, ns (None when it has nothing to do).
    fn next_event_ns(&self) -> Option<u64>;

    /// Requests routed here with finish > `t_ns` (docs/MODEL.md: queue_len). `t_ns` must not
    /// decrease between calls.
    fn queue_len_at(&mut self, t_ns: u64) -> u32;

    /// The load signals at `t_ns`, its queue_len then being `queue_len`.
    fn load(&self, queue_len: u32, t_ns: u64) -> PodLoad;

    /// The pod's next event, queue length and load signals as functions of time until its state
    /// next changes (the fleet's calendar, `sim::calendar`), when they depend on time only
    /// through the end of the last step; None (the default) when they do not, and the fleet asks
    /// [`Self::queue_len_at`] and [`Self::load`] at every arrival.
    fn signals(&self) -> Option<Signals> {
        None
    }

    /// Bitmask of the `candidates` pods of word `word` of `pods` (a fleet's pods, pod p at index
    /// p; bit b is pod 64 word + b) whose cache holds `key`: the exact view.
    fn holds(pods: &[Self], shared: &Self::Shared, key: u64, word: usize, candidates: u64) -> u64;

    /// match_p for the pods `0..out.len()`: the longest leading run of `keys` pod p holds, when
    /// the engine computes it faster than key by key ([`Self::holds`]); false to let the caller
    /// ask key by key.
    fn leading_matches(_pods: &[Self], _shared: &Self::Shared, _keys: &[u64], _out: &mut [u32]) -> bool {
        false
    }

    /// Whether [`Self::leading_matches`] may answer for `pods` (false: it would return false,
    /// and the fleet need not ask it at each decision). The default: true (ask).
    fn leads(_pods: &[Self], _shared: &Self::Shared) -> bool {
        true
    }

    /// The longest leading run of `keys` pod `pod` of `pods` holds: key by key through
    /// [`Self::holds`] (the default), or faster when the engine knows how (same answer).
    fn leading_run(pods: &[Self], shared: &Self::Shared, pod: usize, keys: &[u64]) -> u32 {
        use crate::fleet::base::mask::WORD_PODS;
        let (word, bit) = (pod / WORD_PODS, 1u64 << (pod % WORD_PODS));
        keys.iter().take_while(|&&k| Self::holds(pods, shared, k, word, bit) != 0).count() as u32
    }

    /// Aborts request `request` at `t_ns` (its client gave up; after [`Self::advance`] to
    /// `t_ns`): the batched engine drops it from its queue or batch and frees its blocks
    /// ([`batched::BatchedEngine::abort`]). Returns false when the pod does not hold it
    /// unfinished, or cannot abort (the FIFO server decides a request whole at its arrival).
    fn abort(&mut self, _request: u64, _t_ns: u64) -> Result<bool, Error> {
        Ok(false)
    }

    /// The pod's counters.
    fn stats(&self) -> &Self::Stats;

    /// Finish of the pod's last request so far, ns.
    fn last_finish_ns(&self) -> u64;

    /// Autoscaling: the pod stops taking requests; its cache is dropped (every block evicted,
    /// least recent first, through `cache`). Requests queued on it still finish there.
    fn shut_down(&mut self, shared: &mut Self::Shared, cache: &mut impl CacheEvents) -> Result<(), Error>;

    /// Autoscaling: the pod comes up as a new machine (empty cache, empty queue).
    fn boot(&mut self) -> Result<(), Error>;

    /// P/D: queues a request routed here (its decode pod) whose prompt is prefilled elsewhere:
    /// it counts in queue_len from now, and waits for [`Self::deliver`]. Returns its slot.
    fn park(&mut self, _req: &Request<'_>, _routed: Routed, _pd: pd::PdOutcome) -> Result<u32, Error> {
        Err(pd_unsupported())
    }

    /// P/D: queues the prefill job of a request whose decode pod is `decode_pod` (its slot
    /// there `decode_slot`): the request with one output token, reported as a completion with
    /// those in its [`Completion::pd`].
    fn serve_job(
        &mut self,
        _req: &Request<'_>,
        _routed: Routed,
        _decode_pod: u32,
        _decode_slot: u32,
    ) -> Result<(), Error> {
        Err(pd_unsupported())
    }

    /// P/D: the prefill job of the request parked in `slot` finished (`job`, its completion).
    fn note_prefill(&mut self, _slot: u32, _job: &Completion) -> Result<(), Error> {
        Err(pd_unsupported())
    }

    /// P/D: the KV of the request parked in `slot` arrived at `t_ns`: it joins the waiting queue.
    fn deliver(&mut self, _slot: u32, _t_ns: u64) -> Result<(), Error> {
        Err(pd_unsupported())
    }

    /// P/D's decider: the leading run of `keys` the pod holds in any tier, unweighted.
    fn full_match(&self, _keys: &[u64]) -> u32 {
        0
    }

    /// P/D: KV bytes of one token of this pod (a transfer to it moves the prompt's blocks at this
    /// size; its pool's with pools, else the fleet's).
    fn kv_bytes_per_token(&self) -> u64 {
        0
    }
}

fn pd_unsupported() -> Error {
    Error::InvalidConfig { field: crate::fleet::base::error::Field::PrefillPods, expected: "0 unless --engine batched" }
}

/// What a router reads of a pod until the pod's state next changes: its queue length at `t`
/// is `queue_len + in_flight` while `t < in_flight_until_ns`, `queue_len` after (the batched
/// engine: |W| + |R| + parked, plus the requests that finished in the last step until that
/// step ends); its load signals do not depend on `t`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    /// Start of the pod's next event a router can see, ns (None when it has nothing to do):
    /// until then the pod's steps change none of these signals nor its cache map (the batched
    /// engine: the end of the run of identical pure-decode steps it is in, else its next
    /// step's start). The fleet runs such steps when the pod is due or routed to.
    pub next_event_ns: Option<u64>,
    /// Queue length from `in_flight_until_ns` on.
    pub queue_len: u32,
    /// Added to the queue length before `in_flight_until_ns`.
    pub in_flight: u32,
    /// See `in_flight`.
    pub in_flight_until_ns: u64,
    /// The load signals ([`Engine::load`]).
    pub load: PodLoad,
}
