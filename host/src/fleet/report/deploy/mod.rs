//! `fleet report`, sections 13 and 14: the fleets people deploy under the batched engine.
//! Section 13 is prefill/decode disaggregation ([`pd`]: SLO goodput and TTFT against the prompt
//! length and the prefill:decode split), section 14 the KV offload tier ([`tier`]: hit rate and
//! TTFT against the CPU tier's size and the PCIe bandwidth). docs/MODEL.md, "Prefill/decode
//! disaggregation" and "The KV offload tier", has the rules; every sentence of the prose is
//! formatted from the runs.
//!
//! Both sections' runs are one [`DeploySection`] (`deploy` in `experiments.json`): `report/mod.rs`
//! calls [`run`], [`charts`] adds the plots, and the report's section list calls
//! [`pd_page_blocks`] and [`tier_page_blocks`].

use brokerlab_core::fleet::limits::BLOCK_TOKENS;
use brokerlab_core::fleet::{Error as CoreError, FleetConfig, Request};
use serde::Serialize;

use crate::error::CliResult;
use crate::fleet::cli::compare::page;
use crate::fleet::report::llmd::Block;
use crate::fleet::run::progress::Progress;
use crate::fleet::run::{Batched, BatchedSummary, RequestSource, simulate_slo};
use crate::fleet::sweep::{PointSpec, par_points};
use crate::plot::Chart;

pub mod pd;
pub mod tier;

/// Section 13's title.
pub const PD_TITLE: &str = "13. Prefill/decode disaggregation";
/// Section 14's title.
pub const TIER_TITLE: &str = "14. A KV offload tier under the batched engine";

/// Both experiments' runs.
#[derive(Debug, Clone, Serialize)]
pub struct DeploySection {
    /// P/D against aggregated.
    pub pd: pd::PdExperiment,
    /// The offload tier.
    pub tier: tier::TierExperiment,
}

/// One run of the section: the swept value and the batched engine's summary.
#[derive(Debug, Clone, Serialize)]
pub struct DeployPoint {
    /// The swept value (prompt tokens, prefill pods, CPU-tier blocks or PCIe bytes/s).
    pub value: f64,
    /// The series it belongs to (e.g. "aggregated", "P/D 2:2", a router).
    pub series: String,
    /// The run.
    pub summary: BatchedSummary,
}

/// Points [`run`] adds to the report's progress bar.
pub fn points() -> u64 {
    pd::points() + tier::points()
}

/// Runs both experiments, `1/shrink` of their requests, on `threads` threads.
pub fn run(shrink: u64, threads: usize, progress: &Progress) -> CliResult<DeploySection> {
    Ok(DeploySection { pd: pd::run(shrink, threads, progress)?, tier: tier::run(shrink, threads, progress)? })
}

/// Runs each spec (its `workload` indexes `sources`) under the batched engine with `slo`,
/// labelling it `label(spec)`, in spec order.
fn run_specs<S: Sync>(
    specs: &[PointSpec],
    sources: &[S],
    threads: usize,
    progress: &Progress,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
    label: &(dyn Fn(&PointSpec) -> String + Sync),
) -> CliResult<Vec<DeployPoint>>
where
    for<'a> &'a S: RequestSource,
{
    par_points(specs, threads, progress, |p| {
        let mut src = &sources[p.workload];
        let summary = simulate_slo::<Batched>(p.cfg, &mut src, false, slo)?.summary;
        Ok(DeployPoint { value: p.value, series: label(p), summary })
    })
}

/// A PointSpec.
fn spec(value: f64, workload: usize, cfg: FleetConfig) -> PointSpec {
    PointSpec { value, workload, cfg, label: None }
}

/// Synthetic requests held in memory: every `gap_ns` one request of L prompt tokens (all
/// blocks unique, so no cache hit anywhere) and O output tokens.
#[derive(Debug)]
pub struct Unique {
    /// (arrival ns, L, O, key range).
    requests: Vec<(u64, u64, u64, std::ops::Range<usize>)>,
    keys: Vec<u64>,
    /// Name in error messages.
    name: String,
}

impl Unique {
    /// `n` requests, one every `gap_ns` from 0, each L = `prompt` and O = `output`.
    pub fn new(n: u64, gap_ns: u64, prompt: u64, output: u64) -> Self {
        let blocks = prompt.div_ceil(BLOCK_TOKENS as u64);
        let mut keys = Vec::with_capacity((n * blocks) as usize);
        let mut requests = Vec::with_capacity(n as usize);
        for i in 0..n {
            let at = keys.len();
            // distinct keys for every block of every request (no shared prefix)
            keys.extend((0..blocks).map(|j| 0x5eed_0000_0000 + i * blocks + j));
            requests.push((i * gap_ns, prompt, output, at..keys.len()));
        }
        Unique { requests, keys, name: format!("{n} unique {prompt}-token prompts, {output} output tokens") }
    }
}

impl RequestSource for &Unique {
    fn feed(&mut self, sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>) -> CliResult<()> {
        let name = format!("report workload ({})", self.name);
        crate::fleet::report::engine::feed_held(&self.requests, &self.keys, &name, sink)
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.requests.len() as u64)
    }
}

/// Both sections' charts: (section key "deploy", file stem, chart).
pub fn charts(s: &DeploySection) -> Vec<(&'static str, String, Chart)> {
    let mut out: Vec<(&'static str, String, Chart)> = Vec::new();
    for (stem, c) in pd::charts(&s.pd).into_iter().chain(tier::charts(&s.tier)) {
        out.push(("deploy", stem.into(), c));
    }
    out
}

/// The series of `points` named `series`, as (value, y) pairs in value order.
fn line(points: &[DeployPoint], series: &str, y: &dyn Fn(&BatchedSummary) -> f64) -> Vec<(f64, f64)> {
    points.iter().filter(|p| p.series == series).map(|p| (p.value, y(&p.summary))).collect()
}

/// The series names of `points` in first-seen order.
fn series_names(points: &[DeployPoint]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in points {
        if !names.contains(&p.series) {
            names.push(p.series.clone());
        }
    }
    names
}

/// Section 13's paragraphs and table, with the chart stems placed after its intro and findings
/// (`Err(stem)` entries stand for a figure).
fn pd_layout(x: &pd::PdExperiment) -> Vec<Result<Block, &'static str>> {
    let mut o: Vec<Result<Block, &'static str>> = Vec::new();
    o.extend(pd::blocks(x).into_iter().map(Ok));
    o.extend(pd::STEMS.iter().map(|s| Err(*s)));
    o.push(Ok(Block::Table(pd::table(x))));
    o
}

/// Section 14's paragraphs and table, laid out as [`pd_layout`]'s.
fn tier_layout(x: &tier::TierExperiment) -> Vec<Result<Block, &'static str>> {
    let mut o: Vec<Result<Block, &'static str>> = Vec::new();
    o.extend(tier::blocks(x).into_iter().map(Ok));
    o.extend(tier::STEMS.iter().map(|s| Err(*s)));
    o.push(Ok(Block::Table(tier::table(x))));
    o
}

/// Section 13 as page blocks, heading first, with the inline SVGs of `svgs` (section, stem,
/// svg) for its figures: one source for the Markdown and the HTML page.
pub fn pd_page_blocks(s: &DeploySection, svgs: &[(String, String, String)]) -> Vec<page::Block> {
    to_page(PD_TITLE, pd_layout(&s.pd), svgs)
}

/// Section 14 as page blocks, as [`pd_page_blocks`].
pub fn tier_page_blocks(s: &DeploySection, svgs: &[(String, String, String)]) -> Vec<page::Block> {
    to_page(TIER_TITLE, tier_layout(&s.tier), svgs)
}

/// A heading and a layout as page blocks, each `Err(stem)` replaced by its SVG in `svgs`.
fn to_page(
    title: &str,
    layout: Vec<Result<Block, &'static str>>,
    svgs: &[(String, String, String)],
) -> Vec<page::Block> {
    let mut v = vec![page::Block::Heading(title.into())];
    for b in layout {
        match b {
            Ok(Block::Para(p)) => v.push(page::Block::Para(p)),
            Ok(Block::Table(t)) => v.push(page::table_from_md(&t)),
            Ok(Block::Figures) => {}
            Err(stem) => {
                if let Some((_, _, svg)) = svgs.iter().find(|(sec, st, _)| sec == "deploy" && st == stem) {
                    v.push(page::Block::Figure(stem.into(), svg.clone()));
                }
            }
        }
    }
    v
}

fn s3(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |x| if x >= 100.0 { format!("{x:.1}") } else { format!("{x:.3}") })
}

fn pct(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |x| format!("{:.1}%", x * 100.0))
}

/// Goodput (requests/s meeting both SLOs) of a run; NaN without the SLO keys.
fn goodput(s: &BatchedSummary) -> f64 {
    s.slo.as_ref().and_then(|k| k.goodput_req_per_s).unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests;
