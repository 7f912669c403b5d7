//! `brokerlab fleet ...`: the fleet simulator on the host, in rooms by layer (bottom first):
//! `input/` (trace files and formats, decompression, Dynamo sessions), `scenario/` (what a run
//! is: scenario files, the engine's settings), `run/` (the drivers of the core's fleet, their
//! summaries, progress), `cost/` (the step-cost model's calibration and check), `sweep/` (values,
//! points, shards, merge, plots), `report/` (`fleet report`, one file per section), `bench/`
//! (`fleet bench`), and `cli/` on top (clap arguments, flags, the dispatch of each command).

pub mod bench;
pub mod cli;
pub mod cost;
pub mod input;
pub mod report;
pub mod run;
pub mod scenario;
pub mod sweep;

pub use cli::args::FleetCmd;
pub use cli::commands::main;
