//! Step costs: what one engine step costs in time. The engines ask through one seam ([`step`]:
//! [`StepCost::step_ns`] of a [`BatchShape`]); the models behind it are the linear one
//! ([`linear`]: coefficients and the built-in [`Profile`]s) and the physics one below.
//!
//! The physics step cost: the time of one engine step from the model's shape, the GPU's datasheet
//! and the batch the scheduler formed, and the KV capacity of a pod derived the way vLLM sizes it.
//!
//! docs/MODEL.md, "The physics step cost", is the specification: every term, its upstream source,
//! the exact integer evaluation and what it leaves out. Everything here is integers (u64 / u128,
//! efficiency factors in parts per million): the host and the Cortex-M3 firmware get the same bits.
//!
//! * [`ModelDesc`]: layers, widths, heads, MoE, MLA, sliding-window layers, dtypes
//!   ([`model::Model`] names the built-in descriptions).
//! * [`Hardware`]: peak dense FLOP/s per dtype, HBM bytes/s, memory, TP link and PCIe bytes/s
//!   ([`hardware::Gpu`] names the built-in GPUs).
//! * [`Calibration`]: efficiency factors, overheads, the KV reserve and `gpu_memory_utilization`.
//! * [`Physics`] = model + hardware + TP + calibration: [`Physics::step_ns`] of a [`BatchShape`]
//!   and [`Physics::kv_capacity_blocks`]. [`PhysicsProfile`] names the built-in profiles.

pub mod calibration;
pub mod hardware;
pub mod linear;
pub mod model;
pub mod physics;
pub mod profiles;
pub mod shape;
pub mod step;

pub use calibration::{Calibration, SHARED_KV_READ_OFF};
pub use hardware::{Gpu, Hardware};
pub use linear::{LinearCost, Profile};
pub use model::{Dtype, Mla, Model, ModelDesc, Moe, Sliding};
pub use physics::{Physics, StepTerms};
pub use profiles::PhysicsProfile;
pub use shape::BatchShape;
pub use step::{StepCost, StepProfile};

use core::fmt;

/// Most layers of a described model.
pub const MAX_LAYERS: u32 = 1024;
/// Largest hidden size, MLP width, expert width or MLA rank.
pub const MAX_WIDTH: u32 = 1 << 20;
/// Most attention heads (and KV heads).
pub const MAX_HEADS: u32 = 4096;
/// Largest head dimension.
pub const MAX_HEAD_DIM: u32 = 4096;
/// Largest vocabulary.
pub const MAX_VOCAB: u32 = 1 << 24;
/// Most routed experts per MoE layer.
pub const MAX_EXPERTS: u32 = 1 << 16;
/// Most parameters of a described model (10^14 = 100 T): bounds every product below.
pub const MAX_PARAMS: u64 = 100_000_000_000_000;
/// Largest tensor-parallel size.
pub const MAX_TP: u32 = 64;
/// Largest peak rate, FLOP/s (10^18) or bytes/s (10^18).
pub const MAX_RATE: u64 = 1_000_000_000_000_000_000;
/// Largest GPU memory, bytes (2^44 = 16 TiB).
pub const MAX_MEMORY_BYTES: u64 = 1 << 44;
/// Largest overhead term, ns (10 s).
pub const MAX_OVERHEAD_NS: u64 = 10_000_000_000;
/// One, in parts per million: the largest efficiency factor and `gpu_memory_utilization`.
pub const PPM: u32 = 1_000_000;
/// Tokens per KV block (vLLM's CUDA default, as the batched engine's pool).
pub const KV_BLOCK_TOKENS: u64 = crate::fleet::base::limits::BLOCK_TOKENS as u64;

/// Everything that can go wrong in the cost model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// A described value is out of range or inconsistent.
    Invalid {
        /// The field (its name is the key of the host's TOML descriptions).
        field: CostField,
        /// What is accepted.
        expected: &'static str,
    },
    /// An integer computation would overflow (absurd batch sizes or lengths).
    Overflow {
        /// The quantity that overflowed.
        what: CostQuantity,
    },
    /// The weights and the reserve leave no GPU memory for the KV cache.
    NoKvMemory {
        /// Weights per GPU plus the reserve, bytes.
        need_bytes: u64,
        /// `memory_bytes x gpu_memory_utilization`, bytes.
        have_bytes: u64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Invalid { field, expected } => write!(f, "`{field}`: expected {expected}"),
            Error::Overflow { what } => write!(f, "{what} overflows the cost model's integers"),
            Error::NoKvMemory { need_bytes, have_bytes } => write!(
                f,
                "no memory left for the KV cache: weights per GPU + reserve = {need_bytes} bytes, \
                 GPU memory x gpu_memory_utilization = {have_bytes} bytes (raise tp or use a larger GPU)"
            ),
        }
    }
}

impl core::error::Error for Error {}

// The named enums' macro is the fleet's (`base::error`): name, ALL, parse, Display.
pub(crate) use crate::fleet::base::error::named_enum as cost_enum;

cost_enum! {
    /// A described value the cost model checks ([`Error::Invalid`]). The name is the key of the
    /// host's TOML descriptions (`[model]`, `[gpu]`, `[calibration]`).
    pub enum CostField {
        /// [`ModelDesc::layers`].
        Layers => "layers",
        /// [`ModelDesc::hidden`].
        Hidden => "hidden",
        /// [`ModelDesc::heads`].
        Heads => "heads",
        /// [`ModelDesc::kv_heads`].
        KvHeads => "kv_heads",
        /// [`ModelDesc::head_dim`].
        HeadDim => "head_dim",
        /// [`ModelDesc::intermediate`].
        Intermediate => "intermediate",
        /// [`ModelDesc::vocab`].
        Vocab => "vocab",
        /// [`ModelDesc::kv_dtype`].
        KvDtype => "kv_dtype",
        /// [`ModelDesc::extra_params`].
        ExtraParams => "extra_params",
        /// The parameter count as a whole.
        Params => "params",
        /// [`Moe::experts`].
        Experts => "moe.experts",
        /// [`Moe::active`].
        ActiveExperts => "moe.active",
        /// [`Moe::expert_intermediate`].
        ExpertIntermediate => "moe.expert_intermediate",
        /// [`Moe::shared`].
        SharedExperts => "moe.shared",
        /// [`Moe::dense_layers`].
        DenseLayers => "moe.dense_layers",
        /// [`Mla::q_lora_rank`].
        QLoraRank => "mla.q_lora_rank",
        /// [`Mla::kv_lora_rank`].
        KvLoraRank => "mla.kv_lora_rank",
        /// [`Mla::rope_dim`].
        RopeDim => "mla.rope_dim",
        /// [`Mla::nope_dim`].
        NopeDim => "mla.nope_dim",
        /// [`Mla::v_dim`].
        VDim => "mla.v_dim",
        /// [`Sliding::window`].
        Window => "sliding.window",
        /// [`Sliding::layers`].
        SlidingLayers => "sliding.layers",
        /// [`Hardware::flops_bf16`].
        FlopsBf16 => "flops_bf16",
        /// [`Hardware::flops_fp8`].
        FlopsFp8 => "flops_fp8",
        /// [`Hardware::flops_fp4`].
        FlopsFp4 => "flops_fp4",
        /// [`Hardware::hbm_bytes_per_s`].
        HbmBytesPerS => "hbm_bytes_per_s",
        /// [`Hardware::memory_bytes`].
        MemoryBytes => "memory_bytes",
        /// [`Hardware::link_bytes_per_s`].
        LinkBytesPerS => "link_bytes_per_s",
        /// [`Hardware::pcie_bytes_per_s`].
        PcieBytesPerS => "pcie_bytes_per_s",
        /// The tensor-parallel size.
        Tp => "tp",
        /// [`Calibration::compute_ppm`].
        ComputePpm => "compute_ppm",
        /// [`Calibration::moe_ppm`].
        MoePpm => "moe_ppm",
        /// [`Calibration::attention_ppm`].
        AttentionPpm => "attention_ppm",
        /// [`Calibration::memory_ppm`].
        MemoryPpm => "memory_ppm",
        /// [`Calibration::kv_memory_ppm`].
        KvMemoryPpm => "kv_memory_ppm",
        /// [`Calibration::shared_kv_read_ppm`].
        SharedKvReadPpm => "shared_kv_read_ppm",
        /// [`Calibration::link_ppm`].
        LinkPpm => "link_ppm",
        /// [`Calibration::step_ns`].
        StepNs => "step_ns",
        /// [`Calibration::request_ns`].
        RequestNs => "request_ns",
        /// [`Calibration::layer_ns`].
        LayerNs => "layer_ns",
        /// [`Calibration::allreduce_ns`].
        AllreduceNs => "allreduce_ns",
        /// [`Calibration::reserve_bytes`].
        ReserveBytes => "reserve_bytes",
        /// [`Calibration::gpu_memory_utilization_ppm`].
        GpuMemoryUtilizationPpm => "gpu_memory_utilization_ppm",
    }
}

cost_enum! {
    /// A quantity whose computation would overflow ([`Error::Overflow`]).
    pub enum CostQuantity {
        /// A step's duration.
        StepTime => "step time",
        /// A batch's token or attention counts.
        BatchShape => "batch shape",
    }
}

/// `amount` units at `rate` units/s achieved at `ppm` parts per million, in ns, rounded half up:
/// `(amount x 10^15 + rate x ppm / 2) / (rate x ppm)` in u128 (10^15 = 10^9 ns/s x 10^6 ppm).
/// Zero for a zero amount; `rate` and `ppm` are at least 1 (checked where they are described).
pub fn at_rate_ns(amount: u128, rate: u128, ppm: u32) -> Result<u128, Error> {
    if amount == 0 {
        return Ok(0);
    }
    let over = Error::Overflow { what: CostQuantity::StepTime };
    let den = rate.checked_mul(ppm as u128).ok_or(over)?;
    let num = amount.checked_mul(1_000_000_000_000_000).ok_or(over)?;
    num.checked_add(den / 2).map(|n| n / den).ok_or(over)
}

/// Checks `v` against `lo..=hi`.
pub(crate) fn check(v: u64, lo: u64, hi: u64, field: CostField, expected: &'static str) -> Result<(), Error> {
    if v < lo || v > hi { Err(Error::Invalid { field, expected }) } else { Ok(()) }
}

#[cfg(test)]
mod tests;
