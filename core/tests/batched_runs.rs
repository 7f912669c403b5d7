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
use common::Sink;
use proptest::prelude::*;

/// A trace request: arrival gap (us), prompt ids, prompt length in tokens, output length.
#[derive(Clone, Debug)]
struct TraceReq {
    gap_us: u64,
    ids: Vec<u64>,
    tokens: u64,
    out: u64,
}

/// Requests sharing prefixes: a prefix of one of a few "documents", then ids of its own.
fn trace(group_blocks: u32) -> impl Strategy<Value = Vec<TraceReq>> {
    let s = group_blocks as u64 * 16;
    let one = (0u64..4, 0usize..5, 0usize..3, 0u64..s, 0u64..3000, any::<u64>(), 0u64..70);
    proptest::collection::vec(one, 1..50).prop_map(move |v| {
        v.into_iter()
            .map(|(doc, shared, own, partial, gap_us, salt, out)| {
                let mut ids: Vec<u64> = (0..shared as u64).map(|j| doc * 100 + j).collect();
                ids.extend((0..own as u64).map(|j| 1_000_000 + (salt % 7) * 10 + j));
                ids.push(5_000 + salt % 3);
                let tokens = ((ids.len() as u64 - 1) * s + partial).max(1);
                TraceReq { gap_us, ids, tokens, out }
            })
            .collect()
    })
}

type Replay = (Vec<Completion>, Vec<(u64, u64)>, Vec<u32>, Vec<BatchedStats>, FleetTotals);

/// One batched replay of `reqs` (requests too large for a pod are skipped, in both replays).
fn replay(cfg: FleetConfig, group_blocks: u32, reqs: &[TraceReq]) -> Replay {
    let l = BatchedLayout::new(&cfg, 256, 1 << 14).unwrap();
    let rl = cfg.router_layout().unwrap();
    let mut blocks = vec![KvBlock::default(); l.blocks_len()];
    let mut tables = vec![0u32; l.tables_len()];
    let mut requests = vec![ReqSlot::default(); l.pods * l.requests_per_pod];
    let mut waiting = vec![0u32; l.pods * l.requests_per_pod];
    let mut running = vec![0u32; l.running_len()];
    let mut keys = vec![0u64; l.pods * l.keys_per_pod];
    let mut cpu_slots = vec![Slot::default(); l.cpu_slots_len()];
    let mut cpu_tables = vec![0u32; l.cpu_tables_len()];
    let mut slots = vec![Slot::default(); cfg.pods * rl.slots_per_pod];
    let mut rtables = vec![0u32; cfg.pods * rl.table_per_pod];
    let mut index = vec![IndexEntry::default(); rl.index];
    let bufs = BatchedBuffers {
        blocks: &mut blocks,
        tables: &mut tables,
        requests: &mut requests,
        waiting: &mut waiting,
        running: &mut running,
        keys: &mut keys,
        cpu_slots: &mut cpu_slots,
        cpu_tables: &mut cpu_tables,
        pd: Default::default(),
        scale: &mut [],
    };
    let router = RouterBuffers { slots: &mut slots, tables: &mut rtables, index: &mut index };
    let mut f = BatchedFleet::with_router_buffers(cfg, bufs, router).unwrap();
    let mut sink = Sink::default();
    let mut pods = Vec::new();
    let mut at = 0u64;
    let cap_tokens = cfg.capacity_blocks as u64 * 16;
    for r in reqs {
        at += r.gap_us * 1000;
        if r.tokens + r.out.max(1) - 1 > cap_tokens {
            continue;
        }
        let mut k = vec![0; (r.tokens / 16) as usize];
        let n = keys::trace_keys(&r.ids, r.tokens, group_blocks * 16, &mut k).unwrap();
        let req = Request { arrival_ns: at, input_tokens: r.tokens, output_tokens: r.out, keys: &k[..n] };
        pods.push(f.dispatch(&req, &mut sink).unwrap().pod);
    }
    f.finish(&mut sink).unwrap();
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
        (group, reqs) in (0usize..4).prop_flat_map(|g| (Just([1u32, 2, 4, 32][g]), trace([1u32, 2, 4, 32][g]))),
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
