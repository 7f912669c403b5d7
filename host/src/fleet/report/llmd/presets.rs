//! The presets compared on the ramp: each router configuration as llm-d ran it, and its
//! published row.

use brokerlab_core::fleet::{FleetConfig, RouterKind, RouterSpec};
use serde::Serialize;

#[allow(clippy::wildcard_imports)]
use super::*;

/// The presets compared on the ramp, in the published order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// `llm-d-precise` (the guide's weights: precise prefix 2, kv-cache 1, queue 1).
    Precise,
    /// `llm-d-approximate` (the same weights, the approximate index sized as the pod).
    Approximate,
    /// `llm-d-load` (queue 1, kv-cache 1).
    Load,
    /// `random`; also the Kubernetes Service of the 2026 comparison.
    Random,
    /// `llm-d-affinity`: llm-d's 2026 routing (prefix-cache-affinity filter + token-load).
    Affinity,
    /// precise-scheduling as the benchmark configured it: precise prefix 3, kv-cache 2, queue 2.
    PreciseAsRun,
    /// estimated-scheduling as the benchmark configured it: approximate prefix 1, kv-cache 1,
    /// queue 1, as GIE v0.5.1 ran it: the first 256 blocks of 64 bytes of a prompt (168 keys)
    /// in an LRU of 31,250 blocks (20,420 keys) per pod.
    ApproximateAsRun,
}

/// The benchmark's `lruCapacityPerServer`: 31,250 entries per pod, each one 64-*byte* block of
/// the prompt's UTF-8 text (GIE v0.5.1 `prefix/plugin.go` `hashPrompt` L241-259 cuts
/// `[]byte(request.Prompt)`; its "4 characters per token" is only a comment), i.e. 2,000,000
/// bytes; at table 1's 6.12 bytes per server token (38,657 bytes of decoded random Qwen ids per
/// 6,315-token system prompt, docs/PUBLISHED.md A11, A13) 326,720 tokens = 20,420 16-token keys.
pub const AS_RUN_APPROX_LRU_BLOCKS: u64 = 20_420;

/// The benchmark's `maxPrefixBlocksToMatch`: GIE v0.5.1 hashes at most the first 256 blocks of
/// 64 bytes (16,384 bytes) of a prompt: at 6.12 bytes per server token the first 2,677 tokens,
/// so key 168 of 16 tokens holds the 256th block's end (the rule of A11, as the Sticky draft's
/// 159 at 6.445 bytes per id).
pub const AS_RUN_APPROX_MAX_BLOCKS: u64 = 168;

/// The UTF-8 bytes of table 1's group system prompt, the decoded text of inference-perf v0.2.0's
/// 6,000 random Qwen ids (mean over 150 groups, docs/PUBLISHED.md "The 2025 prompts as the server
/// tokenized them", item (b)): with the 6,315 tokens the server makes of it (A13), 6.12 bytes per
/// token, the rate [`AS_RUN_APPROX_MAX_BLOCKS`] and [`AS_RUN_APPROX_LRU_BLOCKS`] are converted at.
pub const TABLE1_SYSTEM_PROMPT_UTF8_BYTES: u64 = 38_657;

impl Preset {
    /// The four of the 2025 table, as the issue names them.
    pub const TABLE_2025: [Preset; 4] = [Preset::Precise, Preset::Approximate, Preset::Load, Preset::Random];
    /// Every preset run on the ramp.
    pub const ALL: [Preset; 7] = [
        Preset::Precise,
        Preset::Approximate,
        Preset::Load,
        Preset::Random,
        Preset::Affinity,
        Preset::PreciseAsRun,
        Preset::ApproximateAsRun,
    ];

    /// The router kind and its pipeline (RNG seeded with `seed`).
    pub fn router(self, seed: u64) -> (RouterKind, RouterSpec) {
        use brokerlab_core::fleet::{ScorerKind, WeightedScorer};
        let preset = |k: RouterKind| RouterSpec::preset(k).expect("a shipped preset");
        let (kind, mut spec) = match self {
            Preset::Precise => (RouterKind::LlmDPrecise, preset(RouterKind::LlmDPrecise)),
            Preset::Approximate => (RouterKind::LlmDApproximate, preset(RouterKind::LlmDApproximate)),
            Preset::Load => (RouterKind::LlmDLoad, preset(RouterKind::LlmDLoad)),
            Preset::Random => (RouterKind::Random, preset(RouterKind::Random)),
            Preset::Affinity => (RouterKind::LlmDAffinity, preset(RouterKind::LlmDAffinity)),
            Preset::PreciseAsRun | Preset::ApproximateAsRun => {
                let (prefix, w, kv_q) = if self == Preset::PreciseAsRun {
                    (ScorerKind::PrecisePrefixCache, 3.0, 2.0)
                } else {
                    (ScorerKind::PrefixCache, 1.0, 1.0)
                };
                let mut spec = RouterSpec::EMPTY;
                spec.scorers[0] = Some(WeightedScorer { kind: prefix, weight: w });
                spec.scorers[1] = Some(WeightedScorer { kind: ScorerKind::KvCacheUtilization, weight: kv_q });
                spec.scorers[2] = Some(WeightedScorer { kind: ScorerKind::Queue, weight: kv_q });
                if self == Preset::ApproximateAsRun {
                    spec.params.approx_lru_blocks = AS_RUN_APPROX_LRU_BLOCKS;
                    spec.params.approx_max_blocks = AS_RUN_APPROX_MAX_BLOCKS;
                }
                (RouterKind::Custom, spec)
            }
        };
        spec.params.seed = seed;
        (kind, spec)
    }

    /// The fleet of `base` routed by this preset.
    pub fn fleet(self, base: FleetConfig, seed: u64) -> FleetConfig {
        let (router, spec) = self.router(seed);
        FleetConfig { router, routing: Some(spec), ..base }
    }

    /// What llm-d published for it in 2025 (None: not in that table).
    pub fn published(self) -> Option<Published> {
        let p = |experiment, output_tok_s, ttft_p90_s, ttft_mean_s| {
            Some(Published { experiment, output_tok_s, ttft_p90_s, ttft_mean_s })
        };
        match self {
            Preset::Precise | Preset::PreciseAsRun => p("precise-scheduling", 8730.0, 0.542, 0.298),
            Preset::Approximate | Preset::ApproximateAsRun => p("estimated-scheduling", 6944.4, 31.083, 13.316),
            Preset::Load => p("load-scheduling", 4266.4, 94.865, 46.987),
            Preset::Random => p("random-scheduling", 4428.7, 92.551, 45.281),
            Preset::Affinity => None,
        }
    }

    /// Its label in tables.
    pub fn label(self) -> &'static str {
        match self {
            Preset::Precise => "llm-d-precise",
            Preset::Approximate => "llm-d-approximate",
            Preset::Load => "llm-d-load",
            Preset::Random => "random",
            Preset::Affinity => "llm-d-affinity",
            Preset::PreciseAsRun => "precise as benchmarked (3 / 2 / 2)",
            Preset::ApproximateAsRun => "approximate as benchmarked (1 / 1 / 1, 168 keys, LRU 20,420)",
        }
    }

    /// Its short name (per-stage table).
    pub fn upstream(self) -> &'static str {
        match self {
            Preset::PreciseAsRun => "precise (as run)",
            Preset::ApproximateAsRun => "approximate (as run)",
            p => p.label(),
        }
    }
}

/// The rows compared with llm-d's table: llm-d's own configurations (the benchmark file's
/// precise and estimated scorers), then load-only and random.
pub const AS_BENCHMARKED: [Preset; 4] = [Preset::PreciseAsRun, Preset::ApproximateAsRun, Preset::Load, Preset::Random];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::cli::router_config;
    use crate::fleet::report::published::cells::TABLE1_SERVER_SYSTEM_PROMPT_TOKENS;

    /// GIE v0.5.1's defaults as the benchmark set them: 64-byte blocks, 256 of them, 31,250 per pod.
    const GIE_BLOCK_BYTES: u64 = 64;
    const GIE_MAX_BLOCKS: u64 = 256;
    const GIE_LRU_ENTRIES: u64 = 31_250;
    const KEY_TOKENS: u64 = 16;

    #[test]
    fn the_as_run_index_is_gies_bytes_at_table_1s_bytes_per_token() {
        let tokens = u64::from(TABLE1_SERVER_SYSTEM_PROMPT_TOKENS);
        // bytes -> 16-token keys at TABLE1_SYSTEM_PROMPT_UTF8_BYTES / tokens bytes per token
        let per_key = TABLE1_SYSTEM_PROMPT_UTF8_BYTES * KEY_TOKENS;
        // the key holding the 256th block's last byte: ceil(16,384 x 6,315 / (38,657 x 16)) = 168
        let cap = (GIE_MAX_BLOCKS * GIE_BLOCK_BYTES * tokens).div_ceil(per_key);
        assert_eq!(AS_RUN_APPROX_MAX_BLOCKS, cap);
        // 31,250 x 64 bytes in keys, to the nearest: 20,420
        let lru = (2 * GIE_LRU_ENTRIES * GIE_BLOCK_BYTES * tokens + per_key) / (2 * per_key);
        assert_eq!(AS_RUN_APPROX_LRU_BLOCKS, lru);
        // both inside the group's system prompt: every user of a group hashes alike
        assert!(AS_RUN_APPROX_MAX_BLOCKS * KEY_TOKENS <= tokens);
    }

    #[test]
    fn the_estimated_as_run_draft_is_the_tables_row() {
        let text = include_str!("../../../../../docs/drafts/router-2025-estimated-as-run.toml");
        let (kind, mut spec, _) = router_config::parse(text, "--router-config", "draft").expect("the draft parses");
        let (row_kind, row) = Preset::ApproximateAsRun.router(0);
        spec.params.seed = row.params.seed;
        assert_eq!((kind, spec), (row_kind, row));
    }
}
