//! `brokerlab task serve-tools`: an HTTP tool server for tests, demos and `task chaos --tools
//! http`, doing what docs/RUNNER.md asks of a server behind an HTTP tool, on loopback only.
//!
//! Every request to any path (the path's last segment is the tool's name; `POST /fence` raises a
//! fence) is recorded in its own SQLite file, in the transaction that decides it:
//!
//! * `calls(id, tool, key, task_id, step, applied, body, status, at_ms, epoch, reason)`: one row per
//!   request, `applied = 1` for the one that acted.
//! * `fences(task_id, epoch)`: the highest `Brokerlab-Fence` epoch seen per task. A lower one is
//!   refused without acting: 409 with `Brokerlab-Fence-Highest: <highest>`, reason `fenced: token
//!   E < H`. A missing or garbled fence header: 400.
//! * `keys(key, tool, body, status, response)`: the first answer per `Idempotency-Key` (quoted
//!   or not). A repeat with the same body gets the stored answer again (`Idempotent-Replayed:
//!   true`, row reason `duplicate key`); with another body, 422 (reason `key reused with another
//!   body`).
//!
//! With `--faults SEED` it also misbehaves, by draws from the seed (FNV of the seed and a request
//! counter): 429 with `Retry-After: 0` before acting (reason `injected 429`), 409 "in progress"
//! to a keyed request before acting (`injected 409`), and acting then answering 503, as if the
//! answer were lost on the way (`injected 503 after applying`). `task chaos --tools http` counts
//! those from the file.

use std::io::Read;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tiny_http::{Header, Response, Server};

use crate::agent::http::{CALL_HEADER, FENCE_HEADER, FENCE_HIGHEST_HEADER, KEY_HEADER};
use crate::agent::tool::Fence;
use crate::task::error::{TaskError, TaskResult};
use crate::task::ident::now_ms;
use crate::task::store::{open_sqlite, sql_error};

/// The server's tables.
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS calls(
  id INTEGER PRIMARY KEY, tool TEXT NOT NULL, key TEXT, task_id TEXT NOT NULL, step INTEGER NOT NULL,
  applied INTEGER NOT NULL, body TEXT NOT NULL, status INTEGER NOT NULL, at_ms INTEGER NOT NULL,
  epoch INTEGER NOT NULL, reason TEXT);
CREATE INDEX IF NOT EXISTS calls_task ON calls(task_id, step);
CREATE TABLE IF NOT EXISTS fences(task_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS keys(key TEXT PRIMARY KEY, tool TEXT NOT NULL, body TEXT NOT NULL,
  status INTEGER NOT NULL, response TEXT NOT NULL);";

/// The `reason` of a request refused because its `Idempotency-Key` came with another body.
pub const KEY_REUSED: &str = "key reused with another body";
/// The start of the `reason` of every injected fault (`--faults`).
pub const INJECTED: &str = "injected";

/// Longest request body read, bytes.
const MAX_REQUEST_BYTES: u64 = 64 * 1024;

/// Per-mille odds of each injected fault with `--faults`.
const FAULT_429_PERMILLE: u64 = 40;
/// Per-mille odds of an injected "in progress" 409 (keyed requests).
const FAULT_409_PERMILLE: u64 = 30;
/// Per-mille odds of acting, then answering 503.
const FAULT_LOST_PERMILLE: u64 = 50;

/// Options of `task serve-tools`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeToolsOpts {
    /// The server's own SQLite file (created if missing).
    #[arg(long, value_name = "FILE")]
    pub db: PathBuf,
    /// Port on 127.0.0.1 (0: a free one; the first stdout line names it).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Misbehave by draws from this seed (429s, in-progress 409s, 503s after acting).
    #[arg(long, value_name = "SEED")]
    pub faults: Option<u64>,
    /// Exit when the parent process exits (tests, chaos).
    #[arg(long)]
    pub exit_with_parent: bool,
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes())
        .unwrap_or_else(|()| Header::from_bytes(&b"X-Bad-Header"[..], &b"1"[..]).expect("a constant header is valid"))
}

/// A header's value in a tiny_http request.
fn get<'a>(rq: &'a tiny_http::Request, name: &str) -> Option<&'a str> {
    rq.headers().iter().find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name)).map(|h| h.value.as_str())
}

/// Binds 127.0.0.1:`port` and says where on the first stdout line (`listening on
/// http://127.0.0.1:PORT`), so a parent can read it.
pub fn bind(port: u16, what: &str) -> TaskResult<Server> {
    let server = Server::http(("127.0.0.1", port))
        .map_err(|e| TaskError::bad_input(format!("{what}: cannot listen on 127.0.0.1:{port}: {e}")))?;
    let port = server.server_addr().to_ip().map_or(0, |a| a.port());
    say!("listening on http://127.0.0.1:{port}");
    Ok(server)
}

/// With `--exit-with-parent`: a thread that ends the process once its parent is gone.
pub fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(200));
            if std::os::unix::process::parent_id() != parent {
                std::process::exit(0);
            }
        }
    });
}

/// A uniform draw in 0..1000 from the seed and the request number.
fn draw(seed: u64, n: u64) -> u64 {
    crate::agent::jitter::salt(&[&seed.to_le_bytes(), &n.to_le_bytes()]) % 1000
}

struct Call<'a> {
    tool: &'a str,
    key: Option<String>,
    task: &'a str,
    step: i64,
    body: &'a str,
    epoch: u64,
}

/// What the server answers: status, body, extra headers.
type Answer = (u16, String, Vec<(&'static str, String)>);

fn record(
    tx: &rusqlite::Transaction<'_>,
    c: &Call<'_>,
    applied: bool,
    status: u16,
    reason: Option<&str>,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO calls(tool, key, task_id, step, applied, body, status, at_ms, epoch, reason) \
         VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)",
    )?
    .execute(params![
        c.tool,
        c.key,
        c.task,
        c.step,
        i64::from(applied),
        c.body,
        i64::from(status),
        now_ms(),
        c.epoch as i64,
        reason
    ])?;
    Ok(())
}

/// Decides one call in one transaction (see the module doc).
fn decide(conn: &mut Connection, c: &Call<'_>, fault: Option<u64>) -> rusqlite::Result<Answer> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let seen: Option<i64> =
        tx.prepare_cached("SELECT epoch FROM fences WHERE task_id=?1")?.query_row([c.task], |r| r.get(0)).optional()?;
    let seen = seen.map_or(0, |e| e.max(0) as u64);
    if c.epoch < seen {
        record(&tx, c, false, 409, Some(&format!("fenced: token {} < {seen}", c.epoch)))?;
        tx.commit()?;
        let body = format!(r#"{{"error":"stale fencing token {} < {seen}"}}"#, c.epoch);
        return Ok((409, body, vec![(FENCE_HIGHEST_HEADER, seen.to_string())]));
    }
    tx.prepare_cached(
        "INSERT INTO fences VALUES(?1, ?2) ON CONFLICT(task_id) DO UPDATE SET epoch=max(epoch, excluded.epoch)",
    )?
    .execute(params![c.task, c.epoch as i64])?;
    if c.tool == "fence" {
        tx.commit()?;
        return Ok((200, format!(r#"{{"fence":{}}}"#, c.epoch.max(seen)), Vec::new()));
    }
    if let Some(k) = &c.key {
        let first: Option<(String, i64, String)> = tx
            .prepare_cached("SELECT body, status, response FROM keys WHERE key=?1")?
            .query_row([k], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        if let Some((body, status, response)) = first {
            if body != c.body {
                record(&tx, c, false, 422, Some(KEY_REUSED))?;
                tx.commit()?;
                return Ok((422, r#"{"error":"idempotency key reused with another request body"}"#.into(), Vec::new()));
            }
            let status = u16::try_from(status).unwrap_or(200);
            record(&tx, c, false, status, Some("duplicate key"))?;
            tx.commit()?;
            return Ok((status, response, vec![("Idempotent-Replayed", "true".into())]));
        }
    }
    if let Some(d) = fault {
        if d < FAULT_429_PERMILLE {
            record(&tx, c, false, 429, Some("injected 429"))?;
            tx.commit()?;
            return Ok((429, r#"{"error":"slow down"}"#.into(), vec![("Retry-After", "0".into())]));
        }
        if c.key.is_some() && d < FAULT_429_PERMILLE + FAULT_409_PERMILLE {
            record(&tx, c, false, 409, Some("injected 409"))?;
            tx.commit()?;
            return Ok((409, r#"{"error":"a request with this key is in progress"}"#.into(), Vec::new()));
        }
    }
    let response = format!(
        r#"{{"ok":true,"tool":{},"task":{},"step":{},"key":{},"applied":true}}"#,
        serde_json::Value::from(c.tool),
        serde_json::Value::from(c.task),
        c.step,
        c.key.as_deref().map_or(serde_json::Value::Null, serde_json::Value::from)
    );
    let lost = fault.is_some_and(|d| {
        (FAULT_429_PERMILLE + FAULT_409_PERMILLE..FAULT_429_PERMILLE + FAULT_409_PERMILLE + FAULT_LOST_PERMILLE)
            .contains(&d)
    });
    let (status, reason) = if lost { (503, Some("injected 503 after applying")) } else { (200, None) };
    record(&tx, c, true, status, reason)?;
    if let Some(k) = &c.key {
        // the key's answer is the real one: a retry after the lost answer gets it
        tx.prepare_cached("INSERT INTO keys VALUES(?1, ?2, ?3, 200, ?4)")?
            .execute(params![k, c.tool, c.body, response])?;
    }
    tx.commit()?;
    if lost {
        return Ok((503, r#"{"error":"the answer was lost (injected)"}"#.into(), Vec::new()));
    }
    Ok((200, response, Vec::new()))
}

/// Opens (creating) the server's file.
pub fn open_db(path: &Path) -> TaskResult<Connection> {
    let c = open_sqlite(path, true)?;
    c.execute_batch(SCHEMA).map_err(|e| sql_error(path, "creating the tool server's tables", e))?;
    Ok(c)
}

/// `task serve-tools`: serves until killed.
pub fn serve(o: &ServeToolsOpts) -> TaskResult<i32> {
    let mut conn = open_db(&o.db)?;
    if o.exit_with_parent {
        exit_with_parent();
    }
    let server = bind(o.port, "serve-tools")?;
    for (n, mut rq) in (1u64..).zip(server.incoming_requests()) {
        let path = rq.url().split('?').next().unwrap_or("").trim_end_matches('/').to_string();
        let tool = path.rsplit('/').next().unwrap_or("").to_string();
        let mut body = String::new();
        let _ = rq.as_reader().take(MAX_REQUEST_BYTES).read_to_string(&mut body);
        let fence = get(&rq, FENCE_HEADER).and_then(Fence::parse).map(|f| (f.task.to_string(), f.epoch));
        let key = get(&rq, KEY_HEADER).map(|k| k.trim().trim_matches('"').to_string());
        let step = get(&rq, CALL_HEADER)
            .and_then(|c| c.rsplit_once('/'))
            .and_then(|(_, s)| s.parse::<i64>().ok())
            .unwrap_or(-1);
        let answer: Answer = match (&fence, tool.is_empty()) {
            (_, true) => (404, r#"{"error":"name a tool in the path"}"#.into(), Vec::new()),
            (None, _) => (
                400,
                format!(r#"{{"error":"missing or malformed {FENCE_HEADER} header (expected task/epoch)"}}"#),
                Vec::new(),
            ),
            (Some((task, epoch)), _) => {
                let c = Call { tool: &tool, key, task, step, body: &body, epoch: *epoch };
                let fault = o.faults.map(|s| draw(s, n));
                match decide(&mut conn, &c, fault) {
                    Ok(a) => a,
                    Err(e) => (500, format!(r#"{{"error":{}}}"#, serde_json::Value::from(e.to_string())), Vec::new()),
                }
            }
        };
        let (status, text, extra) = answer;
        let mut resp = Response::from_string(text)
            .with_status_code(status)
            .with_header(header("Content-Type", "application/json"));
        for (k, v) in extra {
            resp = resp.with_header(header(k, &v));
        }
        let _ = rq.respond(resp);
    }
    Ok(0)
}

/// One row of a tool server's `calls`, as the chaos checker reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedCall {
    /// The tool.
    pub tool: String,
    /// The key (keyed requests).
    pub key: Option<String>,
    /// The task.
    pub task: String,
    /// The step (-1 when the request did not say).
    pub step: i64,
    /// Whether it acted.
    pub applied: bool,
    /// The fencing epoch it carried.
    pub epoch: u64,
    /// Why it did not act (or the injected fault).
    pub reason: Option<String>,
}

/// Every call the server at `path` recorded for `task` (all tasks when `None`), in order.
pub fn served_calls(path: &Path, task: Option<&str>) -> TaskResult<Vec<ServedCall>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let c = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| sql_error(path, "opening the tool server's file", e))?;
    let _ = c.busy_timeout(std::time::Duration::from_secs(10));
    let read = || -> rusqlite::Result<Vec<ServedCall>> {
        let sql = "SELECT tool, key, task_id, step, applied, epoch, reason FROM calls \
                   WHERE (?1 IS NULL OR task_id = ?1) ORDER BY id";
        let mut st = c.prepare(sql)?;
        let rows = st.query_map([task], |r| {
            Ok(ServedCall {
                tool: r.get(0)?,
                key: r.get(1)?,
                task: r.get(2)?,
                step: r.get(3)?,
                applied: r.get::<_, i64>(4)? != 0,
                epoch: r.get::<_, i64>(5)?.max(0) as u64,
                reason: r.get(6)?,
            })
        })?;
        rows.collect()
    };
    read().map_err(|e| sql_error(path, "reading the tool server's calls", e))
}
