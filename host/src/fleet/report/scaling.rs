//! `fleet report`, section 15: autoscaling under the batched engine. The seed's "does your router
//! fight the scaler?" with llm-d WVA's saturation rule (docs/MODEL.md, "Autoscaling under the
//! batched engine"): a load ramp on a fleet that starts small, TTFT p90 and SLO goodput over time
//! beside the pod count, for a cache-blind and a prefix-aware router. Every sentence of the prose
//! is formatted from the runs.

use std::fmt::Write as _;

use brokerlab_core::fleet::Completion;
use brokerlab_core::fleet::slo::Slo;
use serde::Serialize;

use crate::error::CliResult;
use crate::fleet::cli::compare::page;
use crate::fleet::run::progress::Progress;
use crate::fleet::run::{Batched, BatchedSummary, config_error, simulate_slo};
use crate::fleet::scenario::engine::batched;
use crate::fleet::scenario::{Generated, Scenario};
use crate::plot::{Chart, Series};

/// Section title.
pub const TITLE: &str = "15. Autoscaling under the batched engine: does the router fight the WVA scaler?";

/// The scenario run (a ramp up and down; the fleet may grow from 2 to 8 pods).
pub const SCENARIO_TEXT: &str = r#"name = "autoscale-batched"
description = "multi-tenant prompts on a load ramp 4 -> 20 -> 4 req/s; 2..8 batched pods of 2,048 KV blocks, WVA saturation scaler"

[workload]
seed = 29
requests = 6000
tenants = 24
users_per_tenant = 20
prefix_tokens = 2048
suffix_tokens = [64, 512]
output_tokens = [32, 256]
popularity = "zipf:0.8"
layout = "stable-prefix-first"

[[workload.stages]]
rate_per_s = 4.0
duration_s = 120.0

[[workload.stages]]
rate_per_s = 20.0
duration_s = 240.0

[[workload.stages]]
rate_per_s = 4.0
duration_s = 600.0

[fleet]
pods = 8
capacity = 2048
router = "prefix-aware"
alpha = 1.0

[fleet.engine]
profile = "qwen3-32b-h100x2"

[fleet.autoscale]
policy = "wva-saturation"
min = 2
interval_s = 15.0
window_s = 30.0
startup_s = 30.0
"#;

/// The routers compared: (router name, label).
pub const ROUTERS: [(&str, &str); 2] = [("round-robin", "cache-blind (round-robin)"), ("prefix-aware", "prefix-aware")];
/// Width of a time bucket of the curves, s.
pub const BUCKET_S: u64 = 30;
/// The SLOs of the goodput: TTFT and TPOT, ms.
pub const SLO_MS: (u64, u64) = (2_000, 100);
/// The section's charts, in page order.
pub const STEMS: [&str; 3] = ["scaling_pods", "scaling_ttft", "scaling_goodput"];

/// One run: a router with the scaler, or with every pod throughout.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingRun {
    /// Label.
    pub label: String,
    /// Autoscaled (else all pods throughout).
    pub scaled: bool,
    /// The run's summary.
    pub summary: BatchedSummary,
    /// Per bucket of arrivals: (bucket start s, TTFT p90 s, goodput req/s, routable pods at
    /// the bucket's end).
    pub buckets: Vec<(f64, Option<f64>, f64, u32)>,
    /// Requests served by a pod the scaler added whose first request had a prefix hit
    /// (the cold start check: 0 when every added pod starts cold).
    pub warm_first_requests: u64,
}

/// The section's runs.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingSection {
    /// Requests run.
    pub requests: u64,
    /// The ramp: (start s, end s, req/s) of each stage.
    pub stages: Vec<(f64, f64, f64)>,
    /// Pods the fleet starts with (the scaler's min) and may grow to.
    pub pods: (u32, u32),
    /// KV blocks per pod.
    pub capacity: usize,
    /// Boot time of an added pod, s.
    pub startup_s: f64,
    /// The runs: for each router, autoscaled then fixed at the most pods.
    pub runs: Vec<ScalingRun>,
}

/// Points [`run`] adds to the progress bar.
pub fn points() -> u64 {
    (ROUTERS.len() * 2) as u64
}

fn slo() -> Slo {
    Slo { ttft_ns: Some(SLO_MS.0 * 1_000_000), tpot_ns: Some(SLO_MS.1 * 1_000_000) }
}

/// Runs the section, `1/shrink` of its requests.
pub fn run(shrink: u64, progress: &Progress) -> CliResult<ScalingSection> {
    progress.set_message("autoscaling, batched");
    let mut sc = Scenario::parse(SCENARIO_TEXT, "report: autoscale-batched", "autoscale-batched")?;
    sc.workload.requests = (sc.workload.requests / shrink.max(1)).max(1);
    let settings = sc.engine.clone().unwrap_or_default();
    let e = settings.config(&|k| format!("fleet.engine.{k}"))?;
    let mut runs = Vec::new();
    for (router, label) in ROUTERS {
        for scaled in [true, false] {
            let mut cfg = sc.fleet;
            cfg.router = brokerlab_core::fleet::RouterKind::parse(router).unwrap_or(cfg.router);
            cfg.routing = brokerlab_core::fleet::RouterSpec::preset(cfg.router);
            if !scaled && let Some(s) = cfg.scale_mut() {
                *s = None;
            }
            let cfg = batched(cfg, e).map_err(config_error)?;
            let src = Generated::new(sc.workload)?;
            let ran = simulate_slo::<Batched>(cfg, &mut &src, true, Some(slo()))?;
            progress.inc(1);
            let pods = ran.summary.autoscale.as_ref().map(|a| a.pods_over_time.clone());
            let buckets = buckets(&ran.completions, pods.as_deref(), cfg.pods as u32);
            let initial = cfg.scale().map_or(cfg.pods, |p| p.initial_pods as usize);
            let warm_first_requests = warm_first(&ran.completions, initial);
            let label = if scaled { format!("{label}, autoscaled") } else { format!("{label}, {} pods", cfg.pods) };
            runs.push(ScalingRun { label, scaled, summary: ran.summary, buckets, warm_first_requests });
        }
    }
    let mut stages = Vec::new();
    let mut start = 0.0;
    for st in sc.workload.stages() {
        let end = start + st.duration_ms as f64 / 1e3;
        stages.push((start, end, st.rate_milli_per_s as f64 / 1e3));
        start = end;
    }
    let policy = sc.fleet.scale();
    Ok(ScalingSection {
        requests: sc.workload.requests,
        stages,
        pods: (policy.map_or(sc.fleet.pods as u32, |p| p.min_pods), sc.fleet.pods as u32),
        capacity: sc.fleet.capacity_blocks,
        startup_s: policy.map_or(0.0, |p| p.startup_ns as f64 / 1e9),
        runs,
    })
}

/// Added pods (index >= `initial`) whose first request had a prefix hit (0 when every added pod
/// starts cold, as it must).
fn warm_first(completions: &[Completion], initial: usize) -> u64 {
    let mut first: Vec<Option<&Completion>> = Vec::new();
    for c in completions {
        let p = c.pod as usize;
        if p < initial {
            continue;
        }
        if first.len() <= p {
            first.resize(p + 1, None);
        }
        match first[p] {
            Some(f) if f.request <= c.request => {}
            _ => first[p] = Some(c),
        }
    }
    first.iter().flatten().filter(|c| c.hit_tokens > 0).count() as u64
}

/// The curves: per bucket of arrival times, TTFT p90 (nearest rank), goodput (requests meeting
/// both SLOs / bucket seconds) and the routable pods at the bucket's end (`pods`: the step
/// line; None: `all` throughout).
fn buckets(completions: &[Completion], pods: Option<&[(f64, u32)]>, all: u32) -> Vec<(f64, Option<f64>, f64, u32)> {
    let w = BUCKET_S * 1_000_000_000;
    let n = completions.iter().map(|c| c.arrival_ns / w + 1).max().unwrap_or(0) as usize;
    let mut ttft: Vec<Vec<u64>> = vec![Vec::new(); n];
    let mut good = vec![0u64; n];
    let s = slo();
    for c in completions {
        let b = (c.arrival_ns / w) as usize;
        ttft[b].push(c.ttft_ns());
        good[b] += u64::from(s.good(c.ttft_ns(), c.e2e_ns(), c.output_tokens));
    }
    (0..n)
        .map(|b| {
            let v = &mut ttft[b];
            v.sort_unstable();
            let p90 = (!v.is_empty()).then(|| v[(v.len() * 9).div_ceil(10) - 1] as f64 / 1e9);
            let end_s = ((b as u64 + 1) * BUCKET_S) as f64;
            let at = pods.map_or(all, |steps| steps.iter().rev().find(|(t, _)| *t <= end_s).map_or(all, |p| p.1));
            ((b as u64 * BUCKET_S) as f64, p90, good[b] as f64 / BUCKET_S as f64, at)
        })
        .collect()
}

/// The three charts: (stem, chart).
pub fn charts(x: &ScalingSection) -> Vec<(&'static str, Chart)> {
    let mid = |b: &(f64, Option<f64>, f64, u32)| b.0 + BUCKET_S as f64 / 2.0;
    let scaled: Vec<&ScalingRun> = x.runs.iter().filter(|r| r.scaled).collect();
    let pods: Vec<Series> = scaled
        .iter()
        .map(|r| {
            let steps = r.summary.autoscale.as_ref().map(|a| a.pods_over_time.clone()).unwrap_or_default();
            let end = r.summary.makespan_s;
            let mut pts = Vec::new();
            for (i, &(t, n)) in steps.iter().enumerate() {
                if i > 0 {
                    pts.push((t, pts.last().map_or(n as f64, |p: &(f64, f64)| p.1)));
                }
                pts.push((t, n as f64));
            }
            pts.push((end, pts.last().map_or(0.0, |p| p.1)));
            Series::new(r.label.clone(), pts)
        })
        .collect();
    let ttft: Vec<Series> = x
        .runs
        .iter()
        .map(|r| Series::new(r.label.clone(), r.buckets.iter().filter_map(|b| b.1.map(|y| (mid(b), y))).collect()))
        .collect();
    let goodput: Vec<Series> = x
        .runs
        .iter()
        .map(|r| Series::new(r.label.clone(), r.buckets.iter().map(|b| (mid(b), b.2)).collect()))
        .collect();
    // the busiest stage, shaded
    let shades: Vec<(f64, f64, String)> = x
        .stages
        .iter()
        .fold(None::<&(f64, f64, f64)>, |b, st| if b.is_none_or(|b| st.2 > b.2) { Some(st) } else { b })
        .map(|&(from, to, rate)| (from, to, format!("{rate} req/s")))
        .into_iter()
        .collect();
    vec![
        (
            STEMS[0],
            Chart {
                title: "WVA saturation scaler: routable pods over time".into(),
                x_label: "time (s)".into(),
                y_label: "routable pods".into(),
                series: pods,
                shades: shades.clone(),
                y_min: Some(0.0),
                ..Chart::default()
            },
        ),
        (
            STEMS[1],
            Chart {
                title: format!("TTFT p90 of the requests arriving in each {BUCKET_S} s"),
                x_label: "arrival time (s)".into(),
                y_label: "TTFT p90 (s)".into(),
                series: ttft,
                shades: shades.clone(),
                y_log: true,
                ..Chart::default()
            },
        ),
        (
            STEMS[2],
            Chart {
                title: format!("SLO goodput (TTFT <= {} s, TPOT <= {} ms)", SLO_MS.0 as f64 / 1e3, SLO_MS.1),
                x_label: "arrival time (s)".into(),
                y_label: "requests/s meeting both SLOs".into(),
                series: goodput,
                shades,
                y_min: Some(0.0),
                ..Chart::default()
            },
        ),
    ]
}

fn opt(v: Option<f64>, d: usize) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.d$}"))
}

/// The table: one row per run.
pub fn table(x: &ScalingSection) -> String {
    let mut t = String::from(
        "| run | pods (max) | scale out / in | pod-seconds | TTFT p90 (s) | goodput (req/s) | hit rate | new-pod traffic |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in &x.runs {
        let s = &r.summary;
        let (max, outs, pod_s, ratio) = match &s.autoscale {
            Some(a) => (
                a.totals.max_active_pods.to_string(),
                format!("{} / {}", a.totals.scale_outs, a.totals.scale_ins),
                format!("{:.0}", a.totals.pod_seconds),
                opt(a.totals.new_pod_traffic_ratio, 2),
            ),
            None => (s.pods.to_string(), "-".into(), format!("{:.0}", s.pods as f64 * s.makespan_s), "-".into()),
        };
        let goodput = s.slo.as_ref().and_then(|k| k.goodput_req_per_s);
        let _ = writeln!(
            t,
            "| {} | {max} | {outs} | {pod_s} | {} | {} | {} | {ratio} |",
            r.label,
            opt(s.ttft_p90, 3),
            opt(goodput, 2),
            s.hit_rate.map_or("n/a".into(), |h| format!("{:.1}%", h * 100.0)),
        );
    }
    t
}

/// Pods that came up and were scaled in at the same instant (a `ready` then an `in` of the pod
/// at one arrival): booted and paid for, routable for no request.
fn stillborn(events: &[crate::fleet::run::summary::ScaleEventJson]) -> usize {
    events
        .windows(2)
        .filter(|w| w[0].kind == "ready" && w[1].kind == "in" && w[0].pod == w[1].pod && w[0].t_s == w[1].t_s)
        .count()
}

/// The intro paragraph and the findings, from the runs.
pub fn prose(x: &ScalingSection) -> (String, String) {
    let ramp: Vec<String> = x.stages.iter().map(|s| format!("{}", s.2)).collect();
    let intro = format!(
        "The seed's question under the batched engine, with llm-d's workload variant autoscaler (WVA) V1 saturation \
         rule (docs/MODEL.md, \"Autoscaling under the batched engine\": a pod is saturated at KV usage >= 0.80 or 5 \
         waiting requests, peaks over the window; scale up when the non-saturated pods' mean spare KV < 0.10 or mean \
         spare queue < 3; scale down only when at least 2 pods are non-saturated and their load spread over one pod \
         fewer keeps both spares; no decision while a pod boots or drains). {} requests of a multi-tenant workload on a \
         ramp {} req/s; the fleet starts at {} pods of {} KV blocks and may grow to {}, a new pod boots in {} s and \
         starts cold, a pod scaled in drains its requests and then drops its cache. Each router runs autoscaled and \
         with all {} pods throughout; TTFT and goodput (TTFT <= {} s and TPOT <= {} ms) per {BUCKET_S} s of arrivals.",
        x.requests,
        ramp.join(" -> "),
        x.pods.0,
        crate::fleet::report::engine::thousands(x.capacity as u64),
        x.pods.1,
        x.startup_s,
        x.pods.1,
        SLO_MS.0 as f64 / 1e3,
        SLO_MS.1
    );
    let mut f = String::new();
    let scaled: Vec<&ScalingRun> = x.runs.iter().filter(|r| r.scaled).collect();
    for r in &scaled {
        if let Some(a) = &r.summary.autoscale {
            let _ = write!(
                f,
                "{}: {} scale-outs and {} scale-ins, at most {} pods, {:.0} pod-seconds (mean {} pods), new-pod \
                 traffic ratio {}. ",
                r.label,
                a.totals.scale_outs,
                a.totals.scale_ins,
                a.totals.max_active_pods,
                a.totals.pod_seconds,
                opt(a.totals.mean_pods, 2),
                opt(a.totals.new_pod_traffic_ratio, 2)
            );
            let idle = stillborn(&a.events);
            if idle > 0 {
                let _ = write!(
                    f,
                    "{idle} of its added pods came up and {} scaled in at the same arrival (the first evaluation \
                     after the boot found the pod idle and the load fitting one pod fewer), routable for no \
                     request: counted in the pod-seconds, not in the pod count. ",
                    if idle == 1 { "was" } else { "were" }
                );
            }
        }
    }
    // the contrast: the prefix-aware scaled run against the cache-blind one
    if let [blind, aware] = scaled[..]
        && let (Some(a), Some(b)) = (&aware.summary.autoscale, &blind.summary.autoscale)
    {
        let good = |r: &ScalingRun| r.summary.slo.as_ref().and_then(|k| k.goodput_req_per_s);
        let fewer = 1.0 - a.totals.pod_seconds / b.totals.pod_seconds.max(1e-9);
        let _ = write!(
            f,
            "Against the cache-blind router, prefix-aware routing {} {:.0}% {} pod-seconds ({:.0} vs {:.0}), peaked at {} \
             pods against {}, and met both SLOs for {} req/s against {} (hit rate {} vs {}). ",
            if fewer >= 0.0 { "used" } else { "needed" },
            fewer.abs() * 100.0,
            if fewer >= 0.0 { "fewer" } else { "more" },
            a.totals.pod_seconds,
            b.totals.pod_seconds,
            a.totals.max_active_pods,
            b.totals.max_active_pods,
            opt(good(aware), 2),
            opt(good(blind), 2),
            aware.summary.hit_rate.map_or("n/a".into(), |h| format!("{:.1}%", h * 100.0)),
            blind.summary.hit_rate.map_or("n/a".into(), |h| format!("{:.1}%", h * 100.0)),
        );
    }
    let cold: u64 = scaled.iter().map(|r| r.warm_first_requests).sum();
    let _ = write!(
        f,
        "An added pod's first request found {} cache: {} of the added pods' first requests had a prefix hit.",
        if cold == 0 { "an empty" } else { "a warm" },
        cold
    );
    (intro, f)
}

/// The section as page blocks, heading first, with the inline SVGs of `svgs` (section, stem,
/// svg) for its figures.
pub fn page_blocks(x: &ScalingSection, svgs: &[(String, String, String)]) -> Vec<page::Block> {
    let (intro, findings) = prose(x);
    let mut v = vec![page::Block::Heading(TITLE.into()), page::Block::Para(intro)];
    for stem in STEMS {
        if let Some((_, _, svg)) = svgs.iter().find(|(sec, st, _)| sec == "scaling" && st == stem) {
            v.push(page::Block::Figure(stem.into(), svg.clone()));
        }
    }
    v.push(page::table_from_md(&table(x)));
    v.push(page::Block::Para(findings));
    v.push(page::Block::Sub("the scenario".into()));
    v.push(page::Block::Pre(SCENARIO_TEXT.into()));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The section at full size: the scaler moves under the ramp, the added pods start cold, and
    /// the page (written to `$BROKERLAB_SCALING_HTML` when set, for a screenshot) holds the
    /// heading, the three figures and the table.
    #[test]
    fn the_section_runs_and_renders_its_figures() {
        let x = run(1, &Progress::hidden()).unwrap();
        assert_eq!(x.runs.len(), 4);
        for r in x.runs.iter().filter(|r| r.scaled) {
            let a = r.summary.autoscale.as_ref().unwrap();
            assert!(a.totals.scale_outs >= 1 && a.totals.scale_ins >= 1, "{}: {a:?}", r.label);
            assert_eq!(r.warm_first_requests, 0, "{}: added pods start cold", r.label);
            assert!(r.buckets.iter().any(|b| b.3 > 2), "{}: the pod count rises in the curves", r.label);
        }
        // the chart and the figures agree: each scaled run's highest plotted pod count is its
        // max_active_pods (the table's "pods (max)"), also when a pod came up and was scaled in
        // at one arrival
        let scaled: Vec<&ScalingRun> = x.runs.iter().filter(|r| r.scaled).collect();
        let chart = charts(&x).remove(0).1;
        assert_eq!(chart.series.len(), scaled.len());
        for (series, r) in chart.series.iter().zip(&scaled) {
            let a = r.summary.autoscale.as_ref().unwrap();
            let top = series.points.iter().map(|p| p.1).fold(0.0, f64::max);
            assert_eq!(top, f64::from(a.totals.max_active_pods), "{}: chart vs max_active_pods", r.label);
            assert!(table(&x).contains(&format!("| {} | {} |", r.label, a.totals.max_active_pods)));
        }
        // rendered, not written: a lib test that stages files would leave them in the
        // process-wide list another test's commit() renames (outfile::STAGED)
        let mut svgs = Vec::new();
        for (stem, c) in charts(&x) {
            let svg = crate::plot::svg(&c, 900, 520);
            svgs.push(("scaling".to_string(), stem.to_string(), svg));
        }
        let blocks = page_blocks(&x, &svgs);
        let html = super::super::render::render_html(&blocks, &crate::provenance::Provenance::of_this_run(true));
        assert!(html.contains(TITLE));
        assert_eq!(STEMS.iter().filter(|s| html.contains(*s)).count(), 3, "three figures");
        assert!(html.contains("<svg"), "inline figures");
        if let Ok(p) = std::env::var("BROKERLAB_SCALING_HTML") {
            std::fs::write(p, &html).unwrap();
        }
    }
}
