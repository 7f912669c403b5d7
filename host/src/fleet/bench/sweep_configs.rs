//! `fleet bench --sweep-configs N`: a capacity-planning sweep of the batched engine over the
//! conversation trace (routers x pods x arrival rates x KV sizes, [`GRID_CONFIGS`] points; N of
//! them, evenly spaced), the trace parsed and hashed once and shared by every point, run on one
//! rayon thread and on every core ([`ThreadSplit`]): wall time of each and the ratio.
//!
//! Each point is what `fleet replay --engine batched --router R --pods N --capacity C --speedup X`
//! computes; the first points are also run from the file through `fleet replay`'s source (parse,
//! hash and retime per run) and their whole summaries checked equal, and the two thread counts'
//! points are checked equal.

use std::time::Instant;

use brokerlab_core::fleet::{BatchedConfig, FleetConfig, Profile, Request, RouterKind};
use serde::Serialize;

use super::Loaded;
use crate::error::{CliError, CliResult};
use crate::fleet::run::retime::{Retime, Retimed};
use crate::fleet::run::{Batched, BatchedSummary, RequestSource, TraceSource};
use crate::fleet::sweep::PointSpec;

/// Routers of the grid: llm-d's three presets, the GIE default and round-robin (the baseline).
pub const ROUTERS: [RouterKind; 5] = [
    RouterKind::LlmDPrecise,
    RouterKind::LlmDApproximate,
    RouterKind::LlmDLoad,
    RouterKind::GieDefault,
    RouterKind::RoundRobin,
];
/// Pod counts of the grid.
pub const PODS: [usize; 5] = [8, 12, 16, 24, 32];
/// Arrival-rate multipliers of the grid (`--speedup`, exact fractions num/den).
pub const RATES: [(u64, u64); 8] = [(1, 4), (1, 2), (3, 4), (1, 1), (5, 4), (3, 2), (7, 4), (2, 1)];
/// KV blocks per pod of the grid (the conversation trace's longest request needs 7,908; 19,208:
/// llm-d's Qwen3-32B pod).
pub const CAPACITIES: [usize; 5] = [8_192, 10_240, 12_288, 16_384, 19_208];
/// Points of the whole grid.
pub const GRID_CONFIGS: usize = ROUTERS.len() * PODS.len() * RATES.len() * CAPACITIES.len();
/// Points also replayed from the file (`fleet replay`'s source) and checked equal.
const FILE_CHECKS: usize = 2;

/// Which thread counts the sweep bench runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThreadSplit {
    /// One thread, then every core (the split measured, the points checked equal).
    Split,
    /// One thread only.
    One,
    /// Every core only.
    All,
}

/// One point of the grid.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct GridPoint {
    /// Router.
    pub router: RouterKind,
    /// Pods.
    pub pods: usize,
    /// Arrival-rate multiplier (the trace's rate x this).
    pub rate_x: f64,
    /// KV blocks per pod.
    pub capacity: usize,
}

/// The sweep bench's report.
#[derive(Debug, Serialize)]
pub struct SweepConfigsBench {
    /// Trace.
    pub trace: String,
    /// Its requests.
    pub requests: u64,
    /// Configurations run.
    pub configs: usize,
    /// Parsing and hashing the trace once (shared by every configuration), s.
    pub read_s: f64,
    /// Threads of the parallel run (every core).
    pub threads: usize,
    /// Which runs were made.
    pub split: ThreadSplit,
    /// The configurations on one thread, s.
    pub one_thread_s: Option<f64>,
    /// The configurations on every core, s.
    pub all_threads_s: Option<f64>,
    /// one_thread_s / all_threads_s.
    pub ratio: Option<f64>,
    /// The process's CPU time during the one-thread run, s (about `one_thread_s` when the core
    /// was not shared).
    pub one_thread_cpu_s: Option<f64>,
    /// The process's CPU time during the every-core run, s (divided by `all_threads_s`: the
    /// cores the run actually had).
    pub all_threads_cpu_s: Option<f64>,
    /// read_s + the fastest run: the whole sweep, s.
    pub sweep_s: f64,
    /// Sum of the points' own times per router (one thread when run, else every core), s.
    pub per_router_s: Vec<(RouterKind, f64)>,
    /// The longest single point and its configuration.
    pub longest_s: f64,
    /// Its configuration.
    pub longest: GridPoint,
    /// Points also replayed from the file and checked equal.
    pub file_checked: usize,
    /// Each point's own time and work (the one-thread run when made, else every core's), in
    /// grid order.
    pub points: Vec<PointTime>,
    /// Per thread of the every-core run: the sum of its points' own times, s, and its points.
    pub per_thread: Vec<(f64, usize)>,
}

/// One point's time and what its run did.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PointTime {
    /// The point.
    pub point: GridPoint,
    /// Its own wall time, s.
    pub s: f64,
    /// Its thread's CPU time, s (below `s` when other processes took the core).
    pub cpu_s: Option<f64>,
    /// Times its run started over with larger buffers (a full request or key ring).
    pub restarts: u32,
    /// Its preemptions.
    pub preemptions: u64,
    /// Its engine steps.
    pub steps: u64,
}

/// A point's expected cost relative to the others (for the order the threads take them in:
/// the heaviest first, so that the last point to finish is a short one): the routers with an
/// approximate index (llm-d-approximate, gie-default) about 2.5x the others (measured), then
/// the smaller KV sizes (more preemptions) and the higher rates.
fn expected_cost(g: &GridPoint) -> f64 {
    let router = match g.router {
        RouterKind::LlmDApproximate | RouterKind::GieDefault => 2.5,
        _ => 1.0,
    };
    router * (1.0 + 8_192.0 / g.capacity as f64) * (1.0 + g.rate_x / 4.0)
}

/// Point `k` of the whole grid (router-major, then pods, rates and KV sizes).
pub fn grid_point(k: usize) -> (GridPoint, (u64, u64)) {
    let c = k % CAPACITIES.len();
    let r = (k / CAPACITIES.len()) % RATES.len();
    let p = (k / (CAPACITIES.len() * RATES.len())) % PODS.len();
    let router = k / (CAPACITIES.len() * RATES.len() * PODS.len());
    let rate = RATES[r];
    let g = GridPoint {
        router: ROUTERS[router],
        pods: PODS[p],
        rate_x: rate.0 as f64 / rate.1 as f64,
        capacity: CAPACITIES[c],
    };
    (g, rate)
}

/// The batched fleet of a point, as `fleet compare --trace` builds it (the trace's router seed).
fn point_cfg(g: &GridPoint) -> CliResult<FleetConfig> {
    let mut cfg =
        FleetConfig { alpha: brokerlab_core::fleet::defaults::ALPHA, ..FleetConfig::new(g.pods, g.capacity, g.router) };
    cfg.validate().map_err(crate::fleet::run::config_error)?;
    crate::fleet::cli::router_config::apply(&mut cfg, None, crate::fleet::report::llmd::TRACE_ROUTER_SEED)?;
    crate::fleet::scenario::engine::batched(cfg, BatchedConfig::new(Profile::Qwen3_32bH100x2))
        .map_err(crate::fleet::run::config_error)
}

/// The parsed and hashed trace, shared, its arrivals retimed as `--speedup` does.
struct Shared<'l> {
    loaded: &'l Loaded,
    retime: Retime,
}

impl RequestSource for Shared<'_> {
    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> CliResult<()> {
        let l = self.loaded;
        for (i, (arrival_ns, input, output, range)) in l.reqs.iter().enumerate() {
            let Some(t) = self.retime.arrival(*arrival_ns) else { continue };
            let req =
                Request { arrival_ns: t, input_tokens: *input, output_tokens: *output, keys: &l.keys[range.clone()] };
            sink(&req).map_err(|e| {
                CliError::bad_input(format!("{}: {}", l.at(i), crate::fleet::run::fields::request_message(&e)))
            })?;
        }
        Ok(())
    }

    fn id_blocks(&self) -> u32 {
        self.loaded.group_blocks
    }
}

/// Runs `configs` points of the grid (evenly spaced over it) on the trace at `trace`.
pub fn run(
    trace: &std::path::Path,
    trace_block: u32,
    configs: usize,
    split: ThreadSplit,
) -> CliResult<SweepConfigsBench> {
    if configs == 0 || configs > GRID_CONFIGS {
        return Err(CliError::bad_input(format!("--sweep-configs {configs}: expected 1 to {GRID_CONFIGS}")));
    }
    let t = Instant::now();
    let (l, _, _) = super::load(trace, trace_block, 1)?;
    let read_s = t.elapsed().as_secs_f64();
    let mut grid = Vec::with_capacity(configs);
    let mut specs = Vec::with_capacity(configs);
    for i in 0..configs {
        let k = i * GRID_CONFIGS / configs;
        let (g, rate) = grid_point(k);
        specs.push(PointSpec { value: k as f64, workload: 0, cfg: point_cfg(&g)?, label: None });
        grid.push((g, Retime { num: rate.0, den: rate.1, ..Retime::NONE }));
    }
    // the shared trace against the file read per run, as `fleet replay` reads it
    let file_checked = FILE_CHECKS.min(configs);
    for (spec, (g, retime)) in specs.iter().zip(&grid).take(file_checked) {
        let shared =
            crate::fleet::run::simulate::<Batched>(spec.cfg, &mut Shared { loaded: &l, retime: *retime }, false)?;
        let mut file = TraceSource::new(trace.to_path_buf(), trace_block);
        let mut retimed = Retimed { inner: &mut file, retime: *retime };
        let direct = crate::fleet::run::simulate::<Batched>(spec.cfg, &mut retimed, false)?;
        if shared.summary != direct.summary {
            return Err(CliError::failure(format!(
                "bench --sweep-configs: {} on {} pods x {} blocks at {}x: the shared trace and the file give different summaries",
                g.router.name(),
                g.pods,
                g.capacity,
                g.rate_x
            )));
        }
    }
    let quiet =
        crate::fleet::run::progress::Progress::new(true, "bench", crate::fleet::run::progress::Unit::Points, None);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // the heaviest points first (results are put back in grid order)
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by(|&a, &b| expected_cost(&grid[b].0).total_cmp(&expected_cost(&grid[a].0)));
    let ordered: Vec<PointSpec> = order.iter().map(|&i| specs[i].clone()).collect();
    let point = |p: &PointSpec| -> CliResult<Ran> {
        let (g, (num, den)) = grid_point(p.value as usize);
        let retime = Retime { num, den, ..Retime::NONE };
        let t = Instant::now();
        let cpu = crate::sys::thread_cpu_s();
        let r = crate::fleet::run::simulate::<Batched>(p.cfg, &mut Shared { loaded: &l, retime }, false)?;
        let cpu_s = crate::sys::thread_cpu_s().zip(cpu).map(|(b, a)| b - a);
        let s = t.elapsed().as_secs_f64();
        let time = PointTime {
            point: g,
            s,
            cpu_s,
            restarts: r.restarts,
            preemptions: r.summary.preemptions,
            steps: r.summary.steps,
        };
        Ok(Ran { time, thread: rayon::current_thread_index().unwrap_or(0), summary: r.summary })
    };
    let timed = |n: usize| -> CliResult<(f64, Vec<Ran>, Option<f64>)> {
        let t = Instant::now();
        let cpu = crate::sys::process_cpu_s();
        let each = crate::fleet::sweep::par_points(&ordered, n, &quiet, point)?;
        let s = t.elapsed().as_secs_f64();
        let cpu_s = crate::sys::process_cpu_s().zip(cpu).map(|(b, a)| b - a);
        let mut back: Vec<Option<Ran>> = (0..each.len()).map(|_| None).collect();
        for (r, &i) in each.into_iter().zip(&order) {
            back[i] = Some(r);
        }
        Ok((s, back.into_iter().map(|r| r.expect("every point ran")).collect(), cpu_s))
    };
    let one = matches!(split, ThreadSplit::Split | ThreadSplit::One).then(|| timed(1)).transpose()?;
    let all = matches!(split, ThreadSplit::Split | ThreadSplit::All).then(|| timed(threads)).transpose()?;
    if let (Some((_, a, _)), Some((_, b, _))) = (&one, &all)
        && a.iter().zip(b).any(|(x, y)| x.summary != y.summary)
    {
        return Err(CliError::failure("bench --sweep-configs: the points differ between 1 and all threads"));
    }
    let each = &one.as_ref().or(all.as_ref()).expect("at least one run").1;
    let mut per_router_s: Vec<(RouterKind, f64)> = Vec::new();
    let (mut longest_s, mut longest) = (0.0f64, grid[0].0);
    for (r, (g, _)) in each.iter().zip(&grid) {
        let s = r.time.s;
        match per_router_s.iter_mut().find(|(k, _)| *k == g.router) {
            Some(e) => e.1 += s,
            None => per_router_s.push((g.router, s)),
        }
        if s > longest_s {
            (longest_s, longest) = (s, *g);
        }
    }
    let points = each.iter().map(|r| r.time).collect();
    let mut per_thread = vec![(0.0, 0usize); if all.is_some() { threads } else { 0 }];
    for r in all.iter().flat_map(|a| &a.1) {
        if let Some(t) = per_thread.get_mut(r.thread) {
            t.0 += r.time.s;
            t.1 += 1;
        }
    }
    let one_cpu_s = one.as_ref().and_then(|o| o.2);
    let all_cpu_s = all.as_ref().and_then(|o| o.2);
    let one_s = one.map(|o| o.0);
    let all_s = all.map(|o| o.0);
    let best = one_s.unwrap_or(f64::INFINITY).min(all_s.unwrap_or(f64::INFINITY));
    Ok(SweepConfigsBench {
        trace: trace.display().to_string(),
        requests: l.reqs.len() as u64,
        configs,
        read_s,
        threads,
        split,
        one_thread_s: one_s,
        all_threads_s: all_s,
        ratio: one_s.zip(all_s).map(|(a, b)| a / b),
        one_thread_cpu_s: one_cpu_s,
        all_threads_cpu_s: all_cpu_s,
        sweep_s: read_s + best,
        per_router_s,
        longest_s,
        longest,
        file_checked,
        points,
        per_thread,
    })
}

/// A point's run: its time, the thread that ran it, its summary.
struct Ran {
    time: PointTime,
    thread: usize,
    summary: BatchedSummary,
}

/// The sweep bench, readable.
pub fn render(r: &SweepConfigsBench) -> String {
    let secs = |v: Option<f64>| v.map_or("-".into(), |s| format!("{s:.1} s"));
    let mut o = format!(
        "sweep of {} batched configurations (of the {GRID_CONFIGS}-point grid: {} routers x pods {:?} x rate {} x KV blocks {:?})\n\
         over {} ({} requests), parsed and hashed once ({:.2} s) and shared by every configuration:\n",
        r.configs,
        ROUTERS.len(),
        PODS,
        RATES.iter().map(|(n, d)| format!("{}", *n as f64 / *d as f64)).collect::<Vec<_>>().join("/") + "x",
        CAPACITIES,
        r.trace,
        r.requests,
        r.read_s
    );
    let cores = |cpu: Option<f64>, wall: Option<f64>| match cpu.zip(wall) {
        Some((c, w)) if w > 0.0 => format!("; CPU {c:.1} s: {:.2} cores had", c / w),
        _ => String::new(),
    };
    o += &format!(
        "  1 thread                 {:>9}{}\n",
        secs(r.one_thread_s),
        cores(r.one_thread_cpu_s, r.one_thread_s)
    );
    o += &format!(
        "  {} threads                {:>9}  ({}{})\n",
        r.threads,
        secs(r.all_threads_s),
        r.ratio.map_or("ratio not measured".into(), |x| format!("{x:.2}x")),
        cores(r.all_threads_cpu_s, r.all_threads_s)
    );
    o += &format!("  whole sweep (read + fastest run) {:.1} s\n", r.sweep_s);
    o += "  time per router (sum of its points):";
    for (k, s) in &r.per_router_s {
        o += &format!(" {} {s:.1} s;", k.name());
    }
    let g = &r.longest;
    o += &format!(
        "\n  longest point {:.2} s ({}, {} pods, {}x rate, {} blocks); {} points checked equal to the file's replay{}\n",
        r.longest_s,
        g.router.name(),
        g.pods,
        g.rate_x,
        g.capacity,
        r.file_checked,
        if r.ratio.is_some() { ", and 1 thread's points to all threads'" } else { "" }
    );
    if !r.per_thread.is_empty() {
        o += &format!("  {} threads' split (sum of their points' own times):", r.threads);
        for (i, (s, n)) in r.per_thread.iter().enumerate() {
            o += &format!(" thread {i} {s:.1} s ({n} points);");
        }
        o += "\n";
    }
    let restarts: u32 = r.points.iter().map(|p| p.restarts).sum();
    o += &format!("  runs started over with larger buffers: {restarts}\n  slowest points:\n");
    let mut slow: Vec<&PointTime> = r.points.iter().collect();
    slow.sort_by(|a, b| b.s.total_cmp(&a.s));
    for p in slow.iter().take(5) {
        let g = &p.point;
        o += &format!(
            "    {:.2} s (CPU {})  {} {} pods {}x rate {} blocks: {} steps, {} preemptions, {} restarts\n",
            p.s,
            p.cpu_s.map_or("-".into(), |c| format!("{c:.2} s")),
            g.router.name(),
            g.pods,
            g.rate_x,
            g.capacity,
            p.steps,
            p.preemptions,
            p.restarts
        );
    }
    o
}
