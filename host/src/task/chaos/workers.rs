//! `task chaos --db postgres://... --workers K`: the chaos run against real `task worker`
//! processes instead of one `task run` per task.
//!
//! All the run's tasks are submitted up front; K workers (`task worker --concurrency 1`, each its
//! own process, their stderr kept in `DIR/workers/`) claim and run them. Every so often (drawn
//! from the seed) one worker holding a live lease is chosen and
//!
//! * killed with SIGKILL, at once (uniform) or aimed at the tool window: once the tools' files or
//!   tables gain a call for its task, after a drawn delay up to about the time the result needs
//!   to reach the log; the kill is classified afterwards from the log and the tools' records (a
//!   call with the victim's epoch for the step in flight: a window kill), and the worker is
//!   started again; or
//! * parked with SIGSTOP (about one choice in six) until its lease has expired and another worker
//!   took the task over (a higher epoch in the lease row) or finished it, then woken with
//!   SIGCONT: its next commit is fenced by the log, its next call by the tool's token or by the
//!   margin rule; or
//! * its **sessions dropped** (one choice in six): `pg_terminate_backend` of every session of
//!   the worker process (found by their `application_name`), half the time with the worker parked
//!   first; the process lives on. A dropped session is not a dead holder (the dropped-session rule): another worker
//!   takes the task over at once only because every call the holder could still make is fenced
//!   (the run's tools check tokens); or
//! * its task **forked at an open intent** while the holder runs (one choice in six): once the
//!   log of a task held by a running worker ends with an email's intent, `task fork ID --at SEQ`
//!   is run; it must be refused while the holder can still send it (the fork rule). A fork made
//!   anyway (the holder let go meanwhile) is queued for the workers, its review of the copied
//!   email answered "done" (the parent's call, which the run finishes), and checked with its
//!   parent: the fork never applies the parent's call.
//!
//! A task the workers paused for review (they take it out of the queue) is reviewed from the
//! email tool's records as a human would and queued again. With `--pg-stop-cmd/--pg-start-cmd`
//! the server is restarted as in the single-runner mode; the workers reconnect on their own. At
//! the end the workers get SIGTERM and must exit 0, and every task is checked for exactly once.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use brokerlab_core::runner::{End, Event, Phase};

use super::super::backend::NewTask;
use super::super::exec::new_task;
use super::super::ident::host_id;
use super::super::pg::PgStore;
use super::super::spec::Spec;
use super::super::world::{ToolFile, World};
use super::{
    ChaosOpts, ChaosReport, Ctx, Draws, Slot, calls_made, chaos_spec, review, says_corruption, task_state,
    wait_for_server,
};
use crate::task::error::SERVER_GONE_NOTE;
use crate::task::error::{TaskError, TaskResult};

/// One worker process.
struct Worker {
    child: Child,
    /// Parked: since when, the task it held, its epoch.
    stopped: Option<(Instant, String, u64)>,
}

/// What the run keeps about the workers.
struct Pool {
    url: String,
    ctx_args: Vec<String>,
    exe: PathBuf,
    logs: PathBuf,
    next_log: u32,
    ws: Vec<Worker>,
}

impl Pool {
    /// `k` workers on the log at `url`, their stderr in DIR/workers.
    fn start(rep: &mut ChaosReport, ctx: &Ctx, url: &str, k: u32) -> TaskResult<Pool> {
        let logs = PathBuf::from(&rep.dir).join("workers");
        std::fs::create_dir_all(&logs).map_err(|e| TaskError::failure(format!("{}: {e}", logs.display())))?;
        let mut pool = Pool {
            url: url.to_string(),
            ctx_args: vec![
                "--world".into(),
                ctx.world.to_string_lossy().into_owned(),
                "--step-delay-ms".into(),
                ctx.step_delay_ms.to_string(),
                "--lease-ms".into(),
                ctx.lease_ms.to_string(),
            ],
            exe: ctx.exe.clone(),
            logs,
            next_log: 0,
            ws: Vec::new(),
        };
        for _ in 0..k {
            let w = pool.spawn()?;
            pool.ws.push(w);
            rep.runs += 1;
        }
        Ok(pool)
    }

    fn spawn(&mut self) -> TaskResult<Worker> {
        let log = self.logs.join(format!("worker-{}.log", self.next_log));
        self.next_log += 1;
        let f = std::fs::File::create(&log)
            .map_err(|e| TaskError::failure(format!("{}: cannot create: {e}", log.display())))?;
        let mut c = Command::new(&self.exe);
        c.env_remove("BROKERLAB_CRASH_AT").env_remove("BROKERLAB_STEP_DELAY_MS").env_remove("BROKERLAB_LEASE_MS");
        c.env_remove("BROKERLAB_PAUSE_AT").env_remove("BROKERLAB_UNFENCED_TOOLS");
        c.args(["task", "worker", "--db", &self.url, "--poll-ms", "20"]).args(&self.ctx_args);
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(f));
        let child =
            c.spawn().map_err(|e| TaskError::failure(format!("{}: cannot start a worker: {e}", self.exe.display())))?;
        Ok(Worker { child, stopped: None })
    }
}

impl Drop for Pool {
    /// Workers still running when the run stops on an error are woken and killed, not left
    /// behind (after a clean run they have all exited).
    fn drop(&mut self) {
        for w in &mut self.ws {
            if let Ok(None) = w.child.try_wait() {
                crate::sys::stop_or_continue(w.child.id(), false);
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
        }
    }
}

/// A live lease held by one of our running (not parked) workers: (worker index, task, epoch).
fn held(pool: &Pool, leases: &[(String, u64, String, u32)], me: &str) -> Vec<(usize, String, u64)> {
    leases
        .iter()
        .filter(|(_, _, host, _)| host == me)
        .filter_map(|(task, epoch, _, pid)| {
            let i = pool.ws.iter().position(|w| w.child.id() == *pid && w.stopped.is_none())?;
            Some((i, task.clone(), *epoch))
        })
        .collect()
}

/// The PostgreSQL store of the parent, (re)opened as needed; `None` while the server is down.
fn pg<'a>(slot: &'a mut Option<PgStore>, url: &str) -> Option<&'a PgStore> {
    if slot.is_none() {
        *slot = PgStore::open(url, false).ok();
    }
    slot.as_ref()
}

/// Classifies a kill of the worker that held `task` at `epoch`, from the log and the tools'
/// records: a call with the victim's epoch for the step in flight is a window kill.
fn classify(rep: &mut ChaosReport, store: &mut Slot, ctx: &Ctx, world: &mut World, task: &str, epoch: u64) {
    let Ok(Some(st)) = task_state(store, ctx, task) else {
        rep.kills_elsewhere += 1;
        return;
    };
    let Phase::InFlight { call, .. } = &st.phase else {
        rep.kills_elsewhere += 1;
        return;
    };
    let Some(f) = ToolFile::of_tool(&call.tool) else {
        rep.kills_lookup_in_flight += 1;
        return;
    };
    let seen = world.calls(f, task).map(|cs| cs.iter().any(|c| c.step == st.step && c.epoch == epoch));
    if seen.unwrap_or(false) {
        rep.window_kill(f);
    } else {
        rep.kills_intent_no_call += 1;
    }
}

/// Sends SIGTERM (through kill(1): this crate has no signal code of its own outside `sys`).
fn terminate(pid: u32) {
    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).stderr(Stdio::null()).status();
}

/// The `--workers` run. Fills `rep`; the tasks are checked by the caller.
pub(super) fn run(
    rep: &mut ChaosReport,
    store: &mut Slot,
    ctx: &Ctx,
    world: &mut World,
    opts: &ChaosOpts,
    k: u32,
) -> TaskResult<Vec<String>> {
    let url = ctx.db.to_string_lossy().into_owned();
    let mut parent: Option<PgStore> = PgStore::open(&url, false).ok();
    let tasks = submit_all(&mut parent, &url, ctx, opts)?;
    let mut pool = Pool::start(rep, ctx, &url, k)?;
    let me = host_id();
    let mut rng = Draws::new(opts.seed ^ 0x0057_0E4C);
    let mut done: HashSet<String> = HashSet::new();
    let mut kills_of: HashMap<String, u32> = HashMap::new();
    // forks made by the live-fork fault: run by the workers too, checked with their parents
    let mut forks: Vec<String> = Vec::new();
    // a task's expected time, to space the actions
    let task_ms = u64::from(opts.steps) * (2 * ctx.step_delay_ms + 4);
    let mut next_action = Instant::now() + Duration::from_millis(20 + rng.below(task_ms.max(2) / 2));
    let mut next_scan = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(120 + 3 * u64::from(opts.iterations));
    while done.len() < tasks.len() + forks.len() {
        if Instant::now() > deadline {
            let all = tasks.len() + forks.len();
            rep.errors += 1;
            rep.problem(format!("{} of {all} tasks not finished in time", all - done.len()));
            break;
        }
        restart_exited(rep, &mut pool)?;
        // parked workers whose task was taken over (or finished), or that waited long enough
        let leases = pg(&mut parent, &url).map(|s| s.live_leases());
        let leases = match leases {
            Some(Ok(l)) => l,
            Some(Err(_)) | None => {
                parent = None;
                Vec::new()
            }
        };
        wake_parked(rep, &mut pool, &leases, &done, ctx);
        // finished tasks, and tasks paused for review (the workers took them out of the queue)
        if Instant::now() >= next_scan {
            next_scan = Instant::now() + Duration::from_millis(100);
            scan(rep, store, ctx, world, (&mut parent, &url), (&tasks, &forks), &mut done)?;
        }
        if Instant::now() < next_action {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        next_action = Instant::now() + Duration::from_millis(20 + rng.below(task_ms.max(2) / 2));
        let cands: Vec<(usize, String, u64)> = held(&pool, &leases, &me)
            .into_iter()
            .filter(|(_, t, _)| kills_of.get(t).copied().unwrap_or(0) < opts.max_kills && !done.contains(t))
            .collect();
        if cands.is_empty() {
            continue;
        }
        let (i, task, epoch) = cands[rng.below(cands.len() as u64) as usize].clone();
        *kills_of.entry(task.clone()).or_insert(0) += 1;
        let fault = rng.below(12);
        if fault < 2 && pool.ws.iter().all(|w| w.stopped.is_none()) {
            if crate::sys::stop_or_continue(pool.ws[i].child.id(), true) {
                pool.ws[i].stopped = Some((Instant::now(), task, epoch));
                rep.pauses += 1;
            }
            continue;
        }
        if (2..4).contains(&fault) {
            // drop the holder's sessions; half the time with the holder parked first
            let pid = pool.ws[i].child.id();
            let park = rng.below(2) == 0 && pool.ws.iter().all(|w| w.stopped.is_none());
            if park && crate::sys::stop_or_continue(pid, true) {
                pool.ws[i].stopped = Some((Instant::now(), task.clone(), epoch));
                rep.session_drops_parked += 1;
            }
            match pg(&mut parent, &url).map(|s| s.terminate_sessions_of(pid)) {
                Some(Ok(n)) if n > 0 => rep.session_drops += 1,
                Some(Ok(_)) => {}
                Some(Err(_)) | None => parent = None,
            }
            continue;
        }
        if (4..6).contains(&fault) {
            live_fork(rep, store, ctx, &cands, task_ms, &mut forks)?;
            continue;
        }
        let aimed = rng.below(2) == 0;
        if aimed {
            if !new_call_within(world, &task, task_ms) {
                continue;
            }
            std::thread::sleep(Duration::from_micros(rng.below((2 * ctx.step_delay_ms + 4) * 1000)));
        }
        let w = &mut pool.ws[i];
        let _ = w.child.kill();
        let _ = w.child.wait();
        rep.kills += 1;
        rep.kills_aimed += u64::from(aimed);
        classify(rep, store, ctx, world, &task, epoch);
        pool.ws[i] = pool.spawn()?;
        rep.runs += 1;
    }
    // the end: wake the parked, ask every worker to stop; each must exit 0
    stop_all(rep, &mut pool);
    scan_logs(rep, &pool.logs);
    if done.len() < tasks.len() && ctx.pg {
        wait_for_server(ctx);
    }
    Ok(tasks.into_iter().map(|(id, _)| id).chain(forks).collect())
}

/// Workers that ended on their own: each is a failure, and is started again.
fn restart_exited(rep: &mut ChaosReport, pool: &mut Pool) -> TaskResult<()> {
    for i in 0..pool.ws.len() {
        if let Ok(Some(st)) = pool.ws[i].child.try_wait() {
            rep.errors += 1;
            rep.problem(format!("worker {} exited on its own with {st}", pool.ws[i].child.id()));
            pool.ws[i] = pool.spawn()?;
            rep.runs += 1;
        }
    }
    Ok(())
}

/// Wakes the parked workers whose task was taken over (a higher epoch in `leases`) or finished,
/// once their lease has run out, and any parked for 10 s.
fn wake_parked(
    rep: &mut ChaosReport,
    pool: &mut Pool,
    leases: &[(String, u64, String, u32)],
    done: &HashSet<String>,
    ctx: &Ctx,
) {
    for w in pool.ws.iter_mut() {
        let Some((since, task, epoch)) = w.stopped.clone() else { continue };
        let moved = done.contains(&task) || leases.iter().any(|(t, e, _, _)| *t == task && *e > epoch);
        let waited = since.elapsed();
        if (waited > Duration::from_millis(ctx.lease_ms + 50) && moved) || waited > Duration::from_secs(10) {
            if !crate::sys::stop_or_continue(w.child.id(), false) {
                rep.problem(format!("SIGCONT to worker {} failed", w.child.id()));
            }
            w.stopped = None;
        }
    }
}

/// An aimed kill's moment: true once the tools have a new call for `task`, within the time its
/// result needs (`task_ms`, at least 50 ms); false when none came.
fn new_call_within(world: &mut World, task: &str, task_ms: u64) -> bool {
    let before = calls_made(world, task).unwrap_or(0);
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(task_ms.max(50)) {
        if calls_made(world, task).unwrap_or(0) > before {
            return true;
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    false
}

/// The tasks of the run, each submitted before the first worker starts.
fn submit_all(
    parent: &mut Option<PgStore>,
    url: &str,
    ctx: &Ctx,
    opts: &ChaosOpts,
) -> TaskResult<Vec<(String, NewTask)>> {
    let mut tasks: Vec<(String, NewTask)> = Vec::new();
    for i in 0..opts.iterations {
        let id = format!("chaos-{}-{i}", opts.seed);
        let mut rng = Draws::new(opts.seed.wrapping_mul(0xD134_2543_DE82_EF95) ^ (u64::from(i) << 1 | 1));
        let text = chaos_spec(&id, opts.steps, &mut rng);
        let spec = Spec::parse(&text).map_err(|e| TaskError::failure(format!("generated spec {id}: {e}")))?;
        let new = new_task(&spec, &id, &ctx.world)?;
        let s = pg(parent, url).ok_or_else(|| TaskError::failure(format!("{url}: cannot connect")))?;
        s.submit(&id, &new)?;
        tasks.push((id, new));
    }
    Ok(tasks)
}

/// One scan of the tasks (and forks) that left the queue: finished ones go to `done` (an end
/// other than completed is an error), one paused for review is reviewed and queued again, any
/// other is queued again. A lost connection to the server is dropped (`parent` None), to be
/// opened again at the next use.
fn scan(
    rep: &mut ChaosReport,
    store: &mut Slot,
    ctx: &Ctx,
    world: &mut World,
    (parent, url): (&mut Option<PgStore>, &str),
    (tasks, forks): (&[(String, NewTask)], &[String]),
    done: &mut HashSet<String>,
) -> TaskResult<()> {
    let queued = pg(parent, url).map(|s| s.queued_ids());
    if let Some(Ok(queued)) = queued {
        let queued: HashSet<String> = queued.into_iter().collect();
        for (id, new) in tasks {
            if done.contains(id) || queued.contains(id) {
                continue;
            }
            let Some(st) = task_state(store, ctx, id)? else { continue };
            if st.end.is_some() {
                if st.end != Some(End::Completed) {
                    rep.errors += 1;
                    rep.problem(format!("{id}: ended {:?}", st.end));
                }
                done.insert(id.clone());
            } else if let Phase::Review { .. } = st.phase {
                review(rep, store, ctx, world, id)?;
                if let Some(s) = pg(parent, url)
                    && s.submit(id, new).is_err()
                {
                    *parent = None;
                }
            } else if let Some(s) = pg(parent, url) {
                // left the queue otherwise (suspended by SIGTERM is kept queued): queue again
                if s.submit(id, new).is_err() {
                    *parent = None;
                }
            }
        }
        for id in forks {
            if done.contains(id) || queued.contains(id) {
                continue;
            }
            let Some(st) = task_state(store, ctx, id)? else { continue };
            if st.end.is_some() {
                done.insert(id.clone());
                continue;
            }
            if let Phase::Review { .. } = st.phase {
                review(rep, store, ctx, world, id)?;
            }
            if let Some(s) = pg(parent, url)
                && s.enqueue(id).is_err()
            {
                *parent = None;
            }
        }
    } else {
        *parent = None;
    }
    Ok(())
}

/// Wakes every parked worker and sends each SIGTERM: each must exit 0 within 30 s (an error
/// otherwise, and then it is killed).
fn stop_all(rep: &mut ChaosReport, pool: &mut Pool) {
    for w in pool.ws.iter_mut() {
        if w.stopped.take().is_some() {
            crate::sys::stop_or_continue(w.child.id(), false);
        }
        terminate(w.child.id());
    }
    for w in pool.ws.iter_mut() {
        let t = Instant::now();
        loop {
            match w.child.try_wait() {
                Ok(Some(st)) if st.success() => break,
                Ok(Some(st)) => {
                    rep.errors += 1;
                    rep.problem(format!("worker {} exited with {st} after SIGTERM", w.child.id()));
                    break;
                }
                Ok(None) if t.elapsed() > Duration::from_secs(30) => {
                    let _ = w.child.kill();
                    let _ = w.child.wait();
                    rep.errors += 1;
                    rep.problem(format!("worker {} did not stop within 30 s of SIGTERM", w.child.id()));
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

/// The fork fault: waits (up to `task_ms`) until the log of one of the `held` tasks ends with an
/// email's intent, then runs `task fork ID --at SEQ` cut at it while its holder runs. Refused is
/// what the fork rule says (the parent's runner can still send it); a fork made anyway (the
/// holder let go meanwhile) joins `forks`.
fn live_fork(
    rep: &mut ChaosReport,
    store: &mut Slot,
    ctx: &Ctx,
    held: &[(usize, String, u64)],
    task_ms: u64,
    forks: &mut Vec<String>,
) -> TaskResult<()> {
    let t = Instant::now();
    let mut pick = None;
    'watch: while t.elapsed() < Duration::from_millis(task_ms.max(50)) {
        for (_, task, _) in held {
            let Some(s) = store.as_deref() else { break 'watch };
            let Ok(recs) = s.records(task) else { continue };
            let Some(last) = recs.last() else { continue };
            if let Event::ToolIntent { tool, .. } = &last.event
                && tool.as_str() == "send_email"
            {
                pick = Some((task.clone(), last.seq));
                break 'watch;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let Some((task, seq)) = pick else { return Ok(()) };
    rep.live_forks += 1;
    let mut c = ctx.cmd();
    c.args(["task", "fork", &task, "--at", &seq.to_string(), "--db"]).arg(&ctx.db);
    c.arg("--world").arg(&ctx.world).args(["--step-delay-ms", &ctx.step_delay_ms.to_string()]);
    c.args(["--lease-ms", &ctx.lease_ms.to_string()]).env("BROKERLAB_BUSY_MS", "100").stdout(Stdio::piped());
    let out = c.output().map_err(|e| TaskError::failure(format!("cannot start `task fork`: {e}")))?;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    match out.status.code() {
        Some(1) if stderr.contains("cannot fork") => rep.live_forks_refused += 1,
        Some(0 | 3) => {
            let id = stdout.lines().find(|l| l.contains("forked from")).and_then(|l| l.split_whitespace().nth(1));
            match id {
                Some(id) => {
                    forks.push(id.trim_end_matches(':').to_string());
                    rep.live_forks_made += 1;
                }
                None => {
                    rep.errors += 1;
                    rep.problem(format!("{task}: `task fork --at {seq}` said nothing of a fork: {stdout}"));
                }
            }
        }
        _ if stderr.contains(SERVER_GONE_NOTE) => rep.server_aborts += 1,
        _ => {
            rep.errors += 1;
            rep.false_corruption += u64::from(says_corruption(&stderr));
            rep.problem(format!("{task}: `task fork --at {seq}` exited with {}: {}", out.status, stderr.trim()));
        }
    }
    Ok(())
}

/// What the workers wrote to stderr: fenced stops and reconnections are counted; any other
/// complaint about a task is an error, except the expected ones (another runner holds the
/// task, the log moved on under a dead holder's last commit, the server went away, a row lock
/// held past `BROKERLAB_BUSY_MS` by a worker parked with SIGSTOP inside a transaction: its task
/// stays queued and is run once the lock is free).
fn scan_logs(rep: &mut ChaosReport, dir: &std::path::Path) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for line in text.lines() {
            if says_corruption(line) {
                rep.false_corruption += 1;
                rep.errors += 1;
                rep.problem(format!("{}: {line}", e.path().display()));
            } else if line.contains("fenced") {
                rep.worker_fenced_stops += 1;
            } else if line.contains("reconnected") {
                rep.worker_reconnects += 1;
            } else if line.contains("already being run by")
                || line.contains("may still be run by")
                || line.contains("locked by another runner")
                || line.contains("the log changed")
                || line.contains("unreachable, retrying")
                || line.contains(SERVER_GONE_NOTE)
                || line.contains("crash injected")
            {
            } else if line.starts_with("brokerlab:") {
                rep.errors += 1;
                rep.problem(format!("{}: {line}", e.path().display()));
            }
        }
    }
}
