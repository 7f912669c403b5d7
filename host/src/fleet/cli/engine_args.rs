//! The engine flags shared by `fleet replay` and `fleet run` (clap), and how they become the
//! engine's settings ([`EngineSettings`], which a scenario's `[fleet.engine]` gives too).

use brokerlab_core::fleet::BatchedConfig;
use clap::Args;

use crate::error::{CliError, CliResult};
use crate::fleet::scenario::engine::{EngineKind, EngineSettings, StepModel};

/// Engine flags shared by `fleet replay` and `fleet run`.
#[derive(Debug, Args, Clone, Default)]
pub struct EngineArgs {
    /// fifo | batched (default fifo; `fleet run`: the scenario's `[fleet.engine]`).
    #[arg(long, value_enum)]
    pub engine: Option<EngineKind>,
    /// Batched: step-cost profile: linear qwen3-32b-h100x2 (default) | llama-3.1-8b-h100 | seed;
    /// physics qwen3-32b-h100-tp2 | qwen3-32b-h200-tp2 | qwen3-8b-h100-tp1 | llama-3.1-8b-h100-tp1 |
    /// llama-3.1-8b-a100-tp1 | llama-3.1-8b-l40s-tp1 | llama-3.1-70b-h100-tp4 |
    /// llama-3.1-70b-b200-tp2 | gpt-oss-120b-h100-tp1 | deepseek-v3-h200-tp8, or a profile FILE.toml
    /// from `fleet calibrate`. A physics profile derives the KV capacity per pod unless --capacity.
    #[arg(long)]
    pub profile: Option<String>,
    /// Batched: step-cost model, linear | physics (default: the profile's; physics without
    /// --profile is qwen3-32b-h100-tp2).
    #[arg(long, value_enum)]
    pub step_model: Option<StepModel>,
    /// Batched: most running requests per pod.
    #[arg(long)]
    pub max_num_seqs: Option<u32>,
    /// Batched: token budget of one step.
    #[arg(long)]
    pub max_num_batched_tokens: Option<u32>,
    /// Batched: vLLM's full-sequence admission gate (`scheduler_reserve_full_isl`, vLLM >=
    /// 0.19.0): admit a waiting or preempted request only if its whole sequence fits the free
    /// blocks, not only its first chunk (default false: vLLM v0.11.0's rule).
    #[arg(long, value_name = "BOOL")]
    pub reserve_full_isl: Option<bool>,
    /// Batched, physics profiles: the fraction of a full HBM read a decode step charges for a
    /// KV block that another running request of the pod also holds, for every holder after the
    /// first, a decimal in [0, 1] (at most six digits after the point; default 1: every request
    /// reads its whole context; 0: each such block read once per step). An empirical factor,
    /// not a vLLM rule (docs/MODEL.md "Shared-prefix reads").
    #[arg(long, value_name = "F")]
    pub shared_kv_read: Option<String>,
    /// Batched: fixed cost per step, ns (>= 1).
    #[arg(long)]
    pub t_overhead_ns: Option<u64>,
    /// Batched: cost per prefill token, ns.
    #[arg(long)]
    pub t_prefill_token_ns: Option<u64>,
    /// Batched: cost per decoding request in a step, ns.
    #[arg(long)]
    pub t_decode_seq_ns: Option<u64>,
    /// Batched: cost per context token of the step's requests, ns.
    #[arg(long)]
    pub t_kv_token_ns: Option<u64>,
    /// Batched: also write one JSON line per request to FILE, in request order: index, pod,
    /// arrival_ns, queue_len, hit_tokens, prefill_tokens, ttft_ns, e2e_ns, preemptions (compared
    /// with tests/reference/batched_model.py by host/tests/reference_batched.rs).
    #[arg(long, value_name = "FILE")]
    pub outcomes: Option<std::path::PathBuf>,
    /// Batched, offload tier (--cpu-capacity): host-to-device bytes/s of a pod (default
    /// 64000000000).
    #[arg(long)]
    pub pcie_bytes_per_s: Option<u64>,
    /// Batched, offload tier: ns added to each load (default 1000).
    #[arg(long)]
    pub pcie_latency_ns: Option<u64>,
    /// Batched, offload tier: weight of a CPU-tier block in the prefix-aware match, a decimal in
    /// [0, 1] with at most three digits after the point (default 0.8, llm-d's).
    #[arg(long)]
    pub cpu_tier_weight: Option<String>,
    /// Batched: KV bytes of one token of a pod (default: the profile's model).
    #[arg(long)]
    pub kv_bytes_per_token: Option<u64>,
    /// Batched: prefill/decode disaggregation: pods 0 .. NP - 1 prefill, the others decode
    /// (default 0: off).
    #[arg(long)]
    pub prefill_pods: Option<u32>,
    /// P/D: KV blocks of each prefill pod (default --capacity).
    #[arg(long)]
    pub prefill_capacity: Option<usize>,
    /// P/D: the prefill pool's step-cost profile (default: the decode pool's coefficients).
    #[arg(long)]
    pub prefill_profile: Option<String>,
    /// P/D: prefix-threshold (default) | always | never.
    #[arg(long)]
    pub pd_decider: Option<String>,
    /// P/D: prefill remotely iff the decode pod's cached prefix leaves at least this many
    /// uncached prompt tokens (default 16; 0: never).
    #[arg(long)]
    pub pd_threshold_tokens: Option<u64>,
    /// P/D: each decode pod's incoming link, bytes/s (default 25000000000).
    #[arg(long)]
    pub pd_link_bytes_per_s: Option<u64>,
    /// P/D: ns added to each KV transfer (default 50000).
    #[arg(long)]
    pub pd_link_latency_ns: Option<u64>,
    /// SLO goodput (every engine): a request is good when its TTFT is at most this many ms
    /// (and its TPOT within --slo-tpot-ms when given).
    #[arg(long)]
    pub slo_ttft_ms: Option<String>,
    /// SLO goodput (every engine): a request is good when (e2e - ttft) / (output tokens - 1) is
    /// at most this many ms.
    #[arg(long)]
    pub slo_tpot_ms: Option<String>,
}

impl EngineArgs {
    /// The settings given as flags.
    pub fn settings(&self) -> EngineSettings {
        EngineSettings {
            profile: self.profile.clone(),
            step_model: self.step_model,
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            t_overhead_ns: self.t_overhead_ns,
            t_prefill_token_ns: self.t_prefill_token_ns,
            t_decode_seq_ns: self.t_decode_seq_ns,
            t_kv_token_ns: self.t_kv_token_ns,
            cpu_capacity: None,
            pcie_bytes_per_s: self.pcie_bytes_per_s,
            pcie_latency_ns: self.pcie_latency_ns,
            cpu_tier_weight: self.cpu_tier_weight.clone(),
            kv_bytes_per_token: self.kv_bytes_per_token,
            prefill_pods: self.prefill_pods,
            prefill_capacity: self.prefill_capacity,
            prefill_profile: self.prefill_profile.clone(),
            pd_decider: self.pd_decider.clone(),
            pd_threshold_tokens: self.pd_threshold_tokens,
            pd_link_bytes_per_s: self.pd_link_bytes_per_s,
            pd_link_latency_ns: self.pd_link_latency_ns,
            wva: None,
            cache_generated_tokens: None,
            metrics_scrape_ms: None,
            reserve_full_isl: self.reserve_full_isl,
            shared_kv_read: self.shared_kv_read.clone(),
        }
    }

    /// The engine to run: None for FIFO. `scenario` is a scenario's `[fleet.engine]` (already
    /// checked), which the flags override.
    pub fn resolve(&self, scenario: Option<&EngineSettings>) -> CliResult<Option<BatchedConfig>> {
        let flags = self.settings();
        let kind = self.engine.unwrap_or(if scenario.is_some() { EngineKind::Batched } else { EngineKind::Fifo });
        match kind {
            EngineKind::Fifo => {
                if let Some(n) = flags.set_names().first() {
                    return Err(CliError::bad_input(format!("--{n}: only with --engine batched")));
                }
                if self.outcomes.is_some() {
                    return Err(CliError::bad_input("--outcomes: only with --engine batched"));
                }
                Ok(None)
            }
            EngineKind::Batched => {
                let s = scenario.cloned().unwrap_or_default().overridden_by(&flags);
                Ok(Some(s.config(&|k| format!("--{}", k.replace('_', "-")))?))
            }
        }
    }
}
