//! `cargo xtask`: brokerlab's development tasks, the cargo convention (an `xtask` package run
//! through an alias in `.cargo/config.toml`), so building the firmware is a task of the checkout
//! and not of the `brokerlab` binary.
//!
//! `cargo xtask fw` (alias `cargo fw`) builds the firmware demo for thumbv7m-none-eabi, boots it in
//! QEMU (mps2-an385), prints its decoded defmt log and memory figures, writes the figures as JSON
//! to `<target>/firmware/figures.json` (what `brokerlab audit` reads) and exits with the
//! firmware's status. `--json` prints the JSON summary instead of the log.
//!
//! `cargo xtask deps` checks that no import cycle runs between files of different folders in
//! `core/src` and `host/src` (`deps.rs` says how it reads them) and prints the folder layers.

use std::path::PathBuf;

use brokerlab_fw_tools as firmware;

mod deps;

const USAGE: &str = "usage: cargo xtask fw [--json] | cargo xtask deps";

/// Where `cargo xtask fw` writes the firmware's figures (`brokerlab audit --firmware-figures`).
fn figures_path() -> PathBuf {
    firmware::firmware_target_dir().join("figures.json")
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--");
    match args.next().as_deref() {
        Some("fw") => {}
        Some("deps") if args.next().is_none() => {
            // The crates whose files must not import each other in a cycle across folders.
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
            let root = root.canonicalize().unwrap_or(root);
            let roots = [root.join("core/src"), root.join("host/src")];
            match deps::check(&roots) {
                Ok(true) => std::process::exit(0),
                Ok(false) => std::process::exit(1),
                Err(e) => {
                    eprintln!("error: reading the sources: {e}");
                    std::process::exit(2);
                }
            }
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
    let json = match args.next().as_deref() {
        None => false,
        Some("--json") => true,
        Some(_) => {
            eprintln!("{USAGE}");
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
    let summary = firmware::summary_json(&run);
    let path = figures_path();
    if let Err(e) = std::fs::write(&path, format!("{summary}\n")) {
        eprintln!("error: {}: cannot write the firmware figures: {e}", path.display());
        std::process::exit(1);
    }
    if json {
        println!("{summary}");
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
    println!("figures: {} (read by `brokerlab audit`)", path.display());
    println!("firmware exit status: {code}");
    std::process::exit(code);
}
