//! `--report-llmd FILE`: a run's results as llm-d-benchmark's benchmark report, schema v0.1
//! (llm-d/llm-d-benchmark `workload/report/benchmark_report_v0_1.py` @ 4fb7913b, the pydantic
//! model `BenchmarkReportV01`; `workload/report/README.md` @ 6177de12 describes it). Every key
//! written is documented in docs/MODEL.md, "--report-llmd: llm-d-benchmark's benchmark report";
//! what a simulation cannot fill (hardware metrics, the accelerator, wall-clock start and stop)
//! is left out, as the schema's optional fields allow (`dump()` excludes None).
//!
//! Statistics are numpy's (mean, `std` with ddof 0, linear percentiles), in the schema's units:
//! `count` for lengths, `ms` for TTFT and E2E, `ms/token` for TPOT, NTPOT and ITL.

use brokerlab_core::fleet::Completion;
use serde_json::{Map, Value, json};

use super::BatchedSummary;
use super::stages::percentile_linear;

/// The schema's version written.
pub const VERSION: &str = "0.1";

/// The percentiles written for a distribution (the schema's `p10` ... `p99` keys).
const PCTS: [(&str, f64); 7] =
    [("p10", 10.0), ("p25", 25.0), ("p50", 50.0), ("p75", 75.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0)];

/// What a report says of the workload (`scenario.load`).
pub struct Load {
    /// The schema's `WorkloadGenerator`: `inference-perf` for a `[load]` run (its load
    /// generator), `vllm-benchmark` for a replayed trace or a scenario's own arrivals (vLLM's
    /// benchmark_serving replays a dataset at its timestamps or a rate).
    pub name: &'static str,
    /// `scenario.load.type`: `trace`, `scenario` or the `[load]` type.
    pub kind: String,
    /// `scenario.load.args`: the input file and what shaped the load.
    pub args: Map<String, Value>,
}

/// A `Statistics` object of `v` (any order) in `units`; None when `v` is empty (the schema's
/// `mean` is required, so an empty distribution is left out).
fn statistics(units: &str, mut v: Vec<f64>) -> Option<Value> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    let mut o = Map::new();
    o.insert("units".into(), json!(units));
    o.insert("mean".into(), json!(mean));
    o.insert("stddev".into(), json!(var.sqrt()));
    o.insert("min".into(), json!(v[0]));
    for (k, p) in PCTS {
        o.insert(k.into(), json!(percentile_linear(&v, p)));
    }
    o.insert("max".into(), json!(v[v.len() - 1]));
    Some(Value::Object(o))
}

/// The v0.1 report of a batched-engine run: `done` its completions, `s` its summary, `load` the
/// workload, `router` the router's name (its pipeline for a router config). The requests
/// without a completion are those the server aborted at their client's time-out
/// (`requests.incomplete`); `refused` requests the server refused at once (conversation replay's
/// turns over `max_model_len`) are `requests.failures`.
pub fn report(done: &[Completion], s: &BatchedSummary, load: Load, router: &str, refused: u64) -> Value {
    let aborted = s.requests.saturating_sub(done.len() as u64);
    let start = done.iter().map(|c| c.arrival_ns).min().unwrap_or(0);
    let end = done.iter().map(|c| c.finish_ns).max().unwrap_or(0);
    let dur_s = end.saturating_sub(start) as f64 / 1e9;
    let per_s = |x: f64| if dur_s > 0.0 { x / dur_s } else { 0.0 };
    let ms = |ns: u64| ns as f64 / 1e6;
    let input: u64 = done.iter().map(|c| c.input_tokens).sum();
    let output: u64 = done.iter().map(|c| c.output_tokens).sum();

    let mut latency = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            latency.insert(k.into(), v);
        }
    };
    // required by the schema: a mean of 0 when no request completed (as vLLM writes 0)
    let ttft = statistics("ms", done.iter().map(|c| ms(c.ttft_ns())).collect());
    put("time_to_first_token", Some(ttft.unwrap_or_else(|| json!({"units": "ms", "mean": 0.0}))));
    put(
        "time_per_output_token",
        statistics(
            "ms/token",
            done.iter()
                .filter(|c| c.output_tokens > 1)
                .map(|c| ms(c.finish_ns - c.first_token_ns) / (c.output_tokens - 1) as f64)
                .collect(),
        ),
    );
    put(
        "normalized_time_per_output_token",
        statistics("ms/token", done.iter().map(|c| ms(c.e2e_ns()) / c.output_tokens.max(1) as f64).collect()),
    );
    // ITL: the mean is exact (a request's gaps sum to finish - first token); the percentiles are
    // the engine's own per-token samples (nearest rank); no spread is known per token
    let gaps: u64 = done.iter().map(|c| c.output_tokens.max(1) - 1).sum();
    if gaps > 0 {
        let gap_ns: u128 = done.iter().map(|c| (c.finish_ns - c.first_token_ns) as u128).sum();
        let mut itl = Map::new();
        itl.insert("units".into(), json!("ms/token"));
        itl.insert("mean".into(), json!(gap_ns as f64 / gaps as f64 / 1e6));
        for (k, v) in [("p50", s.itl_p50), ("p90", s.itl_p90), ("p99", s.itl_p99)] {
            if let Some(x) = v {
                itl.insert(k.into(), json!(x * 1e3));
            }
        }
        put("inter_token_latency", Some(Value::Object(itl)));
    }
    put("request_latency", statistics("ms", done.iter().map(|c| ms(c.e2e_ns())).collect()));

    let mut requests = Map::new();
    requests.insert("total".into(), json!(done.len() as u64 + aborted + refused));
    requests.insert("failures".into(), json!(refused));
    requests.insert("incomplete".into(), json!(aborted));
    let zero = || json!({"units": "count", "mean": 0.0});
    requests.insert(
        "input_length".into(),
        statistics("count", done.iter().map(|c| c.input_tokens as f64).collect()).unwrap_or_else(zero),
    );
    requests.insert(
        "output_length".into(),
        statistics("count", done.iter().map(|c| c.output_tokens as f64).collect()).unwrap_or_else(zero),
    );

    let mut metrics = Map::new();
    metrics.insert("time".into(), json!({ "duration": dur_s }));
    metrics.insert("requests".into(), Value::Object(requests));
    metrics.insert("latency".into(), Value::Object(latency));
    metrics.insert(
        "throughput".into(),
        json!({
            "input_tokens_per_sec": per_s(input as f64),
            "output_tokens_per_sec": per_s(output as f64),
            "total_tokens_per_sec": per_s((input + output) as f64),
            "requests_per_sec": per_s(done.len() as f64),
        }),
    );
    if let Some(w) = s.mean_waiting {
        // the time-average of each pod's waiting queue, averaged over the pods: a mean only
        metrics.insert("service".into(), json!({ "queue_size": { "units": "count", "mean": w } }));
    }
    metrics.insert("description".into(), json!("simulated by brokerlab; docs/MODEL.md, \"--report-llmd\""));

    let mut args = Map::new();
    args.insert("router".into(), json!(router));
    args.insert("pods".into(), json!(s.pods));
    args.insert("kv_blocks_per_pod".into(), json!(s.capacity));
    args.insert("block_tokens".into(), json!(brokerlab_core::fleet::limits::BLOCK_TOKENS));
    args.insert("max_num_seqs".into(), json!(s.max_num_seqs));
    args.insert("max_num_batched_tokens".into(), json!(s.max_num_batched_tokens));
    args.insert("profile".into(), json!(s.profile));
    json!({
        "version": VERSION,
        "scenario": {
            "description": format!("brokerlab simulation: {router} over {} pods (engine: batched, profile {})", s.pods, s.profile),
            "platform": { "engine": [{ "name": "brokerlab-simulation", "version": env!("CARGO_PKG_VERSION"), "args": args }] },
            "model": { "name": s.profile },
            "load": { "name": load.name, "type": load.kind, "args": load.args },
        },
        "metrics": metrics,
    })
}

/// Writes `--report-llmd FILE`: one report, or (`fleet compare`) a JSON array of one report per
/// run; exit 2 under the FIFO engine (it has no token stream).
pub fn write(path: &std::path::Path, reports: &[Value]) -> crate::error::CliResult<()> {
    let text = match reports {
        [one] => serde_json::to_string_pretty(one),
        many => serde_json::to_string_pretty(many),
    }
    .expect("a JSON value serializes");
    crate::outfile::write(path, text.as_bytes())
        .map_err(|e| crate::error::CliError::failure(format!("--report-llmd {}: cannot write: {e}", path.display())))
}

/// The refusal under the FIFO engine.
pub fn fifo_refused() -> crate::error::CliError {
    crate::error::CliError::bad_input(
        "--report-llmd: only with --engine batched (the FIFO engine has no token stream: no TTFT, TPOT or ITL)",
    )
}

/// What `--report-llmd` says of a run's load: `kind` (`trace`, `scenario`) read from `file`
/// (named `key` in the args), or the scenario's `[load]` (inference-perf's load generator).
pub fn load_of(
    kind: &str,
    key: &str,
    file: &std::path::Path,
    load: Option<&brokerlab_core::fleet::loadgen::LoadSpec>,
) -> Load {
    use brokerlab_core::fleet::loadgen::LoadKind;
    let mut args = serde_json::Map::new();
    args.insert(key.into(), serde_json::json!(file.display().to_string()));
    let Some(l) = load else {
        return Load { name: "vllm-benchmark", kind: kind.into(), args };
    };
    let kind = match l.kind {
        LoadKind::Poisson => "poisson",
        LoadKind::Constant => "constant",
        LoadKind::Concurrent => "concurrent",
    };
    let stages: Vec<serde_json::Value> = l
        .stages()
        .iter()
        .map(|st| match l.kind {
            LoadKind::Concurrent => {
                serde_json::json!({"concurrency_level": st.concurrency, "num_requests": st.num_requests})
            }
            _ => serde_json::json!({"rate": st.rate_milli_per_s as f64 / 1e3, "duration": st.duration_ms as f64 / 1e3}),
        })
        .collect();
    args.insert("stages".into(), serde_json::Value::Array(stages));
    if l.timeout_ms > 0 {
        args.insert("request_timeout".into(), serde_json::json!(l.timeout_ms as f64 / 1e3));
    }
    Load { name: "inference-perf", kind: kind.into(), args }
}

#[cfg(test)]
mod tests {
    use super::statistics;

    #[test]
    fn statistics_are_numpys() {
        // np.mean/std/percentile of [1, 2, 3, 4]: 2.5, 1.118..., p10 1.3, p90 3.7
        let s = statistics("ms", vec![4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s["mean"], 2.5);
        assert!((s["stddev"].as_f64().unwrap() - 1.25f64.sqrt()).abs() < 1e-12);
        assert!((s["p10"].as_f64().unwrap() - 1.3).abs() < 1e-12);
        assert!((s["p90"].as_f64().unwrap() - 3.7).abs() < 1e-12);
        assert_eq!((s["min"].as_f64(), s["max"].as_f64()), (Some(1.0), Some(4.0)));
        assert_eq!(s["units"], "ms");
        assert!(statistics("ms", vec![]).is_none());
    }
}
