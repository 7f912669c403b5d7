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
//! 10. Mooncake's local-vs-global cache result on the vendored traces ([`super::mooncake`]).
//! 11. llm-d's benchmark reproduced, and every router on the conversation trace ([`super::llmd`]).

use std::fmt::Write as _;
use std::path::Path;

use brokerlab_core::fleet::workload::{DocOrder, Layout, WorkloadSpec};
use brokerlab_core::fleet::{FleetConfig, RouterKind};
use serde::Serialize;

use super::engine_report::{self, EngineComparison};
use super::progress::Progress;
use super::report::{BUILTIN, builtin, sweep_charts, write_chart};
use super::run::Summary;
use super::scenario::{Generated, Scenario};
use super::sweep::{self, Point, PointSpec};
use crate::error::CliResult;
use crate::plot::{Chart, Series};
use crate::provenance::Provenance;

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
    pub mooncake: Vec<super::mooncake::MooncakeTrace>,
    /// Every scenario's request count was divided by this (1: full size).
    pub shrink: u64,
    /// The request count each scenario actually ran.
    pub scenarios: Vec<ScenarioRun>,
    /// The batched engine beside the FIFO engine (section 9).
    pub engines: EngineComparison,
    /// llm-d's benchmark reproduced (section 11).
    pub llmd_bench: super::llmd::LlmdSection,
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
        + engine_report::ENGINE_POINTS
        + super::llmd::points()
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
    let capacity = sweep::run_points("capacity", &wls, &cap_specs, threads, progress)?;
    progress.set_message("timestamp-first");
    let timestamp_first = sweep::run_points("capacity", &wls, &ts_specs, threads, progress)?;

    // 3: stale index at hot/6.
    let small = FleetConfig { capacity_blocks: (hot / 6) as usize, ..mt.fleet };
    let mut st: Vec<PointSpec> = STALE_KS
        .iter()
        .map(|&k| PointSpec {
            value: k as f64,
            workload: 0,
            cfg: FleetConfig { router: RouterKind::PrefixAware, stale_delay: k, ..small },
        })
        .collect();
    st.push(PointSpec { value: 0.0, workload: 0, cfg: FleetConfig { router: RouterKind::RoundRobin, ..small } });
    progress.set_message("stale index");
    let mut stale = sweep::run_points("stale", &wls, &st, threads, progress)?;
    let stale_baseline = stale.pop().expect("baseline point");
    let tiers: Vec<_> =
        CPU_TIERS.iter().map(|&c| (c as f64, 0, FleetConfig { cpu_capacity_blocks: c, ..small })).collect();
    progress.set_message("cpu tier");
    let cpu_tier = sweep::run_points("cpu_capacity", &wls, &specs(&tiers), threads, progress)?;

    // 4: alpha.
    let al = scenario("alpha", shrink)?;
    let alw = [Generated::new(al.workload)?];
    let mut a_specs: Vec<PointSpec> = ALPHAS
        .iter()
        .map(|&a| PointSpec {
            value: a,
            workload: 0,
            cfg: FleetConfig { router: RouterKind::PrefixAware, alpha: a, ..al.fleet },
        })
        .collect();
    for r in [RouterKind::RoundRobin, RouterKind::LeastLoaded] {
        for &a in &ALPHAS {
            a_specs.push(PointSpec { value: a, workload: 0, cfg: FleetConfig { router: r, ..al.fleet } });
        }
    }
    progress.set_message("alpha");
    let alpha = sweep::run_points("alpha", &alw, &a_specs, threads, progress)?;

    // 5: llm-d shape.
    let ld = scenario("llm-d", shrink)?;
    let ldw = [Generated::new(ld.workload)?];
    let mut l_specs = specs(&[(0.0, 0, ld.fleet)]);
    l_specs.push(PointSpec {
        value: 64.0,
        workload: 0,
        cfg: FleetConfig { router: RouterKind::PrefixAware, stale_delay: 64, ..ld.fleet },
    });
    progress.set_message("llm-d shape");
    let llmd = sweep::run_points("stale", &ldw, &l_specs, threads, progress)?;

    // 6: RAG.
    let rg = scenario("rag", shrink)?;
    let rgw = [
        Generated::new(WorkloadSpec { rag_order: DocOrder::Random, ..rg.workload })?,
        Generated::new(WorkloadSpec { rag_order: DocOrder::Sorted, ..rg.workload })?,
    ];
    progress.set_message("rag");
    let rag_specs = specs(&[(0.0, 0, rg.fleet), (1.0, 1, rg.fleet)]);
    let rag = sweep::run_points("rag_sorted", &rgw, &rag_specs, threads, progress)?;

    // 8: autoscaling.
    progress.set_message("autoscaling");
    let (autoscale, autoscale_timeline) = autoscale_runs(shrink, progress)?;

    // 9: the batched engine beside the FIFO engine (FIFO on the llm-d shape: the runs of 5).
    progress.set_message("batched engine");
    let llmd_fifo = |r: RouterKind| find(&llmd, r, 0.0).map(|p| p.summary.clone());
    let engines = engine_report::run(&ld, &llmd_fifo, shrink, &|| progress.inc(1))?;

    // 11: llm-d's benchmark reproduced.
    progress.set_message("llm-d benchmark");
    let llmd_bench = super::llmd::run(shrink, &|| progress.inc(1))?;

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
        mooncake: super::mooncake::run()?,
        shrink: shrink.max(1),
        scenarios: scenarios_run(shrink)?,
        engines,
        llmd_bench,
    })
}

/// The configuration of run `i` of [`AUTOSCALE_RUNS`] on scenario `sc`.
fn autoscale_cfg(sc: &Scenario, i: usize) -> FleetConfig {
    let (router, alpha, scaled) = AUTOSCALE_RUNS[i];
    FleetConfig { router, alpha, scale: if scaled { sc.fleet.scale } else { None }, ..sc.fleet }
}

/// Label of run `i` of [`AUTOSCALE_RUNS`].
pub fn autoscale_label(i: usize) -> String {
    let (router, alpha, scaled) = AUTOSCALE_RUNS[i];
    let a = if router == RouterKind::PrefixAware { format!(" alpha={alpha}") } else { String::new() };
    let s = if scaled { "" } else { ", fixed 8 pods" };
    format!("{}{a}{s}", router.name())
}

/// Runs of [`AUTOSCALE_RUNS`] once each (small: sequential), keeping the outcomes of those in
/// [`AUTOSCALE_TIMELINES`] for their step lines.
fn autoscale_runs(shrink: u64, progress: &Progress) -> CliResult<(Vec<Point>, Vec<Timeline>)> {
    let sc = scenario("autoscale", shrink)?;
    let g = Generated::new(sc.workload)?;
    let (mut points, mut timelines) = (Vec::new(), Vec::new());
    for (i, &(_, alpha, _)) in AUTOSCALE_RUNS.iter().enumerate() {
        let keep = AUTOSCALE_TIMELINES.contains(&i);
        let res = super::run::simulate(autoscale_cfg(&sc, i), &mut &g, keep)?;
        if keep {
            // Short labels: the chart's legend is narrow.
            timelines.push((autoscale_label(i).replace("prefix-aware", "PA"), step_line(&res.outcomes)));
        }
        points.push(Point { param: "alpha".into(), value: alpha, summary: res.summary });
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

fn plain(name: &str, value: impl std::fmt::Display) -> String {
    format!("| {name} | {value} |\n")
}

/// Runs the report and writes `out/index.html`, `out/summary.md`, plots, CSV and JSON, each
/// with `prov` (plus the digests of the built-in scenarios).
pub fn report(
    out: &Path,
    threads: usize,
    shrink: u64,
    progress: &Progress,
    mut prov: Provenance,
) -> CliResult<Experiments> {
    for (name, text) in BUILTIN {
        prov.add_bytes("scenario", &format!("scenarios/{name}.toml (built in)"), text.as_bytes());
    }
    prov.add_bytes("trace", engine_report::CONVERSATION_TRACE_NAME, engine_report::CONVERSATION_TRACE);
    super::mooncake::add_provenance(&mut prov);
    prov.add_bytes("scenario", super::llmd::SCENARIO_NAME, super::llmd::SCENARIO_TEXT.as_bytes());
    let ex = run_all(threads, shrink, progress)?;
    let mut svgs: Vec<(String, String, String)> = Vec::new(); // (section, caption, svg)
    let mut add = |section: &str, stem: &str, c: &Chart| -> CliResult<()> {
        let svg = write_chart(out, stem, c)?;
        svgs.push((section.into(), stem.into(), svg));
        Ok(())
    };
    for (stem, c) in sweep_charts("stable prefix first", "capacity", &ex.capacity) {
        add("capacity", &format!("capacity_{stem}"), &c)?;
    }
    let ts_hit = sweep_charts("timestamp first", "capacity", &ex.timestamp_first).remove(0).1;
    let mut both = sweep_charts("layout", "capacity", &ex.capacity).remove(0).1;
    both.title = "prompt layout: hit rate vs capacity; (ts) = timestamp on line one".into();
    // Lines that lie on one another (the timestamp-first runs all hit 0%) are drawn with nested
    // markers; the legend says so, with the value read from the data.
    let flat: Vec<f64> = ts_hit.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).collect();
    if let Some(v) = flat.first().filter(|_| ts_hit.series.len() > 1 && flat.windows(2).all(|w| w[0] == w[1])) {
        both.notes.push(format!("the {} (ts) lines all lie at {v}%,", ts_hit.series.len()));
        both.notes.push("drawn on top of one another".into());
    }
    for s in ts_hit.series {
        both.series.push(Series { label: format!("{} (ts)", s.label), points: s.points });
    }
    add("layout", "layout_hit_rate", &both)?;
    let gain = ex.stale_gain_kept();
    let chased: Vec<(f64, f64)> = ex
        .stale
        .iter()
        .map(|p| (p.value.max(0.5), 100.0 * p.summary.chased_requests as f64 / p.summary.requests.max(1) as f64))
        .collect();
    let k_label = "stale delay k (requests, log; k = 0 at 0.5)";
    add(
        "stale",
        "stale_gain",
        &Chart {
            title: "stale index: share of prefix-aware's gain over round-robin that survives".into(),
            x_label: k_label.into(),
            y_label: "gain kept (%)".into(),
            series: vec![Series {
                label: "gain kept".into(),
                points: gain.iter().map(|(k, g)| ((*k as f64).max(0.5), g * 100.0)).collect(),
            }],
            x_log: true,
            ..Chart::default()
        },
    )?;
    add(
        "stale",
        "stale_chased",
        &Chart {
            title: "stale index: requests routed to a pod for blocks it had evicted".into(),
            x_label: k_label.into(),
            y_label: "chased requests (% of requests)".into(),
            series: vec![Series { label: "chased requests".into(), points: chased }],
            x_log: true,
            ..Chart::default()
        },
    )?;
    let mut alpha_series: Vec<Series> = RouterKind::ALL
        .iter()
        .map(|r| Series {
            label: r.name().into(),
            points: ex
                .alpha
                .iter()
                .filter(|p| p.summary.router == *r)
                .map(|p| (p.value, p.summary.latency_p90.unwrap_or(f64::NAN)))
                .collect(),
        })
        .collect();
    alpha_series.rotate_left(2); // prefix-aware first
    let (best_a, best_p90) = ex.best_alpha();
    add(
        "alpha",
        "alpha_p90",
        &Chart {
            title: "p90 latency vs load penalty alpha (round-robin, least-loaded: flat references)".into(),
            x_label: "alpha (blocks per queued request), log scale".into(),
            y_label: "p90 latency (s)".into(),
            series: alpha_series,
            x_log: true,
            y_log: true,
            annotations: vec![(best_a, best_p90, format!("sweet spot alpha = {best_a}"))],
            ..Chart::default()
        },
    )?;
    let pa: Vec<&Point> = ex.alpha.iter().filter(|p| p.summary.router == RouterKind::PrefixAware).collect();
    let pick = [pa.first().copied(), pa.iter().find(|p| p.value == best_a).copied(), pa.last().copied()];
    let load_series: Vec<Series> = pick
        .iter()
        .flatten()
        .map(|p| Series {
            label: format!("alpha = {}", p.value),
            points: p.summary.per_pod_requests.iter().enumerate().map(|(i, &n)| (i as f64, n as f64)).collect(),
        })
        .collect();
    add(
        "alpha",
        "alpha_pod_load",
        &Chart {
            title: "requests per pod, prefix-aware: too low, sweet spot, too high".into(),
            x_label: "pod".into(),
            y_label: "requests".into(),
            series: load_series,
            bars: true,
            ..Chart::default()
        },
    )?;
    // llm-d: p90 per router next to the published figures (log y would hide nothing here: bars).
    let ld_rows = llmd_rows(&ex);
    add(
        "llmd",
        "llmd_p90",
        &Chart {
            title: "llm-d shape: p90 latency per router, simulated vs published TTFT p90".into(),
            x_label: "PA prefix-aware, LL least-loaded, RR round-robin".into(),
            x_categories: vec!["PA".into(), "PA k=64".into(), "LL".into(), "RR".into()],
            y_label: "p90 (s)".into(),
            series: vec![
                Series {
                    label: "simulated p90".into(),
                    points: ld_rows.iter().enumerate().map(|(i, r)| (i as f64, r.2)).collect(),
                },
                Series {
                    label: "published TTFT p90".into(),
                    points: ld_rows.iter().enumerate().map(|(i, r)| (i as f64, r.3)).collect(),
                },
            ],
            bars: true,
            ..Chart::default()
        },
    )?;
    let rag_series = |sorted: f64, label: &str| Series {
        label: label.into(),
        points: RouterKind::ALL
            .iter()
            .enumerate()
            .map(|(i, r)| (i as f64, find(&ex.rag, *r, sorted).map_or(f64::NAN, |p| hit(p) * 100.0)))
            .collect(),
    };
    add(
        "rag",
        "rag_hit_rate",
        &Chart {
            title: "RAG tenants: hit rate with documents in retrieval order vs sorted by id".into(),
            x_label: "RR round-robin, LL least-loaded, PA prefix-aware".into(),
            x_categories: vec!["RR".into(), "LL".into(), "PA".into()],
            y_label: "hit rate (% of prompt tokens)".into(),
            series: vec![rag_series(0.0, "retrieval order"), rag_series(1.0, "sorted by document id")],
            bars: true,
            ..Chart::default()
        },
    )?;
    let tier_series = |y: &dyn Fn(&Summary) -> f64| -> Vec<Series> {
        RouterKind::ALL
            .iter()
            .map(|r| Series {
                label: r.name().to_string(),
                points: ex
                    .cpu_tier
                    .iter()
                    .filter(|p| p.summary.router == *r)
                    .map(|p| (p.value, y(&p.summary)))
                    .collect(),
            })
            .collect()
    };
    add(
        "cpu",
        "cpu_tier_hit_rate",
        &Chart {
            title: "CPU tier: tokens served from GPU + CPU cache vs CPU tier size (GPU = hot/6)".into(),
            x_label: "CPU-tier blocks per pod".into(),
            y_label: "GPU + CPU hit rate (% of prompt tokens)".into(),
            series: tier_series(&|s| (s.hit_rate.unwrap_or(0.0) + s.cpu_hit_rate.unwrap_or(0.0)) * 100.0),
            ..Chart::default()
        },
    )?;
    add(
        "cpu",
        "cpu_tier_p90",
        &Chart {
            title: "CPU tier: p90 latency vs CPU tier size (load 5 us/token, prefill 50 us/token)".into(),
            x_label: "CPU-tier blocks per pod".into(),
            y_label: "p90 latency (s)".into(),
            series: tier_series(&|s| s.latency_p90.unwrap_or(f64::NAN)),
            ..Chart::default()
        },
    )?;
    let steps: Vec<Series> =
        ex.autoscale_timeline.iter().map(|(label, pts)| Series { label: label.clone(), points: pts.clone() }).collect();
    let w = builtin("autoscale")?.workload;
    let (from_s, to_s) = (w.burst_start_ms as f64 / 1e3, (w.burst_start_ms + w.burst_ms) as f64 / 1e3);
    let shades = if w.burst_ms > 0 {
        vec![(from_s, to_s, format!("burst, {} req/s", w.burst_rate_milli_per_s as f64 / 1e3))]
    } else {
        Vec::new()
    };
    add(
        "autoscale",
        "autoscale_pods",
        &Chart {
            title: format!("autoscaling: routable pods over time (burst from {from_s} s to {to_s} s, 30 s boot)"),
            x_label: "time (s)".into(),
            y_label: "routable pods".into(),
            series: steps,
            shades,
            ..Chart::default()
        },
    )?;
    let html = render_html(&ex, &svgs, &prov);
    sweep::write_file(out, "index.html", html.as_bytes())?;
    sweep::write_file(out, "summary.md", render_markdown(&ex, &prov).as_bytes())?;
    let all: Vec<&Point> =
        [&ex.capacity, &ex.timestamp_first, &ex.stale, &ex.alpha, &ex.llmd, &ex.rag, &ex.cpu_tier, &ex.autoscale]
            .into_iter()
            .flatten()
            .collect();
    let owned: Vec<Point> = all.into_iter().cloned().collect();
    sweep::write_file(out, "points.csv", sweep::to_csv(&owned).as_bytes())?;
    sweep::write_file(out, "points.provenance.json", prov.sidecar_json().as_bytes())?;
    sweep::write_file(out, "experiments.json", prov.json_with(&ex).as_bytes())?;
    Ok(ex)
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
            format!("hit rate at capacity = hot/6 ({} blocks/pod)", cmin),
            format!(
                "prefix-aware {:.1}% vs round-robin {:.1}% ({:.1}x)",
                pa_small * 100.0,
                rr_small * 100.0,
                pa_small / rr_small.max(1e-9)
            ),
        ),
        (
            format!("hit rate when everything fits ({} blocks/pod)", cmax),
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

fn llmd_table(ex: &Experiments) -> String {
    let mut o = String::from(
        "| router | simulated hit rate | simulated p90 latency (s) | published TTFT p90 (s) |\n|---|---|---|---|\n",
    );
    for ((label, h, p90, published), (name, _)) in llmd_rows(ex).into_iter().zip(LLMD_PUBLISHED) {
        let _ = writeln!(o, "| {label} | {:.1}% | {p90:.3} | {published} ({name}) |", h * 100.0);
    }
    o
}

fn points_table(pts: &[Point], value_name: &str) -> String {
    let mut o = format!(
        "| {value_name} | router | hit rate | prefill tokens | p50 (s) | p90 (s) | p99 (s) | chased |\n|---|---|---|---|---|---|---|---|\n"
    );
    for p in pts {
        let s = &p.summary;
        let _ = writeln!(
            o,
            "| {} | {} | {:.2}% | {} | {:.3} | {:.3} | {:.3} | {} |",
            p.value,
            s.router,
            s.hit_rate.unwrap_or(0.0) * 100.0,
            s.prefill_tokens,
            s.latency_p50.unwrap_or(f64::NAN),
            s.latency_p90.unwrap_or(f64::NAN),
            s.latency_p99.unwrap_or(f64::NAN),
            s.chased_requests
        );
    }
    o
}

/// What ran, in Markdown: the shrink factor and every scenario's request count.
pub fn scale_note(ex: &Experiments) -> String {
    if ex.shrink <= 1 {
        return "Full size: every scenario ran the request count in its file (`--shrink 1`).".into();
    }
    let counts: Vec<String> =
        ex.scenarios.iter().map(|s| format!("{} {} of {}", s.name, s.requests_run, s.requests_in_file)).collect();
    format!(
        "**Shrunk run (`--shrink {k}`):** every scenario ran its request count divided by {k} ({} requests). \
         The headlines, tables and plots below come from these smaller runs and differ from the full-size \
         report (`brokerlab fleet report`).",
        counts.join(", "),
        k = ex.shrink
    )
}

fn runs_table(ex: &Experiments) -> String {
    let mut o = String::from("| scenario | requests in the file | requests run |\n|---|---|---|\n");
    for s in &ex.scenarios {
        let _ = writeln!(o, "| scenarios/{}.toml | {} | {} |", s.name, s.requests_in_file, s.requests_run);
    }
    o
}

/// The Markdown summary.
pub fn render_markdown(ex: &Experiments, prov: &Provenance) -> String {
    let mut o = String::from("# brokerlab fleet report\n\n");
    let _ = writeln!(o, "{}\n", scale_note(ex));
    o += &prov.markdown();
    let _ = writeln!(o, "\n**The one number:** {}\n", the_number(ex));
    o += "| headline | value |\n|---|---|\n";
    for (k, v) in headlines(ex) {
        o += &plain(&k, v);
    }
    let _ = writeln!(
        o,
        "\nThe multi-tenant workload: hot set {} blocks, {} distinct blocks in all (\"fit\").\n",
        ex.hot_set_blocks, ex.fit_blocks
    );
    o += "## llm-d benchmark shape\n\n";
    o += &llmd_table(ex);
    o += "\nThe simulator has no GPU model: latency is prefill tokens x 50 us plus FIFO queueing, so absolute seconds are not comparable; what transfers is the ordering and which parameters open the gap (see below).\n\n";
    o += "## Stale index\n\n| k | gain kept | chased requests | phantom blocks |\n|---|---|---|---|\n";
    for (p, (k, g)) in ex.stale.iter().zip(ex.stale_gain_kept()) {
        let _ =
            writeln!(o, "| {k} | {:.1}% | {} | {} |", g * 100.0, p.summary.chased_requests, p.summary.phantom_blocks);
    }
    o += "\n## RAG documents: retrieval order (0) vs sorted by id (1)\n\n";
    o += &points_table(&ex.rag, "sorted");
    o += "\n## CPU tier (GPU capacity hot/6; value = CPU-tier blocks per pod)\n\n";
    o += &cpu_table(ex);
    o += "\n## Autoscaling (scenarios/autoscale.toml)\n\n";
    o += &autoscale_table(ex);
    o += "\n## The batched engine: llm-d shape and conversation trace, beside the FIFO engine\n\n";
    o += &engines_intro(ex);
    o += "\n\n";
    o += &engine_report::table(&ex.engines);
    for p in engine_report::prose(&ex.engines, &llmd_scenario(ex)) {
        let _ = write!(o, "\n{p}\n");
    }
    o += "\n";
    o += &super::mooncake::markdown(&ex.mooncake);
    o += "\n";
    o += &super::llmd::markdown(&ex.llmd_bench);
    o += "\n## Capacity sweep (stable prefix first)\n\n";
    o += &points_table(&ex.capacity, "capacity");
    o += "\n## Capacity sweep (timestamp first)\n\n";
    o += &points_table(&ex.timestamp_first, "capacity");
    o += "\n## Alpha\n\n";
    o += &points_table(&ex.alpha, "alpha");
    o += "\n## Parameters actually run\n\n";
    o += &runs_table(ex);
    o += "\nEverything else as in the scenario files (`scenarios/`); the experiments vary capacity, layout, stale delay, alpha, document order, CPU tier and autoscaling as each section says.\n";
    o
}

fn autoscale_table(ex: &Experiments) -> String {
    let mut o = String::from(
        "| run | pod-seconds | mean pods | out / in | max pods | added pods' traffic vs fair share | hit rate | p90 (s) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (i, p) in ex.autoscale.iter().enumerate() {
        let s = &p.summary;
        let (cost, mean, moves, max, ratio) = match &s.autoscale {
            Some(a) => (
                a.pod_seconds,
                a.mean_pods.unwrap_or(f64::NAN),
                format!("{} / {}", a.scale_outs, a.scale_ins),
                a.max_active_pods,
                a.new_pod_traffic_ratio.map_or("n/a".into(), |r| format!("{r:.2}")),
            ),
            None => (s.pods as f64 * s.makespan_s, s.pods as f64, "-".into(), s.pods as u32, "-".into()),
        };
        let _ = writeln!(
            o,
            "| {} | {cost:.0} | {mean:.2} | {moves} | {max} | {ratio} | {:.1}% | {:.3} |",
            autoscale_label(i),
            s.hit_rate.unwrap_or(0.0) * 100.0,
            s.latency_p90.unwrap_or(f64::NAN)
        );
    }
    o
}

fn cpu_table(ex: &Experiments) -> String {
    let mut o = String::from(
        "| CPU blocks | router | GPU hit | CPU hit | prefill tokens | p90 (s) |\n|---|---|---|---|---|---|\n",
    );
    for p in &ex.cpu_tier {
        let s = &p.summary;
        let _ = writeln!(
            o,
            "| {} | {} | {:.1}% | {:.1}% | {} | {:.3} |",
            p.value,
            s.router,
            s.hit_rate.unwrap_or(0.0) * 100.0,
            s.cpu_hit_rate.unwrap_or(0.0) * 100.0,
            s.prefill_tokens,
            s.latency_p90.unwrap_or(f64::NAN)
        );
    }
    o
}

fn md_table_to_html(md: &str) -> String {
    let mut o = String::from("<table>");
    for (i, line) in md.lines().filter(|l| l.starts_with('|')).enumerate() {
        if i == 1 {
            continue;
        }
        let tag = if i == 0 { "th" } else { "td" };
        o += "<tr>";
        for cell in line.trim_matches('|').split('|') {
            let _ = write!(o, "<{tag}>{}</{tag}>", html_escape(cell.trim()));
        }
        o += "</tr>";
    }
    o + "</table>"
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn figures(svgs: &[(String, String, String)], section: &str) -> String {
    let mut o = String::new();
    for (sec, stem, svg) in svgs {
        if sec == section {
            let _ = write!(
                o,
                "<figure>{svg}<figcaption><a href=\"{stem}.svg\">{stem}.svg</a> / <a href=\"{stem}.png\">{stem}.png</a></figcaption></figure>"
            );
        }
    }
    o
}

/// Markdown emphasis and code of [`scale_note`] as HTML.
fn md_inline_to_html(md: &str) -> String {
    let mut o = String::new();
    let mut code = false;
    for (i, part) in md.split("**").enumerate() {
        if i > 0 {
            o += if i % 2 == 1 { "<b>" } else { "</b>" };
        }
        for (j, piece) in part.split('`').enumerate() {
            if j > 0 {
                o += if code { "</code>" } else { "<code>" };
                code = !code;
            }
            o += &html_escape(piece);
        }
    }
    o
}

fn render_html(ex: &Experiments, svgs: &[(String, String, String)], prov: &Provenance) -> String {
    let mut o = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>brokerlab fleet report</title><style>\
         body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}table{border-collapse:collapse;margin:1em 0}\
         td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f3f3f3}pre{background:#f7f7f7;padding:8px;overflow:auto}\
         .num{font-size:1.3em;background:#fffbe6;padding:12px;border-left:4px solid #e69f00}\
         .warn{background:#fdecea;padding:12px;border-left:4px solid #d55e00}.scale{color:#555}\
         table.prov{font-size:.8em;color:#444;margin:.5em 0}table.prov th,table.prov td{border:none;padding:1px 8px 1px 0}\
         table.prov th{background:none;font-weight:normal;color:#777}</style></head><body>\
         <h1>brokerlab fleet report</h1>",
    );
    let class = if ex.shrink > 1 { "warn" } else { "scale" };
    let _ = write!(o, "<p class=\"{class}\">{}</p>", md_inline_to_html(&scale_note(ex)));
    o += &prov.html();
    let _ = write!(o, "<p class=\"num\"><b>The one number:</b> {}</p>", html_escape(&the_number(ex)));
    let mut head = String::from("| headline | value |\n|---|---|\n");
    for (k, v) in headlines(ex) {
        head += &plain(&k, v);
    }
    o += &md_table_to_html(&head);
    let sections = [
        (
            "capacity",
            "1. Capacity: where the routers part",
            "Hold the workload fixed and shrink each pod's cache from \"everything fits on every pod\" to \"each pod holds one-sixth of the hot set\".",
        ),
        (
            "layout",
            "2. Prompt layout: a timestamp on line one",
            "The same sweep with a per-request timestamp and user id before the shared prefix: the first block differs, so every chained key differs.",
        ),
        (
            "stale",
            "3. Stale index",
            "Evictions reach the router's index k requests late. The router then believes in blocks that are gone: a miss, never an error.",
        ),
        (
            "alpha",
            "4. Load penalty alpha",
            "score = match - alpha x queue length. Too low: hits are chased into queues; too high: round-robin again.",
        ),
    ];
    for (key, title, text) in sections {
        let _ = write!(o, "<h2>{title}</h2><p>{text}</p>");
        o += &figures(svgs, key);
        if key == "stale" {
            let mut t = String::from("| k | gain kept | chased requests | phantom blocks |\n|---|---|---|---|\n");
            for (p, (k, g)) in ex.stale.iter().zip(ex.stale_gain_kept()) {
                let _ = writeln!(
                    t,
                    "| {k} | {:.1}% | {} | {} |",
                    g * 100.0,
                    p.summary.chased_requests,
                    p.summary.phantom_blocks
                );
            }
            o += &md_table_to_html(&t);
        }
    }
    o += "<h2>5. The llm-d benchmark's shape</h2><p>150 groups x 5 users, 6,000-token system prompt, 1,200-token questions, 8 pods, cache demand about 6x one pod. The simulator's latency is prefill x 50 us + FIFO queueing: compare orderings and ratios, not seconds. The gap is driven by (a) the share of prompt tokens that is a shared prefix (6000 of 7200), (b) the hot set over one pod's cache (6x: round-robin thrashes, prefix-aware partitions the groups), and (c) the arrival rate against the fleet's all-miss capacity (8 pods / 0.36 s = 22 req/s): above it, cache-blind routers queue without bound while prefix-aware stays far below saturation.</p>";
    o += &md_table_to_html(&llmd_table(ex));
    o += &figures(svgs, "llmd");
    o += "<h2>6. RAG-shaped tenants</h2><p>Each request retrieves 4 of its tenant's 24 documents. Retrieval order (0) vs sorted by document id (1).</p>";
    o += &figures(svgs, "rag");
    o += &md_table_to_html(&points_table(&ex.rag, "sorted"));
    o += "<h2>7. A CPU tier</h2><p>Each pod gets a second LRU tier in CPU memory: blocks evicted from the GPU tier are demoted into it, and a request's prefix hit continues there at 5 us per token instead of 50 us of prefill. GPU capacity is held at hot/6. The prefix-aware router still matches on the GPU tier only.</p>";
    o += &figures(svgs, "cpu");
    o += &md_table_to_html(&cpu_table(ex));
    o += "<h2>8. Autoscaling: does the router fight the scaler?</h2><p>The fleet starts with 2 pods and may grow to 8. Every 10 s the scaler looks at the mean queue length of the routable pods: above 2 it boots a pod (routable 30 s later, cold: empty cache and queue), below 0.5 it drops the newest pod and its cache. Base load 10 req/s, 40 req/s from 60 s to 240 s. <i>Added pods' traffic vs fair share</i> is 1 when the router spreads requests onto the new pods like round-robin; below 1 the router keeps traffic on the warm pods. Pod-seconds count each pod from its boot decision to its drop (plus the drain of its queue). The rule: docs/MODEL.md, Autoscaling.</p>";
    o += &figures(svgs, "autoscale");
    o += &md_table_to_html(&autoscale_table(ex));
    let _ = write!(
        o,
        "<h2>9. The batched engine: llm-d shape and conversation trace</h2><p>{}</p>",
        md_inline_to_html(&engines_intro(ex))
    );
    o += &md_table_to_html(&engine_report::table(&ex.engines));
    for p in engine_report::prose(&ex.engines, &llmd_scenario(ex)) {
        let _ = write!(o, "<p>{}</p>", md_inline_to_html(&p));
    }
    {
        use super::mooncake as mc;
        let _ = write!(o, "<h2>10. {}</h2><p>{}</p>", html_escape(mc::TITLE), md_inline_to_html(&mc::intro()));
        o += &md_table_to_html(&mc::ratio_table(&ex.mooncake));
        o += &md_table_to_html(&mc::runs_table(&ex.mooncake));
        let _ =
            write!(o, "<p>{}</p><p>{}</p>", md_inline_to_html(&mc::verdict(&ex.mooncake)), md_inline_to_html(mc::WHY));
    }
    {
        use super::llmd::{self, Block};
        let _ = write!(o, "<h2>11. {}</h2>", html_escape(llmd::TITLE));
        for b in llmd::blocks(&ex.llmd_bench) {
            match b {
                Block::Para(p) => {
                    let _ = write!(o, "<p>{}</p>", md_inline_to_html(&p));
                }
                Block::Table(t) => o += &md_table_to_html(&t),
            }
        }
        let _ =
            write!(o, "<h3>{}</h3><pre>{}</pre>", html_escape(llmd::SCENARIO_NAME), html_escape(llmd::SCENARIO_TEXT));
    }
    o += "<h2>Parameters</h2>";
    for ((name, text), run) in BUILTIN.iter().zip(&ex.scenarios) {
        let ran = if run.requests_run == run.requests_in_file {
            format!("Ran as written: {} requests.", run.requests_run)
        } else {
            format!(
                "Ran <b>{} requests</b>, not the {} below (<code>--shrink {}</code>).",
                run.requests_run, run.requests_in_file, ex.shrink
            )
        };
        let _ = write!(o, "<h3>scenarios/{name}.toml</h3><p>{ran}</p><pre>{}</pre>", html_escape(text));
    }
    o += "<p>Model: docs/MODEL.md. Latencies are exact integer-ns simulations reported in seconds; the latency model is approximate by design (no decode batching, no GPU model).</p></body></html>";
    o
}

/// The llm-d scenario as section 9 ran it.
fn llmd_scenario(ex: &Experiments) -> Scenario {
    let mut sc = builtin("llm-d").expect("built-in scenario");
    sc.workload.requests = ex.engines.llmd_requests_run;
    sc
}

/// Section 9's first paragraph (Markdown).
fn engines_intro(ex: &Experiments) -> String {
    let c = &ex.engines;
    let e = engine_report::engine_config();
    let mut o = format!(
        "The same runs under both engine models: the FIFO engine (prefill tokens x {} us, FIFO queueing, no decode) \
         and the batched engine (vLLM-style continuous batching, docs/MODEL.md \"The batched engine\": profile `{}`, \
         max_num_seqs {}, max_num_batched_tokens {}). Workloads: `scenarios/llm-d.toml` ({} requests) and the \
         Mooncake conversation trace (`traces/conversation_trace.jsonl.zst`, built in; {} of its {} requests) on {} \
         pods x {} blocks. FIFO's p90 latency is finish - arrival; the batched engine reports TTFT and E2E apart. \
         Output tok/s = output tokens / makespan; KV utilization = pinned blocks / capacity, time-weighted mean of \
         the pods and the highest pod's peak.",
        c.runs.first().map_or(f64::NAN, |r| r.fifo.t_prefill_ns as f64 / 1e3),
        e.profile.name(),
        e.max_num_seqs,
        e.max_num_batched_tokens,
        engine_report::thousands(c.llmd_requests_run),
        engine_report::thousands(c.conversation_requests_run),
        engine_report::thousands(c.conversation_requests_in_trace),
        engine_report::CONVERSATION_PODS,
        engine_report::thousands(engine_report::CONVERSATION_CAPACITY as u64),
    );
    if let Some(n) = engine_report::cut_note(c) {
        let _ = write!(o, " {n}");
    }
    o
}
