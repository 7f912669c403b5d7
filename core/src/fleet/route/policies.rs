//! The routers that are not pipelines (docs/MODEL.md, "Shipped routers"): Dynamo's KV router,
//! SGLang's cache_aware policy and the vLLM load-aware formula, each a pick from the matches and
//! the load signals.

use super::rng::{SplitMix64, pick_uniform};
use super::scorers::{first_max, first_min, max_set, min_max};
use super::spec::RouterParams;
use crate::fleet::base::fixmath::exp2_neg_q32;
use crate::fleet::base::limits::BLOCK_TOKENS;
use crate::fleet::base::load::PodLoad;
use crate::fleet::base::mask::PodSet;

/// Dynamo's logit per candidate: w x prefill blocks + decode blocks (lower is better).
pub(super) fn dynamo_logits<const W: usize, const P: usize>(
    cand: PodSet<W>,
    total: u32,
    overlap: &[u32; P],
    loads: &[PodLoad; P],
    weight: f64,
    out: &mut [f64; P],
) {
    let b = BLOCK_TOKENS as u64;
    cand.for_each(|p| {
        let new_tokens = (total - overlap[p].min(total)) as u64 * b;
        let prefill_tokens = loads[p].pending_prefill_tokens.saturating_add(new_tokens);
        let new_blocks = (total - overlap[p].min(total)) as u64;
        let decode_blocks = loads[p].kv_used_blocks as u64 + new_blocks;
        out[p] = weight * (prefill_tokens as f64 / b as f64) + decode_blocks as f64;
    });
}

/// log2(e) in Q32.32.
const LOG2_E_Q32: f64 = core::f64::consts::LOG2_E * 4_294_967_296.0;

/// Dynamo's selection: argmin (exact ties uniform), or at temperature T > 0 a draw with
/// p_i ~ exp(-((l_i - l_min) / (l_max - l_min)) / T) (all equal: uniform).
pub(super) fn dynamo_pick<const W: usize, const P: usize>(
    rng: &mut SplitMix64,
    cand: PodSet<W>,
    logits: &[f64; P],
    temperature: f64,
) -> usize {
    let (lo, hi) = min_max(cand, |p| logits[p]);
    if temperature <= 0.0 || hi == lo {
        let mins = cand.filter(|p| logits[p] == lo);
        return pick_uniform(rng, mins);
    }
    // Integer weights 2^(-x log2 e) in Q0.64 (fixmath): the same bits on every target.
    // Q0.56 at up to 64 pods (64 weights sum below 2^62, so the draw below fits in u128); one
    // more bit dropped per doubling of the pods above (1,024 weights of Q0.52 also sum below 2^62).
    let drop = 8 + P.max(64).ilog2() - 6;
    let mut w = [0u64; P];
    let mut sum: u128 = 0;
    cand.for_each(|p| {
        let x = (logits[p] - lo) / (hi - lo) / temperature;
        let q = (x * LOG2_E_Q32).min((64u64 << 32) as f64) as u64;
        w[p] = exp2_neg_q32(q) >> drop;
        sum += w[p] as u128;
    });
    let r = (rng.next_u64() as u128 * sum) >> 64;
    let mut acc: u128 = 0;
    let mut chosen = cand.lowest();
    let mut done = false;
    cand.for_each(|p| {
        if done {
            return;
        }
        acc += w[p] as u128;
        if r < acc {
            chosen = p;
            done = true;
        }
    });
    chosen
}

/// SGLang's cache_aware choice (see docs/MODEL.md).
pub(super) fn sglang_pick<const W: usize, const P: usize>(
    rng: &mut SplitMix64,
    cand: PodSet<W>,
    total: u32,
    m: &[u32; P],
    loads: &[PodLoad; P],
    prm: &RouterParams,
    held: impl Fn(usize) -> usize,
) -> usize {
    let load = |p: usize| loads[p].waiting as u64 + loads[p].running as u64;
    let (lo, hi) = min_max(cand, load);
    let imbalanced = hi - lo > prm.balance_abs_threshold as u64 && hi as f64 > lo as f64 * prm.balance_rel_threshold;
    if imbalanced {
        return first_min(cand, load);
    }
    let best = first_max(cand, |p| m[p]);
    let rate = if total == 0 { 0.0 } else { m[best] as f64 / total as f64 };
    if rate > prm.cache_threshold {
        return best;
    }
    // The smallest tenant; SGLang takes the first found in a hash map (arbitrary): a seeded
    // uniform pick among the equal ones (equal when every LRU is full).
    let (fewest, _) = min_max(cand, &held);
    pick_uniform(rng, cand.filter(|p| held(p) == fewest))
}

/// The vLLM load-aware formula: match / total - beta x load / max load.
pub(super) fn vllm_pick<const W: usize, const P: usize>(
    cand: PodSet<W>,
    total: u32,
    m: &[u32; P],
    loads: &[PodLoad; P],
    beta: f64,
) -> usize {
    let load = |p: usize| loads[p].waiting as u64 + loads[p].running as u64;
    let (_, hi) = min_max(cand, load);
    let mut scores = [0.0f64; P];
    cand.for_each(|p| {
        let frac = if total == 0 { 0.0 } else { m[p] as f64 / total as f64 };
        let rel = if hi == 0 { 0.0 } else { load(p) as f64 / hi as f64 };
        scores[p] = frac - beta * rel;
    });
    max_set(cand, &scores).lowest()
}
