//! The log's records: `(task_id, seq, kind, payload, status)`, one per checkpoint.
//!
//! A [`Record`] is serialized with postcard (field order below is the wire order; the enum
//! discriminants are postcard varints, so **never reorder variants**; add new ones at the end and
//! bump [`crate::runner::frame::FORMAT_VERSION`] if an old reader must reject them).

use core::fmt;

use serde::{Deserialize, Serialize};

use super::limits::{
    KEY_LEN, MAX_ARGS_BYTES, MAX_MODEL_TEXT, MAX_OWNER, MAX_REASON, MAX_RESULT_TEXT, MAX_TASK_ID, MAX_TOOL_NAME,
};

/// A task id (UTF-8, at most [`MAX_TASK_ID`] bytes).
pub type TaskId = heapless::String<MAX_TASK_ID>;
/// A tool name (at most [`MAX_TOOL_NAME`] bytes).
pub type ToolName = heapless::String<MAX_TOOL_NAME>;
/// An idempotency key: [`KEY_LEN`] lowercase hex digits (see [`crate::runner::idempotency_key`]).
pub type Key = heapless::String<KEY_LEN>;
/// Tool arguments: opaque bytes to the core (the host stores canonical JSON).
pub type Args = heapless::Vec<u8, MAX_ARGS_BYTES>;
/// The scripted/real model's response text.
pub type ModelText = heapless::String<MAX_MODEL_TEXT>;
/// A tool's result text.
pub type ResultText = heapless::String<MAX_RESULT_TEXT>;
/// A lease owner (e.g. `host:pid:start`).
pub type Owner = heapless::String<MAX_OWNER>;
/// A short human-readable reason.
pub type Reason = heapless::String<MAX_REASON>;

/// How a tool may be retried; decides what resume does with an intent that has no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ToolClass {
    /// No side effect: no key, re-run freely.
    ReadOnly,
    /// Side effect deduplicated by the tool on a key derived from (task, step): re-call with the
    /// same key.
    Idempotent,
    /// Side effect the tool cannot deduplicate: never re-run automatically; an intent without a
    /// result pauses the task for review.
    NonIdempotent,
}

impl ToolClass {
    /// Short lowercase name (`read-only`, `idempotent`, `non-idempotent`).
    pub const fn name(self) -> &'static str {
        match self {
            ToolClass::ReadOnly => "read-only",
            ToolClass::Idempotent => "idempotent",
            ToolClass::NonIdempotent => "non-idempotent",
        }
    }
}

/// The tool call a model response asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Tool name.
    pub tool: ToolName,
    /// Its retry class.
    pub class: ToolClass,
    /// Arguments (opaque bytes).
    pub args: Args,
}

/// A review decision for a step marked "unknown, needs review".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Decision {
    /// A human checked the world: the call happened; the step counts as done.
    MarkDone,
    /// A human checked the world: the call did not happen; call the tool again (new intent).
    Retry,
}

/// The step status a record leaves behind (the `status` column of the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Status {
    /// Task-level bookkeeping, no step status.
    Info,
    /// The step's side effect may be in flight (an intent).
    Pending,
    /// The step (or its model part) is recorded as done.
    Done,
    /// The step's outcome is unknown and waits for a human.
    NeedsReview,
    /// The task is suspended.
    Suspended,
    /// The task failed.
    Failed,
}

impl Status {
    /// Lowercase name for tables.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Info => "info",
            Status::Pending => "pending",
            Status::Done => "done",
            Status::NeedsReview => "needs-review",
            Status::Suspended => "suspended",
            Status::Failed => "failed",
        }
    }
}

/// The kind of a record (the `kind` column of the log); the payload is in [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[allow(missing_docs)]
pub enum Kind {
    Created,
    LeaseAcquired,
    ModelResponse,
    ToolIntent,
    ToolResult,
    NeedsReview,
    ReviewDecision,
    Suspended,
    Resumed,
    ForkedFrom,
    Completed,
    Failed,
    Answer,
}

impl Kind {
    /// Lowercase name for tables (`tool-intent`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Created => "created",
            Kind::LeaseAcquired => "lease",
            Kind::ModelResponse => "model",
            Kind::ToolIntent => "tool-intent",
            Kind::ToolResult => "tool-result",
            Kind::NeedsReview => "needs-review",
            Kind::ReviewDecision => "review",
            Kind::Suspended => "suspended",
            Kind::Resumed => "resumed",
            Kind::ForkedFrom => "forked-from",
            Kind::Completed => "completed",
            Kind::Failed => "failed",
            Kind::Answer => "answer",
        }
    }
}

/// A record's payload, one variant per kind. Fixed-size on purpose (no `alloc`, so no `Box`).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// The task was created. `spec_digest` identifies the spec (the host keeps the spec itself);
    /// `steps` is the number of scripted steps.
    Created {
        /// Digest of the task spec (the host uses a CRC-32C of its canonical text).
        spec_digest: u32,
        /// Number of steps.
        steps: u16,
    },
    /// A runner took the lease on the task.
    LeaseAcquired {
        /// Who (host:pid:start-time on the host).
        owner: Owner,
        /// Fencing epoch, strictly increasing per task.
        epoch: u64,
    },
    /// The model answered for `step` (and maybe asked for a tool call).
    ModelResponse {
        /// Step index (0-based).
        step: u16,
        /// Response text.
        text: ModelText,
        /// The tool call it makes, if any.
        call: Option<ToolCall>,
    },
    /// About to call a tool. Durable before the side effect starts.
    ToolIntent {
        /// Step index.
        step: u16,
        /// Tool name (repeated from the model response for readability).
        tool: ToolName,
        /// Retry class.
        class: ToolClass,
        /// Idempotency key (idempotent tools only).
        key: Option<Key>,
        /// Arguments.
        args: Args,
    },
    /// The tool returned. Recorded after the side effect.
    ToolResult {
        /// Step index.
        step: u16,
        /// Whether the tool reported success.
        ok: bool,
        /// Result text.
        output: ResultText,
    },
    /// An intent without a result on a non-idempotent tool: outcome unknown, waits for review.
    NeedsReview {
        /// Step index.
        step: u16,
    },
    /// A human decided what happened at a needs-review step.
    ReviewDecision {
        /// Step index.
        step: u16,
        /// The decision.
        decision: Decision,
    },
    /// The runner finished its current atomic step and stopped on request.
    Suspended {
        /// The step it will continue with.
        next_step: u16,
    },
    /// A runner continued a suspended task.
    Resumed,
    /// This task was forked from `task` at its record `seq` (the prefix follows, renumbered).
    ForkedFrom {
        /// Parent task.
        task: TaskId,
        /// Last parent sequence number copied.
        seq: u32,
    },
    /// All steps are done.
    Completed,
    /// The task failed for good.
    Failed {
        /// Why.
        reason: Reason,
    },
    /// The model gave its final answer for `step` (no tool call): the task completes after it.
    /// Added by issue 29 (an agent task's step count is an upper bound; the model decides when it
    /// is done). An older build reads a log holding one as corrupt (an unknown variant).
    Answer {
        /// Step index.
        step: u16,
        /// The answer.
        text: ModelText,
    },
}

impl Event {
    /// This event's kind.
    pub const fn kind(&self) -> Kind {
        match self {
            Event::Created { .. } => Kind::Created,
            Event::LeaseAcquired { .. } => Kind::LeaseAcquired,
            Event::ModelResponse { .. } => Kind::ModelResponse,
            Event::ToolIntent { .. } => Kind::ToolIntent,
            Event::ToolResult { .. } => Kind::ToolResult,
            Event::NeedsReview { .. } => Kind::NeedsReview,
            Event::ReviewDecision { .. } => Kind::ReviewDecision,
            Event::Suspended { .. } => Kind::Suspended,
            Event::Resumed => Kind::Resumed,
            Event::ForkedFrom { .. } => Kind::ForkedFrom,
            Event::Completed => Kind::Completed,
            Event::Failed { .. } => Kind::Failed,
            Event::Answer { .. } => Kind::Answer,
        }
    }

    /// The status column this event writes.
    pub const fn status(&self) -> Status {
        match self {
            Event::Created { .. } | Event::LeaseAcquired { .. } | Event::Resumed | Event::ForkedFrom { .. } => {
                Status::Info
            }
            Event::ModelResponse { .. } | Event::ToolResult { .. } | Event::Completed | Event::Answer { .. } => {
                Status::Done
            }
            Event::ReviewDecision { decision: Decision::MarkDone, .. } => Status::Done,
            Event::ReviewDecision { decision: Decision::Retry, .. } => Status::Pending,
            Event::ToolIntent { .. } => Status::Pending,
            Event::NeedsReview { .. } => Status::NeedsReview,
            Event::Suspended { .. } => Status::Suspended,
            Event::Failed { .. } => Status::Failed,
        }
    }

    /// The step this event belongs to, if any.
    pub const fn step(&self) -> Option<u16> {
        match self {
            Event::ModelResponse { step, .. }
            | Event::Answer { step, .. }
            | Event::ToolIntent { step, .. }
            | Event::ToolResult { step, .. }
            | Event::NeedsReview { step }
            | Event::ReviewDecision { step, .. } => Some(*step),
            Event::Suspended { next_step } => Some(*next_step),
            _ => None,
        }
    }
}

/// One log record: `(task_id, seq, kind, payload, status)`; `kind` and `payload` are the
/// [`Event`] (see [`Record::kind`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The task.
    pub task_id: TaskId,
    /// Position in the task's log, 0-based, dense.
    pub seq: u32,
    /// The step status this record leaves (always `event.status()` for records built by
    /// [`Record::new`]; replay rejects a mismatch).
    pub status: Status,
    /// Kind and payload.
    pub event: Event,
}

impl Record {
    /// A record with `status = event.status()`.
    pub fn new(task_id: TaskId, seq: u32, event: Event) -> Self {
        let status = event.status();
        Record { task_id, seq, status, event }
    }
    /// The record's kind.
    pub const fn kind(&self) -> Kind {
        self.event.kind()
    }
}

impl fmt::Display for Event {
    /// A one-line human summary of the payload (used by `task inspect`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Created { spec_digest, steps } => {
                write!(f, "steps={steps} spec=crc32c:{spec_digest:08x}")
            }
            Event::LeaseAcquired { owner, epoch } => write!(f, "owner={owner} epoch={epoch}"),
            Event::ModelResponse { step, text, call } => {
                write!(f, "step={step} text={:?}", text.as_str())?;
                if let Some(c) = call {
                    write!(f, " -> {} ({})", c.tool, c.class.name())?;
                }
                Ok(())
            }
            Event::ToolIntent { step, tool, class, key, args } => {
                write!(f, "step={step} tool={tool} class={}", class.name())?;
                match key {
                    Some(k) => write!(f, " key={k}")?,
                    None => f.write_str(" key=-")?,
                }
                match core::str::from_utf8(args) {
                    Ok(s) => write!(f, " args={s}"),
                    Err(_) => write!(f, " args=<{} bytes>", args.len()),
                }
            }
            Event::ToolResult { step, ok, output } => {
                write!(f, "step={step} ok={ok} output={:?}", output.as_str())
            }
            Event::NeedsReview { step } => {
                write!(f, "step={step} outcome unknown: intent recorded, no result")
            }
            Event::ReviewDecision { step, decision } => write!(
                f,
                "step={step} decision={}",
                match decision {
                    Decision::MarkDone => "mark-done",
                    Decision::Retry => "retry",
                }
            ),
            Event::Suspended { next_step } => write!(f, "next_step={next_step}"),
            Event::Resumed => f.write_str("-"),
            Event::ForkedFrom { task, seq } => write!(f, "parent={task} at_seq={seq}"),
            Event::Completed => f.write_str("-"),
            Event::Failed { reason } => write!(f, "reason={reason}"),
            Event::Answer { step, text } => write!(f, "step={step} final answer {:?}", text.as_str()),
        }
    }
}
