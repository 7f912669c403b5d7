//! A crash-injecting harness: a scripted model, simulated tools that count every call they receive
//! ([`SimWorld`]), and a [`CrashPlan`] that stops the run at the n-th crash point, deterministically.
//!
//! Crash points ([`CrashPoint`]) are passed in this order around each record and tool call:
//! `BeforeAppend`, `AfterAppend` for every record, and `BeforeTool`, `ToolApplied` (the tool changed
//! the world, its result has not been returned, let alone recorded) for every tool call. A crash
//! returns an error from the journal / the tools, exactly where a power cut or `kill -9` would stop
//! the process; nothing after it runs. A "reboot" reopens the RAM log ([`RamLog::open`]), replays
//! it and drives the task on ([`boot`]).
//!
//! [`run_with_crashes`] runs one task through a sequence of boots, the i-th crashing at its
//! `crashes[i]`-th point, then finishes it and checks: completed, every idempotent key applied
//! exactly once, every non-idempotent step applied exactly once, every read-only step answered,
//! and replay of the log equals the live state. [`enumerate_crash_points`] does that for every
//! crash point of a task (and, optionally, every pair of points across two boots).
//!
//! Everything is fixed-size and `no_std`: the firmware demo runs the same enumeration.

use core::cell::Cell;

use super::crc::Crc32c;
use super::drive::{
    BufferedJournal, CommitError, DriveError, Effects, Journal, LogJournal, ModelReply, Stop, ToolOutcome, ToolOutput,
    commit, drive, review,
};
use super::error::StorageError;
use super::machine::{Phase, TaskState};
use super::record::{
    Args, Decision, Event, Key, Kind, ModelText, Record, ResultText, TaskId, ToolCall, ToolClass, ToolName,
};
use super::storage::{LogStorage, RamError, RamLog, replay, replay_prefix};

/// A place where the harness can crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CrashPoint {
    /// About to append record `seq`.
    BeforeAppend {
        /// Sequence number of the record.
        seq: u32,
        /// Its kind.
        kind: Kind,
    },
    /// Record `seq` is durable; nothing after it ran.
    AfterAppend {
        /// Sequence number.
        seq: u32,
        /// Kind.
        kind: Kind,
    },
    /// About to send a tool call (its intent is durable).
    BeforeTool {
        /// Step.
        step: u16,
    },
    /// The tool applied the call; the runner has not seen the result (the "window").
    ToolApplied {
        /// Step.
        step: u16,
    },
}

impl CrashPoint {
    /// Whether the crash lands in the window between "tool call sent" and "result recorded".
    pub fn in_window(&self) -> bool {
        matches!(self, CrashPoint::ToolApplied { .. } | CrashPoint::BeforeAppend { kind: Kind::ToolResult, .. })
    }
}

/// A crash that happened: which point, and its index in the boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Crash {
    /// The point.
    pub point: CrashPoint,
    /// Its 0-based index among the points passed in this boot.
    pub index: u32,
}

/// Counts crash points and crashes at the chosen one. Shared (by `&`) between the journal and the
/// tools, so it uses `Cell`s.
#[derive(Debug, Default)]
pub struct CrashPlan {
    crash_at: Cell<Option<u32>>,
    passed: Cell<u32>,
    crashed: Cell<Option<Crash>>,
}

impl CrashPlan {
    /// A plan that never crashes (use it to count the points).
    pub const fn never() -> Self {
        CrashPlan { crash_at: Cell::new(None), passed: Cell::new(0), crashed: Cell::new(None) }
    }
    /// A plan that crashes at the `n`-th point (0-based).
    pub const fn at(n: u32) -> Self {
        CrashPlan { crash_at: Cell::new(Some(n)), passed: Cell::new(0), crashed: Cell::new(None) }
    }
    /// Passes a point: `Err` if this is the chosen one (or a crash already happened).
    pub fn point(&self, point: CrashPoint) -> Result<(), Crash> {
        if let Some(c) = self.crashed.get() {
            return Err(c);
        }
        let index = self.passed.get();
        self.passed.set(index + 1);
        if self.crash_at.get() == Some(index) {
            let c = Crash { point, index };
            self.crashed.set(Some(c));
            return Err(c);
        }
        Ok(())
    }
    /// Points passed so far.
    pub fn passed(&self) -> u32 {
        self.passed.get()
    }
    /// The crash, if it happened.
    pub fn crashed(&self) -> Option<Crash> {
        self.crashed.get()
    }
}

/// A [`Journal`] that passes crash points around each append.
#[derive(Debug)]
pub struct CrashJournal<'p, J> {
    /// The journal it wraps.
    pub inner: J,
    /// The plan.
    pub plan: &'p CrashPlan,
}

/// An error from a [`CrashJournal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrashJournalError<E> {
    /// A planned crash.
    Crash(Crash),
    /// The inner journal failed.
    Inner(E),
}

impl<J: Journal> Journal for CrashJournal<'_, J> {
    type Error = CrashJournalError<J::Error>;
    fn append(&mut self, rec: &Record) -> Result<(), Self::Error> {
        let (seq, kind) = (rec.seq, rec.kind());
        self.plan.point(CrashPoint::BeforeAppend { seq, kind }).map_err(CrashJournalError::Crash)?;
        self.inner.append(rec).map_err(CrashJournalError::Inner)?;
        self.plan.point(CrashPoint::AfterAppend { seq, kind }).map_err(CrashJournalError::Crash)
    }
}

/// A tool the script may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptTool<'a> {
    /// Tool name (`lookup`, `payment`, `send_email`, ...).
    pub name: &'a str,
    /// Its class.
    pub class: ToolClass,
    /// Arguments.
    pub args: &'a str,
}

/// One scripted step: the model's text and the tool call it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptStep<'a> {
    /// Model response.
    pub text: &'a str,
    /// Tool call, if any.
    pub tool: Option<ScriptTool<'a>>,
}

/// The spec digest the harness records: CRC-32C over the script.
pub fn script_digest(script: &[ScriptStep<'_>]) -> u32 {
    let mut c = Crc32c::new();
    for s in script {
        c = c.update(s.text.as_bytes()).update(&[0]);
        if let Some(t) = s.tool {
            c = c.update(t.name.as_bytes()).update(&[t.class as u8]).update(t.args.as_bytes());
        }
        c = c.update(&[0xFF]);
    }
    c.finish()
}

/// One call received by a simulated tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldCall {
    /// Task.
    pub task: TaskId,
    /// Step.
    pub step: u16,
    /// Tool class.
    pub class: ToolClass,
    /// Key passed (idempotent tools).
    pub key: Option<Key>,
    /// Whether the call changed the world (false for reads and deduplicated calls).
    pub applied: bool,
}

/// The simulated tools' world: every call received, in order (at most `N`).
#[derive(Debug, Default)]
pub struct SimWorld<const N: usize> {
    /// The calls.
    pub calls: heapless::Vec<WorldCall, N>,
    /// Set when more than `N` calls arrived (the report is then incomplete: a violation).
    pub overflow: bool,
}

impl<const N: usize> SimWorld<N> {
    /// An empty world.
    pub const fn new() -> Self {
        SimWorld { calls: heapless::Vec::new(), overflow: false }
    }

    /// Receives a call: idempotent calls are deduplicated by key, non-idempotent ones always apply,
    /// read-only ones never change anything. Returns whether it applied.
    pub fn receive(&mut self, task: &TaskId, step: u16, class: ToolClass, key: Option<&Key>) -> bool {
        let applied = match class {
            ToolClass::ReadOnly => false,
            ToolClass::NonIdempotent => true,
            ToolClass::Idempotent => !self.calls.iter().any(|c| c.applied && c.key.as_ref() == key && key.is_some()),
        };
        let call = WorldCall { task: task.clone(), step, class, key: key.cloned(), applied };
        if self.calls.push(call).is_err() {
            self.overflow = true;
        }
        applied
    }

    /// Calls of `task` at `step` that applied.
    pub fn applied(&self, task: &TaskId, step: u16) -> usize {
        self.calls.iter().filter(|c| c.applied && c.task == *task && c.step == step).count()
    }

    /// Calls of `task` at `step` received (applied or not).
    pub fn received(&self, task: &TaskId, step: u16) -> usize {
        self.calls.iter().filter(|c| c.task == *task && c.step == step).count()
    }
}

/// [`Effects`] over a script and a [`SimWorld`], passing crash points around each tool call.
#[derive(Debug)]
pub struct SimEffects<'a, 's, const N: usize> {
    /// The script.
    pub script: &'s [ScriptStep<'s>],
    /// The world.
    pub world: &'a mut SimWorld<N>,
    /// The crash plan.
    pub plan: &'a CrashPlan,
    /// Ask for a suspension before this step starts.
    pub suspend_before_step: Option<u16>,
}

/// Builds the [`ToolCall`] of a scripted tool (None if a field exceeds its limit).
pub fn tool_call(t: &ScriptTool<'_>) -> Option<ToolCall> {
    Some(ToolCall {
        tool: ToolName::try_from(t.name).ok()?,
        class: t.class,
        args: Args::from_slice(t.args.as_bytes()).ok()?,
    })
}

impl<const N: usize> Effects for SimEffects<'_, '_, N> {
    type Error = Crash;

    fn model(&mut self, _task: &TaskId, step: u16) -> Result<ModelReply, Crash> {
        let s = self.script.get(step as usize);
        let mut text = ModelText::new();
        let _ = text.push_str(s.map_or("", |s| s.text));
        Ok(ModelReply { text, call: s.and_then(|s| s.tool.as_ref()).and_then(tool_call), answer: false })
    }

    fn tool(
        &mut self,
        task: &TaskId,
        step: u16,
        call: &ToolCall,
        key: Option<&Key>,
        _fence: u64,
    ) -> Result<ToolOutcome, Crash> {
        self.plan.point(CrashPoint::BeforeTool { step })?;
        let applied = self.world.receive(task, step, call.class, key);
        self.plan.point(CrashPoint::ToolApplied { step })?;
        let mut output = ResultText::new();
        let _ = output.push_str(if applied { "applied" } else { "ok" });
        Ok(ToolOutcome::Done(ToolOutput { ok: true, output }))
    }

    fn suspend_requested(&mut self, _task: &TaskId, step: u16) -> Result<bool, Crash> {
        Ok(self.suspend_before_step == Some(step))
    }
}

/// A broken guarantee found by the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Violation {
    /// A side effect applied more than once at this step.
    Duplicate {
        /// Step.
        step: u16,
    },
    /// A step's side effect never applied (or a read never answered).
    Missing {
        /// Step.
        step: u16,
    },
    /// The task did not complete.
    NotCompleted,
    /// Replaying the log does not give the live state.
    ReplayMismatch,
    /// The log could not be read back or folded.
    BadLog,
    /// The world overflowed its capacity.
    WorldOverflow,
    /// More boots than allowed without finishing.
    TooManyBoots,
}

/// What one [`run_with_crashes`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RunReport {
    /// Crashes that happened.
    pub crashes: u32,
    /// Crashes inside the tool window.
    pub window_crashes: u32,
    /// Steps that went to review.
    pub reviews: u32,
    /// Tool calls deduplicated by key (received, not applied).
    pub deduplicated: u32,
    /// Records in the final log.
    pub records: u32,
}

/// Boots the task once: recover the log in `buf`, replay, create the task if its `Created` record
/// is missing, and drive it; reviews a paused step as an honest human would (mark done if the world
/// shows the call applied, otherwise retry). Returns the stop reason or the crash.
pub fn boot<const N: usize>(
    buf: &mut [u8],
    task: &TaskId,
    script: &[ScriptStep<'_>],
    world: &mut SimWorld<N>,
    plan: &CrashPlan,
    reviews: &mut u32,
    batch: bool,
) -> Result<(Stop, TaskState), BootError> {
    let mut log = RamLog::open(buf);
    let state = replay(&mut log, task).map_err(|_| BootError::Violation(Violation::BadLog))?;
    let journal = CrashJournal { inner: LogJournal(log), plan };
    if batch {
        boot_with(BufferedJournal::<_, BATCH>::new(journal), state, task, script, world, plan, reviews)
    } else {
        boot_with(journal, state, task, script, world, plan, reviews)
    }
}

/// Records a [`BufferedJournal`] holds in batch mode.
pub const BATCH: usize = 8;

type HarnessJournalError = CrashJournalError<StorageError<RamError>>;

fn boot_with<J: Journal<Error = HarnessJournalError>, const N: usize>(
    mut journal: J,
    mut state: TaskState,
    task: &TaskId,
    script: &[ScriptStep<'_>],
    world: &mut SimWorld<N>,
    plan: &CrashPlan,
    reviews: &mut u32,
) -> Result<(Stop, TaskState), BootError> {
    if !state.created {
        let steps = script.len() as u16;
        let created = Event::Created { spec_digest: script_digest(script), steps };
        commit(&mut state, &mut journal, created).map_err(commit_err)?;
        journal.sync().map_err(|e| commit_err(CommitError::Journal(e)))?;
    }
    loop {
        let mut fx = SimEffects { script, world: &mut *world, plan, suspend_before_step: None };
        match drive(&mut state, &mut journal, &mut fx) {
            Ok(Stop::NeedsReview { step }) => {
                *reviews += 1;
                let decision = if world.applied(task, step) > 0 { Decision::MarkDone } else { Decision::Retry };
                review(&mut state, &mut journal, step, decision).map_err(commit_err)?;
            }
            Ok(stop) => return Ok((stop, state)),
            Err(DriveError::Effects(c)) | Err(DriveError::Journal(CrashJournalError::Crash(c))) => {
                return Err(BootError::Crashed(c));
            }
            Err(_) => return Err(BootError::Violation(Violation::BadLog)),
        }
    }
}

fn commit_err(e: CommitError<HarnessJournalError>) -> BootError {
    match e {
        CommitError::Journal(CrashJournalError::Crash(c)) => BootError::Crashed(c),
        _ => BootError::Violation(Violation::BadLog),
    }
}

/// How a [`boot`] ended abnormally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BootError {
    /// A planned crash.
    Crashed(Crash),
    /// A guarantee broke.
    Violation(Violation),
}

/// Most boots [`run_with_crashes`] allows.
pub const MAX_BOOTS: usize = 16;

/// Runs `task` from an empty log in `buf` and an empty world: boot `i` crashes at its
/// `crashes[i]`-th point (a crash index past the boot's last point means "no crash"), then boots
/// without crashes until it stops, and checks the guarantees.
pub fn run_with_crashes<const N: usize>(
    buf: &mut [u8],
    task: &TaskId,
    script: &[ScriptStep<'_>],
    world: &mut SimWorld<N>,
    crashes: &[u32],
    batch: bool,
) -> Result<RunReport, Violation> {
    let _ = RamLog::format(&mut *buf);
    let mut report = RunReport::default();
    let mut reviews = 0u32;
    let mut boots = 0usize;
    let mut plans = crashes.iter();
    let live = loop {
        boots += 1;
        if boots > MAX_BOOTS {
            return Err(Violation::TooManyBoots);
        }
        let plan = match plans.next() {
            Some(&n) => CrashPlan::at(n),
            None => CrashPlan::never(),
        };
        match boot(&mut *buf, task, script, world, &plan, &mut reviews, batch) {
            Ok((Stop::Completed, state)) => break state,
            Ok(_) => return Err(Violation::NotCompleted),
            Err(BootError::Crashed(_)) => {
                report.crashes += 1;
                // In the window: the tool saw the call, the durable log has no result for it.
                let mut log = RamLog::open(&mut *buf);
                let st = replay(&mut log, task).map_err(|_| Violation::BadLog)?;
                if matches!(st.phase, Phase::InFlight { .. }) && world.received(task, st.step) > 0 {
                    report.window_crashes += 1;
                }
            }
            Err(BootError::Violation(v)) => return Err(v),
        }
    };
    report.reviews = reviews;
    check_world(task, script, world)?;
    report.deduplicated = world.calls.iter().filter(|c| c.class == ToolClass::Idempotent && !c.applied).count() as u32;
    // Replay == live, and every prefix folds.
    let mut log = RamLog::open(buf);
    let replayed = replay(&mut log, task).map_err(|_| Violation::BadLog)?;
    if replayed != live {
        return Err(Violation::ReplayMismatch);
    }
    report.records = live.next_seq;
    for n in 0..live.next_seq as usize {
        let p = replay_prefix(&mut log, task, n).map_err(|_| Violation::BadLog)?;
        if p.next_seq as usize != n {
            return Err(Violation::BadLog);
        }
    }
    let _ = log.free();
    Ok(report)
}

/// Checks the world against the script: each side effect exactly once, each read answered.
pub fn check_world<const N: usize>(
    task: &TaskId,
    script: &[ScriptStep<'_>],
    world: &SimWorld<N>,
) -> Result<(), Violation> {
    if world.overflow {
        return Err(Violation::WorldOverflow);
    }
    for (i, s) in script.iter().enumerate() {
        let step = i as u16;
        let Some(t) = s.tool else { continue };
        match t.class {
            ToolClass::ReadOnly => {
                if world.received(task, step) == 0 {
                    return Err(Violation::Missing { step });
                }
            }
            ToolClass::Idempotent | ToolClass::NonIdempotent => match world.applied(task, step) {
                0 => return Err(Violation::Missing { step }),
                1 => {}
                _ => return Err(Violation::Duplicate { step }),
            },
        }
    }
    Ok(())
}

/// The result of [`enumerate_crash_points`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CrashReport {
    /// Crash points of a crash-free run (each was crashed at).
    pub points: u32,
    /// Runs executed (points, plus pairs when enabled).
    pub runs: u32,
    /// Runs whose first crash landed in the tool window.
    pub window: u32,
    /// Steps sent to review, over all runs.
    pub reviews: u32,
    /// Idempotent calls deduplicated by key, over all runs.
    pub deduplicated: u32,
    /// Runs that broke a guarantee.
    pub violations: u32,
    /// The first violation: (crash indexes of boot 1 and 2, what).
    pub first_violation: Option<(u32, u32, Violation)>,
}

/// Crashes `task` at every crash point of a crash-free run, recovers, finishes and checks each.
/// With `pairs`, also crashes the recovery boot at every one of its points (quadratic). With
/// `batch`, the runner writes through a [`BufferedJournal`] (records durable only at `sync`, as
/// the SQLite binding commits them), so a crash also loses the unsynced records.
/// `world` is scratch space (cleared before each run).
pub fn enumerate_crash_points<const N: usize>(
    buf: &mut [u8],
    task: &TaskId,
    script: &[ScriptStep<'_>],
    world: &mut SimWorld<N>,
    pairs: bool,
    batch: bool,
) -> CrashReport {
    let mut rep = CrashReport::default();
    // Count the points of a crash-free run.
    *world = SimWorld::new();
    let _ = RamLog::format(&mut *buf);
    let plan = CrashPlan::never();
    let mut reviews = 0;
    let _ = boot(&mut *buf, task, script, world, &plan, &mut reviews, batch);
    rep.points = plan.passed();
    let record = |rep: &mut CrashReport, a: u32, b: u32, r: Result<RunReport, Violation>| {
        rep.runs += 1;
        match r {
            Ok(r) => {
                rep.window += u32::from(r.window_crashes > 0);
                rep.reviews += r.reviews;
                rep.deduplicated += r.deduplicated;
            }
            Err(v) => {
                rep.violations += 1;
                if rep.first_violation.is_none() {
                    rep.first_violation = Some((a, b, v));
                }
            }
        }
    };
    for k in 0..rep.points {
        *world = SimWorld::new();
        let r = run_with_crashes(&mut *buf, task, script, world, &[k], batch);
        record(&mut rep, k, u32::MAX, r);
        if pairs {
            // The recovery boot passes at most `points` + a few review points.
            for j in 0..rep.points + 4 {
                *world = SimWorld::new();
                let r = run_with_crashes(&mut *buf, task, script, world, &[k, j], batch);
                record(&mut rep, k, j, r);
            }
        }
    }
    rep
}

/// The 20-step demo task used by the tests and the firmware demo: payments (idempotent), lookups
/// (read-only), two emails (non-idempotent) and plain model steps.
pub const DEMO_SCRIPT: [ScriptStep<'static>; 20] = {
    const fn pay(args: &'static str) -> ScriptStep<'static> {
        ScriptStep {
            text: "pay the invoice",
            tool: Some(ScriptTool { name: "payment", class: ToolClass::Idempotent, args }),
        }
    }
    const fn look(args: &'static str) -> ScriptStep<'static> {
        ScriptStep { text: "look it up", tool: Some(ScriptTool { name: "lookup", class: ToolClass::ReadOnly, args }) }
    }
    const fn mail(args: &'static str) -> ScriptStep<'static> {
        ScriptStep {
            text: "tell the customer",
            tool: Some(ScriptTool { name: "send_email", class: ToolClass::NonIdempotent, args }),
        }
    }
    const THINK: ScriptStep<'static> = ScriptStep { text: "thinking", tool: None };
    [
        look(r#"{"q":"acct-1"}"#),
        pay(r#"{"amount":10,"to":"acct-1"}"#),
        THINK,
        pay(r#"{"amount":20,"to":"acct-2"}"#),
        mail(r#"{"to":"a@example.com"}"#),
        look(r#"{"q":"acct-3"}"#),
        pay(r#"{"amount":30,"to":"acct-3"}"#),
        THINK,
        pay(r#"{"amount":40,"to":"acct-4"}"#),
        look(r#"{"q":"acct-5"}"#),
        pay(r#"{"amount":50,"to":"acct-5"}"#),
        THINK,
        mail(r#"{"to":"b@example.com"}"#),
        pay(r#"{"amount":60,"to":"acct-6"}"#),
        look(r#"{"q":"acct-7"}"#),
        pay(r#"{"amount":70,"to":"acct-7"}"#),
        THINK,
        pay(r#"{"amount":80,"to":"acct-8"}"#),
        look(r#"{"q":"acct-9"}"#),
        pay(r#"{"amount":90,"to":"acct-9"}"#),
    ]
};

/// Bytes of RAM log [`DEMO_SCRIPT`] needs with room for reviews (the tests use this).
pub const DEMO_LOG_BYTES: usize = 16 * 1024;

/// A helper for tests: a log's records count, via [`LogStorage`].
pub fn count_records<S: LogStorage>(log: &mut S) -> Result<usize, StorageError<S::Error>> {
    let mut n = 0;
    super::storage::for_each_record(log, |_| n += 1)?;
    Ok(n)
}

/// What broke in a [`power_cut_sweep`] case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum PowerCutViolation {
    /// An append that returned `Ok` was not read back after the reboot.
    LostAcknowledged,
    /// More than the acknowledged records plus the torn one came back.
    TooMany,
    /// A record read back differs from the one written at its position.
    Mismatch,
    /// The log could not be opened or read after the reboot.
    Unreadable,
    /// An append after recovery failed or was not read back.
    AppendAfterRecovery,
    /// The log wrote over non-erased bytes (NOR cannot do that).
    Overwrite,
}

/// The result of [`power_cut_sweep`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PowerCutReport {
    /// Cut points tried: every byte offset of the whole append sequence, plus "no cut".
    pub cuts: u32,
    /// Bytes the append sequence writes (padding included).
    pub bytes: u32,
    /// Cases that broke a guarantee.
    pub violations: u32,
    /// The first: (cut offset, what).
    pub first_violation: Option<(u32, PowerCutViolation)>,
}

/// Power loss at every byte: for each n in `0..=bytes` (the bytes written by appending
/// `make(0..count)` to an empty [`FlashLog`](super::FlashLog) on a [`MockFlash`](super::MockFlash) over `mem`), cuts the power after n
/// bytes, reboots, and checks that recovery returns exactly the acknowledged records (plus at most
/// the one being written, if the cut fell in its padding), in order and intact; then appends two
/// different records (`make(count)`, `make(count + 1)`), reboots and checks all of them, and that
/// no byte was ever written twice. `W` is `WRITE_SIZE`, `E` is `ERASE_SIZE`; `mem.len()` must be a
/// multiple of `E` large enough for `count + 2` records. No allocation: runs on the firmware too.
pub fn power_cut_sweep<const W: usize, const E: usize, F: Fn(u32) -> Record>(
    mem: &mut [u8],
    count: u32,
    make: F,
) -> PowerCutReport {
    use super::storage::{FlashLog, MockFlash};
    let size = mem.len() as u32;
    let mut rep = PowerCutReport::default();
    // bytes of a clean run
    mem.fill(0xFF);
    {
        let Ok(mut log) = FlashLog::open(MockFlash::<W, E>::new(&mut *mem), 0, size) else {
            rep.violations = 1;
            rep.first_violation = Some((0, PowerCutViolation::Unreadable));
            return rep;
        };
        for i in 0..count {
            if super::storage::append_record(&mut log, &make(i)).is_err() {
                rep.violations = 1;
                rep.first_violation = Some((0, PowerCutViolation::AppendAfterRecovery));
                return rep;
            }
        }
        rep.bytes = log.into_inner().written as u32;
    }
    for n in 0..=rep.bytes {
        rep.cuts += 1;
        if let Err(v) = power_cut_case::<W, E, F>(mem, count, &make, n) {
            rep.violations += 1;
            if rep.first_violation.is_none() {
                rep.first_violation = Some((n, v));
            }
        }
    }
    rep
}

fn power_cut_case<const W: usize, const E: usize, F: Fn(u32) -> Record>(
    mem: &mut [u8],
    count: u32,
    make: &F,
    n: u32,
) -> Result<(), PowerCutViolation> {
    use super::storage::{FlashLog, MockFlash};
    let size = mem.len() as u32;
    mem.fill(0xFF);
    let mut acked = 0u32;
    {
        let mut flash = MockFlash::<W, E>::new(&mut *mem);
        flash.cut_after(n as usize);
        let mut log = FlashLog::open(flash, 0, size).map_err(|_| PowerCutViolation::Unreadable)?;
        for i in 0..count {
            if super::storage::append_record(&mut log, &make(i)).is_err() {
                break;
            }
            acked += 1;
        }
        if log.into_inner().overwrites != 0 {
            return Err(PowerCutViolation::Overwrite);
        }
    }
    // reboot: read back, check the prefix
    let got = {
        let mut log =
            FlashLog::open(MockFlash::<W, E>::new(&mut *mem), 0, size).map_err(|_| PowerCutViolation::Unreadable)?;
        let mut i = 0u32;
        let mut cur = log.first();
        loop {
            match log.read_record(cur) {
                Ok(Some((rec, next))) => {
                    if i >= count || i > acked {
                        return Err(PowerCutViolation::TooMany);
                    }
                    if rec != make(i) {
                        return Err(PowerCutViolation::Mismatch);
                    }
                    i += 1;
                    cur = next;
                }
                Ok(None) => break,
                Err(_) => return Err(PowerCutViolation::Unreadable),
            }
        }
        if i < acked {
            return Err(PowerCutViolation::LostAcknowledged);
        }
        // continue with different records
        for k in 0..2 {
            super::storage::append_record(&mut log, &make(count + k))
                .map_err(|_| PowerCutViolation::AppendAfterRecovery)?;
        }
        if log.into_inner().overwrites != 0 {
            return Err(PowerCutViolation::Overwrite);
        }
        i
    };
    // reboot again: got records, then the two new ones
    let mut log =
        FlashLog::open(MockFlash::<W, E>::new(&mut *mem), 0, size).map_err(|_| PowerCutViolation::Unreadable)?;
    let mut cur = log.first();
    let mut i = 0u32;
    while let Ok(Some((rec, next))) = log.read_record(cur) {
        let want = if i < got { make(i) } else { make(count + (i - got)) };
        if rec != want {
            return Err(PowerCutViolation::AppendAfterRecovery);
        }
        i += 1;
        cur = next;
    }
    if i != got + 2 {
        return Err(PowerCutViolation::AppendAfterRecovery);
    }
    Ok(())
}

impl core::fmt::Display for Violation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Violation::Duplicate { step } => write!(f, "step {step}: side effect applied more than once"),
            Violation::Missing { step } => write!(f, "step {step}: side effect never applied"),
            Violation::NotCompleted => f.write_str("the task did not complete"),
            Violation::ReplayMismatch => f.write_str("replaying the log does not give the live state"),
            Violation::BadLog => f.write_str("the log could not be read back or folded"),
            Violation::WorldOverflow => f.write_str("the simulated world ran out of capacity"),
            Violation::TooManyBoots => write!(f, "not finished after {MAX_BOOTS} boots"),
        }
    }
}

impl core::fmt::Display for PowerCutViolation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PowerCutViolation::LostAcknowledged => "an acknowledged record was lost",
            PowerCutViolation::TooMany => "more records came back than were written",
            PowerCutViolation::Mismatch => "a record came back different",
            PowerCutViolation::Unreadable => "the log could not be opened or read",
            PowerCutViolation::AppendAfterRecovery => "appending after recovery failed",
            PowerCutViolation::Overwrite => "wrote over non-erased flash",
        })
    }
}
