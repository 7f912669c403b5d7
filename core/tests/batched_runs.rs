//! The batched engine's block pool worked a run of a request's blocks at a time
//! (`BatchedConfig::block_runs`, the default) against the per-block pool, its oracle
//! (docs/MODEL.md, "Run-length KV blocks"): on random traces of ids (shared prefixes, partial
//! last ids, output long enough to cross block boundaries), pods from a few blocks (eviction,
//! preemption, self-preemption) to more than the trace, every router kind (the seed's three and
//! the shipped presets, approximate index included), with and without fast-forward, the offload
//! tier and cached generated tokens: every completion, ITL sample, routing decision, per-pod
//! counter and the fleet's totals must be equal.

use brokerlab_core::fleet::*;

mod common;
use common::{BatchedRouterOwned, Sink, TraceReq, feed_trace, shared_prefix_trace};
use proptest::prelude::*;

type Replay = (Vec<Completion>, Vec<(u64, u64)>, Vec<u32>, Vec<BatchedStats>, FleetTotals);

/// One batched replay of `reqs` (requests too large for a pod are skipped, in both replays).
fn replay(cfg: FleetConfig, group_blocks: u32, reqs: &[TraceReq]) -> Replay {
    let mut owned = BatchedRouterOwned::new(&cfg);
    let mut f = owned.fleet(cfg);
    let mut sink = Sink::default();
    let pods = feed_trace(&mut f, group_blocks, reqs, &mut sink).iter().map(|r| r.pod).collect();
    let stats = (0..cfg.pods).map(|p| *f.pod_stats(p).unwrap()).collect();
    (sink.done, sink.itl, pods, stats, *f.totals())
}

/// Router kinds: the seed's three, then the presets.
fn router_kind(i: usize) -> RouterKind {
    let all: Vec<RouterKind> = RouterKind::ALL[..3].iter().copied().chain(RouterKind::PRESETS).collect();
    all[i % all.len()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn block_runs_equal_the_per_block_pool(
        (group, reqs) in (0usize..4).prop_flat_map(|g| (Just([1u32, 2, 4, 32][g]), shared_prefix_trace([1u32, 2, 4, 32][g], 50))),
        pods in 1usize..4,
        capacity in prop_oneof![4usize..40, 40usize..400, 400usize..3000],
        router in 0usize..16,
        seqs in 1u32..6,
        budget in 0u32..200,
        fast_forward in any::<bool>(),
        tier in 0usize..3,
        generated in any::<bool>(),
    ) {
        let mut e = BatchedConfig::new(Profile::Seed);
        e.max_num_seqs = seqs;
        e.max_num_batched_tokens = seqs + budget;
        e.fast_forward = fast_forward;
        e.cache_generated_tokens = generated;
        if tier > 0 {
            e.offload.cpu_capacity = [0u32, 8, 200][tier];
        }
        let cfg = FleetConfig::batched(pods, capacity, router_kind(router), e);
        let mut oracle = e;
        oracle.block_runs = false;
        let cfg_oracle = FleetConfig::batched(pods, capacity, router_kind(router), oracle);
        let a = replay(cfg_oracle, group, &reqs);
        let b = replay(cfg, group, &reqs);
        prop_assert_eq!(&a.0, &b.0, "completions");
        prop_assert_eq!(&a.1, &b.1, "ITL samples");
        prop_assert_eq!(&a.2, &b.2, "routing");
        prop_assert_eq!(&a.3, &b.3, "per-pod counters");
        prop_assert_eq!(&a.4, &b.4, "totals");
    }
}

/// The generator above reaches the cases the equality is about: preemptions and evictions of
/// cached blocks under the run-at-a-time pool (one fixed case, checked to preempt).
#[test]
fn the_traces_preempt_and_evict() {
    let mut x = 7u64;
    let mut lcg = move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x >> 33
    };
    let reqs: Vec<TraceReq> = (0..60)
        .map(|_| {
            let doc = lcg() % 3;
            let ids: Vec<u64> = (0..1 + lcg() % 4).map(|j| doc * 100 + j).chain([9_000 + lcg() % 50]).collect();
            TraceReq { gap_us: lcg() % 500, tokens: (ids.len() as u64 - 1) * 32 + lcg() % 32 + 1, ids, out: lcg() % 60 }
        })
        .collect();
    let mut e = BatchedConfig::new(Profile::Seed);
    e.max_num_seqs = 4;
    e.max_num_batched_tokens = 64;
    let cfg = FleetConfig::batched(1, 24, RouterKind::RoundRobin, e);
    let mut oracle = e;
    oracle.block_runs = false;
    let a = replay(FleetConfig::batched(1, 24, RouterKind::RoundRobin, oracle), 2, &reqs);
    let b = replay(cfg, 2, &reqs);
    assert!(b.3[0].preemptions > 5, "preemptions: {}", b.3[0].preemptions);
    assert!(b.3[0].hit_tokens > 0, "hits: {}", b.3[0].hit_tokens);
    assert_eq!(a.0, b.0);
    assert_eq!(a.3, b.3);
}
