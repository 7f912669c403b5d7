//! A GPU as the step cost sees it: dense peak rates per dtype, HBM bandwidth, memory, and the links
//! tensor parallelism (and, later, KV offload) use. Datasheet figures with their sources in
//! docs/MODEL.md, "The physics step cost"; "dense" = without 2:4 sparsity (NVIDIA prints the
//! sparse figure, twice the dense one, with an asterisk); link rates per direction.

use super::{CostField, Error, MAX_MEMORY_BYTES, MAX_RATE, check, cost_enum};
use crate::fleet::base::limits::quoting;

/// One GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Hardware {
    /// Dense bf16/fp16 tensor-core peak, FLOP/s.
    pub flops_bf16: u64,
    /// Dense fp8 tensor-core peak, FLOP/s (0 = no fp8: fp8 weights compute at the bf16 rate).
    pub flops_fp8: u64,
    /// Dense fp4 tensor-core peak, FLOP/s (0 = none: MXFP4 weights compute at the bf16 rate).
    pub flops_fp4: u64,
    /// HBM (device memory) bandwidth, bytes/s.
    pub hbm_bytes_per_s: u64,
    /// Device memory as the serving engine sees it (vLLM's `total_gpu_memory`), bytes.
    pub memory_bytes: u64,
    /// GPU-to-GPU bandwidth for tensor parallelism, bytes/s per direction (NVLink, else PCIe).
    pub link_bytes_per_s: u64,
    /// Host link, bytes/s per direction (for KV offload; not used by the step cost yet).
    pub pcie_bytes_per_s: u64,
}

impl Hardware {
    /// Checks every field against its limit.
    pub fn validate(&self) -> Result<(), Error> {
        use CostField as F;
        let rate = quoting!("between 1 and 1000000000000000000", MAX_RATE);
        let opt = quoting!("0 (none) to 1000000000000000000", MAX_RATE);
        check(self.flops_bf16, 1, MAX_RATE, F::FlopsBf16, rate)?;
        check(self.flops_fp8, 0, MAX_RATE, F::FlopsFp8, opt)?;
        check(self.flops_fp4, 0, MAX_RATE, F::FlopsFp4, opt)?;
        check(self.hbm_bytes_per_s, 1, MAX_RATE, F::HbmBytesPerS, rate)?;
        check(self.link_bytes_per_s, 1, MAX_RATE, F::LinkBytesPerS, rate)?;
        check(self.pcie_bytes_per_s, 1, MAX_RATE, F::PcieBytesPerS, rate)?;
        let mem = quoting!("between 1 and 17592186044416 bytes (16 TiB)", MAX_MEMORY_BYTES);
        check(self.memory_bytes, 1, MAX_MEMORY_BYTES, F::MemoryBytes, mem)
    }
}

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const T: u64 = 1_000_000_000_000;
const G: u64 = 1_000_000_000;

cost_enum! {
    /// Built-in GPUs.
    pub enum Gpu {
        /// NVIDIA H100 SXM 80 GB.
        H100 => "h100",
        /// NVIDIA H200 SXM 141 GB.
        H200 => "h200",
        /// NVIDIA A100 SXM 80 GB.
        A100 => "a100",
        /// NVIDIA B200 (HGX, 1000 W).
        B200 => "b200",
        /// NVIDIA L40S 48 GB (PCIe, no NVLink).
        L40s => "l40s",
        /// NVIDIA H20 96 GB (calibration points only).
        H20 => "h20",
        /// NVIDIA H800 SXM 80 GB (calibration points only).
        H800 => "h800",
    }
}

impl Gpu {
    /// The datasheet description.
    pub const fn hardware(self) -> Hardware {
        match self {
            // vLLM logs total_gpu_memory 79.18 GiB on an H100 80GB (llm-d-benchmark's empirical
            // table): 7918 x 2^30 / 100 bytes.
            Gpu::H100 => Hardware {
                flops_bf16: 989_500 * G,
                flops_fp8: 1_979 * T,
                flops_fp4: 0,
                hbm_bytes_per_s: 3_350 * G,
                memory_bytes: 7918 * GIB / 100,
                link_bytes_per_s: 450 * G,
                pcie_bytes_per_s: 64 * G,
            },
            Gpu::H200 => Hardware { hbm_bytes_per_s: 4_800 * G, memory_bytes: 143_771 * MIB, ..Gpu::H100.hardware() },
            Gpu::A100 => Hardware {
                flops_bf16: 312 * T,
                flops_fp8: 0,
                flops_fp4: 0,
                hbm_bytes_per_s: 2_039 * G,
                memory_bytes: 81_920 * MIB,
                link_bytes_per_s: 300 * G,
                pcie_bytes_per_s: 32 * G,
            },
            Gpu::B200 => Hardware {
                flops_bf16: 2_250 * T,
                flops_fp8: 4_500 * T,
                flops_fp4: 9_000 * T,
                hbm_bytes_per_s: 7_700 * G,
                memory_bytes: 180 * GIB,
                link_bytes_per_s: 900 * G,
                pcie_bytes_per_s: 64 * G,
            },
            Gpu::L40s => Hardware {
                flops_bf16: 362_050 * G,
                flops_fp8: 733 * T,
                flops_fp4: 0,
                hbm_bytes_per_s: 864 * G,
                memory_bytes: 46_068 * MIB,
                link_bytes_per_s: 32 * G,
                pcie_bytes_per_s: 32 * G,
            },
            Gpu::H20 => Hardware {
                flops_bf16: 148 * T,
                flops_fp8: 296 * T,
                flops_fp4: 0,
                hbm_bytes_per_s: 4_000 * G,
                memory_bytes: 96 * GIB,
                link_bytes_per_s: 450 * G,
                pcie_bytes_per_s: 64 * G,
            },
            Gpu::H800 => Hardware { link_bytes_per_s: 200 * G, ..Gpu::H100.hardware() },
        }
    }
}
