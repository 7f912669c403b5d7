//! Running a task on the host: the journal (SQLite or PostgreSQL behind [`TaskStore`]; one
//! transaction per checkpoint, fenced), the model and the tools ([`Kit`]) as [`Effects`],
//! crash injection, and the commands that drive them (`run`, `resume`, `fork`, `review`,
//! `suspend`).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use brokerlab_core::runner::{
    Action, Decision, DriveError, Effects, End, Event, ForkStart, Journal, Key, ModelReply, OpenCall, ParentGuard,
    Phase, Reason, Record, Stop, TaskId, TaskState, ToolCall, ToolClass, ToolOutput, commit, copied_by_fork, drive,
    fork_start, may_call, next_action, open_call, parent_guard, renewal_due, review,
};

use crate::agent::model::Model;
use crate::agent::openai::OpenAiModel;
use crate::agent::script::ScriptModel;
use crate::agent::toolbox::Toolbox;

use super::backend::{
    Access, AppendError, DbTarget, Lease, LeaseAsk, LeaseError, NewTask, Renewal, TaskStore, fold_in,
};
use super::db::open;
use super::ident::{Me, now_ms};
use super::spec::{ModelSpec, Spec, check_id};
use super::world::{ToolFile, World};
use crate::error::{EXIT_FAILURE, EXIT_NEEDS_REVIEW};
use crate::task::error::{TaskError, TaskResult};

mod commands;
mod crash;
mod effects;
mod evidence;

pub use commands::{fork, review_cmd, review_quiet, suspend};
pub use crash::{CRASH_EXIT, Chaos, Point};
pub use effects::{HostEffects, HostJournal, checkpoint};
use evidence::report;
pub use evidence::tool_at;

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
/// Checked **under the lease, against the log as of the lease** (`LeaseAsk::witness`, called by
/// `acquire` once no holder can append and `recs` is known to be the whole log): a runner holds
/// no call of its own without a durable intent, so no live runner can make this fire. Checked
/// before the lease, with a log read earlier, a live runner's intent committed and called in
/// between made it fire falsely (issue 21).
fn check_witness(db: &str, world: &mut World, id: &str, recs: &[Record]) -> TaskResult<()> {
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
                    db,
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
/// that tool to its own epoch before it decides, so a call from the previous holder that arrives
/// later is refused, and the file it reads as evidence stays final.
fn fence_in_flight(tools: &mut Toolbox, id: &str, st: &TaskState) -> TaskResult<()> {
    let call = match &st.phase {
        Phase::InFlight { call, .. } | Phase::Review { call } => call,
        Phase::Model | Phase::Tool { .. } => return Ok(()),
    };
    tools.raise_fence(&call.tool, id, st.epoch())
}

/// The call the current holder of `id`'s lease could still make, from `state` (the log as the
/// caller read it; `acquire` checks under the lease that it is still the whole log): the dropped-session rule's
/// input. A tool checks tokens if it says so (the built-in ones do, unless
/// `BROKERLAB_UNFENCED_TOOLS` says otherwise).
pub fn open_call_of(state: &TaskState, tools: &Toolbox) -> OpenCall {
    open_call(state, |tool| tools.checks_fence(tool))
}

/// What answers a task: its model and its tools (with the world the built-in tools keep their
/// calls in), and what the model is told.
pub struct Kit<'k> {
    /// The model.
    pub model: Box<dyn Model + 'k>,
    /// The tools.
    pub tools: Toolbox,
    /// The user's request (empty for the scripted model).
    pub prompt: String,
    /// The system message.
    pub system: Option<String>,
    /// The scripted model (its steps are fixed; no step limit applies to its calls).
    pub scripted: bool,
}

impl std::fmt::Debug for Kit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kit").field("tools", &self.tools).field("scripted", &self.scripted).finish_non_exhaustive()
    }
}

impl Kit<'static> {
    /// The model and tools `spec` names, the built-in tools' world in `world`. A spec made by a
    /// program through the library names a model this process does not have: exit 2.
    pub fn from_spec(spec: &Spec, world: &Path) -> TaskResult<Kit<'static>> {
        let tools = Toolbox::from_spec(spec, World::new(world))?;
        let (model, prompt, system): (Box<dyn Model>, String, Option<String>) = match &spec.model {
            None => (Box::new(ScriptModel::new(spec)), String::new(), None),
            Some(ModelSpec::Openai(o)) => {
                let m = OpenAiModel::new(o).map_err(|e| match e {
                    crate::agent::model::ModelError::Refused(m) | crate::agent::model::ModelError::Unavailable(m) => {
                        TaskError::bad_input(m)
                    }
                })?;
                (Box::new(m), o.prompt.clone(), o.system.clone())
            }
            Some(ModelSpec::Library { .. }) => {
                return Err(TaskError::bad_input(format!(
                    "task {}: its model is a program's own (the task was created through the library, \
                     brokerlab::agent::Runner): run it from that program",
                    spec.id.as_deref().unwrap_or("-")
                )));
            }
        };
        Ok(Kit { model, tools, prompt, system, scripted: spec.scripted() })
    }
}

/// How [`execute`] starts.
pub(crate) struct Start<'a> {
    /// The task's first rows, when this run creates it.
    pub create: Option<NewTask>,
    /// With `create`: if the id exists meanwhile, resume that task (`task run`); else fail with
    /// [`TaskError::TaskExists`] (a fork tries its next id).
    pub resume_if_exists: bool,
    /// Called once the lease is taken (and a new task created), before the run: says so.
    pub on_start: Option<&'a dyn Fn()>,
}

/// How a run ended.
#[derive(Debug)]
pub struct Ran {
    /// Why it stopped.
    pub stop: Stop,
    /// The task's state at the end (the fold of its log).
    pub state: TaskState,
    /// Why a call went to review, when the tool said (a lost answer, a key conflict).
    pub note: Option<String>,
}

/// What one try of [`execute`] came to.
// one per run attempt, on the stack briefly: boxing it would buy nothing
#[allow(clippy::large_enum_variant)]
enum Try {
    Ran(Ran),
    /// The task was created (or appended to) since the log was read: read it again.
    Again,
}

/// Runs (or resumes) a task until it completes, suspends or pauses.
pub(crate) fn execute(
    store: &dyn TaskStore,
    id: &str,
    spec: &Spec,
    kit: &mut Kit<'_>,
    opts: &RunOpts,
    mut start: Start<'_>,
) -> TaskResult<Ran> {
    loop {
        match execute_once(store, id, spec, kit, opts, &start)? {
            Try::Ran(r) => return Ok(r),
            Try::Again => start.create = None,
        }
    }
}

/// A lease refused, as the run's outcome: held by another runner, a task created or a log moved
/// on since it was read (then read again: [`Try::Again`], when that is safe), or the database's
/// error. `created`: this run creates the task.
fn lease_refused(e: LeaseError<TaskError>, id: &str, created: bool, resume_if_exists: bool) -> TaskResult<Try> {
    match e {
        LeaseError::Held { owner, epoch, expires_in_ms, why } => {
            Err(TaskError::Held { task: id.to_string(), owner: owner.to_string(), epoch, expires_in_ms, why })
        }
        // created since we looked: by another runner, or by our own earlier create whose commit
        // landed although its connection broke (a server restart). Resume it as any runner would:
        // the stored log is read again, its spec digest checked, and its lease decides.
        LeaseError::Exists if created && resume_if_exists => Ok(Try::Again),
        LeaseError::Exists if created => Err(TaskError::TaskExists { task: id.to_string() }),
        LeaseError::Exists => {
            Err(TaskError::failure(format!("task {id:?} was created concurrently by another runner")))
        }
        // a holder's last commit landed after we read the log: read it again
        LeaseError::Stale if !created => Ok(Try::Again),
        LeaseError::Stale => Err(TaskError::LogChanged { task: id.to_string() }),
        LeaseError::Witness(e) | LeaseError::Sql(e) => Err(e),
    }
}

fn execute_once(
    store: &dyn TaskStore,
    id: &str,
    spec: &Spec,
    kit: &mut Kit<'_>,
    opts: &RunOpts,
    start: &Start<'_>,
) -> TaskResult<Try> {
    let chaos = Chaos::from_env()?;
    let me = Me::current();
    let create = start.create.as_ref();
    let recs = match create {
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
    let open = open_call_of(&state, &kit.tools);
    let taken = {
        let w = std::cell::RefCell::new(&mut kit.tools.world);
        let db = store.name();
        let witness = || check_witness(&db, &mut w.borrow_mut(), id, &recs);
        store.acquire(&LeaseAsk {
            id,
            me: &me,
            ttl_ms: opts.lease_ms,
            state: &state,
            create,
            clear_suspend: true,
            open,
            witness: Some(&witness),
        })
    };
    let (lease, rec) = match taken {
        Ok(x) => x,
        Err(e) => return lease_refused(e, id, create.is_some(), start.resume_if_exists),
    };
    if let Some(f) = start.on_start {
        f();
    }
    state.apply(&rec).map_err(|e| TaskError::failure(format!("lease record: {e}")))?;
    fence_in_flight(&mut kit.tools, id, &state)?;
    let mut journal = HostJournal::new(store, lease.clone(), &chaos);
    {
        let mut h = journal.history.borrow_mut();
        h.extend(recs.iter().cloned());
        h.push(rec);
    }
    let mut fx = HostEffects {
        kit,
        store,
        chaos: &chaos,
        delay: Duration::from_millis(opts.step_delay_ms),
        lease: lease.clone(),
        margin_ms: opts.lease_margin_ms,
        renewed_at_ms: journal.renewed_at_ms.clone(),
        history: journal.history.clone(),
        max_steps: state.steps,
        fenced: false,
        suspend_on_term: opts.suspend_on_term,
        review_note: None,
    };
    let r = drive(&mut state, &mut journal, &mut fx);
    let (fenced, note) = (fx.fenced, fx.review_note.take());
    match r {
        Ok(stop) => {
            store.release(&lease);
            Ok(Try::Ran(Ran { stop, state, note }))
        }
        Err(DriveError::Journal(AppendError::Fenced { epoch, holder })) => {
            Err(TaskError::LeaseLost { task: id.to_string(), epoch, holder: holder.map(|(o, e)| (o.to_string(), e)) })
        }
        Err(DriveError::Journal(AppendError::Sql(e))) => {
            store.release(&lease);
            Err(e)
        }
        // the model kept asking for tools to the step limit: the task fails, durably (the
        // state holds every record appended so far, the failure follows them in one checkpoint)
        Err(DriveError::Effects(e @ TaskError::StepLimit { .. })) => {
            let mut reason = Reason::new();
            for c in format!("step limit {} reached, no final answer", state.steps).chars() {
                if reason.push(c).is_err() {
                    break;
                }
            }
            let r = commit(&mut state, &mut journal, Event::Failed { reason }).map_err(|c| format!("{c}"));
            let r = r.and_then(|()| journal.sync().map_err(|e| format!("{e:?}")));
            store.release(&lease);
            match r {
                Ok(()) => {
                    eprintln!("brokerlab: {e}");
                    Ok(Try::Ran(Ran { stop: Stop::Failed, state, note: None }))
                }
                Err(w) => Err(TaskError::failure(format!("{e}; recording the failure failed: {w}"))),
            }
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

/// [`execute`], then what the run says (the outcome; for a pause, the evidence): the exit code.
pub(crate) fn run_and_report(
    store: &dyn TaskStore,
    id: &str,
    spec: &Spec,
    kit: &mut Kit<'_>,
    opts: &RunOpts,
    start: Start<'_>,
) -> TaskResult<i32> {
    let ran = execute(store, id, spec, kit, opts, start)?;
    if let Some(n) = &ran.note {
        say!("task {id}: {n}");
    }
    report(store, id, &ran.state, ran.stop, &mut kit.tools)
}

fn new_id() -> String {
    format!("t-{:x}-{}", now_ms(), std::process::id())
}

/// `task run SPEC`: starts the task, or resumes it when its id already exists.
pub fn run(db: &DbTarget, spec_path: &Path, opts: &RunOpts) -> TaskResult<i32> {
    let spec = Spec::load(spec_path)?;
    let store = open(db, Access::Create)?;
    let store = &*store;
    let id = spec.id.clone().unwrap_or_else(new_id);
    if let Some(row) = store.task(&id)? {
        let stored = Spec::stored(&row.spec, &store.name(), &id)?;
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
    let mut kit = Kit::from_spec(&spec, &world)?;
    let new = new_task(&spec, &id, &world)?;
    let n = spec.step_count();
    let what = if spec.scripted() { format!("{n} steps") } else { format!("at most {n} steps") };
    let said = || say!("task {id}: started ({what})");
    run_and_report(
        store,
        &id,
        &spec,
        &mut kit,
        opts,
        Start { create: Some(new), resume_if_exists: true, on_start: Some(&said) },
    )
}

/// A new task's rows: its spec and its `Created` record (seq 0), the world directory made
/// absolute.
pub fn new_task(spec: &Spec, id: &str, world: &Path) -> TaskResult<NewTask> {
    let digest = spec.digest();
    let task = TaskId::try_from(id).map_err(|_| TaskError::bad_input("task id too long"))?;
    let created = Record::new(task, 0, Event::Created { spec_digest: digest, steps: spec.step_count() });
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
    let store = open(db, Access::Write)?;
    let store = &*store;
    let row = store.task_or_err(id)?;
    let spec = Spec::stored(&row.spec, &store.name(), id)?;
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
    let dir = world_dir(opts, world);
    match next_action(&st) {
        Action::Done => {
            say!("task {id}: already completed ({} steps)", st.step);
            return Ok(0);
        }
        Action::Failed => {
            say!("task {id}: failed earlier");
            return Ok(EXIT_FAILURE);
        }
        Action::AwaitReview { step } => {
            let mut tools = Toolbox::from_spec(spec, World::new(&dir))?;
            return report(store, id, &st, Stop::NeedsReview { step }, &mut tools);
        }
        _ => {}
    }
    let mut kit = Kit::from_spec(spec, &dir)?;
    run_and_report(store, id, spec, &mut kit, opts, Start { create: None, resume_if_exists: true, on_start: None })
}
