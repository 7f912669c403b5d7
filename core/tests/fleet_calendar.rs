//! The batched fleet's fast dispatch against its oracle on random traces: the calendar (only the
//! pods with an event before an arrival are advanced; queue lengths and loads read from dense
//! per-pod entries) must give exactly what the reference path gives (every pod advanced and
//! asked at every arrival, `Fleet::use_reference_paths`): the same routes, the same completions
//! in the same order, the same inter-token latencies (as a multiset: the calendar leaves a pod
//! inside a run of decode steps no router sees until it is due or routed to, so those steps'
//! latencies come later; every reader of them reads the multiset), the same per-pod counters.
//! Small fleets and
//! 1,024 pods; small pods (their key tables collide often), shared prefixes,
//! preemptions, offload tiers (the fast path reads the fleet's kept `Engine::leads`), and
//! closed-loop steps (`advance_next`) and aborts between dispatches.

use brokerlab_core::fleet::*;

mod common;
use common::BatchedOwned as Owned;

fn lcg(x: &mut u64) -> u64 {
    *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *x >> 33
}

/// The completions in order, the inter-token latencies as a multiset (value -> samples).
#[derive(Default, PartialEq, Debug)]
struct Sink {
    completions: Vec<Completion>,
    itl: std::collections::BTreeMap<u64, u64>,
}

impl EngineEvents for Sink {
    fn completed(&mut self, c: &Completion) {
        self.completions.push(*c);
    }
    fn itl(&mut self, itl_ns: u64, count: u64) {
        *self.itl.entry(itl_ns).or_default() += count;
    }
}

/// One request: arrival, prompt keys, extra tokens, output tokens; then what happens before the
/// next one: closed-loop steps up to its arrival, an abort of an earlier request.
struct Req {
    at_ns: u64,
    keys: Vec<u64>,
    extra: u64,
    out: u64,
    steps_before: bool,
    abort: Option<u64>,
}

#[derive(PartialEq, Debug)]
struct Outcome {
    routes: Vec<Routed>,
    aborted: Vec<bool>,
    sink: Sink,
    stats: Vec<BatchedStats>,
    totals: FleetTotals,
}

fn run(cfg: FleetConfig, reqs: &[Req], reference: bool) -> Outcome {
    // room for every request on one pod (small fleets); a 1,024-pod fleet spreads them
    let per_pod = if cfg.pods > 64 { 64 } else { 256 };
    let layout = BatchedLayout::new(&cfg, per_pod, per_pod * 16).unwrap();
    let mut owned = Owned::new(&layout);
    // the offload tier's buffers (empty without one)
    let mut cpu_slots = vec![Slot::default(); layout.cpu_slots_len()];
    let mut cpu_tables = vec![0u32; layout.cpu_tables_len()];
    let mut buffers = owned.buffers(&mut []);
    buffers.cpu_slots = &mut cpu_slots;
    buffers.cpu_tables = &mut cpu_tables;
    let mut f = BatchedFleet::new(cfg, buffers).unwrap();
    f.use_reference_paths(reference);
    let mut sink = Sink::default();
    let (mut routes, mut aborted) = (vec![], vec![]);
    for q in reqs {
        if q.steps_before {
            while f.advance_next(q.at_ns, &mut sink).unwrap() {}
        }
        if let Some(id) = q.abort {
            aborted.push(f.abort(id, q.at_ns, &mut sink).unwrap());
        }
        let req = Request {
            arrival_ns: q.at_ns,
            input_tokens: q.keys.len() as u64 * 16 + q.extra,
            output_tokens: q.out,
            keys: &q.keys,
        };
        routes.push(f.dispatch(&req, &mut sink).unwrap());
    }
    f.finish(&mut sink).unwrap();
    let stats = (0..cfg.pods).map(|p| *f.pod_stats(p).unwrap()).collect();
    Outcome { routes, aborted, sink, stats, totals: *f.totals() }
}

/// A random trace: `n` requests over `tenants` shared prefixes (chained keys, as vLLM's), each
/// with a unique suffix; arrivals `gap` ns apart on average.
fn trace(x: &mut u64, n: usize, tenants: u64, cap: usize, gap: u64, interleave: bool) -> Vec<Req> {
    let mut at = 0u64;
    let mut out = vec![];
    for i in 0..n {
        at += lcg(x) % (2 * gap + 1);
        let t = lcg(x) % tenants;
        let prefix = (lcg(x) % 5) as usize;
        let suffix = (lcg(x) % 4) as usize;
        let mut ids: Vec<u64> = (0..prefix).map(|j| t * 1000 + j as u64).collect();
        ids.extend((0..suffix).map(|_| 1 << 40 | lcg(x)));
        let mut keys = vec![0; ids.len()];
        keys::trace_keys(&ids, ids.len() as u64 * 16, 16, &mut keys).unwrap();
        let extra = lcg(x) % 16;
        let o = lcg(x) % 40;
        let len = keys.len() as u64 * 16 + extra;
        if len == 0 || len + o.max(1) - 1 > cap as u64 * 16 {
            continue;
        }
        let steps_before = interleave && lcg(x).is_multiple_of(4);
        let abort = (interleave && i > 0 && lcg(x).is_multiple_of(9)).then(|| lcg(x) % out.len().max(1) as u64);
        out.push(Req { at_ns: at, keys, extra, out: o, steps_before, abort });
    }
    out
}

/// `slow_decode`: decode steps long against the arrival gaps (runs of decode steps span many
/// arrivals, and requests are routed to pods inside one), else short.
fn engine(x: &mut u64, tier: bool, slow_decode: bool) -> BatchedConfig {
    let mut e = BatchedConfig::new(Profile::Seed);
    e.max_num_seqs = 1 + (lcg(x) % 6) as u32;
    e.max_num_batched_tokens = e.max_num_seqs + (lcg(x) % 120) as u32;
    if let Some(l) = e.cost.linear_mut() {
        l.t_kv_token_ns = lcg(x) % 3;
        l.t_decode_seq_ns = lcg(x) % 200;
        if slow_decode {
            l.t_overhead_ns = lcg(x) % 20_000;
            l.t_decode_seq_ns += lcg(x) % 20_000;
            l.t_prefill_token_ns = 1 + lcg(x) % 2_000;
        }
    }
    // an offload tier on half the cases, every router (the routers' matches then count its
    // blocks: the fast path reads the fleet's kept `Engine::leads`, the reference asks every
    // time)
    if tier {
        e.offload.cpu_capacity = 4 + (lcg(x) % 40) as u32;
        // a tier block counts whole in the match (at the default 0.8 the short prompts here
        // round most tier blocks away)
        e.offload.cpu_tier_weight_milli = 1000;
    }
    e
}

const ROUTERS: [RouterKind; 4] =
    [RouterKind::LlmDPrecise, RouterKind::PrefixAware, RouterKind::LeastLoaded, RouterKind::RoundRobin];

/// Returns the tokens the cases' offload tiers gave (the fast path reads the fleet's kept
/// `Engine::leads`, the reference asks the engines at every decision).
fn check(pods: usize, cases: usize, n: usize, seed: u64, slow_decode: bool) -> u64 {
    let mut x = seed;
    let (mut preempted, mut tier_hits) = (0, 0);
    let mut routed_pods = std::collections::BTreeSet::new();
    for case in 0..cases {
        let cap = 4 + (lcg(&mut x) % 40) as usize;
        let router = ROUTERS[case % ROUTERS.len()];
        let e = engine(&mut x, case % 8 >= 4, slow_decode);
        let gap = 50 + lcg(&mut x) % 3000;
        // a quarter of the tier cases spaced out (idle pods between arrivals: blocks sit in the
        // tiers when the next request is routed)
        let gap = if case % 16 >= 12 { gap * 20_000_000 } else { gap };
        let interleave = case % 2 == 1;
        let tenants = 1 + lcg(&mut x) % 12;
        let reqs = trace(&mut x, n, tenants, cap, gap, interleave);
        let mut cfg = FleetConfig::new(pods, cap, router);
        cfg.engine = EngineConfig::Batched(e);
        let fast = run(cfg, &reqs, false);
        let slow = run(cfg, &reqs, true);
        assert_eq!(fast.routes, slow.routes, "{pods} pods, case {case} ({router:?}): routes");
        assert_eq!(fast.aborted, slow.aborted, "{pods} pods, case {case}: aborts");
        assert_eq!(fast.sink.completions, slow.sink.completions, "{pods} pods, case {case}: completions in order");
        assert_eq!(fast.sink.itl, slow.sink.itl, "{pods} pods, case {case}: inter-token latencies");
        assert_eq!(fast.stats, slow.stats, "{pods} pods, case {case}: per-pod counters");
        assert_eq!(fast.totals, slow.totals, "{pods} pods, case {case}: totals");
        preempted += fast.stats.iter().map(|s| s.preemptions).sum::<u64>();
        tier_hits += fast.stats.iter().map(|s| s.offload_hit_tokens).sum::<u64>();
        routed_pods.extend(fast.routes.iter().map(|r| r.pod));
    }
    assert!(preempted > 0, "{pods} pods: the cases must preempt");
    assert!(routed_pods.len() > pods.min(40) / 2, "{pods} pods: requests spread over the fleet");
    tier_hits
}

#[test]
fn calendar_and_two_pass_view_match_the_reference_on_small_fleets() {
    let mut tier_hits = 0;
    for (pods, seed) in [(1, 1), (2, 2), (3, 3), (8, 4), (64, 5), (65, 6)] {
        tier_hits += check(pods, 40, 80, seed, false);
    }
    assert!(tier_hits > 0, "some cases must hit an offload tier");
}

#[test]
fn calendar_and_two_pass_view_match_the_reference_on_1024_pods() {
    // (the 1,024-pod cases spread their requests too thin to hit their tiers)
    check(1024, 8, 1500, 28, false);
}

/// Decode steps long against the arrival gaps: the calendar leaves pods inside runs of decode
/// steps across arrivals, and requests are routed to pods inside one (which run up to the
/// arrival first).
#[test]
fn calendar_matches_the_reference_with_long_decode_runs() {
    for (pods, seed) in [(1, 11), (2, 12), (3, 13), (8, 14), (64, 15), (65, 16)] {
        check(pods, 40, 80, seed, true);
    }
    check(1024, 8, 1500, 29, true);
}
