//! Per-block FIFO replay of one router over a trace held in memory (a profiling aid: the dispatch
//! loop `fleet bench` times per block, for `perf record` or `valgrind --tool=cachegrind`; REPEATS 0
//! parses only, to subtract). Usage: perblock TRACE ROUTER|bare [REPEATS] [PODS] [CAPACITY];
//! REPEATS `routes`: one replay, printing the pod of each request (for
//! `scripts/derived_index_model.py`); ROUTER `sep:ROUTES` or `fused:ROUTES`: the index presets'
//! cache work alone along those routes, separate structures or the fused table (branch pb32).
//! Environment `PERBLOCK_SEPARATE=1`: the fleet keeps the pods' caches and the router's index
//! apart where it would fuse them (branch pb33).
mod common;
use brokerlab::fleet::run::{FifoSizes, OwnedFifo};
use brokerlab_core::fleet::{FleetConfig, Request, RouterKind};
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let routes = a.get(3).is_some_and(|s| s == "routes");
    let repeats: usize = if routes { 1 } else { a.get(3).map_or(3, |s| s.parse().unwrap()) };
    let pods: usize = a.get(4).map_or(8, |s| s.parse().unwrap());
    let capacity: usize = a.get(5).map_or(16384, |s| s.parse().unwrap());
    let (reqs, keys) = common::load(&a[1]);
    if let Some((mode, file)) = a[2].split_once(':') {
        // `sep:ROUTES` / `fused:ROUTES`: the approximate-index presets' cache work alone, per
        // request routed as ROUTES says (one pod a line, `perblock TRACE ROUTER routes`): the
        // greedy walk over every pod's router LRU (`holders` per key until no pod holds it),
        // the router's record in prompt order, the pod's hit test and its tail-first touches;
        // `sep` over today's separate structures (an `ApproxIndex` and one `LruPod` per pod),
        // `fused` over one `FusedLru` per pod (`FusedLru::record_and_serve`), `fused2` the same
        // table with each side's pass probing every key.
        let routes: Vec<usize> =
            std::fs::read_to_string(file).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect();
        assert_eq!(routes.len(), reqs.len(), "one route per request");
        use brokerlab_core::fleet::{ApproxIndex, FusedLru, FusedSide, FusedSlot, LruPod, PodSet, Slot};
        for _ in 0..repeats {
            let (mut walked, mut hits) = (0u64, 0u64);
            let t = Instant::now();
            if mode == "sep" {
                let tl = LruPod::table_len(capacity);
                let (mut ps, mut pt) = (vec![Slot::default(); pods * capacity], vec![0u32; pods * tl]);
                let (mut rs, mut rt) = (vec![Slot::default(); pods * capacity], vec![0u32; pods * tl]);
                let mut fleet: Vec<_> = ps
                    .chunks_exact_mut(capacity)
                    .zip(pt.chunks_exact_mut(tl))
                    .map(|(s, t)| LruPod::new(s, t).unwrap())
                    .collect();
                let mut index = ApproxIndex::new(pods, &mut rs, &mut rt, &mut []).unwrap();
                let all = PodSet::<1>::first(pods);
                for (i, (_, _, _, range)) in reqs.iter().enumerate() {
                    let keys = &keys[range.clone()];
                    for &k in keys {
                        walked += 1;
                        if index.holders(k, all).is_empty() {
                            break;
                        }
                    }
                    let p = routes[i];
                    index.record(p, keys).unwrap();
                    hits += fleet[p].hit_blocks(keys) as u64;
                    fleet[p].touch_each(keys.iter().rev().copied(), &mut ());
                }
            } else {
                let (n, tl) = (FusedLru::slots_len(capacity, capacity), FusedLru::min_table_len(capacity, capacity));
                let (mut fs, mut ft) = (vec![FusedSlot::default(); pods * n], vec![0u32; pods * tl]);
                let mut fleet: Vec<_> = fs
                    .chunks_exact_mut(n)
                    .zip(ft.chunks_exact_mut(tl))
                    .map(|(s, t)| FusedLru::new(capacity, capacity, s, t).unwrap())
                    .collect();
                for (i, (_, _, _, range)) in reqs.iter().enumerate() {
                    let keys = &keys[range.clone()];
                    for &k in keys {
                        walked += 1;
                        let mut m = 0u64;
                        for (p, f) in fleet.iter().enumerate() {
                            m |= (f.contains(FusedSide::Router, k) as u64) << p;
                        }
                        if m == 0 {
                            break;
                        }
                    }
                    let p = routes[i];
                    if mode == "fused" {
                        hits += fleet[p].record_and_serve(keys, true) as u64;
                    } else {
                        fleet[p].touch_each(FusedSide::Router, keys.iter().copied());
                        hits += fleet[p].hit_blocks(FusedSide::Pod, keys) as u64;
                        fleet[p].touch_each(FusedSide::Pod, keys.iter().rev().copied());
                    }
                }
            }
            let s = t.elapsed().as_secs_f64();
            println!("{mode} {:.3} s {:.2} M touches/s hits {hits} walked {walked}", s, keys.len() as f64 / s / 1e6);
        }
        return;
    }
    if a[2] == "bare" {
        use brokerlab_core::fleet::{LruPod, Slot};
        for _ in 0..repeats {
            let tl = LruPod::table_len(capacity);
            let mut slots = vec![Slot::default(); pods * capacity];
            let mut tables = vec![0u32; pods * tl];
            let mut fleet: Vec<_> = slots
                .chunks_exact_mut(capacity)
                .zip(tables.chunks_exact_mut(tl))
                .map(|(s, t)| LruPod::new(s, t).unwrap())
                .collect();
            let mut hits = 0u64;
            let t = Instant::now();
            for (i, (_, _, _, range)) in reqs.iter().enumerate() {
                let pod = &mut fleet[i % pods];
                let keys = &keys[range.clone()];
                hits += pod.hit_blocks(keys) as u64;
                for &k in keys.iter().rev() {
                    pod.touch(k, &mut ());
                }
            }
            let s = t.elapsed().as_secs_f64();
            println!("{} {:.3} s {:.2} M touches/s hits {hits}", a[2], s, keys.len() as f64 / s / 1e6);
        }
        return;
    }
    let router = RouterKind::parse(&a[2]).expect("router");
    let cfg = FleetConfig::new(pods, capacity, router);
    for _ in 0..repeats {
        // PERBLOCK_SEPARATE=1: the pods' caches and the router's index kept apart even where the
        // fleet fuses them (branch pb33), for measuring one against the other in one build.
        let fused = std::env::var_os("PERBLOCK_SEPARATE").is_none();
        let sizes = FifoSizes { queue_per_pod: 1 << 16, pending: 0 };
        let mut owned = OwnedFifo::with_fused(cfg, sizes, 1, fused).unwrap();
        let mut fleet = owned.fleet().unwrap();
        let t = Instant::now();
        for (arrival_ns, input, output, range) in &reqs {
            let req = Request {
                arrival_ns: *arrival_ns,
                input_tokens: *input,
                output_tokens: *output,
                keys: &keys[range.clone()],
            };
            let out = fleet.dispatch(&req, &mut ()).unwrap();
            if routes {
                println!("{}", out.pod);
            }
        }
        if routes {
            return;
        }
        let s = t.elapsed().as_secs_f64();
        let tot = fleet.totals();
        println!(
            "{} {:.3} s {:.2} M touches/s hit {} of {} tokens",
            router.name(),
            s,
            keys.len() as f64 / s / 1e6,
            tot.hit_tokens,
            tot.input_tokens
        );
    }
}
