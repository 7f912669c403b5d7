//! One step's time and a pod's KV capacity from model + hardware + TP + calibration.
//!
//! A step (one forward pass of the scheduled batch, docs/MODEL.md "The physics step cost") is
//! evaluated in three phases, each a roofline (the larger of its compute and its memory time),
//! plus the TP all-reduces and the overheads:
//!
//! ```text
//! linear    = max(GEMM FLOPs / (peak x compute or moe), streamed weight bytes / (HBM x memory))
//! prefill   = max(attention FLOPs / (bf16 peak x attention), KV bytes / (HBM x memory))
//! decode    = the same over the decoding requests, the KV bytes less (1 - shared_kv_read) x
//!             the shared blocks' extra reads (BatchShape::decode_shared, full layers)
//! allreduce = 2 L x (2 (tp - 1) / tp x T x hidden x 2 bytes / (link x link_ppm) + allreduce_ns)
//! overhead  = step_ns + R x request_ns + L x layer_ns
//! step      = linear + prefill + decode + allreduce + overhead
//! ```
//!
//! Every term is `amount x 10^15 / (rate x ppm)` ns in u128, rounded half up on its own
//! ([`super::at_rate_ns`]); the maxima and the sum are exact.

use super::shape::BatchShape;
use super::{
    Calibration, CostField, CostQuantity, Dtype, Error, Hardware, KV_BLOCK_TOKENS, MAX_TP, ModelDesc, PPM, at_rate_ns,
    check,
};
use crate::fleet::base::limits::quoting;

/// The parts of one step's time, ns ([`Physics::step_terms`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StepTerms {
    /// GEMM compute time (dense matrices, routed experts, logits).
    pub gemm_ns: u64,
    /// Time to stream the weights the step reads.
    pub weights_ns: u64,
    /// `max(gemm_ns, weights_ns)`.
    pub linear_ns: u64,
    /// Prefill attention: `max(compute, KV bytes)`.
    pub prefill_attention_ns: u64,
    /// Decode attention: `max(compute, KV bytes)`.
    pub decode_attention_ns: u64,
    /// TP all-reduces (0 at tp = 1).
    pub allreduce_ns: u64,
    /// Per-step, per-request and per-layer overheads.
    pub overhead_ns: u64,
    /// The step: linear + prefill + decode + all-reduce + overhead.
    pub total_ns: u64,
}

/// Quantities of the model fixed at construction (whole model unless "per GPU").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
struct Fixed {
    /// 2 x matrix parameters outside the routed experts, per token.
    dense_flops_per_token: u128,
    /// 2 x routed-expert parameters, per token.
    routed_flops_per_token: u128,
    /// 2 x vocab x hidden, per request (vLLM computes logits for every scheduled request).
    logits_flops_per_request: u128,
    /// `tp x` the GEMM peak of the dense matrices' dtype.
    dense_rate: u128,
    /// `tp x` the GEMM peak of the routed experts' dtype.
    routed_rate: u128,
    /// `tp x` the bf16 peak (attention, logits).
    bf16_rate: u128,
    /// Weight bytes every step streams besides the routed experts.
    streamed_bytes: u128,
    /// Bytes of one routed expert.
    expert_bytes: u128,
    /// 2 x (qk + v) x heads: attention FLOPs per query-key pair and layer.
    pair_flops: u128,
    /// KV bytes of one token in one layer, per GPU.
    kv_bytes: u128,
    /// Full-attention and sliding-window layers.
    full_layers: u128,
    sliding_layers: u128,
    /// Activation bytes of one token (hidden x 2) x 2 (tp - 1): ring all-reduce bytes per GPU,
    /// before dividing by tp.
    allreduce_bytes_per_token: u128,
}

/// A physics profile: a model on `tp` GPUs of one kind, with its calibration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Physics {
    model: ModelDesc,
    hw: Hardware,
    tp: u32,
    cal: Calibration,
    fixed: Fixed,
}

/// The GEMM peak for matrices stored as `dtype`: fp8 matrices run fp8 GEMMs where the GPU has
/// them (w8a8, as vLLM's fp8 checkpoints), MXFP4 runs fp4 where the GPU has it, everything else
/// (and fp8/MXFP4 without hardware support: weight-only kernels that dequantize) runs at bf16.
const fn gemm_peak(hw: &Hardware, dtype: Dtype) -> u64 {
    match dtype {
        Dtype::Fp8 if hw.flops_fp8 > 0 => hw.flops_fp8,
        Dtype::Mxfp4 if hw.flops_fp4 > 0 => hw.flops_fp4,
        _ => hw.flops_bf16,
    }
}

/// The sum, or an overflow of the step time.
fn sum(terms: &[u128]) -> Result<u128, Error> {
    terms.iter().try_fold(0u128, |a, &b| a.checked_add(b)).ok_or(Error::Overflow { what: CostQuantity::StepTime })
}

fn to_u64(v: u128) -> Result<u64, Error> {
    u64::try_from(v).map_err(|_| Error::Overflow { what: CostQuantity::StepTime })
}

impl Physics {
    /// Checks the parts and fixes the model's per-token quantities.
    pub fn new(model: ModelDesc, hw: Hardware, tp: u32, cal: Calibration) -> Result<Self, Error> {
        model.validate()?;
        hw.validate()?;
        cal.validate()?;
        check(tp as u64, 1, MAX_TP as u64, CostField::Tp, quoting!("between 1 and 64", MAX_TP))?;
        if !model.heads.is_multiple_of(tp) {
            return Err(Error::Invalid { field: CostField::Tp, expected: "a divisor of heads (vLLM shards heads)" });
        }
        if model.mla.is_none() && !model.kv_heads.is_multiple_of(tp) && !tp.is_multiple_of(model.kv_heads) {
            return Err(Error::Invalid {
                field: CostField::Tp,
                expected: "a divisor or a multiple of kv_heads (vLLM shards or replicates KV heads)",
            });
        }
        let tpw = tp as u128;
        let (qk, v) = model.attention_dims();
        let expert_dtype = match model.moe {
            Some(m) => m.expert_dtype,
            None => model.weight_dtype,
        };
        let sliding = model.sliding_layers() as u128;
        let fixed = Fixed {
            dense_flops_per_token: 2 * model.dense_active_params(),
            routed_flops_per_token: 2 * model.routed_active_params(),
            logits_flops_per_request: 2 * model.vocab as u128 * model.hidden as u128,
            dense_rate: tpw * gemm_peak(&hw, model.weight_dtype) as u128,
            routed_rate: tpw * gemm_peak(&hw, expert_dtype) as u128,
            bf16_rate: tpw * hw.flops_bf16 as u128,
            streamed_bytes: model.streamed_bytes_without_experts(),
            expert_bytes: model.expert_bytes(),
            pair_flops: 2 * (qk + v) * model.heads as u128,
            kv_bytes: model.kv_bytes_per_token_layer(tp),
            full_layers: model.layers as u128 - sliding,
            sliding_layers: sliding,
            allreduce_bytes_per_token: 2 * (tpw - 1) * model.hidden as u128 * 2,
        };
        Ok(Physics { model, hw, tp, cal, fixed })
    }

    /// The model.
    pub const fn model(&self) -> &ModelDesc {
        &self.model
    }

    /// The GPU.
    pub const fn hardware(&self) -> &Hardware {
        &self.hw
    }

    /// The tensor-parallel size.
    pub const fn tp(&self) -> u32 {
        self.tp
    }

    /// The calibration.
    pub const fn calibration(&self) -> &Calibration {
        &self.cal
    }

    /// The same model, GPU and TP with another calibration.
    pub fn with_calibration(&self, cal: Calibration) -> Result<Self, Error> {
        cal.validate()?;
        Ok(Physics { cal, ..*self })
    }

    /// Whether a decode step prices shared KV blocks' extra reads below a full read
    /// ([`Calibration::shared_kv_read_ppm`] below 1,000,000): the engine counts them then.
    pub const fn shares_kv_reads(&self) -> bool {
        self.cal.shared_kv_read_ppm < PPM
    }

    /// An empty batch for this model ([`BatchShape::new`] with its sliding window).
    pub const fn shape(&self) -> BatchShape {
        BatchShape::new(self.model.window())
    }

    /// The step's time, ns.
    pub fn step_ns(&self, s: &BatchShape) -> Result<u64, Error> {
        Ok(self.step_terms(s)?.total_ns)
    }

    /// The step's time and its parts, ns.
    pub fn step_terms(&self, s: &BatchShape) -> Result<StepTerms, Error> {
        let (f, c) = (&self.fixed, &self.cal);
        let over = Error::Overflow { what: CostQuantity::StepTime };
        let mul = |a: u128, b: u128| a.checked_mul(b).ok_or(over);
        let t = s.tokens() as u128;
        let r = s.requests() as u128;
        let (hbm, hbm_tp) = (self.hw.hbm_bytes_per_s as u128, self.tp as u128 * self.hw.hbm_bytes_per_s as u128);

        // Linear layers: every new token through every matrix it uses; the weights read once.
        let gemm = sum(&[
            at_rate_ns(mul(f.dense_flops_per_token, t)?, f.dense_rate, c.compute_ppm)?,
            at_rate_ns(mul(f.routed_flops_per_token, t)?, f.routed_rate, c.moe_ppm)?,
            at_rate_ns(mul(f.logits_flops_per_request, r)?, f.bf16_rate, c.compute_ppm)?,
        ])?;
        let experts_read = match self.model.moe {
            // every expert some token of the step routes to, at most all: min(E, k T) per layer
            Some(m) => {
                mul(self.model.moe_layers() as u128 * (m.experts as u128).min(m.active as u128 * t), f.expert_bytes)?
            }
            None => 0,
        };
        let weights = at_rate_ns(sum(&[f.streamed_bytes, experts_read])?, hbm_tp, c.memory_ppm)?;

        // Attention: FLOPs of the query-key pairs; KV bytes read (cached tokens) and written (new).
        let (fl, sl) = (f.full_layers, f.sliding_layers);
        let kv_ppm = if c.kv_memory_ppm == 0 { c.memory_ppm } else { c.kv_memory_ppm };
        // `unread`: KV bytes of the full-attention layers the step does not read from HBM
        let attention = |pairs: u128, pairs_w: u128, kv: u128, kv_w: u128, unread: u128| -> Result<u128, Error> {
            let flops = mul(f.pair_flops, sum(&[mul(fl, pairs)?, mul(sl, pairs_w)?])?)?;
            let bytes = mul(f.kv_bytes, sum(&[mul(fl, kv)?, mul(sl, kv_w)?])?)?;
            Ok(at_rate_ns(flops, f.bf16_rate, c.attention_ppm)?.max(at_rate_ns(bytes - unread, hbm, kv_ppm)?))
        };
        let (pt, d) = (s.prefill_tokens as u128, s.decode_requests as u128);
        let prefill = attention(
            s.prefill_pairs as u128,
            s.prefill_pairs_window as u128,
            s.prefill_cached as u128 + pt,
            s.prefill_cached_window as u128 + pt,
            0,
        )?;
        // Shared-prefix reads: every holder of a shared block after the first reads it at
        // shared_kv_read_ppm of a full read, in the full-attention layers (FLOPs unchanged)
        let shared = s.decode_shared.min(s.decode_cached) as u128;
        let unread = mul(mul(f.kv_bytes, mul(fl, shared)?)?, (PPM - c.shared_kv_read_ppm.min(PPM)) as u128)?;
        let unread = (unread + PPM as u128 / 2) / PPM as u128;
        let decode = attention(
            s.decode_cached as u128 + d,
            s.decode_pairs_window as u128,
            s.decode_cached as u128 + d,
            s.decode_cached_window as u128 + d,
            unread,
        )?;

        // Two all-reduces per layer (after attention, after the MLP or MoE block) under TP.
        let allreduce = if self.tp > 1 && t > 0 {
            let link = self.tp as u128 * self.hw.link_bytes_per_s as u128;
            let one =
                sum(&[at_rate_ns(mul(f.allreduce_bytes_per_token, t)?, link, c.link_ppm)?, c.allreduce_ns as u128])?;
            mul(2 * self.model.layers as u128, one)?
        } else {
            0
        };
        let overhead =
            sum(&[c.step_ns as u128, mul(r, c.request_ns as u128)?, self.model.layers as u128 * c.layer_ns as u128])?;
        let linear = gemm.max(weights);
        let total = sum(&[linear, prefill, decode, allreduce, overhead])?;
        Ok(StepTerms {
            gemm_ns: to_u64(gemm)?,
            weights_ns: to_u64(weights)?,
            linear_ns: to_u64(linear)?,
            prefill_attention_ns: to_u64(prefill)?,
            decode_attention_ns: to_u64(decode)?,
            allreduce_ns: to_u64(allreduce)?,
            overhead_ns: to_u64(overhead)?,
            total_ns: to_u64(total)?,
        })
    }

    /// Weight bytes on each GPU: all weights / tp, rounded up.
    pub const fn weight_bytes_per_gpu(&self) -> u64 {
        // bounded by MAX_PARAMS x 2 bytes < 2^48
        self.model.weight_bytes().div_ceil(self.tp as u128) as u64
    }

    /// KV bytes of one token on one GPU, all layers.
    pub const fn kv_bytes_per_token_gpu(&self) -> u64 {
        (self.fixed.kv_bytes * self.model.layers as u128) as u64
    }

    /// vLLM's `(group_size, groups)` of the KV pool (`kv_cache_utils.py`,
    /// `_get_kv_cache_groups_uniform_page_size`): one group of all layers when every layer attends
    /// alike; with sliding and full layers, groups of `group_size` layers (the smaller count, or
    /// the larger when it is less than 1.25 x the smaller), each kind padded to whole groups.
    pub const fn kv_groups(&self) -> (u64, u64) {
        let (full, sliding) = (self.fixed.full_layers as u64, self.fixed.sliding_layers as u64);
        if sliding == 0 || full == 0 {
            return (self.model.layers as u64, 1);
        }
        let (lo, hi) = if full < sliding { (full, sliding) } else { (sliding, full) };
        let size = if hi * 4 < lo * 5 { hi } else { lo };
        (size, full.div_ceil(size) + sliding.div_ceil(size))
    }

    /// A pod's KV capacity in 16-token blocks, derived as vLLM does (`gpu_worker.py`
    /// `determine_available_memory`, `kv_cache_utils.py` `get_num_blocks` and
    /// `_report_kv_cache_config`): per GPU, `available = ceil(memory x utilization) - weights / tp -
    /// reserve`; `blocks = available / (16 x KV bytes per token and layer) / group_size`; the
    /// capacity vLLM logs (and the engine's pool holds) is `blocks / groups`. The same on every TP
    /// rank, so the pod's capacity is one rank's.
    pub fn kv_capacity_blocks(&self) -> Result<u64, Error> {
        let requested =
            (self.hw.memory_bytes as u128 * self.cal.gpu_memory_utilization_ppm as u128).div_ceil(PPM as u128);
        let need = self.weight_bytes_per_gpu() as u128 + self.cal.reserve_bytes as u128;
        if need >= requested {
            return Err(Error::NoKvMemory { need_bytes: need as u64, have_bytes: requested as u64 });
        }
        let page = KV_BLOCK_TOKENS as u128 * self.fixed.kv_bytes;
        let (size, groups) = self.kv_groups();
        Ok(((requested - need) / page / size as u128 / groups as u128) as u64)
    }
}
