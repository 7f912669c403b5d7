//! Hand-computed cases for the batched engine (docs/MODEL.md, "The batched engine"), and the
//! qualitative shapes it must show. Every case runs step by step and with fast-forward, which
//! must agree exactly.

use brokerlab_core::fleet::cost::Calibration;
use brokerlab_core::fleet::*;

mod common;
use common::{BatchedOwned as Owned, Sink};

/// One request: arrival ns, prompt block ids (16 tokens each), extra tokens of a partial block,
/// output length.
#[derive(Clone)]
struct R {
    at_ns: u64,
    blocks: Vec<u64>,
    extra: u64,
    out: u64,
}

fn r(at_ns: u64, blocks: &[u64], extra: u64, out: u64) -> R {
    R { at_ns, blocks: blocks.to_vec(), extra, out }
}

impl Sink {
    /// ITL samples, expanded and sorted (fast-forward groups them differently).
    fn itl_samples(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.itl.iter().flat_map(|&(d, n)| std::iter::repeat_n(d, n as usize)).collect();
        v.sort_unstable();
        v
    }
}

struct Run {
    done: Vec<Completion>,
    itl: Vec<u64>,
    stats: Vec<BatchedStats>,
    pods: Vec<u32>,
}

fn keys_of(ids: &[u64]) -> Vec<u64> {
    let mut out = vec![0; ids.len()];
    keys::trace_keys(ids, ids.len() as u64 * 16, 16, &mut out).unwrap();
    out
}

fn run_with(cfg: FleetConfig, ecfg: BatchedConfig, reqs: &[R]) -> Run {
    let cfg = FleetConfig { engine: EngineConfig::Batched(ecfg), ..cfg };
    let mut owned = Owned::new(&BatchedLayout::new(&cfg, 1024, 1 << 16).unwrap());
    let mut f = BatchedFleet::new(cfg, owned.buffers(&mut [])).unwrap();
    let (sink, pods, _) = feed(&mut f, cfg.pods, reqs, false);
    // Every request finishes exactly once, with all its tokens.
    assert_eq!(sink.done.len(), reqs.len());
    for (i, c) in sink.done.iter().enumerate() {
        assert_eq!(c.request, i as u64);
        assert_eq!(c.output_tokens, reqs[i].out.max(1));
        assert!(c.arrival_ns < c.first_token_ns && c.first_token_ns <= c.finish_ns);
    }
    let stats: Vec<BatchedStats> = (0..cfg.pods).map(|p| *f.pod_stats(p).unwrap()).collect();
    let produced: u64 = stats.iter().map(|s| s.output_tokens).sum();
    assert_eq!(produced, reqs.iter().map(|q| q.out.max(1)).sum::<u64>(), "tokens produced = output lengths");
    Run { itl: sink.itl_samples(), done: sink.done, stats, pods }
}

/// Dispatches `reqs` to `f` and finishes it; `events`: the pods advanced event by event
/// (`advance_next`) up to each arrival before it is dispatched. Returns the sink (completions in
/// request order), the pod each request was routed to and the largest number of steps one
/// `advance_next` ran on one pod (0 without `events`).
fn feed(f: &mut BatchedFleet<'_>, pods: usize, reqs: &[R], events: bool) -> (Sink, Vec<u32>, u64) {
    let mut sink = Sink::default();
    let (mut routed, mut longest) = (Vec::new(), 0);
    for q in reqs {
        if events {
            longest = longest.max(longest_advance(f, q.at_ns, pods, &mut sink));
        }
        let k = keys_of(&q.blocks);
        let req = Request {
            arrival_ns: q.at_ns,
            input_tokens: k.len() as u64 * 16 + q.extra,
            output_tokens: q.out,
            keys: &k,
        };
        routed.push(f.dispatch(&req, &mut sink).unwrap().pod);
    }
    if events {
        longest = longest.max(longest_advance(f, u64::MAX, pods, &mut sink));
    }
    f.finish(&mut sink).unwrap();
    sink.done.sort_by_key(|c| c.request);
    (sink, routed, longest)
}

/// Runs step by step and with fast-forward, and with the per-block pool (the oracle of the
/// run-at-a-time pool); all must give the same numbers.
fn run(cfg: FleetConfig, mut ecfg: BatchedConfig, reqs: &[R]) -> Run {
    ecfg.fast_forward = false;
    let slow = run_with(cfg, ecfg, reqs);
    ecfg.fast_forward = true;
    let fast = run_with(cfg, ecfg, reqs);
    assert_eq!(slow.done, fast.done, "fast-forward changes completions");
    assert_eq!(slow.itl, fast.itl, "fast-forward changes ITL samples");
    assert_eq!(slow.stats, fast.stats, "fast-forward changes counters");
    assert_eq!(slow.pods, fast.pods, "fast-forward changes routing");
    ecfg.block_runs = false;
    let per_block = run_with(cfg, ecfg, reqs);
    assert_eq!(per_block.done, fast.done, "block runs change completions");
    assert_eq!(per_block.itl, fast.itl, "block runs change ITL samples");
    assert_eq!(per_block.stats, fast.stats, "block runs change counters");
    assert_eq!(per_block.pods, fast.pods, "block runs change routing");
    fast
}

const O_NS: u64 = 1000;
const P_NS: u64 = 10;
const D_NS: u64 = 100;

fn ecfg(seqs: u32, budget: u32) -> BatchedConfig {
    let mut e = BatchedConfig::new(Profile::Seed);
    e.max_num_seqs = seqs;
    e.max_num_batched_tokens = budget;
    e.cost = StepCost::Linear(LinearCost {
        t_overhead_ns: O_NS,
        t_prefill_token_ns: P_NS,
        t_decode_seq_ns: D_NS,
        t_kv_token_ns: 0,
    });
    e
}

fn one_pod(cap: usize) -> FleetConfig {
    FleetConfig::new(1, cap, RouterKind::RoundRobin)
}

#[test]
fn one_request_alone() {
    // L = 100 (6 full blocks + 4 tokens), O = 5, arrival 5 ms. One prefill step of 100 tokens,
    // then 4 decode steps: TTFT = prefill time, E2E = TTFT + (O - 1) decode steps.
    let res = run(one_pod(64), ecfg(16, 8192), &[r(5_000_000, &[1, 2, 3, 4, 5, 6], 4, 5)]);
    let c = res.done[0];
    let ttft = O_NS + 100 * P_NS;
    assert_eq!(c.ttft_ns(), ttft);
    assert_eq!(c.e2e_ns(), ttft + 4 * (O_NS + D_NS));
    assert_eq!(c.prefill_tokens, 100);
    assert_eq!(res.itl, vec![O_NS + D_NS; 4]);
    assert_eq!(res.stats[0].steps, 5);
    // Peak: ceil(104 / 16) = 7 blocks pinned during the last step.
    assert_eq!(res.stats[0].kv_peak_blocks, 7);
}

#[test]
fn two_requests_share_a_step_budget() {
    // M = 64. A and B (L = 40, O = 2) at t = 0. Step 1: A gets 40, B the remaining 24.
    // Step 2: A decodes (1), B its last 16 prefill tokens; A finishes, B's first token.
    // Step 3: B decodes and finishes.
    let res = run(one_pod(16), ecfg(4, 64), &[r(0, &[1, 2], 8, 2), r(0, &[3, 4], 8, 2)]);
    let d1 = O_NS + 64 * P_NS;
    let d2 = O_NS + 16 * P_NS + D_NS;
    let d3 = O_NS + D_NS;
    let (a, b) = (res.done[0], res.done[1]);
    assert_eq!((a.ttft_ns(), a.e2e_ns()), (d1, d1 + d2));
    assert_eq!((b.ttft_ns(), b.e2e_ns()), (d1 + d2, d1 + d2 + d3));
    assert_eq!(res.stats[0].steps, 3);
    assert_eq!(res.stats[0].prefill_tokens, 80);
}

#[test]
fn chunked_prefill_across_steps() {
    // M = 32, L = 100, O = 1: chunks 32, 32, 32, 4; the first (and only) token at the end of the
    // fourth step.
    let res = run(one_pod(16), ecfg(4, 32), &[r(0, &[1, 2, 3, 4, 5, 6], 4, 1)]);
    let c = res.done[0];
    assert_eq!(c.ttft_ns(), 4 * O_NS + 100 * P_NS);
    assert_eq!(c.e2e_ns(), c.ttft_ns());
    assert_eq!(res.stats[0].steps, 4);
    assert!(res.itl.is_empty());
}

#[test]
fn prefix_hit_is_full_blocks_capped_below_the_prompt() {
    // A caches 4 blocks; B (80 tokens, same first 4 blocks) hits all 4: h_max = min(5, 79/16) = 4.
    // C (exactly 64 tokens = A's prompt) hits 3: the last token is recomputed (vLLM).
    let reqs = [r(0, &[1, 2, 3, 4], 0, 1), r(1_000_000, &[1, 2, 3, 4, 9], 0, 1), r(2_000_000, &[1, 2, 3, 4], 0, 1)];
    let res = run(one_pod(64), ecfg(4, 8192), &reqs);
    assert_eq!(res.done[0].hit_tokens, 0);
    assert_eq!(res.done[1].hit_tokens, 64);
    assert_eq!(res.done[1].ttft_ns(), O_NS + 16 * P_NS);
    assert_eq!(res.done[2].hit_tokens, 48);
    assert_eq!(res.done[2].ttft_ns(), O_NS + 16 * P_NS);
}

#[test]
fn a_pinned_block_survives_eviction_pressure() {
    // C = 6. P0 (blocks k1 k2, O = 1) leaves k1, k2 cached and free; free queue 2,3,4,5,1,0.
    // At 1 ms: a long request, X (3 blocks of other keys, O = 1) and Z (k1 k2 + 1 token, O = 1).
    // Pinned case: the long request hits k1 k2 (pinned), takes block 2; X takes 3,4,5: nothing
    // cached is evicted; Z waits for a free block and then hits both blocks.
    // Control: the long request has other keys, so it and X take every free block, evicting
    // k2 then k1; Z hits nothing. So the test fails if pinned blocks were evictable.
    for (long_keys, want) in [([1u64, 2], 32u64), ([5, 6], 0)] {
        let reqs = [
            r(0, &[1, 2], 0, 1),
            r(1_000_000, &long_keys, 1, 10),
            r(1_000_000, &[7, 8, 9], 0, 1),
            r(1_000_000, &[1, 2], 1, 1),
        ];
        let res = run(one_pod(6), ecfg(4, 8192), &reqs);
        assert_eq!(res.done[3].hit_tokens, want, "long request keys {long_keys:?}");
        assert_eq!(res.stats[0].preemptions, 0);
    }
}

#[test]
fn preemption_and_recompute() {
    // C = 4, A and B (one 16-token block each, O = 30) at t = 0; each needs 3 blocks at the end.
    // Step 1: both prefill (32 tokens). Steps 2..17: both decode (block 2 taken at step 2).
    // Step 18: A needs a third block, none is free: B (last admitted) is preempted, releasing
    // its 2 blocks (its keyed prompt block stays cached), A takes one; no admission this step.
    // Steps 18..30: A decodes alone and finishes. B cannot return before (it needs 2 new
    // blocks + its cached hit block, 1 free). Step 31: B is admitted, hits its own block,
    // recomputes 33 - 16 = 17 tokens and produces its 18th token; steps 32..43 decode.
    let res = run(one_pod(4), ecfg(4, 64), &[r(0, &[1], 0, 30), r(0, &[2], 0, 30)]);
    let (a, b) = (res.done[0], res.done[1]);
    let d1 = O_NS + 32 * P_NS;
    let both = O_NS + 2 * D_NS;
    let one = O_NS + D_NS;
    let end17 = d1 + 16 * both;
    assert_eq!((a.ttft_ns(), a.e2e_ns(), a.preemptions), (d1, end17 + 13 * one, 0));
    let end31 = end17 + 13 * one + O_NS + 17 * P_NS;
    assert_eq!((b.ttft_ns(), b.e2e_ns(), b.preemptions), (d1, end31 + 12 * one, 1));
    assert_eq!((b.prefill_tokens, b.hit_tokens), (16 + 17, 0));
    assert_eq!(res.stats[0].preemptions, 1);
    assert_eq!(res.stats[0].steps, 43);
    // B's ITL samples include one long gap: its preemption.
    assert_eq!(*res.itl.last().unwrap(), end31 - end17);
    assert_eq!(res.stats[0].kv_peak_blocks, 4);
}

#[test]
fn a_request_preempting_itself_waits_for_the_next_step() {
    // C = 2, S = 2, M = 8; A (8 tokens, O = 7) and B (13 tokens, O = 12) at 0, no full blocks.
    // Step 1: A's 8 tokens use the budget (1 block). Step 2: A decodes, B gets a 7-token chunk
    // (the last free block). Step 3: A decodes, B's last 6 prompt tokens: B's first token.
    // Steps 4-6: both decode. Step 7: A decodes; B (c = 16) needs a second block, none is free:
    // the victim is the last running request, B itself; it releases its block and, since this
    // step preempted, nothing is admitted though a block is free now (vLLM). A finishes.
    // Steps 8-9: B recomputes 17 tokens in chunks of 8, 8; step 10 computes the last one
    // (need = 1 with g >= 1: a decode) and produces its 5th token; steps 11-17 decode.
    let res = run(one_pod(2), ecfg(2, 8), &[r(0, &[], 8, 7), r(0, &[], 13, 12)]);
    let (a, b) = (res.done[0], res.done[1]);
    let e3 = (O_NS + 8 * P_NS) + (O_NS + 7 * P_NS + D_NS) + (O_NS + 6 * P_NS + D_NS);
    let e7 = e3 + 3 * (O_NS + 2 * D_NS) + (O_NS + D_NS);
    assert_eq!((a.ttft_ns(), a.e2e_ns()), (O_NS + 8 * P_NS, e7));
    assert_eq!(e7, 8110);
    let e10 = e7 + 2 * (O_NS + 8 * P_NS) + (O_NS + D_NS);
    assert_eq!((b.ttft_ns(), b.e2e_ns(), b.preemptions), (e3, e10 + 7 * (O_NS + D_NS), 1));
    assert_eq!(b.prefill_tokens, 7 + 6 + 16);
    assert_eq!(res.stats[0].steps, 17);
}

#[test]
fn the_full_sequence_gate_holds_back_a_request_whose_first_chunk_fits() {
    // vLLM's scheduler_reserve_full_isl (docs/MODEL.md, "One step", step 2). One pod of C = 5
    // blocks, M = 32, S = 4. A: L = 32 (2 blocks), O = 2; B: L = 48 (3 blocks), O = 1; both at 0,
    // A first. Step 1 (0 -> 1320): A prefills 32 (2 blocks, 3 free), its first token.
    // Without the gate, step 2: A decodes (a 3rd block, 2 free); B's first chunk of 31 tokens needs
    // 2 blocks <= 2: admitted (0 free). 1000 + 100 + 310 = 1410 -> 2730: A finishes (3 free).
    // Step 3: B's last 17 tokens (1 block more): 1000 + 170 -> 3900, B's first (and last) token.
    // With the gate, step 2: B's whole sequence needs 3 blocks > 2 free: held back; A alone,
    // 1000 + 100 -> 2420, A finishes (5 free). Step 3: B admitted (3 <= 5), 32 tokens -> 3740;
    // step 4: its last 16 -> 4900.
    let reqs = [r(0, &[1, 2], 0, 2), r(0, &[3, 4, 5], 0, 1)];
    let mut e = ecfg(4, 32);
    let off = run(one_pod(5), e, &reqs);
    assert_eq!((off.done[0].e2e_ns(), off.done[1].ttft_ns()), (2730, 3900));
    assert_eq!((off.stats[0].steps, off.stats[0].kv_peak_blocks), (3, 5));
    e.reserve_full_isl = true;
    let on = run(one_pod(5), e, &reqs);
    assert_eq!((on.done[0].e2e_ns(), on.done[1].ttft_ns()), (2420, 4900));
    assert_eq!((on.stats[0].steps, on.stats[0].kv_peak_blocks), (4, 3));
    // no preemption either way, and B's prompt computed once
    assert_eq!((off.stats[0].preemptions, on.stats[0].preemptions), (0, 0));
    assert_eq!((off.done[1].prefill_tokens, on.done[1].prefill_tokens), (48, 48));
    // when the budget holds every prompt (M = 128) the first chunk is the whole sequence and the
    // gate changes nothing (here B is even preempted and readmitted, the same either way)
    let mut wide = ecfg(4, 128);
    let a = run(one_pod(5), wide, &reqs);
    wide.reserve_full_isl = true;
    let b = run(one_pod(5), wide, &reqs);
    assert_eq!((a.done, a.stats), (b.done, b.stats));
}

#[test]
fn fifo_engine_unchanged_by_route_view_loads() {
    // The seed routers ignore the load signals: the FIFO engine's results are those of its own
    // tests (fleet_rules.rs); here the batched engine routes round-robin as i mod N.
    let reqs: Vec<R> = (0..6).map(|i| r(i * 1000, &[i + 1], 0, 1)).collect();
    let res = run(FleetConfig::new(3, 16, RouterKind::RoundRobin), ecfg(4, 64), &reqs);
    assert_eq!(res.pods, vec![0, 1, 2, 0, 1, 2]);
}

// ----- qualitative shapes -----

fn lcg(x: &mut u64) -> u64 {
    *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *x >> 33
}

/// The random small workloads' shape: arrivals up to `gap_ns` apart; a prompt of up to
/// `shared - 1` blocks of one of `prefixes` shared prefixes, up to `unique - 1` unique blocks and
/// up to 15 more tokens; up to `out - 1` output tokens.
struct Draw {
    gap_ns: u64,
    prefixes: u64,
    shared: u64,
    unique: u64,
    out: u64,
}

/// `n` draws of `d` from `x`, in one fixed order (each test's cases depend on it); a request
/// that is empty or cannot fit a pod of `cap` blocks is drawn and skipped.
fn draw_requests(x: &mut u64, n: u64, d: Draw, cap: usize) -> Vec<R> {
    let mut at = 0u64;
    let mut reqs = Vec::new();
    for _ in 0..n {
        at += lcg(x) % d.gap_ns;
        let shared = lcg(x) % d.prefixes;
        let mut blocks: Vec<u64> = (0..lcg(x) % d.shared).map(|j| shared * 100 + j).collect();
        blocks.extend((0..lcg(x) % d.unique).map(|_| 10_000 + lcg(x)));
        let extra = lcg(x) % 16;
        let out = lcg(x) % d.out;
        let len = blocks.len() as u64 * 16 + extra;
        if len == 0 || len + out.max(1) - 1 > cap as u64 * 16 {
            continue;
        }
        reqs.push(r(at, &blocks, extra, out));
    }
    reqs
}

/// `n` requests of 256-token prompts (first 8 blocks shared by all, the rest unique) and `out`
/// output tokens, every `gap_ns`.
fn load(n: u64, gap_ns: u64, out: u64, seed: u64) -> Vec<R> {
    let mut x = seed;
    (0..n)
        .map(|i| {
            let mut b: Vec<u64> = (0..8).collect();
            b.extend((0..8).map(|_| 1000 + lcg(&mut x)));
            r(i * gap_ns, &b, 0, out + lcg(&mut x) % out)
        })
        .collect()
}

fn real_cost(seqs: u32, budget: u32) -> BatchedConfig {
    let mut e = BatchedConfig::new(Profile::Llama31_8bH100);
    e.max_num_seqs = seqs;
    e.max_num_batched_tokens = budget;
    e
}

fn tok_per_s(res: &Run) -> f64 {
    let out: u64 = res.done.iter().map(|c| c.output_tokens).sum();
    let end = res.done.iter().map(|c| c.finish_ns).max().unwrap();
    out as f64 / (end as f64 / 1e9)
}

fn ttft_p90(res: &Run) -> u64 {
    let mut v: Vec<u64> = res.done.iter().map(|c| c.ttft_ns()).collect();
    v.sort_unstable();
    v[stats::nearest_rank_index(v.len(), 90, 100).unwrap()]
}

#[test]
fn output_throughput_saturates_as_the_rate_rises() {
    // S = 32, one pod, 400 requests. Rates 5, 10, ... req/s: throughput follows the rate while
    // the pod keeps up, then flattens at what 32 decode slots give.
    let rates = [5u64, 10, 20, 40, 80, 160, 320];
    let tput: Vec<f64> = rates
        .iter()
        .map(|&rate| tok_per_s(&run(one_pod(8192), real_cost(32, 2048), &load(400, 1_000_000_000 / rate, 64, 7))))
        .collect();
    eprintln!("{rates:?} -> {tput:?}");
    // Proportional at low load.
    assert!(tput[1] > 1.8 * tput[0], "{tput:?}");
    // Saturated at high load: doubling the rate adds under 10%.
    assert!(tput[6] < 1.1 * tput[5], "{tput:?}");
    // And never falls.
    for w in tput.windows(2) {
        assert!(w[1] >= w[0] * 0.99, "{tput:?}");
    }
}

#[test]
fn ttft_p90_grows_with_load_at_fixed_max_num_seqs() {
    let rates = [10u64, 40, 80, 160, 320];
    let p90: Vec<u64> = rates
        .iter()
        .map(|&rate| ttft_p90(&run(one_pod(8192), real_cost(16, 2048), &load(300, 1_000_000_000 / rate, 64, 11))))
        .collect();
    eprintln!("{rates:?} -> {p90:?}");
    for w in p90.windows(2) {
        assert!(w[1] >= w[0], "{p90:?}");
    }
    assert!(p90[4] > 10 * p90[0], "{p90:?}");
}

#[test]
fn shrinking_capacity_raises_preemptions() {
    // 200 requests of 256-token prompts and 128..255 output tokens every 5 ms, S = 64. With C
    // large nothing is preempted; as C shrinks the running requests' decode blocks collide more
    // often. (Below about 512 blocks fewer requests fit at once and the count levels off near
    // 200-250: it is not monotone there, so the test stops at 512.)
    let caps = [4096usize, 1024, 768, 512];
    let pre: Vec<u64> = caps
        .iter()
        .map(|&c| run(one_pod(c), real_cost(64, 2048), &load(200, 5_000_000, 128, 5)).stats[0].preemptions)
        .collect();
    eprintln!("{caps:?} -> {pre:?}");
    assert_eq!(pre[0], 0, "{pre:?}");
    for w in pre.windows(2) {
        assert!(w[1] > w[0], "{pre:?}");
    }
}

/// Routes everything to pod 0 and records what it was shown.
#[derive(Default)]
struct Spy {
    seen: Vec<(Vec<u32>, Vec<PodLoad>)>,
}

impl Router for Spy {
    fn needs_index(&self) -> bool {
        false
    }
    fn needs_loads(&self) -> bool {
        true
    }
    fn route(&mut self, view: &RouteView<'_, '_>, _keys: &[u64]) -> Route {
        self.seen
            .push((view.queue_lens.to_vec(), view.loads.expect("a router that reads loads is given them").to_vec()));
        Route { pod: 0, believed_match_blocks: 0 }
    }
}

#[test]
fn routers_see_the_load_signals() {
    // A (L = 100, O = 5) at 0: step 1 runs [0, 2000). B and C (L = 40) at 500; D at 2000 (step 2
    // starts at 2000, after D is queued) and E at 2001 (step 2 has run: A decodes, B and C are
    // admitted whole).
    let cfg = FleetConfig { engine: EngineConfig::Batched(ecfg(4, 8192)), ..one_pod(64) };
    let l = BatchedLayout::new(&cfg, 16, 256).unwrap();
    let mut blocks = vec![KvBlock::default(); l.blocks_per_pod];
    let mut tables = vec![0u32; l.table_per_pod];
    let mut rq = vec![ReqSlot::default(); l.requests_per_pod];
    let mut waiting = vec![0u32; l.requests_per_pod];
    let mut running = vec![0u32; l.running_per_pod];
    let mut ks = vec![0u64; l.keys_per_pod];
    let bufs = BatchedBuffers {
        blocks: &mut blocks,
        tables: &mut tables,
        requests: &mut rq,
        waiting: &mut waiting,
        running: &mut running,
        keys: &mut ks,
        key_blocks: &mut [],
        cpu_slots: &mut [],
        cpu_tables: &mut [],
        pd: Default::default(),
        scale: &mut [],
    };
    let mut f = BatchedFleet::with_router(cfg, Spy::default(), bufs).unwrap();
    let mut sink = Sink::default();
    let ka = keys_of(&[1, 2, 3, 4, 5, 6]);
    let kb = keys_of(&[7, 8]);
    let kc = keys_of(&[9, 10]);
    for (at, k, l) in [(0, &ka, 100), (500, &kb, 40), (500, &kc, 40), (2000, &kc, 40), (2001, &kc, 40)] {
        let req = Request { arrival_ns: at, input_tokens: l, output_tokens: 5, keys: k };
        f.dispatch(&req, &mut sink).unwrap();
    }
    f.finish(&mut sink).unwrap();
    assert_eq!(sink.done.len(), 5);
    let load = |waiting, running, kv_used_blocks, pending_prefill_tokens| PodLoad {
        waiting,
        running,
        kv_used_blocks,
        kv_capacity_blocks: 64,
        pending_prefill_tokens,
    };
    let seen = &f.router().seen;
    assert_eq!(seen[0], (vec![0], vec![load(0, 0, 0, 0)]));
    // A ran its prefill (7 blocks for 100 tokens) and produced its first token.
    assert_eq!(seen[1], (vec![1], vec![load(0, 1, 7, 0)]));
    assert_eq!(seen[2], (vec![2], vec![load(1, 1, 7, 40)]));
    assert_eq!(seen[3], (vec![3], vec![load(2, 1, 7, 80)]));
    // Step 2 ran at 2000: B, C and D admitted, all prefilled. C's two full blocks were cached
    // when C was scheduled, so D (same prompt), admitted after C in the same step, hits them
    // (shared, pinned twice) and takes 1 block: 7 + 3 + 3 + 1.
    assert_eq!(seen[4], (vec![4], vec![load(0, 4, 14, 0)]));
    let d = sink.done.iter().find(|c| c.request == 3).unwrap();
    assert_eq!(d.hit_tokens, 32);
}

/// The loads a [`Spy`] router saw for requests (arrival ns, prompt block ids, prompt tokens,
/// output tokens) on one pod of 64 blocks, step by step and with fast-forward (they must agree).
fn spied_loads(ecfg: BatchedConfig, reqs: &[(u64, &[u64], u64, u64)]) -> Vec<PodLoad> {
    let mut runs = Vec::new();
    for fast_forward in [false, true] {
        let e = BatchedConfig { fast_forward, ..ecfg };
        let cfg = FleetConfig { engine: EngineConfig::Batched(e), ..one_pod(64) };
        let mut owned = Owned::new(&BatchedLayout::new(&cfg, 16, 256).unwrap());
        let mut f = BatchedFleet::with_router(cfg, Spy::default(), owned.buffers(&mut [])).unwrap();
        let mut sink = Sink::default();
        for &(at, ids, input_tokens, output_tokens) in reqs {
            let k = keys_of(ids);
            let req = Request { arrival_ns: at, input_tokens, output_tokens, keys: &k };
            f.dispatch(&req, &mut sink).unwrap();
        }
        f.finish(&mut sink).unwrap();
        assert_eq!(sink.done.len(), reqs.len());
        runs.push(f.router().seen.iter().map(|(_, l)| l[0]).collect::<Vec<_>>());
    }
    assert_eq!(runs[0], runs[1], "fast-forward changes what the router sees");
    runs.pop().unwrap()
}

fn seen(waiting: u32, running: u32, kv_used_blocks: u32, pending_prefill_tokens: u64) -> PodLoad {
    PodLoad { waiting, running, kv_used_blocks, kv_capacity_blocks: 64, pending_prefill_tokens }
}

#[test]
fn routers_read_the_gauges_vllm_published_at_the_last_scrape() {
    // Scrapes every 1,500 ns (at 0, 1500, 3000, 4500, 6000); `running` and the pending prefill
    // tokens stay the engine's own. Steps (O = 1000, P = 10, D = 100, S = 4): [0, 2000) A's
    // prefill, publishes (waiting 0, 7 blocks) at 2000; [2000, 3980) A decodes, B, C, D prefill
    // (D hits C's 2 blocks), publishes (0, 14) at 3980 (E, at 2001, came during the step); [3980,
    // 5380) four decodes, E and F wait (S = 4), publishes (2, 14) at 5380.
    let mut e = ecfg(4, 8192);
    e.metrics_scrape_ns = 1500;
    let (ka, kb, kc) = (&[1, 2, 3, 4, 5, 6][..], &[7, 8][..], &[9, 10][..]);
    let reqs = [
        (0, ka, 100, 5),
        (500, kb, 40, 5),
        (500, kc, 40, 5),
        (2000, kc, 40, 5),
        (2001, kc, 40, 5),
        (3100, &[11, 12][..], 40, 5),
        (4600, &[13, 14][..], 40, 5),
        (6100, &[15, 16][..], 40, 5),
    ];
    let got = spied_loads(e, &reqs);
    let want = [
        seen(0, 0, 0, 0),
        // the scrape at 0 saw an idle pod (A's step publishes only at its end, 2000)
        seen(0, 1, 0, 0),
        // B waits (40 tokens to prefill) but nothing was published since
        seen(0, 1, 0, 40),
        // at 2000 the last scrape is at 1500, before step 1's end
        seen(0, 1, 0, 80),
        // step 2 has run (4 running), but the scrape at 1500 still holds
        seen(0, 4, 0, 0),
        // the scrape at 3000 took step 1's gauges (step 2 ends at 3980); E waits
        seen(0, 4, 7, 40),
        // the scrape at 4500 took step 2's (0 waiting, 14 blocks); E and F wait
        seen(0, 4, 14, 80),
        // the scrape at 6000 took step 3's: 2 waiting (E and F; G came during the step)
        seen(2, 4, 14, 120),
    ];
    assert_eq!(got, want);
    // Without scrapes the same run shows the engine's state at each arrival.
    let instant = spied_loads(ecfg(4, 8192), &reqs);
    assert_eq!(instant[3], seen(2, 1, 7, 80));
    assert_eq!(instant[7], seen(3, 4, 14, 120));
}

/// (routed_waiting, routed_waiting_samples) of a run of `reqs` as [`spied_loads`] runs them, on
/// one pod behind the load-reading [`Spy`] (`spy`) or a round-robin router that reads no load.
fn routed_waiting(ecfg: BatchedConfig, reqs: &[(u64, &[u64], u64, u64)], spy: bool) -> (u64, u64) {
    let cfg = FleetConfig { engine: EngineConfig::Batched(ecfg), ..one_pod(64) };
    let mut owned = Owned::new(&BatchedLayout::new(&cfg, 16, 256).unwrap());
    let mut sink = Sink::default();
    let mut go = |f: &mut dyn FnMut(&Request<'_>, &mut Sink)| {
        for &(at, ids, input_tokens, output_tokens) in reqs {
            let k = keys_of(ids);
            f(&Request { arrival_ns: at, input_tokens, output_tokens, keys: &k }, &mut sink);
        }
    };
    let t = if spy {
        let mut f = BatchedFleet::with_router(cfg, Spy::default(), owned.buffers(&mut [])).unwrap();
        go(&mut |r, s| {
            f.dispatch(r, s).unwrap();
        });
        *f.totals()
    } else {
        let mut f = BatchedFleet::new(cfg, owned.buffers(&mut [])).unwrap();
        go(&mut |r, s| {
            f.dispatch(r, s).unwrap();
        });
        *f.totals()
    };
    (t.routed_waiting, t.routed_waiting_samples)
}

#[test]
fn the_waiting_count_is_sampled_at_every_routing_decision_whatever_the_router_reads() {
    // The run of `routers_read_the_gauges_vllm_published_at_the_last_scrape`: the scraped waiting
    // count at the 8 arrivals is 0, 0, 0, 0, 0, 0, 0, 2 (hand-computed there), so the EPP's logged
    // mean is 2 / 8 on its one pod; the engine's own counts at the arrivals are 0, 0, 1, 2, 0, 1,
    // 2, 3 (A in prefill; B, C, D wait for step 2 at 2000; E, F, G wait behind S = 4 after it).
    let mut e = ecfg(4, 8192);
    e.metrics_scrape_ns = 1500;
    let (ka, kb, kc) = (&[1, 2, 3, 4, 5, 6][..], &[7, 8][..], &[9, 10][..]);
    let reqs = [
        (0, ka, 100, 5),
        (500, kb, 40, 5),
        (500, kc, 40, 5),
        (2000, kc, 40, 5),
        (2001, kc, 40, 5),
        (3100, &[11, 12][..], 40, 5),
        (4600, &[13, 14][..], 40, 5),
        (6100, &[15, 16][..], 40, 5),
    ];
    for spy in [true, false] {
        assert_eq!(routed_waiting(e, &reqs, spy), (2, 8), "scraped, spy {spy}");
    }
    let seen: u64 = spied_loads(e, &reqs).iter().map(|l| u64::from(l.waiting)).sum();
    assert_eq!(seen, 2, "the sample is what the router read");
    let instant: Vec<u32> = spied_loads(ecfg(4, 8192), &reqs).iter().map(|l| l.waiting).collect();
    assert_eq!(instant, [0, 0, 1, 2, 0, 1, 2, 3]);
    for spy in [true, false] {
        assert_eq!(routed_waiting(ecfg(4, 8192), &reqs, spy), (9, 8), "own signals, spy {spy}");
    }
}

#[test]
fn a_step_that_emits_no_token_publishes_nothing() {
    // M = 64, scrapes every ns. Step 1 [0, 1640): A's first 64 tokens, no token out, nothing
    // published. Step 2 [1640, 3280): A's last 36 (first token), B's first 28: publishes (0, 9)
    // at 3280. Step 3 [3280, 4900): A decodes and finishes, B's last 12, C's 40: publishes (0, 6)
    // at 4900.
    let mut e = ecfg(4, 64);
    e.metrics_scrape_ns = 1;
    let reqs = [
        (0, &[1, 2, 3, 4, 5, 6][..], 100, 2),
        (100, &[7, 8][..], 40, 2),
        (1700, &[9, 10][..], 40, 2),
        (3300, &[11, 12][..], 40, 2),
    ];
    let got = spied_loads(e, &reqs);
    assert_eq!(got, [seen(0, 0, 0, 0), seen(0, 1, 0, 36), seen(0, 2, 0, 12), seen(0, 2, 9, 0)]);
    // the engine's own signals: A holds 4 blocks at 100, A and B 9 at 1700, B and C 6 at 3300
    let instant = spied_loads(ecfg(4, 64), &reqs);
    assert_eq!(instant, [seen(0, 0, 0, 0), seen(0, 1, 4, 36), seen(0, 2, 9, 12), seen(0, 2, 6, 0)]);
}

#[test]
fn random_small_fleets_keep_the_invariants_and_fast_forward_is_exact() {
    // Small pods under pressure (preemptions, shared prefixes, chunking, a context cost), every
    // router: run() checks completions, tokens and fast-forward; debug builds audit every step.
    let mut x = 2024u64;
    let mut preempted = 0;
    for case in 0..300 {
        let pods = 1 + (lcg(&mut x) % 3) as usize;
        let cap = 4 + (lcg(&mut x) % 40) as usize;
        let seqs = 1 + (lcg(&mut x) % 6) as u32;
        let budget = seqs + (lcg(&mut x) % 120) as u32;
        let router = RouterKind::ALL[(lcg(&mut x) % 3) as usize];
        let mut e = ecfg(seqs, budget);
        e.cost.linear_mut().unwrap().t_kv_token_ns = lcg(&mut x) % 3;
        e.cost.linear_mut().unwrap().t_decode_seq_ns = lcg(&mut x) % 200;
        let n = 5 + lcg(&mut x) % 40;
        let reqs = draw_requests(&mut x, n, Draw { gap_ns: 3000, prefixes: 4, shared: 4, unique: 4, out: 50 }, cap);
        let res = run(FleetConfig::new(pods, cap, router), e, &reqs);
        preempted += res.stats.iter().map(|s| s.preemptions).sum::<u64>();
        for c in &res.done {
            assert!(c.hit_tokens < c.input_tokens, "case {case}: a hit leaves at least one token to compute");
        }
    }
    assert!(preempted > 50, "the cases must preempt: {preempted}");
}

/// Advances fleet `f` event by event (`advance_next`) up to `t_ns`: the largest number of steps
/// one call ran on one pod.
fn longest_advance(f: &mut BatchedFleet<'_>, t_ns: u64, pods: usize, sink: &mut Sink) -> u64 {
    let steps = |f: &BatchedFleet<'_>| (0..pods).map(|p| f.pod_stats(p).unwrap().steps).collect::<Vec<u64>>();
    let mut longest = 0;
    loop {
        let before = steps(f);
        if !f.advance_next(t_ns, sink).unwrap() {
            return longest;
        }
        let after = steps(f);
        longest = longest.max(before.iter().zip(&after).map(|(b, a)| a - b).max().unwrap_or(0));
    }
}

/// [`run_with`] with any router (the shipped presets' buffers too); `events`: the pods advanced
/// event by event (`advance_next`) up to each arrival before it is dispatched. Also returns the
/// largest number of steps one `advance_next` ran on one pod (0 without `events`).
fn run_routed(cfg: FleetConfig, ecfg: BatchedConfig, reqs: &[R], events: bool) -> (Run, u64) {
    let cfg = FleetConfig { engine: EngineConfig::Batched(ecfg), ..cfg };
    let mut owned = common::BatchedRouterOwned::new(&cfg);
    let mut f = owned.fleet(cfg);
    let (sink, pods, longest) = feed(&mut f, cfg.pods, reqs, events);
    assert_eq!(sink.done.len(), reqs.len());
    let stats: Vec<BatchedStats> = (0..cfg.pods).map(|p| *f.pod_stats(p).unwrap()).collect();
    (Run { itl: sink.itl_samples(), done: sink.done, stats, pods }, longest)
}

#[test]
fn decode_runs_through_block_boundaries_are_exact() {
    // Long outputs on small pods, requests mostly alone (the waiting queue often empty, so a
    // decode run goes through the steps where a request takes a block, evicting cached blocks),
    // some under pressure (the run stops before a step whose blocks do not fit: it preempts), a
    // context cost on some cases (steps not all equal), scraped gauges on some (the run stops at
    // every boundary: the gauges publish the pinned blocks), routers that read the pods' KV
    // usage. Fast-forward against step by step (and the per-block pool), each fed arrival by
    // arrival and event by event (`advance_next`), every completion, ITL sample, counter and
    // routing decision; some single advances must have run more than 16 steps (through a block
    // boundary).
    let routers = [
        RouterKind::RoundRobin,
        RouterKind::LeastLoaded,
        RouterKind::PrefixAware,
        RouterKind::LlmDPrecise,
        RouterKind::LlmDLoad,
        RouterKind::GieDefault,
        RouterKind::DynamoKv,
        RouterKind::VllmLoadaware,
    ];
    let mut x = 3405u64;
    let (mut preempted, mut through) = (0, 0);
    for case in 0..400 {
        let pods = 1 + (lcg(&mut x) % 3) as usize;
        let cap = 6 + (lcg(&mut x) % 60) as usize;
        let seqs = 1 + (lcg(&mut x) % 5) as u32;
        let budget = seqs + (lcg(&mut x) % if case % 2 == 0 { 100 } else { 20 }) as u32;
        let router = routers[(lcg(&mut x) % routers.len() as u64) as usize];
        let mut e = ecfg(seqs, budget);
        if case % 3 == 1 {
            e.cost.linear_mut().unwrap().t_kv_token_ns = 1 + lcg(&mut x) % 3;
        }
        if case % 4 == 3 {
            e.metrics_scrape_ns = 500 + lcg(&mut x) % 5000;
        }
        let n = 3 + lcg(&mut x) % 25;
        let gap_ns = if case % 2 == 0 { 400_000 } else { 40_000 };
        let reqs = draw_requests(&mut x, n, Draw { gap_ns, prefixes: 3, shared: 5, unique: 3, out: 400 }, cap);
        let cfg = FleetConfig { alpha: 16.0, ..FleetConfig::new(pods, cap, router) };
        let (want, runs) = fast_paths_are_step_by_step(&format!("case {case} {router:?}"), cfg, e, &reqs);
        through += runs;
        preempted += want.stats.iter().map(|s| s.preemptions).sum::<u64>();
    }
    assert!(preempted > 50, "the cases must preempt: {preempted}");
    assert!(through > 100, "decode runs must go through block boundaries: {through} cases");
}

#[test]
fn the_physics_step_cost_drives_the_engine_and_fast_forward_stays_exact() {
    // One request alone: its first token comes after one prefill step whose time is the physics
    // model's for that chunk; each later token after a decode step over a context one longer.
    let phys = PhysicsProfile::Qwen3_32bH100Tp2.physics().unwrap();
    let mut e = BatchedConfig::physics(PhysicsProfile::Qwen3_32bH100Tp2).unwrap();
    e.max_num_seqs = 8;
    e.max_num_batched_tokens = 256;
    let res = run(one_pod(64), e, &[r(0, &[1, 2, 3], 5, 40)]);
    let mut s = phys.shape();
    s.add_prefill(0, 53).unwrap();
    let prefill = phys.step_ns(&s).unwrap();
    assert_eq!(res.done[0].first_token_ns, prefill);
    let mut t = prefill;
    for c in 53..53 + 39 {
        let mut s = phys.shape();
        s.add_decode(c).unwrap();
        t += phys.step_ns(&s).unwrap();
    }
    assert_eq!(res.done[0].finish_ns, t, "the decode steps are summed exactly as the context grows");
    let distinct = res.itl.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(distinct > 0, "decode steps cost more as their context grows: {:?}", res.itl);

    // Small pods under pressure with the dense and the sliding-window (gpt-oss) profiles: run()
    // compares fast-forward with step by step.
    let mut x = 77u64;
    for profile in [PhysicsProfile::Qwen3_32bH100Tp2, PhysicsProfile::GptOss120bH100Tp1] {
        for case in 0..40 {
            let pods = 1 + (lcg(&mut x) % 3) as usize;
            let cap = 8 + (lcg(&mut x) % 40) as usize;
            let mut e = BatchedConfig::physics(profile).unwrap();
            e.max_num_seqs = 1 + (lcg(&mut x) % 6) as u32;
            e.max_num_batched_tokens = e.max_num_seqs + (lcg(&mut x) % 120) as u32;
            let router = RouterKind::ALL[(lcg(&mut x) % 3) as usize];
            let n = 5 + lcg(&mut x) % 30;
            let reqs =
                draw_requests(&mut x, n, Draw { gap_ns: 50_000_000, prefixes: 4, shared: 4, unique: 4, out: 150 }, cap);
            let res = run(FleetConfig::new(pods, cap, router), e, &reqs);
            assert_eq!(res.done.len(), reqs.len(), "{profile} case {case}");
        }
    }
}

/// A physics configuration with the shared-prefix read factor at `ppm`.
/// Step by step (the oracle) against fast-forward fed arrival by arrival, fast-forward fed event
/// by event, and the per-block pool event by event: every completion, ITL sample, counter and
/// routing decision equal (`what` names the case). Returns the step-by-step run and how many of
/// the three ran a single advance of more than 16 steps (through a block boundary).
fn fast_paths_are_step_by_step(what: &str, cfg: FleetConfig, e: BatchedConfig, reqs: &[R]) -> (Run, u64) {
    let mut slow = e;
    slow.fast_forward = false;
    let mut per_block = e;
    per_block.block_runs = false;
    let (want, _) = run_routed(cfg, slow, reqs, false);
    let mut through = 0;
    for (name, ecfg, events) in [("fast", e, false), ("fast, event by event", e, true), ("per block", per_block, true)]
    {
        let (got, longest) = run_routed(cfg, ecfg, reqs, events);
        assert_eq!(got.done, want.done, "{what} {name}: completions");
        assert_eq!(got.itl, want.itl, "{what} {name}: ITL samples");
        assert_eq!(got.stats, want.stats, "{what} {name}: counters");
        assert_eq!(got.pods, want.pods, "{what} {name}: routing");
        through += u64::from(longest > 16);
    }
    (want, through)
}

fn shared_physics(profile: PhysicsProfile, ppm: u32) -> BatchedConfig {
    let mut e = BatchedConfig::physics(profile).unwrap();
    let p = profile.physics().unwrap();
    let cal = Calibration { shared_kv_read_ppm: ppm, ..*p.calibration() };
    e.cost = StepCost::Physics(p.with_calibration(cal).unwrap());
    e
}

#[test]
fn two_requests_sharing_a_prefix_count_its_blocks_once_per_extra_reader() {
    // One pod. A (3 shared blocks + 5 tokens, 40 out) arrives at 0; B (the same 3 blocks + 7
    // tokens, 40 out) at 300 ms, while A decodes: B hits A's 3 keyed blocks (48 tokens), so
    // while both run the pool holds 3 blocks with 2 references: decode_shared = 3 x 16 = 48
    // tokens, charged at f = 0.25. The whole timeline by hand from the profile's step cost.
    let profile = PhysicsProfile::Qwen3_32bH100Tp2;
    let f = 250_000;
    let e = shared_physics(profile, f);
    let phys = e.cost.physics().copied().unwrap();
    let mut ecfg = e;
    ecfg.max_num_seqs = 8;
    ecfg.max_num_batched_tokens = 256;
    let b_at = 300_000_000;
    let reqs = [r(0, &[1, 2, 3], 5, 40), r(b_at, &[1, 2, 3], 7, 40)];
    let res = run(one_pod(64), ecfg, &reqs);
    let step = |decodes: &[u64], prefill: Option<(u64, u64)>, shared: u64| {
        let mut s = phys.shape();
        if let Some((c, t)) = prefill {
            s.add_prefill(c, t).unwrap();
        }
        for &c in decodes {
            s.add_decode(c).unwrap();
        }
        s.decode_shared = shared;
        phys.step_ns(&s).unwrap()
    };
    // A alone: its prefill, then decodes until a step starts at or after B's arrival
    let mut t = step(&[], Some((0, 53)), 0);
    let a_first = t;
    let (mut ca, mut ga) = (53u64, 1u64);
    while t < b_at {
        t += step(&[ca], None, 0);
        ca += 1;
        ga += 1;
    }
    // B's 7-token chunk over its 48 hit tokens beside A's decode: A's 48 tokens are also held
    // by B (its prefill reads them in the same step)
    t += step(&[ca], Some((48, 7)), 48);
    let b_first = t;
    ca += 1;
    ga += 1;
    let (mut cb, mut gb) = (55u64, 1u64);
    while ga < 40 {
        t += step(&[ca, cb], None, 48);
        ca += 1;
        ga += 1;
        cb += 1;
        gb += 1;
    }
    let a_done = t;
    while gb < 40 {
        // A released its references: B holds the 3 blocks alone
        t += step(&[cb], None, 0);
        cb += 1;
        gb += 1;
    }
    let a = res.done.iter().find(|c| c.arrival_ns == 0).unwrap();
    let b = res.done.iter().find(|c| c.arrival_ns == b_at).unwrap();
    assert_eq!((a.first_token_ns, b.first_token_ns), (a_first, b_first));
    assert_eq!(b.hit_tokens, 48, "B hits A's three blocks");
    assert_eq!((a.finish_ns, b.finish_ns), (a_done, t), "decode_shared = 48 tokens while both run");
    // and the count matters: with f = 1 (off) both finish later
    let off = run(one_pod(64), BatchedConfig { cost: StepCost::Physics(profile.physics().unwrap()), ..ecfg }, &reqs);
    let b_off = off.done.iter().find(|c| c.arrival_ns == b_at).unwrap();
    assert!(b_off.finish_ns > b.finish_ns, "{} vs {}", b_off.finish_ns, b.finish_ns);
}

#[test]
fn decode_runs_with_shared_kv_reads_are_exact() {
    // decode_runs_through_block_boundaries_are_exact with the physics step cost and shared-prefix
    // reads priced below a full read (f < 1): the shared count must be the same at every step
    // of a run (fast-forward, through block boundaries) as step by step and as the per-block
    // pool gives it. Requests share prefixes (3 prefixes x 5 blocks), so decode_shared > 0.
    let mut x = 2611u64;
    let (mut through, mut moved) = (0, 0);
    for case in 0..160 {
        let profile = if case % 4 == 3 { PhysicsProfile::GptOss120bH100Tp1 } else { PhysicsProfile::Qwen3_32bH100Tp2 };
        let ppm = [0, 250_000, 500_000, 999_999][(lcg(&mut x) % 4) as usize];
        let pods = 1 + (lcg(&mut x) % 2) as usize;
        let cap = 10 + (lcg(&mut x) % 60) as usize;
        let seqs = 1 + (lcg(&mut x) % 6) as u32;
        let budget = seqs + (lcg(&mut x) % if case % 2 == 0 { 100 } else { 20 }) as u32;
        let router =
            [RouterKind::RoundRobin, RouterKind::PrefixAware, RouterKind::LlmDPrecise][(lcg(&mut x) % 3) as usize];
        let mut e = shared_physics(profile, ppm);
        e.max_num_seqs = seqs;
        e.max_num_batched_tokens = budget;
        let n = 3 + lcg(&mut x) % 25;
        let gap_ns = if case % 2 == 0 { 40_000_000 } else { 4_000_000 };
        let reqs = draw_requests(&mut x, n, Draw { gap_ns, prefixes: 3, shared: 5, unique: 3, out: 300 }, cap);
        let cfg = FleetConfig { alpha: 16.0, ..FleetConfig::new(pods, cap, router) };
        let (want, runs) = fast_paths_are_step_by_step(&format!("case {case} {router:?}"), cfg, e, &reqs);
        through += runs;
        // not vacuous: the factor changes the run against f = 1
        let mut off = e;
        off.fast_forward = false;
        off.cost = StepCost::Physics(profile.physics().unwrap());
        let (base, _) = run_routed(cfg, off, &reqs, false);
        moved += u64::from(base.done != want.done);
    }
    assert!(through > 50, "decode runs must go through block boundaries: {through} cases");
    assert!(moved > 80, "the shared reads must change most runs: {moved} of 160");
}

/// A broken invariant inside the engine is an error in every build (not an index out of bounds
/// later, not a wrong result), and the fleet refuses every call after it.
#[test]
fn a_broken_invariant_is_an_error_and_poisons_the_fleet() {
    let cfg = FleetConfig::batched(1, 64, RouterKind::RoundRobin, BatchedConfig::new(Profile::Qwen3_32bH100x2));
    let l = BatchedLayout::new(&cfg, 16, 256).unwrap();
    let mut blocks = vec![KvBlock::default(); l.pods * l.blocks_per_pod];
    let mut tables = vec![0u32; l.pods * l.table_per_pod];
    let mut rq = vec![ReqSlot::default(); l.pods * l.requests_per_pod];
    let mut waiting = vec![0u32; l.pods * l.requests_per_pod];
    let mut running = vec![0u32; l.pods * l.running_per_pod];
    let mut ks = vec![0u64; l.pods * l.keys_per_pod];
    let mut cpu_slots = vec![Slot::default(); l.cpu_slots_total];
    let mut cpu_tables = vec![0u32; l.cpu_tables_total];
    let bufs = BatchedBuffers {
        blocks: &mut blocks,
        tables: &mut tables,
        requests: &mut rq,
        waiting: &mut waiting,
        running: &mut running,
        keys: &mut ks,
        key_blocks: &mut [],
        cpu_slots: &mut cpu_slots,
        cpu_tables: &mut cpu_tables,
        pd: Default::default(),
        scale: &mut [],
    };
    let mut f = BatchedFleet::new(cfg, bufs).unwrap();
    let mut sink = Sink::default();
    let k = keys_of(&[1, 2, 3]);
    let req = |at_ns| Request { arrival_ns: at_ns, input_tokens: 48, output_tokens: 50, keys: &k };
    f.dispatch(&req(0), &mut sink).unwrap();
    // one step runs: the request is admitted and holds its blocks
    assert!(f.advance_next(u64::MAX, &mut sink).unwrap());
    f.pods_mut()[0].break_block_count();
    assert_eq!(
        f.advance_next(u64::MAX, &mut sink),
        Err(Error::Invariant { what: Invariant::PinnedPlusFree }),
        "the next step finds the count broken"
    );
    assert_eq!(f.dispatch(&req(1_000_000_000), &mut sink).map(|_| ()), Err(Error::Poisoned));
    assert_eq!(f.finish(&mut sink), Err(Error::Poisoned));
}

/// A fleet of one pod (capacity `cap`, `ecfg`) fed `reqs` with `aborts` (request, time) between
/// them (an abort at t after every request arriving before t): completions, stats, and what
/// each abort returned.
fn run_aborting(
    cap: usize,
    ecfg: BatchedConfig,
    reqs: &[R],
    aborts: &[(u64, u64)],
) -> (Vec<Completion>, BatchedStats, Vec<bool>) {
    let cfg = FleetConfig { engine: EngineConfig::Batched(ecfg), ..one_pod(cap) };
    let l = BatchedLayout::new(&cfg, 64, 1024).unwrap();
    let mut blocks = vec![KvBlock::default(); l.pods * l.blocks_per_pod];
    let mut tables = vec![0u32; l.pods * l.table_per_pod];
    let mut rq = vec![ReqSlot::default(); l.pods * l.requests_per_pod];
    let mut waiting = vec![0u32; l.pods * l.requests_per_pod];
    let mut running = vec![0u32; l.pods * l.running_per_pod];
    let mut ks = vec![0u64; l.pods * l.keys_per_pod];
    let mut cpu_slots = vec![Slot::default(); l.cpu_slots_total];
    let mut cpu_tables = vec![0u32; l.cpu_tables_total];
    let bufs = BatchedBuffers {
        blocks: &mut blocks,
        tables: &mut tables,
        requests: &mut rq,
        waiting: &mut waiting,
        running: &mut running,
        keys: &mut ks,
        key_blocks: &mut [],
        cpu_slots: &mut cpu_slots,
        cpu_tables: &mut cpu_tables,
        pd: Default::default(),
        scale: &mut [],
    };
    let mut f = BatchedFleet::new(cfg, bufs).unwrap();
    let mut sink = Sink::default();
    let mut aborted = Vec::new();
    let mut ab = aborts.iter().peekable();
    for q in reqs {
        while let Some(&&(id, t)) = ab.peek() {
            if t > q.at_ns {
                break;
            }
            aborted.push(f.abort(id, t, &mut sink).unwrap());
            ab.next();
        }
        let k = keys_of(&q.blocks);
        let req = Request {
            arrival_ns: q.at_ns,
            input_tokens: k.len() as u64 * 16 + q.extra,
            output_tokens: q.out,
            keys: &k,
        };
        f.dispatch(&req, &mut sink).unwrap();
    }
    for &(id, t) in ab {
        aborted.push(f.abort(id, t, &mut sink).unwrap());
    }
    f.finish(&mut sink).unwrap();
    sink.done.sort_by_key(|c| c.request);
    (sink.done, *f.pod_stats(0).unwrap(), aborted)
}

#[test]
fn an_aborted_request_leaves_frees_its_blocks_keeps_its_cache_and_never_completes() {
    // One running slot. A (4 blocks, 1,000 tokens) runs; B waits behind it; C waits too.
    // B is aborted while waiting (5 us), A while running (10 us: during its step
    // [9,340, 10,440) ns, so it leaves at that step's end). C is admitted at 10,440 ns.
    // D (A's 4 blocks + 1) arrives later and hits A's 4 cached prompt blocks.
    let reqs =
        [r(0, &[1, 2, 3, 4], 0, 1_000), r(1, &[5, 6], 0, 1), r(2, &[7], 0, 1), r(100_000, &[1, 2, 3, 4, 9], 0, 1)];
    let aborts = [(1, 5_000), (0, 10_000), (2, 100_000), (7, 100_000)];
    for ff in [false, true] {
        let mut e = ecfg(1, 8192);
        e.fast_forward = ff;
        let (done, stats, aborted) = run_aborting(128, e, &reqs, &aborts);
        // C has finished by 100 us: aborting it, or a request never dispatched, does nothing
        assert_eq!(aborted, vec![true, true, false, false]);
        assert_eq!(done.iter().map(|c| c.request).collect::<Vec<_>>(), vec![2, 3], "A and B never complete");
        assert_eq!(done[0].first_token_ns, 10_440 + O_NS + 16 * P_NS, "C runs from the step boundary after the abort");
        assert_eq!(done[1].hit_tokens, 64, "A's prompt blocks stayed cached");
        assert_eq!(stats.aborted, 2);
        assert_eq!(stats.finished, 2);
        // the hit rate's population: A, C and D were admitted (64 + 16 + 80 tokens), B never
        assert_eq!((stats.input_tokens, stats.admitted_input_tokens), (192, 160));
        // A produced 9 tokens (its prefill step and 8 decode steps), then no more
        assert_eq!(stats.output_tokens, 9 + 1 + 1);
    }
}

#[test]
fn an_abort_during_a_load_leaves_an_idle_pod_that_counts_nothing_while_idle() {
    // One pod of 8 blocks with a CPU tier of 64 on a slow link (1 GB/s: a 3-block load takes
    // 1,000 + 3 x 16 x 131,072 = 6,292,456 ns). A (k0..k3) runs and is stored in the tier; B
    // (7 blocks) evicts k1..k3 from the GPU (k0 stays); C (k0..k4) hits k0 on the GPU and k1..k3
    // in the tier: it is admitted loading at 20 us and the pod waits for its load (4 blocks
    // pinned). C is aborted at 1 ms, before the load ends: the pod is idle. D (2 fresh blocks)
    // arrives at 20 ms or 40 ms and must see a fresh idle pod: it starts at its arrival, and the
    // idle time between the abort and D counts no pinned block (a stale wait would count C's 4
    // blocks until D's step).
    for ff in [false, true] {
        let mut pinned = Vec::new();
        for d_at in [20_000_000u64, 40_000_000] {
            let mut e = ecfg(4, 8192);
            e.fast_forward = ff;
            e.offload.cpu_capacity = 64;
            e.offload.pcie_bytes_per_s = 1_000_000_000;
            e.offload.pcie_latency_ns = 1_000;
            let reqs = [
                r(0, &[1, 2, 3, 4], 0, 1),
                r(10_000, &[11, 12, 13, 14, 15, 16, 17], 0, 1),
                r(20_000, &[1, 2, 3, 4, 5], 0, 1),
                r(d_at, &[21, 22], 0, 1),
            ];
            let (done, stats, aborted) = run_aborting(8, e, &reqs, &[(2, 1_000_000)]);
            assert_eq!(aborted, vec![true]);
            assert_eq!(done.iter().map(|c| c.request).collect::<Vec<_>>(), vec![0, 1, 3]);
            assert_eq!((stats.offload_loads, stats.offload_load_blocks, stats.aborted), (1, 3, 1));
            assert_eq!(done[2].first_token_ns, d_at + O_NS + 32 * P_NS, "D runs at once on an idle pod");
            // A 4 x 1,640, B 7 x 2,120, C's wait 4 x (1 ms - 20 us), D 2 x 1,320
            assert_eq!(stats.kv_pinned_block_ns, 4 * 1_640 + 7 * 2_120 + 4 * 980_000 + 2 * 1_320);
            pinned.push(stats.kv_pinned_block_ns);
        }
        assert_eq!(pinned[0], pinned[1], "idle time counts nothing");
    }
}

/// The WVA autoscaler's per-pod state is a caller buffer: one entry per pod when the batched
/// fleet autoscales (its layout says so), none otherwise; a wrong length is a `BufferSize` error
/// naming it, and an autoscaled fleet over the right buffer never routes past its initial pods
/// (idle, the WVA rule scales in at the first arrival: pod 1 drains, pod 0 takes the rest).
#[test]
fn wva_state_is_a_caller_buffer_of_one_entry_per_pod() {
    let policy = ScalePolicy {
        min_pods: 1,
        initial_pods: 2,
        interval_ns: 1_000_000_000,
        up_milli: 4_000,
        down_milli: 500,
        startup_ns: 5_000_000_000,
    };
    let mut e = ecfg(16, 8192);
    e.scale = Some(policy);
    let cfg = FleetConfig { engine: EngineConfig::Batched(e), ..FleetConfig::new(3, 64, RouterKind::RoundRobin) };
    let l = BatchedLayout::new(&cfg, 16, 1024).unwrap();
    assert_eq!(l.scale_len(), 3, "one entry per pod");
    let plain = FleetConfig { engine: EngineConfig::Batched(ecfg(16, 8192)), ..cfg };
    assert_eq!(BatchedLayout::new(&plain, 16, 1024).unwrap().scale_len(), 0, "none without autoscaling");
    let build = |cfg: FleetConfig, scale_len: usize| -> Result<(Vec<u32>, usize), Error> {
        let mut owned = Owned::new(&BatchedLayout::new(&cfg, 16, 1024).unwrap());
        // a buffer full of stale state: the fleet resets it
        let mut scale = vec![WvaPod::default(); scale_len];
        let mut f = BatchedFleet::new(cfg, owned.buffers(&mut scale))?;
        let mut sink = Sink::default();
        let mut pods = Vec::new();
        for i in 0..4u64 {
            let k = keys_of(&[100 + i]);
            let req = Request { arrival_ns: i * 1_000, input_tokens: 16, output_tokens: 2, keys: &k };
            pods.push(f.dispatch(&req, &mut sink)?.pod);
        }
        f.finish(&mut sink)?;
        Ok((pods, f.active_pods()))
    };
    assert_eq!(build(cfg, 3).unwrap(), (vec![0, 0, 0, 0], 1), "scaled in at once: pod 0 only");
    assert_eq!(build(plain, 0).unwrap(), (vec![0, 1, 2, 0], 3));
    for (c, len, expected) in [(cfg, 0, 3), (cfg, 2, 3), (cfg, 4, 3), (plain, 3, 0)] {
        match build(c, len) {
            Err(Error::BufferSize { buffer, expected: e, got }) => {
                assert_eq!((buffer, e, got), (Buffer::ScalePods, expected, len));
                assert_eq!(buffer.name(), "autoscaler pods");
            }
            other => panic!("a scale buffer of {len} for {expected} pods: {other:?}"),
        }
    }
}
