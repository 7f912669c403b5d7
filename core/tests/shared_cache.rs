//! Hand-computed cases for the shared (global) cache of docs/MODEL.md, "Shared (global) cache".

mod common;
use brokerlab_core::fleet::*;
use common::*;

fn global(pods: usize, cap: usize, router: RouterKind) -> FleetConfig {
    with(FleetConfig::new(pods, cap, router), |c| fifo(c).cache = CacheMode::Global)
}

#[test]
fn a_block_stored_by_pod_0_hits_on_pod_1() {
    // Round-robin, 2 pods x 2 blocks. A = [1, 2] twice at t = 0: pod 0 computes it, pod 1 gets it.
    let a = keys_of(&[1, 2]);
    for (mode, want_hit) in [(CacheMode::Local, 0), (CacheMode::Global, 2)] {
        let mut bufs = Bufs::new(with(FleetConfig::new(2, 2, RouterKind::RoundRobin), |c| fifo(c).cache = mode));
        let mut f = bufs.fleet();
        let o = f.dispatch(&req(0, &a, 0), &mut ()).unwrap();
        assert_eq!((o.pod, o.hit_blocks, o.prefill_tokens, o.finish_ns), (0, 0, 32, 32 * 50_000));
        let o = f.dispatch(&req(0, &a, 0), &mut ()).unwrap();
        assert_eq!(o.pod, 1, "{mode:?}");
        assert_eq!(o.hit_blocks, want_hit, "{mode:?}");
        // The routed pod still does the prefill of what it missed, on its own server.
        assert_eq!(o.prefill_tokens, 32 - 16 * want_hit as u64);
        assert_eq!(o.finish_ns, o.prefill_tokens * 50_000);
        assert_eq!(f.pod_stats(1).unwrap().hit_tokens, 16 * want_hit as u64);
    }
}

#[test]
fn eviction_is_one_fleet_wide_lru() {
    // 2 pods x 2 blocks = a pool of 4. Round-robin, tail-first touches:
    //   r0 [1,2] -> pod 0: pool (MRU first) 1 2
    //   r1 [3]   -> pod 1: 3 1 2
    //   r2 [4]   -> pod 0: 4 3 1 2 (full)
    //   r3 [5]   -> pod 1: evicts 2, the fleet's least recent (inserted by pod 0): 5 4 3 1
    //   r4 [1,2] -> pod 0: hits 1 only; then 1 2 5 4 (3 evicted)
    //   r5 [3]   -> pod 1: miss (pod 1's own block, evicted by pod 0's request)
    let k = |ids: &[u64]| keys_of(ids);
    let (k12, k3, k4, k5) = (k(&[1, 2]), k(&[3]), k(&[4]), k(&[5]));
    let mut bufs = Bufs::new(global(2, 2, RouterKind::RoundRobin));
    let mut f = bufs.fleet();
    assert!(f.pod_cache(0).is_none() && f.pod_cache(1).is_none());
    for r in [&k12, &k3, &k4, &k5] {
        assert_eq!(f.dispatch(&req(0, r, 0), &mut ()).unwrap().hit_blocks, 0);
    }
    let pool = |f: &FifoFleet<'_>| f.shared_cache().unwrap().iter_mru().collect::<Vec<_>>();
    assert_eq!(pool(&f), [k5[0], k4[0], k3[0], k12[0]]);
    assert_eq!(f.shared_cache().unwrap().capacity(), 4);
    let o = f.dispatch(&req(0, &k12, 0), &mut ()).unwrap();
    assert_eq!((o.pod, o.hit_blocks), (0, 1));
    assert_eq!(pool(&f), [k12[0], k12[1], k5[0], k4[0]]);
    let o = f.dispatch(&req(0, &k3, 0), &mut ()).unwrap();
    assert_eq!((o.pod, o.hit_blocks), (1, 0));
    // Per-pod caches of 2 blocks each would have kept [3] on pod 1: r5 hits there.
    let mut bufs = Bufs::new(FleetConfig::new(2, 2, RouterKind::RoundRobin));
    let mut f = bufs.fleet();
    for r in [&k12, &k3, &k4, &k5, &k12] {
        f.dispatch(&req(0, r, 0), &mut ()).unwrap();
    }
    assert_eq!(f.dispatch(&req(0, &k3, 0), &mut ()).unwrap().hit_blocks, 1);
}

#[test]
fn a_hit_on_any_pod_refreshes_the_block_for_all() {
    // Pool of 2 (2 pods x 1), round-robin. [1] on pod 0, [2] on pod 1 (pool 2 1), [1] on pod 0
    // hits and makes 1 the most recent (1 2), [3] on pod 1 evicts 2, the fleet's least recent
    // block (3 1).
    let (k1, k2, k3) = (keys_of(&[1]), keys_of(&[2]), keys_of(&[3]));
    let mut bufs = Bufs::new(global(2, 1, RouterKind::RoundRobin));
    let mut f = bufs.fleet();
    f.dispatch(&req(0, &k1, 0), &mut ()).unwrap(); // pod 0
    f.dispatch(&req(0, &k2, 0), &mut ()).unwrap(); // pod 1: 2 1
    assert_eq!(f.dispatch(&req(0, &k1, 0), &mut ()).unwrap().hit_blocks, 1); // pod 0, refreshes: 1 2
    f.dispatch(&req(0, &k3, 0), &mut ()).unwrap(); // pod 1: evicts 2 -> 3 1
    assert_eq!(f.shared_cache().unwrap().iter_mru().collect::<Vec<_>>(), [k3[0], k1[0]]);
}

#[test]
fn prefix_aware_sees_the_pool_on_every_pod() {
    // 2 pods x 4, prefix-aware alpha 1, A = [1,2] twice at t = 0.
    // r0: no match anywhere -> pod 0 (ties to the lowest index); it is busy until 1.6 ms.
    // r1: global: every pod matches 2 blocks; pod 0 scores 2 - 1 = 1, pod 1 scores 2 -> pod 1,
    //     believed 2 and hit 2. Local: pod 0 scores 1, pod 1 scores 0 -> pod 0, hit 2.
    let a = keys_of(&[1, 2]);
    for (mode, want_pod, want_queue) in [(CacheMode::Global, 1, 0), (CacheMode::Local, 0, 1)] {
        let mut bufs = Bufs::new(with(FleetConfig::new(2, 4, RouterKind::PrefixAware), |c| fifo(c).cache = mode));
        let mut f = bufs.fleet();
        assert_eq!(f.dispatch(&req(0, &a, 0), &mut ()).unwrap().pod, 0);
        let o = f.dispatch(&req(0, &a, 0), &mut ()).unwrap();
        assert_eq!(
            (o.pod, o.believed_match_blocks, o.hit_blocks, o.queue_len),
            (want_pod, 2, 2, want_queue),
            "{mode:?}"
        );
    }
}

#[test]
fn global_layout_and_rejected_combinations() {
    let c = global(3, 5, RouterKind::RoundRobin);
    let l = FifoLayout::new(&c, 8, 0).unwrap();
    assert_eq!((l.slots_per_pod, l.table_per_pod, l.shared_table), (5, 0, LruPod::table_len(15)));
    assert_eq!(l.tables_len(), 32);
    let local = FifoLayout::new(&FleetConfig::new(3, 5, RouterKind::RoundRobin), 8, 0).unwrap();
    assert_eq!((local.shared_table, local.tables_len()), (0, 3 * LruPod::table_len(5)));
    // A table sized for per-pod caches is refused.
    let mut slots = vec![Slot::default(); 15];
    let mut tables = vec![0u32; 3 * LruPod::table_len(5)];
    let mut queues = vec![0u64; 24];
    let r = FifoFleet::new(
        c,
        FifoBuffers {
            slots: &mut slots,
            tables: &mut tables,
            queues: &mut queues,
            index: &mut [],
            pending: &mut [],
            pending_table: &mut [],
            cpu_slots: &mut [],
            cpu_tables: &mut [],
        },
    );
    assert!(matches!(r, Err(Error::BufferSize { buffer: Buffer::Tables, expected: 32, .. })));
    let bad = |c: FleetConfig, field: &str| {
        // a value out of range, or one a global cache rules out (a conflict between settings)
        let refused = |f: Field| f.name() == field;
        assert!(
            matches!(c.validate(), Err(Error::InvalidConfig { field: f, .. } | Error::Conflict { field: f, .. }) if refused(f)),
            "{field}: {:?}",
            c.validate()
        );
    };
    bad(with(c, |c| fifo(c).cpu_capacity_blocks = 4), "cpu-capacity");
    bad(with(global(3, 5, RouterKind::PrefixAware), |c| view(c).stale_delay = 1), "stale");
    bad(with(global(3, 5, RouterKind::PrefixAware), |c| view(c).index = IndexKind::Global), "index");
    let policy =
        ScalePolicy { min_pods: 1, initial_pods: 1, interval_ns: 1, up_milli: 2000, down_milli: 500, startup_ns: 0 };
    bad(with(c, |c| *scale(c) = Some(policy)), "scale-min");
    bad(global(64, MAX_POD_BLOCKS_PER_TEST, RouterKind::RoundRobin), "capacity");
}

/// 64 pods of this many blocks exceed the pool's u32 slot indices.
const MAX_POD_BLOCKS_PER_TEST: usize = limits::MAX_POD_BLOCKS / 32;
