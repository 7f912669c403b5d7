//! The scenario the firmware runs, shared with the host-side comparison test
//! (`tests/tests/firmware_qemu.rs`): one source of truth, compiled into both, so "bit-identical"
//! compares two builds of the same code, not two copies of it.
//!
//! Wire format (defmt, decoded on the host; `display_message()` of each frame):
//! * `BL m <name> <u64>`: a scenario metric, in [`Metrics`] order;
//! * `BL fw <name> <u64>`: a firmware-only measurement (stack peak, static RAM), see
//!   [`FW_MEASUREMENTS`];
//! * `BL end <metric count> <checks ok>`: the last frame.
#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod scenario;

/// Prefix of every frame the host parses.
pub const FRAME_PREFIX: &str = "BL";

/// The firmware-only measurements, in the order the firmware sends them.
pub const FW_MEASUREMENTS: [&str; 4] = ["stack_peak_bytes", "stack_region_bytes", "static_ram_bytes", "ram_bytes"];

/// Most metrics one scenario reports.
pub const MAX_METRICS: usize = 64;

/// An ordered list of named integer metrics, fixed capacity, no allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metrics {
    items: [(&'static str, u64); MAX_METRICS],
    len: usize,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// An empty list.
    pub const fn new() -> Self {
        Self { items: [("", 0); MAX_METRICS], len: 0 }
    }

    /// Appends a metric. Panics past [`MAX_METRICS`] (a programming error, caught by the tests).
    pub fn push(&mut self, name: &'static str, value: u64) {
        assert!(self.len < MAX_METRICS, "too many metrics");
        self.items[self.len] = (name, value);
        self.len += 1;
    }

    /// The metrics, in push order.
    pub fn as_slice(&self) -> &[(&'static str, u64)] {
        &self.items[..self.len]
    }

    /// The value of a metric by name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.as_slice().iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
    }
}
