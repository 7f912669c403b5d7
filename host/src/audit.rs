//! `brokerlab audit`: what the fixed-memory core needs for a configuration, byte by byte, and
//! what the firmware build of it measures on the Cortex-M3 (sections, peak stack, headroom, no
//! heap).

use std::path::{Path, PathBuf};
use std::process::Command;

use brokerlab_core::fleet::limits::BLOCK_TOKENS;
use brokerlab_core::fleet::workload::Workload;
use brokerlab_core::fleet::{FifoFleet, FifoLayout};
use serde::Serialize;

use crate::error::{AuditError, CliResult};
use crate::fleet::run::sizes::{fleet_rows, row};
use crate::fleet::scenario::Scenario;

pub use crate::fleet::run::sizes::Row;

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
        format!("{} pod slots inline (heapless::Vec)", brokerlab_core::fleet::limits::MAX_PODS),
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
        // One slot per key, ceil(N / 64) entries per slot.
        index_max_keys: if l.index > 0 { l.index / n.div_ceil(64).max(1) / 4 * 3 } else { 0 },
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
