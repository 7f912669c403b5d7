//! The host's pump of a conversation-replay workload ([`brokerlab_core::fleet::conversation`])
//! behind the core's load generator: the generator says when request `data_index` is sent; its
//! session (the conversation's round) holds it until the session's previous turn has ended
//! (inference-perf 3c7c4a3 `apis/user_session.py`: `to_payload` awaits the session before the
//! request's clock starts; a round's first turn opens a new session and waits for nothing); the
//! core plans the turn, and the host hashes its tokens into block keys. Every rule is
//! the core's; the host keeps the per-conversation queues and buffers.

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
/// returns the run and what each dispatched request did, in dispatch order (a turn the server
/// refuses for its length is never dispatched).
pub fn simulate_conversations<K: HostEngine>(
    cfg: FleetConfig,
    conv: ConversationSpec,
    spec: LoadSpec,
    keep: bool,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
    origin: &str,
) -> CliResult<(Ran<K::Summary>, Vec<Sent>)> {
    conv.validate().map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
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
    tokens: Vec<u32>,
    keys: Vec<u64>,
    last_ns: u64,
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
                self.dispatched.push((seq, t));
                sess.busy = true;
                self.last_ns = at_ns;
                d.dispatch(&req).map_err(|e| CliError::bad_input(format!("{origin}: request {seq}: {e}")))?;
                return Ok(());
            }
            // refused by the server (prompt + max_tokens over max_model_len): a failure at once,
            // the context kept
            let _ = lg.completed(seq, at_ns, at_ns);
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
        tokens: vec![0; max_seq],
        keys: vec![0; max_seq / 16 + 1],
        last_ns: 0,
    };
    let mut fresh = Vec::new();
    loop {
        let next = lg.next_send();
        let until = match next {
            Next::Done => return Ok(()),
            Next::AwaitCompletion => u64::MAX,
            Next::Send(s) => s.at_ns,
        };
        while !d.sink.has_fresh() {
            if !d.advance_next(until).map_err(failure)? {
                break;
            }
        }
        d.sink.take_fresh(&mut fresh);
        if !fresh.is_empty() {
            for c in &fresh {
                let (seq, t) = st.dispatched[c.request as usize];
                let status = lg.completed(seq, c.arrival_ns, c.finish_ns);
                let s = &mut sent[c.request as usize];
                (s.status, s.completion) = (Some(status), Some(*c));
                let key = (t.conversation, t.round);
                let Some(sess) = st.sessions.get_mut(&key) else {
                    return Err(CliError::failure(format!("{origin}: a turn finished in no live session")));
                };
                st.conv.finished(&mut sess.slot, &t, status == Status::Ok);
                sess.busy = false;
                match sess.held.pop_front() {
                    Some(h) => st.send(d, &mut lg, sent, h, c.finish_ns, origin)?,
                    None => st.drop_if_done(key),
                }
            }
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
            Some(sess) if sess.busy || !sess.held.is_empty() => sess.held.push_back(h),
            _ => st.send(d, &mut lg, sent, h, s.at_ns, origin)?,
        }
    }
}
