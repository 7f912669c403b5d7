//! Sections 13 and 14 on a shrunk run: every run is there, the prose follows the figures, and
//! each section's page carries its own figures.

use brokerlab_core::fleet::{BatchedConfig, Profile};

use super::*;

fn shrunk() -> DeploySection {
    let progress = Progress::hidden();
    let s = run(20, 2, &progress).expect("the section runs");
    assert_eq!(progress.position(), points(), "the progress bar counts every run");
    s
}

#[test]
fn the_section_runs_every_point_and_says_what_they_show() {
    let s = shrunk();
    // Every run of both sweeps, each with its SLO keys (P/D) or tier keys (tier > 0).
    assert_eq!(s.pd.by_prompt.len(), 2 * pd::PROMPTS.len());
    assert_eq!(s.pd.by_split.len(), pd::SPLIT_PODS);
    for p in s.pd.by_prompt.iter().chain(&s.pd.by_split) {
        assert!(goodput(&p.summary).is_finite(), "{} at {}: no goodput", p.series, p.value);
        assert_eq!(p.summary.pd.is_some(), p.series != pd::AGGREGATED, "{}", p.series);
        if let Some(k) = &p.summary.pd {
            assert_eq!(k.disaggregated, p.summary.requests, "decider always: every request is disaggregated");
        }
    }
    assert_eq!(s.tier.by_size.len(), tier::ROUTERS.len() * tier::SIZES.len());
    assert_eq!(s.tier.by_pcie.len(), tier::ROUTERS.len() * tier::PCIE.len());
    for p in &s.tier.by_size {
        assert_eq!(p.summary.offload.is_some(), p.value > 0.0, "tier keys exactly when the tier is on");
    }
    // Every prompt length is in exactly one of the three lists the prose gives.
    let cs = charts(&s);
    let svgs: Vec<(String, String, String)> =
        cs.iter().map(|(sec, stem, _)| (sec.to_string(), stem.clone(), format!("<svg id=\"{stem}\"/>"))).collect();
    let (pd_blocks, tier_blocks) = (pd_page_blocks(&s, &svgs), tier_page_blocks(&s, &svgs));
    assert!(matches!(&pd_blocks[0], page::Block::Heading(h) if h == PD_TITLE));
    assert!(matches!(&tier_blocks[0], page::Block::Heading(h) if h == TIER_TITLE));
    // Each section holds its own figures and table, and none of the other's.
    let (pd_md, tier_md) = (page::markdown("t", &pd_blocks, ""), page::markdown("t", &tier_blocks, ""));
    for (own, other, stems) in [(&pd_md, &tier_md, &pd::STEMS[..]), (&tier_md, &pd_md, &tier::STEMS[..])] {
        for stem in stems {
            assert!(own.contains(&format!("({stem}.png)")) && !other.contains(&format!("({stem}.png)")), "{stem}");
        }
    }
    assert!(pd_md.contains("| transfer p90 (ms) |") && !tier_md.contains("transfer p90"), "P/D table");
    assert!(tier_md.contains("| CPU-tier blocks |") && !pd_md.contains("CPU-tier blocks |"), "tier table");
    let blocks: Vec<page::Block> = pd_blocks.into_iter().chain(tier_blocks).collect();
    let md = page::markdown("t", &blocks, "");
    let lists = [
        pd::prompts_where(&s.pd, |p, a| p > a),
        pd::prompts_where(&s.pd, |p, a| p < a),
        pd::prompts_where(&s.pd, |p, a| p == a),
    ];
    assert_eq!(lists.iter().map(Vec::len).sum::<usize>(), pd::PROMPTS.len(), "{lists:?}");
    let quoted = format!("than the aggregated fleet at prompts of {} tokens", pd::list(&lists[0]));
    assert!(md.contains(&quoted), "{quoted} not in the prose");
    // The best split the prose names has the most good requests of the P/D runs.
    let most = s.pd.by_split.iter().filter(|p| p.series != pd::AGGREGATED).map(|p| pd::good(&p.summary)).max().unwrap();
    let mut named = s.pd.by_split.iter().filter(|p| p.series != pd::AGGREGATED && pd::good(&p.summary) == most);
    assert!(named.any(|p| md.contains(&format!("The best split is {} with", p.series))), "best split not quoted");
    for r in tier::ROUTERS {
        assert!(md.contains(&format!("**{}.**", r.name())), "no finding for {r}");
    }
    // Figures: every chart has every point, finite, and both pages show each one.
    assert_eq!(cs.len(), pd::STEMS.len() + tier::STEMS.len());
    let page = page::html("t", &blocks, "");
    for (_, stem, c) in &cs {
        assert!(!c.series.is_empty(), "{stem}: no series");
        for ser in &c.series {
            assert!(!ser.points.is_empty(), "{stem}/{}: empty", ser.label);
            assert!(ser.points.iter().all(|p| p.0.is_finite() && p.1.is_finite()), "{stem}/{}: NaN", ser.label);
        }
        assert!(page.contains(&format!("<svg id=\"{stem}\"/>")), "{stem} not on the HTML page");
        assert!(md.contains(&format!("({stem}.png)")), "{stem} not in the Markdown");
    }
}

#[test]
fn the_tier_runs_are_the_batched_engine_without_a_tier_at_size_0() {
    // The size-0 run is the engine with the offload tier off: the same summary as a run built
    // without touching the tier.
    let mut sc = crate::fleet::scenario::builtin::builtin("multi-tenant").unwrap();
    sc.workload.requests = 200;
    let g = crate::fleet::scenario::Generated::new(sc.workload).unwrap();
    let plain =
        crate::fleet::scenario::engine::batched(sc.fleet, BatchedConfig::new(Profile::Qwen3_32bH100x2)).unwrap();
    let a = crate::fleet::run::simulate::<Batched>(plain, &mut &g, false).unwrap().summary;
    let pcie = BatchedConfig::new(Profile::Qwen3_32bH100x2).offload.pcie_bytes_per_s;
    let b = crate::fleet::run::simulate::<Batched>(
        tier::fleet(sc.fleet, sc.fleet.router, 0, pcie).unwrap(),
        &mut &g,
        false,
    )
    .unwrap()
    .summary;
    assert_eq!(a, b);
}

#[test]
fn unique_prompts_share_no_block() {
    let u = Unique::new(5, 1_000, 40, 3);
    let mut keys = u.keys.clone();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 5 * 3, "ceil(40 / 16) = 3 blocks each, all distinct");
    assert_eq!(u.requests[4].0, 4_000);
}
