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

/// Dense per-pod next events and signals, one array per field: a dispatch's pass over the pods
/// reads the next events, then the queue lengths' parts, each a dense array, and the router reads
/// the load signals in place ([`Self::loads`]).
pub(crate) struct Calendar {
    /// The fleet uses the calendar (else it asks every pod).
    pub(crate) on: bool,
    /// Every entry describes its pod now (false after anything changed pods outside a dispatch).
    pub(crate) fresh: bool,
    next_ns: [u64; MAX_PODS],
    /// [`Signals::queue_len`], [`Signals::in_flight`], [`Signals::in_flight_until_ns`] and
    /// [`Signals::load`] of each pod.
    queue_len: [u32; MAX_PODS],
    in_flight: [u32; MAX_PODS],
    in_flight_until_ns: [u64; MAX_PODS],
    loads: [PodLoad; MAX_PODS],
}

impl Calendar {
    pub(crate) fn new(on: bool) -> Self {
        Calendar {
            on,
            fresh: false,
            next_ns: [u64::MAX; MAX_PODS],
            queue_len: [0; MAX_PODS],
            in_flight: [0; MAX_PODS],
            in_flight_until_ns: [0; MAX_PODS],
            loads: [PodLoad::default(); MAX_PODS],
        }
    }

    /// Notes pod `p`'s state (after it changed). False when its engine does not describe its
    /// signals.
    #[inline]
    pub(crate) fn note<E: Engine>(&mut self, p: usize, pod: &E) -> bool {
        match pod.signals() {
            Some(s) => {
                let Signals { next_event_ns, queue_len, in_flight, in_flight_until_ns, load } = s;
                self.next_ns[p] = next_event_ns.unwrap_or(u64::MAX);
                self.queue_len[p] = queue_len;
                self.in_flight[p] = in_flight;
                self.in_flight_until_ns[p] = in_flight_until_ns;
                self.loads[p] = load;
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

    /// The queue lengths at `t_ns` of pods `0..out.len()`, into `out`.
    #[inline]
    pub(crate) fn queue_lens(&self, t_ns: u64, out: &mut [u32]) {
        let n = out.len();
        let parts = self.queue_len[..n].iter().zip(&self.in_flight[..n]).zip(&self.in_flight_until_ns[..n]);
        for (q, ((&base, &extra), &until)) in out.iter_mut().zip(parts) {
            *q = base + if until > t_ns { extra } else { 0 };
        }
    }

    /// The load signals of pods `0..n`.
    #[inline]
    pub(crate) fn loads(&self, n: usize) -> &[PodLoad] {
        &self.loads[..n]
    }
}
