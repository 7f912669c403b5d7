//! The report's charts and files: runs the experiments, draws each section's plots, writes
//! `index.html`, `summary.md`, CSV and JSON.

use super::render::{self, render_html, secs, us};
use super::*;

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
    prov.add_bytes("trace", engine::CONVERSATION_TRACE_NAME, engine::CONVERSATION_TRACE);
    crate::fleet::report::mooncake::add_provenance(&mut prov);
    prov.add_bytes(
        "scenario",
        crate::fleet::report::llmd::SCENARIO_NAME,
        crate::fleet::report::llmd::SCENARIO_TEXT.as_bytes(),
    );
    prov.add_bytes("scenario", super::pools::SCENARIO_NAME, super::pools::SCENARIO_TEXT.as_bytes());
    let ex = run_all(threads, shrink, progress)?;
    let q = Quoted::new(&ex)?;
    let mut svgs: Vec<(String, String, String)> = Vec::new(); // (section, caption, svg)
    for (section, stem, c) in seed_charts(&ex, &q) {
        let svg = write_chart(out, &stem, &c)?;
        svgs.push((section.into(), stem, svg));
    }
    let blocks = render::blocks(&ex, &render::PageInputs { quoted: &q, svgs: &svgs });
    sweep::write_file(out, "index.html", render_html(&blocks, &prov).as_bytes())?;
    sweep::write_file(out, "summary.md", render_markdown(&blocks, &prov).as_bytes())?;
    let all: Vec<&Point> =
        [&ex.capacity, &ex.timestamp_first, &ex.stale, &ex.alpha, &ex.llmd, &ex.rag, &ex.cpu_tier, &ex.autoscale]
            .into_iter()
            .flatten()
            .collect();
    let owned: Vec<Point> = all.into_iter().cloned().collect();
    sweep::write_file(out, "points.csv", sweep::to_csv(&owned)?.as_bytes())?;
    sweep::write_file(out, "points.provenance.json", prov.sidecar_json().as_bytes())?;
    sweep::write_file(out, "experiments.json", prov.json_with(&ex).as_bytes())?;
    Ok(ex)
}

/// Every chart of the seed's experiments, in page order: (section, file stem, chart).
fn seed_charts(ex: &Experiments, q: &Quoted) -> Vec<(&'static str, String, Chart)> {
    let mut out = Vec::new();
    capacity_charts(ex, &mut out);
    stale_charts(ex, &mut out);
    alpha_charts(ex, &mut out);
    llmd_charts(ex, &mut out);
    rag_charts(ex, &mut out);
    cpu_charts(ex, q, &mut out);
    autoscale_charts(ex, q, &mut out);
    llmd_stage_charts(ex, &mut out);
    out.extend(super::deploy::charts(&ex.deploy));
    out.extend(super::published::report_charts(&ex.published));
    out.extend(super::scaling::charts(&ex.scaling).into_iter().map(|(stem, c)| ("scaling", stem.into(), c)));
    out.extend(super::pools::charts(&ex.pools).into_iter().map(|(stem, c)| ("pools", stem.into(), c)));
    out.extend(super::large::charts(&ex.large).into_iter().map(|(stem, c)| ("large", stem.into(), c)));
    out
}

/// Section 11's ladder: output tok/s and TTFT p90 per stage against the stage's rate, a line per
/// preset (the warmup stage left out: its rate sits inside the ladder's).
fn llmd_stage_charts(ex: &Experiments, out: &mut Vec<(&'static str, String, Chart)>) {
    use crate::fleet::report::llmd::WARMUP_STAGES;
    let b = &ex.llmd_bench;
    let series = |y: &dyn Fn(&crate::fleet::report::llmd::StageStats) -> f64| -> Vec<Series> {
        b.ramp
            .iter()
            .map(|r| Series {
                label: r.preset.upstream().into(),
                points: r.stages.iter().skip(WARMUP_STAGES).map(|st| (st.rate_per_s, y(st))).collect(),
            })
            .collect()
    };
    let scaled =
        if b.stage_divisor > 1 { format!(", stages 1/{} of their length", b.stage_divisor) } else { String::new() };
    out.push((
        "llmd_stages",
        "llmd_ramp_tok_s".into(),
        Chart {
            title: format!("llm-d ramp: output tok/s per stage{scaled}"),
            x_label: "stage arrival rate (req/s)".into(),
            y_label: "output tok/s in the stage's window".into(),
            series: series(&|st| st.output_tok_s),
            y_min: Some(0.0),
            ..Chart::default()
        },
    ));
    out.push((
        "llmd_stages",
        "llmd_ramp_ttft_p90".into(),
        Chart {
            title: format!("llm-d ramp: TTFT p90 per stage{scaled}"),
            x_label: "stage arrival rate (req/s)".into(),
            y_label: "TTFT p90 of the stage's arrivals (s), log scale".into(),
            series: series(&|st| st.ttft_p90_s.unwrap_or(f64::NAN)),
            y_log: true,
            ..Chart::default()
        },
    ));
}

/// Hit rate vs capacity, and the prompt layouts.
fn capacity_charts(ex: &Experiments, out: &mut Vec<(&'static str, String, Chart)>) {
    for (stem, c) in sweep_charts("stable prefix first", SweepParam::Capacity, &ex.capacity) {
        out.push(("capacity", format!("capacity_{stem}"), c));
    }
    let ts_hit = sweep_charts("timestamp first", SweepParam::Capacity, &ex.timestamp_first).remove(0).1;
    let mut both = sweep_charts("layout", SweepParam::Capacity, &ex.capacity).remove(0).1;
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
    out.push(("layout", "layout_hit_rate".into(), both));
}

/// What a stale index keeps of the gain, and the requests it sends astray.
fn stale_charts(ex: &Experiments, out: &mut Vec<(&'static str, String, Chart)>) {
    let gain = ex.stale_gain_kept();
    let chased: Vec<(f64, f64)> = ex
        .stale
        .iter()
        .map(|p| (p.value.max(0.5), 100.0 * p.summary.chased_requests as f64 / p.summary.requests.max(1) as f64))
        .collect();
    let k_label = "stale delay k (requests, log; k = 0 at 0.5)";
    out.push((
        "stale",
        "stale_gain".into(),
        Chart {
            title: "stale index: share of prefix-aware's gain over round-robin that survives".into(),
            x_label: k_label.into(),
            y_label: "gain kept (%)".into(),
            series: vec![Series {
                label: "gain kept".into(),
                points: gain.iter().map(|(k, g)| ((*k as f64).max(0.5), g * 100.0)).collect(),
            }],
            x_log: true,
            // From 0: an axis from the lowest value makes a 10-point loss look like a collapse.
            y_min: Some(0.0),
            ..Chart::default()
        },
    ));
    out.push((
        "stale",
        "stale_chased".into(),
        Chart {
            title: "stale index: requests routed to a pod for blocks it had evicted".into(),
            x_label: k_label.into(),
            y_label: "chased requests (% of requests)".into(),
            series: vec![Series { label: "chased requests".into(), points: chased }],
            x_log: true,
            ..Chart::default()
        },
    ));
}

/// p90 vs alpha, and the load per pod at three alphas.
fn alpha_charts(ex: &Experiments, out: &mut Vec<(&'static str, String, Chart)>) {
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
    out.push((
        "alpha",
        "alpha_p90".into(),
        Chart {
            title: "p90 latency vs load penalty alpha (round-robin, least-loaded: flat references)".into(),
            x_label: "alpha (blocks per queued request), log scale".into(),
            y_label: "p90 latency (s)".into(),
            series: alpha_series,
            x_log: true,
            y_log: true,
            annotations: vec![(best_a, best_p90, format!("sweet spot alpha = {best_a}"))],
            ..Chart::default()
        },
    ));
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
    out.push((
        "alpha",
        "alpha_pod_load".into(),
        Chart {
            title: "requests per pod, prefix-aware: too low, sweet spot, too high".into(),
            x_label: "pod".into(),
            y_label: "requests".into(),
            series: load_series,
            bars: true,
            ..Chart::default()
        },
    ));
}

/// The llm-d shape per router beside the published p90.
fn llmd_charts(ex: &Experiments, out: &mut Vec<(&'static str, String, Chart)>) {
    // llm-d: p90 per router next to the published figures. Bars take no log axis and a linear one
    // from 0 to 100 s hides the 0.3-0.5 s bars, so every bar prints its value.
    let ld_rows = llmd_rows(ex);
    let top = ld_rows.iter().flat_map(|r| [r.2, r.3]).filter(|v| v.is_finite()).fold(0.0, f64::max);
    out.push((
        "llmd",
        "llmd_p90".into(),
        Chart {
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
            bar_values: true,
            y_max: Some(top * 1.12),
            ..Chart::default()
        },
    ));
}

/// RAG tenants, retrieval order vs sorted documents.
fn rag_charts(ex: &Experiments, out: &mut Vec<(&'static str, String, Chart)>) {
    let rag_series = |sorted: f64, label: &str| Series {
        label: label.into(),
        points: RouterKind::ALL
            .iter()
            .enumerate()
            .map(|(i, r)| (i as f64, find(&ex.rag, *r, sorted).map_or(f64::NAN, |p| hit(p) * 100.0)))
            .collect(),
    };
    out.push((
        "rag",
        "rag_hit_rate".into(),
        Chart {
            title: "RAG tenants: hit rate with documents in retrieval order vs sorted by id".into(),
            x_label: "RR round-robin, LL least-loaded, PA prefix-aware".into(),
            x_categories: vec!["RR".into(), "LL".into(), "PA".into()],
            y_label: "hit rate (% of prompt tokens)".into(),
            series: vec![rag_series(0.0, "retrieval order"), rag_series(1.0, "sorted by document id")],
            bars: true,
            ..Chart::default()
        },
    ));
}

/// The CPU tier, hit rate and p90.
fn cpu_charts(ex: &Experiments, q: &Quoted, out: &mut Vec<(&'static str, String, Chart)>) {
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
    out.push((
        "cpu",
        "cpu_tier_hit_rate".into(),
        Chart {
            title: "CPU tier: tokens served from GPU + CPU cache vs CPU tier size (GPU = hot/6)".into(),
            x_label: "CPU-tier blocks per pod".into(),
            y_label: "GPU + CPU hit rate (% of prompt tokens)".into(),
            series: tier_series(&|s| (s.hit_rate.unwrap_or(0.0) + s.cpu_hit_rate.unwrap_or(0.0)) * 100.0),
            ..Chart::default()
        },
    ));
    out.push((
        "cpu",
        "cpu_tier_p90".into(),
        Chart {
            title: format!(
                "CPU tier: p90 latency vs CPU tier size (load {} us/token, prefill {} us/token)",
                us(q.multi_tenant.fifo().t_cpu_ns),
                us(q.multi_tenant.fifo().t_prefill_ns)
            ),
            x_label: "CPU-tier blocks per pod".into(),
            y_label: "p90 latency (s)".into(),
            series: tier_series(&|s| s.latency_p90.unwrap_or(f64::NAN)),
            ..Chart::default()
        },
    ));
}

/// Routable pods over time under autoscaling.
fn autoscale_charts(ex: &Experiments, q: &Quoted, out: &mut Vec<(&'static str, String, Chart)>) {
    let steps: Vec<Series> =
        ex.autoscale_timeline.iter().map(|(label, pts)| Series { label: label.clone(), points: pts.clone() }).collect();
    let w = q.autoscale.workload;
    let (from_s, to_s) = (w.burst_start_ms as f64 / 1e3, (w.burst_start_ms + w.burst_ms) as f64 / 1e3);
    let shades = if w.burst_ms > 0 {
        vec![(from_s, to_s, format!("burst, {} req/s", w.burst_rate_milli_per_s as f64 / 1e3))]
    } else {
        Vec::new()
    };
    out.push((
        "autoscale",
        "autoscale_pods".into(),
        Chart {
            title: format!(
                "autoscaling: routable pods over time (burst from {from_s} s to {to_s} s, {} s boot)",
                q.autoscale.fleet.scale().map_or(0.0, |p| secs(p.startup_ns))
            ),
            x_label: "time (s)".into(),
            y_label: "routable pods".into(),
            series: steps,
            shades,
            ..Chart::default()
        },
    ));
}
