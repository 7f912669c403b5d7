//! Running a fleet on the host, for either engine: one driver ([`drive`]: owned buffers, the
//! memory budget, retry on a full buffer), the requests' sources ([`source`]), what a run
//! collects ([`collect`]) and its summary ([`summary`]: one type with each engine's part).

pub mod bench_json;
pub mod collect;
pub mod conversation;
pub mod deploy;
pub mod drive;
pub mod engines;
pub mod fields;
pub mod llmd_report;
pub mod loadgen;
pub mod outcomes;
pub mod pipeline;
pub mod progress;
pub mod retime;
pub mod sizes;
pub mod source;
pub mod stages;
pub mod summary;

use brokerlab_core::fleet::{Completion, EngineConfig, Error as CoreError, FleetConfig, LruPod, Outcome};

pub use self::drive::{Driving, HostEngine, Ran, Shape, drive};
pub use self::engines::{Batched, Fifo, FifoSizes, OwnedFifo, OwnedRouter, fifo_needs, index_runs_layout, runs_layout};
pub use self::source::{EmbeddedTrace, ParsedTrace, RequestSource, TraceSource, restart_error_for};
pub use self::summary::{
    AutoscaleSummary, BatchedSummary, EngineKind, RunSummary, Summary, exact_percentiles, render_batched, render_table,
    secs,
};
use crate::error::{CliError, CliResult, FleetError};

/// Runs `cfg` (an engine `K` configuration) over `source`; with `keep`, keeps what each request
/// did. On a full buffer the run starts over with a larger one (deterministic: the same result).
pub fn simulate<K: HostEngine>(
    cfg: FleetConfig,
    source: &mut dyn RequestSource,
    keep: bool,
) -> CliResult<Ran<K::Summary>> {
    simulate_slo::<K>(cfg, source, keep, None)
}

/// [`simulate`] counting the requests that meet `slo` (SLO goodput).
pub fn simulate_slo<K: HostEngine>(
    cfg: FleetConfig,
    source: &mut dyn RequestSource,
    keep: bool,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
) -> CliResult<Ran<K::Summary>> {
    let run = Shape {
        slo,
        keep,
        restart_error: source.restart_error(),
        group_blocks: source.id_blocks(),
        requests: source.len_hint(),
        ..Shape::default()
    };
    drive::<K>(cfg, &run, &mut |d| {
        if let Some(g) = d.growth() {
            source.grow_into(&g);
        }
        source.feed(&mut |req| d.dispatch(req))
    })
}

/// A run's result under whichever engine `cfg` names.
pub struct RunResult {
    /// Its summary.
    pub summary: RunSummary,
    /// The FIFO engine's outcomes, in dispatch order (with `keep`).
    pub outcomes: Vec<Outcome>,
    /// The batched engine's completions, in completion order (with `keep`).
    pub completions: Vec<Completion>,
}

impl RunResult {
    /// The result of `r`, its summary as `f` makes it.
    pub fn of<S>(r: Ran<S>, f: impl FnOnce(S) -> RunSummary) -> Self {
        RunResult { summary: f(r.summary), outcomes: r.outcomes, completions: r.completions }
    }
}

/// [`simulate`] under the engine `cfg` names.
pub fn simulate_any(
    cfg: FleetConfig,
    source: &mut dyn RequestSource,
    keep: bool,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
) -> CliResult<RunResult> {
    match cfg.engine {
        EngineConfig::Fifo { .. } => {
            Ok(RunResult::of(simulate_slo::<Fifo>(cfg, source, keep, slo)?, |s| RunSummary::Fifo(Box::new(s))))
        }
        EngineConfig::Batched(_) => {
            Ok(RunResult::of(simulate_slo::<Batched>(cfg, source, keep, slo)?, |s| RunSummary::Batched(Box::new(s))))
        }
    }
}

/// Checks the memory budget for a FIFO run of `cfg` with these sizes over `requests` requests
/// (when known): the fleet's buffers (the audit's formulas) and the per-request vectors.
pub fn check_memory(cfg: &FleetConfig, sizes: FifoSizes, requests: Option<u64>, keep: bool) -> CliResult<()> {
    let run = Shape { keep, group_blocks: 1, requests, ..Shape::default() };
    let (context, needs) = fifo_needs(cfg, sizes, &run)?;
    crate::mem::check(&context, &needs).map(|_| ())
}

/// What a run of `cfg` is called in a memory-budget message.
pub fn run_context(cfg: &FleetConfig) -> String {
    format!("a run of {} pods x {} blocks", cfg.pods, cfg.capacity_blocks)
}

/// Turns a configuration error from the core into a message naming the CLI flag.
pub fn config_error(e: CoreError) -> CliError {
    match crate::fleet::run::fields::refused(e) {
        Ok((field, expected)) => FleetError::Flag { field, expected }.into(),
        Err(other) => CliError::failure(other.to_string()),
    }
}

/// Bytes of core memory per cached block of a pod of `capacity` blocks (LRU slots + key table).
pub fn pod_bytes_per_block(capacity: usize) -> f64 {
    LruPod::bytes_per_block(capacity)
}

/// `cfg` with its FIFO engine's settings changed by `f` (a FIFO configuration: the flags' or a
/// scenario's; under the batched engine, which has none of them, `cfg` as it is).
pub fn with_fifo(mut cfg: FleetConfig, f: impl FnOnce(&mut brokerlab_core::fleet::FifoConfig)) -> FleetConfig {
    if let Some(e) = cfg.fifo_mut() {
        f(e);
    }
    cfg
}

/// `cfg` with the routers' view changed by `f` (a FIFO configuration; under the batched engine,
/// whose view is always exact, `cfg` as it is).
pub fn with_view(mut cfg: FleetConfig, f: impl FnOnce(&mut brokerlab_core::fleet::ViewConfig)) -> FleetConfig {
    if let Some(v) = cfg.view_mut() {
        f(v);
    }
    cfg
}
