//! `brokerlab task ...`: the durable task runner on the host (SQLite or PostgreSQL log, tools, CLI).
//!
//! The decisions are the core's ([`brokerlab_core::runner`]): this module stores records in SQLite
//! ([`store`]) or PostgreSQL ([`pg`]) behind one trait ([`backend`]), answers the runner's model and
//! tool calls ([`exec`], [`world`]) and prints.
//! See `docs/RUNNER.md`.
//!
//! Exit codes: 0 done or suspended, 3 paused for review, 2 bad input (spec, id, flag, locked or
//! corrupt database), 1 any other failure (e.g. another runner holds the task).

// `say!` (stdout that ends quietly on a closed pipe) comes from the crate root: one path for
// every command.

pub mod backend;
pub mod bench;
pub mod chaos;
pub mod db;
pub mod error;
pub mod exec;
pub mod faults;
pub mod ident;
pub mod pg;
pub mod pgbench;
pub mod secret;
pub mod spec;
pub mod store;
pub mod tls;
pub mod worker;
pub mod world;

use std::path::PathBuf;

use brokerlab_core::runner::{Decision, next_action};
use clap::{Args, Subcommand};

use crate::task::error::{TaskError, TaskResult};
use backend::{Access, DbTarget, TaskStore};
use exec::{RunOpts, status_of};
use ident::now_ms;

/// Default log database.
pub const DEFAULT_DB: &str = "tasks.sqlite";

/// The log database option shared by all subcommands.
#[derive(Debug, Args, Clone)]
pub struct DbArg {
    /// The runner's log: a SQLite file (WAL, synchronous=FULL), or a PostgreSQL database
    /// `postgres://USER[:PASSWORD]@HOST:PORT/DB` (schema created on first use).
    /// [default: $BROKERLAB_DB, else tasks.sqlite]
    #[arg(long, value_name = "FILE|URL")]
    pub db: Option<PathBuf>,
}

impl DbArg {
    /// `--db`, else `$BROKERLAB_DB` (when set and not empty), else [`DEFAULT_DB`].
    pub fn target(&self) -> DbTarget {
        match &self.db {
            Some(p) => DbTarget::parse(p),
            None => match std::env::var_os("BROKERLAB_DB") {
                Some(v) if !v.is_empty() => DbTarget::parse(std::path::Path::new(&v)),
                _ => DbTarget::Sqlite(PathBuf::from(DEFAULT_DB)),
            },
        }
    }
}

/// Options of the commands that run a task.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Directory of the tools' own files (payments.sqlite, emails.sqlite), or a PostgreSQL
    /// database for them (postgres://..., tables world_calls and world_fences; may be the log's);
    /// default ./world, or the one the task was created with.
    #[arg(long, value_name = "DIR|URL")]
    pub world: Option<PathBuf>,
    /// Lease time to live in ms (10 to 86,400,000): how long another host waits before taking
    /// over a runner that stopped renewing (a dead runner on this host is taken over at once).
    /// [default: 5000, or $BROKERLAB_LEASE_MS]
    #[arg(long, value_name = "MS")]
    pub lease_ms: Option<u64>,
    /// A tool is called only while at least this much of the lease is left; otherwise the lease is
    /// renewed first, and a runner that lost it stops without calling. Must be below the lease.
    /// [default: a quarter of the lease]
    #[arg(long, value_name = "MS")]
    pub lease_margin_ms: Option<u64>,
    /// (testing) Sleep this long in every model call and inside every tool call (after the tool
    /// applied, before its result returns). Also $BROKERLAB_STEP_DELAY_MS.
    #[arg(long, value_name = "MS", hide = true)]
    pub step_delay_ms: Option<u64>,
}

pub use brokerlab_core::runner::{MAX_LEASE_MS, MIN_LEASE_MS};

fn env_ms(name: &str) -> TaskResult<Option<u64>> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| TaskError::bad_input(format!("{name}={v:?}: expected a whole number of milliseconds"))),
        Err(_) => Ok(None),
    }
}

/// The lease time to live: `--lease-ms`, else `$BROKERLAB_LEASE_MS`, else 5000; 10 ms to one day.
fn lease_ms(flag: Option<u64>) -> TaskResult<i64> {
    let (ms, what) = match flag {
        Some(v) => (v, "--lease-ms".to_string()),
        None => match env_ms("BROKERLAB_LEASE_MS")? {
            Some(v) => (v, "BROKERLAB_LEASE_MS".to_string()),
            None => (5000, String::new()),
        },
    };
    if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&ms) {
        return Err(TaskError::bad_input(format!(
            "{what} {ms}: expected {MIN_LEASE_MS} to {MAX_LEASE_MS} ms (one day)"
        )));
    }
    Ok(ms as i64)
}

impl RunArgs {
    fn opts(&self) -> TaskResult<RunOpts> {
        let step_delay_ms = match self.step_delay_ms {
            Some(v) => v,
            None => env_ms("BROKERLAB_STEP_DELAY_MS")?.unwrap_or(0),
        };
        exec::Chaos::check_env()?; // reject a malformed BROKERLAB_CRASH_AT / PAUSE_AT up front
        backend::busy_ms()?; // and a malformed BROKERLAB_BUSY_MS
        let lease_ms = lease_ms(self.lease_ms)?;
        let lease_margin_ms = match self.lease_margin_ms {
            None => lease_ms / 4,
            Some(m) if (m as i64) < lease_ms && m <= MAX_LEASE_MS => m as i64,
            Some(m) => {
                return Err(TaskError::bad_input(format!(
                    "--lease-margin-ms {m}: expected less than the lease ({lease_ms} ms)"
                )));
            }
        };
        Ok(RunOpts { world: self.world.clone(), step_delay_ms, lease_ms, lease_margin_ms, suspend_on_term: false })
    }
}

/// `brokerlab task` subcommands.
#[derive(Debug, Subcommand)]
pub enum TaskCmd {
    /// Create the log (a SQLite file or a PostgreSQL schema) if it does not exist; with
    /// --fault-injection, create it as a fault-injection database (the tests' and `task chaos`'s:
    /// BROKERLAB_CRASH_AT, _PAUSE_AT, _AS_HOST and _UNFENCED_TOOLS act only on such a database).
    Init {
        #[command(flatten)]
        db: DbArg,
        /// Mark the new database for fault injection (refused for an existing log: a log is
        /// marked only when it is created).
        #[arg(long)]
        fault_injection: bool,
    },
    /// Run a task spec (TOML) to completion, suspension or review; resumes it if its id exists.
    Run {
        /// The spec file.
        spec: PathBuf,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Resume a task from its log.
    Resume {
        /// Task id.
        id: String,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Ask a running task to stop after its current step (or suspend an idle one).
    Suspend {
        /// Task id.
        id: String,
        #[command(flatten)]
        db: DbArg,
    },
    /// Record a human decision for a step whose outcome is unknown.
    #[command(group = clap::ArgGroup::new("decision").required(true).multiple(false))]
    Review {
        /// Task id.
        id: String,
        /// The step waiting for review.
        #[arg(long)]
        step: u16,
        /// The call did happen: count the step as done.
        #[arg(long, group = "decision")]
        mark_done: bool,
        /// The call did not happen: call the tool again.
        #[arg(long, group = "decision")]
        retry: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Start a new task from a prefix of another's log and run a (different) continuation.
    Fork {
        /// Parent task id.
        id: String,
        /// Last parent record (seq) to keep.
        #[arg(long)]
        at: u32,
        /// The new task's spec (default: the parent's).
        #[arg(long)]
        spec: Option<PathBuf>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Queue a task spec for `task worker` (PostgreSQL): creates the task unless its id exists
    /// with the same spec, and queues it.
    Submit {
        /// The spec file.
        spec: PathBuf,
        #[command(flatten)]
        db: DbArg,
        /// Directory of the tools' own files the task will use, or a postgres:// URL for them
        /// [default: ./world].
        #[arg(long, value_name = "DIR|URL")]
        world: Option<PathBuf>,
    },
    /// Run queued tasks (PostgreSQL) until SIGTERM: claims them with FOR UPDATE SKIP LOCKED,
    /// runs each under its lease; on SIGTERM suspends after the current atomic step and exits 0.
    Worker {
        #[command(flatten)]
        run: RunArgs,
        /// Tasks run at once (1 to 64).
        #[arg(long, value_name = "K", default_value_t = 1)]
        concurrency: u32,
        /// Pause between claims when nothing is claimable, ms (1 to 60,000).
        #[arg(long, value_name = "MS", default_value_t = 200)]
        poll_ms: u64,
        /// Exit once a claim finds nothing claimable instead of waiting for more.
        #[arg(long)]
        exit_when_idle: bool,
    },
    /// Print a task's log as a table.
    Inspect {
        /// Task id.
        id: String,
        #[command(flatten)]
        db: DbArg,
    },
    /// List the tasks in the log.
    List {
        #[command(flatten)]
        db: DbArg,
    },
    /// Measure durable steps/s against the raw SQLite commit rate (with --db, PostgreSQL's too).
    Bench {
        /// Model+tool steps per task.
        #[arg(long, default_value_t = 2000)]
        steps: u32,
        /// Concurrent tasks (> 1 adds the group-commit run).
        #[arg(long, default_value_t = 1)]
        tasks: u32,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Directory for the benchmark databases (default: a fresh temp dir).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Also measure PostgreSQL on this database (postgres://USER@HOST:PORT/DB): its raw commit
        /// rate and 1, 4 and 16 runners at once.
        #[arg(long, value_name = "URL")]
        db: Option<String>,
        /// With --db: SIGKILL this many workers holding a task whose open calls are fenced and time
        /// each takeover (kill to the next holder's first durable step). Needs a database created
        /// for it (empty: the bench marks it for fault injection).
        #[arg(long, value_name = "N", default_value_t = 0)]
        takeover_kills: u32,
        /// With --takeover-kills: also kill this many holders in an unfenced email's window (each
        /// taken over at the lease's expiry: the dropped-session rule).
        #[arg(long, value_name = "N", default_value_t = 20)]
        takeover_unfenced_kills: u32,
        /// The takeover workers' lease, ms.
        #[arg(long, value_name = "MS", default_value_t = 5000)]
        takeover_lease_ms: u64,
    },
    /// kill -9 in real processes: run tasks as child processes, SIGKILL them at random times,
    /// restart, review, and check exactly-once from the tools' own files.
    Chaos(chaos::ChaosOpts),
    /// (testing) An HTTP tool server on 127.0.0.1 that records every call in its own SQLite
    /// file, dedupes by Idempotency-Key and refuses a stale Brokerlab-Fence (docs/RUNNER.md).
    #[command(hide = true)]
    ServeTools(crate::agent::serve::tools::ServeToolsOpts),
    /// (testing) An OpenAI-compatible Chat Completions server on 127.0.0.1 that answers scripted
    /// tool calls (docs/RUNNER.md).
    #[command(hide = true)]
    ServeModel(crate::agent::serve::model::ServeModelOpts),
}

/// Runs one `task` subcommand; returns the process exit code on success.
pub fn main(cmd: TaskCmd) -> crate::error::CliResult<i32> {
    Ok(dispatch(cmd)?)
}

fn dispatch(cmd: TaskCmd) -> TaskResult<i32> {
    match cmd {
        TaskCmd::Init { db, fault_injection } => init(&db.target(), fault_injection),
        TaskCmd::Run { spec, run } => exec::run(&run.db.target(), &spec, &run.opts()?),
        TaskCmd::Resume { id, run } => exec::resume(&run.db.target(), &id, &run.opts()?),
        TaskCmd::Suspend { id, db } => exec::suspend(&db.target(), &id, lease_ms(None)?),
        TaskCmd::Review { id, step, mark_done, retry, db } => {
            let decision = match (mark_done, retry) {
                (true, false) => Decision::MarkDone,
                (false, true) => Decision::Retry,
                _ => return Err(TaskError::bad_input("give exactly one of --mark-done and --retry")),
            };
            exec::review_cmd(&db.target(), &id, step, decision, lease_ms(None)?)
        }
        TaskCmd::Fork { id, at, spec, run } => exec::fork(&run.db.target(), &id, at, spec.as_deref(), &run.opts()?),
        TaskCmd::Submit { spec, db, world } => {
            worker::submit(&db.target(), &spec, &RunOpts { world, ..RunOpts::default() })
        }
        TaskCmd::Worker { run, concurrency, poll_ms, exit_when_idle } => {
            if !(1..=64).contains(&concurrency) {
                return Err(TaskError::bad_input(format!("--concurrency {concurrency}: expected 1 to 64")));
            }
            if !(1..=60_000).contains(&poll_ms) {
                return Err(TaskError::bad_input(format!("--poll-ms {poll_ms}: expected 1 to 60000")));
            }
            let opts = worker::WorkerOpts { concurrency, poll_ms, exit_when_idle, run: run.opts()? };
            worker::worker(&run.db.target(), &opts)
        }
        TaskCmd::Inspect { id, db } => inspect(&db.target(), &id),
        TaskCmd::List { db } => list(&db.target()),
        TaskCmd::Bench { steps, tasks, json, dir, db, takeover_kills, takeover_unfenced_kills, takeover_lease_ms } => {
            if let Some(u) = &db
                && !matches!(DbTarget::parse(std::path::Path::new(u)), DbTarget::Postgres(_))
            {
                return Err(TaskError::bad_input(format!("bench --db {u}: expected a postgres:// URL")));
            }
            let takeover_lease_ms = lease_ms(Some(takeover_lease_ms))? as u64;
            let opts = bench::BenchOpts {
                steps,
                tasks,
                json,
                dir,
                db,
                takeover_kills,
                takeover_unfenced_kills,
                takeover_lease_ms,
            };
            bench::bench(&opts)
        }
        TaskCmd::ServeTools(o) => crate::agent::serve::tools::serve(&o),
        TaskCmd::ServeModel(o) => crate::agent::serve::model::serve(&o),
        TaskCmd::Chaos(mut opts) => {
            opts.lease_ms = self::lease_ms(Some(opts.lease_ms))? as u64;
            let (workers, world, db) = (opts.workers, &opts.world, &opts.db);
            if workers > 64 {
                return Err(TaskError::bad_input(format!("chaos --workers {workers}: expected 0 to 64")));
            }
            if let Some(u) = world
                && !matches!(DbTarget::parse(std::path::Path::new(u)), DbTarget::Postgres(_))
            {
                return Err(TaskError::bad_input(format!(
                    "chaos --world {u}: expected a postgres:// URL (the default is DIR/world)"
                )));
            }
            if let Some(u) = db
                && !matches!(DbTarget::parse(std::path::Path::new(u)), DbTarget::Postgres(_))
            {
                return Err(TaskError::bad_input(format!(
                    "chaos --db {u}: expected a postgres:// URL (the SQLite log is DIR/tasks.sqlite)"
                )));
            }
            chaos::chaos(&opts)
        }
    }
}

fn lease_text(store: &dyn TaskStore, id: &str) -> TaskResult<String> {
    let now = now_ms();
    Ok(match store.lease(id)? {
        None => "-".into(),
        Some(l) if l.live(now) => format!("held by {} (epoch {})", l.owner, l.epoch),
        Some(l) => format!("free (last epoch {})", l.epoch),
    })
}

/// `task init [--fault-injection]`.
fn init(db: &DbTarget, faults: bool) -> TaskResult<i32> {
    let (created, name) = match db {
        DbTarget::Sqlite(p) => (store::Store::init_file(p, faults)?, p.display().to_string()),
        DbTarget::Postgres(url) => (pg::PgStore::init_db(url, faults)?, pg::redact(url)),
    };
    let what = if faults { "a fault-injection task log" } else { "a task log" };
    if created {
        say!("{name}: created {what}");
    } else {
        say!("{name}: already {what}; nothing changed");
    }
    Ok(0)
}

fn inspect(db: &DbTarget, id: &str) -> TaskResult<i32> {
    let store = db::open(db, Access::Read)?;
    let store = &*store;
    let row = store.task_or_err(id)?;
    checked_state(store, id)?;
    let recs = store.records(id)?;
    let st = backend::fold_in(&store.name(), id, &recs)?;
    say!("task {id}");
    if let Some(p) = &row.parent {
        say!("forked from: {p}");
    }
    say!("status: {} ({} of {} steps done)", status_of(&st), st.step, st.steps);
    say!("next: {}", next_action(&st));
    say!("lease: {}", lease_text(store, id)?);
    say!("{:>5}  {:<13} {:<13} payload", "seq", "kind", "status");
    for r in &recs {
        say!("{:>5}  {:<13} {:<13} {}", r.seq, r.kind().name(), r.status.name(), r.event);
    }
    Ok(0)
}

/// A task's stored rows, checked as a runner would read them: its spec (text, a spec, and the
/// digest its `created` record holds) and its log; the state.
fn checked_state(store: &dyn TaskStore, id: &str) -> TaskResult<brokerlab_core::runner::TaskState> {
    let row = store.task_or_err(id)?;
    let spec = spec::Spec::stored(&row.spec, &store.name(), id)?;
    let st = store.replay(id)?;
    if st.created && st.spec_digest != spec.digest() {
        return Err(TaskError::StoredSpec {
            db: store.name(),
            task: id.to_string(),
            detail: format!(
                "its digest {:08x} is not the {:08x} its `created` record holds (the row was changed)",
                spec.digest(),
                st.spec_digest
            ),
        });
    }
    Ok(st)
}

fn list(db: &DbTarget) -> TaskResult<i32> {
    let store = db::open(db, Access::Read)?;
    let store = &*store;
    let ids = store.task_ids()?;
    say!("{:<24} {:>7} {:>8}  {:<40} lease", "task", "steps", "records", "status");
    let mut corrupt = Vec::new();
    for id in ids {
        let lease = lease_text(store, &id);
        match checked_state(store, &id).and_then(|st| lease.map(|l| (st, l))) {
            Ok((st, lease)) => {
                say!("{:<24} {:>3}/{:<3} {:>8}  {:<40} {}", id, st.step, st.steps, st.next_seq, status_of(&st), lease)
            }
            Err(e) => {
                say!("{:<24} {:>7} {:>8}  {:<40} -", id, "?", "?", "CORRUPT (see below)");
                corrupt.push(e.to_string());
            }
        }
    }
    if corrupt.is_empty() {
        return Ok(0);
    }
    Err(TaskError::bad_input(format!(
        "{} task(s) with a corrupt log or row (the others are listed above):\n  {}",
        corrupt.len(),
        corrupt.join("\n  ")
    )))
}
