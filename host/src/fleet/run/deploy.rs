//! The `--json` keys of the deployment features (docs/MODEL.md, "SLO goodput" and "Metrics
//! (offload tier)"): each group present only when its feature is on, so a run without them
//! writes what it always wrote.

use brokerlab_core::fleet::slo::Slo;
use brokerlab_core::fleet::stats::REPORTED_PERCENTILES;
use brokerlab_core::fleet::{BatchedConfig, BatchedFleet, BatchedStats};
use serde::Serialize;

/// SLO goodput of a run (any engine), with an SLO flag given.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct SloKeys {
    /// `--slo-ttft-ms` (null when not given).
    pub slo_ttft_ms: Option<f64>,
    /// `--slo-tpot-ms` (null when not given).
    pub slo_tpot_ms: Option<f64>,
    /// Requests meeting every SLO given.
    pub slo_good_requests: u64,
    /// slo_good_requests / requests (null without requests).
    pub slo_attainment: Option<f64>,
    /// slo_good_requests / makespan, requests per second (null for a zero makespan).
    pub goodput_req_per_s: Option<f64>,
}

impl SloKeys {
    /// The keys of `slo` with `good` of `requests` requests good over `makespan_ns`.
    pub fn of(slo: &Slo, good: u64, requests: u64, makespan_ns: u64) -> Self {
        SloKeys {
            slo_ttft_ms: slo.ttft_ns.map(|n| n as f64 / 1e6),
            slo_tpot_ms: slo.tpot_ns.map(|n| n as f64 / 1e6),
            slo_good_requests: good,
            slo_attainment: (requests > 0).then(|| good as f64 / requests as f64),
            goodput_req_per_s: (makespan_ns > 0).then(|| good as f64 / (makespan_ns as f64 / 1e9)),
        }
    }
}

/// The offload tier of a batched run (with `--cpu-capacity` > 0).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct OffloadKeys {
    /// C2, blocks per pod.
    pub cpu_capacity: u32,
    /// Host-to-device link of a pod, bytes/s.
    pub pcie_bytes_per_s: u64,
    /// Per load, ns.
    pub pcie_latency_ns: u64,
    /// Weight of a CPU-tier block in the prefix-aware match.
    pub cpu_tier_weight: f64,
    /// KV bytes of one token of a pod (with P/D: among P/D's keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_bytes_per_token: Option<u64>,
    /// Sum of first-admission CPU hits, tokens.
    pub offload_hit_tokens: u64,
    /// offload_hit_tokens / the prompt tokens of the requests admitted (as `hit_rate`).
    pub offload_hit_rate: Option<f64>,
    /// Loads issued (re-admissions included).
    pub offload_loads: u64,
    /// Blocks loaded.
    pub offload_load_blocks: u64,
    /// Keys inserted into the tiers.
    pub offload_stored_blocks: u64,
    /// Loads per pod.
    pub per_pod_offload_loads: Vec<u64>,
}

impl OffloadKeys {
    /// The keys of engine `e` over its pods' `stats` (None without a tier); `input_tokens`: the
    /// prompt tokens of the requests admitted (the rate's population).
    pub fn of(e: &BatchedConfig, stats: &[BatchedStats], input_tokens: u64) -> Option<Self> {
        let o = &e.offload;
        if !o.is_on() {
            return None;
        }
        let sum = |f: &dyn Fn(&BatchedStats) -> u64| stats.iter().map(f).sum::<u64>();
        let hit = sum(&|s| s.offload_hit_tokens);
        Some(OffloadKeys {
            cpu_capacity: o.cpu_capacity,
            pcie_bytes_per_s: o.pcie_bytes_per_s,
            pcie_latency_ns: o.pcie_latency_ns,
            cpu_tier_weight: o.cpu_tier_weight_milli as f64 / 1000.0,
            kv_bytes_per_token: e.pd.is_none().then_some(o.kv_bytes_per_token),
            offload_hit_tokens: hit,
            offload_hit_rate: (input_tokens > 0).then(|| hit as f64 / input_tokens as f64),
            offload_loads: sum(&|s| s.offload_loads),
            offload_load_blocks: sum(&|s| s.offload_load_blocks),
            offload_stored_blocks: sum(&|s| s.offload_stored_blocks),
            per_pod_offload_loads: stats.iter().map(|s| s.offload_loads).collect(),
        })
    }
}

/// Prefill/decode disaggregation of a batched run (with `--prefill-pods` > 0).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct PdKeys {
    /// NP.
    pub prefill_pods: u32,
    /// N - NP.
    pub decode_pods: u32,
    /// C_P.
    pub prefill_capacity: usize,
    /// The decider.
    pub pd_decider: String,
    /// N_T.
    pub pd_threshold_tokens: u64,
    /// Each decode pod's incoming link, bytes/s.
    pub pd_link_bytes_per_s: u64,
    /// Per transfer, ns.
    pub pd_link_latency_ns: u64,
    /// KV bytes of one token of a pod.
    pub kv_bytes_per_token: u64,
    /// Requests prefilled remotely.
    pub disaggregated: u64,
    /// Their transfer bytes, summed.
    pub transfer_bytes: u64,
    /// transfer_ns (delivery - end of the prefill) p50 by nearest rank, over them.
    pub transfer_ns_p50: Option<u64>,
    /// p90.
    pub transfer_ns_p90: Option<u64>,
    /// p99.
    pub transfer_ns_p99: Option<u64>,
    /// Largest.
    pub transfer_ns_max: Option<u64>,
}

impl PdKeys {
    /// The keys of engine `e` with the disaggregated requests' `transfer_ns` (reordered) and
    /// `transfer_bytes` (None without P/D).
    pub fn of(e: &BatchedConfig, pods: usize, transfer_ns: &mut [u64], transfer_bytes: u64) -> Option<Self> {
        let pd = e.pd?;
        let [p50, p90, p99] = super::summary::exact_percentiles(transfer_ns);
        debug_assert_eq!(REPORTED_PERCENTILES.len(), 3);
        Some(PdKeys {
            prefill_pods: pd.prefill_pods,
            decode_pods: pods as u32 - pd.prefill_pods,
            prefill_capacity: pd.prefill_capacity_blocks,
            pd_decider: pd.decider.name().into(),
            pd_threshold_tokens: pd.threshold_tokens,
            pd_link_bytes_per_s: pd.link_bytes_per_s,
            pd_link_latency_ns: pd.link_latency_ns,
            kv_bytes_per_token: e.offload.kv_bytes_per_token,
            disaggregated: transfer_ns.len() as u64,
            transfer_bytes,
            transfer_ns_p50: p50,
            transfer_ns_p90: p90,
            transfer_ns_p99: p99,
            transfer_ns_max: transfer_ns.iter().copied().max(),
        })
    }
}

/// The engine whose offload-tier keys a run reports: the fleet's, or with pools where the fleet
/// has no tier, the first pod with one (so a tier set on a pool alone is reported).
pub fn tier_engine(fleet: &BatchedFleet<'_>) -> BatchedConfig {
    let e = *fleet.engine_config();
    if e.offload.is_on() || fleet.config().pools.is_empty() {
        return e;
    }
    fleet.pods().iter().map(|p| *p.config()).find(|c| c.offload.is_on()).map_or(e, |c| BatchedConfig { pd: e.pd, ..c })
}

/// One pool of a heterogeneous fleet in `--json` (`per_pool`; docs/MODEL.md, "Heterogeneous
/// pools").
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct PoolKeys {
    /// Its name.
    pub name: String,
    /// aggregated, prefill or decode.
    pub role: String,
    /// Pods.
    pub pods: u32,
    /// Its first pod's global index.
    pub first_pod: usize,
    /// KV blocks per pod.
    pub capacity: usize,
    /// Step-cost profile.
    pub profile: String,
    /// S.
    pub max_num_seqs: u32,
    /// M.
    pub max_num_batched_tokens: u32,
    /// CPU-tier blocks per pod.
    pub cpu_capacity: u32,
    /// Requests routed to its pods (a prefill pool's: prefill jobs).
    pub requests: u64,
    /// Requests it decoded (finished on its pods).
    pub decoded: u64,
    /// TTFT of the requests it decoded, p50 (s; null without).
    pub ttft_p50: Option<f64>,
    /// p90.
    pub ttft_p90: Option<f64>,
    /// p99.
    pub ttft_p99: Option<f64>,
    /// E2E of the requests it decoded, p50 (s; null without).
    pub e2e_p50: Option<f64>,
    /// p90.
    pub e2e_p90: Option<f64>,
    /// p99.
    pub e2e_p99: Option<f64>,
    /// Engine steps of its pods.
    pub steps: u64,
    /// Preemptions on its pods.
    pub preemptions: u64,
    /// Mean of its pods' time-weighted KV utilization (each over its own capacity).
    pub kv_util_mean: Option<f64>,
    /// Max of its pods' peaks.
    pub kv_util_peak: f64,
}

impl PoolKeys {
    /// The pools of `fleet` over the run's `samples` (None without pools). Reads the samples in
    /// their collection order (call before the fleet's percentiles reorder them).
    pub fn of(fleet: &BatchedFleet<'_>, samples: &super::collect::Samples) -> Option<Vec<Self>> {
        use super::summary::{exact_percentiles, secs};
        let cfg = fleet.config();
        if cfg.pools.is_empty() {
            return None;
        }
        let pod_of = samples.pods.as_deref().unwrap_or_default();
        let makespan = fleet.makespan_ns();
        let mut out = Vec::with_capacity(cfg.pools.len());
        let mut first = 0usize;
        for pool in cfg.pools {
            let range = first..first + pool.pods as usize;
            first = range.end;
            let mine = |v: &[u64]| -> Vec<u64> {
                pod_of.iter().zip(v).filter(|(p, _)| range.contains(&(**p as usize))).map(|(_, &x)| x).collect()
            };
            let (mut ttft, mut e2e) = (mine(&samples.ttft), mine(&samples.e2e));
            let decoded = ttft.len() as u64;
            let [t50, t90, t99] = exact_percentiles(&mut ttft);
            let [e50, e90, e99] = exact_percentiles(&mut e2e);
            let pods = &fleet.pods()[range.clone()];
            let stats: Vec<BatchedStats> = pods.iter().map(|p| *brokerlab_core::fleet::Engine::stats(p)).collect();
            let e = *pods[0].config();
            let c = pods[0].capacity();
            let kv_mean: Vec<f64> =
                stats.iter().map(|s| s.kv_pinned_block_ns as f64 / (c as f64 * makespan as f64)).collect();
            out.push(PoolKeys {
                name: pool.name.to_string(),
                role: pool.role.name().to_string(),
                pods: pool.pods,
                first_pod: range.start,
                capacity: c,
                profile: e.profile.name().into(),
                max_num_seqs: e.max_num_seqs,
                max_num_batched_tokens: e.max_num_batched_tokens,
                cpu_capacity: e.offload.cpu_capacity,
                requests: stats.iter().map(|s| s.requests).sum(),
                decoded,
                ttft_p50: t50.map(secs),
                ttft_p90: t90.map(secs),
                ttft_p99: t99.map(secs),
                e2e_p50: e50.map(secs),
                e2e_p90: e90.map(secs),
                e2e_p99: e99.map(secs),
                steps: stats.iter().map(|s| s.steps).sum(),
                preemptions: stats.iter().map(|s| s.preemptions).sum(),
                kv_util_mean: (makespan > 0).then(|| kv_mean.iter().sum::<f64>() / kv_mean.len() as f64),
                kv_util_peak: stats.iter().map(|s| s.kv_peak_blocks as f64 / c as f64).fold(0.0, f64::max),
            });
        }
        Some(out)
    }
}
