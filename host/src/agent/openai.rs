//! `[model] kind = "openai"`: an OpenAI-compatible Chat Completions server (OpenAI, vLLM with a
//! tool-call parser, llama.cpp's server, Ollama's `/v1`), asked with `POST
//! {base_url}/chat/completions`, not streamed.
//!
//! The request is rebuilt from the log at every step: the system message, the user's request,
//! then per finished step the assistant's message (its text, and its one tool call under this
//! runner's id, [`super::model::call_id`]) and the tool's answer. It sends `tools` (name,
//! description, JSON Schema parameters), `parallel_tool_calls: false`, `stream: false`, the token
//! limit under `token_limit_field`, and `temperature`, `seed`, `tool_choice` when the spec sets
//! them. The API key comes from the environment variable the spec names; it is sent as `Bearer`
//! and never printed or recorded (every message is scrubbed of it).
//!
//! The answer: the step's call is `choices[0].message.tool_calls[0]` (its name must be a declared
//! tool, its arguments a JSON object with the schema's `required` names, at most the log's
//! `MAX_ARGS_BYTES` as canonical JSON); if a server sends several calls despite
//! `parallel_tool_calls: false`, the first is the step's and the text records how many more were
//! dropped (the model is shown only the one that ran, and asks again for the rest). No call: the
//! message's text (or its `refusal`) is the final answer. A call cut by the token limit
//! (`finish_reason = "length"`) or an invalid one is not run: the model is asked again (within
//! `retries`) with a note saying what was wrong.
//!
//! Status classes: 2xx parsed; 408, 409, 429, 5xx, a timeout or a broken connection: asked again
//! after `backoff_ms` doubling to `max_backoff_ms`, or after the server's `retry-after-ms` /
//! `Retry-After` (seconds) if it sent one and it is at most `max_retry_after_ms` (a longer one is
//! not waited for); `x-should-retry: false` stops the retries. 400, 401, 403, 404, 422 and any other
//! 4xx: the request or the configuration is wrong ([`ModelError::Refused`], exit 2). Asking again
//! is safe: a model call acts on nothing. What a re-asked model may answer differently, and what
//! the log keeps: docs/RUNNER.md, "A real model".

use std::time::Duration;

use brokerlab_core::runner::MAX_ARGS_BYTES;
use serde_json::{Value, json};

use super::model::{Model, ModelError, ModelRequest, ModelTurn};
use super::tool::ToolDef;
use crate::task::secret;
use crate::task::spec::OpenAiSpec;

/// A model on an OpenAI-compatible server.
pub struct OpenAiModel {
    spec: OpenAiSpec,
    agent: ureq::Agent,
    key: Option<String>,
    /// Requests sent so far (all steps), for reports.
    pub requests: u64,
}

impl std::fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiModel").field("base_url", &self.spec.base_url).field("model", &self.spec.model).finish()
    }
}

/// One request's fate.
enum Attempt {
    /// A 2xx answer's body.
    Answer(Value),
    /// Worth asking again (after the server's pause, if it gave one).
    Again { why: String, retry_after_ms: Option<u64>, stop: bool },
    /// The request is wrong: asking again would not help.
    Refused(String),
}

/// The pause a server asks for: `retry-after-ms` (milliseconds, OpenAI's), else `Retry-After` in
/// seconds (integer or decimal; an HTTP date is not used: the backoff applies).
pub fn retry_after_ms(headers: &ureq::http::HeaderMap) -> Option<u64> {
    let num = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).and_then(|s| s.trim().parse::<f64>().ok());
    let ms = num("retry-after-ms").or_else(|| num("retry-after").map(|s| s * 1000.0))?;
    (ms.is_finite() && ms >= 0.0).then_some(ms.ceil() as u64)
}

/// An HTTP client with these timeouts that reports every status as a response (never as an
/// error) and follows no redirect (a POST must not be re-sent elsewhere).
pub fn agent(timeout_ms: u64, connect_timeout_ms: u64) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_millis(timeout_ms)))
        .timeout_connect(Some(Duration::from_millis(connect_timeout_ms)))
        .max_redirects(0)
        .user_agent(concat!("brokerlab/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// The error message in an error body (`{"error": {"message": ...}}`, `{"error": "..."}`, or
/// the start of the body).
fn error_text(body: &str) -> String {
    let v: Option<Value> = serde_json::from_str(body).ok();
    let m = v.as_ref().and_then(|v| {
        let e = v.get("error")?;
        e.get("message").and_then(|m| m.as_str()).or_else(|| e.as_str()).map(str::to_string)
    });
    let t = m.unwrap_or_else(|| body.chars().take(300).collect());
    t.trim().to_string()
}

impl OpenAiModel {
    /// A model for `spec`; the API key is read from its variable now (a spec naming a variable
    /// that is not set or empty is refused: exit 2, naming the variable).
    pub fn new(spec: &OpenAiSpec) -> Result<OpenAiModel, ModelError> {
        let key = match &spec.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.trim().is_empty() => {
                    secret::remember_secret(k.trim());
                    Some(k.trim().to_string())
                }
                _ => {
                    return Err(ModelError::Refused(format!(
                        "model.api_key_env: the environment variable {var} is not set (or empty); set it to the \
                         server's API key"
                    )));
                }
            },
        };
        let p = spec.patience;
        Ok(OpenAiModel { spec: spec.clone(), agent: agent(p.timeout_ms, p.connect_timeout_ms), key, requests: 0 })
    }

    /// The request body for `req` (with a correcting note after an invalid answer).
    pub fn body(&self, req: &ModelRequest<'_>, note: Option<&str>) -> Value {
        let mut messages = Vec::new();
        if let Some(s) = req.system {
            messages.push(json!({"role": "system", "content": s}));
        }
        messages.push(json!({"role": "user", "content": req.prompt}));
        for t in req.history {
            match &t.call {
                Some(c) => {
                    let content = if t.text.is_empty() { Value::Null } else { Value::String(t.text.clone()) };
                    messages.push(json!({
                        "role": "assistant",
                        "content": content,
                        "tool_calls": [{"id": c.id, "type": "function",
                                        "function": {"name": c.tool, "arguments": c.arguments}}],
                    }));
                    messages.push(json!({"role": "tool", "tool_call_id": c.id, "content": c.outcome.text()}));
                }
                None => messages.push(json!({"role": "assistant", "content": t.text})),
            }
        }
        if let Some(n) = note {
            messages.push(json!({"role": "user", "content": n}));
        }
        let mut body = json!({
            "model": self.spec.model,
            "messages": messages,
            "stream": false,
        });
        let o = body.as_object_mut().expect("an object");
        o.insert(self.spec.token_limit_field.clone(), json!(self.spec.max_tokens));
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
            o.insert("tools".into(), Value::Array(tools));
            o.insert("parallel_tool_calls".into(), json!(false));
            if let Some(c) = &self.spec.tool_choice {
                o.insert("tool_choice".into(), json!(c));
            }
        }
        if let Some(t) = self.spec.temperature {
            o.insert("temperature".into(), json!(t));
        }
        if let Some(s) = self.spec.seed {
            o.insert("seed".into(), json!(s));
        }
        body
    }

    fn post(&mut self, body: &Value) -> Attempt {
        self.requests += 1;
        let url = format!("{}/chat/completions", self.spec.base_url);
        let text = body.to_string();
        let mut rq = self.agent.post(&url).header("Content-Type", "application/json");
        if let Some(k) = &self.key {
            rq = rq.header("Authorization", &format!("Bearer {k}"));
        }
        let mut resp = match rq.send(text.as_str()) {
            Ok(r) => r,
            Err(e) => {
                return Attempt::Again {
                    why: format!("{url}: {}", secret::scrub(&e.to_string())),
                    retry_after_ms: None,
                    stop: false,
                };
            }
        };
        let status = resp.status().as_u16();
        let after = retry_after_ms(resp.headers());
        let should = resp.headers().get("x-should-retry").and_then(|v| v.to_str().ok()).map(|s| s == "true");
        let body =
            resp.body_mut().with_config().limit(super::defaults::MAX_BODY_BYTES).lossy_utf8(true).read_to_string();
        let body = match body {
            Ok(b) => b,
            Err(e) => {
                return Attempt::Again {
                    why: format!("{url}: HTTP {status}, reading the answer: {}", secret::scrub(&e.to_string())),
                    retry_after_ms: after,
                    stop: false,
                };
            }
        };
        if (200..300).contains(&status) {
            return match serde_json::from_str(&body) {
                Ok(v) => Attempt::Answer(v),
                Err(e) => Attempt::Again {
                    why: format!("{url}: HTTP {status} but the answer is not JSON: {e}"),
                    retry_after_ms: None,
                    stop: false,
                },
            };
        }
        let words = secret::scrub(&error_text(&body));
        let transient = matches!(status, 408 | 409 | 429) || status >= 500;
        match (transient, should) {
            (_, Some(true)) | (true, None) => {
                Attempt::Again { why: format!("{url}: HTTP {status}: {words}"), retry_after_ms: after, stop: false }
            }
            (true, Some(false)) => Attempt::Again {
                why: format!("{url}: HTTP {status} (x-should-retry: false): {words}"),
                retry_after_ms: None,
                stop: true,
            },
            (false, _) => Attempt::Refused(format!("{url}: HTTP {status}: {words}")),
        }
    }
}

/// The step's turn from a 2xx answer, or why it is not usable.
pub fn parse_answer(v: &Value, tools: &[ToolDef]) -> Result<ModelTurn, String> {
    let choice =
        v.get("choices").and_then(|c| c.as_array()).and_then(|c| c.first()).ok_or("the answer has no choices[0]")?;
    let msg = choice.get("message").ok_or("choices[0] has no message")?;
    let finish = choice.get("finish_reason").and_then(|f| f.as_str()).unwrap_or("");
    let text = msg.get("content").and_then(|c| c.as_str()).unwrap_or("").to_string();
    let calls = msg.get("tool_calls").and_then(|c| c.as_array()).cloned().unwrap_or_default();
    let Some(first) = calls.first() else {
        let refusal = msg.get("refusal").and_then(|r| r.as_str());
        let mut text = match refusal {
            Some(r) if text.is_empty() => format!("[refused] {r}"),
            _ => text,
        };
        if finish == "length" {
            text.push_str(" [cut at the token limit]");
        } else if finish == "content_filter" {
            text.push_str(" [stopped by the content filter]");
        }
        return Ok(ModelTurn::Answer { text });
    };
    if finish == "length" {
        return Err("the tool call was cut at the token limit (finish_reason \"length\"); not run".into());
    }
    let f = first.get("function").ok_or("tool_calls[0] has no function")?;
    let name = f.get("name").and_then(|n| n.as_str()).ok_or("tool_calls[0].function has no name")?;
    let Some(def) = tools.iter().find(|t| t.name == name) else {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        return Err(format!("it called {name:?}, which is not one of the tools ({})", names.join(", ")));
    };
    let args_text = match f.get("arguments") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(_)) => f.get("arguments").map(Value::to_string).unwrap_or_default(),
        Some(Value::Null) | None => String::new(),
        Some(other) => return Err(format!("the arguments of {name} are {other}, not a JSON object")),
    };
    let args: Value = if args_text.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(&args_text).map_err(|e| format!("the arguments of {name} are not JSON: {e}"))?
    };
    let Some(obj) = args.as_object() else {
        return Err(format!("the arguments of {name} are not a JSON object"));
    };
    let missing: Vec<&str> = def.required().into_iter().filter(|k| !obj.contains_key(*k)).collect();
    if !missing.is_empty() {
        return Err(format!("the call of {name} lacks the required argument(s) {}", missing.join(", ")));
    }
    let n = args.to_string().len();
    if n > MAX_ARGS_BYTES {
        return Err(format!(
            "the arguments of {name} take {n} bytes as JSON, more than the {MAX_ARGS_BYTES} a step records"
        ));
    }
    let mut text = text;
    if calls.len() > 1 {
        let more = calls.len() - 1;
        text.push_str(&format!(
            " [{more} more tool call(s) in this answer were not run: one tool per step; the model is shown only the \
             first]"
        ));
    }
    Ok(ModelTurn::Call { text: text.trim_start().to_string(), tool: name.to_string(), arguments: args })
}

impl Model for OpenAiModel {
    fn reply(&mut self, req: &ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        let p = self.spec.patience;
        let mut note: Option<String> = None;
        let mut last = String::new();
        let salt = super::jitter::salt(&[req.task.as_bytes(), &req.step.to_le_bytes()]);
        for attempt in 0..=p.retries {
            let body = self.body(req, note.as_deref());
            let pause = match self.post(&body) {
                Attempt::Answer(v) => match parse_answer(&v, req.tools) {
                    Ok(turn) => return Ok(turn),
                    Err(why) => {
                        last = format!("the answer was not usable: {why}");
                        note = Some(format!(
                            "Your previous answer could not be used: {why}. Call one of the tools with a JSON object \
                             of arguments, or give your final answer without a tool call."
                        ));
                        p.pause_ms(attempt, salt ^ u64::from(attempt), None)
                    }
                },
                Attempt::Refused(why) => return Err(ModelError::Refused(why)),
                Attempt::Again { why, stop: true, .. } => return Err(ModelError::Unavailable(why)),
                Attempt::Again { why, retry_after_ms, stop: false } => {
                    last = why;
                    match retry_after_ms {
                        Some(ms) if ms > p.max_retry_after_ms => {
                            return Err(ModelError::Unavailable(format!(
                                "{last}; the server asks to wait {ms} ms (Retry-After), more than max_retry_after_ms \
                                 ({} ms)",
                                p.max_retry_after_ms
                            )));
                        }
                        a => p.pause_ms(attempt, salt ^ u64::from(attempt), a),
                    }
                }
            };
            if attempt < p.retries {
                std::thread::sleep(Duration::from_millis(pause));
            }
        }
        Err(ModelError::Unavailable(format!(
            "no usable answer after {} request(s) (model.retries = {}): {last}",
            p.retries + 1,
            p.retries
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brokerlab_core::runner::ToolClass;

    #[test]
    fn answers_are_parsed_by_the_rules() {
        let tools = [ToolDef::new("pay", ToolClass::Idempotent)
            .parameters(json!({"type": "object", "required": ["order"], "properties": {}}))];
        let call = |args: &str, n: usize, finish: &str| {
            let one = json!({"id": "x", "type": "function", "function": {"name": "pay", "arguments": args}});
            json!({"choices": [{"index": 0, "finish_reason": finish,
                   "message": {"role": "assistant", "content": null, "tool_calls": vec![one; n]}}]})
        };
        match parse_answer(&call(r#"{"order":"o1"}"#, 1, "tool_calls"), &tools).unwrap() {
            ModelTurn::Call { tool, arguments, text } => {
                assert_eq!((tool.as_str(), arguments, text.as_str()), ("pay", json!({"order": "o1"}), ""));
            }
            t => panic!("{t:?}"),
        }
        match parse_answer(&call(r#"{"order":"o1"}"#, 3, "stop"), &tools).unwrap() {
            ModelTurn::Call { text, .. } => assert!(text.contains("2 more tool call(s)"), "{text}"),
            t => panic!("{t:?}"),
        }
        assert!(parse_answer(&call(r#"{"order":"o1"}"#, 1, "length"), &tools).unwrap_err().contains("token limit"));
        assert!(parse_answer(&call(r#"{}"#, 1, "stop"), &tools).unwrap_err().contains("required"));
        assert!(parse_answer(&call(r#"[1]"#, 1, "stop"), &tools).unwrap_err().contains("object"));
        assert!(parse_answer(&call(r#"{"#, 1, "stop"), &tools).unwrap_err().contains("not JSON"));
        let answer = json!({"choices": [{"finish_reason": "stop", "message": {"content": "all done"}}]});
        assert_eq!(parse_answer(&answer, &tools).unwrap(), ModelTurn::Answer { text: "all done".into() });
        assert!(parse_answer(&json!({"choices": []}), &tools).is_err());
    }
}
