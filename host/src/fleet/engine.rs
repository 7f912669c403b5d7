//! The engine a run uses, from flags or a scenario: `--engine` and the batched engine's settings
//! (docs/MODEL.md, "The batched engine"), and the one place that turns a fleet's configuration
//! into the batched engine's, refusing what only the FIFO engine supports, in the words of the
//! flag or the scenario key that set it.

use brokerlab_core::fleet::{
    BatchedConfig, CacheMode, EngineConfig, Error as CoreError, Field, FleetConfig, IndexKind, Profile, StepCost,
};
use clap::{Args, ValueEnum};

use crate::error::{CliError, CliResult};

/// Which engine model each pod runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// The seed's FIFO single server (default).
    Fifo,
    /// vLLM-style continuous batching (docs/MODEL.md, "The batched engine").
    Batched,
}

/// Engine flags shared by `fleet replay` and `fleet run`.
#[derive(Debug, Args, Clone, Default)]
pub struct EngineArgs {
    /// fifo | batched (default fifo; `fleet run`: the scenario's `[fleet.engine]`).
    #[arg(long, value_enum)]
    pub engine: Option<EngineKind>,
    /// Batched: step-cost profile (qwen3-32b-h100x2 | llama-3.1-8b-h100 | seed).
    #[arg(long)]
    pub profile: Option<String>,
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

/// Engine settings from flags or a scenario: every field optional, the profile's and vLLM's
/// defaults fill the rest.
#[derive(Debug, Clone, Default)]
pub struct EngineSettings {
    /// Profile name.
    pub profile: Option<String>,
    /// Most running requests per pod S.
    pub max_num_seqs: Option<u32>,
    /// Token budget per step M.
    pub max_num_batched_tokens: Option<u32>,
    /// Fixed cost per step, ns.
    pub t_overhead_ns: Option<u64>,
    /// Cost per prefill token, ns.
    pub t_prefill_token_ns: Option<u64>,
    /// Cost per decoding request, ns.
    pub t_decode_seq_ns: Option<u64>,
    /// Cost per context token, ns.
    pub t_kv_token_ns: Option<u64>,
}

impl EngineSettings {
    /// Field names set, for "only with the batched engine" errors.
    fn set_names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut add = |set: bool, name| {
            if set {
                v.push(name);
            }
        };
        add(self.profile.is_some(), "profile");
        add(self.max_num_seqs.is_some(), "max-num-seqs");
        add(self.max_num_batched_tokens.is_some(), "max-num-batched-tokens");
        add(self.t_overhead_ns.is_some(), "t-overhead-ns");
        add(self.t_prefill_token_ns.is_some(), "t-prefill-token-ns");
        add(self.t_decode_seq_ns.is_some(), "t-decode-seq-ns");
        add(self.t_kv_token_ns.is_some(), "t-kv-token-ns");
        v
    }

    /// Overrides the fields set in `o`.
    pub fn overridden_by(mut self, o: &EngineSettings) -> Self {
        if o.profile.is_some() {
            self.profile.clone_from(&o.profile);
        }
        self.max_num_seqs = o.max_num_seqs.or(self.max_num_seqs);
        self.max_num_batched_tokens = o.max_num_batched_tokens.or(self.max_num_batched_tokens);
        self.t_overhead_ns = o.t_overhead_ns.or(self.t_overhead_ns);
        self.t_prefill_token_ns = o.t_prefill_token_ns.or(self.t_prefill_token_ns);
        self.t_decode_seq_ns = o.t_decode_seq_ns.or(self.t_decode_seq_ns);
        self.t_kv_token_ns = o.t_kv_token_ns.or(self.t_kv_token_ns);
        self
    }

    /// The core configuration; errors name the key as `name(key)` gives it (flag or TOML key).
    pub fn config(&self, name: &dyn Fn(&str) -> String) -> CliResult<BatchedConfig> {
        let profile = match &self.profile {
            None => Profile::Qwen3_32bH100x2,
            Some(p) => Profile::parse(p).ok_or_else(|| {
                CliError::bad_input(format!(
                    "{} {p:?}: expected one of {}",
                    name("profile"),
                    Profile::ALL.map(Profile::name).join(", ")
                ))
            })?,
        };
        let mut e = BatchedConfig::new(profile);
        // the profiles are linear: their coefficients can be changed one by one
        let StepCost::Linear(c) = &mut e.cost;
        if let Some(v) = self.max_num_seqs {
            e.max_num_seqs = v;
        }
        if let Some(v) = self.max_num_batched_tokens {
            e.max_num_batched_tokens = v;
        }
        if let Some(v) = self.t_overhead_ns {
            c.t_overhead_ns = v;
        }
        if let Some(v) = self.t_prefill_token_ns {
            c.t_prefill_token_ns = v;
        }
        if let Some(v) = self.t_decode_seq_ns {
            c.t_decode_seq_ns = v;
        }
        if let Some(v) = self.t_kv_token_ns {
            c.t_kv_token_ns = v;
        }
        e.validate().map_err(|err| match err {
            CoreError::InvalidConfig { field, expected } => {
                CliError::bad_input(format!("{}: expected {expected}", name(field.name())))
            }
            other => CliError::bad_input(other.to_string()),
        })?;
        Ok(e)
    }
}

impl EngineArgs {
    /// The settings given as flags.
    pub fn settings(&self) -> EngineSettings {
        EngineSettings {
            profile: self.profile.clone(),
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

/// `cfg` (a FIFO configuration: flags, or a scenario's `[fleet]`, already checked) under the
/// batched engine `e`: what only the FIFO engine supports (a stale or global view, a CPU tier,
/// autoscaling, a global cache) must be off; the error names the field, which the caller names
/// by its flag or its scenario key.
pub fn batched(cfg: FleetConfig, e: BatchedConfig) -> Result<FleetConfig, CoreError> {
    let bad = |field, expected| Err(CoreError::InvalidConfig { field, expected });
    cfg.validate()?;
    let b = FleetConfig { engine: EngineConfig::Batched(e), ..cfg };
    b.validate()?;
    let view = cfg.view();
    // each staleness named by its own field (the batched engine's index is exact)
    let exact = "0 with --engine batched (its index is exact)";
    if view.stale_delay > 0 {
        return bad(Field::Stale, exact);
    }
    if view.event_delay_ns > 0 {
        return bad(Field::EventDelay, exact);
    }
    if view.speculative_ttl_ns > 0 {
        return bad(Field::SpeculativeTtl, exact);
    }
    if view.index != IndexKind::PodTables {
        return bad(Field::Index, "pod-tables with --engine batched");
    }
    if let Some(f) = cfg.fifo() {
        if f.cpu_capacity_blocks > 0 {
            return bad(Field::CpuCapacity, "0 with --engine batched");
        }
        if cfg.scale().is_some() {
            return bad(Field::ScaleMin, "no autoscaling with --engine batched");
        }
        if f.cache != CacheMode::Local {
            return bad(Field::Cache, "local with --engine batched");
        }
    }
    Ok(b)
}
