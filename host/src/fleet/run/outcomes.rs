//! `--outcomes FILE`: one JSON line per request of a batched run, in request order (compared with
//! tests/reference/batched_model.py by host/tests/reference_batched.rs).

use brokerlab_core::fleet::Completion;

use crate::error::{CliError, CliResult};

/// Writes a run's completions (kept with `keep`) as JSON lines in request order (`--outcomes`);
/// `more` gives a request's extra fields (`,"key":value...`), e.g. a Dynamo turn's session; with
/// `offload` (a run with the offload tier) each line ends with its `offload_hit_tokens`.
pub fn write_outcomes(
    path: &std::path::Path,
    completions: &[Completion],
    more: Option<&dyn Fn(u64) -> String>,
    offload: bool,
) -> CliResult<()> {
    let mut sorted: Vec<&Completion> = completions.iter().collect();
    sorted.sort_unstable_by_key(|c| c.request);
    // streamed to the file (no copy of the text in memory)
    crate::outfile::write_with(path, |w| {
        for c in sorted {
            writeln!(
                w,
                "{{\"index\":{},\"pod\":{},\"arrival_ns\":{},\"queue_len\":{},\"hit_tokens\":{},\"prefill_tokens\":{},\
                 \"ttft_ns\":{},\"e2e_ns\":{},\"preemptions\":{}{}{}}}",
                c.request,
                c.pod,
                c.arrival_ns,
                c.queue_len,
                c.hit_tokens,
                c.prefill_tokens,
                c.ttft_ns(),
                c.e2e_ns(),
                c.preemptions,
                if offload { format!(",\"offload_hit_tokens\":{}", c.offload_hit_tokens) } else { String::new() },
                more.map_or_else(String::new, |f| f(c.request))
            )?;
        }
        Ok(())
    })
    .map_err(|e| CliError::failure(format!("--outcomes {}: cannot write: {e}", path.display())))
}
