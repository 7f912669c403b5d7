//! The tools' world: each side-effecting tool records every call it receives in its **own** SQLite
//! file under `--world DIR`, so duplicates can be counted from outside:
//!
//! * `payments.sqlite`: `calls(id, key, task_id, step, applied, args, at_ms)`; the payment tool
//!   dedupes by key: a call whose key was already applied is recorded with `applied = 0`.
//! * `emails.sqlite`: same table; `send_email` cannot dedupe: `key` is NULL, `applied` always 1.
//!
//! `lookup` is read-only and keeps no file.

use std::path::{Path, PathBuf};

use brokerlab_core::runner::{Key, ResultText, ToolCall, ToolOutput};
use rusqlite::{Connection, params};

use super::ident::now_ms;
use super::store::{open_sqlite, sql_error};
use crate::error::{CliError, CliResult};

const CALLS: &str = "CREATE TABLE IF NOT EXISTS calls(
  id INTEGER PRIMARY KEY, key TEXT, task_id TEXT NOT NULL, step INTEGER NOT NULL,
  applied INTEGER NOT NULL, args TEXT NOT NULL, at_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS calls_key ON calls(key);";

/// The world files, opened lazily.
#[derive(Debug)]
pub struct World {
    dir: PathBuf,
    payments: Option<Connection>,
    emails: Option<Connection>,
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

impl World {
    /// A world in `dir` (created on the first side effect).
    pub fn new(dir: &Path) -> World {
        World { dir: dir.to_path_buf(), payments: None, emails: None }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn conn(&mut self, name: &str) -> CliResult<&Connection> {
        let slot = if name == "payments.sqlite" { &mut self.payments } else { &mut self.emails };
        if slot.is_none() {
            std::fs::create_dir_all(&self.dir).map_err(|e| {
                CliError::bad_input(format!("{}: cannot create the world directory: {e}", self.dir.display()))
            })?;
            let path = self.dir.join(name);
            let c = open_sqlite(&path, true).map_err(|e| sql_error(&path, "opening a world file", e))?;
            c.execute_batch(CALLS).map_err(|e| sql_error(&path, "creating table calls", e))?;
            *slot = Some(c);
        }
        slot.as_ref().ok_or_else(|| CliError::failure("world connection"))
    }

    /// Performs `call`. The side effect is committed in the tool's own file before this returns.
    pub fn call(&mut self, task: &str, step: u16, call: &ToolCall, key: Option<&Key>) -> CliResult<ToolOutput> {
        let args = String::from_utf8_lossy(&call.args).into_owned();
        match call.tool.as_str() {
            "lookup" => Ok(ToolOutput { ok: true, output: text(&format!("found {args}")) }),
            "payment" => {
                let key = key.ok_or_else(|| CliError::failure("payment called without an idempotency key"))?;
                let path = self.dir.join("payments.sqlite");
                let c = self.conn("payments.sqlite")?;
                let applied = (|| -> Result<bool, rusqlite::Error> {
                    c.execute_batch("BEGIN IMMEDIATE")?;
                    let seen: i64 = c
                        .prepare_cached("SELECT count(*) FROM calls WHERE key=?1 AND applied=1")?
                        .query_row([key.as_str()], |r| r.get(0))?;
                    let applied = seen == 0;
                    c.prepare_cached(
                        "INSERT INTO calls(key, task_id, step, applied, args, at_ms) VALUES(?1,?2,?3,?4,?5,?6)",
                    )?
                    .execute(params![key.as_str(), task, step, applied as i64, args, now_ms()])?;
                    c.execute_batch("COMMIT")?;
                    Ok(applied)
                })();
                let applied = applied.map_err(|e| {
                    let _ = c.execute_batch("ROLLBACK");
                    sql_error(&path, "recording a payment", e)
                })?;
                let out =
                    if applied { format!("paid, key {key}") } else { format!("duplicate of key {key}, not applied") };
                Ok(ToolOutput { ok: true, output: text(&out) })
            }
            "send_email" => {
                let path = self.dir.join("emails.sqlite");
                let c = self.conn("emails.sqlite")?;
                c.prepare_cached(
                    "INSERT INTO calls(key, task_id, step, applied, args, at_ms) VALUES(NULL,?1,?2,1,?3,?4)",
                )
                .and_then(|mut s| s.execute(params![task, step, args, now_ms()]))
                .map_err(|e| sql_error(&path, "recording an email", e))?;
                Ok(ToolOutput { ok: true, output: text("sent") })
            }
            other => Err(CliError::failure(format!("unknown tool {other:?}"))),
        }
    }

    /// Calls received for (task, step) in `file`, and how many applied (for review hints).
    pub fn calls_for(&mut self, file: &str, task: &str, step: u16) -> CliResult<(i64, i64)> {
        let path = self.dir.join(file);
        if !path.exists() {
            return Ok((0, 0));
        }
        let c = self.conn(file)?;
        c.query_row(
            "SELECT count(*), coalesce(sum(applied),0) FROM calls WHERE task_id=?1 AND step=?2",
            params![task, step],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(|e| sql_error(&path, "reading calls", e))
    }
}
