//! Tools: what a tool is asked ([`ToolRequest`]), what it may answer ([`ToolReply`]), and the
//! trait a tool implements ([`Tool`]). The runner turns the answers into the log's records by the
//! tool's [`ToolClass`] (docs/RUNNER.md, "Real tools"):
//!
//! | answer                     | read-only              | idempotent                         | non-idempotent |
//! |----------------------------|------------------------|------------------------------------|----------------|
//! | [`ToolReply::Done`]        | result                 | result                             | result         |
//! | [`ToolReply::Refused`]     | failed result          | failed result                      | failed result  |
//! | [`ToolReply::RateLimited`] | wait, again (bounded); then a failed result ("not done") | same | same |
//! | [`ToolReply::Unreachable`] | again (bounded); then a failed result ("not sent") | same | same |
//! | [`ToolReply::InProgress`]  | wait, again (bounded); then as `Unknown` | same key again (bounded); then as `Unknown` | as `Unknown` |
//! | [`ToolReply::Unknown`]     | again (bounded); then the run stops (exit 1), resumed later | same key again (bounded); then review | review at once |
//! | [`ToolReply::KeyConflict`] | review                 | review                             | review         |
//! | [`ToolReply::Fenced`]      | the runner lost its lease: it stops and writes nothing more (exit 1) | same | same |

use std::fmt;

pub use brokerlab_core::runner::ToolClass;
use serde::{Deserialize, Serialize};

/// A call's fencing token: the task and the epoch of the lease under which its intent was
/// recorded. A tool that can check it keeps, per task, the highest epoch it has seen and refuses
/// a lower one without acting ([`ToolReply::Fenced`]): a runner that lost its lease (paused past
/// it, then woken) cannot act. Its text form, `task/epoch`, is the `Brokerlab-Fence` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence<'a> {
    /// The task.
    pub task: &'a str,
    /// The lease epoch.
    pub epoch: u64,
}

impl fmt::Display for Fence<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.task, self.epoch)
    }
}

impl<'a> Fence<'a> {
    /// Parses `task/epoch` (a task id has no `/`).
    pub fn parse(s: &'a str) -> Option<Fence<'a>> {
        let (task, epoch) = s.trim().rsplit_once('/')?;
        if task.is_empty() || task.contains('/') {
            return None;
        }
        Some(Fence { task, epoch: epoch.parse().ok()? })
    }
}

/// One call of a tool.
#[derive(Debug, Clone, Copy)]
pub struct ToolRequest<'a> {
    /// The task.
    pub task: &'a str,
    /// The step.
    pub step: u16,
    /// The tool's name.
    pub tool: &'a str,
    /// Its class.
    pub class: ToolClass,
    /// The arguments: a JSON object, canonical (sorted keys, no spaces), the bytes the intent
    /// recorded; the same on every attempt.
    pub arguments: &'a str,
    /// The idempotency key (idempotent tools only): the same on every attempt, derived from
    /// (task, step, tool, arguments), never from the model's call id.
    pub key: Option<&'a str>,
    /// The fencing token.
    pub fence: Fence<'a>,
    /// 0 for the first attempt of this call in this run, then 1, 2, ... (a new run starts at 0
    /// again: a resumed call is not told it was tried).
    pub attempt: u32,
}

/// What a tool answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolReply {
    /// It acted (or answered a read), with this result text.
    Done(String),
    /// It did nothing and says why (bad arguments, a business rule): recorded as a failed result,
    /// which the model sees.
    Refused(String),
    /// It did nothing now (too many requests); try again after the pause it asks for (bounded).
    RateLimited {
        /// The pause it asks for, ms.
        retry_after_ms: Option<u64>,
    },
    /// The call never reached the tool (connection refused, no such host, TLS failed, the
    /// program could not be started): nothing happened; it may be sent again.
    Unreachable(String),
    /// A request with the same idempotency key is still being processed (HTTP 409 to a keyed
    /// request); ask again with the same key after a pause.
    InProgress {
        /// The pause it asks for, ms.
        retry_after_ms: Option<u64>,
    },
    /// It may or may not have acted (a 5xx, a timeout or a connection lost after sending, a
    /// program killed or exiting with an unlisted status).
    Unknown(String),
    /// It says the idempotency key was used before with another request (HTTP 422 to a keyed
    /// request): what happened under that key needs a human.
    KeyConflict(String),
    /// It refused the call's fencing token: it has seen `highest` for this task.
    Fenced {
        /// The highest token it has seen.
        highest: u64,
    },
}

/// A tool the runner can call. Implement it to plug your own tool in
/// ([`crate::agent::RunnerBuilder::tool`]).
pub trait Tool {
    /// Makes one attempt of a call. Called only once the call's intent is durable in the log;
    /// called again with the same arguments, key and fence when the answer allows a retry.
    fn call(&mut self, req: &ToolRequest<'_>) -> ToolReply;

    /// Whether this tool refuses a stale fencing token ([`ToolReply::Fenced`]). A runner whose
    /// database session dropped may then be taken over at once even with this tool's call open
    /// (the dropped-session rule); otherwise only at its lease's expiry. Default: no.
    fn checks_fence(&self) -> bool {
        false
    }

    /// Raises the task's fence to `fence.epoch` without acting: called when a runner takes over a
    /// call of this tool that is in flight (or waits for review) before it decides, so a call
    /// from the previous holder arriving later is refused. Default: nothing to raise.
    fn raise_fence(&mut self, fence: Fence<'_>) -> Result<(), String> {
        let _ = fence;
        Ok(())
    }
}

/// A tool as the model is told about it and the runner classes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    /// The name the model calls it by: 1 to 16 bytes of letters, digits, `_`, `-`.
    pub name: String,
    /// What a retry may do.
    pub class: ToolClass,
    /// What it does, for the model.
    pub description: String,
    /// Its parameters: a JSON Schema object (`{"type": "object", ...}`).
    pub parameters: serde_json::Value,
}

impl ToolDef {
    /// A tool with no description and an empty parameter object.
    pub fn new(name: &str, class: ToolClass) -> ToolDef {
        ToolDef {
            name: name.to_string(),
            class,
            description: String::new(),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
        }
    }

    /// With this description.
    pub fn description(mut self, text: &str) -> ToolDef {
        self.description = text.to_string();
        self
    }

    /// With these parameters (a JSON Schema object).
    pub fn parameters(mut self, schema: serde_json::Value) -> ToolDef {
        self.parameters = schema;
        self
    }

    /// The names the schema's `required` lists.
    pub fn required(&self) -> Vec<&str> {
        self.parameters
            .get("required")
            .and_then(|r| r.as_array())
            .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default()
    }
}

/// The first `max` bytes of `s`, cut at a character boundary, with what was cut said at the end
/// (`... [cut: N more bytes]`), so a record never claims to hold all of a longer text.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let tail = format!(" [cut: {} more bytes]", s.len());
    let room = max.saturating_sub(tail.len() + 4);
    let mut end = room.min(s.len());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    let more = s.len() - end;
    format!("{} [cut: {more} more bytes]", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_and_cuts() {
        assert_eq!(Fence::parse("inv-1/7"), Some(Fence { task: "inv-1", epoch: 7 }));
        assert_eq!(Fence { task: "a", epoch: 3 }.to_string(), "a/3");
        assert!(Fence::parse("a/b/3").is_none() && Fence::parse("/3").is_none() && Fence::parse("a/x").is_none());
        assert_eq!(cut("short", 10), "short");
        let long = "é".repeat(100);
        let c = cut(&long, 64);
        assert!(c.len() <= 64, "{}", c.len());
        assert!(c.ends_with("more bytes]"), "{c}");
    }
}
