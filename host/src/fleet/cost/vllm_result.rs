//! `vllm bench serve --save-result --save-detailed` result files: the per-request fields a fit of
//! TTFT and ITL needs (vLLM `vllm/benchmarks/serve.py`, `benchmark()` and `main()`, read at
//! inference-sim/vllm @ f6ec81c7, upstream 2026-01-22). Without `--save-detailed` vLLM drops
//! `input_lens`, `output_lens`, `start_times`, `ttfts`, `itls`, `generated_texts` and `errors`
//! from the file; a missing one is bad input naming it.

use serde_json::{Map, Value};

/// One request of a result file.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Prompt tokens (`input_lens`).
    pub input_tokens: u64,
    /// Output tokens (`output_lens`).
    pub output_tokens: u64,
    /// Seconds from the benchmark's start (`start_times`, newer vLLM only).
    pub start_s: Option<f64>,
    /// Time to first token, s (`ttfts`).
    pub ttft_s: f64,
    /// Gaps between streamed outputs, s (`itls`).
    pub itls_s: Vec<f64>,
}

/// The run's load and its successful requests.
#[derive(Clone, Debug, PartialEq)]
pub struct VllmResult {
    /// `request_rate` (requests/s; `None` for "inf").
    pub request_rate: Option<f64>,
    /// `max_concurrency` (`None` when unlimited).
    pub max_concurrency: Option<u64>,
    /// Requests without an error, in file order.
    pub requests: Vec<Measured>,
    /// Requests with an error (left out).
    pub failed: usize,
}

const HOW: &str = "vllm bench serve writes it with --save-result --save-detailed";

fn array<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a Vec<Value>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(format!("field `{key}`: missing ({HOW})")),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(format!("field `{key}`: not an array")),
    }
}

fn num(v: &Value, key: &str, i: usize) -> Result<f64, String> {
    v.as_f64()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("field `{key}[{i}]`: {v} is not a number >= 0"))
}

fn count(v: &Value, key: &str, i: usize) -> Result<u64, String> {
    v.as_u64().ok_or_else(|| format!("field `{key}[{i}]`: {v} is not a whole number >= 0"))
}

/// Parses a result file's text.
pub fn parse(text: &str) -> Result<VllmResult, String> {
    let root: Value =
        serde_json::from_str(text.trim_start_matches('\u{feff}')).map_err(|e| format!("not JSON: {e}"))?;
    let obj = root.as_object().ok_or("not a JSON object")?;
    let (inp, out, ttfts, itls) =
        (array(obj, "input_lens")?, array(obj, "output_lens")?, array(obj, "ttfts")?, array(obj, "itls")?);
    let n = inp.len();
    for (key, a) in [("output_lens", out), ("ttfts", ttfts), ("itls", itls)] {
        if a.len() != n {
            return Err(format!("field `{key}`: {} entries, `input_lens` has {n} (one per request expected)", a.len()));
        }
    }
    let starts = match obj.get("start_times") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) if a.len() == n => Some(a),
        Some(_) => return Err(format!("field `start_times`: expected an array of {n} numbers")),
    };
    let errors = match obj.get("errors") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) if a.len() == n => Some(a),
        Some(_) => return Err(format!("field `errors`: expected an array of {n} strings")),
    };
    let request_rate = match obj.get("request_rate") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "inf" => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|r| r.is_finite() && *r > 0.0)
                .ok_or_else(|| format!("field `request_rate`: {v} is not a positive number or \"inf\""))?,
        ),
    };
    let max_concurrency = match obj.get("max_concurrency") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|&c| c > 0)
                .ok_or_else(|| format!("field `max_concurrency`: {v} is not a whole number >= 1"))?,
        ),
    };
    let mut requests = Vec::with_capacity(n);
    let mut failed = 0;
    for i in 0..n {
        if errors.and_then(|e| e[i].as_str()).is_some_and(|s| !s.is_empty()) {
            failed += 1;
            continue;
        }
        let gaps = itls[i].as_array().ok_or_else(|| format!("field `itls[{i}]`: not an array"))?;
        requests.push(Measured {
            input_tokens: count(&inp[i], "input_lens", i)?,
            output_tokens: count(&out[i], "output_lens", i)?,
            start_s: starts.map(|s| num(&s[i], "start_times", i)).transpose()?,
            ttft_s: num(&ttfts[i], "ttfts", i)?,
            itls_s: gaps.iter().map(|g| num(g, "itls", i)).collect::<Result<_, _>>()?,
        });
    }
    Ok(VllmResult { request_rate, max_concurrency, requests, failed })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"{"date": "20260101-000000", "backend": "vllm", "request_rate": "inf", "max_concurrency": 8,
        "duration": 3.2, "completed": 2, "input_lens": [100, 2000, 50], "output_lens": [3, 2, 2],
        "ttfts": [0.05, 0.4, 0.0], "itls": [[0.02, 0.021], [0.03], []], "start_times": [0.0, 0.01, 0.02],
        "errors": ["", "", "timeout"]}"#;

    #[test]
    fn reads_the_detailed_fields() {
        let r = parse(OK).unwrap();
        assert_eq!((r.request_rate, r.max_concurrency, r.failed), (None, Some(8), 1));
        assert_eq!(r.requests.len(), 2);
        assert_eq!(
            r.requests[1],
            Measured { input_tokens: 2000, output_tokens: 2, start_s: Some(0.01), ttft_s: 0.4, itls_s: vec![0.03] }
        );
    }

    #[test]
    fn a_missing_or_bad_field_is_named() {
        for key in ["input_lens", "output_lens", "ttfts", "itls"] {
            let text = OK.replacen(&format!("\"{key}\""), "\"x\"", 1);
            let e = parse(&text).unwrap_err();
            assert!(e.starts_with(&format!("field `{key}`: missing")) && e.contains("--save-detailed"), "{e}");
        }
        let e = parse(&OK.replace("[0.05, 0.4, 0.0]", "[0.05, 0.4]")).unwrap_err();
        assert!(e.contains("field `ttfts`: 2 entries"), "{e}");
        let e = parse(&OK.replace("[0.03]", "[-1]")).unwrap_err();
        assert!(e.contains("field `itls[1]`"), "{e}");
        let e = parse(&OK.replace("\"inf\"", "\"fast\"")).unwrap_err();
        assert!(e.contains("field `request_rate`"), "{e}");
    }
}
