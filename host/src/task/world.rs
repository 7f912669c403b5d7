//! The tools' world: each side-effecting tool records every call it receives in its **own** SQLite
//! file under `--world DIR`, so duplicates can be counted from outside:
//!
//! * `payments.sqlite`: `calls(id, key, task_id, step, applied, args, at_ms, epoch, reason)`; the
//!   payment tool dedupes by key: a call whose key was already applied is recorded with
//!   `applied = 0`, reason `duplicate key`.
//! * `emails.sqlite`: same table; `send_email` cannot dedupe: `key` is NULL.
//! * Both files keep `fences(task_id, epoch)`: the highest fencing token (lease epoch) the tool
//!   has seen for each task. A call carrying a lower token is recorded with `applied = 0`, reason
//!   `fenced: token E < F`, and refused ([`check_tool_fence`]): a runner that lost its lease
//!   cannot act through these tools.
//!
//! With `--world postgres://USER@HOST:PORT/DB` the same records live in that PostgreSQL database
//! (it may be the log's): `world_calls` (the columns above plus `tool`) and `world_fences(tool,
//! task_id, epoch)`, created on first use. A call is one transaction that locks the task's
//! `world_fences` row for that tool (so two runners' calls for one task are ordered, as SQLite's
//! single writer orders them) and commits before the tool answers: the same rules, checkable from
//! any host that reaches the database.
//!
//! `lookup` is read-only and keeps no file. A tool named in `$BROKERLAB_UNFENCED_TOOLS`
//! (comma-separated; a fault hook, acting only on a fault-injection database, see
//! [`super::faults`]) records tokens but does not check them: it stands for a real API that
//! cannot (the runner's margin rule is then the only guard, and a takeover of a holder whose
//! session is gone waits for its expiry: the dropped-session rule; docs/RUNNER.md).

use std::path::{Path, PathBuf};

use brokerlab_core::runner::{Key, ResultText, ToolCall, ToolFence, ToolOutput, check_tool_fence};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::backend::DbTarget;
use super::ident::now_ms;
use super::pg::pg_error;
use super::store::{open_sqlite, sql_error};
use crate::task::error::{TaskError, TaskResult};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS calls(
  id INTEGER PRIMARY KEY, key TEXT, task_id TEXT NOT NULL, step INTEGER NOT NULL,
  applied INTEGER NOT NULL, args TEXT NOT NULL, at_ms INTEGER NOT NULL,
  epoch INTEGER NOT NULL DEFAULT 0, reason TEXT);
CREATE INDEX IF NOT EXISTS calls_key ON calls(key);
CREATE TABLE IF NOT EXISTS fences(task_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL);";

/// The world's tables on PostgreSQL (created under an advisory lock, in one transaction, so
/// runners starting together create them once).
const PG_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS world_calls(
  id BIGSERIAL PRIMARY KEY, tool TEXT NOT NULL, key TEXT, task_id TEXT NOT NULL, step INTEGER NOT NULL,
  applied BOOLEAN NOT NULL, args TEXT NOT NULL, at_ms BIGINT NOT NULL, epoch BIGINT NOT NULL, reason TEXT);
CREATE INDEX IF NOT EXISTS world_calls_task ON world_calls(tool, task_id);
CREATE INDEX IF NOT EXISTS world_calls_key ON world_calls(tool, key);
CREATE TABLE IF NOT EXISTS world_fences(
  tool TEXT NOT NULL, task_id TEXT NOT NULL, epoch BIGINT NOT NULL, PRIMARY KEY(tool, task_id));";

/// Key of the advisory lock taken while creating the world's tables ("world" in ASCII).
const PG_WORLD_LOCK: i64 = 0x776f726c64;

/// A tool that keeps its own file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolFile {
    /// `payment` (idempotent, dedupes by key): `payments.sqlite`.
    Payments,
    /// `send_email` (non-idempotent): `emails.sqlite`.
    Emails,
}

impl ToolFile {
    /// Both files.
    pub const ALL: [ToolFile; 2] = [ToolFile::Payments, ToolFile::Emails];

    /// The file of tool `name`, if it keeps one.
    pub fn of_tool(name: &str) -> Option<ToolFile> {
        match name {
            "payment" => Some(ToolFile::Payments),
            "send_email" => Some(ToolFile::Emails),
            _ => None,
        }
    }
    /// The file name.
    pub const fn file(self) -> &'static str {
        match self {
            ToolFile::Payments => "payments.sqlite",
            ToolFile::Emails => "emails.sqlite",
        }
    }
    /// The tool's name in specs.
    pub const fn tool(self) -> &'static str {
        match self {
            ToolFile::Payments => "payment",
            ToolFile::Emails => "send_email",
        }
    }
}

/// One row of a tool's `calls`, as the world witness and the review evidence read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Task that made the call.
    pub task: String,
    /// Idempotency key (payments).
    pub key: Option<String>,
    /// Step.
    pub step: u16,
    /// Whether it applied.
    pub applied: bool,
    /// The fencing token it carried.
    pub epoch: u64,
    /// Why it did not apply (`duplicate key`, `fenced: ...`), if it did not.
    pub reason: Option<String>,
}

/// What a tool did with a call.
#[derive(Debug)]
pub enum CallOutcome {
    /// It answered (applied, deduplicated, or a read).
    Done(ToolOutput),
    /// It refused the call without applying it: its file has seen a newer fencing token.
    Fenced {
        /// The tool's file or table (the refusal is recorded there), for messages.
        place: String,
        /// The highest token it has seen for the task.
        highest: u64,
    },
}

impl Call {
    /// Refused by the tool's fence (a runner that had lost its lease).
    pub fn fenced(&self) -> bool {
        self.reason.as_deref().is_some_and(|r| r.starts_with("fenced"))
    }
}

/// Where the tools keep their records.
enum Backing {
    /// One SQLite file per tool in a directory, opened lazily.
    Files { dir: PathBuf, conns: [Option<Connection>; 2] },
    /// Tables in a PostgreSQL database, connected lazily.
    Pg { url: String, client: Option<postgres::Client> },
}

/// The world: the tools' files (or tables), opened lazily.
pub struct World {
    /// `--world` as given: a directory, or a `postgres://` URL.
    at: PathBuf,
    backing: Backing,
    unfenced: Vec<String>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").field("at", &self.name()).finish_non_exhaustive()
    }
}

fn text(s: &str) -> ResultText {
    let mut t = ResultText::new();
    for c in s.chars() {
        if t.push(c).is_err() {
            break;
        }
    }
    t
}

/// Adds the columns and table a world file written before fencing lacks.
fn migrate(c: &Connection) -> Result<(), rusqlite::Error> {
    let has_epoch: i64 =
        c.query_row("SELECT count(*) FROM pragma_table_info('calls') WHERE name='epoch'", [], |r| r.get(0))?;
    if has_epoch == 0 {
        c.execute_batch(
            "ALTER TABLE calls ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0; ALTER TABLE calls ADD COLUMN reason TEXT;",
        )?;
    }
    Ok(())
}

impl World {
    /// A world in directory `at`, or in the PostgreSQL database `at` names (`postgres://...`);
    /// created on the first side effect.
    pub fn new(at: &Path) -> World {
        let unfenced = super::faults::var("BROKERLAB_UNFENCED_TOOLS")
            .map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        let backing = match DbTarget::parse(at) {
            DbTarget::Postgres(url) => Backing::Pg { url, client: None },
            DbTarget::Sqlite(dir) => Backing::Files { dir, conns: [None, None] },
        };
        World { at: at.to_path_buf(), backing, unfenced }
    }

    /// Whether tool `name` refuses a stale fencing token: the tools that keep a file (or table)
    /// do, unless `BROKERLAB_UNFENCED_TOOLS` names them (a fault hook); an unknown tool is
    /// taken to check none (the careful side of the dropped-session rule).
    pub fn checks_fence(&self, name: &str) -> bool {
        ToolFile::of_tool(name).is_some() && !self.unfenced.iter().any(|t| t == name)
    }

    /// `--world` as given (a directory or a URL).
    pub fn dir(&self) -> &Path {
        &self.at
    }

    /// Whether the world is in PostgreSQL.
    pub fn is_pg(&self) -> bool {
        matches!(self.backing, Backing::Pg { .. })
    }

    /// The world for messages: the directory, or the URL without its password.
    pub fn name(&self) -> String {
        match &self.backing {
            Backing::Files { dir, .. } => dir.display().to_string(),
            Backing::Pg { url, .. } => super::pg::redact(url),
        }
    }

    /// Where a tool keeps its records, for messages: its file, or the table and the tool.
    pub fn place(&self, f: ToolFile) -> String {
        match &self.backing {
            Backing::Files { dir, .. } => dir.join(f.file()).display().to_string(),
            Backing::Pg { url, .. } => format!("{} table world_calls, tool {}", super::pg::redact(url), f.tool()),
        }
    }

    /// Where a call was recorded, for a review's evidence lines: the tool's file name in a
    /// directory world (the directory is named above them), the table of the URL (without its
    /// password) in a database world.
    pub fn call_place(&self, f: ToolFile) -> String {
        match &self.backing {
            Backing::Files { .. } => f.file().to_string(),
            Backing::Pg { .. } => self.place(f),
        }
    }

    /// A tool's file (a directory world; for a database world, a path naming the URL, for
    /// messages only).
    fn file(&self, f: ToolFile) -> PathBuf {
        match &self.backing {
            Backing::Files { dir, .. } => dir.join(f.file()),
            Backing::Pg { .. } => PathBuf::from(self.place(f)),
        }
    }

    fn conn(&mut self, f: ToolFile) -> TaskResult<&mut Connection> {
        let Backing::Files { dir, conns } = &mut self.backing else {
            return Err(TaskError::failure("world: not a directory"));
        };
        let path = dir.join(f.file());
        let slot = &mut conns[f as usize];
        if slot.is_none() {
            std::fs::create_dir_all(&*dir).map_err(|e| {
                TaskError::bad_input(format!("{}: cannot create the world directory: {e}", dir.display()))
            })?;
            let c = open_sqlite(&path, true)?;
            c.execute_batch(SCHEMA).map_err(|e| sql_error(&path, "creating the tool's tables", e))?;
            migrate(&c).map_err(|e| sql_error(&path, "adding the fencing columns", e))?;
            *slot = Some(c);
        }
        slot.as_mut().ok_or_else(|| TaskError::failure("world connection"))
    }

    /// The PostgreSQL session, connected (and the tables created) on first use; a session the
    /// server closed (a restart) is replaced.
    fn pg(&mut self) -> TaskResult<(&mut postgres::Client, String)> {
        let Backing::Pg { url, client } = &mut self.backing else {
            return Err(TaskError::failure("world: not a database"));
        };
        let name = super::pg::redact(url);
        if client.as_ref().is_some_and(|c| c.is_closed()) {
            *client = None;
        }
        if client.is_none() {
            let (mut c, _) = super::pg::connect(url)?;
            let r = (|| -> Result<(), postgres::Error> {
                // created already (the usual case): no lock taken, so a session stopped inside a
                // call's transaction cannot hold a newcomer up here
                let have: bool = c
                    .query_one(
                        "SELECT to_regclass('world_calls') IS NOT NULL AND to_regclass('world_fences') IS NOT NULL",
                        &[],
                    )?
                    .get(0);
                if have {
                    return Ok(());
                }
                let mut tx = c.transaction()?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&PG_WORLD_LOCK])?;
                tx.batch_execute(PG_SCHEMA)?;
                tx.commit()
            })();
            r.map_err(|e| pg_error(&name, "creating the world's tables", &e))?;
            *client = Some(c);
        }
        match client.as_mut() {
            Some(c) => Ok((c, name)),
            None => Err(TaskError::failure("world connection")),
        }
    }

    /// Performs `call` carrying fencing token `fence`. The side effect (or its refusal) is
    /// committed in the tool's own file (or table) before this returns.
    pub fn call(
        &mut self,
        task: &str,
        step: u16,
        call: &ToolCall,
        key: Option<&Key>,
        fence: u64,
    ) -> TaskResult<CallOutcome> {
        let args = String::from_utf8_lossy(&call.args).into_owned();
        let Some(f) = ToolFile::of_tool(&call.tool) else {
            return match call.tool.as_str() {
                "lookup" => Ok(CallOutcome::Done(ToolOutput { ok: true, output: text(&format!("found {args}")) })),
                other => Err(TaskError::failure(format!("unknown tool {other:?}"))),
            };
        };
        if f == ToolFile::Payments && key.is_none() {
            return Err(TaskError::failure("payment called without an idempotency key"));
        }
        let checks = !self.unfenced.iter().any(|t| t == f.tool());
        let place = self.place(f);
        let row = CallRow { f, task, step, key, args: &args, fence, checks_fence: checks };
        let outcome = if self.is_pg() {
            let (c, name) = self.pg()?;
            apply_pg(c, &row).map_err(|e| pg_error(&name, &format!("recording a {} call", f.tool()), &e))?
        } else {
            let path = self.file(f);
            let c = self.conn(f)?;
            apply(c, &row).map_err(|e| sql_error(&path, "recording a call", e))?
        };
        match outcome {
            Applied::Yes => {
                let out = match key {
                    Some(k) => format!("paid, key {k}"),
                    None => "sent".to_string(),
                };
                Ok(CallOutcome::Done(ToolOutput { ok: true, output: text(&out) }))
            }
            Applied::Duplicate => {
                let k = key.map(|k| k.as_str()).unwrap_or("-");
                Ok(CallOutcome::Done(ToolOutput {
                    ok: true,
                    output: text(&format!("duplicate of key {k}, not applied")),
                }))
            }
            Applied::Fenced { highest } => Ok(CallOutcome::Fenced { place, highest }),
        }
    }

    /// Raises the task's fence in the tool's file to `epoch` (never lowers it): a runner that takes
    /// over a call in flight does this before it reads the file or decides, so a call from an
    /// older lease holder arriving later is refused.
    pub fn raise_fence(&mut self, f: ToolFile, task: &str, epoch: u64) -> TaskResult<()> {
        if self.is_pg() {
            let (c, name) = self.pg()?;
            return c
                .execute(
                    "INSERT INTO world_fences VALUES($1, $2, $3) ON CONFLICT (tool, task_id) DO UPDATE SET \
                     epoch = greatest(world_fences.epoch, excluded.epoch)",
                    &[&f.tool(), &task, &(epoch as i64)],
                )
                .map(|_| ())
                .map_err(|e| pg_error(&name, "raising the fence", &e));
        }
        let path = self.file(f);
        let c = self.conn(f)?;
        c.execute(
            "INSERT INTO fences VALUES(?1, ?2) ON CONFLICT(task_id) DO UPDATE SET epoch=max(epoch, excluded.epoch)",
            params![task, epoch as i64],
        )
        .map(|_| ())
        .map_err(|e| sql_error(&path, "raising the fence", e))
    }

    /// Every call `task` made to the tool of `f`, in order (none if the file does not exist).
    pub fn calls(&mut self, f: ToolFile, task: &str) -> TaskResult<Vec<Call>> {
        if self.is_pg() {
            let (c, name) = self.pg()?;
            let rows = c
                .query(
                    "SELECT task_id, key, step, applied, epoch, reason FROM world_calls WHERE tool=$1 AND task_id=$2 \
                     ORDER BY id",
                    &[&f.tool(), &task],
                )
                .map_err(|e| pg_error(&name, "reading calls", &e))?;
            return Ok(rows
                .iter()
                .map(|r| Call {
                    task: r.get(0),
                    key: r.get(1),
                    step: r.get::<_, i32>(2).clamp(0, i32::from(u16::MAX)) as u16,
                    applied: r.get(3),
                    epoch: r.get::<_, i64>(4).max(0) as u64,
                    reason: r.get(5),
                })
                .collect());
        }
        let path = self.file(f);
        if !path.exists() {
            return Ok(Vec::new());
        }
        let c = self.conn(f)?;
        let read = || -> Result<Vec<Call>, rusqlite::Error> {
            let mut st = c.prepare_cached(
                "SELECT task_id, key, step, applied, epoch, reason FROM calls WHERE task_id=?1 ORDER BY id",
            )?;
            let rows = st.query_map([task], |r| {
                Ok(Call {
                    task: r.get(0)?,
                    key: r.get(1)?,
                    step: r.get::<_, i64>(2)?.clamp(0, i64::from(u16::MAX)) as u16,
                    applied: r.get::<_, i64>(3)? != 0,
                    epoch: r.get::<_, i64>(4)?.max(0) as u64,
                    reason: r.get(5)?,
                })
            })?;
            rows.collect()
        };
        read().map_err(|e| sql_error(&path, "reading calls", e))
    }
}

enum Applied {
    Yes,
    Duplicate,
    Fenced { highest: u64 },
}

/// A call as the tool records it.
#[derive(Clone, Copy)]
struct CallRow<'a> {
    f: ToolFile,
    task: &'a str,
    step: u16,
    key: Option<&'a Key>,
    args: &'a str,
    /// The call's fencing token (the runner's lease epoch).
    fence: u64,
    /// Whether this tool refuses stale tokens (tests turn it off to show the hole it closes).
    checks_fence: bool,
}

/// One call in one transaction: the fence check, the dedupe check, the row.
fn apply(c: &mut Connection, row: &CallRow<'_>) -> Result<Applied, rusqlite::Error> {
    let CallRow { f, task, step, key, args, fence, checks_fence } = *row;
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let seen: Option<i64> =
        tx.prepare_cached("SELECT epoch FROM fences WHERE task_id=?1")?.query_row([task], |r| r.get(0)).optional()?;
    let verdict = check_tool_fence(seen.map(|e| e.max(0) as u64), fence);
    let (outcome, reason) = match verdict {
        ToolFence::Refuse { highest } if checks_fence => {
            (Applied::Fenced { highest }, Some(format!("fenced: token {fence} < {highest}")))
        }
        ToolFence::Refuse { .. } | ToolFence::Accept { .. } => {
            let highest = match verdict {
                ToolFence::Accept { highest } => highest,
                ToolFence::Refuse { highest } => highest,
            };
            tx.prepare_cached(
                "INSERT INTO fences VALUES(?1, ?2) ON CONFLICT(task_id) DO UPDATE SET epoch=max(epoch, excluded.epoch)",
            )?
            .execute(params![task, highest as i64])?;
            let dup = match (f, key) {
                (ToolFile::Payments, Some(k)) => {
                    let n: i64 = tx
                        .prepare_cached("SELECT count(*) FROM calls WHERE key=?1 AND applied=1")?
                        .query_row([k.as_str()], |r| r.get(0))?;
                    n > 0
                }
                _ => false,
            };
            if dup { (Applied::Duplicate, Some("duplicate key".to_string())) } else { (Applied::Yes, None) }
        }
    };
    let applied = matches!(outcome, Applied::Yes);
    tx.prepare_cached(
        "INSERT INTO calls(key, task_id, step, applied, args, at_ms, epoch, reason) VALUES(?1,?2,?3,?4,?5,?6,?7,?8)",
    )?
    .execute(params![
        key.map(|k| k.as_str()),
        task,
        step,
        applied as i64,
        args,
        now_ms(),
        fence as i64,
        reason
    ])?;
    tx.commit()?;
    Ok(outcome)
}

/// [`apply`] on PostgreSQL: one transaction that locks the task's fence row for the tool (created
/// at token 0 if missing), so calls for one task are ordered; the same checks and row.
fn apply_pg(c: &mut postgres::Client, row: &CallRow<'_>) -> Result<Applied, postgres::Error> {
    let CallRow { f, task, step, key, args, fence, checks_fence } = *row;
    let tool = f.tool();
    let mut tx = c.transaction()?;
    tx.execute("INSERT INTO world_fences VALUES($1, $2, 0) ON CONFLICT DO NOTHING", &[&tool, &task])?;
    let seen: i64 =
        tx.query_one("SELECT epoch FROM world_fences WHERE tool=$1 AND task_id=$2 FOR UPDATE", &[&tool, &task])?.get(0);
    // token 0 is the placeholder's: no call seen yet
    let seen = (seen > 0).then_some(seen as u64);
    let verdict = check_tool_fence(seen, fence);
    let (outcome, reason) = match verdict {
        ToolFence::Refuse { highest } if checks_fence => {
            (Applied::Fenced { highest }, Some(format!("fenced: token {fence} < {highest}")))
        }
        ToolFence::Refuse { highest } | ToolFence::Accept { highest } => {
            tx.execute(
                "UPDATE world_fences SET epoch = greatest(epoch, $3) WHERE tool=$1 AND task_id=$2",
                &[&tool, &task, &(highest as i64)],
            )?;
            let dup = match (f, key) {
                (ToolFile::Payments, Some(k)) => {
                    let n: i64 = tx
                        .query_one(
                            "SELECT count(*) FROM world_calls WHERE tool=$1 AND key=$2 AND applied",
                            &[&tool, &k.as_str()],
                        )?
                        .get(0);
                    n > 0
                }
                _ => false,
            };
            if dup { (Applied::Duplicate, Some("duplicate key".to_string())) } else { (Applied::Yes, None) }
        }
    };
    let applied = matches!(outcome, Applied::Yes);
    tx.execute(
        "INSERT INTO world_calls(tool, key, task_id, step, applied, args, at_ms, epoch, reason) \
         VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        &[
            &tool,
            &key.map(|k| k.as_str()),
            &task,
            &i32::from(step),
            &applied,
            &args,
            &now_ms(),
            &(fence as i64),
            &reason,
        ],
    )?;
    tx.commit()?;
    Ok(outcome)
}
