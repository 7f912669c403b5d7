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
    /// queue 1, as GIE v0.5.1 ran it: the first 256 blocks of 64 characters of a prompt (256
    /// keys) in an LRU of 31,250 per pod.
    ApproximateAsRun,
}

/// The benchmark's `lruCapacityPerServer`: 31,250 entries per pod, each one 64-character block
/// of prompt text (GIE v0.5.1 `prefix/plugin.go`: `hashBlockSize` counts characters, "a good
/// guess of average characters per token is 4"), so one of brokerlab's 16-token keys each.
pub const AS_RUN_APPROX_LRU_BLOCKS: u64 = 31_250;

/// The benchmark's `maxPrefixBlocksToMatch`: GIE v0.5.1 hashes at most the first 256 blocks
/// of 64 characters (16,384 characters, about 4,096 tokens) of a prompt; at 64 characters per 16
/// tokens, 256 of brokerlab's keys.
pub const AS_RUN_APPROX_MAX_BLOCKS: u64 = 256;

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
            Preset::ApproximateAsRun => "approximate as benchmarked (1 / 1 / 1, 256 keys, LRU 31,250)",
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
