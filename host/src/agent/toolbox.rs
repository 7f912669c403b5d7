//! The tools of one run: the built-in simulated ones (their calls in the world's files), the
//! spec's HTTP and command tools, and a program's own ([`super::Tool`] implementations), each
//! with its [`ToolDef`] and its patience (timeouts, retries).

use brokerlab_core::runner::{ResultText, ToolCall, ToolClass, ToolOutput};

use super::command::CommandTool;
use super::http::HttpTool;
use super::tool::{Fence, Tool, ToolDef, ToolReply, ToolRequest};
use crate::agent::defaults as d;
use crate::task::error::{TaskError, TaskResult};
use crate::task::spec::{Patience, Spec, TOOLS, ToolKind, tool_class};
use crate::task::world::{CallOutcome, ToolFile, World};

/// How a tool of the box is called.
enum Imp {
    /// `lookup`, `payment` or `send_email`, in the world.
    Builtin,
    /// A spec's tool or a program's.
    Custom(Box<dyn Tool>),
    /// A program's tool (`kind = "library"` in the stored spec) that this process does not have.
    Missing,
}

struct Entry {
    def: ToolDef,
    imp: Imp,
    patience: Patience,
    /// Shown to the model.
    offered: bool,
}

/// The tools of one run, and the world the built-in ones keep their calls in.
pub struct Toolbox {
    /// The built-in tools' files (or tables).
    pub world: World,
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.entries.iter().map(|e| e.def.name.as_str()).collect();
        f.debug_struct("Toolbox").field("world", &self.world).field("tools", &names).finish()
    }
}

/// The patience of the built-in tools: they answer at once or fail (no retries).
const BUILTIN_PATIENCE: Patience = Patience {
    timeout_ms: d::TOOL_TIMEOUT_MS,
    connect_timeout_ms: d::CONNECT_TIMEOUT_MS,
    retries: 0,
    backoff_ms: 0,
    max_backoff_ms: 0,
    max_retry_after_ms: 0,
};

fn builtin_def(name: &str, class: ToolClass) -> ToolDef {
    let description = match name {
        "lookup" => "Looks a record up (simulated; read-only).",
        "payment" => "Makes a payment (simulated; idempotent: deduplicated by the idempotency key).",
        _ => "Sends an email (simulated; not idempotent).",
    };
    ToolDef::new(name, class).description(description)
}

impl Toolbox {
    /// The built-in tools alone (offered to no model), their world in `world`.
    pub fn builtins(world: World) -> Toolbox {
        let entries = TOOLS
            .iter()
            .map(|(n, c)| Entry {
                def: builtin_def(n, *c),
                imp: Imp::Builtin,
                patience: BUILTIN_PATIENCE,
                offered: false,
            })
            .collect();
        Toolbox { world, entries }
    }

    /// The tools of `spec`: the built-in ones (always there for its steps; offered to the model
    /// when declared), and its declared HTTP, command and library tools. An HTTP tool whose
    /// `bearer_env` is not set is refused (exit 2).
    pub fn from_spec(spec: &Spec, world: World) -> TaskResult<Toolbox> {
        let mut b = Toolbox::builtins(world);
        for t in &spec.tools {
            let def = ToolDef {
                name: t.name.clone(),
                class: t.class,
                description: t.description.clone(),
                parameters: t.parameters.clone(),
            };
            let (imp, patience) = match &t.kind {
                ToolKind::Builtin => {
                    if let Some(e) = b.entries.iter_mut().find(|e| e.def.name == t.name) {
                        e.offered = true;
                        if !t.description.is_empty() {
                            e.def.description = t.description.clone();
                        }
                        e.def.parameters = t.parameters.clone();
                    }
                    continue;
                }
                ToolKind::Http(h) => {
                    (Imp::Custom(Box::new(HttpTool::new(&t.name, h).map_err(TaskError::bad_input)?)), h.patience)
                }
                ToolKind::Command(c) => (Imp::Custom(Box::new(CommandTool::new(c))), c.patience),
                ToolKind::Library => (Imp::Missing, BUILTIN_PATIENCE),
            };
            b.entries.push(Entry { def, imp, patience, offered: true });
        }
        Ok(b)
    }

    /// Adds (or replaces) a program's own tool.
    pub fn add(&mut self, def: ToolDef, tool: Box<dyn Tool>, patience: Patience) {
        self.entries.retain(|e| e.def.name != def.name);
        self.entries.push(Entry { def, imp: Imp::Custom(tool), patience, offered: true });
    }

    /// The tools shown to the model, in declaration order.
    pub fn offered(&self) -> Vec<ToolDef> {
        self.entries.iter().filter(|e| e.offered).map(|e| e.def.clone()).collect()
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.def.name == name)
    }

    /// The class of tool `name`.
    pub fn class(&self, name: &str) -> Option<ToolClass> {
        self.entry(name).map(|e| e.def.class).or_else(|| tool_class(name))
    }

    /// Tool `name`'s patience (timeouts and retries).
    pub fn patience(&self, name: &str) -> Patience {
        self.entry(name).map_or(BUILTIN_PATIENCE, |e| e.patience)
    }

    /// Whether tool `name` refuses a stale fencing token: the built-in tools with a file do
    /// (unless a fault hook turned it off), another tool if it says so; an unknown tool is taken
    /// to check none (the careful side of the dropped-session rule).
    pub fn checks_fence(&self, name: &str) -> bool {
        match self.entry(name).map(|e| &e.imp) {
            Some(Imp::Builtin) | None => self.world.checks_fence(name),
            Some(Imp::Custom(t)) => t.checks_fence(),
            Some(Imp::Missing) => false,
        }
    }

    /// Raises the task's fence in tool `name` to `epoch` (a runner taking over its call first).
    pub fn raise_fence(&mut self, name: &str, task: &str, epoch: u64) -> TaskResult<()> {
        match self.entries.iter_mut().find(|e| e.def.name == name).map(|e| &mut e.imp) {
            Some(Imp::Builtin) | None => match ToolFile::of_tool(name) {
                Some(f) => self.world.raise_fence(f, task, epoch),
                None => Ok(()),
            },
            Some(Imp::Custom(t)) => t
                .raise_fence(Fence { task, epoch })
                .map_err(|e| TaskError::failure(format!("task {task:?}: tool {name}: {e}"))),
            Some(Imp::Missing) => Ok(()),
        }
    }

    /// One attempt of `call`.
    pub fn call(&mut self, req: &ToolRequest<'_>, call: &ToolCall) -> TaskResult<ToolReply> {
        let Some(e) = self.entries.iter_mut().find(|e| e.def.name == call.tool.as_str()) else {
            return Err(TaskError::failure(format!("task {:?}: unknown tool {:?}", req.task, req.tool)));
        };
        match &mut e.imp {
            Imp::Custom(t) => Ok(t.call(req)),
            Imp::Missing => Err(TaskError::bad_input(format!(
                "task {:?}: tool {:?} is a program's own tool (created through the library); run the task from that \
                 program",
                req.task, req.tool
            ))),
            Imp::Builtin => {
                let key = req.key.and_then(|k| brokerlab_core::runner::Key::try_from(k).ok());
                Ok(match self.world.call(req.task, req.step, call, key.as_ref(), req.fence.epoch)? {
                    CallOutcome::Done(ToolOutput { output, .. }) => ToolReply::Done(output.to_string()),
                    CallOutcome::Fenced { highest, .. } => ToolReply::Fenced { highest },
                })
            }
        }
    }

    /// Whether `name` is one of the built-in simulated tools (kept in the world).
    pub fn is_builtin(&self, name: &str) -> bool {
        matches!(self.entry(name).map(|e| &e.imp), Some(Imp::Builtin))
    }

    /// Where tool `name` keeps its records, for messages: a built-in's file, else the tool.
    pub fn place(&self, name: &str) -> String {
        match ToolFile::of_tool(name) {
            Some(f) if matches!(self.entry(name).map(|e| &e.imp), Some(Imp::Builtin) | None) => self.world.place(f),
            _ => format!("tool {name}'s own records"),
        }
    }
}

/// A result text for the log: `s` cut to the log's limit, saying so.
pub fn result_text(s: &str) -> ResultText {
    let c = super::tool::cut(s, brokerlab_core::runner::MAX_RESULT_TEXT);
    let mut t = ResultText::new();
    for ch in c.chars() {
        if t.push(ch).is_err() {
            break;
        }
    }
    t
}
