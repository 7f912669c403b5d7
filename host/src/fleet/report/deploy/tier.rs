//! Section 14, the offload tier: hit rate and TTFT of the multi-tenant workload under the batched
//! engine against the CPU tier's size per pod and the PCIe bandwidth of the reload, for a
//! cache-blind and a prefix-aware router (docs/MODEL.md, "The KV offload tier").

use std::fmt::Write as _;

use brokerlab_core::fleet::{BatchedConfig, FleetConfig, Profile, RouterKind};
use serde::Serialize;

use super::{DeployPoint, line, pct, run_specs, s3, series_names, spec};
use crate::error::CliResult;
use crate::fleet::report::llmd::Block;
use crate::fleet::run::progress::Progress;
use crate::fleet::run::{BatchedSummary, config_error};
use crate::fleet::scenario::Generated;
use crate::fleet::scenario::engine::batched;
use crate::plot::{Chart, Series};

/// CPU-tier blocks per pod swept (0: no tier).
pub const SIZES: [u32; 6] = [0, 1024, 2048, 4096, 8192, 16384];
/// PCIe bytes/s swept, at [`PCIE_TIER`] blocks.
pub const PCIE: [u64; 6] = [250_000_000, 1_000_000_000, 2_000_000_000, 4_000_000_000, 16_000_000_000, 64_000_000_000];
/// The tier size of the PCIe sweep (GPU + CPU hold the hot set).
pub const PCIE_TIER: u32 = 8192;
/// Requests of the multi-tenant scenario run (its first ones; divided by `--shrink`).
pub const REQUESTS: u64 = 6_000;
/// The routers compared.
pub const ROUTERS: [RouterKind; 2] = [RouterKind::RoundRobin, RouterKind::PrefixAware];
/// The section's charts, in page order.
pub const STEMS: [&str; 3] = ["tier_hit_vs_size", "tier_ttft_vs_size", "tier_ttft_vs_pcie"];

/// The offload-tier experiment's runs.
#[derive(Debug, Clone, Serialize)]
pub struct TierExperiment {
    /// Requests run.
    pub requests: u64,
    /// Pods and GPU KV blocks per pod (the scenario's).
    pub pods: usize,
    /// GPU KV blocks per pod.
    pub gpu_capacity: usize,
    /// The scenario's hot set, blocks.
    pub hot_set_blocks: u64,
    /// Prefix-aware's alpha.
    pub alpha: f64,
    /// KV bytes per token (the profile's).
    pub kv_bytes_per_token: u64,
    /// The profile's prefill ns per token.
    pub t_prefill_token_ns: u64,
    /// By tier size: value = CPU-tier blocks per pod, series = router name.
    pub by_size: Vec<DeployPoint>,
    /// By PCIe bandwidth at [`PCIE_TIER`]: value = bytes/s, series = router name.
    pub by_pcie: Vec<DeployPoint>,
}

/// Runs of [`run`].
pub fn points() -> u64 {
    (ROUTERS.len() * (SIZES.len() + PCIE.len())) as u64
}

/// The batched engine on the multi-tenant fleet with `router`, a tier of `c2` blocks and `pcie`.
pub(super) fn fleet(base: FleetConfig, router: RouterKind, c2: u32, pcie: u64) -> CliResult<FleetConfig> {
    let mut e = BatchedConfig::new(Profile::Qwen3_32bH100x2);
    e.offload.cpu_capacity = c2;
    e.offload.pcie_bytes_per_s = pcie;
    // the profile's KV bytes per token, as `--profile` sets it on the command line
    e.offload.kv_bytes_per_token = e.profile_kv_bytes_per_token();
    batched(FleetConfig { router, ..base }, e).map_err(config_error)
}

/// Runs both sweeps.
pub fn run(shrink: u64, threads: usize, progress: &Progress) -> CliResult<TierExperiment> {
    progress.set_message("offload tier");
    let mut sc = crate::fleet::scenario::builtin::builtin("multi-tenant")?;
    sc.workload.requests = (REQUESTS / shrink.max(1)).max(1).min(sc.workload.requests);
    let src = [Generated::new(sc.workload)?];
    let pcie_default = BatchedConfig::new(Profile::Qwen3_32bH100x2).offload.pcie_bytes_per_s;
    let mut specs = Vec::new();
    for r in ROUTERS {
        for c2 in SIZES {
            specs.push(spec(c2 as f64, 0, fleet(sc.fleet, r, c2, pcie_default)?));
        }
    }
    let label = |p: &crate::fleet::sweep::PointSpec| p.cfg.router.name().to_string();
    let by_size = run_specs(&specs, &src, threads, progress, None, &label)?;
    let mut specs = Vec::new();
    for r in ROUTERS {
        for bw in PCIE {
            specs.push(spec(bw as f64, 0, fleet(sc.fleet, r, PCIE_TIER, bw)?));
        }
    }
    let by_pcie = run_specs(&specs, &src, threads, progress, None, &label)?;
    let e = BatchedConfig::new(Profile::Qwen3_32bH100x2);
    Ok(TierExperiment {
        requests: sc.workload.requests,
        pods: sc.fleet.pods,
        gpu_capacity: sc.fleet.capacity_blocks,
        hot_set_blocks: sc.workload.hot_set_blocks(),
        alpha: sc.fleet.alpha,
        kv_bytes_per_token: e.profile_kv_bytes_per_token(),
        t_prefill_token_ns: e.cost.linear().map_or(0, |c| c.t_prefill_token_ns),
        by_size,
        by_pcie,
    })
}

fn gpu_hit(s: &BatchedSummary) -> f64 {
    s.hit_rate.unwrap_or(0.0)
}

fn cpu_hit(s: &BatchedSummary) -> f64 {
    s.offload.as_ref().and_then(|k| k.offload_hit_rate).unwrap_or(0.0)
}

fn ttft_p90(s: &BatchedSummary) -> f64 {
    s.ttft_p90.unwrap_or(f64::NAN)
}

/// The three charts: (stem, chart).
pub fn charts(x: &TierExperiment) -> Vec<(&'static str, Chart)> {
    let names = series_names(&x.by_size);
    let mut hits = Vec::new();
    for n in &names {
        hits.push(Series::new(format!("{n}: GPU + CPU"), line(&x.by_size, n, &|s| (gpu_hit(s) + cpu_hit(s)) * 100.0)));
        hits.push(Series::new(format!("{n}: GPU only"), line(&x.by_size, n, &|s| gpu_hit(s) * 100.0)));
    }
    let ttft: Vec<Series> = names.iter().map(|n| Series::new(n.clone(), line(&x.by_size, n, &ttft_p90))).collect();
    let mut pcie: Vec<Series> = Vec::new();
    for n in &names {
        let pts: Vec<(f64, f64)> = line(&x.by_pcie, n, &ttft_p90).into_iter().map(|(b, y)| (b / 1e9, y)).collect();
        let none = line(&x.by_size, n, &ttft_p90).first().map_or(f64::NAN, |p| p.1);
        pcie.push(Series::new(format!("{n}: no tier"), pts.iter().map(|p| (p.0, none)).collect()));
        pcie.push(Series::new(format!("{n}: {PCIE_TIER}-block tier"), pts));
    }
    let gpu = format!("{} pods x {} GPU blocks", x.pods, x.gpu_capacity);
    vec![
        (
            STEMS[0],
            Chart {
                title: "offload tier: prompt tokens from cache vs CPU tier size".into(),
                notes: vec![gpu.clone(), format!("hot set {} blocks", x.hot_set_blocks)],
                x_label: "CPU-tier blocks per pod".into(),
                y_label: "hit rate (% of prompt tokens)".into(),
                series: hits,
                y_min: Some(0.0),
                ..Chart::default()
            },
        ),
        (
            STEMS[1],
            Chart {
                title: "offload tier: TTFT p90 vs CPU tier size".into(),
                notes: vec![gpu.clone(), "PCIe 64 GB/s".into()],
                x_label: "CPU-tier blocks per pod".into(),
                y_label: "TTFT p90 (s)".into(),
                series: ttft,
                y_log: true,
                ..Chart::default()
            },
        ),
        (
            STEMS[2],
            Chart {
                title: "offload tier: TTFT p90 vs PCIe bandwidth".into(),
                notes: vec![gpu, format!("{PCIE_TIER}-block CPU tier")],
                x_label: "PCIe host-to-device GB/s".into(),
                y_label: "TTFT p90 (s)".into(),
                series: pcie,
                x_log: true,
                y_log: true,
                ..Chart::default()
            },
        ),
    ]
}

fn at<'a>(pts: &'a [DeployPoint], series: &str, value: f64) -> Option<&'a DeployPoint> {
    pts.iter().find(|p| p.series == series && p.value == value)
}

/// The intro and the findings, formatted from the runs.
pub fn blocks(x: &TierExperiment) -> Vec<Block> {
    let breakeven = x.kv_bytes_per_token as f64 / x.t_prefill_token_ns.max(1) as f64;
    let mut o = vec![Block::Para(format!(
        "**The KV offload tier** (docs/MODEL.md, \"The KV offload tier\": vLLM's native offload, a block stored in the \
         pod's CPU tier when it is computed, looked up at every admission, reloaded over the pod's PCIe link before the \
         request's next step). The multi-tenant scenario's first {} requests (`scenarios/multi-tenant.toml`: hot set \
         {} blocks) on its {} pods of {} GPU blocks under the batched engine (profile `qwen3-32b-h100x2`), round-robin \
         and prefix-aware (alpha {}, CPU-tier blocks weighted 0.8 in its match as llm-d's tiered scorer does). A \
         block's KV is 16 x {} bytes; recomputing it costs 16 x {} ns of prefill, so a reload is cheaper than the \
         recompute above {:.2} GB/s (before the step overhead and the link's queueing).",
        x.requests,
        x.hot_set_blocks,
        x.pods,
        x.gpu_capacity,
        x.alpha,
        x.kv_bytes_per_token,
        x.t_prefill_token_ns,
        breakeven
    ))];
    for r in ROUTERS {
        o.extend(router_finding(x, r.name(), breakeven));
    }
    o
}

/// What the sweeps show for router `name`, or None without its runs.
fn router_finding(x: &TierExperiment, name: &str, breakeven: f64) -> Option<Block> {
    let big = *SIZES.last()? as f64;
    let (none, full) = (at(&x.by_size, name, 0.0)?, at(&x.by_size, name, big)?);
    let pcie: Vec<&DeployPoint> = x.by_pcie.iter().filter(|p| p.series == name).collect();
    let (slow, fast) = (pcie.first()?, pcie.last()?);
    let t0 = ttft_p90(&none.summary);
    let pays: Vec<String> =
        pcie.iter().filter(|p| ttft_p90(&p.summary) < t0).map(|p| format!("{}", p.value / 1e9)).collect();
    let pays = if pays.is_empty() {
        format!("no bandwidth run lowers TTFT p90 below the no-tier {} s", s3(Some(t0)))
    } else {
        format!("the tier lowers TTFT p90 below the no-tier {} s at {} GB/s of PCIe", s3(Some(t0)), pays.join(", "))
    };
    // the tier's own cost when it adds preemptions: a loading request keeps its GPU blocks
    let why = if full.summary.preemptions > none.summary.preemptions {
        format!(
            ": a request admitted with a CPU hit holds its GPU blocks while it loads, on pods of {} blocks",
            x.gpu_capacity
        )
    } else {
        String::new()
    };
    Some(Block::Para(format!(
        "**{name}.** A {big}-block tier raises the share of prompt tokens served from cache from {} (GPU) to {} ({} from \
         the GPU, {} reloaded from CPU) and moves TTFT p90 from {} s to {} s (preemptions {} to {}{why}). At {PCIE_TIER} blocks {pays}; at {} GB/s TTFT p90 is {} s (the break-even per block is {:.2} \
         GB/s) and at {} GB/s {} s.",
        pct(Some(gpu_hit(&none.summary))),
        pct(Some(gpu_hit(&full.summary) + cpu_hit(&full.summary))),
        pct(Some(gpu_hit(&full.summary))),
        pct(Some(cpu_hit(&full.summary))),
        s3(Some(t0)),
        s3(full.summary.ttft_p90),
        none.summary.preemptions,
        full.summary.preemptions,
        slow.value / 1e9,
        s3(slow.summary.ttft_p90),
        breakeven,
        fast.value / 1e9,
        s3(fast.summary.ttft_p90),
    )))
}

/// Every run, Markdown.
pub fn table(x: &TierExperiment) -> String {
    let mut o = String::from(
        "| router | CPU-tier blocks | PCIe GB/s | GPU hit rate | CPU hit rate | TTFT p90 (s) | E2E p90 (s) | loads | preemptions |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for p in x.by_size.iter().chain(&x.by_pcie) {
        let s = &p.summary;
        let (c2, bw) = match &s.offload {
            Some(k) => (k.cpu_capacity, k.pcie_bytes_per_s as f64 / 1e9),
            None => (0, f64::NAN),
        };
        let _ = writeln!(
            o,
            "| {} | {c2} | {} | {} | {} | {} | {} | {} | {} |",
            p.series,
            if bw.is_nan() { "-".into() } else { format!("{bw}") },
            pct(Some(gpu_hit(s))),
            pct(Some(cpu_hit(s))),
            s3(s.ttft_p90),
            s3(s.e2e_p90),
            s.offload.as_ref().map_or(0, |k| k.offload_loads),
            s.preemptions,
        );
    }
    o
}
