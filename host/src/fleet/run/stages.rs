//! Per-stage results of a load-generator run, computed the way inference-perf v0.5.0's report
//! does (`inference_perf/reportgen/base.py`, `summarize_requests`; docs/PUBLISHED.md,
//! "inference-perf: what every published figure is made of"):
//!
//! * total_time = latest client end - earliest send over every request of the stage (timed-out
//!   ones included: their end is the client's give-up time);
//! * output (input) tokens/s = the successful requests' output (prompt) tokens / total_time;
//! * achieved rate = requests / (latest send - earliest send);
//! * TTFT percentiles over the successful requests, numpy's default (linear) interpolation.

use brokerlab_core::fleet::Completion;
use brokerlab_core::fleet::loadgen::{LoadKind, LoadSpec, Status};
use serde::Serialize;

use super::loadgen::Sent;

/// One request as inference-perf saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Req {
    /// Its stage (0-based) when the load generator recorded it; `None`: assign by arrival window.
    pub stage: Option<u32>,
    /// When it was sent, ns (inference-perf's `start_time`).
    pub send_ns: u64,
    /// Time to first token from `send_ns`, ns.
    pub ttft_ns: u64,
    /// End to end from `send_ns`, ns.
    pub e2e_ns: u64,
    /// Prompt tokens (cached or not).
    pub input_tokens: u64,
    /// Counted output tokens (assumption A1: the generated count).
    pub output_tokens: u64,
    /// Finished without error or timeout.
    pub ok: bool,
}

impl Req {
    /// A simulated completion (no stage recorded: back-to-back stages, assigned by arrival).
    pub fn from_completion(c: &Completion) -> Req {
        Req {
            stage: None,
            send_ns: c.arrival_ns,
            ttft_ns: c.ttft_ns(),
            e2e_ns: c.e2e_ns(),
            input_tokens: c.input_tokens,
            output_tokens: c.output_tokens,
            ok: true,
        }
    }

    /// A request of the load generator, with the stage and status it recorded (None while it
    /// had not ended); a timed-out request ends for the client at send + `timeout_ns`.
    pub fn from_sent(s: &Sent, timeout_ns: u64) -> Option<Req> {
        let status = s.status?;
        if status == Status::Refused {
            // refused by the server at its send: a failure that ends at once
            return Some(Req {
                stage: Some(s.stage),
                send_ns: s.send_ns,
                ttft_ns: 0,
                e2e_ns: 0,
                input_tokens: s.input_tokens,
                output_tokens: s.output_tokens,
                ok: false,
            });
        }
        let Some(c) = s.completion else {
            // aborted by the server at the client's deadline: no token, ended at the deadline
            return (status == Status::TimedOut).then_some(Req {
                stage: Some(s.stage),
                send_ns: s.send_ns,
                ttft_ns: timeout_ns,
                e2e_ns: timeout_ns,
                input_tokens: s.input_tokens,
                output_tokens: s.output_tokens,
                ok: false,
            });
        };
        let ok = status == Status::Ok;
        let e2e_ns = if ok { c.e2e_ns() } else { c.e2e_ns().min(timeout_ns) };
        Some(Req {
            stage: Some(s.stage),
            send_ns: c.arrival_ns,
            ttft_ns: c.ttft_ns(),
            e2e_ns,
            input_tokens: c.input_tokens,
            output_tokens: c.output_tokens,
            ok,
        })
    }

    /// End time, ns.
    pub fn end_ns(&self) -> u64 {
        self.send_ns + self.e2e_ns
    }
}

/// One stage as inference-perf reports it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StageFigures {
    /// Requests of the stage (failures included).
    pub requests: u64,
    /// Successful requests.
    pub successes: u64,
    /// Latest end - earliest send over all of the stage's requests, s.
    pub total_time_s: f64,
    /// Counted output tokens of the successful requests / `total_time_s`.
    pub output_tok_s: f64,
    /// Prompt tokens of the successful requests / `total_time_s`.
    pub input_tok_s: f64,
    /// Requests / (latest send - earliest send), req/s.
    pub achieved_rate: f64,
    /// TTFT p50 / p90 / mean over the successful requests, s.
    pub ttft_p50_s: f64,
    /// TTFT p90, s.
    pub ttft_p90_s: f64,
    /// TTFT mean, s.
    pub ttft_mean_s: f64,
    /// E2E p50 over the successful requests, s.
    pub e2e_p50_s: f64,
    /// Client TPOT p50 over the successful requests of more than one output token, s: (E2E -
    /// TTFT) / (output tokens - 1) (inference-perf `reportgen/base.py` @ v0.5.0 L454-458).
    pub tpot_p50_s: f64,
}

/// The figures of `reqs` (one stage's requests); `None` when it has none.
pub fn stage_figures(reqs: &[Req]) -> Option<StageFigures> {
    let start = reqs.iter().map(|r| r.send_ns).min()?;
    let last_send = reqs.iter().map(|r| r.send_ns).max()?;
    let end = reqs.iter().map(Req::end_ns).max()?;
    let ok: Vec<&Req> = reqs.iter().filter(|r| r.ok).collect();
    let total_time_s = (end - start) as f64 / 1e9;
    let per_s = |n: u64| if total_time_s > 0.0 { n as f64 / total_time_s } else { f64::NAN };
    let sorted = |f: fn(&Req) -> u64| {
        let mut v: Vec<f64> = ok.iter().map(|r| f(r) as f64 / 1e9).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let ttft = sorted(|r| r.ttft_ns);
    let e2e = sorted(|r| r.e2e_ns);
    let mut tpot: Vec<f64> = ok
        .iter()
        .filter(|r| r.output_tokens > 1)
        .map(|r| r.e2e_ns.saturating_sub(r.ttft_ns) as f64 / 1e9 / (r.output_tokens - 1) as f64)
        .collect();
    tpot.sort_by(f64::total_cmp);
    let nan = f64::NAN;
    Some(StageFigures {
        requests: reqs.len() as u64,
        successes: ok.len() as u64,
        total_time_s,
        output_tok_s: per_s(ok.iter().map(|r| r.output_tokens).sum()),
        input_tok_s: per_s(ok.iter().map(|r| r.input_tokens).sum()),
        achieved_rate: if last_send > start { reqs.len() as f64 / ((last_send - start) as f64 / 1e9) } else { nan },
        ttft_p50_s: percentile_linear(&ttft, 50.0).unwrap_or(nan),
        ttft_p90_s: percentile_linear(&ttft, 90.0).unwrap_or(nan),
        ttft_mean_s: if ttft.is_empty() { nan } else { ttft.iter().sum::<f64>() / ttft.len() as f64 },
        e2e_p50_s: percentile_linear(&e2e, 50.0).unwrap_or(nan),
        tpot_p50_s: percentile_linear(&tpot, 50.0).unwrap_or(nan),
    })
}

/// One stage's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageRow {
    /// 0-based stage.
    pub stage: u32,
    /// Requested rate, requests/s (rate stages).
    pub rate_per_s: Option<f64>,
    /// Clients (concurrent stages).
    pub concurrency: Option<u64>,
    /// Requested duration, s (rate stages).
    pub duration_s: Option<f64>,
    /// Requests sent.
    pub sent: u64,
    /// Requests / (latest send - earliest send), per s (None with fewer than two sends).
    pub achieved_rate_per_s: Option<f64>,
    /// Answered within the timeout.
    pub completed: u64,
    /// Given up by the client.
    pub timed_out: u64,
    /// Refused by the server at once (conversation replay: prompt + output over
    /// `max_model_len`); absent from the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub refused: u64,
    /// TTFT of the answered requests, ms.
    pub ttft_ms_p50: Option<f64>,
    /// Same, p90.
    pub ttft_ms_p90: Option<f64>,
    /// Same, mean.
    pub ttft_ms_mean: Option<f64>,
    /// Answered requests' output tokens / total_time.
    pub output_tokens_per_s: Option<f64>,
    /// Answered requests' prompt tokens / total_time.
    pub input_tokens_per_s: Option<f64>,
}

/// numpy's default percentile (linear between closest ranks) of sorted `v`, `p` in [0, 100];
/// `None` when `v` is empty. The one home of this rule (vLLM's `--report-json`, the per-stage
/// rows and the published tables use it), its arithmetic in numpy's order.
pub fn percentile_linear(v: &[f64], p: f64) -> Option<f64> {
    let last = v.len().checked_sub(1)?;
    let rank = p / 100.0 * last as f64;
    let lo = rank.floor() as usize;
    let hi = (rank.ceil() as usize).min(last);
    Some(v[lo] + (v[hi] - v[lo]) * (rank - lo as f64))
}

/// The rows of every stage of `spec`, from what each request did (by send order).
pub fn rows(spec: &LoadSpec, sent: &[Sent]) -> Vec<StageRow> {
    spec.stages().iter().enumerate().map(|(i, st)| row(spec, i as u32, st, sent)).collect()
}

fn row(spec: &LoadSpec, i: u32, st: &brokerlab_core::fleet::loadgen::LoadStage, sent: &[Sent]) -> StageRow {
    let timeout_ns = if spec.timeout_ms == 0 { u64::MAX } else { spec.timeout_ms * 1_000_000 };
    let mine: Vec<&Sent> = sent.iter().filter(|s| s.stage == i).collect();
    let reqs: Vec<Req> = mine.iter().filter_map(|s| Req::from_sent(s, timeout_ns)).collect();
    let f = stage_figures(&reqs);
    // the figures in the row's units; a figure a stage does not have (NaN) is None
    let fig =
        |get: fn(&StageFigures) -> f64, scale: f64| f.as_ref().map(get).filter(|x| x.is_finite()).map(|x| x * scale);
    let answered = f.as_ref().map_or(0, |f| f.successes);
    let refused = mine.iter().filter(|s| s.status == Some(Status::Refused)).count() as u64;
    let rated = spec.kind != LoadKind::Concurrent;
    StageRow {
        stage: i,
        rate_per_s: rated.then(|| st.rate_milli_per_s as f64 / 1e3),
        concurrency: (!rated).then_some(st.concurrency),
        duration_s: rated.then(|| st.duration_ms as f64 / 1e3),
        sent: mine.len() as u64,
        achieved_rate_per_s: fig(|f| f.achieved_rate, 1.0),
        completed: answered,
        timed_out: reqs.len() as u64 - answered - refused,
        refused,
        ttft_ms_p50: fig(|f| f.ttft_p50_s, 1e3),
        ttft_ms_p90: fig(|f| f.ttft_p90_s, 1e3),
        ttft_ms_mean: fig(|f| f.ttft_mean_s, 1e3),
        output_tokens_per_s: fig(|f| f.output_tok_s, 1.0).filter(|_| answered > 0),
        input_tokens_per_s: fig(|f| f.input_tok_s, 1.0).filter(|_| answered > 0),
    }
}

/// The per-stage plots of `rows` (`scenario` names the run): (file stem, chart) for TTFT p50
/// and p90 (ms) and output and input tok/s, against the stage index; a stage without the figure
/// leaves a gap, never a zero.
pub fn charts(rows: &[StageRow], scenario: &str) -> Vec<(&'static str, crate::plot::Chart)> {
    use crate::plot::{Chart, Series};
    let series = |label: &str, y: fn(&StageRow) -> Option<f64>| {
        Series::new(label, rows.iter().filter_map(|r| Some((f64::from(r.stage), y(r)?))).collect())
    };
    let stage = "stage (0 = the first, e.g. a warmup)".to_string();
    vec![
        (
            "stages_ttft",
            Chart {
                title: format!("{scenario}: TTFT per stage (answered requests)"),
                x_label: stage.clone(),
                y_label: "TTFT (ms, log)".into(),
                series: vec![series("p50", |r| r.ttft_ms_p50), series("p90", |r| r.ttft_ms_p90)],
                // tens of ms below saturation, minutes above it
                y_log: true,
                ..Chart::default()
            },
        ),
        (
            "stages_tok_s",
            Chart {
                title: format!("{scenario}: tokens/s per stage (inference-perf's window)"),
                x_label: stage,
                y_label: "tokens/s".into(),
                series: vec![series("output", |r| r.output_tokens_per_s), series("input", |r| r.input_tokens_per_s)],
                y_min: Some(0.0),
                ..Chart::default()
            },
        ),
    ]
}

/// The rows as a text table.
pub fn render(rows: &[StageRow]) -> String {
    let f = |v: Option<f64>, d: usize| v.map_or_else(|| "-".to_string(), |x| format!("{x:.d$}"));
    let mut out = String::from(
        "\nper stage (inference-perf's way: tok/s over latest end - earliest send; TTFT of answered requests)\n",
    );
    out += &format!(
        "{:>5} {:>9} {:>9} {:>6} {:>9} {:>6} {:>6} {:>10} {:>10} {:>10} {:>11} {:>11}\n",
        "stage",
        "rate/s",
        "clients",
        "sent",
        "achieved",
        "ok",
        "t/o",
        "ttft p50",
        "ttft p90",
        "ttft mean",
        "out tok/s",
        "in tok/s"
    );
    for r in rows {
        out += &format!(
            "{:>5} {:>9} {:>9} {:>6} {:>9} {:>6} {:>6} {:>10} {:>10} {:>10} {:>11} {:>11}\n",
            r.stage,
            f(r.rate_per_s, 3),
            r.concurrency.map_or_else(|| "-".into(), |c| c.to_string()),
            r.sent,
            f(r.achieved_rate_per_s, 2),
            r.completed,
            r.timed_out,
            f(r.ttft_ms_p50, 1),
            f(r.ttft_ms_p90, 1),
            f(r.ttft_ms_mean, 1),
            f(r.output_tokens_per_s, 1),
            f(r.input_tokens_per_s, 1),
        );
    }
    out += "(ttft in ms)\n";
    let refused: u64 = rows.iter().map(|r| r.refused).sum();
    if refused > 0 {
        out += &format!(
            "refused by the server (prompt + output over max_model_len), counted in sent, not in ok or t/o: {}\n",
            rows.iter().map(|r| format!("stage {}: {}", r.stage, r.refused)).collect::<Vec<_>>().join(", ")
        );
    }
    out
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use brokerlab_core::fleet::Completion;
    use brokerlab_core::fleet::engine::pd::PdOutcome;
    use brokerlab_core::fleet::loadgen::{LoadStage, MAX_LOAD_STAGES};

    use super::*;

    fn spec(stages: &[LoadStage], timeout_ms: u64) -> LoadSpec {
        let mut s = LoadSpec {
            kind: LoadKind::Constant,
            stages: [LoadStage::default(); MAX_LOAD_STAGES],
            stages_len: stages.len() as u32,
            interval_ms: 1_000,
            max_in_flight: 0,
            think_ms: 0,
            timeout_ms,
            gateway_max_in_flight: 0,
            seed: 1,
            restart_data: true,
        };
        s.stages[..stages.len()].copy_from_slice(stages);
        s
    }

    fn done(stage: u32, send_ns: u64, ttft_ns: u64, e2e_ns: u64, status: Status) -> Sent {
        let c = Completion {
            request: 0,
            pod: 0,
            arrival_ns: send_ns,
            first_token_ns: send_ns + ttft_ns,
            finish_ns: send_ns + e2e_ns,
            input_tokens: 1_500,
            output_tokens: 1_000,
            hit_tokens: 0,
            prefill_tokens: 0,
            preemptions: 0,
            queue_len: 0,
            offload_hit_tokens: 0,
            pd: PdOutcome::NONE,
        };
        Sent { stage, send_ns, input_tokens: 1_500, output_tokens: 1_000, status: Some(status), completion: Some(c) }
    }

    #[test]
    fn numpy_linear_percentiles() {
        // numpy.percentile([1, 2, 3, 4], 90) = 3.7; [5] -> 5; [] -> None
        let p90 = percentile_linear(&[1.0, 2.0, 3.0, 4.0], 90.0).unwrap();
        assert!((p90 - 3.7).abs() < 1e-12, "{p90}");
        assert_eq!(percentile_linear(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.5));
        assert_eq!(percentile_linear(&[5.0], 90.0), Some(5.0));
        assert_eq!(percentile_linear(&[], 90.0), None);
    }

    #[test]
    fn the_published_hand_checked_60_per_s_row() {
        // docs/PUBLISHED.md: 60 req/s for 25 s, evenly spaced, TTFT 1 s, E2E 10 s, 1,000 tokens:
        // 1,500 x 1,000 / (25 - 1/60 + 10) = 42,877.6 tok/s
        let st = LoadStage { rate_milli_per_s: 60_000, duration_ms: 25_000, ..LoadStage::default() };
        let sent: Vec<Sent> =
            (0..1_500u64).map(|k| done(0, k * 1_000_000_000 / 60, 1_000_000_000, 10_000_000_000, Status::Ok)).collect();
        let r = &rows(&spec(&[st], 0), &sent)[0];
        assert_eq!(r.sent, 1_500);
        let tok = r.output_tokens_per_s.unwrap();
        assert!((tok - 42_877.6).abs() < 0.05, "{tok}");
        assert!((r.input_tokens_per_s.unwrap() - 1.5 * 42_877.6).abs() < 0.1);
        assert_eq!((r.ttft_ms_p50, r.ttft_ms_p90, r.ttft_ms_mean), (Some(1_000.0), Some(1_000.0), Some(1_000.0)));
        // 1,500 / (1,499 / 60 s)
        assert!((r.achieved_rate_per_s.unwrap() - 1_500.0 * 60.0 / 1_499.0).abs() < 1e-9);
    }

    #[test]
    fn a_timed_out_request_widens_the_window_but_adds_no_tokens() {
        let st = LoadStage { rate_milli_per_s: 1_000, duration_ms: 2_000, ..LoadStage::default() };
        // sent at 0 s and 1 s; the second gives up at 1 + 3 s (its server finish at 11 s is not
        // the client's end)
        let sent = vec![
            done(0, 0, 100_000_000, 2_000_000_000, Status::Ok),
            done(0, 1_000_000_000, 9_000_000_000, 10_000_000_000, Status::TimedOut),
        ];
        let r = &rows(&spec(&[st], 3_000), &sent)[0];
        assert_eq!((r.completed, r.timed_out), (1, 1));
        assert_eq!(r.output_tokens_per_s, Some(1_000.0 / 4.0));
        assert_eq!(r.ttft_ms_p90, Some(100.0));
    }
}
