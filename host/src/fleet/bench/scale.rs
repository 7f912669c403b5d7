//! `fleet bench --scale`: a generated trace of 1M requests replayed on 1,024 pods with
//! `llm-d-precise` under the batched engine, streamed (the generator is seeded and sequential,
//! so no request is held), with the wall time, simulated requests/s and the peak resident set
//! (getrusage `ru_maxrss`) at 1/8, 1/4, 1/2 and all of the trace: memory flat in trace length
//! means the four figures are the same.
//!
//! The trace is the workload `fleet gen-trace` would write for [`SCALE_SCENARIO`] (replaying that
//! file with `--trace-block-size 16` gives exactly the direct run's results: docs/MODEL.md),
//! fed to the fleet as it is generated instead of through a file.

use std::time::Instant;

use brokerlab_core::fleet::{BatchedConfig, FleetConfig, Profile, Request, RouterKind};
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::fleet::run::{Batched, RequestSource};
use crate::fleet::scenario::{Scenario, Streamed};

/// The workload of the scale bench (requests, pods and the rate are set from the flags): 4,096
/// tenants of a 2,048-token shared prefix, 64-512-token questions, 32-256-token answers, uniform
/// popularity, Poisson arrivals at [`RATE_MILLI_PER_POD`] per pod (about 4,000 requests/s on
/// 1,024 pods: the fleet keeps up, so queues stay short and the run's memory is its buffers).
pub const SCALE_SCENARIO: &str = r#"
name = "scale"
description = "fleet bench --scale: 4096 tenants, 2048-token prefix, 64-512-token suffix, uniform"

[workload]
seed = 28
requests = 1000000
tenants = 4096
users_per_tenant = 20
prefix_tokens = 2048
suffix_tokens = [64, 512]
output_tokens = [32, 256]
popularity = "uniform"
rate_per_s = 4000.0
layout = "stable-prefix-first"

[fleet]
pods = 1024
capacity = 19208
router = "llm-d-precise"
alpha = 1.0
"#;

/// Arrival rate per pod, requests/s x 1000 (3.906 requests/s: 4,000 on 1,024 pods).
pub const RATE_MILLI_PER_POD: u64 = 3_906;

/// Blocks per pod: llm-d's Qwen3-32B pod on 2 x H100 (307,328 KV tokens), as `fleet compare`.
pub const SCALE_CAPACITY: usize = crate::fleet::cli::compare::DEFAULT_CAPACITY_BLOCKS;

/// The peak resident set when a share of the trace had been fed.
#[derive(Debug, Clone, Serialize)]
pub struct Checkpoint {
    /// Requests fed so far.
    pub requests: u64,
    /// Wall time since the replay started, s.
    pub wall_s: f64,
    /// Peak resident set of the process so far, bytes (None: not readable here).
    pub peak_rss_bytes: Option<u64>,
}

/// The scale bench's report.
#[derive(Debug, Serialize)]
pub struct ScaleBench {
    /// Requests of the generated trace.
    pub requests: u64,
    /// Pods.
    pub pods: usize,
    /// Blocks per pod.
    pub capacity: usize,
    /// Router.
    pub router: RouterKind,
    /// Arrival rate, requests/s.
    pub rate_per_s: f64,
    /// Generating and hashing the trace alone (no replay), s: the "read the trace" time.
    pub generate_s: f64,
    /// The replay, generation included (buffers, dispatch, draining, summary), s.
    pub wall_s: f64,
    /// wall_s / generate_s.
    pub wall_over_generate: f64,
    /// Simulated requests per wall second.
    pub requests_per_s: f64,
    /// CPU time of the process during the replay, s.
    pub cpu_s: Option<f64>,
    /// The same replay with the generator on a thread of its own (generating and hashing while
    /// this thread replays), s; its whole summary checked equal.
    pub pipelined_wall_s: f64,
    /// CPU time of the process (both threads) during it, s.
    pub pipelined_cpu_s: Option<f64>,
    /// The time the replaying thread waited for the generator's batches in it, s: the replay's
    /// own time is the wall less this.
    pub pipelined_wait_s: f64,
    /// Peak resident set at 1/8, 1/4, 1/2 and all of the trace fed.
    pub checkpoints: Vec<Checkpoint>,
    /// Peak resident set at the end (summary included), bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Engine steps simulated.
    pub steps: u64,
    /// Simulated makespan, s.
    pub makespan_s: f64,
    /// Token hit rate.
    pub hit_rate: Option<f64>,
    /// Simulated TTFT p90, s.
    pub ttft_p90: Option<f64>,
    /// Preemptions.
    pub preemptions: u64,
}

/// The scale bench's fleet and workload: `requests` requests on `pods` pods.
pub fn scale_setup(requests: u64, pods: usize) -> CliResult<(Scenario, FleetConfig)> {
    let mut sc = Scenario::parse(SCALE_SCENARIO, "fleet bench --scale", "scale")?;
    sc.workload.requests = requests;
    sc.workload.rate_milli_per_s = RATE_MILLI_PER_POD * pods as u64;
    let mut cfg = FleetConfig { pods, capacity_blocks: SCALE_CAPACITY, ..sc.fleet };
    cfg.validate().map_err(crate::fleet::run::config_error)?;
    crate::fleet::cli::router_config::apply(&mut cfg, None, sc.workload.seed)?;
    let cfg = crate::fleet::scenario::engine::batched(cfg, BatchedConfig::new(Profile::Qwen3_32bH100x2))
        .map_err(crate::fleet::run::config_error)?;
    Ok((sc, cfg))
}

/// A streamed workload that notes the peak resident set when the requests fed reach each of
/// `marks` (a retried feed starts the notes over).
struct Checkpointed<'m> {
    inner: Streamed,
    marks: &'m [u64],
    start: Instant,
    notes: Vec<Checkpoint>,
}

impl RequestSource for Checkpointed<'_> {
    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> CliResult<()> {
        self.notes.clear();
        let (marks, start) = (self.marks, self.start);
        let notes = &mut self.notes;
        let mut fed = 0u64;
        self.inner.feed(&mut |req| {
            sink(req)?;
            fed += 1;
            if marks.contains(&fed) {
                let wall_s = start.elapsed().as_secs_f64();
                notes.push(Checkpoint { requests: fed, wall_s, peak_rss_bytes: crate::sys::peak_rss_bytes() });
            }
            Ok(())
        })
    }

    fn len_hint(&self) -> Option<u64> {
        self.inner.len_hint()
    }
}

/// Runs the scale bench: `requests` generated requests on `pods` pods, `llm-d-precise`, the
/// batched engine.
pub fn run(requests: u64, pods: usize) -> CliResult<ScaleBench> {
    let (sc, cfg) = scale_setup(requests, pods)?;
    // The generation alone, timed: every request generated and its block keys hashed.
    let t = Instant::now();
    let mut gen_only = Streamed::new(sc.workload, &sc.origin)?;
    let mut n = 0u64;
    gen_only.each(&mut |_, keys| {
        n += std::hint::black_box(keys.len() as u64).min(1);
        true
    })?;
    let generate_s = t.elapsed().as_secs_f64();
    if n != requests {
        return Err(CliError::failure(format!("bench --scale: generated {n} requests, expected {requests}")));
    }
    drop(gen_only);
    let marks = [requests / 8, requests / 4, requests / 2, requests];
    let mut src = Checkpointed {
        inner: Streamed::new(sc.workload, &sc.origin)?,
        marks: &marks,
        start: Instant::now(),
        notes: vec![],
    };
    let cpu0 = crate::sys::process_cpu_s();
    let t = Instant::now();
    src.start = t;
    let ran = crate::fleet::run::simulate::<Batched>(cfg, &mut src, false)?;
    let wall_s = t.elapsed().as_secs_f64();
    let cpu_s = crate::sys::process_cpu_s().zip(cpu0).map(|(b, a)| b - a);
    let notes = std::mem::take(&mut src.notes);
    drop(src);
    // The same with the generator on its own thread (fleet run's default on 2 cores).
    let mut inner = Streamed::new(sc.workload, &sc.origin)?;
    inner.set_pipelined(true);
    // (its peak RSS is not noted: the process's peak is the first replay's)
    let mut src = Checkpointed { inner, marks: &[], start: Instant::now(), notes: vec![] };
    let waited = &crate::fleet::run::pipeline::WAITED_NS;
    let w0 = waited.load(std::sync::atomic::Ordering::Relaxed);
    let cpu0 = crate::sys::process_cpu_s();
    let t = Instant::now();
    src.start = t;
    let piped = crate::fleet::run::simulate::<Batched>(cfg, &mut src, false)?;
    let pipelined_wall_s = t.elapsed().as_secs_f64();
    let pipelined_cpu_s = crate::sys::process_cpu_s().zip(cpu0).map(|(b, a)| b - a);
    let pipelined_wait_s = (waited.load(std::sync::atomic::Ordering::Relaxed) - w0) as f64 / 1e9;
    if piped.summary != ran.summary {
        return Err(CliError::failure(
            "bench --scale: the replay with the generator on its own thread gives a different summary",
        ));
    }
    let s = ran.summary;
    Ok(ScaleBench {
        requests,
        pods,
        capacity: cfg.capacity_blocks,
        router: cfg.router,
        rate_per_s: sc.workload.rate_milli_per_s as f64 / 1000.0,
        generate_s,
        wall_s,
        wall_over_generate: wall_s / generate_s.max(1e-9),
        requests_per_s: requests as f64 / wall_s,
        cpu_s,
        pipelined_wall_s,
        pipelined_cpu_s,
        pipelined_wait_s,
        checkpoints: notes,
        peak_rss_bytes: crate::sys::peak_rss_bytes(),
        steps: s.steps,
        makespan_s: s.makespan_s,
        hit_rate: s.hit_rate,
        ttft_p90: s.ttft_p90,
        preemptions: s.preemptions,
    })
}

fn mb(b: Option<u64>) -> String {
    b.map_or("n/a".into(), |b| format!("{:.0} MB", b as f64 / 1e6))
}

/// The scale bench, readable.
pub fn render(r: &ScaleBench) -> String {
    let mut o = format!(
        "scale: a generated trace of {} requests (4,096 tenants, 2,048-token prefix, Poisson {:.0} requests/s), streamed,\n\
         on {} pods x {} blocks, {}, batched engine (qwen3-32b-h100x2)\n",
        r.requests,
        r.rate_per_s,
        r.pods,
        r.capacity,
        r.router.name()
    );
    o += &format!("  generate + hash the trace alone  {:>8.2} s\n", r.generate_s);
    o += &format!(
        "  replay (generation included)     {:>8.2} s  ({:.2}x the generation; {:.0} simulated requests/s)\n",
        r.wall_s, r.wall_over_generate, r.requests_per_s
    );
    let cpu = |c: Option<f64>| c.map_or("n/a".into(), |c| format!("{c:.2} s"));
    o += &format!("  CPU time of the replay           {:>8}\n", cpu(r.cpu_s));
    o += &format!(
        "  replay, generator on its own thread {:>5.2} s  ({:.2}x the generation; CPU {}; the replay waited {:.2} s for the generator; summary checked equal)\n",
        r.pipelined_wall_s,
        r.pipelined_wall_s / r.generate_s.max(1e-9),
        cpu(r.pipelined_cpu_s),
        r.pipelined_wait_s
    );
    o += "  peak RSS as the trace is fed:";
    for c in &r.checkpoints {
        o += &format!("  {} requests {} ({:.1} s)", c.requests, mb(c.peak_rss_bytes), c.wall_s);
    }
    o += &format!("\n  peak RSS at the end (summary included) {}\n", mb(r.peak_rss_bytes));
    o += &format!(
        "  simulated: {} steps, makespan {:.1} s, hit rate {:.2}%, TTFT p90 {:.3} s, {} preemptions\n",
        r.steps,
        r.makespan_s,
        r.hit_rate.unwrap_or(f64::NAN) * 100.0,
        r.ttft_p90.unwrap_or(f64::NAN),
        r.preemptions
    );
    o
}
