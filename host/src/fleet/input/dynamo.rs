//! NVIDIA Dynamo's session traces (`--format dynamo`; docs/MODEL.md, "Dynamo sessions"), replayed
//! as a closed loop: a session's next turn arrives `delay` after its previous turn COMPLETES in
//! the simulation, as in aisimulate-core 0.13.0 (`src/replay/loadgen/driver.rs`, `resolve_turn`),
//! the replay library of dynamo-mocker 1.6.1. Arrivals depend on simulated finish times, so this
//! drives the fleet itself (one closed loop for either engine) instead of streaming requests to
//! `run::simulate`, and holds the trace in memory (the sessions' turns).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::{Path, PathBuf};

use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_PROMPT_TOKENS};
use brokerlab_core::fleet::{Error as CoreError, FleetConfig, Request, keys};

use crate::error::{CliError, CliResult};
use crate::fleet::input::formats::{Fields, Lines, fields, int_array, ns_field, u64_field};
use crate::fleet::run::{HostEngine, Ran, Shape, drive};

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
    /// Each session's `session_id` (None: a line without one, a one-turn session).
    pub names: Vec<Option<String>>,
    /// Heap bytes the trace holds (its vectors and strings, as the allocator takes them): counted
    /// in the memory budget of the run that replays it.
    pub held_bytes: u64,
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

/// `field` or its alias, whichever is present (aisimulate's serde aliases); both is an error
/// (serde would keep one silently).
fn pick<'a>(f: &Fields<'_>, name: &'a str, alias: &'a str) -> Result<&'a str, String> {
    match (f.contains_key(name), f.contains_key(alias)) {
        (true, true) => Err(format!(
            "fields `{name}` and `{alias}` are both given: they are one field (aliases); expected one of them"
        )),
        (false, true) => Ok(alias),
        _ => Ok(name),
    }
}

/// Bytes the allocator takes for a block of `n` bytes: glibc malloc's 8-byte header, 16-byte
/// alignment, 32 bytes at least (0 for no block). The Dynamo trace is counted with it.
fn heap_bytes(n: usize) -> u64 {
    if n == 0 { 0 } else { ((n as u64 + 8).div_ceil(16) * 16).max(32) }
}

/// Heap bytes of a vector of `cap` elements of `T`.
fn vec_bytes<T>(cap: usize) -> u64 {
    heap_bytes(cap.saturating_mul(std::mem::size_of::<T>()))
}

/// Heap bytes of the table of a `HashMap<K, V>` of capacity `cap` (hashbrown: a power of two of
/// buckets, 7/8 usable, one control byte per bucket and 16 more).
fn map_bytes<K, V>(cap: usize) -> u64 {
    if cap == 0 {
        return 0;
    }
    let buckets = (cap.saturating_mul(8) / 7).next_power_of_two();
    heap_bytes(buckets.saturating_mul(std::mem::size_of::<(K, V)>() + 1) + 16)
}

/// The memory-budget name of a Dynamo trace being read.
pub const HELD: &str = "Dynamo trace held in memory (sessions, turns, hash ids)";

/// Reads a Dynamo trace with trace block size `s`, lines up to `max_line_bytes`, at most
/// `max_blank_lines` blank ones.
pub fn load(path: &Path, s: u32, max_line_bytes: u64, max_blank_lines: u64) -> CliResult<Trace> {
    let mut lines = Lines::open(path, max_line_bytes)?.max_blank_lines(max_blank_lines);
    let mut trace = Trace::default();
    let mut index: HashMap<String, usize> = HashMap::new();
    // Per session: the last timestamp seen (ns), for delays inferred from timestamps.
    let mut last_ts: Vec<Option<u64>> = Vec::new();
    // The heap bytes held, counted as the allocator takes them and checked against the memory
    // budget at every line: `kept` stays with the trace, the index and `last_ts` go with `load`.
    let growth = crate::mem::Growth::new(
        &format!("reading the Dynamo trace {} (held in memory: arrivals depend on the run)", path.display()),
        0,
    );
    let (mut kept, mut index_keys) = (0u64, 0u64);
    while let Some(line) = lines.next_line()? {
        let f = fields(&line, EXAMPLE).map_err(|m| lines.error(m))?;
        let e = |m: String| lines.error(m);
        let session = match f.get("session_id").map(|r| r.get()) {
            None | Some("null") => None, // a one-turn session
            Some(t) => Some(
                serde_json::from_str::<String>(t)
                    .map_err(|_| e(format!("field `session_id`: expected a string, got {t}")))?,
            ),
        };
        let mut hash_ids = Vec::new();
        int_array(&f, "hash_ids", "18446744073709551615", &mut hash_ids).map_err(e)?;
        let capacity = (hash_ids.len() as u64).saturating_mul(u64::from(s));
        let input_name = pick(&f, "input_length", "input_tokens").map_err(e)?;
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
        let output_name = pick(&f, "output_length", "output_tokens").map_err(e)?;
        let output_length = u64_field(&f, output_name, "a non-negative integer (output tokens)").map_err(e)?;
        let ms = "a non-negative number of milliseconds";
        let ts_name = pick(&f, "timestamp", "created_time").map_err(e)?;
        let ts = match f.get(ts_name).map(|r| r.get()) {
            None | Some("null") => None,
            Some(_) => Some(ns_field(&f, ts_name, 6, ms).map_err(e)?),
        };
        let delay_name = pick(&f, "delay", "delay_ms").map_err(e)?;
        let delay = match f.get(delay_name).map(|r| r.get()) {
            None | Some("null") => None,
            Some(_) => Some(ns_field(&f, delay_name, 6, ms).map_err(e)?),
        };
        let next = trace.sessions.len();
        let si = match &session {
            None => next,
            Some(name) => match index.get(name) {
                Some(&si) => si,
                None => {
                    index_keys += heap_bytes(name.len());
                    index.insert(name.clone(), next);
                    next
                }
            },
        };
        if si == next {
            // most sessions are short: one turn's room first (a vector's default is four)
            trace.sessions.push(Vec::with_capacity(1));
            kept += vec_bytes::<Turn>(1) + session.as_ref().map_or(0, |n| heap_bytes(n.len()));
            trace.names.push(session);
            last_ts.push(None);
        }
        let shown = trace.names[si].as_deref().unwrap_or("(no session_id)");
        let at_ns = if trace.sessions[si].is_empty() {
            if delay.is_some_and(|d| d != 0) {
                return Err(e(format!(
                    "field `{delay_name}`: the first turn of session {shown:?} has a delay; it arrives at its `timestamp`"
                )));
            }
            ts.unwrap_or(0)
        } else if let Some(d) = delay {
            d
        } else if let Some(t) = ts {
            let prev = last_ts[si].ok_or_else(|| {
                e(format!(
                    "field `{ts_name}`: session {shown:?} has no earlier timestamp to infer this turn's delay from; give `delay`"
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
        hash_ids.shrink_to_fit();
        kept += vec_bytes::<u64>(hash_ids.len());
        let turns = &mut trace.sessions[si];
        let cap = turns.capacity();
        turns.push(Turn { line: lines.line_no(), input_length, output_length, hash_ids, at_ns });
        kept += vec_bytes::<Turn>(turns.capacity()) - vec_bytes::<Turn>(cap);
        let containers =
            vec_bytes::<Vec<Turn>>(trace.sessions.capacity()) + vec_bytes::<Option<String>>(trace.names.capacity());
        let transient =
            map_bytes::<String, usize>(index.capacity()) + index_keys + vec_bytes::<Option<u64>>(last_ts.capacity());
        trace.held_bytes = kept + containers;
        growth.set(HELD, trace.held_bytes + transient)?;
    }
    Ok(trace)
}

/// What a closed-loop replay of `trace` holds beside the fleet (memory budget): the trace, the
/// heap of ready turns (one per session) and `per_request` bytes per turn.
fn held_needs(trace: &Trace, per_request: u64) -> Vec<crate::mem::Need> {
    let need = |what: &str, bytes| crate::mem::Need { what: what.into(), bytes, lowered_by: "a shorter trace".into() };
    vec![
        need(HELD, trace.held_bytes),
        need("ready turns (one per session)", vec_bytes::<Reverse<(u64, usize, usize)>>(trace.sessions.len())),
        need("the turn of each request", trace.requests().saturating_mul(per_request)),
    ]
}

/// The (session, turn) of each request of a replay, by dispatch index.
pub type TurnOf = Vec<(u32, u32)>;

/// The turn as a request arriving at `arrival_ns`, its block keys (trace ids of `s` tokens) hashed
/// into `keys_buf`; the error names what is wrong, the caller adds the file and line.
fn turn_request<'k>(t: &Turn, arrival_ns: u64, s: u32, keys_buf: &'k mut Vec<u64>) -> Result<Request<'k>, CoreError> {
    keys_buf.resize((t.input_length / BLOCK_TOKENS as u64) as usize, 0);
    keys::trace_keys(&t.hash_ids, t.input_length, s, keys_buf)?;
    Ok(Request { arrival_ns, input_tokens: t.input_length, output_tokens: t.output_length, keys: keys_buf })
}

/// Replays `trace` in closed loop through a fleet of `cfg` (engine `K`): every session's first
/// turn is ready at its timestamp; turn k+1 is ready at turn k's simulated finish plus its delay;
/// ready turns are dispatched in (ready time, session order) order. The fleet runs its events in
/// order of start ([`brokerlab_core::fleet::Fleet::advance_next`]: the batched engine's steps;
/// the FIFO engine has none, its completions come at dispatch) and stops at each completion, so
/// a next turn it makes ready is dispatched before any step that starts after its arrival. With
/// `keep`, what each request did is kept. Returns the result and the (session, turn) of each
/// request, by dispatch index. On a full internal buffer the run restarts with a larger one
/// (deterministic, so the result is the same).
pub fn simulate<K: HostEngine>(
    cfg: FleetConfig,
    trace: &Trace,
    path: &Path,
    s: u32,
    keep: bool,
) -> CliResult<(Ran<K::Summary>, TurnOf)> {
    let at = |t: &Turn| format!("{}:{}", PathBuf::from(path).display(), t.line);
    let n = trace.requests();
    let held = held_needs(trace, std::mem::size_of::<(u32, u32)>() as u64);
    let run = Shape { keep, closed_loop: true, group_blocks: 1, requests: Some(n), held: &held, ..Shape::default() };
    // (session, turn) of each request, by dispatch index (Completion::request)
    let mut turn_of: TurnOf = Vec::new();
    let res = drive::<K>(cfg, &run, &mut |d| {
        let mut ready: BinaryHeap<Reverse<(u64, usize, usize)>> =
            trace.sessions.iter().enumerate().map(|(si, turns)| Reverse((turns[0].at_ns, si, 0))).collect();
        turn_of.clear();
        crate::mem::try_grow(&mut turn_of, n as usize, "the turn of each request")?;
        let (mut keys_buf, mut fresh) = (Vec::new(), Vec::new());
        let failure = |e: CoreError| CliError::failure(e.to_string());
        loop {
            let next_ns = ready.peek().map_or(u64::MAX, |r| r.0.0);
            // Events that start before the next arrival, up to the first that completes a request.
            while !d.sink.has_fresh() {
                if !d.advance_next(next_ns).map_err(failure)? {
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
            // recorded first: a FIFO engine completes the request within the dispatch
            turn_of.push((si as u32, ti as u32));
            d.dispatch(&req).map_err(|e| CliError::bad_input(format!("{}: {e}", at(t))))?;
        }
        Ok(())
    })?;
    Ok((res, turn_of))
}

/// The `--outcomes` fields a Dynamo replay adds to a completion: its session's `session_id` and
/// the trace line of its turn (the index is the dispatch order, which the closed loop decides).
pub fn outcome_fields(trace: &Trace, turn_of: &[(u32, u32)], request: u64) -> String {
    let Some(&(si, ti)) = turn_of.get(request as usize) else { return String::new() };
    let (si, ti) = (si as usize, ti as usize);
    let name =
        trace.names[si].as_ref().map_or_else(|| "null".into(), |n| serde_json::Value::from(n.as_str()).to_string());
    format!(",\"session_id\":{name},\"line\":{}", trace.sessions[si][ti].line)
}
