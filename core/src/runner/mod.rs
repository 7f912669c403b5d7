//! The durable task runner core (see `docs/RUNNER.md`): an append-only log of postcard records in
//! CRC-checked frames, a storage trait with RAM and NOR-flash implementations, and the runner as a
//! pure state machine over the replayed log. `no_std`, no `alloc`.
//!
//! # Pieces
//!
//! * [`record`]: the records `(task_id, seq, kind, payload, status)` ([`Record`], [`Event`]).
//! * [`frame`]: the envelope (magic, format version, length, CRC-32C, postcard record); the byte
//!   layout is drawn there. [`frame::parse`] never panics.
//! * [`storage`]: [`LogStorage`] with a per-method durability contract; [`RamLog`] (a caller
//!   buffer) and [`FlashLog`] (any `embedded_storage::nor_flash::NorFlash`, survives a write torn
//!   at any byte); `MockFlash` (feature `harness`) cuts the power after n bytes.
//! * [`machine`]: [`TaskState::apply`] folds one record, [`next_action`] decides. No snapshot:
//!   the state is always the fold of the log.
//! * [`drive`](mod@drive): the loop that sequences I/O ([`Journal`], [`Effects`], [`drive()`]):
//!   intent durable before the side effect, result recorded after.
//! * [`fork`](mod@fork): the fork rule: a fork never repeats a side effect whose intent precedes
//!   the cut ([`copied_by_fork`], [`fork_start`]), and never acts on a parent's open call while
//!   the parent can ([`parent_guard`]).
//! * [`lease`]: the lease and fencing rules as pure functions of integers ([`decide_lease`],
//!   [`check_fence`]), the tool side of fencing ([`check_tool_fence`]) and the margin rule for
//!   tools that cannot check a token ([`may_call`]), when a checkpoint renews the lease
//!   ([`renewal_due`]), and the dropped-session rule: a dropped session is not a dead holder
//!   ([`early_takeover_allowed`], [`open_call`]); the host evaluates them inside its
//!   transactions.
//! * `harness` (feature `harness`): crash injection at every point, simulated tools that count
//!   calls, and the every-crash-point enumeration (`harness::enumerate_crash_points`), with the
//!   fault injection they use (`MockFlash`, `RamLog::append_torn`): test support, kept out of an
//!   application's build.
//!
//! # The resume rule
//!
//! An intent without a result (the process died between "tool call sent" and "result recorded")
//! is resolved by the tool's [`ToolClass`]: read-only tools are re-run, idempotent tools are
//! re-called with the same key ([`idempotency_key`] of task id and step), non-idempotent tools are
//! never re-run: the step is recorded as "unknown, needs review" and the task pauses until a
//! human records a [`Decision`].
//!
//! # Example
//!
//! With the `harness` feature:
//!
//! ```
//! use brokerlab_core::runner::{harness, RamLog, TaskId};
//! let mut buf = [0u8; harness::DEMO_LOG_BYTES];
//! let mut world = harness::SimWorld::<128>::new();
//! let task = TaskId::try_from("demo").unwrap();
//! // crash at point 7 of the first boot, then recover and finish
//! let report = harness::run_with_crashes(&mut buf, &task, &harness::DEMO_SCRIPT, &mut world, &[7], false).unwrap();
//! assert_eq!(report.crashes, 1);
//! let _ = RamLog::open(&mut buf);
//! ```

pub mod crc;
pub mod drive;
pub mod error;
pub mod fork;
pub mod frame;
#[cfg(feature = "harness")]
pub mod harness;
pub mod lease;
pub mod limits;
pub mod machine;
pub mod record;
pub mod storage;

pub use crc::crc32c;
pub use drive::{
    BufferedJournal, CommitError, DriveError, Effects, Journal, LogJournal, ModelReply, Stop, ToolOutput, commit,
    drive, drive_step, review,
};
pub use error::{RunnerError, StorageError};
pub use fork::{ForkStart, ParentGuard, copied_by_fork, fork_start, parent_guard};
pub use frame::{FORMAT_VERSION, FrameError, MAX_FRAME_LEN, emit, parse};
pub use lease::{
    Holder, LEASE_RENEW_DIVISOR, LeaseDecision, LeaseRowError, LeaseView, OpenCall, RefuseReason, TakeReason,
    ToolFence, check_fence, check_lease_row, check_tool_fence, decide_lease, early_takeover_allowed, may_call,
    open_call, renewal_due,
};
pub use limits::*;
pub use machine::{Action, Counters, End, LeaseInfo, Phase, TaskState, idempotency_key, key_for, next_action};
pub use record::{
    Args, Decision, Event, Key, Kind, ModelText, Owner, Reason, Record, ResultText, Status, TaskId, ToolCall,
    ToolClass, ToolName,
};
pub use storage::{
    Cursor, FlashLog, LogStorage, RamError, RamLog, append_record, for_each_record, replay, replay_prefix,
};
#[cfg(feature = "harness")]
pub use storage::{MockFlash, MockFlashError};
