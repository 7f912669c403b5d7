//! The run-length replay ([`Fleet::attach_runs`]) against the per-block replay, its oracle: on
//! random traces of trace ids (shared prefixes, partial last ids, caches from smaller than one
//! id to larger than the trace), every outcome and every counter must be equal, for the seed's
//! routers and for every shipped router that keeps no approximate index (the presets
//! `llm-d-precise`, `llm-d-load`, `random`, `dynamo-kv`, and random pipelines over the precise
//! index with every scorer, filter and picker).

mod common;
mod specs;

use brokerlab_core::fleet::limits::MAX_PODS;
use brokerlab_core::fleet::route::seed::PrefixAware;
use brokerlab_core::fleet::*;
use common::{Bufs, fifo, view, with};
use proptest::prelude::*;
use specs::{APPROX_PRESETS, approx_spec};

/// A trace request: arrival step (ms), prompt ids, prompt length in tokens.
#[derive(Clone, Debug)]
struct TraceReq {
    gap_ms: u64,
    ids: Vec<u64>,
    tokens: u64,
}

/// Requests sharing prefixes: a prefix of one of a few "documents", then ids of its own.
fn trace(group_blocks: u32) -> impl Strategy<Value = Vec<TraceReq>> {
    let s = group_blocks as u64 * 16;
    let one = (0u64..4, 0usize..4, 0usize..3, 0u64..s, 0u64..40, any::<u64>());
    proptest::collection::vec(one, 1..60).prop_map(move |v| {
        v.into_iter()
            .map(|(doc, shared, own, partial, gap_ms, salt)| {
                // Document d is the id sequence d*100, d*100+1, ...; own ids are unique-ish.
                let mut ids: Vec<u64> = (0..shared as u64).map(|j| doc * 100 + j).collect();
                ids.extend((0..own as u64).map(|j| 1_000_000 + (salt % 7) * 10 + j));
                ids.push(5_000 + salt % 3);
                let tokens = (ids.len() as u64 - 1) * s + partial;
                TraceReq { gap_ms, ids, tokens }
            })
            .collect()
    })
}

fn replay(
    cfg: FleetConfig,
    group_blocks: u32,
    reqs: &[TraceReq],
    runs: bool,
) -> (Vec<Outcome>, FleetTotals, Vec<PodStats>) {
    let mut b = Bufs::new(cfg);
    let (runs_len, tables_len) = Fleet::runs_layout(&cfg).expect("a configuration the run-length replay supports");
    let mut run_bufs = vec![Run::default(); runs_len];
    let mut run_tables = vec![0u32; tables_len];
    let rl = cfg.router_layout().unwrap();
    let mut rs = vec![Slot::default(); cfg.pods * rl.slots_per_pod];
    let mut rt = vec![0u32; cfg.pods * rl.table_per_pod];
    let mut ri = vec![IndexEntry::default(); rl.index];
    let mut f = b.fleet_router_buffers(RouterBuffers { slots: &mut rs, tables: &mut rt, index: &mut ri });
    if runs {
        assert!(f.attach_runs(group_blocks, &mut run_bufs, &mut run_tables).unwrap());
    }
    let mut out = Vec::new();
    let mut ms = 0;
    for r in reqs {
        ms += r.gap_ms;
        let mut keys = vec![0; (r.tokens / 16) as usize];
        let n = keys::trace_keys(&r.ids, r.tokens, group_blocks * 16, &mut keys).unwrap();
        let req = Request { arrival_ns: ms * 1_000_000, input_tokens: r.tokens, output_tokens: 3, keys: &keys[..n] };
        out.push(f.dispatch(&req, &mut ()).unwrap());
    }
    let stats = (0..cfg.pods).map(|p| *f.pod_stats(p).unwrap()).collect();
    (out, *f.totals(), stats)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn runs_equal_blocks(
        (group, reqs) in (0usize..4).prop_flat_map(|g| (Just([1u32, 2, 4, 32][g]), trace([1u32, 2, 4, 32][g]))),
        pods in 1usize..5,
        capacity in 1usize..300,
        router in 0usize..3,
        alpha in 0.0f64..40.0,
    ) {
        let cfg = with(FleetConfig { alpha, ..FleetConfig::new(pods, capacity, RouterKind::ALL[router]) }, |c| {
            fifo(c).t_decode_ns = 7
        });
        let blocks = replay(cfg, group, &reqs, false);
        let runs = replay(cfg, group, &reqs, true);
        prop_assert_eq!(blocks, runs);
    }
}

/// The shipped routers the run-length replay serves: the presets without an approximate index.
const RUN_PRESETS: [RouterKind; 4] =
    [RouterKind::LlmDPrecise, RouterKind::LlmDLoad, RouterKind::Random, RouterKind::DynamoKv];

/// A pipeline over the precise index: up to three scorers of any kind but the approximate
/// prefix-cache one, the affinity filter or not, any picker; or Dynamo at a temperature.
fn precise_spec() -> impl Strategy<Value = RouterSpec> {
    let kinds: Vec<ScorerKind> = ScorerKind::ALL.into_iter().filter(|&k| k != ScorerKind::PrefixCache).collect();
    let scorer =
        (proptest::sample::select(kinds), 0u32..4).prop_map(|(kind, w)| WeightedScorer { kind, weight: w as f64 });
    let pickers = [PickerKind::MaxScore, PickerKind::MaxScoreLowestIndex, PickerKind::Random];
    (
        proptest::collection::vec(scorer, 0..4),
        any::<bool>(),
        proptest::sample::select(pickers.to_vec()),
        any::<u64>(),
        (0.0f64..1.0, 0u32..5, 0.0f64..2.0),
        any::<bool>(),
    )
        .prop_map(|(scorers, filter, picker, seed, (affinity, no_hit, temperature), dynamo)| {
            let mut spec = RouterSpec::preset(RouterKind::LlmDPrecise).unwrap();
            if dynamo {
                spec = RouterSpec::preset(RouterKind::DynamoKv).unwrap();
                spec.params.router_temperature = temperature;
            } else {
                spec.scorers = [None; MAX_SCORERS];
                for (slot, s) in spec.scorers.iter_mut().zip(scorers) {
                    *slot = Some(s);
                }
                spec.filters = [filter.then_some(FilterKind::PrefixCacheAffinity), None];
                spec.picker = picker;
                spec.params.prefix_source = PrefixSource::Precise;
                spec.params.affinity_threshold = affinity;
                spec.params.no_hit_lru_size = no_hit.max(1);
                spec.params.max_ttft_penalty_ms = temperature * 100.0;
            }
            spec.params.seed = seed;
            spec
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// The presets without an approximate index, run-length against per block.
    #[test]
    fn shipped_presets_runs_equal_blocks(
        (group, reqs) in (0usize..4).prop_flat_map(|g| (Just([1u32, 2, 4, 32][g]), trace([1u32, 2, 4, 32][g]))),
        pods in 1usize..6,
        capacity in 1usize..300,
        router in 0usize..RUN_PRESETS.len(),
        t_prefill_ns in prop_oneof![Just(50_000u64), 1u64..200_000],
    ) {
        let cfg = with(FleetConfig::new(pods, capacity, RUN_PRESETS[router]), |c| {
            fifo(c).t_decode_ns = 7;
            fifo(c).t_prefill_ns = t_prefill_ns;
        });
        prop_assert!(Fleet::runs_layout(&cfg).is_some());
        let blocks = replay(cfg, group, &reqs, false);
        let runs = replay(cfg, group, &reqs, true);
        prop_assert_eq!(blocks, runs);
    }

    /// Random pipelines over the precise index (every scorer but the approximate one, the
    /// affinity filter, every picker) and Dynamo at random temperatures.
    #[test]
    fn precise_pipelines_runs_equal_blocks(
        (group, reqs) in (0usize..4).prop_flat_map(|g| (Just([1u32, 2, 4, 32][g]), trace([1u32, 2, 4, 32][g]))),
        pods in 1usize..6,
        capacity in 1usize..300,
        spec in precise_spec(),
    ) {
        let cfg = with(FleetConfig { routing: Some(spec), ..FleetConfig::new(pods, capacity, RouterKind::Custom) }, |c| {
            fifo(c).t_decode_ns = 7
        });
        prop_assume!(cfg.validate().is_ok());
        prop_assert!(Fleet::runs_layout(&cfg).is_some());
        let blocks = replay(cfg, group, &reqs, false);
        let runs = replay(cfg, group, &reqs, true);
        prop_assert_eq!(blocks, runs);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// The presets with an approximate index: the pods and the router's index as runs, against
    /// both per block; up to 12 pods (above 8 the per-block index keeps a key -> pods table).
    #[test]
    fn approximate_presets_runs_equal_blocks(
        (group, reqs) in (0usize..4).prop_flat_map(|g| (Just([1u32, 2, 4, 32][g]), trace([1u32, 2, 4, 32][g]))),
        pods in 1usize..13,
        capacity in 1usize..300,
        router in 0usize..APPROX_PRESETS.len(),
        lru in prop_oneof![Just(0u64), 1u64..300],
    ) {
        let spec = with_lru(RouterSpec::preset(APPROX_PRESETS[router]).unwrap(), lru);
        let cfg = with(FleetConfig { routing: Some(spec), ..FleetConfig::new(pods, capacity, APPROX_PRESETS[router]) }, |c| {
            fifo(c).t_decode_ns = 7
        });
        prop_assert!(Fleet::runs_layout(&cfg).is_some());
        let blocks = replay(cfg, group, &reqs, false);
        let runs = replay(cfg, group, &reqs, true);
        prop_assert_eq!(blocks, runs);
    }

    /// Random pipelines over the approximate index (with the precise one too when a precise
    /// scorer is drawn), SGLang and vllm-loadaware with random thresholds, random LRU sizes.
    #[test]
    fn approximate_pipelines_runs_equal_blocks(
        (group, reqs) in (0usize..4).prop_flat_map(|g| (Just([1u32, 2, 4, 32][g]), trace([1u32, 2, 4, 32][g]))),
        pods in 1usize..13,
        capacity in 1usize..300,
        spec in approx_spec(),
    ) {
        let cfg = with(FleetConfig { routing: Some(spec), ..FleetConfig::new(pods, capacity, RouterKind::Custom) }, |c| {
            fifo(c).t_decode_ns = 7
        });
        prop_assume!(cfg.validate().is_ok());
        prop_assert!(spec.needs_approx());
        prop_assert!(Fleet::runs_layout(&cfg).is_some());
        let blocks = replay(cfg, group, &reqs, false);
        let runs = replay(cfg, group, &reqs, true);
        prop_assert_eq!(blocks, runs);
    }
}

fn with_lru(mut spec: RouterSpec, lru: u64) -> RouterSpec {
    spec.params.approx_lru_blocks = lru;
    spec
}

/// Every preset replays per run under the FIFO engine (the approximate index as runs too); a
/// precise one over a global index stays per block.
#[test]
fn every_preset_runs_but_a_global_index_stays_per_block() {
    for kind in RouterKind::PRESETS {
        let cfg = FleetConfig::new(2, 64, kind);
        let approx = RouterSpec::preset(kind).unwrap().needs_approx();
        assert!(Fleet::runs_layout(&cfg).is_some(), "{kind}");
        assert_eq!(RUN_PRESETS.contains(&kind), !approx, "{kind}");
        assert_eq!(APPROX_PRESETS.contains(&kind), approx, "{kind}");
    }
    for kind in [RouterKind::LlmDPrecise, RouterKind::DynamoKv] {
        let cfg = with(FleetConfig::new(2, 64, kind), |c| view(c).index = IndexKind::Global);
        assert_eq!(Fleet::runs_layout(&cfg), None, "{kind}");
        let mut b = Bufs::new(cfg);
        let mut f = b.fleet();
        assert!(!f.attach_runs(32, &mut [], &mut []).unwrap());
    }
    // A load-only preset reads no index: the global one is not kept, runs apply.
    let load = with(FleetConfig::new(2, 64, RouterKind::LlmDLoad), |c| view(c).index = IndexKind::Global);
    assert!(Fleet::runs_layout(&load).is_some());
}

#[test]
fn unsupported_configurations_stay_per_block() {
    let base = FleetConfig::new(2, 64, RouterKind::PrefixAware);
    let per_block = [
        with(base, |c| view(c).stale_delay = 1),
        with(base, |c| fifo(c).cpu_capacity_blocks = 8),
        with(base, |c| view(c).index = IndexKind::Global),
        with(base, |c| fifo(c).order = TouchOrder::InOrder),
        with(base, |c| fifo(c).cache = CacheMode::Global),
    ];
    for cfg in per_block {
        assert_eq!(Fleet::runs_layout(&cfg), None, "{cfg:?}");
        let mut b = Bufs::new(cfg);
        let mut f = b.fleet();
        assert!(!f.attach_runs(32, &mut [], &mut []).unwrap());
    }
    assert!(Fleet::runs_layout(&base).is_some());
}

/// A hand-computed case: one pod of 40 blocks, ids of 32 blocks.
#[test]
fn a_partial_hit_splits_a_run_and_eviction_trims_the_cold_end() {
    let cfg = FleetConfig::new(1, 40, RouterKind::RoundRobin);
    let (runs_len, tables_len) = Fleet::runs_layout(&cfg).unwrap();
    let mut rb = vec![Run::default(); runs_len];
    let mut rt = vec![0u32; tables_len];
    let mut runs = RunLru::new(40, &mut rb, &mut rt).unwrap();
    let mut k = vec![0u64; 64];
    keys::trace_keys(&[7, 8], 64 * 16, 512, &mut k).unwrap();
    // Request A: ids 7 (32 blocks) and 8 (32 blocks): 64 blocks into 40: id 7 whole (most
    // recent), then blocks 0..8 of id 8.
    runs.touch_request(&k, 32).unwrap();
    assert_eq!(runs.iter_mru().map(|(_, lo, hi)| (lo, hi)).collect::<Vec<_>>(), [(0, 32), (0, 8)]);
    assert_eq!(runs.len(), 40);
    assert_eq!(runs.hit_blocks(&k, 32), 40);
    // Request B: the first 10 blocks of id 7: run 0..32 splits into 0..10 (most recent) and 10..32.
    runs.touch_request(&k[..10], 32).unwrap();
    assert_eq!(runs.iter_mru().map(|(_, lo, hi)| (lo, hi)).collect::<Vec<_>>(), [(0, 10), (10, 32), (0, 8)]);
    // Request C: a new id of 32 blocks evicts 32 from the cold end: id 8's 8 blocks, id 7's run
    // 10..32, and blocks 8..10 of its run 0..10.
    let mut c = vec![0u64; 32];
    keys::trace_keys(&[9], 32 * 16, 512, &mut c).unwrap();
    runs.touch_request(&c, 32).unwrap();
    assert_eq!(runs.iter_mru().map(|(_, lo, hi)| (lo, hi)).collect::<Vec<_>>(), [(0, 32), (0, 8)]);
    assert_eq!(runs.held(k[0]), 8);
    assert_eq!(runs.hit_blocks(&k, 32), 8);
    assert_eq!(runs.held(k[32]), 0);
}

/// The prefix-aware rule in f64, as docs/MODEL.md states it: the highest match - alpha x queue,
/// ties to the shorter queue, then the lower index.
fn choose_f64(alpha: f64, matches: &[u32], queue_lens: &[u32]) -> usize {
    let mut best = 0;
    let mut best_score = f64::NEG_INFINITY;
    for (p, &q) in queue_lens.iter().enumerate() {
        let score = matches[p] as f64 - alpha * q as f64;
        if score > best_score || (score == best_score && q < queue_lens[best]) {
            best = p;
            best_score = score;
        }
    }
    best
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// `PrefixAware::choose` scores a whole alpha in integers: the same pod as in f64, ties and
    /// the largest whole alpha and queues included.
    #[test]
    fn whole_alpha_chooses_as_f64(
        alpha in prop_oneof![0u64..4, Just(16u64), Just(1u64 << 20), 0u64..=(1u64 << 20)],
        pods in proptest::collection::vec((0u32..6, 0u32..4), 1..MAX_PODS),
        big in any::<bool>(),
    ) {
        let scale = |x: u32| if big { u32::MAX - x } else { x };
        let matches: Vec<u32> = pods.iter().map(|&(m, _)| scale(m)).collect();
        let queues: Vec<u32> = pods.iter().map(|&(_, q)| scale(q)).collect();
        let route = PrefixAware { alpha: alpha as f64 }.choose(&matches, &queues);
        prop_assert_eq!(route.pod, choose_f64(alpha as f64, &matches, &queues));
        prop_assert_eq!(route.believed_match_blocks, matches[route.pod]);
    }
}

/// The router's index as runs, by hand (docs/MODEL.md, "The approximate index as runs"): one
/// LRU of 6 blocks, ids of 4 blocks recorded in prompt order.
#[test]
fn in_order_runs_evict_from_below_and_leave_gaps() {
    let mut rb = vec![Run::default(); RunLru::runs_len(6)];
    let mut rt = vec![0u32; RunLru::table_len(6)];
    let mut lru = RunLru::new_in_order(6, &mut rb, &mut rt).unwrap();
    let mut k = vec![0u64; 8];
    keys::trace_keys(&[7, 8], 8 * 16, 64, &mut k).unwrap();
    // Id 7 whole, then the first 2 blocks of id 7 again: runs 0..2 (most recent), 2..4.
    lru.touch_request_in_order(&k[..4], 4).unwrap();
    lru.touch_request_in_order(&k[..2], 4).unwrap();
    assert_eq!(lru.group_runs(k[0]).collect::<Vec<_>>(), [(0, 2), (2, 4)]);
    // Id 7's 4 blocks and 3 of id 8 (7 > 6): 0..4 of id 7 replaces its two runs with one,
    // then 0..3 of id 8; one block goes, the least recent: id 7's sub-block 0.
    lru.touch_request_in_order(&k[..7], 4).unwrap();
    assert_eq!(lru.group_runs(k[0]).collect::<Vec<_>>(), [(1, 4)]);
    assert_eq!(lru.group_runs(k[4]).collect::<Vec<_>>(), [(0, 3)]);
    assert_eq!(lru.len(), 6);
    // A gap: 0..2 of id 7 again (1 of them held) puts run 0..2 first and leaves 2..4, now the
    // least recent run (id 8's 0..3 was touched after it): one eviction takes its sub-block 2.
    lru.touch_request_in_order(&k[..2], 4).unwrap();
    assert_eq!(lru.group_runs(k[0]).collect::<Vec<_>>(), [(0, 2), (3, 4)]);
    assert_eq!(lru.len(), 6);
    // A new id 9 of 2 blocks evicts 2: id 7's last run 3..4, then id 8's sub-block 0.
    let mut c = vec![0u64; 2];
    keys::trace_keys(&[9], 2 * 16, 64, &mut c).unwrap();
    lru.touch_request_in_order(&c, 4).unwrap();
    assert_eq!(lru.group_runs(k[0]).collect::<Vec<_>>(), [(0, 2)]);
    assert_eq!(lru.group_runs(k[4]).collect::<Vec<_>>(), [(1, 3)]);
    assert_eq!(lru.group_runs(c[0]).collect::<Vec<_>>(), [(0, 2)]);
    assert_eq!(lru.len(), 6);
}
