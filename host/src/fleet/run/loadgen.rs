//! The host's pump of the core's load generator ([`brokerlab_core::fleet::loadgen`]): it runs
//! the fleet up to each planned send, tells the generator every completion, and dispatches the
//! data set's request the generator names. Every decision (when, which, how it ended) is the
//! core's.

use brokerlab_core::fleet::loadgen::{ClientSlot, LoadGen, LoadSpec, Next, Status};
use brokerlab_core::fleet::{Completion, Error as CoreError, FleetConfig, Request};

use super::drive::{Driving, HostEngine, Ran, Shape, drive};
use crate::error::{CliError, CliResult};
use crate::fleet::scenario::Generated;

/// What the client saw of one request, by send order.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// 0-based stage.
    pub stage: u32,
    /// Send time, ns.
    pub send_ns: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Output tokens asked for.
    pub output_tokens: u64,
    /// How it ended for the client (None until it did).
    pub status: Option<Status>,
    /// Its completion on the server (None until it finished; None for good when the server
    /// aborted it at the client's deadline).
    pub completion: Option<Completion>,
}

/// Runs `data` through a fleet of `cfg` (engine `K`) as the load generator of `spec` sends it;
/// returns the run and what each request did: the dispatched ones by send order (entry i the
/// fleet's request i), then those the gateway refused (`load.gateway_max_in_flight`; never
/// dispatched: status [`Status::Refused`], no completion), in send order.
pub fn simulate_load<K: HostEngine>(
    cfg: FleetConfig,
    data: &Generated,
    spec: LoadSpec,
    keep: bool,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
) -> CliResult<(Ran<K::Summary>, Vec<Sent>)> {
    if data.requests.is_empty() {
        return Err(CliError::bad_input(format!("{}: the data set ([workload]) has no requests", data.origin)));
    }
    no_timeout_with_pd(&cfg, &spec, &data.origin)?;
    let run = Shape { keep, closed_loop: true, group_blocks: 1, slo, ..Shape::default() };
    let mut sent: Vec<Sent> = Vec::new();
    let res = drive::<K>(cfg, &run, &mut |d| pump::<K>(d, data, spec, &mut sent))?;
    Ok((res, sent))
}

/// Refuses a client time-out under prefill/decode disaggregation (exit 2 naming both): the
/// server's abort of a request on its prefill pod, in KV transfer or parked on its decode pod is
/// not modelled (docs/MODEL.md, "The server aborts a timed-out request"), and a time-out the
/// server never acts on would be accepted silently.
pub fn no_timeout_with_pd(cfg: &FleetConfig, spec: &LoadSpec, origin: &str) -> CliResult<()> {
    if spec.timeout_ms > 0 && cfg.batched_config().is_some_and(|e| e.pd.is_some()) {
        return Err(CliError::bad_input(format!(
            "{origin}: `load.request_timeout_s` with prefill/decode disaggregation (`fleet.pd.prefill_pods`, a prefill \
             [[fleet.pool]] or --prefill-pods): expected one or the other: the server's abort of a timed-out request on \
             its prefill pod or in KV transfer is not modelled"
        )));
    }
    Ok(())
}

/// [`simulate_load`] under the engine `cfg` names, as a [`super::RunResult`].
pub fn simulate_load_any(
    cfg: FleetConfig,
    data: &Generated,
    spec: LoadSpec,
    keep: bool,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
) -> CliResult<super::RunResult> {
    Ok(simulate_load_sent(cfg, data, spec, keep, slo)?.0)
}

/// [`simulate_load`] under the engine `cfg` names, as a [`super::RunResult`] and what each
/// request did.
pub fn simulate_load_sent(
    cfg: FleetConfig,
    data: &Generated,
    spec: LoadSpec,
    keep: bool,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
) -> CliResult<(super::RunResult, Vec<Sent>)> {
    use super::{RunResult, RunSummary};
    Ok(match cfg.engine {
        brokerlab_core::fleet::EngineConfig::Fifo { .. } => {
            let (r, s) = simulate_load::<super::Fifo>(cfg, data, spec, keep, slo)?;
            (RunResult::of(r, |x| RunSummary::Fifo(Box::new(x))), s)
        }
        brokerlab_core::fleet::EngineConfig::Batched(_) => {
            let (r, s) = simulate_load::<super::Batched>(cfg, data, spec, keep, slo)?;
            (RunResult::of(r, |x| RunSummary::Batched(Box::new(x))), s)
        }
    })
}

fn pump<K: HostEngine>(
    d: &mut Driving<'_, '_, K>,
    data: &Generated,
    spec: LoadSpec,
    sent: &mut Vec<Sent>,
) -> CliResult<()> {
    let failure = |e: CoreError| CliError::failure(e.to_string());
    let mut slots = vec![ClientSlot::default(); spec.slots_len()];
    let mut lg = LoadGen::new(spec, &mut slots).map_err(|e| CliError::bad_input(format!("{}: {e}", data.origin)))?;
    sent.clear();
    let mut fresh = Vec::new();
    // dispatched requests in flight (fleet indices), by send order: their deadlines are in that
    // order too
    let mut flight: std::collections::VecDeque<u64> = std::collections::VecDeque::new();
    // the generator's seq of each dispatched request (the fleet's index): the gateway's refusals
    // take a seq and no index
    let mut seq_of: Vec<u64> = Vec::new();
    // refused by the gateway, never dispatched: after every dispatched request in `sent`
    let mut refused: Vec<Sent> = Vec::new();
    loop {
        let next = lg.next_send();
        let until = match next {
            Next::Done => {
                sent.append(&mut refused);
                return Ok(());
            }
            Next::AwaitCompletion => u64::MAX,
            Next::Send(s) => s.at_ns,
        };
        while flight.front().is_some_and(|&q| sent[q as usize].status.is_some()) {
            flight.pop_front();
        }
        let deadline = flight.front().map_or(u64::MAX, |&q| lg.deadline(sent[q as usize].send_ns));
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
                let status = lg.completed(seq_of[c.request as usize], c.arrival_ns, c.finish_ns);
                let s = &mut sent[c.request as usize];
                (s.status, s.completion) = (Some(status), Some(*c));
            }
            continue;
        }
        if deadline != u64::MAX && deadline <= until {
            // still running at its deadline: the client gives up, the server aborts it
            let q = flight.pop_front().expect("a deadline is a request in flight");
            if d.abort(q, deadline).map_err(failure)? {
                let s = &mut sent[q as usize];
                s.status = Some(lg.aborted(seq_of[q as usize], s.send_ns));
            }
            // else its engine cannot abort (FIFO, P/D): it ends when its server finishes it
            continue;
        }
        let Next::Send(s) = next else {
            return Err(CliError::failure("the load generator waits for a completion but no request is in flight"));
        };
        let (_, input, output, _, range) = &data.requests[(s.data_index % data.requests.len() as u64) as usize];
        if lg.gateway_full() {
            // the gateway's limit is in flight: the request fails at its send (never routed)
            let status = Some(lg.refused());
            refused.push(Sent {
                stage: s.stage,
                send_ns: s.at_ns,
                input_tokens: *input,
                output_tokens: *output,
                status,
                completion: None,
            });
            continue;
        }
        let req = Request {
            arrival_ns: s.at_ns,
            input_tokens: *input,
            output_tokens: *output,
            keys: &data.keys[range.clone()],
        };
        sent.push(Sent {
            stage: s.stage,
            send_ns: s.at_ns,
            input_tokens: *input,
            output_tokens: *output,
            status: None,
            completion: None,
        });
        flight.push_back(seq_of.len() as u64);
        seq_of.push(s.seq);
        lg.sent();
        d.dispatch(&req).map_err(|e| CliError::bad_input(format!("{}: request {}: {e}", data.origin, s.seq)))?;
    }
}

/// The `--outcomes` fields the load generator adds to request `seq`: its stage and status.
pub fn outcome_fields(sent: &[Sent], seq: u64) -> String {
    let Some(s) = sent.get(seq as usize) else { return String::new() };
    let status = match s.status {
        Some(Status::TimedOut) => "timed_out",
        Some(Status::Ok) => "ok",
        Some(Status::Refused) => "refused",
        // written with its completion, so never here; said rather than called a success
        None => "unfinished",
    };
    format!(",\"stage\":{},\"status\":\"{status}\"", s.stage)
}

/// The `--outcomes` lines of the requests the server aborted at their client's deadline (no
/// completion, so no pod, TTFT or tokens): `e2e_ns` is the time-out (the client's end), by
/// request.
pub fn aborted_lines(sent: &[Sent], spec: &LoadSpec) -> Vec<(u64, String)> {
    let timeout_ns = spec.timeout_ms * 1_000_000;
    sent.iter()
        .enumerate()
        .filter(|(_, s)| s.completion.is_none() && s.status == Some(Status::TimedOut))
        .map(|(seq, s)| {
            let line = format!(
                "{{\"index\":{seq},\"arrival_ns\":{},\"e2e_ns\":{timeout_ns},\"aborted\":true{}}}",
                s.send_ns,
                outcome_fields(sent, seq as u64)
            );
            (seq as u64, line)
        })
        .collect()
}

/// The `--outcomes` lines of the requests refused at their send (conversation replay: turns the
/// server refused for their length; rate stages: the gateway's in-flight limit): never
/// dispatched, so no request index, pod or tokens; `e2e_ns` 0, ended at their send; written after
/// every request's line.
pub fn refused_lines(sent: &[Sent]) -> Vec<(u64, String)> {
    sent.iter()
        .filter(|s| s.status == Some(Status::Refused))
        .map(|s| {
            let line = format!(
                "{{\"index\":null,\"arrival_ns\":{},\"e2e_ns\":0,\"refused\":true,\"input_tokens\":{},\"output_tokens\":{},\"stage\":{},\"status\":\"refused\"}}",
                s.send_ns, s.input_tokens, s.output_tokens, s.stage
            );
            (u64::MAX, line)
        })
        .collect()
}
