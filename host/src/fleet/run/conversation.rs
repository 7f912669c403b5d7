//! The host's pump of a conversation-replay workload ([`brokerlab_core::fleet::conversation`])
//! behind the core's load generator: the generator says when request `data_index` is sent; its
//! session (the conversation's round) holds it until the session's previous turn has ended
//! (inference-perf 3c7c4a3 `apis/user_session.py`: `to_payload` awaits the session before the
//! request's clock starts; a round's first turn opens a new session and waits for nothing); the
//! core plans the turn, and the host hashes its tokens into block keys. Every rule is
//! the core's; the host keeps the per-conversation queues and buffers.
//!
//! Client time-outs (`load.request_timeout_s`) as in the load generator's pump
//! (`super::loadgen`): the fleet never runs past the oldest deadline of a turn in flight (its
//! clock started when its session freed), and a turn still running then is aborted by the server
//! (`Fleet::abort`), counted as timed out, and its session freed at the deadline (the context
//! kept, inference-perf's `process_failure`).

use std::collections::{BTreeMap, VecDeque};

use brokerlab_core::fleet::conversation::{ConvSlot, ConversationSpec, Turn};
use brokerlab_core::fleet::keys::token_keys;
use brokerlab_core::fleet::loadgen::{ClientSlot, LoadGen, LoadSpec, Next, Status};
use brokerlab_core::fleet::{Error as CoreError, FleetConfig, Request};

use super::drive::{Driving, HostEngine, Ran, Shape, drive};
use super::loadgen::Sent;
use crate::error::{CliError, CliResult};

/// A send the load generator made: (seq, stage, data index).
type Held = (u64, u32, u64);

/// Runs `conv` through a fleet of `cfg` (engine `K`) as the load generator of `spec` sends it;
/// returns the run and what each request did: the dispatched ones first, entry i the fleet's
/// request i, then the turns the server refused for their length (never dispatched: status
/// [`Status::Refused`], no completion), in send order.
pub fn simulate_conversations<K: HostEngine>(
    cfg: FleetConfig,
    conv: ConversationSpec,
    spec: LoadSpec,
    keep: bool,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
    origin: &str,
) -> CliResult<(Ran<K::Summary>, Vec<Sent>)> {
    conv.validate().map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
    super::loadgen::no_timeout_with_pd(&cfg, &spec, origin)?;
    if spec.gateway_max_in_flight > 0 {
        return Err(CliError::bad_input(format!(
            "{origin}: `load.gateway_max_in_flight` with conversation replay: expected one or the other: a refused turn's \
             effect on its conversation is not modelled"
        )));
    }
    let generated = cfg.batched_config().is_some_and(|e| e.cache_generated_tokens);
    let run = Shape { keep, closed_loop: true, group_blocks: 1, slo, ..Shape::default() };
    let mut sent: Vec<Sent> = Vec::new();
    let res = drive::<K>(cfg, &run, &mut |d| pump::<K>(d, conv, spec, generated, origin, &mut sent))?;
    Ok((res, sent))
}

/// [`simulate_conversations`] under the engine `cfg` names, as a [`super::RunResult`].
pub fn simulate_conversations_sent(
    cfg: FleetConfig,
    conv: ConversationSpec,
    spec: LoadSpec,
    keep: bool,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
    origin: &str,
) -> CliResult<(super::RunResult, Vec<Sent>)> {
    use super::{RunResult, RunSummary};
    Ok(match cfg.engine {
        brokerlab_core::fleet::EngineConfig::Fifo { .. } => {
            let (r, s) = simulate_conversations::<super::Fifo>(cfg, conv, spec, keep, slo, origin)?;
            (RunResult::of(r, |x| RunSummary::Fifo(Box::new(x))), s)
        }
        brokerlab_core::fleet::EngineConfig::Batched(_) => {
            let (r, s) = simulate_conversations::<super::Batched>(cfg, conv, spec, keep, slo, origin)?;
            (RunResult::of(r, |x| RunSummary::Batched(Box::new(x))), s)
        }
    })
}

/// One live session (a conversation's round): its state, whether a turn of it is in flight (its
/// lock), and the sends waiting for it, in order.
#[derive(Default)]
struct Session {
    slot: ConvSlot,
    busy: bool,
    held: VecDeque<Held>,
}

struct State {
    conv: ConversationSpec,
    generated: bool,
    /// Live sessions by (conversation, round); a session is dropped when it is idle and its
    /// conversation has moved on to a later round.
    sessions: BTreeMap<(u32, u64), Session>,
    /// The latest round sent per conversation.
    latest: Vec<u64>,
    /// Per dispatched request: (seq, the turn).
    dispatched: Vec<(u64, Turn)>,
    /// The turns refused by the server, in send order (appended to `sent` at the end).
    refused: Vec<Sent>,
    /// Dispatched requests in flight, by dispatch order (their deadlines are in that order).
    flight: VecDeque<u64>,
    tokens: Vec<u32>,
    keys: Vec<u64>,
    last_ns: u64,
    origin: String,
}

impl State {
    /// Sends `h` at `at_ns` (its session is free): plans the turn; a refused one ends at once
    /// and the next held send of its conversation goes.
    fn send<K: HostEngine>(
        &mut self,
        d: &mut Driving<'_, '_, K>,
        lg: &mut LoadGen<'_>,
        sent: &mut Vec<Sent>,
        mut h: Held,
        at_ns: u64,
        origin: &str,
    ) -> CliResult<()> {
        let at_ns = at_ns.max(self.last_ns);
        loop {
            let (seq, stage, data_index) = h;
            let key = self.conv.session_of(data_index);
            let sess = self.sessions.entry(key).or_default();
            let t = self.conv.plan(&mut sess.slot, data_index);
            if !t.refused {
                let n = self
                    .conv
                    .fill(&sess.slot, &t, &mut self.tokens)
                    .map_err(|e| CliError::failure(format!("{origin}: {e}")))?;
                let upto = if self.generated { n } else { t.prompt_tokens as usize };
                let m = token_keys(&self.tokens[..upto], &mut self.keys)
                    .map_err(|e| CliError::failure(format!("{origin}: {e}")))?;
                let req = Request {
                    arrival_ns: at_ns,
                    input_tokens: t.prompt_tokens,
                    output_tokens: t.output_tokens,
                    keys: &self.keys[..m],
                };
                sent.push(Sent {
                    stage,
                    send_ns: at_ns,
                    input_tokens: t.prompt_tokens,
                    output_tokens: t.output_tokens,
                    status: None,
                    completion: None,
                });
                self.flight.push_back(self.dispatched.len() as u64);
                self.dispatched.push((seq, t));
                sess.busy = true;
                self.last_ns = at_ns;
                // its client's clock starts now (its deadline counts from here)
                lg.started(seq, Some(at_ns));
                d.dispatch(&req).map_err(|e| CliError::bad_input(format!("{origin}: request {seq}: {e}")))?;
                return Ok(());
            }
            // refused by the server (prompt + max_tokens over max_model_len): a failure at once,
            // the context kept; counted as refused, never lost
            lg.started(seq, Some(at_ns));
            let _ = lg.completed(seq, at_ns, at_ns);
            self.refused.push(Sent {
                stage,
                send_ns: at_ns,
                input_tokens: t.prompt_tokens,
                output_tokens: t.output_tokens,
                status: Some(Status::Refused),
                completion: None,
            });
            self.conv.finished(&mut sess.slot, &t, false);
            match sess.held.pop_front() {
                Some(next) => h = next,
                None => {
                    self.drop_if_done(key);
                    return Ok(());
                }
            }
        }
    }

    /// Dispatched request `q`'s turn ended at `end_ns` (`ok`: answered in time): its session
    /// keeps the context or not, and its next held send goes at `end_ns`.
    fn ended<K: HostEngine>(
        &mut self,
        d: &mut Driving<'_, '_, K>,
        lg: &mut LoadGen<'_>,
        sent: &mut Vec<Sent>,
        q: u64,
        ok: bool,
        end_ns: u64,
    ) -> CliResult<()> {
        let (_, t) = self.dispatched[q as usize];
        let key = (t.conversation, t.round);
        let Some(sess) = self.sessions.get_mut(&key) else {
            return Err(CliError::failure(format!("{}: a turn finished in no live session", self.origin)));
        };
        self.conv.finished(&mut sess.slot, &t, ok);
        sess.busy = false;
        match sess.held.pop_front() {
            Some(h) => {
                let origin = self.origin.clone();
                self.send(d, lg, sent, h, end_ns, &origin)
            }
            None => {
                self.drop_if_done(key);
                Ok(())
            }
        }
    }

    /// Drops session `key` when idle and its conversation has a later round.
    fn drop_if_done(&mut self, key: (u32, u64)) {
        if self.latest[key.0 as usize] > key.1 && self.sessions.get(&key).is_some_and(|s| !s.busy && s.held.is_empty())
        {
            self.sessions.remove(&key);
        }
    }
}

fn pump<K: HostEngine>(
    d: &mut Driving<'_, '_, K>,
    conv: ConversationSpec,
    spec: LoadSpec,
    generated: bool,
    origin: &str,
    sent: &mut Vec<Sent>,
) -> CliResult<()> {
    let failure = |e: CoreError| CliError::failure(e.to_string());
    let mut slots = vec![ClientSlot::default(); spec.slots_len()];
    let mut lg = LoadGen::new(spec, &mut slots).map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
    sent.clear();
    let n = conv.count as usize;
    let max_seq = conv.max_sequence_tokens() as usize;
    let mut st = State {
        conv,
        generated,
        sessions: BTreeMap::new(),
        latest: vec![0; n],
        dispatched: Vec::new(),
        refused: Vec::new(),
        flight: VecDeque::new(),
        tokens: vec![0; max_seq],
        keys: vec![0; max_seq / 16 + 1],
        last_ns: 0,
        origin: origin.to_string(),
    };
    let mut fresh = Vec::new();
    loop {
        let next = lg.next_send();
        let until = match next {
            Next::Done => {
                // the refused turns after the dispatched ones (whose entries are their ids)
                sent.append(&mut st.refused);
                return Ok(());
            }
            Next::AwaitCompletion => u64::MAX,
            Next::Send(s) => s.at_ns,
        };
        while st.flight.front().is_some_and(|&q| sent[q as usize].status.is_some()) {
            st.flight.pop_front();
        }
        let deadline = st.flight.front().map_or(u64::MAX, |&q| lg.deadline(sent[q as usize].send_ns));
        // the fleet's events before the send and the first deadline, up to the first that
        // completes a request
        while !d.sink.has_fresh() {
            if !d.advance_next(until.min(deadline)).map_err(failure)? {
                break;
            }
        }
        d.sink.take_fresh(&mut fresh);
        if !fresh.is_empty() {
            for c in &fresh {
                let (seq, _) = st.dispatched[c.request as usize];
                let status = lg.completed(seq, c.arrival_ns, c.finish_ns);
                let s = &mut sent[c.request as usize];
                (s.status, s.completion) = (Some(status), Some(*c));
                st.ended(d, &mut lg, sent, c.request, status == Status::Ok, c.finish_ns)?;
            }
            continue;
        }
        if deadline != u64::MAX && deadline <= until {
            // still running at its deadline: the client gives up, the server aborts it, and its
            // session is free from then (the context kept)
            let q = st.flight.pop_front().expect("a deadline is a request in flight");
            if d.abort(q, deadline).map_err(failure)? {
                let (seq, _) = st.dispatched[q as usize];
                let s = &mut sent[q as usize];
                s.status = Some(lg.aborted(seq, s.send_ns));
                st.ended(d, &mut lg, sent, q, false, deadline)?;
            }
            // else its engine cannot abort (the FIFO engine): it ends when its server finishes it
            continue;
        }
        let Next::Send(s) = next else {
            return Err(CliError::failure("the load generator waits for a completion but no request is in flight"));
        };
        lg.sent();
        let h = (s.seq, s.stage, s.data_index);
        let key = st.conv.session_of(s.data_index);
        let c = key.0 as usize;
        if key.1 > st.latest[c] {
            st.latest[c] = key.1;
            let old: Vec<(u32, u64)> = st.sessions.range((key.0, 0)..(key.0, key.1)).map(|(k, _)| *k).collect();
            for k in old {
                st.drop_if_done(k);
            }
        }
        match st.sessions.get_mut(&key) {
            Some(sess) if sess.busy || !sess.held.is_empty() => {
                sess.held.push_back(h);
                // held by its session: its clock has not started
                lg.started(s.seq, None);
            }
            _ => st.send(d, &mut lg, sent, h, s.at_ns, origin)?,
        }
    }
}
