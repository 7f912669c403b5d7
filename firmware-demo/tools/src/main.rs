//! `cargo fw`: builds the firmware demo for thumbv7m-none-eabi, boots it in QEMU (mps2-an385),
//! prints its decoded defmt log and memory figures, and exits with the firmware's status.
//! `cargo fw --json` prints one JSON summary instead (sizes, measurements, allocator check).

use brokerlab_fw_tools as firmware;

fn main() {
    let json = match std::env::args().skip(1).find(|a| a != "--").as_deref() {
        None => false,
        Some("--json") => true,
        Some(_) => {
            eprintln!("usage: cargo fw [--json]");
            std::process::exit(2);
        }
    };
    let run = match firmware::run_firmware() {
        Ok(run) => run,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let code = run.exit_code.unwrap_or(2);
    if json {
        println!("{}", firmware::summary_json(&run));
        std::process::exit(code);
    }
    for frame in &run.frames {
        println!("{:<5} {}", frame.level.unwrap_or(""), frame.message);
    }
    if !run.stderr.trim().is_empty() {
        eprintln!("qemu stderr:\n{}", run.stderr.trim_end());
    }
    let s = run.sizes;
    println!("elf: {}", run.elf.display());
    println!("sizes: .text {} B, .data {} B, .bss {} B", s.text, s.data, s.bss);
    let m = |k: &str| run.measurements.get(k).copied();
    if let (Some(peak), Some(ram)) = (m("stack_peak_bytes"), m("ram_bytes")) {
        let used = s.data + s.bss + peak;
        let left = ram.saturating_sub(used);
        println!(
            "RAM ({}): .data + .bss {} B + peak stack {peak} B = {used} B of {ram} B; headroom {left} B ({:.1} %)",
            firmware::MACHINE,
            s.data + s.bss,
            left as f64 * 100.0 / ram as f64
        );
    }
    if run.allocator_symbols.is_empty() {
        println!("heap: none (no global allocator linked: no __rust_alloc / __rg_alloc / __rdl_alloc symbol)");
    } else {
        println!("heap: ALLOCATOR LINKED: {:?}", run.allocator_symbols);
    }
    println!("firmware exit status: {code}");
    std::process::exit(code);
}
