//! `fleet report`, section 9: the llm-d shape and the Mooncake conversation trace under the
//! batched engine, round-robin vs prefix-aware, beside the FIFO engine's figures for the same runs.
//!
//! The trace is compiled in (`traces/conversation_trace.jsonl.zst`, 355 KB) so the report still
//! needs nothing but the binary. Every sentence of "what changes and why" is formatted from the
//! results and the engine's coefficients.

use std::fmt::Write as _;
use std::path::PathBuf;

use brokerlab_core::fleet::limits::BLOCK_TOKENS;
use brokerlab_core::fleet::{BatchedConfig, Error as CoreError, FleetConfig, Profile, Request, RouterKind, keys};
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::fleet::input::trace::TraceReader;
use crate::fleet::run::{Batched, BatchedSummary, Fifo, RequestSource, Summary, config_error, simulate};
use crate::fleet::scenario::Scenario;
use crate::fleet::scenario::engine::batched;

/// The vendored Mooncake conversation trace, compiled in.
pub const CONVERSATION_TRACE: &[u8] = include_bytes!("../../../../traces/conversation_trace.jsonl.zst");
/// Its name in messages and provenance.
pub const CONVERSATION_TRACE_NAME: &str = "traces/conversation_trace.jsonl.zst (built in)";
/// Tokens per hash id of the Mooncake traces.
pub const MOONCAKE_BLOCK_TOKENS: u32 = 512;
/// The conversation trace's fleet: 8 pods x 16,384 blocks (README, "The batched engine").
pub const CONVERSATION_PODS: usize = 8;
/// Blocks per pod for the conversation trace.
pub const CONVERSATION_CAPACITY: usize = 16_384;
/// Prefix-aware's alpha on the conversation trace (alpha 1 pins the trace on three pods: README,
/// "Replaying real traces").
pub const CONVERSATION_ALPHA: f64 = 16.0;
/// The routers compared, in table order.
pub const ENGINE_ROUTERS: [RouterKind; 2] = [RouterKind::RoundRobin, RouterKind::PrefixAware];
/// Runs of this section that [`run`] counts on the progress bar (FIFO on the llm-d shape is the
/// llm-d section's run, reused).
pub const ENGINE_POINTS: u64 = 6;

/// The batched engine's settings for both workloads: vLLM's H100 defaults (S 1024, M 8192) and
/// the default profile.
pub fn engine_config() -> BatchedConfig {
    BatchedConfig::new(Profile::Qwen3_32bH100x2)
}

/// A trace held in memory: (arrival ns, L, O, key range) per request.
pub struct MemTrace {
    /// Requests.
    pub requests: Vec<(u64, u64, u64, std::ops::Range<usize>)>,
    /// All keys (16-token blocks).
    pub keys: Vec<u64>,
    /// Requests in the whole trace.
    pub total: u64,
}

impl MemTrace {
    /// The first `limit` requests of the built-in conversation trace (all with `None`).
    pub fn conversation(limit: Option<u64>) -> CliResult<Self> {
        let (_, reader) = crate::fleet::input::file::reader(std::io::Cursor::new(CONVERSATION_TRACE))
            .map_err(|e| CliError::failure(format!("{CONVERSATION_TRACE_NAME}: {e}")))?;
        let mut r = TraceReader::new(PathBuf::from(CONVERSATION_TRACE_NAME), reader);
        let (mut requests, mut all, mut buf) = (Vec::new(), Vec::new(), Vec::new());
        let mut total = 0u64;
        while r.advance()? {
            total += 1;
            if limit.is_some_and(|n| requests.len() as u64 >= n) {
                continue;
            }
            let rec = r.record();
            buf.resize((rec.input_length / BLOCK_TOKENS as u64) as usize, 0);
            let n = keys::trace_keys(&rec.hash_ids, rec.input_length, MOONCAKE_BLOCK_TOKENS, &mut buf)
                .map_err(|e| CliError::failure(format!("{}: {e}", r.location())))?;
            let at = all.len();
            all.extend_from_slice(&buf[..n]);
            requests.push((rec.timestamp_ms * 1_000_000, rec.input_length, rec.output_length, at..at + n));
        }
        Ok(MemTrace { requests, keys: all, total })
    }

    /// Sum of O' = max(O, 1): the tokens the batched engine must produce.
    pub fn output_tokens(&self) -> u64 {
        self.requests.iter().map(|r| r.2.max(1)).sum()
    }
}

/// Feeds requests held in memory ((arrival ns, L, O, key range) over `keys`) to `sink`; an error
/// names the workload (`name`) and the request.
pub fn feed_held(
    requests: &[(u64, u64, u64, std::ops::Range<usize>)],
    keys: &[u64],
    name: &str,
    sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>,
) -> CliResult<()> {
    for (i, (arrival_ns, input, output, range)) in requests.iter().enumerate() {
        let req = Request {
            arrival_ns: *arrival_ns,
            input_tokens: *input,
            output_tokens: *output,
            keys: &keys[range.clone()],
        };
        sink(&req).map_err(|e| {
            CliError::bad_input(format!("{name}: request {i}: {}", crate::fleet::run::fields::request_message(&e)))
        })?;
    }
    Ok(())
}

impl RequestSource for &MemTrace {
    fn feed(&mut self, sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>) -> CliResult<()> {
        feed_held(&self.requests, &self.keys, CONVERSATION_TRACE_NAME, sink)
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.requests.len() as u64)
    }
}

/// One workload and router under both engines.
#[derive(Debug, Clone, Serialize)]
pub struct EngineRun {
    /// `llm-d` (scenarios/llm-d.toml) or `conversation` (the Mooncake conversation trace).
    pub workload: String,
    /// Router.
    pub router: brokerlab_core::fleet::RouterKind,
    /// Load penalty.
    pub alpha: f64,
    /// The FIFO engine.
    pub fifo: Summary,
    /// The batched engine.
    pub batched: BatchedSummary,
}

/// Section 9's runs.
#[derive(Debug, Clone, Serialize)]
pub struct EngineComparison {
    /// Requests of the conversation trace run.
    pub conversation_requests_run: u64,
    /// Requests in the whole trace.
    pub conversation_requests_in_trace: u64,
    /// Requests of the llm-d shape run.
    pub llmd_requests_run: u64,
    /// Output tokens the conversation run asked for (sum of max(O, 1)).
    pub conversation_output_tokens_asked: u64,
    /// llm-d then conversation, each in [`ENGINE_ROUTERS`] order.
    pub runs: Vec<EngineRun>,
}

impl EngineComparison {
    /// The run of `workload` with `router`.
    pub fn get(&self, workload: &str, router: RouterKind) -> Option<&EngineRun> {
        self.runs.iter().find(|r| r.workload == workload && r.router == router)
    }
}

/// Runs the section: `llmd` is the llm-d scenario (already shrunk), `llmd_fifo` the FIFO runs of
/// the llm-d section by router; the conversation trace is cut to its first `1/shrink`.
pub fn run(
    llmd: &Scenario,
    llmd_fifo: &dyn Fn(RouterKind) -> Option<Summary>,
    shrink: u64,
    inc: &dyn Fn(),
) -> CliResult<EngineComparison> {
    let e = engine_config();
    let mut runs = Vec::new();
    let g = crate::fleet::scenario::Generated::new(llmd.workload)?;
    for r in ENGINE_ROUTERS {
        let cfg = FleetConfig { router: r, ..llmd.fleet };
        let fifo = match llmd_fifo(r) {
            Some(s) => s,
            None => simulate::<Fifo>(cfg, &mut &g, false)?.summary,
        };
        let batched = simulate::<Batched>(batched(cfg, e).map_err(config_error)?, &mut &g, false)?.summary;
        inc();
        runs.push(EngineRun { workload: "llm-d".into(), router: r, alpha: cfg.alpha, fifo, batched });
    }
    let shrink = shrink.max(1);
    let full = MemTrace::conversation(None)?;
    let trace = if shrink > 1 { MemTrace::conversation(Some((full.total / shrink).max(1)))? } else { full };
    for r in ENGINE_ROUTERS {
        let mut cfg = FleetConfig::new(CONVERSATION_PODS, CONVERSATION_CAPACITY, r);
        cfg.alpha = CONVERSATION_ALPHA;
        let fifo = simulate::<Fifo>(cfg, &mut &trace, false)?.summary;
        inc();
        let batched = simulate::<Batched>(batched(cfg, e).map_err(config_error)?, &mut &trace, false)?.summary;
        inc();
        runs.push(EngineRun { workload: "conversation".into(), router: r, alpha: cfg.alpha, fifo, batched });
    }
    Ok(EngineComparison {
        conversation_requests_run: trace.requests.len() as u64,
        conversation_requests_in_trace: trace.total,
        llmd_requests_run: llmd.workload.requests,
        conversation_output_tokens_asked: trace.output_tokens(),
        runs,
    })
}

fn s3(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.3}"))
}

fn pct1(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |x| format!("{:.1}%", x * 100.0))
}

fn label(w: &str) -> &'static str {
    if w == "llm-d" { "llm-d shape" } else { "conversation trace" }
}

fn router_label(r: &EngineRun) -> String {
    if r.router == RouterKind::PrefixAware { format!("prefix-aware, alpha {}", r.alpha) } else { r.router.to_string() }
}

/// The section's table, Markdown.
pub fn table(c: &EngineComparison) -> String {
    let mut o = String::from(
        "| workload | router | FIFO: hit rate | FIFO: p90 latency (s) | batched: hit rate | batched: TTFT p90 (s) | batched: E2E p90 (s) | batched: output tok/s | batched: KV util mean / peak | batched: preemptions |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &c.runs {
        let (f, b) = (&r.fifo, &r.batched);
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            label(&r.workload),
            router_label(r),
            pct1(f.hit_rate),
            s3(f.latency_p90),
            pct1(b.hit_rate),
            s3(b.ttft_p90),
            s3(b.e2e_p90),
            b.output_tok_per_s.map_or("n/a".into(), |x| format!("{x:.1}")),
            pct1(b.kv_util_mean),
            pct1(Some(b.kv_util_peak)),
            b.preemptions
        );
    }
    o
}

/// `n` with thousands separators.
pub fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut o = String::new();
    for (i, ch) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            o.push(',');
        }
        o.push(ch);
    }
    o
}

/// (fewest, most) requests on a pod, with thousands separators.
fn spread(per_pod: &[u64]) -> (String, String) {
    let min = per_pod.iter().copied().min().unwrap_or(0);
    let max = per_pod.iter().copied().max().unwrap_or(0);
    (thousands(min), thousands(max))
}

fn tok_s(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.1}"))
}

/// "below" / "above" / "equal to", for `a` against `b`.
fn rel(a: f64, b: f64) -> &'static str {
    if a < b {
        "below"
    } else if a > b {
        "above"
    } else {
        "equal to"
    }
}

/// The ratio a / b as "N.Nx", or "n/a".
fn times(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.1}x", a / b),
        _ => "n/a".into(),
    }
}

/// "What changes and why", one paragraph per workload, formatted from the results (Markdown).
pub fn prose(c: &EngineComparison, llmd: &Scenario) -> Vec<String> {
    // the conversation paragraph only after the llm-d one (each needs both routers' runs)
    let mut out = Vec::new();
    let Some(p) = llmd_paragraph(c, llmd) else { return out };
    out.push(p);
    out.extend(conversation_paragraph(c));
    out
}

/// The llm-d shape under both engines: why round-robin queues and prefix-aware does not, from
/// the cost model's figures; None without both routers' runs.
fn llmd_paragraph(c: &EngineComparison, llmd: &Scenario) -> Option<String> {
    let e = engine_config();
    let cost = *e.cost.linear().expect("the engine comparison runs the linear profile");
    let (Some(lrr), Some(lpa)) = (c.get("llm-d", RouterKind::RoundRobin), c.get("llm-d", RouterKind::PrefixAware))
    else {
        return None;
    };
    let w = llmd.workload;
    let prompt = w.prefix_tokens as f64 + (w.suffix_min_tokens + w.suffix_max_tokens) as f64 / 2.0;
    // All-miss service time per request: FIFO prefill x L; batched: the per-token cost plus the
    // step overhead spread over a full step of M tokens.
    let fifo_s = prompt * llmd.fifo().t_prefill_ns as f64 / 1e9;
    let per_token_ns = cost.t_prefill_token_ns as f64 + cost.t_overhead_ns as f64 / e.max_num_batched_tokens as f64;
    let batched_s = prompt * per_token_ns / 1e9;
    let pods = llmd.fleet.pods as f64;
    let rate = w.rate_milli_per_s as f64 / 1e3;
    Some(format!(
        "**llm-d shape.** Under the batched engine prefix-aware's TTFT p90 is {} s against round-robin's {} s \
         ({} lower; FIFO p90: {} s vs {} s). The shape asks for one output token per request (`output_tokens = [{}, {}]` is \
         max(O, 1) = 1), so the engine's difference is its cost model, not decoding: a step of up to {} tokens costs {:.3} ms \
         plus {:.3} us per prefill token ({:.1} us per token in a full step) where the FIFO engine charges {:.1} us. \
         The fleet's all-miss capacity is therefore {:.1} req/s for the batched engine ({} pods / ({} tokens x {:.1} us)) \
         against {:.1} req/s for FIFO, both below the {} req/s arrival rate: cache-blind round-robin queues without bound \
         under either engine ({} s batched vs {} s FIFO), and prefix-aware, which hits {} of prompt tokens, stays far \
         below saturation. KV utilization counts pinned blocks only (blocks of the requests in a step; the cached, \
         unreferenced ones are free): with one output token a request holds its blocks for its prefill steps alone, \
         so the mean stays at {} (round-robin) and {} (prefix-aware), the peak at {} and {}, and no request is \
         preempted ({} and {}). Output tok/s is completed requests per second here: round-robin's {} is what its \
         fleet sustains while its queues grow; prefix-aware's {} keeps up with the arrivals.",
        s3(lpa.batched.ttft_p90),
        s3(lrr.batched.ttft_p90),
        times(lrr.batched.ttft_p90, lpa.batched.ttft_p90),
        s3(lpa.fifo.latency_p90),
        s3(lrr.fifo.latency_p90),
        w.output_min_tokens,
        w.output_max_tokens,
        e.max_num_batched_tokens,
        cost.t_overhead_ns as f64 / 1e6,
        cost.t_prefill_token_ns as f64 / 1e3,
        per_token_ns / 1e3,
        llmd.fifo().t_prefill_ns as f64 / 1e3,
        pods / batched_s,
        llmd.fleet.pods,
        prompt,
        per_token_ns / 1e3,
        pods / fifo_s,
        rate,
        s3(lrr.batched.ttft_p90),
        s3(lrr.fifo.latency_p90),
        pct1(lpa.batched.hit_rate),
        pct1(lrr.batched.kv_util_mean),
        pct1(lpa.batched.kv_util_mean),
        pct1(Some(lrr.batched.kv_util_peak)),
        pct1(Some(lpa.batched.kv_util_peak)),
        lrr.batched.preemptions,
        lpa.batched.preemptions,
        tok_s(lrr.batched.output_tok_per_s),
        tok_s(lpa.batched.output_tok_per_s),
    ))
}

/// The conversation trace under both engines: hits, preemptions, TTFT and why; None without
/// both routers' runs.
fn conversation_paragraph(c: &EngineComparison) -> Option<String> {
    let (Some(crr), Some(cpa)) =
        (c.get("conversation", RouterKind::RoundRobin), c.get("conversation", RouterKind::PrefixAware))
    else {
        return None;
    };
    let (tr, tp) = (crr.batched.ttft_p90.unwrap_or(f64::NAN), cpa.batched.ttft_p90.unwrap_or(f64::NAN));
    let (fr, fp) = (crr.fifo.latency_p90.unwrap_or(f64::NAN), cpa.fifo.latency_p90.unwrap_or(f64::NAN));
    let makespan_diff = (cpa.batched.makespan_s / crr.batched.makespan_s - 1.0).abs() * 100.0;
    let why = format!(
        "prefix-aware keeps each conversation on the pods that hold it, so its pods serve between {} and {} \
             requests (round-robin: {} to {}) and its mean waiting queue is {:.3} requests against {:.3}; {}",
        spread(&cpa.batched.per_pod_requests).0,
        spread(&cpa.batched.per_pod_requests).1,
        spread(&crr.batched.per_pod_requests).0,
        spread(&crr.batched.per_pod_requests).1,
        cpa.batched.mean_waiting.unwrap_or(f64::NAN),
        crr.batched.mean_waiting.unwrap_or(f64::NAN),
        if tp > tr {
            "at the tail that queueing costs more TTFT than the few hits save."
        } else {
            "the prefill its hits save outweighs that queueing."
        }
    );
    Some(format!(
        "**Conversation trace** ({} of its {} requests, {} pods x {} blocks, the trace's own output lengths: {} output \
         tokens). Prefix-aware (alpha {}) raises the batched hit rate from {} to {} (FIFO: {} to {}; the engines count a hit at \
         different moments, FIFO at arrival, batched at admission against a cache whose pinned blocks cannot be \
         evicted) and cuts preemptions from {} to {}: its pods hold each conversation's earlier turns, so fewer prompt blocks are \
         computed and pinned (prefill tokens {} vs {}; KV mean {} vs {}). Its TTFT p90 is {} s, {} round-robin's {} s \
         (FIFO p90: {} s, {} round-robin's {} s): {} Output tok/s ({} vs {}) is the trace's \
         demand over the makespan, not a capacity: both runs produce every output token (the makespans differ by \
         {:.2}%); decoding is what the FIFO engine leaves out, so its p90 is prefill and queueing only, and the \
         batched E2E p90 ({} s and {} s) adds one step per output token.",
        thousands(c.conversation_requests_run),
        thousands(c.conversation_requests_in_trace),
        crr.batched.pods,
        thousands(crr.batched.capacity as u64),
        thousands(crr.batched.output_tokens),
        cpa.alpha,
        pct1(crr.batched.hit_rate),
        pct1(cpa.batched.hit_rate),
        pct1(crr.fifo.hit_rate),
        pct1(cpa.fifo.hit_rate),
        crr.batched.preemptions,
        cpa.batched.preemptions,
        thousands(cpa.batched.prefill_tokens),
        thousands(crr.batched.prefill_tokens),
        pct1(cpa.batched.kv_util_mean),
        pct1(crr.batched.kv_util_mean),
        s3(Some(tp)),
        rel(tp, tr),
        s3(Some(tr)),
        s3(Some(fp)),
        rel(fp, fr),
        s3(Some(fr)),
        why,
        tok_s(cpa.batched.output_tok_per_s),
        tok_s(crr.batched.output_tok_per_s),
        makespan_diff,
        s3(crr.batched.e2e_p90),
        s3(cpa.batched.e2e_p90),
    ))
}

/// A note when the trace was cut.
pub fn cut_note(c: &EngineComparison) -> Option<String> {
    (c.conversation_requests_run < c.conversation_requests_in_trace).then(|| {
        format!(
            "The conversation trace ran its first {} of {} requests (`--shrink`).",
            thousands(c.conversation_requests_run),
            thousands(c.conversation_requests_in_trace)
        )
    })
}
