//! llm-d's precise-prefix benchmark reproduced (`scenarios/llm-d-ramp.toml`, `fleet report`
//! section 11): the scenario is the published workload, and the simulated ordering of the presets
//! is the published one (docs/MODEL.md, "The llm-d benchmark, reproduced").

use std::sync::OnceLock;

use brokerlab::fleet::report::llmd::{self, LlmdSection, Preset};
use brokerlab::fleet::scenario::Generated;

fn section() -> &'static LlmdSection {
    static S: OnceLock<LlmdSection> = OnceLock::new();
    S.get_or_init(|| llmd::run(1, &|| {}).expect("llm-d section runs"))
}

#[test]
fn the_scenario_is_the_published_workload() {
    let sc = llmd::scenario(1).unwrap();
    let w = sc.workload;
    assert_eq!((w.tenants, w.users_per_tenant, w.prefix_tokens), (150, 5, 6000));
    assert_eq!(
        (w.suffix_min_tokens, w.suffix_max_tokens, w.output_min_tokens, w.output_max_tokens),
        (1200, 1200, 1000, 1000)
    );
    assert_eq!((sc.fleet.pods, sc.fleet.capacity_blocks * 16), (8, 307_328));
    // inference-perf's load: drained Poisson stages, int(rate x duration) requests each, 300 s
    // client timeout (docs/PUBLISHED.md A5), no cap on requests in flight (A4)
    let load = sc.load.expect("the ramp runs through the load generator");
    let rates: Vec<u64> = load.stages().iter().map(|s| s.rate_milli_per_s / 1000).collect();
    assert_eq!(rates, [15, 3, 10, 15, 20, 22, 25, 30, 35, 40, 43, 46, 49, 52, 55, 57, 60]);
    assert_eq!(load.stages().iter().map(|s| s.duration_ms).sum::<u64>(), 502_000);
    let expected: u64 = load.stages().iter().map(|s| s.rate_milli_per_s * s.duration_ms / 1_000_000).sum();
    assert_eq!(expected, 17_084);
    assert_eq!(load.timeout_ms, 300_000);
    // the data set: the 750 prompts, each sent in turn by every stage
    assert_eq!(w.requests, 750);
    let g = Generated::new(w).unwrap();
    assert_eq!(g.requests.len(), 750);
    // Whole prompts repeat: 750 distinct prompts of 450 blocks, 150 x 375 + 750 x 75 distinct blocks.
    assert_eq!(g.distinct_blocks(), 150 * 375 + 750 * 75);
}

#[test]
fn the_simulated_ordering_of_the_presets_is_the_published_one() {
    // llm-d's own configurations (precise 3/2/2; estimated 1/1/1: 168 keys per prompt, LRU 20,420 keys): strict.
    let s = section();
    let rows = llmd::simulated_rows(s, llmd::AS_BENCHMARKED);
    let bad = llmd::ordering_violations(rows, true);
    assert!(bad.is_empty(), "simulated {rows:?}: {bad:?}\n{}", llmd::markdown(s));
}

#[test]
fn the_issues_presets_keep_the_published_ordering_up_to_a_precise_approximate_tie() {
    // llm-d-approximate with an LRU the size of the pod routes like llm-d-precise here: a tie is
    // allowed, approximate beating precise is not, and both must beat the cache-blind pair.
    let s = section();
    let rows = llmd::simulated_rows(s, Preset::TABLE_2025);
    let bad = llmd::ordering_violations(rows, false);
    assert!(bad.is_empty(), "simulated {rows:?}: {bad:?}");
}

#[test]
fn affinity_routing_beats_the_service_as_published() {
    let s = section();
    let (a, r) = (s.get(Preset::Affinity).unwrap(), s.get(Preset::Random).unwrap());
    assert!(a.peak_output_tok_s > r.peak_output_tok_s, "{} vs {}", a.peak_output_tok_s, r.peak_output_tok_s);
    assert!(a.ttft_p90_s.unwrap() < r.ttft_p90_s.unwrap());
}

#[test]
fn stages_count_every_request_once_and_the_report_renders() {
    let s = section();
    for r in &s.ramp {
        assert_eq!(r.stages.iter().map(|st| st.requests).sum::<u64>(), r.summary.requests);
        assert_eq!(r.summary.requests, s.ramp_requests);
        assert_eq!(r.stages.len(), 17);
        assert!(r.stages.iter().all(|st| st.output_tok_s.is_finite() && st.output_tok_s >= 0.0));
        // No stage produces more than the fleet's requests could: 1,000 tokens each.
        let produced: f64 = r
            .stages
            .iter()
            .zip(llmd::scenario(s.stage_divisor).unwrap().workload.stages())
            .map(|(st, w)| st.output_tok_s * w.duration_ms as f64 / 1e3)
            .sum();
        assert!(produced <= (r.summary.output_tokens as f64) + 1.0, "{produced}");
    }
    let md = llmd::markdown(s);
    for needle in ["8,730", "0.542", "14,941", "154.1", "pinned"] {
        assert!(md.contains(needle), "{needle} missing:\n{md}");
    }
}
