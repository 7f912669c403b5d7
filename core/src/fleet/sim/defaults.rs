//! The model's defaults, in one place: [`FleetConfig::new`](super::FleetConfig::new), the
//! host's flags (clap `default_value_t`) and its scenario files (serde `default`) all read these,
//! so a default changed here changes everywhere at once.

use super::view::{IndexKind, ViewConfig};
use crate::fleet::engine::fifo::{CacheMode, FifoConfig, TouchOrder};
use crate::fleet::route::kind::RouterKind;

/// Router of a scenario file that names none.
pub const ROUTER: RouterKind = RouterKind::PrefixAware;
/// Load penalty of the prefix-aware router, blocks per queued request.
pub const ALPHA: f64 = 1.0;
/// Stale-evict delay k, requests (0: the index is exact).
pub const STALE_DELAY: u32 = 0;
/// Touch order (vLLM frees a request's blocks tail first).
pub const ORDER: TouchOrder = TouchOrder::TailFirst;
/// Prefill cost, ns per uncached prompt token.
pub const T_PREFILL_NS: u64 = 50_000;
/// Decode cost, ns per output token.
pub const T_DECODE_NS: u64 = 0;
/// Prefix-aware index.
pub const INDEX: IndexKind = IndexKind::PodTables;
/// Blocks per pod in the CPU tier (0: no second tier).
pub const CPU_CAPACITY_BLOCKS: usize = 0;
/// Cost of loading a CPU-tier block, ns per token.
pub const T_CPU_NS: u64 = 5_000;
/// Per-pod caches.
pub const CACHE: CacheMode = CacheMode::Local;

/// The FIFO engine with every default above.
pub const FIFO: FifoConfig = FifoConfig {
    t_prefill_ns: T_PREFILL_NS,
    t_decode_ns: T_DECODE_NS,
    order: ORDER,
    cpu_capacity_blocks: CPU_CAPACITY_BLOCKS,
    t_cpu_ns: T_CPU_NS,
    cache: CACHE,
};
/// The routers' view with every default above: exact, from the pods' own tables.
pub const VIEW: ViewConfig =
    ViewConfig { index: INDEX, stale_delay: STALE_DELAY, event_delay_ns: 0, speculative_ttl_ns: 0 };

/// Autoscaler evaluation period, ns.
pub const SCALE_INTERVAL_NS: u64 = 10_000_000_000;
/// Scale out above this mean queue length, thousandths.
pub const SCALE_UP_MILLI: u32 = 4_000;
/// Scale in below this mean queue length, thousandths.
pub const SCALE_DOWN_MILLI: u32 = 500;
/// Time from a scale-out decision until the new pod takes requests, ns.
pub const SCALE_STARTUP_NS: u64 = 30_000_000_000;

/// Workload seed.
pub const WORKLOAD_SEED: u64 = 1;
/// Users per tenant.
pub const USERS_PER_TENANT: u32 = 1;
/// Header tokens of the timestamp-first layout (one block).
pub const HEADER_TOKENS: u32 = 16;
