//! The PostgreSQL binding of the runner log (`--db postgres://USER@HOST:PORT/DB`): the same
//! journal contract as the SQLite one ([`super::store`]), on the synchronous `postgres` client.
//!
//! * Tables (in the connection's current schema, `public` by default): `meta(key, value)` with the
//!   format tag [`PG_FORMAT`]; `tasks`, `leases`, `suspend_requests`, `queue` with the SQLite
//!   binding's columns, and `log` with one row per checkpoint ([`LOG_V2`]: the records' core
//!   frames back to back, authoritative, and their kinds, statuses and summaries as arrays; the
//!   view `log_records` shows one line per record). Created on first use by a command that may
//!   create (`task run`), in one transaction under an advisory lock, so runners starting together
//!   on an empty database create it once. A log of the first layout ([`PG_FORMAT_V1`], one row
//!   per record) is migrated in place by the first command that opens it, in one transaction
//!   under the same lock. A database that has tables but no `meta` with a tag of ours is refused
//!   (exit 2) and left as it was, and so is a layout this build does not know.
//! * Every session sets `synchronous_commit = on` (an `Ok` commit is on the server's disk, whatever
//!   the server's default) and `lock_timeout` = `BROKERLAB_BUSY_MS`.
//! * Every checkpoint is one statement in autocommit, prepared once per session: one round trip,
//!   one commit, one `log` row. Usually [`APPEND_SQL`], an `INSERT ... SELECT` from the lease row
//!   locked `FOR SHARE` where owner and epoch are still ours (fenced, not rewritten); once the
//!   core's `renewal_due` says the lease needs renewing, or with a `Suspended` marker,
//!   [`APPEND_RENEW_SQL`], whose `UPDATE` locks the row and renews the expiry under the same
//!   condition and which also drops the suspend request. Either lock orders the append with any
//!   takeover (which locks the row `FOR UPDATE`); the SQL condition is the core's `check_fence`
//!   rule, which decides on the row read, so a refusal has written nothing. The runner's suspend
//!   polls keep an answer (a renewing checkpoint's, or their own `SELECT`'s) for
//!   [`SUSPEND_ANSWER_MS`]. Taking a lease locks the same row (inserting an empty placeholder
//!   first if the task never had one, so two first takers also serialize) and decides with the
//!   core's `decide_lease`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use brokerlab_core::runner::{
    Event, Holder, LeaseDecision, LeaseView, MAX_FRAME_LEN, Owner, Record, TaskId, check_fence, decide_lease, emit,
    frame,
};
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Config, GenericClient, NoTls, Statement};

use super::backend::{
    AppendError, Lease, LeaseAsk, LeaseError, LeaseRow, NewTask, RawLease, Renewal, TaskRow, TaskStore, busy_ms,
    lease_row,
};
use super::faults;
use super::ident::{now_ms, provably_dead};
use super::secret::scrub;
use crate::task::error::{GoneKind, TaskError, TaskResult};

/// Format tag stored in `meta`: the PostgreSQL layout, version 2 (a checkpoint's records packed
/// into one `log` row). A database of [`PG_FORMAT_V1`] is migrated on open ([`MIGRATE_V1_SQL`]).
pub const PG_FORMAT: &str = "brokerlab-task-log-pg/2";

/// The first layout's tag: one `log` row per record.
pub const PG_FORMAT_V1: &str = "brokerlab-task-log-pg/1";

/// Key of the advisory lock taken while creating the schema (any constant; "brokerlab" in ASCII).
const SCHEMA_LOCK: i64 = 0x62726f6b65726c;

/// The `log` table of [`PG_FORMAT`] and its per-record view. One row per checkpoint: `seq` and
/// `last_seq` are the first and last record's seq, `frames` their core frames back to back
/// (authoritative; each frame carries its length), and `kinds`, `statuses`, `summaries` one
/// element per record for people reading it with SQL (`log_records` shows one line per record,
/// as the first layout's rows did). `task_id` compares bytewise (`COLLATE "C"`): the key is an
/// identifier, and the database's default collation would cost every index comparison a
/// locale-aware one.
const LOG_V2: &str = "
CREATE TABLE log(
  task_id TEXT COLLATE \"C\" NOT NULL, seq BIGINT NOT NULL, last_seq BIGINT NOT NULL,
  kinds TEXT[] NOT NULL, statuses TEXT[] NOT NULL, frames BYTEA NOT NULL, summaries TEXT[] NOT NULL,
  epoch BIGINT NOT NULL, at_ms BIGINT NOT NULL,
  PRIMARY KEY(task_id, seq));
CREATE VIEW log_records AS
  SELECT l.task_id, l.seq + i - 1 AS seq, l.kinds[i] AS kind, l.statuses[i] AS status, l.summaries[i] AS summary,
         l.epoch, l.at_ms
  FROM log l, generate_subscripts(l.kinds, 1) AS i;
";

/// The log's tables (the view `log_records` reads `log`).
pub const TABLES: [&str; 6] = ["log", "meta", "tasks", "leases", "suspend_requests", "queue"];

const SCHEMA: &str = "
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tasks(
  task_id TEXT PRIMARY KEY, spec TEXT NOT NULL, digest BIGINT NOT NULL,
  parent TEXT, parent_seq BIGINT, world TEXT, created_at_ms BIGINT NOT NULL);
CREATE TABLE leases(
  task_id TEXT PRIMARY KEY, owner TEXT NOT NULL, epoch BIGINT NOT NULL,
  expires_at_ms BIGINT NOT NULL, host TEXT NOT NULL, pid BIGINT NOT NULL, pid_start BIGINT NOT NULL);
CREATE TABLE suspend_requests(task_id TEXT PRIMARY KEY, at_ms BIGINT NOT NULL);
CREATE TABLE queue(task_id TEXT PRIMARY KEY, submitted_at_ms BIGINT NOT NULL);
";

/// From [`PG_FORMAT_V1`] to [`PG_FORMAT`], run after [`LOG_V2`] created the new table next to
/// the old one (renamed `log_v1`): every old row (one record) becomes a row of one record, which
/// is a valid row of the new layout; the frames are copied byte for byte.
const MIGRATE_V1_SQL: &str = "
INSERT INTO log(task_id, seq, last_seq, kinds, statuses, frames, summaries, epoch, at_ms)
  SELECT task_id, seq, seq, ARRAY[kind], ARRAY[status], payload, ARRAY[summary], epoch, at_ms FROM log_v1;
DROP TABLE log_v1;
";

/// A checkpoint that only checks the fence, the common case (see [`PgStore::append_tx`]): one
/// `INSERT ... SELECT` of the records' row from the lease row, which the `WHERE` finds only if
/// owner and epoch are still ours, locked `FOR SHARE`. A takeover locks the row `FOR UPDATE` (and
/// any `UPDATE` of it takes a lock that conflicts with `FOR SHARE`, unlike `FOR KEY SHARE`), so
/// a takeover in flight makes the checkpoint wait and re-read the row's newest version (under
/// READ COMMITTED: fenced, nothing inserted), and a checkpoint in flight makes the takeover
/// wait for its commit, so the taker reads the log after it. The row is not rewritten. `$1`
/// task, `$2` owner, `$3` epoch, `$4`/`$5` the first and last record's seq, `$6..$9` the
/// records' kinds, statuses, frames (back to back) and summaries, `$10` now. Inserts one row if
/// the fence allowed it, none if it refused. It does not read `suspend_requests`: the runner's
/// suspend polls ask with their own `SELECT` once the last answer is [`SUSPEND_ANSWER_MS`] old,
/// which at a fast runner's pace is one `SELECT` per many checkpoints, and the check cost every
/// checkpoint about a tenth of its time on a tmpfs-backed server.
pub const APPEND_SQL: &str = "INSERT INTO log(task_id, seq, last_seq, kinds, statuses, frames, summaries, epoch, at_ms)
SELECT $1::text, $4::bigint, $5::bigint, $6::text[], $7::text[], $8::bytea, $9::text[], $3::bigint, $10::bigint
FROM leases WHERE task_id=$1::text AND owner=$2::text AND epoch=$3::bigint FOR SHARE";

/// A checkpoint that also renews the lease, or appends a `Suspended` marker, or is a renewal
/// alone (no records). Its CTEs: `l`, the `UPDATE` that locks the lease row and writes the new
/// expiry (`$12`) only if owner and epoch are still ours; `ins`, the records' row under the same
/// condition (none for a renewal); `del`, the suspend request's removal when `$11` (a `Suspended`
/// marker is among the records). Parameters `$1..$10` as [`APPEND_SQL`]. Returns what `l` read,
/// how many rows went in, and whether a suspend request is pending.
const APPEND_RENEW_SQL: &str = "WITH l AS (
  UPDATE leases SET expires_at_ms = CASE WHEN owner=$2::text AND epoch=$3::bigint THEN $12::bigint ELSE expires_at_ms END
  WHERE task_id=$1::text RETURNING owner, epoch),
ok AS (SELECT 1 FROM l WHERE owner=$2::text AND epoch=$3::bigint),
ins AS (
  INSERT INTO log(task_id, seq, last_seq, kinds, statuses, frames, summaries, epoch, at_ms)
  SELECT $1::text, $4::bigint, $5::bigint, $6::text[], $7::text[], $8::bytea, $9::text[], $3::bigint, $10::bigint
  WHERE cardinality($6::text[]) > 0 AND EXISTS (SELECT 1 FROM ok) RETURNING 1),
del AS (DELETE FROM suspend_requests WHERE $11::boolean AND task_id=$1 AND EXISTS (SELECT 1 FROM ok) RETURNING 1)
SELECT l.owner, l.epoch, (SELECT count(*) FROM ins), EXISTS (SELECT 1 FROM suspend_requests WHERE task_id=$1)
FROM l";

/// How long a suspend-request answer (a poll's `SELECT`, or a renewing checkpoint's) is used by
/// the runner's polls before they ask the database again (ms): a request is seen at most this
/// much later than a poll per step would see it, and a runner that commits many steps in that
/// time asks once for all of them.
const SUSPEND_ANSWER_MS: i64 = 50;

/// An open PostgreSQL log.
pub struct PgStore {
    client: RefCell<Client>,
    /// The last suspend-request answer (a poll's `SELECT` or a renewing checkpoint's): its task,
    /// the flag, when (ms, stamped before the statement).
    suspend_seen: RefCell<Option<(String, bool, i64)>>,
    /// Prepared statements by their text (one parse per session, not per call).
    /// Keyed by the text's address and length (a `&'static str` constant: the same key is the
    /// same bytes), so a checkpoint does not hash its statement's text to find it.
    stmts: RefCell<HashMap<(usize, usize), Statement>>,
    name: String,
    /// Whether it is a fault-injection database (`meta` holds [`faults::META_KEY`]).
    fault_injection: bool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("name", &self.name).finish_non_exhaustive()
    }
}

pub use super::secret::{redact, without_password};

/// Classifies a PostgreSQL error into a [`TaskError`] naming the database, from the driver's
/// error itself: a closed connection or an I/O error with no server error (the server restarted
/// or went away) and SQLSTATE class 57P (shutting down, starting up, in recovery) are
/// [`TaskError::ServerGone`]; a lock wait past `BROKERLAB_BUSY_MS`, a missing database, a refused
/// login are bad input (exit 2); the rest are failures (exit 1).
pub fn pg_error(name: &str, what: &str, e: &postgres::Error) -> TaskError {
    let (db, what) = (name.to_string(), what.to_string());
    if e.is_closed() || (e.code().is_none() && e.as_db_error().is_none()) {
        return TaskError::ServerGone { db, what, kind: GoneKind::Closed, detail: scrub(&e.to_string()) };
    }
    let detail = server_words(e);
    match e.code() {
        Some(c)
            if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW =>
        {
            TaskError::ServerGone { db, what, kind: GoneKind::Shutdown, detail }
        }
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => TaskError::RowsLocked { db, what },
        Some(c)
            if *c == SqlState::INVALID_CATALOG_NAME
                || *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                || *c == SqlState::INSUFFICIENT_PRIVILEGE =>
        {
            TaskError::Refused { db, what, code: c.clone(), detail }
        }
        code => TaskError::Postgres { db, what, code: code.cloned(), detail },
    }
}

/// What the server said (severity, message, and its detail and hint if any), or the driver's words
/// when there is no server error, with every password this process has seen masked: the
/// driver's `Display` of a server error is only "db error".
fn server_words(e: &postgres::Error) -> String {
    let text = match e.as_db_error() {
        Some(d) => {
            let mut t = format!("{}: {}", d.severity(), d.message());
            if let Some(x) = d.detail() {
                t.push_str(&format!(" ({x})"));
            }
            if let Some(h) = d.hint() {
                t.push_str(&format!(" (hint: {h})"));
            }
            t
        }
        None => e.to_string(),
    };
    scrub(&text)
}

/// What a database holds, read without changing anything.
enum Existing {
    /// Our log; whether it is a fault-injection database.
    Ours {
        faults: bool,
    },
    Empty,
    /// Our log in the first layout ([`PG_FORMAT_V1`]): migrated on open.
    V1,
}

impl PgStore {
    /// Connects and checks (with `create`, creates) the schema. Errors name the URL (password
    /// hidden): a malformed URL, a server that does not answer, a missing database: exit 2. The
    /// fault hooks are armed (or refused) from the database's mark before anything is written
    /// ([`faults::arm`]).
    pub fn open(url: &str, create: bool) -> TaskResult<PgStore> {
        let (client, name) = connect(url)?;
        let mut store = PgStore {
            client: RefCell::new(client),
            suspend_seen: RefCell::new(None),
            stmts: RefCell::new(HashMap::new()),
            name,
            fault_injection: false,
        };
        let existing = store.check_existing()?;
        store.fault_injection = matches!(existing, Existing::Ours { faults: true });
        faults::arm(&store.name, store.fault_injection)?;
        match existing {
            Existing::Ours { .. } => store.check_privileges(create)?,
            Existing::V1 => store.create_schema(false)?,
            Existing::Empty if create => store.create_schema(false)?,
            Existing::Empty => {
                return Err(TaskError::bad_input(format!(
                    "{}: no brokerlab task log in this database (it has no tables; `task run` creates one)",
                    store.name
                )));
            }
        }
        Ok(store)
    }

    /// `task init [--fault-injection]` on PostgreSQL: creates the schema in an empty database,
    /// with `faults` marked as a fault-injection database. An existing log is left as it is
    /// (and, asked for a mark it does not have, refused: a log is marked only when it is
    /// created). Returns whether the schema was created now.
    pub fn init_db(url: &str, faults: bool) -> TaskResult<bool> {
        let (client, name) = connect(url)?;
        let store = PgStore {
            client: RefCell::new(client),
            suspend_seen: RefCell::new(None),
            stmts: RefCell::new(HashMap::new()),
            name,
            fault_injection: faults,
        };
        match store.check_existing()? {
            Existing::Ours { faults: marked } if marked || !faults => Ok(false),
            Existing::Ours { .. } | Existing::V1 if faults => Err(super::backend::not_markable(&store.name)),
            Existing::Ours { .. } | Existing::V1 => store.create_schema(false).map(|()| false),
            Existing::Empty => store.create_schema(faults).map(|()| true),
        }
    }

    /// Whether this is a fault-injection database.
    pub fn fault_injection(&self) -> bool {
        self.fault_injection
    }

    /// The privileges the runner's role needs on an existing log, checked before anything else
    /// is done (docs/RUNNER.md, "The database role"): SELECT on every table, and with `write`
    /// INSERT, UPDATE and DELETE too. A role without them is refused at once (exit 2), naming the
    /// tables and the GRANT that fixes it, rather than failing half-way with SQLSTATE 42501.
    fn check_privileges(&self, write: bool) -> TaskResult<()> {
        let need = if write { "SELECT,INSERT,UPDATE,DELETE" } else { "SELECT" };
        // one privilege at a time: has_table_privilege(t, 'A,B') is true if *any* is held
        let sql = "SELECT current_user::text, current_schema()::text, \
                   coalesce(array_agg(DISTINCT t ORDER BY t), '{}') \
                   FROM unnest($1::text[]) t, unnest(string_to_array($2, ',')) p \
                   WHERE to_regclass(quote_ident(current_schema()) || '.' || quote_ident(t)) IS NOT NULL \
                   AND NOT has_table_privilege(quote_ident(current_schema()) || '.' || quote_ident(t), p)";
        let tables: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
        let row = self
            .client
            .borrow_mut()
            .query_one(sql, &[&tables, &need])
            .map_err(|e| pg_error(&self.name, "checking the role's privileges", &e))?;
        let (user, schema, missing): (String, String, Vec<String>) = (row.get(0), row.get(1), row.get(2));
        if missing.is_empty() {
            return Ok(());
        }
        Err(TaskError::bad_input(format!(
            "{}: role {user} lacks {need} on {schema}.{} (the runner needs them on every table of its log); e.g.              GRANT {} ON ALL TABLES IN SCHEMA {schema} TO {user}, or run it as the role that created the log",
            self.name,
            missing.join(", "),
            need.replace(',', ", ")
        )))
    }

    /// Refuses a role that may not create the log's tables in its current schema (PostgreSQL 15
    /// took CREATE on `public` from PUBLIC), before the schema transaction, naming the fixes.
    fn check_create(tx: &mut impl GenericClient, name: &str) -> Result<TaskResult<()>, postgres::Error> {
        let r = tx.query_one(
            "SELECT current_user::text, current_schema()::text, current_database()::text, \
             has_schema_privilege(current_schema(), 'CREATE')",
            &[],
        )?;
        let (user, schema, db, create): (String, String, String, bool) = (r.get(0), r.get(1), r.get(2), r.get(3));
        if create {
            return Ok(Ok(()));
        }
        Ok(Err(TaskError::bad_input(format!(
            "{name}: role {user} may not create tables in schema {schema} of database {db}, and the task log is not              there yet (PostgreSQL 15 and later no longer let every role create in public). Either make {user} the              database's owner (ALTER DATABASE {db} OWNER TO {user}), or GRANT CREATE ON SCHEMA {schema} TO {user}, or              give it its own schema (CREATE SCHEMA {user} AUTHORIZATION {user}); nothing was written"
        ))))
    }

    /// Reads the catalog (and `meta` if present): ours, empty, or refused.
    fn check_existing(&self) -> TaskResult<Existing> {
        // a role that may not read the log's tables is told so, not a permission error
        self.check_privileges(false)?;
        let mut c = self.client.borrow_mut();
        let what = "checking the database before using it";
        look(&mut *c, &self.name).map_err(|e| pg_error(&self.name, what, &e))?
    }

    /// Creates the schema in an empty database, or migrates a [`PG_FORMAT_V1`] log to
    /// [`PG_FORMAT`]: one transaction under the schema lock, so runners starting together do it
    /// once, and a crash or a failure leaves the database as it was.
    fn create_schema(&self, mark: bool) -> TaskResult<()> {
        let mut c = self.client.borrow_mut();
        let r = (|| -> Result<TaskResult<Option<i64>>, postgres::Error> {
            let mut tx = c.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
            // another runner may have created or migrated it between our look and our lock
            match look(&mut tx, &self.name)? {
                Ok(Existing::Ours { faults }) if faults == mark || !mark => Ok(Ok(None)),
                Ok(Existing::Ours { .. }) => Ok(Err(super::backend::not_markable(&self.name))),
                Ok(Existing::Empty) => {
                    if let Err(e) = Self::check_create(&mut tx, &self.name)? {
                        return Ok(Err(e));
                    }
                    tx.batch_execute(SCHEMA)?;
                    tx.batch_execute(LOG_V2)?;
                    tx.execute("INSERT INTO meta VALUES('format', $1)", &[&PG_FORMAT])?;
                    if mark {
                        tx.execute("INSERT INTO meta VALUES($1, $2)", &[&faults::META_KEY, &faults::META_VALUE])?;
                    }
                    tx.commit()?;
                    Ok(Ok(None))
                }
                Ok(Existing::V1) => {
                    // the old table and its key index out of the new ones' way
                    tx.batch_execute("ALTER TABLE log RENAME TO log_v1; ALTER INDEX log_pkey RENAME TO log_v1_pkey")?;
                    tx.batch_execute(LOG_V2)?;
                    let n: i64 = tx.query_one("SELECT count(*) FROM log_v1", &[])?.get(0);
                    tx.batch_execute(MIGRATE_V1_SQL)?;
                    tx.execute("UPDATE meta SET value=$1 WHERE key='format'", &[&PG_FORMAT])?;
                    tx.commit()?;
                    Ok(Ok(Some(n)))
                }
                Err(e) => Ok(Err(e)),
            }
        })();
        let migrated = r.map_err(|e| pg_error(&self.name, "creating or migrating the schema", &e))??;
        if let Some(n) = migrated {
            eprintln!(
                "note: {}: migrated the task log from {PG_FORMAT_V1} to {PG_FORMAT} ({n} records, one transaction; \
                 a brokerlab that reads only {PG_FORMAT_V1} now refuses this database)",
                self.name
            );
        }
        Ok(())
    }

    /// A prepared statement for `sql` on `c` (the session's; cached).
    fn stmt(&self, c: &mut impl GenericClient, sql: &'static str) -> Result<Statement, postgres::Error> {
        let key = (sql.as_ptr() as usize, sql.len());
        if let Some(s) = self.stmts.borrow().get(&key) {
            return Ok(s.clone());
        }
        let s = c.prepare(sql)?;
        self.stmts.borrow_mut().insert(key, s.clone());
        Ok(s)
    }

    fn read_lease(
        &self,
        c: &mut impl GenericClient,
        id: &str,
        lock: bool,
    ) -> Result<TaskResult<Option<LeaseRow>>, postgres::Error> {
        let sql = if lock {
            "SELECT owner, epoch, expires_at_ms, host, pid, pid_start FROM leases WHERE task_id=$1 FOR UPDATE"
        } else {
            "SELECT owner, epoch, expires_at_ms, host, pid, pid_start FROM leases WHERE task_id=$1"
        };
        let st = self.stmt(c, sql)?;
        let Some(r) = c.query_opt(&st, &[&id])? else { return Ok(Ok(None)) };
        let raw = RawLease {
            owner: r.get(0),
            epoch: r.get(1),
            expires_at_ms: r.get(2),
            host: r.get(3),
            pid: r.get(4),
            pid_start: r.get(5),
        };
        // the placeholder a first taker inserts to have a row to lock (owner ''): no lease yet
        Ok(lease_row(raw, now_ms()).map_err(|detail| TaskError::CorruptRow {
            db: self.name.clone(),
            table: "leases",
            task: id.to_string(),
            detail,
        }))
    }

    fn insert_record(
        &self,
        c: &mut impl GenericClient,
        rec: &Record,
        epoch: u64,
        now: i64,
    ) -> Result<(), postgres::Error> {
        let mut buf = [0u8; MAX_FRAME_LEN];
        // a record the core built always fits a frame (limits are checked when it is made)
        let n = emit(rec, &mut buf).unwrap_or(0);
        let st = self.stmt(
            c,
            "INSERT INTO log(task_id, seq, last_seq, kinds, statuses, frames, summaries, epoch, at_ms) \
             VALUES($1, $2, $2, ARRAY[$3::text], ARRAY[$4::text], $5, ARRAY[$6::text], $7, $8)",
        )?;
        c.execute(
            &st,
            &[
                &rec.task_id.as_str(),
                &i64::from(rec.seq),
                &rec.kind().name(),
                &rec.status.name(),
                &&buf[..n],
                &rec.event.to_string(),
                &(epoch as i64),
                &now,
            ],
        )?;
        Ok(())
    }

    /// One checkpoint as one statement in autocommit: one round trip and one commit (the
    /// statement's implicit transaction), whatever the number of records, and one `log` row for
    /// all of them. Unless `renew` (the core's `renewal_due`), a `Suspended` marker or no
    /// records, it is [`APPEND_SQL`]: the row goes in only if the lease row, locked `FOR SHARE`,
    /// still names us (the SQL condition is the core's `check_fence` rule; on a refusal the row
    /// is read again for the message, and `check_fence` must agree). Otherwise it is
    /// [`APPEND_RENEW_SQL`], which locks the row with the `UPDATE` that renews it, and `check_fence`
    /// decides on the owner and epoch it read. Either lock conflicts with a takeover's `FOR
    /// UPDATE`, and under READ COMMITTED a takeover that committed meanwhile is seen (the row
    /// re-read). The renewing statement also returns whether a suspend request is pending (kept
    /// for the runner's next polls). A refusal has written nothing.
    fn append_tx(
        &self,
        lease: &Lease,
        recs: &[Record],
        renew: bool,
    ) -> Result<Result<Renewal, AppendError<TaskError>>, postgres::Error> {
        let now = now_ms();
        let Some(expires) = now.checked_add(lease.ttl_ms) else {
            return Ok(Err(AppendError::Sql(TaskError::failure(format!(
                "lease expiry {now} + {} ms overflows",
                lease.ttl_ms
            )))));
        };
        debug_assert!(recs.iter().all(|r| r.task_id.as_str() == lease.task), "a checkpoint holds one task's records");
        let first = recs.first().map_or(0, |r| i64::from(r.seq));
        let last = first + recs.len() as i64 - 1;
        if recs.iter().zip(first..).any(|(r, s)| i64::from(r.seq) != s) {
            return Ok(Err(AppendError::Sql(TaskError::failure(format!(
                "{}: task {:?}: a checkpoint's records must have consecutive seqs from {first}",
                self.name, lease.task
            )))));
        }
        let mut frames = Vec::with_capacity(recs.len() * 128);
        for rec in recs {
            let mut buf = [0u8; MAX_FRAME_LEN];
            // a record the core built always fits a frame (limits are checked when it is made)
            let n = emit(rec, &mut buf).unwrap_or(0);
            frames.extend_from_slice(&buf[..n]);
        }
        let kinds: Vec<&str> = recs.iter().map(|r| r.kind().name()).collect();
        let statuses: Vec<&str> = recs.iter().map(|r| r.status.name()).collect();
        let summaries: Vec<String> = recs.iter().map(|r| r.event.to_string()).collect();
        let suspending = recs.iter().any(|r| matches!(r.event, Event::Suspended { .. }));
        let epoch = lease.epoch as i64;
        let mut c = self.client.borrow_mut();
        let params: [&(dyn postgres::types::ToSql + Sync); 12] = [
            &lease.task,
            &lease.owner,
            &epoch,
            &first,
            &last,
            &kinds,
            &statuses,
            &frames,
            &summaries,
            &now,
            &suspending,
            &expires,
        ];
        if !renew && !suspending && !recs.is_empty() {
            let st = self.stmt(&mut *c, APPEND_SQL)?;
            if c.execute(&st, &params[..10])? == 0 {
                // refused by the fence: the row as it is now names the holder
                let cur = match self.read_lease(&mut *c, &lease.task, false)? {
                    Ok(row) => row.map(|r| (r.owner, r.epoch)),
                    Err(e) => return Ok(Err(AppendError::Sql(e))),
                };
                return Ok(Err(self.fenced(lease, cur)));
            }
            return Ok(Ok(Renewal::Kept));
        }
        let st = self.stmt(&mut *c, APPEND_RENEW_SQL)?;
        let row = c.query_opt(&st, &params)?;
        let cur: Option<(String, i64)> = row.as_ref().map(|r| (r.get(0), r.get(1)));
        let inserted: i64 = row.as_ref().map_or(0, |r| r.get(2));
        let cur = cur.filter(|(o, _)| !o.is_empty());
        if check_fence(cur.as_ref().map(|(o, e)| (*e as u64, *o == lease.owner)), lease.epoch).is_err() {
            debug_assert_eq!(inserted, 0, "the SQL condition and check_fence agree");
            if inserted != 0 {
                return Ok(Err(self.disagree(lease)));
            }
            return Ok(Err(AppendError::Fenced { epoch: lease.epoch, holder: cur.map(|(o, e)| (o, e as u64)) }));
        }
        if inserted != i64::from(!recs.is_empty()) {
            return Ok(Err(AppendError::Sql(TaskError::failure(format!(
                "{}: task {:?}: appended {inserted} rows for {} records",
                self.name,
                lease.task,
                recs.len()
            )))));
        }
        let pending: bool = row.as_ref().is_some_and(|r| r.get(3));
        *self.suspend_seen.borrow_mut() = Some((lease.task.clone(), pending && !suspending, now));
        Ok(Ok(if renew { Renewal::Renewed } else { Renewal::Kept }))
    }

    /// The error of a checkpoint that the SQL fence refused, given the lease row read after it
    /// (`None`: no lease, or the placeholder): `Fenced` naming the holder, as the core's
    /// `check_fence` decides; if it would have allowed the append, the two disagree (a bug).
    fn fenced(&self, lease: &Lease, cur: Option<(String, u64)>) -> AppendError<TaskError> {
        let cur = cur.filter(|(o, _)| !o.is_empty());
        if check_fence(cur.as_ref().map(|(o, e)| (*e, *o == lease.owner)), lease.epoch).is_ok() {
            debug_assert!(false, "the SQL condition and check_fence agree");
            return self.disagree(lease);
        }
        AppendError::Fenced { epoch: lease.epoch, holder: cur }
    }

    fn disagree(&self, lease: &Lease) -> AppendError<TaskError> {
        AppendError::Sql(TaskError::failure(format!(
            "{}: task {:?}: the append's fencing condition and the core's check_fence disagree",
            self.name, lease.task
        )))
    }

    fn acquire_tx(
        &self,
        ask: &LeaseAsk<'_>,
    ) -> Result<Result<(Lease, Record), LeaseError<TaskError>>, postgres::Error> {
        let LeaseAsk { id, me, ttl_ms, state, create, clear_suspend, open, witness } = *ask;
        let now = now_ms();
        let Some(expires) = now.checked_add(ttl_ms) else {
            return Ok(Err(LeaseError::Sql(TaskError::failure(format!("lease expiry {now} + {ttl_ms} ms overflows")))));
        };
        let owner = me.owner();
        let (Ok(task), Ok(owner_h)) = (TaskId::try_from(id), Owner::try_from(owner.as_str())) else {
            return Ok(Err(LeaseError::Sql(TaskError::bad_input(format!(
                "task id {id:?} or owner {owner:?} too long"
            )))));
        };
        let mut c = self.client.borrow_mut();
        let mut tx = c.transaction()?;
        if let Some(new) = create {
            let n = tx.execute(
                "INSERT INTO tasks VALUES($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (task_id) DO NOTHING",
                &[&id, &new.spec_json, &i64::from(new.digest), &new.parent, &new.parent_seq, &new.world, &now],
            )?;
            if n == 0 {
                return Ok(Err(LeaseError::Exists));
            }
            for rec in &new.records {
                self.insert_record(&mut tx, rec, 0, now)?;
            }
        }
        // a row to lock even for a task nobody held yet (two first takers wait for each other)
        let st =
            self.stmt(&mut tx, "INSERT INTO leases VALUES($1, '', 0, 0, '', 0, 0) ON CONFLICT (task_id) DO NOTHING")?;
        tx.execute(&st, &[&id])?;
        let row = match self.read_lease(&mut tx, id, true)? {
            Ok(r) => r,
            Err(e) => return Ok(Err(LeaseError::Sql(e))),
        };
        // this session holds the session lock of at most the lease it takes now
        tx.execute("SELECT pg_advisory_unlock_all()", &[])?;
        let mut holder = Holder::Unknown;
        if let Some(r) = &row
            && r.owner != owner
            && r.expires_at_ms > now
        {
            if provably_dead(&r.host, r.pid, r.pid_start) {
                holder = Holder::Dead;
            } else {
                // the holder's session holds this lock from its acquire on: free means the
                // session is gone (its process died, the server restarted, the connection was
                // cut): not proof that the process died (the dropped-session rule decides)
                let key = session_key(id, r.epoch);
                let got: bool = tx.query_one("SELECT pg_try_advisory_lock($1)", &[&key])?.get(0);
                if got {
                    tx.execute("SELECT pg_advisory_unlock($1)", &[&key])?;
                    holder = Holder::SessionGone;
                }
            }
        }
        let view = row.as_ref().map(|r| LeaseView {
            epoch: r.epoch,
            expires_at_ms: r.expires_at_ms,
            ours: r.owner == owner,
            holder,
        });
        let epoch = match decide_lease(view, state.epoch(), now, open) {
            LeaseDecision::Take { epoch, .. } => epoch,
            LeaseDecision::Refuse { epoch, expires_in_ms, why } => {
                let holder = row.map(|r| r.owner).unwrap_or_default();
                return Ok(Err(LeaseError::Held { owner: holder, epoch, expires_in_ms, why }));
            }
        };
        if create.is_none() {
            // (a holder that may still act was refused above, whatever the caller read)
            // under the row lock no holder can commit any more; a killed holder's last commit may
            // have landed (the server finishes a COMMIT its client sent) after the caller read the
            // log: then the caller's state is stale
            // rows hold runs of seqs back to back: the last row's last seq is the log's last
            let st = self.stmt(&mut tx, "SELECT last_seq FROM log WHERE task_id=$1 ORDER BY seq DESC LIMIT 1")?;
            let last: Option<i64> = tx.query_opt(&st, &[&id])?.map(|r| r.get(0));
            if last.is_some_and(|l| l >= i64::from(state.next_seq)) {
                return Ok(Err(LeaseError::Stale));
            }
        }
        // the log as of the lease is `state` (checked above): the witness reads the world
        // against it here, where no holder can add to the log; its error rolls all of this back
        if let Some(check) = witness
            && let Err(e) = check()
        {
            return Ok(Err(LeaseError::Witness(e)));
        }
        // ours for as long as this session lives (taken before the commit, so a committed lease
        // always had it); if another session holds the key (a hash collision, or a taker of the
        // same epoch whose commit failed), the lease is taken without it and others wait for
        // its expiry, the conservative side
        tx.query_one("SELECT pg_try_advisory_lock($1)", &[&session_key(id, epoch)])?;
        let st = self.stmt(
            &mut tx,
            "UPDATE leases SET owner=$2, epoch=$3, expires_at_ms=$4, host=$5, pid=$6, pid_start=$7 WHERE task_id=$1",
        )?;
        tx.execute(&st, &[&id, &owner, &(epoch as i64), &expires, &me.host, &i64::from(me.pid), &(me.start as i64)])?;
        if clear_suspend {
            let st = self.stmt(&mut tx, "DELETE FROM suspend_requests WHERE task_id=$1")?;
            tx.execute(&st, &[&id])?;
        }
        let rec = Record::new(task, state.next_seq, Event::LeaseAcquired { owner: owner_h, epoch });
        self.insert_record(&mut tx, &rec, epoch, now)?;
        // idle workers look again (on the commit): they now watch this holder's session lock
        let st = self.stmt(&mut tx, "SELECT pg_notify($1, $2)")?;
        tx.execute(&st, &[&NOTIFY_CHANNEL, &id])?;
        tx.commit()?;
        Ok(Ok((Lease { task: id.to_string(), owner, epoch, ttl_ms, taken_at_ms: now }, rec)))
    }
}

/// The session-level advisory lock a lease holder keeps for (task, epoch) while its session lives
/// (FNV-1a 64 over the task id and the epoch). Another runner that gets it with
/// `pg_try_advisory_lock` knows the holder's session is gone, and takes the lease at once.
pub fn session_key(task: &str, epoch: u64) -> i64 {
    lock_key(task, 0xff, epoch)
}

/// FNV-1a 64 over the task id, a separator byte naming the lock's namespace, and the epoch
/// (little-endian), as a PostgreSQL advisory lock key.
fn lock_key(task: &str, separator: u8, epoch: u64) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in task.bytes().chain([separator]).chain(epoch.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// The records of one `log` row (seqs `seq..=last_seq`, their frames back to back in `frames`),
/// appended to `out`, each checked as the SQLite binding checks its row (CRC, canonical
/// encoding, task id, seq); a row whose frames do not cover exactly its seqs is corrupt. Errors
/// name the database, the task and the seq.
fn unpack_row(db: &str, id: &str, seq: i64, last_seq: i64, frames: &[u8], out: &mut Vec<Record>) -> TaskResult<()> {
    let corrupt = |at: i64, detail: String| TaskError::LogCorrupt {
        db: db.to_string(),
        task: id.to_string(),
        seq: u64::try_from(at).ok(),
        detail,
    };
    if last_seq < seq {
        return Err(corrupt(seq, format!("row of seqs {seq}..={last_seq}: last before first")));
    }
    let (mut at, mut rest) = (seq, frames);
    while !rest.is_empty() {
        let (rec, n) = frame::parse(rest).map_err(|e| corrupt(at, format!("corrupt record: {e}")))?;
        if i64::from(rec.seq) != at || rec.task_id.as_str() != id || at > last_seq {
            return Err(corrupt(
                at,
                format!(
                    "record does not match its row (seq {}, task {:?}; the row holds seqs {seq}..={last_seq})",
                    rec.seq,
                    rec.task_id.as_str()
                ),
            ));
        }
        out.push(rec);
        rest = &rest[n..];
        at += 1;
    }
    if at != last_seq + 1 {
        return Err(corrupt(at, format!("the row holds seqs {seq}..={last_seq} but frames up to {}", at - 1)));
    }
    Ok(())
}

/// The `application_name` of this process's sessions: `brokerlab:PID`, so an operator (or `task
/// chaos`, dropping a holder's sessions) finds them in `pg_stat_activity`.
pub fn application_name() -> String {
    format!("brokerlab:{}", std::process::id())
}

/// Pause between connection attempts while the server is starting up or recovering, ms.
pub const STARTING_UP_RETRY_MS: u64 = 100;

/// Default time a connection may take, s, unless the URL sets `connect_timeout`: also how long a
/// server that answers "starting up" or "in recovery" is waited for.
pub const CONNECT_TIMEOUT_S: u64 = 10;

/// Connects to `url` with the session settings every runner uses (`synchronous_commit = on`,
/// `lock_timeout` from `BROKERLAB_BUSY_MS`); returns the client and the URL for messages. The
/// password is the URL's, else `$PGPASSWORD`'s (as libpq does); every form of it is kept out of
/// messages ([`super::secret`]). A server that refuses sessions for now (SQLSTATE 57P03: starting
/// up, in crash recovery, shutting down) is asked again every [`STARTING_UP_RETRY_MS`] until the
/// connect timeout (the URL's, else [`CONNECT_TIMEOUT_S`]); if it still refuses, the error is
/// [`TaskError::ServerGone`] (exit 1: the same command succeeds once the server is up), naming
/// what it said.
pub(crate) fn connect(url: &str) -> TaskResult<(Client, String)> {
    super::secret::remember(url);
    let name = redact(url);
    let (url, tls) = super::tls::split(url).map_err(|m| TaskError::bad_input(format!("--db {name}: {m}")))?;
    let tls = super::tls::connector(&tls).map_err(|m| TaskError::bad_input(format!("--db {name}: {m}")))?;
    let mut cfg = Config::from_str(&url).map_err(|e| {
        TaskError::bad_input(format!("--db {name}: not a valid PostgreSQL URL: {}", scrub(&e.to_string())))
    })?;
    if cfg.get_dbname().is_none() {
        return Err(TaskError::bad_input(format!(
            "--db {name}: the URL names no database (postgres://USER@HOST:PORT/DB)"
        )));
    }
    if cfg.get_hosts().is_empty() {
        return Err(TaskError::bad_input(format!("--db {name}: the URL names no host (postgres://USER@HOST:PORT/DB)")));
    }
    if cfg.get_user().is_none() {
        return Err(TaskError::bad_input(format!("--db {name}: the URL names no user (postgres://USER@HOST:PORT/DB)")));
    }
    if cfg.get_password().is_none()
        && let Ok(p) = std::env::var("PGPASSWORD")
        && !p.is_empty()
    {
        cfg.password(p);
    }
    let timeout = cfg.get_connect_timeout().copied().unwrap_or(Duration::from_secs(CONNECT_TIMEOUT_S));
    cfg.connect_timeout(timeout);
    cfg.application_name(&application_name());
    let busy = busy_ms()?.max(1);
    let started = std::time::Instant::now();
    let mut client = loop {
        let attempt = match &tls {
            Some(t) => cfg.connect(t.clone()),
            None => cfg.connect(NoTls),
        };
        match attempt {
            Ok(c) => break c,
            Err(e) if e.code() == Some(&SqlState::CANNOT_CONNECT_NOW) => {
                if started.elapsed() >= timeout {
                    return Err(TaskError::ServerGone {
                        db: name,
                        what: "connecting".into(),
                        kind: GoneKind::Shutdown,
                        detail: format!(
                            "{} (asked every {STARTING_UP_RETRY_MS} ms for {:.1} s, the connect timeout)",
                            server_words(&e),
                            started.elapsed().as_secs_f64()
                        ),
                    });
                }
                std::thread::sleep(Duration::from_millis(STARTING_UP_RETRY_MS));
            }
            Err(e) if e.as_db_error().is_some() => return Err(pg_error(&name, "connecting", &e)),
            // with its causes: "error performing TLS handshake" alone does not say the
            // certificate's name or CA was wrong
            Err(e) => return Err(TaskError::Unreachable { db: name, detail: scrub(&with_causes(&e)) }),
        }
    };
    client
        .batch_execute(&format!("SET synchronous_commit = on; SET lock_timeout = {busy}"))
        .map_err(|e| pg_error(&name, "setting up the session", &e))?;
    Ok((client, name))
}

/// An error's text followed by its sources' (`a: b: c`), each once.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !s.contains(&t) {
            s = format!("{s}: {t}");
        }
        cause = c.source();
    }
    s
}

/// Our log, an empty database, or (inner `Err`) another application's.
fn look(c: &mut impl GenericClient, name: &str) -> Result<TaskResult<Existing>, postgres::Error> {
    let schema: Option<String> = c.query_one("SELECT current_schema()", &[])?.get(0);
    let Some(schema) = schema else {
        return Ok(Err(TaskError::bad_input(format!(
            "{name}: the session has no current schema (search_path); nothing was written"
        ))));
    };
    let tables: Vec<(String, String)> = c
        .query(
            "SELECT schemaname::text, tablename::text FROM pg_catalog.pg_tables WHERE schemaname NOT IN \
             ('pg_catalog', 'information_schema') ORDER BY 1, 2",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    if tables.is_empty() {
        return Ok(Ok(Existing::Empty));
    }
    if !tables.iter().any(|(s, t)| *s == schema && t == "meta") {
        let some: Vec<String> = tables.iter().take(5).map(|(s, t)| format!("{s}.{t}")).collect();
        return Ok(Err(TaskError::bad_input(format!(
            "{name}: a database with tables ({}{}) but not a brokerlab task log (no meta table in schema {schema}); \
             it was left as it was",
            some.join(", "),
            if tables.len() > 5 { ", ..." } else { "" }
        ))));
    }
    // another application's `meta` may have other columns: read it as text, whatever it holds
    let fmt = c.query_opt("SELECT value::text FROM meta WHERE key::text = 'format'", &[]);
    let fmt: Option<String> = match fmt {
        Ok(r) => r.map(|r| r.get(0)),
        Err(e) if e.as_db_error().is_some() => None,
        Err(e) => return Err(e),
    };
    match fmt.as_deref() {
        Some(PG_FORMAT) => {
            let marked = c.query_opt("SELECT 1 FROM meta WHERE key::text = $1", &[&faults::META_KEY])?.is_some();
            Ok(Ok(Existing::Ours { faults: marked }))
        }
        Some(PG_FORMAT_V1) => Ok(Ok(Existing::V1)),
        Some(f) if f.starts_with("brokerlab-task-log-pg/") => Ok(Err(TaskError::bad_input(format!(
            "{name}: a brokerlab task log of layout {f:?}, which this build does not know (it reads {PG_FORMAT:?} \
             and migrates {PG_FORMAT_V1:?}; a newer brokerlab wrote it?); it was left as it was"
        )))),
        _ => Ok(Err(TaskError::bad_input(format!(
            "{name}: not a brokerlab task log (meta format {fmt:?}, expected {PG_FORMAT:?}); it was left as it was"
        )))),
    }
}

impl TaskStore for PgStore {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn task(&self, id: &str) -> TaskResult<Option<TaskRow>> {
        let mut c = self.client.borrow_mut();
        let r = (|| {
            let st =
                self.stmt(&mut *c, "SELECT task_id, spec, parent, world, parent_seq FROM tasks WHERE task_id=$1")?;
            c.query_opt(&st, &[&id])
        })();
        r.map(|row| {
            row.map(|r| TaskRow {
                id: r.get(0),
                spec: r.get(1),
                parent: r.get(2),
                world: r.get(3),
                parent_seq: r.get(4),
            })
        })
        .map_err(|e| pg_error(&self.name, "reading tasks", &e))
    }

    fn task_ids(&self) -> TaskResult<Vec<String>> {
        let mut c = self.client.borrow_mut();
        c.query("SELECT task_id FROM tasks ORDER BY created_at_ms, task_id", &[])
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
            .map_err(|e| pg_error(&self.name, "listing tasks", &e))
    }

    fn forks_of(&self, id: &str) -> TaskResult<Vec<(String, i64)>> {
        let mut c = self.client.borrow_mut();
        c.query(
            "SELECT task_id, parent_seq FROM tasks WHERE parent=$1 AND parent_seq IS NOT NULL ORDER BY task_id",
            &[&id],
        )
        .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        .map_err(|e| pg_error(&self.name, "reading tasks", &e))
    }

    fn records(&self, id: &str) -> TaskResult<Vec<Record>> {
        let rows = {
            let mut c = self.client.borrow_mut();
            let r = (|| {
                let st = self.stmt(&mut *c, "SELECT seq, last_seq, frames FROM log WHERE task_id=$1 ORDER BY seq")?;
                c.query(&st, &[&id])
            })();
            r.map_err(|e| pg_error(&self.name, "reading the log", &e))?
        };
        let mut recs = Vec::with_capacity(rows.len() * 3);
        for r in &rows {
            unpack_row(&self.name, id, r.get(0), r.get(1), r.get::<_, &[u8]>(2), &mut recs)?;
        }
        Ok(recs)
    }

    fn lease(&self, id: &str) -> TaskResult<Option<LeaseRow>> {
        let mut c = self.client.borrow_mut();
        self.read_lease(&mut *c, id, false).map_err(|e| pg_error(&self.name, "reading leases", &e))?
    }

    fn suspend_requested(&self, id: &str) -> TaskResult<bool> {
        if let Some((task, seen, at)) = &*self.suspend_seen.borrow()
            && task == id
            && now_ms().saturating_sub(*at) <= SUSPEND_ANSWER_MS
        {
            return Ok(*seen);
        }
        // the answer is as of the query's start, or later: stamped before it
        let at = now_ms();
        let mut c = self.client.borrow_mut();
        let r = (|| {
            let st = self.stmt(&mut *c, "SELECT count(*) FROM suspend_requests WHERE task_id=$1")?;
            c.query_one(&st, &[&id])
        })();
        let seen =
            r.map(|row| row.get::<_, i64>(0) > 0).map_err(|e| pg_error(&self.name, "polling suspend requests", &e))?;
        *self.suspend_seen.borrow_mut() = Some((id.to_string(), seen, at));
        Ok(seen)
    }

    fn request_suspend(&self, id: &str) -> TaskResult<()> {
        let mut c = self.client.borrow_mut();
        c.execute(
            "INSERT INTO suspend_requests VALUES($1, $2) ON CONFLICT (task_id) DO UPDATE SET at_ms = EXCLUDED.at_ms",
            &[&id, &now_ms()],
        )
        .map(|_| ())
        .map_err(|e| pg_error(&self.name, "writing the suspend request", &e))
    }

    fn acquire(&self, ask: &LeaseAsk<'_>) -> Result<(Lease, Record), LeaseError<TaskError>> {
        match self.acquire_tx(ask) {
            Ok(r) => r,
            Err(e) => Err(LeaseError::Sql(pg_error(&self.name, "taking the lease", &e))),
        }
    }

    fn append(&self, lease: &Lease, recs: &[Record]) -> Result<(), AppendError<TaskError>> {
        self.checkpoint(lease, recs, true).map(|_| ())
    }

    fn checkpoint(&self, lease: &Lease, recs: &[Record], renewal_due: bool) -> Result<Renewal, AppendError<TaskError>> {
        match self.append_tx(lease, recs, renewal_due) {
            Ok(r) => r,
            Err(e) => Err(AppendError::Sql(pg_error(&self.name, "appending a checkpoint", &e))),
        }
    }

    fn renew(&self, lease: &Lease) -> Result<(), AppendError<TaskError>> {
        match self.append_tx(lease, &[], true) {
            Ok(r) => r.map(|_| ()),
            Err(e) => Err(AppendError::Sql(pg_error(&self.name, "renewing the lease", &e))),
        }
    }

    fn release(&self, lease: &Lease) {
        let mut c = self.client.borrow_mut();
        // one statement: the expiry, the session lock, and a notice to idle workers
        let _ = c.execute(
            "WITH u AS (UPDATE leases SET expires_at_ms=0 WHERE task_id=$1 AND epoch=$2 AND owner=$3 RETURNING 1) \
             SELECT pg_advisory_unlock($4), pg_notify($5, $1)",
            &[
                &lease.task,
                &(lease.epoch as i64),
                &lease.owner,
                &session_key(&lease.task, lease.epoch),
                &NOTIFY_CHANNEL,
            ],
        );
    }
}

impl PgStore {
    /// `task submit`: creates the task (its spec and `Created` record, no lease) unless its id
    /// exists, and puts it in `queue` for the workers: one transaction, durable on `Ok`, nothing
    /// of it after a crash during the call. Returns whether the task was created (false: it
    /// existed, and is queued again).
    pub fn submit(&self, id: &str, new: &NewTask) -> TaskResult<bool> {
        let r = (|| -> Result<bool, postgres::Error> {
            let now = now_ms();
            let mut c = self.client.borrow_mut();
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "INSERT INTO tasks VALUES($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (task_id) DO NOTHING",
                &[&id, &new.spec_json, &i64::from(new.digest), &new.parent, &new.parent_seq, &new.world, &now],
            )?;
            if n == 1 {
                for rec in &new.records {
                    self.insert_record(&mut tx, rec, 0, now)?;
                }
            }
            tx.execute("INSERT INTO queue VALUES($1, $2) ON CONFLICT (task_id) DO NOTHING", &[&id, &now])?;
            // idle workers wake on the commit
            tx.execute("SELECT pg_notify($1, $2)", &[&NOTIFY_CHANNEL, &id])?;
            tx.commit()?;
            Ok(n == 1)
        })();
        r.map_err(|e| pg_error(&self.name, "submitting the task", &e))
    }

    /// Queues an existing task again (a fork that `task fork` made, for the workers to run):
    /// durable on `Ok`; idle workers are notified.
    pub fn enqueue(&self, id: &str) -> TaskResult<()> {
        let mut c = self.client.borrow_mut();
        c.execute(
            "WITH q AS (INSERT INTO queue VALUES($1, $2) ON CONFLICT (task_id) DO NOTHING RETURNING 1) \
             SELECT pg_notify($3, $1)",
            &[&id, &now_ms(), &NOTIFY_CHANNEL],
        )
        .map(|_| ())
        .map_err(|e| pg_error(&self.name, "queueing the task", &e))
    }

    /// Ends every session of process `pid` (found by the `application_name` it gives its
    /// sessions, [`application_name`]) with `pg_terminate_backend`, as an operator or a
    /// connection pooler might: the process lives on and finds its connections closed. Returns
    /// how many were ended (`task chaos`'s "drop the holder's session").
    pub fn terminate_sessions_of(&self, pid: u32) -> TaskResult<i64> {
        let mut c = self.client.borrow_mut();
        c.query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            &[&format!("brokerlab:{pid}")],
        )
        .map(|r| r.get(0))
        .map_err(|e| pg_error(&self.name, "ending a runner's sessions", &e))
    }

    /// The ids in `queue`.
    pub fn queued_ids(&self) -> TaskResult<Vec<String>> {
        let mut c = self.client.borrow_mut();
        c.query("SELECT task_id FROM queue", &[])
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
            .map_err(|e| pg_error(&self.name, "reading the queue", &e))
    }

    /// The leases live now: task, epoch, holder's host and pid.
    pub fn live_leases(&self) -> TaskResult<Vec<(String, u64, String, u32)>> {
        let mut c = self.client.borrow_mut();
        c.query("SELECT task_id, epoch, host, pid FROM leases WHERE owner <> '' AND expires_at_ms > $1", &[&now_ms()])
            .map(|rows| {
                rows.iter()
                    .map(|r| (r.get(0), r.get::<_, i64>(1) as u64, r.get(2), r.get::<_, i64>(3) as u32))
                    .collect()
            })
            .map_err(|e| pg_error(&self.name, "reading leases", &e))
    }

    /// Tasks in `queue`.
    pub fn queued(&self) -> TaskResult<i64> {
        let mut c = self.client.borrow_mut();
        c.query_one("SELECT count(*) FROM queue", &[])
            .map(|r| r.get(0))
            .map_err(|e| pg_error(&self.name, "reading the queue", &e))
    }
}

/// A worker slot's claim session. A claim picks the oldest queued task whose lease is free (never
/// taken, released, expired) with `SELECT ... FOR UPDATE OF queue SKIP LOCKED`, so claimers
/// running at the same moment see different rows, and marks it with a session advisory lock, the
/// claim lock ([`claim_key`] of the task and the epoch its lease row holds), kept until the slot
/// is done with the task: other slots (of this worker or another) pass over a task whose claim
/// lock for the current epoch is held. The claim lock is not the guarantee: the task's lease
/// (taken next, in its own fenced transaction, by the core's `decide_lease`) is. Because the
/// lock is keyed by the epoch, a claimer that is stuck (SIGSTOP, a VM pause) holds the lock of an
/// epoch that its own lease has since replaced: once that lease expires the task is claimable
/// again (holding the queue row for the whole run instead, as a first version did, let a stopped
/// worker keep its task from every other worker for as long as it was stopped). When no task has
/// a free lease, the live leases are checked for holders whose session is gone (their session
/// advisory lock is free) or that are provably dead on this host: those tasks are claimable at
/// once.
pub struct Claimer {
    client: Client,
    name: String,
    /// The claim lock this session holds, if any.
    held: Option<i64>,
    /// From the last claim that found nothing: a queued task whose holder's session lives (its
    /// session lock, to wait on), and the earliest expiry of a queued task's live lease.
    watch: Option<i64>,
    next_expiry_ms: Option<i64>,
}

/// The claim lock of a task whose lease row holds `epoch` (FNV-1a 64 as [`session_key`], with
/// another separator byte: a namespace of its own). Keyed by the epoch, so a worker stuck with
/// an older claim (its lease since expired) does not keep the next claimer out, while two
/// claimers of the same lease state exclude each other.
pub fn claim_key(task: &str, epoch: u64) -> i64 {
    lock_key(task, 0xfe, epoch)
}

/// Queued tasks with a free lease, oldest first, with the lease row's epoch (0 if none).
const CLAIM_FREE_SQL: &str = "SELECT q.task_id, coalesce(l.epoch, 0)
FROM queue q LEFT JOIN leases l ON l.task_id = q.task_id
WHERE NOT (q.task_id = ANY($1)) AND (l.task_id IS NULL OR l.owner = '' OR l.expires_at_ms <= $2)
ORDER BY q.submitted_at_ms, q.task_id LIMIT 16 FOR UPDATE OF q SKIP LOCKED";

/// Queued tasks whose lease is live: candidates if their holder is gone, and what an idle slot
/// waits for (a holder's session ending, the earliest expiry). The caller passes over `skip`.
const CLAIM_LIVE_SQL: &str = "SELECT q.task_id, l.epoch, l.host, l.pid, l.pid_start, l.expires_at_ms FROM queue q
JOIN leases l ON l.task_id = q.task_id
WHERE l.owner <> '' AND l.expires_at_ms > $1
ORDER BY q.submitted_at_ms, q.task_id LIMIT 64";

/// The channel on which `submit` and a lease's `release` notify idle workers (payload: the task).
pub const NOTIFY_CHANNEL: &str = "brokerlab_tasks";

impl Claimer {
    /// A new session on `url`, listening on [`NOTIFY_CHANNEL`].
    pub fn connect(url: &str) -> TaskResult<Claimer> {
        let (mut client, name) = connect(url)?;
        client
            .batch_execute(&format!("LISTEN {NOTIFY_CHANNEL}"))
            .map_err(|e| pg_error(&name, "listening for queued tasks", &e))?;
        Ok(Claimer { client, name, held: None, watch: None, next_expiry_ms: None })
    }

    /// Takes the claim lock of `id` at lease epoch `epoch` if free (then this session holds it).
    fn try_claim(&mut self, id: &str, epoch: u64) -> Result<bool, postgres::Error> {
        let key = claim_key(id, epoch);
        let got: bool = self.client.query_one("SELECT pg_try_advisory_lock($1)", &[&key])?.get(0);
        if got {
            self.held = Some(key);
        }
        Ok(got)
    }

    /// Picks a queued task to run, passing over `skip`: the oldest with a free lease that no
    /// other slot has claimed (or whose lease expired by time), else the oldest whose holder is
    /// gone; `None` if there is none. Until [`Claimer::done`] or [`Claimer::keep`] this session
    /// holds the task's claim lock (unless the task was taken from a stuck claimer).
    pub fn claim(&mut self, skip: &[String]) -> TaskResult<Option<String>> {
        let r = (|| -> Result<Option<String>, postgres::Error> {
            self.release()?;
            let now = now_ms();
            let mut tx = self.client.transaction()?;
            let rows: Vec<(String, i64)> =
                tx.query(CLAIM_FREE_SQL, &[&skip, &now])?.iter().map(|r| (r.get(0), r.get(1))).collect();
            let mut pick = None;
            for (id, epoch) in rows {
                let key = claim_key(&id, epoch as u64);
                let got: bool = tx.query_one("SELECT pg_try_advisory_lock($1)", &[&key])?.get(0);
                if got {
                    self.held = Some(key);
                    pick = Some(id);
                    break;
                }
            }
            tx.commit()?;
            if pick.is_some() {
                return Ok(pick);
            }
            self.watch = None;
            self.next_expiry_ms = None;
            for r in self.client.query(CLAIM_LIVE_SQL, &[&now])? {
                let (id, epoch): (String, i64) = (r.get(0), r.get(1));
                let (host, pid, start, expires): (String, i64, i64, i64) = (r.get(2), r.get(3), r.get(4), r.get(5));
                self.next_expiry_ms = Some(self.next_expiry_ms.map_or(expires, |e| e.min(expires)));
                let key = session_key(&id, epoch as u64);
                let gone = provably_dead(&host, pid as u32, start as u64) || {
                    let got: bool = self.client.query_one("SELECT pg_try_advisory_lock($1)", &[&key])?.get(0);
                    if got {
                        self.client.execute("SELECT pg_advisory_unlock($1)", &[&key])?;
                    }
                    got
                };
                if !gone {
                    self.watch.get_or_insert(key);
                    continue;
                }
                // a holder whose session is gone: claimable; whether its lease may be taken
                // before the expiry is the dropped-session rule's, decided under the lease by `acquire`
                if !skip.contains(&id) && self.try_claim(&id, epoch as u64)? {
                    return Ok(Some(id));
                }
            }
            Ok(None)
        })();
        r.map_err(|e| pg_error(&self.name, "claiming a queued task", &e))
    }

    /// After a claim that found nothing: waits at most `max` for something that may make a task
    /// claimable, and returns as soon as it happens: a task submitted or a lease released (a
    /// NOTIFY on [`NOTIFY_CHANNEL`]), the session of a holder of a queued task ending (its
    /// process died, or its connection was cut: this session waits on the holder's session
    /// lock, which the server grants the moment that session ends), or the earliest expiry of a
    /// queued task's live lease (the moment the dropped-session rule lets a waiting taker in). One holder is
    /// watched at a time (the oldest queued task's); the others are seen at the next claim.
    pub fn wait(&mut self, max: Duration) -> TaskResult<()> {
        let now = now_ms();
        let mut budget_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        if let Some(exp) = self.next_expiry_ms {
            // wake at the expiry: a claim at `exp` finds the lease expired (`<=`)
            budget_ms = budget_ms.min(u64::try_from(exp.saturating_sub(now)).unwrap_or(0));
        }
        let r = (|| -> Result<(), postgres::Error> {
            // what arrived meanwhile (buffered by the client): something happened already
            if self.client.notifications().iter().next()?.is_some() {
                while self.client.notifications().iter().next()?.is_some() {}
                return Ok(());
            }
            if budget_ms == 0 {
                return Ok(());
            }
            match self.watch.take() {
                Some(key) => {
                    // granted at once when the holder's session ends; given back at once, so
                    // the taker's own check of the lock finds it free
                    let mut tx = self.client.transaction()?;
                    tx.batch_execute(&format!("SET LOCAL lock_timeout = {}", budget_ms.max(1)))?;
                    match tx.query_one("SELECT pg_advisory_lock($1), pg_advisory_unlock($1)", &[&key]) {
                        Ok(_) => tx.commit(),
                        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
                None => {
                    let mut n = self.client.notifications();
                    n.timeout_iter(Duration::from_millis(budget_ms)).next()?;
                    Ok(())
                }
            }
        })();
        r.map_err(|e| pg_error(&self.name, "waiting for a claimable task", &e))
    }

    fn release(&mut self) -> Result<(), postgres::Error> {
        if let Some(key) = self.held.take() {
            self.client.execute("SELECT pg_advisory_unlock($1)", &[&key])?;
        }
        Ok(())
    }

    /// Task `id` needs no more running (finished, failed, waiting for review, suspended by a
    /// user): removes it from the queue (durable on `Ok`) and drops the claim lock.
    pub fn done(&mut self, id: &str) -> TaskResult<()> {
        let r = (|| {
            self.client.execute("DELETE FROM queue WHERE task_id=$1", &[&id])?;
            self.release()
        })();
        r.map_err(|e| pg_error(&self.name, "removing the task from the queue", &e))
    }

    /// Task `id` stays queued (the worker stops, the run failed): drops the claim lock.
    pub fn keep(&mut self) -> TaskResult<()> {
        self.release().map_err(|e| pg_error(&self.name, "ending the claim", &e))
    }
}
