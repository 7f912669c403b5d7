//! brokerlab host: binds the no_std core to files, SQLite, threads and the terminal.
#![deny(unsafe_code)]

pub mod audit;
pub mod error;
pub mod fleet;
pub mod plot;
pub mod provenance;
pub mod task;
