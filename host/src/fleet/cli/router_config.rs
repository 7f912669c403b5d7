//! `--router-config FILE.toml`: any shipped-router pipeline (filters, weighted scorers, picker,
//! parameters), or a preset with some parameters changed. The rules are the core's
//! (`brokerlab_core::fleet::pipeline`); this file only reads TOML into a [`RouterSpec`].
//!
//! ```toml
//! preset = "dynamo-kv"          # optional: start from a preset (its policy, pipeline, parameters)
//! policy = "pipeline"           # pipeline | dynamo-kv | sglang-cache-aware | vllm-loadaware
//! picker = "max-score"          # max-score | max-score-lowest-index | random
//! filters = ["prefix-cache-affinity"]
//! [[scorers]]                   # replaces the preset's scorers when present
//! type = "precise-prefix-cache"
//! weight = 2.0                  # default 1.0, as llm-d's DefaultScorerWeight
//! [params]
//! router_temperature = 0.5
//! ```

use std::path::Path;

use brokerlab_core::fleet::{
    Error as CoreError, FilterKind, FleetConfig, MAX_FILTERS, MAX_SCORERS, PickerKind, Policy, PrefixSource, RouterKey,
    RouterKind, RouterParams, RouterSpec, ScorerKind, WeightedScorer,
};
use serde::Deserialize;

use crate::error::{CliError, CliResult};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    preset: Option<String>,
    policy: Option<Policy>,
    picker: Option<PickerKind>,
    filters: Option<Vec<FilterKind>>,
    scorers: Option<Vec<Scorer>>,
    #[serde(default)]
    params: Params,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Scorer {
    #[serde(rename = "type")]
    kind: ScorerKind,
    #[serde(default = "one")]
    weight: f64,
}

fn one() -> f64 {
    1.0
}

/// Every field of [`brokerlab_core::fleet::RouterParams`], optional.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Params {
    seed: Option<u64>,
    approx_lru_blocks: Option<u64>,
    approx_max_blocks: Option<u64>,
    prefix_source: Option<PrefixSource>,
    load_aware_threshold: Option<u32>,
    token_load_threshold: Option<u64>,
    no_hit_lru_size: Option<u32>,
    affinity_threshold: Option<f64>,
    max_ttft_penalty_ms: Option<f64>,
    peak_prefill_tokens_per_s: Option<f64>,
    overlap_score_weight: Option<f64>,
    router_temperature: Option<f64>,
    cache_threshold: Option<f64>,
    balance_abs_threshold: Option<u32>,
    balance_rel_threshold: Option<f64>,
    vllm_beta: Option<f64>,
}

impl Params {
    /// Whether the file sets `key` (a `[params]` key).
    fn has(&self, key: RouterKey) -> bool {
        match key {
            RouterKey::Filters | RouterKey::Scorers | RouterKey::Picker => false,
            RouterKey::Seed => self.seed.is_some(),
            RouterKey::ApproxLruBlocks => self.approx_lru_blocks.is_some(),
            RouterKey::ApproxMaxBlocks => self.approx_max_blocks.is_some(),
            RouterKey::PrefixSource => self.prefix_source.is_some(),
            RouterKey::LoadAwareThreshold => self.load_aware_threshold.is_some(),
            RouterKey::TokenLoadThreshold => self.token_load_threshold.is_some(),
            RouterKey::NoHitLruSize => self.no_hit_lru_size.is_some(),
            RouterKey::AffinityThreshold => self.affinity_threshold.is_some(),
            RouterKey::MaxTtftPenaltyMs => self.max_ttft_penalty_ms.is_some(),
            RouterKey::PeakPrefillTokensPerS => self.peak_prefill_tokens_per_s.is_some(),
            RouterKey::OverlapScoreWeight => self.overlap_score_weight.is_some(),
            RouterKey::RouterTemperature => self.router_temperature.is_some(),
            RouterKey::CacheThreshold => self.cache_threshold.is_some(),
            RouterKey::BalanceAbsThreshold => self.balance_abs_threshold.is_some(),
            RouterKey::BalanceRelThreshold => self.balance_rel_threshold.is_some(),
            RouterKey::VllmBeta => self.vllm_beta.is_some(),
        }
    }
}

impl File {
    /// Whether the file sets `key`.
    fn has(&self, key: RouterKey) -> bool {
        match key {
            RouterKey::Filters => self.filters.is_some(),
            RouterKey::Scorers => self.scorers.is_some(),
            RouterKey::Picker => self.picker.is_some(),
            k => self.params.has(k),
        }
    }
}

/// Reads `path`: the router kind (the preset, or `custom`), its spec, and whether the file set
/// the seed. A key the resolved router does not read is exit 2 ([`RouterSpec::reads`]).
pub fn load(path: &Path) -> CliResult<(RouterKind, RouterSpec, bool)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::bad_input(format!("--router-config {}: cannot read: {e}", path.display())))?;
    parse(&text, "--router-config", &path.display().to_string())
}

/// Most scorers of `--routing-scorers`.
pub const MAX_INLINE_SCORERS: usize = 16;

/// `--routing-scorers "precise-prefix-cache:2,kv-cache-utilization:1,queue:1"` (BLIS's inline
/// scorer list) as the router config file it stands for: those `[[scorers]]` with their weights,
/// no preset (the default policy, filters and picker), read by [`parse`] like any file.
pub fn scorers_toml(list: &str) -> CliResult<String> {
    let bad = |what: &str| {
        CliError::bad_input(format!(
            "--routing-scorers {list:?}: {what}; expected NAME:WEIGHT pairs separated by commas, e.g. \
             precise-prefix-cache:2,kv-cache-utilization:1,queue:1"
        ))
    };
    let mut t = String::new();
    let pairs: Vec<&str> = list.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    if pairs.is_empty() || pairs.len() > MAX_INLINE_SCORERS {
        return Err(bad(&format!("1 to {MAX_INLINE_SCORERS} scorers")));
    }
    for p in pairs {
        let (name, w) = p.split_once(':').ok_or_else(|| bad(&format!("`{p}` has no weight")))?;
        let w: f64 = w.trim().parse().map_err(|_| bad(&format!("`{p}`: the weight is not a number")))?;
        if !w.is_finite() {
            return Err(bad(&format!("`{p}`: the weight is not finite")));
        }
        let name = name.trim();
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') || name.is_empty() {
            return Err(bad(&format!("`{name}` is not a scorer name")));
        }
        t += &format!("[[scorers]]\ntype = \"{name}\"\nweight = {w:?}\n");
    }
    Ok(t)
}

/// Router config text given with `flag` (`shown`: the file, named in messages): as [`load`].
pub fn parse(text: &str, flag: &str, shown: &str) -> CliResult<(RouterKind, RouterSpec, bool)> {
    let f: File = toml::from_str(text).map_err(|e| CliError::bad_input(format!("{flag} {shown}: {e}")))?;
    let bad = |key: &str, expected: &str| CliError::bad_input(format!("{shown}: key `{key}`: expected {expected}"));
    let (kind, mut spec) = match &f.preset {
        Some(name) => {
            let kind = RouterKind::parse(name)
                .filter(|k| !k.is_seed())
                .ok_or_else(|| bad("preset", "a shipped router's preset (llm-d-precise, ..., vllm-loadaware)"))?;
            (kind, RouterSpec::preset(kind).expect("every non-seed parsed kind has a preset"))
        }
        None => (RouterKind::Custom, RouterSpec::EMPTY),
    };
    if f.params.approx_lru_blocks == Some(0) {
        return Err(bad(
            "params.approx_lru_blocks",
            "at least 1 key per pod (leave the key out for the pod's capacity, the default)",
        ));
    }
    let present: Vec<RouterKey> = RouterKey::ALL.into_iter().filter(|&k| f.has(k)).collect();
    let changed = f.policy.is_some() || f.picker.is_some() || f.filters.is_some() || f.scorers.is_some();
    let kind = if changed { RouterKind::Custom } else { kind };
    if let Some(p) = f.policy {
        spec.policy = p;
    }
    if let Some(p) = f.picker {
        spec.picker = p;
    }
    if let Some(fs) = f.filters {
        if fs.len() > MAX_FILTERS {
            return Err(bad("filters", &format!("at most {MAX_FILTERS} filters")));
        }
        spec.filters = [None; MAX_FILTERS];
        for (slot, k) in spec.filters.iter_mut().zip(fs) {
            *slot = Some(k);
        }
    }
    if let Some(ss) = f.scorers {
        if ss.len() > MAX_SCORERS {
            return Err(bad("scorers", &format!("at most {MAX_SCORERS} scorers")));
        }
        spec.scorers = [None; MAX_SCORERS];
        for (slot, s) in spec.scorers.iter_mut().zip(ss) {
            *slot = Some(WeightedScorer { kind: s.kind, weight: s.weight });
        }
    }
    let p = f.params;
    let q = &mut spec.params;
    macro_rules! set {
        ($($name:ident),*) => { $( if let Some(v) = p.$name { q.$name = v; } )* };
    }
    set!(
        seed,
        approx_lru_blocks,
        approx_max_blocks,
        prefix_source,
        load_aware_threshold,
        token_load_threshold,
        no_hit_lru_size,
        affinity_threshold,
        max_ttft_penalty_ms,
        peak_prefill_tokens_per_s,
        overlap_score_weight,
        router_temperature,
        cache_threshold,
        balance_abs_threshold,
        balance_rel_threshold,
        vllm_beta
    );
    spec.validate().map_err(|e| core_error(shown, e))?;
    if let Some(k) = present.into_iter().find(|&k| !spec.reads(k)) {
        return Err(CliError::bad_input(format!(
            "{shown}: key `{}`: this router does not read it ({}); only {} does: remove the key, or give a \
             router that reads it",
            k.name(),
            router_name(&spec),
            k.reader()
        )));
    }
    Ok((kind, spec, p.seed.is_some()))
}

/// The policy of `spec` and, for a pipeline, its parts, in words.
fn router_name(spec: &RouterSpec) -> String {
    match spec.policy {
        Policy::Pipeline => format!("policy \"pipeline\": {}", parts(spec)),
        p => format!("policy \"{}\"", p.name()),
    }
}

/// A pipeline's filters, scorers and picker, e.g. `scorers precise-prefix-cache 3, queue 2;
/// picker max-score`.
fn parts(spec: &RouterSpec) -> String {
    let filters: Vec<&str> = spec.filters.iter().flatten().map(|f| f.name()).collect();
    let scorers: Vec<String> =
        spec.scorers.iter().flatten().map(|w| format!("{} {}", w.kind.name(), w.weight)).collect();
    let mut o = String::new();
    if !filters.is_empty() {
        o += &format!("filters {}; ", filters.join(", "));
    }
    if !scorers.is_empty() {
        o += &format!("scorers {}; ", scorers.join(", "));
    }
    o + &format!("picker {}", spec.picker.name())
}

/// The resolved router of a `--router-config` run in one line (the table's `router` line and
/// the JSON's `pipeline`): its preset or `custom`, the policy and pipeline, and every parameter
/// that differs from the default.
pub fn describe(cfg: &FleetConfig) -> Option<String> {
    let spec = cfg.routing?;
    let mut o = format!("{}: ", cfg.router);
    o += &match spec.policy {
        Policy::Pipeline => format!("policy pipeline; {}", parts(&spec)),
        p => format!("policy {}", p.name()),
    };
    let (d, q) = (RouterParams::DEFAULT, spec.params);
    let mut changed: Vec<String> = Vec::new();
    macro_rules! diff {
        ($($name:ident),*) => { $( if q.$name != d.$name { changed.push(format!("{} {:?}", stringify!($name), q.$name)); } )* };
    }
    diff!(
        seed,
        approx_lru_blocks,
        approx_max_blocks,
        prefix_source,
        load_aware_threshold,
        token_load_threshold,
        no_hit_lru_size,
        affinity_threshold,
        max_ttft_penalty_ms,
        peak_prefill_tokens_per_s,
        overlap_score_weight,
        router_temperature,
        cache_threshold,
        balance_abs_threshold,
        balance_rel_threshold,
        vllm_beta
    );
    if !changed.is_empty() {
        o += &format!("; params {}", changed.join(", "));
    }
    Some(o)
}

/// Records a `--router-config` file in the provenance: the file (path, SHA-256) among the
/// inputs, and the resolved router (`cfg.routing`) as `router_pipeline`.
pub fn record(prov: &mut crate::provenance::Provenance, path: Option<&Path>, cfg: &FleetConfig) -> CliResult<()> {
    let Some(path) = path else { return Ok(()) };
    prov.add_file("router-config", path)?;
    prov.router_pipeline = cfg.routing.map(|spec| serde_json::json!({ "router": cfg.router, "spec": spec }));
    Ok(())
}

fn core_error(origin: &str, e: CoreError) -> CliError {
    match crate::fleet::run::fields::refused(e) {
        Ok((field, expected)) => {
            // the config file's key, from the one table of fields
            let key = crate::fleet::run::fields::key(field);
            CliError::bad_input(format!("{origin}: key `{key}`: expected {expected}"))
        }
        Err(other) => CliError::bad_input(format!("{origin}: {other}")),
    }
}

/// Applies `--router-config` (when given) to `cfg`, and gives a shipped router the run's `seed`
/// (unless the file set one).
pub fn apply(cfg: &mut FleetConfig, router_config: Option<&Path>, seed: u64) -> CliResult<()> {
    apply_loaded(cfg, router_config.map(load).transpose()?, seed)
}

/// [`apply`] for `--routing-scorers LIST` ([`scorers_toml`]).
pub fn apply_scorers(cfg: &mut FleetConfig, list: &str, seed: u64) -> CliResult<()> {
    let loaded = parse(&scorers_toml(list)?, "--routing-scorers", &format!("{list:?}"))?;
    apply_loaded(cfg, Some(loaded), seed)
}

fn apply_loaded(cfg: &mut FleetConfig, loaded: Option<(RouterKind, RouterSpec, bool)>, seed: u64) -> CliResult<()> {
    let mut seeded = false;
    if let Some(loaded) = loaded {
        let (kind, spec, file_seed) = loaded;
        cfg.router = kind;
        cfg.routing = Some(spec);
        seeded = file_seed;
    }
    if let Some(mut spec) = cfg.router_spec() {
        if !seeded {
            spec.params.seed = seed;
        }
        cfg.routing = Some(spec);
    }
    Ok(())
}
