//! What a run reports: one summary type, [`RunSummary`], whose variant is the engine's own part
//! ([`Summary`] of the FIFO engine, [`BatchedSummary`] of the batched engine: the JSON object of
//! `fleet replay --json`), built from the fleet's counters and the run's exact samples; and the
//! readable table of each.

use brokerlab_core::fleet::limits::BLOCK_TOKENS;
use brokerlab_core::fleet::stats::{REPORTED_PERCENTILES, nearest_rank_index};
use brokerlab_core::fleet::{BatchedFleet, BatchedStats, CacheMode, FifoFleet};
use serde::Serialize;

use super::collect::Samples;

/// Headline metrics of one run (the JSON object of `fleet replay --json`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Summary {
    /// Router name.
    pub router: brokerlab_core::fleet::RouterKind,
    /// Pods N.
    pub pods: usize,
    /// Blocks per pod C.
    pub capacity: usize,
    /// Load penalty.
    pub alpha: f64,
    /// Stale-evict delay k.
    pub stale: u32,
    /// Touch order.
    pub order: brokerlab_core::fleet::TouchOrder,
    /// ns per prefill token.
    pub t_prefill_ns: u64,
    /// ns per output token.
    pub t_decode_ns: u64,
    /// Requests.
    pub requests: u64,
    /// Sum of L.
    pub input_tokens: u64,
    /// Sum of O.
    pub output_tokens: u64,
    /// Sum of hit tokens.
    pub hit_tokens: u64,
    /// CPU-tier blocks per pod (0: no CPU tier).
    pub cpu_capacity: usize,
    /// Sum of tokens loaded from the CPU tier.
    pub cpu_hit_tokens: u64,
    /// cpu_hit_tokens / input_tokens.
    pub cpu_hit_rate: Option<f64>,
    /// Sum of prefill tokens.
    pub prefill_tokens: u64,
    /// hit_tokens / input_tokens (null without input).
    pub hit_rate: Option<f64>,
    /// Latency p50, s (null without requests).
    pub latency_p50: Option<f64>,
    /// Latency p90, s.
    pub latency_p90: Option<f64>,
    /// Latency p99, s.
    pub latency_p99: Option<f64>,
    /// Mean latency, s.
    pub latency_mean: Option<f64>,
    /// Latency p90 in integer ns (exact).
    pub latency_ns_p90: Option<u64>,
    /// Requests per pod.
    pub per_pod_requests: Vec<u64>,
    /// Hit rate per pod.
    pub per_pod_hit_rate: Vec<Option<f64>>,
    /// Longest queue seen per pod.
    pub per_pod_max_queue: Vec<u32>,
    /// Requests where the router believed in more cached blocks than the pod had.
    pub chased_requests: u64,
    /// Believed-but-gone blocks, summed.
    pub phantom_blocks: u64,
    /// Finish time of the last request, s.
    pub makespan_s: f64,
    /// Autoscaling figures (null without autoscaling).
    pub autoscale: Option<AutoscaleSummary>,
    /// `"global"` with `--cache global` (one shared pool of pods x capacity blocks); absent for
    /// per-pod caches, so the default output is unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheMode>,
    /// With `--router-config`: the resolved router in one line (`router` alone says `custom`
    /// for any pipeline); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// SLO goodput (absent without an SLO flag).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<super::deploy::SloKeys>,
}

/// What the autoscaler did (docs/MODEL.md, "Autoscaling").
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct AutoscaleSummary {
    /// Fewest routable pods.
    pub min_pods: u32,
    /// Routable pods at the start.
    pub initial_pods: u32,
    /// Pods booted.
    pub scale_outs: u64,
    /// Pods dropped.
    pub scale_ins: u64,
    /// Most routable pods at any arrival.
    pub max_active_pods: u32,
    /// Provisioned pod-time until the last finish, pod-seconds (the cost).
    pub pod_seconds: f64,
    /// pod_seconds / makespan: the time-averaged fleet size.
    pub mean_pods: Option<f64>,
    /// Requests routed while added pods were routable.
    pub scaled_out_requests: u64,
    /// Of those, requests routed to added pods.
    pub new_pod_requests: u64,
    /// new_pod_requests / their fair share (1: spread like round-robin; below 1: the router
    /// keeps traffic on the warm pods). Fair share rounded down to 1/1000 per request.
    pub new_pod_traffic_ratio: Option<f64>,
}

/// The physics step cost of a batched run (docs/MODEL.md, "The physics step cost").
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct PhysicsPart {
    /// Always "physics".
    pub step_model: String,
    /// Tensor-parallel GPUs per pod.
    pub tp: u32,
    /// Model parameters.
    pub params: u64,
    /// Weight bytes per GPU.
    pub weight_bytes_per_gpu: u64,
    /// KV bytes of one token on one GPU.
    pub kv_bytes_per_token_gpu: u64,
    /// The KV capacity per pod the profile derives (vLLM's rule), blocks; the run's capacity is
    /// this unless --capacity (or the scenario's `capacity`) set it.
    pub kv_capacity_blocks_derived: Option<u64>,
    /// Calibration: achieved fraction of the GEMM peak, ppm.
    pub compute_ppm: u32,
    /// Of the GEMM peak on routed experts, ppm.
    pub moe_ppm: u32,
    /// Of the bf16 peak in attention, ppm.
    pub attention_ppm: u32,
    /// Of the HBM bandwidth, ppm.
    pub memory_ppm: u32,
    /// Of the TP link, ppm.
    pub link_ppm: u32,
    /// Per step, ns.
    pub step_ns: u64,
    /// Per request in a step, ns.
    pub request_ns: u64,
    /// Per layer per step, ns.
    pub layer_ns: u64,
    /// Per all-reduce, ns.
    pub allreduce_ns: u64,
    /// The shared-prefix read factor, ppm, when set below 1,000,000 (absent: off;
    /// docs/MODEL.md "Shared-prefix reads").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_kv_read_ppm: Option<u32>,
}

impl PhysicsPart {
    /// The part of a physics profile.
    pub fn of(p: &brokerlab_core::fleet::Physics) -> Self {
        let c = p.calibration();
        PhysicsPart {
            step_model: "physics".into(),
            tp: p.tp(),
            params: p.model().params() as u64,
            weight_bytes_per_gpu: p.weight_bytes_per_gpu(),
            kv_bytes_per_token_gpu: p.kv_bytes_per_token_gpu(),
            kv_capacity_blocks_derived: p.kv_capacity_blocks().ok(),
            compute_ppm: c.compute_ppm,
            moe_ppm: c.moe_ppm,
            attention_ppm: c.attention_ppm,
            memory_ppm: c.memory_ppm,
            link_ppm: c.link_ppm,
            step_ns: c.step_ns,
            request_ns: c.request_ns,
            layer_ns: c.layer_ns,
            allreduce_ns: c.allreduce_ns,
            shared_kv_read_ppm: p.shares_kv_reads().then_some(c.shared_kv_read_ppm),
        }
    }
}

/// Which engine a result came from, as outputs spell it (`fifo`, `batched`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// FIFO single servers.
    Fifo,
    /// vLLM-style continuous batching.
    Batched,
}

impl EngineKind {
    /// Its spelling in outputs.
    pub const fn name(self) -> &'static str {
        match self {
            EngineKind::Fifo => "fifo",
            EngineKind::Batched => "batched",
        }
    }
}

/// The batched engine's summary (docs/MODEL.md, "Metrics of the batched engine").
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct BatchedSummary {
    /// Always [`EngineKind::Batched`].
    pub engine: EngineKind,
    /// Router.
    pub router: brokerlab_core::fleet::RouterKind,
    /// Pods N.
    pub pods: usize,
    /// Blocks per pod C.
    pub capacity: usize,
    /// Load penalty.
    pub alpha: f64,
    /// S.
    pub max_num_seqs: u32,
    /// M.
    pub max_num_batched_tokens: u32,
    /// Profile the coefficients started from (a linear or a physics profile's name, `file` for
    /// a physics profile file).
    pub profile: String,
    /// The physics step cost, when it ran (absent: the linear one, whose coefficients follow;
    /// a linear run's JSON is what it was before the physics model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physics: Option<PhysicsPart>,
    /// Linear: step overhead, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_overhead_ns: Option<u64>,
    /// Linear: per prefill token, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_prefill_token_ns: Option<u64>,
    /// Linear: per decoding request, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_decode_seq_ns: Option<u64>,
    /// Linear: per context token, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_kv_token_ns: Option<u64>,
    /// Requests.
    pub requests: u64,
    /// Sum of L.
    pub input_tokens: u64,
    /// Sum of O' = max(O, 1).
    pub output_tokens: u64,
    /// First-admission hits of the requests admitted (aborted ones included).
    pub hit_tokens: u64,
    /// hit_tokens / the prompt tokens of the requests admitted (docs/MODEL.md, "Metrics of the
    /// batched engine"; equal to hit_tokens / input_tokens unless a request was aborted before
    /// its admission).
    pub hit_rate: Option<f64>,
    /// Prefill tokens computed (recompute included).
    pub prefill_tokens: u64,
    /// TTFT p50, s.
    pub ttft_p50: Option<f64>,
    /// TTFT p90, s.
    pub ttft_p90: Option<f64>,
    /// TTFT p99, s.
    pub ttft_p99: Option<f64>,
    /// Mean TTFT, s.
    pub ttft_mean: Option<f64>,
    /// TTFT p90, ns.
    pub ttft_ns_p90: Option<u64>,
    /// E2E p50, s.
    pub e2e_p50: Option<f64>,
    /// E2E p90, s.
    pub e2e_p90: Option<f64>,
    /// E2E p99, s.
    pub e2e_p99: Option<f64>,
    /// Mean E2E, s.
    pub e2e_mean: Option<f64>,
    /// E2E p90, ns.
    pub e2e_ns_p90: Option<u64>,
    /// = e2e_p50 (the FIFO key's meaning: finish - arrival).
    pub latency_p50: Option<f64>,
    /// = e2e_p90.
    pub latency_p90: Option<f64>,
    /// = e2e_p99.
    pub latency_p99: Option<f64>,
    /// = e2e_mean.
    pub latency_mean: Option<f64>,
    /// = e2e_ns_p90.
    pub latency_ns_p90: Option<u64>,
    /// ITL p50, s.
    pub itl_p50: Option<f64>,
    /// ITL p90, s.
    pub itl_p90: Option<f64>,
    /// ITL p99, s.
    pub itl_p99: Option<f64>,
    /// ITL p90, ns.
    pub itl_ns_p90: Option<u64>,
    /// ITL samples (one per token after a request's first).
    pub itl_samples: u64,
    /// output_tokens / makespan.
    pub output_tok_per_s: Option<f64>,
    /// prefill_tokens / makespan.
    pub prefill_tok_per_s: Option<f64>,
    /// Preemptions.
    pub preemptions: u64,
    /// Per pod.
    pub per_pod_preemptions: Vec<u64>,
    /// Engine steps.
    pub steps: u64,
    /// Per pod.
    pub per_pod_steps: Vec<u64>,
    /// Mean of the pods' time-weighted KV utilization.
    pub kv_util_mean: Option<f64>,
    /// Max of the pods' peaks.
    pub kv_util_peak: f64,
    /// Per pod, time-weighted over [0, makespan].
    pub per_pod_kv_util_mean: Vec<Option<f64>>,
    /// Per pod, most pinned blocks / C.
    pub per_pod_kv_util_peak: Vec<f64>,
    /// Time-weighted mean waiting-queue length, averaged over pods.
    pub mean_waiting: Option<f64>,
    /// With scraped gauges (`metrics_scrape_ms` > 0): the mean over the routing decisions and the
    /// routable pods of the waiting count the router read, as GIE's EPP logs it at each
    /// scheduling cycle (docs/MODEL.md, "The waiting queue at the router's decisions"). Absent
    /// otherwise and without a decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_waiting_routed: Option<f64>,
    /// Requests per pod.
    pub per_pod_requests: Vec<u64>,
    /// Longest queue_len at an arrival, per pod.
    pub per_pod_max_queue: Vec<u32>,
    /// Heterogeneous pools: one entry per pool, in pod order (absent without pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_pool: Option<Vec<super::deploy::PoolKeys>>,
    /// Last finish, s.
    pub makespan_s: f64,
    /// With `--router-config`: the resolved router in one line; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// Prefill/decode disaggregation's keys (absent without it).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub pd: Option<super::deploy::PdKeys>,
    /// The offload tier's keys (absent without a tier).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<super::deploy::OffloadKeys>,
    /// SLO goodput (absent without an SLO flag).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<super::deploy::SloKeys>,
    /// Autoscaling by the WVA saturation rule (absent without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<BatchedAutoscale>,
}

/// What the batched engine's autoscaler did (docs/MODEL.md, "Autoscaling under the batched
/// engine").
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct BatchedAutoscale {
    /// Always "wva-saturation".
    pub policy: String,
    /// The counts, cost and traffic ratio, as the FIFO scaler's.
    #[serde(flatten)]
    pub totals: AutoscaleSummary,
    /// Evaluation period, s.
    pub interval_s: f64,
    /// Peak window, s.
    pub window_s: f64,
    /// Boot time, s.
    pub startup_s: f64,
    /// kvCacheThreshold.
    pub kv_threshold: f64,
    /// queueLengthThreshold.
    pub queue_threshold: f64,
    /// kvSpareTrigger.
    pub kv_spare: f64,
    /// queueSpareTrigger.
    pub queue_spare: f64,
    /// Routable pods over time: [s, pods] at 0 and at every instant the count changed, the count
    /// after all of that instant's events ([`pods_over_time`]).
    pub pods_over_time: Vec<(f64, u32)>,
    /// Every event: out (boot decided), ready (routable), in (scale-in decided, drain starts),
    /// drained (last request finished, cache dropped).
    pub events: Vec<ScaleEventJson>,
}

/// One autoscaling event in the JSON.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct ScaleEventJson {
    /// When, s.
    pub t_s: f64,
    /// out | ready | in | drained.
    pub kind: String,
    /// The pod.
    pub pod: u32,
    /// Routable pods after it.
    pub active: u32,
}

impl BatchedAutoscale {
    fn of(fleet: &BatchedFleet<'_>, events: &[brokerlab_core::fleet::ScaleEvent]) -> Option<Self> {
        use brokerlab_core::fleet::ScaleEventKind as K;
        let cfg = fleet.config();
        let e = cfg.batched_config()?;
        let policy = e.scale?;
        let t = fleet.totals();
        let makespan = fleet.makespan_ns();
        let pods_over_time = pods_over_time(policy.initial_pods, events);
        let kind = |k: K| match k {
            K::Out => "out",
            K::Ready => "ready",
            K::In => "in",
            K::Drained => "drained",
        };
        Some(BatchedAutoscale {
            policy: "wva-saturation".into(),
            totals: AutoscaleSummary {
                min_pods: policy.min_pods,
                initial_pods: policy.initial_pods,
                scale_outs: t.scale_outs,
                scale_ins: t.scale_ins,
                max_active_pods: t.max_active_pods,
                pod_seconds: secs(fleet.pod_ns(makespan)),
                mean_pods: ratio(fleet.pod_ns(makespan), makespan),
                scaled_out_requests: t.scaled_out_requests,
                new_pod_requests: t.new_pod_requests,
                new_pod_traffic_ratio: ratio(t.new_pod_requests * 1000, t.fair_new_pod_milli),
            },
            interval_s: secs(policy.interval_ns),
            window_s: secs(e.wva.window_ns),
            startup_s: secs(policy.startup_ns),
            kv_threshold: e.wva.kv_threshold_ppm as f64 / 1e6,
            queue_threshold: e.wva.queue_threshold_milli as f64 / 1e3,
            kv_spare: e.wva.kv_spare_ppm as f64 / 1e6,
            queue_spare: e.wva.queue_spare_milli as f64 / 1e3,
            pods_over_time,
            events: events
                .iter()
                .map(|ev| ScaleEventJson {
                    t_s: secs(ev.t_ns),
                    kind: kind(ev.kind).into(),
                    pod: ev.pod,
                    active: ev.active,
                })
                .collect(),
        })
    }
}

/// Routable pods over time from the scaler's events: [s, pods] at 0 and at each instant the
/// count changed, the count after every event of that instant. A pod that came up and was scaled
/// in at one arrival (its first evaluation saw it idle) was routable for no request, so it is no
/// step of the curve, as it is not counted by `max_active_pods` (routable pods at an arrival,
/// after the scaler ran): the steps' maximum is `max_active_pods` (the `events` keep the pair).
pub fn pods_over_time(initial: u32, events: &[brokerlab_core::fleet::ScaleEvent]) -> Vec<(f64, u32)> {
    use brokerlab_core::fleet::ScaleEventKind as K;
    let mut steps: Vec<(u64, u32)> = vec![(0, initial)];
    for ev in events.iter().filter(|ev| matches!(ev.kind, K::Ready | K::In)) {
        match steps.last_mut() {
            Some(last) if last.0 == ev.t_ns => last.1 = ev.active,
            _ => steps.push((ev.t_ns, ev.active)),
        }
    }
    // an instant whose events left the count as it was is no change
    steps.dedup_by_key(|s| s.1);
    steps.into_iter().map(|(t, n)| (secs(t), n)).collect()
}

/// A run's summary: the engine's own part (serialized as that part alone, so the JSON of each
/// engine is what it always was).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
#[serde(untagged)]
pub enum RunSummary {
    /// The batched engine's (its JSON has `"engine": "batched"`; tried first when reading).
    Batched(Box<BatchedSummary>),
    /// The FIFO engine's.
    Fifo(Box<Summary>),
}

impl RunSummary {
    /// The router.
    pub fn router(&self) -> brokerlab_core::fleet::RouterKind {
        match self {
            RunSummary::Fifo(s) => s.router,
            RunSummary::Batched(s) => s.router,
        }
    }

    /// The FIFO engine's part.
    pub fn fifo(&self) -> Option<&Summary> {
        match self {
            RunSummary::Fifo(s) => Some(s),
            RunSummary::Batched(_) => None,
        }
    }

    /// The batched engine's part.
    pub fn batched(&self) -> Option<&BatchedSummary> {
        match self {
            RunSummary::Batched(s) => Some(s),
            RunSummary::Fifo(_) => None,
        }
    }

    /// The resolved router in one line (`--router-config`), shown instead of the router's name.
    pub fn set_pipeline(&mut self, pipeline: Option<String>) {
        match self {
            RunSummary::Fifo(s) => s.pipeline = pipeline,
            RunSummary::Batched(s) => s.pipeline = pipeline,
        }
    }

    /// The readable table.
    pub fn render(&self) -> String {
        match self {
            RunSummary::Fifo(s) => render_table(s),
            RunSummary::Batched(s) => render_batched(s),
        }
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.digits$}"))
}

/// Seconds from integer ns (reporting only; all model arithmetic is in integer ns).
pub fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// The nearest-rank [`REPORTED_PERCENTILES`] of `values` (reordered): the same values a full sort
/// gives, by selection in O(n) instead of an O(n log n) sort.
pub fn exact_percentiles(values: &mut [u64]) -> [Option<u64>; 3] {
    let ranks = REPORTED_PERCENTILES.map(|(num, den)| nearest_rank_index(values.len(), num, den));
    debug_assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "percentiles in increasing order");
    // Each selection leaves everything after the chosen index at least as large: the next
    // (higher) rank is selected in that tail only.
    let mut start = 0;
    ranks.map(|rank| {
        let i = rank?;
        if i >= start {
            values[start..].select_nth_unstable(i - start);
            start = i;
        }
        Some(values[i])
    })
}

/// Nearest-rank percentiles of (value, count) pairs.
fn weighted_pcts(pairs: &mut [(u64, u64)]) -> ([Option<u64>; 3], u64) {
    pairs.sort_unstable();
    let total: u64 = pairs.iter().map(|p| p.1).sum();
    let out = REPORTED_PERCENTILES.map(|(num, den)| {
        let idx = nearest_rank_index(total as usize, num, den)? as u64;
        let mut seen = 0;
        pairs
            .iter()
            .find(|p| {
                seen += p.1;
                seen > idx
            })
            .map(|p| p.0)
    });
    (out, total)
}

fn mean(v: &[u64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().map(|&x| x as u128).sum::<u128>() as f64 / v.len() as f64 / 1e9)
}

fn per_s(n: u64, ns: u64) -> Option<f64> {
    (ns > 0).then(|| n as f64 / secs(ns))
}

/// Builds the summary of a finished run; `latencies` in ns, any order.
pub fn summarize_fifo(fleet: &FifoFleet<'_>, mut latencies: Vec<u64>) -> Summary {
    let cfg = fleet.config();
    let f = fleet.engine_config();
    let view = cfg.view();
    let t = fleet.totals();
    let [p50, p90, p99] = exact_percentiles(&mut latencies);
    let pods: Vec<_> = (0..cfg.pods).filter_map(|p| fleet.pod_stats(p).copied()).collect();
    Summary {
        router: cfg.router,
        pods: cfg.pods,
        capacity: cfg.capacity_blocks,
        alpha: cfg.alpha,
        stale: view.stale_delay,
        order: f.order,
        t_prefill_ns: f.t_prefill_ns,
        t_decode_ns: f.t_decode_ns,
        requests: t.requests,
        input_tokens: t.input_tokens,
        output_tokens: t.output_tokens,
        hit_tokens: t.hit_tokens,
        cpu_capacity: f.cpu_capacity_blocks,
        cpu_hit_tokens: t.cpu_hit_tokens,
        cpu_hit_rate: ratio(t.cpu_hit_tokens, t.input_tokens),
        prefill_tokens: t.prefill_tokens,
        hit_rate: ratio(t.hit_tokens, t.input_tokens),
        latency_p50: p50.map(secs),
        latency_p90: p90.map(secs),
        latency_p99: p99.map(secs),
        latency_mean: (t.requests > 0).then(|| t.latency_ns_sum as f64 / t.requests as f64 / 1e9),
        latency_ns_p90: p90,
        per_pod_requests: pods.iter().map(|s| s.requests).collect(),
        per_pod_hit_rate: pods.iter().map(|s| ratio(s.hit_tokens, s.input_tokens)).collect(),
        per_pod_max_queue: pods.iter().map(|s| s.max_queue_len).collect(),
        chased_requests: t.chased_requests,
        phantom_blocks: t.phantom_blocks,
        makespan_s: secs(t.makespan_ns),
        autoscale: cfg.scale().map(|policy| AutoscaleSummary {
            min_pods: policy.min_pods,
            initial_pods: policy.initial_pods,
            scale_outs: t.scale_outs,
            scale_ins: t.scale_ins,
            max_active_pods: t.max_active_pods,
            pod_seconds: secs(fleet.pod_ns(t.makespan_ns)),
            mean_pods: ratio(fleet.pod_ns(t.makespan_ns), t.makespan_ns),
            scaled_out_requests: t.scaled_out_requests,
            new_pod_requests: t.new_pod_requests,
            new_pod_traffic_ratio: ratio(t.new_pod_requests * 1000, t.fair_new_pod_milli),
        }),
        cache: (f.cache != CacheMode::Local).then_some(f.cache),
        pipeline: None,
        slo: None,
    }
}

/// Builds the summary of a finished batched run from what `samples` collected.
pub fn summarize_batched(fleet: &BatchedFleet<'_>, samples: &mut Samples) -> BatchedSummary {
    let cfg = fleet.config();
    let e = fleet.engine_config();
    let linear = e.cost.linear();
    // (per pool first: the fleet's percentiles reorder the samples)
    let per_pool = super::deploy::PoolKeys::of(fleet, samples);
    let [t50, t90, t99] = exact_percentiles(&mut samples.ttft);
    let [e50, e90, e99] = exact_percentiles(&mut samples.e2e);
    let ([i50, i90, i99], itl_samples) = weighted_pcts(&mut samples.itl);
    let stats: Vec<_> = (0..cfg.pods).filter_map(|p| fleet.pod_stats(p).copied()).collect();
    let makespan = fleet.makespan_ns();
    let sum = |f: &dyn Fn(&BatchedStats) -> u64| stats.iter().map(f).sum::<u64>();
    // each pod over its own capacity (P/D: a prefill pod's is C_P)
    let caps: Vec<f64> = fleet.pods().iter().map(|e| e.capacity() as f64).collect();
    let kv_mean: Vec<Option<f64>> = stats
        .iter()
        .zip(&caps)
        .map(|(s, &c)| (makespan > 0).then(|| s.kv_pinned_block_ns as f64 / (c * makespan as f64)))
        .collect();
    let kv_peak: Vec<f64> = stats.iter().zip(&caps).map(|(s, &c)| s.kv_peak_blocks as f64 / c).collect();
    let waiting = (makespan > 0)
        .then(|| stats.iter().map(|s| s.waiting_request_ns as f64 / makespan as f64).sum::<f64>() / stats.len() as f64);
    let input_tokens = sum(&|s| s.input_tokens);
    let output_tokens = sum(&|s| s.output_tokens);
    let prefill_tokens = sum(&|s| s.prefill_tokens);
    // The hit rate's population: the requests admitted (each counted once, at its first
    // admission, with the hit it looked up there), aborted ones included; a request aborted
    // before its admission looked nothing up and is in neither sum. Without aborts this is
    // every request (the completions' hits over all prompt tokens).
    let hit_tokens = sum(&|s| s.hit_tokens);
    let admitted_input = sum(&|s| s.admitted_input_tokens);
    let e2e_mean = mean(&samples.e2e);
    BatchedSummary {
        engine: EngineKind::Batched,
        router: cfg.router,
        pods: cfg.pods,
        capacity: cfg.capacity_blocks,
        alpha: cfg.alpha,
        max_num_seqs: e.max_num_seqs,
        max_num_batched_tokens: e.max_num_batched_tokens,
        profile: e.profile.name().into(),
        physics: e.cost.physics().map(PhysicsPart::of),
        t_overhead_ns: linear.map(|l| l.t_overhead_ns),
        t_prefill_token_ns: linear.map(|l| l.t_prefill_token_ns),
        t_decode_seq_ns: linear.map(|l| l.t_decode_seq_ns),
        t_kv_token_ns: linear.map(|l| l.t_kv_token_ns),
        // P/D: a prefill pod's requests are prefill jobs; every request has one decode pick
        requests: stats[e.pd.map_or(0, |p| p.prefill_pods as usize)..].iter().map(|s| s.requests).sum(),
        input_tokens,
        output_tokens,
        hit_tokens,
        hit_rate: (admitted_input > 0).then(|| hit_tokens as f64 / admitted_input as f64),
        prefill_tokens,
        ttft_p50: t50.map(secs),
        ttft_p90: t90.map(secs),
        ttft_p99: t99.map(secs),
        ttft_mean: mean(&samples.ttft),
        ttft_ns_p90: t90,
        e2e_p50: e50.map(secs),
        e2e_p90: e90.map(secs),
        e2e_p99: e99.map(secs),
        e2e_mean,
        e2e_ns_p90: e90,
        latency_p50: e50.map(secs),
        latency_p90: e90.map(secs),
        latency_p99: e99.map(secs),
        latency_mean: e2e_mean,
        latency_ns_p90: e90,
        itl_p50: i50.map(secs),
        itl_p90: i90.map(secs),
        itl_p99: i99.map(secs),
        itl_ns_p90: i90,
        itl_samples,
        output_tok_per_s: per_s(output_tokens, makespan),
        prefill_tok_per_s: per_s(prefill_tokens, makespan),
        preemptions: sum(&|s| s.preemptions),
        per_pod_preemptions: stats.iter().map(|s| s.preemptions).collect(),
        steps: sum(&|s| s.steps),
        per_pod_steps: stats.iter().map(|s| s.steps).collect(),
        kv_util_mean: (makespan > 0).then(|| kv_mean.iter().flatten().sum::<f64>() / stats.len() as f64),
        kv_util_peak: kv_peak.iter().copied().fold(0.0, f64::max),
        per_pod_kv_util_mean: kv_mean,
        per_pod_kv_util_peak: kv_peak,
        mean_waiting: waiting,
        mean_waiting_routed: (e.metrics_scrape_ns > 0 && fleet.totals().routed_waiting_samples > 0).then(|| {
            let t = fleet.totals();
            t.routed_waiting as f64 / t.routed_waiting_samples as f64
        }),
        per_pod_requests: stats.iter().map(|s| s.requests).collect(),
        per_pod_max_queue: stats.iter().map(|s| s.max_queue_len).collect(),
        per_pool,
        makespan_s: secs(makespan),
        pipeline: None,
        pd: super::deploy::PdKeys::of(e, cfg.pods, &mut samples.transfer_ns, samples.transfer_bytes),
        offload: super::deploy::OffloadKeys::of(&super::deploy::tier_engine(fleet), &stats, admitted_input),
        slo: samples.slo.map(|(s, good)| super::deploy::SloKeys::of(&s, good, fleet.totals().requests, makespan)),
        autoscale: BatchedAutoscale::of(fleet, &samples.scale_events),
    }
}

/// The readable table of `fleet replay`.
pub fn render_table(s: &Summary) -> String {
    let mut o = String::new();
    let mut line = |k: &str, v: String| o.push_str(&format!("{k:<22} {v}\n"));
    line("router", s.pipeline.clone().unwrap_or_else(|| s.router.to_string()));
    line(
        "pods x capacity",
        format!("{} x {} blocks ({} tokens per pod)", s.pods, s.capacity, s.capacity * BLOCK_TOKENS),
    );
    if let Some(c) = &s.cache {
        line("cache", format!("{c}: one pool of {} blocks every pod reads", s.pods * s.capacity));
    }
    line("alpha / stale / order", format!("{} / {} / {}", s.alpha, s.stale, s.order));
    line("t_prefill / t_decode", format!("{} ns / {} ns per token", s.t_prefill_ns, s.t_decode_ns));
    line("requests", s.requests.to_string());
    line("input tokens", s.input_tokens.to_string());
    line("hit tokens", s.hit_tokens.to_string());
    if s.cpu_capacity > 0 {
        line(
            "CPU tier",
            format!(
                "{} blocks per pod, {} tokens loaded ({} %)",
                s.cpu_capacity,
                s.cpu_hit_tokens,
                opt(s.cpu_hit_rate.map(|h| h * 100.0), 2)
            ),
        );
    }
    line("prefill tokens", s.prefill_tokens.to_string());
    line("hit rate", opt(s.hit_rate.map(|h| h * 100.0), 2) + " %");
    line(
        "latency p50/p90/p99",
        format!("{} / {} / {} s", opt(s.latency_p50, 4), opt(s.latency_p90, 4), opt(s.latency_p99, 4)),
    );
    if let Some(k) = &s.slo {
        line("SLO goodput", slo_line(k));
    }
    line("stale chases", format!("{} requests, {} phantom blocks", s.chased_requests, s.phantom_blocks));
    if let Some(a) = &s.autoscale {
        line(
            "autoscaling",
            format!(
                "{}..{} pods (start {}), {} out / {} in, at most {} routable",
                a.min_pods, s.pods, a.initial_pods, a.scale_outs, a.scale_ins, a.max_active_pods
            ),
        );
        line("pod-seconds", format!("{:.1} (mean {} pods)", a.pod_seconds, opt(a.mean_pods, 2)));
        line(
            "added pods' traffic",
            format!(
                "{} of {} requests while scaled out; {} x their fair share",
                a.new_pod_requests,
                a.scaled_out_requests,
                opt(a.new_pod_traffic_ratio, 2)
            ),
        );
    }
    o.push_str("\npod  requests  hit rate  max queue\n");
    for p in 0..s.pods {
        o.push_str(&format!(
            "{p:>3}  {:>8}  {:>8}  {:>9}\n",
            s.per_pod_requests[p],
            opt(s.per_pod_hit_rate[p].map(|h| h * 100.0), 2),
            s.per_pod_max_queue[p]
        ));
    }
    o
}
/// The SLO goodput line of a run's table (either engine).
fn slo_line(k: &super::deploy::SloKeys) -> String {
    let slo = |name: &str, v: Option<f64>| v.map(|ms| format!("{name} <= {ms} ms"));
    let given: Vec<String> = [slo("TTFT", k.slo_ttft_ms), slo("TPOT", k.slo_tpot_ms)].into_iter().flatten().collect();
    format!(
        "{} req/s ({} requests, {} %, meet {})",
        opt(k.goodput_req_per_s, 3),
        k.slo_good_requests,
        opt(k.slo_attainment.map(|a| a * 100.0), 2),
        given.join(" and ")
    )
}

/// The step-cost line of a batched run's table.
fn step_cost_line(s: &BatchedSummary) -> String {
    match (&s.physics, s.t_overhead_ns, s.t_prefill_token_ns, s.t_decode_seq_ns, s.t_kv_token_ns) {
        (Some(p), ..) => format!(
            "physics, profile {} (TP {}, {:.1} GB weights and {} KV bytes/token per GPU, derived capacity {} blocks; \
             compute {:.1}%, attention {:.1}%, memory {:.1}% of peak)",
            s.profile,
            p.tp,
            p.weight_bytes_per_gpu as f64 / 1e9,
            p.kv_bytes_per_token_gpu,
            p.kv_capacity_blocks_derived.map_or("none".into(), |b| b.to_string()),
            p.compute_ppm as f64 / 1e4,
            p.attention_ppm as f64 / 1e4,
            p.memory_ppm as f64 / 1e4
        ),
        (None, Some(o), Some(pt), Some(d), Some(k)) => {
            format!("{o} ns + {pt} ns/prefill token + {d} ns/decode + {k} ns/context token (profile {})", s.profile)
        }
        _ => format!("profile {}", s.profile),
    }
}

/// The readable table of a batched run.
pub fn render_batched(s: &BatchedSummary) -> String {
    let mut o = String::new();
    let mut line = |k: &str, v: String| o.push_str(&format!("{k:<22} {v}\n"));
    line("engine", "batched (vLLM-style continuous batching, simplified: docs/MODEL.md)".into());
    line("router", s.pipeline.clone().unwrap_or_else(|| s.router.to_string()));
    line(
        "pods x capacity",
        format!("{} x {} blocks ({} tokens per pod)", s.pods, s.capacity, s.capacity * BLOCK_TOKENS),
    );
    line("alpha", s.alpha.to_string());
    line("max seqs / tokens", format!("{} / {} per step", s.max_num_seqs, s.max_num_batched_tokens));
    line("step cost", step_cost_line(s));
    line("requests", s.requests.to_string());
    line("input / output tokens", format!("{} / {}", s.input_tokens, s.output_tokens));
    line("hit tokens", format!("{} ({} %)", s.hit_tokens, opt(s.hit_rate.map(|h| h * 100.0), 2)));
    line("prefill tokens", s.prefill_tokens.to_string());
    line("TTFT p50/p90/p99", format!("{} / {} / {} s", opt(s.ttft_p50, 4), opt(s.ttft_p90, 4), opt(s.ttft_p99, 4)));
    line("E2E p50/p90/p99", format!("{} / {} / {} s", opt(s.e2e_p50, 4), opt(s.e2e_p90, 4), opt(s.e2e_p99, 4)));
    line(
        "ITL p50/p90/p99",
        format!("{} / {} / {} s ({} samples)", opt(s.itl_p50, 4), opt(s.itl_p90, 4), opt(s.itl_p99, 4), s.itl_samples),
    );
    line("output / prefill tok/s", format!("{} / {}", opt(s.output_tok_per_s, 1), opt(s.prefill_tok_per_s, 1)));
    line(
        "KV utilization",
        format!(
            "mean {} %, peak {} %",
            opt(s.kv_util_mean.map(|v| v * 100.0), 1),
            format_args!("{:.1}", s.kv_util_peak * 100.0)
        ),
    );
    line("preemptions", s.preemptions.to_string());
    line("mean waiting", opt(s.mean_waiting, 2));
    if s.mean_waiting_routed.is_some() {
        line("mean waiting at routing", opt(s.mean_waiting_routed, 2));
    }
    line("steps", s.steps.to_string());
    line("makespan", format!("{:.3} s", s.makespan_s));
    if let Some(k) = &s.pd {
        line(
            "P/D",
            format!(
                "{} prefill + {} decode pods, decider {} ({} tokens), link {} B/s + {} ns",
                k.prefill_pods,
                k.decode_pods,
                k.pd_decider,
                k.pd_threshold_tokens,
                k.pd_link_bytes_per_s,
                k.pd_link_latency_ns
            ),
        );
        let ms = |v: Option<u64>| v.map_or("n/a".into(), |n| format!("{:.3}", n as f64 / 1e6));
        line(
            "KV transfers",
            format!(
                "{} requests prefilled remotely, {} bytes; transfer p50/p90/p99/max {} / {} / {} / {} ms",
                k.disaggregated,
                k.transfer_bytes,
                ms(k.transfer_ns_p50),
                ms(k.transfer_ns_p90),
                ms(k.transfer_ns_p99),
                ms(k.transfer_ns_max)
            ),
        );
    }
    if let Some(k) = &s.offload {
        line(
            "offload tier",
            format!(
                "{} CPU blocks per pod, PCIe {} B/s + {} ns, tier weight {}",
                k.cpu_capacity, k.pcie_bytes_per_s, k.pcie_latency_ns, k.cpu_tier_weight
            ),
        );
        line(
            "offload hits",
            format!(
                "{} tokens ({} %), {} loads of {} blocks, {} blocks stored",
                k.offload_hit_tokens,
                opt(k.offload_hit_rate.map(|h| h * 100.0), 2),
                k.offload_loads,
                k.offload_load_blocks,
                k.offload_stored_blocks
            ),
        );
    }
    if let Some(k) = &s.slo {
        line("SLO goodput", slo_line(k));
    }
    if let Some(a) = &s.autoscale {
        let t = &a.totals;
        line(
            "autoscaling",
            format!(
                "wva-saturation, {}..{} pods (start {}): {} out / {} in, at most {}",
                t.min_pods, s.pods, t.initial_pods, t.scale_outs, t.scale_ins, t.max_active_pods
            ),
        );
        line("pod-seconds", format!("{:.1} (mean {} pods)", t.pod_seconds, opt(t.mean_pods, 2)));
        line("new-pod traffic", opt(t.new_pod_traffic_ratio, 3));
    }
    o.push_str("\npod  requests  preempt  KV mean  KV peak  max queue\n");
    for p in 0..s.pods {
        o.push_str(&format!(
            "{p:>3}  {:>8}  {:>7}  {:>7}  {:>7}  {:>9}\n",
            s.per_pod_requests[p],
            s.per_pod_preemptions[p],
            opt(s.per_pod_kv_util_mean[p].map(|v| v * 100.0), 1),
            format!("{:.1}", s.per_pod_kv_util_peak[p] * 100.0),
            s.per_pod_max_queue[p]
        ));
    }
    if let Some(pools) = &s.per_pool {
        o.push_str(
            "\npool              role        pods  requests  TTFT p50/p90 s     E2E p50/p90 s      steps  KV mean\n",
        );
        for q in pools {
            o.push_str(&format!(
                "{:<16}  {:<10}  {:>4}  {:>8}  {:>8} {:>8}  {:>8} {:>8}  {:>6}  {:>7}\n",
                q.name,
                q.role,
                q.pods,
                q.requests,
                opt(q.ttft_p50, 4),
                opt(q.ttft_p90, 4),
                opt(q.e2e_p50, 4),
                opt(q.e2e_p90, 4),
                q.steps,
                opt(q.kv_util_mean.map(|v| v * 100.0), 1)
            ));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use brokerlab_core::fleet::{ScaleEvent, ScaleEventKind as K};

    fn ev(t_s: u64, kind: K, pod: u32, active: u32) -> ScaleEvent {
        ScaleEvent { t_ns: t_s * 1_000_000_000, kind, pod, active }
    }

    /// A pod that comes up and is scaled in at one arrival is no step of the curve: the curve's
    /// maximum is the most pods routable at an arrival (`max_active_pods`), never the count
    /// between two events of one instant.
    #[test]
    fn pods_over_time_holds_the_count_after_each_instant() {
        let events = [
            ev(10, K::Out, 2, 2),
            ev(40, K::Ready, 2, 3),
            ev(55, K::Out, 3, 3),
            // ready and scaled in at the same arrival: never routable for a request
            ev(85, K::Ready, 3, 4),
            ev(85, K::In, 3, 3),
            ev(90, K::Drained, 3, 3),
            ev(100, K::In, 2, 2),
        ];
        let steps = super::pods_over_time(2, &events);
        assert_eq!(steps, vec![(0.0, 2), (40.0, 3), (100.0, 2)]);
        assert_eq!(steps.iter().map(|s| s.1).max(), Some(3));
        // a change at the first instant replaces the initial count
        let steps = super::pods_over_time(2, &[ev(0, K::Ready, 2, 3)]);
        assert_eq!(steps, vec![(0.0, 3)]);
    }
}
