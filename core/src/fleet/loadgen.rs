//! The client as a load generator, as kubernetes-sigs/inference-perf v0.5.0 runs one
//! (`inference_perf/loadgen/load_generator.py`, `load_timer.py`, `config.py`; docs/MODEL.md,
//! "The load generator"). Sans-IO: it is told each completion, and says which request to send
//! when; it never reads a clock, the randomness is a seeded ChaCha8, and its client slots are
//! caller storage.
//!
//! * A stage sends exactly `int(rate x duration)` requests (`run_stage`, L734), or `num_requests`
//!   for a concurrent stage; it ends when every one of them has finished, observed by a poll every
//!   [`POLL_NS`] (L765-780); the next stage starts `interval` later (L1040).
//! * Send times: the stage's timer starts [`LEAD_NS`] after the stage starts (L727). `constant`:
//!   N exponential gaps normalised to sum to the duration (`ConstantLoadTimer`); `poisson`: per
//!   second a Poisson(rate) count, spread over that second by the constant timer
//!   (`PoissonLoadTimer`); `concurrent`: the constant timer with N requests over 1 s
//!   (`get_timer`, L356; the rate main.py sets) behind a cap of `concurrency_level`.
//! * Caps: at most `max_in_flight` (num_workers x worker_max_concurrency) requests in flight; a
//!   request over the cap is sent when a slot frees (the worker's semaphore), in order.
//! * The data index restarts at 0 every stage (`get_data()` anew, L740).
//! * A request whose client-side latency exceeds the timeout is timed out: its slot frees at
//!   send + timeout and it counts as finished for the stage; the server aborts it then
//!   ([`LoadGen::aborted`], vLLM's `finish_requests` with `FINISHED_ABORTED`).
//! * The gateway between client and router (not inference-perf): with
//!   [`LoadSpec::gateway_max_in_flight`] = G, a request sent while G requests are in flight fails
//!   at once, never reaching the router or a pod ([`LoadGen::gateway_full`],
//!   [`LoadGen::refused`]): Envoy's circuit breaker on the EPP's ext_proc cluster, whose
//!   `max_requests` defaults to 1024 concurrent gRPC streams, one per request for its whole life
//!   (docs/PUBLISHED.md, "The 2025 gateway's 1,024 streams").

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use super::fixmath::neg_ln_uniform_q32;
use super::{Error, Field};

/// Most stages.
pub const MAX_LOAD_STAGES: usize = 32;
/// Most client slots (in-flight cap or concurrency level).
pub const MAX_CLIENT_SLOTS: u64 = 1 << 20;
/// Longest stage, ms (2^40: about 34.8 years).
pub const MAX_STAGE_MS: u64 = 1 << 40;
/// Most requests of one stage.
pub const MAX_STAGE_REQUESTS: u64 = 1 << 32;
/// Time from a stage's start to its timer's origin: `start_time = time.perf_counter() + 1`
/// (load_generator.py @ v0.5.0 L727, "allow generation a second to begin populating the queue").
pub const LEAD_NS: u64 = 1_000_000_000;
/// Period of the stage's drain check (`await sleep(1)` in the wait loop, L779).
pub const POLL_NS: u64 = 1_000_000_000;
/// Default pause between stages, ms (`LoadConfig.interval = 1.0`, config.py @ v0.5.0 L418).
pub const DEFAULT_INTERVAL_MS: u64 = 1_000;
/// Default requests in flight per worker (`worker_max_concurrency = 100`, config.py L422).
pub const DEFAULT_WORKER_MAX_CONCURRENCY: u64 = 100;
const BUSY: u64 = u64::MAX;

/// How send times are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum LoadKind {
    /// A Poisson count per second, spread by the constant timer.
    Poisson,
    /// N exponential gaps normalised to the stage's duration.
    Constant,
    /// N requests behind a cap of the stage's concurrency (a closed loop once the cap binds).
    Concurrent,
}

/// One stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LoadStage {
    /// Rate, requests per second x 1000 (poisson, constant).
    pub rate_milli_per_s: u64,
    /// Length, ms (poisson, constant).
    pub duration_ms: u64,
    /// Clients (concurrent).
    pub concurrency: u64,
    /// Requests (concurrent).
    pub num_requests: u64,
}

impl LoadStage {
    /// Requests the stage sends: `int(rate * duration)`, or `num_requests` when concurrent (in
    /// integers, saturating at u64::MAX: [`LoadSpec::validate`] refuses more than
    /// [`MAX_STAGE_REQUESTS`]).
    pub fn requests(&self, kind: LoadKind) -> u64 {
        match kind {
            LoadKind::Concurrent => self.num_requests,
            _ => (self.rate_milli_per_s as u128 * self.duration_ms as u128 / 1_000_000).min(u64::MAX as u128) as u64,
        }
    }
}

/// The load generator's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LoadSpec {
    /// How send times are drawn.
    pub kind: LoadKind,
    /// The stages, in order.
    pub stages: [LoadStage; MAX_LOAD_STAGES],
    /// Entries of `stages` in use.
    pub stages_len: u32,
    /// Pause after a drained stage, ms.
    pub interval_ms: u64,
    /// Most requests in flight for rate stages (0: unlimited).
    pub max_in_flight: u64,
    /// A client's pause between a request's end and its next send, ms (concurrent; not in
    /// inference-perf, 0 there).
    pub think_ms: u64,
    /// Client timeout, ms (0: none).
    pub timeout_ms: u64,
    /// Most requests the gateway holds at once (0: no limit): a request sent while this many are
    /// in flight fails at its send ([`Status::Refused`]) and never reaches the router.
    pub gateway_max_in_flight: u64,
    /// Seed of the send-time draws.
    pub seed: u64,
    /// The data index restarts at 0 every stage (inference-perf's `get_data()` per stage);
    /// false: it continues over the run (a fresh prompt per request, as random data is).
    pub restart_data: bool,
}

impl LoadSpec {
    /// The stages in use.
    pub fn stages(&self) -> &[LoadStage] {
        &self.stages[..(self.stages_len as usize).min(MAX_LOAD_STAGES)]
    }

    /// The in-flight cap of `st` (u64::MAX: none).
    pub fn cap(&self, st: &LoadStage) -> u64 {
        let rate_cap = if self.max_in_flight == 0 { u64::MAX } else { self.max_in_flight };
        match self.kind {
            LoadKind::Concurrent => st.concurrency.min(rate_cap),
            _ => rate_cap,
        }
    }

    /// Client slots the generator needs (0 without a cap).
    pub fn slots_len(&self) -> usize {
        self.stages().iter().map(|st| self.cap(st)).filter(|&c| c != u64::MAX).max().unwrap_or(0) as usize
    }

    /// Checks the spec.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |expected| Err(Error::InvalidConfig { field: Field::Load, expected });
        if self.stages_len == 0 || self.stages_len as usize > MAX_LOAD_STAGES {
            return bad("between 1 and 32 stages");
        }
        for st in self.stages() {
            let ok = match self.kind {
                LoadKind::Concurrent => st.concurrency > 0 && st.num_requests > 0,
                _ => st.rate_milli_per_s > 0 && st.duration_ms > 0,
            };
            if !ok {
                return bad(
                    "every stage with rate > 0 and duration > 0 (concurrency_level and num_requests when concurrent)",
                );
            }
            if st.duration_ms > MAX_STAGE_MS || st.requests(self.kind) > MAX_STAGE_REQUESTS {
                return bad("stages of at most 2^40 ms and 2^32 requests");
            }
        }
        if self.max_in_flight > MAX_CLIENT_SLOTS || self.slots_len() as u64 > MAX_CLIENT_SLOTS {
            return bad("at most 1048576 requests in flight");
        }
        if self.interval_ms > 1 << 40 || self.think_ms > 1 << 40 || self.timeout_ms > 1 << 40 {
            return bad("interval, think time and timeout of at most 2^40 ms");
        }
        Ok(())
    }
}

/// One client slot (caller storage, [`LoadSpec::slots_len`] of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientSlot {
    /// The request in it while in flight.
    seq: u64,
    /// When it is free (u64::MAX: in flight).
    free_at_ns: u64,
    /// Deadline of the request in it (u64::MAX: none).
    deadline_ns: u64,
}

/// A request to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Send {
    /// Send time, ns (latency is measured from here).
    pub at_ns: u64,
    /// 0-based over the run: what [`LoadGen::completed`] is told.
    pub seq: u64,
    /// 0-based stage.
    pub stage: u32,
    /// Index into the data set: 0, 1, 2, ... from every stage's start (or over the run without
    /// [`LoadSpec::restart_data`]).
    pub data_index: u64,
}

/// What to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Send this request (it is in flight from now on).
    Send(Send),
    /// Every slot is taken or the stage drains: run the servers until a completion.
    AwaitCompletion,
    /// Every stage has ended.
    Done,
}

/// How a request ended for its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Status {
    /// Answered within the timeout.
    Ok,
    /// The client gave up at send + timeout.
    TimedOut,
    /// Refused at once, never run (conversation replay: prompt + output over the server's
    /// `max_model_len`; rate stages: the gateway's in-flight limit,
    /// [`LoadSpec::gateway_max_in_flight`]); a failure for the client, ended at its send.
    Refused,
}

/// The send times of `count` requests spread over [start, start + len]: exponential gaps
/// normalised to sum to `len` (inference-perf's `ConstantLoadTimer`). Two passes over the same
/// draws: `pass` replays what `total` summed.
struct Window {
    start_ns: u64,
    len_ns: u64,
    count: u64,
    k: u64,
    total: u128,
    acc: u128,
    pass: ChaCha8Rng,
}

impl Window {
    fn new(rng: &mut ChaCha8Rng, start_ns: u64, len_ns: u64, count: u64) -> Self {
        let pass = rng.clone();
        let total = (0..count).map(|_| neg_ln_uniform_q32(rng.next_u64()) as u128).sum();
        Window { start_ns, len_ns, count, k: 0, total, acc: 0, pass }
    }

    /// The next send time (None when all `count` are out).
    fn next(&mut self) -> Option<u64> {
        if self.k >= self.count {
            return None;
        }
        self.k += 1;
        self.acc += neg_ln_uniform_q32(self.pass.next_u64()) as u128;
        // all draws 0 (probability 2^-53 each): evenly spaced instead of 0/0
        let off = match self.total {
            0 => self.len_ns as u128 * self.k as u128 / self.count as u128,
            t => self.len_ns as u128 * self.acc / t,
        };
        Some(self.start_ns + off as u64)
    }

    fn end_ns(&self) -> u64 {
        self.start_ns + self.len_ns
    }
}

/// The load generator. `slots` is caller storage of [`LoadSpec::slots_len`] entries.
pub struct LoadGen<'a> {
    spec: LoadSpec,
    rng: ChaCha8Rng,
    slots: &'a mut [ClientSlot],
    stage: usize,
    stage_start_ns: u64,
    sent: u64,
    finished: u64,
    last_end_ns: u64,
    last_send_ns: u64,
    seq: u64,
    window: Window,
    /// The next scheduled send (None: the stage's timer has to draw it).
    sched_ns: Option<u64>,
    /// What [`Self::next_send`] planned (and in which slot), until [`Self::sent`].
    planned: Option<(Send, Option<usize>)>,
    done: bool,
}

impl<'a> LoadGen<'a> {
    /// A generator at the start of stage 0, at t = 0.
    pub fn new(spec: LoadSpec, slots: &'a mut [ClientSlot]) -> Result<Self, Error> {
        spec.validate()?;
        if slots.len() != spec.slots_len() {
            return Err(Error::BufferSize {
                buffer: super::Buffer::ClientSlots,
                expected: spec.slots_len(),
                got: slots.len(),
            });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let window = Window::new(&mut rng, 0, 0, 0);
        let mut g = LoadGen {
            spec,
            rng,
            slots,
            stage: 0,
            stage_start_ns: 0,
            sent: 0,
            finished: 0,
            last_end_ns: 0,
            last_send_ns: 0,
            seq: 0,
            window,
            sched_ns: None,
            planned: None,
            done: false,
        };
        g.start_stage(0);
        Ok(g)
    }

    /// The spec.
    pub fn spec(&self) -> &LoadSpec {
        &self.spec
    }

    fn cur(&self) -> LoadStage {
        self.spec.stages()[self.stage]
    }

    fn start_stage(&mut self, start_ns: u64) {
        let st = self.cur();
        self.stage_start_ns = start_ns;
        self.sent = 0;
        self.finished = 0;
        self.last_end_ns = start_ns;
        self.sched_ns = None;
        let origin = start_ns + LEAD_NS;
        let n = st.requests(self.spec.kind);
        self.window = match self.spec.kind {
            LoadKind::Constant => Window::new(&mut self.rng, origin, st.duration_ms * 1_000_000, n),
            LoadKind::Concurrent => Window::new(&mut self.rng, origin, 1_000_000_000, n),
            LoadKind::Poisson => Window::new(&mut self.rng, origin, 0, 0),
        };
        let cap = self.spec.cap(&st).min(self.slots.len() as u64) as usize;
        for s in &mut self.slots[..cap] {
            *s = ClientSlot { seq: 0, free_at_ns: start_ns, deadline_ns: BUSY };
        }
    }

    /// The next scheduled send of the stage (Poisson: drawing windows of one second).
    fn scheduled(&mut self) -> u64 {
        if let Some(t) = self.sched_ns {
            return t;
        }
        let t = loop {
            if let Some(t) = self.window.next() {
                break t;
            }
            // PoissonLoadTimer: a Poisson(rate) count for the next second; none: skip it
            let start = self.window.end_ns();
            let count = self.poisson_count();
            self.window = Window::new(&mut self.rng, start, 1_000_000_000, count);
        };
        self.sched_ns = Some(t);
        t
    }

    /// Arrivals of a rate-`r` Poisson process in one second (exponential gaps counted).
    fn poisson_count(&mut self) -> u64 {
        let mean_ns = 1_000_000_000_000u128 / self.cur().rate_milli_per_s as u128;
        let (mut t, mut n) = (0u128, 0u64);
        loop {
            t += (mean_ns * neg_ln_uniform_q32(self.rng.next_u64()) as u128) >> 32;
            if t > 1_000_000_000 {
                return n;
            }
            n += 1;
        }
    }

    fn cap_slots(&self) -> usize {
        (self.spec.cap(&self.cur()).min(self.slots.len() as u64)) as usize
    }

    /// What to do next. A [`Next::Send`] is a plan: the caller runs its servers up to its time,
    /// reports what completed meanwhile ([`Self::completed`], which may change the plan) and asks
    /// again, or sends it and says so ([`Self::sent`]).
    pub fn next_send(&mut self) -> Next {
        if self.done {
            return Next::Done;
        }
        let st = self.cur();
        let n = st.requests(self.spec.kind);
        if self.sent == n {
            if self.finished < n {
                return Next::AwaitCompletion;
            }
            // drained: the poll sees it, then the interval
            let waited = (self.last_end_ns - self.stage_start_ns).div_ceil(POLL_NS) * POLL_NS;
            if self.stage + 1 == self.spec.stages().len() {
                self.done = true;
                return Next::Done;
            }
            self.stage += 1;
            self.start_stage(self.stage_start_ns + waited + self.spec.interval_ms * 1_000_000);
            return self.next_send();
        }
        let sched = self.scheduled();
        let mut at = sched.max(self.last_send_ns);
        let cap = self.cap_slots();
        let mut slot = None;
        if cap > 0 {
            let think = if self.spec.kind == LoadKind::Concurrent { self.spec.think_ms * 1_000_000 } else { 0 };
            let Some((i, free)) = self.free_slot(cap) else { return Next::AwaitCompletion };
            at = at.max(free.saturating_add(if free > self.stage_start_ns { think } else { 0 }));
            slot = Some(i);
        }
        let data_index = if self.spec.restart_data { self.sent } else { self.seq };
        let send = Send { at_ns: at, seq: self.seq, stage: self.stage as u32, data_index };
        self.planned = Some((send, slot));
        Next::Send(send)
    }

    /// The planned send ([`Self::next_send`]) is sent: it is in flight from now on.
    pub fn sent(&mut self) {
        let Some((send, slot)) = self.planned.take() else { return };
        if let Some(i) = slot {
            let deadline = self.deadline(send.at_ns);
            self.slots[i] = ClientSlot { seq: send.seq, free_at_ns: BUSY, deadline_ns: deadline };
        }
        self.seq += 1;
        self.sent += 1;
        self.sched_ns = None;
        self.last_send_ns = send.at_ns;
    }

    /// Requests of the current stage sent and not yet ended (stages drain, so no earlier
    /// stage's request is in flight).
    pub fn in_flight(&self) -> u64 {
        self.sent - self.finished
    }

    /// The gateway holds [`LoadSpec::gateway_max_in_flight`] requests: the planned send would
    /// fail at once ([`Self::refused`]). Ask after every completion before the send was told.
    pub fn gateway_full(&self) -> bool {
        self.spec.gateway_max_in_flight > 0 && self.in_flight() >= self.spec.gateway_max_in_flight
    }

    /// The planned send ([`Self::next_send`]) is refused at its send time (the gateway's limit):
    /// sent and ended at once, a failure for its stage; its client slot frees at its send.
    pub fn refused(&mut self) -> Status {
        let Some((send, _)) = self.planned else { return Status::Refused };
        self.sent();
        self.ended(send.seq, send.at_ns);
        Status::Refused
    }

    /// The client's deadline of a request sent at `send_ns` (u64::MAX without a timeout): past
    /// it the client gives up, and the server aborts the request ([`Self::aborted`]).
    pub fn deadline(&self, send_ns: u64) -> u64 {
        match self.spec.timeout_ms {
            0 => BUSY,
            t => send_ns.saturating_add(t * 1_000_000),
        }
    }

    /// Request `seq`'s client clock starts at `send_ns` (None: not yet). Conversation replay
    /// hands a request to a client when the generator sends it, but sends it only when its
    /// session's previous turn has ended: until then it cannot time out, and its deadline (when
    /// its slot frees if it times out) counts from its actual send. Without a call the clock
    /// starts at the generator's send.
    pub fn started(&mut self, seq: u64, send_ns: Option<u64>) {
        let deadline = send_ns.map_or(BUSY, |t| self.deadline(t));
        if let Some(s) = self.slots.iter_mut().find(|s| s.free_at_ns == BUSY && s.seq == seq) {
            s.deadline_ns = deadline;
        }
    }

    /// The slot that frees first among the first `cap` (a slot in flight frees at its deadline).
    fn free_slot(&self, cap: usize) -> Option<(usize, u64)> {
        let when = |s: &ClientSlot| if s.free_at_ns == BUSY { s.deadline_ns } else { s.free_at_ns };
        let (i, s) = self.slots[..cap].iter().enumerate().min_by_key(|(i, s)| (when(s), *i))?;
        (when(s) != BUSY).then_some((i, when(s)))
    }

    /// Request `seq`, sent at `send_ns`, finished at `finish_ns` on its server: how it ended
    /// for the client. Every sent request must be reported once, here or to [`Self::aborted`].
    pub fn completed(&mut self, seq: u64, send_ns: u64, finish_ns: u64) -> Status {
        let deadline = self.deadline(send_ns);
        let (status, end) = if finish_ns > deadline { (Status::TimedOut, deadline) } else { (Status::Ok, finish_ns) };
        self.ended(seq, end);
        status
    }

    /// Request `seq`, sent at `send_ns`, still running at its deadline: the client gives up
    /// then and the server aborts it (the caller stops it there: `Fleet::abort`). Its slot
    /// frees at the deadline, which is when the client's next send may go.
    pub fn aborted(&mut self, seq: u64, send_ns: u64) -> Status {
        self.ended(seq, self.deadline(send_ns));
        Status::TimedOut
    }

    fn ended(&mut self, seq: u64, end: u64) {
        self.planned = None;
        if let Some(s) = self.slots.iter_mut().find(|s| s.free_at_ns == BUSY && s.seq == seq) {
            s.free_at_ns = end;
        }
        // a request of an earlier stage cannot be reported now: stages drain
        self.finished += 1;
        self.last_end_ns = self.last_end_ns.max(end);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    fn spec(kind: LoadKind, stages: &[LoadStage]) -> LoadSpec {
        let mut s = LoadSpec {
            kind,
            stages: [LoadStage::default(); MAX_LOAD_STAGES],
            stages_len: stages.len() as u32,
            interval_ms: DEFAULT_INTERVAL_MS,
            max_in_flight: 0,
            think_ms: 0,
            timeout_ms: 0,
            gateway_max_in_flight: 0,
            seed: 3,
            restart_data: true,
        };
        s.stages[..stages.len()].copy_from_slice(stages);
        s
    }

    fn rate(r: u64, ms: u64) -> LoadStage {
        LoadStage { rate_milli_per_s: r * 1000, duration_ms: ms, ..LoadStage::default() }
    }

    /// Runs `s` against a server that takes `service(seq)` ns: (send, finish, status) per request.
    fn run(s: LoadSpec, service: impl Fn(u64) -> u64) -> Vec<(Send, u64, Status)> {
        let mut slots = std::vec![ClientSlot::default(); s.slots_len()];
        let mut g = LoadGen::new(s, &mut slots).unwrap();
        let mut out = Vec::new();
        let mut pending: Vec<(u64, Send)> = Vec::new();
        loop {
            match g.next_send() {
                Next::Send(x) => {
                    g.sent();
                    pending.push((x.at_ns + service(x.seq), x))
                }
                Next::AwaitCompletion => {
                    pending.sort_by_key(|p| core::cmp::Reverse(p.0));
                    let (fin, x) = pending.pop().expect("a completion to wait for");
                    let st = g.completed(x.seq, x.at_ns, fin);
                    out.push((x, fin, st));
                }
                Next::Done => break,
            }
            // a FIFO server reports at once: report what finished before the next send
        }
        assert!(pending.is_empty());
        out.sort_by_key(|o| o.0.seq);
        out
    }

    #[test]
    fn constant_sends_int_rate_times_duration_within_the_window() {
        let out = run(spec(LoadKind::Constant, &[rate(3, 2_500)]), |_| 1);
        assert_eq!(out.len(), 7, "int(3 x 2.5)");
        assert!(out.iter().all(|o| (LEAD_NS..=LEAD_NS + 2_500_000_000).contains(&o.0.at_ns)));
        assert_eq!(out.last().unwrap().0.at_ns, LEAD_NS + 2_500_000_000, "gaps normalised to the duration");
    }

    #[test]
    fn stages_drain_then_wait_the_interval_and_restart_the_data() {
        let out = run(spec(LoadKind::Poisson, &[rate(10, 2_000), rate(5, 2_000)]), |_| 3_300_000_000);
        let first: Vec<_> = out.iter().filter(|o| o.0.stage == 0).collect();
        let second: Vec<_> = out.iter().filter(|o| o.0.stage == 1).collect();
        assert_eq!((first.len(), second.len()), (20, 10));
        let last_end = first.iter().map(|o| o.1).max().unwrap();
        let polled = last_end.div_ceil(POLL_NS) * POLL_NS;
        // the poll sees the drain at a whole second, then the interval, then the timer's lead
        assert!(second.iter().all(|o| o.0.at_ns > polled + 1_000_000_000 + LEAD_NS));
        assert!(second.iter().all(|o| o.0.at_ns >= last_end + 1_000_000_000));
        assert_eq!(second.iter().map(|o| o.0.data_index).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn a_cap_delays_sends_until_a_slot_frees() {
        let mut s = spec(LoadKind::Constant, &[rate(100, 1_000)]);
        s.max_in_flight = 4;
        let out = run(s, |_| 500_000_000);
        for o in &out {
            let in_flight = out.iter().filter(|p| p.0.at_ns <= o.0.at_ns && p.1 > o.0.at_ns).count();
            assert!(in_flight <= 4, "{in_flight} in flight at {}", o.0.at_ns);
        }
        // equal service times free the slots in send order: request k waits for request k - 4
        for k in 4..out.len() {
            assert!(out[k].0.at_ns >= out[k - 4].1);
        }
        assert_eq!(out[4].0.at_ns, out[0].1, "sent the moment the first slot frees");
    }

    #[test]
    fn concurrent_sends_on_completion_plus_think_time() {
        let mut s =
            spec(LoadKind::Concurrent, &[LoadStage { concurrency: 2, num_requests: 6, ..LoadStage::default() }]);
        s.think_ms = 7;
        let out = run(s, |seq| 3_000_000_000 + seq * 1_000_000);
        let ends: Vec<u64> = out.iter().map(|o| o.1).collect();
        for o in &out[2..] {
            // each later send is some earlier request's end + 7 ms
            assert!(ends.iter().any(|&e| e + 7_000_000 == o.0.at_ns), "{:?}", o.0);
        }
    }

    #[test]
    fn a_timeout_frees_the_slot_at_the_deadline_and_is_counted() {
        let mut s =
            spec(LoadKind::Concurrent, &[LoadStage { concurrency: 1, num_requests: 2, ..LoadStage::default() }]);
        s.timeout_ms = 1_000;
        let out = run(s, |seq| if seq == 0 { 5_000_000_000 } else { 1 });
        assert_eq!(out[0].2, Status::TimedOut);
        assert_eq!(out[1].2, Status::Ok);
        assert_eq!(out[1].0.at_ns, out[0].0.at_ns + 1_000_000_000, "sent when the first one gave up");
    }

    /// Runs `s` as a host does with a gateway: completions before a planned send are reported
    /// first, then the send goes or is refused. (send, end, status) per request by seq.
    fn run_gateway(s: LoadSpec, service: impl Fn(u64) -> u64) -> Vec<(Send, u64, Status)> {
        let mut slots = std::vec![ClientSlot::default(); s.slots_len()];
        let mut g = LoadGen::new(s, &mut slots).unwrap();
        let mut out = Vec::new();
        let mut pending: Vec<(u64, Send)> = Vec::new();
        loop {
            pending.sort_by_key(|p| core::cmp::Reverse(p.0));
            match g.next_send() {
                Next::Send(x) if pending.last().is_some_and(|p| p.0 <= x.at_ns) => {
                    let (fin, y) = pending.pop().unwrap();
                    out.push((y, fin, g.completed(y.seq, y.at_ns, fin)));
                }
                Next::Send(x) if g.gateway_full() => out.push((x, x.at_ns, g.refused())),
                Next::Send(x) => {
                    g.sent();
                    pending.push((x.at_ns + service(x.seq), x))
                }
                Next::AwaitCompletion => {
                    let (fin, y) = pending.pop().expect("a completion to wait for");
                    out.push((y, fin, g.completed(y.seq, y.at_ns, fin)));
                }
                Next::Done => break,
            }
        }
        assert!(pending.is_empty());
        out.sort_by_key(|o| o.0.seq);
        out
    }

    #[test]
    fn the_gateway_refuses_a_send_while_its_limit_is_in_flight() {
        // by hand: 10 sends within 1 s, each served in 5 s, a gateway of 4: the first 4 run, the
        // other 6 fail at their send; the stage ends with the 4 (each seq once)
        let mut s = spec(LoadKind::Constant, &[rate(10, 1_000), rate(10, 1_000)]);
        s.gateway_max_in_flight = 4;
        let out = run_gateway(s, |_| 5_000_000_000);
        assert_eq!(out.len(), 20);
        for stage in 0..2 {
            let st: Vec<_> = out.iter().filter(|o| o.0.stage == stage).collect();
            let status: Vec<Status> = st.iter().map(|o| o.2).collect();
            assert_eq!(&status[..4], &[Status::Ok; 4], "stage {stage}");
            assert_eq!(&status[4..], &[Status::Refused; 6], "stage {stage}");
            assert!(st[4..].iter().all(|o| o.1 == o.0.at_ns), "a refused request ends at its send");
        }
        // the second stage starts after the first's 4 ended (drained), with 0 in flight
        let end0 = out.iter().filter(|o| o.0.stage == 0).map(|o| o.1).max().unwrap();
        assert!(out.iter().filter(|o| o.0.stage == 1).all(|o| o.0.at_ns > end0));

        // the rule against its definition on uneven service times: refused exactly when the
        // requests accepted before it and not yet ended number the limit
        let mut s = spec(LoadKind::Poisson, &[rate(40, 3_000)]);
        s.gateway_max_in_flight = 7;
        let out = run_gateway(s, |seq| (seq * 7_919 % 13 + 1) * 150_000_000);
        let mut refused = 0;
        for (k, o) in out.iter().enumerate() {
            let busy = out[..k].iter().filter(|p| p.2 == Status::Ok && p.1 > o.0.at_ns).count();
            assert_eq!(o.2 == Status::Refused, busy >= 7, "request {k}: {busy} in flight");
            refused += usize::from(o.2 == Status::Refused);
        }
        assert!(refused > 0 && refused < out.len(), "{refused} of {} refused: both cases met", out.len());
    }

    #[test]
    fn bad_specs_are_refused() {
        assert!(spec(LoadKind::Poisson, &[]).validate().is_err());
        assert!(spec(LoadKind::Poisson, &[rate(0, 1_000)]).validate().is_err());
        assert!(spec(LoadKind::Concurrent, &[rate(1, 1_000)]).validate().is_err());
    }
}
