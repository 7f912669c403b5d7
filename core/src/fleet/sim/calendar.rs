//! The fleet's calendar of its pods: each pod's next event and the signals a router reads of it
//! ([`Signals`], defined beside the engine trait that reports them), kept in dense arrays and refreshed only for the pods that changed, so that a
//! dispatch advances only the pods with an event before the arrival and reads the others' queue
//! lengths and loads without touching their engines (docs/MODEL.md, "Fleet and time": the same
//! events run in the same order as when every pod is asked; a property test compares both).
//!
//! Used for engines that describe their signals ([`crate::fleet::engine::Engine::signals`]: the
//! batched engine) and fleets without autoscaling or P/D (their pods change outside a dispatch's
//! steps 2 and 5); the other fleets ask every pod at every arrival.

use crate::fleet::base::limits::MAX_PODS;
use crate::fleet::base::load::PodLoad;
use crate::fleet::engine::{Engine, Signals};

/// Dense per-pod next events and signals.
pub(crate) struct Calendar {
    /// The fleet uses the calendar (else it asks every pod).
    pub(crate) on: bool,
    /// Every entry describes its pod now (false after anything changed pods outside a dispatch).
    pub(crate) fresh: bool,
    next_ns: [u64; MAX_PODS],
    sig: [Signals; MAX_PODS],
}

impl Calendar {
    pub(crate) fn new(on: bool) -> Self {
        Calendar { on, fresh: false, next_ns: [u64::MAX; MAX_PODS], sig: [Signals::default(); MAX_PODS] }
    }

    /// Notes pod `p`'s state (after it changed). False when its engine does not describe its
    /// signals.
    #[inline]
    pub(crate) fn note<E: Engine>(&mut self, p: usize, pod: &E) -> bool {
        match pod.signals() {
            Some(s) => {
                self.next_ns[p] = s.next_event_ns.unwrap_or(u64::MAX);
                self.sig[p] = s;
                true
            }
            None => false,
        }
    }

    /// Notes every pod (when not fresh). False when an engine does not describe its signals.
    pub(crate) fn refresh<E: Engine>(&mut self, pods: &[E]) -> bool {
        if !self.fresh {
            for (p, pod) in pods.iter().enumerate() {
                if !self.note(p, pod) {
                    return false;
                }
            }
            self.fresh = true;
        }
        true
    }

    /// True when pod `p` has an event that starts before `t_ns`.
    #[inline]
    pub(crate) fn due(&self, p: usize, t_ns: u64) -> bool {
        self.next_ns[p] < t_ns
    }

    /// Pod `p`'s queue length at `t_ns`.
    #[inline]
    pub(crate) fn queue_len(&self, p: usize, t_ns: u64) -> u32 {
        let s = &self.sig[p];
        s.queue_len + if s.in_flight_until_ns > t_ns { s.in_flight } else { 0 }
    }

    /// Pod `p`'s load signals.
    #[inline]
    pub(crate) fn load(&self, p: usize) -> PodLoad {
        self.sig[p].load
    }
}
