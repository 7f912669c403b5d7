//! Heterogeneous pools (docs/MODEL.md, "Heterogeneous pools"): a batched fleet as a list of pools,
//! each with its own pod count, role, KV capacity, step cost and per-pod limits. Pods are
//! numbered in pool order. A key a pool leaves out (None) is the fleet's value
//! ([`crate::fleet::FleetConfig::capacity_blocks`] and the fleet's [`BatchedConfig`]).
//!
//! The table is stored once, in the fleet's configuration ([`crate::fleet::FleetConfig::pools`],
//! a borrowed `'static` slice: a firmware `static`, a host allocation that lives for the run);
//! each pod's engine gets its own [`BatchedConfig`] from [`Pool::engine`], the same size as
//! without pools, so no pod engine grows.

use crate::fleet::base::error::named_enum;
use crate::fleet::cost::step::{StepCost, StepProfile};
use crate::fleet::engine::batched::BatchedConfig;

named_enum! {
    /// What a pool's pods do.
    pub enum PoolRole {
        /// Prefill and decode (the aggregated engine).
        Aggregated => "aggregated",
        /// P/D: the prefill pool (remote prefill jobs).
        Prefill => "prefill",
        /// P/D: the decode pool (decode picks).
        Decode => "decode",
    }
}

/// One pool of a batched fleet: `pods` pods of one kind. Every `Option` left None is the fleet's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Pool {
    /// Its name in outputs (unique in the fleet).
    pub name: &'static str,
    /// Pods (>= 1).
    pub pods: u32,
    /// Its role.
    pub role: PoolRole,
    /// KV blocks per pod C.
    pub capacity_blocks: Option<usize>,
    /// Most running requests per pod S.
    pub max_num_seqs: Option<u32>,
    /// Token budget of one step M.
    pub max_num_batched_tokens: Option<u32>,
    /// The step cost and the profile it came from.
    pub cost: Option<(StepProfile, StepCost)>,
    /// Offload tier: CPU-tier blocks per pod.
    pub cpu_capacity: Option<u32>,
    /// Offload tier: host-to-device bytes/s.
    pub pcie_bytes_per_s: Option<u64>,
    /// KV bytes of one token of a pod.
    pub kv_bytes_per_token: Option<u64>,
}

impl Pool {
    /// A pool of `pods` pods named `name` with every other key the fleet's.
    pub const fn new(name: &'static str, pods: u32, role: PoolRole) -> Self {
        Pool {
            name,
            pods,
            role,
            capacity_blocks: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            cost: None,
            cpu_capacity: None,
            pcie_bytes_per_s: None,
            kv_bytes_per_token: None,
        }
    }

    /// KV blocks of each of its pods, the fleet's `capacity` unless it sets its own.
    pub fn capacity(&self, capacity: usize) -> usize {
        self.capacity_blocks.unwrap_or(capacity)
    }

    /// The engine of each of its pods: the fleet's engine `e` with this pool's values.
    pub fn engine(&self, e: &BatchedConfig) -> BatchedConfig {
        let mut x = *e;
        self.apply(&mut x);
        x
    }

    /// Writes this pool's values into `x` (a copy of the fleet's engine).
    pub fn apply(&self, x: &mut BatchedConfig) {
        if let Some(v) = self.max_num_seqs {
            x.max_num_seqs = v;
        }
        if let Some(v) = self.max_num_batched_tokens {
            x.max_num_batched_tokens = v;
        }
        if let Some((p, c)) = self.cost {
            x.profile = p;
            x.cost = c;
        }
        if let Some(v) = self.cpu_capacity {
            x.offload.cpu_capacity = v;
        }
        if let Some(v) = self.pcie_bytes_per_s {
            x.offload.pcie_bytes_per_s = v;
        }
        if let Some(v) = self.kv_bytes_per_token {
            x.offload.kv_bytes_per_token = v;
        }
    }

    /// Running slots of each of its pods (S), the fleet engine `e`'s unless it sets its own.
    pub fn max_num_seqs(&self, e: &BatchedConfig) -> u32 {
        self.max_num_seqs.unwrap_or(e.max_num_seqs)
    }

    /// CPU-tier blocks of each of its pods, the fleet engine `e`'s unless it sets its own.
    pub fn cpu_capacity(&self, e: &BatchedConfig) -> u32 {
        self.cpu_capacity.unwrap_or(e.offload.cpu_capacity)
    }
}

/// The pool of pod `p` in `pools` (pods numbered in pool order), with its index.
pub fn pool_of(pools: &[Pool], p: usize) -> Option<(usize, &Pool)> {
    let mut first = 0usize;
    for (i, pool) in pools.iter().enumerate() {
        let next = first + pool.pods as usize;
        if p < next {
            return Some((i, pool));
        }
        first = next;
    }
    None
}

/// The smallest KV capacity of the pools whose role is `role` (None: no such pool), the fleet's
/// `capacity` standing for a pool that sets none.
pub fn min_capacity(pools: &[Pool], capacity: usize, role: PoolRole) -> Option<usize> {
    pools.iter().filter(|p| p.role == role).map(|p| p.capacity(capacity)).min()
}

/// Pods of the pools whose role is `role`.
pub fn pods_of(pools: &[Pool], role: PoolRole) -> usize {
    pools.iter().filter(|p| p.role == role).map(|p| p.pods as usize).sum()
}
