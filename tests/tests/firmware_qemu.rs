//! Issue 5: the firmware demo under QEMU must report exactly what the host build of the same
//! scenario computes, and fit the machine's RAM with a margin.
//!
//! Needs the `thumbv7m-none-eabi` target and `qemu-system-arm` (see firmware-demo/README.md).
//! `BROKERLAB_SKIP_QEMU=1` skips these tests (for machines without QEMU); CI never sets it.

#[path = "support/firmware.rs"]
mod firmware;

use std::sync::OnceLock;

use brokerlab_firmware::{FW_MEASUREMENTS, scenario};
use firmware::FirmwareRun;

/// Headroom the stack and the statics must leave in the machine's RAM.
const MIN_RAM_MARGIN_BYTES: u64 = 64 * 1024;

fn skipped() -> bool {
    let skip = std::env::var_os("BROKERLAB_SKIP_QEMU").is_some_and(|v| v == "1");
    if skip {
        eprintln!("BROKERLAB_SKIP_QEMU=1: skipping the QEMU firmware comparison");
    }
    skip
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
    let host = scenario::run(scenario::SEED).unwrap_or_else(|i| panic!("host scenario failed at request {i}"));
    let host: Vec<(String, u64)> = host.as_slice().iter().map(|&(n, v)| (n.to_string(), v)).collect();
    assert!(!host.is_empty());
    assert_eq!(run.metrics, host, "firmware (left) vs host (right)");
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
    // The firmware's own view of its statics agrees with the ELF (.data + .bss + .uninit).
    assert_eq!(statics, s.data + s.bss, "static RAM from the linker symbols vs the ELF sections");
    assert!(peak > 0 && peak < region, "stack peak {peak} outside the painted region {region}");
    assert!(
        statics + peak + MIN_RAM_MARGIN_BYTES <= ram,
        "statics {statics} B + stack {peak} B leave under {MIN_RAM_MARGIN_BYTES} B of the {ram} B of RAM"
    );
}
