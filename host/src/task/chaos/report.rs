//! The chaos run's counts and how they are printed (text, JSON, progress line).

#[allow(clippy::wildcard_imports)]
use super::*;

/// Totals of a chaos run (the `--json` object).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChaosReport {
    /// Tasks run.
    pub iterations: u32,
    /// Steps per task.
    pub steps: u16,
    /// Seed.
    pub seed: u64,
    /// Runner processes started (first starts and restarts).
    pub runs: u64,
    /// SIGKILLs that stopped a runner.
    pub kills: u64,
    /// Kills of runs aimed at the window (killed shortly after a tool's file got a call); the
    /// others are at uniform delays.
    pub kills_aimed: u64,
    /// Kills in the window: the tool's file got the call, the log has no result (counted exactly).
    pub window_kills: u64,
    /// Of which the payment tool.
    pub window_kills_payment: u64,
    /// Of which the email tool.
    pub window_kills_email: u64,
    /// Kills after an intent was durable but before the tool's file had the call.
    pub kills_intent_no_call: u64,
    /// Kills with a lookup in flight (a lookup keeps no file: not counted as window kills).
    pub kills_lookup_in_flight: u64,
    /// Kills anywhere else (start-up, model calls, commits between steps, before the task existed).
    pub kills_elsewhere: u64,
    /// Payment calls received again and deduplicated by key (replays after a kill).
    pub deduplicated: u64,
    /// Runners parked with SIGSTOP past their lease while a second runner took over.
    pub pauses: u64,
    /// Of which parked right before a tool call left (after the margin check).
    pub pauses_calling: u64,
    /// Of which parked after a tool's intent, before the margin check.
    pub pauses_before_tool: u64,
    /// Of which parked after a commit.
    pub pauses_after_commit: u64,
    /// Paused runners that, on waking, stopped with "fenced" (exit 1) without acting.
    pub paused_fenced: u64,
    /// Paused runners that found nothing left to do on waking (exit 0 or 3).
    pub paused_idle: u64,
    /// Calls the tools refused because they carried an old fencing token (from their own files).
    pub fenced_calls: u64,
    /// Non-idempotent steps sent to review (`needs-review` records).
    pub needs_review: u64,
    /// Reviews recorded `mark-done` (the email tool's file showed the call).
    pub reviews_mark_done: u64,
    /// Reviews recorded `retry` (it showed none).
    pub reviews_retry: u64,
    /// Side effects applied more than once (must be 0).
    pub duplicates: u64,
    /// Steps missing (must be 0).
    pub lost: u64,
    /// Runner processes that failed otherwise (exit status other than 0, 3 or SIGKILL; must be 0).
    pub errors: u64,
    /// The log's database: `sqlite` or `postgres`.
    pub backend: String,
    /// PostgreSQL server restarts during the run (stop, 0 to 5 s down, start).
    pub pg_restarts: u64,
    /// Total time from each stop command to the end of its start command, ms.
    pub pg_down_ms: u64,
    /// Runner (and review) processes that ended because the server was restarting (their
    /// session was cut, or they could not connect); each is started again.
    pub server_aborts: u64,
    /// Paused runners whose session was cut by a restart while they were parked: on waking
    /// they stopped at their first statement (their tool calls, if any, were fenced by the tools).
    pub paused_conn_lost: u64,
    /// `task worker` processes (0: one `task run` per task).
    pub workers: u32,
    /// Lines in the workers' stderr saying a run stopped fenced (a parked worker woke after a
    /// takeover, or a killed holder's successor was refused nothing: fenced stops only).
    pub worker_fenced_stops: u64,
    /// Lines in the workers' stderr saying a slot reconnected after the server went away.
    pub worker_reconnects: u64,
    /// Sessions of a worker holding a live lease ended with `pg_terminate_backend` (half of them
    /// with the worker parked by SIGSTOP first): the process lives on, its session does not
    /// (the dropped-session rule: a dropped session is not a dead holder).
    pub session_drops: u64,
    /// Of which the worker was parked first (and woken after a takeover or its lease).
    pub session_drops_parked: u64,
    /// `task fork ID --at SEQ` of a task whose holder was running, cut at its open email intent.
    pub live_forks: u64,
    /// Of which refused because the parent's runner could still make the call (the fork rule).
    pub live_forks_refused: u64,
    /// Of which made (the holder had let go meanwhile): the forks are run to their end and
    /// checked with their parents.
    pub live_forks_made: u64,
    /// "log corruption" reported by a runner, a worker or a fork on a healthy task: a false
    /// alarm (the run never corrupts a log; must be 0).
    pub false_corruption: u64,
    /// Where the tools' records were: `files` (DIR/world) or `postgres`.
    pub world: String,
    /// The tasks' tools (`builtin`, or `http` on the in-repo tool server).
    pub tools: ToolsMode,
    /// The tasks' model (`script`, or `openai` against the in-repo model server).
    pub model: ModelMode,
    /// Times the tool server was killed (SIGKILL) and restarted during the run (`--tools http`).
    pub tool_server_restarts: u64,
    /// Requests the tool server recorded (every attempt, from its own file; `--tools http`).
    pub served_requests: u64,
    /// Of which it refused before acting with an injected 429 or "in progress" 409.
    pub served_injected_refusals: u64,
    /// Of which it acted on and then answered 503, as if the answer were lost (the runner cannot
    /// know whether they acted).
    pub served_injected_lost_answers: u64,
    /// Of which were replays answered from the key's stored answer (`Idempotent-Replayed`).
    pub served_replays: u64,
    /// The children's step delay.
    pub step_delay_ms: u64,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// The first problems found (at most 20).
    pub problems: Vec<String>,
    /// No duplicate, no lost step, no error.
    pub ok: bool,
    /// Working directory (kept after a violation).
    pub dir: String,
}

impl ChaosReport {
    /// A kill that landed in the window of a call to the tool keeping `file`.
    pub(super) fn window_kill(&mut self, file: ToolFile) {
        self.window_kills += 1;
        if file == ToolFile::Payments {
            self.window_kills_payment += 1;
        } else {
            self.window_kills_email += 1;
        }
    }

    /// The tool server's own counts, from its file.
    pub(super) fn add_served(&mut self, file: &Path) -> TaskResult<()> {
        use crate::agent::serve::tools::{INJECTED, served_calls};
        for c in served_calls(file, None)? {
            self.served_requests += 1;
            let reason = c.reason.as_deref().unwrap_or("");
            if reason.starts_with(INJECTED) {
                if c.applied {
                    self.served_injected_lost_answers += 1;
                } else {
                    self.served_injected_refusals += 1;
                }
            }
            self.served_replays += u64::from(reason == "duplicate key");
        }
        Ok(())
    }

    pub(super) fn problem(&mut self, p: String) {
        if self.problems.len() < 20 {
            self.problems.push(p);
        }
    }
    pub(super) fn add_check(&mut self, c: TaskCheck) {
        self.duplicates += c.duplicates;
        self.lost += c.lost;
        self.deduplicated += c.deduplicated;
        self.fenced_calls += c.fenced_calls;
        self.needs_review += c.needs_review;
        for p in c.problems {
            self.problem(p);
        }
    }
}

pub(super) fn progress(on: bool, done: u32, rep: &ChaosReport, t: Instant) {
    if !on {
        return;
    }
    let total = rep.iterations.max(1);
    let w = 30usize;
    let fill = (done as usize * w) / total as usize;
    let mut e = std::io::stderr().lock();
    let _ = write!(
        e,
        "\r[{}{}] {done}/{total}  kills {}  window {}  reviews {}  dup {}  lost {}  {:.0}s ",
        "#".repeat(fill),
        ".".repeat(w - fill),
        rep.kills,
        rep.window_kills,
        rep.needs_review,
        rep.duplicates,
        rep.lost,
        t.elapsed().as_secs_f64()
    );
    if done == total {
        let _ = writeln!(e);
    }
    let _ = e.flush();
}

pub(super) fn print_text(rep: &ChaosReport) {
    say!(
        "task chaos: {} iterations of {} steps, seed {}, step delay {} ms, tools {:?}, model {:?}",
        rep.iterations,
        rep.steps,
        rep.seed,
        rep.step_delay_ms,
        rep.tools,
        rep.model
    );
    let pct = |n: u64| if rep.kills == 0 { 0.0 } else { 100.0 * n as f64 / rep.kills as f64 };
    say!(
        "  bookkeeping: what the run did (each kill and pause counted in one class: the classes add up by construction)"
    );
    say!("  runner processes started     {}", rep.runs);
    say!(
        "  SIGKILLs                     {} ({} aimed at the window, the rest at uniform delays)",
        rep.kills,
        rep.kills_aimed
    );
    say!(
        "    in the window              {} ({:.0} %; payment {}, email {}): the tool's file has the call, the log \
         no result",
        rep.window_kills,
        pct(rep.window_kills),
        rep.window_kills_payment,
        rep.window_kills_email
    );
    say!("    intent durable, no call    {} ({:.0} %)", rep.kills_intent_no_call, pct(rep.kills_intent_no_call));
    say!("    lookup in flight           {} ({:.0} %)", rep.kills_lookup_in_flight, pct(rep.kills_lookup_in_flight));
    say!("    elsewhere                  {} ({:.0} %)", rep.kills_elsewhere, pct(rep.kills_elsewhere));
    say!("  replays deduplicated by key  {}", rep.deduplicated);
    say!(
        "  pauses past the lease        {} (right before a call {}, before the margin check {}, after a commit {})",
        rep.pauses,
        rep.pauses_calling,
        rep.pauses_before_tool,
        rep.pauses_after_commit
    );
    say!("    woke and stopped, fenced   {} (found nothing to do: {})", rep.paused_fenced, rep.paused_idle);
    say!("  calls refused by a fence     {}", rep.fenced_calls);
    say!(
        "  sent to review               {} (marked done {}, retried {})",
        rep.needs_review,
        rep.reviews_mark_done,
        rep.reviews_retry
    );
    if rep.workers > 0 {
        say!(
            "  sessions dropped             {} (holder parked first: {}); live forks {} (refused {}, made {})",
            rep.session_drops,
            rep.session_drops_parked,
            rep.live_forks,
            rep.live_forks_refused,
            rep.live_forks_made
        );
    }
    if rep.tools == ToolsMode::Http {
        say!(
            "  tool server                  {} requests, {} replays from a key, injected: {} refusals, {} lost \
             answers; killed and restarted {} times",
            rep.served_requests,
            rep.served_replays,
            rep.served_injected_refusals,
            rep.served_injected_lost_answers,
            rep.tool_server_restarts
        );
    }
    say!("  checks: read back from the tools' own files and the task logs (each must be 0)");
    say!("  false corruption reports     {}", rep.false_corruption);
    say!("  duplicates                   {}", rep.duplicates);
    say!("  lost steps                   {}", rep.lost);
    say!("  runner errors                {}", rep.errors);
    if rep.backend == "postgres" {
        say!(
            "  PostgreSQL restarts          {} ({:.1} s down in all); runs cut by them {}, paused runners cut {}",
            rep.pg_restarts,
            rep.pg_down_ms as f64 / 1000.0,
            rep.server_aborts,
            rep.paused_conn_lost
        );
    }
    say!("  wall time                    {:.1} s", rep.wall_s);
    if rep.window_kills == 0 && rep.iterations > 0 {
        say!("  WARNING: no kill landed in the window between \"tool call sent\" and \"result recorded\"");
    }
    for p in &rep.problems {
        say!("  problem: {p}");
    }
    say!("  {}", if rep.ok { "ok: every payment key applied once, no step lost" } else { "FAILED" });
}

pub(super) fn finish(rep: &ChaosReport, json: bool) -> i32 {
    if json {
        say!("{}", serde_json::to_string(rep).unwrap_or_default());
    } else {
        print_text(rep);
    }
    if rep.ok { 0 } else { 1 }
}
