//! NVIDIA Dynamo's session traces (`--format dynamo`; docs/MODEL.md, "Dynamo sessions"), replayed
//! as a closed loop: a session's next turn arrives `delay` after its previous turn COMPLETES in
//! the simulation, as in aisimulate-core 0.13.0 (`src/replay/loadgen/driver.rs`, `resolve_turn`),
//! the replay library of dynamo-mocker 1.6.1. Arrivals depend on simulated finish times, so this
//! drives the fleet itself instead of streaming requests to `run::simulate`, and holds the trace
//! in memory (the sessions' turns).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::{Path, PathBuf};

use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_PROMPT_TOKENS};
use brokerlab_core::fleet::{EngineConfig, Error as CoreError, FleetConfig, Limit, Request, keys};

use super::engine::BatchedResult;
use super::formats::{Fields, Lines, fields, int_array, ns_field, u64_field};
use super::run::{OwnedFleet, RunResult, check_memory, config_error, summarize};
use crate::error::{CliError, CliResult};

/// One turn of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// 1-based line in the file, for messages.
    pub line: usize,
    /// Prompt tokens L.
    pub input_length: u64,
    /// Output tokens O.
    pub output_length: u64,
    /// Trace block ids (S tokens each).
    pub hash_ids: Vec<u64>,
    /// Turn 0: arrival, ns. Later turns: delay after the previous turn's completion, ns.
    pub at_ns: u64,
}

/// A Dynamo trace: sessions in order of first appearance, each its turns in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// The sessions.
    pub sessions: Vec<Vec<Turn>>,
}

impl Trace {
    /// Requests (turns) in all.
    pub fn requests(&self) -> u64 {
        self.sessions.iter().map(|s| s.len() as u64).sum()
    }
}

/// Example of a Dynamo line, for messages.
pub const EXAMPLE: &str =
    "{\"session_id\": \"a\", \"timestamp\": 0, \"input_length\": 1024, \"output_length\": 10, \"hash_ids\": [0, 1]}";

/// `field` or its alias, whichever is present (aisimulate's serde aliases).
fn pick<'a>(f: &Fields<'_>, name: &'a str, alias: &'a str) -> &'a str {
    if f.contains_key(name) || !f.contains_key(alias) { name } else { alias }
}

/// Reads a Dynamo trace with trace block size `s` and lines up to `max_line_bytes`.
pub fn load(path: &Path, s: u32, max_line_bytes: u64) -> CliResult<Trace> {
    let mut lines = Lines::open(path, max_line_bytes)?;
    let mut trace = Trace::default();
    let mut index: HashMap<String, usize> = HashMap::new();
    // Per session: the last timestamp seen (ns), for delays inferred from timestamps.
    let mut last_ts: Vec<Option<u64>> = Vec::new();
    // Bytes held so far (ids, turns, session names; approximate), checked against the memory
    // budget whenever they double, so a huge trace is refused before it exhausts memory.
    let (mut held, mut next_check) = (0u64, 1u64 << 20);
    while let Some(line) = lines.next_line()? {
        let f = fields(&line, EXAMPLE).map_err(|m| lines.error(m))?;
        let e = |m: String| lines.error(m);
        let session = match f.get("session_id").map(|r| r.get()) {
            None | Some("null") => format!("\0line {}", lines.line_no()), // a one-turn session
            Some(t) => serde_json::from_str::<String>(t)
                .map_err(|_| e(format!("field `session_id`: expected a string, got {t}")))?,
        };
        let mut hash_ids = Vec::new();
        int_array(&f, "hash_ids", "18446744073709551615", &mut hash_ids).map_err(e)?;
        let capacity = (hash_ids.len() as u64).saturating_mul(u64::from(s));
        let input_name = pick(&f, "input_length", "input_tokens");
        let input_length = if f.contains_key(input_name) {
            u64_field(&f, input_name, "a non-negative integer (prompt tokens)").map_err(e)?
        } else {
            capacity
        };
        if input_length > capacity {
            return Err(e(format!(
                "field `{input_name}`: {input_length} tokens exceed the {} hash ids x {s} tokens (--trace-block-size)",
                hash_ids.len()
            )));
        }
        if input_length > MAX_PROMPT_TOKENS {
            return Err(e(format!(
                "field `{input_name}`: {input_length} exceeds the limit of {MAX_PROMPT_TOKENS} tokens"
            )));
        }
        let output_name = pick(&f, "output_length", "output_tokens");
        let output_length = u64_field(&f, output_name, "a non-negative integer (output tokens)").map_err(e)?;
        let ms = "a non-negative number of milliseconds";
        let ts_name = pick(&f, "timestamp", "created_time");
        let ts = match f.get(ts_name).map(|r| r.get()) {
            None | Some("null") => None,
            Some(_) => Some(ns_field(&f, ts_name, 6, ms).map_err(e)?),
        };
        let delay_name = pick(&f, "delay", "delay_ms");
        let delay = match f.get(delay_name).map(|r| r.get()) {
            None | Some("null") => None,
            Some(_) => Some(ns_field(&f, delay_name, 6, ms).map_err(e)?),
        };
        let next = trace.sessions.len();
        let si = *index.entry(session.clone()).or_insert(next);
        if si == next {
            trace.sessions.push(Vec::new());
            last_ts.push(None);
        }
        let at_ns = if trace.sessions[si].is_empty() {
            if delay.is_some_and(|d| d != 0) {
                return Err(e(format!(
                    "field `{delay_name}`: the first turn of session {session:?} has a delay; it arrives at its `timestamp`"
                )));
            }
            ts.unwrap_or(0)
        } else if let Some(d) = delay {
            d
        } else if let Some(t) = ts {
            let prev = last_ts[si].ok_or_else(|| {
                e(format!(
                    "field `{ts_name}`: session {session:?} has no earlier timestamp to infer this turn's delay from; give `delay`"
                ))
            })?;
            t.checked_sub(prev).ok_or_else(|| {
                e(format!(
                    "field `{ts_name}`: {} ms is before the session's previous turn at {} ms (the inferred delay would be negative)",
                    t as f64 / 1e6,
                    prev as f64 / 1e6
                ))
            })?
        } else {
            0
        };
        if ts.is_some() {
            last_ts[si] = ts;
        }
        held += 8 * hash_ids.len() as u64
            + std::mem::size_of::<Turn>() as u64
            + if si == next { 64 + session.len() as u64 } else { 0 };
        if held >= next_check {
            next_check = held.saturating_mul(2);
            crate::mem::check(
                &format!("reading the Dynamo trace {} (held in memory: arrivals depend on the run)", path.display()),
                &[crate::mem::Need {
                    what: format!("the sessions' turns, {} lines so far", lines.line_no()),
                    bytes: held,
                    lowered_by: "a shorter trace".into(),
                }],
            )?;
        }
        trace.sessions[si].push(Turn { line: lines.line_no(), input_length, output_length, hash_ids, at_ns });
    }
    Ok(trace)
}

/// The turn as a request arriving at `arrival_ns`, its block keys (trace ids of `s` tokens) hashed
/// into `keys_buf`; the error names what is wrong, the caller adds the file and line.
fn turn_request<'k>(t: &Turn, arrival_ns: u64, s: u32, keys_buf: &'k mut Vec<u64>) -> Result<Request<'k>, CoreError> {
    keys_buf.resize((t.input_length / BLOCK_TOKENS as u64) as usize, 0);
    keys::trace_keys(&t.hash_ids, t.input_length, s, keys_buf)?;
    Ok(Request { arrival_ns, input_tokens: t.input_length, output_tokens: t.output_length, keys: keys_buf })
}

/// Replays `trace` in closed loop through a fleet of `cfg`: every session's first turn is ready at
/// its timestamp; turn k+1 is ready at turn k's simulated finish plus its delay; ready turns are
/// dispatched in (ready time, session order) order. On a full internal buffer the run restarts
/// with a larger one (deterministic, so the result is the same).
pub fn simulate(cfg: FleetConfig, trace: &Trace, path: &Path, s: u32, keep_outcomes: bool) -> CliResult<RunResult> {
    let mut queue_per_pod = 4096usize;
    let mut pending = if cfg.stale_delay > 0 { ((cfg.stale_delay as usize + 1) * 256).min(1 << 20) } else { 0 };
    let n = trace.requests();
    let at = |t: &Turn| format!("{}:{}", PathBuf::from(path).display(), t.line);
    loop {
        check_memory(&cfg, queue_per_pod, pending, Some(n), keep_outcomes)?;
        let mut owned = OwnedFleet::new(cfg, queue_per_pod, pending)?;
        let mut fleet = owned.fleet().map_err(config_error)?;
        let mut latencies = Vec::new();
        crate::mem::try_grow(&mut latencies, n as usize, "the latencies (8 bytes per request)")?;
        let mut outcomes = Vec::new();
        let mut ready: BinaryHeap<Reverse<(u64, usize, usize)>> =
            trace.sessions.iter().enumerate().map(|(si, turns)| Reverse((turns[0].at_ns, si, 0))).collect();
        let mut keys_buf = Vec::new();
        let mut full = None;
        while let Some(Reverse((arrival_ns, si, ti))) = ready.pop() {
            let t = &trace.sessions[si][ti];
            let req = turn_request(t, arrival_ns, s, &mut keys_buf)
                .map_err(|e| CliError::bad_input(format!("{}: {e}", at(t))))?;
            let out = match fleet.dispatch(&req) {
                Ok(out) => out,
                Err(CoreError::CapacityExceeded { limit, .. }) => {
                    full = Some(limit);
                    break;
                }
                Err(e) => return Err(CliError::bad_input(format!("{}: {e}", at(t)))),
            };
            latencies.push(out.latency_ns());
            if keep_outcomes {
                if outcomes.len() == outcomes.capacity() {
                    let extra = outcomes.len().max(1024);
                    crate::mem::try_grow(&mut outcomes, extra, "the per-request outcomes")?;
                }
                outcomes.push(out);
            }
            if let Some(next) = trace.sessions[si].get(ti + 1) {
                let when = out.finish_ns.checked_add(next.at_ns).ok_or_else(|| {
                    CliError::bad_input(format!("{}: the turn's arrival overflows 64-bit nanoseconds", at(next)))
                })?;
                ready.push(Reverse((when, si, ti + 1)));
            }
        }
        match full {
            Some(Limit::QueuePerPod) => queue_per_pod *= 2,
            Some(Limit::PendingEvictions) => pending = (pending * 2).max(1024),
            Some(limit) => return Err(crate::error::FleetError::Limit(limit).into()),
            None => return Ok(RunResult { summary: summarize(&fleet, latencies), outcomes }),
        }
    }
}

/// Replays `trace` in closed loop through batched engines (`--engine batched`): as
/// [`simulate`], with a turn's completion the time its last output token is produced. The fleet
/// runs its steps in order of start ([`brokerlab_core::fleet::BatchedFleet::advance_next`]) and
/// stops at each completion, so a next turn it makes ready is dispatched before any step that
/// starts after its arrival. With `keep`, the completions are kept (`--outcomes`).
pub fn simulate_batched(
    cfg: FleetConfig,
    engine: EngineConfig,
    trace: &Trace,
    path: &Path,
    s: u32,
    keep: bool,
) -> CliResult<BatchedResult> {
    let at = |t: &Turn| format!("{}:{}", PathBuf::from(path).display(), t.line);
    let n = trace.requests();
    crate::mem::check(
        "the closed-loop replay",
        &[crate::mem::Need {
            what: "the turn of each request (8 bytes per request)".into(),
            bytes: n.saturating_mul(8),
            lowered_by: "a shorter trace".into(),
        }],
    )?;
    super::engine::drive_batched(cfg, engine, keep, true, None, &mut |d| {
        let mut ready: BinaryHeap<Reverse<(u64, usize, usize)>> =
            trace.sessions.iter().enumerate().map(|(si, turns)| Reverse((turns[0].at_ns, si, 0))).collect();
        // (session, turn) of each request, by dispatch index (Completion::request)
        let mut turn_of: Vec<(u32, u32)> = Vec::new();
        crate::mem::try_grow(&mut turn_of, n as usize, "the turn of each request")?;
        let (mut keys_buf, mut fresh) = (Vec::new(), Vec::new());
        let failure = |e: CoreError| CliError::failure(e.to_string());
        loop {
            let next_ns = ready.peek().map_or(u64::MAX, |r| r.0.0);
            // Steps that start before the next arrival, up to the first that finishes a request.
            while !d.sink.has_fresh() {
                let r = d.fleet.advance_next(next_ns, d.sink);
                if !d.check(r).map_err(failure)? {
                    break;
                }
            }
            d.sink.take_fresh(&mut fresh);
            if !fresh.is_empty() {
                for c in &fresh {
                    let (si, ti) = turn_of[c.request as usize];
                    let (si, ti) = (si as usize, ti as usize + 1);
                    if let Some(next) = trace.sessions[si].get(ti) {
                        let when = c.finish_ns.checked_add(next.at_ns).ok_or_else(|| {
                            CliError::bad_input(format!(
                                "{}: the turn's arrival overflows 64-bit nanoseconds",
                                at(next)
                            ))
                        })?;
                        ready.push(Reverse((when, si, ti)));
                    }
                }
                continue;
            }
            let Some(Reverse((arrival_ns, si, ti))) = ready.pop() else { break };
            let t = &trace.sessions[si][ti];
            let req = turn_request(t, arrival_ns, s, &mut keys_buf)
                .map_err(|e| CliError::bad_input(format!("{}: {e}", at(t))))?;
            let r = d.fleet.dispatch(&req, d.sink);
            d.check(r).map_err(|e| CliError::bad_input(format!("{}: {e}", at(t))))?;
            turn_of.push((si as u32, ti as u32));
        }
        Ok(())
    })
}
