//! A model's shape: what the step cost and the KV capacity need to know, read from its published
//! `config.json` (sources per built-in model in docs/MODEL.md, "The physics step cost").
//!
//! Parameter counts are exact integers from the shapes (u128 while counting, then bounded by
//! [`MAX_PARAMS`](super::MAX_PARAMS)): attention projections, SwiGLU MLPs (three matrices), MoE
//! routers, routed and shared experts, norms, biases, attention sinks, embeddings and head.

use super::{
    CostField, Error, MAX_EXPERTS, MAX_HEAD_DIM, MAX_HEADS, MAX_LAYERS, MAX_PARAMS, MAX_VOCAB, MAX_WIDTH, check,
    cost_enum,
};
use crate::fleet::base::limits::quoting;

cost_enum! {
    /// Storage type of weights or KV. Sizes are in bits per 32 values so that MXFP4 (32 four-bit
    /// values + one 8-bit scale = 136 bits, 4.25 bits per value) is exact.
    pub enum Dtype {
        /// bfloat16.
        Bf16 => "bf16",
        /// float16 (same size and, here, the same compute rate as bf16).
        F16 => "f16",
        /// 8-bit floating point (e4m3), block scales not counted (1 per 128 x 128 block: < 0.01%).
        Fp8 => "fp8",
        /// OCP MXFP4: 32 four-bit values share one 8-bit scale.
        Mxfp4 => "mxfp4",
    }
}

impl Dtype {
    /// Bits per 32 values.
    pub const fn bits_per_32(self) -> u128 {
        match self {
            Dtype::Bf16 | Dtype::F16 => 512,
            Dtype::Fp8 => 256,
            Dtype::Mxfp4 => 136,
        }
    }

    /// Bytes of `n` values, rounded up.
    pub const fn bytes(self, n: u128) -> u128 {
        (n * self.bits_per_32()).div_ceil(256)
    }
}

/// Mixture of experts (per MoE layer: a router, `experts` routed experts of which `active` serve
/// each token, and `shared` always-on experts of the same width).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Moe {
    /// Routed experts per MoE layer (`num_local_experts`, `n_routed_experts`).
    pub experts: u32,
    /// Routed experts per token (`num_experts_per_tok`).
    pub active: u32,
    /// One expert's MLP width (`moe_intermediate_size`; gpt-oss: `intermediate_size`).
    pub expert_intermediate: u32,
    /// Shared experts per MoE layer (`n_shared_experts`), each `expert_intermediate` wide.
    pub shared: u32,
    /// Leading dense layers (`first_k_dense_replace`), MLP `intermediate` wide.
    pub dense_layers: u32,
    /// The router has a bias (gpt-oss) or a score-correction bias (DeepSeek-V3), `experts` values.
    pub router_bias: bool,
    /// Each expert's two projections have biases (gpt-oss: 2 x width + hidden values).
    pub expert_bias: bool,
    /// Storage of the routed experts' matrices (gpt-oss: MXFP4).
    pub expert_dtype: Dtype,
}

/// Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one latent of
/// `kv_lora_rank + rope_dim` values per token and layer, on every TP rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Mla {
    /// Query low-rank dimension (`q_lora_rank`; 0 = a full query projection).
    pub q_lora_rank: u32,
    /// KV latent dimension (`kv_lora_rank`).
    pub kv_lora_rank: u32,
    /// Rotary part of a query/key head (`qk_rope_head_dim`).
    pub rope_dim: u32,
    /// Non-rotary part of a query/key head (`qk_nope_head_dim`).
    pub nope_dim: u32,
    /// Value head dimension (`v_head_dim`).
    pub v_dim: u32,
}

/// Sliding-window attention on some layers (gpt-oss: every other layer, window 128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Sliding {
    /// Keys a query attends to, itself included (`sliding_window`).
    pub window: u32,
    /// Layers with the window (`layer_types` entries `sliding_attention`); the rest attend fully.
    pub layers: u32,
}

/// A decoder-only transformer's shape. With [`Mla`], `kv_heads` and `head_dim` are not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ModelDesc {
    /// Decoder layers L (`num_hidden_layers`).
    pub layers: u32,
    /// Hidden size d (`hidden_size`).
    pub hidden: u32,
    /// Attention (query) heads H (`num_attention_heads`).
    pub heads: u32,
    /// KV heads (`num_key_value_heads`; H for multi-head attention).
    pub kv_heads: u32,
    /// Head dimension (`head_dim`, else `hidden_size / num_attention_heads`).
    pub head_dim: u32,
    /// Dense MLP width I (`intermediate_size`); with MoE, the width of the leading dense layers.
    pub intermediate: u32,
    /// Vocabulary V (`vocab_size`).
    pub vocab: u32,
    /// Output head shares the embedding (`tie_word_embeddings`).
    pub tied_embeddings: bool,
    /// Per-head RMSNorm of queries and keys (Qwen3), 2 x head_dim values per layer.
    pub qk_norm: bool,
    /// Biases on the q, k, v and output projections (`attention_bias`; gpt-oss).
    pub attention_bias: bool,
    /// One learned sink logit per head and layer (gpt-oss).
    pub attention_sinks: bool,
    /// Storage of the attention and dense-MLP matrices (and shared experts). Embeddings, head,
    /// norms, biases and routers are 16-bit.
    pub weight_dtype: Dtype,
    /// Storage of the KV cache (vLLM `--kv-cache-dtype`, `auto` = the model's 16-bit type).
    pub kv_dtype: Dtype,
    /// Mixture of experts, if any.
    pub moe: Option<Moe>,
    /// Multi-head latent attention, if any.
    pub mla: Option<Mla>,
    /// Sliding-window layers, if any.
    pub sliding: Option<Sliding>,
    /// Parameters outside the described decoder (e.g. a vision encoder): memory only, 16-bit.
    pub extra_params: u64,
}

const fn w(x: u32) -> u128 {
    x as u128
}

impl ModelDesc {
    /// Layers with a dense MLP.
    pub const fn dense_mlp_layers(&self) -> u32 {
        match self.moe {
            Some(m) => m.dense_layers,
            None => self.layers,
        }
    }

    /// Layers with a MoE block.
    pub const fn moe_layers(&self) -> u32 {
        self.layers - self.dense_mlp_layers()
    }

    /// Layers with sliding-window attention.
    pub const fn sliding_layers(&self) -> u32 {
        match self.sliding {
            Some(s) => s.layers,
            None => 0,
        }
    }

    /// The window, tokens (0 = none).
    pub const fn window(&self) -> u32 {
        match self.sliding {
            Some(s) => s.window,
            None => 0,
        }
    }

    /// Query/key and value widths of one attention head: the attention FLOPs per query-key pair and
    /// head are `2 x (qk + v)` (QK^T and PV). MLA in its non-absorbed (prefill) form.
    pub const fn attention_dims(&self) -> (u128, u128) {
        match self.mla {
            Some(m) => (w(m.nope_dim) + w(m.rope_dim), w(m.v_dim)),
            None => (w(self.head_dim), w(self.head_dim)),
        }
    }

    /// Attention projection matrices of one layer (what each token multiplies).
    pub const fn attention_matrix_params(&self) -> u128 {
        let (d, h) = (w(self.hidden), w(self.heads));
        match self.mla {
            Some(m) => {
                let qk = w(m.nope_dim) + w(m.rope_dim);
                let q = if m.q_lora_rank == 0 { d * h * qk } else { d * w(m.q_lora_rank) + w(m.q_lora_rank) * h * qk };
                let kv = d * (w(m.kv_lora_rank) + w(m.rope_dim)) + w(m.kv_lora_rank) * h * (w(m.nope_dim) + w(m.v_dim));
                q + kv + h * w(m.v_dim) * d
            }
            None => {
                let (kv, hd) = (w(self.kv_heads), w(self.head_dim));
                d * h * hd + 2 * d * kv * hd + h * hd * d
            }
        }
    }

    /// Attention parameters of one layer outside the matrices: biases, q/k norms, MLA's latent
    /// norms, sinks (16-bit).
    pub const fn attention_other_params(&self) -> u128 {
        let (d, h) = (w(self.hidden), w(self.heads));
        let mut n = 0;
        if let Some(m) = self.mla {
            n += w(m.kv_lora_rank) + w(m.q_lora_rank);
        } else {
            let hd = w(self.head_dim);
            if self.attention_bias {
                n += hd * (h + 2 * w(self.kv_heads)) + d;
            }
            if self.qk_norm {
                n += 2 * hd;
            }
        }
        if self.attention_sinks {
            n += h;
        }
        n
    }

    /// One expert's (or dense MLP's) matrices of width `i`: gate, up and down.
    const fn mlp_params(&self, i: u32) -> u128 {
        3 * w(self.hidden) * w(i)
    }

    /// Router matrix of one MoE layer (+ its bias), 16-bit.
    pub const fn router_params(&self) -> u128 {
        match self.moe {
            Some(m) => w(self.hidden) * w(m.experts) + if m.router_bias { w(m.experts) } else { 0 },
            None => 0,
        }
    }

    /// Routed experts' matrices of one MoE layer (stored in `expert_dtype`).
    pub const fn routed_expert_params(&self) -> u128 {
        match self.moe {
            Some(m) => w(m.experts) * self.mlp_params(m.expert_intermediate),
            None => 0,
        }
    }

    /// One routed expert's matrices.
    pub const fn expert_params(&self) -> u128 {
        match self.moe {
            Some(m) => self.mlp_params(m.expert_intermediate),
            None => 0,
        }
    }

    /// Routed experts' biases of one MoE layer (16-bit).
    const fn expert_bias_params(&self) -> u128 {
        match self.moe {
            Some(m) if m.expert_bias => w(m.experts) * (2 * w(m.expert_intermediate) + w(self.hidden)),
            _ => 0,
        }
    }

    /// Shared experts' matrices of one MoE layer (stored in `weight_dtype`).
    const fn shared_expert_params(&self) -> u128 {
        match self.moe {
            Some(m) => w(m.shared) * self.mlp_params(m.expert_intermediate),
            None => 0,
        }
    }

    /// Matrices stored in `weight_dtype`: attention, dense MLPs, shared experts.
    pub const fn linear_params(&self) -> u128 {
        w(self.layers) * self.attention_matrix_params()
            + w(self.dense_mlp_layers()) * self.mlp_params(self.intermediate)
            + w(self.moe_layers()) * self.shared_expert_params()
    }

    /// Routed experts' matrices, all MoE layers.
    pub const fn all_routed_expert_params(&self) -> u128 {
        w(self.moe_layers()) * self.routed_expert_params()
    }

    /// The input embedding table.
    pub const fn embedding_params(&self) -> u128 {
        w(self.vocab) * w(self.hidden)
    }

    /// Every parameter: embeddings, head (unless tied), per layer attention, two norms and the MLP
    /// or MoE block, the final norm, and `extra_params`.
    pub const fn params(&self) -> u128 {
        let d = w(self.hidden);
        let head = if self.tied_embeddings { 0 } else { self.embedding_params() };
        let per_layer = self.attention_matrix_params() + self.attention_other_params() + 2 * d;
        let moe_block = self.router_params()
            + self.routed_expert_params()
            + self.expert_bias_params()
            + self.shared_expert_params();
        self.embedding_params()
            + head
            + w(self.layers) * per_layer
            + w(self.dense_mlp_layers()) * self.mlp_params(self.intermediate)
            + w(self.moe_layers()) * moe_block
            + d
            + self.extra_params as u128
    }

    /// Bytes of all weights: `linear_params` in `weight_dtype`, routed experts in `expert_dtype`,
    /// the rest 16-bit.
    pub const fn weight_bytes(&self) -> u128 {
        let (lin, routed) = (self.linear_params(), self.all_routed_expert_params());
        let expert_dtype = match self.moe {
            Some(m) => m.expert_dtype,
            None => Dtype::Bf16,
        };
        self.weight_dtype.bytes(lin) + expert_dtype.bytes(routed) + Dtype::Bf16.bytes(self.params() - lin - routed)
    }

    /// Bytes of one routed expert's matrices.
    pub const fn expert_bytes(&self) -> u128 {
        match self.moe {
            Some(m) => m.expert_dtype.bytes(self.expert_params()),
            None => 0,
        }
    }

    /// Weight bytes a step streams besides the routed experts: everything but the routed experts,
    /// the input embedding table (only looked-up rows are read; counted unless tied, as it is
    /// then the head) and `extra_params`.
    pub const fn streamed_bytes_without_experts(&self) -> u128 {
        let lookup = if self.tied_embeddings { 0 } else { Dtype::Bf16.bytes(self.embedding_params()) };
        let expert_dtype = match self.moe {
            Some(m) => m.expert_dtype,
            None => Dtype::Bf16,
        };
        self.weight_bytes()
            - expert_dtype.bytes(self.all_routed_expert_params())
            - lookup
            - Dtype::Bf16.bytes(self.extra_params as u128)
    }

    /// Matrix parameters each token multiplies outside the routed experts: attention, dense MLPs,
    /// routers and shared experts (the logits are counted apart, per request).
    pub const fn dense_active_params(&self) -> u128 {
        w(self.layers) * self.attention_matrix_params()
            + w(self.dense_mlp_layers()) * self.mlp_params(self.intermediate)
            + w(self.moe_layers()) * (w(self.hidden) * self.n_experts() + self.shared_expert_params())
    }

    /// Routed-expert matrix parameters each token multiplies (`active` experts per MoE layer).
    pub const fn routed_active_params(&self) -> u128 {
        match self.moe {
            Some(m) => w(self.moe_layers()) * w(m.active) * self.expert_params(),
            None => 0,
        }
    }

    const fn n_experts(&self) -> u128 {
        match self.moe {
            Some(m) => w(m.experts),
            None => 0,
        }
    }

    /// KV bytes of one token in one layer on one GPU of `tp`: GQA `2 x max(1, kv_heads / tp) x
    /// head_dim x kv bytes` (vLLM replicates KV heads when tp > kv_heads); MLA `(kv_lora_rank +
    /// rope_dim) x kv bytes` on every rank.
    pub const fn kv_bytes_per_token_layer(&self, tp: u32) -> u128 {
        let per_gpu_values = match self.mla {
            Some(m) => w(m.kv_lora_rank) + w(m.rope_dim),
            None => {
                let tp = if tp == 0 { 1 } else { tp };
                let heads = if self.kv_heads / tp > 1 { self.kv_heads / tp } else { 1 };
                2 * w(heads) * w(self.head_dim)
            }
        };
        self.kv_dtype.bytes(per_gpu_values)
    }

    /// Checks every field against its limit and the shape's consistency.
    pub fn validate(&self) -> Result<(), Error> {
        use CostField as F;
        let layers = self.layers as u64;
        check(layers, 1, MAX_LAYERS as u64, F::Layers, quoting!("between 1 and 1024 layers", MAX_LAYERS))?;
        let wide = quoting!("between 1 and 1048576", MAX_WIDTH);
        check(self.hidden as u64, 1, MAX_WIDTH as u64, F::Hidden, wide)?;
        let heads = quoting!("between 1 and 4096 heads", MAX_HEADS);
        check(self.heads as u64, 1, MAX_HEADS as u64, F::Heads, heads)?;
        check(self.vocab as u64, 1, MAX_VOCAB as u64, F::Vocab, quoting!("between 1 and 16777216", MAX_VOCAB))?;
        let dense_width_needed = self.dense_mlp_layers() > 0;
        check(self.intermediate as u64, dense_width_needed as u64, MAX_WIDTH as u64, F::Intermediate, wide)?;
        if self.kv_dtype == Dtype::Mxfp4 {
            return Err(Error::Invalid { field: F::KvDtype, expected: "bf16, f16 or fp8" });
        }
        match self.mla {
            Some(m) => {
                check(m.q_lora_rank as u64, 0, MAX_WIDTH as u64, F::QLoraRank, quoting!("0 to 1048576", MAX_WIDTH))?;
                check(m.kv_lora_rank as u64, 1, MAX_WIDTH as u64, F::KvLoraRank, wide)?;
                let dim = quoting!("between 1 and 4096", MAX_HEAD_DIM);
                check(m.rope_dim as u64, 0, MAX_HEAD_DIM as u64, F::RopeDim, quoting!("0 to 4096", MAX_HEAD_DIM))?;
                check(m.nope_dim as u64, 1, MAX_HEAD_DIM as u64, F::NopeDim, dim)?;
                check(m.v_dim as u64, 1, MAX_HEAD_DIM as u64, F::VDim, dim)?;
            }
            None => {
                check(self.kv_heads as u64, 1, self.heads as u64, F::KvHeads, "between 1 and heads")?;
                if !self.heads.is_multiple_of(self.kv_heads) {
                    return Err(Error::Invalid { field: F::KvHeads, expected: "a divisor of heads" });
                }
                let dim = quoting!("between 1 and 4096", MAX_HEAD_DIM);
                check(self.head_dim as u64, 1, MAX_HEAD_DIM as u64, F::HeadDim, dim)?;
            }
        }
        if let Some(m) = self.moe {
            let ex = quoting!("between 1 and 65536 experts", MAX_EXPERTS);
            check(m.experts as u64, 1, MAX_EXPERTS as u64, F::Experts, ex)?;
            check(m.active as u64, 1, m.experts as u64, F::ActiveExperts, "between 1 and moe.experts")?;
            check(m.expert_intermediate as u64, 1, MAX_WIDTH as u64, F::ExpertIntermediate, wide)?;
            check(m.shared as u64, 0, MAX_EXPERTS as u64, F::SharedExperts, quoting!("0 to 65536", MAX_EXPERTS))?;
            check(m.dense_layers as u64, 0, layers - 1, F::DenseLayers, "fewer than layers (0 = every layer is MoE)")?;
        }
        if let Some(s) = self.sliding {
            check(s.window as u64, 1, u32::MAX as u64, F::Window, "at least 1 token")?;
            check(s.layers as u64, 1, layers, F::SlidingLayers, "between 1 and layers")?;
        }
        let params = quoting!("at most 100000000000000 parameters in all", MAX_PARAMS);
        check(self.extra_params, 0, MAX_PARAMS, F::ExtraParams, params)?;
        if self.params() > MAX_PARAMS as u128 {
            return Err(Error::Invalid { field: F::Params, expected: params });
        }
        Ok(())
    }
}

cost_enum! {
    /// Built-in model descriptions (configs cited in docs/MODEL.md, "The physics step cost").
    pub enum Model {
        /// meta-llama/Llama-3.1-8B-Instruct.
        Llama31_8b => "llama-3.1-8b",
        /// meta-llama/Llama-3.1-70B-Instruct.
        Llama31_70b => "llama-3.1-70b",
        /// Qwen/Qwen3-8B.
        Qwen3_8b => "qwen3-8b",
        /// Qwen/Qwen3-8B-FP8 (FP8 matrices; embeddings, head and norms 16-bit).
        Qwen3_8bFp8 => "qwen3-8b-fp8",
        /// Qwen/Qwen3-32B.
        Qwen3_32b => "qwen3-32b",
        /// codellama/CodeLlama-34b-Instruct-hf (a dense 34B Llama; the decode calibration's model).
        CodeLlama34b => "codellama-34b",
        /// openai/gpt-oss-120b (MXFP4 experts).
        GptOss120b => "gpt-oss-120b",
        /// deepseek-ai/DeepSeek-V3 (FP8 checkpoint, MLA, 256 experts; the MTP module not loaded).
        DeepseekV3 => "deepseek-v3",
    }
}

/// A dense GQA model with bf16 weights and KV.
const fn dense(layers: u32, hidden: u32, heads: u32, kv_heads: u32, intermediate: u32, vocab: u32) -> ModelDesc {
    ModelDesc {
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim: 128,
        intermediate,
        vocab,
        tied_embeddings: false,
        qk_norm: false,
        attention_bias: false,
        attention_sinks: false,
        weight_dtype: Dtype::Bf16,
        kv_dtype: Dtype::Bf16,
        moe: None,
        mla: None,
        sliding: None,
        extra_params: 0,
    }
}

impl Model {
    /// The description.
    pub const fn desc(self) -> ModelDesc {
        match self {
            Model::Llama31_8b => dense(32, 4096, 32, 8, 14336, 128256),
            Model::Llama31_70b => dense(80, 8192, 64, 8, 28672, 128256),
            Model::Qwen3_8b => ModelDesc { qk_norm: true, ..dense(36, 4096, 32, 8, 12288, 151936) },
            Model::Qwen3_8bFp8 => ModelDesc { weight_dtype: Dtype::Fp8, ..Model::Qwen3_8b.desc() },
            Model::Qwen3_32b => ModelDesc { qk_norm: true, ..dense(64, 5120, 64, 8, 25600, 151936) },
            Model::CodeLlama34b => dense(48, 8192, 64, 8, 22016, 32000),
            Model::GptOss120b => ModelDesc {
                head_dim: 64,
                attention_bias: true,
                attention_sinks: true,
                moe: Some(Moe {
                    experts: 128,
                    active: 4,
                    expert_intermediate: 2880,
                    shared: 0,
                    dense_layers: 0,
                    router_bias: true,
                    expert_bias: true,
                    expert_dtype: Dtype::Mxfp4,
                }),
                sliding: Some(Sliding { window: 128, layers: 18 }),
                ..dense(36, 2880, 64, 8, 0, 201088)
            },
            Model::DeepseekV3 => ModelDesc {
                kv_heads: 128,
                // with MLA, head_dim is not used; set to qk_nope + qk_rope, as descriptions read
                head_dim: 192,
                weight_dtype: Dtype::Fp8,
                moe: Some(Moe {
                    experts: 256,
                    active: 8,
                    expert_intermediate: 2048,
                    shared: 1,
                    dense_layers: 3,
                    router_bias: true,
                    expert_bias: false,
                    expert_dtype: Dtype::Fp8,
                }),
                mla: Some(Mla { q_lora_rank: 1536, kv_lora_rank: 512, rope_dim: 64, nope_dim: 128, v_dim: 128 }),
                ..dense(61, 7168, 128, 128, 18432, 129280)
            },
        }
    }
}
