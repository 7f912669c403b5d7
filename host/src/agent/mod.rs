//! The durable runner as a library: put it in front of your own model and tools.
//!
//! A [`Runner`] runs a [`Task`] (an id, a prompt, a step limit) step by step: it asks the
//! [`Model`] for the step (showing it the conversation so far, rebuilt from the task's log), and
//! if the model asks for a tool, records the call's intent durably, then calls the [`Tool`], then
//! records its result; the model's final answer (a turn without a tool call) completes the task.
//! Everything the runner knows is in the log (SQLite or PostgreSQL), so a crash at any point, a
//! `task suspend`, or a second runner never repeats a side effect: the next run reads the log and
//! applies the resume rule by the tool's [`ToolClass`] (re-run a read-only call, re-call an
//! idempotent one with the same idempotency key, pause a non-idempotent one for a human's
//! review). The command line (`brokerlab task run`) is one user of the same machinery, with the
//! models and tools a spec file names (docs/RUNNER.md).
//!
//! ```no_run
//! use brokerlab::agent::{Model, ModelError, ModelRequest, ModelTurn, Outcome, Runner, Task, Tool, ToolClass,
//!                        ToolDef, ToolReply, ToolRequest};
//!
//! /// Refunds an order; the payment system dedupes on the key, so the tool is idempotent.
//! struct Refund;
//! impl Tool for Refund {
//!     fn call(&mut self, req: &ToolRequest<'_>) -> ToolReply {
//!         // send req.arguments to the payment API with req.key as its idempotency key
//!         ToolReply::Done(format!("refunded, key {}", req.key.unwrap_or("-")))
//!     }
//! }
//!
//! /// A model that refunds once, then answers.
//! struct Clerk;
//! impl Model for Clerk {
//!     fn reply(&mut self, req: &ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
//!         Ok(match req.history.len() {
//!             0 => ModelTurn::Call {
//!                 text: String::new(),
//!                 tool: "refund".into(),
//!                 arguments: serde_json::json!({"order": "o-42"}),
//!             },
//!             _ => ModelTurn::Answer { text: "order o-42 refunded".into() },
//!         })
//!     }
//! }
//!
//! let mut runner = Runner::builder()
//!     .db("tasks.sqlite")
//!     .model(Clerk)
//!     .tool(ToolDef::new("refund", ToolClass::Idempotent).description("Refunds an order"), Refund)
//!     .build()?;
//! match runner.run(&Task::new("refund-o-42", "Refund order o-42"))? {
//!     Outcome::Completed { answer, .. } => println!("{}", answer.unwrap_or_default()),
//!     other => println!("{other:?}"),
//! }
//! # Ok::<(), brokerlab::task::error::TaskError>(())
//! ```
//!
//! A runnable example that defines a tool in Rust: `examples/agent_library.rs` (`cargo run -p
//! brokerlab --example agent_library`; `cargo test` runs it too).

#![warn(missing_docs)]

pub mod command;
pub mod defaults;
pub mod http;
pub mod jitter;
pub mod model;
pub mod openai;
pub mod script;
pub mod serve;
pub mod tool;
pub mod toolbox;

use std::path::{Path, PathBuf};

use brokerlab_core::runner::{Event, MIN_LEASE_MS, Stop};

pub use brokerlab_core::runner::{Decision, ToolClass};
pub use jitter::salt;
pub use model::{Model, ModelError, ModelRequest, ModelTurn, Turn, TurnCall, TurnOutcome, call_id};
pub use tool::{Fence, Tool, ToolDef, ToolReply, ToolRequest};

use crate::task::backend::{Access, DbTarget, TaskStore};
use crate::task::db::open;
use crate::task::error::{TaskError, TaskResult};
use crate::task::exec::{self, Kit, RunOpts, Start};
use crate::task::spec::{ModelSpec, Patience, Spec, ToolKind, ToolSpec, check_id, check_tool_name};
use crate::task::world::World;
use toolbox::Toolbox;

/// A task for [`Runner::run`]: its id (the same id resumes it), the user's request, and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The id: 1 to 48 bytes of letters, digits, `.`, `_`, `-`.
    pub id: String,
    /// The user's request, shown to the model as the first user message.
    pub prompt: String,
    /// A system message, if any.
    pub system: Option<String>,
    /// The most steps (model calls) it may take ([`defaults::MAX_STEPS`] by default); a model
    /// still asking for a tool on the last one fails the task.
    pub max_steps: u16,
}

impl Task {
    /// A task `id` asking `prompt`.
    pub fn new(id: &str, prompt: &str) -> Task {
        Task { id: id.to_string(), prompt: prompt.to_string(), system: None, max_steps: defaults::MAX_STEPS }
    }
    /// With a system message.
    pub fn system(mut self, text: &str) -> Task {
        self.system = Some(text.to_string());
        self
    }
    /// With another step limit.
    pub fn max_steps(mut self, n: u16) -> Task {
        self.max_steps = n;
        self
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The task is done: the model's final answer (none if its steps were a fixed script).
    Completed {
        /// The final answer.
        answer: Option<String>,
        /// Steps taken.
        steps: u16,
    },
    /// Suspended on request (`task suspend`, or SIGTERM in a worker); [`Runner::resume`] goes on.
    Suspended {
        /// The step it continues with.
        next_step: u16,
    },
    /// A call's outcome is unknown and the runner will not repeat it on its own: a human checks
    /// the tool's own records and answers with [`Runner::review`], then resumes.
    NeedsReview {
        /// The step.
        step: u16,
        /// Its tool.
        tool: String,
        /// Why, when the tool said.
        note: Option<String>,
    },
    /// The task failed for good (e.g. the step limit was reached).
    Failed {
        /// Why.
        reason: String,
    },
}

/// Builds a [`Runner`] (see [`Runner::builder`]).
pub struct RunnerBuilder {
    db: Option<DbTarget>,
    world: PathBuf,
    model: Option<Box<dyn Model>>,
    tools: Vec<(ToolDef, Box<dyn Tool>, Patience)>,
    lease_ms: i64,
    margin_ms: Option<i64>,
}

impl std::fmt::Debug for RunnerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tools.iter().map(|(d, _, _)| d.name.as_str()).collect();
        f.debug_struct("RunnerBuilder").field("db", &self.db).field("tools", &names).finish_non_exhaustive()
    }
}

/// The patience of a program's tool: [`defaults::TOOL_RETRIES`] retries where the class rule
/// allows them, backoff from [`defaults::BACKOFF_MS`] (its own timeouts are the tool's business).
pub const LIBRARY_TOOL_PATIENCE: Patience = Patience {
    timeout_ms: defaults::TOOL_TIMEOUT_MS,
    connect_timeout_ms: defaults::CONNECT_TIMEOUT_MS,
    retries: defaults::TOOL_RETRIES,
    backoff_ms: defaults::BACKOFF_MS,
    max_backoff_ms: defaults::MAX_BACKOFF_MS,
    max_retry_after_ms: defaults::MAX_RETRY_AFTER_MS,
};

impl RunnerBuilder {
    /// The log: a SQLite file (created if missing) or a `postgres://USER@HOST:PORT/DB` URL
    /// (`sslmode=require|verify-full&sslrootcert=CA.pem` for TLS). Default: `$BROKERLAB_DB`, else
    /// `tasks.sqlite`.
    pub fn db(mut self, target: impl AsRef<Path>) -> RunnerBuilder {
        self.db = Some(DbTarget::parse(target.as_ref()));
        self
    }
    /// Where the built-in simulated tools keep their files (default `./world`); unused unless a
    /// task's tools include them.
    pub fn world(mut self, dir: impl AsRef<Path>) -> RunnerBuilder {
        self.world = dir.as_ref().to_path_buf();
        self
    }
    /// The model.
    pub fn model(mut self, m: impl Model + 'static) -> RunnerBuilder {
        self.model = Some(Box::new(m));
        self
    }
    /// A tool, as the model is told about it ([`ToolDef`]: name, class, description, JSON Schema
    /// parameters) and its implementation.
    pub fn tool(self, def: ToolDef, t: impl Tool + 'static) -> RunnerBuilder {
        self.tool_with(def, t, LIBRARY_TOOL_PATIENCE)
    }
    /// A tool with its own retry policy (`retries`, `backoff_ms`, `max_backoff_ms`,
    /// `max_retry_after_ms` are used; the timeouts are the tool's business).
    pub fn tool_with(mut self, def: ToolDef, t: impl Tool + 'static, patience: Patience) -> RunnerBuilder {
        self.tools.push((def, Box::new(t), patience));
        self
    }
    /// The lease: how long another runner waits before taking over one that stopped renewing
    /// (default 5000 ms; set it above the longest model or tool call).
    pub fn lease_ms(mut self, ms: u64) -> RunnerBuilder {
        self.lease_ms = i64::try_from(ms).unwrap_or(i64::MAX);
        self
    }
    /// The margin rule's margin: a tool call leaves only while this much of the lease is left
    /// (default a quarter of the lease).
    pub fn lease_margin_ms(mut self, ms: u64) -> RunnerBuilder {
        self.margin_ms = Some(i64::try_from(ms).unwrap_or(i64::MAX));
        self
    }
    /// The runner; exit-2 errors name what is wrong (no model, a bad tool name or schema, two
    /// tools with one name, a lease out of range).
    pub fn build(self) -> TaskResult<Runner> {
        let model = self.model.ok_or_else(|| TaskError::bad_input("Runner: no model (RunnerBuilder::model)"))?;
        let max = i64::try_from(brokerlab_core::runner::MAX_LEASE_MS).unwrap_or(i64::MAX);
        if !(i64::try_from(MIN_LEASE_MS).unwrap_or(10)..=max).contains(&self.lease_ms) {
            return Err(TaskError::bad_input(format!("Runner: lease_ms {}: out of range", self.lease_ms)));
        }
        let margin = self.margin_ms.unwrap_or(self.lease_ms / 4);
        if margin >= self.lease_ms || margin < 0 {
            return Err(TaskError::bad_input(format!("Runner: lease_margin_ms {margin}: must be below the lease")));
        }
        let mut defs = Vec::new();
        let mut tools = Toolbox::builtins(World::new(&self.world));
        for (def, t, p) in self.tools {
            check_tool_name(&def.name)
                .map_err(|m| TaskError::bad_input(format!("Runner: tool {:?}: {m}", def.name)))?;
            if defs.iter().any(|d: &ToolDef| d.name == def.name) || crate::task::spec::tool_class(&def.name).is_some() {
                return Err(TaskError::bad_input(format!("Runner: tool {:?} is defined twice", def.name)));
            }
            if def.parameters.get("type").and_then(|t| t.as_str()) != Some("object") {
                return Err(TaskError::bad_input(format!(
                    "Runner: tool {:?}: parameters must be a JSON Schema object ({{\"type\": \"object\", ...}})",
                    def.name
                )));
            }
            defs.push(def.clone());
            tools.add(def, t, p);
        }
        let db = self.db.unwrap_or_else(|| crate::task::DbArg { db: None }.target());
        let opts =
            RunOpts { world: Some(self.world), lease_ms: self.lease_ms, lease_margin_ms: margin, ..RunOpts::default() };
        Ok(Runner { db, defs, kit: Kit { model, tools, prompt: String::new(), system: None, scripted: false }, opts })
    }
}

/// Runs tasks with a program's own model and tools (see the module doc).
pub struct Runner {
    db: DbTarget,
    defs: Vec<ToolDef>,
    kit: Kit<'static>,
    opts: RunOpts,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner").field("db", &self.db).field("tools", &self.defs).finish_non_exhaustive()
    }
}

impl Runner {
    /// A builder: `.db(...)`, `.model(...)`, `.tool(...)`, then `.build()`.
    pub fn builder() -> RunnerBuilder {
        RunnerBuilder {
            db: None,
            world: PathBuf::from(exec::DEFAULT_WORLD),
            model: None,
            tools: Vec::new(),
            lease_ms: 5000,
            margin_ms: None,
        }
    }

    /// The spec a task of this runner is stored with (its digest identifies it).
    fn spec_of(&self, task: &Task) -> Spec {
        let tools = self
            .defs
            .iter()
            .map(|d| ToolSpec {
                name: d.name.clone(),
                class: d.class,
                description: d.description.clone(),
                parameters: d.parameters.clone(),
                kind: ToolKind::Library,
            })
            .collect();
        Spec {
            id: Some(task.id.clone()),
            steps: Vec::new(),
            model: Some(ModelSpec::Library { prompt: task.prompt.clone(), system: task.system.clone() }),
            tools,
            max_steps: Some(task.max_steps),
        }
    }

    /// Runs `task` until it completes, suspends, pauses for review or fails; a task whose id
    /// exists (with the same prompt, limits and tool definitions) is resumed.
    pub fn run(&mut self, task: &Task) -> TaskResult<Outcome> {
        check_id(&task.id).map_err(|m| TaskError::bad_input(format!("task id {:?}: {m}", task.id)))?;
        if task.max_steps == 0 || task.max_steps > brokerlab_core::runner::MAX_STEPS {
            return Err(TaskError::bad_input(format!(
                "task {:?}: max_steps {}: out of range",
                task.id, task.max_steps
            )));
        }
        let spec = self.spec_of(task);
        let store = open(&self.db, Access::Create)?;
        let store = &*store;
        let create = match store.task(&task.id)? {
            Some(row) => {
                let stored = Spec::stored(&row.spec, &store.name(), &task.id)?;
                if stored.digest() != spec.digest() {
                    return Err(TaskError::bad_input(format!(
                        "task {:?} already exists with another prompt, step limit or tool set; give the new task \
                         another id",
                        task.id
                    )));
                }
                None
            }
            None => Some(exec::new_task(&spec, &task.id, &self.world_dir())?),
        };
        self.go(store, &task.id, &spec, create)
    }

    /// Resumes task `id` from its log (a task this runner's tools can run).
    pub fn resume(&mut self, id: &str) -> TaskResult<Outcome> {
        let store = open(&self.db, Access::Write)?;
        let store = &*store;
        let row = store.task_or_err(id)?;
        let spec = Spec::stored(&row.spec, &store.name(), id)?;
        let Some(ModelSpec::Library { .. }) = &spec.model else {
            return Err(TaskError::bad_input(format!(
                "task {id:?} was not created through the library; run it with `brokerlab task resume {id}`"
            )));
        };
        self.go(store, id, &spec, None)
    }

    /// Records a human's decision for a step waiting for review (the call happened:
    /// [`Decision::MarkDone`]; it did not: [`Decision::Retry`]); then [`Runner::resume`].
    pub fn review(&mut self, id: &str, step: u16, decision: Decision) -> TaskResult<()> {
        exec::review_quiet(&self.db, id, step, decision, self.opts.lease_ms).map(|_| ())
    }

    fn world_dir(&self) -> PathBuf {
        self.opts.world.clone().unwrap_or_else(|| PathBuf::from(exec::DEFAULT_WORLD))
    }

    fn go(
        &mut self,
        store: &dyn TaskStore,
        id: &str,
        spec: &Spec,
        create: Option<crate::task::backend::NewTask>,
    ) -> TaskResult<Outcome> {
        if let Some(ModelSpec::Library { prompt, system }) = &spec.model {
            self.kit.prompt = prompt.clone();
            self.kit.system = system.clone();
        }
        let start = Start { create, resume_if_exists: true, on_start: None };
        let ran = exec::execute(store, id, spec, &mut self.kit, &self.opts, start)?;
        let st = &ran.state;
        Ok(match ran.stop {
            Stop::Completed => {
                let answer = store.records(id)?.iter().rev().find_map(|r| match &r.event {
                    Event::Answer { text, .. } => Some(text.to_string()),
                    _ => None,
                });
                Outcome::Completed { answer, steps: st.step }
            }
            Stop::Suspended => Outcome::Suspended { next_step: st.step },
            Stop::NeedsReview { step } => Outcome::NeedsReview { step, tool: exec::tool_at(st), note: ran.note },
            Stop::Failed => {
                let reason = store.records(id)?.iter().rev().find_map(|r| match &r.event {
                    Event::Failed { reason } => Some(reason.to_string()),
                    _ => None,
                });
                Outcome::Failed { reason: reason.unwrap_or_default() }
            }
        })
    }
}
