//! The runner: the llm-d ramp under each preset and every router on the conversation trace,
//! and what each run's figures are (per stage, over the ladder).

use brokerlab_core::fleet::stats::nearest_rank_index;
use brokerlab_core::fleet::{BatchedConfig, Completion, FleetConfig, RouterKind, RouterSpec};
use serde::Serialize;

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::error::{CliError, CliResult};
use crate::fleet::report::engine::{self, MemTrace};
use crate::fleet::run::loadgen::{Sent, simulate_load};
use crate::fleet::run::{Batched, BatchedSummary, Fifo, Summary, config_error, simulate};
use crate::fleet::scenario::engine::batched;
use crate::fleet::scenario::{Generated, Scenario};
use brokerlab_core::fleet::loadgen::LoadSpec;

/// The scenario, compiled in.
pub const SCENARIO_TEXT: &str = include_str!("../../../../../scenarios/llm-d-ramp.toml");
/// Its name in messages and provenance.
pub const SCENARIO_NAME: &str = "scenarios/llm-d-ramp.toml (built in)";
/// Stages at the start of the ramp that are warmup, left out of the published summaries
/// (the 15 req/s x 50 s stage that "seats the residents").
pub const WARMUP_STAGES: usize = 1;
/// The report runs the ramp with every stage duration divided by this (the full ramp takes 9 to
/// 13 s of release-build time per preset; a quarter keeps the section near 25 s in all).
pub const REPORT_STAGE_DIVISOR: u64 = 4;
/// The report runs the first 1/this of the conversation trace (13 routers, both engines; the
/// batched engine takes about 2.4 s per router on the whole trace).
pub const REPORT_TRACE_DIVISOR: u64 = 4;
/// The FIFO engine's pods on the trace: the README's "Replaying real traces" fleet, where the
/// default alpha pins the trace to three pods.
pub const TRACE_FIFO_CAPACITY: usize = 65_536;

/// One stage of a run.
#[derive(Debug, Clone, Serialize)]
pub struct StageStats {
    /// Arrival rate, requests/s.
    pub rate_per_s: f64,
    /// Requests that arrived in the stage.
    pub requests: u64,
    /// Output tokens produced during the stage's window / its length (token times interpolated
    /// between a request's first token and its finish).
    pub output_tok_s: f64,
    /// TTFT p90 of the stage's requests, s.
    pub ttft_p90_s: Option<f64>,
}

/// One preset on the ramp.
#[derive(Debug, Clone, Serialize)]
pub struct RampRun {
    /// Preset.
    pub preset: Preset,
    /// The batched engine's summary (whole run, warmup included).
    pub summary: BatchedSummary,
    /// Per stage, warmup first.
    pub stages: Vec<StageStats>,
    /// Mean over the ladder stages of the per-stage output tok/s (the published summary's rule).
    pub ladder_output_tok_s: f64,
    /// Highest per-stage output tok/s of the ladder.
    pub peak_output_tok_s: f64,
    /// TTFT p90 over the ladder's requests, s.
    pub ttft_p90_s: Option<f64>,
    /// TTFT mean over the ladder's requests, s.
    pub ttft_mean_s: Option<f64>,
}

impl RampRun {
    /// The last stage's TTFT p90 (rate 60 on the full ladder), s.
    pub fn last_stage_ttft_p90_s(&self) -> Option<f64> {
        self.stages.last().and_then(|s| s.ttft_p90_s)
    }
}

/// One router on the conversation trace, under both engines.
#[derive(Debug, Clone, Serialize)]
pub struct TraceRun {
    /// Label.
    pub label: String,
    /// The batched engine (8 pods x 16,384 blocks).
    pub summary: BatchedSummary,
    /// The FIFO engine (8 pods x [`TRACE_FIFO_CAPACITY`] blocks, the README's fleet).
    pub fifo: Summary,
}

/// Pods that served at least a quarter of a fair share (requests / pods).
pub fn busy_pods(per_pod: &[u64]) -> usize {
    let fair = per_pod.iter().sum::<u64>() as f64 / per_pod.len().max(1) as f64;
    per_pod.iter().filter(|&&n| n as f64 >= fair / 4.0).count()
}

/// The busiest pod's requests over a fair share.
pub fn max_share(per_pod: &[u64]) -> f64 {
    let fair = per_pod.iter().sum::<u64>() as f64 / per_pod.len().max(1) as f64;
    per_pod.iter().copied().max().unwrap_or(0) as f64 / fair.max(1e-9)
}

/// Pinned: fewer than half the pods serve a quarter of their fair share (the README's alpha-1
/// run: three pods).
pub fn pinned(per_pod: &[u64]) -> bool {
    busy_pods(per_pod) * 2 < per_pod.len()
}

/// Skewed: the busiest pod serves at least twice its fair share.
pub fn skewed(per_pod: &[u64]) -> bool {
    max_share(per_pod) >= 2.0
}

/// The "death spiral" label of a run: "pinned", "skewed" or "no".
pub fn spiral(per_pod: &[u64]) -> &'static str {
    if pinned(per_pod) {
        "pinned"
    } else if skewed(per_pod) {
        "skewed"
    } else {
        "no"
    }
}

/// The section's runs.
#[derive(Debug, Clone, Serialize)]
pub struct LlmdSection {
    /// Stage durations were divided by this (1: as published).
    pub stage_divisor: u64,
    /// Requests of the ramp.
    pub ramp_requests: u64,
    /// Each preset of [`Preset::ALL`], in order.
    pub ramp: Vec<RampRun>,
    /// Requests of the conversation trace run.
    pub trace_requests: u64,
    /// Requests in the whole trace.
    pub trace_requests_in_file: u64,
    /// Every router on the trace.
    pub trace: Vec<TraceRun>,
}

impl LlmdSection {
    /// The run of `p`.
    pub fn get(&self, p: Preset) -> Option<&RampRun> {
        self.ramp.iter().find(|r| r.preset == p)
    }
}

/// The routers run on the conversation trace: (label, router, alpha): the seed's three
/// (prefix-aware at the default alpha 1 and at 16) and every shipped preset.
pub fn trace_routers() -> Vec<(String, RouterKind, f64)> {
    let mut v: Vec<(String, RouterKind, f64)> = vec![
        ("round-robin".into(), RouterKind::RoundRobin, 0.0),
        ("least-loaded".into(), RouterKind::LeastLoaded, 0.0),
    ];
    for a in [1.0, 16.0] {
        v.push((format!("prefix-aware, alpha {a}"), RouterKind::PrefixAware, a));
    }
    v.extend(RouterKind::PRESETS.iter().map(|&r| (r.to_string(), r, 1.0)));
    v
}

/// The trace's seed for the shipped routers' RNG (ties, random picks): fixed, as the trace has none.
pub const TRACE_ROUTER_SEED: u64 = 13;

/// Runs of [`run`] on the progress bar.
pub fn points() -> u64 {
    (Preset::ALL.len() + trace_routers().len()) as u64
}

/// The scenario with its stage durations divided by `divisor` (at least 1 ms each; 1: as
/// published).
pub fn scenario(divisor: u64) -> CliResult<Scenario> {
    let mut sc = Scenario::parse(SCENARIO_TEXT, SCENARIO_NAME, "llm-d-ramp")?;
    divide_stages(&mut sc, divisor);
    Ok(sc)
}

/// Divides the duration of every stage of `sc` (open-loop and load-generator stages) by
/// `divisor`, keeping at least 1 ms each (1: as written).
pub fn divide_stages(sc: &mut Scenario, divisor: u64) {
    let n = sc.workload.stages_len as usize;
    for st in &mut sc.workload.stages[..n] {
        st.duration_ms = (st.duration_ms / divisor.max(1)).max(1);
    }
    if let Some(l) = sc.load.as_mut() {
        let n = l.stages_len as usize;
        for st in &mut l.stages[..n] {
            st.duration_ms = (st.duration_ms / divisor.max(1)).max(1);
        }
    }
}

/// The batched engine's settings of the scenario.
pub fn engine(sc: &Scenario) -> CliResult<BatchedConfig> {
    let settings = sc.engine.clone().ok_or_else(|| CliError::failure(format!("{SCENARIO_NAME}: no [fleet.engine]")))?;
    settings.config(&|k| format!("{SCENARIO_NAME}: `fleet.engine.{k}`"))
}

/// Runs the section: the ramp with stage durations / ([`REPORT_STAGE_DIVISOR`] x `shrink`), the
/// conversation trace cut to its first 1/([`REPORT_TRACE_DIVISOR`] x `shrink`); `inc` after each
/// run.
pub fn run(shrink: u64, inc: &dyn Fn()) -> CliResult<LlmdSection> {
    run_scaled(REPORT_STAGE_DIVISOR * shrink.max(1), REPORT_TRACE_DIVISOR * shrink.max(1), inc)
}

/// [`run`] with explicit divisors (1, 1: the published ramp and the whole trace).
pub fn run_scaled(stage_divisor: u64, trace_divisor: u64, inc: &dyn Fn()) -> CliResult<LlmdSection> {
    let sc = scenario(stage_divisor)?;
    let e = engine(&sc)?;
    let g = Generated::with_origin(sc.workload, SCENARIO_NAME)?;
    let mut ramp = Vec::new();
    let mut ramp_requests = g.requests.len() as u64;
    for p in Preset::ALL {
        let cfg = batched(p.fleet(sc.fleet, sc.workload.seed), e).map_err(config_error)?;
        match sc.load {
            // the load generator: stages drained, their windows from what was sent
            Some(spec) => {
                let (res, sent) = simulate_load::<Batched>(cfg, &g, spec, true, None)?;
                ramp_requests = sent.len() as u64;
                let win = sent_windows(&spec, &sent);
                ramp.push(ramp_run(p, win, res.summary, &res.completions));
            }
            None => {
                let res = simulate::<Batched>(cfg, &mut &g, true)?;
                ramp.push(ramp_run(p, windows(&sc), res.summary, &res.completions));
            }
        }
        inc();
    }
    let full = MemTrace::conversation(None)?;
    let td = trace_divisor.max(1);
    let trace = if td > 1 { MemTrace::conversation(Some((full.total / td).max(1)))? } else { full };
    let ce = engine::engine_config();
    let mut runs = Vec::new();
    for (label, router, alpha) in trace_routers() {
        let mut cfg = FleetConfig::new(engine::CONVERSATION_PODS, engine::CONVERSATION_CAPACITY, router);
        cfg.alpha = alpha;
        cfg.routing = RouterSpec::preset(router).map(|mut s| {
            s.params.seed = TRACE_ROUTER_SEED;
            s
        });
        let summary = simulate::<Batched>(batched(cfg, ce).map_err(config_error)?, &mut &trace, false)?.summary;
        let fifo_cfg = FleetConfig { capacity_blocks: TRACE_FIFO_CAPACITY, ..cfg };
        let fifo = simulate::<Fifo>(fifo_cfg, &mut &trace, false)?.summary;
        runs.push(TraceRun { label, summary, fifo });
        inc();
    }
    Ok(LlmdSection {
        stage_divisor: stage_divisor.max(1),
        ramp_requests,
        ramp,
        trace_requests: trace.requests.len() as u64,
        trace_requests_in_file: trace.total,
        trace: runs,
    })
}

/// Stage windows [start, end) in ns, from t = 0.
fn windows(sc: &Scenario) -> Vec<(u64, u64, f64)> {
    let mut t = 0u64;
    sc.workload
        .stages()
        .iter()
        .map(|st| {
            let start = t;
            t += st.duration_ms * 1_000_000;
            (start, t, st.rate_milli_per_s as f64 / 1e3)
        })
        .collect()
}

/// Tokens of `c` produced in [a, b): token k (0-based, of n) at first + floor(k (finish - first)
/// / (n - 1)), i.e. spread evenly from the first token to the last (exact in integers).
pub fn tokens_in(c: &Completion, a: u64, b: u64) -> u64 {
    let (f, e, n) = (c.first_token_ns, c.finish_ns, c.output_tokens.max(1));
    let span = e.saturating_sub(f) as u128;
    if n == 1 || span == 0 {
        return if (a..b).contains(&f) { n } else { 0 };
    }
    let m = (n - 1) as u128;
    // t_k >= a  <=>  k >= ceil((a - f) m / span); t_k < b  <=>  k < ceil((b - f) m / span).
    let lo = if a <= f { 0 } else { ((a - f) as u128 * m).div_ceil(span) };
    let hi = if b <= f { 0 } else { ((b - f) as u128 * m).div_ceil(span).min(m + 1) };
    hi.saturating_sub(lo) as u64
}

fn p90_s(v: &mut [u64]) -> Option<f64> {
    v.sort_unstable();
    nearest_rank_index(v.len(), 90, 100).map(|i| v[i] as f64 / 1e9)
}

/// Stage windows of a load-generator run: [earliest send, latest client end) of each stage's
/// requests (inference-perf's total_time), with the stage's rate.
fn sent_windows(spec: &LoadSpec, sent: &[Sent]) -> Vec<(u64, u64, f64)> {
    let timeout_ns = if spec.timeout_ms == 0 { u64::MAX } else { spec.timeout_ms * 1_000_000 };
    spec.stages()
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let mine = sent.iter().filter(|s| s.stage == i as u32).filter_map(|s| s.completion);
            let (a, b) = mine.fold((u64::MAX, 0), |(a, b), c| {
                (a.min(c.arrival_ns), b.max(c.finish_ns.min(c.arrival_ns.saturating_add(timeout_ns))))
            });
            (a.min(b), b.max(a.min(b) + 1), st.rate_milli_per_s as f64 / 1e3)
        })
        .collect()
}

fn ramp_run(preset: Preset, win: Vec<(u64, u64, f64)>, summary: BatchedSummary, done: &[Completion]) -> RampRun {
    let stages: Vec<StageStats> = win
        .iter()
        .map(|&(a, b, rate)| {
            let mut ttft: Vec<u64> =
                done.iter().filter(|c| (a..b).contains(&c.arrival_ns)).map(|c| c.ttft_ns()).collect();
            let tokens: u64 = done.iter().map(|c| tokens_in(c, a, b)).sum();
            StageStats {
                rate_per_s: rate,
                requests: ttft.len() as u64,
                output_tok_s: tokens as f64 / ((b - a) as f64 / 1e9),
                ttft_p90_s: p90_s(&mut ttft),
            }
        })
        .collect();
    let ladder = &stages[WARMUP_STAGES.min(stages.len())..];
    let ladder_start = win.get(WARMUP_STAGES).map_or(0, |w| w.0);
    let mut ttft: Vec<u64> = done.iter().filter(|c| c.arrival_ns >= ladder_start).map(|c| c.ttft_ns()).collect();
    let ttft_mean_s = (!ttft.is_empty()).then(|| ttft.iter().map(|&t| t as f64).sum::<f64>() / ttft.len() as f64 / 1e9);
    RampRun {
        preset,
        summary,
        ladder_output_tok_s: ladder.iter().map(|s| s.output_tok_s).sum::<f64>() / ladder.len().max(1) as f64,
        peak_output_tok_s: ladder.iter().map(|s| s.output_tok_s).fold(0.0, f64::max),
        ttft_p90_s: p90_s(&mut ttft),
        ttft_mean_s,
        stages,
    }
}
