//! Scenario files (TOML): a workload, a fleet, a router and timing. Unknown keys are errors that
//! name the key.

use std::path::Path;

use brokerlab_core::fleet::workload::{
    DocOrder, Layout, MAX_OUTPUT_CHOICES, MAX_STAGES, Popularity, Stage, SuffixScope, WorkloadSpec,
};
use brokerlab_core::fleet::{
    EngineConfig, Field, FifoConfig, FleetConfig, RouterSpec, ScalePolicy, ViewConfig, WvaThresholds,
};

use crate::error::{CliError, CliResult, FleetError};

// The file's schema (serde types and their defaults) and the generated workloads are their own
// files; this one turns a parsed file into the checked core configuration.
pub mod builtin;
mod conversations;
pub mod deploy;
pub mod engine;
mod generated;
pub mod inference_perf;
pub mod load;
pub mod pools;
pub mod rate_scale;
mod schema;

pub use generated::{Generated, Streamed, write_trace, write_trace_from};
pub use schema::*;

/// A parsed, checked scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Workload.
    pub workload: WorkloadSpec,
    /// Fleet, under the FIFO engine (with `engine`, the run converts it:
    /// [`crate::fleet::scenario::engine::batched`]).
    pub fleet: FleetConfig,
    /// The file (or built-in name) it came from, for messages.
    pub origin: String,
    /// `[fleet.engine]` when it selects the batched engine (None: FIFO).
    pub engine: Option<crate::fleet::scenario::engine::EngineSettings>,
    /// `[load]`: the client as a load generator (None: open-loop arrivals from the workload).
    pub load: Option<brokerlab_core::fleet::loadgen::LoadSpec>,
    /// `[workload.conversations]`: conversation replay (then `workload` is a placeholder that
    /// carries the seed only, and the scenario runs under `fleet run` and `fleet tables` only).
    pub conversations: Option<brokerlab_core::fleet::conversation::ConversationSpec>,
    /// `[slo]`: SLO goodput's SLOs (None: no SLO keys unless a flag gives one).
    pub slo: Option<brokerlab_core::fleet::slo::Slo>,
    /// `[fleet.autoscale]`'s rule-specific keys as given (policy, up_queue, down_queue, the WVA
    /// keys), checked again when the command line picks the other engine.
    pub scale_given: Option<(Option<String>, bool, bool, WvaGiven)>,
}

impl Scenario {
    /// Refuses `[fleet.autoscale]` keys of the FIFO engine's rule (`policy = "queue-target"`,
    /// `up_queue`, `down_queue`) when the command line runs the scenario under the batched
    /// engine (`--engine batched` over a scenario without `[fleet.engine]`), and the WVA keys
    /// under `--engine fifo`: exit 2 naming the key, as in a file that names its engine (the
    /// other rule would ignore them). A scenario without those keys scales by the engine's rule.
    pub fn check_scale_engine(&self, batched: bool) -> CliResult<()> {
        let Some((policy, up_queue, down_queue, wva)) = &self.scale_given else { return Ok(()) };
        let given = ScaleGiven { policy: policy.as_deref(), up_queue: *up_queue, down_queue: *down_queue, wva: *wva };
        check_scale_rule(batched, &given).map_err(|(field, expected, got)| {
            CliError::bad_input(format!(
                "{}: `{}` = {got:?}: expected {expected} (the command runs the {} engine: --engine {})",
                self.origin,
                crate::fleet::run::fields::key(field),
                if batched { "batched" } else { "FIFO" },
                if batched { "batched" } else { "fifo" }
            ))
        })
    }
}

impl Scenario {
    /// The FIFO engine's settings of the scenario's `[fleet]` (a scenario's fleet is read under
    /// the FIFO engine; its `[fleet.engine]` is `engine`).
    pub fn fifo(&self) -> brokerlab_core::fleet::FifoConfig {
        self.fleet.fifo().copied().unwrap_or(brokerlab_core::fleet::defaults::FIFO)
    }
}

/// A configuration error of a scenario file `origin`, naming the scenario key of the field.
pub fn key_error(origin: &str, e: brokerlab_core::fleet::Error) -> CliError {
    match crate::fleet::run::fields::refused(e) {
        Ok((field, expected)) => FleetError::Key { origin: origin.to_string(), field, expected }.into(),
        Err(other) => CliError::bad_input(format!("{origin}: {other}")),
    }
}

impl Scenario {
    /// Refuses a scenario with `[load]` in `command`, which runs open-loop arrivals only (exit 2
    /// naming the key, never a silently different workload).
    pub fn without_load(self, command: &str) -> CliResult<Self> {
        match self.load {
            Some(_) => Err(CliError::bad_input(format!(
                "{}: `load`: {command} runs a workload's own arrivals; the load generator ([load]) runs under `fleet run` and `fleet compare` only",
                self.origin
            ))),
            None => Ok(self),
        }
    }

    /// Reads and checks a scenario file (one with `[workload.conversations]` is refused: see
    /// [`Self::load_any`]).
    pub fn load(path: &Path) -> CliResult<Self> {
        Self::load_any(path)?.without_conversations("this command")
    }

    /// Reads and checks a scenario file, conversation replay included.
    pub fn load_any(path: &Path) -> CliResult<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::bad_input(format!("{}: cannot read scenario: {e}", path.display())))?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Self::parse_any(&text, &path.display().to_string(), &stem)
    }

    /// Refuses a conversation-replay scenario in `command` (exit 2 naming the key).
    pub fn without_conversations(self, command: &str) -> CliResult<Self> {
        match self.conversations {
            Some(_) => Err(CliError::bad_input(format!(
                "{}: `workload.conversations`: {command} runs synthetic workloads; conversation replay runs under `fleet run` (and `fleet tables`) only",
                self.origin
            ))),
            None => Ok(self),
        }
    }

    /// Parses scenario TOML; `origin` names the file in messages. Conversation replay is refused
    /// ([`Self::parse_any`] takes it).
    pub fn parse(text: &str, origin: &str, default_name: &str) -> CliResult<Self> {
        Self::parse_any(text, origin, default_name)?.without_conversations("this command")
    }

    /// Parses scenario TOML, conversation replay included.
    pub fn parse_any(text: &str, origin: &str, default_name: &str) -> CliResult<Self> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let t: ScenarioToml = toml::from_str(text).map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
        let bad = |field: &str, expected: &str, got: &str| {
            CliError::bad_input(format!("{origin}: `{field}` = {got:?}: expected {expected}"))
        };
        let workload = match &t.workload.conversations {
            None => workload_spec(&t.workload, t.load.is_some(), origin, &bad)?,
            Some(_) => conversations::placeholder(&t.workload, origin, &bad)?,
        };
        let pool_list = t.fleet.pool.as_deref();
        let pool_lines = pool_list.map(|_| pools::PoolLines::of(text)).unwrap_or_default();
        // (a pool of 0 pods named before the pods' sum is)
        if let Some(i) = pool_list.and_then(|l| l.iter().position(|p| p.pods == 0)) {
            return Err(CliError::bad_input(format!(
                "{}: `fleet.pool[{}].pods` = \"0\": expected at least 1 pod",
                pool_lines.at(origin, i, "pods"),
                i + 1
            )));
        }
        let pods = match (t.fleet.pods, pool_list) {
            (Some(n), _) => n,
            (None, Some(list)) => list.iter().map(|p| p.pods as usize).sum(),
            (None, None) => return Err(bad("fleet.pods", "a pod count (or [[fleet.pool]] tables)", "none")),
        };
        if pool_list.is_none() && t.fleet.pd.as_ref().is_some_and(|p| p.prefill_pods.is_none()) {
            return Err(bad(
                "fleet.pd.prefill_pods",
                "a pod count (or [[fleet.pool]] tables with prefill and decode pools)",
                "none",
            ));
        }
        let mut fleet = fleet_config(&t.fleet, pods, t.workload.seed, origin, &bad)?;
        let mut engine = engine_settings(
            t.fleet.engine.as_ref(),
            t.fleet.pd.as_ref(),
            t.fleet.autoscale.as_ref(),
            fleet,
            origin,
            &bad,
        )?;
        if let Some(list) = pool_list {
            (fleet, engine) = with_pools(list, &pool_lines, t.fleet.pd.as_ref(), fleet, engine, origin)?;
        }
        let load = match &t.load {
            None => None,
            Some(l) => Some(load::load_spec(l, &workload, origin, &bad)?),
        };
        let max_model_len = t.fleet.engine.as_ref().and_then(|e| e.max_model_len);
        let conversations = match &t.workload.conversations {
            None => {
                // only conversation replay sends keys past the prompt: anything else would cache
                // nothing more with it (docs/MODEL.md, "Generated tokens")
                if t.fleet.engine.as_ref().and_then(|e| e.cache_generated_tokens) == Some(true) {
                    return Err(bad(
                        "fleet.engine.cache_generated_tokens",
                        "absent (or false) unless [workload.conversations]: only conversation replay sends a request's generated tokens as the next turn's prompt; a synthetic workload's or a trace's requests carry prompt keys only, so no generated block would ever be cached",
                        "true",
                    ));
                }
                if let Some(m) = max_model_len {
                    return Err(bad(
                        "fleet.engine.max_model_len",
                        "absent unless [workload.conversations]",
                        &m.to_string(),
                    ));
                }
                None
            }
            Some(c) => Some(conversations::spec(c, t.workload.seed, max_model_len, load.as_ref(), origin, &bad)?),
        };
        let slo = match &t.slo {
            None => None,
            Some(s) => Some(deploy::slo_of_toml(s.ttft_ms, s.tpot_ms, origin)?),
        };
        let scale_given = t
            .fleet
            .autoscale
            .as_ref()
            .map(|a| (a.policy.clone(), a.up_queue.is_some(), a.down_queue.is_some(), a.wva()));
        Ok(Scenario {
            engine,
            load,
            conversations,
            slo,
            scale_given,
            name: t.name.unwrap_or_else(|| default_name.to_string()),
            description: t.description.unwrap_or_default(),
            workload,
            fleet,
            origin: origin.to_string(),
        })
    }
}

/// A scenario's `[workload]` as the core's workload, checked; errors name the key.
fn workload_spec(
    w: &WorkloadToml,
    with_load: bool,
    origin: &str,
    bad: &dyn Fn(&str, &str, &str) -> CliError,
) -> CliResult<WorkloadSpec> {
    let popularity = match w.popularity.split_once(':') {
        None if w.popularity == "uniform" => Popularity::Uniform,
        None if w.popularity == "cycle" => Popularity::Cycle,
        Some(("zipf", s)) => match s.parse::<f64>().ok().and_then(|v| milli_exact(v, 10.0).ok()) {
            Some(m) => Popularity::Zipf { s_milli: m as u32 },
            _ => {
                return Err(bad("workload.popularity", "zipf:S with 0 <= S <= 10, a multiple of 0.001", &w.popularity));
            }
        },
        _ => return Err(bad("workload.popularity", "\"uniform\", \"zipf:S\" or \"cycle\"", &w.popularity)),
    };
    let layout = match w.layout.as_str() {
        "stable-prefix-first" => Layout::StablePrefixFirst,
        "timestamp-first" => Layout::TimestampFirst,
        other => return Err(bad("workload.layout", "\"stable-prefix-first\" or \"timestamp-first\"", other)),
    };
    let (stages, stages_len) = parse_stages(w.stages.as_deref(), bad)?;
    let rate_milli_per_s = match (w.rate_per_s, stages_len) {
        (Some(r), 0) => rate_milli(r).map_err(|exp| bad("workload.rate_per_s", &exp, &num(r)))?,
        // with [load] the workload is a data set: its arrival times are never used
        (None, 0) if with_load => 0,
        (None, 0) => {
            return Err(bad("workload.rate_per_s", "a rate in requests/s (or [[workload.stages]] or [load])", "none"));
        }
        (Some(r), _) => {
            return Err(bad("workload.rate_per_s", "absent when [[workload.stages]] is given", &num(r)));
        }
        (None, _) => 0,
    };
    let suffix_scope = match w.suffix_scope.as_deref() {
        None | Some("request") => SuffixScope::Request,
        Some("user") => SuffixScope::User,
        Some(other) => return Err(bad("workload.suffix_scope", "\"request\" or \"user\"", other)),
    };
    let (rag_docs, rag_doc_tokens, rag_per_request, rag_order) = match &w.rag {
        None => (0, 0, 0, DocOrder::Random),
        Some(r) => {
            let order = match r.order.as_str() {
                "random" => DocOrder::Random,
                "sorted" => DocOrder::Sorted,
                other => return Err(bad("workload.rag.order", "\"random\" or \"sorted\"", other)),
            };
            (r.docs, r.doc_tokens, r.per_request, order)
        }
    };
    let (burst_rate_milli_per_s, burst_start_ms, burst_ms) = match &w.burst {
        None => (0, 0, 0),
        Some(b) => {
            let rate =
                rate_milli(b.rate_per_s).map_err(|e| bad("workload.burst.rate_per_s", &e, &num(b.rate_per_s)))?;
            let secs = |v: f64, key| milli_exact(v, 1e10).map_err(|e| bad(key, &format!("seconds: {e}"), &num(v)));
            let start = secs(b.start_s, "workload.burst.start_s")?;
            let len = secs(b.duration_s, "workload.burst.duration_s")?;
            (rate, start, len)
        }
    };
    let out_range = w.output_tokens.unwrap_or([0, 0]);
    let mut output_choices = [0u32; MAX_OUTPUT_CHOICES];
    let output_choices_len = match &w.output_tokens_choices {
        None => 0,
        Some(_) if w.output_tokens.is_some() => {
            return Err(bad("workload.output_tokens_choices", "either output_tokens or output_tokens_choices", "both"));
        }
        Some(v) if v.is_empty() || v.len() > MAX_OUTPUT_CHOICES => {
            return Err(bad(
                "workload.output_tokens_choices",
                &format!("1 to {MAX_OUTPUT_CHOICES} values"),
                &format!("{v:?}"),
            ));
        }
        Some(v) => {
            output_choices[..v.len()].copy_from_slice(v);
            v.len() as u32
        }
    };
    let need = |key: &str| bad(key, "a value (required without [workload.conversations])", "none");
    let suffix = w.suffix_tokens.ok_or_else(|| need("workload.suffix_tokens"))?;
    let workload = WorkloadSpec {
        seed: w.seed,
        requests: w.requests.ok_or_else(|| need("workload.requests"))?,
        tenants: w.tenants.ok_or_else(|| need("workload.tenants"))?,
        users_per_tenant: w.users_per_tenant,
        prefix_tokens: w.prefix_tokens.ok_or_else(|| need("workload.prefix_tokens"))?,
        suffix_min_tokens: suffix[0],
        suffix_max_tokens: suffix[1],
        output_min_tokens: out_range[0],
        output_max_tokens: out_range[1],
        output_choices,
        output_choices_len,
        popularity,
        rate_milli_per_s,
        layout,
        header_tokens: w.header_tokens,
        rag_docs,
        rag_doc_tokens,
        rag_per_request,
        rag_order,
        burst_rate_milli_per_s,
        burst_start_ms,
        burst_ms,
        suffix_scope,
        stages,
        stages_len,
    };
    workload.validate().map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
    Ok(workload)
}

/// A scenario's `[fleet]` as the core's FIFO fleet configuration, checked (the preset router's
/// RNG seeded from the workload's `seed`); errors name the key.
fn fleet_config(
    f: &FleetToml,
    pods: usize,
    seed: u64,
    origin: &str,
    bad: &dyn Fn(&str, &str, &str) -> CliError,
) -> CliResult<FleetConfig> {
    let engine = FifoConfig {
        t_prefill_ns: f.t_prefill_ns,
        t_decode_ns: f.t_decode_ns,
        order: f.order,
        cpu_capacity_blocks: f.cpu_capacity,
        t_cpu_ns: f.t_cpu_ns,
        cache: f.cache,
    };
    let view = ViewConfig { index: f.index, stale_delay: f.stale, ..brokerlab_core::fleet::defaults::VIEW };
    if let Some(a) = &f.autoscale {
        let batched = f.engine.as_ref().is_some_and(|e| e.model.as_deref() != Some("fifo"));
        let given = ScaleGiven {
            policy: a.policy.as_deref(),
            up_queue: a.up_queue.is_some(),
            down_queue: a.down_queue.is_some(),
            wva: a.wva(),
        };
        check_scale_rule(batched, &given)
            .map_err(|(field, expected, got)| bad(&crate::fleet::run::fields::key(field), expected, &got))?;
    }
    let fleet = FleetConfig {
        pods,
        capacity_blocks: f.capacity,
        router: f.router,
        alpha: f.alpha,
        // The preset's defaults, its RNG seeded from the scenario's seed.
        routing: RouterSpec::preset(f.router).map(|mut s| {
            s.params.seed = seed;
            s
        }),
        engine: EngineConfig::Fifo {
            engine,
            view,
            scale: match &f.autoscale {
                None => None,
                Some(a) => Some(
                    scale_policy(
                        pods,
                        a.min,
                        a.initial,
                        a.interval_s,
                        a.up_queue.unwrap_or_else(schema::up_queue),
                        a.down_queue.unwrap_or_else(schema::down_queue),
                        a.startup_s,
                    )
                    .map_err(|(field, expected, got)| bad(&crate::fleet::run::fields::key(field), expected, &got))?,
                ),
            },
        },
        // `[[fleet.pool]]` is set on the checked fleet (`with_pools`)
        pools: &[],
    };
    fleet.validate().map_err(|e| key_error(origin, e))?;
    Ok(fleet)
}

/// A scenario's `[fleet.engine]`: None for the FIFO engine, else the batched engine's settings,
/// checked against `fleet` (what only the FIFO engine supports is refused, naming the key).
fn engine_settings(
    engine: Option<&EngineToml>,
    pd: Option<&schema::PdToml>,
    autoscale: Option<&AutoscaleToml>,
    fleet: FleetConfig,
    origin: &str,
    bad: &dyn Fn(&str, &str, &str) -> CliError,
) -> CliResult<Option<crate::fleet::scenario::engine::EngineSettings>> {
    if pd.is_some() && engine.is_none_or(|e| e.model.as_deref() == Some("fifo")) {
        return Err(CliError::bad_input(format!(
            "{origin}: `fleet.pd`: only with the batched engine (`[fleet.engine]`)"
        )));
    }
    Ok(match engine {
        None => None,
        Some(e) => match e.model.as_deref().unwrap_or("batched") {
            "fifo" => None,
            "batched" => {
                let step_model = match e.step_model.as_deref() {
                    None => None,
                    Some(m) => Some(
                        crate::fleet::scenario::engine::StepModel::parse(m)
                            .ok_or_else(|| bad("fleet.engine.step_model", "\"linear\" or \"physics\"", m))?,
                    ),
                };
                let s = crate::fleet::scenario::engine::EngineSettings {
                    profile: e.profile.clone(),
                    step_model,
                    max_num_seqs: e.max_num_seqs,
                    max_num_batched_tokens: e.max_num_batched_tokens,
                    t_overhead_ns: e.t_overhead_ns,
                    t_prefill_token_ns: e.t_prefill_token_ns,
                    t_decode_seq_ns: e.t_decode_seq_ns,
                    t_kv_token_ns: e.t_kv_token_ns,
                    cpu_capacity: e.cpu_capacity,
                    pcie_bytes_per_s: e.pcie_bytes_per_s,
                    pcie_latency_ns: e.pcie_latency_ns,
                    // a TOML number: its shortest decimal text, checked as the flag's is
                    cpu_tier_weight: e.cpu_tier_weight.map(|w| format!("{w}")),
                    kv_bytes_per_token: e.kv_bytes_per_token,
                    prefill_pods: pd.and_then(|p| p.prefill_pods),
                    prefill_capacity: pd.and_then(|p| p.prefill_capacity),
                    prefill_profile: pd.and_then(|p| p.prefill_profile.clone()),
                    pd_decider: pd.and_then(|p| p.decider.clone()),
                    pd_threshold_tokens: pd.and_then(|p| p.threshold_tokens),
                    pd_link_bytes_per_s: pd.and_then(|p| p.link_bytes_per_s),
                    pd_link_latency_ns: pd.and_then(|p| p.link_latency_ns),
                    // the WVA thresholds, checked (the rest of [fleet.autoscale] is in `fleet`)
                    wva: match autoscale {
                        None => None,
                        Some(a) => Some(wva_thresholds(&a.wva()).map_err(|(field, expected, got)| {
                            bad(&crate::fleet::run::fields::key(field), expected, &got)
                        })?),
                    },
                    cache_generated_tokens: e.cache_generated_tokens,
                    metrics_scrape_ms: e.metrics_scrape_ms,
                    reserve_full_isl: e.reserve_full_isl,
                    // a TOML number: its shortest decimal text, checked as the flag's is
                    shared_kv_read: e.shared_kv_read.map(|f| format!("{f}")),
                };
                let ecfg = s.config(&engine_key(origin))?;
                crate::fleet::scenario::engine::batched(fleet, ecfg).map_err(|e| key_error(origin, e))?;
                Some(s)
            }
            other => return Err(bad("fleet.engine.model", "\"batched\" or \"fifo\"", other)),
        },
    })
}

/// How a batched-engine setting is named in a scenario `origin`'s messages (`fleet.pd.KEY` or
/// `fleet.engine.KEY`).
fn engine_key(origin: &str) -> impl Fn(&str) -> String + '_ {
    move |k: &str| {
        let k = k.replace('-', "_");
        match crate::fleet::scenario::engine::pd_key(&k) {
            Some(pk) => format!("{origin}: `fleet.pd.{pk}`"),
            None => format!("{origin}: `fleet.engine.{k}`"),
        }
    }
}

/// A scenario's `[[fleet.pool]]` on its fleet (docs/MODEL.md, "Heterogeneous pools"): the pool
/// table on the fleet's configuration, and P/D's prefill pods from the pools' roles; checked as a
/// run will check it (errors name the key).
fn with_pools(
    list: &[PoolToml],
    lines: &pools::PoolLines,
    pd: Option<&schema::PdToml>,
    fleet: FleetConfig,
    engine: Option<crate::fleet::scenario::engine::EngineSettings>,
    origin: &str,
) -> CliResult<(FleetConfig, Option<crate::fleet::scenario::engine::EngineSettings>)> {
    let Some(mut s) = engine else {
        return Err(CliError::bad_input(format!(
            "{origin}: `fleet.pool`: only with the batched engine (`[fleet.engine]`)"
        )));
    };
    for (set, k) in [
        (pd.is_some_and(|p| p.prefill_capacity.is_some()), "prefill_capacity"),
        (pd.is_some_and(|p| p.prefill_profile.is_some()), "prefill_profile"),
    ] {
        if set {
            return Err(CliError::bad_input(format!(
                "{origin}: `fleet.pd.{k}`: absent with [[fleet.pool]] (each pool sets its own capacity and profile)"
            )));
        }
    }
    let table = pools::table(list, &s, origin, lines)?;
    let np = brokerlab_core::fleet::sim::pools::pods_of(table, brokerlab_core::fleet::PoolRole::Prefill);
    if np > 0 && s.prefill_pods.is_none() {
        s.prefill_pods = Some(u32::try_from(np).unwrap_or(u32::MAX));
    }
    let fleet = FleetConfig { pools: table, ..fleet };
    let ecfg = s.config(&engine_key(origin))?;
    crate::fleet::scenario::engine::batched(fleet, ecfg).map_err(|e| pool_key_error(origin, lines, e))?;
    Ok((fleet, Some(s)))
}

/// A configuration error of a fleet with pools read from `origin`: one about the pools
/// (`fleet.pool`) names the line of the first pool, any other its key only ([`key_error`]).
pub fn pool_key_error(origin: &str, lines: &pools::PoolLines, e: brokerlab_core::fleet::Error) -> CliError {
    let on_pools = matches!(crate::fleet::run::fields::refused(e), Ok((brokerlab_core::fleet::Field::Pools, _)));
    if on_pools { key_error(&lines.at_first(origin), e) } else { key_error(origin, e) }
}

/// `[[workload.stages]]` as the core's fixed array and its length; errors name the stage (1-based).
fn parse_stages(
    stages: Option<&[StageToml]>,
    bad: &dyn Fn(&str, &str, &str) -> CliError,
) -> CliResult<([Stage; MAX_STAGES], u32)> {
    let mut out = [Stage::default(); MAX_STAGES];
    let Some(list) = stages else { return Ok((out, 0)) };
    if list.is_empty() || list.len() > MAX_STAGES {
        return Err(bad("workload.stages", "1 to 32 stages", &format!("{} stages", list.len())));
    }
    for (i, (st, slot)) in list.iter().zip(out.iter_mut()).enumerate() {
        let key = |k: &str| format!("workload.stages[{}].{k}", i + 1);
        let rate = rate_milli(st.rate_per_s).map_err(|e| bad(&key("rate_per_s"), &e, &num(st.rate_per_s)))?;
        let ms = milli_exact(st.duration_s, 1e10)
            .map_err(|e| bad(&key("duration_s"), &format!("seconds: {e}"), &num(st.duration_s)))?;
        if ms == 0 {
            return Err(bad(&key("duration_s"), "a positive duration (seconds)", &num(st.duration_s)));
        }
        *slot = Stage { rate_milli_per_s: rate, duration_ms: ms };
    }
    Ok((out, list.len() as u32))
}

/// `v` in exact thousandths, when `0 <= v <= max` and `v` is a multiple of 0.001 (up to the
/// binary rounding of a decimal literal); the error says what is expected.
pub fn milli_exact(v: f64, max: f64) -> Result<u64, String> {
    if !(v >= 0.0 && v <= max) {
        return Err(format!("between 0 and {}", num(max)));
    }
    let m = v * 1000.0;
    let r = m.round();
    if (m - r).abs() > 1e-6 * r.max(1.0) {
        return Err(if r == 0.0 {
            "0, or at least 0.001 (the resolution)".to_string()
        } else {
            "a multiple of 0.001 (the resolution)".to_string()
        });
    }
    Ok(r as u64)
}

/// An arrival rate in requests/s as whole milli-requests per second (docs/MODEL.md, "Arrivals"):
/// exact for every accepted value; a rate that is not a multiple of 0.001 requests/s is an error
/// saying so.
pub fn rate_milli(v: f64) -> Result<u64, String> {
    milli_exact(v, 1e9).map_err(|e| format!("a rate in requests/s: {e}; rates are whole milli-requests per second"))
}

/// A number for a message: plain when short, scientific when huge or tiny (`1e300`, not 301
/// digits).
pub fn num(v: f64) -> String {
    if v.is_finite() && v != 0.0 && !(1e-6..1e15).contains(&v.abs()) { format!("{v:e}") } else { v.to_string() }
}
/// Builds and checks a policy for `pods` pods from flag or scenario values; errors are
/// (field, expected, got), named by the caller through [`crate::fleet::run::fields`].
pub fn scale_policy(
    pods: usize,
    min: u32,
    initial: Option<u32>,
    interval_s: f64,
    up_queue: f64,
    down_queue: f64,
    startup_s: f64,
) -> Result<ScalePolicy, (Field, &'static str, String)> {
    let ns = |v: f64, field| match v {
        v if (0.0..=1e9).contains(&v) => Ok((v * 1e9).round() as u64),
        v => Err((field, "seconds between 0 and 1e9", num(v))),
    };
    let milli = |v: f64, field| match v {
        v if (0.0..=1e6).contains(&v) => Ok((v * 1000.0).round() as u32),
        v => Err((field, "a mean queue length between 0 and 1e6", num(v))),
    };
    let p = ScalePolicy {
        min_pods: min,
        initial_pods: initial.unwrap_or(min),
        interval_ns: ns(interval_s, Field::ScaleInterval)?,
        up_milli: milli(up_queue, Field::ScaleUpQueue)?,
        down_milli: milli(down_queue, Field::ScaleDownQueue)?,
        startup_ns: ns(startup_s, Field::ScaleStartup)?,
    };
    p.validate(pods).map_err(|e| match e {
        brokerlab_core::fleet::Error::InvalidConfig { field, expected } => {
            let got = match field {
                Field::ScaleMin => min.to_string(),
                Field::ScaleInitial => p.initial_pods.to_string(),
                Field::ScaleInterval => num(interval_s),
                Field::ScaleUpQueue => num(up_queue),
                Field::ScaleStartup => num(startup_s),
                _ => num(down_queue),
            };
            (field, expected, got)
        }
        other => (Field::ScaleMin, "a valid policy", other.to_string()),
    })?;
    Ok(p)
}

/// The scaling rules' names (`--scale-policy`, `fleet.autoscale.policy`).
pub const SCALE_POLICIES: [&str; 2] = ["queue-target", "wva-saturation"];

/// The WVA saturation rule's settings as given (None: WVA's default).
#[derive(Debug, Clone, Copy, Default)]
pub struct WvaGiven {
    /// Peak window, s.
    pub window_s: Option<f64>,
    /// kvCacheThreshold, a fraction.
    pub kv_threshold: Option<f64>,
    /// queueLengthThreshold, requests.
    pub queue_threshold: Option<f64>,
    /// kvSpareTrigger, a fraction.
    pub kv_spare: Option<f64>,
    /// queueSpareTrigger, requests.
    pub queue_spare: Option<f64>,
}

impl WvaGiven {
    /// The settings given, by field, in flag order.
    fn set(&self) -> [(Field, bool); 5] {
        [
            (Field::ScaleWindow, self.window_s.is_some()),
            (Field::ScaleKvThreshold, self.kv_threshold.is_some()),
            (Field::ScaleQueueThreshold, self.queue_threshold.is_some()),
            (Field::ScaleKvSpare, self.kv_spare.is_some()),
            (Field::ScaleQueueSpare, self.queue_spare.is_some()),
        ]
    }
}

/// What an autoscaling setting names: the rule and which rule-specific settings were given.
#[derive(Debug, Clone, Copy)]
pub struct ScaleGiven<'a> {
    /// The rule named, if any.
    pub policy: Option<&'a str>,
    /// up_queue given.
    pub up_queue: bool,
    /// down_queue given.
    pub down_queue: bool,
    /// The WVA settings given.
    pub wva: WvaGiven,
}

/// Checks that the settings given belong to the engine's rule: queue-target for the FIFO engine,
/// wva-saturation for the batched one (docs/MODEL.md, "Autoscaling under the batched engine").
pub fn check_scale_rule(batched: bool, g: &ScaleGiven<'_>) -> Result<(), (Field, &'static str, String)> {
    if let Some(p) = g.policy {
        if !SCALE_POLICIES.contains(&p) {
            return Err((Field::ScalePolicy, "queue-target or wva-saturation", p.to_string()));
        }
        if batched && p != "wva-saturation" {
            return Err((Field::ScalePolicy, "wva-saturation with the batched engine", p.to_string()));
        }
        if !batched && p != "queue-target" {
            return Err((
                Field::ScalePolicy,
                "queue-target with the FIFO engine (wva-saturation reads the batched engine's KV usage and waiting queue)",
                p.to_string(),
            ));
        }
    }
    if batched {
        for (field, set) in [(Field::ScaleUpQueue, g.up_queue), (Field::ScaleDownQueue, g.down_queue)] {
            if set {
                return Err((field, "nothing with the batched engine (its rule is wva-saturation)", "given".into()));
            }
        }
    } else if let Some((field, _)) = g.wva.set().into_iter().find(|&(_, set)| set) {
        return Err((field, "nothing with the FIFO engine (a wva-saturation setting)", "given".into()));
    }
    Ok(())
}

/// The WVA thresholds from the settings given (WVA's defaults for the others), checked; errors
/// are (field, expected, got).
pub fn wva_thresholds(g: &WvaGiven) -> Result<WvaThresholds, (Field, &'static str, String)> {
    let d = WvaThresholds::DEFAULT;
    let frac = |v: Option<f64>, field, default: u32| match v {
        None => Ok(default),
        Some(v) if (0.0..=1.0).contains(&v) => Ok((v * 1e6).round() as u32),
        Some(v) => Err((field, "a fraction between 0 and 1", num(v))),
    };
    let queue = |v: Option<f64>, field, default: u64| match v {
        None => Ok(default),
        Some(v) if (0.0..=1e6).contains(&v) => Ok((v * 1e3).round() as u64),
        Some(v) => Err((field, "a queue length between 0 and 1e6", num(v))),
    };
    let window_ns = match g.window_s {
        None => d.window_ns,
        Some(v) if (0.0..=1e9).contains(&v) => (v * 1e9).round() as u64,
        Some(v) => return Err((Field::ScaleWindow, "seconds between 0 and 1e9", num(v))),
    };
    let t = WvaThresholds {
        window_ns,
        kv_threshold_ppm: frac(g.kv_threshold, Field::ScaleKvThreshold, d.kv_threshold_ppm)?,
        queue_threshold_milli: queue(g.queue_threshold, Field::ScaleQueueThreshold, d.queue_threshold_milli)?,
        kv_spare_ppm: frac(g.kv_spare, Field::ScaleKvSpare, d.kv_spare_ppm)?,
        queue_spare_milli: queue(g.queue_spare, Field::ScaleQueueSpare, d.queue_spare_milli)?,
    };
    t.validate().map_err(|e| match e {
        brokerlab_core::fleet::Error::InvalidConfig { field, expected } => {
            (field, expected, g.window_s.map_or_else(|| num(window_ns as f64 / 1e9), num))
        }
        other => (Field::ScaleWindow, "a valid window", other.to_string()),
    })?;
    Ok(t)
}
