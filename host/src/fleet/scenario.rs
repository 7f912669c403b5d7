//! Scenario files (TOML): a workload, a fleet, a router and timing. Unknown keys are errors that
//! name the key.

use std::path::Path;

use brokerlab_core::fleet::limits::BLOCK_TOKENS;
use brokerlab_core::fleet::workload::{
    DocOrder, Layout, MAX_OUTPUT_CHOICES, MAX_STAGES, Popularity, Stage, SuffixScope, Workload, WorkloadSpec,
};
use brokerlab_core::fleet::{FleetConfig, IndexKind, Request, RouterKind, RouterSpec, TouchOrder, defaults, keys};
use serde::{Deserialize, Serialize};

use super::ScaleArgs;
use super::run::RequestSource;
use crate::error::{CliError, CliResult, FleetError};
use crate::mem::{Need, try_grow, try_vec};

/// `[workload]` of a scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadToml {
    /// Seed.
    #[serde(default = "seed")]
    pub seed: u64,
    /// Requests.
    pub requests: u64,
    /// Tenants T.
    pub tenants: u32,
    /// Users per tenant.
    #[serde(default = "users_per_tenant")]
    pub users_per_tenant: u32,
    /// Shared prefix P, tokens.
    pub prefix_tokens: u32,
    /// [min, max] user suffix, tokens.
    pub suffix_tokens: [u32; 2],
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
    /// Scale out above this mean queue length.
    #[serde(default = "up_queue")]
    pub up_queue: f64,
    /// Scale in below this mean queue length.
    #[serde(default = "down_queue")]
    pub down_queue: f64,
    /// Boot time of a new pod, s.
    #[serde(default = "startup_s")]
    pub startup_s: f64,
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
    /// Pods N.
    pub pods: usize,
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
    /// Autoscaling.
    #[serde(default)]
    pub autoscale: Option<AutoscaleToml>,
    /// The batched engine (absent: the FIFO engine).
    #[serde(default)]
    pub engine: Option<EngineToml>,
}

/// `[fleet.engine]`: the batched engine (docs/MODEL.md, "The batched engine"); keys left out take
/// the profile's and vLLM's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineToml {
    /// "batched" (default) or "fifo".
    #[serde(default)]
    pub model: Option<String>,
    /// Step-cost profile.
    #[serde(default)]
    pub profile: Option<String>,
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
fn up_queue() -> f64 {
    defaults::SCALE_UP_MILLI as f64 / 1e3
}
fn down_queue() -> f64 {
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
fn t_cpu_ns() -> u64 {
    defaults::T_CPU_NS
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

/// A parsed, checked scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Workload.
    pub workload: WorkloadSpec,
    /// Fleet.
    pub fleet: FleetConfig,
    /// The file (or built-in name) it came from, for messages.
    pub origin: String,
    /// `[fleet.engine]` when it selects the batched engine (None: FIFO).
    pub engine: Option<super::engine::EngineSettings>,
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> CliResult<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::bad_input(format!("{}: cannot read scenario: {e}", path.display())))?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Self::parse(&text, &path.display().to_string(), &stem)
    }

    /// Parses scenario TOML; `origin` names the file in messages.
    pub fn parse(text: &str, origin: &str, default_name: &str) -> CliResult<Self> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let t: ScenarioToml = toml::from_str(text).map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
        let bad = |field: &str, expected: &str, got: &str| {
            CliError::bad_input(format!("{origin}: `{field}` = {got:?}: expected {expected}"))
        };
        let w = &t.workload;
        let popularity = match w.popularity.split_once(':') {
            None if w.popularity == "uniform" => Popularity::Uniform,
            None if w.popularity == "cycle" => Popularity::Cycle,
            Some(("zipf", s)) => match s.parse::<f64>().ok().and_then(|v| milli_exact(v, 10.0).ok()) {
                Some(m) => Popularity::Zipf { s_milli: m as u32 },
                _ => {
                    return Err(bad(
                        "workload.popularity",
                        "zipf:S with 0 <= S <= 10, a multiple of 0.001",
                        &w.popularity,
                    ));
                }
            },
            _ => return Err(bad("workload.popularity", "\"uniform\", \"zipf:S\" or \"cycle\"", &w.popularity)),
        };
        let layout = match w.layout.as_str() {
            "stable-prefix-first" => Layout::StablePrefixFirst,
            "timestamp-first" => Layout::TimestampFirst,
            other => return Err(bad("workload.layout", "\"stable-prefix-first\" or \"timestamp-first\"", other)),
        };
        let (stages, stages_len) = parse_stages(w.stages.as_deref(), &bad)?;
        let rate_milli_per_s = match (w.rate_per_s, stages_len) {
            (Some(r), 0) => rate_milli(r).map_err(|exp| bad("workload.rate_per_s", &exp, &num(r)))?,
            (None, 0) => {
                return Err(bad("workload.rate_per_s", "a rate in requests/s (or [[workload.stages]])", "none"));
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
                return Err(bad(
                    "workload.output_tokens_choices",
                    "either output_tokens or output_tokens_choices",
                    "both",
                ));
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
        let workload = WorkloadSpec {
            seed: w.seed,
            requests: w.requests,
            tenants: w.tenants,
            users_per_tenant: w.users_per_tenant,
            prefix_tokens: w.prefix_tokens,
            suffix_min_tokens: w.suffix_tokens[0],
            suffix_max_tokens: w.suffix_tokens[1],
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
        let f = &t.fleet;
        let fleet = FleetConfig {
            pods: f.pods,
            capacity_blocks: f.capacity,
            router: f.router,
            alpha: f.alpha,
            stale_delay: f.stale,
            order: f.order,
            t_prefill_ns: f.t_prefill_ns,
            t_decode_ns: f.t_decode_ns,
            index: f.index,
            cpu_capacity_blocks: f.cpu_capacity,
            t_cpu_ns: f.t_cpu_ns,
            cache: defaults::CACHE,
            // The preset's defaults, its RNG seeded from the scenario's seed.
            routing: RouterSpec::preset(f.router).map(|mut s| {
                s.params.seed = w.seed;
                s
            }),
            event_delay_ns: 0,
            speculative_ttl_ns: 0,
            scale: match &f.autoscale {
                None => None,
                Some(a) => Some(
                    ScaleArgs::policy_from(
                        f.pods,
                        a.min,
                        a.initial,
                        a.interval_s,
                        a.up_queue,
                        a.down_queue,
                        a.startup_s,
                    )
                    .map_err(|(field, expected, got)| bad(&super::fields::key(field), expected, &got))?,
                ),
            },
        };
        fleet.validate().map_err(|e| match e {
            brokerlab_core::fleet::Error::InvalidConfig { field, expected } => {
                FleetError::Key { origin: origin.to_string(), field, expected }.into()
            }
            other => CliError::bad_input(format!("{origin}: {other}")),
        })?;
        let engine = match &f.engine {
            None => None,
            Some(e) => match e.model.as_deref().unwrap_or("batched") {
                "fifo" => None,
                "batched" => {
                    let s = super::engine::EngineSettings {
                        profile: e.profile.clone(),
                        max_num_seqs: e.max_num_seqs,
                        max_num_batched_tokens: e.max_num_batched_tokens,
                        t_overhead_ns: e.t_overhead_ns,
                        t_prefill_token_ns: e.t_prefill_token_ns,
                        t_decode_seq_ns: e.t_decode_seq_ns,
                        t_kv_token_ns: e.t_kv_token_ns,
                    };
                    let key = |k: &str| format!("{origin}: `fleet.engine.{}`", k.replace('-', "_"));
                    let ecfg = s.config(&key)?;
                    brokerlab_core::fleet::batched::validate(&fleet, &ecfg).map_err(|e| match e {
                        brokerlab_core::fleet::Error::InvalidConfig { field, expected } => {
                            FleetError::Key { origin: origin.to_string(), field, expected }.into()
                        }
                        other => CliError::bad_input(format!("{origin}: {other}")),
                    })?;
                    Some(s)
                }
                other => return Err(bad("fleet.engine.model", "\"batched\" or \"fifo\"", other)),
            },
        };
        Ok(Scenario {
            engine,
            name: t.name.unwrap_or_else(|| default_name.to_string()),
            description: t.description.unwrap_or_default(),
            workload,
            fleet,
            origin: origin.to_string(),
        })
    }
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

/// A workload generated once and kept in memory (keys of every request), so sweeps over fleet
/// parameters reuse it.
pub struct Generated {
    /// The spec.
    pub spec: WorkloadSpec,
    /// (arrival ns, L, O, tenant, key range) per request.
    pub requests: Vec<(u64, u64, u64, u32, std::ops::Range<usize>)>,
    /// All keys.
    pub keys: Vec<u64>,
    /// The scenario file it came from, for messages ("workload" when unknown).
    pub origin: String,
}

/// Bytes per request of [`Generated::requests`].
const GEN_REQUEST_BYTES: u64 = std::mem::size_of::<(u64, u64, u64, u32, std::ops::Range<usize>)>() as u64;

impl Generated {
    /// Runs the core generator and hashes every prompt.
    pub fn new(spec: WorkloadSpec) -> CliResult<Self> {
        Self::with_origin(spec, "workload")
    }

    /// Same, naming the scenario file in messages. Checks the memory budget first (at most
    /// `requests x (48 + 8 x longest prompt / 16)` bytes) and never aborts on a failed allocation.
    pub fn with_origin(spec: WorkloadSpec, origin: &str) -> CliResult<Self> {
        crate::mem::check(&format!("{origin}: the generated workload"), &Self::needs(&spec))?;
        let mut stream = Streamed::new(spec, origin)?;
        let mut reqs = Vec::new();
        try_grow(&mut reqs, spec.requests as usize, "the generated requests")?;
        let mut keys: Vec<u64> = Vec::new();
        let mut err = None;
        stream.each(&mut |r, k| {
            if let Err(e) = try_grow(&mut keys, k.len(), "the generated block keys") {
                err = Some(e);
                return false;
            }
            let start = keys.len();
            keys.extend_from_slice(k);
            reqs.push((r.arrival_ns, r.input_tokens, r.output_tokens, r.tenant, start..start + k.len()));
            true
        })?;
        match err {
            Some(e) => Err(e),
            None => Ok(Generated { spec, requests: reqs, keys, origin: origin.to_string() }),
        }
    }

    /// What [`Self::with_origin`] allocates, at most.
    pub fn needs(spec: &WorkloadSpec) -> Vec<Need> {
        let keys = spec.requests.saturating_mul(spec.max_prompt_tokens() / BLOCK_TOKENS as u64).saturating_mul(8);
        vec![
            Need {
                what: "generated requests".into(),
                bytes: spec.requests.saturating_mul(GEN_REQUEST_BYTES),
                lowered_by: "workload.requests".into(),
            },
            Need {
                what: "generated block keys (at most)".into(),
                bytes: keys,
                lowered_by: "workload.requests, or shorter prompts (prefix_tokens, suffix_tokens, rag)".into(),
            },
        ]
    }

    /// Bytes it holds.
    pub fn bytes(&self) -> u64 {
        self.requests.capacity() as u64 * GEN_REQUEST_BYTES + self.keys.capacity() as u64 * 8
    }

    /// Distinct blocks over the whole workload: the capacity at which nothing is ever evicted.
    pub fn distinct_blocks(&self) -> usize {
        let mut set = std::collections::HashSet::with_capacity(self.keys.len());
        self.keys.iter().filter(|k| set.insert(**k)).count()
    }
}

/// Maps an error of the core on request `i` of a generated workload to a message naming the
/// scenario file and the keys that cause it (exit 2: the scenario asks for it).
fn request_error(origin: &str, i: usize, e: brokerlab_core::fleet::Error) -> CliError {
    use brokerlab_core::fleet::{Error as E, Quantity};
    let hint = match e {
        E::Overflow { what: Quantity::ServiceTime | Quantity::FinishTime } => {
            ": lower `fleet.t_prefill_ns`, `fleet.t_decode_ns` or `fleet.t_cpu_ns` (ns per token)"
        }
        E::Overflow { .. } => ": lower `fleet.autoscale.interval_s` or `fleet.autoscale.startup_s`",
        _ => "",
    };
    CliError::bad_input(format!("{origin}: request {i}: {e}{hint}"))
}

impl RequestSource for &Generated {
    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> CliResult<()> {
        for (i, (arrival_ns, input, output, _, range)) in self.requests.iter().enumerate() {
            let req = Request {
                arrival_ns: *arrival_ns,
                input_tokens: *input,
                output_tokens: *output,
                keys: &self.keys[range.clone()],
            };
            sink(&req).map_err(|e| request_error(&self.origin, i, e))?;
        }
        Ok(())
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.requests.len() as u64)
    }
}

/// A workload generated on the fly, request by request (the generator is seeded and
/// sequential): memory is the generator's buffers, whatever `requests` is. Feeding it again
/// generates the same requests.
pub struct Streamed {
    spec: WorkloadSpec,
    origin: String,
    cdf: Vec<u64>,
    tokens: Vec<u32>,
    kbuf: Vec<u64>,
}

impl Streamed {
    /// The generator's buffers for `spec` (Zipf CDF, one prompt's tokens and keys).
    pub fn new(spec: WorkloadSpec, origin: &str) -> CliResult<Self> {
        spec.validate().map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
        let tokens_len = spec.max_prompt_tokens() as usize;
        Ok(Streamed {
            spec,
            origin: origin.to_string(),
            cdf: try_vec(Workload::cdf_len(&spec), 0u64, "the workload's Zipf CDF")?,
            tokens: try_vec(tokens_len, 0u32, "the prompt tokens buffer")?,
            kbuf: try_vec(tokens_len / BLOCK_TOKENS, 0u64, "the block keys buffer")?,
        })
    }

    /// Generates every request from the start and calls `f` with it and its block keys; `f`
    /// returns false to stop.
    pub fn each(
        &mut self,
        f: &mut dyn FnMut(&brokerlab_core::fleet::workload::GenRequest, &[u64]) -> bool,
    ) -> CliResult<()> {
        let origin = &self.origin;
        let mut wl =
            Workload::new(self.spec, &mut self.cdf).map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
        while let Some(r) =
            wl.next_request(&mut self.tokens).map_err(|e| CliError::failure(format!("{origin}: workload: {e}")))?
        {
            let n = keys::token_keys(&self.tokens[..r.input_tokens as usize], &mut self.kbuf)
                .map_err(|e| CliError::failure(format!("{origin}: workload: {e}")))?;
            if !f(&r, &self.kbuf[..n]) {
                break;
            }
        }
        Ok(())
    }
}

impl RequestSource for Streamed {
    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> CliResult<()> {
        let origin = self.origin.clone();
        let mut err = None;
        self.each(&mut |r, keys| {
            let req = Request {
                arrival_ns: r.arrival_ns,
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                keys,
            };
            match sink(&req) {
                Ok(()) => true,
                Err(e) => {
                    err = Some(request_error(&origin, r.index as usize, e));
                    false
                }
            }
        })?;
        err.map_or(Ok(()), Err)
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.spec.requests)
    }
}

/// One line of a Mooncake trace, in its field order.
#[derive(Serialize)]
struct TraceLine<'a> {
    timestamp: u64,
    input_length: u64,
    output_length: u64,
    hash_ids: &'a [u64],
}

/// serde_json's compact layout with a space after every `:` and `,` (`{"timestamp": 0, ...}`):
/// the layout of the Mooncake traces and of every trace this command has written.
struct Spaced;

impl serde_json::ser::Formatter for Spaced {
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }
}

/// Writes the workload as a Mooncake JSONL trace with trace block size 16: `hash_ids[j]` is a
/// dense id of block j's chained key (ids are prefix-consistent by construction), plus a fresh id
/// for a trailing partial block. Replaying it with `--trace-block-size 16` gives exactly the
/// direct run's results.
pub fn write_trace(g: &Generated, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    write_trace_from(&mut &*g, out)
}

/// [`write_trace`] from any request source (e.g. a [`Streamed`] workload: memory is one id per
/// distinct block, not the whole workload).
pub fn write_trace_from(src: &mut dyn RequestSource, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut ids: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let mut next_id = 0u64;
    let mut line: Vec<u8> = Vec::new();
    let mut hash_ids: Vec<u64> = Vec::new();
    let mut io_err = None;
    let fed = src.feed(&mut |req| {
        hash_ids.clear();
        for k in req.keys {
            let id = *ids.entry(*k).or_insert_with(|| {
                next_id += 1;
                next_id - 1
            });
            hash_ids.push(id);
        }
        if !req.input_tokens.is_multiple_of(BLOCK_TOKENS as u64) {
            hash_ids.push(next_id);
            next_id += 1;
        }
        let rec = TraceLine {
            timestamp: req.arrival_ns / 1_000_000,
            input_length: req.input_tokens,
            output_length: req.output_tokens,
            hash_ids: &hash_ids,
        };
        line.clear();
        let written = rec.serialize(&mut serde_json::Serializer::with_formatter(&mut line, Spaced));
        line.push(b'\n');
        written.map_err(std::io::Error::from).and_then(|()| out.write_all(&line)).map_err(|e| {
            io_err = Some(e);
            brokerlab_core::fleet::Error::CapacityExceeded {
                limit: brokerlab_core::fleet::Limit::CallerMemory,
                capacity: 0,
            }
        })
    });
    if let Some(e) = io_err {
        return Err(e);
    }
    fed.map_err(|e| std::io::Error::other(e.to_string()))
}
