//! Autoscaling under the batched engine: llm-d's workload variant autoscaler (WVA) V1 saturation
//! analyzer (llm-d-incubation/workload-variant-autoscaler @ 36587f8c,
//! `internal/saturation/analyzer.go`: `analyzeVariant`, `shouldScaleUp`, `isScaleDownSafe`,
//! `CalculateSaturationTargets`), in integers (docs/MODEL.md, "Autoscaling under the batched
//! engine", is the specification):
//!
//! * Signals per routable pod, sampled at every arrival (after the pods ran up to it, before
//!   routing): KV usage = pinned blocks / capacity in parts per million, rounded down (vLLM's
//!   `kv_cache_usage_perc`), and the waiting queue (`num_requests_waiting`). WVA reads their peak
//!   over the last minute (`max_over_time[1m]`); here the peak over the samples of the current
//!   quarter-window bucket and the 4 before it (the last window, widened to whole quarters).
//! * A pod is saturated iff usage >= `kv_threshold` or waiting >= `queue_threshold`. Over the
//!   n non-saturated pods: scale up iff the mean spare KV (threshold - usage) < `kv_spare` or the
//!   mean spare queue (threshold - waiting) < `queue_spare` (n = 0: both means are 0); else
//!   scale down iff n >= 2 (`MinNonSaturatedReplicasForScaleDown`) and, the non-saturated load
//!   spread over n - 1 pods, both spares stay >= their triggers:
//!   `(threshold - trigger) (n - 1) >= sum of load`.
//! * No decision while a pod is pending: one booting (not ready yet) or one draining (scaled in,
//!   still finishing its requests).
//!
//! The pod bookkeeping (routable pods `0..active`, a pod booting until `startup_ns`, the cost in
//! pod-ns) is the FIFO scaler's ([`super::scale`]); what differs is the rule and the scale-in: a
//! pod scaled in takes no new request, drains its running and waiting requests, then drops its
//! cache ([`WvaState::drained`]).
//!
//! Memory: the per-pod state ([`WvaPod`], 56 bytes: the provisioning time and one peak per bucket
//! slot) lives in a caller buffer of one entry per pod (`BatchedBuffers::scale`, its length
//! [`super::batched::BatchedLayout::scale_len`]), empty when the run is not autoscaled: only
//! autoscaled runs pay for it, and for their own pod count, not for `MAX_PODS`.

use super::scale::{ScaleAction, ScalePolicy};
use crate::fleet::base::error::{Error, Field, Quantity};
use crate::fleet::base::load::PodLoad;

/// Parts per million: KV usage 1.0.
pub const PPM: u64 = 1_000_000;
/// Buckets a peak window is cut into: a bucket lasts `window_ns / WINDOW_BUCKETS`.
pub const WINDOW_BUCKETS: u64 = 4;
/// Buckets kept: the current one and the [`WINDOW_BUCKETS`] before it.
const SLOTS: usize = WINDOW_BUCKETS as usize + 1;
/// An empty bucket slot.
const NO_BUCKET: u64 = u64::MAX;

/// The saturation analyzer's thresholds and its peak window (WVA's `capacity-scaling-config`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WvaThresholds {
    /// Peak window, ns (> 0, a multiple of [`WINDOW_BUCKETS`]): a peak covers the samples of the
    /// current bucket of `window_ns / 4` and the 4 before it.
    pub window_ns: u64,
    /// `kvCacheThreshold`, parts per million.
    pub kv_threshold_ppm: u32,
    /// `queueLengthThreshold`, thousandths of a request.
    pub queue_threshold_milli: u64,
    /// `kvSpareTrigger`, parts per million.
    pub kv_spare_ppm: u32,
    /// `queueSpareTrigger`, thousandths of a request.
    pub queue_spare_milli: u64,
}

impl WvaThresholds {
    /// WVA's defaults: 0.80, 5, 0.10, 3, and a one-minute window.
    pub const DEFAULT: WvaThresholds = WvaThresholds {
        window_ns: 60_000_000_000,
        kv_threshold_ppm: 800_000,
        queue_threshold_milli: 5_000,
        kv_spare_ppm: 100_000,
        queue_spare_milli: 3_000,
    };

    /// Checks the thresholds.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field, expected| Err(Error::InvalidConfig { field, expected });
        if self.window_ns == 0 || !self.window_ns.is_multiple_of(WINDOW_BUCKETS) {
            return bad(Field::ScaleWindow, "a positive time, a whole number of 4 ns");
        }
        if u64::from(self.kv_threshold_ppm) > PPM {
            return bad(Field::ScaleKvThreshold, "a KV usage fraction between 0 and 1");
        }
        if u64::from(self.kv_spare_ppm) > PPM {
            return bad(Field::ScaleKvSpare, "a KV usage fraction between 0 and 1");
        }
        if self.queue_threshold_milli > 1_000_000_000 {
            return bad(Field::ScaleQueueThreshold, "a queue length between 0 and 1e6");
        }
        if self.queue_spare_milli > 1_000_000_000 {
            return bad(Field::ScaleQueueSpare, "a queue length between 0 and 1e6");
        }
        Ok(())
    }
}

/// One pod's signals (one sample, or a peak over samples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// KV usage, parts per million, rounded down.
    pub kv_ppm: u32,
    /// Requests waiting.
    pub waiting: u32,
}

impl Sample {
    /// The signals of a pod's load: floor(10^6 pinned / capacity) and its waiting queue.
    pub fn of(load: &PodLoad) -> Self {
        let cap = u64::from(load.kv_capacity_blocks.max(1));
        let used = u64::from(load.kv_used_blocks).min(cap);
        Sample { kv_ppm: (used * PPM / cap) as u32, waiting: load.waiting }
    }

    fn max(self, o: Sample) -> Sample {
        Sample { kv_ppm: self.kv_ppm.max(o.kv_ppm), waiting: self.waiting.max(o.waiting) }
    }
}

/// What the analyzer finds over the pods' peaks (`ModelSaturationAnalysis`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Pods analysed.
    pub pods: u32,
    /// Non-saturated pods n.
    pub non_saturated: u32,
    /// Sum over them of threshold - usage, ppm.
    pub spare_kv_ppm: u64,
    /// Sum over them of threshold - waiting, thousandths.
    pub spare_queue_milli: u64,
    /// `shouldScaleUp`.
    pub scale_up: bool,
    /// `isScaleDownSafe`.
    pub scale_down_safe: bool,
}

/// The saturation analysis of pods with peak signals `peaks` under `t` (exact integers).
pub fn analyze(t: &WvaThresholds, peaks: impl Iterator<Item = Sample>) -> Analysis {
    let kv_thr = u64::from(t.kv_threshold_ppm);
    let q_thr = t.queue_threshold_milli;
    let (mut pods, mut n, mut spare_kv, mut spare_q, mut load_kv, mut load_q) = (0u32, 0u64, 0u64, 0u64, 0u64, 0u64);
    for s in peaks {
        pods += 1;
        let kv = u64::from(s.kv_ppm);
        let q = u64::from(s.waiting) * 1000;
        if kv >= kv_thr || q >= q_thr {
            continue;
        }
        n += 1;
        spare_kv += kv_thr - kv;
        spare_q += q_thr - q;
        load_kv += kv;
        load_q += q;
    }
    let kv_trig = u64::from(t.kv_spare_ppm);
    let q_trig = t.queue_spare_milli;
    // mean spare < trigger, as sum < n trigger; with n = 0 both means are 0
    let scale_up = if n == 0 { kv_trig > 0 || q_trig > 0 } else { spare_kv < n * kv_trig || spare_q < n * q_trig };
    // threshold - sum(load) / (n - 1) >= trigger, as (threshold - trigger)(n - 1) >= sum(load)
    let safe = |thr: u64, trig: u64, load: u64| thr >= trig && (thr - trig) * (n - 1) >= load;
    let scale_down_safe = n >= 2 && safe(kv_thr, kv_trig, load_kv) && safe(q_thr, q_trig, load_q);
    Analysis {
        pods,
        non_saturated: n as u32,
        spare_kv_ppm: spare_kv,
        spare_queue_milli: spare_q,
        scale_up,
        scale_down_safe,
    }
}

/// One thing the scaler did, for the caller's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleEventKind {
    /// Decided to boot the pod (routable at the event's `ready_ns`).
    Out,
    /// The booted pod became routable.
    Ready,
    /// Decided to scale the pod in: it takes no new request and drains.
    In,
    /// The pod finished its last request; its cache was dropped.
    Drained,
}

/// A scaling event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleEvent {
    /// When, ns (a drain: its last finish).
    pub t_ns: u64,
    /// What.
    pub kind: ScaleEventKind,
    /// The pod.
    pub pod: u32,
    /// Routable pods after it.
    pub active: u32,
}

/// One pod's part of the scaler's state (caller storage: one per pod of an autoscaled fleet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WvaPod {
    /// When the pod was provisioned (`None`: not provisioned).
    since_ns: Option<u64>,
    /// The pod's peak over each slot's interval ([`WvaState`]'s `bucket`).
    peaks: [Sample; SLOTS],
}

/// The saturation scaler's state; the fleet drives it one arrival at a time. Its per-pod part is
/// the caller's buffer, one [`WvaPod`] per pod.
#[derive(Debug)]
pub struct WvaState<'a> {
    policy: ScalePolicy,
    t: WvaThresholds,
    active: usize,
    booting: Option<(usize, u64)>,
    /// The pod draining and when it was scaled in.
    draining: Option<(usize, u64)>,
    next_eval_ns: u64,
    closed_pod_ns: u64,
    /// The interval bucket each slot holds (`NO_BUCKET`: none).
    bucket: [u64; SLOTS],
    /// Per pod: when it was provisioned, its peak per slot.
    pods: &'a mut [WvaPod],
}

impl<'a> WvaState<'a> {
    /// The state at t = 0 for a fleet of `pods.len()` pods over the caller's `pods` (whatever
    /// it holds: it is reset here).
    pub fn new(policy: ScalePolicy, t: WvaThresholds, pods: &'a mut [WvaPod]) -> Result<Self, Error> {
        policy.validate_pods(pods.len())?;
        t.validate()?;
        pods.fill(WvaPod::default());
        for p in pods[..policy.initial_pods as usize].iter_mut() {
            p.since_ns = Some(0);
        }
        Ok(WvaState {
            policy,
            t,
            active: policy.initial_pods as usize,
            booting: None,
            draining: None,
            next_eval_ns: 0,
            closed_pod_ns: 0,
            bucket: [NO_BUCKET; SLOTS],
            pods,
        })
    }

    /// Routable pods `0..active`.
    pub fn active(&self) -> usize {
        self.active
    }

    /// The pod draining (scaled in, requests left), if any.
    pub fn draining(&self) -> Option<usize> {
        self.draining.map(|(p, _)| p)
    }

    /// Makes the booting pod routable when it is ready at `now_ns`; returns it then. A new pod:
    /// no samples of an earlier life count in its peaks.
    pub fn activate_ready(&mut self, now_ns: u64) -> Option<usize> {
        match self.booting {
            Some((pod, ready)) if ready <= now_ns => {
                self.booting = None;
                self.active = pod + 1;
                self.pods[pod].peaks = [Sample::default(); SLOTS];
                Some(pod)
            }
            _ => None,
        }
    }

    /// The draining pod finished its last request at `last_finish_ns`: it is no longer
    /// provisioned from then, or from its scale-in if it was idle already. Returns that time.
    pub fn drained(&mut self, last_finish_ns: u64) -> u64 {
        let Some((pod, decided_ns)) = self.draining.take() else { return last_finish_ns };
        let until_ns = last_finish_ns.max(decided_ns);
        if let Some(since) = self.pods.get_mut(pod).and_then(|p| p.since_ns.take()) {
            self.closed_pod_ns = self.closed_pod_ns.saturating_add(until_ns.saturating_sub(since));
        }
        until_ns
    }

    /// The length of a peak-window bucket, ns.
    fn bucket_ns(&self) -> u64 {
        self.t.window_ns / WINDOW_BUCKETS
    }

    /// Records the routable pods' signals at `now_ns` (`samples[p]` for pod p < active).
    pub fn sample(&mut self, now_ns: u64, samples: impl Iterator<Item = Sample>) {
        let b = now_ns / self.bucket_ns();
        let slot = (b % SLOTS as u64) as usize;
        if self.bucket[slot] != b {
            self.bucket[slot] = b;
            for p in self.pods.iter_mut() {
                p.peaks[slot] = Sample::default();
            }
        }
        for (pod, s) in self.pods[..self.active].iter_mut().zip(samples) {
            pod.peaks[slot] = pod.peaks[slot].max(s);
        }
    }

    /// Pod `p`'s peak over the window ending in the bucket of `now_ns` (that bucket and the 4
    /// before it).
    pub fn peak(&self, p: usize, now_ns: u64) -> Sample {
        let b = now_ns / self.bucket_ns();
        let from = b.saturating_sub(WINDOW_BUCKETS);
        (0..SLOTS)
            .filter(|&s| self.bucket[s] != NO_BUCKET && self.bucket[s] >= from && self.bucket[s] <= b)
            .fold(Sample::default(), |m, s| m.max(self.pods[p].peaks[s]))
    }

    /// Runs the rule at an arrival at `now_ns` (after [`Self::sample`]) and applies its decision.
    pub fn evaluate(&mut self, now_ns: u64) -> Result<ScaleAction, Error> {
        if now_ns < self.next_eval_ns {
            return Ok(ScaleAction::Hold);
        }
        let interval = self.policy.interval_ns;
        self.next_eval_ns = (now_ns / interval)
            .checked_add(1)
            .and_then(|k| k.checked_mul(interval))
            .ok_or(Error::Overflow { what: Quantity::AutoscalerEvaluationTime })?;
        if self.booting.is_some() || self.draining.is_some() {
            return Ok(ScaleAction::Hold);
        }
        let a = analyze(&self.t, (0..self.active).map(|p| self.peak(p, now_ns)));
        if a.scale_up {
            if self.active >= self.pods.len() {
                return Ok(ScaleAction::Hold);
            }
            let pod = self.active;
            let ready_ns =
                now_ns.checked_add(self.policy.startup_ns).ok_or(Error::Overflow { what: Quantity::PodReadyTime })?;
            self.booting = Some((pod, ready_ns));
            self.pods[pod].since_ns = Some(now_ns);
            return Ok(ScaleAction::Out { pod, ready_ns });
        }
        if a.scale_down_safe && self.active > self.policy.min_pods as usize {
            self.active -= 1;
            self.draining = Some((self.active, now_ns));
            return Ok(ScaleAction::In { pod: self.active });
        }
        Ok(ScaleAction::Hold)
    }

    /// Provisioned pod-time up to `end_ns`, ns (as [`super::scale::ScaleState::pod_ns`]; a pod
    /// scaled in counts until its drain ends).
    pub fn pod_ns(&self, end_ns: u64) -> u64 {
        let open = self
            .pods
            .iter()
            .filter_map(|p| p.since_ns)
            .map(|s| end_ns.saturating_sub(s))
            .fold(0u64, u64::saturating_add);
        self.closed_pod_ns.saturating_add(open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(kv_ppm: u32, waiting: u32) -> Sample {
        Sample { kv_ppm, waiting }
    }

    fn run(peaks: &[Sample]) -> Analysis {
        analyze(&WvaThresholds::DEFAULT, peaks.iter().copied())
    }

    #[test]
    fn usage_is_floor_ppm_of_pinned_over_capacity() {
        let l = PodLoad { kv_used_blocks: 1, kv_capacity_blocks: 3, waiting: 7, ..PodLoad::default() };
        assert_eq!(Sample::of(&l), s(333_333, 7));
        let full = PodLoad { kv_used_blocks: 4, kv_capacity_blocks: 5, ..PodLoad::default() };
        assert_eq!(Sample::of(&full).kv_ppm, 800_000, "4/5 is exactly the threshold");
    }

    #[test]
    fn idle_pods_scale_down_and_not_up() {
        // 3 idle pods: spare kv 0.8 each, spare queue 5 each; after removal load 0 stays 0
        let a = run(&[s(0, 0), s(0, 0), s(0, 0)]);
        assert_eq!(a.non_saturated, 3);
        assert_eq!(a.spare_kv_ppm, 2_400_000);
        assert_eq!(a.spare_queue_milli, 15_000);
        assert!(!a.scale_up);
        assert!(a.scale_down_safe);
    }

    #[test]
    fn one_non_saturated_pod_never_scales_down() {
        let a = run(&[s(0, 0)]);
        assert!(!a.scale_up && !a.scale_down_safe, "MinNonSaturatedReplicasForScaleDown = 2");
    }

    #[test]
    fn all_saturated_scales_up() {
        // kv 0.80 >= 0.80 saturates; waiting 5 >= 5 saturates
        let a = run(&[s(800_000, 0), s(0, 5)]);
        assert_eq!(a.non_saturated, 0);
        assert!(a.scale_up);
        assert!(!a.scale_down_safe);
    }

    #[test]
    fn queue_spare_trigger() {
        // waiting 2 and 3: spare 3 + 2 = 5 < 2 x 3 -> up
        let a = run(&[s(0, 2), s(0, 3)]);
        assert_eq!(a.spare_queue_milli, 5_000);
        assert!(a.scale_up);
        // waiting 2 and 2: spare 6, not < 6 -> no up; down: (5 - 3)(2 - 1) = 2 >= 4? no
        let a = run(&[s(0, 2), s(0, 2)]);
        assert!(!a.scale_up);
        assert!(!a.scale_down_safe);
    }

    #[test]
    fn kv_spare_trigger_and_its_boundary() {
        // usage 0.70 and 0.70: spare 0.10 + 0.10 = 0.20, not < 0.20 -> no up
        assert!(!run(&[s(700_000, 0), s(700_000, 0)]).scale_up);
        // usage 0.70 and 0.700001: spare 0.199999 < 0.20 -> up
        assert!(run(&[s(700_000, 0), s(700_001, 0)]).scale_up);
    }

    #[test]
    fn scale_down_boundary_hand_computed() {
        // 3 pods with usage 0.35 each: load 1.05 over 2 pods = 0.525, spare 0.275 >= 0.10 (kv
        // safe); (0.80 - 0.10)(3 - 1) = 1.40 >= 1.05. Queue: waiting 1 each, (5 - 3)(2) = 4 >= 3.
        let a = run(&[s(350_000, 1), s(350_000, 1), s(350_000, 1)]);
        assert!(!a.scale_up && a.scale_down_safe);
        // waiting 1, 1, 2 -> queue load 4 <= 4: still safe; 2, 1, 2 -> 5 > 4: not safe
        assert!(run(&[s(350_000, 1), s(350_000, 1), s(350_000, 2)]).scale_down_safe);
        assert!(!run(&[s(350_000, 2), s(350_000, 1), s(350_000, 2)]).scale_down_safe);
        // kv: 2 pods at 0.35: load 0.70 <= (0.70)(1) -> safe; 0.35 + 0.350001 -> not safe
        assert!(run(&[s(350_000, 0), s(350_000, 0)]).scale_down_safe);
        assert!(!run(&[s(350_000, 0), s(350_001, 0)]).scale_down_safe);
    }

    #[test]
    fn saturated_pods_are_left_out_of_the_means() {
        // pod 0 saturated (waiting 9); pods 1, 2 idle: spare 1.6 / 2 = 0.8, no up; down safe
        let a = run(&[s(0, 9), s(0, 0), s(0, 0)]);
        assert_eq!((a.pods, a.non_saturated), (3, 2));
        assert!(!a.scale_up && a.scale_down_safe);
    }

    fn policy(min: u32, initial: u32) -> ScalePolicy {
        ScalePolicy {
            min_pods: min,
            initial_pods: initial,
            interval_ns: 10,
            up_milli: 4_000,
            down_milli: 500,
            startup_ns: 5,
        }
    }

    #[test]
    fn peak_window_and_pending_pods() {
        // window 8 ns: buckets of 2 ns; a peak covers the current bucket and the 4 before it
        let t = WvaThresholds { window_ns: 8, ..WvaThresholds::DEFAULT };
        let mut buf = [WvaPod::default(); 3];
        let mut w = WvaState::new(policy(1, 2), t, &mut buf).unwrap();
        // bucket 0: pod 0 waits 6 (saturated), then (bucket 1) empties
        w.sample(0, [s(0, 6), s(0, 0)].into_iter());
        w.sample(3, [s(0, 0), s(0, 0)].into_iter());
        assert_eq!(w.peak(0, 3), s(0, 6));
        // the evaluation at 3: pod 0's peak saturated, pod 1 idle: spare queue 5 >= 3, kv 0.8:
        // no up; n = 1: no down
        assert_eq!(w.evaluate(3).unwrap(), ScaleAction::Hold);
        // bucket 6 (t = 12): buckets 2..=6 no longer hold bucket 0's peak
        w.sample(12, [s(0, 0), s(0, 5)].into_iter());
        assert_eq!(w.peak(0, 12), s(0, 0));
        assert_eq!(w.peak(0, 9), s(0, 6), "at 9 (bucket 4) bucket 0 is still in the window");
        // pod 1 saturated, pod 0 idle: n = 1, spare queue 5, kv 0.8: hold
        assert_eq!(w.evaluate(12).unwrap(), ScaleAction::Hold);
        // bucket 10 (t = 20): both saturated -> up: pod 2 boots, ready at 25
        w.sample(20, [s(0, 5), s(800_000, 0)].into_iter());
        assert_eq!(w.evaluate(20).unwrap(), ScaleAction::Out { pod: 2, ready_ns: 25 });
        // pending: the evaluation at 30 holds, whatever the signals
        w.sample(30, [s(0, 9), s(0, 9)].into_iter());
        assert_eq!(w.evaluate(30).unwrap(), ScaleAction::Hold);
        assert_eq!(w.activate_ready(30), Some(2));
        assert_eq!(w.active(), 3);
        // t = 34 (bucket 17): all idle, but bucket 15 (in the window) is saturated for pods 0, 1;
        // the new pod 2 has no earlier samples -> n = 1: hold
        w.sample(34, [s(0, 0); 3].into_iter());
        // not evaluated before 40 (interval 10)
        assert_eq!(w.evaluate(34).unwrap(), ScaleAction::Hold);
        w.sample(40, [s(0, 0); 3].into_iter());
        assert_eq!(w.peak(0, 40), s(0, 0), "bucket 15 left the window (buckets 16..=20)");
        assert_eq!(w.evaluate(40).unwrap(), ScaleAction::In { pod: 2 });
        assert_eq!((w.active(), w.draining()), (2, Some(2)));
        // draining: no decision
        w.sample(50, [s(0, 0); 2].into_iter());
        assert_eq!(w.evaluate(50).unwrap(), ScaleAction::Hold);
        assert_eq!(w.drained(55), 55);
        w.sample(60, [s(0, 0); 2].into_iter());
        assert_eq!(w.evaluate(60).unwrap(), ScaleAction::In { pod: 1 });
        // min 1: pod 0 stays
        assert_eq!(w.drained(61), 61);
        w.sample(70, [s(0, 0); 1].into_iter());
        assert_eq!(w.evaluate(70).unwrap(), ScaleAction::Hold);
        // cost: pod 0 from 0; pod 1 from 0 to 61; pod 2 from 20 to 55
        assert_eq!(w.pod_ns(100), 100 + 61 + 35);
    }

    #[test]
    fn bad_windows_are_refused() {
        let t = |window_ns| WvaThresholds { window_ns, ..WvaThresholds::DEFAULT };
        assert!(t(4).validate().is_ok());
        assert!(t(60_000_000_000).validate().is_ok());
        for bad in [t(0), t(6), t(15)] {
            assert!(matches!(bad.validate(), Err(Error::InvalidConfig { field: Field::ScaleWindow, .. })));
        }
        let kv = WvaThresholds { kv_threshold_ppm: 1_000_001, ..WvaThresholds::DEFAULT };
        assert!(matches!(kv.validate(), Err(Error::InvalidConfig { field: Field::ScaleKvThreshold, .. })));
    }
}
