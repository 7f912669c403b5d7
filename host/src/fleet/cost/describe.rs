//! Model and GPU descriptions from the command line: a built-in name, our TOML description, or (for
//! models) a Hugging Face `config.json` the user has (read as it is; nothing is downloaded). Bad
//! input is exit 2 naming the file and the key.

use std::path::Path;

use brokerlab_core::fleet::cost::{
    Calibration, CostField, Dtype, Error as CostError, Gpu, Hardware, Mla, Model, ModelDesc, Moe, Physics, Sliding,
};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{CliError, CliResult};

/// A dtype name in a TOML description.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(try_from = "String")]
pub struct DtypeName(pub Dtype);

impl TryFrom<String> for DtypeName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Dtype::parse(&s).map(DtypeName).ok_or_else(|| format!("unknown dtype `{s}`: expected bf16, f16, fp8 or mxfp4"))
    }
}

fn bf16() -> DtypeName {
    DtypeName(Dtype::Bf16)
}

/// `[moe]` of a model description.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeToml {
    pub experts: u32,
    pub active: u32,
    pub expert_intermediate: u32,
    #[serde(default)]
    pub shared: u32,
    #[serde(default)]
    pub dense_layers: u32,
    #[serde(default)]
    pub router_bias: bool,
    #[serde(default)]
    pub expert_bias: bool,
    #[serde(default = "bf16")]
    pub expert_dtype: DtypeName,
}

/// `[mla]` of a model description.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlaToml {
    #[serde(default)]
    pub q_lora_rank: u32,
    pub kv_lora_rank: u32,
    pub rope_dim: u32,
    pub nope_dim: u32,
    pub v_dim: u32,
}

/// `[sliding]` of a model description.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlidingToml {
    pub window: u32,
    pub layers: u32,
}

/// A model description in TOML: the fields of [`ModelDesc`] by name (docs/MODEL.md).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelToml {
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    /// Default: `heads` (multi-head attention).
    pub kv_heads: Option<u32>,
    /// Default: `hidden / heads`.
    pub head_dim: Option<u32>,
    #[serde(default)]
    pub intermediate: u32,
    pub vocab: u32,
    #[serde(default)]
    pub tied_embeddings: bool,
    #[serde(default)]
    pub qk_norm: bool,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub attention_sinks: bool,
    #[serde(default = "bf16")]
    pub weight_dtype: DtypeName,
    #[serde(default = "bf16")]
    pub kv_dtype: DtypeName,
    #[serde(default)]
    pub extra_params: u64,
    pub moe: Option<MoeToml>,
    pub mla: Option<MlaToml>,
    pub sliding: Option<SlidingToml>,
}

impl ModelToml {
    /// The description (not yet validated).
    pub fn desc(&self) -> ModelDesc {
        ModelDesc {
            layers: self.layers,
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads.unwrap_or(self.heads),
            head_dim: self.head_dim.unwrap_or(self.hidden.checked_div(self.heads).unwrap_or(0)),
            intermediate: self.intermediate,
            vocab: self.vocab,
            tied_embeddings: self.tied_embeddings,
            qk_norm: self.qk_norm,
            attention_bias: self.attention_bias,
            attention_sinks: self.attention_sinks,
            weight_dtype: self.weight_dtype.0,
            kv_dtype: self.kv_dtype.0,
            moe: self.moe.as_ref().map(|m| Moe {
                experts: m.experts,
                active: m.active,
                expert_intermediate: m.expert_intermediate,
                shared: m.shared,
                dense_layers: m.dense_layers,
                router_bias: m.router_bias,
                expert_bias: m.expert_bias,
                expert_dtype: m.expert_dtype.0,
            }),
            mla: self.mla.as_ref().map(|m| Mla {
                q_lora_rank: m.q_lora_rank,
                kv_lora_rank: m.kv_lora_rank,
                rope_dim: m.rope_dim,
                nope_dim: m.nope_dim,
                v_dim: m.v_dim,
            }),
            sliding: self.sliding.as_ref().map(|s| Sliding { window: s.window, layers: s.layers }),
            extra_params: self.extra_params,
        }
    }
}

/// A number in a GPU description: an integer, or a float that is a whole number (`989.5e12`).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(try_from = "f64")]
pub struct Whole(pub u64);

impl TryFrom<f64> for Whole {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 9.0e18 {
            Ok(Whole(v as u64))
        } else {
            Err(format!("{v}: expected a whole number >= 0"))
        }
    }
}

/// A GPU description in TOML: the fields of [`Hardware`] by name.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuToml {
    pub flops_bf16: Whole,
    #[serde(default = "zero")]
    pub flops_fp8: Whole,
    #[serde(default = "zero")]
    pub flops_fp4: Whole,
    pub hbm_bytes_per_s: Whole,
    pub memory_bytes: Whole,
    pub link_bytes_per_s: Whole,
    pub pcie_bytes_per_s: Whole,
}

fn zero() -> Whole {
    Whole(0)
}

impl GpuToml {
    /// The description (not yet validated).
    pub fn hardware(&self) -> Hardware {
        Hardware {
            flops_bf16: self.flops_bf16.0,
            flops_fp8: self.flops_fp8.0,
            flops_fp4: self.flops_fp4.0,
            hbm_bytes_per_s: self.hbm_bytes_per_s.0,
            memory_bytes: self.memory_bytes.0,
            link_bytes_per_s: self.link_bytes_per_s.0,
            pcie_bytes_per_s: self.pcie_bytes_per_s.0,
        }
    }
}

fn read(path: &Path, what: &str) -> CliResult<String> {
    std::fs::read_to_string(path)
        .map_err(|e| CliError::bad_input(format!("{what} {}: cannot read: {e}", path.display())))
}

fn names<T: Copy + std::fmt::Display>(all: &[T]) -> String {
    all.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}

/// A model: a built-in name, a `.toml` description or a Hugging Face `config.json`.
pub fn load_model(spec: &str) -> CliResult<ModelDesc> {
    if let Some(m) = Model::parse(spec) {
        return Ok(m.desc());
    }
    let path = Path::new(spec);
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext != "toml" && ext != "json" {
        return Err(CliError::bad_input(format!(
            "--model {spec}: expected a built-in model ({}), a .toml description or a Hugging Face config.json",
            names(Model::ALL)
        )));
    }
    let text = read(path, "--model")?;
    let file = path.display();
    let desc = if ext == "toml" {
        let t: ModelToml = toml::from_str(text.trim_start_matches('\u{feff}'))
            .map_err(|e| CliError::bad_input(format!("{file}: {e}")))?;
        t.desc()
    } else {
        from_hf_config(&text).map_err(|e| CliError::bad_input(format!("{file}: {e}")))?
    };
    desc.validate().map_err(|e| CliError::bad_input(format!("{file}: {}", model_error(e, ext == "json"))))?;
    Ok(desc)
}

/// A GPU: a built-in name or a `.toml` description.
pub fn load_gpu(spec: &str) -> CliResult<Hardware> {
    if let Some(g) = Gpu::parse(spec) {
        return Ok(g.hardware());
    }
    let path = Path::new(spec);
    if path.extension().and_then(|e| e.to_str()) != Some("toml") {
        return Err(CliError::bad_input(format!(
            "--gpu {spec}: expected a built-in GPU ({}) or a .toml description",
            names(Gpu::ALL)
        )));
    }
    let text = read(path, "--gpu")?;
    let t: GpuToml = toml::from_str(text.trim_start_matches('\u{feff}'))
        .map_err(|e| CliError::bad_input(format!("{}: {e}", path.display())))?;
    let hw = t.hardware();
    hw.validate().map_err(|e| CliError::bad_input(format!("{}: {e}", path.display())))?;
    Ok(hw)
}

/// The `[calibration]` table of a profile file: every factor of [`Calibration`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationToml {
    compute_ppm: u32,
    attention_ppm: u32,
    moe_ppm: u32,
    memory_ppm: u32,
    /// Absent: 0, the KV cache at `memory_ppm` (profiles written before the split).
    #[serde(default)]
    kv_memory_ppm: u32,
    /// Absent: 1,000,000, off (every request reads its whole context; docs/MODEL.md
    /// "Shared-prefix reads").
    #[serde(default = "shared_kv_read_off")]
    shared_kv_read_ppm: u32,
    link_ppm: u32,
    step_ns: u64,
    request_ns: u64,
    layer_ns: u64,
    allreduce_ns: u64,
    reserve_bytes: u64,
    gpu_memory_utilization_ppm: u32,
}

fn shared_kv_read_off() -> u32 {
    brokerlab_core::fleet::cost::SHARED_KV_READ_OFF
}

/// A physics profile file, as `fleet calibrate` writes it: `tp`, `[model]`, `[gpu]`,
/// `[calibration]`, and the `[fit]` record (read, not used).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileToml {
    tp: u32,
    model: ModelToml,
    gpu: GpuToml,
    calibration: CalibrationToml,
    #[allow(dead_code)]
    fit: Option<toml::Value>,
}

/// A physics profile from a `.toml` file (`fleet calibrate`'s output); `what` names the flag or
/// key in messages. Every problem is bad input naming the file and the key.
pub fn load_profile(path: &Path, what: &str) -> CliResult<Physics> {
    let text = read(path, what)?;
    let file = path.display();
    let t: ProfileToml = toml::from_str(text.trim_start_matches('\u{feff}'))
        .map_err(|e| CliError::bad_input(format!("{what} {file}: {e}")))?;
    let c = &t.calibration;
    let cal = Calibration {
        compute_ppm: c.compute_ppm,
        attention_ppm: c.attention_ppm,
        moe_ppm: c.moe_ppm,
        memory_ppm: c.memory_ppm,
        kv_memory_ppm: c.kv_memory_ppm,
        shared_kv_read_ppm: c.shared_kv_read_ppm,
        link_ppm: c.link_ppm,
        step_ns: c.step_ns,
        request_ns: c.request_ns,
        layer_ns: c.layer_ns,
        allreduce_ns: c.allreduce_ns,
        reserve_bytes: c.reserve_bytes,
        gpu_memory_utilization_ppm: c.gpu_memory_utilization_ppm,
    };
    let named = |e: CostError| match e {
        CostError::Invalid { field, expected } => {
            let table = if field == CostField::Tp {
                String::new()
            } else if is_calibration(field) {
                "calibration.".into()
            } else {
                "model.".into()
            };
            CliError::bad_input(format!("{what} {file}: `{table}{field}`: expected {expected}"))
        }
        other => CliError::bad_input(format!("{what} {file}: {other}")),
    };
    let hw = t.gpu.hardware();
    hw.validate().map_err(|e| CliError::bad_input(format!("{what} {file}: [gpu] {e}")))?;
    Physics::new(t.model.desc(), hw, t.tp, cal).map_err(named)
}

/// Whether `f` is a key of the `[calibration]` table.
fn is_calibration(f: CostField) -> bool {
    use CostField as F;
    matches!(
        f,
        F::ComputePpm
            | F::MoePpm
            | F::AttentionPpm
            | F::MemoryPpm
            | F::KvMemoryPpm
            | F::SharedKvReadPpm
            | F::LinkPpm
            | F::StepNs
            | F::RequestNs
            | F::LayerNs
            | F::AllreduceNs
            | F::ReserveBytes
            | F::GpuMemoryUtilizationPpm
    )
}

/// The `config.json` key behind a description field (for messages about a Hugging Face config).
pub fn hf_key(f: CostField) -> &'static str {
    use CostField as F;
    match f {
        F::Layers => "num_hidden_layers",
        F::Hidden => "hidden_size",
        F::Heads => "num_attention_heads",
        F::KvHeads => "num_key_value_heads",
        F::HeadDim => "head_dim",
        F::Intermediate => "intermediate_size",
        F::Vocab => "vocab_size",
        F::Experts => "num_local_experts (or n_routed_experts, num_experts)",
        F::ActiveExperts => "num_experts_per_tok",
        F::ExpertIntermediate => "moe_intermediate_size",
        F::SharedExperts => "n_shared_experts",
        F::DenseLayers => "first_k_dense_replace",
        F::QLoraRank => "q_lora_rank",
        F::KvLoraRank => "kv_lora_rank",
        F::RopeDim => "qk_rope_head_dim",
        F::NopeDim => "qk_nope_head_dim",
        F::VDim => "v_head_dim",
        F::Window => "sliding_window",
        F::SlidingLayers => "layer_types",
        other => other.name(),
    }
}

fn model_error(e: CostError, hf: bool) -> String {
    match e {
        CostError::Invalid { field, expected } if hf => format!("field `{}`: expected {expected}", hf_key(field)),
        CostError::Invalid { field, expected } => format!("`{field}`: expected {expected}"),
        other => other.to_string(),
    }
}

/// Reads `key` of `obj` as a u32 (absent or null: `None`).
fn u32_of(obj: &Map<String, Value>, key: &str) -> Result<Option<u32>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("field `{key}`: {v} is not a whole number from 0 to 4294967295")),
    }
}

fn need(obj: &Map<String, Value>, key: &str) -> Result<u32, String> {
    u32_of(obj, key)?.ok_or_else(|| format!("field `{key}`: missing (a whole number is expected)"))
}

fn bool_of(obj: &Map<String, Value>, key: &str) -> Result<bool, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(format!("field `{key}`: {v} is not true or false")),
    }
}

fn str_of<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(format!("field `{key}`: {v} is not a string")),
    }
}

/// A Hugging Face `config.json` (the text model's part, `text_config`, for multimodal models).
/// The keys read and their meaning are in docs/MODEL.md ("Model descriptions").
pub fn from_hf_config(text: &str) -> Result<ModelDesc, String> {
    let root: Value =
        serde_json::from_str(text.trim_start_matches('\u{feff}')).map_err(|e| format!("not JSON: {e}"))?;
    let root = root.as_object().ok_or("not a JSON object")?;
    let obj = match root.get("text_config") {
        Some(Value::Object(t)) => t,
        _ => root,
    };
    let model_type = str_of(obj, "model_type")?.or(str_of(root, "model_type")?).unwrap_or("");
    let (layers, hidden, heads) =
        (need(obj, "num_hidden_layers")?, need(obj, "hidden_size")?, need(obj, "num_attention_heads")?);
    let dtype = match str_of(obj, "torch_dtype")?
        .or(str_of(obj, "dtype")?)
        .or(str_of(root, "torch_dtype")?)
        .or(str_of(root, "dtype")?)
    {
        None | Some("bfloat16") => Dtype::Bf16,
        // vLLM's dtype "auto" serves float32 checkpoints in float16
        Some("float16" | "float32") => Dtype::F16,
        Some(other) => return Err(format!("field `torch_dtype`: `{other}`: expected bfloat16, float16 or float32")),
    };
    let quant = match obj.get("quantization_config").or(root.get("quantization_config")) {
        Some(Value::Object(q)) => str_of(q, "quant_method")?.map(str::to_owned),
        Some(Value::Null) | None => None,
        Some(_) => return Err("field `quantization_config`: not an object".into()),
    };
    let (weight_dtype, expert_dtype) = match quant.as_deref() {
        None => (dtype, dtype),
        Some("fp8") => (Dtype::Fp8, Dtype::Fp8),
        Some("mxfp4") => (dtype, Dtype::Mxfp4),
        Some(other) => {
            return Err(format!(
                "field `quantization_config.quant_method`: `{other}`: expected fp8 or mxfp4 (or no quantization)"
            ));
        }
    };
    let experts =
        match u32_of(obj, "num_local_experts")?.or(u32_of(obj, "n_routed_experts")?).or(u32_of(obj, "num_experts")?) {
            Some(e) if e > 1 => Some(e),
            _ => None,
        };
    for key in ["moe_layer_freq", "decoder_sparse_step", "interleave_moe_layer_step"] {
        if u32_of(obj, key)?.is_some_and(|f| f > 1) {
            return Err(format!("field `{key}`: interleaved MoE layers are not modelled (expected 1)"));
        }
    }
    let gpt_oss = model_type == "gpt_oss";
    let moe = match experts {
        None => None,
        Some(e) => Some(Moe {
            experts: e,
            active: u32_of(obj, "num_experts_per_tok")?
                .or(u32_of(obj, "experts_per_token")?)
                .ok_or("field `num_experts_per_tok`: missing (a MoE config needs it)")?,
            expert_intermediate: match u32_of(obj, "moe_intermediate_size")? {
                Some(i) => i,
                None => need(obj, "intermediate_size")?,
            },
            shared: u32_of(obj, "n_shared_experts")?.unwrap_or(0),
            dense_layers: u32_of(obj, "first_k_dense_replace")?.unwrap_or(0),
            router_bias: gpt_oss || model_type.starts_with("deepseek_v3"),
            expert_bias: gpt_oss,
            expert_dtype,
        }),
    };
    let dense_layers = moe.map_or(layers, |m| m.dense_layers);
    let intermediate = if dense_layers > 0 { need(obj, "intermediate_size")? } else { 0 };
    let mla = match u32_of(obj, "kv_lora_rank")? {
        None => None,
        Some(kv) => Some(Mla {
            q_lora_rank: u32_of(obj, "q_lora_rank")?.unwrap_or(0),
            kv_lora_rank: kv,
            rope_dim: need(obj, "qk_rope_head_dim")?,
            nope_dim: need(obj, "qk_nope_head_dim")?,
            v_dim: need(obj, "v_head_dim")?,
        }),
    };
    let sliding_layers = match obj.get("layer_types") {
        None | Some(Value::Null) => 0,
        Some(Value::Array(a)) => a.iter().filter(|v| v.as_str() == Some("sliding_attention")).count() as u32,
        Some(_) => return Err("field `layer_types`: not an array".into()),
    };
    let sliding = if sliding_layers == 0 {
        None
    } else {
        Some(Sliding { window: need(obj, "sliding_window")?, layers: sliding_layers })
    };
    Ok(ModelDesc {
        layers,
        hidden,
        heads,
        kv_heads: u32_of(obj, "num_key_value_heads")?.unwrap_or(heads),
        head_dim: match mla {
            // not used with MLA; the query/key head width, for the record
            Some(m) => m.nope_dim + m.rope_dim,
            None => u32_of(obj, "head_dim")?.unwrap_or(hidden.checked_div(heads).unwrap_or(0)),
        },
        intermediate,
        vocab: need(obj, "vocab_size")?,
        tied_embeddings: bool_of(obj, "tie_word_embeddings")? || bool_of(root, "tie_word_embeddings")?,
        qk_norm: model_type.starts_with("qwen3"),
        attention_bias: bool_of(obj, "attention_bias")?,
        attention_sinks: gpt_oss,
        weight_dtype,
        kv_dtype: if dtype == Dtype::F16 { Dtype::F16 } else { Dtype::Bf16 },
        moe,
        mla,
        sliding,
        extra_params: 0,
    })
}

/// `m` as a TOML description (the `[model]` table of a profile; reads back with [`ModelToml`]).
pub fn model_toml(m: &ModelDesc, table: &str) -> String {
    let mut s = format!(
        "[{table}]\nlayers = {}\nhidden = {}\nheads = {}\nkv_heads = {}\nhead_dim = {}\nintermediate = {}\nvocab = {}\n\
         tied_embeddings = {}\nqk_norm = {}\nattention_bias = {}\nattention_sinks = {}\nweight_dtype = \"{}\"\n\
         kv_dtype = \"{}\"\nextra_params = {}\n",
        m.layers,
        m.hidden,
        m.heads,
        m.kv_heads,
        m.head_dim,
        m.intermediate,
        m.vocab,
        m.tied_embeddings,
        m.qk_norm,
        m.attention_bias,
        m.attention_sinks,
        m.weight_dtype,
        m.kv_dtype,
        m.extra_params
    );
    if let Some(e) = m.moe {
        s += &format!(
            "\n[{table}.moe]\nexperts = {}\nactive = {}\nexpert_intermediate = {}\nshared = {}\ndense_layers = {}\n\
             router_bias = {}\nexpert_bias = {}\nexpert_dtype = \"{}\"\n",
            e.experts,
            e.active,
            e.expert_intermediate,
            e.shared,
            e.dense_layers,
            e.router_bias,
            e.expert_bias,
            e.expert_dtype
        );
    }
    if let Some(a) = m.mla {
        s += &format!(
            "\n[{table}.mla]\nq_lora_rank = {}\nkv_lora_rank = {}\nrope_dim = {}\nnope_dim = {}\nv_dim = {}\n",
            a.q_lora_rank, a.kv_lora_rank, a.rope_dim, a.nope_dim, a.v_dim
        );
    }
    if let Some(w) = m.sliding {
        s += &format!("\n[{table}.sliding]\nwindow = {}\nlayers = {}\n", w.window, w.layers);
    }
    s
}

/// `h` as a TOML description (the `[gpu]` table of a profile; reads back with [`GpuToml`]).
pub fn gpu_toml(h: &Hardware, table: &str) -> String {
    format!(
        "[{table}]\nflops_bf16 = {}\nflops_fp8 = {}\nflops_fp4 = {}\nhbm_bytes_per_s = {}\nmemory_bytes = {}\n\
         link_bytes_per_s = {}\npcie_bytes_per_s = {}\n",
        h.flops_bf16,
        h.flops_fp8,
        h.flops_fp4,
        h.hbm_bytes_per_s,
        h.memory_bytes,
        h.link_bytes_per_s,
        h.pcie_bytes_per_s
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hugging Face configs as published (the keys the reader uses; values from each model's
    /// config.json, research-24 §1.1).
    const QWEN3_32B: &str = r#"{"architectures": ["Qwen3ForCausalLM"], "head_dim": 128, "hidden_size": 5120,
        "intermediate_size": 25600, "model_type": "qwen3", "num_attention_heads": 64, "num_hidden_layers": 64,
        "num_key_value_heads": 8, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 151936,
        "sliding_window": null, "use_sliding_window": false}"#;
    const LLAMA_8B: &str = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256, "attention_bias": false}"#;
    const DEEPSEEK_V3: &str = r#"{"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
        "vocab_size": 129280, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
        "weight_block_size": [128, 128]}}"#;

    fn gpt_oss() -> String {
        let types: Vec<&str> =
            (0..36).map(|i| if i % 2 == 0 { "\"sliding_attention\"" } else { "\"full_attention\"" }).collect();
        format!(
            r#"{{"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
            "intermediate_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
            "head_dim": 64, "num_local_experts": 128, "num_experts_per_tok": 4, "experts_per_token": 4,
            "vocab_size": 201088, "sliding_window": 128, "attention_bias": true, "tie_word_embeddings": false,
            "torch_dtype": "bfloat16", "quantization_config": {{"quant_method": "mxfp4"}}, "layer_types": [{}]}}"#,
            types.join(", ")
        )
    }

    #[test]
    fn hf_configs_give_the_builtin_descriptions() {
        assert_eq!(from_hf_config(QWEN3_32B), Ok(Model::Qwen3_32b.desc()));
        assert_eq!(from_hf_config(LLAMA_8B), Ok(Model::Llama31_8b.desc()));
        assert_eq!(from_hf_config(DEEPSEEK_V3), Ok(Model::DeepseekV3.desc()));
        assert_eq!(from_hf_config(&gpt_oss()), Ok(Model::GptOss120b.desc()));
    }

    #[test]
    fn hf_config_errors_name_the_key() {
        let missing = QWEN3_32B.replace("\"num_hidden_layers\": 64,", "");
        assert!(from_hf_config(&missing).unwrap_err().contains("field `num_hidden_layers`: missing"));
        let neg = QWEN3_32B.replace("\"hidden_size\": 5120", "\"hidden_size\": -1");
        assert!(from_hf_config(&neg).unwrap_err().contains("field `hidden_size`"));
        let q = DEEPSEEK_V3.replace("\"fp8\"", "\"awq\"");
        assert!(from_hf_config(&q).unwrap_err().contains("quantization_config.quant_method"));
        let moe = DEEPSEEK_V3.replace("\"num_experts_per_tok\": 8,", "");
        assert!(from_hf_config(&moe).unwrap_err().contains("num_experts_per_tok"));
        assert!(from_hf_config("[1, 2]").unwrap_err().contains("not a JSON object"));
        assert!(from_hf_config("{").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn descriptions_round_trip_through_toml() {
        for &m in Model::ALL {
            let text = model_toml(&m.desc(), "model");
            #[derive(Deserialize)]
            struct File {
                model: ModelToml,
            }
            let back: File = toml::from_str(&text).unwrap_or_else(|e| panic!("{m}: {e}\n{text}"));
            assert_eq!(back.model.desc(), m.desc(), "{m}");
        }
        for &g in Gpu::ALL {
            #[derive(Deserialize)]
            struct File {
                gpu: GpuToml,
            }
            let back: File = toml::from_str(&gpu_toml(&g.hardware(), "gpu")).unwrap();
            assert_eq!(back.gpu.hardware(), g.hardware(), "{g}");
        }
    }
}
