//! Task specs (TOML), validated against the core's limits: the model (the scripted stub by
//! default, or an OpenAI-compatible server), the tools (the three built-in simulated ones, HTTP
//! endpoints, local programs) and, for the scripted model, its steps. Every key with its type and
//! default is in docs/RUNNER.md ("The spec format"); a test checks that table against
//! [`KEYS_TOP`], [`KEYS_MODEL`], [`KEYS_TOOL`], [`KEYS_STEP`], and another that those are exactly
//! the keys the parser accepts.
//!
//! ```toml
//! id = "invoice-42"          # optional; without it every `task run` starts a new task
//! [[step]]
//! model = "Look up the customer"
//! tool = "lookup"            # lookup | payment | send_email, or a [[tool]] (optional)
//! args = { q = "acct-1" }    # a table (optional, only with `tool`)
//! ```
//!
//! Unknown keys are an error naming the key. The spec is stored in the log database as canonical
//! JSON; its CRC-32C is the `spec_digest` of the task's `created` record. A spec of steps and
//! built-in tools only has the digest it had before issue 29 (the steps' JSON), so tasks logged
//! by an earlier build resume.

use std::path::Path;

use brokerlab_core::runner::{
    Args, MAX_ARGS_BYTES, MAX_MODEL_TEXT, MAX_STEPS, MAX_TASK_ID, MAX_TOOL_NAME, ModelReply, ModelText, ToolCall,
    ToolClass, ToolName, crc32c,
};
use serde::{Deserialize, Serialize};

use crate::agent::defaults as d;
use crate::task::error::{TaskError, TaskResult};

/// The built-in simulated tools, with their class (their calls are kept in the world's files).
pub const TOOLS: [(&str, ToolClass); 3] =
    [("lookup", ToolClass::ReadOnly), ("payment", ToolClass::Idempotent), ("send_email", ToolClass::NonIdempotent)];

/// The class of a built-in tool.
pub fn tool_class(name: &str) -> Option<ToolClass> {
    TOOLS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

/// The keys of a spec's top level.
pub const KEYS_TOP: [&str; 5] = ["id", "max_steps", "model", "tool", "step"];
/// The keys of `[model]`.
pub const KEYS_MODEL: [&str; 17] = [
    "kind",
    "base_url",
    "model",
    "api_key_env",
    "system",
    "prompt",
    "temperature",
    "seed",
    "max_tokens",
    "token_limit_field",
    "tool_choice",
    "timeout_ms",
    "connect_timeout_ms",
    "retries",
    "backoff_ms",
    "max_backoff_ms",
    "max_retry_after_ms",
];
/// The keys of a `[[tool]]`.
pub const KEYS_TOOL: [&str; 18] = [
    "name",
    "kind",
    "class",
    "description",
    "parameters",
    "method",
    "url",
    "bearer_env",
    "checks_fence",
    "fence_url",
    "program",
    "argv",
    "timeout_ms",
    "connect_timeout_ms",
    "retries",
    "backoff_ms",
    "max_backoff_ms",
    "max_retry_after_ms",
];
/// The keys of a `[[step]]`.
pub const KEYS_STEP: [&str; 3] = ["model", "tool", "args"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    id: Option<String>,
    max_steps: Option<u16>,
    model: Option<ModelFile>,
    #[serde(default)]
    tool: Vec<ToolFile>,
    #[serde(default)]
    step: Vec<StepFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    model: String,
    tool: Option<String>,
    args: Option<toml::Table>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    kind: Option<String>,
    base_url: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    system: Option<String>,
    prompt: Option<String>,
    temperature: Option<f64>,
    seed: Option<i64>,
    max_tokens: Option<u32>,
    token_limit_field: Option<String>,
    tool_choice: Option<String>,
    timeout_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
    retries: Option<u32>,
    backoff_ms: Option<u64>,
    max_backoff_ms: Option<u64>,
    max_retry_after_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolFile {
    name: String,
    kind: Option<String>,
    class: Option<String>,
    description: Option<String>,
    parameters: Option<toml::Table>,
    method: Option<String>,
    url: Option<String>,
    bearer_env: Option<String>,
    checks_fence: Option<bool>,
    fence_url: Option<String>,
    program: Option<String>,
    argv: Option<Vec<String>>,
    timeout_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
    retries: Option<u32>,
    backoff_ms: Option<u64>,
    max_backoff_ms: Option<u64>,
    max_retry_after_ms: Option<u64>,
}

/// One validated step of the scripted model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The scripted model response.
    pub model: String,
    /// The tool it calls.
    pub tool: Option<String>,
    /// Canonical JSON of the args table (`{}` when absent).
    pub args: String,
}

/// Retries and timeouts of a model or tool (the keys `timeout_ms`, `connect_timeout_ms`,
/// `retries`, `backoff_ms`, `max_backoff_ms`, `max_retry_after_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Patience {
    /// The whole of one request, ms.
    pub timeout_ms: u64,
    /// Connecting, ms.
    pub connect_timeout_ms: u64,
    /// Retries where they are allowed.
    pub retries: u32,
    /// First pause before a retry, ms (doubled each time).
    pub backoff_ms: u64,
    /// Longest pause, ms.
    pub max_backoff_ms: u64,
    /// Longest `Retry-After` honoured, ms.
    pub max_retry_after_ms: u64,
}

impl Patience {
    /// The pause before retry `n` (0-based): `backoff_ms * 2^n`, at most `max_backoff_ms`, less a
    /// jitter of up to a quarter drawn from `salt` (a hash of the task, step and attempt: no
    /// random source, so the same run waits the same), or the server's `Retry-After` when it gave
    /// one (bounded by the caller).
    pub fn pause_ms(&self, n: u32, salt: u64, retry_after_ms: Option<u64>) -> u64 {
        if let Some(ms) = retry_after_ms {
            return ms;
        }
        let base = self.backoff_ms.saturating_mul(1u64 << n.min(30)).min(self.max_backoff_ms);
        let jitter = base / 4 * (salt % 1000) / 1000;
        base - jitter
    }
}

/// How a spec's model answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
// one per task spec, built once per run: its size does not matter
#[allow(clippy::large_enum_variant)]
pub enum ModelSpec {
    /// An OpenAI-compatible Chat Completions server.
    Openai(OpenAiSpec),
    /// A model given by a program through the library ([`crate::agent::Runner`]); the CLI cannot
    /// run such a task.
    Library {
        /// The user's request.
        prompt: String,
        /// The system message.
        system: Option<String>,
    },
}

/// `[model] kind = "openai"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenAiSpec {
    /// The server's base URL, up to `/v1` (the request goes to `{base_url}/chat/completions`).
    pub base_url: String,
    /// The model's name.
    pub model: String,
    /// The environment variable holding the API key (never the key itself).
    pub api_key_env: Option<String>,
    /// The system message.
    pub system: Option<String>,
    /// The user's request: the first user message.
    pub prompt: String,
    /// Sampling temperature (not sent when absent).
    #[serde(default, deserialize_with = "opt_f64")]
    pub temperature: Option<f64>,
    /// Sampling seed (not sent when absent).
    pub seed: Option<i64>,
    /// Token limit per answer.
    pub max_tokens: u32,
    /// The request field the limit goes in: `max_tokens` or `max_completion_tokens`.
    pub token_limit_field: String,
    /// `tool_choice` (not sent when absent: the server's default, `auto` with tools).
    pub tool_choice: Option<String>,
    /// Timeouts and retries.
    pub patience: Patience,
}

/// An optional float read through a JSON value: inside an internally tagged enum serde buffers
/// the fields, and with serde_json's `arbitrary_precision` (which a workspace build enables for
/// defmt-decoder) a buffered float is a map, not an `f64`; a `Value` reads both forms. Without
/// this a stored spec with a `temperature` could not be read back in such a build.
fn opt_f64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| serde::de::Error::custom(format!("expected a number, got {v}"))),
    }
}

/// What a tool is (the `kind` key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ToolKind {
    /// `lookup`, `payment` or `send_email`, simulated, their calls in the world's files.
    Builtin,
    /// An HTTP endpoint.
    Http(HttpSpec),
    /// A local program.
    Command(CommandSpec),
    /// A tool given by a program through the library; the CLI cannot call it.
    Library,
}

/// `kind = "http"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpSpec {
    /// `GET`, `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: String,
    /// The URL; `{name}` is replaced by the argument `name` (percent-encoded).
    pub url: String,
    /// The environment variable holding a bearer token (sent as `Authorization: Bearer ...`).
    pub bearer_env: Option<String>,
    /// Whether the server refuses a stale `Brokerlab-Fence` (the dropped-session rule trusts it).
    pub checks_fence: bool,
    /// Where a runner taking over a call in flight raises the fence first (`POST`, no body).
    pub fence_url: Option<String>,
    /// Timeouts and retries.
    pub patience: Patience,
}

/// `kind = "command"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandSpec {
    /// The program (absolute; a relative one was resolved against the spec file's directory).
    pub program: String,
    /// Its arguments.
    pub argv: Vec<String>,
    /// Timeouts and retries.
    pub patience: Patience,
}

/// One validated `[[tool]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// Its class, as `read-only`, `idempotent`, `non-idempotent`.
    #[serde(with = "class_name")]
    pub class: ToolClass,
    /// What it does, for the model.
    pub description: String,
    /// Its parameters as a JSON Schema object.
    pub parameters: serde_json::Value,
    /// How it is called.
    #[serde(flatten)]
    pub kind: ToolKind,
}

mod class_name {
    use brokerlab_core::runner::ToolClass;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(c: &ToolClass, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(c.name())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ToolClass, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_class(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown tool class {s:?}")))
    }
}

/// `read-only`, `idempotent`, `non-idempotent`.
pub fn parse_class(s: &str) -> Option<ToolClass> {
    [ToolClass::ReadOnly, ToolClass::Idempotent, ToolClass::NonIdempotent].into_iter().find(|c| c.name() == s)
}

/// A validated spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// Task id from the file, if any.
    pub id: Option<String>,
    /// The scripted model's steps (empty for another model).
    pub steps: Vec<Step>,
    /// The model, unless it is the scripted one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    /// The declared tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Most steps (a model that decides when it is done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u16>,
}

/// Checks a task id: 1..=MAX_TASK_ID bytes of `[A-Za-z0-9._-]`.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_TASK_ID {
        return Err(format!("must be 1 to {MAX_TASK_ID} bytes long, got {}", id.len()));
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!("contains {c:?}; use letters, digits, '.', '_' and '-'"));
    }
    Ok(())
}

/// Checks a tool name: 1..=MAX_TOOL_NAME bytes of `[A-Za-z0-9_-]` (what OpenAI's function names
/// allow, within the log's limit).
pub fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_TOOL_NAME {
        return Err(format!("must be 1 to {MAX_TOOL_NAME} bytes long, got {}", name.len()));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))) {
        return Err(format!("contains {c:?}; use letters, digits, '_' and '-'"));
    }
    Ok(())
}

/// Checks an environment variable's name (`[A-Za-z_][A-Za-z0-9_]*`): a key must be named, never
/// given.
fn check_env_name(what: &str, v: &str) -> Result<(), String> {
    let ok = !v.is_empty()
        && v.len() <= 128
        && v.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        // the value is not echoed: it may be the secret itself
        Err(format!(
            "{what}: not an environment variable's name (letters, digits, '_'; the value is not shown): name the \
             variable that holds the secret, never the secret itself"
        ))
    }
}

/// Checks an `http://` or `https://` URL without credentials in it.
pub fn check_url(what: &str, url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{what}: {url:?}: expected an http:// or https:// URL"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return Err(format!("{what}: {url:?}: the URL names no host"));
    }
    if authority.contains('@') {
        return Err(format!(
            "{what}: the URL carries credentials (user@ or user:password@); put a key in an environment variable \
             and name it (api_key_env, bearer_env) instead"
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{what}: {url:?}: a URL has no spaces or control characters"));
    }
    Ok(())
}

/// The placeholders `{name}` of a URL template.
pub fn placeholders(url: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = url;
    while let Some(a) = rest.find('{') {
        let Some(b) = rest[a..].find('}') else { return Err(format!("{url:?}: a '{{' without its '}}'")) };
        let name = &rest[a + 1..a + b];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("{url:?}: placeholder {{{name}}}: expected {{argument_name}}"));
        }
        out.push(name.to_string());
        rest = &rest[a + b + 1..];
    }
    if rest.contains('}') {
        return Err(format!("{url:?}: a '}}' without its '{{'"));
    }
    Ok(out)
}

fn bounded_ms(what: &str, v: Option<u64>, default: u64, min: u64) -> Result<u64, String> {
    let v = v.unwrap_or(default);
    if !(min..=d::MAX_WAIT_MS).contains(&v) {
        return Err(format!("{what}: {v}: expected {min} to {} ms", d::MAX_WAIT_MS));
    }
    Ok(v)
}

struct PatienceKeys {
    timeout_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
    retries: Option<u32>,
    backoff_ms: Option<u64>,
    max_backoff_ms: Option<u64>,
    max_retry_after_ms: Option<u64>,
}

fn patience(at: &str, k: PatienceKeys, timeout_default: u64, retries_default: u32) -> Result<Patience, String> {
    let retries = k.retries.unwrap_or(retries_default);
    if retries > d::MAX_RETRIES {
        return Err(format!("{at}.retries: {retries}: expected 0 to {}", d::MAX_RETRIES));
    }
    let p = Patience {
        timeout_ms: bounded_ms(&format!("{at}.timeout_ms"), k.timeout_ms, timeout_default, 1)?,
        connect_timeout_ms: bounded_ms(
            &format!("{at}.connect_timeout_ms"),
            k.connect_timeout_ms,
            d::CONNECT_TIMEOUT_MS,
            1,
        )?,
        retries,
        backoff_ms: bounded_ms(&format!("{at}.backoff_ms"), k.backoff_ms, d::BACKOFF_MS, 0)?,
        max_backoff_ms: bounded_ms(&format!("{at}.max_backoff_ms"), k.max_backoff_ms, d::MAX_BACKOFF_MS, 0)?,
        max_retry_after_ms: bounded_ms(
            &format!("{at}.max_retry_after_ms"),
            k.max_retry_after_ms,
            d::MAX_RETRY_AFTER_MS,
            0,
        )?,
    };
    if p.backoff_ms > p.max_backoff_ms {
        return Err(format!("{at}.backoff_ms: {} is above max_backoff_ms ({})", p.backoff_ms, p.max_backoff_ms));
    }
    Ok(p)
}

/// A JSON Schema object for a tool's parameters (`{"type": "object", ...}`).
fn schema(at: &str, t: Option<toml::Table>) -> Result<serde_json::Value, String> {
    let Some(t) = t else { return Ok(serde_json::json!({"type": "object", "properties": {}})) };
    let v = serde_json::to_value(&t).map_err(|e| format!("{at}.parameters: cannot be encoded as JSON: {e}"))?;
    if v.get("type").and_then(|t| t.as_str()) != Some("object") {
        return Err(format!(
            "{at}.parameters: expected a JSON Schema object with type = \"object\" (the arguments a model sends are \
             a JSON object)"
        ));
    }
    if let Some(r) = v.get("required")
        && !r.as_array().is_some_and(|a| a.iter().all(|x| x.is_string()))
    {
        return Err(format!("{at}.parameters.required: expected an array of names"));
    }
    let n = serde_json::to_string(&v).map_or(0, |s| s.len());
    if n > d::MAX_SCHEMA_BYTES {
        return Err(format!("{at}.parameters: {n} bytes as JSON, at most {}", d::MAX_SCHEMA_BYTES));
    }
    Ok(v)
}

fn bounded_text(what: &str, v: &str, max: usize) -> Result<(), String> {
    if v.len() > max {
        return Err(format!("{what}: {} bytes, at most {max}", v.len()));
    }
    Ok(())
}

impl ModelFile {
    fn validate(self) -> Result<Option<ModelSpec>, String> {
        let kind = self.kind.clone().unwrap_or_else(|| "script".into());
        let unused = |keys: &[(&str, bool)], kind: &str| -> Result<(), String> {
            match keys.iter().find(|(_, set)| *set) {
                Some((k, _)) => Err(format!("model.{k}: not a key of a model of kind {kind:?}")),
                None => Ok(()),
            }
        };
        match kind.as_str() {
            "script" => {
                unused(
                    &[
                        ("base_url", self.base_url.is_some()),
                        ("model", self.model.is_some()),
                        ("api_key_env", self.api_key_env.is_some()),
                        ("system", self.system.is_some()),
                        ("prompt", self.prompt.is_some()),
                        ("temperature", self.temperature.is_some()),
                        ("seed", self.seed.is_some()),
                        ("max_tokens", self.max_tokens.is_some()),
                        ("token_limit_field", self.token_limit_field.is_some()),
                        ("tool_choice", self.tool_choice.is_some()),
                        ("timeout_ms", self.timeout_ms.is_some()),
                        ("connect_timeout_ms", self.connect_timeout_ms.is_some()),
                        ("retries", self.retries.is_some()),
                        ("backoff_ms", self.backoff_ms.is_some()),
                        ("max_backoff_ms", self.max_backoff_ms.is_some()),
                        ("max_retry_after_ms", self.max_retry_after_ms.is_some()),
                    ],
                    "script",
                )?;
                Ok(None)
            }
            "openai" => {
                let base_url = self.base_url.ok_or("model.base_url: missing (e.g. \"http://127.0.0.1:8000/v1\")")?;
                check_url("model.base_url", &base_url)?;
                let model = self.model.ok_or("model.model: missing (the model's name on the server)")?;
                if model.is_empty() || model.len() > 256 {
                    return Err("model.model: expected 1 to 256 bytes".into());
                }
                if let Some(k) = &self.api_key_env {
                    check_env_name("model.api_key_env", k)?;
                }
                let prompt = self.prompt.ok_or("model.prompt: missing (the user's request)")?;
                bounded_text("model.prompt", &prompt, d::MAX_PROMPT_BYTES)?;
                if let Some(s) = &self.system {
                    bounded_text("model.system", s, d::MAX_PROMPT_BYTES)?;
                }
                if let Some(t) = self.temperature
                    && !(0.0..=2.0).contains(&t)
                {
                    return Err(format!("model.temperature: {t}: expected 0 to 2"));
                }
                let max_tokens = self.max_tokens.unwrap_or(d::MODEL_MAX_TOKENS);
                if !(1..=d::MODEL_MAX_TOKENS_LIMIT).contains(&max_tokens) {
                    return Err(format!("model.max_tokens: {max_tokens}: expected 1 to {}", d::MODEL_MAX_TOKENS_LIMIT));
                }
                let token_limit_field = self.token_limit_field.unwrap_or_else(|| "max_tokens".into());
                if !matches!(token_limit_field.as_str(), "max_tokens" | "max_completion_tokens") {
                    return Err(format!(
                        "model.token_limit_field: {token_limit_field:?}: expected \"max_tokens\" or \
                         \"max_completion_tokens\""
                    ));
                }
                if let Some(c) = &self.tool_choice
                    && !matches!(c.as_str(), "auto" | "required" | "none")
                {
                    return Err(format!("model.tool_choice: {c:?}: expected \"auto\", \"required\" or \"none\""));
                }
                let patience = patience(
                    "model",
                    PatienceKeys {
                        timeout_ms: self.timeout_ms,
                        connect_timeout_ms: self.connect_timeout_ms,
                        retries: self.retries,
                        backoff_ms: self.backoff_ms,
                        max_backoff_ms: self.max_backoff_ms,
                        max_retry_after_ms: self.max_retry_after_ms,
                    },
                    d::MODEL_TIMEOUT_MS,
                    d::MODEL_RETRIES,
                )?;
                Ok(Some(ModelSpec::Openai(OpenAiSpec {
                    base_url: base_url.trim_end_matches('/').to_string(),
                    model,
                    api_key_env: self.api_key_env,
                    system: self.system,
                    prompt,
                    temperature: self.temperature,
                    seed: self.seed,
                    max_tokens,
                    token_limit_field,
                    tool_choice: self.tool_choice,
                    patience,
                })))
            }
            other => Err(format!("model.kind: {other:?}: expected \"script\" (the default) or \"openai\"")),
        }
    }
}

impl ToolFile {
    /// The tool's class: a built-in tool's own (a `class` key may only repeat it), else the
    /// `class` key, which is required (what a retry may do is the spec writer's to say).
    fn class_of(&self, at: &str, kind: &str, builtin: Option<ToolClass>) -> Result<ToolClass, String> {
        Ok(match (&self.class, kind, builtin) {
            (Some(c), "builtin", Some(b)) if parse_class(c) != Some(b) => {
                return Err(format!("{at}.class: the built-in {} is {}", self.name, b.name()));
            }
            (_, "builtin", Some(b)) => b,
            (_, "builtin", None) => {
                return Err(format!(
                    "{at}.name: {:?} is not a built-in tool (expected lookup, payment or send_email)",
                    self.name
                ));
            }
            (Some(c), _, _) => parse_class(c).ok_or_else(|| {
                format!("{at}.class: {c:?}: expected \"read-only\", \"idempotent\" or \"non-idempotent\"")
            })?,
            (None, _, _) => {
                return Err(format!(
                    "{at}.class: missing: say what a retry may do (\"read-only\", \"idempotent\": the tool dedupes \
                     by the Idempotency-Key, or \"non-idempotent\")"
                ));
            }
        })
    }

    fn validate(self, at: &str, dir: Option<&Path>) -> Result<ToolSpec, String> {
        check_tool_name(&self.name).map_err(|m| format!("{at}.name: {:?} {m}", self.name))?;
        let kind = self.kind.clone().unwrap_or_default();
        let builtin = tool_class(&self.name);
        let class = self.class_of(at, &kind, builtin)?;
        if builtin.is_some() && kind != "builtin" {
            return Err(format!("{at}.name: {:?} is a built-in tool's name; give this tool another", self.name));
        }
        let description = self.description.clone().unwrap_or_default();
        bounded_text(&format!("{at}.description"), &description, d::MAX_DESCRIPTION_BYTES)?;
        let parameters = schema(at, self.parameters.clone())?;
        let pk = PatienceKeys {
            timeout_ms: self.timeout_ms,
            connect_timeout_ms: self.connect_timeout_ms,
            retries: self.retries,
            backoff_ms: self.backoff_ms,
            max_backoff_ms: self.max_backoff_ms,
            max_retry_after_ms: self.max_retry_after_ms,
        };
        let http_keys = [
            ("method", self.method.is_some()),
            ("url", self.url.is_some()),
            ("bearer_env", self.bearer_env.is_some()),
            ("checks_fence", self.checks_fence.is_some()),
            ("fence_url", self.fence_url.is_some()),
        ];
        let command_keys = [("program", self.program.is_some()), ("argv", self.argv.is_some())];
        let call_keys = [
            ("timeout_ms", self.timeout_ms.is_some()),
            ("connect_timeout_ms", self.connect_timeout_ms.is_some()),
            ("retries", self.retries.is_some()),
            ("backoff_ms", self.backoff_ms.is_some()),
            ("max_backoff_ms", self.max_backoff_ms.is_some()),
            ("max_retry_after_ms", self.max_retry_after_ms.is_some()),
        ];
        let not_for = |keys: &[(&str, bool)], kind: &str| -> Result<(), String> {
            match keys.iter().find(|(_, set)| *set) {
                Some((k, _)) => Err(format!("{at}.{k}: not a key of a tool of kind {kind:?}")),
                None => Ok(()),
            }
        };
        let kind = match kind.as_str() {
            "builtin" => {
                not_for(&http_keys, "builtin")?;
                not_for(&command_keys, "builtin")?;
                not_for(&call_keys, "builtin")?;
                ToolKind::Builtin
            }
            "http" => {
                not_for(&command_keys, "http")?;
                let method = self.method.unwrap_or_else(|| "POST".into()).to_ascii_uppercase();
                if !matches!(method.as_str(), "GET" | "POST" | "PUT" | "PATCH" | "DELETE") {
                    return Err(format!("{at}.method: {method:?}: expected GET, POST, PUT, PATCH or DELETE"));
                }
                let url = self.url.ok_or_else(|| format!("{at}.url: missing"))?;
                check_url(&format!("{at}.url"), &url)?;
                placeholders(&url).map_err(|m| format!("{at}.url: {m}"))?;
                if let Some(f) = &self.fence_url {
                    check_url(&format!("{at}.fence_url"), f)?;
                }
                if let Some(b) = &self.bearer_env {
                    check_env_name(&format!("{at}.bearer_env"), b)?;
                }
                ToolKind::Http(HttpSpec {
                    method,
                    url,
                    bearer_env: self.bearer_env,
                    checks_fence: self.checks_fence.unwrap_or(false),
                    fence_url: self.fence_url,
                    patience: patience(at, pk, d::TOOL_TIMEOUT_MS, d::TOOL_RETRIES)?,
                })
            }
            "command" => {
                not_for(&http_keys, "command")?;
                if self.connect_timeout_ms.is_some() {
                    return Err(format!("{at}.connect_timeout_ms: not a key of a tool of kind \"command\""));
                }
                let program = self.program.ok_or_else(|| format!("{at}.program: missing"))?;
                if program.is_empty() {
                    return Err(format!("{at}.program: empty"));
                }
                let p = Path::new(&program);
                let program = match dir {
                    Some(d) if p.is_relative() && program.contains('/') => {
                        std::path::absolute(d.join(p)).unwrap_or_else(|_| d.join(p)).display().to_string()
                    }
                    _ => program,
                };
                let argv = self.argv.unwrap_or_default();
                if argv.len() > d::MAX_ARGV {
                    return Err(format!("{at}.argv: {} arguments, at most {}", argv.len(), d::MAX_ARGV));
                }
                ToolKind::Command(CommandSpec {
                    program,
                    argv,
                    patience: patience(at, pk, d::TOOL_TIMEOUT_MS, d::TOOL_RETRIES)?,
                })
            }
            "" => return Err(format!("{at}.kind: missing: \"http\", \"command\" or \"builtin\"")),
            other => return Err(format!("{at}.kind: {other:?}: expected \"http\", \"command\" or \"builtin\"")),
        };
        Ok(ToolSpec { name: self.name, class, description, parameters, kind })
    }
}

impl Spec {
    /// Reads and validates a spec file; errors name the file and the field. A relative command
    /// `program` with a `/` is resolved against the file's directory.
    pub fn load(path: &Path) -> TaskResult<Spec> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| TaskError::BadSpec { file: path.to_path_buf(), msg: format!("cannot read spec: {e}") })?;
        let dir = path.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p });
        Spec::parse_in(&text, dir).map_err(|msg| TaskError::BadSpec { file: path.to_path_buf(), msg })
    }

    /// The spec stored in task `task`'s row of log `db` (canonical JSON); exit 2 naming both
    /// when it does not parse.
    pub fn stored(json: &str, db: &str, task: &str) -> TaskResult<Spec> {
        Spec::from_json(json).map_err(|e| TaskError::StoredSpec {
            db: db.to_string(),
            task: task.to_string(),
            detail: e.to_string(),
        })
    }

    /// Parses and validates spec text (relative program paths stay as written).
    pub fn parse(text: &str) -> Result<Spec, String> {
        Spec::parse_in(text, None)
    }

    fn parse_in(text: &str, dir: Option<&Path>) -> Result<Spec, String> {
        let file: SpecFile = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        if let Some(id) = &file.id {
            check_id(id).map_err(|m| format!("id: {m}"))?;
        }
        let model = file.model.unwrap_or_default().validate()?;
        if file.tool.len() > d::MAX_TOOLS {
            return Err(format!("{} [[tool]] tables, at most {}", file.tool.len(), d::MAX_TOOLS));
        }
        let mut tools: Vec<ToolSpec> = Vec::new();
        for (i, t) in file.tool.into_iter().enumerate() {
            let t = t.validate(&format!("tool[{i}]"), dir)?;
            if tools.iter().any(|o| o.name == t.name) {
                return Err(format!("tool[{i}].name: {:?} is declared twice", t.name));
            }
            tools.push(t);
        }
        let mut steps = Vec::with_capacity(file.step.len());
        match &model {
            None => {
                if file.step.is_empty() {
                    return Err("no [[step]] tables: a task of the scripted model needs at least one step (or give a \
                                [model] that decides, e.g. kind = \"openai\")"
                        .into());
                }
                if file.step.len() > MAX_STEPS as usize {
                    return Err(format!("{} steps, at most {MAX_STEPS} allowed", file.step.len()));
                }
                if file.max_steps.is_some() {
                    return Err(
                        "max_steps: the scripted model runs its [[step]] tables; max_steps bounds a model that \
                                decides when it is done"
                            .into(),
                    );
                }
            }
            Some(_) => {
                if !file.step.is_empty() {
                    return Err(
                        "step: [[step]] tables script the default model; this spec's [model] decides the steps".into(),
                    );
                }
                if let Some(n) = file.max_steps
                    && !(1..=MAX_STEPS).contains(&n)
                {
                    return Err(format!("max_steps: {n}: expected 1 to {MAX_STEPS}"));
                }
            }
        }
        for (i, s) in file.step.into_iter().enumerate() {
            if s.model.len() > MAX_MODEL_TEXT {
                return Err(format!("step[{i}].model: {} bytes, at most {MAX_MODEL_TEXT}", s.model.len()));
            }
            if let Some(t) = &s.tool {
                if tool_class(t).is_none() && !tools.iter().any(|d| d.name == *t) {
                    return Err(format!(
                        "step[{i}].tool: unknown tool {t:?} (expected lookup, payment, send_email or a [[tool]] name)"
                    ));
                }
            } else if s.args.is_some() {
                return Err(format!("step[{i}].args: args without a tool"));
            }
            let args = serde_json::to_string(&s.args.unwrap_or_default())
                .map_err(|e| format!("step[{i}].args: cannot be encoded as JSON: {e}"))?;
            if args.len() > MAX_ARGS_BYTES {
                return Err(format!("step[{i}].args: {} bytes as JSON, at most {MAX_ARGS_BYTES}", args.len()));
            }
            steps.push(Step { model: s.model, tool: s.tool, args });
        }
        Ok(Spec { id: file.id, steps, model, tools, max_steps: file.max_steps })
    }

    /// Canonical JSON (stored in the database).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a Spec always serializes")
    }

    /// Reads the canonical JSON back.
    pub fn from_json(s: &str) -> Result<Spec, String> {
        serde_json::from_str(s).map_err(|e| e.to_string())
    }

    /// Whether the scripted model runs this spec.
    pub fn scripted(&self) -> bool {
        self.model.is_none()
    }

    /// The number of steps the `created` record holds: the script's, or `max_steps`.
    pub fn step_count(&self) -> u16 {
        if self.scripted() { self.steps.len() as u16 } else { self.max_steps.unwrap_or(d::MAX_STEPS) }
    }

    /// CRC-32C of the canonical JSON of everything but the id (so a fork with the same spec has
    /// the same digest). A spec of steps and built-in tools only hashes its steps alone, as
    /// before issue 29.
    pub fn digest(&self) -> u32 {
        if self.model.is_none() && self.tools.is_empty() && self.max_steps.is_none() {
            return crc32c(serde_json::to_string(&self.steps).expect("steps serialize").as_bytes());
        }
        let all = serde_json::json!({
            "steps": self.steps, "model": self.model, "tools": self.tools, "max_steps": self.max_steps,
        });
        crc32c(serde_json::to_string(&all).expect("a spec serializes").as_bytes())
    }

    /// The class of tool `name`: a declared tool's, else a built-in's.
    pub fn class_of(&self, name: &str) -> Option<ToolClass> {
        self.tools.iter().find(|t| t.name == name).map(|t| t.class).or_else(|| tool_class(name))
    }

    /// The scripted model's reply for `step`.
    pub fn reply(&self, step: u16) -> Option<ModelReply> {
        let s = self.steps.get(step as usize)?;
        let text = ModelText::try_from(s.model.as_str()).ok()?;
        let call = match &s.tool {
            Some(t) => Some(ToolCall {
                tool: ToolName::try_from(t.as_str()).ok()?,
                class: self.class_of(t)?,
                args: Args::from_slice(s.args.as_bytes()).ok()?,
            }),
            None => None,
        };
        Some(ModelReply { text, call, answer: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let s = Spec::parse(
            "id = \"a\"\n[[step]]\nmodel = \"m\"\ntool = \"payment\"\nargs = { b = 2, a = 1 }\n[[step]]\nmodel = \"x\"\n",
        )
        .unwrap();
        assert_eq!(s.steps[0].args, r#"{"a":1,"b":2}"#);
        assert_eq!(s.steps[1].tool, None);
        let e = Spec::parse("[[step]]\nmodel = \"m\"\ncolour = 1\n").unwrap_err();
        assert!(e.contains("colour"), "{e}");
        let e = Spec::parse("idd = \"x\"\n[[step]]\nmodel = \"m\"\n").unwrap_err();
        assert!(e.contains("idd"), "{e}");
        let e = Spec::parse("[[step]]\nmodel = \"m\"\ntool = \"rm\"\n").unwrap_err();
        assert!(e.contains("step[0].tool"), "{e}");
        assert!(Spec::parse("id = \"a b\"\n[[step]]\nmodel = \"m\"\n").is_err());
        assert!(Spec::parse("").is_err());
    }

    /// A spec of steps and built-in tools keeps the digest of the build before issue 29 (the CRC of
    /// its steps' JSON) and the same stored JSON, so tasks it logged resume.
    #[test]
    fn old_specs_keep_their_digest_and_json() {
        let s = Spec::parse("id = \"a\"\n[[step]]\nmodel = \"m\"\ntool = \"lookup\"\nargs = { q = 1 }\n").unwrap();
        assert_eq!(s.to_json(), r#"{"id":"a","steps":[{"model":"m","tool":"lookup","args":"{\"q\":1}"}]}"#);
        assert_eq!(s.digest(), crc32c(br#"[{"model":"m","tool":"lookup","args":"{\"q\":1}"}]"#));
        assert_eq!(Spec::from_json(&s.to_json()).unwrap(), s);
    }

    /// The key lists are exactly what the parser accepts: an unknown key in each table makes the
    /// parser list the keys it expects, which must be the constant's (so the doc table checked
    /// against the constants cannot drift from the parser).
    #[test]
    fn key_lists_are_the_parsers() {
        fn expected(text: &str) -> Vec<String> {
            let e = Spec::parse(text).unwrap_err();
            let tail = e.split("expected one of ").nth(1).unwrap_or_else(|| panic!("{e}"));
            let line = tail.lines().next().unwrap();
            line.split(", ").map(|k| k.trim().trim_matches('`').to_string()).collect()
        }
        let sorted = |k: &[&str]| {
            let mut v: Vec<String> = k.iter().map(|s| s.to_string()).collect();
            v.sort();
            v
        };
        let mut top = expected("bogus_key = 1\n");
        top.sort();
        assert_eq!(top, sorted(&KEYS_TOP));
        let mut m = expected("[model]\nbogus_key = 1\n");
        m.sort();
        assert_eq!(m, sorted(&KEYS_MODEL));
        let mut t = expected("[[tool]]\nname = \"x\"\nbogus_key = 1\n");
        t.sort();
        assert_eq!(t, sorted(&KEYS_TOOL));
        let mut s = expected("[[step]]\nmodel = \"m\"\nbogus_key = 1\n");
        s.sort();
        assert_eq!(s, sorted(&KEYS_STEP));
    }

    #[test]
    fn agent_specs_validate_every_key() {
        let ok = r#"
id = "ag"
max_steps = 5
[model]
kind = "openai"
base_url = "http://127.0.0.1:9/v1/"
model = "m"
api_key_env = "OPENAI_API_KEY"
prompt = "do it"
[[tool]]
name = "pay"
kind = "http"
class = "idempotent"
url = "http://127.0.0.1:9/pay/{order}"
parameters = { type = "object", properties = { order = { type = "string" } }, required = ["order"] }
[[tool]]
name = "notify"
kind = "command"
class = "non-idempotent"
program = "bin/notify"
"#;
        let s = Spec::parse_in(ok, Some(Path::new("/x"))).unwrap();
        assert_eq!(s.step_count(), 5);
        match &s.model {
            Some(ModelSpec::Openai(o)) => assert_eq!(o.base_url, "http://127.0.0.1:9/v1"),
            m => panic!("{m:?}"),
        }
        match &s.tools[1].kind {
            ToolKind::Command(c) => assert_eq!(c.program, "/x/bin/notify"),
            k => panic!("{k:?}"),
        }
        assert_eq!(Spec::from_json(&s.to_json()).unwrap(), s);
        let bad = |from: &str, to: &str, says: &str| {
            let t = ok.replace(from, to);
            let e = Spec::parse(&t).unwrap_err();
            assert!(e.contains(says), "{from} -> {to}: {e}");
        };
        bad("api_key_env = \"OPENAI_API_KEY\"", "api_key_env = \"sk-abcdef0123456789\"", "model.api_key_env");
        bad("http://127.0.0.1:9/v1/", "http://u:pw@127.0.0.1:9/v1", "credentials");
        bad("class = \"idempotent\"", "", "tool[0].class: missing");
        bad("kind = \"command\"", "kind = \"shell\"", "tool[1].kind");
        bad("program = \"bin/notify\"", "program = \"bin/notify\"\nurl = \"http://x\"", "tool[1].url: not a key");
        bad("max_steps = 5", "max_steps = 0", "max_steps");
        bad("{order}", "{or-der}", "placeholder");
        bad("name = \"pay\"", "name = \"payment\"", "built-in tool's name");
        bad("name = \"pay\"", "name = \"a.b\"", "tool[0].name");
        bad("prompt = \"do it\"", "prompt = \"do it\"\n[[step]]\nmodel = \"x\"", "[[step]] tables script");
        bad("type = \"object\", properties", "type = \"string\", properties", "parameters");
        bad("kind = \"openai\"", "kind = \"openai\"\ntemperature = 3.0", "temperature");
    }
}
