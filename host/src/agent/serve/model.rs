//! `brokerlab task serve-model`: an OpenAI-compatible Chat Completions server that answers from a
//! script, on loopback only (tests, demos, `task chaos --model openai`).
//!
//! `POST .../chat/completions`. The script is a JSON array of turns, `{"tool": NAME, "args":
//! {...}, "text": "..."}` (a tool call) or `{"answer": "..."}` (the final answer): taken from a
//! line `brokerlab-script: [...]` in the first user message, else from `--script FILE`. The turn
//! answered is the number of tool calls the request's conversation already holds, so the same
//! conversation always gets the same answer, and a conversation rebuilt from a log after a crash
//! continues where the log is.
//!
//! It checks what a careful server would, and answers 400 when the request is wrong: the model
//! named, `stream` not true, the past assistant turns are the script's calls in order (name and
//! arguments as JSON), each followed by a `tool` message answering its `tool_call_id`, the tool it
//! is about to call offered in `tools`, and `parallel_tool_calls: false`. Each answer's tool call
//! carries a new id (`call_<n>`, n counting requests), as real models mint one per answer: a
//! runner keying anything on it would break.
//!
//! With `--faults SEED`, by draws from the seed: 429 with `retry-after-ms: 10`, 500, 503 with
//! `Retry-After: 0`, an answer with a second, unscripted tool call beside the scripted one (the
//! runner must run only the first), and slow answers (up to 100 ms). `--log FILE` appends one line
//! per request (`status N` or `fault NAME`) for the chaos run's counts.

use std::io::{Read, Write};
use std::path::PathBuf;

use serde_json::{Value, json};
use tiny_http::{Header, Response};

use super::tools::{bind, exit_with_parent};
use crate::task::error::{TaskError, TaskResult};

/// The marker of an inline script in the first user message.
pub const SCRIPT_MARKER: &str = "brokerlab-script:";

/// Per-mille odds of each injected fault with `--faults`.
const FAULT_429_PERMILLE: u64 = 40;
/// Per-mille odds of a 500.
const FAULT_500_PERMILLE: u64 = 25;
/// Per-mille odds of a 503.
const FAULT_503_PERMILLE: u64 = 25;
/// Per-mille odds of a second, unscripted tool call in the answer.
const FAULT_EXTRA_CALL_PERMILLE: u64 = 60;
/// Per-mille odds of a slow answer.
const FAULT_SLOW_PERMILLE: u64 = 60;

/// Longest request body read, bytes.
const MAX_REQUEST_BYTES: u64 = 4 << 20;

/// Options of `task serve-model`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeModelOpts {
    /// Port on 127.0.0.1 (0: a free one; the first stdout line names it).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// The script for conversations without an inline `brokerlab-script:` line (a JSON array).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Misbehave by draws from this seed (429, 500, 503, an extra tool call, slow answers).
    #[arg(long, value_name = "SEED")]
    pub faults: Option<u64>,
    /// Append one line per request to this file.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// The model name it answers to (others: 404, as a real server says).
    #[arg(long, default_value = "scripted")]
    pub model: String,
    /// Exit when the parent process exits (tests, chaos).
    #[arg(long)]
    pub exit_with_parent: bool,
}

/// One scripted turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Scripted {
    /// A tool call.
    Call {
        /// The tool.
        tool: String,
        /// Its arguments.
        args: Value,
        /// Text beside it.
        text: String,
    },
    /// The final answer.
    Answer(String),
}

/// Parses a script (a JSON array of turns).
pub fn parse_script(v: &Value) -> Result<Vec<Scripted>, String> {
    let a = v.as_array().ok_or("a script is a JSON array of turns")?;
    a.iter()
        .enumerate()
        .map(|(i, t)| {
            if let Some(ans) = t.get("answer").and_then(|a| a.as_str()) {
                return Ok(Scripted::Answer(ans.to_string()));
            }
            let tool =
                t.get("tool").and_then(|x| x.as_str()).ok_or(format!("turn {i}: expected \"tool\" or \"answer\""))?;
            let args = t.get("args").cloned().unwrap_or_else(|| json!({}));
            if !args.is_object() {
                return Err(format!("turn {i}: \"args\" must be an object"));
            }
            let text = t.get("text").and_then(|x| x.as_str()).unwrap_or("").to_string();
            Ok(Scripted::Call { tool: tool.to_string(), args, text })
        })
        .collect()
}

/// The script line for a prompt: `brokerlab-script: [...]`.
pub fn script_line(turns: &[Scripted]) -> String {
    let v: Vec<Value> = turns
        .iter()
        .map(|t| match t {
            Scripted::Call { tool, args, text } => json!({"tool": tool, "args": args, "text": text}),
            Scripted::Answer(a) => json!({"answer": a}),
        })
        .collect();
    format!("{SCRIPT_MARKER} {}", Value::Array(v))
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes())
        .unwrap_or_else(|()| Header::from_bytes(&b"X-Bad-Header"[..], &b"1"[..]).expect("a constant header"))
}

fn err(status: u16, msg: &str) -> (u16, Value) {
    (status, json!({"error": {"message": msg, "type": "invalid_request_error", "param": null, "code": null}}))
}

/// The answer to one request (status, body) and whether to add an unscripted second call.
fn answer(req: &Value, fallback: &Option<Vec<Scripted>>, model: &str, n: u64, extra_call: bool) -> (u16, Value) {
    if req.get("model").and_then(|m| m.as_str()) != Some(model) {
        return err(
            404,
            &format!("the model {:?} does not exist (this server answers to {model:?})", req.get("model")),
        );
    }
    if req.get("stream").and_then(|s| s.as_bool()) == Some(true) {
        return err(400, "stream: true is not served here");
    }
    let Some(msgs) = req.get("messages").and_then(|m| m.as_array()) else {
        return err(400, "messages: expected an array");
    };
    let first_user = msgs.iter().find(|m| m.get("role").and_then(|r| r.as_str()) == Some("user"));
    let inline = first_user
        .and_then(|m| m.get("content").and_then(|c| c.as_str()))
        .and_then(|c| c.lines().find_map(|l| l.trim().strip_prefix(SCRIPT_MARKER).map(str::trim)));
    let script = match inline {
        Some(text) => {
            match serde_json::from_str::<Value>(text).map_err(|e| e.to_string()).and_then(|v| parse_script(&v)) {
                Ok(s) => s,
                Err(e) => return err(400, &format!("the inline script: {e}")),
            }
        }
        None => match fallback {
            Some(s) => s.clone(),
            None => return err(400, "no brokerlab-script: line in the first user message and no --script"),
        },
    };
    // the conversation so far must follow the script, each call answered by its tool message
    let mut done = 0usize;
    for (i, m) in msgs.iter().enumerate() {
        let Some(calls) = m.get("tool_calls").and_then(|c| c.as_array()) else { continue };
        if m.get("role").and_then(|r| r.as_str()) != Some("assistant") || calls.len() != 1 {
            return err(400, &format!("messages[{i}]: an assistant message with exactly one tool call expected"));
        }
        let c = &calls[0];
        let id = c.get("id").and_then(|x| x.as_str()).unwrap_or("");
        let f = c.get("function").cloned().unwrap_or(Value::Null);
        let name = f.get("name").and_then(|x| x.as_str()).unwrap_or("");
        let args: Option<Value> =
            f.get("arguments").and_then(|a| a.as_str()).and_then(|a| serde_json::from_str(a).ok());
        match script.get(done) {
            Some(Scripted::Call { tool, args: want, .. }) if tool == name && args.as_ref() == Some(want) => {}
            other => {
                return err(
                    400,
                    &format!(
                        "messages[{i}]: call {name}({args:?}) does not follow the script's turn {done}: {other:?}"
                    ),
                );
            }
        }
        let answered = msgs.get(i + 1).is_some_and(|t| {
            t.get("role").and_then(|r| r.as_str()) == Some("tool")
                && t.get("tool_call_id").and_then(|x| x.as_str()) == Some(id)
                && t.get("content").is_some_and(|c| c.is_string())
        });
        if !answered {
            return err(
                400,
                &format!("messages[{i}]: tool call {id:?} is not followed by a tool message answering it"),
            );
        }
        done += 1;
    }
    let offered: Vec<&str> = req
        .get("tools")
        .and_then(|t| t.as_array())
        .map(|a| a.iter().filter_map(|t| t.get("function")?.get("name")?.as_str()).collect())
        .unwrap_or_default();
    let message = match script.get(done) {
        Some(Scripted::Call { tool, args, text }) => {
            if !offered.contains(&tool.as_str()) {
                return err(400, &format!("tools: the script calls {tool:?}, which the request does not offer"));
            }
            if req.get("parallel_tool_calls") != Some(&json!(false)) {
                return err(400, "parallel_tool_calls: expected false (one tool per step)");
            }
            let mut calls = vec![json!({"id": format!("call_{n}"), "type": "function",
                                        "function": {"name": tool, "arguments": args.to_string()}})];
            if extra_call {
                calls.push(json!({"id": format!("call_{n}_b"), "type": "function",
                                  "function": {"name": tool, "arguments": "{\"unscripted\":true}"}}));
            }
            let content = if text.is_empty() { Value::Null } else { Value::String(text.clone()) };
            (json!({"role": "assistant", "content": content, "tool_calls": calls}), "tool_calls")
        }
        Some(Scripted::Answer(a)) => (json!({"role": "assistant", "content": a}), "stop"),
        None => (json!({"role": "assistant", "content": "the script has ended"}), "stop"),
    };
    (
        200,
        json!({
            "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message.0, "finish_reason": message.1, "logprobs": null}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }),
    )
}

/// `task serve-model`: serves until killed.
pub fn serve(o: &ServeModelOpts) -> TaskResult<i32> {
    let fallback = match &o.script {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .map_err(|e| TaskError::bad_input(format!("{}: cannot read the script: {e}", p.display())))?;
            let v: Value = serde_json::from_str(&t)
                .map_err(|e| TaskError::bad_input(format!("{}: not JSON: {e}", p.display())))?;
            Some(parse_script(&v).map_err(|e| TaskError::bad_input(format!("{}: {e}", p.display())))?)
        }
        None => None,
    };
    let mut log = match &o.log {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| TaskError::bad_input(format!("{}: {e}", p.display())))?,
        ),
        None => None,
    };
    if o.exit_with_parent {
        exit_with_parent();
    }
    let server = bind(o.port, "serve-model")?;
    let mut n: u64 = 0;
    for mut rq in server.incoming_requests() {
        n += 1;
        let d = o.faults.map(|s| crate::agent::jitter::salt(&[&s.to_le_bytes(), &n.to_le_bytes(), b"model"]) % 1000);
        let mut body = String::new();
        let _ = rq.as_reader().take(MAX_REQUEST_BYTES).read_to_string(&mut body);
        let mut extra = Vec::new();
        let mut fault = None;
        let (status, v) = if !rq.url().trim_end_matches('/').ends_with("/chat/completions") {
            err(404, "only POST .../chat/completions is served")
        } else {
            let mut edge = 0;
            let mut hit = |odds: u64| {
                edge += odds;
                d.is_some_and(|d| d < edge)
            };
            if hit(FAULT_429_PERMILLE) {
                fault = Some("429");
                extra.push(("retry-after-ms", "10".to_string()));
                err(429, "rate limited (injected)")
            } else if hit(FAULT_500_PERMILLE) {
                fault = Some("500");
                err(500, "internal error (injected)")
            } else if hit(FAULT_503_PERMILLE) {
                fault = Some("503");
                extra.push(("Retry-After", "0".to_string()));
                err(503, "unavailable (injected)")
            } else {
                let two = hit(FAULT_EXTRA_CALL_PERMILLE);
                if hit(FAULT_SLOW_PERMILLE) {
                    fault = Some("slow");
                    std::thread::sleep(std::time::Duration::from_millis(d.unwrap_or(0) % 100));
                }
                match serde_json::from_str::<Value>(&body) {
                    Ok(req) => {
                        let a = answer(&req, &fallback, &o.model, n, two);
                        if two && a.1.pointer("/choices/0/message/tool_calls/1").is_some() {
                            fault = Some("extra-call");
                        }
                        a
                    }
                    Err(e) => err(400, &format!("the body is not JSON: {e}")),
                }
            }
        };
        if let Some(f) = log.as_mut() {
            let _ = match fault {
                Some(x) => writeln!(f, "fault {x} status {status}"),
                None => writeln!(f, "status {status}"),
            };
        }
        let mut resp = Response::from_string(v.to_string())
            .with_status_code(status)
            .with_header(header("Content-Type", "application/json"));
        for (k, val) in extra {
            resp = resp.with_header(header(k, &val));
        }
        let _ = rq.respond(resp);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_is_followed_and_checked() {
        let script = vec![
            Scripted::Call { tool: "pay".into(), args: json!({"a": 1}), text: String::new() },
            Scripted::Answer("done".into()),
        ];
        let line = script_line(&script);
        let tools = json!([{"type": "function", "function": {"name": "pay", "parameters": {"type": "object"}}}]);
        let mut req = json!({"model": "scripted", "messages": [{"role": "user", "content": format!("go\n{line}")}],
                             "tools": tools, "parallel_tool_calls": false});
        let (s, v) = answer(&req, &None, "scripted", 1, false);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v.pointer("/choices/0/message/tool_calls/0/function/name").unwrap(), "pay");
        let msgs = req["messages"].as_array_mut().unwrap();
        msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "s00000000", "type": "function",
                         "function": {"name": "pay", "arguments": "{\"a\":1}"}}]}));
        msgs.push(json!({"role": "tool", "tool_call_id": "s00000000", "content": "ok"}));
        let (s, v) = answer(&req, &None, "scripted", 2, false);
        assert_eq!((s, v.pointer("/choices/0/message/content").unwrap().as_str().unwrap()), (200, "done"));
        // a tool message that answers another id is refused
        req["messages"][2]["tool_call_id"] = json!("x");
        assert_eq!(answer(&req, &None, "scripted", 3, false).0, 400);
    }
}
