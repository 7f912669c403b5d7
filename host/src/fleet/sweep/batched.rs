//! `fleet sweep ... --engine batched` (or a scenario with `[fleet.engine]`): what a sweep writes
//! of the batched engine's points (the points run as every sweep's, [`crate::fleet::sweep::run_points`]):
//! its metrics, TTFT, E2E and inter-token latency percentiles, output and prefill tokens/s, KV
//! utilization and preemptions.

use std::fmt::Write as _;
use std::path::Path;

use brokerlab_core::fleet::RouterKind;
use serde::Serialize;

use crate::error::CliResult;
use crate::fleet::run::{BatchedSummary, EngineKind};
use crate::fleet::sweep::plots::{router_table, series_per_router, write_chart};
use crate::fleet::sweep::{self, Point, SweepParam, SweepSummary, csv_num};
use crate::plot::{Chart, Series};

/// One measured point of a batched sweep.
pub type BatchedPoint = Point<BatchedSummary>;

impl SweepSummary for BatchedSummary {
    const ENGINE: EngineKind = EngineKind::Batched;
    fn fleet(&self) -> (RouterKind, usize, usize, f64) {
        (self.router, self.pods, self.capacity, self.alpha)
    }
    fn csv(points: &[BatchedPoint]) -> CliResult<String> {
        to_csv(points)
    }
    fn plots(dir: &Path, name: &str, param: SweepParam, points: &[BatchedPoint]) -> CliResult<String> {
        plots(dir, name, param, points)
    }
    fn table(param: SweepParam, points: &[BatchedPoint]) -> String {
        table(param, points)
    }
}

/// CSV of all points (one row per point: the configuration, then the batched metrics).
pub fn to_csv(points: &[BatchedPoint]) -> CliResult<String> {
    let csv = sweep::csv_of(points.iter().map(|p| {
        let s = &p.summary;
        (
            sweep::CsvHead::of(p),
            CsvRow {
                max_num_seqs: s.max_num_seqs,
                max_num_batched_tokens: s.max_num_batched_tokens,
                profile: &s.profile,
                requests: s.requests,
                hit_rate: s.hit_rate,
                ttft_p50_s: s.ttft_p50,
                ttft_p90_s: s.ttft_p90,
                ttft_p99_s: s.ttft_p99,
                e2e_p50_s: s.e2e_p50,
                e2e_p90_s: s.e2e_p90,
                e2e_p99_s: s.e2e_p99,
                itl_p50_s: s.itl_p50,
                itl_p90_s: s.itl_p90,
                itl_p99_s: s.itl_p99,
                output_tok_per_s: s.output_tok_per_s,
                prefill_tok_per_s: s.prefill_tok_per_s,
                kv_util_mean: s.kv_util_mean,
                kv_util_peak: s.kv_util_peak,
                preemptions: s.preemptions,
                steps: s.steps,
                mean_waiting: s.mean_waiting,
                makespan_s: s.makespan_s,
            },
        )
    }))?;
    Ok(sweep::with_slo_columns(csv, points.iter().map(|p| p.summary.slo.as_ref())))
}

/// The rest of a batched sweep's `points.csv` row, after [`sweep::CsvHead`]; the header is the
/// field names.
#[derive(Serialize)]
struct CsvRow<'a> {
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    profile: &'a str,
    requests: u64,
    #[serde(serialize_with = "csv_num::opt")]
    hit_rate: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    ttft_p50_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    ttft_p90_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    ttft_p99_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    e2e_p50_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    e2e_p90_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    e2e_p99_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    itl_p50_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    itl_p90_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    itl_p99_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    output_tok_per_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    prefill_tok_per_s: Option<f64>,
    #[serde(serialize_with = "csv_num::opt")]
    kv_util_mean: Option<f64>,
    #[serde(serialize_with = "csv_num::f64")]
    kv_util_peak: f64,
    preemptions: u64,
    steps: u64,
    #[serde(serialize_with = "csv_num::opt")]
    mean_waiting: Option<f64>,
    #[serde(serialize_with = "csv_num::f64")]
    makespan_s: f64,
}

fn series_by_router(points: &[BatchedPoint], y: impl Fn(&BatchedSummary) -> Option<f64>) -> Vec<Series> {
    series_per_router(points, |p| (p.router_name(), p.value), |p| y(&p.summary))
}

/// Writes the batched sweep's plots (TTFT p90, output tok/s, preemptions vs the parameter);
/// returns a note listing them.
pub fn plots(dir: &std::path::Path, name: &str, param: SweepParam, points: &[BatchedPoint]) -> CliResult<String> {
    let x_log = param == SweepParam::Capacity;
    let chart = |stem: &str, title: String, y: &str, series: Vec<Series>| {
        // TTFT spans milliseconds to minutes once a router falls behind: a log axis keeps both
        let y_log = stem == "ttft_p90";
        let c = Chart {
            title,
            x_label: param.name().to_string(),
            y_label: y.into(),
            series,
            x_log,
            y_log,
            ..Chart::default()
        };
        (stem.to_string(), c)
    };
    let mut charts = vec![
        chart(
            "ttft_p90",
            format!("{name} (batched): TTFT p90 vs {param}"),
            "TTFT p90 (s)",
            series_by_router(points, |s| s.ttft_p90),
        ),
        chart(
            "output_tok_per_s",
            format!("{name} (batched): output tokens/s vs {param}"),
            "output tokens/s",
            series_by_router(points, |s| s.output_tok_per_s),
        ),
        chart(
            "preemptions",
            format!("{name} (batched): preemptions vs {param}"),
            "preemptions",
            series_by_router(points, |s| Some(s.preemptions as f64)),
        ),
    ];
    if points.iter().any(|p| p.summary.slo.is_some()) {
        charts.push(chart(
            "goodput",
            format!("{name} (batched): SLO goodput vs {param}"),
            "requests/s meeting the SLOs",
            series_by_router(points, |s| s.slo.as_ref().and_then(|k| k.goodput_req_per_s)),
        ));
    }
    let mut names = String::new();
    for (stem, c) in charts {
        write_chart(dir, &stem, &c)?;
        let _ = write!(names, ", {stem}.svg/.png");
    }
    Ok(names)
}

/// A readable table: one row per value, TTFT p90, output tok/s and preemptions per router.
pub fn table(param: SweepParam, points: &[BatchedPoint]) -> String {
    router_table(
        param.name(),
        points,
        |p| (p.router_name(), p.value),
        "TTFT p90 s  out tok/s  preempt",
        |p| {
            let s = &p.summary;
            let ttft = s.ttft_p90.map_or("n/a".into(), |t| format!("{t:.3}"));
            let tok = s.output_tok_per_s.map_or("n/a".into(), |t| format!("{t:.1}"));
            format!("{:>23} {:>10} {:>8}", ttft, tok, s.preemptions)
        },
    )
}
