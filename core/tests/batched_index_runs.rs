//! Under the batched engine, the router's approximate index kept as runs of trace ids
//! ([`BatchedFleet::attach_index_runs`]) against the per-block index, its oracle (docs/MODEL.md,
//! "The approximate index as runs"): on random traces of ids (shared prefixes, partial last ids,
//! outputs crossing block boundaries), the five presets with an approximate index (random LRU
//! sizes and caps on the keys the index sees) and random approximate pipelines, 1 to 12 pods
//! (above 8 the per-block index keeps its key -> pods table), pods from a few blocks
//! (preemption) to more than the trace, random engine settings (fast-forward, the offload tier,
//! cached generated tokens, the per-block KV pool): every completion, ITL sample, routing
//! decision, per-pod counter and the fleet's totals must be equal.

mod common;
mod specs;

use brokerlab_core::fleet::*;
use common::{BatchedRouterOwned, Sink, TraceReq, feed_trace, shared_prefix_trace};
use proptest::prelude::*;
use specs::{APPROX_PRESETS, approx_spec};

/// Completions, ITL samples, each dispatch's routing (pod, queue length, believed match), per-pod
/// counters, totals, and the router's held blocks per pod at the end.
type Replay = (Vec<Completion>, Vec<(u64, u64)>, Vec<Routed>, Vec<BatchedStats>, FleetTotals, Vec<usize>);

/// One batched replay of `reqs` (requests too large for a pod are skipped, in both replays),
/// the router's approximate index as runs of ids of `group_blocks` blocks or per block.
fn replay(cfg: FleetConfig, group_blocks: u32, reqs: &[TraceReq], index_runs: bool) -> Replay {
    let mut owned = BatchedRouterOwned::new(&cfg);
    let (runs_len, run_tables_len) =
        BatchedFleet::index_runs_layout(&cfg).expect("a router whose approximate index can be kept as runs");
    let mut runs = vec![Run::default(); runs_len];
    let mut run_tables = vec![0u32; run_tables_len];
    let mut f = owned.fleet(cfg);
    if index_runs {
        assert!(f.attach_index_runs(group_blocks, &mut runs, &mut run_tables).unwrap());
    }
    assert_eq!(f.index_is_runs(), index_runs);
    let mut sink = Sink::default();
    let routed = feed_trace(&mut f, group_blocks, reqs, &mut sink);
    let stats = (0..cfg.pods).map(|p| *f.pod_stats(p).unwrap()).collect();
    let held = match f.router() {
        AnyRouter::Shipped(r) => (0..cfg.pods).map(|p| r.approx().map_or(0, |a| a.held_blocks(p))).collect(),
        _ => Vec::new(),
    };
    (sink.done, sink.itl, routed, stats, *f.totals(), held)
}

/// Random batched-engine settings: running slots, token budget, fast-forward, the offload tier,
/// cached generated tokens, the KV pool per block or a run at a time.
fn engine() -> impl Strategy<Value = BatchedConfig> {
    (1u32..6, 0u32..200, any::<bool>(), 0usize..3, any::<bool>(), any::<bool>()).prop_map(
        |(seqs, budget, fast_forward, tier, generated, block_runs)| {
            let mut e = BatchedConfig::new(Profile::Seed);
            e.max_num_seqs = seqs;
            e.max_num_batched_tokens = seqs + budget;
            e.fast_forward = fast_forward;
            e.cache_generated_tokens = generated;
            e.block_runs = block_runs;
            if tier > 0 {
                e.offload.cpu_capacity = [0u32, 8, 200][tier];
            }
            e
        },
    )
}

fn assert_same(a: &Replay, b: &Replay) -> Result<(), TestCaseError> {
    prop_assert_eq!(&a.0, &b.0, "completions");
    prop_assert_eq!(&a.1, &b.1, "ITL samples");
    prop_assert_eq!(&a.2, &b.2, "routing");
    prop_assert_eq!(&a.3, &b.3, "per-pod counters");
    prop_assert_eq!(&a.4, &b.4, "totals");
    prop_assert_eq!(&a.5, &b.5, "the index's held blocks");
    Ok(())
}

/// Ids of 1, 2, 4 or 32 blocks and a trace of them.
fn grouped_trace() -> impl Strategy<Value = (u32, Vec<TraceReq>)> {
    (0usize..4).prop_flat_map(|g| (Just([1u32, 2, 4, 32][g]), shared_prefix_trace([1u32, 2, 4, 32][g], 60)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// The five presets with an approximate index, with random LRU sizes (small: evictions) and
    /// caps on the keys the index sees.
    #[test]
    fn approximate_presets_index_runs_equal_blocks(
        (group, reqs) in grouped_trace(),
        pods in 1usize..13,
        capacity in prop_oneof![4usize..40, 40usize..400, 400usize..3000],
        router in 0usize..APPROX_PRESETS.len(),
        lru in prop_oneof![Just(0u64), 1u64..300],
        max_blocks in prop_oneof![Just(0u64), 1u64..40],
        e in engine(),
    ) {
        let kind = APPROX_PRESETS[router];
        let mut spec = RouterSpec::preset(kind).unwrap();
        spec.params.approx_lru_blocks = lru;
        spec.params.approx_max_blocks = max_blocks;
        let cfg = FleetConfig { routing: Some(spec), ..FleetConfig::batched(pods, capacity, kind, e) };
        prop_assert!(BatchedFleet::index_runs_layout(&cfg).is_some());
        let blocks = replay(cfg, group, &reqs, false);
        let runs = replay(cfg, group, &reqs, true);
        assert_same(&blocks, &runs)?;
    }

    /// Random pipelines over the approximate index (with the precise one too when a precise
    /// scorer is drawn: the pods' exact view), SGLang and vllm-loadaware with random thresholds.
    #[test]
    fn approximate_pipelines_index_runs_equal_blocks(
        (group, reqs) in grouped_trace(),
        pods in 1usize..13,
        capacity in prop_oneof![4usize..40, 40usize..400, 400usize..3000],
        spec in approx_spec(),
        e in engine(),
    ) {
        let cfg = FleetConfig { routing: Some(spec), ..FleetConfig::batched(pods, capacity, RouterKind::Custom, e) };
        prop_assume!(cfg.validate().is_ok());
        prop_assert!(spec.needs_approx());
        prop_assert!(BatchedFleet::index_runs_layout(&cfg).is_some());
        let blocks = replay(cfg, group, &reqs, false);
        let runs = replay(cfg, group, &reqs, true);
        assert_same(&blocks, &runs)?;
    }
}

/// The generator reaches the cases the equality is about: one fixed trace on small pods
/// preempts, the index's LRUs fill and evict (less held than recorded), the router's match
/// differs between pods; both forms give the same replay.
#[test]
fn the_traces_preempt_and_the_index_evicts() {
    let mut x = 11u64;
    let mut lcg = move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x >> 33
    };
    let reqs: Vec<TraceReq> = (0..80)
        .map(|_| {
            let doc = lcg() % 3;
            let ids: Vec<u64> = (0..1 + lcg() % 4).map(|j| doc * 100 + j).chain([9_000 + lcg() % 50]).collect();
            TraceReq { gap_us: lcg() % 500, tokens: (ids.len() as u64 - 1) * 64 + lcg() % 64 + 1, ids, out: lcg() % 60 }
        })
        .collect();
    let mut e = BatchedConfig::new(Profile::Seed);
    e.max_num_seqs = 4;
    e.max_num_batched_tokens = 64;
    for kind in APPROX_PRESETS {
        let mut spec = RouterSpec::preset(kind).unwrap();
        spec.params.approx_lru_blocks = 20;
        let cfg = FleetConfig { routing: Some(spec), ..FleetConfig::batched(2, 24, kind, e) };
        let a = replay(cfg, 4, &reqs, false);
        let b = replay(cfg, 4, &reqs, true);
        let preemptions: u64 = b.3.iter().map(|s| s.preemptions).sum();
        assert!(preemptions > 5, "{kind}: preemptions {preemptions}");
        assert!(b.5.iter().all(|&h| h == 20), "{kind}: held {:?}", b.5);
        assert!(b.2.iter().any(|r| r.believed_match_blocks > 0), "{kind}: no match");
        assert_eq!(a, b, "{kind}");
    }
}

/// The layout and the switch: a router without an approximate index keeps nothing as runs
/// (None, and attaching does nothing); a FIFO configuration is not a batched fleet's; wrong
/// buffer lengths, a zero group and a switch after the first request are errors.
#[test]
fn index_runs_only_for_an_approximate_index_before_the_first_request() {
    let e = BatchedConfig::new(Profile::Seed);
    for kind in [RouterKind::RoundRobin, RouterKind::PrefixAware, RouterKind::LlmDPrecise, RouterKind::DynamoKv] {
        assert_eq!(BatchedFleet::index_runs_layout(&FleetConfig::batched(2, 64, kind, e)), None, "{kind}");
    }
    for kind in APPROX_PRESETS {
        assert!(BatchedFleet::index_runs_layout(&FleetConfig::batched(2, 64, kind, e)).is_some(), "{kind}");
        assert_eq!(BatchedFleet::index_runs_layout(&FleetConfig::new(2, 64, kind)), None, "{kind}: FIFO");
    }
    let cfg = FleetConfig::batched(2, 64, RouterKind::LlmDApproximate, e);
    let (runs_len, tables_len) = BatchedFleet::index_runs_layout(&cfg).unwrap();
    // (each call borrows its buffers for the fleet's life: one pair per call)
    let lens = [(runs_len - 1, tables_len), (runs_len, tables_len - 1), (runs_len, tables_len), (runs_len, tables_len)];
    let mut bufs: Vec<(Vec<Run>, Vec<u32>)> =
        lens.iter().map(|&(r, t)| (vec![Run::default(); r], vec![0; t])).collect();
    let l = BatchedLayout::new(&cfg, 8, 1024).unwrap();
    let rl = cfg.router_layout().unwrap();
    let mut owned = common::BatchedOwned::new(&l);
    let mut slots = vec![Slot::default(); cfg.pods * rl.slots_per_pod];
    let mut rtables = vec![0u32; cfg.pods * rl.table_per_pod];
    let mut index = vec![IndexEntry::default(); rl.index];
    let router = RouterBuffers { slots: &mut slots, tables: &mut rtables, index: &mut index };
    let mut f = BatchedFleet::with_router_buffers(cfg, owned.buffers(&mut []), router).unwrap();
    let mut each = bufs.iter_mut();
    let mut next = || each.next().map(|(r, t)| (&mut r[..], &mut t[..])).unwrap();
    let (r, t) = next();
    assert!(matches!(f.attach_index_runs(4, r, t), Err(Error::BufferSize { buffer: Buffer::Runs, .. })));
    let (r, t) = next();
    assert!(matches!(f.attach_index_runs(4, r, t), Err(Error::BufferSize { buffer: Buffer::RunTables, .. })));
    let (r, t) = next();
    assert!(matches!(f.attach_index_runs(0, r, t), Err(Error::InvalidConfig { field: Field::TraceBlockSize, .. })));
    assert!(!f.index_is_runs());
    let k = [1u64, 2, 3, 4];
    let req = Request { arrival_ns: 0, input_tokens: 64, output_tokens: 1, keys: &k };
    f.dispatch(&req, &mut ()).unwrap();
    let (r, t) = next();
    assert!(matches!(f.attach_index_runs(4, r, t), Err(Error::InvalidConfig { field: Field::TraceBlockSize, .. })));
    assert!(!f.index_is_runs());
}
