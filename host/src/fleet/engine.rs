//! The batched engine on the host (docs/MODEL.md, "The batched engine"): its flags, owned
//! buffers with retry on a full buffer, exact percentiles and the summary (text and JSON).

use brokerlab_core::fleet::limits::BLOCK_TOKENS;
use brokerlab_core::fleet::stats::{REPORTED_PERCENTILES, nearest_rank_index};
use brokerlab_core::fleet::{
    BatchedFleet, Completion, EngineBuffers, EngineConfig, EngineEvents, EngineLayout, Error as CoreError, FleetConfig,
    KvBlock, Limit, Profile, Quantity, ReqSlot,
};
use clap::{Args, ValueEnum};
use serde::Serialize;

use super::run::{RequestSource, secs};
use crate::error::{CliError, CliResult, FleetError};
use crate::mem::{self, Growth, Need};

/// Which engine model each pod runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// The seed's FIFO single server (default).
    Fifo,
    /// vLLM-style continuous batching (docs/MODEL.md, "The batched engine").
    Batched,
}

/// Engine flags shared by `fleet replay` and `fleet run`.
#[derive(Debug, Args, Clone, Default)]
pub struct EngineArgs {
    /// fifo | batched (default fifo; `fleet run`: the scenario's `[fleet.engine]`).
    #[arg(long, value_enum)]
    pub engine: Option<EngineKind>,
    /// Batched: step-cost profile (qwen3-32b-h100x2 | llama-3.1-8b-h100 | seed).
    #[arg(long)]
    pub profile: Option<String>,
    /// Batched: most running requests per pod.
    #[arg(long)]
    pub max_num_seqs: Option<u32>,
    /// Batched: token budget of one step.
    #[arg(long)]
    pub max_num_batched_tokens: Option<u32>,
    /// Batched: fixed cost per step, ns (>= 1).
    #[arg(long)]
    pub t_overhead_ns: Option<u64>,
    /// Batched: cost per prefill token, ns.
    #[arg(long)]
    pub t_prefill_token_ns: Option<u64>,
    /// Batched: cost per decoding request in a step, ns.
    #[arg(long)]
    pub t_decode_seq_ns: Option<u64>,
    /// Batched: cost per context token of the step's requests, ns.
    #[arg(long)]
    pub t_kv_token_ns: Option<u64>,
    /// Batched: also write one JSON line per request to FILE, in request order: index, pod,
    /// arrival_ns, queue_len, hit_tokens, prefill_tokens, ttft_ns, e2e_ns, preemptions (compared
    /// with tests/reference/batched_model.py by host/tests/reference_batched.rs).
    #[arg(long, value_name = "FILE")]
    pub outcomes: Option<std::path::PathBuf>,
}

/// Engine settings from flags or a scenario: every field optional, the profile's and vLLM's
/// defaults fill the rest.
#[derive(Debug, Clone, Default)]
pub struct EngineSettings {
    /// Profile name.
    pub profile: Option<String>,
    /// Most running requests per pod S.
    pub max_num_seqs: Option<u32>,
    /// Token budget per step M.
    pub max_num_batched_tokens: Option<u32>,
    /// Fixed cost per step, ns.
    pub t_overhead_ns: Option<u64>,
    /// Cost per prefill token, ns.
    pub t_prefill_token_ns: Option<u64>,
    /// Cost per decoding request, ns.
    pub t_decode_seq_ns: Option<u64>,
    /// Cost per context token, ns.
    pub t_kv_token_ns: Option<u64>,
}

impl EngineSettings {
    /// Field names set, for "only with the batched engine" errors.
    fn set_names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut add = |set: bool, name| {
            if set {
                v.push(name);
            }
        };
        add(self.profile.is_some(), "profile");
        add(self.max_num_seqs.is_some(), "max-num-seqs");
        add(self.max_num_batched_tokens.is_some(), "max-num-batched-tokens");
        add(self.t_overhead_ns.is_some(), "t-overhead-ns");
        add(self.t_prefill_token_ns.is_some(), "t-prefill-token-ns");
        add(self.t_decode_seq_ns.is_some(), "t-decode-seq-ns");
        add(self.t_kv_token_ns.is_some(), "t-kv-token-ns");
        v
    }

    /// Overrides the fields set in `o`.
    pub fn overridden_by(mut self, o: &EngineSettings) -> Self {
        if o.profile.is_some() {
            self.profile.clone_from(&o.profile);
        }
        self.max_num_seqs = o.max_num_seqs.or(self.max_num_seqs);
        self.max_num_batched_tokens = o.max_num_batched_tokens.or(self.max_num_batched_tokens);
        self.t_overhead_ns = o.t_overhead_ns.or(self.t_overhead_ns);
        self.t_prefill_token_ns = o.t_prefill_token_ns.or(self.t_prefill_token_ns);
        self.t_decode_seq_ns = o.t_decode_seq_ns.or(self.t_decode_seq_ns);
        self.t_kv_token_ns = o.t_kv_token_ns.or(self.t_kv_token_ns);
        self
    }

    /// The core configuration; errors name the key as `name(key)` gives it (flag or TOML key).
    pub fn config(&self, name: &dyn Fn(&str) -> String) -> CliResult<EngineConfig> {
        let profile = match &self.profile {
            None => Profile::Qwen3_32bH100x2,
            Some(p) => Profile::parse(p).ok_or_else(|| {
                CliError::bad_input(format!(
                    "{} {p:?}: expected one of {}",
                    name("profile"),
                    Profile::ALL.map(Profile::name).join(", ")
                ))
            })?,
        };
        let mut e = EngineConfig::new(profile);
        if let Some(v) = self.max_num_seqs {
            e.max_num_seqs = v;
        }
        if let Some(v) = self.max_num_batched_tokens {
            e.max_num_batched_tokens = v;
        }
        if let Some(v) = self.t_overhead_ns {
            e.cost.t_overhead_ns = v;
        }
        if let Some(v) = self.t_prefill_token_ns {
            e.cost.t_prefill_token_ns = v;
        }
        if let Some(v) = self.t_decode_seq_ns {
            e.cost.t_decode_seq_ns = v;
        }
        if let Some(v) = self.t_kv_token_ns {
            e.cost.t_kv_token_ns = v;
        }
        e.validate().map_err(|err| match err {
            CoreError::InvalidConfig { field, expected } => {
                CliError::bad_input(format!("{}: expected {expected}", name(field.name())))
            }
            other => CliError::bad_input(other.to_string()),
        })?;
        Ok(e)
    }
}

impl EngineArgs {
    /// The settings given as flags.
    pub fn settings(&self) -> EngineSettings {
        EngineSettings {
            profile: self.profile.clone(),
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            t_overhead_ns: self.t_overhead_ns,
            t_prefill_token_ns: self.t_prefill_token_ns,
            t_decode_seq_ns: self.t_decode_seq_ns,
            t_kv_token_ns: self.t_kv_token_ns,
        }
    }

    /// The engine to run: None for FIFO. `scenario` is a scenario's `[fleet.engine]` (already
    /// checked), which the flags override.
    pub fn resolve(&self, scenario: Option<&EngineSettings>) -> CliResult<Option<EngineConfig>> {
        let flags = self.settings();
        let kind = self.engine.unwrap_or(if scenario.is_some() { EngineKind::Batched } else { EngineKind::Fifo });
        match kind {
            EngineKind::Fifo => {
                if let Some(n) = flags.set_names().first() {
                    return Err(CliError::bad_input(format!("--{n}: only with --engine batched")));
                }
                if self.outcomes.is_some() {
                    return Err(CliError::bad_input("--outcomes: only with --engine batched"));
                }
                Ok(None)
            }
            EngineKind::Batched => {
                let s = scenario.cloned().unwrap_or_default().overridden_by(&flags);
                Ok(Some(s.config(&|k| format!("--{}", k.replace('_', "-")))?))
            }
        }
    }
}

/// Collects a run's completions and inter-token latencies.
#[derive(Default)]
pub struct Collect {
    ttft: Vec<u64>,
    e2e: Vec<u64>,
    itl: Vec<(u64, u64)>,
    hit_tokens: u64,
    completions: Vec<Completion>,
    keep: bool,
    /// Completions not yet taken by a closed-loop driver ([`Collect::take_fresh`]).
    fresh: Vec<Completion>,
    closed_loop: bool,
    /// The run's memory growth (None: unchecked, as in a unit test).
    growth: Option<Growth>,
    /// The first growth past the memory budget (the driver stops and reports it).
    over: Option<CliError>,
}

/// What a batched run keeps per request, as named in a memory-budget message.
const TTFT: &str = "TTFT and E2E samples (exact percentiles, 16 B per request)";
const ITL: &str = "inter-token latency runs (16 B per distinct run)";
const COMPLETIONS: &str = "kept completions (--outcomes, breakdowns)";

impl Collect {
    /// The completions since the last call (closed loop only; empty otherwise), into `out`.
    pub fn take_fresh(&mut self, out: &mut Vec<Completion>) {
        out.clear();
        out.append(&mut self.fresh);
    }

    /// True when completions wait to be taken.
    pub fn has_fresh(&self) -> bool {
        !self.fresh.is_empty()
    }
}

impl Collect {
    /// Makes room for one more element of each vector `completed` (or `itl`) pushes to, within
    /// the memory budget; false (and the error kept) when there is none.
    fn room(&mut self, itl: bool) -> bool {
        if self.over.is_some() {
            return false;
        }
        let Some(g) = &self.growth else { return true };
        let r = if itl {
            g.reserve_one(&mut self.itl, ITL)
        } else {
            g.reserve_one(&mut self.ttft, TTFT)
                .and_then(|()| g.reserve_one(&mut self.e2e, TTFT))
                .and_then(|()| if self.keep { g.reserve_one(&mut self.completions, COMPLETIONS) } else { Ok(()) })
        };
        match r {
            Ok(()) => true,
            Err(e) => {
                self.over = Some(e);
                false
            }
        }
    }
}

impl EngineEvents for Collect {
    fn completed(&mut self, c: &Completion) {
        self.hit_tokens += c.hit_tokens;
        if self.closed_loop {
            // taken at once by the driver: a handful at a time
            self.fresh.push(*c);
        }
        if !self.room(false) {
            return;
        }
        self.ttft.push(c.ttft_ns());
        self.e2e.push(c.e2e_ns());
        if self.keep {
            self.completions.push(*c);
        }
    }
    fn itl(&mut self, itl_ns: u64, count: u64) {
        // Requests decoding in one step mostly share a value: merge runs to keep the list short.
        if let Some(last) = self.itl.last_mut()
            && last.0 == itl_ns
        {
            last.1 += count;
        } else if self.room(true) {
            self.itl.push((itl_ns, count));
        }
    }
}

/// The batched engine's summary (docs/MODEL.md, "Metrics of the batched engine").
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct BatchedSummary {
    /// Always "batched".
    pub engine: String,
    /// Router.
    pub router: brokerlab_core::fleet::RouterKind,
    /// Pods N.
    pub pods: usize,
    /// Blocks per pod C.
    pub capacity: usize,
    /// Load penalty.
    pub alpha: f64,
    /// S.
    pub max_num_seqs: u32,
    /// M.
    pub max_num_batched_tokens: u32,
    /// Profile the coefficients started from.
    pub profile: String,
    /// Step overhead, ns.
    pub t_overhead_ns: u64,
    /// Per prefill token, ns.
    pub t_prefill_token_ns: u64,
    /// Per decoding request, ns.
    pub t_decode_seq_ns: u64,
    /// Per context token, ns.
    pub t_kv_token_ns: u64,
    /// Requests.
    pub requests: u64,
    /// Sum of L.
    pub input_tokens: u64,
    /// Sum of O' = max(O, 1).
    pub output_tokens: u64,
    /// First-admission hits.
    pub hit_tokens: u64,
    /// hit_tokens / input_tokens.
    pub hit_rate: Option<f64>,
    /// Prefill tokens computed (recompute included).
    pub prefill_tokens: u64,
    /// TTFT p50, s.
    pub ttft_p50: Option<f64>,
    /// TTFT p90, s.
    pub ttft_p90: Option<f64>,
    /// TTFT p99, s.
    pub ttft_p99: Option<f64>,
    /// Mean TTFT, s.
    pub ttft_mean: Option<f64>,
    /// TTFT p90, ns.
    pub ttft_ns_p90: Option<u64>,
    /// E2E p50, s.
    pub e2e_p50: Option<f64>,
    /// E2E p90, s.
    pub e2e_p90: Option<f64>,
    /// E2E p99, s.
    pub e2e_p99: Option<f64>,
    /// Mean E2E, s.
    pub e2e_mean: Option<f64>,
    /// E2E p90, ns.
    pub e2e_ns_p90: Option<u64>,
    /// = e2e_p50 (the FIFO key's meaning: finish - arrival).
    pub latency_p50: Option<f64>,
    /// = e2e_p90.
    pub latency_p90: Option<f64>,
    /// = e2e_p99.
    pub latency_p99: Option<f64>,
    /// = e2e_mean.
    pub latency_mean: Option<f64>,
    /// = e2e_ns_p90.
    pub latency_ns_p90: Option<u64>,
    /// ITL p50, s.
    pub itl_p50: Option<f64>,
    /// ITL p90, s.
    pub itl_p90: Option<f64>,
    /// ITL p99, s.
    pub itl_p99: Option<f64>,
    /// ITL p90, ns.
    pub itl_ns_p90: Option<u64>,
    /// ITL samples (one per token after a request's first).
    pub itl_samples: u64,
    /// output_tokens / makespan.
    pub output_tok_per_s: Option<f64>,
    /// prefill_tokens / makespan.
    pub prefill_tok_per_s: Option<f64>,
    /// Preemptions.
    pub preemptions: u64,
    /// Per pod.
    pub per_pod_preemptions: Vec<u64>,
    /// Engine steps.
    pub steps: u64,
    /// Per pod.
    pub per_pod_steps: Vec<u64>,
    /// Mean of the pods' time-weighted KV utilization.
    pub kv_util_mean: Option<f64>,
    /// Max of the pods' peaks.
    pub kv_util_peak: f64,
    /// Per pod, time-weighted over [0, makespan].
    pub per_pod_kv_util_mean: Vec<Option<f64>>,
    /// Per pod, most pinned blocks / C.
    pub per_pod_kv_util_peak: Vec<f64>,
    /// Time-weighted mean waiting-queue length, averaged over pods.
    pub mean_waiting: Option<f64>,
    /// Requests per pod.
    pub per_pod_requests: Vec<u64>,
    /// Longest queue_len at an arrival, per pod.
    pub per_pod_max_queue: Vec<u32>,
    /// Last finish, s.
    pub makespan_s: f64,
    /// With `--router-config`: the resolved router in one line; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
}

/// A batched run's result.
pub struct BatchedResult {
    /// Headline metrics.
    pub summary: BatchedSummary,
    /// Completions in completion order (empty unless asked for).
    pub completions: Vec<Completion>,
}

/// The memory budget (`--max-memory`, host/src/mem.rs) against the batched engine's buffers and
/// what the caller holds (`held`), before allocating them; returns the bytes counted.
fn check_memory(l: &EngineLayout, held: &[Need]) -> CliResult<u64> {
    let bytes = |n: usize, per: usize| (n as u64).saturating_mul(l.pods as u64).saturating_mul(per as u64);
    let pods = "--capacity or --pods (fleet.capacity, fleet.pods)";
    let need = |what: &str, bytes: u64, by: &str| Need { what: what.into(), bytes, lowered_by: by.into() };
    let needs = [
        need("pod KV blocks", bytes(l.blocks_per_pod, std::mem::size_of::<KvBlock>()), pods),
        need("pod KV key tables", bytes(l.table_per_pod, 4), pods),
        need(
            "request slots and queues",
            bytes(l.requests_per_pod, std::mem::size_of::<ReqSlot>() + 4),
            "fewer requests in flight per pod",
        ),
        need("running sets", bytes(l.running_per_pod, 4), "--max-num-seqs"),
        need("prompt keys in flight", bytes(l.keys_per_pod, 8), "shorter prompts or fewer in flight"),
    ];
    let needs: Vec<Need> = needs.into_iter().chain(held.iter().cloned()).collect();
    mem::check(&batched_context(l), &needs)
}

fn batched_context(l: &EngineLayout) -> String {
    format!("a batched run of {} pods x {} blocks", l.pods, l.blocks_per_pod)
}

/// A batched fleet being driven, with what its errors said about buffers (see [`Driving::check`]).
pub struct Driving<'f, 'a> {
    /// The fleet.
    pub fleet: &'f mut BatchedFleet<'a>,
    /// Its events.
    pub sink: &'f mut Collect,
    full: Option<Limit>,
    overflow: Option<Quantity>,
}

impl Driving<'_, '_> {
    /// Passes `r` on, noting a full buffer (the run restarts with a larger one) or an overflow;
    /// stops the run (an error) once what it keeps per request has outgrown the memory budget.
    pub fn check<T>(&mut self, r: Result<T, CoreError>) -> Result<T, CoreError> {
        match &r {
            Err(CoreError::CapacityExceeded { limit, .. }) => self.full = Some(*limit),
            Err(CoreError::Overflow { what }) => self.overflow = Some(*what),
            _ => {}
        }
        if r.is_ok() && self.sink.over.is_some() {
            return Err(CoreError::CapacityExceeded { limit: Limit::CallerMemory, capacity: 0 });
        }
        r
    }
}

/// Runs the batched engine over `source`; on a full request or key buffer, doubles it and
/// starts over (deterministic, so the result is the same).
pub fn simulate_batched(
    cfg: FleetConfig,
    engine: EngineConfig,
    source: &mut dyn RequestSource,
    keep: bool,
) -> CliResult<BatchedResult> {
    let restart_error = source.restart_error();
    drive_batched(cfg, engine, keep, false, restart_error, &[], &mut |d: &mut Driving<'_, '_>| {
        if let Some(g) = &d.sink.growth {
            source.grow_into(g);
        }
        source.feed(&mut |req| {
            let r = d.fleet.dispatch(req, d.sink).map(|_| ());
            d.check(r)
        })
    })
}

/// Runs the batched engine with `drive` giving it the requests (it dispatches them; with
/// `closed_loop`, completions are also kept for it to take as they happen); on a full request
/// or key buffer, doubles it and starts over: `drive` must give the same requests again
/// (`restart_error` says why it cannot, e.g. a pipe). `held`: what the caller holds meanwhile
/// (memory budget).
pub fn drive_batched(
    cfg: FleetConfig,
    engine: EngineConfig,
    keep: bool,
    closed_loop: bool,
    restart_error: Option<String>,
    held: &[Need],
    drive: &mut dyn FnMut(&mut Driving<'_, '_>) -> CliResult<()>,
) -> CliResult<BatchedResult> {
    let mut requests_per_pod = 1024usize;
    // grown by doubling when full (same results): start small so a small --max-memory still fits
    let mut keys_per_pod = 1usize << 16;
    loop {
        let l = EngineLayout::new(&cfg, &engine, requests_per_pod, keys_per_pod).map_err(super::run::config_error)?;
        let fixed = check_memory(&l, held)?;
        let mut blocks = mem::try_vec(l.pods * l.blocks_per_pod, KvBlock::default(), "the pods' KV blocks")?;
        let mut tables = mem::try_vec(l.pods * l.table_per_pod, 0u32, "the pods' KV key tables")?;
        let mut reqs = mem::try_vec(l.pods * l.requests_per_pod, ReqSlot::default(), "the request slots")?;
        let mut waiting = mem::try_vec(l.pods * l.requests_per_pod, 0u32, "the waiting queues")?;
        let mut running = mem::try_vec(l.pods * l.running_per_pod, 0u32, "the running sets")?;
        let mut keys = mem::try_vec(l.pods * l.keys_per_pod, 0u64, "the prompt keys in flight")?;
        let mut router = super::run::OwnedRouter::new(&cfg)?;
        let mut fleet = BatchedFleet::with_router_buffers(
            cfg,
            engine,
            EngineBuffers {
                blocks: &mut blocks,
                tables: &mut tables,
                requests: &mut reqs,
                waiting: &mut waiting,
                running: &mut running,
                keys: &mut keys,
            },
            router.buffers(),
        )
        .map_err(super::run::config_error)?;
        let growth = Growth::new(&batched_context(&l), fixed);
        let mut sink = Collect { keep, closed_loop, growth: Some(growth), ..Collect::default() };
        let mut d = Driving { fleet: &mut fleet, sink: &mut sink, full: None, overflow: None };
        let fed = drive(&mut d).and_then(|()| {
            let r = d.fleet.finish(d.sink);
            d.check(r).map_err(|e| CliError::failure(e.to_string()))
        });
        let (full, overflow) = (d.full, d.overflow);
        if let Some(e) = sink.over.take() {
            return Err(e);
        }
        if let Some(what) = overflow {
            return Err(FleetError::EngineOverflow(what).into());
        }
        if full.is_some()
            && let Some(msg) = &restart_error
        {
            return Err(CliError::bad_input(msg.clone()));
        }
        match (full, fed) {
            (Some(Limit::RequestsPerPod), _) => requests_per_pod *= 2,
            (Some(Limit::KeysPerPod), _) => keys_per_pod *= 2,
            (Some(limit), _) => return Err(FleetError::Limit(limit).into()),
            (None, Err(e)) => return Err(e),
            (None, Ok(())) => {
                let summary = summarize(&fleet, &mut sink);
                return Ok(BatchedResult { summary, completions: sink.completions });
            }
        }
    }
}

/// Writes a run's completions (kept with `keep`) as JSON lines in request order (`--outcomes`);
/// `more` gives a request's extra fields (`,"key":value...`), e.g. a Dynamo turn's session.
pub fn write_outcomes(
    path: &std::path::Path,
    completions: &[Completion],
    more: Option<&dyn Fn(u64) -> String>,
) -> CliResult<()> {
    let mut sorted: Vec<&Completion> = completions.iter().collect();
    sorted.sort_unstable_by_key(|c| c.request);
    // streamed to the file (no copy of the text in memory)
    crate::outfile::write_with(path, |w| {
        for c in sorted {
            writeln!(
                w,
                "{{\"index\":{},\"pod\":{},\"arrival_ns\":{},\"queue_len\":{},\"hit_tokens\":{},\"prefill_tokens\":{},\
                 \"ttft_ns\":{},\"e2e_ns\":{},\"preemptions\":{}{}}}",
                c.request,
                c.pod,
                c.arrival_ns,
                c.queue_len,
                c.hit_tokens,
                c.prefill_tokens,
                c.ttft_ns(),
                c.e2e_ns(),
                c.preemptions,
                more.map_or_else(String::new, |f| f(c.request))
            )?;
        }
        Ok(())
    })
    .map_err(|e| CliError::failure(format!("--outcomes {}: cannot write: {e}", path.display())))
}

/// Nearest-rank percentiles of a sorted slice.
fn pcts(v: &[u64]) -> [Option<u64>; 3] {
    REPORTED_PERCENTILES.map(|(num, den)| nearest_rank_index(v.len(), num, den).map(|i| v[i]))
}

/// Nearest-rank percentiles of (value, count) pairs.
fn weighted_pcts(pairs: &mut [(u64, u64)]) -> ([Option<u64>; 3], u64) {
    pairs.sort_unstable();
    let total: u64 = pairs.iter().map(|p| p.1).sum();
    let out = REPORTED_PERCENTILES.map(|(num, den)| {
        let idx = nearest_rank_index(total as usize, num, den)? as u64;
        let mut seen = 0;
        pairs
            .iter()
            .find(|p| {
                seen += p.1;
                seen > idx
            })
            .map(|p| p.0)
    });
    (out, total)
}

fn mean(v: &[u64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().map(|&x| x as u128).sum::<u128>() as f64 / v.len() as f64 / 1e9)
}

fn per_s(n: u64, ns: u64) -> Option<f64> {
    (ns > 0).then(|| n as f64 / secs(ns))
}

fn summarize(fleet: &BatchedFleet<'_>, sink: &mut Collect) -> BatchedSummary {
    let cfg = fleet.config();
    let e = fleet.engine_config();
    sink.ttft.sort_unstable();
    sink.e2e.sort_unstable();
    let [t50, t90, t99] = pcts(&sink.ttft);
    let [e50, e90, e99] = pcts(&sink.e2e);
    let ([i50, i90, i99], itl_samples) = weighted_pcts(&mut sink.itl);
    let stats: Vec<_> = (0..cfg.pods).filter_map(|p| fleet.pod_stats(p).copied()).collect();
    let makespan = fleet.makespan_ns();
    let sum = |f: &dyn Fn(&brokerlab_core::fleet::EngineStats) -> u64| stats.iter().map(f).sum::<u64>();
    let c = cfg.capacity_blocks as f64;
    let kv_mean: Vec<Option<f64>> =
        stats.iter().map(|s| (makespan > 0).then(|| s.kv_pinned_block_ns as f64 / (c * makespan as f64))).collect();
    let kv_peak: Vec<f64> = stats.iter().map(|s| s.kv_peak_blocks as f64 / c).collect();
    let waiting = (makespan > 0)
        .then(|| stats.iter().map(|s| s.waiting_request_ns as f64 / makespan as f64).sum::<f64>() / stats.len() as f64);
    let input_tokens = sum(&|s| s.input_tokens);
    let output_tokens = sum(&|s| s.output_tokens);
    let prefill_tokens = sum(&|s| s.prefill_tokens);
    let e2e_mean = mean(&sink.e2e);
    BatchedSummary {
        engine: "batched".into(),
        router: cfg.router,
        pods: cfg.pods,
        capacity: cfg.capacity_blocks,
        alpha: cfg.alpha,
        max_num_seqs: e.max_num_seqs,
        max_num_batched_tokens: e.max_num_batched_tokens,
        profile: e.profile.name().into(),
        t_overhead_ns: e.cost.t_overhead_ns,
        t_prefill_token_ns: e.cost.t_prefill_token_ns,
        t_decode_seq_ns: e.cost.t_decode_seq_ns,
        t_kv_token_ns: e.cost.t_kv_token_ns,
        requests: sum(&|s| s.requests),
        input_tokens,
        output_tokens,
        hit_tokens: sink.hit_tokens,
        hit_rate: (input_tokens > 0).then(|| sink.hit_tokens as f64 / input_tokens as f64),
        prefill_tokens,
        ttft_p50: t50.map(secs),
        ttft_p90: t90.map(secs),
        ttft_p99: t99.map(secs),
        ttft_mean: mean(&sink.ttft),
        ttft_ns_p90: t90,
        e2e_p50: e50.map(secs),
        e2e_p90: e90.map(secs),
        e2e_p99: e99.map(secs),
        e2e_mean,
        e2e_ns_p90: e90,
        latency_p50: e50.map(secs),
        latency_p90: e90.map(secs),
        latency_p99: e99.map(secs),
        latency_mean: e2e_mean,
        latency_ns_p90: e90,
        itl_p50: i50.map(secs),
        itl_p90: i90.map(secs),
        itl_p99: i99.map(secs),
        itl_ns_p90: i90,
        itl_samples,
        output_tok_per_s: per_s(output_tokens, makespan),
        prefill_tok_per_s: per_s(prefill_tokens, makespan),
        preemptions: sum(&|s| s.preemptions),
        per_pod_preemptions: stats.iter().map(|s| s.preemptions).collect(),
        steps: sum(&|s| s.steps),
        per_pod_steps: stats.iter().map(|s| s.steps).collect(),
        kv_util_mean: (makespan > 0).then(|| kv_mean.iter().flatten().sum::<f64>() / stats.len() as f64),
        kv_util_peak: kv_peak.iter().copied().fold(0.0, f64::max),
        per_pod_kv_util_mean: kv_mean,
        per_pod_kv_util_peak: kv_peak,
        mean_waiting: waiting,
        per_pod_requests: stats.iter().map(|s| s.requests).collect(),
        per_pod_max_queue: stats.iter().map(|s| s.max_queue_len).collect(),
        makespan_s: secs(makespan),
        pipeline: None,
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.digits$}"))
}

/// The readable table of a batched run.
pub fn render_batched(s: &BatchedSummary) -> String {
    let mut o = String::new();
    let mut line = |k: &str, v: String| o.push_str(&format!("{k:<22} {v}\n"));
    line("engine", "batched (vLLM-style continuous batching, simplified: docs/MODEL.md)".into());
    line("router", s.pipeline.clone().unwrap_or_else(|| s.router.to_string()));
    line(
        "pods x capacity",
        format!("{} x {} blocks ({} tokens per pod)", s.pods, s.capacity, s.capacity * BLOCK_TOKENS),
    );
    line("alpha", s.alpha.to_string());
    line("max seqs / tokens", format!("{} / {} per step", s.max_num_seqs, s.max_num_batched_tokens));
    line(
        "step cost",
        format!(
            "{} ns + {} ns/prefill token + {} ns/decode + {} ns/context token (profile {})",
            s.t_overhead_ns, s.t_prefill_token_ns, s.t_decode_seq_ns, s.t_kv_token_ns, s.profile
        ),
    );
    line("requests", s.requests.to_string());
    line("input / output tokens", format!("{} / {}", s.input_tokens, s.output_tokens));
    line("hit tokens", format!("{} ({} %)", s.hit_tokens, opt(s.hit_rate.map(|h| h * 100.0), 2)));
    line("prefill tokens", s.prefill_tokens.to_string());
    line("TTFT p50/p90/p99", format!("{} / {} / {} s", opt(s.ttft_p50, 4), opt(s.ttft_p90, 4), opt(s.ttft_p99, 4)));
    line("E2E p50/p90/p99", format!("{} / {} / {} s", opt(s.e2e_p50, 4), opt(s.e2e_p90, 4), opt(s.e2e_p99, 4)));
    line(
        "ITL p50/p90/p99",
        format!("{} / {} / {} s ({} samples)", opt(s.itl_p50, 4), opt(s.itl_p90, 4), opt(s.itl_p99, 4), s.itl_samples),
    );
    line("output / prefill tok/s", format!("{} / {}", opt(s.output_tok_per_s, 1), opt(s.prefill_tok_per_s, 1)));
    line(
        "KV utilization",
        format!(
            "mean {} %, peak {} %",
            opt(s.kv_util_mean.map(|v| v * 100.0), 1),
            format_args!("{:.1}", s.kv_util_peak * 100.0)
        ),
    );
    line("preemptions", s.preemptions.to_string());
    line("mean waiting", opt(s.mean_waiting, 2));
    line("steps", s.steps.to_string());
    line("makespan", format!("{:.3} s", s.makespan_s));
    o.push_str("\npod  requests  preempt  KV mean  KV peak  max queue\n");
    for p in 0..s.pods {
        o.push_str(&format!(
            "{p:>3}  {:>8}  {:>7}  {:>7}  {:>7}  {:>9}\n",
            s.per_pod_requests[p],
            s.per_pod_preemptions[p],
            opt(s.per_pod_kv_util_mean[p].map(|v| v * 100.0), 1),
            format!("{:.1}", s.per_pod_kv_util_peak[p] * 100.0),
            s.per_pod_max_queue[p]
        ));
    }
    o
}
