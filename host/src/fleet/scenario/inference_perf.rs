//! inference-perf configs (kubernetes-sigs/inference-perf, `inference_perf/config/*.py` at
//! 7de5ef2e, version 0.5.0) as scenario files. What each key becomes, and what is refused, is in
//! docs/MODEL.md, "inference-perf configs"; a key outside that list is exit 2 naming it.

use std::fmt::Write as _;

use clap::Args;
use serde::Deserialize;
use serde_norway::Value;

use brokerlab_core::fleet::loadgen::{LoadKind, LoadStage as CoreStage, MAX_STAGE_MS};

use super::Scenario;
use crate::error::{CliError, CliResult};

/// The scenario's `workload.requests` when `--requests` is absent: this many times the stages'
/// expected request count (sum of rate x duration), so a Poisson sample above its mean is not cut
/// off; generation ends with the last stage, the cap is a guard only.
pub const REQUEST_CAP_FACTOR: f64 = 2.0;

/// The fleet an inference-perf config does not describe (it names a server URL, not its pods).
#[derive(Debug, Args, Clone)]
pub struct FleetFlags {
    /// Pods behind the benchmarked endpoint.
    #[arg(long)]
    pub pods: usize,
    /// KV blocks (16 tokens) per pod.
    #[arg(long)]
    pub capacity: usize,
    /// Router of the scenario (any `--router` name).
    #[arg(long, default_value = brokerlab_core::fleet::defaults::ROUTER.name())]
    pub router: String,
    /// Load penalty alpha of prefix-aware.
    #[arg(long, default_value_t = brokerlab_core::fleet::defaults::ALPHA)]
    pub alpha: f64,
    /// Batched engine step-cost profile (`[fleet.engine] profile`); absent: the FIFO engine.
    #[arg(long)]
    pub profile: Option<String>,
    /// Workload seed (inference-perf's `load.base_seed` wins when the config sets it).
    #[arg(long, default_value_t = brokerlab_core::fleet::defaults::WORKLOAD_SEED)]
    pub seed: u64,
    /// `workload.requests`, a cap (default: 2 x the stages' expected count).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Scenario name (default: the config file's stem).
    #[arg(long)]
    pub name: Option<String>,
}

// ---- the config's schema: only what is modelled; `deny_unknown_fields` names anything else ----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    api: Option<Api>,
    #[serde(default)]
    data: Option<Data>,
    load: Load,
    #[serde(default)]
    server: Option<Server>,
    // Where reports go and how prompts are tokenized: no effect on the simulated workload
    // (lengths are in tokens already); accepted whole, listed in the notes.
    #[serde(default)]
    tokenizer: Option<Value>,
    #[serde(default)]
    report: Option<Value>,
    #[serde(default)]
    storage: Option<Value>,
    #[serde(default)]
    metrics: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Api {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    streaming: Option<bool>,
    // Request headers for the gateway (SLO hints, the inference objective): no modelled router
    // reads them; accepted whole, listed in the notes.
    #[serde(default)]
    headers: Option<Value>,
    #[serde(default)]
    slo_tpot_header: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Server {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    model_name: Option<String>,
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default)]
    ignore_eos: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Load {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    stages: Vec<LoadStage>,
    // The client's limits (docs/MODEL.md, "The load generator"); absent, their defaults are
    // what the notes describe.
    #[serde(default)]
    interval: Option<f64>,
    #[serde(default)]
    num_workers: Option<u64>,
    #[serde(default)]
    worker_max_concurrency: Option<u64>,
    #[serde(default)]
    worker_max_tcp_connections: Option<u64>,
    #[serde(default)]
    request_timeout: Option<f64>,
    #[serde(default)]
    base_seed: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadStage {
    #[serde(default)]
    rate: Option<f64>,
    #[serde(default)]
    duration: Option<u64>,
    #[serde(default)]
    num_requests: Option<u64>,
    #[serde(default)]
    concurrency_level: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Data {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    input_distribution: Option<Distribution>,
    #[serde(default)]
    output_distribution: Option<Distribution>,
    #[serde(default)]
    shared_prefix: Option<SharedPrefix>,
    #[serde(default)]
    conversation_replay: Option<ConversationReplay>,
}

/// `data.conversation_replay` (`config/datagen/replay.py` `ConversationReplayConfig`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConversationReplay {
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    num_conversations: Option<u32>,
    #[serde(default)]
    shared_system_prompt_len: Option<u64>,
    #[serde(default)]
    dynamic_system_prompt_len: Option<Distribution>,
    #[serde(default)]
    turns_per_conversation: Option<Distribution>,
    #[serde(default)]
    input_tokens_per_turn: Option<Distribution>,
    #[serde(default)]
    output_tokens_per_turn: Option<Distribution>,
    #[serde(default)]
    tool_call_latency_sec: Option<Distribution>,
    #[serde(default)]
    max_model_len: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SharedPrefix {
    #[serde(default, alias = "num_unique_system_prompts")]
    num_groups: Option<u32>,
    #[serde(default, alias = "num_users_per_system_prompt")]
    num_prompts_per_group: Option<u32>,
    #[serde(default)]
    system_prompt_len: Option<Length>,
    #[serde(default)]
    question_len: Option<Length>,
    #[serde(default)]
    output_len: Option<Length>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    enable_multi_turn_chat: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Length {
    Tokens(u32),
    Dist(Distribution),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Distribution {
    #[serde(default)]
    min: Option<u32>,
    #[serde(default)]
    max: Option<u32>,
    #[serde(default)]
    mean: Option<f64>,
    #[serde(default)]
    std_dev: Option<f64>,
    #[serde(default)]
    variance: Option<f64>,
    #[serde(default)]
    skew: Option<f64>,
    #[serde(default)]
    total_count: Option<u64>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

// inference-perf's defaults (the pydantic models' `default=`), used when a key is absent.
const DEFAULT_NUM_GROUPS: u32 = 10;
const DEFAULT_PROMPTS_PER_GROUP: u32 = 10;
const DEFAULT_SYSTEM_PROMPT_LEN: u32 = 100;
const DEFAULT_QUESTION_LEN: u32 = 50;
const DEFAULT_OUTPUT_LEN: u32 = 50;
const DEFAULT_DIST_MIN: u32 = 10;
const DEFAULT_DIST_MAX: u32 = 1024;
const DEFAULT_DIST_MEAN: f64 = 512.0;
const DEFAULT_DIST_STD_DEV: f64 = 200.0;
const DEFAULT_NUM_CONVERSATIONS: u32 = 200;
const DEFAULT_SHARED_SYSTEM_PROMPT_LEN: u64 = 8359;

/// An imported config: the scenario TOML and what the reader should know about it.
#[derive(Debug)]
pub struct Imported {
    /// The scenario file's text (checked: it parses as a scenario).
    pub toml: String,
    /// The parsed scenario.
    pub scenario: Scenario,
    /// What is approximated or carries no meaning here (printed as notes).
    pub notes: Vec<String>,
}

/// Imports inference-perf config `text` (`origin` names it in messages) with the fleet `f`.
pub fn import(text: &str, origin: &str, f: &FleetFlags) -> CliResult<Imported> {
    let cfg: Config = serde_norway::from_str(text).map_err(|e| {
        CliError::bad_input(format!(
            "{origin}: {e} (a key brokerlab does not model is refused, never ignored: docs/MODEL.md, \"inference-perf configs\")"
        ))
    })?;
    let refuse = |key: &str, why: &str| CliError::bad_input(format!("{origin}: `{key}`: {why}"));
    let mut notes = Vec::new();

    // ---- load ----
    let l = &cfg.load;
    let load_kind = match l.kind.as_deref().unwrap_or("constant") {
        k @ ("poisson" | "constant" | "concurrent") => k,
        other => return Err(refuse("load.type", &format!("{other:?}: poisson, constant or concurrent"))),
    };
    if l.worker_max_tcp_connections.is_some() {
        return Err(refuse(
            "load.worker_max_tcp_connections",
            "connection pooling is not modelled (requests in flight are capped by num_workers x worker_max_concurrency)",
        ));
    }
    if l.stages.is_empty() {
        return Err(refuse("load.stages", "at least one stage"));
    }
    let mut stages = Vec::new();
    let mut expected: u64 = 0;
    for (i, st) in l.stages.iter().enumerate() {
        let key = |k: &str| format!("load.stages[{i}].{k}");
        if load_kind == "concurrent" {
            if st.rate.is_some() || st.duration.is_some() {
                return Err(refuse(&key("rate"), "not with load.type concurrent (concurrency_level and num_requests)"));
            }
            let c = st.concurrency_level.filter(|&c| c > 0);
            let c = c.ok_or_else(|| refuse(&key("concurrency_level"), "required, > 0, with load.type concurrent"))?;
            let n = st.num_requests.filter(|&n| n > 0);
            let n = n.ok_or_else(|| refuse(&key("num_requests"), "required, > 0, with load.type concurrent"))?;
            expected = expected.saturating_add(n);
            stages.push(ImportedStage::Concurrent(c, n));
            continue;
        }
        if st.num_requests.is_some() {
            return Err(refuse(&key("num_requests"), "only with load.type concurrent"));
        }
        if st.concurrency_level.is_some() {
            return Err(refuse(&key("concurrency_level"), "only with load.type concurrent"));
        }
        let rate = st.rate.ok_or_else(|| refuse(&key("rate"), "required (requests/s)"))?;
        let duration = st.duration.ok_or_else(|| refuse(&key("duration"), "required (whole seconds)"))?;
        if !(rate > 0.0 && rate.is_finite()) || duration == 0 {
            return Err(refuse(&key("rate"), "rate > 0 and duration > 0, as inference-perf requires"));
        }
        // the core's count, int(rate x duration) in integers (one rule: LoadStage::requests)
        let rate_milli_per_s = super::rate_milli(rate).map_err(|e| refuse(&key("rate"), &e))?;
        let duration_ms = duration
            .checked_mul(1000)
            .filter(|&ms| ms <= MAX_STAGE_MS)
            .ok_or_else(|| refuse(&key("duration"), "at most 2^40 ms (about 34.8 years)"))?;
        let core = CoreStage { rate_milli_per_s, duration_ms, ..CoreStage::default() };
        expected = expected.saturating_add(core.requests(LoadKind::Poisson));
        stages.push(ImportedStage::Rate(rate, duration));
    }
    if let Some(t) = l.request_timeout.filter(|t| !(*t > 0.0 && t.is_finite())) {
        return Err(refuse("load.request_timeout", &format!("{t}: a positive number of seconds")));
    }
    if l.num_workers.is_none() {
        notes.push(
            "load.num_workers absent: inference-perf's default is the harness's CPU count x worker_max_concurrency; \
             unknown here, so requests in flight are not capped (docs/PUBLISHED.md, assumption A4)"
                .into(),
        );
    }
    let timeout_s = l.request_timeout.unwrap_or(DEFAULT_CLIENT_TIMEOUT_S);
    if l.request_timeout.is_none() {
        notes.push(format!(
            "load.request_timeout absent: the client gives up after {timeout_s} s (aiohttp's default total timeout, \
             what inference-perf <= v0.2.0 used; docs/PUBLISHED.md, assumption A5)"
        ));
    }
    notes.push(
        "a timed-out request is counted, its client slot freed and the server aborts it at the time-out (vLLM's \
         finish_requests on the client's disconnect; docs/MODEL.md, \"The load generator\")"
            .into(),
    );

    // ---- server, api ----
    let ignore_eos = cfg.server.as_ref().and_then(|s| s.ignore_eos).unwrap_or(true);
    if !ignore_eos {
        notes.push(
            "server.ignore_eos false: the real outputs stop at the model's end-of-sequence, so their lengths are at most \
             the configured ones; the scenario produces exactly the configured lengths (an upper bound)"
                .into(),
        );
    }
    if let Some(s) = &cfg.server {
        let _ = (&s.kind, &s.model_name, &s.base_url); // where the real run sent requests: not simulated
    }
    if let Some(a) = &cfg.api {
        if let Some(k) = a.kind.as_deref().filter(|k| *k != "completion" && *k != "chat") {
            return Err(refuse("api.type", &format!("{k:?}: completion or chat")));
        }
        if a.streaming == Some(false) {
            notes.push(
                "api.streaming false: inference-perf then measures no TTFT; the simulation reports it anyway".into(),
            );
        }
        if a.headers.is_some() || a.slo_tpot_header.is_some() {
            notes.push(
                "api.headers, api.slo_tpot_header: request headers for the gateway (SLO hints, the inference objective); \
                 no modelled router reads them"
                    .into(),
            );
        }
    }
    let ignored: Vec<&str> = [
        ("tokenizer", cfg.tokenizer.is_some()),
        ("report", cfg.report.is_some()),
        ("storage", cfg.storage.is_some()),
        ("metrics", cfg.metrics.is_some()),
        ("server.type/model_name/base_url", cfg.server.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    if !ignored.is_empty() {
        notes.push(format!(
            "{}: where the real run sends requests and writes reports; lengths are already in tokens, so no effect here",
            ignored.join(", ")
        ));
    }

    // ---- data ----
    let data = cfg.data.as_ref();
    let kind = data.and_then(|d| d.kind.as_deref()).unwrap_or("mock");
    let conversations = kind == "conversation_replay";
    if !conversations && data.is_some_and(|d| d.conversation_replay.is_some()) {
        return Err(refuse("data.conversation_replay", "only with data.type conversation_replay"));
    }
    let mut w = String::new();
    let seed = l
        .base_seed
        .or_else(|| data.and_then(|d| d.shared_prefix.as_ref()).and_then(|s| s.seed))
        .or_else(|| data.and_then(|d| d.conversation_replay.as_ref()).and_then(|c| c.seed))
        .unwrap_or(f.seed);
    // With the load generator the workload is the data set: shared_prefix's 750 prompts (the
    // data index restarts each stage), or one fresh random prompt per request.
    let shared = kind == "shared_prefix";
    let requests = match (f.requests, data.and_then(|d| d.shared_prefix.as_ref())) {
        (Some(r), _) => r,
        (None, Some(sp)) if shared => {
            sp.num_groups.unwrap_or(DEFAULT_NUM_GROUPS) as u64
                * sp.num_prompts_per_group.unwrap_or(DEFAULT_PROMPTS_PER_GROUP) as u64
        }
        _ => expected,
    };
    let _ = writeln!(w, "seed = {seed}");
    if !conversations {
        let _ = writeln!(
            w,
            "# The data set the load generator sends from ({} requests in all stages).",
            thousands(expected as f64)
        );
        let _ = writeln!(w, "requests = {requests}");
    }
    match kind {
        "conversation_replay" => {
            let d = data.expect("kind came from data");
            conversation_replay(d, &cfg, load_kind, stages.len(), f, &refuse, &mut w, &mut notes)?;
        }
        "shared_prefix" => {
            let d = data.expect("kind came from data");
            let dd = d.input_distribution.is_some() || d.output_distribution.is_some();
            if dd {
                return Err(refuse(
                    "data.input_distribution",
                    "only with data.type random or synthetic (shared_prefix takes its lengths from data.shared_prefix)",
                ));
            }
            let sp = d
                .shared_prefix
                .as_ref()
                .ok_or_else(|| refuse("data.shared_prefix", "required with data.type shared_prefix"))?;
            if sp.enable_multi_turn_chat == Some(true) {
                return Err(refuse(
                    "data.shared_prefix.enable_multi_turn_chat",
                    "multi-turn chats (each prompt extending the group's conversation) are not modelled",
                ));
            }
            let system = match &sp.system_prompt_len {
                None => DEFAULT_SYSTEM_PROMPT_LEN,
                Some(Length::Tokens(t)) => *t,
                Some(Length::Dist(_)) => {
                    return Err(refuse(
                        "data.shared_prefix.system_prompt_len",
                        "a fixed length (the simulator's shared prefix has one length)",
                    ));
                }
            };
            let question =
                length(sp.question_len.as_ref(), DEFAULT_QUESTION_LEN, "data.shared_prefix.question_len", &refuse)?;
            let output = length(sp.output_len.as_ref(), DEFAULT_OUTPUT_LEN, "data.shared_prefix.output_len", &refuse)?;
            let _ = writeln!(w, "tenants = {}", sp.num_groups.unwrap_or(DEFAULT_NUM_GROUPS));
            let _ = writeln!(w, "users_per_tenant = {}", sp.num_prompts_per_group.unwrap_or(DEFAULT_PROMPTS_PER_GROUP));
            let _ = writeln!(w, "prefix_tokens = {system}");
            let _ = writeln!(w, "suffix_tokens = [{}, {}]", question[0], question[1]);
            // inference-perf draws each prompt's question once, at generation: a user's prompt repeats
            let _ = writeln!(w, "suffix_scope = \"user\"");
            let _ = writeln!(w, "output_tokens = [{}, {}]", output[0], output[1]);
            // the prompts are shuffled once and sent in turn (data_index % len(prompts))
            let _ = writeln!(w, "popularity = \"cycle\"");
            let _ = writeln!(w, "layout = \"stable-prefix-first\"");
        }
        "random" | "synthetic" => {
            let d = data.expect("kind came from data");
            if d.shared_prefix.is_some() {
                return Err(refuse("data.shared_prefix", "only with data.type shared_prefix"));
            }
            let input = dist(d.input_distribution.as_ref(), "data.input_distribution", &refuse)?;
            let output = dist(d.output_distribution.as_ref(), "data.output_distribution", &refuse)?;
            if kind == "synthetic" {
                notes.push(
                    "data.type synthetic: inference-perf cuts prompts from a text corpus; modelled as prompts sharing no \
                     prefix (as random)"
                        .into(),
                );
            }
            let _ = writeln!(w, "tenants = 1");
            let _ = writeln!(w, "prefix_tokens = 0");
            let _ = writeln!(w, "suffix_tokens = [{}, {}]", input[0], input[1]);
            let _ = writeln!(w, "output_tokens = [{}, {}]", output[0], output[1]);
        }
        other => {
            return Err(refuse(
                "data.type",
                &format!(
                    "{other:?}: shared_prefix, random, synthetic or conversation_replay (datasets and traces are not imported)"
                ),
            ));
        }
    }
    let _ = write!(w, "\n[load]\ntype = {}\n", quote(load_kind));
    if !shared && !conversations {
        let _ = writeln!(w, "data_order = \"continue\"");
    }
    if let Some(i) = l.interval {
        let _ = writeln!(w, "interval_s = {}", num(i));
    }
    if let Some(n) = l.num_workers {
        let _ = writeln!(w, "num_workers = {n}");
    }
    if let Some(c) = l.worker_max_concurrency {
        let _ = writeln!(w, "worker_max_concurrency = {c}");
    }
    let _ = writeln!(w, "request_timeout_s = {}", num(timeout_s));
    for st in &stages {
        let _ = match st {
            ImportedStage::Rate(rate, d) => {
                write!(w, "[[load.stages]]\nrate_per_s = {}\nduration_s = {d}\n", num(*rate))
            }
            ImportedStage::Concurrent(c, n) => {
                write!(w, "[[load.stages]]\nconcurrency_level = {c}\nnum_requests = {n}\n")
            }
        };
    }

    let name = f.name.clone().unwrap_or_else(|| stem(origin));
    let mut t = String::new();
    let _ = writeln!(t, "# Imported by `brokerlab fleet import inference-perf` from {origin}.");
    let _ = writeln!(
        t,
        "# The fleet (pods, capacity, router, engine) came from the flags; docs/MODEL.md, \"inference-perf configs\"."
    );
    for n in &notes {
        let _ = writeln!(t, "# note: {n}");
    }
    let _ = writeln!(t, "name = {}", quote(&name));
    let _ = writeln!(t, "description = {}", quote(&format!("inference-perf {origin}, {} stages", stages.len())));
    let _ = write!(t, "\n[workload]\n{w}");
    let _ = write!(
        t,
        "\n[fleet]\npods = {}\ncapacity = {}\nrouter = {}\nalpha = {}\n",
        f.pods,
        f.capacity,
        quote(&f.router),
        num(f.alpha)
    );
    if let Some(p) = &f.profile {
        let _ = write!(t, "\n[fleet.engine]\nprofile = {}\n", quote(p));
        if conversations {
            // vLLM's prefix caching hashes every full block of a request's tokens, generated ones
            // included (docs/PUBLISHED.md, assumption A3; the note says so)
            let _ = writeln!(t, "cache_generated_tokens = true");
        }
    }
    // (conversation replay runs under `fleet run` only: the other commands refuse it by name)
    let scenario = Scenario::parse_any(&t, &format!("{origin} (imported)"), &name)?;
    Ok(Imported { toml: t, scenario, notes })
}

/// `data.conversation_replay` as `[workload.conversations]` (written to `w`): inference-perf's
/// `ConversationReplayConfig` (`config/datagen/replay.py` @ 7de5ef2e), each key its scenario key
/// (docs/MODEL.md, "Conversation replay", follows the generator at 3c7c4a3); what the model
/// lacks is refused naming the key.
#[allow(clippy::too_many_arguments)]
fn conversation_replay(
    d: &Data,
    cfg: &Config,
    load_kind: &str,
    stages: usize,
    f: &FleetFlags,
    refuse: &dyn Fn(&str, &str) -> CliError,
    w: &mut String,
    notes: &mut Vec<String>,
) -> CliResult<()> {
    let cr = d
        .conversation_replay
        .as_ref()
        .ok_or_else(|| refuse("data.conversation_replay", "required with data.type conversation_replay"))?;
    if load_kind != "concurrent" {
        return Err(refuse(
            "load.type",
            "concurrent with data.type conversation_replay (conversations run behind the closed-loop load generator)",
        ));
    }
    if stages != 1 {
        return Err(refuse(
            "load.stages",
            "one stage with data.type conversation_replay (inference-perf after 3c7c4a3 draws a new shared system \
             prompt per stage; the model follows 3c7c4a3's one)",
        ));
    }
    if d.input_distribution.is_some() || d.output_distribution.is_some() {
        return Err(refuse(
            "data.input_distribution",
            "only with data.type random or synthetic (conversation_replay takes its lengths from data.conversation_replay)",
        ));
    }
    if d.shared_prefix.is_some() {
        return Err(refuse("data.shared_prefix", "only with data.type shared_prefix"));
    }
    if let Some(k) = cfg.api.as_ref().and_then(|a| a.kind.as_deref()).filter(|k| *k != "completion") {
        return Err(refuse(
            "api.type",
            &format!("{k:?}: completion (inference-perf's conversation_replay supports the completion API only)"),
        ));
    }
    if f.requests.is_some() {
        return Err(refuse(
            "--requests",
            "not with data.type conversation_replay (the conversations are the data set; the stage's num_requests counts the requests)",
        ));
    }
    if cr.max_model_len.is_some() {
        return Err(refuse(
            "data.conversation_replay.max_model_len",
            "inference-perf's client-side context truncation (apis/user_session.py, after 3c7c4a3) is not modelled: a \
             session restarts past 225,000 tokens as at 3c7c4a3; vLLM's own limit is the scenario's [fleet.engine] \
             max_model_len",
        ));
    }
    if let Some(t) = &cr.tool_call_latency_sec {
        // zero whatever the draw: a fixed mean <= 0, or every clipped shape with max <= 0 (a
        // latency <= 0 sleeps not at all)
        let zero = match t.kind.as_deref().unwrap_or("normal") {
            "fixed" => t.mean.unwrap_or(DEFAULT_DIST_MEAN) <= 0.0,
            _ => t.max.unwrap_or(DEFAULT_DIST_MAX) == 0,
        };
        if !zero {
            return Err(refuse(
                "data.conversation_replay.tool_call_latency_sec",
                "a tool-call sleep holding the session between turns is not modelled (only a distribution that is \
                 always 0, as llm-d's workload configs set, is accepted)",
            ));
        }
        notes.push("data.conversation_replay.tool_call_latency_sec: always 0 s, no sleep between turns".into());
    }
    let key = |k: &str| format!("data.conversation_replay.{k}");
    let count = cr.num_conversations.unwrap_or(DEFAULT_NUM_CONVERSATIONS);
    if count == 0 {
        return Err(refuse(&key("num_conversations"), "at least 1 (inference-perf: gt=0)"));
    }
    let _ = writeln!(w, "\n[workload.conversations]");
    let _ = writeln!(w, "count = {count}");
    let shared = cr.shared_system_prompt_len.unwrap_or(DEFAULT_SHARED_SYSTEM_PROMPT_LEN);
    let _ = writeln!(w, "shared_system_prompt_tokens = {shared}");
    let dists = [
        ("dynamic_system_prompt_tokens", "dynamic_system_prompt_len", &cr.dynamic_system_prompt_len),
        ("turns", "turns_per_conversation", &cr.turns_per_conversation),
        ("input_tokens_per_turn", "input_tokens_per_turn", &cr.input_tokens_per_turn),
        ("output_tokens_per_turn", "output_tokens_per_turn", &cr.output_tokens_per_turn),
    ];
    for (ours, theirs, d) in dists {
        if let Some(d) = d {
            let _ = writeln!(w, "{ours} = {}", conv_dist(d, &key(theirs), refuse)?);
        }
    }
    notes.push(
        "data.conversation_replay: the plan's lengths are drawn from the same distributions with brokerlab's seeded \
         generator, not numpy's stream (docs/MODEL.md, \"Conversation replay\")"
            .into(),
    );
    if f.profile.is_some() {
        notes.push(
            "conversation replay under the batched engine: cache_generated_tokens = true (vLLM's prefix caching keeps \
             the full blocks of generated tokens; docs/PUBLISHED.md, A3)"
                .into(),
        );
    }
    Ok(())
}

/// A conversation_replay distribution as the scenario's inline table (its shapes are the
/// scenario's: fixed, normal, lognormal, uniform; inference-perf's defaults for absent keys).
fn conv_dist(d: &Distribution, key: &str, refuse: &dyn Fn(&str, &str) -> CliError) -> CliResult<String> {
    if d.total_count.is_some() {
        return Err(refuse(&format!("{key}.total_count"), "not modelled (one draw per conversation or turn)"));
    }
    let sd = match (d.variance, d.std_dev) {
        (Some(_), Some(s)) if s > 0.0 => {
            return Err(refuse(&format!("{key}.variance"), "either std_dev or variance, not both (as inference-perf)"));
        }
        (Some(v), _) if v >= 0.0 && v.is_finite() => v.sqrt(),
        (Some(_), _) => return Err(refuse(&format!("{key}.variance"), "a number >= 0")),
        (None, s) => s.unwrap_or(DEFAULT_DIST_STD_DEV),
    };
    let (lo, hi) = (d.min.unwrap_or(DEFAULT_DIST_MIN), d.max.unwrap_or(DEFAULT_DIST_MAX));
    if lo > hi {
        return Err(refuse(&format!("{key}.min"), "at most max"));
    }
    let mean = d.mean.unwrap_or(DEFAULT_DIST_MEAN);
    Ok(match d.kind.as_deref().unwrap_or("normal") {
        // int(mean), never clipped: min and max play no part
        "fixed" => format!("{{ dist = \"fixed\", mean = {} }}", num(mean)),
        k @ ("normal" | "lognormal") => {
            format!("{{ dist = \"{k}\", mean = {}, sd = {}, min = {lo}, max = {hi} }}", num(mean), num(sd))
        }
        // mean and std_dev play no part
        "uniform" => format!("{{ dist = \"uniform\", min = {lo}, max = {hi} }}"),
        other => {
            return Err(refuse(
                &format!("{key}.type"),
                &format!("{other:?}: fixed, normal, lognormal or uniform (the shapes the conversation model draws)"),
            ));
        }
    })
}

/// A stage as imported: (rate, duration s) or (concurrency_level, num_requests).
enum ImportedStage {
    Rate(f64, u64),
    Concurrent(u64, u64),
}

/// The client's total timeout when the config sets none, s: aiohttp's default
/// `ClientTimeout().total` (docs/PUBLISHED.md, assumption A5).
pub const DEFAULT_CLIENT_TIMEOUT_S: f64 = 300.0;

/// A length key: a number of tokens, or a fixed/uniform distribution, as `[min, max]`.
fn length(v: Option<&Length>, default: u32, key: &str, refuse: &dyn Fn(&str, &str) -> CliError) -> CliResult<[u32; 2]> {
    match v {
        None => Ok([default, default]),
        Some(Length::Tokens(t)) => Ok([*t, *t]),
        Some(Length::Dist(d)) => dist(Some(d), key, refuse),
    }
}

/// A distribution as the simulator's uniform `[min, max]`: `fixed` (the mean) and `uniform` (min
/// to max) are exact; every other shape is refused.
fn dist(d: Option<&Distribution>, key: &str, refuse: &dyn Fn(&str, &str) -> CliError) -> CliResult<[u32; 2]> {
    let Some(d) = d else {
        return Err(refuse(key, "required (type fixed or uniform)"));
    };
    let _ = (d.std_dev, d.variance, d.skew, d.total_count); // shapes refused below use them
    match d.kind.as_deref().unwrap_or("normal") {
        "fixed" => {
            let m = d.mean.unwrap_or(DEFAULT_DIST_MEAN);
            if !(m >= 0.0 && m <= u32::MAX as f64) || m.fract() != 0.0 {
                return Err(refuse(&format!("{key}.mean"), "a whole number of tokens"));
            }
            Ok([m as u32, m as u32])
        }
        "uniform" => {
            let (lo, hi) = (d.min.unwrap_or(DEFAULT_DIST_MIN), d.max.unwrap_or(DEFAULT_DIST_MAX));
            if lo > hi {
                return Err(refuse(&format!("{key}.min"), "at most max"));
            }
            Ok([lo, hi])
        }
        other => Err(refuse(
            &format!("{key}.type"),
            &format!(
                "{other:?}: only fixed and uniform lengths are modelled (the simulator draws lengths uniformly from [min, max]; \
                 inference-perf's default type is normal)"
            ),
        )),
    }
}

fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v}") }
}

fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut o = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            o.push(',');
        }
        o.push(c);
    }
    o
}

fn quote(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o += "\\\"",
            '\\' => o += "\\\\",
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o + "\""
}

fn stem(origin: &str) -> String {
    std::path::Path::new(origin)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "imported".into())
}
