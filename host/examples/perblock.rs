//! Per-block FIFO replay of one router over a trace held in memory (a profiling aid: the dispatch
//! loop `fleet bench` times per block, for `perf record` or `valgrind --tool=cachegrind`; REPEATS 0
//! parses only, to subtract). Usage: perblock TRACE ROUTER|bare [REPEATS] [PODS] [CAPACITY];
//! REPEATS `routes`: one replay, printing the pod of each request (for
//! `scripts/derived_index_model.py`).
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
        let mut owned = OwnedFifo::new(cfg, FifoSizes { queue_per_pod: 1 << 16, pending: 0 }, 1).unwrap();
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
