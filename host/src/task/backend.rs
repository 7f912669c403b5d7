//! The journal's storage as the runner sees it: one trait ([`TaskStore`]), two bindings, the
//! SQLite file ([`super::store::Store`], the embedded default) and PostgreSQL
//! ([`super::pg::PgStore`], `--db postgres://USER@HOST:PORT/DB`), and the types they share (the
//! lease asked for and held, the rows, the errors). Neither binding imports the other; the file
//! that picks one for a `--db` is [`super::db`]. `exec.rs` and the `task` commands speak only
//! to the trait; the lease and fencing decisions are the core's (`decide_lease`, `check_fence`),
//! evaluated by each binding inside its own transactions.

use std::path::{Path, PathBuf};

use brokerlab_core::runner::{MAX_OWNER, OpenCall, Owner, Record, RefuseReason, TaskId, TaskState, check_lease_row};

use super::ident::{Me, provably_dead};
use crate::task::error::{TaskError, TaskResult};

/// What a runner asks for when it takes a task's lease (one argument for every backend's
/// `acquire`).
#[derive(Clone, Copy)]
pub struct LeaseAsk<'a> {
    /// The task.
    pub id: &'a str,
    /// The runner asking.
    pub me: &'a Me,
    /// The lease's time to live, ms.
    pub ttl_ms: i64,
    /// The task's current fold (after `create.records` for a new task).
    pub state: &'a TaskState,
    /// The task's first rows, when this run creates it.
    pub create: Option<&'a NewTask>,
    /// Delete a pending suspend request in the same transaction.
    pub clear_suspend: bool,
    /// The call the current holder could still make, from `state` (the core's `open_call`):
    /// the dropped-session rule decides on it whether a holder whose session is gone may be taken over now.
    pub open: OpenCall,
    /// A check made under the lease before it commits, once the binding has made sure that
    /// `state` is the log as of the lease (no record past it): the world witness. Its error
    /// rolls the lease back (`LeaseError::Witness`).
    pub witness: Option<&'a dyn Fn() -> TaskResult<()>>,
}

impl std::fmt::Debug for LeaseAsk<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseAsk")
            .field("id", &self.id)
            .field("ttl_ms", &self.ttl_ms)
            .field("create", &self.create.is_some())
            .field("open", &self.open)
            .field("witness", &self.witness.is_some())
            .finish_non_exhaustive()
    }
}

/// A lease held by this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Task.
    pub task: String,
    /// Owner string.
    pub owner: String,
    /// Fencing epoch.
    pub epoch: u64,
    /// Time to live after each append, ms.
    pub ttl_ms: i64,
    /// When it was taken (ms; the lease lasts `ttl_ms` from then until the next append).
    pub taken_at_ms: i64,
}

/// Why an append was refused. `E` is the database's error (SQLite's in the SQLite binding; a
/// [`TaskError`] that names the database behind the [`TaskStore`] trait).
#[derive(Debug)]
pub enum AppendError<E> {
    /// The lease is no longer ours (another runner took over): fencing.
    Fenced {
        /// Our epoch.
        epoch: u64,
        /// The holder now, if any.
        holder: Option<(String, u64)>,
    },
    /// The database failed.
    Sql(E),
}

/// Why a lease could not be taken. `E` as for [`AppendError`].
#[derive(Debug)]
pub enum LeaseError<E> {
    /// A runner that may still act holds it (`why`: it may be alive, or its session is gone but
    /// an unfenceable call is in flight: the dropped-session rule).
    Held {
        /// Its owner string.
        owner: String,
        /// Its epoch.
        epoch: u64,
        /// Milliseconds until it expires.
        expires_in_ms: i64,
        /// Why it is not taken now.
        why: RefuseReason,
    },
    /// The task id already exists (create raced with another `run`).
    Exists,
    /// The log has records the caller's state does not (PostgreSQL: a commit that a killed
    /// holder had sent landed after the caller read the log); nothing was written: read the log
    /// again and retry.
    Stale,
    /// The check under the lease (`LeaseAsk::witness`) failed; nothing was written.
    Witness(TaskError),
    /// The database failed.
    Sql(E),
}

/// A row of `tasks`.
#[derive(Debug, Clone)]
pub struct TaskRow {
    /// Id.
    pub id: String,
    /// Canonical spec JSON.
    pub spec: String,
    /// Parent task of a fork.
    pub parent: Option<String>,
    /// The world directory used at creation.
    pub world: Option<String>,
    /// The last parent record a fork copied.
    pub parent_seq: Option<i64>,
}

/// A row of `leases`.
#[derive(Debug, Clone)]
pub struct LeaseRow {
    /// Owner string.
    pub owner: String,
    /// Epoch.
    pub epoch: u64,
    /// Expiry (ms since epoch; 0 = released).
    pub expires_at_ms: i64,
    /// Host id.
    pub host: String,
    /// Pid.
    pub pid: u32,
    /// Start time.
    pub pid_start: u64,
}

impl LeaseRow {
    /// Whether a live process holds it now (unexpired, and not provably dead).
    pub fn live(&self, now: i64) -> bool {
        self.expires_at_ms > now && !provably_dead(&self.host, self.pid, self.pid_start)
    }
}

/// A `leases` row as the database holds it, before [`lease_row`] checks it.
#[derive(Debug, Clone)]
pub struct RawLease {
    /// Owner string (empty: PostgreSQL's placeholder, no lease yet).
    pub owner: String,
    /// Epoch.
    pub epoch: i64,
    /// Expiry, ms.
    pub expires_at_ms: i64,
    /// Host id.
    pub host: String,
    /// Pid.
    pub pid: i64,
    /// Start time.
    pub pid_start: i64,
}

/// Checks a stored lease row at `now`: the core's `check_lease_row` (epoch, expiry within the
/// longest lease and the clock skew allowed), a pid and start time that a process can have, an
/// owner the log can record. `Ok(None)` for PostgreSQL's placeholder; `Err` says what is wrong.
pub fn lease_row(raw: RawLease, now: i64) -> Result<Option<LeaseRow>, String> {
    if raw.owner.is_empty() {
        return Ok(None);
    }
    check_lease_row(raw.epoch, raw.expires_at_ms, now)
        .map_err(|e| format!("owner {:?}, epoch {}: {e}", raw.owner, raw.epoch))?;
    let pid = u32::try_from(raw.pid).map_err(|_| format!("pid {} is not a process id", raw.pid))?;
    let pid_start =
        u64::try_from(raw.pid_start).map_err(|_| format!("pid_start {} is not a start time", raw.pid_start))?;
    if Owner::try_from(raw.owner.as_str()).is_err() {
        return Err(format!("owner {:?} is longer than {MAX_OWNER} bytes", raw.owner));
    }
    Ok(Some(LeaseRow {
        owner: raw.owner,
        epoch: raw.epoch as u64,
        expires_at_ms: raw.expires_at_ms,
        host: raw.host,
        pid,
        pid_start,
    }))
}

/// The busy timeout: `$BROKERLAB_BUSY_MS` (0 to 3,600,000), default 5,000. A malformed value is
/// bad input, not silently ignored.
pub fn busy_ms() -> TaskResult<u64> {
    const MAX_BUSY_MS: u64 = 3_600_000;
    match std::env::var("BROKERLAB_BUSY_MS") {
        Err(_) => Ok(5000),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(ms) if ms <= MAX_BUSY_MS => Ok(ms),
            _ => Err(TaskError::bad_input(format!(
                "BROKERLAB_BUSY_MS={v:?}: expected a whole number of milliseconds from 0 to {MAX_BUSY_MS}"
            ))),
        },
    }
}

/// A new task's first records and spec.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// Canonical spec JSON.
    pub spec_json: String,
    /// Its digest.
    pub digest: u32,
    /// Parent (forks).
    pub parent: Option<String>,
    /// Parent seq (forks).
    pub parent_seq: Option<i64>,
    /// World directory.
    pub world: Option<String>,
    /// `Created` (and for a fork `ForkedFrom` and the copied prefix), seq 0.., already folded.
    pub records: Vec<Record>,
}

/// Folds records into a state; an inconsistent log is a clear error naming the database (`db`:
/// the file or the URL, for the message), the task and what is wrong.
pub fn fold_in(db: &dyn std::fmt::Display, id: &str, recs: &[Record]) -> TaskResult<TaskState> {
    let task = TaskId::try_from(id).map_err(|_| TaskError::bad_input(format!("task id {id:?} too long")))?;
    let mut st = TaskState::new(task);
    for rec in recs {
        st.apply(rec).map_err(|e| TaskError::LogCorrupt {
            db: db.to_string(),
            task: id.to_string(),
            seq: None,
            detail: format!("inconsistent log: {e}"),
        })?;
    }
    Ok(st)
}

/// Where the log lives: `--db` or `$BROKERLAB_DB`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbTarget {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database, by URL (`postgres://` or `postgresql://`).
    Postgres(String),
}

impl DbTarget {
    /// Reads a `--db` value: a `postgres://` or `postgresql://` URL, else a file path.
    pub fn parse(v: &Path) -> DbTarget {
        match v.to_str() {
            Some(s) if s.starts_with("postgres://") || s.starts_with("postgresql://") => {
                DbTarget::Postgres(s.to_string())
            }
            _ => DbTarget::Sqlite(v.to_path_buf()),
        }
    }
}

/// What a command does with the log database it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only reads (`list`, `inspect`, `chaos --verify`): a SQLite file is opened read-only (a
    /// file this user may not write is fine), and nothing is created or migrated... except the
    /// PostgreSQL layout migration, which every command does (RUNNER.md).
    Read,
    /// Reads and appends to an existing log.
    Write,
    /// May create the log (its file, its schema): `task run`, `task submit`, `task worker`.
    Create,
}

/// What a [`TaskStore::checkpoint`] did with the lease's expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Renewed: the lease lasts its time to live from just before the checkpoint.
    Renewed,
    /// Only fenced: the expiry is what the last renewal wrote.
    Kept,
}

/// The operations the runner needs from its journal. Each says what is durable when it returns
/// `Ok` and what a crash (of the process, the host or the database server) during it leaves.
/// Errors are [`TaskError`]s that name the database.
pub trait TaskStore {
    /// The database, for messages: the file, or the URL without its password.
    fn name(&self) -> String;

    /// The task's row (spec, parent, world), if it exists. Reads only.
    fn task(&self, id: &str) -> TaskResult<Option<TaskRow>>;

    /// All task ids, oldest first. Reads only.
    fn task_ids(&self) -> TaskResult<Vec<String>>;

    /// The forks of `id` (tasks whose parent it is) with their cut (the last parent seq each
    /// copied). Reads only.
    fn forks_of(&self, id: &str) -> TaskResult<Vec<(String, i64)>>;

    /// The task's committed records in order, decoded and checked (seq dense from 0, task id,
    /// CRC): exactly what earlier `Ok` appends made durable. Reads only.
    fn records(&self, id: &str) -> TaskResult<Vec<Record>>;

    /// The lease row, if any runner ever held the task. Reads only.
    fn lease(&self, id: &str) -> TaskResult<Option<LeaseRow>>;

    /// Whether `task suspend` asked the task to stop. Reads only.
    fn suspend_requested(&self, id: &str) -> TaskResult<bool>;

    /// Records a suspend request: durable on `Ok`; after a crash during the call it is there or
    /// not (a single-statement transaction).
    fn request_suspend(&self, id: &str) -> TaskResult<()>;

    /// Takes the lease (the core's `decide_lease` on the row read under the transaction's lock;
    /// epoch + 1) and appends the `LeaseAcquired` record, creating the task with its first records
    /// first when `create` is given, and with `clear_suspend` deleting a pending suspend request:
    /// one transaction. On `Ok` all of it is durable; after a crash during the call none of it
    /// is (the previous holder's lease and the log are as they were).
    fn acquire(&self, ask: &LeaseAsk<'_>) -> Result<(Lease, Record), LeaseError<TaskError>>;

    /// A checkpoint: appends `recs` under `lease` in one transaction that first checks the lease
    /// row (the core's `check_fence`: owner and epoch still ours, else `Fenced` and nothing is
    /// written), deletes the suspend request when a `Suspended` marker is among them, and renews
    /// the lease. Durable on `Ok`; after a crash during the call none of it is written, except
    /// that a crash during the commit itself leaves it unknown to the caller whether it was, and
    /// the next runner reads the log to find out (never the caller's memory).
    fn append(&self, lease: &Lease, recs: &[Record]) -> Result<(), AppendError<TaskError>>;

    /// A checkpoint that renews the lease only when `renewal_due` (the core's `renewal_due` on the
    /// holder's own record of its last renewal) says so; fenced and durable exactly as
    /// [`TaskStore::append`], which it is when it renews. Returns whether it renewed, so the
    /// holder knows the expiry it has (the margin rule is evaluated on it). A binding whose
    /// renewal costs nothing extra renews every time: SQLite, whose checkpoint is one write
    /// transaction either way, keeps this default.
    fn checkpoint(&self, lease: &Lease, recs: &[Record], renewal_due: bool) -> Result<Renewal, AppendError<TaskError>> {
        let _ = renewal_due;
        self.append(lease, recs).map(|()| Renewal::Renewed)
    }

    /// Renews the lease: a fenced checkpoint that appends nothing (refused when another runner
    /// took over). Durable on `Ok` like [`TaskStore::append`].
    fn renew(&self, lease: &Lease) -> Result<(), AppendError<TaskError>>;

    /// Gives the lease up (expires it now) if it is still ours; best effort: a crash before it
    /// leaves the lease to expire on its own (or to be taken at once from a provably dead holder).
    fn release(&self, lease: &Lease);

    /// The task row, or exit 2 naming the database and the id.
    fn task_or_err(&self, id: &str) -> TaskResult<TaskRow> {
        self.task(id)?.ok_or_else(|| TaskError::NoTask { db: self.name(), task: id.to_string() })
    }

    /// The task's state: the fold of its records.
    fn replay(&self, id: &str) -> TaskResult<TaskState> {
        let recs = self.records(id)?;
        fold_in(&self.name(), id, &recs)
    }
}

/// The error for a mark asked of an existing log.
pub fn not_markable(db: &str) -> TaskError {
    TaskError::bad_input(format!(
        "{db}: an existing task log cannot be marked as a fault-injection database (the mark is written only when \
         a database is created for fault injection, so that no production log ever gets it); use a new file or an \
         empty database"
    ))
}
