//! Running a task on the host: the journal (SQLite or PostgreSQL behind [`TaskStore`]; one
//! transaction per checkpoint, fenced), the scripted model and the world's tools as [`Effects`],
//! crash injection, and the commands that drive them (`run`, `resume`, `fork`, `review`,
//! `suspend`).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use brokerlab_core::runner::{
    Action, Decision, DriveError, Effects, End, Event, ForkStart, Journal, Key, ModelReply, Phase, Record, Stop,
    TaskId, TaskState, ToolCall, ToolClass, ToolOutput, copied_by_fork, drive, fork_start, may_call, next_action,
    review,
};

use super::backend::{DbTarget, TaskStore, open};
use super::ident::{Me, now_ms};
use super::spec::{Spec, check_id};
use super::store::{AppendError, Lease, LeaseError, NewTask, fold_in};
use super::world::{CallOutcome, ToolFile, World};
use crate::error::{EXIT_FAILURE, EXIT_NEEDS_REVIEW};
use crate::task::error::{TaskError, TaskResult};

/// Exit status of a process stopped by an injected crash (as if killed by SIGKILL: 128 + 9).
pub const CRASH_EXIT: i32 = 137;

/// A named place where `BROKERLAB_CRASH_AT` can stop the process, or `BROKERLAB_PAUSE_AT` park
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// Before a checkpoint transaction commits (its records are lost).
    BeforeCommit,
    /// Right after a checkpoint committed.
    AfterCommit,
    /// The intent is durable, the tool has not been called (before the lease margin check).
    BeforeTool,
    /// The tool applied the call; its result has not reached the log (the window).
    ToolApplied,
    /// The lease margin check passed; the call is about to be sent to the tool.
    Calling,
}

impl Point {
    const ALL: [Point; 5] =
        [Point::BeforeCommit, Point::AfterCommit, Point::BeforeTool, Point::ToolApplied, Point::Calling];
    /// Its name in `BROKERLAB_CRASH_AT` / `BROKERLAB_PAUSE_AT`.
    pub fn name(self) -> &'static str {
        match self {
            Point::BeforeCommit => "before-commit",
            Point::AfterCommit => "after-commit",
            Point::BeforeTool => "before-tool",
            Point::ToolApplied => "tool-applied",
            Point::Calling => "calling",
        }
    }
}

/// One `POINT[:N]` or `N` target.
type Target = (Option<Point>, u32);

fn parse_target(var: &str) -> TaskResult<Option<Target>> {
    let Ok(v) = std::env::var(var) else { return Ok(None) };
    let bad = || {
        TaskError::bad_input(format!(
            "{var}={v:?}: expected N or POINT[:N] with POINT one of before-commit, after-commit, before-tool, \
             calling, tool-applied and N >= 1"
        ))
    };
    let (name, n) = match v.split_once(':') {
        Some((a, b)) => (Some(a), b.parse::<u32>().map_err(|_| bad())?),
        None => match v.parse::<u32>() {
            Ok(n) => (None, n),
            Err(_) => (Some(v.as_str()), 1),
        },
    };
    if n == 0 {
        return Err(bad());
    }
    let point = match name {
        Some(s) => Some(Point::ALL.into_iter().find(|p| p.name() == s).ok_or_else(bad)?),
        None => None,
    };
    Ok(Some((point, n)))
}

/// Crash and pause injection from the environment. `BROKERLAB_CRASH_AT=<point>[:<n>]` stops the
/// process (exit status 137, no cleanup, like `kill -9`) the n-th time (1-based, default 1) it
/// passes the named point; `BROKERLAB_CRASH_AT=<n>` at the n-th point of any kind.
/// `BROKERLAB_PAUSE_AT` (same syntax) parks the process there with `SIGSTOP` to itself, as a
/// paused VM or a long GC pause would, until someone sends `SIGCONT`. Points: `before-commit`,
/// `after-commit`, `before-tool`, `calling`, `tool-applied`.
#[derive(Debug, Default)]
pub struct Chaos {
    crash: Option<Target>,
    pause: Option<Target>,
    passed: Cell<u32>,
    passed_kind: Cell<[u32; 5]>,
}

impl Chaos {
    /// No crashes, no pauses.
    pub fn none() -> Chaos {
        Chaos::default()
    }

    /// Reads `BROKERLAB_CRASH_AT` and `BROKERLAB_PAUSE_AT`; a malformed value is bad input.
    pub fn from_env() -> TaskResult<Chaos> {
        Ok(Chaos {
            crash: parse_target("BROKERLAB_CRASH_AT")?,
            pause: parse_target("BROKERLAB_PAUSE_AT")?,
            ..Chaos::default()
        })
    }

    /// Passes `p`; crashes or parks the process if it is a chosen point.
    pub fn point(&self, p: Point, what: &str) {
        let total = self.passed.get() + 1;
        self.passed.set(total);
        let mut kinds = self.passed_kind.get();
        let i = Point::ALL.iter().position(|q| *q == p).unwrap_or(0);
        kinds[i] += 1;
        self.passed_kind.set(kinds);
        let hit = |t: Option<Target>| match t {
            Some((None, n)) => total == n,
            Some((Some(q), n)) => q == p && kinds[i] == n,
            None => false,
        };
        if hit(self.crash) {
            eprintln!("brokerlab: crash injected at {} (point #{total}: {what})", p.name());
            std::process::exit(CRASH_EXIT);
        }
        if hit(self.pause) {
            eprintln!("brokerlab: paused at {} (point #{total}: {what}); waiting for SIGCONT", p.name());
            crate::sys::stop_self();
        }
    }
}

/// The journal: buffers records and commits them in one transaction at each `sync`
/// (the core's drive syncs before every side effect), fenced by the lease.
pub struct HostJournal<'a> {
    store: &'a dyn TaskStore,
    lease: Lease,
    pending: Vec<Record>,
    chaos: &'a Chaos,
    /// When the lease was last renewed (ms; taken before the transaction, so the lease lasts at
    /// least `ttl` from it).
    renewed_at_ms: Rc<Cell<i64>>,
    /// Transactions committed.
    pub commits: u64,
}

impl<'a> HostJournal<'a> {
    /// A journal appending to `store` under `lease`.
    pub fn new(store: &'a dyn TaskStore, lease: Lease, chaos: &'a Chaos) -> Self {
        let renewed_at_ms = Rc::new(Cell::new(lease.taken_at_ms));
        HostJournal { store, lease, pending: Vec::new(), chaos, renewed_at_ms, commits: 0 }
    }
}

impl Journal for HostJournal<'_> {
    type Error = AppendError<TaskError>;
    fn append(&mut self, rec: &Record) -> Result<(), AppendError<TaskError>> {
        self.pending.push(rec.clone());
        Ok(())
    }
    fn sync(&mut self) -> Result<(), AppendError<TaskError>> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let what = self.pending.last().map(|r| format!("seq {} {}", r.seq, r.kind().name())).unwrap_or_default();
        self.chaos.point(Point::BeforeCommit, &what);
        let t = now_ms();
        self.store.append(&self.lease, &self.pending)?;
        self.renewed_at_ms.set(t);
        self.pending.clear();
        self.commits += 1;
        self.chaos.point(Point::AfterCommit, &what);
        Ok(())
    }
}

/// The scripted model, the world's tools and the suspend flag.
pub struct HostEffects<'a> {
    spec: &'a Spec,
    world: &'a mut World,
    store: &'a dyn TaskStore,
    chaos: &'a Chaos,
    delay: Duration,
    lease: Lease,
    margin_ms: i64,
    renewed_at_ms: Rc<Cell<i64>>,
    /// Set when a tool or a renewal found that another runner holds the lease.
    fenced: bool,
    /// Suspend once SIGTERM arrived (`task worker`).
    suspend_on_term: bool,
}

impl HostEffects<'_> {
    /// The margin rule (docs/RUNNER.md): a call is sent only while at least `margin_ms` of the
    /// lease is left; otherwise the lease is renewed first, in a fenced transaction, and a runner
    /// that lost it stops here without calling.
    fn check_lease(&mut self, task: &TaskId, step: u16, tool: &str) -> TaskResult<()> {
        let expires = self.renewed_at_ms.get().saturating_add(self.lease.ttl_ms);
        if may_call(expires, now_ms(), self.margin_ms) {
            return Ok(());
        }
        let t = now_ms();
        match self.store.renew(&self.lease) {
            Ok(()) => {
                self.renewed_at_ms.set(t);
                Ok(())
            }
            Err(AppendError::Fenced { epoch, holder }) => {
                self.fenced = true;
                Err(TaskError::RenewFenced {
                    task: task.to_string(),
                    step,
                    tool: tool.to_string(),
                    margin_ms: self.margin_ms,
                    epoch,
                    holder: holder.map(|(o, e)| (o.to_string(), e)),
                })
            }
            Err(AppendError::Sql(e)) => Err(e),
        }
    }
}

impl Effects for HostEffects<'_> {
    type Error = TaskError;

    fn model(&mut self, _task: &TaskId, step: u16) -> TaskResult<ModelReply> {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        self.spec.reply(step).ok_or_else(|| TaskError::failure(format!("the spec has no step {step}")))
    }

    fn tool(
        &mut self,
        task: &TaskId,
        step: u16,
        call: &ToolCall,
        key: Option<&Key>,
        fence: u64,
    ) -> TaskResult<ToolOutput> {
        let what = format!("step {step} {}", call.tool);
        self.chaos.point(Point::BeforeTool, &what);
        self.check_lease(task, step, &call.tool)?;
        self.chaos.point(Point::Calling, &what);
        let out = match self.world.call(task, step, call, key, fence)? {
            CallOutcome::Done(out) => out,
            CallOutcome::Fenced { place, highest } => {
                self.fenced = true;
                return Err(TaskError::ToolFenced {
                    task: task.to_string(),
                    step,
                    tool: call.tool.to_string(),
                    place: place.to_string(),
                    fence,
                    highest,
                });
            }
        };
        // the call has been applied; a slow tool's result "has not arrived" during this delay
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        self.chaos.point(Point::ToolApplied, &what);
        Ok(out)
    }

    fn suspend_requested(&mut self, task: &TaskId, _step: u16) -> TaskResult<bool> {
        // a worker told to stop (SIGTERM) suspends its task like `task suspend` would: after
        // the current atomic step, with the marker, so another worker resumes it
        if self.suspend_on_term && crate::sys::term_requested() {
            return Ok(true);
        }
        self.store.suspend_requested(task)
    }
}

/// Options shared by the commands that run a task.
#[derive(Debug, Clone, Default)]
pub struct RunOpts {
    /// `--world DIR` if given.
    pub world: Option<PathBuf>,
    /// Delay per model call and per tool call (tests, chaos).
    pub step_delay_ms: u64,
    /// Lease time to live, ms.
    pub lease_ms: i64,
    /// Least lease time left, ms, under which a tool is not called before a renewal.
    pub lease_margin_ms: i64,
    /// Suspend after the current atomic step once SIGTERM arrived (`task worker`).
    pub suspend_on_term: bool,
}

/// Default world directory.
pub const DEFAULT_WORLD: &str = "world";

/// The world directory: `--world`, else the one the task was created with, else `./world`.
pub fn world_dir(opts: &RunOpts, recorded: Option<&str>) -> PathBuf {
    match (&opts.world, recorded) {
        (Some(w), Some(r)) if Path::new(r) != w.as_path() && abs(w) != Path::new(r) => {
            let asked = super::pg::redact(&w.to_string_lossy());
            let r = super::pg::redact(r);
            eprintln!("brokerlab: warning: the task was created with --world {r}; using {asked} as asked");
            w.clone()
        }
        (Some(w), _) => w.clone(),
        (None, Some(r)) => PathBuf::from(r),
        (None, None) => PathBuf::from(DEFAULT_WORLD),
    }
}

/// `p` made absolute; a `postgres://` world is kept as given.
fn abs(p: &Path) -> PathBuf {
    if let DbTarget::Postgres(url) = DbTarget::parse(p) {
        return PathBuf::from(super::pg::without_password(&url));
    }
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// A short status of a task for `list`/`inspect`.
pub fn status_of(st: &TaskState) -> String {
    if !st.created {
        return "empty".into();
    }
    match st.end {
        Some(End::Completed) => return "completed".into(),
        Some(End::Failed) => return "failed".into(),
        None => {}
    }
    if st.suspended {
        return format!("suspended before step {}", st.step);
    }
    match &st.phase {
        Phase::Review { call } => format!("needs review (step {} {})", st.step, call.tool),
        Phase::InFlight { call, .. } => format!("in flight (step {} {}, no result)", st.step, call.tool),
        _ => format!("at step {}", st.step),
    }
}

/// The world as a witness: every call a tool's own file holds for `id` must have its intent in
/// the log. A call without one means the log lost its tail or was changed: resuming would repeat a
/// side effect the world has already seen, so this is reported as corruption and nothing runs.
fn check_witness(store: &dyn TaskStore, world: &mut World, id: &str, recs: &[Record]) -> TaskResult<()> {
    for f in ToolFile::ALL {
        for c in world.calls(f, id)? {
            let has_intent = recs.iter().any(|r| {
                matches!(&r.event, Event::ToolIntent { step, tool, .. } if *step == c.step && tool.as_str() == f.tool())
            });
            if !has_intent {
                return Err(TaskError::bad_input(format!(
                    "{}: task {id:?} step {}: log corruption: the {} tool's own file ({}) has a call for this step \
                     (applied {}, token {}) but the log has no intent for it: the log's tail was lost or changed; \
                     nothing was re-sent and nothing was written",
                    store.name(),
                    c.step,
                    f.tool(),
                    world.place(f),
                    u8::from(c.applied),
                    c.epoch
                )));
            }
        }
    }
    Ok(())
}

/// A runner that takes over a call in flight (or a step waiting for review) raises the fence in
/// that tool's file to its own epoch before it decides, so a call from the previous holder that
/// arrives later is refused, and the file it reads as evidence stays final.
fn fence_in_flight(world: &mut World, id: &str, st: &TaskState) -> TaskResult<()> {
    let call = match &st.phase {
        Phase::InFlight { call, .. } | Phase::Review { call } => call,
        Phase::Model | Phase::Tool { .. } => return Ok(()),
    };
    match ToolFile::of_tool(&call.tool) {
        Some(f) => world.raise_fence(f, id, st.epoch()),
        None => Ok(()),
    }
}

/// Runs (or resumes) a task until it completes, suspends or pauses. Returns the exit code.
fn execute(
    store: &dyn TaskStore,
    id: &str,
    spec: &Spec,
    world: PathBuf,
    opts: &RunOpts,
    create: Option<NewTask>,
) -> TaskResult<i32> {
    let chaos = Chaos::from_env()?;
    let me = Me::current();
    let recs = match &create {
        Some(new) => new.records.clone(),
        None => store.records(id)?,
    };
    let mut state = fold_in(&store.name(), id, &recs)?;
    if state.created && state.spec_digest != spec.digest() {
        return Err(TaskError::bad_input(format!(
            "{}: task {id:?}: the stored spec does not match the log's digest",
            store.name()
        )));
    }
    let mut world = World::new(&world);
    check_witness(store, &mut world, id, &recs)?;
    let (lease, rec) = match store.acquire(id, &me, opts.lease_ms, &state, create.as_ref(), true) {
        Ok(x) => x,
        Err(LeaseError::Held { owner, epoch, expires_in_ms }) => {
            return Err(TaskError::Held { task: id.to_string(), owner: owner.to_string(), epoch, expires_in_ms });
        }
        Err(LeaseError::Exists) => {
            return Err(TaskError::failure(format!("task {id:?} was created concurrently by another runner")));
        }
        // a dead holder's last commit landed after we read the log: read it again
        Err(LeaseError::Stale) if create.is_none() => {
            return execute(store, id, spec, world.dir().to_path_buf(), opts, None);
        }
        Err(LeaseError::Stale) => return Err(TaskError::LogChanged { task: id.to_string() }),
        Err(LeaseError::Sql(e)) => return Err(e),
    };
    state.apply(&rec).map_err(|e| TaskError::failure(format!("lease record: {e}")))?;
    fence_in_flight(&mut world, id, &state)?;
    let mut journal = HostJournal::new(store, lease.clone(), &chaos);
    let mut fx = HostEffects {
        spec,
        world: &mut world,
        store,
        chaos: &chaos,
        delay: Duration::from_millis(opts.step_delay_ms),
        lease: lease.clone(),
        margin_ms: opts.lease_margin_ms,
        renewed_at_ms: journal.renewed_at_ms.clone(),
        fenced: false,
        suspend_on_term: opts.suspend_on_term,
    };
    let r = drive(&mut state, &mut journal, &mut fx);
    let fenced = fx.fenced;
    match r {
        Ok(stop) => {
            store.release(&lease);
            report(store, id, &state, stop, &mut world)
        }
        Err(DriveError::Journal(AppendError::Fenced { epoch, holder })) => {
            Err(TaskError::LeaseLost { task: id.to_string(), epoch, holder: holder.map(|(o, e)| (o.to_string(), e)) })
        }
        Err(DriveError::Journal(AppendError::Sql(e))) => {
            store.release(&lease);
            Err(e)
        }
        Err(DriveError::Effects(e)) => {
            if !fenced {
                store.release(&lease);
            }
            Err(e)
        }
        Err(DriveError::Runner(e)) => Err(TaskError::failure(format!("task {id:?}: {e}"))),
        Err(DriveError::NotCreated) => Err(TaskError::failure(format!("task {id:?} has no created record"))),
        Err(e) => {
            store.release(&lease);
            Err(TaskError::failure(format!("task {id:?}: {e}")))
        }
    }
}

/// What the world shows about a step waiting for review: the calls the tool's own file holds for
/// it (made by the task, or by the ancestors its in-flight intent was copied from) and, for a
/// fork, the parents' records for that step after the cut.
struct Evidence {
    file: String,
    received: usize,
    applied: usize,
    lines: Vec<String>,
}

fn evidence(store: &dyn TaskStore, world: &mut World, id: &str, step: u16, tool: &str) -> TaskResult<Evidence> {
    let f = ToolFile::of_tool(tool);
    let mut ev = Evidence {
        file: f.map_or_else(|| world.name(), |f| world.place(f)),
        received: 0,
        applied: 0,
        lines: Vec::new(),
    };
    let mut task = id.to_string();
    // the task itself, then each parent whose prefix (up to the cut) holds an intent for `step`
    for _depth in 0..64 {
        if let Some(f) = f {
            for c in world.calls(f, &task)?.into_iter().filter(|c| c.step == step) {
                ev.received += 1;
                ev.applied += usize::from(c.applied);
                ev.lines.push(format!(
                    "{}: call by {} (token {}): {}",
                    world.call_place(f),
                    c.task,
                    c.epoch,
                    if c.applied {
                        "applied".to_string()
                    } else {
                        format!("not applied ({})", c.reason.unwrap_or_default())
                    }
                ));
            }
        }
        let Some(row) = store.task(&task)? else { break };
        let (Some(parent), Some(cut)) = (row.parent, row.parent_seq) else { break };
        let precs = store.records(&parent)?;
        let copied = |r: &&Record| r.event.step() == Some(step) && matches!(r.event, Event::ToolIntent { .. });
        if !precs.iter().take_while(|r| i64::from(r.seq) <= cut).any(|r| copied(&r)) {
            break;
        }
        for r in precs.iter().filter(|r| i64::from(r.seq) > cut && r.event.step() == Some(step)) {
            ev.lines.push(format!("parent {parent} seq {} after the cut: {} {}", r.seq, r.kind().name(), r.event));
        }
        task = parent;
    }
    Ok(ev)
}

fn report(store: &dyn TaskStore, id: &str, st: &TaskState, stop: Stop, world: &mut World) -> TaskResult<i32> {
    match stop {
        Stop::Completed => {
            say!("task {id}: completed ({} steps, {} records)", st.steps, st.next_seq);
            Ok(0)
        }
        Stop::Suspended => {
            say!("task {id}: suspended before step {} (resume with `brokerlab task resume {id}`)", st.step);
            Ok(0)
        }
        Stop::Failed => {
            say!("task {id}: failed");
            Ok(EXIT_FAILURE)
        }
        Stop::NeedsReview { step } => {
            let tool = tool_at(st);
            let ev = evidence(store, world, id, step, &tool)?;
            let reading = match ev.applied {
                0 => "no applied call: it did not happen as far as the tool can tell (`--retry` sends it)".to_string(),
                1 => "one applied call: it happened (`--mark-done`)".to_string(),
                n => format!("{n} applied calls"),
            };
            say!(
                "task {id}: paused: step {step} ({tool}) has an intent in the log but no result: it may or may not \
                 have been sent, and it is not idempotent, so the runner will not repeat it on its own.\n  the \
                 tool's own file ({}) shows {} call(s) received and {} applied for this step: {reading}.",
                ev.file,
                ev.received,
                ev.applied
            );
            for l in &ev.lines {
                say!("    {l}");
            }
            say!(
                "  decide: `brokerlab task review {id} --step {step} --mark-done` (it happened) or `--retry` (it did \
                 not), then `brokerlab task resume {id}`"
            );
            Ok(EXIT_NEEDS_REVIEW)
        }
    }
}

fn tool_at(st: &TaskState) -> String {
    match &st.phase {
        Phase::Review { call } | Phase::InFlight { call, .. } | Phase::Tool { call } => call.tool.to_string(),
        Phase::Model => "-".into(),
    }
}

fn new_id() -> String {
    format!("t-{:x}-{}", now_ms(), std::process::id())
}

/// `task run SPEC`: starts the task, or resumes it when its id already exists.
pub fn run(db: &DbTarget, spec_path: &Path, opts: &RunOpts) -> TaskResult<i32> {
    let spec = Spec::load(spec_path)?;
    let store = open(db, true)?;
    let store = &*store;
    let id = spec.id.clone().unwrap_or_else(new_id);
    if let Some(row) = store.task(&id)? {
        let stored = Spec::from_json(&row.spec)
            .map_err(|e| TaskError::bad_input(format!("{}: task {id:?}: stored spec unreadable: {e}", store.name())))?;
        if stored.digest() != spec.digest() {
            return Err(TaskError::bad_input(format!(
                "{}: task {id:?} already exists with a different spec; run it with `task resume {id}`, or start a \
                 variant with `task fork {id} --at SEQ --spec {}`",
                spec_path.display(),
                spec_path.display()
            )));
        }
        say!("task {id}: exists, resuming");
        return resume_row(store, &id, &stored, row.world.as_deref(), opts);
    }
    let world = world_dir(opts, None);
    let new = new_task(&spec, &id, &world)?;
    say!("task {id}: started ({} steps)", spec.steps.len());
    execute(store, &id, &spec, world, opts, Some(new))
}

/// A new task's rows: its spec and its `Created` record (seq 0), the world directory made
/// absolute.
pub fn new_task(spec: &Spec, id: &str, world: &Path) -> TaskResult<NewTask> {
    let digest = spec.digest();
    let task = TaskId::try_from(id).map_err(|_| TaskError::bad_input("task id too long"))?;
    let created = Record::new(task, 0, Event::Created { spec_digest: digest, steps: spec.steps.len() as u16 });
    Ok(NewTask {
        spec_json: spec.to_json(),
        digest,
        parent: None,
        parent_seq: None,
        world: Some(abs(world).display().to_string()),
        records: vec![created],
    })
}

/// The task's id: the spec's, else a fresh one.
pub fn task_id_of(spec: &Spec) -> String {
    spec.id.clone().unwrap_or_else(new_id)
}

/// `task resume ID`.
pub fn resume(db: &DbTarget, id: &str, opts: &RunOpts) -> TaskResult<i32> {
    let store = open(db, false)?;
    let store = &*store;
    let row = store.task_or_err(id)?;
    let spec = Spec::from_json(&row.spec)
        .map_err(|e| TaskError::bad_input(format!("{}: task {id:?}: stored spec unreadable: {e}", store.name())))?;
    resume_row(store, id, &spec, row.world.as_deref(), opts)
}

/// Resumes a stored task (its spec and recorded world) until it completes, suspends or pauses.
pub fn resume_row(
    store: &dyn TaskStore,
    id: &str,
    spec: &Spec,
    world: Option<&str>,
    opts: &RunOpts,
) -> TaskResult<i32> {
    let st = store.replay(id)?;
    match next_action(&st) {
        Action::Done => {
            say!("task {id}: already completed ({} steps)", st.steps);
            return Ok(0);
        }
        Action::Failed => {
            say!("task {id}: failed earlier");
            return Ok(EXIT_FAILURE);
        }
        Action::AwaitReview { step } => {
            let mut w = World::new(&world_dir(opts, world));
            return report(store, id, &st, Stop::NeedsReview { step }, &mut w);
        }
        _ => {}
    }
    execute(store, id, spec, world_dir(opts, world), opts, None)
}

/// `task review ID --step N --mark-done|--retry`.
pub fn review_cmd(db: &DbTarget, id: &str, step: u16, decision: Decision, lease_ms: i64) -> TaskResult<i32> {
    let store = open(db, false)?;
    let store = &*store;
    store.task_or_err(id)?;
    let mut st = store.replay(id)?;
    match &st.phase {
        Phase::Review { .. } if st.step == step && st.end.is_none() => {}
        _ => {
            return Err(TaskError::bad_input(format!(
                "task {id:?}: step {step} is not waiting for review (task is {})",
                status_of(&st)
            )));
        }
    }
    let me = Me::current();
    let (lease, rec) = match store.acquire(id, &me, lease_ms, &st, None, false) {
        Ok(x) => x,
        Err(LeaseError::Held { owner, .. }) => {
            return Err(TaskError::failure(format!("task {id:?} is held by a running runner ({owner}); try later")));
        }
        Err(LeaseError::Sql(e)) => return Err(e),
        Err(LeaseError::Exists) => return Err(TaskError::failure("unexpected create")),
        Err(LeaseError::Stale) => return Err(TaskError::LogChanged { task: id.to_string() }),
    };
    st.apply(&rec).map_err(|e| TaskError::failure(e.to_string()))?;
    // the reviewer read the tool's file: from now on no older lease holder may add to it
    let row = store.task_or_err(id)?;
    let mut world = World::new(&world_dir(&RunOpts::default(), row.world.as_deref()));
    if let Err(e) = fence_in_flight(&mut world, id, &st) {
        store.release(&lease);
        return Err(e);
    }
    let chaos = Chaos::none();
    let mut journal = HostJournal::new(store, lease.clone(), &chaos);
    let r = review(&mut st, &mut journal, step, decision);
    store.release(&lease);
    match r {
        Ok(()) => {
            let what = match decision {
                Decision::MarkDone => "marked done",
                Decision::Retry => "will be retried (a new call)",
            };
            say!("task {id}: step {step} {what}; continue with `brokerlab task resume {id}`");
            Ok(0)
        }
        Err(e) => Err(TaskError::failure(format!("task {id:?}: review not recorded: {e}"))),
    }
}

/// `task suspend ID`.
pub fn suspend(db: &DbTarget, id: &str, lease_ms: i64) -> TaskResult<i32> {
    let store = open(db, false)?;
    let store = &*store;
    store.task_or_err(id)?;
    let mut st = store.replay(id)?;
    if st.end.is_some() {
        return Err(TaskError::bad_input(format!("task {id:?} has already {}; nothing to suspend", status_of(&st))));
    }
    if st.suspended {
        say!("task {id}: already suspended before step {}", st.step);
        return Ok(0);
    }
    let now = now_ms();
    if let Some(l) = store.lease(id)?
        && l.live(now)
    {
        store.request_suspend(id)?;
        say!(
            "task {id}: suspend requested; the runner ({}) stops after its current step and records the marker",
            l.owner
        );
        return Ok(0);
    }
    // No live runner: write the marker ourselves, if no call is in flight.
    if let Phase::Review { .. } = st.phase {
        return Err(TaskError::bad_input(format!(
            "task {id:?} cannot be suspended now: it is {}; it is already stopped and waits for a human: answer \
             with `brokerlab task review {id} --step {} --mark-done` or `--retry`",
            status_of(&st),
            st.step
        )));
    }
    if !st.can_suspend() {
        return Err(TaskError::bad_input(format!(
            "task {id:?} cannot be suspended now: it is {}; run `brokerlab task resume {id}` to resolve the step",
            status_of(&st)
        )));
    }
    let me = Me::current();
    let (lease, rec) = match store.acquire(id, &me, lease_ms, &st, None, true) {
        Ok(x) => x,
        Err(LeaseError::Held { .. }) => {
            store.request_suspend(id)?;
            say!("task {id}: suspend requested (a runner just started)");
            return Ok(0);
        }
        Err(LeaseError::Sql(e)) => return Err(e),
        Err(LeaseError::Exists) => return Err(TaskError::failure("unexpected create")),
        Err(LeaseError::Stale) => return Err(TaskError::LogChanged { task: id.to_string() }),
    };
    st.apply(&rec).map_err(|e| TaskError::failure(e.to_string()))?;
    let marker = Record::new(st.task_id.clone(), st.next_seq, Event::Suspended { next_step: st.step });
    st.apply(&marker).map_err(|e| TaskError::failure(e.to_string()))?;
    let r = store.append(&lease, &[marker]);
    store.release(&lease);
    match r {
        Ok(()) => {
            say!("task {id}: suspended before step {} (no runner was active)", st.step);
            Ok(0)
        }
        Err(AppendError::Sql(e)) => Err(e),
        Err(AppendError::Fenced { .. }) => Err(TaskError::failure(format!("task {id:?}: a runner took over"))),
    }
}

/// `task fork ID --at SEQ [--spec NEW]`.
pub fn fork(db: &DbTarget, id: &str, at: u32, spec_path: Option<&Path>, opts: &RunOpts) -> TaskResult<i32> {
    let store = open(db, false)?;
    let store = &*store;
    let row = store.task_or_err(id)?;
    let parent = store.records(id)?;
    if at as usize >= parent.len() {
        return Err(TaskError::bad_input(format!(
            "--at {at}: task {id:?} has records 0..={}",
            parent.len().saturating_sub(1)
        )));
    }
    let spec = match spec_path {
        Some(p) => Spec::load(p)?,
        None => Spec::from_json(&row.spec).map_err(|e| TaskError::bad_input(format!("stored spec: {e}")))?,
    };
    let new_id = match spec_path.and(spec.id.clone()) {
        Some(i) => i,
        None => {
            let base: String = id.chars().take(40).collect();
            let mut n = 1;
            loop {
                let cand = format!("{base}.f{n}");
                if store.task(&cand)?.is_none() {
                    break cand;
                }
                n += 1;
            }
        }
    };
    check_id(&new_id).map_err(|m| TaskError::bad_input(format!("fork id {new_id:?}: {m}")))?;
    if store.task(&new_id)?.is_some() {
        return Err(TaskError::bad_input(format!("task {new_id:?} already exists; give the new spec another id")));
    }
    let task = TaskId::try_from(new_id.as_str()).map_err(|_| TaskError::bad_input("fork id too long"))?;
    let parent_id = TaskId::try_from(id).map_err(|_| TaskError::bad_input("id too long"))?;
    let digest = spec.digest();
    let mut recs = vec![
        Record::new(task.clone(), 0, Event::Created { spec_digest: digest, steps: spec.steps.len() as u16 }),
        Record::new(task.clone(), 1, Event::ForkedFrom { task: parent_id, seq: at }),
    ];
    let mut st = fold_in(&store.name(), &new_id, &recs)?;
    // The fork rule (core::runner::fork): copy what happened in the steps, never shorten the
    // prefix: a call whose intent precedes the cut is the parent's and is never made anew.
    for r in parent.iter().take(at as usize + 1).filter(|r| copied_by_fork(&r.event)) {
        let rec = Record::new(task.clone(), recs.len() as u32, r.event.clone());
        st.apply(&rec).map_err(|e| {
            TaskError::bad_input(format!(
                "--at {at}: the parent's record seq {} does not fit the fork's spec ({} steps): {e}",
                r.seq,
                spec.steps.len()
            ))
        })?;
        recs.push(rec);
    }
    let start = match fork_start(&st) {
        ForkStart::Clean => String::new(),
        ForkStart::ReRun { step } => format!("; the cut is inside step {step}'s read-only call: it is re-run"),
        ForkStart::ReCallWithParentKey { step } => {
            format!("; the cut is inside step {step}'s idempotent call: it is re-called with the parent's key")
        }
        ForkStart::Review { step } => format!(
            "; the cut is inside step {step}'s non-idempotent call (the parent's): the fork pauses for review, it \
             never sends it on its own"
        ),
    };
    let world = world_dir(opts, row.world.as_deref());
    let new = NewTask {
        spec_json: spec.to_json(),
        digest,
        parent: Some(id.to_string()),
        parent_seq: Some(at as i64),
        world: Some(abs(&world).display().to_string()),
        records: recs,
    };
    say!("task {new_id}: forked from {id} at seq {at} ({} records copied){start}", new.records.len() - 2);
    execute(store, &new_id, &spec, world, opts, Some(new))
}

/// The tool class of a call, for tables.
pub fn class_name(c: ToolClass) -> &'static str {
    c.name()
}
