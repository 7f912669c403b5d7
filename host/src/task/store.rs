//! The SQLite binding of the runner log: WAL, `synchronous=FULL`, one transaction per checkpoint,
//! lease with fencing checked inside every append transaction.
//!
//! Tables:
//!
//! * `log(task_id, seq, kind, status, payload, summary, epoch, at_ms)`: the append-only log; one row
//!   per record, `payload` is the core's frame (magic, version, length, CRC-32C, postcard record),
//!   authoritative; `kind`, `status`, `summary` are for humans and `sqlite3`.
//! * `tasks(task_id, spec, digest, parent, parent_seq, world, created_at_ms)`: the spec (canonical
//!   JSON) so `resume ID` needs no file.
//! * `leases(task_id, owner, epoch, expires_at_ms, host, pid, pid_start)`: who may append.
//! * `suspend_requests(task_id, at_ms)`: `task suspend` writes, the runner polls.

use std::path::{Path, PathBuf};
use std::time::Duration;

use brokerlab_core::runner::{
    Event, LeaseDecision, LeaseView, MAX_FRAME_LEN, Record, TaskId, TaskState, check_fence, decide_lease, emit, frame,
};
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params};

use super::ident::{Me, now_ms, provably_dead};
use crate::task::error::{TaskError, TaskResult};

/// Format tag stored in `meta`.
pub const FORMAT: &str = "brokerlab-task-log/1";

/// An open log database.
#[derive(Debug)]
pub struct Store {
    /// The connection.
    pub conn: Connection,
    /// Its file.
    pub path: PathBuf,
}

/// What a runner asks for when it takes a task's lease (one argument for every backend's
/// `acquire`).
#[derive(Debug, Clone, Copy)]
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

/// What the SQLite store can fail with: SQLite's own errors, and the store's checks that are not
/// SQL errors (each its own variant, so none is disguised as one of SQLite's).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
    /// The file could not be switched to write-ahead logging.
    #[error("journal_mode is {0}, WAL required")]
    NotWal(String),
    /// A task id or lease owner in the database is not a valid name for the runner.
    #[error("{what} {name:?} in the database is not a valid name")]
    BadName {
        /// "task id" or "lease owner".
        what: &'static str,
        /// The text found.
        name: String,
    },
    /// `now + ttl` does not fit in 64 bits.
    #[error("lease expiry {now_ms} + {ttl_ms} ms overflows")]
    ExpiryOverflow {
        /// Now, ms.
        now_ms: i64,
        /// The lease's time to live, ms.
        ttl_ms: i64,
    },
    /// A record could not be framed for the log.
    #[error("cannot frame record: {0}")]
    Frame(String),
}

impl StoreError {
    /// SQLite's error code, when SQLite failed.
    fn sqlite_error_code(&self) -> Option<ErrorCode> {
        match self {
            StoreError::Sql(e) => e.sqlite_error_code(),
            _ => None,
        }
    }
}

/// Why an append was refused. `E` is the database's error (SQLite's here; a [`TaskError`] that
/// names the database behind the [`super::backend::TaskStore`] trait).
#[derive(Debug)]
pub enum AppendError<E = StoreError> {
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

impl From<rusqlite::Error> for AppendError {
    fn from(e: rusqlite::Error) -> Self {
        AppendError::Sql(e.into())
    }
}

impl From<StoreError> for AppendError {
    fn from(e: StoreError) -> Self {
        AppendError::Sql(e)
    }
}

/// Why a lease could not be taken. `E` as for [`AppendError`].
#[derive(Debug)]
pub enum LeaseError<E = StoreError> {
    /// A live runner holds it.
    Held {
        /// Its owner string.
        owner: String,
        /// Its epoch.
        epoch: u64,
        /// Milliseconds until it expires.
        expires_in_ms: i64,
    },
    /// The task id already exists (create raced with another `run`).
    Exists,
    /// The log has records the caller's state does not (PostgreSQL: a commit that a killed
    /// holder had sent landed after the caller read the log); nothing was written: read the log
    /// again and retry.
    Stale,
    /// The database failed.
    Sql(E),
}

impl From<rusqlite::Error> for LeaseError {
    fn from(e: rusqlite::Error) -> Self {
        LeaseError::Sql(e.into())
    }
}

impl From<StoreError> for LeaseError {
    fn from(e: StoreError) -> Self {
        LeaseError::Sql(e)
    }
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

/// Maps a SQLite error on `path` to a CLI error: busy/locked and corrupt/not-a-database are bad
/// input (exit 2, naming the file); the rest is a failure (exit 1).
pub fn sql_error(path: &Path, what: &str, e: impl Into<StoreError>) -> TaskError {
    let e: StoreError = e.into();
    let p = path.display();
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            TaskError::bad_input(format!("{p}: database is locked by another process ({what}); nothing was written"))
        }
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            TaskError::bad_input(format!("{p}: not a valid log database (corrupt or another file) ({what}): {e}"))
        }
        Some(ErrorCode::DiskFull | ErrorCode::SystemIoFailure) => TaskError::failure(format!(
            "{p}: {what}: {e} (disk full, or the file-size limit `ulimit -f` reached); the transaction was rolled \
             back: what it held was not written, and `resume` continues from what was"
        )),
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::ReadOnly) => {
            TaskError::bad_input(format!("{p}: cannot open for writing ({what}): {e}"))
        }
        _ => TaskError::failure(format!("{p}: {what}: {e}")),
    }
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

fn is_busy(e: &StoreError) -> bool {
    matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// Opens a SQLite file with WAL, `synchronous=FULL` and a busy timeout. Opening waits for a
/// busy database as long as any statement would: switching a new file to WAL takes a lock that
/// SQLite's busy handler does not wait for, so two runners creating one file at once retry here
/// until the busy timeout instead of failing after a few milliseconds.
pub fn open_sqlite(path: &Path, create: bool) -> TaskResult<Connection> {
    let busy = busy_ms()?;
    let deadline = std::time::Instant::now() + Duration::from_millis(busy);
    let mut pause_ms = 1;
    loop {
        match try_open(path, create, busy) {
            Ok(c) => return Ok(c),
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(pause_ms));
                pause_ms = (pause_ms * 2).min(50);
            }
            Err(e) => return Err(sql_error(path, "opening", e)),
        }
    }
}

fn try_open(path: &Path, create: bool, busy_ms: u64) -> Result<Connection, StoreError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::from_millis(busy_ms))?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::NotWal(mode));
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

/// What an existing file is, read without changing a byte of it.
enum Existing {
    /// Our log (its format tag matches).
    Ours,
    /// A SQLite database with no tables: adopt it.
    Empty,
}

/// Opens `path` read-only and checks it is our log or an empty database. Another application's
/// database, or a file that is not a database, is bad input and left as it was: nothing is
/// written to it, not even the switch to WAL.
fn check_existing(path: &Path) -> TaskResult<Existing> {
    let p = path.display();
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let look = || -> Result<Result<Existing, String>, rusqlite::Error> {
        let c = Connection::open_with_flags(path, flags)?;
        c.busy_timeout(Duration::from_millis(busy_ms().unwrap_or(5000)))?;
        let tables: i64 = c.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        if tables == 0 {
            return Ok(Ok(Existing::Empty));
        }
        let has_meta: i64 =
            c.query_row("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta'", [], |r| r.get(0))?;
        if has_meta == 0 {
            return Ok(Err("a SQLite database but not a brokerlab task log (no meta table)".into()));
        }
        let fmt: Option<String> =
            c.query_row("SELECT value FROM meta WHERE key='format'", [], |r| r.get(0)).optional()?;
        if fmt.as_deref() != Some(FORMAT) {
            return Ok(Err(format!("not a brokerlab task log (format {fmt:?}, expected {FORMAT:?})")));
        }
        Ok(Ok(Existing::Ours))
    };
    match look() {
        Ok(Ok(e)) => Ok(e),
        Ok(Err(why)) => Err(TaskError::bad_input(format!("{p}: {why}; the file was left as it was"))),
        Err(e) => Err(sql_error(path, "checking the file before opening it for writing", e)),
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks(
  task_id TEXT PRIMARY KEY, spec TEXT NOT NULL, digest INTEGER NOT NULL,
  parent TEXT, parent_seq INTEGER, world TEXT, created_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS log(
  task_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
  payload BLOB NOT NULL, summary TEXT NOT NULL, epoch INTEGER NOT NULL, at_ms INTEGER NOT NULL,
  PRIMARY KEY(task_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases(
  task_id TEXT PRIMARY KEY, owner TEXT NOT NULL, epoch INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, pid_start INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS suspend_requests(task_id TEXT PRIMARY KEY, at_ms INTEGER NOT NULL);
";

impl Store {
    /// Opens (and with `create`, creates) the log database. Errors name the file. An existing
    /// file is checked read-only first ([`check_existing`]): one that is not our log is never
    /// changed.
    pub fn open(path: &Path, create: bool) -> TaskResult<Store> {
        if !create && !path.exists() {
            return Err(TaskError::bad_input(format!("{}: no such log database (use --db FILE)", path.display())));
        }
        let existing = if path.exists() { Some(check_existing(path)?) } else { None };
        let conn = open_sqlite(path, create)?;
        let store = Store { conn, path: path.to_path_buf() };
        if !matches!(existing, Some(Existing::Ours)) {
            store.init().map_err(|e| sql_error(path, "creating the schema", e))??;
        }
        Ok(store)
    }

    fn init(&self) -> Result<TaskResult<()>, rusqlite::Error> {
        let tx = immediate(&self.conn)?;
        let has_meta: bool =
            self.conn
                .query_row("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta'", [], |r| r.get(0))?;
        if has_meta {
            // another runner created it between our check and our lock
            let fmt: Option<String> =
                self.conn.query_row("SELECT value FROM meta WHERE key='format'", [], |r| r.get(0)).optional()?;
            if fmt.as_deref() != Some(FORMAT) {
                return Ok(Err(TaskError::bad_input(format!(
                    "{}: not a brokerlab task log (format {:?}, expected {FORMAT:?})",
                    self.path.display(),
                    fmt
                ))));
            }
            return Ok(Ok(()));
        }
        let others: i64 = self.conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        if others > 0 {
            return Ok(Err(TaskError::bad_input(format!(
                "{}: a SQLite database but not a brokerlab task log (no meta table)",
                self.path.display()
            ))));
        }
        self.conn.execute_batch(&format!("{SCHEMA} INSERT OR IGNORE INTO meta VALUES('format', '{FORMAT}');"))?;
        tx.commit()?;
        Ok(Ok(()))
    }

    /// The task row, if the task exists.
    pub fn task(&self, id: &str) -> TaskResult<Option<TaskRow>> {
        self.conn
            .query_row("SELECT task_id, spec, parent, world, parent_seq FROM tasks WHERE task_id=?1", [id], |r| {
                Ok(TaskRow {
                    id: r.get(0)?,
                    spec: r.get(1)?,
                    parent: r.get(2)?,
                    world: r.get(3)?,
                    parent_seq: r.get(4)?,
                })
            })
            .optional()
            .map_err(|e| sql_error(&self.path, "reading tasks", e))
    }

    /// The task row, or exit 2 naming the id.
    pub fn task_or_err(&self, id: &str) -> TaskResult<TaskRow> {
        self.task(id)?.ok_or_else(|| TaskError::NoTask { db: self.path.display().to_string(), task: id.to_string() })
    }

    /// All task ids, oldest first.
    pub fn task_ids(&self) -> TaskResult<Vec<String>> {
        let mut st = self
            .conn
            .prepare("SELECT task_id FROM tasks ORDER BY created_at_ms, task_id")
            .map_err(|e| sql_error(&self.path, "listing tasks", e))?;
        let rows = st.query_map([], |r| r.get(0)).map_err(|e| sql_error(&self.path, "listing tasks", e))?;
        rows.collect::<Result<Vec<String>, _>>().map_err(|e| sql_error(&self.path, "listing tasks", e))
    }

    /// The task's records in order, decoded and checked (seq dense from 0, task id, CRC).
    pub fn records(&self, id: &str) -> TaskResult<Vec<Record>> {
        let p = self.path.display();
        let mut st = self
            .conn
            .prepare_cached("SELECT seq, payload FROM log WHERE task_id=?1 ORDER BY seq")
            .map_err(|e| sql_error(&self.path, "reading the log", e))?;
        let rows = st
            .query_map([id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, rusqlite::types::Value>(1)?)))
            .map_err(|e| sql_error(&self.path, "reading the log", e))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, payload) = row.map_err(|e| sql_error(&self.path, "reading the log", e))?;
            let rusqlite::types::Value::Blob(payload) = payload else {
                return Err(TaskError::bad_input(format!(
                    "{p}: task {id:?} seq {seq}: corrupt record: the payload column is not a blob (a frame); the row \
                     was changed outside brokerlab"
                )));
            };
            out.push(decode_row(&p, id, seq, &payload)?);
        }
        Ok(out)
    }

    /// Replays the task: its state is the fold of its records.
    pub fn replay(&self, id: &str) -> TaskResult<TaskState> {
        let recs = self.records(id)?;
        fold(&self.path, id, &recs)
    }

    /// The lease row.
    pub fn lease(&self, id: &str) -> TaskResult<Option<LeaseRow>> {
        read_lease(&self.conn, id).map_err(|e| sql_error(&self.path, "reading leases", e))
    }

    /// Whether `task suspend` asked this task to stop.
    pub fn suspend_requested(&self, id: &str) -> Result<bool, rusqlite::Error> {
        let mut st = self.conn.prepare_cached("SELECT count(*) FROM suspend_requests WHERE task_id=?1")?;
        st.query_row([id], |r| r.get::<_, i64>(0)).map(|n| n > 0)
    }

    /// Records a suspend request.
    pub fn request_suspend(&self, id: &str) -> TaskResult<()> {
        self.conn
            .execute("INSERT OR REPLACE INTO suspend_requests VALUES(?1, ?2)", params![id, now_ms()])
            .map(|_| ())
            .map_err(|e| sql_error(&self.path, "writing the suspend request", e))
    }

    /// Takes the lease on `id` (and, with `create`, creates the task with its first records) in
    /// one transaction; appends the `LeaseAcquired` record. `state` is the task's current fold
    /// (after `create.records` for a new task).
    pub fn acquire(&self, ask: &LeaseAsk<'_>) -> Result<(Lease, Record), LeaseError> {
        let LeaseAsk { id, me, ttl_ms, state, create, clear_suspend } = *ask;
        let now = now_ms();
        let expires = expiry(now, ttl_ms)?;
        let tx = immediate(&self.conn)?;
        if let Some(new) = create {
            let n = self.conn.execute(
                "INSERT OR IGNORE INTO tasks VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![id, new.spec_json, new.digest, new.parent, new.parent_seq, new.world, now],
            )?;
            if n == 0 {
                return Err(LeaseError::Exists);
            }
            for rec in &new.records {
                insert_record(&self.conn, rec, 0, now)?;
            }
        }
        let row = read_lease(&self.conn, id)?;
        let owner = me.owner();
        let view = row.as_ref().map(|r| LeaseView {
            epoch: r.epoch,
            expires_at_ms: r.expires_at_ms,
            ours: r.owner == owner,
            // only looked at when it matters (unexpired, someone else's)
            holder_dead: r.owner != owner && r.expires_at_ms > now && provably_dead(&r.host, r.pid, r.pid_start),
        });
        let epoch = match decide_lease(view, state.epoch(), now) {
            LeaseDecision::Take { epoch, .. } => epoch,
            LeaseDecision::Refuse { epoch, expires_in_ms } => {
                let holder = row.map(|r| r.owner).unwrap_or_default();
                return Err(LeaseError::Held { owner: holder, epoch, expires_in_ms });
            }
        };
        self.conn.execute(
            "INSERT OR REPLACE INTO leases VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![id, owner, epoch as i64, expires, me.host, me.pid, me.start as i64],
        )?;
        if clear_suspend {
            self.conn.execute("DELETE FROM suspend_requests WHERE task_id=?1", [id])?;
        }
        let task = TaskId::try_from(id).map_err(|_| StoreError::BadName { what: "task id", name: id.into() })?;
        let owner_h = brokerlab_core::runner::Owner::try_from(owner.as_str())
            .map_err(|_| StoreError::BadName { what: "lease owner", name: owner.clone() })?;
        let rec = Record::new(task, state.next_seq, Event::LeaseAcquired { owner: owner_h, epoch });
        insert_record(&self.conn, &rec, epoch, now)?;
        tx.commit()?;
        Ok((Lease { task: id.to_string(), owner, epoch, ttl_ms, taken_at_ms: now }, rec))
    }

    /// Gives the lease up (expires it now) if it is still ours.
    pub fn release(&self, lease: &Lease) {
        let _ = self.conn.execute(
            "UPDATE leases SET expires_at_ms=0 WHERE task_id=?1 AND epoch=?2 AND owner=?3",
            params![lease.task, lease.epoch as i64, lease.owner],
        );
    }

    /// Renews the lease (a fenced transaction that appends nothing): refused when another runner
    /// took the lease over.
    pub fn renew(&self, lease: &Lease) -> Result<(), AppendError> {
        self.append(lease, &[])
    }

    /// Appends `recs` under `lease` in one transaction (a checkpoint). Refused when the lease's
    /// epoch is no longer current (fencing). Renews the lease.
    pub fn append(&self, lease: &Lease, recs: &[Record]) -> Result<(), AppendError> {
        let mut out = self.append_groups(&[(lease, recs)])?;
        out.pop().unwrap_or(Ok(()))
    }

    /// Group commit: appends several tasks' checkpoints in one transaction; each group is fenced
    /// on its own lease (a refused group does not affect the others). The outer error means the
    /// transaction failed and nothing was written.
    pub fn append_groups(&self, groups: &[(&Lease, &[Record])]) -> Result<Vec<Result<(), AppendError>>, AppendError> {
        let now = now_ms();
        let mut tx = immediate(&self.conn)?;
        let mut results = Vec::with_capacity(groups.len());
        for (lease, recs) in groups {
            results.push(append_one(&mut tx, lease, recs, now));
        }
        tx.commit()?;
        Ok(results)
    }
}

/// One task's checkpoint inside a group commit, in a savepoint: refused (fenced) or failed, it
/// leaves the other groups' records alone.
fn append_one(tx: &mut Transaction<'_>, lease: &Lease, recs: &[Record], now: i64) -> Result<(), AppendError> {
    let cur: Option<(String, i64)> = tx
        .prepare_cached("SELECT owner, epoch FROM leases WHERE task_id=?1")?
        .query_row([&lease.task], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if check_fence(cur.as_ref().map(|(o, e)| (*e as u64, *o == lease.owner)), lease.epoch).is_err() {
        return Err(AppendError::Fenced { epoch: lease.epoch, holder: cur.map(|(o, e)| (o, e as u64)) });
    }
    let sp = tx.savepoint()?;
    for rec in recs {
        insert_record(&sp, rec, lease.epoch, now)?;
        if matches!(rec.event, Event::Suspended { .. }) {
            sp.prepare_cached("DELETE FROM suspend_requests WHERE task_id=?1")?.execute([&lease.task])?;
        }
    }
    sp.prepare_cached("UPDATE leases SET expires_at_ms=?1 WHERE task_id=?2 AND epoch=?3")?.execute(params![
        expiry(now, lease.ttl_ms)?,
        lease.task,
        lease.epoch as i64
    ])?;
    // dropped without commit on an error above: rolled back to the savepoint
    sp.commit()?;
    Ok(())
}

/// `now + ttl`, checked: an overflow is an error, never a lease that wraps into the past.
fn expiry(now_ms: i64, ttl_ms: i64) -> Result<i64, StoreError> {
    now_ms.checked_add(ttl_ms).ok_or(StoreError::ExpiryOverflow { now_ms, ttl_ms })
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

fn read_lease(conn: &Connection, id: &str) -> Result<Option<LeaseRow>, rusqlite::Error> {
    conn.prepare_cached("SELECT owner, epoch, expires_at_ms, host, pid, pid_start FROM leases WHERE task_id=?1")?
        .query_row([id], |r| {
            Ok(LeaseRow {
                owner: r.get(0)?,
                epoch: r.get::<_, i64>(1)? as u64,
                expires_at_ms: r.get(2)?,
                host: r.get(3)?,
                pid: r.get::<_, i64>(4)? as u32,
                pid_start: r.get::<_, i64>(5)? as u64,
            })
        })
        .optional()
}

fn insert_record(conn: &Connection, rec: &Record, epoch: u64, now: i64) -> Result<(), StoreError> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = emit(rec, &mut buf).map_err(|e| StoreError::Frame(e.to_string()))?;
    conn.prepare_cached("INSERT INTO log VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")?.execute(params![
        rec.task_id.as_str(),
        rec.seq as i64,
        rec.kind().name(),
        rec.status.name(),
        &buf[..n],
        rec.event.to_string(),
        epoch as i64,
        now
    ])?;
    Ok(())
}

/// Folds records into a state; an inconsistent log is a clear error naming the file and seq.
pub fn fold(path: &Path, id: &str, recs: &[Record]) -> TaskResult<TaskState> {
    fold_in(&path.display(), id, recs)
}

/// [`fold`] for any database (`db`: the file or the URL, for the message).
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

/// Decodes one log row's payload (the core's frame) and checks it against its row (task, seq):
/// a CRC failure or a mismatch is exit 2 naming the database (`db`), the task and the seq.
pub fn decode_row(db: &dyn std::fmt::Display, id: &str, seq: i64, payload: &[u8]) -> TaskResult<Record> {
    let corrupt = |detail: String| TaskError::LogCorrupt {
        db: db.to_string(),
        task: id.to_string(),
        seq: u64::try_from(seq).ok(),
        detail,
    };
    let (rec, n) = frame::parse(payload).map_err(|e| corrupt(format!("corrupt record: {e}")))?;
    if n != payload.len() || rec.seq as i64 != seq || rec.task_id.as_str() != id {
        return Err(corrupt(format!(
            "record does not match its row (seq {}, task {:?})",
            rec.seq,
            rec.task_id.as_str()
        )));
    }
    Ok(rec)
}

/// `BEGIN IMMEDIATE` on a shared connection (rolled back on drop unless committed): the write
/// lock is taken at the start, so the fencing read and the append see the same state.
fn immediate(conn: &Connection) -> Result<Transaction<'_>, rusqlite::Error> {
    Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
}
