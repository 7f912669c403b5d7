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
    Event, Holder, LeaseDecision, LeaseView, MAX_FRAME_LEN, Record, TaskId, TaskState, check_fence, decide_lease, emit,
    frame,
};
use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params};

use super::backend::{
    Access, AppendError, Lease, LeaseAsk, LeaseError, LeaseRow, RawLease, TaskRow, TaskStore, busy_ms, fold_in,
    lease_row, not_markable,
};
use super::faults;
use super::ident::{now_ms, provably_dead};
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
    /// Whether it is a fault-injection database (`meta` holds [`faults::META_KEY`]).
    pub fault_injection: bool,
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
    /// A row that no runner could have written (a value of the wrong type or out of range).
    #[error("{table} row of task {task:?}: {detail}")]
    CorruptRow {
        /// The table.
        table: &'static str,
        /// The row's task.
        task: String,
        /// What is wrong with it.
        detail: String,
    },
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

impl From<rusqlite::Error> for AppendError<StoreError> {
    fn from(e: rusqlite::Error) -> Self {
        AppendError::Sql(e.into())
    }
}

impl From<StoreError> for AppendError<StoreError> {
    fn from(e: StoreError) -> Self {
        AppendError::Sql(e)
    }
}

impl From<rusqlite::Error> for LeaseError<StoreError> {
    fn from(e: rusqlite::Error) -> Self {
        LeaseError::Sql(e.into())
    }
}

impl From<StoreError> for LeaseError<StoreError> {
    fn from(e: StoreError) -> Self {
        LeaseError::Sql(e)
    }
}

/// Maps a SQLite error on `path` to a CLI error: busy/locked and corrupt/not-a-database are bad
/// input (exit 2, naming the file); the rest is a failure (exit 1).
pub fn sql_error(path: &Path, what: &str, e: impl Into<StoreError>) -> TaskError {
    let e: StoreError = e.into();
    let p = path.display();
    if let StoreError::CorruptRow { table, task, detail } = e {
        return TaskError::CorruptRow { db: p.to_string(), table, task, detail };
    }
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

/// Opens a SQLite file read-only for the commands that only read (`list`, `inspect`): no WAL
/// switch, no schema, so a file this user may read but not write works. A WAL database is read
/// through its `-shm` index, which SQLite must be able to create; where it cannot (no `-wal` and a
/// directory this user may not write), nothing writes the file either (a writer keeps its `-wal`
/// and `-shm` while it has the file open), and it is read as an immutable file.
pub fn open_read_only(path: &Path) -> TaskResult<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let busy = busy_ms()?;
    let probe = |c: Connection| -> Result<Connection, rusqlite::Error> {
        c.busy_timeout(Duration::from_millis(busy))?;
        c.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))?;
        Ok(c)
    };
    match Connection::open_with_flags(path, flags).and_then(probe) {
        Ok(c) => Ok(c),
        Err(e)
            if matches!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly))
                && !wal_of(path).exists() =>
        {
            let uri = format!("file:{}?immutable=1", uri_path(path));
            Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
                .and_then(probe)
                .map_err(|e| sql_error(path, "opening read-only", e))
        }
        Err(e) => Err(sql_error(path, "opening read-only", e)),
    }
}

/// The `-wal` file next to `path`.
fn wal_of(path: &Path) -> PathBuf {
    let mut w = path.as_os_str().to_owned();
    w.push("-wal");
    PathBuf::from(w)
}

/// `path` for a `file:` URI: `%`, `?` and `#` escaped.
fn uri_path(path: &Path) -> String {
    let p = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    p.to_string_lossy().replace('%', "%25").replace('?', "%3f").replace('#', "%23")
}

/// What an existing file is, read without changing a byte of it.
enum Existing {
    /// Our log (its format tag matches); whether it is a fault-injection database.
    Ours {
        /// `meta` holds [`faults::META_KEY`].
        faults: bool,
    },
    /// A SQLite database with no tables: adopt it.
    Empty,
}

/// Opens `path` read-only and checks it is our log or an empty database. Another application's
/// database, or a file that is not a database, is bad input and left as it was: nothing is
/// written to it, not even the switch to WAL.
fn check_existing(path: &Path) -> TaskResult<Existing> {
    let p = path.display();
    let c = open_read_only(path)?;
    let look = || -> Result<Result<Existing, String>, rusqlite::Error> {
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
        let marked: Option<String> =
            c.query_row("SELECT value FROM meta WHERE key=?1", [faults::META_KEY], |r| r.get(0)).optional()?;
        Ok(Ok(Existing::Ours { faults: marked.is_some() }))
    };
    match look() {
        Ok(Ok(e)) => Ok(e),
        Ok(Err(why)) => Err(TaskError::bad_input(format!("{p}: {why}; the file was left as it was"))),
        Err(e) => Err(sql_error(path, "checking the file before using it", e)),
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
    /// Opens the log database (`access`: read only, read and append, or create it). Errors name
    /// the file. An existing file is checked read-only first ([`check_existing`]): one that is not
    /// our log is never changed. The fault hooks are armed (or refused) from its mark before
    /// anything is written ([`faults::arm`]).
    pub fn open(path: &Path, access: Access) -> TaskResult<Store> {
        if access != Access::Create && !path.exists() {
            return Err(TaskError::bad_input(format!("{}: no such log database (use --db FILE)", path.display())));
        }
        let existing = if path.exists() { Some(check_existing(path)?) } else { None };
        let marked = matches!(existing, Some(Existing::Ours { faults: true }));
        faults::arm(&path.display().to_string(), marked)?;
        if access == Access::Read {
            if !matches!(existing, Some(Existing::Ours { .. })) {
                return Err(TaskError::bad_input(format!(
                    "{}: no brokerlab task log in this file (it has no tables; `task run` creates one)",
                    path.display()
                )));
            }
            return Ok(Store { conn: open_read_only(path)?, path: path.to_path_buf(), fault_injection: marked });
        }
        let conn = open_sqlite(path, access == Access::Create)?;
        let store = Store { conn, path: path.to_path_buf(), fault_injection: marked };
        if !matches!(existing, Some(Existing::Ours { .. })) {
            store.init(false).map_err(|e| sql_error(path, "creating the schema", e))??;
        }
        Ok(store)
    }

    /// `task init [--fault-injection]`: creates the log in a new (or empty) file, marked as a
    /// fault-injection database with `faults`. An existing log is left as it is (and, asked for
    /// the mark it does not have, refused: a log is marked only when it is created). Returns
    /// whether the schema was created now.
    pub fn init_file(path: &Path, faults: bool) -> TaskResult<bool> {
        let existing = if path.exists() { Some(check_existing(path)?) } else { None };
        match existing {
            Some(Existing::Ours { faults: marked }) => {
                if faults && !marked {
                    return Err(not_markable(&path.display().to_string()));
                }
                Ok(false)
            }
            Some(Existing::Empty) | None => {
                let store = Store { conn: open_sqlite(path, true)?, path: path.to_path_buf(), fault_injection: faults };
                store.init(faults).map_err(|e| sql_error(path, "creating the schema", e))?
            }
        }
    }

    /// Creates the schema (with `faults`, the fault-injection mark) in one transaction, unless
    /// another runner created it meanwhile; returns whether it did.
    fn init(&self, faults: bool) -> Result<TaskResult<bool>, rusqlite::Error> {
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
            let marked: Option<String> = self
                .conn
                .query_row("SELECT value FROM meta WHERE key=?1", [faults::META_KEY], |r| r.get(0))
                .optional()?;
            if marked.is_some() != faults {
                // created meanwhile, with the other marking: neither runner's expectation holds
                return Ok(Err(if faults {
                    not_markable(&self.path.display().to_string())
                } else {
                    TaskError::bad_input(format!(
                        "{}: created meanwhile as a fault-injection database; use another file",
                        self.path.display()
                    ))
                }));
            }
            return Ok(Ok(false));
        }
        let others: i64 = self.conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        if others > 0 {
            return Ok(Err(TaskError::bad_input(format!(
                "{}: a SQLite database but not a brokerlab task log (no meta table)",
                self.path.display()
            ))));
        }
        self.conn.execute_batch(&format!("{SCHEMA} INSERT OR IGNORE INTO meta VALUES('format', '{FORMAT}');"))?;
        if faults {
            self.conn.execute("INSERT INTO meta VALUES(?1, ?2)", [faults::META_KEY, faults::META_VALUE])?;
        }
        tx.commit()?;
        Ok(Ok(true))
    }

    /// The task row, if the task exists. A row whose columns do not hold what a runner writes
    /// (a spec that is not text, say) is a corrupt row: exit 2 naming it.
    pub fn task(&self, id: &str) -> TaskResult<Option<TaskRow>> {
        let row: Option<[Value; 5]> = self
            .conn
            .query_row("SELECT task_id, spec, parent, world, parent_seq FROM tasks WHERE task_id=?1", [id], |r| {
                Ok([raw(r, 0)?, raw(r, 1)?, raw(r, 2)?, raw(r, 3)?, raw(r, 4)?])
            })
            .optional()
            .map_err(|e| sql_error(&self.path, "reading tasks", e))?;
        let Some([task_id, spec, parent, world, parent_seq]) = row else { return Ok(None) };
        let corrupt = |detail: String| sql_error(&self.path, "reading tasks", corrupt_row("tasks", id, detail));
        let text = |v: Value, col: &str| match v {
            Value::Text(t) => Ok(t),
            Value::Blob(b) => match String::from_utf8(b) {
                // a TEXT column read back as bytes: fine if it is UTF-8 (SQLite does not check)
                Ok(t) => Ok(t),
                Err(_) => Err(corrupt(format!("column {col} holds bytes that are not UTF-8 text"))),
            },
            other => Err(corrupt(format!("column {col} holds {other:?}, expected text"))),
        };
        let opt_text = |v: Value, col: &str| match v {
            Value::Null => Ok(None),
            v => text(v, col).map(Some),
        };
        Ok(Some(TaskRow {
            id: text(task_id, "task_id")?,
            spec: text(spec, "spec")?,
            parent: opt_text(parent, "parent")?,
            world: opt_text(world, "world")?,
            parent_seq: match parent_seq {
                Value::Null => None,
                Value::Integer(n) if n >= 0 => Some(n),
                other => return Err(corrupt(format!("column parent_seq holds {other:?}, expected a seq"))),
            },
        }))
    }

    /// The forks of `id` (tasks whose parent it is), with their cut (the last parent seq each
    /// copied).
    pub fn forks_of(&self, id: &str) -> TaskResult<Vec<(String, i64)>> {
        let read = || -> Result<Vec<(String, i64)>, rusqlite::Error> {
            let mut st = self.conn.prepare_cached(
                "SELECT task_id, parent_seq FROM tasks WHERE parent=?1 AND parent_seq IS NOT NULL ORDER BY task_id",
            )?;
            st.query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect()
        };
        read().map_err(|e| sql_error(&self.path, "reading tasks", e))
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
        fold_in(&self.path.display(), id, &recs)
    }

    /// The lease row (a corrupt one is exit 2 naming it).
    pub fn lease(&self, id: &str) -> TaskResult<Option<LeaseRow>> {
        read_lease(&self.conn, id, now_ms()).map_err(|e| sql_error(&self.path, "reading leases", e))
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
    pub fn acquire(&self, ask: &LeaseAsk<'_>) -> Result<(Lease, Record), LeaseError<StoreError>> {
        let LeaseAsk { id, me, ttl_ms, state, create, clear_suspend, open, witness } = *ask;
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
        let row = read_lease(&self.conn, id, now)?;
        let owner = me.owner();
        let view = row.as_ref().map(|r| LeaseView {
            epoch: r.epoch,
            expires_at_ms: r.expires_at_ms,
            ours: r.owner == owner,
            // only looked at when it matters (unexpired, someone else's); SQLite has no session
            // to lose, so a holder is provably dead or nothing is known
            holder: if r.owner != owner && r.expires_at_ms > now && provably_dead(&r.host, r.pid, r.pid_start) {
                Holder::Dead
            } else {
                Holder::Unknown
            },
        });
        let epoch = match decide_lease(view, state.epoch(), now, open) {
            LeaseDecision::Take { epoch, .. } => epoch,
            LeaseDecision::Refuse { epoch, expires_in_ms, why } => {
                let holder = row.map(|r| r.owner).unwrap_or_default();
                return Err(LeaseError::Held { owner: holder, epoch, expires_in_ms, why });
            }
        };
        if create.is_none() {
            // (a holder that may still act was refused above, whatever the caller read)
            // under the write lock no holder can append any more; one that appended after the
            // caller read the log (its lease expired, it woke) makes the caller's state stale
            let last: Option<i64> =
                self.conn.prepare_cached("SELECT max(seq) FROM log WHERE task_id=?1")?.query_row([id], |r| r.get(0))?;
            if last.is_some_and(|l| l >= i64::from(state.next_seq)) {
                return Err(LeaseError::Stale);
            }
        }
        // the log as of the lease is `state`: the witness reads the world against it, here,
        // where no holder can add to the log (dropped without commit on its error)
        if let Some(check) = witness {
            check().map_err(LeaseError::Witness)?;
        }
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
    pub fn renew(&self, lease: &Lease) -> Result<(), AppendError<StoreError>> {
        self.append(lease, &[])
    }

    /// Appends `recs` under `lease` in one transaction (a checkpoint). Refused when the lease's
    /// epoch is no longer current (fencing). Renews the lease.
    pub fn append(&self, lease: &Lease, recs: &[Record]) -> Result<(), AppendError<StoreError>> {
        let mut out = self.append_groups(&[(lease, recs)])?;
        out.pop().unwrap_or(Ok(()))
    }

    /// Group commit: appends several tasks' checkpoints in one transaction; each group is fenced
    /// on its own lease (a refused group does not affect the others). The outer error means the
    /// transaction failed and nothing was written.
    pub fn append_groups(
        &self,
        groups: &[(&Lease, &[Record])],
    ) -> Result<Vec<Result<(), AppendError<StoreError>>>, AppendError<StoreError>> {
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
fn append_one(
    tx: &mut Transaction<'_>,
    lease: &Lease,
    recs: &[Record],
    now: i64,
) -> Result<(), AppendError<StoreError>> {
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

/// The lease row of `id`, checked ([`lease_row`]): a value of the wrong type or out of range is a
/// corrupt row, not a lease.
fn read_lease(conn: &Connection, id: &str, now: i64) -> Result<Option<LeaseRow>, StoreError> {
    let row: Option<[Value; 6]> = conn
        .prepare_cached("SELECT owner, epoch, expires_at_ms, host, pid, pid_start FROM leases WHERE task_id=?1")?
        .query_row([id], |r| Ok([raw(r, 0)?, raw(r, 1)?, raw(r, 2)?, raw(r, 3)?, raw(r, 4)?, raw(r, 5)?]))
        .optional()?;
    let Some([owner, epoch, expires, host, pid, start]) = row else { return Ok(None) };
    let corrupt = |detail: String| corrupt_row("leases", id, detail);
    let text = |v: Value, col: &str| match v {
        Value::Text(t) => Ok(t),
        other => Err(corrupt(format!("column {col} holds {other:?}, expected text"))),
    };
    let int = |v: Value, col: &str| match v {
        Value::Integer(n) => Ok(n),
        other => Err(corrupt(format!("column {col} holds {other:?}, expected an integer"))),
    };
    let raw = RawLease {
        owner: text(owner, "owner")?,
        epoch: int(epoch, "epoch")?,
        expires_at_ms: int(expires, "expires_at_ms")?,
        host: text(host, "host")?,
        pid: int(pid, "pid")?,
        pid_start: int(start, "pid_start")?,
    };
    lease_row(raw, now).map_err(corrupt)
}

/// Column `i` as stored, whatever it holds: text that is not UTF-8 (which SQLite does not check)
/// comes back as a blob, for the caller to name as corrupt.
fn raw(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Value> {
    use rusqlite::types::ValueRef;
    Ok(match r.get_ref(i)? {
        ValueRef::Text(b) => match std::str::from_utf8(b) {
            Ok(t) => Value::Text(t.to_string()),
            Err(_) => Value::Blob(b.to_vec()),
        },
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::Integer(n),
        ValueRef::Real(x) => Value::Real(x),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    })
}

fn corrupt_row(table: &'static str, task: &str, detail: String) -> StoreError {
    StoreError::CorruptRow { table, task: task.to_string(), detail }
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

fn map_lease(path: &Path, e: LeaseError<StoreError>) -> LeaseError<TaskError> {
    match e {
        LeaseError::Held { owner, epoch, expires_in_ms, why } => LeaseError::Held { owner, epoch, expires_in_ms, why },
        LeaseError::Witness(e) => LeaseError::Witness(e),
        LeaseError::Exists => LeaseError::Exists,
        LeaseError::Stale => LeaseError::Stale,
        LeaseError::Sql(e) => LeaseError::Sql(sql_error(path, "taking the lease", e)),
    }
}

fn map_append(path: &Path, what: &str, e: AppendError<StoreError>) -> AppendError<TaskError> {
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
    fn forks_of(&self, id: &str) -> TaskResult<Vec<(String, i64)>> {
        Store::forks_of(self, id)
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
