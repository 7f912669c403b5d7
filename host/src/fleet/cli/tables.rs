//! `fleet tables`: the three published llm-d tables reproduced at full size (docs/PUBLISHED.md):
//! every cell's simulated and published value and error, the medians, one chart per table.

use std::path::PathBuf;

use clap::Args;

use crate::error::{CliError, CliResult};
use crate::fleet::report::published;
use crate::fleet::run::progress::{OutputArgs, Progress, Unit};
use crate::fleet::scenario::engine::EngineSettings;
use crate::fleet::sweep::{self, plots::write_chart};

/// `fleet tables` arguments.
#[derive(Debug, Args)]
pub struct TablesArgs {
    /// Output directory (tables.md, tables.json, stages.md, one chart per table).
    #[arg(long, default_value = "out/tables")]
    pub out: PathBuf,
    /// Divide every stage's duration by this (1 = as published; `fleet report` uses 4).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub stage_divisor: u64,
    /// Divide the conversation runs' requests per slot (code-generation 6, reasoning 3) by this,
    /// at least 1 left (1 = as published; `fleet report --shrink N` uses N).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub conversation_divisor: u64,
    /// The shared-prefix read factor of every run's physics profile, a decimal in [0, 1] (at most
    /// six digits after the point; default: the scenarios', 0.45 (A16); docs/MODEL.md "Shared-prefix
    /// reads"). An empirical factor; docs/PUBLISHED.md "Shared-prefix reads as a calibrated
    /// factor (t26j)".
    #[arg(long, value_name = "F")]
    pub shared_kv_read: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Runs `fleet tables`.
pub fn main(a: TablesArgs) -> CliResult<i32> {
    let progress = Progress::new(a.output.quiet, "tables", Unit::Points, Some(published::RUNS));
    let over = EngineSettings { shared_kv_read: a.shared_kv_read.clone(), ..EngineSettings::default() };
    let t = published::run(a.stage_divisor, a.conversation_divisor, &over, &|| progress.inc(1))?;
    progress.finish();
    let md = published::markdown(&t);
    let cells = published::all_cells(&t);
    let json = serde_json::json!({ "runs": t, "cells": cells, "median_error": published::median_error(&cells) });
    let json = serde_json::to_string_pretty(&json).map_err(|e| CliError::failure(format!("tables.json: {e}")))?;
    sweep::write_file(&a.out, "tables.md", md.as_bytes())?;
    sweep::write_file(&a.out, "tables.json", json.as_bytes())?;
    sweep::write_file(&a.out, "stages.md", published::stage_markdown(&t).as_bytes())?;
    for (stem, chart) in published::charts(&t) {
        write_chart(&a.out, &stem, &chart)?;
    }
    sweep::commit_files()?;
    say_raw!("{md}");
    say!(
        "\nwrote {0}/tables.md, {0}/tables.json, {0}/stages.md, {0}/published_table{{1,2,3}}.svg/.png",
        a.out.display()
    );
    Ok(0)
}
