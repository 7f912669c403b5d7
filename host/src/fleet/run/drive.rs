//! The one driver of a run, for any engine: size the buffers, check them against the memory
//! budget, allocate, let the caller feed the requests (a stream, or a closed loop), and when a
//! buffer fills, double it and start over. The run is deterministic, so the result is the one a
//! large enough buffer gives from the start.

use brokerlab_core::fleet::{Completion, Engine, Error as CoreError, Fleet, FleetConfig, FleetEngine, Limit, Outcome};
use brokerlab_core::fleet::{Quantity, Request};

use super::collect::{Collect, Kind, Samples};
use super::config_error;
use crate::error::{CliError, CliResult, FleetError};
use crate::mem::{self, Growth, Need};

/// An engine as the host runs it: its heap buffers, the sizes that grow, what its summary reads.
pub trait HostEngine {
    /// The core's engine over buffers borrowed for `'a`.
    type Engine<'a>: FleetEngine<'a>;
    /// Its summary.
    type Summary;
    /// The buffer sizes a run may fill (then doubled).
    type Sizes: Copy;
    /// Heap storage of one fleet.
    type Owned;
    /// The samples its summary reads (and whether it keeps completions: [`Kind::keeps_completions`]).
    const KIND: Kind;

    /// The sizes a run of `cfg` starts with.
    fn sizes(cfg: &FleetConfig) -> Self::Sizes;

    /// The sizes after `limit` was reached (None: `limit` is not one of them).
    fn grown(sizes: Self::Sizes, limit: Limit) -> Option<Self::Sizes>;

    /// What the run's fixed structures need, and what the budget's message calls the run.
    fn needs(cfg: &FleetConfig, sizes: Self::Sizes, run: &Shape<'_>) -> CliResult<(String, Vec<Need>)>;

    /// The buffers (an allocation failure is an error naming the buffer, never an abort).
    fn alloc(cfg: &FleetConfig, sizes: Self::Sizes, group_blocks: u32) -> CliResult<Self::Owned>;

    /// A fresh fleet over `owned`.
    fn fleet(owned: &mut Self::Owned) -> Result<Fleet<'_, Self::Engine<'_>>, CoreError>;

    /// What is kept of a dispatch's outcome (the FIFO engine's, whole).
    fn outcome<'a>(out: &<Self::Engine<'a> as Engine>::Outcome) -> Option<Outcome>;

    /// The summary of a finished run.
    fn summarize<'a>(fleet: &Fleet<'a, Self::Engine<'a>>, samples: &mut Samples) -> Self::Summary;
}

/// What a run is, beside its configuration: how its requests come, what it keeps, what the
/// caller holds meanwhile.
#[derive(Default)]
pub struct Shape<'h> {
    /// Keep what each request did (the FIFO engine's outcomes, the batched engine's completions).
    pub keep: bool,
    /// A closed loop: completions are kept for the driver to take as they happen.
    pub closed_loop: bool,
    /// Why the requests cannot be fed a second time, if they cannot (a pipe).
    pub restart_error: Option<String>,
    /// Blocks per trace id when every request's keys come from ids of that many blocks (the
    /// run-length replay; 1: per block).
    pub group_blocks: u32,
    /// Requests, when known before the run (the memory budget).
    pub requests: Option<u64>,
    /// What the caller holds while the run lasts (the memory budget).
    pub held: &'h [Need],
    /// SLO goodput's SLOs (None: no SLO keys).
    pub slo: Option<brokerlab_core::fleet::slo::Slo>,
}

/// A run's result.
pub struct Ran<S> {
    /// Its summary.
    pub summary: S,
    /// The FIFO engine's outcome of each request, in dispatch order (with `keep`).
    pub outcomes: Vec<Outcome>,
    /// The batched engine's completions, in completion order (with `keep`).
    pub completions: Vec<Completion>,
    /// Times the run started over with a larger buffer.
    pub restarts: u32,
}

/// The outcomes a FIFO run keeps, as named in a memory-budget message.
pub const OUTCOMES: &str = "per-request outcomes (for the breakdowns)";

/// A fleet being driven: the fleet, its events, and what its errors said about the buffers.
pub struct Driving<'f, 'a, K: HostEngine> {
    /// The fleet.
    pub fleet: &'f mut Fleet<'a, K::Engine<'a>>,
    /// Its events.
    pub sink: &'f mut Collect,
    outcomes: &'f mut Vec<Outcome>,
    keep: bool,
    full: Option<Limit>,
    overflow: Option<Quantity>,
}

impl<K: HostEngine> Driving<'_, '_, K> {
    /// Dispatches `req`, keeping its outcome when asked.
    pub fn dispatch(&mut self, req: &Request<'_>) -> Result<(), CoreError> {
        let r = self.fleet.dispatch(req, self.sink);
        let out = self.check(r)?;
        self.sink.samples.scale_events.extend_from_slice(self.fleet.scale_events());
        if self.keep
            && let Some(o) = K::outcome(&out)
        {
            if let Some(Err(e)) = self.sink.growth().map(|g| g.reserve_one(self.outcomes, OUTCOMES)) {
                self.sink.over = Some(e);
                return Err(CoreError::CapacityExceeded { limit: Limit::CallerMemory, capacity: 0 });
            }
            self.outcomes.push(o);
        }
        Ok(())
    }

    /// Aborts request `request` at `t_ns` ([`Fleet::abort`]); false when it could not.
    pub fn abort(&mut self, request: u64, t_ns: u64) -> Result<bool, CoreError> {
        let r = self.fleet.abort(request, t_ns, self.sink);
        self.check(r)
    }

    /// Runs the fleet's next event before `t_ns` ([`Fleet::advance_next`]); false when none.
    pub fn advance_next(&mut self, t_ns: u64) -> Result<bool, CoreError> {
        let r = self.fleet.advance_next(t_ns, self.sink);
        self.check(r)
    }

    /// The run's memory growth (for what a source keeps per request).
    pub fn growth(&self) -> Option<Growth> {
        self.sink.growth().cloned()
    }

    /// Passes `r` on, noting a full buffer (the run restarts with a larger one) or an overflow
    /// inside the engine's steps (no one request's: named as the engine's); stops the run (an
    /// error) once what it keeps per request has outgrown the memory budget.
    pub fn check<T>(&mut self, r: Result<T, CoreError>) -> Result<T, CoreError> {
        match &r {
            Err(CoreError::CapacityExceeded { limit, .. }) => self.full = Some(*limit),
            Err(CoreError::Overflow {
                what: what @ (Quantity::StepTime | Quantity::StepEndTime | Quantity::BatchShape),
            }) => self.overflow = Some(*what),
            _ => {}
        }
        if r.is_ok() && self.sink.over.is_some() {
            return Err(CoreError::CapacityExceeded { limit: Limit::CallerMemory, capacity: 0 });
        }
        r
    }
}

/// Runs a fleet of `cfg` with `feed` giving it its requests (it dispatches them, and for a closed
/// loop takes the completions as they happen); on a full buffer, doubles it and starts over:
/// `feed` must give the same requests again (`run.restart_error` says why it cannot, e.g. a
/// pipe).
pub fn drive<K: HostEngine>(
    cfg: FleetConfig,
    run: &Shape<'_>,
    feed: &mut dyn FnMut(&mut Driving<'_, '_, K>) -> CliResult<()>,
) -> CliResult<Ran<K::Summary>> {
    let mut sizes = K::sizes(&cfg);
    let mut restarts = 0u32;
    loop {
        let (context, needs) = K::needs(&cfg, sizes, run)?;
        let fixed = mem::check(&context, &needs)?;
        // what grows with the stream is checked as it grows (a trace's length is not known)
        let growth = Growth::new(&context, fixed);
        let mut owned = K::alloc(&cfg, sizes, run.group_blocks)?;
        let mut fleet = K::fleet(&mut owned).map_err(config_error)?;
        let mut sink = Collect::new(K::KIND, run.keep && K::KIND.keeps_completions(), run.closed_loop, Some(growth));
        sink.samples.slo = run.slo.map(|s| (s, 0));
        // pools: each sample's pod, for the per-pool percentiles
        sink.samples.pods = (!cfg.pools.is_empty() && K::KIND == Kind::Tokens).then(Vec::new);
        sink.fifo_t_decode_ns = cfg.fifo().map(|f| f.t_decode_ns);
        if let (Some(n), Kind::Latency) = (run.requests, K::KIND) {
            mem::try_grow(&mut sink.samples.e2e, n as usize, "the latencies (8 bytes per request)")?;
        }
        let mut outcomes = Vec::new();
        let mut d = Driving::<K> {
            fleet: &mut fleet,
            sink: &mut sink,
            outcomes: &mut outcomes,
            keep: run.keep,
            full: None,
            overflow: None,
        };
        let fed = feed(&mut d).and_then(|()| {
            let r = d.fleet.finish(d.sink);
            d.check(r).map_err(|e| CliError::failure(e.to_string()))?;
            d.sink.samples.scale_events.extend_from_slice(d.fleet.scale_events());
            Ok(())
        });
        let (full, overflow) = (d.full, d.overflow);
        if let Some(e) = sink.over.take() {
            return Err(e);
        }
        if let Some(what) = overflow {
            return Err(FleetError::EngineOverflow(what).into());
        }
        let grown = full.and_then(|limit| K::grown(sizes, limit));
        if grown.is_some()
            && let Some(msg) = &run.restart_error
        {
            return Err(CliError::bad_input(msg.clone()));
        }
        match (full, grown, fed) {
            (Some(_), Some(more), _) => {
                sizes = more;
                restarts += 1;
            }
            (Some(limit), None, _) => return Err(FleetError::Limit(limit).into()),
            (None, _, Err(e)) => return Err(e),
            (None, _, Ok(())) => {
                let summary = K::summarize(&fleet, &mut sink.samples);
                return Ok(Ran { summary, outcomes, completions: sink.completions, restarts });
            }
        }
    }
}
