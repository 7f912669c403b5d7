//! The lease rules as pure functions (time passed in as integers): who may take a task's lease,
//! with which epoch, and whether an append under an epoch is still allowed (fencing). The host
//! evaluates them inside its transactions; the liveness of a holder is an input, since only the
//! host can look at processes.

use super::error::RunnerError;
use super::limits::{MAX_CLOCK_SKEW_MS, MAX_LEASE_MS};
use super::machine::{Phase, TaskState};
use super::record::{ToolClass, ToolName};

/// What the taker knows about the life of a lease's holder. Only the host can look (at
/// processes, at database sessions); the rules below decide on what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Holder {
    /// Alive, or nothing is known (another host whose session lives, a host without `/proc`).
    Unknown,
    /// Its database session is gone: the server closed it (its process died, the server
    /// restarted, the connection was cut, an operator ran `pg_terminate_backend`). **Not proof
    /// of death**: the process may live on, parked or slow, and still make the call it has in
    /// flight ([`early_takeover_allowed`]).
    SessionGone,
    /// Provably dead, by a proof that a dropped session cannot fake: same host and boot, and its
    /// process is gone, a zombie, or a different process under the same pid.
    Dead,
}

/// The lease currently recorded for a task, as the storage sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LeaseView {
    /// Its epoch.
    pub epoch: u64,
    /// When it expires (ms since the Unix epoch; 0 = released).
    pub expires_at_ms: i64,
    /// Whether the caller is its holder (same owner string).
    pub ours: bool,
    /// What is known of its holder's life.
    pub holder: Holder,
}

/// The call a lease's holder could still make on its own, read from the log **as of the
/// takeover** (under the lease row's lock, where the holder can no longer append: a call whose
/// intent is not in that log is a call it can never make, since a call leaves only after its
/// intent is durable). That is at most one: the log's last intent, if it has no outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum OpenCall {
    /// No intent without an outcome: every further action of the holder is an append, which the
    /// log's fence refuses after a takeover.
    None,
    /// An intent without an outcome whose call is harmless if the holder makes it after a
    /// takeover: the tool checks fencing tokens (the taker raises the task's fence in it before
    /// it decides, so the holder's call is refused), or it is idempotent (the holder's and the
    /// taker's calls carry the same key: one applies) or read-only.
    Fenced,
    /// An intent without an outcome for a non-idempotent tool that cannot check a token (a real
    /// email API): nothing but the holder's own margin rule ([`may_call`]) keeps it from sending,
    /// and that rule counts from the expiry the holder wrote.
    Unfenceable,
}

/// [`OpenCall`] of a task whose log (as of the takeover) folds to `state`; `checks_fence` says
/// whether the tool of its open call, if any, refuses a stale fencing token.
pub fn open_call(state: &TaskState, checks_fence: impl FnOnce(&ToolName) -> bool) -> OpenCall {
    match &state.phase {
        Phase::InFlight { call, .. } => match call.class {
            ToolClass::ReadOnly | ToolClass::Idempotent => OpenCall::Fenced,
            ToolClass::NonIdempotent if checks_fence(&call.tool) => OpenCall::Fenced,
            ToolClass::NonIdempotent => OpenCall::Unfenceable,
        },
        // a review waits for a human; a call whose intent is not durable is never made
        Phase::Model | Phase::Tool { .. } | Phase::Review { .. } => OpenCall::None,
    }
}

/// **The dropped-session rule (issue 21): a dropped session is not a dead holder.** A lease whose holder's session
/// is gone ([`Holder::SessionGone`]) may be taken before its expiry only where every call the
/// holder could still make is fenced: the log's open call, if any, is [`OpenCall::Fenced`]. With
/// an [`OpenCall::Unfenceable`] call in flight the taker waits for the expiry the holder wrote
/// (the margin rule then keeps a holder that wakes late from sending, except in the residual
/// window of docs/RUNNER.md), unless the holder is [`Holder::Dead`] by a proof that survives a
/// session drop.
pub const fn early_takeover_allowed(open: OpenCall) -> bool {
    !matches!(open, OpenCall::Unfenceable)
}

/// Why a lease may be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TakeReason {
    /// No lease was ever taken.
    Free,
    /// The caller holds it already (a re-take bumps the epoch).
    Ours,
    /// It expired (or was released).
    Expired,
    /// Its holder is provably dead: taken over at once, without waiting for the expiry.
    HolderDead,
    /// Its holder's session is gone and every call it could still make is fenced (the dropped-session rule): taken
    /// over at once.
    SessionGone,
}

/// Why a lease may not be taken now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RefuseReason {
    /// Its holder may be alive and acting.
    Live,
    /// Its holder's session is gone, but the log ends with an unfenceable call the holder may
    /// still make (the dropped-session rule): wait for the expiry it wrote.
    UnfenceableCall,
}

/// The decision of [`decide_lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LeaseDecision {
    /// Take it with this (strictly larger) epoch.
    Take {
        /// The new epoch.
        epoch: u64,
        /// Why.
        reason: TakeReason,
    },
    /// A holder that may still act has it.
    Refuse {
        /// The holder's epoch.
        epoch: u64,
        /// Milliseconds until it expires.
        expires_in_ms: i64,
        /// Why it is not taken now.
        why: RefuseReason,
    },
}

/// Decides whether the caller may take the lease at `now_ms`. `log_epoch` is the last epoch in
/// the task's log (the new epoch exceeds both it and the stored one, so epochs never repeat even
/// if the lease row were lost); `open` is the call the holder could still make, from the log as
/// of the decision ([`open_call`]; the dropped-session rule, [`early_takeover_allowed`]).
pub fn decide_lease(current: Option<LeaseView>, log_epoch: u64, now_ms: i64, open: OpenCall) -> LeaseDecision {
    let base = current.map_or(0, |c| c.epoch).max(log_epoch);
    let epoch = base.saturating_add(1);
    let take = |reason| LeaseDecision::Take { epoch, reason };
    let Some(c) = current else { return take(TakeReason::Free) };
    let refuse = |why| LeaseDecision::Refuse { epoch: c.epoch, expires_in_ms: c.expires_at_ms - now_ms, why };
    if c.ours {
        return take(TakeReason::Ours);
    }
    if c.expires_at_ms <= now_ms {
        return take(TakeReason::Expired);
    }
    match c.holder {
        Holder::Dead => take(TakeReason::HolderDead),
        Holder::SessionGone if early_takeover_allowed(open) => take(TakeReason::SessionGone),
        Holder::SessionGone => refuse(RefuseReason::UnfenceableCall),
        Holder::Unknown => refuse(RefuseReason::Live),
    }
}

/// Why a stored lease row is not one a runner could have written ([`check_lease_row`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LeaseRowError {
    /// A negative epoch (epochs start at 1 and only grow).
    NegativeEpoch,
    /// A negative expiry (0 is "released").
    NegativeExpiry,
    /// An expiry further ahead than the longest lease and the clock skew allowed between hosts:
    /// no runner wrote it, and honouring it would keep the task from everyone for that long.
    TooFarAhead {
        /// How far ahead of now, ms.
        ahead_ms: i64,
    },
}

/// Checks a lease row as stored (`epoch` and `expires_at_ms` as the database holds them) at
/// `now_ms`: a runner writes an epoch >= 1 (0 only in a placeholder) and an expiry of at most
/// `now + MAX_LEASE_MS` by its own clock, so an expiry more than [`MAX_LEASE_MS`] +
/// [`MAX_CLOCK_SKEW_MS`] ahead is corrupt, not a lease.
pub fn check_lease_row(epoch: i64, expires_at_ms: i64, now_ms: i64) -> Result<(), LeaseRowError> {
    if epoch < 0 {
        return Err(LeaseRowError::NegativeEpoch);
    }
    if expires_at_ms < 0 {
        return Err(LeaseRowError::NegativeExpiry);
    }
    let ahead_ms = expires_at_ms.saturating_sub(now_ms);
    if ahead_ms > (MAX_LEASE_MS as i64).saturating_add(MAX_CLOCK_SKEW_MS as i64) {
        return Err(LeaseRowError::TooFarAhead { ahead_ms });
    }
    Ok(())
}

impl core::fmt::Display for LeaseRowError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LeaseRowError::NegativeEpoch => f.write_str("a negative epoch"),
            LeaseRowError::NegativeExpiry => f.write_str("a negative expiry"),
            LeaseRowError::TooFarAhead { ahead_ms } => write!(
                f,
                "an expiry {ahead_ms} ms ahead, more than the longest lease ({MAX_LEASE_MS} ms) and the clock skew \
                 allowed between hosts ({MAX_CLOCK_SKEW_MS} ms)"
            ),
        }
    }
}

/// Fencing: an append under `(my_epoch, ours)` is allowed only if the stored lease is still that
/// epoch and held by the caller. Evaluated inside the append transaction.
pub fn check_fence(stored: Option<(u64, bool)>, my_epoch: u64) -> Result<(), RunnerError> {
    match stored {
        Some((epoch, true)) if epoch == my_epoch => Ok(()),
        Some((epoch, _)) => Err(RunnerError::StaleEpoch { current: epoch, got: my_epoch }),
        None => Err(RunnerError::StaleEpoch { current: 0, got: my_epoch }),
    }
}

/// What a tool that checks fencing tokens does with a call carrying `token`, given the highest
/// token it has seen for the task (`None`: no call yet). The fencing-token rule of leases: the
/// resource, not the lock service, refuses a holder whose lease was taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ToolFence {
    /// Accept the call; the tool records `highest` as the task's highest token from now on.
    Accept {
        /// The new highest token (`max(seen, token)`).
        highest: u64,
    },
    /// Refuse without applying: a newer lease holder has reached this tool.
    Refuse {
        /// The highest token seen.
        highest: u64,
    },
}

/// The tool side of fencing: accept a token equal to or above the highest seen for the task,
/// refuse a lower one. Equal is accepted: one lease holder makes several calls.
pub fn check_tool_fence(highest_seen: Option<u64>, token: u64) -> ToolFence {
    match highest_seen {
        Some(h) if token < h => ToolFence::Refuse { highest: h },
        Some(h) => ToolFence::Accept { highest: h.max(token) },
        None => ToolFence::Accept { highest: token },
    }
}

/// The runner side, for tools that cannot check a token: may a call be sent at `now_ms` under a
/// lease that expires at `expires_at_ms`? Only while at least `margin_ms` of it is left, so the
/// call reaches the tool before another runner may take the lease over (given clocks that agree
/// to within the margin). `false` means: renew the lease first (a fenced transaction), or stop.
pub fn may_call(expires_at_ms: i64, now_ms: i64, margin_ms: i64) -> bool {
    expires_at_ms.saturating_sub(now_ms) >= margin_ms.max(0)
}

/// A checkpoint renews the lease once more than `1 / LEASE_RENEW_DIVISOR` of its time to live
/// has passed since the last renewal (see [`renewal_due`]).
pub const LEASE_RENEW_DIVISOR: i64 = 8;

/// Whether a checkpoint at `now_ms` must also renew the lease that, as its holder last renewed
/// it, expires at `expires_at_ms` and lives `ttl_ms` from each renewal. True once less than
/// `ttl_ms - ttl_ms / LEASE_RENEW_DIVISOR` is left (an eighth of the lease has passed), so after
/// every checkpoint at least seven eighths of the lease are left: a runner is taken over only
/// if it goes that long without a checkpoint (with a renewal on every checkpoint: the whole
/// lease). A checkpoint that does not renew only checks the fence, which costs the server less
/// than rewriting the lease row. Fencing never depends on it: the epoch decides who may append,
/// the expiry only when another runner may take over, and the margin rule ([`may_call`]) is
/// evaluated on the expiry actually written.
pub fn renewal_due(expires_at_ms: i64, now_ms: i64, ttl_ms: i64) -> bool {
    debug_assert!(ttl_ms >= 0, "a lease's time to live is not negative");
    let keep_ms = ttl_ms.saturating_sub(ttl_ms / LEASE_RENEW_DIVISOR);
    expires_at_ms.saturating_sub(now_ms) < keep_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(epoch: u64, exp: i64, ours: bool, dead: bool) -> Option<LeaseView> {
        let holder = if dead { Holder::Dead } else { Holder::Unknown };
        Some(LeaseView { epoch, expires_at_ms: exp, ours, holder })
    }

    #[test]
    fn rules() {
        assert_eq!(
            decide_lease(None, 0, 10, OpenCall::None),
            LeaseDecision::Take { epoch: 1, reason: TakeReason::Free }
        );
        assert_eq!(
            decide_lease(None, 7, 10, OpenCall::None),
            LeaseDecision::Take { epoch: 8, reason: TakeReason::Free }
        );
        assert_eq!(
            decide_lease(view(3, 100, false, false), 3, 10, OpenCall::None),
            LeaseDecision::Refuse { epoch: 3, expires_in_ms: 90, why: RefuseReason::Live }
        );
        assert_eq!(
            decide_lease(view(3, 100, false, true), 3, 10, OpenCall::Unfenceable),
            LeaseDecision::Take { epoch: 4, reason: TakeReason::HolderDead }
        );
        assert_eq!(
            decide_lease(view(3, 100, false, false), 3, 100, OpenCall::Unfenceable),
            LeaseDecision::Take { epoch: 4, reason: TakeReason::Expired }
        );
        assert_eq!(
            decide_lease(view(3, 100, true, false), 5, 10, OpenCall::None),
            LeaseDecision::Take { epoch: 6, reason: TakeReason::Ours }
        );
        assert_eq!(check_fence(Some((4, true)), 4), Ok(()));
        assert!(check_fence(Some((5, false)), 4).is_err());
        assert!(check_fence(Some((4, false)), 4).is_err(), "same epoch, other owner");
        assert!(check_fence(None, 4).is_err());
    }

    #[test]
    fn a_dropped_session_is_not_a_dead_holder() {
        let base = LeaseView { epoch: 3, expires_at_ms: 5000, ours: false, holder: Holder::SessionGone };
        let gone = Some(base);
        // nothing in flight, or only calls that are fenced or safe to repeat: taken at once
        for open in [OpenCall::None, OpenCall::Fenced] {
            assert_eq!(
                decide_lease(gone, 3, 1000, open),
                LeaseDecision::Take { epoch: 4, reason: TakeReason::SessionGone },
                "{open:?}"
            );
        }
        // an unfenceable call in flight: wait for the expiry the holder wrote, exactly
        assert_eq!(
            decide_lease(gone, 3, 1000, OpenCall::Unfenceable),
            LeaseDecision::Refuse { epoch: 3, expires_in_ms: 4000, why: RefuseReason::UnfenceableCall }
        );
        assert_eq!(
            decide_lease(gone, 3, 4999, OpenCall::Unfenceable),
            LeaseDecision::Refuse { epoch: 3, expires_in_ms: 1, why: RefuseReason::UnfenceableCall }
        );
        assert_eq!(
            decide_lease(gone, 3, 5000, OpenCall::Unfenceable),
            LeaseDecision::Take { epoch: 4, reason: TakeReason::Expired }
        );
        // a proof of death that survives a session drop: at once, whatever is in flight
        let dead = Some(LeaseView { holder: Holder::Dead, ..base });
        assert_eq!(
            decide_lease(dead, 3, 1000, OpenCall::Unfenceable),
            LeaseDecision::Take { epoch: 4, reason: TakeReason::HolderDead }
        );
        // a live session: never before the expiry
        let live = Some(LeaseView { holder: Holder::Unknown, ..base });
        assert!(matches!(
            decide_lease(live, 3, 1000, OpenCall::None),
            LeaseDecision::Refuse { why: RefuseReason::Live, .. }
        ));
        assert!(early_takeover_allowed(OpenCall::None) && early_takeover_allowed(OpenCall::Fenced));
        assert!(!early_takeover_allowed(OpenCall::Unfenceable));
    }

    #[test]
    fn corrupt_lease_rows_are_told_apart() {
        let now = 1_700_000_000_000;
        assert_eq!(check_lease_row(4, now + 5000, now), Ok(()));
        assert_eq!(check_lease_row(0, 0, now), Ok(()), "a placeholder, or released");
        assert_eq!(check_lease_row(-1, now, now), Err(LeaseRowError::NegativeEpoch));
        assert_eq!(check_lease_row(1, -5, now), Err(LeaseRowError::NegativeExpiry));
        let limit = MAX_LEASE_MS as i64 + MAX_CLOCK_SKEW_MS as i64;
        assert_eq!(check_lease_row(1, now + limit, now), Ok(()), "the longest lease from a clock ahead by the skew");
        assert_eq!(check_lease_row(1, now + limit + 1, now), Err(LeaseRowError::TooFarAhead { ahead_ms: limit + 1 }));
        // issue 21's row: "expires in 43460588147.4s"
        assert!(check_lease_row(1, now + 43_460_588_147_400, now).is_err());
        assert!(check_lease_row(1, i64::MAX, i64::MIN).is_err(), "no overflow");
    }

    #[test]
    fn tool_fence_and_margin() {
        assert_eq!(check_tool_fence(None, 3), ToolFence::Accept { highest: 3 });
        assert_eq!(check_tool_fence(Some(3), 3), ToolFence::Accept { highest: 3 }, "same holder, next call");
        assert_eq!(check_tool_fence(Some(3), 5), ToolFence::Accept { highest: 5 });
        assert_eq!(check_tool_fence(Some(4), 1), ToolFence::Refuse { highest: 4 });
        // 300 ms lease renewed at t = 1000, margin 75 ms
        assert!(may_call(1300, 1000, 75));
        assert!(may_call(1300, 1225, 75), "exactly the margin left");
        assert!(!may_call(1300, 1226, 75));
        assert!(!may_call(1300, 5000, 75), "long expired");
        assert!(!may_call(i64::MIN, i64::MAX, 0), "no overflow");
    }

    #[test]
    fn renewal_is_due_once_an_eighth_of_the_lease_passed() {
        // 8000 ms lease renewed at t = 1000: expires at 9000, due once less than 7000 ms is left
        assert!(!renewal_due(9000, 1000, 8000), "just renewed");
        assert!(!renewal_due(9000, 2000, 8000), "exactly an eighth passed: 7000 ms left");
        assert!(renewal_due(9000, 2001, 8000));
        assert!(renewal_due(9000, 9000, 8000), "expired");
        assert!(renewal_due(9000, 20_000, 8000), "long expired");
        // the default 5000 ms lease: renewed at most every 625 ms
        assert!(!renewal_due(5000, 625, 5000));
        assert!(renewal_due(5000, 626, 5000));
        // the shortest lease (10 ms): 10 / 8 = 1, due once 1 ms passed
        assert!(!renewal_due(110, 101, 10));
        assert!(renewal_due(110, 102, 10));
        // below 8 ms an eighth rounds to 0: due from the next millisecond on
        assert!(!renewal_due(105, 100, 5));
        assert!(renewal_due(105, 101, 5));
        assert!(renewal_due(i64::MIN, i64::MAX, 5000), "no overflow");
        assert!(!renewal_due(i64::MAX, i64::MIN, 5000), "no overflow");
    }
}
