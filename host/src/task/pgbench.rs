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

const TAKEOVER_STEPS: usize = 8;

fn takeover_spec(id: &str) -> String {
    let mut s = format!("id = \"{id}\"\n");
    for i in 0..TAKEOVER_STEPS {
        s.push_str(&format!("[[step]]\nmodel = \"look up {i}\"\ntool = \"lookup\"\nargs = {{ q = \"acct-{i}\" }}\n"));
    }
    s
}

struct Workers {
    exe: std::path::PathBuf,
    url: String,
    world: std::path::PathBuf,
    kids: Vec<Child>,
}

impl Workers {
    fn spawn(&mut self) -> TaskResult<()> {
        let mut c = Command::new(&self.exe);
        c.args(["task", "worker", "--db", &self.url, "--world"]).arg(&self.world);
        c.args(["--step-delay-ms", "20"]);
        c.env("BROKERLAB_AS_HOST", "takeover-bench/").env_remove("BROKERLAB_LEASE_MS");
        c.env_remove("BROKERLAB_CRASH_AT").env_remove("BROKERLAB_PAUSE_AT");
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

/// `kills` takeovers; the figures as a JSON object.
pub fn takeover(url: &str, kills: u32, dir: &Path) -> TaskResult<serde_json::Value> {
    let name = redact(url);
    let name = &name;
    let e = |what: &'static str| move |err: postgres::Error| pg_error(name, what, &err);
    drop(PgStore::open(url, true)?);
    let mut c = client(url)?;
    let specs = dir.join("takeover-specs");
    std::fs::create_dir_all(&specs).map_err(|er| TaskError::failure(format!("{}: {er}", specs.display())))?;
    let mut w = Workers {
        exe: std::env::current_exe().map_err(|er| TaskError::failure(format!("cannot find this binary: {er}")))?,
        url: url.to_string(),
        world: dir.join("takeover-world"),
        kids: Vec::new(),
    };
    w.spawn()?;
    w.spawn()?;
    let tag = format!("{}-{}", std::process::id(), now_ms());
    let mut ms = Vec::new();
    for k in 0..kills {
        let id = format!("takeover-{tag}-{k}");
        let spec = specs.join(format!("{id}.toml"));
        std::fs::write(&spec, takeover_spec(&id))
            .map_err(|er| TaskError::failure(format!("{}: {er}", spec.display())))?;
        let out = Command::new(&w.exe)
            .args(["task", "submit"])
            .arg(&spec)
            .args(["--db", url, "--world"])
            .arg(&w.world)
            .output()
            .map_err(|er| TaskError::failure(format!("cannot run `task submit`: {er}")))?;
        if !out.status.success() {
            return Err(TaskError::failure(format!("task submit: {}", String::from_utf8_lossy(&out.stderr))));
        }
        // the holder has made two durable model steps
        let t = Instant::now();
        let (pid, epoch) = loop {
            let n: i64 = c
                .query_one("SELECT count(*) FROM log_records WHERE task_id=$1 AND kind='model'", &[&id])
                .map_err(e("reading the log"))?
                .get(0);
            if n >= 2 {
                let r = c
                    .query_one("SELECT pid, epoch FROM leases WHERE task_id=$1", &[&id])
                    .map_err(e("reading the lease"))?;
                break (r.get::<_, i64>(0) as u32, r.get::<_, i64>(1));
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(TaskError::failure(format!("{id}: no worker ran it within 30 s")));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let Some(i) = w.kids.iter().position(|k| k.id() == pid) else {
            return Err(TaskError::failure(format!("{id}: held by pid {pid}, not one of our workers")));
        };
        let mut victim = w.kids.swap_remove(i);
        let t_kill = now_ms();
        let _ = victim.kill();
        let _ = victim.wait();
        // the first durable step of the next holder
        let t = Instant::now();
        let at: i64 = loop {
            let r = c
                .query_opt(
                    "SELECT at_ms FROM log_records WHERE task_id=$1 AND epoch > $2 AND kind <> 'lease' ORDER BY seq LIMIT 1",
                    &[&id, &epoch],
                )
                .map_err(e("reading the log"))?;
            if let Some(r) = r {
                break r.get(0);
            }
            if t.elapsed() > Duration::from_secs(60) {
                return Err(TaskError::failure(format!("{id}: not taken over within 60 s")));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        ms.push((at - t_kill) as f64);
        // the replacement only now: started earlier, its first claim would race the idle worker's
        // poll and flatter the figure
        w.spawn()?;
        // wait for it to finish, so an idle worker is there for the next task
        let t = Instant::now();
        loop {
            let n: i64 = c
                .query_one("SELECT count(*) FROM log_records WHERE task_id=$1 AND kind='completed'", &[&id])
                .map_err(e("reading the log"))?
                .get(0);
            if n > 0 {
                break;
            }
            if t.elapsed() > Duration::from_secs(60) {
                return Err(TaskError::failure(format!("{id}: not completed within 60 s")));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    drop(w);
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    let mean = sorted.iter().sum::<f64>() / sorted.len().max(1) as f64;
    Ok(serde_json::json!({
        "kills": kills,
        "lease_ms": 5000,
        "poll_ms": 200,
        "case": "cross-host rule (holder's PostgreSQL session gone, advisory lock), same-host pid rule disabled",
        "takeover_ms_p50": percentile(&sorted, 50.0),
        "takeover_ms_p99": percentile(&sorted, 99.0),
        "takeover_ms_max": sorted.last().copied().unwrap_or(0.0),
        "takeover_ms_min": sorted.first().copied().unwrap_or(0.0),
        "takeover_ms_mean": round(mean),
    }))
}
