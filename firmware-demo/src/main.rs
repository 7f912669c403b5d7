//! brokerlab firmware demo: runs [`brokerlab_firmware::scenario`] on a Cortex-M3 under QEMU and
//! reports the metrics over defmt (semihosting). On the host this binary is a stub, so that
//! `cargo test --workspace` builds; see README.md.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod firmware;

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("brokerlab-firmware runs on thumbv7m-none-eabi under QEMU: `cargo fw` (see firmware-demo/README.md)");
    std::process::exit(2);
}
