//! The runner's journal (checkpoints fenced by the lease) and effects (the model, asked with the
//! conversation rebuilt from the log, and the tools, called with the lease checked before each
//! attempt and their answers mapped by the class rule) on the host.

#[allow(clippy::wildcard_imports)]
use super::*;

use crate::agent::model::{ModelError, ModelRequest, ModelTurn, turns};
use crate::agent::tool::{Fence, ToolReply, ToolRequest, cut};
use crate::agent::toolbox::result_text;
use brokerlab_core::runner::{Args, MAX_ARGS_BYTES, MAX_MODEL_TEXT, ModelText, ToolName, ToolOutcome};

/// The journal: buffers records and commits them in one transaction at each `sync`
/// (the core's drive syncs before every side effect), fenced by the lease.
pub struct HostJournal<'a> {
    store: &'a dyn TaskStore,
    lease: Lease,
    pending: Vec<Record>,
    chaos: &'a Chaos,
    /// When the lease was last renewed (ms; taken before the transaction, so the lease lasts at
    /// least `ttl` from it).
    pub(super) renewed_at_ms: Rc<Cell<i64>>,
    /// Every record of the task so far (the log as read, then each one appended): the model's
    /// conversation is rebuilt from it.
    pub history: Rc<std::cell::RefCell<Vec<Record>>>,
    /// Transactions committed.
    pub commits: u64,
}

impl<'a> HostJournal<'a> {
    /// A journal appending to `store` under `lease`.
    pub fn new(store: &'a dyn TaskStore, lease: Lease, chaos: &'a Chaos) -> Self {
        let renewed_at_ms = Rc::new(Cell::new(lease.taken_at_ms));
        HostJournal { store, lease, pending: Vec::new(), chaos, renewed_at_ms, history: Rc::default(), commits: 0 }
    }
}

impl Journal for HostJournal<'_> {
    type Error = AppendError<TaskError>;
    fn append(&mut self, rec: &Record) -> Result<(), AppendError<TaskError>> {
        self.pending.push(rec.clone());
        self.history.borrow_mut().push(rec.clone());
        Ok(())
    }
    fn sync(&mut self) -> Result<(), AppendError<TaskError>> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let what = self.pending.last().map(|r| format!("seq {} {}", r.seq, r.kind().name())).unwrap_or_default();
        self.chaos.point(Point::BeforeCommit, &what);
        checkpoint(self.store, &self.lease, &self.renewed_at_ms, &self.pending)?;
        self.pending.clear();
        self.commits += 1;
        self.chaos.point(Point::AfterCommit, &what);
        Ok(())
    }
}

/// One checkpoint of `recs` under `lease`: renews the lease when the core's `renewal_due` says so
/// on the holder's record of its last renewal (`renewed_at_ms`: taken before the transaction,
/// so the lease lasts at least its time to live from it), which is updated when it renewed.
pub fn checkpoint(
    store: &dyn TaskStore,
    lease: &Lease,
    renewed_at_ms: &Cell<i64>,
    recs: &[Record],
) -> Result<(), AppendError<TaskError>> {
    let t = now_ms();
    let due = renewal_due(renewed_at_ms.get().saturating_add(lease.ttl_ms), t, lease.ttl_ms);
    if store.checkpoint(lease, recs, due)? == Renewal::Renewed {
        renewed_at_ms.set(t);
    }
    Ok(())
}

/// The model, the tools and the suspend flag.
pub struct HostEffects<'a, 'k> {
    pub(super) kit: &'a mut Kit<'k>,
    pub(super) store: &'a dyn TaskStore,
    pub(super) chaos: &'a Chaos,
    pub(super) delay: Duration,
    pub(super) lease: Lease,
    pub(super) margin_ms: i64,
    pub(super) renewed_at_ms: Rc<Cell<i64>>,
    pub(super) history: Rc<std::cell::RefCell<Vec<Record>>>,
    /// The task's step count (`max_steps` for a model that decides).
    pub(super) max_steps: u16,
    /// Set when a tool or a renewal found that another runner holds the lease.
    pub(super) fenced: bool,
    /// Suspend once SIGTERM arrived (`task worker`).
    pub(super) suspend_on_term: bool,
    /// Why the last call went to review (said with the pause).
    pub(super) review_note: Option<String>,
}

/// A text for the log: `s` cut to the core's limit, saying so.
fn model_text(s: &str) -> ModelText {
    let c = cut(s, MAX_MODEL_TEXT);
    let mut t = ModelText::new();
    for ch in c.chars() {
        if t.push(ch).is_err() {
            break;
        }
    }
    t
}

impl HostEffects<'_, '_> {
    /// The margin rule (docs/RUNNER.md): a call is sent only while at least `margin_ms` of the
    /// lease is left; otherwise the lease is renewed first, in a fenced transaction, and a runner
    /// that lost it stops here without calling.
    fn check_lease(&mut self, task: &TaskId, step: u16, tool: &str) -> TaskResult<()> {
        let expires = self.renewed_at_ms.get().saturating_add(self.lease.ttl_ms);
        if may_call(expires, now_ms(), self.margin_ms) {
            return Ok(());
        }
        let t = now_ms();
        match self.store.renew(&self.lease) {
            Ok(()) => {
                self.renewed_at_ms.set(t);
                Ok(())
            }
            Err(AppendError::Fenced { epoch, holder }) => {
                self.fenced = true;
                Err(TaskError::RenewFenced {
                    task: task.to_string(),
                    step,
                    tool: tool.to_string(),
                    margin_ms: self.margin_ms,
                    epoch,
                    holder: holder.map(|(o, e)| (o.to_string(), e)),
                })
            }
            Err(AppendError::Sql(e)) => Err(e),
        }
    }

    /// The model's turn as the core's reply, checked: a known tool, a JSON object of arguments
    /// within the log's limit, texts cut to it, and a call on an agent's last step refused.
    fn reply_of(&self, task: &TaskId, step: u16, turn: ModelTurn) -> TaskResult<ModelReply> {
        let invalid = |why: String| TaskError::ModelUnavailable {
            task: task.to_string(),
            step,
            detail: format!("its answer was not usable: {why}"),
        };
        Ok(match turn {
            ModelTurn::Answer { text } => ModelReply { text: model_text(&text), call: None, answer: true },
            ModelTurn::Text { text } => ModelReply { text: model_text(&text), call: None, answer: false },
            ModelTurn::Call { text, tool, arguments } => {
                let class = self
                    .kit
                    .tools
                    .class(&tool)
                    .ok_or_else(|| invalid(format!("it called {tool:?}, which is not one of the task's tools")))?;
                if !arguments.is_object() {
                    return Err(invalid(format!("the arguments of {tool} are not a JSON object")));
                }
                let args = arguments.to_string();
                if args.len() > MAX_ARGS_BYTES {
                    return Err(invalid(format!(
                        "the arguments of {tool} take {} bytes, more than the {MAX_ARGS_BYTES} a step records",
                        args.len()
                    )));
                }
                if !self.kit.scripted && step + 1 >= self.max_steps {
                    return Err(TaskError::StepLimit { task: task.to_string(), max_steps: self.max_steps, tool });
                }
                let name = ToolName::try_from(tool.as_str()).map_err(|_| invalid(format!("tool name {tool:?}")))?;
                let args = Args::from_slice(args.as_bytes()).map_err(|_| invalid("arguments too long".into()))?;
                ModelReply { text: model_text(&text), call: Some(ToolCall { tool: name, class, args }), answer: false }
            }
        })
    }

    /// The pause before attempt `attempt + 1`, or `None` when no attempt is left or the server
    /// asks for a longer wait than allowed.
    fn pause(&self, p: &crate::task::spec::Patience, attempt: u32, salt: u64, asked: Option<u64>) -> Option<u64> {
        if attempt >= p.retries || asked.is_some_and(|a| a > p.max_retry_after_ms) {
            return None;
        }
        Some(p.pause_ms(attempt, salt ^ u64::from(attempt), asked))
    }

    /// A result the tool gave (or the runner's own "not sent"/"not done" verdict): recorded.
    fn done(&mut self, what: &str, ok: bool, text: &str) -> ToolOutcome {
        // the call has been applied; a slow tool's result "has not arrived" during this delay
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        self.chaos.point(Point::ToolApplied, what);
        ToolOutcome::Done(ToolOutput { ok, output: result_text(text) })
    }
}

impl Effects for HostEffects<'_, '_> {
    type Error = TaskError;

    fn model(&mut self, task: &TaskId, step: u16) -> TaskResult<ModelReply> {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let history = turns(&self.history.borrow());
        let tools = self.kit.tools.offered();
        let req = ModelRequest {
            task,
            step,
            max_steps: self.max_steps,
            system: self.kit.system.as_deref(),
            prompt: &self.kit.prompt,
            history: &history,
            tools: &tools,
        };
        let turn = self.kit.model.reply(&req).map_err(|e| match e {
            ModelError::Unavailable(detail) => TaskError::ModelUnavailable { task: task.to_string(), step, detail },
            ModelError::Refused(detail) => TaskError::ModelRefused { task: task.to_string(), step, detail },
        })?;
        self.reply_of(task, step, turn)
    }

    fn tool(
        &mut self,
        task: &TaskId,
        step: u16,
        call: &ToolCall,
        key: Option<&Key>,
        fence: u64,
    ) -> TaskResult<ToolOutcome> {
        let what = format!("step {step} {}", call.tool);
        self.chaos.point(Point::BeforeTool, &what);
        let p = self.kit.tools.patience(&call.tool);
        let args = String::from_utf8_lossy(&call.args).into_owned();
        let salt = crate::agent::jitter::salt(&[task.as_bytes(), &step.to_le_bytes(), call.tool.as_bytes()]);
        let mut attempt = 0u32;
        loop {
            self.check_lease(task, step, &call.tool)?;
            if attempt == 0 {
                self.chaos.point(Point::Calling, &what);
            }
            let req = ToolRequest {
                task,
                step,
                tool: &call.tool,
                class: call.class,
                arguments: &args,
                key: key.map(|k| k.as_str()),
                fence: Fence { task, epoch: fence },
                attempt,
            };
            let reply = self.kit.tools.call(&req, call)?;
            // (the pause the tool asked for, whether the outcome is unknown, why)
            let (asked, unknown, why) = match reply {
                ToolReply::Done(s) => return Ok(self.done(&what, true, &s)),
                ToolReply::Refused(s) => return Ok(self.done(&what, false, &s)),
                ToolReply::Fenced { highest } => {
                    self.fenced = true;
                    return Err(TaskError::ToolFenced {
                        task: task.to_string(),
                        step,
                        tool: call.tool.to_string(),
                        place: self.kit.tools.place(&call.tool),
                        fence,
                        highest,
                    });
                }
                ToolReply::KeyConflict(s) => {
                    self.review_note = Some(format!(
                        "the {} tool says the idempotency key was used with another request ({s}); what happened \
                         under it needs a human",
                        call.tool
                    ));
                    return Ok(ToolOutcome::Unknown);
                }
                ToolReply::RateLimited { retry_after_ms } => (
                    retry_after_ms,
                    false,
                    format!("not done: the tool asked to try later ({} attempt(s))", attempt + 1),
                ),
                ToolReply::Unreachable(s) => (None, false, format!("not sent: {s}")),
                ToolReply::InProgress { retry_after_ms } => (
                    retry_after_ms,
                    true,
                    format!("a request with this key was still in progress after {} attempt(s)", attempt + 1),
                ),
                ToolReply::Unknown(s) => (None, true, s),
            };
            if unknown && call.class == ToolClass::NonIdempotent {
                self.review_note = Some(format!(
                    "the {} call's outcome is unknown ({why}) and the tool is not idempotent: it is not sent again on \
                     its own",
                    call.tool
                ));
                return Ok(ToolOutcome::Unknown);
            }
            match self.pause(&p, attempt, salt, asked) {
                Some(ms) => {
                    std::thread::sleep(Duration::from_millis(ms));
                    attempt += 1;
                }
                None if !unknown => return Ok(self.done(&what, false, &why)),
                None if call.class == ToolClass::Idempotent => {
                    self.review_note = Some(format!(
                        "the {} call's outcome is still unknown after {} attempt(s) with its key ({why})",
                        call.tool,
                        attempt + 1
                    ));
                    return Ok(ToolOutcome::Unknown);
                }
                None => {
                    return Err(TaskError::ToolUnavailable {
                        task: task.to_string(),
                        step,
                        tool: call.tool.to_string(),
                        detail: format!("{why} (after {} attempt(s))", attempt + 1),
                    });
                }
            }
        }
    }

    fn suspend_requested(&mut self, task: &TaskId, _step: u16) -> TaskResult<bool> {
        // a worker told to stop (SIGTERM) suspends its task like `task suspend` would: after
        // the current atomic step, with the marker, so another worker resumes it
        if self.suspend_on_term && crate::sys::term_requested() {
            return Ok(true);
        }
        self.store.suspend_requested(task)
    }
}
