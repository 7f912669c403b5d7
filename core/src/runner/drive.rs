//! The runner loop, generic over where records go ([`Journal`]) and who answers ([`Effects`]).
//!
//! [`drive`] is the only place that sequences I/O, and it does it in the order the design requires:
//! `ToolIntent` is appended (durable) **before** [`Effects::tool`] is called, and `ToolResult` is
//! appended after it returns. Every decision comes from [`next_action`] on the state folded so far;
//! every record is checked against the state ([`TaskState::apply`]) before it is appended.

use super::error::{RunnerError, StorageError};
use super::machine::{Action, TaskState, next_action};
use super::record::{Decision, Event, Key, ModelText, Record, ResultText, TaskId, ToolCall, ToolClass};
use super::storage::{LogStorage, append_record};

/// Where records go. The host's SQLite binding and [`LogJournal`] implement it.
///
/// A journal may buffer: a record is durable once [`Journal::sync`] has returned `Ok` (or earlier,
/// e.g. [`LogJournal`] makes each append durable at once). [`drive`] calls `sync` before every
/// side effect (so the intent, and everything before it, is durable before the tool is called),
/// right after the result of a non-idempotent tool, and before it returns. Records that can sit in
/// the buffer are the ones whose loss a replay repairs without harm: a model response (the model
/// is asked again; no side effect depended on it) and the result of a read-only or idempotent tool
/// (re-run / re-called with the same key). This is what lets the SQLite binding commit one
/// transaction per step instead of one per record.
pub trait Journal {
    /// The journal's error.
    type Error;
    /// Appends `rec` (durable after the next successful [`Journal::sync`]).
    fn append(&mut self, rec: &Record) -> Result<(), Self::Error>;
    /// Makes every appended record durable.
    fn sync(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// A [`Journal`] that buffers up to `N` records and writes them to `inner` on [`Journal::sync`]
/// (or when full). Models a host that commits one transaction per checkpoint group; with a crash
/// between `append` and `sync` the buffered records are lost, as they would be.
#[derive(Debug)]
pub struct BufferedJournal<J, const N: usize> {
    /// The durable journal.
    pub inner: J,
    pending: heapless::Vec<Record, N>,
}

impl<J: Journal, const N: usize> BufferedJournal<J, N> {
    /// Wraps `inner`.
    pub const fn new(inner: J) -> Self {
        BufferedJournal { inner, pending: heapless::Vec::new() }
    }
    /// Records appended but not yet synced.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

impl<J: Journal, const N: usize> Journal for BufferedJournal<J, N> {
    type Error = J::Error;
    fn append(&mut self, rec: &Record) -> Result<(), J::Error> {
        if self.pending.is_full() {
            self.sync()?;
        }
        match self.pending.push(rec.clone()) {
            Ok(()) => Ok(()),
            // N == 0: write through
            Err(rec) => self.inner.append(&rec),
        }
    }
    fn sync(&mut self) -> Result<(), J::Error> {
        for rec in self.pending.iter() {
            self.inner.append(rec)?;
        }
        self.pending.clear();
        self.inner.sync()
    }
}

/// A [`Journal`] over any [`LogStorage`].
#[derive(Debug)]
pub struct LogJournal<S>(pub S);

impl<S: LogStorage> Journal for LogJournal<S> {
    type Error = StorageError<S::Error>;
    fn append(&mut self, rec: &Record) -> Result<(), Self::Error> {
        append_record(&mut self.0, rec)
    }
}

/// The model's answer for one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelReply {
    /// Response text.
    pub text: ModelText,
    /// The tool call it makes, if any.
    pub call: Option<ToolCall>,
    /// This reply is the task's final answer (an agent's model answering without a tool call):
    /// recorded as `Answer`, after which the task completes. Must come with `call: None`. A
    /// scripted step without a tool is not an answer (the script goes on to its next step).
    pub answer: bool,
}

/// A tool's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Whether the tool reports success (a failed call is still a result: it is recorded).
    pub ok: bool,
    /// Result text.
    pub output: ResultText,
}

/// What a tool call came to.
// The core has no allocator, so the result cannot be boxed; the value lives on the stack once
// per call, and `Unknown` is the rare case, so its wasted bytes cost nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOutcome {
    /// The tool answered (its success, or its own failure before acting): recorded as the step's
    /// result.
    Done(ToolOutput),
    /// The tool cannot tell whether the call acted, and retrying it on its own is not safe (a
    /// non-idempotent call whose answer was lost) or did not settle it (an idempotent call
    /// re-sent with its key as often as allowed, or a key the tool says was used for another
    /// request): the step is recorded as needing review, whatever the tool's class, and the run
    /// stops there ([`Stop::NeedsReview`]).
    Unknown,
}

/// The outside world: the model, the tools, and the suspend flag.
pub trait Effects {
    /// The error (a crash, an I/O failure, a model that did not answer); a tool's own failure is a
    /// [`ToolOutput`] instead, and a call whose outcome the tool cannot tell is
    /// [`ToolOutcome::Unknown`]. After an error nothing more is recorded: the intent of a call
    /// that failed this way stays without a result, and the resume rule decides on it.
    type Error;
    /// Asks the model for `step`.
    fn model(&mut self, task: &TaskId, step: u16) -> Result<ModelReply, Self::Error>;
    /// Performs a tool call. Called only after its intent is durable. `key` is the idempotency
    /// key (the same on every attempt of the step). `fence` is the fencing token: the epoch of
    /// the lease under which the intent was recorded ([`TaskState::epoch`]). A tool that can check
    /// it refuses a token lower than the highest it has seen for the task
    /// ([`super::lease::check_tool_fence`]), so a runner that lost its lease cannot act.
    fn tool(
        &mut self,
        task: &TaskId,
        step: u16,
        call: &ToolCall,
        key: Option<&Key>,
        fence: u64,
    ) -> Result<ToolOutcome, Self::Error>;
    /// Polled between atomic steps (before `step` starts or continues): should the runner
    /// suspend now?
    fn suspend_requested(&mut self, _task: &TaskId, _step: u16) -> Result<bool, Self::Error> {
        Ok(false)
    }
}

/// Why [`drive`] returned normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Stop {
    /// All steps done (`Completed` recorded).
    Completed,
    /// Suspended on request (`Suspended` recorded).
    Suspended,
    /// Paused: `step` waits for a review.
    NeedsReview {
        /// The step.
        step: u16,
    },
    /// The task had failed.
    Failed,
}

/// Why [`drive`] failed. Nothing that was not appended is assumed to have happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DriveError<J, E> {
    /// The journal refused or failed (e.g. a stale lease epoch, a full log, a crash).
    Journal(J),
    /// The model or a tool failed (e.g. a crash).
    Effects(E),
    /// A record would not fold (a bug, or a log changed under us).
    Runner(RunnerError),
    /// The task has no `Created` record.
    NotCreated,
}

/// Checks `event` against `state`, appends it as the next record, then folds it.
pub fn commit<J: Journal>(state: &mut TaskState, journal: &mut J, event: Event) -> Result<(), CommitError<J::Error>> {
    let rec = Record::new(state.task_id.clone(), state.next_seq, event);
    let mut next = state.clone();
    next.apply(&rec).map_err(CommitError::Runner)?;
    journal.append(&rec).map_err(CommitError::Journal)?;
    *state = next;
    Ok(())
}

/// Why [`commit`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitError<J> {
    /// The record does not fit the state (nothing was appended).
    Runner(RunnerError),
    /// The journal failed.
    Journal(J),
}

impl<J, E> From<CommitError<J>> for DriveError<J, E> {
    fn from(e: CommitError<J>) -> Self {
        match e {
            CommitError::Runner(r) => DriveError::Runner(r),
            CommitError::Journal(j) => DriveError::Journal(j),
        }
    }
}

/// Records a review decision for `step` (checked against the state first) and syncs.
pub fn review<J: Journal>(
    state: &mut TaskState,
    journal: &mut J,
    step: u16,
    decision: Decision,
) -> Result<(), CommitError<J::Error>> {
    commit(state, journal, Event::ReviewDecision { step, decision })?;
    journal.sync().map_err(CommitError::Journal)
}

/// Runs the task until it completes, suspends, pauses for review or an error occurs.
///
/// `state` must be the fold of the task's log (e.g. [`super::storage::replay`]); on `Ok` it is
/// the fold of the log as extended by this call (everything synced). After an error it may
/// include records a buffering journal had not made durable: replay the log before going on.
pub fn drive<J: Journal, E: Effects>(
    state: &mut TaskState,
    journal: &mut J,
    fx: &mut E,
) -> Result<Stop, DriveError<J::Error, E::Error>> {
    loop {
        if let Some(stop) = drive_step(state, journal, fx)? {
            return Ok(stop);
        }
    }
}

/// One iteration of [`drive`]: polls the suspend flag, then performs one action (one atomic step:
/// a model call and its record, or intent + tool call + result). `Ok(None)` means "call again".
/// Syncs the journal before a side effect and before returning `Ok(Some(_))`.
pub fn drive_step<J: Journal, E: Effects>(
    state: &mut TaskState,
    journal: &mut J,
    fx: &mut E,
) -> Result<Option<Stop>, DriveError<J::Error, E::Error>> {
    let stop = drive_action(state, journal, fx)?;
    if stop.is_some() {
        journal.sync().map_err(DriveError::Journal)?;
    }
    Ok(stop)
}

fn drive_action<J: Journal, E: Effects>(
    state: &mut TaskState,
    journal: &mut J,
    fx: &mut E,
) -> Result<Option<Stop>, DriveError<J::Error, E::Error>> {
    if state.can_suspend() && fx.suspend_requested(&state.task_id, state.step).map_err(DriveError::Effects)? {
        let next_step = state.step;
        commit(state, journal, Event::Suspended { next_step })?;
        return Ok(Some(Stop::Suspended));
    }
    match next_action(state) {
        Action::Create => return Err(DriveError::NotCreated),
        Action::Done => return Ok(Some(Stop::Completed)),
        Action::Failed => return Ok(Some(Stop::Failed)),
        Action::AwaitReview { step } => return Ok(Some(Stop::NeedsReview { step })),
        Action::Resume => commit(state, journal, Event::Resumed)?,
        Action::Complete => commit(state, journal, Event::Completed)?,
        Action::MarkNeedsReview { step } => commit(state, journal, Event::NeedsReview { step })?,
        Action::CallModel { step } => {
            let reply = fx.model(&state.task_id, step).map_err(DriveError::Effects)?;
            let event = match reply {
                ModelReply { text, call: None, answer: true } => Event::Answer { step, text },
                ModelReply { text, call, .. } => Event::ModelResponse { step, text, call },
            };
            commit(state, journal, event)?;
        }
        Action::CallTool { step, call, key, intent_recorded } => {
            let call = call.clone();
            if !intent_recorded {
                let intent = Event::ToolIntent {
                    step,
                    tool: call.tool.clone(),
                    class: call.class,
                    key: key.clone(),
                    args: call.args.clone(),
                };
                commit(state, journal, intent)?;
            }
            // Everything up to the intent becomes durable before the side effect may start.
            journal.sync().map_err(DriveError::Journal)?;
            let fence = state.epoch();
            let out = fx.tool(&state.task_id, step, &call, key.as_ref(), fence).map_err(DriveError::Effects)?;
            let out = match out {
                ToolOutcome::Done(out) => out,
                ToolOutcome::Unknown => {
                    commit(state, journal, Event::NeedsReview { step })?;
                    journal.sync().map_err(DriveError::Journal)?;
                    return Ok(Some(Stop::NeedsReview { step }));
                }
            };
            commit(state, journal, Event::ToolResult { step, ok: out.ok, output: out.output })?;
            if call.class == ToolClass::NonIdempotent {
                // keep the window in which a crash sends this step to review minimal
                journal.sync().map_err(DriveError::Journal)?;
            }
        }
    }
    Ok(None)
}

impl<J: core::fmt::Debug, E: core::fmt::Debug> core::fmt::Display for DriveError<J, E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DriveError::Journal(j) => write!(f, "journal: {j:?}"),
            DriveError::Effects(e) => write!(f, "model or tool: {e:?}"),
            DriveError::Runner(r) => write!(f, "{r}"),
            DriveError::NotCreated => f.write_str("the task has no `created` record"),
        }
    }
}

impl<J: core::fmt::Debug, E: core::fmt::Debug> core::error::Error for DriveError<J, E> {}

impl<J: core::fmt::Debug> core::fmt::Display for CommitError<J> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CommitError::Runner(r) => write!(f, "{r}"),
            CommitError::Journal(j) => write!(f, "journal: {j:?}"),
        }
    }
}

impl<J: core::fmt::Debug> core::error::Error for CommitError<J> {}
