//! `fleet bench --route`: the cost of one routing decision of a 240K-token prompt (15,000 blocks)
//! over 64 pods and over MAX_PODS pods, per router, and the heap allocations it makes (counted by
//! the binary's global allocator, [`CountingAlloc`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use brokerlab_core::fleet::limits::MAX_PODS;
use brokerlab_core::fleet::{
    AnyRouter, BlockIndex, FleetConfig, Holders, IndexEntry, PodLoad, RouteView, Router, RouterKind, keys,
};
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::fleet::run::OwnedRouter;

/// Heap allocations made by this process so far (when [`CountingAlloc`] is the global allocator).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting allocations (one relaxed atomic add each).
pub struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to `System`, which upholds GlobalAlloc's contract.
// The only unsafe code here: a global allocator cannot be written without it.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same layout as given to us.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as `dealloc` / `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Whether allocations are being counted (a probe allocation moves the counter).
fn counting() -> bool {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    black_box(Box::new(black_box(1u64)));
    ALLOCATIONS.load(Ordering::Relaxed) != before
}

/// Prompt length of the benchmark, tokens (the llm-d-router report: 240K tokens).
pub const PROMPT_TOKENS: u64 = 240_000;

/// One router's figures.
#[derive(Debug, Serialize)]
pub struct RouteBench {
    /// Router name.
    pub router: String,
    /// Time of one `route` call (scoring + pick), best of the repeats, ns.
    pub route_ns: f64,
    /// Time of recording the routed request in the router's approximate index, ns (0 without one).
    pub record_ns: f64,
    /// Heap allocations per decision (route + record).
    pub allocations_per_decision: f64,
}

/// The whole benchmark.
#[derive(Debug, Serialize)]
pub struct RouteReport {
    /// Pods (64, or MAX_PODS).
    pub pods: usize,
    /// Bytes of the exact index (the global key -> pods table of the prompt's keys).
    pub index_bytes: usize,
    /// Blocks of the prompt.
    pub blocks: usize,
    /// Decisions timed per router and repeat.
    pub decisions: usize,
    /// Whether the global allocator counted allocations (false: the figures are not measured).
    pub allocations_counted: bool,
    /// One row per router.
    pub routers: Vec<RouteBench>,
    /// Routers not run, with why (their approximate index would not fit in memory).
    pub skipped: Vec<String>,
}

/// Largest router-side storage (bytes) the benchmark allocates for one router: the approximate
/// index's key -> pods table grows as pods x LRU keys x ceil(pods / 64) x 16 B (8.6 GB at 1,024
/// pods of 16,384-key LRUs), so the approximate-index presets are skipped at 1,024 pods.
const MAX_ROUTER_BYTES: usize = 2 << 30;

/// The pod counts measured: 64 (the old bound, the figure to compare with) and MAX_PODS.
pub fn pod_counts() -> Vec<usize> {
    if MAX_PODS > 64 { vec![64, MAX_PODS] } else { vec![64] }
}

/// Pod p holds (and was sent) the first (p + 1) / N of the prompt: every match walk is long.
fn held_blocks(p: usize, pods: usize, blocks: usize) -> usize {
    blocks * (p + 1) / pods
}

/// Runs the benchmark over `pods` pods: `decisions` decisions per router, best of `repeats`.
pub fn run(pods: usize, decisions: usize, repeats: usize) -> CliResult<RouteReport> {
    let blocks = (PROMPT_TOKENS / 16) as usize;
    let ids: Vec<u64> = (0..blocks as u64).collect();
    let mut prompt = vec![0u64; blocks];
    keys::trace_keys(&ids, PROMPT_TOKENS, 16, &mut prompt).map_err(|e| CliError::failure(e.to_string()))?;
    // The exact state: a global index where pod p holds its leading share of the prompt. Up to
    // 64 pods the table is sized for pods x blocks keys (a fleet's caches), as it always was;
    // above, for the prompt's keys (the only ones held here: pods x blocks x 16 words would be
    // 8.6 GB at 1,024 pods).
    let keys = if pods <= 64 { pods * blocks } else { blocks };
    let mut entries = vec![IndexEntry::default(); BlockIndex::table_len_for_pods(keys, pods)];
    let index_bytes = entries.len() * std::mem::size_of::<IndexEntry>();
    let mut exact = BlockIndex::with_pods(&mut entries, pods).map_err(|e| CliError::failure(e.to_string()))?;
    for p in 0..pods {
        for &k in &prompt[..held_blocks(p, pods, blocks)] {
            exact.insert(k, p).map_err(|e| CliError::failure(e.to_string()))?;
        }
    }
    let queue: Vec<u32> = (0..pods as u32).map(|p| p % 7).collect();
    let loads: Vec<PodLoad> = (0..pods as u32)
        .map(|p| PodLoad {
            waiting: p % 7,
            running: p % 5,
            kv_used_blocks: 100 * (p % 9),
            kv_capacity_blocks: 16_384,
            pending_prefill_tokens: 1_000 * (p as u64 % 11),
        })
        .collect();
    let view = RouteView {
        request: 0,
        queue_lens: &queue,
        held: Holders::Index(&exact),
        pending: None,
        pending_stores: None,
        speculative: None,
        loads: Some(&loads),
        now_ns: 0,
    };
    let kinds = [RouterKind::PrefixAware].into_iter().chain(RouterKind::PRESETS);
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for kind in kinds {
        let mut cfg = FleetConfig::new(pods, 16_384, kind);
        if let Some(mut spec) = cfg.router_spec() {
            // Room for the whole prompt in the approximate index's LRUs.
            spec.params.approx_lru_blocks = 16_384;
            cfg.routing = Some(spec);
        }
        let bytes = cfg.router_layout().map_or(usize::MAX, |l| l.bytes(pods));
        if bytes > MAX_ROUTER_BYTES {
            skipped.push(format!("{} (its approximate index needs {:.1} GB)", kind.name(), bytes as f64 / 1e9));
            continue;
        }
        let mut owned = OwnedRouter::new(&cfg)?;
        let mut router = AnyRouter::build(kind, 1.0, cfg.routing.as_ref(), pods, owned.buffers())
            .map_err(|e| CliError::failure(e.to_string()))?;
        for p in 0..pods {
            router
                .routed(p, &prompt[..held_blocks(p, pods, blocks)], 0)
                .map_err(|e| CliError::failure(e.to_string()))?;
        }
        rows.push(one(&mut router, &view, &prompt, kind, decisions, repeats)?);
    }
    Ok(RouteReport { pods, index_bytes, blocks, decisions, allocations_counted: counting(), routers: rows, skipped })
}

fn one(
    router: &mut AnyRouter<'_>,
    view: &RouteView<'_, '_>,
    prompt: &[u64],
    kind: RouterKind,
    decisions: usize,
    repeats: usize,
) -> CliResult<RouteBench> {
    let mut best_route = f64::INFINITY;
    let mut best_record = f64::INFINITY;
    let mut allocs = 0u64;
    for _ in 0..repeats.max(1) {
        let a0 = ALLOCATIONS.load(Ordering::Relaxed);
        let t0 = Instant::now();
        let mut last = 0;
        for _ in 0..decisions {
            last = black_box(router.route(black_box(view), black_box(prompt))).pod;
        }
        let route = t0.elapsed().as_nanos() as f64 / decisions as f64;
        // Recording re-adds the prompt on the pod it went to (the keys are already there:
        // a refresh, as a repeat request costs).
        let t1 = Instant::now();
        for _ in 0..decisions {
            router.routed(last, prompt, 0).map_err(|e| CliError::failure(e.to_string()))?;
        }
        let record = t1.elapsed().as_nanos() as f64 / decisions as f64;
        allocs = allocs.max(ALLOCATIONS.load(Ordering::Relaxed) - a0);
        best_route = best_route.min(route);
        best_record = best_record.min(record);
    }
    let has_index = matches!(router, AnyRouter::Shipped(r) if r.approx().is_some());
    Ok(RouteBench {
        router: kind.name().to_string(),
        route_ns: best_route,
        record_ns: if has_index { best_record } else { 0.0 },
        allocations_per_decision: allocs as f64 / decisions as f64,
    })
}

/// The table `fleet bench --route` prints.
pub fn render(r: &RouteReport) -> String {
    let mut s = format!(
        "one routing decision: {} tokens ({} blocks) over {} pods (pod p holds the first (p+1)/{} of the prompt, exact index = global table of {:.1} MB), best of the repeats, {} decisions each\n\n",
        PROMPT_TOKENS,
        r.blocks,
        r.pods,
        r.pods,
        r.index_bytes as f64 / 1e6,
        r.decisions
    );
    s.push_str("router                 route (us)  record (us)  allocations/decision\n");
    for b in &r.routers {
        let alloc = if r.allocations_counted {
            format!("{:.2}", b.allocations_per_decision)
        } else {
            "not counted".to_string()
        };
        s.push_str(&format!(
            "{:<22} {:>10.1}  {:>11.1}  {:>20}\n",
            b.router,
            b.route_ns / 1e3,
            b.record_ns / 1e3,
            alloc
        ));
    }
    for k in &r.skipped {
        s.push_str(&format!("not run: {k}\n"));
    }
    if !r.allocations_counted {
        s.push_str("\n(allocations are counted only by the brokerlab binary's global allocator)\n");
    }
    s
}
