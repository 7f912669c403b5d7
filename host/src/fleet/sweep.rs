//! Sweeps: many fleet configurations over fixed workloads, in parallel on all cores. Results are
//! stored by point index, so they are identical for any number of threads.

use std::path::Path;

use brokerlab_core::fleet::{FleetConfig, RouterKind};
use serde::Serialize;

use super::progress::Progress;
use super::run::{Summary, simulate};
use super::scenario::Generated;
use crate::error::{CliError, CliResult};

/// One point of a sweep: a parameter value, a workload and a fleet configuration.
#[derive(Debug, Clone)]
pub struct PointSpec {
    /// Value of the swept parameter.
    pub value: f64,
    /// Index into the workloads.
    pub workload: usize,
    /// Fleet configuration.
    pub cfg: FleetConfig,
}

/// One measured point.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Point {
    /// Swept parameter.
    pub param: String,
    /// Its value.
    pub value: f64,
    /// Metrics (router, config and results).
    #[serde(flatten)]
    pub summary: Summary,
}

/// Runs `f` on every point on a work-stealing pool of `threads` threads (0: all cores); results
/// come back in point order, so they do not depend on the thread count. `progress` advances by
/// one per point.
pub fn par_points<T: Send>(
    specs: &[PointSpec],
    threads: usize,
    progress: &Progress,
    f: impl Fn(&PointSpec) -> CliResult<T> + Sync,
) -> CliResult<Vec<T>> {
    use rayon::prelude::*;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the sweep's threads: {e}")))?;
    pool.install(|| {
        specs
            .par_iter()
            .map(|p| {
                let r = f(p);
                progress.inc(1);
                r
            })
            .collect()
    })
}

/// Runs every point (the FIFO engine) on `threads` threads (0: all cores).
pub fn run_points(
    param: &str,
    workloads: &[Generated],
    specs: &[PointSpec],
    threads: usize,
    progress: &Progress,
) -> CliResult<Vec<Point>> {
    par_points(specs, threads, progress, |p| {
        let mut src = &workloads[p.workload];
        let summary = simulate(p.cfg, &mut src, false)?.summary;
        Ok(Point { param: param.to_string(), value: p.value, summary })
    })
}

/// The same fleet configuration for each router, for each parameter value.
pub fn for_each_router(values: &[(f64, usize, FleetConfig)]) -> Vec<PointSpec> {
    let mut out = Vec::new();
    for router in RouterKind::ALL {
        for &(value, workload, cfg) in values {
            out.push(PointSpec { value, workload, cfg: FleetConfig { router, ..cfg } });
        }
    }
    out
}

/// CSV of all points (one row per point).
pub fn to_csv(points: &[Point]) -> String {
    let mut o = String::from(
        "param,value,router,pods,capacity,alpha,stale,order,requests,input_tokens,hit_tokens,prefill_tokens,hit_rate,\
         latency_p50_s,latency_p90_s,latency_p99_s,chased_requests,phantom_blocks,max_pod_share,cpu_capacity,cpu_hit_rate\n",
    );
    let f = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x}"));
    for p in points {
        let s = &p.summary;
        let max_share = s.per_pod_requests.iter().max().copied().unwrap_or(0) as f64 / s.requests.max(1) as f64;
        o += &format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            p.param,
            p.value,
            s.router,
            s.pods,
            s.capacity,
            s.alpha,
            s.stale,
            s.order,
            s.requests,
            s.input_tokens,
            s.hit_tokens,
            s.prefill_tokens,
            f(s.hit_rate),
            f(s.latency_p50),
            f(s.latency_p90),
            f(s.latency_p99),
            s.chased_requests,
            s.phantom_blocks,
            max_share,
            s.cpu_capacity,
            f(s.cpu_hit_rate)
        );
    }
    o
}

/// Writes `name` into `dir`, naming the file in any error.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> CliResult<()> {
    std::fs::create_dir_all(dir).map_err(|e| CliError::failure(format!("{}: cannot create: {e}", dir.display())))?;
    let p = dir.join(name);
    std::fs::write(&p, bytes).map_err(|e| CliError::failure(format!("{}: cannot write: {e}", p.display())))
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
}
