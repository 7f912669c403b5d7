//! Issue 5: the firmware demo under QEMU must report exactly what the host build of the same
//! scenario computes, and fit the machine's RAM with a margin.
//!
//! Needs the `thumbv7m-none-eabi` target and `qemu-system-arm` (see firmware-demo/README.md).
//! `BROKERLAB_SKIP_QEMU=1` skips these tests (for machines without QEMU); CI never sets it.

use brokerlab_fw_tools as firmware;

use std::sync::OnceLock;

use brokerlab_core::fleet::stats::LogHistogram;
use brokerlab_core::fleet::{IndexEntry, PendingEntry, PendingRecord, Slot};
use brokerlab_core::runner::harness::SimWorld;
use brokerlab_firmware::FW_MEASUREMENTS;
use brokerlab_firmware::scenario::{self, Storage};
use firmware::{FirmwareRun, Metric};

/// Headroom the stack and the statics must leave in the machine's RAM.
const MIN_RAM_MARGIN_BYTES: u64 = 64 * 1024;

fn skipped() -> bool {
    let skip = std::env::var_os("BROKERLAB_SKIP_QEMU").is_some_and(|v| v == "1");
    if skip {
        eprintln!("BROKERLAB_SKIP_QEMU=1: skipping the QEMU firmware comparison");
    }
    skip
}

/// The same scenario through the host build of core, with heap buffers of the same lengths.
fn host_metrics() -> Vec<Metric> {
    let mut slots = vec![Slot::default(); scenario::SLOTS_LEN];
    let mut tables = vec![0u32; scenario::TABLES_LEN];
    let mut queues = vec![0u64; scenario::QUEUES_LEN];
    let mut index = vec![IndexEntry::default(); scenario::INDEX_LEN];
    let mut pending = vec![PendingRecord::default(); scenario::PENDING_LEN];
    let mut pending_table = vec![PendingEntry::default(); scenario::PENDING_TABLE_LEN];
    let mut tokens = vec![0u32; scenario::TOKENS_LEN];
    let mut zipf_cdf = vec![0u64; scenario::ZIPF_CDF_LEN];
    let mut latencies = vec![0u64; scenario::LATENCIES_LEN];
    let mut histograms = vec![LogHistogram::default(); scenario::HISTOGRAMS_LEN];
    let mut runner_log = vec![0u8; scenario::RUNNER_LOG_BYTES];
    let mut world = Box::new(SimWorld::new());
    let mut flash = vec![0u8; scenario::FLASH_LOG_BYTES];
    let mut storage = Storage {
        slots: &mut slots,
        tables: &mut tables,
        queues: &mut queues,
        index: &mut index,
        pending: &mut pending,
        pending_table: &mut pending_table,
        tokens: &mut tokens,
        zipf_cdf: &mut zipf_cdf,
        latencies: &mut latencies,
        histograms: &mut histograms,
        runner_log: &mut runner_log,
        world: &mut world,
        flash: &mut flash,
    };
    let mut out = Vec::new();
    let mut sink = |g: &'static str, n: &'static str, i: u32, v: u64| out.push((g.to_string(), n.to_string(), i, v));
    if let Err(e) = scenario::run(&mut storage, &mut sink) {
        panic!("host scenario failed: run {}, request {}: {}", e.run, e.request, e.error);
    }
    out
}

/// One build and one QEMU run shared by every test of this file.
fn run() -> &'static FirmwareRun {
    static RUN: OnceLock<Result<FirmwareRun, String>> = OnceLock::new();
    match RUN.get_or_init(firmware::run_firmware) {
        Ok(run) => run,
        Err(e) => panic!("firmware run failed: {e}"),
    }
}

#[test]
fn firmware_exits_successfully() {
    if skipped() {
        return;
    }
    let run = run();
    for f in &run.frames {
        eprintln!("{:<5} {}", f.level.unwrap_or(""), f.message);
    }
    let errors: Vec<_> = run.frames.iter().filter(|f| f.level == Some("error")).collect();
    assert!(errors.is_empty(), "firmware logged errors: {errors:?}");
    assert_eq!(run.end.map(|(_, ok)| ok), Some(true), "no `BL end .. true` frame; stderr: {}", run.stderr);
    assert_eq!(run.exit_code, Some(0), "semihosting exit status; stderr: {}", run.stderr);
}

#[test]
fn firmware_metrics_are_bit_identical_with_the_host() {
    if skipped() {
        return;
    }
    let run = run();
    let host = host_metrics();
    assert!(host.len() > 100, "the scenario reports every run's metrics");
    for (f, h) in run.metrics.iter().zip(&host) {
        assert_eq!(f, h, "firmware (left) vs host (right)");
    }
    assert_eq!(run.metrics.len(), host.len(), "metric count, firmware vs host");
    // Each run's digest covers every field of every per-request outcome.
    let digests = host.iter().filter(|m| m.1 == "outcome_digest").count();
    assert_eq!(digests, scenario::RUNS.len());
    // The autoscaled run did scale, both ways (so the comparison covers the autoscaler).
    let scaled = |name: &str| host.iter().find(|m| m.0 == "prefix-aware-autoscale" && m.1 == name).map(|m| m.3);
    assert!(scaled("scale_outs").is_some_and(|n| n > 0), "autoscaled run: {:?}", scaled("scale_outs"));
    assert!(scaled("scale_ins").is_some_and(|n| n > 0), "autoscaled run: {:?}", scaled("scale_ins"));
    // The runner's crash enumeration ran on both sides, with no violation.
    for (group, _) in scenario::RUNNER_RUNS {
        let get = |name: &str| host.iter().find(|m| m.0 == group && m.1 == name).map(|m| m.3);
        assert!(get("crash_points").is_some_and(|p| p > 0), "{group}: crash points");
        assert_eq!(get("violations"), Some(0), "{group}: violations");
    }
    assert_eq!(run.end.map(|(n, _)| n), Some(host.len() as u64), "metric count in the end frame");
}

#[test]
fn firmware_fits_the_machine_with_margin() {
    if skipped() {
        return;
    }
    let run = run();
    let m = |name: &str| -> u64 { *run.measurements.get(name).unwrap_or_else(|| panic!("no `BL fw {name}` frame")) };
    for name in FW_MEASUREMENTS {
        m(name);
    }
    let (peak, region, statics, ram) =
        (m("stack_peak_bytes"), m("stack_region_bytes"), m("static_ram_bytes"), m("ram_bytes"));
    let s = run.sizes;
    eprintln!(
        "firmware {}: .text {} B, .data {} B, .bss {} B; stack peak {peak} B of {region} B; RAM {ram} B",
        run.elf.display(),
        s.text,
        s.data,
        s.bss
    );
    // No heap: nothing in the firmware links a global allocator.
    assert!(run.allocator_symbols.is_empty(), "allocator symbols in the firmware: {:?}", run.allocator_symbols);
    // The firmware's own view of its statics agrees with the ELF (.data + .bss + .uninit).
    assert_eq!(statics, s.data + s.bss, "static RAM from the linker symbols vs the ELF sections");
    assert!(peak > 0 && peak < region, "stack peak {peak} outside the painted region {region}");
    assert!(
        statics + peak + MIN_RAM_MARGIN_BYTES <= ram,
        "statics {statics} B + stack {peak} B leave under {MIN_RAM_MARGIN_BYTES} B of the {ram} B of RAM"
    );
}
