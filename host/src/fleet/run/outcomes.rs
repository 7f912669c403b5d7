//! `--outcomes FILE`: one JSON line per request of a batched run, in request order (compared with
//! tests/reference/batched_model.py by host/tests/reference_batched.rs).

use brokerlab_core::fleet::Completion;

use crate::error::{CliError, CliResult};

/// Writes a run's completions (kept with `keep`) as JSON lines in request order (`--outcomes`);
/// `more` gives a request's extra fields (`,"key":value...`), e.g. a Dynamo turn's session; with
/// `offload` (a run with the offload tier) each line ends with its `offload_hit_tokens`;
/// `aborted`: the lines of requests without a completion (the server aborted them), by request.
pub fn write_outcomes(
    path: &std::path::Path,
    completions: &[Completion],
    more: Option<&dyn Fn(u64) -> String>,
    offload: bool,
    pd: bool,
    aborted: &[(u64, String)],
) -> CliResult<()> {
    let mut sorted: Vec<&Completion> = completions.iter().collect();
    sorted.sort_unstable_by_key(|c| c.request);
    let mut aborted = aborted.iter().peekable();
    // streamed to the file (no copy of the text in memory)
    crate::outfile::write_with(path, |w| {
        for c in sorted {
            while let Some((_, line)) = aborted.next_if(|a| a.0 < c.request) {
                writeln!(w, "{line}")?;
            }
            writeln!(
                w,
                "{{\"index\":{},\"pod\":{},\"arrival_ns\":{},\"queue_len\":{},\"hit_tokens\":{},\"prefill_tokens\":{},\
                 \"ttft_ns\":{},\"e2e_ns\":{},\"preemptions\":{}{}{}{}}}",
                c.request,
                c.pod,
                c.arrival_ns,
                c.queue_len,
                c.hit_tokens,
                c.prefill_tokens,
                c.ttft_ns(),
                c.e2e_ns(),
                c.preemptions,
                if pd { pd_fields(c) } else { String::new() },
                if offload { format!(",\"offload_hit_tokens\":{}", c.offload_hit_tokens) } else { String::new() },
                more.map_or_else(String::new, |f| f(c.request))
            )?;
        }
        for (_, line) in aborted {
            writeln!(w, "{line}")?;
        }
        Ok(())
    })
    .map_err(|e| CliError::failure(format!("--outcomes {}: cannot write: {e}", path.display())))
}

/// A request's P/D fields (docs/MODEL.md, "Metrics with P/D"): null or 0 when it was not
/// prefilled remotely.
fn pd_fields(c: &Completion) -> String {
    let p = &c.pd;
    if !p.disaggregated() {
        return ",\"prefill_pod\":null,\"prefill_queue_len\":null,\"decode_hit_tokens\":null,\"transfer_bytes\":0,\"transfer_ns\":null".into();
    }
    format!(
        ",\"prefill_pod\":{},\"prefill_queue_len\":{},\"decode_hit_tokens\":{},\"transfer_bytes\":{},\"transfer_ns\":{}",
        p.prefill_pod, p.prefill_queue_len, p.decode_hit_tokens, p.transfer_bytes, p.transfer_ns
    )
}
