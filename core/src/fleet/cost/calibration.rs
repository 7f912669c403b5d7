//! The numbers physics does not give: achieved fractions of the peaks, fixed overheads, the memory
//! vLLM keeps outside the KV cache. [`Calibration::PUBLISHED`] is fitted by the host
//! (`brokerlab fleet cost-check`, docs/MODEL.md "Calibration and validation") on published
//! measurements and checked there to be exactly what that fit gives; [`Calibration::PRIOR`] is
//! where the fit starts and what it falls back to for a factor no point informs.

use super::{CostField, Error, MAX_MEMORY_BYTES, MAX_OVERHEAD_NS, PPM, check};
use crate::fleet::base::limits::quoting;

/// [`Calibration::shared_kv_read_ppm`] off: every decoding request reads its whole context.
pub const SHARED_KV_READ_OFF: u32 = PPM;

/// Calibration factors of a [`super::Physics`] profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Calibration {
    /// Achieved fraction of the GEMM peak on dense matrices (attention projections, dense MLPs,
    /// shared experts, routers, logits), ppm.
    pub compute_ppm: u32,
    /// Achieved fraction of the GEMM peak on routed-expert matrices (grouped GEMMs), ppm.
    pub moe_ppm: u32,
    /// Achieved fraction of the bf16 peak in attention (QK^T and PV), ppm.
    pub attention_ppm: u32,
    /// Achieved fraction of the HBM bandwidth streaming the weights (and the KV cache when
    /// `kv_memory_ppm` is 0), ppm.
    pub memory_ppm: u32,
    /// Achieved fraction of the HBM bandwidth reading and writing the KV cache in attention, ppm;
    /// 0: the same as `memory_ppm` (every profile before the split, and `fleet calibrate`'s).
    /// Paged attention reads scattered 16-token blocks, weights stream whole matrices: BLIS's
    /// trained-physics model prices the two with separate coefficients too (docs/MODEL.md).
    pub kv_memory_ppm: u32,
    /// Shared-prefix reads (docs/MODEL.md "Shared-prefix reads"): the fraction of a full HBM read
    /// a decode step charges for a KV block that another running request of the pod also holds,
    /// for every holder after the first (the first pays in full), ppm. 1,000,000: every request
    /// reads its whole context (off, every profile's default); 0: each such block read once per
    /// step. An empirical factor (L2 hits of requests reading the same blocks in one kernel), not
    /// a rule of vLLM's: no kernel measurement supports it (docs/PUBLISHED.md, "Shared-prefix
    /// decode reads").
    pub shared_kv_read_ppm: u32,
    /// Achieved fraction of the TP link bandwidth in all-reduces, ppm.
    pub link_ppm: u32,
    /// Fixed cost of a step (scheduling, input preparation, sampling), ns (at least 1).
    pub step_ns: u64,
    /// Cost per request in the step, ns.
    pub request_ns: u64,
    /// Cost per layer per step (kernel launches, norms, rotary), ns.
    pub layer_ns: u64,
    /// Latency of one all-reduce under TP (besides its bytes), ns.
    pub allreduce_ns: u64,
    /// GPU memory outside the weights and the KV cache per GPU (activation peak of the profile
    /// run, NCCL and CUDA context), bytes.
    pub reserve_bytes: u64,
    /// vLLM's `--gpu-memory-utilization`, ppm (default 0.9).
    pub gpu_memory_utilization_ppm: u32,
}

impl Calibration {
    /// Where the fit starts, and the priors it is pulled towards (docs/MODEL.md: each value's source):
    /// BLIS v0.7.10 `hardware_config.json` H100 `mfuPrefill` 0.45 for the compute factors;
    /// aiconfigurator's `mem_bw_empirical_scaling_factor` 0.8 for memory; InferSim's NVLink
    /// derating 0.8 for the link; BLIS v0.7.10 `defaults.yaml` trained-physics beta7 (126.02 us per
    /// step), beta6 (4.417 us per request), beta5 (32.10 us per layer); aiconfigurator's
    /// `p2p_latency` 10 us per all-reduce; vLLM's default utilization 0.9; no reserve.
    pub const PRIOR: Calibration = Calibration {
        compute_ppm: 450_000,
        moe_ppm: 450_000,
        attention_ppm: 450_000,
        memory_ppm: 800_000,
        kv_memory_ppm: 0,
        shared_kv_read_ppm: SHARED_KV_READ_OFF,
        link_ppm: 800_000,
        step_ns: 126_025,
        request_ns: 4_417,
        layer_ns: 32_095,
        allreduce_ns: 10_000,
        reserve_bytes: 0,
        gpu_memory_utilization_ppm: 900_000,
    };

    /// The fit on the published calibration points (host `fleet::cost::published`), the
    /// overheads and the link at their priors, the reserve fitted on llm-d's 461,376-token
    /// Llama-3.1-70B TP4 pod.
    pub const PUBLISHED: Calibration = Calibration {
        compute_ppm: 650_362,
        attention_ppm: 946_593,
        moe_ppm: 344_585,
        memory_ppm: 718_487,
        kv_memory_ppm: 0,
        reserve_bytes: 3_443_559_334,
        ..Calibration::PRIOR
    };

    /// Checks every field against its limit.
    pub fn validate(&self) -> Result<(), Error> {
        use CostField as F;
        let ppm = quoting!("between 1 and 1000000 parts per million (an efficiency of at most 100%)", PPM);
        for (v, f) in [
            (self.compute_ppm, F::ComputePpm),
            (self.moe_ppm, F::MoePpm),
            (self.attention_ppm, F::AttentionPpm),
            (self.memory_ppm, F::MemoryPpm),
            (self.link_ppm, F::LinkPpm),
        ] {
            check(v as u64, 1, PPM as u64, f, ppm)?;
        }
        let ns = quoting!("0 to 10000000000 ns", MAX_OVERHEAD_NS);
        let step = quoting!("between 1 and 10000000000 ns (time must advance)", MAX_OVERHEAD_NS);
        let kv = quoting!("0 (the same as memory_ppm) to 1000000 parts per million", PPM);
        check(self.kv_memory_ppm as u64, 0, PPM as u64, F::KvMemoryPpm, kv)?;
        let shared = quoting!("0 (each shared block read once per step) to 1000000 (off) parts per million", PPM);
        check(self.shared_kv_read_ppm as u64, 0, PPM as u64, F::SharedKvReadPpm, shared)?;
        check(self.step_ns, 1, MAX_OVERHEAD_NS, F::StepNs, step)?;
        check(self.request_ns, 0, MAX_OVERHEAD_NS, F::RequestNs, ns)?;
        check(self.layer_ns, 0, MAX_OVERHEAD_NS, F::LayerNs, ns)?;
        check(self.allreduce_ns, 0, MAX_OVERHEAD_NS, F::AllreduceNs, ns)?;
        let mem = quoting!("0 to 17592186044416 bytes", MAX_MEMORY_BYTES);
        check(self.reserve_bytes, 0, MAX_MEMORY_BYTES, F::ReserveBytes, mem)?;
        let util = quoting!("between 1 and 1000000 parts per million", PPM);
        check(self.gpu_memory_utilization_ppm as u64, 1, PPM as u64, F::GpuMemoryUtilizationPpm, util)
    }
}
