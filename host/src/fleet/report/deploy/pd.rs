//! Section 13, P/D: SLO goodput and TTFT of a prefill/decode-disaggregated fleet against an
//! aggregated one of the same pods, over the prompt length (fixed prompt tokens per second), and
//! over the prefill:decode split of a fixed fleet (docs/MODEL.md, "Prefill/decode
//! disaggregation", "SLO goodput").

use std::fmt::Write as _;

use brokerlab_core::fleet::engine::pd::{Decider, PdConfig};
use brokerlab_core::fleet::slo::Slo;
use brokerlab_core::fleet::{BatchedConfig, FleetConfig, Profile, RouterKind};
use serde::Serialize;

use super::{DeployPoint, Unique, goodput, line, run_specs, s3, spec};
use crate::error::CliResult;
use crate::fleet::report::llmd::Block;
use crate::fleet::run::progress::Progress;
use crate::fleet::run::{BatchedSummary, config_error};
use crate::fleet::scenario::engine::batched;
use crate::plot::{Chart, Series};

/// Prompt lengths of the first sweep, tokens.
pub const PROMPTS: [u64; 7] = [128, 256, 512, 1024, 2048, 4096, 8192];
/// Output tokens of every request of the first sweep.
pub const OUTPUT_TOKENS: u64 = 128;
/// Prompt tokens arriving per second in the first sweep (the request rate is this / L): 3/8 of
/// the 4-pod fleet's all-miss prefill rate (about 16,000 tokens/s per pod for the profile), 3/4
/// of the P/D fleet's two prefill pods'.
pub const PROMPT_TOK_PER_S: u64 = 24_000;
/// Pods of the first sweep, and the prefill pods of its P/D fleet.
pub const PODS: usize = 4;
/// Prefill pods of the first sweep's P/D fleet.
pub const PREFILL_PODS: u32 = 2;
/// Pods of the split sweep (its P/D fleets have 1 ..= SPLIT_PODS - 1 prefill pods).
pub const SPLIT_PODS: usize = 8;
/// Prompt and output tokens of the split sweep's requests.
pub const SPLIT_SHAPE: (u64, u64) = (2048, 128);
/// Requests per second of the split sweep (61,440 prompt tokens/s: at least 4 of the 8 pods'
/// prefill rate).
pub const SPLIT_RATE_PER_S: u64 = 30;
/// Seconds of arrivals of every run (divided by `--shrink`).
pub const DURATION_S: u64 = 60;
/// KV blocks per pod (no run is short of KV: the comparison is about compute).
pub const CAPACITY: usize = 20_000;
/// The SLOs: TTFT and TPOT, ms (DistServe-style: a tight TPOT).
pub const SLO_MS: (u64, u64) = (2_000, 20);
/// The router of both pools (llm-d's P/D sample scores load in both profiles).
pub const ROUTER: RouterKind = RouterKind::LeastLoaded;
/// The section's charts, in page order.
pub const STEMS: [&str; 4] = ["pd_goodput_vs_prompt", "pd_ttft_vs_prompt", "pd_split_goodput", "pd_split_ttft"];
/// Series name of the aggregated fleet.
pub const AGGREGATED: &str = "aggregated";

/// The P/D experiment's runs.
#[derive(Debug, Clone, Serialize)]
pub struct PdExperiment {
    /// Seconds of arrivals each run had (after `--shrink`).
    pub duration_s: f64,
    /// First sweep: value = L; series "aggregated" and "P/D NP:ND".
    pub by_prompt: Vec<DeployPoint>,
    /// Split sweep: value = NP (0 for the aggregated fleet, series "aggregated").
    pub by_split: Vec<DeployPoint>,
}

/// Runs of [`run`].
pub fn points() -> u64 {
    (2 * PROMPTS.len() + SPLIT_PODS) as u64
}

/// The SLOs as the core takes them.
pub fn slo() -> Slo {
    Slo { ttft_ns: Some(SLO_MS.0 * 1_000_000), tpot_ns: Some(SLO_MS.1 * 1_000_000) }
}

/// Series name of a P/D fleet of `pods` with `np` prefill pods.
pub fn pd_series(np: u32, pods: usize) -> String {
    format!("P/D {np}:{}", pods as u32 - np)
}

/// The batched fleet of `pods` pods (P/D with `np` > 0 prefill pods, decider `always`).
fn fleet(pods: usize, np: u32) -> CliResult<FleetConfig> {
    let mut e = BatchedConfig::new(Profile::Qwen3_32bH100x2);
    if np > 0 {
        e.pd = Some(PdConfig { decider: Decider::Always, ..PdConfig::new(np, CAPACITY) });
    }
    // the profile's KV bytes per token, as `--profile` sets it on the command line
    e.offload.kv_bytes_per_token = e.profile_kv_bytes_per_token();
    batched(FleetConfig::new(pods, CAPACITY, ROUTER), e).map_err(config_error)
}

/// Requests arriving one every `gap_ns` over [`DURATION_S`] / `shrink` seconds (at least 8).
fn count(gap_ns: u64, shrink: u64) -> u64 {
    (DURATION_S * 1_000_000_000 / shrink.max(1) / gap_ns).max(8)
}

/// Runs both sweeps.
pub fn run(shrink: u64, threads: usize, progress: &Progress) -> CliResult<PdExperiment> {
    progress.set_message("P/D by prompt length");
    let mut sources = Vec::new();
    let mut specs = Vec::new();
    for (i, &l) in PROMPTS.iter().enumerate() {
        let gap_ns = l * 1_000_000_000 / PROMPT_TOK_PER_S;
        sources.push(Unique::new(count(gap_ns, shrink), gap_ns, l, OUTPUT_TOKENS));
        specs.push(spec(l as f64, i, fleet(PODS, 0)?));
        specs.push(spec(l as f64, i, fleet(PODS, PREFILL_PODS)?));
    }
    let label = |p: &crate::fleet::sweep::PointSpec| series_of(&p.cfg);
    let by_prompt = run_specs(&specs, &sources, threads, progress, Some(slo()), &label)?;
    progress.set_message("P/D by split");
    let gap_ns = 1_000_000_000 / SPLIT_RATE_PER_S;
    let split_src = [Unique::new(count(gap_ns, shrink), gap_ns, SPLIT_SHAPE.0, SPLIT_SHAPE.1)];
    let mut specs = vec![spec(0.0, 0, fleet(SPLIT_PODS, 0)?)];
    for np in 1..SPLIT_PODS as u32 {
        specs.push(spec(np as f64, 0, fleet(SPLIT_PODS, np)?));
    }
    let by_split = run_specs(&specs, &split_src, threads, progress, Some(slo()), &label)?;
    Ok(PdExperiment { duration_s: DURATION_S as f64 / shrink.max(1) as f64, by_prompt, by_split })
}

/// "aggregated" or "P/D NP:ND" for a batched fleet.
fn series_of(cfg: &FleetConfig) -> String {
    match cfg.batched_config().and_then(|e| e.pd) {
        Some(pd) => pd_series(pd.prefill_pods, cfg.pods),
        None => AGGREGATED.into(),
    }
}

fn ttft_p90(s: &BatchedSummary) -> f64 {
    s.ttft_p90.unwrap_or(f64::NAN)
}

/// The four charts: (stem, chart).
pub fn charts(x: &PdExperiment) -> Vec<(&'static str, Chart)> {
    let pd = pd_series(PREFILL_PODS, PODS);
    let by_prompt = |y: &dyn Fn(&BatchedSummary) -> f64| {
        [AGGREGATED, pd.as_str()].iter().map(|s| Series::new(*s, line(&x.by_prompt, s, y))).collect::<Vec<_>>()
    };
    let (ttft, tpot) = SLO_MS;
    let split_agg = |y: &dyn Fn(&BatchedSummary) -> f64| -> Vec<Series> {
        let pd_pts: Vec<(f64, f64)> =
            x.by_split.iter().filter(|p| p.series != AGGREGATED).map(|p| (p.value, y(&p.summary))).collect();
        let agg = line(&x.by_split, AGGREGATED, y).first().map_or(f64::NAN, |p| p.1);
        let flat = pd_pts.iter().map(|p| (p.0, agg)).collect();
        vec![Series::new(format!("{AGGREGATED} ({SPLIT_PODS} pods)"), flat), Series::new("P/D", pd_pts)]
    };
    let (l, o) = SPLIT_SHAPE;
    vec![
        (
            STEMS[0],
            Chart {
                title: format!("P/D vs aggregated, {PODS} pods: requests meeting both SLOs vs prompt length"),
                x_label: "prompt tokens".into(),
                y_label: "requests meeting both SLOs (%)".into(),
                series: by_prompt(&|s| good(s) as f64 * 100.0 / s.requests.max(1) as f64),
                x_log: true,
                y_min: Some(0.0),
                y_max: Some(100.0),
                notes: vec![
                    format!("{PROMPT_TOK_PER_S} prompt tok/s"),
                    format!("{OUTPUT_TOKENS} output tokens"),
                    format!("TTFT <= {ttft} ms"),
                    format!("TPOT <= {tpot} ms"),
                ],
                ..Chart::default()
            },
        ),
        (
            STEMS[1],
            Chart {
                title: format!("P/D vs aggregated, {PODS} pods: TTFT p90 vs prompt length"),
                notes: vec!["P/D: with the KV transfer".into()],
                x_label: "prompt tokens".into(),
                y_label: "TTFT p90 (s)".into(),
                series: by_prompt(&ttft_p90),
                x_log: true,
                y_log: true,
                ..Chart::default()
            },
        ),
        (
            STEMS[2],
            Chart {
                title: format!("{SPLIT_PODS} pods: SLO goodput vs prefill pods"),
                notes: vec![
                    format!("{SPLIT_RATE_PER_S} req/s"),
                    format!("{l}-token prompts"),
                    format!("{o} output tokens"),
                ],
                x_label: "prefill pods (the rest decode)".into(),
                y_label: "goodput (requests/s meeting both SLOs)".into(),
                series: split_agg(&goodput),
                y_min: Some(0.0),
                ..Chart::default()
            },
        ),
        (
            STEMS[3],
            Chart {
                title: format!("{SPLIT_PODS} pods: TTFT p90 vs prefill pods"),
                x_label: "prefill pods (the rest decode)".into(),
                y_label: "TTFT p90 (s)".into(),
                series: split_agg(&ttft_p90),
                y_log: true,
                ..Chart::default()
            },
        ),
    ]
}

/// The run of `series` at `value`.
fn at<'a>(pts: &'a [DeployPoint], series: &str, value: f64) -> Option<&'a DeployPoint> {
    pts.iter().find(|p| p.series == series && p.value == value)
}

/// Requests meeting both SLOs.
pub(super) fn good(s: &BatchedSummary) -> u64 {
    s.slo.as_ref().map_or(0, |k| k.slo_good_requests)
}

/// Prompt lengths (as text) where `cmp(P/D good requests, aggregated good requests)` holds (both
/// runs serve the same requests).
pub(super) fn prompts_where(x: &PdExperiment, cmp: fn(u64, u64) -> bool) -> Vec<String> {
    let pd = pd_series(PREFILL_PODS, PODS);
    PROMPTS
        .iter()
        .filter(|&&l| {
            let (Some(a), Some(p)) = (at(&x.by_prompt, AGGREGATED, l as f64), at(&x.by_prompt, &pd, l as f64)) else {
                return false;
            };
            cmp(good(&p.summary), good(&a.summary))
        })
        .map(|l| l.to_string())
        .collect()
}

pub(super) fn list(v: &[String]) -> String {
    if v.is_empty() { "none".into() } else { v.join(", ") }
}

/// The intro and the findings, formatted from the runs.
pub fn blocks(x: &PdExperiment) -> Vec<Block> {
    let (ttft, tpot) = SLO_MS;
    let mut o = vec![Block::Para(format!(
        "**Prefill/decode disaggregation** (docs/MODEL.md, \"Prefill/decode disaggregation\": llm-d's decode-first flow, \
         decider `always` as llm-d's P/D guide ships it, the KV moved over each decode pod's 25 GB/s link shared by \
         processor sharing). Every pod runs the batched engine with profile `qwen3-32b-h100x2`, router least-loaded in \
         both pools, {CAPACITY} KV blocks per pod; prompts are unique (no cache hit), arrivals evenly spaced over {} s. \
         A request is good when its TTFT is at most {ttft} ms and its time per output token after the first at most \
         {tpot} ms (vLLM's `--goodput` rule, \"SLO goodput\"); goodput is good requests per second of the makespan. \
         First sweep: {PODS} pods aggregated against {} with {PROMPT_TOK_PER_S} prompt tokens per second arriving \
         (the request rate falls as the prompt grows) and {OUTPUT_TOKENS} output tokens each. Second sweep: \
         {SPLIT_PODS} pods at every prefill:decode split against the same {SPLIT_PODS} pods aggregated.",
        x.duration_s,
        pd_series(PREFILL_PODS, PODS),
    ))];
    o.extend(prompt_finding(x));
    o.extend(split_finding(x));
    o
}

/// What the prompt sweep shows, or None without its runs.
fn prompt_finding(x: &PdExperiment) -> Option<Block> {
    let pd = pd_series(PREFILL_PODS, PODS);
    let (lo, hi) = (PROMPTS[0] as f64, PROMPTS[PROMPTS.len() - 1] as f64);
    let (a_hi, p_hi) = (at(&x.by_prompt, AGGREGATED, hi)?, at(&x.by_prompt, &pd, hi)?);
    let (a_lo, p_lo) = (at(&x.by_prompt, AGGREGATED, lo)?, at(&x.by_prompt, &pd, lo)?);
    let kv = p_hi.summary.pd.as_ref().map_or(0, |k| k.kv_bytes_per_token);
    let transfer = p_hi.summary.pd.as_ref().and_then(|k| k.transfer_ns_p90).map_or(f64::NAN, |n| n as f64 / 1e6);
    let row = |p: &DeployPoint| {
        format!(
            "{} of {} good, TTFT p90 {} s, ITL p99 {} s",
            good(&p.summary),
            p.summary.requests,
            s3(p.summary.ttft_p90),
            s3(p.summary.itl_p99)
        )
    };
    Some(Block::Para(format!(
        "**By prompt length.** {pd} has more requests meeting both SLOs than the aggregated fleet at prompts of {} \
         tokens, fewer at {}, and as many at {}. The aggregated pods compute every prompt in the steps that also \
         decode: a decode that shares a step with a prompt chunk waits for the chunk (up to {} tokens, {:.0} ms), which \
         is what its ITL p99 shows; {pd} keeps prompts off the decode pods but computes them on half the pods and \
         adds the KV transfer to TTFT. At {lo} tokens ({:.1} requests/s): aggregated {}; {pd} {}. At {hi} tokens \
         ({:.1} requests/s): aggregated {}; {pd} {}, the transfer p90 {:.3} ms ({} blocks of {} KiB over 25 GB/s plus \
         50 us).",
        list(&prompts_where(x, |p, a| p > a)),
        list(&prompts_where(x, |p, a| p < a)),
        list(&prompts_where(x, |p, a| p == a)),
        BatchedConfig::new(Profile::Qwen3_32bH100x2).max_num_batched_tokens,
        chunk_ms(),
        PROMPT_TOK_PER_S as f64 / lo,
        row(a_lo),
        row(p_lo),
        PROMPT_TOK_PER_S as f64 / hi,
        row(a_hi),
        row(p_hi),
        transfer,
        PROMPTS[PROMPTS.len() - 1].div_ceil(16),
        kv * 16 / 1024,
    )))
}

/// A full step's time (a prompt chunk of max_num_batched_tokens) under the profile, ms.
fn chunk_ms() -> f64 {
    let e = BatchedConfig::new(Profile::Qwen3_32bH100x2);
    e.cost
        .linear()
        .map_or(f64::NAN, |c| (c.t_overhead_ns + c.t_prefill_token_ns * e.max_num_batched_tokens as u64) as f64 / 1e6)
}

/// What the split sweep shows, or None without its runs.
fn split_finding(x: &PdExperiment) -> Option<Block> {
    let agg = at(&x.by_split, AGGREGATED, 0.0)?;
    let pd: Vec<&DeployPoint> = x.by_split.iter().filter(|p| p.series != AGGREGATED).collect();
    // most good requests, then the highest goodput; the first such split on ties
    let best = pd.iter().copied().fold(None::<&DeployPoint>, |b, p| match b {
        Some(b) if (good(&b.summary), goodput(&b.summary)) >= (good(&p.summary), goodput(&p.summary)) => Some(b),
        _ => Some(p),
    })?;
    let (first, last) = (pd.first()?, pd.last()?);
    let (l, o) = SPLIT_SHAPE;
    let beats = pd.iter().filter(|p| good(&p.summary) > good(&agg.summary)).count();
    Some(Block::Para(format!(
        "**By split** ({SPLIT_RATE_PER_S} requests/s of {l}-token prompts and {o} output tokens on {SPLIT_PODS} pods). \
         The best split is {} with {} good requests/s ({} of {} requests good, TTFT p90 {} s); the aggregated fleet \
         has {} ({} good, TTFT p90 {} s, ITL p99 {} s); {} of the {} splits have more good requests than it. With the \
         fewest prefill pods ({}) TTFT p90 is {} s and goodput {}; with the fewest decode pods ({}) ITL p99 is {} s \
         and goodput {}.",
        best.series,
        s3(Some(goodput(&best.summary))),
        good(&best.summary),
        best.summary.requests,
        s3(best.summary.ttft_p90),
        s3(Some(goodput(&agg.summary))),
        good(&agg.summary),
        s3(agg.summary.ttft_p90),
        s3(agg.summary.itl_p99),
        beats,
        pd.len(),
        first.series,
        s3(first.summary.ttft_p90),
        s3(Some(goodput(&first.summary))),
        last.series,
        s3(last.summary.itl_p99),
        s3(Some(goodput(&last.summary))),
    )))
}

/// Every run, Markdown.
pub fn table(x: &PdExperiment) -> String {
    let mut o = String::from(
        "| sweep | value | fleet | requests | good | goodput (req/s) | TTFT p90 (s) | ITL p99 (s) | transfer p90 (ms) | preemptions |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (sweep, pts) in [("prompt tokens", &x.by_prompt), ("prefill pods", &x.by_split)] {
        for p in pts {
            let s = &p.summary;
            let _ = writeln!(
                o,
                "| {sweep} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.value,
                p.series,
                s.requests,
                good(s),
                s3(Some(goodput(s))),
                s3(s.ttft_p90),
                s3(s.itl_p99),
                s.pd.as_ref().and_then(|k| k.transfer_ns_p90).map_or("-".into(), |n| format!("{:.3}", n as f64 / 1e6)),
                s.preemptions,
            );
        }
    }
    o
}
