//! Sweeps: many fleet configurations over fixed workloads, in parallel on all cores, for either
//! engine (one path: [`run_points`]; each engine's summary says how its points are written,
//! [`SweepSummary`]). Results are stored by point index, so they are identical for any number
//! of threads.

pub mod batched;
pub mod plots;
pub mod shard;
pub mod values;

use std::path::Path;

use brokerlab_core::fleet::{CacheMode, FleetConfig, RouterKind, TouchOrder};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{CliError, CliResult, FleetError};
use crate::fleet::run::progress::Progress;
use crate::fleet::run::{EngineKind, HostEngine, Summary, simulate_slo};
use crate::fleet::scenario::Generated;

/// One point of a sweep: a parameter value, a workload and a fleet configuration.
#[derive(Debug, Clone)]
pub struct PointSpec {
    /// Value of the swept parameter.
    pub value: f64,
    /// Index into the workloads.
    pub workload: usize,
    /// Fleet configuration.
    pub cfg: FleetConfig,
    /// The router's name in the sweep's tables, plots and CSV when not its kind's (a
    /// `--router-config` file's stem).
    pub label: Option<String>,
}

/// A parameter a sweep varies: `fleet sweep --param` ([`SweepParam::FLAG`]) and the report's
/// own sweeps (CPU-tier capacity, RAG document order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepParam {
    /// Blocks per pod C.
    Capacity,
    /// The prefix-aware router's load penalty.
    Alpha,
    /// The stale view's delay k, in requests.
    Stale,
    /// Pods N.
    Pods,
    /// The workload's arrival rate, requests/s.
    Rate,
    /// The CPU tier's blocks per pod (the FIFO engine's CPU tier, the batched engine's offload
    /// tier).
    CpuCapacity,
    /// RAG documents sorted or not (the report).
    RagSorted,
    /// P/D: the prefill pods NP (0: aggregated; the batched engine).
    PrefillPods,
}

impl SweepParam {
    /// What `fleet sweep --param` accepts.
    pub const FLAG: [SweepParam; 7] = [
        SweepParam::Capacity,
        SweepParam::Alpha,
        SweepParam::Stale,
        SweepParam::Pods,
        SweepParam::Rate,
        SweepParam::CpuCapacity,
        SweepParam::PrefillPods,
    ];

    /// Its spelling in outputs and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            SweepParam::Capacity => "capacity",
            SweepParam::Alpha => "alpha",
            SweepParam::Stale => "stale",
            SweepParam::Pods => "pods",
            SweepParam::Rate => "rate",
            SweepParam::CpuCapacity => "cpu_capacity",
            SweepParam::RagSorted => "rag_sorted",
            SweepParam::PrefillPods => "prefill_pods",
        }
    }

    /// `--param`'s value `s` (one of [`Self::FLAG`], `-` or `_` between words); the error names
    /// the flag and what it takes.
    pub fn from_flag(s: &str) -> CliResult<Self> {
        let n = s.replace('-', "_");
        Self::FLAG.into_iter().find(|p| p.name() == n).ok_or_else(|| {
            crate::error::CliError::bad_input(format!(
                "--param {s}: expected capacity, alpha, stale, pods, rate, cpu-capacity or prefill-pods"
            ))
        })
    }

    /// The summary field a point of this parameter has its value in (None: the workload's rate,
    /// and the report's own parameters).
    pub const fn summary_field(self) -> Option<&'static str> {
        match self {
            SweepParam::Capacity | SweepParam::Alpha | SweepParam::Stale | SweepParam::Pods => Some(self.name()),
            _ => None,
        }
    }
}

impl std::fmt::Display for SweepParam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// One measured point: the FIFO engine's ([`Summary`]) or the batched engine's
/// ([`crate::fleet::run::BatchedSummary`]).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(bound(deserialize = "S: DeserializeOwned"))]
pub struct Point<S = Summary> {
    /// Swept parameter.
    pub param: SweepParam,
    /// Its value.
    pub value: f64,
    /// The router's name when not its kind's ([`PointSpec::label`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Metrics (router, config and results).
    #[serde(flatten)]
    pub summary: S,
}

impl<S: SweepSummary> Point<S> {
    /// The router's name in tables, plots and CSV: the label, else the router kind's name.
    pub fn router_name(&self) -> String {
        self.label.clone().unwrap_or_else(|| self.summary.fleet().0.name().to_string())
    }
}

/// What a sweep writes of an engine's points: its `points.csv`, its plots and its table.
pub trait SweepSummary: Serialize + DeserializeOwned + Clone + Send {
    /// The engine's name in a shard's `partial.json`.
    const ENGINE: EngineKind;
    /// The point's router, pods, blocks per pod and load penalty.
    fn fleet(&self) -> (RouterKind, usize, usize, f64);
    /// `points.csv`.
    fn csv(points: &[Point<Self>]) -> CliResult<String>;
    /// Writes the plots into `dir`; returns a note listing them.
    fn plots(dir: &Path, name: &str, param: SweepParam, points: &[Point<Self>]) -> CliResult<String>;
    /// A readable table: one row per value, one column group per router.
    fn table(param: SweepParam, points: &[Point<Self>]) -> String;
}

impl SweepSummary for Summary {
    const ENGINE: EngineKind = EngineKind::Fifo;
    fn fleet(&self) -> (RouterKind, usize, usize, f64) {
        (self.router, self.pods, self.capacity, self.alpha)
    }
    fn csv(points: &[Point]) -> CliResult<String> {
        to_csv(points)
    }
    fn plots(dir: &Path, name: &str, param: SweepParam, points: &[Point]) -> CliResult<String> {
        crate::fleet::sweep::plots::sweep_plots(dir, name, param, points)
    }
    fn table(param: SweepParam, points: &[Point]) -> String {
        crate::fleet::sweep::plots::sweep_table(param, points)
    }
}

/// Stack of a sweep thread: a fleet value holds its MAX_PODS = 1,024 pods inline (about 430 KB
/// for the FIFO fleet, `brokerlab audit`), and an unoptimized build keeps several copies of it
/// on the stack while constructing one; rayon's default (2 MiB) overflowed. Only the pages
/// touched are committed.
pub(crate) const POINT_STACK_BYTES: usize = 32 << 20;

/// Runs `f` on every point on a pool of `threads` threads (0: all cores), each thread taking the
/// next point not taken yet, in point order (so a caller that orders its points heaviest first
/// gets the longest-processing-time-first schedule: the last point to finish is a short one);
/// results come back in point order, so they do not depend on the thread count. `progress`
/// advances by one per point. On errors, no new point starts and the first point's error (in
/// point order) among those run is returned.
pub fn par_points<T: Send>(
    specs: &[PointSpec],
    threads: usize,
    progress: &Progress,
    f: impl Fn(&PointSpec) -> CliResult<T> + Sync,
) -> CliResult<Vec<T>> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .stack_size(POINT_STACK_BYTES)
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the sweep's threads: {e}")))?;
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let done: Mutex<Vec<(usize, CliResult<T>)>> = Mutex::new(Vec::with_capacity(specs.len()));
    pool.broadcast(|_| {
        let mut mine = Vec::new();
        while !failed.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(p) = specs.get(i) else { break };
            let r = f(p);
            if r.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            progress.inc(1);
            mine.push((i, r));
        }
        done.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Runs every point (each a configuration of engine `K`) on `threads` threads (0: all cores).
pub fn run_points<K: HostEngine>(
    param: SweepParam,
    workloads: &[Generated],
    specs: &[PointSpec],
    threads: usize,
    progress: &Progress,
) -> CliResult<Vec<Point<K::Summary>>>
where
    K::Summary: Send,
{
    run_points_slo::<K>(param, workloads, specs, threads, progress, None)
}

/// [`run_points`], each point's summary with SLO goodput for `slo`.
pub fn run_points_slo<K: HostEngine>(
    param: SweepParam,
    workloads: &[Generated],
    specs: &[PointSpec],
    threads: usize,
    progress: &Progress,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
) -> CliResult<Vec<Point<K::Summary>>>
where
    K::Summary: Send,
{
    par_points(specs, threads, progress, |p| {
        let mut src = &workloads[p.workload];
        let summary = simulate_slo::<K>(p.cfg, &mut src, false, slo)?.summary;
        Ok(Point { param, value: p.value, label: p.label.clone(), summary })
    })
}

/// The same fleet configuration for each router, for each parameter value.
pub fn for_each_router(values: &[(f64, usize, FleetConfig)]) -> Vec<PointSpec> {
    let mut out = Vec::new();
    for router in RouterKind::ALL {
        for &(value, workload, cfg) in values {
            out.push(PointSpec { value, workload, cfg: FleetConfig { router, ..cfg }, label: None });
        }
    }
    out
}

/// [`for_each_router`] over `routers` (any named router, shipped presets included, in the
/// order given): each preset gets its pipeline, its RNG seeded by `seed` (the scenario's), as
/// `fleet run --router` does.
pub fn for_routers(
    values: &[(f64, usize, FleetConfig)],
    routers: &[RouterKind],
    seed: u64,
) -> CliResult<Vec<PointSpec>> {
    let mut out = Vec::new();
    for &router in routers {
        for &(value, workload, cfg) in values {
            let mut cfg = FleetConfig { router, routing: None, ..cfg };
            crate::fleet::cli::router_config::apply(&mut cfg, None, seed)?;
            out.push(PointSpec { value, workload, cfg, label: None });
        }
    }
    Ok(out)
}

/// CSV of all points (one row per point).
pub fn to_csv(points: &[Point]) -> CliResult<String> {
    let csv = csv_of(points.iter().map(|p| {
        let s = &p.summary;
        (
            CsvHead::of(p),
            CsvRow {
                stale: s.stale,
                order: s.order,
                cache: s.cache.unwrap_or_default(),
                requests: s.requests,
                input_tokens: s.input_tokens,
                hit_tokens: s.hit_tokens,
                prefill_tokens: s.prefill_tokens,
                hit_rate: s.hit_rate,
                latency_p50_s: s.latency_p50,
                latency_p90_s: s.latency_p90,
                latency_p99_s: s.latency_p99,
                chased_requests: s.chased_requests,
                phantom_blocks: s.phantom_blocks,
                max_pod_share: s.per_pod_requests.iter().max().copied().unwrap_or(0) as f64 / s.requests.max(1) as f64,
                cpu_capacity: s.cpu_capacity,
                cpu_hit_rate: s.cpu_hit_rate,
            },
        )
    }))?;
    Ok(with_slo_columns(csv, points.iter().map(|p| p.summary.slo.as_ref())))
}

/// `csv` (a header and one line per point, in `slos`' order) with SLO goodput's columns
/// appended (`slo_good_requests`, `slo_attainment`, `goodput_req_per_s`) when any point has an
/// SLO; unchanged otherwise (a sweep without an SLO writes what it always wrote).
pub fn with_slo_columns<'a>(
    csv: String,
    slos: impl Iterator<Item = Option<&'a crate::fleet::run::deploy::SloKeys>>,
) -> String {
    let slos: Vec<_> = slos.collect();
    if slos.iter().all(Option::is_none) {
        return csv;
    }
    let num = |v: Option<f64>| v.map_or(String::new(), |x| x.to_string());
    let mut out = String::with_capacity(csv.len() + 48 * (slos.len() + 1));
    for (i, line) in csv.lines().enumerate() {
        out.push_str(line);
        match i.checked_sub(1).map(|k| slos.get(k).copied().flatten()) {
            None => out.push_str(",slo_good_requests,slo_attainment,goodput_req_per_s"),
            Some(Some(k)) => out.push_str(&format!(
                ",{},{},{}",
                k.slo_good_requests,
                num(k.slo_attainment),
                num(k.goodput_req_per_s)
            )),
            Some(None) => out.push_str(",,,"),
        }
        out.push('\n');
    }
    out
}

/// The columns every sweep's `points.csv` starts with: the point and its fleet. A row is this
/// and the engine's own columns, serialized as a pair (the csv crate writes both structs' field
/// names as one header).
#[derive(Serialize)]
pub struct CsvHead<'a> {
    /// The swept parameter.
    pub param: &'a str,
    /// Its value.
    #[serde(serialize_with = "csv_num::f64")]
    pub value: f64,
    /// The router ([`Point::router_name`]).
    pub router: String,
    /// Pods.
    pub pods: usize,
    /// Blocks per pod.
    pub capacity: usize,
    /// Load penalty.
    #[serde(serialize_with = "csv_num::f64")]
    pub alpha: f64,
}

impl<'a> CsvHead<'a> {
    /// The head of point `p`'s row.
    pub fn of<S: SweepSummary>(p: &'a Point<S>) -> Self {
        let (_, pods, capacity, alpha) = p.summary.fleet();
        CsvHead { param: p.param.name(), value: p.value, router: p.router_name(), pods, capacity, alpha }
    }
}

/// The rest of a FIFO sweep's `points.csv` row, after [`CsvHead`]; the header is the field names.
#[derive(Serialize)]
struct CsvRow {
    stale: u32,
    order: TouchOrder,
    /// local or global (`--cache`, `fleet.cache`).
    cache: CacheMode,
    requests: u64,
    input_tokens: u64,
    hit_tokens: u64,
    prefill_tokens: u64,
    #[serde(serialize_with = "csv_num::opt")]
    hit_rate: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    latency_p50_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    latency_p90_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    latency_p99_s: Option<f64>,
    chased_requests: u64,
    phantom_blocks: u64,
    #[serde(serialize_with = "csv_num::f64")]
    max_pod_share: f64,
    cpu_capacity: usize,
    #[serde(serialize_with = "csv_num::opt")]
    cpu_hit_rate: Option<f64>,
}

/// A CSV document of `rows`: a header of the row type's field names, one line per row, `\n`
/// line ends (the csv crate quotes a field only when it must; none of ours needs it).
pub fn csv_of<R: Serialize>(rows: impl IntoIterator<Item = R>) -> CliResult<String> {
    // Writing to memory fails only on a row the csv crate cannot represent (a nested struct).
    let bug = |e: &dyn std::fmt::Display| CliError::failure(format!("writing points.csv: {e}"));
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    for r in rows {
        w.serialize(r).map_err(|e| bug(&e))?;
    }
    let bytes = w.into_inner().map_err(|e| bug(&e))?;
    String::from_utf8(bytes).map_err(|e| bug(&e))
}

/// CSV numbers as Rust prints them (`1`, `0.5`, `1e-7`), the same text as the Markdown tables;
/// the csv crate's own float format would print `1.0`.
pub mod csv_num {
    use serde::Serializer;

    /// A number.
    pub fn f64<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    /// A number, or an empty field.
    #[allow(clippy::ref_option)] // serde's serialize_with passes a reference to the field
    pub fn opt<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(x) => s.collect_str(x),
            None => s.serialize_str(""),
        }
    }
}

/// Writes `name` into `dir`, staged: it appears, with the command's other files, at
/// [`commit_files`] ([`crate::outfile`]: whole or not at all); errors name the file.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> CliResult<()> {
    std::fs::create_dir_all(dir).map_err(|source| FleetError::CreateDir { path: dir.to_path_buf(), source })?;
    let path = dir.join(name);
    crate::outfile::stage(&path, bytes).map_err(|source| FleetError::Write { path, source }.into())
}

/// Renames the files [`write_file`] staged over their names: the end of a command that writes
/// files.
pub fn commit_files() -> CliResult<()> {
    crate::outfile::commit().map_err(|(path, source)| FleetError::Write { path, source }.into())
}

/// Geometric steps from `from` to `to` (inclusive), rounded to integers, duplicates removed.
/// Computed with the core's integer fixed-point log2/exp2, so every architecture gets the same
/// capacities (a host `f64::ln` may differ in the last bit between C libraries).
pub fn geometric(from: f64, to: f64, steps: usize) -> Vec<u64> {
    use brokerlab_core::fleet::fixmath::{exp2_neg_q32, log2_q32};
    let steps = steps.max(2) as u128;
    let (from, to) = (from.max(1.0) as u64, to.max(1.0) as u64);
    let (hi, lo) = (from.max(to), from.min(to));
    let span = (log2_q32(hi) - log2_q32(lo)) as u128; // log2(hi / lo) in Q32.32
    let mut out: Vec<u64> = (0..steps)
        .map(|i| {
            // hi * 2^(-span * i / (steps - 1)), rounded to nearest.
            let f = exp2_neg_q32((span * i / (steps - 1)) as u64) as u128; // Q0.64
            (((hi as u128 * f) + (1 << 63)) >> 64).max(1) as u64
        })
        .collect();
    if from < to {
        out.reverse();
    }
    // Exact ends, whatever the rounding in between.
    out[0] = from;
    *out.last_mut().expect("at least two steps") = to;
    out.dedup();
    out
}

/// Evenly spaced steps from `from` to `to` (inclusive).
pub fn linear(from: f64, to: f64, steps: usize) -> Vec<f64> {
    let steps = steps.max(2);
    (0..steps).map(|i| from + (to - from) * i as f64 / (steps - 1) as f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometric_steps_hit_both_ends_and_shrink_by_a_constant_ratio() {
        let v = geometric(6144.0, 1024.0, 6);
        assert_eq!(v.first(), Some(&6144));
        assert_eq!(v.last(), Some(&1024));
        for w in v.windows(2) {
            let r = w[1] as f64 / w[0] as f64;
            assert!((r - (1024f64 / 6144.0).powf(0.2)).abs() < 0.01, "{v:?}");
        }
        assert_eq!(geometric(10.0, 1000.0, 3), vec![10, 100, 1000]);
    }

    fn specs(n: usize) -> Vec<PointSpec> {
        let cfg = FleetConfig::new(2, 64, brokerlab_core::fleet::RouterKind::RoundRobin);
        (0..n).map(|i| PointSpec { value: i as f64, workload: 0, cfg, label: None }).collect()
    }

    #[test]
    fn par_points_returns_point_order_on_any_thread_count_and_the_first_error() {
        let quiet = Progress::new(true, "test", crate::fleet::run::progress::Unit::Points, None);
        let specs = specs(37);
        // unequal work, so the threads finish out of order
        let f = |p: &PointSpec| -> CliResult<u64> {
            let k = p.value as u64;
            std::hint::black_box((0..(k % 5) * 20_000).fold(k, |a, x| a.wrapping_mul(31).wrapping_add(x)));
            Ok(k)
        };
        let want: Vec<u64> = (0..37).collect();
        for threads in [1, 2, 3, 8] {
            assert_eq!(par_points(&specs, threads, &quiet, f).unwrap(), want, "{threads} threads");
        }
        let failing = |p: &PointSpec| -> CliResult<u64> {
            let k = p.value as u64;
            if k == 11 || k == 23 { Err(CliError::failure(format!("point {k}"))) } else { Ok(k) }
        };
        for threads in [1, 2, 3] {
            let e = par_points(&specs, threads, &quiet, failing).unwrap_err();
            assert!(e.to_string().contains("point 11"), "{threads} threads: {e}");
        }
    }
}
