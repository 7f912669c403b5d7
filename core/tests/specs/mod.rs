//! Router specs shared by the run-length tests (core/tests/run_replay.rs under the FIFO engine,
//! core/tests/batched_index_runs.rs under the batched engine).

use brokerlab_core::fleet::*;
use proptest::prelude::*;

/// The presets with a router-side approximate index (kept as runs, recorded in prompt order).
pub const APPROX_PRESETS: [RouterKind; 5] = [
    RouterKind::LlmDApproximate,
    RouterKind::GieDefault,
    RouterKind::LlmDAffinity,
    RouterKind::SglangCacheAware,
    RouterKind::VllmLoadaware,
];

/// A pipeline reading the approximate index: the prefix-cache scorer or an approximate prefix
/// source (affinity filter, no-hit-lru), with any other scorers, picker and seed; or SGLang or
/// vllm-loadaware with random thresholds. Every one with a random LRU size (small: evictions)
/// and a random cap on the keys the index sees (`approx_max_blocks`).
pub fn approx_spec() -> impl Strategy<Value = RouterSpec> {
    let scorer = (proptest::sample::select(ScorerKind::ALL.to_vec()), 0u32..4)
        .prop_map(|(kind, w)| WeightedScorer { kind, weight: w as f64 });
    let pickers = [PickerKind::MaxScore, PickerKind::MaxScoreLowestIndex, PickerKind::Random];
    (
        proptest::collection::vec(scorer, 0..4),
        any::<bool>(),
        proptest::sample::select(pickers.to_vec()),
        any::<u64>(),
        (0.0f64..1.0, 0u32..5, 0.0f64..2.0),
        (0usize..4, 1u64..200, 0u32..80, 1.0f64..3.0),
        prop_oneof![Just(0u64), 1u64..40],
    )
        .prop_map(|(scorers, filter, picker, seed, (affinity, no_hit, x), (policy, lru, abs, rel), max_blocks)| {
            let mut spec = match policy {
                0 => RouterSpec::preset(RouterKind::SglangCacheAware).unwrap(),
                1 => RouterSpec::preset(RouterKind::VllmLoadaware).unwrap(),
                _ => {
                    let mut spec = RouterSpec::preset(RouterKind::LlmDApproximate).unwrap();
                    spec.scorers = [None; MAX_SCORERS];
                    spec.scorers[0] = Some(WeightedScorer { kind: ScorerKind::PrefixCache, weight: x });
                    for (slot, s) in spec.scorers.iter_mut().skip(1).zip(scorers) {
                        *slot = Some(s);
                    }
                    spec.filters = [filter.then_some(FilterKind::PrefixCacheAffinity), None];
                    spec.picker = picker;
                    spec.params.prefix_source =
                        if policy == 3 { PrefixSource::Approximate } else { PrefixSource::Auto };
                    spec.params.affinity_threshold = affinity;
                    spec.params.no_hit_lru_size = no_hit.max(1);
                    spec.params.max_ttft_penalty_ms = x * 100.0;
                    spec
                }
            };
            spec.params.approx_lru_blocks = lru;
            // GIE's maxPrefixBlocksToMatch (0: every key): a cut inside a group too.
            spec.params.approx_max_blocks = max_blocks;
            spec.params.cache_threshold = x / 2.0;
            spec.params.balance_abs_threshold = abs;
            spec.params.balance_rel_threshold = rel;
            spec.params.vllm_beta = x;
            spec.params.seed = seed;
            spec
        })
}
