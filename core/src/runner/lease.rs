//! The lease rules as pure functions (time passed in as integers): who may take a task's lease,
//! with which epoch, and whether an append under an epoch is still allowed (fencing). The host
//! evaluates them inside its transactions; the liveness of a holder is an input, since only the
//! host can look at processes.

use super::error::RunnerError;

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
    /// Whether the holder is provably gone (same host and boot, process gone or pid reused).
    pub holder_dead: bool,
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
    /// A live holder has it.
    Refuse {
        /// The holder's epoch.
        epoch: u64,
        /// Milliseconds until it expires.
        expires_in_ms: i64,
    },
}

/// Decides whether the caller may take the lease at `now_ms`. `log_epoch` is the last epoch in
/// the task's log (the new epoch exceeds both it and the stored one, so epochs never repeat even
/// if the lease row were lost).
pub fn decide_lease(current: Option<LeaseView>, log_epoch: u64, now_ms: i64) -> LeaseDecision {
    let base = current.map_or(0, |c| c.epoch).max(log_epoch);
    let epoch = base.saturating_add(1);
    match current {
        None => LeaseDecision::Take { epoch, reason: TakeReason::Free },
        Some(c) if c.ours => LeaseDecision::Take { epoch, reason: TakeReason::Ours },
        Some(c) if c.expires_at_ms <= now_ms => LeaseDecision::Take { epoch, reason: TakeReason::Expired },
        Some(c) if c.holder_dead => LeaseDecision::Take { epoch, reason: TakeReason::HolderDead },
        Some(c) => LeaseDecision::Refuse { epoch: c.epoch, expires_in_ms: c.expires_at_ms - now_ms },
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
        Some(LeaseView { epoch, expires_at_ms: exp, ours, holder_dead: dead })
    }

    #[test]
    fn rules() {
        assert_eq!(decide_lease(None, 0, 10), LeaseDecision::Take { epoch: 1, reason: TakeReason::Free });
        assert_eq!(decide_lease(None, 7, 10), LeaseDecision::Take { epoch: 8, reason: TakeReason::Free });
        assert_eq!(
            decide_lease(view(3, 100, false, false), 3, 10),
            LeaseDecision::Refuse { epoch: 3, expires_in_ms: 90 }
        );
        assert_eq!(
            decide_lease(view(3, 100, false, true), 3, 10),
            LeaseDecision::Take { epoch: 4, reason: TakeReason::HolderDead }
        );
        assert_eq!(
            decide_lease(view(3, 100, false, false), 3, 100),
            LeaseDecision::Take { epoch: 4, reason: TakeReason::Expired }
        );
        assert_eq!(
            decide_lease(view(3, 100, true, false), 5, 10),
            LeaseDecision::Take { epoch: 6, reason: TakeReason::Ours }
        );
        assert_eq!(check_fence(Some((4, true)), 4), Ok(()));
        assert!(check_fence(Some((5, false)), 4).is_err());
        assert!(check_fence(Some((4, false)), 4).is_err(), "same epoch, other owner");
        assert!(check_fence(None, 4).is_err());
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
