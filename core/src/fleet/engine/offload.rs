//! The KV offload tier of the batched engine (docs/MODEL.md, "The KV offload tier"): its
//! parameters, their limits and defaults, and the PCIe load time. The tier itself is a
//! [`crate::fleet::cache::lru::LruPod`] of block keys per pod; the engine applies its rules
//! (store on compute, lookup at every admission attempt, loads on a FIFO link) in
//! [`super::batched`].

use crate::fleet::base::error::{Error, Field, Quantity};
use crate::fleet::base::limits::{
    BLOCK_TOKENS, MAX_KV_BYTES_PER_TOKEN, MAX_LINK_BYTES_PER_S, MAX_LINK_LATENCY_NS, MAX_POD_BLOCKS, quoting,
};
use crate::fleet::cache::lru::LruPod;

/// PCIe host-to-device bandwidth of a pod, bytes/s: the H100's `pcie_bytes_per_s` (PCIe Gen5 x16,
/// one direction; docs/MODEL.md, "GPU descriptions").
pub const PCIE_BYTES_PER_S: u64 = 64_000_000_000;
/// Fixed cost of one load, ns (BLIS `cpu_dram` base latency, 1 us).
pub const PCIE_LATENCY_NS: u64 = 1_000;
/// Weight of a CPU-tier block in the tiered prefix score, thousandths (llm-d-router
/// `DefaultKVCacheBackendConfig`: cpu 0.8).
pub const CPU_TIER_WEIGHT_MILLI: u32 = 800;
/// KV bytes of one token of the whole pod when the profile names no model (ours: an 8B-class
/// value, 2 x 32 layers x 8 KV heads x 128 x 2 bytes).
pub const KV_BYTES_PER_TOKEN: u64 = 131_072;

/// The offload tier's parameters (one set for every pod). `cpu_capacity` 0: no tier, and the
/// engine is exactly the one without this feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Offload {
    /// CPU-tier blocks per pod C2 (0: off).
    pub cpu_capacity: u32,
    /// Host-to-device link of a pod, bytes/s.
    pub pcie_bytes_per_s: u64,
    /// Added to each load, ns.
    pub pcie_latency_ns: u64,
    /// Weight of a CPU-tier block in the prefix-aware match, thousandths (0 ..= 1000).
    pub cpu_tier_weight_milli: u32,
    /// KV bytes of one token of the whole pod.
    pub kv_bytes_per_token: u64,
}

impl Offload {
    /// No tier; the other fields at their defaults.
    pub const OFF: Offload = Offload {
        cpu_capacity: 0,
        pcie_bytes_per_s: PCIE_BYTES_PER_S,
        pcie_latency_ns: PCIE_LATENCY_NS,
        cpu_tier_weight_milli: CPU_TIER_WEIGHT_MILLI,
        kv_bytes_per_token: KV_BYTES_PER_TOKEN,
    };

    /// Whether the tier exists.
    pub const fn is_on(&self) -> bool {
        self.cpu_capacity > 0
    }

    /// Checks every field against its limit.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field, expected| Err(Error::InvalidConfig { field, expected });
        if self.cpu_capacity as usize > MAX_POD_BLOCKS
            || (self.cpu_capacity > 0 && LruPod::table_len(self.cpu_capacity as usize) == 0)
        {
            return bad(Field::CpuCapacity, "a block count that fits in memory");
        }
        if self.pcie_bytes_per_s == 0 || self.pcie_bytes_per_s > MAX_LINK_BYTES_PER_S {
            return bad(
                Field::PcieBytesPerS,
                quoting!("between 1 and 10000000000000 bytes per second", MAX_LINK_BYTES_PER_S),
            );
        }
        if self.pcie_latency_ns > MAX_LINK_LATENCY_NS {
            return bad(Field::PcieLatencyNs, quoting!("at most 1000000000000 ns", MAX_LINK_LATENCY_NS));
        }
        if self.cpu_tier_weight_milli > 1000 {
            return bad(Field::CpuTierWeight, "a decimal between 0 and 1 with at most three digits after the point");
        }
        if self.kv_bytes_per_token == 0 || self.kv_bytes_per_token > MAX_KV_BYTES_PER_TOKEN {
            return bad(Field::KvBytesPerToken, quoting!("between 1 and 16777216 bytes", MAX_KV_BYTES_PER_TOKEN));
        }
        Ok(())
    }

    /// Duration of a load of `blocks` blocks: latency + ceil(bytes x 10^9 / bandwidth), ns.
    pub fn load_ns(&self, blocks: u64) -> Result<u64, Error> {
        let bytes = blocks as u128 * BLOCK_TOKENS as u128 * self.kv_bytes_per_token as u128;
        let ns = (bytes * 1_000_000_000).div_ceil(self.pcie_bytes_per_s as u128);
        u64::try_from(ns)
            .ok()
            .and_then(|n| n.checked_add(self.pcie_latency_ns))
            .ok_or(Error::Overflow { what: Quantity::StepEndTime })
    }
}

impl Default for Offload {
    fn default() -> Self {
        Offload::OFF
    }
}
