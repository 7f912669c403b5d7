//! The three published llm-d tables reproduced (docs/PUBLISHED.md): each published cell beside
//! its simulated value and the error, the figures computed from each simulated request the way
//! inference-perf and llm-d's report generator computed the published ones.
//!
//! By concern: `figures` (inference-perf's per-stage figures and the 2025 aggregation, from
//! per-request outcomes), `cells` (the published cells and their sources), `knee` (assumption
//! A9), `run` (the simulations), `compare` (cell by cell), `markdown` (tables, prose, charts).

pub mod cells;
pub mod compare;
pub mod figures;
pub mod knee;
mod markdown;
pub mod run;
pub mod stages;

pub use compare::{Cell, cells as all_cells, median_error};
pub use markdown::{
    FULL_COMMAND, SECTION, TITLE, cell_table, charts, markdown, median_line, num, page_blocks, report_charts,
};
pub use run::{MAX_REPORT_DIVISOR, RUNS, Tables, run};
pub use stages::stage_markdown;
