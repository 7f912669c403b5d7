//! The engine a run uses, from flags or a scenario: the engine kinds, the batched engine's
//! settings (docs/MODEL.md, "The batched engine"; the flags that set them are
//! `cli::engine_args`, a scenario's `[fleet.engine]` sets them too), and the one place that turns
//! a fleet's configuration into the batched engine's, refusing what only the FIFO engine
//! supports, in the words of the flag or the scenario key that set it.

use std::path::Path;

use brokerlab_core::fleet::{
    BatchedConfig, CacheMode, EngineConfig, Error as CoreError, Field, FleetConfig, IndexKind, PhysicsProfile, Profile,
    StepProfile,
};
use clap::ValueEnum;

use crate::error::{CliError, CliResult};

/// Which engine model each pod runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// The seed's FIFO single server (default).
    Fifo,
    /// vLLM-style continuous batching (docs/MODEL.md, "The batched engine").
    Batched,
}

/// The batched engine's step-cost model (docs/MODEL.md, "Step-cost profiles" and "The physics
/// step cost").
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StepModel {
    /// `t_overhead + t_prefill_token P + t_decode_seq D + t_kv_token K` (profiles qwen3-32b-h100x2,
    /// llama-3.1-8b-h100, seed).
    Linear,
    /// From the model's shape, the GPU and the batch (profiles such as qwen3-32b-h100-tp2, or a
    /// profile TOML written by `fleet calibrate`).
    Physics,
}

impl StepModel {
    /// Its name (flag value and scenario key value).
    pub const fn name(self) -> &'static str {
        match self {
            StepModel::Linear => "linear",
            StepModel::Physics => "physics",
        }
    }

    /// The model spelled `s`.
    pub fn parse(s: &str) -> Option<Self> {
        [StepModel::Linear, StepModel::Physics].into_iter().find(|m| m.name() == s)
    }
}

/// Every profile name of both step models, for messages.
pub fn profile_names() -> String {
    let linear = Profile::ALL.map(Profile::name);
    let physics = PhysicsProfile::ALL.iter().map(|p| p.name());
    format!("linear: {}; physics: {}, or a profile .toml", linear.join(", "), physics.collect::<Vec<_>>().join(", "))
}

/// Engine settings from flags or a scenario: every field optional, the profile's and vLLM's
/// defaults fill the rest.
#[derive(Debug, Clone, Default)]
pub struct EngineSettings {
    /// Profile name (or a physics profile file).
    pub profile: Option<String>,
    /// Step-cost model.
    pub step_model: Option<StepModel>,
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
    pub(crate) fn set_names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut add = |set: bool, name| {
            if set {
                v.push(name);
            }
        };
        add(self.profile.is_some(), "profile");
        add(self.step_model.is_some(), "step-model");
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
        self.step_model = o.step_model.or(self.step_model);
        self.max_num_seqs = o.max_num_seqs.or(self.max_num_seqs);
        self.max_num_batched_tokens = o.max_num_batched_tokens.or(self.max_num_batched_tokens);
        self.t_overhead_ns = o.t_overhead_ns.or(self.t_overhead_ns);
        self.t_prefill_token_ns = o.t_prefill_token_ns.or(self.t_prefill_token_ns);
        self.t_decode_seq_ns = o.t_decode_seq_ns.or(self.t_decode_seq_ns);
        self.t_kv_token_ns = o.t_kv_token_ns.or(self.t_kv_token_ns);
        self
    }

    /// The step model and profile: `--profile` names a linear or a physics profile (or a physics
    /// profile file); `--step-model` picks the family when no profile is named and must agree
    /// with it when one is.
    fn step_profile(&self, name: &dyn Fn(&str) -> String) -> CliResult<BatchedConfig> {
        let bad = |p: &str, why: String| CliError::bad_input(format!("{} {p:?}: {why}", name("profile")));
        let chosen = match self.profile.as_deref() {
            None => match self.step_model {
                None | Some(StepModel::Linear) => BatchedConfig::new(Profile::Qwen3_32bH100x2),
                Some(StepModel::Physics) => physics_config(PhysicsProfile::Qwen3_32bH100Tp2),
            },
            Some(p) => {
                if let Some(l) = Profile::parse(p) {
                    BatchedConfig::new(l)
                } else if let Some(ph) = PhysicsProfile::parse(p) {
                    physics_config(ph)
                } else if Path::new(p).extension().is_some_and(|e| e == "toml") {
                    let phys = crate::fleet::cost::describe::load_profile(Path::new(p), &name("profile"))?;
                    BatchedConfig::with_physics(StepProfile::PhysicsFile, phys)
                } else {
                    return Err(bad(p, format!("expected one of {}", profile_names())));
                }
            }
        };
        if let Some(m) = self.step_model
            && m.name() != chosen.profile.step_model()
        {
            let p = self.profile.as_deref().unwrap_or_default();
            return Err(bad(
                p,
                format!("a {} profile, but {} is {}", chosen.profile.step_model(), name("step_model"), m.name()),
            ));
        }
        Ok(chosen)
    }

    /// The core configuration; errors name the key as `name(key)` gives it (flag or TOML key).
    pub fn config(&self, name: &dyn Fn(&str) -> String) -> CliResult<BatchedConfig> {
        let mut e = self.step_profile(name)?;
        if let Some(v) = self.max_num_seqs {
            e.max_num_seqs = v;
        }
        if let Some(v) = self.max_num_batched_tokens {
            e.max_num_batched_tokens = v;
        }
        let linear = [
            (self.t_overhead_ns, "t_overhead_ns"),
            (self.t_prefill_token_ns, "t_prefill_token_ns"),
            (self.t_decode_seq_ns, "t_decode_seq_ns"),
            (self.t_kv_token_ns, "t_kv_token_ns"),
        ];
        match e.cost.linear_mut() {
            // a linear profile's coefficients can be changed one by one
            Some(c) => {
                for (v, slot) in [
                    (self.t_overhead_ns, &mut c.t_overhead_ns),
                    (self.t_prefill_token_ns, &mut c.t_prefill_token_ns),
                    (self.t_decode_seq_ns, &mut c.t_decode_seq_ns),
                    (self.t_kv_token_ns, &mut c.t_kv_token_ns),
                ] {
                    if let Some(v) = v {
                        *slot = v;
                    }
                }
            }
            None => {
                if let Some((_, k)) = linear.iter().find(|(v, _)| v.is_some()) {
                    return Err(CliError::bad_input(format!(
                        "{}: only with the linear step model ({} {:?} is a physics profile)",
                        name(k),
                        name("profile"),
                        e.profile.name()
                    )));
                }
            }
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

/// A built-in physics profile's configuration (the built-in profiles are checked by tests).
fn physics_config(p: PhysicsProfile) -> BatchedConfig {
    BatchedConfig::physics(p).expect("the built-in physics profiles are valid")
}

/// A pod's KV capacity in blocks as the physics profile derives it (vLLM's rule), None under the
/// linear step model; an error (exit 2) when the profile leaves no memory for the KV cache.
pub fn derived_capacity(e: &BatchedConfig, flag: &str) -> CliResult<Option<usize>> {
    let Some(p) = e.cost.physics() else {
        return Ok(None);
    };
    let blocks = p
        .kv_capacity_blocks()
        .map_err(|err| CliError::bad_input(format!("{flag} {}: {err}; give --capacity", e.profile.name())))?;
    usize::try_from(blocks).ok().filter(|&b| b >= 1 && b < u32::MAX as usize).map(Some).ok_or_else(|| {
        CliError::bad_input(format!(
            "{flag} {}: derived capacity {blocks} blocks: expected 1 to 4294967294; give --capacity",
            e.profile.name()
        ))
    })
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
