//! Autoscaling: the rule that decides when the fleet adds or drops a pod.
//!
//! Target tracking on the mean queue length of the routable pods, evaluated in arrival order,
//! integers only (docs/MODEL.md, "Autoscaling", is the specification):
//!
//! * `cfg.pods` pods exist as buffers; pods `0..active` are routable. The run starts with
//!   `initial_pods` routable.
//! * A pod booted at time t becomes routable for the first request arriving at or after
//!   `t + startup_ns`; it starts cold (empty cache, empty queue): a new machine.
//! * The rule is evaluated at the first arrival at or after each multiple of `interval_ns`
//!   (0, interval, 2 interval, ...), with the queue lengths at that arrival, before routing.
//! * Scale out (boot pod `active`) when `1000 * sum(queue_len) > up_milli * active`, no pod is
//!   booting and `active < cfg.pods`.
//! * Scale in (drop pod `active - 1`, the newest) when `1000 * sum(queue_len) < down_milli *
//!   active`, no pod is booting and `active > min_pods`. Its cache is dropped (every block evicted,
//!   least recent first, through the usual events, so the index learns of it like of any other
//!   eviction); requests already queued on it still finish there.
//! * Cost: a pod is provisioned from its boot decision (or t = 0) until its scale-in decision plus
//!   the drain of the requests queued on it, and the pods still provisioned at the end until the
//!   end. [`ScaleState::pod_ns`] is that integral, in pod-nanoseconds.

use crate::fleet::base::error::{Error, Field, Quantity};
use crate::fleet::base::limits::MAX_PODS;

/// An autoscaling policy (see the module doc for the rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ScalePolicy {
    /// Fewest routable pods (>= 1).
    pub min_pods: u32,
    /// Routable pods at t = 0 (`min_pods..=` the fleet's pods).
    pub initial_pods: u32,
    /// Evaluation period, ns (> 0).
    pub interval_ns: u64,
    /// Scale out when the mean queue length exceeds `up_milli / 1000`.
    pub up_milli: u32,
    /// Scale in when the mean queue length is below `down_milli / 1000` (< `up_milli`).
    pub down_milli: u32,
    /// Time from the boot decision until the new pod takes requests, ns.
    pub startup_ns: u64,
}

impl ScalePolicy {
    /// Checks the policy for a fleet of `pods` pods.
    pub fn validate(&self, pods: usize) -> Result<(), Error> {
        self.validate_pods(pods)?;
        if self.down_milli >= self.up_milli {
            return Err(Error::InvalidConfig {
                field: Field::ScaleDownQueue,
                expected: "a mean queue length below scale-up-queue",
            });
        }
        Ok(())
    }

    /// The checks both rules share (the batched engine's WVA rule reads no `up_milli` or
    /// `down_milli`): the pod counts and the interval.
    pub fn validate_pods(&self, pods: usize) -> Result<(), Error> {
        let bad = |field, expected| Err(Error::InvalidConfig { field, expected });
        if self.min_pods == 0 || self.min_pods as usize > pods {
            return bad(Field::ScaleMin, "between 1 and the number of pods");
        }
        if self.initial_pods < self.min_pods || self.initial_pods as usize > pods {
            return bad(Field::ScaleInitial, "between scale-min and the number of pods");
        }
        if self.interval_ns == 0 {
            return bad(Field::ScaleInterval, "a positive time");
        }
        Ok(())
    }
}

/// What the rule decided at one arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleAction {
    /// Nothing.
    Hold,
    /// Boot pod `pod` (routable from `ready_ns`).
    Out {
        /// The pod booted.
        pod: usize,
        /// When it takes requests.
        ready_ns: u64,
    },
    /// Drop pod `pod` (the newest routable one).
    In {
        /// The pod dropped.
        pod: usize,
    },
}

/// The autoscaler's state; the fleet drives it, one arrival at a time.
#[derive(Clone, Copy, Debug)]
pub struct ScaleState {
    policy: ScalePolicy,
    pods: usize,
    active: usize,
    /// The pod booting and when it is ready.
    booting: Option<(usize, u64)>,
    next_eval_ns: u64,
    /// When each provisioned pod was provisioned (`None`: not provisioned).
    since_ns: [Option<u64>; MAX_PODS],
    closed_pod_ns: u64,
}

impl ScaleState {
    /// The state at t = 0 for a fleet of `pods` pods (`policy` must be valid for it).
    pub fn new(policy: ScalePolicy, pods: usize) -> Result<Self, Error> {
        policy.validate(pods)?;
        let mut since_ns = [None; MAX_PODS];
        since_ns[..policy.initial_pods as usize].fill(Some(0));
        Ok(ScaleState {
            policy,
            pods,
            active: policy.initial_pods as usize,
            booting: None,
            next_eval_ns: 0,
            since_ns,
            closed_pod_ns: 0,
        })
    }

    /// Routable pods `0..active`.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Makes the booting pod routable when it is ready at `now_ns`; returns it then.
    pub fn activate_ready(&mut self, now_ns: u64) -> Option<usize> {
        match self.booting {
            Some((pod, ready)) if ready <= now_ns => {
                self.booting = None;
                self.active = pod + 1;
                Some(pod)
            }
            _ => None,
        }
    }

    /// Evaluates the rule at an arrival at `now_ns` with the routable pods' queue lengths
    /// `queue_lens` (`active()` of them) and applies the decision to the state. After a
    /// scale-in the caller ends the dropped pod's provisioned time with [`Self::release`] at
    /// the end of its drain (its last finish, or now).
    pub fn evaluate(&mut self, now_ns: u64, queue_lens: &[u32]) -> Result<ScaleAction, Error> {
        if now_ns < self.next_eval_ns {
            return Ok(ScaleAction::Hold);
        }
        let interval = self.policy.interval_ns;
        self.next_eval_ns = (now_ns / interval)
            .checked_add(1)
            .and_then(|k| k.checked_mul(interval))
            .ok_or(Error::Overflow { what: Quantity::AutoscalerEvaluationTime })?;
        if self.booting.is_some() {
            return Ok(ScaleAction::Hold);
        }
        let sum: u64 = queue_lens.iter().map(|&q| u64::from(q)).sum();
        let n = self.active as u64;
        if sum * 1000 > u64::from(self.policy.up_milli) * n && self.active < self.pods {
            let pod = self.active;
            let ready_ns =
                now_ns.checked_add(self.policy.startup_ns).ok_or(Error::Overflow { what: Quantity::PodReadyTime })?;
            self.booting = Some((pod, ready_ns));
            self.since_ns[pod] = Some(now_ns);
            return Ok(ScaleAction::Out { pod, ready_ns });
        }
        if sum * 1000 < u64::from(self.policy.down_milli) * n && self.active > self.policy.min_pods as usize {
            self.active -= 1;
            return Ok(ScaleAction::In { pod: self.active });
        }
        Ok(ScaleAction::Hold)
    }

    /// Ends pod `pod`'s provisioned time at `until_ns` (its drain end).
    pub fn release(&mut self, pod: usize, until_ns: u64) {
        if let Some(since) = self.since_ns.get_mut(pod).and_then(Option::take) {
            self.closed_pod_ns = self.closed_pod_ns.saturating_add(until_ns.saturating_sub(since));
        }
    }

    /// Provisioned pod-time up to `end_ns` (pods still provisioned count until `end_ns`), ns.
    pub fn pod_ns(&self, end_ns: u64) -> u64 {
        let open = self.since_ns.iter().flatten().map(|&s| end_ns.saturating_sub(s)).fold(0u64, u64::saturating_add);
        self.closed_pod_ns.saturating_add(open)
    }
}
