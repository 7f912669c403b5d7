//! `cargo fw`: builds the firmware demo for thumbv7m-none-eabi, boots it in QEMU (mps2-an385),
//! prints its decoded defmt log and memory figures, and exits with the firmware's status.

use brokerlab_fw_tools as firmware;

fn main() {
    let run = match firmware::run_firmware() {
        Ok(run) => run,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    for frame in &run.frames {
        println!("{:<5} {}", frame.level.unwrap_or(""), frame.message);
    }
    if !run.stderr.trim().is_empty() {
        eprintln!("qemu stderr:\n{}", run.stderr.trim_end());
    }
    let s = run.sizes;
    println!("elf: {}", run.elf.display());
    println!("sizes: .text {} B, .data {} B, .bss {} B", s.text, s.data, s.bss);
    let code = run.exit_code.unwrap_or(2);
    println!("firmware exit status: {code}");
    std::process::exit(code);
}
