//! The durable runner as a Rust library: a tool and a model defined in Rust, a task run to
//! completion, and what a crash-safe runner adds (docs/RUNNER.md, "The library").
//!
//! ```sh
//! cargo run -p brokerlab --example agent_library            # in a fresh temp directory
//! cargo run -p brokerlab --example agent_library -- DIR     # its log and ledger in DIR
//! ```
//!
//! `host/tests/agent_library.rs` compiles this file and runs [`run_in`] in CI.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use brokerlab::agent::{
    Model, ModelError, ModelRequest, ModelTurn, Outcome, Runner, Task, Tool, ToolClass, ToolDef, ToolReply,
    ToolRequest, TurnOutcome,
};

/// A payment system that dedupes by idempotency key, as Stripe does: a second request with a
/// key it has seen gets the first answer and moves no money. Shared with the caller, which reads
/// it afterwards (a real tool would talk to a server instead).
#[derive(Debug, Default)]
pub struct Ledger {
    /// (key, order, cents) of every refund applied.
    pub applied: Vec<(String, String, u64)>,
    /// Requests answered from a key already seen.
    pub replays: u32,
}

/// The `refund` tool: idempotent, because the ledger dedupes on the key the runner derives from
/// (task, step, tool, arguments) and sends on every attempt.
pub struct Refund(pub Arc<Mutex<Ledger>>);

impl Tool for Refund {
    fn call(&mut self, req: &ToolRequest<'_>) -> ToolReply {
        let Some(key) = req.key else { return ToolReply::Refused("no idempotency key".into()) };
        let args: serde_json::Value = match serde_json::from_str(req.arguments) {
            Ok(v) => v,
            Err(e) => return ToolReply::Refused(format!("arguments: {e}")),
        };
        let (Some(order), Some(cents)) = (args["order"].as_str(), args["amount_cents"].as_u64()) else {
            return ToolReply::Refused("expected {order, amount_cents}".into());
        };
        let Ok(mut ledger) = self.0.lock() else { return ToolReply::Unknown("ledger poisoned".into()) };
        if ledger.applied.iter().any(|(k, _, _)| k == key) {
            ledger.replays += 1;
        } else {
            ledger.applied.push((key.to_string(), order.to_string(), cents));
        }
        ToolReply::Done(format!("refunded {cents} cents on {order}"))
    }
}

/// A model written in Rust: refunds the order named in the prompt, then answers with what the
/// tool said. It decides from the conversation the runner rebuilt from the log, so a resumed task
/// gets the same decisions.
pub struct Clerk;

impl Model for Clerk {
    fn reply(&mut self, req: &ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        let order = req.prompt.split_whitespace().find(|w| w.starts_with("o-")).unwrap_or("o-0").to_string();
        Ok(match req.history.last().and_then(|t| t.call.as_ref()) {
            None => ModelTurn::Call {
                text: format!("Refunding {order}."),
                tool: "refund".into(),
                arguments: serde_json::json!({ "order": order, "amount_cents": 4999 }),
            },
            Some(call) => match &call.outcome {
                TurnOutcome::Result { ok: true, output } => ModelTurn::Answer { text: format!("Done: {output}.") },
                other => ModelTurn::Answer { text: format!("The refund did not go through: {}", other.text()) },
            },
        })
    }
}

/// Runs the example in `dir` (its log `dir/tasks.sqlite`); returns the final answer and the
/// ledger. Running it again on the same directory resumes the finished task: nothing is paid twice.
pub fn run_in(dir: &Path) -> Result<(String, Arc<Mutex<Ledger>>), String> {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let refund =
        ToolDef::new("refund", ToolClass::Idempotent).description("Refunds an order").parameters(serde_json::json!({
            "type": "object",
            "properties": { "order": { "type": "string" }, "amount_cents": { "type": "integer" } },
            "required": ["order", "amount_cents"]
        }));
    let mut runner = Runner::builder()
        .db(dir.join("tasks.sqlite"))
        .world(dir.join("world"))
        .model(Clerk)
        .tool(refund, Refund(ledger.clone()))
        .build()
        .map_err(|e| e.to_string())?;
    let task = Task::new("refund-o-42", "Please refund order o-42").max_steps(4);
    match runner.run(&task).map_err(|e| e.to_string())? {
        Outcome::Completed { answer, .. } => Ok((answer.unwrap_or_default(), ledger)),
        other => Err(format!("not completed: {other:?}")),
    }
}

fn main() {
    let dir = match std::env::args_os().nth(1) {
        Some(d) => PathBuf::from(d),
        None => std::env::temp_dir().join(format!("brokerlab-agent-library-{}", std::process::id())),
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("agent_library: {}: {e}", dir.display());
        std::process::exit(2);
    }
    match run_in(&dir) {
        Ok((answer, ledger)) => {
            let applied = ledger.lock().map(|l| l.applied.len()).unwrap_or(0);
            println!("{answer}");
            println!("refunds applied: {applied}; log: {}", dir.join("tasks.sqlite").display());
        }
        Err(e) => {
            eprintln!("agent_library: {e}");
            std::process::exit(1);
        }
    }
}
