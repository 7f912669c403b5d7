//! The fork rule: a fork never repeats a side effect whose intent precedes the cut.
//!
//! `task fork ID --at SEQ` starts a new task from the parent's records `0..=SEQ`. The fork copies
//! the records that say what happened in the steps ([`copied_by_fork`]: model responses, tool
//! intents and results, needs-review markers and review decisions), renumbered, under its own id;
//! the parent's bookkeeping (creation, leases, suspensions, completion) is not copied.
//!
//! The cut can fall anywhere, including inside a tool call. The prefix is never shortened:
//!
//! * a call whose intent and outcome (result, or review answer) both precede the cut is copied as
//!   it is: the fork does not call it again;
//! * a call whose intent precedes the cut but whose outcome does not is **the parent's** call,
//!   possibly applied: the copied intent leaves the fork's state in flight, so the resume rule
//!   applies unchanged ([`fork_start`]): a read-only tool is re-run, an idempotent tool is
//!   re-called with the key the parent's intent recorded (the parent's key: the tool dedupes it),
//!   and a non-idempotent tool pauses the fork for review (the host shows the parent's later
//!   records and the tool's own file as evidence);
//! * a call whose model response precedes the cut but whose intent does not is the fork's own:
//!   it is made under the fork's id and key, as any new step.
//!
//! **While the parent can act on it.** A cut inside a parent's non-idempotent call copies an
//! intent that the parent's own runner may still be acting on (parked right before the call, say):
//! the fork's review would show "0 calls" and a `--retry` would send it, and then so would the
//! parent (issue 21). So such a fork first takes the **parent's** lease, as any runner taking the
//! parent over would ([`parent_guard`]): refused while the parent's runner may still act (a live
//! lease; by the dropped-session rule, [`super::lease::early_takeover_allowed`], also a holder whose session is gone
//! while its open call is unfenceable), and otherwise taken with a new epoch, to which the fork
//! raises the parent's fence in that tool (a parked parent's call is then refused) before it
//! copies anything. The parent's lease is released once the fork exists.
//!
//! Engines that fork or replay from a checkpoint (LangGraph, DBOS, Restate, Temporal) re-fire the
//! side effects after the fork point; this rule is what keeps a fork exactly-once with its parent.

use super::machine::{Phase, TaskState};
use super::record::{Event, ToolClass};

/// Whether a fork copies a parent record with this event (see the module doc).
pub const fn copied_by_fork(event: &Event) -> bool {
    matches!(
        event,
        Event::ModelResponse { .. }
            | Event::ToolIntent { .. }
            | Event::ToolResult { .. }
            | Event::NeedsReview { .. }
            | Event::ReviewDecision { .. }
    )
}

/// What a fork does first, given its state after the copied prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ForkStart {
    /// The cut is between steps or inside a model call: nothing of the parent is in flight.
    Clean,
    /// The parent's read-only call at `step` has no outcome in the prefix: re-run it.
    ReRun {
        /// Step.
        step: u16,
    },
    /// The parent's idempotent call at `step` has no outcome in the prefix: re-call it with the
    /// parent's key, so the tool dedupes it.
    ReCallWithParentKey {
        /// Step.
        step: u16,
    },
    /// The parent's non-idempotent call at `step` has no outcome in the prefix (or waits for a
    /// review): the fork pauses for review.
    Review {
        /// Step.
        step: u16,
    },
}

/// [`ForkStart`] of a fork whose copied prefix folds to `state`.
pub fn fork_start(state: &TaskState) -> ForkStart {
    let step = state.step;
    match &state.phase {
        Phase::InFlight { call, .. } => match call.class {
            ToolClass::ReadOnly => ForkStart::ReRun { step },
            ToolClass::Idempotent => ForkStart::ReCallWithParentKey { step },
            ToolClass::NonIdempotent => ForkStart::Review { step },
        },
        Phase::Review { .. } => ForkStart::Review { step },
        Phase::Model | Phase::Tool { .. } => ForkStart::Clean,
    }
}

/// What a fork must hold of its parent before it is created ([`parent_guard`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ParentGuard {
    /// Nothing: the cut is between calls, or inside a call that is safe to make again (a
    /// read-only call re-run, an idempotent one re-called with the parent's key).
    Nothing,
    /// The cut is inside the parent's non-idempotent call at `step` (or its review): take the
    /// parent's lease first (refused while its runner may still act, by the lease rules), raise
    /// the parent's fence in that tool to the new epoch, then copy.
    ParentLease {
        /// The step of the open call.
        step: u16,
    },
}

/// The fork's guard against a parent that can still act on the call the cut is inside
/// (see the module doc).
pub const fn parent_guard(start: ForkStart) -> ParentGuard {
    match start {
        ForkStart::Review { step } => ParentGuard::ParentLease { step },
        ForkStart::Clean | ForkStart::ReRun { .. } | ForkStart::ReCallWithParentKey { .. } => ParentGuard::Nothing,
    }
}
