//! Plots of sweeps, and `brokerlab fleet report`: the seed's experiments on built-in scenarios,
//! written as one self-contained HTML page (inline SVG plots) plus a Markdown summary.

use std::fmt::Write as _;
use std::path::Path;

use crate::error::CliResult;
use crate::fleet::run::Summary;
use crate::fleet::sweep::{self, Point, SweepParam};
use crate::plot::{self, Chart, Series};

fn series_by_router(points: &[Point], y: impl Fn(&Summary) -> Option<f64>) -> Vec<Series> {
    series_per_router(points, |p| (p.router_name(), p.value), |p| y(&p.summary))
}

/// The routers of `points` in order of first appearance (a default sweep's points come router by
/// router in [`brokerlab_core::fleet::RouterKind::ALL`] order; `--router LIST` in the order given).
pub fn routers_of<P>(points: &[P], router: impl Fn(&P) -> String) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in points {
        let r = router(p);
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

/// One series per router (in order of first appearance, routers without points left out) from any
/// kind of sweep point: `key` gives a point's router name and x value, `y` its y value (a missing
/// value is drawn as a gap).
pub fn series_per_router<P>(
    points: &[P],
    key: impl Fn(&P) -> (String, f64),
    y: impl Fn(&P) -> Option<f64>,
) -> Vec<Series> {
    routers_of(points, |p| key(p).0)
        .iter()
        .map(|r| Series {
            label: r.clone(),
            points: points.iter().filter(|p| key(p).0 == *r).map(|p| (key(p).1, y(p).unwrap_or(f64::NAN))).collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

fn param_label(param: SweepParam) -> String {
    match param {
        SweepParam::Capacity => "capacity per pod (16-token blocks, log)".into(),
        SweepParam::Alpha => "load penalty alpha (blocks per queued request)".into(),
        SweepParam::Stale => "stale-evict delay k (requests)".into(),
        SweepParam::Pods => "pods".into(),
        SweepParam::Rate => "arrival rate (requests/s)".into(),
        other => other.name().into(),
    }
}

/// Renders and writes `stem`.svg and `stem`.png; returns the SVG for inlining.
pub fn write_chart(dir: &Path, stem: &str, chart: &Chart) -> CliResult<String> {
    let svg = plot::svg(chart, 900, 520);
    sweep::write_file(dir, &format!("{stem}.svg"), svg.as_bytes())?;
    sweep::write_file(dir, &format!("{stem}.png"), &plot::png(chart, 900, 520))?;
    Ok(svg)
}

fn chart(title: String, x_label: String, y_label: &str, series: Vec<Series>, x_log: bool) -> Chart {
    Chart { title, x_label, y_label: y_label.into(), series, x_log, ..Chart::default() }
}

/// The three standard plots of a sweep (hit rate, prefill tokens, p90 latency vs the parameter),
/// and SLO goodput vs the parameter when the points carry an SLO.
pub fn sweep_charts(name: &str, param: SweepParam, points: &[Point]) -> Vec<(String, Chart)> {
    let log = param == SweepParam::Capacity;
    let x = param_label(param);
    let mut v = standard_charts(name, param, points, log, x.clone());
    if points.iter().any(|p| p.summary.slo.is_some()) {
        v.push((
            "goodput".into(),
            chart(
                format!("{name}: SLO goodput vs {param}"),
                x,
                "requests/s meeting the SLOs",
                series_by_router(points, |s| s.slo.as_ref().and_then(|k| k.goodput_req_per_s)),
                log,
            ),
        ));
    }
    v
}

fn standard_charts(name: &str, param: SweepParam, points: &[Point], log: bool, x: String) -> Vec<(String, Chart)> {
    vec![
        (
            "hit_rate".into(),
            chart(
                format!("{name}: token hit rate vs {param}"),
                x.clone(),
                "hit rate (% of prompt tokens)",
                series_by_router(points, |s| s.hit_rate.map(|h| h * 100.0)),
                log,
            ),
        ),
        (
            "prefill".into(),
            chart(
                format!("{name}: prefill tokens computed vs {param}"),
                x.clone(),
                "prefill tokens (millions)",
                series_by_router(points, |s| Some(s.prefill_tokens as f64 / 1e6)),
                log,
            ),
        ),
        (
            "p90".into(),
            chart(
                format!("{name}: p90 latency vs {param}"),
                x,
                "p90 latency (s)",
                series_by_router(points, |s| s.latency_p90),
                log,
            ),
        ),
    ]
}

/// Writes the sweep's plots; returns a note listing them.
pub fn sweep_plots(dir: &Path, name: &str, param: SweepParam, points: &[Point]) -> CliResult<String> {
    let mut names = String::new();
    for (stem, c) in sweep_charts(name, param, points) {
        write_chart(dir, &stem, &c)?;
        let _ = write!(names, ", {stem}.svg/.png");
    }
    Ok(names)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |h| format!("{:.1}%", h * 100.0))
}

fn secs(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |s| format!("{s:.3}"))
}

/// A readable table of a sweep: one row per value, hit rate and p90 per router.
pub fn sweep_table(param: SweepParam, points: &[Point]) -> String {
    router_table(
        param.name(),
        points,
        |p| (p.router_name(), p.value),
        "hit  p90 s",
        |p| format!("{:>16} {:>7}", pct(p.summary.hit_rate), secs(p.summary.latency_p90)),
    )
}

/// One row per swept value (first-seen order), one column group per router: `head` after each
/// router's name, `cell` for a point, blanks as wide as a cell where a router has no point.
pub fn router_table<P>(
    param: &str,
    points: &[P],
    key: impl Fn(&P) -> (String, f64),
    head: &str,
    cell: impl Fn(&P) -> String,
) -> String {
    let mut values: Vec<f64> = Vec::new();
    for p in points {
        if !values.contains(&key(p).1) {
            values.push(key(p).1);
        }
    }
    let blank = points.first().map_or(0, |p| cell(p).chars().count());
    let mut o = format!("{param:>12}");
    let routers = routers_of(points, |p| key(p).0);
    for r in &routers {
        let _ = write!(o, " | {r:>12} {head}");
    }
    o.push('\n');
    for v in values {
        let _ = write!(o, "{v:>12}");
        for r in &routers {
            match points.iter().find(|p| key(p) == (r.clone(), v)) {
                Some(p) => {
                    let _ = write!(o, " | {}", cell(p));
                }
                None => {
                    let _ = write!(o, " | {:blank$}", "");
                }
            }
        }
        o.push('\n');
    }
    o
}
