//! The journal's storage as the runner sees it: one trait ([`TaskStore`]), two bindings, the
//! SQLite file ([`super::store::Store`], the embedded default) and PostgreSQL
//! ([`super::pg::PgStore`], `--db postgres://USER@HOST:PORT/DB`). `exec.rs` and the `task`
//! commands speak only to the trait; the lease and fencing decisions are the core's
//! (`decide_lease`, `check_fence`), evaluated by each binding inside its own transactions.

use std::path::{Path, PathBuf};

use brokerlab_core::runner::{Record, TaskState};

use super::store::{AppendError, Lease, LeaseAsk, LeaseError, LeaseRow, Store, TaskRow, fold_in, sql_error};
use crate::task::error::{TaskError, TaskResult};

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

/// Opens the log (with `create`, creating its schema if the database has none). Errors name the
/// file or the URL (its password hidden).
pub fn open(db: &DbTarget, create: bool) -> TaskResult<Box<dyn TaskStore>> {
    Ok(match db {
        DbTarget::Sqlite(p) => Box::new(Store::open(p, create)?),
        DbTarget::Postgres(url) => Box::new(super::pg::PgStore::open(url, create)?),
    })
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

fn map_lease(path: &Path, e: LeaseError) -> LeaseError<TaskError> {
    match e {
        LeaseError::Held { owner, epoch, expires_in_ms } => LeaseError::Held { owner, epoch, expires_in_ms },
        LeaseError::Exists => LeaseError::Exists,
        LeaseError::Stale => LeaseError::Stale,
        LeaseError::Sql(e) => LeaseError::Sql(sql_error(path, "taking the lease", e)),
    }
}

fn map_append(path: &Path, what: &str, e: AppendError) -> AppendError<TaskError> {
    match e {
        AppendError::Fenced { epoch, holder } => AppendError::Fenced { epoch, holder },
        AppendError::Sql(e) => AppendError::Sql(sql_error(path, what, e)),
    }
}

impl TaskStore for Store {
    fn name(&self) -> String {
        self.path.display().to_string()
    }
    fn task(&self, id: &str) -> TaskResult<Option<TaskRow>> {
        Store::task(self, id)
    }
    fn task_ids(&self) -> TaskResult<Vec<String>> {
        Store::task_ids(self)
    }
    fn records(&self, id: &str) -> TaskResult<Vec<Record>> {
        Store::records(self, id)
    }
    fn lease(&self, id: &str) -> TaskResult<Option<LeaseRow>> {
        Store::lease(self, id)
    }
    fn suspend_requested(&self, id: &str) -> TaskResult<bool> {
        Store::suspend_requested(self, id).map_err(|e| sql_error(&self.path, "polling suspend requests", e))
    }
    fn request_suspend(&self, id: &str) -> TaskResult<()> {
        Store::request_suspend(self, id)
    }
    fn acquire(&self, ask: &LeaseAsk<'_>) -> Result<(Lease, Record), LeaseError<TaskError>> {
        Store::acquire(self, ask).map_err(|e| map_lease(&self.path, e))
    }
    fn append(&self, lease: &Lease, recs: &[Record]) -> Result<(), AppendError<TaskError>> {
        Store::append(self, lease, recs).map_err(|e| map_append(&self.path, "appending a checkpoint", e))
    }
    fn renew(&self, lease: &Lease) -> Result<(), AppendError<TaskError>> {
        Store::renew(self, lease).map_err(|e| map_append(&self.path, "renewing the lease", e))
    }
    fn release(&self, lease: &Lease) {
        Store::release(self, lease)
    }
}
