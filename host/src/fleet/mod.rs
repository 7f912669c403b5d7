//! `brokerlab fleet ...`: the fleet simulator on the host.

pub mod bench;
pub mod bench_json;
pub mod compare;
pub mod cost;
pub mod dynamo;
pub mod engine;
pub mod engine_report;
pub mod experiments;
pub mod fields;
pub mod flag;
pub mod formats;
pub mod import;
pub mod input;
pub mod llmd;
pub mod mooncake;
pub mod progress;
pub mod report;
pub mod route_bench;
pub mod router_config;
pub mod run;
pub mod scenario;
pub mod shard;
pub mod sweep;
pub mod sweep_batched;
pub mod trace;

// The command line's arguments and value parsers, the dispatch of each command, and the
// parsing of a sweep's values: one file per concern, re-exported so paths stay
// `fleet::FleetArgs`, `fleet::main`, `fleet::sweep_values`.
mod cli;
mod commands;
mod replay;
mod sweep_values;

pub use cli::*;
pub use commands::main;
pub use sweep_values::{SweepValue, Values, sweep_values};
