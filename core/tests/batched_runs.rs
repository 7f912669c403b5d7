//! The batched engine's block pool worked a run of a request's blocks at a time
//! (`BatchedConfig::block_runs`, the default) against the per-block pool, its oracle
//! (docs/MODEL.md, "Run-length KV blocks"): on random traces of ids (shared prefixes, partial
//! last ids, output long enough to cross block boundaries), pods from a few blocks (eviction,
//! preemption, self-preemption) to more than the trace, every router kind (the seed's three and
//! the shipped presets, approximate index included), with and without fast-forward, the offload
//! tier and cached generated tokens, with and without vLLM's full-sequence admission gate
//! (`BatchedConfig::reserve_full_isl`): every completion, ITL sample, routing decision, per-pod
//! counter and the fleet's totals must be equal.
//!
//! Then the cache map kept per trace id (`BatchedFleet::attach_pool_groups`) against the same
//! oracle, on the generator above and on contended ids, where holes (a group's cached sub-blocks
//! not a prefix) are checked not to arise.

use brokerlab_core::fleet::*;

mod common;
use common::{BatchedRouterOwned, Sink, TraceReq, feed_trace, feed_trace_with, shared_prefix_trace};
use proptest::prelude::*;

type Replay = (Vec<Completion>, Vec<(u64, u64)>, Vec<u32>, Vec<BatchedStats>, FleetTotals);

/// One batched replay of `reqs` (requests too large for a pod are skipped, in both replays).
fn replay(cfg: FleetConfig, group_blocks: u32, reqs: &[TraceReq]) -> Replay {
    replay_with(BatchedRouterOwned::new(&cfg), cfg, group_blocks, reqs)
}

/// [`replay`] in `owned`'s buffers.
fn replay_with(mut owned: BatchedRouterOwned, cfg: FleetConfig, group_blocks: u32, reqs: &[TraceReq]) -> Replay {
    let mut f = owned.fleet(cfg);
    let mut sink = Sink::default();
    let pods = feed_trace(&mut f, group_blocks, reqs, &mut sink).iter().map(|r| r.pod).collect();
    let stats = (0..cfg.pods).map(|p| *f.pod_stats(p).unwrap()).collect();
    (sink.done, sink.itl, pods, stats, *f.totals())
}

/// [`replay`] with the pods' cache maps kept per id of `group_blocks` blocks where they can be
/// (the second value says whether they were).
fn replay_grouped(cfg: FleetConfig, group_blocks: u32, reqs: &[TraceReq]) -> (Replay, bool) {
    let mut owned = BatchedRouterOwned::new(&cfg);
    let (wl, kl) = BatchedFleet::pool_groups_layout(&cfg, group_blocks).unwrap_or((0, 0));
    let mut words = vec![0u32; wl];
    let mut gkeys = vec![0u64; kl];
    let mut f = owned.fleet(cfg);
    let grouped = f.attach_pool_groups(group_blocks, &mut words, &mut gkeys).unwrap();
    assert_eq!(grouped, f.pool_is_grouped());
    let mut sink = Sink::default();
    let pods = feed_trace(&mut f, group_blocks, reqs, &mut sink).iter().map(|r| r.pod).collect();
    let stats = (0..cfg.pods).map(|p| *f.pod_stats(p).unwrap()).collect();
    ((sink.done, sink.itl, pods, stats, *f.totals()), grouped)
}

/// Router kinds: the seed's three, then the presets.
/// The pool under test: `seqs` running slots, a token budget `budget` above them, an offload tier
/// of 0, 8 or 200 blocks (`tier` 0, 1, 2), vLLM's full-sequence admission gate on or off (`gate`).
fn engine(seqs: u32, budget: u32, fast_forward: bool, generated: bool, tier: usize, gate: bool) -> BatchedConfig {
    let mut e = BatchedConfig::new(Profile::Seed);
    e.reserve_full_isl = gate;
    e.max_num_seqs = seqs;
    e.max_num_batched_tokens = seqs + budget;
    e.fast_forward = fast_forward;
    e.cache_generated_tokens = generated;
    e.offload.cpu_capacity = [0u32, 8, 200][tier];
    e
}

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
        gate in any::<bool>(),
    ) {
        let e = engine(seqs, budget, fast_forward, generated, tier, gate);
        let cfg = FleetConfig::batched(pods, capacity, router_kind(router), e);
        let mut oracle = e;
        oracle.block_runs = false;
        let cfg_oracle = FleetConfig::batched(pods, capacity, router_kind(router), oracle);
        let a = replay(cfg_oracle, group, &reqs);
        // the run pool with the blocks per key kept (the host's), then without (the firmware's)
        let b = replay(cfg, group, &reqs);
        prop_assert_eq!(&a.0, &b.0, "completions");
        prop_assert_eq!(&a.1, &b.1, "ITL samples");
        prop_assert_eq!(&a.2, &b.2, "routing");
        prop_assert_eq!(&a.3, &b.3, "per-pod counters");
        prop_assert_eq!(&a.4, &b.4, "totals");
        let c = replay_with(BatchedRouterOwned::new(&cfg).without_key_blocks(), cfg, group, &reqs);
        prop_assert_eq!(&a.0, &c.0, "completions, blocks looked up");
        prop_assert_eq!(&a.1, &c.1, "ITL samples, blocks looked up");
        prop_assert_eq!(&a.2, &c.2, "routing, blocks looked up");
        prop_assert_eq!(&a.3, &c.3, "per-pod counters, blocks looked up");
        prop_assert_eq!(&a.4, &c.4, "totals, blocks looked up");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn grouped_map_equals_the_per_block_pool(
        (group, reqs) in (0usize..5).prop_flat_map(|g| (Just([1u32, 2, 3, 4, 32][g]), shared_prefix_trace([1u32, 2, 3, 4, 32][g], 50))),
        pods in 1usize..4,
        capacity in prop_oneof![4usize..40, 40usize..400, 400usize..3000],
        router in 0usize..16,
        seqs in 1u32..6,
        budget in 0u32..200,
        fast_forward in any::<bool>(),
        tier in prop_oneof![6 => Just(0usize), 1 => 1usize..3],
        generated in prop_oneof![6 => Just(false), 1 => Just(true)],
        gate in any::<bool>(),
    ) {
        let e = engine(seqs, budget, fast_forward, generated, tier, gate);
        let cfg = FleetConfig::batched(pods, capacity, router_kind(router), e);
        let mut oracle = e;
        oracle.block_runs = false;
        let a = replay(FleetConfig::batched(pods, capacity, router_kind(router), oracle), group, &reqs);
        let (b, grouped) = replay_grouped(cfg, group, &reqs);
        // kept per id exactly where docs/MODEL.md says (ids of more than one block, no tier, no
        // cached generated tokens); elsewhere the per-block map, the same results
        prop_assert_eq!(grouped, group > 1 && tier == 0 && !generated);
        prop_assert_eq!(&a.0, &b.0, "completions");
        prop_assert_eq!(&a.1, &b.1, "ITL samples");
        prop_assert_eq!(&a.2, &b.2, "routing");
        prop_assert_eq!(&a.3, &b.3, "per-pod counters");
        prop_assert_eq!(&a.4, &b.4, "totals");
    }
}

/// Holes (a group's cached sub-blocks not a prefix): where the pool is kept per id they cannot
/// arise (docs/MODEL.md, "Run-length KV blocks", Lemma 3: a request keys a sub-block above a
/// keyless duplicate of its own only if another request keyed that duplicate's key after its
/// lookup, and the FCFS budget order leaves at most one request of a pod mid-prompt), and the
/// grouped pool cannot represent one (it keeps n_G and refuses, as a broken invariant, what
/// would make one). Checked here on traces built to try: concurrent requests on the same ids
/// with small budgets (chunked prefill), few running slots and tight pods (preemption); every
/// result against the per-block pool; after every dispatch, the per-block pool's blocks show no
/// hole and each group's cached prefix there is the grouped pool's n_G.
#[test]
fn grouped_map_on_contended_ids_equals_the_per_block_pool_and_has_no_hole() {
    let (mut holes, mut compared) = (0usize, 0usize);
    for seed in 0..300u64 {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut lcg = move || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x >> 33
        };
        let r = [4u32, 8, 32][(seed % 3) as usize];
        let s = r as u64 * 16;
        let reqs: Vec<TraceReq> = (0..40)
            .map(|_| {
                let doc = lcg() % 2;
                let n = 1 + lcg() % 3;
                let ids: Vec<u64> = (0..n).map(|j| doc * 100 + j).chain([9_000 + lcg() % 5]).collect();
                let tokens = (n - 1) * s + 16 + lcg() % (s - 16) + 1;
                TraceReq { gap_us: lcg() % 200, tokens, ids, out: 1 + lcg() % 40 }
            })
            .collect();
        let mut e = BatchedConfig::new(Profile::Seed);
        e.max_num_seqs = 1 + (lcg() % 4) as u32;
        e.max_num_batched_tokens = e.max_num_seqs + 16 + (lcg() % 48) as u32;
        // vLLM's full-sequence admission gate on every other seed
        e.reserve_full_isl = seed % 2 == 1;
        let capacity = 24 + (lcg() % 200) as usize;
        let pods = 1 + (seed % 2) as usize;
        let cfg = FleetConfig::batched(pods, capacity, router_kind(seed as usize), e);
        let mut oracle = e;
        oracle.block_runs = false;
        let cfg_oracle = FleetConfig::batched(pods, capacity, router_kind(seed as usize), oracle);
        let a = replay(cfg_oracle, r, &reqs);
        let (b, grouped) = replay_grouped(cfg, r, &reqs);
        assert!(grouped);
        assert_eq!(a.0, b.0, "completions, seed {seed}");
        assert_eq!(a.1, b.1, "ITL samples, seed {seed}");
        assert_eq!(a.2, b.2, "routing, seed {seed}");
        assert_eq!(a.3, b.3, "per-pod counters, seed {seed}");
        assert_eq!(a.4, b.4, "totals, seed {seed}");
        if seed % 3 == 0 {
            let (per_block, h) = group_prefixes(cfg_oracle, r, &reqs, false);
            let (runs, _) = group_prefixes(cfg, r, &reqs, true);
            assert_eq!(per_block, runs, "each group's cached prefix after each dispatch, seed {seed}");
            holes += h;
            compared += per_block.len();
        }
    }
    assert_eq!(holes, 0, "holes seen after dispatches");
    assert!(compared > 10_000, "{compared} (dispatch, pod, group) prefixes compared");
}

/// Dispatches `reqs` and lists, after each dispatch, every (pod, group) pair's cached prefix:
/// per block (`grouped` false) the leading run of `BatchedEngine::contains` over the group's
/// keys, also counting the pairs with a hole (a cached sub-block above an uncached one);
/// grouped, n_G (`BatchedEngine::group_state`).
fn group_prefixes(cfg: FleetConfig, group_blocks: u32, reqs: &[TraceReq], grouped: bool) -> (Vec<u32>, usize) {
    let mut owned = BatchedRouterOwned::new(&cfg);
    let (wl, kl) = BatchedFleet::pool_groups_layout(&cfg, group_blocks).unwrap_or((0, 0));
    let mut words = vec![0u32; wl];
    let mut gkeys = vec![0u64; kl];
    let mut f = owned.fleet(cfg);
    assert_eq!(f.attach_pool_groups(group_blocks, &mut words, &mut gkeys).unwrap(), grouped);
    let mut sink = Sink::default();
    let (mut holes, mut prefixes) = (0, Vec::new());
    let mut groups: Vec<Vec<u64>> = Vec::new();
    feed_trace_with(&mut f, group_blocks, reqs, &mut sink, |f, k| {
        for c in k.chunks(group_blocks as usize) {
            if !groups.iter().any(|g| g[0] == c[0]) {
                groups.push(c.to_vec());
            } else if let Some(g) = groups.iter_mut().find(|g| g[0] == c[0] && g.len() < c.len()) {
                *g = c.to_vec();
            }
        }
        for pod in f.pods() {
            for g in &groups {
                if grouped {
                    prefixes.push(pod.group_state(g[0]).unwrap().0);
                } else {
                    let held: Vec<bool> = g.iter().map(|&key| pod.contains(key)).collect();
                    holes += usize::from(held.windows(2).any(|w| !w[0] && w[1]));
                    prefixes.push(held.iter().take_while(|&&h| h).count() as u32);
                }
            }
        }
    });
    (prefixes, holes)
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
