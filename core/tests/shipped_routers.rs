//! The shipped routers (issue 13): every scorer, filter and picker against hand-computed values
//! on hand-built states, and each preset's pick on a small state (docs/MODEL.md, "Shipped
//! routers").

mod common;

use brokerlab_core::fleet::*;
use common::{Bufs, keys_of};

fn config_view(c: &mut FleetConfig) -> &mut ViewConfig {
    common::view(c)
}

/// Exact cache contents per pod, as a hand-built index.
struct Held(Vec<Vec<u64>>);

impl KeyHolders for Held {
    fn mask(&self, key: u64, word: usize, candidates: u64) -> u64 {
        let mut m = 0;
        for (p, keys) in self.0.iter().enumerate().skip(64 * word).take(64) {
            let p = p % 64;
            if candidates & (1 << p) != 0 && keys.contains(&key) {
                m |= 1 << p;
            }
        }
        m
    }
}

fn view<'v>(held: &'v Held, queue: &'v [u32], loads: &'v [PodLoad]) -> RouteView<'v, 'static> {
    RouteView {
        request: 0,
        queue_lens: queue,
        held: Holders::Exact(held),
        pending: None,
        pending_stores: None,
        speculative: None,
        loads: Some(loads),
        now_ns: 0,
    }
}

fn waiting(w: &[u32]) -> Vec<PodLoad> {
    w.iter().map(|&waiting| PodLoad { waiting, kv_capacity_blocks: 100, ..PodLoad::default() }).collect()
}

/// A router for `spec` over `pods` pods; its approximate index (if any) has `lru` keys per pod.
fn router(mut spec: RouterSpec, pods: usize, lru: u64) -> ShippedRouter<'static> {
    spec.params.approx_lru_blocks = lru;
    let l = spec.layout(pods, 1000).unwrap();
    let bufs = RouterBuffers {
        slots: Box::leak(vec![Slot::default(); pods * l.slots_per_pod].into_boxed_slice()),
        tables: Box::leak(vec![0u32; pods * l.table_per_pod].into_boxed_slice()),
        index: Box::leak(vec![IndexEntry::default(); l.index].into_boxed_slice()),
    };
    ShippedRouter::new(spec, pods, bufs).unwrap()
}

/// One scorer, weight 1, ties to the lowest index: the totals are that scorer's s(p).
fn single(kind: ScorerKind) -> RouterSpec {
    let mut s = RouterSpec { picker: PickerKind::MaxScoreLowestIndex, ..RouterSpec::EMPTY };
    s.scorers[0] = Some(WeightedScorer { kind, weight: 1.0 });
    s
}

fn totals(r: &ShippedRouter<'_>, v: &RouteView<'_, '_>, keys: &[u64], n: usize) -> Vec<f64> {
    r.evaluate(v, keys).totals[..n].to_vec()
}

const K: [u64; 4] = [11, 12, 13, 14];

#[test]
fn precise_prefix_absolute_is_the_leading_run_over_total() {
    // pod 1 holds all 4 blocks, pod 0 the first 2, pod 3 blocks 2..4 (no leading run), pod 2 none.
    let held = Held(vec![vec![11, 12], K.to_vec(), vec![], vec![12, 13, 14]]);
    let q = [0; 4];
    let l = waiting(&q);
    let r = router(single(ScorerKind::PrecisePrefixCache), 4, 0);
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 4), [0.5, 1.0, 0.0, 0.0]);
    assert!(r.needs_index());
}

#[test]
fn precise_prefix_min_max_spans_the_holders() {
    let held = Held(vec![vec![11, 12], K.to_vec(), vec![], vec![11]]);
    let q = [0; 4];
    let l = waiting(&q);
    let r = router(single(ScorerKind::PrecisePrefixCacheMinMax), 4, 0);
    // holders 2, 4, 1 blocks: (m - 1) / (4 - 1); no holder -> 0.
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 4), [1.0 / 3.0, 1.0, 0.0, 0.0]);
    // One holder gets 1 whatever its length.
    let held = Held(vec![vec![11], vec![], vec![], vec![]]);
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 4), [1.0, 0.0, 0.0, 0.0]);
}

#[test]
fn approximate_prefix_is_llm_ds_greedy_match_over_routed_keys() {
    let held = Held(vec![vec![]; 3]);
    let q = [0; 3];
    let l = waiting(&q);
    let mut r = router(single(ScorerKind::PrefixCache), 3, 100);
    r.routed(0, &[11, 12, 13], 0).unwrap();
    r.routed(1, &[11, 13], 0).unwrap();
    // key 11: pods 0, 1; key 12: pod 0; key 13: pods 0, 1; key 14: nobody -> stop.
    // pod 1 counts 2 (not a leading run: llm-d's rule), pod 0 three.
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 3), [0.75, 0.5, 0.0]);
    // The exact caches (empty) are not read.
    assert!(!r.needs_index());
}

#[test]
fn approximate_lru_forgets_the_leading_blocks_first() {
    let held = Held(vec![vec![]; 2]);
    let q = [0; 2];
    let l = waiting(&q);
    let mut r = router(single(ScorerKind::PrefixCache), 2, 2);
    r.routed(0, &[11, 12, 13], 0).unwrap();
    // The LRU of 2 keeps 12 and 13: key 11 is held by no pod, the walk stops at once.
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 2), [0.0, 0.0]);
    assert_eq!(r.approx().unwrap().held_blocks(0), 2);
    assert_eq!(totals(&r, &view(&held, &q, &l), &[12, 13], 2), [1.0, 0.0]);
}

#[test]
fn approximate_max_blocks_truncates_what_is_matched_and_recorded() {
    // GIE v0.5.1 `hashPrompt`: the prompt is cut to maxPrefixBlocksToMatch blocks before hashing,
    // so the score is matchLen / (the kept blocks) and only the kept blocks are recorded.
    let held = Held(vec![vec![]; 2]);
    let q = [0; 2];
    let l = waiting(&q);
    let mut spec = single(ScorerKind::PrefixCache);
    spec.params.approx_max_blocks = 2;
    let mut r = router(spec, 2, 100);
    r.routed(0, &[11, 12, 13], 0).unwrap();
    // Only 11 and 12 were recorded.
    assert_eq!(r.approx().unwrap().held_blocks(0), 2);
    // Two requests that differ after their second block look alike: 2 / 2 on pod 0.
    assert_eq!(totals(&r, &view(&held, &q, &l), &[11, 12, 99], 2), [1.0, 0.0]);
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 2), [1.0, 0.0]);
    // Without the cap the same state scores 2 / 3 and 3 / 4.
    let mut all = router(single(ScorerKind::PrefixCache), 2, 100);
    all.routed(0, &[11, 12, 13], 0).unwrap();
    assert_eq!(all.approx().unwrap().held_blocks(0), 3);
    assert_eq!(totals(&all, &view(&held, &q, &l), &[11, 12, 99], 2), [2.0 / 3.0, 0.0]);
    assert_eq!(totals(&all, &view(&held, &q, &l), &K, 2), [0.75, 0.0]);
    // A cap above the prompt's length keeps every key; the cap is read only with an approximate index.
    let mut long = single(ScorerKind::PrefixCache);
    long.params.approx_max_blocks = 10;
    let mut r10 = router(long, 2, 100);
    r10.routed(0, &[11, 12, 13], 0).unwrap();
    assert_eq!(totals(&r10, &view(&held, &q, &l), &K, 2), [0.75, 0.0]);
    assert!(long.reads(RouterKey::ApproxMaxBlocks));
    assert!(!single(ScorerKind::PrecisePrefixCache).reads(RouterKey::ApproxMaxBlocks));
}

#[test]
fn queue_scorer_is_min_max_over_waiting() {
    let held = Held(vec![vec![]; 4]);
    let q = [0; 4];
    let r = router(single(ScorerKind::Queue), 4, 0);
    let l = waiting(&[3, 1, 5, 1]);
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 4), [0.5, 1.0, 0.0, 1.0]);
    let l = waiting(&[2, 2, 2, 2]);
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 4), [1.0; 4]);
}

#[test]
fn kv_utilization_scorer_is_one_minus_usage() {
    let held = Held(vec![vec![]; 3]);
    let q = [0; 3];
    let r = router(single(ScorerKind::KvCacheUtilization), 3, 0);
    let mut l = waiting(&q);
    l[0].kv_used_blocks = 25;
    l[1].kv_used_blocks = 100;
    l[2].kv_capacity_blocks = 0;
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 3), [0.75, 0.0, 1.0]);
}

#[test]
fn token_load_scorer() {
    let held = Held(vec![vec![]; 3]);
    let q = [0; 3];
    let r = router(single(ScorerKind::TokenLoad), 3, 0);
    let mut l = waiting(&q);
    l[1].pending_prefill_tokens = 1_048_576; // a quarter of 4,194,304
    l[2].pending_prefill_tokens = 5_000_000;
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 3), [1.0, 0.75, 0.0]);
}

#[test]
fn active_requests_scorer() {
    let held = Held(vec![vec![]; 3]);
    let q = [0; 3];
    let r = router(single(ScorerKind::ActiveRequests), 3, 0);
    let mut l = waiting(&[0, 1, 3]);
    l[1].running = 1;
    l[2].running = 1; // active 0, 2, 4
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 3), [1.0, 0.5, 0.0]);
}

#[test]
fn load_aware_scorer() {
    let held = Held(vec![vec![]; 4]);
    let q = [0; 4];
    let r = router(single(ScorerKind::LoadAware), 4, 0);
    let l = waiting(&[0, 1, 64, 200]);
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 4), [0.5, 0.49609375, 0.25, 0.0]);
}

#[test]
fn no_hit_lru_ranks_never_used_then_least_recent() {
    let q = [0; 4];
    let l = waiting(&q);
    let cold = Held(vec![vec![]; 4]);
    let mut r = router(single(ScorerKind::NoHitLru), 4, 0);
    // Precise source needs a precise scorer; this pipeline has none: approximate (empty) index.
    let v = view(&cold, &q, &l);
    // s = 1 - rank / (N - 1), computed as upstream writes it.
    let s = |rank: f64| 1.0 - rank / 3.0;
    assert_eq!(totals(&r, &v, &K, 4), [s(0.0), s(1.0), s(2.0), s(3.0)]);
    let route = r.route(&v, &K);
    assert_eq!(route.pod, 0);
    r.routed(0, &K, 0).unwrap();
    // Pod 0 now holds K in the approximate index: a request for K is warm, all 0.5.
    assert_eq!(totals(&r, &v, &K, 4), [0.5; 4]);
    // A cold request: never-used pods 1, 2, 3 first (ranks 0..2), then pod 0 (rank 3).
    let other = [21, 22];
    assert_eq!(totals(&r, &v, &other, 4), [s(3.0), s(0.0), s(1.0), s(2.0)]);
    let route = r.route(&v, &other);
    assert_eq!(route.pod, 1);
    r.routed(1, &other, 0).unwrap();
    // LRU now [0, 1]: never-used 2, 3 get ranks 0, 1; then 0 (rank 2), 1 (rank 3).
    assert_eq!(totals(&r, &v, &[31], 4), [s(2.0), s(3.0), s(0.0), s(1.0)]);
}

fn affinity_spec() -> RouterSpec {
    let mut s = RouterSpec::preset(RouterKind::LlmDAffinity).unwrap();
    s.params.prefix_source = PrefixSource::Precise;
    s.picker = PickerKind::MaxScoreLowestIndex;
    s
}

#[test]
fn affinity_filter_keeps_sticky_pods_unless_they_wait_too_long() {
    // 10 blocks; pod 0 holds 9 (0.9), pod 1 holds 8 (0.8, kept: >= 0.80), pod 2 five, pod 3 none.
    let keys: Vec<u64> = (100..110).collect();
    let held = Held(vec![keys[..9].to_vec(), keys[..8].to_vec(), keys[..5].to_vec(), vec![]]);
    let q = [0; 4];
    let mut l = waiting(&q);
    let per_s = 15_928;
    l[0].pending_prefill_tokens = 20 * per_s; // TTFT 20,000 ms
    l[1].pending_prefill_tokens = 18 * per_s; // 18,000 ms
    l[3].pending_prefill_tokens = per_s; // 1,000 ms; pod 2: 0 ms
    let r = router(affinity_spec(), 4, 0);
    // best sticky 18,000 - best other 0 = 18,000: not > maxTTFTPenaltyMs -> the sticky pods.
    assert_eq!(r.evaluate(&view(&held, &q, &l), &keys).candidates.0[0], 0b0011);
    l[1].pending_prefill_tokens = 19 * per_s; // 19,000 - 0 > 18,000 -> every pod
    assert_eq!(r.evaluate(&view(&held, &q, &l), &keys).candidates.0[0], 0b1111);
    // No sticky pod -> every pod.
    let none = Held(vec![vec![]; 4]);
    assert_eq!(r.evaluate(&view(&none, &q, &l), &keys).candidates.0[0], 0b1111);
    // maxTTFTPenaltyMs = 0: always the sticky ones.
    let mut s = affinity_spec();
    s.params.max_ttft_penalty_ms = 0.0;
    let r = router(s, 4, 0);
    assert_eq!(r.evaluate(&view(&held, &q, &l), &keys).candidates.0[0], 0b0011);
}

/// The Sticky runs' approximate index (docs/PUBLISHED.md, "The Sticky EPP's in-flight token counter
/// (sticky32)"): the EPP hashed only the first 256 blocks of 64 bytes of the prompt, which for
/// code-generation lie inside the shared system prompt every conversation begins with. Scaled
/// down: a shared prefix of 4 keys, each conversation's own keys after it, the index capped at 3.
#[test]
fn affinity_filter_over_a_capped_approximate_index_keeps_every_pod_holding_the_shared_prefix() {
    let shared = [1u64, 2, 3, 4];
    let conv = |c: u64, n: u64| -> Vec<u64> { shared.iter().copied().chain((0..n).map(|i| 100 * c + i)).collect() };
    let (a_turn1, b_turn1) = (conv(1, 6), conv(2, 6)); // 10 keys each
    let a_turn2 = conv(1, 8); // 12 keys: turn 1's 10 + 2 new
    let held = Held(vec![vec![]; 3]);
    let q = [0; 3];
    let mut l = waiting(&q);
    // Pod 0 is busy: 300,000 tokens to prefill (TTFT 300,000 / 20,480 = 14,648 ms), the others idle.
    l[0].pending_prefill_tokens = 300_000;
    let mut spec = RouterSpec::preset(RouterKind::LlmDAffinity).unwrap();
    spec.picker = PickerKind::MaxScoreLowestIndex;
    spec.params.peak_prefill_tokens_per_s = 20_480.0;
    spec.params.max_ttft_penalty_ms = 20_000.0; // the gate does not fire here (14,648 - 0 < 20,000)
    // Every key indexed (approx_max_blocks 0): pod 0 served conversation 1, pod 1 conversation 2.
    let mut full = router(spec, 3, 100);
    full.routed(0, &a_turn1, 0).unwrap();
    full.routed(1, &b_turn1, 0).unwrap();
    // Turn 2 of conversation 1: pod 0 matches 10 / 12 = 0.83 (sticky), pod 1 the 4 shared keys
    // (4 / 12 = 0.33), pod 2 nothing: the filter keeps pod 0 alone, which the pick must take.
    let v = view(&held, &q, &l);
    assert_eq!(full.evaluate(&v, &a_turn2).candidates.0[0], 0b001);
    assert_eq!(full.route(&v, &a_turn2).pod, 0);
    // The index capped at 3 keys (inside the shared prefix): pods 0 and 1 both match 3 / 3 = 1.0,
    // pod 2 0 / 3: sticky = {0, 1}; best sticky TTFT 0 ms (pod 1) - best other 0 ms = 0: kept.
    // The token-load scorer then prefers the idle pod 1 (1.0 against 1 - 300,000 / 4,194,304 =
    // 0.928), which does not hold conversation 1's context.
    spec.params.approx_max_blocks = 3;
    let mut capped = router(spec, 3, 100);
    capped.routed(0, &a_turn1, 0).unwrap();
    capped.routed(1, &b_turn1, 0).unwrap();
    let e = capped.evaluate(&v, &a_turn2);
    assert_eq!(e.candidates.0[0], 0b011);
    assert_eq!(e.totals[..2], [1.0 - 300_000.0 / 4_194_304.0, 1.0]);
    assert_eq!(capped.route(&v, &a_turn2).pod, 1);
    // Once pod 2 has served any conversation too, every pod is sticky: there is no non-sticky pod
    // for the gate to compare with, so it cannot fire, and the filter keeps every pod.
    capped.routed(2, &conv(3, 2), 0).unwrap();
    l[0].pending_prefill_tokens = 10_000_000;
    let v = view(&held, &q, &l);
    assert_eq!(capped.evaluate(&v, &a_turn2).candidates.0[0], 0b111);
}

#[test]
fn pickers_max_lowest_index_seeded_random_ties_and_random() {
    let held = Held(vec![vec![]; 4]);
    let q = [0; 4];
    let l = waiting(&[1, 0, 0, 2]); // queue scores 0.5, 1, 1, 0: pods 1 and 2 tie
    let v = view(&held, &q, &l);
    let mut lowest = router(single(ScorerKind::Queue), 4, 0);
    assert!((0..50).all(|_| lowest.route(&v, &K).pod == 1));
    let mut s = single(ScorerKind::Queue);
    s.picker = PickerKind::MaxScore;
    let mut tie = router(s, 4, 0);
    let picks: Vec<usize> = (0..400).map(|_| tie.route(&v, &K).pod).collect();
    let ones = picks.iter().filter(|&&p| p == 1).count();
    assert!(picks.iter().all(|&p| p == 1 || p == 2), "only the tied pods");
    assert!((150..250).contains(&ones), "ties split about evenly: {ones}/400");
    // Same seed, same picks; another seed, other picks.
    let mut again = router(s, 4, 0);
    assert_eq!(picks, (0..400).map(|_| again.route(&v, &K).pod).collect::<Vec<_>>());
    s.params.seed = 7;
    let mut other = router(s, 4, 0);
    assert_ne!(picks, (0..400).map(|_| other.route(&v, &K).pod).collect::<Vec<_>>());
    // random: every pod, scores ignored.
    let mut rnd = router(RouterSpec::preset(RouterKind::Random).unwrap(), 4, 0);
    let mut seen = [0usize; 4];
    (0..400).for_each(|_| seen[rnd.route(&v, &K).pod] += 1);
    assert!(seen.iter().all(|&c| (60..140).contains(&c)), "{seen:?}");
}

#[test]
fn weighted_sum_clamps_and_adds() {
    // gie-default on two pods: prefix 3 x (3/4 vs 0), queue 2 x (0 vs 1), kv 2 x (0.5 vs 0.9).
    let held = Held(vec![vec![]; 2]);
    let q = [0; 2];
    let mut l = waiting(&[4, 2]);
    l[0].kv_used_blocks = 50;
    l[1].kv_used_blocks = 10;
    let mut r = router(RouterSpec::preset(RouterKind::GieDefault).unwrap(), 2, 100);
    r.routed(0, &K[..3], 0).unwrap();
    let t = totals(&r, &view(&held, &q, &l), &K, 2);
    assert_eq!(t, [3.0 * 0.75 + 0.0 + 2.0 * 0.5, 0.0 + 2.0 + 2.0 * 0.9]);
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 1, "3.25 < 3.8");
}

/// A 3-pod state for the prefix presets: pod 0 holds the whole prompt but is loaded (5 waiting,
/// 90% KV), pod 1 is empty and idle, pod 2 holds half and is half loaded.
fn three_pods() -> (Held, [u32; 3], Vec<PodLoad>) {
    let held = Held(vec![K.to_vec(), vec![], K[..2].to_vec()]);
    let mut l = waiting(&[5, 0, 1]);
    l[0].kv_used_blocks = 90;
    l[2].kv_used_blocks = 50;
    (held, [5, 0, 1], l)
}

#[test]
fn preset_llm_d_precise() {
    // 2 x prefix + kv + queue: pod 0 2 + 0.1 + 0 = 2.1; pod 1 0 + 1 + 1 = 2; pod 2 1 + 0.5 + 0.8 = 2.3.
    let (held, q, l) = three_pods();
    let mut r = router(RouterSpec::preset(RouterKind::LlmDPrecise).unwrap(), 3, 0);
    let t = totals(&r, &view(&held, &q, &l), &K, 3);
    assert!((t[0] - 2.1).abs() < 1e-12 && t[1] == 2.0 && (t[2] - 2.3).abs() < 1e-12, "{t:?}");
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 2);
}

#[test]
fn preset_llm_d_approximate_reads_what_it_routed_not_the_caches() {
    let (held, q, l) = three_pods();
    let mut r = router(RouterSpec::preset(RouterKind::LlmDApproximate).unwrap(), 3, 0);
    // Nothing routed yet: prefix 0 everywhere; pod 1 (kv 1 + queue 1) wins.
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 1);
    r.routed(0, &K, 0).unwrap();
    // Now pod 0: 2 + 0.1 + 0 = 2.1 > pod 1's 2.
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 0);
}

#[test]
fn preset_llm_d_load() {
    // queue + kv: 0 + 0.1, 1 + 1, 0.8 + 0.5 -> pod 1.
    let (held, q, l) = three_pods();
    let mut r = router(RouterSpec::preset(RouterKind::LlmDLoad).unwrap(), 3, 0);
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 3)[1], 2.0);
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 1);
}

#[test]
fn preset_gie_default() {
    let (held, q, l) = three_pods();
    let mut r = router(RouterSpec::preset(RouterKind::GieDefault).unwrap(), 3, 0);
    r.routed(0, &K, 0).unwrap();
    // 3 x 1 + 2 x 0 + 2 x 0.1 = 3.2 vs pod 1's 0 + 2 + 2 = 4 -> pod 1.
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 1);
}

#[test]
fn preset_llm_d_affinity() {
    // Approximate source: pod 2 was sent the prompt; it is sticky; token-load picks among sticky.
    let (held, q, mut l) = three_pods();
    l[2].pending_prefill_tokens = 1000;
    let mut r = router(RouterSpec::preset(RouterKind::LlmDAffinity).unwrap(), 3, 0);
    // Cold: no sticky pod, token-load (all pending 0 but pod 2) ties pods 0 and 1 at 1.0.
    let first = r.route(&view(&held, &q, &l), &K).pod;
    assert!(first == 0 || first == 1);
    r.routed(2, &K, 0).unwrap();
    let e = r.evaluate(&view(&held, &q, &l), &K);
    assert_eq!(e.candidates.0[0], 0b100);
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 2);
}

#[test]
fn preset_random_is_seeded_and_spreads() {
    let (held, q, l) = three_pods();
    let mut a = router(RouterSpec::preset(RouterKind::Random).unwrap(), 3, 0);
    let mut b = router(RouterSpec::preset(RouterKind::Random).unwrap(), 3, 0);
    let pa: Vec<usize> = (0..30).map(|_| a.route(&view(&held, &q, &l), &K).pod).collect();
    let pb: Vec<usize> = (0..30).map(|_| b.route(&view(&held, &q, &l), &K).pod).collect();
    assert_eq!(pa, pb);
    assert!((0..3).all(|p| pa.contains(&p)));
}

#[test]
fn preset_dynamo_kv_cost_and_softmax() {
    // 4 blocks (64 tokens). pod 0: overlap 4, pending 160 tokens, 10 active blocks:
    // 1 x (160 + 0) / 16 + 10 + 0 = 20. pod 1: overlap 0, idle: 64 / 16 + 0 + 4 = 8 -> pod 1.
    let held = Held(vec![K.to_vec(), vec![]]);
    let q = [0; 2];
    let mut l = waiting(&q);
    l[0].pending_prefill_tokens = 160;
    l[0].kv_used_blocks = 10;
    let mut r = router(RouterSpec::preset(RouterKind::DynamoKv).unwrap(), 2, 0);
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 1);
    // pod 0 idle: logit 0 vs 8 -> pod 0.
    let l0 = waiting(&q);
    assert_eq!(r.route(&view(&held, &q, &l0), &K).pod, 0);
    // overlap_score_weight 0: decode blocks only, 10 vs 4 -> pod 1.
    let mut s = RouterSpec::preset(RouterKind::DynamoKv).unwrap();
    s.params.overlap_score_weight = 0.0;
    assert_eq!(router(s, 2, 0).route(&view(&held, &q, &l), &K).pod, 1);
    // Temperature 1 on logits 0 and 8: normalised 0 and 1, p0 = 1 / (1 + e^-1) = 0.7311.
    s = RouterSpec::preset(RouterKind::DynamoKv).unwrap();
    s.params.router_temperature = 1.0;
    let mut t = router(s, 2, 0);
    let n = 20_000;
    let zeros = (0..n).filter(|_| t.route(&view(&held, &q, &l0), &K).pod == 0).count();
    let p0 = zeros as f64 / n as f64;
    assert!((p0 - 0.7311).abs() < 0.015, "p0 = {p0}");
}

#[test]
fn preset_sglang_cache_aware() {
    let held = Held(vec![vec![]; 2]);
    let q = [0; 2];
    let mut r = router(RouterSpec::preset(RouterKind::SglangCacheAware).unwrap(), 2, 0);
    r.routed(0, &K, 0).unwrap();
    // Imbalanced (100 - 10 > 64 and 100 > 10 x 1.5): the least loaded, pod 1.
    let l = waiting(&[100, 10]);
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 1);
    // 70 - 10 = 60, not > 64: balanced. Match 2/4 = 0.5 > 0.3 -> pod 0.
    let l = waiting(&[70, 10]);
    assert_eq!(r.route(&view(&held, &q, &l), &[11, 12, 91, 92]).pod, 0);
    // Match 1/4 = 0.25 <= 0.3: the pod with the fewest recorded blocks (pod 1 holds none).
    assert_eq!(r.route(&view(&held, &q, &l), &[11, 91, 92, 93]).pod, 1);
}

#[test]
fn preset_vllm_loadaware_is_the_issues_formula() {
    // match / total - 1.0 x load / max load: pod 0 1 - 1 = 0; pod 1 0 - 0.5 = -0.5;
    // pod 2 0.5 - 0 = 0.5 -> pod 2.
    let held = Held(vec![vec![]; 3]);
    let q = [0; 3];
    let mut r = router(RouterSpec::preset(RouterKind::VllmLoadaware).unwrap(), 3, 0);
    r.routed(0, &K, 0).unwrap();
    r.routed(2, &K[..2], 0).unwrap();
    let l = waiting(&[4, 2, 0]);
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 2);
}

#[test]
fn presets_parse_by_their_cli_names() {
    for k in RouterKind::PRESETS {
        assert_eq!(RouterKind::parse(k.name()), Some(k));
        assert!(RouterSpec::preset(k).is_some());
    }
    assert_eq!(RouterKind::parse("custom"), None);
    assert!(RouterSpec::preset(RouterKind::PrefixAware).is_none());
}

#[test]
fn bad_parameters_name_their_key() {
    let mut s = RouterSpec::preset(RouterKind::DynamoKv).unwrap();
    s.params.router_temperature = -1.0;
    assert_eq!(
        s.validate(),
        Err(Error::InvalidConfig { field: Field::RouterTemperature, expected: "a temperature between 0 and 1e6" })
    );
    let mut s = single(ScorerKind::Queue);
    s.scorers[0] = Some(WeightedScorer { kind: ScorerKind::Queue, weight: f64::NAN });
    assert!(matches!(s.validate(), Err(Error::InvalidConfig { field: Field::ScorerWeight, .. })));
    assert!(matches!(RouterSpec::EMPTY.validate(), Err(Error::InvalidConfig { field: Field::Scorers, .. })));
}

/// Routes every request to the last pod, booted or not.
struct LastPod;

impl Router for LastPod {
    fn needs_index(&self) -> bool {
        false
    }
    fn route(&mut self, _view: &RouteView<'_, '_>, _keys: &[u64]) -> Route {
        Route { pod: 1, believed_match_blocks: 0 }
    }
}

#[test]
fn a_router_naming_a_pod_not_yet_booted_is_an_error_not_a_panic() {
    let mut c = FleetConfig::new(2, 8, RouterKind::RoundRobin);
    *common::scale(&mut c) = Some(ScalePolicy {
        min_pods: 1,
        initial_pods: 1,
        interval_ns: 1_000_000_000,
        up_milli: 1_500,
        down_milli: 500,
        startup_ns: 2_000_000_000,
    });
    let mut bufs = Bufs::new(c);
    let mut f = bufs.fleet_with(LastPod).unwrap();
    let k = keys_of(&[1, 2]);
    let r = f.dispatch(&Request { arrival_ns: 0, input_tokens: 32, output_tokens: 0, keys: &k }, &mut ());
    assert_eq!(
        r,
        Err(Error::InvalidConfig { field: Field::Router, expected: "a routable pod (index below the active pods)" })
    );
}

#[test]
fn presets_run_in_a_fifo_fleet() {
    // Every preset runs a small fleet end to end (router-side storage from the layout).
    for kind in RouterKind::PRESETS {
        let mut c = FleetConfig::new(4, 64, kind);
        config_view(&mut c).index = IndexKind::Global;
        let l = FifoLayout::new(&c, 64, 0).unwrap();
        let rl = c.router_layout().unwrap();
        let mut slots = vec![Slot::default(); l.pods * l.slots_per_pod];
        let mut tables = vec![0u32; l.tables_len()];
        let mut queues = vec![0u64; l.pods * l.queue_per_pod];
        let mut index = vec![IndexEntry::default(); l.index];
        let mut rs = vec![Slot::default(); l.pods * rl.slots_per_pod];
        let mut rt = vec![0u32; l.pods * rl.table_per_pod];
        let mut ri = vec![IndexEntry::default(); rl.index];
        let mut f = FifoFleet::with_router_buffers(
            c,
            FifoBuffers {
                slots: &mut slots,
                tables: &mut tables,
                queues: &mut queues,
                index: &mut index,
                pending: &mut [],
                pending_table: &mut [],
                cpu_slots: &mut [],
                cpu_tables: &mut [],
            },
            RouterBuffers { slots: &mut rs, tables: &mut rt, index: &mut ri },
        )
        .unwrap();
        let mut hits = 0;
        for i in 0..40u64 {
            let k = keys_of(&[1, 2, 3, 4, 100 + i]);
            let o = f.dispatch(
                &Request { arrival_ns: i * 1_000_000, input_tokens: 80, output_tokens: 1, keys: &k },
                &mut (),
            );
            hits += o.unwrap().hit_blocks;
        }
        assert!(hits > 0, "{kind}");
    }
}

/// A plain model of the approximate index: per pod, a list of routed keys, least recent first.
struct ModelApprox {
    lrus: Vec<Vec<u64>>,
    cap: usize,
}

impl ModelApprox {
    fn record(&mut self, pod: usize, keys: &[u64]) {
        let lru = &mut self.lrus[pod];
        for &k in keys {
            lru.retain(|&x| x != k);
            lru.push(k);
            if lru.len() > self.cap {
                lru.remove(0);
            }
        }
    }
    fn mask(&self, key: u64) -> u64 {
        (0..self.lrus.len()).filter(|&p| self.lrus[p].contains(&key)).map(|p| 1u64 << p).sum()
    }
}

proptest::proptest! {
    /// The pods the index says hold a key are exactly those whose LRU of routed keys holds it,
    /// after every routing, and both matches follow from those sets (llm-d's greedy walk, the
    /// per-pod leading run).
    #[test]
    fn approximate_index_answers_what_each_lru_holds(
        routes in proptest::collection::vec((0usize..64, proptest::collection::vec(0u64..12, 0..8)), 1..40),
        cap in 1usize..7,
        many in proptest::bool::ANY,
    ) {
        // 3 pods: the LRUs are probed; 12: a key -> pods table is kept (ApproxIndex::index_len).
        let pods = if many { 12 } else { 3 };
        proptest::prop_assert_eq!(ApproxIndex::index_len(pods, cap) > 0, many);
        let mut slots = vec![Slot::default(); pods * cap];
        let mut tables = vec![0u32; pods * LruPod::table_len(cap)];
        let mut index = vec![IndexEntry::default(); ApproxIndex::index_len(pods, cap)];
        let mut ix = ApproxIndex::new(pods, &mut slots, &mut tables, &mut index).unwrap();
        let mut model = ModelApprox { lrus: vec![Vec::new(); pods], cap };
        for (pod, keys) in &routes {
            let pod = pod % pods;
            ix.record(pod, keys).unwrap();
            model.record(pod, keys);
            for key in 0..12 {
                proptest::prop_assert_eq!(ix.mask(key), model.mask(key));
            }
            for p in 0..pods {
                proptest::prop_assert_eq!(ix.held_blocks(p), model.lrus[p].len());
            }
            for cand in [0, 1, 2, 5, 7, 0x0f0, 0x801, u64::MAX] {
                let (mut greedy, mut leading) = ([u32::MAX; brokerlab_core::fleet::limits::MAX_PODS], [u32::MAX; brokerlab_core::fleet::limits::MAX_PODS]);
                ix.greedy_matches(keys, PodSet::<1>([cand]), &mut greedy);
                ix.leading_matches(keys, PodSet::<1>([cand]), &mut leading);
                for p in 0..pods {
                    let mine = |k: &u64| model.mask(*k) & 1 << p != 0;
                    let walk = keys.iter().take_while(|k| model.mask(**k) & cand != 0);
                    let expect_greedy = walk.filter(|k| mine(k)).count() as u32;
                    let expect_leading = keys.iter().take_while(|k| mine(k)).count() as u32;
                    let on = cand & 1 << p != 0;
                    proptest::prop_assert_eq!(greedy[p], if on { expect_greedy } else { u32::MAX });
                    proptest::prop_assert_eq!(leading[p], if on { expect_leading } else { u32::MAX });
                }
            }
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    /// `ApproxIndex::holders` (its tag-homed probe, the key's tag and home computed once for
    /// every pod) against `holders_reference` (one generic probe per pod, the index as it was):
    /// after every recorded request, the same holders for every key of a pool and every
    /// candidate set. Capacities from 1 to 300 (tables of 4 to 1,024 entries), up to 8
    /// pods (asked) or 12 (the key -> pods table), keys that share their high bits (homes
    /// collide, probe runs are long), prompts with and without repeated keys, recorded in prompt
    /// order or reversed.
    #[test]
    fn tag_homed_holders_are_the_reference_holders(
        pods in 1usize..13,
        cap in 1usize..300,
        high in 1u64..16,
        reqs in proptest::collection::vec(
            (0usize..64, proptest::bool::ANY, proptest::bool::ANY,
             proptest::collection::vec((0u64..16, 0u64..64), 0..60)),
            1..40,
        ),
    ) {
        let key = |h: u64, low: u64| ((h % high) << 60) | ((h * 0x9e37) << 32) | low;
        let mut slots = vec![Slot::default(); pods * cap];
        let mut tables = vec![0u32; pods * LruPod::table_len(cap)];
        let mut index = vec![IndexEntry::default(); ApproxIndex::index_len(pods, cap)];
        let mut ix = ApproxIndex::new(pods, &mut slots, &mut tables, &mut index).unwrap();
        let pool: Vec<u64> = (0..16).flat_map(|h| (0..64).map(move |low| key(h, low))).collect();
        for (pod, rev, dedup, req) in &reqs {
            let mut keys: Vec<u64> = req.iter().map(|&(h, low)| key(h, low)).collect();
            if *dedup {
                let mut seen = std::collections::HashSet::new();
                keys.retain(|k| seen.insert(*k));
            }
            if *rev {
                keys.reverse();
            }
            ix.record(pod % pods, &keys).unwrap();
            for &k in &pool {
                for cand in [u64::MAX, 0, 1, 0b1010_0110, 1 << (pods - 1)] {
                    let c = PodSet::<1>([cand]);
                    proptest::prop_assert_eq!(ix.holders(k, c), ix.holders_reference(k, c), "key {:#x}", k);
                }
            }
        }
    }
}

#[test]
fn weights_are_bounded_so_the_weighted_sum_stays_finite() {
    // Every scorer slot at MAX_WEIGHT: the total is at most 8 x 1e6, finite, and the pick is
    // the one the scores decide (queue: pod 0 idle, pod 1 with 3 waiting).
    let mut s = RouterSpec { picker: PickerKind::MaxScoreLowestIndex, ..RouterSpec::EMPTY };
    for slot in s.scorers.iter_mut() {
        *slot = Some(WeightedScorer { kind: ScorerKind::Queue, weight: MAX_WEIGHT });
    }
    s.validate().unwrap();
    let (held, q, l) = (Held(vec![vec![]; 2]), [0; 2], waiting(&[0, 3]));
    let mut r = router(s, 2, 0);
    assert_eq!(totals(&r, &view(&held, &q, &l), &K, 2), [8.0 * MAX_WEIGHT, 0.0]);
    assert_eq!(r.route(&view(&held, &q, &l), &K).pod, 0);
    // Beyond it, refused: f64::MAX made every total +inf, a tie the max-score picker broke at
    // random (issue 22).
    for w in [MAX_WEIGHT * (1.0 + f64::EPSILON), f64::MAX, f64::INFINITY, -0.5] {
        let mut t = s;
        t.scorers[3] = Some(WeightedScorer { kind: ScorerKind::Queue, weight: w });
        assert!(matches!(t.validate(), Err(Error::InvalidConfig { field: Field::ScorerWeight, .. })), "{w}");
    }
    let mut d = RouterSpec::preset(RouterKind::DynamoKv).unwrap();
    d.params.overlap_score_weight = f64::MAX;
    assert!(matches!(d.validate(), Err(Error::InvalidConfig { field: Field::OverlapScoreWeight, .. })));
    let mut v = RouterSpec::preset(RouterKind::VllmLoadaware).unwrap();
    v.params.vllm_beta = 2e6;
    assert!(matches!(v.validate(), Err(Error::InvalidConfig { field: Field::VllmBeta, .. })));
}

#[test]
fn each_router_reads_only_its_keys() {
    use RouterKey::*;
    let reads = |kind: RouterKind| -> Vec<RouterKey> {
        let s = RouterSpec::preset(kind).unwrap();
        RouterKey::ALL.into_iter().filter(|&k| s.reads(k)).collect()
    };
    // the non-pipeline policies: their own parameters (and the approximate index, the seed)
    assert_eq!(reads(RouterKind::DynamoKv), [Seed, OverlapScoreWeight, RouterTemperature]);
    assert_eq!(
        reads(RouterKind::SglangCacheAware),
        [Seed, ApproxLruBlocks, ApproxMaxBlocks, CacheThreshold, BalanceAbsThreshold, BalanceRelThreshold]
    );
    assert_eq!(reads(RouterKind::VllmLoadaware), [ApproxLruBlocks, ApproxMaxBlocks, VllmBeta]);
    // pipelines: filters, scorers, picker, and the parameters of the parts present
    assert_eq!(reads(RouterKind::LlmDPrecise), [Filters, Scorers, Picker, Seed]);
    assert_eq!(reads(RouterKind::LlmDApproximate), [Filters, Scorers, Picker, Seed, ApproxLruBlocks, ApproxMaxBlocks]);
    assert_eq!(
        reads(RouterKind::LlmDAffinity),
        [
            Filters,
            Scorers,
            Picker,
            Seed,
            ApproxLruBlocks,
            ApproxMaxBlocks,
            PrefixSource,
            TokenLoadThreshold,
            AffinityThreshold,
            MaxTtftPenaltyMs,
            PeakPrefillTokensPerS
        ]
    );
    let mut s = single(ScorerKind::LoadAware);
    assert!(s.reads(LoadAwareThreshold) && !s.reads(Seed), "ties to the lowest index draw nothing");
    s.scorers[1] = Some(WeightedScorer { kind: ScorerKind::NoHitLru, weight: 1.0 });
    assert!(s.reads(NoHitLruSize) && s.reads(PrefixSource) && !s.reads(TokenLoadThreshold));
}

/// SplitMix64 for the fused-route cases' per-pod values (one proptest seed per case, so that
/// 1,024 pods' states cost no shrinking).
fn mix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A pipeline of `ShippedRouter` for the fused-route cases: a preset, or 1 to 8 scorers of every
/// kind the fused pass takes (no-hit-lru aside), with weights that tie, vanish or dominate.
fn fused_case_spec(r: &mut u64) -> RouterSpec {
    let presets = [RouterKind::LlmDPrecise, RouterKind::LlmDApproximate, RouterKind::LlmDLoad, RouterKind::GieDefault];
    let mut spec = match mix(r) % 6 {
        k @ 0..4 => RouterSpec::preset(presets[k as usize]).unwrap(),
        4 => RouterSpec::preset(RouterKind::Random).unwrap(),
        _ => {
            let mut s = RouterSpec::EMPTY;
            let kinds: Vec<ScorerKind> = ScorerKind::ALL.into_iter().filter(|&k| k != ScorerKind::NoHitLru).collect();
            for slot in s.scorers.iter_mut().take(1 + (mix(r) % MAX_SCORERS as u64) as usize) {
                let kind = kinds[(mix(r) % kinds.len() as u64) as usize];
                let weight = match mix(r) % 6 {
                    0 => 0.0,
                    1 => 1.0,
                    2 => 2.0,
                    3 => MAX_WEIGHT,
                    _ => (mix(r) % 10_000) as f64 / 997.0,
                };
                *slot = Some(WeightedScorer { kind, weight });
            }
            s
        }
    };
    if spec.scorers.iter().any(Option::is_some) {
        spec.picker =
            [PickerKind::MaxScore, PickerKind::MaxScoreLowestIndex, PickerKind::Random][(mix(r) % 3) as usize];
    }
    spec.params.seed = mix(r);
    spec.params.load_aware_threshold = [1, 3, 128][(mix(r) % 3) as usize];
    spec.params.token_load_threshold = [1, 1000, 4_194_304][(mix(r) % 3) as usize];
    spec
}

/// Load signals of `n` pods from `r`: small ranges (ties, all equal) or wide ones, empty and
/// full caches, a zero capacity.
fn fused_case_loads(r: &mut u64, n: usize) -> Vec<PodLoad> {
    let wmax = [1u64, 2, 4, 60, 5000][(mix(r) % 5) as usize];
    let tokens = [1u64, 2000, 10_000_000][(mix(r) % 3) as usize];
    let cap = [0u32, 8, 19_208][(mix(r) % 3) as usize];
    (0..n)
        .map(|_| PodLoad {
            waiting: (mix(r) % wmax) as u32,
            running: (mix(r) % wmax) as u32,
            kv_used_blocks: if cap == 0 { (mix(r) % 3) as u32 } else { (mix(r) % (cap as u64 + 1)) as u32 },
            kv_capacity_blocks: cap,
            pending_prefill_tokens: if mix(r).is_multiple_of(3) { 0 } else { mix(r) % tokens },
        })
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, ..Default::default() })]

    /// The fused pipeline route (one pass over the candidates, every scorer summed per pod) is
    /// the reference route (a pass and an array per scorer, then `max_set`): on random fleets of
    /// 1 to 64 pods (one-word sets) and 65 to 1,024, random load signals, held prefixes and
    /// routed histories (the approximate index), every candidate's total is bit-equal to
    /// `evaluate`'s, and the picks, believed matches and RNG draws are the same decision after
    /// decision. Without load signals the fused pass is not taken, and the route is the
    /// reference's.
    #[test]
    fn fused_route_is_the_reference_route(seed in proptest::prelude::any::<u64>(), wide in proptest::bool::ANY) {
        let mut r = seed;
        let n = if wide { 65 + (mix(&mut r) % 960) as usize } else { 1 + (mix(&mut r) % 64) as usize };
        let spec = fused_case_spec(&mut r);
        // Pod p holds keys 0..h_p of the chain, with a hole at a random key now and then.
        let held = Held(
            (0..n)
                .map(|_| {
                    let h = mix(&mut r) % 14;
                    let hole = if mix(&mut r).is_multiple_of(4) { mix(&mut r) % 14 } else { u64::MAX };
                    (0..h).filter(|&k| k != hole).collect()
                })
                .collect(),
        );
        let q = vec![0u32; n];
        let lru = 1 + mix(&mut r) % 20;
        let (mut fused, mut reference) = (router(spec, n, lru), router(spec, n, lru));
        for _ in 0..mix(&mut r) % 30 {
            let (pod, len) = ((mix(&mut r) % n as u64) as usize, mix(&mut r) % 14);
            let keys: Vec<u64> = (0..len).collect();
            fused.routed(pod, &keys, 0).unwrap();
            reference.routed(pod, &keys, 0).unwrap();
        }
        for _ in 0..1 + mix(&mut r) % 4 {
            let keys: Vec<u64> = (0..mix(&mut r) % 14).collect();
            let loads = fused_case_loads(&mut r, n);
            let v = view(&held, &q, &loads);
            let expect = fused.evaluate(&v, &keys);
            let mut noted = vec![None; n];
            let got = fused.route_fused_noting(&v, &keys, &mut |p, t| noted[p] = Some(t));
            let want = reference.route_reference(&v, &keys);
            proptest::prop_assert_eq!(got, Some(want), "n {} spec {:?}", n, spec);
            if spec.picker != PickerKind::Random {
                for (p, t) in noted.iter().enumerate() {
                    proptest::prop_assert_eq!(t.map(f64::to_bits), Some(expect.totals[p].to_bits()), "pod {}", p);
                }
            }
            fused.routed(want.pod, &keys, 0).unwrap();
            reference.routed(want.pod, &keys, 0).unwrap();
        }
        // No load signals: the reference path, through `route`.
        let keys: Vec<u64> = (0..mix(&mut r) % 14).collect();
        let mut v = view(&held, &q, &[]);
        v.loads = None;
        proptest::prop_assert_eq!(fused.route_fused_noting(&v, &keys, &mut |_, _| {}), None);
        proptest::prop_assert_eq!(fused.route(&v, &keys), reference.route_reference(&v, &keys));
    }
}
