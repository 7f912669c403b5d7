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
//! Modules: [`spec`] (the task specs), [`check`] (the exactly-once checker), `supervise` (one
//! iteration: runners started, killed, paused, reviewed), `restart` (the server restarts),
//! `report` (the counts and their printing), `workers` (the `--workers` mode); the tools' files are
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

use super::backend::{Access, TaskStore};
use super::pg::PgStore;
use super::spec::Spec;
use super::store::Store;
use super::world::{ToolFile, World};
use crate::error::EXIT_NEEDS_REVIEW;
use crate::task::error::{SERVER_GONE_NOTE, TaskError, TaskResult};

/// Options of `task chaos` (its flags).
#[derive(Debug, Clone, clap::Args)]
pub struct ChaosOpts {
    /// Tasks to run (each killed repeatedly).
    #[arg(long, default_value_t = 200)]
    pub iterations: u32,
    /// Seed of the task specs and the kill delays.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Steps per task (payments, lookups, emails, plain model steps; >= 3).
    #[arg(long, default_value_t = 12)]
    pub steps: u16,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Working directory (log, tools' files, specs); default a fresh temp dir, removed after
    /// a clean run and kept after a violation.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The runners' step delay (model call, and between "tool applied" and "result returned").
    #[arg(long, value_name = "MS", default_value_t = 5)]
    pub step_delay_ms: u64,
    /// Most kills per task; then the runner is left to finish.
    #[arg(long, value_name = "N", default_value_t = 6)]
    pub max_kills: u32,
    /// Re-check the tasks of an existing chaos directory (no runs).
    #[arg(long, value_name = "DIR", conflicts_with = "dir")]
    pub verify: Option<PathBuf>,
    /// The runners' lease (a runner paused past it is taken over).
    #[arg(long, value_name = "MS", default_value_t = 300)]
    pub lease_ms: u64,
    /// The log on this PostgreSQL database (postgres://USER@HOST:PORT/DB, with no tasks yet)
    /// instead of DIR/tasks.sqlite; the tools' files stay in DIR.
    #[arg(long, value_name = "URL")]
    pub db: Option<String>,
    /// Shell command that stops the PostgreSQL server (e.g. `pg_ctl -D DATA -m fast stop`):
    /// with --pg-start-cmd, the server is restarted every 5 to 20 s, down 0 to 5 s.
    #[arg(long, value_name = "CMD", requires = "pg_start_cmd")]
    pub pg_stop_cmd: Option<String>,
    /// Shell command that starts it again and returns once it accepts connections (e.g.
    /// `pg_ctl -D DATA -l LOG -w start`).
    #[arg(long, value_name = "CMD", requires = "pg_stop_cmd")]
    pub pg_start_cmd: Option<String>,
    /// With --db: run the tasks with K `task worker` processes (submitted up front; workers
    /// killed, parked past their lease and woken at random) instead of one `task run` each.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub workers: u32,
    /// Keep the tools' records in this PostgreSQL database (postgres://..., may be the log's)
    /// instead of DIR/world.
    #[arg(long, value_name = "URL")]
    pub world: Option<String>,
    /// The tasks' tools: the built-in simulated ones, or HTTP tools (`find`, `pay`, `mail`) on
    /// the in-repo tool server (`task serve-tools`, started here on loopback with its own file
    /// DIR/tool-server.sqlite, injected faults, and killed with SIGKILL and restarted every 1 to
    /// 4 s), which is then the witness the checks read.
    #[arg(long, value_enum, default_value_t = ToolsMode::Builtin)]
    pub tools: ToolsMode,
    /// The tasks' model: the scripted one, or `kind = "openai"` against the in-repo
    /// OpenAI-compatible server (`task serve-model`, started here, with injected 429s, 5xx and
    /// extra tool calls) playing each task's calls from its prompt, then answering.
    #[arg(long, value_enum, default_value_t = ModelMode::Script)]
    pub model: ModelMode,
}

/// The log store the chaos parent reads (the children open their own).
type Slot = Option<Box<dyn TaskStore>>;

pub mod check;
mod report;
mod restart;
mod supervise;

pub mod spec;

mod workers;

pub use check::{TaskCheck, check_task, copied_intent_steps};

pub use report::ChaosReport;
use report::{finish, progress};
use restart::{restarter, server_down, wait_for_server};
pub use spec::{Draws, Endpoints, ModelMode, StepKind, ToolsMode, chaos_spec, chaos_spec_for, plan_of};
mod servers;
use servers::Servers;
use supervise::{KillPlan, Pace, iteration, review, says_corruption, stderr_of, wait_or_kill, world_retry};

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
    /// The tasks' tools and model, and where their servers listen.
    tools: ToolsMode,
    model: ModelMode,
    at: Endpoints,
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
            match Store::open(&ctx.db, Access::Read) {
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

/// The options' own consistency (before anything is created).
fn check_opts(opts: &ChaosOpts) -> TaskResult<()> {
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
    let served = opts.tools == ToolsMode::Http || opts.model == ModelMode::Openai;
    if served && (opts.workers > 0 || opts.world.is_some()) {
        return Err(TaskError::bad_input(
            "--tools http and --model openai run with `task run` children and the tool server's file: not with \
             --workers or --world",
        ));
    }
    if opts.pg_stop_cmd.is_some() && opts.db.is_none() {
        return Err(TaskError::bad_input("--pg-stop-cmd and --pg-start-cmd need --db postgres://..."));
    }
    Ok(())
}

/// The run's directory (a temporary one when none is given: true) and its database, both
/// checked to be empty: the chaos tasks' ids repeat from run to run.
fn prepare(opts: &ChaosOpts) -> TaskResult<(PathBuf, bool)> {
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
        // the schema before the first runner, created as a fault-injection database (the
        // runners' pauses and crashes are fault hooks), and a database without tasks: the chaos
        // tasks' ids repeat from run to run
        PgStore::init_db(url, true)?;
        let s = PgStore::open(url, false)?;
        let n = s.task_ids()?.len();
        if n > 0 {
            return Err(TaskError::bad_input(format!(
                "{}: already holds {n} task(s); give an empty database (or check it with --verify DIR --db URL)",
                s.name()
            )));
        }
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| TaskError::bad_input(format!("{}: cannot create: {e}", dir.display())))?;
    Ok((dir, temp))
}

/// Calibration: one task without kills, to scale the kill delays (not counted; the workers mode
/// spaces its actions by the step delay instead).
fn calibrate(opts: &ChaosOpts, ctx: &Ctx, world: &mut World) -> TaskResult<Pace> {
    let calib = format!("chaos-{}-calibration", opts.seed);
    let calib_spec = ctx.specs.join(format!("{calib}.toml"));
    let text = chaos_spec_for(&calib, opts.steps, &mut Draws::new(opts.seed ^ 0xCA11), ctx.tools, ctx.model, &ctx.at);
    std::fs::write(&calib_spec, text).map_err(|e| TaskError::failure(format!("{}: {e}", calib_spec.display())))?;
    let t0 = Instant::now();
    let mut child = ctx.spawn_run(&calib_spec, None)?;
    let status = wait_or_kill(&mut child, t0, KillPlan::Never, world, &calib, 0)?;
    let pace = Pace { ms: t0.elapsed().as_secs_f64() * 1000.0, steps: f64::from(opts.steps) };
    if !status.success() {
        return Err(TaskError::failure(format!(
            "the calibration run (no kill) failed with {status}: {}",
            stderr_of(&mut child)
        )));
    }
    Ok(pace)
}

/// Runs the tasks (by `task run` children, or by `--workers`) and checks each as it ends; the
/// first error stops the run.
fn run_tasks(
    rep: &mut ChaosReport,
    store: &mut Slot,
    ctx: &Ctx,
    world: &mut World,
    opts: &ChaosOpts,
    pace: &mut Pace,
    t: Instant,
) -> TaskResult<()> {
    let tty = std::io::stderr().is_terminal();
    if opts.workers > 0 {
        let ids = workers::run(rep, store, ctx, world, opts, opts.workers)?;
        for (n, id) in ids.iter().enumerate() {
            check_one(rep, store, ctx, world, id, opts.steps)?;
            progress(tty, n as u32 + 1, rep, t);
        }
    }
    for i in (0..opts.iterations).filter(|_| opts.workers == 0) {
        iteration(rep, store, ctx, world, opts, i, pace)?;
        let id = format!("chaos-{}-{i}", opts.seed);
        check_one(rep, store, ctx, world, &id, opts.steps)?;
        progress(tty, i + 1, rep, t);
    }
    Ok(())
}

/// `task chaos`.
pub fn chaos(opts: &ChaosOpts) -> TaskResult<i32> {
    if let Some(dir) = &opts.verify {
        return verify(dir, opts.db.as_deref(), opts.world.as_deref(), opts.json);
    }
    check_opts(opts)?;
    let (dir, temp) = prepare(opts)?;
    let exe = std::env::current_exe().map_err(|e| TaskError::failure(format!("cannot find this binary: {e}")))?;
    // the servers live as long as this run (dropped, they are killed)
    let servers = Servers::start(&exe, &dir, opts.tools, opts.model, opts.seed)?;
    let ctx = Ctx {
        exe,
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
        tools: opts.tools,
        model: opts.model,
        at: servers.endpoints(),
    };
    std::fs::create_dir_all(&ctx.specs)
        .map_err(|e| TaskError::bad_input(format!("{}: cannot create: {e}", ctx.specs.display())))?;
    if !ctx.pg {
        // created before the first runner, as a fault-injection database: the runners' pauses
        // are fault hooks, which act on no other database
        Store::init_file(&ctx.db, true)?;
    }
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
    let mut world = match opts.tools {
        ToolsMode::Http => World::tool_server(&servers::tool_file(&dir)),
        ToolsMode::Builtin => World::new(&ctx.world),
    };
    // one task without kills first, to scale the kill delays (the workers mode spaces its actions
    // by the step delay instead)
    let mut pace = if opts.workers == 0 { calibrate(opts, &ctx, &mut world)? } else { Pace { ms: 0.0, steps: 1.0 } };
    let stop = Arc::new(AtomicBool::new(false));
    let restarts = match (&opts.pg_stop_cmd, &opts.pg_start_cmd) {
        (Some(a), Some(b)) => {
            let (a, b, seed, stop) = (a.clone(), b.clone(), opts.seed, stop.clone());
            Some(std::thread::spawn(move || restarter(&a, &b, seed, &stop)))
        }
        _ => None,
    };
    // the tool server's restarts start after the calibration (which must finish unkilled)
    let server_restarts = servers.restart_tools_every(opts.seed, stop.clone());
    let failed = run_tasks(&mut rep, &mut store, &ctx, &mut world, opts, &mut pace, t).err();
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
    if let Some(h) = server_restarts {
        rep.tool_server_restarts = h.join().unwrap_or_default();
    }
    rep.tools = opts.tools;
    rep.model = opts.model;
    if opts.tools == ToolsMode::Http {
        rep.add_served(&servers::tool_file(&dir))?;
    }
    drop(servers);
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
        None => Box::new(Store::open(&dir.join("tasks.sqlite"), Access::Read)?),
    };
    let store = &*store;
    let served = servers::tool_file(dir);
    let mut world = if world_url.is_none() && served.exists() {
        World::tool_server(&served)
    } else {
        World::new(&world_url.map_or_else(|| dir.join("world"), PathBuf::from))
    };
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
