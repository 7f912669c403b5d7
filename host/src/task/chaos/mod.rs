//! `task chaos`: `kill -9` in real processes.
//!
//! Each iteration writes a fresh task spec (payments, lookups, at least one `send_email`, plain
//! model steps), starts the runner as a **child process** (this binary, `task run SPEC`), kills it
//! with `SIGKILL` after a delay drawn from the seed, restarts it, and repeats until the task
//! completes or pauses for review. A paused step is reviewed the way a human would: the email
//! tool's own file (`emails.sqlite`) is read; if it shows the call applied the step is marked done
//! (`task review --mark-done`), otherwise it is retried (`--retry`). Then the run goes on.
//!
//! At the end of each iteration [`check_task`] compares the spec, the log and the tools' own SQLite
//! files: every payment key applied exactly once, every email step applied exactly once, every
//! step has its model response and its result (or a `mark-done` review), no side effect outside
//! the spec. Any duplicate, lost step or unexpected runner error makes the exit status 1.
//!
//! **The window.** A kill "lands in the window" when, right after it, the log ends with an intent
//! and no result for a payment or email step *and* that tool's file gained a row for that step
//! while the killed runner was alive: the tool saw the call, the log never got its result. It is
//! counted exactly, from the files, after each kill. Lookups keep no file, so a kill with a lookup
//! in flight is counted separately (`kills_lookup_in_flight`), not as a window kill.
//!
//! **Aiming.** Each start draws one of two plans: a uniform delay over the time the remaining
//! steps are expected to take, or a kill aimed at the window (once the tools' files have the k-th
//! new call of this start, after a delay drawn up to about the time its result needs to reach the
//! log). The children also run with a step delay (`--step-delay-ms`, default 5 ms): the model call
//! and the time between "tool applied" and "result returned" each sleep that long, which widens
//! the window.
//!
//! **Pauses.** About one start in six is a pause instead: the runner is started with
//! `BROKERLAB_PAUSE_AT` and parks itself with `SIGSTOP` at a drawn point (right after a commit
//! between steps, after a tool's intent and before the lease margin check, or after that check
//! right before the call leaves), as a VM pause or a long GC pause would park it. Once its lease
//! (`--lease-ms`, 300 ms here) has expired, a second runner takes the task over and runs it to its
//! end (reviews answered from the tools' files); then the first gets `SIGCONT`. It must stop
//! without acting: its commits are fenced by the log, its calls by the tools' tokens or by the
//! margin rule. `fenced_calls` counts the calls the tools refused (from their own files). Pauses are
//! parked at points outside any SQLite transaction: a process stopped while holding SQLite's write
//! lock blocks every other writer of that file for as long as it is stopped (SQLite has one
//! writer), which is a liveness matter, not a safety one.
//!
//! **PostgreSQL** (`--db postgres://...`): the same run with the log in that database; with
//! `--pg-stop-cmd`/`--pg-start-cmd` a thread restarts the server every 5 to 20 s (down 0 to 5 s).
//! Runs cut by a restart (the runner names the lost connection, or cannot connect) are counted in
//! `server_aborts` and started again once the server accepts sessions; the parent's reads
//! reconnect.
//!
//! Modules: [`spec`] (the task specs), [`check`] (the exactly-once checker); the tools' files are
//! read through [`World`], their one owner.
//!
//! Delays are deterministic for a seed (ChaCha8, [`Draws`]); where a kill lands depends on timing too, so
//! two runs with the same seed hit the same delays, not necessarily the same points.

use std::collections::HashMap;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use brokerlab_core::runner::{Phase, TaskState};
use serde::Serialize;

use super::backend::TaskStore;
use super::pg::PgStore;
use super::spec::Spec;
use super::store::Store;
use super::world::{ToolFile, World};
use crate::error::EXIT_NEEDS_REVIEW;
use crate::task::error::{SERVER_GONE_NOTE, TaskError, TaskResult};

/// Options of `task chaos`.
#[derive(Debug, Clone)]
pub struct ChaosOpts {
    /// Tasks to run, each killed repeatedly.
    pub iterations: u32,
    /// Seed of the specs and the kill delays.
    pub seed: u64,
    /// Steps per task (>= 3).
    pub steps: u16,
    /// Print one JSON object.
    pub json: bool,
    /// Working directory (must not hold a `tasks.sqlite` yet); default a fresh temp dir, removed
    /// after a clean run.
    pub dir: Option<PathBuf>,
    /// The children's `--step-delay-ms`.
    pub step_delay_ms: u64,
    /// Most kills per iteration; after that the runner is left to finish.
    pub max_kills: u32,
    /// Re-check an existing chaos directory instead of running.
    pub verify: Option<PathBuf>,
    /// The children's lease, ms (a paused runner is taken over once it expires).
    pub lease_ms: u64,
    /// The log on a PostgreSQL database (`postgres://...`) instead of `DIR/tasks.sqlite`.
    pub db: Option<String>,
    /// Shell command that stops the PostgreSQL server (run with `sh -c`); with `pg_start_cmd`,
    /// restarts the server mid-run every 5 to 20 s, down for 0 to 5 s.
    pub pg_stop_cmd: Option<String>,
    /// Shell command that starts it again and returns once it accepts connections.
    pub pg_start_cmd: Option<String>,
    /// With `db`: run the tasks with this many `task worker` processes (0: one `task run` per
    /// task, the single-runner mode).
    pub workers: u32,
    /// The tools' records in this PostgreSQL database (`postgres://...`) instead of `DIR/world`.
    pub world: Option<String>,
}

/// The log store the chaos parent reads (the children open their own).
type Slot = Option<Box<dyn TaskStore>>;

/// A runner's stderr that says the database server went away or is not (yet) accepting
/// connections: a server restart, not a runner error. The runner classified its error from the
/// driver's (`TaskError::server_gone`) and said so with [`SERVER_GONE_NOTE`]; a child process's
/// stderr is the only thing the supervisor sees of it.
fn server_down(err: &str) -> bool {
    err.contains(SERVER_GONE_NOTE)
}

/// Waits (up to 60 s) until the database accepts a session again.
fn wait_for_server(ctx: &Ctx) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if PgStore::open(&ctx.db.to_string_lossy(), false).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Restarts of the PostgreSQL server, driven by a thread for the whole run.
#[derive(Debug, Default)]
struct Restarts {
    n: u64,
    down_ms: u64,
    problems: Vec<String>,
}

fn sh(cmd: &str) -> Result<(), String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{cmd}`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{cmd}` exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Every 5 to 20 s (drawn): the stop command, 0 to 5 s down (drawn), the start command; until
/// `stop` is set (a cycle under way is completed, so the server is up at the end).
fn restarter(stop_cmd: &str, start_cmd: &str, seed: u64, stop: &AtomicBool) -> Restarts {
    let mut r = Restarts::default();
    let mut rng = Draws::new(seed ^ 0x5E57_A127);
    loop {
        let until = Instant::now() + Duration::from_millis(5000 + rng.below(15_001));
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return r;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let down = rng.below(5001);
        let t = Instant::now();
        if let Err(e) = sh(stop_cmd) {
            r.problems.push(format!("stopping the server: {e}"));
        }
        std::thread::sleep(Duration::from_millis(down));
        if let Err(e) = sh(start_cmd) {
            r.problems.push(format!("starting the server: {e}"));
            return r;
        }
        r.n += 1;
        r.down_ms += t.elapsed().as_millis() as u64;
    }
}

pub mod check;
pub mod spec;
mod workers;

pub use check::{TaskCheck, check_task};
pub use spec::{Draws, chaos_spec};

/// Calls the task made to the tools that keep files, so far.
fn calls_made(world: &mut World, task: &str) -> TaskResult<usize> {
    world_retry(world, |w| {
        let mut n = 0;
        for f in ToolFile::ALL {
            n += w.calls(f, task)?.len();
        }
        Ok(n)
    })
}

/// Calls received per (tool, step), for the window count.
fn per_step(world: &mut World, task: &str) -> TaskResult<HashMap<(ToolFile, u16), usize>> {
    world_retry(world, |w| {
        let mut m = HashMap::new();
        for f in ToolFile::ALL {
            for c in w.calls(f, task)? {
                *m.entry((f, c.step)).or_insert(0) += 1;
            }
        }
        Ok(m)
    })
}

/// Totals of a chaos run (the `--json` object).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChaosReport {
    /// Tasks run.
    pub iterations: u32,
    /// Steps per task.
    pub steps: u16,
    /// Seed.
    pub seed: u64,
    /// Runner processes started (first starts and restarts).
    pub runs: u64,
    /// SIGKILLs that stopped a runner.
    pub kills: u64,
    /// Kills of runs aimed at the window (killed shortly after a tool's file got a call); the
    /// others are at uniform delays.
    pub kills_aimed: u64,
    /// Kills in the window: the tool's file got the call, the log has no result (counted exactly).
    pub window_kills: u64,
    /// Of which the payment tool.
    pub window_kills_payment: u64,
    /// Of which the email tool.
    pub window_kills_email: u64,
    /// Kills after an intent was durable but before the tool's file had the call.
    pub kills_intent_no_call: u64,
    /// Kills with a lookup in flight (a lookup keeps no file: not counted as window kills).
    pub kills_lookup_in_flight: u64,
    /// Kills anywhere else (start-up, model calls, commits between steps, before the task existed).
    pub kills_elsewhere: u64,
    /// Payment calls received again and deduplicated by key (replays after a kill).
    pub deduplicated: u64,
    /// Runners parked with SIGSTOP past their lease while a second runner took over.
    pub pauses: u64,
    /// Of which parked right before a tool call left (after the margin check).
    pub pauses_calling: u64,
    /// Of which parked after a tool's intent, before the margin check.
    pub pauses_before_tool: u64,
    /// Of which parked after a commit.
    pub pauses_after_commit: u64,
    /// Paused runners that, on waking, stopped with "fenced" (exit 1) without acting.
    pub paused_fenced: u64,
    /// Paused runners that found nothing left to do on waking (exit 0 or 3).
    pub paused_idle: u64,
    /// Calls the tools refused because they carried an old fencing token (from their own files).
    pub fenced_calls: u64,
    /// Non-idempotent steps sent to review (`needs-review` records).
    pub needs_review: u64,
    /// Reviews recorded `mark-done` (the email tool's file showed the call).
    pub reviews_mark_done: u64,
    /// Reviews recorded `retry` (it showed none).
    pub reviews_retry: u64,
    /// Side effects applied more than once (must be 0).
    pub duplicates: u64,
    /// Steps missing (must be 0).
    pub lost: u64,
    /// Runner processes that failed otherwise (exit status other than 0, 3 or SIGKILL; must be 0).
    pub errors: u64,
    /// The log's database: `sqlite` or `postgres`.
    pub backend: String,
    /// PostgreSQL server restarts during the run (stop, 0 to 5 s down, start).
    pub pg_restarts: u64,
    /// Total time from each stop command to the end of its start command, ms.
    pub pg_down_ms: u64,
    /// Runner (and review) processes that ended because the server was restarting (their
    /// session was cut, or they could not connect); each is started again.
    pub server_aborts: u64,
    /// Paused runners whose session was cut by a restart while they were parked: on waking
    /// they stopped at their first statement (their tool calls, if any, were fenced by the tools).
    pub paused_conn_lost: u64,
    /// `task worker` processes (0: one `task run` per task).
    pub workers: u32,
    /// Lines in the workers' stderr saying a run stopped fenced (a parked worker woke after a
    /// takeover, or a killed holder's successor was refused nothing: fenced stops only).
    pub worker_fenced_stops: u64,
    /// Lines in the workers' stderr saying a slot reconnected after the server went away.
    pub worker_reconnects: u64,
    /// Where the tools' records were: `files` (DIR/world) or `postgres`.
    pub world: String,
    /// The children's step delay.
    pub step_delay_ms: u64,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// The first problems found (at most 20).
    pub problems: Vec<String>,
    /// No duplicate, no lost step, no error.
    pub ok: bool,
    /// Working directory (kept after a violation).
    pub dir: String,
}

impl ChaosReport {
    fn problem(&mut self, p: String) {
        if self.problems.len() < 20 {
            self.problems.push(p);
        }
    }
    fn add_check(&mut self, c: TaskCheck) {
        self.duplicates += c.duplicates;
        self.lost += c.lost;
        self.deduplicated += c.deduplicated;
        self.fenced_calls += c.fenced_calls;
        self.needs_review += c.needs_review;
        for p in c.problems {
            self.problem(p);
        }
    }
}

/// The runner binary and where it works.
struct Ctx {
    exe: PathBuf,
    /// `DIR/tasks.sqlite`, or the PostgreSQL URL.
    db: PathBuf,
    pg: bool,
    world: PathBuf,
    specs: PathBuf,
    step_delay_ms: u64,
    lease_ms: u64,
}

impl Ctx {
    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.exe);
        c.env_remove("BROKERLAB_CRASH_AT").env_remove("BROKERLAB_STEP_DELAY_MS").env_remove("BROKERLAB_LEASE_MS");
        c.env_remove("BROKERLAB_PAUSE_AT").env_remove("BROKERLAB_UNFENCED_TOOLS");
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        c
    }
    fn spawn_run(&self, spec: &Path, pause_at: Option<&str>) -> TaskResult<Child> {
        let mut c = self.cmd();
        c.arg("task").arg("run").arg(spec).arg("--db").arg(&self.db).arg("--world").arg(&self.world);
        c.arg("--step-delay-ms").arg(self.step_delay_ms.to_string());
        c.arg("--lease-ms").arg(self.lease_ms.to_string());
        if let Some(p) = pause_at {
            c.env("BROKERLAB_PAUSE_AT", p);
        }
        c.spawn().map_err(|e| TaskError::failure(format!("{}: cannot start the runner: {e}", self.exe.display())))
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s.trim().to_string()
}

#[cfg(unix)]
fn was_sigkilled(st: &ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    st.signal() == Some(9)
}

#[cfg(not(unix))]
fn was_sigkilled(st: &ExitStatus) -> bool {
    // `Child::kill` is TerminateProcess, exit code 1
    st.code() == Some(1)
}

/// When to kill a runner.
#[derive(Debug, Clone, Copy)]
enum KillPlan {
    /// Let it finish.
    Never,
    /// At this time after the start.
    After(Duration),
    /// Aimed at the window: once the tools' files have received `calls` more calls for the task
    /// than at the start, wait `extra` and kill.
    AfterCalls { calls: usize, extra: Duration },
}

/// Waits for the child, killing it (SIGKILL) as `plan` says unless it exits before. Returns its
/// status.
fn wait_or_kill(
    child: &mut Child,
    started: Instant,
    plan: KillPlan,
    world: &mut World,
    id: &str,
    calls_before: usize,
) -> TaskResult<ExitStatus> {
    let io = |e: std::io::Error| TaskError::failure(format!("waiting for the runner: {e}"));
    let mut deadline = match plan {
        KillPlan::Never => return child.wait().map_err(io),
        KillPlan::After(d) => Some(started + d),
        KillPlan::AfterCalls { .. } => None,
    };
    loop {
        if let Some(st) = child.try_wait().map_err(io)? {
            return Ok(st);
        }
        let now = Instant::now();
        match (deadline, plan) {
            (Some(d), _) if now >= d => break,
            (Some(d), _) => std::thread::sleep((d - now).min(Duration::from_micros(500))),
            (None, KillPlan::AfterCalls { calls, extra }) => {
                // the tool has committed the call: the window is open from here on
                if calls_made(world, id)? >= calls_before + calls {
                    deadline = Some(Instant::now() + extra);
                } else {
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
            (None, _) => break,
        }
    }
    // SIGKILL on Unix; an error here means it already exited (wait tells which)
    let _ = child.kill();
    child.wait().map_err(io)
}

/// Where the kill landed, read from the log and the tools' files right after it.
fn classify_kill(
    rep: &mut ChaosReport,
    after: Option<&TaskState>,
    world: &mut World,
    id: &str,
    before: &HashMap<(ToolFile, u16), usize>,
) -> TaskResult<()> {
    let Some(st) = after else {
        rep.kills_elsewhere += 1;
        return Ok(());
    };
    let Phase::InFlight { call, .. } = &st.phase else {
        rep.kills_elsewhere += 1;
        return Ok(());
    };
    let file = match call.tool.as_str() {
        "payment" => ToolFile::Payments,
        "send_email" => ToolFile::Emails,
        _ => {
            rep.kills_lookup_in_flight += 1;
            return Ok(());
        }
    };
    let now = per_step(world, id)?;
    let k = (file, st.step);
    if now.get(&k).copied().unwrap_or(0) > before.get(&k).copied().unwrap_or(0) {
        rep.window_kills += 1;
        if file == ToolFile::Payments {
            rep.window_kills_payment += 1;
        } else {
            rep.window_kills_email += 1;
        }
    } else {
        rep.kills_intent_no_call += 1;
    }
    Ok(())
}

/// The task's state from the log, if the database and the task exist. On PostgreSQL a failure
/// (the server restarting) reconnects and tries again, for up to 60 s.
fn task_state(store: &mut Slot, ctx: &Ctx, id: &str) -> TaskResult<Option<TaskState>> {
    let t = Instant::now();
    loop {
        match task_state_once(store, ctx, id) {
            Err(_) if ctx.pg && t.elapsed() < Duration::from_secs(60) => {
                *store = None;
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

/// [`check_task`], reconnecting as [`task_state`] does.
fn check_with_retry(store: &mut Slot, ctx: &Ctx, world: &mut World, id: &str) -> TaskResult<TaskCheck> {
    let t = Instant::now();
    loop {
        if store.is_none() && ctx.pg {
            match PgStore::open(&ctx.db.to_string_lossy(), false) {
                Ok(s) => *store = Some(Box::new(s)),
                Err(_) if t.elapsed() < Duration::from_secs(60) => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        let Some(s) = store.as_deref() else { return Err(TaskError::failure("no log store")) };
        match check_task(s, world, id) {
            Err(_) if ctx.pg && t.elapsed() < Duration::from_secs(60) => {
                *store = None;
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

fn task_state_once(store: &mut Slot, ctx: &Ctx, id: &str) -> TaskResult<Option<TaskState>> {
    if store.is_none() {
        if ctx.pg {
            // the schema was created before the first runner started
            *store = Some(Box::new(PgStore::open(&ctx.db.to_string_lossy(), false)?));
        } else {
            if !ctx.db.exists() {
                return Ok(None);
            }
            // a runner killed while creating the file leaves it without the schema: not ours yet
            match Store::open(&ctx.db, false) {
                Ok(s) => *store = Some(Box::new(s)),
                Err(_) => return Ok(None),
            }
        }
    }
    let Some(s) = store.as_deref() else { return Ok(None) };
    if s.task(id)?.is_none() {
        return Ok(None);
    }
    s.replay(id).map(Some)
}

/// Checks task `id` (exactly once) into `rep`; a task missing from the log counts all its steps
/// lost.
fn check_one(
    rep: &mut ChaosReport,
    store: &mut Slot,
    ctx: &Ctx,
    world: &mut World,
    id: &str,
    steps: u16,
) -> TaskResult<()> {
    let st = task_state(store, ctx, id)?;
    match st.map(|_| check_with_retry(store, ctx, world, id)).transpose()? {
        Some(c) => rep.add_check(c),
        None => {
            rep.lost += u64::from(steps);
            rep.problem(format!("{id}: no task in the log"));
        }
    }
    Ok(())
}

/// Payment and email steps from `from` on (the calls a run still makes, at least).
fn effects_from(spec: &Spec, from: usize) -> usize {
    spec.steps.iter().skip(from).filter(|s| matches!(s.tool.as_deref(), Some("payment" | "send_email"))).count()
}

/// How fast the runners make progress, killed or not: wall time per step over all runs so far
/// (start-up included), to scale the kill delays to the time a run still needs.
#[derive(Debug, Clone, Copy)]
struct Pace {
    ms: f64,
    steps: f64,
}

impl Pace {
    fn per_step_ms(&self) -> f64 {
        self.ms / self.steps.max(1.0)
    }
    fn add(&mut self, ms: f64, steps: f64) {
        self.ms += ms;
        self.steps += steps.max(0.0);
    }
}

/// Runs one iteration: the task `id` until it completes (or fails), killing and reviewing.
#[allow(clippy::too_many_arguments)]
fn iteration(
    rep: &mut ChaosReport,
    store: &mut Slot,
    ctx: &Ctx,
    world: &mut World,
    opts: &ChaosOpts,
    i: u32,
    pace: &mut Pace,
) -> TaskResult<()> {
    let id = format!("chaos-{}-{i}", opts.seed);
    let mut rng = Draws::new(opts.seed.wrapping_mul(0xD134_2543_DE82_EF95) ^ (u64::from(i) << 1 | 1));
    let spec_text = chaos_spec(&id, opts.steps, &mut rng);
    let spec_path = ctx.specs.join(format!("{id}.toml"));
    std::fs::write(&spec_path, &spec_text)
        .map_err(|e| TaskError::failure(format!("{}: cannot write the spec: {e}", spec_path.display())))?;
    let spec = Spec::parse(&spec_text).map_err(|e| TaskError::failure(format!("generated spec {id}: {e}")))?;
    let steps = f64::from(opts.steps);
    let mut kills_here = 0u32;
    let mut st = task_state(store, ctx, &id)?;
    for _attempt in 0..(opts.max_kills + 50) {
        let done_before = st.as_ref().map_or(0.0, |s| f64::from(s.step));
        let before = per_step(world, &id)?;
        let calls_before = before.values().sum::<usize>();
        if kills_here < opts.max_kills && rng.below(6) == 0 {
            let left = effects_from(&spec, done_before as usize).max(1) as u64;
            let steps_left = (steps - done_before).max(1.0) as u64;
            let at = match rng.below(10) {
                0..4 => format!("calling:{}", 1 + rng.below(left)),
                4..7 => format!("before-tool:{}", 1 + rng.below(left)),
                _ => format!("after-commit:{}", 1 + rng.below(steps_left)),
            };
            if pause_then_takeover(rep, store, ctx, world, &id, &spec_path, &at)? {
                return Ok(());
            }
            kills_here += 1;
            st = task_state(store, ctx, &id)?;
            continue;
        }
        let plan = if kills_here >= opts.max_kills {
            KillPlan::Never
        } else if rng.below(2) == 0 {
            // aimed: after the k-th call a payment or email tool commits in this run, within
            // the time its result needs to reach the log (tool delay, next model call, commit)
            let left = effects_from(&spec, done_before as usize);
            let extra_us = (2 * opts.step_delay_ms + 4) * 1000;
            KillPlan::AfterCalls {
                calls: 1 + rng.below(left.max(1) as u64) as usize,
                extra: Duration::from_micros(rng.below(extra_us)),
            }
        } else {
            // uniform over the time the remaining steps are expected to take, +25 %
            let horizon_us = pace.per_step_ms() * 1000.0 * (steps - done_before).max(1.0) * 1.25;
            KillPlan::After(Duration::from_micros(rng.below((horizon_us as u64).max(1000))))
        };
        let started = Instant::now();
        let mut child = ctx.spawn_run(&spec_path, None)?;
        rep.runs += 1;
        let status = wait_or_kill(&mut child, started, plan, world, &id, calls_before)?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let err = stderr_of(&mut child);
        st = task_state(store, ctx, &id)?;
        pace.add(ms, st.as_ref().map_or(0.0, |s| f64::from(s.step)) - done_before);
        if was_sigkilled(&status) {
            rep.kills += 1;
            rep.kills_aimed += u64::from(matches!(plan, KillPlan::AfterCalls { .. }));
            kills_here += 1;
            classify_kill(rep, st.as_ref(), world, &id, &before)?;
            continue;
        }
        match status.code() {
            Some(0) => return Ok(()),
            Some(EXIT_NEEDS_REVIEW) => review(rep, store, ctx, world, &id)?,
            _ if ctx.pg && server_down(&err) => {
                rep.server_aborts += 1;
                wait_for_server(ctx);
            }
            _ => {
                rep.errors += 1;
                rep.problem(format!("{id}: runner exited with {status}: {err}"));
                return Ok(());
            }
        }
    }
    rep.errors += 1;
    rep.problem(format!("{id}: not finished after {} runs", opts.max_kills + 50));
    Ok(())
}

/// Starts a runner that parks itself at `at` (`BROKERLAB_PAUSE_AT`), waits for its lease to
/// expire, lets other runners take the task over and run it to its end, then wakes the parked
/// runner and checks it stops without acting. Returns true when the task is finished; false when
/// the runner ended before reaching the point (the caller goes on as after any start).
#[allow(clippy::too_many_arguments)]
fn pause_then_takeover(
    rep: &mut ChaosReport,
    store: &mut Slot,
    ctx: &Ctx,
    world: &mut World,
    id: &str,
    spec: &Path,
    at: &str,
) -> TaskResult<bool> {
    let io = |e: std::io::Error| TaskError::failure(format!("waiting for the runner: {e}"));
    let mut first = ctx.spawn_run(spec, Some(at))?;
    rep.runs += 1;
    let pid = first.id();
    // parked, or ended before the point
    loop {
        if let Some(status) = first.try_wait().map_err(io)? {
            let err = stderr_of(&mut first);
            return match status.code() {
                Some(0) => Ok(true),
                Some(EXIT_NEEDS_REVIEW) => {
                    review(rep, store, ctx, world, id)?;
                    Ok(false)
                }
                _ if ctx.pg && server_down(&err) => {
                    rep.server_aborts += 1;
                    wait_for_server(ctx);
                    Ok(false)
                }
                _ => {
                    rep.errors += 1;
                    rep.problem(format!("{id}: runner (pause at {at}) exited with {status}: {err}"));
                    Ok(true)
                }
            };
        }
        if crate::sys::child_is_stopped(pid) {
            break;
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    rep.pauses += 1;
    match at.split(':').next() {
        Some("calling") => rep.pauses_calling += 1,
        Some("before-tool") => rep.pauses_before_tool += 1,
        _ => rep.pauses_after_commit += 1,
    }
    std::thread::sleep(Duration::from_millis(ctx.lease_ms + 20));
    // the takeover: run to the end, answering reviews; a lease that still looks live is waited out
    let mut finished = false;
    for _ in 0..40 {
        let mut c = ctx.spawn_run(spec, None)?;
        rep.runs += 1;
        let status = c.wait().map_err(io)?;
        let err = stderr_of(&mut c);
        match status.code() {
            Some(0) => {
                finished = true;
                break;
            }
            Some(EXIT_NEEDS_REVIEW) => review(rep, store, ctx, world, id)?,
            Some(1) if err.contains("already being run") => std::thread::sleep(Duration::from_millis(50)),
            _ if ctx.pg && server_down(&err) => {
                rep.server_aborts += 1;
                wait_for_server(ctx);
            }
            _ => {
                rep.errors += 1;
                rep.problem(format!("{id}: takeover runner exited with {status}: {err}"));
                break;
            }
        }
    }
    if !finished {
        rep.errors += 1;
        rep.problem(format!("{id}: the takeover after a pause at {at} did not finish"));
    }
    if !crate::sys::stop_or_continue(pid, false) {
        rep.problem(format!("{id}: SIGCONT to {pid} failed"));
    }
    let status = first.wait().map_err(io)?;
    let err = stderr_of(&mut first);
    match status.code() {
        Some(1) if err.contains("fenced") => rep.paused_fenced += 1,
        Some(0 | EXIT_NEEDS_REVIEW) => rep.paused_idle += 1,
        _ if ctx.pg && server_down(&err) => rep.paused_conn_lost += 1,
        _ => {
            rep.errors += 1;
            rep.problem(format!("{id}: the paused runner (at {at}) exited with {status} on waking: {err}"));
        }
    }
    Ok(true)
}

/// `read` on the tools' records; with the records in PostgreSQL, a failure (the server
/// restarting) is retried for up to 60 s, as the log's reads are.
fn world_retry<T>(world: &mut World, mut read: impl FnMut(&mut World) -> TaskResult<T>) -> TaskResult<T> {
    let t = Instant::now();
    loop {
        match read(world) {
            Err(_) if world.is_pg() && t.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

/// Reviews the paused step as a human would, from the email tool's own file.
fn review(rep: &mut ChaosReport, store: &mut Slot, ctx: &Ctx, world: &mut World, id: &str) -> TaskResult<()> {
    let Some(st) = task_state(store, ctx, id)? else {
        return Err(TaskError::failure(format!("{id}: paused for review but has no log")));
    };
    let Phase::Review { .. } = st.phase else {
        return Err(TaskError::failure(format!("{id}: exit 3 but no step waits for review")));
    };
    let sent = world_retry(world, |w| w.calls(ToolFile::Emails, id))?.iter().any(|c| c.step == st.step && c.applied);
    let decision = if sent { "--mark-done" } else { "--retry" };
    if sent {
        rep.reviews_mark_done += 1;
    } else {
        rep.reviews_retry += 1;
    }
    let mut out;
    let mut tries = 0;
    loop {
        let mut c = ctx.cmd();
        c.arg("task").arg("review").arg(id).arg("--step").arg(st.step.to_string()).arg(decision);
        c.arg("--db").arg(&ctx.db);
        out = c.output().map_err(|e| TaskError::failure(format!("cannot start `task review`: {e}")))?;
        tries += 1;
        let err = String::from_utf8_lossy(&out.stderr);
        // a runner woke (or was taken over) under the reviewer: the log moved on, or a row is
        // locked for a moment; try again
        if !out.status.success() && tries <= 20 && (err.contains("the log changed") || err.contains("locked by")) {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if out.status.success() || !ctx.pg || tries > 20 || !server_down(&err) {
            break;
        }
        rep.server_aborts += 1;
        wait_for_server(ctx);
    }
    if !out.status.success() {
        rep.errors += 1;
        rep.problem(format!(
            "{id}: `task review --step {} {decision}` exited with {}: {}",
            st.step,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

fn progress(on: bool, done: u32, rep: &ChaosReport, t: Instant) {
    if !on {
        return;
    }
    let total = rep.iterations.max(1);
    let w = 30usize;
    let fill = (done as usize * w) / total as usize;
    let mut e = std::io::stderr().lock();
    let _ = write!(
        e,
        "\r[{}{}] {done}/{total}  kills {}  window {}  reviews {}  dup {}  lost {}  {:.0}s ",
        "#".repeat(fill),
        ".".repeat(w - fill),
        rep.kills,
        rep.window_kills,
        rep.needs_review,
        rep.duplicates,
        rep.lost,
        t.elapsed().as_secs_f64()
    );
    if done == total {
        let _ = writeln!(e);
    }
    let _ = e.flush();
}

fn print_text(rep: &ChaosReport) {
    say!(
        "task chaos: {} iterations of {} steps, seed {}, step delay {} ms",
        rep.iterations,
        rep.steps,
        rep.seed,
        rep.step_delay_ms
    );
    let pct = |n: u64| if rep.kills == 0 { 0.0 } else { 100.0 * n as f64 / rep.kills as f64 };
    say!("  runner processes started     {}", rep.runs);
    say!(
        "  SIGKILLs                     {} ({} aimed at the window, the rest at uniform delays)",
        rep.kills,
        rep.kills_aimed
    );
    say!(
        "    in the window              {} ({:.0} %; payment {}, email {}): the tool's file has the call, the log \
         no result",
        rep.window_kills,
        pct(rep.window_kills),
        rep.window_kills_payment,
        rep.window_kills_email
    );
    say!("    intent durable, no call    {} ({:.0} %)", rep.kills_intent_no_call, pct(rep.kills_intent_no_call));
    say!("    lookup in flight           {} ({:.0} %)", rep.kills_lookup_in_flight, pct(rep.kills_lookup_in_flight));
    say!("    elsewhere                  {} ({:.0} %)", rep.kills_elsewhere, pct(rep.kills_elsewhere));
    say!("  replays deduplicated by key  {}", rep.deduplicated);
    say!(
        "  pauses past the lease        {} (right before a call {}, before the margin check {}, after a commit {})",
        rep.pauses,
        rep.pauses_calling,
        rep.pauses_before_tool,
        rep.pauses_after_commit
    );
    say!("    woke and stopped, fenced   {} (found nothing to do: {})", rep.paused_fenced, rep.paused_idle);
    say!("  calls refused by a fence     {}", rep.fenced_calls);
    say!(
        "  sent to review               {} (marked done {}, retried {})",
        rep.needs_review,
        rep.reviews_mark_done,
        rep.reviews_retry
    );
    say!("  duplicates                   {}", rep.duplicates);
    say!("  lost steps                   {}", rep.lost);
    say!("  runner errors                {}", rep.errors);
    if rep.backend == "postgres" {
        say!(
            "  PostgreSQL restarts          {} ({:.1} s down in all); runs cut by them {}, paused runners cut {}",
            rep.pg_restarts,
            rep.pg_down_ms as f64 / 1000.0,
            rep.server_aborts,
            rep.paused_conn_lost
        );
    }
    say!("  wall time                    {:.1} s", rep.wall_s);
    if rep.window_kills == 0 && rep.iterations > 0 {
        say!("  WARNING: no kill landed in the window between \"tool call sent\" and \"result recorded\"");
    }
    for p in &rep.problems {
        say!("  problem: {p}");
    }
    say!("  {}", if rep.ok { "ok: every payment key applied once, no step lost" } else { "FAILED" });
}

fn finish(rep: &ChaosReport, json: bool) -> i32 {
    if json {
        say!("{}", serde_json::to_string(rep).unwrap_or_default());
    } else {
        print_text(rep);
    }
    if rep.ok { 0 } else { 1 }
}

/// `task chaos`.
pub fn chaos(opts: &ChaosOpts) -> TaskResult<i32> {
    if let Some(dir) = &opts.verify {
        return verify(dir, opts.db.as_deref(), opts.world.as_deref(), opts.json);
    }
    if opts.iterations == 0 {
        return Err(TaskError::bad_input("--iterations must be at least 1"));
    }
    if !(3..=1000).contains(&opts.steps) {
        return Err(TaskError::bad_input(format!("--steps {}: expected 3 to 1000", opts.steps)));
    }
    if opts.pg_stop_cmd.is_some() != opts.pg_start_cmd.is_some() {
        return Err(TaskError::bad_input("give both --pg-stop-cmd and --pg-start-cmd, or neither"));
    }
    if opts.workers > 0 && opts.db.is_none() {
        return Err(TaskError::bad_input("--workers needs --db postgres://... (the workers share the log)"));
    }
    if opts.pg_stop_cmd.is_some() && opts.db.is_none() {
        return Err(TaskError::bad_input("--pg-stop-cmd and --pg-start-cmd need --db postgres://..."));
    }
    let (dir, temp) = match &opts.dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("brokerlab-chaos-{}", std::process::id())), true),
    };
    if opts.db.is_none() && dir.join("tasks.sqlite").exists() {
        return Err(TaskError::bad_input(format!(
            "{}: already holds a tasks.sqlite; give an empty --dir (or check it with --verify)",
            dir.display()
        )));
    }
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    if let Some(url) = &opts.db {
        // the schema before the first runner, and a database without tasks: the chaos tasks'
        // ids repeat from run to run
        let s = PgStore::open(url, true)?;
        let n = s.task_ids()?.len();
        if n > 0 {
            return Err(TaskError::bad_input(format!(
                "{}: already holds {n} task(s); give an empty database (or check it with --verify DIR --db URL)",
                s.name()
            )));
        }
    }
    let ctx = Ctx {
        exe: std::env::current_exe().map_err(|e| TaskError::failure(format!("cannot find this binary: {e}")))?,
        db: match &opts.db {
            Some(url) => PathBuf::from(url),
            None => dir.join("tasks.sqlite"),
        },
        pg: opts.db.is_some(),
        world: match &opts.world {
            Some(url) => PathBuf::from(url),
            None => dir.join("world"),
        },
        specs: dir.join("specs"),
        step_delay_ms: opts.step_delay_ms,
        lease_ms: opts.lease_ms,
    };
    std::fs::create_dir_all(&ctx.specs)
        .map_err(|e| TaskError::bad_input(format!("{}: cannot create: {e}", ctx.specs.display())))?;
    let mut rep = ChaosReport {
        iterations: opts.iterations,
        steps: opts.steps,
        seed: opts.seed,
        step_delay_ms: opts.step_delay_ms,
        dir: dir.display().to_string(),
        backend: if ctx.pg { "postgres" } else { "sqlite" }.into(),
        workers: opts.workers,
        world: if opts.world.is_some() { "postgres" } else { "files" }.into(),
        ..ChaosReport::default()
    };
    let t = Instant::now();
    let mut store: Slot = None;
    let mut world = World::new(&ctx.world);
    // Calibration: one task without kills, to scale the kill delays (not counted; the workers
    // mode spaces its actions by the step delay instead).
    let mut pace = Pace { ms: 0.0, steps: 1.0 };
    if opts.workers == 0 {
        let calib = format!("chaos-{}-calibration", opts.seed);
        let calib_spec = ctx.specs.join(format!("{calib}.toml"));
        let text = chaos_spec(&calib, opts.steps, &mut Draws::new(opts.seed ^ 0xCA11));
        std::fs::write(&calib_spec, text).map_err(|e| TaskError::failure(format!("{}: {e}", calib_spec.display())))?;
        let t0 = Instant::now();
        let mut child = ctx.spawn_run(&calib_spec, None)?;
        let status = wait_or_kill(&mut child, t0, KillPlan::Never, &mut world, &calib, 0)?;
        pace = Pace { ms: t0.elapsed().as_secs_f64() * 1000.0, steps: f64::from(opts.steps) };
        if !status.success() {
            return Err(TaskError::failure(format!(
                "the calibration run (no kill) failed with {status}: {}",
                stderr_of(&mut child)
            )));
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let restarts = match (&opts.pg_stop_cmd, &opts.pg_start_cmd) {
        (Some(a), Some(b)) => {
            let (a, b, seed, stop) = (a.clone(), b.clone(), opts.seed, stop.clone());
            Some(std::thread::spawn(move || restarter(&a, &b, seed, &stop)))
        }
        _ => None,
    };
    let tty = std::io::stderr().is_terminal();
    let mut failed = None;
    if opts.workers > 0 {
        match workers::run(&mut rep, &mut store, &ctx, &mut world, opts, opts.workers) {
            Ok(ids) => {
                for (n, id) in ids.iter().enumerate() {
                    if let Err(e) = check_one(&mut rep, &mut store, &ctx, &mut world, id, opts.steps) {
                        failed = Some(e);
                        break;
                    }
                    progress(tty, n as u32 + 1, &rep, t);
                }
            }
            Err(e) => failed = Some(e),
        }
    }
    for i in (0..opts.iterations).filter(|_| opts.workers == 0) {
        if let Err(e) = iteration(&mut rep, &mut store, &ctx, &mut world, opts, i, &mut pace) {
            failed = Some(e);
            break;
        }
        let id = format!("chaos-{}-{i}", opts.seed);
        if let Err(e) = check_one(&mut rep, &mut store, &ctx, &mut world, &id, opts.steps) {
            failed = Some(e);
            break;
        }
        progress(tty, i + 1, &rep, t);
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(h) = restarts {
        let r = h.join().unwrap_or_default();
        rep.pg_restarts = r.n;
        rep.pg_down_ms = r.down_ms;
        for p in r.problems {
            rep.errors += 1;
            rep.problem(p);
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    rep.wall_s = t.elapsed().as_secs_f64();
    rep.ok = rep.duplicates == 0 && rep.lost == 0 && rep.errors == 0;
    let code = finish(&rep, opts.json);
    drop(store);
    drop(world);
    if temp && rep.ok {
        let _ = std::fs::remove_dir_all(&dir);
    } else if !rep.ok {
        eprintln!("brokerlab: chaos files kept in {}", dir.display());
    }
    Ok(code)
}

/// `task chaos --verify DIR [--db URL] [--world URL]`: re-checks every task of an existing chaos directory.
fn verify(dir: &Path, url: Option<&str>, world_url: Option<&str>, json: bool) -> TaskResult<i32> {
    let store: Box<dyn TaskStore> = match url {
        Some(u) => Box::new(PgStore::open(u, false)?),
        None => Box::new(Store::open(&dir.join("tasks.sqlite"), false)?),
    };
    let store = &*store;
    let mut world = World::new(&world_url.map_or_else(|| dir.join("world"), PathBuf::from));
    let ids = store.task_ids()?;
    let mut rep = ChaosReport { dir: dir.display().to_string(), ..ChaosReport::default() };
    for id in &ids {
        let c = check_task(store, &mut world, id)?;
        rep.iterations += 1;
        rep.reviews_mark_done += c.reviews_mark_done;
        rep.reviews_retry += c.reviews_retry;
        rep.add_check(c);
    }
    rep.ok = rep.duplicates == 0 && rep.lost == 0;
    if json {
        say!("{}", serde_json::to_string(&rep).unwrap_or_default());
    } else {
        say!(
            "task chaos --verify {}: {} tasks, duplicates {}, lost {}, deduplicated {}, reviews {}",
            dir.display(),
            rep.iterations,
            rep.duplicates,
            rep.lost,
            rep.deduplicated,
            rep.needs_review
        );
        for p in &rep.problems {
            say!("  problem: {p}");
        }
        say!("  {}", if rep.ok { "ok" } else { "FAILED" });
    }
    Ok(if rep.ok { 0 } else { 1 })
}
