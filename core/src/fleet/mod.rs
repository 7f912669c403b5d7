//! The fleet simulator core: chained block keys, fixed-capacity LRU pods, the block index with a
//! stale-evict delay, the routers and the FIFO timing model.
//!
//! The model is specified in `docs/MODEL.md`; every rule lives here once and the host, the
//! firmware and the tests call it. Every buffer is provided by the caller ("bring your own
//! storage", as in smoltcp), so the host can run pods of millions of blocks while this crate never
//! allocates. [`FleetLayout`] says how large each buffer must be.

pub mod approx;
pub mod batched;
pub mod engine;
pub mod fixmath;
pub mod hash;
pub mod index;
pub mod keys;
pub mod limits;
pub mod pipeline;
pub mod pod;
pub mod router;
pub mod scale;
pub mod server;
pub mod sim;
pub mod stats;
mod table;
pub mod vllm;
pub mod workload;

pub use approx::ApproxIndex;
pub use batched::{BatchedFleet, EngineBuffers, EngineCaches, EngineLayout};
pub use engine::{
    Completion, EngineConfig, EngineEvents, EngineStats, KvBlock, PodBuffers, PodLoad, Profile, ReqSlot, StepCost,
};
pub use index::{BlockIndex, IndexEntry, PendingEntry, PendingEvicts, PendingRecord};
pub use pipeline::{
    Evaluation, FilterKind, MAX_FILTERS, MAX_SCORERS, PickerKind, Policy, PrefixSource, RouterBuffers, RouterLayout,
    RouterParams, RouterSpec, ScorerKind, ShippedRouter, WeightedScorer,
};
pub use pod::{CacheEvents, LruPod, Slot};
pub use router::{AnyRouter, Holders, KeyHolders, Route, RouteView, Router, RouterKind};
pub use scale::{ScaleAction, ScalePolicy, ScaleState};
pub use server::FifoServer;
pub use sim::{
    CacheMode, Fleet, FleetBuffers, FleetConfig, FleetLayout, FleetTotals, IndexKind, Outcome, Pod, PodCaches,
    PodStats, Request, TouchOrder,
};

use core::fmt;

/// Everything that can go wrong in the fleet core. Small on purpose: each variant names the field,
/// buffer or limit involved so the host can turn it into a message that says what to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is out of range.
    InvalidConfig {
        /// The configuration field (CLI flag / scenario key).
        field: &'static str,
        /// What is accepted.
        expected: &'static str,
    },
    /// A caller-provided buffer has the wrong length.
    BufferSize {
        /// Which buffer.
        buffer: &'static str,
        /// The length required by [`FleetLayout`].
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A fixed capacity was exhausted while running (the caller may retry with a larger buffer).
    CapacityExceeded {
        /// The named limit that was hit.
        limit: &'static str,
        /// Its capacity.
        capacity: usize,
    },
    /// A request is inconsistent with the model.
    InvalidRequest {
        /// The request field.
        field: &'static str,
        /// What is accepted.
        expected: &'static str,
    },
    /// A trace line has fewer hash ids than its full blocks need.
    TooFewHashIds {
        /// Hash ids needed to cover `floor(input_length / 16)` blocks.
        needed: usize,
        /// Hash ids present.
        got: usize,
    },
    /// Requests must arrive in non-decreasing time order.
    ArrivalOutOfOrder {
        /// Arrival of the previous request, ns.
        previous_ns: u64,
        /// Arrival of this request, ns.
        arrival_ns: u64,
    },
    /// An integer computation would overflow `u64` (absurd lengths or times).
    Overflow {
        /// The quantity that overflowed.
        what: &'static str,
    },
    /// A previous call failed half-way; this fleet's state is no longer meaningful.
    Poisoned,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::InvalidConfig { field, expected } => write!(f, "invalid {field}: expected {expected}"),
            Error::BufferSize { buffer, expected, got } => {
                write!(f, "buffer `{buffer}` has length {got}, expected {expected}")
            }
            Error::CapacityExceeded { limit, capacity } => {
                write!(f, "limit `{limit}` exceeded (capacity {capacity})")
            }
            Error::InvalidRequest { field, expected } => write!(f, "request field `{field}`: expected {expected}"),
            Error::TooFewHashIds { needed, got } => write!(
                f,
                "field `hash_ids`: has {got} ids but input_length needs at least {needed} (one per trace block)"
            ),
            Error::ArrivalOutOfOrder { previous_ns, arrival_ns } => write!(
                f,
                "field `timestamp`: arrival {arrival_ns} ns is before the previous request's {previous_ns} ns (must not decrease)"
            ),
            Error::Overflow { what } => write!(f, "{what} overflows 64-bit integers"),
            Error::Poisoned => f.write_str("the fleet failed earlier and must be rebuilt"),
        }
    }
}

impl core::error::Error for Error {}
