//! The `task` commands' errors: one enum whose variants carry what went wrong as data (the task,
//! the epochs of a lost lease, the database and the PostgreSQL error kind), each deciding its exit
//! code. A database error is classified once, where the driver's error is turned into a
//! [`TaskError`] ([`super::pg::pg_error`], [`super::store::sql_error`]); callers match on the
//! variant ([`TaskError::server_gone`]), never on message text.

use std::path::PathBuf;

use brokerlab_core::runner::RefuseReason;
use postgres::error::SqlState;

use crate::exit::{EXIT_BAD_INPUT, EXIT_FAILURE};

/// Said in every message of an error that means the PostgreSQL server went away or does not (yet)
/// accept sessions. Another process (the chaos supervisor reading a runner's stderr) can only see
/// text: this one phrase is what it looks for, and it comes from here only.
pub const SERVER_GONE_NOTE: &str = "the database server is gone or not accepting sessions";

/// Why the PostgreSQL server is not there to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoneKind {
    /// The session's connection closed or broke (`postgres::Error::is_closed`, or an I/O error
    /// with no server error code): the server restarted, stopped or the network dropped.
    Closed,
    /// The server ended the session or refused one while it shuts down, starts up or recovers
    /// (SQLSTATE class 57P: `admin_shutdown`, `crash_shutdown`, `cannot_connect_now`).
    Shutdown,
}

/// An error of the `task` command family.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// Bad input with no structure of its own (a flag, an environment variable), in words that
    /// name it and what is expected (exit 2).
    #[error("{0}")]
    BadInput(String),
    /// Any other failure with no structure of its own (exit 1).
    #[error("{0}")]
    Failure(String),
    /// A spec file that cannot be read or is not a valid spec (exit 2).
    #[error("{}: {msg}", file.display())]
    BadSpec {
        /// The spec file.
        file: PathBuf,
        /// What is wrong, naming the line/key as the parser reports them.
        msg: String,
    },
    /// A task's spec as stored in its row does not parse (exit 2).
    #[error("{db}: task {task:?}: stored spec unreadable: {detail}")]
    StoredSpec {
        /// The log database.
        db: String,
        /// The task.
        task: String,
        /// The parser's words.
        detail: String,
    },
    /// `task review --step N` for a step that is not waiting for review (exit 2).
    #[error("task {task:?}: step {step} is not waiting for review (task is {status})")]
    NotInReview {
        /// The task.
        task: String,
        /// The step named.
        step: u16,
        /// What the task is doing instead.
        status: String,
    },
    /// No task with this id in the log (exit 2).
    #[error("{db}: no task with id {task:?} (see `brokerlab task list`)")]
    NoTask {
        /// The log database (URL without password, or file).
        db: String,
        /// The id asked for.
        task: String,
    },
    /// A stored record that does not decode, or a log the core's fold refuses (exit 2).
    #[error("{db}: task {task:?}{}: {detail}", seq.map_or(String::new(), |s| format!(" seq {s}")))]
    LogCorrupt {
        /// The log database.
        db: String,
        /// The task.
        task: String,
        /// The record's sequence number, when one record is at fault.
        seq: Option<u64>,
        /// What is wrong.
        detail: String,
    },
    /// Another runner that may still act holds the task's lease (exit 1).
    #[error("{}", held_text(task, owner, *epoch, *expires_in_ms, *why))]
    Held {
        /// The task.
        task: String,
        /// The holder.
        owner: String,
        /// The holder's lease epoch.
        epoch: u64,
        /// Time left on its lease.
        expires_in_ms: i64,
        /// Why its lease is not taken now (alive, or the dropped-session rule).
        why: RefuseReason,
    },
    /// A row that no runner could have written: a lease row out of range, a spec that is not
    /// text (exit 2, naming the table and the row).
    #[error(
        "{db}: corrupt {table} row of task {task:?}: {detail}; it was changed outside brokerlab (nothing was written)"
    )]
    CorruptRow {
        /// The database.
        db: String,
        /// The table.
        table: &'static str,
        /// The row's task.
        task: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A new task's id is taken (a fork with the spec's own id, created meanwhile) (exit 2).
    #[error("task {task:?} already exists; give the new spec another id")]
    TaskExists {
        /// The id.
        task: String,
    },
    /// A fork cut inside a call of a parent whose runner may still make that call (exit 1).
    #[error(
        "task {parent:?}: cannot fork at seq {at}: the cut is inside step {step}'s {tool} call, which is still open \
         (an intent without an outcome), and the parent's runner may still make it: {held}; a fork that copied it \
         could repeat it (its review would show no call yet while the parent is about to send); fork again once \
         the parent's run has ended or its lease expired, or cut before seq {intent_seq} (before the intent)"
    )]
    ParentLive {
        /// The parent.
        parent: String,
        /// The cut.
        at: u32,
        /// The open call's step.
        step: u16,
        /// Its tool.
        tool: String,
        /// Its intent's seq in the parent's log.
        intent_seq: u32,
        /// Why the parent's lease was not taken (the [`TaskError::Held`] message).
        held: String,
    },
    /// The log moved on between reading it and taking the lease (exit 1).
    #[error("task {task:?}: the log changed; try again")]
    LogChanged {
        /// The task.
        task: String,
    },
    /// This runner lost the lease: a checkpoint or renewal was refused by the fence (exit 1).
    #[error(
        "task {task:?}: fenced: lost the lease (our epoch {epoch}; now held by {}); this runner stopped and wrote \
         nothing more",
        holder_text(holder)
    )]
    LeaseLost {
        /// The task.
        task: String,
        /// Our lease epoch.
        epoch: u64,
        /// The lease's holder and epoch now, if any.
        holder: Option<(String, u64)>,
    },
    /// Before a tool call, too little of the lease was left and renewing it was refused (exit 1).
    #[error(
        "task {task:?} step {step}: fenced: less than {margin_ms} ms of the lease was left before calling {tool}, \
         and renewing it failed: our epoch {epoch}, now held by {}; the call was not sent; this runner stopped \
         and wrote nothing more",
        holder_text(holder)
    )]
    RenewFenced {
        /// The task.
        task: String,
        /// The step about to call.
        step: u16,
        /// The tool it would have called.
        tool: String,
        /// The renewal margin, ms.
        margin_ms: i64,
        /// Our lease epoch.
        epoch: u64,
        /// The lease's holder and epoch now, if any.
        holder: Option<(String, u64)>,
    },
    /// A tool refused the call's fencing token: a newer runner has called it (exit 1).
    #[error(
        "task {task:?} step {step}: fenced: the {tool} tool refused the call ({place}): it carried fencing token \
         {fence} (this runner's lease epoch) but the tool has seen token {highest} for this task, so another \
         runner took the lease over; this runner stopped and wrote nothing more"
    )]
    ToolFenced {
        /// The task.
        task: String,
        /// The step.
        step: u16,
        /// The tool.
        tool: String,
        /// Where the tool keeps its records.
        place: String,
        /// Our token (lease epoch).
        fence: u64,
        /// The highest token the tool has seen.
        highest: u64,
    },
    /// The model did not answer, or not usably, after its retries; nothing was recorded for the
    /// step, and a later run asks again (exit 1).
    #[error(
        "task {task:?} step {step}: the model gave no usable answer: {detail}; nothing was recorded for the step: `task resume` asks again"
    )]
    ModelUnavailable {
        /// The task.
        task: String,
        /// The step.
        step: u16,
        /// What happened (with the API key scrubbed).
        detail: String,
    },
    /// The model's server refused the request as wrong (a bad key, an unknown model, a malformed
    /// request): fix the spec or the environment (exit 2).
    #[error("task {task:?} step {step}: the model's server refused the request: {detail}; nothing was recorded")]
    ModelRefused {
        /// The task.
        task: String,
        /// The step.
        step: u16,
        /// What it said (with the API key scrubbed).
        detail: String,
    },
    /// The model still asked for a tool on the task's last step: the task is recorded as failed
    /// (exit 1).
    #[error(
        "task {task:?}: the model asked for {tool} on step {}, the last of max_steps = {max_steps}: the call was          not made and the task failed (a fork with a larger max_steps can go on: `task fork {task} --at SEQ --spec          NEW`)",
        max_steps.saturating_sub(1)
    )]
    StepLimit {
        /// The task.
        task: String,
        /// Its step limit.
        max_steps: u16,
        /// The tool it asked for.
        tool: String,
    },
    /// A read-only tool gave no answer after its retries; its intent stays in the log and a later
    /// run calls it again (exit 1).
    #[error("task {task:?} step {step}: the {tool} tool gave no answer: {detail}; `task resume` calls it again")]
    ToolUnavailable {
        /// The task.
        task: String,
        /// The step.
        step: u16,
        /// The tool.
        tool: String,
        /// What happened.
        detail: String,
    },
    /// The PostgreSQL server could not be reached to open a session (exit 2, as a wrong host is).
    #[error("{db}: cannot connect: {detail} ({SERVER_GONE_NOTE})")]
    Unreachable {
        /// The database URL (password hidden).
        db: String,
        /// The driver's words.
        detail: String,
    },
    /// The PostgreSQL server went away or is shutting down/starting up (exit 1).
    #[error("{db}: {what}: {detail} ({SERVER_GONE_NOTE}{})", gone_tail(*kind))]
    ServerGone {
        /// The database URL (password hidden).
        db: String,
        /// What we were doing.
        what: String,
        /// How it went.
        kind: GoneKind,
        /// The driver's words.
        detail: String,
    },
    /// The task's rows stayed locked by another session past `BROKERLAB_BUSY_MS` (exit 2).
    #[error(
        "{db}: the task's rows are locked by another runner ({what}; waited BROKERLAB_BUSY_MS); nothing was written"
    )]
    RowsLocked {
        /// The database.
        db: String,
        /// What we were doing.
        what: String,
    },
    /// The server refused us: a missing database, a wrong password, no privilege (exit 2).
    #[error("{db}: {what}: {detail}")]
    Refused {
        /// The database.
        db: String,
        /// What we were doing.
        what: String,
        /// The SQLSTATE.
        code: SqlState,
        /// The server's words.
        detail: String,
    },
    /// Any other PostgreSQL error (exit 1).
    #[error("{db}: {what}: {detail}")]
    Postgres {
        /// The database.
        db: String,
        /// What we were doing.
        what: String,
        /// The SQLSTATE, when the server sent one.
        code: Option<SqlState>,
        /// The server's words.
        detail: String,
    },
}

fn held_text(task: &str, owner: &str, epoch: u64, expires_in_ms: i64, why: RefuseReason) -> String {
    let secs = expires_in_ms as f64 / 1000.0;
    match why {
        RefuseReason::Live => format!(
            "task {task:?} is already being run by {owner} (lease epoch {epoch}, expires in {secs:.1}s); not starting \
             a second runner"
        ),
        RefuseReason::UnfenceableCall => format!(
            "task {task:?} may still be run by {owner} (lease epoch {epoch}): its database session is gone, but the \
             log ends with a call it may still send to a tool that cannot check a fencing token, and a dropped \
             session is no proof that the process died; its lease is taken only when it expires, in {secs:.1}s \
             (the dropped-session rule, docs/RUNNER.md); not starting a second runner"
        ),
    }
}

fn holder_text(holder: &Option<(String, u64)>) -> String {
    holder.as_ref().map_or("nobody".to_string(), |(o, e)| format!("{o} (epoch {e})"))
}

fn gone_tail(kind: GoneKind) -> &'static str {
    match kind {
        GoneKind::Closed => {
            "; it restarted or stopped); the transaction was rolled back by the server unless its commit had \
             already reached it: `resume` reads the log to find out and continues from what it holds"
        }
        GoneKind::Shutdown => ")",
    }
}

impl TaskError {
    /// Bad input: exit code 2.
    pub fn bad_input(msg: impl Into<String>) -> Self {
        TaskError::BadInput(msg.into())
    }

    /// Any other failure: exit code 1.
    pub fn failure(msg: impl Into<String>) -> Self {
        TaskError::Failure(msg.into())
    }

    /// The process exit code for this error.
    pub fn code(&self) -> i32 {
        match self {
            TaskError::BadInput(_)
            | TaskError::BadSpec { .. }
            | TaskError::NoTask { .. }
            | TaskError::StoredSpec { .. }
            | TaskError::NotInReview { .. }
            | TaskError::LogCorrupt { .. }
            | TaskError::CorruptRow { .. }
            | TaskError::TaskExists { .. }
            | TaskError::Unreachable { .. }
            | TaskError::RowsLocked { .. }
            | TaskError::ModelRefused { .. }
            | TaskError::Refused { .. } => EXIT_BAD_INPUT,
            TaskError::Failure(_)
            | TaskError::Held { .. }
            | TaskError::ParentLive { .. }
            | TaskError::LogChanged { .. }
            | TaskError::LeaseLost { .. }
            | TaskError::RenewFenced { .. }
            | TaskError::ToolFenced { .. }
            | TaskError::ServerGone { .. }
            | TaskError::ModelUnavailable { .. }
            | TaskError::StepLimit { .. }
            | TaskError::ToolUnavailable { .. }
            | TaskError::Postgres { .. } => EXIT_FAILURE,
        }
    }

    /// The PostgreSQL server went away or does not accept sessions (yet): a restart to be
    /// waited out, not a reason to stop a worker.
    pub fn server_gone(&self) -> bool {
        matches!(self, TaskError::ServerGone { .. } | TaskError::Unreachable { .. })
    }

    /// This runner was fenced out (its lease taken over).
    pub fn fenced(&self) -> bool {
        matches!(self, TaskError::LeaseLost { .. } | TaskError::RenewFenced { .. } | TaskError::ToolFenced { .. })
    }
}

/// Result alias of the `task` commands.
pub type TaskResult<T> = Result<T, TaskError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_errors_say_the_note_and_fail_with_exit_1() {
        let e = TaskError::ServerGone {
            db: "postgres://u@h/d".into(),
            what: "appending a checkpoint".into(),
            kind: GoneKind::Shutdown,
            detail: "FATAL: terminating connection due to administrator command".into(),
        };
        assert!(e.server_gone());
        assert_eq!(e.code(), EXIT_FAILURE);
        assert!(e.to_string().contains(SERVER_GONE_NOTE), "{e}");
        let u = TaskError::Unreachable { db: "postgres://u@h/d".into(), detail: "Connection refused".into() };
        assert!(u.server_gone() && u.code() == EXIT_BAD_INPUT && u.to_string().contains(SERVER_GONE_NOTE));
        let l = TaskError::RowsLocked { db: "d".into(), what: "w".into() };
        assert!(!l.server_gone() && l.code() == EXIT_BAD_INPUT);
    }

    #[test]
    fn lease_lost_names_both_epochs() {
        let e = TaskError::LeaseLost { task: "t".into(), epoch: 3, holder: Some(("w2".into(), 4)) };
        let s = e.to_string();
        assert!(s.contains("our epoch 3") && s.contains("w2 (epoch 4)") && s.contains("fenced"), "{s}");
        assert!(e.fenced());
        assert_eq!(e.code(), EXIT_FAILURE);
    }
}
