//! `brokerlab audit`: what the fixed-memory core needs for a configuration, byte by byte, and
//! what the firmware build of it measures on the Cortex-M3 (sections, peak stack, headroom, no
//! heap).

use std::path::{Path, PathBuf};
use std::process::Command;

use brokerlab_core::fleet::limits::BLOCK_TOKENS;
use brokerlab_core::fleet::workload::Workload;
use brokerlab_core::fleet::{
    FifoFleet, FifoLayout, FleetConfig, IndexEntry, LruPod, PendingEntry, PendingRecord, Slot,
};
use serde::Serialize;

use crate::error::{AuditError, CliResult};
use crate::fleet::scenario::Scenario;

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

/// What the firmware measured (the figures `cargo xtask fw` writes).
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Firmware {
    /// QEMU machine.
    pub machine: String,
    /// .text bytes.
    pub text: u64,
    /// .data bytes.
    pub data: u64,
    /// .bss bytes.
    pub bss: u64,
    /// Measurements sent by the firmware.
    pub measurements: std::collections::BTreeMap<String, u64>,
    /// Allocator symbols found in the ELF (must be empty).
    pub allocator_symbols: Vec<String>,
    /// Firmware exit status.
    pub exit_code: i32,
}

/// The audit.
#[derive(Debug, Serialize)]
pub struct Audit {
    /// Scenario audited.
    pub scenario: String,
    /// Pods, capacity, stale delay, queue bound, pending bound.
    pub pods: usize,
    /// Blocks per pod.
    pub capacity: usize,
    /// Structures.
    pub rows: Vec<Row>,
    /// Total bytes of caller-provided buffers.
    pub total_bytes: usize,
    /// Pod bytes per cached block.
    pub pod_bytes_per_block: f64,
    /// All fleet buffers per cached block.
    pub fleet_bytes_per_block: f64,
    /// Most distinct keys the index can hold.
    pub index_max_keys: usize,
    /// Evidence that the core has no heap.
    pub no_heap: Vec<String>,
    /// Firmware figures, when measured.
    pub firmware: Option<Firmware>,
}

fn row(structure: &str, sized_by: String, element: &str, element_bytes: usize, elements: usize) -> Row {
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
            format!("next_pow2(4/3 x N x C) = {}", l.index),
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

/// The fleet's buffers as memory-budget entries.
pub fn fleet_needs(cfg: &FleetConfig, l: &FifoLayout) -> Vec<crate::mem::Need> {
    fleet_rows(cfg, l)
        .into_iter()
        .map(|r| crate::mem::Need { what: r.structure, bytes: r.bytes as u64, lowered_by: r.lowered_by.to_string() })
        .collect()
}

/// Audits `sc` with the given queue and pending bounds.
pub fn audit(sc: &Scenario, queue_per_pod: usize, pending: usize) -> CliResult<Audit> {
    use std::mem::size_of;
    let cfg = sc.fleet;
    let l = FifoLayout::new(&cfg, queue_per_pod, pending).map_err(crate::fleet::run::config_error)?;
    let (n, c) = (cfg.pods, cfg.capacity_blocks);
    let w = &sc.workload;
    let mut rows = fleet_rows(&cfg, &l);
    rows.extend([
        row("workload Zipf CDF", format!("T = {}", w.tenants), "u64", 8, Workload::cdf_len(w)),
        row(
            "prompt tokens buffer",
            format!("max prompt = {} tokens", w.max_prompt_tokens()),
            "u32",
            4,
            w.max_prompt_tokens() as usize,
        ),
        row(
            "block keys buffer",
            format!("max prompt / {BLOCK_TOKENS} = {}", w.max_prompt_tokens() / BLOCK_TOKENS as u64),
            "u64",
            8,
            w.max_prompt_tokens() as usize / BLOCK_TOKENS,
        ),
    ]);
    rows.push(row(
        "Fleet value (this host)",
        "64 pod slots inline (heapless::Vec)".into(),
        "Fleet",
        size_of::<FifoFleet<'_>>(),
        1,
    ));
    let total_bytes = rows.iter().map(|r| r.bytes).sum();
    let pod_bytes = rows[0].bytes + rows[1].bytes;
    let fleet_bytes = l.bytes();
    let no_heap = no_heap_evidence();
    Ok(Audit {
        scenario: sc.name.clone(),
        pods: n,
        capacity: c,
        rows,
        total_bytes,
        pod_bytes_per_block: pod_bytes as f64 / (n * c) as f64,
        fleet_bytes_per_block: fleet_bytes as f64 / (n * c) as f64,
        index_max_keys: if l.index > 0 { l.index / 4 * 3 } else { 0 },
        no_heap,
        firmware: None,
    })
}

/// How we know the core has no heap.
fn no_heap_evidence() -> Vec<String> {
    let lib = include_str!("../../core/src/lib.rs");
    let mut out = vec![];
    let no_std = lib.lines().any(|l| l.trim() == "#![no_std]");
    let alloc = lib.lines().any(|l| l.contains("extern crate alloc"));
    out.push(format!(
        "core/src/lib.rs (compiled into this binary): #![no_std] {}, `extern crate alloc` {}",
        if no_std { "present" } else { "MISSING" },
        if alloc { "PRESENT" } else { "absent" }
    ));
    let tree = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "tree",
            "-p",
            "brokerlab-core",
            "-e",
            "normal,features",
            "--target",
            "thumbv7m-none-eabi",
            "--prefix",
            "none",
        ])
        .output();
    match tree {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let alloc_lines: Vec<&str> =
                text.lines().filter(|l| l.contains("feature \"alloc\"") || l.contains("feature \"std\"")).collect();
            let deps: std::collections::BTreeSet<&str> =
                text.lines().filter(|l| !l.contains("feature")).filter_map(|l| l.split_whitespace().next()).collect();
            out.push(format!(
                "cargo tree -p brokerlab-core --target thumbv7m-none-eabi: {} crates, proc macros included ({}); features `alloc`/`std` enabled: {}",
                deps.len(),
                deps.into_iter().collect::<Vec<_>>().join(", "),
                if alloc_lines.is_empty() { "none".to_string() } else { alloc_lines.join("; ") }
            ));
        }
        _ => out.push("cargo tree: not available here (run from a brokerlab checkout with cargo on PATH)".into()),
    }
    out
}

/// Where `cargo xtask fw` writes the firmware's figures when run from the current directory:
/// `$CARGO_TARGET_DIR/firmware/figures.json`, else `target/firmware/figures.json`.
pub fn default_figures_path() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("firmware").join("figures.json"),
        None => Path::new("target").join("firmware").join("figures.json"),
    }
}

/// The firmware's figures from the file `cargo xtask fw` writes. The binary neither builds the
/// firmware nor knows where a checkout is: the figures are as fresh as the last `cargo xtask fw`.
pub fn firmware(path: &Path) -> CliResult<Firmware> {
    let text = std::fs::read_to_string(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => AuditError::FiguresMissing { path: path.to_path_buf() },
        _ => AuditError::FiguresUnreadable { path: path.to_path_buf(), source },
    })?;
    Ok(serde_json::from_str(&text).map_err(|source| AuditError::FiguresInvalid { path: path.to_path_buf(), source })?)
}

/// The readable audit.
pub fn render(a: &Audit) -> String {
    let mut o = format!("audit of scenario `{}`: {} pods x {} blocks\n\n", a.scenario, a.pods, a.capacity);
    o += &format!(
        "{:<22} {:<44} {:<34} {:>6} {:>10} {:>12}\n",
        "structure", "sized by", "element", "B/elem", "elements", "bytes"
    );
    for r in &a.rows {
        o += &format!(
            "{:<22} {:<44} {:<34} {:>6} {:>10} {:>12}\n",
            r.structure, r.sized_by, r.element, r.element_bytes, r.elements, r.bytes
        );
    }
    o += &format!("{:<22} {:>132}\n\n", "total", a.total_bytes);
    o += &format!(
        "bytes per cached block: pod {:.2} (LRU + key table), whole fleet {:.2} (with queues, index, stale FIFO)\n",
        a.pod_bytes_per_block, a.fleet_bytes_per_block
    );
    o += &format!(
        "bounds: index holds at most {} distinct keys (3/4 of its table); a full queue or stale FIFO is Error::CapacityExceeded\n",
        a.index_max_keys
    );
    o += "\nno heap:\n";
    for e in &a.no_heap {
        o += &format!("  - {e}\n");
    }
    if let Some(f) = &a.firmware {
        let m = |k: &str| f.measurements.get(k).copied().unwrap_or(0);
        let ram = m("ram_bytes");
        let peak = m("stack_peak_bytes");
        let used = f.data + f.bss + peak;
        o += &format!(
            "\nfirmware (cargo xtask fw, QEMU {}), its own scenario (firmware-demo/src/scenario.rs):\n",
            f.machine
        );
        o += &format!("  .text {} B, .data {} B, .bss {} B\n", f.text, f.data, f.bss);
        o += &format!(
            "  peak stack (painted, measured in QEMU) {} B (fleet phase {}, batched-engine phase {}, runner phase {}, \
             flash phase {})\n",
            peak,
            m("stack_peak_fleet_bytes"),
            m("stack_peak_batched_bytes"),
            m("stack_peak_runner_bytes"),
            m("stack_peak_flash_bytes")
        );
        o += &format!(
            "  RAM {} B: used {} B (.data + .bss + peak stack), headroom {} B ({:.1}%)\n",
            ram,
            used,
            ram.saturating_sub(used),
            100.0 * ram.saturating_sub(used) as f64 / ram.max(1) as f64
        );
        o += &format!(
            "  allocator symbols in the ELF: {} ; firmware exit status {}\n",
            if f.allocator_symbols.is_empty() {
                "none (links without a global allocator)".to_string()
            } else {
                f.allocator_symbols.join(", ")
            },
            f.exit_code
        );
    }
    o
}
