//! `fleet report`, section 16: heterogeneous pools (docs/MODEL.md, "Heterogeneous pools"). The
//! example fleet `scenarios/mixed-h100-a100.toml` (8 x H100 + 4 x A100, each pool its GPU's
//! physics step cost and KV capacity) under four routers: a cache-blind one, a load-only one and
//! llm-d's two prefix-aware presets. Per router the fleet's TTFT, throughput and hit rate, and per
//! pool the share of requests, TTFT and KV utilization. Every sentence of the prose is formatted
//! from the runs.
//!
//! A section of its own: `report/mod.rs` calls [`run`], the report's charts add [`charts`], and
//! the report's section list calls [`page_blocks`].

use std::fmt::Write as _;

use brokerlab_core::fleet::{RouterKind, RouterSpec};
use serde::Serialize;

use crate::error::CliResult;
use crate::fleet::cli::compare::page;
use crate::fleet::run::progress::Progress;
use crate::fleet::run::{Batched, BatchedSummary, config_error, simulate};
use crate::fleet::scenario::engine::batched;
use crate::fleet::scenario::{Generated, Scenario};
use crate::fleet::sweep::{PointSpec, par_points};
use crate::plot::{Chart, Series};

/// Section title.
pub const TITLE: &str = "16. Heterogeneous pools: one router over H100 and A100 pods";

/// The scenario run, as the repository ships it.
pub const SCENARIO_NAME: &str = "scenarios/mixed-h100-a100.toml";
/// Its text.
pub const SCENARIO_TEXT: &str = include_str!("../../../../scenarios/mixed-h100-a100.toml");

/// The scenario's rate is multiplied by this (`fleet run --rate-scale 8`): at the file's
/// 30 req/s the twelve pods idle (KV usage about 1%) and every router looks alike.
pub const RATE_SCALE: u64 = 8;
/// ... and its request count by this, so that the busy spell lasts as long as at the file's rate
/// (`fleet run --requests` does not exist: the section edits `workload.requests`).
pub const REQUESTS_SCALE: u64 = 4;

/// The routers compared: (router, what it reads).
pub const ROUTERS: [(RouterKind, &str); 5] = [
    (RouterKind::RoundRobin, "cache-blind"),
    (RouterKind::LlmDLoad, "load only"),
    (RouterKind::GieDefault, "prefix + load"),
    (RouterKind::LlmDPrecise, "precise prefix"),
    (RouterKind::LlmDApproximate, "approximate prefix"),
];

/// The section's charts, in page order.
pub const STEMS: [&str; 2] = ["pools_share", "pools_ttft"];

/// One router's run.
#[derive(Debug, Clone, Serialize)]
pub struct PoolRun {
    /// The router's name.
    pub router: String,
    /// What it reads.
    pub kind: String,
    /// The run (its `per_pool` holds the pools).
    pub summary: BatchedSummary,
}

/// The section's runs.
#[derive(Debug, Clone, Serialize)]
pub struct PoolsSection {
    /// Requests run (the file's divided by the shrink factor).
    pub requests: u64,
    /// Requests in the file.
    pub requests_in_file: u64,
    /// Arrival rate run, req/s.
    pub rate_per_s: f64,
    /// Arrival rate in the file, req/s.
    pub rate_in_file: f64,
    /// One run per router of [`ROUTERS`], in order.
    pub runs: Vec<PoolRun>,
}

/// Points [`run`] adds to the progress bar.
pub fn points() -> u64 {
    ROUTERS.len() as u64
}

/// The scenario as the section runs it: [`RATE_SCALE`] times its rate, [`REQUESTS_SCALE`] times
/// its requests, then `1/shrink` of them.
pub fn scenario(shrink: u64) -> CliResult<Scenario> {
    let mut sc = Scenario::parse(SCENARIO_TEXT, SCENARIO_NAME, "mixed-h100-a100")?;
    crate::fleet::scenario::rate_scale::apply(&mut sc, (RATE_SCALE, 1), &RATE_SCALE.to_string())?;
    sc.workload.requests = (sc.workload.requests * REQUESTS_SCALE / shrink.max(1)).max(1);
    Ok(sc)
}

/// Runs the section, `1/shrink` of its requests, on `threads` threads.
pub fn run(shrink: u64, threads: usize, progress: &Progress) -> CliResult<PoolsSection> {
    progress.set_message("heterogeneous pools");
    let sc = scenario(shrink)?;
    let settings = sc.engine.clone().unwrap_or_default();
    let e = settings.config(&|k| format!("fleet.engine.{k}"))?;
    let src = Generated::new(sc.workload)?;
    let mut specs = Vec::new();
    for (i, (router, _)) in ROUTERS.iter().enumerate() {
        let mut cfg = sc.fleet;
        cfg.router = *router;
        cfg.routing = RouterSpec::preset(*router);
        let cfg = batched(cfg, e).map_err(config_error)?;
        specs.push(PointSpec { value: i as f64, workload: 0, cfg, label: None });
    }
    let runs = par_points(&specs, threads, progress, |p| {
        let summary = simulate::<Batched>(p.cfg, &mut &src, false)?.summary;
        let (router, kind) = ROUTERS[p.value as usize];
        Ok(PoolRun { router: router.name().into(), kind: kind.into(), summary })
    })?;
    let file = Scenario::parse(SCENARIO_TEXT, SCENARIO_NAME, "mixed-h100-a100")?;
    Ok(PoolsSection {
        requests: sc.workload.requests,
        requests_in_file: file.workload.requests,
        rate_per_s: sc.workload.rate_milli_per_s as f64 / 1e3,
        rate_in_file: file.workload.rate_milli_per_s as f64 / 1e3,
        runs,
    })
}

impl PoolRun {
    /// Its pools (empty if the run had none).
    pub fn pools(&self) -> &[crate::fleet::run::deploy::PoolKeys] {
        self.summary.per_pool.as_deref().unwrap_or_default()
    }

    /// Pool `i`'s share of the requests routed, in [0, 1].
    pub fn share(&self, i: usize) -> f64 {
        let total: u64 = self.pools().iter().map(|p| p.requests).sum();
        self.pools().get(i).map_or(0.0, |p| p.requests as f64 / total.max(1) as f64)
    }

    /// Its label in charts and tables: `router (kind)`.
    pub fn label(&self) -> String {
        format!("{} ({})", self.router, self.kind)
    }
}

impl PoolsSection {
    /// The pools' (name, pods, profile, capacity), from the first run.
    pub fn pools(&self) -> Vec<(String, u32, String, usize)> {
        self.runs
            .first()
            .map(|r| r.pools().iter().map(|p| (p.name.clone(), p.pods, p.profile.clone(), p.capacity)).collect())
            .unwrap_or_default()
    }

    /// Pods of every pool.
    pub fn pods(&self) -> u32 {
        self.pools().iter().map(|p| p.1).sum()
    }
}

fn opt(v: Option<f64>, d: usize) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.d$}"))
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// The two charts: (stem, chart).
pub fn charts(x: &PoolsSection) -> Vec<(&'static str, Chart)> {
    let pools = x.pools();
    let categories: Vec<String> = x.runs.iter().map(|r| r.router.clone()).collect();
    let per_pool = |y: &dyn Fn(&PoolRun, usize) -> f64| -> Vec<Series> {
        pools
            .iter()
            .enumerate()
            .map(|(i, (name, pods, profile, _))| {
                Series::new(
                    format!("{name} ({pods} x {profile})"),
                    x.runs.iter().enumerate().map(|(k, r)| (k as f64, y(r, i))).collect(),
                )
            })
            .collect()
    };
    let fair: Vec<String> = pools
        .iter()
        .map(|(name, pods, _, _)| format!("{name}: {} of the pods", pct(f64::from(*pods) / f64::from(x.pods().max(1)))))
        .collect();
    let ttft_max = x.runs.iter().flat_map(|r| r.pools().iter().filter_map(|p| p.ttft_p90)).fold(0.0, f64::max);
    vec![
        (
            STEMS[0],
            Chart {
                title: "share of the requests routed to each pool, by router".into(),
                x_label: "router".into(),
                y_label: "requests routed to the pool (%)".into(),
                series: per_pool(&|r, i| r.share(i) * 100.0),
                bars: true,
                bar_values: true,
                x_categories: categories.clone(),
                y_min: Some(0.0),
                y_max: Some(100.0),
                notes: fair,
                ..Chart::default()
            },
        ),
        (
            STEMS[1],
            Chart {
                title: "TTFT p90 of the requests each pool served, by router".into(),
                x_label: "router".into(),
                y_label: "TTFT p90 (s)".into(),
                series: per_pool(&|r, i| r.pools().get(i).and_then(|p| p.ttft_p90).unwrap_or(f64::NAN)),
                bars: true,
                bar_values: true,
                x_categories: categories,
                y_min: Some(0.0),
                y_max: Some(ttft_max * 1.15),
                ..Chart::default()
            },
        ),
    ]
}

/// The table: one row per router, the fleet's figures then each pool's.
pub fn table(x: &PoolsSection) -> String {
    let pools = x.pools();
    let mut head = String::from("| router | TTFT p50 (s) | TTFT p90 (s) | output tok/s | hit rate |");
    let mut rule = String::from("|---|---|---|---|---|");
    for (name, ..) in &pools {
        let _ = write!(head, " {name}: requests | {name}: TTFT p90 (s) | {name}: KV util |");
        rule.push_str("---|---|---|");
    }
    let mut t = format!("{head}\n{rule}\n");
    for r in &x.runs {
        let s = &r.summary;
        let _ = write!(
            t,
            "| {} | {} | {} | {} | {} |",
            r.label(),
            opt(s.ttft_p50, 3),
            opt(s.ttft_p90, 3),
            opt(s.output_tok_per_s, 0),
            s.hit_rate.map_or("n/a".into(), pct),
        );
        for (i, p) in r.pools().iter().enumerate() {
            let _ = write!(
                t,
                " {} ({}) | {} | {} |",
                p.requests,
                pct(r.share(i)),
                opt(p.ttft_p90, 3),
                p.kv_util_mean.map_or("n/a".into(), pct)
            );
        }
        t.push('\n');
    }
    t
}

/// The intro paragraph and the findings, from the runs.
pub fn prose(x: &PoolsSection) -> (String, String) {
    let pools = x.pools();
    let desc: Vec<String> = pools
        .iter()
        .map(|(name, pods, profile, cap)| {
            format!(
                "`{name}`: {pods} pods of profile {profile}, {} KV blocks each",
                crate::fleet::report::engine::thousands(*cap as u64)
            )
        })
        .collect();
    let full = x.requests_in_file * REQUESTS_SCALE;
    let shrunk = if x.requests == full { String::new() } else { format!(", {} of them run (`--shrink`)", x.requests) };
    let ran = format!(
        "at {RATE_SCALE} x its rate ({} req/s instead of {}: at the file's rate the pods idle and every router looks \
         alike) and {REQUESTS_SCALE} x its requests ({}{shrunk}, so the busy spell lasts as long)",
        x.rate_per_s, x.rate_in_file, full
    );
    let routers: Vec<String> = x.runs.iter().map(|r| format!("{} ({})", r.router, r.kind)).collect();
    let intro = format!(
        "The example heterogeneous fleet `{SCENARIO_NAME}`, {ran}: {}. One router sees all {} pods, each with its own \
         queue, cache and KV utilization (a pod's fraction of its own capacity); no router weighs a pod by its GPU's \
         speed (docs/MODEL.md, \"Heterogeneous pools\"). Routers: {}. Per pool: the requests routed to it (and their \
         share), the TTFT p90 of the requests it served and its pods' time-weighted KV utilization.",
        desc.join("; "),
        x.pods(),
        routers.join(", ")
    );
    let mut f = String::new();
    if let (Some(first), Some(_)) = (pools.first(), pools.get(1)) {
        let fair = f64::from(first.1) / f64::from(x.pods().max(1));
        let shares: Vec<String> = x.runs.iter().map(|r| format!("{} {}", r.router, pct(r.share(0)))).collect();
        let _ = write!(
            f,
            "Share of the requests sent to `{}` (its share of the pods: {}): {}. ",
            first.0,
            pct(fair),
            shares.join(", ")
        );
        for r in &x.runs {
            let p = r.pools();
            if p.len() < 2 {
                continue;
            }
            let gap = match (p[0].ttft_p90, p[1].ttft_p90) {
                (Some(a), Some(b)) if a > 0.0 => format!("{:.2}x", b / a),
                _ => "n/a".into(),
            };
            let _ = write!(
                f,
                "{}: TTFT p90 {} s on `{}`, {} s on `{}` ({} / {}: {gap}). ",
                r.router,
                opt(p[0].ttft_p90, 3),
                p[0].name,
                opt(p[1].ttft_p90, 3),
                p[1].name,
                p[1].name,
                p[0].name
            );
        }
    }
    let best = x
        .runs
        .iter()
        .filter(|r| r.summary.ttft_p90.is_some())
        .min_by(|a, b| a.summary.ttft_p90.partial_cmp(&b.summary.ttft_p90).unwrap_or(std::cmp::Ordering::Equal));
    // presets that ran identically (e.g. the approximate index when nothing is evicted)
    for (i, a) in x.runs.iter().enumerate() {
        if let Some(b) = x.runs[..i].iter().find(|b| same_run(a, b)) {
            let peak = a.pools().iter().map(|p| p.kv_util_peak).fold(0.0, f64::max);
            let _ = write!(
                f,
                "{} routed every request as {} did (same figures): the pods' KV peaked at {}, so no pod evicted a \
                 block and a router-side index of what was routed where is exact. ",
                a.router,
                b.router,
                pct(peak)
            );
        }
    }
    if let Some(b) = best {
        let _ = write!(
            f,
            "Lowest fleet TTFT p90: {} ({} s, hit rate {}).",
            b.router,
            opt(b.summary.ttft_p90, 3),
            b.summary.hit_rate.map_or("n/a".into(), pct)
        );
    }
    (intro, f)
}

/// Two runs that routed alike: the same requests per pod and the same latencies.
fn same_run(a: &PoolRun, b: &PoolRun) -> bool {
    let (x, y) = (&a.summary, &b.summary);
    x.per_pod_requests == y.per_pod_requests && x.ttft_ns_p90 == y.ttft_ns_p90 && x.e2e_ns_p90 == y.e2e_ns_p90
}

/// The section as page blocks, heading first, with the inline SVGs of `svgs` (section, stem,
/// svg) for its figures.
pub fn page_blocks(x: &PoolsSection, svgs: &[(String, String, String)]) -> Vec<page::Block> {
    let (intro, findings) = prose(x);
    let mut v = vec![page::Block::Heading(TITLE.into()), page::Block::Para(intro)];
    for stem in STEMS {
        if let Some((_, _, svg)) = svgs.iter().find(|(sec, st, _)| sec == "pools" && st == stem) {
            v.push(page::Block::Figure(stem.into(), svg.clone()));
        }
    }
    v.push(page::table_from_md(&table(x)));
    v.push(page::Block::Para(findings));
    v.push(page::Block::Sub(SCENARIO_NAME.into()));
    v.push(page::Block::Pre(SCENARIO_TEXT.into()));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The section shrunk as `fleet_output` runs it: every router runs over both pools, the
    /// table and the figures hold each pool, and the page (written to `$BROKERLAB_POOLS_HTML`
    /// when set, for a screenshot) holds the heading, both figures and the table.
    #[test]
    fn the_section_runs_and_renders_its_figures() {
        let shrink = std::env::var("BROKERLAB_POOLS_SHRINK").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
        let x = run(shrink, 2, &Progress::hidden()).unwrap();
        assert_eq!(x.runs.len(), ROUTERS.len());
        assert_eq!(x.pods(), 12);
        for r in &x.runs {
            let p = r.pools();
            assert_eq!(p.len(), 2, "{}", r.router);
            assert_eq!(p.iter().map(|p| p.requests).sum::<u64>(), x.requests, "{}", r.router);
            assert!(p.iter().all(|p| p.requests > 0), "{}: both pools serve", r.router);
        }
        // round-robin spreads by pod, so by pods: the pools' shares are their pods' shares
        // up to one request per pod
        let rr = &x.runs[0];
        let want = x.requests as f64 * 8.0 / 12.0;
        assert!((rr.pools()[0].requests as f64 - want).abs() <= 12.0, "{:?}", rr.pools()[0].requests);
        let (intro, findings) = prose(&x);
        assert!(intro.contains("240 req/s instead of 30"), "{intro}");
        // at this size no pod evicts, so the approximate index is exact: it routes as an earlier
        // router of the list did (which one depends on the size), and the prose says so
        assert!(findings.contains("llm-d-approximate routed every request as "), "{findings}");
        let t = table(&x);
        assert_eq!(t.lines().count(), 2 + ROUTERS.len());
        assert!(t.contains("h100: requests") && t.contains("a100: KV util"), "{t}");
        // rendered, not written: a lib test that stages files would leave them in the
        // process-wide list another test's commit() renames (outfile::STAGED)
        let mut svgs = Vec::new();
        for (stem, c) in charts(&x) {
            let svg = crate::plot::svg(&c, 900, 520);
            svgs.push(("pools".to_string(), stem.to_string(), svg));
        }
        let blocks = page_blocks(&x, &svgs);
        let html = super::super::render::render_html(&blocks, &crate::provenance::Provenance::of_this_run(true));
        assert!(html.contains(TITLE));
        assert_eq!(STEMS.iter().filter(|s| html.contains(*s)).count(), 2, "two figures");
        if let Ok(p) = std::env::var("BROKERLAB_POOLS_HTML") {
            std::fs::write(p, &html).unwrap();
        }
    }
}
