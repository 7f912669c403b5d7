//! `brokerlab fleet report`: the seed's experiments on the built-in scenarios.
//!
//! 1. capacity sweep from "fits everywhere" to "each pod holds hot/6", every router;
//! 2. the same with the timestamp-first layout;
//! 3. stale index: sweep k, gain over round-robin that survives, chases;
//! 4. alpha: p90 latency vs load penalty, per-pod load;
//! 5. the llm-d benchmark's shape beside the published figures;
//! 6. RAG-shaped tenants: documents in retrieval order vs sorted by id;
//! 7. a CPU tier under the GPU cache;
//! 8. autoscaling: a burst, a scaler, and whether the router fights it;
//! 9. the batched engine: the llm-d shape and the conversation trace, beside the FIFO engine.
//! 10. Mooncake's local-vs-global cache result on the vendored traces ([`crate::fleet::report::mooncake`]).
//! 11. llm-d's benchmark reproduced, and every router on the conversation trace ([`crate::fleet::report::llmd`]).
//! 12. The published llm-d tables beside the simulated ones ([`crate::fleet::report::published`]).
//! 13. Prefill/decode disaggregation ([`crate::fleet::report::deploy::pd`]).
//! 14. A KV offload tier under the batched engine ([`crate::fleet::report::deploy::tier`]).
//! 15. Autoscaling under the batched engine, WVA's saturation rule ([`crate::fleet::report::scaling`]).
//! 16. Heterogeneous pools: H100 and A100 pods under one router ([`crate::fleet::report::pools`]).
//! 17. Fleets of 64, 256 and 1,024 pods ([`crate::fleet::report::large`]).
//!
//! This module runs the experiments (data); [`charts`] draws them and [`render`] writes the
//! Markdown and HTML, with prose filled from the scenarios.

use std::fmt::Write as _;
use std::path::Path;

use brokerlab_core::fleet::workload::{DocOrder, Layout, WorkloadSpec};
use brokerlab_core::fleet::{FleetConfig, RouterKind};
use serde::Serialize;

use self::engine::EngineComparison;
use crate::error::CliResult;
use crate::fleet::run::progress::Progress;
use crate::fleet::run::{Fifo, Summary, with_fifo, with_view};
use crate::fleet::scenario::builtin::{BUILTIN, builtin};
use crate::fleet::scenario::{Generated, Scenario};
use crate::fleet::sweep::plots::{sweep_charts, write_chart};
use crate::fleet::sweep::{self, Point, PointSpec, SweepParam};
use crate::plot::{Chart, Series};
use crate::provenance::Provenance;

mod charts;
mod cost;
pub mod deploy;
pub mod engine;
pub mod large;
pub mod llmd;
pub mod mooncake;
pub mod pools;
pub mod published;
mod render;
pub mod scaling;

pub use charts::report;
pub use render::{Quoted, render_markdown, scale_note};

/// Published TTFT p90 of llm-d's benchmark (8 pods of 2xH100, Qwen3-32B), seconds.
pub const LLMD_PUBLISHED: [(&str, f64); 4] =
    [("precise prefix-aware", 0.542), ("approximate prefix-aware", 31.1), ("load-aware", 94.9), ("random", 92.6)];

/// Stale delays swept.
pub const STALE_KS: [u32; 12] = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
/// Alphas swept (log axis).
pub const ALPHAS: [f64; 15] =
    [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0];

/// Every experiment's points.
#[derive(Debug, Serialize)]
pub struct Experiments {
    /// Capacity sweep, stable prefix first.
    pub capacity: Vec<Point>,
    /// Capacity sweep, timestamp first.
    pub timestamp_first: Vec<Point>,
    /// Hot set of the multi-tenant scenario, blocks.
    pub hot_set_blocks: u64,
    /// Distinct blocks of the multi-tenant workload.
    pub fit_blocks: usize,
    /// Prefix-aware at hot/6 for each k (value = k).
    pub stale: Vec<Point>,
    /// Round-robin at hot/6 (the baseline of the stale experiment).
    pub stale_baseline: Point,
    /// Prefix-aware for each alpha, plus round-robin and least-loaded (value = alpha).
    pub alpha: Vec<Point>,
    /// llm-d shape, each router (and prefix-aware with a stale index).
    pub llmd: Vec<Point>,
    /// RAG: value 0 = retrieval order, 1 = sorted by id.
    pub rag: Vec<Point>,
    /// CPU tier at GPU capacity hot/6: value = CPU-tier blocks per pod.
    pub cpu_tier: Vec<Point>,
    /// Autoscaling runs (value = alpha for prefix-aware, 0 otherwise); see [`AUTOSCALE_RUNS`].
    pub autoscale: Vec<Point>,
    /// Routable pods over time for the runs of [`AUTOSCALE_TIMELINES`]: (label, [(s, pods)]).
    pub autoscale_timeline: Vec<Timeline>,
    /// Mooncake: local vs global cache on the vendored traces (always full size).
    pub mooncake: Vec<crate::fleet::report::mooncake::MooncakeTrace>,
    /// Every scenario's request count was divided by this (1: full size).
    pub shrink: u64,
    /// The request count each scenario actually ran.
    pub scenarios: Vec<ScenarioRun>,
    /// The batched engine beside the FIFO engine (section 9).
    pub engines: EngineComparison,
    /// llm-d's benchmark reproduced (section 11).
    pub llmd_bench: crate::fleet::report::llmd::LlmdSection,
    /// The published tables, simulated at the section's stage divisor (section 12).
    pub published: published::Tables,
    /// Deployed fleets: P/D (section 13) and the offload tier (section 14).
    pub deploy: deploy::DeploySection,
    /// Autoscaling under the batched engine (section 15).
    pub scaling: scaling::ScalingSection,
    /// Heterogeneous pools (section 16).
    pub pools: pools::PoolsSection,
    /// Fleets of 64, 256 and 1,024 pods (section 17).
    pub large: large::LargeSection,
}

/// A built-in scenario as it ran.
#[derive(Debug, Serialize)]
pub struct ScenarioRun {
    /// Scenario name (`scenarios/NAME.toml`).
    pub name: String,
    /// `requests` in the file.
    pub requests_in_file: u64,
    /// Requests run (the file's divided by the shrink factor).
    pub requests_run: u64,
}

/// The request counts of every built-in scenario at `shrink`.
pub fn scenarios_run(shrink: u64) -> CliResult<Vec<ScenarioRun>> {
    BUILTIN
        .iter()
        .map(|(name, _)| {
            Ok(ScenarioRun {
                name: name.to_string(),
                requests_in_file: builtin(name)?.workload.requests,
                requests_run: scenario(name, shrink)?.workload.requests,
            })
        })
        .collect()
}

/// A labelled step line: (label, [(time s, routable pods)]).
pub type Timeline = (String, Vec<(f64, f64)>);

/// The autoscaling runs: (router, alpha, autoscaled); not autoscaled = all 8 pods throughout.
pub const AUTOSCALE_RUNS: [(RouterKind, f64, bool); 8] = [
    (RouterKind::RoundRobin, 0.0, true),
    (RouterKind::LeastLoaded, 0.0, true),
    (RouterKind::PrefixAware, 0.125, true),
    (RouterKind::PrefixAware, 1.0, true),
    (RouterKind::PrefixAware, 8.0, true),
    (RouterKind::PrefixAware, 64.0, true),
    (RouterKind::RoundRobin, 0.0, false),
    (RouterKind::PrefixAware, 1.0, false),
];

/// Runs of [`AUTOSCALE_RUNS`] whose pod count over time is plotted.
pub const AUTOSCALE_TIMELINES: [usize; 4] = [0, 1, 3, 5];

/// CPU-tier sizes swept (blocks per pod), at a GPU capacity of hot/6.
pub const CPU_TIERS: [usize; 6] = [0, 512, 1024, 2048, 4096, 8192];

/// Optional reduction for quick runs (tests): requests are divided by `shrink`.
pub fn scenario(name: &str, shrink: u64) -> CliResult<Scenario> {
    let mut sc = builtin(name)?;
    sc.workload.requests = (sc.workload.requests / shrink.max(1)).max(1);
    Ok(sc)
}

fn specs(values: &[(f64, usize, FleetConfig)]) -> Vec<PointSpec> {
    sweep::for_each_router(values)
}

/// Points run by [`run_all`] when the capacity sweep has `caps` capacities.
pub fn total_points(caps: usize) -> u64 {
    let per_router = RouterKind::ALL.len();
    (2 * caps * per_router
        + STALE_KS.len()
        + 1
        + CPU_TIERS.len() * per_router
        + ALPHAS.len() * 3
        + 4
        + 2 * per_router
        + AUTOSCALE_RUNS.len()) as u64
        + engine::ENGINE_POINTS
        + crate::fleet::report::llmd::points()
        + published::RUNS
        + deploy::points()
        + scaling::points()
        + pools::points()
        + large::points()
}

/// Runs all experiments; `progress` counts points (its total is set once the capacities are
/// known) and names the experiment running.
pub fn run_all(threads: usize, shrink: u64, progress: &Progress) -> CliResult<Experiments> {
    // 1 + 2: capacity, both layouts, same capacities.
    progress.set_message("generating workloads");
    let mt = scenario("multi-tenant", shrink)?;
    let stable = Generated::new(mt.workload)?;
    let ts = Generated::new(WorkloadSpec { layout: Layout::TimestampFirst, ..mt.workload })?;
    let fit = stable.distinct_blocks();
    let hot = mt.workload.hot_set_blocks();
    let caps = sweep::geometric(fit as f64, (hot / 6) as f64, 12);
    progress.set_length(total_points(caps.len()));
    let at = |c: u64, w: usize| (c as f64, w, FleetConfig { capacity_blocks: c as usize, ..mt.fleet });
    let wls = [stable, ts];
    let cap_specs: Vec<PointSpec> = specs(&caps.iter().map(|&c| at(c, 0)).collect::<Vec<_>>());
    let ts_specs: Vec<PointSpec> = specs(&caps.iter().map(|&c| at(c, 1)).collect::<Vec<_>>());
    progress.set_message("capacity sweep");
    let capacity = sweep::run_points::<Fifo>(SweepParam::Capacity, &wls, &cap_specs, threads, progress)?;
    progress.set_message("timestamp-first");
    let timestamp_first = sweep::run_points::<Fifo>(SweepParam::Capacity, &wls, &ts_specs, threads, progress)?;

    // 3: stale index at hot/6.
    let small = FleetConfig { capacity_blocks: (hot / 6) as usize, ..mt.fleet };
    let mut st: Vec<PointSpec> = STALE_KS
        .iter()
        .map(|&k| PointSpec {
            value: k as f64,
            workload: 0,
            cfg: with_view(FleetConfig { router: RouterKind::PrefixAware, ..small }, |v| v.stale_delay = k),
            label: None,
        })
        .collect();
    st.push(PointSpec {
        value: 0.0,
        workload: 0,
        cfg: FleetConfig { router: RouterKind::RoundRobin, ..small },
        label: None,
    });
    progress.set_message("stale index");
    let mut stale = sweep::run_points::<Fifo>(SweepParam::Stale, &wls, &st, threads, progress)?;
    let stale_baseline = stale.pop().expect("baseline point");
    let tiers: Vec<_> =
        CPU_TIERS.iter().map(|&c| (c as f64, 0, with_fifo(small, |f| f.cpu_capacity_blocks = c))).collect();
    progress.set_message("cpu tier");
    let cpu_tier = sweep::run_points::<Fifo>(SweepParam::CpuCapacity, &wls, &specs(&tiers), threads, progress)?;

    // 4: alpha.
    let al = scenario("alpha", shrink)?;
    let alw = [Generated::new(al.workload)?];
    let mut a_specs: Vec<PointSpec> = ALPHAS
        .iter()
        .map(|&a| PointSpec {
            value: a,
            workload: 0,
            cfg: FleetConfig { router: RouterKind::PrefixAware, alpha: a, ..al.fleet },
            label: None,
        })
        .collect();
    for r in [RouterKind::RoundRobin, RouterKind::LeastLoaded] {
        for &a in &ALPHAS {
            a_specs.push(PointSpec { value: a, workload: 0, cfg: FleetConfig { router: r, ..al.fleet }, label: None });
        }
    }
    progress.set_message("alpha");
    let alpha = sweep::run_points::<Fifo>(SweepParam::Alpha, &alw, &a_specs, threads, progress)?;

    // 5: llm-d shape.
    let ld = scenario("llm-d", shrink)?;
    let ldw = [Generated::new(ld.workload)?];
    let mut l_specs = specs(&[(0.0, 0, ld.fleet)]);
    l_specs.push(PointSpec {
        value: 64.0,
        workload: 0,
        cfg: with_view(FleetConfig { router: RouterKind::PrefixAware, ..ld.fleet }, |v| v.stale_delay = 64),
        label: None,
    });
    progress.set_message("llm-d shape");
    let llmd = sweep::run_points::<Fifo>(SweepParam::Stale, &ldw, &l_specs, threads, progress)?;

    // 6: RAG.
    let rg = scenario("rag", shrink)?;
    let rgw = [
        Generated::new(WorkloadSpec { rag_order: DocOrder::Random, ..rg.workload })?,
        Generated::new(WorkloadSpec { rag_order: DocOrder::Sorted, ..rg.workload })?,
    ];
    progress.set_message("rag");
    let rag_specs = specs(&[(0.0, 0, rg.fleet), (1.0, 1, rg.fleet)]);
    let rag = sweep::run_points::<Fifo>(SweepParam::RagSorted, &rgw, &rag_specs, threads, progress)?;

    // 8: autoscaling.
    progress.set_message("autoscaling");
    let (autoscale, autoscale_timeline) = autoscale_runs(shrink, progress)?;

    // 9: the batched engine beside the FIFO engine (FIFO on the llm-d shape: the runs of 5).
    progress.set_message("batched engine");
    let llmd_fifo = |r: RouterKind| find(&llmd, r, 0.0).map(|p| p.summary.clone());
    let engines = engine::run(&ld, &llmd_fifo, shrink, &|| progress.inc(1))?;

    // 11: llm-d's benchmark reproduced.
    progress.set_message("llm-d benchmark");
    let llmd_bench = crate::fleet::report::llmd::run(shrink, &|| progress.inc(1))?;
    // 12: the published tables.
    progress.set_message("published tables");
    // At full size the section is `fleet tables` itself, the README's cells (the whole report
    // took 78 s on one thread here); a quick look (`--shrink`) runs every stage shorter and the
    // conversation runs' requests per slot / shrink, every level, the same rules.
    let stage_divisor =
        if shrink <= 1 { 1 } else { (llmd::REPORT_STAGE_DIVISOR * shrink).min(published::MAX_REPORT_DIVISOR) };
    let published = published::run(stage_divisor, shrink.max(1), &Default::default(), &|| progress.inc(1))?;

    // 13 + 14: deployed fleets (P/D, the offload tier).
    let deploy = deploy::run(shrink, threads, progress)?;

    // 15: autoscaling under the batched engine.
    let scaling = scaling::run(shrink, progress)?;

    // 16: heterogeneous pools.
    let pools = pools::run(shrink, threads, progress)?;

    // 17: fleets of 1,024 pods.
    let large = large::run(shrink, threads, progress)?;

    Ok(Experiments {
        capacity,
        timestamp_first,
        hot_set_blocks: hot,
        fit_blocks: fit,
        stale,
        stale_baseline,
        alpha,
        llmd,
        rag,
        cpu_tier,
        autoscale,
        autoscale_timeline,
        mooncake: crate::fleet::report::mooncake::run()?,
        shrink: shrink.max(1),
        scenarios: scenarios_run(shrink)?,
        engines,
        llmd_bench,
        published,
        deploy,
        scaling,
        pools,
        large,
    })
}

/// The configuration of run `i` of [`AUTOSCALE_RUNS`] on scenario `sc`.
fn autoscale_cfg(sc: &Scenario, i: usize) -> FleetConfig {
    let (router, alpha, scaled) = AUTOSCALE_RUNS[i];
    let mut cfg = FleetConfig { router, alpha, ..sc.fleet };
    if let Some(s) = cfg.scale_mut()
        && !scaled
    {
        *s = None;
    }
    cfg
}

/// Label of run `i` of [`AUTOSCALE_RUNS`] on a fleet of at most `pods` pods; `short` writes
/// prefix-aware as "PA" (a chart legend is narrow).
pub fn autoscale_label(i: usize, pods: usize, short: bool) -> String {
    let (router, alpha, scaled) = AUTOSCALE_RUNS[i];
    let a = if router == RouterKind::PrefixAware { format!(" alpha={alpha}") } else { String::new() };
    let s = if scaled { String::new() } else { format!(", fixed {pods} pods") };
    let name = if short && router == RouterKind::PrefixAware { "PA" } else { router.name() };
    format!("{name}{a}{s}")
}

/// Runs of [`AUTOSCALE_RUNS`] once each (small: sequential), keeping the outcomes of those in
/// [`AUTOSCALE_TIMELINES`] for their step lines.
fn autoscale_runs(shrink: u64, progress: &Progress) -> CliResult<(Vec<Point>, Vec<Timeline>)> {
    let sc = scenario("autoscale", shrink)?;
    let g = Generated::new(sc.workload)?;
    let (mut points, mut timelines) = (Vec::new(), Vec::new());
    for (i, &(_, alpha, _)) in AUTOSCALE_RUNS.iter().enumerate() {
        let keep = AUTOSCALE_TIMELINES.contains(&i);
        let res = crate::fleet::run::simulate::<Fifo>(autoscale_cfg(&sc, i), &mut &g, keep)?;
        if keep {
            timelines.push((autoscale_label(i, sc.fleet.pods, true), step_line(&res.outcomes)));
        }
        points.push(Point { param: SweepParam::Alpha, value: alpha, label: None, summary: res.summary });
        progress.inc(1);
    }
    Ok((points, timelines))
}

/// Routable pods over time as a step line: a point just before and at every change, and the
/// last arrival.
fn step_line(outcomes: &[brokerlab_core::fleet::Outcome]) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = Vec::new();
    let mut last = 0u32;
    for o in outcomes {
        let t = o.arrival_ns as f64 / 1e9;
        if pts.is_empty() || o.active_pods != last {
            if !pts.is_empty() {
                pts.push((t, last as f64));
            }
            pts.push((t, o.active_pods as f64));
            last = o.active_pods;
        }
    }
    if let Some(o) = outcomes.last() {
        pts.push((o.arrival_ns as f64 / 1e9, last as f64));
    }
    pts
}

fn hit(p: &Point) -> f64 {
    p.summary.hit_rate.unwrap_or(0.0)
}

fn find(pts: &[Point], router: RouterKind, value: f64) -> Option<&Point> {
    pts.iter().find(|p| p.summary.router == router && p.value == value)
}

impl Experiments {
    /// Largest and smallest capacity swept.
    pub fn capacity_ends(&self) -> (f64, f64) {
        let max = self.capacity.iter().map(|p| p.value).fold(f64::MIN, f64::max);
        let min = self.capacity.iter().map(|p| p.value).fold(f64::MAX, f64::min);
        (max, min)
    }

    /// Hit rate of `router` at capacity `c` (stable layout).
    pub fn hit_at(&self, router: RouterKind, c: f64) -> f64 {
        find(&self.capacity, router, c).map_or(0.0, hit)
    }

    /// Fraction of prefix-aware's hit-rate gain over round-robin kept at each k.
    pub fn stale_gain_kept(&self) -> Vec<(u32, f64)> {
        let base = hit(&self.stale_baseline);
        let exact = self.stale.iter().find(|p| p.value == 0.0).map_or(0.0, hit);
        self.stale.iter().map(|p| (p.value as u32, (hit(p) - base) / (exact - base))).collect()
    }

    /// Prefix-aware p90 by alpha.
    pub fn alpha_p90(&self) -> Vec<(f64, f64)> {
        self.alpha
            .iter()
            .filter(|p| p.summary.router == RouterKind::PrefixAware)
            .map(|p| (p.value, p.summary.latency_p90.unwrap_or(f64::NAN)))
            .collect()
    }

    /// The alpha with the lowest prefix-aware p90.
    pub fn best_alpha(&self) -> (f64, f64) {
        self.alpha_p90().into_iter().fold((f64::NAN, f64::INFINITY), |b, (a, p)| if p < b.1 { (a, p) } else { b })
    }
}

/// Headline numbers, as (label, value) rows.
pub fn headlines(ex: &Experiments) -> Vec<(String, String)> {
    let (cmax, cmin) = ex.capacity_ends();
    let rr_small = ex.hit_at(RouterKind::RoundRobin, cmin);
    let pa_small = ex.hit_at(RouterKind::PrefixAware, cmin);
    let ts_max = ex.timestamp_first.iter().map(hit).fold(0.0, f64::max);
    let ld = |r: RouterKind| ex.llmd.iter().find(|p| p.summary.router == r && p.value == 0.0);
    let (pa, rr) = (ld(RouterKind::PrefixAware), ld(RouterKind::RoundRobin));
    let kept = ex.stale_gain_kept();
    let k64 = kept.iter().find(|(k, _)| *k == 64).map_or(f64::NAN, |x| x.1);
    let (best_a, best_p90) = ex.best_alpha();
    let mut rows = vec![
        (
            format!("hit rate at capacity = hot/6 ({} blocks/pod)", engine::thousands(cmin as u64)),
            format!(
                "prefix-aware {:.1}% vs round-robin {:.1}% ({:.1}x)",
                pa_small * 100.0,
                rr_small * 100.0,
                pa_small / rr_small.max(1e-9)
            ),
        ),
        (
            format!("hit rate when everything fits ({} blocks/pod)", engine::thousands(cmax as u64)),
            RouterKind::ALL
                .iter()
                .map(|r| format!("{} {:.1}%", r.name(), ex.hit_at(*r, cmax) * 100.0))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "best hit rate with a timestamp on the first line".into(),
            format!("{:.2}% (any router, any capacity)", ts_max * 100.0),
        ),
        ("prefix-aware gain kept with index 64 requests stale".into(), format!("{:.0}%", k64 * 100.0)),
        ("alpha with the lowest p90 (alpha scenario)".into(), format!("{best_a} (p90 {best_p90:.3} s)")),
    ];
    if let (Some(pa), Some(rr)) = (pa, rr) {
        rows.push((
            "llm-d shape: p90 latency".into(),
            format!(
                "prefix-aware {:.3} s vs round-robin {:.1} s ({:.0}x), hit rate {:.1}% vs {:.1}%",
                pa.summary.latency_p90.unwrap_or(f64::NAN),
                rr.summary.latency_p90.unwrap_or(f64::NAN),
                rr.summary.latency_p90.unwrap_or(f64::NAN) / pa.summary.latency_p90.unwrap_or(f64::NAN),
                pa.summary.hit_rate.unwrap_or(0.0) * 100.0,
                rr.summary.hit_rate.unwrap_or(0.0) * 100.0
            ),
        ));
    }
    rows
}

/// The one number: how many times fewer prompt tokens round-robin serves from cache than
/// prefix-aware once the hot set is 6x one pod.
pub fn the_number(ex: &Experiments) -> String {
    let (_, cmin) = ex.capacity_ends();
    let rr = ex.hit_at(RouterKind::RoundRobin, cmin);
    let pa = ex.hit_at(RouterKind::PrefixAware, cmin);
    let prefill = |r: RouterKind| find(&ex.capacity, r, cmin).map_or(0, |p| p.summary.prefill_tokens) as f64;
    format!(
        "With the hot set 6x one pod, prefix-aware routing serves {:.1}% of prompt tokens from cache against round-robin's {:.1}%, and so computes {:.0}% fewer prefill tokens.",
        pa * 100.0,
        rr * 100.0,
        (1.0 - prefill(RouterKind::PrefixAware) / prefill(RouterKind::RoundRobin).max(1.0)) * 100.0
    )
}

/// (label, hit rate, simulated p90 s, published p90 s) for the llm-d comparison.
fn llmd_rows(ex: &Experiments) -> Vec<(String, f64, f64, f64)> {
    let rows = [
        ("prefix-aware (exact index)", RouterKind::PrefixAware, 0.0, 0usize),
        ("prefix-aware, index 64 requests stale", RouterKind::PrefixAware, 64.0, 1),
        ("least-loaded", RouterKind::LeastLoaded, 0.0, 2),
        ("round-robin", RouterKind::RoundRobin, 0.0, 3),
    ];
    rows.iter()
        .filter_map(|&(label, r, v, published)| {
            find(&ex.llmd, r, v).map(|p| {
                (label.to_string(), hit(p), p.summary.latency_p90.unwrap_or(f64::NAN), LLMD_PUBLISHED[published].1)
            })
        })
        .collect()
}
