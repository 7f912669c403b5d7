//! The engine a run uses, from flags or a scenario: the engine kinds, the batched engine's
//! settings (docs/MODEL.md, "The batched engine"; the flags that set them are
//! `cli::engine_args`, a scenario's `[fleet.engine]` sets them too), and the one place that turns
//! a fleet's configuration into the batched engine's, refusing what only the FIFO engine
//! supports, in the words of the flag or the scenario key that set it.

use std::path::Path;

use brokerlab_core::fleet::cost::{Calibration, StepCost};
use brokerlab_core::fleet::engine::pd::{Decider, PdConfig};
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
    /// Offload tier: CPU-tier blocks per pod (the scenario's `[fleet.engine] cpu_capacity`;
    /// the flag `--cpu-capacity` reaches the engine through [`batched`]).
    pub cpu_capacity: Option<u32>,
    /// Offload tier: host-to-device bytes/s.
    pub pcie_bytes_per_s: Option<u64>,
    /// Offload tier: ns per load.
    pub pcie_latency_ns: Option<u64>,
    /// Offload tier: CPU-tier weight, decimal text.
    pub cpu_tier_weight: Option<String>,
    /// KV bytes of one token of a pod.
    pub kv_bytes_per_token: Option<u64>,
    /// P/D: NP (0 or None: off).
    pub prefill_pods: Option<u32>,
    /// P/D: C_P.
    pub prefill_capacity: Option<usize>,
    /// P/D: the prefill pool's profile.
    pub prefill_profile: Option<String>,
    /// P/D: the decider's name.
    pub pd_decider: Option<String>,
    /// P/D: N_T.
    pub pd_threshold_tokens: Option<u64>,
    /// P/D: link bytes/s.
    pub pd_link_bytes_per_s: Option<u64>,
    /// P/D: link latency, ns.
    pub pd_link_latency_ns: Option<u64>,
    /// Autoscaling's WVA thresholds (a scenario's `[fleet.autoscale]`, checked; `fleet replay`
    /// sets them from its --scale-* flags).
    pub wva: Option<brokerlab_core::fleet::WvaThresholds>,
    /// Full blocks of generated tokens are cached (the scenario's `[fleet.engine]
    /// cache_generated_tokens`; default off).
    pub cache_generated_tokens: Option<bool>,
    /// The router reads vLLM's gauges scraped every this many ms (the scenario's `[fleet.engine]
    /// metrics_scrape_ms`; default: the engine's own signals).
    pub metrics_scrape_ms: Option<u64>,
    /// vLLM's full-sequence admission gate (`scheduler_reserve_full_isl`; the scenario's
    /// `[fleet.engine] reserve_full_isl`, the flag `--reserve-full-isl`; default off).
    pub reserve_full_isl: Option<bool>,
    /// Physics profiles: the shared-prefix read factor, a decimal in [0, 1] with at most six
    /// digits after the point (the scenario's `[fleet.engine] shared_kv_read`, the flag
    /// `--shared-kv-read`; default 1: off). Sets the profile's `shared_kv_read_ppm`.
    pub shared_kv_read: Option<String>,
}

/// A fraction in [0, 1] given as a decimal with at most six digits after the point, in parts
/// per million (`--shared-kv-read`, `[fleet.engine] shared_kv_read`).
pub fn parse_fraction_ppm(text: &str) -> Result<u32, &'static str> {
    let why = "expected a decimal between 0 and 1 with at most six digits after the point";
    let t = text.trim();
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty() || !digits(int) || !digits(frac) {
        return Err(why);
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > 6 || int.len() > 7 {
        return Err(why);
    }
    let whole: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| why)? };
    let part: u64 = if frac.is_empty() { 0 } else { format!("{frac:0<6}").parse().map_err(|_| why)? };
    let ppm = whole * 1_000_000 + part;
    if ppm > 1_000_000 {
        return Err(why);
    }
    Ok(ppm as u32)
}

/// The `[fleet.pd]` key of a P/D setting's field name (None for other fields).
pub fn pd_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "prefill_pods" => "prefill_pods",
        "prefill_capacity" => "prefill_capacity",
        "prefill_profile" => "prefill_profile",
        "pd_decider" => "decider",
        "pd_threshold_tokens" => "threshold_tokens",
        "pd_link_bytes_per_s" => "link_bytes_per_s",
        "pd_link_latency_ns" => "link_latency_ns",
        _ => return None,
    })
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
        add(self.cpu_capacity.is_some(), "cpu-capacity");
        add(self.pcie_bytes_per_s.is_some(), "pcie-bytes-per-s");
        add(self.pcie_latency_ns.is_some(), "pcie-latency-ns");
        add(self.cpu_tier_weight.is_some(), "cpu-tier-weight");
        add(self.kv_bytes_per_token.is_some(), "kv-bytes-per-token");
        add(self.prefill_pods.is_some(), "prefill-pods");
        add(self.prefill_capacity.is_some(), "prefill-capacity");
        add(self.prefill_profile.is_some(), "prefill-profile");
        add(self.pd_decider.is_some(), "pd-decider");
        add(self.pd_threshold_tokens.is_some(), "pd-threshold-tokens");
        add(self.pd_link_bytes_per_s.is_some(), "pd-link-bytes-per-s");
        add(self.pd_link_latency_ns.is_some(), "pd-link-latency-ns");
        add(self.cache_generated_tokens.is_some(), "cache-generated-tokens");
        add(self.metrics_scrape_ms.is_some(), "metrics-scrape-ms");
        add(self.reserve_full_isl.is_some(), "reserve-full-isl");
        add(self.shared_kv_read.is_some(), "shared-kv-read");
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
        self.cpu_capacity = o.cpu_capacity.or(self.cpu_capacity);
        self.pcie_bytes_per_s = o.pcie_bytes_per_s.or(self.pcie_bytes_per_s);
        self.pcie_latency_ns = o.pcie_latency_ns.or(self.pcie_latency_ns);
        if o.cpu_tier_weight.is_some() {
            self.cpu_tier_weight.clone_from(&o.cpu_tier_weight);
        }
        self.kv_bytes_per_token = o.kv_bytes_per_token.or(self.kv_bytes_per_token);
        self.prefill_pods = o.prefill_pods.or(self.prefill_pods);
        self.prefill_capacity = o.prefill_capacity.or(self.prefill_capacity);
        if o.prefill_profile.is_some() {
            self.prefill_profile.clone_from(&o.prefill_profile);
        }
        if o.pd_decider.is_some() {
            self.pd_decider.clone_from(&o.pd_decider);
        }
        self.pd_threshold_tokens = o.pd_threshold_tokens.or(self.pd_threshold_tokens);
        self.pd_link_bytes_per_s = o.pd_link_bytes_per_s.or(self.pd_link_bytes_per_s);
        self.pd_link_latency_ns = o.pd_link_latency_ns.or(self.pd_link_latency_ns);
        self.wva = o.wva.or(self.wva);
        self.cache_generated_tokens = o.cache_generated_tokens.or(self.cache_generated_tokens);
        self.metrics_scrape_ms = o.metrics_scrape_ms.or(self.metrics_scrape_ms);
        self.reserve_full_isl = o.reserve_full_isl.or(self.reserve_full_isl);
        if o.shared_kv_read.is_some() {
            self.shared_kv_read.clone_from(&o.shared_kv_read);
        }
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
        let kv_default = e.profile_kv_bytes_per_token();
        let off = &mut e.offload;
        off.kv_bytes_per_token = self.kv_bytes_per_token.unwrap_or(kv_default);
        if let Some(v) = self.cpu_capacity {
            off.cpu_capacity = v;
        }
        if let Some(v) = self.pcie_bytes_per_s {
            off.pcie_bytes_per_s = v;
        }
        if let Some(v) = self.pcie_latency_ns {
            off.pcie_latency_ns = v;
        }
        if let Some(w) = &self.cpu_tier_weight {
            off.cpu_tier_weight_milli = super::deploy::parse_weight_milli(w)
                .map_err(|why| CliError::bad_input(format!("{} {w:?}: {why}", name("cpu_tier_weight"))))?;
        }
        if let Some(np) = self.prefill_pods.filter(|&np| np > 0) {
            e.pd = Some(self.pd_config(np, &e, name)?);
        }
        if let Some(t) = self.wva {
            e.wva = t;
        }
        if let Some(g) = self.cache_generated_tokens {
            if g && e.pd.is_some() {
                return Err(CliError::bad_input(format!(
                    "{}: expected false with prefill/decode disaggregation (not modelled together)",
                    name("cache_generated_tokens")
                )));
            }
            e.cache_generated_tokens = g;
        }
        if let Some(g) = self.reserve_full_isl {
            e.reserve_full_isl = g;
        }
        if let Some(f) = &self.shared_kv_read {
            let key = name("shared_kv_read");
            let ppm = parse_fraction_ppm(f).map_err(|why| CliError::bad_input(format!("{key} {f:?}: {why}")))?;
            let Some(p) = e.cost.physics() else {
                return Err(CliError::bad_input(format!(
                    "{key}: only with a physics profile ({} {:?} is linear)",
                    name("profile"),
                    e.profile.name()
                )));
            };
            let cal = Calibration { shared_kv_read_ppm: ppm, ..*p.calibration() };
            let p = p.with_calibration(cal).map_err(|err| CliError::bad_input(format!("{key} {f:?}: {err}")))?;
            e.cost = StepCost::Physics(p);
        }
        if let Some(ms) = self.metrics_scrape_ms {
            // at most an hour: the scrape interval in ns stays far from overflow
            if ms == 0 || ms > 3_600_000 {
                return Err(CliError::bad_input(format!(
                    "{} {ms}: expected between 1 and 3600000 ms (leave it out for the engine's own signals)",
                    name("metrics_scrape_ms")
                )));
            }
            e.metrics_scrape_ns = ms * 1_000_000;
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

impl EngineSettings {
    /// The P/D configuration with NP = `np` over the decode pool's engine `decode`; C_P is 0
    /// ("the decode pool's C") until [`batched`] knows C.
    fn pd_config(&self, np: u32, decode: &BatchedConfig, name: &dyn Fn(&str) -> String) -> CliResult<PdConfig> {
        let mut pd = PdConfig::new(np, 0);
        if let Some(c) = self.prefill_capacity {
            if c == 0 {
                return Err(CliError::bad_input(format!("{}: expected at least 1 block", name("prefill_capacity"))));
            }
            pd.prefill_capacity_blocks = c;
        }
        if let Some(p) = &self.prefill_profile {
            let one = EngineSettings { profile: Some(p.clone()), ..EngineSettings::default() };
            let rename = |k: &str| if k == "profile" { name("prefill_profile") } else { name(k) };
            let c = one.step_profile(&rename)?;
            pd.prefill_cost = Some((c.profile, c.cost));
        }
        if let Some(d) = &self.pd_decider {
            pd.decider = Decider::parse(d).ok_or_else(|| {
                CliError::bad_input(format!("{} {d:?}: expected prefix-threshold, always or never", name("pd_decider")))
            })?;
        }
        if let Some(v) = self.pd_threshold_tokens {
            pd.threshold_tokens = v;
        }
        if let Some(v) = self.pd_link_bytes_per_s {
            pd.link_bytes_per_s = v;
        }
        if let Some(v) = self.pd_link_latency_ns {
            pd.link_latency_ns = v;
        }
        let _ = decode;
        Ok(pd)
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
    let mut e = e;
    if let Some(f) = cfg.fifo()
        && f.cpu_capacity_blocks > 0
    {
        // --cpu-capacity under the batched engine: its offload tier (docs/MODEL.md, "The KV
        // offload tier"), vLLM's store-on-compute rule rather than the FIFO tier's
        let Ok(c2) = u32::try_from(f.cpu_capacity_blocks) else {
            return bad(Field::CpuCapacity, "at most 4294967294 blocks");
        };
        e.offload.cpu_capacity = c2;
    }
    if let Some(pd) = e.pd.as_mut() {
        use brokerlab_core::fleet::sim::pools::{PoolRole, min_capacity};
        // with pools, C_P is the smallest prefill pool's (what a request is checked against)
        if let Some(c) = min_capacity(cfg.pools, cfg.capacity_blocks, PoolRole::Prefill) {
            pd.prefill_capacity_blocks = c;
        } else if pd.prefill_capacity_blocks == 0 {
            pd.prefill_capacity_blocks = cfg.capacity_blocks;
        }
    }
    // autoscaling: the pod counts, interval and startup, under the WVA saturation rule
    // (docs/MODEL.md, "Autoscaling under the batched engine")
    if cfg.fifo().is_some() {
        e.scale = cfg.scale();
    }
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
    if let Some(f) = cfg.fifo()
        && f.cache != CacheMode::Local
    {
        return bad(Field::Cache, "local with --engine batched");
    }
    Ok(b)
}

#[cfg(test)]
mod shared_kv_read_tests {
    use super::parse_fraction_ppm;

    #[test]
    fn a_fraction_is_read_exactly_in_ppm() {
        for (text, ppm) in [
            ("0", 0),
            ("1", 1_000_000),
            ("1.0", 1_000_000),
            ("0.45", 450_000),
            (".5", 500_000),
            ("0.000001", 1),
            ("0.4500000", 450_000),
            ("0.999999", 999_999),
        ] {
            assert_eq!(parse_fraction_ppm(text), Ok(ppm), "{text}");
        }
        for bad in ["", ".", "1.000001", "2", "-0.1", "0.1234567", "abc", "0,5", "1e-3", "0.5.1", "99999999"] {
            assert!(parse_fraction_ppm(bad).is_err(), "{bad}");
        }
    }
}
