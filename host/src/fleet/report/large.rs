//! `fleet report`, section 17: fleets of 64, 256 and 1,024 pods under the batched engine. The
//! multi-tenant workload grown with the fleet (its tenants, rate and request count in proportion
//! to the pods), run under llm-d's precise prefix-aware preset, its load-only preset and
//! round-robin: hit rate, TTFT p90 and SLO goodput per fleet size. Every sentence of the prose is
//! formatted from the runs; no wall-clock time is reported (the page is deterministic).
//!
//! A section of its own: `report/mod.rs` calls [`run`], the report's charts add [`charts`], and
//! the report's section list calls [`page_blocks`].

use std::fmt::Write as _;

use brokerlab_core::fleet::slo::Slo;
use brokerlab_core::fleet::workload::WorkloadSpec;
use brokerlab_core::fleet::{BatchedConfig, FleetConfig, Profile, RouterKind, RouterSpec};
use serde::Serialize;

use crate::error::CliResult;
use crate::fleet::cli::compare::page;
use crate::fleet::run::progress::Progress;
use crate::fleet::run::{Batched, config_error, simulate_slo};
use crate::fleet::scenario::Generated;
use crate::fleet::scenario::engine::batched;
use crate::fleet::sweep::{PointSpec, par_points};
use crate::plot::{Chart, Series};

/// Section title.
pub const TITLE: &str = "17. Fleets of 1,024 pods";

/// Fleet sizes run.
pub const PODS: [usize; 3] = [64, 256, 1024];
/// Routers compared.
pub const ROUTERS: [RouterKind; 3] = [RouterKind::LlmDPrecise, RouterKind::LlmDLoad, RouterKind::RoundRobin];
/// Tenants per pod (the multi-tenant scenario's 48 tenants on 8 pods).
pub const TENANTS_PER_POD: u32 = 6;
/// Arrivals per second per pod.
pub const RATE_PER_POD: u64 = 3;
/// Requests per pod at full size (`--shrink K` divides them).
pub const REQUESTS_PER_POD: u64 = 16;
/// GPU KV blocks per pod.
pub const CAPACITY: usize = 2048;
/// The SLOs of the goodput: TTFT and TPOT, ms.
pub const SLO_MS: (u64, u64) = (2_000, 100);
/// The section's chart.
pub const STEM: &str = "large_fleet";

/// One run, the figures the section shows (a whole summary holds per-pod lists of 1,024 entries).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LargeRun {
    /// Pods.
    pub pods: usize,
    /// Router name.
    pub router: String,
    /// Requests run.
    pub requests: u64,
    /// Share of prompt tokens served from cache.
    pub hit_rate: f64,
    /// TTFT p90, s.
    pub ttft_p90: f64,
    /// Requests meeting both SLOs.
    pub good: u64,
    /// Good requests per second of the makespan.
    pub goodput: f64,
    /// Preemptions.
    pub preemptions: u64,
}

/// The section's runs, in [`PODS`] x [`ROUTERS`] order.
#[derive(Debug, Clone, Serialize)]
pub struct LargeSection {
    /// Requests per pod run ([`REQUESTS_PER_POD`] / `--shrink`; each fleet runs at least one).
    pub requests_per_pod: f64,
    /// The runs.
    pub runs: Vec<LargeRun>,
}

/// Runs [`run`] adds to the progress bar.
pub fn points() -> u64 {
    (PODS.len() * ROUTERS.len()) as u64
}

/// The SLOs as the core takes them.
pub fn slo() -> Slo {
    Slo { ttft_ns: Some(SLO_MS.0 * 1_000_000), tpot_ns: Some(SLO_MS.1 * 1_000_000) }
}

/// The workload of a fleet of `pods`: the multi-tenant scenario's shape, its tenants, rate and
/// requests in proportion to the pods.
pub fn workload(pods: usize, shrink: u64) -> CliResult<WorkloadSpec> {
    let base = crate::fleet::scenario::builtin::builtin("multi-tenant")?.workload;
    Ok(WorkloadSpec {
        tenants: TENANTS_PER_POD * pods as u32,
        rate_milli_per_s: RATE_PER_POD * pods as u64 * 1000,
        requests: (REQUESTS_PER_POD * pods as u64 / shrink.max(1)).max(1),
        ..base
    })
}

/// Runs every fleet size under every router, `1/shrink` of the requests, on `threads` threads.
pub fn run(shrink: u64, threads: usize, progress: &Progress) -> CliResult<LargeSection> {
    progress.set_message("fleets of 1,024 pods");
    let sources: Vec<Generated> =
        PODS.iter().map(|&p| Generated::new(workload(p, shrink)?)).collect::<CliResult<_>>()?;
    let mut e = BatchedConfig::new(Profile::Qwen3_32bH100x2);
    e.offload.kv_bytes_per_token = e.profile_kv_bytes_per_token();
    let mut specs = Vec::new();
    for (w, &pods) in PODS.iter().enumerate() {
        for router in ROUTERS {
            let mut cfg = FleetConfig::new(pods, CAPACITY, router);
            cfg.routing = RouterSpec::preset(router);
            let cfg = batched(cfg, e).map_err(config_error)?;
            specs.push(PointSpec { value: pods as f64, workload: w, cfg, label: None });
        }
    }
    let runs = par_points(&specs, threads, progress, |p| {
        let s = simulate_slo::<Batched>(p.cfg, &mut &sources[p.workload], false, Some(slo()))?.summary;
        let k = s.slo.as_ref();
        Ok(LargeRun {
            pods: s.pods,
            router: s.router.name().into(),
            requests: s.requests,
            hit_rate: s.hit_rate.unwrap_or(f64::NAN),
            ttft_p90: s.ttft_p90.unwrap_or(f64::NAN),
            good: k.map_or(0, |k| k.slo_good_requests),
            goodput: k.and_then(|k| k.goodput_req_per_s).unwrap_or(f64::NAN),
            preemptions: s.preemptions,
        })
    })?;
    Ok(LargeSection { requests_per_pod: REQUESTS_PER_POD as f64 / shrink.max(1) as f64, runs })
}

impl LargeSection {
    /// The run of `router` on `pods` pods.
    pub fn at(&self, router: RouterKind, pods: usize) -> Option<&LargeRun> {
        self.runs.iter().find(|r| r.router == router.name() && r.pods == pods)
    }
}

/// The chart: hit rate and TTFT p90 against the fleet size, a line per router.
pub fn charts(x: &LargeSection) -> Vec<(&'static str, Chart)> {
    let mut series = Vec::new();
    for r in ROUTERS {
        let pts: Vec<(f64, f64)> =
            x.runs.iter().filter(|q| q.router == r.name()).map(|q| (q.pods as f64, q.ttft_p90)).collect();
        series.push(Series::new(r.name(), pts));
    }
    let (ttft, tpot) = SLO_MS;
    vec![(
        STEM,
        Chart {
            title: "TTFT p90 against the fleet size (tenants and rate grow with the pods)".into(),
            x_label: "pods".into(),
            y_label: "TTFT p90 (s)".into(),
            series,
            x_log: true,
            y_log: true,
            notes: vec![
                format!("{TENANTS_PER_POD} tenants, {RATE_PER_POD} req/s per pod"),
                format!("{} requests per pod", x.requests_per_pod),
                format!("{} KV blocks per pod", crate::fleet::report::engine::thousands(CAPACITY as u64)),
                format!("TTFT SLO {ttft} ms"),
                format!("TPOT SLO {tpot} ms"),
            ],
            ..Chart::default()
        },
    )]
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

fn s3(v: f64) -> String {
    if v >= 100.0 { format!("{v:.1}") } else { format!("{v:.3}") }
}

/// Every run, Markdown.
pub fn table(x: &LargeSection) -> String {
    let mut o = String::from(
        "| pods | router | requests | hit rate | TTFT p90 (s) | good | goodput (req/s) | goodput per pod (req/s) | preemptions |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &x.runs {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.3} | {} |",
            crate::fleet::report::engine::thousands(r.pods as u64),
            r.router,
            crate::fleet::report::engine::thousands(r.requests),
            pct(r.hit_rate),
            s3(r.ttft_p90),
            crate::fleet::report::engine::thousands(r.good),
            r.goodput,
            r.goodput / r.pods as f64,
            r.preemptions,
        );
    }
    o
}

/// The intro and the findings, formatted from the runs.
pub fn prose(x: &LargeSection) -> (String, String) {
    let (ttft, tpot) = SLO_MS;
    let intro = format!(
        "The multi-tenant workload (`scenarios/multi-tenant.toml`'s shape: a 2,048-token prefix per tenant, a 64-512-token \
         user suffix, Zipf(0.8) tenant popularity) grown with the fleet: {TENANTS_PER_POD} tenants and {RATE_PER_POD} \
         requests per second per pod, {} requests per pod, on 64, 256 and 1,024 pods of {} KV blocks under the \
         batched engine (profile `qwen3-32b-h100x2`), routed by llm-d's precise prefix-aware preset (`llm-d-precise`), \
         its load-only preset (`llm-d-load`) and round-robin. Goodput is the requests meeting TTFT <= {ttft} ms and TPOT \
         <= {tpot} ms per second of the makespan. The routers' cost at this size is `fleet bench`'s \
         (docs/PERFORMANCE.md), not this page's: the report holds no wall-clock figure.",
        x.requests_per_pod,
        crate::fleet::report::engine::thousands(CAPACITY as u64)
    );
    let mut finds = Vec::new();
    let (small, big) = (PODS[0], PODS[PODS.len() - 1]);
    for r in ROUTERS {
        if let (Some(a), Some(b)) = (x.at(r, small), x.at(r, big)) {
            finds.push(format!(
                "{} from {small} to {} pods: hit rate {} to {}, TTFT p90 {} s to {} s, goodput per pod {:.3} to {:.3} req/s",
                r.name(),
                crate::fleet::report::engine::thousands(big as u64),
                pct(a.hit_rate),
                pct(b.hit_rate),
                s3(a.ttft_p90),
                s3(b.ttft_p90),
                a.goodput / small as f64,
                b.goodput / big as f64
            ));
        }
    }
    let best = x
        .runs
        .iter()
        .filter(|r| r.pods == big)
        .max_by(|a, b| a.goodput.total_cmp(&b.goodput))
        .map(|r| {
            format!(
                " At {} pods the most goodput is {}'s ({:.1} req/s).",
                crate::fleet::report::engine::thousands(big as u64),
                r.router,
                r.goodput
            )
        })
        .unwrap_or_default();
    (intro, format!("{}.{best}", finds.join("; ")))
}

/// The section as page blocks, heading first, with the inline SVG of `svgs` (section, stem, svg).
pub fn page_blocks(x: &LargeSection, svgs: &[(String, String, String)]) -> Vec<page::Block> {
    let (intro, findings) = prose(x);
    let mut v = vec![page::Block::Heading(TITLE.into()), page::Block::Para(intro)];
    if let Some((_, _, svg)) = svgs.iter().find(|(sec, st, _)| sec == "large" && st == STEM) {
        v.push(page::Block::Figure(STEM.into(), svg.clone()));
    }
    v.push(page::table_from_md(&table(x)));
    v.push(page::Block::Para(findings));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The section shrunk: a run per fleet size and router, every figure finite, and the page
    /// (written to `$BROKERLAB_LARGE_HTML` when set, for a screenshot) holds the heading, the
    /// figure, every row and the findings.
    #[test]
    fn the_section_runs_every_size_and_router_and_renders() {
        let shrink = std::env::var("BROKERLAB_LARGE_SHRINK").ok().and_then(|s| s.parse().ok()).unwrap_or(16);
        let progress = Progress::hidden();
        let x = run(shrink, 2, &progress).unwrap();
        assert_eq!(progress.position(), points(), "the progress bar counts every run");
        check(&x).unwrap();
        // svg only: staging files through the outfile list would race other tests' commits
        let svgs: Vec<(String, String, String)> = charts(&x)
            .into_iter()
            .map(|(stem, c)| ("large".to_string(), stem.to_string(), crate::plot::svg(&c, 900, 520)))
            .collect();
        let blocks = page_blocks(&x, &svgs);
        let html = super::super::render::render_html(&blocks, &crate::provenance::Provenance::of_this_run(true));
        assert!(html.contains(TITLE) && html.contains(STEM) && html.contains("<svg"));
        for r in ROUTERS {
            assert!(html.contains(&format!("{} from 64 to 1,024 pods: hit rate", r.name())), "no finding for {r}");
        }
        if let Ok(p) = std::env::var("BROKERLAB_LARGE_HTML") {
            std::fs::write(p, &html).unwrap();
        }
        // determinism: a second run gives the same figures
        assert_eq!(run(shrink, 1, &Progress::hidden()).unwrap().runs, x.runs);
    }

    /// The check the test makes: every (size, router) row present once, with finite figures.
    fn check(x: &LargeSection) -> Result<(), String> {
        if x.runs.len() != PODS.len() * ROUTERS.len() {
            return Err(format!("{} runs", x.runs.len()));
        }
        for p in PODS {
            for r in ROUTERS {
                let run = x.at(r, p).ok_or(format!("no row for {r} on {p} pods"))?;
                for (k, v) in [("hit rate", run.hit_rate), ("TTFT p90", run.ttft_p90), ("goodput", run.goodput)] {
                    if !v.is_finite() {
                        return Err(format!("{r} on {p} pods: {k} is {v}"));
                    }
                }
                if run.requests == 0 {
                    return Err(format!("{r} on {p} pods: no request"));
                }
            }
        }
        let t = table(x);
        if t.lines().count() != 2 + x.runs.len() || t.contains("NaN") {
            return Err(format!("table:\n{t}"));
        }
        for (_, c) in charts(x) {
            for s in &c.series {
                if s.points.len() != PODS.len() || !s.points.iter().all(|p| p.1.is_finite()) {
                    return Err(format!("chart series {}: {:?}", s.label, s.points));
                }
            }
        }
        Ok(())
    }

    /// The check fails on a missing row and on a NaN (so the test above can fail).
    #[test]
    fn the_check_catches_a_missing_row_and_a_nan() {
        let row = |pods: usize, r: RouterKind| LargeRun {
            pods,
            router: r.name().into(),
            requests: 10,
            hit_rate: 0.5,
            ttft_p90: 0.1,
            good: 9,
            goodput: 1.0,
            preemptions: 0,
        };
        let full: Vec<LargeRun> = PODS.iter().flat_map(|&p| ROUTERS.map(|r| row(p, r))).collect();
        assert_eq!(check(&LargeSection { requests_per_pod: 1.0, runs: full.clone() }), Ok(()));
        let mut missing = full.clone();
        missing.pop();
        assert!(check(&LargeSection { requests_per_pod: 1.0, runs: missing }).is_err());
        let mut dup = full.clone();
        dup[8] = row(64, ROUTERS[0]);
        assert!(check(&LargeSection { requests_per_pod: 1.0, runs: dup }).unwrap_err().contains("no row"));
        let mut nan = full;
        nan[4].ttft_p90 = f64::NAN;
        assert!(check(&LargeSection { requests_per_pod: 1.0, runs: nan }).unwrap_err().contains("NaN"));
    }
}
