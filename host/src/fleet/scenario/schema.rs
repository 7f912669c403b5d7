//! The scenario file's schema: the serde types of each TOML table, and serde's default
//! functions (each reads the core's one default).

use brokerlab_core::fleet::{CacheMode, IndexKind, RouterKind, TouchOrder, defaults};
use serde::Deserialize;

/// `[workload]` of a scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadToml {
    /// Seed.
    #[serde(default = "seed")]
    pub seed: u64,
    /// Requests (required unless `conversations`).
    #[serde(default)]
    pub requests: Option<u64>,
    /// Tenants T (required unless `conversations`).
    #[serde(default)]
    pub tenants: Option<u32>,
    /// Users per tenant.
    #[serde(default = "users_per_tenant")]
    pub users_per_tenant: u32,
    /// Shared prefix P, tokens (required unless `conversations`).
    #[serde(default)]
    pub prefix_tokens: Option<u32>,
    /// [min, max] user suffix, tokens (required unless `conversations`).
    #[serde(default)]
    pub suffix_tokens: Option<[u32; 2]>,
    /// [min, max] output, tokens (default [0, 0]).
    #[serde(default)]
    pub output_tokens: Option<[u32; 2]>,
    /// Output lengths drawn uniformly from this list instead (1 to 16 values).
    #[serde(default)]
    pub output_tokens_choices: Option<Vec<u32>>,
    /// "uniform", "zipf:S" or "cycle".
    #[serde(default = "uniform")]
    pub popularity: String,
    /// Poisson rate, requests/s (0: all at t = 0); required unless `stages` is given.
    #[serde(default)]
    pub rate_per_s: Option<f64>,
    /// "request" (default: a fresh suffix per request) or "user" (one per tenant and user).
    #[serde(default)]
    pub suffix_scope: Option<String>,
    /// A ramp of Poisson stages run back to back from t = 0 (instead of `rate_per_s`).
    #[serde(default)]
    pub stages: Option<Vec<StageToml>>,
    /// "stable-prefix-first" or "timestamp-first".
    #[serde(default = "stable")]
    pub layout: String,
    /// Header tokens in the timestamp-first layout.
    #[serde(default = "header_tokens")]
    pub header_tokens: u32,
    /// RAG section.
    #[serde(default)]
    pub rag: Option<RagToml>,
    /// A burst of a higher (or lower) arrival rate.
    #[serde(default)]
    pub burst: Option<BurstToml>,
    /// Conversation replay instead of the synthetic shared-prefix requests.
    #[serde(default)]
    pub conversations: Option<ConversationsToml>,
}

/// `[[workload.stages]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageToml {
    /// Poisson rate during the stage, requests/s.
    pub rate_per_s: f64,
    /// Length, s.
    pub duration_s: f64,
}

/// `[workload.burst]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstToml {
    /// Poisson rate during the burst, requests/s.
    pub rate_per_s: f64,
    /// Start, s.
    pub start_s: f64,
    /// Length, s.
    pub duration_s: f64,
}

/// `[fleet.autoscale]`: `fleet.pods` is then the most pods.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoscaleToml {
    /// Fewest routable pods.
    pub min: u32,
    /// Routable pods at the start (default: min).
    #[serde(default)]
    pub initial: Option<u32>,
    /// Evaluation period, s.
    #[serde(default = "interval_s")]
    pub interval_s: f64,
    /// Scale out above this mean queue length (queue-target; default 4).
    #[serde(default)]
    pub up_queue: Option<f64>,
    /// Scale in below this mean queue length (queue-target; default 0.5).
    #[serde(default)]
    pub down_queue: Option<f64>,
    /// Boot time of a new pod, s.
    #[serde(default = "startup_s")]
    pub startup_s: f64,
    /// The rule: "queue-target" (the FIFO engine's, its default) or "wva-saturation" (the
    /// batched engine's, its default).
    #[serde(default)]
    pub policy: Option<String>,
    /// wva-saturation: peak window, s (default 60).
    #[serde(default)]
    pub window_s: Option<f64>,
    /// wva-saturation: kvCacheThreshold (default 0.8).
    #[serde(default)]
    pub kv_threshold: Option<f64>,
    /// wva-saturation: queueLengthThreshold (default 5).
    #[serde(default)]
    pub queue_threshold: Option<f64>,
    /// wva-saturation: kvSpareTrigger (default 0.1).
    #[serde(default)]
    pub kv_spare: Option<f64>,
    /// wva-saturation: queueSpareTrigger (default 3).
    #[serde(default)]
    pub queue_spare: Option<f64>,
}

impl AutoscaleToml {
    /// The WVA settings as given.
    pub fn wva(&self) -> super::WvaGiven {
        super::WvaGiven {
            window_s: self.window_s,
            kv_threshold: self.kv_threshold,
            queue_threshold: self.queue_threshold,
            kv_spare: self.kv_spare,
            queue_spare: self.queue_spare,
        }
    }
}

/// `[workload.rag]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RagToml {
    /// Documents per tenant.
    pub docs: u32,
    /// Tokens per document.
    pub doc_tokens: u32,
    /// Documents per request.
    pub per_request: u32,
    /// "random" or "sorted".
    #[serde(default = "random")]
    pub order: String,
}

/// `[fleet]` of a scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetToml {
    /// Pods N (with `[[fleet.pool]]`: may be left out, the sum of the pools' pods).
    #[serde(default)]
    pub pods: Option<usize>,
    /// Blocks per pod C.
    pub capacity: usize,
    /// Router.
    #[serde(default = "router")]
    pub router: RouterKind,
    /// Load penalty.
    #[serde(default = "alpha")]
    pub alpha: f64,
    /// Stale delay k.
    #[serde(default)]
    pub stale: u32,
    /// Touch order.
    #[serde(default = "order")]
    pub order: TouchOrder,
    /// ns per prefill token.
    #[serde(default = "t_prefill_ns")]
    pub t_prefill_ns: u64,
    /// ns per output token.
    #[serde(default)]
    pub t_decode_ns: u64,
    /// Prefix-aware index: "pod-tables" (default) or "global".
    #[serde(default = "index")]
    pub index: IndexKind,
    /// CPU-tier blocks per pod (0: none).
    #[serde(default)]
    pub cpu_capacity: usize,
    /// ns per token loaded from the CPU tier.
    #[serde(default = "t_cpu_ns")]
    pub t_cpu_ns: u64,
    /// Whose cache a request reads: "local" (default; each pod its own LRU) or "global" (one
    /// fleet-wide LRU of pods x capacity blocks; docs/MODEL.md, "Optional shared (global) cache").
    #[serde(default = "cache")]
    pub cache: CacheMode,
    /// Autoscaling.
    #[serde(default)]
    pub autoscale: Option<AutoscaleToml>,
    /// The batched engine (absent: the FIFO engine).
    #[serde(default)]
    pub engine: Option<EngineToml>,
    /// Prefill/decode disaggregation (batched engine; docs/MODEL.md, "Prefill/decode
    /// disaggregation").
    #[serde(default)]
    pub pd: Option<PdToml>,
    /// Heterogeneous pools (batched engine; docs/MODEL.md, "Heterogeneous pools").
    #[serde(default)]
    pub pool: Option<Vec<PoolToml>>,
}

/// `[[fleet.pool]]`: one pool of a heterogeneous fleet; each key left out is the `[fleet]` /
/// `[fleet.engine]` value.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolToml {
    /// Its name in outputs (unique).
    pub name: String,
    /// Pods.
    pub pods: u32,
    /// "aggregated" (default), "prefill" or "decode".
    #[serde(default)]
    pub role: Option<String>,
    /// KV blocks per pod.
    #[serde(default)]
    pub capacity: Option<usize>,
    /// Step-cost profile (its own coefficients; the fleet's coefficient keys do not apply).
    #[serde(default)]
    pub profile: Option<String>,
    /// Step-cost model: "linear" or "physics".
    #[serde(default)]
    pub step_model: Option<String>,
    /// ns per step.
    #[serde(default)]
    pub t_overhead_ns: Option<u64>,
    /// ns per prefill token.
    #[serde(default)]
    pub t_prefill_token_ns: Option<u64>,
    /// ns per decoding request.
    #[serde(default)]
    pub t_decode_seq_ns: Option<u64>,
    /// ns per context token.
    #[serde(default)]
    pub t_kv_token_ns: Option<u64>,
    /// S.
    #[serde(default)]
    pub max_num_seqs: Option<u32>,
    /// M.
    #[serde(default)]
    pub max_num_batched_tokens: Option<u32>,
    /// Offload tier: CPU-tier blocks per pod.
    #[serde(default)]
    pub cpu_capacity: Option<u32>,
    /// Offload tier: host-to-device bytes/s.
    #[serde(default)]
    pub pcie_bytes_per_s: Option<u64>,
    /// KV bytes of one token of a pod.
    #[serde(default)]
    pub kv_bytes_per_token: Option<u64>,
}

/// `[fleet.pd]`: prefill/decode disaggregation; keys left out take their defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PdToml {
    /// NP (with `[[fleet.pool]]`: may be left out, the prefill pools' pods).
    #[serde(default)]
    pub prefill_pods: Option<u32>,
    /// C_P.
    #[serde(default)]
    pub prefill_capacity: Option<usize>,
    /// The prefill pool's profile.
    #[serde(default)]
    pub prefill_profile: Option<String>,
    /// prefix-threshold | always | never.
    #[serde(default)]
    pub decider: Option<String>,
    /// N_T.
    #[serde(default)]
    pub threshold_tokens: Option<u64>,
    /// Each decode pod's incoming link, bytes/s.
    #[serde(default)]
    pub link_bytes_per_s: Option<u64>,
    /// Per transfer, ns.
    #[serde(default)]
    pub link_latency_ns: Option<u64>,
}

/// `[fleet.engine]`: the batched engine (docs/MODEL.md, "The batched engine"); keys left out take
/// the profile's and vLLM's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineToml {
    /// "batched" (default) or "fifo".
    #[serde(default)]
    pub model: Option<String>,
    /// Step-cost profile (linear or physics, or a physics profile file).
    #[serde(default)]
    pub profile: Option<String>,
    /// Step-cost model: "linear" or "physics".
    #[serde(default)]
    pub step_model: Option<String>,
    /// S.
    #[serde(default)]
    pub max_num_seqs: Option<u32>,
    /// M.
    #[serde(default)]
    pub max_num_batched_tokens: Option<u32>,
    /// ns per step.
    #[serde(default)]
    pub t_overhead_ns: Option<u64>,
    /// ns per prefill token.
    #[serde(default)]
    pub t_prefill_token_ns: Option<u64>,
    /// ns per decoding request.
    #[serde(default)]
    pub t_decode_seq_ns: Option<u64>,
    /// ns per context token.
    #[serde(default)]
    pub t_kv_token_ns: Option<u64>,
    /// Offload tier: CPU-tier blocks per pod (docs/MODEL.md, "The KV offload tier").
    #[serde(default)]
    pub cpu_capacity: Option<u32>,
    /// Offload tier: host-to-device bytes/s.
    #[serde(default)]
    pub pcie_bytes_per_s: Option<u64>,
    /// Offload tier: ns per load.
    #[serde(default)]
    pub pcie_latency_ns: Option<u64>,
    /// Offload tier: weight of a CPU-tier block in the prefix-aware match (0 ..= 1, thousandths).
    #[serde(default)]
    pub cpu_tier_weight: Option<f64>,
    /// KV bytes of one token of a pod.
    #[serde(default)]
    pub kv_bytes_per_token: Option<u64>,
    /// Full blocks of generated tokens are cached (vLLM's prefix caching hashes them).
    #[serde(default)]
    pub cache_generated_tokens: Option<bool>,
    /// The router reads vLLM's published gauges (waiting requests, KV usage) as scraped every
    /// this many ms (GIE's `refreshMetricsInterval`); absent: the engine's own signals at the
    /// arrival (docs/MODEL.md, "Load signals").
    #[serde(default)]
    pub metrics_scrape_ms: Option<u64>,
    /// vLLM's full-sequence admission gate (`scheduler_reserve_full_isl`, vLLM >= 0.19.0): a
    /// waiting or preempted request is admitted only if its whole sequence fits the free blocks
    /// (docs/MODEL.md, "One step"); absent: false, the model's vLLM v0.11.0 rule.
    #[serde(default)]
    pub reserve_full_isl: Option<bool>,
    /// Physics profiles: the fraction of a full read a decode step charges for a KV block another
    /// running request of the pod also holds, for every holder after the first, a number in
    /// [0, 1] with at most six digits after the point (docs/MODEL.md "Shared-prefix reads");
    /// absent: 1, off (every request reads its whole context).
    #[serde(default)]
    pub shared_kv_read: Option<f64>,
    /// vLLM's `max_model_len`: a turn of `[workload.conversations]` whose prompt + output exceeds
    /// it is refused (only with conversations).
    #[serde(default)]
    pub max_model_len: Option<u64>,
}

/// A length distribution of `[workload.conversations]` (inference-perf's `Distribution`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistToml {
    /// "fixed", "normal", "lognormal" or "uniform".
    pub dist: String,
    /// Mean (fixed: the value).
    #[serde(default)]
    pub mean: Option<f64>,
    /// Standard deviation.
    #[serde(default)]
    pub sd: Option<f64>,
    /// Smallest value.
    #[serde(default)]
    pub min: Option<u64>,
    /// Largest value.
    #[serde(default)]
    pub max: Option<u64>,
}

/// `[workload.conversations]`: inference-perf's `data.conversation_replay`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationsToml {
    /// Conversations (`num_conversations`).
    pub count: u32,
    /// `shared_system_prompt_len`.
    #[serde(default)]
    pub shared_system_prompt_tokens: u64,
    /// `dynamic_system_prompt_len` (absent: none).
    #[serde(default)]
    pub dynamic_system_prompt_tokens: Option<DistToml>,
    /// `turns_per_conversation` (absent: 10).
    #[serde(default)]
    pub turns: Option<DistToml>,
    /// `input_tokens_per_turn` (absent: 512).
    #[serde(default)]
    pub input_tokens_per_turn: Option<DistToml>,
    /// `output_tokens_per_turn` (absent: 256).
    #[serde(default)]
    pub output_tokens_per_turn: Option<DistToml>,
}

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioToml {
    /// Name used in reports.
    #[serde(default)]
    pub name: Option<String>,
    /// One line on what it shows.
    #[serde(default)]
    pub description: Option<String>,
    /// The workload.
    pub workload: WorkloadToml,
    /// The fleet.
    pub fleet: FleetToml,
    /// The client as a load generator (absent: open-loop arrivals from `[workload]`).
    #[serde(default)]
    pub load: Option<LoadToml>,
    /// SLO goodput's SLOs (`--slo-ttft-ms` / `--slo-tpot-ms` override each).
    #[serde(default)]
    pub slo: Option<SloToml>,
}

/// `[slo]`: the SLOs of SLO goodput (docs/MODEL.md, "SLO goodput"), as the flags give them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloToml {
    /// A request is good when its TTFT is at most this many ms.
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    /// ... and its TPOT at most this many ms.
    #[serde(default)]
    pub tpot_ms: Option<f64>,
}

/// `[load]`: the client as inference-perf's load generator (docs/MODEL.md, "The load
/// generator"); `[workload]` is then the data set its requests are drawn from, in order.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadToml {
    /// "poisson", "constant" or "concurrent".
    #[serde(rename = "type")]
    pub kind: String,
    /// Pause after each drained stage, s.
    #[serde(default = "load_interval_s")]
    pub interval_s: f64,
    /// Worker processes (absent: no cap on requests in flight).
    #[serde(default)]
    pub num_workers: Option<u64>,
    /// Requests in flight per worker.
    #[serde(default = "worker_max_concurrency")]
    pub worker_max_concurrency: u64,
    /// Client timeout per request, s (absent: none).
    #[serde(default)]
    pub request_timeout_s: Option<f64>,
    /// Most requests the gateway in front of the router holds at once (absent: no limit): a
    /// request sent while this many are in flight fails at once and never reaches the router
    /// (Envoy's default circuit breaker on the EPP's ext_proc cluster: 1024; docs/MODEL.md,
    /// "The load generator").
    #[serde(default)]
    pub gateway_max_in_flight: Option<u64>,
    /// A concurrent client's pause between a request's end and its next send, s.
    #[serde(default)]
    pub think_time_s: f64,
    /// "restart" (the data index restarts at 0 every stage, as shared_prefix data does) or
    /// "continue" (over the run: a fresh prompt per request, as random data).
    #[serde(default = "data_order")]
    pub data_order: String,
    /// The stages.
    pub stages: Vec<LoadStageToml>,
}

/// `[[load.stages]]`: `rate_per_s` and `duration_s`, or (concurrent) `concurrency_level` and
/// `num_requests`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadStageToml {
    /// Requests/s.
    #[serde(default)]
    pub rate_per_s: Option<f64>,
    /// Length, s.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Clients.
    #[serde(default)]
    pub concurrency_level: Option<u64>,
    /// Requests.
    #[serde(default)]
    pub num_requests: Option<u64>,
}

// serde's `default` takes a function: each reads the core's one default (core::fleet::defaults).
fn seed() -> u64 {
    defaults::WORKLOAD_SEED
}
fn users_per_tenant() -> u32 {
    defaults::USERS_PER_TENANT
}
fn header_tokens() -> u32 {
    defaults::HEADER_TOKENS
}
fn interval_s() -> f64 {
    defaults::SCALE_INTERVAL_NS as f64 / 1e9
}
pub(crate) fn up_queue() -> f64 {
    defaults::SCALE_UP_MILLI as f64 / 1e3
}
pub(crate) fn down_queue() -> f64 {
    defaults::SCALE_DOWN_MILLI as f64 / 1e3
}
fn startup_s() -> f64 {
    defaults::SCALE_STARTUP_NS as f64 / 1e9
}
fn router() -> RouterKind {
    defaults::ROUTER
}
fn alpha() -> f64 {
    defaults::ALPHA
}
fn order() -> TouchOrder {
    defaults::ORDER
}
fn t_prefill_ns() -> u64 {
    defaults::T_PREFILL_NS
}
fn index() -> IndexKind {
    defaults::INDEX
}
fn cache() -> CacheMode {
    defaults::CACHE
}
fn t_cpu_ns() -> u64 {
    defaults::T_CPU_NS
}
fn load_interval_s() -> f64 {
    brokerlab_core::fleet::loadgen::DEFAULT_INTERVAL_MS as f64 / 1e3
}
fn worker_max_concurrency() -> u64 {
    brokerlab_core::fleet::loadgen::DEFAULT_WORKER_MAX_CONCURRENCY
}
fn data_order() -> String {
    "restart".into()
}
fn uniform() -> String {
    "uniform".into()
}
fn stable() -> String {
    "stable-prefix-first".into()
}
fn random() -> String {
    "random".into()
}
