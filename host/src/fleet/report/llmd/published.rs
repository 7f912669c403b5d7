//! llm-d's published figures (2025 precise-prefix benchmark, 2026 optimized baseline), with
//! where each comes from.

use serde::Serialize;

#[allow(clippy::wildcard_imports)]
use super::*;

/// Where the 2025 figures come from.
pub const SOURCE_2025: &str = "llm-d-kv-cache-manager `benchmarking/73-capacity/README.md` (the workload file the llm-d blog \
     \"KV-Cache Wins You Can See\", 2025-09-24, links; read at zetxqx/llm-d-kv-cache-manager @ d070ea60)";
/// Where the 2026 figures come from.
pub const SOURCE_2026: &str =
    "llm-d/llm-d `guides/optimized-baseline/benchmark-results/vllm-qwen3-32b-h100/README.md` @ 53c5b20a";

/// One of llm-d's published rows (2025 precise-prefix benchmark).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Published {
    /// llm-d's experiment name.
    pub experiment: &'static str,
    /// Output tok/s: the mean over the 16 ladder stages of the per-stage figure (checked: the
    /// published per-stage rows average to it).
    pub output_tok_s: f64,
    /// TTFT p90 over the run, s.
    pub ttft_p90_s: f64,
    /// TTFT mean over the run, s.
    pub ttft_mean_s: f64,
}

/// The blog's output tok/s for load-scheduling (the report it links, and its per-stage rows, give
/// 4,266.4; the blog repeats random's 4,428.7).
pub const BLOG_LOAD_OUTPUT_TOK_S: f64 = 4428.7;

/// The 2026 comparison as published (`SOURCE_2026`): (peak output tok/s, TTFT p90 at rate 60, s).
pub const PUBLISHED_2026_AFFINITY: (f64, f64) = (14_941.0, 0.9);
/// The same for the Kubernetes Service (round-robin).
pub const PUBLISHED_2026_SERVICE: (f64, f64) = (7_049.0, 154.1);
/// The issue's figures for the same comparison (not found in any source read: docs/UPSTREAM.md).
pub const ISSUE_2026_AFFINITY: (f64, f64) = (14_892.0, 0.26);
/// The issue's figures for the Service.
pub const ISSUE_2026_SERVICE: (f64, f64) = (6_986.0, 135.5);

/// (output tok/s, TTFT p90 s) as published, precise / estimated / load / random.
pub fn published_rows() -> [(f64, f64); 4] {
    Preset::TABLE_2025.map(|p| p.published().map_or((f64::NAN, f64::NAN), |q| (q.output_tok_s, q.ttft_p90_s)))
}
