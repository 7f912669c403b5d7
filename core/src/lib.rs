//! brokerlab-core: the fixed-memory, allocation-free core of brokerlab.
//!
//! * [`fleet`]: the fleet simulator (chained block hasher, LRU pods, block index, routers, timing).
//! * [`runner`]: the durable task runner (append-only log format, storage trait, state machine).
//!
//! No `alloc`, no `std`: every buffer is provided by the caller, time and randomness are passed in.
#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod fleet;
pub mod runner;
