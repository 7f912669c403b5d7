//! The FIFO fleet's fused pod + router tables ([`Fleet::attach_fused`], branch pb33) against the
//! separate pod caches and approximate index, their oracle: the same configuration replayed
//! twice on random request streams, and after every request the same outcome (route, pod hit,
//! times), every `holders` answer of the router's index (every key of the stream's universe,
//! every pod), every pod's cache contents and every LRU's length.

mod common;
mod specs;

use brokerlab_core::fleet::route::kind::AnyRouter;
use brokerlab_core::fleet::*;
use common::{Bufs, fifo, with};
use proptest::prelude::*;
use specs::{APPROX_PRESETS, approx_spec};

/// A request: gap to the previous (ms), key ids (repeats allowed), tokens past the last full
/// block, output tokens.
type Req = (u64, Vec<u64>, u64, u64);

/// Keys whose upper 32 bits (tag and home) take at most `high` values: keys sharing a home,
/// and keys sharing a tag too, so that a probe must compare the key.
fn key(h: u64, high: u64) -> u64 {
    let g = h % high;
    (g << 60) | (((g * 0x9e37) & 0xff_ffff) << 36) | h
}

/// Per key the index's holders and the pods caching it, per pod the index's length.
type State = (Vec<u64>, Vec<u64>, Vec<usize>);

/// What the router's index and the pods' caches hold: per key, the holders set of the index
/// and the set of pods whose cache holds it; per pod, the index's length.
fn state(f: &FifoFleet<'_>, universe: &[u64], pods: usize) -> State {
    let AnyRouter::Shipped(r) = f.router() else { panic!("a shipped router") };
    let a = r.approx().expect("an approximate index");
    let held: Vec<u64> = universe.iter().map(|&k| a.mask(k)).collect();
    let held_ref: Vec<u64> = universe.iter().map(|&k| a.holders_reference(k, PodSet::<1>([u64::MAX])).0[0]).collect();
    assert_eq!(held, held_ref, "the homed holders against the generic probe");
    let cached = universe
        .iter()
        .map(|&k| {
            (0..pods).fold(0u64, |m, p| {
                let holds = match f.pod_cache(p) {
                    Some(c) => c.contains(k),
                    None => a.pod_holds(p, k).expect("the pod's cache in the fused table"),
                };
                m | (u64::from(holds) << p)
            })
        })
        .collect();
    (held, cached, (0..pods).map(|p| a.held_blocks(p)).collect())
}

fn replay(cfg: FleetConfig, reqs: &[Req], high: u64, fused: bool) -> Vec<(Outcome, State)> {
    let universe: Vec<u64> = (0..96).map(|h| key(h, high)).collect();
    let mut b = Bufs::new(cfg);
    let rl = cfg.router_layout().unwrap();
    let mut rs = vec![Slot::default(); cfg.pods * rl.slots_per_pod];
    let mut rt = vec![0u32; cfg.pods * rl.table_per_pod];
    let mut ri = vec![IndexEntry::default(); rl.index];
    let (fs, ft) = Fleet::fused_layout(&cfg).expect("a configuration the fused tables support");
    let (mut fs, mut ft) = (vec![FusedSlot::default(); fs], vec![0u32; ft]);
    let mut f = b.fleet_router_buffers(RouterBuffers { slots: &mut rs, tables: &mut rt, index: &mut ri });
    if fused {
        assert!(f.attach_fused(&mut fs, &mut ft).unwrap());
        assert!((0..cfg.pods).all(|p| f.pod_cache(p).is_none()));
    }
    let mut out = Vec::new();
    let mut ms = 0;
    for (gap, ids, extra, output) in reqs {
        ms += gap;
        let keys: Vec<u64> = ids.iter().map(|&h| key(h, high)).collect();
        let req = Request {
            arrival_ns: ms * 1_000_000,
            input_tokens: keys.len() as u64 * 16 + extra,
            output_tokens: *output,
            keys: &keys,
        };
        let o = f.dispatch(&req, &mut ()).unwrap();
        out.push((o, state(&f, &universe, cfg.pods)));
    }
    out
}

fn requests() -> impl Strategy<Value = Vec<Req>> {
    proptest::collection::vec((0u64..30, proptest::collection::vec(0u64..96, 0..40), 1u64..16, 0u64..20), 1..60)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// The five presets with an approximate index, 1 to 8 pods, capacities 1 to 79, tail-first
    /// or in-order touches.
    #[test]
    fn fused_fleet_is_separate_fleet(
        preset in 0usize..5,
        pods in 1usize..9,
        capacity in 1usize..80,
        in_order: bool,
        high in 1u64..40,
        reqs in requests(),
    ) {
        let cfg = with(FleetConfig::new(pods, capacity, APPROX_PRESETS[preset]), |c| {
            fifo(c).t_decode_ns = 7;
            if in_order {
                fifo(c).order = TouchOrder::InOrder;
            }
        });
        let separate = replay(cfg, &reqs, high, false);
        let fused = replay(cfg, &reqs, high, true);
        for (i, (s, f)) in separate.iter().zip(&fused).enumerate() {
            prop_assert_eq!(s, f, "request {}", i);
        }
    }

    /// Random pipelines over the approximate index (and SGLang, vllm-loadaware with random
    /// thresholds), their LRUs of the pods' size over the whole prompt (what fusing needs).
    #[test]
    fn fused_fleet_is_separate_fleet_for_pipelines(
        pods in 1usize..9,
        capacity in 1usize..80,
        spec in approx_spec(),
        high in 1u64..40,
        reqs in requests(),
    ) {
        let mut spec = spec;
        spec.params.approx_lru_blocks = 0;
        spec.params.approx_max_blocks = 0;
        let cfg = with(FleetConfig { routing: Some(spec), ..FleetConfig::new(pods, capacity, RouterKind::Custom) }, |c| {
            fifo(c).t_decode_ns = 7
        });
        prop_assume!(cfg.validate().is_ok());
        // (a precise scorer drawn too: the exact view reads the pods' caches, kept apart)
        prop_assume!(Fleet::fused_layout(&cfg).is_some());
        let separate = replay(cfg, &reqs, high, false);
        let fused = replay(cfg, &reqs, high, true);
        for (i, (s, f)) in separate.iter().zip(&fused).enumerate() {
            prop_assert_eq!(s, f, "request {}", i);
        }
    }
}

/// Where the rules do not hold, the fleet keeps the structures apart.
#[test]
fn fused_only_where_the_rules_allow() {
    let base = FleetConfig::new(8, 64, RouterKind::LlmDApproximate);
    assert!(Fleet::fused_layout(&base).is_some());
    let apart = [
        FleetConfig::new(9, 64, RouterKind::LlmDApproximate),
        FleetConfig::new(8, 64, RouterKind::RoundRobin),
        FleetConfig::new(8, 64, RouterKind::LlmDPrecise),
        with(base, |c| fifo(c).cpu_capacity_blocks = 8),
        with(base, |c| fifo(c).cache = CacheMode::Global),
        with(base, |c| common::view(c).stale_delay = 1),
        with(base, |c| {
            *common::scale(c) = Some(ScalePolicy {
                min_pods: 2,
                initial_pods: 4,
                interval_ns: 1_000_000,
                up_milli: 2_000,
                down_milli: 500,
                startup_ns: 0,
            })
        }),
    ];
    for cfg in apart {
        assert_eq!(Fleet::fused_layout(&cfg), None, "{cfg:?}");
        let mut b = Bufs::new(cfg);
        let rl = cfg.router_layout().unwrap();
        let mut rs = vec![Slot::default(); cfg.pods * rl.slots_per_pod];
        let mut rt = vec![0u32; cfg.pods * rl.table_per_pod];
        let mut ri = vec![IndexEntry::default(); rl.index];
        let mut f = b.fleet_router_buffers(RouterBuffers { slots: &mut rs, tables: &mut rt, index: &mut ri });
        assert!(!f.attach_fused(&mut [], &mut []).unwrap(), "{cfg:?}");
    }
    let mut lru = RouterSpec::preset(RouterKind::GieDefault).unwrap();
    lru.params.approx_lru_blocks = 32;
    let cfg = FleetConfig { routing: Some(lru), ..FleetConfig::new(8, 64, RouterKind::Custom) };
    assert_eq!(Fleet::fused_layout(&cfg), None);
    lru.params.approx_lru_blocks = 0;
    lru.params.approx_max_blocks = 10;
    let cfg = FleetConfig { routing: Some(lru), ..FleetConfig::new(8, 64, RouterKind::Custom) };
    assert_eq!(Fleet::fused_layout(&cfg), None);
}
