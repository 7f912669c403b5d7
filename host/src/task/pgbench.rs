//! `task bench --db postgres://...`: the PostgreSQL figures of issue 17, next to the SQLite ones.
//!
//! * **Throughput**: the raw commit rate (one `INSERT` of a 120-byte row + `COMMIT` per
//!   transaction, `synchronous_commit = on`, one session) and durable model+tool steps/s with 1,
//!   4 and 16 runners at once (threads, one session each, one task each: the same `drive` loop,
//!   journal and suspend poll as `task run`, every checkpoint one fenced statement), in the same
//!   run, interleaved in [`ROUNDS`] rounds (raw, 1, 4, 16, raw, 1, ...) so the disk's drift
//!   weighs on all of them alike. PostgreSQL
//!   flushes the WAL of concurrent commits together (group commit), which is what 16 sessions gain.
//!   Each round also writes one runner's checkpoints alone (built in memory first, then the same
//!   fenced appends timed without the drive loop): the ceiling that the server's work per
//!   checkpoint and the round trip set for one runner.
//! * **Takeover** (`--takeover-kills N`): two `task worker` processes; a task is submitted, once
//!   its holder has made a few durable steps the holder gets `SIGKILL`, and the time from the
//!   kill to the first durable step of another worker on that task (the `at_ms` of the first log
//!   row with a higher epoch that is not the `lease` record) is recorded. The workers run with
//!   `BROKERLAB_AS_HOST` set to a host id without a boot id, so the same-host rule (pid gone) can
//!   never apply: what is measured is the cross-host path, the holder's session found gone
//!   through its advisory lock, plus the idle worker's claim poll (`--poll-ms`, default 200).

use std::cell::Cell;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use brokerlab_core::runner::{Effects, Journal, Key, ModelReply, Record, TaskId, ToolCall, ToolOutput, drive};
use postgres::Client;

use super::backend::TaskStore;
use super::bench::{BenchFx, check_done, create_task, round, round3};
use super::exec::{Chaos, HostJournal, checkpoint};
use super::ident::now_ms;
use super::pg::{PgStore, pg_error, redact};
use crate::task::error::{TaskError, TaskResult};

/// The bench's model and tool, with the suspend poll a real runner makes before every step (on
/// PostgreSQL answered by the last checkpoint, or by a SELECT when that answer is old).
struct PgBenchFx<'a>(&'a PgStore);

impl Effects for PgBenchFx<'_> {
    type Error = TaskError;
    fn model(&mut self, task: &TaskId, step: u16) -> TaskResult<ModelReply> {
        BenchFx.model(task, step)
    }
    fn tool(&mut self, t: &TaskId, s: u16, c: &ToolCall, key: Option<&Key>, f: u64) -> TaskResult<ToolOutput> {
        BenchFx.tool(t, s, c, key, f)
    }
    fn suspend_requested(&mut self, task: &TaskId, _step: u16) -> TaskResult<bool> {
        self.0.suspend_requested(task)
    }
}

fn client(url: &str) -> TaskResult<Client> {
    let mut c = Client::connect(url, postgres::NoTls)
        .map_err(|e| TaskError::bad_input(format!("{}: cannot connect: {e}", redact(url))))?;
    c.batch_execute("SET synchronous_commit = on").map_err(|e| pg_error(&redact(url), "session", &e))?;
    Ok(c)
}

/// Raw commits: `n` single-row autocommit INSERTs on one session; returns the seconds taken.
fn raw_commits(url: &str, n: u32) -> TaskResult<f64> {
    let name = redact(url);
    let mut c = client(url)?;
    let e = |e: postgres::Error| pg_error(&name, "raw commit rate", &e);
    c.batch_execute("CREATE TABLE IF NOT EXISTS bench_raw(id BIGSERIAL PRIMARY KEY, v BYTEA NOT NULL)").map_err(e)?;
    let st = c.prepare("INSERT INTO bench_raw(v) VALUES($1)").map_err(e)?;
    let payload = vec![0x5Au8; 120];
    let t = Instant::now();
    for _ in 0..n {
        c.execute(&st, &[&payload]).map_err(e)?;
    }
    let secs = t.elapsed().as_secs_f64();
    c.batch_execute("DROP TABLE bench_raw").map_err(e)?;
    Ok(secs)
}

/// K runners at once, `steps` steps each; returns the seconds taken (from the first step to the
/// last runner's end; creating the tasks and taking their leases is not counted).
fn runners(url: &str, k: u32, steps: u32, tag: &str) -> TaskResult<f64> {
    let mut prepared = Vec::new();
    for i in 0..k {
        let store = PgStore::open(url, true)?;
        let (st, lease) = create_task(&store, &format!("bench-{tag}-{k}-{i}"), steps)?;
        prepared.push((store, st, lease));
    }
    let t = Instant::now();
    let results: Vec<TaskResult<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = prepared
            .into_iter()
            .map(|(store, mut st, lease)| {
                s.spawn(move || -> TaskResult<()> {
                    let chaos = Chaos::none();
                    let mut j = HostJournal::new(&store, lease, &chaos);
                    check_done(drive(&mut st, &mut j, &mut PgBenchFx(&store)))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(TaskError::failure("bench thread panicked")))).collect()
    });
    let el = t.elapsed();
    for r in results {
        r?;
    }
    Ok(el.as_secs_f64())
}

/// Collects a runner's checkpoints (the records of each `sync`) without writing them.
#[derive(Default)]
struct Capture {
    pending: Vec<Record>,
    batches: Vec<Vec<Record>>,
}

impl Journal for Capture {
    type Error = TaskError;
    fn append(&mut self, rec: &Record) -> TaskResult<()> {
        self.pending.push(rec.clone());
        Ok(())
    }
    fn sync(&mut self) -> TaskResult<()> {
        if !self.pending.is_empty() {
            self.batches.push(std::mem::take(&mut self.pending));
        }
        Ok(())
    }
}

/// The checkpoints alone: one runner's checkpoints (the same records, batched as its `sync`s
/// batch them) are built first in memory, then written with the store's fenced append on one
/// session, renewing the lease when the runner's journal would (`exec::checkpoint`), timed
/// without the drive loop, the model and the tool. Its rate is what one runner
/// could reach if its own work cost nothing: the ceiling the server and the round trip set.
/// Returns the seconds taken and the number of checkpoints.
fn checkpoints_alone(url: &str, steps: u32, tag: &str) -> TaskResult<(f64, usize)> {
    let store = PgStore::open(url, true)?;
    let (st, lease) = create_task(&store, &format!("bench-{tag}-alone"), steps)?;
    let mut cap = Capture::default();
    check_done(drive(&mut st.clone(), &mut cap, &mut BenchFx))?;
    let renewed_at_ms = Cell::new(lease.taken_at_ms);
    let t = Instant::now();
    for b in &cap.batches {
        checkpoint(&store, &lease, &renewed_at_ms, b)
            .map_err(|e| TaskError::failure(format!("bench append: {e:?}")))?;
    }
    Ok((t.elapsed().as_secs_f64(), cap.batches.len()))
}

/// Rounds of the throughput run: each measures the raw rate, then 1, 4 and 16 runners, so a disk
/// whose speed drifts (a shared VM's does, by 2x within a minute) weighs on all of them alike.
const ROUNDS: u32 = 5;

/// The throughput figures, as a JSON object: `steps` steps per runner in all, in [`ROUNDS`]
/// rounds; the raw rate over as many commits as one runner's steps (at least 500).
pub fn throughput(url: &str, steps: u32) -> TaskResult<serde_json::Value> {
    let tag = format!("{}-{}", std::process::id(), now_ms());
    let per = steps.div_ceil(ROUNDS).max(1);
    let raw_per = per.max(100);
    let (mut raw_s, mut s1, mut s4, mut s16, mut alone_s, mut alone_n) = (0.0, 0.0, 0.0, 0.0, 0.0, 0);
    let mut raw_rounds = Vec::new();
    for r in 0..ROUNDS {
        let t = raw_commits(url, raw_per)?;
        raw_s += t;
        raw_rounds.push(round(f64::from(raw_per) / t));
        s1 += runners(url, 1, per, &format!("{tag}-{r}"))?;
        let (secs, n) = checkpoints_alone(url, per, &format!("{tag}-{r}"))?;
        alone_s += secs;
        alone_n += n;
        s4 += runners(url, 4, per, &format!("{tag}-{r}"))?;
        s16 += runners(url, 16, per, &format!("{tag}-{r}"))?;
    }
    let raw = f64::from(raw_per * ROUNDS) / raw_s;
    let rate = |k: u32, secs: f64| f64::from(per * ROUNDS * k) / secs;
    let (one, four, sixteen) = (rate(1, s1), rate(4, s4), rate(16, s16));
    let alone = alone_n as f64 / alone_s;
    Ok(serde_json::json!({
        "db": redact(url),
        "rounds": ROUNDS,
        "raw_commits": raw_per * ROUNDS,
        "raw_commits_per_s": round(raw),
        "raw_commits_per_s_rounds": raw_rounds,
        "steps_per_runner": per * ROUNDS,
        "steps_per_s_1": round(one),
        "steps_per_s_4": round(four),
        "steps_per_s_16": round(sixteen),
        "ratio_1": round3(one / raw),
        "ratio_4": round3(four / raw),
        "ratio_16": round3(sixteen / raw),
        "gain_16_over_1": round3(sixteen / one),
        "checkpoints_alone": alone_n,
        "checkpoints_alone_per_s": round(alone),
        "checkpoints_alone_ratio": round3(alone / raw),
    }))
}

/// Steps of a fenced-series task: lookups and payments (the payment tool checks fencing tokens
/// and dedupes by key: every call a killed holder could still make is fenced).
const TAKEOVER_STEPS: usize = 8;

/// The workers' step delay, ms: each model call and each tool call (after it applied) sleeps this
/// long, so a holder can be killed mid-task; the first durable step after a takeover includes one
/// model call's delay.
const TAKEOVER_STEP_DELAY_MS: u64 = 20;

/// Which calls the killed holder leaves open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Series {
    /// Killed between steps (after two model steps): whatever it left open is fenced, so the dropped-session rule
    /// lets the taker in as soon as the holder's session is gone.
    Fenced,
    /// Killed in an email's window (the call applied, its result not yet recorded) with the email
    /// tool unfenced (`BROKERLAB_UNFENCED_TOOLS`): the dropped-session rule makes the taker wait for the expiry the
    /// holder wrote.
    Unfenced,
}

fn takeover_spec(id: &str, series: Series) -> String {
    let mut s = format!("id = \"{id}\"\n");
    match series {
        Series::Fenced => {
            for i in 0..TAKEOVER_STEPS {
                let (tool, args) = if i % 2 == 0 {
                    ("lookup", format!("{{ q = \"acct-{i}\" }}"))
                } else {
                    ("payment", format!("{{ amount = {i}, to = \"acct-{i}\" }}"))
                };
                s.push_str(&format!("[[step]]\nmodel = \"step {i}\"\ntool = \"{tool}\"\nargs = {args}\n"));
            }
        }
        Series::Unfenced => {
            s.push_str("[[step]]\nmodel = \"look up\"\ntool = \"lookup\"\nargs = { q = \"acct\" }\n");
            s.push_str("[[step]]\nmodel = \"tell them\"\ntool = \"send_email\"\nargs = { to = \"a@example.com\" }\n");
            s.push_str("[[step]]\nmodel = \"done\"\n");
        }
    }
    s
}

struct Workers {
    exe: std::path::PathBuf,
    url: String,
    world: std::path::PathBuf,
    lease_ms: u64,
    kids: Vec<Child>,
}

impl Workers {
    fn spawn(&mut self) -> TaskResult<()> {
        let mut c = Command::new(&self.exe);
        c.args(["task", "worker", "--db", &self.url, "--world"]).arg(&self.world);
        c.args(["--step-delay-ms", &TAKEOVER_STEP_DELAY_MS.to_string(), "--lease-ms", &self.lease_ms.to_string()]);
        // fault hooks, on the bench's fault-injection database: no same-host pid rule (the
        // cross-host path), and an email tool that cannot check a token (the unfenced series)
        c.env("BROKERLAB_AS_HOST", "takeover-bench/").env("BROKERLAB_UNFENCED_TOOLS", "send_email");
        c.env_remove("BROKERLAB_LEASE_MS").env_remove("BROKERLAB_CRASH_AT").env_remove("BROKERLAB_PAUSE_AT");
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let k = c.spawn().map_err(|e| TaskError::failure(format!("cannot start a worker: {e}")))?;
        self.kids.push(k);
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for k in &mut self.kids {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// p50, p99, max, min and mean of `xs` (ms), keys prefixed with `name`.
fn figures(name: &str, xs: &[f64]) -> serde_json::Value {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = sorted.iter().sum::<f64>() / sorted.len().max(1) as f64;
    serde_json::json!({
        format!("{name}_p50"): percentile(&sorted, 50.0),
        format!("{name}_p99"): percentile(&sorted, 99.0),
        format!("{name}_max"): sorted.last().copied().unwrap_or(0.0),
        format!("{name}_min"): sorted.first().copied().unwrap_or(0.0),
        format!("{name}_mean"): round(mean),
    })
}

/// Polls `f` every 2 ms until it gives a value, for at most `secs`.
fn poll<T>(what: &str, secs: u64, mut f: impl FnMut() -> TaskResult<Option<T>>) -> TaskResult<T> {
    let t = Instant::now();
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if t.elapsed() > Duration::from_secs(secs) {
            return Err(TaskError::failure(format!("takeover bench: {what} within {secs} s")));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One kill of a series: the samples it gives (ms).
struct Kill {
    /// Kill to the `lease` record of the next holder.
    to_lease_ms: f64,
    /// Kill to the next holder's first other record (its first durable step).
    to_step_ms: f64,
    /// That record's time less the expiry the killed holder wrote (negative: before it).
    after_expiry_ms: f64,
    /// The lease record's time less that expiry.
    lease_after_expiry_ms: f64,
}

/// The takeover figures, as a JSON object: `kills` kills of a holder whose open calls are fenced
/// and `unfenced_kills` of one in an unfenced email's window, with two `task worker` processes
/// (lease `lease_ms`, default poll).
pub fn takeover(
    url: &str,
    kills: u32,
    unfenced_kills: u32,
    lease_ms: u64,
    dir: &Path,
) -> TaskResult<serde_json::Value> {
    let name = redact(url);
    drop(PgStore::open(url, true)?);
    let mut c = client(url)?;
    let specs = dir.join("takeover-specs");
    std::fs::create_dir_all(&specs).map_err(|er| TaskError::failure(format!("{}: {er}", specs.display())))?;
    let world = dir.join("takeover-world");
    let mut w = Workers {
        exe: std::env::current_exe().map_err(|er| TaskError::failure(format!("cannot find this binary: {er}")))?,
        url: url.to_string(),
        world: world.clone(),
        lease_ms,
        kids: Vec::new(),
    };
    w.spawn()?;
    w.spawn()?;
    let tag = format!("{}-{}", std::process::id(), now_ms());
    let mut out = serde_json::json!({
        "lease_ms": lease_ms,
        "poll_ms": 200,
        "step_delay_ms": TAKEOVER_STEP_DELAY_MS,
        "case": "two `task worker`s; the holder SIGKILLed; cross-host rule (the same-host pid rule disabled): \
                 its PostgreSQL session gone, the dropped-session rule decides",
    });
    for (series, n) in [(Series::Fenced, kills), (Series::Unfenced, unfenced_kills)] {
        let mut samples = Vec::new();
        let mut missed = 0;
        let mut ids = Vec::new();
        while samples.len() < n as usize {
            let id = format!("takeover-{tag}-{:?}-{}", series, samples.len() + missed).to_lowercase();
            match one_kill(&mut c, &name, &mut w, &specs, &world, &id, series)? {
                Some(k) => samples.push(k),
                None => missed += 1,
            }
            ids.push(id);
            if missed > n as usize + 10 {
                return Err(TaskError::failure(format!("takeover bench: {missed} kills missed the window")));
            }
        }
        let dups = duplicates(&world, &ids)?;
        let early = samples.iter().filter(|k| k.lease_after_expiry_ms < 0.0).count();
        let mut v = serde_json::json!({ "kills": n, "missed_window": missed, "duplicates": dups });
        let merge = |v: &mut serde_json::Value, x: serde_json::Value| {
            for (k, val) in x.as_object().into_iter().flatten() {
                v[k] = val.clone();
            }
        };
        merge(&mut v, figures("takeover_ms", &samples.iter().map(|k| k.to_step_ms).collect::<Vec<_>>()));
        merge(&mut v, figures("lease_record_ms", &samples.iter().map(|k| k.to_lease_ms).collect::<Vec<_>>()));
        if series == Series::Unfenced {
            merge(&mut v, figures("after_expiry_ms", &samples.iter().map(|k| k.after_expiry_ms).collect::<Vec<_>>()));
            let lease_after: Vec<f64> = samples.iter().map(|k| k.lease_after_expiry_ms).collect();
            merge(&mut v, figures("lease_after_expiry_ms", &lease_after));
            v["before_expiry"] = early.into();
        }
        out[if series == Series::Fenced { "fenced" } else { "unfenced" }] = v;
    }
    Ok(out)
}

/// Submits task `id` of `series`, kills its holder at the series' point, and times the takeover;
/// `None` when the kill missed the point (the unfenced series: the email's result was recorded
/// first).
fn one_kill(
    c: &mut Client,
    name: &str,
    w: &mut Workers,
    specs: &Path,
    world: &Path,
    id: &str,
    series: Series,
) -> TaskResult<Option<Kill>> {
    let e = |what: &'static str| move |err: postgres::Error| pg_error(name, what, &err);
    let spec = specs.join(format!("{id}.toml"));
    std::fs::write(&spec, takeover_spec(id, series))
        .map_err(|er| TaskError::failure(format!("{}: {er}", spec.display())))?;
    let out = Command::new(&w.exe)
        .args(["task", "submit"])
        .arg(&spec)
        .args(["--db", &w.url, "--world"])
        .arg(world)
        .output()
        .map_err(|er| TaskError::failure(format!("cannot run `task submit`: {er}")))?;
    if !out.status.success() {
        return Err(TaskError::failure(format!("task submit: {}", String::from_utf8_lossy(&out.stderr))));
    }
    // the point: two durable model steps (fenced), or the email applied in the tool's file
    let emails = world.join("emails.sqlite");
    poll("the holder reached its point", 30, || {
        Ok(match series {
            Series::Fenced => {
                let n: i64 = c
                    .query_one("SELECT count(*) FROM log_records WHERE task_id=$1 AND kind='model'", &[&id])
                    .map_err(e("reading the log"))?
                    .get(0);
                (n >= 2).then_some(())
            }
            Series::Unfenced => email_applied(&emails, id).then_some(()),
        })
    })?;
    let r = c
        .query_one("SELECT pid, epoch, expires_at_ms FROM leases WHERE task_id=$1", &[&id])
        .map_err(e("reading the lease"))?;
    let (pid, epoch, expires): (u32, i64, i64) = (r.get::<_, i64>(0) as u32, r.get(1), r.get(2));
    let Some(i) = w.kids.iter().position(|k| k.id() == pid) else {
        return Err(TaskError::failure(format!("{id}: held by pid {pid}, not one of our workers")));
    };
    let mut victim = w.kids.swap_remove(i);
    let t_kill = now_ms();
    let _ = victim.kill();
    let _ = victim.wait();
    if series == Series::Unfenced {
        let last: String = c
            .query_one("SELECT kind FROM log_records WHERE task_id=$1 ORDER BY seq DESC LIMIT 1", &[&id])
            .map_err(e("reading the log"))?
            .get(0);
        if last != "tool-intent" {
            // the result was recorded before the kill: not the case measured
            w.spawn()?;
            wait_settled(c, name, id)?;
            return Ok(None);
        }
    }
    // the next holder's lease record and first durable step
    let (lease_at, step_at): (i64, i64) = poll("the task taken over", 60, || {
        let rows = c
            .query(
                "SELECT kind, at_ms FROM log_records WHERE task_id=$1 AND epoch > $2 ORDER BY seq LIMIT 2",
                &[&id, &epoch],
            )
            .map_err(e("reading the log"))?;
        Ok((rows.len() == 2).then(|| (rows[0].get(1), rows[1].get(1))))
    })?;
    // the replacement only now: started earlier, its first claim would race the idle worker's
    // wait and flatter the figure
    w.spawn()?;
    wait_settled(c, name, id)?;
    Ok(Some(Kill {
        to_lease_ms: (lease_at - t_kill) as f64,
        to_step_ms: (step_at - t_kill) as f64,
        after_expiry_ms: (step_at - expires) as f64,
        lease_after_expiry_ms: (lease_at - expires) as f64,
    }))
}

/// Whether the email tool's file holds an applied call by `task`.
fn email_applied(file: &Path, task: &str) -> bool {
    let Ok(c) = rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return false;
    };
    c.query_row("SELECT count(*) FROM calls WHERE task_id=?1 AND applied=1", [task], |r| r.get::<_, i64>(0))
        .is_ok_and(|n| n > 0)
}

/// Waits until task `id` completed or paused for review (out of the workers' hands), so an idle
/// worker is there for the next kill.
fn wait_settled(c: &mut Client, name: &str, id: &str) -> TaskResult<()> {
    poll("the task settled", 60, || {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM log_records WHERE task_id=$1 AND kind IN ('completed', 'needs-review')",
                &[&id],
            )
            .map_err(|er| pg_error(name, "reading the log", &er))?
            .get(0);
        Ok((n > 0).then_some(()))
    })
}

/// Side effects applied more than once for a (task, step) among `ids`, from the tools' files.
fn duplicates(world: &Path, ids: &[String]) -> TaskResult<u64> {
    let mut dups = 0;
    for f in ["payments.sqlite", "emails.sqlite"] {
        let path = world.join(f);
        if !path.exists() {
            continue;
        }
        let c = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|er| TaskError::failure(format!("{}: {er}", path.display())))?;
        for id in ids {
            let n: i64 = c
                .query_row(
                    "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM calls WHERE task_id=?1 AND applied=1 \
                     GROUP BY step)",
                    [id],
                    |r| r.get(0),
                )
                .map_err(|er| TaskError::failure(format!("{}: {er}", path.display())))?;
            dups += n as u64;
        }
    }
    Ok(dups)
}
