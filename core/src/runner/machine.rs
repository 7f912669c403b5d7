//! The runner as a pure state machine: [`TaskState::apply`] folds one record, [`next_action`]
//! decides what to do next. No I/O, no clock, no snapshot: the state is always the fold of the log.

use core::fmt;

use super::error::RunnerError;
use super::limits::MAX_STEPS;
use super::record::{Decision, Event, Key, Owner, Record, TaskId, ToolCall, ToolClass};

/// Where the current step stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The model has not answered for the current step yet.
    Model,
    /// The model asked for `call`; no intent recorded yet (or a review said "retry").
    Tool {
        /// The call to make.
        call: ToolCall,
    },
    /// Intent recorded, no result: the side effect may or may not have happened.
    InFlight {
        /// The call.
        call: ToolCall,
        /// The key the intent recorded (idempotent tools).
        key: Option<Key>,
    },
    /// A call's outcome is unknown (a non-idempotent call without a result on resume, or any call
    /// whose tool said it cannot tell and retrying did not help); waits for a human decision.
    Review {
        /// The call.
        call: ToolCall,
    },
}

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum End {
    /// All steps done.
    Completed,
    /// Failed for good.
    Failed,
}

/// The lease recorded last in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// Holder.
    pub owner: Owner,
    /// Fencing epoch.
    pub epoch: u64,
}

/// Counters derived from the log (handy for reports and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Counters {
    /// Model responses recorded.
    pub model_responses: u32,
    /// Tool intents recorded.
    pub tool_intents: u32,
    /// Tool results recorded.
    pub tool_results: u32,
    /// Steps marked "unknown, needs review".
    pub needs_review: u32,
    /// Review decisions recorded.
    pub reviews: u32,
    /// Suspensions.
    pub suspends: u32,
    /// Resumptions after a suspension.
    pub resumes: u32,
    /// Leases taken.
    pub leases: u32,
}

/// The state of one task, derived by folding its records in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskState {
    /// The task.
    pub task_id: TaskId,
    /// The sequence number the next record must carry.
    pub next_seq: u32,
    /// Whether a `Created` record was folded.
    pub created: bool,
    /// Digest of the spec (from `Created`).
    pub spec_digest: u32,
    /// Number of steps (from `Created`).
    pub steps: u16,
    /// The current step (0-based; `== steps` once all are done).
    pub step: u16,
    /// Where the current step stands.
    pub phase: Phase,
    /// Whether the task is suspended (a `Suspended` not yet followed by `Resumed`).
    pub suspended: bool,
    /// Whether the model gave its final answer (an `Answer` record): the task completes next.
    pub answered: bool,
    /// How it ended, if it did.
    pub end: Option<End>,
    /// The last lease recorded.
    pub lease: Option<LeaseInfo>,
    /// The parent, for a forked task.
    pub forked_from: Option<(TaskId, u32)>,
    /// Counters.
    pub counters: Counters,
}

/// What the runner should do next; a pure function of the state ([`next_action`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<'a> {
    /// No `Created` record yet: the host must create the task.
    Create,
    /// The task is suspended: append `Resumed` to continue.
    Resume,
    /// Ask the model for `step`, then append `ModelResponse`.
    CallModel {
        /// Step.
        step: u16,
    },
    /// Call a tool. If `intent_recorded` is false, append `ToolIntent` first and only then call
    /// the tool; append `ToolResult` after it returns.
    CallTool {
        /// Step.
        step: u16,
        /// The call.
        call: &'a ToolCall,
        /// The idempotency key to pass (same key on every attempt of this step).
        key: Option<Key>,
        /// True when resuming an intent without a result (re-call/re-run).
        intent_recorded: bool,
    },
    /// A non-idempotent intent has no result: append `NeedsReview`, then stop.
    MarkNeedsReview {
        /// Step.
        step: u16,
    },
    /// Waiting for `task review` on `step`.
    AwaitReview {
        /// Step.
        step: u16,
    },
    /// All steps are done: append `Completed`.
    Complete,
    /// The task has completed; nothing to do.
    Done,
    /// The task has failed; nothing to do.
    Failed,
}

/// The idempotency key of a call: FNV-1a 128 over a domain tag, the task id, the step, the
/// tool's name and the call's arguments (the canonical bytes its intent records), each
/// length-prefixed, as 32 lowercase hex digits. Deterministic, so a replay (or a second runner)
/// derives the same key for the same call; a fork gets different keys because its task id differs.
///
/// Never from the model's own call id: a model mints a new id each time it is asked (so a
/// re-asked step would carry a new key and its side effect would fire again: openai-agents-python
/// #4254), and some servers return the same id for every call. The arguments are part of it so
/// that one key never stands for two different requests (a server that compares payloads answers
/// 422 to that; one that does not would drop the second as a duplicate), e.g. two deployments
/// whose task ids collide. Issue 29 changed it from (task, step) (domain tag `v1`) to this (`v2`);
/// an intent keeps the key it recorded, so a task in flight across the upgrade re-calls with its
/// old key.
pub fn idempotency_key(task: &str, step: u16, tool: &str, args: &[u8]) -> Key {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013B;
    let mut h = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u128;
            h = h.wrapping_mul(PRIME);
        }
    };
    feed(b"brokerlab/idempotency/v2\0");
    for part in [task.as_bytes(), tool.as_bytes(), args] {
        feed(&(part.len() as u32).to_le_bytes());
        feed(part);
    }
    feed(&step.to_le_bytes());
    let mut key = Key::new();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for i in (0..32).rev() {
        let nib = ((h >> (i * 4)) & 0xF) as usize;
        let c = HEX.get(nib).copied().unwrap_or(b'0') as char;
        let _ = key.push(c); // 32 chars always fit KEY_LEN
    }
    key
}

/// The key `call` carries at `step` of `task` (None for keyless classes).
pub fn key_for(task: &str, step: u16, call: &ToolCall) -> Option<Key> {
    match call.class {
        ToolClass::Idempotent => Some(idempotency_key(task, step, &call.tool, &call.args)),
        ToolClass::ReadOnly | ToolClass::NonIdempotent => None,
    }
}

impl TaskState {
    /// The state of a task before its first record.
    pub fn new(task_id: TaskId) -> Self {
        TaskState {
            task_id,
            next_seq: 0,
            created: false,
            spec_digest: 0,
            steps: 0,
            step: 0,
            phase: Phase::Model,
            suspended: false,
            answered: false,
            end: None,
            lease: None,
            forked_from: None,
            counters: Counters::default(),
        }
    }

    /// Whether the runner may write a `Suspended` marker now (no call in flight, not ended).
    pub fn can_suspend(&self) -> bool {
        self.created && self.end.is_none() && !self.suspended && matches!(self.phase, Phase::Model | Phase::Tool { .. })
    }

    /// The current lease epoch (0 if none).
    pub fn epoch(&self) -> u64 {
        self.lease.as_ref().map_or(0, |l| l.epoch)
    }

    /// Folds one record. Rejects (without changing `self`'s meaning) records that do not belong
    /// here: another task, a gap in `seq`, a status that does not match the kind, or an event
    /// that is impossible in the current phase. On error `self` is left unchanged.
    pub fn apply(&mut self, rec: &Record) -> Result<(), RunnerError> {
        self.check_place(rec)?;
        let mut next = self.fold(rec)?;
        next.next_seq = self.next_seq.wrapping_add(1);
        *self = next;
        Ok(())
    }

    /// Whether `rec` belongs here at all, whatever its event: this task, the next `seq`, the
    /// status its kind has, `created` first, nothing but a lease after the end.
    fn check_place(&self, rec: &Record) -> Result<(), RunnerError> {
        if rec.task_id != self.task_id {
            return Err(RunnerError::WrongTask { seq: rec.seq });
        }
        if rec.seq != self.next_seq {
            return Err(RunnerError::BadSeq { expected: self.next_seq, got: rec.seq });
        }
        if rec.status != rec.event.status() {
            return Err(RunnerError::BadStatus { seq: rec.seq });
        }
        let bad = |what: &'static str| RunnerError::Unexpected { seq: rec.seq, kind: rec.kind(), what };
        if !self.created && !matches!(rec.event, Event::Created { .. }) {
            return Err(bad("the first record must be `created`"));
        }
        if self.end.is_some() && !matches!(rec.event, Event::LeaseAcquired { .. }) {
            return Err(bad("the task has already ended"));
        }
        Ok(())
    }

    /// A model call (a response or the answer) for `step` is expected now; else why not.
    fn expect_model_call(&self, step: u16) -> Result<(), &'static str> {
        if self.suspended {
            return Err("the task is suspended");
        }
        if step != self.step || self.phase != Phase::Model || step >= self.steps || self.answered {
            return Err("no model call expected for this step");
        }
        Ok(())
    }

    /// The state after `rec`'s event (its `seq` not yet counted), or why the event is impossible
    /// in the current phase.
    fn fold(&self, rec: &Record) -> Result<Self, RunnerError> {
        let bad = |what: &'static str| RunnerError::Unexpected { seq: rec.seq, kind: rec.kind(), what };
        let mut next = self.clone();
        match &rec.event {
            Event::Created { spec_digest, steps } => {
                if self.created {
                    return Err(bad("created twice"));
                }
                if *steps > MAX_STEPS {
                    return Err(bad("more steps than MAX_STEPS"));
                }
                next.created = true;
                next.spec_digest = *spec_digest;
                next.steps = *steps;
            }
            Event::LeaseAcquired { owner, epoch } => {
                if *epoch <= self.epoch() {
                    return Err(RunnerError::StaleEpoch { current: self.epoch(), got: *epoch });
                }
                next.lease = Some(LeaseInfo { owner: owner.clone(), epoch: *epoch });
                next.counters.leases += 1;
            }
            Event::ModelResponse { step, call, .. } => {
                self.expect_model_call(*step).map_err(bad)?;
                next.counters.model_responses += 1;
                match call {
                    Some(c) => next.phase = Phase::Tool { call: c.clone() },
                    None => {
                        next.step += 1;
                        next.phase = Phase::Model;
                    }
                }
            }
            Event::Answer { step, .. } => {
                self.expect_model_call(*step).map_err(bad)?;
                next.counters.model_responses += 1;
                next.answered = true;
                next.step += 1;
            }
            Event::ToolIntent { step, tool, class, key, args } => {
                let Phase::Tool { call } = &self.phase else {
                    return Err(bad("no tool call expected"));
                };
                if self.suspended || *step != self.step {
                    return Err(bad("intent for another step"));
                }
                if call.tool != *tool || call.class != *class || call.args != *args {
                    return Err(bad("intent differs from the model's tool call"));
                }
                if key.is_some() != (*class == ToolClass::Idempotent) {
                    return Err(bad("only idempotent tools carry a key"));
                }
                next.phase = Phase::InFlight { call: call.clone(), key: key.clone() };
                next.counters.tool_intents += 1;
            }
            Event::ToolResult { step, .. } => {
                if !matches!(self.phase, Phase::InFlight { .. }) || *step != self.step {
                    return Err(bad("result without an intent"));
                }
                next.step += 1;
                next.phase = Phase::Model;
                next.counters.tool_results += 1;
            }
            // a non-idempotent call on resume (the resume rule), or any call whose tool said the
            // outcome is unknown and retrying it did not help (`ToolOutcome::Unknown`)
            Event::NeedsReview { step } => match &self.phase {
                Phase::InFlight { call, .. } if *step == self.step => {
                    next.phase = Phase::Review { call: call.clone() };
                    next.counters.needs_review += 1;
                }
                _ => return Err(bad("only an in-flight call can need review")),
            },
            Event::ReviewDecision { step, decision } => match &self.phase {
                Phase::Review { call } if *step == self.step => {
                    next.counters.reviews += 1;
                    match decision {
                        Decision::MarkDone => {
                            next.step += 1;
                            next.phase = Phase::Model;
                        }
                        Decision::Retry => next.phase = Phase::Tool { call: call.clone() },
                    }
                }
                _ => return Err(bad("step is not waiting for review")),
            },
            Event::Suspended { next_step } => {
                if !self.can_suspend() || *next_step != self.step {
                    return Err(bad("cannot suspend with a call in flight or twice"));
                }
                next.suspended = true;
                next.counters.suspends += 1;
            }
            Event::Resumed => {
                if !self.suspended {
                    return Err(bad("resumed but not suspended"));
                }
                next.suspended = false;
                next.counters.resumes += 1;
            }
            Event::ForkedFrom { task, seq } => {
                if self.forked_from.is_some() || self.step != 0 || self.phase != Phase::Model {
                    return Err(bad("forked-from must come before the copied prefix"));
                }
                next.forked_from = Some((task.clone(), *seq));
            }
            Event::Completed => {
                if self.suspended || self.phase != Phase::Model || (self.step != self.steps && !self.answered) {
                    return Err(bad("completed before the last step"));
                }
                next.end = Some(End::Completed);
            }
            Event::Failed { .. } => next.end = Some(End::Failed),
        }
        Ok(next)
    }
}

/// The runner's decision: a pure function of the folded state.
///
/// The resume rule lives in the `InFlight` arm: an intent without a result is re-run (read-only),
/// re-called with the recorded key (idempotent), or marked "unknown, needs review" (non-idempotent).
pub fn next_action(state: &TaskState) -> Action<'_> {
    if !state.created {
        return Action::Create;
    }
    match state.end {
        Some(End::Completed) => return Action::Done,
        Some(End::Failed) => return Action::Failed,
        None => {}
    }
    if state.suspended {
        return Action::Resume;
    }
    match &state.phase {
        Phase::Model if state.answered || state.step >= state.steps => Action::Complete,
        Phase::Model => Action::CallModel { step: state.step },
        Phase::Tool { call } => Action::CallTool {
            step: state.step,
            call,
            key: key_for(&state.task_id, state.step, call),
            intent_recorded: false,
        },
        Phase::InFlight { call, key } => match call.class {
            ToolClass::ReadOnly => Action::CallTool { step: state.step, call, key: None, intent_recorded: true },
            ToolClass::Idempotent => {
                Action::CallTool { step: state.step, call, key: key.clone(), intent_recorded: true }
            }
            ToolClass::NonIdempotent => Action::MarkNeedsReview { step: state.step },
        },
        Phase::Review { .. } => Action::AwaitReview { step: state.step },
    }
}

impl fmt::Display for Action<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Create => f.write_str("create the task"),
            Action::Resume => f.write_str("resume (suspended)"),
            Action::CallModel { step } => write!(f, "call the model for step {step}"),
            Action::CallTool { step, call, key, intent_recorded } => {
                write!(f, "call {} for step {step}", call.tool)?;
                if let Some(k) = key {
                    write!(f, " with key {k}")?;
                }
                if *intent_recorded {
                    f.write_str(" (again: intent recorded, no result)")?;
                }
                Ok(())
            }
            Action::MarkNeedsReview { step } => write!(f, "mark step {step} as needing review"),
            Action::AwaitReview { step } => write!(f, "wait for a review of step {step}"),
            Action::Complete => f.write_str("record completion"),
            Action::Done => f.write_str("nothing: completed"),
            Action::Failed => f.write_str("nothing: failed"),
        }
    }
}
