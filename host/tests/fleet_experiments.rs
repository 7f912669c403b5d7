//! The seed's "what to look for", asserted on the built-in scenarios at full size, plus the
//! generated-trace round trip and thread-count invariance of sweeps.

use std::sync::OnceLock;

use brokerlab::fleet::report::{self, Experiments, STALE_KS};
use brokerlab::fleet::run::progress::Progress;
use brokerlab::fleet::run::{Fifo, TraceSource, simulate, with_fifo, with_view};
use brokerlab::fleet::scenario::{Generated, write_trace};
use brokerlab::fleet::sweep;
use brokerlab_core::fleet::CacheMode;
use brokerlab_core::fleet::RouterKind;

fn ex() -> &'static Experiments {
    static EX: OnceLock<Experiments> = OnceLock::new();
    EX.get_or_init(|| report::run_all(0, 1, &Progress::hidden()).expect("experiments run"))
}

#[test]
fn routers_barely_differ_when_everything_fits() {
    let ex = ex();
    let (cmax, _) = ex.capacity_ends();
    let hits: Vec<f64> = RouterKind::ALL.iter().map(|r| ex.hit_at(*r, cmax)).collect();
    let spread = hits.iter().cloned().fold(f64::MIN, f64::max) - hits.iter().cloned().fold(f64::MAX, f64::min);
    assert!(spread < 0.02, "hit rates at capacity {cmax}: {hits:?}");
}

#[test]
fn prefix_aware_doubles_round_robin_when_hot_set_is_6x_a_pod() {
    let ex = ex();
    let (_, cmin) = ex.capacity_ends();
    assert_eq!(cmin as u64, ex.hot_set_blocks / 6);
    let (pa, rr) = (ex.hit_at(RouterKind::PrefixAware, cmin), ex.hit_at(RouterKind::RoundRobin, cmin));
    assert!(pa >= 2.0 * rr, "prefix-aware {pa} vs round-robin {rr}");
}

#[test]
fn timestamp_first_collapses_every_router() {
    for p in &ex().timestamp_first {
        assert!(p.summary.hit_rate.unwrap() < 0.02, "{} at {}: {:?}", p.summary.router, p.value, p.summary.hit_rate);
    }
}

#[test]
fn stale_gain_does_not_increase_with_k() {
    // What the model shows (README, "Stale index"): for small k the loss is below the
    // sample-path noise: a stale view perturbs routing, and a perturbed run can be luckier by a
    // few tenths of a point of gain. So: no increase by more than half a point between k values
    // at least 4x apart, and a strict decrease between k values at least 32x apart.
    let kept = ex().stale_gain_kept();
    assert_eq!(kept.len(), STALE_KS.len());
    for &(k1, g1) in &kept {
        for &(k2, g2) in &kept {
            let base = k1.max(1);
            if k2 > k1 && k2 >= 4 * base {
                assert!(g2 <= g1 + 0.005, "gain kept {g2} at k={k2} > {g1} at k={k1}: {kept:?}");
            }
            if k2 > k1 && k2 >= 32 * base {
                assert!(g2 < g1, "gain kept {g2} at k={k2} not below {g1} at k={k1}: {kept:?}");
            }
        }
    }
    // Staleness costs misses, never errors: every run completed, and chases appear only with k > 0.
    for p in &ex().stale {
        assert_eq!(p.summary.chased_requests > 0, p.value > 0.0, "k = {}", p.value);
    }
}

#[test]
fn alpha_has_an_interior_minimum() {
    let p90 = ex().alpha_p90();
    let (best_a, best) = ex().best_alpha();
    let (first, last) = (p90.first().unwrap(), p90.last().unwrap());
    assert!(best_a > first.0 && best_a < last.0, "best alpha {best_a} is at an end: {p90:?}");
    assert!(best < first.1 && best < last.1, "{p90:?}");
}

#[test]
fn generated_trace_replays_exactly_like_the_direct_run() {
    for name in ["multi-tenant", "rag"] {
        let mut sc = report::scenario(name, 8).unwrap();
        sc.workload.rate_milli_per_s = 25_000;
        let g = Generated::new(sc.workload).unwrap();
        let path = std::env::temp_dir().join(format!("brokerlab-gen-{}-{name}.jsonl", std::process::id()));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        write_trace(&g, &mut f).unwrap();
        drop(f);
        for router in RouterKind::ALL {
            let cfg = with_view(brokerlab_core::fleet::FleetConfig { router, ..sc.fleet }, |v| v.stale_delay = 3);
            let direct = simulate::<Fifo>(cfg, &mut &g, true).unwrap();
            let mut src = TraceSource::new(path.clone(), 16);
            let replay = simulate::<Fifo>(cfg, &mut src, true).unwrap();
            assert_eq!(direct.summary, replay.summary, "{name} {router:?}");
            assert_eq!(direct.outcomes, replay.outcomes, "{name} {router:?}");
            assert!(direct.summary.hit_tokens > 0);
        }
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn sweeps_do_not_depend_on_thread_count() {
    let sc = report::scenario("multi-tenant", 16).unwrap();
    let g = [Generated::new(sc.workload).unwrap()];
    let values: Vec<_> = [256u64, 512, 1024]
        .iter()
        .map(|&c| (c as f64, 0, brokerlab_core::fleet::FleetConfig { capacity_blocks: c as usize, ..sc.fleet }))
        .collect();
    let specs = sweep::for_each_router(&values);
    let one = sweep::run_points::<Fifo>(sweep::SweepParam::Capacity, &g, &specs, 1, &Progress::hidden()).unwrap();
    let two = sweep::run_points::<Fifo>(sweep::SweepParam::Capacity, &g, &specs, 3, &Progress::hidden()).unwrap();
    assert_eq!(sweep::to_csv(&one).unwrap(), sweep::to_csv(&two).unwrap());
}

#[test]
fn a_bigger_cpu_tier_never_costs_round_robin_prefill() {
    // Round-robin's routing does not depend on cache state, and an LRU tier of C blocks holds a
    // subset of what a tier of C' > C holds (the LRU stack property): prefill can only fall.
    let pts: Vec<_> = ex().cpu_tier.iter().filter(|p| p.summary.router == RouterKind::RoundRobin).collect();
    assert_eq!(pts.len(), report::CPU_TIERS.len());
    for w in pts.windows(2) {
        assert!(w[1].value > w[0].value);
        assert!(w[1].summary.prefill_tokens <= w[0].summary.prefill_tokens, "{} -> {}", w[0].value, w[1].value);
        assert_eq!(w[1].summary.hit_tokens, w[0].summary.hit_tokens, "the GPU tier is unaffected");
    }
    assert!(pts.last().unwrap().summary.cpu_hit_tokens > 0);
}

#[test]
fn autoscaling_what_to_look_for() {
    // scenarios/autoscale.toml: the scaler must react to the burst, and back; a router that
    // follows the cache gives the added pods less than their fair share (it fights the scaler),
    // a large load penalty gives them about round-robin's share; prefix-aware needs fewer
    // pod-seconds than round-robin for a far lower p90.
    let ex = ex();
    let runs = &ex.autoscale;
    assert_eq!(runs.len(), report::AUTOSCALE_RUNS.len());
    let a = |i: usize| runs[i].summary.autoscale.clone().expect("autoscaled run");
    let (rr, pa1, pa64) = (a(0), a(3), a(5));
    for (i, s) in [(0, &rr), (3, &pa1), (5, &pa64)] {
        assert!(s.scale_outs >= 1 && s.scale_ins >= 1, "{}: {s:?}", report::autoscale_label(i, 8, false));
    }
    let ratio = |s: &brokerlab::fleet::run::AutoscaleSummary| s.new_pod_traffic_ratio.unwrap();
    assert!((ratio(&rr) - 1.0).abs() < 0.02, "round-robin spreads evenly: {rr:?}");
    assert!(ratio(&pa1) < 0.9, "prefix-aware alpha 1 keeps traffic on warm pods: {pa1:?}");
    assert!(ratio(&pa64) > ratio(&pa1), "a larger alpha feeds new pods more: {pa1:?} vs {pa64:?}");
    assert!(pa1.pod_seconds < rr.pod_seconds, "{pa1:?} vs {rr:?}");
    let p90 = |i: usize| runs[i].summary.latency_p90.unwrap();
    assert!(p90(3) * 5.0 < p90(0), "p90 prefix-aware {} vs round-robin {}", p90(3), p90(0));
    // The fixed 8-pod references cost more than any autoscaled run.
    for i in [6, 7] {
        assert!(runs[i].summary.autoscale.is_none());
        let fixed = runs[i].summary.pods as f64 * runs[i].summary.makespan_s;
        assert!(fixed > rr.pod_seconds, "{fixed} vs {}", rr.pod_seconds);
    }
    // Timelines start at the initial pod count and never leave [min, max].
    for (label, pts) in &ex.autoscale_timeline {
        assert_eq!(pts.first().map(|p| p.1), Some(2.0), "{label}");
        assert!(pts.iter().all(|p| (2.0..=8.0).contains(&p.1)), "{label}");
    }
}

#[test]
fn a_burst_raises_the_arrival_rate_in_its_window_only() {
    let sc = report::scenario("autoscale", 1).unwrap();
    let g = Generated::new(sc.workload).unwrap();
    let count = |from_s: f64, to_s: f64| {
        g.requests.iter().filter(|r| (from_s * 1e9..to_s * 1e9).contains(&(r.0 as f64))).count() as f64
    };
    // Poisson counts: mean rate x time, standard deviation its square root; allow 5 sigma.
    for (from, to, rate) in [(0.0, 60.0, 10.0), (60.0, 240.0, 40.0), (240.0, 300.0, 10.0)] {
        let (n, mean) = (count(from, to), rate * (to - from));
        assert!((n - mean).abs() < 5.0 * mean.sqrt(), "{n} arrivals in [{from}, {to}) s, expected about {mean}");
    }
}

#[test]
fn mooncake_global_beats_local_on_both_traces() {
    use brokerlab::fleet::report::mooncake;
    let mc = &ex().mooncake;
    assert_eq!(mc.iter().map(|t| t.trace.as_str()).collect::<Vec<_>>(), ["conversation", "synthetic"]);
    for t in mc {
        // The same total capacity: one pool of 10 x 187,500 blocks vs 10 pods of 187,500.
        assert_eq!((t.global.summary.pods, t.global.summary.capacity), (10, 187_500));
        assert_eq!(t.global.summary.cache, Some(CacheMode::Global));
        for l in &t.local {
            assert_eq!((l.summary.pods, l.summary.capacity, l.summary.cache), (10, 187_500, None));
            assert!(t.global.hit_rate() >= l.hit_rate(), "{}: global < {}", t.trace, l.label());
            assert_eq!(l.summary.input_tokens, t.global.summary.input_tokens);
        }
        // The report's ratios, against Mooncake's own local routing and against round-robin.
        let (pa, rr) = (t.prefix_aware_ratio().unwrap(), t.round_robin_ratio().unwrap());
        assert!(pa > 1.0 && rr > 1.0, "{}: {pa} {rr}", t.trace);
        assert!(rr >= pa, "{}: prefix-aware loses more than round-robin", t.trace);
    }
    let md = mooncake::markdown(mc);
    for t in mc {
        assert!(md.contains(&format!("{:.2}x", t.prefix_aware_ratio().unwrap())), "{md}");
        assert!(md.contains(&format!("{:.2}x", t.round_robin_ratio().unwrap())), "{md}");
        assert!(md.contains(&format!("{:.2}x", t.published_ratio)), "{md}");
    }
}

#[test]
fn the_global_pools_hit_rate_does_not_depend_on_the_router() {
    use brokerlab::fleet::report::mooncake::{BLOCKS_PER_POD, PODS, traces_dir};
    use brokerlab_core::fleet::{CacheMode, FleetConfig};
    let path = traces_dir().join("synthetic_trace.jsonl.zst");
    let hits: Vec<u64> =
        [(RouterKind::RoundRobin, 1.0), (RouterKind::LeastLoaded, 1.0), (RouterKind::PrefixAware, 16.0)]
            .into_iter()
            .map(|(router, alpha)| {
                let cfg = with_fifo(FleetConfig { alpha, ..FleetConfig::new(PODS, BLOCKS_PER_POD, router) }, |f| {
                    f.cache = CacheMode::Global
                });
                let mut src = TraceSource::new(path.clone(), 512);
                simulate::<Fifo>(cfg, &mut src, false).unwrap().summary.hit_tokens
            })
            .collect();
    assert!(hits.iter().all(|&h| h == hits[0] && h > 0), "{hits:?}");
}

#[test]
fn batched_engine_section_what_to_look_for() {
    use brokerlab::fleet::report::engine::{ENGINE_ROUTERS, MemTrace};
    let c = &ex().engines;
    assert_eq!(c.runs.len(), 2 * ENGINE_ROUTERS.len());
    // The full trace ran (the report at full size cuts nothing).
    assert_eq!(c.conversation_requests_run, c.conversation_requests_in_trace);
    let trace = MemTrace::conversation(None).unwrap();
    assert_eq!(c.conversation_output_tokens_asked, trace.output_tokens());
    let ld = |r| c.get("llm-d", r).unwrap();
    let cv = |r| c.get("conversation", r).unwrap();
    let (rr, pa) = (ld(RouterKind::RoundRobin), ld(RouterKind::PrefixAware));
    // llm-d shape: prefix-aware's TTFT p90 below round-robin's, under both engines, and its hit
    // rate above.
    assert!(pa.batched.ttft_p90.unwrap() < rr.batched.ttft_p90.unwrap(), "{:?} {:?}", pa.batched, rr.batched);
    assert!(pa.fifo.latency_p90.unwrap() < rr.fifo.latency_p90.unwrap());
    assert!(pa.batched.hit_rate.unwrap() > rr.batched.hit_rate.unwrap());
    // The FIFO figures are the llm-d section's own runs.
    for r in ENGINE_ROUTERS {
        let p = ex().llmd.iter().find(|p| p.summary.router == r && p.value == 0.0).unwrap();
        assert_eq!(ld(r).fifo, p.summary, "{r:?}");
    }
    for run in &c.runs {
        let b = &run.batched;
        // Tokens produced = output tokens: every request finishes and produces max(O, 1)
        // tokens, the first without an inter-token sample and every later one with one.
        assert_eq!(b.requests, run.fifo.requests, "{} {}", run.workload, run.router);
        let asked = if run.workload == "llm-d" { b.requests } else { c.conversation_output_tokens_asked };
        assert_eq!(b.output_tokens, asked, "{} {}", run.workload, run.router);
        assert_eq!(b.itl_samples, b.output_tokens - b.requests, "{} {}", run.workload, run.router);
        // Same workload, same prompts, under both engines.
        assert_eq!(b.input_tokens, run.fifo.input_tokens);
        assert!(b.kv_util_peak <= 1.0 && b.kv_util_mean.unwrap() <= b.kv_util_peak);
    }
    // llm-d: one output token each, so no request outlives its prefill: nothing is preempted.
    assert_eq!(rr.batched.preemptions + pa.batched.preemptions, 0);
    // Conversation trace: prefix-aware hits more and preempts less than round-robin.
    let (crr, cpa) = (cv(RouterKind::RoundRobin), cv(RouterKind::PrefixAware));
    assert!(cpa.batched.hit_rate.unwrap() > crr.batched.hit_rate.unwrap());
    assert!(
        cpa.batched.preemptions < crr.batched.preemptions,
        "{} vs {}",
        cpa.batched.preemptions,
        crr.batched.preemptions
    );
}
