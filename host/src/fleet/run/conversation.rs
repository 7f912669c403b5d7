//! The host's pump of a conversation-replay workload ([`brokerlab_core::fleet::conversation`])
//! behind the core's load generator: the generator says when request `data_index` is sent; its
//! conversation's session holds it until the conversation's previous turn has ended (inference-perf
//! 3c7c4a3 `apis/user_session.py`: `to_payload` awaits the session before the request's clock
//! starts); the core plans the turn, and the host hashes its tokens into block keys. Every rule is
//! the core's; the host keeps the per-conversation queues and buffers.

use std::collections::VecDeque;

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

struct State {
    conv: ConversationSpec,
    generated: bool,
    slots: Vec<ConvSlot>,
    /// The turn in flight per conversation (its session is locked).
    busy: Vec<bool>,
    /// Sends waiting for their conversation's session, per conversation, in order.
    held: Vec<VecDeque<Held>>,
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
            let c = (data_index % self.conv.count as u64) as usize;
            let t = self.conv.plan(&mut self.slots[c], data_index);
            if !t.refused {
                let n = self
                    .conv
                    .fill(&self.slots[c], &t, &mut self.tokens)
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
                sent.push(Sent { stage, status: None, completion: None });
                self.dispatched.push((seq, t));
                self.busy[c] = true;
                self.last_ns = at_ns;
                d.dispatch(&req).map_err(|e| CliError::bad_input(format!("{origin}: request {seq}: {e}")))?;
                return Ok(());
            }
            // refused by the server (prompt + max_tokens over max_model_len): a failure at once,
            // the context kept
            let _ = lg.completed(seq, at_ns, at_ns);
            self.conv.finished(&mut self.slots[c], &t, false);
            match self.held[c].pop_front() {
                Some(next) => h = next,
                None => return Ok(()),
            }
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
        slots: vec![ConvSlot::default(); n],
        busy: vec![false; n],
        held: vec![VecDeque::new(); n],
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
                let k = t.conversation as usize;
                st.conv.finished(&mut st.slots[k], &t, status == Status::Ok);
                st.busy[k] = false;
                if let Some(h) = st.held[k].pop_front() {
                    st.send(d, &mut lg, sent, h, c.finish_ns, origin)?;
                }
            }
            continue;
        }
        let Next::Send(s) = next else {
            return Err(CliError::failure("the load generator waits for a completion but no request is in flight"));
        };
        lg.sent();
        let h = (s.seq, s.stage, s.data_index);
        let c = (s.data_index % n as u64) as usize;
        if st.busy[c] || !st.held[c].is_empty() {
            st.held[c].push_back(h);
        } else {
            st.send(d, &mut lg, sent, h, s.at_ns, origin)?;
        }
    }
}
