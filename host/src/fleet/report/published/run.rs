//! The runs behind the three tables: table 1's four schedulers on `scenarios/llm-d-ramp.toml`,
//! and the two arms of the Sticky b2b-saas run (`scenarios/sticky-b2b-saas.toml`), which is also
//! table 3's run. Figures computed by [`super::figures`] from each request.

use brokerlab_core::fleet::loadgen::Status;
use brokerlab_core::fleet::{FleetConfig, RouterKind, RouterSpec};
use serde::Serialize;

use super::cells::{TABLE1_COUNTED_OUTPUT_TOKENS, TABLE1_SERVER_QUESTION_TOKENS, TABLE1_SERVER_SYSTEM_PROMPT_TOKENS};
use super::figures::{Req, StageFigures, Summary2025, as_counted, back_to_back, per_stage, summary_2025};
use crate::error::{CliError, CliResult};
use crate::fleet::cli::router_config;
use crate::fleet::report::llmd::{self, Preset};
use crate::fleet::run::loadgen::simulate_load;
use crate::fleet::run::{Batched, config_error, simulate};
use crate::fleet::scenario::engine::{EngineSettings, batched};
use crate::fleet::scenario::{Generated, Scenario};

/// Table 1's schedulers as modelled, in the published order (precise, approximate, load,
/// random): llm-d's own scorer configurations of the benchmark file (precise 3 / 2 / 2,
/// estimated 1 / 1 / 1 with GIE v0.5.1's approximate index: 168 keys per prompt, LRU 20,420 keys), load = queue 1 + kv-cache 1, random = a seeded
/// uniform pick.
pub const TABLE1_PRESETS: [Preset; 4] = llmd::AS_BENCHMARKED;

/// The b2b-saas scenario, compiled in.
pub const B2B_TEXT: &str = include_str!("../../../../../scenarios/sticky-b2b-saas.toml");
/// Its name in messages.
pub const B2B_NAME: &str = "scenarios/sticky-b2b-saas.toml (built in)";
/// The prefix+token arm's router config, compiled in.
pub const PREFIX_TOKEN_TEXT: &str = include_str!("../../../../../docs/drafts/router-sticky-prefix-token.toml");
/// Its name in messages.
pub const PREFIX_TOKEN_NAME: &str = "docs/drafts/router-sticky-prefix-token.toml (built in)";
/// The run-req arm's router config (reasoning), compiled in.
pub const ACTIVE_REQUEST_TEXT: &str = include_str!("../../../../../docs/drafts/router-sticky-active-request.toml");
/// Its name in messages.
pub const ACTIVE_REQUEST_NAME: &str = "docs/drafts/router-sticky-active-request.toml (built in)";
/// The code-generation scenario (one level), compiled in.
pub const CODEGEN_TEXT: &str = include_str!("../../../../../scenarios/sticky-code-generation.toml");
/// Its name in messages.
pub const CODEGEN_NAME: &str = "scenarios/sticky-code-generation.toml (built in)";
/// The reasoning scenario (one level), compiled in.
pub const REASONING_TEXT: &str = include_str!("../../../../../scenarios/sticky-reasoning.toml");
/// Its name in messages.
pub const REASONING_NAME: &str = "scenarios/sticky-reasoning.toml (built in)";
/// Code-generation's concurrency levels (run_benchmark.sh @ 06d672f7 and the results rows).
pub const CODEGEN_LEVELS: [u64; 10] = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];
/// Requests per slot of a code-generation level (MAX_REQUESTS = 6 x conc).
pub const CODEGEN_PER_SLOT: u64 = 6;
/// Reasoning's concurrency levels.
pub const REASONING_LEVELS: [u64; 5] = [50, 150, 250, 350, 450];
/// Requests per slot of a reasoning level (MAX_REQUESTS = 3 x conc).
pub const REASONING_PER_SLOT: u64 = 3;

/// One run, per stage in stage order (warmup first).
#[derive(Debug, Clone, Serialize)]
pub struct StagedRun {
    /// Label.
    pub label: String,
    /// Requested rate of each stage, req/s.
    pub rates: Vec<f64>,
    /// Each stage's figures (None: no request in it).
    pub stages: Vec<Option<StageFigures>>,
    /// The model's time-weighted mean waiting requests per pod over the run.
    pub mean_waiting: Option<f64>,
    /// The waiting requests per pod the router read at its decisions (the scraped gauges), mean
    /// over decisions and pods: the 2025 report's "Wait Queue (mean)" as its EPP logged it.
    pub mean_waiting_routed: Option<f64>,
    /// Requests sent (those the gateway refused included).
    pub requests: u64,
    /// Requests the gateway refused at their send (table 1's [`TABLE1_GATEWAY_MAX_IN_FLIGHT`]).
    pub refused: u64,
    /// Preemptions.
    pub preemptions: u64,
}

impl StagedRun {
    /// The 2025 report's summary of the stages (table 1), computed from [`Self::stages`] (None
    /// when a stage is missing).
    pub fn summary_2025(&self) -> Option<Summary2025> {
        let rated: Vec<(Option<StageFigures>, u64)> =
            self.stages.iter().copied().zip(self.rates.iter().map(|r| (r * 1e3).round() as u64)).collect();
        summary_2025(&rated)
    }

    /// (achieved rate, TTFT p90, figures) of each stage but the warmup, sorted by achieved rate
    /// (as the Sticky results files print them); None if a stage is missing.
    pub fn ladder_by_rate(&self) -> Option<Vec<StageFigures>> {
        let mut v: Vec<StageFigures> = self.stages.get(1..)?.iter().copied().collect::<Option<_>>()?;
        v.sort_by(|a, b| a.achieved_rate.total_cmp(&b.achieved_rate));
        Some(v)
    }

    /// Every stage (warmup included) sorted by achieved rate; None if a stage is missing.
    pub fn all_by_rate(&self) -> Option<Vec<StageFigures>> {
        let mut v: Vec<StageFigures> = self.stages.iter().copied().collect::<Option<_>>()?;
        v.sort_by(|a, b| a.achieved_rate.total_cmp(&b.achieved_rate));
        Some(v)
    }
}

/// One concurrency level of a conversation-replay run: inference-perf's figures of its one stage.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Level {
    /// Concurrency (= conversations = seed).
    pub conc: u64,
    /// The stage's figures.
    pub figures: StageFigures,
    /// Client TPOT p90 over the successful requests, s: (last token - first token) / (output - 1)
    /// (inference-perf `reportgen/base.py` @ 3c7c4a3 L454-458).
    pub tpot_p90_s: f64,
    /// Turns the server refused for their length (prompt + output over max_model_len).
    pub refused: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Prompt tokens found in the pods' prefix caches / prompt tokens, over the level's run
    /// (NaN without prompt tokens).
    pub hit_rate: f64,
}

/// One arm of a conversation-replay workload: every level, each a separate run on a cold fleet.
#[derive(Debug, Clone, Serialize)]
pub struct LevelRun {
    /// Label.
    pub label: String,
    /// Each level in order (None: a level without a successful request).
    pub levels: Vec<Option<Level>>,
}

/// Every run of the three tables.
#[derive(Debug, Clone, Serialize)]
pub struct Tables {
    /// Stage durations were divided by this (1: as published).
    pub stage_divisor: u64,
    /// Table 1: [`TABLE1_PRESETS`] in order.
    pub table1: Vec<StagedRun>,
    /// b2b-saas: prefix+token, then the Kubernetes Service.
    pub b2b: Vec<StagedRun>,
    /// Code-generation: prefix+token, then the Kubernetes Service.
    pub codegen: Vec<LevelRun>,
    /// Reasoning: run-req, then the Kubernetes Service.
    pub reasoning: Vec<LevelRun>,
    /// Requests per slot of the conversation runs were divided by this (1: as published).
    pub conversation_divisor: u64,
    /// The shared-prefix read factor every run used (A16: the scenarios' `shared_kv_read`, or
    /// `fleet tables --shared-kv-read`), as written; None: off (every read at full price).
    pub shared_kv_read: Option<String>,
}

/// The largest stage divisor `fleet report` gives the tables, whatever its `--shrink`: at 1/8 the
/// shortest stage (3 req/s for 20 s) still sends 7 requests; shorter, stages send none and every
/// cell would read "not simulated".
pub const MAX_REPORT_DIVISOR: u64 = 8;

/// Runs of [`run`] (progress): table 1's four, b2b-saas's two, and each level of both arms of
/// code-generation and reasoning.
pub const RUNS: u64 = 6 + 2 * (CODEGEN_LEVELS.len() + REASONING_LEVELS.len()) as u64;

/// `text` parsed, its stage durations (open-loop and load-generator stages) divided by `divisor`
/// (at least 1 ms each).
fn scaled(text: &str, name: &str, default: &str, divisor: u64) -> CliResult<Scenario> {
    let mut sc = Scenario::parse(text, name, default)?;
    llmd::divide_stages(&mut sc, divisor);
    Ok(sc)
}

/// One staged run: each request's figures as the client counted them (`counted`: output tokens
/// counted per successful request, None: the generated count).
fn staged(label: String, sc: &Scenario, cfg: FleetConfig, name: &str, counted: Option<u64>) -> CliResult<StagedRun> {
    let settings = sc.engine.clone().ok_or_else(|| CliError::failure(format!("{name}: no [fleet.engine]")))?;
    let e = settings.config(&|k| format!("{name}: `fleet.engine.{k}`"))?;
    let g = Generated::with_origin(sc.workload, name)?;
    let cfg = batched(cfg, e).map_err(config_error)?;
    let mut refused = 0;
    let (rates, reqs, windows, summary) = match sc.load {
        // inference-perf's load generator: each request's stage and status as it recorded them
        Some(spec) => {
            let (res, sent) = simulate_load::<Batched>(cfg, &g, spec, true, None)?;
            refused = sent.iter().filter(|s| s.status == Some(Status::Refused)).count() as u64;
            let timeout_ns = if spec.timeout_ms == 0 { u64::MAX } else { spec.timeout_ms * 1_000_000 };
            let reqs = as_counted(sent.iter().filter_map(|s| Req::from_sent(s, timeout_ns)).collect(), counted);
            let stages = spec.stages();
            // one window per stage: the recorded stage decides, the windows only count them
            (
                stages.iter().map(|s| s.rate_milli_per_s as f64 / 1e3).collect(),
                reqs,
                vec![(0, 0); stages.len()],
                res.summary,
            )
        }
        // back-to-back open-loop stages: a request's stage is its arrival window
        None => {
            let res = simulate::<Batched>(cfg, &mut &g, true)?;
            let stages = sc.workload.stages();
            let windows = back_to_back(&stages.iter().map(|s| s.duration_ms * 1_000_000).collect::<Vec<_>>());
            let reqs = as_counted(res.completions.iter().map(Req::from_completion).collect(), counted);
            (stages.iter().map(|s| s.rate_milli_per_s as f64 / 1e3).collect(), reqs, windows, res.summary)
        }
    };
    // every request sent (the gateway's refusals never reach the fleet's summary)
    let requests = summary.requests.max(reqs.len() as u64);
    Ok(StagedRun {
        label,
        rates,
        stages: per_stage(&reqs, &windows),
        mean_waiting: summary.mean_waiting,
        mean_waiting_routed: summary.mean_waiting_routed,
        requests,
        refused,
        preemptions: summary.preemptions,
    })
}

/// The b2b-saas arms' fleets: prefix+token from its router config, the Service as a seeded
/// uniform pick (assumption A6).
fn b2b_fleets(sc: &Scenario) -> CliResult<[(String, FleetConfig); 2]> {
    let seed = sc.workload.seed;
    let (kind, mut spec, file_seed) = router_config::parse(PREFIX_TOKEN_TEXT, "--router-config", PREFIX_TOKEN_NAME)?;
    if !file_seed {
        spec.params.seed = seed;
    }
    let affinity = FleetConfig { router: kind, routing: Some(spec), ..sc.fleet };
    let mut random = RouterSpec::preset(RouterKind::Random)
        .ok_or_else(|| CliError::failure("the random preset has no pipeline".to_string()))?;
    random.params.seed = seed;
    let service = FleetConfig { router: RouterKind::Random, routing: Some(random), ..sc.fleet };
    Ok([("prefix+token".into(), affinity), ("k8s service (random)".into(), service)])
}

/// The Kubernetes Service of a fleet: a seeded uniform pick (assumption A6).
fn service(fleet: FleetConfig, seed: u64) -> CliResult<FleetConfig> {
    let mut random = RouterSpec::preset(RouterKind::Random)
        .ok_or_else(|| CliError::failure("the random preset has no pipeline".to_string()))?;
    random.params.seed = seed;
    Ok(FleetConfig { router: RouterKind::Random, routing: Some(random), ..fleet })
}

/// The matched arm of a fleet from a router config (seeded from `seed` unless it has a seed).
fn matched(fleet: FleetConfig, text: &str, name: &str, seed: u64) -> CliResult<FleetConfig> {
    let (kind, mut spec, file_seed) = router_config::parse(text, "--router-config", name)?;
    if !file_seed {
        spec.params.seed = seed;
    }
    Ok(FleetConfig { router: kind, routing: Some(spec), ..fleet })
}

/// Client TPOT p90 of the successful requests of `sent` (None without one of more than one
/// token).
pub fn tpot_p90(sent: &[crate::fleet::run::loadgen::Sent]) -> Option<f64> {
    use brokerlab_core::fleet::loadgen::Status;
    let mut v: Vec<f64> = sent
        .iter()
        .filter(|s| s.status == Some(Status::Ok))
        .filter_map(|s| s.completion)
        .filter(|c| c.output_tokens > 1)
        .map(|c| (c.finish_ns - c.first_token_ns) as f64 / 1e9 / (c.output_tokens - 1) as f64)
        .collect();
    v.sort_by(f64::total_cmp);
    crate::fleet::run::stages::percentile_linear(&v, 90.0)
}

/// One level of a conversation scenario: conversations = seed = `conc`, one concurrent stage of
/// `per_slot` x `conc` requests.
fn level(
    text: &str,
    name: &str,
    default: &str,
    conc: u64,
    per_slot: u64,
    arm: &dyn Fn(FleetConfig, u64) -> CliResult<FleetConfig>,
    over: &EngineSettings,
) -> CliResult<Option<Level>> {
    let sc = Scenario::parse_any(text, name, default)?;
    let (Some(mut conv), Some(mut load)) = (sc.conversations, sc.load) else {
        return Err(CliError::failure(format!("{name}: not a conversation scenario with [load]")));
    };
    conv.count = conc as u32;
    conv.seed = conc;
    load.stages[0].concurrency = conc;
    load.stages[0].num_requests = per_slot * conc;
    let settings = sc.engine.clone().ok_or_else(|| CliError::failure(format!("{name}: no [fleet.engine]")))?;
    let e = settings.overridden_by(over).config(&|k| format!("{name}: `fleet.engine.{k}`"))?;
    let cfg = batched(arm(sc.fleet, conc)?, e).map_err(config_error)?;
    let (res, sent) =
        crate::fleet::run::conversation::simulate_conversations::<Batched>(cfg, conv, load, false, None, name)?;
    let timeout_ns = if load.timeout_ms == 0 { u64::MAX } else { load.timeout_ms * 1_000_000 };
    let reqs = sent.iter().filter_map(|s| Req::from_sent(s, timeout_ns)).collect::<Vec<_>>();
    let stages = per_stage(&reqs, &[(0, 0)]);
    let refused =
        sent.iter().filter(|s| s.status == Some(brokerlab_core::fleet::loadgen::Status::Refused)).count() as u64;
    Ok(match (stages.first().copied().flatten(), tpot_p90(&sent)) {
        (Some(figures), Some(tpot_p90_s)) => {
            let hit_rate = res.summary.hit_rate.unwrap_or(f64::NAN);
            Some(Level { conc, figures, tpot_p90_s, refused, preemptions: res.summary.preemptions, hit_rate })
        }
        _ => None,
    })
}

/// Every level of one arm.
#[allow(clippy::too_many_arguments)]
fn levels(
    label: &str,
    text: &str,
    name: &str,
    default: &str,
    confs: &[u64],
    per_slot: u64,
    arm: &dyn Fn(FleetConfig, u64) -> CliResult<FleetConfig>,
    over: &EngineSettings,
    inc: &dyn Fn(),
) -> CliResult<LevelRun> {
    let mut v = Vec::new();
    for &c in confs {
        v.push(level(text, name, default, c, per_slot, arm, over)?);
        inc();
    }
    Ok(LevelRun { label: label.into(), levels: v })
}

/// Both arms of code-generation and reasoning, every level, with requests per slot divided by
/// `divisor` (at least 1: 1 is the published size).
pub fn run_conversations(
    divisor: u64,
    over: &EngineSettings,
    inc: &dyn Fn(),
) -> CliResult<(Vec<LevelRun>, Vec<LevelRun>)> {
    let per = |n: u64| (n / divisor.max(1)).max(1);
    let (cg, cgn, cgd) = (CODEGEN_TEXT, CODEGEN_NAME, "sticky-code-generation");
    let (rs, rsn, rsd) = (REASONING_TEXT, REASONING_NAME, "sticky-reasoning");
    let pt = |f: FleetConfig, seed: u64| matched(f, PREFIX_TOKEN_TEXT, PREFIX_TOKEN_NAME, seed);
    let rr = |f: FleetConfig, seed: u64| matched(f, ACTIVE_REQUEST_TEXT, ACTIVE_REQUEST_NAME, seed);
    let codegen = vec![
        levels("prefix+token", cg, cgn, cgd, &CODEGEN_LEVELS, per(CODEGEN_PER_SLOT), &pt, over, inc)?,
        levels("k8s service (random)", cg, cgn, cgd, &CODEGEN_LEVELS, per(CODEGEN_PER_SLOT), &service, over, inc)?,
    ];
    let reasoning = vec![
        levels("run-req", rs, rsn, rsd, &REASONING_LEVELS, per(REASONING_PER_SLOT), &rr, over, inc)?,
        levels("k8s service (random)", rs, rsn, rsd, &REASONING_LEVELS, per(REASONING_PER_SLOT), &service, over, inc)?,
    ];
    Ok((codegen, reasoning))
}

/// Table 1's scenario: `scenarios/llm-d-ramp.toml` (workload, load, fleet) with the engine of the
/// b2b-saas scenario `b` (the physics step cost `qwen3-32b-h100-tp2`, vLLM's S = 1024 and
/// M = 8192) without the full-sequence admission gate (A14): one step-cost profile for the three tables (docs/PUBLISHED.md, "One step cost for
/// the three tables"), and the 2025 gateway's in-flight limit ([`TABLE1_GATEWAY_MAX_IN_FLIGHT`]).
/// Its prompts are 6,315 + 1,265 tokens, the 6,000 + 1,200 random token ids of the workload
/// file as the server tokenized their decoded text ([`TABLE1_SERVER_SYSTEM_PROMPT_TOKENS`],
/// assumption A13). The scenario file keeps its linear profile, the configured lengths and no
/// gateway limit for `fleet run` and `fleet report`'s section 11.
pub fn table1_scenario(divisor: u64, b: &Scenario) -> CliResult<Scenario> {
    let mut sc = llmd::scenario(divisor)?;
    // the 2025 run's vLLM predates the full-sequence admission gate (vLLM v0.19.0, 2026-04;
    // assumption A14 turns it on for the 2026 runs only)
    sc.engine = b.engine.clone().map(|e| EngineSettings { reserve_full_isl: Some(false), ..e });
    sc.workload.prefix_tokens = TABLE1_SERVER_SYSTEM_PROMPT_TOKENS;
    sc.workload.suffix_min_tokens = TABLE1_SERVER_QUESTION_TOKENS;
    sc.workload.suffix_max_tokens = TABLE1_SERVER_QUESTION_TOKENS;
    let load = sc.load.as_mut().ok_or_else(|| CliError::failure(format!("{}: no [load]", llmd::SCENARIO_NAME)))?;
    load.gateway_max_in_flight = TABLE1_GATEWAY_MAX_IN_FLIGHT;
    Ok(sc)
}

/// Requests the 2025 run's gateway held at once (assumption A12, docs/PUBLISHED.md "The 2025
/// gateway's 1,024 streams"): each request holds one gRPC stream to the EPP's ext_proc cluster for
/// its whole life, and Envoy's circuit breaker on that cluster allows `max_requests` = 1024 by
/// default (envoy `api/envoy/config/cluster/v3/circuit_breaker.proto`); past it the stream
/// overflows and the gateway fails the request at once (HTTP 500, llm-d/llm-d issue #1582;
/// envoyproxy/gateway issue #9997 for GIE's `endpointpicker` ext_proc cluster). Table 1 only:
/// the 2026 rows of tables 2-3 report 98-100% success with more than 1,024 requests in flight.
pub const TABLE1_GATEWAY_MAX_IN_FLIGHT: u64 = 1_024;

/// Runs the three tables with stage durations divided by `divisor` and the conversation runs'
/// requests per slot by `conversation_divisor` (1, 1: as published); `inc` after each run.
///
/// `over`: engine settings that override every run's scenario (`fleet tables --shared-kv-read`;
/// the default overrides nothing).
pub fn run(divisor: u64, conversation_divisor: u64, over: &EngineSettings, inc: &dyn Fn()) -> CliResult<Tables> {
    let mut b = scaled(B2B_TEXT, B2B_NAME, "sticky-b2b-saas", divisor)?;
    b.engine = b.engine.map(|e| e.overridden_by(over));
    let sc = table1_scenario(divisor, &b)?;
    let mut table1 = Vec::new();
    for p in TABLE1_PRESETS {
        // the 2025 client counted 760 of the 1,000 generated tokens per request (A1)
        let fleet = p.fleet(sc.fleet, sc.workload.seed);
        table1.push(staged(p.upstream().into(), &sc, fleet, llmd::SCENARIO_NAME, Some(TABLE1_COUNTED_OUTPUT_TOKENS))?);
        inc();
    }
    let mut b2b = Vec::new();
    for (label, cfg) in b2b_fleets(&b)? {
        // the 2026 runs count 997 to 999 of 1,000 (gen_p50): the generated count
        b2b.push(staged(label, &b, cfg, B2B_NAME, None)?);
        inc();
    }
    let conversation_divisor = conversation_divisor.max(1);
    let (codegen, reasoning) = run_conversations(conversation_divisor, over, inc)?;
    let shared_kv_read = b.engine.as_ref().and_then(|e| e.shared_kv_read.clone());
    Ok(Tables { stage_divisor: divisor.max(1), table1, b2b, codegen, reasoning, conversation_divisor, shared_kv_read })
}
