//! `task bench`: durable model+tool steps per second next to the raw SQLite commit rate (one row
//! per transaction, WAL, `synchronous=FULL`) measured in the same run, on the same file system.
//!
//! Each step is a scripted model response with a tool call (idempotent class, an in-memory tool,
//! so the figure measures the runner and its log, not a tool): records `model`, `tool-intent`,
//! `tool-result`. The runner commits before each side effect, so one step costs one transaction
//! (the previous step's result, this step's model response and intent).
//!
//! With `--tasks K > 1` it also runs K concurrent tasks twice: each with its own connection
//! (one transaction per checkpoint per task, contending for SQLite's single writer), and through
//! one group committer that packs the pending checkpoints of all tasks into one transaction.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use brokerlab_core::runner::{
    Args, DriveError, Effects, Event, Journal, Key, ModelReply, ModelText, OpenCall, Record, ResultText, Stop, TaskId,
    TaskState, ToolCall, ToolClass, ToolName, ToolOutcome, ToolOutput, drive,
};

use super::backend::TaskStore;
use super::backend::{Access, Lease, LeaseAsk, NewTask, fold_in};
use super::exec::{Chaos, HostJournal};
use super::ident::Me;
use super::store::{Store, open_sqlite, sql_error};
use crate::task::error::{TaskError, TaskResult};

/// Options of `task bench`.
#[derive(Debug, Clone)]
pub struct BenchOpts {
    /// Steps per task.
    pub steps: u32,
    /// Concurrent tasks.
    pub tasks: u32,
    /// Print one JSON object.
    pub json: bool,
    /// Directory for the benchmark databases (default: a fresh one under the temp dir).
    pub dir: Option<PathBuf>,
    /// Also measure PostgreSQL (raw commit rate, 1/4/16 runners) on this database.
    pub db: Option<String>,
    /// With `db`: SIGKILL this many workers holding a task whose open calls are fenced and time
    /// the takeovers.
    pub takeover_kills: u32,
    /// With `takeover_kills`: also this many kills in an unfenced email's window (each waits for
    /// the lease's expiry: the dropped-session rule).
    pub takeover_unfenced_kills: u32,
    /// The workers' lease in the takeover runs, ms.
    pub takeover_lease_ms: u64,
}

pub(crate) struct BenchFx;

impl Effects for BenchFx {
    type Error = TaskError;
    fn model(&mut self, _task: &TaskId, step: u16) -> TaskResult<ModelReply> {
        let mut text = ModelText::new();
        let _ = text.push_str("pay the next invoice");
        let args = format!(r#"{{"amount":{},"to":"acct-{}"}}"#, 10 + step as u32, step);
        Ok(ModelReply {
            text,
            call: Some(ToolCall {
                tool: ToolName::try_from("payment").map_err(|_| TaskError::failure("name"))?,
                class: ToolClass::Idempotent,
                args: Args::from_slice(args.as_bytes()).map_err(|_| TaskError::failure("args"))?,
            }),
            answer: false,
        })
    }
    fn tool(&mut self, _t: &TaskId, _s: u16, _c: &ToolCall, key: Option<&Key>, _f: u64) -> TaskResult<ToolOutcome> {
        let mut output = ResultText::new();
        let _ = output.push_str("paid ");
        let _ = output.push_str(key.map_or("", |k| k.as_str()));
        Ok(ToolOutcome::Done(ToolOutput { ok: true, output }))
    }
}

fn raw_commit_rate(dir: &Path, n: u32) -> TaskResult<f64> {
    let path = dir.join("raw.sqlite");
    let c = open_sqlite(&path, true)?;
    c.execute_batch("CREATE TABLE IF NOT EXISTS raw(id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
        .map_err(|e| sql_error(&path, "schema", e))?;
    let payload = vec![0x5Au8; 120];
    let mut st = c.prepare("INSERT INTO raw(v) VALUES(?1)").map_err(|e| sql_error(&path, "prepare", e))?;
    let t = Instant::now();
    for _ in 0..n {
        st.execute([&payload]).map_err(|e| sql_error(&path, "insert", e))?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

pub(crate) fn create_task(store: &dyn TaskStore, id: &str, steps: u32) -> TaskResult<(TaskState, Lease)> {
    let task = TaskId::try_from(id).map_err(|_| TaskError::failure("id"))?;
    let created = Record::new(task, 0, Event::Created { spec_digest: 0, steps: steps as u16 });
    let new = NewTask {
        spec_json: "{\"id\":null,\"steps\":[]}".into(),
        digest: 0,
        parent: None,
        parent_seq: None,
        world: None,
        records: vec![created],
    };
    let mut st = fold_in(&store.name(), id, &new.records)?;
    let me = Me::current();
    let (lease, rec) = store
        .acquire(&LeaseAsk {
            id,
            me: &me,
            ttl_ms: 60_000,
            state: &st,
            create: Some(&new),
            clear_suspend: true,
            open: OpenCall::None,
            witness: None,
        })
        .map_err(|e| TaskError::failure(format!("bench lease: {e:?}")))?;
    st.apply(&rec).map_err(|e| TaskError::failure(e.to_string()))?;
    Ok((st, lease))
}

pub(crate) fn check_done<E: std::fmt::Debug, F: std::fmt::Debug>(r: Result<Stop, DriveError<E, F>>) -> TaskResult<()> {
    match r {
        Ok(Stop::Completed) => Ok(()),
        other => Err(TaskError::failure(format!("bench task did not complete: {other:?}"))),
    }
}

struct Req {
    lease: Lease,
    recs: Vec<Record>,
    reply: mpsc::Sender<Result<(), String>>,
}

/// A journal that hands its checkpoints to the group committer and waits for the commit.
struct GroupJournal {
    lease: Lease,
    pending: Vec<Record>,
    tx: mpsc::Sender<Req>,
    reply_tx: mpsc::Sender<Result<(), String>>,
    reply_rx: mpsc::Receiver<Result<(), String>>,
}

impl Journal for GroupJournal {
    type Error = String;
    fn append(&mut self, rec: &Record) -> Result<(), String> {
        self.pending.push(rec.clone());
        Ok(())
    }
    fn sync(&mut self) -> Result<(), String> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let recs = std::mem::take(&mut self.pending);
        self.tx
            .send(Req { lease: self.lease.clone(), recs, reply: self.reply_tx.clone() })
            .map_err(|_| "committer gone".to_string())?;
        self.reply_rx.recv().map_err(|_| "committer gone".to_string())?
    }
}

/// The group committer: takes every pending checkpoint, commits them in one transaction, replies.
/// Returns (transactions, checkpoints).
fn committer(store: &Store, rx: mpsc::Receiver<Req>) -> (u64, u64) {
    let (mut txs, mut cps) = (0u64, 0u64);
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let groups: Vec<(&Lease, &[Record])> = batch.iter().map(|r| (&r.lease, r.recs.as_slice())).collect();
        let res = store.append_groups(&groups);
        txs += 1;
        cps += batch.len() as u64;
        match res {
            Ok(each) => {
                for (req, r) in batch.iter().zip(each) {
                    let _ = req.reply.send(r.map_err(|e| format!("{e:?}")));
                }
            }
            Err(e) => {
                for req in &batch {
                    let _ = req.reply.send(Err(format!("{e:?}")));
                }
            }
        }
    }
    (txs, cps)
}

/// Results of the concurrent runs.
#[derive(Debug, Clone, Copy)]
struct Concurrent {
    steps_per_s: f64,
    commits: u64,
    checkpoints: u64,
}

fn run_ungrouped(dir: &Path, steps: u32, tasks: u32) -> TaskResult<Concurrent> {
    let path = dir.join("ungrouped.sqlite");
    let store = Store::open(&path, Access::Create)?;
    let mut prepared = Vec::new();
    for k in 0..tasks {
        prepared.push(create_task(&store, &format!("u{k}"), steps)?);
    }
    drop(store);
    let t = Instant::now();
    let results: Vec<TaskResult<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = prepared
            .into_iter()
            .map(|(mut st, lease)| {
                let path = path.clone();
                s.spawn(move || -> TaskResult<u64> {
                    let store = Store::open(&path, Access::Write)?;
                    // K writers contend for SQLite's one write lock; do not give up under load
                    let _ = store.conn.busy_timeout(std::time::Duration::from_secs(120));
                    let chaos = Chaos::none();
                    let mut j = HostJournal::new(&store, lease, &chaos);
                    check_done(drive(&mut st, &mut j, &mut BenchFx))?;
                    Ok(j.commits)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(TaskError::failure("bench thread panicked")))).collect()
    });
    let el = t.elapsed();
    let mut commits = 0;
    for r in results {
        commits += r?;
    }
    Ok(Concurrent { steps_per_s: (steps * tasks) as f64 / el.as_secs_f64(), commits, checkpoints: commits })
}

fn run_grouped(dir: &Path, steps: u32, tasks: u32) -> TaskResult<Concurrent> {
    let path = dir.join("grouped.sqlite");
    let store = Store::open(&path, Access::Create)?;
    let mut prepared = Vec::new();
    for k in 0..tasks {
        prepared.push(create_task(&store, &format!("g{k}"), steps)?);
    }
    let (tx, rx) = mpsc::channel::<Req>();
    let t = Instant::now();
    let (results, (commits, checkpoints)) = std::thread::scope(|s| {
        let committer = s.spawn(move || committer(&store, rx));
        let hs: Vec<_> = prepared
            .into_iter()
            .map(|(mut st, lease)| {
                let tx = tx.clone();
                s.spawn(move || -> TaskResult<()> {
                    let (reply_tx, reply_rx) = mpsc::channel();
                    let mut j = GroupJournal { lease, pending: Vec::new(), tx, reply_tx, reply_rx };
                    check_done(drive(&mut st, &mut j, &mut BenchFx))
                })
            })
            .collect();
        drop(tx);
        let rs: Vec<TaskResult<()>> = hs
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(TaskError::failure("bench thread panicked"))))
            .collect();
        (rs, committer.join().unwrap_or((0, 0)))
    });
    let el = t.elapsed();
    for r in results {
        r?;
    }
    Ok(Concurrent { steps_per_s: (steps * tasks) as f64 / el.as_secs_f64(), commits, checkpoints })
}

/// `task bench`.
pub fn bench(opts: &BenchOpts) -> TaskResult<i32> {
    check_opts(opts)?;
    let (dir, cleanup) = match &opts.dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("brokerlab-bench-{}", std::process::id())), true),
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| TaskError::bad_input(format!("{}: cannot create: {e}", dir.display())))?;
    for f in ["raw", "single", "ungrouped", "grouped"] {
        for ext in ["sqlite", "sqlite-wal", "sqlite-shm"] {
            let _ = std::fs::remove_file(dir.join(format!("{f}.{ext}")));
        }
    }
    let result = measure(opts, &dir);
    if cleanup {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let v = result?;
    if opts.json {
        say!("{v}");
        return Ok(0);
    }
    print_sqlite(opts, &v);
    print_postgres(&v);
    Ok(0)
}

/// The options' own consistency; a takeover's database created for its fault hooks.
fn check_opts(opts: &BenchOpts) -> TaskResult<()> {
    if opts.steps == 0 || opts.steps > brokerlab_core::runner::MAX_STEPS as u32 {
        return Err(TaskError::bad_input(format!(
            "--steps {}: expected 1..={}",
            opts.steps,
            brokerlab_core::runner::MAX_STEPS
        )));
    }
    if opts.takeover_kills > 0 && opts.db.is_none() {
        return Err(TaskError::bad_input("--takeover-kills needs --db postgres://..."));
    }
    if opts.tasks == 0 || opts.tasks > 256 {
        return Err(TaskError::bad_input(format!("--tasks {}: expected 1..=256", opts.tasks)));
    }
    if let Some(url) = &opts.db
        && opts.takeover_kills > 0
    {
        // the takeover's workers use fault hooks (BROKERLAB_AS_HOST): on a database created for
        // them, never on an existing log
        super::pg::PgStore::init_db(url, true)?;
    }
    Ok(())
}

/// Every measurement, as the `--json` object (files in `dir`).
fn measure(opts: &BenchOpts, dir: &Path) -> TaskResult<serde_json::Value> {
    // Raw rate measured before and after the runner (disk speed drifts under other load);
    // the ratio uses the faster of the two, so it errs against the runner.
    let raw_n = opts.steps.max(500);
    let raw_before = raw_commit_rate(dir, raw_n)?;
    // one task
    let path = dir.join("single.sqlite");
    let store = Store::open(&path, Access::Create)?;
    let (mut st, lease) = create_task(&store, "bench", opts.steps)?;
    let chaos = Chaos::none();
    let mut j = HostJournal::new(&store, lease, &chaos);
    let t = Instant::now();
    check_done(drive(&mut st, &mut j, &mut BenchFx))?;
    let el = t.elapsed();
    let steps_per_s = opts.steps as f64 / el.as_secs_f64();
    let raw_after = raw_commit_rate(dir, raw_n)?;
    let raw = raw_before.max(raw_after);
    let mut v = serde_json::json!({
        "raw_commits_per_s_before": round(raw_before),
        "raw_commits_per_s_after": round(raw_after),
        "steps": opts.steps,
        "tasks": opts.tasks,
        "records": st.next_seq,
        "commits": j.commits,
        "commits_per_step": j.commits as f64 / opts.steps as f64,
        "steps_per_s": round(steps_per_s),
        "raw_commits_per_s": round(raw),
        "ratio": round3(steps_per_s / raw),
        "dir": dir.display().to_string(),
    });
    if opts.tasks > 1 {
        let u = run_ungrouped(dir, opts.steps, opts.tasks)?;
        let g = run_grouped(dir, opts.steps, opts.tasks)?;
        v["ungrouped_steps_per_s"] = round(u.steps_per_s).into();
        v["ungrouped_commits"] = u.commits.into();
        v["group_steps_per_s"] = round(g.steps_per_s).into();
        v["group_ratio"] = round3(g.steps_per_s / raw).into();
        v["group_commits"] = g.commits.into();
        v["group_checkpoints"] = g.checkpoints.into();
        v["checkpoints_per_commit"] = round3(g.checkpoints as f64 / g.commits.max(1) as f64).into();
    }
    if let Some(url) = &opts.db {
        v["postgres"] = super::pgbench::throughput(url, opts.steps)?;
        if opts.takeover_kills > 0 {
            v["takeover"] = super::pgbench::takeover(
                url,
                opts.takeover_kills,
                opts.takeover_unfenced_kills,
                opts.takeover_lease_ms,
                dir,
            )?;
        }
    }
    Ok(v)
}

/// The SQLite figures as text.
fn print_sqlite(opts: &BenchOpts, v: &serde_json::Value) {
    say!(
        "raw SQLite (WAL, synchronous=FULL, 1 row/commit): {:>9.0} commits/s  (best of {} before, {} after)",
        v["raw_commits_per_s"].as_f64().unwrap_or(0.0),
        v["raw_commits_per_s_before"],
        v["raw_commits_per_s_after"]
    );
    say!(
        "runner, 1 task, {} model+tool steps:      {:>9.0} steps/s  ({:.2}x raw; {} records in {} commits)",
        opts.steps,
        v["steps_per_s"].as_f64().unwrap_or(0.0),
        v["ratio"].as_f64().unwrap_or(0.0),
        v["records"],
        v["commits"]
    );
    if opts.tasks > 1 {
        say!(
            "runner, {} tasks, one connection each:    {:>9.0} steps/s  ({} commits)",
            opts.tasks,
            v["ungrouped_steps_per_s"].as_f64().unwrap_or(0.0),
            v["ungrouped_commits"]
        );
        say!(
            "runner, {} tasks, group commit:           {:>9.0} steps/s  ({:.2}x raw; {} checkpoints in {} commits, {:.1} per commit)",
            opts.tasks,
            v["group_steps_per_s"].as_f64().unwrap_or(0.0),
            v["group_ratio"].as_f64().unwrap_or(0.0),
            v["group_checkpoints"],
            v["group_commits"],
            v["checkpoints_per_commit"].as_f64().unwrap_or(0.0)
        );
    }
}

/// The PostgreSQL figures (throughput, takeover) as text, when measured.
fn print_postgres(v: &serde_json::Value) {
    if let Some(p) = v.get("postgres") {
        let f = |k: &str| p[k].as_f64().unwrap_or(0.0);
        say!(
            "raw PostgreSQL (synchronous_commit=on, 1 INSERT/commit): {:>9.0} commits/s  (interleaved in {} rounds: {})",
            f("raw_commits_per_s"),
            p["rounds"],
            p["raw_commits_per_s_rounds"]
        );
        for k in [1, 4, 16] {
            say!(
                "PostgreSQL, {k:>2} runner(s), one session each:  {:>9.0} steps/s  ({:.2}x raw)",
                f(&format!("steps_per_s_{k}")),
                f(&format!("ratio_{k}"))
            );
        }
        say!("PostgreSQL, 16 runners over 1: {:.2}x (group commit)", f("gain_16_over_1"));
    }
    if let Some(t) = v.get("takeover") {
        for (k, what) in [("fenced", "open calls fenced"), ("unfenced", "an unfenced email in flight")] {
            let s = &t[k];
            let f = |k: &str| s[k].as_f64().unwrap_or(0.0);
            say!(
                "takeover after SIGKILL, {what} ({} kills, lease {} ms): kill to the new lease record p50 {:.0} ms, \
                 p99 {:.0} ms, max {:.0} ms; to the first step p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; duplicates {}",
                s["kills"],
                t["lease_ms"],
                f("lease_record_ms_p50"),
                f("lease_record_ms_p99"),
                f("lease_record_ms_max"),
                f("takeover_ms_p50"),
                f("takeover_ms_p99"),
                f("takeover_ms_max"),
                s["duplicates"]
            );
            if k == "unfenced" {
                say!(
                    "  the new lease record after the expiry the holder wrote: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms \
                     ({} before it)",
                    f("lease_after_expiry_ms_p50"),
                    f("lease_after_expiry_ms_p99"),
                    f("lease_after_expiry_ms_max"),
                    s["before_expiry"]
                );
            }
        }
    }
}

pub(crate) fn round(x: f64) -> f64 {
    x.round()
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
