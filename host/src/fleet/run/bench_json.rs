//! `--report-json FILE`: a run's results under the key names and units of `vllm bench serve`
//! (vllm-project/vllm `vllm/benchmarks/serve.py` at 009e6d4a: `calculate_metrics` and the
//! `result` dict of `benchmark`), so a dashboard that reads vLLM's result files reads these.
//! Each key is documented in docs/MODEL.md, "--report-json: vLLM's result keys".
//!
//! Times are milliseconds (`*_ms`) or seconds (`duration`), rates per second, as vLLM writes
//! them; statistics as numpy computes them (`np.mean`, `np.std` with ddof 0, `np.median`,
//! `np.percentile` with linear interpolation).

use brokerlab_core::fleet::Completion;
use serde_json::{Map, Value, json};

use super::BatchedSummary;

/// The percentiles written for each latency metric (`vllm bench serve --metric-percentiles
/// 50,90,99`; vLLM's default is 99 only).
pub const PERCENTILES: [u32; 3] = [50, 90, 99];

/// numpy's default percentile (linear interpolation between the closest ranks) of sorted `v`.
pub fn np_percentile(sorted: &[f64], p: f64) -> f64 {
    super::stages::percentile_linear(sorted, p).unwrap_or(0.0)
}

/// mean, median, std (ddof 0) and [`PERCENTILES`] of `v` (seconds), in ms, under vLLM's keys for
/// `metric`; an empty list gives zeros, as numpy does on vLLM's `values or 0`.
fn stats(out: &mut Map<String, Value>, metric: &str, mut v: Vec<f64>) {
    v.sort_by(f64::total_cmp);
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    out.insert(format!("mean_{metric}_ms"), json!(mean * 1e3));
    out.insert(format!("median_{metric}_ms"), json!(np_percentile(&v, 50.0) * 1e3));
    out.insert(format!("std_{metric}_ms"), json!(var.sqrt() * 1e3));
    for p in PERCENTILES {
        out.insert(format!("p{p}_{metric}_ms"), json!(np_percentile(&v, p as f64) * 1e3));
    }
}

/// The time of token `k` (0-based) of `n` of `c`: the engine reports a request's first and last
/// token times; the tokens between are spread evenly (as the llm-d section's per-stage figures).
fn token_ns(c: &Completion, k: u64, n: u64) -> u64 {
    let span = c.finish_ns.saturating_sub(c.first_token_ns) as u128;
    if n <= 1 {
        return c.first_token_ns;
    }
    c.first_token_ns + (k as u128 * span / (n - 1) as u128) as u64
}

/// vLLM's result object for a batched-engine run: `done` are its completions, `s` its summary.
pub fn vllm_result(done: &[Completion], s: &BatchedSummary) -> Map<String, Value> {
    let mut o = Map::new();
    let start = done.iter().map(|c| c.arrival_ns).min().unwrap_or(0);
    let end = done.iter().map(|c| c.finish_ns).max().unwrap_or(0);
    // vLLM: wall time from the first request sent to the last response
    let dur_s = end.saturating_sub(start) as f64 / 1e9;
    let per_s = |x: f64| if dur_s > 0.0 { x / dur_s } else { 0.0 };
    let input: u64 = done.iter().map(|c| c.input_tokens).sum();
    let output: u64 = done.iter().map(|c| c.output_tokens).sum();
    o.insert("backend".into(), json!("brokerlab-simulation"));
    o.insert("duration".into(), json!(dur_s));
    o.insert("completed".into(), json!(done.len()));
    // no errors; the requests the server aborted at their client's time-out never complete
    o.insert("failed".into(), json!(s.requests.saturating_sub(done.len() as u64)));
    o.insert("total_input_tokens".into(), json!(input));
    o.insert("total_output_tokens".into(), json!(output));
    o.insert("request_throughput".into(), json!(per_s(done.len() as f64)));
    // vLLM writes null without --goodput
    o.insert("request_goodput".into(), Value::Null);
    o.insert("output_throughput".into(), json!(per_s(output as f64)));
    o.insert("total_token_throughput".into(), json!(per_s((input + output) as f64)));

    // vLLM's peak: tokens per 1-second bucket from the first request's start; concurrency by a
    // sweep over [start, end) with departures first at equal times
    let buckets = (end.saturating_sub(start) / 1_000_000_000 + 2) as usize;
    let mut per_bucket = vec![0u64; buckets];
    let mut events: Vec<(u64, i8)> = Vec::with_capacity(done.len() * 2);
    for c in done {
        let n = c.output_tokens.max(1);
        for k in 0..n {
            let b = ((token_ns(c, k, n) - start) / 1_000_000_000) as usize;
            if let Some(x) = per_bucket.get_mut(b) {
                *x += 1;
            }
        }
        events.push((c.arrival_ns, 1));
        events.push((c.finish_ns, -1));
    }
    events.sort_unstable();
    let (mut cur, mut peak) = (0i64, 0i64);
    for (_, d) in events {
        cur += d as i64;
        peak = peak.max(cur);
    }
    o.insert("max_output_tokens_per_s".into(), json!(per_bucket.iter().copied().max().unwrap_or(0)));
    o.insert("max_concurrent_requests".into(), json!(peak));

    let secs = |ns: u64| ns as f64 / 1e9;
    stats(&mut o, "ttft", done.iter().map(|c| secs(c.ttft_ns())).collect());
    stats(
        &mut o,
        "tpot",
        done.iter()
            .filter(|c| c.output_tokens > 1)
            .map(|c| secs(c.finish_ns - c.first_token_ns) / (c.output_tokens - 1) as f64)
            .collect(),
    );
    // ITL: vLLM lists every gap between tokens. The mean is exact (the gaps of a request sum to
    // finish - first); median and percentiles are the engine's own ITL samples' (nearest rank,
    // `BatchedSummary::itl_*`); the std spreads each request's gaps evenly (approximate: it leaves
    // out the variation within a request).
    let gaps: u64 = done.iter().map(|c| c.output_tokens.max(1) - 1).sum();
    let gap_ns: u128 = done.iter().map(|c| (c.finish_ns - c.first_token_ns) as u128).sum();
    let mean_itl_s = if gaps > 0 { gap_ns as f64 / gaps as f64 / 1e9 } else { 0.0 };
    let var: f64 = if gaps > 0 {
        done.iter()
            .filter(|c| c.output_tokens > 1)
            .map(|c| {
                let m = c.output_tokens - 1;
                let g = secs(c.finish_ns - c.first_token_ns) / m as f64;
                (g - mean_itl_s) * (g - mean_itl_s) * m as f64
            })
            .sum::<f64>()
            / gaps as f64
    } else {
        0.0
    };
    o.insert("mean_itl_ms".into(), json!(mean_itl_s * 1e3));
    o.insert("median_itl_ms".into(), json!(s.itl_p50.unwrap_or(0.0) * 1e3));
    o.insert("std_itl_ms".into(), json!(var.sqrt() * 1e3));
    o.insert("p50_itl_ms".into(), json!(s.itl_p50.unwrap_or(0.0) * 1e3));
    o.insert("p90_itl_ms".into(), json!(s.itl_p90.unwrap_or(0.0) * 1e3));
    o.insert("p99_itl_ms".into(), json!(s.itl_p99.unwrap_or(0.0) * 1e3));
    stats(&mut o, "e2el", done.iter().map(|c| secs(c.finish_ns - c.arrival_ns)).collect());
    o
}

/// Writes `--report-json` for a run: vLLM's keys, the router and pods, and the provenance when
/// the run has one (`refused`: requests the server refused at once, never dispatched, counted in
/// `failed`); exit 2 under the FIFO engine (it has no tokens, so no TTFT or ITL).
pub fn write(
    path: &std::path::Path,
    res: &super::RunResult,
    prov: Option<&crate::provenance::Provenance>,
    refused: u64,
) -> crate::error::CliResult<()> {
    use crate::error::CliError;
    let Some(b) = res.summary.batched() else {
        return Err(CliError::bad_input(
            "--report-json: only with --engine batched (the FIFO engine has no token stream: no TTFT, TPOT or ITL)",
        ));
    };
    let mut o = vllm_result(&res.completions, b);
    if refused > 0 {
        // the turns the server refused for their length (conversation replay) failed too
        let failed = o.get("failed").and_then(Value::as_u64).unwrap_or(0);
        o.insert("failed".into(), json!(failed + refused));
    }
    o.insert("router".into(), json!(b.pipeline.clone().unwrap_or_else(|| b.router.name().to_string())));
    o.insert("pods".into(), json!(b.pods));
    let text = match prov {
        Some(p) => p.json_with(&o),
        None => serde_json::to_string_pretty(&o).expect("a JSON map serializes"),
    };
    crate::outfile::write(path, text.as_bytes())
        .map_err(|e| CliError::failure(format!("--report-json {}: cannot write: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::np_percentile;

    #[test]
    fn percentile_interpolates_as_numpy() {
        // np.percentile([1, 2, 3, 4], [50, 90, 99]) = [2.5, 3.7, 3.97]
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(np_percentile(&v, 50.0), 2.5);
        assert!((np_percentile(&v, 90.0) - 3.7).abs() < 1e-12);
        assert!((np_percentile(&v, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(np_percentile(&[5.0], 99.0), 5.0);
    }
}
