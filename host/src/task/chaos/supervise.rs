//! One iteration of a chaos run: starting runners as child processes, killing or pausing
//! them by plan, counting where each kill landed, answering reviews, until the task ends.

#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s.trim().to_string()
}

#[cfg(unix)]
pub(super) fn was_sigkilled(st: &ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    st.signal() == Some(9)
}

#[cfg(not(unix))]
pub(super) fn was_sigkilled(st: &ExitStatus) -> bool {
    // `Child::kill` is TerminateProcess, exit code 1
    st.code() == Some(1)
}

/// When to kill a runner.
#[derive(Debug, Clone, Copy)]
pub(super) enum KillPlan {
    /// Let it finish.
    Never,
    /// At this time after the start.
    After(Duration),
    /// Aimed at the window: once the tools' files have received `calls` more calls for the task
    /// than at the start, wait `extra` and kill.
    AfterCalls { calls: usize, extra: Duration },
}

/// Waits for the child, killing it (SIGKILL) as `plan` says unless it exits before. Returns its
/// status.
pub(super) fn wait_or_kill(
    child: &mut Child,
    started: Instant,
    plan: KillPlan,
    world: &mut World,
    id: &str,
    calls_before: usize,
) -> TaskResult<ExitStatus> {
    let io = |e: std::io::Error| TaskError::failure(format!("waiting for the runner: {e}"));
    let mut deadline = match plan {
        KillPlan::Never => return child.wait().map_err(io),
        KillPlan::After(d) => Some(started + d),
        KillPlan::AfterCalls { .. } => None,
    };
    loop {
        if let Some(st) = child.try_wait().map_err(io)? {
            return Ok(st);
        }
        let now = Instant::now();
        match (deadline, plan) {
            (Some(d), _) if now >= d => break,
            (Some(d), _) => std::thread::sleep((d - now).min(Duration::from_micros(500))),
            (None, KillPlan::AfterCalls { calls, extra }) => {
                // the tool has committed the call: the window is open from here on
                if calls_made(world, id)? >= calls_before + calls {
                    deadline = Some(Instant::now() + extra);
                } else {
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
            (None, _) => break,
        }
    }
    // SIGKILL on Unix; an error here means it already exited (wait tells which)
    let _ = child.kill();
    child.wait().map_err(io)
}

/// Where the kill landed, read from the log and the tools' files right after it.
pub(super) fn classify_kill(
    rep: &mut ChaosReport,
    after: Option<&TaskState>,
    world: &mut World,
    id: &str,
    before: &HashMap<(ToolFile, u16), usize>,
) -> TaskResult<()> {
    let Some(st) = after else {
        rep.kills_elsewhere += 1;
        return Ok(());
    };
    let Phase::InFlight { call, .. } = &st.phase else {
        rep.kills_elsewhere += 1;
        return Ok(());
    };
    let file = match call.tool.as_str() {
        "payment" => ToolFile::Payments,
        "send_email" => ToolFile::Emails,
        _ => {
            rep.kills_lookup_in_flight += 1;
            return Ok(());
        }
    };
    let now = per_step(world, id)?;
    let k = (file, st.step);
    if now.get(&k).copied().unwrap_or(0) > before.get(&k).copied().unwrap_or(0) {
        rep.window_kill(file);
    } else {
        rep.kills_intent_no_call += 1;
    }
    Ok(())
}

/// Payment and email steps from `from` on (the calls a run still makes, at least).
pub(super) fn effects_from(spec: &Spec, from: usize) -> usize {
    spec.steps.iter().skip(from).filter(|s| matches!(s.tool.as_deref(), Some("payment" | "send_email"))).count()
}

/// How fast the runners make progress, killed or not: wall time per step over all runs so far
/// (start-up included), to scale the kill delays to the time a run still needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    pub(super) ms: f64,
    pub(super) steps: f64,
}

impl Pace {
    fn per_step_ms(&self) -> f64 {
        self.ms / self.steps.max(1.0)
    }
    fn add(&mut self, ms: f64, steps: f64) {
        self.ms += ms;
        self.steps += steps.max(0.0);
    }
}

/// Runs one iteration: the task `id` until it completes (or fails), killing and reviewing.
#[allow(clippy::too_many_arguments)]
pub(super) fn iteration(
    rep: &mut ChaosReport,
    store: &mut Slot,
    ctx: &Ctx,
    world: &mut World,
    opts: &ChaosOpts,
    i: u32,
    pace: &mut Pace,
) -> TaskResult<()> {
    let id = format!("chaos-{}-{i}", opts.seed);
    let mut rng = Draws::new(opts.seed.wrapping_mul(0xD134_2543_DE82_EF95) ^ (u64::from(i) << 1 | 1));
    let spec_text = chaos_spec(&id, opts.steps, &mut rng);
    let spec_path = ctx.specs.join(format!("{id}.toml"));
    std::fs::write(&spec_path, &spec_text)
        .map_err(|e| TaskError::failure(format!("{}: cannot write the spec: {e}", spec_path.display())))?;
    let spec = Spec::parse(&spec_text).map_err(|e| TaskError::failure(format!("generated spec {id}: {e}")))?;
    let steps = f64::from(opts.steps);
    let mut kills_here = 0u32;
    let mut st = task_state(store, ctx, &id)?;
    for _attempt in 0..(opts.max_kills + 50) {
        let done_before = st.as_ref().map_or(0.0, |s| f64::from(s.step));
        let before = per_step(world, &id)?;
        let calls_before = before.values().sum::<usize>();
        if kills_here < opts.max_kills && rng.below(6) == 0 {
            let left = effects_from(&spec, done_before as usize).max(1) as u64;
            let steps_left = (steps - done_before).max(1.0) as u64;
            let at = match rng.below(10) {
                0..4 => format!("calling:{}", 1 + rng.below(left)),
                4..7 => format!("before-tool:{}", 1 + rng.below(left)),
                _ => format!("after-commit:{}", 1 + rng.below(steps_left)),
            };
            if pause_then_takeover(rep, store, ctx, world, &id, &spec_path, &at)? {
                return Ok(());
            }
            kills_here += 1;
            st = task_state(store, ctx, &id)?;
            continue;
        }
        let plan = if kills_here >= opts.max_kills {
            KillPlan::Never
        } else if rng.below(2) == 0 {
            // aimed: after the k-th call a payment or email tool commits in this run, within
            // the time its result needs to reach the log (tool delay, next model call, commit)
            let left = effects_from(&spec, done_before as usize);
            let extra_us = (2 * opts.step_delay_ms + 4) * 1000;
            KillPlan::AfterCalls {
                calls: 1 + rng.below(left.max(1) as u64) as usize,
                extra: Duration::from_micros(rng.below(extra_us)),
            }
        } else {
            // uniform over the time the remaining steps are expected to take, +25 %
            let horizon_us = pace.per_step_ms() * 1000.0 * (steps - done_before).max(1.0) * 1.25;
            KillPlan::After(Duration::from_micros(rng.below((horizon_us as u64).max(1000))))
        };
        let started = Instant::now();
        let mut child = ctx.spawn_run(&spec_path, None)?;
        rep.runs += 1;
        let status = wait_or_kill(&mut child, started, plan, world, &id, calls_before)?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let err = stderr_of(&mut child);
        st = task_state(store, ctx, &id)?;
        pace.add(ms, st.as_ref().map_or(0.0, |s| f64::from(s.step)) - done_before);
        if was_sigkilled(&status) {
            rep.kills += 1;
            rep.kills_aimed += u64::from(matches!(plan, KillPlan::AfterCalls { .. }));
            kills_here += 1;
            classify_kill(rep, st.as_ref(), world, &id, &before)?;
            continue;
        }
        match status.code() {
            Some(0) => return Ok(()),
            Some(EXIT_NEEDS_REVIEW) => review(rep, store, ctx, world, &id)?,
            _ if ctx.pg && server_down(&err) => {
                rep.server_aborts += 1;
                wait_for_server(ctx);
            }
            _ => {
                rep.errors += 1;
                rep.false_corruption += u64::from(says_corruption(&err));
                rep.problem(format!("{id}: runner exited with {status}: {err}"));
                return Ok(());
            }
        }
    }
    rep.errors += 1;
    rep.problem(format!("{id}: not finished after {} runs", opts.max_kills + 50));
    Ok(())
}

/// Starts a runner that parks itself at `at` (`BROKERLAB_PAUSE_AT`), waits for its lease to
/// expire, lets other runners take the task over and run it to its end, then wakes the parked
/// runner and checks it stops without acting. Returns true when the task is finished; false when
/// the runner ended before reaching the point (the caller goes on as after any start).
#[allow(clippy::too_many_arguments)]
pub(super) fn pause_then_takeover(
    rep: &mut ChaosReport,
    store: &mut Slot,
    ctx: &Ctx,
    world: &mut World,
    id: &str,
    spec: &Path,
    at: &str,
) -> TaskResult<bool> {
    let io = |e: std::io::Error| TaskError::failure(format!("waiting for the runner: {e}"));
    let mut first = ctx.spawn_run(spec, Some(at))?;
    rep.runs += 1;
    let pid = first.id();
    // parked, or ended before the point
    loop {
        if let Some(status) = first.try_wait().map_err(io)? {
            let err = stderr_of(&mut first);
            return match status.code() {
                Some(0) => Ok(true),
                Some(EXIT_NEEDS_REVIEW) => {
                    review(rep, store, ctx, world, id)?;
                    Ok(false)
                }
                _ if ctx.pg && server_down(&err) => {
                    rep.server_aborts += 1;
                    wait_for_server(ctx);
                    Ok(false)
                }
                _ => {
                    rep.errors += 1;
                    rep.false_corruption += u64::from(says_corruption(&err));
                    rep.problem(format!("{id}: runner (pause at {at}) exited with {status}: {err}"));
                    Ok(true)
                }
            };
        }
        if crate::sys::child_is_stopped(pid) {
            break;
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    rep.pauses += 1;
    match at.split(':').next() {
        Some("calling") => rep.pauses_calling += 1,
        Some("before-tool") => rep.pauses_before_tool += 1,
        _ => rep.pauses_after_commit += 1,
    }
    std::thread::sleep(Duration::from_millis(ctx.lease_ms + 20));
    // the takeover: run to the end, answering reviews; a lease that still looks live is waited out
    let mut finished = false;
    for _ in 0..40 {
        let mut c = ctx.spawn_run(spec, None)?;
        rep.runs += 1;
        let status = c.wait().map_err(io)?;
        let err = stderr_of(&mut c);
        match status.code() {
            Some(0) => {
                finished = true;
                break;
            }
            Some(EXIT_NEEDS_REVIEW) => review(rep, store, ctx, world, id)?,
            Some(1) if err.contains("already being run") => std::thread::sleep(Duration::from_millis(50)),
            _ if ctx.pg && server_down(&err) => {
                rep.server_aborts += 1;
                wait_for_server(ctx);
            }
            _ => {
                rep.errors += 1;
                rep.false_corruption += u64::from(says_corruption(&err));
                rep.problem(format!("{id}: takeover runner exited with {status}: {err}"));
                break;
            }
        }
    }
    if !finished {
        rep.errors += 1;
        rep.problem(format!("{id}: the takeover after a pause at {at} did not finish"));
    }
    if !crate::sys::stop_or_continue(pid, false) {
        rep.problem(format!("{id}: SIGCONT to {pid} failed"));
    }
    let status = first.wait().map_err(io)?;
    let err = stderr_of(&mut first);
    match status.code() {
        Some(1) if err.contains("fenced") => rep.paused_fenced += 1,
        Some(0 | EXIT_NEEDS_REVIEW) => rep.paused_idle += 1,
        _ if ctx.pg && server_down(&err) => rep.paused_conn_lost += 1,
        _ => {
            rep.errors += 1;
            rep.false_corruption += u64::from(says_corruption(&err));
            rep.problem(format!("{id}: the paused runner (at {at}) exited with {status} on waking: {err}"));
        }
    }
    Ok(true)
}

/// `read` on the tools' records; with the records in PostgreSQL, a failure (the server
/// restarting) is retried for up to 60 s, as the log's reads are.
pub(super) fn world_retry<T>(world: &mut World, mut read: impl FnMut(&mut World) -> TaskResult<T>) -> TaskResult<T> {
    let t = Instant::now();
    loop {
        match read(world) {
            Err(_) if world.is_pg() && t.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

/// A runner's complaint that the log is corrupt: the run never corrupts a log, so on a healthy
/// task this is a false alarm (`false_corruption`).
pub(super) fn says_corruption(err: &str) -> bool {
    err.contains("log corruption")
}

/// Reviews the paused step as a human would, from the email tool's own file. A fork's step whose
/// intent it copied from its parent is the parent's call, which the run finishes: marked done
/// (the fork rule: a fork never sends its parent's call).
pub(super) fn review(
    rep: &mut ChaosReport,
    store: &mut Slot,
    ctx: &Ctx,
    world: &mut World,
    id: &str,
) -> TaskResult<()> {
    let Some(st) = task_state(store, ctx, id)? else {
        return Err(TaskError::failure(format!("{id}: paused for review but has no log")));
    };
    let Phase::Review { .. } = st.phase else {
        return Err(TaskError::failure(format!("{id}: exit 3 but no step waits for review")));
    };
    let parents_call = match store.as_deref() {
        Some(s) => copied_intent_steps(&s.records(id)?).contains(&st.step),
        None => false,
    };
    let sent = parents_call
        || world_retry(world, |w| w.calls(ToolFile::Emails, id))?.iter().any(|c| c.step == st.step && c.applied);
    let decision = if sent { "--mark-done" } else { "--retry" };
    if sent {
        rep.reviews_mark_done += 1;
    } else {
        rep.reviews_retry += 1;
    }
    let mut out;
    let mut tries = 0;
    loop {
        let mut c = ctx.cmd();
        c.arg("task").arg("review").arg(id).arg("--step").arg(st.step.to_string()).arg(decision);
        c.arg("--db").arg(&ctx.db);
        out = c.output().map_err(|e| TaskError::failure(format!("cannot start `task review`: {e}")))?;
        tries += 1;
        let err = String::from_utf8_lossy(&out.stderr);
        // a runner woke (or was taken over) under the reviewer: the log moved on, or a row is
        // locked for a moment; try again
        if !out.status.success() && tries <= 20 && (err.contains("the log changed") || err.contains("locked by")) {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if out.status.success() || !ctx.pg || tries > 20 || !server_down(&err) {
            break;
        }
        rep.server_aborts += 1;
        wait_for_server(ctx);
    }
    if !out.status.success() {
        rep.errors += 1;
        rep.problem(format!(
            "{id}: `task review --step {} {decision}` exited with {}: {}",
            st.step,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}
