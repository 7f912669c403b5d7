//! The FIFO fleet's caller-provided buffers, one row per structure with the formula it is sized
//! by: the audit's table (`brokerlab audit`) and the memory budget's estimate ([`crate::mem`])
//! both come from here.

use brokerlab_core::fleet::{FifoLayout, FleetConfig, IndexEntry, LruPod, PendingEntry, PendingRecord, Slot};
use serde::Serialize;

/// One core structure of the audited configuration.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Structure.
    pub structure: String,
    /// Capacity parameters it is sized from.
    pub sized_by: String,
    /// Element type.
    pub element: String,
    /// Bytes per element.
    pub element_bytes: usize,
    /// Elements.
    pub elements: usize,
    /// Bytes.
    pub bytes: usize,
    /// The flag (scenario key) that lowers it; in the memory-budget message, not in the audit.
    #[serde(skip)]
    pub lowered_by: &'static str,
}

/// A row of `elements` x `element_bytes` bytes.
pub fn row(structure: &str, sized_by: String, element: &str, element_bytes: usize, elements: usize) -> Row {
    Row {
        structure: structure.into(),
        sized_by,
        element: element.into(),
        element_bytes,
        elements,
        bytes: element_bytes.saturating_mul(elements),
        lowered_by: "",
    }
}

/// What lowers each structure of [`fleet_rows`], flag first, scenario key second.
const LOWERED_BY: [&str; 8] = [
    "--capacity or --pods (fleet.capacity, fleet.pods)",
    "--capacity or --pods (fleet.capacity, fleet.pods)",
    "--cpu-capacity (fleet.cpu_capacity)",
    "--cpu-capacity (fleet.cpu_capacity)",
    "--pods (fleet.pods); it doubles while a queue overflows: a lower arrival rate",
    "--index pod-tables (fleet.index), or --capacity, --pods",
    "--stale (fleet.stale)",
    "--stale (fleet.stale)",
];

/// The fleet's caller-provided buffers for layout `l`, one row per structure: the audit's table
/// and the memory budget's estimate ([`crate::mem`]) both come from here.
pub fn fleet_rows(cfg: &FleetConfig, l: &FifoLayout) -> Vec<Row> {
    use std::mem::size_of;
    let (n, c) = (cfg.pods, cfg.capacity_blocks);
    let mut rows = vec![
        row("pod LRU slots", format!("N={n} x C={c}"), "Slot {key u64, prev u32, next u32}", size_of::<Slot>(), n * c),
        row(
            "pod key tables",
            format!("N x smallest pow2 > 2C = {n} x {}", LruPod::table_len(c)),
            "u32 (tag | slot+1)",
            4,
            l.tables_len(),
        ),
        row(
            "CPU-tier slots",
            format!("N x C2 = {n} x {}", l.cpu_slots_per_pod),
            "Slot",
            size_of::<Slot>(),
            n * l.cpu_slots_per_pod,
        ),
        row("CPU-tier key tables", format!("N x {}", l.cpu_table_per_pod), "u32", 4, n * l.cpu_table_per_pod),
        row("pod FIFO queues", format!("N x queue bound {}", l.queue_per_pod), "u64 finish ns", 8, n * l.queue_per_pod),
        row(
            "block index",
            index_sized_by(n, l.index),
            "IndexEntry {key u64, mask u64}",
            size_of::<IndexEntry>(),
            l.index,
        ),
        row(
            "stale-evict FIFO",
            format!("pending bound {} (k = {})", l.pending, cfg.view().stale_delay),
            "PendingRecord",
            size_of::<PendingRecord>(),
            l.pending,
        ),
        row(
            "stale-evict table",
            format!("next_pow2(4/3 x {}) = {}", l.pending, l.pending_table),
            "PendingEntry",
            size_of::<PendingEntry>(),
            l.pending_table,
        ),
    ];
    for (r, by) in rows.iter_mut().zip(LOWERED_BY) {
        r.lowered_by = by;
    }
    rows
}

/// How the block index is sized: a slot per key, one 16-byte entry per 64 pods in a slot.
fn index_sized_by(pods: usize, entries: usize) -> String {
    let words = pods.div_ceil(64).max(1);
    if words == 1 {
        format!("next_pow2(4/3 x N x C) = {entries}")
    } else {
        format!("next_pow2(4/3 x N x C) x ceil(N/64) = {} x {words}", entries / words)
    }
}

/// The fleet's buffers as memory-budget entries.
pub fn fleet_needs(cfg: &FleetConfig, l: &FifoLayout) -> Vec<crate::mem::Need> {
    fleet_rows(cfg, l)
        .into_iter()
        .map(|r| crate::mem::Need { what: r.structure, bytes: r.bytes as u64, lowered_by: r.lowered_by.to_string() })
        .collect()
}
