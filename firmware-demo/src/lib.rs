//! The scenario the firmware runs, shared with the host-side comparison test
//! (`tests/tests/firmware_qemu.rs`): one source of truth, compiled into both, so "bit-identical"
//! compares two builds of the same code, not two copies of it.
//!
//! Wire format (defmt, decoded on the host; `display_message()` of each frame):
//! * `BL m <group> <name> <index> <u64>`: a scenario metric, in emission order (`index` is the pod
//!   for per-pod metrics, 0 otherwise);
//! * `BL fw <name> <u64>`: a firmware-only measurement (stack peak, static RAM), see
//!   [`FW_MEASUREMENTS`];
//! * `BL end <metric count> <checks ok>`: the last frame.
#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod scenario;

/// The firmware-only measurements, in the order the firmware sends them: peak stack (painting)
/// overall, during the fleet runs, the batched-engine runs, the runner's crash enumeration and the
/// flash power-cut sweep (the stack is repainted between phases), the painted stack region, static
/// RAM (.data + .bss + .uninit, from the linker symbols), the machine's RAM, the scenario's buffers
/// (`scenario::storage_bytes`), `size_of::<Fleet>()` and `size_of::<BatchedFleet>()` on the target
/// (the fleet values live on the stack).
pub const FW_MEASUREMENTS: [&str; 11] = [
    "stack_peak_bytes",
    "stack_peak_fleet_bytes",
    "stack_peak_batched_bytes",
    "stack_peak_runner_bytes",
    "stack_peak_flash_bytes",
    "stack_region_bytes",
    "static_ram_bytes",
    "ram_bytes",
    "storage_bytes",
    "fleet_struct_bytes",
    "batched_fleet_struct_bytes",
];

/// Receives the scenario's metrics: (group, name, index, value). The firmware sends each one as a
/// defmt frame; the host test collects them.
pub trait Sink {
    /// One metric.
    fn metric(&mut self, group: &'static str, name: &'static str, index: u32, value: u64);
}

impl<F: FnMut(&'static str, &'static str, u32, u64)> Sink for F {
    fn metric(&mut self, group: &'static str, name: &'static str, index: u32, value: u64) {
        self(group, name, index, value)
    }
}
