//! The published figures computed from per-request outcomes the way inference-perf and the 2025
//! llm-d report generator computed them (docs/PUBLISHED.md, "inference-perf: what every published
//! figure is made of" and "How each figure is computed").
//!
//! Upstream: kubernetes-sigs/inference-perf `inference_perf/reportgen/base.py` @ v0.5.0
//! (`e250731c`) `summarize_requests` L361-500 (per-stage `total_time` = latest end - earliest
//! start over all the stage's requests, failures included; token rates over the successful
//! requests; `achieved_rate` = count / (latest start - earliest start); percentiles by numpy's
//! default linear interpolation); the 2025 report generator's `aggregate_per_qps` and
//! `_build_summary_across_qps` (rows by requested rate, the plain mean over rows for tok/s, the
//! success-weighted mean for TTFT).

use std::collections::BTreeMap;

use serde::Deserialize;

pub use crate::fleet::run::stages::{Req, StageFigures, percentile_linear, stage_figures};

/// One line of `fleet run --outcomes` as read here: the stage and status fields are optional
/// (written once the load generator records them; `"status"` other than `"ok"` is a failure).
#[derive(Debug, Deserialize)]
struct OutcomeLine {
    arrival_ns: u64,
    ttft_ns: u64,
    e2e_ns: u64,
    #[serde(default)]
    stage: Option<u32>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

/// Parses one `--outcomes` JSON line; `tokens` = (prompt, output) tokens where the line does not
/// carry them. Err: what is wrong with the line.
pub fn parse_outcome(line: &str, tokens: (u64, u64)) -> Result<Req, String> {
    let o: OutcomeLine = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let ok = match o.status.as_deref() {
        None | Some("ok") => true,
        Some("timed_out") => false,
        Some(s) => return Err(format!("status {s:?}: expected \"ok\" or \"timed_out\"")),
    };
    Ok(Req {
        stage: o.stage,
        send_ns: o.arrival_ns,
        ttft_ns: o.ttft_ns,
        e2e_ns: o.e2e_ns,
        input_tokens: o.input_tokens.unwrap_or(tokens.0),
        output_tokens: o.output_tokens.unwrap_or(tokens.1),
        ok,
    })
}

/// `reqs` as the client counted them: every successful request's output tokens set to
/// `per_request` (the tokens the run's client counted per request, where that differs from what
/// the server generated: table 1's A1, [`super::cells::TABLE1_COUNTED_OUTPUT_TOKENS`]); None keeps
/// the generated count. A failed request's tokens count nowhere, so they are left as they are.
pub fn as_counted(reqs: Vec<Req>, per_request: Option<u64>) -> Vec<Req> {
    let Some(c) = per_request else { return reqs };
    reqs.into_iter().map(|r| if r.ok { Req { output_tokens: c, ..r } } else { r }).collect()
}

/// The stage of `r`: the load generator's record when present, else the back-to-back window
/// `[start, end)` (ns from t = 0) its send time falls in. `None`: after the last window.
pub fn stage_of(r: &Req, windows: &[(u64, u64)]) -> Option<usize> {
    if let Some(s) = r.stage {
        return Some(s as usize);
    }
    windows.iter().position(|&(a, b)| (a..b).contains(&r.send_ns))
}

/// Back-to-back windows of stages lasting `durations_ns`, from t = 0.
pub fn back_to_back(durations_ns: &[u64]) -> Vec<(u64, u64)> {
    let mut t = 0;
    durations_ns
        .iter()
        .map(|&d| {
            t += d;
            (t - d, t)
        })
        .collect()
}

/// Every stage's figures: `reqs` split by [`stage_of`] over `windows` (one per stage); a stage
/// with no request is `None`. Requests past the last stage are dropped.
pub fn per_stage(reqs: &[Req], windows: &[(u64, u64)]) -> Vec<Option<StageFigures>> {
    let mut by: Vec<Vec<Req>> = vec![Vec::new(); windows.len()];
    for r in reqs {
        if let Some(s) = stage_of(r, windows).filter(|&s| s < by.len()) {
            by[s].push(*r);
        }
    }
    by.iter().map(|v| stage_figures(v)).collect()
}

/// The 2025 report's summary row.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Summary2025 {
    /// Plain mean over the rows (one per requested rate) of each row's output tok/s.
    pub output_tok_s: f64,
    /// Mean of the rows' TTFT p90 weighted by their successful requests, s.
    pub ttft_p90_s: f64,
    /// The same for the TTFT mean, s.
    pub ttft_mean_s: f64,
    /// Rows (distinct requested rates).
    pub rows: usize,
}

/// The report generator's aggregation: `stages` (figures, requested rate in milli-req/s) grouped
/// by requested rate (the warmup and the ladder stage of the same rate form one row: mean of
/// their tok/s and latencies, sum of their successes), then [`Summary2025`]. `None` if a stage is
/// missing (a stage without requests cannot be averaged honestly) or there is none.
pub fn summary_2025(stages: &[(Option<StageFigures>, u64)]) -> Option<Summary2025> {
    let mut rows: BTreeMap<u64, Vec<StageFigures>> = BTreeMap::new();
    for (f, rate) in stages {
        rows.entry(*rate).or_default().push((*f)?);
    }
    if rows.is_empty() {
        return None;
    }
    let mean = |g: &[StageFigures], f: fn(&StageFigures) -> f64| g.iter().map(f).sum::<f64>() / g.len() as f64;
    let agg: Vec<(f64, f64, f64, f64)> = rows
        .values()
        .map(|g| {
            let n = g.iter().map(|s| s.successes).sum::<u64>() as f64;
            (mean(g, |s| s.output_tok_s), mean(g, |s| s.ttft_p90_s), mean(g, |s| s.ttft_mean_s), n)
        })
        .collect();
    let n: f64 = agg.iter().map(|r| r.3).sum();
    Some(Summary2025 {
        output_tok_s: agg.iter().map(|r| r.0).sum::<f64>() / agg.len() as f64,
        ttft_p90_s: agg.iter().map(|r| r.1 * r.3).sum::<f64>() / n,
        ttft_mean_s: agg.iter().map(|r| r.2 * r.3).sum::<f64>() / n,
        rows: agg.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn req(send_ms: u64, ttft_ms: u64, e2e_ms: u64) -> Req {
        Req {
            stage: None,
            send_ns: send_ms * 1_000_000,
            ttft_ns: ttft_ms * 1_000_000,
            e2e_ns: e2e_ms * 1_000_000,
            input_tokens: 7200,
            output_tokens: 1000,
            ok: true,
        }
    }

    #[test]
    fn counted_tokens_replace_the_generated_ones_of_successful_requests_only() {
        let ok = req(0, 100, 2000);
        let gone = Req { ok: false, ..req(10, 100, 2000) };
        assert_eq!(as_counted(vec![ok, gone], None), vec![ok, gone]);
        let c = as_counted(vec![ok, gone], Some(760));
        assert_eq!((c[0].output_tokens, c[1].output_tokens), (760, gone.output_tokens));
        assert_eq!(Req { output_tokens: ok.output_tokens, ..c[0] }, ok);
        // a stage's output tok/s scales with the count: 760 / 1,000 of the generated figure
        let f = |v: &[Req]| stage_figures(v).unwrap().output_tok_s;
        let stage: Vec<Req> = (0..10).map(|i| req(i * 100, 50, 3000)).collect();
        let ratio = f(&as_counted(stage.clone(), Some(760))) / f(&stage);
        assert!((ratio - 0.76).abs() < 1e-12, "{ratio}");
    }

    #[test]
    fn linear_percentiles_are_numpys() {
        // numpy.percentile([1, 2, 3, 4], 90) = 3.7; [10] -> 10; [] -> None.
        assert!((percentile_linear(&[1.0, 2.0, 3.0, 4.0], 90.0).unwrap() - 3.7).abs() < 1e-12);
        assert!((percentile_linear(&[1.0, 2.0, 3.0, 4.0], 50.0).unwrap() - 2.5).abs() < 1e-12);
        assert_eq!(percentile_linear(&[10.0], 90.0), Some(10.0));
        assert_eq!(percentile_linear(&[], 90.0), None);
    }

    #[test]
    fn the_published_hand_computed_stage() {
        // docs/PUBLISHED.md: the 60 req/s stage (25 s) with every request TTFT 1 s, E2E 10 s,
        // evenly spaced: 1,500 x 1,000 / (25 - 1/60 + 10) = 42,877.6 tok/s.
        let reqs: Vec<Req> = (0..1500).map(|i| req(i * 1000 / 60, 1000, 10_000)).collect();
        let f = stage_figures(&reqs).unwrap();
        // Sends at floor(i x 1000 / 60) ms: the last at 24,983 ms.
        let expected = 1_500_000.0 / (24.983 + 10.0);
        assert!((f.output_tok_s - expected).abs() < 1e-6, "{}", f.output_tok_s);
        assert!((f.output_tok_s - 42_877.6).abs() < 1.0, "{}", f.output_tok_s);
        assert_eq!((f.ttft_p90_s, f.ttft_mean_s, f.e2e_p50_s), (1.0, 1.0, 10.0));
        assert!((f.achieved_rate - 1500.0 / 24.983).abs() < 1e-9);
        // client TPOT: (10 - 1) s over the 999 tokens after the first = 9.009 ms
        assert!((f.tpot_p50_s - 9.0 / 999.0).abs() < 1e-12, "{}", f.tpot_p50_s);
    }

    #[test]
    fn failures_extend_the_window_but_count_nothing() {
        // Two successes (send 0 and 1 s, E2E 2 s) and a timeout sent at 1 s lasting 10 s:
        // total_time = 11 - 0 = 11 s; tokens 2 x 1,000 / 11; TTFT over the successes only.
        let mut t = req(1000, 9000, 10_000);
        t.ok = false;
        let f = stage_figures(&[req(0, 100, 2000), req(1000, 300, 2000), t]).unwrap();
        assert_eq!((f.requests, f.successes), (3, 2));
        assert!((f.total_time_s - 11.0).abs() < 1e-12);
        assert!((f.output_tok_s - 2000.0 / 11.0).abs() < 1e-9);
        assert!((f.input_tok_s - 2.0 * 7200.0 / 11.0).abs() < 1e-9);
        // linear p90 of [0.1, 0.3] = 0.1 + 0.9 x 0.2 = 0.28; mean 0.2.
        assert!((f.ttft_p90_s - 0.28).abs() < 1e-12 && (f.ttft_mean_s - 0.2).abs() < 1e-12);
        assert!((f.achieved_rate - 3.0).abs() < 1e-12);
    }

    #[test]
    fn stage_of_prefers_the_record_and_falls_back_to_windows() {
        let w = back_to_back(&[2 * S, 3 * S]);
        assert_eq!(w, vec![(0, 2 * S), (2 * S, 5 * S)]);
        assert_eq!(stage_of(&req(1999, 0, 0), &w), Some(0));
        assert_eq!(stage_of(&req(2000, 0, 0), &w), Some(1));
        assert_eq!(stage_of(&req(5000, 0, 0), &w), None);
        // Drained stages: the record wins over the arrival time.
        let mut r = req(100, 0, 0);
        r.stage = Some(1);
        assert_eq!(stage_of(&r, &w), Some(1));
    }

    #[test]
    fn the_report_rows_merge_equal_rates_and_weight_ttft_by_successes() {
        // Three stages: warmup 15 req/s, 3 req/s, 15 req/s. Row 15 = mean of its two stages'
        // tok/s (100, 300 -> 200) and p90 (1, 3 -> 2) with 2 + 4 = 6 successes; row 3: 50 tok/s,
        // p90 10 s, 2 successes. Summary: tok/s (200 + 50) / 2 = 125; p90 (2 x 6 + 10 x 2) / 8 = 4.
        let st = |tok: f64, p90: f64, n: u64| StageFigures {
            requests: n,
            successes: n,
            total_time_s: 1.0,
            output_tok_s: tok,
            input_tok_s: 0.0,
            achieved_rate: 1.0,
            ttft_p50_s: 0.0,
            ttft_p90_s: p90,
            ttft_mean_s: p90 / 2.0,
            e2e_p50_s: 0.0,
            tpot_p50_s: 0.0,
        };
        let s = summary_2025(&[
            (Some(st(100.0, 1.0, 2)), 15_000),
            (Some(st(50.0, 10.0, 2)), 3000),
            (Some(st(300.0, 3.0, 4)), 15_000),
        ])
        .unwrap();
        assert_eq!(s.rows, 2);
        assert!((s.output_tok_s - 125.0).abs() < 1e-12);
        assert!((s.ttft_p90_s - 4.0).abs() < 1e-12);
        assert!((s.ttft_mean_s - 2.0).abs() < 1e-12);
        // A stage that served nothing: no summary (never a silent mean over fewer rows).
        assert_eq!(summary_2025(&[(Some(st(1.0, 1.0, 1)), 3000), (None, 15_000)]), None);
        assert_eq!(summary_2025(&[]), None);
    }

    #[test]
    fn outcome_lines_parse_with_and_without_the_load_generators_fields() {
        let r = parse_outcome(r#"{"index":0,"arrival_ns":5,"ttft_ns":2,"e2e_ns":9}"#, (7200, 1000)).unwrap();
        assert_eq!((r.stage, r.ok, r.output_tokens, r.end_ns()), (None, true, 1000, 14));
        let r =
            parse_outcome(r#"{"arrival_ns":5,"ttft_ns":2,"e2e_ns":9,"stage":3,"status":"timed_out"}"#, (1, 1)).unwrap();
        assert_eq!((r.stage, r.ok), (Some(3), false));
        assert!(parse_outcome(r#"{"arrival_ns":5,"ttft_ns":2,"e2e_ns":9,"status":"lost"}"#, (1, 1)).is_err());
        assert!(parse_outcome(r#"{"arrival_ns":5}"#, (1, 1)).is_err());
    }
}
