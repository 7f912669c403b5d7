//! The batched engine's replay of one router over a trace held in memory, as `fleet bench`
//! times it (a profiling aid for `perf record` or `valgrind --tool=cachegrind`; REPEATS 0 parses
//! and hashes only, to subtract). Usage: batched TRACE ROUTER [REPEATS] [PODS] [CAPACITY];
//! prints each replay's wall time (NO_PREFETCH=1: the keys not asked into the cache ahead).
mod common;
use brokerlab::fleet::run::source::{PREFETCH_AHEAD, prefetch_keys};
use brokerlab::fleet::run::{Batched, RequestSource, simulate};
use brokerlab_core::fleet::{BatchedConfig, FleetConfig, Profile, Request, RouterKind};
use std::time::Instant;

struct Src<'a>(&'a [common::HeldRequest], &'a [u64]);

impl RequestSource for Src<'_> {
    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> brokerlab::error::CliResult<()> {
        let prefetch = std::env::var_os("NO_PREFETCH").is_none();
        for (n, (a, i, o, r)) in self.0.iter().enumerate() {
            // as `fleet bench` and `fleet compare` feed a trace held in memory
            if prefetch && let Some((_, _, _, next)) = self.0.get(n + PREFETCH_AHEAD) {
                prefetch_keys(&self.1[next.clone()]);
            }
            let req = Request { arrival_ns: *a, input_tokens: *i, output_tokens: *o, keys: &self.1[r.clone()] };
            sink(&req).map_err(|e| brokerlab::error::CliError::failure(e.to_string()))?;
        }
        Ok(())
    }

    fn id_blocks(&self) -> u32 {
        32
    }
}

#[global_allocator]
static GLOBAL: brokerlab::fleet::bench::route::CountingAlloc = brokerlab::fleet::bench::route::CountingAlloc;

fn main() {
    // the binary's stack for fleet commands
    std::thread::Builder::new().stack_size(256 << 20).spawn(run).unwrap().join().unwrap();
}

fn run() {
    let a: Vec<String> = std::env::args().collect();
    let kind = RouterKind::parse(&a[2]).expect("a router name");
    let repeats: usize = a.get(3).map_or(3, |s| s.parse().unwrap());
    let pods: usize = a.get(4).map_or(8, |s| s.parse().unwrap());
    let capacity: usize = a.get(5).map_or(16384, |s| s.parse().unwrap());
    let (reqs, keys) = common::load(&a[1]);
    let e = BatchedConfig::new(Profile::Qwen3_32bH100x2);
    let cfg = FleetConfig { alpha: 16.0, ..FleetConfig::batched(pods, capacity, kind, e) };
    for _ in 0..repeats {
        let t = Instant::now();
        let r = simulate::<Batched>(cfg, &mut Src(&reqs, &keys), false).unwrap();
        println!("{:.4} s, {} steps, {} restarts", t.elapsed().as_secs_f64(), r.summary.steps, r.restarts);
    }
}
