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
